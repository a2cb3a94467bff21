"""Rows for the random ops (uniform_random, gaussian_random, truncated_gaussian_random, randint, seed).

Random numbers cannot be compared with Paddle's, so every row gives a ``check``. Convention:
the harness calls ``case.check(case)``; each check is self-contained — it builds the one-op
program from ``case.op`` and ``case.attrs`` itself, runs it with fresh ``fj.Executor`` s and
asserts (the seeding checks only on each op's first row, ``seeds=False`` on the others, to keep
compilations few):

- statistics of ~100k samples (mean, standard deviation, range) within tolerances, in fluidjax
  and in Paddle running the same serialized program;
- a non-zero ``seed`` attribute gives the same numbers in two fresh Executors;
- a fixed ``program.random_seed`` (``seed`` 0) gives the same numbers in two fresh Executors;
- with neither, two fresh Executors (and two runs of one Executor) give different numbers.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import numpy as np

import fluidjax as fj
from fluidjax.ir import dtypes
from optable import Case

N = 100_000


def _program(case: Case, random_seed: int = 0, seeds=(0,)):
    """A program with one ``case.op`` per entry of ``seeds`` (its ``seed`` attribute)."""
    main, startup = fj.Program(), fj.Program()
    main.random_seed = random_seed
    outs = []
    with fj.program_guard(main, startup):
        for i, seed in enumerate(seeds):
            out = main.global_block().create_var(f"out_{i}", (), "float32")
            main.global_block().append_op(case.op, outputs={"Out": out}, attrs={**case.attrs, "seed": seed})
            outs.append(out)
    return main, outs


def _run(main, outs, exe=None):
    exe = exe or fj.Executor()
    return exe.run(main, fetch_list=outs, scope=fj.Scope())


def _check_reproducibility(case: Case) -> None:
    """Seeds: attribute, program.random_seed, none (four compiled runs in all)."""
    case = dataclasses.replace(case, attrs={**case.attrs, "shape": [64]})
    main, outs = _program(case, seeds=(1234, 4321, 0))
    exe = fj.Executor()
    first, second, fresh = _run(main, outs, exe), _run(main, outs, exe), _run(main, outs)
    for again in (second, fresh):
        np.testing.assert_array_equal(first[0], again[0], err_msg=f"{case.op}: a fixed seed attribute must repeat")
    assert not np.array_equal(first[0], first[1]), f"{case.op}: different seed attributes gave equal numbers"
    assert not np.array_equal(first[2], fresh[2]), f"{case.op}: two Executors without a seed drew the same numbers"
    assert not np.array_equal(first[2], second[2]), f"{case.op}: two runs without a seed drew the same numbers"

    main.random_seed = 90
    a, b = _run(main, outs), _run(main, outs)
    np.testing.assert_array_equal(a[2], b[2], err_msg=f"{case.op}: a fixed program.random_seed must repeat")
    assert not np.array_equal(a[2], first[2]), f"{case.op}: program.random_seed had no effect"


def _samples(case: Case) -> list[np.ndarray]:
    """~100k samples from fluidjax and from Paddle running the same serialized program."""
    import paddle_oracle as po

    main, (out,) = _program(case)
    (ours,) = _run(main, [out])
    (theirs,) = po.run(main.serialize(), {}, [out.name])
    expected_dtype = dtypes.to_numpy(dtypes.from_enum(case.attrs["dtype"]))
    assert ours.dtype == expected_dtype and theirs.dtype == expected_dtype, (ours.dtype, theirs.dtype)
    assert ours.shape == tuple(case.attrs["shape"]) == theirs.shape
    assert main.global_block().var(out.name).shape == ours.shape
    return [ours, theirs]


def _check_moments(values, mean, std, low, high, who, *, tol=0.02, closed_high=False):
    values = np.asarray(values, np.float64)
    assert values.min() >= low and (values.max() <= high if closed_high else values.max() < high), \
        f"{who}: values outside [{low}, {high})"
    scale = std if std > 0 else 1.0
    assert abs(values.mean() - mean) < tol * scale * 3, f"{who}: mean {values.mean()} vs {mean}"
    assert abs(values.std() - std) < tol * scale * 2, f"{who}: std {values.std()} vs {std}"


def _check_uniform(case: Case, seeds: bool = True) -> None:
    lo, hi = case.attrs["min"], case.attrs["max"]
    for who, v in zip(("fluidjax", "paddle"), _samples(case)):
        _check_moments(v, (lo + hi) / 2, (hi - lo) / math.sqrt(12), lo, hi, who)
    if seeds:
        _check_reproducibility(case)


def _check_gaussian(case: Case, seeds: bool = True) -> None:
    mean, std = case.attrs["mean"], case.attrs["std"]
    for who, v in zip(("fluidjax", "paddle"), _samples(case)):
        _check_moments(v, mean, std, -np.inf, np.inf, who)
        inside = np.mean(np.abs(v - mean) < std)
        assert abs(inside - 0.6827) < 0.01, f"{who}: {inside:.4f} of the samples within one std"
    if seeds:
        _check_reproducibility(case)


def _check_truncated(case: Case, seeds: bool = True) -> None:
    mean, std = case.attrs["mean"], case.attrs["std"]
    # The standard deviation of a standard normal cut at ±2.
    phi2 = math.exp(-2.0) / math.sqrt(2 * math.pi)
    mass = math.erf(2 / math.sqrt(2))
    trunc_std = std * math.sqrt(1 - 2 * 2 * phi2 / mass)
    for who, v in zip(("fluidjax", "paddle"), _samples(case)):
        _check_moments(v, mean, trunc_std, mean - 2 * std - 1e-6, mean + 2 * std + 1e-6, who, closed_high=True)
    if seeds:
        _check_reproducibility(case)


def _check_randint(case: Case, seeds: bool = True) -> None:
    lo, hi = case.attrs["low"], case.attrs["high"]
    k = hi - lo
    for who, v in zip(("fluidjax", "paddle"), _samples(case)):
        _check_moments(v, (lo + hi - 1) / 2, math.sqrt((k * k - 1) / 12), lo, hi, who)
        counts = np.bincount((v - lo).reshape(-1), minlength=k)
        assert counts.size == k and counts.min() > 0.9 * v.size / k, f"{who}: uneven counts {counts}"
    if seeds:
        _check_reproducibility(case)


def _check_seed(case: Case) -> None:
    """``seed``: its attribute when non-zero (as Paddle's kernel, running the same bytes), else a
    new positive int32 every run; two dropouts reading one seed draw one mask (recompute's use)."""
    import paddle_oracle as po

    main = fj.Program()
    block = main.global_block()
    fixed = block.create_var("fixed", (), "int32")
    drawn = block.create_var("drawn", (), "int32")
    block.append_op("seed", outputs={"Out": fixed}, attrs={"seed": 1234})
    block.append_op("seed", outputs={"Out": drawn}, attrs={"seed": 0})
    x = block.create_var("x", (50, 40), "float32")
    masks = []
    for i in range(2):
        out, mask = block.create_var(f"out_{i}", (), "float32"), block.create_var(f"mask_{i}", (), "uint8")
        block.append_op("dropout", {"X": x, "Seed": drawn}, {"Out": out, "Mask": mask}, {"dropout_prob": 0.5})
        masks.append(mask)
    assert block.var("fixed").shape == (1,) and block.var("fixed").dtype == "int32"
    feed = {"x": np.ones((50, 40), np.float32)}
    exe = fj.Executor()
    first = exe.run(main, feed=feed, fetch_list=[fixed, drawn] + masks, scope=fj.Scope())
    second = exe.run(main, feed=feed, fetch_list=[fixed, drawn] + masks, scope=fj.Scope())
    assert first[0].tolist() == [1234] and first[0].dtype == np.int32
    assert first[1].shape == (1,) and first[1][0] > 0 and first[1][0] != second[1][0]
    np.testing.assert_array_equal(first[2], first[3])
    assert 0.4 < first[2].mean() < 0.6 and not np.array_equal(first[2], second[2])
    (theirs,) = po.run(main.serialize(), feed, ["fixed"])
    assert theirs.tolist() == [1234]


def _stats_only(check):
    return functools.partial(check, seeds=False)


CASES = [
    Case("uniform_random", attrs={"shape": [N], "dtype": 5, "min": -2.0, "max": 3.0}, check=_check_uniform),
    Case("uniform_random", attrs={"shape": [400, 250], "dtype": 6, "min": 0.0, "max": 1.0},
         check=_stats_only(_check_uniform), name="f64"),
    Case("gaussian_random", attrs={"shape": [N], "dtype": 5, "mean": 1.5, "std": 2.0}, check=_check_gaussian),
    Case("gaussian_random", attrs={"shape": [250, 400], "dtype": 6, "mean": 0.0, "std": 1.0},
         check=_stats_only(_check_gaussian), name="f64"),
    Case("truncated_gaussian_random", attrs={"shape": [N], "dtype": 5, "mean": -1.0, "std": 0.5},
         check=_check_truncated),
    Case("randint", attrs={"shape": [N], "dtype": 3, "low": -3, "high": 7}, check=_check_randint),
    Case("randint", attrs={"shape": [200, 500], "dtype": 2, "low": 0, "high": 2}, check=_stats_only(_check_randint),
         name="int32"),
    Case("seed", attrs={"seed": 0}, check=_check_seed),
]
