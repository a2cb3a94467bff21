"""Rows of the fused ``rnn`` op (what ``paddle.nn.LSTM`` / ``GRU`` / ``SimpleRNN`` save in static
programs) and of ``recurrent`` (StaticRNN's op: it owns a step block, so whole programs from
``tests/test_static_rnn.py`` check it).

The ``rnn`` rows cover each mode, several layers, both directions, ``SequenceLength`` (rows
shorter than the batch), initial states, and float64 rows against finite differences; Paddle's
CPU kernel is the oracle, or a NumPy transcription of it. They run in training mode with
``dropout_prob`` 0 (deterministic): Paddle's ``rnn_grad`` needs the Reserve its training-mode
forward keeps. ``tests/test_rnn.py`` checks whole models and dropout.
"""

import numpy as np

from . import Case, rand

_T, _B, _I, _H = 5, 3, 4, 3
GATES = {"LSTM": 4, "GRU": 3, "RNN_TANH": 1, "RNN_RELU": 1}


def _rnn(mode="LSTM", layers=1, bidirec=False, lengths=None, dtype="float32", **attrs):
    gates = GATES[mode]
    dirs = 2 if bidirec else 1
    parts = 2 if mode == "LSTM" else 1
    weights, biases = [], []
    for layer in range(layers):
        width = _I if layer == 0 else dirs * _H
        for _ in range(dirs):
            weights += [rand(gates * _H, width, dtype=dtype), rand(gates * _H, _H, dtype=dtype)]
            biases += [rand(gates * _H, dtype=dtype), rand(gates * _H, dtype=dtype)]
    inputs = {"Input": rand(_T, _B, _I, dtype=dtype),
              "PreState": [rand(layers * dirs, _B, _H, dtype=dtype) for _ in range(parts)],
              "WeightList": weights + biases}
    # An absent SequenceLength is an empty slot, as Paddle writes it (its grad maker looks it up).
    inputs["SequenceLength"] = np.array(lengths, "int32") if lengths is not None else []
    attrs = {"mode": mode, "num_layers": layers, "is_bidirec": bidirec, "input_size": _I,
             "hidden_size": _H, "is_test": False, "dropout_prob": 0.0, **attrs}
    return dict(inputs=inputs, attrs=attrs, outputs=("Out", "State"), output_counts={"State": parts},
                batch_dims=("Input",), rtol=1e-5, atol=1e-5, grad_rtol=1e-4, grad_atol=1e-5)


def _sigmoid(v):
    return 1.0 / (1.0 + np.exp(-v))


def _reference(inputs, attrs):
    """Paddle's rnn kernel written out step by step in NumPy, one row and direction at a time."""
    mode, layers, dirs = attrs["mode"], attrs["num_layers"], 2 if attrs["is_bidirec"] else 1
    x = inputs["Input"].astype("float64")
    ws = inputs["WeightList"]
    n = layers * dirs
    weights, biases = ws[:2 * n], ws[2 * n:]
    steps, batch = x.shape[:2]
    lengths = inputs["SequenceLength"] if len(inputs["SequenceLength"]) else np.full(batch, steps)
    finals = [np.zeros_like(s, dtype="float64") for s in inputs["PreState"]]
    for layer in range(layers):
        out = np.zeros((steps, batch, dirs * _H))
        for d in range(dirs):
            k = layer * dirs + d
            w_ih, w_hh, b_ih, b_hh = weights[2 * k], weights[2 * k + 1], biases[2 * k], biases[2 * k + 1]
            for b in range(batch):
                h = inputs["PreState"][0][k, b].astype("float64")
                c = inputs["PreState"][1][k, b].astype("float64") if mode == "LSTM" else None
                order = range(lengths[b]) if d == 0 else reversed(range(lengths[b]))
                for t in order:
                    xp, hp = w_ih @ x[t, b] + b_ih, w_hh @ h + b_hh
                    if mode == "LSTM":
                        i, f, g, o = np.split(xp + hp, 4)
                        c = _sigmoid(f) * c + _sigmoid(i) * np.tanh(g)
                        h = _sigmoid(o) * np.tanh(c)
                    elif mode == "GRU":
                        (xr, xz, xc), (hr, hz, hc) = np.split(xp, 3), np.split(hp, 3)
                        r, z = _sigmoid(xr + hr), _sigmoid(xz + hz)
                        h = z * h + (1 - z) * np.tanh(xc + r * hc)
                    else:
                        h = np.tanh(xp + hp) if mode == "RNN_TANH" else np.maximum(xp + hp, 0)
                    out[t, b, d * _H:(d + 1) * _H] = h
                finals[0][k, b] = h
                if mode == "LSTM":
                    finals[1][k, b] = c
        x = out
    return {"Out": x, "State": finals}


def _check_recurrent(case):
    import test_static_rnn as t

    t.test_paddle_static_rnn_without_memory_same_gradients_as_paddle()
    t.test_paddle_static_rnn_with_memory_runs_here(reverse=True)
    t.test_fluidjax_static_rnn_runs_in_paddle(spelling="class")


def _numpy(row):
    """A row checked against the NumPy transcription (and float64 finite differences)."""
    return {**row, "paddle": False, "oracle": _reference}


CASES = [
    Case("rnn", **_rnn("LSTM"), name="lstm"),
    Case("rnn", **_rnn("LSTM", layers=2, bidirec=True), name="lstm-2-layers-bidirec"),
    Case("rnn", **_rnn("LSTM", layers=2, lengths=[5, 2, 4], dtype="float64"), name="lstm-2-lengths-float64"),
    Case("rnn", **_rnn("GRU"), name="gru"),
    Case("rnn", **_rnn("GRU", layers=2, dtype="float64", lengths=[4, 5, 1]), name="gru-2-lengths-float64"),
    Case("rnn", **_rnn("GRU", layers=2, bidirec=True, dtype="float64"), name="gru-2-bidirec-float64"),
    Case("rnn", **_rnn("RNN_TANH", layers=2, bidirec=True), name="tanh-2-bidirec"),
    Case("rnn", **_rnn("RNN_RELU", layers=2, lengths=[5, 3, 4]), name="relu-2-lengths"),
    Case("rnn", **_rnn("RNN_RELU", dtype="float64", bidirec=True), name="relu-bidirec-float64"),
    # Both directions with SequenceLength: outputs and states are Paddle's, but Paddle 2.6.2's CPU
    # rnn_grad disagrees with finite differences of its own forward for the backward direction
    # (its W_hh and Input gradients), so these rows' gradients are checked against finite
    # differences, the forward against Paddle and the NumPy transcription.
    *[Case("rnn", **{**_rnn(mode, layers=2, bidirec=True, lengths=[5, 2, 4]), "grad": ()},
           name=f"{mode.lower()}-2-bidirec-lengths") for mode in GATES],
    *[Case("rnn", **_numpy(_rnn(mode, layers=2, bidirec=True, lengths=[5, 1, 3], dtype="float64")),
           name=f"{mode.lower()}-2-bidirec-lengths-float64-numpy") for mode in GATES],
    Case("rnn", **_numpy(_rnn("LSTM", layers=2, bidirec=True, dtype="float64")), name="lstm-2-bidirec-float64-numpy"),
    # Inference mode: Paddle's kernel then keeps no Reserve, so its rnn_grad cannot run (forward only).
    Case("rnn", **{**_rnn("LSTM", layers=2, bidirec=True, lengths=[5, 2, 4], is_test=True), "grad": ()},
         name="lstm-2-bidirec-lengths-is-test"),
    Case("recurrent", check=_check_recurrent),
]
