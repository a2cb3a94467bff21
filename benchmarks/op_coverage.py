"""Op coverage of real models: which op types of models saved by Paddle 2.6.2 fluidjax lacks.

Builds every ``paddle.vision.models`` architecture and ``paddle.nn.Transformer*`` stacks (with
embeddings and masks) in Paddle, saves each with ``paddle.jit.save`` into a temporary directory
(small input sizes; random weights), reads the ``.pdmodel`` bytes back and lists the op types
(across all blocks) that ``fluidjax.ir.registry`` does not register. ``feed`` and ``fetch`` are
reported apart: they are the saved format's I/O ops, which the loader (``fj.io``) handles.

    .venv/bin/python benchmarks/op_coverage.py              # every model
    .venv/bin/python benchmarks/op_coverage.py resnet18 transformer_encoder
    .venv/bin/python benchmarks/op_coverage.py --run        # also run each model in both systems
    .venv/bin/python benchmarks/op_coverage.py --layers     # also single paddle.nn layers / functions

With ``--run``, each fully covered model also runs in Paddle (``paddle.static.load_inference_model``)
and in fluidjax (the parsed program without its feed/fetch ops, the parameters copied from Paddle's
scope) at batch 2 and batch 1, and the largest relative error of the outputs is printed.

Nothing is written outside the temporary directory; no model file is kept.
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import tempfile

import numpy as np

import fluidjax as fj  # noqa: F401  (JAX before Paddle: the other order crashes)
from fluidjax.ir import registry
from fluidjax.proto import framework_pb2

os.environ.setdefault("GLOG_minloglevel", "2")
import paddle  # noqa: E402

IO_OPS = {"feed", "fetch"}


def _vision(name: str, size: int = 64, **kwargs):
    def build():
        model = getattr(paddle.vision.models, name)(**kwargs)
        return model, [paddle.static.InputSpec([None, 3, size, size], "float32", "image")]

    return build


class _Seq2Seq(paddle.nn.Layer):
    """Token embeddings + positional embeddings feeding a Transformer, an encoder or a decoder."""

    def __init__(self, kind: str, vocab: int = 50, d_model: int = 16, heads: int = 2, layers: int = 2):
        super().__init__()
        self.kind = kind
        self.embed = paddle.nn.Embedding(vocab, d_model)
        self.pos = paddle.nn.Embedding(64, d_model)
        if kind == "encoder":
            layer = paddle.nn.TransformerEncoderLayer(d_model, heads, 32, dropout=0.1)
            self.net = paddle.nn.TransformerEncoder(layer, layers, norm=paddle.nn.LayerNorm(d_model))
        elif kind == "decoder":
            layer = paddle.nn.TransformerDecoderLayer(d_model, heads, 32, dropout=0.1, normalize_before=True)
            self.net = paddle.nn.TransformerDecoder(layer, layers, norm=paddle.nn.LayerNorm(d_model))
        else:
            self.net = paddle.nn.Transformer(d_model, heads, layers, layers, 32, dropout=0.1)
        self.head = paddle.nn.Linear(d_model, vocab)

    def _embed(self, ids):
        positions = paddle.arange(ids.shape[1], dtype="int64").unsqueeze(0)
        return self.embed(ids) + self.pos(positions)

    def forward(self, src, tgt=None):
        pad_mask = paddle.cast(src == 0, "float32").unsqueeze([1, 2]) * -1e9   # [B, 1, 1, S]
        if self.kind == "encoder":
            out = self.net(self._embed(src), src_mask=pad_mask)
        else:
            length = paddle.shape(tgt)[1]
            causal = paddle.triu(paddle.full([length, length], float("-inf")), diagonal=1)
            if self.kind == "decoder":
                out = self.net(self._embed(tgt), self._embed(src), tgt_mask=causal, memory_mask=pad_mask)
            else:
                out = self.net(self._embed(src), self._embed(tgt), src_mask=pad_mask, tgt_mask=causal,
                               memory_mask=pad_mask)
        return paddle.nn.functional.softmax(self.head(out), axis=-1)


def _seq2seq(kind: str):
    def build():
        specs = [paddle.static.InputSpec([None, None], "int64", "src")]
        if kind != "encoder":
            specs.append(paddle.static.InputSpec([None, None], "int64", "tgt"))
        return _Seq2Seq(kind), specs

    return build


class _Fn(paddle.nn.Layer):
    """A tensor function as a layer, for jit.save."""

    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


def _layer(make, shape=(None, 4, 8, 8), dtype="float32"):
    return lambda: (make(), [paddle.static.InputSpec(list(shape), dtype, "x")])


def _fn(fn):
    return _layer(lambda: _Fn(fn))


def _layers():
    """Single paddle.nn layers and tensor functions (each saved on its own), for --layers."""
    nn, F = paddle.nn, paddle.nn.functional
    seq, vol = (None, 4, 10), (None, 4, 4, 8, 8)
    return {
        "Hardtanh": _layer(nn.Hardtanh), "LogSigmoid": _layer(nn.LogSigmoid), "Maxout": _layer(lambda: nn.Maxout(2)),
        "RReLU": _layer(nn.RReLU), "Tanhshrink": _layer(nn.Tanhshrink), "Hardshrink": _layer(nn.Hardshrink),
        "Softshrink": _layer(nn.Softshrink), "Mish": _layer(nn.Mish), "CELU": _layer(nn.CELU), "SELU": _layer(nn.SELU),
        "GLU": _layer(nn.GLU), "ThresholdedReLU": _layer(nn.ThresholdedReLU), "Softmax2D": _layer(nn.Softmax2D),
        "Unfold": _layer(lambda: nn.Unfold([2, 2])), "Fold": _layer(lambda: nn.Fold([4, 4], [2, 2]), (None, 16, 9)),
        "MaxPool2D(return_mask)": _layer(lambda: nn.MaxPool2D(2, return_mask=True)),
        "AdaptiveMaxPool2D": _layer(lambda: nn.AdaptiveMaxPool2D(3)), "MaxPool3D": _layer(lambda: nn.MaxPool3D(2), vol),
        "AdaptiveAvgPool3D": _layer(lambda: nn.AdaptiveAvgPool3D(2), vol),
        "Conv3D": _layer(lambda: nn.Conv3D(4, 2, 3), vol), "Conv3DTranspose": _layer(lambda: nn.Conv3DTranspose(4, 2, 3), vol),
        "Conv2DTranspose(depthwise)": _layer(lambda: nn.Conv2DTranspose(4, 4, 3, groups=4)),
        "Conv1D": _layer(lambda: nn.Conv1D(4, 3, 3), seq), "Conv1DTranspose": _layer(lambda: nn.Conv1DTranspose(4, 3, 3), seq),
        "AvgPool1D": _layer(lambda: nn.AvgPool1D(2), seq), "Pad1D(reflect)": _layer(lambda: nn.Pad1D(1, mode="reflect"), seq),
        "ChannelShuffle": _layer(lambda: nn.ChannelShuffle(2)), "PixelShuffle": _layer(lambda: nn.PixelShuffle(2)),
        "PixelUnshuffle": _layer(lambda: nn.PixelUnshuffle(2)), "LocalResponseNorm": _layer(lambda: nn.LocalResponseNorm(3)),
        "InstanceNorm2D": _layer(lambda: nn.InstanceNorm2D(4)), "GroupNorm": _layer(lambda: nn.GroupNorm(2, 4)),
        "Upsample(bicubic)": _layer(lambda: nn.Upsample(scale_factor=2, mode="bicubic")),
        "Upsample(trilinear)": _layer(lambda: nn.Upsample(scale_factor=2, mode="trilinear", data_format="NCDHW"), vol),
        "ZeroPad2D": _layer(lambda: nn.ZeroPad2D(1)), "Dropout2D": _layer(nn.Dropout2D),
        "LSTM": _layer(lambda: nn.LSTM(10, 8), seq), "GRU": _layer(lambda: nn.GRU(10, 8), seq),
        "grid_sample": _fn(lambda x: F.grid_sample(x, paddle.tanh(x[:, :2].transpose([0, 2, 3, 1])))),
        "interpolate(size tensor)": _fn(lambda x: F.interpolate(x, size=paddle.shape(x)[2:] * 2, mode="bilinear")),
        "sort/argsort/topk": _fn(lambda x: paddle.sort(x) + paddle.argsort(x).astype("float32") + paddle.topk(x, 8)[0]),
        "std/var/numel": _fn(lambda x: paddle.std(x, axis=1) + paddle.var(x, axis=1) + paddle.numel(x).astype("float32")),
        "any/all/amax/amin": _fn(lambda x: paddle.any(x > 0, 1).astype("float32") + paddle.all(x > 0, 1).astype("float32")
                                 + paddle.amax(x, 1) + paddle.amin(x, 1)),
        "logsumexp/norm/normalize": _fn(lambda x: paddle.logsumexp(x, 1) + paddle.linalg.norm(x, axis=1)
                                        + F.normalize(x, axis=1).sum(1)),
        "index_sample": _fn(lambda x: paddle.index_sample(x.flatten(1), paddle.zeros([paddle.shape(x)[0], 3], "int64"))),
        "einsum/kron/diag": _fn(lambda x: paddle.einsum("nchw,nchw->nc", x, x).sum() + paddle.kron(x, x).sum()
                                + paddle.diag(x[0, 0]).sum()),
        "trunc/frac/atan2/expm1/log2/log10": _fn(lambda x: paddle.trunc(x) + paddle.frac(x) + paddle.atan2(x, x + 1)
                                                 + paddle.expm1(x) + paddle.log2(x.abs() + 1) + paddle.log10(x.abs() + 1)),
        "isclose/repeat_interleave/unbind": _fn(lambda x: paddle.isclose(x, x).astype("float32").sum()
                                                + paddle.repeat_interleave(x, 2, axis=1).sum() + paddle.unbind(x, 1)[0].sum()),
        "crop/roll/flip/cumprod": _fn(lambda x: paddle.crop(x, shape=[-1, 2, 4, 4]).sum() + paddle.roll(x, 1, 2).sum()
                                      + paddle.flip(x, [3]).sum() + paddle.cumprod(x, 1).sum()),
        "linspace": _fn(lambda x: x * paddle.linspace(0, 1, 8)),
        "nonzero/masked_select/unique": _fn(lambda x: paddle.nonzero(x > 0).astype("float32").sum()
                                            + paddle.masked_select(x, x > 0).sum() + paddle.unique(x).sum()),
        "put/take_along_axis": _layer(lambda: _Fn(
            lambda x: paddle.take_along_axis(x, paddle.zeros([2, 4, 8, 1], "int64"), 3).sum()
            + paddle.put_along_axis(x, paddle.zeros([2, 4, 8, 1], "int64"), paddle.ones([2, 4, 8, 1]), 3).sum()),
            (2, 4, 8, 8)),
        "setitem": _fn(lambda x: _setitem(x)),
    }


def _setitem(x):
    y = x * 1
    y[:, 0] = 1.0
    return y


MODELS = {
    "resnet18": _vision("resnet18"),
    "resnet50": _vision("resnet50"),
    "mobilenet_v1": _vision("mobilenet_v1"),
    "mobilenet_v2": _vision("mobilenet_v2"),
    "mobilenet_v3_small": _vision("mobilenet_v3_small"),
    "mobilenet_v3_large": _vision("mobilenet_v3_large"),
    "vgg11": _vision("vgg11", 32),
    "vgg16_bn": _vision("vgg16", 32, batch_norm=True),
    "alexnet": _vision("alexnet", 224),
    "squeezenet1_0": _vision("squeezenet1_0"),
    "squeezenet1_1": _vision("squeezenet1_1"),
    "shufflenet_v2_x0_25": _vision("shufflenet_v2_x0_25"),
    "shufflenet_v2_swish": _vision("shufflenet_v2_swish"),
    "densenet121": _vision("densenet121"),
    "googlenet": _vision("googlenet", 224),
    "inception_v3": _vision("inception_v3", 96),
    "resnext50_32x4d": _vision("resnext50_32x4d"),
    "wide_resnet50_2": _vision("wide_resnet50_2"),
    "lenet": lambda: (paddle.vision.models.LeNet(), [paddle.static.InputSpec([None, 1, 28, 28], "float32", "image")]),
    "transformer_encoder": _seq2seq("encoder"),
    "transformer_decoder": _seq2seq("decoder"),
    "transformer": _seq2seq("transformer"),
}


def save(build, directory: str) -> str:
    """Save the model ``build()`` makes with ``paddle.jit.save``; its path prefix."""
    paddle.disable_static()
    paddle.seed(0)
    model, specs = build()
    model.eval()
    prefix = os.path.join(directory, "model")
    paddle.jit.save(model, prefix, input_spec=specs)
    return prefix


def saved_op_types(prefix: str) -> collections.Counter:
    """Op types (all blocks) of the program saved at ``prefix``."""
    with open(prefix + ".pdmodel", "rb") as f:
        data = f.read()
    # fj.Program.parse is the path a loader takes; the raw proto counts ops even where it refuses.
    try:
        program = fj.Program.parse(data)
        types = [op.type for block in program.blocks for op in block.ops]
    except Exception:  # noqa: BLE001 - report coverage even for a program fluidjax cannot parse
        desc = framework_pb2.ProgramDesc.FromString(data)
        types = [op.type for block in desc.blocks for op in block.ops]
    return collections.Counter(types)


def _inputs(program, batch: int, rng) -> dict[str, np.ndarray]:
    feeds = {}
    for op in program.global_block().ops:
        if op.type != "feed":
            continue
        var = program.global_block().var(op.output("Out")[0])
        if var.dtype == paddle.int64:
            # Token ids with some padding (id 0) for the masks to act on.
            ids = rng.integers(1, 50, (batch, 6 if var.name == "src" else 5))
            ids[:, -1] = 0
            feeds[var.name] = ids.astype("int64")
        else:
            shape = [batch if var.shape[0] < 0 else int(var.shape[0])] + [int(d) for d in var.shape[1:]]
            feeds[var.name] = rng.standard_normal(shape).astype("float32")
    return feeds


def compare(prefix: str, batches=(2, 1)) -> list[float]:
    """Run the saved model in Paddle and in fluidjax; the largest relative error per batch size."""
    paddle.enable_static()
    scope = paddle.static.Scope()
    exe = paddle.static.Executor(paddle.CPUPlace())
    with paddle.static.scope_guard(scope):
        program, feed_names, fetch_vars = paddle.static.load_inference_model(prefix, exe)
    params = {v.name: np.array(scope.find_var(v.name).get_tensor()) for v in program.list_vars()
              if v.persistable and v.name not in ("feed", "fetch") and scope.find_var(v.name) is not None}
    with open(prefix + ".pdmodel", "rb") as f:
        ours = fj.Program.parse(f.read())
    block = ours.global_block()
    fetch_names = [op.input("X")[0] for op in block.ops if op.type == "fetch"]
    for i in reversed(range(len(block.ops))):
        if block.ops[i].type in IO_OPS:
            block.remove_op(i)
    fj_scope = fj.Scope()
    for name, value in params.items():
        fj_scope.var(name).get_tensor().set(value)
    fj_exe = fj.Executor()
    rng = np.random.default_rng(0)
    errors = []
    for batch in batches:
        feed = _inputs(program, batch, rng)
        with paddle.static.scope_guard(scope):
            theirs = exe.run(program, feed=feed, fetch_list=fetch_vars)
        mine = fj_exe.run(ours, feed=feed, fetch_list=fetch_names, scope=fj_scope)
        err = 0.0
        for a, b in zip(mine, theirs):
            a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
            if a.shape != b.shape:
                return errors + [float("inf")]
            err = max(err, float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-30)))
        errors.append(err)
    paddle.disable_static()
    return errors


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", help=f"models to check (default: all of {', '.join(MODELS)})")
    parser.add_argument("--layers", action="store_true",
                        help="check single paddle.nn layers and tensor functions too")
    parser.add_argument("--run", action="store_true",
                        help="also run each covered model in Paddle and fluidjax (batch 2 and 1) and print "
                             "the largest relative error of its outputs")
    args = parser.parse_args(argv)
    models = dict(MODELS)
    if args.layers:
        models.update(_layers())
    names = args.models or list(models)
    unknown = [n for n in names if n not in models]
    if unknown:
        parser.error(f"unknown model(s) {unknown}; choose from {list(models)}")
    known = set(registry.registered_types())
    missing_anywhere: dict[str, list[str]] = collections.defaultdict(list)
    covered_models = unsaved = 0
    run_note = "  rel. error batch 2 / 1" if args.run else ""
    print(f"{'model':<22} {'ops':>5} {'types':>5}  missing op types (besides feed/fetch){run_note}")
    for name in names:
        with tempfile.TemporaryDirectory() as tmp:
            try:
                prefix = save(models[name], tmp)
            except Exception as e:  # noqa: BLE001 - Paddle itself could not save it
                print(f"{name:<22} paddle.jit.save failed: {type(e).__name__}: {str(e).splitlines()[0][:100]}")
                unsaved += 1
                continue
            counts = saved_op_types(prefix)
            missing = sorted(t for t in counts if t not in known and t not in IO_OPS)
            result = ""
            if args.run and not missing:
                try:
                    result = "  " + " / ".join(f"{e:.1e}" for e in compare(prefix))
                except Exception as e:  # noqa: BLE001 - report the failure and go on with the next model
                    result = f"  run failed: {type(e).__name__}: {str(e).splitlines()[0][:150]}"
        for t in missing:
            missing_anywhere[t].append(name)
        covered_models += not missing
        print(f"{name[:22]:<22} {sum(counts.values()):>5} {len(counts):>5}  {', '.join(missing) or '-'}{result}",
              flush=True)
    print(f"\n{covered_models}/{len(names) - unsaved} saved models use only registered ops (plus feed/fetch).")
    if missing_anywhere:
        print("missing op types, and the models that use them:")
        for t, models in sorted(missing_anywhere.items()):
            print(f"  {t:<28} {', '.join(models)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
