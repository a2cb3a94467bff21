"""Test-suite setup: test helpers importable; each test builds into fresh default programs."""

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))

import fluidjax as fj  # noqa: E402
from fluidjax.ir import program as _program  # noqa: E402
from fluidjax.lowering import scope as _scope  # noqa: E402


@pytest.fixture(autouse=True)
def fresh_defaults():
    """Fresh default main/startup programs, global scope and name counters for every test;
    Paddle (when a test has imported it) in static-graph mode."""
    if "paddle" in sys.modules:
        sys.modules["paddle"].enable_static()
    main = _program.switch_main_program(fj.Program())
    startup = _program.switch_startup_program(fj.Program())
    scope = _scope.switch_scope(fj.Scope())
    with fj.unique_name.guard():
        yield
    _program.switch_main_program(main)
    _program.switch_startup_program(startup)
    _scope.switch_scope(scope)
