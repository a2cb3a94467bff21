"""Every name of Fluid 1.8's ``paddle.fluid.layers`` exists in ``fluidjax.layers``: a working layer
that takes Fluid's positional parameters, or a refusal that raises ``NotOfferedError`` with its
reason. The list (``fluid18_layers.txt``) is Fluid 1.8.5's ``layers.__all__`` with each
signature as Fluid defines it."""

from __future__ import annotations

import inspect
import pathlib
import re

import pytest

import fluidjax as fluid
from fluidjax.frontend.layer_args import FLUID_SPELLINGS
from fluidjax.frontend.refused_layers import REFUSED

_LIST = pathlib.Path(__file__).with_name("fluid18_layers.txt")
ROWS = [line.split("\t") for line in _LIST.read_text().splitlines() if line and not line.startswith("#")]
NAMES = [row[0] for row in ROWS]
SIGNATURES = {row[0]: row[2] for row in ROWS}

# Working layers whose positional order deliberately differs from Fluid 1.8's, and why.
SIGNATURE_EXCEPTIONS = {
    # Paddle 2's flatten(x, start_axis, stop_axis); Fluid's axis= is taken as a keyword (docs/fluid1.md)
    "flatten",
    # Fluid 1.8.5's preview of Paddle 2's API (out=, device=, stop_gradient= placeholders); ours is
    # Paddle 2's final form, which scripts call by keyword
    "randint", "full_like",
    # Fluid 1.8.5's log_softmax(input, axis, dtype, name) and softplus(x, name): ours also take
    # Paddle 2's dtype-free log_softmax and softplus(x, beta, threshold)
    "log_softmax", "softplus",
}


def _fluid_positional(signature: str) -> list[str]:
    if "(" not in signature:  # a class without an __init__ of its own
        return []
    inner = signature[signature.index("(") + 1:signature.rindex(")")]
    names = []
    for part in re.split(r",\s*(?![^\[\]()]*[\]\)])", inner):
        part = part.strip()
        if not part or part.startswith("*"):
            break
        names.append(part.split("=")[0])
    return names


def _our_positional(fn) -> list[str]:
    target = fn.__init__ if inspect.isclass(fn) else fn
    params = list(inspect.signature(target).parameters.values())
    if inspect.isclass(fn):
        params = params[1:]
    return [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]


def test_the_list_is_fluid_18s_whole_layers_namespace():
    assert len(NAMES) == len(set(NAMES)) == 355
    assert {"fc", "warpctc", "auc", "ctc_greedy_decoder", "dynamic_lstmp", "stanh", "Normal"} <= set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_every_fluid_18_layer_exists(name):
    assert hasattr(fluid.layers, name), f"fluidjax.layers.{name} is missing (Fluid 1.8 has it)"


def test_refused_layers_say_why():
    """Every Fluid 1.8 layer works today (REFUSED is empty); a refused one would raise
    NotOfferedError with its reason when called: checked on the listed names and on a stand-in."""
    from fluidjax.frontend.refused_layers import _refused

    reason = "a stand-in reason that says what is missing and why"
    cases = [(name, getattr(fluid.layers, name), REFUSED[name]) for name in sorted(set(NAMES) & set(REFUSED))]
    cases.append(("stand_in", _refused("stand_in", reason), reason))
    for name, fn, why in cases:
        with pytest.raises(fluid.NotOfferedError, match=f"fluid.layers.{name} is not offered") as info:
            fn()
        assert why in str(info.value) and len(why) > 20
        assert fn.__fluidjax_not_offered__ == why


@pytest.mark.parametrize("name", [n for n in NAMES if n not in REFUSED])
def test_working_layers_take_fluids_positional_parameters(name):
    fn = getattr(fluid.layers, name)
    assert callable(fn) and not hasattr(fn, "__fluidjax_not_offered__")
    if name in SIGNATURE_EXCEPTIONS:
        return
    want = _fluid_positional(SIGNATURES[name])
    ours = [FLUID_SPELLINGS.get(p, p) for p in _our_positional(fn)]
    want = [FLUID_SPELLINGS.get(p, p) for p in want]
    assert ours[:len(want)] == want, f"{name}: Fluid {SIGNATURES[name]}, ours {inspect.signature(fn)}"


def test_refusals_are_only_for_fluid_names_and_not_also_defined():
    assert set(REFUSED) <= set(NAMES)
    from fluidjax.frontend import layers as module
    for name in REFUSED:
        assert getattr(module, name).__name__ == name
        assert hasattr(getattr(module, name), "__fluidjax_not_offered__"), f"{name} is both refused and defined"
