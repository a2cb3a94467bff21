"""Rows of the recurrent ops: ``lstm`` and ``gru`` over LoD sequences (with an empty sequence, both
directions, initial states, peepholes on and off, other activations) and the cells ``gru_unit``
and ``lstm_unit``.

Paddle's ``lstm_grad``/``gru_grad``/``gru_unit_grad`` take only Hidden's gradient, so the rows
leave Cell and the intermediate outputs out of the loss (``no_grad_outputs``). ``lstm_unit`` is
gone from Paddle 2.x's op library: its rows check against NumPy (Fluid 1.x's kernel, written out).
"""

import numpy as np

from . import Case, rand

_LENS = [[3, 0, 2, 4]]          # an empty sequence among them: 9 rows
_FULL = [[2, 3, 1]]             # no empty sequence: 6 rows
_D = 3                          # hidden size
_STATES = ("Input", "H0", "C0", "HiddenPrev")   # first dims that are -1 at build time


def _lstm(rows, lens, dtype="float32", peepholes=True, states=False, size=_D, **attrs):
    inputs = {"Input": rand(rows, 4 * size, dtype=dtype)}
    # An absent initial state is an empty slot, as Paddle writes it (its grad makers look it up).
    inputs["H0"] = rand(len(lens[0]), size, dtype=dtype) if states else []
    inputs["C0"] = rand(len(lens[0]), size, dtype=dtype) if states else []
    inputs["Weight"] = rand(size, 4 * size, dtype=dtype)
    inputs["Bias"] = rand(1, (7 if peepholes else 4) * size, dtype=dtype)
    return dict(inputs=inputs, attrs={"use_peepholes": peepholes, **attrs}, lod={"Input": lens},
                outputs=("Hidden", "Cell"), no_grad_outputs=("Cell",), batch_dims=_STATES)


def _gru(rows, lens, dtype="float32", bias=True, states=False, **attrs):
    inputs = {"Input": rand(rows, 3 * _D, dtype=dtype)}
    inputs["H0"] = rand(len(lens[0]), _D, dtype=dtype) if states else []
    inputs["Weight"] = rand(_D, 3 * _D, dtype=dtype)
    inputs["Bias"] = rand(1, 3 * _D, dtype=dtype) if bias else []
    return dict(inputs=inputs, attrs=attrs, lod={"Input": lens}, outputs=("Hidden",), batch_dims=_STATES)


def _gru_unit(dtype="float32", bias=True, **attrs):
    inputs = {"Input": rand(5, 3 * _D, dtype=dtype), "HiddenPrev": rand(5, _D, dtype=dtype),
              "Weight": rand(_D, 3 * _D, dtype=dtype), "Bias": rand(1, 3 * _D, dtype=dtype) if bias else []}
    return dict(inputs=inputs, attrs=attrs, outputs=("Gate", "ResetHiddenPrev", "Hidden"),
                no_grad_outputs=("Gate", "ResetHiddenPrev"), batch_dims=_STATES)


def _sigmoid(v):
    return 1.0 / (1.0 + np.exp(-v))


def _lstm_reference(inputs, attrs, lens=_LENS[0]):
    """Paddle's lstm written out for one sequence at a time: gate columns (c, i, f, o), peepholes
    (w_ic, w_fc, w_oc) after the bias, default activations."""
    x, w, b = inputs["Input"], inputs["Weight"], inputs["Bias"][0]
    size = w.shape[0]
    hidden, cell = np.zeros((x.shape[0], size)), np.zeros((x.shape[0], size))
    offsets = np.concatenate([[0], np.cumsum(lens)])
    for s, (start, end) in enumerate(zip(offsets[:-1], offsets[1:])):
        h, c = inputs["H0"][s], inputs["C0"][s]
        rows = range(start, end)
        for r in reversed(rows) if attrs.get("is_reverse") else rows:
            gc, gi, gf, go = np.split(x[r] + b[:4 * size] + h @ w, 4)
            w_ic, w_fc, w_oc = np.split(b[4 * size:], 3)
            i, f = _sigmoid(gi + c * w_ic), _sigmoid(gf + c * w_fc)
            c = f * c + i * np.tanh(gc)
            h = _sigmoid(go + c * w_oc) * np.tanh(c)
            hidden[r], cell[r] = h, c
    return {"Hidden": hidden, "Cell": cell}


def _lstm_unit_reference(inputs, attrs):
    """Fluid 1.x's lstm_unit kernel: X's columns are (i, f, o, g)."""
    x, c_prev = inputs["X"], inputs["C_prev"]
    i, f, o, g = np.split(x, 4, axis=1)
    c = _sigmoid(f + attrs.get("forget_bias", 0.0)) * c_prev + _sigmoid(i) * np.tanh(g)
    return {"C": c.astype(x.dtype), "H": (_sigmoid(o) * np.tanh(c)).astype(x.dtype)}


CASES = [
    Case("lstm", **_lstm(9, _LENS), name="peepholes-empty-sequence"),
    Case("lstm", **_lstm(9, _LENS, dtype="float64", peepholes=False, is_reverse=True),
         name="reverse-no-peepholes-float64"),
    Case("lstm", **_lstm(6, _FULL, dtype="float64", states=True), name="h0-c0-float64"),
    Case("lstm", **_lstm(6, _FULL, dtype="float64", states=True, is_reverse=True, gate_activation="tanh",
                         cell_activation="identity", candidate_activation="sigmoid"),
         name="reverse-h0-c0-activations-float64"),
    Case("lstm", **_lstm(9, _LENS, gate_activation="sigmoid", cell_activation="relu",
                         candidate_activation="identity"), name="relu-identity"),
    # With H0/C0 and an empty sequence Paddle's lstm_grad reads past the first step's rows (its
    # MatMul takes the row count from the [num_seqs, D] output, not the step's rows): its H0 and
    # Weight gradients are wrong there, and its C0 gradient of the empty sequence is whatever that
    # memory held (zero in one run, not in the next). Paddle checks the rest; NumPy and finite
    # differences all (the next row).
    Case("lstm", **_lstm(9, _LENS, dtype="float64", states=True), grad=("Input", "Bias"),
         name="h0-c0-empty-sequence-float64"),
    Case("lstm", **_lstm(9, _LENS, dtype="float64", states=True, is_reverse=True), paddle=False,
         oracle=_lstm_reference, name="h0-c0-empty-sequence-numpy-float64"),
    # Paddle 2.6.2's float32 lstm_grad on a hidden size that is a multiple of 8 takes its AVX kernel,
    # which forgets to add the hidden's gradient to the cell's (lstm_kernel.h: no `else` when
    # cell_clip <= 0): its gradients are wrong there. Paddle checks that row's forward; its
    # gradients are checked on the float64 row of the same size (Paddle's plain kernel) and by
    # finite differences.
    Case("lstm", **_lstm(12, [[3, 0, 5, 4]], size=8), grad=(), name="hidden-8-float32"),
    Case("lstm", **_lstm(12, [[3, 0, 5, 4]], dtype="float64", size=8), name="hidden-8-float64"),
    Case("gru", **_gru(9, _LENS), name="empty-sequence"),
    Case("gru", **_gru(9, _LENS, dtype="float64", states=True), name="h0-empty-sequence-float64"),
    Case("gru", **_gru(9, _LENS, dtype="float64", is_reverse=True), name="reverse-float64"),
    Case("gru", **_gru(6, _FULL, dtype="float64", states=True, origin_mode=True), name="h0-origin-mode-float64"),
    Case("gru", **_gru(6, _FULL, dtype="float64", bias=False, states=True, is_reverse=True,
                       activation="identity", gate_activation="tanh"), name="reverse-no-bias-activations-float64"),
    Case("gru", **_gru(9, _LENS, activation="relu"), name="relu"),
    Case("gru_unit", **_gru_unit()),
    Case("gru_unit", **_gru_unit(dtype="float64", origin_mode=True), name="origin-mode-float64"),
    Case("gru_unit", **_gru_unit(dtype="float64", bias=False, activation=0, gate_activation=2),
         name="no-bias-identity-tanh-float64"),
    Case("gru_unit", **_gru_unit(activation=3, gate_activation=1), name="relu"),
    Case("lstm_unit", {"X": rand(5, 4 * _D), "C_prev": rand(5, _D)}, {"forget_bias": 0.0}, outputs=("C", "H"),
         paddle=False, oracle=_lstm_unit_reference),
    Case("lstm_unit", {"X": rand(5, 4 * _D, dtype="float64"), "C_prev": rand(5, _D, dtype="float64")},
         {"forget_bias": 1.0}, outputs=("C", "H"), paddle=False, oracle=_lstm_unit_reference,
         name="forget-bias-float64"),
]
