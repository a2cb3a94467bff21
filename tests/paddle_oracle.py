"""Running fluidjax programs in Paddle 2.6.2, the test oracle."""

from __future__ import annotations

import contextlib
import os
from typing import Iterable, Mapping

import numpy as np

os.environ.setdefault("GLOG_minloglevel", "2")
import paddle  # noqa: E402

paddle.enable_static()


@contextlib.contextmanager
def paddle_static():
    """Paddle in static-graph mode for the duration of the block."""
    paddle.enable_static()
    yield


def parse(program_bytes: bytes) -> "paddle.static.Program":
    """Our serialized program, parsed by Paddle."""
    return paddle.static.Program.parse_from_string(program_bytes)


def run(program, feed: Mapping[str, np.ndarray], fetch: Iterable[str],
        params: Mapping[str, np.ndarray] | None = None, scope=None,
        lods: Mapping[str, list] | None = None) -> list[np.ndarray]:
    """Run a Paddle program (or our serialized bytes) with ``params`` put in a fresh scope first.

    Returns the fetched values as NumPy arrays. ``scope`` lets a caller keep the scope across runs
    (pass a ``paddle.static.Scope()``). ``lods`` gives the recursive sequence lengths of the feeds
    that are LoD tensors.
    """
    outs = run_lod(program, feed, fetch, params, scope, lods)
    return [np.array(o) for o in outs]


def run_lod(program, feed, fetch, params=None, scope=None, lods=None) -> list:
    """Like :func:`run`, returning Paddle's LoDTensors (``np.array(t)``, ``t.lod()``)."""
    if isinstance(program, (bytes, bytearray)):
        program = parse(bytes(program))
    scope = scope if scope is not None else paddle.static.Scope()
    place = paddle.CPUPlace()
    exe = paddle.static.Executor(place)
    with paddle.static.scope_guard(scope):
        for name, value in (params or {}).items():
            scope.var(name).get_tensor().set(np.ascontiguousarray(value), place)
        feed = dict(feed)
        for name, lengths in (lods or {}).items():
            feed[name] = paddle.base.create_lod_tensor(np.ascontiguousarray(feed[name]), lengths, place)
        return exe.run(program, feed=feed, fetch_list=list(fetch), return_numpy=False)


def scope_values(scope, names: Iterable[str]) -> dict[str, np.ndarray]:
    """Read variables from a Paddle scope."""
    return {n: np.array(scope.find_var(n).get_tensor()) for n in names}


def persistable_values(program, scope=None) -> dict[str, np.ndarray]:
    """Values of ``program``'s persistable variables held in a fluidjax scope (the global one)."""
    import fluidjax as fj

    scope = scope if scope is not None else fj.global_scope()
    out = {}
    for var in program.list_vars():
        holder = scope.find_var(var.name) if var.persistable else None
        if holder is not None and holder.holds(fj.LoDTensor):
            out[var.name] = np.asarray(holder.get_tensor())
    return out


def run_both(fetch, feed: Mapping[str, np.ndarray], program=None):
    """Run the default startup program, then ``program`` (default: the main one) in fluidjax and,
    serialized, in Paddle with the same persistable values; return (ours, theirs)."""
    import fluidjax as fj

    program = program or fj.default_main_program()
    exe = fj.Executor()
    exe.run(fj.default_startup_program())
    names = [v if isinstance(v, str) else v.name for v in fetch]
    ours = exe.run(program, feed=feed, fetch_list=names)
    theirs = run(program.serialize(), feed, names, persistable_values(program))
    return ours, theirs


def run_programs_both(main, startup, feed: Mapping[str, np.ndarray], fetch):
    """Run ``startup`` then ``main`` in fluidjax (a fresh scope) and, serialized, in Paddle with the
    same persistable values; return (ours, theirs) as NumPy arrays. ``fetch``: variables."""
    import fluidjax as fj

    exe, scope = fj.Executor(fj.CPUPlace()), fj.Scope()
    exe.run(startup, scope=scope)
    params = {v.name: np.asarray(scope.find_var(v.name).get_tensor()).copy()
              for v in main.list_vars() if v.persistable and scope.find_var(v.name) is not None
              and v.name not in ("feed", "fetch")}
    names = [f.name for f in fetch]
    ours = exe.run(main, feed=feed, fetch_list=names, scope=scope)
    theirs = run(main.serialize(), feed, names, params)
    return [np.asarray(o) for o in ours], theirs


def save_image_model(model, path: str, size: int) -> None:
    """``paddle.jit.save`` a dygraph image model in eval mode, its input ``image`` [N, 3, size, size]."""
    model.eval()
    spec = [paddle.static.InputSpec([None, 3, size, size], "float32", "image")]
    paddle.jit.save(model, path, input_spec=spec)


def run_inference_model(prefix: str, xs: np.ndarray) -> np.ndarray:
    """A saved inference model run by Paddle's static Executor on ``xs`` (its first feed); Paddle
    is left in dygraph mode."""
    paddle.enable_static()
    try:
        exe = paddle.static.Executor(paddle.CPUPlace())
        with paddle.static.scope_guard(paddle.static.Scope()):
            program, feeds, fetches = paddle.static.load_inference_model(prefix, exe)
            out, = exe.run(program, feed={feeds[0]: xs}, fetch_list=fetches)
    finally:
        paddle.disable_static()
    return out


def randomize_batch_norms(model, seed: int) -> None:
    """A dygraph model's batch norms given random statistics and affine parameters (not the
    identity), so that folding them is checked."""
    rng = np.random.default_rng(seed)
    for sub in model.sublayers():
        if isinstance(sub, paddle.nn.BatchNorm2D):
            c = sub._mean.shape[0]
            sub._mean.set_value(rng.normal(0, 0.5, c).astype("float32"))
            sub._variance.set_value(rng.uniform(0.5, 2.0, c).astype("float32"))
            sub.weight.set_value(rng.uniform(0.5, 1.5, c).astype("float32"))
            sub.bias.set_value(rng.normal(0, 0.5, c).astype("float32"))
