"""Data-parallel and sharded runs: one program, one jitted SPMD step over a mesh of devices.

``fj.CompiledProgram(program).with_data_parallel()`` runs the program's block exactly as the
single-device Executor does (same plan, same ops, same transaction), but the ``jax.jit`` of the
step gets *shardings*: every fed batch is split along its first (``-1``) dimension over the
devices of a one-axis :class:`jax.sharding.Mesh`, and the state is placed as the
:class:`BuildStrategy` says. XLA's SPMD partitioner then inserts the collectives (an all-reduce
or reduce-scatter of the gradients, all-gathers of sharded parameters). Nothing is rewritten in
the program: the math is the whole batch's, so a mean loss is the global mean and the numbers are
those of one device running the whole batch.

Which state gets which sharding (``sharding=``):

- ``"none"``: every persistable variable replicated on every device (plain data parallel).
- ``"optimizer"`` (ZeRO-1): the optimizer accumulators (an optimizer op's inputs, other than
  ``Param``/``Grad``/``LearningRate``, with the parameter's shape: Adam's moments, Momentum's
  velocity, master weights) split over the devices; parameters replicated.
- ``"full"`` (FSDP / ZeRO-3): parameters and accumulators split, and each parameter's gradient
  constrained to its parameter's split, so XLA reduce-scatters gradients and all-gathers
  parameters where the forward needs them.

A tensor is split along its first dimension that the device count divides; a tensor with none
(a bias of 10, a ``[1]`` learning rate or ``Beta1Pow``) stays replicated. Everything that is not
a parameter or an accumulator (batch-norm statistics, learning rate, counters) is replicated.

Batch norm: statistics are always those of the global batch (``sync_batch_norm=True``, the
default here; Paddle defaults to per-device statistics). Per-device statistics would make the
numbers depend on the device count, and the contract of a data-parallel run is equality with one
device; ``sync_batch_norm=False`` over several devices is refused with a clear error rather than
silently ignored (on one device it is the same as True and is accepted: YOLOv3 sets it False there).
A run with LoD feeds (below) honours both: False, each device's statistics (Paddle's default);
True, the statistics psum-ed over the mesh inside the per-device step (``ops/norm.py``).

Batches: a fed batch must divide by the number of devices (by the local ones in a multi-process
run, where each process feeds its own shard): otherwise a :class:`~fluidjax.FeedError` — padding
would change every mean over the batch. Fetches come back whole (replicated), as one device would
return them.

LoD (variable-length) feeds: the step is a ``shard_map`` in which every device runs the
one-device step on its own share of the top-level sequences (Paddle's split rule,
``lod_split.py``), each parameter's gradient is averaged over the devices where the op making it
stores it (``BuildStrategy.gradient_scale_strategy``: CoeffNumDevice averages, One and Customized
sum), and per-device fetches are merged as Paddle merges them (see docs/scaling.md).
"""

from __future__ import annotations

import itertools
import re
import threading
import weakref
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from ..ir.errors import FeedError, NotOfferedError
from ..ir.program import Program
from . import flags
from .feeds import _plan_rows, _read_as_rows, counted_reach
from .lod_split import host_feed, merge_fetch, merge_place_feeds, paddle_shares, share_sizes, split_host, stack_shares
from .lod_value import LoDValue
from .ops.norm import statistics_across

AXIS = "dp"                                # the mesh's one axis: the devices a batch is split over
SHARDINGS = ("none", "optimizer", "full")
GRAD_SUFFIX = "@GRAD"
# Slots of an optimizer op that are not accumulators.
_NOT_ACCUMULATORS = frozenset({"Param", "Grad", "LearningRate", "SkipUpdate"})

_compiled_ids = itertools.count(1)
# {name: shares per device} of a feed given as one dict per device (CompiledProgram.place_feeds),
# taken by the step it feeds (this thread's next per-device step).
_place_shares = threading.local()


class BuildStrategy:
    """How a :class:`CompiledProgram` partitions a program over its devices.

    ``sharding``: ``"none"`` (state replicated), ``"optimizer"`` (accumulators split, ZeRO-1) or
    ``"full"`` (parameters, gradients and accumulators split, FSDP). ``sync_batch_norm``: batch
    norm over the global batch (the only mode; see the module docstring for why).

    >>> bs = BuildStrategy()
    >>> bs.sharding = "optimizer"
    """

    class ReduceStrategy:
        """Fluid's ``BuildStrategy.ReduceStrategy`` (accepted; XLA chooses how gradients are reduced)."""
        AllReduce = 0
        Reduce = 1

    class GradientScaleStrategy:
        """Fluid's ``BuildStrategy.GradientScaleStrategy``. A run with LoD feeds (one share of the
        sequences per device) honours it: CoeffNumDevice averages the devices' gradients (each
        device's loss gradient 1/n, summed), One and Customized sum them. Without LoD feeds the
        step is the whole batch's math, and the gradients are the whole batch's loss's."""
        CoeffNumDevice = 0
        One = 1
        Customized = 2

    # Fluid 1.x's settings of Paddle's graph passes (fusions, in-place reuse, NCCL layout): accepted
    # with Fluid's defaults and kept, changing nothing; XLA compiles and fuses the whole step.
    FLUID_SETTINGS = {"reduce_strategy": 0, "gradient_scale_strategy": 0, "debug_graphviz_path": "",
                      "enable_sequential_execution": False, "fuse_elewise_add_act_ops": False,
                      "fuse_bn_act_ops": False, "fuse_relu_depthwise_conv": False, "fuse_broadcast_ops": False,
                      "fuse_all_optimizer_ops": False, "fuse_all_reduce_ops": False, "enable_auto_fusion": False,
                      "enable_inplace": False, "memory_optimize": False, "cache_runtime_context": False,
                      "remove_unnecessary_lock": True, "enable_backward_optimizer_op_deps": True,
                      "num_trainers": 1, "trainer_id": 0, "nccl_comm_num": 1, "use_hierarchical_allreduce": False,
                      "hierarchical_allreduce_inter_nranks": 0}

    def __init__(self, sharding: str = "none", sync_batch_norm: bool = True) -> None:
        self.sharding = sharding
        self.sync_batch_norm = sync_batch_norm
        self.__dict__.update(self.FLUID_SETTINGS)

    @property
    def sharding(self) -> str:
        return self._sharding

    @sharding.setter
    def sharding(self, value: str) -> None:
        if value not in SHARDINGS:
            raise ValueError(f"BuildStrategy.sharding must be one of {SHARDINGS}, got {value!r}")
        self._sharding = value

    @property
    def sync_batch_norm(self) -> bool:
        return self._sync_batch_norm

    @sync_batch_norm.setter
    def sync_batch_norm(self, value: bool) -> None:
        # False (per-device statistics) is kept: on one device it is the global batch's statistics;
        # with_data_parallel refuses it over several devices (see the module doc).
        self._sync_batch_norm = bool(value)

    def __repr__(self) -> str:
        return f"BuildStrategy(sharding={self.sharding!r}, sync_batch_norm={self.sync_batch_norm})"


class ExecutionStrategy:
    """Fluid's ``ExecutionStrategy``: how Paddle's executor scheduled ops over threads. XLA compiles
    the whole step and schedules it itself, so every setting is accepted and kept but changes
    nothing (``num_threads``, ``num_iteration_per_drop_scope``, ``num_iteration_per_run``,
    ``use_thread_barrier``)."""

    def __init__(self) -> None:
        self.num_threads = 0
        self.num_iteration_per_drop_scope = 100
        self.num_iteration_per_run = 1
        self.use_thread_barrier = False

    def __repr__(self) -> str:
        return f"ExecutionStrategy({vars(self)})"


class CompiledProgram:
    """A program prepared for running on several devices (Paddle's ``CompiledProgram``).

    >>> # compiled = fj.CompiledProgram(main, fj.BuildStrategy(sharding="optimizer"))
    >>> # compiled = compiled.with_data_parallel(loss_name=loss.name)
    >>> # loss_value, = exe.run(compiled, feed={"x": xs, "y": ys}, fetch_list=[loss])

    Without :meth:`with_data_parallel` it runs like the program itself, on the Executor's device.
    """

    def __init__(self, program: Program, build_strategy: BuildStrategy | None = None) -> None:
        if not isinstance(program, Program):
            raise TypeError(f"CompiledProgram expects a fluidjax Program, got {type(program).__name__}")
        if build_strategy is not None and not isinstance(build_strategy, BuildStrategy):
            raise TypeError(f"build_strategy must be a fj.BuildStrategy, got {type(build_strategy).__name__}")
        self._program = program
        self._build_strategy = build_strategy or BuildStrategy()
        self._uid = ("compiled", next(_compiled_ids))   # never equal to a Program's uid
        self._mesh: Mesh | None = None
        self._loss_name: str | None = None

    @property
    def _version(self):
        # Plans are cached per (program, version): a change to the program re-plans this too.
        return self._program._version

    @property
    def program(self) -> Program:
        """The program this compiles."""
        return self._program

    @property
    def mesh(self) -> Mesh | None:
        """The device mesh of a data-parallel run (None before :meth:`with_data_parallel`)."""
        return self._mesh

    def with_data_parallel(self, loss_name: str | None = None, build_strategy: BuildStrategy | None = None,
                           exec_strategy: Any = None, share_vars_from: Any = None,
                           places: Sequence | None = None) -> "CompiledProgram":
        """Run on every device of ``places`` (default: every JAX device of every process), each
        taking an equal slice of every fed batch. ``loss_name`` is accepted for Paddle's API;
        the gradients are those of the global batch's loss without it. Returns ``self``."""
        if self._mesh is not None:
            raise RuntimeError("with_data_parallel was already called on this CompiledProgram")
        if loss_name is not None:
            loss_name = getattr(loss_name, "name", loss_name)
            if self._program.global_block().find_var(loss_name) is None:
                raise FeedError(f"loss_name {loss_name!r} is not a variable of the program")
        if build_strategy is not None:
            if not isinstance(build_strategy, BuildStrategy):
                raise TypeError(f"build_strategy must be a fj.BuildStrategy, got {type(build_strategy).__name__}")
            self._build_strategy = build_strategy
        if places is None:
            devices = jax.devices()
        else:
            places = list(places) if isinstance(places, (list, tuple)) else [places]
            devices = [p.jax_device() if hasattr(p, "jax_device") else p for p in places]
            if len(set(devices)) != len(devices):
                raise ValueError(f"with_data_parallel: places name a device twice: {places}")
        if not devices:
            raise ValueError("with_data_parallel: no devices")
        has_lod = any(getattr(v, "is_data", False) and v.lod_level for v in self._program.global_block().vars.values())
        if len(devices) > 1 and not self._build_strategy.sync_batch_norm and not has_lod and any(
                op.type == "batch_norm" for block in self._program.blocks for op in block.ops):
            raise ValueError(f"BuildStrategy.sync_batch_norm=False (per-device batch-norm statistics) over "
                             f"{len(devices)} devices is not supported: a fluidjax data-parallel run keeps the whole "
                             "batch's math, so batch norm uses the global batch's statistics; set it True (on one "
                             "device both are the same)")
        self._loss_name = loss_name
        self._mesh = Mesh(np.array(devices, dtype=object), (AXIS,))
        return self

    def place_feeds(self, feeds: Sequence[dict]) -> dict:
        """Fluid's feed form of one dict per device (``exe.run(compiled, feed=[d0, d1, ...])``): the
        dicts joined into one feed, and each device given exactly its own dict's sequences (rows)
        on the run's next step, instead of Paddle's even split (``lod_split.merge_place_feeds``)."""
        if self._mesh is None:
            raise FeedError(f"feed is a list of {len(feeds)} dicts (one per device), but this CompiledProgram "
                            "runs on one device: call with_data_parallel() first, or feed one dict")
        if not all(isinstance(f, dict) for f in feeds):
            raise FeedError("feed: a list feed must hold one dict per device")
        local = sum(d.process_index == jax.process_index() for d in self._mesh.devices.flat)
        if len(feeds) != local:
            raise FeedError(f"feed is a list of {len(feeds)} dicts, but this data-parallel run has {local} devices "
                            "(in this process): give one dict per device")
        merged, shares = merge_place_feeds(feeds)
        _place_shares.value = shares
        return merged

    def _compile_step(self, executor, plan):
        """The step of ``plan`` (made by ``executor`` for this program): sharded over the mesh."""
        if self._mesh is None:
            return executor._compile(plan)
        layout = ShardedStep(self._mesh, plan, self._build_strategy.sharding, executor,
                             gradient_scale=self._build_strategy.gradient_scale_strategy,
                             sync_batch_norm=self._build_strategy.sync_batch_norm)
        plan.place_state = layout.place_state
        if jax.process_count() > 1:
            _agree_on_seed(executor)
        return executor._compile(plan, sharded=layout)

    def __repr__(self) -> str:
        where = f"{self._mesh.size} devices" if self._mesh is not None else "not data parallel"
        return f"<fluidjax.CompiledProgram of {self._program!r}: {where}, {self._build_strategy!r}>"


def split_spec(shape: Sequence[int], n: int) -> PartitionSpec:
    """The spec splitting ``shape`` over ``n`` devices along its first dimension ``n`` divides
    (replicated when none does)."""
    if n > 1:
        for dim, size in enumerate(shape):
            if size >= n and size % n == 0:
                return PartitionSpec(*([None] * dim + [AXIS]))
    return PartitionSpec()


def state_roles(plan) -> tuple[set[str], set[str]]:
    """(parameters, accumulators) among the persistable variables ``plan`` reads or writes."""
    block = plan.program.global_block()
    params: set[str] = set()
    accumulators: set[str] = set()
    for op in plan.ops:
        if "Param" not in op.inputs or "ParamOut" not in op.outputs or not op.inputs["Param"]:
            continue
        param = op.inputs["Param"][0]
        params.add(param)
        shape = block.var(param).shape
        for slot, names in op.inputs.items():
            if slot in _NOT_ACCUMULATORS:
                continue
            for name in names:
                var = block.find_var(name)
                if var is not None and var.persistable and name != param and var.shape == shape:
                    accumulators.add(name)
    for name in plan.mutable_state + plan.const_state:
        var = block.find_var(name)
        if var is not None and var.is_parameter:
            params.add(name)
    return params, accumulators - params


class ShardedStep:
    """The shardings of one plan's step, its ``jax.jit``, and the placement of its state."""

    def __init__(self, mesh: Mesh, plan, sharding: str, executor=None,
                 gradient_scale: int = 0, sync_batch_norm: bool = True) -> None:
        self.mesh = mesh
        self._executor = weakref.ref(executor) if executor is not None else _no_scope
        self.plan = plan
        self.sharding = sharding
        n = mesh.size
        self.replicated = rep = NamedSharding(mesh, PartitionSpec())
        block = plan.program.global_block()
        params, accumulators = state_roles(plan)
        split = set(accumulators) if sharding in ("optimizer", "full") else set()
        if sharding == "full":
            split |= params

        def state_sharding(name: str) -> NamedSharding:
            var = block.find_var(name)
            if name in split and var is not None:
                return NamedSharding(mesh, split_spec(var.shape, n))
            return rep

        self.state = {name: state_sharding(name)
                      for name in plan.mutable_state + plan.const_state + plan.written_state}
        # Each parameter's gradient lives where its parameter does (full sharding), so XLA can
        # reduce-scatter it (its GPU pipeline does; the CPU one all-reduces and takes the slice).
        self.grad_constraints = {p + GRAD_SUFFIX: self.state[p] for p in params
                                 if sharding == "full" and p in self.state and self.state[p] is not rep}
        self.gathered = frozenset(p for p in params if p in self.state and self.state[p] is not rep) \
            if sharding == "full" else frozenset()
        self.batched = tuple(bool(var.shape) and var.shape[0] < 0
                             for var in (block.var(n_) for n_ in plan.feed_names))
        self.feeds = tuple(NamedSharding(mesh, PartitionSpec(AXIS)) if b else rep for b in self.batched)
        self.multi_process = jax.process_count() > 1
        self.local_devices = sum(d.process_index == jax.process_index() for d in mesh.devices.flat)
        self.mutable = tuple(self.state[n_] for n_ in plan.mutable_state)
        self.const = tuple(self.state[n_] for n_ in plan.const_state)
        self.jitted = None
        # A LoD feed: each device runs the one-device step on its own share of the sequences
        # (shard_map), its gradients reduced over the devices (Paddle's ParallelExecutor).
        self.per_device = any(block.var(n_).lod_level for n_ in plan.feed_names)
        self.sync_batch_norm = sync_batch_norm
        if not self.per_device and not sync_batch_norm and mesh.devices.size > 1 and any(
                op.type == "batch_norm" and not op.attrs.get("is_test", False) for op in plan.ops):
            raise ValueError("BuildStrategy.sync_batch_norm=False (per-device batch-norm statistics) is offered for "
                             "LoD feeds only (each device runs its own share); this run's feeds are dense and keep "
                             "the whole batch's math: set it True")
        if self.per_device:
            self._init_per_device(block, params, gradient_scale)

    # -- the hooks Executor._compile calls ------------------------------------------------------
    def env(self, items):
        """The step's value table: split parameters gathered whole where the step starts (so XLA
        all-gathers each once and keeps the batch-parallel math, instead of splitting the matmuls
        that use it), and a dict that constrains gradients to their parameter's split as ops store
        them."""
        if self.per_device:
            return _ReducingEnv(items, self.reduced, self.gradient_scale)
        if not self.grad_constraints:
            return dict(items)
        rep = self.replicated
        gathered = [(name, jax.lax.with_sharding_constraint(value, rep) if name in self.gathered else value)
                    for name, value in items]
        return _ConstrainedEnv(gathered, self.grad_constraints)

    def jit(self, step):
        if self.per_device:
            return self._jit_per_device(step)
        rep = self.replicated
        written = tuple(self.state[n] for n in self.plan.written_state)
        outs = (written, rep, rep, rep) if self.plan.has_checks else (written, rep)
        self.jitted = jax.jit(step, in_shardings=(self.mutable, self.const, self.feeds, rep),
                              out_shardings=outs, donate_argnums=(0,))
        return self

    # -- calling -----------------------------------------------------------------------------------
    def __call__(self, mutable, const, feeds, seed):
        outs = self.jitted(*self._arguments(mutable, const, feeds, seed))
        if self.per_device:       # each device's fetched value, merged as Paddle's fetch merges them
            fetches = [_merged(f) if split else f for f, split in zip(outs[1], self.fetch_split)]
            outs = (outs[0], fetches) + tuple(outs[2:])
        # The scope's state is now on the mesh: the Executor's one-device plans (an evaluation
        # program run between training steps) must move it back before their next run.
        executor = self._executor()
        for plan in executor._plans.values() if executor is not None else ():
            if plan.place_state is None:
                plan.committed_scope = _no_scope
        return outs

    def lower(self, mutable, const, feeds, seed) -> jax.stages.Lowered:
        """The lowered sharded step (``.compile().as_text()`` shows its collectives)."""
        return self.jitted.lower(*self._arguments(mutable, const, feeds, seed))

    def _arguments(self, mutable, const, feeds, seed):
        if self.per_device:
            feeds = self._split_feeds(feeds)
            return _placed(mutable, self.mutable), _placed(const, self.const), feeds, seed
        given = getattr(_place_shares, "value", None)
        _place_shares.value = None
        if given and any(len(set(shares)) > 1 for shares in given.values()):
            raise FeedError(f"feed: the per-device dicts give different numbers of rows ({given}); a run without LoD "
                            "feeds splits the joined batch evenly, so give every device as many rows")
        n = self.local_devices
        for name, value, batched in zip(self.plan.feed_names, feeds, self.batched):
            if value.__class__ is LoDValue:
                raise FeedError(f"feed {name!r} is a LoD (variable-length) value: a data-parallel run cannot "
                                "split it over devices; run the program on one device")
            if batched and value.shape[0] % n:
                raise FeedError(f"feed {name!r} has a batch of {value.shape[0]} rows, which does not divide "
                                f"over the {n} devices of this data-parallel run (each takes an equal slice); "
                                f"feed a multiple of {n} rows")
        if self.multi_process:
            feeds = tuple(jax.make_array_from_process_local_data(s, np.asarray(v))
                          for s, v in zip(self.feeds, feeds))
        else:   # device arrays (an Executor with a place puts feeds on its device) go to the mesh
            feeds = tuple(jax.device_put(v, s) if isinstance(v, jax.Array) and v.sharding != s else v
                          for v, s in zip(feeds, self.feeds))
        # State another run left with other shardings (a single-device run on the same scope):
        # moved here for this call; the scope gets this step's outputs.
        mutable = _placed(mutable, self.mutable)
        const = _placed(const, self.const)
        return mutable, const, feeds, seed

    # -- LoD feeds: one share of the sequences per device ------------------------------------------
    def _init_per_device(self, block, params, gradient_scale) -> None:
        """What a per-device (LoD) step needs: the gradients to reduce over the devices (each
        parameter's ``@GRAD``, where Paddle's all-reduce sits), which values every device computes
        alike, and how each feed travels (its share per device, or whole)."""
        if gradient_scale not in (0, 1, 2):
            raise ValueError(f"BuildStrategy.gradient_scale_strategy must be CoeffNumDevice (0), One (1) or "
                             f"Customized (2), got {gradient_scale!r}")
        plan = self.plan
        self.gradient_scale = gradient_scale
        self.grad_constraints = {}
        self.gathered = frozenset()
        written = {n_ for op in plan.ops for n_ in op.output_arg_names}
        reduced = set()
        for op in plan.ops:
            if "Param" in op.inputs and "ParamOut" in op.outputs and op.inputs["Param"]:
                grad = op.inputs["Param"][0] + GRAD_SUFFIX
                reduced.update([grad] if grad in written else [g for g in op.inputs.get("Grad", ()) if g in written])
        self.reduced = frozenset(reduced)
        self.feed_vars = tuple(block.var(n_) for n_ in plan.feed_names)
        self.stacked = tuple(bool(var.lod_level) or b for var, b in zip(self.feed_vars, self.batched))
        whole_feeds = {n_ for n_, s in zip(plan.feed_names, self.stacked) if not s}
        self.independent = device_independent(plan, self.reduced, whole_feeds)
        self.fetch_split = tuple(n_ not in self.independent for n_ in plan.fetch_names)
        self.feeds = tuple(NamedSharding(self.mesh, PartitionSpec(AXIS)) if s else self.replicated
                           for s in self.stacked)

    def _jit_per_device(self, step):
        """The step as ``shard_map`` over the mesh: every device runs the one-device step on its
        share; gradients are reduced where they are made (:class:`_ReducingEnv`); state that the
        devices computed differently (batch-norm moving statistics) is averaged (floats) or taken
        from device 0; fetches that differ per device come back stacked, merged on the host."""
        from jax import shard_map
        plan, mesh = self.plan, self.mesh
        stacked, fetch_split, independent = self.stacked, self.fetch_split, self.independent
        bn_axis = AXIS if self.sync_batch_norm else None
        written, has_checks = plan.written_state, plan.has_checks
        old_at = {name: i for i, name in enumerate(plan.mutable_state)}
        out_state = tuple(self.state[n_] for n_ in written)
        split, whole = PartitionSpec(AXIS), PartitionSpec()

        def local(mutable, const, feeds, seed):
            feeds = tuple(jax.tree_util.tree_map(lambda a: a[0], f) if s else f for f, s in zip(feeds, stacked))
            with statistics_across(bn_axis):      # batch_norm: the global batch's statistics, or each device's
                outs = step(mutable, const, feeds, seed)
            new_state = tuple(v if name in independent else jax.tree_util.tree_map(_agree, v)
                              for name, v in zip(written, outs[0]))
            fetches = [jax.tree_util.tree_map(lambda a: a[None], f) if s else f for f, s in zip(outs[1], fetch_split)]
            if not has_checks:
                return new_state, fetches
            failed = jax.lax.psum((~outs[2]).astype(jnp.int32), AXIS)
            oks = failed == 0
            values = jax.lax.pmax(outs[3], AXIS)
            ok = jnp.all(oks)
            new_state = tuple(jax.tree_util.tree_map(lambda new, old: jnp.where(ok, new, old), v, mutable[old_at[name]])
                              if name in old_at else v for name, v in zip(written, new_state))
            return new_state, fetches, oks, values

        def global_step(mutable, const, feeds, seed):
            outs_spec = (tuple(whole for _ in written), [split if s else whole for s in fetch_split])
            if has_checks:
                outs_spec += (whole, whole)
            run = shard_map(local, mesh=mesh, check_vma=False,
                            in_specs=(whole, whole, tuple(split if s else whole for s in stacked), whole),
                            out_specs=outs_spec)
            outs = run(mutable, const, feeds, seed)
            new_state = tuple(jax.tree_util.tree_map(lambda v, s=s: jax.lax.with_sharding_constraint(v, s), v)
                              for v, s in zip(outs[0], out_state))
            return (new_state,) + tuple(outs[1:])

        self.jitted = jax.jit(global_step, donate_argnums=(0,))
        return self

    def _split_feeds(self, feeds) -> tuple:
        """The fed values split by Paddle's rule (or as a per-place feed list gave them) over this
        process's devices, padded to shared buckets and stacked (``lowering/lod_split.py``)."""
        names = self.plan.feed_names
        n = self.local_devices
        given = getattr(_place_shares, "value", None)
        _place_shares.value = None
        hosts, shares = [], []
        for name, value, var, s in zip(names, feeds, self.feed_vars, self.stacked):
            if not s:
                hosts.append(None)
                shares.append(None)
                continue
            data, lod = host_feed(value, var)
            batch = len(lod[0]) - 1 if lod else len(data)
            if given is not None and name in given:
                share = list(given[name])
                if len(share) != n or sum(share) != batch:
                    raise FeedError(f"feed {name!r}: {len(share)} per-place feed dicts for the {n} devices of this "
                                    "data-parallel run; give one dict per device")
            else:
                share = paddle_shares(batch, n, name)
            hosts.append((data, lod))
            shares.append(share)
        uneven = any(len(set(sh)) > 1 for sh in shares if sh)
        counted = uneven or flags.bucket_sequences
        as_rows = [False] * len(names)
        if counted:
            rows_read = _read_as_rows(self.plan.ops)
            as_rows = [name in rows_read for name in names]
            if not uneven:
                counted, as_rows = _bucketing_decision(self.plan.ops, hosts, shares, as_rows)
        if self.multi_process:     # one process's uneven shares make every process count its sequences
            from jax.experimental import multihost_utils
            counted = bool(np.asarray(multihost_utils.process_allgather(np.int64(counted))).max())
            if counted and not any(as_rows):
                rows_read = _read_as_rows(self.plan.ops)
                as_rows = [name in rows_read for name in names]
        pieces = [split_host(h[0], h[1], sh) if sh else None for h, sh in zip(hosts, shares)]
        sizes = [share_sizes(p, counted and (h[1] is not None or r)) if p else []
                 for p, h, r in zip(pieces, hosts, as_rows)]
        if self.multi_process:     # every process's shares padded alike: one step shape everywhere
            flat = np.asarray([x for sz in sizes for x in sz], np.int64)
            agreed = np.asarray(multihost_utils.process_allgather(flat)).reshape(-1, flat.size).max(axis=0)
            at = 0
            for sz in sizes:
                sz[:] = agreed[at:at + len(sz)].tolist()
                at += len(sz)
        out = []
        for name, value, p, h, sz, r, s in zip(names, feeds, pieces, hosts, sizes, as_rows, self.stacked):
            if not s:
                out.append(value if not self.multi_process else
                           jax.make_array_from_process_local_data(self.replicated, np.asarray(value)))
                continue
            dense_counted = counted and h[1] is None and r
            if h[1] is None and not dense_counted and any(len(d) != sz[0] for d, _ in p):
                raise FeedError(
                    f"feed {name!r} (no LoD) is split in shares of different sizes ({[len(d) for d, _ in p]} rows) "
                    "over the devices, and an op reads it as something other than one row per sequence, so its "
                    "padding rows could not be kept out of the results; feed a batch that divides over the devices")
            local = stack_shares(p, sz, counted and (h[1] is not None or r), r)
            sharding = self.feeds[names.index(name)]
            if self.multi_process:
                out.append(jax.tree_util.tree_map(lambda a: jax.make_array_from_process_local_data(sharding, a), local))
            else:
                out.append(jax.device_put(local, sharding))
        return tuple(out)

    def place_state(self, tensors) -> None:
        """Put the values of ``tensors`` (the plan's mutable then const state) where the step
        wants them, in the scope; in a multi-process run process 0's values are broadcast first
        (as Paddle broadcasts parameters when a data-parallel program starts)."""
        names = self.plan.mutable_state + self.plan.const_state
        todo = [(t, self.state[n]) for t, n in zip(tensors, names)
                if not (isinstance(t._value, jax.Array) and t._value.sharding == self.state[n])]
        if not todo:
            return
        if not self.multi_process:
            values = jax.device_put([_device_value(t._value) for t, _ in todo], [s for _, s in todo])
        else:
            from jax.experimental import multihost_utils
            host = [np.asarray(t._value) if not isinstance(t._value, jax.Array) or t._value.is_fully_addressable
                    else None for t, _ in todo]
            global_ = [i for i, h in enumerate(host) if h is None]
            if global_:          # already global arrays (another sharding): reshard them on the devices
                moved = jax.device_put([todo[i][0]._value for i in global_], [todo[i][1] for i in global_])
            host = multihost_utils.broadcast_one_to_all([h for h in host if h is not None])
            it = iter(host)
            values = []
            moved_it = iter(moved if global_ else ())
            for i, (_, s) in enumerate(todo):
                if i in global_:
                    values.append(next(moved_it))
                else:
                    h = np.asarray(next(it))
                    values.append(jax.make_array_from_callback(h.shape, s, lambda idx, h=h: h[idx]))
        for (tensor, _), value in zip(todo, values):
            tensor._value = value


class _ConstrainedEnv(dict):
    """A value table that applies a sharding constraint to the named values stored in it."""

    def __init__(self, items, constraints: dict) -> None:
        super().__init__(items)
        self._constraints = constraints

    def __setitem__(self, name, value) -> None:
        sharding = self._constraints.get(name)
        if sharding is not None and getattr(value, "ndim", 0):
            value = jax.lax.with_sharding_constraint(value, sharding)
        super().__setitem__(name, value)


class _ReducingEnv(dict):
    """A per-device step's value table: a parameter's gradient is reduced over the devices when
    the op that makes it stores it (once; what later ops derive from it is alike everywhere), as
    Paddle's all-reduce follows the op making each gradient. ``scale``: Paddle's
    ``GradientScaleStrategy`` — CoeffNumDevice (0) averages (each device's loss gradient is
    1/devices, then summed), One (1) and Customized (2) sum."""

    def __init__(self, items, reduced: frozenset, scale: int) -> None:
        super().__init__(items)
        self._todo = set(reduced)
        self._scale = scale

    def __setitem__(self, name, value) -> None:
        if name in self._todo:
            self._todo.discard(name)
            if not isinstance(value, jax.Array) and not hasattr(value, "ndim"):
                raise NotOfferedError(
                    f"gradient {name!r} is a {type(value).__name__} (a sparse gradient): a data-parallel run with LoD "
                    "feeds reduces dense gradients only; build the layer without is_sparse=True")
            value = jax.lax.pmean(value, AXIS) if self._scale == 0 else jax.lax.psum(value, AXIS)
        super().__setitem__(name, value)


def _bucketing_decision(ops, hosts, shares, as_rows) -> tuple[bool, list]:
    """Whether an evenly split batch is padded to buckets (``FLAGS_bucket_sequences``), and which
    dense feeds are then carried as counted rows: the single-device executor's rule
    (``feeds.bucket_sequence_rows``) applied to the per-device shares. Sequences are padded only
    when every row-per-sequence value reaches ops that honour a count; dense feeds with the same
    shares are padded together or not at all, only when those are a LoD feed's sequence shares (a
    label per sequence), and when such a label cannot be padded nothing is (exact shares: no padded
    rows meet exact ones; the single-device rule's padding of dense feeds whose first dim keeps
    changing is not applied: those stay exact). ``hosts``/``shares``/``as_rows`` are per feed (None: not split)."""
    info = _plan_rows(ops)
    if info.lod_safe is None:
        info.lod_safe = counted_reach(ops, set(), from_lod=True) is None
    lod_shares = {tuple(sh) for h, sh in zip(hosts, shares) if sh and h[1] is not None}
    if lod_shares and not info.lod_safe:
        return False, [False] * len(as_rows)
    groups: dict = {}
    for i, (h, sh) in enumerate(zip(hosts, shares)):
        if sh and h[1] is None:
            groups.setdefault(tuple(sh), []).append(i)
    rows = list(as_rows)
    for sh, members in groups.items():
        if sh not in lod_shares:             # not a per-sequence value: its rows stay exact
            for i in members:
                rows[i] = False
        elif not all(rows[i] for i in members):
            return False, [False] * len(as_rows)     # the label cannot be padded: nor can its sequences
    return True, rows


def _agree(value):
    """One value for every device of state the devices computed differently: the mean of a float
    (batch norm's moving statistics), device 0's value otherwise."""
    if jnp.issubdtype(value.dtype, jnp.floating) or jnp.issubdtype(value.dtype, jnp.complexfloating):
        return jax.lax.pmean(value, AXIS)
    first = jax.lax.axis_index(AXIS) == 0
    if value.dtype == jnp.bool_:
        return jax.lax.psum(jnp.where(first, value, False).astype(jnp.int32), AXIS) > 0
    return jax.lax.psum(jnp.where(first, value, jnp.zeros_like(value)), AXIS)


def device_independent(plan, reduced: frozenset, whole_feeds=()) -> frozenset:
    """The names every device of a per-device step computes alike: state, whole (unsplit) feeds,
    the reduced gradients, and what ops compute from those alone (an op with a sub-block is
    counted as per-device)."""
    from .lower import block_refs
    same = set(plan.mutable_state) | set(plan.const_state) | set(whole_feeds)
    for op in plan.ops:
        alike = not block_refs(op) and all(n in same for n in op.input_arg_names)
        for out in op.output_arg_names:
            if alike or out in reduced:
                same.add(out)
            else:
                same.discard(out)
    return frozenset(same)


def _merged(fetched):
    """A fetch of a per-device step (leading axis: the devices) merged over this process's devices."""
    leaves, tree = jax.tree_util.tree_flatten(fetched)
    per_leaf = []
    for leaf in leaves:
        if isinstance(leaf, jax.Array):
            shards = sorted(leaf.addressable_shards, key=lambda sh: sh.index[0].start or 0)
            per_leaf.append([np.asarray(sh.data)[0] for sh in shards])
        else:
            per_leaf.append(list(np.asarray(leaf)))
    devices = [jax.tree_util.tree_unflatten(tree, [col[d] for col in per_leaf]) for d in range(len(per_leaf[0]))]
    return merge_fetch(devices)


def _no_scope():
    return None


def _device_value(value):
    return value if isinstance(value, jax.Array) else np.asarray(value)


def _placed(values: tuple, shardings: tuple) -> tuple:
    if all(v.__class__ is not np.ndarray and v.sharding == s for v, s in zip(values, shardings)):
        return values
    return tuple(v if isinstance(v, jax.Array) and v.sharding == s else jax.device_put(_device_value(v), s)
                 for v, s in zip(values, shardings))


def _agree_on_seed(executor) -> None:
    """Every process draws the same random numbers: process 0's default seed for all."""
    from jax.experimental import multihost_utils
    executor._default_seed = int(multihost_utils.broadcast_one_to_all(np.int64(executor._default_seed)))


# -- reading the collectives of a compiled step ------------------------------------------------------
_COLLECTIVE_LINE = re.compile(r"^\s*(?:ROOT\s+)?%\S+\s*=\s*(.*?)\s(all-reduce|all-gather|reduce-scatter|all-to-all|"
                              r"collective-permute|collective-broadcast)(-start)?\(")
_ARRAY_SHAPE = re.compile(r"\b(pred|[suf]\d+|bf16|c64|c128|f8e\w+)\[([\d,]*)\]")
_ITEM_BYTES = {"pred": 1, "bf16": 2, "c64": 8, "c128": 16}


def _shape_bytes(dtype: str, dims: str) -> int:
    size = _ITEM_BYTES.get(dtype)
    if size is None:
        size = max(int(re.sub(r"\D", "", dtype[:4]) or 8) // 8, 1)
    return size * int(np.prod([int(d) for d in dims.split(",") if d], dtype=np.int64))


def collectives(hlo_text: str) -> list[tuple[str, int]]:
    """The collectives of an optimized HLO module (``compiled.as_text()``): ``(kind, bytes of its
    result)`` per instruction. ``-start`` forms of asynchronous collectives are counted once (their
    ``-done`` halves are not); an async all-gather's result is the second half of its tuple."""
    found = []
    for line in hlo_text.splitlines():
        match = _COLLECTIVE_LINE.match(line)
        if match is None:
            continue
        shapes = [_shape_bytes(d, s) for d, s in _ARRAY_SHAPE.findall(match.group(1))]
        if match.group(3) and match.group(2) in ("all-gather", "collective-permute", "all-to-all") \
                and len(shapes) % 2 == 0:
            shapes = shapes[len(shapes) // 2:]      # (operands, results) of the async start
        found.append((match.group(2), int(sum(shapes))))
    return found


def collective_traffic(kind: str, result_bytes: int, devices: int) -> float:
    """Bytes one device sends for a collective over ``devices`` devices with ring algorithms:
    all-reduce 2(n-1)/n·S, all-gather (n-1)/n·S (S the gathered result), reduce-scatter (n-1)·S
    (S the scattered result), all-to-all (n-1)/n·S, a permute S."""
    n = max(devices, 1)
    if kind == "all-reduce":
        return 2 * (n - 1) / n * result_bytes
    if kind in ("all-gather", "all-to-all"):
        return (n - 1) / n * result_bytes
    if kind == "reduce-scatter":
        return (n - 1) * result_bytes
    return float(result_bytes)
