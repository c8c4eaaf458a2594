#!/usr/bin/env bash
# Build-only CUDA 13.0 toolchain for `cargo build -p gpu-tests --features cuda` on a machine with
# no GPU and no system CUDA (the recipe in ../shared/reference/cuda-build.md, as a script).
#
# usage: ci/cuda-toolchain.sh [PREFIX]        PREFIX defaults to .cuda (repo root; git-ignored)
#
# What it does (idempotent; a second run only re-checks):
#   1. pip-installs five NVIDIA wheels, pinned to 13.0.x and to their sha256, into PREFIX:
#      nvcc + cicc + crt + CCCL headers + cudart (about 105 MB download, 271 MB unpacked).
#      13.0 exactly: the GPU machines run driver 580, which cannot JIT the PTX of a newer nvcc.
#   2. links libcudart.so -> libcudart.so.13 (candle-kernels links -lcudart for libmoe.a).
#   3. generates link-time stub libraries for what cudarc's `dynamic-linking` links
#      (-lcuda -lcublas -lcublasLt -lcurand -lnvrtc) from cudarc's own bindings, with NVIDIA's
#      sonames and symbol-version nodes, into CUDA_ROOT/lib/stubs. They are never loaded at run
#      time: the GPU machine's driver and CUDA 13 libraries are.
#   4. smoke-tests nvcc (a bf16/f16 kernel to PTX) and prints the environment to build with.
#
# Then: source ci/cuda-env.sh [PREFIX]; cargo build -p gpu-tests --features cuda --tests
#
# Needs: Linux x86_64, python3 with pip, gcc, cargo; network access to PyPI and crates.io.
set -euo pipefail

die() { echo "cuda-toolchain: error: $*" >&2; exit 1; }
say() { echo "cuda-toolchain: $*" >&2; }

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PREFIX=${1:-$REPO/.cuda}
case $PREFIX in /*) ;; *) PREFIX=$PWD/$PREFIX ;; esac

[ "$(uname -s)/$(uname -m)" = Linux/x86_64 ] ||
  die "only Linux x86_64 is supported (the pinned wheel hashes are the manylinux x86_64 ones)"
command -v python3 >/dev/null || die "python3 not found (needed for pip)"
python3 -m pip --version >/dev/null 2>&1 || die "python3 has no pip (try: python3 -m ensurepip)"
command -v gcc >/dev/null || die "gcc not found (needed for the stub libraries and as nvcc's host compiler)"
command -v cargo >/dev/null || die "cargo not found"

# ---- 1. the wheels -------------------------------------------------------------------------
# Versions match the CUDA 13.0 runtime of the GPU image (torch 2.11.0+cu130, driver 580).
# Hashes: sha256 of the manylinux x86_64 wheels on PyPI (pip checks them: --require-hashes).
WHEELS=(
  "nvidia-cuda-nvcc==13.0.88 --hash=sha256:56fe502eb77625a12f25172caa3cdddb4e4c8ba2c8c17dba44b164761b380f03"
  "nvidia-nvvm==13.0.88 --hash=sha256:c5f41ffeb6466944a026dfa5317d7d85355c119bbec279205d22f1869d1054e0"
  "nvidia-cuda-crt==13.0.88 --hash=sha256:2c8043c7c9e02492716426e9919fc78d2c5b3b2a7a768a88e952676b08aa55a4"
  "nvidia-cuda-cccl==13.0.85 --hash=sha256:e0da7ad981f3a8aff08241b5bfc1af868742a63e2762f53a5171c492ef242649"
  "nvidia-cuda-runtime==13.0.96 --hash=sha256:7f82250d7782aa23b6cfe765ecc7db554bd3c2870c43f3d1821f1d18aebf0548"
)
C=$PREFIX/nvidia/cu13
STAMP=$PREFIX/wheels.stamp
WANT=$(printf '%s\n' "${WHEELS[@]}")

mkdir -p "$PREFIX"
if [ -x "$C/bin/nvcc" ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$WANT" ]; then
  say "wheels already installed in $PREFIX"
else
  say "installing CUDA 13.0 build wheels into $PREFIX (about 105 MB from PyPI)"
  # A partial or different install: start this prefix's CUDA tree over (only what pip wrote).
  rm -rf "$PREFIX/nvidia" "$STAMP"
  find "$PREFIX" -maxdepth 1 -name 'nvidia_*.dist-info' -exec rm -rf {} +
  req=$(mktemp)
  trap 'rm -f "$req"' EXIT
  printf '%s\n' "${WHEELS[@]}" > "$req"
  python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore --no-deps --no-compile \
    --only-binary=:all: --require-hashes --target "$PREFIX" -r "$req" ||
    die "pip install failed (network to PyPI? a different platform than manylinux x86_64?)"
  [ -x "$C/bin/nvcc" ] || die "wheels installed but $C/bin/nvcc is missing (wheel layout changed?)"
  echo "$WANT" > "$STAMP"
fi
ln -sfn libcudart.so.13 "$C/lib/libcudart.so"

# ---- 2. cudarc's bindings (the names the stubs must export) ---------------------------------
# The lock file pins cudarc once gpu-tests' `cuda` feature exists; `cargo fetch` unpacks it.
if [ -z "${CUDARC_SRC:-}" ]; then
  (cd "$REPO" && cargo fetch --quiet) || die "cargo fetch failed (network to crates.io?)"
  ver=$(awk '/^name = "cudarc"$/ { getline; gsub(/version = |"/, ""); print; exit }' "$REPO/Cargo.lock")
  [ -n "$ver" ] || die "cudarc is not in Cargo.lock (does gpu-tests still have its cuda feature?)"
  CUDARC_SRC=$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/"cudarc-$ver" 2>/dev/null | head -1)
  [ -n "$CUDARC_SRC" ] || die "cudarc $ver is locked but not unpacked under \$CARGO_HOME/registry/src"
fi
[ -f "$CUDARC_SRC/src/driver/sys/mod.rs" ] || die "CUDARC_SRC=$CUDARC_SRC has no src/driver/sys/mod.rs"

# ---- 3. link-time stubs ---------------------------------------------------------------------
# One function per name in cudarc's bindings (a superset of what candle references).
# cuBLAS/cuBLASLt/cuRAND/NVRTC export every symbol under a version node named after their
# soname, so the binary records e.g. cublasCreate_v2@libcublas.so.13 exactly as with the real
# library; libcuda's symbols are unversioned, like the driver's.
# Should a stub ever be loaded at run time, every call returns an error status, as NVIDIA's
# stub libcuda does (CUDA_ERROR_STUB_LIBRARY): Device::new_cuda fails cleanly, nothing runs.
S=$PREFIX/stubsrc
mkdir -p "$C/lib/stubs" "$S"
stub() { # soname link-name versioned(0|1) cudarc-module error-status
  local so=$1 name=$2 versioned=$3 src=$CUDARC_SRC/src/$4/sys/mod.rs status=$5
  local c=$S/$name.c lib=$C/lib/stubs/lib$name.so vs=()
  grep -oP '^pub unsafe fn \K\w+' "$src" | sort -u | sed "s/.*/int &(void) { return $status; }/" > "$c.new"
  [ -s "$c.new" ] || die "no functions found in $src (cudarc's binding layout changed?)"
  # Unchanged bindings: keep the library (and its mtime) as it is.
  if [ -f "$lib" ] && cmp -s "$c.new" "$c"; then
    rm -f "$c.new"
    say "stub $so: up to date"
    return
  fi
  mv "$c.new" "$c"
  if [ "$versioned" = 1 ]; then
    echo "$so { global: *; };" > "$S/$name.map"
    vs=(-Wl,--version-script="$S/$name.map")
  fi
  gcc -shared -fPIC -o "$lib" -Wl,-soname,"$so" "${vs[@]}" "$c"
  say "stub $so: $(wc -l < "$c") symbols"
}
stub libcuda.so.1 cuda 0 driver 34        # CUDA_ERROR_STUB_LIBRARY
stub libcublas.so.13 cublas 1 cublas 1    # CUBLAS_STATUS_NOT_INITIALIZED
stub libcublasLt.so.13 cublasLt 1 cublaslt 1
stub libcurand.so.10 curand 1 curand 101  # CURAND_STATUS_NOT_INITIALIZED
stub libnvrtc.so.13 nvrtc 1 nvrtc 11      # NVRTC_ERROR_INTERNAL_ERROR

# ---- 4. smoke test --------------------------------------------------------------------------
release=$("$C/bin/nvcc" --version | grep -o 'release [0-9.]*' | cut -d' ' -f2)
[ "$release" = 13.0 ] || die "nvcc reports release '$release', expected 13.0"
t=$(mktemp -d)
cat > "$t/k.cu" <<'EOF'
#include <cuda_fp16.h>
#include <cuda_bf16.h>
extern "C" __global__ void k(__nv_bfloat16 *a, const __half *b) {
  a[threadIdx.x] = __float2bfloat16(__half2float(b[threadIdx.x]));
}
EOF
PATH=$C/bin:$PATH "$C/bin/nvcc" -ptx -arch=compute_90 -o "$t/k.ptx" "$t/k.cu" ||
  die "nvcc could not compile a bf16/f16 kernel (headers or cicc missing?)"
grep -q '^.version 9.0' "$t/k.ptx" || die "unexpected PTX version: $(grep '^.version' "$t/k.ptx")"
rm -rf "$t"
say "nvcc $release OK (PTX .version 9.0); toolchain ready in $C"

cat <<EOF
# Build environment (or: source ci/cuda-env.sh $PREFIX)
export CUDA_ROOT=$C
export PATH=\$CUDA_ROOT/bin:\$PATH
export CUDA_COMPUTE_CAP=\${CUDA_COMPUTE_CAP:-90}
export CUDARC_CUDA_VERSION=13000
export CUDAFORGE_THREADS=\${CUDAFORGE_THREADS:-\$(nproc)}
EOF
