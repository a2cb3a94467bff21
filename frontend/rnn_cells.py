"""Fluid 1.6–1.8's cell API: ``RNNCell`` (the base class), ``GRUCell``, ``LSTMCell`` and
``rnn(cell, inputs, ...)``, which runs a cell over time.

A cell is an object whose ``call(inputs, states, **kwargs)`` builds one time step and returns
``(outputs, new_states)``; states may be a nested structure (lists/tuples), e.g. LSTMCell's
``[h, c]``. ``rnn`` runs it over the time dim of ``inputs`` as Fluid 1.8 does: a ``StaticRNN``
(Paddle's ``recurrent`` op, one ``lax.scan``) whose step reads the inputs at step t and the
states, calls the cell, and collects the outputs and the new states; the final states are the
last collected ones. So gradients reach the inputs, the initial states, the cell's parameters
and every outer variable the cell reads (``**kwargs`` such as an encoder's output).

``sequence_length`` ([batch] ints) masks as Fluid does: at steps t >= length a row's states keep
their value (``new·m + old·(1 - m)`` with the step's mask m), so the final states are those of
its last real step. Outputs are **not** masked: past a row's end they are whatever the cell
computes from the held state and the padded input (Fluid 1.8's rule; mask them yourself where it
matters, as the book's loss does with ``sequence_mask``).

The cells build the ops Fluid's basic units build (``fluid.contrib.layers.BasicGRUUnit`` /
``BasicLSTMUnit``): ``concat([x, h])``, ``matmul`` by one weight, ``elementwise_add`` of a bias,
the activations, ``split`` into gates — GRU: gates (r, u) from a [in + H, 2H] weight, then the
candidate c = act(matmul([x, r·h], W_c) + b_c), h' = u·h + (1 - u)·c; LSTM: gates (i, j, f, o)
from a [in + H, 4H] weight, c' = c·σ(f + forget_bias) + σ(i)·act(j), h' = act(c')·σ(o).
Parameters are created at the first call (the input size is known then) and named like Fluid's
(``GRUCell/BasicGRUUnit_0.w_0`` ...), Xavier weights and zero biases by default.

>>> cell = GRUCell(hidden_size=32)                                     # doctest: +SKIP
>>> outputs, last = rnn(cell, x, sequence_length=lengths)             # x [B, T, D] -> [B, T, 32], [B, 32]
"""

from __future__ import annotations

import copy
from typing import Any, Callable

from ..ir import dtypes, unique_name
from ..ir.errors import ShapeError
from ..ir.variable import Variable
from . import rnn_layers
from .layer_helper import LayerHelper
from .math_layers import elementwise_add, elementwise_mul, scale, sigmoid, tanh
from .nn_layers import matmul
from .param_attr import ParamAttr
from .rnn_layers import StaticRNN
from .sequence_layers import sequence_mask
from .tensor_layers import concat, fill_constant, fill_constant_batch_size_like, shape, slice, split, squeeze, \
    transpose

__all__ = ["RNNCell", "GRUCell", "LSTMCell", "rnn"]


# -- nested structures (lists, tuples, dicts of Variables), as Fluid's layers.utils ------------------
def _is_sequence(x) -> bool:
    return isinstance(x, (list, tuple, dict))


def flatten(structure) -> list:
    """The leaves of a nested structure, in order (dict values by sorted key)."""
    if isinstance(structure, dict):
        return [leaf for key in sorted(structure) for leaf in flatten(structure[key])]
    if isinstance(structure, (list, tuple)):
        return [leaf for item in structure for leaf in flatten(item)]
    return [structure]


def _rebuild(template, items):
    if isinstance(template, dict):
        return {key: _rebuild(template[key], items) for key in sorted(template)}
    if isinstance(template, (list, tuple)):
        values = [_rebuild(item, items) for item in template]
        if hasattr(template, "_fields"):          # a namedtuple
            return type(template)(*values)
        return type(template)(values)
    return next(items)


def pack_sequence_as(template, leaves: list):
    """``leaves`` arranged in ``template``'s structure."""
    if len(leaves) != len(flatten(template)):
        raise ValueError(f"cannot pack {len(leaves)} values into a structure of {len(flatten(template))}")
    return _rebuild(template, iter(leaves))


def map_structure(fn: Callable, *structures):
    """``fn`` applied leaf by leaf to structures of the same shape; the result has the first's."""
    first = structures[0]
    for other in structures[1:]:
        assert_same_structure(first, other)
    flat = [flatten(s) for s in structures]
    return pack_sequence_as(first, [fn(*leaves) for leaves in zip(*flat)])


def assert_same_structure(a, b) -> None:
    """A ``ValueError`` unless ``a`` and ``b`` nest alike (lists and tuples count as alike)."""
    if _is_sequence(a) != _is_sequence(b):
        raise ValueError(f"structures differ: {a!r} and {b!r}")
    if isinstance(a, dict):
        if not isinstance(b, dict) or sorted(a) != sorted(b):
            raise ValueError(f"structures differ: {a!r} and {b!r}")
        for key in a:
            assert_same_structure(a[key], b[key])
    elif _is_sequence(a):
        if len(a) != len(b):
            raise ValueError(f"structures differ in length: {len(a)} and {len(b)} items ({a!r}, {b!r})")
        for x, y in zip(a, b):
            assert_same_structure(x, y)


def _is_shape(value) -> bool:
    """A shape (a list/tuple of ints) is a leaf, not a structure of shapes."""
    return isinstance(value, (list, tuple)) and all(isinstance(d, int) and not isinstance(d, bool) for d in value)


def _map_shapes(fn: Callable, shapes):
    if _is_shape(shapes):
        return fn(list(shapes))
    if isinstance(shapes, (list, tuple)):
        return type(shapes)(_map_shapes(fn, s) for s in shapes)
    raise TypeError(f"a state shape must be a list of ints or a (nested) list of them, got {shapes!r}")


# -- the cells --------------------------------------------------------------------------------------
class RNNCell:
    """The base class of cells (Fluid's ``layers.RNNCell``): subclasses implement
    ``call(inputs, states, **kwargs) -> (outputs, new_states)`` and usually ``state_shape``
    (a shape without the batch dim, or a nested structure of them) so that
    :meth:`get_initial_states` can make zero states. Subclasses need not call ``__init__``."""

    def __call__(self, inputs, states, **kwargs):
        return self.call(inputs, states, **kwargs)

    def call(self, inputs, states, **kwargs):
        """Build one time step; return ``(outputs, new_states)``."""
        raise NotImplementedError(f"{type(self).__name__} must implement call(inputs, states, **kwargs)")

    def get_initial_states(self, batch_ref, shape=None, dtype=None, init_value=0, batch_dim_idx=0):
        """States filled with ``init_value``, one per shape of ``shape`` (default
        :attr:`state_shape`), each with the batch size of ``batch_ref`` (its dim
        ``batch_dim_idx``; of a structure, its first leaf) in front. ``dtype`` is one dtype or a
        structure like ``shape`` (default :attr:`state_dtype`, else float32). Emits
        ``fill_constant_batch_size_like`` per state, as Fluid does."""
        ref = flatten(batch_ref)[0]
        if not isinstance(ref, Variable):
            raise TypeError(f"get_initial_states: batch_ref must be a Variable (or a structure of them), got {ref!r}")
        shapes = self.state_shape if shape is None else shape
        shapes = _map_shapes(lambda s: s if s and s[0] == -1 else [-1] + s, shapes)
        if dtype is None:
            try:
                dtype = self.state_dtype
            except NotImplementedError:
                dtype = "float32"
        leaves = _shape_leaves(shapes)
        dtype_leaves = [dtype] * len(leaves) if not isinstance(dtype, (list, tuple)) else flatten(dtype)
        if len(dtype_leaves) != len(leaves):
            raise ValueError(f"get_initial_states: {len(dtype_leaves)} dtypes for {len(leaves)} state shapes")
        states = [fill_constant_batch_size_like(ref, s, dt, init_value, input_dim_idx=batch_dim_idx, output_dim_idx=0)
                  for s, dt in zip(leaves, dtype_leaves)]
        return _pack_shapes(shapes, iter(states))

    @property
    def state_shape(self):
        """The shape of the states without the batch dim (a list of ints, or a nested structure)."""
        raise NotImplementedError(f"{type(self).__name__} does not define state_shape; give get_initial_states "
                                  "a shape, or pass initial_states")

    @property
    def state_dtype(self):
        """The dtype of the states (one, or a structure like :attr:`state_shape`)."""
        raise NotImplementedError


def _shape_leaves(shapes) -> list:
    if _is_shape(shapes):
        return [list(shapes)]
    return [leaf for s in shapes for leaf in _shape_leaves(s)]


def _pack_shapes(shapes, states):
    if _is_shape(shapes):
        return next(states)
    return type(shapes)(_pack_shapes(s, states) for s in shapes)


def _input_size(cell: str, x: Variable) -> int:
    if not isinstance(x, Variable) or x.ndim != 2:
        raise ShapeError(f"{cell}: the step input must be a 2-D Variable [batch, input_size], got "
                         f"{getattr(x, 'shape', x)!r}")
    if x.shape[-1] <= 0:
        raise ShapeError(f"{cell}: the step input's last dim (input_size) must be known, got {x.shape}")
    return x.shape[-1]


def _check_state(cell: str, what: str, state, hidden_size: int) -> None:
    if not isinstance(state, Variable) or state.ndim != 2 or state.shape[1] not in (-1, hidden_size):
        raise ShapeError(f"{cell}: {what} must be a Variable [batch, {hidden_size}], got "
                         f"{getattr(state, 'shape', state)!r}")


def _named(attr: ParamAttr | None, suffix: str) -> ParamAttr | None:
    """A named ParamAttr gives each of a unit's parameters its own name (Fluid: name + suffix)."""
    if attr is None or attr.name is None:
        return attr
    attr = copy.copy(attr)
    attr.name = attr.name + suffix
    return attr


def _basic_unit_setup(cell, kind: str, hidden_size, param_attr, bias_attr, gate_activation, activation, dtype,
                      name) -> None:
    """What Fluid's GRUCell and LSTMCell take alike: the size, the attrs, the activations (sigmoid
    gates and a tanh by default), the dtype and the name; the weights are made on first use."""
    if not isinstance(hidden_size, int) or isinstance(hidden_size, bool) or hidden_size <= 0:
        raise ValueError(f"{kind}: hidden_size must be a positive int, got {hidden_size!r}")
    cell.hidden_size = hidden_size
    cell._param_attr = ParamAttr.to_attr(param_attr)
    cell._bias_attr = ParamAttr.to_attr(bias_attr)
    cell._gate_activation = gate_activation or sigmoid
    cell._activation = activation or tanh
    cell._dtype = dtypes.normalize(dtype)
    cell._name = name
    cell._weights = None


class GRUCell(RNNCell):
    """A GRU cell (Fluid's ``layers.GRUCell``, its ``BasicGRUUnit``):

    u, r = act_g(matmul([x, h], W_g) + b_g) split in two (r first), c = act_c(matmul([x, r·h],
    W_c) + b_c), h' = u·h + (1 - u)·c. ``call(inputs, states)`` returns ``(h', h')``.
    ``gate_activation`` / ``activation`` are layer functions (default sigmoid / tanh).
    """

    def __init__(self, hidden_size: int, param_attr=None, bias_attr=None, gate_activation=None, activation=None,
                 dtype: str = "float32", name: str = "GRUCell") -> None:
        _basic_unit_setup(self, "GRUCell", hidden_size, param_attr, bias_attr, gate_activation, activation, dtype,
                          name)
        self._helper: LayerHelper | None = None

    def _build(self, input_size: int) -> None:
        H = self.hidden_size
        self._helper = LayerHelper("gru_cell", unique_name.generate(f"{self._name}/BasicGRUUnit"))
        make = self._helper.create_parameter
        gate_w = make(_named(self._param_attr, "_gate"), (input_size + H, 2 * H), self._dtype)
        cand_w = make(_named(self._param_attr, "_candidate"), (input_size + H, H), self._dtype)
        gate_b = cand_b = None
        if self._bias_attr is not None:
            gate_b = make(_named(self._bias_attr, "_gate"), (2 * H,), self._dtype, is_bias=True)
            cand_b = make(_named(self._bias_attr, "_candidate"), (H,), self._dtype, is_bias=True)
        self._weights = (input_size, gate_w, cand_w, gate_b, cand_b)

    def call(self, inputs, states):
        """One step: ``inputs`` [batch, input_size], ``states`` h [batch, hidden]; returns (h', h')."""
        input_size = _input_size("GRUCell", inputs)
        _check_state("GRUCell", "the state", states, self.hidden_size)
        if self._weights is None:
            self._build(input_size)
        built, gate_w, cand_w, gate_b, cand_b = self._weights
        if input_size != built:
            raise ShapeError(f"GRUCell: its parameters were made for input size {built}, called with {input_size}")
        gates = matmul(concat([inputs, states], axis=1), gate_w)
        if gate_b is not None:
            gates = elementwise_add(gates, gate_b)
        r, u = split(self._gate_activation(gates), num_or_sections=2, dim=1)
        candidate = matmul(concat([inputs, elementwise_mul(r, states)], axis=1), cand_w)
        if cand_b is not None:
            candidate = elementwise_add(candidate, cand_b)
        c = self._activation(candidate)
        new_hidden = elementwise_add(elementwise_mul(u, states), elementwise_mul(scale(u, -1.0, 1.0), c))
        return new_hidden, new_hidden

    @property
    def state_shape(self):
        """``[hidden_size]``."""
        return [self.hidden_size]


class LSTMCell(RNNCell):
    """An LSTM cell (Fluid's ``layers.LSTMCell``, its ``BasicLSTMUnit``):

    i, j, f, o = matmul([x, h], W) + b split in four; c' = c·act_g(f + forget_bias) +
    act_g(i)·act_c(j), h' = act_c(c')·act_g(o). States are ``[h, c]``;
    ``call(inputs, [h, c])`` returns ``(h', [h', c'])``.
    """

    def __init__(self, hidden_size: int, param_attr=None, bias_attr=None, gate_activation=None, activation=None,
                 forget_bias: float = 1.0, dtype: str = "float32", name: str = "LSTMCell") -> None:
        _basic_unit_setup(self, "LSTMCell", hidden_size, param_attr, bias_attr, gate_activation, activation, dtype,
                          name)
        self._forget_bias = float(forget_bias)

    def _build(self, input_size: int) -> None:
        H = self.hidden_size
        helper = LayerHelper("lstm_cell", unique_name.generate(f"{self._name}/BasicLSTMUnit"))
        weight = helper.create_parameter(self._param_attr, (input_size + H, 4 * H), self._dtype)
        bias = None
        if self._bias_attr is not None:
            bias = helper.create_parameter(self._bias_attr, (4 * H,), self._dtype, is_bias=True)
        self._weights = (input_size, weight, bias)

    def call(self, inputs, states):
        """One step: ``inputs`` [batch, input_size], ``states`` [h, c] each [batch, hidden];
        returns (h', [h', c'])."""
        input_size = _input_size("LSTMCell", inputs)
        if not isinstance(states, (list, tuple)) or len(states) != 2:
            raise TypeError(f"LSTMCell: states must be [hidden, cell], got {states!r}")
        pre_hidden, pre_cell = states
        _check_state("LSTMCell", "the hidden state", pre_hidden, self.hidden_size)
        _check_state("LSTMCell", "the cell state", pre_cell, self.hidden_size)
        if self._weights is None:
            self._build(input_size)
        built, weight, bias = self._weights
        if input_size != built:
            raise ShapeError(f"LSTMCell: its parameters were made for input size {built}, called with {input_size}")
        gates = matmul(concat([inputs, pre_hidden], axis=1), weight)
        if bias is not None:
            gates = elementwise_add(gates, bias)
        i, j, f, o = split(gates, num_or_sections=4, dim=-1)
        forget_bias = fill_constant([1], self._dtype, self._forget_bias)
        act_g, act = self._gate_activation, self._activation
        new_cell = elementwise_add(elementwise_mul(pre_cell, act_g(elementwise_add(f, forget_bias))),
                                   elementwise_mul(act_g(i), act(j)))
        new_hidden = elementwise_mul(act(new_cell), act_g(o))
        return new_hidden, [new_hidden, new_cell]

    @property
    def state_shape(self):
        """``[[hidden_size], [hidden_size]]`` (h, c)."""
        return [[self.hidden_size], [self.hidden_size]]


# -- rnn --------------------------------------------------------------------------------------------
def _is_cell(cell) -> bool:
    return isinstance(cell, RNNCell) or (callable(getattr(cell, "call", None)) and callable(cell))


def _batch_time_swapped(x: Variable) -> Variable:
    return transpose(x, [1, 0] + list(range(2, x.ndim)))


def _flip_time(x: Variable) -> Variable:
    # Fluid 1.x's `reverse` op is Paddle 2's `flip` (same meaning; Paddle 2.6 runs only flip).
    return LayerHelper("reverse").simple_op("flip", {"X": x}, {"axis": [0]})


def _last_step(x: Variable) -> Variable:
    return squeeze(slice(x, axes=[0], starts=[-1], ends=[2 ** 31 - 1]), axes=[0])


def _keep_finished(state: Variable, new_state: Variable, step_mask: Variable) -> Variable:
    """new·m + old·(1 - m), row by row (m [batch] is 1 while the row's sequence runs)."""
    return elementwise_add(elementwise_mul(new_state, step_mask, axis=0),
                           elementwise_mul(state, scale(step_mask, -1.0, 1.0), axis=0))


def rnn(cell=None, inputs=None, initial_states=None, sequence_length=None, time_major: bool = False,
        is_reverse: bool = False, **kwargs):
    """Run ``cell`` over time (Fluid 1.8's ``layers.rnn``); returns ``(outputs, final_states)``.

    ``inputs`` is a Variable (or a nested structure of them) [batch, time, ...], or
    [time, batch, ...] with ``time_major``; ``initial_states`` default to
    ``cell.get_initial_states(inputs)``; ``sequence_length`` [batch] (int32/int64) holds each
    row's length (states stop updating past it; outputs are not masked, see the module's
    docstring); ``is_reverse`` runs from the last step to the first (outputs keep the input's
    time order); ``**kwargs`` go to ``cell.call``. ``outputs`` has the structure of the cell's
    outputs, each [batch, time, ...] (time-major if ``time_major``); ``final_states`` that of
    the states. Lowered to a ``StaticRNN`` (``recurrent`` op), as Fluid does.

    The seed's spelling, ``rnn(step_net=fn, inputs=[x], memories=[...], name=None)`` (or a
    plain function as the first argument), builds a :class:`StaticRNN` from a step function and
    returns its stacked outputs (see ``rnn_layers.rnn``).
    """
    if "step_net" in kwargs or (cell is not None and callable(cell) and not _is_cell(cell)):
        return _step_net_rnn(cell, inputs, initial_states, sequence_length, time_major, is_reverse, kwargs)
    if not _is_cell(cell):
        raise TypeError(f"rnn: cell must be an RNNCell (an object with call(inputs, states)), got {cell!r}")
    if inputs is None:
        raise TypeError("rnn: inputs are required")
    flat_inputs = flatten(inputs)
    for x in flat_inputs:
        if not isinstance(x, Variable) or x.ndim < 2:
            raise ShapeError(f"rnn: inputs must be Variables of rank >= 2 ([batch, time, ...]), got "
                             f"{getattr(x, 'shape', x)!r}")
        if x.dtype not in ("float32", "float64"):
            raise TypeError(f"rnn: inputs must be float32 or float64, got {x.name!r} of {x.dtype}")
    if initial_states is None:
        initial_states = cell.get_initial_states(batch_ref=inputs, batch_dim_idx=1 if time_major else 0)
    for state in flatten(initial_states):
        if not isinstance(state, Variable):
            raise TypeError(f"rnn: initial_states must be Variables (or a structure of them), got {state!r}")
        state.stop_gradient = False           # as Fluid: gradients reach the initial states
    if sequence_length is not None and (not isinstance(sequence_length, Variable) or sequence_length.ndim != 1
                                        or sequence_length.dtype not in ("int32", "int64")):
        raise ShapeError(f"rnn: sequence_length must be an int32/int64 Variable [batch], got "
                         f"{getattr(sequence_length, 'shape', sequence_length)!r}")
    if not time_major:
        inputs = map_structure(_batch_time_swapped, inputs)
    mask = None
    if sequence_length is not None:
        steps = slice(shape(flatten(inputs)[0]), axes=[0], starts=[0], ends=[1])
        mask = sequence_mask(sequence_length, maxlen=steps, dtype=flatten(initial_states)[0].dtype)
        mask = transpose(mask, [1, 0])                                     # [time, batch]
    if is_reverse:
        inputs = map_structure(_flip_time, inputs)
        mask = _flip_time(mask) if mask is not None else None

    net = StaticRNN()
    with net.step():
        step_inputs = map_structure(net.step_input, inputs)
        states = map_structure(lambda s: net.memory(init=s), initial_states)
        outputs, new_states = cell(step_inputs, states, **kwargs)
        try:
            assert_same_structure(states, new_states)
        except ValueError as exc:
            raise ValueError(f"rnn: the cell's new states must have the structure of its states: {exc}") from None
        if mask is not None:
            step_mask = net.step_input(mask)
            new_states = map_structure(lambda old, new: _keep_finished(old, new, step_mask), states, new_states)
        map_structure(net.update_memory, states, new_states)
        flat_outputs = flatten(outputs)
        for out in flat_outputs + flatten(new_states):
            net.step_output(out)
    stacked = net()
    stacked = stacked if isinstance(stacked, list) else [stacked]
    final_outputs = pack_sequence_as(outputs, stacked[:len(flat_outputs)])
    final_states = pack_sequence_as(new_states, [_last_step(s) for s in stacked[len(flat_outputs):]])
    if is_reverse:
        final_outputs = map_structure(_flip_time, final_outputs)
    if not time_major:
        final_outputs = map_structure(_batch_time_swapped, final_outputs)
    return final_outputs, final_states


def _step_net_rnn(cell, inputs, initial_states, sequence_length, time_major, is_reverse, kwargs: dict[str, Any]):
    """The seed's ``rnn(step_net, inputs, memories=(), name=None)``, positional or by keyword."""
    step_net = kwargs.pop("step_net", None)
    if step_net is not None and cell is not None:
        raise TypeError("rnn: give step_net= or a step function as the first argument, not both")
    step_net = step_net if step_net is not None else cell
    memories = kwargs.pop("memories", None)
    if memories is not None and initial_states is not None:
        raise TypeError("rnn: memories given twice (by position and as memories=)")
    memories = memories if memories is not None else (initial_states if initial_states is not None else ())
    name = kwargs.pop("name", None)
    if isinstance(sequence_length, str) and name is None:   # rnn(step, inputs, memories, "name")
        name, sequence_length = sequence_length, None
    given = [k for k, v in (("sequence_length", sequence_length), ("time_major", time_major),
                            ("is_reverse", is_reverse)) if v is not None and v is not False]
    if kwargs or given:
        extra = sorted(kwargs) + given
        raise TypeError(f"rnn(step_net=...) takes inputs, memories and name only; got {extra} (those belong to "
                        "rnn(cell, ...) with an RNNCell)")
    return rnn_layers.rnn(step_net, inputs, memories, name)
