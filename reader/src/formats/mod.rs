//! Packing formats: one module per way a stack lays out a packed batch, behind one trait,
//! tried in one order ([`FORMATS`]).
//!
//! A format reads the tensors of a file (after the profile's and the options' renames) into
//! [`BatchData`] packs, the one view the rules of `rules::checks` judge; it validates
//! only what makes the file *understood* (shapes, offsets that are offsets) and never decides a
//! verdict. Each format belongs to a key family ([`Dialect`]: the Hugging Face names, the
//! TransformerEngine names, DPO's prefixes), detected from the keys ([`detect`]) or stated by
//! the profile's `format`; within the family the first format that claims the file reads it,
//! and the report names it.
//!
//! | format | family | where the documents are |
//! |---|---|---|
//! | `cu-seq-lens` | hf | `cu_seq_lens_q` (`_k`, `_q_padded`), `max_length_q` |
//! | `block-mask` | any | a 4-D `attention_mask` `[B, 1, S, S]`, documents from EOS tokens, position restarts or the mask |
//! | `eos-delimited` | any | a document ends after every EOS (profile facts `documents = "eos"`, `eos_token_id`) |
//! | `doc-lens` | hf | OLMo-core's `doc_lens` `[B, D]` |
//! | `sample-numbers` | hf | `sequence_id` (LLM Foundry) or a numbered `attention_mask` (axolotl) |
//! | `position-restarts` | hf | where `position_ids` restart (`DataCollatorWithFlattening`) |
//! | `padded-rows` | hf | one sequence per `[B, S]` row, `attention_mask` (BSHD) |
//! | `row-pad-tail` | hf | one document per row before its pad ids (profile fact) |
//! | `te-chunks` | te | `cu_seqlens` `[C, K]`, one pack per chunk (Automodel) |
//! | `cu-seqlens` | te | `cu_seqlens` / `cu_seqlens_q` (`_kv`, `_padded`), `max_seqlen` |
//! | `seq-lens` | te | Automodel's `seq_lens` / `seq_lens_padded` `[B, K]` |
//! | `dpo` | dpo | the `cu-seq-lens` keys under `chosen_`, `rejected_`, `concatenated_` |

mod block_mask;
mod common;
mod doc_lens;
mod dpo;
mod eos;
mod hf;
mod pad_tail;
mod padded_rows;
mod position_restarts;
mod sample_numbers;
mod te;

use std::collections::BTreeSet;
use std::sync::Arc;

use rules::checks::DpoConcat;
use thd::LabelConvention;

pub use position_restarts::restarts;

use crate::pack::BatchData;
use crate::profile::{LabelsFact, PaddingSegments, Profile};
use crate::tensors::BatchFile;
use crate::{Error, Result};

pub use crate::profile::{Dialect, Objective};

/// What a format is given to read.
#[derive(Debug, Clone, Copy)]
pub struct Input<'a> {
    /// The file, its keys renamed to the family's names.
    pub file: &'a BatchFile,
    /// How to read it, the profile's facts filled in.
    pub opts: &'a ReadOptions,
    /// The CP size of a rank's shard, whose offsets may be the global ones; 1 otherwise.
    pub scale: usize,
    /// The CP rank of a rank's shard; 0 otherwise.
    pub rank: usize,
}

/// What a format read.
#[derive(Debug, Default)]
pub struct Read {
    /// One pack, or one per chunk, or DPO's chosen, rejected and concatenated ones.
    pub packs: Vec<BatchData>,
    /// DPO only: the concatenated offsets and how they should have been built.
    pub dpo: Option<DpoConcat>,
    /// Notes about the file as a whole.
    pub notes: Vec<String>,
}

/// One way a stack lays out a packed batch.
pub trait Format: Sync {
    /// The name reports and `--format`-style messages use (`cu-seq-lens`, `doc-lens`).
    fn name(&self) -> &'static str;
    /// The key family it belongs to; `None`: any (the format's keys are the same in every
    /// family, or a profile maps them).
    fn family(&self) -> Option<Dialect>;
    /// Where the documents are, in one line (docs, `thdcheck profile suggest`).
    fn summary(&self) -> &'static str;
    /// Whether it reads this file (the first format of the family that claims a file reads it).
    ///
    /// # Errors
    /// A tensor the decision needs that cannot be read.
    fn claims(&self, input: &Input<'_>) -> Result<bool>;
    /// Reads the file.
    ///
    /// # Errors
    /// Any [`Error`] that makes the file not understood: a missing key, a shape or a value that
    /// does not fit the format.
    fn read(&self, input: &Input<'_>) -> Result<Read>;
}

/// Every format, in the order they are tried within a family: offsets the kernel reads first,
/// then the sources a batch without offsets may carry, most specific first.
pub static FORMATS: &[&dyn Format] = &[
    &hf::CuSeqLens,
    &block_mask::BlockMask,
    &eos::Eos,
    &doc_lens::DocLens,
    &sample_numbers::SampleNumbers,
    &position_restarts::PositionRestarts,
    &padded_rows::PaddedRows,
    &pad_tail::PadTail,
    &te::Chunks,
    &te::CuSeqlens,
    &te::SeqLens,
    &dpo::Dpo,
];

/// The table of `docs/batch-files.md`'s "Formats" section: every format in the order they are
/// tried, its family and where it finds the documents (a test fails when the docs differ).
pub fn formats_table() -> String {
    let mut out =
        String::from("| # | format | family | where the documents are |\n|---|---|---|---|\n");
    for (i, f) in FORMATS.iter().enumerate() {
        let family = f.family().map_or("any", |d| d.name());
        out.push_str(&format!("| {} | `{}` | {family} | {} |\n", i + 1, f.name(), f.summary()));
    }
    out
}

/// The format that reads `input` within `family`.
///
/// # Errors
/// The family's first missing key when none claims it.
pub fn select(family: Dialect, input: &Input<'_>) -> Result<&'static dyn Format> {
    for f in FORMATS.iter().filter(|f| f.family().is_none_or(|d| d == family)) {
        if f.claims(input)? {
            return Ok(*f);
        }
    }
    Err(match family {
        Dialect::Te => te::unread(input.file),
        _ => hf::unread(input),
    })
}

/// How to read a file: what the keys cannot say.
#[derive(Debug, Clone, Default)]
pub struct ReadOptions {
    /// Force a dialect instead of detecting it.
    pub dialect: Option<Dialect>,
    /// Renames applied before anything else: `(key in the file, name the dialect uses)`.
    pub map: Vec<(String, String)>,
    /// Force a label convention instead of the dialect's.
    pub labels: Option<LabelConvention>,
    /// The empty-slot sentinel of `seq_lens` / trailing `cu_seqlens` entries (default -1000).
    pub sentinel: Option<i64>,
    /// The model's first position id (`padding_idx + 1` for RoBERTa/ESM); `None`: 0, or one
    /// base shared by every segment, noted.
    pub position_base: Option<i64>,
    /// The tokenizer's pad id: without a mask or `num_real_seqs`, a segment made only of it with
    /// every label -100 is a mock segment (bionemo's `pad_to_multiple_of` remainder, #1561).
    pub pad_token_id: Option<i64>,
    /// The tokenizer's EOS id (documents delimited by EOS: the profile's `documents = "eos"`);
    /// a tokenizer fact, so metadata `eos_token_id` states it beside the stack's profile.
    pub eos_token_id: Option<i64>,
    /// A label value the loss ignores besides -100 (TE's `pad_thd_sequences_for_cp` takes any
    /// `padding_label_id`): read as -100.
    pub ignore_index: Option<i64>,
    /// The stack's contract (`--profile`, metadata `profile`; `None`: detected from the keys
    /// where they tell, else the defaults of packed training).
    pub profile: Option<Arc<Profile>>,
    /// The profile to use when neither the options nor the file name one (the `[tool.thdcheck]`
    /// table of `pyproject.toml`); key detection comes after it.
    pub default_profile: Option<Arc<Profile>>,
    /// What the loss trains (`None`: the profile's, else `sft`).
    pub objective: Option<Objective>,
    /// Gather what a picture of each pack needs ([`crate::picture::PackPicture`]) into its
    /// report (`check --html`, the Python package's `_repr_html_`): O(T) more work.
    pub picture: bool,
}

impl ReadOptions {
    /// Whether the objective trains across documents by design: stated, or the profile's.
    pub fn pretrain(&self) -> bool {
        self.objective.or(self.fact(|p| p.objective)) == Some(Objective::Pretrain)
    }

    /// The profile named by the options or the project (`pyproject.toml`), before any file is
    /// read: what `fuzz` takes its defaults from.
    pub fn stated_profile(&self) -> Option<&Arc<Profile>> {
        self.profile.as_ref().or(self.default_profile.as_ref())
    }

    /// A fact of the profile, if one is in force and states it.
    pub fn fact<T>(&self, f: impl Fn(&Profile) -> Option<T>) -> Option<T> {
        self.profile.as_deref().and_then(f)
    }

    /// Where the profile puts padding segments.
    fn padding_segments(&self) -> PaddingSegments {
        self.profile.as_deref().map_or(PaddingSegments::None, Profile::padding_segments)
    }

    /// Fills what neither the command line nor the file's metadata set from the profile's
    /// facts (the resolution order of `docs/profiles.md`).
    fn fill_from_profile(&mut self) {
        let Some(p) = self.profile.clone() else { return };
        self.dialect = self.dialect.or(p.format);
        self.position_base = self.position_base.or(p.position_base);
        self.pad_token_id = self.pad_token_id.or(p.pad_token_id);
        self.eos_token_id = self.eos_token_id.or(p.eos_token_id);
        self.ignore_index = self.ignore_index.or(p.ignore_index);
        self.sentinel = self.sentinel.or(p.sentinel);
        self.labels = self.labels.or(match p.labels {
            Some(LabelsFact::Unshifted) => Some(LabelConvention::Unshifted),
            Some(LabelsFact::Shifted) => Some(LabelConvention::Shifted),
            Some(LabelsFact::FromInputIds) | None => None,
        });
    }

    /// Fills what the command line left unset from the file's `__metadata__`: `position_base`,
    /// `pad_token_id` and `labels` (`unshifted` / `shifted`), as a dump states what the
    /// model's configuration knows and the tensors do not.
    ///
    /// # Errors
    /// [`Error::Value`] naming the metadata key for a value that does not parse.
    pub fn with_metadata(
        &self,
        meta: &std::collections::BTreeMap<String, String>,
        dir: Option<&std::path::Path>,
    ) -> Result<Self> {
        let mut o = self.clone();
        let int = |key: &str| -> Result<Option<i64>> {
            meta.get(key)
                .map(|v| {
                    v.trim().parse::<i64>().map_err(|_| Error::Value {
                        key: format!("__metadata__.{key}"),
                        index: 0,
                        value: v.clone(),
                        expected: "an integer",
                    })
                })
                .transpose()
        };
        if o.position_base.is_none() {
            o.position_base = int("position_base")?;
        }
        if o.pad_token_id.is_none() {
            o.pad_token_id = int("pad_token_id")?;
        }
        if o.ignore_index.is_none() {
            o.ignore_index = int("ignore_index")?;
        }
        if o.eos_token_id.is_none() {
            o.eos_token_id = int("eos_token_id")?;
        }
        // A named choice (`profile`, `objective`): one of the option's values.
        fn choice<T: clap::ValueEnum>(
            meta: &std::collections::BTreeMap<String, String>,
            key: &str,
            expected: &'static str,
        ) -> Result<Option<T>> {
            meta.get(key)
                .map(|v| {
                    T::from_str(v.trim(), true).map_err(|_| Error::Value {
                        key: format!("__metadata__.{key}"),
                        index: 0,
                        value: v.clone(),
                        expected,
                    })
                })
                .transpose()
        }
        if o.profile.is_none()
            && let Some(v) = meta.get("profile")
        {
            o.profile = Some(Profile::from_metadata(v, dir)?);
        }
        if o.objective.is_none() {
            o.objective = choice(meta, "objective", "sft, pretrain or mlm")?;
        }
        if o.labels.is_none()
            && let Some(v) = meta.get("labels")
        {
            o.labels = Some(match v.trim() {
                "unshifted" => LabelConvention::Unshifted,
                "shifted" => LabelConvention::Shifted,
                _ => {
                    return Err(Error::Value {
                        key: "__metadata__.labels".into(),
                        index: 0,
                        value: v.clone(),
                        expected: "unshifted or shifted",
                    });
                }
            });
        }
        if o.profile.is_none() {
            o.profile = o.default_profile.clone();
        }
        o.fill_from_profile();
        Ok(o)
    }
}

/// A file understood: its dialect, its packs, and what ties the packs together.
#[derive(Debug, Clone)]
pub struct Parsed {
    /// The key family.
    pub dialect: Dialect,
    /// The format that read it ([`Format::name`]).
    pub format: &'static str,
    /// One pack, or for DPO the chosen, rejected and (if present) concatenated ones.
    pub packs: Vec<BatchData>,
    /// DPO only: the file's concatenated offsets and how they should have been built.
    pub dpo: Option<DpoConcat>,
    /// `(cp_rank, cp_size)` when the file is one CP rank's shard.
    pub cp_shard: Option<(usize, usize)>,
    /// Notes about the file as a whole.
    pub notes: Vec<String>,
    /// The stack's contract the file was read under, if any.
    pub profile: Option<Arc<Profile>>,
    /// The file's keys (after renaming) whose values no format or rule read.
    pub unread: Vec<String>,
    /// The sources of the profile's `[map]` that the file does not have.
    pub map_missing: Vec<String>,
}

/// Detects the dialect from the keys (after renaming).
///
/// # Errors
/// [`Error::UnknownDialect`] listing the keys.
///
/// # Example
/// ```
/// use reader::formats::{Dialect, detect};
/// assert_eq!(detect(["input_ids", "cu_seq_lens_q"])?, Dialect::Hf);
/// assert_eq!(detect(["input_ids", "seq_lens", "seq_lens_padded"])?, Dialect::Te);
/// assert_eq!(detect(["chosen_input_ids", "rejected_input_ids"])?, Dialect::Dpo);
/// assert_eq!(detect(["input_ids", "position_ids"])?, Dialect::Hf); // offsets from restarts
/// assert!(detect(["input_ids"]).is_err());
/// # Ok::<(), reader::Error>(())
/// ```
pub fn detect<'a>(keys: impl IntoIterator<Item = &'a str>) -> Result<Dialect> {
    let keys: BTreeSet<&str> = keys.into_iter().collect();
    let has = |k: &str| keys.contains(k);
    if keys.iter().any(|k| k.starts_with("chosen_") || k.starts_with("rejected_")) {
        Ok(Dialect::Dpo)
    } else if has("cu_seq_lens_q") || has("concatenated_cu_seq_lens_q") {
        Ok(Dialect::Hf)
    } else if has("cu_seqlens") || has("cu_seqlens_q") || has("seq_lens") {
        Ok(Dialect::Te)
    } else if has("input_ids")
        && ["position_ids", "attention_mask", "sequence_id", "doc_lens", "label_mask"]
            .into_iter()
            .any(has)
    {
        // Boundaries without offsets: OLMo-core's `doc_lens` (or its padded rows, which have
        // only a `label_mask`), LLM Foundry's `sequence_id`,
        // axolotl's numbered
        // `attention_mask`, transformers' DataCollatorWithFlattening by default (and TRL's
        // padding-free collators), where the position ids restart; or plain `[B, S]` rows with
        // a padding mask (BSHD): one sequence per row.
        Ok(Dialect::Hf)
    } else {
        Err(Error::UnknownDialect { keys: keys.iter().map(|k| (*k).to_owned()).collect() })
    }
}

/// Applies the options to a file and builds its packs.
///
/// # Errors
/// Any [`Error`]: a `--map` key that is missing, no recognisable dialect, a missing key, a
/// dtype or shape that does not fit, offsets that are not offsets.
pub fn parse(mut file: BatchFile, opts: &ReadOptions) -> Result<Parsed> {
    let mut opts = opts.with_metadata(file.metadata(), file.dir())?;
    let mut notes = Vec::new();
    for (from, to) in &opts.map {
        if file.contains(to) && !opts.map.iter().any(|(f, _)| f == to) {
            notes.push(format!("--map {from}={to}: replaces the file's own `{to}`"));
        }
        file.rename(from, to)?;
    }
    // A stack told by its keys (its profile's `[[detect]]`), when nothing names one.
    if opts.profile.is_none()
        && let Some((p, why)) = Profile::detect(|k| file.contains(k))
    {
        notes.push(format!(
            "read under the `{}` profile, told by its keys ({why}): {}",
            p.name, p.stack
        ));
        opts.profile = Some(p);
        opts.fill_from_profile();
    }
    let map_missing = match opts.profile.clone() {
        Some(p) => common::apply_profile_map(&mut file, &p, &mut notes)?,
        None => Vec::new(),
    };
    let opts = &opts;
    let dialect = match opts.dialect {
        Some(d) => d,
        None => detect(file.keys())?,
    };
    let cp_shard = common::cp_shard(&file)?;
    // A shard's offsets may be the global ones (Automodel keeps cu_seqlens_padded).
    let input = Input {
        file: &file,
        opts,
        scale: cp_shard.map_or(1, |(_, s)| s),
        rank: cp_shard.map_or(0, |(r, _)| r),
    };
    let format = select(dialect, &input)?;
    let read = format.read(&input)?;
    notes.extend(read.notes);
    let (mut packs, dpo) = (read.packs, read.dpo);
    contract_facts(dialect, &file, opts, &mut packs, &mut notes)?;
    Ok(Parsed {
        dialect,
        format: format.name(),
        packs,
        dpo,
        cp_shard,
        notes,
        profile: opts.profile.clone(),
        unread: file.unread(),
        map_missing,
    })
}

/// What the profile states beyond the format, set on every pack the same way whatever read it:
/// the attention direction, EOS-delimited documents, and the per-token side tensors it names
/// (their entries counted here, judged by `token-counts`).
fn contract_facts(
    dialect: Dialect,
    file: &BatchFile,
    opts: &ReadOptions,
    packs: &mut [BatchData],
    notes: &mut Vec<String>,
) -> Result<()> {
    let bidirectional = opts.fact(|p| p.attention)
        == Some(crate::profile::Attention::Bidirectional)
        || opts.objective.or(opts.fact(|p| p.objective)) == Some(Objective::Mlm);
    let eos_docs = opts.fact(|p| p.documents) == Some(crate::profile::DocumentsFact::Eos);
    let eos = opts.eos_token_id;
    if eos_docs && eos.is_none() {
        notes.push(
            "the profile's documents end with EOS, but it names no `eos_token_id`: not checked"
                .into(),
        );
    }
    let mut sides = Vec::new();
    for key in opts.profile.iter().flat_map(|p| p.side_tensors.iter()) {
        match file.entry(key) {
            Some(e) => {
                file.mark_read(key);
                sides.push((key.clone(), e.shape.iter().product::<usize>()));
            }
            None => notes.push(format!("side tensor `{key}` of the profile is not in the file")),
        }
    }
    // DPO's branches are judged by their own rules; side tensors belong to a plain batch.
    if dialect == Dialect::Dpo {
        return Ok(());
    }
    for p in packs.iter_mut() {
        p.bidirectional = bidirectional;
        p.eos_token_id = eos;
        p.documents_end_with_eos = eos_docs;
        p.side_tensors.extend(sides.iter().cloned());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_table_of_the_docs_is_the_list() {
        const BEGIN: &str =
            "<!-- formats-table: begin (generated from reader::formats::FORMATS) -->";
        const END: &str = "<!-- formats-table: end -->";
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/batch-files.md");
        let doc = std::fs::read_to_string(&path).unwrap();
        let (Some(b), Some(e)) = (doc.find(BEGIN), doc.find(END)) else {
            panic!("docs/batch-files.md has no {BEGIN} … {END} markers")
        };
        let want = format!("\n{}", formats_table());
        let have = &doc[b + BEGIN.len()..e];
        if have != want && std::env::var_os("THDCHECK_BLESS").is_some() {
            std::fs::write(&path, format!("{}{BEGIN}{want}{}", &doc[..b], &doc[e..])).unwrap();
            return;
        }
        assert_eq!(have, want, "docs/batch-files.md's formats table differs; THDCHECK_BLESS=1");
    }

    #[test]
    fn names_are_unique_and_every_family_ends_in_a_format() {
        let mut names: Vec<&str> = FORMATS.iter().map(|f| f.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), FORMATS.len());
        for d in [Dialect::Hf, Dialect::Te, Dialect::Dpo] {
            assert!(FORMATS.iter().any(|f| f.family() == Some(d)), "{d:?}");
        }
    }
}
