"""Fluid 1.6+'s ``fluid.save`` / ``fluid.load`` / ``fluid.io.load_program_state`` /
``fluid.io.set_program_state``, without pickle.

Fluid writes ``model_path.pdparams`` (the parameters), ``model_path.pdopt`` (the optimizer's
state: moments, beta pows, learning rate, counters) and ``model_path.pdmodel`` (the
``ProgramDesc``). Fluid's ``.pdparams`` / ``.pdopt`` are Python pickles of ``{name: ndarray}``;
loading a pickle can run arbitrary code, so fluidjax never reads or writes one. fluidjax writes
the same three paths; ``.pdmodel`` is the serialized ``ProgramDesc`` as Fluid writes it, and
``.pdparams`` / ``.pdopt`` are a **state file** of fluidjax's own::

    16 bytes  magic  b"\\x89FLUIDJAX-STATE\\n"  (0x89: never the first byte of a pickle)
    uint32    format version (1)
    uint64    byte size of the index
    bytes     the index: UTF-8 JSON {"format": "fluidjax-program-state", "version": 1,
                                     "names": [the variables, in the order of their tensors]}
    then, per name, one Paddle tensor stream (:mod:`.tensor_stream`: header, dims, elements)

Every size is checked against the file before anything is allocated (the tensor streams are read
by :class:`~.tensor_stream.TensorReader`); a duplicate or missing name is a
:class:`TensorFormatError`. A genuine Paddle ``.pdparams`` / ``.pdopt`` (a pickle) is refused with
:class:`UnsafeFormatError` saying how to convert it: in a trusted process with Paddle,
``state = paddle.static.load_program_state(path)`` then ``numpy.savez(out, **state)``; load that
with ``numpy.load(out, allow_pickle=False)`` and :func:`set_program_state`.

The files are written as one save that a kill cannot tear (:mod:`.atomic`: temporaries renamed
under the directory's manifest) and read through the manifest check. All values are read and
checked (dtype and shape against the program's variables) before the scope changes: a bad file
leaves the scope as it was.

>>> # fluid.save(train_program, "ckpt/step_10")      # ckpt/step_10.pdparams, .pdopt, .pdmodel
>>> # fluid.load(train_program, "ckpt/step_10", exe)
>>> # state = fluid.io.load_program_state("ckpt/step_10")
>>> # fluid.io.set_program_state(test_program, state)
"""

from __future__ import annotations

import json
import os
import struct
import warnings
from typing import Iterable, Mapping

import numpy as np

from ...ir import dtypes
from ...ir.errors import ParameterMismatchError, TensorFormatError, UninitializedVariableError
from ...ir.program import Program
from ...ir.serialize import program_to_proto
from ...ir.variable import Variable
from ...lowering.lod_tensor import LoDTensor
from ...lowering.scope import Scope, global_scope, state_lock
from .atomic import MANIFEST_NAME, AtomicFiles, ManifestCheck, read_verified
from .saved import _is_parameter, _is_saved, _scope_value, _set_scope_values, load_vars
from .tensor_stream import TensorReader, describe_foreign, write_tensor

__all__ = ["save", "load", "load_program_state", "set_program_state", "STATE_MAGIC", "read_state_file",
           "write_state_file"]

STATE_MAGIC = b"\x89FLUIDJAX-STATE\n"
STATE_FORMAT, STATE_VERSION = "fluidjax-program-state", 1
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
PARAMS_SUFFIX, OPT_SUFFIX, MODEL_SUFFIX = ".pdparams", ".pdopt", ".pdmodel"


def _convert_hint(path: str) -> str:
    return (f"{path}: this is a Python pickle (Paddle's own .pdparams/.pdopt format). Loading a pickle can run "
            "arbitrary code, so fluidjax never unpickles. Convert it once, in a trusted process with Paddle: "
            f"`import numpy, paddle; paddle.enable_static(); state = paddle.static.load_program_state({path!r}); "
            "numpy.savez('state.npz', **state)`; then in fluidjax: "
            "`fluid.io.set_program_state(program, dict(numpy.load('state.npz', allow_pickle=False)))` "
            "(or fluid.save the program once to get fluidjax's state files)")


def _is_optimizer_state(var: Variable) -> bool:
    """Fluid's ``is_belong_to_optimizer``: persistable state that is not a parameter."""
    return _is_saved(var) and not _is_parameter(var)


def _unique_vars(program: Program, predicate) -> list[Variable]:
    found: dict[str, Variable] = {}
    for var in program.list_vars():
        if var.name not in found and predicate(var):
            found[var.name] = var
    return list(found.values())


def _prefix(model_path: str) -> str:
    for suffix in (PARAMS_SUFFIX, OPT_SUFFIX, MODEL_SUFFIX):
        if model_path.endswith(suffix):
            return model_path[: -len(suffix)]
    return model_path


# -- the state file ---------------------------------------------------------------------------------
def write_state_file(f, values: Mapping[str, tuple[np.ndarray, list]]) -> None:
    """Write ``{name: (array, lod)}`` to the open binary file ``f`` as one state file (names sorted)."""
    names = sorted(values)
    index = json.dumps({"format": STATE_FORMAT, "version": STATE_VERSION, "names": names},
                       ensure_ascii=False).encode("utf-8")
    f.write(STATE_MAGIC + _U32.pack(STATE_VERSION) + _U64.pack(len(index)) + index)
    for name in names:
        write_tensor(f, *values[name])


def read_state_file(path: str, check: ManifestCheck | None = None,
                    expect: Mapping[str, Variable] | None = None) -> dict[str, tuple[np.ndarray, list]]:
    """Read a state file written by :func:`write_state_file`: ``{name: (array, lod)}``. A tensor
    whose name is in ``expect`` is checked against that variable's dtype and shape (-1: any)
    before its data is read. A pickle (Paddle's own format) is an :class:`UnsafeFormatError`."""
    from ...ir.errors import UnsafeFormatError

    try:
        f = open(path, "rb") if check is None else check.open(path)
    except FileNotFoundError:
        raise TensorFormatError(f"{path}: no such file (a fluid.save state file)", path=path) from None
    with f:
        size = os.fstat(f.fileno()).st_size
        head = f.read(len(STATE_MAGIC))
        if head != STATE_MAGIC:
            kind = describe_foreign(head)
            if kind == "pickle":
                raise UnsafeFormatError(_convert_hint(path), path=path)
            raise TensorFormatError(f"{path}: not a fluidjax state file (fluid.save's .pdparams/.pdopt)"
                                    + (f"; it is {kind}" if kind else ""), path=path)
        reader = TensorReader(f, path, size)
        reader.pos = len(STATE_MAGIC)
        (version,) = _U32.unpack(reader._read(4, None, "the state file version"))
        if version != STATE_VERSION:
            raise TensorFormatError(f"{path}: state file version {version}; this fluidjax reads version "
                                    f"{STATE_VERSION} (written by a newer fluidjax?)", path=path)
        (index_size,) = _U64.unpack(reader._read(8, None, "the index size"))
        if index_size > reader.remaining:
            raise TensorFormatError(f"{path}: truncated file: the index needs {index_size} bytes, "
                                    f"{reader.remaining} are left", path=path)
        try:
            index = json.loads(reader._read(index_size, None, "the index").decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise TensorFormatError(f"{path}: malformed state file index ({exc})", path=path) from None
        names = index.get("names") if isinstance(index, dict) else None
        if (not isinstance(index, dict) or index.get("format") != STATE_FORMAT or not isinstance(names, list)
                or not all(isinstance(n, str) for n in names)):
            raise TensorFormatError(f"{path}: the state file index is not a {STATE_FORMAT} index", path=path)
        if len(set(names)) != len(names):
            raise TensorFormatError(f"{path}: the state file names a variable twice", path=path)
        values = {}
        for name in names:
            var = (expect or {}).get(name)
            want = None if var is None else (var.dtype, tuple(var.shape))
            values[name] = reader.read_tensor(name, want)
        if not reader.at_end():
            raise TensorFormatError(f"{path}: {reader.remaining} bytes are left after the last of its "
                                    f"{len(names)} tensors", path=path)
    return values


# -- Fluid's API ----------------------------------------------------------------------------------------
def save(program: Program, model_path: str, protocol: int = 4, **configs) -> None:
    """Fluid's ``fluid.save(program, model_path)``: the program's parameters to
    ``model_path.pdparams``, its optimizer state to ``model_path.pdopt``, the program to
    ``model_path.pdmodel``, all from the global scope, as one save (see the module docstring for
    the format; ``protocol`` is accepted for Fluid's signature: nothing is pickled)."""
    del configs
    if not isinstance(protocol, int) or not 2 <= protocol <= 4:
        raise ValueError(f"fluid.save: protocol must be an int in 2..4 (Fluid's range), got {protocol!r}")
    if not os.path.basename(model_path):
        raise ValueError(f"fluid.save: model_path must be dirname/filename, got {model_path!r}")
    program = getattr(program, "_program", None) or program        # a CompiledProgram
    scope = global_scope()
    params = [v.name for v in _unique_vars(program, _is_parameter)]
    opt = [v.name for v in _unique_vars(program, _is_optimizer_state)]
    with state_lock(scope):
        values = {n: _scope_value(scope, n) for n in params + opt}
    model = program_to_proto(program).SerializeToString()
    dirname = os.path.dirname(os.path.abspath(model_path))
    os.makedirs(dirname, exist_ok=True)
    files = AtomicFiles()
    try:
        files.set_root(dirname)
        files.write(model_path + PARAMS_SUFFIX, lambda f: write_state_file(f, {n: values[n] for n in params}))
        files.write(model_path + OPT_SUFFIX, lambda f: write_state_file(f, {n: values[n] for n in opt}))
        files.write(model_path + MODEL_SUFFIX, lambda f: f.write(model))
        files.commit()
    finally:
        files.abort()


def load(program: Program, model_path: str, executor=None, var_list: Iterable | None = None) -> None:
    """Fluid's ``fluid.load(program, model_path, executor=None, var_list=None)``: set the
    program's parameters (from ``.pdparams``) and optimizer state (from ``.pdopt``, required when
    the program has any) in the global scope. Every saved tensor is checked against the
    program's variable (dtype, shape) before anything changes. Without ``model_path.pdparams``,
    as Fluid: a directory of ``save_persistables``/``save_params``/``save_vars`` files (the
    program's variables that have a file there, or ``var_list``), or one combined file with
    ``var_list``."""
    del executor
    program = getattr(program, "_program", None) or program
    prefix = _prefix(model_path)
    params_path = prefix + PARAMS_SUFFIX
    if not os.path.exists(params_path):
        _load_fluid_vars(program, model_path, var_list)
        return
    params = _unique_vars(program, _is_parameter)
    opt = _unique_vars(program, _is_optimizer_state)
    root = os.path.dirname(os.path.abspath(params_path))

    def read(check):
        loaded = _read_needed(params_path, params, check)
        if opt:
            opt_path = prefix + OPT_SUFFIX
            if not os.path.exists(opt_path):
                raise TensorFormatError(f"{opt_path}: no such file: the program has optimizer state "
                                        f"({len(opt)} variables, e.g. {opt[0].name!r}) and fluid.load needs "
                                        "the .pdopt that fluid.save wrote beside the .pdparams", path=opt_path)
            loaded.update(_read_needed(opt_path, opt, check))
        return loaded

    _set_scope_values(global_scope(), read_verified(root, read))


def _read_needed(path: str, variables: list[Variable], check) -> dict[str, tuple[np.ndarray, list]]:
    want = {v.name: v for v in variables}
    values = read_state_file(path, check, want)
    missing = [n for n in want if n not in values]
    if missing:
        raise TensorFormatError(f"{path}: has no tensor for the program's variable(s) {missing[:5]} "
                                f"({len(missing)} missing): is it the state of another program?", path=path)
    return {n: values[n] for n in want}


def _files_under(dirname: str) -> list[str]:
    """Relative names of the files under ``dirname`` (fluidjax's manifest and temporaries left out)."""
    found = []
    for root, _dirs, files in os.walk(dirname):
        for name in files:
            if name == MANIFEST_NAME or (name.startswith(".") and name.endswith(".tmp")):
                continue
            found.append(os.path.relpath(os.path.join(root, name), dirname).replace("\\", "/"))
    return sorted(found)


def _load_fluid_vars(program: Program, model_path: str, var_list) -> None:
    """``fluid.load``'s fallback: files of ``save_vars`` / ``save_persistables`` / ``save_params``."""
    if os.path.isdir(model_path):
        files = set(_files_under(model_path))
        wanted = None if var_list is None else {getattr(v, "name", v) for v in var_list}
        variables = [v for v in _unique_vars(program, _is_saved)
                     if v.name in files and (wanted is None or v.name in wanted)]
        unused = files - {v.name for v in variables}
        if unused:
            warnings.warn(f"fluid.load: variable file(s) {sorted(unused)[:8]} in {model_path!r} not used")
        load_vars(None, model_path, program, vars=variables)
    elif os.path.isfile(model_path):
        if var_list is None:
            raise ValueError(f"fluid.load: {model_path!r} is one file of save_vars/save_persistables "
                             "(filename=...): pass var_list, the variables it holds")
        dirname, filename = os.path.split(model_path)
        load_vars(None, dirname, program, vars=list(var_list), filename=filename)
    else:
        raise TensorFormatError(f"fluid.load: neither {_prefix(model_path) + PARAMS_SUFFIX!r} (fluid.save) nor "
                                f"a directory or file {model_path!r} (save_persistables / save_vars) exists",
                                path=model_path)


def load_program_state(model_path: str, var_list: Iterable | None = None) -> dict[str, np.ndarray]:
    """Fluid's ``fluid.io.load_program_state``: ``{name: ndarray}`` of what ``fluid.save`` wrote
    (``.pdparams`` and, when present, ``.pdopt``); without ``.pdparams``, as Fluid: every
    tensor file of a ``save_persistables``/``save_vars`` directory (or only ``var_list``'s), or
    ``var_list``'s tensors from one combined file."""
    prefix = _prefix(model_path)
    params_path = prefix + PARAMS_SUFFIX
    if os.path.exists(params_path):
        root = os.path.dirname(os.path.abspath(params_path))

        def read(check):
            state = read_state_file(params_path, check)
            if os.path.exists(prefix + OPT_SUFFIX):
                state.update(read_state_file(prefix + OPT_SUFFIX, check))
            return state

        return {name: array for name, (array, _lod) in read_verified(root, read).items()}
    if os.path.isfile(model_path):
        if var_list is None:
            raise ValueError("load_program_state: var_list can not be None when model_path is a file "
                             "(one combined file of save_vars)")
        dirname, filename = os.path.split(model_path)
        names = sorted(getattr(v, "name", v) for v in var_list)

        def read_combined(check):
            path = model_path
            f = open(path, "rb") if check is None else check.open(path)
            with f:
                reader = TensorReader(f, path, os.fstat(f.fileno()).st_size)
                out = {n: reader.read_tensor(n)[0] for n in names}
                if not reader.at_end():
                    raise TensorFormatError(f"{path}: {reader.remaining} bytes are left after the "
                                            f"{len(names)} tensors of var_list", path=path)
                return out

        return read_verified(dirname or ".", read_combined)
    if os.path.isdir(model_path):
        names = (_files_under(model_path) if var_list is None
                 else [getattr(v, "name", v) for v in var_list])

        def read_dir(check):
            out = {}
            for name in names:
                path = os.path.join(model_path, *name.split("/"))
                f = check.open(path)
                with f:
                    reader = TensorReader(f, path, os.fstat(f.fileno()).st_size)
                    out[name] = reader.read_tensor(name)[0]
                    if not reader.at_end():
                        raise TensorFormatError(f"{path}: {reader.remaining} bytes are left after the tensor "
                                                f"of {name!r}", path=path, variable=name)
            return out

        return read_verified(model_path, read_dir)
    raise TensorFormatError(f"load_program_state: neither {params_path!r} (fluid.save) nor a directory or file "
                            f"{model_path!r} (save_persistables / save_vars) exists", path=model_path)


def set_program_state(program: Program, state_dict: Mapping[str, np.ndarray], scope: Scope | None = None) -> None:
    """Fluid's ``fluid.io.set_program_state``: set each persistable variable of ``program``
    that ``state_dict`` names. The variable must hold a value already (run the startup program
    first); a value of another shape or dtype is a :class:`ParameterMismatchError`, raised before
    anything changes. Names the program lacks are reported with a warning, as Fluid does."""
    program = getattr(program, "_program", None) or program
    scope = global_scope() if scope is None else scope
    updates = {}
    with state_lock(scope):
        for var in _unique_vars(program, _is_saved):
            if var.name not in state_dict:
                continue
            holder = scope.find_var(var.name)
            tensor = holder.get(LoDTensor) if holder is not None and holder.holds(LoDTensor) else None
            if tensor is None or not tensor._is_initialized():
                raise UninitializedVariableError(f"set_program_state: variable {var.name!r} has no value in the "
                                                 "scope: run the startup program first")
            current = np.asarray(tensor.value())
            new = np.asarray(state_dict[var.name])
            if new.shape != current.shape or dtypes.normalize(new.dtype) != dtypes.normalize(current.dtype):
                raise ParameterMismatchError(
                    f"set_program_state: variable {var.name!r} needs shape {list(current.shape)} and dtype "
                    f"{dtypes.normalize(current.dtype)}, the state holds shape {list(new.shape)} and dtype "
                    f"{new.dtype}", variable=var.name)
            updates[var.name] = (new, [])
    _set_scope_values(scope, updates)
    unused = [name for name in state_dict if name not in updates]
    if unused:
        warnings.warn("set_program_state: these values are not set, the program has no persistable variable "
                      f"of their name: {' '.join(unused)}")
