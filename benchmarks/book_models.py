"""The Fluid book's text models, scaled down, as fluidjax programs, with random LoD batches.

Used by ``tests/test_book_models.py`` (fluidjax against Paddle running the same training program)
and ``benchmarks/sequence.py`` (speed). Each builder returns a :class:`BookModel`: the feed
variables (in feed order), the loss, and extra fetches; the caller owns the program guard.

- ``understand_sentiment_conv``: embedding -> two ``sequence_conv_pool`` (windows 3 and 4) ->
  fc softmax -> cross entropy (the book's ``convolution_net``).
- ``understand_sentiment_lstm``: embedding -> fc -> ``dynamic_lstm`` stacked with alternating
  direction -> max ``sequence_pool`` of the last fc and lstm -> fc softmax (``stacked_lstm_net``).
- ``label_semantic_roles``: embeddings of 8 LoD features -> stacked ``dynamic_lstm`` ->
  ``linear_chain_crf`` loss; ``crf_decoding`` + ``chunk_eval`` (``db_lstm``).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

import fluidjax as fj
from fluidjax import layer


@dataclasses.dataclass
class BookModel:
    feeds: list            # fluidjax Variables, in the order of a sample's fields
    loss: object           # the scalar loss Variable
    fetches: list          # other Variables worth fetching (accuracy, decoded path, ...)


def understand_sentiment_conv(dict_dim: int = 200, emb_dim: int = 16, hid_dim: int = 16,
                              class_dim: int = 2) -> BookModel:
    words = layer.data("words", shape=[1], dtype="int64", lod_level=1)
    label = layer.data("label", shape=[1], dtype="int64")
    emb = layer.embedding(words, size=[dict_dim, emb_dim])
    conv_3 = fj.nets.sequence_conv_pool(emb, num_filters=hid_dim, filter_size=3, activation="tanh",
                                        pool_type="sqrt")
    conv_4 = fj.nets.sequence_conv_pool(emb, num_filters=hid_dim, filter_size=4, activation="tanh",
                                        pool_type="sqrt")
    prediction = layer.fc([conv_3, conv_4], class_dim, activation="softmax")
    loss = layer.mean(layer.cross_entropy(prediction, label))
    return BookModel([words, label], loss, [layer.accuracy(prediction, label)])


def understand_sentiment_lstm(dict_dim: int = 200, emb_dim: int = 16, hid_dim: int = 32, class_dim: int = 2,
                              stacked_num: int = 3) -> BookModel:
    assert stacked_num % 2 == 1, "the book's stacked LSTM alternates direction and needs an odd depth"
    words = layer.data("words", shape=[1], dtype="int64", lod_level=1)
    label = layer.data("label", shape=[1], dtype="int64")
    emb = layer.embedding(words, size=[dict_dim, emb_dim])
    fc1 = layer.fc(emb, hid_dim)
    lstm1, _ = layer.dynamic_lstm(fc1, size=hid_dim)
    inputs = [fc1, lstm1]
    for i in range(2, stacked_num + 1):
        fc = layer.fc(inputs, hid_dim)
        lstm, _ = layer.dynamic_lstm(fc, size=hid_dim, is_reverse=(i % 2) == 0)
        inputs = [fc, lstm]
    fc_last = layer.sequence_pool(inputs[0], "max")
    lstm_last = layer.sequence_pool(inputs[1], "max")
    prediction = layer.fc([fc_last, lstm_last], class_dim, activation="softmax")
    loss = layer.mean(layer.cross_entropy(prediction, label))
    return BookModel([words, label], loss, [layer.accuracy(prediction, label)])


SRL_FEATURES = ("word", "ctx_n2", "ctx_n1", "ctx_0", "ctx_p1", "ctx_p2", "verb", "mark")


def label_semantic_roles(word_dict_len: int = 120, pred_dict_len: int = 20, label_dict_len: int = 9,
                         mark_dict_len: int = 2, word_dim: int = 8, mark_dim: int = 4, hidden_dim: int = 32,
                         depth: int = 4) -> BookModel:
    feats = {name: layer.data(name, shape=[1], dtype="int64", lod_level=1) for name in SRL_FEATURES}
    target = layer.data("target", shape=[1], dtype="int64", lod_level=1)
    predicate_emb = layer.embedding(feats["verb"], size=[pred_dict_len, word_dim], param_attr=fj.ParamAttr("vemb"))
    mark_emb = layer.embedding(feats["mark"], size=[mark_dict_len, mark_dim])
    word_embs = [layer.embedding(feats[n], size=[word_dict_len, word_dim], param_attr=fj.ParamAttr("emb"))
                 for n in SRL_FEATURES[:6]]
    emb_layers = word_embs + [predicate_emb, mark_emb]
    hidden_0 = layer.sums([layer.fc(emb, hidden_dim, activation="tanh") for emb in emb_layers])
    lstm_0, _ = layer.dynamic_lstm(hidden_0, size=hidden_dim, candidate_activation="relu",
                                   gate_activation="sigmoid", cell_activation="sigmoid")
    input_tmp = [hidden_0, lstm_0]
    for i in range(1, depth):
        mix_hidden = layer.sums([layer.fc(input_tmp[0], hidden_dim, activation="tanh"),
                                 layer.fc(input_tmp[1], hidden_dim, activation="tanh")])
        lstm, _ = layer.dynamic_lstm(mix_hidden, size=hidden_dim, candidate_activation="relu",
                                     gate_activation="sigmoid", cell_activation="sigmoid", is_reverse=(i % 2) == 1)
        input_tmp = [mix_hidden, lstm]
    feature_out = layer.sums([layer.fc(input_tmp[0], label_dict_len, activation="tanh"),
                              layer.fc(input_tmp[1], label_dict_len, activation="tanh")])
    crf_cost = layer.linear_chain_crf(feature_out, target, param_attr=fj.ParamAttr("crfw"))
    loss = layer.mean(crf_cost)
    decoded = layer.crf_decoding(feature_out, param_attr=fj.ParamAttr("crfw"))
    chunks = layer.chunk_eval(decoded, target, chunk_scheme="IOB",
                              num_chunk_types=int(math.ceil((label_dict_len - 1) / 2.0)))
    return BookModel([*feats.values(), target], loss, [decoded, *chunks[:3]])


def random_lengths(rng: np.random.Generator, batch: int, low: int, high: int) -> list[int]:
    return rng.integers(low, high + 1, batch).tolist()


def sentiment_batches(steps: int, batch: int, dict_dim: int = 200, low: int = 2, high: int = 12,
                      seed: int = 0, class_dim: int = 2):
    """``steps`` batches of ``(words ids [T, 1] int64, lengths, labels [batch, 1] int64)``.

    Learnable: a sentence's label is which part of the vocabulary most of its words come from.
    """
    rng = np.random.default_rng(seed)
    for _ in range(steps):
        lengths = random_lengths(rng, batch, low, high)
        labels = rng.integers(0, class_dim, batch)
        part = dict_dim // class_dim
        ids = np.concatenate([np.where(rng.random(n) < 0.8, labels[i] * part + rng.integers(0, part, n),
                                       rng.integers(0, dict_dim, n)) for i, n in enumerate(lengths)])
        yield ids.reshape(-1, 1).astype(np.int64), lengths, labels.reshape(-1, 1).astype(np.int64)


def srl_batches(steps: int, batch: int, word_dict_len: int = 120, pred_dict_len: int = 20, label_dict_len: int = 9,
                low: int = 2, high: int = 12, seed: int = 0):
    """``steps`` batches of ``(features dict name -> ids [T, 1], lengths)``; every feature and the
    target share the batch's lengths, as the book's data does. Learnable: a word's tag is its id
    modulo the number of tags."""
    rng = np.random.default_rng(seed)
    for _ in range(steps):
        lengths = random_lengths(rng, batch, low, high)
        rows = sum(lengths)
        feats = {n: rng.integers(0, word_dict_len, (rows, 1)) for n in SRL_FEATURES[:6]}
        feats["verb"] = rng.integers(0, pred_dict_len, (rows, 1))
        feats["mark"] = rng.integers(0, 2, (rows, 1))
        feats["target"] = feats["word"] % label_dict_len
        yield {n: v.astype(np.int64) for n, v in feats.items()}, lengths
