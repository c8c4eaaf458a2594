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

pub use position_restarts::restarts;

use rules::contract::{Contract, OffsetsFact, PaddingLabelsFact, PaddingSegments};
use rules::words::plural;
use thd::{IGNORE_INDEX, LabelConvention};

use crate::facts::{Facts, Origin};
use crate::pack::BatchData;
use crate::profile::Profile;
use crate::tensors::BatchFile;
use crate::{Error, Result};

pub use crate::profile::{Dialect, Objective};

/// What a format is given to read.
#[derive(Debug, Clone, Copy)]
pub struct Input<'a> {
    /// The file, its keys renamed to the family's names.
    pub file: &'a BatchFile,
    /// The facts in force: the options over the file's metadata over the profile
    /// ([`crate::facts::Facts`]).
    pub facts: &'a Contract,
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
    /// The facts the options state (`--pad-token-id`, `--labels`, a Python keyword): over
    /// the file's metadata and the profile ([`crate::facts::Facts::resolve`]).
    pub stated: Contract,
    /// The stack's contract (`--profile`, metadata `profile`; `None`: detected from the keys
    /// where they tell, else the defaults of packed training).
    pub profile: Option<Arc<Profile>>,
    /// The profile to use when neither the options nor the file name one (the `[tool.thdcheck]`
    /// table of `pyproject.toml`); key detection comes after it.
    pub default_profile: Option<Arc<Profile>>,
    /// Gather what a picture of each pack needs ([`crate::picture::PackPicture`]) into its
    /// report (`check --html`, the Python package's `_repr_html_`): O(T) more work.
    pub picture: bool,
}

impl ReadOptions {
    /// The profile named by the options or the project (`pyproject.toml`), before any file is
    /// read: what `fuzz` takes its defaults from.
    pub fn stated_profile(&self) -> Option<&Arc<Profile>> {
        self.profile.as_ref().or(self.default_profile.as_ref())
    }

    /// The facts in force before any file is read: the options over the stated profile's
    /// (what `fuzz` and the Python package resolve for their generators).
    pub fn facts(&self) -> Facts {
        let mut layers = vec![(Origin::Option, self.stated.settled())];
        if let Some(p) = self.stated_profile() {
            layers.push((Origin::Profile(p.name.clone()), p.facts.settled()));
        }
        Facts::layered(layers)
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
    /// The facts it was read under, each with its origin.
    pub facts: Facts,
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
    // The metadata's facts first: a value that does not parse is the file's first error.
    Facts::metadata(file.metadata())?;
    let mut profile = opts.profile.clone();
    if profile.is_none()
        && let Some(v) = file.metadata().get("profile")
    {
        profile = Some(Profile::from_metadata(v, file.dir())?);
    }
    let mut profile = profile.or_else(|| opts.default_profile.clone());
    let mut notes = Vec::new();
    for (from, to) in &opts.map {
        if file.contains(to) && !opts.map.iter().any(|(f, _)| f == to) {
            notes.push(format!("--map {from}={to}: replaces the file's own `{to}`"));
        }
        file.rename(from, to)?;
    }
    // A stack told by its keys (its profile's `[[detect]]`), when nothing names one.
    if profile.is_none()
        && let Some((p, why)) = Profile::detect(|k| file.contains(k))
    {
        notes.push(format!(
            "read under the `{}` profile, told by its keys ({why}): {}",
            p.name, p.stack
        ));
        profile = Some(p);
    }
    // The stack's path, told by the file's own keys, then the keys its model never reads.
    if let Some(p) = profile.take() {
        let (p, note) = p.for_keys(&|k| file.contains(k));
        notes.extend(note);
        let dropped: Vec<String> =
            p.drop.iter().filter(|k| file.remove(k)).map(|k| format!("`{k}`")).collect();
        if !dropped.is_empty() {
            notes.push(format!(
                "profile `{}`: {} not read (the stack's model never reads {}: `drop`)",
                p.label(),
                dropped.join(", "),
                if dropped.len() == 1 { "it" } else { "them" }
            ));
        }
        profile = Some(p);
    }
    let map_missing = match profile.clone() {
        Some(p) => common::apply_profile_map(&mut file, &p, &mut notes)?,
        None => Vec::new(),
    };
    let facts = Facts::resolve(opts.stated, file.metadata(), profile.as_deref())?;
    let dialect = match opts.dialect.or(profile.as_ref().and_then(|p| p.format)) {
        Some(d) => d,
        None => detect(file.keys())?,
    };
    let cp_shard = common::cp_shard(&file)?;
    // A shard's offsets may be the global ones (Automodel keeps cu_seqlens_padded).
    let input = Input {
        file: &file,
        facts: &facts.contract,
        scale: cp_shard.map_or(1, |(_, s)| s),
        rank: cp_shard.map_or(0, |(r, _)| r),
    };
    // A path's format that does not fit the file names the path it was read as.
    let on_path = |e: Error| match (e, profile.as_ref().and_then(|p| p.chosen.as_ref())) {
        (Error::MissingKey { key, dialect, hint }, Some(v)) => Error::MissingKey {
            key,
            dialect,
            hint: format!(
                "{hint}; the file was read as variant `{v}` of profile `{}`",
                profile.as_ref().map_or("", |p| p.name.as_str())
            ),
        },
        (e, _) => e,
    };
    let format = select(dialect, &input).map_err(on_path)?;
    let read = format.read(&input).map_err(on_path)?;
    notes.extend(read.notes);
    let (mut packs, dpo) = (read.packs, read.dpo);
    contract_facts(dialect, &file, &facts.contract, profile.as_deref(), &mut packs, &mut notes);
    if cp_shard.is_none() {
        for p in &mut packs {
            slot_padding(p, &facts.contract);
        }
    }
    Ok(Parsed {
        dialect,
        format: format.name(),
        packs,
        dpo,
        cp_shard,
        notes,
        profile,
        facts,
        unread: file.unread(),
        map_missing,
    })
}

/// The facts in force, set on every pack the same way whatever format read it, and the
/// per-token side tensors the profile names (their entries counted here, judged by
/// `token-counts`).
fn contract_facts(
    dialect: Dialect,
    file: &BatchFile,
    facts: &Contract,
    profile: Option<&Profile>,
    packs: &mut [BatchData],
    notes: &mut Vec<String>,
) {
    if facts.documents_end_with_eos() && facts.eos_token_id.is_none() {
        notes.push(
            "the profile's documents end with EOS, but it names no `eos_token_id`: not checked"
                .into(),
        );
    }
    let (mut sides, mut predictions) = (Vec::new(), Vec::new());
    let named = profile.iter().flat_map(|p| {
        let per_token = p.side_tensors.iter().map(|k| (k, false));
        per_token.chain(p.prediction_tensors.iter().map(|k| (k, true)))
    });
    for (key, per_prediction) in named {
        match file.entry(key) {
            Some(e) => {
                file.mark_read(key);
                let side = (key.clone(), e.shape.iter().product::<usize>());
                if per_prediction { predictions.push(side) } else { sides.push(side) }
            }
            None => notes.push(format!("side tensor `{key}` of the profile is not in the file")),
        }
    }
    for p in packs.iter_mut() {
        p.facts = if dialect == Dialect::Dpo {
            // DPO's branches are judged by their own rules: of the contract, only what reads
            // their tokens (the pad id, the first position id); side tensors belong to a plain
            // batch.
            Contract {
                pad_token_id: facts.pad_token_id,
                position_base: facts.position_base,
                ..Contract::default()
            }
        } else {
            p.side_tensors.extend(sides.iter().cloned());
            p.prediction_tensors.extend(predictions.iter().cloned());
            *facts
        };
        if facts.padding_segments == Some(PaddingSegments::Absorbed)
            && dialect != Dialect::Dpo
            && let Some(pad) = facts.pad_token_id
        {
            absorbed_padding(p, pad);
        }
        if facts.padding_labels == Some(PaddingLabelsFact::MaskedByLoss) && dialect != Dialect::Dpo
        {
            unread_padding_labels(p);
        }
    }
}

/// Under `offsets = "padded-slots"` with a pad id and no padding mask or per-slot lengths: each
/// slot without the run of pad ids that ends it, which is its padding (the first kept when a
/// label trains it; a slot of pad ids only is left whole, for the rules). A whole pack: a
/// file's, or a CP group's once reassembled (a rank's file holds the global slots over its
/// local tokens).
pub(crate) fn slot_padding(p: &mut BatchData, facts: &Contract) {
    let Some(pad) = facts.pad_token_id else { return };
    if facts.offsets != Some(OffsetsFact::PaddedSlots) || p.real_mask.is_some() {
        return;
    }
    if p.cu_padded.as_ref().is_some_and(|s| !s.ints().iter().eq(p.cu.ints().iter())) {
        return; // the real lengths were read from elsewhere
    }
    let (slots, keys) = (p.cu.clone(), p.cu_k.clone());
    let (padded, padded_name) = (p.cu_padded.take(), p.keys.cu_seqlens_padded.clone());
    let cut = trim_pad_runs(p, pad, false);
    if cut == 0 {
        (p.cu_padded, p.keys.cu_seqlens_padded) = (padded, padded_name);
        return;
    }
    // Key offsets that are the same slots are the same documents: their real lengths too.
    if keys.is_some_and(|k| k.ints().iter().eq(slots.ints().iter())) {
        p.cu_k = Some(p.cu.clone());
    }
    let base = padded_name.split(" (").next().unwrap_or_default().to_owned();
    let base = if base.is_empty() || padded.is_none() {
        p.keys.cu_seqlens.split(" (").next().unwrap_or_default().to_owned()
    } else {
        base
    };
    p.keys.cu_seqlens_padded = format!("{base} (slots)");
    p.keys.cu_seqlens = format!("{base} (less the pad ids ending each slot)");
    p.notes.push(format!(
        "the pad ids that end {} read as its padding (offsets = padded-slots, pad id {pad})",
        plural(cut, "slot")
    ));
}

/// Under `padding_segments = "absorbed"`: each row's last document (the segment that ends at
/// the row's end) without the run of `pad` ids that ends it, which is its padding; the first of
/// them is kept when a label trains it (an EOS equal to the pad id: its prediction is trained).
/// A segment of pad ids only is left whole (a mock segment, for the rules); a pack whose slots
/// or real-token mask already tell its padding is left as it is.
fn absorbed_padding(p: &mut BatchData, pad: i64) {
    if p.cu_padded.is_some() || p.real_mask.is_some() {
        return;
    }
    let cut = trim_pad_runs(p, pad, true);
    if cut > 0 {
        p.notes.push(format!(
            "the pad ids that end the last document of {} read as its padding (the profile's \
             padding_segments = absorbed)",
            plural(cut, "row")
        ));
    }
}

/// Cuts the run of `pad` ids that ends each segment (only those that end a row with
/// `row_ends`) out of its real length: the offsets become the real ones and the old ones the
/// slots. Keeps the first pad id when a label trains it (an EOS equal to the pad id), and a
/// segment of pad ids only whole. Returns the segments cut.
fn trim_pad_runs(p: &mut BatchData, pad: i64, row_ends: bool) -> usize {
    let tokens = p.tokens();
    if tokens == 0 {
        return 0;
    }
    let Some(width) = tokens.checked_div(p.rows.max(1)).filter(|&w| w > 0) else { return 0 };
    let (cu, ids) = (p.cu.ints(), p.input_ids.ints());
    let labels = p.labels.as_ref().map(|l| l.ints());
    let trained = |t: usize| {
        labels.is_some_and(|l| match p.convention {
            LabelConvention::Shifted => {
                // Not an ignored label that equals a pad id of -100 (a padding value that is
                // no token id).
                t > 0 && l.get(t - 1).is_some_and(|x| x != IGNORE_INDEX && x == ids.at(t))
            }
            _ => l.get(t).is_some_and(|x| x != IGNORE_INDEX),
        })
    };
    let mut lens: Vec<i64> =
        (0..cu.len().saturating_sub(1)).map(|i| cu.at(i + 1) - cu.at(i)).collect();
    let mut cut = 0;
    for (i, len) in lens.iter_mut().enumerate() {
        let (a, b) = (cu.at(i) as usize, cu.at(i + 1) as usize);
        // A CP rank's shard keeps the global offsets over its local tokens: a segment past
        // them is not this file's to trim (an index out of bounds on slime's rank files).
        if b <= a || b > tokens || (row_ends && b % width != 0) {
            continue;
        }
        let mut tail = (a..b).rev().take_while(|&t| ids.at(t) == pad).count();
        if tail == b - a {
            continue;
        }
        if tail > 0 && trained(b - tail) {
            tail -= 1;
        }
        if tail > 0 {
            *len -= tail as i64;
            cut += 1;
        }
    }
    if cut == 0 {
        return 0;
    }
    let real: Vec<i64> = std::iter::once(0)
        .chain(lens.iter().scan(0, |acc, l| {
            *acc += l;
            Some(*acc)
        }))
        .collect();
    let slots = std::mem::replace(&mut p.cu, real.into());
    p.cu_padded = Some(slots);
    p.keys.cu_seqlens_padded = format!("{} (slots)", p.keys.cu_seqlens);
    cut
}

/// Under `padding_labels = "masked-by-loss"`: the labels on the padding after each slot's real
/// tokens and after the last slot (never a mock segment's) read as -100, with a note.
fn unread_padding_labels(p: &mut BatchData) {
    let Some(labels) = &p.labels else { return };
    let view = p.view();
    let pad: Vec<usize> = view
        .padding_ranges(&[])
        .flatten()
        .filter(|&t| labels.ints().get(t).is_some_and(|l| l != IGNORE_INDEX))
        .collect();
    if pad.is_empty() {
        return;
    }
    let mut owned = labels.ints().to_vec();
    for &t in &pad {
        owned[t] = IGNORE_INDEX;
    }
    let key = p.keys.labels.clone();
    p.labels = Some(owned.into());
    p.notes.push(format!(
        "`{key}`: {} on padding read as ignored (padding_labels = masked-by-loss: the loss never \
         reads them)",
        plural(pad.len(), "label")
    ));
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
