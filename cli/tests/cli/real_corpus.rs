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
    for (p, v) in corpus_records() {
        for key in ["repo", "commit", "function", "why", "expected", "path"] {
            assert!(!v[key].is_null(), "{}: no `{key}`", p.display());
        }
        records.push(v);
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

/// Every record carries the facts computed from its input alone (`corpus/real/facts.py`: the
/// documents the stack was given, their tokens, Σ s² and the labels its loss trains; never read
/// from the output tensors), and for every valid batch (a rank file: its group's verdict) the
/// report's facts, summed over its packs (a DPO batch: its concatenated pack; a rank file: its
/// reassembled `cp-group`), are those: a right verdict on wrong facts fails. A record whose
/// `facts_mismatch` explains a known gap of the tool is listed, not held.
#[test]
fn real_corpus_facts_match_records() {
    use serde_json::Value;
    let mut records = corpus_records();
    records.sort_by(|a, b| a.0.cmp(&b.0));
    let o = run_expect(&["check", "--json", "corpus/real/batches"], 0);
    let report: Value = serde_json::from_str(&stdout(&o)).unwrap();
    let mut by_path = std::collections::HashMap::new();
    for f in report["files"].as_array().unwrap() {
        let p = f["path"].as_str().unwrap();
        by_path.insert(p.trim_start_matches("corpus/real/batches/").to_string(), f);
    }
    // The report's facts of a record's batch: summed over its packs.
    let sums = |path: &str| -> Option<[Option<u64>; 4]> {
        let mut f = by_path.get(path).copied();
        if f.is_none_or(|f| f["report"]["packs"].as_array().is_none_or(|p| p.is_empty())) {
            let group = std::path::Path::new(path).parent().unwrap().join("cp-group");
            f = by_path.get(group.to_str().unwrap()).copied();
        }
        let packs = f?["report"]["packs"].as_array()?.clone();
        let concatenated: Vec<&Value> =
            packs.iter().filter(|p| p["part"] == "concatenated").collect();
        let packs: Vec<&Value> =
            if concatenated.is_empty() { packs.iter().collect() } else { concatenated };
        let sum = |get: &dyn Fn(&Value) -> Option<u64>| -> Option<u64> {
            packs.iter().map(|p| get(&p["facts"])).sum()
        };
        Some([
            sum(&|f| f["real_segments"].as_u64()),
            sum(&|f| f["real_tokens"].as_u64()),
            sum(&|f| f["useful"]["sum_squares"].as_u64()),
            sum(&|f| f["valid_labels"].as_u64()),
        ])
    };
    let names = ["documents", "real_tokens", "useful_sum_sq", "trained_labels"];
    let report_names =
        ["real_segments", "real_tokens", "useful.sum_squares", "valid_labels (summed over packs)"];
    let (mut held, mut unlabelled, mut wrong, mut known) = (0, 0, Vec::new(), Vec::new());
    for (file, r) in &records {
        let facts = &r["facts"];
        assert!(facts.is_object(), "{}: no `facts` (run corpus/real/facts.py)", file.display());
        assert!(r["facts_from"].is_string(), "{}: no `facts_from`", file.display());
        for k in &names[..3] {
            assert!(facts[k].is_u64(), "{}: facts.{k} is not a count", file.display());
        }
        let group = file.parent().unwrap().join("cp-group.json");
        let name = file.file_name().unwrap().to_str().unwrap();
        let expected = if name.starts_with("rank") && group.exists() {
            records.iter().find(|(p, _)| *p == group).unwrap().1["expected"].clone()
        } else {
            r["expected"].clone()
        };
        if expected != "pass" {
            continue;
        }
        let path = r["path"].as_str().unwrap();
        if let Some(why) = r["facts_mismatch"].as_str() {
            known.push(format!("{path}: {why}"));
            continue;
        }
        let got = sums(path).unwrap_or_else(|| panic!("{path}: not in the report"));
        for (i, k) in names.iter().enumerate() {
            let want = facts[k].as_u64();
            match (want, got[i]) {
                (Some(w), Some(g)) if w != g => wrong.push(format!(
                    "{}: record facts.{k} = {w}, report {} = {g}",
                    file.display(),
                    report_names[i]
                )),
                (Some(_), None) if i < 3 => {
                    wrong.push(format!("{}: report has no {}", file.display(), report_names[i]))
                }
                (Some(_), None) => unlabelled += 1,
                _ => {}
            }
        }
        held += 1;
    }
    assert!(held >= 100, "{held} valid records held to their facts");
    assert!(
        wrong.is_empty(),
        "{} fact(s) of valid records differ from the report ({held} records held, {} known gaps \
         listed by their records' facts_mismatch, {unlabelled} with labels the report does not \
         count):\n{}\nknown gaps:\n{}",
        wrong.len(),
        known.len(),
        wrong.join("\n"),
        known.join("\n")
    );
    eprintln!(
        "{held} valid records match their facts ({unlabelled} trained-label counts not in the \
         report); {} known gaps:\n{}",
        known.len(),
        known.join("\n")
    );
}

/// Every record of the real corpus (`corpus/real/batches/**/*.json`) with its path.
fn corpus_records() -> Vec<(std::path::PathBuf, serde_json::Value)> {
    let mut records = Vec::new();
    let mut stack = vec![repo().join("corpus/real/batches")];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "json") {
                let v = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
                records.push((p, v));
            }
        }
    }
    records
}
