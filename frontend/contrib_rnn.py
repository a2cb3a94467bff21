"""Fluid 1.6–1.8's ``fluid.contrib.layers`` recurrent units built from primitive layers:
``BasicLSTMUnit``, ``basic_lstm``, ``BasicGRUUnit``, ``basic_gru``.

The semantics are Fluid 1.8's (``contrib/layers/rnn_impl.py``); the code is fluidjax's own, made
of ordinary layers (``concat``, ``matmul``, ``split``, activations, a :class:`StaticRNN` over time),
so the programs are plain Paddle programs.

LSTM step (weights ``[input + hidden, 4 * hidden]``, gates split as i, f, j, o)::

    c_t = c_{t-1} * sigmoid(f + forget_bias) + sigmoid(i) * tanh(j);   h_t = tanh(c_t) * sigmoid(o)

GRU step (gate weights ``[input + hidden, 2 * hidden]`` split as r, u; candidate weights
``[input + hidden, hidden]``)::

    r, u = act_gate([x, h] W_g + b_g);  m = act([x, r * h] W_c + b_c);  h_t = u * h + (1 - u) * m

``basic_lstm`` / ``basic_gru`` stack ``num_layers`` units (dropout between layers, not between
steps), optionally bidirectional; ``sequence_length`` masks the padded steps (a state stops
changing after the sequence ends). Returns as Fluid: ``rnn_out`` ([batch, time, hidden *
directions] when ``batch_first``) and the last states ``[num_layers * directions, batch, hidden]``.
Parameters are named as Fluid's dygraph layers named them (``<name>_layers_<i>/BasicLSTMUnit_0.w_0``),
or ``param_attr.name`` + ``_fw_w_<i>`` / ``_bw_w_<i>`` when ``param_attr`` names them.
"""

from __future__ import annotations

import copy

from ..ir import unique_name
from . import layers
from .layer_helper import LayerHelper
from .param_attr import ParamAttr
from .rnn_layers import StaticRNN

__all__ = ["BasicLSTMUnit", "basic_lstm", "BasicGRUUnit", "basic_gru"]


def _named(attr, suffix: str):
    """A copy of ``attr`` with ``suffix`` appended to its name (when it has one)."""
    attr = ParamAttr.to_attr(attr) if attr is not None and attr is not False else attr
    if isinstance(attr, ParamAttr) and attr.name is not None:
        attr = copy.deepcopy(attr)
        attr.name += suffix
    return attr


class _Unit:
    """Parameters made at the first call (the input size is known then), as Fluid's dygraph Layer."""

    def __init__(self, name_scope: str, hidden_size: int, param_attr, bias_attr, gate_activation, activation,
                 dtype: str) -> None:
        self._full_name = unique_name.generate(f"{name_scope}/{type(self).__name__}")
        self._helper = LayerHelper(type(self).__name__, name=self._full_name)
        self._hidden_size = int(hidden_size)
        self._param_attr, self._bias_attr = param_attr, bias_attr
        self._gate_activation = gate_activation or layers.sigmoid
        self._activation = activation or layers.tanh
        self._dtype = dtype
        self._built = False

    def full_name(self) -> str:
        """The unit's unique name (its parameters' prefix)."""
        return self._full_name

    def _param(self, attr, shape, is_bias: bool = False):
        return self._helper.create_parameter(ParamAttr.to_attr(attr) if not isinstance(attr, ParamAttr) else attr,
                                             shape, self._dtype, is_bias=is_bias)

    def _input_size(self, input) -> int:
        size = int(input.shape[-1])
        if size <= 0:
            raise ValueError(f"{type(self).__name__}: the input's last dim must be known, got {input.shape}")
        return size


class BasicLSTMUnit(_Unit):
    """One LSTM step from primitive layers (Fluid 1.8's ``fluid.contrib.layers.BasicLSTMUnit``):
    ``unit(input, pre_hidden, pre_cell) -> (new_hidden, new_cell)``; see the module docstring."""

    def __init__(self, name_scope: str, hidden_size: int, param_attr=None, bias_attr=None, gate_activation=None,
                 activation=None, forget_bias: float = 1.0, dtype: str = "float32") -> None:
        super().__init__(name_scope, hidden_size, param_attr, bias_attr, gate_activation, activation, dtype)
        self._forget_bias = float(forget_bias)

    def __call__(self, input, pre_hidden, pre_cell):
        h = self._hidden_size
        if not self._built:
            n = self._input_size(input)
            self._weight = self._param(self._param_attr, [n + h, 4 * h])
            self._bias = self._param(self._bias_attr, [4 * h], is_bias=True)
            self._built = True
        gates = layers.matmul(layers.concat([input, pre_hidden], 1), self._weight)
        gates = layers.elementwise_add(gates, self._bias)
        i, f, j, o = layers.split(gates, num_or_sections=4, dim=-1)
        gate, act = self._gate_activation, self._activation
        new_cell = layers.elementwise_add(
            layers.elementwise_mul(pre_cell, gate(layers.scale(f, bias=self._forget_bias))),
            layers.elementwise_mul(gate(i), act(j)))
        new_hidden = layers.elementwise_mul(act(new_cell), gate(o))
        return new_hidden, new_cell

    forward = __call__


class BasicGRUUnit(_Unit):
    """One GRU step from primitive layers (Fluid 1.8's ``fluid.contrib.layers.BasicGRUUnit``):
    ``unit(input, pre_hidden) -> new_hidden``; see the module docstring."""

    def __init__(self, name_scope: str, hidden_size: int, param_attr=None, bias_attr=None, gate_activation=None,
                 activation=None, dtype: str = "float32") -> None:
        super().__init__(name_scope, hidden_size, param_attr, bias_attr, gate_activation, activation, dtype)

    def __call__(self, input, pre_hidden):
        h = self._hidden_size
        if not self._built:
            n = self._input_size(input)
            self._gate_weight = self._param(_named(self._param_attr, "_gate"), [n + h, 2 * h])
            self._candidate_weight = self._param(_named(self._param_attr, "_candidate"), [n + h, h])
            self._gate_bias = self._param(_named(self._bias_attr, "_gate"), [2 * h], is_bias=True)
            self._candidate_bias = self._param(_named(self._bias_attr, "_candidate"), [h], is_bias=True)
            self._built = True
        gates = layers.matmul(layers.concat([input, pre_hidden], 1), self._gate_weight)
        gates = self._gate_activation(layers.elementwise_add(gates, self._gate_bias))
        r, u = layers.split(gates, num_or_sections=2, dim=1)
        candidate = layers.matmul(layers.concat([input, layers.elementwise_mul(r, pre_hidden)], 1),
                                  self._candidate_weight)
        c = self._activation(layers.elementwise_add(candidate, self._candidate_bias))
        # u * h + (1 - u) * c
        return layers.elementwise_add(layers.elementwise_mul(u, pre_hidden),
                                      layers.elementwise_mul(layers.scale(u, scale=-1.0, bias=1.0), c))

    forward = __call__


def _state(init, i: int, direction: int, hidden_size: int):
    """``init[i, direction]`` of a [num_layers, directions, batch, hidden] state: [batch, hidden]."""
    part = layers.slice(init, axes=[0, 1], starts=[i, direction], ends=[i + 1, direction + 1])
    return layers.reshape(part, [-1, hidden_size])


def _masked(new, pre, step_mask):
    """``new`` where the step is real (mask 1), ``pre`` where it is padding (mask 0)."""
    return layers.elementwise_sub(layers.elementwise_mul(new, step_mask, axis=0),
                                  layers.elementwise_mul(pre, layers.scale(step_mask, bias=-1.0), axis=0))


def _last(seq, num_layers: int, hidden_size: int):
    """The last steps of each layer's [T, B, H] outputs, as [num_layers, B, H]."""
    lasts = [layers.slice(s, axes=[0], starts=[-1], ends=[2 ** 31 - 1]) for s in seq]
    return layers.reshape(layers.concat(lasts, axis=0), [num_layers, -1, hidden_size])


def _units(cls, name: str, num_layers: int, hidden_size: int, param_attr, bias_attr, tag: str, **kw):
    prefix = "_layers_" if tag == "fw" else "_reverse_layers_"
    return [cls(f"{name}{prefix}{i}", hidden_size, _named(param_attr, f"_{tag}_w_{i}"),
                _named(bias_attr, f"_{tag}_b_{i}"), **kw) for i in range(num_layers)]


def _run(units, input, inits, mask, num_layers: int, hidden_size: int, direction: int, dropout_prob, upscale: bool):
    """One direction over time-major ``input``: (last layer's outputs [T, B, H], per-state lasts)."""
    n_states = len(inits)
    # each layer's initial states, sliced in the enclosing block (the recurrent op's initial_states)
    starts = [[_state(init, i, direction, hidden_size) if init is not None else None for init in inits]
              for i in range(num_layers)]
    rnn = StaticRNN()
    with rnn.step():
        step_input = rnn.step_input(input)
        step_mask = rnn.step_input(mask) if mask is not None else None
        for i in range(num_layers):
            pres = [rnn.memory(init=start) if start is not None
                    else rnn.memory(batch_ref=input, shape=[-1, hidden_size]) for start in starts[i]]
            news = units[i](step_input, *pres)
            news = list(news) if isinstance(news, (list, tuple)) else [news]
            if step_mask is not None:
                news = [_masked(n, p, step_mask) for n, p in zip(news, pres)]
            for p, n in zip(pres, news):
                rnn.update_memory(p, n)
                rnn.step_output(n)
            step_input = news[0]
            if dropout_prob is not None and dropout_prob > 0.0:
                step_input = layers.dropout(step_input, dropout_prob=dropout_prob,
                                            dropout_implementation="upscale_in_train" if upscale
                                            else "downgrade_in_infer")
        rnn.step_output(step_input)
    outs = rnn()
    lasts = [_last([outs[i * n_states + k] for i in range(num_layers)], num_layers, hidden_size)
             for k in range(n_states)]
    return outs[-1], lasts


def _basic_rnn(cls, input, inits, hidden_size, num_layers, sequence_length, dropout_prob, bidirectional,
               batch_first, param_attr, bias_attr, name, upscale, **unit_kw):
    directions = 2 if bidirectional else 1
    fw = _units(cls, name, num_layers, hidden_size, param_attr, bias_attr, "fw", **unit_kw)
    bw = _units(cls, name, num_layers, hidden_size, param_attr, bias_attr, "bw", **unit_kw) if bidirectional else []
    if batch_first:
        input = layers.transpose(input, [1, 0, 2])
    mask = None
    if sequence_length is not None:
        mask = layers.sequence_mask(sequence_length, maxlen=layers.shape(input)[0], dtype="float32")
        mask = layers.transpose(mask, [1, 0])
    inits = [layers.reshape(s, [num_layers, directions, -1, hidden_size]) if s is not None else None for s in inits]
    out, lasts = _run(fw, input, inits, mask, num_layers, hidden_size, 0, dropout_prob, upscale)
    if bidirectional:
        bw_out, bw_lasts = _run(bw, layers.reverse(input, axis=[0]), inits,
                                layers.reverse(mask, axis=[0]) if mask is not None else None,
                                num_layers, hidden_size, 1, dropout_prob, upscale)
        out = layers.concat([out, layers.reverse(bw_out, axis=[0])], axis=2)
        lasts = [layers.reshape(layers.concat([a, b], axis=1), [num_layers * directions, -1, hidden_size])
                 for a, b in zip(lasts, bw_lasts)]
    if batch_first:
        out = layers.transpose(out, [1, 0, 2])
    return out, lasts


def basic_lstm(input, init_hidden, init_cell, hidden_size: int, num_layers: int = 1, sequence_length=None,
               dropout_prob: float = 0.0, bidirectional: bool = False, batch_first: bool = True, param_attr=None,
               bias_attr=None, gate_activation=None, activation=None, forget_bias: float = 1.0,
               dtype: str = "float32", name: str = "basic_lstm"):
    """A multi-layer (optionally bidirectional) LSTM of :class:`BasicLSTMUnit` s over time (Fluid
    1.8's ``fluid.contrib.layers.basic_lstm``): ``(rnn_out, last_hidden, last_cell)``. ``init_hidden``
    / ``init_cell`` are ``[num_layers * directions, batch, hidden]`` or None (zeros)."""
    out, (last_h, last_c) = _basic_rnn(
        BasicLSTMUnit, input, [init_hidden, init_cell] if init_hidden is not None else [None, None], hidden_size,
        num_layers, sequence_length, dropout_prob, bidirectional, batch_first, param_attr, bias_attr, name, True,
        gate_activation=gate_activation, activation=activation, forget_bias=forget_bias, dtype=dtype)
    return out, last_h, last_c


def basic_gru(input, init_hidden, hidden_size: int, num_layers: int = 1, sequence_length=None,
              dropout_prob: float = 0.0, bidirectional: bool = False, batch_first: bool = True, param_attr=None,
              bias_attr=None, gate_activation=None, activation=None, dtype: str = "float32", name: str = "basic_gru"):
    """A multi-layer (optionally bidirectional) GRU of :class:`BasicGRUUnit` s over time (Fluid
    1.8's ``fluid.contrib.layers.basic_gru``): ``(rnn_out, last_hidden)``."""
    out, (last_h,) = _basic_rnn(
        BasicGRUUnit, input, [init_hidden], hidden_size, num_layers, sequence_length, dropout_prob, bidirectional,
        batch_first, param_attr, bias_attr, name, False, gate_activation=gate_activation, activation=activation,
        dtype=dtype)
    return out, last_h
