"""Fluid 1.x detection training layers: matching, target assignment, SSD/RPN/RetinaNet/YOLOv3 losses (ops in lowering/ops/detection_target.py)."""

from __future__ import annotations

__all__: list[str] = []
