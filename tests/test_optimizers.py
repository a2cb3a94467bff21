"""Optimizers, learning-rate schedules, regularizers and gradient clipping.

The programs ``minimize`` builds are compared with the ones Paddle 2.6.2's static API builds
(op types, roles, accumulator names, startup fills); schedules with ``paddle.optimizer.lr``; a
scheduler changes the learning rate without recompiling.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

import fluidjax as fj
from fluidjax import layer
from fluidjax.frontend import clip as fj_clip
from fluidjax.frontend import lr as fj_lr
from fluidjax.frontend import optimizer as fj_optimizer
from fluidjax.frontend import regularizer as fj_regularizer
from fluidjax.ir.program import OP_ROLE_BACKWARD, OP_ROLE_LRSCHED, OP_ROLE_OPTIMIZE

os.environ.setdefault("GLOG_minloglevel", "2")
import paddle  # noqa: E402
import paddle_oracle  # noqa: E402,F401  (static mode)


# -- building the same small model in both frameworks ----------------------------------------------
def _ours(make_opt, first_attr=None, need_clip=True):
    main, startup = fj.Program(), fj.Program()
    with fj.unique_name.guard(), fj.program_guard(main, startup):
        x = layer.data("x", input_size=4)
        y = layer.data("y", dims=1, dtype="int64")
        h = layer.fc(x, 3, activation="relu", param_attr=first_attr,
                     bias_attr=None if need_clip else fj.ParamAttr(need_clip=False))
        p = layer.fc(h, 2, activation="softmax")
        cost = layer.mean(layer.cross_entropy(p, y))
        result = make_opt().minimize(cost)
    return main, startup, cost, result


def _paddle(make_opt, first_attr=None):
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.utils.unique_name.guard(), paddle.static.program_guard(main, startup):
        x = paddle.static.data("x", [-1, 4], "float32")
        y = paddle.static.data("y", [-1, 1], "int64")
        h = paddle.static.nn.fc(x, 3, activation="relu", weight_attr=first_attr)
        p = paddle.static.nn.fc(h, 2, activation="softmax")
        cost = paddle.mean(paddle.nn.functional.cross_entropy(p, y, use_softmax=False, reduction="none"))
        make_opt().minimize(cost)
    return main, startup


def _optimize_part(program):
    """(type, op_role) of the ops after the backward pass."""
    return [(op.type, int(op.attr("op_role"))) for op in program.global_block().ops
            if int(op.attr("op_role")) & OP_ROLE_OPTIMIZE]


def _fills(startup):
    return [(op.output("Out")[0], list(op.attr("shape")), round(float(op.attr("value")), 6))
            for op in startup.global_block().ops if op.type == "fill_constant"]


def _persistables(program):
    return sorted(v.name for v in program.list_vars() if v.persistable)


P, F = paddle.optimizer, fj_optimizer
PR, FR = paddle.regularizer, fj_regularizer
PC, FC = paddle.nn, fj_clip

STRUCTURES = {
    "sgd": (lambda: P.SGD(0.1), lambda: F.SGD(0.1)),
    "momentum_l2_fused": (lambda: P.Momentum(0.1, weight_decay=PR.L2Decay(0.01)),
                          lambda: F.Momentum(0.1, weight_decay=FR.L2Decay(0.01))),
    "momentum_l1": (lambda: P.Momentum(0.1, use_nesterov=True, weight_decay=PR.L1Decay(0.01)),
                    lambda: F.Momentum(0.1, use_nesterov=True, weight_decay=FR.L1Decay(0.01))),
    "adam_l2_globalnorm": (lambda: P.Adam(1e-3, weight_decay=PR.L2Decay(0.01), grad_clip=PC.ClipGradByGlobalNorm(1.0)),
                           lambda: F.Adam(1e-3, weight_decay=FR.L2Decay(0.01),
                                          grad_clip=FC.ClipGradByGlobalNorm(1.0))),
    "adam_float_decay": (lambda: P.Adam(1e-3, weight_decay=0.01), lambda: F.Adam(1e-3, weight_decay=0.01)),
    "adamw_norm": (lambda: P.AdamW(1e-3, weight_decay=0.02, grad_clip=PC.ClipGradByNorm(1.0)),
                   lambda: F.AdamW(1e-3, weight_decay=0.02, grad_clip=FC.ClipGradByNorm(1.0))),
    "adagrad_value": (lambda: P.Adagrad(0.1, initial_accumulator_value=0.1, grad_clip=PC.ClipGradByValue(0.5)),
                      lambda: F.Adagrad(0.1, initial_accumulator_value=0.1, grad_clip=FC.ClipGradByValue(0.5))),
    "rmsprop_centered": (lambda: P.RMSProp(0.01, momentum=0.9, centered=True),
                         lambda: F.RMSProp(0.01, momentum=0.9, centered=True)),
    "adamax_l1": (lambda: P.Adamax(0.01, weight_decay=PR.L1Decay(0.001)),
                  lambda: F.Adamax(0.01, weight_decay=FR.L1Decay(0.001))),
    "lamb": (lambda: P.Lamb(0.01, lamb_weight_decay=0.02), lambda: F.Lamb(0.01, lamb_weight_decay=0.02)),
}


@pytest.mark.parametrize("name", list(STRUCTURES))
def test_programs_have_paddles_structure(name):
    """Same optimizer ops, clipping and regularization ops (types and roles, in order), the same
    persistable variables (accumulator names) and the same startup fills as Paddle's program."""
    make_paddle, make_ours = STRUCTURES[name]
    pmain, pstartup = _paddle(make_paddle)
    main, startup, _, _ = _ours(make_ours)
    assert _optimize_part(main) == _optimize_part(pmain)
    assert _persistables(main) == _persistables(pmain)
    assert _fills(startup) == _fills(pstartup)
    # Same slots and attributes on the optimizer ops.
    opt_type = main.global_block().ops[-1].type
    ours = [op for op in main.global_block().ops if op.type == opt_type]
    theirs = [op for op in pmain.global_block().ops if op.type == opt_type]
    for a, b in zip(ours, theirs):
        assert {k: v for k, v in a.inputs.items() if v} == {k: b.input(k) for k in b.input_names if b.input(k)}
        assert {k: v for k, v in a.outputs.items() if v} == {k: b.output(k) for k in b.output_names if b.output(k)}
        for attr, value in a.attrs.items():
            if attr not in ("op_callstack", "op_role_var", "op_namescope", "op_device"):
                expected = b.attr(attr)
                if isinstance(value, float):
                    assert np.float32(value) == np.float32(expected), (attr, value, expected)
                else:
                    assert value == expected, (attr, value, expected)


def test_parameter_regularizer_wins_and_parameter_learning_rate_scales():
    """ParamAttr(regularizer=L1Decay) beats the optimizer's L2Decay; ParamAttr(learning_rate=0.5)
    appends a ``scale`` of the learning rate with role Optimize|LRSched, as Paddle does."""
    attr = lambda ns, pa: pa(learning_rate=0.5, regularizer=ns.L1Decay(0.1))  # noqa: E731
    pmain, _ = _paddle(lambda: P.Momentum(0.1, weight_decay=PR.L2Decay(0.01)),
                       attr(PR, paddle.ParamAttr))
    main, _, _, _ = _ours(lambda: F.Momentum(0.1, weight_decay=FR.L2Decay(0.01)), attr(FR, fj.ParamAttr))
    assert _optimize_part(main) == _optimize_part(pmain)
    block = main.global_block()
    scale_lr = [op for op in block.ops if op.type == "scale" and op.input("X") == ["learning_rate_0"]]
    assert len(scale_lr) == 1 and scale_lr[0].attr("scale") == 0.5
    assert scale_lr[0].attr("op_role") == OP_ROLE_OPTIMIZE | OP_ROLE_LRSCHED
    moms = {op.input("Param")[0]: op for op in block.ops if op.type == "momentum"}
    assert moms["fc_0.w_0"].input("LearningRate") == scale_lr[0].output("Out")
    assert moms["fc_0.w_0"].attr("regularization_method") == ""          # L1 ran as ops
    assert moms["fc_1.w_0"].attr("regularization_method") == "l2_decay"  # the optimizer's L2, fused
    assert [op.type for op in block.ops if op.type == "sign"] == ["sign"]


def test_ops_roles_and_in_place_updates():
    main, startup, cost, (ops, params_grads) = _ours(lambda: F.Adam(1e-3))
    assert sorted(p.name for p, _ in params_grads) == ["fc_0.b_0", "fc_0.w_0", "fc_1.b_0", "fc_1.w_0"]
    assert all(g.name == p.name + "@GRAD" for p, g in params_grads)
    assert [op.type for op in ops] == ["adam"] * 4
    for op in ops:
        assert op.attr("op_role") == OP_ROLE_OPTIMIZE
        assert op.attr("op_role_var") == [op.input("Param")[0], op.input("Grad")[0]]
        for slot in ("Param", "Moment1", "Moment2", "Beta1Pow", "Beta2Pow"):
            assert op.output(slot + "Out") == op.input(slot)   # in place
    roles = [int(op.attr("op_role")) for op in main.global_block().ops]
    assert OP_ROLE_BACKWARD in roles
    lr = main.global_block().var("learning_rate_0")
    assert lr.persistable and lr.shape == () and lr.dtype == "float32"


def test_parameter_list_and_need_clip():
    main, _, _, (ops, params_grads) = _ours(
        lambda: F.SGD(0.1, grad_clip=FC.ClipGradByValue(0.1)), need_clip=False)
    clipped = [op.input("X")[0] for op in main.global_block().ops if op.type == "clip"]
    assert "fc_0.b_0@GRAD" not in clipped and "fc_0.w_0@GRAD" in clipped
    main, _, cost, _ = _ours(lambda: F.SGD(0.1, parameters=["fc_1.w_0"]))
    assert [op.input("Param") for op in main.global_block().ops if op.type == "sgd"] == [["fc_1.w_0"]]


def test_bad_arguments_are_clear():
    with pytest.raises(TypeError, match="learning_rate"):
        F.SGD(learning_rate="fast")
    with pytest.raises(TypeError, match="weight_decay"):
        F.AdamW(weight_decay=FR.L2Decay(0.1))
    with pytest.raises(TypeError, match="grad_clip"):
        F.Adam(grad_clip=1.0)
    with pytest.raises(ValueError, match="T_max"):
        fj_lr.CosineAnnealingDecay(0.1, T_max=0)
    x = layer.data("x", input_size=3)
    with pytest.raises(ValueError, match="does not depend"):
        F.SGD(0.1).minimize(layer.mean(x))


# -- learning-rate schedules -------------------------------------------------------------------------
SCHEDULES = {
    "piecewise": lambda m: m.PiecewiseDecay(boundaries=[3, 6, 10], values=[1.0, 0.5, 0.1, 0.01]),
    "exponential": lambda m: m.ExponentialDecay(learning_rate=0.5, gamma=0.9),
    "cosine": lambda m: m.CosineAnnealingDecay(learning_rate=0.5, T_max=7, eta_min=0.01),
    "warmup": lambda m: m.LinearWarmup(learning_rate=0.5, warmup_steps=5, start_lr=0.0, end_lr=0.5),
    "warmup_cosine": lambda m: m.LinearWarmup(m.CosineAnnealingDecay(0.5, T_max=4), warmup_steps=3,
                                              start_lr=0.01, end_lr=0.5),
}


@pytest.mark.parametrize("name", list(SCHEDULES))
def test_schedules_follow_paddle(name):
    ours, theirs = SCHEDULES[name](fj_lr), SCHEDULES[name](paddle.optimizer.lr)
    for _ in range(25):
        assert ours.last_epoch == theirs.last_epoch
        np.testing.assert_allclose(ours(), theirs(), rtol=1e-12, atol=1e-15)
        ours.step()
        theirs.step()
    for epoch in (2, 9, 4):   # jumping to an epoch (closed form where Paddle has one)
        ours.step(epoch)
        theirs.step(epoch)
        np.testing.assert_allclose(ours(), theirs(), rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("mode,threshold_mode", [("min", "rel"), ("max", "abs")])
def test_reduce_on_plateau_follows_paddle(mode, threshold_mode):
    kw = dict(learning_rate=1.0, mode=mode, factor=0.5, patience=2, threshold=0.01, threshold_mode=threshold_mode,
              cooldown=1, min_lr=0.05)
    ours, theirs = fj_lr.ReduceOnPlateau(**kw), paddle.optimizer.lr.ReduceOnPlateau(**kw)
    metrics = [5, 4, 4, 4, 4, 3.99, 4, 4, 4, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2]
    if mode == "max":
        metrics = [-m for m in metrics]
    for m in metrics:
        ours.step(m)
        theirs.step(np.array([m], "float32"))
        assert ours() == pytest.approx(theirs(), rel=1e-12), (m, ours(), theirs())
        assert ours.last_epoch == theirs.last_epoch
    assert ours() < 1.0


def _linear_model(opt):
    main, startup = fj.Program(), fj.Program()
    with fj.unique_name.guard(), fj.program_guard(main, startup):
        x = layer.data("x", input_size=3)
        out = layer.fc(x, 1, bias_attr=False, param_attr=fj.ParamAttr(initializer=fj.initializer.Constant(0.5)))
        cost = layer.mean(out)
        opt.minimize(cost)
    return main, startup, cost


def test_scheduler_changes_the_rate_without_recompiling():
    sched = fj_lr.PiecewiseDecay(boundaries=[2, 4], values=[0.1, 0.01, 0.001])
    assert fj.optimizer.lr.PiecewiseDecay is fj_lr.PiecewiseDecay and fj.optimizer is fj_optimizer
    assert fj.regularizer is fj_regularizer and fj.clip is fj_clip
    main, startup, cost = _linear_model(fj_optimizer.SGD(learning_rate=sched))
    assert main.lr_scheduler is sched
    exe, scope = fj.Executor(), fj.Scope()
    exe.run(startup, scope=scope)
    xs = np.ones((2, 3), np.float32)
    w = np.full((3, 1), 0.5, np.float32)
    traces = None
    for step in range(6):
        (grad,) = exe.run(main, feed={"x": xs}, fetch_list=["fc_0.w_0@GRAD"], scope=scope)
        lr_value = np.asarray(scope.find_var("learning_rate_0").get_tensor())
        assert lr_value.shape == () and lr_value.dtype == np.float32
        assert float(lr_value) == pytest.approx(sched())
        w = w - np.float32(sched()) * grad
        np.testing.assert_allclose(np.asarray(scope.find_var("fc_0.w_0").get_tensor()), w, rtol=1e-6)
        if traces is None:
            traces = exe.trace_count
        assert exe.trace_count == traces, "scheduler.step() recompiled the training step"
        sched.step()
    assert sched.last_epoch == 6 and sched() == 0.001


def test_scheduled_training_matches_paddle():
    """Paddle's Executor writes its scheduler's value the same way: same parameters after each step."""
    make = {"fj": lambda: fj_optimizer.Momentum(fj_lr.ExponentialDecay(0.5, 0.8), momentum=0.9),
            "paddle": lambda: paddle.optimizer.Momentum(paddle.optimizer.lr.ExponentialDecay(0.5, 0.8), momentum=0.9)}
    opt = make["fj"]()
    main, startup, cost = _linear_model(opt)
    exe, scope = fj.Executor(), fj.Scope()
    exe.run(startup, scope=scope)

    pmain, pstartup = paddle.static.Program(), paddle.static.Program()
    with paddle.utils.unique_name.guard(), paddle.static.program_guard(pmain, pstartup):
        x = paddle.static.data("x", [-1, 3], "float32")
        out = paddle.static.nn.fc(x, 1, bias_attr=False,
                                  weight_attr=paddle.ParamAttr(initializer=paddle.nn.initializer.Constant(0.5)))
        popt = make["paddle"]()
        popt.minimize(paddle.mean(out))
    pscope, pexe = paddle.static.Scope(), paddle.static.Executor(paddle.CPUPlace())
    rng = np.random.default_rng(0)
    with paddle.static.scope_guard(pscope):
        pexe.run(pstartup)
        for _ in range(5):
            feed = {"x": rng.standard_normal((4, 3)).astype(np.float32)}
            exe.run(main, feed=feed, fetch_list=[cost], scope=scope)
            pexe.run(pmain, feed=feed)
            np.testing.assert_allclose(np.asarray(scope.find_var("fc_0.w_0").get_tensor()),
                                       np.array(pscope.find_var("fc_0.w_0").get_tensor()), rtol=1e-6)
            opt._learning_rate.step()
            popt._learning_rate.step()


def test_set_lr_takes_effect_without_recompiling():
    opt = fj_optimizer.SGD(learning_rate=0.1)
    main, startup, cost = _linear_model(opt)
    exe, scope = fj.Executor(), fj.Scope()
    exe.run(startup, scope=scope)
    feed = {"x": np.ones((2, 3), np.float32)}
    exe.run(main, feed=feed, fetch_list=[cost], scope=scope)
    traces = exe.trace_count
    opt.set_lr(0.25)
    assert opt.get_lr() == 0.25
    before = np.asarray(scope.find_var("fc_0.w_0").get_tensor()).copy()
    (grad,) = exe.run(main, feed=feed, fetch_list=["fc_0.w_0@GRAD"], scope=scope)
    traces_after_new_fetch = exe.trace_count
    np.testing.assert_allclose(np.asarray(scope.find_var("fc_0.w_0").get_tensor()), before - 0.25 * grad, rtol=1e-6)
    exe.run(main, feed=feed, fetch_list=[cost], scope=scope)
    opt.set_lr(0.5)
    exe.run(main, feed=feed, fetch_list=[cost], scope=scope)
    assert exe.trace_count == traces_after_new_fetch and traces_after_new_fetch == traces + 1


def test_clip_by_norm_and_value_ops_compute_paddles_values():
    """The clipping ops on concrete gradients, through a one-step SGD with learning rate 1."""
    for make_ours in (lambda: F.SGD(1.0, grad_clip=FC.ClipGradByNorm(0.05)),
                      lambda: F.SGD(1.0, grad_clip=FC.ClipGradByValue(0.01, min=-0.02)),
                      lambda: F.SGD(1.0, grad_clip=FC.ClipGradByGlobalNorm(0.05))):
        main, startup, cost, (_, params_grads) = _ours(make_ours)
        exe, scope = fj.Executor(), fj.Scope()
        exe.run(startup, scope=scope)
        rng = np.random.default_rng(2)
        feed = {"x": rng.standard_normal((5, 4)).astype(np.float32), "y": rng.integers(0, 2, (5, 1))}
        names = [p.name for p, _ in params_grads]
        before = {n: np.asarray(scope.find_var(n).get_tensor()).copy() for n in names}
        exe.run(main, feed=feed, fetch_list=[cost], scope=scope)
        steps = {n: before[n] - np.asarray(scope.find_var(n).get_tensor()) for n in names}
        clip = make_ours()._grad_clip
        if isinstance(clip, FC.ClipGradByNorm):
            assert all(np.linalg.norm(s) <= 0.05 + 1e-6 for s in steps.values())
        elif isinstance(clip, FC.ClipGradByValue):
            assert all(s.max() <= 0.01 + 1e-7 and s.min() >= -0.02 - 1e-7 for s in steps.values())
        else:
            total = np.sqrt(sum(np.sum(s.astype(np.float64) ** 2) for s in steps.values()))
            assert total <= 0.05 + 1e-6
