"""Fluid 1.x's module paths: ``import fluidjax as fluid`` runs ``paddle.fluid`` scripts.

:data:`MODULE_PATHS` maps each of Fluid's module paths (``fluidjax.layers``, ``fluidjax.core``,
``fluidjax.executor``, ...) to the module that answers for it; ``fluidjax/__init__.py`` installs
them, so ``import fluidjax.layers as layers`` and ``from fluidjax.executor import Executor``
work. Where fluidjax has a module whose job is Fluid's (``layers``, ``optimizer``, ``io``, ...)
the path names it; the modules of this package exist only for Fluid's other paths and hold no
logic: they re-export the real objects (``core``, ``executor``, ``framework``, ``backward``,
``compiler``) or refuse what fluidjax deliberately does not offer (``dygraph``, ``transpiler``),
with a :class:`~fluidjax.ir.errors.NotOfferedError` that says so.

Every other module path of Fluid 1.8 (``fluidjax.layers.nn``, ``.contrib.slim``, ...) and the names
these modules lack are made from one table by :mod:`.paths` (``fluid18_names.py``: Fluid 1.8's
module paths and their public names).
"""

from __future__ import annotations

from types import ModuleType

from ...ir import unique_name
from ...lowering import lod_tensor
from .. import (clip, data_feeder, initializer, input_layers, io, layers, nets, optimizer, param_attr,
                regularizer)
from .. import amp
from .. import contrib_rnn, distributions, evaluator, metrics, profiler
from . import backward, compiler, core, dygraph, executor, framework, learning_rate_scheduler, reader, transpiler
from . import contrib, mixed_precision, parallel_executor

__all__ = ["MODULE_PATHS", "SUBMODULE_PATHS"]

MODULE_PATHS: dict[str, ModuleType] = {
    "layers": layers, "io": io, "nets": nets, "optimizer": optimizer, "clip": clip,
    "regularizer": regularizer, "initializer": initializer, "param_attr": param_attr, "input": input_layers,
    "unique_name": unique_name, "data_feeder": data_feeder, "reader": reader, "lod_tensor": lod_tensor,
    "core": core, "executor": executor, "framework": framework, "backward": backward, "compiler": compiler,
    "dygraph": dygraph, "transpiler": transpiler,
    # Mixed precision: Paddle 2.x's static.amp as fluidjax.amp, Fluid's as fluid.contrib.mixed_precision.
    "amp": amp, "contrib": contrib,
    # Fluid 1.8's host-side metrics and its deprecated in-graph evaluators.
    "metrics": metrics, "evaluator": evaluator, "parallel_executor": parallel_executor,
    "profiler": profiler,
}

# Paths below a module that is not a package (``fluidjax.layers.learning_rate_scheduler``):
# installed as modules and as attributes of their parent.
SUBMODULE_PATHS: dict[str, ModuleType] = {"layers.learning_rate_scheduler": learning_rate_scheduler,
                                          "layers.distributions": distributions,
                                          "contrib.mixed_precision": mixed_precision,
                                          "contrib.layers": contrib_rnn}
