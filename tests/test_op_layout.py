"""Where the ops live (docs/ops-layout.md): every op of ``lowering/ops`` is registered by a literal
``@op("<type>", ...)`` decorator on its JAX rule, so that searching for ``@op("relu"`` finds it;
modules are named by the family of ops they hold (no extra/legacy/misc/utils grab bags), each is
imported by the package, and none grows past 850 lines."""

from __future__ import annotations

import ast
import collections
import os
import re
import sys

import fluidjax  # noqa: F401  (registers every op)
from fluidjax.ir import registry
from fluidjax.lowering import ops

OPS_DIR = os.path.dirname(ops.__file__)
DECORATOR = re.compile(r'@op\(\s*"([^"]+)"')
GRAB_BAG = re.compile(r"_*(extra|legacy|misc|util)")
MAX_LINES = 850


def _sources() -> dict[str, str]:
    """File name -> text, for every module of ``lowering/ops``."""
    out = {}
    for name in sorted(os.listdir(OPS_DIR)):
        if name.endswith(".py"):
            with open(os.path.join(OPS_DIR, name)) as fh:
                out[name] = fh.read()
    return out


def _registered_by_ops() -> set[str]:
    """The op types whose JAX rule is defined in ``lowering/ops``, without the ``<type>_grad`` ops
    the registry derives itself (hand-written grad ops are in)."""
    out = set()
    for t in registry.registered_types(include_grad=True):
        d = registry.get(t)
        if d.forward_type is None and d.compute is not None and d.compute.__module__.startswith(ops.__name__ + "."):
            out.add(t)
    return out


def test_every_op_is_registered_by_one_literal_decorator():
    found = collections.Counter(t for text in _sources().values() for t in DECORATOR.findall(text))
    assert sorted(t for t, n in found.items() if n > 1) == []
    registered = _registered_by_ops()
    assert len(registered) > 250
    assert sorted(registered - set(found)) == []      # registered otherwise: by a helper, in a loop
    assert sorted(set(found) - registered) == []


def test_no_op_is_registered_by_a_call():
    calls = []
    for name, text in _sources().items():
        tree = ast.parse(text)
        decorators = {id(d) for node in ast.walk(tree) for d in getattr(node, "decorator_list", ())}
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and id(node) not in decorators:
                callee = getattr(node.func, "id", getattr(node.func, "attr", None))
                if callee in ("op", "register"):
                    calls.append(f"{name}:{node.lineno}")
    assert calls == []


def test_modules_are_named_by_family():
    assert [name for name in _sources() if GRAB_BAG.match(name)] == []


def test_the_package_imports_every_family():
    families = [name[:-3] for name in _sources() if not name.startswith("_")]
    assert [m for m in families if f"{ops.__name__}.{m}" not in sys.modules] == []


def test_no_module_is_too_long():
    lengths = {name: text.count("\n") for name, text in _sources().items()}
    assert {name: n for name, n in lengths.items() if n > MAX_LINES} == {}
