#!/usr/bin/env bash
# The GPU job: builds gpu-tests with the `cuda` feature and runs it on GPU 0 (ci/gpu.yml calls
# this; it also runs by hand on any machine with an NVIDIA GPU and a Rust toolchain).
#
# usage: ci/gpu.sh            tests (CPU and CUDA variants of every body, plus the
#                             realistic-size case), each printing its measured errors
#        GPU_BENCH=1 ci/gpu.sh   ... then the GPU bench (and, with python3 + torch +
#                             safetensors available, PyTorch SDPA on the same batch)
#
# CUDA toolkit: a CUDA 13.0 nvcc on PATH (the devel container of ci/gpu.yml) is used as is;
# without one, ci/cuda-toolchain.sh installs a build-only toolchain from PyPI into .cuda and the
# run-time libraries (libcublas.so.13, libcurand.so.10, libcudart.so.13) must then come from
# the machine (a CUDA 13 install or a PyTorch cu130 venv; see gpu-tests/build.rs's RUNPATH).
#
# CUDA_COMPUTE_CAP: taken from the environment, else from nvidia-smi (9.0 -> 90).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

die() { echo "gpu.sh: error: $*" >&2; exit 1; }

command -v nvidia-smi >/dev/null || die "nvidia-smi not found: this job needs an NVIDIA GPU and driver"
nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv ||
  die "nvidia-smi sees no GPU (in a container: --gpus all?)"

if command -v nvcc >/dev/null; then
  release=$(nvcc --version | grep -o 'release [0-9.]*' | cut -d' ' -f2)
  echo "gpu.sh: using nvcc $release from $(command -v nvcc)"
  export CUDA_ROOT=${CUDA_ROOT:-$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")}
else
  echo "gpu.sh: no nvcc on PATH; installing the build-only CUDA 13.0 toolchain into .cuda"
  ci/cuda-toolchain.sh .cuda >/dev/null
  # shellcheck source=ci/cuda-env.sh
  source ci/cuda-env.sh .cuda
fi

if [ -z "${CUDA_COMPUTE_CAP:-}" ]; then
  cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d ' .')
  [ -n "$cap" ] || die "could not read the compute capability; set CUDA_COMPUTE_CAP (e.g. 90)"
  export CUDA_COMPUTE_CAP=$cap
fi
export CUDAFORGE_THREADS=${CUDAFORGE_THREADS:-$(nproc)}
echo "gpu.sh: CUDA_COMPUTE_CAP=$CUDA_COMPUTE_CAP CUDA_ROOT=$CUDA_ROOT"

# `cargo test-cuda` in release: the realistic case's CPU references (thd's fast path) run
# several times faster, and the bench below reuses the build. One test thread, so that each
# test's printed figures stay together in the log.
cargo test -p gpu-tests --features cuda --release -- --nocapture --test-threads=1

if [ "${GPU_BENCH:-0}" = 1 ]; then
  out=${CARGO_TARGET_DIR:-target}/sdpa
  GPU_BENCH_EXPORT=$out cargo bench -p gpu-tests --features cuda --bench gpu
  if python3 -c 'import torch, safetensors' 2>/dev/null; then
    python3 gpu-tests/bench/torch_sdpa.py "$out/batch.safetensors"
  else
    echo "gpu.sh: python3 with torch and safetensors not found; skipping the PyTorch SDPA comparison"
  fi
fi
