"""Whole models trained in fluidjax and in Paddle 2.6.2 (the oracle).

LeNet (the recognize_digits CNN: conv 20@5x5, relu, max-pool 2, conv 50@5x5, relu, max-pool 2,
fc 10, softmax cross entropy; 1x28x28 images) and a small ResNet (stem conv + batch_norm + relu,
two basic blocks, the second with stride 2 and a 1x1 projection shortcut, global average pool,
fc 10; 3x16x16 images) are built with fluidjax's layer API and with ``paddle.static``. Paddle's
startup program draws the initial parameters; they are copied into fluidjax's scope, matched by
creation order (the two builders may name them differently, so shapes are asserted to match),
batch_norm's moving mean and variance included. Both then train 10 steps with Momentum
(lr 0.01, momentum 0.9) on identical batches: per-step losses agree within 1e-4 (relative), and
the inference clones (``clone(for_test=True)`` taken before ``minimize``) give the same outputs
after training. Paddle also runs our serialized LeNet training program for one step from the same
state and ends with the parameters ours ends with.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

import fluidjax as fj
import paddle_oracle as po
from fluidjax import layer
from fluidjax.frontend import optimizer as fj_optimizer

os.environ.setdefault("GLOG_minloglevel", "2")
import paddle  # noqa: E402
import paddle.nn.functional as F  # noqa: E402

BATCH, STEPS, CLASSES = 16, 10, 10
LR, MOMENTUM = 0.01, 0.9


# -- data ---------------------------------------------------------------------------------------------
def _batches(image_shape, steps=STEPS, batch=BATCH, seed=0):
    """Batches of a learnable task: each class is a fixed random prototype image plus noise. With
    several channels the prototypes also get per-channel offsets, which survive the ResNet's
    global average pooling."""
    rng = np.random.default_rng(seed)
    prototypes = rng.uniform(-1.0, 1.0, (CLASSES, *image_shape))
    if image_shape[0] > 1:
        prototypes = prototypes + rng.normal(0.0, 1.0, (CLASSES, image_shape[0], 1, 1))
    prototypes = prototypes.astype(np.float32)
    out = []
    for _ in range(steps):
        labels = rng.integers(0, CLASSES, (batch, 1)).astype(np.int64)
        noise = rng.normal(0.0, 0.2, (batch, *image_shape)).astype(np.float32)
        out.append({"img": prototypes[labels[:, 0]] + noise, "label": labels})
    return out


# -- the models, once per framework ----------------------------------------------------------------------
def _fj_lenet():
    img = layer.data("img", shape=[1, 28, 28])
    label = layer.data("label", dims=1, dtype="int64")
    h = layer.conv2d(img, num_filters=20, filter_size=5, activation="relu")
    h = layer.pool2d(h, pool_size=2, pool_type="max", pool_stride=2)
    h = layer.conv2d(h, num_filters=50, filter_size=5, activation="relu")
    h = layer.pool2d(h, pool_size=2, pool_type="max", pool_stride=2)
    logits = layer.fc(h, output_size=CLASSES)
    loss = layer.mean(layer.softmax_with_cross_entropy(logits, label))
    return logits, loss


def _pd_lenet():
    img = paddle.static.data("img", [-1, 1, 28, 28], "float32")
    label = paddle.static.data("label", [-1, 1], "int64")
    h = paddle.static.nn.conv2d(img, num_filters=20, filter_size=5, act="relu")
    h = F.max_pool2d(h, kernel_size=2, stride=2)
    h = paddle.static.nn.conv2d(h, num_filters=50, filter_size=5, act="relu")
    h = F.max_pool2d(h, kernel_size=2, stride=2)
    logits = paddle.static.nn.fc(h, size=CLASSES)
    loss = paddle.mean(F.softmax_with_cross_entropy(logits, label))
    return logits, loss


def _fj_conv_bn(x, filters, size, stride=1, relu=True):
    h = layer.conv2d(x, num_filters=filters, filter_size=size, stride=stride, padding=(size - 1) // 2,
                     bias_attr=False)
    return layer.batch_norm(h, activation="relu" if relu else None)


def _pd_conv_bn(x, filters, size, stride=1, relu=True):
    h = paddle.static.nn.conv2d(x, num_filters=filters, filter_size=size, stride=stride, padding=(size - 1) // 2,
                                bias_attr=False)
    return paddle.static.nn.batch_norm(h, act="relu" if relu else None)


def _fj_block(x, filters, stride):
    h = _fj_conv_bn(x, filters, 3, stride)
    h = _fj_conv_bn(h, filters, 3, relu=False)
    shortcut = x if stride == 1 and x.shape[1] == filters else _fj_conv_bn(x, filters, 1, stride, relu=False)
    return layer.elementwise_add(h, shortcut, activation="relu")


def _pd_block(x, filters, stride):
    h = _pd_conv_bn(x, filters, 3, stride)
    h = _pd_conv_bn(h, filters, 3, relu=False)
    shortcut = x if stride == 1 and x.shape[1] == filters else _pd_conv_bn(x, filters, 1, stride, relu=False)
    return F.relu(paddle.add(h, shortcut))


def _fj_resnet():
    img = layer.data("img", shape=[3, 16, 16])
    label = layer.data("label", dims=1, dtype="int64")
    h = _fj_conv_bn(img, 8, 3)
    h = _fj_block(h, 8, 1)
    h = _fj_block(h, 16, 2)
    h = layer.pool2d(h, pool_type="avg", global_pooling=True)
    logits = layer.fc(h, output_size=CLASSES)
    loss = layer.mean(layer.softmax_with_cross_entropy(logits, label))
    return logits, loss


def _pd_resnet():
    img = paddle.static.data("img", [-1, 3, 16, 16], "float32")
    label = paddle.static.data("label", [-1, 1], "int64")
    h = _pd_conv_bn(img, 8, 3)
    h = _pd_block(h, 8, 1)
    h = _pd_block(h, 16, 2)
    h = F.adaptive_avg_pool2d(h, 1)
    logits = paddle.static.nn.fc(h, size=CLASSES)
    loss = paddle.mean(F.softmax_with_cross_entropy(logits, label))
    return logits, loss


MODELS = {"lenet": (_fj_lenet, _pd_lenet, (1, 28, 28)), "resnet": (_fj_resnet, _pd_resnet, (3, 16, 16))}


def build_fluidjax(model: str, optimize: bool = True):
    """(main, test clone taken before minimize, startup, logits, loss)."""
    main, startup = fj.Program(), fj.Program()
    with fj.unique_name.guard(), fj.program_guard(main, startup):
        logits, loss = MODELS[model][0]()
        test = main.clone(for_test=True)
        if optimize:
            fj_optimizer.Momentum(learning_rate=LR, momentum=MOMENTUM).minimize(loss)
    return main, test, startup, logits, loss


def build_paddle(model: str, seed: int = 7):
    main, startup = paddle.static.Program(), paddle.static.Program()
    startup.random_seed = seed   # the initial parameters (the test's reference) are the same every run
    with paddle.utils.unique_name.guard(), paddle.static.program_guard(main, startup):
        logits, loss = MODELS[model][1]()
        test = main.clone(for_test=True)
        paddle.optimizer.Momentum(learning_rate=LR, momentum=MOMENTUM).minimize(loss)
    return main, test, startup, logits, loss


# -- state helpers ---------------------------------------------------------------------------------------
def _fj_get(scope, names):
    return {n: np.asarray(scope.find_var(n).get_tensor()) for n in names}


def _fj_set(scope, values):
    for n, v in values.items():
        scope.var(n).get_tensor().set(np.ascontiguousarray(v))


def _param_map(fj_main, pd_main) -> dict[str, str]:
    """fluidjax parameter name -> Paddle parameter name, by creation order (shapes must agree).
    The parameters include batch_norm's moving mean and variance in both frameworks."""
    ours = fj_main.all_parameters()
    theirs = pd_main.global_block().all_parameters()
    assert len(ours) == len(theirs), ([p.name for p in ours], [p.name for p in theirs])
    mapping = {}
    for a, b in zip(ours, theirs):
        assert tuple(a.shape) == tuple(b.shape), f"{a.name} {a.shape} vs {b.name} {b.shape}"
        mapping[a.name] = b.name
    return mapping


def _train_both(model: str):
    """Train ``model`` STEPS steps in both frameworks from Paddle's initial parameters. Returns the
    per-step losses, the inference outputs after training and the final parameters of both."""
    fj_main, fj_test, fj_startup, fj_logits, fj_loss = build_fluidjax(model)
    pd_main, pd_test, pd_startup, pd_logits, pd_loss = build_paddle(model)
    mapping = _param_map(fj_main, pd_main)
    batches = _batches(MODELS[model][2])
    check = _batches(MODELS[model][2], steps=1, seed=1)[0]

    pd_scope, place = paddle.static.Scope(), paddle.CPUPlace()
    exe = paddle.static.Executor(place)
    with paddle.static.scope_guard(pd_scope):
        exe.run(pd_startup)
        init = po.scope_values(pd_scope, mapping.values())
        pd_losses = [float(exe.run(pd_main, feed=b, fetch_list=[pd_loss])[0]) for b in batches]
        pd_out = exe.run(pd_test, feed=check, fetch_list=[pd_logits, pd_loss])
        pd_final = po.scope_values(pd_scope, mapping.values())

    fj_exe, fj_scope = fj.Executor(), fj.Scope()
    fj_exe.run(fj_startup, scope=fj_scope)
    _fj_set(fj_scope, {ours: init[theirs] for ours, theirs in mapping.items()})
    fj_losses = [float(fj_exe.run(fj_main, feed=b, fetch_list=[fj_loss], scope=fj_scope)[0]) for b in batches]
    fj_out = fj_exe.run(fj_test, feed=check, fetch_list=[fj_logits.name, fj_loss.name], scope=fj_scope)
    fj_final = _fj_get(fj_scope, mapping)
    return (np.array(fj_losses), np.array(pd_losses), fj_out, [np.asarray(o) for o in pd_out],
            {n: (fj_final[n], pd_final[mapping[n]], init[mapping[n]]) for n in mapping})


@pytest.mark.slow
@pytest.mark.parametrize("model", sorted(MODELS))
def test_model_trains_like_paddle(model):
    """10 Momentum steps from identical parameters and batches: the same per-step losses, the same
    parameters and moving statistics after training, the same inference outputs."""
    fj_losses, pd_losses, fj_out, pd_out, params = _train_both(model)
    np.testing.assert_allclose(fj_losses, pd_losses, rtol=1e-4, err_msg=f"{model}: per-step losses")
    assert fj_losses[-3:].mean() < fj_losses[:3].mean(), f"{model} did not learn: {fj_losses}"
    for name, (ours, theirs, init) in params.items():
        scale = max(np.linalg.norm(theirs), 1e-30)
        assert np.linalg.norm(ours - theirs) / scale < 1e-4, f"{model}: {name} after training"
        assert not np.array_equal(theirs, init), f"{model}: {name} did not change"
    # The inference clones (taken before minimize; batch_norm uses the moving statistics).
    np.testing.assert_allclose(fj_out[0], pd_out[0], rtol=1e-4, atol=1e-4, err_msg=f"{model}: inference logits")
    np.testing.assert_allclose(fj_out[1], pd_out[1], rtol=1e-4, err_msg=f"{model}: inference loss")


@pytest.mark.slow
def test_paddle_runs_our_lenet_training_program():
    """Our serialized LeNet training program, parsed by Paddle, takes the step ours takes."""
    main, _, startup, _, loss = build_fluidjax("lenet")
    exe, scope = fj.Executor(), fj.Scope()
    exe.run(startup, scope=scope)
    names = [v.name for v in main.list_vars() if v.persistable]
    # Start from a trained-a-little state, so the velocities are not zero.
    batches = _batches((1, 28, 28), steps=3, seed=2)
    for b in batches[:2]:
        exe.run(main, feed=b, fetch_list=[loss], scope=scope)
    state = _fj_get(scope, names)
    program_bytes = main.serialize()
    (ours_loss,) = exe.run(main, feed=batches[2], fetch_list=[loss], scope=scope)
    ours = _fj_get(scope, names)

    paddle_scope = paddle.static.Scope()
    (ref_loss,) = po.run(program_bytes, batches[2], [loss.name], state, scope=paddle_scope)
    theirs = po.scope_values(paddle_scope, names)
    np.testing.assert_allclose(ours_loss, ref_loss, rtol=1e-5)
    params = [p.name for p in main.all_parameters()]
    assert len(params) == 6
    for n in names:
        ref = theirs[n].reshape(ours[n].shape)
        scale = max(np.linalg.norm(ref), 1e-30)
        assert np.linalg.norm(ours[n] - ref) / scale < 1e-5, n
        np.testing.assert_allclose(ours[n], ref, rtol=1e-4, atol=1e-6, err_msg=n)
    for n in params:
        assert not np.array_equal(ours[n], state[n]), f"{n} was not updated"
