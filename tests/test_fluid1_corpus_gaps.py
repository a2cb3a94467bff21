"""Gaps the PaddlePaddle/models corpus run found (docs/fluid1.md, "Corpus"), each closed as a rule
and checked against Paddle 2.6.2 running the same program bytes or against NumPy."""

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


def _params(scope, program):
    return {v.name: np.asarray(scope.find_var(v.name).get_tensor()).copy()
            for v in program.list_vars() if v.persistable and scope.find_var(v.name) is not None
            and v.name not in ("feed", "fetch")}


def _fc_loss():
    x = fluid.layers.data("x", shape=[4], dtype="float32")
    return fluid.layers.mean(fluid.layers.fc(x, 3))


# -- 1. optimizer._global_learning_rate() -------------------------------------------------------
@pytest.mark.parametrize("before", [True, False])
def test_global_learning_rate_of_a_float_rate_is_the_programs_variable(before):
    """image_classification/train.py: ``global_lr = optimizer._global_learning_rate()`` before
    ``minimize`` (Fluid creates the rate there), fetched with the loss; the same Variable after."""
    main, startup = _programs()
    with fluid.program_guard(main, startup):
        loss = _fc_loss()
        opt = fluid.optimizer.Momentum(learning_rate=0.25, momentum=0.9)
        lr = opt._global_learning_rate() if before else None
        opt.minimize(loss)
        after = opt._global_learning_rate()
    assert after is not None and (after is lr if before else lr is None)
    after.persistable = True
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    feed = {"x": np.ones((2, 4), "float32")}
    params = _params(scope, main)
    ours = exe.run(main, feed=feed, fetch_list=[loss.name, after.name], scope=scope)
    theirs = po.run(main.serialize(), feed, [loss.name, after.name], params)
    np.testing.assert_allclose(np.asarray(ours[1]).reshape(-1), [0.25])
    np.testing.assert_allclose(np.asarray(theirs[1]).reshape(-1), [0.25])
    np.testing.assert_allclose(np.asarray(ours[0]), theirs[0], rtol=1e-5)
    # the momentum ops read this very variable
    lr_inputs = {op.input("LearningRate")[0] for op in main.global_block().ops if op.type == "momentum"}
    assert lr_inputs == {after.name}
    # after minimize, outside the guard: still the optimized program's rate
    assert opt._global_learning_rate() is after
    assert opt._global_learning_rate(main) is after


def test_global_learning_rate_of_a_variable_rate_is_that_variable():
    main, startup = _programs()
    with fluid.program_guard(main, startup):
        loss = _fc_loss()
        rate = fluid.layers.exponential_decay(0.5, decay_steps=10, decay_rate=0.5)
        opt = fluid.optimizer.SGD(learning_rate=rate)
        assert opt._global_learning_rate() is rate
        opt.minimize(loss)
        assert opt._global_learning_rate() is rate
    assert opt._global_learning_rate(fluid.Program()) is None
