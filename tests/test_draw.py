"""fj.draw: the graph drawn against the program it comes from; the SVG parses; PNG and the
notebook's graph view."""

import xml.etree.ElementTree as ET
from collections import Counter

import pytest

import fluidjax as fj
from fluidjax import layer
from fluidjax.ir.program import OP_ROLE_BACKWARD, OP_ROLE_OPTIMIZE
from fluidjax.proto import framework_pb2 as pb

SVG = "{http://www.w3.org/2000/svg}"


def _fc_program(layers=1, size=3, train=False):
    main, startup = fj.Program(), fj.Program()
    with fj.unique_name.guard(), fj.program_guard(main, startup):
        h = layer.data("x", input_size=5)
        for _ in range(layers):
            h = layer.fc(h, output_size=size, activation="relu")
        if train:
            label = layer.data("label", dims=1, dtype="int64")
            loss = layer.mean(layer.cross_entropy(layer.softmax(h), label))
            fj.optimizer.SGD(0.1).minimize(loss)
    return main


def _seed_program():
    """The design guide's example: images -> fc softmax -> cross entropy."""
    main, startup = fj.Program(), fj.Program()
    with fj.unique_name.guard(), fj.program_guard(main, startup):
        x = layer.data("images", input_size=64 * 64)
        y = layer.fc(x, output_size=100, activation="softmax")
        lab = layer.data("label", dims=10)
        layer.cross_entropy(y, lab)
    return main


def _nodes(svg_text):
    root = ET.fromstring(svg_text)
    return [g for g in root.iter(SVG + "g") if "fj-node" in g.get("class", "").split()]


def test_one_fc_layer_by_hand():
    # x -> mul <- W ; mul -> elementwise_add <- b ; -> relu -> (result)
    d = fj.draw(_fc_program())
    kinds = Counter(n.kind for n in d.graph.nodes)
    assert kinds == {"op": 3, "param": 2, "data": 1, "output": 1}
    assert len(d.graph.edges) == 6
    by_label = {n.label: i for i, n in enumerate(d.graph.nodes)}
    pairs = {(d.graph.nodes[e.src].label, d.graph.nodes[e.dst].label) for e in d.graph.edges}
    assert ("x", "mul") in pairs and ("fc_0.w_0", "mul") in pairs and ("fc_0.b_0", "elementwise_add") in pairs
    assert d.graph.nodes[by_label["fc_0.w_0"]].sub == "5×3"
    assert d.graph.nodes[by_label["x"]].sub == "?×5"


def test_every_input_of_every_op_is_one_edge_labelled_with_its_shape():
    program = _fc_program(layers=4)
    d = fj.draw(program)
    block = program.global_block()
    node_of = {n.op_index: i for i, n in enumerate(d.graph.nodes) if n.kind == "op"}
    assert sorted(node_of) == list(range(len(block.ops)))
    into = Counter((e.dst, e.var) for e in d.graph.edges)
    for index, op in enumerate(block.ops):
        for name in set(op.input_arg_names):
            assert into[(node_of[index], name)] == 1, (op.type, name)
    for e in d.graph.edges:
        shape = block.var(e.var).shape
        assert e.label == "×".join("?" if s == -1 else str(s) for s in shape)


def test_svg_parses_and_holds_every_op_of_the_seed_program():
    program = _seed_program()
    svg = fj.draw(program)._repr_svg_()
    nodes = _nodes(svg)
    drawn = sorted((int(g.get("data-index")), g.get("data-op")) for g in nodes if g.get("data-kind") == "op")
    assert drawn == [(i, op.type) for i, op in enumerate(program.global_block().ops)]
    params = {g.get("data-var") for g in nodes if g.get("data-kind") == "param"}
    assert params == {p.name for p in program.all_parameters()}
    data = {g.get("data-var") for g in nodes if g.get("data-kind") == "data"}
    assert data == {"images", "label"}
    # parameters look different from ops and data
    styles = {g.get("data-kind"): g.find(SVG + "rect").get("class") for g in nodes}
    assert len({styles["param"], styles["op"], styles["data"]}) == 3


def test_backward_and_optimizer_are_folded_unless_asked_for():
    program = _fc_program(layers=2, train=True)
    ops = program.global_block().ops
    role = [int(op.attrs.get("op_role", 0)) for op in ops]
    n_backward = sum(1 for r in role if r & OP_ROLE_BACKWARD and not r & OP_ROLE_OPTIMIZE)
    n_optimizer = sum(1 for r in role if r & OP_ROLE_OPTIMIZE)
    assert n_backward and n_optimizer
    d = fj.draw(program)
    hidden = {n.label: len(n.ops) for n in d.graph.nodes if n.kind == "hidden"}
    assert hidden == {"backward (hidden)": n_backward, "optimizer (hidden)": n_optimizer}
    assert sum(n.kind == "op" for n in d.graph.nodes) == len(ops) - n_backward - n_optimizer

    full = fj.draw(program, show_backward=True, show_optimizer=True)
    assert not [n for n in full.graph.nodes if n.kind == "hidden"]
    assert sorted(n.op_index for n in full.graph.nodes if n.kind == "op") == list(range(len(ops)))
    ET.fromstring(full.svg)
    # in-place updates (sgd writes ParamOut over Param) never make a cycle
    assert all(e.src != e.dst for e in full.graph.edges)


def test_lod_is_marked_on_edges_and_nodes():
    main, startup = fj.Program(), fj.Program()
    with fj.unique_name.guard(), fj.program_guard(main, startup):
        words = layer.data("words", shape=[8], lod_level=1)
        h = layer.fc(words, output_size=4)
        layer.sequence_pool(h, pool_type="sum")
    d = fj.draw(main)
    words_node = next(n for n in d.graph.nodes if n.label == "words")
    assert words_node.sub == "?×8 LoD1"
    lod_edges = [e for e in d.graph.edges if e.lod_level == 1]
    assert lod_edges and all(e.label.endswith("LoD1") for e in lod_edges)
    assert "fj-s-lod_edge" in d.svg


def _program_with_sub_block():
    desc = pb.ProgramDesc()
    b0 = desc.blocks.add(idx=0, parent_idx=-1)
    b1 = desc.blocks.add(idx=1, parent_idx=0)
    for block, name in ((b0, "x"), (b0, "y"), (b1, "z"), (b1, "w")):
        v = block.vars.add(name=name)
        v.type.type = pb.VarType.LOD_TENSOR
        v.type.lod_tensor.tensor.data_type = pb.VarType.FP32
        v.type.lod_tensor.tensor.dims.extend([-1, 4])
    loop = b0.ops.add(type="while")
    loop.inputs.add(parameter="X", arguments=["x"])
    loop.outputs.add(parameter="Out", arguments=["y"])
    loop.attrs.add(name="sub_block", type=pb.BLOCK, block_idx=1)
    for op_type, src, dst in (("relu", "x", "z"), ("tanh", "z", "w")):
        op = b1.ops.add(type=op_type)
        op.inputs.add(parameter="X", arguments=[src])
        op.outputs.add(parameter="Out", arguments=[dst])
    return fj.Program.parse(desc.SerializeToString())


def test_sub_blocks_are_clusters_inside_their_op():
    d = fj.draw(_program_with_sub_block())
    loop = next(n for n in d.graph.nodes if n.kind == "op")
    assert loop.op_type == "while" and len(loop.clusters) == 1
    inner = loop.clusters[0]
    assert inner.block_idx == 1
    assert [n.op_type for n in inner.nodes if n.kind == "op"] == ["relu", "tanh"]
    root = ET.fromstring(d.svg)
    outer = next(g for g in root.iter(SVG + "g") if g.get("data-op") == "while")
    nested = [g.get("data-op") for g in outer.iter(SVG + "g") if g is not outer and g.get("data-kind") == "op"]
    assert nested == ["relu", "tanh"] and all(
        g.get("data-block") == "1" for g in outer.iter(SVG + "g") if g.get("data-op") in ("relu", "tanh"))


def test_collapse_folds_each_layer_with_its_parameters():
    program = _fc_program(layers=3)
    d = fj.draw(program, collapse=True)
    groups = [n for n in d.graph.nodes if n.kind == "group"]
    assert [g.label for g in groups] == ["fc_0", "fc_1", "fc_2"]
    assert all(len(g.ops) == 3 for g in groups)
    assert not [n for n in d.graph.nodes if n.kind in ("param", "op")]
    assert groups[0].sub.endswith("18 params")      # 5*3 + 3
    chain = [(d.graph.nodes[e.src].label, d.graph.nodes[e.dst].label) for e in d.graph.edges]
    assert ("fc_0", "fc_1") in chain and ("fc_1", "fc_2") in chain and ("x", "fc_0") in chain
    ET.fromstring(d.svg)


def test_save_svg_and_png(tmp_path):
    d = fj.draw(_seed_program())
    d.save(tmp_path / "g.svg")
    ET.parse(tmp_path / "g.svg")
    pytest.importorskip("matplotlib")
    d.save(tmp_path / "g.png")
    assert (tmp_path / "g.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError, match=r"\.svg or \.png"):
        d.save(tmp_path / "g.pdf")


def test_a_drawing_too_big_for_png_says_so(tmp_path):
    pytest.importorskip("matplotlib")
    d = fj.draw(_fc_program(layers=200, size=2))
    with pytest.raises(ValueError, match="collapse=True"):
        d.save(tmp_path / "big.png")


def test_program_html_shows_the_graph_beside_the_tables():
    program = _seed_program()
    html = program._repr_html_()
    assert "fc_0.w_0" in html and "<table>" in html
    start, end = html.index("<svg"), html.index("</svg>") + len("</svg>")
    ops = {g.get("data-op") for g in _nodes(html[start:end])} - {None}
    assert ops == {op.type for op in program.global_block().ops}
