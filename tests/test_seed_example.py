"""The seed's example (shape-inference design doc), end to end."""

import numpy as np
import pytest

import fluidjax as fj
from fluidjax import layer


def build_seed():
    x = layer.data("images", input_size=64 * 64)
    y = layer.fc(x, output_size=100, activation="softmax")
    l = layer.data("label", dims=10)
    cost = layer.cross_entropy(y, l)
    return x, y, l, cost


def test_shapes_after_each_line():
    x = layer.data("images", input_size=64 * 64)
    assert x.shape == (-1, 4096)
    y = layer.fc(x, output_size=100, activation="softmax")
    block = fj.default_main_program().global_block()
    w, b = block.var("fc_0.w_0"), block.var("fc_0.b_0")
    assert (w.shape, b.shape) == ((4096, 100), (100,))
    assert isinstance(w, fj.Parameter) and w.persistable and b.persistable
    ops = block.ops
    assert [op.type for op in ops] == ["mul", "elementwise_add", "softmax"]
    xw, xwb = block.var(ops[0].output("Out")[0]), block.var(ops[1].output("Out")[0])
    assert xw.name == "fc_0.tmp_0" and xw.shape == (-1, 100)
    assert xwb.shape == (-1, 100) and y.shape == (-1, 100)
    l = layer.data("label", dims=10)
    assert l.shape == (-1, 10)
    cost = layer.cross_entropy(y, l)
    assert cost.shape == (-1, 1)


def test_lod_inputs_and_propagation():
    paragraph = layer.data("paragraph", lod_level=2, input_size=6000)
    video = layer.data("video", lod_level=1, input_size=640 * 480)
    assert (paragraph.shape, paragraph.lod_level) == ((-1, 6000), 2)
    assert (video.shape, video.lod_level) == ((-1, 307200), 1)
    h = layer.fc(paragraph, output_size=8, activation="tanh")
    assert (h.shape, h.lod_level) == ((-1, 8), 2)


def test_data_arguments():
    assert layer.data("a", input_size=[3, 4]).shape == (-1, 3, 4)
    assert layer.data("b", shape=[2, 5], dtype="int64").dtype == "int64"
    assert layer.data("c").shape == (-1,)
    with pytest.raises(ValueError, match="one of"):
        layer.data("d", input_size=3, dims=4)
    with pytest.raises(ValueError, match="already exists"):
        layer.data("a", input_size=3)


def _numpy_seed_cost(xs, ls, w, b):
    logits = xs @ w + b
    p = np.exp(logits - logits.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    padded = np.zeros_like(p)
    padded[:, : ls.shape[1]] = ls
    return -(padded * np.log(p)).sum(-1, keepdims=True)


def test_run_matches_numpy():
    x, y, l, cost = build_seed()
    scope = fj.global_scope()
    assert scope.find_var("fc_0.w_0") is None  # nothing allocated while building
    exe = fj.Executor()
    exe.run(fj.default_startup_program())
    rng = np.random.default_rng(0)
    xs = rng.random((16, 4096), dtype=np.float32)
    ls = rng.dirichlet(np.ones(10), 16).astype(np.float32)
    c, = exe.run(fj.default_main_program(), feed={"images": xs, "label": ls}, fetch_list=[cost])
    w = np.asarray(scope.find_var("fc_0.w_0").get_tensor())
    b = np.asarray(scope.find_var("fc_0.b_0").get_tensor())
    assert w.shape == (4096, 100) and np.all(b == 0)
    limit = np.sqrt(6 / (4096 + 100))  # Xavier uniform, fc's default
    assert np.abs(w).max() <= limit and w.std() > limit / 3
    np.testing.assert_allclose(c, _numpy_seed_cost(xs.astype(np.float64), ls, w, b), rtol=1e-4)
    # Intermediates never enter the scope.
    assert scope.find_var("fc_0.tmp_0") is None and scope.find_var(cost.name) is None


def test_serialize_parse_run_again():
    x, y, l, cost = build_seed()
    exe = fj.Executor()
    exe.run(fj.default_startup_program())
    xs = np.ones((4, 4096), np.float32)
    ls = np.full((4, 10), 0.1, np.float32)
    c1, = exe.run(feed={"images": xs, "label": ls}, fetch_list=[cost])
    data = fj.default_main_program().serialize()
    assert data == fj.default_main_program().serialize()  # deterministic
    prog = fj.Program.parse(data)
    assert prog.serialize() == data
    assert prog.global_block().var(cost.name).shape == (-1, 1)
    c2, = exe.run(prog, feed={"images": xs, "label": ls}, fetch_list=[cost.name])
    np.testing.assert_array_equal(c1, c2)


def test_cross_entropy_soft_label_mismatch_is_a_build_time_error():
    x = layer.data("images", input_size=64 * 64)
    y = layer.fc(x, output_size=100, activation="softmax")
    l = layer.data("label", dims=99)
    n_ops = len(fj.default_main_program().global_block().ops)
    with pytest.raises(fj.ShapeError) as info:
        layer.cross_entropy(y, l, soft_label=True)  # the line the error must name
    message = str(info.value)
    assert "cross_entropy" in message and "(-1, 100)" in message and "(-1, 99)" in message
    assert "fc_0.tmp_2" in message and "label" in message
    assert f"{__file__}" in message and "soft_label=True" in message
    assert len(fj.default_main_program().global_block().ops) == n_ops  # nothing appended


def test_elementwise_add_mismatch_names_op_inputs_and_line():
    a = layer.data("a", input_size=100)
    b = layer.data("b", input_size=99)
    with pytest.raises(fj.ShapeError) as info:
        layer.elementwise_add(a, b)
    message = str(info.value)
    assert "elementwise_add" in message and "'a'" in message and "'b'" in message
    assert "(-1, 100)" in message and "(-1, 99)" in message and __file__ in message
    op = None
    c = a + a
    op = fj.default_main_program().global_block().ops[-1]
    assert op.type == "elementwise_add" and c.shape == (-1, 100)
    assert any(__file__ in line for line in op.attr("op_callstack"))


def test_infer_shapes_resolves_every_unk():
    x, y, l, cost = build_seed()
    shapes = fj.infer_shapes(fj.default_main_program(), {"images": (32, 4096), "label": (32, 10)})
    assert shapes[y.name] == (32, 100) and shapes[cost.name] == (32, 1)
    assert shapes["fc_0.tmp_0"] == (32, 100)
    with pytest.raises(fj.ShapeError, match="images"):
        fj.infer_shapes(fj.default_main_program(), {"images": (32, 4095)})
    with pytest.raises(fj.ShapeError, match="cross_entropy"):
        fj.infer_shapes(fj.default_main_program(), {"images": (32, 4096), "label": (31, 10)})


def test_building_is_lazy_for_huge_parameters():
    import tracemalloc

    tracemalloc.start()
    x = layer.data("x", input_size=100_000)
    y = layer.fc(x, output_size=100_000)  # a 40 GB weight
    shapes = fj.infer_shapes(fj.default_main_program(), {"x": (8, 100_000)})
    data = fj.default_main_program().serialize()
    startup = fj.default_startup_program().serialize()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert shapes[y.name] == (8, 100_000) and len(data) < 100_000 and len(startup) < 100_000
    assert peak < 20 * 2**20, f"building allocated {peak / 2**20:.1f} MiB"


def test_symbolic_variables_have_no_value():
    x, y, l, cost = build_seed()
    assert bool(y)   # a Variable is truthy, as in Fluid ("was it given"); a comparison's result is not
    for attempt in (lambda: np.asarray(y), lambda: bool(y > 0.5), lambda: y.numpy(), lambda: float(cost)):
        with pytest.raises(fj.SymbolicValueError, match="Executor"):
            attempt()
