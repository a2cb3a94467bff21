#!/usr/bin/env bash
# The GPU figures of the closing notes: what a lent device machine (an image with JAX, no Paddle)
# runs from the repository root. Results go to $OUT (default: ./device-out).
#   bash benchmarks/device_run.sh [quick|tests]
set -u
OUT=$(realpath -m "${OUT:-device-out}"); mkdir -p "$OUT"
# a copy named fluidjax (pytest resolves links, and the checkout's own name may not be a module name)
rm -rf /tmp/fjroot && mkdir -p /tmp/fjroot && cp -r "$PWD" /tmp/fjroot/fluidjax && cd /tmp/fjroot/fluidjax
export PYTHONPATH=/tmp/fjroot PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
PY=${PY:-python3}
nvidia-smi -L 2>/dev/null
$PY -c "import jax, fluidjax; print('jax', jax.__version__, jax.devices())" || exit 1
if [ "${1:-}" = tests ]; then big=; amp=; tests_t=400
elif [ "${1:-}" = quick ]; then big="--layers 2 --width 64 --heads 4 --seq 16 --batch 8 --vocab 128 --repeats 2"
  amp="--layers 1 --width 32 --heads 2 --seq 8 --batch 4 --repeats 2"; tests_t=60
else big="--layers 12 --width 768 --heads 12 --seq 256 --batch 16 --vocab 8192 --repeats 5 --peak-tflops 989"
  amp="--layers 4 --width 1024 --heads 16 --seq 256 --batch 32 --repeats 10"; tests_t=110
fi
# 1. the GPT-style decoder (issue 22): each feature on and off, hand-written JAX alongside
[ -n "$big" ] && timeout 360 $PY benchmarks/big_model.py $big --configs base,amp_bf16,recompute,recompute+merge+amp,jax,jax_bf16 \
  --json "$OUT/big_model.json" 2>&1 | tee "$OUT/big_model.log" | grep -v Warning
# 2. AMP on a transformer encoder: float32 against bfloat16 O1/O2 and float16 O1
[ -n "$amp" ] && timeout 100 $PY benchmarks/amp.py $amp --configs fp32,bf16-O1,bf16-O2,fp16-O1 2>&1 | tee "$OUT/amp.log" | tail -8
# 3. the tests that need no Paddle (Paddle is not on the device image), on the GPU
timeout $tests_t $PY -m pytest -q -p no:cacheprovider -n 8 -x --timeout 120 tests/test_executor.py tests/test_frontend.py \
  tests/test_reliability.py tests/test_scope.py tests/test_summary.py tests/test_fluid1_surface.py \
  tests/test_fluid1_data_loader.py tests/test_first_result.py tests/test_seed_example.py 2>&1 | tee "$OUT/tests.log" | tail -15
