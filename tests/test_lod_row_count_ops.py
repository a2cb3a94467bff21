"""Issue 28: ops that are not LoD-aware and drop a LoD value's LoD (a reshape to more or fewer rows,
a transpose, stack, expand, concat along the rows, shape, fill_constant_batch_size_like) take its
rows as *counted rows* — the real rows of all its sequences, padded to the bucket, carrying their
real count (``lower._lod_as_counted``) — so fetches and ``mean`` see the real rows only, as Paddle's
do; what cannot know its real rows (rows moved into another dim, cut or reversed along the rows)
refuses with a typed error. Checked against Paddle 2.6.2 running the same program bytes with a
LoDTensor feed, under ``FLAGS_bucket_sequences`` (the default), with row counts that are not
bucket sizes (5, 7, 13 rows; 13 rows in 3 sequences also pads the sequence count to 4)."""

import numpy as np
import pytest

import fluidjax as fluid
import fluidjax as fj
from fluidjax.ir.errors import DataDependentShapeError, FluidJaxError

import paddle_oracle as po

LENGTHS = [[[2, 3]], [[3, 4]], [[3, 4, 6]]]     # 5, 7 and 13 rows
L = fluid.layers


def _program(build, width=6):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fj.unique_name.guard():
        x = L.data("x", shape=[width], dtype="float32", lod_level=1)
        outs = build(x)
        means = [L.mean(o) if o.dtype == "float32" else None for o in outs]
    return main, startup, outs, means


def _check_against_paddle(build, lengths, width=6, exact=False):
    """Run ``build``'s outputs and their means in both systems; compare values and shapes."""
    assert fj.get_flags(["FLAGS_bucket_sequences"])["FLAGS_bucket_sequences"]
    main, startup, outs, means = _program(build, width)
    rows = sum(lengths[0])
    feed = {"x": np.random.default_rng(rows).standard_normal((rows, width)).astype("float32")}
    fetch = [o.name for o in outs] + [m.name for m in means if m is not None]
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.Scope()
    exe.run(startup, scope=scope)
    ours = exe.run(main, feed={"x": fluid.create_lod_tensor(feed["x"], lengths, fluid.CPUPlace())},
                   fetch_list=fetch, scope=scope)
    theirs = po.run_lod(main.serialize(), feed, fetch, po.persistable_values(main, scope), lods={"x": lengths})
    for name, a, b in zip(fetch, ours, theirs):
        a, b = np.asarray(a), np.asarray(b)
        is_mean = name in [m.name for m in means if m is not None]
        if is_mean:
            a, b = a.reshape(()), b.reshape(())          # Fluid 1.x's [1] against Paddle 2.6's 0-d
        assert a.shape == b.shape, (name, a.shape, b.shape)
        if exact and not is_mean:
            np.testing.assert_array_equal(a, b, err_msg=name)
        else:
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6, err_msg=name)
    return ours


FAMILIES = {
    # reshape2 to more rows, to fewer rows, to one dim; Fluid 1.x's reshape op (below)
    "reshape": lambda x: [L.reshape(x, [-1, 3]), L.reshape(x, [-1, 2]), L.reshape(x, [-1]),
                          L.reshape(L.reshape(x, [-1, 3]), [-1, 6])],
    # a transpose keeping the rows first: Paddle's transpose shares no LoD
    "transpose": lambda x: [L.transpose(L.reshape(x, [-1, 2, 3]), [0, 2, 1])],
    # stack / unstack along a later axis (rows kept, no LoD)
    "stack": lambda x: [L.stack([x, x * 2.0], axis=1), *L.unstack(L.reshape(x, [-1, 2, 3]), axis=1)],
    # expand along the rows: the real rows repeated back to back
    "expand": lambda x: [L.expand(x, [3, 1]), L.expand(x, [1, 2])],
    # concat along the rows: each input's real rows after the previous input's
    "concat": lambda x: [L.concat([x, x * 3.0], axis=0), L.concat([x, x], axis=1)],
    # argsort / cumsum along the rows see the real rows only
    "sort": lambda x: [*L.argsort(x, axis=0), L.cumsum(x, axis=0)],
}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_row_count_follows_the_op_like_paddle(family):
    for lengths in LENGTHS:
        _check_against_paddle(FAMILIES[family], lengths)


def test_reshape_fetches_the_real_rows_and_elements():
    """[rows, 6] to [-1, 3]: 2 * rows real rows (the issue's case); to [-1, 6 * rows]: one row; the
    fetched rows hold X's elements in order."""
    for lengths in LENGTHS:
        rows = sum(lengths[0])
        ours = _check_against_paddle(lambda x: [L.reshape(x, [-1, 3]), L.reshape(x, [-1, 6 * rows])],
                                     lengths, exact=True)
        assert ours[0].shape == (2 * rows, 3) and ours[1].shape == (1, 6 * rows)


def test_fluid1_reshape_and_flatten_contiguous_range_of_the_rows():
    """Fluid 1.x's ``reshape`` op and ``flatten_contiguous_range`` over the rows (start_axis 0)."""
    def build(x):
        block = x.block
        old = block.create_var(name="old_out", dtype="float32", shape=(-1, 2), lod_level=0)
        block.append_op(type="reshape", inputs={"X": [x]}, outputs={"Out": [old]}, attrs={"shape": [-1, 2]})
        cube = L.reshape(x, [-1, 2, 3])
        flat = block.create_var(name="flat_out", dtype="float32", shape=(-1, 3), lod_level=0)
        xshape = block.create_var(name="flat_xshape", dtype="float32", shape=(0, -1, 2, 3), lod_level=0)
        block.append_op(type="flatten_contiguous_range", inputs={"X": [cube]},
                        outputs={"Out": [flat], "XShape": [xshape]}, attrs={"start_axis": 0, "stop_axis": 1})
        return [old, flat]
    for lengths in LENGTHS:
        ours = _check_against_paddle(build, lengths, exact=True)
        assert ours[0].shape == (3 * sum(lengths[0]), 2)


def test_fill_constant_batch_size_like_of_a_lod_value_counts_its_sequences():
    """``fill_constant_batch_size_like`` gives the number of sequences (as Paddle's kernel: a LoD
    input's last level), also when that count is padded to a bucket (3 sequences: bucket 4); the
    shape of a value reshaped to more rows is its real one."""
    def build(x):
        ones = L.fill_constant_batch_size_like(x, [-1, 4], "float32", 1.5)
        return [ones, L.reduce_sum(ones, dim=0), L.shape(L.reshape(x, [-1, 3]))]
    for lengths in LENGTHS:
        ours = _check_against_paddle(build, lengths, exact=True)
        assert ours[0].shape == (len(lengths[0]), 4)
        assert list(ours[2]) == [2 * sum(lengths[0]), 3]


def test_random_batch_size_like_of_a_lod_value_has_its_real_rows():
    """``uniform_random_batch_size_like`` (and gaussian_, which Paddle 2.6.2 no longer runs) takes
    Input's real rows (no LoD rule in Paddle's kernel): the fetched shapes equal Paddle's (the
    values are random)."""
    main, startup, outs, _ = _program(lambda x: [L.uniform_random_batch_size_like(x, [-1, 4]),
                                                 L.uniform_random_batch_size_like(x, [-1, 2])])
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.Scope()
    exe.run(startup, scope=scope)
    for lengths in LENGTHS:
        rows = sum(lengths[0])
        feed = {"x": np.ones((rows, 6), "float32")}
        ours = exe.run(main, feed={"x": fluid.create_lod_tensor(feed["x"], lengths, fluid.CPUPlace())},
                       fetch_list=[o.name for o in outs], scope=scope)
        theirs = po.run_lod(main.serialize(), feed, [o.name for o in outs], {}, lods={"x": lengths})
        assert [np.shape(a) for a in ours] == [np.asarray(b).shape for b in theirs] == [(rows, 4), (rows, 2)]


def test_gradients_through_row_count_changes_match_paddle():
    """fc -> reshape to more rows / concat along the rows / expand -> mean -> SGD: the fc's
    gradients (fetched) and the updated weights equal Paddle's."""
    for build in (lambda h: L.reshape(h, [-1, 3]), lambda h: L.concat([h, h * 2.0], axis=0),
                  lambda h: L.expand(h, [3, 1]), lambda h: L.transpose(L.reshape(h, [-1, 2, 3]), [0, 2, 1])):
        main, startup = fluid.Program(), fluid.Program()
        with fluid.program_guard(main, startup), fj.unique_name.guard():
            x = L.data("x", shape=[6], dtype="float32", lod_level=1)
            h = L.fc(x, 6, param_attr=fluid.ParamAttr(name="w"), bias_attr=fluid.ParamAttr(name="b"))
            loss = L.mean(L.square(build(h)))
            fluid.optimizer.SGD(0.1).minimize(loss)
        lengths = LENGTHS[2]
        feed = {"x": np.random.default_rng(1).standard_normal((13, 6)).astype("float32")}
        fetch = [loss.name, "w@GRAD", "b@GRAD"]
        exe = fluid.Executor(fluid.CPUPlace())
        scope = fluid.Scope()
        exe.run(startup, scope=scope)
        params = po.persistable_values(main, scope)
        ours = exe.run(main, feed={"x": fluid.create_lod_tensor(feed["x"], lengths, fluid.CPUPlace())},
                       fetch_list=fetch, scope=scope)
        theirs = po.run_lod(main.serialize(), feed, fetch, params, lods={"x": lengths})
        for name, a, b in zip(fetch, ours, theirs):
            b = np.asarray(b)
            np.testing.assert_allclose(np.asarray(a).reshape(b.shape), b, rtol=1e-5, atol=1e-6, err_msg=name)


REFUSED = {
    "transpose_rows_to_columns": (lambda x: [L.transpose(x, [1, 0])], DataDependentShapeError),
    "unsqueeze_before_rows": (lambda x: [L.unsqueeze(x, [0])], DataDependentShapeError),
    "stack_along_rows": (lambda x: [L.stack([x, x], axis=0)], DataDependentShapeError),
    "flatten_rows_into_columns": (lambda x: [L.flatten(x, axis=0)], DataDependentShapeError),
    "split_rows": (lambda x: L.split(x, [3, -1], dim=0), FluidJaxError),
    "reverse_rows": (lambda x: [L.reverse(x, 0)], FluidJaxError),
    "pad_rows": (lambda x: [L.pad(x, [0, 1, 0, 0])], DataDependentShapeError),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_rows_that_cannot_be_known_are_refused(case):
    """Where the real rows would land in another dim, or be cut or moved among padding rows, the
    step refuses with a typed error naming the op (never padding rows as data). Paddle runs these
    on its exact rows; fluidjax pads the rows to a bucket inside the compiled step."""
    build, error = REFUSED[case]
    main, startup, outs, _ = _program(build)
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.Scope()
    exe.run(startup, scope=scope)
    feed = {"x": fluid.create_lod_tensor(np.ones((7, 6), "float32"), [[3, 4]], fluid.CPUPlace())}
    with pytest.raises(error) as info:
        exe.run(main, feed=feed, fetch_list=[o.name for o in outs], scope=scope)
    assert "LoD" in str(info.value) and "test_lod_row_count_ops.py" in str(info.value)


@pytest.mark.parametrize("slide_steps", [0, 20])
def test_auc_of_a_lod_prediction_counts_the_real_rows_like_paddle(slide_steps):
    """A CTR model's ``auc`` of an fc softmax over LoD rows (PaddleRec's ctr/dnn: embeddings of
    one-id LoD slots -> fc -> softmax, a dense label per row): the rows padded to a bucket take no
    part in the statistics; the AUC and the per-bucket counts equal Paddle's, batch after batch."""
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fj.unique_name.guard():
        x = L.data("x", shape=[6], dtype="float32", lod_level=1)
        label = L.data("label", shape=[1], dtype="int64")
        predict = L.fc(x, 2, act="softmax")
        auc, batch_auc, states = L.auc(predict, label, num_thresholds=2 ** 12, slide_steps=slide_steps)
    fetch = [auc.name, batch_auc.name] + [s.name for s in states]
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.Scope()
    exe.run(startup, scope=scope)
    params = po.persistable_values(main, scope)
    seen = 0
    for k, lengths in enumerate(LENGTHS):           # 5, 7, 13 rows: the stats accumulate
        rows = sum(lengths[0])
        rng = np.random.default_rng(k)
        feed = {"x": rng.standard_normal((rows, 6)).astype("float32"),
                "label": rng.integers(0, 2, (rows, 1)).astype("int64")}
        ours = exe.run(main, feed={"x": fluid.create_lod_tensor(feed["x"], lengths, fluid.CPUPlace()),
                                   "label": feed["label"]}, fetch_list=fetch, scope=scope)
        theirs = po.run_lod(main.serialize(), feed, fetch, params, lods={"x": lengths})
        params = po.persistable_values(main, scope)   # Paddle's next batch starts from the same stats
        for name, a, b in zip(fetch, ours, theirs):
            a, b = np.asarray(a).reshape(-1), np.asarray(b).reshape(-1)
            # (with slide_steps 0 the state variables keep one entry more than Paddle's kernel
            # writes: the counts it writes are compared)
            np.testing.assert_allclose(a[:b.size], b, rtol=1e-6, err_msg=f"{name} after {rows} rows")
        seen += rows
        if slide_steps == 0:          # every real row counted once, no padding row
            assert int(np.asarray(ours[2])[:4097].sum() + np.asarray(ours[3])[:4097].sum()) == seen
