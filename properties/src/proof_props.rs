//! Every rule is held to its proof (`Rule::proof`, given in its `rule!` entry): the planted bug
//! that must turn it red. A rule without one fails here, naming it; so does a proof that no
//! longer fails its rule:
//!
//! - `Zoo(name)`: the variant is in [`CATALOGUE`] and, run as the zoo runs it
//!   ([`zoo_variant`] with [`zoo_runner`]), fails with this rule's id;
//! - `Batch(path)`: the file (or `DIR/cp-group`, DIR's CP shards) is committed and the `expected.toml` nearest above it lists this
//!   rule for it (`thdcheck check`'s tests, `cli/tests/cli/check.rs` and `real_corpus.rs`, hold
//!   every listed verdict);
//! - `Adapter(name)`: `adapters/python/examples/NAME.py` exists (`cli/tests/fuzz_minimal.rs`
//!   checks that its tables run it against this rule, and runs them);
//! - `Test(path::name)`: the file holds a `#[test] fn name` that names this rule (its id or
//!   its constant), the test that builds the broken input and asserts the violation.

use std::path::{Path, PathBuf};

use crate::checks::{Proof, RULES, Rule};
use crate::selfcheck::{Verdict, zoo_runner, zoo_variant};
use crate::zoo::CATALOGUE;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The rules listed for `file` (relative to `expected`'s folder) in an `expected.toml`
/// (`"path" = ["rule", ...]`, one entry a line, as the generators write it).
fn listed(expected: &str, file: &str) -> Option<Vec<String>> {
    expected.lines().find_map(|line| {
        let (key, value) = line.split_once(" = ")?;
        if key.trim().trim_matches('"') != file {
            return None;
        }
        let value = value.trim().strip_prefix('[')?.strip_suffix(']')?;
        Some(value.split(',').map(|r| r.trim().trim_matches('"').to_string()).collect())
    })
}

/// What is wrong with `Batch(path)` as `rule`'s proof.
fn batch_fault(rule: &Rule, path: &str) -> Option<String> {
    let file = root().join(path);
    // `DIR/cp-group` names the shards of DIR, reassembled (`thdcheck check`), not a file.
    let exists = path.strip_suffix("/cp-group").map_or(file.exists(), |d| root().join(d).is_dir());
    if !exists {
        return Some(format!("{path} does not exist"));
    }
    let Some((dir, expected)) = file.ancestors().skip(1).find_map(|dir| {
        let text = std::fs::read_to_string(dir.join("expected.toml")).ok()?;
        Some((dir.to_path_buf(), text))
    }) else {
        return Some(format!("no expected.toml above {path}"));
    };
    let key = file.strip_prefix(&dir).expect("an ancestor").to_string_lossy().replace('\\', "/");
    match listed(&expected, &key) {
        None => Some(format!("{}/expected.toml has no entry for {key:?}", dir.display())),
        Some(rules) if !rules.iter().any(|r| r == rule.id) => {
            Some(format!("{}/expected.toml lists {key:?} as {rules:?}", dir.display()))
        }
        Some(_) => None,
    }
}

/// The source of `#[test] fn name` in `text`, up to the next test or item at its indentation.
fn test_body<'t>(text: &'t str, name: &str) -> Option<&'t str> {
    let at = text.find(&format!("fn {name}("))?;
    // The lines above the one `fn` is on: its attributes and doc comment.
    let above = &text[..text[..at].rfind('\n').unwrap_or(0)];
    let attrs = above.lines().rev().take_while(|l| {
        let l = l.trim();
        l.starts_with("#[") || l.starts_with("///") || l.starts_with("//")
    });
    if !attrs.into_iter().any(|l| l.trim() == "#[test]") {
        return None;
    }
    let rest = &text[at..];
    let end = rest[1..].find("#[test]").map_or(rest.len(), |e| e + 1);
    Some(&rest[..end])
}

/// What is wrong with `Test(path::name)` as `rule`'s proof.
fn test_fault(rule: &Rule, spec: &str) -> Option<String> {
    let Some((path, name)) = spec.rsplit_once("::") else {
        return Some(format!("{spec:?} is not `path::test_name`"));
    };
    let Ok(text) = std::fs::read_to_string(root().join(path)) else {
        return Some(format!("{path} does not exist"));
    };
    let Some(body) = test_body(&text, name) else {
        return Some(format!("{path} holds no `#[test] fn {name}`"));
    };
    let constant = rule.id.to_uppercase().replace('-', "_");
    let named = body.contains(&format!("\"{}\"", rule.id))
        || body.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).any(|w| w == constant);
    (!named)
        .then(|| format!("{path}::{name} never names the rule (`\"{}\"` or `{constant}`)", rule.id))
}

/// What is wrong with `rule`'s proof, except a zoo variant's verdict (run by the caller):
/// `None` when it is sound.
fn proof_fault(rule: &Rule) -> Option<String> {
    let fault = match rule.proof? {
        Proof::Zoo(name) => {
            (!CATALOGUE.iter().any(|e| e.name == name)).then(|| format!("no zoo variant {name}"))
        }
        Proof::Batch(path) => batch_fault(rule, path),
        Proof::Adapter(name) => {
            let path = format!("adapters/python/examples/{name}.py");
            (!root().join(&path).exists()).then(|| format!("{path} does not exist"))
        }
        Proof::Test(spec) => test_fault(rule, spec),
    };
    fault.map(|f| format!("{}: {} — {f}", rule.id, rule.proof.expect("a proof")))
}

/// The rules of `rules` without a proof.
fn unproven(rules: &[Rule]) -> Vec<&'static str> {
    rules.iter().filter(|r| r.proof.is_none()).map(|r| r.id).collect()
}

#[test]
fn every_rule_has_a_proof() {
    let missing = unproven(RULES);
    assert!(
        missing.is_empty(),
        "rules without a proof (give each `proof: Proof::...` in its `rule!` entry: the zoo \
         variant, planted adapter, committed batch or test that must fail it): {missing:?}"
    );
}

#[test]
fn every_proof_names_what_exists() {
    let faults: Vec<String> = RULES.iter().filter_map(proof_fault).collect();
    assert!(faults.is_empty(), "proofs that prove nothing:\n{}", faults.join("\n"));
}

/// Every `Zoo` proof, run as the zoo runs it (its runner, its cases), fails with its rule's id.
#[test]
fn every_zoo_proof_fails_its_rule() {
    let mut faults = Vec::new();
    for rule in RULES {
        let Some(Proof::Zoo(name)) = rule.proof else { continue };
        match zoo_variant(name, zoo_runner) {
            None => faults.push(format!("{}: no zoo variant {name}", rule.id)),
            Some(Verdict::Failed { violation, .. }) if violation.id == rule.id => {}
            Some(Verdict::Failed { violation, .. }) => faults
                .push(format!("{}: zoo {name} fails `{}`:\n{violation}", rule.id, violation.id)),
            Some(other) => faults.push(format!("{}: zoo {name} is not caught: {other:?}", rule.id)),
        }
    }
    assert!(faults.is_empty(), "{}", faults.join("\n"));
}

/// The checks see what they refuse: a rule without a proof, and each kind of proof that proves
/// nothing.
#[test]
fn the_proof_checks_refuse_a_missing_or_broken_proof() {
    let rule = |id, proof| Rule { proof, ..*RULES.iter().find(|r| r.id == id).expect("a rule") };
    assert_eq!(unproven(&[rule("mask", None)]), ["mask"]);
    for (id, proof, says) in [
        ("mask", Proof::Zoo("NoSuchVariant"), "no zoo variant"),
        ("mask", Proof::Batch("examples/batches/bad/hf_cross_doc_label.safetensors"), "lists"),
        ("mask", Proof::Batch("examples/batches/bad/nope.safetensors"), "does not exist"),
        ("mask", Proof::Adapter("no_such_adapter"), "does not exist"),
        ("mask", Proof::Test("rules/src/checks/proofs.rs::no_such_test"), "no `#[test] fn"),
        (
            "mask",
            Proof::Test("rules/src/checks/proofs.rs::qk_offsets_keys_count_the_padding"),
            "never names",
        ),
        ("mask", Proof::Test("rules/src/checks/proofs.rs::violated"), "no `#[test] fn"),
    ] {
        let fault = proof_fault(&rule(id, Some(proof))).unwrap_or_else(|| panic!("{proof} passed"));
        assert!(fault.contains(says), "{proof}: {fault}");
    }
    assert_eq!(
        proof_fault(&rule(
            "qk-offsets",
            Some(Proof::Test("rules/src/checks/proofs.rs::qk_offsets_keys_count_the_padding"))
        )),
        None
    );
}
