# shellcheck shell=bash
# Environment for building thdcheck's `cuda` feature with the toolchain ci/cuda-toolchain.sh
# installed. Source it, do not run it:   source ci/cuda-env.sh [PREFIX]     (default: .cuda)
#
# CUDA_ROOT          cudarc's link-search root (lib/ and lib/stubs/); CUDA_HOME/CUDA_PATH also work
# PATH               cudaforge and cudarc's build scripts run `nvcc` from PATH
# CUDA_COMPUTE_CAP   cudaforge's target (90 -> sm_90a: H100/H200); set it to build elsewhere (86, 89...)
# CUDARC_CUDA_VERSION  pins cudarc's bindings to 13.0 instead of parsing `nvcc --version`
# CUDAFORGE_THREADS  parallel nvcc jobs for candle-kernels (cudaforge's default is half the cores)
_thd_repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
_thd_prefix=${1:-$_thd_repo/.cuda}
case $_thd_prefix in /*) ;; *) _thd_prefix=$PWD/$_thd_prefix ;; esac
if [ ! -x "$_thd_prefix/nvidia/cu13/bin/nvcc" ]; then
  echo "cuda-env: no toolchain in $_thd_prefix; run ci/cuda-toolchain.sh $_thd_prefix first" >&2
  unset _thd_repo _thd_prefix
  return 1 2>/dev/null || exit 1
fi
export CUDA_ROOT=$_thd_prefix/nvidia/cu13
case ":$PATH:" in *":$CUDA_ROOT/bin:"*) ;; *) export PATH=$CUDA_ROOT/bin:$PATH ;; esac
export CUDA_COMPUTE_CAP=${CUDA_COMPUTE_CAP:-90}
export CUDARC_CUDA_VERSION=13000
export CUDAFORGE_THREADS=${CUDAFORGE_THREADS:-$(nproc)}
unset _thd_repo _thd_prefix
