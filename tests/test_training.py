"""Training an MLP, with Paddle 2.6.2 as the oracle.

The same MLP (784-200-10, relu, softmax, cross entropy) is built with ``paddle.static`` and with
fluidjax, given identical initial parameters and trained on identical batches: losses and final
parameters agree for every optimizer, with and without regularization and gradient clipping.
Paddle also runs our serialized training program. Gradients are checked against Paddle and finite
differences; the compiled step has as many matmuls as ``jax.value_and_grad``; parameters are
updated in place (donated); ``clone(for_test=True)`` gives the inference program.
"""

from __future__ import annotations

import os
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fluidjax as fj
import paddle_oracle as po
from fluidjax import layer
from fluidjax.frontend import clip as fj_clip
from fluidjax.frontend import optimizer as fj_optimizer
from fluidjax.frontend import regularizer as fj_regularizer

os.environ.setdefault("GLOG_minloglevel", "2")
import paddle  # noqa: E402

BATCH, STEPS = 32, 20
SIZES = (784, 200, 10)
PARAMS = ("fc_0.w_0", "fc_0.b_0", "fc_1.w_0", "fc_1.b_0")


class _Namespace:
    """The optimizer, regularizer and clip classes of one framework, under Paddle 2.x's names."""

    def __init__(self, optimizer, L1Decay, L2Decay, ClipGradByGlobalNorm, ParamAttr):
        self.optimizer, self.L1Decay, self.L2Decay = optimizer, L1Decay, L2Decay
        self.ClipGradByGlobalNorm, self.ParamAttr = ClipGradByGlobalNorm, ParamAttr


PADDLE = _Namespace(paddle.optimizer, paddle.regularizer.L1Decay, paddle.regularizer.L2Decay,
                    paddle.nn.ClipGradByGlobalNorm, paddle.ParamAttr)
def _our_param_attr(**kwargs):
    # Constant initial values: the tests set the parameters anyway, and a startup program without
    # random ops compiles in a fraction of the time (JAX's threefry RNG is slow to compile on CPU).
    return fj.ParamAttr(initializer=fj.initializer.Constant(0.0), **kwargs)


OURS = _Namespace(fj_optimizer, fj_regularizer.L1Decay, fj_regularizer.L2Decay, fj_clip.ClipGradByGlobalNorm,
                  _our_param_attr)

# name -> (optimizer factory taking (namespace, regularized, extra kwargs), accepts weight_decay).
# The regularized variant also switches on Nesterov momentum and centered RMSProp.
OPTIMIZERS = {
    "sgd": (lambda ns, reg, kw: ns.optimizer.SGD(learning_rate=0.1, **kw), True),
    "momentum": (lambda ns, reg, kw: ns.optimizer.Momentum(learning_rate=0.01, momentum=0.9, use_nesterov=reg,
                                                           **kw), True),
    "adam": (lambda ns, reg, kw: ns.optimizer.Adam(learning_rate=1e-3, **kw), True),
    "adamw": (lambda ns, reg, kw: ns.optimizer.AdamW(learning_rate=1e-3, weight_decay=0.05, **kw), False),
    "adagrad": (lambda ns, reg, kw: ns.optimizer.Adagrad(learning_rate=0.02, **kw), True),
    "rmsprop": (lambda ns, reg, kw: ns.optimizer.RMSProp(learning_rate=1e-3, momentum=0.5 if reg else 0.0,
                                                         centered=reg, **kw), True),
    "adamax": (lambda ns, reg, kw: ns.optimizer.Adamax(learning_rate=2e-3, **kw), True),
    "lamb": (lambda ns, reg, kw: ns.optimizer.Lamb(learning_rate=2e-3, **kw), False),
}


def _make_optimizer(ns: _Namespace, name: str, regularized: bool):
    factory, takes_decay = OPTIMIZERS[name]
    kw = {}
    if regularized:
        kw["grad_clip"] = ns.ClipGradByGlobalNorm(clip_norm=0.5)
        if takes_decay:
            kw["weight_decay"] = ns.L2Decay(1e-3)
    return factory(ns, regularized, kw)


def _param_attrs(ns: _Namespace, regularized: bool):
    """fc weight/bias attrs: the regularized variant gives parameters their own regularizers (which
    win over the optimizer's) and a per-parameter learning rate."""
    if not regularized:
        return [ns.ParamAttr(), ns.ParamAttr()], [ns.ParamAttr(), ns.ParamAttr()]
    return ([ns.ParamAttr(regularizer=ns.L1Decay(1e-4)), ns.ParamAttr()],
            [ns.ParamAttr(regularizer=ns.L2Decay(5e-3)), ns.ParamAttr(learning_rate=0.5)])


def _data(steps=STEPS, batch=BATCH, seed=0):
    """Batches of a learnable task: labels from a fixed random linear teacher."""
    rng = np.random.default_rng(seed)
    teacher = rng.standard_normal((SIZES[0], SIZES[-1]))
    xs = rng.standard_normal((steps, batch, SIZES[0])).astype(np.float32)
    ys = np.argmax(xs @ teacher, axis=-1)[..., None].astype(np.int64)
    return xs, ys


def _initial_params(seed=1):
    rng = np.random.default_rng(seed)
    (a, b), (_, c) = (SIZES[0], SIZES[1]), (SIZES[1], SIZES[2])
    return {"fc_0.w_0": rng.uniform(-0.08, 0.08, (a, b)).astype(np.float32),
            "fc_0.b_0": rng.uniform(-0.1, 0.1, (b,)).astype(np.float32),
            "fc_1.w_0": rng.uniform(-0.17, 0.17, (b, c)).astype(np.float32),
            "fc_1.b_0": rng.uniform(-0.1, 0.1, (c,)).astype(np.float32)}


def build_fluidjax(name: str | None, regularized: bool = False):
    """Our MLP and (unless ``name`` is None) its optimizer; returns (main, startup, cost)."""
    main, startup = fj.Program(), fj.Program()
    with fj.unique_name.guard(), fj.program_guard(main, startup):
        first, second = _param_attrs(OURS, regularized)
        x = layer.data("x", input_size=SIZES[0])
        y = layer.data("y", dims=1, dtype="int64")
        h = layer.fc(x, SIZES[1], activation="relu", param_attr=first[0], bias_attr=first[1])
        p = layer.fc(h, SIZES[2], activation="softmax", param_attr=second[0], bias_attr=second[1])
        cost = layer.mean(layer.cross_entropy(p, y))
        if name is not None:
            _make_optimizer(OURS, name, regularized).minimize(cost)
    return main, startup, cost


def build_paddle(name: str, regularized: bool = False):
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.utils.unique_name.guard(), paddle.static.program_guard(main, startup):
        first, second = _param_attrs(PADDLE, regularized)
        x = paddle.static.data("x", [-1, SIZES[0]], "float32")
        y = paddle.static.data("y", [-1, 1], "int64")
        h = paddle.static.nn.fc(x, SIZES[1], activation="relu", weight_attr=first[0], bias_attr=first[1])
        p = paddle.static.nn.fc(h, SIZES[2], activation="softmax", weight_attr=second[0], bias_attr=second[1])
        cost = paddle.mean(paddle.nn.functional.cross_entropy(p, y, use_softmax=False, reduction="none"))
        _make_optimizer(PADDLE, name, regularized).minimize(cost)
    return main, startup, cost


def _set(scope, values):
    for n, v in values.items():
        scope.var(n).get_tensor().set(v)


def _get(scope, names):
    return {n: np.array(scope.find_var(n).get_tensor()) for n in names}


def train_fluidjax(name, regularized, xs, ys, init, fetch_extra=()):
    main, startup, cost = build_fluidjax(name, regularized)
    exe, scope = fj.Executor(), fj.Scope()
    exe.run(startup, scope=scope)
    _set(scope, init)
    losses, extras = [], []
    for bx, by in zip(xs, ys):
        loss, *extra = exe.run(main, feed={"x": bx, "y": by}, fetch_list=[cost, *fetch_extra], scope=scope)
        losses.append(float(loss))
        extras.append(extra)
    return np.array(losses), _get(scope, PARAMS), extras


def train_paddle(name, regularized, xs, ys, init, fetch_extra=()):
    main, startup, cost = build_paddle(name, regularized)
    scope, place = paddle.static.Scope(), paddle.CPUPlace()
    exe = paddle.static.Executor(place)
    losses, extras = [], []
    with paddle.static.scope_guard(scope):
        exe.run(startup)
        for n, v in init.items():
            scope.find_var(n).get_tensor().set(v, place)
        for bx, by in zip(xs, ys):
            loss, *extra = exe.run(main, feed={"x": bx, "y": by}, fetch_list=[cost, *fetch_extra])
            losses.append(float(loss))
            extras.append(extra)
        params = po.scope_values(scope, PARAMS)
    return np.array(losses), params, extras


def assert_params_close(ours, ref, what, rtol=1e-4):
    """Parameters agree to ``rtol`` as a whole (relative L2 error) and element by element, except for
    a few elements (at most 0.1%, or 5) whose float32 gradient is a sum that nearly cancels: there the two
    systems' different summation orders give different tiny gradients, which sign-normalizing updates
    (Adam's m / sqrt(v), Adagrad's g / sqrt(g²) at the first steps) turn into visibly different steps.
    """
    ours, ref = np.asarray(ours, np.float64), np.asarray(ref, np.float64)
    assert ours.shape == ref.shape, what
    scale = max(np.linalg.norm(ref), 1e-30)
    assert np.linalg.norm(ours - ref) / scale <= rtol, f"{what}: relative L2 error {np.linalg.norm(ours - ref) / scale}"
    off = ~np.isclose(ours, ref, rtol=rtol, atol=1e-6)
    assert off.sum() <= max(5, 1e-3 * off.size), \
        f"{what}: {off.sum()} of {off.size} elements differ by more than rtol={rtol}"


CONFIGS = [(name, reg) for reg in (False, True) for name in OPTIMIZERS]
CONFIG_IDS = [f"{name}{'-l2-clip' if reg else ''}" for name, reg in CONFIGS]
PARSED = [("adam", False), ("momentum", True), ("rmsprop", True), ("adamax", False), ("lamb", True),
          ("adamw", False)]


@pytest.mark.slow
@pytest.mark.parametrize("name,regularized", CONFIGS, ids=CONFIG_IDS)
def test_training_matches_paddle(name, regularized):
    """20 steps, same data and initial parameters: per-step losses and final parameters agree."""
    xs, ys = _data()
    init = _initial_params()
    ours_losses, ours_params, _ = train_fluidjax(name, regularized, xs, ys, init)
    ref_losses, ref_params, _ = train_paddle(name, regularized, xs, ys, init)
    np.testing.assert_allclose(ours_losses, ref_losses, rtol=1e-4, err_msg=f"{name}: per-step losses")
    for n in PARAMS:
        assert_params_close(ours_params[n], ref_params[n], f"{name}: final {n}")
        assert not np.allclose(ours_params[n], init[n]), f"{name}: {n} was not updated"


@pytest.mark.parametrize("name,regularized", PARSED, ids=[f"{n}{'-l2-clip' if r else ''}" for n, r in PARSED])
def test_paddle_runs_our_training_program(name, regularized):
    """Our serialized training program, parsed by Paddle, takes the step ours takes."""
    main, startup, cost = build_fluidjax(name, regularized)
    exe, scope = fj.Executor(), fj.Scope()
    exe.run(startup, scope=scope)
    _set(scope, _initial_params())
    state = _get(scope, [v.name for v in main.list_vars() if v.persistable])
    xs, ys = _data(steps=1)
    feed = {"x": xs[0], "y": ys[0]}
    program_bytes = main.serialize()
    (loss,) = exe.run(main, feed=feed, fetch_list=[cost], scope=scope)
    ours = _get(scope, state)

    paddle_scope = paddle.static.Scope()
    (ref_loss,) = po.run(program_bytes, feed, [cost.name], state, scope=paddle_scope)
    theirs = po.scope_values(paddle_scope, state)
    np.testing.assert_allclose(loss, ref_loss, rtol=1e-5)
    for n in state:
        assert_params_close(ours[n], theirs[n].reshape(ours[n].shape), f"{name}: {n} after one step")
    assert any(not np.array_equal(ours[n], state[n]) for n in PARAMS)


def test_issue_example_with_default_programs():
    """The issue's code on the default programs and the global scope."""
    x = layer.data("x", input_size=SIZES[0])
    y = layer.data("y", dims=1, dtype="int64")
    h = layer.fc(x, SIZES[1], activation="relu")
    cost = layer.mean(layer.cross_entropy(layer.fc(h, SIZES[2], activation="softmax"), y))
    opt = fj.optimizer.Adam(learning_rate=1e-3)
    opt_ops, params_grads = opt.minimize(cost)
    assert [op.type for op in opt_ops] == ["adam"] * 4 and len(params_grads) == 4
    exe = fj.Executor()
    exe.run(fj.default_startup_program())
    scope = fj.global_scope()
    for name in ("learning_rate_0", "fc_0.w_0_moment1_0", "fc_0.w_0_moment2_0", "fc_0.w_0_beta1_pow_acc_0",
                 "fc_0.w_0_beta2_pow_acc_0"):
        assert scope.find_var(name) is not None, name
    assert float(np.asarray(scope.find_var("fc_0.w_0_beta1_pow_acc_0").get_tensor())[0]) == np.float32(0.9)
    xs, ys = _data(steps=3)
    losses = []
    for bx, by in zip(xs, ys):
        loss, gw = exe.run(feed={"x": bx, "y": by}, fetch_list=[cost, "fc_0.w_0@GRAD"])
        assert gw.shape == (SIZES[0], SIZES[1]) and np.abs(gw).sum() > 0
        losses.append(float(loss))
    beta1_pow = np.asarray(scope.find_var("fc_0.w_0_beta1_pow_acc_0").get_tensor())
    np.testing.assert_allclose(beta1_pow, [np.float32(0.9) ** 4], rtol=1e-6)


def test_issue_example_fetches_gradients_like_paddle():
    """The issue's flow: minimize, run the startup program, fetch the loss and fc_0.w_0@GRAD."""
    xs, ys = _data(steps=2)
    init = _initial_params()
    ours_losses, _, ours_extra = train_fluidjax("adam", False, xs, ys, init, fetch_extra=["fc_0.w_0@GRAD"])
    ref_losses, _, ref_extra = train_paddle("adam", False, xs, ys, init, fetch_extra=["fc_0.w_0@GRAD"])
    np.testing.assert_allclose(ours_losses, ref_losses, rtol=1e-5)
    for (ours,), (ref,) in zip(ours_extra, ref_extra):
        assert ours.shape == (SIZES[0], SIZES[1])
        np.testing.assert_allclose(ours, ref, rtol=1e-4, atol=1e-7)


def test_gradients_agree_with_finite_differences_in_float64():
    """A small float64 MLP: fetched ``@GRAD`` values equal central differences of the loss
    (evaluated with the inference clone, which shares the parameters)."""
    main, startup = fj.Program(), fj.Program()
    with fj.unique_name.guard(), fj.program_guard(main, startup):
        x = layer.data("x", input_size=5, dtype="float64")
        y = layer.data("y", dims=1, dtype="int64")
        h = layer.fc(x, 4, activation="tanh")
        p = layer.fc(h, 3, activation="softmax")
        cost = layer.mean(layer.cross_entropy(p, y))
        test_program = main.clone(for_test=True)
        fj_optimizer.SGD(learning_rate=0.1).minimize(cost)
    exe, scope = fj.Executor(), fj.Scope()
    exe.run(startup, scope=scope)
    rng = np.random.default_rng(5)
    feed = {"x": rng.standard_normal((6, 5)), "y": rng.integers(0, 3, (6, 1))}
    params = _get(scope, PARAMS)
    grads = exe.run(main, feed=feed, fetch_list=[n + "@GRAD" for n in PARAMS], scope=scope)

    def loss_at(values):
        _set(scope, values)
        (value,) = exe.run(test_program, feed=feed, fetch_list=[cost.name], scope=scope)
        return float(value)

    eps = 1e-6
    for name, grad in zip(PARAMS, grads):
        assert grad.dtype == np.float64 and grad.shape == params[name].shape
        for flat in range(0, params[name].size, 3):
            idx = np.unravel_index(flat, params[name].shape)
            plus, minus = dict(params), dict(params)
            plus[name] = params[name].copy()
            plus[name][idx] += eps
            minus[name] = params[name].copy()
            minus[name][idx] -= eps
            numeric = (loss_at(plus) - loss_at(minus)) / (2 * eps)
            np.testing.assert_allclose(grad[idx], numeric, rtol=1e-6, atol=1e-9, err_msg=f"d loss / d {name}{idx}")


def test_training_step_updates_state_in_place():
    """Parameters and accumulators are donated: after a step the old buffers are gone."""
    main, startup, cost = build_fluidjax("adam")
    exe, scope = fj.Executor(), fj.Scope()
    exe.run(startup, scope=scope)
    xs, ys = _data(steps=2)
    exe.run(main, feed={"x": xs[0], "y": ys[0]}, fetch_list=[cost], scope=scope)
    names = ["fc_0.w_0", "fc_0.w_0_moment1_0", "fc_0.w_0_moment2_0"]
    before = {n: scope.find_var(n).get_tensor().value() for n in names}
    # The beta powers (one element each) are held in one array for the step (FLAGS_pack_small_state):
    # that array is donated; the variable reads its value out of it.
    pows = scope.find_var("fc_0.w_0_beta1_pow_acc_0").get_tensor()
    assert pows._pack is not None
    before["the packed one-element state"] = pows._pack._value
    assert all(isinstance(v, jax.Array) for v in before.values())
    exe.run(main, feed={"x": xs[1], "y": ys[1]}, fetch_list=[cost], scope=scope)
    assert before.pop("the packed one-element state").is_deleted() and not pows.value().is_deleted()
    for n, old in before.items():
        assert old.is_deleted(), f"{n}: the pre-step buffer is still alive (not donated)"
        assert not scope.find_var(n).get_tensor().value().is_deleted()
    # The learning rate is only read: never donated.
    assert not scope.find_var("learning_rate_0").get_tensor().value().is_deleted()


def test_clone_for_test_drops_training_ops():
    """A trained program's inference clone: forward ops only, ``is_test`` set, same predictions."""
    main, startup = fj.Program(), fj.Program()
    with fj.unique_name.guard(), fj.program_guard(main, startup):
        x = layer.data("x", input_size=SIZES[0])
        y = layer.data("y", dims=1, dtype="int64")
        h = layer.fc(x, 32, activation="relu")
        block = main.global_block()
        dropped = block.create_var("dropped", h.shape, h.dtype)
        mask = block.create_var("dropout_mask", h.shape, "uint8", stop_gradient=True)
        block.append_op("dropout", {"X": h}, {"Out": dropped, "Mask": mask},
                        {"dropout_prob": 0.5, "dropout_implementation": "upscale_in_train"})
        p = layer.fc(dropped, SIZES[2], activation="softmax")
        cost = layer.mean(layer.cross_entropy(p, y))
        fj_optimizer.Adam(learning_rate=1e-3, grad_clip=fj_clip.ClipGradByGlobalNorm(1.0)).minimize(cost)
    exe, scope = fj.Executor(), fj.Scope()
    exe.run(startup, scope=scope)
    xs, ys = _data(steps=3)
    for bx, by in zip(xs, ys):
        exe.run(main, feed={"x": bx, "y": by}, fetch_list=[cost], scope=scope)
    test_program = main.clone(for_test=True)
    roles = {int(op.attr("op_role")) for op in test_program.global_block().ops}
    assert not roles & {1, 2, 16}, roles
    types = [op.type for op in test_program.global_block().ops]
    assert not any(t.endswith("_grad") or t in ("adam", "squared_l2_norm") for t in types), types
    assert [op.attr("is_test") for op in test_program.global_block().ops if op.type == "dropout"] == [True]
    params = _get(scope, [v.name for v in main.list_vars() if v.persistable])
    feed = {"x": xs[0], "y": ys[0]}
    first = exe.run(test_program, feed=feed, fetch_list=[cost.name, p.name], scope=scope)
    second = exe.run(test_program, feed=feed, fetch_list=[cost.name, p.name], scope=scope)
    for a, b in zip(first, second):
        np.testing.assert_array_equal(a, b)   # deterministic: dropout is off
    after = _get(scope, params)
    assert all(np.array_equal(after[n], params[n]) for n in params)   # nothing trained
    # Paddle agrees on the inference program's output.
    (ref,) = po.run(test_program.serialize(), feed, [p.name], params)
    np.testing.assert_allclose(first[1], ref, rtol=1e-5, atol=1e-7)


def _count_dots(hlo_text: str) -> int:
    return len(re.findall(r"\bdot\(", hlo_text))


def test_training_step_compiles_to_as_many_matmuls_as_value_and_grad():
    """Our whole step (forward, backward, Adam) against jax.value_and_grad of the same MLP plus the
    same update: the compiled HLO holds the same number of dot ops."""
    main, startup, cost = build_fluidjax("adam")
    exe, scope = fj.Executor(), fj.Scope()
    exe.run(startup, scope=scope)
    xs, ys = _data(steps=1, batch=16)
    feed = {"x": xs[0], "y": ys[0]}
    ours = exe.lower(main, feed, [cost], scope).compile().as_text()  # what exe.run(main, feed, [cost]) runs

    def loss_fn(params, x, y):
        h = jax.nn.relu(x @ params["w0"] + params["b0"])
        prob = jax.nn.softmax(h @ params["w1"] + params["b1"])
        return -jnp.mean(jnp.log(jnp.take_along_axis(prob, y, axis=1)))

    def adam_step(params, m1, m2, t, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        m1 = jax.tree.map(lambda m, g: 0.9 * m + 0.1 * g, m1, grads)
        m2 = jax.tree.map(lambda m, g: 0.999 * m + 0.001 * g * g, m2, grads)
        lr = 1e-3 * jnp.sqrt(1 - 0.999 ** t) / (1 - 0.9 ** t)
        params = jax.tree.map(lambda p, a, b: p - lr * a / (jnp.sqrt(b) + 1e-8), params, m1, m2)
        return params, m1, m2, loss

    init = {k: jnp.zeros(s, jnp.float32) for k, s in (("w0", SIZES[:2]), ("b0", SIZES[1:2]), ("w1", SIZES[1:]),
                                                       ("b1", SIZES[2:]))}
    theirs = jax.jit(adam_step, donate_argnums=(0, 1, 2)).lower(
        init, init, init, jnp.float32(1), jnp.asarray(feed["x"]), jnp.asarray(feed["y"])).compile().as_text()
    assert _count_dots(theirs) == 5   # two forward matmuls; dW0, dW1 and dh backward
    assert _count_dots(ours) == _count_dots(theirs)
