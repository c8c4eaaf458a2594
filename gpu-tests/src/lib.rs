//! GPU comparisons (feature `cuda`). Filled in by the GPU issue.
