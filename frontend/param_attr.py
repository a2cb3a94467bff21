"""``ParamAttr``: how a layer creates one of its parameters."""

from __future__ import annotations

from typing import Any

from .initializer import Initializer


class ParamAttr:
    """Name, initializer, learning-rate scale, regularizer and trainability of a parameter.

    Fluid 1.x's arguments, in its order: ``gradient_clip`` (a ``fluid.clip.GradientClipBy*`` for
    this parameter's gradient, applied by ``minimize`` when the optimizer has no ``grad_clip``) and
    ``do_model_average`` (False leaves the parameter out of ``ExponentialMovingAverage`` and
    ``ModelAverage``). ``need_clip=False`` (Paddle 2.x) exempts it from an optimizer's ``grad_clip``.

    >>> ParamAttr(name="fc_w", initializer=fj.initializer.Constant(0.5), trainable=False)  # doctest: +SKIP
    """

    def __init__(self, name: str | None = None, initializer: Initializer | None = None,
                 learning_rate: float = 1.0, regularizer: Any = None, trainable: bool = True,
                 gradient_clip: Any = None, do_model_average: bool = True, need_clip: bool = True) -> None:
        if initializer is not None and not isinstance(initializer, Initializer):
            raise TypeError(f"initializer must be a fluidjax initializer, got {initializer!r}")
        self.name = name
        self.initializer = initializer
        self.learning_rate = learning_rate
        self.regularizer = regularizer
        self.trainable = trainable
        self.gradient_clip = gradient_clip
        self.do_model_average = do_model_average
        self.need_clip = need_clip

    @staticmethod
    def to_attr(arg) -> "ParamAttr | None":
        """Normalise a layer's ``param_attr``/``bias_attr`` argument; ``False`` means no parameter,
        ``True`` (Fluid 1.x's ``bias_attr=True``) and ``None`` a parameter with the defaults."""
        if arg is None or arg is True:
            return ParamAttr()
        if arg is False:
            return None
        if isinstance(arg, ParamAttr):
            return arg
        if isinstance(arg, str):
            return ParamAttr(name=arg)
        if isinstance(arg, Initializer):
            return ParamAttr(initializer=arg)
        raise TypeError(f"expected a ParamAttr, a name, an initializer, None or False; got {arg!r}")

    def __repr__(self) -> str:
        return f"ParamAttr(name={self.name!r}, initializer={self.initializer!r}, trainable={self.trainable})"


class WeightNormParamAttr(ParamAttr):
    """A parameter ``w`` reparameterized by weight normalization (Salimans & Kingma, 2016), Fluid's
    ``WeightNormParamAttr``: two parameters ``<name>_g`` and ``<name>_v`` are trained, and the
    layer uses ``w = g * v / ||v||``, the norm taken over every dim but ``dim`` (over all of ``v``
    when ``dim`` is None). ``g`` has ``v``'s rank with 1 in every dim but ``dim``; the startup
    program initializes ``v`` with ``initializer`` and ``g`` with ``||v||``, so ``w`` starts as
    ``initializer`` would have made it. ``do_model_average`` defaults to False, as in Fluid.
    ``WeightNormParamAttr.params_with_weight_norm`` lists the ``w`` variables made."""

    params_with_weight_norm: list = []

    def __init__(self, dim: int | None = None, name: str | None = None, initializer: Initializer | None = None,
                 learning_rate: float = 1.0, regularizer: Any = None, trainable: bool = True,
                 do_model_average: bool = False, *, gradient_clip: Any = None, need_clip: bool = True) -> None:
        super().__init__(name=name, initializer=initializer, learning_rate=learning_rate, regularizer=regularizer,
                         trainable=trainable, gradient_clip=gradient_clip, do_model_average=do_model_average,
                         need_clip=need_clip)
        if dim is not None and (isinstance(dim, bool) or not isinstance(dim, int)):
            raise TypeError(f"WeightNormParamAttr: dim must be an int or None, got {dim!r}")
        self.dim = dim

    def __repr__(self) -> str:
        return f"WeightNormParamAttr(dim={self.dim!r}, name={self.name!r}, initializer={self.initializer!r})"
