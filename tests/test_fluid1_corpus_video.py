"""Issue 28, video scripts (NeXtVLAD): a reshape (reshape/reshape2/flatten2) that keeps X's rows
as Out's rows passes X's LoD on, as Paddle's ShareLoD does when ``x_dims[0] == out_dims[0]``, so a
later sequence_pool still sees the sequences; one that changes the row count shares none.
Checked against Paddle 2.6.2 running the same program bytes with a LoDTensor feed."""

import numpy as np

import fluidjax as fluid
import fluidjax as fj

import paddle_oracle as po

LENGTHS = [[2, 3]]   # 5 frames in 2 videos


def _run_both(main, startup, feed, lods, fetch):
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.Scope()
    exe.run(startup, scope=scope)
    params = po.persistable_values(main, scope)
    ours_feed = {n: fluid.create_lod_tensor(v, lods[n], fluid.CPUPlace()) if n in lods else v
                 for n, v in feed.items()}
    ours = exe.run(main, feed=ours_feed, fetch_list=fetch, scope=scope, return_numpy=False)
    theirs = po.run_lod(main.serialize(), feed, fetch, params, lods=lods)
    return ours, theirs


def test_reshape_keeping_the_rows_keeps_the_lod_for_sequence_pool_like_paddle():
    """NeXtVLAD: frames [N, G*C] reshaped to [-1, G, C], softmax, weighted per group, then
    sequence_pool per video; also reshape2 with a copied first dim (0), Fluid 1.x's reshape op and
    flatten2 back to rows: the LoD passes through each, values and LoD as Paddle's."""
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fj.unique_name.guard():
        x = fluid.layers.data("x", shape=[6], dtype="float32", lod_level=1)
        att = fluid.layers.data("att", shape=[2], dtype="float32", lod_level=1)
        act = fluid.layers.softmax(fluid.layers.reshape(x, [-1, 2, 3]))
        act = fluid.layers.elementwise_mul(act, fluid.layers.reshape(att, [-1, 2, 1]), axis=0)
        pooled = fluid.layers.sequence_pool(act, "sum")
        copied = fluid.layers.reshape(x, [0, 3, 2])
        back = fluid.layers.flatten(copied, axis=1)                    # flatten2: rows kept
        block = main.global_block()
        old = block.create_var(name="old_out", dtype="float32", shape=(-1, 6), lod_level=0)
        block.append_op(type="reshape", inputs={"X": [back]}, outputs={"Out": [old]},
                        attrs={"shape": [-1, 6]})
        old_pooled = fluid.layers.sequence_pool(old, "max")
    for v in (act, copied, back, old):
        assert v.lod_level == 1, v.name
    rng = np.random.default_rng(0)
    feed = {"x": rng.standard_normal((5, 6)).astype("float32"),
            "att": rng.random((5, 2)).astype("float32")}
    fetch = [act.name, pooled.name, back.name, old_pooled.name]
    ours, theirs = _run_both(main, startup, feed, {"x": LENGTHS, "att": LENGTHS}, fetch)
    for i in (0, 2):
        assert ours[i].recursive_sequence_lengths() == LENGTHS
        assert theirs[i].recursive_sequence_lengths() == LENGTHS
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(np.array(a), np.array(b), rtol=1e-5, atol=1e-6)
    # NumPy: the per-video sums of the weighted softmax
    e = np.exp(feed["x"].reshape(5, 2, 3))
    w = e / e.sum(-1, keepdims=True) * feed["att"].reshape(5, 2, 1)
    np.testing.assert_allclose(np.array(ours[1]), np.stack([w[:2].sum(0), w[2:].sum(0)]), rtol=1e-5)


def test_reshape_changing_the_row_count_shares_no_lod():
    """[N, 6] to [-1, 3] makes 2N rows: here Out is a plain tensor (lod_level 0) whose 10 rows
    match Paddle's. Paddle 2.6.2 copies X's offsets [0, 2, 5] onto the 10 rows, a LoD that no
    longer covers them (a later sequence op would read half the rows): we share none."""
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fj.unique_name.guard():
        x = fluid.layers.data("x", shape=[6], dtype="float32", lod_level=1)
        out = fluid.layers.reshape(x, [-1, 3])
    assert out.lod_level == 0
    feed = {"x": np.arange(30, dtype="float32").reshape(5, 6)}
    ours, theirs = _run_both(main, startup, feed, {"x": LENGTHS}, [out.name])
    assert theirs[0].recursive_sequence_lengths() == LENGTHS     # X's, though 10 rows now
    assert ours[0].recursive_sequence_lengths() == []
    np.testing.assert_array_equal(np.array(ours[0])[:10], np.array(theirs[0]))


def test_reshape_changing_the_row_count_fetches_the_real_rows():
    """The same reshape: Out holds the 10 real rows, as Paddle's (X is taken as counted rows, its
    real count re-cut: 5 * 6 / 3; lower._lod_as_counted)."""
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fj.unique_name.guard():
        x = fluid.layers.data("x", shape=[6], dtype="float32", lod_level=1)
        out = fluid.layers.reshape(x, [-1, 3])
    feed = {"x": np.arange(30, dtype="float32").reshape(5, 6)}
    ours, theirs = _run_both(main, startup, feed, {"x": LENGTHS}, [out.name])
    assert np.array(ours[0]).shape == np.array(theirs[0]).shape == (10, 3)
    np.testing.assert_array_equal(np.array(ours[0]), np.array(theirs[0]))
