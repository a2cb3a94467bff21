"""Every notebook in notebooks/ runs top to bottom without an error and exports to HTML; the
quickstart and digits notebooks show what they promise (the program's graph as SVG with every op,
its summary, the curves). Also: how values, fj.train and errors behave in a notebook."""

import base64
import pathlib
import re
import xml.etree.ElementTree as ET

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = sorted((pathlib.Path(__file__).parent.parent / "notebooks").glob("*.ipynb"))
SVG_NS = "{http://www.w3.org/2000/svg}"


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    """``executed(name) -> (notebook, html)``: each notebook run once (nbclient, through
    ``tests/refresh_notebooks.py``), normalized as it is committed, and exported (nbconvert),
    shared by the tests of this module."""
    from nbconvert import HTMLExporter

    import refresh_notebooks

    done = {}

    def run(name):
        if name not in done:
            folder = tmp_path_factory.mktemp(name.replace(".", "_"))
            path = NOTEBOOKS[[p.name for p in NOTEBOOKS].index(name)]
            nb = refresh_notebooks.normalize(refresh_notebooks.execute(path, folder), folder)
            html, _ = HTMLExporter().from_notebook_node(nb)
            done[name] = nb, html
        return done[name]

    return run


def _outputs(nb):
    return [o for cell in nb.cells if cell.cell_type == "code" for o in cell.get("outputs", [])]


def _graphs(html):
    """The fj.draw SVGs in an exported page, parsed (nbconvert re-serializes inline SVG as HTML:
    attributes sorted and lower-cased, every element closed, which still parses as XML)."""
    inline = re.findall(r'<svg [^>]*class="fj-graph"[^>]*>.*?</svg>', html, flags=re.S)
    # an image/svg+xml output (fj.draw's) becomes an <img> with a data URI
    images = [base64.b64decode(b).decode() for b in re.findall(r'src="data:image/svg\+xml;base64,([^"]+)"', html)]
    return [ET.fromstring(text) for text in inline + images if 'class="fj-graph"' in text]


def _drawn_ops(svg):
    return sorted((int(g.get("data-index")), g.get("data-op")) for g in svg.iter(SVG_NS + "g")
                  if g.get("data-kind") == "op")


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs_and_exports_to_html(path, executed):
    nb, html = executed(path.name)
    outputs = _outputs(nb)
    assert not [o for o in outputs if o.get("output_type") == "error"]
    # every plot of the notebook is in the page
    pngs = [o["data"]["image/png"] for o in outputs if "image/png" in o.get("data", {})]
    for png in pngs:
        assert base64.b64decode(png)[:8] == b"\x89PNG\r\n\x1a\n"
        assert png.strip()[:200] in html.replace("\n", "")


def _seed_program():
    """The program the quickstart builds (the design guide's example)."""
    import fluidjax as fj
    from fluidjax import layer

    main, startup = fj.Program(), fj.Program()
    with fj.unique_name.guard(), fj.program_guard(main, startup):
        x = layer.data("images", input_size=64 * 64)
        y = layer.fc(x, output_size=100, activation="softmax")
        lab = layer.data("label", dims=10)
        layer.mean(layer.cross_entropy(y, lab))
    return main


@pytest.mark.slow
def test_quickstart_shows_the_graph_the_summary_and_the_loss_curve(executed):
    nb, html = executed("quickstart.ipynb")
    outputs = _outputs(nb)
    tables = [o["data"]["text/html"] for o in outputs if "text/html" in o.get("data", {})]
    assert any("fc_0.w_0" in t for t in tables), "the program's HTML table is shown"
    assert any("image/png" in o.get("data", {}) for o in outputs), "the loss curve is plotted"
    assert any("<table class='fj-summary'>" in t for t in tables), "the summary is shown"
    graphs = _graphs(html)
    # the program's own view (graph beside the tables) and fj.draw's output
    assert len(graphs) >= 2
    seed_ops = [(i, op.type) for i, op in enumerate(_seed_program().global_block().ops)]
    assert all(_drawn_ops(g) == seed_ops for g in graphs)
    params = {g.get("data-var") for g in graphs[-1].iter(SVG_NS + "g") if g.get("data-kind") == "param"}
    assert params == {"fc_0.w_0", "fc_0.b_0"}


@pytest.mark.slow
def test_digits_trains_lenet_to_95_percent_and_shows_it(executed):
    nb, html = executed("digits.ipynb")
    outputs = _outputs(nb)
    text = "".join(o.get("text", "") for o in outputs if o.get("output_type") == "stream")
    accuracy = float(re.search(r"test accuracy ([0-9.]+)", text).group(1))
    assert accuracy >= 0.95
    graphs = _graphs(html)
    ops = [op for g in graphs for _, op in _drawn_ops(g)]
    assert {"conv2d", "pool2d", "relu", "mul", "softmax_with_cross_entropy"} <= set(ops)
    groups = {g.get("data-label") for svg in graphs for g in svg.iter(SVG_NS + "g") if g.get("data-kind") == "group"}
    assert {"conv2d_0", "conv2d_1", "fc_0", "fc_1"} <= groups, "the collapsed graph folds each layer"
    # samples, the training curves (live plot and history.plot()), the confusion matrix
    assert sum("image/png" in o.get("data", {}) for o in outputs) >= 4
    assert re.search(r"<table class=[\"']fj-summary", html)


def test_there_is_a_quickstart_notebook():
    assert any(p.name == "quickstart.ipynb" for p in NOTEBOOKS)


# -- how values show in a notebook -----------------------------------------------------------------

def test_lod_tensor_shows_shape_dtype_lod_device_and_values():
    import numpy as np
    import xml.etree.ElementTree as ET

    import fluidjax as fj

    data = np.arange(15, dtype="float32").reshape(5, 3)
    t = fj.LoDTensor(data, [[0, 2, 5]])
    text = repr(t)
    first, *rest = text.splitlines()
    assert first == "LoDTensor(shape=(5, 3), dtype=float32, lod=[[0, 2, 5]], device=host)"
    assert "\n".join(rest) == np.array2string(data, precision=4)
    html = t._repr_html_()
    ET.fromstring(html)     # well-formed
    assert "lengths [[2, 3]]" in html and "float32" in html and "14." in html
    big = fj.LoDTensor(np.zeros((5000, 3), "float32"))
    assert "(first 4 of 5000 rows)" in repr(big) and len(repr(big).splitlines()) == 6
    assert repr(fj.LoDTensor()) == "LoDTensor(<empty>)"


def test_scope_lists_its_variables_with_kinds_and_sizes():
    import xml.etree.ElementTree as ET

    import numpy as np

    import fluidjax as fj
    from fluidjax import layer

    main, startup = fj.Program(), fj.Program()
    with fj.unique_name.guard(), fj.program_guard(main, startup):
        layer.fc(layer.data("x", input_size=4), output_size=3)
    scope = fj.Scope()
    fj.Executor(fj.CPUPlace()).run(startup, scope=scope)
    scope.var("note").set("hello")
    lines = repr(scope).splitlines()
    assert lines[0] == "<Scope 3 vars>"
    w = next(line.split() for line in lines if "fc_0.w_0" in line)
    assert w == ["fc_0.w_0", "LoDTensor", "(4,", "3)", "float32", "48", "B"]
    assert any(line.split()[:2] == ["note", "str"] for line in lines[1:])
    html = scope._repr_html_()
    table = ET.fromstring(html[html.index("<table>"):html.index("</table>") + len("</table>")])
    names = [tr.find("td").text for tr in table.findall("tr")[1:]]
    assert names == ["fc_0.b_0", "fc_0.w_0", "note"]
    assert f"{(4 * 3 + 3) * 4} B" in html
    assert np.asarray(scope.find_var("fc_0.w_0").get_tensor()).shape == (4, 3)
    assert "device=cpu:0" in repr(scope.find_var("fc_0.w_0").get_tensor())


# -- fj.train ------------------------------------------------------------------------------------------

def _tiny_classifier():
    import numpy as np

    import fluidjax as fj
    from fluidjax import layer

    main, startup = fj.Program(), fj.Program()
    startup.random_seed = 3
    with fj.unique_name.guard(), fj.program_guard(main, startup):
        x = layer.data("x", input_size=4)
        label = layer.data("y", dims=1, dtype="int64")
        logits = layer.fc(x, 3)
        loss = layer.mean(layer.softmax_with_cross_entropy(logits, label))
        test = main.clone(for_test=True)
        fj.optimizer.SGD(0.5).minimize(loss)
    rng = np.random.default_rng(0)
    xs = rng.normal(size=(120, 4)).astype("float32")
    ys = ((xs[:, 0] > 0).astype("int64") + (xs[:, 1] > 1)).reshape(-1, 1)

    def reader():
        for i in range(0, 120, 40):
            yield [(xs[j], ys[j]) for j in range(i, i + 40)]

    return main, startup, test, loss, reader


def test_train_records_every_step_and_evaluates_at_epoch_ends():
    import numpy as np

    import fluidjax as fj

    main, startup, test, loss, reader = _tiny_classifier()
    scope = fj.Scope()
    exe = fj.Executor(fj.CPUPlace())
    exe.run(startup, scope=scope)
    history = fj.train(exe, main, reader, [loss], epochs=2, feed_order=["x", "y"], scope=scope,
                       test_program=test, test_reader=reader, progress=False)
    steps = history[loss.name]
    assert len(steps) == 6 and history.epoch_ends == [3, 6]
    assert np.allclose(history.epochs[loss.name], [np.mean(steps[:3]), np.mean(steps[3:])])
    assert steps[-1] < steps[0]
    # the epoch-end evaluation equals a hand-written loop over the test program now
    feeder = fj.DataFeeder(["x", "y"], program=main)
    by_hand = [float(exe.run(test, feed=feeder.feed(b), fetch_list=[loss.name], scope=scope)[0]) for b in reader()]
    assert np.isclose(history.test[loss.name][-1], np.mean(by_hand))      # equal batch sizes
    assert "2 epoch(s), 6 steps" in repr(history)


def test_train_draws_no_live_plot_outside_jupyter(capsys):
    import fluidjax as fj
    from fluidjax.frontend.training_loop import History, _LivePlot

    assert not _LivePlot(History(), 1.0).active
    main, startup, _, loss, reader = _tiny_classifier()
    scope = fj.Scope()
    exe = fj.Executor(fj.CPUPlace())
    exe.run(startup, scope=scope)
    fj.train(exe, main, reader, [loss], feed_order=["x", "y"], scope=scope, progress=False)
    assert capsys.readouterr().out == ""


# -- errors point at the cell ----------------------------------------------------------------------------

@pytest.mark.slow
def test_a_shape_error_in_a_notebook_names_the_cell_and_line_with_a_short_traceback(tmp_path):
    import re

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("import fluidjax as fj\nfrom fluidjax import layer"),
                nbformat.v4.new_code_cell("x = layer.data('x', input_size=4)\ny = layer.data('y', shape=[5, 3])\n\n"
                                          "z = layer.matmul(x, y)", metadata={"tags": ["raises-exception"]})]
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    (error,) = [o for o in nb.cells[1].outputs if o.output_type == "error"]
    assert error.ename == "ShapeError"
    assert 'created at: File "Cell In[2]", line 4' in error.evalue
    text = re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(error.traceback))
    assert "Cell In[2], line 4" in text and "layer.matmul(x, y)" in text
    # only the user's frame: nothing from inside fluidjax or IPython
    frames = [line for line in text.splitlines() if re.match(r"^(Cell In\[|File )", line)]
    assert frames == ["Cell In[2], line 4"]
    assert "shape.py" not in text and "interactiveshell" not in text


# -- the committed notebooks: executed, with outputs a reader understands ----------------------------

def _png_title(png_b64: str) -> str | None:
    """The PNG's ``Title`` text (fj.train's and History.plot()'s figures carry their panel titles)."""
    import io

    from PIL import Image

    return Image.open(io.BytesIO(base64.b64decode(png_b64))).text.get("Title")


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_committed_outputs_are_what_a_fresh_run_shows(path, executed):
    """The outputs committed with each notebook are not stale: cell by cell the same sources and
    kinds of output, numbers within tolerance, SVG drawings with the same nodes
    (refresh with ``python tests/refresh_notebooks.py``)."""
    import refresh_notebooks

    committed = nbformat.read(path, as_version=4)
    assert any(c.get("outputs") for c in committed.cells if c.cell_type == "code"), "committed without outputs"
    assert "widgets" not in committed.metadata
    assert not [c for c in committed.cells if "execution" in c.metadata], "volatile timestamps committed"
    fresh, _ = executed(path.name)
    stale = refresh_notebooks.compare(committed, fresh)
    assert not stale, (f"{path.name}'s committed outputs are stale: refresh them with "
                       f"`python tests/refresh_notebooks.py {path.stem}`:\n  " + "\n  ".join(stale))


def test_compare_notices_stale_outputs():
    import copy

    import refresh_notebooks

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("print(1)", outputs=[
        nbformat.v4.new_output("stream", name="stdout", text="loss 0.5000 after 3 steps\n")])]
    same = copy.deepcopy(nb)
    same.cells[0].outputs[0].text = "loss 0.5010 after 3 steps\n"
    assert refresh_notebooks.compare(nb, same) == []
    moved = copy.deepcopy(nb)
    moved.cells[0].outputs[0].text = "loss 0.9000 after 3 steps\n"
    assert "number(s) differ" in refresh_notebooks.compare(nb, moved)[0]
    other = copy.deepcopy(nb)
    other.cells[0].outputs = [nbformat.v4.new_output("execute_result", data={"text/plain": "1"})]
    assert "outputs" in refresh_notebooks.compare(nb, other)[0]
    svg = '<svg xmlns="http://www.w3.org/2000/svg"><g data-kind="op"/>{}</svg>'
    a, b = copy.deepcopy(nb), copy.deepcopy(nb)
    a.cells[0].outputs = [nbformat.v4.new_output("display_data", data={"image/svg+xml": svg.format("")})]
    two = svg.format('<g data-kind="op"/>')
    b.cells[0].outputs = [nbformat.v4.new_output("display_data", data={"image/svg+xml": two})]
    assert "SVG" in refresh_notebooks.compare(a, b)[0]


def test_no_notebook_cell_asserts():
    """Readers see printed numbers and what they mean; the tests check the outputs."""
    import ast

    for path in NOTEBOOKS:
        for cell in nbformat.read(path, as_version=4).cells:
            if cell.cell_type != "code":
                continue
            code = "\n".join(line for line in cell.source.splitlines() if not line.lstrip().startswith(("%", "!")))
            asserts = [n for n in ast.walk(ast.parse(code)) if isinstance(n, ast.Assert)]
            assert not asserts and "assert " not in cell.source, f"{path.name}: {cell.source[:80]!r}"


def test_committed_notebooks_stay_small():
    total = sum(p.stat().st_size for p in NOTEBOOKS)
    assert total < 1_600_000, f"{total} bytes in notebooks/"
    for path in NOTEBOOKS:
        for cell in nbformat.read(path, as_version=4).cells:
            for out in cell.get("outputs", []):
                assert "application/vnd.jupyter.widget-view+json" not in out.get("data", {})
                assert len(out.get("data", {}).get("image/png", "")) < 120_000, path.name


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_every_plot_shows_once_with_a_readable_title(path, executed):
    """One image per ``plt.show()``, per ``history.plot()`` and per live ``fj.train`` curve;
    the curves of fj.train and History.plot() are titled with what they are (no ``.tmp_``),
    and the exported page holds every PNG."""
    nb, html = executed(path.name)
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        images = [o for o in cell.outputs if "image/png" in o.get("data", {})]
        lines = [line.split("#")[0].rstrip() for line in cell.source.splitlines()]
        expected = (sum(line.count("plt.show()") for line in lines) + sum(line.endswith(".plot()") for line in lines)
                    + sum("fj.train(" in line for line in lines))
        assert len(images) == expected, cell.source[:120]
        for out in images:
            title = _png_title(out["data"]["image/png"])
            assert title is None or (title and ".tmp_" not in title), title
            assert out["data"]["image/png"].strip()[:200] in html.replace("\n", "")
    if path.name == "digits.ipynb":
        titles = [_png_title(o["data"]["image/png"]) for o in _outputs(nb) if "image/png" in o.get("data", {})]
        assert titles.count("loss; accuracy") == 2, titles       # the live curve and history.plot()
        assert ".tmp_" not in "".join(o.get("data", {}).get("text/plain", "") for o in _outputs(nb))


@pytest.mark.slow
def test_sequences_notebook_shows_the_lod_drawing_without_plotting_code(executed):
    nb, html = executed("sequences.ipynb")
    (cell,) = [c for c in nb.cells if c.cell_type == "code" and "create_lod_tensor(words" in c.source]
    (view,) = [o["data"]["text/html"] for o in cell.outputs if "text/html" in o.get("data", {})]
    svg = ET.fromstring(re.search(r"<svg\b.*?</svg>", view, re.S).group(0))
    assert len(_lod_rects(svg, "fj-lod-row")) == 9
    assert [len(_lod_rects(svg, "fj-lod-seq", level)) for level in (0, 1)] == [2, 3]
    assert "plt." not in "".join(c.source for c in nb.cells[:nb.cells.index(cell) + 2])
    assert 'class="fj-lod"' in html


@pytest.mark.slow
def test_jax_interop_notebook_fine_tunes_in_jax_and_paddle_agrees(executed):
    """notebooks/jax_interop.ipynb (docs/jax.md): a Paddle-saved ResNet, fj.to_jax, optax on the head,
    vmap, orbax, fj.from_jax, and Paddle running the saved result. Paddle inside the notebook is the
    oracle; its printed agreement is checked here."""
    nb, _ = executed("jax_interop.ipynb")
    text = "".join(o.get("text", "") for o in _outputs(nb) if o.get("output_type") == "stream")

    def number(pattern):
        return float(re.search(pattern, text).group(1))

    assert number(r"max \|fn - Executor\.run\| = ([-0-9.e]+)") == 0.0          # one lowering
    assert number(r"max \|fn - Paddle\| += ([-0-9.e]+)") < 1e-5
    before, after = number(r"before fine-tuning: test accuracy ([0-9.]+)"), number(r"after 60 steps: +test accuracy ([0-9.]+)")
    assert before < 0.5 and after > 0.8
    assert re.search(r"'head\.w_0': \(8, 64, 4\)", text), "one gradient of the head per example"
    assert number(r"mean of per-example gradients - batch gradient\| = ([-0-9.e]+)") < 1e-5
    assert "identical to the trained ones: True" in text
    same = re.search(r"same predicted class as JAX for (\d+) of (\d+) images", text)
    assert same.group(1) == same.group(2)
    assert number(r"Paddle's test accuracy: ([0-9.]+)") == after
    assert number(r"max \|Paddle - JAX\| over \d+ probabilities: ([-0-9.e]+)") < 1e-5


# -- the LoD drawing in a tensor's notebook view ---------------------------------------------------------

def _lod_rects(svg, cls, level=None):
    return [r for r in svg.iter(SVG_NS + "rect") if r.get("class") == cls
            and (level is None or r.get("data-level") == str(level))]


def _lod_svg(tensor):
    html = tensor._repr_html_()
    ET.fromstring(html)       # the whole view stays well-formed
    found = re.search(r"<svg\b.*?</svg>", html, re.S)
    return ET.fromstring(found.group(0)) if found else None


@pytest.mark.parametrize("lengths", [[[3, 1, 4]], [[2, 1], [3, 4, 2]], [[1, 2], [0, 2, 3]], [[2, 0, 1], [1, 1, 2]]])
def test_lod_view_draws_a_box_per_row_and_per_sequence(lengths):
    import numpy as np

    import fluidjax as fj

    rows = sum(lengths[-1])
    t = fj.create_lod_tensor(np.arange(rows * 2, dtype="float32").reshape(rows, 2), lengths)
    svg = _lod_svg(t)
    assert [int(r.get("data-row")) for r in _lod_rects(svg, "fj-lod-row")] == list(range(rows))
    # the rows each sequence spans, from the lengths alone: a level's sequence holds the rows of
    # the sequences of the level below that it counts
    row_bounds = list(np.cumsum([0] + lengths[-1]))
    spans = {len(lengths) - 1: row_bounds}
    for level in range(len(lengths) - 2, -1, -1):
        below = spans[level + 1]
        counts = np.cumsum([0] + lengths[level])
        spans[level] = [below[c] for c in counts]
    for level, lens in enumerate(lengths):
        boxes = _lod_rects(svg, "fj-lod-seq", level)
        assert [int(b.get("data-index")) for b in boxes] == list(range(len(lens)))
        assert [(int(b.get("data-start")), int(b.get("data-end"))) for b in boxes] == \
            list(zip(spans[level][:-1], spans[level][1:]))
        assert all(float(b.get("width")) > 0 for b in boxes)


def test_lod_view_of_a_big_tensor_stops_at_an_ellipsis_and_a_plain_tensor_has_no_drawing():
    import numpy as np

    import fluidjax as fj
    from fluidjax.lowering.lod_drawing import MAX_ROWS

    big = fj.LoDTensor(np.zeros((5000, 3), "float32"), [[0, 10, 20, 4000, 5000]])
    svg = _lod_svg(big)
    assert len(_lod_rects(svg, "fj-lod-row")) == MAX_ROWS
    more = [t for t in svg.iter(SVG_NS + "text") if t.get("class") == "fj-lod-more"]
    assert [t.text for t in more] == [f"… {5000 - MAX_ROWS} more rows"]
    # the sequences starting in the drawn rows; the one that goes on past them is drawn dashed
    boxes = _lod_rects(svg, "fj-lod-seq", 0)
    assert [b.get("data-index") for b in boxes] == ["0", "1", "2"]
    assert boxes[-1].get("stroke-dasharray") and not boxes[0].get("stroke-dasharray")
    assert len(ET.tostring(svg)) < 20_000
    assert _lod_svg(fj.LoDTensor(np.zeros((4, 2), "float32"))) is None


# -- what fj.train calls the values it records -----------------------------------------------------------

def test_train_names_values_by_the_users_keys_or_by_what_made_them():
    import io

    import numpy as np
    from PIL import Image

    import fluidjax as fj
    from fluidjax import layer
    from fluidjax.frontend.training_loop import describe_fetch

    main, startup = fj.Program(), fj.Program()
    startup.random_seed = 3
    with fj.unique_name.guard(), fj.program_guard(main, startup):
        x = layer.data("x", input_size=4)
        label = layer.data("y", dims=1, dtype="int64")
        prob = layer.fc(x, 3, activation="softmax")
        loss = layer.mean(layer.cross_entropy(prob, label))
        acc = layer.accuracy(prob, label)
        spread = layer.mean(prob)
        test = main.clone(for_test=True)
        fj.optimizer.SGD(0.5).minimize(loss)
    assert describe_fetch(main, loss.name) == "loss"              # the loss the backward starts from
    assert describe_fetch(test, loss.name) == "mean of cross_entropy"
    assert describe_fetch(main, acc.name) == "accuracy"
    assert describe_fetch(main, spread.name) == "mean of softmax"

    rng = np.random.default_rng(0)
    xs = rng.normal(size=(60, 4)).astype("float32")
    ys = (xs[:, :1] > 0).astype("int64")
    reader = lambda: ({"x": xs[i:i + 20], "y": ys[i:i + 20]} for i in range(0, 60, 20))   # noqa: E731
    scope = fj.Scope()
    exe = fj.Executor(fj.CPUPlace())
    exe.run(startup, scope=scope)
    history = fj.train(exe, main, reader, [loss, acc], scope=scope, progress=False)
    assert history.labels == {loss.name: "loss", acc.name: "accuracy"}
    assert history["loss"] == history[loss.name] == history[loss] and len(history["loss"]) == 3
    assert "loss=" in repr(history) and ".tmp_" not in repr(history)
    fig = history.plot()
    assert [ax.get_title() for ax in fig.axes] == ["loss", "accuracy"]
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    assert Image.open(io.BytesIO(buf.getvalue())).text["Title"] == "loss; accuracy"

    history = fj.train(exe, main, reader, {"cost": loss, "acc": acc}, scope=scope, progress=False,
                       test_program=test, test_reader=reader)
    assert set(history.steps) == {"cost", "acc"} and set(history.test) == {"cost", "acc"}
    feed = next(reader())
    by_hand = [float(v) for v in exe.run(test, feed=feed, fetch_list=[loss.name, acc.name], scope=scope)]
    both = fj.evaluate(exe, test, lambda: iter([feed]), {"cost": loss, "acc": acc}, scope=scope)
    assert np.allclose([both["cost"], both["acc"]], by_hand)
    assert [ax.get_title() for ax in history.figure().axes] == ["cost", "acc"]


def test_history_plot_is_not_a_pyplot_figure():
    """``history.plot()``'s figure is shown once, as the cell's result: pyplot does not hold it
    (a pyplot figure would be shown a second time when the cell ends)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from fluidjax.frontend.training_loop import History

    history = History()
    history.steps["loss"] = [3.0, 2.0, 1.0]
    before = plt.get_fignums()
    fig = history.plot()
    assert plt.get_fignums() == before and fig.axes[0].get_title() == "loss"
