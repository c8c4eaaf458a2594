//! With the `cuda` feature, gives the test and bench binaries a RUNPATH to the CUDA 13 libraries
//! of the GPU machines, so they start with no `LD_LIBRARY_PATH`. Only this crate's link changes;
//! the dependencies are not rebuilt.
//!
//! `THDCHECK_CUDA_RPATH` (colon-separated) replaces the default list; an empty value adds none.

/// Where the GPU machines keep `libcudart.so.13` / `libcublas.so.13` / `libcurand.so.10`: a CUDA
/// toolkit or devel container, and the CUDA 13 wheels of the PyTorch venv on the device image.
const DEFAULT_RPATH: &str =
    "/usr/local/cuda/lib64:/opt/torch/.venv/lib/python3.12/site-packages/nvidia/cu13/lib";

fn main() {
    println!("cargo:rerun-if-env-changed=THDCHECK_CUDA_RPATH");
    if std::env::var_os("CARGO_FEATURE_CUDA").is_none() {
        return;
    }
    let rpath = std::env::var("THDCHECK_CUDA_RPATH").unwrap_or_else(|_| DEFAULT_RPATH.to_string());
    if !rpath.is_empty() {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{rpath}");
    }
}
