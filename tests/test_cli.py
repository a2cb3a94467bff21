"""The installed ``fluidjax`` script: inspect, run, export, convert, demo; --help everywhere; bad input
is a non-zero exit with one line on stderr. Outputs are checked against Paddle and NumPy."""

import json
import os
import pathlib
import pickle
import subprocess
import sys

import numpy as np
import pytest

import fluidjax as fj
import fluidjax.io as fio
from fluidjax import layer

import paddle  # noqa: E402  (after fluidjax)

SCRIPT = str(pathlib.Path(sys.executable).parent / "fluidjax")


def _cli(*args, check=True):
    result = subprocess.run([SCRIPT, *map(str, args)], capture_output=True, text=True, timeout=300)
    if check:
        assert result.returncode == 0, result.stderr
    return result


def _bad(*args, match):
    result = _cli(*args, check=False)
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and match in lines[0], result.stderr
    return lines[0]


@pytest.fixture
def model(tmp_path):
    """A small CNN saved by fj.io.save_inference_model: (prefix, the scope's parameters)."""
    img = layer.data("img", shape=[2, 6, 6])
    conv = layer.conv2d(img, num_filters=3, filter_size=3, padding=1, activation="relu")
    prob = layer.fc(layer.pool2d(conv, pool_size=2, pool_stride=2), output_size=4, activation="softmax")
    exe = fj.Executor()
    exe.run(fj.default_startup_program())
    prefix = str(tmp_path / "cnn" / "inference")
    fio.save_inference_model(prefix, [img], [prob], exe)
    params = {v.name: np.asarray(fj.global_scope().find_var(v.name).get_tensor())
              for v in fj.default_main_program().list_vars() if v.persistable}
    return prefix, params


def _paddle_run(prefix, feeds):
    paddle.enable_static()
    exe = paddle.static.Executor(paddle.CPUPlace())
    with paddle.static.scope_guard(paddle.static.Scope()):
        program, names, fetches = paddle.static.load_inference_model(prefix, exe)
        return exe.run(program, feed=feeds, fetch_list=fetches)


@pytest.mark.parametrize("command", [[], ["inspect"], ["run"], ["export"], ["convert"], ["demo"]])
def test_every_command_has_help(command):
    out = _cli(*command, "--help").stdout
    assert "usage: fluidjax" in out
    if command and command[0] != "demo":
        assert "MODEL" in out


def test_inspect(model):
    prefix, params = model
    text = _cli("inspect", prefix).stdout
    assert "img: float32 [-1, 2, 6, 6]" in text and "unsupported ops: none" in text
    info = json.loads(_cli("inspect", os.path.dirname(prefix), "--json").stdout)   # a directory works too
    assert [v["name"] for v in info["inputs"]] == ["img"]
    assert info["outputs"][0]["shape"] == [-1, 4] and info["outputs"][0]["dtype"] == "float32"
    assert info["parameters"] == {"tensors": len(params), "values": sum(a.size for a in params.values()),
                                  "bytes": sum(a.nbytes for a in params.values())}
    assert info["ops"]["feed"] == 1 and info["ops"]["fetch"] == 1 and info["ops"]["conv2d"] == 1
    assert info["layout"] == "combined" and info["unsupported_ops"] == []


def test_inspect_lists_unsupported_ops(model):
    prefix, _ = model
    from fluidjax.proto import framework_pb2 as pb

    desc = pb.ProgramDesc()
    desc.ParseFromString(open(prefix + ".pdmodel", "rb").read())
    desc.blocks[0].ops[1].type = "fancy_op"
    open(prefix + ".pdmodel", "wb").write(desc.SerializeToString())
    info = json.loads(_cli("inspect", prefix, "--json").stdout)
    assert info["unsupported_ops"] == ["fancy_op"]
    _bad("run", prefix, "--feed", "img=nothing.npy", match="no such file")


def test_run_matches_paddle(model, tmp_path):
    prefix, _ = model
    xs = np.random.default_rng(0).random((3, 2, 6, 6), dtype=np.float32)
    np.save(tmp_path / "img.npy", xs)
    out = tmp_path / "out.npz"
    _cli("run", prefix, "--feed", f"img={tmp_path / 'img.npy'}", "--out", out)
    got = np.load(out)
    want, = _paddle_run(prefix, {"img": xs})
    np.testing.assert_allclose(got["save_infer_model/scale_0.tmp_0"], want, rtol=1e-5, atol=1e-6)
    printed = _cli("run", prefix, "--feed", f"img={tmp_path / 'img.npy'}").stdout
    assert "save_infer_model/scale_0.tmp_0: float32 [3, 4]" in printed


def test_export_is_callable_from_jax(model, tmp_path):
    prefix, _ = model
    _cli("export", prefix, "-o", tmp_path / "m.stablehlo")
    import jax

    exported = jax.export.deserialize(bytearray((tmp_path / "m.stablehlo").read_bytes()))
    for n in (1, 5):
        xs = np.random.default_rng(n).random((n, 2, 6, 6), dtype=np.float32)
        want, = _paddle_run(prefix, {"img": xs})
        np.testing.assert_allclose(np.asarray(exported.call(xs)[0]), want, rtol=1e-5, atol=1e-6)


def test_convert_both_ways(model, tmp_path):
    prefix, params = model
    folder = tmp_path / "perfile"
    _cli("convert", prefix, folder)
    assert sorted(os.listdir(folder)) == sorted([".fluidjax_manifest", "__model__", *params])
    # Paddle reads the per-variable files (its `load` op) of the converted directory.
    paddle.enable_static()
    program = paddle.static.Program.parse_from_string((folder / "__model__").read_bytes())
    scope = paddle.static.Scope()
    with paddle.static.scope_guard(scope):
        paddle.static.load_vars(paddle.static.Executor(paddle.CPUPlace()), str(folder), program,
                                predicate=paddle.static.io.is_persistable)
    for name, value in params.items():
        np.testing.assert_array_equal(np.array(scope.find_var(name).get_tensor()), value)
    back = tmp_path / "back" / "inference"
    _cli("convert", folder, back)
    assert open(str(back) + ".pdiparams", "rb").read() == open(prefix + ".pdiparams", "rb").read()
    assert open(str(back) + ".pdmodel", "rb").read() == open(prefix + ".pdmodel", "rb").read()


def test_bad_input_is_one_line_and_nonzero(model, tmp_path):
    prefix, _ = model
    xs = np.zeros((1, 2, 6, 6), np.float64)
    np.save(tmp_path / "f64.npy", xs)
    np.save(tmp_path / "obj.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    _bad("inspect", tmp_path / "missing", match="no model at")
    _bad("run", prefix, "--feed", "img", match="expected NAME=FILE.npy")
    _bad("run", prefix, match="missing --feed for ['img']")
    _bad("run", prefix, "--feed", f"img={tmp_path / 'obj.npy'}", match="cannot read")
    # the model's img is layers.data (no need_check_feed): the op meeting float32 weights refuses it
    _bad("run", prefix, "--feed", f"img={tmp_path / 'f64.npy'}", match="ShapeError: op 'conv2d'")
    _bad("run", prefix, "--feed", f"img={tmp_path / 'f64.npy'}", "--feed", f"x={tmp_path / 'f64.npy'}",
         match="unknown inputs ['x']")
    open(prefix + ".pdiparams", "wb").write(pickle.dumps({"w": 1}))
    _bad("export", prefix, "-o", tmp_path / "e", match="UnsafeFormatError")
    open(prefix + ".pdmodel", "wb").write(b"\x01\x02\x03 not a program")
    _bad("inspect", prefix, match="ProgramFormatError")
    assert _cli("run", check=False).returncode == 2            # argparse: MODEL missing
