"""Rows of the CRF and sequence-evaluation ops, each over LoD inputs with an empty sequence and
over padded inputs with lengths (Paddle 2.x's second form), checked against Paddle's kernels."""

import numpy as np

from . import Case, rand, randint

_TAGS = 4
_LENS = [[3, 0, 2, 3]]                  # 8 rows: the row bucket itself, so Alpha/EmissionExps
                                        # (plain [rows, tags] outputs) have no padding rows to cut
_LENS_ODD = [[4, 1, 0, 5, 2]]           # 12 rows, padded to 16 inside the step


def _crf_inputs(rows, tags=_TAGS, dtype="float32"):
    return {"Emission": rand(rows, tags, dtype=dtype, low=-2, high=2),
            "Transition": rand(tags + 2, tags, dtype=dtype),
            "Label": randint(rows, 1, high=tags)}


def _padded_crf_inputs(batch, width, lengths, tags=_TAGS, dtype="float32", label_shape=None):
    return {"Emission": rand(batch, width, tags, dtype=dtype, low=-2, high=2),
            "Transition": rand(tags + 2, tags, dtype=dtype),
            "Label": randint(*(label_shape or (batch, width)), high=tags),
            "Length": np.asarray(lengths, "int64")}


_CRF_OUTS = ("Alpha", "EmissionExps", "TransitionExps", "LogLikelihood")
_CRF_INTERMEDIATES = ("Alpha", "EmissionExps", "TransitionExps")
_LOD_BATCH = ("Emission", "Label")
_PADDED_BATCH = ("Emission", "Label", "Length")


def _chunk_labels(rows, types, tag_types, rng_noise=0.4):
    """Label ids (``other`` included) and an inference that agrees with them on most rows."""
    label = randint(rows, 1, high=types * tag_types + 1)
    noise = randint(rows, 1, high=types * tag_types + 1)
    keep = np.random.default_rng(rows + types).uniform(size=(rows, 1)) > rng_noise
    return np.where(keep, label, noise).astype("int64"), label


_CHUNK_OUTS = ("Precision", "Recall", "F1-Score", "NumInferChunks", "NumLabelChunks", "NumCorrectChunks")
_CHUNK_LENS = [[7, 0, 9, 1, 12, 3]]


def _chunk_case(scheme, tag_types, name=None, excluded=(), types=3):
    rows = sum(_CHUNK_LENS[0])
    inference, label = _chunk_labels(rows, types, tag_types)
    return Case("chunk_eval", {"Inference": inference, "Label": label},
                {"num_chunk_types": types, "chunk_scheme": scheme, "excluded_chunk_types": list(excluded)},
                outputs=_CHUNK_OUTS, lod={"Inference": _CHUNK_LENS, "Label": _CHUNK_LENS},
                name=name or scheme.lower())


def _padded_chunk_case():
    batch, width, types, tag_types = 4, 10, 2, 4
    inference, label = _chunk_labels(batch * width, types, tag_types)
    return Case("chunk_eval", {"Inference": inference.reshape(batch, width), "Label": label.reshape(batch, width),
                               "SeqLength": np.asarray([10, 0, 6, 3], "int64")},
                {"num_chunk_types": types, "chunk_scheme": "IOBES"}, outputs=_CHUNK_OUTS,
                batch_dims=("Inference", "Label", "SeqLength"), name="iobes-padded")


_HYP_LENS = [[3, 0, 4, 2, 5]]
_REF_LENS = [[2, 3, 4, 0, 6]]
_REF_LENS_NONEMPTY = [[2, 3, 4, 1, 6]]


def _tokens(lengths, high=4):
    return randint(sum(lengths[0]), 1, high=high)


CASES = [
    # linear_chain_crf: LogLikelihood is the negative log-likelihood; the other outputs are
    # intermediates Paddle does not differentiate through.
    Case("linear_chain_crf", _crf_inputs(8), outputs=_CRF_OUTS, no_grad_outputs=_CRF_INTERMEDIATES,
         lod={"Emission": _LENS, "Label": _LENS}, batch_dims=_LOD_BATCH, grad=("Emission", "Transition")),
    Case("linear_chain_crf", _crf_inputs(12, dtype="float64"), outputs=("TransitionExps", "LogLikelihood"),
         no_grad_outputs=("TransitionExps",), lod={"Emission": _LENS_ODD, "Label": _LENS_ODD},
         batch_dims=_LOD_BATCH, grad=("Emission", "Transition"), name="float64-padded-bucket"),
    Case("linear_chain_crf", _crf_inputs(12, tags=9), outputs=("LogLikelihood",),
         lod={"Emission": _LENS_ODD, "Label": _LENS_ODD}, batch_dims=_LOD_BATCH, rtol=1e-5, atol=1e-5,
         name="nine-tags"),
    Case("linear_chain_crf", _padded_crf_inputs(3, 4, [3, 0, 4]), outputs=_CRF_OUTS,
         no_grad_outputs=_CRF_INTERMEDIATES, batch_dims=_PADDED_BATCH, grad=("Emission", "Transition"),
         name="length"),
    Case("linear_chain_crf", _padded_crf_inputs(4, 5, [5, 2, 0, 1], dtype="float64", label_shape=(4, 5, 1)),
         outputs=("LogLikelihood",), batch_dims=_PADDED_BATCH, grad=("Emission", "Transition"),
         name="length-float64"),
    # crf_decoding: the best path, or with Label 1 where it equals the label.
    Case("crf_decoding", {k: v for k, v in _crf_inputs(12).items() if k != "Label"}, outputs=("ViterbiPath",),
         lod={"Emission": _LENS_ODD}, batch_dims=("Emission",)),
    Case("crf_decoding", _crf_inputs(12), outputs=("ViterbiPath",), lod={"Emission": _LENS_ODD, "Label": _LENS_ODD},
         batch_dims=_LOD_BATCH, name="label"),
    Case("crf_decoding", {k: v for k, v in _crf_inputs(12, tags=10, dtype="float64").items() if k != "Label"},
         outputs=("ViterbiPath",), lod={"Emission": _LENS_ODD}, batch_dims=("Emission",), name="ten-tags-float64"),
    Case("crf_decoding", {k: v for k, v in _crf_inputs(12, tags=9).items() if k != "Label"},
         outputs=("ViterbiPath",), lod={"Emission": _LENS_ODD}, batch_dims=("Emission",), name="nine-tags"),
    Case("crf_decoding", {k: v for k, v in _padded_crf_inputs(4, 5, [5, 0, 3, 1]).items() if k != "Label"},
         outputs=("ViterbiPath",), batch_dims=("Emission", "Length"), name="length"),
    Case("crf_decoding", _padded_crf_inputs(4, 5, [5, 0, 3, 1], label_shape=(4, 5, 1)), outputs=("ViterbiPath",),
         batch_dims=_PADDED_BATCH, name="length-label"),
    # chunk_eval over every scheme.
    _chunk_case("IOB", 2),
    _chunk_case("IOE", 2),
    _chunk_case("IOBES", 4),
    _chunk_case("plain", 1),
    _chunk_case("IOB", 2, name="iob-excluded", excluded=(0, 2)),
    _padded_chunk_case(),
    # edit_distance: empty hypotheses and references (not normalized), normalized over non-empty ones.
    Case("edit_distance", {"Hyps": _tokens(_HYP_LENS), "Refs": _tokens(_REF_LENS)}, {"normalized": False},
         outputs=("SequenceNum", "Out"), lod={"Hyps": _HYP_LENS, "Refs": _REF_LENS}),
    Case("edit_distance", {"Hyps": _tokens(_HYP_LENS), "Refs": _tokens(_REF_LENS_NONEMPTY)}, {"normalized": True},
         outputs=("SequenceNum", "Out"), lod={"Hyps": _HYP_LENS, "Refs": _REF_LENS_NONEMPTY}, name="normalized"),
    Case("edit_distance", {"Hyps": randint(4, 6, high=3), "Refs": randint(4, 7, high=3),
                           "HypsLength": np.asarray([6, 0, 2, 5], "int64"),
                           "RefsLength": np.asarray([3, 4, 7, 5], "int64")},
         {"normalized": True}, outputs=("SequenceNum", "Out"),
         batch_dims=("Hyps", "Refs", "HypsLength", "RefsLength"), name="lengths"),
]
