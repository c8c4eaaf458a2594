//! Verdicts are made in `rules` (and the property tests of `properties`) only: no other crate of
//! the workspace builds a violation or an outcome of a rule. The source of `cli`, `reader`, `golden` and the Python binding is read
//! and every constructor of one is refused: `Violation::new(..)`, a `Violation { .. }` or
//! `Rule { .. }` literal, `RULE.violation()`, and `RULE.violated(v)` / `.skipped(..)` / `.ok(..)`
//! on a rule (a report's `.violated()` accessor, with no argument, is reading, not building).

use std::path::{Path, PathBuf};

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The constructors found in `text`, as `(line, what)`.
fn constructors(text: &str) -> Vec<(usize, String)> {
    let patterns = [
        "Violation::new(",
        "Violation::for_property_tests(",
        "Violation {",
        "Rule {",
        ".violation()",
        ".skipped(",
        ".from_checked(",
    ];
    let mut found = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let code = line.split("//").next().unwrap_or("");
        for p in patterns {
            if code.contains(p) {
                found.push((n + 1, p.to_string()));
            }
        }
        // `.violated(` with an argument builds an outcome; `.violated()` reads a report.
        if code.match_indices(".violated(").any(|(i, _)| !code[i..].starts_with(".violated()")) {
            found.push((n + 1, ".violated(v)".into()));
        }
        if code.contains(".ok(\"") || code.contains(".ok(format!") {
            found.push((n + 1, "RULE.ok(..)".into()));
        }
    }
    found
}

#[test]
fn no_crate_but_properties_builds_a_violation() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = Vec::new();
    for dir in ["cli/src", "engine/src", "reader/src", "golden/src", "python/src"] {
        sources(&root.join(dir), &mut files);
    }
    assert!(files.len() > 30, "only {} source files found", files.len());
    let mut found = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        for (line, what) in constructors(&text) {
            found.push(format!("{}:{line}: {what}", f.display()));
        }
    }
    assert!(found.is_empty(), "verdicts built outside rules:\n{}", found.join("\n"));
}

/// The scan sees what it refuses (a planted constructor in a string, as a file would hold it).
#[test]
fn the_scan_finds_a_planted_constructor() {
    let planted = "let v = POSITION_IDS.violated(POSITION_IDS.violation().got(3));\n\
                   let ok = report.violated();\n";
    let found = constructors(planted);
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(found.iter().all(|(line, _)| *line == 1), "{found:?}");
}

/// Inside `properties`, a violation's id is a registered rule's (`.id(RULE.id)`), never a
/// string of its own: a string id would be a rule no registry holds (`packer-quality` was one).
#[test]
fn every_id_a_rule_gives_is_a_registered_rules() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../properties/src");
    let mut files = Vec::new();
    sources(&root, &mut files);
    let mut found = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            if code.contains(".id(\"") {
                found.push(format!("{}:{}: {}", f.display(), n + 1, line.trim()));
            }
        }
    }
    assert!(found.is_empty(), "ids of no registered rule:\n{}", found.join("\n"));
}

/// The Python package binds the libraries the command is built on (reader, the rules, engine),
/// not the command's crate: its manifest names no path to `cli/`, and its sources no
/// `thdcheck::` item (issue 26). The command reaches Python users as the `thdcheck-cli` wheel.
#[test]
fn the_python_package_binds_the_libraries_not_the_command() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let manifest = std::fs::read_to_string(root.join("python/Cargo.toml")).unwrap();
    let deps: toml::Table = toml::from_str::<toml::Table>(&manifest).unwrap()["dependencies"]
        .as_table()
        .cloned()
        .unwrap();
    let on_cli: Vec<&String> = deps
        .iter()
        .filter(|(_, d)| d.get("path").and_then(|p| p.as_str()) == Some("../cli"))
        .map(|(name, _)| name)
        .collect();
    assert!(on_cli.is_empty(), "python/Cargo.toml depends on the command's crate: {on_cli:?}");
    assert!(deps.contains_key("reader") && deps.contains_key("engine"), "{deps:?}");
    let mut files = Vec::new();
    sources(&root.join("python/src"), &mut files);
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        assert!(!text.contains("thdcheck::"), "{} uses the command's crate", f.display());
    }
}
