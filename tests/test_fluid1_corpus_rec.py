"""Issue 28, the recommendation / RL group of the corpus: the mechanisms their scripts needed.

- ``fluid.DatasetFactory`` datasets and ``exe.train_from_dataset`` (frontend/dataset.py,
  lowering/executor.py): MultiSlot lines parsed into feeds (checked against a hand-computed feed)
  and a training run checked against Paddle 2.6.2's own C++ QueueDataset on the same program bytes;
- ``fluid.incubate.data_generator`` (frontend/data_generator.py) against Paddle 2.6.2's generator;
- the local transpiler ``fleet`` (frontend/fleet.py);
- DataFeeder's numeric strings (Fluid's np.array(..., dtype) parse) against Paddle's DataFeeder;
- optimizer accumulator names (the DQN scripts' pairing) against Paddle 2.6.2.
"""

from __future__ import annotations

import io
import os
import random
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import fluidjax as fluid
from fluidjax.frontend import data_generator as dg
from fluidjax.frontend.dataset import parse_multislot_line

import paddle_oracle as po  # noqa: E402  (after fluidjax: jax before paddle)
import paddle  # noqa: E402

# five samples: dense x (3 floats), ids (a sequence), label (1 float)
LINES = ["3 0.1 0.2 0.3 2 4 7 1 1.0", "3 1.0 0.0 -1.0 1 3 1 0.0", "3 0.5 0.5 0.5 3 1 2 9 1 0.5",
         "3 -0.2 0.4 0.0 1 8 1 -1.0", "3 0.3 0.3 0.1 2 0 5 1 2.0"]


def _program():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.data(name="x", shape=[-1, 3], dtype="float32")
        ids = fluid.data(name="ids", shape=[-1, 1], dtype="int64", lod_level=1)
        label = fluid.data(name="label", shape=[-1, 1], dtype="float32")
        emb = fluid.layers.embedding(ids, size=[10, 4])
        pooled = fluid.layers.sequence_pool(emb, "sum")
        pred = fluid.layers.fc(fluid.layers.concat([x, pooled], axis=1), size=1)
        loss = fluid.layers.mean(fluid.layers.square_error_cost(pred, label))
        fluid.optimizer.SGD(0.1).minimize(loss)
    return main, startup, [x, ids, label], loss


def _write(tmp_path, lines=LINES):
    path = tmp_path / "part-0"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def _dataset(variables, files, kind="QueueDataset", batch=2, pipe="cat"):
    ds = fluid.DatasetFactory().create_dataset(kind)
    ds.set_use_var(variables)
    ds.set_batch_size(batch)
    ds.set_thread(1)
    ds.set_pipe_command(pipe)
    ds.set_filelist(files)
    return ds


def test_dataset_feeds_equal_a_hand_computed_feed(tmp_path):
    main, startup, variables, _ = _program()
    feeds = list(_dataset(variables, [_write(tmp_path)])._feeds())
    assert len(feeds) == 3                                          # 2 + 2 + 1 samples
    first = feeds[0]
    np.testing.assert_array_equal(first["x"], np.array([[0.1, 0.2, 0.3], [1.0, 0.0, -1.0]], "float32"))
    assert first["x"].dtype == np.float32
    np.testing.assert_array_equal(np.asarray(first["ids"]), np.array([[4], [7], [3]], "int64"))
    assert first["ids"].recursive_sequence_lengths() == [[2, 1]]
    np.testing.assert_array_equal(first["label"], np.array([[1.0], [0.0]], "float32"))
    last = feeds[2]
    np.testing.assert_array_equal(np.asarray(last["ids"]), np.array([[0], [5]], "int64"))
    assert last["ids"].recursive_sequence_lengths() == [[2]]
    assert last["x"].shape == (1, 3)


@pytest.mark.parametrize("line, match", [
    ("3 0.1 0.2 0.3 0 1 1.0", "at least one"),
    ("3 0.1 0.2 0.3 1 4 3 1.0", "announces"),
    ("3 0.1 0.2 0.3 2 4 5", "ends before"),
    ("3 0.1 0.2 0.3 1 4 1 1.0 7", "after the last"),
    ("3 0.1 0.2 0.3 1 x 1 1.0", "not a"),
    ("2 0.1 0.2 1 4 1 1.0", "do not fill"),
])
def test_dataset_bad_lines_are_feed_errors(tmp_path, line, match):
    main, startup, variables, _ = _program()
    ds = _dataset(variables, [_write(tmp_path, [line])])
    with pytest.raises(fluid.FeedError, match=match):
        list(ds._feeds())


def test_dataset_refuses_other_dtypes():
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        v = fluid.data(name="v", shape=[-1, 1], dtype="int32")
    with pytest.raises(fluid.FeedError, match="float32 and int64"):
        fluid.DatasetFactory().create_dataset().set_use_var([v])


def _paddle_train_from_dataset(program_bytes, startup_params, files, names, batch, monkeypatch):
    # Paddle's trainer_desc does "from proto import trainer_desc_pb2" (its own folder on sys.path),
    # which fluidjax's proto package (the repository root is on sys.path) would answer
    import paddle.base.proto as paddle_proto
    monkeypatch.setitem(sys.modules, "proto", paddle_proto)
    monkeypatch.chdir(os.path.dirname(files[0]))     # Paddle writes <id>_train_desc.prototxt there
    prog = po.parse(program_bytes)
    scope = paddle.static.Scope()
    exe = paddle.static.Executor(paddle.CPUPlace())
    with paddle.static.scope_guard(scope):
        for name, value in startup_params.items():
            scope.var(name).get_tensor().set(np.ascontiguousarray(value), paddle.CPUPlace())
        ds = paddle.distributed.QueueDataset()
        ds.init(batch_size=batch, thread_num=1, pipe_command="cat",
                use_var=[prog.global_block().var(n) for n in names])
        ds.set_filelist(files)
        exe.train_from_dataset(program=prog, dataset=ds)
        return po.scope_values(scope, startup_params)


def test_train_from_dataset_equals_paddle_queue_dataset(tmp_path, monkeypatch):
    main, startup, variables, loss = _program()
    files = [_write(tmp_path)]
    scope = fluid.Scope()
    exe = fluid.Executor(fluid.CPUPlace())
    with fluid.scope_guard(scope):
        exe.run(startup)
        params = {v.name: np.array(scope.find_var(v.name).get_tensor()) for v in main.list_vars()
                  if v.persistable and scope.find_var(v.name) is not None}   # parameters and learning rate
        exe.train_from_dataset(program=main, dataset=_dataset(variables, files), fetch_list=[loss],
                               fetch_info=["loss"], print_period=1)
        ours = {n: np.array(scope.find_var(n).get_tensor()) for n in params}
    theirs = _paddle_train_from_dataset(main.serialize(), params, files, ["x", "ids", "label"], 2, monkeypatch)
    assert {p.name for p in main.all_parameters()} < set(params)
    for name in params:
        if name in {p.name for p in main.all_parameters()}:
            assert not np.allclose(ours[name], params[name])        # it trained
        np.testing.assert_allclose(ours[name], theirs[name], rtol=1e-5, atol=1e-6)


def test_train_from_dataset_prints_every_period(tmp_path, capsys):
    main, startup, variables, loss = _program()
    exe = fluid.Executor(fluid.CPUPlace())
    with fluid.scope_guard(fluid.Scope()):
        exe.run(startup)
        exe.train_from_dataset(program=main, dataset=_dataset(variables, [_write(tmp_path)]),
                               fetch_list=[loss], fetch_info=["my loss"], print_period=2)
    out = [ln for ln in capsys.readouterr().out.splitlines() if "my loss" in ln]
    assert len(out) == 1 and "batch: [2]" in out[0]                 # batches 1..3, printed at 2
    with pytest.raises(ValueError, match="fetch_info"):
        exe.train_from_dataset(program=main, dataset=_dataset(variables, [_write(tmp_path)]),
                               fetch_list=[loss], fetch_info=["a", "b"])


def test_in_memory_dataset_trains_on_what_is_loaded(tmp_path):
    main, startup, variables, loss = _program()
    path = _write(tmp_path)
    ds = _dataset(variables, [path], kind="InMemoryDataset", batch=5)
    ds.load_into_memory()
    assert ds.get_memory_data_size() == 5
    random.seed(3)
    ds.local_shuffle()
    (feed,) = list(ds._feeds())
    rows = sorted(map(tuple, np.asarray(feed["x"]).tolist()))
    expected = sorted(tuple(parse_multislot_line(ln, ds._slots)[0]) for ln in LINES)
    np.testing.assert_allclose(rows, expected, rtol=1e-6)           # every sample once
    order = [parse_multislot_line(ln, ds._slots)[0] for ln in LINES]
    assert np.asarray(feed["x"]).tolist() != np.asarray(order, "float32").tolist()
    ds.release_memory()
    with pytest.warns(UserWarning, match="load_into_memory"):
        assert list(ds._feeds()) == []
    with pytest.raises(NotImplementedError, match="InMemoryDataset"):
        _dataset(variables, [path]).local_shuffle()


GENERATOR = textwrap.dedent('''
    import sys
    sys.path.insert(0, {root!r})
    from {module} import MultiSlotDataGenerator

    class Gen(MultiSlotDataGenerator):
        def generate_sample(self, line):
            def it():
                a, b, c = line.split(",")
                ids = [int(t) for t in b.split()]
                yield [("x", [float(t) for t in a.split()]), ("ids", ids), ("label", [float(c)])]
            return it

    Gen().run_from_stdin()
''')


def test_pipe_command_runs_a_data_generator(tmp_path):
    main, startup, variables, _ = _program()
    raw = tmp_path / "raw.txt"
    raw.write_text("0.1 0.2 0.3,4 7,1\n1 0 -1,3,0\n")
    gen = tmp_path / "gen.py"
    root = os.path.dirname(os.path.dirname(fluid.__file__))
    gen.write_text(GENERATOR.format(root=root, module="fluidjax.incubate.data_generator"))
    ds = _dataset(variables, [str(raw)], pipe=f"{sys.executable} {gen}")
    (feed,) = list(ds._feeds())
    np.testing.assert_array_equal(feed["x"], np.array([[0.1, 0.2, 0.3], [1, 0, -1]], "float32"))
    assert feed["ids"].recursive_sequence_lengths() == [[2, 1]]
    ds.set_pipe_command(f"{sys.executable} -c 'import sys; sys.exit(3)'")
    with pytest.raises(fluid.FeedError, match="exit 3"):
        list(ds._feeds())


def _generated(cls, samples, batch=2):
    class Gen(cls):
        def generate_sample(self, line):
            def it():
                yield samples[int(line)]
            return it

        def generate_batch(self, group):
            def it():
                for s in reversed(group):                          # a reworked group
                    yield s
            return it

    gen = Gen()
    gen.set_batch(batch)
    out, stdin = io.StringIO(), io.StringIO("".join(f"{i}\n" for i in range(len(samples))))
    old = sys.stdin, sys.stdout
    sys.stdin, sys.stdout = stdin, out
    try:
        gen.run_from_stdin()
    finally:
        sys.stdin, sys.stdout = old
    return out.getvalue()


def test_data_generators_write_what_paddles_write():
    from paddle.distributed import fleet as pfleet
    samples = [[("a", [1, 2]), ("b", [0.5])], [("a", [3]), ("b", [2])], [("a", [4, 5, 6]), ("b", [1.25])]]
    assert _generated(dg.MultiSlotDataGenerator, samples) == _generated(pfleet.MultiSlotDataGenerator, samples)
    strings = [[("a", ["x", "y"]), ("b", "1")], [("a", ["z"]), ("b", "0")]]
    assert (_generated(dg.MultiSlotStringDataGenerator, strings)
            == _generated(pfleet.MultiSlotStringDataGenerator, strings))
    with pytest.raises(fluid.FeedError, match="empty"):
        _generated(dg.MultiSlotDataGenerator, [[("a", [])]])
    with pytest.raises(fluid.FeedError, match="do not match"):
        _generated(dg.MultiSlotDataGenerator, [[("a", [1])], [("c", [1])]], batch=1)


# -- the local fleet ----------------------------------------------------------------------------
ENV = {"TRAINING_ROLE": "TRAINER", "PADDLE_TRAINERS_NUM": "1", "PADDLE_TRAINER_ID": "0",
       "PADDLE_PSERVERS_IP_PORT_LIST": "127.0.0.1:6000,127.0.0.1:6001"}


def test_local_fleet_trains_as_the_plain_optimizer(monkeypatch):
    from fluidjax.incubate.fleet.parameter_server.distribute_transpiler import fleet
    import fluidjax.incubate.fleet.base.role_maker as role_maker
    from fluidjax.transpiler.distribute_transpiler import DistributeTranspilerConfig
    for k, v in ENV.items():
        monkeypatch.setenv(k, v)
    fleet.init(role_maker.PaddleCloudRoleMaker())
    assert fleet.is_worker() and not fleet.is_server() and fleet.is_first_worker()
    assert (fleet.worker_num(), fleet.server_num(), fleet.worker_index()) == (1, 2, 0)
    assert fleet.split_files(["a", "b", "c"]) == ["a", "b", "c"]

    def build(distributed):
        main, startup = fluid.Program(), fluid.Program()
        main.random_seed = startup.random_seed = 5
        with fluid.program_guard(main, startup):
            x = fluid.data(name="x", shape=[-1, 4], dtype="float32")
            loss = fluid.layers.mean(fluid.layers.fc(x, size=2))
            opt = fluid.optimizer.Adam(0.1)
            if distributed:
                strategy = DistributeTranspilerConfig()
                strategy.sync_mode = False
                opt = fleet.distributed_optimizer(opt, strategy)
            opt.minimize(loss)
        return main, startup, loss

    main, startup, loss = build(True)
    assert fleet.main_program is main and fleet.startup_program is startup
    plain, plain_startup, plain_loss = build(False)
    assert [op.type for op in main.global_block().ops] == [op.type for op in plain.global_block().ops]
    fleet.init_worker()
    xs = np.random.RandomState(0).rand(3, 4).astype("float32")
    results = []
    for prog, start, l in ((fleet.main_program, fleet.startup_program, loss), (plain, plain_startup, plain_loss)):
        with fluid.scope_guard(fluid.Scope()):
            exe = fluid.Executor(fluid.CPUPlace())
            exe.run(start)
            results.append([exe.run(prog, feed={"x": xs}, fetch_list=[l])[0] for _ in range(3)])
    np.testing.assert_allclose(results[0], results[1], rtol=1e-6)
    fleet.stop_worker()
    with pytest.raises(fluid.NotOfferedError, match="parameter server"):
        fleet.run_server()


def test_local_fleet_refuses_what_one_process_cannot_be(monkeypatch):
    from fluidjax.incubate.fleet.parameter_server.distribute_transpiler import fleet
    import fluidjax.incubate.fleet.base.role_maker as role_maker
    for k, v in dict(ENV, PADDLE_TRAINERS_NUM="2").items():
        monkeypatch.setenv(k, v)
    with pytest.raises(fluid.NotOfferedError, match="2 trainers"):
        fleet.init(role_maker.PaddleCloudRoleMaker())
    monkeypatch.delenv("TRAINING_ROLE")
    with pytest.raises(ValueError, match="TRAINING_ROLE"):
        fleet.init(role_maker.PaddleCloudRoleMaker())
    server = role_maker.UserDefinedRoleMaker(current_id=0, role=role_maker.Role.SERVER, worker_num=1,
                                             server_endpoints=["127.0.0.1:6000"])
    fleet.init(server)
    assert fleet.is_server() and not fleet.is_worker()
    with pytest.raises(fluid.NotOfferedError, match="start only the TRAINER"):
        fleet.init_server()


# -- DataFeeder: numeric strings ----------------------------------------------------------------
def test_data_feeder_parses_numeric_strings_as_paddles_does():
    """SSR's reader yields its ids as the text's strings; Fluid's DataFeeder converted them with
    np.array(data, dtype). Compared with Paddle 2.6.2's DataFeeder on the same program's variables."""
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        ids = fluid.data(name="ids", shape=[-1, 1], dtype="int64", lod_level=1)
        x = fluid.data(name="x", shape=[-1, 2], dtype="float32")
    samples = [(["197", "196"], ["0.5", "2"]), (["3"], ["-1", "1e2"])]
    ours = fluid.DataFeeder([ids, x], fluid.CPUPlace()).feed(samples)
    prog = po.parse(main.serialize())
    theirs = paddle.base.DataFeeder([prog.global_block().var("ids"), prog.global_block().var("x")],
                                    paddle.CPUPlace(), program=prog).feed(samples)
    np.testing.assert_array_equal(np.asarray(ours["ids"]), np.array(theirs["ids"]))
    assert ours["ids"].recursive_sequence_lengths() == theirs["ids"].recursive_sequence_lengths() == [[2, 1]]
    np.testing.assert_array_equal(np.asarray(ours["x"]), np.array(theirs["x"]))
    for bad in ([(["1.5"], ["0", "0"])], [(["x"], ["0", "0"])]):
        with pytest.raises(fluid.FeedError, match="do not parse as int64"):
            fluid.DataFeeder([ids, x], fluid.CPUPlace()).feed(bad)


# -- cos_sim of a sequence's rows with a plain value of one row per sequence (TagSpace) -----------
def test_cos_sim_pairs_sequence_rows_with_pooled_rows_as_numpy_and_jax_grad():
    """TagSpace: cos_sim(tag embedding of a lod_level-1 input (rows padded to a bucket), fc of the
    pooled text (one plain row per sequence)). Paddle 2.6.2 no longer has cos_sim: the forward is
    checked against NumPy, one SGD step against jax.grad of the same function written by hand."""
    import jax
    import jax.numpy as jnp
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        text = fluid.data(name="text", shape=[None, 1], lod_level=1, dtype="int64")
        pos = fluid.data(name="pos", shape=[None, 1], lod_level=1, dtype="int64")
        te = fluid.layers.squeeze(fluid.embedding(input=text, size=[20, 6], param_attr="text_emb"), axes=[1])
        pe = fluid.layers.squeeze(fluid.embedding(input=pos, size=[20, 6], param_attr="tag_emb"), axes=[1])
        hid = fluid.layers.fc(fluid.layers.sequence_pool(te, "max"), size=6, param_attr="w", bias_attr="b")
        cos = fluid.layers.cos_sim(pe, hid)
        loss = fluid.layers.mean(cos)
        fluid.optimizer.SGD(0.5).minimize(loss)
    lengths, ids, tags = [2, 3, 4], np.arange(9).reshape(-1, 1) % 20, np.array([[1], [2], [3]])
    scope = fluid.Scope()
    exe = fluid.Executor(fluid.CPUPlace())
    with fluid.scope_guard(scope):
        exe.run(startup)
        names = ["text_emb", "tag_emb", "w", "b"]
        p0 = {n: np.array(scope.find_var(n).get_tensor()) for n in names}
        got_cos, got_loss = exe.run(main, feed={
            "text": fluid.create_lod_tensor(ids.astype("int64"), [lengths], fluid.CPUPlace()),
            "pos": fluid.create_lod_tensor(tags.astype("int64"), [[1, 1, 1]], fluid.CPUPlace())},
            fetch_list=[cos, loss])
        p1 = {n: np.array(scope.find_var(n).get_tensor()) for n in names}
    starts = np.cumsum([0] + lengths)

    def reference(p):
        rows = p["text_emb"][ids[:, 0]]
        pooled = jnp.stack([rows[a:b].max(axis=0) for a, b in zip(starts[:-1], starts[1:])])
        h = pooled @ p["w"] + p["b"]
        t = p["tag_emb"][tags[:, 0]]
        c = (t * h).sum(1) / (jnp.linalg.norm(t, axis=1) * jnp.linalg.norm(h, axis=1))
        return c.mean(), c

    (want_loss, want_cos), grads = jax.value_and_grad(reference, has_aux=True)(
        {n: jnp.asarray(v) for n, v in p0.items()})
    np.testing.assert_allclose(np.asarray(got_cos).ravel(), np.asarray(want_cos), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(got_loss).ravel(), [float(want_loss)], rtol=1e-5)
    for n in names:
        np.testing.assert_allclose(p1[n], p0[n] - 0.5 * np.asarray(grads[n]), rtol=1e-4, atol=1e-6)
    with fluid.scope_guard(scope):
        with pytest.raises(fluid.BoundExceededError, match="cos_sim pairs the 3 rows"):
            exe.run(main, feed={       # four tags for three texts: Paddle refuses the shapes
                "text": fluid.create_lod_tensor(ids.astype("int64"), [lengths], fluid.CPUPlace()),
                "pos": fluid.create_lod_tensor(np.array([[1], [2], [3], [4]], "int64"), [[1, 1, 1, 1]],
                                               fluid.CPUPlace())}, fetch_list=[cos])


def test_lod_tensor_get_dims_as_paddles():
    """MMoE zeroes its AUC states with np.zeros(scope.var(name).get_tensor()._get_dims())."""
    ours, theirs = fluid.LoDTensor(), paddle.base.core.LoDTensor()
    assert ours._get_dims() == theirs._get_dims() == [0]
    ours.set(np.zeros((3, 2), "float32"), fluid.CPUPlace())
    theirs.set(np.zeros((3, 2), "float32"), paddle.CPUPlace())
    assert ours._get_dims() == theirs._get_dims() == [3, 2]
    scope = fluid.Scope()
    scope.var("s").get_tensor().set(np.ones((4,), "int64"), fluid.CPUPlace())
    assert scope.var("s").get_tensor()._get_dims() == [4]


def test_dqn_pairing_sees_the_accumulator_names_paddle_gives():
    """The Fluid 1.4 DQN scripts pair policy/target variables by 'policy' / 'target' in their names;
    since Fluid 1.4, Adam's accumulators carry their parameter's name (policy_fc1_moment1_0), so the
    policy list is longer and the script's loop fails (fixed upstream in PaddlePaddle/models
    b81a7bb6d). fluidjax names them as Paddle 2.6.2 does: the same lists."""

    def names(build):
        return sorted(v.name for v in build() if "GRAD" not in v.name and ("policy" in v.name or "target" in v.name))

    def ours():
        main = fluid.Program()
        with fluid.program_guard(main, fluid.Program()), fluid.unique_name.guard():
            s = fluid.data(name="state", shape=[-1, 4], dtype="float32")
            n = fluid.data(name="next_s", shape=[-1, 4], dtype="float32")
            net = [fluid.layers.fc(x, 3, param_attr=fluid.ParamAttr(name=f"{f}_fc1"),
                                   bias_attr=fluid.ParamAttr(name=f"{f}_fc1_b")) for x, f in ((s, "policy"), (n, "target"))]
            best = fluid.layers.reduce_max(net[1], dim=1)
            best.stop_gradient = True
            cost = fluid.layers.reduce_mean(fluid.layers.square_error_cost(fluid.layers.reduce_sum(net[0], dim=1), best))
            fluid.optimizer.Adam(1e-3).minimize(cost)
        return main.list_vars()

    def theirs():
        main = paddle.static.Program()
        with paddle.static.program_guard(main, paddle.static.Program()), paddle.utils.unique_name.guard():
            s = paddle.static.data("state", [-1, 4], "float32")
            n = paddle.static.data("next_s", [-1, 4], "float32")
            net = [paddle.static.nn.fc(x, 3, weight_attr=paddle.ParamAttr(name=f"{f}_fc1"),
                                       bias_attr=paddle.ParamAttr(name=f"{f}_fc1_b")) for x, f in ((s, "policy"), (n, "target"))]
            best = paddle.max(net[1], axis=1)
            best.stop_gradient = True
            cost = paddle.mean(paddle.square(paddle.sum(net[0], axis=1) - best))
            paddle.optimizer.Adam(1e-3).minimize(cost)
        return main.list_vars()

    got, want = names(ours), names(theirs)
    assert got == want
    assert len([n for n in got if "policy" in n]) == 2 + 2 * 4 and len([n for n in got if "target" in n]) == 2


@pytest.mark.slow   # ~30 s alone (the program's step and its gradient compile for several LoD shapes)
def test_tagspace_hinge_loss_through_padded_sequences_as_jax_grad():
    """TagSpace's loss, small: cos_sim of padded sequence rows (neg tags against the expanded text),
    sequence_reshape + reduce_max, fill_constant([shape(x)[0], 1]) of values whose rows a plain
    input pins (static), elementwise_max and less_than of a padded value with a plain one. Padding
    rows (zeros) must give no NaN. Checked against the same function written in JAX (jax.grad for
    one SGD step); Paddle 2.6.2 has no cos_sim."""
    import jax
    import jax.numpy as jnp
    margin, neg = 0.1, 2
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        text = fluid.data(name="text", shape=[None, 1], lod_level=1, dtype="int64")
        pos = fluid.data(name="pos", shape=[None, 1], lod_level=1, dtype="int64")
        negt = fluid.data(name="neg", shape=[None, 1], lod_level=1, dtype="int64")
        emb = lambda v, table, n: fluid.layers.squeeze(fluid.embedding(input=v, size=[n, 5], param_attr=table), axes=[1])
        te, pe, ne = emb(text, "text_emb", 30), emb(pos, "tag_emb", 10), emb(negt, "tag_emb", 10)
        hid = fluid.layers.fc(fluid.layers.sequence_pool(te, "max"), size=5, param_attr="w", bias_attr="b")
        cos_pos = fluid.layers.cos_sim(pe, hid)
        cos_neg_all = fluid.layers.sequence_reshape(
            fluid.layers.cos_sim(ne, fluid.layers.sequence_expand_as(hid, ne)), new_dim=neg)
        cos_neg = fluid.layers.reduce_max(cos_neg_all, dim=1, keep_dim=True)
        part1 = fluid.layers.elementwise_sub(fluid.layers.fill_constant(
            shape=[fluid.layers.shape(cos_pos)[0], 1], value=margin, dtype="float32"), cos_pos)
        part2 = fluid.layers.elementwise_add(part1, cos_neg)
        part3 = fluid.layers.elementwise_max(fluid.layers.fill_constant(
            shape=[fluid.layers.shape(part2)[0], 1], value=0.0, dtype="float32"), part2)
        loss = fluid.layers.mean(part3)
        correct = fluid.layers.reduce_sum(fluid.layers.cast(fluid.layers.less_than(cos_neg, cos_pos), "float32"))
        fluid.optimizer.SGD(0.5).minimize(loss)
    rs = np.random.RandomState(2)
    lengths = [2, 3, 4, 3, 2]
    ids, tags, negs = rs.randint(0, 30, (sum(lengths), 1)), rs.randint(0, 10, (5, 1)), rs.randint(0, 10, (5 * neg, 1))
    lod = lambda a, lens: fluid.create_lod_tensor(a.astype("int64"), [lens], fluid.CPUPlace())
    scope, exe = fluid.Scope(), fluid.Executor(fluid.CPUPlace())
    names = ["text_emb", "tag_emb", "w", "b"]
    with fluid.scope_guard(scope):
        exe.run(startup)
        p0 = {n: np.array(scope.find_var(n).get_tensor()) for n in names}
        got_loss, got_correct = exe.run(main, feed={"text": lod(ids, lengths), "pos": lod(tags, [1] * 5),
                                                    "neg": lod(negs, [neg] * 5)}, fetch_list=[loss, correct])
        p1 = {n: np.array(scope.find_var(n).get_tensor()) for n in names}
    starts = np.cumsum([0] + lengths)

    def cos(a, b):
        return (a * b).sum(-1) / (jnp.linalg.norm(a, axis=-1) * jnp.linalg.norm(b, axis=-1))

    def reference(p):
        rows = p["text_emb"][ids[:, 0]]
        h = jnp.stack([rows[a:b].max(0) for a, b in zip(starts[:-1], starts[1:])]) @ p["w"] + p["b"]
        cp = cos(p["tag_emb"][tags[:, 0]], h)
        cn = cos(p["tag_emb"][negs[:, 0]].reshape(5, neg, -1), h[:, None, :]).max(1)
        return jnp.maximum(0.0, margin - cp + cn).mean(), (cn < cp).sum()

    (want_loss, want_correct), grads = jax.value_and_grad(reference, has_aux=True)(
        {n: jnp.asarray(v) for n, v in p0.items()})
    np.testing.assert_allclose(np.asarray(got_loss).ravel(), [float(want_loss)], rtol=1e-5)
    assert float(np.asarray(got_correct).ravel()[0]) == float(want_correct)
    for n in names:
        assert np.isfinite(p1[n]).all()
        np.testing.assert_allclose(p1[n], p0[n] - 0.5 * np.asarray(grads[n]), rtol=1e-4, atol=1e-6)
