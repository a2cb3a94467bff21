"""Inference load-path options (docs/inference.md): optimize_inference computes each folded
HWIO filter in one pass from the saved filter (checked against NumPy's float64 fold, and the
optimized program against Paddle), stores no OIHW copy it does not use; a compiled model's
executable is deserialized on a background thread at load and gives the uncompiled answer, and a
failure there still recompiles with a warning and the same answer."""

import os
import warnings

import numpy as np
import pytest

import fluidjax as fj
import fluidjax.io as fio
from fluidjax import layer, passes
from fluidjax.lowering import compiled_models

os.environ.setdefault("GLOG_minloglevel", "2")
import paddle  # noqa: E402  (after fluidjax: the other order segfaults)

XS = np.random.default_rng(3).standard_normal((2, 3, 10, 10)).astype(np.float32)


def _build(seed=0):
    """conv 3x3 (+bn) → relu → conv 1x1 (+bn) → depthwise 3x3 (+bn) → pool → fc, batch norms with
    random statistics; initialised in a fresh scope. Returns (main program, prob, scope, exe)."""
    main, startup = fj.Program(), fj.Program()
    with fj.program_guard(main, startup):
        img = layer.data("img", shape=[3, 10, 10])
        y = layer.batch_norm(layer.conv2d(img, num_filters=6, filter_size=3, padding=1), activation="relu")
        y = layer.batch_norm(layer.conv2d(y, num_filters=8, filter_size=1), activation="relu")
        y = layer.batch_norm(layer.conv2d(y, num_filters=8, filter_size=3, padding=1, groups=8))
        prob = layer.fc(layer.pool2d(y, pool_size=2, pool_stride=2), output_size=4, activation="softmax")
    scope, exe = fj.Scope(), fj.Executor()
    exe.run(startup, scope=scope)
    rng = np.random.default_rng(seed)
    for var in main.list_vars():
        if var.persistable and var.name.endswith((".w_1", ".w_2", ".b_0", ".w_0")) and "batch_norm" in var.name:
            t = scope.find_var(var.name).get_tensor()
            shape = np.asarray(t.value()).shape
            value = rng.uniform(0.5, 1.5, shape) if var.name.endswith((".w_2", ".w_0")) else rng.normal(0, 0.3, shape)
            t.set(value.astype(np.float32))
    return main, prob, scope, exe


def _arr(scope, name):
    return np.asarray(scope.find_var(name).get_tensor().value())


def test_folded_hwio_filter_is_numpys_float64_fold_and_no_oihw_copy_is_kept():
    main, prob, scope, exe = _build()
    test = main.clone(for_test=True)
    fast = passes.optimize_inference(test, scope)
    block = fast.global_block()
    bns = [op for op in test.global_block().ops if op.type == "batch_norm"]
    convs = [op for op in test.global_block().ops if op.type == "conv2d"]
    assert len(bns) == 3 and "batch_norm" not in [op.type for op in block.ops]
    # the 3x3 conv's filter: folded and HWIO, made from the saved filter in one pass
    w_name = convs[0].input("Filter")[0]
    bn = bns[0]
    w = _arr(scope, w_name).astype(np.float64)
    gamma, var = (_arr(scope, bn.input(s)[0]).astype(np.float64) for s in ("Scale", "Variance"))
    factor = gamma / np.sqrt(var + bn.attr("epsilon"))
    want = (w * factor[:, None, None, None]).astype(np.float32).transpose(2, 3, 1, 0)
    hwio = [n for n, v in block.vars.items() if v.persistable and n.startswith(w_name) and n.endswith(".hwio")]
    assert len(hwio) == 1
    got = _arr(scope, hwio[0])
    assert got.flags["C_CONTIGUOUS"] and got.dtype == np.float32
    np.testing.assert_array_equal(got, want)
    # 64-byte aligned (JAX's CPU client aliases such arrays instead of copying) and read-only
    assert got.ctypes.data % 64 == 0 and not got.flags["WRITEABLE"]
    # the OIHW folded copy of a filter that moved to HWIO is neither declared nor stored
    assert scope.find_var(w_name + ".bn_folded") is None and block.find_var(w_name + ".bn_folded") is None
    # 1x1 and depthwise filters stay OIHW (folded, stored)
    for op in fast.global_block().ops:
        if op.type in ("conv2d", "depthwise_conv2d") and op.input("Filter")[0].endswith(".bn_folded"):
            assert _arr(scope, op.input("Filter")[0]).shape == tuple(block.var(op.input("Filter")[0]).shape)
    # the same values as the passes run one by one (each computing eagerly)
    one_by_one = test.clone()
    passes.fold_conv_bn(one_by_one, scope)
    passes.to_nhwc(one_by_one)
    passes.filters_hwio(one_by_one, scope)
    a, = exe.run(fast, feed={"img": XS}, fetch_list=[prob.name], scope=scope)
    b, = exe.run(one_by_one, feed={"img": XS}, fetch_list=[prob.name], scope=scope)
    c, = exe.run(test, feed={"img": XS}, fetch_list=[prob.name], scope=scope)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(a, c, rtol=1e-5, atol=1e-6)


def test_optimized_program_matches_paddle(tmp_path):
    main, prob, scope, exe = _build(seed=1)
    prefix = str(tmp_path / "net")
    with fj.scope_guard(scope):
        fio.save_inference_model(prefix, [main.global_block().var("img")], [prob], exe, main_program=main)
    got_scope = fj.Scope()
    program, feeds, fetches = fio.load_inference_model(prefix, scope=got_scope, optimize=True)
    got, = fj.Executor().run(program, feed={feeds[0]: XS}, fetch_list=fetches, scope=got_scope)
    paddle.enable_static()
    try:
        pexe = paddle.static.Executor(paddle.CPUPlace())
        with paddle.static.scope_guard(paddle.static.Scope()):
            prog, pfeeds, pfetches = paddle.static.load_inference_model(prefix, pexe)
            want, = pexe.run(prog, feed={pfeeds[0]: XS}, fetch_list=pfetches)
    finally:
        paddle.disable_static()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def _compiled_model(tmp_path):
    main, prob, scope, exe = _build(seed=2)
    prefix = str(tmp_path / "cnet")
    with fj.scope_guard(scope):
        fio.save_inference_model(prefix, [main.global_block().var("img")], [prob], exe, main_program=main)
    fio.compile_saved_model(prefix, {"img": XS.shape}, optimize=(True,))
    return prefix


def _load_run(prefix, **kw):
    scope, exe = fj.Scope(), fj.Executor()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        program, feeds, fetches = fio.load_inference_model(prefix, exe, scope=scope, optimize=True, **kw)
        attached = getattr(program, "_fluidjax_precompiled", None)
        out, = exe.run(program, feed={feeds[0]: XS}, fetch_list=fetches, scope=scope)
    return out, exe.trace_count, attached, [w for w in caught if issubclass(w.category, fio.CompiledModelWarning)]


def test_compiled_model_is_deserialized_at_load_and_gives_the_uncompiled_answer(tmp_path):
    prefix = _compiled_model(tmp_path)
    want, traces, _, _ = _load_run(prefix, compiled=False)
    assert traces == 1
    got, traces, attached, warned = _load_run(prefix)
    assert not warned and traces == 0
    assert attached is not None and attached.prefetched == {}      # the run took the prefetched executable
    np.testing.assert_array_equal(got, want)


def test_a_failing_background_deserialization_recompiles_with_a_warning(tmp_path, monkeypatch):
    prefix = _compiled_model(tmp_path)
    want, _, _, _ = _load_run(prefix, compiled=False)

    def refuse(*_args, **_kw):
        raise RuntimeError("XLA refuses these bytes")

    monkeypatch.setattr(compiled_models, "_deserialize", refuse)
    got, traces, _, warned = _load_run(prefix)
    assert traces == 1 and warned and "XLA refuses these bytes" in str(warned[0].message)
    np.testing.assert_array_equal(got, want)
