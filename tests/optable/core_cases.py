"""Rows for the ops of the seed example (elementwise add, mul, softmax, cross entropy, mean, init)."""

import numpy as np

import fluidjax as fj
from optable import Case, positive, rand, randint


def _soft_label(n, c, dtype="float32"):
    p = positive(n, c, dtype="float64")
    return (p / p.sum(-1, keepdims=True)).astype(dtype)


def _probs(n, c, dtype="float32"):
    return _soft_label(n, c, dtype)


def _check_fill_string(case):
    main, startup = fj.Program(), fj.Program()
    with fj.program_guard(main, startup):
        fj.Variable("greeting", data_type="string", value="aa")
    scope = fj.Scope()
    assert scope.find_var("greeting") is None
    fj.Executor().run(startup, scope=scope)
    assert scope.find_var("greeting").get(str) == "aa"


CASES = [
    Case("mul", {"X": rand(4, 6), "Y": rand(6, 3)}),
    Case("mul", {"X": rand(3, 2, 4), "Y": rand(8, 5)}, attrs={"x_num_col_dims": 1}, name="flatten"),
    Case("mul", {"X": rand(4, 6, dtype="float64"), "Y": rand(6, 3, dtype="float64")}, name="f64"),
    Case("softmax", {"X": rand(4, 7)}),
    Case("softmax", {"X": rand(3, 4, 5, dtype="float64")}, attrs={"axis": 1}, name="axis1-f64"),
    Case("cross_entropy", {"X": _probs(5, 4), "Label": randint(5, 1, high=4)}, outputs=("Y",), name="hard"),
    Case("cross_entropy", {"X": _probs(5, 4), "Label": _soft_label(5, 4)}, attrs={"soft_label": True},
         outputs=("Y",), name="soft"),
    Case("cross_entropy", {"X": _probs(5, 4, "float64"), "Label": _soft_label(5, 4, "float64")},
         attrs={"soft_label": True}, outputs=("Y",), grad=("X",), name="soft-f64"),
    Case("fill_constant", {}, attrs={"shape": [2, 3], "dtype": 5, "value": 1.5}, grad=()),
    Case("fill_constant", {}, attrs={"shape": [4], "dtype": 3, "value": 0.0, "str_value": "123456789012"},
         grad=(), name="int64-str"),
    Case("fill_string", check=_check_fill_string),
]
