#!/usr/bin/env bash
# One run on a GPU machine without a Rust toolchain (how runs/2026-11-26-* were made): the
# stripped, gzipped release test binary and bench built here (README, "carry the test binary")
# placed in target/gpu-bin/ as gpu-tests.bin.gz and gpu-bench.bin.gz; run from the repository
# root with $OUT set to a folder for the logs. Runs the tests, then the bench and PyTorch's
# attention on the bench's batch (when that machine's python has torch and safetensors).
set -u
root=$(pwd)
cd target/gpu-bin && gunzip -f gpu-tests.bin.gz gpu-bench.bin.gz && chmod +x ./*.bin && cd "$root"
nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv
ldd target/gpu-bin/gpu-tests.bin | grep -E "cuda|cublas|curand|not found"
t0=$SECONDS
(cd gpu-tests && timeout 300 ../target/gpu-bin/gpu-tests.bin --nocapture --test-threads=1) > "$OUT/tests.log" 2>&1
echo "tests rc=$? in $((SECONDS - t0)) s"
grep -E "^test |test result" "$OUT/tests.log" | tail -60
t1=$SECONDS
(cd gpu-tests && GPU_BENCH_EXPORT=/tmp/sdpa timeout 150 ../target/gpu-bin/gpu-bench.bin --bench) > "$OUT/bench.log" 2>&1
echo "bench rc=$? in $((SECONDS - t1)) s"
tail -25 "$OUT/bench.log"
PY=/opt/torch/.venv/bin/python; [ -x "$PY" ] || PY=python3
if "$PY" -c "import torch, safetensors" 2>/dev/null && [ -f /tmp/sdpa/batch.safetensors ]; then
  timeout 90 "$PY" gpu-tests/bench/torch_sdpa.py /tmp/sdpa/batch.safetensors > "$OUT/sdpa.log" 2>&1
  echo "sdpa rc=$?"; tail -25 "$OUT/sdpa.log"
else
  echo "no torch+safetensors ($PY) or no exported batch: skipping the PyTorch comparison"
  "$PY" -c "import torch; print(torch.__version__)" 2>&1 | tail -1
fi
