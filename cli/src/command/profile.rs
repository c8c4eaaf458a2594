//! `thdcheck profile list | show | suggest`: the stack contracts as data (`reader::profile`).

use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::{Context, Result, bail};

use super::cli::ProfileCommand;
use reader::profile::Profile;

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
        ProfileCommand::Suggest { name, map, paths } => {
            let files = collect(paths)?;
            print!("{}", super::suggest::suggest(name, &files, map)?);
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
