"""``layers.Print`` and ``layers.py_func`` (issue 20): Print's text against Paddle 2.6.2 printing the same
serialized program, its pass-through, ``first_n`` and ``print_phase``; py_func's forward and backward
against NumPy."""

from __future__ import annotations

import jax  # noqa: F401  (before paddle)
import numpy as np
import pytest

import fluidjax as fluid
import paddle_oracle as po
from fluidjax.ir.errors import OpRuntimeError

L = fluid.layers


def _program(build):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        fetch = build()
    return main, startup, fetch


def test_print_writes_what_paddle_writes_and_passes_the_value(capfd):
    xv = np.arange(9, dtype="float32").reshape(3, 3) / 3
    iv = np.array([1, 2], "int64")

    def build():
        x = fluid.data("x", [-1, 3], "float32", lod_level=1)
        i = fluid.data("i", [-1], "int64")
        y = L.Print(x, message="hello", summarize=4)
        j = L.Print(i, print_tensor_lod=False, print_tensor_type=False, summarize=-1)
        return [y, j]

    main, _, (y, j) = _program(build)
    capfd.readouterr()
    got = fluid.Executor(fluid.CPUPlace()).run(
        main, feed={"x": fluid.create_lod_tensor(xv, [[1, 2]], fluid.CPUPlace()), "i": iv}, fetch_list=[y, j],
        return_numpy=False)
    ours = capfd.readouterr().out
    np.testing.assert_array_equal(np.array(got[0]), xv)
    assert got[0].recursive_sequence_lengths() == [[1, 2]]
    np.testing.assert_array_equal(np.array(got[1]), iv)
    po.run(main.serialize(), {"x": xv, "i": iv}, [y.name, j.name], lods={"x": [[1, 2]]})
    theirs = capfd.readouterr().out
    theirs = "\n".join(line for line in theirs.splitlines() if not line.startswith(("I1", "W1"))) + "\n"
    assert ours == theirs
    assert "  - lod: {{0, 1, 3}}\n" in ours and "  - data: [0 0.333333 0.666667 1]\n" in ours


def test_print_with_its_result_dropped_still_prints(capfd):
    """Fluid's idiom: `fluid.layers.Print(x)` on a line of its own, nothing fetched depends on the
    print; Fluid ran every op, so the run prints (the plan keeps print ops like state writes)."""
    xv = np.arange(6, dtype="float32").reshape(2, 3)

    def build():
        x = fluid.data("x", [-1, 3], "float32")
        L.Print(x, message="dropped")
        return [L.reduce_sum(x)]

    main, _, (total,) = _program(build)
    capfd.readouterr()
    got, = fluid.Executor(fluid.CPUPlace()).run(main, feed={"x": xv}, fetch_list=[total])
    out = capfd.readouterr().out
    assert float(got) == xv.sum()
    assert "dropped" in out and "  - data: [0 1 2 3 4 5]" in out, out


def test_print_and_py_func_of_constants_act_on_every_run(capfd):
    """A Print or py_func whose input is a constant (fill_constant) acts each time the program
    runs, as in Fluid: small constant arithmetic is evaluated while tracing, but ops with an effect
    never are (they printed, or called the function, once at compile time and never again)."""
    calls = []

    def double(a):
        calls.append(1)
        return np.asarray(a) * 2

    def build():
        c = L.fill_constant([2], "float32", 3.0)
        shown = L.Print(c, message="a constant")
        out = fluid.default_main_program().global_block().create_var(name="doubled", shape=[2], dtype="float32")
        L.py_func(func=double, x=c, out=out)
        return [L.elementwise_add(shown, out)]

    main, _, (total,) = _program(build)
    exe = fluid.Executor(fluid.CPUPlace())
    capfd.readouterr()
    for _ in range(3):
        got, = exe.run(main, fetch_list=[total])
        np.testing.assert_array_equal(got, [9.0, 9.0])
    out = capfd.readouterr().out
    assert out.count("a constant") == 3, out
    assert len(calls) == 3


def test_print_first_n_and_phases(capfd):
    def build():
        x = fluid.data("x", [-1, 2], "float32")
        x.stop_gradient = False
        a = L.Print(x, first_n=2, message="fwd", print_phase="forward")
        b = L.Print(L.scale(a, 3.0), message="bwd", print_phase="backward")
        loss = L.reduce_sum(b)
        fluid.backward.append_backward(loss)
        return [loss]

    main, _, (loss,) = _program(build)
    exe = fluid.Executor(fluid.CPUPlace())
    capfd.readouterr()
    for _ in range(3):
        out, grad = exe.run(main, feed={"x": np.ones((2, 2), "float32")}, fetch_list=[loss, "x@GRAD"])
    text = capfd.readouterr().out
    assert float(out) == 12.0
    np.testing.assert_array_equal(grad, np.full((2, 2), 3.0))
    assert text.count("message: fwd") == 2                     # first_n=2 of three runs
    assert text.count("message: bwd") == 3                     # the gradient, every run
    assert "Variable: scale_0.tmp_0@GRAD" in text or "@GRAD\n  - message: bwd" in text
    assert "  - data: [1 1 1 1]" in text                        # d loss / d b
    with pytest.raises(ValueError):
        L.Print(fluid.data("z", [2], "float32"), print_phase="sideways")


def test_py_func_forward_and_backward_match_numpy():
    rng = np.random.default_rng(4)
    xv, wv = rng.uniform(-1, 1, (3, 4)).astype("float32"), rng.uniform(-1, 1, (3, 4)).astype("float32")
    seen = []

    def forward(x, w):
        return np.tanh(np.asarray(x) * np.asarray(w)), np.asarray(x).sum(1, keepdims=True)

    def backward(x, w, t, dt, ds):          # the sum's own output is skipped, its gradient kept
        seen.append(len((x, w, t, dt, ds)))
        x, w, t, dt, ds = map(np.asarray, (x, w, t, dt, ds))
        common = dt * (1 - t * t)
        return common * w + ds, common * x

    def build():
        x = fluid.data("x", [-1, 4], "float32")
        w = fluid.data("w", [-1, 4], "float32")
        x.stop_gradient = w.stop_gradient = False
        block = fluid.default_main_program().current_block()
        t = block.create_var(name="t", shape=[-1, 4], dtype="float32")
        s = block.create_var(name="s", shape=[-1, 1], dtype="float32")
        L.py_func(forward, [x, w], [t, s], backward_func=backward, skip_vars_in_backward_input=s)
        loss = L.reduce_sum(L.elementwise_mul(t, t)) + L.reduce_sum(L.scale(s, 2.0))
        fluid.backward.append_backward(loss)
        return [t, s, loss]

    main, _, (t, s, loss) = _program(build)
    got = fluid.Executor(fluid.CPUPlace()).run(main, feed={"x": xv, "w": wv},
                                               fetch_list=[t, s, loss, "x@GRAD", "w@GRAD"])
    tv = np.tanh(xv * wv)
    np.testing.assert_allclose(got[0], tv, rtol=1e-6)
    np.testing.assert_allclose(got[1], xv.sum(1, keepdims=True), rtol=1e-6)
    dt = 2 * tv * (1 - tv * tv)
    np.testing.assert_allclose(got[3], dt * wv + 2.0, rtol=1e-5)
    np.testing.assert_allclose(got[4], dt * xv, rtol=1e-5)
    assert seen and set(seen) == {5}


def test_py_func_without_backward_and_errors():
    def build():
        x = fluid.data("x", [-1, 2], "float32")
        out = fluid.default_main_program().current_block().create_var(name="o", shape=[-1, 2], dtype="float64")
        return [L.py_func(lambda a: np.asarray(a) ** 2, x, out)]

    main, _, (out,) = _program(build)
    exe = fluid.Executor(fluid.CPUPlace())
    (got,) = exe.run(main, feed={"x": np.array([[1, 2], [3, 4]], "float32")}, fetch_list=[out])
    assert got.dtype == np.float64 and got.tolist() == [[1, 4], [9, 16]]
    assert out.stop_gradient
    # the callable ids name this process's functions: a program whose id names none fails, saying why
    op = main.global_block().ops[-1]
    op.attrs["forward_callable_id"] = 10 ** 6
    with pytest.raises(OpRuntimeError, match="only in the process that built it"):
        fluid.Executor(fluid.CPUPlace()).run(main, feed={"x": np.ones((2, 2), "float32")}, fetch_list=[out])
    with pytest.raises(ValueError):
        L.py_func(lambda a: a, fluid.data("y", [2], "float32"), [1])
