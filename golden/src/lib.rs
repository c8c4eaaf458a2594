//! Golden metric snapshots per recipe. Filled in by the golden issue.
