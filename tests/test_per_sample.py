"""fj.passes.per_sample_blocks and the ``fluidjax_per_sample`` op: inverted-residual blocks
(1x1 expansion, depthwise, 1x1 projection) run over chunks of the batch give Paddle's results
(1e-5), whatever the chunk; blocks whose values are read elsewhere or kept are left alone."""

import os

import jax
import numpy as np
import pytest

import fluidjax as fj
import fluidjax.io as fio
from fluidjax import passes
from fluidjax.lowering.ops import conv as conv_ops

os.environ.setdefault("GLOG_minloglevel", "2")
import paddle  # noqa: E402  (after fluidjax: the other order segfaults)
import paddle_oracle  # noqa: E402


def _rel_err(got, want):
    return float(np.max(np.abs(np.asarray(got, np.float64) - want)) / (np.max(np.abs(want)) + 1e-30))


_randomize_bn = paddle_oracle.randomize_batch_norms


def _block(nn, cin, hidden, cout, stride):
    return [nn.Conv2D(cin, hidden, 1, bias_attr=False), nn.BatchNorm2D(hidden), nn.ReLU6(),
            nn.Conv2D(hidden, hidden, 3, stride=stride, padding=1, groups=hidden, bias_attr=False),
            nn.BatchNorm2D(hidden), nn.ReLU6(), nn.Conv2D(hidden, cout, 1, bias_attr=False), nn.BatchNorm2D(cout)]


class _Net(paddle.nn.Layer):
    """A stem conv, two inverted residuals (the first with its residual add, the second strided)
    and a third whose expanded activation is also pooled into the head (read outside its block)."""

    def __init__(self):
        super().__init__()
        nn = paddle.nn
        self.stem = nn.Sequential(nn.Conv2D(3, 8, 3, padding=1), nn.BatchNorm2D(8), nn.ReLU6())
        self.b1 = nn.Sequential(*_block(nn, 8, 32, 8, 1))
        self.b2 = nn.Sequential(*_block(nn, 8, 24, 12, 2))
        self.e3 = nn.Sequential(nn.Conv2D(12, 48, 1, bias_attr=False), nn.BatchNorm2D(48), nn.ReLU6())
        self.r3 = nn.Sequential(*_block(nn, 48, 48, 12, 1)[3:])
        self.fc = nn.Linear(12 + 48, 5)

    def forward(self, x):
        y = self.stem(x)
        y = y + self.b1(y)
        y = self.b2(y)
        e = self.e3(y)
        y = self.r3(e)
        pool = paddle.nn.functional.adaptive_avg_pool2d
        return self.fc(paddle.concat([pool(y, 1).flatten(1), pool(e, 1).flatten(1)], axis=1))


_save = paddle_oracle.save_image_model


_paddle_run = paddle_oracle.run_inference_model


@pytest.fixture(scope="module")
def net(tmp_path_factory):
    paddle.disable_static()
    paddle.seed(11)
    model = _Net()
    _randomize_bn(model, 2)
    prefix = str(tmp_path_factory.mktemp("per_sample") / "net")
    _save(model, prefix, 16)
    return prefix


def _run(program, feeds, fetches, scope, xs, chunk_bytes, monkeypatch):
    """The program's step traced afresh with ``PER_SAMPLE_CHUNK_BYTES = chunk_bytes``: (output,
    whether the traced step loops over chunks)."""
    monkeypatch.setattr(conv_ops, "PER_SAMPLE_CHUNK_BYTES", chunk_bytes)
    fn, variables = fj.to_jax(program, feed=feeds, fetch_list=fetches, scope=scope)
    text = str(jax.make_jaxpr(fn)(variables, xs))
    loops = "scan[" in text or "while[" in text
    (out,), _ = jax.jit(fn)(variables, xs)
    return np.asarray(out), loops


def test_blocks_run_per_chunk_give_paddles_results(net, monkeypatch):
    scope = fj.Scope()
    program, feeds, fetches = fio.load_inference_model(net, scope=scope, optimize=True)
    blocks = [op for op in program.global_block().ops if op.type == "fluidjax_per_sample"]
    # b1 (through its residual add) and b2; not e3 + r3 (e3's output is also pooled into the head),
    # and not the stem (its conv is followed by b1's expansion, not by a depthwise conv).
    assert len(blocks) == 2, [op.type for op in program.global_block().ops]
    inner = [[o.type for o in program.block(op.attr("sub_block")).ops] for op in blocks]
    assert all(t.count("depthwise_conv2d") == 1 and t[-1] == "elementwise_add" for t in inner), inner
    xs = np.random.default_rng(0).standard_normal((4, 3, 16, 16)).astype(np.float32)
    want = _paddle_run(net, xs)
    whole, loops = _run(program, feeds, fetches, scope, xs, 1 << 30, monkeypatch)
    assert not loops and _rel_err(whole, want) < 1e-5
    one, loops = _run(program, feeds, fetches, scope, xs, 1, monkeypatch)      # one sample a chunk
    assert loops and _rel_err(one, want) < 1e-5
    widest = 16 * 16 * 32 * 4
    two, loops = _run(program, feeds, fetches, scope, xs, 2 * widest, monkeypatch)   # two samples a chunk
    assert loops and _rel_err(two, want) < 1e-5
    np.testing.assert_allclose(one, whole, rtol=1e-6, atol=1e-6)
    # An odd batch with a chunk that does not divide it: the largest chunk that does (1).
    xs3 = xs[:3]
    three, loops = _run(program, feeds, fetches, scope, xs3, 2 * widest, monkeypatch)
    assert loops and _rel_err(three, _paddle_run(net, xs3)) < 1e-5
    # Executor.run, as a user runs it.
    out, = fj.Executor().run(program, feed={feeds[0]: xs}, fetch_list=fetches, scope=scope)
    assert _rel_err(out, want) < 1e-5


def test_without_per_sample_blocks_the_program_is_paddles(net):
    import paddle_oracle as po

    scope = fj.Scope()
    plain, feeds, fetches = fio.load_inference_model(net, scope=scope)
    program = passes.optimize_inference(plain, scope, per_sample=False)
    assert "fluidjax_per_sample" not in [op.type for op in program.global_block().ops]
    xs = np.random.default_rng(1).standard_normal((2, 3, 16, 16)).astype(np.float32)
    paddle.enable_static()
    try:
        theirs, = po.run(program.serialize(), {feeds[0]: xs}, [v.name for v in fetches],
                         po.persistable_values(program, scope))
    finally:
        paddle.disable_static()
    assert _rel_err(theirs, _paddle_run(net, xs)) < 1e-5


def test_kept_values_and_other_layouts_keep_blocks_out(net):
    scope = fj.Scope()
    plain, feeds, fetches = fio.load_inference_model(net, scope=scope)
    fast = passes.optimize_inference(plain, scope)
    count = [op.type for op in fast.global_block().ops].count("fluidjax_per_sample")
    # Keep the first depthwise conv's input (b1's expanded activation, NCHW name): that block stays out.
    dw = next(op for op in plain.global_block().ops if op.type == "depthwise_conv2d")
    kept = passes.optimize_inference(plain, scope, keep=[dw.input("Input")[0]])
    assert [op.type for op in kept.global_block().ops].count("fluidjax_per_sample") == count - 1
    xs = np.random.default_rng(2).standard_normal((2, 3, 16, 16)).astype(np.float32)
    exe = fj.Executor()
    got, = exe.run(kept, feed={feeds[0]: xs}, fetch_list=[fetches[0], ], scope=scope)
    assert _rel_err(got, _paddle_run(net, xs)) < 1e-5
    # NCHW programs (no layout pass) get none: the pass only takes channel-last blocks.
    nchw = passes.optimize_inference(plain, scope, layout=None)
    assert "fluidjax_per_sample" not in [op.type for op in nchw.global_block().ops]
    assert passes.per_sample_blocks(nchw) == 0


@pytest.mark.slow
def test_mobilenet_v2_per_sample_matches_paddle(tmp_path, monkeypatch):
    paddle.disable_static()
    paddle.seed(12)
    model = paddle.vision.models.mobilenet_v2(scale=0.5, num_classes=10)
    _randomize_bn(model, 3)
    prefix = str(tmp_path / "mnv2")
    _save(model, prefix, 32)
    scope = fj.Scope()
    program, feeds, fetches = fio.load_inference_model(prefix, scope=scope, optimize=True)
    # 17 blocks: the stem with the first (unexpanded) block, and the 16 expanded ones.
    assert [op.type for op in program.global_block().ops].count("fluidjax_per_sample") == 17
    xs = np.random.default_rng(3).standard_normal((3, 3, 32, 32)).astype(np.float32)
    want = _paddle_run(prefix, xs)
    got, loops = _run(program, feeds, fetches, scope, xs, 1, monkeypatch)
    assert loops and _rel_err(got, want) < 1e-5
