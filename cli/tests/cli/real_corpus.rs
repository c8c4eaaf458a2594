//! The real-code corpus (`corpus/real`) gets its recorded verdicts.

use super::*;

/// The real-code corpus (`corpus/real/`, what the upstream functions returned at pinned
/// commits): every file gets the verdict its record derives from the stack's contract.
#[test]
fn real_corpus_gets_its_recorded_verdicts() {
    let o = run_expect(&["check", "--quiet", "corpus/real/batches"], 0);
    assert!(stdout(&o).contains("every verdict as expected"), "{}", stdout(&o));
}

/// `expected.toml` of the real corpus is what its records say, not an edit by hand: every
/// record's verdict (a group's for its rank files) is the line `generate.py` writes.
#[test]
fn real_corpus_expected_toml_matches_its_records() {
    let dir = repo().join("corpus/real/batches");
    let mut records = Vec::new();
    let mut stack = vec![dir.clone()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "json") {
                let v: serde_json::Value =
                    serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
                for key in ["repo", "commit", "function", "why", "expected", "path"] {
                    assert!(!v[key].is_null(), "{}: no `{key}`", p.display());
                }
                records.push(v);
            }
        }
    }
    assert!(records.len() >= 40, "{} records", records.len());
    let toml: toml::Table =
        std::fs::read_to_string(dir.join("expected.toml")).unwrap().parse().unwrap();
    let mut listed = 0;
    for r in &records {
        let path = r["path"].as_str().unwrap();
        match &r["expected"] {
            serde_json::Value::String(s) if s == "pass" => {
                assert!(
                    !toml.contains_key(path),
                    "{path}: record says pass, expected.toml lists it"
                );
            }
            want => {
                let mut want: Vec<String> = match want {
                    serde_json::Value::String(s) => vec![s.clone()],
                    v => v.as_array().unwrap().iter().map(|x| x.as_str().unwrap().into()).collect(),
                };
                want.sort();
                let got: Vec<String> = toml[path]
                    .as_array()
                    .unwrap_or_else(|| panic!("{path}: not in expected.toml"))
                    .iter()
                    .map(|x| x.as_str().unwrap().into())
                    .collect();
                assert_eq!(got, want, "{path}");
                listed += 1;
            }
        }
    }
    assert_eq!(listed, toml.len(), "expected.toml lists files no record expects to fail");
}
