"""A program's inference function as a ``jax.export.Exported`` (StableHLO), parameters embedded.

``fj.io.export(program, feed_vars, fetch_vars)`` prunes the global block to the ops the fetches
need from the feeds, reads the persistable values those ops use from the scope and closes over
them (they become constants of the module), and exports ``f(*feeds) -> tuple(fetches)`` with
every ``-1`` dimension of a feed symbolic. The first unknown dimension of every feed is one
symbol, ``batch`` (feeds of one model share their batch size, and ops that combine two feeds
need the dimensions equal); any other unknown dimension gets a symbol of its own
(``<feed>_d<axis>``). The result serializes with ``exported.serialize()`` and runs, after
``jax.export.deserialize``, in a process that has only JAX installed.
"""

from __future__ import annotations

import re
from typing import Sequence

import jax
import numpy as np

from ...ir import dtypes
from ...ir.errors import FeedError, UninitializedVariableError
from ...ir.program import Program
from ...ir.variable import Variable
from ...lowering.context import make_key
from ...lowering.lod_tensor import LoDTensor
from ...lowering.lower import run_ops
from ...lowering.scope import Scope, global_scope, state_lock
from .checks import check_program, names_of, ops_needed



def inference_ops(program: Program, feed_names: Sequence[str], fetch_names: Sequence[str]) -> tuple[list, list[str]]:
    """The global block's ops the fetches need given the feeds, in order, and the persistable
    variables they read (the parameters to embed)."""
    block = program.global_block()
    feeds = set(feed_names)
    kept, _ = ops_needed(block.ops, fetch_names, feeds, lambda op: set(op.output_arg_names),
                         lambda op: set(op.input_arg_names))
    produced = set(feeds)
    params = []
    for op in kept:
        for name in op.input_arg_names:
            if name not in produced and name not in params:
                var = block.find_var(name)
                if var is None or not var.persistable:
                    raise FeedError(f"the fetches need variable {name!r} (read by op {op.type!r}), which is "
                                    "neither fed nor computed nor persistable: add it to feed_vars")
                params.append(name)
        produced.update(op.output_arg_names)
    for name in fetch_names:
        if name not in produced and name not in params:
            var = block.find_var(name)
            if var is None or not var.persistable:
                raise FeedError(f"fetch {name!r} is not computed from the feeds")
            params.append(name)
    return kept, params


def symbolic_feed_specs(program: Program, feed_names: Sequence[str]) -> list[jax.ShapeDtypeStruct]:
    """One ``ShapeDtypeStruct`` per feed, ``-1`` dims symbolic (see the module docstring)."""
    block = program.global_block()
    symbols, layout = [], []
    for name in feed_names:
        var = block.find_var(name)
        if var is None:
            raise FeedError(f"feed {name!r} is not a variable of the program")
        if var.lod_level:
            raise FeedError(f"feed {name!r} has lod_level {var.lod_level}: exporting LoD inputs is not supported")
        dims = []
        for axis, d in enumerate(var.shape):
            if d >= 0:
                dims.append(int(d))
                continue
            symbol = "batch" if not any(isinstance(x, str) for x in dims) else \
                f"{re.sub(r'[^A-Za-z0-9_]', '_', name)}_d{axis}"
            if symbol not in symbols:
                symbols.append(symbol)
            dims.append(symbol)
        layout.append((var, dims))
    scope = dict(zip(symbols, jax.export.symbolic_shape(", ".join(symbols)))) if symbols else {}
    return [jax.ShapeDtypeStruct(tuple(scope[d] if isinstance(d, str) else d for d in dims),
                                 dtypes.to_numpy(var.dtype)) for var, dims in layout]


def export_program(program: Program, feed_vars, fetch_vars, scope: Scope | None = None,
                   platforms: Sequence[str] | None = None) -> "jax.export.Exported":
    """``jax.export.Exported`` of ``program``'s inference function; see the module docstring.

    >>> # exp = fj.io.export(test_program, [x], [prob])
    >>> # data = exp.serialize()              # bytes; jax.export.deserialize(data).call(xs)
    """
    check_program(program)
    # The inference function: dropout off, batch norm on its running statistics (as Paddle's
    # save_inference_model makes it); a no-op for a program that is already for inference.
    program = program.clone(for_test=True)
    scope = global_scope() if scope is None else scope
    feed_names = names_of(feed_vars, "feed_vars")
    fetch_names = names_of(fetch_vars, "fetch_vars")
    if not fetch_names:
        raise FeedError("export needs at least one fetch variable")
    ops, param_names = inference_ops(program, feed_names, fetch_names)
    params = {}
    with state_lock(scope):          # one committed state, between two runs on the scope
        for name in param_names:
            holder = scope.find_var(name)
            tensor = holder.get(LoDTensor) if holder is not None and holder.holds(LoDTensor) else None
            if tensor is None or not tensor._is_initialized():
                raise UninitializedVariableError(f"variable {name!r} has no value in the scope: load or "
                                                 "initialize the parameters before exporting")
            params[name] = np.asarray(tensor.value())
    specs = symbolic_feed_specs(program, feed_names)

    def inference(*feeds):
        env = dict(params)
        env.update(zip(feed_names, feeds))
        run_ops(ops, env, rng_key=make_key(program.random_seed or 0))
        return tuple(env[n] for n in fetch_names)

    kwargs = {"platforms": tuple(platforms)} if platforms else {}
    return jax.export.export(jax.jit(inference), **kwargs)(*specs)
