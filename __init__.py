"""fluidjax: PaddlePaddle Fluid programs — built with a layer API, shape-checked, serialized in
Paddle's wire format — lowered to ``jax.jit`` functions that run on CPU, GPU or TPU.

>>> import fluidjax as fj
>>> from fluidjax import layer
>>> x = layer.data("images", input_size=64 * 64)
>>> y = layer.fc(x, output_size=100, activation="softmax")
"""

import sys as _sys

from . import ir, lowering  # noqa: F401  (lowering registers the ops)
from .frontend import ParamAttr, Variable, clip, initializer, nets, optimizer, program_guard, regularizer
from .frontend import layers as layer
from .ir import (FeedError, FluidJaxError, IndexOutOfRangeError, NumericCheckError, ProgramFormatError,
                 UnregisteredOpError, VariableNotFoundError, append_backward, OpRuntimeError, Parameter, Program, ShapeError, SymbolicValueError,
                 UninitializedVariableError, default_main_program, default_startup_program, infer_shapes,
                 unique_name)
from .ir.errors import OpVersionError, ParameterMismatchError, TensorFormatError, UnsafeFormatError
from .lowering import (BuildStrategy, CompiledProgram, CPUPlace, CUDAPlace, Executor, LoDTensor, Scope,
                       TPUPlace, global_scope)
from .lowering.flags import get_flags, set_flags
from .frontend import DataFeeder, batch, reader
from .lowering.lod_tensor import create_lod_tensor, create_random_int_lodtensor
from .frontend.drawing import draw
from .frontend.training_loop import History, evaluate, train
from .ir.callstack import install_notebook_tracebacks as _install_notebook_tracebacks
from .lowering import distributed  # noqa: E402  (fj.distributed: multi-process runs)
from .frontend import io  # noqa: E402  (fj.io: Paddle's saved models and checkpoints, StableHLO export)
from .frontend import passes  # noqa: E402  (fj.passes: conv+bn folding, NHWC layout for inference)
from .frontend import drawing as _drawing  # noqa: E402

# Public module paths whose code lives in the four folders: `import fluidjax.io`,
# `python -m fluidjax.distributed.launch`, `from fluidjax.reader import shuffle` work as the
# attributes do. The root holds no other module (docs/layout.md).
for _name, _module in {"io": io, "passes": passes, "distributed": distributed, "reader": reader,
                       "viz": _drawing}.items():
    _sys.modules[f"{__name__}.{_name}"] = _module
_install_notebook_tracebacks()  # in Jupyter, fluidjax errors show the user's cells only

__version__ = "0.1.0"

__all__ = [
    "BuildStrategy", "CompiledProgram", "distributed", "FluidJaxError", "IndexOutOfRangeError", "NumericCheckError", "ProgramFormatError",
    "UnregisteredOpError", "VariableNotFoundError", "OpVersionError", "ParameterMismatchError", "TensorFormatError",
    "UnsafeFormatError",
    "get_flags", "set_flags", "CPUPlace", "CUDAPlace", "append_backward", "Executor", "FeedError", "LoDTensor", "OpRuntimeError", "ParamAttr", "Parameter",
    "Program", "Scope", "ShapeError", "SymbolicValueError", "TPUPlace", "UninitializedVariableError", "Variable",
    "default_main_program", "default_startup_program", "global_scope", "infer_shapes", "initializer", "layer",
    "program_guard", "unique_name", "nets", "optimizer", "regularizer", "clip",
    "DataFeeder", "batch", "create_lod_tensor", "create_random_int_lodtensor", "reader",
    "draw", "History", "evaluate", "train",
]
