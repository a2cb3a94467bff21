"""Weight-decay regularizers, emitted as ops the way Paddle 2.6 static mode emits them.

A regularizer adds the gradient of its penalty to a parameter's gradient, in place:
``L2Decay(c)`` appends ``scale(param, c)`` and ``sum(grad, that)``; ``L1Decay(c)`` appends
``sign(param)``, ``scale(…, c)`` and ``sum``. Give one to an optimizer (``weight_decay=`` or
``regularization=``) for every parameter, or to a parameter through
``ParamAttr(regularizer=...)``; a parameter's own regularizer wins over the optimizer's.

>>> # w = ParamAttr(regularizer=fj.regularizer.L1Decay(1e-4))
>>> # fj.optimizer.Adam(1e-3, weight_decay=fj.regularizer.L2Decay(1e-4))
"""

from __future__ import annotations

from ..ir.variable import Variable

__all__ = ["WeightDecayRegularizer", "L1Decay", "L2Decay", "L1DecayRegularizer", "L2DecayRegularizer"]


class WeightDecayRegularizer:
    """Base class: ``regularizer(param, grad, block)`` appends the penalty-gradient ops and
    returns the variable holding the term to add to ``grad``.

    The coefficient is ``coeff`` (Paddle 2.x's keyword) or ``regularization_coeff`` (Fluid 1.x's).
    """

    def __init__(self, coeff: float = 0.0, *, regularization_coeff: float | None = None) -> None:
        if regularization_coeff is not None:
            if coeff != 0.0:
                raise ValueError("give coeff or regularization_coeff, not both")
            coeff = regularization_coeff
        if isinstance(coeff, bool) or not isinstance(coeff, (int, float)):
            raise TypeError(f"{type(self).__name__} needs a float coeff, got {coeff!r}")
        self._coeff = float(coeff)

    @property
    def coeff(self) -> float:
        """The decay coefficient."""
        return self._coeff

    @property
    def _regularization_coeff(self) -> float:
        """Fluid 1.x's name for :attr:`coeff`."""
        return self._coeff

    def __call__(self, param: Variable, grad: Variable, block) -> Variable:
        raise NotImplementedError

    @staticmethod
    def _like(param: Variable, block) -> Variable:
        # An anonymous `_generated_var_<n>`, as Paddle names these temporaries.
        return block.create_var(None, param.shape, param.dtype, param.lod_level)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(coeff={self._coeff})"


class L2Decay(WeightDecayRegularizer):
    """L2 penalty ``coeff / 2 * ||w||²``: adds ``coeff * w`` to the gradient."""

    def __call__(self, param, grad, block):
        decay = self._like(param, block)
        block.append_op("scale", {"X": param}, {"Out": decay}, {"scale": self._coeff})
        return decay


class L1Decay(WeightDecayRegularizer):
    """L1 penalty ``coeff * |w|``: adds ``coeff * sign(w)`` to the gradient."""

    def __call__(self, param, grad, block):
        sign = self._like(param, block)
        decay = self._like(param, block)
        block.append_op("sign", {"X": param}, {"Out": sign})
        block.append_op("scale", {"X": sign}, {"Out": decay}, {"scale": self._coeff})
        return decay


# Fluid 1.x's names: the same classes (both take regularization_coeff=).
L2DecayRegularizer = L2Decay
L1DecayRegularizer = L1Decay


def append_regularization(param: Variable, grad: Variable, regularizer: WeightDecayRegularizer | None) -> Variable:
    """Add ``regularizer``'s term to ``grad`` in place (a ``sum`` op writing ``grad``); return ``grad``.

    ``param.regularizer`` wins over ``regularizer``; with neither, nothing is appended.
    """
    chosen = getattr(param, "regularizer", None) or regularizer
    if chosen is None or grad is None:
        return grad
    block = grad.block
    term = chosen(param, grad, block)
    block.append_op("sum", {"X": [grad, term]}, {"Out": grad})
    return grad
