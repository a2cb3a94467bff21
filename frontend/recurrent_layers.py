"""Recurrent layers with Fluid 1.x's names and arguments: ``dynamic_lstm`` and ``dynamic_gru`` over
LoD sequences, and the one-step cells ``gru_unit`` and ``lstm_unit``.

Like Fluid, the sequence layers take input that is already projected (an ``fc`` of 4·D or 3·D
columns before them) and only add the recurrent part; gate layouts are Paddle's (see
``lowering/ops/recurrent_lod.py``).

>>> words = data("words", dims=32, lod_level=1)                       # doctest: +SKIP
>>> proj = fc(words, 4 * 64)                                           # [-1, 256], keeps the LoD
>>> hidden, cell = dynamic_lstm(proj, size=4 * 64)                     # [-1, 64] each
>>> sentence = sequence_pool(hidden, "max")                            # one row per sequence
"""

from __future__ import annotations

import copy

from ..ir.errors import ShapeError
from ..ir.variable import Variable
from .layer_helper import LayerHelper
from .nn_layers import fc
from .param_attr import ParamAttr
from .tensor_layers import concat

__all__ = ["dynamic_lstm", "dynamic_lstmp", "dynamic_gru", "gru_unit", "lstm_unit"]

_ACTIVATIONS = ("sigmoid", "tanh", "relu", "identity")
_GRU_UNIT_ACTIVATIONS = {"identity": 0, "sigmoid": 1, "tanh": 2, "relu": 3}


def _check_activation(layer: str, arg: str, value: str) -> None:
    if value not in _ACTIVATIONS:
        raise ValueError(f"{layer}: {arg} must be one of {list(_ACTIVATIONS)}, got {value!r}")


def _check_sequences(layer: str, input: Variable, width: int, what: str) -> None:
    if input.lod_level != 1:
        raise ShapeError(f"{layer}: input {input.name!r} must be a LoD tensor with one level (lod_level 1), got "
                         f"lod_level {input.lod_level}; declare it with data(..., lod_level=1)")
    if input.ndim != 2 or input.shape[1] not in (-1, width):
        raise ShapeError(f"{layer}: input {input.name!r} must be [-1, {width}] ({what}), got {input.shape}")


def _check_state(layer: str, arg: str, state: Variable | None, size: int) -> None:
    if state is not None and (state.ndim != 2 or state.shape[1] not in (-1, size)):
        raise ShapeError(f"{layer}: {arg} must be [num_sequences, {size}], got {state.shape}")


def dynamic_lstm(input: Variable, size: int, h_0: Variable | None = None, c_0: Variable | None = None,
                 param_attr=None, bias_attr=None, use_peepholes: bool = True, is_reverse: bool = False,
                 gate_activation: str = "sigmoid", cell_activation: str = "tanh",
                 candidate_activation: str = "tanh", dtype: str = "float32",
                 name: str | None = None) -> tuple[Variable, Variable]:
    """An LSTM over every sequence of ``input`` (Paddle's ``lstm`` op); returns (hidden, cell).

    ``input`` is a lod_level-1 tensor [-1, 4·D] already projected from the words (an ``fc`` of
    ``size`` columns); ``size`` is **4·D**, as in Fluid, and hidden/cell are [-1, D] with the
    input's LoD. The weight is [D, 4·D] with gate columns (c, i, f, o); the bias is [1, 4·D], or
    [1, 7·D] with ``use_peepholes`` (the peepholes w_ic, w_fc, w_oc after the gate biases).
    ``h_0``/``c_0`` ([num_sequences, D], together or not at all) start each sequence;
    ``is_reverse`` runs each sequence from its end. Note: Paddle passes no gradient through the
    returned cell (its ``lstm_grad`` takes only the hidden's), and neither does fluidjax.
    """
    if bias_attr is False:
        raise ValueError("dynamic_lstm: bias_attr cannot be False (the lstm op needs its bias)")
    if not isinstance(size, int) or size <= 0 or size % 4:
        raise ValueError(f"dynamic_lstm: size must be 4 * hidden size (a positive multiple of 4), got {size!r}")
    if (h_0 is None) != (c_0 is None):
        raise ValueError("dynamic_lstm: h_0 and c_0 must be given together (or neither)")
    for arg, value in (("gate_activation", gate_activation), ("cell_activation", cell_activation),
                       ("candidate_activation", candidate_activation)):
        _check_activation("dynamic_lstm", arg, value)
    hidden_size = size // 4
    _check_sequences("dynamic_lstm", input, size, "4 * hidden size columns, already projected")
    _check_state("dynamic_lstm", "h_0", h_0, hidden_size)
    _check_state("dynamic_lstm", "c_0", c_0, hidden_size)
    helper = LayerHelper("lstm", name)
    weight = helper.create_parameter(ParamAttr.to_attr(param_attr), (hidden_size, 4 * hidden_size), dtype)
    bias = helper.create_parameter(ParamAttr.to_attr(bias_attr), (1, (7 if use_peepholes else 4) * hidden_size),
                                   dtype, is_bias=True)
    hidden, cell = helper.create_tmp(dtype), helper.create_tmp(dtype)
    batch_gate = helper.create_tmp(dtype, stop_gradient=True)
    batch_cell_pre_act = helper.create_tmp(dtype, stop_gradient=True)
    # Absent initial states are empty slots, as Paddle writes them (its grad maker looks them up).
    helper.append_op("lstm", inputs={"Input": input, "H0": [] if h_0 is None else h_0,
                                     "C0": [] if c_0 is None else c_0, "Weight": weight, "Bias": bias},
                     outputs={"Hidden": hidden, "Cell": cell, "BatchGate": batch_gate,
                              "BatchCellPreAct": batch_cell_pre_act},
                     attrs={"use_peepholes": bool(use_peepholes), "is_reverse": bool(is_reverse),
                            "gate_activation": gate_activation, "cell_activation": cell_activation,
                            "candidate_activation": candidate_activation})
    return hidden, cell


def dynamic_lstmp(input: Variable, size: int, proj_size: int, param_attr=None, bias_attr=None,
                  use_peepholes: bool = True, is_reverse: bool = False, gate_activation: str = "sigmoid",
                  cell_activation: str = "tanh", candidate_activation: str = "tanh", proj_activation: str = "tanh",
                  dtype: str = "float32", name: str | None = None, h_0: Variable | None = None,
                  c_0: Variable | None = None, cell_clip: float | None = None,
                  proj_clip: float | None = None) -> tuple[Variable, Variable]:
    """An LSTM with a recurrent projection (Fluid 1.x's ``lstmp`` op); returns (projection, cell).

    As :func:`dynamic_lstm`, ``input`` is [-1, 4·D] already projected and ``size`` is 4·D; each
    step's hidden state h [D] is projected to r = proj_activation(h · ProjWeight) [``proj_size``],
    which is what recurs (Weight is [P, 4·D]). ``h_0`` [num_sequences, P] is r's initial value
    (Fluid 1.8's shape: the projection size), ``c_0`` [num_sequences, D] the cell; ``cell_clip`` / ``proj_clip`` bound c and r. Projection
    [-1, P] and cell [-1, D] keep the input's LoD; the cell passes no gradient (as ``lstm``'s).
    """
    if bias_attr is False:
        raise ValueError("dynamic_lstmp: bias_attr cannot be False (the lstmp op needs its bias)")
    if not isinstance(size, int) or size <= 0 or size % 4:
        raise ValueError(f"dynamic_lstmp: size must be 4 * hidden size (a positive multiple of 4), got {size!r}")
    if not isinstance(proj_size, int) or proj_size <= 0:
        raise ValueError(f"dynamic_lstmp: proj_size must be a positive int, got {proj_size!r}")
    for arg, value in (("gate_activation", gate_activation), ("cell_activation", cell_activation),
                       ("candidate_activation", candidate_activation), ("proj_activation", proj_activation)):
        _check_activation("dynamic_lstmp", arg, value)
    for arg, value in (("cell_clip", cell_clip), ("proj_clip", proj_clip)):
        if value is not None and value < 0:
            raise ValueError(f"dynamic_lstmp: {arg} must be >= 0, got {value}")
    hidden_size = size // 4
    _check_sequences("dynamic_lstmp", input, size, "4 * hidden size columns, already projected")
    _check_state("dynamic_lstmp", "h_0", h_0, proj_size)   # Fluid 1.8: the initial projection
    _check_state("dynamic_lstmp", "c_0", c_0, hidden_size)
    helper = LayerHelper("lstmp", name)
    attr = ParamAttr.to_attr(param_attr)
    weight = helper.create_parameter(attr, (proj_size, 4 * hidden_size), dtype)
    # Fluid gives both weights the one param_attr; a named one would make them one parameter, so
    # the projection's takes the name with a ".proj" suffix.
    proj_attr = attr
    if attr.name:
        proj_attr = copy.copy(attr)
        proj_attr.name = f"{attr.name}.proj"
    proj_weight = helper.create_parameter(proj_attr, (hidden_size, proj_size), dtype)
    bias = helper.create_parameter(ParamAttr.to_attr(bias_attr), (1, (7 if use_peepholes else 4) * hidden_size),
                                   dtype, is_bias=True)
    projection, cell = helper.create_tmp(dtype), helper.create_tmp(dtype)
    inputs = {"Input": input, "Weight": weight, "ProjWeight": proj_weight, "Bias": bias}
    if h_0 is not None:
        inputs["H0"] = h_0
    if c_0 is not None:
        inputs["C0"] = c_0
    helper.append_op("lstmp", inputs=inputs, outputs={"Projection": projection, "Cell": cell},
                     attrs={"use_peepholes": bool(use_peepholes), "is_reverse": bool(is_reverse),
                            "gate_activation": gate_activation, "cell_activation": cell_activation,
                            "candidate_activation": candidate_activation, "proj_activation": proj_activation,
                            "cell_clip": float(cell_clip or 0.0), "proj_clip": float(proj_clip or 0.0)})
    return projection, cell


def dynamic_gru(input: Variable, size: int, param_attr=None, bias_attr=None, is_reverse: bool = False,
                gate_activation: str = "sigmoid", candidate_activation: str = "tanh",
                h_0: Variable | None = None, origin_mode: bool = False) -> Variable:
    """A GRU over every sequence of ``input`` (Paddle's ``gru`` op); returns the hidden [-1, size].

    ``input`` is a lod_level-1 tensor [-1, 3·size] already projected (an ``fc`` of 3·size
    columns); ``size`` is the hidden size D, as in Fluid. The weight is [D, 3·D], read as Paddle
    lays it out in memory: a [D, 2·D] block for the update and reset gates, then a [D, D] block
    for the candidate; the bias is [1, 3·D] (``bias_attr=False``: none). ``h_0``
    ([num_sequences, D]) starts each sequence. By default h = (1-u)·h_prev + u·c;
    ``origin_mode`` gives u·h_prev + (1-u)·c.
    """
    if not isinstance(size, int) or size <= 0:
        raise ValueError(f"dynamic_gru: size must be the hidden size (a positive int), got {size!r}")
    _check_activation("dynamic_gru", "gate_activation", gate_activation)
    _check_activation("dynamic_gru", "candidate_activation", candidate_activation)
    _check_sequences("dynamic_gru", input, 3 * size, "3 * size columns, already projected")
    _check_state("dynamic_gru", "h_0", h_0, size)
    helper = LayerHelper("gru")
    dtype = input.dtype
    weight = helper.create_parameter(ParamAttr.to_attr(param_attr), (size, 3 * size), dtype)
    battr = ParamAttr.to_attr(bias_attr)
    bias = None if battr is None else helper.create_parameter(battr, (1, 3 * size), dtype, is_bias=True)
    hidden = helper.create_tmp(dtype)
    intermediates = {slot: helper.create_tmp(dtype, stop_gradient=True)
                     for slot in ("BatchGate", "BatchResetHiddenPrev", "BatchHidden")}
    helper.append_op("gru", inputs={"Input": input, "H0": [] if h_0 is None else h_0, "Weight": weight,
                                    "Bias": [] if bias is None else bias},
                     outputs={"Hidden": hidden, **intermediates},
                     attrs={"is_reverse": bool(is_reverse), "gate_activation": gate_activation,
                            "activation": candidate_activation, "origin_mode": bool(origin_mode)})
    return hidden


def gru_unit(input: Variable, hidden: Variable, size: int, param_attr=None, bias_attr=None,
             activation: str = "tanh", gate_activation: str = "sigmoid",
             origin_mode: bool = False) -> tuple[Variable, Variable, Variable]:
    """One GRU step (Paddle's ``gru_unit`` op); returns (new hidden, r·h_prev, gates).

    ``input`` [N, size] is the projected step input and ``hidden`` [N, size / 3] the previous
    state; ``size`` is **3·D**, as in Fluid. The gates [N, 3·D] are the activated (u, r, c).
    Unlike Fluid 1.x's layer, which always wrote tanh/sigmoid into the op, ``activation`` and
    ``gate_activation`` are honoured.
    """
    if not isinstance(size, int) or size <= 0 or size % 3:
        raise ValueError(f"gru_unit: size must be 3 * hidden size (a positive multiple of 3), got {size!r}")
    for arg, value in (("activation", activation), ("gate_activation", gate_activation)):
        _check_activation("gru_unit", arg, value)
    hidden_size = size // 3
    if input.ndim != 2 or input.shape[1] not in (-1, size):
        raise ShapeError(f"gru_unit: input {input.name!r} must be [N, {size}], got {input.shape}")
    _check_state("gru_unit", "hidden", hidden, hidden_size)
    helper = LayerHelper("gru_unit")
    dtype = input.dtype
    weight = helper.create_parameter(ParamAttr.to_attr(param_attr), (hidden_size, size), dtype)
    battr = ParamAttr.to_attr(bias_attr)
    inputs = {"Input": input, "HiddenPrev": hidden, "Weight": weight, "Bias": []}
    if battr is not None:
        inputs["Bias"] = helper.create_parameter(battr, (1, size), dtype, is_bias=True)
    gate = helper.create_tmp(dtype, stop_gradient=True)
    reset_hidden_prev = helper.create_tmp(dtype, stop_gradient=True)
    updated = helper.create_tmp(dtype)
    helper.append_op("gru_unit", inputs=inputs,
                     outputs={"Gate": gate, "ResetHiddenPrev": reset_hidden_prev, "Hidden": updated},
                     attrs={"activation": _GRU_UNIT_ACTIVATIONS[activation],
                            "gate_activation": _GRU_UNIT_ACTIVATIONS[gate_activation],
                            "origin_mode": bool(origin_mode)})
    return updated, reset_hidden_prev, gate


def lstm_unit(x_t: Variable, hidden_t_prev: Variable, cell_t_prev: Variable, forget_bias: float = 0.0,
              param_attr=None, bias_attr=None, name: str | None = None) -> tuple[Variable, Variable]:
    """One LSTM step, as Fluid 1.x built it; returns (hidden, cell).

    Emits ``concat([x_t, hidden_t_prev])``, an ``fc`` of 4·D columns (gate columns i, f, o, g;
    ``param_attr``/``bias_attr`` are its) and the ``lstm_unit`` op:
    c = σ(f + forget_bias)·c_prev + σ(i)·tanh(g), h = σ(o)·tanh(c). ``hidden_t_prev`` and
    ``cell_t_prev`` are [N, D], ``x_t`` [N, M].
    """
    for arg, v in (("x_t", x_t), ("hidden_t_prev", hidden_t_prev), ("cell_t_prev", cell_t_prev)):
        if v.ndim != 2:
            raise ShapeError(f"lstm_unit: {arg} must be rank 2, got shape {v.shape}")
    batch = {v.shape[0] for v in (x_t, hidden_t_prev, cell_t_prev)} - {-1}
    if len(batch) > 1:
        raise ShapeError("lstm_unit: the first dims of x_t, hidden_t_prev and cell_t_prev must be the same, got "
                         f"{x_t.shape}, {hidden_t_prev.shape}, {cell_t_prev.shape}")
    if hidden_t_prev.shape[1] != cell_t_prev.shape[1]:
        raise ShapeError(f"lstm_unit: hidden_t_prev {hidden_t_prev.shape} and cell_t_prev {cell_t_prev.shape} "
                         "must have the same second dim")
    helper = LayerHelper("lstm_unit", name)
    size = cell_t_prev.shape[1]
    projected = fc(concat([x_t, hidden_t_prev], axis=1), 4 * size, param_attr=param_attr,
                   bias_attr=ParamAttr() if bias_attr is None else bias_attr)
    c, h = helper.create_tmp(x_t.dtype), helper.create_tmp(x_t.dtype)
    helper.append_op("lstm_unit", inputs={"X": projected, "C_prev": cell_t_prev}, outputs={"C": c, "H": h},
                     attrs={"forget_bias": float(forget_bias)})
    return h, c
