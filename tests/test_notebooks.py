"""Every notebook in notebooks/ runs top to bottom without an error."""

import pathlib

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = sorted((pathlib.Path(__file__).parent.parent / "notebooks").glob("*.ipynb"))


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs(path, tmp_path):
    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    html = [o for o in outputs if "text/html" in o.get("data", {})]
    assert any("fc_0.w_0" in o["data"]["text/html"] for o in html), "the program's HTML table is shown"
    assert any("image/png" in o.get("data", {}) for o in outputs), "the loss curve is plotted"


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
