"""Fluid 1.x's ``fluid.optimizer``, learning-rate schedules, clipping and regularization, written
as Fluid 1.x scripts (``import fluidjax as fluid``) and checked against Paddle 2.6.2.

The oracles: Paddle 2.6's own static schedule functions (``paddle.optimizer.lr.exponential_decay``
and friends are still Fluid's), our serialized training programs run by Paddle's Executor (every
op here is a Paddle op, so Paddle's kernels check ours inside the real program),
``paddle.static.ExponentialMovingAverage`` and ``paddle.incubate.ModelAverage``; NumPy where
Paddle 2.6 no longer has Fluid's behaviour (Adadelta without a learning rate, Lookahead).
"""

from __future__ import annotations

import inspect
import math
import os

import numpy as np
import pytest

import fluidjax as fluid
from fluidjax.ir.program import OP_ROLE_LRSCHED, OP_ROLE_OPTIMIZE

os.environ.setdefault("GLOG_minloglevel", "2")
import paddle  # noqa: E402
import paddle_oracle  # noqa: E402,F401  (static mode)

STEPS = 30


# -- helpers -------------------------------------------------------------------------------------------
def _program():
    main, startup = fluid.Program(), fluid.Program()
    return main, startup, fluid.program_guard(main, startup)


def _parse(program) -> "paddle.static.Program":
    return paddle.static.Program.parse_from_string(program.serialize())


def _value(v) -> float:
    return float(np.asarray(v).reshape(-1)[0])


def _our_rates(make, steps=STEPS):
    main, startup, guard = _program()
    with fluid.unique_name.guard(), guard:
        lr = make(fluid.layers)
    exe, scope = fluid.Executor(), fluid.Scope()
    exe.run(startup, scope=scope)
    rates = [_value(exe.run(main, fetch_list=[lr], scope=scope)[0]) for _ in range(steps)]
    return rates, main, startup, lr


def _paddle_rates(main, startup, name, steps=STEPS):
    scope, exe = paddle.static.Scope(), paddle.static.Executor(paddle.CPUPlace())
    with paddle.static.scope_guard(scope):
        exe.run(startup)
        return [_value(exe.run(main, fetch_list=[name])[0]) for _ in range(steps)]


def _regression(make_opt, param_attr=None, bias_attr=None, loss_hook=None):
    """Fluid 1.x's fit-a-line, with a hidden layer: (main, startup, avg_cost, minimize's result)."""
    main, startup, guard = _program()
    startup.random_seed = 90   # as Fluid scripts fix it: the same initial weights every run
    with fluid.unique_name.guard(), guard:
        x = fluid.layers.data(name="x", shape=[4], dtype="float32")
        y = fluid.layers.data(name="y", shape=[1], dtype="float32")
        hidden = fluid.layers.fc(input=x, size=3, act="tanh", param_attr=param_attr, bias_attr=bias_attr)
        if loss_hook is not None:
            loss_hook(hidden)
        y_predict = fluid.layers.fc(input=hidden, size=1, act=None)
        cost = fluid.layers.square_error_cost(input=y_predict, label=y)
        avg_cost = fluid.layers.mean(cost)
        result = make_opt().minimize(avg_cost)
    return main, startup, avg_cost, result


def _feeds(n=6, seed=0):
    rng = np.random.default_rng(seed)
    return [{"x": rng.standard_normal((8, 4)).astype(np.float32),
             "y": rng.standard_normal((8, 1)).astype(np.float32)} for _ in range(n)]


def _persistables(program):
    return sorted(v.name for v in program.list_vars() if v.persistable and not getattr(v, "is_data", False))


def _train_both(main, startup, feeds, rtol=1e-4, atol=1e-6):
    """Train ``main`` in fluidjax and, serialized, in Paddle 2.6 from the same initial state;
    every persistable variable must agree after every step, to float32 rounding of two kernel
    libraries (an ill-conditioned update, e.g. centered RMSProp's ``ms - mg**2`` near 0, amplifies
    it past these tolerances: tests/test_optimizers.py covers that one). Returns fluidjax's scope."""
    exe, scope = fluid.Executor(), fluid.Scope()
    exe.run(startup, scope=scope)
    names = [n for n in _persistables(main) if scope.find_var(n) is not None]
    pmain, pstartup = _parse(main), _parse(startup)
    pscope, pexe = paddle.static.Scope(), paddle.static.Executor(paddle.CPUPlace())
    with paddle.static.scope_guard(pscope):
        pexe.run(pstartup)
        for name in names:   # start from fluidjax's initial values (random initializers differ)
            pscope.var(name).get_tensor().set(np.asarray(scope.find_var(name).get_tensor()), paddle.CPUPlace())
        for step, feed in enumerate(feeds):
            exe.run(main, feed=feed, scope=scope)
            pexe.run(pmain, feed=feed)
            for name in names:
                ours = np.asarray(scope.find_var(name).get_tensor())
                theirs = np.array(pscope.find_var(name).get_tensor())
                np.testing.assert_allclose(ours.reshape(theirs.shape), theirs, rtol=rtol, atol=atol,
                                           err_msg=f"{name} after step {step}")
    return scope


def _get(scope, name):
    return np.asarray(scope.find_var(name).get_tensor()).copy()


# -- 1. learning-rate schedules as ops -------------------------------------------------------------------
SCHEDULES = {
    "exponential": ("exponential_decay", (0.1, 3, 0.7), {}),
    "exponential_staircase": ("exponential_decay", (0.1, 3, 0.5), {"staircase": True}),
    "natural_exp": ("natural_exp_decay", (0.1, 4, 0.5), {}),
    "natural_exp_staircase": ("natural_exp_decay", (0.1, 4, 0.5), {"staircase": True}),
    "inverse_time": ("inverse_time_decay", (0.1, 3, 0.5), {}),
    "inverse_time_staircase": ("inverse_time_decay", (0.1, 3, 0.5), {"staircase": True}),
    "polynomial": ("polynomial_decay", (0.1, 12, 0.01), {"power": 2.0}),
    "polynomial_cycle": ("polynomial_decay", (0.1, 7, 0.01), {"power": 1.5, "cycle": True}),
    "piecewise": ("piecewise_decay", ([5, 11, 20], [1.0, 0.5, 0.1, 0.01]), {}),
    "noam": ("noam_decay", (64, 8), {}),
    "noam_rate": ("noam_decay", (512, 10), {"learning_rate": 2.0}),
    "cosine": ("cosine_decay", (0.1, 3, 8), {}),
    "linear_warmup": ("linear_lr_warmup", (0.1, 6, 0.001, 0.1), {}),
}


@pytest.mark.parametrize("key", list(SCHEDULES))
def test_schedules_follow_paddle(key):
    """Each fluid.layers schedule, over 30 runs: the same rates as Paddle 2.6's static function of
    the same name, and Paddle running our serialized program gives them too."""
    fn, args, kwargs = SCHEDULES[key]
    ours, main, startup, lr = _our_rates(lambda layers: getattr(layers, fn)(*args, **kwargs))
    pmain, pstartup = paddle.static.Program(), paddle.static.Program()
    with paddle.utils.unique_name.guard(), paddle.static.program_guard(pmain, pstartup):
        plr = getattr(paddle.optimizer.lr, fn)(*args, **kwargs)
    theirs = _paddle_rates(pmain, pstartup, plr.name)
    np.testing.assert_allclose(ours, theirs, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(_paddle_rates(_parse(main), _parse(startup), lr.name), theirs, rtol=1e-6, atol=1e-9)
    assert len(set(np.round(ours, 9))) > 1   # it does change over the run


def test_schedule_numbers_and_program_shape():
    """The formulas in NumPy, and what Fluid's program holds: the persistable int64 [1]
    ``@LR_DECAY_COUNTER@`` advanced by an ``increment`` at op 0, every schedule op LRSched."""
    steps = np.arange(STEPS, dtype=np.float64)
    expected = {
        "exponential_decay": (lambda lay: lay.exponential_decay(0.1, 3, 0.5, staircase=True),
                              0.1 * 0.5 ** np.floor(steps / 3)),
        "cosine_decay": (lambda lay: lay.cosine_decay(0.1, 3, 8),
                         0.1 * 0.5 * (np.cos(np.floor(steps / 3) * math.pi / 8) + 1)),
        "polynomial_decay": (lambda lay: lay.polynomial_decay(0.1, 12, 0.01, power=2.0),
                             0.09 * (1 - np.minimum(steps, 12) / 12) ** 2 + 0.01),
        "noam_decay": (lambda lay: lay.noam_decay(64, 8),
                       64 ** -0.5 * np.minimum((steps + 1) ** -0.5, 8 ** -1.5 * (steps + 1))),
    }
    for name, (make, numbers) in expected.items():
        rates, main, startup, lr = _our_rates(make)
        np.testing.assert_allclose(rates, numbers, rtol=1e-5, atol=1e-8, err_msg=name)
        block = main.global_block()
        counter = block.var("@LR_DECAY_COUNTER@")
        assert counter.persistable and counter.dtype == "int64" and counter.shape == (1,)
        first = block.ops[0]
        assert first.type == "increment" and first.input("X") == ["@LR_DECAY_COUNTER@"] == first.output("Out")
        roles = {int(op.attr("op_role")) for b in main.blocks for op in b.ops}
        assert roles == {OP_ROLE_LRSCHED}, (name, roles)
        fills = [op for op in startup.global_block().ops if op.output("Out") == ["@LR_DECAY_COUNTER@"]]
        begin = 1 if name == "noam_decay" else 0     # the first run sees step `begin`
        assert [float(op.attr("value")) for op in fills] == [begin - 1.0]


def test_schedules_share_one_counter_and_keep_fluids_names():
    main, startup, guard = _program()
    with fluid.unique_name.guard(), guard:
        a = fluid.layers.piecewise_decay([2, 4], [0.3, 0.2, 0.1])
        b = fluid.layers.linear_lr_warmup(fluid.layers.exponential_decay(0.2, 2, 0.5), 3, 0.0, 0.2)
    block = main.global_block()
    assert [op.type for op in block.ops].count("increment") == 1
    assert a.name == "learning_rate" and b.name == "learning_rate_warmup"
    assert block.var("learning_rate").persistable and block.var("learning_rate_warmup").persistable
    exe, scope = fluid.Executor(), fluid.Scope()
    exe.run(startup, scope=scope)
    got = [[_value(v) for v in exe.run(main, fetch_list=[a, b], scope=scope)] for _ in range(6)]
    np.testing.assert_allclose([g[0] for g in got], [0.3, 0.3, 0.2, 0.2, 0.1, 0.1], rtol=1e-7)
    np.testing.assert_allclose([g[1] for g in got], [0, 0.2 / 3, 0.4 / 3, 0.2 * 0.5 ** 1.5, 0.2 * 0.25,
                                                     0.2 * 0.5 ** 2.5], rtol=1e-6, atol=1e-9)


def test_autoincreased_step_counter_and_create_global_var():
    main, startup, guard = _program()
    with fluid.unique_name.guard(), guard:
        counter = fluid.layers.autoincreased_step_counter(begin=5, step=2)
        again = fluid.layers.autoincreased_step_counter()
        beta = fluid.layers.create_global_var(shape=[2], value=0.25, dtype="float32", persistable=True, name="beta")
    assert again is counter and counter.name == "@STEP_COUNTER@"
    assert [op.type for op in main.global_block().ops] == ["increment"]
    exe, scope = fluid.Executor(), fluid.Scope()
    exe.run(startup, scope=scope)
    seen = [int(np.asarray(exe.run(main, fetch_list=[counter, beta], scope=scope)[0]).reshape(-1)[0])
            for _ in range(3)]
    assert seen == [6, 8, 10]   # Fluid's rule: filled with begin - 1, advanced by step before each run
    np.testing.assert_array_equal(_get(scope, "beta"), [0.25, 0.25])


def test_learning_rate_scheduler_module():
    import fluidjax.layers.learning_rate_scheduler as lrs

    for name in lrs.__all__:
        assert getattr(lrs, name) is getattr(fluid.layers, name)
    assert callable(lrs._decay_step_counter)


def test_fluid_saved_program_with_schedule_runs():
    """A training program built the way Fluid 1.x built it — Paddle's schedule ops (its ``cond``
    for piecewise) and ``sgd`` ops reading the schedule's Variable — parsed and trained here
    gives Paddle's parameters."""
    pmain, pstartup = paddle.static.Program(), paddle.static.Program()
    with paddle.utils.unique_name.guard(), paddle.static.program_guard(pmain, pstartup):
        x = paddle.static.data("x", [-1, 4], "float32")
        y = paddle.static.data("y", [-1, 1], "float32")
        pred = paddle.static.nn.fc(x, 1, weight_attr=paddle.ParamAttr(
            initializer=paddle.nn.initializer.Constant(0.1)))
        loss = paddle.mean(paddle.square(pred - y))
        lr = paddle.optimizer.lr.piecewise_decay([2, 4], [0.1, 0.05, 0.01])
        lr2 = paddle.optimizer.lr.exponential_decay(lr, 2, 0.5)   # a Variable rate, decayed again
        block = pmain.global_block()
        for param, grad in paddle.static.append_backward(loss):
            block.append_op(type="sgd", inputs={"Param": param, "Grad": grad, "LearningRate": lr2},
                            outputs={"ParamOut": param})
    main = fluid.Program.parse(pmain.desc.serialize_to_string())
    startup = fluid.Program.parse(pstartup.desc.serialize_to_string())
    exe, scope = fluid.Executor(), fluid.Scope()
    exe.run(startup, scope=scope)
    pscope, pexe = paddle.static.Scope(), paddle.static.Executor(paddle.CPUPlace())
    with paddle.static.scope_guard(pscope):
        pexe.run(pstartup)
        for feed in _feeds(7, seed=3):
            feed = {"x": feed["x"], "y": feed["y"]}
            exe.run(main, feed=feed, scope=scope)
            pexe.run(pmain, feed=feed)
            for name in ("fc_0.w_0", "fc_0.b_0"):
                np.testing.assert_allclose(_get(scope, name), np.array(pscope.find_var(name).get_tensor()),
                                           rtol=1e-5, atol=1e-7)


# -- 2 + 3. the optimizers, with a float or a Variable learning rate ----------------------------------
def _decayed():
    return fluid.layers.exponential_decay(learning_rate=0.1, decay_steps=2, decay_rate=0.6, staircase=True)


OPTIMIZERS = {
    "SGDOptimizer": lambda lr: fluid.optimizer.SGDOptimizer(learning_rate=lr),
    "MomentumOptimizer": lambda lr: fluid.optimizer.MomentumOptimizer(learning_rate=lr, momentum=0.9,
                                                                      use_nesterov=True),
    "AdamOptimizer": lambda lr: fluid.optimizer.AdamOptimizer(learning_rate=lr, beta1=0.8, beta2=0.99,
                                                              epsilon=1e-6),
    "AdamaxOptimizer": lambda lr: fluid.optimizer.AdamaxOptimizer(learning_rate=lr),
    "AdagradOptimizer": lambda lr: fluid.optimizer.AdagradOptimizer(learning_rate=lr, initial_accumulator_value=0.1),
    "RMSPropOptimizer": lambda lr: fluid.optimizer.RMSPropOptimizer(learning_rate=lr, rho=0.9, momentum=0.5),
    "LambOptimizer": lambda lr: fluid.optimizer.LambOptimizer(learning_rate=lr, lamb_weight_decay=0.01),
    "DecayedAdagradOptimizer": lambda lr: fluid.optimizer.DecayedAdagradOptimizer(learning_rate=lr, decay=0.9),
    "FtrlOptimizer": lambda lr: fluid.optimizer.FtrlOptimizer(learning_rate=lr, l1=0.001, l2=0.002),
    "LarsMomentumOptimizer": lambda lr: fluid.optimizer.LarsMomentumOptimizer(learning_rate=lr, momentum=0.9,
                                                                              lars_weight_decay=0.001),
    "DGCMomentumOptimizer": lambda lr: fluid.optimizer.DGCMomentumOptimizer(learning_rate=lr, momentum=0.9,
                                                                            rampup_begin_step=0),
}


@pytest.mark.parametrize("rate", ["float", "variable"])
@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_optimizers_train_like_paddle(name, rate):
    """Six training steps of Fluid's fit-a-line: Paddle 2.6 running our serialized program holds the
    same parameters, accumulators and learning rate after every step. With a Variable rate, the
    optimizer ops read the schedule's variable (no learning_rate_0 is made)."""
    make = OPTIMIZERS[name]
    main, startup, _, (ops, params_grads) = _regression(lambda: make(0.05 if rate == "float" else _decayed()))
    opt_ops = [op for op in main.global_block().ops if int(op.attr("op_role")) == OP_ROLE_OPTIMIZE
               and "Param" in op.inputs]
    rates = {op.input("LearningRate")[0] for op in opt_ops}
    if rate == "variable":
        assert not main.global_block().has_var("learning_rate_0")
        assert len(rates) == 1 and main.global_block().var(rates.pop()).shape == (1,)
    else:
        assert rates == {"learning_rate_0"}
    assert sorted(p.name for p, _ in params_grads) == ["fc_0.b_0", "fc_0.w_0", "fc_1.b_0", "fc_1.w_0"]
    assert ops and all(int(op.attr("op_role")) & OP_ROLE_OPTIMIZE for op in ops)
    _train_both(main, startup, _feeds())


def test_adadelta_fluid1_update_without_learning_rate():
    """Fluid 1.x's adadelta op has no LearningRate (its step is not scaled by the rate): NumPy."""
    main, startup, _, _ = _regression(lambda: fluid.optimizer.Adadelta(learning_rate=0.0003, epsilon=1e-6, rho=0.9))
    ops = [op for op in main.global_block().ops if op.type == "adadelta"]
    assert len(ops) == 4 and all(not op.input("LearningRate") for op in ops)
    exe, scope = fluid.Executor(), fluid.Scope()
    exe.run(startup, scope=scope)
    rho, eps = np.float32(0.9), np.float32(1e-6)
    state = {op.input("Param")[0]: (op.input("Grad")[0], op.input("AvgSquaredGrad")[0],
                                    op.input("AvgSquaredUpdate")[0]) for op in ops}
    eg = {p: np.zeros_like(_get(scope, p)) for p in state}
    ex = {p: np.zeros_like(_get(scope, p)) for p in state}
    for feed in _feeds(4):
        before = {p: _get(scope, p) for p in state}
        grads = exe.run(main, feed=feed, fetch_list=[g for g, _, _ in state.values()], scope=scope)
        for (p, _), g in zip(state.items(), grads):
            eg[p] = rho * eg[p] + (1 - rho) * g * g
            update = -np.sqrt((ex[p] + eps) / (eg[p] + eps)) * g
            ex[p] = rho * ex[p] + (1 - rho) * update * update
            np.testing.assert_allclose(_get(scope, p), before[p] + update, rtol=1e-5, atol=1e-7)
            np.testing.assert_allclose(_get(scope, state[p][2]), ex[p], rtol=1e-5, atol=1e-9)


def test_fluid1_names_signatures_and_aliases():
    opt = fluid.optimizer
    pairs = {"SGD": "SGDOptimizer", "Momentum": "MomentumOptimizer", "Adam": "AdamOptimizer",
             "Adamax": "AdamaxOptimizer", "Adagrad": "AdagradOptimizer", "RMSProp": "RMSPropOptimizer",
             "Lamb": "LambOptimizer", "DecayedAdagrad": "DecayedAdagradOptimizer", "Adadelta": "AdadeltaOptimizer",
             "Ftrl": "FtrlOptimizer", "LarsMomentum": "LarsMomentumOptimizer"}
    for short, long in pairs.items():
        assert getattr(opt, short) is getattr(opt, long)
        assert long in opt.__all__ and short in opt.__all__
    # Fluid 1.8's positional order.
    fluid18 = {
        "SGDOptimizer": ["learning_rate", "parameter_list", "regularization", "grad_clip", "name"],
        "MomentumOptimizer": ["learning_rate", "momentum", "parameter_list", "use_nesterov", "regularization",
                              "grad_clip", "name"],
        "AdamOptimizer": ["learning_rate", "beta1", "beta2", "epsilon", "parameter_list", "regularization",
                          "grad_clip", "name", "lazy_mode"],
        "AdagradOptimizer": ["learning_rate", "epsilon", "parameter_list", "regularization", "grad_clip", "name",
                             "initial_accumulator_value"],
        "RMSPropOptimizer": ["learning_rate", "rho", "epsilon", "momentum", "centered", "parameter_list",
                             "regularization", "grad_clip", "name"],
        "LambOptimizer": ["learning_rate", "lamb_weight_decay", "beta1", "beta2", "epsilon", "parameter_list",
                          "regularization", "grad_clip", "exclude_from_weight_decay_fn", "name"],
        "DecayedAdagradOptimizer": ["learning_rate", "decay", "epsilon", "parameter_list", "regularization",
                                    "grad_clip", "name"],
        "AdadeltaOptimizer": ["learning_rate", "epsilon", "rho", "parameter_list", "regularization", "grad_clip",
                              "name"],
        "FtrlOptimizer": ["learning_rate", "l1", "l2", "lr_power", "parameter_list", "regularization", "grad_clip",
                          "name"],
        "LarsMomentumOptimizer": ["learning_rate", "momentum", "lars_coeff", "lars_weight_decay", "parameter_list",
                                  "regularization", "grad_clip", "name"],
        "DGCMomentumOptimizer": ["learning_rate", "momentum", "rampup_begin_step", "rampup_step", "sparsity",
                                 "parameter_list", "use_nesterov", "num_trainers", "regularization", "grad_clip",
                                 "name"],
        "ModelAverage": ["average_window_rate", "min_average_window", "max_average_window", "regularization",
                         "name"],
        "ExponentialMovingAverage": ["decay", "thres_steps", "name"],
        "LookaheadOptimizer": ["inner_optimizer", "alpha", "k"],
    }
    for name, expected in fluid18.items():
        params = [p.name for p in inspect.signature(getattr(opt, name)).parameters.values()
                  if p.kind == p.POSITIONAL_OR_KEYWORD and p.name != "self"]
        assert params == expected, name
    ema = inspect.signature(opt.ExponentialMovingAverage).parameters
    assert ema["decay"].default == 0.999 and ema["thres_steps"].default is None
    assert inspect.signature(opt.AdamOptimizer).parameters["learning_rate"].default == 0.001


def test_backward_then_apply_gradients():
    """Fluid's two-part minimize: backward() then apply_gradients() builds what minimize builds."""
    def two_part():
        main, startup, guard = _program()
        with fluid.unique_name.guard(), guard:
            x = fluid.layers.data(name="x", shape=[4], dtype="float32")
            y = fluid.layers.data(name="y", shape=[1], dtype="float32")
            cost = fluid.layers.mean(fluid.layers.square_error_cost(
                input=fluid.layers.fc(input=x, size=1), label=y))
            sgd = fluid.optimizer.SGD(learning_rate=0.1)
            params_grads = sgd.backward(cost)
            ops = sgd.apply_gradients(params_grads)
        return main, ops

    main, ops = two_part()
    assert [op.type for op in ops] == ["sgd", "sgd"]
    assert [op.type for op in main.global_block().ops if int(op.attr("op_role")) & OP_ROLE_OPTIMIZE] == ["sgd", "sgd"]


def test_adam_with_variable_betas():
    """Fluid 1.x's Adam takes beta1/beta2 Variables (a schedule of the program): Beta1Tensor /
    Beta2Tensor inputs; Paddle runs the program the same."""
    from fluidjax.layers.learning_rate_scheduler import _decay_step_counter

    def make():
        step = _decay_step_counter()
        beta1 = fluid.layers.create_global_var(shape=[1], value=0.9, dtype="float32", persistable=True, name="beta1")
        decayed = fluid.layers.scale(fluid.layers.elementwise_pow(
            fluid.layers.fill_constant([1], "float32", 0.9), fluid.layers.scale(step, scale=0.5)), scale=0.9)
        fluid.layers.assign(decayed, beta1)
        return fluid.optimizer.AdamOptimizer(learning_rate=0.01, beta1=beta1, beta2=0.99)

    main, startup, _, _ = _regression(make)
    adam = [op for op in main.global_block().ops if op.type == "adam"]
    assert all(op.input("Beta1Tensor") == ["beta1"] and not op.input("Beta2Tensor") for op in adam)
    _train_both(main, startup, _feeds(4))


def test_learning_rate_variable_of_another_program_is_refused():
    main, startup, guard = _program()
    with guard:
        lr = fluid.layers.exponential_decay(0.1, 2, 0.5)
    with pytest.raises(TypeError, match="another program"):
        _regression(lambda: fluid.optimizer.SGD(learning_rate=lr))
    with pytest.raises(TypeError, match="learning_rate"):
        fluid.optimizer.SGD(learning_rate="0.1")
    with pytest.raises(TypeError, match="GradientClipByNorm"):
        fluid.optimizer.DGCMomentumOptimizer(0.1, 0.9, 0, grad_clip=fluid.clip.GradientClipByValue(1.0))


# -- 4. fluid.clip -------------------------------------------------------------------------------------
def test_set_gradient_clip_global_norm_matches_optimizer_grad_clip():
    """set_gradient_clip(GradientClipByGlobalNorm) before minimize clips as grad_clip= does; both
    programs run the same in Paddle."""
    def with_set():
        fluid.clip.set_gradient_clip(fluid.clip.GradientClipByGlobalNorm(clip_norm=0.05))
        return fluid.optimizer.SGD(learning_rate=0.5)

    main_a, startup_a, _, _ = _regression(with_set)
    main_b, startup_b, _, _ = _regression(lambda: fluid.optimizer.SGD(
        learning_rate=0.5, grad_clip=fluid.clip.GradientClipByGlobalNorm(clip_norm=0.05)))
    types = lambda m: [op.type for op in m.global_block().ops if int(op.attr("op_role")) & OP_ROLE_OPTIMIZE]  # noqa
    assert types(main_a) == types(main_b) and "elementwise_mul" in types(main_a)
    scope_a = _train_both(main_a, startup_a, _feeds(3))
    scope_b = _train_both(main_b, startup_b, _feeds(3))
    for name in ("fc_0.w_0", "fc_1.w_0"):
        assert _get(scope_a, name).shape == _get(scope_b, name).shape


def test_set_gradient_clip_by_names_and_param_attr_clip():
    """A clip per parameter: set_gradient_clip(..., param_list=[names]) and ParamAttr(gradient_clip=);
    other parameters are not clipped; the optimizer's own grad_clip wins over both."""
    def by_name():
        fluid.clip.set_gradient_clip(fluid.clip.GradientClipByValue(max=0.01), param_list=["fc_1.w_0"])
        return fluid.optimizer.SGD(learning_rate=1.0)

    main, startup, _, _ = _regression(by_name, param_attr=fluid.ParamAttr(
        gradient_clip=fluid.clip.GradientClipByNorm(clip_norm=0.02)))
    ops = main.global_block().ops
    assert [op.input("X") for op in ops if op.type == "clip"] == [["fc_1.w_0@GRAD"]]
    assert [op.input("X") for op in ops if op.type == "clip_by_norm"] == [["fc_0.w_0@GRAD"]]
    exe, scope = fluid.Executor(), fluid.Scope()
    exe.run(startup, scope=scope)
    before = {n: _get(scope, n) for n in ("fc_0.w_0", "fc_1.w_0", "fc_1.b_0")}
    grads = exe.run(main, feed=_feeds(1, seed=5)[0], fetch_list=["fc_1.b_0@GRAD"], scope=scope)
    steps = {n: before[n] - _get(scope, n) for n in before}
    assert np.abs(steps["fc_1.w_0"]).max() <= 0.01 + 1e-7
    assert np.linalg.norm(steps["fc_0.w_0"]) <= 0.02 + 1e-6
    np.testing.assert_allclose(steps["fc_1.b_0"], grads[0], rtol=1e-6)   # unclipped
    _train_both(main, startup, _feeds(3))
    # The optimizer's grad_clip wins.
    main, _, _, _ = _regression(lambda: fluid.optimizer.SGD(
        learning_rate=1.0, grad_clip=fluid.clip.GradientClipByValue(0.5)), param_attr=fluid.ParamAttr(
        gradient_clip=fluid.clip.GradientClipByNorm(clip_norm=0.02)))
    assert not [op for op in main.global_block().ops if op.type == "clip_by_norm"]
    assert len([op for op in main.global_block().ops if op.type == "clip"]) == 4


def test_gradient_clip_need_clip_function():
    clip = fluid.clip.GradientClipByValue(max=0.01, need_clip=lambda p: p.name.endswith(".w_0"))
    main, startup, _, _ = _regression(lambda: fluid.optimizer.SGD(learning_rate=1.0, grad_clip=clip))
    clipped = sorted(op.input("X")[0] for op in main.global_block().ops if op.type == "clip")
    assert clipped == ["fc_0.w_0@GRAD", "fc_1.w_0@GRAD"]
    _train_both(main, startup, _feeds(2))
    with pytest.raises(ValueError, match="one clip_norm"):
        def mixed():
            fluid.clip.set_gradient_clip(fluid.clip.GradientClipByGlobalNorm(1.0), param_list=["fc_0.w_0"])
            fluid.clip.set_gradient_clip(fluid.clip.GradientClipByGlobalNorm(2.0), param_list=["fc_1.w_0"])
            return fluid.optimizer.SGD(learning_rate=0.1)
        _regression(mixed)


def test_error_clip_by_value():
    """ErrorClipByValue on a forward variable clips its gradient in place right after the backward
    op that computes it."""
    def hook(hidden):
        hidden.error_clip = fluid.clip.ErrorClipByValue(max=1e-3)

    main, startup, _, _ = _regression(lambda: fluid.optimizer.SGD(learning_rate=0.1), loss_hook=hook)
    block = main.global_block()
    clips = [i for i, op in enumerate(block.ops) if op.type == "clip"]
    assert len(clips) == 1
    clip_op = block.ops[clips[0]]
    name = clip_op.input("X")[0]
    assert clip_op.output("Out") == [name] and name.endswith("@GRAD") and name.startswith("fc_0.tmp")
    assert name in block.ops[clips[0] - 1].output_arg_names
    exe, scope = fluid.Executor(), fluid.Scope()
    exe.run(startup, scope=scope)
    feed = _feeds(1)[0]
    feed["y"] = feed["y"] * 100
    (grad,) = exe.run(main, feed=feed, fetch_list=[name], scope=scope)
    assert np.abs(grad).max() <= 1e-3 + 1e-9 and np.abs(grad).max() > 0
    _train_both(main, startup, _feeds(2))


# -- 5. fluid.regularizer --------------------------------------------------------------------------------
def test_regularizers_fluid1_names_and_precedence():
    """L2DecayRegularizer(regularization_coeff=) on the optimizer applies to the parameters without
    their own; ParamAttr(regularizer=L1DecayRegularizer(...)) wins for its parameter; Paddle runs
    the program the same."""
    reg = fluid.regularizer
    assert reg.L2Decay is reg.L2DecayRegularizer and reg.L1Decay is reg.L1DecayRegularizer
    assert reg.L2Decay(regularization_coeff=0.5).coeff == 0.5 == reg.L1DecayRegularizer(0.5)._regularization_coeff
    main, startup, _, _ = _regression(
        lambda: fluid.optimizer.SGD(learning_rate=0.1, regularization=reg.L2DecayRegularizer(regularization_coeff=0.1)),
        param_attr=fluid.ParamAttr(regularizer=reg.L1DecayRegularizer(regularization_coeff=0.2)))
    ops = main.global_block().ops
    signs = [op.input("X") for op in ops if op.type == "sign"]
    assert signs == [["fc_0.w_0"]]
    scaled = sorted(op.input("X")[0] for op in ops if op.type == "scale" and op.input("X")[0].startswith("fc_"))
    assert scaled == ["fc_0.b_0", "fc_1.b_0", "fc_1.w_0"]
    _train_both(main, startup, _feeds(3))
    # The arithmetic, once, for fc_1.w_0 (L2 from the optimizer) and fc_0.w_0 (its own L1).
    exe, scope = fluid.Executor(), fluid.Scope()
    exe.run(startup, scope=scope)
    before = {n: _get(scope, n) for n in ("fc_0.w_0", "fc_1.w_0")}
    feed = _feeds(1)[0]
    # The raw gradients: the same step without regularization.
    plain, plain_startup, _, _ = _regression(lambda: fluid.optimizer.SGD(learning_rate=0.1))
    pscope = fluid.Scope()
    exe.run(plain_startup, scope=pscope)
    for n, v in before.items():
        pscope.find_var(n).get_tensor().set(v)
    for n in ("fc_0.b_0", "fc_1.b_0"):
        pscope.find_var(n).get_tensor().set(_get(scope, n))
    g0, g1 = exe.run(plain, feed=feed, fetch_list=["fc_0.w_0@GRAD", "fc_1.w_0@GRAD"], scope=pscope)
    exe.run(main, feed=feed, scope=scope)
    np.testing.assert_allclose(_get(scope, "fc_0.w_0"), before["fc_0.w_0"] - 0.1 * (g0 + 0.2 * np.sign(before["fc_0.w_0"])),
                               rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(_get(scope, "fc_1.w_0"), before["fc_1.w_0"] - 0.1 * (g1 + 0.1 * before["fc_1.w_0"]),
                               rtol=1e-5, atol=1e-7)


def test_param_attr_fluid1_arguments():
    attr = fluid.ParamAttr("w", None, 0.5, None, True, fluid.clip.GradientClipByValue(1.0), False)
    assert attr.name == "w" and attr.learning_rate == 0.5 and attr.do_model_average is False
    assert isinstance(attr.gradient_clip, fluid.clip.GradientClipByValue)
    main, _, guard = _program()
    with guard:
        x = fluid.layers.data(name="x", shape=[2], dtype="float32")
        fluid.layers.fc(input=x, size=2, param_attr=attr)
    w = main.global_block().var("w")
    assert w.do_model_average is False and w.gradient_clip_attr is attr.gradient_clip
    w = main.clone().global_block().var("w")     # a clone keeps them (Python-only, as in Fluid)
    assert w.do_model_average is False and isinstance(w.gradient_clip_attr, fluid.clip.GradientClipByValue)


# -- 6. ExponentialMovingAverage, ModelAverage, Lookahead ---------------------------------------------------
def _paddle_regression(make_opt, after=None):
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.utils.unique_name.guard(), paddle.static.program_guard(main, startup):
        x = paddle.static.data("x", [-1, 4], "float32")
        y = paddle.static.data("y", [-1, 1], "float32")
        hidden = paddle.static.nn.fc(x, 3, activation="tanh")
        pred = paddle.static.nn.fc(hidden, 1)
        loss = paddle.mean(paddle.nn.functional.square_error_cost(pred, y))
        make_opt().minimize(loss)
        extra = after() if after is not None else None
    return main, startup, extra


def _sync(scope, pscope, names):
    for name in names:
        pscope.var(name).get_tensor().set(_get(scope, name), paddle.CPUPlace())


PARAMS = ["fc_0.b_0", "fc_0.w_0", "fc_1.b_0", "fc_1.w_0"]


def _ema_program(thres: bool):
    main, startup, guard = _program()
    with fluid.unique_name.guard(), guard:
        x = fluid.layers.data(name="x", shape=[4], dtype="float32")
        y = fluid.layers.data(name="y", shape=[1], dtype="float32")
        hidden = fluid.layers.fc(input=x, size=3, act="tanh")
        y_predict = fluid.layers.fc(input=hidden, size=1, act=None)
        avg_cost = fluid.layers.mean(fluid.layers.square_error_cost(input=y_predict, label=y))
        test_program = main.clone(for_test=True)
        fluid.optimizer.Adam(learning_rate=0.05).minimize(avg_cost)
        global_steps = fluid.layers.autoincreased_step_counter() if thres else None
        ema = fluid.optimizer.ExponentialMovingAverage(0.9, thres_steps=global_steps)
        ema.update()
    return main, startup, test_program, y_predict, ema


def test_exponential_moving_average_matches_paddle():
    """EMA updated after minimize: after training, apply() gives paddle.static.ExponentialMovingAverage's
    parameters, and restore() brings the trained ones back bit for bit; applying twice gives the
    same average."""
    main, startup, test_program, y_predict, ema = _ema_program(thres=False)

    def paddle_ema():
        e = paddle.static.ExponentialMovingAverage(0.9)
        e.update()
        return e

    pmain, pstartup, pema = _paddle_regression(lambda: paddle.optimizer.Adam(learning_rate=0.05), paddle_ema)
    exe, scope = fluid.Executor(), fluid.Scope()
    pexe, pscope = paddle.static.Executor(paddle.CPUPlace()), paddle.static.Scope()
    exe.run(startup, scope=scope)
    feeds = _feeds(8, seed=1)
    with paddle.static.scope_guard(pscope), fluid.scope_guard(scope):
        pexe.run(pstartup)
        _sync(scope, pscope, PARAMS)
        for feed in feeds:
            exe.run(main, feed=feed, scope=scope)
            pexe.run(pmain, feed=feed)
        trained = {n: _get(scope, n) for n in PARAMS}
        for n in PARAMS:
            np.testing.assert_allclose(trained[n], np.array(pscope.find_var(n).get_tensor()), rtol=1e-5, atol=1e-7)
        with ema.apply(exe), pema.apply(pexe):
            for n in PARAMS:
                averaged = _get(scope, n)
                np.testing.assert_allclose(averaged, np.array(pscope.find_var(n).get_tensor()), rtol=1e-5,
                                           atol=1e-7, err_msg=n)
                assert not np.allclose(averaged, trained[n])
            (pred,) = exe.run(test_program, feed=feeds[0], fetch_list=[y_predict], scope=scope)
            assert np.isfinite(pred).all()
        for n in PARAMS:
            np.testing.assert_array_equal(_get(scope, n), trained[n])
        with ema.apply(exe, need_restore=False):
            once = {n: _get(scope, n) for n in PARAMS}
        ema.restore(exe)
        with ema.apply(exe):
            for n in PARAMS:
                np.testing.assert_array_equal(_get(scope, n), once[n])
        for n in PARAMS:
            np.testing.assert_array_equal(_get(scope, n), trained[n])


def test_exponential_moving_average_thres_steps():
    """thres_steps schedules the decay, min(decay, (1 + t) / (10 + t)) (NumPy: Paddle 2.6.2's own
    EMA fails to build with thres_steps)."""
    main, startup, _, _, ema = _ema_program(thres=True)
    exe, scope = fluid.Executor(), fluid.Scope()
    exe.run(startup, scope=scope)
    averages = {n: np.zeros_like(_get(scope, n), dtype=np.float64) for n in PARAMS}
    decay = 0.9
    feeds = _feeds(5, seed=7)
    with fluid.scope_guard(scope):
        for t, feed in enumerate(feeds, start=1):
            exe.run(main, feed=feed, scope=scope)
            decay = min(0.9, (1 + t) / (10 + t))
            for n in PARAMS:
                averages[n] = decay * averages[n] + (1 - decay) * _get(scope, n)
        np.testing.assert_allclose(_value(_get(scope, "scheduled_ema_decay_rate")), decay, rtol=1e-6)
        with ema.apply(exe):
            for n in PARAMS:
                np.testing.assert_allclose(_get(scope, n), averages[n] / (1 - decay ** len(feeds)), rtol=1e-4,
                                           atol=1e-6, err_msg=n)


def test_model_average_matches_paddle():
    """ModelAverage built after minimize: average_accumulates in place in the training program;
    apply() gives paddle.incubate.ModelAverage's averages; restore() the trained values exactly."""
    main, startup, guard = _program()
    with fluid.unique_name.guard(), guard:
        x = fluid.layers.data(name="x", shape=[4], dtype="float32")
        y = fluid.layers.data(name="y", shape=[1], dtype="float32")
        hidden = fluid.layers.fc(input=x, size=3, act="tanh")
        y_predict = fluid.layers.fc(input=hidden, size=1, act=None)
        avg_cost = fluid.layers.mean(fluid.layers.square_error_cost(input=y_predict, label=y))
        fluid.optimizer.Momentum(learning_rate=0.1, momentum=0.5).minimize(avg_cost)
        model_average = fluid.optimizer.ModelAverage(0.3, min_average_window=2, max_average_window=4)
    acc_ops = [op for op in main.global_block().ops if op.type == "average_accumulates"]
    assert len(acc_ops) == 4 and all(op.input("in_sum_1") == op.output("out_sum_1") for op in acc_ops)

    pmain, pstartup, pavg = _paddle_regression(
        lambda: paddle.optimizer.Momentum(learning_rate=0.1, momentum=0.5),
        lambda: paddle.incubate.ModelAverage(0.3, min_average_window=2, max_average_window=4))
    exe, scope = fluid.Executor(), fluid.Scope()
    pexe, pscope = paddle.static.Executor(paddle.CPUPlace()), paddle.static.Scope()
    exe.run(startup, scope=scope)
    with paddle.static.scope_guard(pscope), fluid.scope_guard(scope):
        pexe.run(pstartup)
        _sync(scope, pscope, PARAMS)
        for i, feed in enumerate(_feeds(11, seed=2)):
            exe.run(main, feed=feed, scope=scope)
            pexe.run(pmain, feed=feed)
            trained = {n: _get(scope, n) for n in PARAMS}
            if i in (0, 4, 10):
                with model_average.apply(exe), pavg.apply(pexe):
                    for n in PARAMS:
                        np.testing.assert_allclose(_get(scope, n), np.array(pscope.find_var(n).get_tensor()),
                                                   rtol=1e-5, atol=1e-7, err_msg=f"{n} after step {i}")
                for n in PARAMS:
                    np.testing.assert_array_equal(_get(scope, n), trained[n])


def test_lookahead_matches_numpy():
    """Lookahead over SGD, k=3, alpha=0.4: every third step the slow weights move toward the fast
    ones and the fast ones are reset to them (NumPy); the ops run in Paddle the same."""
    main, startup, _, _ = _regression(
        lambda: fluid.optimizer.LookaheadOptimizer(fluid.optimizer.SGD(learning_rate=0.1), alpha=0.4, k=3))
    exe, scope = fluid.Executor(), fluid.Scope()
    exe.run(startup, scope=scope)
    slow = {n: _get(scope, n) for n in PARAMS}
    for n in PARAMS:
        np.testing.assert_array_equal(_get(scope, n + "@SLOW"), slow[n])
    for step, feed in enumerate(_feeds(7, seed=4), start=1):
        before = {n: _get(scope, n) for n in PARAMS}
        grads = dict(zip(PARAMS, exe.run(main, feed=feed, fetch_list=[n + "@GRAD" for n in PARAMS], scope=scope)))
        for n in PARAMS:
            fast = before[n] - np.float32(0.1) * grads[n]
            if step % 3 == 0:
                slow[n] = np.float32(0.4) * fast + (1 - np.float32(0.4)) * slow[n]
                fast = slow[n]
            np.testing.assert_allclose(_get(scope, n), fast, rtol=1e-5, atol=1e-7, err_msg=f"{n} step {step}")
            np.testing.assert_allclose(_get(scope, n + "@SLOW"), slow[n], rtol=1e-5, atol=1e-7)
    _train_both(main, startup, _feeds(4, seed=6))
