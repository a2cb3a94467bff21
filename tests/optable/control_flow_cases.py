"""Rows of the control-flow ops. ``select_input`` / ``select_output`` / ``increment`` / ``is_empty``
are compared with Paddle like any op; the ops that own a sub-block (``conditional_block``,
``while``) need a program around them, so their rows run whole-program checks against Paddle
(``tests/test_control_flow.py`` has more)."""

import numpy as np

from . import Case, own_stream, rand


def _check_conditional_block(case):
    import test_control_flow as t

    t.check_paddle_cond_program_runs_here(np.float32)


def _check_while(case):
    import test_control_flow as t

    t.check_paddle_while_program_runs_here()


def _check_arrays(case):
    # An array is made and read by several ops: one program exercises them all, both ways.
    import test_control_flow as t

    t.test_arrays_outside_and_inside_a_loop_match_paddle()
    t.test_paddle_array_program_runs_here()


CASES = [
    # Paddle leaves the gradient of the input Mask does not select unwritten (fluidjax: zeros), so
    # gradients are checked on a float64 row against finite differences.
    Case("select_input", {"X": [rand(3, 4), rand(3, 4)], "Mask": np.array([1], "int32")}, grad=()),
    Case("select_input", {"X": [rand(3, 2, dtype="float64"), rand(3, 2, dtype="float64")],
                          "Mask": np.array([0], "int32")}, grad=("X",), paddle=False,
         oracle=lambda ins, attrs: {"Out": ins["X"][int(ins["Mask"][0])]}, name="mask0-f64"),
    # Paddle leaves the outputs Mask does not select unwritten (fetching one fails), fluidjax writes
    # zeros there (the gradient of the branch not taken): the rows compare the selected output;
    # tests/test_control_flow.py checks two outputs.
    Case("select_output", {"X": rand(3, 4), "Mask": np.array([0], "int32")}, grad=("X",)),
    Case("select_output", {"X": rand(2, 3, dtype="float64"), "Mask": np.array([0], "int32")},
         grad=("X",), name="f64"),
    Case("increment", {"X": np.array([3], "int64")}, attrs={"step": 2.0}, batch_dims=()),
    Case("increment", {"X": np.array([1.5], "float32")}, attrs={"step": -0.5}, batch_dims=(), name="float"),
    Case("is_empty", {"X": rand(2, 3)}, batch_dims=()),
    Case("conditional_block", check=_check_conditional_block),
    Case("while", check=_check_while),
    *[Case(op_type, check=_check_arrays) for op_type in
      ("write_to_array", "read_from_array", "lod_array_length", "tensor_array_to_tensor")],
]


# Fluid 1.x's IfElse ops (split_lod_tensor / merge_lod_tensor) against Paddle 2.6.2's kernels.
_own_rand, _ = own_stream(2030)          # these rows leave the shared stream as it was
_IFELSE_MASK = np.array([[True], [False], [False], [True], [True], [False], [True]])


def _check_split(case):
    """Both parts against Paddle's kernel; the parts' row counts depend on the data (their build
    shape is [-1, ...]); the gradient (a merge of the parts' gradients) against NumPy."""
    import fluidjax as fj
    import paddle_oracle as po

    x = case.inputs["X"]
    main = fj.Program()
    block = main.global_block()
    xv = block.create_var("x", x.shape, str(x.dtype))
    xv.stop_gradient = False
    mv = block.create_var("mask", (7, 1), "bool")
    t, f = block.create_var("t", (), str(x.dtype)), block.create_var("f", (), str(x.dtype))
    block.append_op("split_lod_tensor", {"X": xv, "Mask": mv}, {"OutTrue": t, "OutFalse": f}, {"level": 0})
    assert t.shape == (-1,) + x.shape[1:] and f.shape == (-1,) + x.shape[1:]
    feed = {"x": x, "mask": _IFELSE_MASK}
    theirs = po.run(main.serialize(), feed, ["t", "f"])
    w = block.create_var("w", (), str(x.dtype))
    s = block.create_var("s", (), str(x.dtype))
    block.append_op("scale", {"X": t}, {"Out": w}, {"scale": 3.0})
    block.append_op("mean", {"X": w}, {"Out": s})           # mean counts the real rows only
    fj.append_backward(s)
    ours = fj.Executor().run(main, feed=feed, fetch_list=["t", "f", "x@GRAD"], scope=fj.Scope())
    for a, b in zip(ours, theirs):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(ours[0], x[_IFELSE_MASK[:, 0]])
    expected = np.where(_IFELSE_MASK.reshape((7,) + (1,) * (x.ndim - 1)), 3.0 / ours[0].size, 0.0)
    np.testing.assert_allclose(ours[2], np.broadcast_to(expected, x.shape), rtol=1e-6)


CASES += [
    Case("split_lod_tensor", {"X": _own_rand(7, 3), "Mask": _IFELSE_MASK}, check=_check_split),
    Case("split_lod_tensor", {"X": _own_rand(7, 2, 2, dtype="float64"), "Mask": _IFELSE_MASK}, check=_check_split,
         name="f64"),
    Case("merge_lod_tensor", {"X": _own_rand(7, 1), "Mask": _IFELSE_MASK, "InTrue": _own_rand(4, 3),
                              "InFalse": _own_rand(3, 3)},
         grad=("InTrue", "InFalse"), batch_dims=()),
    Case("merge_lod_tensor", {"X": _own_rand(7, 1, dtype="float64"), "Mask": _IFELSE_MASK,
                              "InTrue": _own_rand(4, 2, dtype="float64"),
                              "InFalse": _own_rand(3, 2, dtype="float64")},
         grad=("InTrue", "InFalse"), batch_dims=(), name="f64"),
]
