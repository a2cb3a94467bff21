"""What an op's JAX rule sees: its input arrays, attributes, a random key, its output variables."""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import jax
import numpy as np

from ..ir import dtypes

# The PRNG behind every random op. XLA's RngBitGenerator ("rbg") compiles in a fraction of the
# time threefry takes (measured: LeNet's startup program 4.4 s -> 0.8 s on CPU); its numbers are
# reproducible for a seed on a given backend, which is what `program.random_seed` promises.
PRNG_IMPL = "rbg"


def make_key(seed) -> jax.Array:
    """A PRNG key of fluidjax's implementation from an integer seed (or a traced one)."""
    return jax.random.key(seed, impl=PRNG_IMPL)


class ComputeContext:
    """The arguments of one op's JAX rule.

    ``ctx.input("X")`` is the array in slot X (None when the slot is empty), ``ctx.inputs("X")``
    the list for a duplicable slot, ``ctx.attr("axis")`` an attribute, ``ctx.rng()`` a PRNG key
    for this op, ``ctx.out_dtype("Out")`` the dtype the program declares for an output, and
    ``ctx.sub_block()`` the op's BLOCK attribute lowered into a function (control-flow ops).

    ``lower_block(ctx, block)``, given by whoever runs the rule (``lowering.lower``), lowers a
    sub-block: this module knows nothing of how, so it imports nothing that runs ops.
    """

    # The real row count of a LoD input, for an op declared ``lower.row_statistics`` (None otherwise):
    # its statistics see the real rows only, never the padding rows of a bucket.
    real_rows = None

    def __init__(self, opdef, op, values: Mapping[str, Sequence[Any]], attrs: Mapping[str, Any],
                 rng: Callable[[], jax.Array] | None = None, out_names: Mapping[str, Sequence[str]] | None = None,
                 lower_block: Callable | None = None, env: Mapping[str, Any] | None = None,
                 checks=None) -> None:
        self.opdef = opdef
        self.op = op
        self._values = values
        self._attrs = attrs
        self._rng = rng
        self._out_names = op.outputs if out_names is None else out_names
        self.lower_block = lower_block
        # The values of the enclosing block(s), by name: what a sub-block of this op may read
        # (Paddle's scoping: a sub-block sees every variable of its ancestors).
        self.env = env if env is not None else {}
        # The run-time checks of the block the op runs in (a ``lowering.checks.StepChecks``, or
        # None when the step collects none): a control-flow op hands its sub-block's checks to it.
        self.checks = checks

    def input(self, slot: str):
        """The array in input ``slot`` (None when the slot is empty)."""
        vals = self._values.get(slot)
        return vals[0] if vals else None

    def inputs(self, slot: str) -> list:
        """The arrays of a duplicable input ``slot``."""
        return list(self._values.get(slot) or [])

    def has_input(self, slot: str) -> bool:
        """Whether input ``slot`` holds a value."""
        return bool(self._values.get(slot))

    def attr(self, name: str, default: Any = None) -> Any:
        """Attribute ``name``, the op definition's default, or ``default``."""
        if name in self._attrs:
            return self._attrs[name]
        spec = self.opdef.attrs.get(name)
        return spec.default if spec is not None and spec.default is not None else default

    def rng(self) -> jax.Array:
        """A PRNG key for this op: an op's non-zero ``seed`` attribute fixes it (Paddle's rule)."""
        seed = int(self.attr("seed", 0) or 0)
        if seed:
            return make_key(seed)
        if self._rng is None:
            raise RuntimeError(f"op {self.opdef.type!r} asked for randomness outside an Executor run")
        return self._rng()

    def out_var(self, slot: str, index: int = 0):
        """The program's variable for output ``slot`` (its ``index``-th)."""
        names = self._out_names.get(slot) or []
        return self.op.block.var(names[index]) if index < len(names) else None

    def has_output(self, slot: str) -> bool:
        """Whether output ``slot`` names a variable."""
        return bool(self._out_names.get(slot))

    def out_dtype(self, slot: str = "Out", index: int = 0) -> np.dtype | None:
        """The NumPy dtype the program declares for an output."""
        var = self.out_var(slot, index)
        return dtypes.to_numpy(var.dtype) if var is not None and var.dtype else None

    def sub_block(self, attr: str = "sub_block", block=None):
        """The sub-block named by BLOCK attribute ``attr`` (or ``block``: a Block or its index),
        lowered into a pure function of the values it reads (by ``lower_block``: a
        :class:`~fluidjax.lowering.lower.SubBlock`).

        Its reads come from the values the caller passes, then from the enclosing environment
        (``self.env``); it returns what it wrote. A malformed reference (a block out of range,
        the op's own block or an ancestor of it) is a :class:`~fluidjax.ProgramFormatError`.
        """
        if self.lower_block is None:
            raise RuntimeError(f"op {self.opdef.type!r} asked for its sub-block outside a lowering")
        return self.lower_block(self, self.attr(attr) if block is None else block)
