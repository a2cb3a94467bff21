"""A Keras-style summary of a program: one row per layer, its output shape, parameters and an
estimate of FLOPs per example; totals of parameters, trainable parameters, bytes and FLOPs.

A layer is what a LayerHelper named (``fc_0``, ``conv2d_3``): the ops whose outputs carry that
prefix. FLOPs count a multiply-add as two: ``mul``/``matmul`` 2·M·K·N, ``conv2d``
2·(C_in/groups)·k_h·k_w·C_out·H_out·W_out, pooling the window size per output, everything else one
per output element. "Per example" divides out the batch dimension (the leading ``-1``); a dim
left unknown elsewhere makes a row's FLOPs unknown (``?``), and the total says so.

>>> s = summarize(program)      # doctest: +SKIP
>>> print(s)                    # doctest: +SKIP

With a feed, ``program.summary(feed={...})`` also prints XLA's memory analysis of the step that
feed compiles (temporaries, arguments, outputs, peak: ``fj.compiled_memory``). This module does
not import the lowering: the lowering installs that function as :data:`memory_figures`, and a
caller may pass the figures themselves (``memory=``).
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from . import dtypes
from .names import EMPTY_VAR_NAME
from .graph import _AUX_SLOTS, hidden_part, layer_name, shape_text

if TYPE_CHECKING:
    from .program import Block, Operator, Program

# fn(program, feed, scope=, fetch_list=) -> {"temp_bytes": ..., ...}: ``fj.compiled_memory``, set by
# fluidjax.lowering when it is imported (the IR itself never compiles anything).
memory_figures = None

_MATMULS = frozenset({"mul", "matmul", "matmul_v2"})
_CONVS = frozenset({"conv2d", "depthwise_conv2d", "conv3d"})
_CONV_TRANSPOSES = frozenset({"conv2d_transpose", "conv3d_transpose", "depthwise_conv2d_transpose"})
_FREE = frozenset({"reshape", "reshape2", "transpose", "transpose2", "squeeze", "squeeze2", "unsqueeze",
                   "unsqueeze2", "flatten", "flatten2", "flatten_contiguous_range", "assign", "feed", "fetch",
                   "shape", "fill_constant", "cast", "concat", "split", "slice", "lookup_table",
                   "lookup_table_v2", "gather", "dropout", "share_data", "scale"})


@dataclass
class Row:
    """One layer: its name, op types, output shape, parameter count and FLOPs per example."""

    name: str
    kind: str
    ops: list[str]
    output_shape: tuple[int, ...] | None
    params: int = 0
    trainable: int = 0
    param_bytes: int = 0
    flops: int | None = 0        # None: unknown (a dim other than the batch one is -1)


@dataclass
class Summary:
    """The summary of a program: ``rows`` and totals. ``str()`` is the text table; notebooks
    show the HTML one."""

    rows: list[Row] = field(default_factory=list)
    hidden_ops: int = 0
    memory: dict | None = None     # XLA's figures of a compiled step (see fj.compiled_memory)

    @property
    def total_params(self) -> int:
        return sum(r.params for r in self.rows)

    @property
    def trainable_params(self) -> int:
        return sum(r.trainable for r in self.rows)

    @property
    def param_bytes(self) -> int:
        return sum(r.param_bytes for r in self.rows)

    @property
    def total_flops(self) -> int:
        """FLOPs per example of the rows whose FLOPs are known."""
        return sum(r.flops for r in self.rows if r.flops is not None)

    @property
    def flops_known(self) -> bool:
        return all(r.flops is not None for r in self.rows)

    def _cells(self) -> list[tuple[str, str, str, str]]:
        return [(f"{r.name} ({r.kind})", shape_text(r.output_shape) if r.output_shape is not None else "-",
                 f"{r.params:,}", "?" if r.flops is None else _human(r.flops)) for r in self.rows]

    def _totals(self) -> list[str]:
        flops = _human(self.total_flops) + ("" if self.flops_known else " + unknown")
        lines = [f"Total params: {self.total_params:,} ({_bytes(self.param_bytes)})",
                 f"Trainable params: {self.trainable_params:,}",
                 f"Non-trainable params: {self.total_params - self.trainable_params:,}",
                 f"FLOPs per example (forward): {flops}"]
        if self.hidden_ops:
            lines.append(f"({self.hidden_ops} backward/optimizer ops not counted)")
        if self.memory:
            m = self.memory
            parts = [f"{label} {_bytes(int(m[key]))}" for key, label in
                     (("temp_bytes", "temporaries"), ("argument_bytes", "arguments"), ("output_bytes", "outputs"),
                      ("peak_bytes", "peak")) if key in m]
            lines.append("Compiled step (XLA, for the fed shapes): " + ", ".join(parts))
        return lines

    def __str__(self) -> str:
        head = ("Layer (type)", "Output shape", "Params", "FLOPs")
        cells = self._cells()
        widths = [max(len(head[i]), *(len(c[i]) for c in cells)) if cells else len(head[i]) for i in range(4)]
        def line(c):
            return "  ".join(c[i].ljust(widths[i]) if i < 2 else c[i].rjust(widths[i]) for i in range(4))
        rule = "=" * len(line(head))
        out = [rule, line(head), rule.replace("=", "-")]
        out += [line(c) for c in cells]
        out += [rule, *self._totals(), rule]
        return "\n".join(out)

    def _repr_html_(self) -> str:
        esc = html.escape
        rows = "".join(f"<tr><td>{esc(a)}</td><td>{esc(b)}</td><td style='text-align:right'>{esc(c)}</td>"
                       f"<td style='text-align:right'>{esc(d)}</td></tr>" for a, b, c, d in self._cells())
        totals = "<br>".join(esc(t) for t in self._totals())
        return ("<table class='fj-summary'><tr><th>Layer (type)</th><th>Output shape</th><th>Params</th>"
                f"<th>FLOPs</th></tr>{rows}</table><p>{totals}</p>")

    def __repr__(self) -> str:
        return str(self)


def summarize(program: "Program", block: int = 0, memory: dict | None = None) -> Summary:
    """The :class:`Summary` of ``program``'s forward ops (backward and optimizer ops left out);
    ``memory`` (``fj.compiled_memory``'s dict) adds the compiled step's figures to the totals."""
    blk = program.block(block)
    summary = Summary(memory=dict(memory) if memory else None)
    rows: dict[str, Row] = {}
    counted: set[str] = set()
    for index, op in enumerate(blk.ops):
        if hidden_part(op, False, False) is not None:
            summary.hidden_ops += 1
            continue
        name = layer_name(op) or f"{op.type}#{index}"
        row = rows.get(name)
        if row is None:
            row = rows[name] = Row(name, name.rsplit("_", 1)[0] if layer_name(op) else op.type, [], None)
            summary.rows.append(row)
        row.ops.append(op.type)
        out = _main_output(blk, op)
        if out is not None:
            row.output_shape = out
        for var_name in op.input_arg_names:
            var = blk.find_var(var_name)
            if var is None or not getattr(var, "is_parameter", False) or var_name in counted:
                continue
            counted.add(var_name)
            n = _numel(var.shape)
            row.params += n
            row.param_bytes += n * dtypes.to_numpy(var.dtype).itemsize
            if getattr(var, "trainable", True):
                row.trainable += n
        flops = op_flops(blk, op)
        row.flops = None if flops is None or row.flops is None else row.flops + flops
    return summary


def print_summary(program: "Program", print_fn=None, memory: dict | None = None) -> None:
    """Show the summary: as an HTML table inside a Jupyter kernel, else printed as text
    (``print_fn`` — ``print`` by default — gets the text in any case when given)."""
    summary = summarize(program, memory=memory)
    if print_fn is None and _in_jupyter():
        from IPython.display import display

        display(summary)
        return
    (print_fn or print)(str(summary))


def _in_jupyter() -> bool:
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and type(shell).__name__ == "ZMQInteractiveShell"


def _main_output(block: "Block", op: "Operator") -> tuple[int, ...] | None:
    for slot, names in op.outputs.items():
        if slot in _AUX_SLOTS:
            continue
        for name in names:
            if name != EMPTY_VAR_NAME:
                var = block.find_var(name)
                if var is not None and var.type == dtypes.LOD_TENSOR:
                    return tuple(var.shape)
    return None


def _shape(block: "Block", op: Operator, slot: str, outputs: bool = False) -> tuple[int, ...] | None:
    names = (op.outputs if outputs else op.inputs).get(slot) or []
    var = block.find_var(names[0]) if names else None
    return tuple(var.shape) if var is not None and var.shape is not None else None


def _per_example(shape: tuple[int, ...] | None) -> int | None:
    """Elements per example: the leading (batch) dim divided out; None when another dim is unknown."""
    if shape is None:
        return None
    dims = shape[1:] if shape and shape[0] == -1 else shape
    if any(d < 0 for d in dims):
        return None
    return _numel(dims)


def op_flops(block: "Block", op: Operator) -> int | None:
    """Estimated FLOPs per example of one op (a multiply-add counts two); None when unknown."""
    t = op.type
    if t in _FREE:
        return 0
    if t in _MATMULS:
        x, y = _shape(block, op, "X"), _shape(block, op, "Y")
        out = _per_example(_shape(block, op, "Out", outputs=True))
        if x is None or y is None or out is None:
            return None
        if t == "mul":
            k = _numel(x[int(op.attrs.get("x_num_col_dims", 1)):])
        else:
            trans = op.attrs.get("transpose_X", op.attrs.get("trans_x", False))
            k = x[-2] if trans and len(x) > 1 else x[-1]
        return None if k < 0 else 2 * k * out
    if t in _CONVS or t in _CONV_TRANSPOSES:
        w = _shape(block, op, "Filter")
        if w is None:
            return None
        if t in _CONVS:          # 2 · C_in/groups · k_h · k_w per output element
            out = _per_example(_shape(block, op, "Output", outputs=True))
            return None if out is None else 2 * _numel(w[1:]) * out
        spatial = _per_example(_shape(block, op, "Input"))   # transpose: each input element scatters a kernel
        cin = w[0]
        return None if spatial is None else 2 * _numel(w) * spatial // max(cin, 1)
    out = None
    for slot, names in op.outputs.items():
        if slot not in _AUX_SLOTS and names:
            out = _per_example(_shape(block, op, slot, outputs=True))
            break
    if out is None:
        return None
    if t in ("pool2d", "pool3d"):
        if op.attrs.get("global_pooling"):
            x = _per_example(_shape(block, op, "X"))
            return x
        return out * _numel(op.attrs.get("ksize", [1]))
    return out


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= max(int(d), 1)
    return n


def _human(n: int) -> str:
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= size:
            return f"{n / size:.2f}{unit}"
    return str(n)


def _bytes(n: int) -> str:
    for unit, size in (("GB", 1 << 30), ("MB", 1 << 20), ("kB", 1 << 10)):
        if n >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n} B"
