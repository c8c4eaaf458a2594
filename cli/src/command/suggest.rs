//! `thdcheck profile suggest`: a stack's whole contract drafted from its known-good batches.
//!
//! The draft is built, judged and printed as one text: every candidate (a rename, a fact, a
//! variant) is tried by parsing the profile it makes and checking every input under it, so what
//! is printed is what was verified.
//!
//! 1. **Reading.** Each file is read under the user's `--map`, the renames its data identify
//!    (`tokens` → `input_ids`, a tensor equal to the tokens shifted by one → `labels`, …) and the
//!    fewest reading facts (`offsets = "padded-slots"`, `labels = "from-input-ids"`, …) that
//!    make it readable; the readings that cover the files, told apart by their keys, become
//!    `[[variant]]`s.
//! 2. **Evidence.** What every file of a path shows (format, label shift, pad id, first
//!    position) is proposed, and kept only if no input then fails a rule it did not fail.
//! 3. **Verdicts.** A fact that changes a verdict is kept only if it strictly shrinks what the
//!    inputs fail and adds no failure: a fact that would silence a violation the batches do not
//!    show is never proposed.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result, bail};

use reader::formats::{Parsed, ReadOptions, parse};
use reader::profile::Profile;
use reader::report::FileReport;
use reader::tensors::BatchFile;
use reader::{CheckOptions, check_file};

/// One line of the draft: a field (or a renamed key), its value as TOML, and its evidence.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Line {
    field: String,
    value: String,
    why: String,
}

/// The facts and renames of the profile's top level or of one variant, with what could not be
/// determined.
#[derive(Clone, Debug, Default)]
struct Scope {
    facts: Vec<Line>,
    map: Vec<Line>,
    unknown: Vec<String>,
}

impl Scope {
    fn get(&self, field: &str) -> Option<&Line> {
        self.facts.iter().find(|l| l.field == field)
    }

    fn set(&mut self, field: &str, value: &str, why: String) {
        let line = Line { field: field.to_owned(), value: value.to_owned(), why };
        match self.facts.iter_mut().find(|l| l.field == field) {
            Some(l) => *l = line,
            None => self.facts.push(line),
        }
    }

    fn render(&self, out: &mut String, table: &str, comments: bool) {
        for l in &self.facts {
            line(out, &l.field, &l.value, &l.why, comments);
        }
        if comments {
            for u in &self.unknown {
                let _ = writeln!(out, "# {}", one_line(u));
            }
        }
        if !self.map.is_empty() {
            let _ = writeln!(out, "[{table}]");
            for l in &self.map {
                line(out, &format!("{:?}", l.field), &l.value, &l.why, comments);
            }
        }
    }
}

fn one_line(s: &str) -> String {
    s.replace(['\n', '\r'], " ")
}

fn line(out: &mut String, field: &str, value: &str, why: &str, comments: bool) {
    if comments && !why.is_empty() {
        let _ = writeln!(out, "{field} = {value}    # {}", one_line(why));
    } else {
        let _ = writeln!(out, "{field} = {value}");
    }
}

/// One path of the stack: the files it tells, by the keys they have.
#[derive(Clone, Debug)]
struct VariantDraft {
    name: String,
    present: Vec<String>,
    absent: Vec<String>,
    why: String,
    scope: Scope,
    files: Vec<usize>,
}

/// The whole suggested profile.
#[derive(Clone, Debug, Default)]
struct Draft {
    top: Scope,
    /// Renames applied only to the files that have a key (`[map_when.KEY]`): the real offsets
    /// found beside slot offsets, which other files' offsets must keep their name without.
    map_when: Vec<(String, Vec<Line>)>,
    variants: Vec<VariantDraft>,
}

impl Draft {
    fn render(&self, name: &str, comments: bool) -> String {
        let mut out = format!("name = {name:?}\nstack = \"\"\n");
        self.top.render(&mut out, "map", comments);
        for (key, lines) in &self.map_when {
            let _ = writeln!(out, "[map_when.{key:?}]");
            for l in lines {
                line(&mut out, &format!("{:?}", l.field), &l.value, &l.why, comments);
            }
        }
        for v in &self.variants {
            out.push_str("\n[[variant]]");
            if comments && !v.why.is_empty() {
                let _ = write!(out, "    # {}", one_line(&v.why));
            }
            let _ = writeln!(out, "\nname = {:?}", v.name);
            if !v.present.is_empty() {
                let _ = writeln!(out, "present = {:?}", v.present);
            }
            if !v.absent.is_empty() {
                let _ = writeln!(out, "absent = {:?}", v.absent);
            }
            v.scope.render(&mut out, "variant.map", comments);
        }
        out
    }

    /// The scope of variant `v`, or the top level.
    fn scope_mut(&mut self, v: Option<usize>) -> &mut Scope {
        match v {
            Some(i) => &mut self.variants[i].scope,
            None => &mut self.top,
        }
    }

    fn scope(&self, v: Option<usize>) -> &Scope {
        match v {
            Some(i) => &self.variants[i].scope,
            None => &self.top,
        }
    }
}

/// One input file.
struct Input {
    path: PathBuf,
    file: BatchFile,
    keys: BTreeSet<String>,
    /// `(directory, cp_size)` for a CP rank's shard, judged with its group.
    group: Option<(PathBuf, usize)>,
}

/// What is judged: a file, or the CP group of a directory's rank files.
enum Unit {
    File(usize),
    Group(PathBuf, usize, Vec<usize>),
}

impl Unit {
    fn label(&self, inputs: &[Input]) -> String {
        match self {
            Unit::File(i) => inputs[*i].path.display().to_string(),
            Unit::Group(dir, _, _) => dir.join("cp-group").display().to_string(),
        }
    }
}

/// Each unit's failures: the rules it violates, or `unreadable`.
type Verdicts = Vec<BTreeSet<String>>;

/// A reading of one file: the renames its data identify and the reading facts it needs.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Reading {
    renames: Vec<(String, String)>,
    facts: Vec<(&'static str, &'static str)>,
}

/// Facts without which some batches cannot be read at all, tried in this order (one, then two).
const READING_FACTS: &[(&str, &str, &str)] = &[
    (
        "offsets",
        "\"padded-slots\"",
        "a padding mask of one row per slot beside offsets that are the slots",
    ),
    ("labels", "\"from-input-ids\"", "no labels tensor: the model derives them from input_ids"),
    ("documents", "\"row-pad-tail\"", "no offsets, positions or mask: one document per row"),
    ("attention_mask", "\"row-flags\"", "an attention_mask of one value per row, not per token"),
    ("format", "\"hf\"", "the keys name no key family: Hugging Face rows"),
    (
        "padding_segments",
        "\"per-row\"",
        "the padding is one final segment by design: the padded offsets end in a segment the \
         real offsets lack",
    ),
];

/// Facts that change a verdict, narrowest first: each is proposed only where it strictly shrinks
/// what the known-good inputs fail and adds no failure.
const VERDICT_FACTS: &[(&str, &str)] = &[
    ("boundary_labels", "\"masked-by-loss\""),
    ("padding_labels", "\"masked-by-loss\""),
    ("padding_segments", "\"per-row\""),
    ("padding_segments", "\"absorbed\""),
    ("padding_segments", "\"any\""),
    ("cp_layout", "\"contiguous\""),
    ("cp_layout", "\"zigzag-sequence\""),
    ("block_mask", "\"true-masks\""),
    ("attention_mask", "\"padding\""),
    ("attention_mask", "\"sample-numbers\""),
    ("trailing_repeats", "\"row-padding\""),
    ("trailing_repeats", "\"segments\""),
    ("offsets_end", "\"first-negative\""),
    ("documents", "\"eos\""),
    ("objective", "\"pretrain\""),
];

/// The profile the known-good `files` evidence, as TOML with the evidence of each line in a
/// comment. `map`: the user's renames (`--map KEY=NAME`), applied to every file.
///
/// # Errors
/// A file that cannot be read, or that no reading suggest tries makes readable (named).
pub fn suggest(name: &str, files: &[PathBuf], map: &[(String, String)]) -> Result<String> {
    let inputs = files
        .iter()
        .map(|path| {
            let file = BatchFile::read(path).with_context(|| path.display().to_string())?;
            let keys = file.keys().map(str::to_owned).collect();
            let meta = file.metadata();
            // A CP rank's file says so in its metadata, or in scalar tensors (AReaL's).
            let scalar = |k: &str| {
                meta.get(k).and_then(|v| v.parse::<i64>().ok()).or_else(|| {
                    file.ints(k).ok().filter(|t| t.values.len() == 1).map(|t| t.values[0])
                })
            };
            let group = match (scalar("cp_rank"), scalar("cp_size")) {
                (Some(_), Some(size)) => usize::try_from(size)
                    .ok()
                    .map(|s| (path.parent().map(Path::to_path_buf).unwrap_or_default(), s)),
                _ => None,
            };
            Ok(Input { path: path.clone(), file, keys, group })
        })
        .collect::<Result<Vec<_>>>()?;
    let units = units(&inputs);
    let mut draft = Draft::default();
    for (from, to) in map {
        draft.top.map.push(Line {
            field: from.clone(),
            value: format!("{to:?}"),
            why: "--map".into(),
        });
    }

    // 0. Real offsets beside slot offsets, renamed where present only (`[map_when]`): without
    // them the slots' padding would count as real tokens.
    for input in &inputs {
        if let Some((key, lines)) = real_offsets(input, map)
            && !draft.map_when.iter().any(|(k, _)| *k == key)
        {
            draft.map_when.push((key, lines));
        }
    }

    // 1. Reading: every reading that makes each file readable, in order of preference.
    let mut readable: Vec<Vec<Reading>> = Vec::with_capacity(inputs.len());
    let mut evidence: BTreeMap<(String, String), String> = BTreeMap::new();
    for input in &inputs {
        let renamed = identify(input, map);
        for (from, to, why) in &renamed {
            evidence.entry((from.clone(), to.clone())).or_insert_with(|| why.clone());
        }
        let renames: Vec<(String, String)> =
            renamed.iter().map(|(f, t, _)| (f.clone(), t.clone())).collect();
        let mut ok = Vec::new();
        let mut first_error = None;
        for facts in fact_combinations() {
            let mut tries = vec![Reading { renames: renames.clone(), facts: facts.clone() }];
            if !renames.is_empty() {
                tries.push(Reading { renames: Vec::new(), facts: facts.clone() });
            }
            for reading in tries {
                let mut d = draft.clone();
                apply_reading(&mut d.top, &reading, &evidence, &[]);
                match parse(input.file.clone(), &read_options(&d.render(name, false), name)?) {
                    Ok(_) => ok.push(reading),
                    Err(e) => {
                        first_error.get_or_insert(e.to_string());
                    }
                }
            }
        }
        if ok.is_empty() {
            bail!(
                "{}: unreadable under the defaults, and under every rename and reading fact \
                 suggest tries: {}",
                input.path.display(),
                first_error.unwrap_or_default()
            );
        }
        readable.push(ok);
    }
    let groups = cover(&inputs, &readable, name, &draft)?;
    // One reading for all: the top level; else one variant per group, told by its keys.
    match groups.as_slice() {
        [(reading, members)] => {
            apply_reading(
                &mut draft.top,
                reading,
                &evidence,
                &needed_by(&inputs, members, reading),
            );
        }
        _ => {
            for (i, (reading, members)) in groups.iter().enumerate() {
                let others: Vec<usize> = groups
                    .iter()
                    .enumerate()
                    .filter(|(j, _)| *j != i)
                    .flat_map(|(_, (_, m))| m.iter().copied())
                    .collect();
                let (present, absent) = telling_keys(&inputs, members, &others);
                let mut scope = Scope::default();
                apply_reading(
                    &mut scope,
                    reading,
                    &evidence,
                    &needed_by(&inputs, members, reading),
                );
                let told = if present.is_empty() && absent.is_empty() {
                    "no key tells these files from the others': the last variant, for any keys"
                        .to_owned()
                } else {
                    format!("told by {}", told_by(&present, &absent))
                };
                draft.variants.push(VariantDraft {
                    name: format!("path{}", i + 1),
                    present,
                    absent,
                    why: format!("{} file(s) ({}): {told}", members.len(), names(&inputs, members)),
                    scope,
                    files: members.clone(),
                });
            }
            // A variant told by no key goes last: it takes every file the others do not.
            draft.variants.sort_by_key(|v| v.present.is_empty() && v.absent.is_empty());
        }
    }
    let baseline = judge(&draft, name, &inputs, &units)?;

    // 2. Evidence per path.
    let scopes: Vec<(Option<usize>, Vec<usize>)> = if draft.variants.is_empty() {
        vec![(None, (0..inputs.len()).collect())]
    } else {
        draft.variants.iter().enumerate().map(|(i, v)| (Some(i), v.files.clone())).collect()
    };
    for (scope, members) in &scopes {
        let parsed: Vec<(Parsed, &BatchFile)> = {
            let ro = read_options(&draft.render(name, false), name)?;
            members
                .iter()
                .filter_map(|&i| {
                    parse(inputs[i].file.clone(), &ro).ok().map(|p| (p, &inputs[i].file))
                })
                .collect()
        };
        for (field, seen) in evidence_of(&parsed) {
            match seen {
                Ok((value, why)) => {
                    if draft.scope(*scope).get(field).is_some() {
                        continue;
                    }
                    let mut with = draft.clone();
                    with.scope_mut(*scope).set(field, &value, why);
                    let after = judge(&with, name, &inputs, &units)?;
                    match new_failure(&inputs, &units, &baseline, &after) {
                        Some(what) => draft.scope_mut(*scope).unknown.push(format!(
                            "{field}: not determinable: {value} would make {what}, which it does \
                             not without it: the files disagree (several code paths?)"
                        )),
                        None => draft = with,
                    }
                }
                Err(why) => draft
                    .scope_mut(*scope)
                    .unknown
                    .push(format!("{field}: not determinable: {why}")),
            }
        }
    }

    // 2b. Slots that end in the pad id inside a CP group, once reassembled (slime's and AReaL's
    // CP alignment padding): the offsets are the slots, their real lengths the slot less the pad
    // ids that end it.
    for (scope, members) in &scopes {
        if draft.scope(*scope).get("offsets").is_some() {
            continue;
        }
        let pad = draft
            .scope(*scope)
            .get("pad_token_id")
            .or_else(|| draft.top.get("pad_token_id"))
            .and_then(|l| l.value.parse::<i64>().ok());
        let Some(pad) = pad else { continue };
        let read = read_options(&draft.render(name, false), name)?;
        let mut seen = Vec::new();
        for u in &units {
            let Unit::Group(dir, size, group) = u else { continue };
            if !group.iter().all(|i| members.contains(i)) {
                continue;
            }
            let paths: Vec<PathBuf> = group.iter().map(|&i| inputs[i].path.clone()).collect();
            let Ok(g) = reader::shards::read_group(dir, *size, &paths, &read) else { continue };
            let reader::shards::GroupBatch::Whole(pack) = g.batch else { continue };
            let (cu, ids) = (pack.cu.ints(), pack.input_ids.ints());
            let (mut slots, mut padded) = (0usize, 0usize);
            for i in 0..cu.len().saturating_sub(1) {
                let (Ok(a), Ok(b)) = (usize::try_from(cu.at(i)), usize::try_from(cu.at(i + 1)))
                else {
                    continue;
                };
                if b <= a || b > ids.len() || (a..b).all(|t| ids.at(t) == pad) {
                    continue;
                }
                slots += 1;
                padded += usize::from(ids.at(b - 1) == pad);
            }
            if padded > 0 {
                seen.push(format!(
                    "{}: {padded} of {slots} slots end in pad id {pad}",
                    dir.join("cp-group").display()
                ));
            }
        }
        if seen.is_empty() {
            continue;
        }
        let mut with = draft.clone();
        let why = format!(
            "REVIEW: reassembled, {}: the offsets are the slots, each less the pad ids that end \
             it",
            seen.join("; ")
        );
        with.scope_mut(*scope).set("offsets", "\"padded-slots\"", why);
        let after = judge(&with, name, &inputs, &units)?;
        match new_failure(&inputs, &units, &baseline, &after) {
            None => draft = with,
            Some(what) => draft.scope_mut(*scope).unknown.push(format!(
                "offsets: not determinable: \"padded-slots\" would make {what}, which it does not \
                 without it"
            )),
        }
    }

    // 3. Verdict facts: greedily, each one that strictly shrinks what the inputs fail.
    let mut current = judge(&draft, name, &inputs, &units)?;
    for _ in 0..4 {
        let mut changed = false;
        for (scope, _) in &scopes {
            for &(field, value) in VERDICT_FACTS {
                if draft.scope(*scope).get(field).is_some_and(|l| l.value == value) {
                    continue;
                }
                let mut with = draft.clone();
                with.scope_mut(*scope).set(field, value, String::new());
                let after = judge(&with, name, &inputs, &units)?;
                if new_failure(&inputs, &units, &current, &after).is_some() {
                    continue;
                }
                let fixed = fixed(&inputs, &units, &current, &after);
                if fixed.is_empty() {
                    continue;
                }
                let n = units.len();
                let why = format!(
                    "REVIEW: without it {} of {n} inputs fail ({}), and no input fails a rule \
                     more with it; state it only if the stack does this by design",
                    fixed.len(),
                    fixed.join("; ")
                );
                with.scope_mut(*scope).set(field, value, why);
                draft = with;
                current = after;
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    // Paths that read as different formats are named by them (ROLL: `te` and `hf`).
    let formats: Vec<Option<String>> = draft
        .variants
        .iter()
        .map(|v| v.scope.get("format").map(|l| l.value.trim_matches('"').to_owned()))
        .collect();
    let distinct: BTreeSet<&String> = formats.iter().flatten().collect();
    if formats.iter().all(Option::is_some) && distinct.len() == formats.len() {
        for (v, f) in draft.variants.iter_mut().zip(formats) {
            v.name = f.unwrap_or_default();
        }
    }
    lift_common(&mut draft);

    // What the files still fail under the whole suggestion, for review.
    let last = judge(&draft, name, &inputs, &units)?;
    let still: Vec<String> = units
        .iter()
        .zip(&last)
        .filter(|(_, f)| !f.is_empty())
        .map(|(u, f)| {
            format!("{}: {}", u.label(&inputs), f.iter().cloned().collect::<Vec<_>>().join(", "))
        })
        .collect();
    let n = files.len();
    let mut out = format!(
        "# Suggested by `thdcheck profile suggest` from {n} known-good batch file(s): review \
         every line,\n# and add a [sources] entry citing the upstream code for each fact you \
         keep.\n"
    );
    for s in &still {
        let _ = writeln!(
            out,
            "# REVIEW: still fails under this profile (a bug in the batch, or a fact thdcheck \
             cannot infer): {}",
            one_line(s)
        );
    }
    out.push_str(&draft.render(name, true));
    // What is printed parses (it was judged as such).
    Profile::parse(&out, "suggested profile", None)
        .with_context(|| format!("the suggested profile does not parse:\n{out}"))?;
    Ok(out)
}

/// The renames the data of `input` identify (after the user's `map`): `(key, name, evidence)`.
fn identify(input: &Input, map: &[(String, String)]) -> Vec<(String, String, String)> {
    let f = &input.file;
    let mut out: Vec<(String, String, String)> = Vec::new();
    let after = |k: &str| -> String {
        map.iter().find(|(from, _)| from == k).map_or_else(|| k.to_owned(), |(_, to)| to.clone())
    };
    let has = |name: &str, out: &[(String, String, String)]| {
        input.keys.iter().any(|k| after(k) == name) || out.iter().any(|(_, t, _)| t == name)
    };
    let mapped = |k: &str| map.iter().any(|(from, _)| from == k);
    let is_int = |k: &str| f.ints(k).is_ok();
    // The tokens: `tokens` (Megatron, slime) and its like, when no key is input_ids.
    let mut ids_key = input.keys.iter().find(|k| after(k) == "input_ids").cloned();
    if ids_key.is_none() {
        for k in ["tokens", "token_ids", "input_tokens"] {
            if input.keys.contains(k) && !mapped(k) && is_int(k) {
                let shape = f.entry(k).map(|e| e.shape.clone()).unwrap_or_default();
                out.push((
                    k.to_owned(),
                    "input_ids".to_owned(),
                    format!("an integer tensor {shape:?} named `{k}`, and no input_ids"),
                ));
                ids_key = Some(k.to_owned());
                break;
            }
        }
    }
    let Some(ids_key) = ids_key else { return out };
    let Ok(ids) = f.ints(&ids_key) else { return out };
    let numel = ids.values.len();
    // The targets: a tensor of the tokens' shape equal to them shifted by one (or to them).
    if !has("labels", &out) && !has("shift_labels", &out) {
        let row = ids.shape.last().copied().unwrap_or(numel).max(1);
        for k in &input.keys {
            if *k == ids_key || mapped(k) || k.ends_with("mask") || k.contains("position") {
                continue;
            }
            let Ok(t) = f.ints(k) else { continue };
            if t.shape != ids.shape || numel < 2 {
                continue;
            }
            let (mut valid, mut shifted, mut same) = (0usize, 0usize, 0usize);
            for (i, &y) in t.values.iter().enumerate() {
                if y == thd::IGNORE_INDEX || (i + 1) % row == 0 {
                    continue;
                }
                valid += 1;
                shifted += usize::from(ids.values[i + 1] == y);
                same += usize::from(ids.values[i] == y);
            }
            let what = if valid > 0 && shifted == valid {
                "the next token (input_ids shifted by one)"
            } else if valid > 0 && same == valid {
                "its own token"
            } else {
                continue;
            };
            out.push((
                k.clone(),
                "labels".to_owned(),
                format!("each of its {valid} values not -100 (each row's last aside) is {what}"),
            ));
            break;
        }
    }
    // A loss mask under another name.
    if !has("loss_mask", &out) {
        for k in &input.keys {
            if k != "loss_mask"
                && k.contains("loss_mask")
                && !mapped(k)
                && let Ok((_, m)) = f.mask(k)
                && m.len() == numel
            {
                out.push((
                    k.clone(),
                    "loss_mask".to_owned(),
                    format!("a 0/1 tensor of one value per token named `{k}`"),
                ));
                break;
            }
        }
    }
    // A padding mask under another name (SkyRL's `mtp_packed_mask`): a 0/1 tensor of one value
    // per token with some zeros, named a mask and not a loss or label mask, where the file has
    // no attention_mask.
    if !has("attention_mask", &out) && !input.keys.iter().any(|k| k == "attention_mask") {
        for k in &input.keys {
            let name = k.to_ascii_lowercase();
            // `padding_mask` is read as it is (TransformerEngine's, true on the padding).
            if !name.contains("mask")
                || ["loss", "label", "padding_mask"].iter().any(|w| name.contains(w))
            {
                continue;
            }
            if mapped(k) {
                continue;
            }
            if let Ok((_, m)) = f.mask(k)
                && m.len() == numel
                && m.iter().any(|real| !real)
                && m.iter().any(|real| *real)
            {
                let zeros = m.iter().filter(|real| !**real).count();
                out.push((
                    k.clone(),
                    "attention_mask".to_owned(),
                    format!(
                        "a 0/1 tensor of one value per token named `{k}`, 0 on {zeros} of the \
                         {numel} tokens, and no attention_mask: a padding mask"
                    ),
                ));
                break;
            }
        }
    }
    // The offsets: a monotone int32 vector from 0 to the token count, when no key is one.
    let offsets = ["cu_seqlens", "cu_seqlens_q", "cu_seq_lens_q", "seq_lens", "doc_lens"];
    if !offsets.iter().any(|o| has(o, &out)) {
        for k in &input.keys {
            let Some(e) = f.entry(k) else { continue };
            let vector = e.shape.len() == 1 || (e.shape.len() == 2 && e.shape[0] == 1);
            if format!("{:?}", e.dtype) != "I32" || !vector || mapped(k) {
                continue;
            }
            let Ok(v) = f.ints(k) else { continue };
            let v = v.values;
            let monotone = v.windows(2).all(|w| w[0] <= w[1]);
            if v.len() >= 2
                && v[0] == 0
                && monotone
                && usize::try_from(v[v.len() - 1]).is_ok_and(|l| l == numel)
            {
                out.push((
                    k.clone(),
                    "cu_seqlens".to_owned(),
                    format!(
                        "an int32 vector of {} values rising from 0 to the {numel} tokens",
                        v.len()
                    ),
                ));
                break;
            }
        }
    }
    out
}

/// Real offsets beside slot offsets (AReaL's `old_cu_seqlens` beside the padded `cu_seqlens`):
/// an int32 vector rising from 0 whose every length fits the slot of the same index, ending
/// short of the slots' tokens, in a file that names no padded offsets. Returns the key and the
/// two renames (it to `cu_seqlens`, the slots to `cu_seqlens_padded`) with their evidence.
fn real_offsets(input: &Input, map: &[(String, String)]) -> Option<(String, Vec<Line>)> {
    let f = &input.file;
    let after = |k: &str| -> String {
        map.iter().find(|(from, _)| from == k).map_or_else(|| k.to_owned(), |(_, to)| to.clone())
    };
    let mapped = |k: &str| map.iter().any(|(from, _)| from == k);
    if input.keys.iter().any(|k| after(k) == "cu_seqlens_padded") {
        return None;
    }
    let slots_key = input.keys.iter().find(|k| after(k) == "cu_seqlens")?.clone();
    if mapped(&slots_key) {
        return None;
    }
    let slots = f.ints(&slots_key).ok()?.values;
    for k in &input.keys {
        let Some(e) = f.entry(k) else { continue };
        if *k == slots_key || mapped(k) || format!("{:?}", e.dtype) != "I32" || e.shape.len() != 1 {
            continue;
        }
        let Ok(v) = f.ints(k) else { continue };
        let v = v.values;
        let fits = v.len() >= 2
            && v.len() <= slots.len()
            && v[0] == 0
            && slots.first() == Some(&0)
            && v.windows(2)
                .zip(slots.windows(2))
                .all(|(r, s)| r[0] <= r[1] && r[1] - r[0] <= s[1] - s[0])
            && v.last() < slots.last();
        if !fits {
            continue;
        }
        let (real, stored) = (v[v.len() - 1], slots[slots.len() - 1]);
        let lines = vec![
            Line {
                field: k.clone(),
                value: "\"cu_seqlens\"".into(),
                why: format!(
                    "REVIEW: in {}, an int32 vector rising from 0 to {real} whose every length \
                     fits the slot of `{slots_key}` at its index: the real offsets",
                    input.path.display()
                ),
            },
            Line {
                field: slots_key.clone(),
                value: "\"cu_seqlens_padded\"".into(),
                why: format!(
                    "its slots hold the real lengths of `{k}` ({stored} tokens stored for {real} \
                     real): the padded offsets"
                ),
            },
        ];
        return Some((k.clone(), lines));
    }
    None
}

/// No reading fact, then each one, then each two.
fn fact_combinations() -> Vec<Vec<(&'static str, &'static str)>> {
    let single: Vec<(&'static str, &'static str)> =
        READING_FACTS.iter().map(|&(f, v, _)| (f, v)).collect();
    let mut out = vec![Vec::new()];
    out.extend(single.iter().map(|&f| vec![f]));
    for (i, &a) in single.iter().enumerate() {
        for &b in &single[i + 1..] {
            out.push(vec![a, b]);
        }
    }
    out
}

/// Writes `reading` into `scope`, the evidence of each line beside it; `needed`: for each
/// reading fact, a file that reads only with it and its error without.
fn apply_reading(
    scope: &mut Scope,
    reading: &Reading,
    evidence: &BTreeMap<(String, String), String>,
    needed: &[(String, String)],
) {
    for (from, to) in &reading.renames {
        if scope.map.iter().any(|l| &l.field == from) {
            continue;
        }
        let why = evidence.get(&(from.clone(), to.clone())).cloned().unwrap_or_default();
        scope.map.push(Line { field: from.clone(), value: format!("{to:?}"), why });
    }
    for &(field, value) in &reading.facts {
        let what = READING_FACTS
            .iter()
            .find(|(f, v, _)| *f == field && *v == value)
            .map_or("", |(_, _, w)| *w);
        let without = needed
            .iter()
            .find(|(f, _)| f == field)
            .map_or_else(String::new, |(_, e)| format!(": {e}"));
        scope.set(field, value, format!("REVIEW: read only with it ({what}){without}"));
    }
}

/// For each reading fact of `reading`, a member file and why it does not read without it.
fn needed_by(inputs: &[Input], members: &[usize], reading: &Reading) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for &(field, _) in &reading.facts {
        let mut without = reading.clone();
        without.facts.retain(|(f, _)| *f != field);
        let mut scope = Scope::default();
        apply_reading(&mut scope, &without, &BTreeMap::new(), &[]);
        let d = Draft { top: scope, map_when: Vec::new(), variants: Vec::new() };
        let Ok(ro) = read_options(&d.render("x", false), "x") else { continue };
        for &i in members {
            if let Err(e) = parse(inputs[i].file.clone(), &ro) {
                out.push((
                    field.to_owned(),
                    format!("{} without it: {e}", inputs[i].path.display()),
                ));
                break;
            }
        }
    }
    out
}

/// The fewest readings that read every file: repeatedly the one reading the most files not yet
/// covered (ties: the earliest preferred), then split by the format each file reads as.
fn cover(
    inputs: &[Input],
    readable: &[Vec<Reading>],
    name: &str,
    base: &Draft,
) -> Result<Vec<(Reading, Vec<usize>)>> {
    let mut left: BTreeSet<usize> = (0..inputs.len()).collect();
    let mut groups: Vec<(Reading, Vec<usize>)> = Vec::new();
    while !left.is_empty() {
        // Readings compare by their facts: the renames are each file's own (a rename whose key
        // a file lacks is skipped), so a group takes every rename its files read with.
        let mut best: Option<(&Reading, Vec<usize>)> = None;
        for &i in &left {
            for r in &readable[i] {
                let members: Vec<usize> = left
                    .iter()
                    .copied()
                    .filter(|&j| readable[j].iter().any(|x| x.facts == r.facts))
                    .collect();
                if best.as_ref().is_none_or(|(_, m)| members.len() > m.len()) {
                    best = Some((r, members));
                }
            }
        }
        let (r, members) = best.expect("every file has a reading");
        let mut reading = Reading { renames: Vec::new(), facts: r.facts.clone() };
        for m in &members {
            left.remove(m);
            let own = readable[*m].iter().find(|x| x.facts == r.facts).expect("a member");
            for (from, to) in &own.renames {
                if !reading.renames.iter().any(|(f, _)| f == from) {
                    reading.renames.push((from.clone(), to.clone()));
                }
            }
        }
        groups.push((reading, members));
    }
    // Paths of different formats (ROLL's Megatron THD and FSDP2 rows) under one reading: a
    // variant each, when keys tell them apart.
    let mut split = Vec::new();
    for (reading, members) in groups {
        let mut d = base.clone();
        apply_reading(&mut d.top, &reading, &BTreeMap::new(), &[]);
        let ro = read_options(&d.render(name, false), name)?;
        let mut by_format: BTreeMap<String, Vec<usize>> = BTreeMap::new();
        for &i in &members {
            let format = parse(inputs[i].file.clone(), &ro)
                .map(|p| p.dialect.name().to_owned())
                .unwrap_or_default();
            by_format.entry(format).or_default().push(i);
        }
        let tellable = by_format.len() > 1
            && by_format.values().all(|m| {
                let others: Vec<usize> =
                    members.iter().copied().filter(|i| !m.contains(i)).collect();
                let (p, a) = telling_keys(inputs, m, &others);
                !p.is_empty() || !a.is_empty()
            });
        if tellable {
            // Each path keeps only the reading facts its own files need.
            for m in by_format.into_values() {
                let mut own = reading.clone();
                for fact in reading.facts.clone() {
                    let mut without = own.clone();
                    without.facts.retain(|f| *f != fact);
                    let mut d = base.clone();
                    apply_reading(&mut d.top, &without, &BTreeMap::new(), &[]);
                    let ro = read_options(&d.render(name, false), name)?;
                    if m.iter().all(|&i| parse(inputs[i].file.clone(), &ro).is_ok()) {
                        own = without;
                    }
                }
                split.push((own, m));
            }
        } else {
            split.push((reading, members));
        }
    }
    Ok(split)
}

/// A key every file of `members` has and no file of `others` (`present`), else one no file of
/// `members` has and every file of `others` has (`absent`).
fn telling_keys(
    inputs: &[Input],
    members: &[usize],
    others: &[usize],
) -> (Vec<String>, Vec<String>) {
    let all = |set: &[usize], k: &String| set.iter().all(|&i| inputs[i].keys.contains(k));
    let none = |set: &[usize], k: &String| set.iter().all(|&i| !inputs[i].keys.contains(k));
    let Some(&first) = members.first() else { return (Vec::new(), Vec::new()) };
    // Prefer a key whose name says what it is (`_padded`, `mask`) over the alphabet's first.
    let mut present: Vec<&String> =
        inputs[first].keys.iter().filter(|k| all(members, k) && none(others, k)).collect();
    present.sort_by_key(|k| (!k.contains("padded"), !k.contains("cu_seq"), k.len()));
    if let Some(k) = present.first() {
        return (vec![(*k).clone()], Vec::new());
    }
    let Some(&other) = others.first() else { return (Vec::new(), Vec::new()) };
    let mut absent: Vec<&String> =
        inputs[other].keys.iter().filter(|k| all(others, k) && none(members, k)).collect();
    absent.sort_by_key(|k| (!k.contains("padded"), !k.contains("cu_seq"), k.len()));
    match absent.first() {
        Some(k) => (Vec::new(), vec![(*k).clone()]),
        None => (Vec::new(), Vec::new()),
    }
}

fn told_by(present: &[String], absent: &[String]) -> String {
    let mut why: Vec<String> = present.iter().map(|k| format!("`{k}`")).collect();
    why.extend(absent.iter().map(|k| format!("no `{k}`")));
    why.join(", ")
}

fn names(inputs: &[Input], members: &[usize]) -> String {
    let mut n: Vec<String> = members
        .iter()
        .map(|&i| {
            inputs[i]
                .path
                .file_name()
                .map_or_else(String::new, |f| f.to_string_lossy().into_owned())
        })
        .collect();
    n.dedup();
    if n.len() > 3 {
        let more = n.len() - 3;
        n.truncate(3);
        n.push(format!("{more} more"));
    }
    n.join(", ")
}

/// The files judged alone, and each directory's CP group of rank files.
fn units(inputs: &[Input]) -> Vec<Unit> {
    let mut out = Vec::new();
    let mut groups: BTreeMap<(PathBuf, usize), Vec<usize>> = BTreeMap::new();
    for (i, input) in inputs.iter().enumerate() {
        match &input.group {
            Some(g) => groups.entry(g.clone()).or_default().push(i),
            None => out.push(Unit::File(i)),
        }
    }
    out.extend(groups.into_iter().map(|((dir, size), m)| Unit::Group(dir, size, m)));
    out
}

fn read_options(text: &str, name: &str) -> Result<ReadOptions> {
    let profile = Profile::parse(text, "suggested profile", None)
        .with_context(|| format!("the suggested profile {name} does not parse:\n{text}"))?;
    Ok(ReadOptions { profile: Some(Arc::new(profile)), ..Default::default() })
}

/// What each unit fails under `draft`.
fn judge(draft: &Draft, name: &str, inputs: &[Input], units: &[Unit]) -> Result<Verdicts> {
    let read = read_options(&draft.render(name, false), name)?;
    let fails = |r: std::result::Result<FileReport, String>| -> BTreeSet<String> {
        match r {
            Ok(r) => r.violated().into_iter().map(str::to_owned).collect(),
            Err(_) => BTreeSet::from(["unreadable".to_owned()]),
        }
    };
    Ok(units
        .iter()
        .map(|u| match u {
            Unit::File(i) => fails(
                check_file(inputs[*i].file.clone(), &read, &CheckOptions::default())
                    .map_err(|e| e.to_string()),
            ),
            Unit::Group(dir, size, members) => {
                let paths: Vec<PathBuf> = members.iter().map(|&i| inputs[i].path.clone()).collect();
                fails(group_report(dir, *size, &paths, &read))
            }
        })
        .collect())
}

/// A CP group's report, as `check` makes it.
fn group_report(
    dir: &Path,
    size: usize,
    paths: &[PathBuf],
    read: &ReadOptions,
) -> std::result::Result<FileReport, String> {
    let g = reader::shards::read_group(dir, size, paths, read).map_err(|e| e.to_string())?;
    Ok(reader::check_group(g, read, &CheckOptions::default()))
}

/// The first unit that fails something under `after` it did not under `before`, named.
fn new_failure(
    inputs: &[Input],
    units: &[Unit],
    before: &Verdicts,
    after: &Verdicts,
) -> Option<String> {
    units.iter().zip(before.iter().zip(after)).find_map(|(u, (b, a))| {
        a.iter().find(|r| !b.contains(*r)).map(|r| {
            if r == "unreadable" {
                format!("{} unreadable", u.label(inputs))
            } else {
                format!("{} violate `{r}`", u.label(inputs))
            }
        })
    })
}

/// The units that fail less under `after`, each with what it no longer fails.
fn fixed(inputs: &[Input], units: &[Unit], before: &Verdicts, after: &Verdicts) -> Vec<String> {
    units
        .iter()
        .zip(before.iter().zip(after))
        .filter_map(|(u, (b, a))| {
            let gone: Vec<&String> = b.iter().filter(|r| !a.contains(*r)).collect();
            (!gone.is_empty()).then(|| {
                let gone: Vec<String> = gone.iter().map(|r| format!("`{r}`")).collect();
                let path = u.label(inputs);
                let short = Path::new(&path)
                    .iter()
                    .rev()
                    .take(2)
                    .collect::<Vec<_>>()
                    .into_iter()
                    .rev()
                    .collect::<PathBuf>();
                format!("{}: {}", short.display(), gone.join(", "))
            })
        })
        .collect()
}

/// Lines every variant states alike go to the top level.
fn lift_common(draft: &mut Draft) {
    if draft.variants.len() < 2 {
        return;
    }
    let first = draft.variants[0].scope.clone();
    for l in &first.facts {
        if draft
            .variants
            .iter()
            .all(|v| v.scope.facts.iter().any(|m| m.field == l.field && m.value == l.value))
            && draft.top.get(&l.field).is_none()
        {
            draft.top.facts.push(l.clone());
            for v in &mut draft.variants {
                v.scope.facts.retain(|m| m.field != l.field);
            }
        }
    }
    for l in &first.map {
        if draft
            .variants
            .iter()
            .all(|v| v.scope.map.iter().any(|m| m.field == l.field && m.value == l.value))
            && !draft.top.map.iter().any(|m| m.field == l.field)
        {
            draft.top.map.push(l.clone());
            for v in &mut draft.variants {
                v.scope.map.retain(|m| m.field != l.field);
            }
        }
    }
}

/// A descriptive fact's value as TOML and its evidence, or why the files do not show it.
type Seen = std::result::Result<(String, String), String>;

/// What the parsed files of one path show: each descriptive fact's value and why, or why not.
fn evidence_of(parsed: &[(Parsed, &BatchFile)]) -> Vec<(&'static str, Seen)> {
    let mut out = Vec::new();
    if let Some(seen) = padding_length(parsed) {
        out.push(("padding_segments", seen));
    }
    let label_mask = parsed.iter().all(|(_, f)| f.contains("label_mask") || f.contains("doc_lens"))
        && parsed.iter().any(|(_, f)| f.contains("label_mask"));
    let parsed: Vec<&Parsed> = parsed.iter().map(|(p, _)| p).collect();
    let labels = parsed.iter().any(|p| p.packs.iter().any(|pack| pack.labels.is_some()));
    let mut formats = BTreeMap::new();
    let (mut unshifted, mut shifted, mut valid) = (0usize, 0usize, 0usize);
    let mut pad_ids = BTreeMap::new();
    // Without a mask: per id, the segments that end in a run of it (2 tokens or more) whose
    // labels are all ignored, and the tokens of those runs.
    let mut tails: BTreeMap<i64, (usize, usize)> = BTreeMap::new();
    let mut segments = 0usize;
    // Of those runs, how many end a pack's last segment (its document continues into the
    // padding: `absorbed`) and how many end another segment.
    let (mut runs_last, mut runs_inner) = (0usize, 0usize);
    // Per id, the packs whose last segment is that id alone, 2 tokens or more (a padding segment
    // of its own).
    let mut final_runs: BTreeMap<i64, usize> = BTreeMap::new();
    let mut bases = BTreeMap::new();
    for p in parsed {
        *formats.entry(p.dialect.name()).or_insert(0usize) += 1;
        for pack in &p.packs {
            let ids = pack.input_ids.ints();
            if let Some(labels) = &pack.labels {
                let l = labels.ints();
                for t in 0..l.len() {
                    let y = l.at(t);
                    if y == thd::IGNORE_INDEX {
                        continue;
                    }
                    valid += 1;
                    unshifted += usize::from(y == ids.at(t));
                    shifted += usize::from(ids.get(t + 1) == Some(y));
                }
            }
            if let Some(mask) = &pack.real_mask {
                for (t, real) in mask.iter().enumerate() {
                    if !real {
                        *pad_ids.entry(ids.at(t)).or_insert(0usize) += 1;
                    }
                }
            }
            if pack.real_mask.is_none() && p.cp_shard.is_none() {
                // In storage: the slots, where the offsets have them.
                let cu = pack.cu_padded.as_ref().unwrap_or(&pack.cu).ints();
                let n = cu.len();
                if n >= 2
                    && let (Ok(a), Ok(b)) =
                        (usize::try_from(cu.at(n - 2)), usize::try_from(cu.at(n - 1)))
                    && b >= a + 2
                    && b <= ids.len()
                    && (a..b).all(|t| ids.at(t) == ids.at(a))
                {
                    *final_runs.entry(ids.at(a)).or_insert(0) += 1;
                }
            }
            if pack.real_mask.is_some() {
            } else if let (Some(labels), None) = (&pack.labels, p.cp_shard) {
                let l = labels.ints();
                let cu = pack.cu.ints();
                let n_cu = cu.len();
                for (k, (start, end)) in cu.iter().zip(cu.iter().skip(1)).enumerate() {
                    let (Ok(start), Ok(end)) = (usize::try_from(start), usize::try_from(end))
                    else {
                        continue;
                    };
                    if end > ids.len().min(l.len()) {
                        continue;
                    }
                    segments += usize::from(end > start);
                    let Some(last) = end.checked_sub(1).filter(|&e| e > start) else { continue };
                    let id = ids.at(last);
                    let run = (start..end)
                        .rev()
                        .take_while(|&t| ids.at(t) == id && l.at(t) == thd::IGNORE_INDEX)
                        .count();
                    if run >= 2 {
                        let e = tails.entry(id).or_insert((0, 0));
                        *e = (e.0 + 1, e.1 + run);
                        if k + 2 == n_cu && pack.row_slots.is_none() && !pack.rows_are_sequences {
                            runs_last += 1;
                        } else {
                            runs_inner += 1;
                        }
                    }
                }
            }
            if let Some(pos) = &pack.position_ids {
                let p = pos.ints();
                let cu = pack.cu.ints();
                let starts = cu.iter().zip(cu.iter().skip(1)).filter(|(a, b)| b > a);
                // A CP rank's file keeps the global offsets over its local tokens: only the
                // starts it holds say anything (`get`: an offset past them is no index).
                for (start, _) in starts {
                    if let Some(base) = usize::try_from(start).ok().and_then(|s| p.get(s)) {
                        *bases.entry(base).or_insert(0usize) += 1;
                    }
                }
            }
        }
    }
    if tails.len() == 1 && runs_last > 0 && runs_inner == 0 && pad_ids.is_empty() {
        out.push((
            "padding_segments",
            Ok((
                "\"absorbed\"".into(),
                format!(
                    "REVIEW: the ignored pad-id run ends the last segment of {runs_last} pack(s) \
                     and no other segment: the padding continues the last document"
                ),
            )),
        ));
    }
    out.push((
        "format",
        match formats.len() {
            1 => {
                let (f, _) = formats.iter().next().expect("one");
                Ok((format!("{f:?}"), format!("every file reads as the {f} format")))
            }
            _ => Err(format!("the files read as several formats: {formats:?}")),
        },
    ));
    out.push((
        "labels",
        if !labels && label_mask {
            Ok((
                "\"from-input-ids\"".into(),
                "REVIEW: no labels tensor, and a `label_mask` (or per-row `doc_lens`) in every \
                 file: the model derives its labels from input_ids under label_mask"
                    .into(),
            ))
        } else if valid == 0 {
            Err("no valid label in the files".into())
        } else if unshifted == valid && shifted < valid {
            Ok(("\"unshifted\"".into(), format!("all {valid} valid labels are their own token")))
        } else if shifted == valid && unshifted < valid {
            Ok(("\"shifted\"".into(), format!("all {valid} valid labels are the next token")))
        } else {
            Err(format!(
                "of {valid} valid labels, {unshifted} are their own token and {shifted} the next \
                 (masked LM, or a separate target)"
            ))
        },
    ));
    out.push((
        "pad_token_id",
        match pad_ids.len() {
            1 => {
                let (id, count) = pad_ids.iter().next().expect("one");
                Ok((id.to_string(), format!("all {count} masked-out tokens hold it")))
            }
            0 => match tails.len() {
                1 => {
                    let (id, (n, tokens)) = tails.iter().next().expect("one");
                    Ok((
                        id.to_string(),
                        format!(
                            "REVIEW: no mask marks padding, but {n} of {segments} segments end \
                             in a run of token {id} ({tokens} tokens in all, 2 or more \
                             each) whose labels are all ignored: right padding by that id"
                        ),
                    ))
                }
                0 => match final_runs.len() {
                    1 => {
                        let (id, n) = final_runs.iter().next().expect("one");
                        Ok((
                            id.to_string(),
                            format!(
                                "REVIEW: no mask marks padding, but the last segment of {n} \
                                 pack(s) is token {id} alone: a padding segment of that id"
                            ),
                        ))
                    }
                    0 => Err("no mask marks padding in the files, no segment ends in a run of \
                              one token whose labels are all ignored, and no last segment is \
                              one token repeated"
                        .into()),
                    _ => Err(format!(
                        "no mask marks padding; last segments repeat several ids: {:?}",
                        final_runs.keys().collect::<Vec<_>>()
                    )),
                },
                _ => Err(format!(
                    "no mask marks padding; segments end in ignored runs of several ids: {:?}",
                    tails.keys().collect::<Vec<_>>()
                )),
            },
            _ => Err(format!("masked-out tokens hold several ids: {pad_ids:?}")),
        },
    ));
    out.push((
        "position_base",
        match bases.len() {
            1 => {
                let (b, count) = bases.iter().next().expect("one");
                if *b == 0 {
                    Err("every segment starts at position 0 (the default)".into())
                } else {
                    Ok((b.to_string(), format!("all {count} segments start there")))
                }
            }
            0 => Err("no position_ids in the files".into()),
            _ => Err(format!("segments start at several positions: {bases:?}")),
        },
    ));
    out
}

/// A scalar padding length (AReaL's `padding_length`) that is, in every file, 0 or the length of
/// the file's last segment, and not 0 in some: the padding is one final segment by design.
fn padding_length(parsed: &[(Parsed, &BatchFile)]) -> Option<Seen> {
    let mut key = None;
    let (mut last, mut zero) = (0usize, 0usize);
    for (p, file) in parsed {
        let Some(k) = file.keys().find(|k| {
            k.contains("pad")
                && (k.ends_with("len") || k.ends_with("length"))
                && file.entry(k).is_some_and(|e| e.numel() == 1)
        }) else {
            continue;
        };
        if p.cp_shard.is_some() {
            continue;
        }
        let v = file.ints(k).ok()?.values.first().copied()?;
        let [pack] = p.packs.as_slice() else { return None };
        let cu = pack.cu.ints();
        let n = cu.len();
        let tail = if n >= 2 { cu.at(n - 1) - cu.at(n - 2) } else { return None };
        match v {
            0 => zero += 1,
            v if v == tail => last += 1,
            _ => return None,
        }
        key.get_or_insert_with(|| k.to_owned());
    }
    let key = key?;
    (last > 0).then(|| {
        Ok((
            "\"per-row\"".to_owned(),
            format!(
                "REVIEW: `{key}` is the length of the last segment in {last} file(s) (0 in \
                 {zero}): the padding is one final segment by design"
            ),
        ))
    })
}
