"""One-element state variables of a step held together in one device array (``FLAGS_pack_small_state``).

Paddle's optimizers keep per-parameter scalars: ``adam`` two beta-power accumulators per
parameter, AMP its loss-scaling counters. A GPT of 200 parameters has 400 such scalars, each a
donated argument and an output of the step. Every argument and output costs the runtime's dispatch
(measured: ~3.5 µs per donated argument on an H200, ~1.4 µs on a 2-core Xeon; one array of 1,000
elements ~70 µs on the GPU where 1,000 one-element arrays take 3.5 ms), and every scalar update
a small kernel. Packed, the step takes one ``[n]`` array per dtype instead of ``n`` arrays, slices
its scalars out inside the compiled step (free: XLA fuses the slices into their readers) and writes
their new values back as one array.

The scope keeps its variables: each member ``LoDTensor`` reads its value out of the pack (one slice,
cached until the next run replaces the pack's array), so saving, fetching and printing see exactly
what they saw before. Setting a member (``tensor.set``, a load, ``set_program_state``) detaches it:
the pack is stale, the plans bound to it forget their binding, and the next run packs the current
values again (one concatenation). Only read-and-written state whose declared shape is fully known
with one element is packed, for steps on one device (a data-parallel step keeps its own placement).
"""

from __future__ import annotations

import weakref
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from ..ir import dtypes
from ..ir.errors import OpRuntimeError, UninitializedVariableError

# The name of a pack in a plan's bound (packed) state lists: not a variable name (no variable has it).
_PREFIX = "@PACKED_STATE@"


class PackSpec:
    """What a plan packs: the member variables (declared one-element shapes) of one dtype."""

    __slots__ = ("name", "members", "shapes", "dtype")

    def __init__(self, name: str, members: Sequence[str], shapes: Sequence[tuple], dtype) -> None:
        self.name = name
        self.members = tuple(members)
        self.shapes = tuple(tuple(s) for s in shapes)
        self.dtype = np.dtype(dtype)


class PackedState:
    """A pack's array in a scope, with the member tensors that read their values out of it.

    The Executor's binding holds it where the members' tensors would be, and reads and writes its
    ``_value`` (the ``[n]`` array) as it does a tensor's."""

    def __init__(self, spec: PackSpec, members: list, scope) -> None:
        self.spec = spec
        self.members = members
        self.scope = weakref.ref(scope)
        self.stale = False
        self._value: Any = None
        self._owners: list = []            # weakrefs to the plans whose bindings hold this pack
        self._cache_of: Any = None         # the array the cached member values were sliced from
        self._cache: tuple = ()

    def _is_initialized(self) -> bool:
        return self._value is not None

    def member_value(self, index: int):
        """Member ``index``'s value, cut out of the pack's array: every member's at once, on first
        read after a run (one call of a step compiled once per pack layout), then cached."""
        buf = self._value
        if buf is None:
            return None
        if buf is not self._cache_of:
            if isinstance(buf, np.ndarray):
                values = tuple(buf[i].reshape(s) for i, s in enumerate(self.spec.shapes))
            else:
                values = _unstacker(self.spec.shapes)(buf)
            self._cache, self._cache_of = values, buf
        return self._cache[index]

    def owned_by(self, plan) -> None:
        if not any(ref() is plan for ref in self._owners):
            self._owners.append(weakref.ref(plan))

    def detach(self) -> None:
        """A member was set from outside: the pack no longer holds the truth. Every plan bound to
        it forgets that binding (its next run binds again and packs the current values)."""
        if self.stale:
            return
        # The bindings first, the stale mark last: each step may be interrupted (a Ctrl-C between
        # two statements), and every order of what is done by then must leave no binding to a
        # pack that lost a member (bind_pack checks the members again before reusing one).
        scope = self.scope()
        for ref in self._owners:
            plan = ref()
            if plan is None:
                continue
            if scope is not None:
                plan.tensor_cache.pop(scope, None)
            binding = plan.last_scope
            if binding is not None and binding[0]() is scope:
                plan.last_scope = None
        if scope is not None:
            packs = getattr(scope, "_packed_state", None)
            if packs is not None and packs.get(self.spec.members) is self:
                del packs[self.spec.members]
        self.stale = True


_UNSTACKERS: dict[tuple, Any] = {}


def _unstacker(shapes: tuple):
    """The jitted function cutting a pack's array into its members' values (one per layout)."""
    fn = _UNSTACKERS.get(shapes)
    if fn is None:
        fn = _UNSTACKERS[shapes] = jax.jit(lambda buf: tuple(buf[i].reshape(s) for i, s in enumerate(shapes)))
    return fn


def plan_packs(block, mutable: Sequence[str], enabled: bool) -> tuple[tuple[str, ...], list[PackSpec]]:
    """The packs of a step whose read-and-written state is ``mutable`` (names, in argument order),
    and the bound order of that state: ``mutable`` with each pack's members replaced by the pack's
    name at its first member's place. No pack holds fewer than two variables."""
    groups: dict[Any, list[str]] = {}
    if enabled:
        for name in mutable:
            var = block.var(name)
            shape = tuple(var.shape)
            if (var.type != dtypes.LOD_TENSOR or var.dtype is None or var.lod_level
                    or any(d < 0 for d in shape) or int(np.prod(shape, dtype=np.int64)) != 1):
                continue
            groups.setdefault(dtypes.to_numpy(var.dtype), []).append(name)
    specs = []
    for i, (dtype, names) in enumerate(groups.items()):
        if len(names) >= 2:
            specs.append(PackSpec(f"{_PREFIX}{i}:{np.dtype(dtype).name}", names,
                                  [tuple(block.var(n).shape) for n in names], dtype))
    if not specs:
        return tuple(mutable), []
    first = {spec.members[0]: spec.name for spec in specs}
    packed = {n for spec in specs for n in spec.members}
    bound = tuple(first.get(n, n) for n in mutable if n not in packed or n in first)
    return bound, specs


def is_pack(name: str) -> bool:
    """Whether a bound state name is a pack's (not a variable's)."""
    return name.startswith(_PREFIX)


def bind_pack(scope, spec: PackSpec, tensors: list, plan) -> PackedState:
    """The pack of ``spec``'s member ``tensors`` in ``scope``: the one already there while its
    members are these tensors and none was set since, else a new one holding their current values
    (the members then read from it)."""
    packs = getattr(scope, "_packed_state", None)
    if packs is None:
        packs = scope._packed_state = {}
    pack = packs.get(spec.members)
    if pack is not None and not pack.stale and pack.spec.dtype == spec.dtype and pack._value is not None and all(
            a is b and getattr(b, "_pack", None) is pack for a, b in zip(pack.members, tensors)):
        pack.owned_by(plan)
        return pack
    values = []
    for name, shape, tensor in zip(spec.members, spec.shapes, tensors):
        value = tensor._value
        if value is None:
            raise UninitializedVariableError(f"variable {name!r} has no value in the scope: run the startup "
                                             "program first, e.g. exe.run(fj.default_startup_program())")
        if int(np.size(value)) != 1:
            raise OpRuntimeError(f"state variable {name!r} is declared with shape {list(shape)} (one "
                                 f"element) but holds shape {list(np.shape(value))}: set it a value of its "
                                 "declared shape")
        values.append(value)
    # On the host (one element each: a small transfer, and no computation to compile); the
    # Executor puts the array on the device as it does any value set from NumPy.
    buf = np.concatenate([np.asarray(v).ravel() for v in values]).astype(spec.dtype)
    pack = PackedState(spec, list(tensors), scope)
    pack._value = buf
    for index, tensor in enumerate(tensors):
        tensor._join_pack(pack, index)
    pack.owned_by(plan)
    packs[spec.members] = pack
    return pack


def packing_step(step, mutable: Sequence[str], written: Sequence[str], bound_mutable: Sequence[str],
                 bound_written: Sequence[str], specs: list[PackSpec]):
    """``step`` (over the variables) as a step over the bound state: each pack's array is sliced
    into its members' values before, and their new values are written back into one array after."""
    by_name = {spec.name: spec for spec in specs}
    where = {}                                 # member -> (pack position in bound_mutable, index)
    for pos, name in enumerate(bound_mutable):
        spec = by_name.get(name)
        if spec is not None:
            for i, member in enumerate(spec.members):
                where[member] = (pos, i)
    position = {name: pos for pos, name in enumerate(bound_mutable)}
    take = tuple(where.get(name, (position.get(name), None)) for name in mutable)
    out_index = {name: i for i, name in enumerate(written)}
    give = tuple(by_name[name] if name in by_name else out_index[name] for name in bound_written)

    def pack_values(spec: PackSpec, new_state):
        parts = []
        for member, shape in zip(spec.members, spec.shapes):
            value = new_state[out_index[member]]
            if int(np.prod(np.shape(value), dtype=np.int64)) != 1:
                raise OpRuntimeError(f"state variable {member!r} is declared with one element "
                                     f"({list(shape)}) but the step writes it shape "
                                     f"{list(np.shape(value))}; fix its declaration, or set FLAGS_pack_small_state=0")
            parts.append(jnp.reshape(value, (1,)).astype(spec.dtype))
        return jnp.concatenate(parts)

    def packed(mutable_bound, const, feeds, seed, *rest):
        values = tuple(mutable_bound[pos] if i is None else
                       jnp.reshape(mutable_bound[pos][i], by_name[bound_mutable[pos]].shapes[i])
                       for pos, i in take)
        out = step(values, const, feeds, seed, *rest)
        new_state = out[0]
        bound_new = tuple(pack_values(g, new_state) if isinstance(g, PackSpec) else new_state[g] for g in give)
        return (bound_new,) + tuple(out[1:])

    return packed
