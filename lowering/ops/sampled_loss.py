"""Losses over many classes of Fluid 1.x: nce, sampled softmax, hierarchical sigmoid, center_loss."""

from __future__ import annotations
