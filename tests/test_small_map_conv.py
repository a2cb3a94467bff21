"""Channel-last convolutions with few output positions (batch·oh·ow <= 64: ResNet's last stage at
batch 1) run as one patches × filter product, not as XLA's convolution; Paddle's kernel is the
oracle for the values."""

import os

import jax
import numpy as np
import pytest

import fluidjax as fj

os.environ.setdefault("GLOG_minloglevel", "2")
import paddle  # noqa: E402  (after fluidjax: the other order segfaults)


def _program(x_shape, w_shape, strides, paddings):
    prog = fj.Program()
    block = prog.global_block()
    block.create_var("x", x_shape, "float32")
    block.create_var("w", w_shape, "float32", persistable=True)
    block.create_var("y", (), "float32")
    block.append_op("conv2d", {"Input": ["x"], "Filter": ["w"]}, {"Output": ["y"]},
                    {"strides": strides, "paddings": paddings, "data_format": "NHWC"})
    return prog


@pytest.mark.parametrize("batch,size,strides,paddings,patches", [
    (1, 7, [1, 1], [1, 1], True),          # 49 positions
    (1, 14, [2, 2], [1, 1], True),         # 7×7 out of 14×14
    (1, 6, [1, 2], [0, 1, 2, 1], True),    # asymmetric strides and padding
    (2, 7, [1, 1], [1, 1], False),         # 98 positions: XLA's convolution
])
def test_small_map_conv_matches_paddle(batch, size, strides, paddings, patches):
    rng = np.random.default_rng(4)
    c, o = 40, 24
    x = rng.standard_normal((batch, size, size, c)).astype(np.float32)
    w = rng.standard_normal((o, c, 3, 3)).astype(np.float32)
    prog = _program(x.shape, w.shape, strides, paddings)
    scope = fj.Scope()
    scope.var("w").get_tensor().set(w)
    got, = fj.Executor().run(prog, feed={"x": x}, fetch_list=["y"], scope=scope)
    fn, variables = fj.to_jax(prog, feed=["x"], fetch_list=["y"], scope=scope)
    assert ("conv_general_dilated" not in str(jax.make_jaxpr(fn)(variables, x))) == patches
    paddle.disable_static()
    pad = paddings if len(paddings) == 2 else [[0, 0], paddings[:2], paddings[2:], [0, 0]]
    want = paddle.nn.functional.conv2d(paddle.to_tensor(x), paddle.to_tensor(w), stride=strides, padding=pad,
                                       data_format="NHWC").numpy()
    assert got.shape == want.shape
    assert float(np.max(np.abs(got - want)) / np.max(np.abs(want))) < 1e-5
