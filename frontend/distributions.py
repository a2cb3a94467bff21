"""Fluid 1.8's ``fluid.layers.distributions``: ``Uniform``, ``Normal``, ``Categorical``,
``MultivariateNormalDiag``. Each method appends the ops Fluid 1.8 built (elementwise arithmetic,
``log``, ``exp``, reductions, the random ops); nothing is computed until the program runs.

Arguments are floats, lists or NumPy arrays (made float32 constants, broadcast against each other)
or Variables (all of them). ``Uniform`` and ``Normal`` have ``sample(shape, seed=0)``,
``entropy()``, ``log_prob(value)``; ``Normal`` also ``kl_divergence(other)``; ``Categorical`` and
``MultivariateNormalDiag`` (``scale`` a diagonal [k, k] matrix) have ``entropy()`` and
``kl_divergence(other)``, as in Fluid 1.8.

One difference: Fluid 1.8's ``Uniform.sample`` with non-Variable arguments drew its unit numbers
from ``uniform_random``'s default range [-1, 1), so its samples fell in [2 low - high, high);
here they are uniform in [low, high), the distribution the class documents (as Paddle 2 fixed it).
"""

from __future__ import annotations

import functools
import math
import warnings

import numpy as np

from ..ir.variable import Variable
from .creation_layers import gaussian_random_batch_size_like, uniform_random_batch_size_like
from .math_layers import elementwise_pow, exp, less_than, log, reduce_max, reduce_prod, reduce_sum
from .nn_layers import matmul
from .tensor_layers import (assign, cast, fill_constant_batch_size_like, gaussian_random, ones, reshape,
                            uniform_random, zeros)
from .tensor_math_layers import diag

__all__ = ["Uniform", "Normal", "Categorical", "MultivariateNormalDiag"]


class Distribution:
    """The base of the distributions: what each offers, and argument conversion."""

    def sample(self, *args, **kwargs):
        raise NotImplementedError

    def entropy(self):
        raise NotImplementedError

    def kl_divergence(self, other):
        raise NotImplementedError

    def log_prob(self, value):
        raise NotImplementedError

    @staticmethod
    def _validate_args(*args) -> bool:
        """True when every argument is a Variable; mixing Variables and numbers is an error."""
        kinds = {isinstance(a, Variable) for a in args}
        if len(kinds) > 1:
            raise ValueError("if one argument is Variable, all arguments should be Variable")
        return kinds == {True}

    @staticmethod
    def _to_variable(*args):
        """float32 constants of the arguments, each broadcast to the shape of their sum."""
        arrays = []
        for arg in args:
            if not isinstance(arg, (float, list, np.ndarray)):
                raise TypeError(f"arguments must be float, list, numpy.ndarray or Variable, got {type(arg).__name__}")
            arr = np.zeros(1) + arg if isinstance(arg, float) else np.array(arg)
            if arr.dtype != np.float32:
                warnings.warn("data type of argument only support float32, your argument will be convert to float32.")
                arr = arr.astype("float32")
            arrays.append(arr)
        total = sum(arrays, np.zeros((), "float32"))
        return tuple(assign(np.ascontiguousarray(np.broadcast_to(a, total.shape))) for a in arrays)


def _check_shape(shape, seed):
    if not isinstance(shape, list):
        raise TypeError(f"sample: shape must be a list, got {type(shape).__name__}")
    if not isinstance(seed, int):
        raise TypeError(f"sample: seed must be an int, got {type(seed).__name__}")


class _LocationScale(Distribution):
    """What Uniform and Normal share: two parameters, numbers or Variables, and the sampling
    Fluid 1.8 wrote for both (a unit draw scaled by ``spread`` and moved by the first parameter)."""

    def _take(self, a, b):
        self.all_arg_is_float = False
        self.batch_size_unknown = self._validate_args(a, b)
        if self.batch_size_unknown:
            return a, b
        self.all_arg_is_float = isinstance(a, float) and isinstance(b, float)
        return self._to_variable(a, b)

    def _draw(self, shape, seed, first, second, spread, unit_like, unit):
        """Samples of shape ``shape + batch_shape`` (``shape`` alone when both arguments were floats)."""
        _check_shape(shape, seed)
        batch_shape = list((first + second).shape)
        output_shape = shape + batch_shape
        if self.batch_size_unknown:
            zero = fill_constant_batch_size_like(first + second, batch_shape + shape, first.dtype, 0.0)
            return reshape(unit_like(zero, zero.shape, seed=seed) * (zero + spread) + first, output_shape)
        out = unit(output_shape, seed=seed) * (zeros(output_shape, first.dtype) + spread) + first
        return reshape(out, shape) if self.all_arg_is_float else out


class Uniform(_LocationScale):
    """The uniform distribution on [low, high)."""

    def __init__(self, low, high):
        self.low, self.high = self._take(low, high)

    def sample(self, shape, seed=0):
        """Samples of shape ``shape + batch_shape`` (``shape`` alone when both arguments were floats)."""
        return self._draw(shape, seed, self.low, self.high, self.high - self.low,
                          functools.partial(uniform_random_batch_size_like, min=0.0, max=1.0),
                          functools.partial(uniform_random, min=0.0, max=1.0))

    def log_prob(self, value):
        """log(1 / (high - low)) inside [low, high), -inf outside."""
        inside = cast(less_than(self.low, value), value.dtype) * cast(less_than(value, self.high), value.dtype)
        return log(inside) - log(self.high - self.low)

    def entropy(self):
        """log(high - low) nats."""
        return log(self.high - self.low)


class Normal(_LocationScale):
    """The normal distribution with mean ``loc`` and standard deviation ``scale``."""

    def __init__(self, loc, scale):
        self.loc, self.scale = self._take(loc, scale)

    def sample(self, shape, seed=0):
        """Samples of shape ``shape + batch_shape`` (``shape`` alone when both arguments were floats)."""
        return self._draw(shape, seed, self.loc, self.scale, self.scale,
                          functools.partial(gaussian_random_batch_size_like, mean=0.0, std=1.0),
                          functools.partial(gaussian_random, mean=0.0, std=1.0))

    def entropy(self):
        """0.5 + 0.5 log(2 pi) + log(scale) nats, of the batch's shape."""
        batch_shape = list((self.loc + self.scale).shape)
        zero = fill_constant_batch_size_like(self.loc + self.scale, batch_shape, self.loc.dtype, 0.0)
        return 0.5 + 0.5 * math.log(2 * math.pi) + log(self.scale + zero)

    def log_prob(self, value):
        """-(value - loc)² / (2 scale²) - log(scale) - log(sqrt(2 pi))."""
        var = self.scale * self.scale
        return -1.0 * ((value - self.loc) * (value - self.loc)) / (2.0 * var) - log(self.scale) \
            - math.log(math.sqrt(2.0 * math.pi))

    def kl_divergence(self, other):
        """KL(self || other) of two normals."""
        if not isinstance(other, Normal):
            raise TypeError("kl_divergence: other must be a Normal")
        ratio = self.scale / other.scale
        ratio = ratio * ratio
        t1 = (self.loc - other.loc) / other.scale
        return 0.5 * (ratio + t1 * t1 - 1.0 - log(ratio))


class Categorical(Distribution):
    """The categorical distribution of softmax(``logits``) over the last dim."""

    def __init__(self, logits):
        if not isinstance(logits, (list, np.ndarray, Variable)):
            raise TypeError("Categorical: logits must be a list, numpy.ndarray or Variable")
        self.logits = logits if self._validate_args(logits) else self._to_variable(logits)[0]

    def _normalized(self):
        logits = self.logits - reduce_max(self.logits, dim=-1, keep_dim=True)
        e = exp(logits)
        z = reduce_sum(e, dim=-1, keep_dim=True)
        return logits, e / z, z

    def kl_divergence(self, other):
        """sum p (log p - log q) over the last dim (kept as 1)."""
        if not isinstance(other, Categorical):
            raise TypeError("kl_divergence: other must be a Categorical")
        logits, prob, z = self._normalized()
        other_logits, _, other_z = other._normalized()
        return reduce_sum(prob * (logits - log(z) - other_logits + log(other_z)), dim=-1, keep_dim=True)

    def entropy(self):
        """-sum p log p over the last dim (kept as 1)."""
        logits, prob, z = self._normalized()
        return -1.0 * reduce_sum(prob * (logits - log(z)), dim=-1, keep_dim=True)


class MultivariateNormalDiag(Distribution):
    """The k-dimensional normal with mean ``loc`` [k] and diagonal covariance ``scale`` [k, k]."""

    def __init__(self, loc, scale):
        for arg, what in ((loc, "loc"), (scale, "scale")):
            if not isinstance(arg, (list, np.ndarray, Variable)):
                raise TypeError(f"MultivariateNormalDiag: {what} must be a list, numpy.ndarray or Variable")
        if self._validate_args(loc, scale):
            self.loc, self.scale = loc, scale
        else:
            self.loc, self.scale = self._to_variable(loc, scale)

    def _eye_and_ones(self, value):
        shape = list(value.shape)
        return diag(ones([shape[0]], self.loc.dtype)), ones(shape, self.loc.dtype)

    def _det(self, value):
        """The product of the diagonal (the off-diagonal zeros replaced by ones)."""
        eye, one = self._eye_and_ones(value)
        return reduce_prod(value + one - eye)

    def _inv(self, value):
        """The diagonal's reciprocals (value ** -1 on the diagonal, ** 1 elsewhere: the zeros stay)."""
        eye, one = self._eye_and_ones(value)
        return elementwise_pow(value, one - 2 * eye)

    def entropy(self):
        """0.5 (k (1 + log 2 pi) + log det scale)."""
        return 0.5 * (self.scale.shape[0] * (1.0 + math.log(2 * math.pi)) + log(self._det(self.scale)))

    def kl_divergence(self, other):
        """KL(self || other): 0.5 (tr(S2⁻¹ S1) + (m2 - m1)ᵀ S2⁻¹ (m2 - m1) - k + log det S2 - log det S1)."""
        if not isinstance(other, MultivariateNormalDiag):
            raise TypeError("kl_divergence: other must be a MultivariateNormalDiag")
        inv = self._inv(other.scale)
        trace = reduce_sum(inv * self.scale)
        diff = other.loc - self.loc
        quad = matmul(matmul(diff, inv), diff)
        k = list(self.scale.shape)[0]
        return 0.5 * (trace + quad - k + log(self._det(other.scale)) - log(self._det(self.scale)))
