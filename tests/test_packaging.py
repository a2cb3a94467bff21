"""Packaging: one import name, nothing else leaking into site-packages; the demo entry point."""

import importlib.util
import subprocess
import sys
import zipfile

import pytest


def test_only_fluidjax_is_importable_at_top_level():
    assert importlib.util.find_spec("fluidjax") is not None
    for leaked in ("ir", "proto", "lowering", "frontend", "demo"):
        spec = importlib.util.find_spec(leaked)
        assert spec is None or "fluidjax" not in (spec.origin or ""), f"top-level {leaked!r} leaks"


@pytest.mark.slow
def test_wheel_holds_only_the_fluidjax_package(tmp_path):
    import pathlib

    root = pathlib.Path(__file__).parent.parent
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q",
                    "-w", str(tmp_path), str(root)], check=True)
    wheel = next(tmp_path.glob("fluidjax-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names}
    assert tops <= {"fluidjax", wheel.name.split("-")[0] + "-" + wheel.name.split("-")[1] + ".dist-info"}, tops
    for module in ("fluidjax/__init__.py", "fluidjax/proto/framework_pb2.py", "fluidjax/proto/framework.proto",
                   "fluidjax/ir/program.py", "fluidjax/lowering/executor.py", "fluidjax/frontend/layers.py"):
        assert module in names
    assert not any(n.startswith("fluidjax/tests/") for n in names)
    # every module of the four code folders ships (a new subpackage must be listed in pyproject)
    for folder in ("proto", "ir", "lowering", "frontend"):
        for path in (root / folder).rglob("*.py"):
            assert f"fluidjax/{path.relative_to(root).as_posix()}" in names, path


def test_export_needs_nothing_beyond_the_install_line():
    """`fluidjax export` serializes with flatbuffers: it is a core dependency, not an extra."""
    import pathlib
    import tomllib

    root = pathlib.Path(__file__).parent.parent
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    assert any(d.split(">")[0].split("=")[0].strip() == "flatbuffers" for d in project["dependencies"])
    assert importlib.util.find_spec("flatbuffers") is not None


@pytest.mark.slow
def test_demo_runs():
    result = subprocess.run([sys.executable, "-m", "fluidjax", "demo", "--steps", "60", "--quiet"],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "fc_0.w_0 : shape=(4096, 100)" in out and "same result" in out
    assert "accuracy" in out
    assert "paragraph result matches NumPy's" in out and "lod [[0, 2, 5]]" in out
