"""``fluid.contrib.mixed_precision``: Fluid 1.x's mixed-precision names. The code is
:mod:`fluidjax.frontend.amp` (``fluidjax.amp``); ``decorate`` here is Fluid's form,
``decorate(optimizer, amp_lists=None, init_loss_scaling=2**15, incr_every_n_steps=1000,
decr_every_n_nan_or_inf=2, incr_ratio=2.0, decr_ratio=0.8, use_dynamic_loss_scaling=True,
use_pure_fp16=False, use_fp16_guard=None, use_bf16=False)``."""

from ..amp import (AutoMixedPrecisionLists, CustomOpLists, OptimizerWithMixedPrecision, bf16_guard,  # noqa: F401
                   cast_model_to_fp16, fp16_guard)
from ..amp import _decorate_fluid as decorate  # noqa: F401

__all__ = ["decorate", "AutoMixedPrecisionLists", "CustomOpLists", "OptimizerWithMixedPrecision", "fp16_guard",
           "bf16_guard", "cast_model_to_fp16"]
