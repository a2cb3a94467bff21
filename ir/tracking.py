"""Mutation tracking for the IR: every edit of a program bumps its version and can be undone.

The Executor caches compiled steps by ``(program._uid, program._version, ...)``, so *every* way
of changing a program must move ``_version`` — not only the ``append_op`` / ``set_attr`` API, but
also ``op.attrs["x"] = 1``, ``del block.ops[3]``, ``op.inputs["X"][0] = "y"``,
``block.vars.pop("w")``, ``var.shape = (2, 3)``. This module makes that hold without touching the
Executor's hot path (it keeps reading one integer):

* :class:`TrackedList` / :class:`TrackedDict` — ``list`` / ``dict`` subclasses whose mutating
  methods call ``owner._bump()`` after the change. ``block.ops``, ``block.vars``,
  ``program.blocks``, ``op.inputs`` / ``op.outputs`` (and each slot's name list), ``op.attrs``
  (and list-valued attributes) and ``op.attr_types`` are such containers. They *are* lists and
  dicts (``isinstance`` holds, equality with plain ones holds, protobuf and NumPy take them), and
  reads are the inherited C methods, so reading costs nothing extra.
* :class:`WrapOnSet` / :class:`TrackedField` — set-only descriptors. A descriptor with
  ``__set__`` but no ``__get__`` intercepts assignment while a read still finds the value in the
  instance ``__dict__`` at plain-attribute speed. ``block.ops = [...]`` (what ``ir/serialize.py``
  and ``Program.clone`` do) wraps the new list; ``var.shape = ...`` bumps the program.
* Versions are stamps drawn from one process-wide counter (:func:`next_stamp`), not per-program
  counts, so a version number is never reused: restoring an old version after a rollback (below)
  cannot collide with a compiled step made for some intermediate state.

Transactions (:func:`atomic`): while one is open, each tracked mutation also appends an undo entry
to a journal; if the body raises, the entries are replayed backwards, which restores every
tracked container, field and version exactly (dict order included, so the program serializes to
the same bytes). Nested transactions are savepoints: an inner failure undoes only its own part.
Outside a transaction the journal costs one global ``is None`` test per mutation.
"""

from __future__ import annotations

import contextlib
import itertools
from typing import Any, Callable, Iterator

_stamps = itertools.count(1)

# The open transaction's undo entries, ``(function, *args)``; None when no transaction is open.
_journal: list | None = None
# The stamp taken when the innermost open transaction (or savepoint) began. A program whose
# version is older has not been bumped inside it yet: only that first bump journals the version
# (a layer call bumps dozens of times).
_since = 0

_MISSING = object()


def next_stamp() -> int:
    """A fresh version number, never handed out before in this process."""
    return next(_stamps)


def bump_program(program) -> None:
    """``Program._bump``: give the program a fresh version (journaling the old one)."""
    if _journal is not None and program._version < _since:
        _journal.append((_restore_field, program, "_version", program._version))
    program._version = next(_stamps)


def journal_active() -> bool:
    """Whether a transaction is open."""
    return _journal is not None


def record(undo: Callable, *args: Any) -> None:
    """Add an undo step ``undo(*args)`` to the open transaction (no-op outside one)."""
    if _journal is not None:
        _journal.append((undo, *args))


def record_field(obj: Any, name: str) -> None:
    """Journal ``obj``'s field ``name`` (its instance-dict value) before it is assigned."""
    if _journal is not None:
        _journal.append((_restore_field, obj, name, obj.__dict__.get(name, _MISSING)))


def transactional(fn: Callable) -> Callable:
    """``fn`` made all-or-nothing: if a call raises, every tracked IR mutation it made is undone.

    The outermost call opens the journal; a nested call is a savepoint that undoes only its own
    part. Unique-name counters are not rolled back (as in Paddle): the names a failed call drew
    stay used, so later names never collide with anything it may have shown (in its error
    message, say). Snapshotting them would cost O(#names) a call: there is one counter a layer. The logic is inlined in the one wrapper frame: layer calls are
    frequent, and each frame also lengthens the walk that records an op's callstack.
    """

    def call(*args, **kwargs):
        global _journal, _since
        journal, since = _journal, _since
        _since = next(_stamps)
        if journal is not None:  # nested: a savepoint
            mark = len(journal)
            try:
                return fn(*args, **kwargs)
            except BaseException:
                _undo_to(mark)
                raise
            finally:
                _since = since
        _journal = []
        try:
            return fn(*args, **kwargs)
        except BaseException:
            _undo_to(0)
            raise
        finally:
            _journal, _since = None, since

    return call


def atomic_call(fn: Callable, *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)`` as a transaction (see :func:`transactional`)."""
    return transactional(fn)(*args, **kwargs)


def record_fields(obj: Any, names: tuple[str, ...]) -> None:
    """Journal several fields of ``obj`` at once (see :func:`record_field`)."""
    if _journal is not None:
        d = obj.__dict__
        for name in names:
            _journal.append((_restore_field, obj, name, d.get(name, _MISSING)))


@contextlib.contextmanager
def atomic() -> Iterator[None]:
    """Undo every tracked IR mutation made inside the block if it raises (see
    :func:`transactional`).

    >>> # with atomic(): layer.fc(x_from_another_program, 10)   # raises; nothing was added
    """
    # A context manager cannot wrap the `with` body in a function call: open the transaction
    # by hand instead, with the same rules as `transactional`.
    global _journal, _since
    journal, since = _journal, _since
    _since = next(_stamps)
    outermost = journal is None
    if outermost:
        _journal = []
    mark = len(_journal)
    try:
        yield
    except BaseException:
        _undo_to(mark)
        raise
    finally:
        _since = since
        if outermost:
            _journal = None


def _undo_to(mark: int) -> None:
    journal = _journal
    while len(journal) > mark:
        fn, *args = journal.pop()
        fn(*args)


# -- undo steps ---------------------------------------------------------------------------------
def _restore_list(lst: list, items: list) -> None:
    list.__setitem__(lst, slice(None), items)


def _truncate_list(lst: list, length: int) -> None:
    list.__delitem__(lst, slice(length, None))


def _restore_dict(d: dict, items: list) -> None:
    dict.clear(d)
    dict.update(d, items)


def _restore_field(obj: Any, name: str, old: Any) -> None:
    if old is _MISSING:
        obj.__dict__.pop(name, None)
    else:
        obj.__dict__[name] = old


# -- containers ---------------------------------------------------------------------------------
class TrackedList(list):
    """A list that bumps ``owner``'s version on every change (see the module docstring)."""

    __slots__ = ("_owner",)

    @classmethod
    def of(cls, owner: Any, items=()) -> "TrackedList":
        """A tracked copy of ``items`` reporting to ``owner``."""
        lst = cls(items)
        lst._owner = owner
        return lst

    def __reduce_ex__(self, protocol):
        return _rebuild_tracked, (type(self), list(self), self._owner)

    def _snapshot(self) -> None:
        if _journal is not None:
            _journal.append((_restore_list, self, list(self)))

    def append(self, item) -> None:
        if _journal is not None:
            _journal.append((_truncate_list, self, len(self)))
        list.append(self, item)
        self._owner._bump()

    def extend(self, items) -> None:
        if _journal is not None:
            _journal.append((_truncate_list, self, len(self)))
        list.extend(self, items)
        self._owner._bump()

    def __iadd__(self, items):
        self.extend(items)
        return self

    def __imul__(self, n):
        self._snapshot()
        list.__imul__(self, n)
        self._owner._bump()
        return self

    def insert(self, index, item) -> None:
        self._snapshot()
        list.insert(self, index, item)
        self._owner._bump()

    def pop(self, index=-1):
        self._snapshot()
        item = list.pop(self, index)
        self._owner._bump()
        return item

    def remove(self, item) -> None:
        self._snapshot()
        list.remove(self, item)
        self._owner._bump()

    def clear(self) -> None:
        self._snapshot()
        list.clear(self)
        self._owner._bump()

    def sort(self, *args, **kwargs) -> None:
        self._snapshot()
        list.sort(self, *args, **kwargs)
        self._owner._bump()

    def reverse(self) -> None:
        self._snapshot()
        list.reverse(self)
        self._owner._bump()

    def __setitem__(self, index, value) -> None:
        self._snapshot()
        list.__setitem__(self, index, value)
        self._owner._bump()

    def __delitem__(self, index) -> None:
        self._snapshot()
        list.__delitem__(self, index)
        self._owner._bump()


def _rebuild_tracked(cls, items, owner):
    obj = cls(items)
    obj._owner = owner
    return obj


class TrackedDict(dict):
    """A dict that bumps ``owner``'s version on every change; :class:`SlotDict` and
    :class:`AttrDict` also convert the values they store (see the module docstring)."""

    __slots__ = ("_owner",)

    @classmethod
    def of(cls, owner: Any, items=()) -> "TrackedDict":
        """A tracked copy of mapping ``items`` reporting to ``owner``."""
        d = cls()
        d._owner = owner
        d._fill(items)
        return d

    def _fill(self, items) -> None:
        dict.update(self, items)

    def _wrap(self, value):
        return value

    def __reduce_ex__(self, protocol):
        return _rebuild_tracked, (type(self), dict(self), self._owner)

    def _snapshot(self) -> None:
        if _journal is not None:
            _journal.append((_restore_dict, self, list(dict.items(self))))

    def __setitem__(self, key, value) -> None:
        if _journal is not None:
            old = dict.get(self, key, _MISSING)
            _journal.append((dict.__delitem__, self, key) if old is _MISSING else (dict.__setitem__, self, key, old))
        dict.__setitem__(self, key, value)
        self._owner._bump()

    def __delitem__(self, key) -> None:
        self._snapshot()
        dict.__delitem__(self, key)
        self._owner._bump()

    def pop(self, key, *default):
        if key not in self:
            return dict.pop(self, key, *default)
        self._snapshot()
        value = dict.pop(self, key)
        self._owner._bump()
        return value

    def popitem(self):
        self._snapshot()
        item = dict.popitem(self)
        self._owner._bump()
        return item

    def clear(self) -> None:
        self._snapshot()
        dict.clear(self)
        self._owner._bump()

    def update(self, *args, **kwargs) -> None:
        self._snapshot()
        self._fill(dict(*args, **kwargs))
        self._owner._bump()

    def __ior__(self, other):
        self.update(other)
        return self

    def setdefault(self, key, default=None):
        if key in self:
            return dict.__getitem__(self, key)
        self[key] = default
        return dict.__getitem__(self, key)


class _WrappingDict(TrackedDict):
    """A :class:`TrackedDict` whose stored values pass through :meth:`_wrap`."""

    __slots__ = ()

    def _fill(self, items) -> None:
        dict.update(self, {key: self._wrap(value) for key, value in items.items()})

    def __setitem__(self, key, value) -> None:
        TrackedDict.__setitem__(self, key, self._wrap(value))


class SlotDict(_WrappingDict):
    """``op.inputs`` / ``op.outputs``: slot name → a :class:`TrackedList` of variable names.

    A list stored here is copied into the op's own tracked list (so a later edit of the caller's
    list does not reach the op behind the version's back).
    """

    __slots__ = ()

    def _wrap(self, value):
        if isinstance(value, str):
            raise TypeError(f"an op slot holds a list of variable names, got the string {value!r}")
        return TrackedList.of(self._owner, value)


class AttrDict(_WrappingDict):
    """``op.attrs``: list-valued attributes are stored as :class:`TrackedList` so that an in-place
    edit (``op.attrs["shape"][0] = 2``) bumps the version too."""

    __slots__ = ()

    def _wrap(self, value):
        if isinstance(value, list) and not (type(value) is TrackedList and value._owner is self._owner):
            return TrackedList.of(self._owner, value)
        return value


# -- fields -------------------------------------------------------------------------------------
class WrapOnSet:
    """A set-only descriptor: assignment stores ``convert(owner, value)`` in the instance dict and
    bumps the owner (unless ``bump=False``); reads are plain instance-dict reads (no ``__get__``).
    The old value is journaled either way."""

    __slots__ = ("name", "convert", "bump")

    def __init__(self, convert: Callable[[Any, Any], Any] | None = None, *, bump: bool = True) -> None:
        self.convert = convert
        self.bump = bump

    def __set_name__(self, owner, name: str) -> None:
        self.name = name

    def __set__(self, obj, value) -> None:
        d = obj.__dict__
        if _journal is not None:
            _journal.append((_restore_field, obj, self.name, d.get(self.name, _MISSING)))
        d[self.name] = value if self.convert is None else self.convert(obj, value)
        if self.bump:
            obj._bump()


class TrackedField:
    """A set-only descriptor for a :class:`~fluidjax.ir.variable.Variable` field: once the
    variable is attached to its block (``block.vars[var.name] is var``), assigning the field
    bumps the program's version. Before that — while a parser fills a fresh variable — it is a
    plain store. ``kind`` "shape" stores a tuple and refuses a dim below -1 (on an attached
    variable); "dtype" normalizes the dtype name. Checks are inlined: shape inference assigns
    three fields per op output."""

    __slots__ = ("name", "kind")

    def __init__(self, kind: str = "") -> None:
        self.kind = kind

    def __set_name__(self, owner, name: str) -> None:
        self.name = name

    def __set__(self, obj, value) -> None:
        d = obj.__dict__
        block = d.get("block")
        if block is None or block.vars.get(d.get("name")) is not obj:
            d[self.name] = value  # not attached (a parser filling it, or a detached variable)
            return
        kind = self.kind
        if kind == "shape":
            if value.__class__ is not tuple:
                value = tuple(int(v) for v in value)
            if value and min(value) < -1:
                from .errors import ShapeError

                raise ShapeError(f"variable {d['name']!r}: dim {min(value)} in shape {value} is not allowed; "
                                 "a dim is a size >= 0, or -1 for unknown")
        elif kind == "dtype" and value is not None and not (value.__class__ is str and value in _DTYPE_NAMES):
            from .dtypes import normalize

            value = normalize(value)
        name = self.name
        program = block.program
        if _journal is not None:
            _journal.append((_restore_field, obj, name, d.get(name, _MISSING)))
            if program._version < _since:
                _journal.append((_restore_field, program, "_version", program._version))
        d[name] = value
        program._version = next(_stamps)  # = program._bump(), inlined


from .dtypes import _ENUM as _DTYPE_NAMES  # noqa: E402  (canonical dtype names)
