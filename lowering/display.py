"""How run-time values show: a ``LoDTensor`` (shape, dtype, LoD, device, a short preview of its
values) and a ``Scope`` (its variables with their kinds and sizes), as text and as notebook HTML.

Duck-typed on purpose (this package depends on the IR only): a tensor is anything with
``value()``, ``shape()`` and ``lod()``; a scope anything with ``local_var_names()`` and
``find_local_var()``.
"""

from __future__ import annotations

import html

import numpy as np

PREVIEW_ROWS = 4          # rows of a big tensor brought to the host for its preview
PREVIEW_ELEMENTS = 1000   # a tensor up to this size is previewed whole
SCOPE_ROWS = 200          # variables listed by a scope's HTML (the rest are counted)


def device_of(value) -> str:
    """``cpu:0``, ``cuda:0`` ... for a ``jax.Array``; ``host`` for a NumPy array."""
    devices = getattr(value, "devices", None)
    if callable(devices):
        try:
            return ", ".join(sorted(f"{d.platform}:{d.id}" for d in devices()))
        except Exception:  # a deleted (donated) buffer, or a tracer
            return "?"
    return "host"


def preview(value) -> tuple[str, str]:
    """``(text, note)``: the values (numpy's print, summarized) and what part of them it shows."""
    shape = tuple(np.shape(value))
    size = int(np.prod(shape)) if shape else 1
    note = ""
    if size > PREVIEW_ELEMENTS and shape:
        value = value[:PREVIEW_ROWS]     # only these rows leave the device
        note = f"first {min(PREVIEW_ROWS, shape[0])} of {shape[0]} rows"
    try:
        arr = np.asarray(value)
    except Exception as exc:  # a deleted buffer
        return f"<unreadable: {type(exc).__name__}>", ""
    text = np.array2string(arr, threshold=60, edgeitems=3, precision=4, max_line_width=100)
    return text, note


def tensor_text(t) -> str:
    """The multi-line text of a LoDTensor: its header line, then a preview of the values."""
    value = t.value()
    lod = t.lod()
    head = _tensor_header(t, value, lod)
    if value is None:
        return head
    text, note = preview(value)
    return head + "\n" + text + (f"\n({note})" if note else "")


def _tensor_header(t, value, lod) -> str:
    lod_text = f", lod={lod}" if lod else ""
    if value is None:
        dims = t.shape()
        return f"LoDTensor(dims={list(dims)}, no memory{lod_text})" if dims else f"LoDTensor(<empty>{lod_text})"
    return f"LoDTensor(shape={t.shape()}, dtype={np.dtype(value.dtype).name}{lod_text}, device={device_of(value)})"


def tensor_html(t) -> str:
    """A LoDTensor as a small table and a preview."""
    esc = html.escape
    value = t.value()
    lod = t.lod()
    rows = [("shape", str(t.shape()) if value is not None or t.shape() else "(empty)"),
            ("dtype", np.dtype(value.dtype).name if value is not None else "-"),
            ("device", device_of(value) if value is not None else "-")]
    if lod:
        lengths = [[b - a for a, b in zip(level, level[1:])] for level in lod]
        rows.append(("LoD", f"offsets {lod}; lengths {lengths}"))
    cells = "".join(f"<tr><th style='text-align:left'>{k}</th><td style='text-align:left'>{esc(v)}</td></tr>"
                    for k, v in rows)
    body = ""
    if value is not None:
        text, note = preview(value)
        body = f"<pre>{esc(text)}</pre>" + (f"<small>{esc(note)}</small>" if note else "")
    return f"<div class='fj-tensor'><b>LoDTensor</b><table>{cells}</table>{body}</div>"


def _describe_held(holder) -> tuple[str, str, str, str]:
    """(kind, shape, dtype, size) of a scope variable."""
    kind = holder.kind
    if kind is None:
        return "empty", "", "", ""
    value = holder._value
    if hasattr(value, "lod") and hasattr(value, "value"):     # a LoDTensor
        arr = value.value()
        if arr is None:
            return "LoDTensor (no data)", str(value.shape()) if value.shape() else "", "", ""
        nbytes = int(np.prod(np.shape(arr), dtype=np.int64)) * np.dtype(arr.dtype).itemsize
        lod = f" LoD{len(value.lod())}" if value.lod() else ""
        return f"LoDTensor{lod}", str(tuple(np.shape(arr))), np.dtype(arr.dtype).name, _bytes(nbytes)
    if hasattr(value, "local_var_names"):
        return "Scope", "", "", f"{len(value.local_var_names())} vars"
    return kind.__name__, "", "", ""


def scope_rows(scope) -> list[tuple[str, str, str, str, str]]:
    """(name, kind, shape, dtype, size) of each variable the scope itself holds, sorted by name."""
    return [(name, *_describe_held(scope.find_local_var(name))) for name in sorted(scope.local_var_names())]


def scope_text(scope) -> str:
    """A scope as text: one line per variable."""
    rows = scope_rows(scope)
    kids = len(getattr(scope, "_kids", []))
    head = f"<Scope {len(rows)} vars" + (f", {kids} child scopes" if kids else "") + ">"
    if not rows:
        return head
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    lines = ["  " + "  ".join(r[i].ljust(widths[i]) for i in range(5)).rstrip() for r in rows[:SCOPE_ROWS]]
    if len(rows) > SCOPE_ROWS:
        lines.append(f"  ... and {len(rows) - SCOPE_ROWS} more")
    return head + "\n" + "\n".join(lines)


def scope_html(scope) -> str:
    """A scope as a table of its variables with kinds and sizes."""
    esc = html.escape
    rows = scope_rows(scope)
    body = "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in r) + "</tr>" for r in rows[:SCOPE_ROWS])
    more = f"<p>... and {len(rows) - SCOPE_ROWS} more</p>" if len(rows) > SCOPE_ROWS else ""
    total = sum(_size_of(scope.find_local_var(n)) for n in scope.local_var_names())
    return (f"<div class='fj-scope'><b>Scope</b>: {len(rows)} variables, {esc(_bytes(total))}"
            "<table><tr><th>name</th><th>kind</th><th>shape</th><th>dtype</th><th>size</th></tr>"
            f"{body}</table>{more}</div>")


def _size_of(holder) -> int:
    value = getattr(holder, "_value", None)
    if hasattr(value, "lod") and hasattr(value, "value") and value.value() is not None:
        arr = value.value()
        return int(np.prod(np.shape(arr), dtype=np.int64)) * np.dtype(arr.dtype).itemsize
    return 0


def _bytes(n: int) -> str:
    for unit, size in (("GB", 1 << 30), ("MB", 1 << 20), ("kB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"
