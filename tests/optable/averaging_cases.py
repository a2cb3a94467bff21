"""Op-table rows: ``average_accumulates`` (ModelAverage's window of parameter sums), one step
from several window states.

Paddle's CPU kernel runs only in place (``out_*`` = ``in_*``; with fresh outputs it fails), which
a one-op table program with fresh outputs cannot be: these rows check against NumPy, written as the
in-place kernel computes; ``tests/test_fluid1_optimizers.py`` runs the op in place against
Paddle 2.6.2 (ModelAverage's training loop in both)."""

import numpy as np

from . import Case, rand

SHAPE = (3, 4)
OUTS = ("out_sum_1", "out_sum_2", "out_sum_3", "out_num_accumulates", "out_old_num_accumulates", "out_num_updates")


def _state(num_accumulates, old_num_accumulates, num_updates):
    return {"param": rand(*SHAPE), "in_sum_1": rand(*SHAPE), "in_sum_2": rand(*SHAPE), "in_sum_3": rand(*SHAPE),
            "in_num_accumulates": np.array([num_accumulates], "int64"),
            "in_old_num_accumulates": np.array([old_num_accumulates], "int64"),
            "in_num_updates": np.array([num_updates], "int64")}


def _in_place(inputs, attrs):
    """Paddle's kernel on shared buffers: each move reads what the previous one wrote."""
    s1 = inputs["in_sum_1"] + inputs["param"]
    s2, s3 = inputs["in_sum_2"].copy(), inputs["in_sum_3"].copy()
    acc, old, upd = (int(inputs[k][0]) for k in ("in_num_accumulates", "in_old_num_accumulates", "in_num_updates"))
    upd, acc = upd + 1, acc + 1
    if upd % 16384 == 0:
        s2, s1 = s2 + s1, np.zeros_like(s1)
    window = int(np.float32(upd) * np.float32(attrs["average_window"]))
    if acc >= attrs["min_average_window"] and acc >= min(attrs["max_average_window"], window):
        s3, s1, s2 = s1 + s2, np.zeros_like(s1), np.zeros_like(s2)
        old, acc = acc, 0
    return {"out_sum_1": s1, "out_sum_2": s2, "out_sum_3": s3, "out_num_accumulates": np.array([acc]),
            "out_old_num_accumulates": np.array([old]), "out_num_updates": np.array([upd])}


NUMPY = {"paddle": False, "oracle": _in_place}
WINDOW = {"average_window": 0.15, "min_average_window": 2, "max_average_window": 4}

CASES = [
    # The window is not full yet: sum_1 collects the parameter.
    Case("average_accumulates", _state(0, 0, 0), WINDOW, outputs=OUTS, grad=(), batch_dims=(), **NUMPY, name="collect"),
    # num_accumulates reaches max_average_window: the sums move to sum_3, the counters restart.
    Case("average_accumulates", _state(3, 2, 40), WINDOW, outputs=OUTS, grad=(), batch_dims=(), **NUMPY, name="window_full"),
    # num_updates * average_window bounds the window (int(10 * 0.15) = 1 < min): min_average_window rules.
    Case("average_accumulates", _state(1, 5, 9), WINDOW, outputs=OUTS, grad=(), batch_dims=(), **NUMPY, name="min_window"),
    # The 16384th update moves sum_1 into sum_2.
    Case("average_accumulates", _state(5, 0, 16383), {**WINDOW, "min_average_window": 100, "max_average_window": 200},
         outputs=OUTS, grad=(), batch_dims=(), **NUMPY, name="spill"),
]
