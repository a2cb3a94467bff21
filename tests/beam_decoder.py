"""Fluid's book ``decode`` loop, shared by the beam-search tests: arrays of states, ids and scores
read at ``counter``; each ``While`` step expands the previous state to the live prefixes, lets
``step`` make the new state and the next-word probabilities, keeps the accumulated log-scores'
best ``beam`` per source with ``beam_search``, and the loop ends at ``max_len`` steps or when
``beam_search`` selected nothing (every beam ended)."""

from __future__ import annotations

from fluidjax import layer


def while_beam_decoder(context, init_ids, init_scores, step, max_len: int, beam: int, end_id: int):
    """Build the loop in the current program; ``step(pre_ids, expanded_state, pre_score)`` returns
    (new state, word probabilities with ``pre_score``'s LoD). Returns the decoded (ids, scores) of
    ``beam_search_decode`` and the step counter."""
    array_len = layer.fill_constant([1], "int64", max_len)
    counter = layer.zeros([1], "int64")
    state_array = layer.create_array("float32")
    layer.array_write(context, counter, state_array)
    ids_array, scores_array = layer.create_array("int64"), layer.create_array("float32")
    layer.array_write(init_ids, counter, ids_array)
    layer.array_write(init_scores, counter, scores_array)
    cond = layer.less_than(counter, array_len)
    loop = layer.While(cond)
    with loop.block():
        pre_ids = layer.array_read(ids_array, counter)
        pre_state = layer.array_read(state_array, counter)
        pre_score = layer.array_read(scores_array, counter)
        state, score = step(pre_ids, layer.sequence_expand(pre_state, pre_score), pre_score)
        top_scores, top_ids = layer.topk(score, beam)
        accu = layer.elementwise_add(layer.log(top_scores), layer.reshape(pre_score, [-1]), axis=0)
        selected_ids, selected_scores = layer.beam_search(pre_ids, pre_score, top_ids, accu, beam, end_id)
        layer.increment(counter, 1, in_place=True)
        layer.array_write(state, counter, state_array)
        layer.array_write(selected_ids, counter, ids_array)
        layer.array_write(selected_scores, counter, scores_array)
        length_cond = layer.less_than(counter, array_len)
        layer.logical_and(length_cond, layer.logical_not(layer.is_empty(selected_ids)), out=cond)
    ids, scores = layer.beam_search_decode(ids_array, scores_array, beam, end_id)
    return ids, scores, counter
