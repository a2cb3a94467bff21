"""No silent wrong answers and no lost state around files and shared scopes (issue 21, items 7, 8,
13-17): saves and reads that take their turn with a training thread, checkpoints that a kill cannot
tear, hostile tensor headers, huge declared sizes, file modes that follow the umask, and typed
errors for LoD and ``cond`` mistakes.

This file is also the child of the kill tests: ``python test_reliability_files.py zygote ...``.
"""

import io
import json
import os
import random
import signal
import stat
import struct
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import fluidjax as fj
import fluidjax.io as fio
from fluidjax import layer
from fluidjax.frontend.io import tensor_stream as ts
from fluidjax.ir.errors import ParameterMismatchError, TensorFormatError

MANIFEST = ".fluidjax_manifest"


# -- helpers ---------------------------------------------------------------------------------------
def _mlp(seed=5):
    """A small MLP classifier trained with Adam: (main, startup, cost)."""
    main, startup = fj.Program(), fj.Program()
    main.random_seed = startup.random_seed = seed
    with fj.program_guard(main, startup):
        x = layer.data("x", input_size=16)
        y = layer.data("y", dims=1, dtype="int64")
        h = layer.fc(x, 32, activation="relu")
        p = layer.fc(h, 10, activation="softmax")
        cost = layer.mean(layer.cross_entropy(p, y))
        fj.optimizer.Adam(0.01).minimize(cost)
    return main, startup, cost


def _batch(n=8, seed=0):
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((n, 16)).astype(np.float32), "y": rng.integers(0, 10, (n, 1)).astype(np.int64)}


def _persistables(program):
    return [v.name for v in fio.persistable_vars(program)]


def _state(program, scope):
    return {n: np.array(scope.find_var(n).get_tensor()) for n in _persistables(program)}


def _key(state):
    return b"".join(state[n].tobytes() for n in sorted(state))


# -- 16: cond branches of different dtypes ------------------------------------------------------------------
def test_cond_branches_of_different_dtypes_name_both_dtypes():
    with fj.program_guard(fj.Program(), fj.Program()):
        x = layer.data("x", shape=[3])
        pred = layer.reduce_sum(x) > 0
        with pytest.raises(fj.FluidJaxError) as info:
            layer.cond(pred, lambda: [x * 2.0, x], lambda: [x, layer.cast(x, "int64")])
    text = str(info.value)
    assert "float32" in text and "int64" in text and "[-1, 3]" in text, text
    assert "output 1" in text or "1" in text
    assert isinstance(info.value, (TypeError, ValueError))


def test_select_input_of_different_dtypes_at_run_time_names_the_dtypes():
    main = fj.Program()
    block = main.global_block()
    a = block.create_var("a", shape=(2, 3), dtype="float32", persistable=True)
    b = block.create_var("b", shape=(2, 3), dtype="int64", persistable=True)
    m = block.create_var("m", shape=(1,), dtype="int32", persistable=True)
    out = block.create_var("out", shape=(2, 3), dtype="int64")
    block.append_op("select_input", {"X": [a, b], "Mask": [m]}, {"Out": [out]})
    scope = fj.Scope()
    for name, value in (("a", np.zeros((2, 3), "float32")), ("b", np.zeros((2, 3), "int64")),
                        ("m", np.zeros(1, "int32"))):
        scope.var(name).get_tensor().set(value)
    with pytest.raises(fj.OpRuntimeError) as info:
        fj.Executor().run(main, fetch_list=[out], scope=scope)
    assert "float32" in str(info.value) and "int64" in str(info.value), str(info.value)


# -- 17: LoD and cond mistakes are typed, and keep their Python base class -----------------------------------
@pytest.mark.parametrize("lengths,base", [([[2, -1]], ValueError), ([[2.0, 1]], TypeError), ([[1.5]], TypeError),
                                          ([[1, 1]], ValueError)])
def test_bad_sequence_lengths_are_lod_errors(lengths, base):
    with pytest.raises(fj.LoDError) as info:
        fj.create_lod_tensor(np.zeros((1, 1)), lengths)
    assert isinstance(info.value, base) and isinstance(info.value, fj.FluidJaxError)


@pytest.mark.parametrize("lod,rule", [([[1, 5]], "start at 0"), ([[0, 3, 2, 5]], "non-decreasing"),
                                      ([[0, 4]], "the data has 5 rows")])
def test_bad_offsets_are_lod_errors(lod, rule):
    t = fj.LoDTensor(np.zeros((5, 1)))
    with pytest.raises(fj.LoDError, match=rule) as info:
        t.set_lod(lod)
    assert isinstance(info.value, ValueError)
    assert t.lod() == []


def test_a_bad_cond_pred_is_a_typed_error_that_is_still_a_type_error():
    with fj.program_guard(fj.Program(), fj.Program()):
        x = layer.data("x", shape=[3])
        for pred in (True, x, layer.reduce_sum(x), layer.cast(x, "bool")):
            with pytest.raises(fj.FluidJaxError) as info:
                layer.cond(pred, lambda: x, lambda: x)
            assert isinstance(info.value, TypeError), pred
    for name in ("LoDError", "LoDTypeError", "InputTypeError"):
        assert name in fj.__all__ and issubclass(getattr(fj, name), fj.FluidJaxError)
