"""Op coverage of real models: which op types of models saved by Paddle 2.6.2 fluidjax lacks.

Builds every ``paddle.vision.models`` architecture and ``paddle.nn.Transformer*`` stacks (with
embeddings and masks) in Paddle, saves each with ``paddle.jit.save`` into a temporary directory
(small input sizes; random weights), reads the ``.pdmodel`` bytes back and lists the op types
(across all blocks) that ``fluidjax.ir.registry`` does not register. ``feed`` and ``fetch`` are
reported apart: they are the saved format's I/O ops, which the loader (``fj.io``) handles.

    .venv/bin/python benchmarks/op_coverage.py              # every model
    .venv/bin/python benchmarks/op_coverage.py resnet18 transformer_encoder

Nothing is written outside the temporary directory; no model file is kept.
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import tempfile

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


MODELS = {
    "resnet18": _vision("resnet18"),
    "mobilenet_v2": _vision("mobilenet_v2"),
    "mobilenet_v3_small": _vision("mobilenet_v3_small"),
    "vgg11": _vision("vgg11", 32),
    "alexnet": _vision("alexnet", 224),
    "squeezenet1_0": _vision("squeezenet1_0"),
    "shufflenet_v2_x0_25": _vision("shufflenet_v2_x0_25"),
    "densenet121": _vision("densenet121"),
    "googlenet": _vision("googlenet"),
    "inception_v3": _vision("inception_v3", 299),
    "resnext50_32x4d": _vision("resnext50_32x4d"),
    "wide_resnet50_2": _vision("wide_resnet50_2"),
    "lenet": lambda: (paddle.vision.models.LeNet(), [paddle.static.InputSpec([None, 1, 28, 28], "float32", "image")]),
    "transformer_encoder": _seq2seq("encoder"),
    "transformer_decoder": _seq2seq("decoder"),
    "transformer": _seq2seq("transformer"),
}


def saved_op_types(build, directory: str) -> collections.Counter:
    """Op types (all blocks) of the model ``build()`` makes, as ``paddle.jit.save`` writes it."""
    paddle.disable_static()
    paddle.seed(0)
    model, specs = build()
    model.eval()
    prefix = os.path.join(directory, "model")
    paddle.jit.save(model, prefix, input_spec=specs)
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


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", help=f"models to check (default: all of {', '.join(MODELS)})")
    args = parser.parse_args(argv)
    names = args.models or list(MODELS)
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        parser.error(f"unknown model(s) {unknown}; choose from {list(MODELS)}")
    known = set(registry.registered_types())
    missing_anywhere: dict[str, list[str]] = collections.defaultdict(list)
    covered_models = 0
    print(f"{'model':<22} {'ops':>5} {'types':>5}  missing op types (besides feed/fetch)")
    for name in names:
        with tempfile.TemporaryDirectory() as tmp:
            counts = saved_op_types(MODELS[name], tmp)
        missing = sorted(t for t in counts if t not in known and t not in IO_OPS)
        for t in missing:
            missing_anywhere[t].append(name)
        covered_models += not missing
        print(f"{name:<22} {sum(counts.values()):>5} {len(counts):>5}  {', '.join(missing) or '-'}", flush=True)
    print(f"\n{covered_models}/{len(names)} models use only registered ops (plus feed/fetch).")
    if missing_anywhere:
        print("missing op types, and the models that use them:")
        for t, models in sorted(missing_anywhere.items()):
            print(f"  {t:<28} {', '.join(models)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
