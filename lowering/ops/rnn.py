"""The fused ``rnn`` op (what ``paddle.nn.LSTM`` / ``GRU`` / ``SimpleRNN`` save in static programs)
and its gradient ``rnn_grad``.

Layout (Paddle 2.6.2's kernel, cuDNN's convention):

- ``Input`` [T, B, input_size] (time-major), ``PreState`` [L·D, B, H] (LSTM: h then c),
  ``State`` the same, ``Out`` [T, B, D·H] (forward then backward direction), where L is
  ``num_layers`` and D is 2 when ``is_bidirec``.
- ``WeightList``: all weights, then all biases: for each layer, for each direction,
  ``W_ih`` [G·H, in] and ``W_hh`` [G·H, H]; then in the same order ``b_ih``, ``b_hh`` [G·H]
  (G = 4 for LSTM, 3 for GRU, 1 for the plain RNNs).
- LSTM gates (i, f, c̃, o): c' = σ(f)·c + σ(i)·tanh(c̃), h' = σ(o)·tanh(c').
  GRU gates (r, z, c̃) with the reset applied after the hidden projection:
  c̃ = tanh(x_c + r·(h·W_hc + b_hc)), h' = z·h + (1 - z)·c̃.
  RNN_TANH / RNN_RELU: h' = act(x·W_ih + b_ih + h·W_hh + b_hh).
- ``SequenceLength`` [B] (int32): steps at or past a row's length leave its state unchanged and
  give zeros in ``Out``; the backward direction starts from each row's last real step.
- Between layers (not after the last), training with ``dropout_prob`` > 0 drops the layer's
  output (kept values scaled by 1/(1-p)); ``DropoutState`` holds the masks [L-1, T, B, D·H] so
  that ``rnn_grad`` drops the same elements.

Lowering: one ``lax.scan`` per layer, both directions in the same scan (their weights stacked,
the backward direction's inputs flipped in time), the input projection of all steps as one
matmul before it. Gradients are JAX's autodiff of that forward.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from ...ir.errors import OpRuntimeError
from ...ir.program import EMPTY_VAR_NAME
from ...ir.registry import grad_var_name, op
from ...ir.shape import InferShapeContext, grad_rule

GATES = {"LSTM": 4, "GRU": 3, "RNN_TANH": 1, "RNN_RELU": 1}
_ATTRS = {"dropout_prob": 0.0, "is_bidirec": False, "input_size": 10, "hidden_size": 100,
          "num_layers": 1, "mode": "LSTM", "seed": 0, "is_test": False}


def _geometry(mode: str, num_layers: int, bidirec: bool, hidden: int, fail) -> tuple[int, int, int]:
    if mode not in GATES:
        fail(f"mode must be one of {sorted(GATES)}, got {mode!r}")
    if num_layers < 1 or hidden < 1:
        fail(f"num_layers and hidden_size must be positive, got {num_layers} and {hidden}")
    return GATES[mode], 2 if bidirec else 1, 2 if mode == "LSTM" else 1


def _dropping(attrs_get) -> bool:
    return (not attrs_get("is_test") and float(attrs_get("dropout_prob") or 0.0) > 0.0
            and int(attrs_get("num_layers")) > 1)


def _rnn_shape(ctx: InferShapeContext) -> None:
    x = ctx.input("Input")
    mode, layers = ctx.attr("mode") or "LSTM", int(ctx.attr("num_layers") or 1)
    hidden = int(ctx.attr("hidden_size"))
    gates, dirs, parts = _geometry(mode, layers, bool(ctx.attr("is_bidirec")), hidden, ctx.fail)
    ctx.check(x.ndim == 3, f"Input must be [seq_len, batch, input_size] (time-major), got {x.shape}")
    in_size = int(ctx.attr("input_size") or x.shape[2])
    ctx.check(x.shape[2] in (-1, in_size), f"Input's last dim {x.shape[2]} != input_size {in_size}")
    states = [s for s in ctx.inputs("PreState") if s is not None]
    ctx.check(len(states) == parts, f"mode {mode} needs {parts} PreState tensor(s), got {len(states)}")
    for s in states:
        ctx.check(s.ndim == 3 and s.shape[0] in (-1, layers * dirs) and s.shape[2] in (-1, hidden),
                  f"PreState must be [num_layers*directions, batch, hidden] = [{layers * dirs}, B, {hidden}], "
                  f"got {s.shape}")
    weights = ctx.inputs("WeightList")
    ctx.check(len(weights) == 4 * layers * dirs,
              f"WeightList must hold {4 * layers * dirs} tensors (W_ih, W_hh per layer and direction, then "
              f"b_ih, b_hh), got {len(weights)}")
    for k, w in enumerate(weights[: 2 * layers * dirs]):
        layer = k // (2 * dirs)
        width = (in_size if layer == 0 else dirs * hidden) if k % 2 == 0 else hidden
        ok = w is not None and w.ndim == 2 and all(a in (-1, e) for a, e in zip(w.shape, (gates * hidden, width)))
        ctx.check(ok, f"WeightList[{k}] must be [{gates * hidden}, {width}], got {w.shape if w else None}")
    seq = ctx.input("SequenceLength")
    if seq is not None:
        ctx.check(seq.ndim == 1 and seq.dtype in ("int32", "int64"),
                  f"SequenceLength must be a 1-D int32 tensor [batch], got {seq.shape} {seq.dtype}")
    t, b = x.shape[0], x.shape[1]
    ctx.set_output("Out", (t, b, dirs * hidden), x.dtype, 0)
    for i in range(parts):
        ctx.set_output("State", (layers * dirs, b, hidden), x.dtype, 0, index=i)
    drop = (layers - 1, t, b, dirs * hidden) if _dropping(ctx.attr) else (0,)
    ctx.set_output("DropoutState", drop, "uint8", 0)
    ctx.set_output("Reserve", (0,), "uint8", 0)


def _activation(mode: str):
    return jax.nn.relu if mode == "RNN_RELU" else jnp.tanh


def _cell(mode: str):
    """step(xp, h_proj, state) -> (new state tuple, output h): one step, both directions at once
    (leading dim D). ``xp`` is x·W_ihᵀ + b_ih, ``h_proj`` h·W_hhᵀ + b_hh."""
    if mode == "LSTM":
        def step(xp, hp, state):
            _, c = state
            i, f, g, o = jnp.split(xp + hp, 4, axis=-1)
            c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
            h = jax.nn.sigmoid(o) * jnp.tanh(c)
            return (h, c), h
    elif mode == "GRU":
        def step(xp, hp, state):
            (h,) = state
            xr, xz, xc = jnp.split(xp, 3, axis=-1)
            hr, hz, hc = jnp.split(hp, 3, axis=-1)
            r, z = jax.nn.sigmoid(xr + hr), jax.nn.sigmoid(xz + hz)
            c = jnp.tanh(xc + r * hc)
            h = z * h + (1 - z) * c
            return (h,), h
    else:
        act = _activation(mode)

        def step(xp, hp, state):
            h = act(xp + hp)
            return (h,), h
    return step


def _layer(mode, inp, w_ih, w_hh, b_ih, b_hh, init, mask):
    """One layer, every direction: inp [T, B, in]; w_* stacked [D, ...]; init a tuple of [D, B, H];
    mask [T, B] bool or None. Returns (out [T, B, D·H], final state tuple of [D, B, H])."""
    dirs = w_ih.shape[0]
    xp = jnp.einsum("tbi,dgi->tdbg", inp, w_ih) + b_ih[None, :, None, :]
    masks = None
    if mask is not None:
        masks = jnp.broadcast_to(mask[:, None, :, None], (mask.shape[0], dirs, mask.shape[1], 1))
    if dirs == 2:      # the backward direction reads time reversed
        xp = jnp.stack([xp[:, 0], jnp.flip(xp[:, 1], 0)], axis=1)
        if masks is not None:
            masks = jnp.stack([masks[:, 0], jnp.flip(masks[:, 1], 0)], axis=1)
    step = _cell(mode)

    def body(state, xs):
        x_t, m_t = xs
        hp = jnp.einsum("dbh,dgh->dbg", state[0], w_hh) + b_hh[:, None, :]
        new, h = step(x_t, hp, state)
        if m_t is not None:
            new = tuple(jnp.where(m_t, n, s) for n, s in zip(new, state))
            h = jnp.where(m_t, h, jnp.zeros((), h.dtype))
        return new, h

    final, hs = lax.scan(body, init, (xp, masks))
    if dirs == 2:
        hs = jnp.stack([hs[:, 0], jnp.flip(hs[:, 1], 0)], axis=1)
    t, _, b, h = hs.shape
    return jnp.transpose(hs, (0, 2, 1, 3)).reshape(t, b, dirs * h), final


def rnn_forward(mode: str, x, states, weights, seq_len, layers: int, dirs: int, drop_masks=None,
                dropout_prob: float = 0.0):
    """The whole stack: (Out [T, B, D·H], final states as a list of [L·D, B, H])."""
    n = layers * dirs
    ws, bs = weights[: 2 * n], weights[2 * n:]
    mask = None
    if seq_len is not None:
        mask = jnp.arange(x.shape[0])[:, None] < jnp.asarray(seq_len).astype(jnp.int32)[None, :]
    finals = [[] for _ in states]
    inp = x
    for layer in range(layers):
        idx = [layer * dirs + d for d in range(dirs)]
        w_ih = jnp.stack([ws[2 * k] for k in idx])
        w_hh = jnp.stack([ws[2 * k + 1] for k in idx])
        b_ih = jnp.stack([bs[2 * k] for k in idx])
        b_hh = jnp.stack([bs[2 * k + 1] for k in idx])
        init = tuple(s[layer * dirs:(layer + 1) * dirs] for s in states)
        if layer > 0 and drop_masks is not None:
            keep = drop_masks[layer - 1].astype(inp.dtype)
            inp = inp * keep / jnp.asarray(1.0 - dropout_prob, inp.dtype) if dropout_prob < 1.0 else inp * 0
        inp, final = _layer(mode, inp, w_ih, w_hh, b_ih, b_hh, init, mask)
        for acc, f in zip(finals, final):
            acc.append(f)
    return inp, [jnp.concatenate(f, axis=0) for f in finals]


def _arguments(ctx):
    mode = ctx.attr("mode")
    layers = int(ctx.attr("num_layers"))
    hidden = int(ctx.attr("hidden_size"))

    def fail(message):
        raise OpRuntimeError(f"op 'rnn' at {ctx.op.location}: {message}")

    gates, dirs, parts = _geometry(mode, layers, bool(ctx.attr("is_bidirec")), hidden, fail)
    x = ctx.input("Input")
    states = [s for s in ctx.inputs("PreState") if s is not None]
    weights = ctx.inputs("WeightList")
    if len(states) != parts or len(weights) != 4 * layers * dirs:
        fail(f"mode {mode} with {layers} layer(s), {dirs} direction(s) needs {parts} PreState and "
             f"{4 * layers * dirs} WeightList tensors, got {len(states)} and {len(weights)}")
    if x.ndim != 3:
        fail(f"Input must be [seq_len, batch, input_size], got shape {tuple(x.shape)}")
    for s in states:
        if tuple(s.shape) != (layers * dirs, x.shape[1], hidden):
            fail(f"PreState must be {(layers * dirs, x.shape[1], hidden)}, got {tuple(s.shape)}")
    states = [jnp.asarray(s, x.dtype) for s in states]
    return mode, layers, dirs, x, states, [jnp.asarray(w, x.dtype) for w in weights], ctx.input("SequenceLength")


class Residuals:
    """What a forward ``rnn`` op keeps in ``Reserve`` for the ``rnn_grad`` of the same run: the vjp
    of its forward (its residuals), so the gradient does not run the forward scan a second time
    (XLA does not merge two identical loops). Only inside one jitted step; a ``Reserve`` that holds
    anything else makes ``rnn_grad`` recompute the forward."""

    def __init__(self, vjp, outputs) -> None:
        self.vjp, self.outputs = vjp, outputs


def grad_op_of(op, grad_type: str, slot: str):
    """The op of type ``grad_type`` in ``op``'s block that reads ``op``'s outputs ``slot`` (its
    gradient op), or None."""
    names = op.output(slot)
    for other in op.block.ops:
        if other.type == grad_type and other.input(slot) == names:
            return other
    return None


def _rnn_grad_maker(op, out_grads, in_grads):
    """``rnn_grad``, after a ``fill_any_like`` of zeros for each output without a gradient, as
    Paddle's backward writes it: Paddle's rnn_grad kernel crashes on an empty State@GRAD, so a
    fluidjax training program whose loss ignores the final states must still give it one."""
    specs, grads = [], {}
    for slot in ("Out", "State"):
        names = []
        for name, grad in zip(op.output(slot), out_grads.get(slot, [])):
            if grad == EMPTY_VAR_NAME:
                var = op.block.var(name)
                grad = grad_var_name(name)
                op.block.create_var(grad, var.shape, var.dtype, var.lod_level)
                specs.append(("fill_any_like", {"X": [name]}, {"Out": [grad]}, {"value": 0.0, "dtype": -1}))
            names.append(grad)
        grads[slot] = names
    inputs = {slot: list(op.input(slot)) for slot in ("Input", "PreState", "WeightList", "SequenceLength")}
    inputs.update({slot: list(op.output(slot)) for slot in ("Out", "DropoutState", "Reserve")})
    inputs.update({"Out@GRAD": grads["Out"], "State@GRAD": grads["State"]})
    attrs = {k: v for k, v in op.attrs.items() if k not in ("op_callstack", "op_role")}
    specs.append(("rnn_grad", inputs, {slot + "@GRAD": names for slot, names in in_grads.items()}, attrs))
    return specs


@op("rnn", inputs="Input PreState* WeightList* SequenceLength?", outputs="Out DropoutState Reserve State*",
    attrs=_ATTRS, infer_shape=_rnn_shape, no_grad_inputs=["SequenceLength"],
    no_grad_outputs=["DropoutState", "Reserve"], random=True, grad_maker=_rnn_grad_maker)
def rnn(ctx):
    """A stack of LSTM / GRU / simple RNN layers over a time-major batch (see the module docstring).

    ``State`` holds the final states (LSTM: h, c), taken at each row's last real step when
    ``SequenceLength`` is given.
    """
    mode, layers, dirs, x, states, weights, seq_len = _arguments(ctx)
    p = float(ctx.attr("dropout_prob") or 0.0)
    masks = None
    if _dropping(ctx.attr):
        shape = (layers - 1, x.shape[0], x.shape[1], dirs * int(ctx.attr("hidden_size")))
        masks = (jax.random.uniform(ctx.rng(), shape) >= p).astype(jnp.uint8)
    reserve = jnp.zeros((0,), jnp.uint8)
    if grad_op_of(ctx.op, "rnn_grad", "Out") is not None:
        # Differentiated in this program: run the forward once, keeping its residuals.
        (out, finals), vjp = jax.vjp(
            lambda x, s, w: rnn_forward(mode, x, s, w, seq_len, layers, dirs, masks, p), x, states, weights)
        reserve = Residuals(vjp, (out, finals))
    else:
        out, finals = rnn_forward(mode, x, states, weights, seq_len, layers, dirs, masks, p)
    return {"Out": out, "State": finals,
            "DropoutState": masks if masks is not None else jnp.zeros((0,), jnp.uint8), "Reserve": reserve}


@op("rnn_grad", inputs="Input PreState* WeightList* SequenceLength? Out DropoutState? Reserve? "
                       "Out@GRAD? State@GRAD*?",
    outputs="Input@GRAD? PreState@GRAD*? WeightList@GRAD*?", attrs=_ATTRS, infer_shape=grad_rule, grad=None)
def rnn_grad(ctx):
    """The vjp of ``rnn``'s forward, dropping the elements its ``DropoutState`` dropped (from the
    residuals the forward op kept in ``Reserve`` when it has them). A missing ``Out@GRAD`` or
    ``State@GRAD`` counts as zeros."""
    mode, layers, dirs, x, states, weights, seq_len = _arguments(ctx)
    p = float(ctx.attr("dropout_prob") or 0.0)
    masks = ctx.input("DropoutState") if _dropping(ctx.attr) else None
    if masks is not None and masks.ndim != 4:
        raise OpRuntimeError(f"op 'rnn_grad' at {ctx.op.location}: DropoutState holds no dropout masks "
                             f"(shape {tuple(masks.shape)}); it must be the forward rnn op's")

    saved = ctx.input("Reserve")
    if isinstance(saved, Residuals):
        vjp, (out, finals) = saved.vjp, saved.outputs
    else:
        def forward(x, states, weights):
            return rnn_forward(mode, x, states, weights, seq_len, layers, dirs, masks, p)

        (out, finals), vjp = jax.vjp(forward, x, states, weights)
    g_out = ctx.input("Out@GRAD")
    g_out = jnp.zeros_like(out) if g_out is None else jnp.asarray(g_out, out.dtype).reshape(out.shape)
    given = ctx.inputs("State@GRAD")
    g_states = [jnp.asarray(given[i], f.dtype).reshape(f.shape) if i < len(given) and given[i] is not None
                else jnp.zeros_like(f) for i, f in enumerate(finals)]
    gx, gs, gw = vjp((g_out, g_states))
    return {"Input@GRAD": gx, "PreState@GRAD": list(gs), "WeightList@GRAD": list(gw)}
