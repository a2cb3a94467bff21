"""Op-table rows of Fluid 1.8's feature, sequence and random ops added in issue 20 (bilinear_tensor_product,
fsp, iou_similarity, spectral_norm, add_position_encoding, sequence_scatter, similarity_focus, the random
ops): checked against Paddle 2.6.2's CPU kernels (outputs and gradients); the ops Paddle 2.6 no longer
registers (space_to_depth, pad_constant_like, random_crop, gaussian_random_batch_size_like) against NumPy
written from Fluid 1.8's kernels, float64 rows against finite differences. Random ops give a ``check``:
the properties of their numbers (range, statistics, permutation, frequencies), in fluidjax and, where
Paddle still has the kernel, in Paddle running the same serialized program."""

from __future__ import annotations

import numpy as np

import fluidjax as fj
from fluidjax.ir import dtypes
from optable import Case, own_stream

rand, _ = own_stream(2027)   # these rows leave the shared stream as it was


def _boxes(n, dtype="float32"):
    lo = rand(n, 2, low=0.0, high=0.5)
    return np.concatenate([lo, lo + rand(n, 2, low=0.1, high=0.5)], 1).astype(dtype)


def _space_to_depth_ref(inputs, attrs):
    """Fluid 1.8's space_to_depth_compute, element by element (forward = 1)."""
    x, bs = inputs["X"], attrs["blocksize"]
    b_, c, h, w = x.shape
    flat, out = x.reshape(-1), np.empty(x.size, x.dtype)
    out_c = c // (bs * bs)
    for in_index in range(x.size):
        b = in_index // (c * h * w)
        k = (in_index % (c * h * w)) // (h * w)
        j = (in_index % (h * w)) // w
        i = in_index % w
        c2, offset = k % out_c, k // out_c
        w2, h2 = i * bs + offset % bs, j * bs + offset // bs
        out[w2 + w * bs * (h2 + h * bs * (c2 + out_c * b))] = flat[in_index]
    return {"Out": out.reshape(b_, c * bs * bs, h // bs, w // bs)}


def _spectral_norm_ref(inputs, attrs):
    """Fluid's documented power iteration: v = W^T u / (|W^T u| + eps), u = W v / (|W v| + eps)."""
    w, u, v = inputs["Weight"], inputs["U"], inputs["V"]
    dim, eps = attrs["dim"], attrs.get("eps", 1e-12)
    mat = np.moveaxis(w, dim, 0).reshape(w.shape[dim], -1)
    for _ in range(attrs["power_iters"]):
        v = mat.T @ u
        v = v / (np.linalg.norm(v) + eps)
        u = mat @ v
        u = u / (np.linalg.norm(u) + eps)
    return {"Out": w / (u @ mat @ v)}


def _pad_like_ref(inputs, attrs):
    x, y = inputs["X"], inputs["Y"]
    return {"Out": np.pad(y, [(0, a - b) for a, b in zip(x.shape, y.shape)],
                          constant_values=attrs.get("pad_value", 0.0)).astype(y.dtype)}


CASES = [
    Case("bilinear_tensor_product", {"X": rand(4, 3), "Y": rand(4, 5), "Weight": rand(2, 3, 5), "Bias": rand(1, 2)},
         batch_dims=("X", "Y")),
    Case("bilinear_tensor_product", {"X": rand(3, 2, dtype="float64"), "Y": rand(3, 4, dtype="float64"),
                                     "Weight": rand(3, 2, 4, dtype="float64")}, batch_dims=("X", "Y"),
         name="nobias-f64", paddle=False,   # Paddle 2.6.2's grad maker needs a Bias: NumPy and finite differences
         oracle=lambda i, a: {"Out": np.einsum("bm,imn,bn->bi", i["X"], i["Weight"], i["Y"])}),
    Case("fsp", {"X": rand(2, 3, 4, 5), "Y": rand(2, 6, 4, 5)}),
    Case("fsp", {"X": rand(2, 2, 3, 3, dtype="float64"), "Y": rand(2, 3, 3, 3, dtype="float64")}, name="f64"),
    Case("iou_similarity", {"X": _boxes(5), "Y": _boxes(3)}, grad=(), batch_dims=("X",)),
    Case("iou_similarity", {"X": _boxes(4) * 20, "Y": _boxes(6) * 20}, {"box_normalized": False}, grad=(),
         batch_dims=("X",), name="pixels"),
    Case("iou_similarity", {"X": _boxes(5), "Y": _boxes(3)}, grad=(), lod={"X": [[2, 3]]}, name="lod"),
    # Paddle's spectral_norm_grad kernel computes dOut * (1 - u v^T * sum(W / sigma)) / sigma, which is not
    # the derivative of W / sigma (finite differences disagree with it): the forward is checked against
    # Paddle, the gradient (W / sigma's, u and v held fixed) against finite differences of NumPy's forward
    # with enough iterations for u, v to converge (before that, holding them fixed is not the full
    # derivative of the iteration).
    Case("spectral_norm", {"Weight": rand(4, 6), "U": rand(4), "V": rand(6)}, {"dim": 0, "power_iters": 2},
         grad=(), batch_dims=()),
    # (+ 1: a dominant singular value, so 30 iterations converge to double precision)
    Case("spectral_norm", {"Weight": rand(3, 4, 2, dtype="float64") + 1.0, "U": rand(4, dtype="float64"),
                           "V": rand(6, dtype="float64")}, {"dim": 1, "power_iters": 30}, grad=("Weight",),
         batch_dims=(), name="dim1-f64", paddle=False, oracle=lambda i, a: _spectral_norm_ref(i, a)),
    Case("add_position_encoding", {"X": rand(2, 4, 6)}, {"alpha": 0.5, "beta": 2.0}),
    Case("add_position_encoding", {"X": rand(7, 8, dtype="float64")}, {"alpha": 1.5, "beta": 0.5},
         lod={"X": [[3, 4]]}, name="lod-f64"),
    Case("add_position_encoding", {"X": rand(5, 2)}, lod={"X": [[5]]}, name="half1"),
    Case("sequence_scatter", {"X": rand(3, 6), "Ids": np.array([[0], [2], [5], [1], [1], [3]], "int64"),
                              "Updates": rand(6, 1)}, lod={"Ids": [[2, 3, 1]], "Updates": [[2, 3, 1]]},
         grad=("X", "Updates"), batch_dims=()),
    Case("similarity_focus", {"X": rand(2, 3, 4, 5)}, {"axis": 1, "indexes": [0, 2]}, grad=()),
    Case("similarity_focus", {"X": rand(2, 3, 4, 5)}, {"axis": 2, "indexes": [1]}, grad=(), name="axis2"),
    Case("similarity_focus", {"X": rand(1, 3, 4, 2, dtype="float64")}, {"axis": 3, "indexes": [0, 1]}, grad=(),
         name="axis3-f64"),
    # Fluid 1.x ops that Paddle 2.6 no longer has: NumPy from Fluid 1.8's kernels
    Case("space_to_depth", {"X": rand(2, 8, 4, 6)}, {"blocksize": 2}, paddle=False, oracle=_space_to_depth_ref),
    Case("space_to_depth", {"X": rand(1, 9, 3, 6, dtype="float64")}, {"blocksize": 3}, paddle=False,
         oracle=_space_to_depth_ref, name="bs3-f64"),
    Case("pad_constant_like", {"X": rand(4, 5, 3), "Y": rand(2, 5, 1)}, {"pad_value": 1.5}, paddle=False,
         oracle=_pad_like_ref, grad=("Y",), batch_dims=()),
    Case("pad_constant_like", {"X": rand(3, 4, dtype="float64"), "Y": rand(3, 2, dtype="float64")}, paddle=False,
         oracle=_pad_like_ref, grad=("Y",), batch_dims=(), name="f64"),
]


# -- random ops ------------------------------------------------------------------------------------
def _run_op(op_type, inputs, attrs, outputs=("Out",), *, paddle=False, seed=0):
    """Run one op in fluidjax (and in Paddle on the same program bytes): ([ours], [theirs] or None)."""
    main = fj.Program()
    main.random_seed = seed
    block = main.global_block()
    feed, ins = {}, {}
    for slot, value in inputs.items():
        var = block.create_var(f"in_{slot}", value.shape, str(value.dtype))
        ins[slot], feed[var.name] = var, value
    outs = {s: block.create_var(f"out_{s}", (), "float32") for s in outputs}
    block.append_op(op_type, ins, outs, attrs)
    names = [v.name for v in outs.values()]
    ours = fj.Executor().run(main, feed=feed, fetch_list=names, scope=fj.Scope())
    for v, value in zip(outs.values(), ours):
        assert tuple(v.shape) == value.shape or -1 in v.shape, (v.shape, value.shape)
    theirs = None
    if paddle:
        import paddle_oracle as po
        theirs = po.run(main.serialize(), feed, names)
    return ours, theirs


def _moments(v, mean, std, lo, hi, who):
    v = np.asarray(v, np.float64)
    assert v.min() >= lo and v.max() < hi, f"{who}: values outside [{lo}, {hi})"
    assert abs(v.mean() - mean) < 0.03 * std * 3, f"{who}: mean {v.mean()} vs {mean}"
    assert abs(v.std() - std) < 0.03 * std * 2, f"{who}: std {v.std()} vs {std}"


def _check_uniform_bsl(case):
    x = np.zeros((7, 3), "float32")
    attrs = {"shape": [-1, 30000], "min": -2.0, "max": 3.0, "dtype": 5, "input_dim_idx": 0, "output_dim_idx": 0}
    ours, theirs = _run_op("uniform_random_batch_size_like", {"Input": x}, attrs, paddle=True)
    for who, (v,) in (("fluidjax", ours), ("paddle", theirs)):
        assert v.shape == (7, 30000) and v.dtype == np.float32, (who, v.shape)
        _moments(v, 0.5, 5 / np.sqrt(12), -2.0, 3.0, who)
    (again,), _ = _run_op("uniform_random_batch_size_like", {"Input": x}, {**attrs, "seed": 5})
    (same,), _ = _run_op("uniform_random_batch_size_like", {"Input": x}, {**attrs, "seed": 5})
    np.testing.assert_array_equal(again, same)
    (moved,), _ = _run_op("uniform_random_batch_size_like", {"Input": x},
                          {**attrs, "shape": [4, 1, 2], "input_dim_idx": 1, "output_dim_idx": 2, "dtype": 6})
    assert moved.shape == (4, 1, 3) and moved.dtype == np.float64


def _check_gaussian_bsl(case):
    x = np.zeros((3, 5), "float32")
    attrs = {"shape": [40000, -1], "mean": 1.5, "std": 2.0, "dtype": 5, "input_dim_idx": 0, "output_dim_idx": 1}
    (v,), _ = _run_op("gaussian_random_batch_size_like", {"Input": x}, attrs)
    assert v.shape == (40000, 3) and v.dtype == np.float32
    _moments(v, 1.5, 2.0, -np.inf, np.inf, "fluidjax")
    assert abs(np.mean(np.abs(v - 1.5) < 2.0) - 0.6827) < 0.01


def _check_randperm(case):
    for dtype in (3, 2):
        ours, theirs = _run_op("randperm", {}, {"n": 50, "dtype": dtype}, paddle=True)
        for who, (v,) in (("fluidjax", ours), ("paddle", theirs)):
            assert v.dtype == dtypes.to_numpy(dtypes.from_enum(dtype)), (who, v.dtype)
            assert sorted(v.tolist()) == list(range(50)), who
    # 200 runs of one unseeded program (each run draws with a new key; one compilation, where a
    # program per seed compiled 200 times)
    main = fj.Program()
    out = main.global_block().create_var("perm", (4,), "int64")
    main.global_block().append_op("randperm", {}, {"Out": out}, {"n": 4, "dtype": 3})
    exe, scope = fj.Executor(), fj.Scope()
    firsts = np.array([exe.run(main, fetch_list=["perm"], scope=scope)[0][0] for _ in range(200)])
    counts = np.bincount(firsts, minlength=4)
    assert counts.min() > 25, f"the first entry is not uniform over 0..3: {counts}"
    a, b = (_run_op("randperm", {}, {"n": 50, "dtype": 3}, seed=9)[0][0] for _ in range(2))
    np.testing.assert_array_equal(a, b)


def _check_sampling_id(case):
    p = np.array([0.1, 0.6, 0.3], "float32")
    x = np.tile(p, (20000, 1))
    ours, theirs = _run_op("sampling_id", {"X": x}, {"min": 0.0, "max": 1.0}, paddle=True)
    for who, (v,) in (("fluidjax", ours), ("paddle", theirs)):
        assert v.shape == (20000,) and v.dtype == np.int64, (who, v.shape, v.dtype)
        freq = np.bincount(v, minlength=3) / v.size
        np.testing.assert_allclose(freq, p, atol=0.015, err_msg=who)
    # a one-hot row always gives its class; r beyond the row's sum gives the last column
    onehot = np.eye(4, dtype="float32")[[2, 0, 3, 1]]
    (v,), (t,) = _run_op("sampling_id", {"X": onehot}, {}, paddle=True)
    assert v.tolist() == t.tolist() == [2, 0, 3, 1]
    (v,), _ = _run_op("sampling_id", {"X": np.full((5, 3), 0.1, "float32")}, {"min": 0.5, "max": 0.9})
    assert v.tolist() == [2] * 5


def _check_random_crop(case):
    x = np.arange(2 * 3 * 6 * 7, dtype="float32").reshape(2, 3, 6, 7)
    starts = set()
    for seed in range(1, 13):
        (out,), _ = _run_op("random_crop", {"X": x}, {"shape": [4, 5]}, seed=seed)
        assert out.shape == (2, 3, 4, 5)
        for n in range(2):
            for c in range(3):
                r0, c0 = divmod(int(out[n, c, 0, 0]) - int(x[n, c, 0, 0]), 7)
                assert 0 <= r0 <= 2 and 0 <= c0 <= 2
                np.testing.assert_array_equal(out[n, c], x[n, c, r0:r0 + 4, c0:c0 + 5])
                starts.add((r0, c0))
    assert len(starts) > 3, f"crops do not move: {starts}"


CASES += [
    Case("uniform_random_batch_size_like", check=_check_uniform_bsl),
    Case("gaussian_random_batch_size_like", check=_check_gaussian_bsl),
    Case("randperm", check=_check_randperm),
    Case("sampling_id", check=_check_sampling_id),
    Case("random_crop", check=_check_random_crop),
]
