"""A program as a pure JAX function: ``fj.to_jax`` and ``fj.from_jax`` (docs/jax.md).

``fn, variables = to_jax(program, feed=[...], fetch_list=[...])`` gives

- ``variables = {"params": {...}, "state": {...}}``: flat dicts keyed by the program's (Paddle's)
  variable names, copied from the scope. ``params``: the trainable parameters the fetches read;
  ``state``: every other persistable value they read (batch-norm statistics, counters, tables).
- ``fn(variables, *inputs, rng=None) -> (outputs, new_state)``: ``inputs`` in feed order (or one
  dict keyed by feed name), ``outputs`` a list in fetch order, ``new_state`` a dict of every
  persistable variable the ops wrote (a batch-norm's running statistics in training mode).

``fn`` is the Executor's own step: the same plan (:meth:`Executor._make_plan`: the ops the fetches
need, in order) lowered by the same :func:`~.executor.step_function`, so every number equals
``Executor.run``'s. It is pure, so ``jax.jit``, ``grad``, ``vmap``, ``shard_map``,
``jax.eval_shape`` and ``jax.export`` take it as it is, and optax updates ``params``.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from ..ir import dtypes, registry
from ..ir.errors import FeedError, FluidJaxError, OpRuntimeError, UninitializedVariableError
from ..ir.names import OP_ROLE_LRSCHED, OP_ROLE_OPTIMIZE
from ..ir.program import Program, default_main_program
from ..ir.variable import Variable
from . import flags
from .context import PRNG_IMPL, make_key
from .executor import Executor, _ROOMS_GROWN, step_function
from .feeds import check_lod_feed
from .lod_tensor import LoDTensor
from .lod_value import LoDValue
from .lower import ops_with_sub_blocks
from .parallel import CompiledProgram
from .scope import Scope, global_scope, state_lock

__all__ = ["to_jax", "from_jax", "executor_key", "JaxFunction", "NotConvertibleError", "MissingRngError",
           "VariablesError"]


class NotConvertibleError(FluidJaxError, ValueError):
    """``to_jax`` refused a program: some of its ops cannot live inside a pure JAX function."""


class MissingRngError(FluidJaxError, TypeError):
    """The function draws random numbers (an op asked for a key) and was called without ``rng``."""


class VariablesError(FluidJaxError, KeyError):
    """``variables`` lacks a value the function reads, or is not ``{"params": ..., "state": ...}``."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


# Ops that act on the host (Python callbacks, prints, file and reader I/O): a pure function
# cannot hold them.
_HOST_OP_ADVICE = {
    "py_func": "compute it in JAX (jax.pure_callback if it must stay Python) after calling fn",
    "print": "remove the Print op; print fn's outputs (or use jax.debug.print)",
    "read": "feed the data as fn's inputs instead of reading it inside the program",
    "create_py_reader": "feed the data as fn's inputs instead of a reader",
    "create_double_buffer_reader": "feed the data as fn's inputs instead of a reader",
}
# Ops whose output size depends on the data: inside the Executor they return a capacity of rows
# with a count (docs/ops_data_dependent.md); a JAX function's outputs are plain arrays.
_DATA_DEPENDENT = frozenset({"where_index", "masked_select", "unique", "multiclass_nms3", "matrix_nms",
                             "generate_proposals_v2", "distribute_fpn_proposals"})
_DATA_DEPENDENT_ADVICE = ("its output size depends on the data: keep it out of fn (fetch its inputs and "
                          "run it with Executor.run), or use a fixed-size form (jnp.where with a fill value, top_k)")


def executor_key(seed: int, run: int = 0) -> jax.Array:
    """The key that makes ``fn`` draw the numbers ``Executor.run`` draws in its ``run``-th run
    (counted from 0, per program and Executor) of a program whose ``random_seed`` is ``seed``:
    ``jax.random.fold_in(jax.random.key(seed, impl="rbg"), run)``. Each random op folds its
    position in the plan into it, as the Executor does.

    >>> # fn(variables, x, rng=fj.lowering.jax_function.executor_key(program.random_seed, 0))
    """
    return jax.random.fold_in(make_key(np.uint32(seed)), np.uint32(run))


class JaxFunction:
    """``fn(variables, *inputs, rng=None) -> (outputs, new_state)`` made by :func:`to_jax`.

    Attributes: ``feed_names``, ``fetch_names``, ``input_specs`` (a ``jax.ShapeDtypeStruct`` per
    feed, unknown dims symbolic), ``param_names``, ``state_names``, ``written_names`` (the keys of
    ``new_state``), ``needs_rng`` (the program has random ops: it may draw, and does unless they
    run in inference mode or with fixed seeds), ``program`` (the program it lowers) and ``trace_count``.
    """

    def __init__(self, program: Program, plan, param_names, state_names) -> None:
        self.program = program
        self._plan = plan
        self.feed_names: tuple[str, ...] = tuple(plan.feed_names)
        self.fetch_names: tuple[str, ...] = tuple(plan.fetch_names)
        self.param_names: tuple[str, ...] = tuple(param_names)
        self.state_names: tuple[str, ...] = tuple(state_names)
        self.written_names: tuple[str, ...] = tuple(plan.written_state)
        self.needs_rng: bool = bool(plan.random)
        self.trace_count = 0
        # Jitted (not donated): called outside a trace, fn runs the Executor's XLA computation, not
        # op by op (whose rounding differs); inside a user's jit the call is inlined.
        self._step = jax.jit(step_function(plan, on_trace=self._traced))
        self._fixed_key = make_key(np.uint32(program.random_seed)) if plan.fixed_random_ops else None
        self.input_specs = _input_specs([program.global_block().var(n) for n in self.feed_names])
        self.__name__ = "fluidjax_program"
        self.__qualname__ = self.__name__
        self.__doc__ = (f"fn(variables, {', '.join(self.feed_names)}, rng=None) -> "
                        f"([{', '.join(self.fetch_names)}], new_state)")

    def _traced(self) -> None:
        self.trace_count += 1

    def lod_input(self, name: str, value: LoDTensor) -> LoDValue:
        """Feed ``name``'s :class:`LoDTensor` as the padded :class:`LoDValue` the Executor makes (the
        same buckets). A LoDValue is a pytree whose LoD sizes are static: pass it to ``jax.jit(fn)``
        (each bucket compiles once, as in the Executor)."""
        var = self.program.global_block().var(name)
        return check_lod_feed(name, value, dtypes.to_numpy(var.dtype), var.shape, var, bucket_sequences=False)

    def __call__(self, variables: Mapping[str, Mapping[str, Any]], *inputs, rng: jax.Array | None = None):
        if len(inputs) == 1 and isinstance(inputs[0], Mapping):
            given = inputs[0]
            unknown = sorted(set(given) - set(self.feed_names))
            if unknown:
                raise FeedError(f"inputs {unknown} are not feeds of this function; its feeds are {list(self.feed_names)}")
            missing = [n for n in self.feed_names if n not in given]
            if missing:
                raise FeedError(f"inputs {missing} are missing; this function's feeds are {list(self.feed_names)}")
            inputs = tuple(given[n] for n in self.feed_names)
        if len(inputs) != len(self.feed_names):
            raise FeedError(f"fn takes {len(self.feed_names)} input(s) ({', '.join(self.feed_names)}), "
                            f"got {len(inputs)}")
        feeds = tuple(self._input(name, value) for name, value in zip(self.feed_names, inputs))
        values = _flat_variables(variables)
        plan = self._plan
        try:
            mutable = tuple(values[n] for n in plan.mutable_state)
            const = tuple(values[n] for n in plan.const_state)
        except KeyError as exc:
            name = exc.args[0]
            part = "params" if name in self.param_names else "state"
            raise VariablesError(f"variables[{part!r}] has no value of {name!r}, which the program reads "
                                 f"(variables from fj.to_jax hold it)") from None
        seed = None
        if plan.random and rng is not None:
            rng = _as_key(rng)
            seed = (self._fixed_key if self._fixed_key is not None else rng, rng)
        try:
            outs = self._step(mutable, const, feeds, seed)
        except OpRuntimeError as exc:
            # Without a key an op that draws finds no key (ComputeContext.rng); ops that do not draw
            # (dropout in inference mode, an op with a fixed seed) run as they are.
            if seed is None and isinstance(exc.__cause__, RuntimeError) and "asked for randomness" in str(exc.__cause__):
                raise MissingRngError(
                    f"{exc}\nThis function draws random numbers (its random ops: "
                    + ", ".join(sorted(self._random_ops())) + "): call it with rng=jax.random.key(...) "
                    "(executor_key(seed, run) gives the Executor's numbers), or convert with for_test=True "
                    "for inference") from None
            raise
        if plan.has_checks:
            new_state, fetches, oks, check_values = outs
            self._report_checks(oks, check_values)
        else:
            new_state, fetches = outs
        return list(fetches), dict(zip(plan.written_state, new_state))

    def _input(self, name: str, value):
        if isinstance(value, LoDTensor):
            return self.lod_input(name, value)
        return value

    def _random_ops(self) -> set[str]:
        return {op.type for op in ops_with_sub_blocks(self._plan.ops)
                if registry.get(op.type).random or "seed" in registry.get(op.type).attrs}

    def _report_checks(self, oks, values) -> None:
        """The step's run-time checks (indices, bounds, NaN/Inf flags): raised at once when called
        outside a trace; inside one, by a host callback when the computation runs."""
        if isinstance(oks, jax.core.Tracer) or isinstance(values, jax.core.Tracer):
            # The callback sits in the branch taken only when a check failed: a passing step calls
            # nothing on the host.
            jax.lax.cond(jnp.all(oks), lambda o, v: None,
                         lambda o, v: jax.debug.callback(self._raise_failed, o, v), oks, values)
        else:
            self._raise_failed(oks, values)

    def _raise_failed(self, oks, values) -> None:
        oks, values = np.asarray(oks), np.asarray(values)
        if oks.all():
            return
        failed = Executor._check_error(None, self._plan, oks, values)
        if failed is _ROOMS_GROWN:
            raise FeedError("an array of the program outgrew its room: the rooms were grown; call fn "
                            "again (a jitted fn: jit it again, its trace holds the old rooms)")
        raise failed


def _input_specs(variables) -> tuple:
    """The feeds' abstract values: known dims as they are, a leading unknown dim the symbol
    ``batch`` shared by all feeds, every other unknown dim a symbol of its own (one scope)."""
    names, where = [], []
    for k, var in enumerate(variables):
        for i, d in enumerate(var.shape):
            if d < 0:
                name = "batch" if i == 0 else f"{_symbol(var.name)}_{i}"
                if name not in names:
                    names.append(name)
                where.append(names.index(name))
    symbols = jax.export.symbolic_shape(",".join(names)) if names else ()
    picks = iter(where)
    return tuple(jax.ShapeDtypeStruct(tuple(symbols[next(picks)] if d < 0 else int(d) for d in var.shape),
                                      dtypes.to_numpy(var.dtype)) for var in variables)


def _symbol(name: str) -> str:
    clean = "".join(c if c.isalnum() else "_" for c in name)
    return clean if clean[:1].isalpha() else "v" + clean


def _as_key(rng):
    """A typed key from ``rng``: a key as it is; raw key data (``jax.random.PRNGKey``) wrapped."""
    if jnp.issubdtype(getattr(rng, "dtype", None), jax.dtypes.prng_key):
        return rng
    data = jnp.asarray(rng)
    if data.dtype != jnp.uint32 or data.shape[-1:] not in ((2,), (4,)):
        raise MissingRngError(f"rng must be a jax.random key, got {type(rng).__name__} "
                              f"{getattr(data, 'dtype', '')}{tuple(getattr(data, 'shape', ()))}")
    return jax.random.wrap_key_data(data, impl="threefry2x32" if data.shape[-1] == 2 else PRNG_IMPL)


def _flat_variables(variables) -> dict:
    if not isinstance(variables, Mapping) or not set(variables) <= {"params", "state"}:
        raise VariablesError('variables must be {"params": {...}, "state": {...}} (as fj.to_jax returns them), '
                             f"got {type(variables).__name__}"
                             + (f" with keys {sorted(variables)}" if isinstance(variables, Mapping) else ""))
    out = dict(variables.get("state") or {})
    out.update(variables.get("params") or {})
    return out


def _forward_part(program: Program) -> Program:
    """``program`` without its optimizer and learning-rate ops (optax owns the update); the program
    itself when it has none."""
    drop = OP_ROLE_OPTIMIZE | OP_ROLE_LRSCHED
    if not any(int(op.attrs.get("op_role", 0) or 0) & drop for b in program.blocks for op in b.ops):
        return program
    part = program.clone()
    for block in part.blocks:
        block.ops = [op for op in block.ops if not int(op.attrs.get("op_role", 0) or 0) & drop]
    part._bump()
    return part


def _refusals(plan) -> list[str]:
    lines = []
    for op in ops_with_sub_blocks(list(plan.host_ops) + list(plan.ops)):
        opdef = registry.get(op.type)
        if op.type in _HOST_OP_ADVICE or opdef.host or opdef.effect:
            advice = _HOST_OP_ADVICE.get(op.type, "it acts on the host; do that outside fn")
            lines.append(f"  op {op.type!r} at {op.location}: a host op; {advice}")
        elif op.type in _DATA_DEPENDENT or op.type.removesuffix("_grad") in _DATA_DEPENDENT:
            lines.append(f"  op {op.type!r} at {op.location}: {_DATA_DEPENDENT_ADVICE}")
    return lines


def _value_of(scope: Scope, name: str, reader) -> jax.Array:
    holder = scope.find_var(name)
    tensor = holder.get(LoDTensor) if holder is not None and holder.holds(LoDTensor) else None
    if tensor is None or not tensor._is_initialized():
        where = f" (read by op {reader.type!r} at {reader.location})" if reader is not None else ""
        raise UninitializedVariableError(
            f"variable {name!r}{where} has no value in the scope: run the startup program first, "
            "e.g. exe.run(fj.default_startup_program()), or pass scope=")
    # A copy (a later Executor.run donates the scope's buffers, which would delete these), and not
    # committed to a device: jit places it with the other arguments (a sharded batch, say).
    return jnp.asarray(np.array(tensor._value))


def to_jax(program: Program | None = None, feed: Sequence[str | Variable] = (),
           fetch_list: Sequence[str | Variable] = (), scope: Scope | None = None,
           for_test: bool = False, checks: bool = True) -> tuple[JaxFunction, dict]:
    """``program`` as a pure JAX function and its variables: ``fn, variables = to_jax(...)``.

    ``fn(variables, *inputs, rng=None) -> (outputs, new_state)``: ``inputs`` in ``feed`` order (or
    one dict keyed by feed name; a :class:`LoDTensor` becomes the Executor's padded LoD value),
    ``outputs`` in ``fetch_list`` order, ``new_state`` every persistable variable the ops wrote
    (batch-norm statistics in training mode). ``variables = {"params": {...}, "state": {...}}``,
    copied from ``scope`` (the global scope by default): trainable parameters in ``params``, the
    other persistable values the function reads or writes in ``state`` (one it only writes, where
    the scope holds a value).

    The function runs the ops the fetches need, lowered exactly as ``Executor.run`` lowers them,
    sub-blocks included. A program with optimizer ops (``minimize``) is taken without them and
    without its learning-rate ops: the forward and loss part, with its backward ops only where a
    fetch asks for a gradient; update ``params`` with optax (``jax.grad`` of ``fn``).
    Optimizer accumulators are therefore not in ``variables``.

    Randomness is explicit: a program with random ops (dropout, ...) needs ``rng`` (a
    ``jax.random`` key; :func:`executor_key` gives the key of the Executor's numbers), else
    :class:`MissingRngError`. ``for_test=True`` converts ``program.clone(for_test=True)`` (dropout
    and batch norm in inference mode), which draws nothing.

    Run-time checks (``checks=True``): the Executor's in-step checks (indices in range, the bounds
    of docs/reliability.md, NaN/Inf under ``FLAGS_check_nan_inf``), fed indices included (the
    Executor checks those on the host; here the inputs may be traced, so they are checked in the
    step). A failure raises the Executor's typed error when ``fn`` is called outside a trace, and
    inside one (``jax.jit``) through a host callback when the computation runs (a
    ``JaxRuntimeError`` carrying that error's text). ``checks=False`` leaves them out (``jax.export``
    refuses host callbacks: export a function converted so).

    Refused here, all at once (:class:`NotConvertibleError`, each with its program line): host
    ops (``py_func``, ``Print``, readers) and ops whose output size depends on the data.

    >>> # fn, variables = fj.to_jax(main, feed=["x"], fetch_list=[loss])
    >>> # (loss_value,), new_state = jax.jit(fn)(variables, xs, rng=jax.random.key(0))
    """
    program = default_main_program() if program is None else program
    if isinstance(program, CompiledProgram):
        program = program.program
    if not isinstance(program, Program):
        raise TypeError(f"to_jax expects a fluidjax Program, got {type(program).__name__}")
    scope = global_scope() if scope is None else scope
    feed_names = tuple(_name(f, "feed") for f in ([feed] if isinstance(feed, (str, Variable)) else feed))
    fetch_names = tuple(_name(f, "fetch_list")
                        for f in ([fetch_list] if isinstance(fetch_list, (str, Variable)) else fetch_list))
    if not fetch_names:
        raise FeedError("to_jax needs fetch_list: the variables fn returns")
    lowered = program.clone(for_test=True) if for_test else _forward_part(program)
    plan = Executor._make_plan(lowered, feed_names, fetch_names)
    plan.host_checks, plan.host_checked = {}, frozenset()   # fed indices too are checked in the step
    if not checks:
        plan.has_checks = False
    elif flags.mode[1]:
        plan.has_checks = plan.has_checks or Executor._index_checks(lowered.global_block(), plan.ops, frozenset())[2]
    refused = _refusals(plan)
    if refused:
        raise NotConvertibleError(f"to_jax: {len(refused)} op(s) of the program cannot be part of a pure JAX "
                                  "function:\n" + "\n".join(refused))
    original = program.global_block()
    # Parameters are told apart by their own flag; a program that records none (Paddle's inference
    # files keep no parameter flags) by use.
    flagged = any(getattr(v, "trainable", None) is not None for v in original.vars.values())
    learnable = None if flagged else _learnable_reads(plan)
    params, state = {}, {}
    with state_lock(scope):
        for name in plan.mutable_state + plan.const_state:
            var = original.find_var(name)
            var = lowered.global_block().var(name) if var is None else var
            value = _value_of(scope, name, plan.first_reader.get(name))
            (params if _is_param(var, name, value, plan, learnable) else state)[name] = value
        for name in plan.written_state:       # written, not read: its current value, where the scope has one
            holder = scope.find_var(name)
            tensor = holder.get(LoDTensor) if holder is not None and holder.holds(LoDTensor) else None
            if name not in params and name not in state and tensor is not None and tensor._is_initialized():
                state[name] = _value_of(scope, name, None)
    fn = JaxFunction(lowered, plan, params, state)
    return fn, {"params": params, "state": state}


def _learnable_reads(plan) -> dict[str, bool]:
    """Per variable the ops of ``plan`` read: whether every read is through an input slot that has a
    gradient (the op has one and the slot is not among its ``no_grad_inputs``)."""
    reads: dict[str, bool] = {}
    for op in ops_with_sub_blocks(plan.ops):
        opdef = registry.get(op.type)
        for slot, names in op.inputs.items():
            ok = opdef.grad is not None and slot not in opdef.no_grad_inputs
            for name in names:
                reads[name] = reads.get(name, True) and ok
    return reads


def _is_param(var, name: str, value, plan, learnable: dict[str, bool] | None) -> bool:
    """A trainable parameter: a :class:`Parameter` says so itself (``trainable``); in a program that
    has Parameters, any other variable is state. A program without any (``learnable`` given: what
    Paddle's inference files load as, ``save_inference_model`` keeps no parameter flags) is read
    by use: a parameter is a float the ops only read, each time through a slot that has a gradient
    (weights, biases, a batch norm's scale) -- not a running statistic (a ``no_grad`` slot, or
    written by the ops) nor a table of indices."""
    trainable = getattr(var, "trainable", None)
    if trainable is not None or learnable is None:
        return bool(trainable)
    return (dtypes.is_float(value.dtype) and name not in plan.written_state and learnable.get(name, False))


def _name(item, what: str) -> str:
    if isinstance(item, Variable):
        return item.name
    if isinstance(item, str):
        return item
    raise FeedError(f"{what} items must be Variables or variable names, got {item!r}")


def from_jax(variables: Mapping[str, Mapping[str, Any]], scope: Scope | None = None) -> None:
    """Write ``variables`` (``{"params": ..., "state": ...}``, as ``to_jax`` gives them and JAX
    training leaves them; ``new_state`` dicts may be merged into ``state``) into ``scope`` (the
    global scope by default), so ``Executor.run``, ``fj.io.save_inference_model`` and Paddle use
    them. Values are copied to the host first: the scope never shares buffers with JAX code.

    >>> # fj.from_jax({"params": params, "state": state}); fj.io.save_inference_model(...)
    """
    values = _flat_variables(variables)
    scope = global_scope() if scope is None else scope
    arrays = {name: np.asarray(jax.device_get(value)) for name, value in values.items()}
    with state_lock(scope):
        for name, array in arrays.items():
            holder = scope.find_var(name) or scope.var(name)
            tensor = holder.get_mutable(LoDTensor)
            tensor._value, tensor._lod = jax.device_put(array, jax.local_devices()[0]), []
