//! Per-file reports: facts, checks and a verdict, as text or JSON.

use std::fmt::Write;

use serde::Serialize;

use rules::checks::Outcome;

use crate::checks::{CheckOptions, PackReport, Status, check_pack, dpo_outcomes};
use crate::facts::FactInForce;
use crate::formats::{Dialect, Parsed};
use rules::words::plural;

/// Everything checked in one file.
#[derive(Debug, Clone, Serialize)]
pub struct FileReport {
    /// The key family the keys were read in.
    pub dialect: Dialect,
    /// The format that read the file ([`crate::formats::Format::name`]).
    pub format: &'static str,
    /// `(cp_rank, cp_size)` when the file is one CP rank's shard.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cp_shard: Option<(usize, usize)>,
    /// One report per pack (DPO: chosen, rejected, concatenated).
    pub packs: Vec<PackReport>,
    /// Checks that tie packs together (DPO offsets).
    pub checks: Vec<Outcome>,
    /// Notes about the file as a whole.
    pub notes: Vec<String>,
    /// The facts the file was read and judged under, each with where it came from (an option,
    /// its metadata, its profile): what the verdict rests on besides the tensors.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub contract: Vec<FactInForce>,
    /// The file's keys (after renaming) whose values nothing read: labels under a key of the
    /// stack's own are listed here, not silently ignored.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unread_keys: Vec<String>,
    /// The sources of the profile's `[map]` the file does not have (a run warns of those no
    /// file had: a `[map]` written the wrong way round).
    #[serde(skip)]
    pub map_missing: Vec<String>,
}

impl FileReport {
    /// Checks a parsed file.
    pub fn new(parsed: &Parsed, opts: &CheckOptions) -> Self {
        if let Some((rank, size)) = parsed.cp_shard {
            // A rank's tokens are zigzag chunks, not whole segments: they are checked together,
            // reassembled, as the directory's `cp-group`.
            return Self {
                dialect: parsed.dialect,
                format: parsed.format,
                cp_shard: parsed.cp_shard,
                packs: Vec::new(),
                checks: Vec::new(),
                notes: vec![format!(
                    "CP shard of rank {rank} of {size}: its checks run on the reassembled batch \
                     (`cp-group` of its directory)"
                )],
                contract: Vec::new(),
                unread_keys: Vec::new(),
                map_missing: parsed.map_missing.clone(),
            };
        }
        Self {
            dialect: parsed.dialect,
            format: parsed.format,
            cp_shard: parsed.cp_shard,
            packs: parsed.packs.iter().map(|p| check_pack(p, opts)).collect(),
            checks: parsed.dpo.as_ref().map(dpo_outcomes).unwrap_or_default(),
            notes: parsed.notes.clone(),
            contract: parsed.facts.in_force(),
            unread_keys: parsed.unread.clone(),
            map_missing: parsed.map_missing.clone(),
        }
    }

    /// Whether any rule judged the file (held or violated), or it is a CP shard judged with its
    /// group: a file every rule skipped is reported apart, never as a pass.
    pub fn checked(&self) -> bool {
        self.cp_shard.is_some() || self.all_checks().any(|c| c.status != Status::Skipped)
    }

    /// Every check of the file, pack checks first.
    pub fn all_checks(&self) -> impl Iterator<Item = &Outcome> {
        self.packs.iter().flat_map(|p| p.checks.iter()).chain(&self.checks)
    }

    /// The ids of the violated checks, sorted and deduplicated.
    pub fn violated(&self) -> Vec<&'static str> {
        let mut v: Vec<&'static str> =
            self.all_checks().filter(|c| c.status == Status::Violated).map(|c| c.rule).collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    /// The verdict line's text: `PASS (n checks hold)` or `FAIL: … violated`.
    pub fn verdict(&self) -> String {
        let v = self.violated();
        if v.is_empty() && self.cp_shard.is_some() {
            "PASS (read; checked with its cp-group)".to_owned()
        } else if v.is_empty() && !self.checked() {
            "UNCHECKED (no rule applied: every check was skipped)".to_owned()
        } else if v.is_empty() {
            let n = self.all_checks().filter(|c| c.status == Status::Ok).count();
            format!("PASS ({n} checks hold)")
        } else {
            format!("FAIL: {} violated", v.join(", "))
        }
    }

    /// The report as `thdcheck check` prints it for a file named `name`: the heading with the
    /// dialect, the facts, every check and note, and the verdict.
    pub fn text(&self, name: &str, causal: bool) -> String {
        let shard = self
            .cp_shard
            .map(|(rank, size)| format!(", cp rank {rank} of {size}"))
            .unwrap_or_default();
        let mut s = format!(
            "{name}  [{} · {}: {}{shard}]\n",
            self.dialect.name(),
            self.format,
            self.dialect.stacks()
        );
        self.render(&mut s, causal);
        let _ = writeln!(s, "  => {}", self.verdict());
        s
    }

    /// Renders the report as indented text lines (without the file name and the verdict).
    pub fn render(&self, out: &mut String, causal: bool) {
        let multi = self.packs.len() > 1;
        for p in &self.packs {
            let indent = if multi { "    " } else { "  " };
            if multi {
                let _ = writeln!(out, "  [{}]", p.part.as_deref().unwrap_or("pack"));
            }
            let f = &p.facts;
            let _ = writeln!(
                out,
                "{indent}{:<9}{} ({} real, {}{} mock) · {} tokens: {} real, {} mock, {} pad{}",
                "layout",
                plural(f.segments, "segment"),
                f.real_segments,
                if f.empty_segments > 0 {
                    format!("{} empty, ", f.empty_segments)
                } else {
                    String::new()
                },
                f.mock_segments,
                f.tokens,
                f.real_tokens,
                f.mock_tokens,
                f.pad_tokens,
                if f.rows > 1 { format!(" ({} rows)", f.rows) } else { String::new() }
            );
            let labels = match f.valid_labels {
                Some(v) => format!("{v} valid labels ({})", f.labels),
                None => "no labels".into(),
            };
            let (sym, u, h, w) = if causal {
                ("Σs(s+1)/2", f.useful.triangle, f.hardware.triangle, f.whole_pack.triangle)
            } else {
                ("Σs²", f.useful.sum_squares, f.hardware.sum_squares, f.whole_pack.sum_squares)
            };
            let _ = writeln!(
                out,
                "{indent}{:<9}useful {sym} = {u} · hardware {h} (varlen), {w} (whole pack) · {labels}",
                "work"
            );
            for c in &p.checks {
                render_check(out, indent, c);
            }
            for n in &p.notes {
                let _ = writeln!(out, "{indent}{:<9}{n}", "note");
            }
        }
        for c in &self.checks {
            render_check(out, "  ", c);
        }
        for n in &self.notes {
            let _ = writeln!(out, "  {:<9}{n}", "note");
        }
        if !self.unread_keys.is_empty() {
            let keys: Vec<String> = self.unread_keys.iter().map(|k| format!("`{k}`")).collect();
            let _ = writeln!(
                out,
                "  {:<9}{} (no rule looked at {}; a `[map]` or `--map KEY=NAME` says what {} \
                 hold)",
                "unread",
                keys.join(", "),
                if keys.len() == 1 { "it" } else { "them" },
                if keys.len() == 1 { "it may" } else { "they may" }
            );
        }
    }
}

fn render_check(out: &mut String, indent: &str, c: &Outcome) {
    let status = match c.status {
        Status::Ok => "ok",
        Status::Violated => "VIOLATED",
        Status::Skipped => "skipped",
    };
    let _ = writeln!(out, "{indent}{status:<9}{:<16} {}", c.rule, c.detail);
}
