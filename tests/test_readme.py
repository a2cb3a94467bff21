"""The README's code runs as printed (each example block in a fresh process)."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def _python_blocks() -> dict[str, str]:
    """The README's ```python blocks, keyed by the heading they sit under."""
    blocks, heading = {}, ""
    for part in re.split(r"(^## [^\n]*$|^```python\n.*?^```$)", README.read_text(), flags=re.M | re.S):
        if part.startswith("## "):
            heading = part[3:].strip()
        elif part.startswith("```python"):
            blocks[heading] = blocks.get(heading, "") + part[len("```python\n"):-3]
    return blocks


@pytest.mark.parametrize("section, results, shapes", [
    ("Variable-length data (LoD)", "p, v", "(2, 10) (2, 10)"),
    ("Recurrent nets", "h, o", "(20, 4, 32) (20, 4, 64)"),          # the shapes its comment gives
    ("Saved models, StableHLO and the command line", "xs, exported.call(xs)[0]", "(32, 4096) (32, 100)"),
])
def test_readme_block_runs_after_the_example(section, results, shapes, tmp_path):
    blocks = _python_blocks()
    first, second = results.split(", ", 1)
    code = blocks["Example"] + "\n" + blocks[section] + f"\nprint('SHAPES', {first}.shape, {second}.shape)\n"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                            cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"SHAPES {shapes}" in result.stdout
