"""Rows for tensor manipulation and creation ops (reshape, transpose, concat, slice, gather, cast, ...).

Rows with a ``check`` are self-contained: the harness calls ``check(case)``, and the function
builds, runs and asserts on its own (used where an op cannot be run from fed tensors, e.g.
``range``, whose length must be static inside ``jax.jit``).
"""

import numpy as np

import fluidjax as fj
from optable import Case, rand, randint

F64 = "float64"


def _check_range(case):
    """``range`` built by the layer from Python numbers: values and dtype as NumPy's arange and as
    Paddle running the same serialized program."""
    import paddle_oracle as po

    for start, end, step, dtype in [(0, 10, 3, "int64"), (1.0, 2.0, 0.25, "float32"), (5, -3, -2, "int32"),
                                    (0.5, 3.1, 0.7, "float64"), (3, 3, 1, "int64")]:
        main, startup = fj.Program(), fj.Program()
        with fj.program_guard(main, startup):
            out = fj.layer.range(start, end, step, dtype)
        expected = np.arange(start, end, step, dtype=dtype)
        assert out.shape == expected.shape, (out.shape, expected.shape)
        (ours,) = fj.Executor().run(main, fetch_list=[out], scope=fj.Scope())
        assert ours.dtype == expected.dtype
        np.testing.assert_allclose(ours, expected, rtol=1e-6)
        (theirs,) = po.run(main.serialize(), {}, [out.name])
        np.testing.assert_allclose(ours, theirs, rtol=1e-6)


def _slice(x, axes, starts, ends, strides=None, decrease_axis=(), name="", **kw):
    """A ``slice`` row (``strided_slice`` when ``strides`` is given), with the ``infer_flags``
    Paddle's kernels index (its Python API always sets them)."""
    attrs = {"axes": axes, "starts": starts, "ends": ends, "infer_flags": [1] * len(axes),
             "decrease_axis": list(decrease_axis)}
    if strides is None:
        return Case("slice", {"Input": x}, attrs=attrs, name=name, **kw)
    return Case("strided_slice", {"Input": x}, attrs={**attrs, "strides": strides}, name=name, **kw)


def _tile(x, repeat_times, name=""):
    """A ``tile`` row. Paddle's tile_grad maker needs the (empty) tensor slots in the op, as its
    Python API leaves them."""
    return Case("tile", {"X": x, "RepeatTimes": [], "repeat_times_tensor": []},
                attrs={"repeat_times": repeat_times}, name=name)


def _pad3d_cases():
    rows = []
    x = rand(2, 2, 3, 4, 5)
    for mode in ("constant", "reflect", "replicate", "circular"):
        rows.append(Case("pad3d", {"X": x}, attrs={"paddings": [1, 2, 0, 1, 2, 1], "mode": mode, "value": 0.5},
                         name=mode))
    rows.append(Case("pad3d", {"X": rand(2, 3, 4, 5, 2)},
                     attrs={"paddings": [1, 0, 2, 1, 0, 1], "mode": "reflect", "data_format": "NDHWC"}, name="ndhwc"))
    rows.append(Case("pad3d", {"X": rand(1, 2, 2, 3, 3, dtype=F64)},
                     attrs={"paddings": [1, 1, 1, 0, 0, 1], "mode": "replicate"}, name="f64"))
    return rows


CASES = [
    # reshape2 / transpose2 / flatten / squeeze / unsqueeze
    Case("reshape2", {"X": rand(4, 3, 4)}, attrs={"shape": [0, 12]}),
    Case("reshape2", {"X": rand(4, 3, 4)}, attrs={"shape": [-1, 2, 6]}, name="infer"),
    Case("reshape2", {"X": rand(4, 3, 4)}, attrs={"shape": [2, -1]}, name="infer-batch"),
    Case("reshape2", {"X": rand(2, 6, dtype=F64)}, attrs={"shape": [3, 2, 2]}, batch_dims=(), name="f64"),
    Case("transpose2", {"X": rand(4, 3, 2)}, attrs={"axis": [0, 2, 1]}),
    Case("transpose2", {"X": rand(4, 3, 2)}, attrs={"axis": [2, 0, 1]}, name="rotate"),
    Case("transpose2", {"X": rand(3, 2, 5, dtype=F64)}, attrs={"axis": [1, -1, 0]}, name="neg-f64"),
    Case("flatten_contiguous_range", {"X": rand(4, 3, 2, 2)}, attrs={"start_axis": 1, "stop_axis": 2}),
    Case("flatten_contiguous_range", {"X": rand(4, 3, 2)}, attrs={"start_axis": 0, "stop_axis": -1}, name="all"),
    Case("flatten_contiguous_range", {"X": rand(3, 2, 4, dtype=F64)}, attrs={"start_axis": -2, "stop_axis": -1},
         name="f64"),
    Case("squeeze2", {"X": rand(4, 1, 3, 1)}, attrs={"axes": []}),
    Case("squeeze2", {"X": rand(4, 1, 3, 1)}, attrs={"axes": [1]}, name="axis"),
    Case("squeeze2", {"X": rand(4, 1, 3, 1)}, attrs={"axes": [-1, 2]}, name="keep-non1"),
    Case("squeeze2", {"X": rand(3, 1, 2, dtype=F64)}, attrs={"axes": [1]}, name="f64"),
    Case("unsqueeze2", {"X": rand(4, 3)}, attrs={"axes": [1]}),
    Case("unsqueeze2", {"X": rand(4, 3)}, attrs={"axes": [0, 2]}, name="two"),
    Case("unsqueeze2", {"X": rand(4, 3)}, attrs={"axes": [-1, 1]}, name="neg"),
    Case("unsqueeze2", {"X": rand(2, 3, dtype=F64)}, attrs={"axes": [2]}, name="f64"),
    # concat / split / stack / unstack
    Case("concat", {"X": [rand(4, 3), rand(4, 2), rand(4, 1)]}, attrs={"axis": 1}),
    Case("concat", {"X": [rand(2, 3), rand(3, 3)]}, attrs={"axis": 0}, name="axis0"),
    Case("concat", {"X": [rand(2, 3, 2), rand(2, 3, 1)]}, attrs={"axis": -1}, name="neg"),
    Case("concat", {"X": [rand(2, 3, dtype=F64), rand(2, 2, dtype=F64)]}, attrs={"axis": 1}, name="f64"),
    Case("split", {"X": rand(4, 6)}, attrs={"num": 3, "axis": 1}, output_counts={"Out": 3}),
    Case("split", {"X": rand(4, 6)}, attrs={"sections": [2, -1, 1], "axis": 1}, output_counts={"Out": 3},
         name="sections"),
    Case("split", {"X": rand(6, 2)}, attrs={"sections": [1, 5], "axis": 0}, output_counts={"Out": 2},
         batch_dims=(), name="axis0"),
    Case("split", {"X": rand(2, 4, dtype=F64)}, attrs={"num": 2, "axis": 1}, output_counts={"Out": 2}, name="f64"),
    Case("stack", {"X": [rand(4, 3), rand(4, 3), rand(4, 3)]}, attrs={"axis": 0}, outputs=("Y",), batch_dims=()),
    Case("stack", {"X": [rand(4, 3), rand(4, 3)]}, attrs={"axis": 1}, outputs=("Y",), name="axis1"),
    Case("stack", {"X": [rand(4, 3), rand(4, 3)]}, attrs={"axis": -1}, outputs=("Y",), name="neg"),
    Case("stack", {"X": [rand(2, 3, dtype=F64), rand(2, 3, dtype=F64)]}, attrs={"axis": 2}, outputs=("Y",),
         name="f64"),
    Case("unstack", {"X": rand(4, 3, 2)}, attrs={"axis": 1, "num": 3}, outputs=("Y",), output_counts={"Y": 3}),
    Case("unstack", {"X": rand(2, 3)}, attrs={"axis": 0, "num": 2}, outputs=("Y",), output_counts={"Y": 2},
         batch_dims=(), name="axis0"),
    Case("unstack", {"X": rand(3, 2, dtype=F64)}, attrs={"axis": -1, "num": 2}, outputs=("Y",),
         output_counts={"Y": 2}, name="f64"),
    # slice / strided_slice
    _slice(rand(4, 5, 6), [1, 2], [0, 1], [2, 4]),
    _slice(rand(4, 5, 6), [2], [-3], [10000], name="neg-big"),
    _slice(rand(4, 5, 6), [0, 1], [1, 2], [3, 3], decrease_axis=[1], name="decrease"),
    _slice(rand(4, 5, 6), [1, 2], [4, 0], [5, 1], decrease_axis=[1, 2], name="decrease-all"),
    _slice(rand(4, 5, dtype=F64), [1], [1], [-1], name="f64"),
    _slice(rand(4, 7, 6), [1, 2], [0, 1], [7, 6], strides=[2, 3]),
    _slice(rand(4, 7), [1], [-1], [-8], strides=[-2], name="negstride"),
    _slice(rand(4, 7), [1], [5], [-1], strides=[-1], name="to-zero"),
    _slice(rand(4, 7), [1], [2], [100], strides=[3], name="big-end"),
    # Paddle's strided_slice_grad fails on decrease_axis (a rank mismatch in its kernel): the
    # gradient is checked in float64 against finite differences instead.
    _slice(rand(4, 7, 3), [1, 2], [1, 2], [6, 3], strides=[2, 1], decrease_axis=[2], grad=(), name="decrease"),
    _slice(rand(2, 5, 3, dtype=F64), [1, 2], [4, 1], [0, 2], strides=[-2, 1], decrease_axis=[2],
           paddle=False, oracle=lambda i, a: {"Out": i["Input"][:, 4:0:-2, 1]}, name="decrease-f64"),
    _slice(rand(3, 6, dtype=F64), [1], [4], [0], strides=[-2], name="f64"),
    # expand_v2 / tile
    Case("expand_v2", {"X": rand(4, 1, 3)}, attrs={"shape": [-1, 5, 3]}),
    Case("expand_v2", {"X": rand(1, 3)}, attrs={"shape": [2, 4, 3]}, batch_dims=(), name="new-dims"),
    Case("expand_v2", {"X": rand(2, 1, dtype=F64)}, attrs={"shape": [3, -1, 4]}, name="f64"),
    _tile(rand(2, 3), [2, 1]),
    _tile(rand(2, 3), [3], name="short"),
    _tile(rand(2, 3), [2, 1, 2], name="long"),
    _tile(rand(2, 2, dtype=F64), [1, 3], name="f64"),
    # gather / gather_nd / scatter
    Case("gather", {"X": rand(5, 3), "Index": np.array([4, 0, 2, 0], "int64")}),
    Case("gather", {"X": rand(3, 5), "Index": np.array([1, 4], "int32")}, attrs={"axis": 1}, grad=(),
         name="axis1"),
    # Paddle 2.6.2's static gather_grad ignores a non-zero `axis` attribute (every row of X@GRAD
    # comes out as row 0's): this row checks the gradient by NumPy and finite differences instead.
    Case("gather", {"X": rand(3, 5, dtype=F64), "Index": np.array([1, 4, 1], "int64")}, attrs={"axis": 1},
         paddle=False, oracle=lambda i, a: {"Out": np.take(i["X"], i["Index"], axis=1)}, name="axis1-f64"),
    Case("gather", {"X": rand(4, 3, dtype=F64), "Index": np.array([3, 3, 1], "int64")}, name="f64"),
    Case("gather_nd", {"X": rand(4, 3, 2), "Index": np.array([[0, 1], [3, 2], [0, 1]], "int64")}),
    Case("gather_nd", {"X": rand(4, 3), "Index": np.array([[[1], [0]], [[3], [3]]], "int32")}, name="rows"),
    Case("gather_nd", {"X": rand(3, 3, dtype=F64), "Index": np.array([[2, 2], [0, 1]], "int64")}, name="f64"),
    Case("scatter", {"X": rand(6, 3), "Ids": np.array([1, 3, 0], "int64"), "Updates": rand(3, 3)}),
    Case("scatter", {"X": rand(6, 3), "Ids": np.array([1, 1, 4], "int64"), "Updates": rand(3, 3)},
         attrs={"overwrite": False}, name="add"),
    Case("scatter", {"X": rand(5, 2, dtype=F64), "Ids": np.array([4, 2], "int32"), "Updates": rand(2, 2, dtype=F64)},
         name="f64"),
    # cast / assign / shape / range / one_hot
    Case("cast", {"X": rand(4, 3)}, attrs={"in_dtype": 5, "out_dtype": 6}),
    Case("cast", {"X": rand(4, 3, low=-5, high=5)}, attrs={"in_dtype": 5, "out_dtype": 2}, grad=(), name="to-int32"),
    Case("cast", {"X": randint(4, 3)}, attrs={"in_dtype": 3, "out_dtype": 5}, grad=(), name="from-int64"),
    Case("cast", {"X": np.array([[0.0, 1.5], [-2.0, 0.0]], "float32")}, attrs={"in_dtype": 5, "out_dtype": 0},
         grad=(), name="to-bool"),
    Case("cast", {"X": rand(3, 2, dtype=F64)}, attrs={"in_dtype": 6, "out_dtype": 6}, name="f64"),
    Case("assign", {"X": rand(4, 3)}),
    Case("assign", {"X": rand(2, 3, dtype=F64)}, name="f64"),
    Case("assign", {"X": randint(3, 2)}, grad=(), name="int64"),
    Case("shape", {"Input": rand(4, 3, 2)}, grad=()),
    Case("range", check=_check_range),
    Case("one_hot_v2", {"X": randint(5, 1, high=4)}, attrs={"depth": 4}, grad=()),
    Case("one_hot_v2", {"X": randint(6, high=3, dtype="int32")}, attrs={"depth": 3, "dtype": 3}, grad=(),
         name="int64-out"),
    # fills and padding
    Case("fill_constant_batch_size_like", {"Input": rand(4, 3)},
         attrs={"shape": [-1, 5], "value": 2.5, "dtype": 5}, grad=()),
    Case("fill_constant_batch_size_like", {"Input": rand(4, 3)},
         attrs={"shape": [2, -1, 3], "input_dim_idx": 1, "output_dim_idx": 1, "dtype": 3, "value": 7.0,
                "str_value": "7"}, grad=(), name="idx"),
    Case("fill_any_like", {"X": rand(4, 3)}, attrs={"value": 1.0}, grad=()),
    Case("fill_any_like", {"X": rand(4, 3)}, attrs={"value": 3.0, "dtype": 3}, grad=(), name="int64"),
    Case("pad", {"X": rand(4, 3)}, attrs={"paddings": [0, 1, 2, 0], "pad_value": 0.5}),
    Case("pad", {"X": rand(2, 3, dtype=F64)}, attrs={"paddings": [1, 0, 1, 1]}, batch_dims=(), name="f64"),
    *_pad3d_cases(),
]
