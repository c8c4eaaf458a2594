//! Bounds on the engine's source that review alone would let slip (issue 38): no function of
//! `engine/src/fuzz` over 150 lines (the fuzz loop stays in pieces with one job each), and no
//! re-export of another workspace crate in `engine/src/lib.rs` or `cli/src/lib.rs` (each crate
//! is named where it is used).
//!
//! Functions are found by reading the source as tokens, not by compiling it: comments, string
//! and character literals are blanked first, then each `fn NAME` with a body is measured from
//! its `fn` line to the line of its closing brace, braces matched.

use std::path::{Path, PathBuf};

/// The most lines a function of `engine/src/fuzz` may span, signature and closing brace
/// included.
const MAX_FN_LINES: usize = 150;

/// The workspace's crates, as `use` paths name them.
const WORKSPACE_CRATES: &[&str] =
    &["thd", "oracle", "rules", "properties", "golden", "reader", "engine", "thdcheck"];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// `src` with every comment, string literal and character literal replaced by spaces (line
/// breaks kept, so line numbers hold). Lifetimes (`'a`) are kept.
fn blank_literals(src: &str) -> Vec<char> {
    let c: Vec<char> = src.chars().collect();
    let mut out = c.clone();
    let ident = |ch: char| ch.is_alphanumeric() || ch == '_';
    let blank = |out: &mut Vec<char>, from: usize, to: usize| {
        for x in &mut out[from..to.min(c.len())] {
            if *x != '\n' {
                *x = ' ';
            }
        }
    };
    let mut i = 0;
    while i < c.len() {
        let next = c.get(i + 1).copied();
        if c[i] == '/' && next == Some('/') {
            let end = (i..c.len()).find(|&j| c[j] == '\n').unwrap_or(c.len());
            blank(&mut out, i, end);
            i = end;
        } else if c[i] == '/' && next == Some('*') {
            let (mut depth, mut j) = (1, i + 2);
            while j < c.len() && depth > 0 {
                if c[j] == '/' && c.get(j + 1) == Some(&'*') {
                    depth += 1;
                    j += 1;
                } else if c[j] == '*' && c.get(j + 1) == Some(&'/') {
                    depth -= 1;
                    j += 1;
                }
                j += 1;
            }
            blank(&mut out, i, j);
            i = j;
        } else if c[i] == 'r'
            && (i == 0 || !ident(c[i - 1]) || (c[i - 1] == 'b' && (i < 2 || !ident(c[i - 2]))))
            && matches!(next, Some('"' | '#'))
        {
            // A raw string: r"…", r#"…"#, br"…".
            let hashes = c[i + 1..].iter().take_while(|&&x| x == '#').count();
            if c.get(i + 1 + hashes) != Some(&'"') {
                i += 1;
                continue;
            }
            let body = i + 2 + hashes;
            let end = (body..c.len())
                .find(|&j| {
                    c[j] == '"'
                        && c[j + 1..].iter().take(hashes).filter(|&&x| x == '#').count() == hashes
                })
                .map_or(c.len(), |j| j + 1 + hashes);
            blank(&mut out, i, end);
            i = end;
        } else if c[i] == '"' {
            let mut j = i + 1;
            while j < c.len() && c[j] != '"' {
                j += if c[j] == '\\' { 2 } else { 1 };
            }
            blank(&mut out, i, j + 1);
            i = j + 1;
        } else if c[i] == '\'' {
            // A character literal ('x', '\n', '\u{1F600}', '\''), else a lifetime.
            let end = if next == Some('\\') {
                (i + 3..c.len()).find(|&j| c[j] == '\'')
            } else if c.get(i + 2) == Some(&'\'') {
                Some(i + 2)
            } else {
                None
            };
            match end {
                Some(e) => {
                    blank(&mut out, i, e + 1);
                    i = e + 1;
                }
                None => i += 1,
            }
        } else {
            i += 1;
        }
    }
    out
}

/// Every function with a body in `src`: (name, line of `fn`, lines spanned).
fn functions(src: &str) -> Vec<(String, usize, usize)> {
    let c = blank_literals(src);
    let ident = |ch: char| ch.is_alphanumeric() || ch == '_';
    let line_of = |at: usize| 1 + c[..at].iter().filter(|&&x| x == '\n').count();
    let mut found = Vec::new();
    for i in 0..c.len().saturating_sub(2) {
        let keyword = c[i] == 'f'
            && c[i + 1] == 'n'
            && c[i + 2].is_whitespace()
            && (i == 0 || !ident(c[i - 1]));
        if !keyword {
            continue;
        }
        let name_at = (i + 2..c.len()).find(|&j| !c[j].is_whitespace()).unwrap_or(c.len());
        let name: String = c[name_at..].iter().take_while(|&&x| ident(x)).collect();
        if name.is_empty() {
            continue; // `fn (…)`: a function pointer type
        }
        // The body: the first `{` before any `;` (a declaration without one has none).
        let Some(open) = (name_at..c.len()).find(|&j| c[j] == '{' || c[j] == ';') else {
            continue;
        };
        if c[open] == ';' {
            continue;
        }
        let mut depth = 0usize;
        let close = (open..c.len()).find(|&j| {
            match c[j] {
                '{' => depth += 1,
                '}' => depth -= 1,
                _ => {}
            }
            depth == 0
        });
        let close = close.unwrap_or_else(|| panic!("fn {name}: unbalanced braces"));
        let first = line_of(i);
        found.push((name, first, line_of(close) - first + 1));
    }
    found
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn no_function_of_the_fuzz_engine_exceeds_150_lines() {
    let mut files = Vec::new();
    rust_files(&root().join("engine/src/fuzz"), &mut files);
    files.sort();
    assert!(files.len() > 5, "engine/src/fuzz has {} files", files.len());
    let mut long = Vec::new();
    let mut measured = 0;
    for path in &files {
        let src = std::fs::read_to_string(path).unwrap();
        for (name, line, lines) in functions(&src) {
            measured += 1;
            if lines > MAX_FN_LINES {
                let shown = path.strip_prefix(root()).unwrap_or(path).display().to_string();
                long.push(format!("{shown}:{line}: fn {name} spans {lines} lines"));
            }
        }
    }
    assert!(measured > 50, "only {measured} functions found: the scanner is broken");
    assert!(
        long.is_empty(),
        "functions over {MAX_FN_LINES} lines (split them, one job each):\n{}",
        long.join("\n")
    );
}

#[test]
fn the_scanner_measures_what_it_should() {
    let src = "fn a() {\n    let s = \"}\"; // }\n    let c = '}';\n    let r = r#\"{\"#;\n}\n\
               trait T { fn decl(&self); }\n\
               fn b<'x>(f: fn(u8) -> u8, s: &'x str) -> &'x str {\n    /* { */ s\n}\n";
    let got = functions(src);
    assert_eq!(got, vec![("a".to_owned(), 1, 5), ("b".to_owned(), 7, 3)], "{got:?}");
}

#[test]
fn the_library_crates_re_export_no_workspace_crate() {
    for lib in ["engine/src/lib.rs", "cli/src/lib.rs"] {
        let src: String = blank_literals(&std::fs::read_to_string(root().join(lib)).unwrap())
            .into_iter()
            .collect();
        for stmt in src.split(';') {
            let stmt = stmt.trim();
            let Some(rest) =
                stmt.strip_prefix("pub use ").or_else(|| stmt.strip_prefix("pub(crate) use "))
            else {
                continue;
            };
            let krate = rest.trim_start_matches("::").split("::").next().unwrap_or("").trim();
            assert!(
                !WORKSPACE_CRATES.contains(&krate),
                "{lib}: `{stmt}` re-exports the {krate} crate: name `{krate}::…` where it is used"
            );
        }
    }
}
