"""Models shared by the start-up and first-result benchmarks, written once per side.

Each architecture is a walk over a small *ops* object (``conv_bn``, ``fc``, ``layer_norm``, ...):
the fluidjax, Paddle and hand-written JAX sides implement the ops, so all three build exactly the
same network and create their parameters in the same order. A fourth implementation,
:class:`Specs`, only records the parameters' shapes and initializers; the hand-written JAX init
functions draw from it.

Nothing here imports a framework at module level: a benchmark child imports only the side it
measures (the hand-written JAX side must not import fluidjax, which turns on a persistent XLA
compilation cache; and Paddle must be imported after JAX in a process that has both).

Models:

- ``fc<N>``: N fc layers of width 256 with relu on a [-1, 256] input.
- ``resnet18``: ResNet-18 for ImageNet (3x224x224, 1000 classes; conv 7x7/2, max-pool 3x3/2,
  basic blocks 2-2-2-2 of 64-128-256-512 channels with batch norm, global average pool, fc),
  softmax cross entropy; trained with Momentum (lr 0.1, mu 0.9).
- ``transformer24``: 24 post-norm transformer encoder layers, d_model 512, 8 heads, ffn 2048,
  sequence length 128 (q/k/v/out projections as fc, scaled dot-product attention with matmul and
  softmax, residual + layer_norm, relu ffn).
"""

from __future__ import annotations

import math

import numpy as np

FC_WIDTH = 256
IMAGE = (3, 224, 224)
CLASSES = 1000
LR, MOMENTUM = 0.1, 0.9
BN_EPS, BN_MOMENTUM = 1e-5, 0.9
D_MODEL, HEADS, FFN, SEQ = 512, 8, 2048, 128
# (channels, stride) of the basic blocks of ResNet-18.
RESNET18_BLOCKS = ((64, 1), (64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2), (512, 1))

# Initializer kinds of a parameter (Paddle's defaults, which fluidjax shares).
XAVIER, CONV_NORMAL, ZEROS, ONES = "xavier", "conv_normal", "zeros", "ones"


# -- architectures, as walks over an ops object -------------------------------------------------------
def fc_stack(ops, x, layers: int):
    h = x
    for _ in range(layers):
        h = ops.fc(h, FC_WIDTH, relu=True)
    return h


def resnet18(ops, img):
    """ResNet-18 logits of ``img`` (NCHW)."""
    h = ops.conv_bn(img, 3, 64, 7, 2, 3, relu=True)
    h = ops.max_pool(h)
    channels = 64
    for out_channels, stride in RESNET18_BLOCKS:
        y = ops.conv_bn(h, channels, out_channels, 3, stride, 1, relu=True)
        y = ops.conv_bn(y, out_channels, out_channels, 3, 1, 1, relu=False)
        short = h
        if stride != 1 or channels != out_channels:
            short = ops.conv_bn(h, channels, out_channels, 1, stride, 0, relu=False)
        h = ops.add_relu(y, short)
        channels = out_channels
    return ops.head(h, channels, CLASSES)


def transformer_encoder(ops, x, layers: int):
    """``layers`` post-norm encoder layers on ``x`` (-1, SEQ, D_MODEL)."""
    h = x
    for _ in range(layers):
        q, k, v = (ops.fc3(h, D_MODEL) for _ in range(3))
        a = ops.attention(q, k, v)
        h = ops.layer_norm(ops.add(h, ops.fc3(a, D_MODEL)))
        f = ops.fc3(ops.fc3(h, FFN, relu=True), D_MODEL)
        h = ops.layer_norm(ops.add(h, f))
    return h


# -- parameter specs (what the hand-written JAX side draws) --------------------------------------------
class Specs:
    """An ops object that records ``(kind, shape)`` of every parameter, in creation order, and
    whether it is trained (batch-norm statistics are not)."""

    def __init__(self) -> None:
        self.params: list[tuple[str, tuple[int, ...], bool]] = []

    def _add(self, kind, shape, trainable=True):
        self.params.append((kind, tuple(shape), trainable))

    def fc(self, h, size, relu=False):
        self._add(XAVIER, (h, size))
        self._add(ZEROS, (size,))
        return size

    fc3 = fc

    def conv_bn(self, h, c_in, c_out, k, stride, pad, relu):
        self._add(CONV_NORMAL, (c_out, c_in, k, k))
        self._add(ONES, (c_out,))
        self._add(ZEROS, (c_out,))
        self._add(ZEROS, (c_out,), trainable=False)
        self._add(ONES, (c_out,), trainable=False)
        return c_out

    def max_pool(self, h):
        return h

    def add_relu(self, a, b):
        return a

    add = add_relu

    def head(self, h, channels, classes):
        return self.fc(channels, classes)

    def attention(self, q, k, v):
        return q

    def layer_norm(self, h):
        self._add(ONES, (h,))
        self._add(ZEROS, (h,))
        return h


def specs(model: str) -> list[tuple[str, tuple[int, ...], bool]]:
    """The parameters of ``model`` (``fc<N>``, ``resnet18``, ``transformer<N>``) in creation order."""
    s = Specs()
    if model.startswith("fc"):
        fc_stack(s, FC_WIDTH, int(model[2:]))
    elif model == "resnet18":
        resnet18(s, 3)
    elif model.startswith("transformer"):
        transformer_encoder(s, D_MODEL, int(model[len("transformer"):]))
    else:
        raise ValueError(f"unknown model {model!r}")
    return s.params


def numpy_params(model: str, seed: int = 0) -> list[np.ndarray]:
    """Initial values of ``model``'s parameters, drawn with NumPy in creation order (the same
    numbers on every side, for the first-result runs whose losses are compared)."""
    rng = np.random.default_rng(seed)
    out = []
    for kind, shape, _ in specs(model):
        if kind == XAVIER:
            limit = math.sqrt(6.0 / (shape[0] + shape[1]))
            out.append(rng.uniform(-limit, limit, shape).astype(np.float32))
        elif kind == CONV_NORMAL:
            out.append((rng.standard_normal(shape) * math.sqrt(2.0 / np.prod(shape[1:]))).astype(np.float32))
        else:
            out.append(np.full(shape, 1.0 if kind == ONES else 0.0, np.float32))
    return out


# -- fluidjax ---------------------------------------------------------------------------------------------
class FluidjaxOps:
    def __init__(self, fj, layer) -> None:
        self.fj, self.layer = fj, layer

    def fc(self, h, size, relu=False):
        return self.layer.fc(h, size, activation="relu" if relu else None)

    def fc3(self, h, size, relu=False):
        return self.layer.fc(h, size, activation="relu" if relu else None, num_flatten_dims=2)

    def conv_bn(self, h, c_in, c_out, k, stride, pad, relu):
        h = self.layer.conv2d(h, num_filters=c_out, filter_size=k, stride=stride, padding=pad, bias_attr=False)
        return self.layer.batch_norm(h, activation="relu" if relu else None, momentum=BN_MOMENTUM, epsilon=BN_EPS)

    def max_pool(self, h):
        return self.layer.pool2d(h, pool_size=3, pool_type="max", pool_stride=2, pool_padding=1)

    def add_relu(self, a, b):
        return self.layer.relu(self.layer.elementwise_add(a, b))

    def add(self, a, b):
        return self.layer.elementwise_add(a, b)

    def head(self, h, channels, classes):
        h = self.layer.pool2d(h, pool_type="avg", global_pooling=True)
        return self.layer.fc(h, classes)

    def attention(self, q, k, v):
        layer, dh = self.layer, D_MODEL // HEADS

        def heads(t):   # (-1, T, D) -> (-1, H, T, dh)
            return layer.transpose(layer.reshape(t, [0, SEQ, HEADS, dh]), [0, 2, 1, 3])

        s = layer.matmul(heads(q), heads(k), transpose_y=True, alpha=dh ** -0.5)
        o = layer.matmul(layer.softmax(s), heads(v))
        return layer.reshape(layer.transpose(o, [0, 2, 1, 3]), [0, SEQ, D_MODEL])

    def layer_norm(self, h):
        return self.layer.layer_norm(h, begin_norm_axis=2)


def fluidjax_model(model: str, train: bool = False, for_test: bool = False):
    """``(main, startup, feeds, fetch, parameter names)`` of ``model``; ``train`` adds the loss and
    the optimizer (ResNet-18: Momentum), ``for_test`` returns ``main.clone(for_test=True)`` of the
    forward. The names are in creation order (checked against :func:`specs`)."""
    import fluidjax as fj
    from fluidjax import layer

    ops = FluidjaxOps(fj, layer)
    main, startup = fj.Program(), fj.Program()
    with fj.unique_name.guard(), fj.program_guard(main, startup):
        if model.startswith("fc"):
            x = layer.data("x", input_size=FC_WIDTH)
            out, feeds = fc_stack(ops, x, int(model[2:])), ["x"]
        elif model == "resnet18":
            img = layer.data("img", shape=list(IMAGE))
            out, feeds = resnet18(ops, img), ["img"]
            if train:
                label = layer.data("label", dims=1, dtype="int64")
                out = layer.mean(layer.softmax_with_cross_entropy(out, label))
                feeds.append("label")
                fj.optimizer.Momentum(learning_rate=LR, momentum=MOMENTUM).minimize(out)
        elif model.startswith("transformer"):
            x = layer.data("x", shape=[SEQ, D_MODEL])
            out, feeds = transformer_encoder(ops, x, int(model[len("transformer"):])), ["x"]
        else:
            raise ValueError(f"unknown model {model!r}")
    names = fluidjax_param_names(main, model)
    if for_test:
        main = main.clone(for_test=True)
    return main, startup, feeds, out, names


def fluidjax_param_names(main, model: str) -> list[str]:
    """``main``'s parameters in creation order, checked against :func:`specs`."""
    params = main.all_parameters()
    want = [shape for _, shape, _ in specs(model)]
    got = [tuple(p.shape) for p in params]
    if got != want:
        raise AssertionError(f"fluidjax {model}: parameter shapes {got[:6]}... differ from the spec {want[:6]}...")
    return [p.name for p in params]


# -- Paddle -----------------------------------------------------------------------------------------------
class PaddleOps:
    def __init__(self, paddle) -> None:
        self.paddle = paddle
        self.F = paddle.nn.functional
        self.nn = paddle.static.nn

    def fc(self, h, size, relu=False):
        return self.nn.fc(h, size, activation="relu" if relu else None)

    def fc3(self, h, size, relu=False):
        return self.nn.fc(h, size, num_flatten_dims=2, activation="relu" if relu else None)

    def conv_bn(self, h, c_in, c_out, k, stride, pad, relu):
        h = self.nn.conv2d(h, num_filters=c_out, filter_size=k, stride=stride, padding=pad, bias_attr=False)
        return self.nn.batch_norm(h, act="relu" if relu else None, momentum=BN_MOMENTUM, epsilon=BN_EPS)

    def max_pool(self, h):
        return self.F.max_pool2d(h, kernel_size=3, stride=2, padding=1)

    def add_relu(self, a, b):
        return self.F.relu(self.paddle.add(a, b))

    def add(self, a, b):
        return self.paddle.add(a, b)

    def head(self, h, channels, classes):
        return self.nn.fc(self.F.adaptive_avg_pool2d(h, 1), classes)

    def attention(self, q, k, v):
        paddle, dh = self.paddle, D_MODEL // HEADS

        def heads(t):
            return paddle.transpose(paddle.reshape(t, [0, SEQ, HEADS, dh]), [0, 2, 1, 3])

        s = paddle.scale(paddle.matmul(heads(q), heads(k), transpose_y=True), dh ** -0.5)
        o = paddle.matmul(self.F.softmax(s), heads(v))
        return paddle.reshape(paddle.transpose(o, [0, 2, 1, 3]), [0, SEQ, D_MODEL])

    def layer_norm(self, h):
        return self.nn.layer_norm(h, begin_norm_axis=2)


def paddle_model(model: str, train: bool = False, for_test: bool = False):
    """Paddle's ``(main, startup, feeds, fetch, parameter names)`` of ``model`` (as
    :func:`fluidjax_model`; a clone lists its parameters in another order, so the names come from
    the program before cloning)."""
    import os

    os.environ.setdefault("GLOG_minloglevel", "2")
    import paddle

    paddle.enable_static()
    ops = PaddleOps(paddle)
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.utils.unique_name.guard(), paddle.static.program_guard(main, startup):
        if model.startswith("fc"):
            x = paddle.static.data("x", [-1, FC_WIDTH], "float32")
            out, feeds = fc_stack(ops, x, int(model[2:])), ["x"]
        elif model == "resnet18":
            img = paddle.static.data("img", [-1, *IMAGE], "float32")
            out, feeds = resnet18(ops, img), ["img"]
            if train:
                label = paddle.static.data("label", [-1, 1], "int64")
                out = paddle.mean(paddle.nn.functional.softmax_with_cross_entropy(out, label))
                feeds.append("label")
                paddle.optimizer.Momentum(learning_rate=LR, momentum=MOMENTUM).minimize(out)
        elif model.startswith("transformer"):
            x = paddle.static.data("x", [-1, SEQ, D_MODEL], "float32")
            out, feeds = transformer_encoder(ops, x, int(model[len("transformer"):])), ["x"]
        else:
            raise ValueError(f"unknown model {model!r}")
    names = paddle_param_names(main, model)
    if for_test:
        main = main.clone(for_test=True)
    return main, startup, feeds, out, names


def paddle_param_names(main, model: str) -> list[str]:
    params = main.global_block().all_parameters()
    want = [shape for _, shape, _ in specs(model)]
    got = [tuple(p.shape) for p in params]
    if got != want:
        raise AssertionError(f"Paddle {model}: parameter shapes {got[:6]}... differ from the spec {want[:6]}...")
    return [p.name for p in params]


# -- hand-written JAX -------------------------------------------------------------------------------------
def jax_init_fn(model: str):
    """``init(key) -> list of arrays``: every parameter of ``model`` drawn with ``jax.random``
    (Xavier uniform, conv Normal(0, sqrt(2 / fan_in)), zeros, ones), as a JAX user writes it."""
    import jax
    import jax.numpy as jnp

    table = specs(model)

    def init(key):
        keys = jax.random.split(key, len(table))
        out = []
        for key, (kind, shape, _) in zip(keys, table):
            if kind == XAVIER:
                limit = math.sqrt(6.0 / (shape[0] + shape[1]))
                out.append(jax.random.uniform(key, shape, jnp.float32, -limit, limit))
            elif kind == CONV_NORMAL:
                out.append(jax.random.normal(key, shape, jnp.float32) * math.sqrt(2.0 / np.prod(shape[1:])))
            else:
                out.append(jnp.full(shape, 1.0 if kind == ONES else 0.0, jnp.float32))
        return out

    return init


class JaxOps:
    """ResNet ops on a list of parameters consumed in creation order; batch norm uses the batch's
    statistics (and records the new moving ones) when ``train``, the moving ones otherwise."""

    def __init__(self, params, train: bool) -> None:
        import jax
        import jax.numpy as jnp
        from jax import lax

        self.jax, self.jnp, self.lax = jax, jnp, lax
        self.params, self.i, self.train = params, 0, train
        self.new_stats: list = []

    def _next(self):
        p = self.params[self.i]
        self.i += 1
        return p

    def conv_bn(self, h, c_in, c_out, k, stride, pad, relu):
        jnp, lax = self.jnp, self.lax
        w, scale, bias, mean, var = (self._next() for _ in range(5))
        h = lax.conv_general_dilated(h, w, (stride, stride), [(pad, pad), (pad, pad)],
                                     dimension_numbers=("NCHW", "OIHW", "NCHW"))
        if self.train:
            batch_mean = jnp.mean(h, axis=(0, 2, 3))
            batch_var = jnp.mean(jnp.square(h - batch_mean[None, :, None, None]), axis=(0, 2, 3))
            self.new_stats += [BN_MOMENTUM * mean + (1 - BN_MOMENTUM) * batch_mean,
                               BN_MOMENTUM * var + (1 - BN_MOMENTUM) * batch_var]
            mean, var = batch_mean, batch_var
        inv = scale * lax.rsqrt(var + BN_EPS)
        h = (h - mean[None, :, None, None]) * inv[None, :, None, None] + bias[None, :, None, None]
        return self.jax.nn.relu(h) if relu else h

    def max_pool(self, h):
        return self.lax.reduce_window(h, -self.jnp.inf, self.lax.max, (1, 1, 3, 3), (1, 1, 2, 2),
                                      [(0, 0), (0, 0), (1, 1), (1, 1)])

    def add_relu(self, a, b):
        return self.jax.nn.relu(a + b)

    def head(self, h, channels, classes):
        w, b = self._next(), self._next()
        return self.jnp.mean(h, axis=(2, 3)) @ w + b


def jax_resnet18_infer():
    """``forward(params, img) -> logits`` (moving statistics), jitted."""
    import jax

    return jax.jit(lambda params, img: resnet18(JaxOps(params, train=False), img))


def jax_resnet18_train(values: list[np.ndarray]):
    """``(step, state)``: a jitted, state-donating Momentum step ``step(state, img, label) ->
    (state, loss)`` of ResNet-18 (batch statistics, moving statistics updated) and its first
    state built from ``values`` (in creation order)."""
    import jax
    import jax.numpy as jnp

    trainable = [t for _, _, t in specs("resnet18")]

    def split(values):
        return [v for v, t in zip(values, trainable) if t], [v for v, t in zip(values, trainable) if not t]

    def merge(params, stats):
        params, stats = iter(params), iter(stats)
        return [next(params) if t else next(stats) for t in trainable]

    def loss_fn(params, stats, img, label):
        ops = JaxOps(merge(params, stats), train=True)
        logits = resnet18(ops, img)
        loss = -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), label, axis=1))
        return loss, ops.new_stats

    def step(state, img, label):
        (loss, stats), grads = jax.value_and_grad(loss_fn, has_aux=True)(state["params"], state["stats"], img, label)
        velocity = [MOMENTUM * v + g for v, g in zip(state["velocity"], grads)]
        params = [p - LR * v for p, v in zip(state["params"], velocity)]
        return {"params": params, "stats": stats, "velocity": velocity}, loss

    params, stats = split([jnp.asarray(v) for v in values])
    state = {"params": params, "stats": stats, "velocity": [jnp.zeros_like(p) for p in params]}
    return jax.jit(step, donate_argnums=(0,)), state
