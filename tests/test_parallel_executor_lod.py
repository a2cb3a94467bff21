"""``fluid.ParallelExecutor`` with LoD feeds, and the per-device split's padding decision.

Oracle: a plain ``Executor.run`` of the same program on the whole batch (one device). The
multi-device case runs this file as a script on 4 forced host devices (a subprocess): an evenly
split batch of two LoD feeds, a per-sequence label that an op without a count role reads
(``flip``: it cannot be padded) and a dense weight read as rows must be split without padding
some per-sequence feeds and not others (``parallel._bucketing_decision``).
"""

from __future__ import annotations

import os
import subprocess
import sys

if __name__ == "__main__":   # the worker: 4 host devices before jax is imported
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4").strip()
    os.environ["JAX_PLATFORMS"] = "cpu"

import numpy as np  # noqa: E402
import pytest  # noqa: E402

import fluidjax as fj  # noqa: E402
from fluidjax import layer  # noqa: E402


def _program(flip_label: bool):
    main, startup = fj.Program(), fj.Program()
    main.random_seed = startup.random_seed = 3
    with fj.unique_name.guard(), fj.program_guard(main, startup):
        a = layer.data("a", shape=[1], dtype="int64", lod_level=1)
        b = layer.data("b", shape=[1], dtype="int64", lod_level=1)
        label = layer.data("label", shape=[1], dtype="int64")
        w = layer.data("w", shape=[1], dtype="float32")
        pa = layer.sequence_pool(layer.embedding(a, size=[20, 4]), "sum")
        pb = layer.sequence_pool(layer.embedding(b, size=[20, 4]), "max")
        logits = layer.fc(pa + pb, 3)
        per = layer.reduce_sum(fj.layers.one_hot(label, 3) * logits, dim=1, keep_dim=True)
        if flip_label:     # flip has no count role: the label's rows must stay exact
            per = per + 0.5 * layer.flip(layer.cast(label, "float32"), [1])
        loss = layer.mean(per * w)
    return main, startup, per, loss


def _feed(rng, count: int) -> dict:
    la, lb = rng.integers(1, 5, count).tolist(), rng.integers(1, 5, count).tolist()
    return {"a": fj.create_lod_tensor(rng.integers(0, 20, (sum(la), 1)), [la], fj.CPUPlace()),
            "b": fj.create_lod_tensor(rng.integers(0, 20, (sum(lb), 1)), [lb], fj.CPUPlace()),
            "label": rng.integers(0, 3, (count, 1)), "w": rng.random((count, 1)).astype("float32")}


def test_parallel_executor_runs_lod_feeds_like_the_executor():
    """One device: ParallelExecutor fed one dict, or a list of one dict per device, gives the plain
    Executor's per-sequence values and loss for LoD feeds."""
    main, startup, per, loss = _program(flip_label=True)
    scope = fj.Scope()
    exe = fj.Executor(fj.CPUPlace())
    with fj.scope_guard(scope):
        exe.run(startup)
        pe = fj.ParallelExecutor(use_cuda=False, loss_name=loss.name, main_program=main, scope=scope)
        rng = np.random.default_rng(0)
        for count in (5, 3):
            feed = _feed(rng, count)
            want = exe.run(main, feed=feed, fetch_list=[per, loss])
            for given in (feed, [feed] * pe.device_count):
                got = pe.run(fetch_list=[per.name, loss.name], feed=given)
                np.testing.assert_allclose(np.ravel(got[0]), np.ravel(want[0]), rtol=1e-5, atol=1e-6)
                np.testing.assert_allclose(np.ravel(got[1]), np.ravel(want[1]), rtol=1e-5, atol=1e-6)


def test_a_list_of_another_length_than_the_devices_is_joined():
    """A script that counted its devices itself (CPU_NUM=2, one JAX device) feeds two dicts: they
    are joined, LoD offsets rebased, and run as the whole batch."""
    main, startup, per, loss = _program(flip_label=True)
    scope = fj.Scope()
    exe = fj.Executor(fj.CPUPlace())
    with fj.scope_guard(scope):
        exe.run(startup)
        pe = fj.ParallelExecutor(use_cuda=False, loss_name=loss.name, main_program=main, scope=scope)
        if pe.device_count != 1:
            pytest.skip("this session has more than one device")
        rng = np.random.default_rng(4)
        parts = [_feed(rng, 3), _feed(rng, 2)]
        whole = {k: np.concatenate([p[k] for p in parts]) for k in ("label", "w")}
        for k in ("a", "b"):
            whole[k] = fj.create_lod_tensor(np.concatenate([np.asarray(p[k].value()) for p in parts]),
                                            [sum((p[k].recursive_sequence_lengths()[0] for p in parts), [])],
                                            fj.CPUPlace())
        want = exe.run(main, feed=whole, fetch_list=[per])[0]
        got = pe.run(fetch_list=[per.name], feed=parts)[0]
        np.testing.assert_allclose(np.ravel(got), np.ravel(want), rtol=1e-5, atol=1e-6)


def test_dense_rows_that_are_not_per_sequence_stay_exact():
    """One device, per-device LoD step under FLAGS_bucket_sequences: a dense label read as rows
    (one per token, not per sequence) meets logits made from an exact dense feed; it must not be
    padded to a bucket (the Fluid 1.4 transformer: 256 padded label rows met 180 logits)."""
    main, startup = fj.Program(), fj.Program()
    main.random_seed = startup.random_seed = 3
    with fj.unique_name.guard(), fj.program_guard(main, startup):
        a = layer.data("a", shape=[1], dtype="int64", lod_level=1)
        t = layer.data("t", shape=[2, 4], dtype="float32")      # [sentences, 2 tokens, 4]
        lbl = layer.data("lbl", shape=[1], dtype="int64")
        seq = layer.sequence_pool(layer.embedding(a, size=[20, 4]), "sum")
        logits = layer.fc(layer.reshape(layer.flip(t, [2]), [-1, 4]), 5)   # a row per token
        soft = layer.label_smooth(fj.layers.one_hot(lbl, 5), epsilon=0.1)
        cost = layer.softmax_with_cross_entropy(logits, soft, soft_label=True)
        loss = layer.reduce_sum(cost) + layer.reduce_sum(seq)
    exe = fj.Executor(fj.CPUPlace())
    scope = fj.Scope()
    with fj.scope_guard(scope):
        exe.run(startup)
        compiled = fj.CompiledProgram(main).with_data_parallel(loss_name=loss.name)
        rng = np.random.default_rng(2)
        for count, sentences in ((3, 5), (5, 3)):
            lens = rng.integers(1, 4, count).tolist()
            feed = {"a": fj.create_lod_tensor(rng.integers(0, 20, (sum(lens), 1)), [lens], fj.CPUPlace()),
                    "t": rng.random((sentences, 2, 4)).astype("float32"),
                    "lbl": rng.integers(0, 5, (2 * sentences, 1))}
            want = exe.run(main, feed=feed, fetch_list=[cost, loss])
            got = exe.run(compiled, feed=feed, fetch_list=[cost, loss])
            np.testing.assert_allclose(np.ravel(got[0]), np.ravel(want[0]), rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(np.ravel(got[1]), np.ravel(want[1]), rtol=1e-5, atol=1e-5)


def _worker() -> None:
    main, startup, per, loss = _program(flip_label=True)
    exe = fj.Executor(fj.CPUPlace())
    exe.run(startup)
    compiled = fj.CompiledProgram(main).with_data_parallel(loss_name=loss.name)
    rng = np.random.default_rng(1)
    for count in (12, 20, 8):      # even shares of 3, 5, 2 sequences: 3 and 5 are not buckets
        feed = _feed(rng, count)
        want, = exe.run(main, feed=feed, fetch_list=[per])
        got, = exe.run(compiled, feed=feed, fetch_list=[per])
        np.testing.assert_allclose(np.ravel(got), np.ravel(want), rtol=1e-5, atol=1e-6)
    print("OK")


def test_even_shares_pad_every_per_sequence_feed_alike():
    env = dict(os.environ)
    proc = subprocess.run([sys.executable, __file__], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("OK"), proc.stderr[-4000:]


if __name__ == "__main__":
    _worker()
