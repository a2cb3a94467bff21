"""The demo: the seeds' model built, inspected, run, serialized, reloaded, trained and evaluated.

Run it with ``python -m fluidjax demo`` (or the ``fluidjax`` console script).
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

import fluidjax as fj
from fluidjax import layer


def synthetic_batches(n_batches: int, batch: int, seed: int = 0):
    """Images that are one of 10 noisy prototypes; the label is the prototype's one-hot vector.

    Learnable (not noise): the class is in the pixels, under noise six times as strong. The
    prototypes are fixed, so batches of any ``seed`` share them. Yields float32 (images, labels).
    """
    prototypes = np.random.default_rng(2017).normal(0.0, 1.0, (10, 64 * 64)).astype(np.float32)
    rng = np.random.default_rng(seed)
    for _ in range(n_batches):
        k = rng.integers(0, 10, batch)
        images = prototypes[k] + rng.normal(0.0, 6.0, (batch, 64 * 64)).astype(np.float32)
        labels = np.eye(10, dtype=np.float32)[k]
        yield images / 8.0, labels


def build():
    """The seed's model (shape-inference design doc); returns (x, y, label, cost)."""
    x = layer.data("images", input_size=64 * 64)
    y = layer.fc(x, output_size=100, activation="softmax")
    l = layer.data("label", dims=10)
    cost = layer.cross_entropy(y, l)
    return x, y, l, cost


def main(argv: list[str] | None = None) -> int:
    """Run the demo (see the module docstring); returns 0 when the loss fell."""
    parser = argparse.ArgumentParser(prog="fluidjax demo", description=__doc__)
    parser.add_argument("--steps", type=int, default=150, help="training steps")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)

    main_program, startup = fj.default_main_program(), fj.default_startup_program()
    startup.random_seed = 1
    x, y, l, cost = build()
    avg_cost = layer.mean(cost)
    print("== The seed's program, shapes inferred at build time (-1 is the batch) ==")
    print(main_program)

    exe = fj.Executor()
    exe.run(startup)
    images, labels = next(synthetic_batches(1, args.batch, seed=99))
    first, = exe.run(main_program, feed={"images": images, "label": labels}, fetch_list=[avg_cost])
    print(f"\n== One batch of {args.batch}: mean cost {float(first):.4f} ==")

    data = main_program.serialize()
    reloaded = fj.Program.parse(data)
    again, = exe.run(reloaded, feed={"images": images, "label": labels}, fetch_list=[avg_cost.name])
    same = np.array_equal(first, again)
    print(f"== Serialized to {len(data)} bytes of Paddle ProgramDesc, parsed back, run again: "
          f"{'same result' if same else 'DIFFERENT result'} ({float(again):.4f}) ==")
    if not same:
        return 1

    test_program = main_program.clone(for_test=True)
    fj.optimizer.Adam(learning_rate=1e-3).minimize(avg_cost)
    exe.run(startup)  # allocate and initialise parameters and optimizer accumulators
    print(f"\n== Training {args.steps} steps with Adam ==")
    from tqdm import tqdm

    losses = []
    bar = tqdm(synthetic_batches(args.steps, args.batch), total=args.steps, disable=args.quiet,
               file=sys.stdout, mininterval=0.5)
    for images, labels in bar:
        loss, = exe.run(main_program, feed={"images": images, "label": labels}, fetch_list=[avg_cost])
        losses.append(float(loss))
        bar.set_postfix(loss=f"{losses[-1]:.3f}", refresh=False)
    bar.close()
    print(f"loss: first {losses[0]:.3f}, last {np.mean(losses[-10:]):.3f} (mean of the last 10)")

    correct = total = 0
    for images, labels in synthetic_batches(10, 100, seed=12345):
        probs, = exe.run(test_program, feed={"images": images, "label": labels}, fetch_list=[y.name])
        correct += int((probs.argmax(-1) == labels.argmax(-1)).sum())
        total += len(labels)
    print(f"== Evaluation with the for_test clone: accuracy {correct / total:.1%} on {total} held-out images ==")
    sequences_ok = sequences_demo()
    return 0 if np.mean(losses[-10:]) < losses[0] and sequences_ok else 1


def sequences_demo() -> bool:
    """The seeds' variable-length inputs: ``paragraph`` (lod_level 2: paragraphs of sentences of
    words) pooled twice, and ``video`` (lod_level 1: videos of frames) pooled once, each then
    through an fc. Returns whether the paragraph result matches NumPy."""
    print("\n== The seeds' LoD inputs: paragraphs of sentences of words, and videos of frames ==")
    main, startup = fj.Program(), fj.Program()
    startup.random_seed = 1
    with fj.program_guard(main, startup):
        paragraph = layer.data("paragraph", lod_level=2, input_size=6000)
        sentences = layer.sequence_pool(paragraph, "sum")           # words -> one row per sentence
        paragraphs = layer.sequence_pool(sentences, "average")     # sentences -> one row per paragraph
        p_out = layer.fc(paragraphs, output_size=10)
        video = layer.data("video", lod_level=1, input_size=64 * 48)
        v_out = layer.fc(layer.sequence_pool(video, "max"), output_size=10)
    scope = fj.Scope()
    exe = fj.Executor()
    exe.run(startup, scope=scope)
    rng = np.random.default_rng(7)
    # 2 paragraphs: the first has 2 sentences (3 and 4 words), the second 1 sentence (2 words).
    words = rng.random((9, 6000), dtype=np.float32)
    para = fj.create_lod_tensor(words, [[2, 1], [3, 4, 2]])
    frames = fj.create_lod_tensor(rng.random((5, 64 * 48), dtype=np.float32), [[2, 3]])
    p, v = exe.run(main, feed={"paragraph": para, "video": frames}, fetch_list=[p_out, v_out], scope=scope)
    print(f"paragraph: lod {para.lod()} -> sentences (lod_level {sentences.lod_level}) -> "
          f"paragraphs (lod_level {paragraphs.lod_level}) -> fc: {p.shape}")
    print(f"video: lod {frames.lod()} -> max over frames -> fc: {v.shape}")
    pooled = np.stack([(words[0:3].sum(0) + words[3:7].sum(0)) / 2, words[7:9].sum(0)]).astype(np.float64)
    w_name, b_name = [param.name for param in main.global_block().all_parameters()][:2]   # the paragraph fc's
    w = np.asarray(scope.find_var(w_name).get_tensor(), np.float64)
    b = np.asarray(scope.find_var(b_name).get_tensor(), np.float64)
    ok = bool(np.allclose(p, pooled @ w + b, rtol=1e-3, atol=1e-3))
    print(f"paragraph result {'matches' if ok else 'DIFFERS from'} NumPy's")
    return ok


if __name__ == "__main__":
    sys.exit(main())
