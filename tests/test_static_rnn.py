"""StaticRNN (Paddle's ``recurrent`` op, lowered to one lax.scan) checked against Paddle 2.6.2.

Paddle 2.6 no longer has a StaticRNN class, but still runs its op: Paddle's side is built with
``block.append_op`` as Fluid's StaticRNN built it. Both ways: Paddle's programs (with Paddle's own
``recurrent_grad`` and grad block) parsed and run here; fluidjax's StaticRNN / ``layer.rnn``
programs run by Paddle. Gradients equal Paddle's where Paddle's backward is right (steps sharing
only parameters); through a memory, Paddle 2.6's backward drops the memory path, so there the
oracle is finite differences of Paddle's own forward. A parameter read inside the step gets its
gradient (the case Fluid users found broken).
"""

from __future__ import annotations

import numpy as np
import pytest

import fluidjax as fj
from fluidjax import layer
from fluidjax.frontend.layer_helper import LayerHelper
from fluidjax.frontend.param_attr import ParamAttr
from fluidjax.ir.errors import ShapeError

import paddle_oracle as po  # noqa: E402  (imports paddle after fluidjax)
import paddle  # noqa: E402
from paddle.base import core  # noqa: E402

_T, _B, _I, _H = 5, 3, 4, 6


def _feed(rng, dtype="float32"):
    return {"x": rng.uniform(-1, 1, (_T, _B, _I)).astype(dtype), "h0": rng.uniform(-1, 1, (_B, _H)).astype(dtype)}


def _paddle_static_rnn(reverse: bool = False, memory: bool = True, dtype: str = "float32"):
    """Fluid's StaticRNN structure built with Paddle's block API: h_t = tanh(fc(x_t) + h_{t-1}·W)
    (without ``memory``: tanh(fc(x_t)·W)), W an outer parameter read in the step; loss =
    mean(out²). Returns (forward bytes, program with Paddle's backward, startup, out, loss)."""
    paddle.enable_static()
    main, startup = paddle.static.Program(), paddle.static.Program()
    startup.random_seed = 11            # the same parameters every run
    with paddle.static.program_guard(main, startup):
        x = paddle.static.data("x", [_T, _B, _I], dtype)
        x.stop_gradient = False
        h0 = paddle.static.data("h0", [_B, _H], dtype)
        h0.stop_gradient = False
        w = paddle.static.create_parameter([_H, _H], dtype, name="w_outer")
        parent = main.current_block()
        sub = main._create_block()
        xt = sub.create_var(name="x", shape=[_B, _I], dtype=dtype)
        if memory:
            mem = sub.create_var(name="mem", shape=[_B, _H], dtype=dtype)
            h = paddle.tanh(paddle.static.nn.fc(xt, _H) + paddle.matmul(mem, w))
        else:
            h = paddle.tanh(paddle.matmul(paddle.static.nn.fc(xt, _H), w))
        out_t = paddle.assign(h)
        new_mem = paddle.assign(h) if memory else None
        main._rollback()
        out = parent.create_var(name=out_t.name, shape=[_T, _B, _H], dtype=dtype)
        scopes = parent.create_var(type=core.VarDesc.VarType.STEP_SCOPES)
        parent.append_op(type="recurrent",
                         inputs={"inputs": [x], "initial_states": [h0] if memory else [],
                                 "parameters": main.all_parameters()},
                         outputs={"outputs": [out], "step_scopes": [scopes]},
                         attrs={"has_states": memory, "ex_states": ["mem"] if memory else [],
                                "states": [new_mem.name] if memory else [], "sub_block": sub,
                                "reverse": reverse, "is_train": True})
        loss = paddle.mean(out * out)
        forward = main.desc.serialize_to_string()
        paddle.static.append_backward(loss)
    return forward, main, startup, out.name, loss.name


def _paddle_params(startup, main):
    scope = paddle.static.Scope()
    with paddle.static.scope_guard(scope):
        paddle.static.Executor(paddle.CPUPlace()).run(startup)
    return {p.name: np.array(scope.find_var(p.name).get_tensor()) for p in main.all_parameters()}


def _run_here(program, feed, fetch, params):
    scope = fj.Scope()
    for name, value in params.items():
        scope.var(name).get_mutable(fj.LoDTensor).set(value)
    return fj.Executor().run(program, feed=feed, fetch_list=fetch, scope=scope)


def _grads(params, memory: bool = True):
    return ["x@GRAD"] + (["h0@GRAD"] if memory else []) + [p + "@GRAD" for p in params]


def test_paddle_static_rnn_without_memory_same_gradients_as_paddle():
    """Steps that share only parameters: Paddle's backward (recurrent_grad naming its grad block)
    parsed and run here; outputs and every gradient are Paddle's."""
    _, main, startup, out, loss = _paddle_static_rnn(memory=False)
    params = _paddle_params(startup, main)
    prog = fj.Program.parse(main.desc.serialize_to_string())
    assert any(op.type == "recurrent_grad" for op in prog.global_block().ops)
    fetch = [out, loss] + _grads(params, memory=False)
    feed = _feed(np.random.default_rng(0))
    theirs = po.run(main, feed, fetch, params)
    ours = _run_here(prog, feed, fetch, params)
    for name, a, b in zip(fetch, ours, theirs):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6, err_msg=name)
    assert np.any(ours[fetch.index("w_outer@GRAD")])


@pytest.mark.parametrize("reverse", [False, True], ids=["forward", "reverse"])
def test_paddle_static_rnn_with_memory_runs_here(reverse):
    """With a memory: outputs are Paddle's; gradients (from Paddle's backward program parsed here,
    and from fj.append_backward on Paddle's forward program) agree with finite differences of
    Paddle's own forward. Paddle 2.6's backward itself drops the path through the memory (its grad
    block omits the state's copy, which Fluid's removed rnn_memory_helper_grad used to carry), so
    its gradients are not the oracle here."""
    forward, main, startup, out, loss = _paddle_static_rnn(reverse, dtype="float64")
    params = _paddle_params(startup, main)
    feed = _feed(np.random.default_rng(1), "float64")
    with_paddle_backward = fj.Program.parse(main.desc.serialize_to_string())
    ours_backward = fj.Program.parse(forward)
    with fj.program_guard(ours_backward):
        fj.append_backward(ours_backward.global_block().var(loss))
    fetch = [out, loss] + _grads(params)
    a = _run_here(with_paddle_backward, feed, fetch, params)
    b = _run_here(ours_backward, feed, fetch, params)
    theirs = po.run(main, feed, fetch[:2], params)
    for name, x, y in zip(fetch, a, b):
        np.testing.assert_allclose(x, y, rtol=1e-12, atol=1e-14, err_msg=name)
    for name, x, y in zip(fetch[:2], a, theirs):
        np.testing.assert_allclose(x, y, rtol=1e-10, atol=1e-12, err_msg=name)
    paddle_forward = po.parse(forward)
    eps = 1e-6

    def paddle_loss(name, value):
        values = {**feed, **params, name: value}
        fd_feed = {k: v for k, v in values.items() if k in feed}
        fd_params = {k: v for k, v in values.items() if k in params}
        return float(po.run(paddle_forward, fd_feed, [loss], fd_params)[0])

    rng = np.random.default_rng(2)
    for name, grad in zip(fetch[2:], a[2:]):
        base = {**feed, **params}[name[:-5]]
        for k in rng.choice(base.size, 3, replace=False):
            idx = np.unravel_index(k, base.shape)
            plus, minus = base.copy(), base.copy()
            plus[idx] += eps
            minus[idx] -= eps
            numeric = (paddle_loss(name[:-5], plus) - paddle_loss(name[:-5], minus)) / (2 * eps)
            np.testing.assert_allclose(grad[idx], numeric, rtol=1e-5, atol=1e-9, err_msg=f"{name}{list(idx)}")


def _fluidjax_static_rnn(dtype="float32", spelling="class"):
    """h_t = tanh(fc([x_t, h_{t-1}]) + h_{t-1}·W_outer), W_outer made before the loop; the memory
    starts from h0 (and a second, zeros from batch_ref, counts steps); out = the h_t."""
    main, startup = fj.Program(), fj.Program()
    with fj.unique_name.guard(), fj.program_guard(main, startup):
        block = main.global_block()
        x = block.create_var("x", (_T, -1, _I), dtype)
        x.stop_gradient = False
        h0 = block.create_var("h0", (-1, _H), dtype)
        h0.stop_gradient = False
        w = LayerHelper("outer").create_parameter(ParamAttr(name="w_outer"), (_H, _H), dtype)

        def step(word, prev, count):
            h = layer.tanh(layer.fc([word, prev], _H) + layer.matmul(prev, w))
            return [h, count], [h, count + 1.0]

        if spelling == "class":
            rnn = layer.StaticRNN()
            with rnn.step():
                word = rnn.step_input(x)
                prev = rnn.memory(init=h0)
                count = rnn.memory(shape=[-1, 1], batch_ref=word, init_value=0.0)
                outs, news = step(word, prev, count)
                for mem, new in zip((prev, count), news):
                    rnn.update_memory(mem, new)
                rnn.output(*outs)
            out, counts = rnn()
        else:
            out, counts = layer.rnn(step_net=step, inputs=[x],
                                    memories=[h0, dict(shape=[-1, 1], batch_ref=x, init_value=0.0)])
        loss = layer.mean(out * out)
    return main, startup, out, counts, loss


def _numpy_reference(feed, params):
    """The same recurrence in NumPy."""
    w_x, w_h, b = params["fc_0.w_0"], params["fc_0.w_1"], params["fc_0.b_0"]
    h = feed["h0"]
    outs = []
    for t in range(_T):
        h = np.tanh(feed["x"][t] @ w_x + h @ w_h + b + h @ params["w_outer"])
        outs.append(h)
    return np.stack(outs)


@pytest.mark.parametrize("spelling", ["class", "seed"])
def test_fluidjax_static_rnn_runs_in_paddle(spelling):
    """fluidjax's StaticRNN (and the seed's layer.rnn spelling of it) run by Paddle: the same
    outputs, both equal to the recurrence written in NumPy. (Gradients: see the finite-difference
    test below; Paddle 2.6's backward drops the path through memories.)"""
    main, startup, out, counts, loss = _fluidjax_static_rnn(spelling=spelling)
    assert out.shape == (_T, -1, _H) and counts.shape == (_T, -1, 1)
    assert [op.type for op in main.global_block().ops].count("recurrent") == 1
    scope = fj.Scope()
    exe = fj.Executor()
    exe.run(startup, scope=scope)
    params = {p.name: np.asarray(scope.find_var(p.name).get_tensor()) for p in main.all_parameters()}
    assert set(params) == {"w_outer", "fc_0.w_0", "fc_0.w_1", "fc_0.b_0"}
    feed = _feed(np.random.default_rng(2))
    fetch = [out.name, counts.name, loss.name]
    ours = exe.run(main, feed=feed, fetch_list=fetch, scope=scope)
    np.testing.assert_allclose(ours[0], _numpy_reference(feed, params), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(ours[1][:, :, 0], np.arange(_T)[:, None].repeat(_B, 1))
    theirs = po.run(main.serialize(), feed, fetch, params)
    for name, a, b in zip(fetch, ours, theirs):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6, err_msg=name)


def test_outer_parameter_gradient_matches_finite_differences():
    """The Fluid bug: a parameter read inside the step (W_outer, and fc's weights) must get its
    gradient. float64, against central differences of the loss."""
    main, startup, out, counts, loss = _fluidjax_static_rnn(dtype="float64")
    with fj.program_guard(main, startup):
        fj.append_backward(loss)
    scope = fj.Scope()
    exe = fj.Executor()
    exe.run(startup, scope=scope)
    feed = _feed(np.random.default_rng(3), "float64")
    grads = exe.run(main, feed=feed, fetch_list=["w_outer@GRAD", "fc_0.w_1@GRAD", "h0@GRAD"], scope=scope)
    w = np.asarray(scope.find_var("w_outer").get_tensor()).copy()
    eps = 1e-6

    def loss_with(name, value):
        scope.var(name).get_mutable(fj.LoDTensor).set(value)
        return float(exe.run(main, feed=feed, fetch_list=[loss], scope=scope)[0])

    assert np.abs(grads[0]).max() > 1e-3
    for idx in [(0, 0), (2, 5), (5, 1)]:
        plus, minus = w.copy(), w.copy()
        plus[idx] += eps
        minus[idx] -= eps
        numeric = (loss_with("w_outer", plus) - loss_with("w_outer", minus)) / (2 * eps)
        np.testing.assert_allclose(grads[0][idx], numeric, rtol=1e-6, atol=1e-10)
    scope.var("w_outer").get_mutable(fj.LoDTensor).set(w)
    for idx in [(0, 0), (2, 3)]:
        plus, minus = feed["h0"].copy(), feed["h0"].copy()
        plus[idx] += eps
        minus[idx] -= eps
        lp = float(exe.run(main, feed={**feed, "h0": plus}, fetch_list=[loss], scope=scope)[0])
        lm = float(exe.run(main, feed={**feed, "h0": minus}, fetch_list=[loss], scope=scope)[0])
        np.testing.assert_allclose(grads[2][idx], (lp - lm) / (2 * eps), rtol=1e-6, atol=1e-10)


def test_static_rnn_misuse_is_a_clear_error():
    main, startup = fj.Program(), fj.Program()
    with fj.program_guard(main, startup):
        x = main.global_block().create_var("x", (_T, -1, _I), "float32")
        rnn = layer.StaticRNN()
        with pytest.raises(ValueError, match="inside"):
            rnn.step_input(x)
        with pytest.raises(ValueError, match="never updated"):
            with rnn.step():
                rnn.step_input(x)
                rnn.memory(shape=[-1, 3], batch_ref=x)
        other = layer.StaticRNN()
        with pytest.raises(ShapeError, match="one shape"):
            with other.step():
                word = other.step_input(x)
                prev = other.memory(shape=[-1, 3], batch_ref=x)
                other.update_memory(prev, layer.fc(word, 5))
        with pytest.raises(ValueError, match="new memories"):
            layer.rnn(step_net=lambda w, m: (w, []), inputs=[x], memories=[dict(shape=[-1, 3], batch_ref=x)])


def test_static_rnn_step_runs_its_scan_once_and_recomputation_agrees(monkeypatch):
    """recurrent_grad reuses the forward's residuals (step_scopes): one forward and one backward
    loop in the compiled step; with recomputation (no residuals at hand) the same gradients."""
    import re

    import fluidjax.lowering.ops.recurrent as recurrent_module

    main, startup, out, counts, loss = _fluidjax_static_rnn()
    with fj.program_guard(main, startup):
        fj.append_backward(loss)
    scope, exe = fj.Scope(), fj.Executor()
    exe.run(startup, scope=scope)
    feed = _feed(np.random.default_rng(7))
    fetch = [loss.name, "x@GRAD", "h0@GRAD", "w_outer@GRAD", "fc_0.w_0@GRAD"]
    hlo = exe.lower(main, feed, fetch, scope).compile().as_text()
    assert len(re.findall(r"\bwhile\(", hlo)) == 2
    saved = exe.run(main, feed=feed, fetch_list=fetch, scope=scope)
    monkeypatch.setattr(recurrent_module, "_grad_op_of", lambda op: None)
    main2, startup2, _, _, loss2 = _fluidjax_static_rnn()
    with fj.program_guard(main2, startup2):
        fj.append_backward(loss2)
    recomputed = fj.Executor().run(main2, feed=feed, fetch_list=fetch, scope=scope)
    for name, a, b in zip(fetch, saved, recomputed):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7, err_msg=name)


_V = 7          # classes of the language model's next-token softmax


def _language_model(kind: str):
    """A one-layer LSTM language model, x [T, B, I] -> LSTM(H) -> fc softmax over _V classes ->
    cross entropy against the next tokens, SGD: through StaticRNN (the cell written with two fc,
    so that it has b_ih and b_hh like the fused op) or through the fused rnn op."""
    main, startup = fj.Program(), fj.Program()
    with fj.unique_name.guard(), fj.program_guard(main, startup):
        block = main.global_block()
        x = block.create_var("x", (_T, -1, _I), "float32")
        label = block.create_var("label", (-1, 1), "int64")
        if kind == "static_rnn":
            rnn = layer.StaticRNN()
            with rnn.step():
                word = rnn.step_input(x)
                h_prev = rnn.memory(shape=[-1, _H], batch_ref=word)
                c_prev = rnn.memory(shape=[-1, _H], batch_ref=word)
                gates = layer.fc(word, 4 * _H) + layer.fc(h_prev, 4 * _H)
                i, f, g, o = layer.split(gates, 4, dim=1)
                c = layer.sigmoid(f) * c_prev + layer.sigmoid(i) * layer.tanh(g)
                h = layer.sigmoid(o) * layer.tanh(c)
                rnn.update_memory(h_prev, h)
                rnn.update_memory(c_prev, c)
                rnn.step_output(h)
            hidden = rnn()
        else:
            hidden, _, _ = layer.lstm(x, None, None, _T, _H)
        probs = layer.fc(layer.reshape(hidden, [-1, _H]), _V, activation="softmax")
        loss = layer.mean(layer.cross_entropy(probs, label))
        fj.optimizer.SGD(learning_rate=0.5).minimize(loss)
    return main, startup, loss


def test_static_rnn_language_model_trains_like_the_fused_lstm():
    """10 SGD steps of the same LSTM language model written with StaticRNN and with the fused rnn
    op, from the same parameters: the same losses (and the fused op's model trains like Paddle's:
    tests/test_rnn.py). Paddle 2.6 itself cannot train the StaticRNN form (its backward drops the
    memory path, see docs/recurrent.md)."""
    rng = np.random.default_rng(9)
    # One batch, fitted for 10 steps: its loss must fall (random labels do not fall batch to batch).
    batches = [{"x": rng.uniform(-1, 1, (_T, _B, _I)).astype("float32"),
                "label": rng.integers(0, _V, (_T * _B, 1)).astype("int64")}] * 10
    fused_main, fused_startup, fused_loss = _language_model("fused")
    static_main, static_startup, static_loss = _language_model("static_rnn")
    fused_scope, static_scope, exe = fj.Scope(), fj.Scope(), fj.Executor()
    exe.run(fused_startup, scope=fused_scope)
    exe.run(static_startup, scope=static_scope)
    rnn_op = next(op for op in fused_main.global_block().ops if op.type == "rnn")
    w_ih, w_hh, b_ih, b_hh = [np.asarray(fused_scope.find_var(n).get_tensor()) for n in rnn_op.input("WeightList")]
    static_params = [p.name for p in static_main.all_parameters()]   # fc(word): w, b; fc(h): w, b; head
    head = [p.name for p in fused_main.all_parameters()][-2:]
    values = {static_params[0]: w_ih.T.copy(), static_params[1]: b_ih, static_params[2]: w_hh.T.copy(),
              static_params[3]: b_hh}
    for ours, theirs in zip(static_params[4:], head):
        values[ours] = np.asarray(fused_scope.find_var(theirs).get_tensor())
    for name, value in values.items():
        static_scope.var(name).get_mutable(fj.LoDTensor).set(value)
    fused = [float(exe.run(fused_main, feed=b, fetch_list=[fused_loss], scope=fused_scope)[0]) for b in batches]
    static = [float(exe.run(static_main, feed=b, fetch_list=[static_loss], scope=static_scope)[0]) for b in batches]
    assert fused[-1] < fused[0]
    np.testing.assert_allclose(static, fused, rtol=1e-4)


def test_malformed_recurrent_ops_are_clear_errors():
    """A parsed recurrent op whose states do not pair with its ex_states, or whose state changes
    shape across a step, fails with an error naming the op / the state, not deep inside JAX."""
    from fluidjax.ir.errors import FluidJaxError

    main, startup, out, counts, loss = _fluidjax_static_rnn()
    data = main.serialize()
    feed = _feed(np.random.default_rng(10))
    scope, exe = fj.Scope(), fj.Executor()
    exe.run(startup, scope=scope)

    unpaired = fj.Program.parse(data)
    rec = next(op for op in unpaired.global_block().ops if op.type == "recurrent")
    rec.attrs["states"] = list(rec.attrs["states"])[:1]
    with pytest.raises(FluidJaxError, match="pair"):
        exe.run(unpaired, feed=feed, fetch_list=[out.name], scope=scope)

    reshaped = fj.Program.parse(data)
    rec = next(op for op in reshaped.global_block().ops if op.type == "recurrent")
    # The first state (h) is fed the step input's slice instead: [B, I], not [B, H].
    rec.attrs["states"] = ["x"] + list(rec.attrs["states"])[1:]
    with pytest.raises(ShapeError, match="state 'x'"):
        exe.run(reshaped, feed=feed, fetch_list=[out.name], scope=scope)
