"""Rows of the sequence (LoD) ops: each feeds LoD inputs, with an empty sequence where Paddle allows."""

from . import Case, rand

_LENS = [[3, 0, 2, 4]]                 # an empty sequence among them
_TWO_LEVELS = [[2, 0, 2], [3, 1, 0, 2]]

CASES = [
    # Paddle's kernel needs the MaxIndex output for MAX (it is where the gradient goes).
    *[Case("sequence_pool", {"X": rand(9, 3)}, {"pooltype": p, "pad_value": 0.25}, lod={"X": _LENS},
           outputs=("Out", "MaxIndex") if p == "MAX" else ("Out",), no_grad_outputs=("MaxIndex",),
           name=p.lower()) for p in ("SUM", "AVERAGE", "SQRT", "MAX", "LAST", "FIRST")],
    Case("sequence_pool", {"X": rand(9, 3, dtype="float64")}, {"pooltype": "AVERAGE"}, lod={"X": _LENS},
         outputs=("Out",), name="average-float64", paddle=True),
    Case("sequence_pool", {"X": rand(6, 2, 2)}, {"pooltype": "SUM"}, lod={"X": _TWO_LEVELS},
         outputs=("Out",), name="sum-two-levels"),
    Case("sequence_pool", {"X": rand(6, 2)}, {"pooltype": "LAST"}, lod={"X": _TWO_LEVELS},
         outputs=("Out",), name="last-two-levels"),
    Case("sequence_softmax", {"X": rand(9, 1)}, lod={"X": _LENS}),
    Case("sequence_softmax", {"X": rand(9, dtype="float64")}, lod={"X": _LENS}, name="1d-float64"),
    Case("sequence_softmax", {"X": rand(6, 1)}, lod={"X": _TWO_LEVELS}, name="two-levels"),
    Case("sequence_reverse", {"X": rand(9, 3)}, lod={"X": _LENS}, outputs=("Y",)),
    Case("sequence_reverse", {"X": rand(9, 2, dtype="float64")}, lod={"X": _LENS}, outputs=("Y",),
         name="float64"),
    Case("sequence_expand_as", {"X": rand(4, 3), "Y": rand(9, 1)}, lod={"Y": _LENS}, grad=("X",)),
    Case("sequence_expand_as", {"X": rand(4, 2, dtype="float64"), "Y": rand(9, 1, dtype="float64")},
         lod={"Y": _LENS}, grad=("X",), name="float64"),
    Case("sequence_concat", {"X": [rand(9, 3), rand(5, 3)]}, lod={"X": [_LENS, [[1, 2, 0, 2]]]}),
    Case("sequence_concat", {"X": [rand(9, 2, dtype="float64"), rand(5, 2, dtype="float64"), rand(3, 2, dtype="float64")]},
         lod={"X": [_LENS, [[1, 2, 0, 2]], [[0, 1, 1, 1]]]}, name="three-float64"),
]
