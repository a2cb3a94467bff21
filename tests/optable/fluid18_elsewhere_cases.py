"""Fluid 1.x ops checked by dedicated tests rather than one-op rows (see ``tested_elsewhere``):
their inputs must be mutually consistent (boxes, image sizes, LoD of ROIs per image, anchors),
which a row's random inputs are not, or Paddle 2.6.2 no longer has them. Each named test
compares against Paddle 2.6.2 running our program, or against NumPy where Paddle cannot."""

CASES: list = []

_BOXES = "tests/test_fluid1_detection_boxes.py::"
_TARGETS = "tests/test_fluid1_detection_targets.py::"
_ROI = "tests/test_fluid1_roi_and_sampled_losses.py::"
_CTR = "tests/test_fluid1_ctr_and_odds.py::"
_LABELS = "tests/test_fluid1_detection_labels.py::"
_MAP = "tests/test_fluid1_detection_map.py::"

ELSEWHERE = {
    "multiclass_nms": _BOXES + "test_multiclass_nms_rows_and_lod_match_paddle",
    "multiclass_nms2": _BOXES + "test_detection_output_matches_paddle_with_and_without_index",
    "locality_aware_nms": _BOXES + "test_locality_aware_nms_merges_like_paddle",
    "retinanet_detection_output": _BOXES + "test_retinanet_detection_output_matches_paddle",
    "generate_proposals": _BOXES + "test_generate_proposals_rows_lod_and_counts_match_paddle",
    "collect_fpn_proposals": _BOXES + "test_collect_fpn_proposals_matches_paddle",
    "box_clip": _BOXES + "test_box_clip_lod_matches_paddle_and_plain_rows_clip_per_image",
    "polygon_box_transform": _BOXES + "test_polygon_box_decoder_anchor_and_density_priors_match_paddle",
    "box_decoder_and_assign": _BOXES + "test_polygon_box_decoder_anchor_and_density_priors_match_paddle",
    "anchor_generator": _BOXES + "test_polygon_box_decoder_anchor_and_density_priors_match_paddle",
    "density_prior_box": _BOXES + "test_polygon_box_decoder_anchor_and_density_priors_match_paddle",
    "mean_iou": _BOXES + "test_mean_iou_matches_numpy_of_fluids_kernel",
    "bipartite_match": _TARGETS + "test_bipartite_match_both_kinds_match_paddle_per_instance",
    "target_assign": _TARGETS + "test_target_assign_with_and_without_negatives",
    "mine_hard_examples": _TARGETS + "test_mine_hard_examples_matches_paddle",
    "rpn_target_assign": _TARGETS + "test_rpn_target_assign_deterministic_matches_paddle",
    "retinanet_target_assign": _TARGETS + "test_retinanet_target_assign_matches_paddle",
    "yolov3_loss": _TARGETS + "test_yolov3_loss_and_gradient_match_paddle",
    "psroi_pool": _ROI + "test_psroi_pool_with_lod_rois_matches_paddle_forward_and_grad",
    "prroi_pool": _ROI + "test_prroi_pool_matches_the_exact_integral_with_lod_and_with_batch_roi_nums",
    "deformable_psroi_pooling": _ROI + "test_deformable_roi_pooling_matches_paddle_forward_and_grads",
    "roi_perspective_transform": _ROI + "test_roi_perspective_transform_matches_numpy_and_its_gradient_is_the_sampling_weights",
    "nce": _ROI + "test_nce_with_fixed_negative_classes_matches_paddle_forward_and_grads",
    "sample_logits": _ROI + "test_sampled_softmax_with_customized_samples_matches_numpy_and_its_gradient",
    "hierarchical_sigmoid": _ROI + "test_hsigmoid_matches_paddle_forward_and_grads",
    "center_loss": _ROI + "test_center_loss_moves_the_centres_and_its_gradient_uses_the_batch_diff",
    "data_norm": _CTR + "test_data_norm_and_its_statistics_gradients_match_paddle",
    "cvm": _CTR + "test_cvm_and_its_gradient_match_paddle",
    "hash": _CTR + "test_hash_matches_paddle_and_xxh64",
    "filter_by_instag": _CTR + "test_filter_by_instag_matches_numpy_with_its_gradient",
    "merge_selected_rows": _CTR + "test_selected_rows_helpers_pass_a_dense_tensor_through",
    "get_tensor_from_selected_rows": _CTR + "test_selected_rows_helpers_pass_a_dense_tensor_through",
    "load": _CTR + "test_load_reads_what_save_vars_wrote_and_paddle_agrees",
    "generate_proposal_labels": _LABELS + "test_generate_proposal_labels_matches_paddle",
    "generate_mask_labels": _LABELS + "test_generate_mask_labels_matches_paddle",
    "detection_map": _MAP + "test_detection_map_accumulates_like_paddle",
}
