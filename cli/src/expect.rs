//! Expected verdicts: an `expected.toml` that lists the files meant to fail and the checks
//! each must violate, so that a corpus of known-bad batches is a CI gate (exit 0 when every
//! file gets exactly its expected verdict).
//!
//! ```toml
//! # path relative to this file = the checks it must violate (exactly), or ["error"]
//! "bad/dpo_offset_real_length.safetensors" = ["dpo-offsets"]
//! "malformed/truncated.safetensors" = ["error"]
//! ```
//!
//! Every file under the directory that is not listed must pass.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use reader::{Error, Result};

/// The conventional file name, found at the root of a directory argument.
pub const FILE_NAME: &str = "expected.toml";

/// What a file is expected to give.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expected {
    /// Every check holds.
    Pass,
    /// Exactly these checks are violated.
    Violates(Vec<String>),
    /// The file cannot be read or understood.
    Error,
}

impl std::fmt::Display for Expected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Expected::Pass => write!(f, "pass"),
            Expected::Violates(ids) => write!(f, "violates {}", ids.join(", ")),
            Expected::Error => write!(f, "unreadable"),
        }
    }
}

/// The expectations of one directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expectations {
    /// The `expected.toml` read.
    pub source: PathBuf,
    base: PathBuf,
    /// `base` resolved (absolute, symlinks followed): paths are matched on this, not on how
    /// the command line spelled them (`dir`, `./dir`, `/abs/dir`, `dir/../dir`).
    canonical: PathBuf,
    files: BTreeMap<String, Expected>,
}

/// `p` resolved (absolute, symlinks and `..` followed) as far as it exists, the rest joined on:
/// a directory's `cp-group` (a name, not a file) or a path that does not exist resolves the same
/// way however it is spelled.
fn canonical(p: &Path) -> PathBuf {
    if let Ok(c) = std::fs::canonicalize(p) {
        return c;
    }
    match (p.parent(), p.file_name()) {
        (Some(dir), Some(name)) if !dir.as_os_str().is_empty() => canonical(dir).join(name),
        (Some(_), Some(name)) => canonical(Path::new(".")).join(name),
        _ => std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf()),
    }
}

impl Expectations {
    /// Reads an expectations file; paths in it are relative to its directory.
    ///
    /// # Errors
    /// [`Error::Expect`] if it cannot be read, is not a regular file (a FIFO, a directory), is
    /// not TOML, or a value is not a list of check ids.
    pub fn load(path: &Path) -> Result<Self> {
        let bad = |detail: String| Error::Expect { path: path.to_owned(), detail };
        // Opening a FIFO would block until a writer comes, and a directory holds no verdicts.
        if !std::fs::metadata(path).map_err(|e| bad(e.to_string()))?.is_file() {
            return Err(bad("not a regular file (a directory, a FIFO or a device?)".into()));
        }
        let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
        Self::parse(&text, path).map_err(bad)
    }

    fn parse(text: &str, path: &Path) -> std::result::Result<Self, String> {
        let table: toml::Table = text.parse().map_err(|e: toml::de::Error| e.to_string())?;
        let mut files = BTreeMap::new();
        for (file, value) in table {
            let ids: Vec<String> = value
                .as_array()
                .ok_or_else(|| format!("`{file}`: expected a list of check ids"))?
                .iter()
                .map(|v| {
                    v.as_str()
                        .map(str::to_owned)
                        .ok_or_else(|| format!("`{file}`: ids are strings"))
                })
                .collect::<std::result::Result<_, _>>()?;
            // Every id is one a report can name: "error", or a rule of the registry. A misspelt
            // id would expect a verdict no file can ever get.
            if let Some(bad) = ids
                .iter()
                .find(|i| *i != "error" && !rules::checks::RULES.iter().any(|r| r.id == i.as_str()))
            {
                return Err(format!(
                    "`{file}`: {bad:?} is not a rule id (the ids of `thdcheck check` reports, \
                     rules::checks::RULES) nor \"error\""
                ));
            }
            let e = if ids.iter().any(|i| i == "error") {
                Expected::Error
            } else if ids.is_empty() {
                Expected::Pass
            } else {
                let mut ids = ids;
                ids.sort();
                ids.dedup();
                Expected::Violates(ids)
            };
            files.insert(file, e);
        }
        let base = path.parent().map(Path::to_path_buf).unwrap_or_default();
        let canonical = canonical(if base.as_os_str().is_empty() { Path::new(".") } else { &base });
        Ok(Self { source: path.to_owned(), base, canonical, files })
    }

    /// Whether `path` lies under this file's directory.
    pub fn covers(&self, path: &Path) -> bool {
        canonical(path).starts_with(&self.canonical)
    }

    /// The expectation for `path`: listed, or [`Expected::Pass`].
    pub fn expected(&self, path: &Path) -> Expected {
        let path = canonical(path);
        let rel = path.strip_prefix(&self.canonical).unwrap_or(&path);
        let key: Vec<String> =
            rel.components().map(|c| c.as_os_str().to_string_lossy().into_owned()).collect();
        self.files.get(&key.join("/")).cloned().unwrap_or(Expected::Pass)
    }

    /// Listed files that do not exist.
    pub fn missing(&self) -> Vec<String> {
        // `DIR/cp-group` names the reassembled shards of DIR, not a file.
        let exists = |f: &String| match f.strip_suffix("/cp-group") {
            Some(dir) => self.base.join(dir).is_dir(),
            None => self.base.join(f).exists(),
        };
        self.files.keys().filter(|f| !exists(f)).cloned().collect()
    }
}

/// Whether an outcome (`Some(violated ids)` or `None` for an unreadable file) is the expected
/// one.
///
/// # Example
/// ```
/// use thdcheck::expect::{Expected, matches};
/// assert!(matches(&Expected::Pass, Some(&[])));
/// assert!(matches(&Expected::Violates(vec!["dpo-offsets".into()]), Some(&["dpo-offsets"])));
/// assert!(!matches(&Expected::Violates(vec!["dpo-offsets".into()]), Some(&[])));
/// assert!(matches(&Expected::Error, None));
/// ```
pub fn matches(expected: &Expected, outcome: Option<&[&str]>) -> bool {
    match (expected, outcome) {
        (Expected::Error, None) => true,
        (Expected::Pass, Some(v)) => v.is_empty(),
        (Expected::Violates(ids), Some(v)) => {
            ids.len() == v.len() && ids.iter().zip(v).all(|(a, b)| a == b)
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expectations_parse_relative_paths() {
        let e = Expectations::parse(
            "\"bad/x.safetensors\" = [\"position-ids\", \"mask\"]\n\"m.safetensors\" = [\"error\"]\n",
            Path::new("dir/expected.toml"),
        )
        .unwrap();
        assert_eq!(
            e.expected(Path::new("dir/bad/x.safetensors")),
            Expected::Violates(vec!["mask".into(), "position-ids".into()])
        );
        assert_eq!(e.expected(Path::new("dir/m.safetensors")), Expected::Error);
        assert_eq!(e.expected(Path::new("dir/good.safetensors")), Expected::Pass);
        assert!(Expectations::parse("x = 3", Path::new("e.toml")).is_err());
    }

    #[test]
    fn an_id_that_is_no_rule_is_an_error_naming_file_and_id() {
        let e = Expectations::parse("\"a.safetensors\" = [\"positon-ids\"]", Path::new("e.toml"))
            .unwrap_err();
        assert!(
            e.contains("`a.safetensors`") && e.contains("\"positon-ids\" is not a rule id"),
            "{e}"
        );
        // Every rule of the registry is accepted, and so is "error".
        for rule in rules::checks::RULES {
            let text = format!("\"a.safetensors\" = [\"{}\"]", rule.id);
            assert!(Expectations::parse(&text, Path::new("e.toml")).is_ok(), "{}", rule.id);
        }
    }
}
