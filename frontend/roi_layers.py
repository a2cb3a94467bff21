"""Fluid 1.x ROI pooling variants (ops in lowering/ops/roi_variants.py)."""

from __future__ import annotations

__all__: list[str] = []
