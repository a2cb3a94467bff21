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
from .ir.errors import (DataDependentShapeError, InputTypeError, LoDError, LoDTypeError, OpVersionError, ParameterMismatchError,
                        TensorFormatError, UnsafeFormatError)
from .lowering import (BuildStrategy, CompiledProgram, CPUPlace, CUDAPlace, Executor, LoDTensor, Scope,
                       TPUPlace, global_scope)
from .lowering.flags import get_flags, set_flags
from .ir.errors import LoopBoundError, ReentrantRunError, ResourceExhaustedError
from .lowering.executor import compiled_memory
from .frontend import DataFeeder, batch, reader
from .lowering.lod_tensor import create_lod_tensor, create_random_int_lodtensor
from .frontend.drawing import draw
from .frontend.training_loop import History, evaluate, train
from .ir.callstack import install_notebook_tracebacks as _install_notebook_tracebacks
from .lowering import distributed  # noqa: E402  (fj.distributed: multi-process runs)
from .frontend import io  # noqa: E402  (fj.io: Paddle's saved models and checkpoints, StableHLO export)
from .frontend import passes  # noqa: E402  (fj.passes: conv+bn folding, NHWC layout for inference)
from .frontend import drawing as _drawing  # noqa: E402

# Fluid 1.x's names: `import fluidjax as fluid` runs `paddle.fluid` scripts (docs/fluid1.md).
from .frontend import fluid as _fluid  # noqa: E402
from .frontend import layers  # noqa: E402  (Fluid's name for fj.layer: the same module)
from .frontend.data_layers import static_data as data  # noqa: E402  (fluid.data: the shape has the batch dim)
from .frontend.input_layers import embedding  # noqa: E402  (fluid.embedding: lookup_table_v2, no squeeze)
from .frontend.tensor_layers import one_hot_v2 as one_hot  # noqa: E402  (fluid.one_hot: one_hot_v2)
from .frontend.fluid import backward, compiler, core, dygraph, executor, framework, transpiler  # noqa: E402,F401
from .frontend.framework import in_dygraph_mode, name_scope  # noqa: E402
from .ir.backward import gradients  # noqa: E402
from .ir.errors import NotOfferedError  # noqa: E402
from .lowering.parallel import ExecutionStrategy  # noqa: E402
from .lowering.places import CUDAPinnedPlace, cpu_places, cuda_places, is_compiled_with_cuda  # noqa: E402
from .lowering.scope import scope_guard  # noqa: E402
from .frontend import data_feeder, param_attr  # noqa: E402,F401
from .frontend.fluid.parallel_executor import ParallelExecutor  # noqa: E402  (a CompiledProgram run)
from .frontend.memory_optimization import memory_optimize, release_memory  # noqa: E402  (no-ops, as in Fluid 1.6+)
from .frontend.param_attr import WeightNormParamAttr  # noqa: E402

Tensor = LoDTensor  # Fluid 1.x's name for a tensor without LoD
from .frontend.data_loader import DataLoader, PyReader  # noqa: E402
from .ir.errors import EOFException  # noqa: E402
from .ir.errors import BoundExceededError  # noqa: E402  (a size a compiled step fixes, exceeded)
from .lowering.jax_function import from_jax, to_jax  # noqa: E402  (a program as a JAX function: docs/jax.md)
from .frontend.jax_bridge import to_flax  # noqa: E402  (the same as a flax.linen Module)

# Public module paths whose code lives in the four folders: `import fluidjax.io`,
# `python -m fluidjax.distributed.launch`, `from fluidjax.reader import shuffle`, and Fluid's
# paths (`import fluidjax.layers as layers`, `from fluidjax.executor import Executor`) work as
# the attributes do. The root holds no other module (docs/layout.md).
for _name, _module in {"passes": passes, "distributed": distributed, "viz": _drawing,
                       **_fluid.MODULE_PATHS}.items():
    _sys.modules[f"{__name__}.{_name}"] = _module
    globals().setdefault(_name, _module)
reader = _fluid.MODULE_PATHS["reader"]  # the decorators and Fluid's loaders
for _name, _module in _fluid.SUBMODULE_PATHS.items():
    _sys.modules[f"{__name__}.{_name}"] = _module
    _parent, _, _leaf = _name.rpartition(".")
    setattr(_sys.modules[f"{__name__}.{_parent}"], _leaf, _module)
# Every other module path of Fluid 1.8 (fluidjax.layers.nn, .layers.control_flow, .contrib.slim,
# .transpiler.distribute_transpiler, .wrapped_decorator, ...), from one table (frontend/fluid/paths.py).
from .frontend.fluid import paths as _fluid_paths  # noqa: E402

_fluid_paths.install(_sys.modules[__name__])

# Parts of Fluid fluidjax deliberately does not offer: a clear error, not an AttributeError.
_NOT_OFFERED = {
    "dygraph_guard": "dygraph (eager mode)", "enable_dygraph": "dygraph (eager mode)",
    "disable_dygraph": "dygraph (eager mode)", "enable_imperative": "dygraph (eager mode)",
    "disable_imperative": "dygraph (eager mode)", "VarBase": "dygraph (eager mode)",
    "DistributeTranspiler": "the parameter-server transpiler", "XPUPlace": "Baidu XPU devices", "NPUPlace": "Ascend NPU devices",
    "load_op_library": "custom C++ operators",
}


def __getattr__(name: str):
    if name in _NOT_OFFERED:  # importable (a script's top-level import); using it raises NotOfferedError
        stand_in = _fluid_paths.not_offered("", name, f"{_NOT_OFFERED[name]} is not offered by fluidjax, which "
                                            "runs static programs lowered to JAX (docs/fluid1.md lists what is offered)")
        globals()[name] = stand_in
        return stand_in
    if not name.startswith("__"):  # the rest of Fluid 1.8's paddle.fluid namespace (frontend/fluid/paths.py)
        return _fluid_paths.root_attribute(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
_install_notebook_tracebacks()  # in Jupyter, fluidjax errors show the user's cells only

__version__ = "0.1.0"

__all__ = [
    "BuildStrategy", "CompiledProgram", "distributed", "FluidJaxError", "IndexOutOfRangeError", "NumericCheckError", "ProgramFormatError",
    "LoopBoundError", "ReentrantRunError", "ResourceExhaustedError", "compiled_memory",
    "BoundExceededError", "to_jax", "from_jax", "to_flax",
    "UnregisteredOpError", "VariableNotFoundError", "OpVersionError", "ParameterMismatchError", "TensorFormatError",
    "UnsafeFormatError", "InputTypeError", "LoDError", "LoDTypeError", "DataDependentShapeError",
    "get_flags", "set_flags", "CPUPlace", "CUDAPlace", "append_backward", "Executor", "FeedError", "LoDTensor", "OpRuntimeError", "ParamAttr", "Parameter",
    "Program", "Scope", "ShapeError", "SymbolicValueError", "TPUPlace", "UninitializedVariableError", "Variable",
    "default_main_program", "default_startup_program", "global_scope", "infer_shapes", "initializer", "layer",
    "program_guard", "unique_name", "nets", "optimizer", "regularizer", "clip",
    "DataFeeder", "batch", "create_lod_tensor", "create_random_int_lodtensor", "reader",
    "draw", "History", "evaluate", "train",
    # Fluid 1.x's names
    "layers", "data", "core", "executor", "framework", "backward", "compiler", "io", "dygraph", "transpiler",
    "scope_guard", "name_scope", "in_dygraph_mode", "gradients", "NotOfferedError", "ExecutionStrategy",
    "CUDAPinnedPlace", "cpu_places", "cuda_places", "is_compiled_with_cuda", "Tensor", "data_feeder", "DataLoader",
    "PyReader", "EOFException",
    "param_attr", "embedding", "amp", "contrib", "ParallelExecutor", "metrics", "evaluator",
    "profiler", "memory_optimize", "release_memory", "WeightNormParamAttr",
]
