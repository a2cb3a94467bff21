"""Learning-rate schedules with Paddle 2.x ``paddle.optimizer.lr`` semantics.

A scheduler is plain Python: ``step()`` advances it, ``last_epoch`` counts the steps,
``get_lr()`` computes the rate for ``last_epoch`` and calling it (``scheduler()``) returns the
current rate. Pass one as an optimizer's ``learning_rate``: the optimizer creates the
learning-rate variable (``learning_rate_0``) and registers a run hook on the program that writes
the scheduler's current value into that variable before every ``Executor.run``. The value is an
input of the compiled step, so ``step()`` never causes a recompilation.

>>> sched = PiecewiseDecay(boundaries=[100, 200], values=[0.1, 0.01, 0.001])
>>> # opt = fj.optimizer.SGD(learning_rate=sched); opt.minimize(loss)
>>> # for batch in data: exe.run(feed=batch, fetch_list=[loss]); sched.step()
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

__all__ = ["LRScheduler", "PiecewiseDecay", "ExponentialDecay", "CosineAnnealingDecay", "LinearWarmup",
           "ReduceOnPlateau"]


class LRScheduler:
    """Base class: subclasses define ``get_lr()`` for ``self.last_epoch``.

    ``last_epoch`` starts at ``last_epoch + 1`` (0 by default) because the constructor takes the
    first ``step()``, as in Paddle.
    """

    def __init__(self, learning_rate: float = 0.1, last_epoch: int = -1, verbose: bool = False) -> None:
        if not isinstance(learning_rate, (int, float)):
            raise TypeError(f"learning_rate must be a float or int, got {type(learning_rate).__name__}")
        self.base_lr = float(learning_rate)
        self.last_lr = float(learning_rate)
        self.last_epoch = last_epoch
        self.verbose = verbose
        self._var_name: str | None = None
        self.step()

    def __call__(self) -> float:
        """The current learning rate."""
        return self.last_lr

    def step(self, epoch: int | None = None) -> None:
        """Advance one step (or jump to ``epoch``) and recompute the learning rate."""
        if epoch is None:
            self.last_epoch += 1
            self.last_lr = self.get_lr()
        else:
            self.last_epoch = int(epoch)
            closed_form = getattr(self, "_get_closed_form_lr", None)
            self.last_lr = closed_form() if closed_form is not None else self.get_lr()
        if self.verbose:
            print(f"Epoch {self.last_epoch}: {type(self).__name__} set learning rate to {self.last_lr}.")

    def get_lr(self) -> float:
        """The learning rate at ``self.last_epoch`` (subclasses define it)."""
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any]:
        """The scheduler's state (plain numbers), for checkpoints."""
        return {k: v for k, v in self.__dict__.items()
                if not k.startswith("_") and isinstance(v, (int, float, bool, str, list, tuple, type(None)))}

    def set_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a :meth:`state_dict`."""
        for key, value in state.items():
            setattr(self, key, value)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(last_epoch={self.last_epoch}, lr={self.last_lr})"


class PiecewiseDecay(LRScheduler):
    """``values[i]`` while ``last_epoch < boundaries[i]``; ``values[-1]`` after the last boundary.

    >>> s = PiecewiseDecay([2, 4], [1.0, 0.5, 0.1])
    >>> rates = []
    >>> for _ in range(5):
    ...     rates.append(s())
    ...     s.step()
    >>> rates
    [1.0, 1.0, 0.5, 0.5, 0.1]
    """

    def __init__(self, boundaries: Sequence[int], values: Sequence[float], last_epoch: int = -1,
                 verbose: bool = False) -> None:
        if len(values) != len(boundaries) + 1:
            raise ValueError(f"PiecewiseDecay needs len(values) == len(boundaries) + 1, got {len(values)} values "
                             f"for {len(boundaries)} boundaries")
        self.boundaries = list(boundaries)
        self.values = list(values)
        super().__init__(last_epoch=last_epoch, verbose=verbose)

    def get_lr(self) -> float:
        """The value of the interval ``last_epoch`` falls in."""
        for boundary, value in zip(self.boundaries, self.values):
            if self.last_epoch < boundary:
                return value
        return self.values[-1]


class ExponentialDecay(LRScheduler):
    """``learning_rate * gamma ** last_epoch``."""

    def __init__(self, learning_rate: float, gamma: float, last_epoch: int = -1, verbose: bool = False) -> None:
        if not 0.0 < gamma < 1.0:
            raise ValueError(f"ExponentialDecay needs 0 < gamma < 1, got {gamma}")
        self.gamma = gamma
        super().__init__(learning_rate, last_epoch, verbose)

    def get_lr(self) -> float:
        """base_lr * gamma ** last_epoch."""
        return self.base_lr * self.gamma ** self.last_epoch


class CosineAnnealingDecay(LRScheduler):
    """Cosine annealing from ``learning_rate`` to ``eta_min`` over ``T_max`` steps (SGDR without
    restarts), computed recursively from the previous rate as Paddle does; ``step(epoch)`` uses the
    closed form ``eta_min + (lr - eta_min) * (1 + cos(pi * epoch / T_max)) / 2``.
    """

    def __init__(self, learning_rate: float, T_max: int, eta_min: float = 0, last_epoch: int = -1,
                 verbose: bool = False) -> None:
        if not isinstance(T_max, int) or T_max <= 0:
            raise ValueError(f"CosineAnnealingDecay needs a positive int T_max, got {T_max!r}")
        self.T_max = T_max
        self.eta_min = float(eta_min)
        super().__init__(learning_rate, last_epoch, verbose)

    def get_lr(self) -> float:
        """The cosine-annealed rate at ``last_epoch`` (Paddle's recursive form)."""
        t, T = self.last_epoch, self.T_max
        if t == 0:
            return self.base_lr
        if (t - 1 - T) % (2 * T) == 0:
            return self.last_lr + (self.base_lr - self.eta_min) * (1 - math.cos(math.pi / T)) / 2
        return ((1 + math.cos(math.pi * t / T)) / (1 + math.cos(math.pi * (t - 1) / T))
                * (self.last_lr - self.eta_min) + self.eta_min)

    def _get_closed_form_lr(self) -> float:
        return self.eta_min + (self.base_lr - self.eta_min) * (1 + math.cos(math.pi * self.last_epoch / self.T_max)) / 2


class LinearWarmup(LRScheduler):
    """Linear warm-up from ``start_lr`` to ``end_lr`` over ``warmup_steps``; afterwards
    ``learning_rate`` (a float, or a scheduler stepped to ``last_epoch - warmup_steps``)."""

    def __init__(self, learning_rate: float | LRScheduler, warmup_steps: int, start_lr: float, end_lr: float,
                 last_epoch: int = -1, verbose: bool = False) -> None:
        if not isinstance(learning_rate, (int, float, LRScheduler)):
            raise TypeError(f"learning_rate must be a float or an LRScheduler, got {type(learning_rate).__name__}")
        if not isinstance(warmup_steps, int) or warmup_steps <= 0:
            raise ValueError(f"warmup_steps must be a positive int, got {warmup_steps!r}")
        if end_lr <= start_lr:
            raise ValueError(f"LinearWarmup needs end_lr > start_lr, got {start_lr} -> {end_lr}")
        self.learning_rate = learning_rate
        self.warmup_steps = warmup_steps
        self.start_lr = float(start_lr)
        self.end_lr = float(end_lr)
        super().__init__(start_lr, last_epoch, verbose)

    def get_lr(self) -> float:
        """The warm-up line before ``warmup_steps``, the wrapped rate after."""
        if self.last_epoch < self.warmup_steps:
            return (self.end_lr - self.start_lr) * float(self.last_epoch) / float(self.warmup_steps) + self.start_lr
        if isinstance(self.learning_rate, LRScheduler):
            self.learning_rate.step(self.last_epoch - self.warmup_steps)
            return self.learning_rate()
        return float(self.learning_rate)

    def state_dict(self) -> dict[str, Any]:
        """The scheduler's state, with the wrapped scheduler's."""
        state = super().state_dict()
        if isinstance(self.learning_rate, LRScheduler):
            state["LinearWarmup_LR"] = self.learning_rate.state_dict()
        return state

    def set_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a state from :meth:`state_dict`."""
        state = dict(state)
        inner = state.pop("LinearWarmup_LR", None)
        super().set_state_dict(state)
        if inner is not None and isinstance(self.learning_rate, LRScheduler):
            self.learning_rate.set_state_dict(inner)


class ReduceOnPlateau(LRScheduler):
    """Multiply the rate by ``factor`` once a metric has stopped improving for ``patience`` steps.

    Call ``step(metrics)`` with the monitored value (a number or a one-element array/tensor).
    ``mode`` 'min' means lower is better; ``threshold`` / ``threshold_mode`` ('rel' or 'abs')
    define a significant improvement; ``cooldown`` steps after a reduction ignore the metric; the rate
    never goes below ``min_lr``, and changes smaller than ``epsilon`` are ignored.
    """

    def __init__(self, learning_rate: float, mode: str = "min", factor: float = 0.1, patience: int = 10,
                 threshold: float = 1e-4, threshold_mode: str = "rel", cooldown: int = 0, min_lr: float = 0,
                 epsilon: float = 1e-8, verbose: bool = False) -> None:
        mode = mode.lower()
        if mode not in ("min", "max"):
            raise ValueError(f"mode must be 'min' or 'max', got {mode!r}")
        if factor >= 1.0:
            raise ValueError(f"factor must be smaller than 1.0, got {factor}")
        threshold_mode = threshold_mode.lower()
        if threshold_mode not in ("rel", "abs"):
            raise ValueError(f"threshold_mode must be 'rel' or 'abs', got {threshold_mode!r}")
        if not isinstance(learning_rate, (int, float)):
            raise TypeError(f"learning_rate must be a float or int, got {type(learning_rate).__name__}")
        self.mode = mode
        self.factor = factor
        self.patience = patience
        self.threshold = threshold
        self.threshold_mode = threshold_mode
        self.cooldown = cooldown
        self.min_lr = min_lr
        self.epsilon = epsilon
        self.cooldown_counter = 0
        self.best: float | None = None
        self.num_bad_epochs = 0
        # No first step here (Paddle's ReduceOnPlateau does not take one either).
        self.base_lr = float(learning_rate)
        self.last_lr = float(learning_rate)
        self.last_epoch = 0
        self.verbose = verbose
        self._var_name = None

    def step(self, metrics, epoch: int | None = None) -> None:
        """Record ``metrics`` for this step and reduce the rate if it has plateaued."""
        self.last_epoch = self.last_epoch + 1 if epoch is None else int(epoch)
        value = np.asarray(metrics)
        if value.size != 1:
            raise ValueError(f"metrics must hold one number, got shape {value.shape}")
        current = float(value.reshape(()))
        if self.cooldown_counter > 0:
            # Paddle ignores the metric during cooldown (it is not compared with the best either).
            self.cooldown_counter -= 1
            return
        if self.best is None or self._is_better(current, self.best):
            self.best = current
            self.num_bad_epochs = 0
        else:
            self.num_bad_epochs += 1
        if self.num_bad_epochs > self.patience:
            self.cooldown_counter = self.cooldown
            self.num_bad_epochs = 0
            new_lr = max(self.last_lr * self.factor, self.min_lr)
            if self.last_lr - new_lr > self.epsilon:
                self.last_lr = new_lr
                if self.verbose:
                    print(f"Epoch {self.last_epoch}: ReduceOnPlateau set learning rate to {self.last_lr}.")

    def get_lr(self) -> float:
        """The current rate (changed only by ``step(metrics)``)."""
        return self.last_lr

    def _is_better(self, current: float, best: float) -> bool:
        if self.mode == "min":
            bound = best - best * self.threshold if self.threshold_mode == "rel" else best - self.threshold
            return current < bound
        bound = best + best * self.threshold if self.threshold_mode == "rel" else best + self.threshold
        return current > bound
