"""The fused ``rnn`` op in whole programs, both ways against Paddle 2.6.2.

- A ``paddle.nn.LSTM`` classifier (2 layers, bidirectional) built by Paddle in static mode, with
  Paddle's backward (``rnn_grad``), parsed here from its bytes and run with Paddle's parameters:
  the same loss and parameter gradients; with ``sequence_length`` the same outputs; a GRU and a
  SimpleRNN the same way.
- ``layer.lstm`` / ``layer.gru`` / ``layer.simple_rnn`` programs run by Paddle: the same outputs
  and gradients.
- Dropout between layers (training): a fixed seed gives a fixed mask, and the gradient through
  it agrees with finite differences (the backward drops what the forward dropped).
"""

from __future__ import annotations

import numpy as np
import pytest

import fluidjax as fj
from fluidjax import layer
from fluidjax.ir.errors import ShapeError

import paddle_oracle as po  # noqa: E402  (imports paddle after fluidjax)
import paddle  # noqa: E402

_B, _T, _I, _H, _CLASSES = 4, 6, 5, 8, 3


def _paddle_params(startup, main) -> dict[str, np.ndarray]:
    scope = paddle.static.Scope()
    with paddle.static.scope_guard(scope):
        paddle.static.Executor(paddle.CPUPlace()).run(startup)
    return {p.name: np.array(scope.find_var(p.name).get_tensor()) for p in main.all_parameters()}


def _run_here(program, feed, fetch, params):
    scope = fj.Scope()
    for name, value in params.items():
        scope.var(name).get_mutable(fj.LoDTensor).set(value)
    return fj.Executor().run(program, feed=feed, fetch_list=fetch, scope=scope)


def _paddle_classifier(cls, lengths: bool, time_major: bool = False, **kwargs):
    """Paddle's static program: x [B, T, I] (or [T, B, I]) -> rnn -> mean over time -> Linear ->
    softmax cross entropy; returns (its forward bytes, the program with Paddle's backward, out,
    loss)."""
    paddle.enable_static()
    main, startup = paddle.static.Program(), paddle.static.Program()
    startup.random_seed = 11            # the same parameters every run
    with paddle.static.program_guard(main, startup):
        x = paddle.static.data("x", [_T, _B, _I] if time_major else [_B, _T, _I], "float32")
        label = paddle.static.data("label", [_B, 1], "int64")
        seq = paddle.static.data("lengths", [_B], "int32") if lengths else None
        rnn = cls(_I, _H, time_major=time_major, **kwargs)
        out, _ = rnn(x, sequence_length=seq)
        logits = paddle.nn.Linear(out.shape[-1], _CLASSES)(paddle.mean(out, axis=0 if time_major else 1))
        if time_major:
            # Paddle's own grad ops are parsed and run here too: a squared error, whose grad ops
            # (unlike tanh_grad, transpose2_grad or softmax_with_cross_entropy_grad, which read the
            # forward's outputs) fluidjax runs from Paddle's programs.
            loss = paddle.mean(paddle.square(logits - paddle.cast(label, "float32")))
        else:
            loss = paddle.mean(paddle.nn.functional.cross_entropy(logits, label))
        forward = main.desc.serialize_to_string()
        paddle.static.append_backward(loss)
    return forward, main, startup, out, loss


def _feed(rng, lengths: bool, time_major: bool = False):
    feed = {"x": rng.uniform(-1, 1, (_T, _B, _I) if time_major else (_B, _T, _I)).astype("float32"),
            "label": rng.integers(0, _CLASSES, (_B, 1)).astype("int64")}
    if lengths:
        feed["lengths"] = np.array([_T, 2, 4, 1], "int32")
    return feed


def _param_grads(main) -> list[str]:
    return [p.name + "@GRAD" for p in main.all_parameters() if main.global_block().has_var(p.name + "@GRAD")]


_MODELS = [
    (paddle.nn.LSTM, dict(num_layers=2, direction="bidirect")),
    (paddle.nn.GRU, dict(num_layers=2, direction="bidirect")),
    (paddle.nn.SimpleRNN, dict(num_layers=2, activation="relu")),
    (paddle.nn.LSTM, dict(num_layers=1, direction="forward")),
]
_IDS = ["lstm-2-bidirect", "gru-2-bidirect", "simple-rnn-relu-2", "lstm-1"]


@pytest.mark.parametrize("cls,kwargs", _MODELS, ids=_IDS)
def test_paddle_rnn_classifier_runs_here(cls, kwargs):
    """Paddle's forward program parsed here, fj.append_backward on it: Paddle's loss, outputs and
    parameter gradients (from Paddle's own backward)."""
    forward, main, startup, out, loss = _paddle_classifier(cls, False, **kwargs)
    params = _paddle_params(startup, main)
    prog = fj.Program.parse(forward)
    with fj.program_guard(prog):
        params_grads = fj.append_backward(prog.global_block().var(loss.name))
    grads = _param_grads(main)
    assert len(grads) >= 4 * kwargs["num_layers"] + 2          # every rnn weight, Linear's two
    assert set(grads) <= {g.name for _, g in params_grads}
    fetch = [loss.name, out.name] + grads
    feed = _feed(np.random.default_rng(0), False)
    theirs = po.run(main, feed, fetch, params)
    ours = _run_here(prog, feed, fetch, params)
    for name, a, b in zip(fetch, ours, theirs):
        np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-6, err_msg=name)


@pytest.mark.parametrize("cls,kwargs", _MODELS[:2], ids=_IDS[:2])
def test_paddle_rnn_backward_program_runs_here(cls, kwargs):
    """Paddle's program with Paddle's backward (its rnn_grad op) parsed and run here."""
    _, main, startup, out, loss = _paddle_classifier(cls, False, time_major=True, **kwargs)
    assert any(op.type == "rnn_grad" for op in main.global_block().ops)
    params = _paddle_params(startup, main)
    prog = fj.Program.parse(main.desc.serialize_to_string())
    fetch = [loss.name, out.name] + _param_grads(main)
    feed = _feed(np.random.default_rng(5), False, time_major=True)
    theirs = po.run(main, feed, fetch, params)
    ours = _run_here(prog, feed, fetch, params)
    for name, a, b in zip(fetch, ours, theirs):
        np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-6, err_msg=name)


def test_paddle_lstm_with_sequence_length_runs_here():
    """Rows shorter than the batch: outputs and loss are Paddle's. (Paddle's rnn_grad disagrees
    with finite differences for the backward direction with lengths — see
    tests/optable/rnn_cases.py — so its gradients are not the oracle here.)"""
    forward, main, startup, out, loss = _paddle_classifier(paddle.nn.LSTM, True, num_layers=2,
                                                           direction="bidirect")
    params = _paddle_params(startup, main)
    prog = fj.Program.parse(forward)
    feed = _feed(np.random.default_rng(1), True)
    fetch = [loss.name, out.name]
    ours, theirs = _run_here(prog, feed, fetch, params), po.run(main, feed, fetch, params)
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
    assert not np.any(ours[1][3, 1:]), "outputs past a row's length are zeros"


def _layer_program(kind: str, lengths: bool, bidirec: bool = True):
    main, startup = fj.Program(), fj.Program()
    with fj.unique_name.guard(), fj.program_guard(main, startup):
        x = main.global_block().create_var("x", (_T, -1, _I), "float32")
        x.stop_gradient = False
        seq = main.global_block().create_var("lengths", (-1,), "int32") if lengths else None
        if kind == "lstm":
            out, last_h, last_c = layer.lstm(x, None, None, _T, _H, num_layers=2, is_bidirec=bidirec,
                                             sequence_length=seq)
            finals = [last_h, last_c]
        elif kind == "gru":
            out, last_h = layer.gru(x, None, _H, num_layers=2, is_bidirec=bidirec, sequence_length=seq)
            finals = [last_h]
        else:
            out, last_h = layer.simple_rnn(x, None, _H, num_layers=2, activation="tanh", is_bidirec=bidirec,
                                           sequence_length=seq)
            finals = [last_h]
        # The LSTM's last_c is left out of the loss: its State@GRAD is then zeros (fill_any_like),
        # as Paddle writes it (Paddle's rnn_grad crashes on an empty one).
        loss = layer.mean(out) + layer.mean(layer.square(finals[0]))
        fj.append_backward(loss)
    return main, startup, x, out, finals, loss


@pytest.mark.parametrize("kind", ["lstm", "gru", "simple_rnn"])
def test_rnn_layers_run_in_paddle(kind):
    main, startup, x, out, finals, loss = _layer_program(kind, lengths=False)
    assert out.shape == (_T, -1, 2 * _H) and finals[0].shape == (4, -1, _H)
    scope = fj.Scope()
    exe = fj.Executor()
    exe.run(startup, scope=scope)
    params = {p.name: np.asarray(scope.find_var(p.name).get_tensor()) for p in main.all_parameters()}
    feed = {"x": np.random.default_rng(2).uniform(-1, 1, (_T, _B, _I)).astype("float32")}
    fetch = [loss.name, out.name] + [f.name for f in finals] + ["x@GRAD"] + [p + "@GRAD" for p in params]
    ours = exe.run(main, feed=feed, fetch_list=fetch, scope=scope)
    theirs = po.run(main.serialize(), feed, fetch, params)
    for name, a, b in zip(fetch, ours, theirs):
        np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-6, err_msg=name)


def test_lstm_layer_with_lengths_runs_in_paddle_forward():
    main, startup, x, out, finals, loss = _layer_program("lstm", lengths=True)
    scope = fj.Scope()
    exe = fj.Executor()
    exe.run(startup, scope=scope)
    params = {p.name: np.asarray(scope.find_var(p.name).get_tensor()) for p in main.all_parameters()}
    feed = {"x": np.random.default_rng(3).uniform(-1, 1, (_T, _B, _I)).astype("float32"),
            "lengths": np.array([3, _T, 1, 5], "int32")}
    fetch = [out.name] + [f.name for f in finals]
    ours = exe.run(main, feed=feed, fetch_list=fetch, scope=scope)
    theirs = po.run(main.serialize(), feed, fetch, params)
    for name, a, b in zip(fetch, ours, theirs):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6, err_msg=name)


def test_dropout_between_layers_is_seeded_and_differentiated_consistently():
    """Training with dropout 0.5 and a fixed seed: two runs draw the same mask, about half the
    first layer's outputs are dropped, and the gradient (through the saved DropoutState) agrees
    with finite differences of the loss."""
    main, startup = fj.Program(), fj.Program()
    with fj.unique_name.guard(), fj.program_guard(main, startup):
        x = main.global_block().create_var("x", (_T, _B, _I), "float64")
        x.stop_gradient = False
        h0 = main.global_block().create_var("h0", (2, _B, _H), "float64")
        out, last_h = layer.gru(x, h0, _H, num_layers=2, dropout_prob=0.5, seed=7)
        loss = layer.mean(layer.square(out))
        fj.append_backward(loss)
    rnn_op = next(op for op in main.global_block().ops if op.type == "rnn")
    drop_name = rnn_op.output("DropoutState")[0]
    scope = fj.Scope()
    exe = fj.Executor()
    exe.run(startup, scope=scope)
    rng = np.random.default_rng(4)
    feed = {"x": rng.uniform(-1, 1, (_T, _B, _I)), "h0": rng.uniform(-1, 1, (2, _B, _H))}
    l1, mask, gx = exe.run(main, feed=feed, fetch_list=[loss, drop_name, "x@GRAD"], scope=scope)
    l2, = exe.run(main, feed=feed, fetch_list=[loss], scope=scope)
    # the same mask both times (another mask changes the loss far beyond this); the two steps are compiled
    # for different fetch lists, which XLA may fuse differently (an ulp)
    np.testing.assert_allclose(l1, l2, rtol=1e-12)
    assert mask.shape == (1, _T, _B, _H) and 0.3 < mask.mean() < 0.7
    eps = 1e-6
    for idx in [(0, 0, 0), (3, 2, 1), (5, 3, 4)]:
        plus, minus = feed["x"].copy(), feed["x"].copy()
        plus[idx] += eps
        minus[idx] -= eps
        lp, = exe.run(main, feed={**feed, "x": plus}, fetch_list=[loss], scope=scope)
        lm, = exe.run(main, feed={**feed, "x": minus}, fetch_list=[loss], scope=scope)
        np.testing.assert_allclose(gx[idx], (lp - lm) / (2 * eps), rtol=1e-5, atol=1e-9)


def test_rnn_layer_errors_name_the_problem():
    main, startup = fj.Program(), fj.Program()
    with fj.program_guard(main, startup):
        x = main.global_block().create_var("x", (_T, -1, _I), "float32")
        bad_h = main.global_block().create_var("h", (3, -1, _H), "float32")
        with pytest.raises(ShapeError, match="init_h"):
            layer.lstm(x, bad_h, None, _T, _H, num_layers=2, is_bidirec=False)
        with pytest.raises(ShapeError, match="max_len"):
            layer.lstm(x, None, None, _T + 1, _H)
        flat = main.global_block().create_var("flat", (-1, _I), "float32")
        with pytest.raises(ShapeError, match="time-major"):
            layer.gru(flat, None, _H)
        with pytest.raises(ValueError, match="activation"):
            layer.simple_rnn(x, None, _H, activation="gelu")


def _lstm_training_program():
    main, startup = fj.Program(), fj.Program()
    with fj.unique_name.guard(), fj.program_guard(main, startup):
        x = main.global_block().create_var("x", (_T, -1, _I), "float32")
        x.stop_gradient = False
        out, last_h, last_c = layer.lstm(x, None, None, _T, _H, num_layers=2)
        loss = layer.mean(layer.square(out))
        fj.append_backward(loss)
    return main, startup, loss


def _while_loops(hlo_text: str) -> int:
    import re

    return len(re.findall(r"\bwhile\(", hlo_text))


def test_training_step_runs_each_scan_once_like_jax():
    """rnn_grad reuses the forward's residuals (Reserve): the compiled step has as many loops as
    jax.value_and_grad of the same two scans (one forward and one backward per layer), not a
    third per layer for a recomputed forward."""
    import jax
    import jax.numpy as jnp

    from fluidjax.lowering.ops.rnn import rnn_forward

    main, startup, loss = _lstm_training_program()
    scope, exe = fj.Scope(), fj.Executor()
    exe.run(startup, scope=scope)
    feed = {"x": np.zeros((_T, _B, _I), "float32")}
    fetch = [loss.name] + [p.name + "@GRAD" for p in main.all_parameters()]
    ours = _while_loops(exe.lower(main, feed, fetch, scope).compile().as_text())
    rnn_op = next(op for op in main.global_block().ops if op.type == "rnn")
    weights = [np.asarray(scope.find_var(n).get_tensor()) for n in rnn_op.input("WeightList")]
    states = [jnp.zeros((2, _B, _H))] * 2

    def jax_loss(ws, x):
        out, _ = rnn_forward("LSTM", x, states, ws, None, 2, 1)
        return jnp.mean(out ** 2)

    theirs = _while_loops(jax.jit(jax.value_and_grad(jax_loss)).lower(weights, feed["x"]).compile().as_text())
    assert ours == theirs == 4


def test_gradient_without_saved_residuals_is_the_same(monkeypatch):
    """Where no Reserve of the same run is at hand (the forward op does not see its grad op), the
    gradient recomputes the forward: the same numbers."""
    import fluidjax.lowering.ops.rnn as rnn_module

    main, startup, loss = _lstm_training_program()
    scope, exe = fj.Scope(), fj.Executor()
    exe.run(startup, scope=scope)
    feed = {"x": np.random.default_rng(6).uniform(-1, 1, (_T, _B, _I)).astype("float32")}
    fetch = ["x@GRAD"] + [p.name + "@GRAD" for p in main.all_parameters()]
    saved = exe.run(main, feed=feed, fetch_list=fetch, scope=scope)
    monkeypatch.setattr(rnn_module, "grad_op_of", lambda *args: None)
    main2, _, _ = _lstm_training_program()
    recomputed = fj.Executor().run(main2, feed=feed, fetch_list=fetch, scope=scope)
    for name, a, b in zip(fetch, saved, recomputed):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7, err_msg=name)


def test_bidirectional_lstm_classifier_trains_like_paddle():
    """paddle.nn.LSTM (2 layers, bidirectional) classifier, Paddle's forward program: 10 Adam steps
    here (parsed, fj.append_backward via minimize) and in Paddle (its own backward and Adam) from
    the same parameters on the same batches: the same losses."""
    forward, main, startup, out, loss = _paddle_classifier(paddle.nn.LSTM, False, num_layers=2,
                                                           direction="bidirect")
    params = _paddle_params(startup, main)
    # One batch, fitted for 10 steps: its loss must fall (random labels do not fall batch to batch).
    batches = [_feed(np.random.default_rng(8), False)] * 10

    prog = fj.Program.parse(forward)
    startup_here = fj.Program()
    with fj.program_guard(prog, startup_here):
        fj.optimizer.Adam(learning_rate=0.01).minimize(prog.global_block().var(loss.name))
    scope, exe = fj.Scope(), fj.Executor()
    exe.run(startup_here, scope=scope)
    for name, value in params.items():
        scope.var(name).get_mutable(fj.LoDTensor).set(value)
    ours = [float(exe.run(prog, feed=b, fetch_list=[loss.name], scope=scope)[0]) for b in batches]

    paddle_main = paddle.static.Program.parse_from_string(forward)
    paddle_startup = paddle.static.Program()
    with paddle.static.program_guard(paddle_main, paddle_startup):
        paddle.optimizer.Adam(learning_rate=0.01).minimize(paddle_main.global_block().var(loss.name))
    pscope, place = paddle.static.Scope(), paddle.CPUPlace()
    pexe = paddle.static.Executor(place)
    with paddle.static.scope_guard(pscope):
        pexe.run(paddle_startup)
        for name, value in params.items():
            pscope.var(name).get_tensor().set(value, place)
        theirs = [float(pexe.run(paddle_main, feed=b, fetch_list=[loss.name])[0]) for b in batches]
    assert ours[-1] < ours[0]
    np.testing.assert_allclose(ours, theirs, rtol=1e-4)
