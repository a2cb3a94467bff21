"""Fluid 1.x losses over many classes: nce, sampled_softmax_with_cross_entropy, hsigmoid, center_loss (ops in lowering/ops/sampled_loss.py)."""

from __future__ import annotations

__all__: list[str] = []
