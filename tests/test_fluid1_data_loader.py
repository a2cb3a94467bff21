"""Feeding from Python as Fluid 1.6–1.8 scripts do: ``fluid.io.DataLoader.from_generator`` with
its three kinds of generator, iterable and non-iterable, and ``fluid.io.PyReader``.

The oracle is Fluid's documented behaviour: an iterable loader yields a list with one feed dict
per place; samples are batched and converted as ``DataFeeder`` converts them (LoD fields become
LoDTensors with the nesting as sequence lengths); a non-iterable loader feeds the runs between
``start()`` and ``EOFException``.
"""

from __future__ import annotations

import numpy as np
import pytest

import fluidjax as fluid
from fluidjax import layers
from fluidjax.frontend.data_loader import DataLoader, PyReader
from fluidjax.ir.errors import EOFException, FeedError


def _program():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [None, 3], "float32")
        y = fluid.data("y", [None, 1], "int64")
        words = fluid.data("words", [None, 1], "int64", lod_level=1)
        total = layers.reduce_sum(x) + layers.cast(layers.reduce_sum(y), "float32") \
            + layers.cast(layers.reduce_sum(layers.sequence_pool(words, "sum")), "float32")
    return main, startup, [x, y, words], total


def _samples(n=7):
    def reader():
        for i in range(n):
            yield np.full([3], i, "float32"), [i], [[i]] * (i % 3 + 1)
    return reader


def _expected_total(indices):
    return sum(3 * i + i + i * (i % 3 + 1) for i in indices)


def test_sample_generator_batches_and_converts_like_data_feeder():
    main, _, feed_list, total = _program()
    loader = DataLoader.from_generator(feed_list=feed_list, capacity=2)
    assert loader.set_sample_generator(_samples(), batch_size=3, places=fluid.CPUPlace()) is loader
    items = list(loader())
    assert len(items) == 2                                            # 7 samples, batch 3, the last dropped
    feeder = fluid.DataFeeder(feed_list)
    for k, item in enumerate(items):
        assert isinstance(item, list) and len(item) == 1 and sorted(item[0]) == ["words", "x", "y"]
        want = feeder.feed(list(_samples()())[3 * k:3 * k + 3])
        np.testing.assert_array_equal(item[0]["x"], want["x"])
        np.testing.assert_array_equal(item[0]["y"], want["y"])
        assert item[0]["words"].recursive_sequence_lengths() == want["words"].recursive_sequence_lengths()
    exe = fluid.Executor()
    got = [float(exe.run(main, feed=item[0], fetch_list=[total])[0]) for item in loader()]
    assert got == [_expected_total(range(0, 3)), _expected_total(range(3, 6))]
    # drop_last=False keeps the short batch; every loader() starts the generator again.
    loader.set_sample_generator(_samples(), batch_size=3, drop_last=False, places=fluid.CPUPlace())
    assert [len(item[0]["x"]) for item in loader()] == [3, 3, 1]
    assert [len(item[0]["x"]) for item in loader] == [3, 3, 1]


def test_sample_list_and_batch_generators():
    main, _, feed_list, total = _program()
    exe = fluid.Executor()
    loader = DataLoader.from_generator(feed_list=feed_list, capacity=4)
    loader.set_sample_list_generator(fluid.batch(_samples(), 2), places=fluid.cpu_places(1))
    got = [float(exe.run(main, feed=item[0], fetch_list=[total])[0]) for item in loader()]
    assert got == [_expected_total(b) for b in ([0, 1], [2, 3], [4, 5], [6])]

    def batches():
        for i in range(3):
            words = fluid.create_lod_tensor(np.array([[i], [i], [1]], "int64"), [[2, 1]], fluid.CPUPlace())
            yield np.ones((2, 3), "float32") * i, np.array([[i], [1]]), words
    loader.set_batch_generator(batches, places=fluid.CPUPlace())
    got = [float(exe.run(main, feed=item[0], fetch_list=[total])[0]) for item in loader()]
    assert got == [6 * i + (i + 1) + (2 * i + 1) for i in range(3)]
    loader.set_batch_generator(lambda: iter([(np.ones((2, 3), "float32"),)]))
    with pytest.raises(FeedError, match="1 value"):
        list(loader())


def test_places_return_list_and_errors_of_the_generator():
    _, _, feed_list, _ = _program()
    loader = DataLoader.from_generator(feed_list=feed_list, capacity=2, return_list=True)
    loader.set_sample_generator(_samples(), batch_size=2, places=fluid.cpu_places(2))
    items = list(loader())
    # 3 full batches over 2 places: one item of two batches, the last lone batch dropped (drop_last).
    assert len(items) == 1 and len(items[0]) == 2
    first, second = items[0]
    assert isinstance(first, list) and len(first) == 3
    np.testing.assert_array_equal(first[0][:, 0], [0, 1])
    np.testing.assert_array_equal(second[0][:, 0], [2, 3])
    keep = DataLoader.from_generator(feed_list=feed_list, capacity=2, drop_last=False)
    keep.set_sample_generator(_samples(), batch_size=2, places=fluid.cpu_places(2))
    assert [len(item) for item in keep()] == [2, 1]            # the lone last batch kept

    def broken():
        yield np.zeros([3], "float32"), [0], [[0]]
        raise RuntimeError("the reader broke")
    loader.set_sample_generator(broken, batch_size=1)
    with pytest.raises(RuntimeError, match="the reader broke"):
        list(loader())
    with pytest.raises(ValueError, match="feed_list"):
        DataLoader.from_generator(capacity=2)


def test_fluid_training_loop_feeds_the_yielded_list():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [None, 3], "float32")
        y = fluid.data("y", [None, 1], "float32")
        loss = layers.reduce_mean(layers.square(layers.fc(x, size=1) - y))
        fluid.optimizer.SGD(learning_rate=0.1).minimize(loss)
        loader = fluid.io.DataLoader.from_generator(feed_list=[x, y], capacity=4, iterable=True) \
            if hasattr(fluid.io, "DataLoader") else DataLoader.from_generator(feed_list=[x, y], capacity=4)
    rng = np.random.default_rng(0)
    w = rng.normal(size=(3, 1)).astype("float32")

    def samples():
        for _ in range(64):
            v = rng.normal(size=3).astype("float32")
            yield v, v @ w
    loader.set_sample_generator(samples, batch_size=8, places=fluid.cpu_places())
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    losses = [float(exe.run(main, feed=data, fetch_list=[loss])[0]) for _ in range(3) for data in loader()]
    assert losses[-1] < losses[0]


def test_non_iterable_loader_start_next_feed_eof_reset():
    main, _, feed_list, total = _program()
    loader = DataLoader.from_generator(feed_list=feed_list, capacity=2, iterable=False)
    loader.set_sample_generator(_samples(), batch_size=3)
    with pytest.raises(RuntimeError, match="not iterable"):
        iter(loader)
    with pytest.raises(EOFException):
        loader.next_feed()
    exe = fluid.Executor()
    for _ in range(2):                                                 # two passes
        loader.start()
        assert main._fluidjax_feed_source == loader.next_feed
        got = []
        try:
            while True:
                got.append(float(exe.run(main, feed=loader.next_feed(), fetch_list=[total])[0]))
        except EOFException:
            loader.reset()
        assert got == [_expected_total(range(0, 3)), _expected_total(range(3, 6))]
        assert main._fluidjax_feed_source is None
    assert issubclass(EOFException, EOFError)


def test_non_iterable_loader_feeds_runs_without_a_feed():
    main, _, feed_list, total = _program()
    loader = DataLoader.from_generator(feed_list=feed_list, capacity=2, iterable=False)
    loader.set_sample_generator(_samples(), batch_size=3)
    exe = fluid.Executor()
    loader.start()
    got = []
    try:
        while True:
            got.append(float(exe.run(main, fetch_list=[total])[0]))
    except EOFException:
        loader.reset()
    assert got == [_expected_total(range(0, 3)), _expected_total(range(3, 6))]


@pytest.mark.parametrize("return_list", [False, True])
def test_non_iterable_loader_over_several_places_feeds_every_batch(return_list):
    """Two places: each run takes both places' batches, joined (the LoD field's sequences one
    after the other); before, the second place's batch of every group was dropped silently."""
    main, _, feed_list, total = _program()
    loader = DataLoader.from_generator(feed_list=feed_list, capacity=2, iterable=False, return_list=return_list)
    loader.set_sample_generator(_samples(13), batch_size=3, places=[fluid.CPUPlace(), fluid.CPUPlace()])
    exe = fluid.Executor()
    loader.start()
    got = []
    try:
        while True:
            got.append(float(exe.run(main, fetch_list=[total])[0]))
    except EOFException:
        loader.reset()
    # 13 samples: four batches of 3 (the 13th dropped), two runs of two batches each
    assert got == [_expected_total(range(0, 6)), _expected_total(range(6, 12))]


def test_py_reader_decorators():
    main, _, feed_list, total = _program()
    exe = fluid.Executor()
    reader = PyReader(feed_list=feed_list, capacity=2, iterable=True)
    reader.decorate_sample_generator(_samples(), batch_size=3, places=fluid.cpu_places())
    assert [float(exe.run(main, feed=d[0], fetch_list=[total])[0]) for d in reader()] == \
        [_expected_total(range(0, 3)), _expected_total(range(3, 6))]
    reader.decorate_sample_list_generator(fluid.batch(_samples(4), 4), places=fluid.cpu_places())
    assert [float(exe.run(main, feed=d[0], fetch_list=[total])[0]) for d in reader] == [_expected_total(range(4))]
    reader.decorate_batch_generator(lambda: iter([[np.ones((1, 3), "float32"), np.ones((1, 1), "int64"),
                                                   fluid.create_lod_tensor(np.ones((2, 1), "int64"), [[2]],
                                                                           fluid.CPUPlace())]]))
    assert [float(exe.run(main, feed=d[0], fetch_list=[total])[0]) for d in reader()] == [6.0]
    started = PyReader(feed_list=feed_list, capacity=2, iterable=False)
    started.decorate_sample_generator(_samples(), batch_size=7)
    started.start()
    assert sorted(main._fluidjax_feed_source()) == ["words", "x", "y"]
    with pytest.raises(EOFException):
        main._fluidjax_feed_source()
    started.reset()
