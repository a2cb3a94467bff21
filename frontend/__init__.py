"""What users type: layer functions, programs, parameters and initializers, operator sugar."""

from . import clip, initializer, layers, math_sugar, nets, optimizer, regularizer  # noqa: F401
from .framework import program_guard
from .param_attr import ParamAttr
from .seed_variable import Variable
from . import reader  # noqa: F401,E402
from .data_feeder import DataFeeder
from .reader import batch

__all__ = ["DataFeeder", "batch", "reader", "ParamAttr", "Variable", "clip", "initializer", "layers", "nets", "optimizer", "program_guard", "regularizer"]
