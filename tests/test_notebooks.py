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
    """``executed(name) -> (notebook, html)``: each notebook run once (nbclient) and exported
    (nbconvert), shared by the tests of this module."""
    from nbconvert import HTMLExporter

    done = {}

    def run(name):
        if name not in done:
            nb = nbformat.read(NOTEBOOKS[[p.name for p in NOTEBOOKS].index(name)], as_version=4)
            folder = tmp_path_factory.mktemp(name.replace(".", "_"))
            NotebookClient(nb, timeout=600, kernel_name="python3",
                           resources={"metadata": {"path": str(folder)}}).execute()
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
