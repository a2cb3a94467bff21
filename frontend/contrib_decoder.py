"""Fluid 1.2–1.8's ``fluid.contrib.decoder.beam_search_decoder``: ``InitState``, ``StateCell``,
``TrainingDecoder`` (and ``BeamSearchDecoder``, refused).

The semantics are Fluid's (``contrib/decoder/beam_search_decoder.py``); the code is fluidjax's
own, built on :class:`~fluidjax.frontend.dynamic_rnn.DynamicRNN`, so the programs are plain
Paddle programs (a ``while`` over a LoD rank table, tensor arrays, ``shrink_rnn_memory``):

- ``InitState(init=None, shape=None, value=0.0, init_boot=None, need_reorder=False, dtype)``:
  a state's first value, ``init`` or ``fill_constant_batch_size_like(init_boot, shape, value)``.
- ``StateCell(inputs, states, out_state)``: named inputs (placeholders until
  ``compute_state(inputs)``) and states (``InitState`` s); ``@cell.state_updater`` registers the
  step function, which reads ``get_input`` / ``get_state`` and writes ``set_state``; inside a
  decoder each state is the decoder's memory, ``update_states()`` links the new values.
- ``TrainingDecoder(state_cell)``: teacher-forced decoding; inside ``with decoder.block():``
  ``step_input`` / ``static_input`` / ``output`` are the DynamicRNN's, and ``decoder()`` after
  the block returns the outputs as LoD tensors.

``BeamSearchDecoder`` (generation with ``beam_search`` over tensor arrays) is refused with
:class:`~fluidjax.ir.errors.NotOfferedError`: use ``layers.beam_search`` in a ``While`` loop (the
book's machine translation) or ``layers.dynamic_decode`` with ``BeamSearchDecoder`` of
``fluid.layers``.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

from ..ir.errors import NotOfferedError
from ..ir.variable import Variable
from . import layers
from .dynamic_rnn import DynamicRNN

__all__ = ["InitState", "StateCell", "TrainingDecoder", "BeamSearchDecoder"]


class _DecoderType:
    TRAINING = 1
    BEAM_SEARCH = 2


class InitState:
    """The initial value of a :class:`StateCell` state: ``init``, or a ``[-1] + shape[1:]``
    tensor of ``value`` with ``init_boot``'s batch size. ``need_reorder``: reorder it like the
    decoder's sequences (a per-sequence state, e.g. the encoder's last state)."""

    def __init__(self, init: Variable | None = None, shape=None, value: float = 0.0, init_boot: Variable | None = None,
                 need_reorder: bool = False, dtype: str = "float32") -> None:
        if init is not None:
            self._init = init
        elif init_boot is None:
            raise ValueError("InitState: init_boot must be provided to infer the shape of the state "
                             "(or give init)")
        else:
            self._init = layers.fill_constant_batch_size_like(input=init_boot, value=value, shape=shape, dtype=dtype)
        self._shape = shape
        self._value = value
        self._need_reorder = need_reorder
        self._dtype = dtype

    @property
    def value(self) -> Variable:
        """The initial value (a Variable)."""
        return self._init

    @property
    def need_reorder(self) -> bool:
        """Whether the value is reordered like the decoder's sequences."""
        return self._need_reorder


class _MemoryState:
    """A state held as the training decoder's DynamicRNN memory."""

    def __init__(self, state_name: str, rnn_obj: DynamicRNN, init_state: InitState) -> None:
        self._state_name = state_name
        self._rnn_obj = rnn_obj
        self._state_mem = rnn_obj.memory(init=init_state.value, need_reorder=init_state.need_reorder)

    def get_state(self) -> Variable:
        return self._state_mem

    def update_state(self, state: Variable) -> None:
        self._rnn_obj.update_memory(self._state_mem, state)


class StateCell:
    """A recurrent cell of named inputs and states, whose update a decoder runs at every step
    (see the module docstring). ``out_state`` names the state that is the cell's output."""

    def __init__(self, inputs: dict, states: dict, out_state: str, name: str | None = None) -> None:
        self._cur_states: dict = {}
        self._state_names: list[str] = []
        for state_name, state in states.items():
            if not isinstance(state, InitState):
                raise ValueError(f"StateCell: state {state_name!r} must be an InitState object")
            self._cur_states[state_name] = state
            self._state_names.append(state_name)
        self._inputs = dict(inputs)
        self._cur_decoder_obj = None
        self._in_decoder = False
        self._states_holder: dict = {}
        self._switched_decoder = False
        self._state_updater = None
        self._out_state = out_state
        if self._out_state not in self._cur_states:
            raise ValueError(f"StateCell: out_state {out_state!r} must be one of the states {self._state_names}")

    def _enter_decoder(self, decoder_obj) -> None:
        if decoder_obj is None or self._in_decoder:
            raise ValueError("StateCell has already entered a decoder")
        self._in_decoder = True
        self._cur_decoder_obj = decoder_obj
        self._switched_decoder = False

    def _leave_decoder(self, decoder_obj) -> None:
        if not self._in_decoder:
            raise ValueError("StateCell not in a decoder, invalid leaving operation")
        if decoder_obj is not self._cur_decoder_obj:
            raise ValueError("StateCell: leaving a decoder it did not enter")
        self._in_decoder = False
        self._cur_decoder_obj = None
        self._switched_decoder = False

    def _switch_decoder(self) -> None:
        """Make every state the current decoder's memory (lazily, at the first use in its block)."""
        if not self._in_decoder:
            raise ValueError("StateCell must enter a decoder first")
        if self._switched_decoder:
            raise ValueError("StateCell already done switching")
        for state_name in self._state_names:
            key = id(self._cur_decoder_obj)
            holders = self._states_holder.setdefault(state_name, {})
            if key not in holders:
                state = self._cur_states[state_name]
                if not isinstance(state, InitState):
                    raise ValueError(f"StateCell: state {state_name!r} is a {type(state).__name__}, "
                                     "should be an InitState object")
                if self._cur_decoder_obj.type != _DecoderType.TRAINING:
                    raise NotOfferedError("StateCell: only TrainingDecoder is offered (BeamSearchDecoder is not)")
                holders[key] = _MemoryState(state_name, self._cur_decoder_obj.dynamic_rnn, state)
            self._cur_states[state_name] = holders[key].get_state()
        self._switched_decoder = True

    def get_state(self, state_name: str) -> Variable:
        """The state's current value."""
        if self._in_decoder and not self._switched_decoder:
            self._switch_decoder()
        if state_name not in self._cur_states:
            raise ValueError(f"StateCell: unknown state {state_name!r}; the states are {self._state_names}")
        return self._cur_states[state_name]

    def get_input(self, input_name: str) -> Variable:
        """The input given to :meth:`compute_state`."""
        if input_name not in self._inputs or self._inputs[input_name] is None:
            raise ValueError(f"StateCell: invalid input {input_name!r} (not given to compute_state)")
        return self._inputs[input_name]

    def set_state(self, state_name: str, state_value: Variable) -> None:
        """Set the state's new value (what :meth:`update_states` carries to the next step)."""
        self._cur_states[state_name] = state_value

    def state_updater(self, updater):
        """Decorator registering ``updater(state_cell)``, the step function :meth:`compute_state` runs."""
        self._state_updater = updater

        def _decorator(state_cell):
            if state_cell == self:
                raise TypeError("Updater should only accept a StateCell object as argument")
            updater(state_cell)

        return _decorator

    def compute_state(self, inputs: dict) -> None:
        """Give the inputs and run the registered updater."""
        if self._in_decoder and not self._switched_decoder:
            self._switch_decoder()
        for input_name, input_value in inputs.items():
            if input_name not in self._inputs:
                raise ValueError(f"StateCell: unknown input {input_name!r}; the input placeholders are "
                                 f"{sorted(self._inputs)}")
            self._inputs[input_name] = input_value
        if self._state_updater is None:
            raise ValueError("StateCell: register the update with @state_cell.state_updater first")
        self._state_updater(self)

    def update_states(self) -> None:
        """Carry every state's value set in this step to the next step (the decoder's memories)."""
        if self._in_decoder and not self._switched_decoder:
            self._switch_decoder()
        for state_name, decoder_state in self._states_holder.items():
            if id(self._cur_decoder_obj) not in decoder_state:
                raise ValueError("StateCell: unknown decoder object, please make sure update_states is "
                                 "called inside the decoder's block")
            decoder_state[id(self._cur_decoder_obj)].update_state(self._cur_states[state_name])

    def out_state(self) -> Variable:
        """The value of the output state."""
        return self._cur_states[self._out_state]


class TrainingDecoder:
    """Teacher-forced decoding of a :class:`StateCell` over the target sequences (a DynamicRNN)."""

    BEFORE_DECODER, IN_DECODER, AFTER_DECODER = 0, 1, 2

    def __init__(self, state_cell: StateCell, name: str | None = None) -> None:
        self._status = TrainingDecoder.BEFORE_DECODER
        self._dynamic_rnn = DynamicRNN(name=name)
        self._type = _DecoderType.TRAINING
        self._state_cell = state_cell
        self._state_cell._enter_decoder(self)

    @contextlib.contextmanager
    def block(self) -> Iterator[None]:
        """The decoding step is built inside this ``with`` block (once)."""
        if self._status != TrainingDecoder.BEFORE_DECODER:
            raise ValueError("decoder.block() can only be invoked once")
        self._status = TrainingDecoder.IN_DECODER
        with self._dynamic_rnn.block():
            yield
        self._status = TrainingDecoder.AFTER_DECODER
        self._state_cell._leave_decoder(self)

    @property
    def state_cell(self) -> StateCell:
        """The decoder's state cell (inside the block)."""
        self._assert_in_decoder_block("state_cell")
        return self._state_cell

    @property
    def dynamic_rnn(self) -> DynamicRNN:
        """The DynamicRNN the decoder runs."""
        return self._dynamic_rnn

    @property
    def type(self) -> int:
        """The decoder's kind (training)."""
        return self._type

    def step_input(self, x: Variable) -> Variable:
        """``x`` (a LoD tensor) split into time steps; the current step's rows."""
        self._assert_in_decoder_block("step_input")
        return self._dynamic_rnn.step_input(x)

    def static_input(self, x: Variable) -> Variable:
        """``x`` read whole at every step (reordered like the sequences)."""
        self._assert_in_decoder_block("static_input")
        return self._dynamic_rnn.static_input(x)

    def __call__(self, *args, **kwargs):
        """The outputs after the block (LoD tensors with the step input's LoD)."""
        if self._status != TrainingDecoder.AFTER_DECODER:
            raise ValueError("Output of training decoder can only be visited outside the block")
        return self._dynamic_rnn(*args, **kwargs)

    def output(self, *outputs: Variable) -> None:
        """Mark step results as the decoder's outputs."""
        self._assert_in_decoder_block("output")
        self._dynamic_rnn.output(*outputs)

    def _assert_in_decoder_block(self, method: str) -> None:
        if self._status != TrainingDecoder.IN_DECODER:
            raise ValueError(f"{method} should be invoked inside block of TrainingDecoder object")


class BeamSearchDecoder:
    """Fluid's contrib ``BeamSearchDecoder`` is not offered (see the module docstring)."""

    def __init__(self, *args, **kwargs) -> None:
        raise NotOfferedError(
            "fluid.contrib.decoder.BeamSearchDecoder is not offered by fluidjax: generate with "
            "layers.beam_search / beam_search_decode in a While loop (the book's machine translation), or "
            "fluid.layers.dynamic_decode with fluid.layers.BeamSearchDecoder; InitState, StateCell and "
            "TrainingDecoder of this module are offered")
