"""``layers.dynamic_lstmp`` (issue 20): Fluid 1.x's LSTM with a recurrent projection (op ``lstmp``; Paddle
2.6 has no kernel), built the Fluid way and checked against a NumPy implementation of Fluid 1.8's
documented equations (the op-table's oracle), its training gradient against finite differences."""

from __future__ import annotations

import numpy as np
import pytest

import fluidjax as fluid
from optable.lstmp_cases import _lstmp_ref

L = fluid.layers
RNG = np.random.default_rng(8)
LENS = [2, 4, 1]


def _build(**kwargs):
    words = fluid.data("words", [-1, 5], "float32", lod_level=1)
    proj = L.fc(words, 4 * 3, bias_attr=False)
    return proj, L.dynamic_lstmp(proj, size=4 * 3, proj_size=2, **kwargs)


@pytest.mark.parametrize("kwargs", [{}, {"is_reverse": True, "use_peepholes": False, "proj_activation": "identity",
                                         "cell_clip": 0.4, "proj_clip": 0.3}])
def test_dynamic_lstmp_matches_fluids_equations(kwargs):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        proj_in, (projection, cell) = _build(**kwargs)
        loss = L.mean(projection)
        fluid.backward.append_backward(loss)
    assert projection.shape == (-1, 2) and cell.shape == (-1, 3) and projection.lod_level == 1
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    words = RNG.uniform(-1, 1, (7, 5)).astype("float32")
    feed = {"words": fluid.create_lod_tensor(words, [LENS], fluid.CPUPlace())}
    names = [p.name for p in main.global_block().all_parameters()]
    got = exe.run(main, feed=feed, fetch_list=[proj_in, projection, cell], scope=scope, return_numpy=False)
    params = {n: np.asarray(scope.find_var(n).get_tensor()) for n in names}
    lstmp_op = next(op for op in main.global_block().ops if op.type == "lstmp")
    inputs = {"Input": np.asarray(got[0]), **{slot: params[lstmp_op.inputs[slot][0]]
                                              for slot in ("Weight", "ProjWeight", "Bias")}}
    ref = _lstmp_ref(LENS)(inputs, dict(lstmp_op.attrs))
    np.testing.assert_allclose(np.asarray(got[1]), ref["Projection"], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(got[2]), ref["Cell"], rtol=1e-5, atol=1e-6)
    assert got[1].recursive_sequence_lengths() == [LENS]

    # the gradient of the loss for the recurrent weight, against central differences of the oracle
    w_name = lstmp_op.inputs["Weight"][0]
    (grad,) = exe.run(main, feed=feed, fetch_list=[w_name + "@GRAD"], scope=scope)
    base = {k: v.astype(np.float64) for k, v in inputs.items()}
    for idx in [(0, 0), (1, 5), (0, 11)]:
        plus, minus = base[("Weight")].copy(), base["Weight"].copy()
        plus[idx] += 1e-6
        minus[idx] -= 1e-6
        f = [_lstmp_ref(LENS)({**base, "Weight": m}, dict(lstmp_op.attrs))["Projection"].mean() for m in (plus, minus)]
        np.testing.assert_allclose(grad[idx], (f[0] - f[1]) / 2e-6, rtol=1e-3, atol=1e-6)


def test_dynamic_lstmp_arguments():
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        words = fluid.data("w", [-1, 8], "float32", lod_level=1)
        with pytest.raises(ValueError):
            L.dynamic_lstmp(words, 6, 2)
        with pytest.raises(ValueError):
            L.dynamic_lstmp(words, 8, 2, proj_activation="softmax")
        p, c = L.dynamic_lstmp(words, 8, 3, param_attr="lstmp_w")
        names = {v.name for v in fluid.default_main_program().global_block().all_parameters()}
        assert {"lstmp_w", "lstmp_w.proj"} <= names and p.shape == (-1, 3) and c.shape == (-1, 2)
