//! Dialects: which keys a stack's collator writes, and how they become [`BatchData`]s.
//!
//! | dialect | stacks | offsets | mask | labels |
//! |---|---|---|---|---|
//! | `hf` | Hugging Face, bionemo | `cu_seq_lens_q` (`_k`, `_q_padded`), `max_length_q` | `attention_mask` (1 = real) | `labels` unshifted, or `shift_labels` |
//! | `te` | TransformerEngine, Megatron, NeMo Automodel | `cu_seqlens` / `cu_seqlens_q` (`_kv`, `_padded`), `max_seqlen`, or `seq_lens`/`seq_lens_padded` `[B, K]` with the -1000 sentinel | `padding_mask` (1 = pad) | `labels` shifted |
//! | `dpo` | open-instruct DPO | the `hf` keys under `chosen_`, `rejected_` and `concatenated_` | — | unshifted |

use std::collections::BTreeSet;

use safetensors::Dtype;
use thd::LabelConvention;

use properties::checks::{DpoConcat, Ints as IntSlice, KeyNames};

use std::sync::Arc;

use crate::pack::{BatchData, validate_offsets};
use crate::profile::{
    DocumentsFact, LabelsFact, MaskFact, OffsetsEnd, PaddingSegments, Profile, TrailingRepeats,
};
use crate::tensors::{BatchFile, Column, Ints};
use crate::words::plural;
use crate::{Error, Result};

pub use crate::profile::{Dialect, Objective};

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
    pub fn with_metadata(&self, meta: &std::collections::BTreeMap<String, String>) -> Result<Self> {
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
            // A path names its own errors (file, line, field); a bare word that is no
            // built-in profile is a bad metadata value.
            o.profile = Some(match Profile::resolve(v, None) {
                Err(Error::Profile { origin, .. }) if origin == "--profile" => {
                    return Err(Error::Value {
                        key: "__metadata__.profile".into(),
                        index: 0,
                        value: v.clone(),
                        expected: "a built-in profile name (`thdcheck profile list`) or a path \
                                   to a profile file",
                    });
                }
                other => other?,
            });
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
    /// The dialect.
    pub dialect: Dialect,
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
}

/// Detects the dialect from the keys (after renaming).
///
/// # Errors
/// [`Error::UnknownDialect`] listing the keys.
///
/// # Example
/// ```
/// use thdcheck::dialect::{Dialect, detect};
/// assert_eq!(detect(["input_ids", "cu_seq_lens_q"])?, Dialect::Hf);
/// assert_eq!(detect(["input_ids", "seq_lens", "seq_lens_padded"])?, Dialect::Te);
/// assert_eq!(detect(["chosen_input_ids", "rejected_input_ids"])?, Dialect::Dpo);
/// assert_eq!(detect(["input_ids", "position_ids"])?, Dialect::Hf); // offsets from restarts
/// assert!(detect(["input_ids"]).is_err());
/// # Ok::<(), thdcheck::Error>(())
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
    let mut opts = opts.with_metadata(file.metadata())?;
    for (from, to) in &opts.map {
        file.rename(from, to)?;
    }
    let mut notes = Vec::new();
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
    if let Some(p) = opts.profile.clone() {
        apply_profile_map(&mut file, &p, &mut notes)?;
    }
    let opts = &opts;
    let dialect = match opts.dialect {
        Some(d) => d,
        None => detect(file.keys())?,
    };
    let sentinel = opts.sentinel.unwrap_or(-1000);
    let cp_shard = cp_shard(&file)?;
    let mut dpo = None;
    let packs = match dialect {
        Dialect::Hf => {
            let prefix =
                if !file.contains("cu_seq_lens_q") && file.contains("concatenated_cu_seq_lens_q") {
                    notes.push(
                    "only the concatenated_ keys: checked as one HF pack (dump the chosen_ and \
                     rejected_ keys too to check the DPO offsets)"
                        .into(),
                );
                    "concatenated_"
                } else {
                    ""
                };
            vec![hf_pack(&file, prefix, None, opts, cp_shard.map_or(1, |(_, s)| s))?]
        }
        // A shard's offsets may be the global ones (Automodel keeps cu_seqlens_padded).
        Dialect::Te => match chunks(&file) {
            // NeMo Automodel's split_batch_into_thd_chunks: one pack per row, each its own
            // attention call with its own offsets (`cu_seqlens[i]`, `max_seqlen[i]`).
            Some(rows) => {
                notes.push(format!(
                    "{rows} chunks (NeMo Automodel split_batch_into_thd_chunks): each row is its \
                     own pack with its own offsets"
                ));
                (0..rows)
                    .map(|r| {
                        let mut p = te_pack(&file.row(r, rows)?, sentinel, opts, 1)?;
                        p.part = Some(format!("chunk {r}"));
                        Ok(p)
                    })
                    .collect::<Result<Vec<_>>>()?
            }
            None => vec![te_pack(&file, sentinel, opts, cp_shard.map_or(1, |(_, s)| s))?],
        },
        Dialect::Dpo => {
            let chosen = hf_pack(&file, "chosen_", Some("chosen"), opts, 1)?;
            let rejected = hf_pack(&file, "rejected_", Some("rejected"), opts, 1)?;
            let (concat, offsets) = dpo_concatenated(&file, &chosen, &rejected, opts, &mut notes)?;
            dpo = offsets;
            let mut packs = vec![chosen, rejected];
            packs.extend(concat);
            packs
        }
    };
    Ok(Parsed { dialect, packs, dpo, cp_shard, notes, profile: opts.profile.clone() })
}

fn missing(file: &BatchFile, key: &str, dialect: Dialect) -> Error {
    let keys: Vec<&str> = file.keys().collect();
    Error::MissingKey {
        key: key.to_owned(),
        dialect: dialect.name(),
        hint: if keys.is_empty() {
            "; the file has no tensors".into()
        } else {
            format!("; the file has {keys:?}: rename one with --map KEY={key}")
        },
    }
}

/// Reads a per-token tensor: shape `[T]` or `[B, S]`; returns `(rows, values)`.
fn token_tensor(file: &BatchFile, key: &str) -> Result<(usize, Vec<i64>)> {
    let t = file.ints(key)?;
    let rows = token_rows(key, &t.shape)?;
    Ok((rows, t.values))
}

/// [`token_tensor`], read in place where the file allows ([`Column`]).
fn token_column(file: &BatchFile, key: &str) -> Result<(usize, Column)> {
    let (shape, values) = file.column(key)?;
    let rows = token_rows(key, &shape)?;
    Ok((rows, values))
}

fn token_rows(key: &str, shape: &[usize]) -> Result<usize> {
    match shape {
        [_] => Ok(1),
        // Rows of zero tokens carry nothing, and B comes from the header alone: a header
        // claiming [2^62, 0] must not make the reader allocate per row.
        [b, 0] if *b > 1 => Err(Error::Shape {
            key: key.to_owned(),
            shape: shape.to_vec(),
            expected: "[T] or [B, S] with S ≥ 1 when B > 1 (rows of zero tokens)".into(),
        }),
        [b, _] => Ok(*b),
        _ => Err(Error::Shape {
            key: key.to_owned(),
            shape: shape.to_vec(),
            expected: "[T] or [B, S] (one value per token)".into(),
        }),
    }
}

fn same_tokens(key: &str, len: usize, reference: &str, tokens: usize) -> Result<()> {
    if len == tokens {
        Ok(())
    } else {
        Err(Error::CountMismatch {
            key: key.to_owned(),
            what: "tokens",
            got: len,
            reference: reference.to_owned(),
            expected: tokens,
        })
    }
}

/// An optional per-token integer tensor with the same token count as `input_ids`.
fn opt_tokens(file: &BatchFile, key: &str, ids_key: &str, tokens: usize) -> Result<Option<Column>> {
    if !file.contains(key) {
        return Ok(None);
    }
    let (_, v) = token_column(file, key)?;
    same_tokens(key, v.len(), ids_key, tokens)?;
    Ok(Some(v))
}

/// An optional 0/1 mask; `invert` for padding masks (1 = pad).
fn opt_mask(
    file: &BatchFile,
    key: &str,
    ids_key: &str,
    tokens: usize,
    invert: bool,
) -> Result<Option<Vec<bool>>> {
    if !file.contains(key) {
        return Ok(None);
    }
    let (shape, v) = file.mask(key)?;
    token_rows(key, &shape)?;
    same_tokens(key, v.len(), ids_key, tokens)?;
    Ok(Some(if invert { v.into_iter().map(|p| !p).collect() } else { v }))
}

/// Labels under a `loss_mask` (Megatron, Megatron-Bridge, AReaL: 1 = the label is trained):
/// the label of every token the mask leaves out counts as ignored (-100), since those stacks
/// keep a real token id there. Without labels, nothing to do.
fn masked_labels(
    file: &BatchFile,
    labels: Option<Column>,
    ids_key: &str,
    tokens: usize,
    notes: &mut Vec<String>,
) -> Result<Option<Column>> {
    let key = "loss_mask";
    let mask = opt_mask(file, key, ids_key, tokens, false)?;
    let (Some(labels), Some(mask)) = (labels.as_ref(), mask) else { return Ok(labels) };
    if labels.ints().iter().zip(&mask).all(|(l, &m)| m || l == thd::IGNORE_INDEX) {
        // Nothing to rewrite: the labels stay in place.
        return Ok(Some(labels.clone()));
    }
    let mut labels = labels.clone().into_vec();
    let mut ignored = 0usize;
    for (l, &m) in labels.iter_mut().zip(&mask) {
        if !m && *l != thd::IGNORE_INDEX {
            *l = thd::IGNORE_INDEX;
            ignored += 1;
        }
    }
    notes.push(format!(
        "`{key}` leaves out {}: read as ignored (-100)",
        plural(ignored, "label that is a token id")
    ));
    Ok(Some(labels.into()))
}

/// Labels equal to `extra` (a second ignore value) read as -100.
fn ignore_extra(labels: Option<Column>, extra: Option<i64>) -> Option<Column> {
    match (labels, extra) {
        (Some(l), Some(x)) if l.ints().iter().any(|v| v == x) => {
            let mut l = l.into_vec();
            l.iter_mut().filter(|v| **v == x).for_each(|v| *v = thd::IGNORE_INDEX);
            Some(l.into())
        }
        (l, _) => l,
    }
}

/// Without `labels`, AReaL's batches say what is trained with `loss_mask` alone, the targets
/// being the next tokens (`torch.roll(input_ids, -1)` in `compute_packed_sft_loss`). Before
/// AReaL `d58cca56f` the mask was per token and rolled by the loss (`unshifted`: `loss_mask[t]`
/// trains token `t` as a target); from it on, it is pre-rolled per row (`shifted`: it trains
/// the prediction at `t`). The file's metadata `loss_mask_convention` (or `--labels`) says
/// which; without it the labels stay unknown.
fn labels_from_loss_mask(file: &BatchFile, pack: &mut BatchData, opts: &ReadOptions) -> Result<()> {
    let Some(mask) = opt_mask(file, "loss_mask", "input_ids", pack.input_ids.len(), false)? else {
        return Ok(());
    };
    let convention = match (opts.labels, file.metadata().get("loss_mask_convention")) {
        (Some(c), _) => c,
        (None, Some(v)) => match v.trim() {
            "unshifted" => LabelConvention::Unshifted,
            "shifted" => LabelConvention::Shifted,
            _ => {
                return Err(Error::Value {
                    key: "__metadata__.loss_mask_convention".into(),
                    index: 0,
                    value: v.clone(),
                    expected: "unshifted or shifted",
                });
            }
        },
        (None, None) => {
            pack.notes.push(
                "`loss_mask` without `labels`: state its convention (metadata \
                 loss_mask_convention, or --labels) to check the targets"
                    .into(),
            );
            return Ok(());
        }
    };
    let ids = pack.input_ids.ints();
    let labels: Vec<i64> = (0..ids.len())
        .map(|t| {
            let target = match convention {
                LabelConvention::Unshifted => Some(ids.at(t)),
                LabelConvention::Shifted => ids.get(t + 1),
            };
            target.filter(|_| mask[t]).unwrap_or(thd::IGNORE_INDEX)
        })
        .collect();
    pack.labels = Some(labels.into());
    pack.convention = convention;
    pack.keys.labels = "loss_mask (labels: the targets it trains)".into();
    Ok(())
}

/// Offsets: shape `[N]` or `[1, N]`, validated against `tokens`; trailing sentinel entries
/// (Automodel keeps them on the CP path) are stripped with a note.
fn offsets(
    file: &BatchFile,
    key: &str,
    tokens: usize,
    sentinel: Option<i64>,
    first_negative: bool,
    notes: &mut Vec<String>,
) -> Result<Vec<i64>> {
    let Ints { shape, mut values } = file.ints(key)?;
    match shape.as_slice() {
        [_] | [1, _] => {}
        _ => {
            return Err(Error::Shape {
                key: key.to_owned(),
                shape,
                expected: "[B + 1] (one row per chunk is not supported: dump each chunk to its \
                           own file)"
                    .into(),
            });
        }
    }
    // Megatron-Bridge: `-1` past the offsets, and `{key}_argmin` the index of the first one.
    let argmin = format!("{key}_argmin");
    if let Some(a) = scalar(file, &argmin)? {
        let a =
            usize::try_from(a).ok().filter(|&a| a <= values.len()).ok_or_else(|| Error::Value {
                key: argmin.clone(),
                index: 0,
                value: a.to_string(),
                expected: "an index into the offsets",
            })?;
        if a < values.len() {
            notes.push(format!(
                "`{key}`: cut at `{argmin}` = {a} ({} sentinel entries, Megatron-Bridge)",
                values.len() - a
            ));
            values.truncate(a);
        }
    } else if first_negative && let Some(first) = values.iter().position(|&v| v < 0) {
        // Without the argmin, the profile's `offsets_end = "first-negative"` cuts at the first
        // negative entry (Megatron-Bridge's `gpt_step._trim_padded_cu_seqlens_for_cp`).
        notes.push(format!(
            "`{key}`: cut at its first negative entry, index {first} ({} sentinel entries; \
             the profile's offsets end there without `{argmin}`)",
            values.len() - first
        ));
        values.truncate(first);
    }
    if let Some(s) = sentinel {
        let keep = values.iter().rposition(|&v| v != s).map_or(0, |i| i + 1);
        if keep < values.len() {
            notes.push(format!(
                "`{key}`: {} trailing sentinel entries ({s}) ignored",
                values.len() - keep
            ));
            values.truncate(keep);
        }
    }
    validate_offsets(key, &values, tokens)?;
    Ok(values)
}

/// A scalar: shape `[]` or `[1]`.
fn scalar(file: &BatchFile, key: &str) -> Result<Option<i64>> {
    if !file.contains(key) {
        return Ok(None);
    }
    let Ints { shape, values } = file.ints(key)?;
    match (shape.as_slice(), values.as_slice()) {
        // Megatron-Bridge row-slices its batch, leaving `[1, 1]` scalars.
        (s, [v]) if s.iter().all(|&d| d == 1) => Ok(Some(*v)),
        _ => Err(Error::Shape {
            key: key.to_owned(),
            shape,
            expected: "a scalar ([], [1] or [1, 1])".into(),
        }),
    }
}

/// A count: a scalar that is not negative.
fn count(file: &BatchFile, key: &str) -> Result<Option<usize>> {
    match scalar(file, key)? {
        Some(v) if v < 0 => Err(Error::Value {
            key: key.to_owned(),
            index: 0,
            value: v.to_string(),
            expected: "a count >= 0",
        }),
        v => Ok(v.map(|v| v as usize)),
    }
}

fn first_present<'a>(file: &BatchFile, keys: &[&'a str]) -> Option<&'a str> {
    keys.iter().copied().find(|k| file.contains(k))
}

fn padded_count(key: &str, padded: &[i64], real_key: &str, real: &[i64]) -> Result<()> {
    if padded.len() == real.len() {
        Ok(())
    } else {
        Err(Error::CountMismatch {
            key: key.to_owned(),
            what: "offsets",
            got: padded.len(),
            reference: real_key.to_owned(),
            expected: real.len(),
        })
    }
}

/// An HF / bionemo pack, keys under `prefix`.
/// `scale` is the CP size of a rank's shard, whose offsets may be the global ones (bionemo's
/// CP collator keeps the batch's `cu_seq_lens_q`), 1 otherwise.
fn hf_pack(
    file: &BatchFile,
    prefix: &str,
    part: Option<&str>,
    opts: &ReadOptions,
    scale: usize,
) -> Result<BatchData> {
    let d = if part.is_some() { Dialect::Dpo } else { Dialect::Hf };
    let k = |name: &str| format!("{prefix}{name}");
    let ids_key = k("input_ids");
    if !file.contains(&ids_key) {
        return Err(missing(file, &ids_key, d));
    }
    let (rows, input_ids) = token_column(file, &ids_key)?;
    let tokens = input_ids.len();
    let mut notes = Vec::new();
    let cu_key = k("cu_seq_lens_q");
    let pos_key = k("position_ids");
    // Plain `[B, S]` rows: their storage offsets (one slot per row).
    let mut bshd = None;
    let no_offsets = part.is_none()
        && !file.contains(&cu_key)
        && first_present(file, &["cu_seqlens", "cu_seqlens_q", "seq_lens"]).is_none();
    // Sample numbers per token: LLM Foundry's `sequence_id` (-1 on padding), or axolotl's
    // multipack `attention_mask` (1, 2, 3 … per pack, 0 on padding).
    let numbered = if no_offsets {
        sample_numbers(
            file,
            &ids_key,
            tokens,
            opts.fact(|p| p.attention_mask) == Some(MaskFact::SampleNumbers),
        )?
    } else {
        None
    };
    let mut numbered_mask = None;
    let mut from_positions = false;
    let doc_lens = no_offsets && file.contains("doc_lens");
    let row_pad_tail =
        part.is_none() && opts.fact(|p| p.documents) == Some(DocumentsFact::RowPadTail);
    let derived_labels =
        part.is_none() && opts.fact(|p| p.labels) == Some(LabelsFact::FromInputIds);
    let cu = if file.contains(&cu_key) {
        offsets(file, &cu_key, shard_bound(tokens, scale), None, false, &mut notes)?
    } else if doc_lens {
        let cu = doc_lens_offsets(file, rows, tokens)?;
        notes.push(format!(
            "no offsets: {} read from `doc_lens` (OLMo-core: the lengths of each row's \
             documents, zeros after them; the kernel gets their cumulative sums)",
            plural(cu.len() - 1, "document")
        ));
        cu
    } else if let Some((key, numbers, pad)) = numbered {
        let (real, storage) = sample_runs(&key, &numbers, pad, rows, tokens)?;
        notes.push(format!(
            "no offsets: {} read from the sample numbers of `{key}` ({pad} on padding{})",
            plural(real.windows(2).filter(|w| w[1] > w[0]).count(), "document"),
            if real.windows(2).any(|w| w[1] == w[0]) {
                "; left padding is an empty segment of its own"
            } else {
                ""
            }
        ));
        numbered_mask = Some(numbers.iter().map(|&x| x != pad).collect::<Vec<bool>>());
        bshd = Some(storage);
        real
    } else if no_offsets
        && file.contains(&pos_key)
        && !rows_only(file, &pos_key, &k("attention_mask"), rows)?
    {
        // Only when the file has no offsets at all: offsets under another dialect's name are
        // a missing key here, not something to paper over.
        let (_, pos) = token_tensor(file, &pos_key)?;
        same_tokens(&pos_key, pos.len(), &ids_key, tokens)?;
        let cu = restarts(&pos, rows, tokens);
        from_positions = true;
        notes.push(format!(
            "no offsets: {} read from where `{pos_key}` restarts (transformers \
             DataCollatorWithFlattening's default output): the restarts are the boundaries, so \
             only where each document's positions start (the base) and how they step is checked",
            plural(cu.len() - 1, "document")
        ));
        cu
    } else if no_offsets && file.contains(&k("attention_mask")) {
        let (real, storage) = bshd_rows(file, &k("attention_mask"), &ids_key, rows, tokens)?;
        notes.push(format!(
            "no offsets: {} of {} tokens, one sequence each (BSHD), `{}` marks the padding",
            plural(rows, "row"),
            tokens / rows.max(1),
            k("attention_mask")
        ));
        bshd = Some(storage);
        real
    } else if no_offsets && row_pad_tail {
        // OLMo-core's padded instances (`NumpyPaddedFSLDataset`): one document per row, padded
        // with the pad id; no mask, no `doc_lens`.
        let (real, storage) = pad_tail_rows(input_ids.ints(), rows, opts.pad_token_id);
        notes.push(match opts.pad_token_id {
            Some(pad) => format!(
                "no offsets: {} of {} tokens, one document each (OLMo-core padded instances), \
                 its trailing pad ids ({pad}) the padding",
                plural(rows, "row"),
                tokens / rows.max(1)
            ),
            None => format!(
                "no offsets: {} of {} tokens, one document each (OLMo-core padded instances); \
                 without a pad id (--pad-token-id) every token is read as real",
                plural(rows, "row"),
                tokens / rows.max(1)
            ),
        });
        bshd = Some(storage);
        real
    } else {
        return Err(missing(file, &cu_key, d));
    };
    let cu_k_key = k("cu_seq_lens_k");
    let cu_k = if file.contains(&cu_k_key) {
        // The same reader as the q offsets: a 2-D `[B, N]` key offset is the same shape error.
        Some(offsets(file, &cu_k_key, shard_bound(tokens, scale), None, false, &mut notes)?)
    } else {
        None
    };
    let padded_key = k("cu_seq_lens_q_padded");
    let rows_read = bshd.is_some();
    let numbered_key = numbered_mask.as_ref().map(|_| {
        if file.contains("sequence_id") { "sequence_id".to_owned() } else { mask_key_name(prefix) }
    });
    let cu_padded = if rows_read {
        bshd
    } else if file.contains(&padded_key) {
        let p = offsets(file, &padded_key, shard_bound(tokens, scale), None, false, &mut notes)?;
        padded_count(&padded_key, &p, &cu_key, &cu)?;
        Some(p)
    } else {
        None
    };
    let (labels_key, convention) =
        match (file.contains(&k("labels")), file.contains(&k("shift_labels"))) {
            (true, _) => (Some(k("labels")), LabelConvention::Unshifted),
            (false, true) => (Some(k("shift_labels")), LabelConvention::Shifted),
            _ => (None, LabelConvention::Unshifted),
        };
    let labels = match &labels_key {
        Some(key) => opt_tokens(file, key, &ids_key, tokens)?,
        None if derived_labels => {
            Some(derived_input_labels(file, input_ids.ints(), rows, &mut notes)?.into())
        }
        None => None,
    };
    let seq_idx_key = k("seq_idx");
    let mask_key = k("attention_mask");
    let max_key = k("max_length_q");
    let (cu_key, padded_key) = match &numbered_key {
        None if doc_lens => ("doc_lens (cumulative)".to_owned(), padded_key),
        Some(key) => (
            format!("{key} (sample numbers)"),
            format!("{key} (samples, padding at each row's end)"),
        ),
        None if rows_read && row_pad_tail => {
            ("input_ids (each row before its pad tail)".to_owned(), "the rows".to_owned())
        }
        None if rows_read => {
            (format!("{mask_key} (real tokens of each row)"), "the rows (BSHD)".to_owned())
        }
        None => (cu_key, padded_key),
    };
    Ok(BatchData {
        part: part.map(str::to_owned),
        keys: KeyNames {
            input_ids: ids_key.clone(),
            cu_seqlens: cu_key,
            cu_seqlens_padded: padded_key,
            cu_seqlens_k: cu_k_key,
            max_seqlen: if doc_lens { "max_doc_lens".to_owned() } else { max_key.clone() },
            mask: mask_key.clone(),
            labels: match &labels_key {
                Some(key) => key.clone(),
                None if derived_labels => "labels (input_ids under label_mask)".to_owned(),
                None => k("labels"),
            },
            position_ids: pos_key.clone(),
            seq_idx: seq_idx_key.clone(),
            num_real_seqs: k("num_real_seqs"),
        },
        mask_is_padding: false,
        position_base: opts.position_base,
        pad_token_id: opts.pad_token_id,
        rows,
        labels,
        convention: opts.labels.unwrap_or(convention),
        position_ids: opt_tokens(file, &pos_key, &ids_key, tokens)?,
        absorbed: false,
        cu,
        cu_padded,
        cu_k,
        max_seqlen: if doc_lens { max_doc_len(file, rows)? } else { scalar(file, &max_key)? },
        real_mask: match numbered_mask {
            Some(m) => Some(m),
            None => opt_mask(file, &mask_key, &ids_key, tokens, false)?,
        },
        seq_idx: opt_tokens(file, &seq_idx_key, &ids_key, tokens)?,
        num_real_seqs: count(file, &k("num_real_seqs"))?,
        row_slots: None,
        notes,
        input_ids,
        padding_segment_by_design: opts.padding_segments() != PaddingSegments::None,
        padding_segment_per_row: opts.padding_segments() == PaddingSegments::PerRow,
        boundaries_from_positions: from_positions,
        rows_are_sequences: rows_read && numbered_key.is_none(),
        cross_doc_labels_by_design: opts.pretrain(),
    })
}

/// OLMo-core's documents (`olmo_core/data/collator.py` `DataCollator`, `data/utils.py`
/// `get_document_lengths` / `get_cumulative_document_lengths`): `doc_lens` `[B, D]` holds the
/// lengths of each row's documents, zero-padded to the longest row's count; the model drops
/// every zero and takes the cumulative sums over the flattened batch as `cu_doc_lens`. Returns
/// those offsets.
///
/// # Errors
/// A shape other than `[B, D]` for `B` rows (or `[D]` for one), a negative length, or a row
/// whose lengths do not add up to the row's width (the documents would run into the next row):
/// [`Error::Value`] naming the entry.
fn doc_lens_offsets(file: &BatchFile, rows: usize, tokens: usize) -> Result<Vec<i64>> {
    let key = "doc_lens";
    let Ints { shape, values } = file.ints(key)?;
    let per_row = match shape.as_slice() {
        [d] if rows == 1 => *d,
        [b, d] if *b == rows => *d,
        _ => {
            return Err(Error::Shape {
                key: key.to_owned(),
                shape,
                expected: format!("[B, D] with B = {rows}, the rows of input_ids"),
            });
        }
    };
    let width = tokens.checked_div(rows).unwrap_or(0) as i64;
    let mut cu = vec![0i64];
    for r in 0..rows {
        let row = &values[r * per_row..(r + 1) * per_row];
        let mut sum = 0i64;
        for (j, &len) in row.iter().enumerate() {
            if len < 0 || sum + len > width {
                return Err(Error::Value {
                    key: key.to_owned(),
                    index: r * per_row + j,
                    value: len.to_string(),
                    expected: if len < 0 {
                        "a document length (>= 0; 0 after a row's documents)"
                    } else {
                        "lengths that fit the row: a row's documents add up to its width"
                    },
                });
            }
            sum += len;
            if len > 0 {
                cu.push(cu[cu.len() - 1] + len);
            }
        }
        if sum != width {
            return Err(Error::Value {
                key: key.to_owned(),
                index: r * per_row,
                value: format!("row {r}: Σ = {sum}"),
                expected: "lengths that add up to the row's width (input_ids [B, S]: S)",
            });
        }
    }
    Ok(cu)
}

/// Rows of one document each, padded at the end with `pad` (none read without it). Returns the
/// real and the storage offsets.
fn pad_tail_rows(input_ids: IntSlice<'_>, rows: usize, pad: Option<i64>) -> (Vec<i64>, Vec<i64>) {
    let width = input_ids.len().checked_div(rows).unwrap_or(0);
    let (mut real, mut storage) = (vec![0i64], vec![0i64]);
    for r in 0..rows {
        let row = input_ids.slice(r * width..(r + 1) * width);
        let tail = pad.map_or(0, |p| row.iter().rev().take_while(|&x| x == p).count());
        real.push(real[real.len() - 1] + (width - tail) as i64);
        storage.push(((r + 1) * width) as i64);
    }
    (real, storage)
}

/// OLMo-core's `max_doc_lens` (one per row; the model passes their maximum to the kernel as
/// `max_doc_len`), or `None` without it.
fn max_doc_len(file: &BatchFile, rows: usize) -> Result<Option<i64>> {
    let key = "max_doc_lens";
    if !file.contains(key) {
        return Ok(None);
    }
    let Ints { shape, values } = file.ints(key)?;
    if values.len() != rows {
        return Err(Error::Shape {
            key: key.to_owned(),
            shape,
            expected: format!("[B] with B = {rows}, one per row of input_ids"),
        });
    }
    Ok(values.into_iter().max())
}

/// The labels OLMo-core's train module derives (`olmo_core/data/utils.py` `get_labels`):
/// `input_ids`, -100 where `label_mask` is false, `attention_mask` is 0 or the row's
/// `instance_mask` is false, shifted left within each row by the loss (unshifted here).
fn derived_input_labels(
    file: &BatchFile,
    input_ids: IntSlice<'_>,
    rows: usize,
    notes: &mut Vec<String>,
) -> Result<Vec<i64>> {
    let tokens = input_ids.len();
    let mut labels = input_ids.to_vec();
    for key in ["label_mask", "attention_mask"] {
        if let Some(m) = opt_mask(file, key, "input_ids", tokens, false)? {
            labels.iter_mut().zip(m).filter(|(_, m)| !m).for_each(|(l, _)| *l = thd::IGNORE_INDEX);
        }
    }
    let key = "instance_mask";
    if file.contains(key) {
        let (shape, m) = file.mask(key)?;
        if m.len() != rows {
            return Err(Error::Shape {
                key: key.to_owned(),
                shape,
                expected: format!("[B] with B = {rows}, one per row of input_ids"),
            });
        }
        let width = tokens.checked_div(rows).unwrap_or(0);
        for (r, _) in m.iter().enumerate().filter(|(_, m)| !**m) {
            labels[r * width..(r + 1) * width].fill(thd::IGNORE_INDEX);
        }
    }
    notes.push(
        "no labels: derived from input_ids as OLMo-core's get_labels does (label_mask, \
         attention_mask and instance_mask read as -100; shifted within each row)"
            .into(),
    );
    Ok(labels)
}

fn mask_key_name(prefix: &str) -> String {
    format!("{prefix}attention_mask")
}

/// Per-token sample numbers, if the file has them: `sequence_id` (LLM Foundry's binpacking,
/// `llmfoundry/data/packing.py`: 0, 1, 2 … per sample of a row, -1 on padding), or an integer
/// `attention_mask` holding a value above 1, or any integer one under a profile whose
/// `attention_mask = "sample-numbers"`
/// (axolotl's multipack collators: 1, 2, 3 … per sample, 0 on padding; a pack of one sample is
/// all ones). Returns the key, the numbers and the padding value.
///
/// # Errors
/// A tensor of another length than the tokens.
fn sample_numbers(
    file: &BatchFile,
    ids_key: &str,
    tokens: usize,
    numbered_mask: bool,
) -> Result<Option<(String, Vec<i64>, i64)>> {
    for (key, pad) in [("sequence_id", -1), ("attention_mask", 0)] {
        if !file.contains(key) {
            continue;
        }
        let integer = file.entry(key).is_some_and(|e| {
            !matches!(e.dtype, Dtype::F64 | Dtype::F32 | Dtype::F16 | Dtype::BF16 | Dtype::BOOL)
        });
        if !integer {
            continue;
        }
        let Ints { shape, values } = file.ints(key)?;
        token_rows(key, &shape)?;
        same_tokens(key, values.len(), ids_key, tokens)?;
        if key == "sequence_id" || numbered_mask || values.iter().any(|&v| v > 1) {
            return Ok(Some((key.to_owned(), values, pad)));
        }
    }
    Ok(None)
}

/// Documents from per-token sample numbers: within each row, a document is a run of one number
/// other than `pad`. Padding after a row's samples belongs to the slot of its last sample;
/// padding before them (left padding) is an empty document of its own. Returns the real and the
/// storage offsets.
///
/// # Errors
/// [`Error::Value`] naming the first token of a sample between padding, or a number below the
/// padding value.
fn sample_runs(
    key: &str,
    numbers: &[i64],
    pad: i64,
    rows: usize,
    tokens: usize,
) -> Result<(Vec<i64>, Vec<i64>)> {
    let width = tokens.checked_div(rows).unwrap_or(0);
    let (mut real, mut storage) = (vec![0i64], vec![0i64]);
    for r in 0..rows {
        let (row_start, row_end) = (r * width, r * width + width);
        let lead = numbers[row_start..row_end].iter().take_while(|&&x| x == pad).count();
        if lead > 0 {
            // Left padding (the collator follows the tokenizer's padding side), or a row of
            // padding only: an empty document whose slot is the padding.
            real.push(real[real.len() - 1]);
            storage.push((row_start + lead) as i64);
        }
        let start = row_start + lead;
        let row = &numbers[start..row_end];
        let samples = row.iter().take_while(|&&x| x != pad).count();
        if let Some(j) = row[samples..].iter().position(|&x| x != pad) {
            return Err(Error::Value {
                key: key.to_owned(),
                index: start + samples + j,
                value: row[samples + j].to_string(),
                expected: "the padding value before or after a row's samples only (padding \
                           between samples is not read yet)",
            });
        }
        if let Some(j) = row[..samples].iter().position(|&x| x < pad) {
            return Err(Error::Value {
                key: key.to_owned(),
                index: start + j,
                value: row[j].to_string(),
                expected: "a sample number (at least the padding value)",
            });
        }
        let mut t = 0;
        while t < samples {
            let n = row[t..samples].iter().take_while(|&&x| x == row[t]).count();
            real.push(real[real.len() - 1] + n as i64);
            t += n;
            // The padding after a row's last sample is that sample's slot padding.
            let end = if t == samples { row_end } else { start + t };
            storage.push(end as i64);
        }
    }
    Ok((real, storage))
}

/// Plain `[B, S]` rows with a 0/1 padding mask and no offsets (BSHD, `DataCollatorWithPadding`):
/// one sequence per row, its real tokens the mask's leading ones (right padding). Returns the
/// real offsets and the storage offsets (`[0, S, 2S, …]`).
///
/// # Errors
/// A mask of another shape than the tokens, or a row whose real tokens do not lead it (left
/// padding, a hole): [`Error::Value`] naming the row's first token out of place.
fn bshd_rows(
    file: &BatchFile,
    mask_key: &str,
    ids_key: &str,
    rows: usize,
    tokens: usize,
) -> Result<(Vec<i64>, Vec<i64>)> {
    let mask = opt_mask(file, mask_key, ids_key, tokens, false)?.unwrap_or_default();
    let width = tokens.checked_div(rows).unwrap_or(0);
    let (mut real, mut storage) = (vec![0i64], vec![0i64]);
    for r in 0..rows {
        let row = &mask[r * width..(r + 1) * width];
        let n = row.iter().take_while(|&&m| m).count();
        if let Some(j) = row[n..].iter().position(|&m| m) {
            return Err(Error::Value {
                key: mask_key.to_owned(),
                index: r * width + n + j,
                value: "1".into(),
                expected: "right padding: in every row the real tokens (1) first, then the padding \
                           (0); left-padded rows have no offsets thdcheck can read yet",
            });
        }
        real.push(real[real.len() - 1] + n as i64);
        storage.push(((r + 1) * width) as i64);
    }
    Ok((real, storage))
}

/// The rows of a chunked TE file: offsets `[C, K]` with `C > 1` beside `[C, S]` token rows.
fn chunks(file: &BatchFile) -> Option<usize> {
    let key = first_present(file, &["cu_seqlens", "cu_seqlens_q"])?;
    let (offsets, ids) = (file.entry(key)?, file.entry("input_ids")?);
    match (offsets.shape.as_slice(), ids.shape.as_slice()) {
        ([c, _], [b, _]) if *c > 1 && c == b => Some(*c),
        _ => None,
    }
}

/// How far a file's offsets may reach: its tokens, or for one CP rank's shard (whose offsets
/// may be global) anything an offset can be; the group's reassembly holds them to the tokens
/// the ranks hold together, and reports offsets past them as lost tokens (`cp-shard`).
fn shard_bound(tokens: usize, scale: usize) -> usize {
    if scale > 1 { i32::MAX as usize } else { tokens }
}

/// Megatron-Bridge's packed batch (`tokens`, `loss_mask`, `cu_seqlens` ending in `-1`s cut at
/// `cu_seqlens_argmin`, `cu_seqlens_unpadded` for the real lengths beside the padded
/// `cu_seqlens`; `gpt_step.get_packed_seq_params`, `067f987df`): renamed to the TE names.
/// Returns whether the file is one.
/// Renames the stack's key names to the format's: first each `[map_when.KEY]` group whose key
/// is in the file (its renames read the original names together), then `map`. A rename whose
/// source is absent, or whose target is already in the file, is skipped: a profile describes
/// every file of its stack.
fn apply_profile_map(file: &mut BatchFile, p: &Profile, notes: &mut Vec<String>) -> Result<()> {
    let mut renamed = Vec::new();
    let mut groups: Vec<Vec<(&String, &String)>> = p
        .map_when
        .iter()
        .filter(|(when, _)| file.contains(when))
        .map(|(_, m)| m.iter().collect())
        .collect();
    groups.push(p.map.iter().collect());
    for group in groups {
        let moving: Vec<(&String, &String)> =
            group.into_iter().filter(|(from, _)| file.contains(from)).collect();
        let taken = |to: &str| file.contains(to) && !moving.iter().any(|(f, _)| f.as_str() == to);
        let moving: Vec<(&String, &String)> =
            moving.iter().copied().filter(|(_, to)| !taken(to)).collect();
        // Out of the way first, so that `a → b, b → c` reads the original `b`.
        for (i, (from, _)) in moving.iter().enumerate() {
            file.rename(from, &format!("\u{0}profile-map-{i}"))?;
        }
        for (i, (from, to)) in moving.iter().enumerate() {
            file.rename(&format!("\u{0}profile-map-{i}"), to)?;
            renamed.push(format!("{from} → {to}"));
        }
    }
    if !renamed.is_empty() {
        notes.push(format!("profile `{}`: read {}", p.name, renamed.join(", ")));
    }
    Ok(())
}

/// Whether `position_ids` restart only where a row starts (`arange(S)` per row) beside an
/// `attention_mask`: a padded batch of one sequence per row (BSHD), whose mask, not its
/// positions, tells the padding. Read as packed documents, each row's padding would count as
/// real tokens of its one segment.
///
/// # Errors
/// A `position_ids` tensor that cannot be read.
fn rows_only(file: &BatchFile, pos_key: &str, mask_key: &str, rows: usize) -> Result<bool> {
    if !file.contains(mask_key) || rows < 1 {
        return Ok(false);
    }
    let (_, pos) = token_tensor(file, pos_key)?;
    let cu = restarts(&pos, rows, pos.len());
    let width = pos.len() / rows;
    Ok(width > 0
        && cu.len() == rows + 1
        && cu.iter().enumerate().all(|(r, &c)| c == (r * width) as i64))
}

/// Document offsets from position ids: a document starts at token 0, at every row start of a
/// `[B, S]` tensor, and wherever a position id does not continue the previous one (`p[t] ≠
/// p[t−1] + 1`).
///
/// ```text
/// position_ids [0 1 2 0 1 0 1 2 3] → cu_seqlens [0 3 5 9]
/// ```
fn restarts(pos: &[i64], rows: usize, tokens: usize) -> Vec<i64> {
    let row_len = if rows > 0 { tokens / rows.max(1) } else { tokens };
    let mut cu = vec![0i64];
    for t in 1..pos.len() {
        let row_start = row_len > 0 && t % row_len == 0;
        if row_start || pos[t] != pos[t - 1].wrapping_add(1) {
            cu.push(t as i64);
        }
    }
    if !pos.is_empty() {
        cu.push(pos.len() as i64);
    }
    cu
}

/// A TE / Megatron / Automodel pack.
fn te_pack(file: &BatchFile, sentinel: i64, opts: &ReadOptions, scale: usize) -> Result<BatchData> {
    let mb = opts.fact(|p| p.offsets_end) == Some(OffsetsEnd::FirstNegative);
    let d = Dialect::Te;
    if !file.contains("input_ids") {
        return Err(missing(file, "input_ids", d));
    }
    let (rows, input_ids) = token_column(file, "input_ids")?;
    let tokens = input_ids.len();
    let mut notes = Vec::new();
    let mut row_slots = None;
    let cu_key = first_present(file, &["cu_seqlens", "cu_seqlens_q"]);
    let padded_key = first_present(file, &["cu_seqlens_padded", "cu_seqlens_q_padded"]);
    let (cu_name, cu, cu_padded, padded_name) = match cu_key {
        Some(key) => {
            let cu =
                offsets(file, key, shard_bound(tokens, scale), Some(sentinel), mb, &mut notes)?;
            let padded = match padded_key {
                Some(pk) => {
                    let p = offsets(
                        file,
                        pk,
                        shard_bound(tokens, scale),
                        Some(sentinel),
                        mb,
                        &mut notes,
                    )?;
                    padded_count(pk, &p, key, &cu)?;
                    Some(p)
                }
                None => None,
            };
            (key.to_owned(), cu, padded, padded_key.map(str::to_owned))
        }
        None if file.contains("seq_lens") => {
            let (cu, padded, slots) = from_seq_lens(file, rows, tokens, sentinel)?;
            row_slots = Some(slots);
            let has_padded = file.contains("seq_lens_padded");
            ("seq_lens".to_owned(), cu, padded, has_padded.then(|| "seq_lens_padded".to_owned()))
        }
        None => return Err(missing(file, "cu_seqlens", d)),
    };
    let cu_k_key = first_present(file, &["cu_seqlens_kv"]);
    let mut cu_k = match cu_k_key {
        Some(key) => {
            // Global on a shard, like `cu_seqlens` (AReaL's CP split keeps both).
            let v = offsets(file, key, shard_bound(tokens, scale), Some(sentinel), mb, &mut notes)?;
            Some(v)
        }
        None => None,
    };
    let (mut cu, mut cu_padded) = (cu, cu_padded);
    if opts.fact(|p| p.trailing_repeats) == Some(TrailingRepeats::RowPadding) {
        // The profile's ragged rows are padded with zero-length repeats of the last offset
        // (Megatron-Bridge #5400).
        let mut repeats = 0;
        while cu.len() > 2
            && cu[cu.len() - 1] == cu[cu.len() - 2]
            && cu_padded.as_ref().is_none_or(|p| p[p.len() - 1] == p[p.len() - 2])
        {
            cu.pop();
            if let Some(p) = cu_padded.as_mut() {
                p.pop();
            }
            if let Some(k) = cu_k.as_mut().filter(|k| k.len() > cu.len()) {
                k.pop();
            }
            repeats += 1;
        }
        if repeats > 0 {
            notes.push(format!(
                "`{cu_name}`: {} of the last offset dropped (the profile's ragged-row padding)",
                plural(repeats, "zero-length repeat")
            ));
        }
    }
    let (mut mask_key, invert) = match first_present(file, &["padding_mask", "attention_mask"]) {
        Some("padding_mask") => (Some("padding_mask"), true),
        Some(k) => (Some(k), false),
        None => (None, false),
    };
    // Megatron-Bridge's legacy collate_fn returns `attention_mask = [1] * batch size` (sft.py,
    // until fb9ec5f85): unused at cp = 1, sliced along the tokens under CP (#4519).
    if opts.fact(|p| p.attention_mask) == Some(MaskFact::RowFlags)
        && mask_key == Some("attention_mask")
        && let Some(e) = file.entry("attention_mask")
        && e.shape.len() == 1
        && e.shape[0] == rows
        && rows != tokens
    {
        let cp = file.metadata().get("cp_size").and_then(|c| c.trim().parse::<usize>().ok());
        if cp.is_some_and(|c| c > 1) {
            return Err(Error::Shape {
                key: "attention_mask".into(),
                shape: e.shape.clone(),
                expected: format!(
                    "one value per token ([{tokens}]): Megatron-Bridge's legacy `attention_mask` \
                     holds one per row, and with cp_size > 1 the CP split slices it along the \
                     tokens (#4519)"
                ),
            });
        }
        notes.push(
            "`attention_mask` holds one value per row (Megatron-Bridge's legacy collate_fn): \
             not a token mask, unused at cp = 1"
                .into(),
        );
        mask_key = None;
    }
    let real_mask = match mask_key {
        Some(k) => opt_mask(file, k, "input_ids", tokens, invert)?,
        None => None,
    };
    let max_key = first_present(file, &["max_seqlen", "max_seqlen_q"]);
    let labels_key = first_present(file, &["labels", "shift_labels"]);
    let mut pack = BatchData {
        part: None,
        keys: KeyNames {
            input_ids: "input_ids".into(),
            cu_seqlens: cu_name,
            cu_seqlens_padded: padded_name.unwrap_or_else(|| "cu_seqlens_padded".into()),
            cu_seqlens_k: cu_k_key.unwrap_or("cu_seqlens_kv").into(),
            max_seqlen: max_key.unwrap_or("max_seqlen").into(),
            mask: mask_key.unwrap_or("padding_mask").into(),
            labels: labels_key.unwrap_or("labels").into(),
            position_ids: "position_ids".into(),
            seq_idx: "seq_idx".into(),
            num_real_seqs: "num_real_seqs".into(),
        },
        mask_is_padding: invert,
        position_base: opts.position_base,
        pad_token_id: opts.pad_token_id,
        rows,
        labels: ignore_extra(
            masked_labels(
                file,
                match labels_key {
                    Some(k) => opt_tokens(file, k, "input_ids", tokens)?,
                    None => None,
                },
                "input_ids",
                tokens,
                &mut notes,
            )?,
            opts.ignore_index,
        ),
        convention: opts.labels.unwrap_or(LabelConvention::Shifted),
        position_ids: opt_tokens(file, "position_ids", "input_ids", tokens)?,
        absorbed: false,
        cu,
        cu_padded,
        cu_k,
        max_seqlen: match max_key {
            Some(k) => scalar(file, k)?,
            None => None,
        },
        real_mask,
        seq_idx: opt_tokens(file, "seq_idx", "input_ids", tokens)?,
        num_real_seqs: count(file, "num_real_seqs")?,
        row_slots,
        notes,
        input_ids,
        padding_segment_by_design: opts.padding_segments() != PaddingSegments::None,
        padding_segment_per_row: opts.padding_segments() == PaddingSegments::PerRow,
        boundaries_from_positions: false,
        rows_are_sequences: false,
        cross_doc_labels_by_design: opts.pretrain(),
    };
    if pack.labels.is_none() {
        labels_from_loss_mask(file, &mut pack, opts)?;
    }
    unabsorb(&mut pack);
    Ok(pack)
}

/// Automodel's trailing-pad absorption (#2316) grows the last segment over the pack padding
/// and drops `cu_seqlens_padded`; the padding mask still tells the pad tokens. Recover the real
/// length so that they are counted as padding, not as real tokens.
fn unabsorb(pack: &mut BatchData) {
    let (Some(mask), None, n) = (&pack.real_mask, &pack.cu_padded, pack.segments()) else {
        return;
    };
    if n == 0 {
        return;
    }
    let last = pack.cu[n - 1] as usize..pack.cu[n] as usize;
    if last.end != pack.tokens() || last.is_empty() {
        return;
    }
    let real_end = last.start + mask[last.clone()].iter().rposition(|&r| r).map_or(0, |i| i + 1);
    let tail_is_pad = mask[real_end..last.end].iter().all(|&r| !r);
    let head_is_real = mask[last.start..real_end].iter().all(|&r| r);
    if real_end < last.end && tail_is_pad && head_is_real {
        let mut padded = pack.cu.clone();
        padded[n] = last.end as i64;
        pack.cu[n] = real_end as i64;
        pack.cu_padded = Some(padded);
        pack.absorbed = true;
        pack.notes.push(format!(
            "the last segment absorbed {} trailing pad tokens (Automodel #2316): real length {}, \
             slot {}",
            last.end - real_end,
            real_end - last.start,
            last.len()
        ));
    }
}

/// `(cu, cu_padded, per-row slot sums)` built from `seq_lens`.
type SeqLensOffsets = (Vec<i64>, Option<Vec<i64>>, Vec<i64>);

/// Automodel BSHD: offsets from `seq_lens` / `seq_lens_padded` (`[B, K]`, sentinel in empty
/// slots), row by row. Returns `(cu, cu_padded, per-row slot sums)`.
fn from_seq_lens(
    file: &BatchFile,
    rows: usize,
    tokens: usize,
    sentinel: i64,
) -> Result<SeqLensOffsets> {
    let lens = |key: &str| -> Result<Vec<Vec<i64>>> {
        let Ints { shape, values } = file.ints(key)?;
        let width = match shape.as_slice() {
            [b, k] if *b == rows => *k,
            [k] if rows == 1 => *k,
            _ => {
                return Err(Error::Shape {
                    key: key.to_owned(),
                    shape,
                    expected: format!("[B, K] with B = {rows} rows of input_ids"),
                });
            }
        };
        if let Some(i) = values.iter().position(|&v| v < 0 && v != sentinel) {
            return Err(Error::Value {
                key: key.to_owned(),
                index: i,
                value: values[i].to_string(),
                expected: "a length ≥ 0 or the sentinel",
            });
        }
        Ok(if width == 0 {
            vec![Vec::new(); rows]
        } else {
            values.chunks(width).map(<[i64]>::to_vec).collect()
        })
    };
    let real = lens("seq_lens")?;
    let padded =
        if file.contains("seq_lens_padded") { Some(lens("seq_lens_padded")?) } else { None };
    if let Some(p) = &padded {
        for (r, (a, b)) in real.iter().zip(p).enumerate() {
            if a.len() != b.len() {
                return Err(Error::CountMismatch {
                    key: "seq_lens_padded".into(),
                    what: "slots per row",
                    got: b.len(),
                    reference: "seq_lens".into(),
                    expected: a.len(),
                });
            }
            if let Some(j) = (0..a.len()).find(|&j| (a[j] == sentinel) != (b[j] == sentinel)) {
                return Err(Error::Value {
                    key: "seq_lens_padded".into(),
                    index: r * a.len() + j,
                    value: b[j].to_string(),
                    expected: "the sentinel exactly where seq_lens has it",
                });
            }
        }
    }
    let cum = |rows: &[Vec<i64>]| -> Vec<i64> {
        let mut cu = vec![0i64];
        for v in rows.iter().flatten().filter(|&&v| v != sentinel) {
            let last = *cu.last().unwrap_or(&0);
            cu.push(last.saturating_add(*v));
        }
        cu
    };
    let cu = cum(&real);
    let slots_src = padded.as_ref().unwrap_or(&real);
    let cu_p = cum(slots_src);
    let row_sums = slots_src
        .iter()
        .map(|r| r.iter().filter(|&&v| v != sentinel).fold(0i64, |a, &v| a.saturating_add(v)))
        .collect();
    if padded.is_some() {
        validate_offsets("seq_lens_padded (cumulative)", &cu_p, tokens)?;
    }
    validate_offsets("seq_lens (cumulative)", &cu, tokens)?;
    Ok((cu, padded.map(|_| cu_p), row_sums))
}

/// The DPO concatenation: the concatenated pack (with exact offsets rebuilt from the branches)
/// and the inputs of the offset check.
fn dpo_concatenated(
    file: &BatchFile,
    chosen: &BatchData,
    rejected: &BatchData,
    opts: &ReadOptions,
    notes: &mut Vec<String>,
) -> Result<(Option<BatchData>, Option<DpoConcat>)> {
    let off_key =
        first_present(file, &["concatenated_cu_seq_lens_k", "concatenated_cu_seq_lens_q"]);
    let ids_key = "concatenated_input_ids";
    let tc = chosen.tokens();
    let expected_ids: Vec<i64> =
        chosen.input_ids.ints().iter().chain(rejected.input_ids.ints().iter()).collect();
    let mut tensors = Vec::new();
    let stored_ids =
        if file.contains(ids_key) { Some(token_tensor(file, ids_key)?.1) } else { None };
    if let Some(ids) = &stored_ids {
        tensors.push((ids_key.to_owned(), ids.clone(), expected_ids.clone()));
    }
    let pairs = [
        ("concatenated_labels", chosen.labels.as_ref(), rejected.labels.as_ref()),
        ("concatenated_position_ids", chosen.position_ids.as_ref(), rejected.position_ids.as_ref()),
    ];
    for (key, c, r) in pairs {
        if let (true, Some(c), Some(r)) = (file.contains(key), c, r) {
            let both = c.ints().iter().chain(r.ints().iter()).collect();
            tensors.push((key.to_owned(), token_tensor(file, key)?.1, both));
        }
    }
    let offsets = match off_key {
        Some(key) => {
            let v = file.ints(key)?.values;
            let total = stored_ids.as_ref().map_or(expected_ids.len(), Vec::len);
            validate_offsets(key, &v, total)?;
            Some(DpoConcat {
                key: key.to_owned(),
                concatenated: v,
                chosen: chosen.cu.clone(),
                rejected: rejected.cu.clone(),
                chosen_tokens: tc,
                tensors,
            })
        }
        None => {
            notes.push("no concatenated_cu_seq_lens_k: the DPO offsets are not checked".into());
            None
        }
    };
    // The exact layout of the concatenation, checked with the stored tensors where they match.
    let Some(ids) = stored_ids else {
        return Ok((None, offsets));
    };
    if ids.len() != expected_ids.len() || chosen.segments() == 0 {
        return Ok((None, offsets));
    }
    let last_c = *chosen.cu.last().unwrap_or(&0);
    let mut cu = chosen.cu.clone();
    cu.extend(rejected.cu[1..].iter().map(|&x| x + last_c));
    let mut slots: Vec<i64> = chosen.storage().to_vec();
    if let Some(l) = slots.last_mut() {
        *l = tc as i64;
    }
    slots.extend(rejected.storage()[1..].iter().map(|&x| x + tc as i64));
    let read = |key: &str| -> Result<Option<Column>> { opt_tokens(file, key, ids_key, ids.len()) };
    let pack = BatchData {
        part: Some("concatenated".into()),
        keys: KeyNames {
            input_ids: ids_key.into(),
            cu_seqlens: format!("{} (rebuilt from the branches)", off_key.unwrap_or("offsets")),
            max_seqlen: "concatenated_max_length_q".into(),
            labels: "concatenated_labels".into(),
            position_ids: "concatenated_position_ids".into(),
            seq_idx: "concatenated_seq_idx".into(),
            ..KeyNames::default()
        },
        mask_is_padding: false,
        position_base: opts.position_base,
        pad_token_id: opts.pad_token_id,
        rows: 1,
        labels: read("concatenated_labels")?,
        convention: opts.labels.unwrap_or(LabelConvention::Unshifted),
        position_ids: read("concatenated_position_ids")?,
        absorbed: false,
        padding_segment_by_design: false,
        padding_segment_per_row: false,
        boundaries_from_positions: false,
        rows_are_sequences: false,
        cross_doc_labels_by_design: false,
        cu_padded: (slots != cu).then_some(slots),
        cu,
        cu_k: None,
        max_seqlen: scalar(file, "concatenated_max_length_q")?,
        real_mask: None,
        seq_idx: read("concatenated_seq_idx")?,
        num_real_seqs: None,
        row_slots: None,
        notes: Vec::new(),
        input_ids: ids.into(),
    };
    Ok((Some(pack), offsets))
}

/// The largest CP size a file may state (no real job comes near it; it bounds allocations).
pub const MAX_CP: i64 = 1 << 16;

/// `(cp_rank, cp_size)` from `cp_rank` / `cp_size` tensors or `__metadata__` entries.
fn cp_shard(file: &BatchFile) -> Result<Option<(usize, usize)>> {
    let get = |key: &str| -> Result<Option<i64>> {
        if let Some(v) = scalar(file, key)? {
            return Ok(Some(v));
        }
        match file.metadata().get(key) {
            Some(s) => s.trim().parse::<i64>().map(Some).map_err(|_| Error::Value {
                key: format!("__metadata__.{key}"),
                index: 0,
                value: s.clone(),
                expected: "an integer",
            }),
            None => Ok(None),
        }
    };
    match (get("cp_rank")?, get("cp_size")?) {
        (_, Some(s)) if s < 1 => Err(Error::Value {
            key: "cp_size".into(),
            index: 0,
            value: s.to_string(),
            expected: "cp_size ≥ 1",
        }),
        // A `cp_size` tensor alone was silently ignored. Metadata `cp_size` alone states the CP
        // size a global batch must shard for (like `--cp-size`); a tensor cannot say which.
        (None, Some(_)) if file.contains("cp_size") => Err(Error::MissingKey {
            key: "cp_rank".into(),
            dialect: "CP shard",
            hint: "; the file has a `cp_size` tensor: add `cp_rank` for one rank's shard, or \
                   state the size of a global batch in __metadata__ or with --cp-size"
                .into(),
        }),
        (Some(_), None) => Err(Error::MissingKey {
            key: "cp_size".into(),
            dialect: "CP shard",
            hint: "; the file has `cp_rank` but no `cp_size`".into(),
        }),
        (Some(_), Some(s)) if s > MAX_CP => Err(Error::Value {
            key: "cp_size".into(),
            index: 0,
            value: s.to_string(),
            expected: "a CP size of at most 65536",
        }),
        (Some(r), Some(s)) if s >= 1 && (0..s).contains(&r) => Ok(Some((r as usize, s as usize))),
        (Some(r), Some(_)) => Err(Error::Value {
            key: "cp_rank".into(),
            index: 0,
            value: r.to_string(),
            expected: "0 ≤ cp_rank < cp_size",
        }),
        _ => Ok(None),
    }
}
