"""Backward programs that Paddle writes run in fluidjax with Paddle's gradients.

Paddle's grad ops of several activations read the forward output (``tanh_grad`` takes ``Out``,
not ``X``); ``lowering/out_grads.py`` gives those their rules. Each case builds
``mean(f(x)²)`` and its gradient with Paddle's own ``gradients`` and compares both runs.
"""

import numpy as np
import pytest

import fluidjax as fj

ACTIVATIONS = ["tanh", "sigmoid", "relu", "exp", "sqrt", "rsqrt", "reciprocal", "softmax", "log_softmax",
               "relu6", "hardsigmoid", "selu", "leaky_relu", "elu", "gelu", "silu", "softplus", "hardswish",
               "mish", "celu", "softsign", "square", "log", "abs"]
POSITIVE_ONLY = {"sqrt", "rsqrt", "log", "reciprocal"}


@pytest.mark.parametrize("name", ACTIVATIONS)
def test_paddle_gradient_program_runs_with_paddles_gradient(name):
    import paddle
    import paddle.nn.functional as F

    paddle.enable_static()
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup):
        x = paddle.static.data("x", [-1, 5], "float32")
        x.stop_gradient = False
        fn = getattr(F, name, None) or getattr(paddle, name)
        y = fn(paddle.abs(x) + 0.5) if name in POSITIVE_ONLY else fn(x)
        loss = paddle.mean(y * y)
        grad, = paddle.static.gradients([loss], [x])
    xv = np.random.default_rng(0).normal(size=(3, 5)).astype("float32")
    theirs, = paddle.static.Executor(paddle.CPUPlace()).run(main, feed={"x": xv}, fetch_list=[grad])
    program = fj.Program.parse(main.desc.serialize_to_string())
    ours, = fj.Executor().run(program, feed={"x": xv}, fetch_list=[grad.name], scope=fj.Scope())
    np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-6)
