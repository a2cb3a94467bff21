"""Fluid 1.x CTR layers and odds: data_norm, continuous_value_model, filter_by_instag, hash, inplace_abn, selected-rows helpers, load (ops in lowering/ops/ctr.py)."""

from __future__ import annotations

__all__: list[str] = []
