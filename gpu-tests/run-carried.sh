#!/usr/bin/env bash
# One run on a GPU machine without a Rust toolchain (how runs/2026-11-26-* were made): the
# stripped, gzipped release test binary and bench built here (README, "carry the test binary")
# placed in target/gpu-bin/ as gpu-tests.bin.gz and gpu-bench.bin.gz; run from the repository
# root with $OUT set to a folder for the logs. Runs the tests, then the bench and PyTorch's
# attention on the bench's batch (when that machine's python has torch and safetensors), then,
# when target/wheels/ holds the package's wheel (maturin build ... -o target/wheels) and
# target/pywheels/ pytest's, the Python package's GPU tests (batches held as CUDA tensors) and
# bench/python_guard_cuda.py, installed offline beside that machine's torch.
set -u
root=$(pwd)
cd target/gpu-bin && gunzip -f gpu-tests.bin.gz gpu-bench.bin.gz && chmod +x ./*.bin && cd "$root"
nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv
ldd target/gpu-bin/gpu-tests.bin | grep -E "cuda|cublas|curand|not found"
t0=$SECONDS
(cd gpu-tests && timeout 200 ../target/gpu-bin/gpu-tests.bin --nocapture --test-threads=1) > "$OUT/tests.log" 2>&1
echo "tests rc=$? in $((SECONDS - t0)) s"
grep -E "^test |test result" "$OUT/tests.log" | tail -60
t1=$SECONDS
(cd gpu-tests && GPU_BENCH_EXPORT=/tmp/sdpa timeout 120 ../target/gpu-bin/gpu-bench.bin --bench) > "$OUT/bench.log" 2>&1
echo "bench rc=$? in $((SECONDS - t1)) s"
tail -25 "$OUT/bench.log"
PY=/opt/torch/.venv/bin/python; [ -x "$PY" ] || PY=python3
if "$PY" -c "import torch, safetensors" 2>/dev/null && [ -f /tmp/sdpa/batch.safetensors ]; then
  timeout 60 "$PY" gpu-tests/bench/torch_sdpa.py /tmp/sdpa/batch.safetensors > "$OUT/sdpa.log" 2>&1
  echo "sdpa rc=$?"; tail -25 "$OUT/sdpa.log"
else
  echo "no torch+safetensors ($PY) or no exported batch: skipping the PyTorch comparison"
  "$PY" -c "import torch; print(torch.__version__)" 2>&1 | tail -1
fi

whl=$(ls target/wheels/thdcheck-*.whl 2>/dev/null | head -1)
if [ -n "$whl" ] && "$PY" -c "import torch; assert torch.cuda.is_available()" 2>/dev/null; then
  site=/tmp/thdcheck-site
  # A wheel is a zip laid out as site-packages: unpacked, it needs neither pip nor a network.
  for w in "$whl" target/pywheels/*.whl; do "$PY" -m zipfile -e "$w" "$site"; done
  t2=$SECONDS
  (cd python && PYTHONPATH=$site timeout 150 "$PY" -m pytest -q -p no:cacheprovider -k "cuda or gpu" \
      tests/test_containers.py tests/test_guard.py) > "$OUT/python-cuda.log" 2>&1
  echo "python GPU tests rc=$? in $((SECONDS - t2)) s"; tail -5 "$OUT/python-cuda.log"
  PYTHONPATH=$site timeout 120 "$PY" bench/python_guard_cuda.py > "$OUT/guard-cuda.log" 2>&1
  echo "guard bench rc=$?"; tail -8 "$OUT/guard-cuda.log"
else
  echo "no wheel in target/wheels or no CUDA torch: skipping the Python package's GPU run"
fi
