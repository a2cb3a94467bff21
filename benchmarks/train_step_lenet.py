"""One LeNet training step (forward, backward, Adam update, fetch the loss): fluidjax's Executor vs
hand-written JAX (``jax.value_and_grad`` of the same math with ``lax.conv_general_dilated`` and
``lax.reduce_window``, plus the same Adam update, jitted with the state donated) vs Paddle 2.6.2's
static Executor, in one run.

LeNet is recognize_digits' CNN: conv 20@5x5, relu, max-pool 2, conv 50@5x5, relu, max-pool 2,
fc 10, softmax cross entropy, on 1x28x28 images. All sides start from the same parameters and
see the same batches (their first losses are checked to agree); each takes NumPy feeds and
returns the loss as a NumPy value, as a user's loop does. Prints the median step time over many
steps after warm-up (the sides take turns step by step, so a busy machine slows all alike) and the
ratios fluidjax/JAX (target <= 1.10) and Paddle/fluidjax (target >= 2.0).

    python benchmarks/train_step_lenet.py [--batch 64] [--steps 200]
"""

from __future__ import annotations

import argparse
import os

import numpy as np

from sides import BETA1, BETA2, EPS, LR, adam_trainer, paddle_trainer as _paddle_step
from timing import HEADER, compare, row

CLASSES = 10
# name -> shape, in creation order (the same names in fluidjax and Paddle).
PARAM_SHAPES = {"conv2d_0.w_0": (20, 1, 5, 5), "conv2d_0.b_0": (20,), "conv2d_1.w_0": (50, 20, 5, 5),
                "conv2d_1.b_0": (50,), "fc_0.w_0": (800, CLASSES), "fc_0.b_0": (CLASSES,)}


def initial_params(seed=0) -> dict[str, np.ndarray]:
    """Paddle's default initial values: conv filters Normal(0, sqrt(2 / fan_in)), fc Xavier uniform,
    biases 0."""
    rng = np.random.default_rng(seed)
    params = {}
    for name, shape in PARAM_SHAPES.items():
        if name.endswith("b_0"):
            params[name] = np.zeros(shape, np.float32)
        elif name.startswith("conv"):
            params[name] = rng.normal(0.0, np.sqrt(2.0 / np.prod(shape[1:])), shape).astype(np.float32)
        else:
            limit = np.sqrt(6.0 / sum(shape))
            params[name] = rng.uniform(-limit, limit, shape).astype(np.float32)
    return params


def batches(batch: int, count: int, seed=1):
    """Digit-like data: a fixed random prototype per class plus noise."""
    rng = np.random.default_rng(seed)
    prototypes = rng.uniform(0.0, 1.0, (CLASSES, 1, 28, 28)).astype(np.float32)
    out = []
    for _ in range(count):
        y = rng.integers(0, CLASSES, (batch, 1)).astype(np.int64)
        x = prototypes[y[:, 0]] + rng.normal(0.0, 0.3, (batch, 1, 28, 28)).astype(np.float32)
        out.append((x, y))
    return out


# -- fluidjax ------------------------------------------------------------------------------------
def fluidjax_trainer(params):
    import fluidjax as fj
    from fluidjax import layer
    from fluidjax.frontend import optimizer

    main, startup = fj.Program(), fj.Program()
    # Constant initializers: the parameters are overwritten below, and a startup program without
    # random ops compiles faster.
    attr = lambda: fj.ParamAttr(initializer=fj.initializer.Constant(0.0))  # noqa: E731
    with fj.unique_name.guard(), fj.program_guard(main, startup):
        img = layer.data("img", shape=[1, 28, 28])
        label = layer.data("label", dims=1, dtype="int64")
        h = layer.conv2d(img, num_filters=20, filter_size=5, activation="relu", param_attr=attr())
        h = layer.pool2d(h, pool_size=2, pool_type="max", pool_stride=2)
        h = layer.conv2d(h, num_filters=50, filter_size=5, activation="relu", param_attr=attr())
        h = layer.pool2d(h, pool_size=2, pool_type="max", pool_stride=2)
        logits = layer.fc(h, output_size=CLASSES, param_attr=attr())
        cost = layer.mean(layer.softmax_with_cross_entropy(logits, label))
        optimizer.Adam(learning_rate=LR, beta1=BETA1, beta2=BETA2, epsilon=EPS).minimize(cost)
    assert [p.name for p in main.all_parameters()] == list(PARAM_SHAPES)
    exe, scope = fj.Executor(), fj.Scope()
    exe.run(startup, scope=scope)
    for name, value in params.items():
        scope.var(name).get_tensor().set(value)

    def step(x, y):
        return exe.run(main, feed={"img": x, "label": y}, fetch_list=[cost], scope=scope)[0]

    return step


# -- hand-written JAX ------------------------------------------------------------------------------
def jax_trainer(params):
    import jax
    import jax.numpy as jnp
    from jax import lax

    def conv_relu_pool(h, w, b):
        h = lax.conv_general_dilated(h, w, (1, 1), "VALID", dimension_numbers=("NCHW", "OIHW", "NCHW"))
        h = jax.nn.relu(h + b[None, :, None, None])
        return lax.reduce_window(h, -jnp.inf, lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID")

    def loss_fn(p, x, y):
        h = conv_relu_pool(x, p["conv2d_0.w_0"], p["conv2d_0.b_0"])
        h = conv_relu_pool(h, p["conv2d_1.w_0"], p["conv2d_1.b_0"])
        logits = h.reshape(h.shape[0], -1) @ p["fc_0.w_0"] + p["fc_0.b_0"]
        return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), y, axis=1))

    return adam_trainer(loss_fn, params)


# -- Paddle ----------------------------------------------------------------------------------------
def paddle_trainer(params):
    os.environ.setdefault("GLOG_minloglevel", "2")
    import paddle
    import paddle.nn.functional as F

    paddle.enable_static()
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.utils.unique_name.guard(), paddle.static.program_guard(main, startup):
        img = paddle.static.data("img", [-1, 1, 28, 28], "float32")
        label = paddle.static.data("label", [-1, 1], "int64")
        h = paddle.static.nn.conv2d(img, num_filters=20, filter_size=5, act="relu")
        h = F.max_pool2d(h, kernel_size=2, stride=2)
        h = paddle.static.nn.conv2d(h, num_filters=50, filter_size=5, act="relu")
        h = F.max_pool2d(h, kernel_size=2, stride=2)
        logits = paddle.static.nn.fc(h, size=CLASSES)
        cost = paddle.mean(F.softmax_with_cross_entropy(logits, label))
        paddle.optimizer.Adam(learning_rate=LR, beta1=BETA1, beta2=BETA2, epsilon=EPS).minimize(cost)
    assert [p.name for p in main.global_block().all_parameters()] == list(PARAM_SHAPES)
    return _paddle_step(main, startup, params, ["img", "label"], cost)


def time_lenet(batch: int = 64, steps: int = 200) -> None:
    """Print the LeNet step table (the figures ``train_step.py`` reports for LeNet)."""
    import jax

    params = initial_params()
    data = batches(batch, 8)
    runners = {"fluidjax": fluidjax_trainer(params), "jax": jax_trainer(params), "paddle": paddle_trainer(params)}
    # Same data, same start: the first losses agree (this also compiles every side).
    first = {k: [float(r(x, y)) for x, y in data[:3]] for k, r in runners.items()}
    np.testing.assert_allclose(first["fluidjax"], first["jax"], rtol=1e-4)
    np.testing.assert_allclose(first["fluidjax"], first["paddle"], rtol=1e-4)

    result = compare(runners, data, steps)
    print(f"device: {jax.devices()[0]} ({os.cpu_count()} CPUs); LeNet (conv 20@5x5, relu, max-pool 2, "
          f"conv 50@5x5, relu, max-pool 2, fc 10, softmax cross entropy), Adam, batch {batch}; "
          f"one step = forward + backward + update + fetch the loss; median of {steps} interleaved steps")
    print(f"first losses: fluidjax {first['fluidjax']}, JAX {first['jax']}, Paddle {first['paddle']}")
    print(HEADER)
    print(row(batch, result))
    print("targets: fluidjax/JAX <= 1.10, Paddle/fluidjax >= 2.0")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--steps", type=int, default=200, help="timed steps per side")
    args = parser.parse_args()
    time_lenet(args.batch, args.steps)


if __name__ == "__main__":
    main()
