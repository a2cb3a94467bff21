"""The Executor: checks feeds, lowers a block to one ``jax.jit`` function, runs it, keeps state.

A block lowers to ``step(mutable_state, const_state, feeds, seed) -> (new_state, fetches)``:

- *state* is the persistable variables the block reads or writes (parameters, optimizer
  accumulators, statistics). Those it writes are donated, so an update happens in place;
  those it only reads are not (donating them would free buffers the scope still holds).
- *intermediates* exist only inside XLA unless fetched: they never enter the :class:`Scope`.
- the compiled step is cached by the program's identity and mutation counter, the feed names
  and the fetch list; ``jax.jit`` caches per feed shape, so the same step never retraces.
"""

from __future__ import annotations

import dataclasses
import secrets
import weakref
from typing import Any, Mapping, Sequence

import jax
import numpy as np

from ..ir import dtypes, registry
from ..ir.errors import FeedError, UninitializedVariableError
from ..ir.program import Program, default_main_program
from ..ir.variable import Variable
from .context import make_key
from .lod_tensor import LoDTensor
from .lower import run_ops
from .places import Place
from .scope import Scope, global_scope


def _fetch_name(item) -> str:
    if isinstance(item, Variable):
        return item.name
    if isinstance(item, str):
        return item
    raise TypeError(f"fetch_list items must be Variables or variable names, got {item!r}")


@dataclasses.dataclass
class _Plan:
    """What running one block for one feed/fetch signature needs, worked out once."""

    program: Program
    ops: list                 # the ops that run inside jit, in order
    host_ops: list            # ops that run on the host before (string fills)
    feed_names: tuple[str, ...]
    fetch_names: tuple[str, ...]
    mutable_state: tuple[str, ...]   # read and written: donated
    const_state: tuple[str, ...]     # only read
    written_state: tuple[str, ...]   # persistable outputs
    random: bool
    feed_dtypes: dict[str, np.dtype] = dataclasses.field(default_factory=dict)
    feed_shapes: dict[str, tuple[int, ...]] = dataclasses.field(default_factory=dict)
    # scope -> {which state: [LoDTensor]}: where this plan's state lives in a scope (weak, so a
    # dropped scope takes its arrays with it).
    tensor_cache: weakref.WeakKeyDictionary = dataclasses.field(default_factory=weakref.WeakKeyDictionary)
    step: Any = None
    first_reader: dict[str, Any] = dataclasses.field(default_factory=dict)


class Executor:
    """Runs programs on a device (``fj.CPUPlace()``, ``fj.CUDAPlace(i)``, ``fj.TPUPlace(i)``).

    >>> exe = Executor()                              # JAX's default device
    >>> # exe.run(fj.default_startup_program())       # allocate and initialise parameters
    >>> # loss, = exe.run(feed={"x": xs}, fetch_list=[loss])
    """

    def __init__(self, place: Place | None = None) -> None:
        self.place = place
        self._device = place.jax_device() if place is not None else None
        self._plans: dict[tuple, _Plan] = {}
        self._runs: dict[int, int] = {}
        self._default_seed = secrets.randbits(31)
        self.trace_count = 0  # how many times a step function was traced (tests check caching)

    # -- public ---------------------------------------------------------------------------------
    def run(self, program: Program | None = None, feed: Mapping[str, Any] | None = None,
            fetch_list: Sequence[Variable | str] | None = None, scope: Scope | None = None,
            return_numpy: bool = True) -> list:
        """Run ``program``'s global block and return the fetched values (NumPy by default).

        ``feed`` maps data-variable names to arrays (or :class:`LoDTensor`); they are checked
        against the program before anything is compiled. Persistable variables are read from and
        written to ``scope`` (the global scope by default); nothing else is stored there.
        """
        program, scope, plan, args = self._prepare(program, feed, fetch_list, scope)
        self._run_host_ops(plan, scope)
        if plan.random:
            self._runs[program._uid] = self._runs.get(program._uid, 0) + 1
        if self._device is not None:
            with jax.default_device(self._device):
                new_state, fetches = plan.step(*args)
        else:
            new_state, fetches = plan.step(*args)
        for tensor, value in zip(self._written_tensors(plan, scope), new_state):
            tensor._value = value
        if return_numpy:
            return [np.asarray(v) for v in fetches]
        return list(fetches)

    def lower(self, program: Program | None = None, feed: Mapping[str, Any] | None = None,
              fetch_list: Sequence[Variable | str] | None = None, scope: Scope | None = None) -> jax.stages.Lowered:
        """The ``jax.stages.Lowered`` step that ``run`` with the same arguments would execute.

        Nothing runs and the scope is not changed; ``.compile().as_text()`` shows the optimized HLO.
        """
        _, _, plan, args = self._prepare(program, feed, fetch_list, scope)
        return plan.step.lower(*args)

    def _prepare(self, program, feed, fetch_list, scope):
        """Check the feeds, find the plan and gather its state: everything a run needs first."""
        program = default_main_program() if program is None else program
        if not isinstance(program, Program):
            raise TypeError(f"Executor.run expects a fluidjax Program, got {type(program).__name__}")
        scope = global_scope() if scope is None else scope
        feed = dict(feed or {})
        fetch_names = tuple(_fetch_name(f) for f in (fetch_list or []))
        plan = self._plan(program, tuple(sorted(feed)), fetch_names)
        feeds = self._check_feeds(program, plan, feed)
        for hook in program.run_hooks:
            hook(scope)
        mutable = self._gather(plan, plan.mutable_state, scope)
        const = self._gather(plan, plan.const_state, scope)
        seed = None
        if plan.random:
            count = self._runs.get(program._uid, 0)
            seed = np.array([program.random_seed or self._default_seed, count], np.uint32)
        return program, scope, plan, (mutable, const, feeds, seed)

    def close(self) -> None:
        """Forget compiled steps (kept for Paddle's API)."""
        self._plans.clear()

    # -- planning --------------------------------------------------------------------------------
    def _plan(self, program: Program, feed_names: tuple[str, ...], fetch_names: tuple[str, ...]) -> _Plan:
        key = (program._uid, program._version, feed_names, fetch_names)
        plan = self._plans.get(key)
        if plan is None:
            plan = self._make_plan(program, feed_names, fetch_names)
            plan.step = self._compile(plan)
            # A program changed since its older plans were made: they can never run again, so
            # free their compiled code (a notebook that builds and runs in turns would pile them up).
            for old in [k for k in self._plans if k[0] == program._uid and k[1] != program._version]:
                del self._plans[old]
            self._plans[key] = plan
        return plan

    def _make_plan(self, program: Program, feed_names, fetch_names) -> _Plan:
        block = program.global_block()
        for name in feed_names:
            if block.find_var(name) is None:
                raise FeedError(f"feed {name!r} is not a variable of the program; its data variables are "
                                f"{[v.name for v in block.vars.values() if v.is_data]}")
        for name in fetch_names:
            if block.find_var(name) is None:
                raise KeyError(f"fetch {name!r} is not a variable of the program")
        feeds = set(feed_names)

        # Keep the ops the fetches need and every op that writes state (its effect is the point).
        needed = set(fetch_names)
        kept = []
        for op in reversed(block.ops):
            writes_state = any(block.var(n).persistable for n in op.output_arg_names)
            if writes_state or needed.intersection(op.output_arg_names):
                kept.append(op)
                needed.update(op.input_arg_names)
        kept.reverse()

        host_ops = [op for op in kept if registry.get(op.type).host]
        jit_ops = [op for op in kept if not registry.get(op.type).host]
        defined: set[str] = set(feeds)
        external: dict[str, Any] = {}
        written: list[str] = []
        for op in jit_ops:
            for name in op.input_arg_names:
                if name not in defined and name not in external:
                    external[name] = op
            for name in op.output_arg_names:
                defined.add(name)
                if block.var(name).persistable and name not in written:
                    written.append(name)
        for name in fetch_names:
            if name not in defined and name not in external:
                external[name] = None
        for name, reader in external.items():
            var = block.var(name)
            if not var.persistable:
                where = f" (read by op {reader.type!r} at {reader.location})" if reader is not None else ""
                hint = "it is a data variable: feed it" if var.is_data else \
                    "no op before its reader computes it and it is not persistable"
                raise FeedError(f"variable {name!r} has no value{where}: {hint}")
        written_set = set(written)
        return _Plan(
            program=program, ops=jit_ops, host_ops=host_ops, feed_names=feed_names,
            fetch_names=fetch_names,
            mutable_state=tuple(n for n in external if n in written_set),
            const_state=tuple(n for n in external if n not in written_set),
            written_state=tuple(written),
            random=any(registry.get(op.type).random or "seed" in registry.get(op.type).attrs
                       for op in jit_ops),
            first_reader=external,
            feed_dtypes={n: dtypes.to_numpy(block.var(n).dtype) for n in feed_names if block.var(n).dtype},
            feed_shapes={n: block.var(n).shape for n in feed_names},
        )

    def _compile(self, plan: _Plan):
        ops, fetch_names, written = plan.ops, plan.fetch_names, plan.written_state

        names = plan.const_state + plan.mutable_state + plan.feed_names

        # Positional tuples, not dicts: they flatten faster on every call (this is the hot path).
        def step(mutable, const, feeds, seed):
            self.trace_count += 1
            env: dict[str, Any] = dict(zip(names, const + mutable + feeds))
            base_key = None
            if seed is not None:
                base_key = jax.random.fold_in(make_key(seed[0]), seed[1])
            run_ops(ops, env, base_key)
            return tuple(env[n] for n in written), [env[n] for n in fetch_names]

        return jax.jit(step, donate_argnums=(0,))

    # -- feeds and state -----------------------------------------------------------------------
    def _check_feeds(self, program: Program, plan: _Plan, feed: Mapping[str, Any]) -> tuple:
        block = program.global_block()
        out = []
        for name in plan.feed_names:
            value = feed[name]
            if isinstance(value, LoDTensor):
                value = value.value()
            if not isinstance(value, (np.ndarray, jax.Array)):
                value = np.asarray(value)
            shape = value.shape
            declared = plan.feed_shapes[name]
            if value.dtype != plan.feed_dtypes[name]:  # a NumPy dtype compare: cheap on the hot path
                var = block.var(name)
                raise FeedError(f"feed {name!r} has dtype {dtypes.normalize(value.dtype)}, but the variable "
                                f"is declared {var.dtype} with shape {var.shape}; convert it "
                                f"(x.astype({var.dtype!r}))")
            if len(shape) != len(declared) or any(d >= 0 and d != s for d, s in zip(declared, shape)):
                raise FeedError(f"feed {name!r} has shape {tuple(shape)}, but the variable is declared "
                                f"{declared} (-1 takes any size)")
            if self._device is not None:
                value = jax.device_put(value, self._device)
            out.append(value)
        return tuple(out)

    def _gather(self, plan: _Plan, names: tuple[str, ...], scope: Scope) -> tuple:
        """The values of state ``names`` in ``scope``; a clear error for one that has none."""
        cached = plan.tensor_cache.setdefault(scope, {})
        tensors = cached.get(names)
        if tensors is not None:
            values = tuple(t._value for t in tensors)
            if not any(v is None for v in values):
                return values
        found = []
        for name in names:
            holder = scope.find_var(name)
            tensor = holder.get(LoDTensor) if holder is not None and holder.holds(LoDTensor) else None
            if tensor is None or not tensor._is_initialized():
                reader = plan.first_reader.get(name)
                where = f" (read by op {reader.type!r} at {reader.location})" if reader is not None else ""
                raise UninitializedVariableError(
                    f"variable {name!r}{where} has no value in the scope: run the startup program "
                    "first, e.g. exe.run(fj.default_startup_program())")
            found.append(tensor)
        # The LoDTensor objects stay in their holders, so later runs read them directly.
        cached[names] = found
        return tuple(t._value for t in found)

    def _written_tensors(self, plan: _Plan, scope: Scope) -> list[LoDTensor]:
        """The tensors a run writes its new state into (created in ``scope`` on first use)."""
        cached = plan.tensor_cache.setdefault(scope, {})
        tensors = cached.get("written")
        if tensors is None:
            tensors = cached["written"] = [(scope.find_var(n) or scope.var(n)).get_mutable(LoDTensor)
                                           for n in plan.written_state]
        return tensors

    def _run_host_ops(self, plan: _Plan, scope: Scope) -> None:
        for op in plan.host_ops:
            registry.get(op.type).compute(op, scope)
