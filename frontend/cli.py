"""The ``fluidjax`` command line: inspect, run, export, convert and compile saved Paddle models; the demo.

MODEL is a path prefix (``dir/inference`` for ``inference.pdmodel`` + ``inference.pdiparams``) or
a directory (Fluid 1.x ``__model__`` with one file per variable or a combined ``__params__``, or a
directory holding exactly one ``*.pdmodel``). Bad input exits with status 1 (2 for a bad command
line) and one line on stderr saying why; ``FLUIDJAX_TRACEBACK=1`` shows the traceback instead.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections import Counter
from typing import Sequence

import numpy as np

_EPILOG = "MODEL: a path prefix (dir/inference -> inference.pdmodel + .pdiparams) or a model directory."


class CommandError(Exception):
    """Bad input to a command: printed as one line, exit status 1."""


def _add_model(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", metavar="MODEL", help="path prefix or directory of a saved model")
    parser.add_argument("--model-filename", default=None,
                        help="the program file inside a MODEL directory (default __model__)")
    parser.add_argument("--params-filename", default=None,
                        help="the combined parameters file inside a MODEL directory (default: one file per "
                             "variable, or __params__ when present)")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fluidjax", description="Run and convert PaddlePaddle models on JAX.",
                                     epilog=_EPILOG)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    p = sub.add_parser("inspect", help="inputs, outputs, ops and parameters of a saved model", epilog=_EPILOG,
                       description="Show a saved model's inputs and outputs (shapes, dtypes), op counts, "
                                   "parameter count and bytes, and the ops fluidjax does not implement.")
    _add_model(p)
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")

    p = sub.add_parser("run", help="run a saved model on .npy inputs", epilog=_EPILOG,
                       description="Run a saved model; print its outputs, or save them to an .npz file.")
    _add_model(p)
    p.add_argument("--feed", action="append", default=[], metavar="NAME=FILE.npy",
                   help="an input: the model's input NAME read from FILE.npy (repeat for each input)")
    p.add_argument("--out", metavar="FILE.npz", help="save the outputs here (keys: the output names)")

    p = sub.add_parser("export", help="export a saved model as serialized StableHLO (jax.export)",
                       epilog=_EPILOG, description="Write the model's inference function, parameters "
                       "embedded and -1 dims symbolic, as jax.export serialized bytes; load them with "
                       "jax.export.deserialize(open(FILE, 'rb').read()).call(*inputs).")
    _add_model(p)
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="where to write the serialized export")
    p.add_argument("--platform", action="append", dest="platforms", metavar="NAME",
                   help="a platform to export for: cpu, cuda, rocm, tpu (repeat; default: this machine's)")

    p = sub.add_parser("convert", help="convert between Paddle's combined and per-file layouts",
                       epilog=_EPILOG, description="Rewrite a saved model in the other layout: combined "
                       "(OUT.pdmodel + OUT.pdiparams) or per-file (directory OUT with __model__ and one file "
                       "per variable).")
    _add_model(p)
    p.add_argument("output", metavar="OUT", help="a path prefix (combined) or a directory (per-file)")
    p.add_argument("--to", choices=("combined", "per-file"), default=None,
                   help="the layout to write (default: the other one than MODEL's)")

    p = sub.add_parser("compile", help="save compiled executables beside a saved model (no compile at load)",
                       epilog=_EPILOG, description="Compile a saved model for the given input shapes and write "
                       "XLA's executables beside it (NAME.fjexec): load_inference_model then runs it without "
                       "tracing or compiling. Executables are native code: share them only as you would a "
                       "shared library. Repeat --feed-shape for each input; naming an input again starts "
                       "another set of shapes (another executable).")
    _add_model(p)
    p.add_argument("--feed-shape", action="append", default=[], metavar="NAME=1x3x224x224",
                   help="an input's shape (default: its declared shape, -1 dims as 1)")
    p.add_argument("--optimize", choices=("both", "on", "off"), default="both",
                   help="for load_inference_model(optimize=True), (optimize=False), or both (default)")

    sub.add_parser("demo", help="train the seed's model and run it (python -m fluidjax demo --help)",
                   add_help=False)
    return parser


# -- commands ------------------------------------------------------------------------------------
def _load(args, *, check: bool = True):
    """(program, feed names, fetch variables, scope, (model path, params dir, params file))."""
    from . import io as fio
    from ..lowering.scope import Scope

    paths = fio.resolve_model_paths(args.model, args.model_filename, args.params_filename)
    if not os.path.exists(paths[0]):
        raise CommandError(f"no model at {args.model!r} (looked for {paths[0]})")
    scope = Scope()
    if check:
        program, feeds, fetches = fio.load_inference_model(args.model, None, args.model_filename,
                                                           args.params_filename, scope=scope)
    else:
        program = fio.read_program(paths[0])
        feeds = fio.feed_target_names(program)
        fetches = [program.global_block().var(n) for n in fio.fetch_target_names(program)]
    return program, feeds, fetches, scope, paths


def _describe_var(var) -> dict:
    return {"name": var.name, "dtype": var.dtype, "shape": list(var.shape), "lod_level": var.lod_level}


def cmd_inspect(args) -> int:
    from . import io as fio
    from ..ir import dtypes, registry

    program, feeds, fetches, _, (model, params_dir, params_file) = _load(args, check=False)
    block = program.global_block()
    ops = Counter(op.type for b in program.blocks for op in b.ops)
    unsupported = sorted(t for t in ops if t not in fio.FEED_FETCH_OPS and not registry.has(t))
    params = fio.persistable_vars(program)
    # Python ints (math.prod): declared shapes may be huge ([2**40, 2**40]); int64 would wrap.
    values = sum(math.prod(v.shape) if all(d >= 0 for d in v.shape) else 0 for v in params)
    nbytes = sum(math.prod(v.shape) * dtypes.to_numpy(v.dtype).itemsize
                 for v in params if v.dtype and all(d >= 0 for d in v.shape))
    too_new = [(n, v) for n, v in program.op_version_map or () if n in ops and v > fio.SUPPORTED_OP_VERSIONS.get(n, 0)]
    info = {
        "model": model,
        "params": (os.path.join(params_dir, params_file) if params_file else params_dir) if params_dir else None,
        "layout": "combined" if params_file else "per-file" if params_dir else "none",
        "program_version": program.desc_version,
        "inputs": [_describe_var(block.var(n)) for n in feeds],
        "outputs": [_describe_var(v) for v in fetches],
        "blocks": len(program.blocks),
        "ops": dict(sorted(ops.items(), key=lambda kv: (-kv[1], kv[0]))),
        "parameters": {"tensors": len(params), "values": values, "bytes": nbytes},
        "unsupported_ops": unsupported,
        "unsupported_op_versions": [{"op": n, "version": v, "supported": fio.SUPPORTED_OP_VERSIONS.get(n, 0)}
                                    for n, v in too_new],
    }
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    shape = lambda v: f"{v['dtype']} {v['shape']}" + (f" lod_level={v['lod_level']}" if v["lod_level"] else "")  # noqa: E731
    print(f"model:      {info['model']} (program version {info['program_version']})")
    print(f"parameters: {info['params'] or '(none)'} [{info['layout']}]")
    print("inputs:")
    for v in info["inputs"]:
        print(f"  {v['name']}: {shape(v)}")
    print("outputs:")
    for v in info["outputs"]:
        print(f"  {v['name']}: {shape(v)}")
    total = sum(ops.values())
    print(f"ops:        {total} in {info['blocks']} block(s): "
          + ", ".join(f"{t} x{n}" if n > 1 else t for t, n in info["ops"].items()))
    p = info["parameters"]
    print(f"parameters: {p['tensors']} tensors, {p['values']:,} values, {p['bytes']:,} bytes")
    print("unsupported ops: " + (", ".join(unsupported) if unsupported else "none"))
    if too_new:
        print("unsupported op versions: " + ", ".join(f"{n} v{v}" for n, v in too_new))
    return 0


def _parse_feeds(items: Sequence[str]) -> dict[str, np.ndarray]:
    feeds = {}
    for item in items:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise CommandError(f"--feed {item!r}: expected NAME=FILE.npy")
        try:
            # allow_pickle=False: an .npy of Python objects is a pickle, and is refused.
            feeds[name] = np.load(path, allow_pickle=False)
        except FileNotFoundError:
            raise CommandError(f"--feed {name}: no such file {path!r}") from None
        except ValueError as exc:
            raise CommandError(f"--feed {name}: cannot read {path!r} as a NumPy .npy array ({exc})") from None
        if not isinstance(feeds[name], np.ndarray):
            raise CommandError(f"--feed {name}: {path!r} is an .npz archive; give one .npy file per input")
    return feeds


def cmd_run(args) -> int:
    from ..lowering.executor import Executor

    feeds = _parse_feeds(args.feed)
    program, feed_names, fetches, scope, _ = _load(args)
    missing = [n for n in feed_names if n not in feeds]
    unknown = [n for n in feeds if n not in feed_names]
    if missing or unknown:
        parts = [f"missing --feed for {missing}" if missing else "", f"unknown inputs {unknown}" if unknown else ""]
        raise CommandError("; ".join(p for p in parts if p) + f" (the model's inputs are {feed_names})")
    outs = Executor().run(program, feed=feeds, fetch_list=fetches, scope=scope)
    names = [v.name for v in fetches]
    if args.out:
        from .io.saved import AtomicFiles

        files = AtomicFiles()
        try:
            files.write(args.out, lambda f: np.savez(f, **dict(zip(names, outs))))
            files.commit()
        finally:
            files.abort()
        print(f"saved {len(outs)} output(s) to {args.out}: " + ", ".join(names))
        return 0
    for name, value in zip(names, outs):
        print(f"{name}: {value.dtype} {list(value.shape)}")
        print(np.array2string(value, threshold=200, edgeitems=3))
    return 0


def cmd_export(args) -> int:
    from . import io as fio
    from .io.saved import AtomicFiles

    program, feeds, fetches, scope, _ = _load(args)
    exported = fio.export(program, feeds, fetches, scope=scope, platforms=args.platforms)
    data = exported.serialize()
    files = AtomicFiles()
    try:
        files.write(args.output, lambda f: f.write(data))
        files.commit()
    finally:
        files.abort()
    ins = ", ".join(f"{a.dtype}{list(map(str, a.shape))}" for a in exported.in_avals)
    print(f"wrote {args.output}: {len(data):,} bytes of StableHLO for {', '.join(exported.platforms)}; inputs {ins}")
    return 0


def cmd_convert(args) -> int:
    from . import io as fio

    program, _, _, scope, (_, params_dir, params_file) = _load(args)
    to = args.to or ("per-file" if params_file else "combined")
    if to == "per-file" and os.path.exists(args.output) and not os.path.isdir(args.output):
        raise CommandError(f"{args.output} exists and is not a directory")
    paths = fio.save_program_files(args.output, program, scope, combined=(to == "combined"))
    print(f"wrote {to} layout: {len(paths)} file(s) under {os.path.dirname(os.path.abspath(paths[0]))}")
    return 0


def cmd_compile(args) -> int:
    from . import io as fio
    from .io.compiled import parse_feed_shape

    signatures: list[dict] = []
    for item in args.feed_shape:
        name, shape = parse_feed_shape(item)
        if not signatures or name in signatures[-1]:
            signatures.append({})
        signatures[-1][name] = shape
    paths = fio.resolve_model_paths(args.model, args.model_filename, args.params_filename)
    if not os.path.exists(paths[0]):
        raise CommandError(f"no model at {args.model!r} (looked for {paths[0]})")
    optimize = {"both": (False, True), "on": (True,), "off": (False,)}[args.optimize]
    path = fio.compile_saved_model(args.model, signatures or None, model_filename=args.model_filename,
                                   params_filename=args.params_filename, optimize=optimize)
    shapes = "; ".join(", ".join(f"{n}={'x'.join(map(str, s))}" for n, s in sig.items()) for sig in signatures) \
        or "declared shapes, -1 as 1"
    print(f"wrote {path} ({os.path.getsize(path):,} bytes): {len(signatures) or 1} feed signature(s) [{shapes}] x "
          f"{len(optimize)} variant(s) (optimize={args.optimize}); load_inference_model uses them. Executables are "
          "native code: trust the file as you would a shared library")
    return 0


_COMMANDS = {"inspect": cmd_inspect, "run": cmd_run, "export": cmd_export, "convert": cmd_convert,
             "compile": cmd_compile}


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line ``argv`` (default ``sys.argv[1:]``); returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "demo":
        from . import demo

        return demo.main(argv[1:])
    args = _parser().parse_args(argv)
    try:
        return _COMMANDS[args.command](args)
    except KeyboardInterrupt:
        print("fluidjax: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # one line for the user; the traceback on request
        if os.environ.get("FLUIDJAX_TRACEBACK"):
            raise
        text = str(exc).strip().splitlines()
        reason = text[0] if text else type(exc).__name__
        if not isinstance(exc, CommandError):
            reason = f"{type(exc).__name__}: {reason}"
        print(f"fluidjax {args.command}: error: {reason}", file=sys.stderr)
        return 1
