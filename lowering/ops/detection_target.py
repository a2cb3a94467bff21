"""Detection training ops of Fluid 1.x: matching and target assignment (bipartite_match, target_assign, rpn/retinanet target assignment, proposal and mask labels) and the detection losses built on them."""

from __future__ import annotations
