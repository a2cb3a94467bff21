"""A persistent XLA compilation cache, on by default.

fluidjax points JAX's persistent compilation cache at ``$XDG_CACHE_HOME/fluidjax/xla`` (or
``~/.cache/fluidjax/xla``) when it is imported, so a second process that runs the same program
skips XLA's compile. The environment variable ``FLUIDJAX_COMPILATION_CACHE`` moves it (a
directory) or turns it off (``0``, ``off``, ``false``, ``no``); a cache directory the user gave
JAX (``JAX_COMPILATION_CACHE_DIR`` or ``jax.config``) is kept as it is.

Safety: JAX keys each entry by the computation, the jax/jaxlib versions, the backend and the XLA
flags, so a stale entry is never used for a different program or setup. With the size limit set
here, JAX reads and writes entries under a file lock (the ``filelock`` package), so two processes
can share the directory; without it JAX writes entries unlocked. The limit (2 GiB, least
recently used entries evicted first) keeps the directory from growing without bound. Only
compilations that took at least 0.2 s are stored: smaller ones compile faster than a disk read.
"""

from __future__ import annotations

import os

import jax

ENV = "FLUIDJAX_COMPILATION_CACHE"
_OFF = {"0", "off", "false", "no", "none"}
MAX_BYTES = 2 << 30
MIN_COMPILE_SECONDS = 0.2


def default_dir() -> str:
    """``$XDG_CACHE_HOME/fluidjax/xla``, or ``~/.cache/fluidjax/xla``."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "fluidjax", "xla")


def configure() -> str | None:
    """Turn the cache on as the environment says; return its directory (None when off)."""
    setting = os.environ.get(ENV, "").strip()
    if setting.lower() in _OFF and setting:
        return None
    existing = jax.config.jax_compilation_cache_dir
    if existing:
        return existing
    path = setting or default_dir()
    try:
        os.makedirs(path, exist_ok=True)
    except OSError:
        return None            # an unwritable home: run without the cache rather than fail
    jax.config.update("jax_compilation_cache_dir", path)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", MIN_COMPILE_SECONDS)
    try:
        import filelock  # noqa: F401  (JAX locks cache entries with it when a size limit is set)
    except ImportError:
        pass
    else:
        jax.config.update("jax_compilation_cache_max_size", MAX_BYTES)
    return path


cache_dir = configure()
