"""Op-table rows of the ops added so that Fluid 1.8's layers run (``eye`` and the ops behind the
losses and tensor layers Fluid 1.8 had): each checked against Paddle 2.6.2's CPU kernel, its
gradients too, and the float64 rows against finite differences."""

import numpy as np

from . import Case, away_from_zero, positive, rand, randint

CASES = [
    Case("eye", {}, {"num_rows": 3, "num_columns": 4, "dtype": 5}, grad=(), name="3x4"),
    Case("eye", {}, {"num_rows": 3, "dtype": 3}, grad=(), name="square-int64"),
]
