"""The ragged recurrence's backward reads its residuals in Paddle's batch layout (issue 30 item 1).

``lowering/ops/_ragged.py`` writes each step's states and linear parts a second time at
``base[t]`` (the running sequences of every earlier step before them), rows past the running ones
overwritten by later steps, and the backward reads them back as contiguous slices. Checked here:
``base`` against NumPy, and the recurrence's outputs and gradients (every input, every output's
cotangent) against ``jax.grad`` of a plain per-sequence Python loop over the cell (no custom vjp,
no phases), in float64, for batches with empty sequences, more sequences than rows, odd lengths
that leave every phase a different trip count, and reversed sequences.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fluidjax  # noqa: F401  (x64 and the registry, before the lowering modules)
from fluidjax.lowering.ops import recurrent_lod as rl
from fluidjax.lowering.ops._ragged import _batch_base, batch_levels, ragged_recurrence

CASES = {
    "odd": [5, 0, 2, 7, 1, 3, 6, 0, 4, 2, 7, 1],     # 12 sequences: levels 12, 10, 8, 6, 4, 2, 1
    "empties": [0, 0, 1, 0, 0, 0, 2],          # more sequences than rows once bucketed
    "one": [9],
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_batch_base_is_the_running_count_prefix_sum(case):
    lengths = np.asarray(CASES[case])
    rows = int(lengths.sum())
    length = jnp.asarray(np.sort(lengths)[::-1].copy(), jnp.int32)
    base = np.asarray(_batch_base(length, len(lengths), rows))
    running = [(lengths > t).sum() for t in range(rows)]
    assert base.tolist() == np.concatenate([[0], np.cumsum(running)]).tolist()


def _cell(kind, reverse):
    if kind == "lstm":
        return rl._Cell("lstm", reverse, "sigmoid")
    if kind == "lstmp":
        return rl._Cell("lstmp", reverse, "sigmoid", proj_act="tanh")
    return rl._Cell("gru", reverse, "sigmoid")


def _inputs(kind, lengths, rows, seed=0):
    rng = np.random.default_rng(seed)
    d, p = 3, 2
    count = len(lengths)
    f = lambda *s: jnp.asarray(rng.uniform(-0.8, 0.8, s))  # noqa: E731
    if kind == "lstm":
        x, w, params, init = f(rows, 4 * d), f(d, 4 * d), (f(d), f(d), f(d)), (f(count, d), f(count, d))
    elif kind == "lstmp":
        x, w, params, init = f(rows, 4 * d), f(p, 4 * d), (f(d), f(d), f(d), f(d, p)), (f(count, p), f(count, d))
    else:
        x, w, params, init = f(rows, 3 * d), f(d, 2 * d), (f(d, d),), (f(count, d),)
    return x, w, params, init


def _reference(cell, x, w, params, init, lengths):
    """Each sequence alone, step by step, in LoD row order (padding rows zero)."""
    rows, width = x.shape[0], w.shape[1]
    states = [[jnp.zeros(i.shape[1:], x.dtype)] * rows for i in init]
    pres = [jnp.zeros((width,), x.dtype)] * rows
    start = 0
    for s, n in enumerate(lengths):
        carry = tuple(i[s:s + 1] for i in init)
        for k in range(n):
            r = start + (n - 1 - k if cell.reverse else k)
            pre = x[r:r + 1, :width] + carry[0] @ w
            carry = tuple(cell.step(pre, x[r:r + 1, width:], carry, params))
            for buf, v in zip(states, carry):
                buf[r] = v[0]
            pres[r] = pre[0]
        start += n
    return tuple(jnp.stack(b) for b in states), jnp.stack(pres)


@pytest.mark.parametrize("kind, reverse, case", [
    ("lstm", False, "odd"), ("lstm", True, "empties"), ("gru", True, "odd"),
    pytest.param("gru", False, "one", marks=pytest.mark.slow), pytest.param("lstmp", True, "odd", marks=pytest.mark.slow)])
def test_ragged_recurrence_equals_jax_grad_of_a_plain_loop(kind, reverse, case):
    lengths = CASES[case]
    tokens = sum(lengths)
    rows = 1 << max(tokens - 1, 0).bit_length()          # a bucket with padding rows, as fed
    offsets = jnp.asarray(np.concatenate([[0], np.cumsum(lengths)]), jnp.int32)
    cell = _cell(kind, reverse)
    x, w, params, init = _inputs(kind, lengths, rows)
    ours = lambda x, w, params, init: ragged_recurrence(  # noqa: E731
        cell, x, w, params, init, offsets, batch_levels(len(lengths)))
    ref = lambda x, w, params, init: _reference(cell, x, w, params, init, lengths)  # noqa: E731
    out_ref = ref(x, w, params, init)
    # a cotangent on every output (states and linear parts), zero on padding rows
    rng = np.random.default_rng(1)
    real = (np.arange(rows) < tokens)[:, None]
    cts = [jnp.asarray(rng.uniform(-1, 1, a.shape) * real) for a in jax.tree_util.tree_leaves(out_ref)]

    def loss(fn):
        def f(x, w, params, init):
            states, pre = fn(x, w, params, init)
            return sum(jnp.sum(a * b) for a, b in zip(states + (pre,), cts))
        return f

    out_ours, g_ours = jax.jit(lambda *a: (ours(*a), jax.grad(loss(ours), argnums=(0, 1, 2, 3))(*a)))(
        x, w, params, init)
    for a, b in zip(jax.tree_util.tree_leaves(out_ours), jax.tree_util.tree_leaves(out_ref)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-10, atol=1e-12)
    g_ref = jax.grad(loss(ref), argnums=(0, 1, 2, 3))(x, w, params, init)
    for a, b in zip(jax.tree_util.tree_leaves(g_ours), jax.tree_util.tree_leaves(g_ref)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-9, atol=1e-11)
