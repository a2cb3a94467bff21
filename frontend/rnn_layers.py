"""Recurrent nets: ``StaticRNN`` and the seed's ``rnn(step_net=...)`` (a step block run once per
time step: Paddle's ``recurrent`` op), and the layers that emit the fused ``rnn`` op (what
``paddle.nn.LSTM`` / ``GRU`` / ``SimpleRNN`` save in static programs), so a fluidjax program holds
the same ops and Paddle runs it.

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

import contextlib
import math
from typing import Callable, Iterator, Sequence

from ..ir import dtypes, unique_name
from ..ir.errors import ShapeError
from ..ir.variable import Variable
from .initializer import Initializer, Uniform
from .layer_helper import LayerHelper
from .param_attr import ParamAttr
from .tensor_layers import assign, fill_constant_batch_size_like

# `rnn` (the seed's step_net form, below) is reached through rnn_cells.rnn, which also takes
# Fluid 1.8's rnn(cell, inputs, ...).
__all__ = ["lstm", "gru", "simple_rnn", "StaticRNN"]

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


# -- StaticRNN ------------------------------------------------------------------------------------
class StaticRNN:
    """Fluid 1.x's StaticRNN: a step block run over the first dim (time) of its step inputs, as
    Paddle's ``recurrent`` op (lowered to one ``lax.scan``; gradients reach the inputs, the initial
    memories and every outer variable the step reads, parameters included).

    >>> rnn = StaticRNN()                                            # doctest: +SKIP
    >>> with rnn.step():
    ...     word = rnn.step_input(x)                                 # x [T, B, D] -> word [B, D]
    ...     prev = rnn.memory(shape=[-1, 32], batch_ref=word)        # zeros [B, 32] at t = 0
    ...     hidden = fc([word, prev], 32, activation="tanh")
    ...     rnn.update_memory(prev, hidden)
    ...     rnn.step_output(hidden)
    >>> hiddens = rnn()                                              # [T, B, 32]

    The op is Paddle's (its slots and attributes), except that the step block copies outputs and
    new memories with ``assign`` where Fluid used ``rnn_memory_helper``, an op Paddle 2.6 no
    longer has, so Paddle 2.6 runs the program.
    """

    def __init__(self, name: str | None = None) -> None:
        self.helper = LayerHelper("static_rnn", name)
        self.memories: dict[str, list] = {}          # pre-memory name -> [init, pre_mem, new value]
        self.inputs: list[Variable] = []             # step inputs (in the step block)
        self.outputs: list[Variable] = []            # stacked outputs (in the enclosing block)
        self.seq_len: int | None = None
        self._block = None
        self._done = False

    # -- building ------------------------------------------------------------------------------
    @contextlib.contextmanager
    def step(self) -> Iterator[None]:
        """The context in which the step block is written; the op is appended when it closes."""
        if self._block is not None:
            raise ValueError("StaticRNN.step() can be entered only once")
        program = self.helper.main_program
        self._block = program.create_block()
        try:
            yield
        except BaseException:
            program.rollback()
            raise
        program.rollback()
        self._complete()

    def _in_step(self, what: str) -> None:
        if self._block is None or self._done or self.helper.main_program.current_block() is not self._block:
            raise ValueError(f"StaticRNN.{what} must be called inside `with rnn.step():`")

    def _parent(self):
        return self.helper.main_program.block(self._block.parent_idx)

    def step_input(self, x: Variable) -> Variable:
        """The slice ``x[t]`` of a [T, ...] variable, as the step sees it (same name, shape [...])."""
        self._in_step("step_input")
        if not isinstance(x, Variable) or x.ndim < 1:
            raise ShapeError(f"StaticRNN.step_input: needs a variable of rank >= 1 whose first dim is time, got {x!r}")
        if self.seq_len is None or self.seq_len < 0:
            self.seq_len = x.shape[0]
        elif x.shape[0] >= 0 and x.shape[0] != self.seq_len:
            raise ShapeError(f"StaticRNN.step_input: every step input must have {self.seq_len} steps, "
                             f"{x.name!r} has {x.shape[0]} (shape {x.shape})")
        ipt = self._block.create_var(x.name, x.shape[1:], x.dtype, x.lod_level)
        self.inputs.append(ipt)
        return ipt

    def memory(self, init: Variable | None = None, shape: Sequence[int] | None = None,
               batch_ref: Variable | None = None, init_value: float = 0.0, init_batch_dim_idx: int = 0,
               ref_batch_dim_idx: int = 1) -> Variable:
        """A state carried from step to step: ``init`` at the first step, or a ``shape`` tensor of
        ``init_value`` whose dim ``init_batch_dim_idx`` is ``batch_ref``'s dim ``ref_batch_dim_idx``
        (batch_ref is usually an outer [T, B, ...] input, whose dim 1 is the batch). Give it its
        next value with :meth:`update_memory`."""
        self._in_step("memory")
        if init is None:
            if shape is None or batch_ref is None:
                raise ValueError("StaticRNN.memory: give init, or shape and batch_ref")
            program = self.helper.main_program
            # A step input names its outer [T, B, ...] variable, whose dim 1 is the batch.
            ref = self._parent().find_var(batch_ref.name)
            if ref is None:
                raise ValueError(f"StaticRNN.memory: batch_ref {batch_ref.name!r} must be a variable of the "
                                 "enclosing block (or a step input), not one computed inside the step")
            saved = program._current_block_idx
            program._current_block_idx = self._parent().idx
            try:
                init = fill_constant_batch_size_like(ref, list(shape), ref.dtype, init_value,
                                                     input_dim_idx=ref_batch_dim_idx,
                                                     output_dim_idx=init_batch_dim_idx)
            finally:
                program._current_block_idx = saved
        pre_mem = self._block.create_var(unique_name.generate(f"{self.helper.name}@mem"), init.shape, init.dtype)
        self.memories[pre_mem.name] = [init, pre_mem, None]
        return pre_mem

    def update_memory(self, mem: Variable, var: Variable) -> None:
        """``mem`` (from :meth:`memory`) holds ``var`` at the next step."""
        self._in_step("update_memory")
        if mem.name not in self.memories:
            raise ValueError(f"StaticRNN.update_memory: {mem.name!r} is not a memory of this StaticRNN")
        if not isinstance(var, Variable):
            raise TypeError(f"StaticRNN.update_memory: the new value must be a Variable, got {var!r}")
        self.memories[mem.name][2] = var

    def step_output(self, o: Variable) -> None:
        """Collect ``o`` at every step: the op's output is [T] + o's shape."""
        self._in_step("step_output")
        tmp = self.helper.create_tmp(o.dtype)
        assign(o, tmp)
        out = self._parent().create_var(tmp.name, (self.seq_len if self.seq_len is not None else -1,) + tuple(o.shape),
                                        o.dtype)
        self.outputs.append(out)

    def output(self, *outputs: Variable) -> None:
        """:meth:`step_output` for each of ``outputs``."""
        for o in outputs:
            self.step_output(o)

    def __call__(self):
        """The stacked outputs: one Variable, or a list when there are several."""
        if not self._done:
            raise ValueError("StaticRNN: call it after the `with rnn.step():` block")
        return self.outputs[0] if len(self.outputs) == 1 else list(self.outputs)

    def _complete(self) -> None:
        block, parent = self._block, self._parent()
        if not self.inputs:
            raise ValueError("StaticRNN: the step block needs at least one step_input")
        local = {n for op in block.ops for n in op.output_arg_names}
        local.update(v.name for v in self.inputs)
        local.update(self.memories)
        params: list[str] = []
        for op in block.ops:
            for n in op.input_arg_names:
                if n not in local and n not in params:
                    params.append(n)
        pre_memories, states, boots = [], [], []
        program = self.helper.main_program
        saved = program._current_block_idx
        program._current_block_idx = block.idx
        try:
            for name, (init, pre_mem, new) in self.memories.items():
                if new is None:
                    raise ValueError(f"StaticRNN: memory {name!r} (initialised from {init.name!r}) is never "
                                     "updated; call update_memory(mem, new_value) in the step")
                if len(new.shape) != len(pre_mem.shape) or any(
                        a >= 0 and b >= 0 and a != b for a, b in zip(new.shape, pre_mem.shape)):
                    raise ShapeError(f"StaticRNN: memory {name!r} has shape {pre_mem.shape} but is updated with "
                                     f"{new.name!r} of shape {new.shape}; a memory keeps one shape")
                state = assign(new)
                boots.append(init)
                pre_memories.append(name)
                states.append(state.name)
        finally:
            program._current_block_idx = saved
        step_scopes = parent.create_var(unique_name.generate("_generated_var"), (), None, type=dtypes.STEP_SCOPES)
        parent.append_op("recurrent",
                         {"inputs": [parent.var(v.name) for v in self.inputs], "initial_states": boots,
                          "parameters": [parent.var(n) for n in params]},
                         {"outputs": self.outputs, "step_scopes": [step_scopes]},
                         {"has_states": bool(pre_memories), "ex_states": pre_memories, "states": states,
                          "sub_block": block.idx, "reverse": False, "is_train": True})
        self._done = True


def rnn(step_net: Callable, inputs, memories=(), name: str | None = None):
    """The seed's recurrent net: ``step_net`` is a Python function that builds one time step.

    ``step_net(*step_inputs, *memories)`` gets each of ``inputs`` ([T, ...] variables) sliced at
    the current step and each memory's previous value; it returns ``(outputs, new_memories)``:
    ``outputs`` a Variable or a list (collected at every step, stacked to [T, ...]) and
    ``new_memories`` one Variable per memory (its value at the next step). A memory is a Variable
    (its initial value) or a dict of :meth:`StaticRNN.memory`'s arguments
    (``dict(shape=[-1, 32], batch_ref=x)``: zeros shaped after x's batch). Returns the stacked
    outputs (a Variable, or a list when ``step_net`` returns several).

    A thin spelling of :class:`StaticRNN` (the same ``recurrent`` op)::

        def step(word, prev):
            h = fc([word, prev], 32, activation="tanh")
            return h, [h]

        hiddens = rnn(step_net=step, inputs=[x], memories=[dict(shape=[-1, 32], batch_ref=x)])
    """
    if not callable(step_net):
        raise TypeError(f"rnn: step_net must be a function that builds one step, got {step_net!r}")
    inputs = [inputs] if isinstance(inputs, Variable) else list(inputs)
    memories = [memories] if isinstance(memories, (Variable, dict)) else list(memories)
    net = StaticRNN(name)
    with net.step():
        xs = [net.step_input(x) for x in inputs]
        mems = [net.memory(**m) if isinstance(m, dict) else net.memory(init=m) for m in memories]
        result = step_net(*xs, *mems)
        if not isinstance(result, (tuple, list)) or len(result) != 2:
            raise TypeError("rnn: step_net must return (outputs, new_memories)")
        outs, new_mems = result
        new_mems = [new_mems] if isinstance(new_mems, Variable) else list(new_mems or [])
        if len(new_mems) != len(mems):
            raise ValueError(f"rnn: step_net returned {len(new_mems)} new memories for {len(mems)} memories")
        for mem, new in zip(mems, new_mems):
            net.update_memory(mem, new)
        outs = [outs] if isinstance(outs, Variable) else list(outs)
        if not outs:
            raise ValueError("rnn: step_net returned no outputs")
        net.output(*outs)
    return net()
