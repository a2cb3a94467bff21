"""Checking and converting one feed value against its data variable (before anything compiles).

Paddle's feed rule decides how strict the check is. A variable declared with ``need_check_feed``
(``fluid.data``, ``paddle.static.data``, a parsed Paddle 2.x program's data variables) takes
only arrays of its declared dtype, rank and known dims. For every other data variable (Fluid
1.x's ``layers.data``, ``py_reader`` slots) the declaration is advice, as in Fluid's executor:
the fed array's dtype and shape decide, the step compiles per feed signature, and
:func:`reinfer` re-runs the shape rules on what was fed, refusing (a :class:`ShapeError` naming
the op and the user's line) only what an op cannot take.

Every feed error is a :class:`~fluidjax.FeedError` naming the variable. NumPy and JAX arrays fed
to a checked variable must have the declared dtype (a silent cast would hide a bug in the
user's pipeline). Python data —
lists, tuples, scalars — is converted to the declared dtype, as Paddle does, when the
conversion keeps the values: floats round to a narrower float type, integers convert to a float
type that holds them exactly, and to an integer type only when every value is integral and in
range. String and object data is refused.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from ..ir import dtypes
from ..ir import shape as shape_rules
from ..ir.errors import FeedError, ShapeError
from . import flags
from .lod_tensor import LoDTensor, lod_problem
from .lod_value import LoDValue, Offsets, bucket, from_host
from .lower import block_refs


def _declared(var) -> str:
    return f"declared {var.dtype} with shape {var.shape}"


def _from_python(name: str, value: Any, want: np.dtype, var) -> np.ndarray:
    """Python data as an array of the declared dtype (for every data variable: Python data has no
    dtype of its own to decide), or a FeedError when the conversion would change a value."""
    try:
        arr = np.asarray(value)
    except Exception as exc:  # ragged lists, objects NumPy cannot make an array of
        raise FeedError(f"feed {name!r}: cannot make an array of the {type(value).__name__} given "
                        f"({type(exc).__name__}: {exc}); the variable is {_declared(var)}") from None
    if arr.dtype == want:
        return arr
    _refuse_kind(name, arr, var)
    if want.kind == "f":
        if arr.dtype.kind in "biu":
            out = arr.astype(want)
            if not np.array_equal(out.astype(arr.dtype), arr):
                raise FeedError(f"feed {name!r}: the integers given do not all fit {want} exactly; the "
                                f"variable is {_declared(var)}")
            return out
        with np.errstate(over="ignore"):
            out = arr.astype(want)
        if not np.array_equal(np.isfinite(out), np.isfinite(arr)):
            raise FeedError(f"feed {name!r}: values overflow {want}; the variable is {_declared(var)}")
        return out
    if want.kind in "iu":
        if arr.dtype.kind == "f" and not np.all(np.isfinite(arr) & (arr == np.round(arr))):
            raise FeedError(f"feed {name!r}: the values given are not all integers, and the variable is "
                            f"{_declared(var)}")
        info = np.iinfo(want)
        if arr.size and (arr.min() < info.min or arr.max() > info.max):
            raise FeedError(f"feed {name!r}: values outside the range of {want}; the variable is "
                            f"{_declared(var)}")
        return arr.astype(want)
    if want.kind == "b":
        if arr.dtype.kind in "iuf" and np.isin(arr, (0, 1)).all():
            return arr.astype(bool)
    raise FeedError(f"feed {name!r}: cannot convert {arr.dtype} data exactly to {want}; the variable is "
                    f"{_declared(var)}")


def _refuse_kind(name: str, arr, var) -> None:
    kind = np.dtype(arr.dtype).kind
    if kind in "OUSV":
        what = {"O": "Python objects", "U": "strings", "S": "bytes", "V": "structured records"}[kind]
        raise FeedError(f"feed {name!r} holds {what} (dtype {arr.dtype}); the variable is {_declared(var)}: "
                        "feed numbers")
    if kind == "c":
        raise FeedError(f"feed {name!r} holds complex numbers; the variable is {_declared(var)}")


def check_feed(name: str, value: Any, want: np.dtype, declared: tuple[int, ...], var) -> Any:
    """``value`` as the array to feed variable ``var`` (named ``name``), or a FeedError.

    A ``need_check_feed`` variable takes its declared dtype, rank and known dims only; any other
    data variable takes any numeric array (its declaration is advice: see the module doc)."""
    if isinstance(value, LoDTensor):
        value = value.value()
        if value is None:
            raise FeedError(f"feed {name!r} is an empty LoDTensor (it holds no value); the variable is "
                            f"{_declared(var)}")
    if isinstance(value, (np.ndarray, jax.Array)):
        if value.dtype != want:  # a NumPy dtype compare: cheap on the hot path
            _refuse_kind(name, value, var)
            if not var.need_check_feed:
                return value      # an array's dtype decides (and its shape: see reinfer)
            raise FeedError(f"feed {name!r} has dtype {value.dtype}, but the variable is {_declared(var)}; "
                            f"convert it (x.astype({var.dtype!r}))")
    else:
        value = _from_python(name, value, want, var)
    shape = value.shape
    if not var.need_check_feed:
        return value
    if len(shape) != len(declared) or any(d >= 0 and d != s for d, s in zip(declared, shape)):
        raise FeedError(f"feed {name!r} has shape {tuple(shape)}, but the variable is declared "
                        f"{declared} (-1 takes any size)")
    return value


def _check_offsets(name: str, lod, rows: int) -> None:
    """Paddle's LoD rules (``lod_tensor.lod_problem``), the broken one named."""
    problem = lod_problem(lod, rows)
    if problem is not None:
        raise FeedError(f"feed {name!r}: invalid LoD {lod}: {problem}")


def _fluid_trailing_one(data: np.ndarray, declared: tuple[int, ...]) -> np.ndarray:
    """LoD data whose shape is the declared one with a trailing 1 added or dropped, reshaped to the
    declared rank: Fluid 1.x's ``create_lod_tensor`` of Python lists always makes ``[N, 1]`` rows,
    scripts feed them to ids declared ``[None]`` (``fluid.data``), and Fluid took both spellings."""
    if data.ndim == len(declared) + 1 and data.shape[-1] == 1:
        return data.reshape(data.shape[:-1])
    if data.ndim + 1 == len(declared) and declared[-1] == 1:
        return data.reshape(data.shape + (1,))
    return data


def check_lod_feed(name: str, value: Any, want: np.dtype, declared: tuple[int, ...], var) -> LoDValue:
    """A feed of a ``lod_level > 0`` variable: a LoDTensor with that many levels, as a padded
    :class:`LoDValue` (see ``lod_value.py``)."""
    if not isinstance(value, LoDTensor):
        # Fluid's rule: a dense array fed to a lod_level > 0 variable (a feed dict, or a py_reader
        # slot declared with lod_levels) is a tensor with no LoD, as Fluid's executor made it
        # (_as_lodtensor); ops that only read its rows run, an op that needs its sequences refuses.
        return check_feed(name, value, want, declared, var)
    lod = value.lod()
    if len(lod) != var.lod_level:
        raise FeedError(f"feed {name!r}: the variable has lod_level {var.lod_level}, but the LoDTensor has "
                        f"{len(lod)} LoD level(s)")
    data = np.asarray(value.value()) if value.value() is not None else value
    if isinstance(data, np.ndarray) and data.ndim >= 1:
        data = _fluid_trailing_one(data, declared)
    data = check_feed(name, data, want, declared, var)
    _check_offsets(name, lod, data.shape[0])
    return from_host(np.asarray(data), lod, flags.bucket_sequences)


_ROW_READERS: dict = {}


def _read_as_rows(ops) -> frozenset:
    """The names every forward op of ``ops`` reading them takes as counted rows (registry role
    ``"rows"``: a loss's Label, an elementwise operand), none inside a sub-block, none read by a
    LoD-aware op (a sequence op would take a counted value as one sequence). Cached per op list."""
    hit = _ROW_READERS.get(id(ops))
    if hit is not None and hit[0] is ops:
        return hit[1]
    from ..ir import registry
    from .lower import LOD_AWARE, ops_with_sub_blocks
    top = {id(op) for op in ops}
    good, bad = set(), set()
    for op in ops_with_sub_blocks(ops):
        names = set(op.input_arg_names)
        if id(op) not in top or op.type in LOD_AWARE or block_refs(op):
            bad |= names
            continue
        if op.type.endswith("_grad"):    # a grad op takes what its forward op took
            continue
        if not registry.has(op.type):
            bad |= names
            continue
        opdef = registry.get(op.type)
        try:
            values = {}
            for slot, vs in op.inputs.items():
                vars_ = [op.block.find_var(n) for n in vs]
                values[slot] = [None if v is None else jax.ShapeDtypeStruct(
                    tuple(max(int(d), 1) for d in v.shape), dtypes.to_numpy(v.dtype)) for v in vars_]
            roles = registry.count_roles(opdef, op, values)
        except Exception:          # a role rule that needs the values themselves: not a row reader
            bad |= names
            continue
        for slot, vs in op.inputs.items():
            (good if roles.get(slot) == "rows" else bad).update(vs)
    result = frozenset(good - bad)
    if len(_ROW_READERS) > 256:
        _ROW_READERS.clear()
    _ROW_READERS[id(ops)] = (ops, result)
    return result


def bucket_sequence_rows(values: list, specs, ops) -> list:
    """Under ``FLAGS_bucket_sequences``: each dense feed (lod_level 0, dim 0 not fixed by its
    declaration) whose first dim equals the real sequence count of a LoD feed of the same run
    (a label with one row per sequence), and which every op of ``ops`` reading it takes as rows
    (:func:`_read_as_rows`), as counted rows padded to that count's bucket, so its shape changes
    no more often than the LoD feeds' do. Its real count travels with it
    (``docs/ops_data_dependent.md``): fetches, ``mean`` and row-wise losses see the real rows only.
    Other dense feeds are left as they are (their shape is the step's signature).
    ``values`` and ``specs`` (``(name, var, declared)`` per feed) are in feed order."""
    counts = {int(v.offsets.count) for v in values
              if v.__class__ is LoDValue and v.offsets.__class__ is Offsets and v.offsets.count is not None}
    if not counts:
        return values
    out = list(values)
    readers = None
    for i, (value, (name, var, declared)) in enumerate(zip(values, specs)):
        if (value.__class__ is LoDValue or var.lod_level or getattr(value, "ndim", 0) < 1
                or (declared and declared[0] >= 0) or int(value.shape[0]) not in counts):
            continue
        readers = _read_as_rows(ops) if readers is None else readers
        if name not in readers:
            continue
        n = int(value.shape[0])
        if n not in counts or bucket(n) == n:
            if n in counts:
                out[i] = LoDValue(np.asarray(value), Offsets((np.asarray([0, n], np.int32),), (n,)))
            continue
        host = np.asarray(value)
        pad = np.zeros((bucket(n) - n,) + host.shape[1:], host.dtype)
        out[i] = LoDValue(np.concatenate([host, pad]), Offsets((np.asarray([0, n], np.int32),), (bucket(n),)))
    return out


def off_declaration(value, want: np.dtype, declared: tuple[int, ...]) -> bool:
    """Whether a fed value (array or LoDValue) differs from its variable's declared dtype, rank or
    known dims (possible only for a variable without ``need_check_feed``)."""
    data = value.data if value.__class__ is LoDValue else value
    shape = data.shape
    return (data.dtype != want or len(shape) != len(declared)
            or any(d >= 0 and d != s for d, s in zip(declared, shape)))


def _fed_info(name: str, value, var) -> shape_rules.VarInfo:
    data = value.data if value.__class__ is LoDValue else value
    rows = None
    if value.__class__ is LoDValue:
        rows = -1                          # padded to a bucket: the real row count is data
    dims = tuple(int(d) for d in data.shape)
    if rows is not None and dims:
        dims = (rows,) + dims[1:]
    return shape_rules.VarInfo(name, dims, dtypes.normalize(data.dtype), var.lod_level)


def reinfer(block, ops, fed: dict) -> None:
    """Re-run the shape rules of ``ops`` (of ``block``) on what was fed to data variables whose
    declaration is advice (``fed``: name -> (value, variable)): Fluid's executor ran a program on
    the fed arrays, whatever ``layers.data`` declared. An op that cannot take what reaches it
    raises its rule's :class:`ShapeError` (naming the op, its inputs and the user's line), before
    anything compiles; so does a state variable (a parameter, an accumulator) whose shape or dtype
    would change, and an op that would mix a fed float dtype with another float dtype (Fluid's
    kernels take one: "feed x.astype(...)"). Ops none of whose inputs changed keep their declared
    shapes (they are not re-run); ops with sub-blocks are not re-run either (their rules read the
    sub-block's declarations; the step's own checks see their values).
    """
    env: dict[str, shape_rules.VarInfo] = {n: _fed_info(n, v, var) for n, (v, var) in fed.items()}
    changed = set(env)
    base = shape_rules._block_lookup(block)
    fed_dtype = {n: info.dtype for n, info in env.items()
                 if info.dtype != fed[n][1].dtype and dtypes.is_float(info.dtype)}

    def lookup(name: str) -> shape_rules.VarInfo:
        return env.get(name) or base(name)

    for index, op in enumerate(ops):
        names = [n for n in op.input_arg_names if n in changed]
        if not names:
            continue
        if block_refs(op):
            continue
        where = f"block {block.idx}, op {index}"
        _check_float_mix(op, lookup, fed_dtype, where)
        results = shape_rules.run_rule(op, lookup, where)
        for name, info in results.items():
            var = block.find_var(name)
            if var is None:
                continue
            info = info._replace(shape=shape_rules.one_element_shape(info.shape, var.shape))
            if var.persistable and (info.dtype != var.dtype or len(info.shape) != len(var.shape) or any(
                    d >= 0 and s >= 0 and d != s for d, s in zip(var.shape, info.shape))):
                raise ShapeError(
                    f"op {op.type!r} ({where}) at {op.location}: with the fed {', '.join(sorted(fed))} its output "
                    f"{name!r} (a state variable, declared {var.shape} {var.dtype}) would become {info.shape} "
                    f"{info.dtype}; feed arrays the program's parameters fit")
            if (info.shape, info.dtype) != (var.shape, var.dtype):
                changed.add(name)
                env[name] = info
                if name not in fed_dtype and any(n in fed_dtype for n in names) and dtypes.is_float(info.dtype):
                    fed_dtype[name] = info.dtype


def _check_float_mix(op, lookup, fed_dtype: dict, where: str) -> None:
    """An op reading a float value whose dtype came from a feed next to a float input of another
    dtype: Fluid's kernel refused it (one dtype per kernel); so does this, before compiling."""
    tainted = [(n, fed_dtype[n]) for n in op.input_arg_names if n in fed_dtype]
    if not tainted:
        return
    for n in op.input_arg_names:
        info = lookup(n)
        if n not in fed_dtype and info.dtype is not None and dtypes.is_float(info.dtype) \
                and info.dtype != tainted[0][1]:
            raise ShapeError(
                f"op {op.type!r} ({where}) at {op.location}: input {tainted[0][0]!r} is {tainted[0][1]} (from a "
                f"feed) but input {n!r} is {info.dtype}; the op takes one float dtype: feed the data as "
                f"{info.dtype} (x.astype({info.dtype!r}))")
