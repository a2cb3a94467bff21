"""What the first run of a large program costs in fluidjax's own lowering (docs/fluid1.md, "Where a
large program's first step goes"): each op's JAX rule is traced once per step trace, the Python
walks over the program that plan building and tracing make grow linearly with its ops, and a
matching feed re-runs no shape rule. Counted calls, never timings."""

import numpy as np

import fluidjax as fj
from fluidjax import layers
from fluidjax.ir import shape as shape_rules
from fluidjax.lowering import lower


def _counting(monkeypatch, module, name):
    calls = [0]
    real = getattr(module, name)

    def counted(*a, **k):
        calls[0] += 1
        return real(*a, **k)

    monkeypatch.setattr(module, name, counted)
    return calls


def _first_run(monkeypatch, depth):
    """Build an MLP of ``depth`` fc + batch_norm layers trained by momentum in fresh programs, run its
    startup, then count what its first training step (and a second one) calls."""
    main, startup = fj.Program(), fj.Program()
    with fj.program_guard(main, startup), fj.unique_name.guard():
        x = layers.data("x", shape=[8], dtype="float32")
        label = layers.data("label", shape=[1], dtype="int64")
        h = x
        for _ in range(depth):
            h = layers.batch_norm(layers.fc(h, size=8), act="relu")
        loss = layers.mean(layers.softmax_with_cross_entropy(layers.fc(h, size=4), label))
        fj.optimizer.Momentum(learning_rate=0.1, momentum=0.9).minimize(loss)
    scope = fj.Scope()
    exe = fj.Executor()
    exe.run(startup, scope=scope)
    feed = {"x": np.random.RandomState(0).rand(4, 8).astype("float32"),
            "label": np.array([[0], [1], [2], [3]], "int64")}
    rules = _counting(monkeypatch, lower, "run_op")
    walks = _counting(monkeypatch, lower, "block_refs")
    shapes = _counting(monkeypatch, shape_rules, "run_rule")
    first = exe.run(main, feed=feed, fetch_list=[loss], scope=scope)
    counts = {"ops": len(main.global_block().ops), "rules": rules[0], "walks": walks[0], "shapes": shapes[0]}
    rules[0] = walks[0] = shapes[0] = 0
    second = exe.run(main, feed=feed, fetch_list=[loss], scope=scope)
    counts.update(rules_again=rules[0], shapes_again=shapes[0])
    assert np.isfinite(first[0]).all() and np.isfinite(second[0]).all()
    return counts


def test_first_step_traces_each_rule_once_and_walks_linearly(monkeypatch):
    small = _first_run(monkeypatch, 3)
    large = _first_run(monkeypatch, 6)
    assert large["ops"] > 1.7 * small["ops"]
    for c in (small, large):
        # every op of the training step is lowered exactly once while its step is traced ...
        assert c["rules"] == c["ops"], c
        # ... a second run with the same shapes traces nothing again, and a matching feed
        # re-runs no shape rule (shape inference happened once, when the program was built)
        assert c["rules_again"] == 0 and c["shapes_again"] == 0 and c["shapes"] == 0, c
    # the per-op walks over the program (sub-block references) are a constant number per op:
    # nothing that plan building or tracing does walks the whole program once per op
    per_op_small, per_op_large = small["walks"] / small["ops"], large["walks"] / large["ops"]
    assert small["walks"] > 0 and per_op_large <= per_op_small * 1.1 + 0.5, (small, large)
