"""The house rules of the repository's layout (docs/layout.md): four folders hold the code, imports
run one way (proto <- ir <- lowering <- frontend) and no file imports a file that imports it back,
directly or around a loop. Imports inside functions count; ``if TYPE_CHECKING:`` imports do not
(they never run)."""

from __future__ import annotations

import ast
import os
import subprocess
import sys

import pytest

import fluidjax as fj

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CODE_FOLDERS = ("proto", "ir", "lowering", "frontend")
LAYER = {"proto": 0, "ir": 1, "lowering": 2, "frontend": 3}
NOT_CODE = {"tests", "notebooks", "benchmarks", "docs", "build", "__pycache__"}


def _modules() -> dict[str, str]:
    """Module name -> file, for every .py file of the package."""
    found = {}
    for folder, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in NOT_CODE and not d.startswith(".") and not d.endswith(".egg-info")]
        for f in files:
            if f.endswith(".py"):
                rel = os.path.relpath(os.path.join(folder, f), ROOT)
                parts = rel[:-3].split(os.sep)
                if parts[-1] == "__init__":
                    parts = parts[:-1]
                found[".".join(["fluidjax", *parts])] = rel
    return found


def _runtime_imports(tree: ast.AST):
    """Import nodes that can run: everything but the bodies of ``if TYPE_CHECKING:``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", getattr(node.test, "attr", None)) == "TYPE_CHECKING":
            node.body = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node


def import_graph() -> dict[str, set[str]]:
    """Module -> the package modules it imports (a ``from pkg import name`` of a non-module name is
    an import of ``pkg``, i.e. its ``__init__``)."""
    mods = _modules()

    def resolve(name: str) -> str:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name

    graph = {}
    for mod, rel in mods.items():
        with open(os.path.join(ROOT, rel)) as fh:
            tree = ast.parse(fh.read())
        package = mod if rel.endswith("__init__.py") else mod.rpartition(".")[0]
        out = set()
        for node in _runtime_imports(tree):
            if isinstance(node, ast.Import):
                out.update(resolve(a.name) for a in node.names if a.name.split(".")[0] == "fluidjax")
                continue
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                full = ".".join(base + ([node.module] if node.module else []))
            else:
                full = node.module or ""
            if full.split(".")[0] != "fluidjax":
                continue
            for alias in node.names:
                target = f"{full}.{alias.name}"
                out.add(target if target in mods else resolve(full))
        out.discard(mod)
        out.discard("")
        graph[mod] = out
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index, low, on_stack, stack, result, counter = {}, {}, set(), [], [], [0]
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter[0]
                    counter[0] += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        result.append(sorted(component))
    return result


def _folder(mod: str) -> str | None:
    parts = mod.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and parts[1] in LAYER) else None


def test_four_folders_hold_the_code():
    loose = sorted(rel for rel in _modules().values()
                   if rel.split(os.sep)[0] not in CODE_FOLDERS and rel not in ("__init__.py", "__main__.py"))
    assert loose == []


def test_no_import_cycles_between_files():
    assert _cycles(import_graph()) == []


def test_imports_point_down_the_layers():
    upward = []
    for mod, targets in import_graph().items():
        if mod.count(".") == 0 or mod.split(".")[1] not in LAYER:
            continue
        for target in targets:
            if target == "fluidjax" and mod == "fluidjax.frontend.demo":
                continue  # the demo is a user's script: it imports fluidjax as a user does
            if target == "fluidjax" or LAYER[target.split(".")[1]] > LAYER[mod.split(".")[1]]:
                upward.append(f"{mod} -> {target}")
    assert upward == []


def test_the_checker_sees_cycles_and_lazy_imports():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c"]]
    tree = ast.parse("def f():\n    from . import x\nif TYPE_CHECKING:\n    from . import y\n")
    assert [n.names[0].name for n in _runtime_imports(tree)] == ["x"]


PUBLIC = {
    "fluidjax": fj.__all__ + ["io", "passes", "distributed", "draw", "layer", "__version__"],
    "fluidjax.io": fj.io.__all__,
    "fluidjax.passes": ["fold_conv_bn", "to_nhwc", "filters_hwio", "optimize_inference", "recommended_xla_flags"],
    "fluidjax.distributed": fj.distributed.__all__,
    "fluidjax.viz": ["draw", "Drawing", "summarize", "Summary"],
}


@pytest.mark.parametrize("module", sorted(PUBLIC))
def test_public_names_import(module):
    mod = __import__(module, fromlist=["_"])
    missing = [name for name in PUBLIC[module] if not hasattr(mod, name)]
    assert missing == []


def test_public_module_paths_run_as_before():
    code = ("import fluidjax.io as fio, fluidjax.passes, fluidjax.distributed.launch, fluidjax.viz;"
            "from fluidjax.io import load_inference_model; from fluidjax.distributed import config_from_env;"
            "import fluidjax as fj; assert fio is fj.io and fluidjax.passes is fj.passes;"
            "p = fj.Program(); assert p.summary(print_fn=lambda s: None) is None;"
            "assert 'fj-graph-view' in p._repr_html_()")
    subprocess.run([sys.executable, "-c", code], check=True, cwd="/")
    out = subprocess.run([sys.executable, "-m", "fluidjax.distributed.launch", "--help"], capture_output=True,
                         text=True, cwd="/")
    assert out.returncode == 0 and "--nproc" in out.stdout
    out = subprocess.run([sys.executable, "-m", "fluidjax", "--help"], capture_output=True, text=True, cwd="/")
    assert out.returncode == 0 and "inspect" in out.stdout
