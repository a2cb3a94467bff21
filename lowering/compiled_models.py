"""Compiled executables saved with a model: a first result without tracing or XLA compiling.

``fj.io.save_inference_model(..., compiled=True)`` (or ``fluidjax compile MODEL --feed-shape ...``)
compiles the Executor's step of the saved model for given feed shapes and writes XLA's executable
bytes into a file beside the model (``name.fjexec``; ``frontend/io/compiled.py`` holds the file
and the save/load glue). ``load_inference_model`` reads that file, and the Executor's plan of the
loaded program takes the executable of a matching feed signature as it is: the first ``exe.run``
neither traces the op rules, nor lowers to StableHLO, nor runs XLA's compiler.

**The key.** Each executable is kept with everything that decides what it computes and where it
can run: the SHA-256 of the program it was compiled from (``Program.serialize()``, after
``optimize=True``'s passes when those ran: each variant has its own entry), the feed names, shapes
and dtypes, the fetch list, the platform, the device kind and the platform version (on a CPU also
a hash of the processor's feature flags: code compiled for AVX-512 must not run on an AVX2 host),
the jax and jaxlib versions, fluidjax's version and a hash of its lowering and IR sources (a fixed
op rule changes what a program compiles to), ``XLA_FLAGS``, the x64 and default matmul precision
settings, and fluidjax's run-time check flags. An entry whose key differs in anything is not used:
the step is traced and compiled as without the file, with a :class:`CompiledModelWarning` saying
which field differs. A damaged or truncated file, an entry whose bytes fail their SHA-256, an
executable XLA refuses to load, or a state whose shapes differ from the compiled ones: the same
(a warning, then the ordinary compile, the same answer). A compiled file never makes a load fail.

**The format** (no pickle anywhere). ``FJXEXEC1``, the header's length (8 bytes, little-endian),
the header as UTF-8 JSON (each entry's key, its argument and result avals, its in/out pytree
structures written as JSON, which arguments it keeps and donates, and its bytes' offset, size and
SHA-256), then the raw executables as XLA serialized them (``Client.serialize_executable``).
JAX's own ``jax.experimental.serialize_executable`` pickles its wrapper objects; here only XLA's
bytes are stored and the wrapper is rebuilt from the JSON.

**Trust.** An XLA executable is native machine code. Loading one from a file is like loading a
shared library (``dlopen``): whoever wrote the file can run any code in your process, and no check
here can tell a malicious executable from an honest one (the SHA-256s only catch damage). Load
compiled models only from sources you would take a ``.so`` from; ``load_inference_model(...,
compiled=False)`` ignores the file, and deleting it costs only the compile time.

Which steps can be saved: single-device steps without host callbacks (``py_func``, ``Print``),
``while`` loops (their steps poll the host for Ctrl-C), in-step run-time checks, or LoD fetches.
Others are refused at save time (:class:`~fluidjax.ir.errors.NotOfferedError`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import platform
import struct
import threading
import warnings
import weakref
from typing import Any, Mapping, Sequence

import jax
import numpy as np

from ..ir.errors import FluidJaxError, NotOfferedError
from . import flags

__all__ = ["CompiledModelWarning", "CompiledModelError", "environment", "program_hash", "compile_entry",
           "pack", "unpack", "attach", "wrap_step", "PrecompiledStep", "MAGIC", "SUFFIX"]

MAGIC = b"FJXEXEC1"
SUFFIX = ".fjexec"
_FORMAT = "fluidjax-compiled-model"
_VERSION = 1
_MAX_HEADER = 64 << 20

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class CompiledModelWarning(UserWarning):
    """A model's compiled executables were not used (stale, foreign or damaged): the step is
    traced and compiled as usual, and computes the same answer."""


class CompiledModelError(FluidJaxError, ValueError):
    """A compiled-model file that cannot be read (bad magic, truncated, bad JSON, bytes failing
    their SHA-256). Loads turn it into a :class:`CompiledModelWarning`."""


# -- the key -------------------------------------------------------------------------------------
_source_digest: list = []


def _sources_digest() -> str:
    """SHA-256 of fluidjax's lowering and IR sources (what a program compiles to), once per process."""
    if not _source_digest:
        h = hashlib.sha256()
        for folder in ("ir", "lowering"):
            root = os.path.join(_PACKAGE, folder)
            paths = []
            for dirpath, dirnames, filenames in os.walk(root):
                dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
                paths += [os.path.join(dirpath, f) for f in filenames if f.endswith(".py")]
            for path in sorted(paths):
                h.update(os.path.relpath(path, _PACKAGE).encode())
                with open(path, "rb") as f:
                    h.update(hashlib.sha256(f.read()).digest())
        _source_digest.append(h.hexdigest()[:32])
    return _source_digest[0]


def _fluidjax_version() -> str:
    try:
        from importlib.metadata import version
        return version("fluidjax")
    except Exception:  # noqa: BLE001  (not installed: the sources' digest still tells versions apart)
        return "unknown"


def _host_features() -> str:
    """What native code compiled on this host assumes of the processor: its feature flags."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    features = " ".join(sorted(line.split(":", 1)[1].split()))
                    return hashlib.sha256(features.encode()).hexdigest()[:16]
    except OSError:
        pass
    return f"{platform.machine()}/{platform.processor()}"


def environment(device) -> dict:
    """The part of an executable's key that describes where it runs and what compiled it."""
    import jaxlib

    return {
        "platform": device.platform, "device_kind": device.device_kind,
        "platform_version": str(getattr(device.client, "platform_version", "")),
        "host": _host_features() if device.platform == "cpu" else "",
        "jax": jax.__version__, "jaxlib": jaxlib.__version__,
        "fluidjax": _fluidjax_version(), "fluidjax_sources": _sources_digest(),
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
        "x64": bool(jax.config.jax_enable_x64),
        "matmul_precision": str(jax.config.jax_default_matmul_precision),
        "checks": list(flags.mode),
    }


def program_hash(program) -> str:
    """SHA-256 of ``program``'s ``ProgramDesc`` without its ops' ``op_callstack`` attributes (where the
    code that built an op ran: a pass run from another line gives the same program)."""
    from ..ir.serialize import program_to_proto

    desc = program_to_proto(program)
    for block in desc.blocks:
        for op in block.ops:
            for i in reversed(range(len(op.attrs))):
                if op.attrs[i].name == "op_callstack":
                    del op.attrs[i]
    return hashlib.sha256(desc.SerializeToString(deterministic=True)).hexdigest()


# -- pytrees and avals as JSON -------------------------------------------------------------------
def _tree_json(treedef):
    if treedef.num_nodes == 1 and treedef.num_leaves == 1:
        return "*"
    kind, aux = treedef.node_data()
    kids = [_tree_json(c) for c in treedef.children()]
    if kind is tuple:
        return {"tuple": kids}
    if kind is list:
        return {"list": kids}
    if kind is dict and all(isinstance(k, str) for k in aux):
        return {"dict": [list(aux), kids]}
    if kind is type(None):
        return None
    raise NotOfferedError(f"a compiled step whose arguments or results hold a {kind.__name__} cannot be saved "
                          "(only arrays, tuples, lists and dicts): save the model without compiled=True")


def _tree_example(spec):
    if spec == "*":
        return 0
    if spec is None:
        return None
    if not isinstance(spec, dict) or len(spec) != 1:
        raise CompiledModelError(f"bad pytree structure {spec!r}")
    (kind, body), = spec.items()
    if kind == "tuple":
        return tuple(_tree_example(s) for s in body)
    if kind == "list":
        return [_tree_example(s) for s in body]
    if kind == "dict":
        keys, kids = body
        return {k: _tree_example(s) for k, s in zip(keys, kids)}
    raise CompiledModelError(f"bad pytree structure {spec!r}")


def _tree_from_json(spec):
    return jax.tree_util.tree_structure(_tree_example(spec))


def _aval_json(aval) -> list:
    return [list(aval.shape), np.dtype(aval.dtype).name, bool(aval.weak_type)]


def _aval_from_json(spec):
    from jax._src import core

    shape, dtype, weak = spec
    return core.ShapedArray(tuple(int(d) for d in shape), jax.numpy.dtype(dtype), weak_type=bool(weak))


# -- compiling and serializing -------------------------------------------------------------------
def _refuse(why: str) -> NotOfferedError:
    return NotOfferedError(f"this model's step cannot be saved compiled: {why}. Save it without compiled=True "
                           "(it then compiles at its first run)")


def compile_entry(executor, program, feed: Mapping[str, Any], fetch_list: Sequence, scope) -> tuple[dict, bytes]:
    """Compile ``executor``'s step of ``program`` for ``feed`` (arrays of the shapes and dtypes to
    compile for; their values do not matter) and ``fetch_list``, with the state in ``scope``;
    return (the entry's header, XLA's serialized executable). Nothing runs."""
    _, _, plan, args = executor._prepare(program, dict(feed), list(fetch_list), scope)
    if plan.on_host or plan.interruptible or plan.effects or plan.has_checks or plan.place_state is not None:
        raise _refuse("it runs on the host, has a while loop, host callbacks (py_func, Print) or in-step checks")
    jitted = getattr(plan.step, "jitted", plan.step)
    compiled = _fresh_compile(jitted.lower(*args))
    unloaded = getattr(compiled._executable, "_unloaded_executable", None)
    if unloaded is None or compiled._params.const_args:
        raise _refuse("XLA gives no serializable executable for it")
    if (unloaded.host_callbacks or unloaded.keepalive or unloaded.ordered_effects or unloaded.unordered_effects
            or unloaded.mut is not None or len(unloaded.device_list) != 1):
        raise _refuse("it calls back to Python or spans several devices")
    shardings = list(unloaded.input_shardings) + list(unloaded.output_shardings)
    if not all(isinstance(s, jax.sharding.SingleDeviceSharding) for s in shardings):
        raise _refuse("its arguments are sharded")
    raw = bytes(unloaded.xla_executable.client.serialize_executable(unloaded.xla_executable))
    args_info = jax.tree_util.tree_leaves(compiled.args_info)
    device = unloaded.device_list[0]
    feeds = [[name, list(np.shape(value)), np.dtype(getattr(value, "dtype", None)).name]
             for name, value in zip(plan.feed_names, args[2])]
    header = {
        "key": {"program": program_hash(plan.program), "feeds": feeds, "fetches": list(plan.fetch_names),
                "environment": environment(device)},
        "in_tree": _tree_json(compiled.in_tree), "out_tree": _tree_json(compiled.out_tree),
        "in_avals": [_aval_json(a._aval) for a in args_info], "donated": [bool(a.donated) for a in args_info],
        "kept": sorted(int(i) for i in unloaded.kept_var_idx),
        "out_avals": [_aval_json(a) for a in unloaded.output_avals],
        "in_memory_kinds": [s.memory_kind for s in unloaded.input_shardings],
        "out_memory_kinds": [s.memory_kind for s in unloaded.output_shardings],
        "committed": bool(unloaded.committed), "name": str(unloaded.name),
        "size": len(raw), "sha256": hashlib.sha256(raw).hexdigest(),
    }
    _round_trip(compiled, header, raw, args, device)
    return header, raw


def _fresh_compile(lowered):
    """``lowered.compile()`` by XLA itself, never read from JAX's persistent compilation cache: an
    executable that was read from that cache serializes without some of its kernels (measured,
    jaxlib 0.10.2 on CPU: "Function ... not found" when the re-serialized bytes run)."""
    from jax._src import compilation_cache

    if not compilation_cache.is_persistent_cache_enabled():
        return lowered.compile()
    with _cache_switch:
        jax.config.update("jax_enable_compilation_cache", False)
        compilation_cache.reset_cache()
        try:
            return lowered.compile()
        finally:
            jax.config.update("jax_enable_compilation_cache", True)
            compilation_cache.reset_cache()


_cache_switch = threading.Lock()


def _round_trip(compiled, header: dict, raw: bytes, args: tuple, device) -> None:
    """Load ``raw`` back as a load would and run it and ``compiled`` on copies of ``args``: the
    results must be equal bit for bit, or the save fails (nothing that cannot be used is written)."""
    def copies():
        return jax.tree_util.tree_map(
            lambda x: jax.device_put(np.array(x), device) if isinstance(x, jax.Array) else x, args)

    loaded = _deserialize(header, raw, device)
    want = jax.tree_util.tree_leaves(compiled(*copies()))
    got = jax.tree_util.tree_leaves(loaded(*copies()))
    if len(want) != len(got) or not all(
            np.asarray(a).tobytes() == np.asarray(b).tobytes() for a, b in zip(want, got)):
        raise _refuse("XLA's serialized executable, loaded back, does not compute what the compiled step "
                      "computes")


def pack(entries: Sequence[tuple[dict, bytes]]) -> bytes:
    """The file's bytes for ``entries`` (header, executable bytes)."""
    headers, offset = [], 0
    for header, raw in entries:
        headers.append(dict(header, offset=offset, size=len(raw)))
        offset += len(raw)
    text = json.dumps({"format": _FORMAT, "version": _VERSION, "entries": headers}, sort_keys=True).encode()
    return MAGIC + struct.pack("<Q", len(text)) + text + b"".join(raw for _, raw in entries)


def unpack(data: bytes, where: str = "compiled model") -> list[tuple[dict, bytes]]:
    """The entries of a file's bytes; a :class:`CompiledModelError` for anything malformed."""
    if data[:8] != MAGIC:
        raise CompiledModelError(f"{where}: not a fluidjax compiled-model file (bad magic)")
    if len(data) < 16:
        raise CompiledModelError(f"{where}: truncated")
    (length,) = struct.unpack("<Q", data[8:16])
    if length > min(_MAX_HEADER, len(data) - 16):
        raise CompiledModelError(f"{where}: truncated (header of {length} bytes in a file of {len(data)})")
    try:
        doc = json.loads(data[16:16 + length].decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise CompiledModelError(f"{where}: bad header ({exc})") from None
    if not isinstance(doc, dict) or doc.get("format") != _FORMAT or doc.get("version") != _VERSION:
        raise CompiledModelError(f"{where}: unknown format or version")
    body = memoryview(data)[16 + length:]
    out = []
    for header in doc.get("entries", []):
        try:
            offset, size = int(header["offset"]), int(header["size"])
        except (KeyError, TypeError, ValueError):
            raise CompiledModelError(f"{where}: an entry without offset and size") from None
        if offset < 0 or size < 0 or offset + size > len(body):
            raise CompiledModelError(f"{where}: truncated (an executable ends past the file's end)")
        raw = bytes(body[offset:offset + size])
        if hashlib.sha256(raw).hexdigest() != header.get("sha256"):
            raise CompiledModelError(f"{where}: an executable's bytes fail their SHA-256 (a damaged file)")
        out.append((header, raw))
    return out


def _deserialize(header: dict, raw: bytes, device):
    """A ``jax.stages.Compiled`` of ``raw`` on ``device``, rebuilt from the header (what
    ``jax.experimental.serialize_executable.deserialize_and_load`` unpickles)."""
    from jax._src import stages
    from jax._src.interpreters import pxla
    from jax._src.lib import xla_client as xc

    backend = device.client
    device_list = xc.DeviceList((device,))
    executable = backend.deserialize_executable(raw, executable_devices=device_list)
    all_avals = [_aval_from_json(a) for a in header["in_avals"]]
    kept = set(int(i) for i in header["kept"])
    in_avals = [a for i, a in enumerate(all_avals) if i in kept]
    out_avals = [_aval_from_json(a) for a in header["out_avals"]]
    in_shardings = [jax.sharding.SingleDeviceSharding(device, memory_kind=k) for k in header["in_memory_kinds"]]
    out_shardings = [jax.sharding.SingleDeviceSharding(device, memory_kind=k) for k in header["out_memory_kinds"]]
    if len(in_shardings) != len(in_avals) or len(out_shardings) != len(out_avals):
        raise CompiledModelError("the header's shardings do not match its avals")
    in_layouts, out_layouts = pxla._get_layouts_from_executable(
        executable, [None] * len(in_avals), [None] * len(out_avals), 0, in_avals, out_avals)
    unloaded = pxla.UnloadedMeshExecutable(
        xla_executable=executable, device_list=device_list, backend=backend, input_avals=in_avals,
        input_shardings=in_shardings, output_avals=out_avals, output_shardings=out_shardings,
        committed=bool(header["committed"]), name=str(header["name"]), unordered_effects=[], ordered_effects=[],
        keepalive=[], host_callbacks=[], kept_var_idx=kept, mut=None, xla_in_layouts=in_layouts,
        dispatch_in_layouts=pxla.get_dispatch_layouts(in_layouts, in_shardings, in_avals),
        xla_out_layouts=out_layouts, all_args_info=None, pgle_profiler=None)
    in_tree = _tree_from_json(header["in_tree"])
    if in_tree.num_leaves != len(all_avals) or len(header["donated"]) != len(all_avals):
        raise CompiledModelError("the header's argument structure does not match its avals")
    args_info = in_tree.unflatten([stages.ArgInfo(a, bool(d)) for a, d in zip(all_avals, header["donated"])])
    return stages.Compiled(unloaded.load(), [], args_info, _tree_from_json(header["out_tree"]), no_kwargs=False)


# -- the Executor's side -------------------------------------------------------------------------
def _differs(want: dict, have: dict, prefix: str = "") -> str | None:
    """The first field where two keys differ, as text, or None."""
    for name in sorted(set(want) | set(have)):
        a, b = want.get(name), have.get(name)
        if isinstance(a, dict) and isinstance(b, dict):
            found = _differs(a, b, prefix + name + ".")
            if found:
                return found
        elif a != b:
            return f"{prefix}{name}: saved {a!r}, here {b!r}"
    return None


@dataclasses.dataclass
class _Attached:
    owner: Any                      # weakref to the program
    version: int                    # the program's mutation counter when attached
    where: str                      # the file, for warnings
    by_plan: dict                   # (feed names, fetch names) -> {feed signature: (header, raw)}
    prefetched: dict = dataclasses.field(default_factory=dict)   # sha256 -> (device, Future of its Compiled)


def _signature(feeds) -> tuple:
    return tuple((tuple(int(d) for d in shape), np.dtype(dtype)) for _, shape, dtype in feeds)


def attach(program, entries: Sequence[tuple[dict, bytes]], where: str, device=None) -> list[str]:
    """Give ``program`` the ``entries`` whose key matches it and this process (the Executor's
    plans of it then use them); return why each other entry was left out (for the caller's
    warning). ``device``: where it will run (the default device when None)."""
    device = device or jax.local_devices()[0]
    env = environment(device)
    digest = program_hash(program)
    by_plan: dict = {}
    skipped = []
    for header, raw in entries:
        key = header.get("key") or {}
        differs = _differs({"program": key.get("program"), "environment": key.get("environment") or {}},
                           {"program": digest, "environment": env})
        if differs is not None:
            skipped.append(differs)
            continue
        try:
            feeds = key["feeds"]
            names = tuple(name for name, _, _ in feeds)
            sig = _signature(feeds)
            by_plan.setdefault((names, tuple(key["fetches"])), {})[sig] = (header, raw)
        except (KeyError, TypeError, ValueError):
            skipped.append("a malformed key")
    program._fluidjax_precompiled = _Attached(weakref.ref(program), program._version, where, by_plan,
                                              _prefetch(by_plan, device)) if by_plan else None
    return skipped


_PREFETCH_MAX = 4


def _prefetch(by_plan: dict, device) -> dict:
    """Start deserializing the attached executables on a background thread (sha256 -> Future):
    XLA's deserialization (~40 ms of CPU for ResNet-18) then overlaps the first run's planning and
    parameter transfer instead of preceding its execution. Only for a few entries (a file holding
    many signatures deserializes the others on first use); a failure here surfaces, with its
    warning and the compile, when the step asks for the executable."""
    entries = [e for plan in by_plan.values() for e in plan.values()][:_PREFETCH_MAX]
    entries = [(h, raw) for h, raw in entries
               if (h["key"]["environment"].get("platform"), h["key"]["environment"].get("device_kind"))
               == (device.platform, device.device_kind)]
    if not entries:
        return {}
    from concurrent.futures import Future

    futures = {h.get("sha256"): Future() for h, _ in entries}

    def work():
        for header, raw in entries:
            future = futures[header.get("sha256")]
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(_deserialize(header, raw, device))
            except BaseException as exc:  # noqa: BLE001  (handed to the step, which warns and compiles)
                future.set_exception(exc)

    threading.Thread(target=work, name="fluidjax-deserialize", daemon=True).start()
    return {sha: (device, future) for sha, future in futures.items()}


def wrap_step(program, plan, step, device=None):
    """The Executor's hook: ``step`` (the plan's jitted step), wrapped in a
    :class:`PrecompiledStep` when ``program`` was loaded with compiled executables for this
    plan's feeds and fetches and has not changed since; else ``step`` itself."""
    attached = getattr(program, "_fluidjax_precompiled", None)
    if attached is None or attached.owner() is not program:
        return step
    entries = attached.by_plan.get((plan.feed_names, plan.fetch_names))
    if attached.version != program._version:
        warnings.warn(f"{attached.where}: the program changed after it was loaded; its compiled executables "
                      "are not used (the step is compiled)", CompiledModelWarning, stacklevel=4)
        program._fluidjax_precompiled = None
        return step
    if entries is None:
        have = sorted({names for names, _ in attached.by_plan})
        warnings.warn(f"{attached.where}: no compiled executable for feeds {list(plan.feed_names)} and fetches "
                      f"{list(plan.fetch_names)} (compiled for feeds {[list(h) for h in have]} and the model's "
                      "fetch targets); the step is compiled", CompiledModelWarning, stacklevel=4)
        return step
    if plan.on_host or plan.interruptible or plan.effects or plan.has_checks:
        return step
    return PrecompiledStep(step, entries, device or jax.local_devices()[0], attached.where, attached.prefetched)


_MISSING = object()


class PrecompiledStep:
    """A plan's step that calls deserialized executables for the feed signatures it has them for,
    and its jitted step (``self.jitted``: traced and compiled as usual) for any other."""

    def __init__(self, jitted, entries: dict, device, where: str, prefetched: dict | None = None) -> None:
        self.jitted = jitted
        self._entries = entries
        self._prefetched = prefetched if prefetched is not None else {}
        self._ready: dict = {}
        self._device = device
        self._where = where

    def __call__(self, *args):
        try:
            sig = tuple([(f.shape, f.dtype) for f in args[2]])
        except AttributeError:
            return self.jitted(*args)
        compiled = self._ready.get(sig, _MISSING)
        if compiled is _MISSING:
            compiled = self._resolve(sig, args)
        if compiled is None:
            return self.jitted(*args)
        try:
            return compiled(*args)
        except TypeError as exc:     # raised by the argument check, before anything ran
            self._ready[sig] = None
            self._warn(f"its executable does not take this run's arguments ({exc})")
            return self.jitted(*args)

    def lower(self, *args):
        """What ``jax.jit(...).lower`` gives, or, for a signature with an executable, a stand-in
        whose ``compile()`` is that executable (the Executor reads XLA's memory figures from it)."""
        try:
            sig = tuple([(f.shape, f.dtype) for f in args[2]])
        except AttributeError:
            return self.jitted.lower(*args)
        compiled = self._ready.get(sig, _MISSING)
        if compiled is _MISSING:
            compiled = self._resolve(sig, args)
        if compiled is None:
            return self.jitted.lower(*args)
        return _Loaded(compiled, self.jitted, args)

    def clear_cache(self) -> None:
        self.jitted.clear_cache()

    def _warn(self, why: str) -> None:
        warnings.warn(f"{self._where}: compiled executable not used, {why}; the step is compiled",
                      CompiledModelWarning, stacklevel=5)

    def _resolve(self, sig: tuple, args: tuple):
        entry = self._entries.get(sig)
        compiled = None
        if entry is None:
            saved = [[list(s) for s, _ in k] for k in self._entries]
            self._warn(f"it was compiled for feed shapes {saved}, this run feeds "
                       f"{[list(s) for s, _ in sig]} ({', '.join(d.name for _, d in sig)})")
        else:
            header, raw = entry
            env = header["key"]["environment"]
            try:
                if (env["platform"], env["device_kind"]) != (self._device.platform, self._device.device_kind):
                    raise CompiledModelError(f"it was compiled for a {env['device_kind']} ({env['platform']}), this "
                                             f"Executor runs on {self._device}")
                device, future = self._prefetched.pop(header.get("sha256"), (None, None))
                compiled = future.result() if future is not None and device == self._device \
                    else _deserialize(header, raw, self._device)
                leaves = jax.tree_util.tree_leaves(args)
                want = [_aval_from_json(a) for a in header["in_avals"]]
                if jax.tree_util.tree_structure(args) != _tree_from_json(header["in_tree"]).children()[0] \
                        or len(leaves) != len(want) or any(
                            tuple(np.shape(x)) != a.shape or np.dtype(getattr(x, "dtype", type(x))) != a.dtype
                            for x, a in zip(leaves, want)):
                    self._warn("this run's state or seed has other shapes or dtypes than it was compiled for")
                    compiled = None
            except Exception as exc:  # noqa: BLE001  (XLA refusing the bytes, a malformed header: compile)
                self._warn(f"it could not be loaded ({type(exc).__name__}: {exc})")
                compiled = None
        self._ready[sig] = compiled
        return compiled


class _Loaded:
    """``PrecompiledStep.lower``'s stand-in for a ``jax.stages.Lowered``: ``compile()`` is the loaded
    executable; anything else (``as_text``, ``compiler_ir``) lowers the step for real when asked."""

    def __init__(self, compiled, jitted, args) -> None:
        self._compiled, self._jitted, self._args = compiled, jitted, args

    def compile(self, *_, **__):
        return self._compiled

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._jitted.lower(*self._args), name)
