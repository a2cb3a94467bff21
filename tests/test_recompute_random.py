"""RecomputeOptimizer replays every random op of a recomputed segment: the copy of a random op in
the backward pass draws with its forward op's key, so the gradients are those of the forward pass
that ran. Oracles: the same program without recompute (same seed), and ``jax.grad`` of the same
computation written by hand in JAX around the forward draws fetched from the run."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import fluidjax as fj
from fluidjax import layer
from fluidjax.frontend.recompute import _forward_ops, add_dropout_seeds
from fluidjax.ir.names import RECOMPUTE_SEGMENT_ATTR

B, W, K = 16, 8, 20          # batch, width, nce's classes
FEED = {"x": np.random.default_rng(0).standard_normal((B, W)).astype(np.float32),
        "label": np.random.default_rng(1).integers(0, K, (B, 1)).astype(np.int64)}


def _op_writing(block, name):
    return next(op for op in block.ops if name in op.output_arg_names)


# Each kind: build(h) -> (new h, names of the forward draws to fetch), and the same in JAX:
# by_hand(h, draws, fetched) -> new h. ``nce`` ends the segment with its cost.
def _uniform(h):
    u = layer.uniform_random([B, W], min=0.5, max=1.5)
    return layer.elementwise_mul(h, u), [u.name]


def _gaussian(h):
    g = layer.gaussian_random([B, W], std=0.5)
    return layer.elementwise_add(h, g), [g.name]


def _gaussian_like(h):
    g = layer.gaussian_random_batch_size_like(h, [-1, W], std=0.5)
    return layer.elementwise_add(h, g), [g.name]


def _sampling_id(h):
    ids = layer.sampling_id(layer.softmax(h))
    return layer.gather(h, ids), [ids.name]


def _randint(h):
    idx = layer.randint(0, B, [B], dtype="int64")
    return layer.gather(h, idx), [idx.name]


def _random_crop(h):
    c = layer.random_crop(h, [5])
    return c, [c.name, h.name]


def _dropout(h):
    d = layer.dropout(h, 0.5)
    return d, [_op_writing(d.block, d.name).outputs["Mask"][0]]


def _nce(h):
    label = h.block.var("label")
    cost = layer.nce(h, label, num_total_classes=K, num_neg_samples=5)
    nce_op = next(op for op in cost.block.ops if op.type == "nce")
    return cost, [nce_op.outputs["SampleLabels"][0]]


def _sampled_softmax(h):
    label = h.block.var("label")
    logits = layer.fc(h, K)
    cost = layer.sampled_softmax_with_cross_entropy(logits, label, num_samples=5)
    return cost, []


KINDS = {"uniform_random": _uniform, "gaussian_random": _gaussian,
         "gaussian_random_batch_size_like": _gaussian_like, "sampling_id": _sampling_id,
         "randint_index": _randint, "random_crop": _random_crop, "dropout": _dropout, "nce": _nce,
         "sampled_softmax": _sampled_softmax}
LOSSES = ("nce", "sampled_softmax")


def _net(kind: str, recompute: bool, seed: int = 3):
    """x -> fc tanh (checkpoint) -> fc -> <random op> -> fc tanh (checkpoint) -> fc -> mean square;
    a sampled loss ends the segment instead: <loss> -> scale (checkpoint) -> mean."""
    main, startup = fj.Program(), fj.Program()
    main.random_seed = startup.random_seed = seed
    with fj.unique_name.guard(), fj.program_guard(main, startup):
        x = layer.data("x", shape=[B, W], append_batch_size=False)
        layer.data("label", shape=[B, 1], dtype="int64", append_batch_size=False)
        h1 = layer.fc(x, W, activation="tanh")
        h, draws = KINDS[kind](layer.fc(h1, W))
        if kind in LOSSES:
            h3 = layer.scale(h, 2.0)
            loss = layer.mean(h3)
        else:
            h3 = layer.fc(h, W, activation="tanh")
            loss = layer.mean(layer.square(layer.fc(h3, 1)))
        opt = fj.optimizer.SGD(0.1)
        if recompute:
            opt = fj.optimizer.RecomputeOptimizer(opt)
            opt._set_checkpoints([h1, h3])
        else:
            add_dropout_seeds(main.global_block(), _forward_ops(main.global_block(), loss))
        opt.minimize(loss)
    return main, startup, loss, draws


def _run(main, startup, loss, draws, feed=FEED):
    exe, scope = fj.Executor(), fj.Scope()
    exe.run(startup, scope=scope)
    block = main.global_block()
    params = {p.name: np.asarray(scope.find_var(p.name).get_tensor()) for p in main.all_parameters()}
    grads = [n + "@GRAD" for n in params if block.has_var(n + "@GRAD")]
    outs = exe.run(main, feed=feed, fetch_list=[loss.name] + grads + draws, scope=scope)
    return params, dict(zip([loss.name] + grads + draws, outs)), grads


def _close(a, b, tol=1e-6):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    scale = max(np.abs(b).max(), 1e-30)
    assert a.shape == b.shape and np.abs(a - b).max() <= tol * scale, (np.abs(a - b).max(), scale)


# -- the same computation by hand, in JAX --------------------------------------------------------------
def _fc(p, i, h):
    return h @ p[f"fc_{i}.w_0"] + p[f"fc_{i}.b_0"]


def _by_hand_middle(kind, h, d):
    if kind == "uniform_random":
        return h * d[0]
    if kind in ("gaussian_random", "gaussian_random_batch_size_like"):
        return h + d[0]
    if kind in ("sampling_id", "randint_index"):
        return jnp.take(h, jnp.asarray(d[0]), axis=0)
    if kind == "dropout":
        return h * d[0].astype(np.float32)         # downgrade_in_infer: X * mask
    if kind == "random_crop":                       # the offsets, recovered from the fetched crop
        crop, full = d
        starts = [next(o for o in range(W - 5 + 1) if np.array_equal(full[r, o:o + 5], crop[r]))
                  for r in range(B)]
        return jnp.stack([jax.lax.dynamic_slice(h[r], (starts[r],), (5,)) for r in range(B)])
    raise AssertionError(kind)


def _by_hand_loss(kind, p, draws):
    def loss(p):
        h = _fc(p, 1, jnp.tanh(_fc(p, 0, FEED["x"])))
        if kind == "nce":                           # uniform sampler: b = 5 negatives x 1/K
            samples = jnp.asarray(draws[0])
            w, bias = p["nce_0.w_0"], p["nce_0.b_0"].reshape(-1)
            o = jax.nn.sigmoid(jnp.einsum("nd,nsd->ns", h, w[samples]) + bias[samples])
            b = 5.0 / K
            cost = jnp.where(jnp.arange(samples.shape[1]) < 1, -jnp.log(o / (o + b)), -jnp.log(b / (o + b)))
            return jnp.mean(2.0 * cost.sum(1) / 6.0)       # layer.nce divides by negatives + 1
        h = _by_hand_middle(kind, h, draws)
        return jnp.mean(jnp.square(_fc(p, 3, jnp.tanh(_fc(p, 2, h)))))
    return jax.grad(loss)({k: jnp.asarray(v) for k, v in p.items()})


@pytest.mark.parametrize("kind", list(KINDS))
def test_recomputed_random_ops_draw_the_forward_numbers(kind):
    main, startup, loss, draws = _net(kind, True)
    copies = [op.type for op in main.global_block().ops if RECOMPUTE_SEGMENT_ATTR in op.attrs]
    random_type = {"randint_index": "randint", "sampled_softmax": "sample_logits",
                   "gaussian_random_batch_size_like": "gaussian_random_batch_size_like"}.get(kind, kind)
    assert random_type in copies, copies                 # the random op is recomputed
    params, ours, grads = _run(main, startup, loss, draws)
    plain_params, plain, plain_grads = _run(*_net(kind, False))
    assert grads == plain_grads and len(grads) >= 4
    for name in [loss.name] + grads:
        _close(ours[name], plain[name])
    if kind == "sampled_softmax":
        return
    by_hand = _by_hand_loss(kind, params, [ours[n] for n in draws])
    for name in grads:
        _close(ours[name], by_hand[name[:-len("@GRAD")]], tol=2e-5)


# -- the property: random segments of a random MLP with random ops --------------------------------------
_NOISE = ("uniform", "gaussian_like", "randint", "dropout", "none")


def _random_mlp(layers, noises, marks, recompute: bool):
    main, startup = fj.Program(), fj.Program()
    main.random_seed = startup.random_seed = 9
    with fj.unique_name.guard(), fj.program_guard(main, startup):
        h = layer.data("x", shape=[B, W], append_batch_size=False)
        checkpoints = []
        for i in range(layers):
            h = layer.fc(h, W, activation="tanh" if i % 2 else "relu")
            noise = noises[i]
            if noise == "uniform":
                h = layer.elementwise_mul(h, layer.uniform_random([B, W], min=0.0, max=2.0))
            elif noise == "gaussian_like":
                h = layer.elementwise_add(h, layer.gaussian_random_batch_size_like(h, [-1, W]))
            elif noise == "randint":
                h = layer.gather(h, layer.randint(0, B, [B], dtype="int64"))
            elif noise == "dropout":
                h = layer.dropout(h, 0.3)
            if marks[i]:
                checkpoints.append(h)
        loss = layer.mean(layer.square(layer.fc(h, 1)))
        opt = fj.optimizer.SGD(0.1)
        if recompute:
            opt = fj.optimizer.RecomputeOptimizer(opt)
            opt._set_checkpoints(checkpoints)
        else:
            add_dropout_seeds(main.global_block(), _forward_ops(main.global_block(), loss))
        opt.minimize(loss)
    return main, startup, loss


@st.composite
def _mlps(draw):
    layers = draw(st.integers(3, 5))
    noises = draw(st.lists(st.sampled_from(_NOISE), min_size=layers, max_size=layers))
    marks = draw(st.lists(st.booleans(), min_size=layers, max_size=layers))
    return layers, noises, marks


@settings(max_examples=8, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(_mlps())
def test_random_segments_give_the_gradients_of_the_plain_program(mlp):
    layers, noises, marks = mlp
    feed = {"x": FEED["x"]}
    ours = _run(*_random_mlp(layers, noises, marks, True), [], feed)
    plain = _run(*_random_mlp(layers, noises, marks, False), [], feed)
    assert ours[2] == plain[2]
    for name in ours[1]:
        _close(ours[1][name], plain[1][name])
