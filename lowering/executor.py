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
import itertools
import operator
import secrets
import sys
import threading
import time
import weakref
from functools import partial
from typing import Any, Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from ..ir import dtypes, feed_sources, registry
from ..ir.errors import (FeedError, NumericCheckError, OpRuntimeError, UninitializedVariableError,
                         UnregisteredOpError)
from ..ir.errors import LoopBoundError, NotOfferedError, ReentrantRunError, ResourceExhaustedError
from ..ir.program import Program, default_main_program
from ..ir.variable import Variable
from . import effects, flags, host_init, interrupt, memory
from .checks import (HostIndexCheck, StepChecks, bound_error, fed_source, grow_rooms, has_bound_checks, index_error,
                     specs_of)
from .context import make_key
from .feeds import OpList, bucket_sequence_rows, check_feed, check_lod_feed, off_declaration, reinfer
from .lod_value import LoDValue, bounds_from_feeds, mark_fetch, to_host
from .lod_tensor import LoDTensor
from .lower import ops_with_sub_blocks, run_ops
from .parallel import CompiledProgram
from .places import Place
from .fetched import fetched_array
from . import compiled_models, packed_state
from .scope import Scope, global_scope, state_lock
from .signals import deferred_signals

# The classes of device arrays (the step's outputs and jax.device_put's results), named without
# making one: importing fluidjax must not start JAX's backends (jax.distributed.initialize, in
# fj.distributed.init, has to come before that).
_DEVICE_ARRAYS = frozenset({jax._src.array.ArrayImpl})

_COMMITTED_NOTE = ("fluidjax: the run completed and its new state was committed before this exception "
                   "was raised")

_TYPE_NAMES = {dtypes.LOD_TENSOR: "LOD_TENSOR", dtypes.SELECTED_ROWS: "SELECTED_ROWS",
               dtypes.FEED_MINIBATCH: "FEED_MINIBATCH", dtypes.FETCH_LIST: "FETCH_LIST",
               dtypes.STEP_SCOPES: "STEP_SCOPES", dtypes.LOD_TENSOR_ARRAY: "LOD_TENSOR_ARRAY",
               dtypes.RAW: "RAW", dtypes.STRING: "STRING", dtypes.STRINGS: "STRINGS"}

# Ops whose result over an empty batch is undefined (a mean or a statistic of nothing): a feed
# with 0 rows is refused when the step contains one. Sums, per-row ops and losses are defined on
# empty batches and run (they give empty or zero results).
_UNDEFINED_ON_EMPTY = frozenset({"mean", "reduce_mean", "reduce_max", "reduce_min", "reduce_prod",
                                 "arg_max", "arg_min", "accuracy", "batch_norm", "sync_batch_norm",
                                 "instance_norm", "group_norm", "max_pool2d_with_index"})


def _fetch_name(item) -> str:
    if isinstance(item, Variable):
        return item.name
    if isinstance(item, str):
        return item
    raise FeedError(f"fetch_list items must be Variables or variable names, got {item!r}")


# The lock of ``scope``'s root: runs on one scope tree touch the same state, so they take turns,
# with each other and with the saves and reads of that state (lowering/scope.py).
_state_lock = state_lock

# The thread of the run in progress on each scope tree, by the tree's state lock (see Executor.run).
_running: dict = {}
_get_ident = threading.get_ident

_REENTRANT = ("exe.run was called on a scope whose run is in progress on this same thread: a signal handler "
              "(or a callback) interrupted that run and called exe.run again. It cannot wait for that run, "
              "which waits for it, so nothing ran and the scope is unchanged. Set a flag in the handler and "
              "call exe.run from the handler after the run returns (or from your main loop).")


def _run_in_progress(lock) -> bool:
    """Whether a frame of ``Executor.run`` on this thread's stack (below the caller's) runs on
    ``lock``'s scope. Asked only when ``_running`` names this thread for the lock: an exception
    raised by a signal handler between the mark and its removal can leave a stale mark, which
    must not refuse later runs."""
    frame = sys._getframe(2)
    codes = (Executor.run.__code__, Executor._run_fast.__code__)
    while frame is not None:
        if frame.f_code in codes and frame.f_locals.get("lock") is lock:
            return True
        frame = frame.f_back
    return False


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
    # scope -> {which state: [LoDTensor]}: where this plan's state lives in a scope (weak, so a
    # dropped scope takes its arrays with it).
    tensor_cache: weakref.WeakKeyDictionary = dataclasses.field(default_factory=weakref.WeakKeyDictionary)
    step: Any = None
    first_reader: dict[str, Any] = dataclasses.field(default_factory=dict)
    has_checks: bool = False               # the step returns check flags (in-step index or NaN/Inf checks)
    host_checks: dict = dataclasses.field(default_factory=dict)   # feed name -> [HostIndexCheck]
    host_checked: frozenset = frozenset()  # (id(op), slot, component) of the index inputs checked on the host
    feed_specs: tuple = ()                 # per feed: (name, dtype, declared shape, variable, host checks,
                                           # known dims after the first, rank)
    last_scope: tuple | None = None        # the last scope's binding: see Executor._bind
    committed_scope: Any = lambda: None    # weakref to the scope whose state was last put on the device
    check_infos: list = dataclasses.field(default_factory=list)   # filled when the step is traced
    empty_undefined: str | None = None     # an op type that cannot take an empty batch
    unread_feeds: frozenset = frozenset()  # fed names no op of the step reads (an empty one is fine)
    reinferred: dict = dataclasses.field(default_factory=dict)  # feeds off their declaration -> checked
    fixed_random_ops: frozenset = frozenset()  # random ops that draw the same numbers every run
    on_host: bool = False                  # a startup program run with NumPy (see host_init.py)
    place_state: Any = None                # puts state where a sharded step wants it (parallel.py)
    # Memory (lowering/memory.py): feed shapes -> what the step needs beyond its resident state
    # (None: not checked, for host and sharded plans); a need at most quiet_below asks nothing.
    memory: dict | None = None
    figures: dict = dataclasses.field(default_factory=dict)   # feed shapes -> XLA's figures
    quiet_below: int = -1
    mem_shape: Any = None                  # the last run's memory key (_mem_key) and need
    mem_need: int = 0
    step_fn: Any = None                    # the traced function (a step without donation is made from it)
    kept_step: Any = None                  # jax.jit(step_fn) without donation, made when first needed
    # A step with a while loop: undonated, run so that Ctrl-C can abandon it (lowering/interrupt.py).
    interruptible: bool = False
    # A step with host effects (print, py_func): its last argument is the run's effect ticket, and a
    # run's effects happen once, for the attempt that commits (lowering/effects.py).
    effects: bool = False
    reruns: bool = False                   # the step checks a room or bound: a run may be done again
    # The prepared fast path (Executor._run_fast): per feed (name, dtype, host checks), or None when a
    # run of this plan needs more than those checks (host ops, effects, a while loop, LoD feeds, a
    # data-parallel step): see _fast_specs. fast_dims: per feed (its declared shape, whether an
    # empty batch is refused), checked once per set of shapes; fast_shapes: the shapes (plan.mem_shape)
    # that passed.
    fast: tuple | None = None
    fast_dims: tuple = ()
    fast_shapes: Any = None
    # One-element state packed into one array per dtype (lowering/packed_state.py): the packs, and
    # the read-and-written / written state in the order the step takes and gives it, a pack's name
    # in place of its members (the variables' own lists when nothing is packed).
    packs: tuple = ()
    bound_mutable: tuple[str, ...] = ()
    bound_written: tuple[str, ...] = ()


class Executor:
    """Runs programs on a device (``fj.CPUPlace()``, ``fj.CUDAPlace(i)``, ``fj.TPUPlace(i)``).

    >>> exe = Executor()                              # JAX's default device
    >>> # exe.run(fj.default_startup_program())       # allocate and initialise parameters
    >>> # loss, = exe.run(feed={"x": xs}, fetch_list=[loss])
    """

    def __init__(self, place: Place | None = None) -> None:
        self.place = place
        self._device = place.jax_device() if place is not None else None
        self._runs: dict[int, int] = {}
        self._default_seed = secrets.randbits(31)
        self._lock = threading.RLock()   # guards the plan cache
        # The plans (and their compiled steps) live on the programs they run, under this token:
        # a program the user drops takes its plans, their jitted functions and their executables
        # with it (see _plan_store). The Executor only knows those programs weakly.
        self._token = object()
        self._programs: weakref.WeakSet = weakref.WeakSet()
        weakref.finalize(self, _forget_plans, self._token, self._programs)
        self.trace_count = 0  # how many times a step function was traced (tests check caching)
        self.fast_run_count = 0  # how many runs took the prepared fast path (_run_fast; tests check it)

    # -- public ---------------------------------------------------------------------------------
    def run(self, program: Program | None = None, feed: Mapping[str, Any] | None = None,
            fetch_list: Sequence[Variable | str] | None = None, scope: Scope | None = None,
            return_numpy: bool = True, use_program_cache: bool = False, feed_var_name: str = "feed",
            fetch_var_name: str = "fetch") -> list:
        """Run ``program``'s global block and return the fetched values: NumPy arrays by default,
        :class:`LoDTensor`s (LoD and device array kept) with ``return_numpy=False``, as in Paddle.
        A 0-d result (a mean, a full reduction) also answers ``value[0]``, as Fluid 1.x's shape-[1]
        results did (see :func:`~.fetched.fetched_array`).

        ``feed`` maps data-variable names to arrays (or :class:`LoDTensor`); they are checked
        against the program before anything is compiled. Persistable variables are read from and
        written to ``scope`` (the global scope by default); nothing else is stored there.

        A run is a transaction: it either completes and commits its new state to the scope, or
        leaves the scope as it was. A ``KeyboardInterrupt`` (or any signal handler's exception)
        that arrives while the step holds the state is delivered right after the state is
        committed; such an exception carries the note ``fluidjax: the run completed ...``.
        Runs on the same scope from several threads take turns; see ``docs/reliability.md``.

        Fluid's ``use_program_cache``, ``feed_var_name`` and ``fetch_var_name`` are accepted and
        change nothing: plans are always cached per program version, and no feed/fetch ops are added.
        """
        program = default_main_program() if program is None else program
        scope = global_scope() if scope is None else scope
        # The fast path: a call whose program version, feed names and fetch names have a plan that
        # needs nothing but plain feed checks (plan.fast), and whose scope is the one that plan ran on
        # last, skips the general preparation (see _run_fast; docs/reliability.md, "The per-run floor").
        if feed.__class__ is dict and scope.__class__ is Scope and (fetch_list is None or fetch_list.__class__
                                                                     is list or fetch_list.__class__ is tuple):
            try:
                items = fetch_list or ()       # (a name is a str's own, a Variable's .name: see _fetch_name)
                names = tuple(map(getattr, items, _NAME, items))
                plan = program._executor_calls.get((self._token, program._version, tuple(feed), names, flags.mode))
            except (AttributeError, TypeError):   # a program never run, an unhashable name: the slow path
                plan = None
            # (plan.fast is None for a CompiledProgram's plans: only a Program's own plans run here)
            if plan is not None and plan.fast is not None and not program.run_hooks and not feed_sources.any_started():
                out = self._run_fast(plan, scope, feed, return_numpy)
                if out is not _SLOW:
                    return out
        if isinstance(feed, (list, tuple)) and len(feed) == 1 and isinstance(feed[0], Mapping):
            feed = feed[0]      # Fluid's DataLoader yields one feed dict per place: one place here
        if scope.__class__ is not Scope and not isinstance(scope, Scope):
            raise TypeError(f"Executor.run expects a fluidjax Scope, got {type(scope).__name__}")
        committed = False
        journal = None
        lock = _state_lock(scope)
        try:
            with lock:
                # A handler (or callback) that interrupted a run of this scope on this thread cannot
                # wait for it: that run waits for the handler. It is refused before it reads anything.
                me = _get_ident()
                if _running.get(lock) == me and _run_in_progress(lock):
                    raise ReentrantRunError(_REENTRANT)
                try:
                    _running[lock] = me
                    program, scope, plan, args = self._prepare(program, feed, fetch_list, scope)
                    if plan.effects:         # the run's host effects, over all its attempts
                        journal = effects.open_journal(plan.reruns)
                        args = args[:5] + (journal.ticket(),)
                    if plan.host_ops:
                        self._run_host_ops(plan, scope)
                    if plan.on_host:
                        values = self._host_values(program, plan, args[3])
                    careful = False
                    if plan.memory is not None:      # what the step needs (known per feed shape)
                        if _mem_key(args) != plan.mem_shape or plan.mem_need > plan.quiet_below:
                            careful = self._check_memory(plan, args)
                    outs = self._call_interruptible(plan, args) if plan.interruptible else None
                    with deferred_signals():
                        try:
                            if plan.on_host:
                                fetches, failed = self._commit_host(program, scope, plan, values)
                            else:
                                fetches, failed = self._execute(program, scope, plan, args, careful, outs)
                            committed = failed is None
                            if committed and journal is not None:
                                journal.commit()       # the committed attempt's prints
                        finally:
                            _running.pop(lock, None)   # before the deferred handlers run: they may run
                finally:
                    _running.pop(lock, None)
                    effects.close(journal)
            if failed is not None:
                raise failed
            if return_numpy:
                return [fetched_array(to_host(v)[0] if v.__class__ is LoDValue else v) for v in fetches]
            # A variable the program declares without LoD keeps none (a LoD value there holds counted rows).
            return [_lod_tensor(*to_host(v)) if v.__class__ is LoDValue and _declares_lod(program, name)
                    else LoDTensor(to_host(v)[0] if v.__class__ is LoDValue else v)
                    for v, name in zip(fetches, plan.fetch_names)]
        except BaseException as exc:
            if journal is not None:
                effects.clear_failed_tokens()    # a failed step's print token must not fail later runs
            # Anything raised once the state is committed (a deferred Ctrl-C, a failing fetch
            # conversion) says so: the run happened, only its fetches are lost. Unless the step
            # itself failed on the device after its dispatch (XLA ran out of memory): then the
            # committed values are failures, and the donated ones are gone.
            if not committed:
                raise
            try:
                on_device = isinstance(exc, jax.errors.JaxRuntimeError)
                if not on_device:
                    exc.add_note(_COMMITTED_NOTE)
            except BaseException as again:
                # A second Ctrl-C handled right after one of these calls (Python runs a signal
                # handler after any call) is raised instead of the first: it says the same. (The
                # soak, tests/soak_worker.py, found storms of Ctrl-C escaping here without the note.)
                again.add_note(_COMMITTED_NOTE)
                raise
            if on_device:
                raise self._failed_on_device(plan, scope, exc) from exc
            raise

    def train_from_dataset(self, program: Program | None = None, dataset=None, scope: Scope | None = None,
                           thread: int = 0, debug: bool = False, fetch_list: Sequence[Variable | str] | None = None,
                           fetch_info: Sequence[str] | None = None, print_period: int = 100,
                           fetch_handler=None) -> None:
        """Fluid's ``exe.train_from_dataset``: run ``program`` once per batch of ``dataset`` (a
        ``fluid.DatasetFactory`` dataset, ``frontend/dataset.py``), in file order, each batch a
        :meth:`run` (a transaction of its own). Every ``print_period`` batches it prints the
        ``fetch_list`` values after their ``fetch_info`` labels, as Fluid's device worker prints
        (``time: [...], batch: [n], label: [values]``). Returns None, as Fluid.

        Fluid's C++ trainer runs ``thread`` Hogwild workers over the files; here one worker reads
        them in order (what Fluid gives with one thread), so ``thread`` and ``debug`` change
        nothing. ``fetch_handler`` (Fluid's timed scope monitor) is not offered."""
        self._run_from_dataset(program, dataset, scope, fetch_list, fetch_info, print_period, fetch_handler,
                               "train_from_dataset")

    def infer_from_dataset(self, program: Program | None = None, dataset=None, scope: Scope | None = None,
                           thread: int = 0, debug: bool = False, fetch_list: Sequence[Variable | str] | None = None,
                           fetch_info: Sequence[str] | None = None, print_period: int = 100,
                           fetch_handler=None) -> None:
        """Fluid's ``exe.infer_from_dataset``: as :meth:`train_from_dataset`. As in Fluid's local
        trainer, the program runs as given (only distributed training's gradient pushes differ):
        pass a ``clone(for_test=True)`` program to leave the parameters as they are."""
        self._run_from_dataset(program, dataset, scope, fetch_list, fetch_info, print_period, fetch_handler,
                               "infer_from_dataset")

    def _run_from_dataset(self, program, dataset, scope, fetch_list, fetch_info, print_period, fetch_handler,
                          what: str) -> None:
        if dataset is None:
            raise RuntimeError(f"{what}: dataset is needed and should be initialized "
                               "(fluid.DatasetFactory().create_dataset(...))")
        batches = getattr(dataset, "_feeds", None)
        if batches is None:
            raise TypeError(f"{what}: dataset must be a fluid.DatasetFactory dataset (QueueDataset / "
                            f"InMemoryDataset), got {type(dataset).__name__}")
        if fetch_handler is not None:
            raise NotOfferedError(f"{what}: fetch_handler (Fluid's timed scope monitor) is not offered by fluidjax; "
                                  "pass fetch_list / fetch_info / print_period")
        fetch_list = list(fetch_list or [])
        names = [v if isinstance(v, str) else v.name for v in fetch_list]
        labels = list(fetch_info) if fetch_info is not None else names
        if len(labels) != len(names):
            raise ValueError(f"{what}: fetch_info has {len(labels)} entries for {len(names)} fetch_list entries")
        period = max(1, int(print_period))
        for number, feed in enumerate(batches(), 1):
            values = self.run(program, feed=feed, fetch_list=fetch_list or None, scope=scope)
            if names and number % period == 0:
                parts = [f"{label}: {np.asarray(v).ravel().tolist()}" for label, v in zip(labels, values)]
                print(f"time: [{time.strftime('%Y-%m-%d %H:%M:%S')}], batch: [{number}], " + ", ".join(parts),
                      flush=True)

    def _run_fast(self, plan: _Plan, scope: Scope, feed: dict, return_numpy: bool):
        """A run of a call seen before (``plan``'s program version, feed and fetch names) on the scope
        ``plan`` ran on last, with feeds of the last run's shapes: the prepared fast path. It keeps
        every guarantee of :meth:`run` -- feeds checked (dtype, rank, dims, fed indices, empty
        batches), the scope's lock, the reentrancy refusal, signals deferred over the commit window,
        a failed step leaving the scope as it was -- and skips only what such a call cannot need
        (readers, run hooks, LoD feeds, host ops, effects, the memory check of a new shape). Returns
        ``_SLOW``, having changed nothing, when the call needs the general path."""
        if not flags.fast_run:          # FLAGS_fast_run (on by default: lowering/flags.py)
            return _SLOW
        # Only the last run's shapes (plan.mem_shape, set by every run of other shapes, _check_memory):
        # their memory need is known and quiet, and under FLAGS_bucket_sequences that run's dense feeds
        # were fed as they came (a feed bucketed as counted rows is a LoDValue there, whose memory
        # key no tuple of shapes equals), so bucket_sequence_rows has nothing to do here either.
        # Those shapes are checked against the declarations once (_fast_shapes_ok), then compared.
        shapes = plan.mem_shape
        if shapes is not plan.fast_shapes and not _fast_shapes_ok(plan, shapes) or plan.mem_need > plan.quiet_below:
            return _SLOW
        feeds = []
        i = 0
        for name, want, host_checks in plan.fast:
            value = feed[name]
            if value.__class__ is not np.ndarray or value.shape != shapes[i] or (value.dtype is not want
                                                                                 and value.dtype != want):
                return _SLOW                     # (check_feed converts it, or refuses it by name)
            for check in host_checks:
                check(value)
            feeds.append(value)
            i += 1
        if self._device is not None:
            feeds = jax.device_put(feeds, self._device)
        committed = False
        failed = None
        lock = scope._lock if scope.parent is None else _state_lock(scope)
        try:
            with lock:
                me = _get_ident()
                if _running.get(lock) == me and _run_in_progress(lock):
                    raise ReentrantRunError(_REENTRANT)
                try:
                    # Marked before the state is read: a handler's run from here on is refused
                    # (it would donate the buffers this run has read).
                    _running[lock] = me
                    binding = plan.last_scope
                    if binding is None or binding[0]() is not scope or plan.committed_scope() is not scope:
                        return _SLOW             # another scope ran last: bound by the general path
                    mutable = tuple(map(_value_of, binding[1]))
                    const = tuple(map(_value_of, binding[2]))
                    if not {*map(type, mutable), *map(type, const)} <= _DEVICE_ARRAYS:
                        return _SLOW             # a value set from NumPy: put on the device there
                    program = plan.program
                    seed = None
                    if plan.random:
                        seed = np.array([program.random_seed or self._default_seed, self._runs.get(program._uid, 0)],
                                        np.uint32)
                    args = (mutable, const, tuple(feeds), seed)
                    self.fast_run_count += 1
                    with _DEFERRED:
                        try:
                            if plan.has_checks or self._device is not None:
                                fetches, failed = self._execute(program, scope, plan, args)
                            else:     # _execute's common case, inline
                                try:
                                    new_state, fetches = plan.step(*args)
                                except BaseException as exc:
                                    error = self._step_error(plan, args, exc)
                                    if error is None:
                                        raise
                                    raise error from exc
                                for tensor, value in zip(binding[3], new_state):
                                    if value.__class__ is LoDValue:
                                        _store_lod_value(tensor, value)
                                    else:
                                        tensor._value = value
                                if plan.random:
                                    self._runs[program._uid] = self._runs.get(program._uid, 0) + 1
                            committed = failed is None
                        finally:
                            _running.pop(lock, None)   # before the deferred handlers run: they may run
                finally:
                    _running.pop(lock, None)
            if failed is not None:
                raise failed
            if return_numpy:
                if LoDValue not in map(type, fetches):
                    return list(map(fetched_array, fetches))
                return [fetched_array(to_host(v)[0] if v.__class__ is LoDValue else v) for v in fetches]
            return [_lod_tensor(*to_host(v)) if v.__class__ is LoDValue and _declares_lod(program, name)
                    else LoDTensor(to_host(v)[0] if v.__class__ is LoDValue else v)
                    for v, name in zip(fetches, plan.fetch_names)]
        except BaseException as exc:
            # As in run: anything raised once the state is committed says so.
            if not committed:
                raise
            try:
                on_device = isinstance(exc, jax.errors.JaxRuntimeError)
                if not on_device:
                    exc.add_note(_COMMITTED_NOTE)
            except BaseException as again:
                again.add_note(_COMMITTED_NOTE)
                raise
            if on_device:
                raise self._failed_on_device(plan, scope, exc) from exc
            raise

    def prepare(self, program: Program | None = None, feed: Mapping[str, Any] | None = None,
                fetch_list: Sequence[Variable | str] | None = None, scope: Scope | None = None,
                return_numpy: bool = True) -> "PreparedStep":
        """A callable ``step(feed) -> fetches`` that runs ``program`` on ``scope`` with ``fetch_list``,
        as :meth:`run` does, with the same guarantees (a transaction; feeds checked; Ctrl-C deferred
        over the commit; exactly-once effects), and the least work per call.

        ``feed`` is an example feed: a dict of the data variables' names to arrays, or to shape
        specs (``jax.ShapeDtypeStruct``, or a ``(shape, dtype)`` pair) standing for them. It is
        checked now, as a run checks its feed, so a wrong name, dtype or shape is refused here;
        nothing runs, nothing compiles and the scope is not touched. A later feed of another
        shape or dtype is checked (and compiled) as ``run`` would; so is a program changed since.

        >>> # step = exe.prepare(main, feed={"x": xs, "y": ys}, fetch_list=[loss])
        >>> # for xs, ys in batches:
        >>> #     loss_value, = step({"x": xs, "y": ys})
        """
        program = default_main_program() if program is None else program
        scope = global_scope() if scope is None else scope
        if not isinstance(scope, Scope):
            raise TypeError(f"Executor.prepare expects a fluidjax Scope, got {type(scope).__name__}")
        example = {}
        for name, value in (feed or {}).items():
            if isinstance(value, jax.ShapeDtypeStruct):
                value = np.zeros(value.shape, value.dtype)
            elif isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], (tuple, list)):
                value = np.zeros(value[0], value[1])
            example[name] = value
        if fetch_list is None:
            fetch_names = ()
        elif isinstance(fetch_list, (str, Variable)):
            fetch_names = (_fetch_name(fetch_list),)
        else:
            fetch_names = tuple(_fetch_name(f) for f in fetch_list)
        with _state_lock(scope):
            plan = self._slow_plan(program, example, fetch_names)
            self._check_feeds(plan, example)        # a FeedError now, naming the variable
        return PreparedStep(self, program, scope, tuple(example), fetch_names, return_numpy)

    def _execute(self, program: Program, scope: Scope, plan: _Plan, args: tuple, careful: bool = False,
                 outs: Any = None):
        """Call the compiled step and commit its state: the window in which signals are deferred.

        Returns the fetches and None, or (None, the check error) when a run-time check failed:
        then the step has handed back the old state (selected inside the step), which is put
        back, and nothing else is written. ``careful``: the step needs most of the free memory,
        so it runs without donation and is waited for before anything is committed. ``outs``:
        the outputs of an interruptible step, run already (``_call_interruptible``).
        """
        step = plan.step
        if careful and outs is None:
            if plan.kept_step is None:
                plan.kept_step = jax.jit(plan.step_fn)
            step = plan.kept_step
        try:
            if outs is not None:
                pass
            elif self._device is not None:
                with jax.default_device(self._device):
                    outs = step(*args)
            else:
                outs = step(*args)
            if careful:
                jax.block_until_ready(outs)
        except BaseException as exc:
            error = self._step_error(plan, args, exc)
            if error is None:
                raise
            raise error from exc
        if plan.has_checks:
            new_state, fetches, oks, values = outs
            oks = np.asarray(oks)
            if not oks.all():
                failed = self._check_error(plan, oks, np.asarray(values))
                tensors = self._written_tensors(plan, scope)
                restored = set(plan.bound_mutable)
                for name, tensor, value in zip(plan.bound_written, tensors, new_state):
                    if name in restored:          # donated: the step selected the old value
                        tensor._value = value
                if failed is _ROOMS_GROWN:
                    # Arrays written past their room: nothing was committed; trace the step again
                    # with the rooms grown (checks.grow_rooms) and run it on the same state.
                    _retrace(plan)
                    binding = plan.last_scope if plan.last_scope is not None and plan.last_scope[0]() is scope \
                        else self._bind(plan, scope)
                    args = (tuple(t._value for t in binding[1]),) + args[1:5] + tuple(
                        effects.next_attempt(t) for t in args[5:])     # the attempt's effects are dropped
                    outs = self._call_interruptible(plan, args) if plan.interruptible else None
                    return self._execute(program, scope, plan, args, careful, outs)
                return None, failed
        else:
            new_state, fetches = outs
        binding = plan.last_scope                 # bound to this scope by _prepare, in this run
        tensors = binding[3] if binding[0]() is scope else self._written_tensors(plan, scope)
        for tensor, value in zip(tensors, new_state):
            if value.__class__ is LoDValue:
                _store_lod_value(tensor, value)
            else:
                tensor._value = value
        if plan.random:
            self._runs[program._uid] = self._runs.get(program._uid, 0) + 1
        return fetches, None

    def _step_error(self, plan: _Plan, args: tuple, exc: BaseException) -> BaseException | None:
        """The error to raise for ``exc``, raised by calling ``plan``'s step with ``args``: what was
        lost when XLA had freed the donated state, or that XLA ran out of memory; None: ``exc`` itself."""
        lost = [n for n, v in zip(plan.bound_mutable, args[0]) if isinstance(v, jax.Array) and v.is_deleted()]
        oom = _out_of_memory(exc)
        if lost:
            return (ResourceExhaustedError if oom else OpRuntimeError)(
                f"the run failed after its state was handed to XLA, which freed it: the scope's values "
                f"of {lost} are lost (reload them from a checkpoint). The failure: "
                f"{type(exc).__name__}: {exc}")
        if oom:
            return ResourceExhaustedError(
                f"XLA ran out of memory running the step ({self._need_text(plan, args)}). The step ran "
                f"without donation, so nothing was lost: the scope is as it was before the run. The failure: "
                f"{type(exc).__name__}: {exc}")
        return None

    def _call_interruptible(self, plan: _Plan, args: tuple):
        """Run the step of a plan with a ``while`` loop so that Ctrl-C can abandon it (see
        ``interrupt.py``): undonated, in a worker thread while the main thread waits in short
        slices; an exception from a signal handler abandons the run (its loops end at their next
        poll) and leaves the scope as it was. Returns the step's outputs, ready."""
        box: dict = {}
        done = threading.Lock()       # released by the worker (a lock's wait, unlike an Event's, a
        done.acquire()                # Ctrl-C cannot turn into "RuntimeError: release unlocked lock")
        device = self._device

        def work():
            try:
                if device is not None:
                    with jax.default_device(device):
                        outs = plan.step(*args)
                else:
                    outs = plan.step(*args)
                box["outs"] = jax.block_until_ready(outs)
            except BaseException as exc:  # noqa: BLE001  (handed to the caller)
                box["exc"] = exc
                if len(args) > 5:
                    effects.clear_failed_tokens()    # (this worker's tokens: see effects.py)
            finally:
                box["hits"] = interrupt.finished(token)
                done.release()

        if threading.current_thread() is threading.main_thread():
            token = None
            try:
                # The token is registered and its job queued at once: a Ctrl-C in between left the
                # token in flight for good (nothing ran, finished or cancelled it).
                with deferred_signals():
                    token = interrupt.new_token()
                    args = args[:4] + (np.array([token, flags.max_while_iterations], np.int32),) + args[5:]
                    interrupt.workers.submit(work)
                while not done.acquire(timeout=0.05):
                    pass
            except BaseException:
                if token is not None:
                    interrupt.cancel(token)   # the worker's loops end at their next poll; nothing is committed
                    if "hits" not in box:     # (set before done is released: this thread may hold done)
                        done.acquire(timeout=0.5)  # (usually within milliseconds; the run goes on otherwise)
                raise
        else:                             # signals reach the main thread only: nothing to wait for
            token = interrupt.new_token()
            args = args[:4] + (np.array([token, flags.max_while_iterations], np.int32),) + args[5:]
            work()
        if "exc" in box:
            exc = box["exc"]
            if _out_of_memory(exc):
                raise ResourceExhaustedError(
                    f"XLA ran out of memory running the step ({self._need_text(plan, args)}). The step ran "
                    f"without donation, so nothing was lost: the scope is as it was before the run. The failure: "
                    f"{type(exc).__name__}: {exc}") from exc
            raise exc
        if box["hits"]:
            op_type, where = box["hits"][0]
            bound = flags.max_while_iterations
            raise LoopBoundError(
                f"op {op_type!r} created at {where} ran {bound:,} iterations and would run more: "
                f"FLAGS_max_while_iterations is {bound:,}. The run was not applied; the scope is as it was "
                "before it. Raise the flag (fj.set_flags), or check the loop's condition.",
                op_type=op_type, bound=bound, location=where)
        return box["outs"]

    # -- memory (lowering/memory.py) --------------------------------------------------------------
    def _check_memory(self, plan: _Plan, args: tuple) -> bool:
        """Refuse a step that cannot fit in its device's free memory (before anything is donated);
        True when it fits but needs most of it (then it runs undonated and is waited for)."""
        sig = _mem_key(args)
        need = plan.memory.get(sig)
        if need is None:
            figures = self._step_figures(plan, args)
            if figures is None:
                plan.memory[sig] = need = 0          # XLA gives no analysis here: nothing to check
            else:
                plan.memory[sig] = need = memory.extra_need(figures, self._resident(args))
                plan.figures[sig] = figures
        plan.mem_shape, plan.mem_need = sig, need
        if need == 0:
            return False
        device = self._device or jax.local_devices()[0]
        free, source = memory.free_bytes(device)
        if free is None:
            plan.quiet_below = max(plan.quiet_below, need)     # unknown: never asked again for this need
            return False
        if need > free:
            plan.mem_shape = None                # the next run of this shape checks again
            raise ResourceExhaustedError(
                f"this run's step needs {need:,} bytes of memory beyond the {self._resident(args):,} its state "
                f"already holds ({self._need_text(plan, args, with_free=False)}), but {device} has {free:,} bytes "
                f"free ({source}). Nothing ran and the scope is unchanged: feed a smaller batch, or free memory "
                "(fj.compiled_memory gives the step's figures)")
        plan.quiet_below = int(free * memory.QUIET)
        alias = plan.figures.get(sig, {}).get("alias_bytes", 0)
        return need > free * memory.RISKY and need + alias <= free

    def _step_figures(self, plan: _Plan, args: tuple) -> dict | None:
        """XLA's memory analysis of ``plan``'s step for ``args`` (compiled ahead of the call: the
        call then finds the executable in JAX's cache)."""
        if self._device is not None:
            with jax.default_device(self._device):
                compiled = plan.step.lower(*args).compile()
        else:
            compiled = plan.step.lower(*args).compile()
        return memory.step_figures(compiled)

    @staticmethod
    def _resident(args: tuple) -> int:
        return sum(int(getattr(v, "nbytes", 0)) if not isinstance(v, jax.ShapeDtypeStruct)
                   else int(np.prod(v.shape, dtype=np.int64)) * np.dtype(v.dtype).itemsize for v in args[0] + args[1])

    def _need_text(self, plan: _Plan, args: tuple, with_free: bool = True) -> str:
        sig = _mem_key(args)
        figures = plan.figures.get(sig)
        if figures is None:
            return "XLA gave no memory analysis of it"
        text = (f"XLA's analysis: {figures['temp_bytes']:,} bytes of temporaries, {figures['argument_bytes']:,} of "
                f"arguments, {figures['output_bytes']:,} of outputs, {figures['alias_bytes']:,} of them in donated "
                "buffers")
        if with_free:
            device = self._device or jax.local_devices()[0]
            free, source = memory.free_bytes(device)
            text += f"; it needs {plan.memory.get(sig, 0):,} bytes beyond its state" + (
                f", {free:,} are free now ({source})" if free is not None else "")
        return text

    def _failed_on_device(self, plan: _Plan, scope: Scope, exc: BaseException) -> BaseException:
        """The error of a step that failed on the device after its state was committed (an
        asynchronous failure: XLA ran out of memory while it ran). Its outputs are failures and
        its donated arguments are freed: the state it wrote is lost, and is marked so (a later
        run says the variable has no value instead of failing inside XLA)."""
        lost = []
        with _state_lock(scope):
            for name, tensor in zip(plan.bound_written, self._written_tensors(plan, scope)):
                if packed_state.is_pack(name):
                    name = ", ".join(tensor.spec.members)
                value = tensor._value
                if isinstance(value, jax.Array):
                    try:
                        value.block_until_ready()
                    except Exception:  # noqa: BLE001  (the failure itself)
                        tensor._value = None
                        lost.append(name)
        kind = ResourceExhaustedError if _out_of_memory(exc) else OpRuntimeError
        return kind(f"the step failed on the device after its state was handed to XLA: the scope's values of "
                    f"{lost} are lost (reload them from a checkpoint); the run did not complete. The failure: "
                    f"{type(exc).__name__}: {exc}")

    def _host_values(self, program: Program, plan: _Plan, seed) -> list:
        """A startup program's values, drawn with NumPy and put on the device in one transfer."""
        if seed is None:
            entropy_of = lambda i: (0, i)  # noqa: E731  (no random op: constants only)
        elif program.random_seed:
            entropy_of = lambda i: (int(seed[0]), i)  # noqa: E731
        else:
            entropy_of = lambda i: (int(seed[0]), int(seed[1]), i)  # noqa: E731
        computed = host_init.run(plan.ops, entropy_of)
        names = list(dict.fromkeys(plan.written_state + plan.fetch_names))
        arrays = [computed[n] for n in names]
        device = self._device or jax.local_devices()[0]   # this process's (jax.devices() spans all)
        return dict(zip(names, jax.device_put(arrays, device)))

    def _commit_host(self, program: Program, scope: Scope, plan: _Plan, values: dict):
        for tensor, name in zip(self._written_tensors(plan, scope), plan.written_state):
            tensor._value = values[name]
        if plan.random:
            self._runs[program._uid] = self._runs.get(program._uid, 0) + 1
        return [values[n] for n in plan.fetch_names], None

    def _check_error(self, plan: _Plan, oks: np.ndarray, values: np.ndarray) -> NumericCheckError:
        """The error of the first failed check, naming the op, the variable and the user's line."""
        grown = grow_rooms(plan.program, oks, values, plan.check_infos, flags.max_array_room)
        if grown is not None:
            return _ROOMS_GROWN if grown is True else grown
        first = int(np.argmin(oks))
        info = plan.check_infos[first]
        op = info["op"]
        where = op.location
        if info["kind"] == "index":
            return index_error(op, info["spec"], info["variable"], int(values[first]), before_run=False)
        if info["kind"] == "bound":
            return bound_error(info, int(values[first]))
        return NumericCheckError(
            f"op {op.type!r} created at {where}: {info['message']} (FLAGS_check_nan_inf). The run was not "
            "applied; the scope is as before it.", op_type=op.type, variable=info["variable"], location=where)

    def lower(self, program: Program | None = None, feed: Mapping[str, Any] | None = None,
              fetch_list: Sequence[Variable | str] | None = None, scope: Scope | None = None) -> jax.stages.Lowered:
        """The ``jax.stages.Lowered`` step that ``run`` with the same arguments would execute.

        Nothing runs and the scope is not changed; ``.compile().as_text()`` shows the optimized HLO.
        """
        _, _, plan, args = self._prepare(program, feed, fetch_list, scope)
        return plan.step.lower(*args)

    def compiled_memory(self, program: Program | None = None, feed: Mapping[str, Any] | None = None,
                        fetch_list: Sequence[Variable | str] | None = None, scope: Scope | None = None) -> dict:
        """XLA's memory analysis of the step ``run`` with the same arguments would execute: a dict
        of byte counts ``temp_bytes``, ``argument_bytes``, ``output_bytes``, ``alias_bytes`` (outputs
        written into donated state), ``generated_code_bytes``, ``peak_bytes`` (what the call holds
        at once) and ``need_bytes`` (``peak_bytes`` less the state already on the device: what a
        run checks against the device's free memory). Compiles the step if needed; runs nothing.

        The state's shapes come from ``scope`` (the global scope by default) when it holds the
        state, else from the program's declared shapes: the figures are known before anything is
        allocated (before the startup program runs), and nothing is created in the scope.
        """
        scope = global_scope() if scope is None else scope
        with _state_lock(scope):
            _, _, plan, args = self._prepare(program, feed, fetch_list, scope, abstract=True)
        if plan.place_state is not None and any(isinstance(v, jax.ShapeDtypeStruct) for v in args[0] + args[1]):
            # a data-parallel step with abstract state: its jit lowered directly (no state to place)
            figures = memory.step_figures(plan.step.jitted.lower(*args).compile())
        else:
            figures = self._step_figures(plan, args)
        if figures is None:
            raise NotImplementedError(f"XLA gives no memory analysis of compiled steps on "
                                      f"{self._device or jax.local_devices()[0]}")
        need = memory.extra_need(figures, self._resident(args))
        if plan.memory is not None:
            sig = _mem_key(args)
            plan.figures[sig], plan.memory[sig] = figures, need
        return dict(figures, need_bytes=need)

    def _prepare(self, program, feed, fetch_list, scope, abstract: bool = False):
        """Check the feeds, find the plan and gather its state: everything a run needs first.
        ``abstract``: when ``scope`` does not hold the state, the state's declared shapes
        (``jax.ShapeDtypeStruct``s, for lowering only)."""
        program = default_main_program() if program is None else program
        scope = global_scope() if scope is None else scope
        if feed is None:
            # A non-iterable DataLoader / PyReader started on this program feeds it (Fluid 1.x).
            source = feed_sources.source_for(program)
            feed = source() if source is not None else {}
        elif feed.__class__ is not dict:
            if isinstance(feed, (list, tuple)) and len(feed) == 1 and isinstance(feed[0], Mapping):
                feed = feed[0]  # Fluid 1.x: one feed dict per place, and this run has one place
            elif isinstance(feed, (list, tuple)) and len(feed) > 1 and hasattr(program, "place_feeds"):
                feed = program.place_feeds(feed)   # one dict per device of a data-parallel run
            if not isinstance(feed, Mapping):
                raise FeedError(f"feed must be a dict of variable name -> value, got {type(feed).__name__}")
            feed = dict(feed)
        if feed_sources.any_started():
            feed = feed_sources.with_reader_feed(program, feed)   # a started reader's variables, fed or not
        if fetch_list is None:
            fetch_names = ()
        elif isinstance(fetch_list, (str, Variable)):
            fetch_names = (_fetch_name(fetch_list),)
        else:
            try:
                fetch_names = tuple([f if f.__class__ is str else f.name for f in fetch_list])
            except AttributeError:
                fetch_names = tuple(_fetch_name(f) for f in fetch_list)   # raises the clear error
        # The hot path: one dict lookup finds the plan of a call seen before (same program version,
        # feed names in the same order, fetches and flags), in the program's own store.
        try:
            plan = program._executor_calls.get((self._token, program._version, tuple(feed), fetch_names, flags.mode))
        except AttributeError:    # a program never run (the slow path makes its store) or not a program
            plan = None
        if plan is None:
            plan = self._slow_plan(program, feed, fetch_names)
        program = plan.program                    # a CompiledProgram's own program
        feeds = self._check_feeds(plan, feed)
        if abstract and not _holds_state(plan, scope):
            # Nothing allocated yet (compiled_memory before the startup program): the state as the
            # program declares it, abstract; the scope is not touched.
            mutable, const = _declared_state(plan, self._device)
        else:
            for hook in program.run_hooks:
                hook(scope)
            binding = plan.last_scope
            if binding is None or binding[0]() is not scope:
                binding = self._bind(plan, scope)
            mutable = tuple([t._value for t in binding[1]])
            const = tuple([t._value for t in binding[2]])
            if not ({*map(type, mutable), *map(type, const)} <= _DEVICE_ARRAYS and plan.committed_scope() is scope):
                # A value set from NumPy (or missing): put it on the device once, in the scope too, so
                # the step keeps one signature (NumPy and device arguments would compile it twice).
                binding = self._bind(plan, scope, refresh=True)   # raises for a variable without a value
                (plan.place_state or self._to_device)(binding[1] + binding[2])
                mutable = tuple([t._value for t in binding[1]])
                const = tuple([t._value for t in binding[2]])
                plan.committed_scope = weakref.ref(scope)
        seed = None
        if plan.random:
            count = self._runs.get(program._uid, 0)
            seed = np.array([program.random_seed or self._default_seed, count], np.uint32)
        if plan.effects:                # outside a run its effects act at once (Executor.run gives a journal's)
            return program, scope, plan, (mutable, const, feeds, seed, _IDLE_RUN if plan.interruptible else None,
                                          effects.IDLE_TICKET)
        if plan.interruptible:          # no run: its loops are never abandoned nor bounded
            return program, scope, plan, (mutable, const, feeds, seed, _IDLE_RUN)
        return program, scope, plan, (mutable, const, feeds, seed)

    def _slow_plan(self, program, feed: dict, fetch_names: tuple) -> _Plan:
        """The plan of a call not seen before, after checking the arguments' types."""
        if not isinstance(program, (Program, CompiledProgram)):
            raise TypeError(f"Executor.run expects a fluidjax Program, got {type(program).__name__}")
        for name in feed:
            if not isinstance(name, str):
                raise FeedError(f"feed keys must be variable names (str), got {name!r}")
        plan = self._plan(program, tuple(sorted(feed)), fetch_names)
        with self._lock:
            calls, _ = _plan_store(program)
            if len(calls) > 4096:
                calls.clear()
            calls[(self._token, program._version, tuple(feed), fetch_names, flags.mode)] = plan
        return plan

    def close(self) -> None:
        """Forget compiled steps (kept for Paddle's API)."""
        _forget_plans(self._token, self._programs)

    @property
    def _plans(self) -> dict[tuple, _Plan]:
        """This Executor's plans of the programs still alive: (program uid, version, feed names,
        fetch names, flags) -> plan (a snapshot; tests and the data-parallel step read it)."""
        out = {}
        for program in list(self._programs):
            for key, plan in list(_plan_store(program)[1].items()):
                if key[0] is self._token:
                    out[(program._uid,) + key[1:]] = plan
        return out

    # -- planning --------------------------------------------------------------------------------
    def _plan(self, program: Program, feed_names: tuple[str, ...], fetch_names: tuple[str, ...]) -> _Plan:
        key = (self._token, program._version, feed_names, fetch_names, flags.mode)
        plan = _plan_store(program)[1].get(key)
        if plan is not None:
            return plan
        with self._lock:
            return self._new_plan(key, program, feed_names, fetch_names)

    def _new_plan(self, key, program: Program, feed_names, fetch_names) -> _Plan:
        calls, plans = _plan_store(program)
        plan = plans.get(key)
        if plan is None:
            if program.__class__ is CompiledProgram:
                plan = self._make_plan(program.program, feed_names, fetch_names)
                plan.step = program._compile_step(self, plan)
            else:
                plan = self._make_plan(program, feed_names, fetch_names)
                _pack_state(plan)
                # a loaded model's saved executables, when it has some for this plan (compiled_models.py)
                plan.step = compiled_models.wrap_step(program, plan, self._compile(plan), self._device)
            # A program changed since its older plans were made: they can never run again, so
            # free their compiled code (a notebook that builds and runs in turns would pile them up).
            for store in (plans, calls):
                for old in [k for k in store if k[0] is self._token and k[1] != program._version]:
                    del store[old]
            plan.fast = _fast_specs(plan) if program.__class__ is not CompiledProgram else None
            plans[key] = plan
            self._programs.add(program)
        return plan

    @staticmethod
    def _make_plan(program: Program, feed_names, fetch_names) -> _Plan:
        """The plan of ``program``'s global block for these feeds and fetches (shared with
        ``fj.to_jax``, which lowers the same plan: see :func:`step_function`)."""
        block = program.global_block()
        _check_implemented(program)
        if not fetch_names:
            # A loaded inference model's fetch ops name what it computes (Paddle runs them).
            fetch_names = tuple(_fetch_op_targets(block))
        for name in feed_names:
            if block.find_var(name) is None:
                raise FeedError(f"feed {name!r} is not a variable of the program; its data variables are "
                                f"{[v.name for v in block.vars.values() if v.is_data]}")
            var = block.find_var(name)
            if var.type != dtypes.LOD_TENSOR or var.dtype is None:
                raise FeedError(f"feed {name!r}: variable {name!r} is of type {_TYPE_NAMES.get(var.type, var.type)}; only "
                                "tensor variables (LOD_TENSOR) can be fed")
        for name in fetch_names:
            if block.find_var(name) is None:
                raise FeedError(f"fetch {name!r} is not a variable of the program")
        feeds = set(feed_names)

        # Keep the ops the fetches need and every op whose effect is the point: one that writes
        # state, or prints (Fluid's `layers.Print(x)` with its result dropped still prints).
        needed = set(fetch_names)
        kept = []
        for op in reversed(block.ops):
            if op.type in FEED_FETCH_OPS:      # a saved model's feed/fetch ops: feeds and fetches go by name
                continue
            writes_state = op.type in _EFFECT_OPS or any(block.var(n).persistable for n in op.output_arg_names)
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
        # A tensor array nothing wrote yet (create_array emits no op) starts empty: no state.
        external = {n: r for n, r in external.items()
                    if block.var(n).persistable or block.var(n).type != dtypes.LOD_TENSOR_ARRAY}
        for name, reader in external.items():
            var = block.var(name)
            if not var.persistable:
                where = f" (read by op {reader.type!r} at {reader.location})" if reader is not None else ""
                hint = "it is a data variable: feed it" if var.is_data else \
                    "no op before its reader computes it and it is not persistable"
                raise FeedError(f"variable {name!r} has no value{where}: {hint}")
        written_set = set(written)
        # The state read and written comes first, in the order it is passed in: JAX gives a donated
        # buffer to the first output of its shape and dtype, so in any other order a parameter's
        # buffer went to its moment's output, say, and XLA copied every such input before the
        # step (a copy kernel per state variable: a third of a GPT step's kernels on a GPU).
        mutable = tuple(n for n in external if n in written_set)
        mutable_set = set(mutable)        # (built once: per name it made plan building quadratic)
        written = list(mutable) + [n for n in written if n not in mutable_set]
        seeded = bool(program.random_seed)
        fixed = frozenset(i for i, op in enumerate(jit_ops) if seeded and registry.get(op.type).random
                          and any(block.var(n).persistable for n in op.output_arg_names))
        check_nan_inf, check_index = flags.mode
        host_checks, host_checked, in_step = Executor._index_checks(block, jit_ops, feeds) if check_index else ({}, (), False)
        plan = _Plan(
            program=program, ops=OpList(jit_ops), host_ops=host_ops, feed_names=feed_names,
            fetch_names=fetch_names,
            mutable_state=mutable,
            const_state=tuple(n for n in external if n not in written_set),
            written_state=tuple(written),
            random=any(registry.get(op.type).random or "seed" in registry.get(op.type).attrs
                       for op in ops_with_sub_blocks(jit_ops)),
            first_reader=external,
            has_checks=check_nan_inf or in_step or has_bound_checks(ops_with_sub_blocks(jit_ops)),
            host_checks=host_checks, host_checked=frozenset(host_checked),
            empty_undefined=next((op.type for op in jit_ops if op.type in _UNDEFINED_ON_EMPTY
                                  and not (op.type == "batch_norm" and op.attr("is_test"))), None),
            fixed_random_ops=fixed,
            on_host=not feed_names and not external and host_init.can_run(jit_ops),
            interruptible=any(op.type == "while" for op in ops_with_sub_blocks(jit_ops)),
            effects=any(_journaled(op.type) for op in ops_with_sub_blocks(jit_ops)),
            reruns=has_bound_checks(ops_with_sub_blocks(jit_ops)),
        )
        plan.bound_mutable, plan.bound_written = plan.mutable_state, plan.written_state
        plan.feed_specs = tuple((n, dtypes.to_numpy(var.dtype), var.shape, var, tuple(host_checks.get(n, ())),
                                 _fast_tail(var.shape), len(var.shape))
                                for n, var in ((n, block.var(n)) for n in feed_names))
        read = {n for op in ops_with_sub_blocks(jit_ops + host_ops) for n in op.input_arg_names}
        plan.unread_feeds = frozenset(n for n in feed_names if n not in read)
        return plan

    @staticmethod
    def _index_checks(block, ops, feeds):
        """Split the index checks of ``ops`` (and of their sub-blocks' ops): on the host for fed
        indices, in the step for the rest."""
        producers = {n: op for op in ops for n in op.output_arg_names}
        inner = [op for op in ops_with_sub_blocks(ops) if op.block is not block]
        # A name some sub-block writes may hold other values there than the feed's.
        written_inside = {n for op in inner for n in op.output_arg_names}
        host: dict[str, list] = {}
        checked, in_step = [], False

        def static_shape(op):
            def shape(slot):
                names = op.inputs.get(slot)
                var = op.block.find_var(names[0]) if names else None
                return var.shape if var is not None else None
            return shape

        for op in list(ops) + inner:
            for spec in specs_of(op, static_shape(op)):
                var = op.inputs[spec.slot][0]
                feed = fed_source(var, feeds, producers)
                if op.block is not block and (feed != var or var in written_inside or block.find_var(var) is None):
                    feed = None                  # inside a sub-block: only a feed read as it is
                if feed is None or spec.size < 0 or (spec.component is not None and feed != var):
                    in_step = True
                    continue
                host.setdefault(feed, []).append(HostIndexCheck(feed, op, spec, var))
                checked.append((id(op), spec.slot, spec.component))
        return host, checked, in_step

    def _compile(self, plan: _Plan, sharded=None):
        """The jitted step of ``plan``; ``sharded`` (a parallel.ShardedStep) gives its value table
        and its ``jax.jit`` with shardings."""
        executor = weakref.ref(self)   # the step lives on the program: it must not keep the Executor

        def on_trace():
            exe = executor()
            if exe is not None:
                exe.trace_count += 1

        if sharded is not None:
            plan.interruptible = False    # a step over several devices keeps its four arguments
            plan.effects = False          # (its prints and py_funcs act at once, unjournaled)
        step = step_function(plan, sharded, on_trace)
        if plan.packs:
            step = packed_state.packing_step(step, plan.mutable_state, plan.written_state, plan.bound_mutable,
                                             plan.bound_written, list(plan.packs))
        plan.step_fn = step
        if sharded is None:
            # checked per feed shape (a startup program runs on the host; sharded steps span devices)
            plan.memory = None if plan.on_host else {}
            # A step with a loop that may never end is not donated: Ctrl-C can abandon it any time.
            return jax.jit(step, donate_argnums=() if plan.interruptible else (0,))
        return sharded.jit(step)

    # -- feeds and state -----------------------------------------------------------------------
    def _check_feeds(self, plan: _Plan, feed: Mapping[str, Any]) -> tuple:
        out = []
        off = None
        for name, want, declared, var, host_checks, tail, rank in plan.feed_specs:
            value = feed[name]
            if var.lod_level:
                value = check_lod_feed(name, value, want, declared, var)
                if not var.need_check_feed and off_declaration(value, want, declared):
                    off = (off or []) + [(name, value, var)]
            # The common case in two comparisons (only the batch dim unknown, see _fast_tail); else
            # check_feed, which checks every known dim.
            elif not (value.__class__ is np.ndarray and value.dtype == want and value.shape[1:] == tail
                      and value.ndim == rank):
                value = check_feed(name, value, want, declared, var)
                # Paddle's feed rule: without need_check_feed the declaration is advice, and the
                # program's shapes are re-inferred from the feed (once per signature, below).
                if not var.need_check_feed and off_declaration(value, want, declared):
                    off = (off or []) + [(name, value, var)]
            for check in host_checks:
                check(value)
            if plan.empty_undefined is not None and 0 in value.shape and name not in plan.unread_feeds:
                raise FeedError(f"feed {name!r} has shape {tuple(value.shape)}: an empty batch, and op "
                                f"{plan.empty_undefined!r} of this program has no defined result on an "
                                "empty batch (a mean or statistic of nothing); feed at least one row")
            if self._device is not None:
                value = jax.device_put(value, self._device)
            out.append(value)
        if off is not None:
            self._reinfer(plan, off)
        if flags.bucket_sequences:      # one row per sequence: bucketed with the sequences (feeds.py)
            out = bucket_sequence_rows(out, [(s[0], s[3], s[2]) for s in plan.feed_specs], plan.ops)
        return tuple(out)

    @staticmethod
    def _reinfer(plan: _Plan, off: list) -> None:
        """Shapes re-inferred for feeds off their (advisory) declaration: a ShapeError naming the
        op an array cannot reach, before the step compiles; checked once per feed signature."""
        key = tuple((n, _lod_free(v).shape, _lod_free(v).dtype.str) for n, v, _ in off)
        if key in plan.reinferred:
            return
        reinfer(plan.program.global_block(), plan.host_ops + plan.ops, {n: (v, var) for n, v, var in off})
        if len(plan.reinferred) > 256:
            plan.reinferred.clear()
        plan.reinferred[key] = True

    def _bind(self, plan: _Plan, scope: Scope, refresh: bool = False) -> tuple:
        """Where ``plan``'s state lives in ``scope``: (weakref to scope, mutable tensors, const
        tensors, written tensors); a clear error for a state variable without a value.

        The LoDTensor objects stay in their holders, so later runs read and write them directly.
        """
        cached = plan.tensor_cache.get(scope)
        if cached is None or refresh:
            found = {}
            for name in plan.mutable_state + plan.const_state:
                holder = scope.find_var(name)
                tensor = holder.get(LoDTensor) if holder is not None and holder.holds(LoDTensor) else None
                if tensor is None or not tensor._is_initialized():
                    reader = plan.first_reader.get(name)
                    where = f" (read by op {reader.type!r} at {reader.location})" if reader is not None else ""
                    raise UninitializedVariableError(
                        f"variable {name!r}{where} has no value in the scope: run the startup program "
                        "first, e.g. exe.run(fj.default_startup_program())")
                found[name] = tensor
            written = {n: (scope.find_var(n) or scope.var(n)).get_mutable(LoDTensor) for n in plan.written_state}
            for spec in plan.packs:     # one-element state held in one array (packed_state.py)
                found[spec.name] = written[spec.name] = packed_state.bind_pack(
                    scope, spec, [found[n] for n in spec.members], plan)
            cached = ([found[n] for n in plan.bound_mutable], [found[n] for n in plan.const_state],
                      [written[n] for n in plan.bound_written])
            with self._lock:
                plan.tensor_cache[scope] = cached
        # The binding holds the scope's tensors: it goes when the scope does (a dropped scope's
        # arrays are freed while its program lives on).
        binding = (weakref.ref(scope, partial(_unbind, weakref.ref(plan))),) + cached
        plan.last_scope = binding
        return binding

    def _to_device(self, tensors) -> None:
        """Put the values of ``tensors`` that are not device arrays yet on this Executor's device
        (committed to it, as the step's outputs are: the step sees one signature)."""
        device = self._device or jax.local_devices()[0]   # this process's (jax.devices() spans all)
        for tensor in tensors:
            value = tensor._value
            # (or on other devices: a data-parallel run on the same scope left it on its mesh)
            if type(value) not in _DEVICE_ARRAYS or not value.committed or value.sharding.device_set != {device}:
                tensor._value = jax.device_put(np.asarray(value) if not isinstance(value, jax.Array) else value,
                                               device)

    def _written_tensors(self, plan: _Plan, scope: Scope) -> list[LoDTensor]:
        """The tensors a run writes its new state into (bound by the run's ``_prepare``)."""
        binding = plan.last_scope
        if binding is None or binding[0]() is not scope:
            binding = self._bind(plan, scope)
        return binding[3]

    def _run_host_ops(self, plan: _Plan, scope: Scope) -> None:
        for op in plan.host_ops:
            registry.get(op.type).compute(op, scope)


def run_keys(seed) -> tuple:
    """The (fixed key, run key) of a run's ``seed`` = [program seed, run count]: ops whose numbers a
    seeded program fixes draw from the first, every other random op from the second (each op folds
    its position in)."""
    fixed_key = make_key(seed[0])
    return fixed_key, jax.random.fold_in(fixed_key, seed[1])


def step_function(plan: _Plan, sharded=None, on_trace=None):
    """The pure step of ``plan``: ``step(mutable, const, feeds, seed, run=None, ticket=None) ->
    (new_state, fetches)`` (plus the check flags when ``plan.has_checks``); ``ticket``: the run's
    effect ticket (lowering/effects.py; None: effects act at once). The Executor jits it; ``fj.to_jax``
    wraps the same function, so both lower a program the same way. ``seed`` is [program seed, run
    count] or the (fixed key, run key) pair of :func:`run_keys`; ``on_trace`` is called whenever
    the step is traced."""
    ops, fetch_names, written = plan.ops, plan.fetch_names, plan.written_state
    names = plan.const_state + plan.mutable_state + plan.feed_names
    n_mutable = len(plan.mutable_state)
    check_nan_inf, check_index = flags.mode
    fixed = plan.fixed_random_ops
    host_checked = plan.host_checked

    # Positional tuples, not dicts: they flatten faster on every call (this is the hot path).
    def step(mutable, const, feeds, seed, run=None, ticket=None):
        if on_trace is not None:
            on_trace()
        items = zip(names, const + mutable + feeds)
        env: dict[str, Any] = dict(items) if sharded is None else sharded.env(items)
        op_keys = None
        if seed is not None:
            # Initializers of a seeded program draw the same numbers on every run (Paddle's
            # meaning of a fixed seed); every other random op gets a key that moves per run.
            # (fj.to_jax passes the two keys themselves: (fixed key, run key).)
            fixed_key, run_key = seed if isinstance(seed, tuple) else run_keys(seed)
            op_keys = lambda i: fixed_key if i in fixed else run_key  # noqa: E731
        checks = StepChecks(check_index, check_nan_inf, host_checked) if plan.has_checks else None
        # fed sequences' longest lengths, for what runs along them; the run's effect ticket
        with bounds_from_feeds(env), effects.tracing(ticket):
            if run is None:
                run_ops(ops, env, checks=checks, op_keys=op_keys)
            else:                     # (token, bound): the loops poll and count (interrupt.py)
                with interrupt.tracing(run[0], run[1]):
                    run_ops(ops, env, checks=checks, op_keys=op_keys)
            missing = [n for n in written + fetch_names if n not in env]
            if missing:
                raise OpRuntimeError(_not_computed(plan, missing[0]))
            new_state = tuple(env[n] for n in written)
            fetches = [mark_fetch(env[n]) for n in fetch_names]   # padding sequences marked
        if checks is None:
            return new_state, fetches
        plan.check_infos = [info for _, _, info in checks.items]
        if not checks.items:
            return new_state, fetches, jnp.ones((0,), bool), jnp.zeros((0,), jnp.int64)
        oks = jnp.stack([ok for ok, _, _ in checks.items])
        values = jnp.stack([jnp.zeros((), jnp.int64) if v is None else v for _, v, _ in checks.items])
        all_ok = jnp.all(oks)
        # A failed check hands back the old state of the donated buffers: the run did not happen.
        old = dict(zip(plan.mutable_state, mutable[:n_mutable]))
        new_state = tuple(_keep_old_unless(all_ok, value, old.get(name))
                          for name, value in zip(written, new_state))
        return new_state, fetches, oks, values

    return step


# Ops of saved inference models that move data in and out of the program (Paddle's feed/fetch
# lists); the Executor feeds and fetches by variable name, so it leaves them out of the step.
FEED_FETCH_OPS = frozenset({"feed", "fetch"})


def _unbind(plan_ref, scope_ref) -> None:
    """A bound scope was collected: its plan forgets the binding (and the tensors it holds)."""
    plan = plan_ref()
    if plan is not None and plan.last_scope is not None and plan.last_scope[0] is scope_ref:
        plan.last_scope = None


_analysis_executor: list = []

# The run argument of an interruptible step called outside a run (lower, compiled_memory): token 0
# (never abandoned), no bound.
_IDLE_RUN = np.zeros(2, np.int32)


def compiled_memory(program: Program, feed: Mapping[str, Any] | None = None, scope: Scope | None = None,
                    fetch_list: Sequence[Variable | str] | None = None, executor: Executor | None = None) -> dict:
    """XLA's memory analysis of ``program``'s step for ``feed`` (and ``fetch_list``) as a dict of
    byte counts: ``temp_bytes``, ``argument_bytes``, ``output_bytes``, ``alias_bytes``,
    ``generated_code_bytes``, ``peak_bytes`` and ``need_bytes`` (see
    :meth:`Executor.compiled_memory`). The step is compiled if needed, nothing runs; the state's
    shapes come from ``scope`` (the global scope by default) when it holds the state, else from
    the program's declared shapes (nothing needs to be allocated first, and nothing is).

    >>> # fj.compiled_memory(main, {"x": xs, "y": ys}, fetch_list=[loss])["peak_bytes"]
    """
    if executor is None:
        if not _analysis_executor:
            _analysis_executor.append(Executor())
        executor = _analysis_executor[0]
    return executor.compiled_memory(program, feed, fetch_list, scope)


#: Ops a run keeps though nothing fetched depends on them: their effect is the point.
_EFFECT_OPS = frozenset({"print"})


def _holds_state(plan: _Plan, scope: Scope) -> bool:
    """Whether ``scope`` holds a value for every state variable of ``plan`` (nothing is created)."""
    for name in plan.mutable_state + plan.const_state:
        holder = scope.find_var(name)
        if holder is None or not holder.holds(LoDTensor) or not holder.get(LoDTensor)._is_initialized():
            return False
    return True


def _declared_state(plan: _Plan, device=None) -> tuple[tuple, tuple]:
    """``plan``'s (mutable, const) state as ``jax.ShapeDtypeStruct``s of the variables' declared
    shapes and dtypes, on ``device`` (the default one when None), as the step sees the scope's."""
    block = plan.program.global_block()
    single = jax.sharding.SingleDeviceSharding(device or jax.local_devices()[0])
    # a data-parallel step's state has the shardings its step wants (parallel.ShardedStep)
    placed = dict(zip(plan.mutable_state, getattr(plan.step, "mutable", ()))) if plan.place_state else {}
    placed.update(zip(plan.const_state, getattr(plan.step, "const", ())) if plan.place_state else ())

    def struct(name):
        var = block.var(name)
        if var.type != dtypes.LOD_TENSOR or var.dtype is None or any(d < 0 for d in var.shape):
            reader = plan.first_reader.get(name)
            where = f" (read by op {reader.type!r} at {reader.location})" if reader is not None else ""
            raise UninitializedVariableError(
                f"variable {name!r}{where} has no value in the scope, and its declared shape {list(var.shape)} "
                "does not fix its size: run the startup program first, e.g. exe.run(fj.default_startup_program())")
        return jax.ShapeDtypeStruct(tuple(var.shape), dtypes.to_numpy(var.dtype), sharding=placed.get(name, single))

    packs = {spec.name: spec for spec in plan.packs}

    def bound(name):
        spec = packs.get(name)
        if spec is None:
            return struct(name)
        return jax.ShapeDtypeStruct((len(spec.members),), spec.dtype, sharding=single)

    return tuple(map(bound, plan.bound_mutable)), tuple(map(struct, plan.const_state))


def _pack_state(plan: _Plan) -> None:
    """Pack ``plan``'s one-element read-and-written state (``FLAGS_pack_small_state``, on by
    default; lowering/packed_state.py): fewer arguments and outputs, one kernel for their updates."""
    if plan.on_host:
        return
    plan.bound_mutable, specs = packed_state.plan_packs(plan.program.global_block(), plan.mutable_state,
                                                        flags.pack_small_state)
    if not specs:
        return
    plan.packs = tuple(specs)
    members = {n for spec in specs for n in spec.members}
    n_mutable = len(plan.mutable_state)
    plan.bound_written = plan.bound_mutable + tuple(n for n in plan.written_state[n_mutable:] if n not in members)


def _journaled(op_type: str) -> bool:
    """Whether ops of ``op_type`` act on the host (an effect op, or the gradient of one): a step
    holding one takes an effect ticket (lowering/effects.py)."""
    opdef = registry.get(op_type)
    return opdef.effect or (opdef.forward_type is not None and registry.get(opdef.forward_type).effect)


def _mem_key(args: tuple):
    """What a plan's memory need is kept under: every feed's shape (a run compares it with the
    last run's, one tuple comparison), with its longest sequences when it is a LoD value. Not the
    first feed's alone: a LoD model's label feed has the batch's sequence count as its shape,
    while the sequences' rows (fed beside it) may grow a hundredfold."""
    # a fed LoD value's longest sequences size what runs along them: part of the key too
    return tuple([(f.shape, f.offsets.longest) if f.__class__ is LoDValue else f.shape for f in args[2]])


def _out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` is XLA running out of memory."""
    return isinstance(exc, (jax.errors.JaxRuntimeError, MemoryError)) and "RESOURCE_EXHAUSTED" in str(exc)


def _plan_store(program) -> tuple[dict, dict]:
    """``program``'s (calls, plans): the per-call lookup (executor token, version, feed names as
    given, fetch names, flags) -> plan, and the plans by (token, version, sorted feed names, fetch
    names, flags). Kept on the program (or CompiledProgram) so that they die with it; made on
    first use."""
    try:
        return program._executor_calls, program._executor_plans
    except AttributeError:
        program._executor_calls, program._executor_plans = {}, {}
        return program._executor_calls, program._executor_plans


def _forget_plans(token, programs) -> None:
    """Drop the plans an Executor (``token``) made on ``programs`` (at ``close()`` and when the
    Executor is collected)."""
    for program in list(programs):
        for store in _plan_store(program):
            for key in [k for k in store if k[0] is token]:
                store.pop(key, None)
    programs.clear()


# What _check_error returns when a run wrote arrays past their room and the rooms were grown.
_ROOMS_GROWN = object()


def _retrace(plan) -> None:
    """Make ``plan``'s steps (jitted, or sharded ones holding one) trace again on their next call."""
    for step in (plan.step, plan.kept_step):
        if step is not None:
            getattr(step, "jitted", step).clear_cache()


def _check_implemented(program: Program) -> None:
    """Every op type of every block that fluidjax does not implement, in one error, before anything runs."""
    missing = sorted({op.type for b in program.blocks for op in b.ops
                      if op.type not in FEED_FETCH_OPS and not registry.has(op.type)})
    if missing:
        raise UnregisteredOpError(f"the program uses {len(missing)} op type(s) fluidjax does not implement: "
                                  f"{', '.join(missing)}")


def _fetch_op_targets(block) -> list[str]:
    """The variables the block's fetch ops read, in their ``col`` order."""
    fetches = [op for op in block.ops if op.type == "fetch" and op.inputs.get("X")]
    return [op.inputs["X"][0] for op in sorted(fetches, key=lambda op: op.attrs.get("col", 0))]


def _not_computed(plan: _Plan, name: str) -> str:
    """Why ``name`` has no value after the step's ops ran: the op that names it produced nothing."""
    for op in plan.ops:
        for slot, names in op.outputs.items():
            if name in names:
                return (f"variable {name!r} was not computed: op {op.type!r} at {op.location} names it as "
                        f"output {slot}, but op {op.type!r} produces no value for that slot")
    return f"variable {name!r} was not computed by any op of the step"


def _lod_free(value):
    """The rows of a LoD value, or the value."""
    return value.data if value.__class__ is LoDValue else value


def _fast_tail(declared: tuple[int, ...]):
    """The dims after the first when the first is unknown (-1, the batch) and they are all known:
    the feed's fast check compares them as one tuple and never looks at the first dim. Otherwise a
    value no shape tail equals, so every feed takes the full check (``check_feed``), which
    compares every known dim (a fixed first dim included)."""
    if len(declared) >= 1 and declared[0] < 0 and all(d >= 0 for d in declared[1:]):
        return tuple(declared[1:])
    return None


# What Executor._run_fast returns when a call needs the general path (nothing was changed).
_SLOW = object()
_value_of = operator.attrgetter("_value")
_NAME = itertools.repeat("name")
_DEFERRED = deferred_signals()     # (holds nothing: one instance serves every window)


def _fast_specs(plan: _Plan) -> tuple | None:
    """``plan.fast``: what the fast path checks per feed, or None when a run of ``plan`` needs the
    general path every time (host ops, a startup program drawn on the host, host effects, a while
    loop, a data-parallel step, a LoD feed). Any declared shape is fine: the fast path compares each
    feed's shape with the last run's, which ``_fast_shapes_ok`` checked against the declaration."""
    if plan.host_ops or plan.on_host or plan.effects or plan.interruptible or plan.place_state is not None:
        return None
    specs, dims = [], []
    for name, want, declared, var, host_checks, tail, rank in plan.feed_specs:
        if var.lod_level:
            return None
        specs.append((name, want, tuple(_quick_index_check(c, want) for c in host_checks)))
        dims.append((tuple(declared), plan.empty_undefined is not None and name not in plan.unread_feeds))
    plan.fast_dims, plan.fast_shapes = tuple(dims), None
    return tuple(specs)


def _fast_shapes_ok(plan: _Plan, shapes) -> bool:
    """Whether the fast path may take feeds of ``shapes`` (``plan.mem_shape``: the last run's): one
    shape per feed, each of its declared rank and known dims (the fast check of _check_feeds) and not
    an empty batch where the step refuses one. Remembered (``plan.fast_shapes``) when they may."""
    if shapes is None or len(shapes) != len(plan.fast_dims):
        return False
    for shape, (declared, empty) in zip(shapes, plan.fast_dims):
        if shape.__class__ is not tuple or len(shape) != len(declared) or (empty and 0 in shape):
            return False
        for want, got in zip(declared, shape):    # every known dim (a fixed batch dim, a [16, 16] mask)
            if want >= 0 and want != got:
                return False
    plan.fast_shapes = shapes
    return True


_max_of = np.maximum.reduce


def _quick_index_check(check: HostIndexCheck, want: np.dtype):
    """``check`` (a fed index array's range check) for the fast path, where the array is a NumPy
    array of dtype ``want``: one reduction answers the common case (all indices in range: seen as
    unsigned, a negative index is huge, so ``max < size`` checks both ends); anything else (an
    empty array, an index out of range, an ignored label) is the full check's, which raises."""
    spec = check.spec
    if spec.component is not None or want.kind not in "iu":
        return check
    view, size = np.dtype(want.str.replace("i", "u")), spec.size
    code = view.char        # the unsigned type as a struct code: Python's max over a memoryview of it

    def quick(value) -> None:
        # A short array (labels) through Python's max over its buffer touches less code than a
        # NumPy reduction (what matters right after a step, when little is in the CPU's caches).
        try:
            items = memoryview(value).cast("B").cast(code)
        except (TypeError, ValueError):          # not contiguous
            items = ()
        if len(items) <= 256:
            if not (items and max(items) < size):
                check(value)
        elif not _max_of(value.view(view), None) < size:
            check(value)

    return quick


class PreparedStep:
    """What :meth:`Executor.prepare` returns: ``step(feed) -> fetches``, one run per call.

    Calls of the prepared signature (the program unchanged since, feeds of the last call's names,
    shapes and dtypes, the same scope) take the Executor's fast path; any other call is a plain
    :meth:`Executor.run` with the same program, scope and fetches (checked, planned and compiled
    as that run would be). ``step.fetch_names`` lists what each call returns, in order.
    """

    __slots__ = ("executor", "program", "scope", "feed_names", "fetch_names", "return_numpy", "_key", "_plan")

    def __init__(self, executor: Executor, program, scope: Scope, feed_names: tuple, fetch_names: tuple,
                 return_numpy: bool) -> None:
        self.executor, self.program, self.scope = executor, program, scope
        self.feed_names, self.fetch_names, self.return_numpy = feed_names, fetch_names, return_numpy
        self._key = self._plan = None
        self._find_plan()

    def _find_plan(self) -> None:
        """The plan a run of the prepared signature finds now (None: the next run makes it)."""
        program, executor = self.program, self.executor
        self._key = key = (program._version, flags.mode)
        plan = _plan_store(program)[0].get((executor._token,) + key[:1] + (self.feed_names, self.fetch_names) + key[1:])
        self._plan = plan if plan is not None and plan.fast is not None and plan.program is program else None

    def __call__(self, feed: Mapping[str, Any]) -> list:
        plan, program = self._plan, self.program
        # Exe.run's fast-path test, with the lookup done: the same program version, flags and feed names.
        if plan is not None and feed.__class__ is dict and program._version == self._key[0] \
                and flags.mode == self._key[1] and tuple(feed) == self.feed_names and not program.run_hooks \
                and not feed_sources.any_started():
            out = self.executor._run_fast(plan, self.scope, feed, self.return_numpy)
            if out is not _SLOW:
                return out
        out = self.executor.run(program, feed, self.fetch_names, self.scope, self.return_numpy)
        self._find_plan()
        return out

    def __repr__(self) -> str:
        return f"PreparedStep(feeds={list(self.feed_names)}, fetches={list(self.fetch_names)})"


def _keep_old_unless(ok, new, old):
    """``new`` if ``ok`` else ``old`` (a select XLA fuses into the update that computes ``new``)."""
    if old is None or getattr(old, "shape", None) != getattr(new, "shape", None) \
            or getattr(old, "dtype", None) != getattr(new, "dtype", None):
        return new
    return jnp.where(ok, new, old)


def _declares_lod(program, name: str) -> bool:
    """Whether ``program`` (or a CompiledProgram's) declares variable ``name`` with LoD."""
    program = program if isinstance(program, Program) else getattr(program, "program", None)
    var = program.global_block().find_var(name) if program is not None else None
    return var is None or var.lod_level > 0


def _store_lod_value(tensor: LoDTensor, value: LoDValue) -> None:
    """A persistable variable given a LoD value (``assign`` of a sequence to a global variable):
    the scope holds its real rows and its LoD, as Paddle's does. (Stored as it came, the padded
    value read back as an object array and could not be saved.)"""
    data, lod = to_host(value)
    tensor._value, tensor._lod = jnp.asarray(data), []
    tensor.set_lod(lod)


def _lod_tensor(data: np.ndarray, lod) -> LoDTensor:
    tensor = LoDTensor(data)
    tensor.set_lod(lod)
    return tensor
