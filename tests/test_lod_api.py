"""Feeding and holding LoD data: LoDTensor's Paddle and seed-004 methods, create_lod_tensor,
DataFeeder and the reader decorators — Paddle 2.6.2 (or NumPy) as the oracle."""

import random
import threading
import time

import jax
import numpy as np
import pytest

import fluidjax as fj  # noqa: I001  (fluidjax before paddle: the other order crashes)
from fluidjax import layer
from fluidjax.lowering.lod_tensor import check_lod, lengths_to_offsets, offsets_to_lengths

paddle = pytest.importorskip("paddle")
core = paddle.base.core


def _paddle_tensor(data=None, lod=None):
    t = core.LoDTensor()
    if data is not None:
        t.set(data, core.CPUPlace())
    if lod is not None:
        t.set_lod(lod)
    return t


# ---------------------------------------------------------------------------------------------
# LoDTensor: what the Executor relies on


def test_executor_facing_behaviour_is_kept():
    empty = fj.LoDTensor()
    assert not empty._is_initialized() and empty.value() is None and empty.lod() == [] and empty.shape() == ()
    assert empty.dtype is None
    t = fj.LoDTensor(np.ones((3, 2), np.float32))
    assert t._is_initialized() and t.shape() == (3, 2) and t.dtype == np.float32
    assert t.value() is t._value
    t.set_lod([[0, 1, 3]])
    assert t.lod() == [[0, 1, 3]]
    t._value = jax.numpy.zeros((3, 2))  # the Executor writes _value directly
    assert t.shape() == (3, 2) and isinstance(t.value(), jax.Array)
    on_cpu = fj.LoDTensor()
    on_cpu.set(np.arange(4), fj.CPUPlace())
    assert isinstance(on_cpu.value(), jax.Array) and np.asarray(on_cpu).tolist() == [0, 1, 2, 3]
    assert fj.Scope().var("v").get_mutable(fj.LoDTensor).lod() == []
    assert repr(t).startswith("LoDTensor(shape=(3, 2)")


# ---------------------------------------------------------------------------------------------
# LoD conversions and validity, against Paddle


LENGTH_CASES = [
    ((5, 2), [[2, 3]]),
    ((5, 2), [[5]]),
    ((5, 2), [[0, 5]]),
    ((5, 2), [[1, 2], [2, 2, 1]]),
    ((9, 1), [[2, 1], [3, 4, 2]]),
    ((4, 3), [[1, 1], [1, 2], [1, 1, 2]]),
    ((6,), [[3, 0, 3]]),
]


@pytest.mark.parametrize("shape,lengths", LENGTH_CASES)
def test_lengths_and_offsets_match_paddle(shape, lengths):
    data = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    theirs = _paddle_tensor(data)
    theirs.set_recursive_sequence_lengths(lengths)
    ours = fj.LoDTensor(data)
    ours.set_recursive_sequence_lengths(lengths)
    assert ours.lod() == theirs.lod() == lengths_to_offsets(lengths)
    assert ours.recursive_sequence_lengths() == theirs.recursive_sequence_lengths() == lengths
    assert offsets_to_lengths(ours.lod()) == lengths
    assert ours.has_valid_recursive_sequence_lengths() is True
    assert ours.shape() == tuple(theirs.shape())
    # set_lod of the offsets gives the same lengths back, in both
    again, theirs_again = fj.LoDTensor(data), _paddle_tensor(data, ours.lod())
    again.set_lod(ours.lod())
    assert again.recursive_sequence_lengths() == theirs_again.recursive_sequence_lengths()


LOD_CASES = [  # (rows, lod): valid and invalid, each judged by Paddle too
    (5, [[0, 2, 5]]),
    (5, [[0, 5]]),
    (5, [[0, 0, 5]]),
    (5, [[0, 1, 2], [0, 2, 5]]),
    (5, []),
    (5, [[1, 2, 5]]),           # does not start at 0
    (5, [[0, 3, 2, 5]]),        # decreases
    (5, [[0, 2, 4]]),           # last offset != rows
    (5, [[0, 2, 6]]),
    (5, [[0]]),                 # a level with no sequence
    (5, [[]]),
    (5, [[0, 1, 3], [0, 2, 5]]),  # level 0 ends at 3, level 1 has 2 sequences
    (5, [[0, 1], [0, 2, 5]]),     # level 0 ends at 1, level 1 has 2 sequences
    (3, [[0, 1, 2], [0, 1, 2, 3]]),
]


@pytest.mark.parametrize("rows,lod", LOD_CASES)
def test_set_lod_accepts_and_refuses_what_paddle_does(rows, lod):
    data = np.zeros((rows, 2), np.float32)
    theirs = _paddle_tensor(data)
    try:
        theirs.set_lod(lod)
        paddle_ok = True
    except ValueError:
        paddle_ok = False
    ours = fj.LoDTensor(data)
    if paddle_ok:
        ours.set_lod(lod)
        assert ours.lod() == theirs.lod()
        assert ours.has_valid_recursive_sequence_lengths() == theirs.has_valid_recursive_sequence_lengths() is True
    else:
        with pytest.raises(ValueError, match="invalid LoD"):
            ours.set_lod(lod)
        assert ours.lod() == []  # nothing changed
    # the same judgement through the lengths form, where lengths can express it
    if all(len(level) >= 1 and level[0] == 0 for level in lod):
        lengths = offsets_to_lengths(lod)
        if all(n >= 0 for level in lengths for n in level):
            try:
                _paddle_tensor(data).set_recursive_sequence_lengths(lengths)
                paddle_lengths_ok = True
            except ValueError:
                paddle_lengths_ok = False
            t = fj.LoDTensor(data)
            if paddle_lengths_ok:
                t.set_recursive_sequence_lengths(lengths)
            else:
                with pytest.raises(ValueError, match="invalid LoD"):
                    t.set_recursive_sequence_lengths(lengths)


def test_has_valid_matches_paddle_on_a_lod_set_before_the_data():
    # Without data, only the rules about the offsets themselves apply (in both).
    for lod in ([[0, 2, 4]], [[0, 1, 3], [0, 2, 4, 5]]):
        theirs, ours = _paddle_tensor(lod=lod), fj.LoDTensor()
        ours.set_lod(lod)
        assert ours.lod() == theirs.lod()
        assert ours.has_valid_recursive_sequence_lengths() == theirs.has_valid_recursive_sequence_lengths() is True
    with pytest.raises(ValueError):
        _paddle_tensor(lod=[[1, 3]])
    with pytest.raises(ValueError, match="must start at 0"):
        fj.LoDTensor().set_lod([[1, 3]])
    # Paddle leaves an invalid LoD behind when set() brings data of another length (then
    # has_valid says False); here set() refuses such data.
    theirs = _paddle_tensor(lod=[[0, 2, 4]])
    theirs.set(np.zeros((5, 1), np.float32), core.CPUPlace())
    assert theirs.has_valid_recursive_sequence_lengths() is False
    ours = fj.LoDTensor()
    ours.set_lod([[0, 2, 4]])
    with pytest.raises(ValueError, match=r"set\(data of shape \(5, 1\)\) keeps the LoD already set.*ends at offset 4, "
                                         r"but the data has 5 rows"):
        ours.set(np.zeros((5, 1), np.float32))
    assert not ours._is_initialized() and ours.lod() == [[0, 2, 4]]
    ours.set(np.zeros((4, 1), np.float32))
    assert ours.has_valid_recursive_sequence_lengths()
    # an invalid state written behind the API's back is reported, not raised
    ours._lod = [[0, 9]]
    assert ours.has_valid_recursive_sequence_lengths() is False
    ours._lod = [[0, 4]]
    ours._value = np.float32(1)  # a scalar has no rows to index
    assert ours.has_valid_recursive_sequence_lengths() is False


@pytest.mark.parametrize("lod,rule", [
    ([[1, 2, 5]], r"level 0 \[1, 2, 5\] starts at 1: offsets must start at 0"),
    ([[0, 3, 2, 5]], r"goes from 3 down to 2 at position 2: offsets must be non-decreasing"),
    ([[0, 1, 3], [0, 2, 5]], r"level 0 ends at offset 3, but level 1 has 2 sequence\(s\): each level's last offset "
                             r"must equal the number of entries of the next level"),
    ([[0, 2, 4]], r"the last level ends at offset 4, but the data has 5 rows: the last offset must equal the "
                  r"data's first dimension"),
    ([[0]], r"level 0 \[0\] has 1 offset\(s\): a level needs at least 2"),
])
def test_lod_errors_name_the_broken_rule(lod, rule):
    t = fj.LoDTensor(np.zeros((5, 1), np.float32))
    with pytest.raises(ValueError, match=rule):
        t.set_lod(lod)
    with pytest.raises(ValueError, match=rule):
        fj.LoDTensor(np.zeros((5, 1), np.float32), lod)
    with pytest.raises(ValueError, match=rule):
        check_lod(lod, rows=5)


def test_lengths_errors():
    t = fj.LoDTensor(np.zeros((5, 1), np.float32))
    with pytest.raises(ValueError, match=r"the last level ends at offset 6, but the data has 5 rows"):
        t.set_recursive_sequence_lengths([[2, 4]])
    with pytest.raises(ValueError, match="negative length.*must be non-negative"):
        t.set_recursive_sequence_lengths([[2, -1, 4]])
    with pytest.raises(TypeError, match="must be integers"):
        t.set_recursive_sequence_lengths([[2.0, 3]])
    with pytest.raises(TypeError, match="list of levels"):
        t.set_lod([0, 2, 5])
    with pytest.raises(ValueError, match="scalar.*rank >= 1"):
        fj.LoDTensor(np.float32(3)).set_lod([[0, 1]])
    assert t.lod() == []
    t.set_lod([[0, 2, 5]])
    t.set_lod([])  # clears
    assert t.lod() == [] and t.has_valid_recursive_sequence_lengths()
    t.set(np.zeros((7, 1), np.float32))
    t.set_recursive_sequence_lengths([[3, 4]])
    assert t.lod() == [[0, 3, 7]]


# ---------------------------------------------------------------------------------------------
# seed 004: resize, mutable_data, share_data_with, extend, shrink


def test_resize_records_dims_and_mutable_data_allocates():
    t = fj.LoDTensor()
    t.resize([3, 4])
    assert t.shape() == (3, 4) and not t._is_initialized() and t.value() is None
    with pytest.raises(ValueError, match=r"no data; it has dims \[3, 4\] but no memory yet.*mutable_data"):
        t.numpy()
    m = t.mutable_data("float32")
    assert isinstance(m, np.ndarray) and m.shape == (3, 4) and m.dtype == np.float32 and not m.any()
    assert t._is_initialized() and t.mutable_data(np.float32) is m  # same dtype: the same memory
    m[1, 2] = 5.0
    assert t.numpy()[1, 2] == 5.0
    other = t.mutable_data("int64")  # another type: new memory (Caffe2's raw_mutable_data)
    assert other.dtype == np.int64 and other.shape == (3, 4) and other is not m
    assert t.data("int64") is other
    with pytest.raises(TypeError, match="holds int64 data, not float32"):
        t.data("float32")
    t.resize([3, 4])  # the same dims keep the memory
    assert t.value() is other
    t.resize([2, 2])
    assert t.shape() == (2, 2) and not t._is_initialized()
    on_device = t.mutable_data("float32", fj.CPUPlace())
    assert isinstance(on_device, jax.Array) and on_device.shape == (2, 2)
    assert t.mutable_data("float32", fj.CPUPlace()) is on_device


def test_mutable_data_and_resize_errors():
    with pytest.raises(ValueError, match=r"has no dims yet; call resize\(dims\) first"):
        fj.LoDTensor().mutable_data("float32")
    with pytest.raises(ValueError, match="holds no data"):
        fj.LoDTensor().data()
    with pytest.raises(ValueError, match="holds no data"):
        np.asarray(fj.LoDTensor())
    with pytest.raises(ValueError, match="non-negative"):
        fj.LoDTensor().resize([-1, 3])
    with pytest.raises(TypeError, match="not an integer"):
        fj.LoDTensor().resize([2.5])
    with pytest.raises(TypeError, match="unknown dtype"):
        fj.LoDTensor(np.zeros(2)).mutable_data("float99")
    t = fj.LoDTensor(np.zeros((5, 1)), [[0, 2, 5]])
    with pytest.raises(ValueError, match=r"resize\(\[4, 1\]\) keeps the LoD.*ends at offset 5, but the data has 4 rows"):
        t.resize([4, 1])
    assert t.shape() == (5, 1) and t._is_initialized()


def test_resize_then_mutable_data_matches_paddle():
    theirs = core.LoDTensor()
    theirs._set_dims([3, 4])
    assert not theirs._is_initialized()
    theirs._mutable_data(core.CPUPlace(), core.VarDesc.VarType.INT64)
    ours = fj.LoDTensor()
    ours.resize([3, 4])
    assert not ours._is_initialized()
    ours.mutable_data("int64")
    assert ours._is_initialized() and ours.shape() == tuple(theirs.shape()) and ours.dtype == np.array(theirs).dtype


def test_share_data_with():
    a = fj.LoDTensor(np.arange(6, dtype=np.float32).reshape(3, 2), [[0, 1, 3]])
    b = fj.LoDTensor()
    b.share_data_with(a)
    assert b.shape() == (3, 2) and b.lod() == []  # the data is shared, the LoD is each tensor's own
    b.mutable_data("float32")[0, 0] = 100.0
    assert a.numpy()[0, 0] == 100.0
    a.mutable_data("float32")[2, 1] = -1.0
    assert b.numpy()[2, 1] == -1.0
    # Paddle: the same data and dims, each keeps its own LoD
    pa = _paddle_tensor(np.arange(6, dtype=np.float32).reshape(3, 2), [[0, 1, 3]])
    pb = core.LoDTensor()
    pb._share_data_with(pa)
    assert list(pb.shape()) == [3, 2] and pb.lod() == []
    c = fj.LoDTensor(np.zeros((5, 1)), [[0, 5]])
    with pytest.raises(ValueError, match=r"share_data_with\(a tensor of shape \(3, 2\)\) keeps the LoD.*5.*3 rows"):
        c.share_data_with(a)
    assert c.shape() == (5, 1)
    with pytest.raises(ValueError, match="holds no data to share"):
        b.share_data_with(fj.LoDTensor())
    with pytest.raises(TypeError, match="needs a LoDTensor"):
        b.share_data_with(np.zeros(3))


def test_extend_and_shrink_the_outermost_dimension():
    data = np.arange(6, dtype=np.int32).reshape(3, 2)
    t = fj.LoDTensor(data.copy())
    t.extend(2)
    np.testing.assert_array_equal(t.numpy(), np.concatenate([data, np.zeros((2, 2), np.int32)]))
    assert t.dtype == np.int32
    t.shrink(2)
    np.testing.assert_array_equal(t.numpy(), data[:2])
    held = t.value()
    t.mutable_data("int32")[0, 0] = 42  # shrink keeps a view of the same memory
    assert held[0, 0] == 42
    t.shrink(0)
    assert t.shape() == (0, 2)
    # on a jax array
    j = fj.LoDTensor()
    j.set(data, fj.CPUPlace())
    j.extend(1)
    assert isinstance(j.value(), jax.Array) and j.shape() == (4, 2)
    # without memory: only the dims change
    r = fj.LoDTensor()
    r.resize([2, 5])
    r.extend(3)
    assert r.shape() == (5, 5) and not r._is_initialized()
    r.shrink(1)
    assert r.shape() == (1, 5) and not r._is_initialized()


def test_extend_and_shrink_errors():
    t = fj.LoDTensor(np.zeros((3, 2)))
    with pytest.raises(ValueError, match=r"shrink\(4\): the new outer dimension must be an integer from 0 to the current 3"):
        t.shrink(4)
    with pytest.raises(ValueError, match="non-negative integer"):
        t.extend(-1)
    with pytest.raises(ValueError, match="at least one dimension"):
        fj.LoDTensor(np.float32(1)).extend(1)
    with pytest.raises(ValueError, match="at least one dimension.*no dims yet"):
        fj.LoDTensor().shrink(0)
    s = fj.LoDTensor(np.zeros((3, 2)), [[0, 1, 3]])
    with pytest.raises(ValueError, match=r"extend\(1\) to 4 rows keeps the LoD.*ends at offset 3, but the data has 4"):
        s.extend(1)
    with pytest.raises(ValueError, match=r"shrink\(2\) keeps the LoD"):
        s.shrink(2)
    assert s.shape() == (3, 2)


# ---------------------------------------------------------------------------------------------
# create_lod_tensor / create_random_int_lodtensor, against Paddle


def _same(ours, theirs):
    assert isinstance(ours, fj.LoDTensor)
    a, b = np.asarray(ours), np.array(theirs)
    assert a.dtype == b.dtype and a.shape == b.shape
    np.testing.assert_array_equal(a, b)
    assert ours.lod() == theirs.lod()
    assert ours.recursive_sequence_lengths() == theirs.recursive_sequence_lengths()


@pytest.mark.parametrize("data,lengths", [
    (np.arange(10, dtype=np.float32).reshape(5, 2), [[2, 3]]),
    (np.arange(5, dtype=np.int64).reshape(5, 1), [[1, 0, 4]]),
    (np.arange(9, dtype=np.float64).reshape(9, 1), [[2, 1], [3, 4, 2]]),
])
def test_create_lod_tensor_from_an_array_matches_paddle(data, lengths):
    place = core.CPUPlace()
    _same(fj.create_lod_tensor(data, lengths), paddle.base.create_lod_tensor(data, lengths, place))
    # from a LoDTensor: its data, the new lengths
    ours = fj.create_lod_tensor(fj.create_lod_tensor(data, lengths), [[data.shape[0]]])
    theirs = paddle.base.create_lod_tensor(paddle.base.create_lod_tensor(data, lengths, place), [[data.shape[0]]],
                                           place)
    _same(ours, theirs)


@pytest.mark.parametrize("data,lengths", [
    ([[1, 2], [3, 4, 5]], [[2, 3]]),
    ([[7], [], [8, 9]], [[1, 0, 2]]),
    ([[1.5, 2.0], [3.0]], [[2, 1]]),
    ([[[1, 2], [3, 4]], [[5, 6]]], [[2, 1]]),  # entries that are vectors: Paddle appends a 1 too
])
def test_create_lod_tensor_from_lists_matches_paddle(data, lengths):
    _same(fj.create_lod_tensor(data, lengths), paddle.base.create_lod_tensor(data, lengths, core.CPUPlace()))


def test_create_lod_tensor_of_nested_lists_and_on_a_place():
    t = fj.create_lod_tensor([[[1, 2], [3]], [[4, 5, 6]]], [[2, 1], [2, 1, 3]])
    assert t.lod() == [[0, 2, 3], [0, 2, 3, 6]] and np.asarray(t).ravel().tolist() == [1, 2, 3, 4, 5, 6]
    assert np.asarray(t).shape == (6, 1) and t.dtype == np.int64
    on = fj.create_lod_tensor(np.ones((3, 1), np.float32), [[1, 2]], fj.CPUPlace())
    assert isinstance(on.value(), jax.Array) and on.lod() == [[0, 1, 3]]


def test_create_lod_tensor_errors():
    with pytest.raises(AssertionError):
        paddle.base.create_lod_tensor([[1, 2], [3, 4, 5]], [[2, 2]], core.CPUPlace())
    with pytest.raises(ValueError, match=r"data and recursive_seq_lens do not match: level 0 of the lists has lengths "
                                         r"\[2, 3\], but recursive_seq_lens gives \[2, 2\]"):
        fj.create_lod_tensor([[1, 2], [3, 4, 5]], [[2, 2]])
    with pytest.raises(ValueError, match=r"ends at offset 4, but the data has 5 rows"):
        fj.create_lod_tensor(np.zeros((5, 1)), [[2, 2]])
    with pytest.raises(ValueError, match="negative length"):
        fj.create_lod_tensor(np.zeros((5, 1)), [[6, -1]])
    with pytest.raises(TypeError, match="data should be a LoDTensor, a NumPy array or a list"):
        fj.create_lod_tensor("abc", [[3]])
    with pytest.raises(TypeError, match=r"data\[0\] is 1, but a LoD of 2 level\(s\) needs lists 2 deep"):
        fj.create_lod_tensor([1, [2]], [[1, 1], [1, 1]])
    with pytest.raises(TypeError, match="must be numbers"):
        fj.create_lod_tensor([["a", "b"]], [[2]])


def test_create_random_int_lodtensor_matches_paddle():
    lengths, base_shape = [[2, 3]], [4]
    np.random.seed(7)
    theirs = paddle.base.create_random_int_lodtensor(lengths, base_shape, core.CPUPlace(), 0, 10)
    np.random.seed(7)
    ours = fj.create_random_int_lodtensor(lengths, base_shape, None, 0, 10)
    _same(ours, theirs)
    wide = fj.create_random_int_lodtensor([[1, 1], [300, 700]], [3], fj.CPUPlace(), low=-2, high=2)
    values = np.asarray(wide)
    assert values.shape == (1000, 3) and values.min() == -2 and values.max() == 2  # both ends included
    assert wide.lod() == [[0, 1, 2], [0, 300, 1000]]
    with pytest.raises(TypeError, match="base_shape should be a list"):
        fj.create_random_int_lodtensor([[2]], 3, None, 0, 1)


# ---------------------------------------------------------------------------------------------
# DataFeeder, against Paddle's


def _samples(rng, n):
    out = []
    for _ in range(n):
        image = rng.standard_normal(4).astype(np.float32)            # fed to [-1, 2, 2]: reshaped
        label = int(rng.integers(0, 10))                              # a scalar, fed to [-1, 1]
        words = [int(w) for w in rng.integers(0, 100, rng.integers(1, 5))]  # lod_level 1, ids
        paragraph = [[rng.standard_normal(3).tolist() for _ in range(rng.integers(0, 3))]
                     for _ in range(rng.integers(1, 3))]             # lod_level 2, rows of 3
        out.append((image, label, words, paragraph))
    return out


SPECS = [("image", [2, 2], "float32", 0), ("label", [1], "int64", 0), ("words", [1], "int64", 1),
         ("paragraph", [3], "float32", 2)]


def _paddle_feed(samples):
    paddle.enable_static()
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup):
        feed_list = [paddle.static.data(name, [-1, *shape], dtype, lod_level=lod) for name, shape, dtype, lod in SPECS]
        feeder = paddle.base.DataFeeder(feed_list, core.CPUPlace(), program=main)
    return feeder.feed(samples)


def test_data_feeder_matches_paddle():
    samples = _samples(np.random.default_rng(0), 6)
    feed_list = [layer.data(name, shape=shape, dtype=dtype, lod_level=lod) for name, shape, dtype, lod in SPECS]
    ours = fj.DataFeeder(feed_list).feed(samples)
    theirs = _paddle_feed(samples)
    assert list(ours) == list(theirs) == [s[0] for s in SPECS]
    for name, _, dtype, lod_level in SPECS:
        mine, paddles = ours[name], theirs[name]
        expected = np.array(paddles)
        got = np.asarray(mine)
        assert got.dtype == expected.dtype == np.dtype(dtype), name
        assert got.shape == expected.shape, name
        np.testing.assert_array_equal(got, expected, err_msg=name)
        if lod_level:
            assert isinstance(mine, fj.LoDTensor)
            assert mine.recursive_sequence_lengths() == paddles.recursive_sequence_lengths(), name
            assert mine.lod() == paddles.lod()
        else:
            assert isinstance(mine, np.ndarray)


def test_data_feeder_names_program_and_place():
    main = fj.Program()
    with fj.program_guard(main, fj.Program()):
        layer.data("x", dims=3)
        layer.data("ids", dims=1, dtype="int64", lod_level=1)
    feeder = fj.DataFeeder(["ids", "x"], place=fj.CPUPlace(), program=main)
    assert feeder.feed_names == ["ids", "x"]
    feed = feeder.feed([([1, 2], [0.5, 1.5, 2.5]), ([3], (1, 2, 3))])
    assert isinstance(feed["x"], jax.Array) and feed["x"].dtype == np.float32 and feed["x"].shape == (2, 3)
    assert isinstance(feed["ids"].value(), jax.Array) and feed["ids"].lod() == [[0, 2, 3]]
    with pytest.raises(fj.FeedError, match="no variable named 'nope'"):
        fj.DataFeeder(["nope"], program=main)
    with pytest.raises(TypeError, match="feed_list holds a int"):
        fj.DataFeeder([3], program=main)


def test_data_feeder_feeds_a_run():
    words = layer.data("words", dims=4, lod_level=1)
    label = layer.data("label", dims=1, dtype="int64")
    h = layer.fc(words, output_size=2)
    exe = fj.Executor()
    exe.run(fj.default_startup_program())
    rng = np.random.default_rng(1)
    batch = [(rng.standard_normal((n, 4)).astype(np.float32), i) for i, n in enumerate([2, 3, 1])]
    feed = fj.DataFeeder([words, label]).feed(batch)
    out, = exe.run(feed=feed, fetch_list=[h])
    w = np.asarray(fj.global_scope().find_var("fc_0.w_0").get_tensor())
    b = np.asarray(fj.global_scope().find_var("fc_0.b_0").get_tensor())
    np.testing.assert_allclose(out, np.concatenate([s for s, _ in batch]) @ w + b, rtol=1e-5, atol=1e-5)


def test_data_feeder_errors_name_the_variable_and_the_sample():
    x = layer.data("x", dims=2)
    ids = layer.data("ids", dims=1, dtype="int64", lod_level=1)
    feeder = fj.DataFeeder([x, ids])
    good = ([1.0, 2.0], [1, 2])
    with pytest.raises(fj.FeedError, match=r"sample 1 has 1 field\(s\), but feed_list has 2 variable\(s\) \['x', 'ids'\]"):
        feeder.feed([good, ([1.0, 2.0],)])
    with pytest.raises(fj.FeedError, match=r"variable 'x' .*sample 2: the field has shape \[3\] \(3 values\), but each "
                                           r"sample of the variable has shape \[2\]"):
        feeder.feed([good, good, ([1.0, 2.0, 3.0], [1])])
    with pytest.raises(fj.FeedError, match=r"variable 'ids' .*sample 1: the entry \[1\] holds non-integral values"):
        feeder.feed([good, ([1.0, 2.0], [1, 2.5])])
    with pytest.raises(fj.FeedError, match=r"variable 'ids' .*sample 0: the field itself is int 7, but a lod_level 1 "
                                           r"field is a list"):
        feeder.feed([([1.0, 2.0], 7)])
    with pytest.raises(fj.FeedError, match=r"variable 'x' .*sample 0: the field holds strings"):
        feeder.feed([(["a", "b"], [1])])
    with pytest.raises(fj.FeedError, match=r"variable 'x' .*sample 1: the field is not a regular array"):
        feeder.feed([good, ([[1.0], [2.0, 3.0]], [1])])
    with pytest.raises(fj.FeedError, match="sample 0 is a float"):
        feeder.feed([1.5])
    with pytest.raises(fj.FeedError, match="the minibatch has no samples"):
        feeder.feed([])
    big = layer.data("big", dims=1, dtype="uint8")
    with pytest.raises(fj.FeedError, match=r"variable 'big' .*sample 0: the field holds values outside the range of uint8"):
        fj.DataFeeder([big]).feed([(300,)])
    two = layer.data("two", dims=1, dtype="int64", lod_level=2)
    with pytest.raises(fj.FeedError, match=r"variable 'two': the minibatch's sequence lengths \[\[0\], \[\]\] do not "
                                           r"form a valid LoD"):
        fj.DataFeeder([two]).feed([([],)])
    # each is a ValueError, as Paddle's DataFeeder raises
    with pytest.raises(ValueError):
        feeder.feed([])


def test_data_feeder_with_unknown_item_dims_and_empty_sequences():
    v = layer.data("v", shape=[-1, -1], lod_level=1)  # rows of any length: no reshape
    feed = fj.DataFeeder([v]).feed([([[1.0, 2.0], [3.0, 4.0]],), ([],)])
    assert feed["v"].shape() == (2, 2) and feed["v"].recursive_sequence_lengths() == [[2, 0]]
    with pytest.raises(fj.FeedError, match=r"variable 'v' .*sample 1: shape \[3\] differs from the first sample's \[2\]"):
        fj.DataFeeder([v]).feed([([[1.0, 2.0]],), ([[1.0, 2.0, 3.0]],)])


# ---------------------------------------------------------------------------------------------
# readers, against paddle.batch / paddle.reader


def _numbers(n):
    def reader():
        yield from range(n)
    return reader


@pytest.mark.parametrize("size,drop_last", [(2, False), (2, True), (3, False), (5, True), (7, False)])
def test_batch_matches_paddle(size, drop_last):
    assert list(fj.batch(_numbers(5), size, drop_last)()) == list(paddle.batch(_numbers(5), size, drop_last)())
    with pytest.raises(ValueError, match="batch_size should be a positive integer"):
        fj.batch(_numbers(5), 0)


def test_reader_decorators_match_paddle():
    pr = paddle.reader
    a, b = _numbers(4), _numbers(3)
    pairs = lambda: iter([(1, 2), (3, 4), (5, 6)])  # noqa: E731
    assert list(fj.reader.chain(a, b)()) == list(pr.chain(a, b)())
    assert list(fj.reader.compose(pairs, b)()) == list(pr.compose(pairs, b)()) == [(1, 2, 0), (3, 4, 1), (5, 6, 2)]
    assert list(fj.reader.compose(a, b, check_alignment=False)()) == list(pr.compose(a, b, check_alignment=False)())
    assert list(fj.reader.map_readers(lambda x, y: x * y, a, b)()) == list(pr.map_readers(lambda x, y: x * y, a, b)())
    for n in (0, 2, 10):
        assert list(fj.reader.firstn(a, n)()) == list(pr.firstn(a, n)())
    for buf in (1, 3, 100):
        random.seed(3)
        theirs = list(pr.shuffle(_numbers(20), buf)())
        random.seed(3)
        assert list(fj.reader.shuffle(_numbers(20), buf)()) == theirs
    assert sorted(fj.reader.shuffle(_numbers(20), 7)()) == list(range(20))
    assert list(fj.reader.buffered(_numbers(50), 4)()) == list(pr.buffered(_numbers(50), 4)()) == list(range(50))
    # a reader is re-iterable: every call starts afresh
    r = fj.batch(fj.reader.shuffle(_numbers(6), 3), 2)
    assert len(list(r())) == len(list(r())) == 3


def test_compose_refuses_misaligned_readers():
    with pytest.raises(pr_error()):
        list(paddle.reader.compose(_numbers(3), _numbers(2))())
    with pytest.raises(fj.reader.ComposeNotAligned, match=r"reader\(s\) \[1\] of 2 ended after 2 samples"):
        list(fj.reader.compose(_numbers(3), _numbers(2))())
    assert issubclass(fj.reader.ComposeNotAligned, ValueError)
    # readers may yield None (Paddle would call that misaligned)
    nones = lambda: iter([None, None])  # noqa: E731
    assert list(fj.reader.compose(nones, _numbers(2))()) == [(None, 0), (None, 1)]


def pr_error():
    from paddle.reader.decorator import ComposeNotAligned

    return ComposeNotAligned


def test_buffered_raises_the_readers_error_and_stops_its_thread():
    def failing():
        yield 1
        raise RuntimeError("disk on fire")

    got = []
    with pytest.raises(RuntimeError, match="disk on fire"):
        for item in fj.reader.buffered(failing, 2)():
            got.append(item)
    assert got == [1]

    def endless():
        i = 0
        while True:
            yield i
            i += 1

    before = {t.ident for t in threading.enumerate()}
    gen = fj.reader.buffered(endless, 3)()
    assert [next(gen) for _ in range(5)] == [0, 1, 2, 3, 4]
    gen.close()
    deadline = time.time() + 5
    while time.time() < deadline and any(t.name == "fluidjax-buffered-reader" and t.ident not in before
                                         for t in threading.enumerate()):
        time.sleep(0.02)
    assert not any(t.name == "fluidjax-buffered-reader" and t.ident not in before for t in threading.enumerate())


def test_reader_argument_errors():
    with pytest.raises(ValueError, match="buf_size should be a positive integer"):
        fj.reader.shuffle(_numbers(3), 0)
    with pytest.raises(ValueError, match="size should be a positive integer"):
        fj.reader.buffered(_numbers(3), 0)
    with pytest.raises(ValueError, match="n should be a non-negative integer"):
        fj.reader.firstn(_numbers(3), -1)


def test_reader_is_a_module_attribute_and_importable():
    import fluidjax.reader as reader_module
    from fluidjax.reader import compose

    assert reader_module is fj.reader and compose is fj.reader.compose
    assert fj.batch is fj.reader.batch
