"""append_backward: Paddle-style grad ops in the program, checked against Paddle and finite differences."""

import numpy as np
import pytest

import fluidjax as fj
import paddle_oracle as po
from fluidjax import layer


def _shared_use_model(dtype="float64"):
    """h feeds three ops, once twice (h * h), so its gradient sums four contributions."""
    x = layer.data("x", input_size=5, dtype=dtype)
    h = layer.fc(x, output_size=4, activation="tanh")
    y = h * h + h
    y = layer.elementwise_mul(y, h)
    loss = layer.mean(y)
    return x, h, loss


def test_contributions_are_summed_and_match_paddle_and_finite_differences():
    x, h, loss = _shared_use_model()
    forward_bytes = fj.default_main_program().serialize()
    pairs = fj.append_backward(loss)
    block = fj.default_main_program().global_block()
    sums = [op for op in block.ops if op.type == "sum"]
    assert any(op.output("Out") == [h.name + "@GRAD"] and len(op.input("X")) == 4 for op in sums)
    assert all("@RENAME@" in n for op in sums for n in op.input("X"))
    assert [p.name for p, _ in pairs] == ["fc_0.w_0", "fc_0.b_0"]
    assert block.var("fc_0.w_0@GRAD").shape == (5, 4) and block.var(h.name + "@GRAD").shape == (-1, 4)

    exe, scope = fj.Executor(), fj.Scope()
    exe.run(fj.default_startup_program(), scope=scope)
    xs = np.random.default_rng(0).normal(size=(6, 5))
    grads = exe.run(feed={"x": xs}, fetch_list=[g for _, g in pairs], scope=scope)

    # Paddle's own backward of the same forward program, from the same parameters.
    import paddle

    params = po.persistable_values(fj.default_main_program(), scope)
    prog = po.parse(forward_bytes)
    with paddle.static.program_guard(prog):
        paddle.static.append_backward(prog.global_block().var(loss.name))
    theirs = po.run(prog, {"x": xs}, [g.name for _, g in pairs], params)
    for a, b in zip(grads, theirs):
        np.testing.assert_allclose(a, b, rtol=1e-10)

    # Central finite differences of the loss in float64.
    w = params["fc_0.w_0"]

    def loss_at(w_value):
        s = fj.Scope()
        for name, value in params.items():
            s.var(name).get_mutable(fj.LoDTensor).set(w_value if name == "fc_0.w_0" else value)
        return float(exe.run(feed={"x": xs}, fetch_list=[loss], scope=s)[0])

    for idx in [(0, 0), (2, 3), (4, 1)]:
        plus, minus = w.copy(), w.copy()
        plus[idx] += 1e-6
        minus[idx] -= 1e-6
        numeric = (loss_at(plus) - loss_at(minus)) / 2e-6
        np.testing.assert_allclose(grads[0][idx], numeric, rtol=1e-6)


def test_no_grad_set_parameter_list_and_data():
    x, h, loss = _shared_use_model()
    pairs = fj.append_backward(loss, no_grad_set={"fc_0.b_0"})
    block = fj.default_main_program().global_block()
    assert [p.name for p, _ in pairs] == ["fc_0.w_0"]
    assert not block.has_var("fc_0.b_0@GRAD") and not block.has_var("x@GRAD")


def test_parameter_list_limits_the_pairs():
    x, h, loss = _shared_use_model()
    pairs = fj.append_backward(loss, parameter_list=["fc_0.b_0"])
    assert [p.name for p, _ in pairs] == ["fc_0.b_0"]


def test_stop_gradient_cuts_the_graph():
    x = layer.data("x", input_size=3)
    h1 = layer.fc(x, output_size=3)
    h1.stop_gradient = True
    h2 = layer.fc(h1, output_size=2)
    pairs = fj.append_backward(layer.mean(h2))
    assert sorted(p.name for p, _ in pairs) == ["fc_1.b_0", "fc_1.w_0"]
    assert not fj.default_main_program().global_block().has_var("fc_0.w_0@GRAD")


def test_roles_and_the_seed():
    x, h, loss = _shared_use_model()
    n_forward = len(fj.default_main_program().global_block().ops)
    fj.append_backward(loss)
    ops = fj.default_main_program().global_block().ops
    seed = ops[n_forward]
    assert seed.type == "fill_constant" and seed.output("Out") == [loss.name + "@GRAD"]
    assert seed.attr("value") == 1.0 and seed.attr("op_role") == 257  # Backward | Loss
    assert all(op.attr("op_role") == 1 for op in ops[n_forward + 1:])
    assert all(op.attr("op_role") == 0 for op in ops[:n_forward])
    assert {op.type for op in ops[n_forward + 1:]} >= {"mean_grad", "elementwise_mul_grad", "tanh_grad", "mul_grad"}


def test_a_loss_without_trainable_inputs_is_a_clear_error():
    x = layer.data("x", input_size=3)
    with pytest.raises(ValueError, match="does not depend on any variable that needs a gradient"):
        fj.append_backward(layer.mean(x))
