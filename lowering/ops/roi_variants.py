"""ROI pooling variants of Fluid 1.x: psroi_pool, prroi_pool, deformable_roi_pooling, roi_perspective_transform."""

from __future__ import annotations
