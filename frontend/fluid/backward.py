"""``fluid.backward``: gradients as ops in the program (re-exports only)."""

from ...ir.backward import append_backward, gradients

__all__ = ["append_backward", "gradients"]
