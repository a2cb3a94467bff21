"""The runtime scope: named holders that stay empty until a value of some kind is asked for.

As in the seeds (000/001): ``scope.var(name)`` makes a holder that holds nothing;
``holder.get_mutable(kind)`` creates a value of that kind on first use (a :class:`LoDTensor`, a
string, a list, a child :class:`Scope`); ``holder.get(kind)`` reads it and raises ``TypeError``
if it holds another kind.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any, Iterator

from .lod_tensor import LoDTensor

_FACTORIES = {LoDTensor: LoDTensor, str: str, list: list, int: int, float: float}


class ScopeVariable:
    """A lazily-filled holder of one value of any kind."""

    def __init__(self, name: str, lock: "threading.RLock | None" = None) -> None:
        self.name = name
        self._kind: type | None = None
        self._value: Any = None
        self._lock = lock     # its scope tree's state lock, handed to the LoDTensor it holds

    def is_initialized(self) -> bool:
        """Whether the holder holds a value yet."""
        return self._kind is not None

    def holds(self, kind: type) -> bool:
        """Whether the held value is of ``kind``."""
        return self._kind is kind

    @property
    def kind(self) -> type | None:
        """The kind of the held value (None when empty)."""
        return self._kind

    def get_mutable(self, kind: type):
        """The held value of ``kind``, created empty on first use.

        Holding a value of another kind is a ``TypeError`` (as ``Variable::GetMutable<T>``).
        """
        if self._kind is None:
            factory = Scope if kind is Scope else _FACTORIES.get(kind, kind)
            self._value = factory()
            self._kind = kind
            if kind is LoDTensor:
                self._value._state_lock = self._lock   # its reads take turns with runs
        elif self._kind is not kind:
            raise TypeError(f"variable {self.name!r} holds a {self._kind.__name__}, not a {kind.__name__}")
        return self._value

    def get(self, kind: type):
        """The held value, which must be of ``kind``."""
        if self._kind is None:
            raise TypeError(f"variable {self.name!r} holds nothing yet (asked for a {kind.__name__})")
        if self._kind is not kind:
            raise TypeError(f"variable {self.name!r} holds a {self._kind.__name__}, not a {kind.__name__}")
        return self._value

    def set(self, value: Any) -> None:
        """Hold a plain value (a string, a list of ints ...), replacing what was held."""
        if isinstance(value, LoDTensor):
            value._state_lock = self._lock
        self._kind = type(value)
        self._value = value

    def get_tensor(self) -> LoDTensor:
        """The held :class:`LoDTensor` (created empty if the holder is empty)."""
        return self.get_mutable(LoDTensor)

    def __repr__(self) -> str:
        what = "empty" if self._kind is None else repr(self._value)
        return f"<ScopeVariable {self.name!r}: {what}>"


class Scope:
    """Named runtime variables; a child scope falls back to its parent for lookups."""

    def __init__(self, parent: "Scope | None" = None) -> None:
        self.parent = parent
        self._vars: dict[str, ScopeVariable] = {}
        self._kids: list[Scope] = []
        # Runs, saves and reads of this scope tree's state take turns on one lock, the root's
        # (see state_lock); a child scope shares it.
        self._lock = parent._lock if parent is not None else threading.RLock()

    def var(self, name: str) -> ScopeVariable:
        """The holder ``name`` in this scope, created empty if missing here."""
        holder = self._vars.get(name)
        if holder is None:
            holder = self._vars[name] = ScopeVariable(name, self._lock)
        return holder

    def find_var(self, name: str) -> ScopeVariable | None:
        """The holder ``name`` here or in an ancestor; None if none has it."""
        scope: Scope | None = self
        while scope is not None:
            holder = scope._vars.get(name)
            if holder is not None:
                return holder
            scope = scope.parent
        return None

    def find_local_var(self, name: str) -> ScopeVariable | None:
        """The holder ``name`` of this scope only (no parent lookup)."""
        return self._vars.get(name)

    def new_scope(self) -> "Scope":
        """A child scope whose lookups fall back to this one."""
        kid = Scope(self)
        self._kids.append(kid)
        return kid

    def drop_kids(self) -> None:
        """Forget the child scopes."""
        self._kids.clear()

    def erase(self, names) -> None:
        """Remove the holders ``names`` from this scope."""
        for n in names:
            self._vars.pop(n, None)

    def local_var_names(self) -> list[str]:
        """The names held by this scope itself."""
        return list(self._vars)

    def __iter__(self) -> Iterator[str]:
        return iter(self._vars)

    def __contains__(self, name: str) -> bool:
        return self.find_var(name) is not None

    def __repr__(self) -> str:
        """``<Scope N vars>``, then one line per variable: kind, shape, dtype, size."""
        from .display import scope_text  # display only

        with state_lock(self):      # the values between two runs (a run donates their buffers)
            return scope_text(self)

    def _repr_html_(self) -> str:
        from .display import scope_html

        with state_lock(self):
            return scope_html(self)


def state_lock(scope: Scope) -> "threading.RLock":
    """The lock on which everything that uses ``scope``'s state takes turns: the Executor's runs
    (a run reads the state, donates its buffers to XLA and commits the new values), the saves of
    ``fj.io`` (which copy every value out under it, so a save is one committed state), loads, and
    reads of a held tensor (``np.asarray(scope.find_var(n).get_tensor())``). One lock per scope
    tree: the root's. Re-entrant, so a thread that holds it may read and run.

    >>> # with state_lock(scope):      # several reads that see one state, between two runs
    >>> #     w, b = (np.array(scope.find_var(n).get_tensor()) for n in ("fc_0.w_0", "fc_0.b_0"))
    """
    while scope.parent is not None:
        scope = scope.parent
    return scope._lock


_global_scope = Scope()


def global_scope() -> Scope:
    """The scope an Executor uses when ``run`` is given none."""
    return _global_scope


def switch_scope(scope: Scope) -> Scope:
    """Make ``scope`` the global scope; return the previous one."""
    global _global_scope
    previous, _global_scope = _global_scope, scope
    return previous


@contextlib.contextmanager
def scope_guard(scope: Scope) -> Iterator[Scope]:
    """Make ``scope`` the global scope inside the ``with`` block (Fluid's ``fluid.scope_guard``):
    ``Executor.run`` without ``scope=``, ``global_scope()`` and the save/load functions use it.

    >>> with scope_guard(Scope()):
    ...     pass   # exe.run(startup); exe.run(main, ...) keep their state in the new scope
    """
    if not isinstance(scope, Scope):
        raise TypeError(f"scope_guard needs a fluidjax Scope, got {type(scope).__name__}")
    previous = switch_scope(scope)
    try:
        yield scope
    finally:
        switch_scope(previous)
