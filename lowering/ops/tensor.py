"""Creating and converting tensors: constants and fills (fill_constant, assign_value, fill_*_like),
casts and copies, shapes and sizes, ranges (range, linspace, meshgrid), eye, one-hot, padding."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ...ir import dtypes
from ...ir.errors import DataDependentShapeError, OpRuntimeError
from ...ir.registry import Attr, declare_counts, op
from ...ir.shape import InferShapeContext, same_as
from ..checks import IndexInput, index_inputs
from ..host_init import host_rule
from ._errors import _fail
from ._tensor_attrs import static_ints
from ._counts import count_of, counted, is_counted
from ..lod_value import LoDValue, sequence_count
from ..lower import lod_aware


def _int_text(text: str) -> int:
    """An integer ``str_value``: Paddle 2.x's initializers write ``str(float(v))`` ("-1.0")."""
    return int(text) if text.strip().lstrip("+-").isdigit() else int(float(text))


def _fill_shape(ctx: InferShapeContext) -> None:
    ctx.set_output("Out", ctx.attr("shape"), dtypes.from_enum(ctx.attr("dtype")), 0)


@op("fill_constant", inputs="ValueTensor? ShapeTensor? ShapeTensorList*?", outputs="Out",
    attrs={"dtype": 5, "shape": Attr("longs", []), "value": 0.0, "str_value": "", "force_cpu": False,
           "place_type": -1},
    infer_shape=_fill_shape, grad=None)
def fill_constant(ctx):
    """A tensor of ``shape`` filled with ``value`` (``str_value`` wins when set, keeping precision)."""
    dtype = dtypes.to_numpy(dtypes.from_enum(ctx.attr("dtype")))
    text = ctx.attr("str_value")
    value = ctx.attr("value")
    if text:
        value = _int_text(text) if np.issubdtype(dtype, np.integer) else float(text)
    if ctx.input("ValueTensor") is not None:
        value = ctx.input("ValueTensor").reshape(())
    shape = static_ints(ctx, "ShapeTensor", "ShapeTensorList", what="the shape")
    return {"Out": jnp.full(tuple(shape if shape is not None else ctx.attr("shape")), value, dtype)}


@host_rule("fill_constant")
def _fill_constant_host(ctx):
    dtype = ctx.dtype()
    text, value = ctx.attr("str_value"), ctx.attr("value")
    if text:
        value = _int_text(text) if np.issubdtype(dtype, np.integer) else float(text)
    return np.full(ctx.shape(), value, dtype)


def _pad_shape(ctx: InferShapeContext) -> None:
    x = ctx.input("X")
    pads = ctx.attr("paddings")
    ctx.check(len(pads) == 2 * x.ndim, f"paddings needs 2 values per dim of X ({2 * x.ndim}), got {pads}")
    shape = [d + pads[2 * i] + pads[2 * i + 1] if d >= 0 else -1 for i, d in enumerate(x.shape)]
    ctx.set_output("Out", shape, x.dtype, x.lod_level)


@op("pad", inputs="X", outputs="Out", attrs={"paddings": Attr("ints", []), "pad_value": 0.0},
    infer_shape=_pad_shape)
def pad(ctx):
    """X padded with ``pad_value``: ``paddings`` gives (before, after) for every dim."""
    x = ctx.input("X")
    p = ctx.attr("paddings")
    widths = [(p[2 * i], p[2 * i + 1]) for i in range(x.ndim)]
    return {"Out": jnp.pad(x, widths, constant_values=jnp.asarray(ctx.attr("pad_value"), x.dtype))}


def _string_shape(ctx: InferShapeContext) -> None:
    pass


@op("fill_string", inputs="", outputs="Out", attrs={"value": ""}, infer_shape=_string_shape, host=True)
def fill_string(op, scope):
    """fluidjax's op that gives a string variable its value (strings never enter XLA).

    Runs on the host, outside ``jax.jit``; Paddle has no op of this kind.
    """
    for name in op.output("Out"):
        holder = scope.find_var(name) or scope.var(name)
        holder.set(str(op.attr("value")))


_ASSIGN_VALUE_FIELDS = {"bool": "bool_values", "int32": "int32_values", "int64": "int64_values",
                        "float32": "fp32_values", "float64": "fp64_values"}


def _assign_value_dtype(ctx) -> str:
    return dtypes.from_enum(ctx.attr("dtype"))


def _assign_value_shape(ctx: InferShapeContext) -> None:
    dtype = _assign_value_dtype(ctx)
    ctx.check(dtype in _ASSIGN_VALUE_FIELDS, f"dtype {dtype} is not one assign_value holds "
                                             f"({', '.join(_ASSIGN_VALUE_FIELDS)})")
    ctx.set_output("Out", [int(d) for d in ctx.attr("shape")], dtype, 0)


@op("assign_value", inputs="", outputs="Out",
    attrs={"shape": Attr("ints", []), "dtype": 5, "bool_values": Attr("ints", []),
           "fp32_values": Attr("floats", []), "fp64_values": Attr("float64s", []),
           "int32_values": Attr("ints", []), "int64_values": Attr("longs", [])},
    infer_shape=_assign_value_shape, grad=None)
def assign_value(ctx):
    """A constant tensor of ``shape`` and ``dtype`` whose values are in the attribute for the dtype
    (``fp32_values``, ``int64_values``, ...)."""
    dtype = _assign_value_dtype(ctx)
    if dtype not in _ASSIGN_VALUE_FIELDS:
        _fail(ctx, f"dtype {dtype} is not one assign_value holds ({', '.join(_ASSIGN_VALUE_FIELDS)})")
    shape = tuple(int(d) for d in ctx.attr("shape"))
    values = np.asarray(list(ctx.attr(_ASSIGN_VALUE_FIELDS[dtype]) or []), dtypes.to_numpy(dtype))
    if values.size != int(np.prod(shape)):
        _fail(ctx, f"{_ASSIGN_VALUE_FIELDS[dtype]} holds {values.size} values but shape {list(shape)} needs "
                   f"{int(np.prod(shape))}")
    return {"Out": jnp.asarray(values.reshape(shape))}


# -- cast / assign / shape / size ------------------------------------------------------------------
def _cast_shape(ctx: InferShapeContext) -> None:
    x = ctx.input("X")
    ctx.set_output("Out", x.shape, dtypes.from_enum(ctx.attr("out_dtype")), x.lod_level)


def _cast_grad_maker(op, out_grads, in_grads):
    # Paddle has no cast_grad: the gradient of a cast is a cast back to the input's dtype.
    x_dtype = dtypes.to_enum(op.block.var(op.input("X")[0]).dtype)
    return [("cast", {"X": out_grads["Out"]}, {"Out": in_grads["X"]},
             {"in_dtype": op.attrs.get("out_dtype", x_dtype), "out_dtype": x_dtype})]


@op("cast", inputs="X", outputs="Out", attrs={"out_dtype": 5, "in_dtype": 5, "use_mkldnn": False},
    infer_shape=_cast_shape, grad_maker=_cast_grad_maker)
def cast(ctx):
    """X converted to ``out_dtype`` (a Paddle type number): floats to ints truncate toward zero,
    anything to bool tests for non-zero. Gradients flow only between float types."""
    x = ctx.input("X")
    return {"Out": x.astype(dtypes.to_numpy(dtypes.from_enum(ctx.attr("out_dtype"))))}


def _assign_shape(ctx: InferShapeContext) -> None:
    x = ctx.input("X")
    if x is not None:
        ctx.set_output("Out", x.shape, x.dtype, x.lod_level)


@op("assign", inputs="X?", outputs="Out", infer_shape=_assign_shape)
def assign(ctx):
    """Out = X (a copy; with X absent the op does nothing)."""
    x = ctx.input("X")
    return {} if x is None else {"Out": x}


def _shape_shape(ctx: InferShapeContext) -> None:
    x = ctx.input("Input")
    ctx.set_output("Out", (x.ndim,), "int32", 0)


@op("shape", inputs="Input", outputs="Out", infer_shape=_shape_shape, grad=None)
def shape(ctx):
    """The shape of Input as a 1-d int32 tensor (of a counted value: its real row count first)."""
    x = ctx.input("Input")
    if is_counted(x) and not isinstance(x.offsets[-1], jax.core.Tracer):
        # a count known while tracing (the rows a plain input pinned, lower._strip_lod): static,
        # so downstream shape arithmetic folds (fill_constant([shape(x)[0], 1]))
        with jax.ensure_compile_time_eval():
            count = int(count_of(x))
        return {"Out": np.asarray((count,) + tuple(x.shape[1:]), np.int32)}
    if is_counted(x):
        return {"Out": jnp.asarray(x.shape, jnp.int32).at[0].set(count_of(x))}
    # A NumPy array: the shape is static, and downstream shape arithmetic can fold (lower.run_op).
    return {"Out": np.asarray(x.shape, np.int32)}


declare_counts("shape", {"Input": "count"})


@op("size", inputs="Input", outputs="Out", infer_shape=lambda ctx: ctx.set_output("Out", (), "int64", 0), grad=None)
def size(ctx):
    """The number of elements of Input, a 0-d int64 tensor (known from the shape alone)."""
    return {"Out": np.asarray(int(np.prod(ctx.input("Input").shape)), np.int64)}


# -- range, linspace, meshgrid ---------------------------------------------------------------------
def range_length(start, end, step) -> int:
    """The number of values of ``range(start, end, step)``: ceil((end - start) / step)."""
    if step == 0:
        raise ValueError("range: step must not be 0")
    if isinstance(start, (int, np.integer)) and isinstance(end, (int, np.integer)) \
            and isinstance(step, (int, np.integer)):
        n = -(-(abs(int(end) - int(start))) // abs(int(step)))
        return n if (end - start) * step > 0 else 0
    return max(0, int(np.ceil((float(end) - float(start)) / float(step))))


def _range_shape(ctx: InferShapeContext) -> None:
    start = ctx.input("Start")
    for slot in ("Start", "End", "Step"):
        v = ctx.input(slot)
        ctx.check(v.ndim == 0 or (v.ndim == 1 and v.shape[0] in (1, -1)),
                  f"{slot} must hold one value (shape [] or [1]), got {v.shape}")
    declared = ctx.output("Out").shape
    length = declared[0] if len(declared) == 1 else -1
    ctx.set_output("Out", (length,), start.dtype, 0)


@op("range", inputs="Start End Step", outputs="Out", infer_shape=_range_shape, grad=None)
def range_(ctx):
    """``start, start + step, ...`` below ``end`` (above it for a negative step), of Start's dtype.

    The length depends on the values, but XLA needs it statically: inside ``jax.jit`` the
    inputs are tracers, so the length comes from the program's declared Out shape (the
    ``range``/``arange`` layer computes it when given Python numbers) or, outside ``jit``, from
    concrete values. A range whose bounds are only known at run time raises a clear error.
    """
    start, end, step = (ctx.input(s) for s in ("Start", "End", "Step"))
    dtype = start.dtype
    start, step = start.reshape(()), step.reshape(())
    if not any(isinstance(v, jax.core.Tracer) for v in (start, end, step)):
        s, e, st = (np.asarray(v).reshape(()).item() for v in (start, end, step))
        n = range_length(s, e, st)
    else:
        var = ctx.out_var("Out")
        n = var.shape[0] if var is not None and len(var.shape) == 1 else -1
        if n < 0:
            raise OpRuntimeError(
                "op 'range': the output length depends on Start/End/Step, which are only known at run "
                "time inside jax.jit; build it with Python numbers (layer.range(0, 10, 2)) or declare "
                "Out's length")
    return {"Out": (start + step * jnp.arange(n, dtype=dtype)).astype(dtype)}


def _linspace_shape(ctx: InferShapeContext) -> None:
    # The length is the *value* of Num: known here only when the program declares it.
    out = ctx.output("Out")
    n = out.shape[0] if out is not None and len(out.shape) == 1 else -1
    ctx.set_output("Out", (n,), dtypes.from_enum(ctx.attr("dtype")), 0)


@op("linspace", inputs="Start Stop Num", outputs="Out", attrs={"dtype": 5}, infer_shape=_linspace_shape, grad=None)
def linspace(ctx):
    """Num evenly spaced values from Start to Stop (both included), of ``dtype``; the first half
    counts up from Start and the second down from Stop, as Paddle's kernel does. Num sets the
    output's length, so its value must be known when the block is lowered (or the program must
    declare the length)."""
    dtype = dtypes.to_numpy(dtypes.from_enum(ctx.attr("dtype")))
    try:
        (num,) = static_ints(ctx, "Num", what="Num")
    except OpRuntimeError:
        var = ctx.out_var("Out")
        if var is None or len(var.shape) != 1 or var.shape[0] < 0:
            raise
        num = int(var.shape[0])
    work = jnp.float64 if dtype == np.float64 else jnp.float32
    start = ctx.input("Start").reshape(()).astype(work)
    stop = ctx.input("Stop").reshape(()).astype(work)
    if num == 1:
        return {"Out": start.reshape(1).astype(dtype)}
    step = (stop - start) / (num - 1)
    i = jnp.arange(num, dtype=work)
    out = jnp.where(i < num // 2, start + step * i, stop - step * (num - 1 - i))
    return {"Out": out.astype(dtype)}


def _eye_shape(ctx: InferShapeContext) -> None:
    rows, cols = ctx.attr("num_rows"), ctx.attr("num_columns")
    ctx.check(rows >= 0, f"num_rows must be >= 0, got {rows}")
    ctx.set_output("Out", (rows, rows if cols < 0 else cols), dtypes.from_enum(ctx.attr("dtype")), 0)


@op("eye", inputs="", outputs="Out", attrs={"num_rows": Attr("long", 0), "num_columns": Attr("long", -1), "dtype": 5},
    infer_shape=_eye_shape, grad=None)
def eye(ctx):
    """A num_rows × num_columns matrix with ones on the diagonal (num_columns -1: square)."""
    rows, cols = ctx.attr("num_rows"), ctx.attr("num_columns")
    return {"Out": jnp.eye(rows, rows if cols < 0 else cols, dtype=dtypes.to_numpy(dtypes.from_enum(ctx.attr("dtype"))))}


def _meshgrid_shape(ctx: InferShapeContext) -> None:
    xs = ctx.inputs("X")
    ctx.check(all(x.ndim <= 1 for x in xs), f"meshgrid needs 0-D or 1-D inputs, got {[x.shape for x in xs]}")
    ctx.check(len({x.dtype for x in xs}) == 1, f"meshgrid needs inputs of one dtype, got {[x.dtype for x in xs]}")
    shape = tuple(x.shape[0] if x.ndim == 1 else 1 for x in xs)
    for i, x in enumerate(xs):
        ctx.set_output("Out", shape, x.dtype, 0, index=i)


@op("meshgrid", inputs="X*", outputs="Out*", infer_shape=_meshgrid_shape)
def meshgrid(ctx):
    """Coordinate grids of the 1-D inputs ("ij" indexing): Out[i] has shape [len(X0), len(X1), ...]
    and varies along dim i."""
    xs = [x.reshape(-1) for x in ctx.inputs("X")]
    return {"Out": list(jnp.meshgrid(*xs, indexing="ij"))}


# -- one_hot_v2 ------------------------------------------------------------------------------------
def _one_hot_shape(ctx: InferShapeContext) -> None:
    x = ctx.input("X")
    ctx.check(x.dtype in ("int32", "int64"), f"X must hold int32 or int64 class ids, got {x.dtype}")
    depth = -1 if ctx.input("depth_tensor") is not None else ctx.attr("depth")
    ctx.check(ctx.input("depth_tensor") is not None or depth > 0, f"depth must be positive, got {depth}")
    ctx.set_output("Out", x.shape + (depth,), dtypes.from_enum(ctx.attr("dtype")), x.lod_level)


@op("one_hot_v2", inputs="X depth_tensor?", outputs="Out",
    attrs={"depth": -1, "dtype": 5, "allow_out_of_range": False},
    infer_shape=_one_hot_shape, grad=None)
def one_hot_v2(ctx):
    """``Out[..., k] = (X[...] == k)`` for k < ``depth``: Out has X's shape plus [depth].

    An id outside [0, depth) raises :class:`~fluidjax.IndexOutOfRangeError` at run time, as
    Paddle raises, unless ``allow_out_of_range`` (or with ``FLAGS_check_index`` off): then it
    gives a row of zeros.
    """
    x = ctx.input("X")
    depth = ctx.attr("depth")
    if ctx.input("depth_tensor") is not None:
        t = ctx.input("depth_tensor")
        if isinstance(t, jax.core.Tracer):
            raise OpRuntimeError("op 'one_hot_v2': depth_tensor is only known at run time inside jax.jit; "
                                 "give depth as the attribute")
        depth = int(np.asarray(t).reshape(-1)[0])
    dtype = dtypes.to_numpy(dtypes.from_enum(ctx.attr("dtype")))
    return {"Out": (x[..., None] == jnp.arange(depth, dtype=x.dtype)).astype(dtype)}


@index_inputs("one_hot_v2")
def _one_hot_indices(attr, shape):
    if attr("allow_out_of_range") or shape("depth_tensor") is not None:
        return []
    return [IndexInput("X", attr("depth"))]


# -- fill_constant_batch_size_like / fill_any_like / fill_zeros_like ----------------------------------
def _batch_like_target(ctx, in_shape) -> list[int]:
    shape = list(ctx.attr("shape"))
    i, o = ctx.attr("input_dim_idx"), ctx.attr("output_dim_idx")
    shape[o] = in_shape[i]
    return shape


def _batch_like_shape(ctx: InferShapeContext) -> None:
    x = ctx.input("Input")
    shape = list(ctx.attr("shape"))
    i, o = ctx.attr("input_dim_idx"), ctx.attr("output_dim_idx")
    ctx.check(0 <= i < x.ndim, f"input_dim_idx={i} is out of range for Input of rank {x.ndim}")
    ctx.check(0 <= o < len(shape), f"output_dim_idx={o} is out of range for shape {shape}")
    ctx.set_output("Out", _batch_like_target(ctx, x.shape), dtypes.from_enum(ctx.attr("dtype")), 0)


def _fill_value(ctx, dtype):
    text = ctx.attr("str_value")
    if text:
        return _int_text(text) if np.issubdtype(dtype, np.integer) else float(text)
    return ctx.attr("value")


@op("fill_constant_batch_size_like", inputs="Input", outputs="Out",
    attrs={"shape": Attr("ints", []), "input_dim_idx": 0, "output_dim_idx": 0, "dtype": 5, "value": 0.0,
           "str_value": "", "force_cpu": False},
    infer_shape=_batch_like_shape, grad=None)
def fill_constant_batch_size_like(ctx):
    """A tensor of ``shape`` filled with ``value``, except that dim ``output_dim_idx`` takes
    Input's dim ``input_dim_idx`` (the batch size).

    A LoD Input with ``input_dim_idx`` 0 gives, as Paddle's kernel, the number of sequences of its
    last level (not its rows); where those are padded (inner levels, ``FLAGS_bucket_sequences``)
    the result's rows are counted rows of the real number. A counted Input (rows whose number is
    data) gives its real row count along ``output_dim_idx`` 0 and is refused along another."""
    dtype = dtypes.to_numpy(dtypes.from_enum(ctx.attr("dtype")))
    x = ctx.input("Input")
    i, o = ctx.attr("input_dim_idx"), ctx.attr("output_dim_idx")
    if x.__class__ is not LoDValue:
        return {"Out": jnp.full(tuple(_batch_like_target(ctx, x.shape)), _fill_value(ctx, dtype), dtype)}
    var = ctx.op.block.find_var(ctx.op.inputs["Input"][0])
    if i != 0:
        return {"Out": jnp.full(tuple(_batch_like_target(ctx, x.data.shape)), _fill_value(ctx, dtype), dtype)}
    if var is not None and var.lod_level:          # the last level's sequences
        last = x.offsets[-1]
        count = sequence_count(last) if len(x.offsets) == 1 else x.offsets[-2][-1]
        rows = last.shape[0] - 1
    else:                                          # counted rows
        count, rows = x.row_count(), x.data.shape[0]
    shape = list(ctx.attr("shape"))
    shape[o] = rows
    out = jnp.full(tuple(shape), _fill_value(ctx, dtype), dtype)
    if count is None:
        return {"Out": out}
    if o != 0:
        raise DataDependentShapeError(
            f"op 'fill_constant_batch_size_like' at {ctx.op.location}: its batch size (Input's "
            f"{'sequences' if var is not None and var.lod_level else 'rows'}) is data inside the compiled "
            f"step (padded to {rows}), and output_dim_idx={o} would put it in a dim other than the rows; "
            "use output_dim_idx=0 and transpose, or give the size on the host",
            op_type=ctx.op.type, location=str(ctx.op.location))
    return {"Out": counted(out, count)}


lod_aware("fill_constant_batch_size_like")


def _any_like_dtype(ctx, x_dtype):
    d = ctx.attr("dtype")
    return x_dtype if d is None or int(d) < 0 else dtypes.from_enum(d)


def _fill_any_like_shape(ctx: InferShapeContext) -> None:
    x = ctx.input("X")
    ctx.set_output("Out", x.shape, _any_like_dtype(ctx, x.dtype), x.lod_level)


@op("fill_any_like", inputs="X", outputs="Out", attrs={"value": 0.0, "dtype": -1},
    infer_shape=_fill_any_like_shape, grad=None)
def fill_any_like(ctx):
    """A tensor of X's shape filled with ``value``; ``dtype`` -1 keeps X's dtype."""
    x = ctx.input("X")
    dtype = dtypes.to_numpy(_any_like_dtype(ctx, dtypes.normalize(x.dtype)))
    return {"Out": jnp.full(x.shape, ctx.attr("value"), dtype)}


@op("fill_zeros_like", inputs="X", outputs="Out", infer_shape=same_as("X"), grad=None)
def fill_zeros_like(ctx):
    """Zeros of X's shape and dtype."""
    return {"Out": jnp.zeros_like(ctx.input("X"))}
