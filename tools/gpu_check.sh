#!/usr/bin/env bash
# One GPU session's checks of ember's cuda device, in about 8 minutes on one GPU:
#   1. CuPy (installed if missing: cupy-cuda12x, or cupy-cuda13x on a CUDA 13 driver; from
#      ./wheels when the machine has no network), ember's C parts built (else EMBER_NO_C=1);
#   2. the real-GPU tests (-m cuda): runtime (streams, events, memory, OOM, RNG, AMP); the
#      fused kernels (softmax, norms, gelu, Adam, cross_entropy, embedding backward, flash
#      attention fwd/bwd with causal and masks in fp16/fp32/fp64) against the xp code and the
#      cpu; then every registry op forward/backward against the cpu (test_cuda_double's gpu
#      cases), each group under its own time limit;
#   3. tools/gpu_bench.py: ember against torch's CUDA build (matmul, conv, fused kernels, SDPA
#      causal/masked/long, cross_entropy, embedding backward, GPT training steps with AMP
#      float16, peak memory).
# Results go to $OUT (default ./gpu-out), 9 files at most: summary.txt, pip/build logs, the
# three pytest logs, bench.log, gpu_bench.json and gpu_bench.md.
# Usage: OUT=/some/dir bash tools/gpu_check.sh        (PYTHON=... to pick the interpreter)
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1
T0=$(date +%s)
say() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a "$OUT/summary.txt"; }

say "python: $($PY -c 'import sys; print(sys.version.split()[0], sys.executable)')"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | \
    while read -r l; do say "gpu: $l"; done

if ! $PY -c "import cupy; assert cupy.cuda.runtime.getDeviceCount() > 0" 2>/dev/null; then
    major=$(nvidia-smi 2>/dev/null | sed -n 's/.*CUDA Version: \([0-9]*\).*/\1/p' | head -1)
    pkg=$([ "${major:-12}" -ge 13 ] && echo cupy-cuda13x || echo cupy-cuda12x)
    say "installing $pkg"
    $PY -m pip install -q "$pkg" >"$OUT/pip.log" 2>&1 || \
        $PY -m pip install -q --no-index --find-links wheels "$pkg" >>"$OUT/pip.log" 2>&1 || \
        say "could not install $pkg (no network and no ./wheels): see pip.log"
fi
say "cupy: $($PY -c 'import cupy; print(cupy.__version__)' 2>&1 | tail -1)"
$PY -c "import numpy, ml_dtypes, pytest" 2>/dev/null || \
    $PY -m pip install -q numpy ml_dtypes pytest >>"$OUT/pip.log" 2>&1

if timeout 240 $PY setup.py -q build_ext --inplace -j 8 >"$OUT/build.log" 2>&1; then
    say "C parts built"
else
    export EMBER_NO_C=1
    say "C parts did not build (build.log): EMBER_NO_C=1"
fi
say "ember sees: $($PY -c 'import ember; print(ember.cuda.get_device_name() if
ember.cuda.is_available() else ember.cuda._cupy()[2], ember.__file__)' 2>&1 | tail -1)"

run_tests() {     # name, seconds, pytest arguments...
    local name=$1 limit=$2
    shift 2
    timeout "$limit" $PY -m pytest -q -p no:xdist -p no:cacheprovider -m cuda -rfE "$@" \
        >"$OUT/$name.log" 2>&1
    local rc=$?
    say "$name: rc=$rc $(grep -E '(passed|failed|error)' "$OUT/$name.log" | tail -1)"
}
run_tests runtime 120 tests/test_cuda_api.py tests/test_cuda_runtime.py \
    tests/test_cuda_names.py
run_tests kernels 180 tests/test_cuda_kernels.py
run_tests registry 200 tests/test_cuda_double.py

say "benchmark"
timeout 200 $PY tools/gpu_bench.py "$OUT" --budget 150 >"$OUT/bench.log" 2>&1
say "benchmark: rc=$?"
cat "$OUT/gpu_bench.md" 2>/dev/null >>"$OUT/summary.txt"
say "done"
