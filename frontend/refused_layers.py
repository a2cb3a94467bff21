"""The names of Fluid 1.8's ``fluid.layers`` that fluidjax does not offer, each with the reason.

Every name of Fluid 1.8's ``paddle.fluid.layers`` exists in ``fluidjax.layers``
(``tests/fluid18_layers.txt`` lists them; ``tests/test_fluid1_layers_coverage.py`` checks it). The
names here exist so that a script using one fails with a
:class:`~fluidjax.ir.errors.NotOfferedError` that says what is missing and why, when the layer is
called, never with an ``AttributeError``. docs/fluid1.md has the summary.
"""

from __future__ import annotations

from typing import Callable

from ..ir.errors import NotOfferedError

_SELECTED_ROWS = "SelectedRows values: fluidjax's gradients and tables are dense tensors"
_DETECTION = ("a detection op fluidjax does not implement (the detection ops it implements are prior_box, box_coder, "
              "yolo_box, multiclass_nms3, matrix_nms, roi_align, roi_pool, generate_proposals_v2, "
              "distribute_fpn_proposals)")
_SAMPLED = "a loss whose op samples classes inside the kernel (CPU-only, data-dependent sampling)"
_CTR = "a CTR/recommendation op of Paddle's parameter-server stack"
_UNWRITTEN = ("not written in fluidjax (no op or composition of ops for it; the Fluid 1.x programs fluidjax is "
              "tested with do not use it)")

#: name -> why fluidjax does not offer it.
REFUSED: dict[str, str] = {
    # tensors that are not dense LoD tensors
    "merge_selected_rows": _SELECTED_ROWS,
    "get_tensor_from_selected_rows": _SELECTED_ROWS,
    # Python and file access inside a compiled step
    "load": "the `load` op (reading a file inside a program); use fluid.io.load_vars / load_params",
    # sampling losses and CTR ops
    "nce": _SAMPLED,
    "hsigmoid": "hierarchical sigmoid (its custom-tree path tables are CPU-kernel specific)",
    "sampled_softmax_with_cross_entropy": _SAMPLED,
    "center_loss": "center_loss (its op updates the centers inside the forward pass)",
    "continuous_value_model": _CTR,
    "filter_by_instag": _CTR,
    "data_norm": _CTR,
    "hash": "the xxhash-based `hash` op",
    # detection
    **{name: _DETECTION for name in (
        "density_prior_box", "multi_box_head", "bipartite_match", "target_assign", "detection_output",
        "ssd_loss", "rpn_target_assign", "retinanet_target_assign", "anchor_generator",
        "roi_perspective_transform", "generate_proposal_labels", "generate_mask_labels", "polygon_box_transform",
        "yolov3_loss", "box_clip", "locality_aware_nms", "retinanet_detection_output", "box_decoder_and_assign",
        "collect_fpn_proposals", "psroi_pool", "prroi_pool", "deformable_roi_pooling", "mean_iou")},
    # neither an op nor a composition of ops written yet
    **{name: _UNWRITTEN for name in (
        "inplace_abn", "multiclass_nms", "generate_proposals")},
    "SampleEmbeddingHelper": ("a decoder helper that samples inside the decoding loop is not written "
                              "(GreedyEmbeddingHelper and TrainingHelper are offered)"),
}


def _refused(name: str, reason: str) -> Callable:
    def layer(*args, **kwargs):
        raise NotOfferedError(f"fluid.layers.{name} is not offered by fluidjax: {reason} (docs/fluid1.md)")

    layer.__name__ = layer.__qualname__ = name
    layer.__doc__ = f"Not offered: {reason}. Calling it raises NotOfferedError."
    layer.__fluidjax_not_offered__ = reason
    return layer


for _name, _reason in REFUSED.items():
    globals()[_name] = _refused(_name, _reason)

__all__ = list(REFUSED)
