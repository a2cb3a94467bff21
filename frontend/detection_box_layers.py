"""Fluid 1.x detection layers over boxes and anchors (ops in lowering/ops/detection_boxes.py)."""

from __future__ import annotations

__all__: list[str] = []
