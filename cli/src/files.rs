//! The batch files under a directory: every regular `*.safetensors`, sorted, recursively, each
//! directory once (symlink loops and FIFOs cannot hang the walk). Shared by `thdcheck check`
//! and `thdcheck metrics`.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use crate::{Error, Result};

/// Every regular `*.safetensors` file under `dir`, sorted, recursively. A directory reached
/// twice (a symlink to itself or to an ancestor, two links to one place) is walked once, and
/// anything that is not a regular file (a FIFO, a socket, a device) is left out: opening a FIFO
/// would block forever.
/// A subdirectory that cannot be read goes to `bad` and the walk goes on; the directory given
/// on the command line must be readable.
///
/// # Errors
/// [`Error::Io`] if `dir` itself cannot be read.
///
/// # Example
/// ```
/// let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/batches");
/// let (mut files, mut bad) = (Vec::new(), Vec::new());
/// thdcheck::files::walk(std::path::Path::new(dir), &mut files, &mut bad)?;
/// assert!(files.iter().all(|f| f.extension().is_some_and(|e| e == "safetensors")));
/// assert!(bad.is_empty());
/// # Ok::<(), thdcheck::Error>(())
/// ```
pub fn walk(
    dir: &Path,
    out: &mut Vec<PathBuf>,
    bad: &mut Vec<(PathBuf, std::io::Error)>,
) -> Result<()> {
    let mut seen = HashSet::new();
    walk_into(dir, &mut seen, out, bad, true)
}

fn walk_into(
    dir: &Path,
    seen: &mut HashSet<PathBuf>,
    out: &mut Vec<PathBuf>,
    bad: &mut Vec<(PathBuf, std::io::Error)>,
    top: bool,
) -> Result<()> {
    let io = |source| Error::Io { path: dir.to_path_buf(), source };
    let listing = match std::fs::read_dir(dir) {
        Ok(l) => l,
        Err(e) if !top => {
            bad.push((dir.to_path_buf(), e));
            return Ok(());
        }
        Err(e) => return Err(io(e)),
    };
    let real = std::fs::canonicalize(dir).map_err(io)?;
    if !seen.insert(real) {
        return Ok(());
    }
    let mut entries: Vec<PathBuf> = listing.filter_map(|e| e.ok().map(|e| e.path())).collect();
    entries.sort();
    for p in entries {
        // Follows symlinks; a dangling link has no metadata and is named below as a file.
        match std::fs::metadata(&p) {
            Ok(m) if m.is_dir() => walk_into(&p, seen, out, bad, false)?,
            Ok(m) if !m.is_file() => {}
            _ if p.extension().is_some_and(|e| e == "safetensors") => out.push(p),
            _ => {}
        }
    }
    Ok(())
}
