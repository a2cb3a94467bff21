"""What users type: layer functions, programs, parameters and initializers, operator sugar."""

from . import clip, initializer, layers, math_sugar, optimizer, regularizer  # noqa: F401
from .framework import program_guard
from .param_attr import ParamAttr
from .seed_variable import Variable

__all__ = ["ParamAttr", "Variable", "clip", "initializer", "layers", "optimizer", "program_guard", "regularizer"]
