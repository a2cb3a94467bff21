"""Saved models and checkpoints in Paddle's formats (``fj.io``; export is in :mod:`.export`).

- :func:`save_inference_model` / :func:`load_inference_model`: ``prefix.pdmodel`` (the pruned
  ``ProgramDesc`` with ``feed``/``fetch`` ops) and ``prefix.pdiparams`` (every persistable variable,
  one tensor stream each, sorted by name), as ``paddle.static.save_inference_model`` and
  ``paddle.jit.save`` write them; also Fluid 1.x directories (``__model__`` plus one file per
  variable, or one combined file).
- :func:`save_persistables` / :func:`load_persistables` and :func:`save_params` /
  :func:`load_params`: a training run's state (parameters, optimizer moments, beta pows, learning
  rate, counters) in the layout of Paddle's ``save``/``save_combine`` ops, so a run moves between
  Paddle and fluidjax in either direction.
- :func:`export`: a ``jax.export.Exported`` of the inference function, parameters embedded.

Safety (see ``docs/interop.md``): nothing is ever unpickled; every size in a file is checked
against the file before anything is allocated; a save copies its values out between two runs
on the scope (its state lock) and writes its files as one save that a kill cannot tear, checked
by the loads (a manifest beside them: :mod:`.atomic`). The tensor layout itself is in
:mod:`fluidjax.frontend.io.tensor_stream`.

>>> # exe.run(startup); ...train...
>>> # fj.io.save_inference_model("out/model", [x], [prob], exe)
>>> # program, feeds, fetches = fj.io.load_inference_model("out/model", exe)
>>> # out, = exe.run(program, feed={feeds[0]: xs}, fetch_list=fetches)
"""

from __future__ import annotations

import os
from typing import Callable, Iterable, Sequence

import numpy as np

from ...ir import dtypes, registry
from ...ir.errors import (FeedError, NotOfferedError, ProgramFormatError, TensorFormatError,
                          UninitializedVariableError)
from ...ir.program import Program, default_main_program
from ...ir.serialize import program_from_proto, program_to_proto
from ...ir.variable import Variable
from ...lowering.lod_tensor import LoDTensor
from ...lowering.scope import Scope, global_scope, state_lock
from ...proto import framework_pb2 as pb
from ..layer_args import with_fluid_keywords
from ..passes import optimize_inference
from .atomic import AtomicFiles, ManifestCheck, read_verified
from .checks import SUPPORTED_OP_VERSIONS, check_program, names_of, ops_needed
from .compiled import attach_compiled, compile_variants, remove_compiled
from .export import export_program
from .tensor_stream import TensorReader, describe_foreign, refuse_pickle, write_tensor

__all__ = ["save_inference_model", "load_inference_model", "save_persistables", "load_persistables",
           "save_params", "load_params", "save_vars", "load_vars", "export", "feed_target_names",
           "fetch_target_names", "resolve_model_paths", "persistable_vars", "read_program", "save_program_files",
           "PROGRAM_VERSION", "compile_saved_model"]

# ProgramDesc.version Paddle 2.6.2 writes (major*1e6 + minor*1e3 + patch).
PROGRAM_VERSION = 2006002

FEED_HOLDER, FETCH_HOLDER = "feed", "fetch"
_NOT_SAVED_TYPES = frozenset({dtypes.FEED_MINIBATCH, dtypes.FETCH_LIST, dtypes.RAW, 15})  # 15: READER
_T = registry.ATTR_TYPES

MODEL_SUFFIX, PARAMS_SUFFIX = ".pdmodel", ".pdiparams"
LEGACY_MODEL_FILE = "__model__"


# -- variables ----------------------------------------------------------------------------------
def _is_saved(var: Variable) -> bool:
    """Paddle's ``is_persistable`` as ``save_vars`` applies it: persistable, not a feed/fetch
    list, reader or RAW holder."""
    return bool(var.persistable) and var.type not in _NOT_SAVED_TYPES


def _is_parameter(var: Variable) -> bool:
    """Paddle's ``is_parameter``: a Parameter (weights, biases, batch-norm statistics)."""
    return bool(var.is_parameter)


def _program_vars(program: Program, predicate: Callable[[Variable], bool]) -> list[Variable]:
    """The variables of every block that ``predicate`` accepts, one per name, sorted by name."""
    found: dict[str, Variable] = {}
    for var in program.list_vars():
        if var.name not in found and predicate(var):
            found[var.name] = var
    return [found[n] for n in sorted(found)]


def _scope_value(scope: Scope, name: str) -> tuple[np.ndarray, list[list[int]]]:
    holder = scope.find_var(name)
    tensor = holder.get(LoDTensor) if holder is not None and holder.holds(LoDTensor) else None
    if tensor is None or not tensor._is_initialized():
        raise UninitializedVariableError(
            f"cannot save variable {name!r}: it has no value in the scope (run the startup program first)")
    return np.asarray(tensor.value()), tensor.lod()


def _set_scope_values(scope: Scope, values: dict[str, tuple[np.ndarray, list]]) -> None:
    """Write loaded tensors into ``scope`` (all were read and checked before: a bad file changes
    nothing), all between two runs on the scope (under its state lock)."""
    with state_lock(scope):
        for name, (array, lod) in values.items():
            tensor = scope.var(name).get_mutable(LoDTensor)
            tensor.set_lod([])
            tensor.set(array)
            if lod:
                tensor.set_lod(lod)


def _safe_join(dirname: str, name: str) -> str:
    """``dirname/name`` for a variable's own file; a name that would leave the directory (an
    absolute path, ``..``) is refused (a hostile program must not read or write elsewhere)."""
    parts = name.replace("\\", "/").split("/")
    if not name or os.path.isabs(name) or any(p in ("", ".", "..") for p in parts) or "\x00" in name:
        raise TensorFormatError(f"variable name {name!r} cannot be a file name inside {dirname!r}", variable=name)
    return os.path.join(dirname, *parts)


# -- tensors to and from files --------------------------------------------------------------------
def _write_vars(files: AtomicFiles, scope: Scope, names: Sequence[str], dirname: str,
                filename: str | None) -> None:
    # Every value first (a missing one saves nothing), copied out between two runs on the scope
    # (under its state lock: a run donates its state's buffers), so one save is one committed state.
    # The files are written after the lock is released.
    with state_lock(scope):
        values = {n: _scope_value(scope, n) for n in names}
    files.set_root(dirname)       # one save into dirname: kept whole by its manifest (atomic.py)
    if filename is None:
        for name in names:
            files.write(_safe_join(dirname, name), lambda f, v=values[name]: write_tensor(f, *v))
    else:
        def fill(f):
            for name in sorted(names):
                write_tensor(f, *values[name])
        files.write(os.path.join(dirname, filename), fill)


def _open_checked(path: str, what: str, check: ManifestCheck | None = None):
    try:
        f = open(path, "rb") if check is None else check.open(path)
    except FileNotFoundError:
        raise TensorFormatError(f"{path}: no such file ({what})", path=path) from None
    except IsADirectoryError:
        raise TensorFormatError(f"{path}: is a directory, expected {what}", path=path) from None
    return f


def _read_combined(path: str, variables: Sequence[Variable],
                   check: ManifestCheck | None = None) -> dict[str, tuple[np.ndarray, list]]:
    values = {}
    with _open_checked(path, "a combined parameters file", check) as f:
        reader = TensorReader(f, path, os.fstat(f.fileno()).st_size)
        reader.check_not_foreign()
        for var in variables:
            values[var.name] = reader.read_tensor(var.name, (var.dtype, var.shape))
        if not reader.at_end():
            raise TensorFormatError(
                f"{path}: {reader.remaining} bytes are left after the last of the {len(variables)} variables "
                "the program saves: the file holds more (or other) tensors than this program's persistable "
                "variables (is it the parameters file of another model?)", path=path)
    return values


def _read_separate(dirname: str, variables: Sequence[Variable],
                   check: ManifestCheck | None = None) -> dict[str, tuple[np.ndarray, list]]:
    values = {}
    for var in variables:
        path = _safe_join(dirname, var.name)
        with _open_checked(path, f"the saved value of variable {var.name!r}", check) as f:
            reader = TensorReader(f, path, os.fstat(f.fileno()).st_size)
            values[var.name] = reader.read_tensor(var.name, (var.dtype, var.shape))
            if not reader.at_end():
                raise TensorFormatError(f"{path}: {reader.remaining} bytes are left after the tensor of "
                                        f"variable {var.name!r}", path=path, variable=var.name)
    return values


def save_vars(executor, dirname: str, main_program: Program | None = None, vars: Iterable | None = None,
              predicate: Callable[[Variable], bool] | None = None, filename: str | None = None,
              scope: Scope | None = None) -> None:
    """Save variables' values from ``scope`` (the global scope by default), as Paddle's
    ``save_vars``: one file per variable under ``dirname`` (``filename`` None), or all of them in
    ``dirname/filename`` sorted by name. Either ``vars`` (Variables or names) or ``predicate``.
    """
    del executor  # kept for Paddle's signature: values live in the scope
    program = default_main_program() if main_program is None else main_program
    scope = global_scope() if scope is None else scope
    if vars is None:
        names = [v.name for v in _program_vars(program, predicate or _is_saved)]
    else:
        names = names_of(vars, "vars")
    files = AtomicFiles()
    try:
        _write_vars(files, scope, names, dirname, filename)
        files.commit()
    finally:
        files.abort()


def load_vars(executor, dirname: str, main_program: Program | None = None, vars: Iterable | None = None,
              predicate: Callable[[Variable], bool] | None = None, filename: str | None = None,
              scope: Scope | None = None) -> None:
    """Load variables saved by :func:`save_vars` or Paddle's ``save_vars`` (``save`` /
    ``save_combine`` ops) into ``scope``. Every tensor is read and checked against the program's
    variable (dtype, shape) before the scope changes."""
    del executor
    program = default_main_program() if main_program is None else main_program
    scope = global_scope() if scope is None else scope
    if vars is None:
        variables = _program_vars(program, predicate or _is_saved)
    else:
        block = program.global_block()
        variables = [v if isinstance(v, Variable) else block.var(v) for v in
                     (vars if not isinstance(vars, (str, Variable)) else [vars])]
    if filename is None:
        values = read_verified(dirname, lambda check: _read_separate(dirname, variables, check))
    else:
        ordered = sorted(variables, key=lambda v: v.name)
        values = read_verified(dirname, lambda check: _read_combined(os.path.join(dirname, filename), ordered, check))
    _set_scope_values(scope, values)


def save_persistables(executor, dirname: str, main_program: Program | None = None, filename: str | None = None,
                      scope: Scope | None = None) -> None:
    """Save every persistable variable of ``main_program`` — parameters and the optimizer's state
    (moments, beta pows, learning rate, counters) — as Paddle's ``save_persistables`` does;
    Paddle's ``load_vars``/``load_combine`` read it back."""
    save_vars(executor, dirname, main_program, predicate=_is_saved, filename=filename, scope=scope)


def load_persistables(executor, dirname: str, main_program: Program | None = None, filename: str | None = None,
                      scope: Scope | None = None) -> None:
    """Load what :func:`save_persistables` (or Paddle's ``save_vars`` of the persistables) wrote."""
    load_vars(executor, dirname, main_program, predicate=_is_saved, filename=filename, scope=scope)


def save_params(executor, dirname: str, main_program: Program | None = None, filename: str | None = None,
                scope: Scope | None = None) -> None:
    """Save the program's Parameters only (no optimizer state), as Paddle's ``save_params``."""
    save_vars(executor, dirname, main_program, predicate=_is_parameter, filename=filename, scope=scope)


def load_params(executor, dirname: str, main_program: Program | None = None, filename: str | None = None,
                scope: Scope | None = None) -> None:
    """Load what :func:`save_params` wrote."""
    load_vars(executor, dirname, main_program, predicate=_is_parameter, filename=filename, scope=scope)


def feed_target_names(program: Program) -> list[str]:
    """The variables the program's ``feed`` ops fill, in ``col`` order (Paddle's
    ``desc.get_feed_target_names``)."""
    return _targets(program, "feed", "Out")


def fetch_target_names(program: Program) -> list[str]:
    """The variables the program's ``fetch`` ops read, in ``col`` order."""
    return _targets(program, "fetch", "X")


def _targets(program: Program, op_type: str, slot: str) -> list[str]:
    found = {}
    for op in program.global_block().ops:
        if op.type == op_type:
            names = op.inputs.get(slot) if slot == "X" else op.outputs.get(slot)
            if not names:
                raise ProgramFormatError(f"a {op_type!r} op without its {slot} variable")
            col = op.attrs.get("col", len(found))
            if col in found:
                raise ProgramFormatError(f"two {op_type!r} ops have col {col}")
            found[col] = names[0]
    return [found[c] for c in sorted(found)]


# -- inference models -------------------------------------------------------------------------------
def _referenced_in_blocks(desc: pb.ProgramDesc, block_ids: Iterable[int], seen: set[int]) -> set[str]:
    names: set[str] = set()
    for idx in block_ids:
        if idx in seen or not 0 <= idx < len(desc.blocks):
            continue
        seen.add(idx)
        for op in desc.blocks[idx].ops:
            for v in list(op.inputs) + list(op.outputs):
                names.update(v.arguments)
            names |= _referenced_in_blocks(desc, _sub_blocks(op), seen)
    return names


def _sub_blocks(op: pb.OpDesc) -> list[int]:
    ids = []
    for a in op.attrs:
        if a.type == _T["block"]:
            ids.append(a.block_idx)
        elif a.type == _T["blocks"]:
            ids.extend(a.blocks_idx)
    return ids


def _attr(name: str, kind: str, value) -> pb.OpDesc.Attr:
    attr = pb.OpDesc.Attr(name=name, type=_T[kind])
    if kind == "int":
        attr.i = value
    elif kind == "string":
        attr.s = value
    elif kind == "bool":
        attr.b = value
    elif kind == "strings":
        attr.strings.extend(value)
    return attr


def _feed_fetch_op(op_type: str, x: str, out: str, col: int) -> pb.OpDesc:
    op = pb.OpDesc(type=op_type)
    op.inputs.add(parameter="X", arguments=[x])
    op.outputs.add(parameter="Out", arguments=[out])
    # The attributes Paddle 2.6.2's prepend_feed_ops / append_fetch_ops write, sorted as it does.
    op.attrs.extend([_attr("col", "int", col), _attr("op_callstack", "strings", []),
                     _attr("op_device", "string", ""), _attr("op_namescope", "string", "/"),
                     _attr("op_role", "int", 0), _attr("op_role_var", "strings", []),
                     _attr("with_quant_attr", "bool", False)])
    return op


def inference_program_desc(program: Program, feed_names: Sequence[str], fetch_names: Sequence[str]) -> pb.ProgramDesc:
    """The ``ProgramDesc`` Paddle 2.6.2's ``normalize_program`` makes: a for-test clone, a
    ``scale`` op (``save_infer_model/scale_<i>``) on each non-bool fetch, pruned to the ops the
    fetches need from the feeds, training-only fields cleared, ``feed`` ops (``col``) prepended
    and ``fetch`` ops appended, the program version and op version map set."""
    clone = program.clone(for_test=True)
    block = clone.global_block()
    for name in list(feed_names) + list(fetch_names):
        if block.find_var(name) is None:
            raise FeedError(f"variable {name!r} is not in the program's global block")
    targets = []
    for i, name in enumerate(fetch_names):
        var = block.var(name)
        if var.dtype != "bool":
            out_name = next(f"save_infer_model/scale_{i}.tmp_{k}" for k in range(len(block.vars) + 1)
                            if not block.has_var(f"save_infer_model/scale_{i}.tmp_{k}"))
            out = block.create_var(out_name, var.shape, var.dtype, var.lod_level)
            block.append_op("scale", {"X": [name]}, {"Out": [out]},
                            {"scale": 1.0, "bias": 0.0, "bias_after_scale": True})
            name = out.name
        targets.append(name)
    desc = program_to_proto(clone)
    root = desc.blocks[0]
    feeds = set(feed_names)

    kept, needed = ops_needed(
        root.ops, targets, feeds, lambda op: {n for v in op.outputs for n in v.arguments},
        lambda op: {n for v in op.inputs for n in v.arguments} | _referenced_in_blocks(desc, _sub_blocks(op), set()))
    produced = {n for op in kept for v in op.outputs for n in v.arguments}
    declared = {v.name: v for v in root.vars}
    for i, name in enumerate(feed_names):
        if name not in needed:
            raise FeedError(f"feed_vars[{i}] {name!r} is not needed to compute the fetch_vars; leave it out")
    for name in sorted(needed - produced - feeds):
        var = declared.get(name)
        if var is not None and not var.persistable:
            raise FeedError(f"the fetch_vars need variable {name!r}, which is neither fed (add it to feed_vars) "
                            "nor computed by an op nor persistable")
    referenced = needed | produced
    for op in kept:
        for v in list(op.inputs) + list(op.outputs):
            referenced.update(v.arguments)
    del root.ops[:]
    root.ops.extend(kept)
    keep_vars = sorted((v for v in root.vars if v.name in referenced), key=lambda v: v.name)
    del root.vars[:]
    root.vars.extend(keep_vars)
    for b in desc.blocks:
        for v in b.vars:                       # Paddle's _remove_training_info
            v.ClearField("is_parameter")
            v.ClearField("stop_gradient")
        for op in b.ops:
            extra = [a for a in op.attrs if a.name in ("op_callstack", "with_quant_attr")]
            for a in extra:
                op.attrs.remove(a)
            op.ClearField("is_target")
    root.vars.add(name=FEED_HOLDER, persistable=True).type.type = dtypes.FEED_MINIBATCH
    root.vars.add(name=FETCH_HOLDER, persistable=True).type.type = dtypes.FETCH_LIST
    for i, name in enumerate(feed_names):      # each prepended, as Paddle does: the last col comes first
        root.ops.insert(0, _feed_fetch_op("feed", FEED_HOLDER, name, i))
    for i, name in enumerate(targets):
        root.ops.append(_feed_fetch_op("fetch", name, FETCH_HOLDER, i))
    desc.version.version = PROGRAM_VERSION
    desc.op_version_map.SetInParent()
    del desc.op_version_map.pair[:]
    for name, version in SUPPORTED_OP_VERSIONS.items():
        desc.op_version_map.pair.add(op_name=name).op_version.version = version
    return desc


@with_fluid_keywords({"dirname": "path_prefix", "feeded_var_names": "feed_vars", "target_vars": "fetch_vars"})
def save_inference_model(path_prefix: str, feed_vars, fetch_vars, executor, main_program: Program | None = None,
                         model_filename: str | None = None, params_filename: str | None = None,
                         export_for_deployment: bool = True, program_only: bool = False, *,
                         program: Program | None = None, scope: Scope | None = None, compiled=False, **kwargs):
    """Save the inference part of a program: Paddle 2's ``paddle.static.save_inference_model``
    or Fluid 1.x's ``fluid.io.save_inference_model``, told apart as the two APIs required:

    - **Paddle 2** (``feed_vars`` are Variables): ``path_prefix.pdmodel`` and
      ``path_prefix.pdiparams`` (see :func:`inference_program_desc`).
    - **Fluid 1.x** (``feed_vars`` are variable *names*, Fluid's ``feeded_var_names``, or any of
      Fluid's ``model_filename`` / ``params_filename`` / ``export_for_deployment`` /
      ``program_only`` given): ``path_prefix`` is a directory that gets ``__model__`` (or
      ``model_filename``) and one file per persistable variable (or all of them, sorted by name,
      in ``params_filename``); returns the fetch targets' names, as Fluid did.

    The program is the same in both layouts. ``main_program`` (Fluid) and ``program`` (Paddle 2)
    name it, the default main program otherwise; the values come from ``scope`` (the global scope
    by default). Every file is written to a temporary first and renamed into place only when all
    are complete. :func:`load_inference_model` reads both layouts.

    ``compiled=True`` also writes the model's compiled executables beside it (``name.fjexec``, for
    every ``-1`` dim 1; or give ``compiled={"x": (8, 784)}`` or a list of such dicts): a later load
    runs without tracing or compiling (:func:`compile_saved_model`).
    An executable is native code: trust such a file as you would a shared library. A save without
    ``compiled`` removes the compiled file of the model it replaces.

    >>> # fj.io.save_inference_model("out/mlp", [x], [prob], exe)   # out/mlp.pdmodel, out/mlp.pdiparams
    >>> # fj.io.save_inference_model("out/mlp", ["x"], [prob], exe) # out/mlp/__model__, out/mlp/fc_0.w_0, ...
    """
    del executor
    unknown = set(kwargs) - {"clip_extra", "legacy_format"}
    if unknown:
        raise TypeError(f"save_inference_model got unexpected arguments {sorted(unknown)}")
    if main_program is not None and program is not None and main_program is not program:
        raise TypeError("save_inference_model: give main_program= (Fluid) or program= (Paddle 2), not both")
    program = main_program if program is None else program
    program = default_main_program() if program is None else program
    scope = global_scope() if scope is None else scope
    feed_items = [feed_vars] if isinstance(feed_vars, (str, Variable)) else list(feed_vars)
    fluid_layout = (any(isinstance(v, str) for v in feed_items) or model_filename is not None
                    or params_filename is not None or not export_for_deployment or program_only)
    if not isinstance(path_prefix, str) or not path_prefix or (
            not fluid_layout and path_prefix.endswith(("/", os.sep))):
        raise ValueError(f"path_prefix must be 'dirname/name', got {path_prefix!r}")
    feed_names = names_of(feed_items, "feed_vars")
    fetch_names = names_of(fetch_vars, "fetch_vars")
    if not fetch_names:
        raise FeedError("save_inference_model needs at least one fetch variable")
    desc = inference_program_desc(program, feed_names, fetch_names)
    model_bytes = desc.SerializeToString(deterministic=True)
    saved = program_from_proto(desc)
    names = [v.name for v in _program_vars(saved, _is_saved)]
    files = AtomicFiles()
    try:
        if fluid_layout:
            dirname = path_prefix
            if names and not program_only:
                _write_vars(files, scope, names, dirname, params_filename)
            files.write(os.path.join(dirname, model_filename or LEGACY_MODEL_FILE), lambda f: f.write(model_bytes))
        else:
            dirname, base = os.path.split(os.path.abspath(path_prefix))
            if names:
                _write_vars(files, scope, names, dirname, base + PARAMS_SUFFIX)
            files.write(path_prefix + MODEL_SUFFIX, lambda f: f.write(model_bytes))
        files.commit()
    finally:
        files.abort()
    _save_compiled(path_prefix, model_filename if fluid_layout else None, params_filename if fluid_layout else None,
                   compiled)
    return fetch_target_names(saved) if fluid_layout else None


def _save_compiled(path_prefix: str, model_filename, params_filename, compiled) -> None:
    """save_inference_model's compiled executables (``compiled``: True, or the feed shapes), or
    the removal of the replaced model's."""
    if compiled is False or compiled is None:
        remove_compiled(resolve_model_paths(path_prefix, model_filename, params_filename)[0])
    else:
        compile_saved_model(path_prefix, None if compiled is True else compiled, model_filename=model_filename,
                            params_filename=params_filename)


def compile_saved_model(path_prefix: str, feed_shapes=None, *, model_filename: str | None = None,
                        params_filename: str | None = None, optimize=(False, True)) -> str:
    """Compile the saved model at ``path_prefix`` for ``feed_shapes`` and write XLA's executables
    beside it (``name.fjexec``, see :mod:`.compiled`); return that file's path. A later
    :func:`load_inference_model` hands them to the program: a run of those shapes neither traces
    nor compiles. ``fluidjax compile`` and ``save_inference_model(..., compiled=...)`` call this.

    ``feed_shapes``: None (every ``-1`` dim of every input becomes 1), a dict ``{input name: shape}``
    (a tuple, or ``"1x3x224x224"``; inputs not named get their declared shape, ``-1`` as 1), or a
    list of such dicts (one executable each). ``optimize``: the variants of
    ``load_inference_model(..., optimize=...)`` to compile (both by default; each is its own
    program). Executables already in the file for other keys are kept when this same
    jax/fluidjax/device/XLA flags made them. Each executable is loaded back and run once on zeros
    before it is written, and must equal the freshly compiled step bit for bit; a step that cannot
    be saved (host callbacks, while loops, several devices) is a ``NotOfferedError``. Executables
    are native code: trust the file as you would a shared library.

    >>> # fj.io.compile_saved_model("out/net", [{"image": (1, 3, 224, 224)}, {"image": (8, 3, 224, 224)}])
    """
    model = resolve_model_paths(path_prefix, model_filename, params_filename)[0]

    def load(opt: bool):
        scope = Scope()
        program, feeds, fetches = load_inference_model(path_prefix, None, model_filename, params_filename,
                                                       scope=scope, optimize=opt, compiled=False)
        return program, feeds, fetches, scope

    return compile_variants(model, load, feed_shapes, optimize)


_PIR_HINT = ("Paddle 3's PIR programs (.json) are not read by fluidjax; save the model with Paddle 2.6, or with "
             "Paddle 3 and FLAGS_enable_pir_api=0, to get a .pdmodel")


def read_program(path: str, check: ManifestCheck | None = None) -> Program:
    """Parse a saved program file (``.pdmodel``, ``__model__``); a pickle or any other format is a
    typed error naming the file. ``check``: the load's manifest check (see :mod:`.atomic`)."""
    try:
        with (open(path, "rb") if check is None else check.open(path)) as f:
            data = f.read()
    except FileNotFoundError:
        pir = path[:-len(MODEL_SUFFIX)] + ".json" if path.endswith(MODEL_SUFFIX) else None
        if pir is not None and os.path.exists(pir):
            raise ProgramFormatError(f"{path}: no such model file, but there is {pir}: {_PIR_HINT}") from None
        raise ProgramFormatError(f"{path}: no such model file") from None
    except IsADirectoryError:
        raise ProgramFormatError(f"{path}: is a directory, not a model file") from None
    kind = describe_foreign(data[:8])
    if kind == "pickle":
        raise refuse_pickle(path, "a Paddle program (.pdmodel)")
    if data[:1] == b"{":
        raise ProgramFormatError(f"{path}: this file is JSON, not a ProgramDesc: {_PIR_HINT}")
    if kind is not None:
        raise ProgramFormatError(f"{path}: this file is {kind}, not a Paddle program (.pdmodel)")
    try:
        return Program.parse(data)
    except ProgramFormatError as exc:
        raise ProgramFormatError(f"{path}: {exc}") from None


def resolve_model_paths(path_prefix: str, model_filename: str | None = None,
                        params_filename: str | None = None) -> tuple[str, str | None, str | None]:
    """(model file, params directory, combined params file name or None for one file per variable)
    for Paddle's ways of naming a saved model:

    - ``dir/name`` → ``dir/name.pdmodel`` + ``dir/name.pdiparams`` (``save_inference_model``, ``jit.save``);
    - a directory → its ``model_filename`` (default ``__model__``) and ``params_filename`` (default:
      one file per variable; ``__params__`` when that file exists), Fluid 1.x; a directory with no
      ``__model__`` and exactly one ``*.pdmodel`` → that model and its ``.pdiparams``.
    """
    path_prefix = os.fspath(path_prefix)
    if os.path.isdir(path_prefix):
        dirname = path_prefix
        if model_filename is None:
            if os.path.isfile(os.path.join(dirname, LEGACY_MODEL_FILE)):
                model_filename = LEGACY_MODEL_FILE
            else:
                models = sorted(n for n in os.listdir(dirname) if n.endswith(MODEL_SUFFIX))
                if len(models) != 1:
                    raise ProgramFormatError(
                        f"{dirname}: no {LEGACY_MODEL_FILE} file, and {len(models)} *.pdmodel files "
                        f"({', '.join(models) or 'none'}); name the model (dir/name or model_filename)")
                return resolve_model_paths(os.path.join(dirname, models[0][:-len(MODEL_SUFFIX)]))
        model = os.path.join(dirname, model_filename)
        if not os.path.exists(model) and os.path.exists(model + MODEL_SUFFIX):
            model += MODEL_SUFFIX
        if params_filename is None and os.path.isfile(os.path.join(dirname, "__params__")):
            params_filename = "__params__"
        if params_filename is not None and not os.path.exists(os.path.join(dirname, params_filename)) \
                and os.path.exists(os.path.join(dirname, params_filename + PARAMS_SUFFIX)):
            params_filename += PARAMS_SUFFIX
        return model, dirname, params_filename
    if model_filename is not None or params_filename is not None:
        # Paddle's rule: with file names given, the path is the directory that holds them.
        raise ProgramFormatError(f"{path_prefix}: not a directory (model_filename/params_filename name files "
                                 "inside a model directory)")
    model, params = path_prefix + MODEL_SUFFIX, path_prefix + PARAMS_SUFFIX
    if not os.path.exists(params):
        # A model without persistable variables has no parameters file.
        return model, None, None
    dirname, base = os.path.split(os.path.abspath(params))
    return model, dirname, base


@with_fluid_keywords({"dirname": "path_prefix"})
def load_inference_model(path_prefix: str, executor=None, model_filename: str | None = None,
                         params_filename: str | None = None, pserver_endpoints=None, scope: Scope | None = None,
                         optimize: bool = False, compiled: bool = True) -> list:
    """Load a saved inference model: ``[program, feed_target_names, fetch_targets]``.

    ``optimize=True`` returns the program after :func:`fluidjax.passes.optimize_inference`
    (conv+batch_norm folded, convolutions in NHWC; same results to 1e-5, faster on CPU). It is off
    by default because the loaded program is also what ``fluidjax inspect``/``convert`` and a re-save
    see: they must get the model as saved.

    Reads what ``paddle.static.save_inference_model`` and ``paddle.jit.save`` write (``dir/name``
    for ``name.pdmodel`` + ``name.pdiparams``; the ``.pdiparams.info`` pickle is never opened) and
    Fluid 1.x directories (see :func:`resolve_model_paths`). The parameters go into ``scope`` (the
    global scope by default) only after every one was read and checked. The program is checked
    first (:func:`check_program`): unimplemented ops and too-new op versions are refused.

    A compiled file beside the model (``save_inference_model(..., compiled=True)``, ``fluidjax
    compile``) gives the program its executables: a run whose feed shapes were compiled for
    neither traces nor compiles. Stale, foreign or damaged ones are skipped with a
    ``CompiledModelWarning`` (the run compiles). ``compiled=False`` ignores the file: an
    executable is native code, as trustworthy as whoever wrote the file.

    >>> # program, feeds, fetches = fj.io.load_inference_model("out/mlp", exe)
    >>> # prob, = exe.run(program, feed={feeds[0]: xs}, fetch_list=fetches)
    """
    device = getattr(executor, "_device", None)     # where its compiled executables will run
    del executor
    if pserver_endpoints:
        raise NotOfferedError("load_inference_model(pserver_endpoints=...): distributed lookup tables on parameter "
                              "servers are not offered; load the model without pserver_endpoints")
    scope = global_scope() if scope is None else scope
    model, dirname, params = resolve_model_paths(path_prefix, model_filename, params_filename)

    def read(check: ManifestCheck):
        program = read_program(model, check)
        check_program(program, model)
        variables = _program_vars(program, _is_saved)
        if not variables:
            return program, None
        if dirname is None:
            raise TensorFormatError(f"{model}: the program has {len(variables)} persistable variables, but there "
                                    f"is no parameters file {path_prefix + PARAMS_SUFFIX}")
        return program, (_read_combined(os.path.join(dirname, params), variables, check) if params is not None
                         else _read_separate(dirname, variables, check))

    # The model and its parameters as one save (the saving directory's manifest, see atomic.py).
    program, values = read_verified(dirname or os.path.dirname(os.path.abspath(model)), read)
    if values is not None:
        _set_scope_values(scope, values)
    feeds = feed_target_names(program)
    if optimize:
        program = optimize_inference(program, scope)
    fetches = [program.global_block().var(n) for n in fetch_target_names(program)]
    if compiled:
        attach_compiled(program, model, device)
    return [program, feeds, fetches]


def save_program_files(path_prefix_or_dir: str, program: Program, scope: Scope, combined: bool) -> list[str]:
    """Write an already-inference ``program`` and its persistables from ``scope``: combined as
    ``prefix.pdmodel`` + ``prefix.pdiparams``, or a Fluid 1.x directory (``__model__`` and one
    file per variable). Returns the paths written (used by ``fluidjax convert``)."""
    names = [v.name for v in _program_vars(program, _is_saved)]
    data = program.serialize()
    files = AtomicFiles()
    try:
        if combined:
            dirname, base = os.path.split(os.path.abspath(path_prefix_or_dir))
            paths = [path_prefix_or_dir + MODEL_SUFFIX]
            if names:
                _write_vars(files, scope, names, dirname, base + PARAMS_SUFFIX)
                paths.append(path_prefix_or_dir + PARAMS_SUFFIX)
            files.write(paths[0], lambda f: f.write(data))
        else:
            dirname = path_prefix_or_dir
            _write_vars(files, scope, names, dirname, None)
            paths = [os.path.join(dirname, LEGACY_MODEL_FILE)] + [_safe_join(dirname, n) for n in names]
            files.write(paths[0], lambda f: f.write(data))
        files.commit()
    finally:
        files.abort()
    return paths


def persistable_vars(program: Program) -> list[Variable]:
    """The variables a save of ``program`` writes (Paddle's ``is_persistable``), sorted by name."""
    return _program_vars(program, _is_saved)


def export(program: Program, feed_vars, fetch_vars, scope: Scope | None = None, executor=None,
           platforms: Sequence[str] | None = None):
    """The inference function of ``program`` (run as ``clone(for_test=True)``) as a
    ``jax.export.Exported``: ``f(*feeds) -> tuple(fetches)``, the parameters read from ``scope``
    (the global scope by default) embedded as constants, every ``-1`` dim of a feed symbolic (the
    first one of each feed is the shared symbol ``batch``). ``platforms`` (``"cpu"``,
    ``"cuda"``, ``"rocm"``, ``"tpu"``) default to this machine's; ``executor`` is accepted for
    Paddle-style calls and not needed. Details in :mod:`fluidjax.frontend.io.export`.

    >>> # exported = fj.io.export(program, feed_names, fetch_targets)
    >>> # blob = exported.serialize()                       # elsewhere, with only JAX:
    >>> # jax.export.deserialize(blob).call(xs)
    """
    del executor
    return export_program(program, feed_vars, fetch_vars, scope=scope, platforms=platforms)
