"""A saved model's compiled executables on disk: ``name.fjexec`` beside ``name.pdmodel``.

:func:`~fluidjax.frontend.io.saved.compile_saved_model` (also ``save_inference_model(...,
compiled=True)`` and ``fluidjax compile MODEL --feed-shape NAME=1x3x224x224``) compiles the Executor's step of a saved model for
given feed shapes and writes XLA's executables beside the model; :func:`attach_compiled`, called
by ``load_inference_model``, hands them to the loaded program, whose first ``exe.run`` with a
matching feed then neither traces nor compiles. What the key holds, the file format, and why a
stale, foreign or damaged file only costs a warning and a compile: see
:mod:`fluidjax.lowering.compiled_models`.

**Trust.** An executable is native code: loading a compiled model runs machine code its author
wrote, as loading a shared library does. Use compiled files only from sources you trust that
much; ``load_inference_model(..., compiled=False)`` ignores them.

>>> # fj.io.save_inference_model("out/net", [image], [prob], exe, compiled=True)   # batch 1
>>> # fj.io.compile_saved_model("out/net", {"image": (8, 3, 224, 224)})           # add batch 8
>>> # program, feeds, fetches = fj.io.load_inference_model("out/net", exe)        # uses them
"""

from __future__ import annotations

import os
import warnings
from typing import Iterable, Mapping, Sequence

import numpy as np

from ...ir import dtypes
from ...ir.errors import FeedError
from ...lowering import compiled_models
from ...lowering.compiled_models import CompiledModelError, CompiledModelWarning
from .atomic import AtomicFiles

__all__ = ["compile_variants", "compiled_path", "attach_compiled", "remove_compiled", "parse_feed_shape",
           "CompiledModelWarning", "CompiledModelError"]

MODEL_SUFFIX = ".pdmodel"


def compiled_path(model_file: str) -> str:
    """Where the compiled executables of the program file ``model_file`` live: ``name.fjexec`` for
    ``name.pdmodel``, ``__model__.fjexec`` for a Fluid 1.x directory's ``__model__``."""
    base = model_file[:-len(MODEL_SUFFIX)] if model_file.endswith(MODEL_SUFFIX) else model_file
    return base + compiled_models.SUFFIX


def parse_feed_shape(text: str) -> tuple[str, tuple[int, ...]]:
    """``"image=1x3x224x224"`` -> ``("image", (1, 3, 224, 224))`` (also ``,`` between dims)."""
    name, sep, dims = text.partition("=")
    try:
        if not sep or not name:
            raise ValueError
        shape = tuple(int(d) for d in dims.replace(",", "x").split("x") if d.strip() != "")
        if any(d < 0 for d in shape):
            raise ValueError
    except ValueError:
        raise FeedError(f"bad feed shape {text!r}: write NAME=1x3x224x224 (non-negative dims)") from None
    return name, shape


def _signatures(program, feed_names: Sequence[str], feed_shapes) -> list[dict[str, tuple[int, ...]]]:
    """The feed shapes to compile for: one dict per signature (see :func:`compile_saved_model`)."""
    block = program.global_block()
    if feed_shapes is None or feed_shapes is True:
        return [{n: tuple(1 if d < 0 else d for d in block.var(n).shape) for n in feed_names}]
    items = [feed_shapes] if isinstance(feed_shapes, Mapping) else list(feed_shapes)
    out = []
    for item in items:
        if not isinstance(item, Mapping):
            raise FeedError(f"feed_shapes: expected a dict of feed name -> shape (or a list of them), got {item!r}")
        shapes = {}
        for name in feed_names:
            var = block.var(name)
            if name in item:
                shape = item[name]
                shape = parse_feed_shape(f"{name}={shape}")[1] if isinstance(shape, str) else tuple(int(d) for d in shape)
            else:
                shape = tuple(1 if d < 0 else d for d in var.shape)
            if len(shape) != len(var.shape) or any(0 <= d != s for d, s in zip(var.shape, shape)) \
                    or any(s < 0 for s in shape):
                raise FeedError(f"feed {name!r}: shape {list(shape)} does not fit its declaration "
                                f"{list(var.shape)} (every -1 needs a size, the others stay)")
            shapes[name] = shape
        unknown = set(item) - set(feed_names)
        if unknown:
            raise FeedError(f"feed_shapes names {sorted(unknown)}, which are not inputs of the model "
                            f"(its inputs: {list(feed_names)})")
        out.append(shapes)
    return out


def compile_variants(model_file: str, load, feed_shapes=None, optimize: Iterable[bool] = (False, True)) -> str:
    """:func:`~fluidjax.frontend.io.saved.compile_saved_model`'s work: ``load(optimize)`` gives
    ``(program, feed names, fetch variables, scope)`` of the saved model ``model_file`` loaded
    without its compiled file; each variant is compiled for each signature of ``feed_shapes``, and
    the executables are written to :func:`compiled_path` with those the file holds for other keys
    (made by this same jax/fluidjax/device/XLA flags). Returns the file's path."""
    from ...lowering.executor import Executor

    target = compiled_path(model_file)
    new: list = []
    for opt in dict.fromkeys(bool(o) for o in optimize):
        program, feeds, fetches, scope = load(opt)
        exe = Executor()
        block = program.global_block()
        for shapes in _signatures(program, feeds, feed_shapes):
            feed = {n: np.zeros(shapes[n], dtypes.to_numpy(block.var(n).dtype)) for n in feeds}
            new.append(compiled_models.compile_entry(exe, program, feed, fetches, scope))
    keys = [h["key"] for h, _ in new]
    env = new[0][0]["key"]["environment"] if new else None
    try:
        old = _read(target) if os.path.exists(target) else []
    except (CompiledModelError, OSError):
        old = []                                   # a damaged file is replaced
    kept = [(h, raw) for h, raw in old if h.get("key") not in keys and (h.get("key") or {}).get("environment") == env]
    data = compiled_models.pack(kept + new)
    files = AtomicFiles()
    try:
        files.write(target, lambda f: f.write(data))
        files.commit()
    finally:
        files.abort()
    return target


def _read(path: str) -> list:
    with open(path, "rb") as f:
        data = f.read()
    return compiled_models.unpack(data, path)


def attach_compiled(program, model_file: str, device=None) -> bool:
    """Give ``program`` (just loaded from ``model_file``) the executables of its compiled file that
    match it; True when some do. A missing file: False, silently; an unreadable one, or one with no
    executable for this program and this setup: False, with a :class:`CompiledModelWarning`."""
    path = compiled_path(model_file)
    if not os.path.exists(path):
        return False
    try:
        entries = _read(path)
    except (CompiledModelError, OSError) as exc:
        warnings.warn(f"{path}: compiled executables not used ({exc}); the model compiles at its first run",
                      CompiledModelWarning, stacklevel=3)
        return False
    skipped = compiled_models.attach(program, entries, path, device)
    if getattr(program, "_fluidjax_precompiled", None) is None:
        why = skipped[0] if skipped else "the file holds no executable"
        warnings.warn(f"{path}: no compiled executable matches this program and setup ({why}); the model "
                      "compiles at its first run", CompiledModelWarning, stacklevel=3)
        return False
    return True


def remove_compiled(model_file: str) -> None:
    """Remove ``model_file``'s compiled executables (a save replaced the model they were made for)."""
    try:
        os.remove(compiled_path(model_file))
    except FileNotFoundError:
        pass
