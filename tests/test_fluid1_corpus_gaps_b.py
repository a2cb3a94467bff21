"""More gaps the PaddlePaddle/models corpus run found (docs/fluid1.md, "Corpus"), each closed as a
rule and checked against Paddle 2.6.2 running the same program bytes or against NumPy."""

from __future__ import annotations

import jax  # noqa: F401  (before paddle)
import numpy as np
import pytest

import fluidjax as fluid
import paddle_oracle as po


def _programs():
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 7
    return main, startup


# -- 1. a Variable inside a shape list (ShapeTensor / ShapeTensorList) ----------------------------
def test_shape_lists_with_variables_match_paddle():
    """word2vec / DCGAN / SPADE: ``fill_constant(shape=[shape(x)[0], 1])``, ``fill_constant(shape=
    shape(y))``, ``reshape(x, [-1, var])``: the shapes travel as tensor inputs, read at trace time."""
    main, startup = _programs()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data("x", shape=[6], dtype="float32")
        n = fluid.layers.shape(x)[0]
        ones = fluid.layers.fill_constant(shape=[n, 1], value=1.0, dtype="float32")
        zeros = fluid.layers.fill_constant(shape=fluid.layers.shape(x), value=2.0, dtype="float32")
        three = fluid.layers.fill_constant([1], "int32", 3)
        r = fluid.layers.reshape(x, shape=[-1, three])
        u = fluid.layers.uniform_random(shape=[n, 2], min=0.0, max=1.0)
        g = fluid.layers.gaussian_random(shape=[n, 5])
    assert ones.shape == (-1, 1) and len(r.shape) == 2
    fetch = [ones.name, zeros.name, r.name, u.name, g.name]
    feed = {"x": np.arange(24, dtype="float32").reshape(4, 6)}
    ours = fluid.Executor(fluid.CPUPlace()).run(main, feed=feed, fetch_list=fetch, scope=fluid.Scope())
    theirs = po.run(main.serialize(), feed, fetch, {})
    for a, b in zip(ours[:3], theirs[:3]):
        np.testing.assert_array_equal(np.asarray(a), b)
    np.testing.assert_array_equal(np.asarray(ours[2]), feed["x"].reshape(8, 3))
    assert np.asarray(ours[3]).shape == theirs[3].shape == (4, 2)
    assert np.asarray(ours[4]).shape == theirs[4].shape == (4, 5)
