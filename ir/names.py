"""Paddle's reserved values that every part of the IR shares: op roles and the empty slot name."""

# Paddle's OpRole values (the `op_role` attribute).
OP_ROLE_FORWARD = 0
OP_ROLE_BACKWARD = 1
OP_ROLE_OPTIMIZE = 2
OP_ROLE_LRSCHED = 16
OP_ROLE_LOSS = 256

# Paddle's name for "no variable here" in a slot (a gradient nobody computes).
EMPTY_VAR_NAME = "@EMPTY@"
