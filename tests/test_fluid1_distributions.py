"""``fluid.layers.distributions`` (issue 20): Uniform, Normal, Categorical, MultivariateNormalDiag built
the Fluid 1.8 way, run, and checked against NumPy / SciPy formulas (samples by their statistics)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

import fluidjax as fluid
from fluidjax.layers.distributions import Categorical, MultivariateNormalDiag, Normal, Uniform

L = fluid.layers


def _run(build, feed=None):
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 5
    with fluid.program_guard(main, startup):
        fetch = build()
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    return [np.asarray(v) for v in exe.run(main, feed=feed or {}, fetch_list=fetch)]


def test_uniform_and_normal_from_numbers():
    value = np.array([0.8, 3.5, -0.3], "float32")

    def build():
        u, n, m = Uniform([0.0, 1.0, -1.0], [2.0, 3.0, 0.0]), Normal([0.0, 1.0, 2.0], [1.0, 0.5, 2.0]), \
            Normal(0.5, 2.0)
        v = L.assign(value)
        return [u.sample([20000], seed=3), u.entropy(), u.log_prob(v), n.sample([20000]), n.entropy(),
                n.log_prob(v), n.kl_divergence(Normal([0.5, 0.0, 2.0], [2.0, 1.0, 1.0])), m.sample([4000]),
                Uniform(3.0, 4.0).sample([5000])]

    us, ue, ulp, ns, ne, nlp, kl, ms, scalar = _run(build)
    low, high = np.array([0.0, 1.0, -1.0]), np.array([2.0, 3.0, 0.0])
    assert us.shape == (20000, 3) and (us >= low).all() and (us < high).all()
    np.testing.assert_allclose(us.mean(0), (low + high) / 2, atol=0.03)
    np.testing.assert_allclose(ue, stats.uniform(low, high - low).entropy(), rtol=1e-6)
    np.testing.assert_allclose(ulp, [np.log(0.5), -np.inf, 0.0], rtol=1e-6)   # 3.5 lies outside [1, 3)
    loc, scale = np.array([0.0, 1.0, 2.0]), np.array([1.0, 0.5, 2.0])
    assert ns.shape == (20000, 3)
    np.testing.assert_allclose(ns.mean(0), loc, atol=0.05)
    np.testing.assert_allclose(ns.std(0), scale, rtol=0.03)
    np.testing.assert_allclose(ne, stats.norm(loc, scale).entropy(), rtol=1e-6)
    np.testing.assert_allclose(nlp, stats.norm(loc, scale).logpdf(value), rtol=1e-5)
    loc2, scale2 = np.array([0.5, 0.0, 2.0]), np.array([2.0, 1.0, 1.0])
    expected_kl = np.log(scale2 / scale) + (scale ** 2 + (loc - loc2) ** 2) / (2 * scale2 ** 2) - 0.5
    np.testing.assert_allclose(kl, expected_kl, rtol=1e-5)
    assert ms.shape == (4000,) and abs(ms.mean() - 0.5) < 0.15 and abs(ms.std() - 2.0) < 0.1
    assert scalar.shape == (5000,) and (scalar >= 3).all() and (scalar < 4).all()


def test_distributions_over_variables():
    lo = np.array([[0.0, 1.0], [2.0, -2.0]], "float32")
    hi = lo + np.array([[1.0, 2.0], [0.5, 4.0]], "float32")

    def build():
        a, b = fluid.data("lo", [-1, 2], "float32"), fluid.data("hi", [-1, 2], "float32")
        u, n = Uniform(a, b), Normal(a, b)
        # Fluid adds the batch-shaped parameters to a [batch..., shape...] draw with trailing-dim
        # broadcasting, so its tests sample the batch's own shape; so does this one
        return [u.sample([2, 2]), u.entropy(), n.sample([2, 2]), n.entropy(), n.log_prob(a)]

    us, ue, ns, ne, nlp = _run(build, {"lo": lo, "hi": hi})
    assert us.shape == (2, 2, 2, 2) and ns.shape == (2, 2, 2, 2)
    # the draw [batch..., shape...] holds uniform numbers in [low, high) of its trailing [2, 2] entry
    draw = us.reshape(2, 2, 2, 2)
    assert (draw >= lo).all() and (draw < hi).all()
    np.testing.assert_allclose(ue, np.log(hi - lo), rtol=1e-6)
    np.testing.assert_allclose(ne, stats.norm(lo, hi).entropy(), rtol=1e-6)
    np.testing.assert_allclose(nlp, stats.norm(lo, hi).logpdf(lo), rtol=1e-5)


def test_categorical_and_multivariate_normal_diag():
    a, b = np.array([[-0.602, -0.602, 1.0], [0.3, -2.0, 0.1]], "float32"), \
        np.array([[-0.102, -0.112, 0.5], [1.0, 0.0, -1.0]], "float32")
    loc1, loc2 = np.array([0.3, 0.5], "float32"), np.array([0.2, 0.4], "float32")
    s1, s2 = np.diag([0.4, 0.5]).astype("float32"), np.diag([0.3, 0.4]).astype("float32")

    def build():
        ca, cb = Categorical(a), Categorical(L.assign(b))
        ma, mb = MultivariateNormalDiag(loc1, s1), MultivariateNormalDiag(L.assign(loc2), L.assign(s2))
        return [ca.entropy(), ca.kl_divergence(cb), ma.entropy(), mb.entropy(), ma.kl_divergence(mb)]

    ent, kl, ea, eb, mkl = _run(build)
    p = np.exp(a) / np.exp(a).sum(-1, keepdims=True)
    q = np.exp(b) / np.exp(b).sum(-1, keepdims=True)
    np.testing.assert_allclose(ent[:, 0], [stats.entropy(r) for r in p], rtol=1e-5)
    np.testing.assert_allclose(kl[:, 0], [stats.entropy(r, s) for r, s in zip(p, q)], rtol=1e-4, atol=1e-7)
    # Fluid treats scale as the covariance: entropy 0.5 (k (1 + log 2 pi) + log det S)
    np.testing.assert_allclose(ea, stats.multivariate_normal(loc1, s1).entropy(), rtol=1e-5)
    np.testing.assert_allclose(eb, stats.multivariate_normal(loc2, s2).entropy(), rtol=1e-5)
    d = loc2 - loc1
    expected = 0.5 * (np.trace(np.linalg.inv(s2) @ s1) + d @ np.linalg.inv(s2) @ d - 2
                      + np.log(np.linalg.det(s2) / np.linalg.det(s1)))
    np.testing.assert_allclose(mkl, expected, rtol=1e-5)


def test_argument_checks():
    with pytest.raises(ValueError):
        with fluid.program_guard(fluid.Program(), fluid.Program()):
            Normal(fluid.data("x", [2], "float32"), 1.0)
    with pytest.raises(TypeError):
        Categorical(3.0)


def test_assign_takes_numpy_values():
    values = [np.arange(6, dtype="float32").reshape(2, 3) / 7, np.array([[1, -2]], "int64"),
              np.array([True, False]), np.array([1.5, 2.25])]
    got = _run(lambda: [L.assign(v) for v in values])
    for g, v in zip(got, values):
        assert g.dtype == v.dtype
        np.testing.assert_array_equal(g, v)
