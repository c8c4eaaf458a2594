//! The batch files under a directory: every regular `*.safetensors`, sorted, recursively, each
//! directory once (symlink loops and FIFOs cannot hang the walk), and every part of the tree
//! that cannot be read reported (a tree deeper than `PATH_MAX` included). Shared by `thdcheck
//! check` and `thdcheck metrics`.

use std::collections::HashSet;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use reader::{Error, Result};

/// Every regular `*.safetensors` file under `dir`, sorted, recursively. A directory reached
/// twice (a symlink to itself or to an ancestor, two links to one place) is walked once, and
/// anything that is not a regular file (a FIFO, a socket, a device) is left out: opening a FIFO
/// would block forever.
///
/// Nothing is skipped silently: a subdirectory that cannot be read, an entry whose type cannot
/// be read, and an entry whose path is past the system's limit (`PATH_MAX`: a tree deeper than
/// paths can name) go to `bad` with why, and the walk goes on. An entry past `PATH_MAX` is
/// reported at its directory, the deepest path that can be named. The directory given on the
/// command line must be readable.
///
/// The walk keeps its own stack (no recursion, whatever the depth) and knows a directory by
/// device and inode (no path resolution per directory): its cost grows with the number of
/// entries times their depth.
///
/// # Errors
/// [`Error::Io`] if `dir` itself cannot be read.
///
/// # Example
/// ```
/// let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/batches");
/// let (mut files, mut bad) = (Vec::new(), Vec::new());
/// engine::files::walk(std::path::Path::new(dir), &mut files, &mut bad)?;
/// assert!(files.iter().all(|f| f.extension().is_some_and(|e| e == "safetensors")));
/// assert!(bad.is_empty());
/// # Ok::<(), reader::Error>(())
/// ```
pub fn walk(
    dir: &Path,
    out: &mut Vec<PathBuf>,
    bad: &mut Vec<(PathBuf, std::io::Error)>,
) -> Result<()> {
    let io = |source| Error::Io { path: dir.to_path_buf(), source };
    let mut seen = HashSet::new();
    let meta = std::fs::metadata(dir).map_err(io)?;
    let Some(top) = listing(dir, &meta, &mut seen, bad).map_err(io)? else { return Ok(()) };
    // One iterator of sorted entries per directory being walked, the deepest last.
    let mut stack = vec![(dir.to_path_buf(), top)];
    while let Some((parent, entries)) = stack.last_mut() {
        let Some(p) = entries.next() else {
            stack.pop();
            continue;
        };
        let safetensors = p.extension().is_some_and(|e| e == "safetensors");
        // Follows symlinks; a dangling link has no metadata and is named below as a file.
        match std::fs::metadata(&p) {
            Ok(m) if m.is_dir() => match listing(&p, &m, &mut seen, bad) {
                Ok(Some(sub)) => stack.push((p, sub)),
                Ok(None) => {}
                Err(e) => bad.push((p, e)),
            },
            Ok(m) if !m.is_file() => {}
            Ok(_) if safetensors => out.push(p),
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::InvalidFilename => {
                let name = p.file_name().map(|n| n.to_string_lossy()).unwrap_or_default();
                let short: String = name.chars().take(48).collect();
                let more = if short.len() < name.len() { "…" } else { "" };
                let why = format!(
                    "its entry \"{short}{more}\" lies past the system's path length limit \
                     (PATH_MAX): that subtree is not checked ({e})"
                );
                bad.push((parent.clone(), std::io::Error::new(e.kind(), why)));
            }
            // Read below, where the error is reported as the file's.
            Err(_) if safetensors => out.push(p),
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(e) => bad.push((p, e)),
        }
    }
    Ok(())
}

/// The sorted entries of directory `dir` (whose metadata is `meta`), or `None` if it was walked
/// already. An entry that cannot be listed goes to `bad`.
fn listing(
    dir: &Path,
    meta: &std::fs::Metadata,
    seen: &mut HashSet<DirId>,
    bad: &mut Vec<(PathBuf, std::io::Error)>,
) -> std::io::Result<Option<std::vec::IntoIter<PathBuf>>> {
    let listing = std::fs::read_dir(dir)?;
    if !seen.insert(dir_id(dir, meta)?) {
        return Ok(None);
    }
    let mut entries = Vec::new();
    for e in listing {
        match e {
            Ok(e) => entries.push(e.path()),
            Err(e) => bad.push((dir.to_path_buf(), e)),
        }
    }
    entries.sort();
    Ok(Some(entries.into_iter()))
}

/// What identifies a directory however it is reached.
#[cfg(unix)]
type DirId = (u64, u64);

#[cfg(unix)]
fn dir_id(_: &Path, meta: &std::fs::Metadata) -> std::io::Result<DirId> {
    use std::os::unix::fs::MetadataExt;
    Ok((meta.dev(), meta.ino()))
}

#[cfg(not(unix))]
type DirId = PathBuf;

#[cfg(not(unix))]
fn dir_id(dir: &Path, _: &std::fs::Metadata) -> std::io::Result<DirId> {
    std::fs::canonicalize(dir)
}
