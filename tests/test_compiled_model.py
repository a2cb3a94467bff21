"""Compiled executables saved with a model (lowering/compiled_models.py, frontend/io/compiled.py):
a load in a fresh process runs its first step without tracing or compiling and gives the
uncompiled answer bit for bit (and Paddle's to float32 rounding); a stale, foreign or damaged
compiled file recompiles with a CompiledModelWarning and the same answer; ``fluidjax compile``."""

import hashlib
import json
import os
import pathlib
import struct
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest

import fluidjax as fj
import fluidjax.io as fio
from fluidjax import layer
from fluidjax.lowering import compiled_models

import paddle  # noqa: E402  (after fluidjax)

SCRIPT = str(pathlib.Path(sys.executable).parent / "fluidjax")
XS = np.random.default_rng(3).standard_normal((1, 2, 8, 8)).astype(np.float32)


def _cnn():
    """conv + batch norm (random statistics) + relu + pool + fc softmax, initialised."""
    img = layer.data("img", shape=[2, 8, 8])
    conv = layer.conv2d(img, num_filters=4, filter_size=3, padding=1)
    bn = layer.batch_norm(conv, activation="relu", is_test=True)
    prob = layer.fc(layer.pool2d(bn, pool_size=2, pool_stride=2), output_size=5, activation="softmax")
    exe = fj.Executor()
    exe.run(fj.default_startup_program())
    rng = np.random.default_rng(0)
    for var in fj.default_main_program().list_vars():
        if var.persistable and var.name.endswith((".w_1", ".w_2")):       # moving mean / variance
            shape = fj.global_scope().find_var(var.name).get_tensor().shape()
            value = rng.uniform(0.5, 1.5, shape) if var.name.endswith(".w_2") else rng.normal(0, 0.3, shape)
            fj.global_scope().find_var(var.name).get_tensor().set(value.astype(np.float32))
    return img, prob, exe


def _save(tmp_path, compiled=True, fluid_dir=False, variants=None):
    """(path, program file) of the CNN saved with its compiled executables: by
    ``save_inference_model(compiled=...)``, or (``variants``) saved plain and then compiled for
    those ``optimize`` variants only (a test that needs one compiles one)."""
    img, prob, exe = _cnn()
    if fluid_dir:
        path = str(tmp_path / "fluid_model")
        fio.save_inference_model(path, ["img"], [prob], exe, compiled=compiled)
        return path, os.path.join(path, "__model__")
    prefix = str(tmp_path / "cnn" / "net")
    fio.save_inference_model(prefix, [img], [prob], exe, compiled=compiled if variants is None else False)
    if variants is not None:
        fio.compile_saved_model(prefix, optimize=variants)
    return prefix, prefix + ".pdmodel"


def _load_run(prefix, xs=XS, **kw):
    """(output, trace count of the run, the warnings raised by the load and the run)."""
    scope, exe = fj.Scope(), fj.Executor()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        program, feeds, fetches = fio.load_inference_model(prefix, exe, scope=scope, **kw)
        out, = exe.run(program, feed={feeds[0]: xs}, fetch_list=fetches, scope=scope)
    return out, exe.trace_count, [w for w in caught if issubclass(w.category, fio.CompiledModelWarning)]


def _paddle(prefix, xs=XS):
    exe = paddle.static.Executor(paddle.CPUPlace())
    with paddle.static.scope_guard(paddle.static.Scope()):
        program, feeds, fetches = paddle.static.load_inference_model(prefix, exe)
        return exe.run(program, feed={feeds[0]: xs}, fetch_list=fetches)[0]


_CHILD = textwrap.dedent("""
    import json, sys
    import jax, numpy as np
    stages = {"/jax/core/compile/jaxpr_trace_duration": "trace",
              "/jax/core/compile/jaxpr_to_mlir_module_duration": "mlir",
              "/jax/core/compile/backend_compile_duration": "xla"}
    seen = []
    jax.monitoring.register_event_duration_secs_listener(
        lambda event, seconds, **_: seen.append(stages[event]) if event in stages else None)
    import fluidjax as fj
    prefix, xs_path, out_path = sys.argv[1:4]
    xs = np.load(xs_path)
    report = {}
    for name, kw in [("compiled", {}), ("optimized", {"optimize": True}), ("plain", {"compiled": False})]:
        scope, exe = fj.Scope(), fj.Executor()
        program, feeds, fetches = fj.io.load_inference_model(prefix, exe, scope=scope, **kw)
        seen.clear()
        first, = exe.run(program, feed={feeds[0]: xs}, fetch_list=fetches, scope=scope)
        second, = exe.run(program, feed={feeds[0]: xs}, fetch_list=fetches, scope=scope)
        report[name] = {"stages": sorted(seen), "traces": exe.trace_count,
                        "second_equal": bool(np.array_equal(first, second))}
        np.save(f"{out_path}.{name}.npy", first)
    print(json.dumps(report))
""")


def test_a_fresh_process_runs_the_saved_executable_without_tracing_or_compiling(tmp_path):
    prefix, model = _save(tmp_path)
    assert os.path.exists(fio.compiled_path(model)) and fio.compiled_path(model).endswith("net.fjexec")
    np.save(tmp_path / "xs.npy", XS)
    out = str(tmp_path / "out")
    env = dict(os.environ, FLUIDJAX_COMPILATION_CACHE="0")     # the uncompiled side really compiles
    result = subprocess.run([sys.executable, "-c", _CHILD, prefix, str(tmp_path / "xs.npy"), out],
                            capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "CompiledModelWarning" not in result.stderr, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    for name in ("compiled", "optimized"):        # both variants were saved: neither traces nor compiles
        assert report[name] == {"stages": [], "traces": 0, "second_equal": True}, report
    assert "xla" in report["plain"]["stages"] and report["plain"]["traces"] == 1
    plain = np.load(out + ".plain.npy")
    np.testing.assert_array_equal(np.load(out + ".compiled.npy"), plain)      # bit for bit
    np.testing.assert_allclose(np.load(out + ".optimized.npy"), plain, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(plain, _paddle(prefix), rtol=1e-5, atol=1e-7)   # and Paddle's answer


def test_the_optimized_variant_equals_its_uncompiled_run_bit_for_bit(tmp_path):
    prefix, _ = _save(tmp_path, variants=(True,))
    got, traces, caught = _load_run(prefix, optimize=True)
    want, _, _ = _load_run(prefix, optimize=True, compiled=False)
    assert traces == 0 and not caught
    np.testing.assert_array_equal(got, want)


def _rewrite(path, edit):
    """The compiled file at ``path`` with ``edit(headers, blobs)`` applied, written back."""
    entries = compiled_models.unpack(open(path, "rb").read())
    headers, blobs = [h for h, _ in entries], [b for _, b in entries]
    edit(headers, blobs)
    for h, b in zip(headers, blobs):
        h["sha256"] = hashlib.sha256(b).hexdigest()
    open(path, "wb").write(compiled_models.pack(list(zip(headers, blobs))))


def _tamper_version(headers, blobs):
    for h in headers:
        h["key"]["environment"]["jaxlib"] = "0.0.1"


def _tamper_program(headers, blobs):
    for h in headers:
        h["key"]["program"] = "0" * 64


def _truncate(path):
    data = open(path, "rb").read()
    open(path, "wb").write(data[: len(data) - 1000])


def _flip_a_byte(path):
    data = bytearray(open(path, "rb").read())
    data[-500] ^= 0xFF
    open(path, "wb").write(bytes(data))


def _bad_magic(path):
    open(path, "wb").write(b"\x80\x04pickle" + open(path, "rb").read())


@pytest.mark.parametrize("damage,when", [
    (lambda p: _rewrite(p, _tamper_version), "jaxlib: saved '0.0.1'"),
    (lambda p: _rewrite(p, _tamper_program), "program: saved '0000"),
    (_truncate, "truncated"),
    (_flip_a_byte, "SHA-256"),
    (_bad_magic, "bad magic"),
], ids=["tampered-version", "other-program", "truncated", "damaged", "not-ours"])
def test_a_stale_or_damaged_file_recompiles_with_a_warning_and_the_same_answer(tmp_path, damage, when):
    prefix, model = _save(tmp_path, variants=(False,))
    want, traces, caught = _load_run(prefix, compiled=False)
    assert traces == 1 and not caught
    damage(fio.compiled_path(model))
    got, traces, caught = _load_run(prefix)
    assert traces == 1                                  # traced and compiled as without the file
    assert len(caught) == 1 and when in str(caught[0].message), [str(w.message) for w in caught]
    np.testing.assert_array_equal(got, want)


def test_another_feed_shape_recompiles_with_a_warning_and_the_same_answer(tmp_path):
    prefix, _ = _save(tmp_path, variants=(False,))          # compiled for batch 1
    xs = np.random.default_rng(4).standard_normal((3, 2, 8, 8)).astype(np.float32)
    want, _, _ = _load_run(prefix, xs, compiled=False)
    got, traces, caught = _load_run(prefix, xs)
    assert traces == 1 and len(caught) == 1
    assert "[[1, 2, 8, 8]]" in str(caught[0].message) and "[[3, 2, 8, 8]]" in str(caught[0].message)
    np.testing.assert_array_equal(got, want)


def test_a_program_changed_after_loading_recompiles_with_a_warning(tmp_path):
    prefix, _ = _save(tmp_path, variants=(False,))
    want, _, _ = _load_run(prefix, compiled=False)
    scope, exe = fj.Scope(), fj.Executor()
    program, feeds, fetches = fio.load_inference_model(prefix, exe, scope=scope)
    program.global_block().create_var("added_later", [1], "float32")
    with pytest.warns(fio.CompiledModelWarning, match="changed after it was loaded"):
        got, = exe.run(program, feed={feeds[0]: XS}, fetch_list=fetches, scope=scope)
    assert exe.trace_count == 1
    np.testing.assert_array_equal(got, want)


def test_a_save_without_compiled_removes_the_replaced_models_file_and_fluid_directories_work(tmp_path):
    path, model = _save(tmp_path, fluid_dir=True)
    assert os.path.exists(os.path.join(path, "__model__.fjexec"))
    got, traces, caught = _load_run(path)
    want, _, _ = _load_run(path, compiled=False)
    assert traces == 0 and not caught
    np.testing.assert_array_equal(got, want)
    prob = fj.default_main_program().global_block().ops[-1].output_arg_names[0]   # the softmax
    fio.save_inference_model(path, ["img"], [prob], fj.Executor())
    assert not os.path.exists(os.path.join(path, "__model__.fjexec"))


def test_several_shapes_and_the_cli_verb(tmp_path):
    prefix, model = _save(tmp_path, compiled=False)
    assert not os.path.exists(fio.compiled_path(model))
    result = subprocess.run([SCRIPT, "compile", prefix, "--feed-shape", "img=1x2x8x8", "--feed-shape",
                             "img=4x2x8x8", "--optimize", "off"], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "net.fjexec" in result.stdout and "2 feed signature(s)" in result.stdout
    for batch in (1, 4):
        xs = np.random.default_rng(batch).standard_normal((batch, 2, 8, 8)).astype(np.float32)
        got, traces, caught = _load_run(prefix, xs)
        want, _, _ = _load_run(prefix, xs, compiled=False)
        assert traces == 0 and not caught
        np.testing.assert_array_equal(got, want)
    # optimize=True was not compiled: its load says so and compiles
    _, traces, caught = _load_run(prefix, optimize=True)
    assert traces == 1 and len(caught) == 1 and "no compiled executable matches" in str(caught[0].message)
    bad = subprocess.run([SCRIPT, "compile", prefix, "--feed-shape", "img=1x2x8"], capture_output=True, text=True,
                         timeout=300)
    assert bad.returncode == 1 and len(bad.stderr.strip().splitlines()) == 1 and "img" in bad.stderr


def test_a_step_with_host_callbacks_is_refused_at_save(tmp_path):
    img = layer.data("img", shape=[3])
    out = layer.fc(fj.layers.Print(img, message="x"), output_size=2)
    exe = fj.Executor()
    exe.run(fj.default_startup_program())
    with pytest.raises(fj.NotOfferedError, match="cannot be saved compiled"):
        fio.save_inference_model(str(tmp_path / "m"), [img], [out], exe, compiled=True)


def test_the_file_holds_no_pickle_and_says_what_it_is(tmp_path):
    _, model = _save(tmp_path)
    data = open(fio.compiled_path(model), "rb").read()
    assert data[:8] == compiled_models.MAGIC
    (length,) = struct.unpack("<Q", data[8:16])
    header = json.loads(data[16:16 + length])
    assert header["format"] == "fluidjax-compiled-model" and len(header["entries"]) == 2   # optimize off, on
    env = header["entries"][0]["key"]["environment"]
    assert {"platform", "device_kind", "jax", "jaxlib", "fluidjax", "fluidjax_sources", "xla_flags"} <= set(env)
    assert [f[0] for f in header["entries"][0]["key"]["feeds"]] == ["img"]
