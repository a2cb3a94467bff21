"""Issue 28, video_bmn / video_ctcn (PaddleCV video): what kept their first step from finishing.

- conv3d whose windows tile the input (stride == kernel, BMN's [32, 1, 1] at stride 32) is lowered
  as patches times the filter: XLA CPU's input gradient of a strided 3-D convolution ran on its
  generic loop path (~15 minutes a BMN step on 2 cores). Output, input and filter gradients are
  checked against Paddle 2.6.2 running the same program bytes.
- A reader that forks worker processes (``multiprocessing`` with the fork start method, as the
  video readers do) after a JAX computation ran in the parent gives every sample and does not hang.
"""

from __future__ import annotations

import multiprocessing
import warnings

import jax  # noqa: F401  (before paddle)
import numpy as np
import pytest

import fluidjax as fluid
import paddle_oracle as po
from fluidjax.lowering.ops import conv as conv_rules


def _tiled(shape, filt, stride, padding, fmt):
    """Whether the tiling rule takes this convolution (the tests below must exercise it)."""
    n = len(filt)
    spatial = shape[:n] if fmt in ("NHWC", "NDHWC") else shape[1:]
    stride = stride if isinstance(stride, list) else [stride] * n
    padding = padding if isinstance(padding, list) else [padding] * n
    return conv_rules._tiles(spatial, filt, stride, [1] * n, [(p, p) for p in padding])


_run_both = po.run_programs_both


@pytest.mark.parametrize("shape,filt,padding,groups,fmt", [
    ([4, 8, 3, 5], [4, 1, 1], 0, 1, "NCDHW"),        # BMN's shape of kernel, smaller
    ([4, 7, 6, 5], [2, 3, 2], 0, 2, "NCDHW"),        # remainders dropped (7 // 2, 5 // 2), groups
    ([4, 6, 4, 4], [2, 2, 2], [1, 0, 1], 1, "NCDHW"),  # padding, then tiles
    ([6, 4, 4, 4], [2, 2, 2], 0, 1, "NDHWC"),
])
def test_tiling_conv3d_matches_paddle_with_gradients(shape, filt, padding, groups, fmt):
    """conv3d with stride == filter_size: output, dInput and dFilter as Paddle 2.6.2's."""
    assert _tiled(shape, filt, filt, padding, fmt)
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 7
    with fluid.program_guard(main, startup):
        x = fluid.layers.data("x", shape=shape, dtype="float32")
        x.stop_gradient = False
        y = fluid.layers.conv3d(x, num_filters=6, filter_size=filt, stride=filt, padding=padding,
                                groups=groups, bias_attr=False, data_format=fmt)
        loss = fluid.layers.reduce_sum(y * y)
        w = main.global_block().all_parameters()[0]
        gx, gw = fluid.backward.gradients([loss], [x, w])
    feed = {"x": np.random.RandomState(5).randn(2, *shape).astype("float32")}
    ours, theirs = _run_both(main, startup, feed, [y, gx, gw])
    for a, b in zip(ours, theirs):
        assert a.shape == b.shape
        np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-4)


@pytest.mark.parametrize("shape,filt,stride,padding,groups,fmt", [
    ([6, 5, 9], [1, 9], 1, 0, 1, "NCHW"),              # C-TCN's head: one window across the width
    ([6, 5, 9], [5, 8], [1, 2], 0, 2, "NCHW"),         # one window each way (column 9 unread), groups
    ([6, 8, 9], [2, 3], [2, 3], 0, 1, "NCHW"),         # stride == kernel, patch embedding
    ([7, 7, 4], [7, 7], 2, 0, 1, "NHWC"),              # a whole-image window, stride unused
    ([6, 5, 9], [2, 9], [2, 4], [1, 1], 3, "NCHW"),    # stride == kernel on H, one window on W
])
def test_tiling_conv2d_matches_paddle_with_gradients(shape, filt, stride, padding, groups, fmt):
    """conv2d whose windows do not overlap: output, dInput and dFilter as Paddle 2.6.2's."""
    assert _tiled(shape, filt, stride, padding, fmt)
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 7
    with fluid.program_guard(main, startup):
        x = fluid.layers.data("x", shape=shape, dtype="float32")
        x.stop_gradient = False
        y = fluid.layers.conv2d(x, num_filters=6, filter_size=filt, stride=stride, padding=padding,
                                groups=groups, bias_attr=False, data_format=fmt)
        loss = fluid.layers.reduce_sum(y * y)
        w = main.global_block().all_parameters()[0]
        gx, gw = fluid.backward.gradients([loss], [x, w])
    feed = {"x": np.random.RandomState(6).randn(2, *shape).astype("float32")}
    ours, theirs = _run_both(main, startup, feed, [y, gx, gw])
    for a, b in zip(ours, theirs):
        assert a.shape == b.shape
        np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-4)


def test_tiling_conv3d_gradient_compiles_to_no_convolution():
    """BMN's PEM_3d1 layer at a twentieth of its size ([2, 128, 32, 5, 100], kernel = stride
    [32, 1, 1]): the compiled forward and backward hold no XLA convolution (XLA CPU's strided 3-D
    input gradient ran its generic loop path: 45 s for this on 2 loaded cores), and the input
    gradient is right."""
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data("x", shape=[128, 32, 5, 100], dtype="float32")
        x.stop_gradient = False
        y = fluid.layers.conv3d(x, num_filters=64, filter_size=[32, 1, 1], stride=[32, 1, 1], bias_attr=False)
        gx, = fluid.backward.gradients([fluid.layers.reduce_sum(y)], [x])
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    feed = {"x": np.random.RandomState(0).rand(2, 128, 32, 5, 100).astype("float32")}
    hlo = exe.lower(main, feed=feed, fetch_list=[gx], scope=scope).compile().as_text()
    assert not [line for line in hlo.splitlines() if " convolution(" in line]
    got, = exe.run(main, feed=feed, fetch_list=[gx], scope=scope)
    w = np.asarray(scope.find_var(main.global_block().all_parameters()[0].name).get_tensor())
    # d sum(y) / dx[n, c, d, h, w] = sum_o W[o, c, d, 0, 0]
    np.testing.assert_allclose(got[0, :, :, 0, 0], w[:, :, :, 0, 0].sum(0), rtol=1e-4, atol=1e-5)


def test_overlapping_and_pointwise_convolutions_keep_xlas_convolution():
    """The rule takes only non-overlapping windows with more than one tap."""
    assert not _tiled([4, 8, 8], [3, 3], 1, 1, "NCHW")          # overlapping 3x3
    assert not _tiled([4, 8, 8], [3, 3], 2, 1, "NCHW")          # stride 2 < kernel 3
    assert not _tiled([4, 8, 8], [1, 1], 1, 0, "NCHW")          # 1x1: the pointwise rule
    assert not _tiled([4, 8, 8], [1, 1], 2, 0, "NCHW")          # strided 1x1 (skips pixels)
    assert not _tiled([4, 8, 9], [2, 9], [1, 1], 0, "NCHW")     # H overlaps (stride 1 < 2)
    assert _tiled([4, 8, 9], [2, 9], [2, 1], 0, "NCHW")


def _read_into_queue(names, queue):
    """A video reader's worker (reader/bmn_reader.py's read_into_queue): NumPy work, a batch per
    put, None at the end."""
    for name in names:
        queue.put((name, np.full((4, 3), name, "float32").sum()))
    queue.put(None)


def test_fork_readers_after_a_jax_step_give_every_sample():
    """PaddleCV video's readers fork 8 workers with multiprocessing (fork start method) after the
    executor ran its startup program; the workers touch no JAX. They finish and every sample
    arrives (the video scripts' missing first steps were their convolutions, not the fork)."""
    if "fork" not in multiprocessing.get_all_start_methods():
        pytest.skip("no fork start method here")
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data("x", shape=[3], dtype="float32")
        y = fluid.layers.fc(x, 2)
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    exe.run(main, feed={"x": np.ones((2, 3), "float32")}, fetch_list=[y])    # JAX's threads run
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue(20)
    parts = [list(range(i * 3, i * 3 + 3)) for i in range(8)]
    with warnings.catch_warnings():                        # JAX warns at every fork of its process
        warnings.simplefilter("ignore", RuntimeWarning)
        procs = [ctx.Process(target=_read_into_queue, args=(p, queue)) for p in parts]
        for p in procs:
            p.start()
    got, finished = [], 0
    while finished < len(procs):
        item = queue.get(timeout=30)
        if item is None:
            finished += 1
        else:
            got.append(item)
    for p in procs:
        p.join(timeout=30)
        assert p.exitcode == 0
    assert sorted(n for n, _ in got) == list(range(24))
    assert all(v == 12 * n for n, v in got)
    again, = exe.run(main, feed={"x": np.ones((2, 3), "float32")}, fetch_list=[y])   # the parent still runs
    assert again.shape == (2, 2)
