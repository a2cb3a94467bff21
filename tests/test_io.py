"""fj.io against Paddle 2.6.2, both directions: the tensor stream byte for byte, inference models
(static save_inference_model, jit.save, Fluid 1.x directories) and persistables with optimizer state."""

import os

import numpy as np
import pytest

import fluidjax as fj
import fluidjax.io as fio
from fluidjax import layer
from fluidjax.frontend.io import tensor_stream as ts

import paddle  # noqa: E402  (after fluidjax: the other order segfaults)

paddle.enable_static()


def _pexe():
    return paddle.static.Executor(paddle.CPUPlace())


def _rng(seed=0):
    return np.random.default_rng(seed)


# -- the tensor stream -----------------------------------------------------------------------------
_ARRAYS = {
    "a_f32": _rng().standard_normal((3, 4)).astype(np.float32),
    "b_f64": _rng(1).standard_normal((2, 2, 2)),
    "c_i64": np.arange(-3, 7, dtype=np.int64),
    "d_i32": np.arange(6, dtype=np.int32).reshape(2, 3),
    "e_bool": np.array([True, False, True]),
    "f_f16": np.linspace(-2, 2, 5).astype(np.float16),
    "g_u8": np.arange(4, dtype=np.uint8),
    "h_i8": np.arange(-2, 2, dtype=np.int8),
    "i_scalar": np.array(2.5, np.float32),
    "j_empty": np.zeros((0, 3), np.float32),
}


def _paddle_save_combine(path, arrays, lods=None):
    """Paddle's save_combine op writes ``arrays`` (sorted by name) to ``path``."""
    lods = lods or {}
    prog = paddle.static.Program()
    block = prog.global_block()
    names = sorted(arrays)
    vars_ = [block.create_var(name=n, shape=arrays[n].shape, dtype=arrays[n].dtype, persistable=True)
             for n in names]
    raw = block.create_var(name="saved_params", type=paddle.framework.core.VarDesc.VarType.RAW, persistable=True)
    block.append_op(type="save_combine", inputs={"X": vars_}, outputs={"Y": raw}, attrs={"file_path": path})
    scope = paddle.static.Scope()
    for n in names:
        t = scope.var(n).get_tensor()
        t.set(arrays[n], paddle.CPUPlace())
        if n in lods:
            t.set_lod(lods[n])
    with paddle.static.scope_guard(scope):
        _pexe().run(prog)


def _paddle_load_combine(path, specs):
    prog = paddle.static.Program()
    block = prog.global_block()
    names = sorted(specs)
    vars_ = [block.create_var(name=n, shape=specs[n][0], dtype=specs[n][1], persistable=True) for n in names]
    block.append_op(type="load_combine", inputs={}, outputs={"Out": vars_}, attrs={"file_path": path})
    scope = paddle.static.Scope()
    with paddle.static.scope_guard(scope):
        _pexe().run(prog)
    return {n: (np.array(scope.find_var(n).get_tensor()), scope.find_var(n).get_tensor().lod()) for n in names}


def test_tensor_stream_is_paddles_byte_for_byte(tmp_path):
    lods = {"a_f32": [[0, 1, 3]]}
    theirs = str(tmp_path / "paddle.bin")
    _paddle_save_combine(theirs, _ARRAYS, lods)
    data = open(theirs, "rb").read()
    ours = b"".join(ts.tensor_to_bytes(_ARRAYS[n], lods.get(n, ())) for n in sorted(_ARRAYS))
    assert ours == data
    with open(theirs, "rb") as f:
        reader = ts.TensorReader(f, theirs, len(data))
        for name in sorted(_ARRAYS):
            array, lod = reader.read_tensor(name)
            assert array.dtype == _ARRAYS[name].dtype and array.shape == _ARRAYS[name].shape
            np.testing.assert_array_equal(array, _ARRAYS[name])
            assert lod == lods.get(name, [])
        assert reader.at_end()


def test_paddle_load_combine_reads_our_stream(tmp_path):
    path = str(tmp_path / "ours.bin")
    with open(path, "wb") as f:
        for name in sorted(_ARRAYS):
            ts.write_tensor(f, _ARRAYS[name], [[0, 2, 3]] if name == "c_i64" else [])
    back = _paddle_load_combine(path, {n: (a.shape, a.dtype) for n, a in _ARRAYS.items()})
    for name, array in _ARRAYS.items():
        np.testing.assert_array_equal(back[name][0], array)
        assert back[name][0].dtype == array.dtype
    assert back["c_i64"][1] == [[0, 2, 3]]


# -- models ----------------------------------------------------------------------------------------
def _fj_cnn():
    """A small CNN built with fluidjax (conv, batch norm, pool, fc, softmax), trained one step."""
    img = layer.data("img", shape=[1, 8, 8])
    label = layer.data("label", shape=[1], dtype="int64")
    conv = layer.conv2d(img, num_filters=4, filter_size=3, padding=1)
    bn = layer.batch_norm(conv, activation="relu")
    pool = layer.pool2d(bn, pool_size=2, pool_stride=2)
    prob = layer.fc(pool, output_size=5, activation="softmax")
    loss = layer.mean(layer.cross_entropy(prob, label))
    fj.optimizer.Adam(learning_rate=0.01).minimize(loss)
    return img, label, prob, loss


def _train_fj(img, label, loss, steps=2, seed=0):
    exe = fj.Executor()
    exe.run(fj.default_startup_program())
    rng = _rng(seed)
    for _ in range(steps):
        exe.run(feed={"img": rng.random((4, 1, 8, 8), dtype=np.float32),
                      "label": rng.integers(0, 5, (4, 1)).astype(np.int64)}, fetch_list=[loss])
    return exe


def test_paddle_loads_our_inference_model_and_computes_the_same(tmp_path):
    img, label, prob, loss = _fj_cnn()
    exe = _train_fj(img, label, loss)
    prefix = str(tmp_path / "cnn" / "inference")
    fio.save_inference_model(prefix, [img], [prob], exe)
    # (and the manifest that keeps the two one save: frontend/io/atomic.py)
    assert sorted(os.listdir(tmp_path / "cnn")) == [".fluidjax_manifest", "inference.pdiparams", "inference.pdmodel"]
    xs = _rng(5).random((3, 1, 8, 8), dtype=np.float32)
    test_prog = fj.default_main_program().clone(for_test=True)
    want, = exe.run(test_prog, feed={"img": xs}, fetch_list=[prob.name])
    program, feeds, fetches = paddle.static.load_inference_model(prefix, _pexe())
    assert feeds == ["img"] and [v.name for v in fetches] == ["save_infer_model/scale_0.tmp_0"]
    got, = _pexe().run(program, feed={"img": xs}, fetch_list=fetches)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_our_inference_model_matches_paddles_own_save(tmp_path):
    """Paddle's save_inference_model of the same program and weights: same ops, variables and
    parameters file, byte for byte."""
    img, label, prob, loss = _fj_cnn()
    exe = _train_fj(img, label, loss)
    ours = str(tmp_path / "ours" / "m")
    fio.save_inference_model(ours, [img], [prob], exe)
    main = paddle.static.Program.parse_from_string(fj.default_main_program().serialize())
    scope = paddle.static.Scope()
    for var in fj.default_main_program().list_vars():
        if var.persistable and var.type == 7:
            scope.var(var.name).get_tensor().set(np.asarray(fj.global_scope().find_var(var.name).get_tensor()),
                                                 paddle.CPUPlace())
    theirs = str(tmp_path / "theirs" / "m")
    with paddle.static.scope_guard(scope):
        block = main.global_block()
        paddle.static.save_inference_model(theirs, [block.var("img")], [block.var(prob.name)], _pexe(), program=main)
    assert open(ours + ".pdiparams", "rb").read() == open(theirs + ".pdiparams", "rb").read()
    from fluidjax.proto import framework_pb2 as pb

    a, b = pb.ProgramDesc(), pb.ProgramDesc()
    a.ParseFromString(open(ours + ".pdmodel", "rb").read())
    b.ParseFromString(open(theirs + ".pdmodel", "rb").read())
    assert [o.type for o in a.blocks[0].ops] == [o.type for o in b.blocks[0].ops]
    assert sorted(v.name for v in a.blocks[0].vars) == sorted(v.name for v in b.blocks[0].vars)
    types = lambda d: {v.name: (v.type.type, v.persistable, v.is_parameter, v.stop_gradient)  # noqa: E731
                       for v in d.blocks[0].vars}
    assert types(a) == types(b)
    assert a.version.version == b.version.version
    assert {(p.op_name, p.op_version.version) for p in a.op_version_map.pair} == \
        {(p.op_name, p.op_version.version) for p in b.op_version_map.pair}
    for oa, ob in zip(a.blocks[0].ops, b.blocks[0].ops):
        if oa.type in ("feed", "fetch"):      # the same, but for Paddle's Python call stack
            for op in (oa, ob):
                next(a for a in op.attrs if a.name == "op_callstack").ClearField("strings")
            assert oa == ob


def _paddle_static_cnn():
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup):
        x = paddle.static.data("x", [-1, 3, 8, 8], "float32")
        h = paddle.static.nn.conv2d(x, 4, 3, padding=1)
        h = paddle.static.nn.batch_norm(h, act="relu", is_test=True)
        h = paddle.nn.functional.max_pool2d(h, 2, 2)
        h = paddle.flatten(h, 1)
        y = paddle.nn.functional.softmax(paddle.static.nn.fc(h, 6))
    return main, startup, x, y


def test_we_load_paddles_static_inference_model(tmp_path):
    main, startup, x, y = _paddle_static_cnn()
    scope = paddle.static.Scope()
    prefix = str(tmp_path / "p" / "model")
    xs = _rng(2).random((5, 3, 8, 8), dtype=np.float32)
    with paddle.static.scope_guard(scope):
        exe = _pexe()
        exe.run(startup)
        paddle.static.save_inference_model(prefix, [x], [y], exe, program=main)
        prog, feeds, fetches = paddle.static.load_inference_model(prefix, exe)
        want = {n: exe.run(prog, feed={"x": xs[:n]}, fetch_list=fetches)[0] for n in (1, 5)}
    program, feeds, fetches = fio.load_inference_model(prefix, fj.Executor())
    assert feeds == ["x"]
    for n, expected in want.items():
        got, = fj.Executor().run(program, feed={"x": xs[:n]}, fetch_list=fetches)
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-6)


class _Mlp(paddle.nn.Layer):
    def __init__(self):
        super().__init__()
        self.fc1 = paddle.nn.Linear(6, 12)
        self.fc2 = paddle.nn.Linear(12, 3)

    def forward(self, x):
        return paddle.nn.functional.softmax(self.fc2(paddle.nn.functional.relu(self.fc1(x))))


class _Cnn(paddle.nn.Layer):
    def __init__(self):
        super().__init__()
        self.conv = paddle.nn.Conv2D(3, 4, 3, padding=1)
        self.bn = paddle.nn.BatchNorm2D(4)
        self.fc = paddle.nn.Linear(4 * 4 * 4, 5)

    def forward(self, x):
        h = paddle.nn.functional.max_pool2d(paddle.nn.functional.relu(self.bn(self.conv(x))), 2)
        return self.fc(paddle.flatten(h, 1))


@pytest.mark.parametrize("net,shape", [(_Mlp, (6,)), (_Cnn, (3, 8, 8))], ids=["mlp", "cnn"])
def test_we_load_what_paddle_jit_save_writes(tmp_path, net, shape):
    prefix = str(tmp_path / "jit" / "net")
    xs = _rng(3).random((4,) + shape, dtype=np.float32)
    paddle.disable_static()
    try:
        paddle.seed(7)
        layer_ = net()
        layer_.eval()
        want = {n: layer_(paddle.to_tensor(xs[:n])).numpy() for n in (1, 4)}
        paddle.jit.save(layer_, prefix, input_spec=[paddle.static.InputSpec([None] + list(shape), "float32", "x")])
    finally:
        paddle.enable_static()
    assert os.path.exists(prefix + ".pdiparams.info")   # a pickle: never opened
    program, feeds, fetches = fio.load_inference_model(prefix, fj.Executor())
    assert feeds == ["x"]
    for n, expected in want.items():
        got, = fj.Executor().run(program, feed={"x": xs[:n]}, fetch_list=fetches)
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("combined", [False, True], ids=["per-file", "combined"])
def test_we_load_fluid_1x_directories(tmp_path, combined):
    main, startup, x, y = _paddle_static_cnn()
    scope = paddle.static.Scope()
    prefix = str(tmp_path / "tmp" / "m")
    xs = _rng(4).random((2, 3, 8, 8), dtype=np.float32)
    folder = str(tmp_path / "fluid1")
    with paddle.static.scope_guard(scope):
        exe = _pexe()
        exe.run(startup)
        paddle.static.save_inference_model(prefix, [x], [y], exe, program=main)
        prog, _, fetches = paddle.static.load_inference_model(prefix, exe)
        want, = exe.run(prog, feed={"x": xs}, fetch_list=fetches)
        os.makedirs(folder)
        with open(os.path.join(folder, "__model__"), "wb") as f:
            f.write(open(prefix + ".pdmodel", "rb").read())
        paddle.static.save_vars(exe, folder, prog, predicate=paddle.static.io.is_persistable,
                                filename="__params__" if combined else None)
    names = sorted(os.listdir(folder))
    assert ("__params__" in names) == combined and len(names) == (2 if combined else 1 + 8)
    program, feeds, fetches = fio.load_inference_model(folder, fj.Executor())
    got, = fj.Executor().run(program, feed={"x": xs}, fetch_list=fetches)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)


def test_executor_runs_a_program_with_feed_and_fetch_ops(tmp_path):
    img, label, prob, loss = _fj_cnn()
    exe = _train_fj(img, label, loss)
    prefix = str(tmp_path / "m")
    fio.save_inference_model(prefix, [img], [prob], exe)
    program, feeds, fetches = fio.load_inference_model(prefix, exe, scope=fj.Scope())
    scope = fj.Scope()
    fio.load_inference_model(prefix, exe, scope=scope)
    xs = _rng(9).random((2, 1, 8, 8), dtype=np.float32)
    by_list, = exe.run(program, feed={"img": xs}, fetch_list=fetches, scope=scope)
    by_ops, = exe.run(program, feed={"img": xs}, scope=scope)       # the fetch ops say what
    want, = exe.run(fj.default_main_program().clone(for_test=True), feed={"img": xs}, fetch_list=[prob])
    np.testing.assert_array_equal(by_list, by_ops)
    np.testing.assert_allclose(by_list, want, rtol=1e-6)


# -- persistables: a training run moves between the two systems -------------------------------------
def _fj_mlp_training():
    x = layer.data("x", shape=[6])
    y = layer.data("y", shape=[1])
    h = layer.fc(x, output_size=8, activation="tanh")
    pred = layer.fc(h, output_size=1)
    loss = layer.mean(layer.square_error_cost(pred, y))
    fj.optimizer.Adam(learning_rate=0.05).minimize(loss)
    return loss


def _batches(n, seed=11):
    rng = _rng(seed)
    return [{"x": rng.random((5, 6), dtype=np.float32), "y": rng.random((5, 1), dtype=np.float32)}
            for _ in range(n)]


def _paddle_train(main_bytes, dirname, filename, batches, loss_name, save_to=None):
    """Paddle loads the persistables, trains on ``batches``, returns losses (and saves its state)."""
    main = paddle.static.Program.parse_from_string(main_bytes)
    scope = paddle.static.Scope()
    with paddle.static.scope_guard(scope):
        exe = _pexe()
        paddle.static.load_vars(exe, dirname, main, predicate=paddle.static.io.is_persistable, filename=filename)
        losses = [float(exe.run(main, feed=b, fetch_list=[loss_name])[0]) for b in batches]
        if save_to is not None:
            paddle.static.save_vars(exe, save_to, main, predicate=paddle.static.io.is_persistable,
                                    filename=filename)
        state = {v.name: np.array(scope.find_var(v.name).get_tensor()) for v in main.list_vars()
                 if paddle.static.io.is_persistable(v)}
    return losses, state


@pytest.mark.parametrize("filename", [None, "state.bin"], ids=["per-file", "combined"])
def test_training_moves_to_paddle_and_back_with_optimizer_state(tmp_path, filename):
    loss = _fj_mlp_training()
    main = fj.default_main_program()
    exe = fj.Executor()
    exe.run(fj.default_startup_program())
    batches = _batches(9)
    for b in batches[:3]:
        exe.run(feed=b, fetch_list=[loss])
    ours = str(tmp_path / "ours")
    fio.save_persistables(exe, ours, filename=filename)
    saved = set(os.listdir(ours))
    if filename is None:
        assert {"learning_rate_0", "fc_0.w_0_moment1_0", "fc_0.w_0_beta1_pow_acc_0"} <= saved
    # Paddle continues from our checkpoint exactly as we continue ourselves.
    theirs = str(tmp_path / "theirs")
    paddle_losses, _ = _paddle_train(main.serialize(), ours, filename, batches[3:6], loss.name, save_to=theirs)
    our_losses = [float(exe.run(feed=b, fetch_list=[loss])[0]) for b in batches[3:6]]
    np.testing.assert_allclose(our_losses, paddle_losses, rtol=1e-5)
    # And back: we continue from Paddle's checkpoint as Paddle continues itself.
    scope = fj.Scope()
    fio.load_persistables(exe, theirs, filename=filename, scope=scope)
    ours_after = [float(exe.run(feed=b, fetch_list=[loss], scope=scope)[0]) for b in batches[6:]]
    paddle_after, paddle_state = _paddle_train(main.serialize(), theirs, filename, batches[6:], loss.name)
    np.testing.assert_allclose(ours_after, paddle_after, rtol=1e-5)
    assert {"fc_0.w_0_moment2_0", "fc_0.w_0_beta2_pow_acc_0", "learning_rate_0"} <= set(paddle_state)
    for name, value in paddle_state.items():
        np.testing.assert_allclose(np.asarray(scope.find_var(name).get_tensor()), value, rtol=1e-5, atol=1e-7)


def test_save_params_saves_parameters_only(tmp_path):
    _fj_mlp_training()
    exe = fj.Executor()
    exe.run(fj.default_startup_program())
    fio.save_params(exe, str(tmp_path))
    assert sorted(os.listdir(tmp_path)) == [".fluidjax_manifest", "fc_0.b_0", "fc_0.w_0", "fc_1.b_0", "fc_1.w_0"]
    scope = fj.Scope()
    fio.load_params(exe, str(tmp_path), scope=scope)
    np.testing.assert_array_equal(np.asarray(scope.find_var("fc_1.w_0").get_tensor()),
                                  np.asarray(fj.global_scope().find_var("fc_1.w_0").get_tensor()))
    assert scope.find_var("learning_rate_0") is None
    # Paddle's load_vars with its is_parameter predicate reads the same files.
    main = paddle.static.Program.parse_from_string(fj.default_main_program().serialize())
    pscope = paddle.static.Scope()
    with paddle.static.scope_guard(pscope):
        paddle.static.load_vars(_pexe(), str(tmp_path), main, predicate=paddle.static.io.is_parameter)
    for name in ("fc_0.w_0", "fc_1.b_0"):
        np.testing.assert_array_equal(np.array(pscope.find_var(name).get_tensor()),
                                      np.asarray(fj.global_scope().find_var(name).get_tensor()))


# -- checks before anything runs ---------------------------------------------------------------------
def test_unimplemented_ops_are_listed_in_one_error_before_running(tmp_path):
    img, label, prob, loss = _fj_cnn()
    exe = _train_fj(img, label, loss)
    prefix = str(tmp_path / "m")
    fio.save_inference_model(prefix, [img], [prob], exe)
    from fluidjax.proto import framework_pb2 as pb

    desc = pb.ProgramDesc()
    desc.ParseFromString(open(prefix + ".pdmodel", "rb").read())
    desc.blocks[0].ops[1].type = "no_such_op_a"
    desc.blocks[0].ops[2].type = "no_such_op_b"
    open(prefix + ".pdmodel", "wb").write(desc.SerializeToString())
    with pytest.raises(fj.UnregisteredOpError, match="no_such_op_a.*no_such_op_b"):
        fio.load_inference_model(prefix, exe)
    program = fj.Program.parse(desc.SerializeToString())
    with pytest.raises(fj.UnregisteredOpError, match="2 op type.*no_such_op_a, no_such_op_b"):
        exe.run(program, feed={"img": np.zeros((1, 1, 8, 8), np.float32)})


def test_a_newer_op_version_is_refused(tmp_path):
    img, label, prob, loss = _fj_cnn()
    exe = _train_fj(img, label, loss)
    prefix = str(tmp_path / "m")
    fio.save_inference_model(prefix, [img], [prob], exe)
    from fluidjax.proto import framework_pb2 as pb

    desc = pb.ProgramDesc()
    desc.ParseFromString(open(prefix + ".pdmodel", "rb").read())
    for pair in desc.op_version_map.pair:
        if pair.op_name == "conv2d":
            pair.op_version.version = 7
    open(prefix + ".pdmodel", "wb").write(desc.SerializeToString())
    with pytest.raises(fj.ir.errors.OpVersionError, match=r"'conv2d' at version 7.*0\.\.1"):
        fio.load_inference_model(prefix, exe)


def test_supported_op_versions_are_paddles(tmp_path):
    main, startup, x, y = _paddle_static_cnn()
    prefix = str(tmp_path / "m")
    with paddle.static.scope_guard(paddle.static.Scope()):
        exe = _pexe()
        exe.run(startup)
        paddle.static.save_inference_model(prefix, [x], [y], exe, program=main)
    program = fio.read_program(prefix + ".pdmodel")
    assert dict(program.op_version_map) == fio.SUPPORTED_OP_VERSIONS


# -- StableHLO export --------------------------------------------------------------------------------
_JAX_ONLY = """
import sys
class _Refuse:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("fluidjax", "paddle"):
            raise ImportError(f"{name} must not be needed to run an export")
sys.meta_path.insert(0, _Refuse())
import numpy as np
import jax
exported = jax.export.deserialize(bytearray(open(sys.argv[1], "rb").read()))
inputs = np.load(sys.argv[2])
np.savez(sys.argv[3], **{k: np.asarray(exported.call(inputs[k])[0]) for k in inputs.files})
"""


def _run_exported_elsewhere(tmp_path, data, inputs):
    import subprocess
    import sys

    (tmp_path / "model.stablehlo").write_bytes(data)
    (tmp_path / "run.py").write_text(_JAX_ONLY)
    np.savez(tmp_path / "in.npz", **inputs)
    subprocess.run([sys.executable, "-I", str(tmp_path / "run.py"), str(tmp_path / "model.stablehlo"),
                    str(tmp_path / "in.npz"), str(tmp_path / "out.npz")], check=True, cwd=str(tmp_path))
    return dict(np.load(tmp_path / "out.npz"))


def test_export_runs_at_any_batch_size_in_a_jax_only_process(tmp_path):
    img, label, prob, loss = _fj_cnn()
    exe = _train_fj(img, label, loss)
    test_prog = fj.default_main_program().clone(for_test=True)
    exported = fio.export(test_prog, [img], [prob])
    assert str(exported.in_avals[0].shape[0]) == "batch" and exported.in_avals[0].shape[1:] == (1, 8, 8)
    xs = _rng(6).random((8, 1, 8, 8), dtype=np.float32)
    inputs = {f"b{n}": xs[:n] for n in (1, 3, 8)}
    outs = _run_exported_elsewhere(tmp_path, exported.serialize(), inputs)
    for key, x in inputs.items():
        want, = exe.run(test_prog, feed={"img": x}, fetch_list=[prob])
        np.testing.assert_allclose(outs[key], want, rtol=1e-5, atol=1e-6)


def test_export_of_a_paddle_jit_saved_model_matches_paddle(tmp_path):
    prefix = str(tmp_path / "jit" / "cnn")
    xs = _rng(7).random((5, 3, 8, 8), dtype=np.float32)
    paddle.disable_static()
    try:
        paddle.seed(3)
        net = _Cnn()
        net.eval()
        want = {n: net(paddle.to_tensor(xs[:n])).numpy() for n in (1, 2, 5)}
        paddle.jit.save(net, prefix, input_spec=[paddle.static.InputSpec([None, 3, 8, 8], "float32", "x")])
    finally:
        paddle.enable_static()
    scope = fj.Scope()
    program, feeds, fetches = fio.load_inference_model(prefix, None, scope=scope)
    exported = fio.export(program, feeds, fetches, scope=scope)
    outs = _run_exported_elsewhere(tmp_path, exported.serialize(), {f"b{n}": xs[:n] for n in want})
    for n, expected in want.items():
        np.testing.assert_allclose(outs[f"b{n}"], expected, rtol=1e-4, atol=1e-6)


# -- the deployment notebook -------------------------------------------------------------------------
@pytest.mark.slow
def test_deploy_notebook_runs(tmp_path):
    import pathlib

    import nbformat
    from nbclient import NotebookClient

    path = pathlib.Path(__file__).parent.parent / "notebooks" / "deploy.ipynb"
    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    text = "".join(o.get("text", "") for o in outputs)
    assert "unsupported ops: none" in text and "x: float32 [-1, 8]" in text
    assert sorted(os.listdir(tmp_path / "deploy")) == [".fluidjax_manifest", "classifier.pdiparams",
                                                       "classifier.pdmodel", "classifier.stablehlo"]
    # The files the notebook wrote are Paddle's format: Paddle loads and runs them.
    program, feeds, fetches = paddle.static.load_inference_model(str(tmp_path / "deploy" / "classifier"), _pexe())
    xs = _rng(8).random((4, 8), dtype=np.float32)
    want, = _pexe().run(program, feed={"x": xs}, fetch_list=fetches)
    got, = fj.Executor().run(*fio.load_inference_model(str(tmp_path / "deploy" / "classifier"), None)[:1],
                             feed={"x": xs})
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_export_for_several_platforms_still_runs_here():
    x = layer.data("x", shape=[5])
    y = layer.fc(x, output_size=2, activation="tanh")
    exe = fj.Executor()
    exe.run(fj.default_startup_program())
    exported = fio.export(fj.default_main_program(), [x], [y], platforms=["cpu", "cuda", "tpu"])
    assert exported.platforms == ("cpu", "cuda", "tpu")
    import jax

    xs = _rng(1).random((7, 5), dtype=np.float32)
    got, = jax.export.deserialize(bytearray(exported.serialize())).call(xs)
    want, = exe.run(feed={"x": xs}, fetch_list=[y])
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6)


class _TwoInTwoOut(paddle.nn.Layer):
    def __init__(self):
        super().__init__()
        self.a = paddle.nn.Linear(4, 3)
        self.b = paddle.nn.Linear(2, 3)

    def forward(self, u, v):
        s = self.a(u) + self.b(v)
        return paddle.nn.functional.sigmoid(s), paddle.sum(s, axis=1, keepdim=True)


def test_several_inputs_and_outputs_keep_their_order(tmp_path):
    prefix = str(tmp_path / "two" / "net")
    rng = _rng(12)
    us, vs = rng.random((3, 4), dtype=np.float32), rng.random((3, 2), dtype=np.float32)
    paddle.disable_static()
    try:
        paddle.seed(1)
        net = _TwoInTwoOut()
        want = [t.numpy() for t in net(paddle.to_tensor(us), paddle.to_tensor(vs))]
        paddle.jit.save(net, prefix, input_spec=[paddle.static.InputSpec([None, 4], "float32", "u"),
                                                 paddle.static.InputSpec([None, 2], "float32", "v")])
    finally:
        paddle.enable_static()
    scope = fj.Scope()
    program, feeds, fetches = fio.load_inference_model(prefix, None, scope=scope)
    assert feeds == ["u", "v"] and len(fetches) == 2
    got = fj.Executor().run(program, feed={"v": vs, "u": us}, fetch_list=fetches, scope=scope)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
    # Saved again by us, Paddle loads it with the same inputs and outputs in the same order.
    again = str(tmp_path / "again" / "net")
    # Variables: Paddle 2's form (dir/net.pdmodel); names would be Fluid 1.x's (a directory).
    block = program.global_block()
    fio.save_inference_model(again, [block.var(n) for n in feeds], fetches, None, program=program, scope=scope)
    p_prog, p_feeds, p_fetches = paddle.static.load_inference_model(again, _pexe())
    assert p_feeds == ["u", "v"]
    for g, w in zip(_pexe().run(p_prog, feed={"u": us, "v": vs}, fetch_list=p_fetches), want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["resnet18", "mobilenet_v2"])
def test_vision_models_saved_by_jit_save_load_run_and_export(tmp_path, arch):
    prefix = str(tmp_path / arch)
    xs = _rng(13).random((2, 3, 32, 32), dtype=np.float32)
    paddle.disable_static()
    try:
        paddle.seed(0)
        net = getattr(paddle.vision.models, arch)(num_classes=10)
        net.eval()
        want = {n: net(paddle.to_tensor(xs[:n])).numpy() for n in (1, 2)}
        paddle.jit.save(net, prefix, input_spec=[paddle.static.InputSpec([None, 3, 32, 32], "float32", "x")])
    finally:
        paddle.enable_static()
    scope = fj.Scope()
    program, feeds, fetches = fio.load_inference_model(prefix, None, scope=scope)
    exported = fio.export(program, feeds, fetches, scope=scope)
    import jax

    restored = jax.export.deserialize(bytearray(exported.serialize()))
    for n, expected in want.items():
        got, = fj.Executor().run(program, feed={"x": xs[:n]}, fetch_list=fetches, scope=scope)
        scale = np.abs(expected).max()
        np.testing.assert_allclose(got / scale, expected / scale, atol=1e-5)
        np.testing.assert_allclose(np.asarray(restored.call(xs[:n])[0]) / scale, expected / scale, atol=1e-5)


def test_export_of_a_training_program_is_its_inference_function():
    img, label, prob, loss = _fj_cnn()
    exe = _train_fj(img, label, loss)
    exported = fio.export(fj.default_main_program(), [img], [prob])      # batch norm on running stats
    xs = _rng(14).random((3, 1, 8, 8), dtype=np.float32)
    want, = exe.run(fj.default_main_program().clone(for_test=True), feed={"img": xs}, fetch_list=[prob])
    np.testing.assert_allclose(np.asarray(exported.call(xs)[0]), want, rtol=1e-5, atol=1e-6)


def test_named_files_inside_a_model_directory(tmp_path):
    img, label, prob, loss = _fj_cnn()
    exe = _train_fj(img, label, loss)
    prefix = str(tmp_path / "m")
    fio.save_inference_model(prefix, [img], [prob], exe)
    folder = tmp_path / "named"
    folder.mkdir()
    os.replace(prefix + ".pdmodel", folder / "prog")
    os.replace(prefix + ".pdiparams", folder / "weights")
    xs = _rng(15).random((2, 1, 8, 8), dtype=np.float32)
    want, = exe.run(fj.default_main_program().clone(for_test=True), feed={"img": xs}, fetch_list=[prob])
    scope = fj.Scope()
    program, feeds, fetches = fio.load_inference_model(str(folder), exe, model_filename="prog",
                                                       params_filename="weights", scope=scope)
    got, = exe.run(program, feed={"img": xs}, fetch_list=fetches, scope=scope)
    np.testing.assert_allclose(got, want, rtol=1e-6)
    # Paddle reads the same directory with the same names.
    p_prog, _, p_fetches = paddle.static.load_inference_model(str(folder), _pexe(), model_filename="prog",
                                                              params_filename="weights")
    np.testing.assert_allclose(_pexe().run(p_prog, feed={"img": xs}, fetch_list=p_fetches)[0], want,
                               rtol=1e-5, atol=1e-6)
    with pytest.raises(fj.ProgramFormatError, match="not a directory"):
        fio.load_inference_model(str(folder / "prog"), exe, model_filename="prog")
