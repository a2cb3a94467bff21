"""Values whose row count is data (nonzero, masked_select, unique) reaching ops that read the count
or join rows (docs/ops_data_dependent.md): every op either honours the real count, checked against
Paddle 2.6.2 running the same program bytes, or refuses with a DataDependentShapeError that names
the consuming and the producing op. Nothing returns the padded capacity as data."""

from __future__ import annotations

import numpy as np
import pytest

import fluidjax as fj  # noqa: I001  (fluidjax before paddle)
import paddle_oracle as po
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

L = fj.layers
X = np.array([1, -2, 3, -4, 5, -6], "float32")


def masked_select(x, mask):
    """Paddle's masked_select op (no Fluid 1.x layer spells it)."""
    block = fj.default_main_program().current_block()
    out = block.create_var(fj.unique_name.generate("masked_select"), (-1,), x.dtype)
    block.append_op("masked_select", {"X": x, "Mask": mask}, {"Y": out})
    return out


def _build(consumer, shape=(6,)):
    main, startup = fj.Program(), fj.Program()
    with fj.program_guard(main, startup):
        x = L.data("x", shape=list(shape), dtype="float32", append_batch_size=False)
        m = L.greater_than(x, L.fill_constant([1], "float32", 0.0))
        out = consumer(x, m)
    return main, out


def _ours(main, outs, feed):
    return fj.Executor().run(main, feed=feed, fetch_list=list(outs))


def _check_paddle(consumer, x=X, shape=(6,)):
    main, out = _build(consumer, shape)
    outs = out if isinstance(out, (list, tuple)) else [out]
    feed = {"x": x.reshape(shape)}
    ours = _ours(main, outs, feed)
    theirs = po.run(main.serialize(), feed, [o.name for o in outs])
    for a, e in zip(ours, theirs):
        a, e = _fluid_shape(np.asarray(a), e)
        assert a.shape == e.shape, (a.shape, e.shape, a, e)
        np.testing.assert_allclose(a, e, rtol=1e-6, atol=1e-6)


def _fluid_shape(ours, theirs):
    """A one-element result the Fluid API declares [1] (DESIGN.md: Fluid programs keep Fluid's
    shapes) against Paddle 2.6.2's 0-d one: compared as [1]."""
    if theirs.ndim == 0 and ours.shape == (1,):
        theirs = theirs.reshape(1)
    return ours, theirs


def _check_refused(consumer, op_type, producer="where_index", shape=(6,)):
    main, out = _build(consumer, shape)
    with pytest.raises(fj.DataDependentShapeError) as info:
        _ours(main, [out], {"x": X.reshape(shape)})
    message = str(info.value)
    assert repr(op_type) in message and repr(producer) in message, message
    assert info.value.op_type == op_type and info.value.producer_type == producer
    assert "test_data_dependent_counts.py" in message       # the user's lines of both ops


def _idx(x, m):
    return L.nonzero(m)


def _ms(x, m):
    return masked_select(x, m)


def _last_row_index(v):
    """shape(v)[0] - 1, as an int64 [1] index (position from the end)."""
    rows = L.slice(L.shape(v), axes=[0], starts=[0], ends=[1])
    return L.cast(L.scale(rows, bias=-1.0), "int64")


def _cond_of_counted(x, m, compare):
    """cond whose branches scale nonzero's rows differently; the taken branch's count comes out."""
    idx = L.cast(_idx(x, m), "float32")
    pred = compare(L.reduce_sum(x), L.fill_constant([1], "float32", 0.0))
    out = L.cond(pred, lambda: L.scale(idx, 2.0), lambda: L.scale(idx, 3.0))
    return [out, L.reduce_sum(out, dim=0), L.shape(out)]


# -- each op: honoured (Paddle's values and shape) -------------------------------------------------
HONOURED = {
    "shape": lambda x, m: L.shape(_idx(x, m)),
    "shape_masked_select": lambda x, m: L.shape(_ms(x, m)),
    "concat": lambda x, m: L.concat([_idx(x, m), _idx(x, m)], axis=0),
    "concat_mixed": lambda x, m: L.concat([_ms(x, m), x, _ms(x, L.logical_not(m))], axis=0),
    "reshape_minus1_2d": lambda x, m: L.reshape(_idx(x, m), [-1]),
    "reshape_minus1_rows": lambda x, m: L.reshape(L.concat([_idx(x, m), _idx(x, m)], axis=0), [-1, 2]),
    "reduce_sum_rows": lambda x, m: L.reduce_sum(L.scale(_ms(x, m), bias=1.0), dim=0),
    "reduce_mean_rows": lambda x, m: L.reduce_mean(L.scale(_ms(x, m), bias=1.0), dim=0),
    "reduce_max_rows": lambda x, m: L.reduce_max(L.scale(_ms(x, m), -1.0), dim=0),
    "argsort": lambda x, m: list(L.argsort(_ms(x, m), axis=0)),
    "argsort_descending": lambda x, m: list(L.argsort(L.scale(_ms(x, m), -1.0), axis=0, descending=True)),
    "sort_nonzero_rows": lambda x, m: list(L.argsort(L.scale(L.cast(_idx(x, m), "float32"), bias=1.0), axis=0)),
    "topk": lambda x, m: list(L.topk(_ms(x, L.logical_not(m)), 2)),
    "cumsum_reverse": lambda x, m: L.cumsum(L.scale(_ms(x, m), bias=1.0), axis=0, reverse=True),
    "slice_last": lambda x, m: L.slice(_idx(x, m), axes=[0], starts=[-1], ends=[10000]),
    "slice_drop_last": lambda x, m: L.slice(_idx(x, m), axes=[0], starts=[0], ends=[-1]),
    "slice_from_end_1d": lambda x, m: L.slice(_ms(x, m), axes=[0], starts=[-2], ends=[-1]),
    "gather_from_end": lambda x, m: L.gather(_idx(x, m), _last_row_index(_idx(x, m))),
    "expand": lambda x, m: L.expand(_idx(x, m), [2, 1]),
    "stack_axis1": lambda x, m: L.stack([_idx(x, m), _idx(x, m)], axis=1),
    "level0_rowwise_fetch": lambda x, m: L.scale(L.cast(_idx(x, m), "float32"), 2.0, bias=1.0),
    "cond_true_branch": lambda x, m: _cond_of_counted(x, m, L.greater_than),
    "cond_false_branch": lambda x, m: _cond_of_counted(x, m, L.less_than),
    "unique_then_concat": lambda x, m: L.concat([L.unique(L.sign(x))[0], L.unique(x)[0]], axis=0),
}


@pytest.mark.parametrize("name", sorted(HONOURED))
def test_counted_rows_match_paddle(name):
    _check_paddle(HONOURED[name])


def test_reshape_minus1_of_2d_nonzero():
    """reshape(-1) of [K, 2] coordinates: the 2K real elements, not the capacity's 12."""
    _check_paddle(lambda x, m: L.reshape(L.nonzero(m), [-1]), shape=(2, 3))


def test_cumsum_flattened_2d_nonzero():
    """cumsum over all elements of [K, 2] coordinates: 2K running sums."""
    _check_paddle(lambda x, m: L.cumsum(L.scale(L.cast(L.nonzero(m), "float32"), bias=1.0), axis=None),
                  shape=(2, 3))


# -- each op: refused, naming both ops ------------------------------------------------------------
REFUSED = {
    "stack": (lambda x, m: L.stack([_idx(x, m), _idx(x, m)], axis=0), "stack"),
    "transpose": (lambda x, m: L.transpose(_idx(x, m), [1, 0]), "transpose2"),
    "unsqueeze_rows": (lambda x, m: L.unsqueeze(_idx(x, m), [0]), "unsqueeze2"),
    "flip": (lambda x, m: L.flip(_idx(x, m), [0]), "flip"),
    "reshape_fixed_rows": (lambda x, m: L.reshape(_idx(x, m), [1, -1]), "reshape2"),
    "matmul_over_rows": (lambda x, m: L.matmul(L.cast(_idx(x, m), "float32"), L.cast(_idx(x, m), "float32"),
                                               transpose_x=True), "matmul"),
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_refused_with_both_ops_named(name):
    consumer, op_type = REFUSED[name]
    _check_refused(consumer, op_type)


def test_refusal_names_the_data_dependent_producer_through_rowwise_ops():
    """The producing op named is the one whose output size is data, not the cast between."""
    _check_refused(lambda x, m: L.flip(L.scale(_ms(x, m), 2.0), [0]), "flip", producer="masked_select")


# -- property: random chains from a data-dependent op ---------------------------------------------
def _src_nonzero(x, m):
    return L.cast(L.nonzero(m), "float32")


def _src_masked(x, m):
    return masked_select(x, m)


def _src_unique(x, m):
    return L.unique(masked_select(x, m), dtype="int64")[0]


SOURCES = {"nonzero": (_src_nonzero, "where_index"), "masked_select": (_src_masked, "masked_select"),
           "unique": (_src_unique, "unique")}


def _rank(v):
    return len(v.shape)


CONSUMERS = {
    "scale": lambda v: L.scale(v, 2.0, bias=1.0),
    "relu": lambda v: L.relu(v),
    "add_self": lambda v: L.elementwise_add(v, v),
    "concat": lambda v: L.concat([v, v], axis=0),
    "reshape": lambda v: L.reshape(v, [-1]),
    "reduce_sum": lambda v: L.reduce_sum(v, dim=0),
    "reduce_mean": lambda v: L.reduce_mean(v, dim=0),
    "reduce_max": lambda v: L.reduce_max(v, dim=0),
    "argsort": lambda v: L.argsort(v, axis=0)[0],
    "argsort_desc": lambda v: L.argsort(v, axis=0, descending=True)[0],
    "cumsum": lambda v: L.cumsum(v, axis=0),
    "cumsum_rev": lambda v: L.cumsum(v, axis=0, reverse=True),
    "slice_last": lambda v: L.slice(v, axes=[0], starts=[-1], ends=[1 << 20]),
    "slice_head": lambda v: L.slice(v, axes=[0], starts=[0], ends=[-1]),
    "expand": lambda v: L.expand(v, [2] + [1] * (_rank(v) - 1)),
    "shape": lambda v: L.cast(L.shape(v), "float32"),
    "gather_last": lambda v: L.gather(v, _last_row_index(v)),
    "stack0": lambda v: L.stack([v, v], axis=0),
    "flip": lambda v: L.flip(v, [0]),
    "topk": lambda v: L.topk(v, 1)[0],
    "unique": lambda v: L.unique(v)[0],
    "cond": lambda v: L.cond(L.less_than(L.reduce_sum(L.cast(L.shape(v), "float32")),
                                         L.fill_constant([1], "float32", 4.0)),
                             lambda: L.scale(v, 2.0), lambda: L.scale(v, -1.0)),
}


@st.composite
def _programs(draw):
    """(x, mask, source, chain): the choices drawn uniformly from a seed (so 30 examples cover the
    table), the mask all true, all false or random."""
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1)))
    n = int(rng.integers(1, 8))
    x = rng.integers(-3, 4, n).astype("float32")
    kind = draw(st.sampled_from(["random", "all", "none"]))
    mask = rng.random(n) < 0.5 if kind == "random" else np.full(n, kind == "all")
    source = str(rng.choice(sorted(SOURCES)))
    chain = [str(c) for c in rng.choice(sorted(CONSUMERS), int(rng.integers(1, 4)))]
    return x, mask, source, chain


def _run_chain(x, mask, source, chain):
    main, startup = fj.Program(), fj.Program()
    with fj.program_guard(main, startup):
        xv = L.data("x", shape=[len(x)], dtype="float32", append_batch_size=False)
        mv = L.data("m", shape=[len(x)], dtype="bool", append_batch_size=False)
        v = SOURCES[source][0](xv, mv)
        fetched = [v]
        for name in chain:
            v = CONSUMERS[name](v)
            fetched.append(v)
    feed = {"x": x, "m": mask}
    names = [f.name for f in fetched]
    try:
        theirs = po.run(main.serialize(), feed, names)
    except Exception:                     # Paddle refuses (an empty tensor, k past the count):
        theirs = None                     # ours may refuse or not, but must not crash untyped
    try:
        ours = _ours(main, fetched, feed)
    except fj.DataDependentShapeError as exc:
        assert exc.producer_type == SOURCES[source][1] or exc.producer_type in (
            "where_index", "masked_select", "unique"), str(exc)
        return
    except fj.IndexOutOfRangeError:
        return                            # an index past the rows (gather_last of no rows: -1),
        #                                   which Paddle's CPU kernel reads without a check
    except fj.FluidJaxError:
        if theirs is None:
            return
        raise
    if theirs is None:
        return
    for name, a, e in zip(["source"] + chain, ours, theirs):
        fluid_one = e.ndim == 0 and np.shape(a) == (1,)
        a, e = _fluid_shape(np.asarray(a), e)
        assert a.shape == e.shape, (source, chain, name, a, e)
        np.testing.assert_allclose(a, e.astype(a.dtype), rtol=1e-5, atol=1e-5, err_msg=f"{source} {chain} {name}")
        if fluid_one:                     # Fluid's [1] against Paddle 2's 0-d: what follows differs
            break                         # by that shape alone (shape() gives [1] against [])


@settings(max_examples=30, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(_programs())
@example((np.array([1, -2, 3], "float32"), np.array([True, True, True]), "masked_select", ["concat", "cumsum_rev"]))
@example((np.array([1, -2, 3], "float32"), np.array([False, False, False]), "nonzero", ["shape"]))
@example((np.array([2, 2, -1, 0], "float32"), np.array([True, True, False, True]), "unique", ["argsort", "slice_last"]))
def test_random_chains_agree_with_paddle_or_refuse(program):
    _run_chain(*program)


@pytest.mark.parametrize("name", ["concat", "slice_last", "argsort", "cumsum_reverse", "reshape"])
def test_gradient_through_count_aware_ops(name):
    """The gradient of mean(op(masked_select(x, m))) with respect to x equals Paddle's."""
    ops = {
        "concat": lambda v, x: L.concat([v, x, v], axis=0),
        "slice_last": lambda v, x: L.slice(v, axes=[0], starts=[-2], ends=[10000]),
        "argsort": lambda v, x: L.slice(L.argsort(v, axis=0)[0], axes=[0], starts=[0], ends=[2]),
        "cumsum_reverse": lambda v, x: L.cumsum(v, axis=0, reverse=True),
        "reshape": lambda v, x: L.reshape(v, [-1, 2]),
    }
    main, startup = fj.Program(), fj.Program()
    with fj.program_guard(main, startup):
        x = L.data("x", shape=[6], dtype="float32", append_batch_size=False)
        x.stop_gradient = False
        m = L.greater_than(x, L.fill_constant([1], "float32", 0.0))
        loss = L.mean(L.square(ops[name](masked_select(L.scale(x, 1.5), m), x)))
        forward = main.serialize()
        fj.append_backward(loss)
    feed = {"x": np.array([1, -2, 3, -4, 5, 0.5], "float32")}
    (ours,) = _ours(main, ["x@GRAD"], feed)
    import paddle

    prog = po.parse(forward)
    with paddle.static.program_guard(prog):
        paddle.static.append_backward(prog.global_block().var(loss.name))
    (theirs,) = po.run(prog, feed, ["x@GRAD"])
    np.testing.assert_allclose(np.asarray(ours), theirs, rtol=1e-5, atol=1e-6)


def test_gather_past_the_count_is_refused_at_run_time():
    """gather reads a counted X as a table: an index inside the capacity but past the real rows is a
    BoundExceededError naming both ops (it would read a padding row); inside the count it is exact."""
    main, startup = fj.Program(), fj.Program()
    with fj.program_guard(main, startup):
        x = L.data("x", shape=[6], dtype="float32", append_batch_size=False)
        i = L.data("i", shape=[1], dtype="int64", append_batch_size=False)
        idx = L.nonzero(L.greater_than(x, L.fill_constant([1], "float32", 0.0)))
        out = L.gather(idx, L.scale(i, 1.0))
    feed = {"x": X, "i": np.array([2], "int64")}
    (ours,) = _ours(main, [out], feed)
    (theirs,) = po.run(main.serialize(), feed, [out.name])
    np.testing.assert_array_equal(ours, theirs)
    with pytest.raises(fj.BoundExceededError) as info:
        _ours(main, [out], {"x": X, "i": np.array([4], "int64")})
    assert "'gather'" in str(info.value) and "'where_index'" in str(info.value) and "got 4" in str(info.value)


def test_two_counted_inputs_of_a_rowwise_op():
    """a + b of two masked_selects with equal counts: Paddle's rows; the count is the rows'."""
    _check_paddle(lambda x, m: L.elementwise_add(_ms(x, m), _ms(L.scale(x, 3.0), L.less_than(x, L.fill_constant(
        [1], "float32", 0.0)))))
