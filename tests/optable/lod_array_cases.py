"""Rows of the LoD-array ops (``lod_rank_table``, ``max_sequence_len``, ``lod_tensor_to_array``,
``array_to_lod_tensor``, ``reorder_lod_tensor_by_rank``, ``shrink_rnn_memory``). A rank table and
an array are not tensors the one-op harness can feed or fetch, so each row runs whole-program
checks against Paddle 2.6.2 (``tests/test_dynamic_rnn.py``): all the ops in one program, and
DynamicRNN's forward and gradient."""

from . import Case


def _check_ops(case):
    import test_dynamic_rnn as t

    t.check_lod_array_ops_match_paddle()


def _check_in_dynamic_rnn(case):
    import test_dynamic_rnn as t

    t.check_lod_array_ops_match_paddle()
    t.check_dynamic_rnn_matches_paddle_and_numpy()


CASES = [
    *[Case(op_type, check=_check_ops) for op_type in
      ("lod_rank_table", "max_sequence_len", "lod_tensor_to_array", "array_to_lod_tensor",
       "reorder_lod_tensor_by_rank")],
    Case("shrink_rnn_memory", check=_check_in_dynamic_rnn),
]
