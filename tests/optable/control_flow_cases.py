"""Rows of the control-flow ops. ``select_input`` / ``select_output`` / ``increment`` / ``is_empty``
are compared with Paddle like any op; the ops that own a sub-block (``conditional_block``,
``while``) need a program around them, so their rows run whole-program checks against Paddle
(``tests/test_control_flow.py`` has more)."""

import numpy as np

from . import Case, rand


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
