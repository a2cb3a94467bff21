"""fj.to_jax / fj.from_jax / fj.to_flax: a program as a pure JAX function (docs/jax.md).

The oracle is the Executor itself (the bridge must lower exactly as it does: bit-for-bit on CPU),
``jax.grad`` against the program's own backward ops, optax against fj.optimizer.Adam, and Paddle
2.6.2 loading what ``from_jax`` wrote.
"""

import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import jax.test_util
import numpy as np
import pytest

import fluidjax as fj
from fluidjax import layer
from fluidjax.lowering.jax_function import MissingRngError, NotConvertibleError, executor_key
from fluidjax.lowering.lod_value import to_host

JIT = pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])


def _maybe_jit(fn, jit):
    return jax.jit(fn) if jit else fn


def _mlp(hidden=200, classes=10, inputs=784, act="relu"):
    x = layer.data("x", input_size=inputs)
    y = layer.data("y", dims=1, dtype="int64")
    h = layer.fc(x, output_size=hidden, activation=act)
    prob = layer.fc(h, output_size=classes, activation="softmax")
    loss = layer.mean(layer.cross_entropy(prob, y))
    return x, y, prob, loss


def _batch(n=16, inputs=784, classes=10, seed=0):
    rng = np.random.default_rng(seed)
    return rng.random((n, inputs), dtype=np.float32), rng.integers(0, classes, (n, 1)).astype(np.int64)


def _started(seed=None):
    if seed is not None:
        fj.default_main_program().random_seed = seed
        fj.default_startup_program().random_seed = seed
    exe = fj.Executor()
    exe.run(fj.default_startup_program())
    return exe


def _scalar(v):
    return jnp.reshape(v, ())


# -- forward: bit for bit -------------------------------------------------------------------------
@JIT
def test_mlp_forward_equals_executor_bit_for_bit(jit):
    x, y, prob, loss = _mlp()
    exe = _started()
    fn, variables = fj.to_jax(fj.default_main_program(), feed=[x, y], fetch_list=[prob, loss])
    assert fn.feed_names == ("x", "y") and fn.fetch_names == (prob.name, loss.name)
    assert sorted(variables["params"]) == ["fc_0.b_0", "fc_0.w_0", "fc_1.b_0", "fc_1.w_0"]
    assert variables["state"] == {} and not fn.needs_rng
    xs, ys = _batch()
    want = exe.run(feed={"x": xs, "y": ys}, fetch_list=[prob, loss])
    outs, new_state = _maybe_jit(fn, jit)(variables, xs, ys)
    assert new_state == {}
    for got, ref in zip(outs, want):
        np.testing.assert_array_equal(np.asarray(got).reshape(ref.shape), ref)
    # one dict keyed by feed name works the same
    outs2, _ = _maybe_jit(fn, jit)(variables, {"y": ys, "x": xs})
    np.testing.assert_array_equal(np.asarray(outs2[1]), np.asarray(outs[1]))


def _conv_net():
    img = layer.data("img", dims=[1, 8, 8])
    label = layer.data("label", dims=1, dtype="int64")
    conv = layer.conv2d(img, num_filters=4, filter_size=3, padding=1)
    bn = layer.batch_norm(conv, activation="relu")
    drop = layer.dropout(bn, dropout_prob=0.5)
    prob = layer.fc(drop, output_size=5, activation="softmax")
    loss = layer.mean(layer.cross_entropy(prob, label))
    return img, label, prob, loss


def _images(n=6, seed=1):
    rng = np.random.default_rng(seed)
    return rng.random((n, 1, 8, 8), dtype=np.float32), rng.integers(0, 5, (n, 1)).astype(np.int64)


@JIT
def test_conv_batch_norm_dropout_train_mode_equals_executor_and_writes_statistics(jit):
    img, label, prob, loss = _conv_net()
    exe = _started(seed=11)
    main = fj.default_main_program()
    fn, variables = fj.to_jax(main, feed=[img, label], fetch_list=[prob, loss])
    stats = sorted(variables["state"])
    assert len(stats) == 2 and all("batch_norm" in n for n in stats)     # mean, variance
    assert all(n not in variables["params"] for n in stats) and fn.needs_rng
    xs, ys = _images()
    want = exe.run(main, feed={"img": xs, "label": ys}, fetch_list=[prob, loss])
    outs, new_state = _maybe_jit(fn, jit)(variables, xs, ys, rng=executor_key(11, 0))
    for got, ref in zip(outs, want):
        np.testing.assert_array_equal(np.asarray(got).reshape(ref.shape), ref)
    # every write to a persistable comes back: the statistics equal the scope's after the run
    assert set(stats) <= set(new_state)
    for name in stats:
        scope_value = np.asarray(fj.global_scope().find_var(name).get_tensor())
        np.testing.assert_array_equal(np.asarray(new_state[name]), scope_value)
        assert not np.array_equal(scope_value, np.asarray(variables["state"][name]))   # it moved
    # the Executor's second run draws with executor_key(seed, 1), from the moved statistics
    want2 = exe.run(main, feed={"img": xs, "label": ys}, fetch_list=[prob])[0]
    state2 = {**variables["state"], **{n: new_state[n] for n in stats}}
    (got2, _), _ = _maybe_jit(fn, jit)({"params": variables["params"], "state": state2}, xs, ys,
                                       rng=executor_key(11, 1))
    np.testing.assert_array_equal(np.asarray(got2), want2)
    assert not np.array_equal(want2, want[0])


@JIT
def test_conv_net_eval_mode_needs_no_key_and_equals_executor(jit):
    img, label, prob, loss = _conv_net()
    exe = _started(seed=3)
    main = fj.default_main_program()
    fn, variables = fj.to_jax(main, feed=[img], fetch_list=[prob], for_test=True)
    xs, _ = _images()
    want, = exe.run(main.clone(for_test=True), feed={"img": xs}, fetch_list=[prob.name])
    (got,), new_state = _maybe_jit(fn, jit)(variables, xs)
    np.testing.assert_array_equal(np.asarray(got), want)


@JIT
def test_lstm_on_lod_input_equals_executor(jit):
    ids = layer.data("ids", dims=1, dtype="int64", lod_level=1)
    emb = layer.embedding(ids, size=[20, 8])
    gates = layer.fc(emb, output_size=16)
    hidden, _ = layer.dynamic_lstm(gates, size=16)
    last = layer.sequence_pool(hidden, "last")
    out = layer.fc(last, output_size=3)
    exe = _started()
    rng = np.random.default_rng(2)
    lengths = [3, 5, 1, 4]
    tensor = fj.create_lod_tensor(rng.integers(0, 20, (sum(lengths), 1)).astype(np.int64), [lengths])
    want, = exe.run(feed={"ids": tensor}, fetch_list=[out])
    fn, variables = fj.to_jax(fj.default_main_program(), feed=[ids], fetch_list=[out])
    if jit:     # a LoD value's sizes are static: convert before jit (each bucket compiles once)
        (got,), _ = jax.jit(fn)(variables, fn.lod_input("ids", tensor))
    else:
        (got,), _ = fn(variables, tensor)
    np.testing.assert_array_equal(to_host(got)[0] if hasattr(got, "offsets") else np.asarray(got), want)


@JIT
def test_while_loop_program_equals_executor(jit):
    x = layer.data("x", dims=[3])
    h = layer.fc(x, output_size=3)
    i = layer.fill_constant([1], "int64", 0)
    n = layer.fill_constant([1], "int64", 4)
    total = layer.fill_constant([1], "float32", 0.0)
    cond = layer.less_than(i, n)
    loop = layer.While(cond)
    with loop.block():
        layer.assign(total * 0.5 + layer.reduce_sum(h), total)
        layer.increment(i)
        layer.assign(layer.less_than(i, n), cond)
    exe = _started()
    xs = np.random.default_rng(4).random((5, 3), dtype=np.float32)
    want = exe.run(feed={"x": xs}, fetch_list=[total, i])
    fn, variables = fj.to_jax(fj.default_main_program(), feed=["x"], fetch_list=[total, i])
    outs, _ = _maybe_jit(fn, jit)(variables, xs)
    for got, ref in zip(outs, want):
        np.testing.assert_array_equal(np.asarray(got).reshape(ref.shape), ref)
    assert int(np.asarray(outs[1]).reshape(-1)[0]) == 4


# -- gradients ------------------------------------------------------------------------------------
@JIT
def test_grad_equals_the_programs_backward(jit):
    x, y, prob, loss = _mlp(hidden=32, inputs=20)
    grads = fj.append_backward(loss)
    exe = _started()
    xs, ys = _batch(8, inputs=20)
    fetched = exe.run(feed={"x": xs, "y": ys}, fetch_list=[g for _, g in grads])
    fn, variables = fj.to_jax(fj.default_main_program(), feed=[x, y], fetch_list=[loss])

    def loss_of(params):
        return _scalar(fn({"params": params, "state": variables["state"]}, xs, ys)[0][0])

    ours = _maybe_jit(jax.grad(loss_of), jit)(variables["params"])
    for (param, _), want in zip(grads, fetched):
        got = np.asarray(ours[param.name])
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6 * np.abs(want).max())
    # the program's own backward ops run when a fetch asks for a gradient: the Executor's numbers
    fn_grads, _ = fj.to_jax(fj.default_main_program(), feed=[x, y], fetch_list=[g for _, g in grads])
    for got, want in zip(_maybe_jit(fn_grads, jit)(variables, xs, ys)[0], fetched):
        np.testing.assert_array_equal(np.asarray(got), want)


@pytest.mark.slow
def test_check_grads_order_two():
    x, y, prob, loss = _mlp(hidden=6, classes=3, inputs=4, act="tanh")
    _started()
    fn, variables = fj.to_jax(fj.default_main_program(), feed=[x, y], fetch_list=[loss], checks=False)
    xs, ys = _batch(5, inputs=4, classes=3)
    params = {k: jnp.asarray(v, jnp.float64) for k, v in variables["params"].items()}

    def loss_of(params):
        return _scalar(fn({"params": params, "state": {}}, xs.astype(np.float64), ys)[0][0])

    jax.test_util.check_grads(loss_of, (params,), order=2, modes=["rev"], eps=1e-4)
    jax.test_util.check_grads(jax.jit(loss_of), (params,), order=2, modes=["rev"], eps=1e-4)


@JIT
def test_vmap_over_examples_equals_the_batch(jit):
    x, y, prob, loss = _mlp(hidden=16, inputs=12)
    _started()
    fn, variables = fj.to_jax(fj.default_main_program(), feed=[x, y], fetch_list=[prob, loss])
    xs, ys = _batch(6, inputs=12)
    (batch_prob, batch_loss), _ = fn(variables, xs, ys)

    def one(xi, yi):
        return fn(variables, xi, yi)[0][0]

    per = _maybe_jit(jax.vmap(one), jit)(xs[:, None], ys[:, None])
    np.testing.assert_allclose(np.asarray(per).reshape(batch_prob.shape), batch_prob, rtol=1e-6, atol=1e-7)

    def loss_of(params, xi, yi):
        return _scalar(fn({"params": params, "state": {}}, xi, yi)[0][1])

    per_grads = _maybe_jit(jax.vmap(jax.grad(loss_of), in_axes=(None, 0, 0)), jit)(
        variables["params"], xs[:, None], ys[:, None])
    batch_grads = jax.grad(loss_of)(variables["params"], xs, ys)
    for name, g in batch_grads.items():
        np.testing.assert_allclose(np.asarray(per_grads[name]).mean(0), g, rtol=1e-5, atol=1e-7)


# -- randomness -----------------------------------------------------------------------------------
@JIT
def test_keys_reproduce_dropout_and_a_missing_key_is_a_typed_error(jit):
    img, label, prob, loss = _conv_net()
    _started()
    fn, variables = fj.to_jax(fj.default_main_program(), feed=[img, label], fetch_list=[prob])
    f = _maybe_jit(fn, jit)
    xs, ys = _images()
    a = np.asarray(f(variables, xs, ys, rng=jax.random.key(1))[0][0])
    b = np.asarray(f(variables, xs, ys, rng=jax.random.key(1))[0][0])
    c = np.asarray(f(variables, xs, ys, rng=jax.random.key(2))[0][0])
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    raw = np.asarray(f(variables, xs, ys, rng=jax.random.PRNGKey(1))[0][0])     # raw key data works too
    np.testing.assert_array_equal(raw, np.asarray(f(variables, xs, ys, rng=jax.random.PRNGKey(1))[0][0]))
    with pytest.raises(MissingRngError, match="rng=jax.random.key"):
        f(variables, xs, ys)


# -- training with optax --------------------------------------------------------------------------
@JIT
def test_twenty_optax_adam_steps_equal_twenty_executor_adam_steps(jit):
    import optax

    x = layer.data("x", input_size=12)
    y = layer.data("y", dims=1, dtype="int64")
    # (no fc bias before the batch norm: its gradient is rounding noise, which Adam's normalised
    # step turns into O(lr) moves in either direction)
    h = layer.batch_norm(layer.fc(x, output_size=16, bias_attr=False), activation="relu")
    prob = layer.fc(h, output_size=4, activation="softmax")
    loss = layer.mean(layer.cross_entropy(prob, y))
    fj.optimizer.Adam(learning_rate=0.01).minimize(loss)
    exe = _started(seed=5)
    main = fj.default_main_program()
    fn, variables = fj.to_jax(main, feed=[x, y], fetch_list=[loss])
    assert not any("moment" in n or "beta" in n or "learning_rate" in n
                   for n in list(variables["params"]) + list(variables["state"]))
    params, state = variables["params"], variables["state"]
    opt = optax.adam(0.01)
    opt_state = opt.init(params)

    def train_step(params, state, opt_state, xs, ys):
        def loss_of(p):
            (value,), new_state = fn({"params": p, "state": state}, xs, ys)
            return _scalar(value), new_state
        (value, new_state), g = jax.value_and_grad(loss_of, has_aux=True)(params)
        updates, opt_state = opt.update(g, opt_state, params)
        return optax.apply_updates(params, updates), {**state, **new_state}, opt_state, value

    train_step = _maybe_jit(train_step, jit)
    for step in range(20):
        xs, ys = _batch(8, inputs=12, classes=4, seed=100 + step)
        want, = exe.run(main, feed={"x": xs, "y": ys}, fetch_list=[loss])
        params, state, opt_state, got = train_step(params, state, opt_state, xs, ys)
        np.testing.assert_allclose(np.asarray(got).reshape(want.shape), want, rtol=1e-5, atol=1e-6)
    scope = fj.global_scope()
    for name, value in {**params, **state}.items():
        np.testing.assert_allclose(np.asarray(value), np.asarray(scope.find_var(name).get_tensor()),
                                   rtol=1e-5, atol=1e-5, err_msg=name)


# -- conversion -----------------------------------------------------------------------------------
def test_abstract_conversion_eval_shape_and_export():
    x, y, prob, loss = _mlp(hidden=8, inputs=6)
    _started()
    # (checks=False: the label's range check is a host callback, which jax.export refuses)
    fn, variables = fj.to_jax(fj.default_main_program(), feed=[x, y], fetch_list=[prob, loss], checks=False)
    assert [str(s.shape) for s in fn.input_specs] == ["(batch, 6)", "(batch, 1)"]
    out, _ = jax.eval_shape(fn, variables, *fn.input_specs)
    assert str(out[0].shape) == "(batch, 10)" and out[1].shape in ((), (1,))
    checked, _ = fj.to_jax(fj.default_main_program(), feed=[x, y], fetch_list=[prob, loss])
    assert str(jax.eval_shape(checked, variables, *checked.input_specs)[0][0].shape) == "(batch, 10)"
    exported = jax.export.export(jax.jit(fn))(variables, *fn.input_specs)
    for n in (3, 5):
        xs, ys = _batch(n, inputs=6)
        (p, _), _ = exported.call(variables, xs, ys)
        want = fn(variables, xs, ys)[0][0]
        np.testing.assert_allclose(np.asarray(p), np.asarray(want), rtol=1e-6)


def test_host_and_data_dependent_ops_are_refused_together():
    x = layer.data("x", dims=[3])
    shown = layer.Print(x)
    picked = layer.nonzero(layer.reduce_sum(shown, dim=1) > 0.5)
    out = layer.reduce_sum(layer.cast(picked, "float32"))
    _started()
    with pytest.raises(NotConvertibleError) as info:
        fj.to_jax(fj.default_main_program(), feed=[x], fetch_list=[out])
    text = str(info.value)
    assert "'print'" in text and "'where_index'" in text and __file__ in text and "2 op(s)" in text


@JIT
def test_fed_indices_out_of_range_are_checked(jit):
    ids = layer.data("ids", dims=1, dtype="int64")
    out = layer.reduce_sum(layer.embedding(ids, size=[10, 4]))
    _started()
    fn, variables = fj.to_jax(fj.default_main_program(), feed=[ids], fetch_list=[out])
    f = _maybe_jit(fn, jit)
    good = np.array([[1], [9]], np.int64)
    f(variables, good)[0][0].block_until_ready()
    # outside a trace the Executor's typed error; inside jit the host callback's, when it runs
    with pytest.raises(jax.errors.JaxRuntimeError if jit else fj.IndexOutOfRangeError, match="10"):
        f(variables, np.array([[1], [10]], np.int64))[0][0].block_until_ready()
    unchecked, _ = fj.to_jax(fj.default_main_program(), feed=[ids], fetch_list=[out], checks=False)
    jax.export.export(jax.jit(unchecked))(variables, *unchecked.input_specs)


def test_changing_variables_never_retraces():
    x, y, prob, loss = _mlp(hidden=8, inputs=6)
    _started()
    fn, variables = fj.to_jax(fj.default_main_program(), feed=[x, y], fetch_list=[loss])
    jitted = jax.jit(fn)
    xs, ys = _batch(4, inputs=6)
    seen = set()
    for scale in (1.0, 2.0, 0.5):
        params = jax.tree_util.tree_map(lambda v: v * scale, variables["params"])
        seen.add(float(np.asarray(jitted({"params": params, "state": {}}, xs, ys)[0][0]).reshape(())))
    assert fn.trace_count == 1 and len(seen) == 3


def test_from_jax_weights_reach_executor_and_paddle(tmp_path):
    img, label, prob, loss = _conv_net()
    exe = _started(seed=2)
    main = fj.default_main_program()
    fn, variables = fj.to_jax(main, feed=[img], fetch_list=[prob], for_test=True)
    trained = {"params": jax.tree_util.tree_map(lambda v: v * 1.5 + 0.01, variables["params"]),
               "state": jax.tree_util.tree_map(lambda v: v + 0.25, variables["state"])}
    fj.from_jax(trained)
    xs, _ = _images(3, seed=9)
    want = np.asarray(fn(trained, xs)[0][0])
    ours, = exe.run(main.clone(for_test=True), feed={"img": xs}, fetch_list=[prob.name])
    np.testing.assert_allclose(ours, want, rtol=1e-6, atol=1e-7)
    prefix = str(tmp_path / "m" / "inference")
    fj.io.save_inference_model(prefix, [img], [prob], exe)
    import paddle

    paddle.enable_static()
    pexe = paddle.static.Executor(paddle.CPUPlace())
    program, feeds, fetches = paddle.static.load_inference_model(prefix, pexe)
    got, = pexe.run(program, feed={"img": xs}, fetch_list=fetches)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_orbax_round_trip_is_bit_identical(tmp_path):
    ocp = pytest.importorskip("orbax.checkpoint")
    img, label, prob, loss = _conv_net()
    _started()
    _, variables = fj.to_jax(fj.default_main_program(), feed=[img], fetch_list=[prob], for_test=True)
    path = tmp_path / "ckpt"
    checkpointer = ocp.StandardCheckpointer()
    checkpointer.save(path, variables)
    checkpointer.wait_until_finished()
    restored = checkpointer.restore(path, jax.tree_util.tree_map(jnp.zeros_like, variables))
    assert jax.tree_util.tree_structure(restored) == jax.tree_util.tree_structure(variables)
    for a, b in zip(jax.tree_util.tree_leaves(variables), jax.tree_util.tree_leaves(restored)):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_to_flax_module_matches_fn():
    pytest.importorskip("flax")
    x = layer.data("x", input_size=12)
    h = layer.batch_norm(layer.fc(x, output_size=16), activation="relu")
    prob = layer.fc(h, output_size=4, activation="softmax")
    _started()
    main = fj.default_main_program()
    module = fj.to_flax(main, feed=[x], fetch_list=[prob])
    fn, variables = fj.to_jax(main, feed=[x], fetch_list=[prob])
    xs, _ = _batch(6, inputs=12, classes=4)
    flax_vars = module.init(jax.random.key(4), xs)
    assert set(flax_vars) == {"params", "batch_stats"}
    assert set(flax_vars["params"]) == set(variables["params"])
    assert set(flax_vars["batch_stats"]) == set(variables["state"]) and len(variables["state"]) == 2
    (got,), updates = jax.jit(lambda v, x: module.apply(v, x, mutable=["batch_stats"]))(flax_vars, xs)
    (want,), new_state = fn(variables, xs)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    for name, value in updates["batch_stats"].items():
        np.testing.assert_array_equal(np.asarray(value), np.asarray(new_state[name]))


_SHARDED = textwrap.dedent("""
    import numpy as np, jax, jax.numpy as jnp
    from functools import partial
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    import fluidjax as fj
    from fluidjax import layer
    assert len(jax.devices()) == 8
    x = layer.data("x", input_size=12); y = layer.data("y", dims=1, dtype="int64")
    prob = layer.fc(layer.fc(x, output_size=16, activation="relu"), output_size=4, activation="softmax")
    loss = layer.mean(layer.cross_entropy(prob, y))
    fj.Executor().run(fj.default_startup_program())
    fn, variables = fj.to_jax(fj.default_main_program(), feed=[x, y], fetch_list=[prob, loss])
    rng = np.random.default_rng(0)
    xs = rng.random((32, 12), dtype=np.float32); ys = rng.integers(0, 4, (32, 1)).astype(np.int64)
    (p1, l1), _ = jax.jit(fn)(variables, xs, ys)
    mesh = Mesh(np.array(jax.devices()), ("data",))
    rows = NamedSharding(mesh, P("data"))
    (p8, l8), _ = jax.jit(fn)(variables, jax.device_put(xs, rows), jax.device_put(ys, rows))
    replicated = jax.device_put(variables, NamedSharding(mesh, P()))
    (p8r, _), _ = jax.jit(fn)(replicated, jax.device_put(xs, rows), jax.device_put(ys, rows))
    np.testing.assert_allclose(np.asarray(p8r), np.asarray(p1), rtol=1e-6, atol=1e-7)
    assert len(p8.sharding.device_set) in (1, 8)
    np.testing.assert_allclose(np.asarray(p8), np.asarray(p1), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(np.asarray(l8), np.asarray(l1), rtol=1e-6)

    def loss_of(params, xs, ys):
        return jnp.reshape(fn({"params": params, "state": {}}, xs, ys)[0][1], ())

    # (check_vma=False: the classic data-parallel form, each device's gradient of its own rows, summed
    # explicitly; with the check on, JAX sums the gradient of replicated params itself)
    @partial(jax.shard_map, mesh=mesh, in_specs=(P(), P("data"), P("data")), out_specs=P(), check_vma=False)
    def dp_grads(params, xs, ys):
        g = jax.grad(loss_of)(params, xs, ys)
        return jax.tree_util.tree_map(lambda v: jax.lax.psum(v, "data") / 8, g)

    g8 = jax.jit(dp_grads)(variables["params"], xs, ys)
    g1 = jax.grad(loss_of)(variables["params"], xs, ys)
    for name in g1:
        np.testing.assert_allclose(np.asarray(g8[name]), np.asarray(g1[name]), rtol=1e-5, atol=1e-7)
    print("SHARDED OK")
""")


@pytest.mark.slow
def test_eight_device_sharding_and_shard_map_equal_one_device():
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8", JAX_PLATFORMS="cpu")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    done = subprocess.run([sys.executable, "-c", _SHARDED], env=env, capture_output=True, text=True,
                          timeout=300, cwd=root)
    assert "SHARDED OK" in done.stdout, done.stdout[-3000:] + done.stderr[-3000:]
