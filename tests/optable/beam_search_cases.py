"""Rows of ``beam_search`` against Paddle 2.6.2's kernel: two source sentences of two prefix rows
each (scores' LoD), a finished prefix (pre_ids == end_id), accumulated and log-probability
scores, with and without ``ids``; a source whose beams all end is pruned. ``parent_idx`` (plain
rows whose count is data) is compared in ``tests/test_beam_search.py``."""

import numpy as np

from . import Case, rand, randint

_LOD = [[2, 2], [1, 1, 1, 1]]
_PRE_IDS = np.array([[3], [0], [5], [2]], "int64")          # row 1 is finished (end_id 0)
_PRE_SCORES = np.array([[-0.5], [-0.2], [-1.0], [-0.7]], "float32")
_IDS = np.array([[4, 2, 7, 1], [6, 3, 0, 9], [0, 5, 8, 2], [1, 4, 6, 3]], "int64")


def _scores(dtype="float32", low=-3.0, high=-0.1):
    return rand(4, 4, dtype=dtype, low=low, high=high)


def _row(name, scores, attrs, ids=True, pre_ids=_PRE_IDS, lod=_LOD):
    inputs = {"pre_ids": pre_ids, "pre_scores": _PRE_SCORES.astype(scores.dtype), "scores": scores}
    if ids:
        inputs["ids"] = _IDS
    return Case("beam_search", inputs, attrs={"level": 0, "end_id": 0, **attrs},
                outputs=("selected_ids", "selected_scores"), grad=(), name=name, lod={"scores": lod})


CASES = [
    _row("accumulated-beam2", _scores(), {"beam_size": 2, "is_accumulated": True}),
    _row("accumulated-beam3", _scores(), {"beam_size": 3, "is_accumulated": True}),
    _row("log-probs", rand(4, 4, low=0.05, high=1.0), {"beam_size": 2, "is_accumulated": False}),
    _row("no-ids", _scores(), {"beam_size": 3, "is_accumulated": True}, ids=False),
    # Exact ties (equal score, one row) are left out: Paddle's insertion gives the last kept slot to
    # the later candidate, an artifact fluidjax does not copy (it keeps candidate order).
    # Source 1's two prefixes are finished and its best candidates are theirs: pruned.
    _row("pruned", np.array([[-9, -9.5, -9.2, -9.7], [-9.1, -9.3, -9.6, -9.4], [-5, -6, -7, -8], [-5.5, -6, -7, -8]], "float32"),
         {"beam_size": 2, "is_accumulated": True},
         pre_ids=np.array([[3], [4], [0], [0]], "int64")),
]


def _check_decode(case):
    # Its inputs are arrays of LoD tensors, which a one-op row cannot feed: a whole program
    # writes four steps' results into arrays and decodes them, here and in Paddle.
    import test_beam_search as t

    t.test_beam_search_decode_matches_paddle()


CASES.append(Case("beam_search_decode", check=_check_decode))


def _gather_tree_row(name, steps, batch, beam, dtype):
    ids = randint(steps, batch, beam, high=20, dtype=dtype)
    parents = randint(steps, batch, beam, high=beam, dtype=dtype)
    return Case("gather_tree", {"Ids": ids, "Parents": parents}, grad=(), batch_dims=(), name=name)


CASES += [
    _gather_tree_row("int64", 5, 3, 4, "int64"),
    _gather_tree_row("int32", 4, 2, 3, "int32"),
    _gather_tree_row("one-step", 1, 2, 3, "int64"),
]
