"""Backward programs Paddle writes, for grad ops whose slots differ from fluidjax's own.

Paddle's grad op makers leave forward inputs out (``transpose2_grad`` reads ``XShape``,
``softmax_with_cross_entropy_grad`` reads ``Softmax``, ``instance_norm_grad`` has no ``Bias``);
``lowering/paddle_grads.py`` gives those their rules. Each case builds a program with Paddle's
Python API and Paddle's own ``gradients``, parses it in fluidjax and compares the gradients with
Paddle's run. The last tests train Paddle-built programs (Paddle's ``minimize``, Adam) in fluidjax
and compare the losses step by step.
"""

import numpy as np
import pytest

import fluidjax as fj

RNG = np.random.default_rng(11)


def _x(*shape):
    return RNG.normal(size=shape).astype("float32")


def _cases():
    import paddle
    import paddle.nn.functional as F

    def data(name, arr, grad=True):
        v = paddle.static.data(name, list(arr.shape), str(arr.dtype))
        v.stop_gradient = not grad
        return v

    x4 = _x(2, 8, 4, 6)
    labels = RNG.integers(0, 5, (6, 1)).astype("int64")
    labels_ignored = labels.copy()
    labels_ignored[2] = 3
    soft = RNG.dirichlet(np.ones(5), 6).astype("float32")
    return {
        "transpose2": ({"x": x4}, lambda d: paddle.transpose(d["x"], [0, 3, 1, 2])),
        "transpose2-neg": ({"x": x4}, lambda d: paddle.transpose(d["x"], [-1, 0, 2, 1])),
        "reshape2": ({"x": x4}, lambda d: paddle.reshape(d["x"], [-1, 12])),
        "squeeze2": ({"x": _x(3, 1, 4, 1)}, lambda d: paddle.squeeze(d["x"], [1])),
        "unsqueeze2": ({"x": _x(3, 4)}, lambda d: paddle.unsqueeze(d["x"], [0, 2])),
        "flatten_contiguous_range": ({"x": x4}, lambda d: paddle.flatten(d["x"], 1, 2)),
        "softmax_with_cross_entropy": (
            {"x": _x(6, 5), "l": labels}, lambda d: F.softmax_with_cross_entropy(d["x"], d["l"])),
        "softmax_with_cross_entropy-ignore": (
            {"x": _x(6, 5), "l": labels_ignored},
            lambda d: F.softmax_with_cross_entropy(d["x"], d["l"], ignore_index=3)),
        "softmax_with_cross_entropy-soft": (
            {"x": _x(6, 5), "l": soft}, lambda d: F.softmax_with_cross_entropy(d["x"], d["l"], soft_label=True)),
        "softmax_with_cross_entropy-axis": (
            {"x": _x(6, 5, 3), "l": RNG.integers(0, 5, (6, 1, 3)).astype("int64")},
            lambda d: F.softmax_with_cross_entropy(d["x"], d["l"], axis=1)),
        "cross_entropy-no_softmax": (
            {"x": RNG.uniform(0.1, 1, (6, 5)).astype("float32"), "l": labels},
            lambda d: F.cross_entropy(d["x"], d["l"], use_softmax=False, reduction="none")),
        "pixel_shuffle": ({"x": x4}, lambda d: F.pixel_shuffle(d["x"], 2)),
        "pixel_unshuffle": ({"x": x4}, lambda d: F.pixel_unshuffle(d["x"], 2)),
        "channel_shuffle": ({"x": x4}, lambda d: F.channel_shuffle(d["x"], 2)),
        "label_smooth": ({"x": soft}, lambda d: F.label_smooth(d["x"], epsilon=0.2)),
        "tril": ({"x": _x(4, 4)}, lambda d: paddle.tril(d["x"], -1)),
        "floor": ({"x": _x(4, 4)}, lambda d: paddle.floor(d["x"]) + d["x"]),
        "expm1": ({"x": _x(4, 4)}, lambda d: paddle.expm1(d["x"])),
        "unstack": ({"x": _x(3, 4, 2)}, lambda d: paddle.unstack(d["x"], axis=1)[1]),
        "scatter": ({"x": _x(5, 3), "u": _x(2, 3), "i": np.array([3, 1], "int64")},
                    lambda d: paddle.scatter(d["x"], d["i"], d["u"])),
        "einsum": ({"x": _x(2, 3, 4), "y": _x(2, 4, 5)}, lambda d: paddle.einsum("bij,bjk->bik", d["x"], d["y"])),
        "meshgrid": ({"x": _x(3), "y": _x(4)}, lambda d: paddle.meshgrid(d["x"], d["y"])[0] * 2
                     + paddle.meshgrid(d["x"], d["y"])[1]),
        "instance_norm": ({"x": x4}, lambda d: paddle.nn.InstanceNorm2D(8)(d["x"])),
        "dropout-p0": ({"x": _x(4, 6)}, lambda d: F.dropout(d["x"], 0.0)),
        "dropout-infer": ({"x": _x(4, 6)}, lambda d: F.dropout(d["x"], 0.3, training=False)),
        "batch_norm-train": ({"x": x4}, lambda d: paddle.static.nn.batch_norm(d["x"])),
        "set_value": ({"x": _x(4, 5), "v": _x(4, 2)}, _set_value),
        "layer_norm": ({"x": _x(3, 4, 6)}, lambda d: paddle.nn.LayerNorm(6)(d["x"])),
        "embedding": ({"x": _x(2, 3), "i": RNG.integers(0, 10, (2, 3)).astype("int64")},
                      lambda d: paddle.nn.Embedding(10, 3)(d["i"]) * d["x"].unsqueeze(-1)),
    }, data


def _set_value(d):
    import paddle

    return paddle.static.setitem(d["x"] * 1.0, (slice(None), slice(1, 3)), d["v"] * 2.0)


CASE_NAMES = ["transpose2", "transpose2-neg", "reshape2", "squeeze2", "unsqueeze2", "flatten_contiguous_range",
              "softmax_with_cross_entropy", "softmax_with_cross_entropy-ignore", "softmax_with_cross_entropy-soft",
              "softmax_with_cross_entropy-axis", "cross_entropy-no_softmax", "pixel_shuffle", "pixel_unshuffle",
              "channel_shuffle", "label_smooth", "tril", "floor", "expm1", "unstack", "scatter", "einsum",
              "meshgrid", "instance_norm", "dropout-p0", "dropout-infer", "batch_norm-train", "set_value",
              "layer_norm", "embedding"]


@pytest.mark.parametrize("name", CASE_NAMES)
def test_paddle_grad_op_runs_with_paddles_gradient(name):
    names, ours, theirs = gradients_in_both(name)
    for g, a, e in zip(names, ours, theirs):
        np.testing.assert_allclose(a, e, rtol=1e-4, atol=1e-5, err_msg=f"{name}: {g}")


def gradients_in_both(name):
    """Case ``name`` built by Paddle with its ``gradients``: (gradient names, fluidjax's, Paddle's).
    (``benchmarks/paddle_grad_coverage.py`` runs these cases too.)"""
    import paddle

    paddle.enable_static()
    cases, data = _cases()
    feed, build = cases[name]
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup):
        d = {k: data(k, v, grad=v.dtype.kind == "f" and k not in ("l",)) for k, v in feed.items()}
        y = build(d)
        w = paddle.static.data("w", list(y.shape), "float32")
        loss = paddle.mean(y * w)
        wrt = [d[k] for k in feed if not d[k].stop_gradient]
        grads = paddle.static.gradients([loss], wrt)
    exe = paddle.static.Executor(paddle.CPUPlace())
    exe.run(startup)
    scope = paddle.static.global_scope()
    params = {p.name: np.array(scope.find_var(p.name).get_tensor()) for p in main.all_parameters()}
    params.update({v.name: np.array(scope.find_var(v.name).get_tensor()) for v in main.list_vars()
                   if v.persistable and scope.find_var(v.name) is not None and v.name not in params
                   and scope.find_var(v.name).get_tensor()._is_initialized()})
    wv = RNG.uniform(0.5, 1.5, tuple(y.shape)).astype("float32")     # every shape here is known
    full = {**feed, "w": wv}
    theirs = exe.run(main, feed=full, fetch_list=[g.name for g in grads])

    program = fj.Program.parse(main.desc.serialize_to_string())
    fj_scope = fj.Scope()
    for pname, value in params.items():
        fj_scope.var(pname).get_tensor().set(value, fj.CPUPlace())
    ours = fj.Executor().run(program, feed=full, fetch_list=[g.name for g in grads], scope=fj_scope)
    return [g.name for g in grads], ours, theirs


@pytest.mark.parametrize("mode", ["upscale_in_train", "downscale_in_infer"])
def test_paddle_dropout_grad_scales_by_fluidjax_mask(mode):
    """Paddle's ``dropout_grad`` (``Mask``, ``Out@GRAD``) with p = 0.4: each system draws its own
    mask, so the oracle is NumPy: X@GRAD = Out@GRAD * Mask (/ (1 - p) when upscaling in train)."""
    import paddle

    paddle.enable_static()
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup):
        x = paddle.static.data("x", [6, 50], "float32")
        x.stop_gradient = False
        y = paddle.nn.functional.dropout(x, 0.4, mode=mode)
        w = paddle.static.data("w", [6, 50], "float32")
        loss = paddle.sum(y * w)
        grad, = paddle.static.gradients([loss], [x])
    mask = next(op.output("Mask")[0] for op in main.global_block().ops if op.type == "dropout")
    feed = {"x": _x(6, 50), "w": _x(6, 50)}
    program = fj.Program.parse(main.desc.serialize_to_string())
    ours, m = fj.Executor().run(program, feed=feed, fetch_list=[grad.name, mask], scope=fj.Scope())
    m = np.asarray(m).astype("float32")
    assert 0.2 < 1 - m.mean() < 0.6                                    # about p = 0.4 of it dropped
    scale = 1 / 0.6 if mode == "upscale_in_train" else 1.0
    np.testing.assert_allclose(ours, feed["w"] * m * scale, rtol=1e-6, atol=1e-6)



def _encoder_model():
    import paddle

    x = paddle.static.data("x", [4, 6, 16], "float32")
    label = paddle.static.data("label", [4, 1], "int64")
    layer = paddle.nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0)
    h = layer(x)
    pooled = paddle.mean(paddle.reshape(paddle.transpose(h, [1, 0, 2]), [6, 4, 16]), axis=0)
    logits = paddle.nn.Linear(16, 3)(pooled)
    loss = paddle.mean(paddle.nn.functional.softmax_with_cross_entropy(logits, label))
    feeds = lambda rng: {"x": rng.normal(size=(4, 6, 16)).astype("float32"),  # noqa: E731
                         "label": rng.integers(0, 3, (4, 1)).astype("int64")}
    return loss, feeds


def _cnn_model():
    import paddle
    import paddle.nn.functional as F

    x = paddle.static.data("x", [4, 3, 8, 8], "float32")
    label = paddle.static.data("label", [4, 1], "int64")
    h = paddle.nn.Conv2D(3, 6, 3, padding=1)(x)
    h = F.relu(paddle.nn.BatchNorm2D(6)(h))
    h = F.dropout(F.max_pool2d(h, 2), 0.0)
    h = paddle.flatten(h, 1)
    logits = paddle.nn.Linear(6 * 4 * 4, 5)(h)
    loss = F.cross_entropy(logits, label)
    feeds = lambda rng: {"x": rng.normal(size=(4, 3, 8, 8)).astype("float32"),  # noqa: E731
                         "label": rng.integers(0, 5, (4, 1)).astype("int64")}
    return loss, feeds


def _text_cnn_model():
    import paddle
    import paddle.nn.functional as F

    ids = paddle.static.data("ids", [4, 7], "int64")
    e = paddle.nn.Embedding(20, 8, padding_idx=0)(ids)
    h = F.gelu(paddle.nn.Conv1D(8, 6, 3)(paddle.transpose(e, [0, 2, 1])))
    h = paddle.squeeze(paddle.nn.GroupNorm(2, 6)(paddle.unsqueeze(h, [2])), [2])
    h = F.leaky_relu(paddle.max(h, axis=-1))
    loss = paddle.mean(paddle.square(h - 0.5))
    feeds = lambda rng: {"ids": rng.integers(0, 20, (4, 7)).astype("int64")}  # noqa: E731
    return loss, feeds


def _depthwise_interp_model():
    import paddle
    import paddle.nn.functional as F

    x = paddle.static.data("x", [2, 4, 8, 8], "float32")
    label = paddle.static.data("label", [2, 1], "int64")
    h = paddle.nn.Conv2D(4, 4, 3, padding=1, groups=4)(x)
    h = F.hardswish(paddle.nn.BatchNorm2D(4)(h))
    h = F.adaptive_avg_pool2d(F.interpolate(h, scale_factor=2, mode="bilinear"), 1)
    h = paddle.concat([paddle.flatten(h, 1), paddle.flatten(F.avg_pool2d(x, 2), 1)[:, :4]], 1)
    logits = paddle.nn.Linear(8, 3)(h)
    loss = F.cross_entropy(logits, label) + paddle.mean(F.sigmoid(logits).sum(-1))
    feeds = lambda rng: {"x": rng.normal(size=(2, 4, 8, 8)).astype("float32"),  # noqa: E731
                         "label": rng.integers(0, 3, (2, 1)).astype("int64")}
    return loss, feeds


def _lstm_model():
    import paddle

    x = paddle.static.data("x", [4, 5, 8], "float32")
    y = paddle.nn.LSTM(8, 6, num_layers=2, direction="bidirect")(x)[0]
    loss = paddle.mean(paddle.square(y - 0.1))
    feeds = lambda rng: {"x": rng.normal(size=(4, 5, 8)).astype("float32")}  # noqa: E731
    return loss, feeds


@pytest.mark.parametrize("model", [_encoder_model, _cnn_model, _text_cnn_model, _depthwise_interp_model, _lstm_model],
                         ids=["transformer_encoder", "cnn_batch_norm", "text_cnn", "depthwise_interp", "lstm"])
def test_paddle_built_training_program_trains_like_paddle(model):
    """Paddle's ``minimize`` (its backward and Adam) parsed by fluidjax: 5 steps, Paddle's losses."""
    import paddle

    paddle.enable_static()
    paddle.seed(5)
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup):
        loss, make_feed = model()
        # epsilon 1e-4: the key bias's gradient is 0 up to rounding (softmax ignores a constant per
        # query), and Adam with a tiny epsilon would blow that rounding noise up to full steps.
        paddle.optimizer.Adam(learning_rate=0.01, epsilon=1e-4).minimize(loss)
    scope = paddle.static.Scope()
    exe = paddle.static.Executor(paddle.CPUPlace())
    with paddle.static.scope_guard(scope):
        exe.run(startup)
    state = {v.name: np.array(scope.find_var(v.name).get_tensor()) for v in main.list_vars()
             if v.persistable and scope.find_var(v.name) is not None
             and scope.find_var(v.name).get_tensor()._is_initialized()}

    program = fj.Program.parse(main.desc.serialize_to_string())
    fj_scope = fj.Scope()
    for name, value in state.items():
        fj_scope.var(name).get_tensor().set(value, fj.CPUPlace())
    ours_exe = fj.Executor()
    rng = np.random.default_rng(2)
    feed = make_feed(rng)                            # one batch, fitted: the loss must fall
    theirs, ours = [], []
    for _ in range(5):
        with paddle.static.scope_guard(scope):
            theirs.append(float(exe.run(main, feed=feed, fetch_list=[loss.name])[0]))
        ours.append(float(np.asarray(ours_exe.run(program, feed=feed, fetch_list=[loss.name], scope=fj_scope)[0])))
    np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-5)
    assert theirs[-1] < theirs[0]
    # The whole training state after 5 steps (parameters, Adam moments and beta powers, batch
    # norm's running statistics) equals Paddle's; except the buffers Paddle's coalesce_tensor fuses
    # the LSTM weights into: in Paddle they alias the weights, in fluidjax they are separate copies
    # that no op of the main program reads.
    fused = {n for op in startup.global_block().ops if op.type == "coalesce_tensor" for n in op.output("FusedOutput")}
    for name in set(state) - fused:
        np.testing.assert_allclose(np.asarray(fj_scope.find_var(name).get_tensor()),
                                   np.array(scope.find_var(name).get_tensor()), rtol=2e-3, atol=1e-4,
                                   err_msg=name)
    # And back: Paddle, started from fluidjax's state, takes the next step as fluidjax does.
    handed = paddle.static.Scope()
    with paddle.static.scope_guard(handed):
        for name in state:
            handed.var(name).get_tensor().set(np.asarray(fj_scope.find_var(name).get_tensor()), paddle.CPUPlace())
        next_theirs = [float(exe.run(main, feed=feed, fetch_list=[loss.name])[0]) for _ in range(2)]
    next_ours = [float(np.asarray(ours_exe.run(program, feed=feed, fetch_list=[loss.name], scope=fj_scope)[0]))
                 for _ in range(2)]
    np.testing.assert_allclose(next_ours, next_theirs, rtol=1e-4, atol=1e-5)


def test_paddle_shuffle_channel_grad_runs_with_the_exact_gradient():
    """``shuffle_channel_grad`` (Paddle writes only ``Out@GRAD``) runs; Paddle's own kernel is off for
    group 2 of 6 channels (see tests/optable/extra_cases.py), so the oracle is NumPy: the inverse
    shuffle of ``Out@GRAD``."""
    import paddle

    paddle.enable_static()
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup):
        x = paddle.static.data("x", [2, 6, 2, 3], "float32")
        x.stop_gradient = False
        w = paddle.static.data("w", [2, 6, 2, 3], "float32")
        block = main.global_block()
        out = block.create_var(name="shuffled", dtype="float32", shape=[2, 6, 2, 3])
        block.append_op(type="shuffle_channel", inputs={"X": [x]}, outputs={"Out": [out]}, attrs={"group": 2})
        loss = paddle.sum(out * w)
        grad, = paddle.static.gradients([loss], [x])
    assert "shuffle_channel_grad" in [op.type for op in block.ops]
    feed = {"x": _x(2, 6, 2, 3), "w": _x(2, 6, 2, 3)}
    program = fj.Program.parse(main.desc.serialize_to_string())
    ours, = fj.Executor().run(program, feed=feed, fetch_list=[grad.name], scope=fj.Scope())
    # Out[:, j*2 + i] = X[:, i*3 + j] (group 2, 3 channels per group): X@GRAD is W un-shuffled.
    expected = feed["w"].reshape(2, 3, 2, 2, 3).swapaxes(1, 2).reshape(2, 6, 2, 3)
    np.testing.assert_allclose(ours, expected, rtol=1e-6)
