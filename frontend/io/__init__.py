"""Saved models and checkpoints in Paddle's formats, and StableHLO export: ``fj.io``.

- :mod:`.saved`: ``save_inference_model`` / ``load_inference_model`` (``.pdmodel`` +
  ``.pdiparams``, and Fluid 1.x directories), ``save_persistables`` / ``load_persistables``,
  ``save_params`` / ``load_params``, ``save_vars`` / ``load_vars``.
- :mod:`.tensor_stream`: the byte layout of one tensor in Paddle's files.
- :mod:`.export`: a program's inference function as a ``jax.export.Exported``.
- :mod:`.checks`: the op types and versions a saved program may use.
- :mod:`.program_state`: Fluid 1.6+'s ``save`` / ``load`` / ``load_program_state`` /
  ``set_program_state`` (``.pdparams``/``.pdopt``/``.pdmodel``; fluidjax's own state file, never pickle).
- :mod:`.compiled`: compiled executables saved beside a model (``compiled=True``, ``fluidjax compile``).

>>> # exe.run(startup); ...train...
>>> # fj.io.save_inference_model("out/model", [x], [prob], exe)
>>> # program, feeds, fetches = fj.io.load_inference_model("out/model", exe)
"""

from ..data_loader import DataLoader, PyReader
from ..reader import batch, buffered, chain, compose, firstn, map_readers, shuffle
from .checks import FEED_FETCH_OPS, SUPPORTED_OP_VERSIONS, check_program, names_of
from .compiled import CompiledModelWarning, compiled_path
from .program_state import load, load_program_state, save, set_program_state
from .saved import (PROGRAM_VERSION, compile_saved_model, export, feed_target_names, fetch_target_names,
                    load_inference_model, load_params, load_persistables, load_vars, persistable_vars, read_program,
                    resolve_model_paths, save_inference_model, save_params, save_persistables, save_program_files,
                    save_vars)
from .variables import (get_parameter_value, get_parameter_value_by_name, get_program_parameter,
                        get_program_persistable_vars, is_belong_to_optimizer, is_parameter, is_persistable)

__all__ = ["save_inference_model", "load_inference_model", "save_persistables", "load_persistables",
           "save_params", "load_params", "save_vars", "load_vars", "export", "feed_target_names",
           "fetch_target_names", "check_program", "resolve_model_paths", "persistable_vars", "read_program",
           "save_program_files", "names_of", "SUPPORTED_OP_VERSIONS", "PROGRAM_VERSION", "FEED_FETCH_OPS",
           # compiled executables saved with a model (compiled.py)
           "compile_saved_model", "compiled_path", "CompiledModelWarning",
           # Fluid 1.x's fluid.io also holds the loaders and the reader decorators
           "DataLoader", "PyReader", "batch", "buffered", "chain", "compose", "firstn", "map_readers", "shuffle",
           # Fluid 1.6+'s program state (program_state.py)
           "save", "load", "load_program_state", "set_program_state",
           # Fluid 1.x's predicates and accessors of a program's variables
           "is_parameter", "is_persistable", "is_belong_to_optimizer", "get_program_parameter",
           "get_program_persistable_vars", "get_parameter_value", "get_parameter_value_by_name"]
