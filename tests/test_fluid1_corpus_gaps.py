"""Gaps the PaddlePaddle/models corpus run found (docs/fluid1.md, "Corpus"), each closed as a rule
and checked against Paddle 2.6.2 running the same program bytes or against NumPy."""

from __future__ import annotations

import jax  # noqa: F401  (before paddle)
import numpy as np
import pytest

import fluidjax as fluid
import paddle_oracle as po


def _programs():
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 7
    return main, startup


def _params(scope, program):
    return {v.name: np.asarray(scope.find_var(v.name).get_tensor()).copy()
            for v in program.list_vars() if v.persistable and scope.find_var(v.name) is not None
            and v.name not in ("feed", "fetch")}


def _fc_loss():
    x = fluid.layers.data("x", shape=[4], dtype="float32")
    return fluid.layers.mean(fluid.layers.fc(x, 3))


# -- 1. optimizer._global_learning_rate() -------------------------------------------------------
@pytest.mark.parametrize("before", [True, False])
def test_global_learning_rate_of_a_float_rate_is_the_programs_variable(before):
    """image_classification/train.py: ``global_lr = optimizer._global_learning_rate()`` before
    ``minimize`` (Fluid creates the rate there), fetched with the loss; the same Variable after."""
    main, startup = _programs()
    with fluid.program_guard(main, startup):
        loss = _fc_loss()
        opt = fluid.optimizer.Momentum(learning_rate=0.25, momentum=0.9)
        lr = opt._global_learning_rate() if before else None
        opt.minimize(loss)
        after = opt._global_learning_rate()
    assert after is not None and (after is lr if before else lr is None)
    after.persistable = True
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    feed = {"x": np.ones((2, 4), "float32")}
    params = _params(scope, main)
    ours = exe.run(main, feed=feed, fetch_list=[loss.name, after.name], scope=scope)
    theirs = po.run(main.serialize(), feed, [loss.name, after.name], params)
    np.testing.assert_allclose(np.asarray(ours[1]).reshape(-1), [0.25])
    np.testing.assert_allclose(np.asarray(theirs[1]).reshape(-1), [0.25])
    np.testing.assert_allclose(np.asarray(ours[0]), theirs[0], rtol=1e-5)
    # the momentum ops read this very variable
    lr_inputs = {op.input("LearningRate")[0] for op in main.global_block().ops if op.type == "momentum"}
    assert lr_inputs == {after.name}
    # after minimize, outside the guard: still the optimized program's rate
    assert opt._global_learning_rate() is after
    assert opt._global_learning_rate(main) is after


def test_global_learning_rate_of_a_variable_rate_is_that_variable():
    main, startup = _programs()
    with fluid.program_guard(main, startup):
        loss = _fc_loss()
        rate = fluid.layers.exponential_decay(0.5, decay_steps=10, decay_rate=0.5)
        opt = fluid.optimizer.SGD(learning_rate=rate)
        assert opt._global_learning_rate() is rate
        opt.minimize(loss)
        assert opt._global_learning_rate() is rate
    assert opt._global_learning_rate(fluid.Program()) is None


def _run_both(main, startup, feed, fetch):
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    names = [f if isinstance(f, str) else f.name for f in fetch]
    ours = exe.run(main, feed=feed, fetch_list=names, scope=scope)
    theirs = po.run(main.serialize(), feed, names, _params(scope, main))
    return ours, theirs


# -- 4. layers.flatten(x): Fluid's default axis=1 -------------------------------------------------
def test_flatten_without_an_axis_is_fluids_axis_1_after_a_global_pool():
    """SqueezeNet: conv -> global pool -> ``fluid.layers.flatten(conv)`` -> fc/softmax."""
    main, startup = _programs()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data("x", shape=[3, 5, 5], dtype="float32")
        conv = fluid.layers.conv2d(x, 4, 3)
        pooled = fluid.layers.pool2d(conv, pool_type="avg", global_pooling=True)
        flat = fluid.layers.flatten(pooled)
        flat0 = fluid.layers.flatten(x, 0)          # Paddle 2's positional start_axis stays
    assert flat.shape == (-1, 4)
    assert flat0.shape == (-1,)
    xs = np.random.default_rng(0).standard_normal((2, 3, 5, 5)).astype("float32")
    ours, theirs = _run_both(main, startup, {"x": xs}, [pooled, flat, flat0])
    np.testing.assert_allclose(ours[1], theirs[1], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ours[1], np.asarray(ours[0]).reshape(2, 4))
    np.testing.assert_array_equal(ours[2], xs.reshape(-1))


# -- 5. pool2d's output size truncates toward zero, as Paddle's C++ -----------------------------
@pytest.mark.parametrize("pool_type", ["avg", "max"])
@pytest.mark.parametrize("exclusive", [True, False])
def test_pool_window_larger_than_the_input_by_less_than_a_stride_gives_one_output(pool_type, exclusive):
    """GoogLeNet's ``pool2d(pool_size=7, pool_stride=7)`` of a 6x6 map: Paddle's
    ``(6 - 7) / 7 + 1`` is 1 in C++; the window is cut to the 6x6 input."""
    main, startup = _programs()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data("x", shape=[3, 6, 6], dtype="float32")
        out = fluid.layers.pool2d(x, pool_size=7, pool_type=pool_type, pool_stride=7, exclusive=exclusive)
    assert out.shape == (-1, 3, 1, 1)
    xs = np.random.default_rng(1).standard_normal((2, 3, 6, 6)).astype("float32")
    ours, theirs = _run_both(main, startup, {"x": xs}, [out])
    want = (xs.mean if pool_type == "avg" else xs.max)(axis=(2, 3), keepdims=True)
    np.testing.assert_allclose(ours[0], want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ours[0], theirs[0], rtol=1e-5, atol=1e-6)


def test_pool_window_larger_by_a_whole_stride_is_still_refused():
    main, startup = _programs()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data("x", shape=[3, 6, 6], dtype="float32")
        with pytest.raises(fluid.FluidJaxError, match="empty"):
            fluid.layers.pool2d(x, pool_size=7, pool_stride=1)


# -- 2./3. reader decorators take what Paddle 1.x took; the ones Fluid 1.8 had ---------------------
def _numbers(n):
    return lambda: iter(range(n))


def test_sizes_are_any_real_number_as_paddle_1_converts_them():
    """``paddle.batch(reader, batch_size=8.0)`` (a computed size): Paddle 1.8 takes ``int()``;
    shuffle/firstn/buffered compare counts with the size, so a fraction rounds up."""
    assert list(fluid.io.batch(_numbers(5), batch_size=2.0)()) == [[0, 1], [2, 3], [4]]
    assert list(fluid.io.batch(_numbers(5), 2.9, drop_last=True)()) == [[0, 1], [2, 3]]
    assert list(fluid.reader.firstn(_numbers(9), 2.5)()) == [0, 1, 2]
    assert sorted(fluid.reader.shuffle(_numbers(7), 3.0)()) == list(range(7))
    assert list(fluid.reader.buffered(_numbers(4), 2.0)()) == [0, 1, 2, 3]
    for bad in (0, 0.5, -1, "8", True):
        with pytest.raises(ValueError, match="positive"):
            fluid.io.batch(_numbers(3), bad)


def test_cache_reads_once_and_fake_repeats_the_first_sample():
    calls = []

    def reader():
        calls.append(1)
        yield from [1, 2, 3]

    cached = fluid.reader.cache(reader)
    assert list(cached()) == list(cached()) == [1, 2, 3] and len(calls) == 1
    fake = fluid.reader.Fake()(reader, 4)
    assert list(fake()) == [1, 1, 1, 1] and list(fake()) == [1, 1, 1, 1]


@pytest.mark.parametrize("order", [True, False])
def test_xmap_readers_maps_every_sample_in_threads(order):
    out = list(fluid.io.xmap_readers(lambda x: x * x, _numbers(50), 4, 3.0, order=order)())
    want = [i * i for i in range(50)]
    assert out == want if order else sorted(out) == want


def test_xmap_readers_raises_the_mappers_error_to_the_consumer():
    def mapper(x):
        if x == 5:
            raise KeyError("bad sample")
        return x

    with pytest.raises(KeyError, match="bad sample"):
        list(fluid.io.xmap_readers(mapper, _numbers(20), 2, 4)())


def test_multiprocess_reader_interleaves_all_readers():
    import fluidjax.reader as paddle_reader

    readers = [lambda: iter(range(0, 30)), lambda: iter(range(100, 140)), lambda: iter([])]
    out = list(paddle_reader.multiprocess_reader(readers, use_pipe=False, queue_size=4)())
    assert sorted(out) == list(range(0, 30)) + list(range(100, 140))
    with pytest.raises(ValueError, match="None"):
        list(paddle_reader.multiprocess_reader([lambda: iter([1, None])])())


def test_fluid_18_names_for_devices_versions_and_datasets():
    assert fluid.core.get_cuda_device_count() == len(fluid.cuda_places())
    fluid.require_version("1.6.0")
    fluid.require_version("1.0.0", "1.8.5")
    with pytest.raises(Exception, match="1.9|version"):
        fluid.require_version("1.9.0")
    # fluid.DatasetFactory's datasets run on the host (tests/test_fluid1_corpus_rec.py); PSLib's are refused
    assert type(fluid.DatasetFactory().create_dataset("InMemoryDataset")).__name__ == "InMemoryDataset"
    with pytest.raises(fluid.NotOfferedError, match="QueueDataset or InMemoryDataset"):
        fluid.DatasetFactory().create_dataset("FileInstantDataset")


def test_a_loaders_sample_generator_takes_a_real_batch_size_as_fluid_did():
    """DataLoader.set_sample_generator(reader, batch_size=8.0): Fluid 1.8 int()s a computed size
    (metric learning's pair reader passes one); a size that is not positive stays refused."""
    x = fluid.layers.data("x", shape=[2], dtype="float32")
    loader = fluid.io.DataLoader.from_generator(feed_list=[x], capacity=4, iterable=True)
    loader.set_sample_generator(lambda: iter([(np.full(2, i, "float32"),) for i in range(5)]), batch_size=2.0,
                                drop_last=True)
    batches = [np.asarray(b[0]["x"] if isinstance(b, list) else b["x"]) for b in loader()]
    np.testing.assert_array_equal(np.concatenate(batches), np.repeat(np.arange(4, dtype="float32"), 2).reshape(4, 2))
    with pytest.raises(ValueError, match="positive"):
        loader.set_sample_generator(lambda: iter([]), batch_size=0.5)
