"""A layered (Sugiyama-style) layout of a directed acyclic graph, in pure Python.

Why our own: the graph of a program must draw with nothing but ``pip install fluidjax`` (no
system Graphviz), and a 5,000-op program must lay out in well under 2 s. grandalf (pure Python)
takes tens of seconds on graphs of that size; the classic heuristics below take a fraction of a
second and read well on dataflow graphs, which are mostly chains with short side branches:

1. layers by longest path from the sources; a source (a parameter, a data variable) moves down
   to just above its first consumer, so it sits beside the op that reads it;
2. an edge that spans several layers gets a dummy node per layer crossed (only up to
   ``MAX_SPAN`` layers: longer ones are drawn as a single curve, so a variable read by ops far
   apart cannot blow up the graph);
3. nodes are ordered inside each layer by the barycenter of their neighbours, sweeping down and up;
4. x coordinates: each node is pulled toward the mean x of its neighbours, subject to the order
   and the minimum gap (the average of a left-packed and a right-packed placement, both feasible).

See docs/notebooks.md for the reasoning.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

MAX_SPAN = 24          # edges spanning more layers are drawn without dummy nodes
NODE_GAP = 24.0        # horizontal gap between neighbouring nodes of a layer
LAYER_GAP = 38.0       # vertical gap between layers (room for an edge label)
DUMMY_WIDTH = 14.0
ORDER_SWEEPS = 4
PLACE_SWEEPS = 4


@dataclass
class Layout:
    """Where everything goes: node centers, edge polylines (lists of points) and the size."""

    x: list[float]
    y: list[float]
    points: list[list[tuple[float, float]]]
    width: float
    height: float
    layer: list[int] = field(default_factory=list)


def layout(sizes: list[tuple[float, float]], edges: list[tuple[int, int]],
           weights: list[float] | None = None) -> Layout:
    """Lay out nodes of the given ``(width, height)`` sizes joined by ``(src, dst)`` edges.

    The graph must be acyclic; nodes are numbered ``0..len(sizes)-1``. An edge of larger
    ``weight`` (default 1) pulls its ends into line harder (the main dataflow over parameters).
    """
    n = len(sizes)
    if n == 0:
        return Layout([], [], [], 0.0, 0.0)
    succ: list[list[int]] = [[] for _ in range(n)]
    pred: list[list[int]] = [[] for _ in range(n)]
    for s, d in edges:
        succ[s].append(d)
        pred[d].append(s)
    layer = _layers(n, succ, pred)

    # -- dummy nodes for edges that span several layers -------------------------------------------
    widths = [w for w, _ in sizes]
    heights = [h for _, h in sizes]
    layer_of = list(layer)
    chain: list[list[int]] = []          # per edge: the node ids it passes through
    adj_up: list[list[tuple[int, float]]] = [[] for _ in range(n)]
    adj_down: list[list[tuple[int, float]]] = [[] for _ in range(n)]
    for e, (s, d) in enumerate(edges):
        wt = weights[e] if weights is not None else 1.0
        span = layer_of[d] - layer_of[s]
        path = [s]
        if 1 < span <= MAX_SPAN:
            for k in range(1, span):
                v = len(layer_of)
                layer_of.append(layer_of[s] + k)
                widths.append(DUMMY_WIDTH)
                heights.append(0.0)
                adj_up.append([])
                adj_down.append([])
                path.append(v)
        path.append(d)
        if span <= MAX_SPAN:
            for a, b in zip(path, path[1:]):
                adj_down[a].append((b, wt))
                adj_up[b].append((a, wt))
        chain.append(path)

    total = len(layer_of)
    n_layers = max(layer_of) + 1
    rows: list[list[int]] = [[] for _ in range(n_layers)]
    for v in range(total):
        rows[layer_of[v]].append(v)
    pos = [0.0] * total
    for row in rows:
        for i, v in enumerate(row):
            pos[v] = i

    # Satellites (sources whose edges all pull weakly: parameters) yield to everything else;
    # dummies yield to real nodes; among real nodes the better connected win.
    priority = [1.0] * total
    satellite = [False] * total
    for v in range(n):
        if not adj_up[v] and adj_down[v] and all(w < 1.0 for _, w in adj_down[v]):
            satellite[v] = True
            priority[v] = 0.0
        else:
            priority[v] = 2.0 + sum(w for _, w in adj_up[v]) + sum(w for _, w in adj_down[v])

    # -- ordering: barycenter sweeps ------------------------------------------------------------
    for sweep in range(ORDER_SWEEPS):
        down = sweep % 2 == 0
        seq = range(1, n_layers) if down else range(n_layers - 2, -1, -1)
        for li in seq:
            row = rows[li]
            if len(row) < 2:
                continue
            keyed = []
            for v in row:
                nb = adj_up[v] if down else adj_down[v]
                bary = _mean(nb, pos) if nb else pos[v]
                keyed.append((bary + 0.25 if satellite[v] else bary, pos[v], v))
            keyed.sort()
            rows[li] = row = [v for _, _, v in keyed]
            for i, v in enumerate(row):
                pos[v] = i

    # -- y: layers stacked, each as tall as its tallest node ----------------------------------------
    layer_h = [max((heights[v] for v in row), default=0.0) for row in rows]
    layer_y = []
    y = LAYER_GAP / 2
    for h in layer_h:
        layer_y.append(y + h / 2)
        y += h + LAYER_GAP
    height = y - LAYER_GAP / 2

    # -- x: pulled toward neighbours, order and gaps kept ----------------------------------------
    xs = [0.0] * total
    for row in rows:
        x = 0.0
        for v in row:
            xs[v] = x + widths[v] / 2
            x += widths[v] + NODE_GAP
    for sweep in range(PLACE_SWEEPS):
        down = sweep % 2 == 0
        seq = range(n_layers) if down else range(n_layers - 1, -1, -1)
        for li in seq:
            row = rows[li]
            desired = []
            for v in row:
                nb = (adj_up[v] if down else adj_down[v]) or (adj_down[v] if down else adj_up[v])
                desired.append(_mean(nb, xs) if nb else xs[v])
            _pack(row, desired, [priority[v] for v in row], widths, xs)
    left = min(xs[v] - widths[v] / 2 for v in range(total))
    right = max(xs[v] + widths[v] / 2 for v in range(total))
    shift = NODE_GAP / 2 - left
    xs = [x + shift for x in xs]
    width = right - left + NODE_GAP

    ys = [layer_y[layer_of[v]] for v in range(total)]
    points = []
    for path in chain:
        s, d = path[0], path[-1]
        pts = [(xs[s], ys[s] + heights[s] / 2)]
        pts.extend((xs[v], ys[v]) for v in path[1:-1])
        # arrive spread over the top of the node, toward where the edge comes from
        px = pts[-1][0]
        half = widths[d] * 0.35
        pts.append((xs[d] + max(-half, min(half, (px - xs[d]) * 0.3)), ys[d] - heights[d] / 2))
        points.append(pts)
    return Layout(xs[:n], ys[:n], points, width, height, layer)


def _layers(n: int, succ: list[list[int]], pred: list[list[int]]) -> list[int]:
    """Longest-path layers; sources moved down to just above their first consumer."""
    indeg = [len(p) for p in pred]
    order = [v for v in range(n) if indeg[v] == 0]
    i = 0
    while i < len(order):
        for d in succ[order[i]]:
            indeg[d] -= 1
            if indeg[d] == 0:
                order.append(d)
        i += 1
    if len(order) != n:
        raise ValueError("layout: the graph has a cycle")
    layer = [0] * n
    for v in order:
        lv = layer[v] + 1
        for d in succ[v]:
            if layer[d] < lv:
                layer[d] = lv
    for v in reversed(order):
        if not pred[v] and succ[v]:
            layer[v] = min(layer[d] for d in succ[v]) - 1
    return layer


def _mean(neighbours: list[tuple[int, float]], at: list[float]) -> float:
    total = weight = 0.0
    for u, w in neighbours:
        total += at[u] * w
        weight += w
    return total / weight


def _pack(row: list[int], desired: list[float], priority: list[float], widths: list[float],
          xs: list[float]) -> None:
    """Place ``row`` (in its order, gaps kept) with each node as close to ``desired`` as the nodes
    placed before it allow, placing the nodes of higher ``priority`` first (the priority method):
    a chain of ops stays straight and its parameters move aside, not the other way round."""
    k = len(row)
    if k == 1:
        xs[row[0]] = desired[0]
        return
    offset = [0.0] * k        # offset[i] - offset[j]: the least distance between centers i > j
    for i in range(1, k):
        offset[i] = offset[i - 1] + (widths[row[i - 1]] + widths[row[i]]) / 2 + NODE_GAP
    placed: list[int] = []     # sorted positions in the row already placed
    at = [0.0] * k
    for i in sorted(range(k), key=lambda i: -priority[i]):
        j = bisect.bisect_left(placed, i)
        x = desired[i]
        if j > 0:
            left = placed[j - 1]
            x = max(x, at[left] + offset[i] - offset[left])
        if j < len(placed):
            right = placed[j]
            x = min(x, at[right] - (offset[right] - offset[i]))
        at[i] = x
        placed.insert(j, i)
    for i, v in enumerate(row):
        xs[v] = at[i]
