"""The cost of fluidjax's run-time checks on the training steps of ``train_step.py``.

Three modes, each timed against hand-written JAX (which checks nothing) in its own interleaved
pass, in one run:

- ``no checks``: ``FLAGS_check_index`` off — the step as it was before the checks existed;
- ``default``: index checks on (labels of cross entropy / softmax-with-cross-entropy in range),
  state kept on a failed check;
- ``check_nan_inf``: ``FLAGS_check_nan_inf`` on as well — every float output of every op checked.

    python benchmarks/check_modes.py [--steps N]
"""

from __future__ import annotations

import argparse

MODES = {
    "no checks": {"FLAGS_check_index": False, "FLAGS_check_nan_inf": False},
    "default": {"FLAGS_check_index": True, "FLAGS_check_nan_inf": False},
    "check_nan_inf": {"FLAGS_check_index": True, "FLAGS_check_nan_inf": True},
}


def main() -> None:
    import jax

    import fluidjax as fj
    import train_step
    import train_step_lenet
    from timing import interleaved_medians

    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()
    models = {
        "MLP 784-200-10, batch 64": (train_step.fluidjax_trainer(train_step.SIZES, train_step.initial_params(train_step.SIZES)),
                                     train_step.jax_trainer(train_step.SIZES, train_step.initial_params(train_step.SIZES)),
                                     train_step.batches(64, 8)),
        "LeNet, batch 64": (train_step_lenet.fluidjax_trainer(train_step_lenet.initial_params()),
                            train_step_lenet.jax_trainer(train_step_lenet.initial_params()),
                            train_step_lenet.batches(64, 8)),
    }
    print(f"device: {jax.devices()[0]}; Adam training steps; median ms of {args.steps} interleaved steps")
    print(f"{'model':>26} {'mode':>14} {'fluidjax ms':>12} {'JAX ms':>8} {'fluidjax/JAX':>13}")
    try:
        for model, (ours, theirs, data) in models.items():
            for mode, flags in MODES.items():
                fj.set_flags(flags)
                times = interleaved_medians({"fluidjax": ours, "jax": theirs}, data, args.steps)
                print(f"{model:>26} {mode:>14} {times['fluidjax']:>12.3f} {times['jax']:>8.3f} "
                      f"{times['fluidjax'] / times['jax']:>13.2f}")
    finally:
        fj.set_flags(MODES["default"])


if __name__ == "__main__":
    main()
