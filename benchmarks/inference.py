"""CPU inference of saved Paddle models: fluidjax (with fj.passes) against Paddle Inference
(oneDNN on and off), Paddle's static Executor, and hand-written JAX (ResNet-18).

The models — ResNet-18 and MobileNetV2 (224×224) and a transformer encoder (4 layers, d_model
256, 64 tokens) — are built with random weights (batch-norm statistics random, not the identity)
and saved with ``paddle.jit.save`` into a temporary directory, which is removed at the end. Every
side loads the same files. For each model and batch size (1 and 8) the script prints the median
time of a run and each side's ratio to fluidjax, and the time to the first result (load + compile
+ one run) of fluidjax and Paddle Inference; every side's output is checked against Paddle's
static Executor (relative error).

    .venv/bin/python benchmarks/inference.py                      # everything
    .venv/bin/python benchmarks/inference.py --models resnet18 --batches 8 --repeat 20
    .venv/bin/python benchmarks/inference.py --xla-flags "--xla_cpu_use_thunk_runtime=true"
    .venv/bin/python benchmarks/inference.py --no-passes          # fluidjax without fj.passes
    .venv/bin/python benchmarks/inference.py --cache-check        # JAX's persistent cache, 2nd process
    .venv/bin/python benchmarks/inference.py --first --rounds 7    # first result, compiled model vs PI
    .venv/bin/python benchmarks/inference.py --models resnet18 --sides fluidjax pi_onednn \
        --variant onednn XLA_FLAGS=--xla_cpu_use_onednn=true --variant nchw layout=NCHW   # options

**Each side runs alone in its own process** (the default): the parent only saves the models (it
imports Paddle, never JAX); one child process per (side, model, batch) loads the model, warms up,
times ``--repeat`` back-to-back runs and prints their median. A fluidjax child imports no Paddle, a
Paddle child no JAX. The sides take turns, the order reversed every other round, ``--rounds``
rounds; the report gives each side's median over rounds with its spread (min-max of the rounds'
medians) and the fluidjax / Paddle Inference ratio per round (median and min-max). With both
frameworks in one process their thread pools compete and the figures measure the interference
(Paddle Inference's time doubled that way); ``--same-process`` keeps the old one-process mode.
``--variant NAME KEY=VALUE ...`` adds a fluidjax side ``fj:NAME``: an upper-case key is an
environment variable of its process (``XLA_FLAGS=...``), ``layout=NCHW|NHWC|none``, ``passes=0``,
``fold=0``, ``per_sample=0`` choose what ``fj.passes.optimize_inference`` does.

``--xla-flags`` sets ``XLA_FLAGS`` before JAX starts (flags have no effect later). Targets
(docs/inference.md): fluidjax ≤ Paddle Inference with oneDNN at batch 8 (≤ 1.2× at batch 1),
and ≤ 1.05× hand-written JAX. Timings on a loaded machine are noise: run it when it is quiet.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

MODELS = ("resnet18", "mobilenet_v2", "transformer_encoder")


def _args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    p.add_argument("--batches", nargs="+", type=int, default=[1, 8])
    p.add_argument("--repeat", type=int, default=10, help="timed runs per side (median reported)")
    p.add_argument("--size", type=int, default=224, help="image size of the CNNs")
    p.add_argument("--threads", type=int, default=2, help="Paddle Inference's CPU threads")
    p.add_argument("--xla-flags", default=None, help="XLA_FLAGS for this process (set before JAX starts)")
    p.add_argument("--no-passes", action="store_true", help="fluidjax without fj.passes")
    p.add_argument("--sides", nargs="+", default=None,
                   help="only these sides (fluidjax, pi_onednn, pi_plain, static, jax; also fj_nopass: "
                        "fluidjax without fj.passes, to see what the passes do)")
    p.add_argument("--cache-check", action="store_true",
                   help="time to first result of fluidjax in two fresh processes sharing a persistent "
                        "JAX compilation cache (ResNet-18, batch 1)")
    p.add_argument("--first", action="store_true",
                   help="time to the first result (load + first run, process start excluded), each side in its "
                        "own fresh process, sides alternating: fluidjax with a compiled model (fluidjax compile; "
                        "optimize=True, and fj_plain: optimize=False) vs Paddle Inference (oneDNN); also fluidjax "
                        "compiling cold (fj_cold), and a jax.export of the model deserialized and compiled")
    p.add_argument("--rounds", type=int, default=5,
                   help="processes per side, model (and batch): the sides take turns, order reversed every other round")
    p.add_argument("--variant", nargs="+", action="append", default=[], metavar="NAME KEY=VALUE",
                   help="an extra fluidjax side fj:NAME; KEY=VALUE: upper-case keys are environment variables of "
                        "its process (XLA_FLAGS=...), layout=NHWC|NCHW|none, passes=0|1, fold=0|1, per_sample=0|1")
    p.add_argument("--sweep", action="store_true",
                   help="add the XLA:CPU option variants of docs/inference.md as fluidjax sides (SWEEP)")
    p.add_argument("--same-process", action="store_true",
                   help="the old mode: every side in this one process, taking turns run by run (the thread pools "
                        "of the two frameworks interfere: measures the interference as much as the sides)")
    p.add_argument("--child", nargs=5, default=None, help=argparse.SUPPRESS)  # SIDE MODEL PREFIX BATCH OUT
    p.add_argument("--first-child", nargs=3, default=None, help=argparse.SUPPRESS)  # SIDE PREFIX BATCH
    p.add_argument("--first-result-only", default=None, help=argparse.SUPPRESS)  # the --cache-check child
    p.add_argument("--cache-dir", default=None, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def _first_child(side: str, prefix: str, batch: str, threads: int) -> None:
    """One side's first result in this fresh process: the imports and the backend's start come
    first (process start, not timed), then load + first run; prints one JSON line."""
    import json

    import numpy as np

    x = np.random.default_rng(1).standard_normal((int(batch), 3, ARGS.size, ARGS.size)).astype(np.float32)
    stages = {}
    if side == "pi_onednn":
        import paddle.inference as pi

        start, cpu = time.perf_counter(), time.process_time()
        config = pi.Config(prefix + ".pdmodel", prefix + ".pdiparams")
        config.disable_gpu()
        config.set_cpu_math_library_num_threads(threads)
        config.disable_glog_info()
        config.enable_mkldnn()
        predictor = pi.create_predictor(config)
        handle = predictor.get_input_handle(predictor.get_input_names()[0])
        handle.reshape(x.shape)
        handle.copy_from_cpu(x)
        loaded = time.perf_counter()
        predictor.run()
        out = predictor.get_output_handle(predictor.get_output_names()[0]).copy_to_cpu()
    else:
        import jax

        jax.devices()
        names = {"/jax/core/compile/jaxpr_trace_duration": "trace",
                 "/jax/core/compile/jaxpr_to_mlir_module_duration": "mlir",
                 "/jax/core/compile/backend_compile_duration": "xla"}
        jax.monitoring.register_event_duration_secs_listener(
            lambda e, sec, **_: stages.__setitem__(names[e], stages.get(names[e], 0.0) + sec) if e in names else None)
        import fluidjax as fj

        if side == "jax_export":      # fj.io.export's serialized StableHLO: deserialize, then XLA compiles
            start, cpu = time.perf_counter(), time.process_time()
            with open(prefix + ".export", "rb") as f:
                exported = jax.export.deserialize(bytearray(f.read()))
            loaded = time.perf_counter()
            out = np.asarray(exported.call(x)[0])
        else:                         # fluidjax: with the compiled file (optimized, or "fj_plain") or without
            start, cpu = time.perf_counter(), time.process_time()
            scope, exe = fj.Scope(), fj.Executor()
            program, feeds, fetches = fj.io.load_inference_model(prefix, exe, scope=scope,
                                                                 optimize=side != "fj_plain",
                                                                 compiled=side in ("fluidjax", "fj_plain"))
            loaded = time.perf_counter()
            out, = exe.run(program, feed={feeds[0]: x}, fetch_list=fetches, scope=scope)
    end = time.perf_counter()
    print(json.dumps({"seconds": end - start, "load": loaded - start, "run": end - loaded,
                      "cpu": time.process_time() - cpu, "stages": stages,
                      "checksum": [float(np.sum(out, dtype=np.float64)), float(np.abs(out).sum(dtype=np.float64))]}))


# --sweep: XLA:CPU options of jax/jaxlib 0.10.2 (flag names from the jaxlib binary; their effect in
# docs/inference.md). The default already runs convolutions through YNNPACK ("ynn_fusion" in the HLO).
SWEEP = [
    ["eigen", "XLA_FLAGS=--xla_cpu_experimental_ynn_fusion_type="],          # XLA's own (Eigen) convolutions
    ["onednn_conv", "XLA_FLAGS=--xla_cpu_experimental_ynn_fusion_type= --xla_cpu_use_onednn=true "
                    "--xla_cpu_experimental_onednn_fusion_type=individual_convolution,individual_dot"],
    ["xnn_conv", "XLA_FLAGS=--xla_cpu_experimental_ynn_fusion_type= "
                 "--xla_cpu_experimental_xnn_fusion_type=individual_convolution,individual_dot"],
    ["ynn_dot", "XLA_FLAGS=--xla_cpu_experimental_ynn_fusion_type=individual_convolution,individual_dot"],
    ["onednn_cc", "XLA_FLAGS=--xla_cpu_experimental_onednn_custom_call=true"],
    ["nchw", "layout=NCHW"],
    # not an XLA flag: glibc madvises its large mmaps for transparent huge pages (MobileNetV2 at
    # batch 8 page-faulted 20k times per run on buffers over malloc's 32 MB mmap threshold)
    ["hugepages", "GLIBC_TUNABLES=glibc.malloc.hugetlb=1"],
]
JAX_SIDES = ("fluidjax", "fj_nopass", "jax")
PADDLE_SIDES = ("pi_onednn", "pi_plain", "static")


def _import(jax_side: bool, paddle_side: bool) -> None:
    """Import what this process needs into the module's globals: JAX and fluidjax, Paddle, or
    both (JAX first: the other order crashes)."""
    import numpy

    globals()["np"] = numpy
    if jax_side:
        import jax
        import jax.numpy as jnp
        from jax import lax

        import fluidjax as fj

        globals().update(jax=jax, jnp=jnp, lax=lax, fj=fj)
    if paddle_side:
        os.environ.setdefault("GLOG_minloglevel", "2")
        import paddle
        import paddle.inference as pi

        globals().update(paddle=paddle, pi=pi)


ARGS = _args()
if ARGS.sweep:
    ARGS.variant += [v for v in SWEEP if v[0] not in {w[0] for w in ARGS.variant}]
if ARGS.first_child:
    _first_child(*ARGS.first_child, threads=ARGS.threads)
    sys.exit(0)
if ARGS.xla_flags is not None:
    os.environ["XLA_FLAGS"] = ARGS.xla_flags
if ARGS.cache_dir:
    import jax

    jax.config.update("jax_compilation_cache_dir", ARGS.cache_dir)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
if ARGS.child:                                 # one side alone: fluidjax sides never import Paddle
    _import(jax_side=ARGS.child[0] in JAX_SIDES or ARGS.child[0].startswith("fj:"),
            paddle_side=ARGS.child[0] in PADDLE_SIDES)
elif ARGS.same_process or ARGS.first or ARGS.cache_check or ARGS.first_result_only:
    _import(jax_side=True, paddle_side=True)
else:                                          # the parent of own-process runs only saves the models
    _import(jax_side=False, paddle_side=True)


# -- the models, saved with paddle.jit.save --------------------------------------------------------------
def _encoder():
    """A transformer encoder (``paddle.nn``), built when Paddle is imported."""

    class Encoder(paddle.nn.Layer):
        def __init__(self, vocab=1000, d_model=256, heads=4, ffn=1024, layers=4):
            super().__init__()
            self.embed = paddle.nn.Embedding(vocab, d_model)
            self.pos = paddle.nn.Embedding(512, d_model)
            layer = paddle.nn.TransformerEncoderLayer(d_model, heads, ffn, dropout=0.1)
            self.net = paddle.nn.TransformerEncoder(layer, layers, norm=paddle.nn.LayerNorm(d_model))
            self.head = paddle.nn.Linear(d_model, vocab)

        def forward(self, ids):
            positions = paddle.arange(ids.shape[1], dtype="int64").unsqueeze(0)
            pad_mask = paddle.cast(ids == 0, "float32").unsqueeze([1, 2]) * -1e9
            return self.head(self.net(self.embed(ids) + self.pos(positions), src_mask=pad_mask))

    return Encoder()


def _randomize_bn(model, rng):
    for sub in model.sublayers():
        if isinstance(sub, paddle.nn.BatchNorm2D):
            c = sub._mean.shape[0]
            sub._mean.set_value(rng.normal(0, 0.1, c).astype("float32"))
            sub._variance.set_value(rng.uniform(0.5, 1.5, c).astype("float32"))
            sub.weight.set_value(rng.uniform(0.5, 1.5, c).astype("float32"))
            sub.bias.set_value(rng.normal(0, 0.1, c).astype("float32"))


def save_models(directory: str, names, size: int) -> dict:
    """{name: (path prefix, input maker, paddle model's state dict as NumPy)}."""
    paddle.disable_static()
    paddle.seed(0)
    rng = np.random.default_rng(0)
    saved = {}
    for name in names:
        if name == "transformer_encoder":
            model = _encoder()
            spec = [paddle.static.InputSpec([None, None], "int64", "ids")]
            make = lambda b: np.random.default_rng(b).integers(1, 1000, (b, 64)).astype(np.int64)  # noqa: E731
        else:
            model = getattr(paddle.vision.models, name)()
            _randomize_bn(model, rng)
            spec = [paddle.static.InputSpec([None, 3, size, size], "float32", "image")]
            make = lambda b: np.random.default_rng(b).standard_normal((b, 3, size, size)).astype(np.float32)  # noqa: E731
        model.eval()
        prefix = os.path.join(directory, name)
        paddle.jit.save(model, prefix, input_spec=spec)
        saved[name] = (prefix, make, {k: v.numpy() for k, v in model.state_dict().items()})
    paddle.enable_static()
    return saved


# -- the sides -------------------------------------------------------------------------------------------
class FluidJax:
    name = "fluidjax"

    def __init__(self, prefix, passes=True, options: dict | None = None):
        """``options`` (a ``--variant``'s lower-case keys): ``layout`` (NHWC, NCHW, none),
        ``fold`` and ``per_sample`` for ``fj.passes.optimize_inference``, ``passes`` (0: none)."""
        options = options or {}
        passes = passes and options.get("passes", "1") != "0"
        self.name = "fluidjax" if passes else "fj_nopass"
        self.scope = fj.Scope()
        self.exe = fj.Executor()
        custom = passes and ("layout" in options or "fold" in options or "per_sample" in options)
        self.program, feeds, self.fetches = fj.io.load_inference_model(prefix, scope=self.scope,
                                                                       optimize=passes and not custom)
        if custom:
            layout = options.get("layout", "NHWC")
            self.program = fj.passes.optimize_inference(self.program, self.scope, fold=options.get("fold", "1") != "0",
                                                        layout=None if layout == "none" else layout,
                                                        per_sample=options.get("per_sample", "1") != "0")
        self.feed = feeds[0]

    def __call__(self, x):
        out, = self.exe.run(self.program, feed={self.feed: x}, fetch_list=self.fetches, scope=self.scope)
        return out


class PaddleInference:
    def __init__(self, prefix, onednn: bool, threads: int):
        self.name = "pi_onednn" if onednn else "pi_plain"
        config = pi.Config(prefix + ".pdmodel", prefix + ".pdiparams")
        config.disable_gpu()
        config.set_cpu_math_library_num_threads(threads)
        config.disable_glog_info()
        if onednn:
            config.enable_mkldnn()
        else:
            config.disable_mkldnn()
        self.predictor = pi.create_predictor(config)
        self.input = self.predictor.get_input_handle(self.predictor.get_input_names()[0])
        self.output = self.predictor.get_output_handle(self.predictor.get_output_names()[0])

    def __call__(self, x):
        self.input.reshape(x.shape)
        self.input.copy_from_cpu(x)
        self.predictor.run()
        return self.output.copy_to_cpu()


class PaddleStatic:
    name = "static"

    def __init__(self, prefix):
        self.scope = paddle.static.Scope()
        self.exe = paddle.static.Executor(paddle.CPUPlace())
        with paddle.static.scope_guard(self.scope):
            self.program, feeds, self.fetches = paddle.static.load_inference_model(prefix, self.exe)
        self.feed = feeds[0]

    def __call__(self, x):
        with paddle.static.scope_guard(self.scope):
            out, = self.exe.run(self.program, feed={self.feed: x}, fetch_list=self.fetches)
        return out


class HandResNet18:
    """ResNet-18 written directly in JAX: NHWC, HWIO filters with the batch norm folded in, the
    global mean as a product (what a person writing fast inference code would do, knowing what
    docs/inference.md found), the weights from the Paddle model's state dict."""

    name = "jax"

    def __init__(self, state: dict):
        def conv_bn(conv, bn):
            w = state[conv + ".weight"].astype(np.float64)
            s = state[bn + ".weight"] / np.sqrt(state[bn + "._variance"].astype(np.float64) + 1e-5)
            b = state[bn + ".bias"] - state[bn + "._mean"] * s
            return {"w": jnp.asarray((w * s[:, None, None, None]).transpose(2, 3, 1, 0), jnp.float32),
                    "b": jnp.asarray(b, jnp.float32)}

        params = {"stem": conv_bn("conv1", "bn1"), "blocks": []}
        for stage in range(1, 5):
            for i in range(2):
                p = f"layer{stage}.{i}"
                block = {"c1": conv_bn(p + ".conv1", p + ".bn1"), "c2": conv_bn(p + ".conv2", p + ".bn2")}
                if p + ".downsample.0.weight" in state:
                    block["down"] = conv_bn(p + ".downsample.0", p + ".downsample.1")
                params["blocks"].append(block)
        params["fc"] = {"w": jnp.asarray(state["fc.weight"]), "b": jnp.asarray(state["fc.bias"])}
        self.params = params
        strides = [1 if (k < 2 or k % 2) else 2 for k in range(8)]

        def conv(x, p, stride, pad):
            y = lax.conv_general_dilated(x, p["w"], (stride, stride), [(pad, pad), (pad, pad)],
                                         dimension_numbers=("NHWC", "HWIO", "NHWC"))
            return y + p["b"]

        def forward(params, x):
            x = jnp.transpose(x, (0, 2, 3, 1))
            x = jax.nn.relu(conv(x, params["stem"], 2, 3))
            x = lax.reduce_window(x, -jnp.inf, lax.max, (1, 3, 3, 1), (1, 2, 2, 1), [(0, 0), (1, 1), (1, 1), (0, 0)])
            for k, block in enumerate(params["blocks"]):
                s = strides[k]
                y = jax.nn.relu(conv(x, block["c1"], s, 1))
                y = conv(y, block["c2"], 1, 1)
                short = conv(x, block["down"], s, 0) if "down" in block else x
                x = jax.nn.relu(y + short)
            # The global mean as a product: as a reduction it made XLA give the last convolution a
            # slow layout (docs/inference.md), 68 against 41 ms at batch 1.
            n, h, w, c = x.shape
            x = jnp.einsum("nsc,s->nc", x.reshape(n, h * w, c), jnp.full((h * w,), 1.0 / (h * w), x.dtype))
            return x @ params["fc"]["w"] + params["fc"]["b"]

        self.forward = jax.jit(forward)

    def __call__(self, x):
        return np.asarray(self.forward(self.params, x))


# -- timing ----------------------------------------------------------------------------------------------
# Before each timed run: a pause, since after a run OpenMP worker threads (oneDNN's in Paddle
# Inference) spin for up to 200 ms (KMP_BLOCKTIME) and would take the cores from the next side's
# run; then one untimed run of the same side, so that the timed one finds its own thread pool
# awake and its data in cache (the steady state of back-to-back requests, on every side).
SETTLE_S = 0.25


def _median_ms(sides: dict, x, repeat: int) -> dict:
    """Median milliseconds per run of each side, warm (see SETTLE_S); the sides take turns, one
    timed run each per round, so that a burst of load on a shared machine hits them all alike."""
    for fn in sides.values():
        for _ in range(3):  # warm-up: compile, allocator, thread pools
            fn(x)
    times = {name: [] for name in sides}
    for _ in range(repeat):
        for name, fn in sides.items():
            time.sleep(SETTLE_S)
            fn(x)
            t = time.perf_counter()
            fn(x)
            times[name].append(time.perf_counter() - t)
    return {name: statistics.median(ts) * 1e3 for name, ts in times.items()}


def _first_result_s(make_side, x):
    t = time.perf_counter()
    side = make_side()
    side(x)
    return time.perf_counter() - t, side


def _rel(got, want):
    return float(np.max(np.abs(np.asarray(got, np.float64) - want)) / (np.max(np.abs(want)) + 1e-30))


def bench_model(name, prefix, make, state, args):
    sides = args.sides or ["fluidjax", "pi_onednn", "pi_plain", "static", "jax"]
    rows = []
    for batch in args.batches:
        x = make(batch)
        makers = {
            "fluidjax": lambda: FluidJax(prefix, passes=not args.no_passes),
            "fj_nopass": lambda: FluidJax(prefix, passes=False),
            "pi_onednn": lambda: PaddleInference(prefix, True, args.threads),
            "pi_plain": lambda: PaddleInference(prefix, False, args.threads),
            "static": lambda: PaddleStatic(prefix),
        }
        if name == "resnet18":
            makers["jax"] = lambda: HandResNet18(state)
        built, first = {}, {}
        for side in sides:
            if side in makers:
                first[side], built[side] = _first_result_s(makers[side], x)
        want = built["static"](x) if "static" in built else None
        times = _median_ms(built, x, args.repeat)
        errors = {side: _rel(fn(x), want) for side, fn in built.items()} if want is not None else {}
        rows.append((batch, times, errors, first))
        base = times.get("fluidjax")
        parts = [f"{s} {t:7.1f} ms" + (f" ({base / t:4.2f}x)" if base and s != "fluidjax" else "")
                 for s, t in times.items()]
        print(f"{name:20s} batch {batch}: " + " | ".join(parts), flush=True)
        print(f"{'':20s} first result: " + ", ".join(f"{s} {v:.2f} s" for s, v in first.items()
                                                    if s in ("fluidjax", "pi_onednn", "pi_plain")), flush=True)
        if errors:
            print(f"{'':20s} rel. error vs static Executor: "
                  + ", ".join(f"{s} {e:.1e}" for s, e in errors.items() if s != "static"), flush=True)
    print(f"{'':20s} (ratios are fluidjax time / side time: > 1 means fluidjax is slower)")
    return rows


# -- each side in its own process ------------------------------------------------------------------------
def _make_input(name: str, batch: int, size: int):
    if name == "transformer_encoder":
        return np.random.default_rng(batch).integers(1, 1000, (batch, 64)).astype(np.int64)
    return np.random.default_rng(batch).standard_normal((batch, 3, size, size)).astype(np.float32)


def _variant_of(side: str, args) -> dict:
    """A ``--variant``'s settings: {"env": {...}, "options": {...}} ({} for the plain sides)."""
    for spec in args.variant:
        if side == "fj:" + spec[0]:
            env, options = {}, {}
            for item in spec[1:]:
                key, _, value = item.partition("=")
                (env if key.isupper() else options)[key] = value
            return {"env": env, "options": options}
    return {}


def _side_child(side: str, name: str, prefix: str, batch: str, out_path: str, args) -> None:
    """One side, one model, one batch, alone in this process: load, first run (timed), three
    warm-up runs, then ``--repeat`` back-to-back timed runs; the output goes to ``out_path``
    (.npy), one JSON line to stdout."""
    import json

    x = _make_input(name, int(batch), args.size)
    start = time.perf_counter()
    if side == "jax":
        with np.load(prefix + ".state.npz", allow_pickle=False) as f:
            fn = HandResNet18(dict(f))
    elif side in ("pi_onednn", "pi_plain"):
        fn = PaddleInference(prefix, side == "pi_onednn", args.threads)
    elif side == "static":
        fn = PaddleStatic(prefix)
    else:
        fn = FluidJax(prefix, passes=side != "fj_nopass", options=_variant_of(side, args).get("options"))
    out = fn(x)
    first = time.perf_counter() - start
    for _ in range(3):
        fn(x)
    times, cpus = [], []
    for _ in range(args.repeat):
        t, c = time.perf_counter(), time.process_time()
        fn(x)
        times.append(time.perf_counter() - t)
        cpus.append(time.process_time() - c)
    np.save(out_path, np.asarray(out))
    print(json.dumps({"median_ms": statistics.median(times) * 1e3, "min_ms": min(times) * 1e3,
                      "max_ms": max(times) * 1e3, "cpu_ms": statistics.median(cpus) * 1e3, "first_s": first}))


def _spread(values) -> str:
    return f"{statistics.median(values):7.1f} ({min(values):.1f}-{max(values):.1f})"


def own_process(args) -> None:
    """Every (side, model, batch) in its own process, sides taking turns, ``--rounds`` rounds."""
    import json

    sides = list(args.sides or ["fluidjax", "pi_onednn"]) + ["fj:" + v[0] for v in args.variant]
    print(f"each side in its own process; paddle {paddle.__version__}, {os.cpu_count()} CPUs, "
          f"load {os.getloadavg()[0]:.1f}, rounds {args.rounds}, {args.repeat} timed runs per process, "
          f"XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r}")
    tmp = tempfile.mkdtemp(prefix="fj_inference_bench_")
    try:
        saved = save_models(tmp, args.models, args.size)
        for name in args.models:
            prefix, _, state = saved[name]
            if "jax" in sides and name == "resnet18":
                np.savez(prefix + ".state.npz", **state)
            for batch in args.batches:
                results = {s: [] for s in sides}
                outputs = {}
                for r in range(args.rounds):
                    for side in (sides if r % 2 == 0 else sides[::-1]):
                        if side == "jax" and name != "resnet18":
                            continue
                        variant = _variant_of(side, args)
                        env = dict(os.environ, GLOG_minloglevel="2", **variant.get("env", {}))
                        out_path = os.path.join(tmp, f"{name}.{batch}.{side.replace(':', '_')}.npy")
                        cmd = [sys.executable, os.path.abspath(__file__), "--child", side, name, prefix, str(batch),
                               out_path, "--size", str(args.size), "--threads", str(args.threads),
                               "--repeat", str(args.repeat)]
                        for spec in args.variant:
                            cmd += ["--variant", *spec]
                        proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
                        lines = proc.stdout.strip().splitlines()
                        if proc.returncode != 0 or not lines:
                            print(f"  {name} b{batch} {side}: exit {proc.returncode}: "
                                  f"{(proc.stderr.strip().splitlines() or [''])[-1]}", flush=True)
                            continue
                        results[side].append(json.loads(lines[-1]))
                        outputs[side] = np.load(out_path)
                ref_side = next((s for s in ("static", "pi_plain", "pi_onednn") if s in outputs), None)
                base = [r["median_ms"] for r in results.get("pi_onednn", [])]
                for side, runs in results.items():
                    if not runs:
                        continue
                    meds = [r["median_ms"] for r in runs]
                    bests = [r["min_ms"] for r in runs]
                    parts = [f"{name:13s} b{batch} {side:12s} {_spread(meds)} ms",
                             f"best {statistics.median(bests):.1f} ms",
                             f"CPU/run {statistics.median([r.get('cpu_ms', 0.0) for r in runs]):.1f} ms",
                             f"first {statistics.median([r['first_s'] for r in runs]):.2f} s"]
                    if base and side != "pi_onednn":
                        ratios = [a / b for a, b in zip(meds, base)]
                        best_base = [r["min_ms"] for r in results["pi_onednn"]]
                        parts.append(f"/ PI oneDNN {statistics.median(meds) / statistics.median(base):4.2f}x "
                                     f"(rounds {min(ratios):.2f}-{max(ratios):.2f}; best/best "
                                     f"{statistics.median(bests) / statistics.median(best_base):4.2f}x)")
                    if ref_side and side != ref_side:
                        parts.append(f"rel. err vs {ref_side} {_rel(outputs[side], outputs[ref_side].astype(np.float64)):.1e}")
                    print("  " + ", ".join(parts), flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("(median over rounds of each process's median, (min-max over rounds); best: median over rounds of each "
          "process's fastest run, the figure least disturbed by other load; CPU/run: CPU seconds of all the process's "
          "threads per run (the work; with OpenMP's spin-wait for Paddle); ratio per round pairs the rounds' "
          "medians; targets: <= 1.0x PI oneDNN at batch 8, <= 1.1x at batch 1)")


def cache_check(args):
    """Time to first result of fluidjax (ResNet-18, batch 1) in two fresh processes sharing a
    persistent compilation cache: the second compiles nothing."""
    with tempfile.TemporaryDirectory() as tmp:
        save_models(tmp, ["resnet18"], args.size)
        cache = os.path.join(tmp, "jax_cache")
        for attempt in ("first process (cold cache)", "second process (warm cache)"):
            cmd = [sys.executable, __file__, "--first-result-only", os.path.join(tmp, "resnet18"),
                   "--cache-dir", cache, "--size", str(args.size)]
            if args.xla_flags is not None:
                cmd += ["--xla-flags", args.xla_flags]
            out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1]
            print(f"fluidjax first result, {attempt}: {out}")


FIRST_SIDES = ("fluidjax", "pi_onednn", "fj_plain", "fj_cold", "jax_export")


def first_results(args):
    """``--first``: each side's time to its first result in its own fresh process, sides taking
    turns (the order reversed every other round), ``--rounds`` processes per side and model."""
    import json

    print(f"first result (load + first run; process start and imports excluded), batch 1, each side in its own "
          f"process, {args.rounds} rounds; jax {jax.__version__}, paddle {paddle.__version__}, {os.cpu_count()} CPUs, "
          f"load {os.getloadavg()[0]:.1f}")
    sides = [s for s in (args.sides or FIRST_SIDES)]
    tmp = tempfile.mkdtemp(prefix="fj_first_result_")
    try:
        saved = save_models(tmp, [m for m in args.models if m != "transformer_encoder"], args.size)
        for name, (prefix, make, _) in saved.items():
            t = time.perf_counter()
            fj.io.compile_saved_model(prefix, {"image": (1, 3, args.size, args.size)}, optimize=(True, False))
            compile_s = time.perf_counter() - t
            if "jax_export" in sides:
                scope = fj.Scope()
                program, feeds, fetches = fj.io.load_inference_model(prefix, scope=scope, optimize=True,
                                                                     compiled=False)
                exported = fj.io.export(program, feeds, fetches, scope=scope)
                with open(prefix + ".export", "wb") as f:
                    f.write(exported.serialize())
            results = {s: [] for s in sides}
            env = dict(os.environ, GLOG_minloglevel="2")
            env.pop("JAX_COMPILATION_CACHE_DIR", None)
            env["FLUIDJAX_COMPILATION_CACHE"] = "0"          # every fluidjax side starts cold: no JAX cache
            for r in range(args.rounds):
                for side in (sides if r % 2 == 0 else sides[::-1]):
                    if side == "jax_export" and r > 0:
                        continue              # one sample: it compiles the whole model with XLA
                    cmd = [sys.executable, os.path.abspath(__file__), "--first-child", side, prefix, "1",
                           "--size", str(args.size), "--threads", str(args.threads)]
                    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
                    lines = out.stdout.strip().splitlines()
                    if out.returncode != 0 or not lines:
                        print(f"  {name} {side}: exit {out.returncode}: {(out.stderr.strip().splitlines() or [''])[-1]}")
                        continue
                    results[side].append(json.loads(lines[-1]))
            print(f"{name}: compiling the model for batch 1 (fluidjax compile, optimize on and off) took "
                  f"{compile_s:.1f} s")
            base = statistics.median([r["seconds"] for r in results["pi_onednn"]]) if results.get("pi_onednn") else None
            ref = results["pi_onednn"][0]["checksum"] if results.get("pi_onednn") else None
            for side, runs in results.items():
                if not runs:
                    continue
                secs = sorted(r["seconds"] for r in runs)
                med = statistics.median(secs)
                parts = [f"{name:13s} {side:11s} median {med * 1e3:7.0f} ms  (min {secs[0] * 1e3:5.0f}, "
                         f"max {secs[-1] * 1e3:5.0f}, n={len(secs)})",
                         f"load {statistics.median([r['load'] for r in runs]) * 1e3:5.0f} + run "
                         f"{statistics.median([r['run'] for r in runs]) * 1e3:5.0f} ms",
                         f"cpu {statistics.median([r['cpu'] for r in runs]) * 1e3:5.0f} ms"]
                compiled = {k: round(statistics.median([r["stages"].get(k, 0.0) for r in runs]) * 1e3)
                            for k in ("trace", "mlir", "xla")}
                if side != "pi_onednn":
                    parts.append("trace/MLIR/XLA {trace}/{mlir}/{xla} ms".format(**compiled))
                if base:
                    parts.append(f"{med / base:4.2f}x PI")
                if ref:
                    c = runs[0]["checksum"]
                    parts.append(f"|sum| rel. diff {abs(c[1] - ref[1]) / ref[1]:.1e}")
                print("  " + ", ".join(parts), flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("target: fluidjax (compiled model) <= 1.5x Paddle Inference's first result")


def main(args):
    if args.first_result_only:
        x = np.random.default_rng(1).standard_normal((1, 3, args.size, args.size)).astype(np.float32)
        seconds, _ = _first_result_s(lambda: FluidJax(args.first_result_only, passes=not args.no_passes), x)
        print(f"{seconds:.2f} s")
        return
    if args.cache_check:
        cache_check(args)
        return
    if args.first:
        first_results(args)
        return
    if args.child:
        _side_child(*args.child, args)
        return
    if not args.same_process:
        own_process(args)
        return
    print(f"jax {jax.__version__}, paddle {paddle.__version__}, XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r}, "
          f"passes {'off' if args.no_passes else 'on'}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}")
    tmp = tempfile.mkdtemp(prefix="fj_inference_bench_")
    try:
        saved = save_models(tmp, args.models, args.size)
        for name in args.models:
            prefix, make, state = saved[name]
            bench_model(name, prefix, make, state, args)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main(ARGS)
