"""Execute the notebooks in ``notebooks/`` and write them back with their outputs, so a reader on a
code host sees what each cell shows; and compare a fresh run with the committed outputs.

    python tests/refresh_notebooks.py                  # re-execute and write every notebook
    python tests/refresh_notebooks.py digits sequences # only these
    python tests/refresh_notebooks.py --check          # execute, compare with the committed ones, write nothing

What is written is *normalized* so that two runs give the same file and the file stays small:

- no volatile metadata: no execution timestamps, no kernel/Python version, no widget state;
- a progress-bar widget (``tqdm.auto`` in Jupyter) becomes its final text (a widget without its
  state renders as nothing on a code host), with the elapsed time and rate cut out;
- consecutive prints to one stream are one output (the kernel cuts them into messages as timing
  has it);
- PNG plots are re-encoded as palette PNGs (a few tens of kB each; their ``Title`` text kept);
  SVG graphs stay text;
- the notebooks run in a temporary folder, so the files they write do not land in the repository.

:func:`compare` is what ``tests/test_notebooks.py`` checks a fresh run against the committed
outputs with: cell by cell the same sources and the same kinds of output; numbers in the text
within a relative tolerance; the same number of nodes in each SVG drawing.
"""

from __future__ import annotations

import base64
import copy
import html
import io
import math
import pathlib
import re
import sys
import tempfile
import xml.etree.ElementTree as ET

import nbformat

NOTEBOOK_DIR = pathlib.Path(__file__).resolve().parent.parent / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
REL_TOL = 0.05          # numbers in a fresh run's text vs the committed ones (training on another CPU)
ABS_TOL = 2e-3


def execute(path: pathlib.Path, workdir: str | pathlib.Path, timeout: int = 600):
    """Run the notebook at ``path`` top to bottom in ``workdir``; returns the executed notebook
    node, outputs as nbclient recorded them (widget state included)."""
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=timeout, kernel_name="python3", record_timing=False,
                   resources={"metadata": {"path": str(workdir)}}).execute()
    return nb


# -- normalization ----------------------------------------------------------------------------------

_TQDM_TIMES = re.compile(r"\[(?:\d+:)?\d+:\d+(?:<(?:(?:\d+:)?\d+:\d+|\?))?(?:, *(?:[0-9.]+|\?) *(?:it/s|s/it))?,? *")


def _strip_timing(text: str) -> str:
    """A tqdm meter without its clock: ``[00:02<00:00, 18.1it/s, loss=0.1]`` -> ``[loss=0.1]``."""
    return _TQDM_TIMES.sub("[", text).replace("[]", "")


def _widget_text(model_id: str, state: dict) -> str | None:
    """The final text of a tqdm progress-bar widget (an HBox of a label, a progress bar and a
    meter) from the widget state nbclient recorded; None for any other widget."""
    def model(ref):
        return state.get(ref.removeprefix("IPY_MODEL_"), {}).get("state", {})

    children = [model(c) for c in model(model_id).get("children", [])]
    if len(children) != 3 or "max" not in children[1]:
        return None
    left, right = (html.unescape(str(c.get("value", ""))).replace("\u2007", " ") for c in (children[0], children[2]))
    bar = children[1]
    if "%" in left:           # a known total: draw the bar as tqdm does in a terminal
        frac = bar.get("value", 0) / bar["max"] if bar.get("max") else 0.0
        left += "|" + ("█" * round(10 * frac)).ljust(10) + "|"
    return _strip_timing(left + right).strip()


def _small_png(data: str) -> str:
    """A base64 PNG re-encoded with a palette of at most 256 colours (plots have few)."""
    from PIL import Image

    from PIL.PngImagePlugin import PngInfo

    raw = base64.b64decode(data)
    image = Image.open(io.BytesIO(raw))
    info = PngInfo()
    for key, value in getattr(image, "text", {}).items():     # a Title says what is plotted: kept
        if key != "Software":                                    # the matplotlib version: dropped
            info.add_text(key, value)
    out = io.BytesIO()
    image.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT).save(
        out, format="PNG", optimize=True, pnginfo=info)
    small = out.getvalue()
    return base64.b64encode(small if len(small) < len(raw) else raw).decode() + "\n"


def normalize(nb, workdir: str | pathlib.Path | None = None):
    """A copy of an executed notebook as it is committed (see the module's docstring); paths
    inside ``workdir`` (where it ran) are written relative to it."""
    nb = copy.deepcopy(nb)
    prefixes = sorted({str(workdir).rstrip("/") + "/", str(pathlib.Path(workdir).resolve()) + "/"},
                      key=len, reverse=True) if workdir is not None else []

    def local(text: str) -> str:
        for prefix in prefixes:
            text = text.replace(prefix, "")
        return text

    state = nb.metadata.get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    nb.metadata.pop("widgets", None)
    nb.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python", "name": "python3"}
    nb.metadata["language_info"] = {"name": "python"}
    for cell in nb.cells:
        cell.metadata.pop("execution", None)
        if cell.cell_type != "code":
            continue
        outputs = []
        for out in cell.outputs:
            data = out.get("data", {})
            if WIDGET_VIEW in data:
                text = _widget_text(data[WIDGET_VIEW]["model_id"], state)
                if text is None:
                    data.pop(WIDGET_VIEW)
                else:
                    out.data = {"text/plain": text}
                out.metadata = {}
                if not out.data:
                    continue
            if out.output_type == "stream":
                out.text = local(out.text)
                if out.name == "stderr":
                    out.text = _strip_timing(_last_frames(out.text))
                    if not out.text.strip():
                        continue
            for mime in [m for m in data if m.startswith("text/")]:
                data[mime] = local(data[mime])
            if "image/png" in data:
                data["image/png"] = _small_png(data["image/png"])
            if (out.output_type == "stream" and outputs and outputs[-1].output_type == "stream"
                    and outputs[-1].name == out.name):
                outputs[-1].text += out.text      # how the kernel cut a cell's prints into messages varies
                continue
            outputs.append(out)
        cell.outputs = outputs
    return nb


def _last_frames(text: str) -> str:
    """Text as a terminal shows it: of the lines rewritten with ``\\r``, only the last state."""
    return "\n".join(line.rsplit("\r", 1)[-1] if "\r" in line.rstrip("\r") else line.rstrip("\r")
                     for line in text.split("\n"))


# -- comparison -------------------------------------------------------------------------------------

_NUMBER = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?")
_ADDRESS = re.compile(r"0x[0-9a-fA-F]{6,}")


def _tokens(text: str) -> tuple[list[str], list[float]]:
    """The words between the numbers (memory addresses masked) and the numbers themselves."""
    text = _ADDRESS.sub("0x?", _strip_timing(text))
    numbers = [float(n) for n in _NUMBER.findall(text)]
    words = [w.strip() for w in _NUMBER.split(text)]
    return words, numbers


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=REL_TOL, abs_tol=ABS_TOL) or (math.isnan(a) and math.isnan(b))


def _compare_text(where: str, old: str, new: str) -> list[str]:
    old_words, old_nums = _tokens(old)
    new_words, new_nums = _tokens(new)
    if old_words != new_words:
        for a, b in zip(old_words, new_words):
            if a != b:
                return [f"{where}: text differs: {a[:80]!r} committed, {b[:80]!r} now"]
        return [f"{where}: text differs ({len(old_words)} vs {len(new_words)} pieces)"]
    bad = [(a, b) for a, b in zip(old_nums, new_nums) if not _close(a, b)]
    if bad:
        return [f"{where}: {len(bad)} number(s) differ beyond rel {REL_TOL}: e.g. {bad[0][0]} committed, "
                f"{bad[0][1]} now"]
    return []


_SVG = re.compile(r"<svg\b.*?</svg>", re.S)


def svg_nodes(svg_text: str) -> dict[str, int]:
    """What a drawing holds: graph nodes by kind (``data-kind`` groups of ``fj.draw``) and, for
    other drawings, elements by tag."""
    root = ET.fromstring(svg_text)
    counts: dict[str, int] = {}
    for el in root.iter():
        kind = el.get("data-kind")
        key = f"kind={kind}" if kind else el.tag.rsplit("}", 1)[-1]
        counts[key] = counts.get(key, 0) + 1
    return counts


def _compare_html(where: str, old: str, new: str) -> list[str]:
    old_svgs, new_svgs = _SVG.findall(old), _SVG.findall(new)
    if len(old_svgs) != len(new_svgs):
        return [f"{where}: {len(old_svgs)} SVG drawing(s) committed, {len(new_svgs)} now"]
    problems = []
    for k, (a, b) in enumerate(zip(old_svgs, new_svgs)):
        if svg_nodes(a) != svg_nodes(b):
            problems.append(f"{where}: SVG {k} has other nodes: {svg_nodes(a)} committed, {svg_nodes(b)} now")
    text = lambda h: re.sub(r"<[^>]+>", " ", _SVG.sub(" ", h))   # noqa: E731
    return problems + _compare_text(where, text(old), text(new))


def _kinds(out) -> tuple:
    if out.output_type == "stream":
        return ("stream", out.name)
    if out.output_type == "error":
        return ("error", out.ename)
    return (out.output_type, tuple(sorted(out.get("data", {}))))


def compare(committed, fresh) -> list[str]:
    """What differs between a committed notebook and a fresh normalized run of it (empty when
    they agree): cells and their sources, the kinds of every output, numbers in text outputs
    within ``REL_TOL``, node counts of SVG drawings."""
    if [c.cell_type for c in committed.cells] != [c.cell_type for c in fresh.cells]:
        return ["the cells differ: refresh the notebook (python tests/refresh_notebooks.py)"]
    problems = []
    for i, (old, new) in enumerate(zip(committed.cells, fresh.cells)):
        if old.source != new.source:
            problems.append(f"cell {i}: source differs")
        if old.cell_type != "code":
            continue
        if [_kinds(o) for o in old.outputs] != [_kinds(o) for o in new.outputs]:
            problems.append(f"cell {i}: outputs {[_kinds(o) for o in old.outputs]} committed, "
                            f"{[_kinds(o) for o in new.outputs]} now")
            continue
        for j, (a, b) in enumerate(zip(old.outputs, new.outputs)):
            where = f"cell {i} output {j}"
            if a.output_type == "stream":
                problems += _compare_text(where, a.text, b.text)
                continue
            for mime, value in a.get("data", {}).items():
                other = b.data[mime]
                if mime == "text/html":
                    problems += _compare_html(where, value, other)
                elif mime == "image/svg+xml":
                    if svg_nodes(value) != svg_nodes(other):
                        problems.append(f"{where}: SVG has other nodes: {svg_nodes(value)} committed, "
                                        f"{svg_nodes(other)} now")
                elif mime.startswith("text/"):
                    problems += _compare_text(f"{where} {mime}", value, other)
    return problems


def main(argv: list[str] | None = None) -> int:
    """Execute the named notebooks (default: all), write them normalized, or ``--check`` them."""
    args = list(sys.argv[1:] if argv is None else argv)
    check = "--check" in args
    names = [a for a in args if not a.startswith("--")]
    paths = [p for p in NOTEBOOKS if not names or p.stem in names or p.name in names]
    failed = 0
    for path in paths:
        with tempfile.TemporaryDirectory() as folder:
            fresh = normalize(execute(path, folder), folder)
        errors = [o for c in fresh.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
        if errors:
            print(f"{path.name}: {errors[0].ename}: {errors[0].evalue}")
            failed += 1
            continue
        if check:
            problems = compare(nbformat.read(path, as_version=4), fresh)
            print(f"{path.name}: " + ("matches" if not problems else "\n  ".join(["STALE"] + problems)))
            failed += bool(problems)
        else:
            nbformat.write(fresh, path)
            print(f"{path.name}: written, {path.stat().st_size / 1024:.0f} kB")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
