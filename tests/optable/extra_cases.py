"""Op-table rows: math and tensor ops of several families of ``lowering/ops/`` (unary_math,
activation, logic, math, reduce, linalg, reshaping, search, gather_scatter, tensor, slicing):
trigonometric and hyperbolic functions, mish … hard_shrink, isnan/isinf, bitwise, heaviside,
logsumexp, p_norm, dist, cumprod, bmm, einsum, tril_triu, flip, roll, meshgrid, argsort,
index_select, take/put_along_axis, expand_as_v2, assign_value, set_value.

Inputs stay away from kinks and ties, so that Paddle's one-sided conventions, JAX's and finite
differences agree.
"""

import numpy as np

from fluidjax.proto import framework_pb2 as pb

from . import Case, away_from_zero, positive, rand, randint


def _distinct(*shape, dtype="float32"):
    """Distinct values in [-0.5, 0.5) (no ties for sorting)."""
    n = int(np.prod(shape))
    return (np.random.default_rng(n + 5).permutation(n).reshape(shape) / n - 0.5).astype(dtype)


def _scalars(values):
    out = []
    for v in values:
        s = pb.Scalar()
        if isinstance(v, bool):
            s.type, s.b = pb.Scalar.BOOLEAN, v
        elif isinstance(v, int):
            s.type, s.i = pb.Scalar.LONG, v
        else:
            s.type, s.r = pb.Scalar.FLOAT64, float(v)
        out.append(s)
    return out


def _unique_index(shape, axis, size, seed):
    """Indices along ``axis`` with no repeats within a line (put_along_axis 'assign' is then exact)."""
    rng = np.random.default_rng(seed)
    moved = list(shape)
    moved.append(moved.pop(axis))
    lines = int(np.prod(moved[:-1]))
    idx = np.stack([rng.permutation(size)[: moved[-1]] for _ in range(lines)]).reshape(moved)
    return np.moveaxis(idx, -1, axis).astype("int64")


# Paddle's einsum writes one InnerCache and one XShape per operand (its gradient reads them).
EINSUM2 = dict(output_counts={"InnerCache": 2, "XShape": 2})
def _set_value_ref(inputs, attrs):
    x = inputs["Input"].copy()
    index = [slice(None)] * x.ndim
    for a, b, e, st in zip(attrs["axes"], attrs["starts"], attrs["ends"], attrs["steps"]):
        index[a] = slice(b, e, st)
    x[tuple(index)] = attrs["values"][0].r
    return {"Out": x}


UNARY = dict(grad_rtol=1e-3, grad_atol=1e-5)

CASES = [
    Case("log1p", {"X": positive(3, 4, low=0.1)}),
    Case("log1p", {"X": positive(3, 4, low=0.1, dtype="float64")}, name="f64"),
    Case("erf", {"X": rand(3, 4, low=-2, high=2)}),
    Case("erf", {"X": rand(3, 4, low=-2, high=2, dtype="float64")}, name="f64"),
    Case("sin", {"X": rand(3, 4, low=-3, high=3)}),
    Case("cos", {"X": rand(3, 4, low=-3, high=3, dtype="float64")}),
    Case("tan", {"X": rand(3, 4, low=-1.2, high=1.2)}),
    Case("asin", {"X": rand(3, 4, low=-0.9, high=0.9, dtype="float64")}),
    Case("acos", {"X": rand(3, 4, low=-0.9, high=0.9)}),
    Case("atan", {"X": rand(3, 4, low=-3, high=3, dtype="float64")}),
    Case("sinh", {"X": rand(3, 4, low=-2, high=2)}),
    Case("cosh", {"X": rand(3, 4, low=-2, high=2, dtype="float64")}),
    Case("mish", {"X": rand(3, 4, low=-4, high=4)}, **UNARY),
    Case("mish", {"X": np.array([[-30.0, -3.0, 0.5, 25.0]], "float64")}, {"threshold": 20.0}, name="tails_f64"),
    Case("selu", {"X": away_from_zero(3, 4) * 2}),
    Case("selu", {"X": away_from_zero(3, 4, dtype="float64") * 2}, {"scale": 1.5, "alpha": 2.0}, name="attrs_f64"),
    Case("celu", {"X": away_from_zero(3, 4) * 2}),
    Case("celu", {"X": away_from_zero(3, 4, dtype="float64") * 2}, {"alpha": 0.5}, name="alpha_f64"),
    Case("thresholded_relu", {"X": np.array([[-2.0, 0.3, 0.9, 1.2], [1.7, -0.4, 3.0, 0.95]], "float32")}),
    Case("thresholded_relu", {"X": away_from_zero(3, 4, dtype="float64") * 2}, {"threshold": 0.5}, name="f64"),
    Case("tanh_shrink", {"X": rand(3, 4, low=-2, high=2)}),
    Case("tanh_shrink", {"X": rand(3, 4, low=-2, high=2, dtype="float64")}, name="f64"),
    Case("softshrink", {"X": np.array([[-2.0, -0.3, 0.2, 0.7], [1.7, -0.8, 0.05, 0.9]], "float32")}),
    Case("softshrink", {"X": away_from_zero(3, 4, dtype="float64") * 2}, {"lambda": 0.1}, name="f64"),
    Case("hard_shrink", {"X": np.array([[-2.0, -0.3, 0.2, 0.7], [1.7, -0.8, 0.05, 0.9]], "float32")}),
    Case("hard_shrink", {"X": away_from_zero(3, 4, dtype="float64") * 2}, {"threshold": 0.1}, name="f64"),
    Case("isnan_v2", {"X": np.array([[1.0, np.nan, -np.inf], [np.inf, 0.0, np.nan]], "float32")}),
    Case("isnan_v2", {"X": randint(2, 3)}, name="int64"),
    Case("isinf_v2", {"X": np.array([[1.0, np.nan, -np.inf], [np.inf, 0.0, np.nan]], "float64")}),
    Case("isinf_v2", {"X": randint(2, 3, dtype="int32")}, name="int32"),
    Case("elementwise_heaviside", {"X": np.array([[-1.0, 0.0, 2.0], [0.0, 3.0, -0.5]], "float32"),
                                   "Y": rand(2, 3)}),
    Case("elementwise_heaviside", {"X": np.array([[-1.0, 0.0, 2.0], [0.0, 3.0, -0.5]], "float64"),
                                   "Y": rand(3, dtype="float64")}, name="broadcast_f64", grad=("Y",)),
    Case("bitwise_and", {"X": randint(2, 3, low=-50, high=50), "Y": randint(2, 3, low=-50, high=50)}),
    Case("bitwise_and", {"X": rand(2, 3) > 0, "Y": rand(3) > 0}, name="bool_broadcast"),
    Case("bitwise_or", {"X": randint(2, 3, low=-50, high=50, dtype="int32"), "Y": randint(3, low=0, high=50,
                                                                                           dtype="int32")}),
    Case("bitwise_xor", {"X": randint(2, 3, low=-50, high=50), "Y": randint(2, 3, low=-50, high=50)}),
    Case("bitwise_xor", {"X": randint(2, 3, low=0, high=200, dtype="uint8"),
                         "Y": randint(2, 3, low=0, high=200, dtype="uint8")}, name="uint8"),
    Case("bitwise_not", {"X": randint(2, 3, low=-50, high=50)}),
    Case("bitwise_not", {"X": rand(2, 3) > 0}, name="bool"),
    Case("logsumexp", {"X": rand(2, 3, 4, low=-3, high=3)}, {"axis": [1]}),
    Case("logsumexp", {"X": rand(2, 3, 4, low=-3, high=3, dtype="float64")}, {"axis": [0, 2], "keepdim": True},
         name="two_axes_keepdim_f64"),
    Case("logsumexp", {"X": rand(2, 3, low=-3, high=3)}, {"axis": [], "reduce_all": True}, name="all"),
    Case("p_norm", {"X": away_from_zero(2, 3, 4)}, {"porder": 2.0, "axis": 1}),
    Case("p_norm", {"X": away_from_zero(2, 3, 4, dtype="float64")}, {"porder": 3.0, "axis": -1, "keepdim": True},
         name="p3_keepdim_f64"),
    Case("p_norm", {"X": away_from_zero(2, 3, dtype="float64")}, {"porder": 1.0, "asvector": True},
         name="p1_vector_f64"),
    Case("p_norm", {"X": _distinct(2, 3)}, {"porder": float("inf"), "axis": 0}, name="inf"),
    Case("p_norm", {"X": np.array([[0.0, 1.0, -2.0], [3.0, 0.0, 0.5]], "float32")}, {"porder": 0.0, "axis": 1},
         name="p0", grad=()),
    Case("dist", {"X": rand(2, 3), "Y": rand(2, 3)}),
    Case("dist", {"X": rand(2, 3, dtype="float64"), "Y": rand(3, dtype="float64")}, {"p": 3.0},
         name="p3_broadcast_f64"),
    Case("dist", {"X": _distinct(2, 3), "Y": np.zeros((2, 3), "float32")}, {"p": float("inf")}, name="inf"),
    Case("cumprod", {"X": away_from_zero(2, 3, 4)}, {"dim": 1}),
    Case("cumprod", {"X": away_from_zero(2, 3, dtype="float64")}, {"dim": -1}, name="f64"),
    Case("bmm", {"X": rand(2, 3, 4), "Y": rand(2, 4, 5)}, rtol=1e-5, atol=1e-5),
    Case("bmm", {"X": rand(2, 3, 4, dtype="float64"), "Y": rand(2, 4, 2, dtype="float64")}, name="f64"),
    Case("einsum", {"Operands": [rand(2, 3, 4), rand(2, 4, 5)]}, {"equation": "bij,bjk->bik"}, rtol=1e-5, atol=1e-5,
         **EINSUM2),
    Case("einsum", {"Operands": [rand(2, 3, 4, dtype="float64")]}, {"equation": "ijk->kj"}, name="transpose_sum_f64",
         output_counts={"InnerCache": 1, "XShape": 1}),
    Case("einsum", {"Operands": [rand(2, 3, dtype="float64"), rand(3, dtype="float64")]}, {"equation": "ij,j->i"},
         name="matvec_f64", **EINSUM2),
    Case("einsum", {"Operands": [rand(2, 3, 4), rand(2, 4, 5)]}, {"equation": "...ij,...jk->...ik"},
         name="ellipsis", rtol=1e-5, atol=1e-5, **EINSUM2),
    # Paddle's einsum_grad fails on operands of different ranks under "...": NumPy and finite
    # differences are the oracle.
    Case("einsum", {"Operands": [rand(2, 2, 3, dtype="float64"), rand(3, 4, dtype="float64")]},
         {"equation": "...j,jk->...k"}, name="ellipsis_broadcast_f64", paddle=False,
         oracle=lambda inputs, attrs: {"Out": np.einsum(attrs["equation"], *inputs["Operands"])}, **EINSUM2),
    Case("tril_triu", {"X": rand(3, 4)}, {"diagonal": 0, "lower": True}),
    Case("tril_triu", {"X": rand(2, 3, 4, dtype="float64")}, {"diagonal": 1, "lower": False}, name="upper_f64"),
    Case("tril_triu", {"X": rand(2, 4, 4)}, {"diagonal": -1, "lower": True}, name="below"),
    Case("flip", {"X": rand(2, 3, 4)}, {"axis": [0, 2]}),
    Case("flip", {"X": rand(2, 3, dtype="float64")}, {"axis": [-1]}, name="f64"),
    Case("roll", {"X": rand(3, 4)}, {"shifts": [1, -2], "axis": [0, 1]}),
    Case("roll", {"X": rand(3, 4, dtype="float64")}, {"shifts": [5], "axis": []}, name="flat_f64"),
    Case("roll", {"X": rand(3, 4), "ShiftsTensor": np.array([2], "int64")}, {"shifts": [0], "axis": [1]},
         name="tensor", batch_dims=("X",)),
    Case("meshgrid", {"X": [rand(3), rand(4), rand(2)]}, outputs=("Out",), output_counts={"Out": 3}, batch_dims=()),
    Case("meshgrid", {"X": [rand(3, dtype="float64"), rand(2, dtype="float64")]}, outputs=("Out",),
         output_counts={"Out": 2}, batch_dims=(), name="f64"),
    Case("argsort", {"X": _distinct(3, 4)}, {"axis": -1}, outputs=("Out", "Indices")),
    Case("argsort", {"X": _distinct(3, 4, dtype="float64")}, {"axis": 0, "descending": True},
         outputs=("Out", "Indices"), name="descending_f64"),
    Case("argsort", {"X": randint(3, 5, low=0, high=100)}, {"axis": 1}, outputs=("Out", "Indices"), name="int64"),
    Case("index_select", {"X": rand(4, 3), "Index": np.array([3, 0, 0, 2], "int64")}, {"dim": 0}),
    Case("index_select", {"X": rand(2, 5, 3, dtype="float64"), "Index": np.array([4, 1], "int32")}, {"dim": 1},
         name="dim1_f64", batch_dims=("X",)),
    Case("take_along_axis", {"Input": rand(3, 4), "Index": randint(3, 2, high=4)}, {"Axis": 1},
         outputs=("Result",)),
    Case("take_along_axis", {"Input": rand(3, 4, dtype="float64"), "Index": randint(2, 4, high=3)}, {"Axis": 0},
         outputs=("Result",), name="axis0_f64", batch_dims=()),
    Case("put_along_axis", {"Input": rand(3, 4), "Index": _unique_index((3, 2), 1, 4, 1), "Value": rand(3, 2)},
         {"Axis": 1}, outputs=("Result",)),
    Case("put_along_axis", {"Input": rand(3, 4, dtype="float64"), "Index": randint(3, 3, high=4),
                            "Value": rand(3, 3, dtype="float64")},
         {"Axis": 1, "Reduce": "add"}, outputs=("Result",), name="add_f64"),
    Case("put_along_axis", {"Input": rand(4, 3), "Index": randint(2, 3, high=4), "Value": rand(2, 3)},
         {"Axis": 0, "Reduce": "add", "Include_self": False}, outputs=("Result",), name="add_exclude_self",
         batch_dims=()),
    Case("put_along_axis", {"Input": rand(3, 4), "Index": randint(3, 3, high=4), "Value": rand(3, 3)},
         {"Axis": 1, "Reduce": "mean"}, outputs=("Result",), name="mean", grad=()),
    Case("put_along_axis", {"Input": _distinct(3, 4), "Index": randint(3, 3, high=4), "Value": _distinct(3, 3) + 0.01},
         {"Axis": 1, "Reduce": "amax"}, outputs=("Result",), name="amax", grad=()),
    Case("put_along_axis", {"Input": randint(3, 4), "Index": randint(3, 2, high=4), "Value": randint(3, 2)},
         {"Axis": 1, "Reduce": "mul"}, outputs=("Result",), name="mul_int64"),
    Case("expand_as_v2", {"X": rand(3, 1), "Y": rand(2, 3, 4)}, {"target_shape": [2, 3, 4]}, batch_dims=("Y",)),
    Case("expand_as_v2", {"X": rand(1, 4, dtype="float64")}, {"target_shape": [3, 4]}, name="attr_f64"),
    Case("assign_value", {}, {"shape": [2, 3], "dtype": 5, "fp32_values": [0.5, -1.0, 2.0, 3.5, 0.0, 1.25]}),
    Case("assign_value", {}, {"shape": [3], "dtype": 3, "int64_values": [1, -(2 ** 40), 7]}, name="int64"),
    Case("assign_value", {}, {"shape": [2, 2], "dtype": 0, "bool_values": [1, 0, 0, 1]}, name="bool"),
    Case("set_value", {"Input": rand(3, 4), "ValueTensor": rand(3, 2)},
         {"axes": [1], "starts": [1], "ends": [3], "steps": [1]}, batch_dims=("Input", "ValueTensor")),
    Case("set_value", {"Input": rand(4, 5, dtype="float64"), "ValueTensor": rand(5, dtype="float64")},
         {"axes": [0], "starts": [2], "ends": [3], "steps": [1], "decrease_axes": [0]}, name="row_f64",
         batch_dims=()),
    Case("set_value", {"Input": rand(4, 6)}, {"axes": [0, 1], "starts": [0, -5], "ends": [4, 6], "steps": [2, 2],
                                             "values": _scalars([1.5]), "shape": [1], "dtype": 5},
         name="scalar_steps", batch_dims=(), grad=()),
    Case("set_value", {"Input": rand(5, 3)}, {"axes": [0], "starts": [3], "ends": [0], "steps": [-1],
                                              "values": _scalars([1.0, 2.0, 3.0]), "shape": [3], "dtype": 5},
         name="negative_step", batch_dims=(), grad=()),
    # Paddle's set_value_grad needs a ValueTensor: finite differences check the attribute form.
    Case("set_value", {"Input": rand(4, 6, dtype="float64")},
         {"axes": [0, 1], "starts": [1, 0], "ends": [3, 6], "steps": [1, 2], "values": _scalars([2.5]), "shape": [1],
          "dtype": 6}, name="scalar_f64", batch_dims=(), paddle=False, oracle=_set_value_ref),
]


# -- data-dependent output sizes: exact rows against Paddle (custom checks) ------------------------
def _rows_match_paddle(grad_of_mean: bool = False):
    """A check comparing the fetched outputs with Paddle's. Their row counts depend on the data, so
    the harness's build-time shape checks do not apply; ``grad_of_mean`` also compares X's gradient
    of mean(first output) (``mean`` averages the real rows only)."""

    def check(case):
        import fluidjax as fj
        import paddle
        import paddle_oracle as po
        import test_op_table as harness

        built = harness.Built(case)
        fetch = built.compared_outputs()
        ours = harness._run_fluidjax(built, fetch)
        theirs = po.run(built.main.serialize(), built.feed, fetch)
        for name, a, e in zip(fetch, ours, theirs):
            harness._assert_close(a, e, case.rtol, case.atol, f"{case.id}: output {name}")
        if not grad_of_mean:
            return
        block = built.main.global_block()
        first = block.var(fetch[0])
        loss = block.create_var("loss", (), first.dtype)
        block.append_op("mean", {"X": first}, {"Out": loss})
        forward = built.main.serialize()
        with fj.program_guard(built.main, built.startup):
            fj.append_backward(loss)
        (ours,) = harness._run_fluidjax(built, ["x_0@GRAD"])
        prog = po.parse(forward)
        with paddle.static.program_guard(prog):
            paddle.static.append_backward(prog.global_block().var("loss"))
        (theirs,) = po.run(prog, built.feed, ["x_0@GRAD"])
        harness._assert_close(ours, theirs, case.grad_rtol, case.grad_atol, f"{case.id}: gradient of X")

    return check


_COND = np.array([[0.0, 1.5, 0.0, -2.0], [0.0, 0.0, 0.0, 3.0], [4.0, 0.0, 0.5, 0.0]], "float32")
_DUPS = np.array([[3, 1, 3, 7], [1, 1, 9, 3], [7, 0, 0, 2]], "int64")

CASES += [
    Case("where_index", {"Condition": _COND > 0}, check=_rows_match_paddle()),
    Case("where_index", {"Condition": _COND.reshape(3, 2, 2)}, name="float_3d", check=_rows_match_paddle()),
    Case("where_index", {"Condition": np.zeros((2, 3), bool)}, name="none", check=_rows_match_paddle()),
    Case("masked_select", {"X": rand(3, 4), "Mask": _COND > 0}, outputs=("Y",),
         check=_rows_match_paddle(grad_of_mean=True)),
    Case("masked_select", {"X": rand(3, 4, dtype="float64"), "Mask": np.array([True, False, True, True])},
         outputs=("Y",), name="broadcast_f64", check=_rows_match_paddle(grad_of_mean=True)),
    Case("unique", {"X": _DUPS}, {"is_sorted": True, "return_index": True, "return_inverse": True,
                                  "return_counts": True}, outputs=("Out", "Indices", "Index", "Counts"),
         check=_rows_match_paddle()),
    Case("unique", {"X": _DUPS.astype("float32")}, {"is_sorted": True, "return_inverse": True, "dtype": 2},
         outputs=("Out", "Index"), name="float_int32", check=_rows_match_paddle()),
    Case("unique", {"X": _DUPS.reshape(-1)}, {"is_sorted": False, "dtype": 2}, outputs=("Out", "Index"),
         name="first_seen", check=_rows_match_paddle()),
    Case("unique", {"X": np.array([[1, 2], [3, 4], [1, 2], [0, 5]], "int64")},
         {"is_sorted": True, "axis": [0], "return_index": True, "return_inverse": True, "return_counts": True},
         outputs=("Out", "Indices", "Index", "Counts"), name="rows", check=_rows_match_paddle()),
]


# -- ops of paddle.nn layers and tensor functions found by the layer scan ----------------------------
def _distinct_maps(*shape):
    n = int(np.prod(shape))
    return (np.random.default_rng(n + 9).permutation(n).reshape(shape) / n - 0.5).astype("float32")


CASES += [
    Case("expm1", {"X": rand(3, 4, low=-2, high=2)}),
    Case("expm1", {"X": rand(3, 4, low=-2, high=2, dtype="float64")}, name="f64"),
    Case("log2", {"X": positive(3, 4, dtype="float64")}),
    Case("log10", {"X": positive(3, 4)}),
    Case("trunc", {"X": away_from_zero(3, 4) * 3}),
    Case("logsigmoid", {"X": rand(3, 4, low=-5, high=5)}),
    Case("logsigmoid", {"X": rand(3, 4, low=-5, high=5, dtype="float64")}, name="f64"),
    Case("brelu", {"X": (away_from_zero(3, 4) * 3).astype("float32")}, {"t_min": -1.5, "t_max": 2.5}),
    Case("brelu", {"X": away_from_zero(3, 4, dtype="float64") * 3}, {"t_min": -1.5, "t_max": 2.5}, name="f64"),
    Case("atan2", {"X1": rand(3, 4), "X2": rand(3, 4)}),
    Case("atan2", {"X1": rand(3, 4, dtype="float64"), "X2": rand(3, 4, dtype="float64")}, name="f64"),
    Case("reduce_any", {"X": rand(3, 4) > 0.5}, {"dim": [1]}),
    Case("reduce_any", {"X": rand(2, 3, 4) > 0.7}, {"dim": [0, 2], "keep_dim": True}, name="keep"),
    Case("reduce_all", {"X": rand(3, 4) > -0.8}, {"dim": [0]}),
    Case("reduce_all", {"X": rand(2, 3) > -0.8}, {"dim": [], "reduce_all": True}, name="all"),
    Case("reduce_amax", {"X": rand(3, 4)}, {"dim": [1]}),
    Case("reduce_amax", {"X": np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 0.5]], "float64")}, {"dim": [1], "keep_dim": True},
         name="ties_f64"),
    Case("reduce_amin", {"X": rand(2, 3, 4, dtype="float64")}, {"dim": [0, 2]}, name="f64"),
    Case("size", {"Input": rand(3, 4)}),
    Case("unbind", {"X": rand(3, 2, 4)}, {"axis": 1}, output_counts={"Out": 2}, batch_dims=()),
    Case("unbind", {"X": rand(3, 4, dtype="float64")}, {"axis": 0}, output_counts={"Out": 3}, batch_dims=(),
         name="f64"),
    Case("index_sample", {"X": rand(3, 5), "Index": randint(3, 4, high=5)}),
    Case("index_sample", {"X": rand(2, 6, dtype="float64"), "Index": randint(2, 3, high=6, dtype="int32")},
         name="int32_f64"),
    Case("isclose", {"Input": np.array([1.0, 1.00001, np.nan, 2.0, np.inf], "float64"),
                     "Other": np.array([1.0, 1.0, np.nan, 2.1, np.inf], "float64")}, {"rtol": "1e-05", "atol": "1e-08"}),
    Case("isclose", {"Input": np.array([[1.0, np.nan], [3.0, 0.0]], "float32"),
                     "Other": np.array([[1.001, np.nan], [3.0, 1e-9]], "float32")},
         {"rtol": "0.01", "atol": "1e-08", "equal_nan": True}, name="equal_nan"),
    Case("kron", {"X": rand(2, 3), "Y": rand(3, 2)}, batch_dims=()),
    Case("kron", {"X": rand(2, dtype="float64"), "Y": rand(2, 3, dtype="float64")}, batch_dims=(), name="ranks_f64"),
    # Paddle's repeat_interleave_grad needs a RepeatsTensor: the attribute form's gradient is
    # checked against NumPy's forward and finite differences.
    Case("repeat_interleave", {"X": rand(3, 4)}, {"Repeats": 2, "dim": 1}, grad=()),
    Case("repeat_interleave", {"X": rand(3, 2, dtype="float64")}, {"Repeats": 3, "dim": 0}, name="dim0_f64",
         paddle=False, oracle=lambda inputs, attrs: {"Out": np.repeat(inputs["X"], attrs["Repeats"], attrs["dim"])}),
    Case("diag_v2", {"X": rand(3)}, {"offset": 1, "padding_value": 0.5}, batch_dims=()),
    Case("diag_v2", {"X": rand(3, 4, dtype="float64")}, {"offset": -1}, batch_dims=(), name="matrix_f64"),
    Case("channel_shuffle", {"X": rand(2, 6, 2, 3)}, {"groups": 3}),
    Case("channel_shuffle", {"X": rand(2, 2, 3, 4, dtype="float64")}, {"groups": 2, "data_format": "NHWC"},
         name="nhwc_f64"),
    Case("pixel_unshuffle", {"X": rand(2, 3, 4, 6)}, {"downscale_factor": 2}),
    Case("pixel_unshuffle", {"X": rand(2, 6, 4, 2, dtype="float64")}, {"downscale_factor": 2, "data_format": "NHWC"},
         name="nhwc_f64"),
    Case("maxout", {"X": _distinct_maps(2, 6, 3, 2)}, {"groups": 3}),
    Case("maxout", {"X": _distinct_maps(2, 3, 2, 4).astype("float64")}, {"groups": 2, "axis": 3}, name="last_f64"),
    Case("rrelu", {"X": away_from_zero(3, 4)}, {"is_test": True}),
    Case("max_pool2d_with_index", {"X": _distinct_maps(2, 3, 6, 7)}, {"ksize": [2, 3], "strides": [2, 2],
                                                                       "paddings": [1, 1]}, outputs=("Out", "Mask")),
    Case("max_pool2d_with_index", {"X": _distinct_maps(2, 2, 7, 5).astype("float64")},
         {"ksize": [3, 2], "adaptive": True}, outputs=("Out", "Mask"), name="adaptive_f64"),
    Case("max_pool2d_with_index", {"X": _distinct_maps(2, 2, 4, 5)}, {"ksize": [1, 1], "global_pooling": True},
         outputs=("Out", "Mask"), name="global"),
    Case("max_pool3d_with_index", {"X": _distinct_maps(1, 2, 4, 4, 5)}, {"ksize": [2, 2, 2], "strides": [2, 2, 2],
                                                                          "paddings": [0, 1, 0]},
         outputs=("Out", "Mask")),
    Case("unfold", {"X": rand(2, 3, 5, 6)}, {"kernel_sizes": [2, 3], "strides": [1, 2], "paddings": [1, 0, 0, 1],
                                               "dilations": [1, 1]}, outputs=("Y",)),
    Case("unfold", {"X": rand(1, 2, 6, 6, dtype="float64")}, {"kernel_sizes": [2, 2], "strides": [2, 2],
                                                                "paddings": [0, 0, 0, 0], "dilations": [2, 1]},
         outputs=("Y",), name="dilated_f64"),
    Case("depthwise_conv2d_transpose", {"Input": rand(2, 3, 4, 5), "Filter": rand(3, 1, 3, 3)},
         {"groups": 3, "strides": [2, 2], "paddings": [1, 1]}, outputs=("Output",), batch_dims=("Input",),
         rtol=1e-4, atol=1e-5, grad_rtol=1e-3, grad_atol=1e-4),
    Case("conv3d_transpose", {"Input": rand(2, 3, 3, 4, 3), "Filter": rand(3, 2, 3, 3, 2)},
         {"strides": [2, 1, 2], "paddings": [1, 0, 1]}, outputs=("Output",), batch_dims=("Input",),
         rtol=1e-4, atol=1e-5, grad_rtol=1e-3, grad_atol=1e-4),
    Case("conv3d_transpose", {"Input": rand(1, 4, 2, 3, 3, dtype="float64"), "Filter": rand(4, 1, 2, 2, 3,
                                                                                            dtype="float64")},
         {"strides": [2, 2, 1], "groups": 2, "output_size": [5, 7, 5]}, outputs=("Output",), batch_dims=("Input",),
         name="groups_output_size_f64"),
]
CASES += [
    Case("fold", {"X": rand(2, 3 * 4, 8)}, {"output_sizes": [4, 5], "kernel_sizes": [2, 2], "strides": [2, 1],
                                            "paddings": [0, 0, 0, 0], "dilations": [1, 1]}, outputs=("Y",)),
    Case("fold", {"X": rand(1, 2 * 4, 15, dtype="float64")}, {"output_sizes": [4, 4], "kernel_sizes": [2, 2],
                                                            "strides": [1, 1], "paddings": [1, 0, 1, 0],
                                                            "dilations": [1, 1]}, outputs=("Y",), name="pad_f64"),
    Case("crop_tensor", {"X": rand(3, 5, 4)}, {"shape": [-1, 2, 3], "offsets": [0, 1, 1]}),
    Case("crop_tensor", {"X": rand(3, 5, 4, dtype="float64"), "Offsets": np.array([1, 2, 0], "int32")},
         {"shape": [2, 3, 4]}, name="tensor_offsets_f64", batch_dims=()),
]


def _declared_length(n):
    """A check for linspace: Num is fed (a run-time value), so the program declares Out's length,
    as a program whose Num is fixed does; outputs are compared with Paddle's."""

    def check(case):
        import paddle_oracle as po
        import test_op_table as harness

        built = harness.Built(case)
        fetch = built.compared_outputs()
        built.main.global_block().var(fetch[0]).shape = (n,)
        ours = harness._run_fluidjax(built, fetch)
        theirs = po.run(built.main.serialize(), built.feed, fetch)
        harness._assert_close(ours[0], theirs[0], 1e-6, 1e-6, f"{case.id}: Out")

    return check


CASES += [
    Case("linspace", {"Start": np.array([-1.0], "float32"), "Stop": np.array([2.5], "float32"),
                      "Num": np.array([7], "int32")}, {"dtype": 5}, check=_declared_length(7)),
    Case("linspace", {"Start": np.array([0.0], "float64"), "Stop": np.array([1.0], "float64"),
                      "Num": np.array([10], "int32")}, {"dtype": 6}, name="f64", check=_declared_length(10)),
    Case("linspace", {"Start": np.array([0.0], "float32"), "Stop": np.array([9.0], "float32"),
                      "Num": np.array([4], "int32")}, {"dtype": 3}, name="int64", check=_declared_length(4)),
]


# -- Fluid 1.x ops (reshaping, slicing, tensor, norm, loss, resize) ----------------------------------
def _lrn_ref(inputs, attrs):
    x, n = inputs["X"], attrs["n"]
    sq = np.pad(x * x, [(0, 0), ((n - 1) // 2, n - 1 - (n - 1) // 2), (0, 0), (0, 0)])
    mid = attrs["k"] + attrs["alpha"] * sum(sq[:, i:i + x.shape[1]] for i in range(n))
    return {"Out": x * mid ** -attrs["beta"], "MidOut": mid}


def _pad2d_ref(inputs, attrs):
    top, bottom, left, right = attrs["paddings"]
    hw = [(top, bottom), (left, right)]
    widths = [(0, 0)] + hw + [(0, 0)] if attrs.get("data_format") == "NHWC" else [(0, 0), (0, 0)] + hw
    mode = attrs.get("mode", "constant")
    if mode == "constant":
        return {"Out": np.pad(inputs["X"], widths, constant_values=attrs.get("pad_value", 0.0))}
    return {"Out": np.pad(inputs["X"], widths, mode=mode)}


CASES += [
    Case("reshape", {"X": rand(2, 3, 4)}, {"shape": [0, -1]}),
    Case("reshape", {"X": rand(2, 6, dtype="float64")}, {"shape": [-1, 3, 2]}, name="f64"),
    Case("transpose", {"X": rand(2, 3, 4)}, {"axis": [2, 0, 1]}),
    Case("transpose", {"X": rand(2, 3, 4, dtype="float64")}, {"axis": [1, 0, 2]}, name="f64"),
    Case("flatten2", {"X": rand(2, 3, 4, 2)}, {"axis": 2}, outputs=("Out",)),
    Case("flatten2", {"X": rand(2, 3, 4, dtype="float64")}, {"axis": 1}, name="f64"),
    # Paddle's expand_grad needs an expand_times_tensor input: the attribute form's gradient is
    # checked by finite differences on a NumPy-checked float64 row.
    Case("expand", {"X": rand(2, 1, 3)}, {"expand_times": [1, 3, 2]}, grad=()),
    Case("expand", {"X": rand(2, 3, dtype="float64")}, {"expand_times": [2, 1]}, name="f64", paddle=False,
         oracle=lambda inputs, attrs: {"Out": np.tile(inputs["X"], attrs["expand_times"])}),
    # Paddle 2.6.2 keeps pad2d's OpProto but no kernel: NumPy is the oracle.
    Case("pad2d", {"X": rand(2, 3, 4, 5)}, {"paddings": [1, 0, 2, 1], "pad_value": 0.5}, paddle=False,
         oracle=_pad2d_ref),
    Case("pad2d", {"X": rand(2, 3, 4, 5, dtype="float64")}, {"paddings": [2, 1, 1, 3], "mode": "reflect"},
         name="reflect_f64", paddle=False, oracle=_pad2d_ref),
    Case("pad2d", {"X": rand(2, 4, 5, 3)}, {"paddings": [1, 2, 0, 1], "mode": "edge", "data_format": "NHWC"},
         name="edge_nhwc", paddle=False, oracle=_pad2d_ref),
    Case("fill_zeros_like", {"X": rand(2, 3)}),
    Case("affine_channel", {"X": rand(2, 3, 4, 2), "Scale": rand(3), "Bias": rand(3)}, {"data_layout": "NCHW"},
         batch_dims=("X",)),
    Case("affine_channel", {"X": rand(2, 4, 2, 3, dtype="float64"), "Scale": rand(3, dtype="float64"),
                            "Bias": rand(3, dtype="float64")}, {"data_layout": "NHWC"}, batch_dims=("X",),
         name="nhwc_f64"),
    Case("lrn", {"X": rand(2, 7, 3, 3)}, {"n": 5, "k": 1.0, "alpha": 0.1, "beta": 0.75}, outputs=("Out", "MidOut")),
    # Paddle's lrn kernel is float32 only: the float64 row (finite differences) uses NumPy.
    Case("lrn", {"X": rand(2, 4, 2, 3, dtype="float64")}, {"n": 3, "k": 2.0, "alpha": 0.2, "beta": 0.5},
         outputs=("Out", "MidOut"), no_grad_outputs=("MidOut",), name="f64", paddle=False, oracle=_lrn_ref),
    Case("norm", {"X": away_from_zero(2, 3, 4)}, {"axis": 1, "epsilon": 1e-10}, outputs=("Out", "Norm")),
    Case("norm", {"X": away_from_zero(3, 4, dtype="float64")}, {"axis": -1, "epsilon": 1e-6}, name="f64"),
    Case("label_smooth", {"X": rand(3, 5, low=0, high=1)}, {"epsilon": 0.1}),
    Case("label_smooth", {"X": rand(3, 4, low=0, high=1, dtype="float64"),
                          "PriorDist": np.array([[0.1, 0.2, 0.3, 0.4]], "float64")}, {"epsilon": 0.2},
         batch_dims=("X",), name="prior_f64"),
    # Paddle's shuffle_channel_grad disagrees with the exact gradient of its own forward (which
    # ours matches) for group 2 of 6 channels: it is not compared; finite differences check ours
    # on the NumPy-checked float64 row.
    Case("shuffle_channel", {"X": rand(2, 6, 2, 3)}, {"group": 2}, grad=()),
    Case("shuffle_channel", {"X": rand(2, 6, 2, 2, dtype="float64")}, {"group": 3}, name="f64", paddle=False,
         oracle=lambda inputs, attrs: {"Out": inputs["X"].reshape(2, 3, 2, 2, 2).swapaxes(1, 2).reshape(2, 6, 2, 2)}),
    Case("nearest_interp", {"X": rand(2, 3, 4, 5)}, {"out_h": 7, "out_w": 3, "interp_method": "nearest"}),
    Case("nearest_interp", {"X": rand(2, 3, 4, 5)}, {"scale": 1.5, "interp_method": "nearest",
                                                     "align_corners": False}, name="scale"),
    Case("bilinear_interp", {"X": rand(2, 3, 4, 5)}, {"out_h": 6, "out_w": 8}, rtol=1e-5, atol=1e-5),
    Case("bilinear_interp", {"X": rand(2, 2, 4, 5, dtype="float64")},
         {"scale": 1.7, "align_corners": False, "align_mode": 0}, name="scale_half_pixel_f64"),
    Case("bilinear_interp", {"X": rand(1, 3, 5, 4)}, {"out_h": 3, "out_w": 6, "align_corners": False,
                                                      "align_mode": 1}, name="align1", rtol=1e-5, atol=1e-5),
]
