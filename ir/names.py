"""Paddle's reserved values that every part of the IR shares: op roles and the empty slot name."""

# Paddle's OpRole values (the `op_role` attribute).
OP_ROLE_FORWARD = 0
OP_ROLE_BACKWARD = 1
OP_ROLE_OPTIMIZE = 2
OP_ROLE_LRSCHED = 16
OP_ROLE_LOSS = 256

# Paddle's name for "no variable here" in a slot (a gradient nobody computes).
EMPTY_VAR_NAME = "@EMPTY@"

# The attribute RecomputeOptimizer sets on the forward ops it copies into the backward pass (the
# recomputation of one segment, numbered by its value): the lowering runs each such group behind
# an optimization barrier so XLA recomputes it there instead of keeping the forward's values.
# Paddle ignores attributes its ops do not declare, so it runs these programs too.
RECOMPUTE_SEGMENT_ATTR = "recompute_segment"

# The attribute RecomputeOptimizer sets on a random op of a recomputed segment and on its copy
# (the same number on both): the lowering gives the copy its forward op's key, so it draws the
# same numbers (see lowering/remat.py).
RECOMPUTE_KEY_ATTR = "recompute_key"
