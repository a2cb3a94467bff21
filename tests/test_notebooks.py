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
