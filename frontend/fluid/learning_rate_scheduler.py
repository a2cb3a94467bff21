"""``fluid.layers.learning_rate_scheduler``: Fluid 1.x's schedule functions (re-exports only; the
code is in :mod:`fluidjax.frontend.lr_decay_layers`)."""

from ..lr_decay_layers import (_decay_step_counter, cosine_decay, exponential_decay, inverse_time_decay,  # noqa: F401
                              linear_lr_warmup, natural_exp_decay, noam_decay, piecewise_decay, polynomial_decay)

__all__ = ["exponential_decay", "natural_exp_decay", "inverse_time_decay", "polynomial_decay", "piecewise_decay",
           "noam_decay", "cosine_decay", "linear_lr_warmup"]
