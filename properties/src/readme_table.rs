//! The README's table of invariants is generated from the registry: each invariant's rules from
//! [`crate::checks::RULES`] and the planted bugs that prove them from [`crate::zoo::CATALOGUE`].
//! A rule added to or removed from the registry changes the table; this test fails until the
//! README says the same (`THDCHECK_BLESS=1 cargo test -p properties readme` rewrites it).

use crate::Invariant;
use crate::checks::RULES;
use crate::zoo::CATALOGUE;

const START: &str = "<!-- invariant-table: generated from properties::checks::RULES and \
                     properties::zoo::CATALOGUE (properties/src/readme_table.rs) -->";
const END: &str = "<!-- invariant-table: end -->";

/// The table, one row per invariant in the design table's order.
fn render() -> String {
    let mut out = String::from(
        "| invariant | what it demands | rules (ids for `--ignore` and `expected.toml`) | \
         zoo variants it catches |\n|---|---|---|---|\n",
    );
    for inv in Invariant::ALL {
        let rules: Vec<String> =
            RULES.iter().filter(|r| r.invariant == inv).map(|r| format!("`{}`", r.id)).collect();
        let zoo: Vec<String> = CATALOGUE
            .iter()
            .filter(|e| e.caught_by == inv)
            .map(|e| format!("`{}`", e.name))
            .collect();
        out += &format!(
            "| {inv} | {} | {} | {} |\n",
            inv.statement(),
            rules.join(", "),
            zoo.join(", ")
        );
    }
    out
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
