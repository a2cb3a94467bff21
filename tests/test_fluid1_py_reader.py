"""Fluid 1.x's old reader API: ``layers.py_reader`` / ``create_py_reader_by_data`` + ``read_file``
and the classic ``start()`` / ``exe.run`` until ``fluid.core.EOFException`` / ``reset()`` loop.

The oracle: every batch of the generator is seen exactly once per epoch, in order (the fed
images are fetched back), and the training numbers (losses, final parameters) equal those of the
same program fed the same batches with ``feed=``.
"""

from __future__ import annotations

import numpy as np
import pytest

import fluidjax as fluid
from fluidjax import layers

BATCHES, BATCH, EPOCHS = 5, 4, 2


def _batches():
    rng = np.random.default_rng(0)
    xs = rng.normal(size=(BATCHES, BATCH, 3)).astype("float32")
    ys = (xs @ np.array([[1.0], [-2.0], [0.5]], "float32") + 0.3).astype("float32")
    return xs, ys


def _regression(make_inputs):
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 1
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        reader, (x, y) = make_inputs()
        pred = layers.fc(x, 1, param_attr=fluid.ParamAttr(name="w"), bias_attr=fluid.ParamAttr(name="b"))
        loss = layers.mean(layers.square_error_cost(pred, y))
        fluid.optimizer.SGD(0.1).minimize(loss)
    return main, startup, reader, x, y, loss


def _py_reader_inputs():
    reader = layers.py_reader(capacity=3, shapes=[(-1, 3), (-1, 1)], dtypes=["float32", "float32"],
                              name="train_reader")
    reader = layers.double_buffer(reader)
    return reader, layers.read_file(reader)


def _by_data_inputs():
    x = fluid.data("x", [None, 3], "float32")
    y = fluid.data("y", [None, 1], "float32")
    reader = layers.create_py_reader_by_data(capacity=2, feed_list=[x, y], name="r")
    return reader, layers.read_file(reader)


def _train_with_reader(make_inputs, decorate):
    main, startup, reader, x, y, loss = _regression(make_inputs)
    xs, ys = _batches()
    decorate(reader, xs, ys)
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.Scope()
    seen, losses = [], []
    with fluid.scope_guard(scope):
        exe.run(startup)
        for _ in range(EPOCHS):
            reader.start()
            epoch = []
            try:
                while True:
                    loss_value, x_value = exe.run(main, fetch_list=[loss, x])
                    losses.append(float(loss_value))
                    epoch.append(np.array(x_value))
            except fluid.core.EOFException:
                reader.reset()
            seen.append(epoch)
        params = {n: np.array(scope.find_var(n).get_tensor()) for n in ("w", "b")}
    return main, startup, x, y, loss, seen, losses, params


def _train_with_feed(main, startup, x, y, loss):
    xs, ys = _batches()
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.Scope()
    losses = []
    with fluid.scope_guard(scope):
        exe.run(startup)
        for _ in range(EPOCHS):
            for bx, by in zip(xs, ys):
                losses.append(float(exe.run(main, feed={x.name: bx, y.name: by}, fetch_list=[loss])[0]))
        params = {n: np.array(scope.find_var(n).get_tensor()) for n in ("w", "b")}
    return losses, params


def _paddle_reader(reader, xs, ys):
    # decorate_paddle_reader: minibatches of samples (paddle.batch's output).
    def minibatches():
        for bx, by in zip(xs, ys):
            yield list(zip(bx, by))
    reader.decorate_paddle_reader(minibatches)


def _tensor_provider(reader, xs, ys):
    reader.decorate_tensor_provider(lambda: iter(zip(xs, ys)))


def _sample_list(reader, xs, ys):
    reader.decorate_sample_list_generator(lambda: ([list(s) for s in zip(bx, by)] for bx, by in zip(xs, ys)))


def _batch_generator(reader, xs, ys):
    reader.decorate_batch_generator(lambda: ([bx, by] for bx, by in zip(xs, ys)))


@pytest.mark.parametrize("make_inputs", [_py_reader_inputs, _by_data_inputs], ids=["py_reader", "by_data"])
@pytest.mark.parametrize("decorate", [_paddle_reader, _tensor_provider, _sample_list, _batch_generator],
                         ids=["paddle_reader", "tensor_provider", "sample_list", "batch_generator"])
def test_classic_loop_sees_every_batch_once_per_epoch_and_trains_as_feed(make_inputs, decorate):
    main, startup, x, y, loss, seen, losses, params = _train_with_reader(make_inputs, decorate)
    xs, _ = _batches()
    assert len(seen) == EPOCHS
    for epoch in seen:
        assert len(epoch) == BATCHES
        for got, want in zip(epoch, xs):
            np.testing.assert_array_equal(got, want)
    want_losses, want_params = _train_with_feed(main, startup, x, y, loss)
    assert len(losses) == EPOCHS * BATCHES
    np.testing.assert_allclose(losses, want_losses, rtol=1e-6)
    for name in params:
        np.testing.assert_allclose(params[name], want_params[name], rtol=1e-6)
    assert losses[-1] < losses[0]


def test_py_reader_slots_and_errors():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        reader = layers.py_reader(8, [(-1, 2, 3), (-1, 1)], ["float32", "int64"], lod_levels=[0, 1])
        image, words = layers.read_file(reader)
        assert image.shape == (-1, 2, 3) and image.dtype == "float32"
        assert words.lod_level == 1 and words.dtype == "int64"
        one = layers.read_file(layers.py_reader(2, [(-1, 1)], ["int64"]))
        assert one.shape == (-1, 1)
        with pytest.raises(ValueError, match="one entry per slot"):
            layers.py_reader(2, [(-1, 1)], ["int64", "float32"])
        with pytest.raises(TypeError):
            layers.read_file("reader")
    exe = fluid.Executor()
    reader.decorate_tensor_provider(lambda: iter([]))
    reader.start()
    with pytest.raises(fluid.core.EOFException):
        exe.run(main, fetch_list=[image])
    reader.reset()
    with pytest.raises(RuntimeError, match="start"):
        reader.start()
        reader.start()
    reader.reset()
