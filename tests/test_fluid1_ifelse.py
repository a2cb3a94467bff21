"""Fluid 1.x's ``layers.IfElse`` (issue 20): rows split by a condition, a branch per side, merged back;
checked against Paddle 2.6.2 running the same serialized program with the same parameters, and its
gradients against NumPy."""

from __future__ import annotations

import jax  # noqa: F401  (before paddle)
import numpy as np
import pytest

import fluidjax as fluid
import paddle_oracle as po
from test_fluid1_layers_ported import _build as _build_and_start

L = fluid.layers
RNG = np.random.default_rng(11)


def _build():
    x = fluid.data("x", [-1, 3], "float32")
    x.stop_gradient = False
    label = fluid.data("label", [-1, 1], "float32")
    cond = L.less_than(L.reduce_sum(x, dim=1, keep_dim=True), L.fill_constant([1], "float32", 0.0))
    ie = L.IfElse(cond)
    with ie.true_block():
        ie.output(L.fc(ie.input(x), 2, act="relu", param_attr="w_true", bias_attr="b_true"),
                  L.scale(ie.input(label), 2.0))
    with ie.false_block():
        ie.output(L.fc(ie.input(x), 2, act="tanh", param_attr="w_false", bias_attr="b_false"), ie.input(label))
    out, lab = ie()
    return out, lab, L.mean(out)


def _program():
    main, exe, scope, fetch = _build_and_start(_build)
    params = {n: np.asarray(scope.find_var(n).get_tensor()).copy() for n in ("w_true", "b_true", "w_false", "b_false")}
    return main, exe, scope, fetch, params


@pytest.mark.parametrize("rows", ["mixed", "all_true", "all_false"])
def test_ifelse_matches_paddle(rows):
    xv = RNG.uniform(-1, 1, (6, 3)).astype("float32")
    if rows != "mixed":
        xv = np.abs(xv) * (-1 if rows == "all_true" else 1) + (-0.1 if rows == "all_true" else 0.1)
    lv = np.arange(6, dtype="float32").reshape(6, 1)
    main, exe, scope, (out, lab, loss), params = _program()
    ours = exe.run(main, feed={"x": xv, "label": lv}, fetch_list=[out, lab, loss], scope=scope)
    if rows == "mixed":
        # With one side empty, Paddle's kernels (mul) refuse the zero-row part of this flat program
        # (Fluid ran each side in a conditional_block that skipped an empty side): NumPy only.
        theirs = po.run(main.serialize(), {"x": xv, "label": lv}, [out.name, lab.name, loss.name], params)
        for a, b in zip(ours, theirs):
            np.testing.assert_allclose(np.asarray(a), b, rtol=1e-5, atol=1e-6)
    neg = xv.sum(1) < 0
    expected = np.where(neg[:, None], np.maximum(xv @ params["w_true"] + params["b_true"], 0),
                        np.tanh(xv @ params["w_false"] + params["b_false"]))
    np.testing.assert_allclose(ours[0], expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(ours[1][:, 0], np.where(neg, 2 * lv[:, 0], lv[:, 0]))


def test_ifelse_gradients_match_numpy():
    xv = RNG.uniform(-1, 1, (8, 3)).astype("float32")
    main, exe, scope, (out, lab, loss), params = _program()
    with fluid.program_guard(main):
        fluid.backward.append_backward(loss)
    names = ["x@GRAD", "w_true@GRAD", "b_true@GRAD", "w_false@GRAD", "b_false@GRAD"]
    gx, gwt, gbt, gwf, gbf = exe.run(main, feed={"x": xv, "label": np.zeros((8, 1), "float32")},
                                     fetch_list=names, scope=scope)
    neg = xv.sum(1) < 0
    d = 1.0 / (8 * 2)
    zt = xv @ params["w_true"] + params["b_true"]
    zf = xv @ params["w_false"] + params["b_false"]
    dzt = np.where(neg[:, None], d * (zt > 0), 0.0)
    dzf = np.where(~neg[:, None], d * (1 - np.tanh(zf) ** 2), 0.0)
    np.testing.assert_allclose(gwt, xv.T @ dzt, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(gbt, dzt.sum(0), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(gwf, xv.T @ dzf, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(gbf, dzf.sum(0), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(gx, dzt @ params["w_true"].T + dzf @ params["w_false"].T, rtol=1e-5, atol=1e-7)


def test_ifelse_misuse():
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        x = fluid.data("x", [-1, 1], "float32")
        ie = L.IfElse(L.less_than(x, x))
        with pytest.raises(ValueError):
            ie.input(x)
        with pytest.raises(ValueError):
            ie()
        with ie.true_block():
            ie.output(ie.input(x))
        assert len(ie()) == 1                   # one branch only: its outputs, unmerged
        with pytest.raises(TypeError):
            L.IfElse("cond")
