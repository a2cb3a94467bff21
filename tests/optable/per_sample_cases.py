"""``fluidjax_per_sample`` (fluidjax's own op, written by ``fj.passes.per_sample_blocks``): it runs
a sub-block of convolutions over chunks of the batch, which a one-op row cannot build; the named
test compares it with Paddle 2.6.2 running the program the pass started from."""

CASES: list = []

ELSEWHERE = {
    "fluidjax_per_sample": "tests/test_per_sample.py::test_blocks_run_per_chunk_give_paddles_results",
}
