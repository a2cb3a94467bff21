"""One-element state packed into one array (``FLAGS_pack_small_state``, lowering/packed_state.py).

A step holds its read-and-written one-element variables (Adam's beta powers, a [1] bias) in one
array per dtype: one argument and one output instead of one each. These tests check that the
packed step trains as Paddle does on the same program bytes, that the scope's variables read the
packed values and that setting one from outside is what the next run sees, that a failed run
leaves them as they were, that saves and loads round-trip them, that two plans over the same
state share one pack, and that the flag turns it off.
"""

import jax
import numpy as np
import pytest

import fluidjax as fj
from fluidjax import layer
from fluidjax.ir.errors import NumericCheckError, OpRuntimeError

import paddle_oracle  # noqa: E402  (after fluidjax: the other import order segfaults)

BETA1, BETA2 = 0.9, 0.999


@pytest.fixture(autouse=True)
def _flags():
    before = fj.get_flags(["FLAGS_pack_small_state", "FLAGS_check_nan_inf"])
    yield
    fj.set_flags(before)


def _model():
    main, startup = fj.Program(), fj.Program()
    startup.random_seed = 11
    with fj.unique_name.guard(), fj.program_guard(main, startup):
        x = layer.data("x", [-1, 6])
        y = layer.data("y", [-1, 1])
        hidden = layer.fc(x, 12, act="tanh")
        pred = layer.fc(hidden, 1)
        loss = layer.mean(layer.square_error_cost(pred, y))
        fj.optimizer.Adam(0.05, beta1=BETA1, beta2=BETA2).minimize(loss)
    return main, startup, loss


def _batches(n, seed=0):
    rng = np.random.default_rng(seed)
    return [{"x": rng.normal(size=(5, 6)).astype("float32"), "y": rng.normal(size=(5, 1)).astype("float32")}
            for _ in range(n)]


def _packed_after_one_run():
    """The model with packing on, its startup run and one training run: (main, loss, exe, scope)."""
    fj.set_flags({"FLAGS_pack_small_state": True})
    main, startup, loss = _model()
    exe, scope = fj.Executor(), fj.Scope()
    exe.run(startup, scope=scope)
    exe.run(main, feed=_batches(1)[0], fetch_list=[loss], scope=scope)
    return main, loss, exe, scope


def _plan(exe, program):
    return next(p for p in exe._plans.values() if p.program is program)


def _persistables(main, scope):
    return {v.name: np.array(scope.find_var(v.name).get_tensor()) for v in main.list_vars() if v.persistable
            and scope.find_var(v.name) is not None}


def test_the_packed_step_trains_as_paddle_does():
    fj.set_flags({"FLAGS_pack_small_state": True})
    main, startup, loss = _model()
    exe, scope = fj.Executor(), fj.Scope()
    exe.run(startup, scope=scope)
    start = _persistables(main, scope)
    batches = _batches(4)
    ours = [exe.run(main, feed=b, fetch_list=[loss], scope=scope)[0] for b in batches]
    plan = _plan(exe, main)
    # every one-element variable the step reads and writes is in one pack: the 8 beta powers, the
    # [1] bias of the last fc and its two moments
    (spec,) = plan.packs
    assert len(spec.members) == 11 and all(n in spec.members for n in (v.name for v in main.list_vars())
                                           if "beta1_pow" in n or "beta2_pow" in n)
    assert len(plan.bound_mutable) == len(plan.mutable_state) - 10

    pscope = paddle_oracle.paddle.static.Scope()
    program = main.serialize()
    theirs = []
    for i, b in enumerate(batches):
        theirs += paddle_oracle.run(program, b, [loss.name], start if i == 0 else None, scope=pscope)
    np.testing.assert_allclose(np.ravel(ours), np.ravel(theirs), rtol=2e-5, atol=1e-6)
    after = _persistables(main, scope)
    for name, value in after.items():
        want = np.array(pscope.find_var(name).get_tensor())
        np.testing.assert_allclose(value, want, rtol=2e-5, atol=1e-6, err_msg=name)
        if name in spec.members:          # (Paddle's set() of a 0-d value, the learning rate, gives [1])
            assert value.shape == want.shape == (1,) and value.dtype == want.dtype, name
    # the beta powers, read through the pack: beta^(steps + 1) (Paddle starts them at beta)
    np.testing.assert_allclose(after["fc_0.w_0_beta1_pow_acc_0"], [BETA1 ** 5], rtol=1e-6)
    np.testing.assert_allclose(after["fc_1.b_0_beta2_pow_acc_0"], [BETA2 ** 5], rtol=1e-6)


def test_the_step_takes_one_array_for_the_packed_state():
    main, startup, loss = _model()
    counts = {}
    for flag in (True, False):
        fj.set_flags({"FLAGS_pack_small_state": flag})
        exe, scope = fj.Executor(), fj.Scope()
        exe.run(startup, scope=scope)
        exe.run(main, feed=_batches(1)[0], fetch_list=[loss], scope=scope)
        _, _, plan, args = exe._prepare(main, _batches(1)[0], [loss], scope)
        counts[flag] = len(jax.tree_util.tree_leaves(args[0]))
        if flag:
            assert plan.packs and [a.shape for a in args[0] if a.shape == (11,)] == [(11,)]
        else:
            assert not plan.packs
    assert counts == {True: counts[False] - 10, False: counts[False]}


def test_packed_and_unpacked_training_are_identical_and_a_set_value_is_seen():
    results = {}
    for flag in (True, False):
        fj.set_flags({"FLAGS_pack_small_state": flag})
        main, startup, loss = _model()
        exe, scope = fj.Executor(), fj.Scope()
        exe.run(startup, scope=scope)
        losses = []
        for i, b in enumerate(_batches(6, seed=3)):
            if i == 3:     # set from outside between runs: restarts the bias correction of one parameter
                scope.find_var("fc_0.w_0_beta1_pow_acc_0").get_tensor().set(np.array([BETA1], "float32"))
                scope.find_var("fc_1.b_0").get_tensor().set(np.array([0.25], "float32"))
            losses.append(exe.run(main, feed=b, fetch_list=[loss], scope=scope)[0])
        results[flag] = (np.ravel(losses), _persistables(main, scope))
    np.testing.assert_array_equal(results[True][0], results[False][0])
    for name, value in results[False][1].items():
        np.testing.assert_array_equal(results[True][1][name], value, err_msg=name)
    # the set value was used: 2 more steps from BETA1
    np.testing.assert_allclose(results[True][1]["fc_0.w_0_beta1_pow_acc_0"], [BETA1 ** 4], rtol=1e-6)


def test_two_plans_over_the_same_state_share_one_pack():
    fj.set_flags({"FLAGS_pack_small_state": True})
    main, startup, loss = _model()
    exe, scope = fj.Executor(), fj.Scope()
    exe.run(startup, scope=scope)
    batches = _batches(4)
    exe.run(main, feed=batches[0], fetch_list=[loss], scope=scope)
    pack = _plan(exe, main).last_scope[1][[i for i, n in enumerate(_plan(exe, main).bound_mutable)
                                          if n.startswith("@")][0]]
    second = [loss.name, "fc_1.tmp_1"]       # another fetch list: a second plan
    for b in batches[1:]:
        exe.run(main, feed=b, fetch_list=second, scope=scope)
        exe.run(main, feed=b, fetch_list=[loss], scope=scope)
    assert not pack.stale
    assert scope.find_var("fc_0.w_0_beta2_pow_acc_0").get_tensor()._pack is pack
    np.testing.assert_allclose(np.array(scope.find_var("fc_0.w_0_beta2_pow_acc_0").get_tensor()), [BETA2 ** 8],
                               rtol=1e-6)


def test_a_failed_run_leaves_the_packed_state_as_it_was():
    fj.set_flags({"FLAGS_pack_small_state": True, "FLAGS_check_nan_inf": True})
    main, startup, loss = _model()
    exe, scope = fj.Executor(), fj.Scope()
    exe.run(startup, scope=scope)
    good, bad = _batches(2)
    exe.run(main, feed=good, fetch_list=[loss], scope=scope)
    before = _persistables(main, scope)
    bad["x"][2, 3] = np.nan
    with pytest.raises(NumericCheckError):
        exe.run(main, feed=bad, fetch_list=[loss], scope=scope)
    after = _persistables(main, scope)
    for name, value in before.items():
        np.testing.assert_array_equal(after[name], value, err_msg=name)
    exe.run(main, feed=good, fetch_list=[loss], scope=scope)
    np.testing.assert_allclose(np.array(scope.find_var("fc_1.w_0_beta1_pow_acc_0").get_tensor()), [BETA1 ** 3],
                               rtol=1e-6)


def test_save_and_load_round_trip_the_packed_state(tmp_path):
    fj.set_flags({"FLAGS_pack_small_state": True})
    main, startup, loss = _model()
    exe, scope = fj.Executor(), fj.Scope()
    exe.run(startup, scope=scope)
    batches = _batches(5)
    for b in batches[:2]:
        exe.run(main, feed=b, fetch_list=[loss], scope=scope)
    with fj.scope_guard(scope):
        fj.io.save_persistables(exe, str(tmp_path), main)
    saved = _persistables(main, scope)
    rest = [exe.run(main, feed=b, fetch_list=[loss], scope=scope)[0] for b in batches[2:]]
    with fj.scope_guard(scope):
        fj.io.load_persistables(exe, str(tmp_path), main)    # sets every member: the pack is made again
    for name, value in saved.items():
        np.testing.assert_array_equal(np.array(scope.find_var(name).get_tensor()), value, err_msg=name)
    again = [exe.run(main, feed=b, fetch_list=[loss], scope=scope)[0] for b in batches[2:]]
    np.testing.assert_array_equal(np.ravel(again), np.ravel(rest))


def test_a_member_set_to_another_size_is_a_clear_error():
    main, loss, exe, scope = _packed_after_one_run()
    scope.find_var("fc_0.b_0_beta1_pow_acc_0").get_tensor().set(np.array([0.9, 0.9], "float32"))
    with pytest.raises(OpRuntimeError, match="fc_0.b_0_beta1_pow_acc_0"):
        exe.run(main, feed=_batches(1)[0], fetch_list=[loss], scope=scope)


def test_a_member_is_a_lod_tensor_reading_its_pack_until_set():
    main, loss, exe, scope = _packed_after_one_run()
    tensor = scope.find_var("fc_1.w_0_beta2_pow_acc_0").get_tensor()
    plain = scope.find_var("fc_1.w_0").get_tensor()
    assert isinstance(tensor, fj.LoDTensor) and type(tensor) is not fj.LoDTensor and type(plain) is fj.LoDTensor
    assert "_value" in vars(plain) and "_value" not in vars(tensor)    # only members read through the pack
    np.testing.assert_allclose(tensor.numpy(), [BETA2 ** 2], rtol=1e-6)
    assert tensor.shape() == (1,) and "fc_1.w_0_beta2_pow_acc_0" in repr(scope)
    tensor.set(np.array([0.5], "float32"))
    assert type(tensor) is fj.LoDTensor and tensor._pack is None
    np.testing.assert_array_equal(tensor.numpy(), [0.5])
    exe.run(main, feed=_batches(1)[0], fetch_list=[loss], scope=scope)
    assert type(tensor) is not fj.LoDTensor                          # packed again by the next run
    np.testing.assert_allclose(tensor.numpy(), [0.5 * BETA2], rtol=1e-6)


def test_a_packed_member_flattens_as_a_lod_tensor():
    main, loss, exe, scope = _packed_after_one_run()
    member = scope.find_var("fc_0.w_0_beta1_pow_acc_0").get_tensor()
    assert type(member) is not fj.LoDTensor
    leaves = jax.tree_util.tree_leaves({"pow": member, "plain": fj.LoDTensor(np.ones(2, "float32"))})
    assert len(leaves) == 2 and all(isinstance(leaf, (jax.Array, np.ndarray)) for leaf in leaves)
    np.testing.assert_allclose(np.asarray(jax.tree_util.tree_leaves(member)[0]), [BETA1 ** 2], rtol=1e-6)
