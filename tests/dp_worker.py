"""Data-parallel checks that need several devices, run in a process of their own.

``tests/test_data_parallel.py`` starts this script with ``XLA_FLAGS=--xla_force_host_platform_device_count=8``
(the test session itself keeps one device) and reads the JSON it prints on its last line. For each
model (an MLP and a small residual conv net with batch norm) it trains 20 Adam steps on one device
and then data-parallel under each sharding mode, from the same initial parameters and batches,
and reports: the losses and final parameters of both, the collectives of one compiled step, and
the bytes of state each device holds. The test makes the assertions; this only measures.

Also usable by hand: ``python tests/dp_worker.py [--models mlp,convnet] [--steps 20]``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

if "jax" not in sys.modules and "--xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()

import jax  # noqa: E402
import numpy as np  # noqa: E402

import fluidjax as fj  # noqa: E402
from fluidjax import layer  # noqa: E402
from fluidjax.lowering.parallel import collectives, state_roles  # noqa: E402

MODES = ("none", "optimizer", "full")
BATCH = 32
# At lr 0.01 this net's float32 training is chaotic: reordering the rows of each batch on one
# device moves its state by 19% in 20 steps. At 0.001 float32 rounding stays near 1e-5.
CONV_LR = 0.001


def build_mlp():
    """784-ish MLP shrunk for a 2-core machine: 64-128-10, relu, softmax, cross entropy, Adam."""
    main, startup = fj.Program(), fj.Program()
    main.random_seed = startup.random_seed = 11
    with fj.program_guard(main, startup):
        x = layer.data("x", input_size=64)
        y = layer.data("y", dims=1, dtype="int64")
        h = layer.fc(x, 128, activation="relu")
        p = layer.fc(h, 10, activation="softmax")
        cost = layer.mean(layer.cross_entropy(p, y))
        fj.optimizer.Adam(learning_rate=0.01).minimize(cost)
    rng = np.random.default_rng(0)

    def batch(_):
        return {"x": rng.standard_normal((BATCH, 64)).astype(np.float32),
                "y": rng.integers(0, 10, (BATCH, 1)).astype(np.int64)}
    return main, startup, cost, batch


def build_convnet(dtype: str = "float32", side: int = 16):
    """A small ResNet: conv-bn-relu stem, two residual blocks (conv-bn-relu, conv-bn, add, relu),
    global average pool, fc softmax; 3 x side x side images, 10 classes, Adam."""
    main, startup = fj.Program(), fj.Program()
    main.random_seed = startup.random_seed = 12
    with fj.program_guard(main, startup):
        img = layer.data("img", shape=[3, side, side], dtype=dtype)
        y = layer.data("y", dims=1, dtype="int64")

        def conv_bn(x, channels, relu):
            c = layer.conv2d(x, channels, 3, padding=1, bias_attr=False)
            return layer.batch_norm(c, activation="relu" if relu else None)

        h = conv_bn(img, 16, True)
        for _ in range(2):
            r = conv_bn(conv_bn(h, 16, True), 16, False)
            h = layer.relu(layer.elementwise_add(h, r))
        pooled = layer.pool2d(h, pool_type="avg", global_pooling=True)
        p = layer.fc(pooled, 10, activation="softmax")
        cost = layer.mean(layer.cross_entropy(p, y))
        fj.optimizer.Adam(learning_rate=CONV_LR).minimize(cost)
    rng = np.random.default_rng(1)

    def batch(_):
        return {"img": rng.standard_normal((BATCH, 3, side, side)).astype(dtype),
                "y": rng.integers(0, 10, (BATCH, 1)).astype(np.int64)}
    return main, startup, cost, batch


MODELS = {"mlp": build_mlp, "convnet": build_convnet, "convnet64": lambda: build_convnet("float64", side=8)}
# Float64 convolutions are slow on XLA's CPU backend: the float64 net (an exactness check: float32
# rounding cannot hide a wrong partitioning there) trains fewer steps.
STEPS = {"convnet64": 6}


def state_names(program) -> list[str]:
    block = program.global_block()
    return sorted(n for n, v in block.vars.items() if v.persistable and v.type == fj.ir.dtypes.LOD_TENSOR
                  and not v.is_data and v.dtype is not None and "feed" not in n and "fetch" not in n)


def train(program, startup, cost, batches, steps: int):
    """Losses and final state of ``steps`` runs of ``program`` (a Program or CompiledProgram)."""
    exe, scope = fj.Executor(), fj.Scope()
    exe.run(startup, scope=scope)
    losses = [float(exe.run(program, feed=batches[i], fetch_list=[cost], scope=scope)[0]) for i in range(steps)]
    return exe, scope, losses


def scope_arrays(scope, names):
    out = {}
    for name in names:
        holder = scope.find_var(name)
        if holder is not None and holder.get_tensor()._is_initialized():
            out[name] = holder.get_tensor()._value
    return out


def max_rel(a: dict, b: dict) -> float:
    worst = 0.0
    for name in a:
        x, y = np.asarray(a[name], np.float64), np.asarray(b[name], np.float64)
        scale = max(np.abs(x).max(), 1e-30) if x.size else 1.0
        worst = max(worst, float(np.abs(x - y).max() / scale) if x.size else 0.0)
    return worst


def per_device_bytes(arrays: dict, names) -> dict:
    """Bytes of ``names``' values on device 0 and in all (one copy) — from the arrays' shards."""
    on_device = total = 0
    split = []
    for name in names:
        arr = arrays[name]
        shard = [s for s in arr.addressable_shards if s.device == jax.devices()[0]][0]
        on_device += shard.data.nbytes
        total += arr.nbytes
        if shard.data.nbytes < arr.nbytes:
            split.append([name, int(shard.data.nbytes), int(arr.nbytes)])
    return {"device0": int(on_device), "total": int(total), "split": split}


def resume_check(main, startup, cost, mode, batches, steps, names, ref_losses, ref_state) -> dict:
    """Train half the steps sharded, save with ``fj.io.save_persistables``, load into a fresh
    one-device scope and train the other half there: the numbers of one device all along?"""
    import tempfile
    half = steps // 2
    compiled = fj.CompiledProgram(main, fj.BuildStrategy(sharding=mode)).with_data_parallel()
    exe, scope, first = train(compiled, startup, cost, batches, half)
    with tempfile.TemporaryDirectory() as tmp:
        fj.io.save_persistables(exe, tmp, main, scope=scope)
        exe2, scope2 = fj.Executor(), fj.Scope()
        exe2.run(startup, scope=scope2)          # other values, which the checkpoint replaces
        fj.io.load_persistables(exe2, tmp, main, scope=scope2)
    rest = [float(exe2.run(main, feed=batches[i], fetch_list=[cost], scope=scope2)[0]) for i in range(half, steps)]
    arrays = scope_arrays(scope2, names)
    return {"resumed_loss_rel": max(abs(a - b) / max(abs(b), 1e-30) for a, b in zip(first + rest, ref_losses)),
            "resumed_state_rel": max_rel(ref_state, {k: np.asarray(v) for k, v in arrays.items()}),
            "resumed_single_device": all(len(v.sharding.device_set) == 1 for v in arrays.values())}


def alternating_check(main, startup, cost, mode, batches, ref_losses) -> float:
    """Sharded and one-device runs in turn on one scope, with an Executor bound to a place (as
    an evaluation program run between data-parallel training steps): one device's losses?"""
    exe, scope = fj.Executor(fj.CPUPlace()), fj.Scope()
    exe.run(startup, scope=scope)
    compiled = fj.CompiledProgram(main, fj.BuildStrategy(sharding=mode)).with_data_parallel()
    losses = [float(exe.run(compiled if i % 2 == 0 else main, feed=batches[i], fetch_list=[cost], scope=scope)[0])
              for i in range(6)]
    return max(abs(a - b) / max(abs(b), 1e-30) for a, b in zip(losses, ref_losses))


def check_model(name: str, steps: int) -> dict:
    main, startup, cost, make_batch = MODELS[name]()
    batches = [make_batch(i) for i in range(steps)]
    names = state_names(main)
    _, scope, ref_losses = train(main, startup, cost, batches, steps)
    ref_state = {k: np.asarray(v) for k, v in scope_arrays(scope, names).items()}
    result = {"devices": jax.device_count(), "modes": {}}
    for mode in MODES:
        compiled = fj.CompiledProgram(main, fj.BuildStrategy(sharding=mode)).with_data_parallel(loss_name=cost.name)
        exe, scope, losses = train(compiled, startup, cost, batches, steps)
        arrays = scope_arrays(scope, names)
        plan = next(p for p in exe._plans.values() if p.place_state is not None)
        params, accumulators = state_roles(plan)
        hlo = exe.lower(compiled, feed=batches[0], fetch_list=[cost], scope=scope).compile().as_text()
        trained = {op.inputs["Param"][0] for op in plan.ops if "Param" in op.inputs and "ParamOut" in op.outputs}
        grads = {n + "@GRAD" for n in trained}
        grad_bytes = sum(int(arrays[n].nbytes) for n in trained)
        param_bytes = sum(arrays[n].nbytes for n in params)
        # A bad batch: refused before anything runs, the scope as it was.
        before = {k: np.asarray(v) for k, v in scope_arrays(scope, names).items()}
        bad = {k: v[:BATCH - 2] for k, v in batches[0].items()}
        try:
            exe.run(compiled, feed=bad, fetch_list=[cost], scope=scope)
            bad_error = None
        except fj.FeedError as exc:
            bad_error = str(exc)
        after = {k: np.asarray(v) for k, v in scope_arrays(scope, names).items()}
        resumed = {} if name != "mlp" else {
            **resume_check(main, startup, cost, mode, batches, steps, names, ref_losses, ref_state),
            "alternating_loss_rel": alternating_check(main, startup, cost, mode, batches, ref_losses)}
        result["modes"][mode] = {
            **resumed,
            "loss_rel": max(abs(a - b) / max(abs(b), 1e-30) for a, b in zip(losses, ref_losses)),
            "state_rel": max_rel(ref_state, {k: np.asarray(v) for k, v in arrays.items()}),
            "losses": losses,
            "collectives": collectives(hlo),
            "grad_bytes": grad_bytes, "param_bytes": int(param_bytes), "n_grads": len(grads),
            "params": per_device_bytes(arrays, sorted(params)),
            "accumulators": per_device_bytes(arrays, sorted(accumulators)),
            "n_accumulators": len(accumulators),
            "specs": {k: str(arrays[k].sharding.spec) for k in sorted(params | accumulators)},
            "bad_batch_error": bad_error,
            "bad_batch_scope_unchanged": all(np.array_equal(before[k], after[k]) for k in before),
        }
    result["ref_losses"] = ref_losses
    return result


def distributed_run(out_prefix: str, steps: int, modes) -> None:
    """One process of a multi-process run (started by ``fluidjax.distributed.launch``): trains the
    MLP data-parallel under each of ``modes``, feeding only this process's rows of every global
    batch, and writes ``<out_prefix>.<rank>.json`` with its losses and the whole final state.

    Each process first moves its own initial parameters away from the others' (process p adds p
    to every parameter): the run must start from process 0's, broadcast on the first step.
    """
    fj.distributed.init()
    rank, nproc = jax.process_index(), jax.process_count()
    local = BATCH // nproc
    result = {"rank": rank, "nproc": nproc, "devices": jax.device_count(),
              "local_devices": jax.local_device_count(), "modes": {}}
    for mode in modes:
        with fj.unique_name.guard():      # the same variable names in every mode
            main, startup, cost, make_batch = build_mlp()
        batches = [make_batch(i) for i in range(steps)]
        names = state_names(main)
        exe, scope = fj.Executor(), fj.Scope()
        exe.run(startup, scope=scope)
        for name in names:
            holder = scope.find_var(name)
            if holder is not None and main.global_block().var(name).is_parameter:
                tensor = holder.get_tensor()
                tensor.set(np.asarray(tensor._value) + rank)
        compiled = fj.CompiledProgram(main, fj.BuildStrategy(sharding=mode)).with_data_parallel()
        losses = []
        for batch in batches:
            shard = {k: v[rank * local:(rank + 1) * local] for k, v in batch.items()}
            losses.append(float(exe.run(compiled, feed=shard, fetch_list=[cost], scope=scope)[0]))
        state = {n: fj.distributed.gather(v).tolist() for n, v in scope_arrays(scope, names).items()}
        result["modes"][mode] = {"losses": losses, "state": state}
        if mode == modes[-1]:
            # A checkpoint of the split state, written by process 0; then one more sharded step
            # from the gathered scope (the run puts the values back on its devices).
            fj.distributed.gather_scope(scope)
            if rank == 0:
                fj.io.save_persistables(exe, f"{out_prefix}.ckpt", main, scope=scope)
            extra = make_batch(steps)
            shard = {k: v[rank * local:(rank + 1) * local] for k, v in extra.items()}
            result["checkpoint_mode"] = mode
            result["next_loss"] = float(exe.run(compiled, feed=shard, fetch_list=[cost], scope=scope)[0])
    with open(f"{out_prefix}.{rank}.json", "w") as f:
        json.dump(result, f)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="mlp,convnet,convnet64")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--distributed", metavar="OUT_PREFIX", help="run as one process of a launched run")
    parser.add_argument("--modes", default="none,full")
    args = parser.parse_args(argv)
    if args.distributed:
        distributed_run(args.distributed, args.steps, args.modes.split(","))
        return
    out = {name: check_model(name, min(args.steps, STEPS.get(name, args.steps))) for name in args.models.split(",")}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
