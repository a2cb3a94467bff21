"""Layers that emit the fused ``rnn`` op: what ``paddle.nn.LSTM`` / ``GRU`` / ``SimpleRNN`` save in
static programs, so a fluidjax program holds the same op and Paddle runs it.

``lstm`` keeps Fluid 1.x's ``layers.lstm`` signature (the cuDNN LSTM); ``gru`` and
``simple_rnn`` are the same helper for the other modes. All take a time-major input
[seq_len, batch, input_size] and return the output [seq_len, batch, D·hidden] (D = 2 when
``is_bidirec``: the forward direction's features, then the backward's) and the final states
[num_layers·D, batch, hidden] (indexed layer·D + direction).

Parameters are those of ``paddle.nn.LSTM``: per layer and direction ``W_ih`` [G·H, in],
``W_hh`` [G·H, H], ``b_ih`` and ``b_hh`` [G·H], initialised uniformly in ±1/√hidden_size, handed
to the op as Paddle orders them (all weights, then all biases). Gate layouts and
``sequence_length`` are explained in ``lowering/ops/rnn.py``.

>>> x = data("x", shape=[20, -1, 16], append_batch_size=False)        # doctest: +SKIP
>>> h0 = fill_constant_batch_size_like(x, [4, -1, 32], "float32", 0.0, 1, 1)   # doctest: +SKIP
>>> out, last_h, last_c = lstm(x, h0, h0, 20, 32, num_layers=2, is_bidirec=True)   # doctest: +SKIP
"""

from __future__ import annotations

import math

from ..ir.errors import ShapeError
from ..ir.variable import Variable
from .initializer import Initializer, Uniform
from .layer_helper import LayerHelper
from .param_attr import ParamAttr
from .tensor_layers import fill_constant_batch_size_like

__all__ = ["lstm", "gru", "simple_rnn"]

_GATES = {"LSTM": 4, "GRU": 3, "RNN_TANH": 1, "RNN_RELU": 1}


def _initial_state(layer: str, arg: str, state: Variable | None, input: Variable, rows: int,
                   hidden_size: int) -> Variable:
    """``state`` checked, or zeros [rows, batch, hidden] shaped after ``input``'s batch."""
    if state is None:
        return fill_constant_batch_size_like(input, [rows, -1, hidden_size], input.dtype, 0.0,
                                             input_dim_idx=1, output_dim_idx=1)
    if state.ndim != 3 or state.shape[0] not in (-1, rows) or state.shape[2] not in (-1, hidden_size):
        raise ShapeError(f"{layer}: {arg} must be [num_layers * directions, batch, hidden_size] = "
                         f"[{rows}, -1, {hidden_size}], got {state.shape}")
    return state


def _fused_rnn(layer: str, mode: str, input: Variable, states: list, hidden_size: int, num_layers: int,
               dropout_prob: float, is_bidirec: bool, is_test: bool, name: str | None,
               default_initializer: Initializer | None, seed: int,
               sequence_length: Variable | None) -> tuple[Variable, list[Variable]]:
    if not isinstance(input, Variable) or input.ndim != 3:
        raise ShapeError(f"{layer}: input must be a 3-D variable [seq_len, batch, input_size] (time-major), "
                         f"got {getattr(input, 'shape', input)!r}")
    if input.shape[2] < 0:
        raise ShapeError(f"{layer}: input's last dim (input_size) must be known, got {input.shape}")
    for arg, value in (("hidden_size", hidden_size), ("num_layers", num_layers)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{layer}: {arg} must be a positive int, got {value!r}")
    if not 0.0 <= float(dropout_prob) <= 1.0:
        raise ValueError(f"{layer}: dropout_prob must lie in [0, 1], got {dropout_prob!r}")
    if sequence_length is not None and (sequence_length.ndim != 1 or sequence_length.dtype != "int32"):
        raise ShapeError(f"{layer}: sequence_length must be a 1-D int32 variable [batch], got "
                         f"{sequence_length.shape} {sequence_length.dtype}")
    dirs = 2 if is_bidirec else 1
    gates = _GATES[mode]
    input_size = input.shape[2]
    helper = LayerHelper(layer, name)
    states = [_initial_state(layer, arg, s, input, num_layers * dirs, hidden_size) for arg, s in states]
    bound = 1.0 / math.sqrt(hidden_size)
    init = default_initializer or Uniform(-bound, bound)
    weights, biases = [], []
    for layer_idx in range(num_layers):
        width = input_size if layer_idx == 0 else dirs * hidden_size
        for _ in range(dirs):
            for shape, into, is_bias in (((gates * hidden_size, width), weights, False),
                                         ((gates * hidden_size, hidden_size), weights, False),
                                         ((gates * hidden_size,), biases, True),
                                         ((gates * hidden_size,), biases, True)):
                into.append(helper.create_parameter(ParamAttr(), shape, input.dtype, is_bias=is_bias,
                                                    default_initializer=init))
    out = helper.create_tmp(input.dtype)
    finals = [helper.create_tmp(input.dtype) for _ in states]
    reserve = helper.create_tmp("uint8", stop_gradient=True)
    dropout_state = helper.create_tmp("uint8", stop_gradient=True)
    helper.append_op("rnn",
                     inputs={"Input": input, "PreState": states, "WeightList": weights + biases,
                             # An absent SequenceLength is an empty slot, as Paddle writes it.
                             "SequenceLength": [] if sequence_length is None else sequence_length},
                     outputs={"Out": out, "State": finals, "Reserve": reserve, "DropoutState": dropout_state},
                     attrs={"mode": mode, "hidden_size": hidden_size, "input_size": input_size,
                            "num_layers": num_layers, "is_bidirec": bool(is_bidirec),
                            "dropout_prob": float(dropout_prob), "is_test": bool(is_test),
                            # Fluid's seed -1 means "not fixed": the op's 0.
                            "seed": max(int(seed), 0)})
    return out, finals


def lstm(input: Variable, init_h: Variable | None, init_c: Variable | None, max_len: int | None,
         hidden_size: int, num_layers: int = 1, dropout_prob: float = 0.0, is_bidirec: bool = False,
         is_test: bool = False, name: str | None = None, default_initializer: Initializer | None = None,
         seed: int = -1, sequence_length: Variable | None = None) -> tuple[Variable, Variable, Variable]:
    """A multi-layer (bidirectional) LSTM, Fluid 1.x's ``layers.lstm``; returns (out, last_h, last_c).

    ``input`` is time-major [seq_len, batch, input_size]; ``init_h`` / ``init_c`` are
    [num_layers·D, batch, hidden_size] (None: zeros); ``max_len`` is the sequence length, kept for
    Fluid's signature (checked against ``input``'s first dim when both are known). Between layers,
    unless ``is_test``, ``dropout_prob`` drops outputs (``seed`` > 0 fixes the mask).
    ``sequence_length`` (int32 [batch]) stops each row's recurrence at its length: its outputs past
    it are zeros and last_h / last_c are taken at its last real step. Emits Paddle's ``rnn`` op
    (mode LSTM) with ``paddle.nn.LSTM``'s parameters.
    """
    if max_len is not None and input.ndim and input.shape[0] >= 0 and max_len != input.shape[0]:
        raise ShapeError(f"lstm: max_len {max_len} != the input's sequence length {input.shape[0]} "
                         f"(input is [seq_len, batch, input_size] = {input.shape})")
    out, (last_h, last_c) = _fused_rnn("lstm", "LSTM", input, [("init_h", init_h), ("init_c", init_c)],
                                       hidden_size, num_layers, dropout_prob, is_bidirec, is_test, name,
                                       default_initializer, seed, sequence_length)
    return out, last_h, last_c


def gru(input: Variable, init_h: Variable | None, hidden_size: int, num_layers: int = 1,
        dropout_prob: float = 0.0, is_bidirec: bool = False, is_test: bool = False, name: str | None = None,
        default_initializer: Initializer | None = None, seed: int = -1,
        sequence_length: Variable | None = None) -> tuple[Variable, Variable]:
    """A multi-layer (bidirectional) GRU as ``paddle.nn.GRU`` saves it (the ``rnn`` op, mode GRU);
    returns (out, last_h). Arguments as in :func:`lstm`, without the cell state.

    Gates (r, z, c̃), the reset applied after the hidden projection:
    c̃ = tanh(x·W_icᵀ + b_ic + r·(h·W_hcᵀ + b_hc)), h' = z·h + (1 - z)·c̃.
    """
    out, (last_h,) = _fused_rnn("gru", "GRU", input, [("init_h", init_h)], hidden_size, num_layers,
                                dropout_prob, is_bidirec, is_test, name, default_initializer, seed,
                                sequence_length)
    return out, last_h


def simple_rnn(input: Variable, init_h: Variable | None, hidden_size: int, num_layers: int = 1,
               activation: str = "tanh", dropout_prob: float = 0.0, is_bidirec: bool = False,
               is_test: bool = False, name: str | None = None, default_initializer: Initializer | None = None,
               seed: int = -1, sequence_length: Variable | None = None) -> tuple[Variable, Variable]:
    """A multi-layer (bidirectional) Elman RNN, h' = act(x·W_ihᵀ + b_ih + h·W_hhᵀ + b_hh), as
    ``paddle.nn.SimpleRNN`` saves it (``rnn`` op, mode RNN_TANH or RNN_RELU); returns (out, last_h)."""
    if activation not in ("tanh", "relu"):
        raise ValueError(f"simple_rnn: activation must be 'tanh' or 'relu', got {activation!r}")
    out, (last_h,) = _fused_rnn("simple_rnn", "RNN_" + activation.upper(), input, [("init_h", init_h)],
                                hidden_size, num_layers, dropout_prob, is_bidirec, is_test, name,
                                default_initializer, seed, sequence_length)
    return out, last_h
