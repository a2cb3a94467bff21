"""A program block as a dataflow graph to draw: ops, the variables that enter it, edges by variable.

Nodes are the block's ops, plus one node for each variable that no shown op of the block
produces (a parameter, a data variable, another persistable or outer variable) and one for each
result nobody reads (a loss, a prediction). Every other variable is an edge, from the op that
wrote it last to each op that reads it, labelled with its shape. In-place updates (an optimizer
writing ``ParamOut`` over ``Param``) therefore never make a cycle: a read always comes from the
latest write before it, and node numbers follow program order.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from . import dtypes
from .names import EMPTY_VAR_NAME, OP_ROLE_BACKWARD, OP_ROLE_LOSS, OP_ROLE_LRSCHED, OP_ROLE_OPTIMIZE
from .registry import ATTR_TYPES

if TYPE_CHECKING:
    from .program import Block, Operator

# Outputs that are bookkeeping, not results: an op writing one that nobody reads gets no sink node.
_AUX_SLOTS = frozenset({"XShape", "SavedMean", "SavedVariance", "ReserveSpace", "Mask", "Mean", "Variance",
                        "MeanOut", "VarianceOut", "Softmax"})
_SOURCE_KINDS = frozenset({"param", "data", "var"})
_BLOCK_ATTR, _BLOCKS_ATTR = ATTR_TYPES["block"], ATTR_TYPES["blocks"]
# `fc_0.tmp_1`, `conv2d_3.w_0`, `fc_0.tmp_1@GRAD` -> `fc_0`: the name a LayerHelper gave its layer.
_LAYER_NAME = re.compile(r"^([A-Za-z][A-Za-z0-9_]*_\d+)\.")


@dataclass
class Node:
    """One box of the drawing. ``kind``: op, group, param, data, var, output or hidden."""

    kind: str
    label: str
    sub: str = ""
    tip: str = ""
    op_type: str | None = None
    op_index: int | None = None        # index of the op in its block
    ops: list[int] = field(default_factory=list)  # op indices a group or hidden node stands for
    var: str | None = None
    clusters: list["Graph"] = field(default_factory=list)   # sub-blocks drawn inside an op


@dataclass
class Edge:
    src: int
    dst: int
    var: str
    label: str
    lod_level: int = 0


@dataclass
class Graph:
    """The drawable graph of one block."""

    block_idx: int
    nodes: list[Node] = field(default_factory=list)
    edges: list[Edge] = field(default_factory=list)
    hidden_ops: int = 0


def shape_text(shape) -> str:
    """``(-1, 784)`` -> ``?×784``; ``()`` -> ``scalar``."""
    if shape is None:
        return "?"
    if len(shape) == 0:
        return "scalar"
    return "×".join("?" if d < 0 else str(d) for d in shape)


def layer_name(op: Operator) -> str | None:
    """The layer an op belongs to: the LayerHelper name its outputs carry (``fc_0``), else None."""
    for names in op.outputs.values():
        for name in names:
            m = _LAYER_NAME.match(name)
            if m:
                return m.group(1)
    return None


def group_key(op: Operator) -> str | None:
    """What ``collapse=True`` folds an op into: its outermost name scope, else its layer name."""
    scope = op.attrs.get("op_namescope")
    if isinstance(scope, str):
        parts = [p for p in scope.split("/") if p]
        if parts:
            return parts[0]
    return layer_name(op)


def hidden_part(op: Operator, show_backward: bool, show_optimizer: bool) -> str | None:
    """``"backward"`` or ``"optimizer"`` when the op is in a part that is not shown, else None."""
    try:
        role = int(op.attrs.get("op_role", 0) or 0)
    except (TypeError, ValueError):
        return None
    if role & (OP_ROLE_OPTIMIZE | OP_ROLE_LRSCHED) and not show_optimizer:
        return "optimizer"
    if role & OP_ROLE_BACKWARD and not show_backward:
        return "backward"
    return None


def _sub_blocks(op: Operator) -> list[int]:
    out = []
    for name, type_id in op.attr_types.items():
        value = op.attrs.get(name)
        if type_id == _BLOCK_ATTR and value is not None:
            out.append(value if isinstance(value, int) else value.idx)
        elif type_id == _BLOCKS_ATTR and value:
            out.extend(v if isinstance(v, int) else v.idx for v in value)
    return out


def _var_facts(block: Block, name: str) -> tuple[str, str, int, bool]:
    """(kind, shape text, lod level, persistable) of a variable as a source node shows it."""
    var = block.find_var(name)
    if var is None:
        return "var", "?", 0, False
    kind = ("param" if getattr(var, "is_parameter", False) else "data" if getattr(var, "is_data", False)
            else "var")
    shape = shape_text(var.shape) if var.type == dtypes.LOD_TENSOR else _type_name(var.type)
    return kind, shape, int(var.lod_level or 0), bool(var.persistable)


def _type_name(type_id: int) -> str:
    return {dtypes.LOD_TENSOR_ARRAY: "tensor array", dtypes.SELECTED_ROWS: "selected rows",
            dtypes.STEP_SCOPES: "step scopes"}.get(type_id, "var")


def _edge_label(block: Block, name: str) -> tuple[str, int]:
    var = block.find_var(name)
    if var is None:
        return "", 0
    lod = int(var.lod_level or 0)
    text = shape_text(var.shape) if var.type == dtypes.LOD_TENSOR else _type_name(var.type)
    return (f"{text} LoD{lod}" if lod else text), lod


def build(block: Block, *, show_backward: bool = False, show_optimizer: bool = False,
          collapse: bool = False, _depth: int = 0) -> Graph:
    """The graph of ``block`` (its sub-blocks built recursively as clusters of their owning op)."""
    graph = Graph(block.idx)
    nodes, edges = graph.nodes, graph.edges
    producer: dict[str, int] = {}
    consumed: set[str] = set()
    hidden_node: dict[str, int] = {}
    group_node: dict[str, int] = {}
    folded_params: dict[str, int] = {}     # group -> parameter elements folded into it
    seen_edges: set[tuple[int, int, str]] = set()
    last_output: dict[str, tuple[int, str]] = {}    # var -> (node, slot) of its latest write

    def add_edge(src: int, dst: int, name: str) -> None:
        if (src >= dst and nodes[src].kind not in _SOURCE_KINDS) or (src, dst, name) in seen_edges:
            # node numbers follow program order, so no edge points back (a source node has no
            # edge in and cannot close a cycle): the graph is acyclic by construction
            return
        seen_edges.add((src, dst, name))
        label, lod = _edge_label(block, name)
        edges.append(Edge(src, dst, name, label, lod))

    for index, op in enumerate(block.ops):
        part = hidden_part(op, show_backward, show_optimizer)
        subs = _sub_blocks(op)
        key = group_key(op) if collapse and part is None and not subs else None
        # the variables this op reads first, so that a source node comes before its reader
        sources: list[tuple[int | None, str]] = []
        for name in op.input_arg_names if part is None else ():
            src = producer.get(name)
            if src is not None and src < 0:
                continue  # a folded parameter read twice by this op
            if src is None:
                kind, shape, lod, _ = _var_facts(block, name)
                if key is not None and kind == "param" and name.startswith(key + "."):
                    # a collapsed layer's own parameters are part of its node
                    var = block.find_var(name)
                    folded_params[key] = folded_params.get(key, 0) + _numel(var.shape if var is not None else ())
                    producer[name] = -1 - len(sources)  # placeholder: replaced by the group's node below
                    sources.append((None, name))
                    continue
                src = producer[name] = len(nodes)
                sub = f"{shape} LoD{lod}" if lod else shape
                nodes.append(Node(kind, name, sub=sub, var=name, tip=f"{name}: {sub}"))
            sources.append((src, name))

        if part is not None:
            graph.hidden_ops += 1
            me = hidden_node.get(part)
            if me is None:
                me = hidden_node[part] = len(nodes)
                nodes.append(Node("hidden", part, tip=f"{part} ops (hidden)"))
                if part == "optimizer" and "backward" in hidden_node:
                    add_edge(hidden_node["backward"], me, "")
            nodes[me].ops.append(index)
            if part == "backward" and int(op.attrs.get("op_role", 0) or 0) & OP_ROLE_LOSS:
                # the op seeding the loss's gradient: draw loss -> backward
                for name in op.output_arg_names:
                    src = producer.get(name[:-len("@GRAD")]) if name.endswith("@GRAD") else None
                    if src is not None and src >= 0:
                        add_edge(src, me, "")
        elif key is not None:
            me = group_node.get(key)
            if me is None:
                me = group_node[key] = len(nodes)
                nodes.append(Node("group", key, op_type=op.type, op_index=index))
            nodes[me].ops.append(index)
        else:
            me = len(nodes)
            nodes.append(Node("op", op.type, sub=layer_name(op) or "", op_type=op.type, op_index=index,
                              ops=[index], tip=_op_tip(op, index)))
            if _depth < 8:
                for sub_idx in subs:
                    if 0 <= sub_idx < len(block.program.blocks) and sub_idx != block.idx:
                        nodes[me].clusters.append(build(
                            block.program.blocks[sub_idx], show_backward=show_backward,
                            show_optimizer=show_optimizer, collapse=collapse, _depth=_depth + 1))

        for src, name in sources:
            if src is None:
                producer[name] = me
                continue
            consumed.add(name)
            add_edge(src, me, name)
        for slot, names in op.outputs.items():
            for name in names:
                if name != EMPTY_VAR_NAME:
                    producer[name] = me
                    last_output[name] = (me, slot)
                    if part is None:
                        consumed.discard(name)  # a new write: its readers are still to come

    # results nobody reads get a node of their own (a loss, a prediction)
    for name, (node, slot) in last_output.items():
        if name in consumed or slot in _AUX_SLOTS or nodes[node].kind == "hidden":
            continue
        kind, shape, lod, persistable = _var_facts(block, name)
        if persistable or kind == "param":
            continue
        me = len(nodes)
        sub = f"{shape} LoD{lod}" if lod else shape
        nodes.append(Node("output", name, sub=sub, var=name, tip=f"{name}: {sub}"))
        add_edge(node, me, name)

    for node_id in group_node.values():
        node = nodes[node_id]
        types = list(dict.fromkeys(block.ops[i].type for i in node.ops))
        params = folded_params.get(node.label, 0)
        node.sub = (", ".join(types) if len(types) <= 2 else f"{len(node.ops)} ops") + (
            f" · {_count(params)} params" if params else "")
        node.tip = f"{node.label}: " + ", ".join(block.ops[i].type for i in node.ops)
    for node in nodes:
        if node.kind == "hidden":
            node.sub = f"{len(node.ops)} ops"
            node.label = f"{node.label} (hidden)"
    return graph


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= max(int(d), 1)
    return n


def _count(n: int) -> str:
    return f"{n / 1e6:.1f}M" if n >= 1e6 else f"{n / 1e3:.1f}k" if n >= 1e4 else str(n)


def _op_tip(op: Operator, index: int) -> str:
    ins = "; ".join(f"{k}: {', '.join(v)}" for k, v in op.inputs.items() if v)
    outs = "; ".join(f"{k}: {', '.join(v)}" for k, v in op.outputs.items() if v)
    return f"#{index} {op.type}\nin  {ins}\nout {outs}\n{op.location}"
