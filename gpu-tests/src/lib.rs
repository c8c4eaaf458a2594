//! thdcheck's comparisons stamped per device: every body in `tests/` is one
//! `fn name(dev: &Device) -> Result<()>` that [`on_devices!`] turns into a `name::cpu` test and,
//! with the `cuda` feature, a `name::cuda` test (candle's `test_device!` pattern).
//!
//! - Without the feature only the CPU variants exist; they keep the cases small, so
//!   `cargo test -p gpu-tests` runs in seconds and checks that every body is sound.
//! - With `--features cuda` (`cargo test-cuda`), the CUDA variants open GPU 0 with
//!   [`Device::new_cuda`] and **fail** when there is none: a GPU job that silently passed on a
//!   machine without a GPU would hide exactly the gap it exists to close.
//!
//! The reference is always the oracle in f64 on the CPU; see `README.md` for the layout.

pub mod check;
pub mod data;

pub use candle_core::{DType, Device, Result, Tensor};

/// Opens the device a stamped test runs on: `"cpu"` or `"cuda"` (GPU 0).
///
/// # Errors
/// For `"cuda"`: the error of [`Device::new_cuda`] (no GPU, no driver, or the `cuda` feature
/// off), with a note saying that the feature expects a GPU. An unknown name is an error too.
///
/// # Example
/// ```
/// assert!(gpu_tests::device("cpu")?.is_cpu());
/// # Ok::<(), candle_core::Error>(())
/// ```
pub fn device(name: &str) -> Result<Device> {
    match name {
        "cpu" => Ok(Device::Cpu),
        "cuda" => Device::new_cuda(0).map_err(|e| {
            e.context(
                "gpu-tests was built with the `cuda` feature, which needs an NVIDIA GPU \
                 (Device::new_cuda(0) failed); build without the feature to run the CPU variants",
            )
        }),
        other => Err(candle_core::Error::Msg(format!("unknown test device {other:?}"))),
    }
}

/// Stamps one test body per device.
///
/// `on_devices!(body, cpu, cuda)` turns `fn body(dev: &Device) -> Result<()>` into a module
/// `body` holding one `#[test]` per listed device: `body::cpu` always, `body::cuda` only with
/// the `cuda` feature (it opens GPU 0 and fails without one). List only `cuda` for a case that
/// is too slow for CPU CI.
///
/// Test names end in the device, so `cargo test-cuda -- ::cuda` runs the GPU variants alone.
///
/// # Example
/// ```
/// use gpu_tests::{Device, Result, on_devices};
/// fn adds_on_device(dev: &Device) -> Result<()> {
///     let x = candle_core::Tensor::new(&[1f32, 2.0], dev)?;
///     assert_eq!(x.sum_all()?.to_scalar::<f32>()?, 3.0);
///     Ok(())
/// }
/// on_devices!(adds_on_device, cpu, cuda); // tests `adds_on_device::cpu`, `adds_on_device::cuda`
/// # fn main() {}
/// ```
#[macro_export]
macro_rules! on_devices {
    ($body:ident, $($dev:ident),+ $(,)?) => {
        mod $body {
            $( $crate::on_devices!(@one $body, $dev); )+
        }
    };
    (@one $body:ident, cpu) => {
        #[test]
        pub fn cpu() -> $crate::Result<()> {
            super::$body(&$crate::device("cpu")?)
        }
    };
    (@one $body:ident, cuda) => {
        #[cfg(feature = "cuda")]
        #[test]
        pub fn cuda() -> $crate::Result<()> {
            super::$body(&$crate::device("cuda")?)
        }
        // Without the feature a CUDA-only body is still type-checked, and not dead code.
        #[cfg(not(feature = "cuda"))]
        const _: fn(&$crate::Device) -> $crate::Result<()> = super::$body;
    };
}
