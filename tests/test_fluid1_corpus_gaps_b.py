"""More gaps the PaddlePaddle/models corpus run found (docs/fluid1.md, "Corpus"), each closed as a
rule and checked against Paddle 2.6.2 running the same program bytes or against NumPy."""

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


# -- 1. a Variable inside a shape list (ShapeTensor / ShapeTensorList) ----------------------------
def test_shape_lists_with_variables_match_paddle():
    """word2vec / DCGAN / SPADE: ``fill_constant(shape=[shape(x)[0], 1])``, ``fill_constant(shape=
    shape(y))``, ``reshape(x, [-1, var])``: the shapes travel as tensor inputs, read at trace time."""
    main, startup = _programs()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data("x", shape=[6], dtype="float32")
        n = fluid.layers.shape(x)[0]
        ones = fluid.layers.fill_constant(shape=[n, 1], value=1.0, dtype="float32")
        zeros = fluid.layers.fill_constant(shape=fluid.layers.shape(x), value=2.0, dtype="float32")
        three = fluid.layers.fill_constant([1], "int32", 3)
        r = fluid.layers.reshape(x, shape=[-1, three])
        u = fluid.layers.uniform_random(shape=[n, 2], min=0.0, max=1.0)
        g = fluid.layers.gaussian_random(shape=[n, 5])
    assert ones.shape == (-1, 1) and len(r.shape) == 2
    fetch = [ones.name, zeros.name, r.name, u.name, g.name]
    feed = {"x": np.arange(24, dtype="float32").reshape(4, 6)}
    ours = fluid.Executor(fluid.CPUPlace()).run(main, feed=feed, fetch_list=fetch, scope=fluid.Scope())
    theirs = po.run(main.serialize(), feed, fetch, {})
    for a, b in zip(ours[:3], theirs[:3]):
        np.testing.assert_array_equal(np.asarray(a), b)
    np.testing.assert_array_equal(np.asarray(ours[2]), feed["x"].reshape(8, 3))
    assert np.asarray(ours[3]).shape == theirs[3].shape == (4, 2)
    assert np.asarray(ours[4]).shape == theirs[4].shape == (4, 5)


# -- 2. LoD kept through squeeze / unsqueeze / fc -------------------------------------------------
def test_squeeze_and_fc_keep_the_rows_lod_for_sequence_layers():
    """gru4rec / tagspace: ``embedding`` of (-1, 1) ids -> ``squeeze(axes=[1])`` -> ``fc`` ->
    ``dynamic_gru`` / ``sequence_conv_pool``: Paddle's Squeeze2Op / Unsqueeze2Op share X's LoD when
    the first dim stays, and fc (mul, num_flatten_dims=1) shares it; a squeeze of dim 0 drops it."""
    main, startup = _programs()
    with fluid.program_guard(main, startup):
        ids = fluid.data("ids", shape=[None, 1], dtype="int64", lod_level=1)
        emb = fluid.embedding(ids, size=[10, 4])
        sq = fluid.layers.squeeze(emb, axes=[1])
        un = fluid.layers.unsqueeze(sq, axes=[2])
        front = fluid.layers.unsqueeze(sq, axes=[0])
        fc = fluid.layers.fc(sq, size=6, bias_attr=False)
        pooled = fluid.layers.sequence_pool(fc, "sum")
    assert (sq.lod_level, un.lod_level, front.lod_level, fc.lod_level) == (1, 1, 0, 1)
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    ids_v = np.array([[1], [2], [3], [4], [5]], "int64")
    t = fluid.create_lod_tensor(ids_v, [[2, 3]], fluid.CPUPlace())
    got, = exe.run(main, feed={"ids": t}, fetch_list=[pooled], scope=scope)
    ops = main.global_block().ops
    table_name = next(op.input("W")[0] for op in ops if op.type.startswith("lookup_table"))
    w_name = next(op.input("Y")[0] for op in ops if op.type == "mul")
    table, w = (np.asarray(scope.find_var(n).get_tensor()) for n in (table_name, w_name))
    rows = table[ids_v[:, 0]] @ w
    np.testing.assert_allclose(np.asarray(got), np.stack([rows[:2].sum(0), rows[2:].sum(0)]), rtol=1e-5)


# -- 3. a started py_reader feeds its program's clones and compiled forms -----------------------
def test_started_py_reader_feeds_a_clone_and_a_compiled_program():
    """SSD: ``test_prog.clone(for_test=True)`` after building the reader, ``reader.start()``, then
    ``exe.run(clone)`` with no feed; transformer: ``exe.run(CompiledProgram(prog)...)`` with no feed."""
    main, startup = _programs()
    with fluid.program_guard(main, startup):
        reader = fluid.layers.py_reader(capacity=4, shapes=[[-1, 3]], dtypes=["float32"])
        x = fluid.layers.read_file(reader)   # one slot: the Variable itself (Fluid 1.x)
        y = fluid.layers.reduce_sum(x * 2.0)
    clone = main.clone(for_test=True)
    batches = [np.full((2, 3), i, "float32") for i in range(1, 5)]
    reader.decorate_tensor_provider(lambda: iter([[b] for b in batches]))
    exe = fluid.Executor(fluid.CPUPlace())
    compiled = fluid.CompiledProgram(main)
    got = []
    reader.start()
    try:
        for prog in (clone, compiled, clone, main, clone):
            got.append(float(np.asarray(exe.run(prog, fetch_list=[y.name], scope=fluid.Scope())[0]).reshape(())))
    except fluid.core.EOFException:
        reader.reset()
    np.testing.assert_allclose(got, [b.sum() * 2 for b in batches])
    # after reset, nothing feeds the clone
    with pytest.raises(Exception):
        exe.run(clone, fetch_list=[y.name], scope=fluid.Scope())
