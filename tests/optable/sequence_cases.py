"""Rows of the sequence (LoD) ops: each feeds LoD inputs, with an empty sequence where Paddle allows."""

import numpy as np

from . import Case, rand

_LENS = [[3, 0, 2, 4]]                 # an empty sequence among them
_TWO_LEVELS = [[2, 0, 2], [3, 1, 0, 2]]

CASES = [
    # Paddle's kernel needs the MaxIndex output for MAX (it is where the gradient goes).
    *[Case("sequence_pool", {"X": rand(9, 3)}, {"pooltype": p, "pad_value": 0.25}, lod={"X": _LENS},
           outputs=("Out", "MaxIndex") if p == "MAX" else ("Out",), no_grad_outputs=("MaxIndex",),
           name=p.lower()) for p in ("SUM", "AVERAGE", "SQRT", "MAX", "LAST", "FIRST")],
    Case("sequence_pool", {"X": rand(9, 3, dtype="float64")}, {"pooltype": "AVERAGE"}, lod={"X": _LENS},
         outputs=("Out",), name="average-float64", paddle=True),
    Case("sequence_pool", {"X": rand(6, 2, 2)}, {"pooltype": "SUM"}, lod={"X": _TWO_LEVELS},
         outputs=("Out",), name="sum-two-levels"),
    Case("sequence_pool", {"X": rand(6, 2)}, {"pooltype": "LAST"}, lod={"X": _TWO_LEVELS},
         outputs=("Out",), name="last-two-levels"),
    Case("sequence_softmax", {"X": rand(9, 1)}, lod={"X": _LENS}),
    Case("sequence_softmax", {"X": rand(9, dtype="float64")}, lod={"X": _LENS}, name="1d-float64"),
    Case("sequence_softmax", {"X": rand(6, 1)}, lod={"X": _TWO_LEVELS}, name="two-levels"),
    Case("sequence_reverse", {"X": rand(9, 3)}, lod={"X": _LENS}, outputs=("Y",)),
    Case("sequence_reverse", {"X": rand(9, 2, dtype="float64")}, lod={"X": _LENS}, outputs=("Y",),
         name="float64"),
    Case("sequence_expand_as", {"X": rand(4, 3), "Y": rand(9, 1)}, lod={"Y": _LENS}, grad=("X",)),
    Case("sequence_expand_as", {"X": rand(4, 2, dtype="float64"), "Y": rand(9, 1, dtype="float64")},
         lod={"Y": _LENS}, grad=("X",), name="float64"),
    Case("sequence_concat", {"X": [rand(9, 3), rand(5, 3)]}, lod={"X": [_LENS, [[1, 2, 0, 2]]]}),
    Case("sequence_concat", {"X": [rand(9, 2, dtype="float64"), rand(5, 2, dtype="float64"), rand(3, 2, dtype="float64")]},
         lod={"X": [_LENS, [[1, 2, 0, 2]], [[0, 1, 1, 1]]]}, name="three-float64"),
]

_IDS_LOD = [[3, 0, 2, 4]]


def _offsets(lengths):
    return np.concatenate([[0], np.cumsum(lengths)]).astype(int)


def _sequence_conv_numpy(inputs, attrs):
    """Paddle's context projection: row t sees rows t + contextStart + j of its own sequence."""
    x, w = inputs["X"], inputs["Filter"]
    start, length = attrs["contextStart"], attrs["contextLength"]
    offsets = _offsets(_LENS[0])
    col = np.zeros((x.shape[0], length * x.shape[1]), x.dtype)
    for a, b in zip(offsets, offsets[1:]):
        for t in range(a, b):
            for j in range(length):
                if a <= t + start + j < b:
                    col[t, j * x.shape[1]:(j + 1) * x.shape[1]] = x[t + start + j]
    return {"Out": (col @ w, _LENS)}


def _harness():
    import test_op_table    # the harness's program builder and runners (tests/ is on sys.path)

    return test_op_table


def _check_lod_outputs(case, values, expected, cut=False, fill=0.0):
    """Our fetched LoDTensors against expected (data, recursive lengths or None) pairs.

    ``cut``: our output may be padded past the expected one (a data-dependent size padded to a
    static bound inside a step): the expected part must match, the rest be zeros or, for a LoD,
    trailing empty sequences."""
    for slot, value, (data, lengths) in zip(case.outputs, values, expected):
        ours = np.asarray(value)
        data = np.asarray(data)
        if cut:
            assert ours.ndim == data.ndim and all(a >= b for a, b in zip(ours.shape, data.shape)), \
                f"{case.id}: {slot} shape {ours.shape} does not hold the expected {data.shape}"
            part = ours[tuple(slice(0, d) for d in data.shape)]
            rest = np.ones(ours.shape, bool)
            rest[tuple(slice(0, d) for d in data.shape)] = False
            assert np.all(ours[rest] == fill), f"{case.id}: {slot} holds values other than {fill} past {data.shape}"
        else:
            part = ours
        np.testing.assert_allclose(part, data, rtol=case.rtol, atol=case.atol, err_msg=f"{case.id}: {slot}")
        ours_lod = value.recursive_sequence_lengths() if hasattr(value, "recursive_sequence_lengths") else []
        if lengths is None:
            continue
        assert len(ours_lod) == len(lengths), f"{case.id}: {slot} LoD {ours_lod} vs expected {lengths}"
        for got, want in zip(ours_lod, lengths):
            assert got[:len(want)] == list(want) and (cut or len(got) == len(want)) \
                and not any(got[len(want):]), f"{case.id}: {slot} LoD {ours_lod} vs expected {lengths}"


def _gradients(case, paddle=True):
    """The harness's gradient test, with every LoD output's loss weight fed with that LoD (the
    harness does so only for rows with a LoD input): ours against Paddle's backward (``paddle``)
    and, on a float64 row, against finite differences."""
    h = _harness()
    import fluidjax as fj

    forward = h.Built(case)
    fetch = forward.compared_outputs()
    values = h._run_fluidjax(forward, fetch)
    weights = h._loss_weights(case, forward, values)
    raw = h._run_fluidjax(forward, fetch, return_numpy=False)
    lods = {n: v.recursive_sequence_lengths() for n, v in zip(fetch, raw) if hasattr(v, "lod") and v.lod()}
    built = h.Built(case, weights, lods)
    targets = built.grad_inputs()
    forward_bytes = built.main.serialize()
    with fj.program_guard(built.main, built.startup):
        fj.append_backward(built.main.global_block().var(built.loss.name))
    names = [t + "@GRAD" for t in targets]
    grads = h._run_fluidjax(built, names)
    if paddle:
        import paddle as pd
        import paddle_oracle as po

        prog = po.parse(forward_bytes)
        with pd.static.program_guard(prog):
            pd.static.append_backward(prog.global_block().var(built.loss.name))
        for name, a, e in zip(names, grads, po.run(prog, built.feed, names, lods=built.lods)):
            h._assert_close(a, e, case.grad_rtol, case.grad_atol, f"{case.id}: gradient {name} vs Paddle")
    if all(np.asarray(built.feed[t]).dtype == np.float64 for t in targets):
        h._check_finite_differences(built, targets, grads, case)


def numpy_lod_check(oracle):
    """A ``check`` for a row Paddle 2.6.2 cannot run: outputs and LoD against ``oracle(inputs,
    attrs) -> {slot: (data, recursive lengths or None)}``, build-time lod_level against the run,
    and (float64 rows) gradients against finite differences."""
    def check(case):
        h = _harness()
        built = h.Built(case)
        fetch = built.compared_outputs()
        values = h._run_fluidjax(built, fetch, return_numpy=False)
        expected = oracle(case.inputs, case.attrs)
        _check_lod_outputs(case, values, [expected[s] for s in case.outputs])
        for name, value in zip(fetch, values):
            levels = len(value.lod()) if hasattr(value, "lod") else 0
            assert built.main.global_block().var(name).lod_level == levels, f"{case.id}: {name} lod_level"
        if all(np.asarray(v).dtype == np.float64 for v in case.inputs.values() if np.asarray(v).dtype.kind == "f"):
            _gradients(case, paddle=False)
    return check


def _row_conv_numpy(inputs, attrs):
    """out[t] = sum_k x[t + k] * Filter[k] over the rows of t's own sequence."""
    x, w = inputs["X"], inputs["Filter"]
    lengths = [4, 1, 4]
    offsets = _offsets(lengths)
    out = np.zeros_like(x)
    for a, b in zip(offsets, offsets[1:]):
        for t in range(a, b):
            for k in range(w.shape[0]):
                if t + k < b:
                    out[t] += x[t + k] * w[k]
    return {"Out": (out, [lengths])}


def _im2sequence_numpy(inputs, attrs):
    """Patches (C x kh x kw, channel-major) of each image in row-major order of their place."""
    x = inputs["X"]
    kh, kw = attrs["kernels"]
    rows = []
    for image in x:
        for i in range(image.shape[1] - kh + 1):
            for j in range(image.shape[2] - kw + 1):
                rows.append(image[:, i:i + kh, j:j + kw].reshape(-1))
    return {"Out": np.stack(rows)}


def paddle_lod_check(case, cut=False, fill=0.0, grad="paddle"):
    """A ``check`` for rows the generic harness cannot express (a data-dependent output size):
    outputs and their LoD against Paddle's kernels (``cut``: ours may be padded past Paddle's, see
    :func:`_check_lod_outputs`), build-time lod_level against the run, then the harness's gradient
    test: ``grad="paddle"`` against Paddle's backward (and finite differences on float64 rows),
    ``"fd"`` against finite differences only, None for none."""
    h = _harness()
    import paddle_oracle as po

    built = h.Built(case)
    fetch = built.compared_outputs()
    values = h._run_fluidjax(built, fetch, return_numpy=False)
    theirs = po.run_lod(built.main.serialize(), built.feed, fetch, lods=built.lods)
    expected = [(np.array(t), h._recursive_lengths(t.lod()) if t.lod() else None) for t in theirs]
    _check_lod_outputs(case, values, expected, cut=cut, fill=fill)
    for name, value, t in zip(fetch, values, theirs):
        levels = len(value.lod()) if hasattr(value, "lod") else 0
        assert cut or levels == len(t.lod()), f"{case.id}: {name} has {levels} LoD levels, Paddle's {len(t.lod())}"
        assert built.main.global_block().var(name).lod_level == len(t.lod()), f"{case.id}: {name} lod_level"
    if grad and registry_has_grad(case.op):
        _gradients(case, paddle=grad == "paddle")


def registry_has_grad(op_type):
    from fluidjax.ir import registry

    return registry.get(op_type).grad is not None


def _im2sequence_real_sizes_numpy(inputs, attrs):
    """Image i keeps the patches at (i, j) below its real size / out_stride (rounded up)."""
    x, sizes = inputs["X"], inputs["Y"].astype(int)
    kh, kw = attrs["kernels"]
    sh, sw = attrs.get("strides", [1, 1])
    os_h, os_w = attrs.get("out_stride", [1, 1])
    rows, lengths = [], []
    for image, (h, w) in zip(x, sizes):
        oh = (-(-h // os_h) - kh) // sh + 1
        ow = (-(-w // os_w) - kw) // sw + 1
        for i in range(oh):
            for j in range(ow):
                rows.append(image[:, i * sh:i * sh + kh, j * sw:j * sw + kw].reshape(-1))
        lengths.append(oh * ow)
    return {"Out": (np.stack(rows), [lengths])}


def _int_rows(*values, dtype="int64"):
    return np.asarray(values, dtype).reshape(-1, 1)


CASES += [
    Case("sequence_conv", {"X": rand(9, 3), "Filter": rand(9, 2)},
         {"contextLength": 3, "contextStart": -1, "contextStride": 1}, lod={"X": _LENS}, batch_dims=("X",)),
    Case("sequence_conv", {"X": rand(9, 2, dtype="float64"), "Filter": rand(8, 3, dtype="float64")},
         {"contextLength": 4, "contextStart": -2, "contextStride": 1}, lod={"X": _LENS}, batch_dims=("X",),
         check=numpy_lod_check(_sequence_conv_numpy), name="float64"),   # Paddle 2.6.2's float64 kernel fails
    Case("sequence_conv", {"X": rand(9, 2), "Filter": rand(4, 2)},
         {"contextLength": 2, "contextStart": 1, "contextStride": 1}, lod={"X": _LENS}, batch_dims=("X",),
         name="skip-ahead"),
    *[Case("sequence_conv", {"X": rand(9, 2), "PaddingData": rand(pad, 2), "Filter": rand(2 * n, 3)},
           {"contextLength": n, "contextStart": start, "contextStride": 1, "paddingTrainable": True},
           lod={"X": _LENS}, batch_dims=("X",), name=f"trainable-padding-{n}-{start}")
      for n, start, pad in ((3, -1, 2), (4, -3, 3), (3, 1, 3), (2, 0, 1), (5, -2, 4), (2, 3, 4), (6, -2, 5))],
    Case("row_conv", {"X": rand(9, 3), "Filter": rand(2, 3)}, lod={"X": [[3, 1, 2, 3]]}, batch_dims=("X",)),
    Case("row_conv", {"X": rand(9, 2, dtype="float64"), "Filter": rand(3, 2, dtype="float64")},
         lod={"X": [[4, 1, 4]]}, batch_dims=("X",), check=numpy_lod_check(_row_conv_numpy),
         name="float64"),                              # Paddle 2.6.2 has no float64 row_conv kernel
    Case("row_conv", {"X": rand(2, 5, 3), "Filter": rand(3, 3)}, name="dense"),
    Case("sequence_enumerate", {"X": _int_rows(*range(1, 10))}, {"win_size": 3, "pad_value": -1}, lod={"X": _LENS}),
    Case("sequence_enumerate", {"X": _int_rows(5, 4, 3, 2, 1, 0, 7, 8, 9, dtype="int32")}, {"win_size": 2},
         lod={"X": [[0, 5, 0, 4]]}, name="int32"),
    Case("im2sequence", {"X": rand(2, 2, 4, 5)}, {"kernels": [2, 3], "strides": [1, 2], "paddings": [0, 1, 1, 0]}),
    Case("im2sequence", {"X": rand(2, 1, 3, 3, dtype="float64")}, {"kernels": [2, 2]}, paddle=False,
         oracle=_im2sequence_numpy, name="float64"),          # Paddle 2.6.2 has no float64 kernel
    Case("lookup_table", {"W": rand(10, 4), "Ids": _int_rows(1, 2, 3, 9, 0, 4, 4, 7, 5)}, lod={"Ids": _LENS},
         name="lod"),
    Case("lookup_table_v2", {"Ids": _int_rows(1, 2, 3, 9, 0, 4, 4, 7, 5).reshape(-1), "W": rand(10, 3, dtype="float64")},
         {"padding_idx": 4}, lod={"Ids": _LENS}, name="lod-float64"),
]

CASES += [
    Case("sequence_pad", {"X": rand(9, 3), "PadValue": np.array([0.5], "float32")}, {"padded_length": 5},
         lod={"X": _LENS}, outputs=("Out", "Length"), no_grad_outputs=("Length",), batch_dims=("X",)),
    Case("sequence_pad", {"X": rand(9, 2, 2, dtype="float64"), "PadValue": rand(2, 2, dtype="float64")},
         {"padded_length": 4}, lod={"X": _LENS}, outputs=("Out", "Length"), no_grad_outputs=("Length",),
         batch_dims=("X",), name="row-pad-float64"),
    # No LoD input, a LoD output: the harness's shape check wants the row count known, it is data.
    Case("sequence_unpad", {"X": rand(4, 5, 3), "Length": np.array([3, 0, 5, 2], "int64")},
         check=lambda case: paddle_lod_check(case)),
    Case("sequence_unpad", {"X": rand(3, 4, dtype="float64"), "Length": np.array([2, 4, 0], "int64")},
         check=lambda case: paddle_lod_check(case), name="2d-float64"),
    Case("sequence_mask", {"X": np.array([[2, 0], [3, 1]], "int64")}, {"maxlen": 4, "out_dtype": 5}, outputs=("Y",)),
    Case("sequence_mask", {"X": np.array([2, 0, 3, 5], "int32")}, {"maxlen": 5, "out_dtype": 3}, outputs=("Y",),
         name="int64-out"),
    Case("sequence_mask", {"X": np.array([2, 0, 3], "int64")}, {"maxlen": 3, "out_dtype": 0}, outputs=("Y",),
         name="bool-out"),
    Case("sequence_slice", {"X": rand(9, 3), "Offset": _int_rows(1, 0, 0, 2), "Length": _int_rows(2, 0, 1, 2)},
         lod={"X": _LENS}, batch_dims=("X",)),
    Case("sequence_slice", {"X": rand(9, 2, dtype="float64"), "Offset": _int_rows(0, 0, 1, 0),
                            "Length": _int_rows(3, 0, 0, 4)}, lod={"X": _LENS}, batch_dims=("X",), name="float64"),
    Case("sequence_reshape", {"X": rand(9, 2)}, {"new_dim": 1}, lod={"X": _LENS}),
    Case("sequence_reshape", {"X": rand(6, 2, dtype="float64")}, {"new_dim": 4}, lod={"X": [[2, 0, 4]]},
         name="float64"),
    Case("sequence_reshape", {"X": rand(6, 4)}, {"new_dim": 2}, lod={"X": [[1, 0, 3, 2]]}, name="split-rows"),
    # 8 padded rows of width 2 are 16 values: not whole rows of 3, the last row is zero-filled.
    Case("sequence_reshape", {"X": rand(6, 2)}, {"new_dim": 3}, lod={"X": [[3, 0, 3]]}, name="uneven-padding"),
    Case("sequence_erase", {"X": _int_rows(1, 2, 3, 1, 5, 2, 7, 1, 0)}, {"tokens": [1, 2]}, lod={"X": _LENS}),
    Case("sequence_erase", {"X": _int_rows(4, 4, 3, 0, 4, 9, dtype="int32")}, {"tokens": [4]},
         lod={"X": [[2, 1, 0, 3]]}, name="int32-emptied"),
    Case("lod_reset", {"X": rand(9, 2)}, {"target_lod": [0, 4, 4, 9]}, lod={"X": _LENS}),
    Case("lod_reset", {"X": rand(9, 2, dtype="float64"), "Y": np.array([0, 1, 1, 9], "int32")},
         lod={"X": _LENS}, batch_dims=("X",), name="y-offsets-float64"),
    Case("lod_reset", {"X": rand(9, 2), "Y": rand(9, 1)}, lod={"X": _LENS, "Y": [[2, 0, 1], [5, 0, 4]]},
         grad=("X",), name="y-lod"),
    Case("lod_reset", {"X": rand(9, 2)}, {"target_lod": [0, 4, 9], "append": True}, name="append-dense"),
    Case("lod_reset", {"X": rand(5, 3)}, {"target_lod": [0, 2, 2, 5]}, name="dense"),
]

_TWO_LEVEL_REF = [[2, 0, 1], [1, 2, 3]]

# Output sizes that are data (rows of a sequence_expand, the longest sequence for padded_length -1)
# are padded to a static bound inside a step: these rows compare the real part with Paddle's and
# check that the rest is padding (zeros, trailing empty sequences, PadValue).
CASES += [
    Case("sequence_expand", {"X": rand(4, 2), "Y": rand(6, 1)}, {"ref_level": 0},
         lod={"X": [[2, 0, 1, 1]], "Y": [[2, 0, 1, 3]]}, check=lambda case: paddle_lod_check(case, cut=True)),
    Case("sequence_expand", {"X": rand(4, 3), "Y": rand(6, 1)}, lod={"Y": [[2, 0, 1, 3]]},
         check=lambda case: paddle_lod_check(case, cut=True), name="dense-x"),
    Case("sequence_expand", {"X": rand(3, 2, dtype="float64"), "Y": rand(6, 1, dtype="float64")}, {"ref_level": 0},
         lod={"Y": _TWO_LEVEL_REF}, check=lambda case: paddle_lod_check(case, cut=True),
         name="dense-x-level0-float64"),
    # (A plain X's output is plain in Paddle; ours holds its real row count as a one-sequence LoD
    # value, and ops after it that act row by row keep that count: the loss's `mean` sees only it.)
    Case("sequence_expand", {"X": rand(5, 2, dtype="float64"), "Y": rand(6, 1, dtype="float64")}, {"ref_level": 0},
         lod={"X": [[2, 1, 2]], "Y": _TWO_LEVEL_REF}, check=lambda case: paddle_lod_check(case, cut=True),
         name="level0-float64"),
    Case("sequence_expand", {"X": rand(4, 2), "Y": rand(6, 1)}, {"ref_level": 1},
         lod={"X": [[1, 0, 2, 1]], "Y": [[1, 3], [2, 0, 1, 3]]}, check=lambda case: paddle_lod_check(case, cut=True),
         name="inner-level"),
    Case("sequence_pad", {"X": rand(9, 3), "PadValue": np.array([-2.0], "float32")}, lod={"X": _LENS},
         outputs=("Out", "Length"), no_grad_outputs=("Length",), batch_dims=("X",),
         check=lambda case: paddle_lod_check(case, cut=True, fill=-2.0, grad=None), name="longest"),
    Case("sequence_pad", {"X": rand(9, 2, dtype="float64"), "PadValue": np.array([0.0])}, lod={"X": _LENS},
         outputs=("Out", "Length"), no_grad_outputs=("Length",), batch_dims=("X",),
         check=lambda case: paddle_lod_check(case, cut=True, grad="fd"), name="longest-float64"),
]

# im2sequence with Y, the real size of each (padded) image: its number of rows is data. Paddle's
# backward ignores Y (it is for inference), so the gradient is checked by finite differences.
CASES += [
    Case("im2sequence", {"X": rand(2, 1, 4, 5), "Y": np.array([[3, 4], [4, 2]], "float32")},
         {"kernels": [2, 2]}, check=lambda case: paddle_lod_check(case, cut=True, grad=None), name="real-sizes"),
    Case("im2sequence", {"X": rand(3, 2, 5, 5), "Y": np.array([[5, 3], [3, 5], [4, 4]], "float32")},
         {"kernels": [2, 2], "strides": [1, 1], "out_stride": [2, 1]},
         check=lambda case: paddle_lod_check(case, cut=True, grad=None), name="real-sizes-out-stride"),
    Case("im2sequence", {"X": rand(2, 2, 5, 4, dtype="float64"), "Y": np.array([[5, 3], [3, 4]], "float64")},
         {"kernels": [2, 2], "strides": [2, 1], "out_stride": [1, 1]},
         check=numpy_lod_check(_im2sequence_real_sizes_numpy), name="real-sizes-float64"),
]
