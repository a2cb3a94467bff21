"""What every reader and writer of saved programs checks first: the op types and versions
fluidjax implements, and which names a list of Variables or names stands for."""

from __future__ import annotations

from ...ir import registry
from ...ir.errors import OpVersionError, UnregisteredOpError
from ...ir.program import Program
from ...ir.variable import names_of  # noqa: F401  (the save/load functions use it from here)

# The op versions Paddle 2.6.2 registers (REGISTER_OP_VERSION; the op_version_map it writes into
# every saved program). An op not listed is at version 0. fluidjax's op rules follow Paddle
# 2.6.2, so it runs each op at the version listed and every earlier one (Paddle's upgrades add
# attributes or inputs with defaults that keep the older meaning); a program saved with a later
# version than this, by a newer Paddle, may mean something fluidjax does not implement.
SUPPORTED_OP_VERSIONS: dict[str, int] = {
    "affine_grid": 1, "allclose": 2, "auc": 1, "clip": 1, "coalesce_tensor": 2, "collect_fpn_proposals": 1,
    "conv2d": 1, "conv2d_transpose": 2, "conv3d": 1, "conv3d_transpose": 1, "cudnn_lstm": 1, "cumsum": 1,
    "data_norm": 1, "depthwise_conv2d": 1, "depthwise_conv2d_transpose": 1, "dequantize": 1,
    "distribute_fpn_proposals": 2, "elementwise_add": 1, "elementwise_div": 1, "elementwise_mul": 1,
    "elementwise_pow": 1, "elementwise_sub": 1, "equal": 1, "fake_channel_wise_dequantize_max_abs": 2,
    "fake_channel_wise_quantize_abs_max": 1, "fill_constant": 2, "flip": 1, "for_pybind_test__": 4,
    "gather": 1, "generate_proposal_labels": 2, "generate_proposals": 2, "generate_proposals_v2": 1,
    "greater_equal": 1, "greater_than": 1, "grid_sampler": 1, "hard_shrink": 1, "instance_norm": 1,
    "lamb": 1, "leaky_relu": 1, "less_equal": 1, "less_than": 1, "linspace": 1, "lookup_table": 1,
    "lookup_table_v2": 1, "lstsq": 1, "matmul": 1, "matrix_nms": 1, "mish": 1, "momentum": 1,
    "moving_average_abs_max_scale": 2, "not_equal": 1, "p_norm": 1, "pixel_shuffle": 1, "print": 1,
    "quantize": 2, "rank_attention": 1, "requantize": 1, "roi_align": 3, "roi_pool": 2, "roll": 2,
    "seed": 1, "send_and_recv": 1, "set_value": 4, "softplus": 1, "trace": 1, "transfer_layout": 1,
    "unique_consecutive": 1, "yolo_box": 1,
}

# Ops that move data between the caller and the program: the Executor feeds and fetches by name.
FEED_FETCH_OPS = frozenset({"feed", "fetch"})

def check_program(program: Program, source: str = "the program") -> None:
    """Refuse a program fluidjax cannot run faithfully, before anything runs: every op type it
    does not implement, across all blocks, in one :class:`UnregisteredOpError`; an op saved with a
    version newer than fluidjax implements, :class:`OpVersionError`."""
    missing: dict[str, int] = {}
    used: set[str] = set()
    for block in program.blocks:
        for op in block.ops:
            used.add(op.type)
            if op.type not in FEED_FETCH_OPS and not registry.has(op.type):
                missing[op.type] = missing.get(op.type, 0) + 1
    if missing:
        listed = ", ".join(f"{t} (x{n})" for t, n in sorted(missing.items()))
        raise UnregisteredOpError(f"{source} uses {len(missing)} op type(s) fluidjax does not implement: {listed}")
    for name, version in program.op_version_map or ():
        if name in used and version > SUPPORTED_OP_VERSIONS.get(name, 0):
            supported = SUPPORTED_OP_VERSIONS.get(name, 0)
            raise OpVersionError(
                f"{source} was saved with op {name!r} at version {version}; fluidjax implements versions "
                f"0..{supported} of {name!r} (Paddle 2.6.2's), so it cannot promise the saved semantics")


def ops_needed(ops, targets, feeds, outputs_of, inputs_of) -> tuple[list, set[str]]:
    """The ops of ``ops`` (in order) that compute ``targets`` given ``feeds``, found walking back
    from the targets, and every name they need; feed and fetch ops are skipped. ``outputs_of`` /
    ``inputs_of`` give an op's names (IR ops and ProgramDesc ops alike)."""
    needed, feeds, kept = set(targets), set(feeds), []
    for op in reversed(list(ops)):
        if op.type in FEED_FETCH_OPS:
            continue
        if (outputs_of(op) & needed) - feeds:
            kept.append(op)
            needed |= inputs_of(op)
    kept.reverse()
    return kept, needed
