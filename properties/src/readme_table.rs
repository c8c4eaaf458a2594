//! The README's table of invariants is generated from the registry: each invariant's rules from
//! [`crate::checks::RULES`], each linked to its proof (`Rule::proof`), and the planted bugs that
//! prove them, with their strategies and pinned snapshots, from [`crate::zoo::CATALOGUE`] (one
//! declaration per variant).
//! A rule added to or removed from the registry changes the table; this test fails until the
//! README says the same (`THDCHECK_BLESS=1 cargo test -p properties readme` rewrites it).

use crate::Invariant;
use crate::checks::{Proof, RULES};
use crate::zoo::CATALOGUE;

const START: &str = "<!-- invariant-table: generated from rules::checks::RULES and \
                     properties::zoo::CATALOGUE (properties/src/readme_table.rs) -->";
const END: &str = "<!-- invariant-table: end -->";

/// Where a rule's proof is, from the repository's root: the zoo variant's pinned snapshot, the
/// planted adapter, the committed batch (a CP group's folder) or the test's file.
fn proof_link(proof: Proof) -> String {
    match proof {
        Proof::Zoo(name) => CATALOGUE.iter().find(|e| e.name == name).map_or_else(
            || "properties/src/zoo/mod.rs".to_string(),
            |e| format!("properties/src/snapshots/properties__zoo_props__{}.snap", e.test),
        ),
        Proof::Adapter(name) => format!("adapters/python/examples/{name}.py"),
        Proof::Batch(path) => path.strip_suffix("/cp-group").unwrap_or(path).to_string(),
        Proof::Test(spec) => spec.rsplit_once("::").map_or(spec, |(file, _)| file).to_string(),
    }
}

/// The table, one row per invariant in the design table's order: its rules, the strategies its
/// planted bugs are drawn from, and each planted bug linked to its pinned snapshot.
fn render() -> String {
    let mut out = String::from(
        "| invariant | what it demands | rules (ids for `--ignore` and `expected.toml`, each linked to \
         the planted bug that proves it) | \
         strategies (`properties::strategies`) | zoo variants it catches (their pinned \
         counterexamples) |\n|---|---|---|---|---|\n",
    );
    for inv in Invariant::ALL {
        let rules: Vec<String> = RULES
            .iter()
            .filter(|r| r.invariant == inv)
            .map(|r| match r.proof {
                Some(p) => format!("[`{}`]({})", r.id, proof_link(p)),
                None => format!("`{}`", r.id),
            })
            .collect();
        let variants: Vec<_> = CATALOGUE.iter().filter(|e| e.caught_by == inv).collect();
        let mut strategies: Vec<String> = Vec::new();
        for e in &variants {
            // `stringify!` spaces a path's separators (`Sizes :: SMALL`): print it as written.
            let s = format!("`{}`", e.strategy.replace(" :: ", "::"));
            if !strategies.contains(&s) {
                strategies.push(s);
            }
        }
        let zoo: Vec<String> = variants
            .iter()
            .map(|e| {
                format!(
                    "[`{}`](properties/src/snapshots/properties__zoo_props__{}.snap)",
                    e.name, e.test
                )
            })
            .collect();
        out += &format!(
            "| {inv} | {} | {} | {} | {} |\n",
            inv.statement(),
            rules.join(", "),
            strategies.join(", "),
            zoo.join(", ")
        );
    }
    out
}

/// Every snapshot the table links to exists.
#[test]
fn every_variant_links_to_its_snapshot() {
    for e in CATALOGUE {
        let path = format!(
            "{}/src/snapshots/properties__zoo_props__{}.snap",
            env!("CARGO_MANIFEST_DIR"),
            e.test
        );
        assert!(std::path::Path::new(&path).is_file(), "{}: no snapshot at {path}", e.name);
    }
}

#[test]
fn readme_invariant_table_is_the_registry() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md");
    let readme = std::fs::read_to_string(path).expect("README.md");
    let (Some(a), Some(b)) = (readme.find(START), readme.find(END)) else {
        panic!("README.md has no generated invariant table (markers {START:?} ... {END:?})");
    };
    let body = &readme[a + START.len()..b];
    let want = format!("\n{}", render());
    if body == want {
        return;
    }
    if std::env::var_os("THDCHECK_BLESS").is_some() {
        let new = format!("{}{START}{want}{}", &readme[..a], &readme[b..]);
        std::fs::write(path, new).expect("write README.md");
        return;
    }
    panic!(
        "README.md's invariant table differs from the registry; rerun with THDCHECK_BLESS=1 \
         and review the diff. The registry says:\n{want}"
    );
}

#[test]
fn every_invariant_has_a_rule_and_a_zoo_variant() {
    for inv in Invariant::ALL {
        assert!(RULES.iter().any(|r| r.invariant == inv), "{inv} has no registered rule");
        assert!(CATALOGUE.iter().any(|e| e.caught_by == inv), "{inv} has no zoo variant");
    }
}

/// docs/batch-files.md's "What is checked" table names every rule `check` runs on a pack (the
/// registry's rules with a pack function, and the two that gate them), and no id the registry
/// does not hold: a rule removed from the registry leaves `check` and this table at once.
#[test]
fn the_batch_files_table_is_the_registrys_rules_of_one_pack() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/batch-files.md");
    let doc = std::fs::read_to_string(path).expect("docs/batch-files.md");
    let table = doc
        .split("## What is checked")
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .expect("a What is checked section");
    let listed: Vec<&str> =
        table.lines().filter_map(|l| l.strip_prefix("| `")?.split('`').next()).collect();
    let gates = [crate::checks::OFFSETS.id, crate::checks::TOKEN_COUNTS.id];
    for r in RULES.iter().filter(|r| r.batch.is_some() || gates.contains(&r.id)) {
        assert!(listed.contains(&r.id), "docs/batch-files.md does not list `{}`", r.id);
    }
    for id in &listed {
        assert!(RULES.iter().any(|r| r.id == *id), "docs/batch-files.md lists `{id}`, no rule");
    }
}

/// The READMEs count the zoo as it is: "holds N buggy variants" (properties/README.md) and "a bug
/// zoo of N historical bugs" (README.md) name `CATALOGUE`'s length, never a stale number.
#[test]
fn the_readmes_count_the_zoo_as_it_is() {
    let n = CATALOGUE.len();
    for (file, phrase) in [
        (concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"), format!("holds {n} buggy variants")),
        (concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md"), format!("a bug\n  zoo of {n} ")),
    ] {
        let text = std::fs::read_to_string(file).expect("README");
        let flat = text.replace("\n  ", " ");
        let want = phrase.replace("\n  ", " ");
        assert!(flat.contains(&want), "{file} should say \"{want}\" (the zoo holds {n})");
    }
}
