"""The op-test harness: runs every row of the shared op-test table (``tests/optable``).

For each row: a one-op fluidjax program is built (batch dims -1), serialized, parsed and run by
Paddle 2.6.2 and run by fluidjax; outputs must agree. Gradients: a weighted-mean loss of the
outputs gets its backward appended in both systems (Paddle's own ``append_backward`` on the
parsed program) and every input gradient is compared; float64 rows are also checked against
central finite differences. The shapes inferred at build time must agree with run-time shapes.
"""

from __future__ import annotations

import numpy as np
import pytest

import fluidjax as fj
from fluidjax.ir import dtypes, registry
from optable import Case, all_cases, tested_elsewhere

CASES = all_cases()
COMPARED = [c for c in CASES if c.check is None]
CUSTOM = [c for c in CASES if c.check is not None]
# Ops Paddle 2.6.2 does not register: our own host op, and cos_sim, lstm_unit and the Fluid 1.x
# losses smooth_l1_loss, margin_rank_loss, sigmoid_focal_loss (removed from Paddle 2.x's op
# library, still in programs saved by Paddle 1.x).
FLUIDJAX_ONLY = {"fill_string", "cos_sim", "lstm_unit", "smooth_l1_loss", "margin_rank_loss", "sigmoid_focal_loss",
                "space_to_depth", "pad_constant_like", "random_crop", "gaussian_random_batch_size_like", "lstmp",
                "mean_iou", "target_assign", "center_loss", "filter_by_instag", "prroi_pool", "roi_perspective_transform",
                "sample_logits", "fluidjax_per_sample"}


def _as_list(value):
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _is_float(array) -> bool:
    return np.issubdtype(np.asarray(array).dtype, np.floating)


def _lod_of(case: Case, slot: str, i: int):
    """The recursive sequence lengths of input ``i`` of ``slot`` (a duplicable slot may give one
    per input: a list of them), or None."""
    spec = case.lod.get(slot)
    if spec is None:
        return None
    per_input = bool(spec) and bool(spec[0]) and isinstance(spec[0][0], list)
    if per_input:
        return spec[i] if i < len(spec) else None
    return spec if i == 0 else None


class Built:
    """A one-op program for a row, with its feeds and the names of its inputs and outputs."""

    def __init__(self, case: Case, loss_weights: dict[str, list[np.ndarray]] | None = None,
                 weight_lods: dict[str, list] | None = None):
        self.case = case
        self.lods: dict[str, list] = {}        # feed name -> recursive sequence lengths
        opdef = registry.get(case.op)
        self.main, self.startup = fj.Program(), fj.Program()
        self.feed: dict[str, np.ndarray] = {}
        self.inputs: dict[str, list[str]] = {}
        self.outputs: dict[str, list[str]] = {}
        block = self.main.global_block()
        batch = case.batch_dims
        with fj.unique_name.guard(), fj.program_guard(self.main, self.startup):
            for slot, value in case.inputs.items():
                names = []
                for i, arr in enumerate(_as_list(value)):
                    arr = np.asarray(arr)
                    name = f"{slot.lower()}_{i}"
                    shape = tuple(arr.shape)
                    if arr.ndim >= 1 and (batch is None or slot in batch):
                        shape = (-1,) + shape[1:]
                    lengths = _lod_of(case, slot, i)
                    if lengths is not None:
                        self.lods[name] = lengths
                    block.create_var(name, shape, arr.dtype, len(lengths or ()), stop_gradient=not _is_float(arr))
                    self.feed[name] = arr
                    names.append(name)
                self.inputs[slot] = names
            for slot in opdef.outputs:
                if slot.dispensable and slot.name not in case.outputs:
                    continue
                count = case.output_counts.get(slot.name, 1)
                self.outputs[slot.name] = [block.create_var(f"out_{slot.name.lower()}_{i}", (), "float32").name
                                           for i in range(count)]
            self.op = block.append_op(case.op, self.inputs, self.outputs, case.attrs)
            self.loss = None
            if loss_weights:
                terms = []
                for slot, weights in loss_weights.items():
                    for name, w in zip(self.outputs[slot], weights):
                        wname = f"w_{name}"
                        lengths = (weight_lods or {}).get(name)
                        block.create_var(wname, w.shape, w.dtype, len(lengths or ()), stop_gradient=True)
                        self.feed[wname] = w
                        if lengths:                   # a LoD output is weighted by a LoD tensor
                            self.lods[wname] = lengths
                        prod = block.create_var(f"prod_{name}", (), w.dtype)
                        block.append_op("elementwise_mul", {"X": name, "Y": wname}, {"Out": prod})
                        term = block.create_var(f"mean_{name}", (), w.dtype)
                        block.append_op("mean", {"X": prod}, {"Out": term})
                        terms.append(term)
                loss = terms[0]
                for k, term in enumerate(terms[1:]):
                    total = block.create_var(f"loss_{k}", (), loss.dtype)
                    block.append_op("elementwise_add", {"X": loss, "Y": term}, {"Out": total})
                    loss = total
                self.loss = loss

    def compared_outputs(self) -> list[str]:
        return [n for slot in self.case.outputs for n in self.outputs.get(slot, [])]

    def grad_inputs(self) -> list[str]:
        """Input variables whose gradients the row checks."""
        slots = self.case.grad if self.case.grad is not None else list(self.inputs)
        opdef = registry.get(self.case.op)
        return [n for slot in slots if slot not in opdef.no_grad_inputs
                for n in self.inputs.get(slot, []) if _is_float(self.feed[n])]


def _fluidjax_feed(built: Built, feed: dict) -> dict:
    """``feed`` with the LoD inputs of the row as LoDTensors."""
    out = dict(feed)
    for name, lengths in built.lods.items():
        tensor = fj.LoDTensor(np.asarray(feed[name]))
        tensor.set_recursive_sequence_lengths(lengths)
        out[name] = tensor
    return out


def _run_fluidjax(built: Built, fetch: list[str], return_numpy: bool = True) -> list:
    exe = fj.Executor()
    return exe.run(built.main, feed=_fluidjax_feed(built, built.feed), fetch_list=fetch, scope=fj.Scope(),
                   return_numpy=return_numpy)


def _recursive_lengths(lod) -> list[list[int]]:
    return [[b - a for a, b in zip(level, level[1:])] for level in lod]


def _assert_close(actual, expected, rtol, atol, what):
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != expected {expected.shape}"
    if actual.dtype == bool or expected.dtype == bool or np.issubdtype(expected.dtype, np.integer):
        np.testing.assert_array_equal(actual, expected, err_msg=what)
    else:
        np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol, err_msg=what)


def _reference_outputs(case: Case, built: Built, fetch: list[str]) -> list[np.ndarray]:
    if case.paddle:
        import paddle_oracle as po

        return po.run(built.main.serialize(), built.feed, fetch, lods=built.lods)
    ref = case.oracle({k: v for k, v in case.inputs.items()}, case.attrs)
    return [np.asarray(v) for slot in case.outputs for v in _as_list(ref[slot])]


@pytest.mark.parametrize("case", COMPARED, ids=[c.id for c in COMPARED])
def test_forward_and_shapes(case: Case):
    built = Built(case)
    fetch = built.compared_outputs()
    ours = _run_fluidjax(built, fetch)
    if case.lod and not case.paddle:
        # An op Paddle no longer has: the build's LoD levels are the run's (the oracle gives values).
        raw = _run_fluidjax(built, fetch, return_numpy=False)
        for name, value in zip(fetch, raw):
            lod = value.lod() if isinstance(value, fj.LoDTensor) else []
            assert built.main.global_block().var(name).lod_level == len(lod), f"{name}: ran with LoD {lod}"
    elif case.lod:
        # LoD levels: what the build inferred is what the run produced, and the LoD is Paddle's.
        import paddle_oracle as po

        raw = _run_fluidjax(built, fetch, return_numpy=False)
        theirs = po.run_lod(built.main.serialize(), built.feed, fetch, lods=built.lods)
        for name, value, reference in zip(fetch, raw, theirs):
            lod = value.lod() if isinstance(value, fj.LoDTensor) else []
            var = built.main.global_block().var(name)
            assert var.lod_level == len(lod), f"{name}: built with lod_level {var.lod_level}, ran with LoD {lod}"
            assert lod == [list(level) for level in reference.lod()], f"{name}: LoD {lod} vs Paddle's {reference.lod()}"
    # Build-time shapes (batch -1) agree with run-time shapes and dtypes.
    for name, value in zip(fetch, ours):
        var = built.main.global_block().var(name)
        assert len(var.shape) == value.ndim, f"{name}: built with rank {len(var.shape)}, ran with {value.shape}"
        for d, r in zip(var.shape, value.shape):
            assert d < 0 or d == r, f"{name}: inferred {var.shape}, ran with {value.shape}"
        assert var.dtype == dtypes.normalize(value.dtype), f"{name}: inferred {var.dtype}, ran {value.dtype}"
    # Full shape inference with concrete feeds gives the run-time shapes exactly.
    inferred = fj.infer_shapes(built.main, {k: v.shape for k, v in built.feed.items()})
    for name, value in zip(fetch, ours):
        # The number of sequences of a LoD input is not in its shape: those dims stay -1.
        assert all(i == r or (case.lod and i < 0) for i, r in zip(inferred[name], value.shape)) and \
            len(inferred[name]) == value.ndim, f"{name}: infer_shapes gave {inferred[name]}, ran {value.shape}"
    expected = _reference_outputs(case, built, fetch)
    for name, a, e in zip(fetch, ours, expected):
        _assert_close(a, e, case.rtol, case.atol, f"{case.id}: output {name}")


def _output_lods(case: Case, built: Built) -> dict[str, list]:
    """Recursive sequence lengths of the row's LoD outputs (empty for a row without LoD)."""
    if not case.lod:
        return {}
    fetch = built.compared_outputs()
    raw = _run_fluidjax(built, fetch, return_numpy=False)
    return {n: _recursive_lengths(v.lod()) for n, v in zip(fetch, raw) if isinstance(v, fj.LoDTensor) and v.lod()}


def _loss_weights(case: Case, built: Built, values: list[np.ndarray]) -> dict[str, list[np.ndarray]]:
    rng = np.random.default_rng(7)
    weights: dict[str, list[np.ndarray]] = {}
    fetch = built.compared_outputs()
    by_name = dict(zip(fetch, values))
    for slot in case.outputs:
        if slot in case.no_grad_outputs:
            continue
        ws = []
        for name in built.outputs.get(slot, []):
            v = by_name[name]
            if not _is_float(v):
                break
            ws.append(rng.uniform(0.5, 1.5, v.shape).astype(v.dtype))
        else:
            if ws:
                weights[slot] = ws
    return weights


GRADED = [c for c in COMPARED if c.grad != () and registry.get(c.op).grad is not None]


@pytest.mark.parametrize("case", GRADED, ids=[c.id for c in GRADED])
def test_gradients(case: Case):
    forward = Built(case)
    values = _run_fluidjax(forward, forward.compared_outputs())
    weights = _loss_weights(case, forward, values)
    if not weights:
        pytest.skip("no float output to differentiate")
    built = Built(case, weights, _output_lods(case, forward))
    targets = built.grad_inputs()
    if not targets:
        pytest.skip("no float input to differentiate")
    forward_bytes = built.main.serialize()
    with fj.program_guard(built.main, built.startup):
        fj.append_backward(built.main.global_block().var(built.loss.name))
    grad_names = [t + "@GRAD" for t in targets]
    ours = _run_fluidjax(built, grad_names)

    if case.paddle:
        import paddle
        import paddle_oracle as po

        prog = po.parse(forward_bytes)
        with paddle.static.program_guard(prog):
            paddle.static.append_backward(prog.global_block().var(built.loss.name))
        expected = po.run(prog, built.feed, grad_names, lods=built.lods)
        for name, a, e in zip(grad_names, ours, expected):
            _assert_close(a, e, case.grad_rtol, case.grad_atol, f"{case.id}: gradient {name} vs Paddle")

    if all(np.asarray(built.feed[t]).dtype == np.float64 for t in targets):
        _check_finite_differences(built, targets, ours, case)
    elif not case.paddle:
        pytest.skip("float32 row without Paddle: gradients are checked by its float64 rows")


def _check_finite_differences(built: Built, targets, grads, case: Case, eps=1e-6, samples=12):
    exe = fj.Executor()
    scope = fj.Scope()
    rng = np.random.default_rng(3)

    def loss_at(feed):
        (value,) = exe.run(built.main, feed=_fluidjax_feed(built, feed), fetch_list=[built.loss.name], scope=scope)
        return float(value)

    for target, grad in zip(targets, grads):
        base = built.feed[target]
        flat_count = base.size
        picks = rng.choice(flat_count, size=min(samples, flat_count), replace=False)
        for k in picks:
            idx = np.unravel_index(k, base.shape)
            plus, minus = base.copy(), base.copy()
            plus[idx] += eps
            minus[idx] -= eps
            numeric = (loss_at({**built.feed, target: plus}) - loss_at({**built.feed, target: minus})) / (2 * eps)
            np.testing.assert_allclose(grad[idx], numeric, rtol=1e-4, atol=1e-6,
                                       err_msg=f"{case.id}: d loss / d {target}{list(idx)} vs finite differences")


@pytest.mark.parametrize("case", CUSTOM, ids=[c.id for c in CUSTOM])
def test_custom_check(case: Case):
    case.check(case)


def test_every_registered_op_has_a_row():
    covered = {c.op for c in CASES} | set(tested_elsewhere())
    missing = sorted(set(registry.registered_types()) - covered)
    assert not missing, f"registered ops without a row in the op-test table: {missing}"


def test_ops_tested_elsewhere_name_a_test_that_runs_them():
    """An op without a row names the test that checks it: that test exists and builds the op
    (its layer's name or the op's type appears in its body)."""
    import ast
    import pathlib

    root = pathlib.Path(__file__).parent
    for op_type, where in tested_elsewhere().items():
        path, _, name = where.partition("::")
        tree = ast.parse((root.parent / path).read_text())
        funcs = {f.name: f for f in ast.walk(tree) if isinstance(f, ast.FunctionDef)}
        assert name in funcs, f"{op_type}: {where} does not exist"
        body = ast.get_source_segment((root.parent / path).read_text(), funcs[name])
        assert op_type in body, f"{op_type}: {where} does not mention the op (it should build it and say so)"
        assert op_type not in {c.op for c in CASES}, f"{op_type} has a row and a test elsewhere"


def test_every_row_names_a_registered_op():
    unknown = sorted({c.op for c in CASES} - set(registry.registered_types(include_grad=True)))
    assert not unknown, f"op-test rows for ops that are not registered: {unknown}"


def _paddle_protos():
    import paddle  # noqa: F401
    from paddle.base import core
    from paddle.base.proto import framework_pb2 as pb

    return {p.type: p for p in (pb.OpProto.FromString(b) for b in core.get_all_op_protos())}


def test_op_schemas_match_paddle():
    """Every op's slots and attribute types are Paddle's, so Paddle runs our programs and we run its."""
    from fluidjax.ir.registry import ATTR_TYPE_NAMES

    protos = _paddle_protos()
    problems = []
    for op_type in registry.registered_types():
        if op_type in FLUIDJAX_ONLY:
            continue
        if op_type not in protos:
            problems.append(f"{op_type}: Paddle has no such op")
            continue
        proto, opdef = protos[op_type], registry.get(op_type)
        for kind, ours, theirs in (("input", opdef.inputs, proto.inputs), ("output", opdef.outputs, proto.outputs)):
            theirs_by_name = {v.name: v for v in theirs}
            for slot in ours:
                v = theirs_by_name.get(slot.name)
                if v is None:
                    problems.append(f"{op_type}: {kind} {slot.name} is not Paddle's")
                elif v.duplicable != slot.duplicable:
                    problems.append(f"{op_type}: {kind} {slot.name} duplicable={slot.duplicable}, Paddle {v.duplicable}")
            names = {s.name for s in ours}
            for v in theirs:
                if not v.extra and not v.dispensable and v.name not in names:
                    problems.append(f"{op_type}: Paddle's required {kind} {v.name} is missing")
        paddle_attrs = {a.name: a for a in proto.attrs}
        for name, spec in opdef.attrs.items():
            a = paddle_attrs.get(name)
            if a is None:
                problems.append(f"{op_type}: attribute {name} is not Paddle's")
            elif a.type != spec.type_id:
                problems.append(f"{op_type}: attribute {name} is {spec.kind}, Paddle's is {ATTR_TYPE_NAMES.get(a.type)}")
    assert not problems, "\n".join(problems)
