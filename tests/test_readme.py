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


@pytest.mark.parametrize("section", ["Variable-length data (LoD)"])
def test_readme_block_runs_after_the_example(section):
    blocks = _python_blocks()
    code = blocks["Example"] + "\n" + blocks[section] + "\nprint('SHAPES', p.shape, v.shape)\n"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "SHAPES (2, 10) (2, 10)" in result.stdout
