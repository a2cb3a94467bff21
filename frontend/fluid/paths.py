"""Every module path of Fluid 1.8 as a module of fluidjax, from one table.

``import paddle.fluid.layers.control_flow``, ``from paddle.fluid.layers.learning_rate_scheduler
import _decay_step_counter``, ``from paddle.fluid.transpiler import DistributeTranspiler``: Fluid
scripts import by path, private helpers included. :data:`fluid18_names.ALL` / ``EXTRA`` list
Fluid 1.8.5's module paths and each one's public names; :data:`ROUTES` says, per path prefix,
which fluidjax modules answer for those names and why a name none of them has is not offered.
:func:`install` turns the table into modules (the design rule: they hold no logic, only
re-exports):

- a path fluidjax has no module for becomes a module whose ``__all__`` is Fluid 1.8's and whose
  names are the sources' objects; a path that is already a real module (``fluidjax.layers``,
  ``fluidjax.io``, ...) keeps its own names and answers the rest from the table;
- a name of the table that no source has is a *not-offered stand-in*: importing it works (a
  script's ``from paddle.fluid.dygraph import Layer`` at the top), using it — calling it,
  instantiating it or a subclass, reading its attributes — raises
  :class:`~fluidjax.ir.errors.NotOfferedError` with the route's reason;
- a private name a script imports by path (``_decay_step_counter``) is looked up in the sources;
- Fluid's packages get ``__path__`` and every path is in ``sys.modules`` and an attribute of its
  parent (unless the parent has a non-module attribute of that name, as Fluid's ``layers.rnn`` is
  the function), and a finder on ``sys.meta_path`` serves a path whose ``sys.modules`` entry was
  removed.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from types import ModuleType

from ...ir import program as _ir_program
from ...ir import unique_name, variable as _ir_variable
from ...ir.errors import NotOfferedError
from ...lowering import executor as _lowering_executor
from ...lowering import lod_tensor, parallel, places
from .. import contrib_decoder, data_generator, dataset, fleet
from .. import (amp, clip, data_feeder, data_layers, data_loader, fluid_helpers, framework as _frontend_framework,
                initializer, input_layers, layer_helper, layers, memory_optimization, metrics, nets,
                optimizer, param_attr, reader as _reader, regularizer, tensor_layers)
from .. import io as _io
from . import backward, compiler, core, executor, framework, mixed_precision, parallel_executor
from .fluid18_names import ALL, EXTRA, PACKAGES

__all__ = ["ROUTES", "install", "not_offered", "root_attribute", "NOT_OFFERED_REASONS", "NAMED_REASONS"]

_DYGRAPH = ("dygraph (eager mode) is not offered: fluidjax runs Fluid's static graph (programs lowered to "
            "jax.jit). Build the model with fluid.layers inside a Program, or use JAX directly for eager code")
_PSERVER = ("the parameter-server transpiler and PSLib are not offered (the transpiler fleet is one local trainer: "
            "frontend/fleet.py): fluidjax runs data-parallel and sharded training through XLA "
            "(fluid.CompiledProgram(main).with_data_parallel(...), fluidjax.distributed; docs/scaling.md)")
_CPP_RUNTIME = ("Paddle's C++ trainers, device workers and data-feed descriptions are not offered: "
                "fluid.DatasetFactory's QueueDataset / InMemoryDataset run on the host through "
                "exe.train_from_dataset (frontend/dataset.py); or feed batches with fluid.io.DataLoader")
_CONTRIB = ("of fluid.contrib, fluidjax offers mixed_precision (fluid.contrib.mixed_precision.decorate; "
            "fluidjax.amp) and memory_usage; the other contributed modules (slim, quantization, the contrib "
            "layers and decoder, extend_optimizer, ...) are not offered")
_DRAWING = "Paddle's graph debugger is not offered: draw a program with fluidjax.draw(program)"
_INTERNAL = ("this part of Paddle's Python runtime (C++ operator protos, IR graphs, op registration) has no "
             "counterpart in fluidjax, whose programs are lowered to JAX")

# The reasons, for docs and tests: path prefix -> why its names without a fluidjax object are refused.
NOT_OFFERED_REASONS: dict[str, str] = {}

# Path prefix -> (sources, aliases, reason). The longest matching prefix wins. A name is taken
# from the aliases (Fluid's name -> fluidjax's object), else from the first source that has it.
ROUTES: dict[str, tuple[tuple, dict, str]] = {
    "layers": ((layers,), {}, "fluidjax.layers has no such layer"),
    "layers.utils": ((fluid_helpers,), {}, _INTERNAL),
    "layers.layer_function_generator": ((fluid_helpers,), {}, _INTERNAL),
    "layers.math_op_patch": ((fluid_helpers,), {}, _INTERNAL),
    "io": ((_io, data_loader, _reader, fluid_helpers), {}, "fluid.io has no such function in fluidjax"),
    "initializer": ((initializer,), {}, "fluidjax has no such initializer"),
    "param_attr": ((param_attr,), {}, _INTERNAL),
    "regularizer": ((regularizer,), {}, "fluidjax has no such regularizer"),
    "clip": ((clip,), {}, "fluidjax has no such clip"),
    "optimizer": ((optimizer,), {}, "fluidjax has no such optimizer"),
    "nets": ((nets,), {}, "fluidjax has no such net"),
    "metrics": ((metrics,), {}, "fluidjax has no such metric"),
    "unique_name": ((unique_name,), {}, _INTERNAL),
    "framework": ((framework, _frontend_framework, _ir_program, _ir_variable, places),
                  {"device_guard": fluid_helpers.device_guard, "require_version": fluid_helpers.require_version},
                  _INTERNAL),
    "executor": ((executor, _lowering_executor), {}, _INTERNAL),
    "compiler": ((compiler, parallel), {}, _INTERNAL),
    "backward": ((backward,), {}, _INTERNAL),
    "core": ((core, places), {}, _INTERNAL),
    "lod_tensor": ((lod_tensor,), {}, _INTERNAL),
    "data_feeder": ((data_feeder,), {}, _INTERNAL),
    "parallel_executor": ((parallel_executor,), {}, _INTERNAL),
    "input": ((input_layers,), {"one_hot": tensor_layers.one_hot_v2}, _INTERNAL),
    "data": ((), {"data": data_layers.static_data}, _INTERNAL),
    "layer_helper": ((layer_helper,), {}, _INTERNAL),
    "layer_helper_base": ((layer_helper,), {"LayerHelperBase": layer_helper.LayerHelper}, _INTERNAL),
    "wrapped_decorator": ((fluid_helpers,), {}, _INTERNAL),
    "log_helper": ((fluid_helpers,), {}, _INTERNAL),
    "reader": ((_reader, data_loader), {}, _INTERNAL),
    "dataloader": ((), {}, ("Paddle 2's map-style Dataset / BatchSampler loaders are not offered: use "
                            "fluid.io.DataLoader.from_generator")),
    "contrib": ((fluid_helpers, contrib_decoder), {}, _CONTRIB),
    "contrib.decoder": ((contrib_decoder,), {}, _CONTRIB),
    "contrib.mixed_precision": ((mixed_precision, amp), {}, _CONTRIB),
    "contrib.memory_usage_calc": ((fluid_helpers,), {}, _CONTRIB),
    "dygraph": ((), {"enabled": _frontend_framework.in_dygraph_mode, "no_grad": fluid_helpers.no_grad}, _DYGRAPH),
    "dygraph_utils": ((), {}, _DYGRAPH),
    "transpiler": ((memory_optimization,), {"DistributeTranspilerConfig": fleet.DistributeTranspilerConfig}, _PSERVER),
    "incubate": ((), {}, _PSERVER),
    "incubate.data_generator": ((data_generator,), {}, _PSERVER),
    "incubate.fleet.base.role_maker": ((fleet,), {}, _PSERVER),
    "incubate.fleet.base.fleet_base": ((fleet,), {"Fleet": fleet.Fleet}, _PSERVER),
    "incubate.fleet.base.mode": ((fleet,), {}, _PSERVER),
    "incubate.fleet.parameter_server.distribute_transpiler": ((fleet,), {}, _PSERVER),
    "distributed": ((), {}, _PSERVER),
    "communicator": ((), {}, _PSERVER),
    "distribute_lookup_table": ((), {}, _PSERVER),
    "dataset": ((dataset,), {}, _CPP_RUNTIME),
    "data_feed_desc": ((), {}, _CPP_RUNTIME),
    "device_worker": ((), {}, _CPP_RUNTIME),
    "trainer_desc": ((), {}, _CPP_RUNTIME),
    "trainer_factory": ((), {}, _CPP_RUNTIME),
    "debugger": ((), {}, _DRAWING),
    "graphviz": ((), {}, _DRAWING),
    "net_drawer": ((), {}, _DRAWING),
    "evaluator": ((), {}, "fluid.evaluator has no such evaluator in fluidjax"),
    "profiler": ((), {}, "fluid.profiler has no such call in fluidjax"),
    "average": ((), {}, _INTERNAL),
    "annotations": ((), {}, _INTERNAL),
    "op": ((), {}, _INTERNAL),
    "default_scope_funcs": ((), {}, _INTERNAL),
    "install_check": ((), {}, _INTERNAL),
    "multiprocess_utils": ((), {}, _INTERNAL),
}
NOT_OFFERED_REASONS.update({prefix: route[2] for prefix, route in ROUTES.items()})

# Names refused for a reason of their own (Fluid path.name -> reason), ahead of the route's.
NAMED_REASONS: dict[str, str] = {
    "optimizer.DpsgdOptimizer": "the differentially private SGD optimizer (dpsgd op) is not offered",
    "optimizer.PipelineOptimizer": ("Fluid's pipeline optimizer (section programs on several devices) is not "
                                    "offered: fluidjax runs a whole step as one XLA program"),
}

# Fluid paths whose fluidjax module is a real one installed elsewhere (fluid/__init__.py's
# MODULE_PATHS); the sources above also answer for their missing names.
_ROOT_DUNDERS = frozenset({"__path__", "__file__", "__spec__", "__loader__", "__package__", "__wrapped__"})


def _route(path: str) -> tuple[tuple, dict, str]:
    parts = path.split(".")
    for n in range(len(parts), 0, -1):
        route = ROUTES.get(".".join(parts[:n]))
        if route is not None:
            return route
    return (), {}, _INTERNAL


class _NotOfferedType(type):
    """The metaclass of not-offered stand-ins: reading an attribute of the class (a constant,
    a classmethod) is using it."""

    def __getattr__(cls, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        raise NotOfferedError(f"{cls.__fluidjax_path__}.{attr}: {cls.__fluidjax_not_offered__}")


def not_offered(path: str, name: str, reason: str) -> type:
    """A stand-in for Fluid's ``path.name``: importable (and subclassable, as a script's
    ``class Net(fluid.dygraph.Layer)`` needs at import time), but calling it, instantiating it
    or a subclass, or reading its attributes raises :class:`NotOfferedError` with ``reason``."""
    qualname = f"fluid.{path}.{name}" if path else f"fluid.{name}"

    def refuse(self, *args, **kwargs):
        raise NotOfferedError(f"{qualname} is not offered by fluidjax: {reason}")

    return _NotOfferedType(name, (), {
        "__init__": refuse, "__module__": f"fluidjax.{path}" if path else "fluidjax",
        "__doc__": f"Not offered by fluidjax: {reason}", "__fluidjax_path__": qualname,
        "__fluidjax_not_offered__": reason})


def _lookup(path: str, name: str, *, stand_in: bool):
    """Fluid's ``path.name`` in fluidjax: the sources' object, else (for a name of Fluid 1.8's
    table, or any public name when ``stand_in``) a not-offered stand-in, else ``AttributeError``."""
    sources, aliases, reason = _route(path)
    if name in aliases:
        return aliases[name]
    for source in sources:   # their own names only (a source's table fallback would come back here)
        value = vars(source).get(name, _MISSING)
        if value is not _MISSING:
            return value
    if name.startswith("_") and (path == "layers" or path.startswith("layers.")):  # the families' helpers
        value = _layer_family_lookup(name)
        if value is not _MISSING:
            return value
    if stand_in and not name.startswith("_"):
        return not_offered(path, name, NAMED_REASONS.get(f"{path}.{name}", reason))
    raise AttributeError(f"module 'fluidjax.{path}' has no attribute {name!r}")


_MISSING = object()


def _layer_family_lookup(name: str):
    """``name`` in one of the modules that define ``fluidjax.layers``' functions (where Fluid's
    private helpers such as ``_decay_step_counter`` live)."""
    seen = set()
    for value in list(vars(layers).values()):
        module = sys.modules.get(getattr(value, "__module__", None) or "")
        if module is None or module in seen or not module.__name__.startswith("fluidjax.frontend."):
            continue
        seen.add(module)
        found = vars(module).get(name, _MISSING)
        if found is not _MISSING:
            return found
    return _MISSING


def _names(path: str) -> tuple[str, ...]:
    return ALL.get(path, ()) + EXTRA.get(path, ())


def _fallback(path: str, previous=None):
    """A module ``__getattr__`` answering ``path``'s names from the table."""
    known = frozenset(_names(path))

    def __getattr__(name: str):
        if name in _ROOT_DUNDERS or (name.startswith("__") and name.endswith("__")):
            raise AttributeError(name)
        if previous is not None:
            try:
                return previous(name)
            except AttributeError:
                pass
        value = _lookup(path, name, stand_in=name in known)
        module = _BUILT.get(f"{_ROOT}.{path}")
        if module is not None and module.__dict__.get("__fluidjax_built__") and name in known:
            setattr(module, name, value)   # the same stand-in on every access
        return value

    __getattr__.__fluidjax_route__ = path
    return __getattr__


_ROOT = "fluidjax"
_BUILT: dict[str, ModuleType] = {}


class _PathFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves ``fluidjax.<Fluid path>`` from the modules :func:`install` built, should its
    ``sys.modules`` entry have been removed."""

    def find_spec(self, fullname, path=None, target=None):
        module = _BUILT.get(fullname)
        if module is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=hasattr(module, "__path__"))

    def create_module(self, spec):
        return _BUILT[spec.name]

    def exec_module(self, module):
        sys.modules[module.__name__] = module


# Fluid 1.8's ``paddle.fluid`` namespace: the modules whose names it re-exports (its __init__'s
# ``from .X import *`` and named imports), and single names from elsewhere.
_ROOT_FROM = ("framework", "executor", "trainer_desc", "transpiler", "parallel_executor", "lod_tensor",
              "data_feed_desc", "compiler", "backward", "dygraph.nn", "dataset")
_ROOT_NAMES = {"Layer": "dygraph.layers", "enable_dygraph": "dygraph.base", "disable_dygraph": "dygraph.base",
               "enable_imperative": "dygraph.base", "disable_imperative": "dygraph.base", "save": "io", "load": "io",
               "load_program_state": "io", "set_program_state": "io", "save_dygraph": "dygraph.checkpoint",
               "load_dygraph": "dygraph.checkpoint", "LoDTensorArray": "core", "fleet": "incubate",
               "data_generator": "incubate", "monkey_patch_variable": "layers.math_op_patch",
               "monkey_patch_varbase": "dygraph.varbase_patch_methods"}


def root_attribute(name: str):
    """Fluid 1.8's ``paddle.fluid.<name>`` where ``fluidjax`` has no attribute of its own: the
    object of the Fluid module it came from (a not-offered stand-in there included)."""
    path = _ROOT_NAMES.get(name) or next((p for p in _ROOT_FROM if name in ALL.get(p, ())), None)
    if path is None and name == "learning_rate_decay":
        return sys.modules[f"{_ROOT}.layers.learning_rate_scheduler"]
    if path is None:
        raise AttributeError(f"module {_ROOT!r} has no attribute {name!r}")
    return _BUILT[f"{_ROOT}.{path}"].__dict__.get(name) or _lookup(path, name, stand_in=True)


def install(root: ModuleType) -> None:
    """Make every Fluid 1.8 module path a module under ``root`` (``fluidjax``): real modules
    already in ``sys.modules`` get the table's names as a fallback; the others are built."""
    global _ROOT
    _ROOT = root.__name__
    for path in sorted(ALL, key=lambda p: (p.count("."), p)):
        fullname = f"{_ROOT}.{path}"
        module = sys.modules.get(fullname)
        parent_name, _, leaf = fullname.rpartition(".")
        parent = sys.modules[parent_name]
        if module is None:
            existing = parent.__dict__.get(leaf)
            module = existing if isinstance(existing, ModuleType) else _build(path, fullname)
            sys.modules[fullname] = module
        if not module.__dict__.get("__fluidjax_built__") and "__fluidjax_fluid_path__" not in module.__dict__:
            # a real module serving this path: the table answers for the names it lacks
            module.__getattr__ = _fallback(path, module.__dict__.get("__getattr__"))
            module.__fluidjax_fluid_path__ = path
        if path in PACKAGES and "__path__" not in module.__dict__:
            module.__path__ = []
        _BUILT[fullname] = module
        current = parent.__dict__.get(leaf, _MISSING)
        if current is _MISSING or isinstance(current, ModuleType):
            setattr(parent, leaf, module)
    if not any(isinstance(finder, _PathFinder) for finder in sys.meta_path):
        sys.meta_path.append(_PathFinder())


def _build(path: str, fullname: str) -> ModuleType:
    module = ModuleType(fullname, f"Fluid 1.8's ``paddle.fluid.{path}``: re-exports of fluidjax's objects "
                                  "(frontend/fluid/paths.py); names fluidjax does not offer raise "
                                  "NotOfferedError when used.")
    module.__all__ = list(ALL.get(path, ()))
    module.__fluidjax_fluid_path__ = path
    module.__fluidjax_built__ = True
    for name in _names(path):
        try:
            value = _lookup(path, name, stand_in=False)
        except AttributeError:
            continue   # a stand-in, made when first asked for
        setattr(module, name, value)
    module.__getattr__ = _fallback(path)
    return module
