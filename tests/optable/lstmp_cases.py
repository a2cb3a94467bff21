"""Op-table rows of Fluid 1.x's ``lstmp`` (LSTM with a recurrent projection; Paddle 2.6 has no kernel):
against a NumPy implementation of Fluid 1.8's documented equations, sequence by sequence, and the float64
rows' gradients against finite differences.

    (c~, i, f, o) pre-activations = x_t + r_{t-1} W + b          (columns c, i, f, o as lstm's)
    i = act_gate(i + w_ic c_{t-1}),  f = act_gate(f + w_fc c_{t-1})   (peepholes: Bias[4D:7D])
    c_t = f c_{t-1} + i act_cand(c~)                             (clipped to cell_clip when > 0)
    o = act_gate(o + w_oc c_t),  h_t = o act_cell(c_t)
    r_t = act_proj(h_t P)                                        (clipped to proj_clip when > 0)
    r_0 = H0 ([num_seqs, P]: Fluid 1.8's h_0 has the projection size), c_0 = C0; zeros without them
"""

from __future__ import annotations

import numpy as np

from optable import Case, own_stream

rand, _ = own_stream(2029)

_ACT = {"sigmoid": lambda v: 1 / (1 + np.exp(-v)), "tanh": np.tanh, "relu": lambda v: np.maximum(v, 0),
        "identity": lambda v: v}


def _lstmp_ref(lengths):
    def oracle(inputs, attrs):
        a = {"use_peepholes": True, "is_reverse": False, "gate_activation": "sigmoid", "cell_activation": "tanh",
             "candidate_activation": "tanh", "proj_activation": "tanh", "cell_clip": 0.0, "proj_clip": 0.0, **attrs}
        x, w, pw, b = (np.asarray(inputs[k], np.float64) for k in ("Input", "Weight", "ProjWeight", "Bias"))
        d, p = pw.shape
        b = b.reshape(-1)
        gate, cand, cell_act, proj_act = (_ACT[a[k]] for k in ("gate_activation", "candidate_activation",
                                                                "cell_activation", "proj_activation"))

        def clip(v, bound):
            return np.clip(v, -bound, bound) if bound > 0 else v

        proj_out, cell_out = np.zeros((x.shape[0], p)), np.zeros((x.shape[0], d))
        start = 0
        for s, n in enumerate(lengths):
            r = np.asarray(inputs["H0"][s], np.float64) if "H0" in inputs else np.zeros(p)
            c = np.asarray(inputs["C0"][s], np.float64) if "C0" in inputs else np.zeros(d)
            steps = range(start + n - 1, start - 1, -1) if a["is_reverse"] else range(start, start + n)
            for row in steps:
                g = x[row] + r @ w + b[:4 * d]
                gc, gi, gf, go = g[:d], g[d:2 * d], g[2 * d:3 * d], g[3 * d:]
                if a["use_peepholes"]:
                    gi, gf = gi + b[4 * d:5 * d] * c, gf + b[5 * d:6 * d] * c
                c = clip(gate(gf) * c + gate(gi) * cand(gc), a["cell_clip"])
                if a["use_peepholes"]:
                    go = go + b[6 * d:7 * d] * c
                h = gate(go) * cell_act(c)
                r = clip(proj_act(h @ pw), a["proj_clip"])
                proj_out[row], cell_out[row] = r, c
            start += n
        dt = inputs["Input"].dtype
        return {"Projection": proj_out.astype(dt), "Cell": cell_out.astype(dt)}

    return oracle


def _inputs(d, p, rows, seqs=None, peep=True, dtype="float64", init=False):
    out = {"Input": rand(rows, 4 * d, dtype=dtype), "Weight": rand(p, 4 * d, dtype=dtype) * 0.5,
           "ProjWeight": rand(d, p, dtype=dtype), "Bias": rand(1, (7 if peep else 4) * d, dtype=dtype) * 0.5}
    if init:
        out["H0"], out["C0"] = rand(seqs, p, dtype=dtype), rand(seqs, d, dtype=dtype)
    return out


_LENS = [3, 1, 4]
CASES = [
    Case("lstmp", _inputs(3, 2, 8), outputs=("Projection", "Cell"), lod={"Input": [_LENS]}, paddle=False,
         oracle=_lstmp_ref(_LENS), no_grad_outputs=("Cell",), batch_dims=(),
         grad=("Input", "Weight", "ProjWeight", "Bias")),
    Case("lstmp", _inputs(3, 2, 8, seqs=3, peep=False, init=True), {"use_peepholes": False, "is_reverse": True,
                                                                   "proj_activation": "identity"},
         outputs=("Projection", "Cell"), lod={"Input": [_LENS]}, paddle=False, oracle=_lstmp_ref(_LENS),
         no_grad_outputs=("Cell",), batch_dims=(), grad=("Input", "Weight", "ProjWeight", "Bias", "H0", "C0"),
         name="reverse-init"),
    Case("lstmp", _inputs(2, 3, 8, dtype="float32"), {"gate_activation": "sigmoid", "cell_activation": "relu",
                                                      "candidate_activation": "relu", "proj_activation": "tanh",
                                                      "cell_clip": 0.3, "proj_clip": 0.2},
         outputs=("Projection", "Cell"), lod={"Input": [_LENS]}, paddle=False, oracle=_lstmp_ref(_LENS),
         no_grad_outputs=("Cell",), batch_dims=(), grad=(), name="clips-f32"),
]
