"""Hostile and broken files for fj.io: every one a typed error naming the file (and variable), never a
crash, a hang, an unpickling or an allocation larger than the file; saves that are killed midway."""

import os
import pickle
import random
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import fluidjax as fj
import fluidjax.io as fio
from fluidjax import layer
from fluidjax.frontend.io import tensor_stream as ts
from fluidjax.ir.errors import ParameterMismatchError, TensorFormatError, UnsafeFormatError


def _model(tmp_path, hidden=8):
    x = layer.data("x", shape=[4])
    prob = layer.fc(layer.fc(x, output_size=hidden, activation="relu"), output_size=3, activation="softmax")
    exe = fj.Executor()
    exe.run(fj.default_startup_program())
    prefix = str(tmp_path / "m")
    fio.save_inference_model(prefix, [x], [prob], exe)
    return prefix, exe


def _scope_snapshot(scope):
    return {n: np.asarray(scope.find_var(n).get_tensor()).copy() for n in scope.local_var_names()}


def test_every_truncation_of_a_params_file_is_a_typed_error(tmp_path):
    prefix, exe = _model(tmp_path)
    data = open(prefix + ".pdiparams", "rb").read()
    cut = prefix + ".pdiparams"
    offsets = sorted(set(range(0, 64)) | set(range(64, len(data), 7)))
    for n in offsets:
        open(cut, "wb").write(data[:n])
        scope = fj.Scope()
        with pytest.raises(TensorFormatError) as info:
            fio.load_inference_model(prefix, exe, scope=scope)
        assert cut in str(info.value)
        assert scope.local_var_names() == []       # nothing half-loaded


def test_bit_flips_in_headers_never_crash(tmp_path):
    prefix, exe = _model(tmp_path)
    path = prefix + ".pdiparams"
    data = bytearray(open(path, "rb").read())
    rng = random.Random(0)
    for _ in range(300):
        mutated = bytearray(data)
        for _ in range(rng.randint(1, 3)):
            i = rng.randrange(0, 40)            # the first tensor's header
            mutated[i] = rng.randrange(256)
        open(path, "wb").write(bytes(mutated))
        try:
            fio.load_inference_model(prefix, exe, scope=fj.Scope())
        except fj.FluidJaxError:
            pass


def test_a_huge_shape_claim_is_refused_without_allocating(tmp_path):
    path = str(tmp_path / "w")
    header = ts.tensor_to_bytes(np.zeros((0,), np.float32))
    desc = ts.tensor_desc_bytes("float32", [2 ** 40, 2 ** 20])
    forged = header[:12] + (0).to_bytes(4, "little") + len(desc).to_bytes(4, "little") + desc + b"\0" * 64
    open(path, "wb").write(forged)
    x = fj.default_main_program().global_block().create_var("w", shape=(-1, -1), persistable=True)
    start = time.perf_counter()
    with pytest.raises(TensorFormatError, match=r"truncated.*needs 4611686018427387904 bytes"):
        fio.load_vars(None, str(tmp_path), vars=[x])
    assert time.perf_counter() - start < 1.0


@pytest.mark.parametrize("field,value,message", [
    ("version", 1, "LoDTensor version 1"),
    ("levels", 2 ** 62, "LoD levels announced"),
    ("desc_size", -5, "negative TensorDesc size"),
    ("desc_size", 2 ** 30, "truncated file: the TensorDesc needs"),
])
def test_forged_header_fields(tmp_path, field, value, message):
    good = ts.tensor_to_bytes(np.ones((2, 2), np.float32))
    offset, width = {"version": (0, 4), "levels": (4, 8), "desc_size": (16, 4)}[field]
    forged = good[:offset] + int(value).to_bytes(width, "little", signed=field == "desc_size") + good[offset + width:]
    open(tmp_path / "w", "wb").write(forged)
    var = fj.default_main_program().global_block().create_var("w", shape=(2, 2), persistable=True)
    with pytest.raises(TensorFormatError, match=message) as info:
        fio.load_vars(None, str(tmp_path), vars=[var])
    assert info.value.variable == "w" and info.value.path.endswith("w")


class _Boom:
    """Unpickling this would create a file: proof that nothing is unpickled."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_a_pickle_is_refused_and_never_unpickled(tmp_path):
    prefix, exe = _model(tmp_path)
    marker = tmp_path / "unpickled"
    payload = pickle.dumps({"fc_0.w_0": _Boom(str(marker))}, protocol=4)
    open(prefix + ".pdiparams", "wb").write(payload)
    with pytest.raises(UnsafeFormatError, match="pickle.*cannot load it safely") as info:
        fio.load_inference_model(prefix, exe, scope=fj.Scope())
    assert ".pdparams" in str(info.value) and info.value.path == prefix + ".pdiparams"
    open(prefix + ".pdmodel", "wb").write(payload)
    with pytest.raises(UnsafeFormatError, match="pickle"):
        fio.load_inference_model(prefix, exe, scope=fj.Scope())
    assert not marker.exists()


def test_paddles_pdparams_checkpoint_is_refused_as_a_pickle(tmp_path):
    import paddle

    paddle.enable_static()
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup):
        x = paddle.static.data("x", [-1, 4], "float32")
        paddle.static.nn.fc(x, 3)
    with paddle.static.scope_guard(paddle.static.Scope()):
        exe = paddle.static.Executor(paddle.CPUPlace())
        exe.run(startup)
        paddle.static.save(main, str(tmp_path / "ckpt"))
    ours = fj.Program.parse(main.desc.serialize_to_string())
    with pytest.raises(UnsafeFormatError, match="Paddle's .pdparams"):
        fio.load_persistables(None, str(tmp_path), ours, filename="ckpt.pdparams", scope=fj.Scope())


def test_a_shape_or_dtype_mismatch_names_file_and_variable(tmp_path):
    prefix, exe = _model(tmp_path, hidden=8)
    params = open(prefix + ".pdiparams", "rb").read()
    with fj.program_guard(fj.Program(), fj.Program()), fj.unique_name.guard():
        other = tmp_path / "other"
        other.mkdir()
        prefix2, _ = _model(other, hidden=9)
    open(prefix2 + ".pdiparams", "wb").write(params)
    scope = fj.Scope()
    with pytest.raises(ParameterMismatchError, match=r"fc_0.b_0.*shape \[8\].*\[9\]") as info:
        fio.load_inference_model(prefix2, exe, scope=scope)
    assert info.value.path == prefix2 + ".pdiparams" and info.value.variable == "fc_0.b_0"
    assert scope.local_var_names() == []
    # dtype: the same bytes read into a program whose variable is float64
    block = fj.Program().global_block()
    var = block.create_var("fc_0.b_0", shape=(8,), dtype="float64", persistable=True)
    fio.save_vars(None, str(tmp_path / "one"), vars=["fc_0.b_0"])
    with pytest.raises(ParameterMismatchError, match="dtype float32, the program's variable is float64"):
        fio.load_vars(None, str(tmp_path / "one"), block.program, vars=[var])


def test_trailing_bytes_are_an_error(tmp_path):
    prefix, exe = _model(tmp_path)
    with open(prefix + ".pdiparams", "ab") as f:
        f.write(ts.tensor_to_bytes(np.zeros(3, np.float32)))
    with pytest.raises(TensorFormatError, match="bytes are left after the last"):
        fio.load_inference_model(prefix, exe, scope=fj.Scope())


def test_variable_names_cannot_leave_the_directory(tmp_path):
    block = fj.default_main_program().global_block()
    var = block.create_var("../outside", shape=(2,), persistable=True)
    (tmp_path / "d").mkdir()
    open(tmp_path / "outside", "wb").write(ts.tensor_to_bytes(np.zeros(2, np.float32)))
    with pytest.raises(TensorFormatError, match="cannot be a file name"):
        fio.load_vars(None, str(tmp_path / "d"), vars=[var])


def test_other_formats_are_named(tmp_path):
    prefix, exe = _model(tmp_path)
    np.save(prefix + ".npy", np.zeros(3))
    os.replace(prefix + ".npy", prefix + ".pdiparams")
    with pytest.raises(TensorFormatError, match="NumPy .npy file"):
        fio.load_inference_model(prefix, exe, scope=fj.Scope())
    open(prefix + ".pdmodel", "wb").write(b"\x00garbage that is no ProgramDesc" * 3)
    with pytest.raises(fj.ProgramFormatError, match=r"m\.pdmodel"):
        fio.load_inference_model(prefix, exe, scope=fj.Scope())


# -- saves killed midway -----------------------------------------------------------------------------
_SAVER = textwrap.dedent("""
    import sys
    import numpy as np
    import fluidjax as fj
    import fluidjax.io as fio
    from fluidjax import layer

    target, kind = sys.argv[1], sys.argv[2]
    x = layer.data("x", shape=[512])
    prob = layer.fc(layer.fc(x, output_size=512), output_size=512)
    exe = fj.Executor()
    exe.run(fj.default_startup_program())
    scope = fj.global_scope()
    names = [v.name for v in fj.default_main_program().list_vars() if v.persistable]
    generation = int(sys.argv[3])
    while True:
        for n in names:
            t = scope.find_var(n).get_tensor()
            t.set(np.full(np.shape(t.value()), generation, np.float32))
        if kind == "combined":
            fio.save_persistables(exe, target, filename="params")
        else:
            fio.save_inference_model(target + "/model", [x], [prob], exe)
        print(generation, flush=True)
        generation += 1
""")


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["combined", "inference"])
def test_a_killed_save_leaves_a_loadable_checkpoint(tmp_path, kind):
    script = tmp_path / "saver.py"
    script.write_text(_SAVER)
    target = str(tmp_path / "ckpt")
    rng = random.Random(1)
    last_done = -1
    start_generation = 0
    for round_ in range(4):
        proc = subprocess.Popen([sys.executable, str(script), target, kind, str(start_generation)],
                                stdout=subprocess.PIPE, text=True)
        try:
            done = int(proc.stdout.readline())          # one complete save, then kill mid-loop
            time.sleep(rng.uniform(0.0, 0.4))
        finally:
            proc.send_signal(signal.SIGKILL)
            rest = proc.communicate()[0]
        finished = [int(v) for v in rest.split()] + [done]
        last_done = max(finished)
        # Load: every tensor is from one complete save, no older than the last one reported done.
        with fj.program_guard(fj.Program(), fj.Program()), fj.unique_name.guard():
            x = layer.data("x", shape=[512])
            layer.fc(layer.fc(x, output_size=512), output_size=512)
            scope = fj.Scope()
            if kind == "combined":
                fio.load_persistables(None, target, filename="params", scope=scope)
            else:
                fio.load_inference_model(target + "/model", None, scope=scope)
        values = {float(np.asarray(scope.find_var(n).get_tensor()).flat[0]) for n in scope.local_var_names()}
        assert len(values) == 1, values
        generation = values.pop()
        assert last_done <= generation <= last_done + 1
        start_generation = int(generation) + 1


def test_a_missing_parameters_file_is_named(tmp_path):
    prefix, exe = _model(tmp_path)
    os.remove(prefix + ".pdiparams")
    with pytest.raises(TensorFormatError, match="no parameters file"):
        fio.load_inference_model(prefix, exe, scope=fj.Scope())
    folder = tmp_path / "fluid1"
    fio.save_program_files(str(folder), fio.read_program(prefix + ".pdmodel"), fj.global_scope(), combined=False)
    os.remove(folder / "fc_0.w_0")
    with pytest.raises(TensorFormatError, match=r"fc_0\.w_0: no such file"):
        fio.load_inference_model(str(folder), exe, scope=fj.Scope())


def test_a_paddle_3_json_program_is_named(tmp_path):
    prefix, exe = _model(tmp_path)
    os.replace(prefix + ".pdmodel", prefix + ".json")
    with pytest.raises(fj.ProgramFormatError, match="PIR"):
        fio.load_inference_model(prefix, exe, scope=fj.Scope())
    open(prefix + ".pdmodel", "w").write('{"program": {"regions": []}}')
    with pytest.raises(fj.ProgramFormatError, match="JSON, not a ProgramDesc"):
        fio.load_inference_model(prefix, exe, scope=fj.Scope())
