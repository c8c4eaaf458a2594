//! The picture of a fuzz run (`fuzz --html`, the Python package's `FuzzResult` and
//! `FuzzFailure`): the shrunk request and the adapter's answer drawn as the strips of
//! [`reader::picture::svg`], from the run's JSON document alone (what `--json` prints), so a
//! 1-minimal case is seen at a glance. Nothing is judged here: the failure drawn is the report's.
//!
//! ```text
//! request   [#0 9 ][#1 12    ][#2 25            ]      the examples, in request order
//! pack 0    [#0 9 ][pad 11        ]                   each pack up to the capacity
//! pack 1    [#1 12    ][pad 8     ]
//! dropped   [#2 25            ]
//! ```

use reader::picture::svg::{Canvas, colour};
use reader::picture::{PackPicture, Slot};
use serde_json::Value;

/// One strip: its title and its segments' lengths (and how many tokens it holds in all).
struct Strip {
    title: String,
    lens: Vec<usize>,
    tokens: usize,
}

impl Strip {
    fn picture(&self) -> PackPicture {
        let mut slots = Vec::new();
        let mut at = 0;
        for &n in &self.lens {
            slots.push(Slot { start: at, real_end: at + n, end: at + n, mock: false });
            at += n;
        }
        PackPicture {
            tokens: self.tokens.max(at).max(1),
            rows: 1,
            slots,
            grouped: 1,
            stride: 1,
            ..PackPicture::default()
        }
    }
}

/// The length of an example of a request: `len`, or its token lists' lengths.
fn example_len(e: &Value) -> usize {
    if let Some(n) = e.get("len").and_then(Value::as_u64) {
        return n as usize;
    }
    ["input_ids", "chosen_input_ids", "rejected_input_ids"]
        .iter()
        .filter_map(|k| e.get(*k).and_then(Value::as_array).map(Vec::len))
        .sum()
}

/// The strips of a request and its answer.
fn strips(request: &Value, response: Option<&Value>) -> Vec<Strip> {
    let examples: Vec<(Option<u64>, usize)> = request
        .get("examples")
        .and_then(Value::as_array)
        .map(|v| v.iter().map(|e| (e.get("id").and_then(Value::as_u64), example_len(e))).collect())
        .unwrap_or_default();
    let capacity = ["capacity", "max_seq_length"]
        .iter()
        .find_map(|k| request.get(*k).and_then(Value::as_u64))
        .map(|c| c as usize);
    let mut out = vec![Strip {
        title: format!(
            "request: {} example{}{}",
            examples.len(),
            if examples.len() == 1 { "" } else { "s" },
            capacity.map(|c| format!(", capacity {c}")).unwrap_or_default()
        ),
        lens: examples.iter().map(|e| e.1).collect(),
        tokens: 0,
    }];
    let len_of = |id: &Value| {
        let id = id.as_u64();
        examples.iter().find(|e| e.0 == id).map_or(0, |e| e.1)
    };
    let Some(answer) = response else { return out };
    let ranks = answer.get("ranks").and_then(Value::as_array);
    if let Some(packs) = answer.get("packs").and_then(Value::as_array) {
        for (i, p) in packs.iter().enumerate().take(64) {
            let ids = p.as_array().cloned().unwrap_or_default();
            let lens: Vec<usize> = ids.iter().map(len_of).collect();
            let sum: usize = lens.iter().sum();
            let rank = ranks
                .and_then(|r| r.get(i))
                .and_then(Value::as_u64)
                .map(|r| format!(", DP rank {r}"))
                .unwrap_or_default();
            let ids: Vec<String> = ids.iter().map(|v| format!("#{v}")).collect();
            out.push(Strip {
                title: format!("pack {i}{rank}: {} = {sum} tokens", ids.join(" + ")),
                lens,
                tokens: capacity.unwrap_or(0),
            });
        }
    }
    if let Some(dropped) = answer.get("dropped").and_then(Value::as_array) {
        let ids: Vec<String> = dropped.iter().map(|v| format!("#{v}")).collect();
        out.push(Strip {
            title: format!(
                "dropped: {}",
                if ids.is_empty() { "none".into() } else { ids.join(", ") }
            ),
            lens: dropped.iter().map(len_of).collect(),
            tokens: 0,
        });
    }
    out
}

/// The SVG of a fuzz run's JSON document (`thdcheck fuzz --json`).
pub fn svg(doc: &Value) -> String {
    let mut c = Canvas::new();
    let target = doc.get("target").and_then(Value::as_str).unwrap_or("?");
    let cases = doc.get("cases").and_then(Value::as_u64).unwrap_or(0);
    let Some(failure) = doc.get("failure") else {
        c.text(
            &format!("fuzz {target}: {cases} cases passed (seed {})", doc["seed"]),
            "bold",
            "#2b7a2b",
        );
        return c.finish();
    };
    let kind = failure.get("kind").and_then(Value::as_str).unwrap_or("?");
    let minimal = match doc.get("one_minimal").and_then(Value::as_bool) {
        Some(true) => ", 1-minimal",
        Some(false) => ", not 1-minimal",
        None => "",
    };
    c.text(
        &format!(
            "fuzz {target}: FAILED ({kind}) after {cases} passing cases; the shrunk case{minimal}:"
        ),
        "bold",
        colour::BAD,
    );
    let request = failure.get("request").cloned().unwrap_or(Value::Null);
    let response = failure
        .get("response")
        .and_then(Value::as_str)
        .and_then(|s| serde_json::from_str::<Value>(s).ok());
    for s in strips(&request, response.as_ref()) {
        c.text(&s.title, "normal", "#222");
        if !s.lens.is_empty() {
            c.pack(&s.picture(), &[], 1);
        }
    }
    if response.is_none() {
        c.text("(the answer is not drawn: none, or not a packer's answer)", "normal", "#555");
    }
    for line in failure.get("detail").and_then(Value::as_str).unwrap_or("").lines() {
        c.text(line, "normal", colour::BAD);
    }
    c.legend(None);
    c.finish()
}

/// The verdict line of a fuzz run's JSON document.
pub fn verdict(doc: &Value) -> String {
    match doc.get("failure") {
        None => format!("PASS: {} cases", doc["cases"]),
        Some(f) => format!(
            "FAIL: {} {}",
            f["kind"].as_str().unwrap_or("?"),
            f["checks"].as_array().map_or(String::new(), |c| c
                .iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join(", "))
        ),
    }
}

/// The page of `fuzz --html`.
///
/// # Errors
/// The file cannot be written.
pub fn write_page(path: &std::path::Path, doc: &Value) -> std::io::Result<()> {
    use reader::picture::html;
    let mut out = Vec::new();
    html::begin(&mut out, "thdcheck fuzz")?;
    let name = format!("fuzz {}", doc["target"].as_str().unwrap_or("?"));
    let text = serde_json::to_string_pretty(doc).unwrap_or_default();
    let failed = doc.get("failure").is_some();
    html::section(&mut out, &name, &verdict(doc), Some(!failed), Some(&svg(doc)), &text)?;
    html::end(&mut out, "")?;
    std::fs::write(path, out)
}
