"""fj.passes: conv+batch_norm folding and the NHWC layout pass give the unpassed program's and
Paddle's results (1e-5), remove every batch_norm, and leave the training state alone."""

import os

import numpy as np
import pytest

import fluidjax as fj
import fluidjax.io as fio
from fluidjax import layer
from fluidjax import passes

os.environ.setdefault("GLOG_minloglevel", "2")
import paddle  # noqa: E402  (after fluidjax: the other order segfaults)
import paddle_oracle  # noqa: E402


def _rel_err(got, want):
    return float(np.max(np.abs(np.asarray(got, np.float64) - want)) / (np.max(np.abs(want)) + 1e-30))


def _op_types(program):
    return [op.type for op in program.global_block().ops]


_randomize_bn = paddle_oracle.randomize_batch_norms


class _SmallCNN(paddle.nn.Layer):
    """conv(+bias) → bn → relu → pool → depthwise conv → bn → relu6, a residual add, a 1×1 conv
    → bn, global pool, fc."""

    def __init__(self):
        super().__init__()
        nn = paddle.nn
        self.conv1, self.bn1 = nn.Conv2D(3, 8, 3, padding=1), nn.BatchNorm2D(8)
        self.dw, self.bn2 = nn.Conv2D(8, 8, 3, padding=1, groups=8, bias_attr=False), nn.BatchNorm2D(8)
        self.pw, self.bn3 = nn.Conv2D(8, 6, 1, bias_attr=False), nn.BatchNorm2D(6)
        self.fc = nn.Linear(6, 5)

    def forward(self, x):
        y = paddle.nn.functional.max_pool2d(paddle.nn.functional.relu(self.bn1(self.conv1(x))), 2)
        y = y + paddle.nn.functional.relu6(self.bn2(self.dw(y)))
        y = self.bn3(self.pw(y))
        y = paddle.nn.functional.adaptive_avg_pool2d(y, 1).flatten(1)
        return self.fc(y)


_save = paddle_oracle.save_image_model


_paddle_run = paddle_oracle.run_inference_model


def _check_model(prefix, xs, convs_with_bn):
    want = _paddle_run(prefix, xs)
    scope = fj.Scope()
    exe = fj.Executor()
    plain, feeds, fetches = fio.load_inference_model(prefix, scope=scope)
    fast, feeds2, fetches2 = fio.load_inference_model(prefix, scope=fj.Scope(), optimize=True)
    assert feeds == feeds2 and [v.name for v in fetches] == [v.name for v in fetches2]
    assert "batch_norm" not in _op_types(fast)
    assert _op_types(plain).count("batch_norm") == convs_with_bn
    # NHWC: every conv runs channel-last; transposes only at the chain's edges.
    convs = [op for op in fast.global_block().ops if op.type in ("conv2d", "depthwise_conv2d")]
    assert convs and all(op.attr("data_format") == "NHWC" for op in convs)
    block = fast.global_block()
    image_transposes = [op for op in block.ops if op.type == "transpose2"
                        and not block.var(op.input("X")[0]).persistable]
    assert len(image_transposes) <= 3
    # Every conv filter wider than 1x1 (depthwise ones too) is an HWIO parameter turned back to OIHW.
    for op in convs:
        source = [o for o in block.ops if op.input("Filter")[0] in o.output_arg_names]
        wide = block.var(op.input("Filter")[0]).shape[2:] != (1, 1)
        if wide:                                 # depthwise filters too (docs/inference.md)
            assert len(source) == 1 and source[0].type == "transpose2" and source[0].attr("axis") == [3, 2, 0, 1]
            assert block.var(source[0].input("X")[0]).persistable
        else:
            assert not source
    assert "reshape2" not in _op_types(fast)  # the conv biases' reshapes went with the fold
    base, = exe.run(plain, feed={feeds[0]: xs}, fetch_list=fetches, scope=scope)
    fast_scope = fj.Scope()
    fast, _, _ = fio.load_inference_model(prefix, scope=fast_scope, optimize=True)
    got, = exe.run(fast, feed={feeds[0]: xs}, fetch_list=fetches2, scope=fast_scope)
    assert _rel_err(base, want) < 1e-5
    assert _rel_err(got, base) < 1e-5
    assert _rel_err(got, want) < 1e-5
    # The optimized program is still a Paddle program: Paddle runs it with its new parameters.
    import paddle_oracle as po

    paddle.enable_static()
    try:
        theirs = po.run(fast.serialize(), {feeds[0]: xs}, [v.name for v in fetches2],
                        po.persistable_values(fast, fast_scope))
    finally:
        paddle.disable_static()
    assert _rel_err(theirs[0], want) < 1e-5


def test_small_cnn_with_random_bn_folds_and_matches_paddle(tmp_path):
    paddle.disable_static()
    paddle.seed(3)
    model = _SmallCNN()
    _randomize_bn(model, 1)
    prefix = str(tmp_path / "cnn")
    _save(model, prefix, 16)
    xs = np.random.default_rng(0).standard_normal((3, 3, 16, 16)).astype(np.float32)
    _check_model(prefix, xs, convs_with_bn=3)
    _check_model(prefix, xs[:1], convs_with_bn=3)


def test_resnet18_folds_and_matches_paddle(tmp_path):
    paddle.disable_static()
    paddle.seed(4)
    model = paddle.vision.models.resnet18(num_classes=10)
    _randomize_bn(model, 2)
    prefix = str(tmp_path / "resnet18")
    _save(model, prefix, 32)
    xs = np.random.default_rng(1).standard_normal((2, 3, 32, 32)).astype(np.float32)
    _check_model(prefix, xs, convs_with_bn=20)


def test_each_pass_alone_is_exact_and_the_input_program_is_unchanged(tmp_path):
    paddle.disable_static()
    paddle.seed(5)
    model = _SmallCNN()
    _randomize_bn(model, 3)
    prefix = str(tmp_path / "cnn")
    _save(model, prefix, 8)
    scope = fj.Scope()
    program, feeds, fetches = fio.load_inference_model(prefix, scope=scope)
    before = program.serialize()
    xs = np.random.default_rng(2).standard_normal((2, 3, 8, 8)).astype(np.float32)
    exe = fj.Executor()
    base, = exe.run(program, feed={feeds[0]: xs}, fetch_list=fetches, scope=scope)
    folded = passes.optimize_inference(program, scope, layout=None)
    nhwc = passes.optimize_inference(program, scope, fold=False)
    assert program.serialize() == before
    assert "batch_norm" not in _op_types(folded) and "transpose2" not in _op_types(folded)
    assert _op_types(nhwc).count("batch_norm") == 3
    assert all(op.attr("data_layout") == "NHWC" for op in nhwc.global_block().ops if op.type == "batch_norm")
    for prog in (folded, nhwc):
        got, = exe.run(prog, feed={feeds[0]: xs}, fetch_list=fetches, scope=scope)
        assert _rel_err(got, base) < 1e-5


def test_keep_preserves_an_intermediate_in_nchw(tmp_path):
    paddle.disable_static()
    paddle.seed(6)
    model = _SmallCNN()
    _randomize_bn(model, 4)
    prefix = str(tmp_path / "cnn")
    _save(model, prefix, 8)
    scope = fj.Scope()
    program, feeds, fetches = fio.load_inference_model(prefix, scope=scope)
    relu = next(op for op in program.global_block().ops if op.type == "relu").output("Out")[0]
    xs = np.random.default_rng(3).standard_normal((2, 3, 8, 8)).astype(np.float32)
    exe = fj.Executor()
    want, = exe.run(program, feed={feeds[0]: xs}, fetch_list=[relu], scope=scope)
    fast = passes.optimize_inference(program, scope, keep=[relu])
    got, = exe.run(fast, feed={feeds[0]: xs}, fetch_list=[relu], scope=scope)
    assert got.shape == want.shape == (2, 8, 8, 8)
    assert _rel_err(got, want) < 1e-5


def _fj_cnn():
    img = layer.data("img", shape=[3, 8, 8])
    label = layer.data("label", shape=[1], dtype="int64")
    conv = layer.conv2d(img, num_filters=4, filter_size=3, padding=1)        # with its bias add
    bn = layer.batch_norm(conv, activation="relu")
    conv2 = layer.conv2d(bn, num_filters=4, filter_size=3, padding=1, bias_attr=False)
    bn2 = layer.batch_norm(conv2)
    pool = layer.pool2d(bn2, pool_size=2, pool_stride=2)
    prob = layer.fc(pool, output_size=5, activation="softmax")
    loss = layer.mean(layer.cross_entropy(prob, label))
    fj.optimizer.Adam(learning_rate=0.01).minimize(loss)
    return prob, loss


def _persistables(program, scope):
    return {v.name: np.array(scope.find_var(v.name).get_tensor().numpy()) for v in program.list_vars()
            if v.persistable and scope.find_var(v.name) is not None
            and scope.find_var(v.name).get_tensor()._is_initialized()}


def test_training_program_sharing_the_scope_is_unaffected():
    prob, loss = _fj_cnn()
    main = fj.default_main_program()
    exe = fj.Executor()
    exe.run(fj.default_startup_program())
    rng = np.random.default_rng(7)

    def batch():
        return {"img": rng.standard_normal((4, 3, 8, 8)).astype(np.float32),
                "label": rng.integers(0, 5, (4, 1)).astype(np.int64)}

    for _ in range(3):  # moving statistics away from (0, 1)
        exe.run(main, feed=batch(), fetch_list=[loss])
    main_bytes = main.serialize()
    state = _persistables(main, fj.global_scope())
    test = main.clone(for_test=True)
    fast = passes.optimize_inference(test)
    assert "batch_norm" not in _op_types(fast) and "batch_norm" in _op_types(test)
    # The scope's parameters and statistics, and the training program, are as they were.
    assert main.serialize() == main_bytes
    after = _persistables(main, fj.global_scope())
    assert state.keys() == after.keys()
    for name in state:
        np.testing.assert_array_equal(after[name], state[name], err_msg=name)
    xs = batch()
    want, = exe.run(test, feed={"img": xs["img"]}, fetch_list=[prob.name])
    got, = exe.run(fast, feed={"img": xs["img"]}, fetch_list=[prob.name])
    assert _rel_err(got, want) < 1e-5
    # Training goes on with the original parameters; re-optimizing picks up the new statistics.
    exe.run(main, feed=batch(), fetch_list=[loss])
    want2, = exe.run(test, feed={"img": xs["img"]}, fetch_list=[prob.name])
    assert _rel_err(want2, want) > 1e-6
    got2, = exe.run(passes.optimize_inference(test), feed={"img": xs["img"]}, fetch_list=[prob.name])
    assert _rel_err(got2, want2) < 1e-5


def test_layout_argument_is_checked():
    with pytest.raises(ValueError, match="layout"):
        passes.optimize_inference(fj.Program(), fj.Scope(), layout="NCWH")


@pytest.mark.parametrize("fmt,strides,paddings,dilations,algo", [
    ("NCHW", [2, 2], [1, 1], [1, 1], "EXPLICIT"),
    ("NHWC", [1, 2], [0, 1, 2, 1], [2, 1], "EXPLICIT"),
    ("NCHW", [2, 1], [0, 0], [1, 1], "SAME"),
    ("NHWC", [1, 1], [0, 0], [1, 1], "VALID"),
])
def test_depthwise_conv_by_shifts_matches_paddle(fmt, strides, paddings, dilations, algo):
    """depthwise_conv2d (one filter per channel) is lowered as shifted slices times weights, not as
    XLA's grouped convolution; Paddle's kernel is the oracle, with its gradients through JAX."""
    rng = np.random.default_rng(8)
    c = 5
    x = rng.standard_normal((2, c, 9, 10) if fmt == "NCHW" else (2, 9, 10, c)).astype(np.float32)
    w = rng.standard_normal((c, 1, 3, 3)).astype(np.float32)
    prog = fj.Program()
    block = prog.global_block()
    block.create_var("x", x.shape, "float32")
    block.create_var("w", w.shape, "float32", persistable=True)
    block.create_var("y", (), "float32")
    block.append_op("depthwise_conv2d", {"Input": ["x"], "Filter": ["w"]}, {"Output": ["y"]},
                    {"groups": c, "strides": strides, "paddings": paddings, "dilations": dilations,
                     "padding_algorithm": algo, "data_format": fmt})
    scope = fj.Scope()
    scope.var("w").get_tensor().set(w)
    got, = fj.Executor().run(prog, feed={"x": x}, fetch_list=["y"], scope=scope)
    paddle.disable_static()
    pad = algo if algo != "EXPLICIT" else (paddings if len(paddings) == 2 else
                                             [[0, 0], [0, 0], paddings[:2], paddings[2:]] if fmt == "NCHW"
                                             else [[0, 0], paddings[:2], paddings[2:], [0, 0]])
    want = paddle.nn.functional.conv2d(paddle.to_tensor(x), paddle.to_tensor(w), stride=strides, padding=pad,
                                       dilation=dilations, groups=c, data_format=fmt).numpy()
    assert got.shape == want.shape
    assert _rel_err(got, want) < 1e-5


@pytest.mark.parametrize("fmt,strides", [("NCHW", [1, 1]), ("NHWC", [2, 2]), ("NCHW", [2, 1])])
def test_pointwise_conv_by_dot_matches_paddle(fmt, strides):
    """conv2d with a 1×1 filter and no padding is lowered as a matrix product over channels."""
    rng = np.random.default_rng(9)
    x = rng.standard_normal((2, 6, 7, 9) if fmt == "NCHW" else (2, 7, 9, 6)).astype(np.float32)
    w = rng.standard_normal((4, 6, 1, 1)).astype(np.float32)
    prog = fj.Program()
    block = prog.global_block()
    block.create_var("x", x.shape, "float32")
    block.create_var("w", w.shape, "float32", persistable=True)
    block.create_var("y", (), "float32")
    block.append_op("conv2d", {"Input": ["x"], "Filter": ["w"]}, {"Output": ["y"]},
                    {"strides": strides, "paddings": [0, 0], "data_format": fmt})
    scope = fj.Scope()
    scope.var("w").get_tensor().set(w)
    got, = fj.Executor().run(prog, feed={"x": x}, fetch_list=["y"], scope=scope)
    paddle.disable_static()
    want = paddle.nn.functional.conv2d(paddle.to_tensor(x), paddle.to_tensor(w), stride=strides,
                                       data_format=fmt).numpy()
    assert got.shape == want.shape
    assert _rel_err(got, want) < 1e-5


def test_filters_hwio_moves_only_what_it_may():
    """A filter shared by two channel-last 3x3 convs moves once (one transpose2 before the first);
    a 1x1 filter, a filter named in ``keep`` and the filter of an NCHW conv stay OIHW; the scope's
    original values are untouched; the result equals the unmoved program's."""
    main, startup = fj.Program(), fj.Program()
    startup.random_seed = 7
    with fj.program_guard(main, startup):
        x = layer.data("x", shape=[6, 6, 4])
        shared = fj.ParamAttr(name="shared_w")
        a = layer.conv2d(x, 4, 3, padding=1, param_attr=shared, bias_attr=False, data_format="NHWC")
        b = layer.conv2d(a, 4, 3, padding=1, param_attr=shared, bias_attr=False, data_format="NHWC")
        c = layer.conv2d(b, 5, 1, param_attr=fj.ParamAttr(name="one_w"), bias_attr=False, data_format="NHWC")
        d = layer.conv2d(c, 3, 3, param_attr=fj.ParamAttr(name="kept_w"), bias_attr=False, data_format="NHWC")
        e = layer.conv2d(layer.transpose(d, [0, 3, 1, 2]), 2, 3, param_attr=fj.ParamAttr(name="nchw_w"),
                         bias_attr=False)
    scope, exe = fj.Scope(), fj.Executor()
    exe.run(startup, scope=scope)
    originals = {n: np.asarray(scope.find_var(n).get_tensor()).copy() for n in ("shared_w", "one_w", "kept_w", "nchw_w")}
    xs = np.random.default_rng(0).standard_normal((2, 6, 6, 4)).astype(np.float32)
    want, = exe.run(main, feed={"x": xs}, fetch_list=[e], scope=scope)
    moved = main.clone()
    assert passes.filters_hwio(moved, scope, keep=["kept_w"]) == 1
    block = moved.global_block()
    transposes = [op for op in block.ops if op.type == "transpose2" and op.input("X")[0].startswith("shared_w")]
    assert len(transposes) == 1 and block.ops.index(transposes[0]) < block.ops.index(
        next(op for op in block.ops if op.type == "conv2d"))
    filters = [op.input("Filter")[0] for op in block.ops if op.type == "conv2d"]
    assert filters[0] == filters[1] == transposes[0].output("Out")[0]
    assert filters[2:] == ["one_w", "kept_w", "nchw_w"]
    assert block.find_var("shared_w") is None          # no op reads it any more: not saved again
    hwio = np.asarray(scope.find_var(transposes[0].input("X")[0]).get_tensor())
    np.testing.assert_array_equal(hwio, originals["shared_w"].transpose(2, 3, 1, 0))
    for name, value in originals.items():
        np.testing.assert_array_equal(np.asarray(scope.find_var(name).get_tensor()), value)
    got, = exe.run(moved, feed={"x": xs}, fetch_list=[e.name], scope=scope)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
