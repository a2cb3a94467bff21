"""Detection ops on boxes and anchors added for Fluid 1.x's fluid.layers (box_clip, polygon_box_transform, box_decoder_and_assign, anchor_generator, density_prior_box, the v1 NMS and proposal ops, ...)."""

from __future__ import annotations
