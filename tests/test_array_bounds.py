"""Tensor arrays never hand out an element no write reached: a read past the array's length (or of a
slot never written) is an ``IndexOutOfRangeError``, outside and inside loops, as Paddle 2.6.2
refuses it running the same program bytes; joins and conversions count only written elements.
Also: ``cond`` whose branches return different numbers of outputs is a typed error."""

from __future__ import annotations

import numpy as np
import pytest

import fluidjax as fj
from fluidjax import layer
from fluidjax.ir.errors import BoundExceededError, FluidJaxError, IndexOutOfRangeError, InputTypeError

import paddle_oracle as po  # noqa: E402  (after fluidjax: jax before paddle)

XS = np.arange(6, dtype="float32").reshape(2, 3)


def _ours(main, fetch, feed=None):
    return fj.Executor().run(main, feed={"x": XS} if feed is None else feed, fetch_list=fetch, scope=fj.Scope())


def _paddle(main, fetch, feed=None):
    return po.run(main.serialize(), {"x": XS} if feed is None else feed, fetch)


def _static_array(writes, read_at):
    main, startup = fj.Program(), fj.Program()
    with fj.program_guard(main, startup):
        x = layer.data("x", shape=[2, 3], append_batch_size=False)
        arr = layer.create_array("float32")
        for k in writes:
            layer.array_write(x * float(k + 1), layer.fill_constant([1], "int64", k), arr)
        out = layer.array_read(arr, layer.fill_constant([1], "int64", read_at))
    return main, [out.name]


@pytest.mark.parametrize("writes, read_at", [([0, 1, 2], 5), ([0, 1, 2], 3), ([0, 2], 1), ([2], 0)],
                         ids=["past_the_end", "just_past", "a_gap", "before_the_first"])
def test_reading_an_element_never_written_is_refused_as_paddle_does(writes, read_at):
    main, fetch = _static_array(writes, read_at)
    with pytest.raises(IndexOutOfRangeError, match=r"reads element %d of tensor array" % read_at) as info:
        _ours(main, fetch)
    assert "test_array_bounds.py" in str(info.value)               # the user's line
    with pytest.raises(Exception):
        _paddle(main, fetch)
    good_main, good_fetch = _static_array(writes, writes[-1])      # a written element reads as Paddle's
    np.testing.assert_array_equal(_ours(good_main, good_fetch)[0], _paddle(good_main, good_fetch)[0])


def _loop_reading(n_reads):
    """Three elements written outside, then a loop that sums arr[i] for i < n_reads."""
    main, startup = fj.Program(), fj.Program()
    with fj.program_guard(main, startup):
        x = layer.data("x", shape=[2, 3], append_batch_size=False)
        arr = layer.create_array("float32")
        for k in range(3):
            layer.array_write(x * float(k + 1), layer.fill_constant([1], "int64", k), arr)
        i = layer.fill_constant([1], "int64", 0)
        n = layer.fill_constant([1], "int64", n_reads)
        total = layer.fill_constant([2, 3], "float32", 0.0)

        def body(i, total):
            total = total + layer.array_read(arr, i)       # before increment, which is in place
            return [layer.increment(i), total]

        _, total = layer.while_loop(lambda i, t: i < n, body, [i, total], max_iterations=8)
    return main, [total.name]


def test_a_read_past_the_end_inside_a_loop_body_is_refused():
    main, fetch = _loop_reading(3)
    ours = _ours(main, fetch)
    np.testing.assert_allclose(ours[0], _paddle(main, fetch)[0])
    np.testing.assert_allclose(ours[0], 6 * XS)
    main, fetch = _loop_reading(5)
    with pytest.raises(IndexOutOfRangeError, match="reads element 3 of tensor array .* holds 3 element"):
        _ours(main, fetch)
    # (Paddle's kernel leaves Out unset past the end: fetched, that fails, as above; inside a loop
    # the variable keeps the previous iteration's element, so Paddle is no oracle for this run.)


def test_the_scope_is_unchanged_by_a_refused_read():
    main, startup = fj.Program(), fj.Program()
    with fj.program_guard(main, startup):
        x = layer.data("x", shape=[2, 3], append_batch_size=False)
        counter = layer.create_global_var([1], 0.0, "float32", persistable=True, name="counter")
        layer.assign(counter + 1.0, counter)
        arr = layer.create_array("float32")
        layer.array_write(x, layer.fill_constant([1], "int64", 0), arr)
        out = layer.array_read(arr, layer.fill_constant([1], "int64", 1))
    scope = fj.Scope()
    exe = fj.Executor()
    exe.run(startup, scope=scope)
    with pytest.raises(IndexOutOfRangeError):
        exe.run(main, feed={"x": XS}, fetch_list=[out], scope=scope)
    assert float(np.asarray(scope.find_var("counter").get_tensor())[0]) == 0.0


def _loop_written(writes: int, room: int, axis: int = 0, use_stack: bool = True):
    """A loop that writes x * (i + 1) for i < writes into an array whose room is ``room``."""
    main, startup = fj.Program(), fj.Program()
    with fj.program_guard(main, startup):
        x = layer.data("x", shape=[2, 3], append_batch_size=False)
        i = layer.fill_constant([1], "int64", 0)
        n = layer.fill_constant([1], "int64", writes)
        arr = layer.create_array("float32")

        def body(i, a):
            layer.array_write(x * (layer.cast(i, "float32") + 1.0), i, a)
            return [layer.increment(i), a]

        _, arr = layer.while_loop(lambda i, a: i < n, body, [i, arr], max_iterations=room)
        block = main.global_block()
        out = block.create_var("joined", (), "float32")
        index = block.create_var("joined_index", (), "int32")
        block.append_op("tensor_array_to_tensor", {"X": arr}, {"Out": out, "OutIndex": index},
                        {"axis": axis, "use_stack": use_stack})
        length = layer.array_length(arr)
    return main, ["joined", length.name]


@pytest.mark.parametrize("use_stack", [True, False], ids=["stack", "concat"])
def test_joining_a_loop_array_gives_only_its_written_elements(use_stack):
    main, fetch = _loop_written(3, 8, use_stack=use_stack)
    ours, theirs = _ours(main, fetch), _paddle(main, fetch)
    expected = [XS * k for k in (1, 2, 3)]
    expected = np.stack(expected) if use_stack else np.concatenate(expected)
    np.testing.assert_array_equal(ours[0], expected)                # 3 elements, not the room's 8
    np.testing.assert_array_equal(ours[0], theirs[0])
    assert int(ours[1][0]) == int(theirs[1][0]) == 3


def test_joining_a_partly_written_array_along_another_axis_is_refused():
    main, fetch = _loop_written(3, 8, axis=1, use_stack=False)
    with pytest.raises(BoundExceededError, match="only some of its 8 slots"):
        _ours(main, fetch)
    full_main, full_fetch = _loop_written(4, 4, axis=1, use_stack=False)   # a full one joins as Paddle's
    np.testing.assert_array_equal(_ours(full_main, full_fetch)[0], _paddle(full_main, full_fetch)[0])


def test_array_to_lod_tensor_refuses_an_array_shorter_than_the_longest_sequence():
    main, startup = fj.Program(), fj.Program()
    with fj.program_guard(main, startup):
        x = layer.data("x", shape=[1], dtype="float32", lod_level=1)
        table = layer.lod_rank_table(x)
        full = layer.lod_tensor_to_array(x, table)
        short = layer.create_array("float32")
        layer.array_write(layer.array_read(full, layer.fill_constant([1], "int64", 0)),
                          layer.fill_constant([1], "int64", 0), short)
        back = layer.array_to_lod_tensor(full, table)
        cut = layer.array_to_lod_tensor(short, table)
    rows = np.arange(6, dtype="float32").reshape(6, 1)
    feed = {"x": fj.create_lod_tensor(rows, [[3, 1, 2]], fj.CPUPlace())}
    exe = fj.Executor()
    got = exe.run(main, feed=feed, fetch_list=[back], scope=fj.Scope(), return_numpy=False)[0]
    np.testing.assert_array_equal(np.asarray(got), rows)           # every step written: the rows back
    with pytest.raises(BoundExceededError, match="fewer elements .* than the longest sequence"):
        exe.run(main, feed=feed, fetch_list=[cut], scope=fj.Scope())


# -- cond's branches -----------------------------------------------------------------------------------
def test_cond_with_different_numbers_of_outputs_names_both_branches():
    with fj.program_guard(fj.Program(), fj.Program()):
        x = layer.data("x", dims=[3])
        pred = layer.reduce_sum(x) > 0.0
        with pytest.raises(InputTypeError) as info:
            layer.cond(pred, lambda: [x * 2.0, x], lambda: x - 1.0)
    message = str(info.value)
    assert isinstance(info.value, FluidJaxError) and isinstance(info.value, ValueError)
    assert "true_fn returns 2 output(s), but false_fn returns 1" in message
    here = __file__
    assert message.count(here) == 2, message                        # both branches' source lines
    with fj.program_guard(fj.Program(), fj.Program()):
        x = layer.data("x", dims=[3])
        with pytest.raises(InputTypeError, match="false_fn returns None while true_fn returns results"):
            layer.cond(layer.reduce_sum(x) > 0.0, lambda: x, lambda: None)
