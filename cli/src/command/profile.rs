//! `thdcheck profile list | show | suggest`: the stack contracts as data (`reader::profile`).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result, bail};

use super::cli::ProfileCommand;
use reader::formats::{Objective, ReadOptions, parse};
use reader::profile::{Contract, OffsetsFact, PaddingSegments, Profile};
use reader::tensors::BatchFile;
use reader::{CheckOptions, check_file};

/// Runs `thdcheck profile …`; returns the exit code.
pub fn run(cmd: &ProfileCommand) -> Result<u8> {
    match cmd {
        ProfileCommand::List => {
            for p in Profile::builtins() {
                let told = if p.detect.is_empty() { "" } else { " (also told by its keys)" };
                println!("{:<16} {}{told}", p.name, p.stack);
            }
            Ok(0)
        }
        ProfileCommand::Show { profile } => {
            let p = Profile::resolve(profile, None)?;
            print!("{}", show(&p));
            Ok(0)
        }
        ProfileCommand::Suggest { name, paths } => {
            let files = collect(paths)?;
            print!("{}", suggest(name, &files)?);
            Ok(0)
        }
    }
}

/// A profile's facts and their sources, as `profile show` prints them.
pub fn show(p: &Profile) -> String {
    let mut out = format!("{} — {}\n  from: {}\n", p.name, p.stack, p.origin);
    if let Some(base) = &p.extends {
        let _ = writeln!(out, "  extends: {base}");
    }
    let facts: Vec<_> = p.stated_facts().into_iter().filter(|(f, _)| *f != "variant").collect();
    if facts.is_empty() {
        out.push_str("  no facts: the defaults of packed training (docs/profiles.md)\n");
    }
    facts_with_sources(&mut out, "  ", facts, p);
    for v in &p.variants {
        let _ = writeln!(out, "  variant {:<9} told by {}", v.name, v.told_by());
        let as_profile = v.as_profile();
        facts_with_sources(&mut out, "    ", as_profile.stated_facts(), &as_profile);
    }
    for d in &p.detect {
        let _ = writeln!(
            out,
            "  {:<17} keys {:?}{}",
            "detect",
            d.present,
            if d.absent.is_empty() { String::new() } else { format!(", none of {:?}", d.absent) }
        );
    }
    out
}

/// Each fact of `p` and its source, indented by `indent`.
fn facts_with_sources(
    out: &mut String,
    indent: &str,
    facts: Vec<(&'static str, String)>,
    p: &Profile,
) {
    for (field, value) in facts {
        let _ = writeln!(out, "{indent}{field:<17} {value}");
        // A rename's own source first (`[sources] "map.KEY"`), then the field's.
        let own = value.split_once(" = ").map(|(key, _)| format!("{field}.{key}"));
        let source = own.and_then(|o| p.sources.get(&o)).or_else(|| {
            p.sources
                .iter()
                .find(|(k, _)| {
                    k.as_str() == field || k.strip_prefix(field).is_some_and(|r| r.starts_with('.'))
                })
                .map(|(_, s)| s)
        });
        let source = source.map_or("none given", String::as_str);
        let _ = writeln!(out, "{indent}{:<17}   source: {source}", "");
    }
}

fn collect(paths: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    let mut bad = Vec::new();
    for path in paths {
        let meta =
            std::fs::metadata(path).with_context(|| format!("cannot read {}", path.display()))?;
        if meta.is_dir() {
            engine::files::walk(path, &mut files, &mut bad)?;
        } else {
            files.push(path.clone());
        }
    }
    if let Some((path, why)) = bad.first() {
        bail!("{}: {why}", path.display());
    }
    if files.is_empty() {
        bail!("no .safetensors file under {paths:?}");
    }
    Ok(files)
}

/// A fact that changes a verdict: its field, its value as TOML, the rule it silences, and how
/// to set it.
type VerdictFact = (&'static str, &'static str, &'static str, fn(&mut Profile));

/// What one fact's evidence is.
enum Evidence {
    /// Seen in every file: the value and why.
    Seen(String, String),
    /// Not shown by the files: why.
    Unknown(String),
}

/// The profile the known-good `files` evidence, as TOML with a comment on each fact.
///
/// A fact is written only when every file shows it. The two facts that change a verdict
/// (`padding_segments`, `objective = "pretrain"`) are written only when the files violate the
/// rule they silence under the defaults and pass with the fact: a fact that would silence a
/// violation the batches do not show is never suggested.
///
/// # Errors
/// A file that cannot be read or understood under the defaults.
pub fn suggest(name: &str, files: &[PathBuf]) -> Result<String> {
    let mut facts: BTreeMap<&'static str, Evidence> = BTreeMap::new();
    let mut formats = BTreeMap::new();
    let (mut unshifted, mut shifted, mut valid) = (0usize, 0usize, 0usize);
    let mut pad_ids = BTreeMap::new();
    let mut bases = BTreeMap::new();
    // Files unreadable under the defaults that read with offsets = "padded-slots": a padding
    // mask with one row per slot beside offsets that are the slots (SkyRL's packed micro-batch).
    // The defaults are an empty profile, stated: a file's metadata `profile` or a built-in
    // profile told by its keys would otherwise read it under facts the files did not show.
    let read_with = |offsets| ReadOptions {
        profile: Some(Arc::new(Profile {
            name: name.to_owned(),
            facts: Contract { offsets, ..Contract::default() },
            ..Profile::default()
        })),
        ..Default::default()
    };
    let (defaults, with_slots) = (read_with(None), read_with(Some(OffsetsFact::PaddedSlots)));
    let mut slot_files = 0usize;
    // Which files read only with padded-slot offsets: each is judged under that fact below,
    // whatever the others need (one profile for both needs variants of a stack's paths).
    let mut needs_slots = Vec::with_capacity(files.len());
    for path in files {
        let file = BatchFile::read(path).with_context(|| path.display().to_string())?;
        needs_slots.push(false);
        let parsed = match parse(file.clone(), &defaults) {
            Ok(p) => p,
            Err(e) => match parse(file, &with_slots) {
                Ok(p) => {
                    slot_files += 1;
                    if let Some(last) = needs_slots.last_mut() {
                        *last = true;
                    }
                    p
                }
                Err(_) => {
                    return Err(anyhow::Error::new(e)
                        .context(format!("{}: unreadable under the defaults", path.display())));
                }
            },
        };
        *formats.entry(parsed.dialect.name()).or_insert(0usize) += 1;
        for pack in &parsed.packs {
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
    let n = files.len();
    facts.insert(
        "offsets",
        match slot_files {
            0 => {
                Evidence::Unknown("every file reads with real-length offsets (the default)".into())
            }
            k if k == n => Evidence::Seen(
                "\"padded-slots\"".into(),
                format!(
                    "REVIEW: {k} of {n} files are unreadable under the defaults and read with it \
                     (a padding mask of one row per slot): state it only if the kernel gets the \
                     padded slots as its offsets"
                ),
            ),
            k => Evidence::Unknown(format!(
                "{k} of {n} files read only with offsets = \"padded-slots\": the files disagree"
            )),
        },
    );
    facts.insert(
        "format",
        match formats.len() {
            1 => {
                let (f, _) = formats.iter().next().expect("one");
                Evidence::Seen(format!("{f:?}"), format!("every file reads as the {f} format"))
            }
            _ => Evidence::Unknown(format!("the files read as several formats: {formats:?}")),
        },
    );
    facts.insert(
        "labels",
        if valid == 0 {
            Evidence::Unknown("no valid label in the files".into())
        } else if unshifted == valid && shifted < valid {
            Evidence::Seen(
                "\"unshifted\"".into(),
                format!("all {valid} valid labels are their own token"),
            )
        } else if shifted == valid && unshifted < valid {
            Evidence::Seen(
                "\"shifted\"".into(),
                format!("all {valid} valid labels are the next token"),
            )
        } else {
            Evidence::Unknown(format!(
                "of {valid} valid labels, {unshifted} are their own token and {shifted} the next \
                 (masked LM, or a separate target)"
            ))
        },
    );
    facts.insert(
        "pad_token_id",
        match pad_ids.len() {
            1 => {
                let (id, count) = pad_ids.iter().next().expect("one");
                Evidence::Seen(id.to_string(), format!("all {count} masked-out tokens hold it"))
            }
            0 => Evidence::Unknown("no mask marks padding in the files".into()),
            _ => Evidence::Unknown(format!("masked-out tokens hold several ids: {pad_ids:?}")),
        },
    );
    facts.insert(
        "position_base",
        match bases.len() {
            1 => {
                let (b, count) = bases.iter().next().expect("one");
                if *b == 0 {
                    Evidence::Unknown("every segment starts at position 0 (the default)".into())
                } else {
                    Evidence::Seen(b.to_string(), format!("all {count} segments start there"))
                }
            }
            0 => Evidence::Unknown("no position_ids in the files".into()),
            _ => Evidence::Unknown(format!("segments start at several positions: {bases:?}")),
        },
    );
    // Facts that change verdicts: only where the defaults flag some file with the rule the fact
    // silences, and the fact makes every file pass that rule.
    let verdict_facts: [VerdictFact; 3] = [
        ("padding_segments", "\"per-row\"", "mock-marked", |p| {
            p.facts.padding_segments = Some(PaddingSegments::PerRow)
        }),
        ("padding_segments", "\"any\"", "mock-marked", |p| {
            p.facts.padding_segments = Some(PaddingSegments::Any)
        }),
        ("objective", "\"pretrain\"", "cross-doc-label", |p| {
            p.facts.objective = Some(Objective::Pretrain)
        }),
    ];
    let base = Profile {
        name: name.to_owned(),
        facts: Contract {
            offsets: (slot_files == n && n > 0).then_some(OffsetsFact::PaddedSlots),
            ..Contract::default()
        },
        ..Profile::default()
    };
    let flagged = |profile: &Profile, rule: &str| -> Result<usize> {
        let mut count = 0;
        for (path, &slots) in files.iter().zip(&needs_slots) {
            let read = read_for(profile, slots);
            let named = || path.display().to_string();
            let file = BatchFile::read(path).with_context(named)?;
            let report = check_file(file, &read, &CheckOptions::default()).with_context(named)?;
            count += usize::from(report.violated().contains(&rule));
        }
        Ok(count)
    };
    for (field, value, rule, set) in verdict_facts {
        if matches!(facts.get(field), Some(Evidence::Seen(..))) {
            continue;
        }
        let before = flagged(&base, rule)?;
        if before == 0 {
            facts.insert(
                field,
                Evidence::Unknown(format!("no file violates `{rule}` under the defaults")),
            );
            continue;
        }
        let mut with = base.clone();
        set(&mut with);
        let after = flagged(&with, rule)?;
        facts.insert(
            field,
            if after == 0 {
                Evidence::Seen(
                    value.to_owned(),
                    format!(
                        "REVIEW: {before} of {n} files violate `{rule}` under the defaults and \
                         none with it; state it only if your stack does this on purpose"
                    ),
                )
            } else {
                Evidence::Unknown(format!(
                    "{before} of {n} files violate `{rule}`, and {after} still do with \
                     {field} = {value}: a bug in the batches, or a fact thdcheck cannot state yet"
                ))
            },
        );
    }
    never_fail_an_input(name, files, &needs_slots, base.facts.offsets.is_some(), &mut facts)?;
    let mut out = format!(
        "# Suggested by `thdcheck profile suggest` from {n} known-good batch file(s): review \
         every line,\n# and add a [sources] entry citing the upstream code for each fact you \
         keep.\nname = {name:?}\nstack = \"\"\n"
    );
    let mut unknown = String::new();
    for (field, ev) in &facts {
        match ev {
            Evidence::Seen(value, why) => {
                let _ = writeln!(out, "{field} = {value}    # seen: {why}");
            }
            Evidence::Unknown(why) => {
                let _ = writeln!(unknown, "# {field}: not determinable: {why}");
            }
        }
    }
    out.push_str(&unknown);
    Ok(out)
}

/// How a file is read under `profile`: with padded-slot offsets where it reads only so and the
/// profile says nothing of its offsets.
fn read_for(profile: &Profile, slots: bool) -> ReadOptions {
    let mut p = profile.clone();
    if slots && p.facts.offsets.is_none() {
        p.facts.offsets = Some(OffsetsFact::PaddedSlots);
    }
    ReadOptions { profile: Some(Arc::new(p)), ..Default::default() }
}

/// Each input's violated rules under a profile of `lines` (TOML), or its error.
fn verdicts(
    name: &str,
    lines: &str,
    files: &[PathBuf],
    needs_slots: &[bool],
) -> Result<Vec<Result<Vec<&'static str>, String>>> {
    let text = format!("name = {name:?}\n{lines}");
    let profile = Profile::parse(&text, "suggested profile", None)
        .with_context(|| format!("the suggested profile does not parse:\n{text}"))?;
    Ok(files
        .iter()
        .zip(needs_slots)
        .map(|(path, &slots)| {
            let read = read_for(&profile, slots);
            BatchFile::read(path)
                .and_then(|file| check_file(file, &read, &CheckOptions::default()))
                .map(|r| r.violated())
                .map_err(|e| e.to_string())
        })
        .collect())
}

/// Keeps a seen fact only if no input, judged under it beside the facts kept before it, fails
/// a rule it did not fail under the defaults (or becomes unreadable): a suggestion never makes
/// one of its own known-good inputs fail. A fact that would is written as not determinable,
/// naming the file and the rule (the files disagree: several code paths, or a fact of one path).
fn never_fail_an_input(
    name: &str,
    files: &[PathBuf],
    needs_slots: &[bool],
    padded_slots: bool,
    facts: &mut BTreeMap<&'static str, Evidence>,
) -> Result<()> {
    let mut kept = String::new();
    if padded_slots {
        kept.push_str("offsets = \"padded-slots\"\n");
    }
    let before = verdicts(name, &kept, files, needs_slots)?;
    for (field, ev) in facts.iter_mut() {
        let Evidence::Seen(value, _) = ev else { continue };
        if *field == "offsets" {
            continue;
        }
        let candidate = format!("{kept}{field} = {value}\n");
        let after = verdicts(name, &candidate, files, needs_slots)?;
        let broken =
            files.iter().zip(before.iter().zip(&after)).find_map(|(path, (b, a))| match (b, a) {
                (_, Err(e)) => Some(format!("{} unreadable ({e})", path.display())),
                (Ok(b), Ok(a)) => a
                    .iter()
                    .find(|r| !b.contains(r))
                    .map(|r| format!("{} violate `{r}`", path.display())),
                (Err(_), Ok(_)) => None,
            });
        match broken {
            Some(what) => {
                *ev = Evidence::Unknown(format!(
                    "{value} would make {what}, which it does not under the defaults: the files \
                     disagree (several code paths?)"
                ));
            }
            None => kept = candidate,
        }
    }
    Ok(())
}
