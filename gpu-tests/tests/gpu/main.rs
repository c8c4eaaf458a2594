//! The GPU test binary: every comparison body, stamped per device with `on_devices!`.
//!
//! One binary, not one per file: with `--features cuda` each binary embeds candle's CUDA
//! kernels (about 33 MB of sm_90a code), so a single binary builds, links and travels to a GPU
//! machine far more cheaply. Test names read `<file>::<body>::<device>`, e.g.
//! `attention::attention_matches_oracle_bf16::cuda`; `-- ::cuda` selects the GPU variants.

mod attention;
mod cp;
mod loss;
mod realistic;
mod thd_vs_bshd;
