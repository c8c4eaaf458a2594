//! A stack's contract as data: what a verdict depends on that the tensors cannot show.
//!
//! A profile is a TOML file (`docs/profiles.md` lists every field and its values). The built-in
//! ones, one per stack thdcheck was taught, are the files of `reader/profiles/`, embedded in the
//! binary; every fact they state cites the upstream file and commit it was read from. A user
//! writes their own and names it with `--profile FILE` (or metadata `profile`, the Python
//! `profile=`, or `[tool.thdcheck]` in `pyproject.toml`); it may `extends` a built-in one and
//! change a few facts.
//!
//! ```
//! use reader::profile::Profile;
//! let p = Profile::parse(
//!     "name = \"mystack\"\nextends = \"transformers\"\nlabels = \"shifted\"\npad_token_id = 0\n\
//!      [map]\ncumulative_len = \"cu_seq_lens_q\"\n",
//!     "mystack.toml",
//!     None,
//! )?;
//! assert_eq!(p.facts.pad_token_id, Some(0));
//! assert_eq!(p.map["cumulative_len"], "cu_seq_lens_q");
//! // An unknown field is an error naming the file, the line and the fields allowed.
//! let err = Profile::parse("name = \"x\"\npading_segments = \"any\"\n", "x.toml", None).unwrap_err();
//! assert!(err.to_string().starts_with("x.toml:2: unknown field `pading_segments`"), "{err}");
//! # Ok::<(), reader::Error>(())
//! ```
//!
//! What a default demands: only what packed training itself forbids. A label that reaches into
//! the next document under an SFT objective, padding counted as useful work and offsets past the
//! tokens stay violations under every profile unless it states its stack's exception
//! (`objective = "pretrain"`, `padding_segments`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

pub use rules::contract::{
    Attention, BlockMaskFact, Contract, CpLayout, DocumentsFact, LabelsFact, MaskFact, Objective,
    OffsetsEnd, OffsetsFact, PaddingSegments, TrailingRepeats,
};

/// The families of key names a batch file can use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Dialect {
    /// Hugging Face / bionemo `DataCollatorWithFlattening`: `cu_seq_lens_q`, `max_length_q`.
    Hf,
    /// TransformerEngine / Megatron / NeMo Automodel: `cu_seqlens`, `cu_seqlens_padded`,
    /// `max_seqlen`, `padding_mask`, `seq_lens` with the -1000 sentinel.
    Te,
    /// open-instruct DPO: `chosen_` / `rejected_` / `concatenated_` prefixes.
    Dpo,
}

impl Dialect {
    /// The short name used in reports and `--dialect`.
    pub fn name(self) -> &'static str {
        match self {
            Dialect::Hf => "hf",
            Dialect::Te => "te",
            Dialect::Dpo => "dpo",
        }
    }

    /// The stacks that write this dialect.
    pub fn stacks(self) -> &'static str {
        match self {
            Dialect::Hf => "Hugging Face / bionemo",
            Dialect::Te => "TransformerEngine / Megatron / Automodel",
            Dialect::Dpo => "open-instruct DPO",
        }
    }
}

/// The built-in profiles, in detection order: `(file name, text)`.
const BUILTIN: &[(&str, &str)] = &[
    ("olmo_core.toml", include_str!("../profiles/olmo_core.toml")),
    ("megatron_bridge.toml", include_str!("../profiles/megatron_bridge.toml")),
    ("transformers.toml", include_str!("../profiles/transformers.toml")),
    ("trl.toml", include_str!("../profiles/trl.toml")),
    ("bionemo.toml", include_str!("../profiles/bionemo.toml")),
    ("bionemo_esm2.toml", include_str!("../profiles/bionemo_esm2.toml")),
    ("bionemo_llama3.toml", include_str!("../profiles/bionemo_llama3.toml")),
    ("open_instruct.toml", include_str!("../profiles/open_instruct.toml")),
    ("automodel.toml", include_str!("../profiles/automodel.toml")),
    ("te.toml", include_str!("../profiles/te.toml")),
    ("areal.toml", include_str!("../profiles/areal.toml")),
    ("axolotl.toml", include_str!("../profiles/axolotl.toml")),
    ("llm_foundry.toml", include_str!("../profiles/llm_foundry.toml")),
    ("megatron_lm.toml", include_str!("../profiles/megatron_lm.toml")),
    ("ms_swift.toml", include_str!("../profiles/ms_swift.toml")),
    ("xtuner.toml", include_str!("../profiles/xtuner.toml")),
    ("xtuner_v0.toml", include_str!("../profiles/xtuner_v0.toml")),
    ("slime.toml", include_str!("../profiles/slime.toml")),
    ("nanotron.toml", include_str!("../profiles/nanotron.toml")),
    ("skyrl.toml", include_str!("../profiles/skyrl.toml")),
];

/// Which collator requests ask for a static length (`[fuzz] static_length`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StaticLengthFact {
    /// Half of them.
    Sometimes,
    /// None: the collator never pads to a static length.
    Never,
    /// Every request.
    Always,
}

/// Keys that tell a built-in profile from the file alone (`[[detect]]`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Detect {
    /// Every one of these keys is in the file.
    #[serde(default)]
    pub present: Vec<String>,
    /// None of these is.
    #[serde(default)]
    pub absent: Vec<String>,
}

/// The fuzz defaults of a stack (`[fuzz]`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FuzzFacts {
    /// `--static-length`.
    pub static_length: Option<StaticLengthFact>,
    /// `--fitting-only`: the packer refuses an example longer than the capacity.
    pub fitting_only: Option<bool>,
    /// `--drops`: what the packer may drop (default: over-length examples).
    pub drops: Option<Vec<DropFact>>,
    /// `--non-empty`: the packer asserts a non-empty request (a non-empty step).
    pub non_empty: Option<bool>,
    /// `--examples-multiple-of-dp`: the packer asserts an example count divisible by the DP
    /// size.
    pub examples_multiple_of_dp: Option<bool>,
    /// `--max-examples`: the packer takes at most this many examples a request.
    pub max_examples: Option<u64>,
    /// `--empty-examples`: the stack's pipeline can hand its packer an example of 0 tokens.
    pub empty_examples: Option<bool>,
    /// `--cp-slot-align`: the CP splitter pads each sequence itself to the least multiple of
    /// `cp_slot_align·2·cp` tokens (of `cp_slot_align` at cp 1), so `fuzz cp-split` gives it
    /// exactly those slots (SkyRL's `preprocess_packed_seqs`: `tp·cp·2`, `tp` at cp 1).
    /// From 1 to [`CP_SLOT_ALIGN_MAX`] ([`cp_slot_align`]), as `--cp-slot-align`.
    #[serde(default, deserialize_with = "de_cp_slot_align")]
    pub cp_slot_align: Option<u32>,
}

/// The largest `cp_slot_align` (`--cp-slot-align`, `[fuzz] cp_slot_align`): a tensor-parallel
/// size, far above any real one; a request's slot is `cp_slot_align·2·cp` tokens or more.
pub const CP_SLOT_ALIGN_MAX: u32 = 1024;

/// A `cp_slot_align` however it comes (the option, a profile's `[fuzz]`, a Python dict): the
/// one bound and the one message. `2^32 − 1` in a profile once aborted `fuzz cp-split` on an
/// allocation of about 100 GB.
///
/// # Errors
/// The value is not from 1 to [`CP_SLOT_ALIGN_MAX`].
pub fn cp_slot_align(value: i128) -> std::result::Result<u32, String> {
    match u32::try_from(value) {
        Ok(v @ 1..=CP_SLOT_ALIGN_MAX) => Ok(v),
        _ => Err(format!(
            "cp_slot_align = {value}: cp_slot_align is a factor from 1 to {CP_SLOT_ALIGN_MAX} (the \
             splitter's tensor-parallel size)"
        )),
    }
}

fn de_cp_slot_align<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> std::result::Result<Option<u32>, D::Error> {
    // Any integer (TOML's are i64): a negative one gets the message too, not serde's own.
    let v = i64::deserialize(d)?;
    cp_slot_align(i128::from(v)).map(Some).map_err(serde::de::Error::custom)
}

/// What a packer may drop (`[fuzz] drops`, `thdcheck fuzz packer --drops`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum DropFact {
    /// Nothing (stated alone).
    None,
    /// An example longer than the capacity.
    OverLength,
    /// The trailing packs beyond the last multiple of the DP size (`drop_last` on a DP-dealt
    /// loader).
    DpRemainder,
    /// Each epoch's last, incomplete pack, never emitted nor reported (PyTorch's `drop_last`,
    /// bionemo's `TokenPackingDataset(drop_last=True)`): the examples an epoch loses fit
    /// together in one pack.
    DropLast,
}

/// What kind of number a logged key holds (`kind` of a `[loggers.NAME.keys]` entry): picks the
/// rule `thdcheck metrics --expect` judges it by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LoggedKindFact {
    /// A token or sequence count: exact.
    Count,
    /// FLOPs or an attention sum: exact when logged as an integer.
    Flops,
    /// A rate (TFLOP/s, MFU, tokens/s) or a ratio: within the tolerance.
    Rate,
}

impl From<LoggedKindFact> for rules::checks::LoggedKind {
    fn from(k: LoggedKindFact) -> Self {
        match k {
            LoggedKindFact::Count => Self::Count,
            LoggedKindFact::Flops => Self::Flops,
            LoggedKindFact::Rate => Self::Rate,
        }
    }
}

/// The keys of the step record a logger's `record` may name: what `thdcheck metrics --json`
/// recomputes from the batches, under `record.batch` (a test holds this list to the record).
pub const STEP_RECORD_KEYS: &[&str] = &[
    "batch.micro_batches",
    "batch.cp_size",
    "batch.dp_size",
    "batch.tokens.real",
    "batch.tokens.stored",
    "batch.tokens.valid",
    "batch.tokens.prompt",
    "batch.sequences.real",
    "batch.sequences.with_valid_labels",
    "batch.attention.useful_sum_squares",
    "batch.attention.hardware_sum_squares",
    "batch.flops.useful",
    "batch.flops.hardware",
    "batch.tflops_per_gpu.useful",
    "batch.tflops_per_gpu.hardware",
    "batch.mfu_pct.useful",
    "batch.mfu_pct.hardware",
    "batch.tokens_per_second_per_gpu",
    "batch.tokens_per_second",
    "batch.stored_tokens_per_second_per_gpu",
    "batch.valid_tokens_per_second",
    "batch.padding_fraction",
    "batch.megatron.seqlen_sum",
    "batch.megatron.seqlen_squared_sum",
    "batch.megatron.flops",
    "batch.megatron.tflops_per_gpu",
    "batch.megatron.tflops",
];

/// One key a logger writes (an entry of `[loggers.NAME.keys]`): `{ record = "batch.…", kind }`
/// or `{ not_recomputed = "why", kind }`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "LoggedKeyToml", into = "LoggedKeyToml")]
pub struct LoggedKey {
    /// The record key (`thdcheck metrics --json`, under `record`) holding the value the logged
    /// one must have, or why thdcheck cannot recompute it from batches.
    pub record: std::result::Result<String, String>,
    /// Count, FLOPs or rate.
    pub kind: LoggedKindFact,
}

/// A `[loggers.NAME.keys]` entry as written: exactly one of `record` and `not_recomputed`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct LoggedKeyToml {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    record: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    not_recomputed: Option<String>,
    kind: LoggedKindFact,
}

impl TryFrom<LoggedKeyToml> for LoggedKey {
    type Error = String;

    fn try_from(t: LoggedKeyToml) -> std::result::Result<Self, String> {
        let record = match (t.record, t.not_recomputed) {
            (Some(r), None) if !STEP_RECORD_KEYS.contains(&r.trim()) => {
                // Accepted, a misspelled key would have no value and its logged value would
                // pass as not recomputed.
                return Err(format!(
                    "`record` = {r:?}: not a key of the step record (`thdcheck metrics --json`, \
                     under `record`); expected one of {}",
                    STEP_RECORD_KEYS.join(", ")
                ));
            }
            (Some(r), None) => Ok(r.trim().to_owned()),
            (None, Some(why)) if !why.trim().is_empty() => Err(why),
            (Some(_), Some(_)) => {
                return Err("a logged key has either `record` or `not_recomputed`, not both".into());
            }
            (None, None) => {
                return Err("a logged key needs `record = \"batch.…\"` (the record key holding \
                            its value) or `not_recomputed = \"why\"`"
                    .into());
            }
            _ => return Err("`record` / `not_recomputed` must not be empty".into()),
        };
        Ok(LoggedKey { record, kind: t.kind })
    }
}

impl From<LoggedKey> for LoggedKeyToml {
    fn from(k: LoggedKey) -> Self {
        let (record, not_recomputed) = match k.record {
            Ok(r) => (Some(r), None),
            Err(why) => (None, Some(why)),
        };
        LoggedKeyToml { record, not_recomputed, kind: k.kind }
    }
}

/// A training logger of the stack (`[loggers.NAME]`): the keys it writes (wandb names), each
/// mapped onto the record of `thdcheck metrics` (`--logger NAME`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoggerFacts {
    /// Where upstream computes the keys (file, function and commit).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub source: String,
    /// The logged key (as it appears in the logged dict, `train/mfu_pct`) → its entry.
    pub keys: BTreeMap<String, LoggedKey>,
}

impl LoggerFacts {
    /// The entry of `key`, if this logger writes it.
    pub fn find(&self, key: &str) -> Option<&LoggedKey> {
        self.keys.get(key)
    }
}

/// A stack's contract. Every field but `name` is optional: unset, the format's reading and the
/// defaults of packed training apply.
// Not `deny_unknown_fields`: serde cannot have it beside `flatten`; [`Profile::parse`] refuses
// an unknown field itself, naming its line.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Profile {
    /// The name `--profile` takes (lowercase, digits and `_`).
    pub name: String,
    /// One line: the stack and the code this contract is read from.
    #[serde(default)]
    pub stack: String,
    /// A built-in profile's name, or a path relative to this file, whose facts this one
    /// starts from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extends: Option<String>,
    /// The key family (`hf`, `te`, `dpo`); unset: detected from the keys.
    pub format: Option<Dialect>,
    /// The stack's key names → the format's (`tokens = "input_ids"`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub map: BTreeMap<String, String>,
    /// Renames applied only when a key is present: `[map_when.KEY]`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub map_when: BTreeMap<String, BTreeMap<String, String>>,
    /// Every fact of the contract the profile states (`labels`, `pad_token_id`, `offsets`,
    /// `padding_segments` …: [`Contract::FACTS`]), at the top level of the file.
    #[serde(flatten)]
    pub facts: Contract,
    /// Per-token side tensors (log-probs, advantages, rolled targets) that must hold one entry
    /// per token.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub side_tensors: Vec<String>,
    /// Side tensors with one entry per prediction (`T − 1` per sequence: next-token
    /// log-probs), each slot's length minus one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub prediction_tensors: Vec<String>,
    /// Keys the stack's model never reads (a stale `attention_mask` beside the offsets): taken
    /// out of the file before it is read, and noted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub drop: Vec<String>,
    /// The stack's paths (`[[variant]]`): each chosen by the keys a file has, its facts over the
    /// profile's ([`Profile::for_keys`]).
    #[serde(default, rename = "variant", skip_serializing_if = "Vec::is_empty")]
    pub variants: Vec<Variant>,
    /// Keys that tell this profile from the file (built-in profiles: detection).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub detect: Vec<Detect>,
    /// The fuzz defaults.
    #[serde(default)]
    pub fuzz: FuzzFacts,
    /// The stack's training loggers by name (`[loggers.NAME]`, what `--logger NAME` reads).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub loggers: BTreeMap<String, LoggerFacts>,
    /// Where each fact was read from: field name → `owner/repo@commit path: function — what`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub sources: BTreeMap<String, String>,
    /// Where this profile came from (`built-in`, a path); not a field of the file.
    #[serde(skip)]
    pub origin: String,
    /// The variant a file's keys chose ([`Profile::for_keys`]); not a field of the file.
    #[serde(skip)]
    pub chosen: Option<String>,
}

/// One path of a stack (`[[variant]]`: engine vs worker, packing vs padding collate, before
/// and after a refactor), told by the keys a file has, as `[[detect]]` tells a stack. Its
/// facts, renames, dropped keys and format are put over the profile's for the files it tells.
// Not `deny_unknown_fields` (beside `flatten`): [`Profile::parse`] refuses unknown fields.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Variant {
    /// Its name (lowercase, digits and `_`), in notes and the report's fact origins.
    pub name: String,
    /// Every one of these keys is in the file (before any rename).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub present: Vec<String>,
    /// None of these is.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub absent: Vec<String>,
    /// The key family of this path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<Dialect>,
    /// Renames of this path, over the profile's.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub map: BTreeMap<String, String>,
    /// Keys of this path the model never reads.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub drop: Vec<String>,
    /// The facts of this path, over the profile's.
    #[serde(flatten)]
    pub facts: Contract,
    /// Where each of this path's facts was read.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub sources: BTreeMap<String, String>,
}

impl Variant {
    /// Whether a file with these keys is on this path.
    pub fn tells(&self, keys: &dyn Fn(&str) -> bool) -> bool {
        self.present.iter().all(|k| keys(k)) && !self.absent.iter().any(|k| keys(k))
    }

    /// Its facts, renames, dropped keys and format as a profile of its own (what `profile
    /// show` prints under it).
    pub fn as_profile(&self) -> Profile {
        Profile {
            name: self.name.clone(),
            format: self.format,
            map: self.map.clone(),
            drop: self.drop.clone(),
            facts: self.facts,
            sources: self.sources.clone(),
            ..Profile::default()
        }
    }

    /// The keys that tell it, for notes: `` `a`, no `b` ``.
    pub fn told_by(&self) -> String {
        let mut why: Vec<String> = self.present.iter().map(|k| format!("`{k}`")).collect();
        why.extend(self.absent.iter().map(|k| format!("no `{k}`")));
        if why.is_empty() { "any keys".to_owned() } else { why.join(", ") }
    }
}

/// The fields a `[[variant]]` table may hold besides the facts.
const VARIANT_FIELDS: &[&str] = &["name", "present", "absent", "format", "map", "drop", "sources"];

/// The fields of a profile besides its facts ([`Contract::FACTS`]), in the order `show` prints
/// them: `format`, `map` and `map_when` before the facts, the rest after.
pub const FIELDS: &[&str] = &[
    "format",
    "map",
    "map_when",
    "drop",
    "side_tensors",
    "prediction_tensors",
    "variant",
    "fuzz",
    "loggers",
];

/// Every field a profile's file may hold at its top level, for messages.
fn top_level_fields() -> Vec<&'static str> {
    let mut all = vec!["name", "stack", "extends", "format", "map", "map_when", "drop"];
    all.extend(Contract::FACTS.iter().map(|f| f.name));
    all.extend([
        "side_tensors",
        "prediction_tensors",
        "variant",
        "detect",
        "fuzz",
        "loggers",
        "sources",
    ]);
    all
}

/// The message for the first of `keys` that is no field of a profile (serde cannot refuse it
/// beside the flattened contract).
fn unknown_field<'a>(mut keys: impl Iterator<Item = &'a str>) -> Option<String> {
    let allowed = top_level_fields();
    keys.find(|k| !allowed.contains(k)).map(|field| {
        format!(
            "unknown field `{field}`, expected one of {}",
            allowed.iter().map(|f| format!("`{f}`")).collect::<Vec<_>>().join(", ")
        )
    })
}

/// Why the `i`-th `[[variant]]` (its fields, each with serde's refusal of it if it is a fact
/// whose value is not one of the fact's) cannot be read, if it cannot: an unknown field.
fn variant_refusal<'a>(
    i: usize,
    fields: impl Iterator<Item = (&'a str, Option<String>)>,
) -> Option<String> {
    for (field, refused) in fields {
        let is_fact = Contract::FACTS.iter().any(|f| f.name == field);
        if !is_fact && !VARIANT_FIELDS.contains(&field) {
            return Some(format!(
                "[[variant]] {}: unknown field `{field}`, expected one of {} or a fact ({})",
                i + 1,
                VARIANT_FIELDS.iter().map(|f| format!("`{f}`")).collect::<Vec<_>>().join(", "),
                Contract::FACTS.iter().map(|f| f.name).collect::<Vec<_>>().join(", ")
            ));
        }
        if let Some(message) = refused.filter(|_| is_fact) {
            return Some(format!("[[variant]] {}: {message}", i + 1));
        }
    }
    None
}

/// The line of the `i`-th (from 0) table header `header` in `text`.
fn nth_header_line(text: &str, header: &str, i: usize) -> Option<usize> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| l.trim_start().starts_with(header))
        .nth(i)
        .map(|(n, _)| n + 1)
}

/// Whether `field` is one a profile sets (a fact, or one of [`FIELDS`]).
pub fn is_field(field: &str) -> bool {
    FIELDS.contains(&field) || Contract::FACTS.iter().any(|f| f.name == field)
}

/// The fields a profile sets, in the order `show` prints them.
fn fields_in_order() -> impl Iterator<Item = &'static str> {
    FIELDS[..4]
        .iter()
        .copied()
        .chain(Contract::FACTS.iter().map(|f| f.name))
        .chain(FIELDS[4..].iter().copied())
}

fn builtins() -> &'static [Arc<Profile>] {
    static CELL: OnceLock<Vec<Arc<Profile>>> = OnceLock::new();
    CELL.get_or_init(|| {
        // A built-in that extends another finds it among those read before it (BUILTIN lists
        // bases first): looking it up through `builtins()` here would wait on this very
        // initialisation forever.
        let mut out: Vec<Arc<Profile>> = Vec::with_capacity(BUILTIN.len());
        for (file, text) in BUILTIN {
            // Tested (`every_builtin_profile_parses`): a built-in that does not parse is a
            // build of thdcheck that cannot be released.
            let origin = format!("built-in profiles/{file}");
            let p: Profile = toml::from_str(text).unwrap_or_else(|e| panic!("{origin}: {e}"));
            let p = Profile::finish(p, text, &origin, None, &Chain::default(), Some(&out))
                .unwrap_or_else(|e| panic!("{e}"));
            out.push(Arc::new(p));
        }
        out
    })
}

/// The most bytes a profile file or a `pyproject.toml` may hold (a profile is a few KB): a
/// larger one, `/dev/zero` or a FIFO is refused before it is read.
pub const MAX_PROFILE_BYTES: u64 = 1 << 20;

/// The most profile files one `extends` chain may hold.
pub const MAX_EXTENDS_DEPTH: usize = 16;

/// How a profile file is being read: the files of its `extends` chain so far (canonical: a
/// cycle is one of them again), and, when a batch's metadata named it, the (canonical) folder
/// every file of the chain must stay inside.
#[derive(Debug, Clone, Default)]
struct Chain<'a> {
    files: Vec<PathBuf>,
    jail: Option<&'a Path>,
}

/// `path` if it lies inside `jail` once every link is followed, else why not.
fn confined(jail: &Path, path: &Path) -> std::result::Result<PathBuf, &'static str> {
    let jail = std::fs::canonicalize(jail).map_err(|_| "the batch's folder cannot be read")?;
    let real = std::fs::canonicalize(path).map_err(|_| "no such file in the batch's folder")?;
    if real.starts_with(&jail) { Ok(real) } else { Err("outside the batch's folder") }
}

/// Reads a profile or `pyproject.toml`: a regular file (a FIFO would block the check, a device
/// never end) of at most [`MAX_PROFILE_BYTES`], in UTF-8.
///
/// # Errors
/// [`Error::Io`] if it cannot be read; [`Error::Profile`] naming the file for anything else.
pub fn read_small_file(path: &Path) -> Result<String> {
    use std::io::Read;
    let io = |source| Error::Io { path: path.to_owned(), source };
    let refuse = |line: Option<usize>, message: String| Error::Profile {
        origin: path.display().to_string(),
        line,
        message,
    };
    let meta = std::fs::metadata(path).map_err(io)?;
    if !meta.is_file() {
        return Err(refuse(
            None,
            "not a regular file (a FIFO, a device or a directory): a profile is a TOML file".into(),
        ));
    }
    let too_big = || {
        refuse(
            None,
            format!(
                "larger than {} KiB: a profile is a TOML file of a few KB",
                MAX_PROFILE_BYTES / 1024
            ),
        )
    };
    if meta.len() > MAX_PROFILE_BYTES {
        return Err(too_big());
    }
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .map_err(io)?
        .take(MAX_PROFILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(io)?;
    if bytes.len() as u64 > MAX_PROFILE_BYTES {
        return Err(too_big());
    }
    String::from_utf8(bytes).map_err(|e| {
        let ok = &e.as_bytes()[..e.utf8_error().valid_up_to()];
        let line = ok.iter().filter(|&&b| b == b'\n').count() + 1;
        refuse(Some(line), "not UTF-8 text: a profile is a TOML file".into())
    })
}

/// Where a TOML error sits: the 1-based line of byte `offset`.
/// The line of the top-level key `key` (before the first table header), if written plainly.
fn key_line(text: &str, key: &str) -> Option<usize> {
    text.lines()
        .take_while(|l| !l.trim_start().starts_with('['))
        .position(|l| {
            let l = l.trim_start();
            l.strip_prefix(key).is_some_and(|rest| rest.trim_start().starts_with('='))
                || l.strip_prefix(&format!("\"{key}\"")).is_some()
        })
        .map(|i| i + 1)
}

fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].bytes().filter(|&b| b == b'\n').count() + 1
}

impl Profile {
    /// The built-in profiles, in detection order.
    pub fn builtins() -> impl Iterator<Item = &'static Arc<Profile>> {
        builtins().iter()
    }

    /// The built-in profile of this name.
    pub fn builtin(name: &str) -> Option<Arc<Profile>> {
        builtins().iter().find(|p| p.name == name).cloned()
    }

    /// The names of the built-in profiles, for messages.
    pub fn builtin_names() -> String {
        builtins().iter().map(|p| p.name.as_str()).collect::<Vec<_>>().join(", ")
    }

    /// Parses a profile's text; `origin` names it in errors (`FILE:LINE: …`), `dir` is where a
    /// relative `extends` path is looked up (`None`: only built-in names).
    ///
    /// # Errors
    /// [`Error::Profile`] naming the origin, the line, the field and the values allowed.
    pub fn parse(text: &str, origin: &str, dir: Option<&Path>) -> Result<Profile> {
        Self::parse_in(text, origin, dir, &Chain::default())
    }

    fn parse_in(text: &str, origin: &str, dir: Option<&Path>, chain: &Chain) -> Result<Profile> {
        let err = |e: toml::de::Error| Error::Profile {
            origin: origin.to_owned(),
            line: e.span().map(|s| line_of(text, s.start)),
            message: e.message().trim().to_owned(),
        };
        let table: toml::Table = toml::from_str(text).map_err(err)?;
        if let Some(message) = unknown_field(table.keys().map(String::as_str)) {
            let field = table.keys().find(|k| !top_level_fields().contains(&k.as_str()));
            return Err(Error::Profile {
                origin: origin.to_owned(),
                line: field.and_then(|f| key_line(text, f)),
                message,
            });
        }
        if let Some(toml::Value::Array(variants)) = table.get("variant") {
            for (i, v) in variants.iter().enumerate() {
                let Some(t) = v.as_table() else { continue };
                if let Some(message) = variant_refusal(
                    i,
                    t.iter().map(|(k, v)| {
                        let one = toml::Table::from_iter([(k.clone(), v.clone())]);
                        (
                            k.as_str(),
                            one.try_into::<Contract>().err().map(|e| e.message().trim().to_owned()),
                        )
                    }),
                ) {
                    return Err(Error::Profile {
                        origin: origin.to_owned(),
                        line: nth_header_line(text, "[[variant]]", i),
                        message,
                    });
                }
            }
        }
        // Each fact alone first: a value serde refuses inside the flattened record would lose
        // its line.
        for (key, value) in
            table.iter().filter(|(k, _)| Contract::FACTS.iter().any(|f| f.name == k.as_str()))
        {
            let one = toml::Table::from_iter([(key.clone(), value.clone())]);
            if let Err(e) = one.try_into::<Contract>() {
                return Err(Error::Profile {
                    origin: origin.to_owned(),
                    line: key_line(text, key),
                    message: e.message().trim().to_owned(),
                });
            }
        }
        let p: Profile = toml::from_str(text).map_err(err)?;
        Self::finish(p, text, origin, dir, chain, None)
    }

    /// Checks what serde cannot (the name, the sources' fields) and applies `extends`, a
    /// built-in name looked up in `bases` while the built-ins are being read, else among them.
    fn finish(
        mut p: Profile,
        text: &str,
        origin: &str,
        dir: Option<&Path>,
        chain: &Chain,
        bases: Option<&[Arc<Profile>]>,
    ) -> Result<Profile> {
        p.origin = origin.to_owned();
        let line = |field: &str| {
            text.lines().position(|l| l.trim_start().starts_with(field)).map(|i| i + 1)
        };
        if p.name.is_empty()
            || !p.name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        {
            return Err(Error::Profile {
                origin: origin.to_owned(),
                line: line("name"),
                message: format!(
                    "`name` = {:?}: expected lowercase letters, digits and `_`",
                    p.name
                ),
            });
        }
        for (name, logger) in &p.loggers {
            let at = || {
                line(&format!("[loggers.{name}"))
                    .or_else(|| line(&format!("[loggers.\"{name}\"")))
                    .or_else(|| line("[loggers"))
            };
            if !valid_logger_name(name) {
                return Err(Error::Profile {
                    origin: origin.to_owned(),
                    line: at(),
                    message: format!(
                        "[loggers] {name:?}: a logger's name (`--logger NAME`) is lowercase \
                         letters, digits, `-` and `_`"
                    ),
                });
            }
            if logger.keys.is_empty() {
                return Err(Error::Profile {
                    origin: origin.to_owned(),
                    line: at(),
                    message: format!(
                        "[loggers.{name}] has no keys: expected `[loggers.{name}.keys]` with \
                         entries `\"train/key\" = {{ record = \"batch.…\", kind = \"rate\" }}`"
                    ),
                });
            }
        }
        let mut seen: Vec<&str> = Vec::new();
        for (i, v) in p.variants.iter().enumerate() {
            let at = nth_header_line(text, "[[variant]]", i);
            let bad =
                |message: String| Error::Profile { origin: origin.to_owned(), line: at, message };
            if v.name.is_empty()
                || !v
                    .name
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
            {
                return Err(bad(format!(
                    "[[variant]] {}: `name` = {:?}: expected lowercase letters, digits and `_`",
                    i + 1,
                    v.name
                )));
            }
            if seen.contains(&v.name.as_str()) {
                return Err(bad(format!("[[variant]] {}: a second variant `{}`", i + 1, v.name)));
            }
            seen.push(&v.name);
            if let Some(key) = v.sources.keys().find(|k| {
                let field = k.split('.').next().unwrap_or(k);
                !is_field(field) && !VARIANT_FIELDS.contains(&field)
            }) {
                return Err(bad(format!(
                    "[[variant]] `{}`: [sources] `{key}` is not a field of a variant",
                    v.name
                )));
            }
        }
        for key in p.sources.keys() {
            let field = key.split('.').next().unwrap_or(key);
            if !is_field(field) && field != "detect" {
                return Err(Error::Profile {
                    origin: origin.to_owned(),
                    line: line(key),
                    message: format!(
                        "[sources] `{key}` is not a field; expected one of {}",
                        fields_in_order().collect::<Vec<_>>().join(", ")
                    ),
                });
            }
        }
        if let Some(parent) = p.extends.clone() {
            let builtin = match bases {
                Some(bases) => bases.iter().find(|b| b.name == parent).cloned(),
                None => Self::builtin(&parent),
            };
            let base = match builtin {
                Some(b) => (*b).clone(),
                None => match dir {
                    Some(d) if looks_like_path(&parent) => {
                        // The parent's own errors name its file and line; one that cannot be
                        // read at all is named here, at this file's `extends` line.
                        let at = |message: String| Error::Profile {
                            origin: origin.to_owned(),
                            line: line("extends"),
                            message,
                        };
                        let path = d.join(&parent);
                        let path = match chain.jail {
                            Some(jail) => confined(jail, &path)
                                .map_err(|why| at(format!("`extends` = {parent:?}: {why}")))?,
                            None => path,
                        };
                        let canonical = std::fs::canonicalize(&path).unwrap_or(path.clone());
                        if chain.files.contains(&canonical) {
                            return Err(at(format!(
                                "`extends` = {parent:?}: a cycle ({} extends itself through \
                                 this chain)",
                                path.display()
                            )));
                        }
                        if chain.files.len() >= MAX_EXTENDS_DEPTH {
                            return Err(at(format!(
                                "`extends` = {parent:?}: a chain of more than \
                                 {MAX_EXTENDS_DEPTH} profile files (the limit)"
                            )));
                        }
                        let mut next = chain.clone();
                        next.files.push(canonical);
                        Self::load_in(&path, &next).map_err(|e| match e {
                            Error::Io { source, .. } => at(format!(
                                "`extends` = {parent:?}: cannot read {}: {source}",
                                path.display()
                            )),
                            other => other,
                        })?
                    }
                    _ => {
                        return Err(Error::Profile {
                            origin: origin.to_owned(),
                            line: line("extends"),
                            message: format!(
                                "`extends` = {parent:?}: no such built-in profile (expected one \
                                 of {}, or a path ending in .toml)",
                                Self::builtin_names()
                            ),
                        });
                    }
                },
            };
            p = base.overlaid_by(p);
        }
        Ok(p)
    }

    /// Reads a profile file.
    ///
    /// # Errors
    /// [`Error::Io`] if it cannot be read; [`Error::Profile`] if it does not parse.
    pub fn load(path: &Path) -> Result<Profile> {
        let first = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_owned());
        Self::load_in(path, &Chain { files: vec![first], jail: None })
    }

    fn load_in(path: &Path, chain: &Chain) -> Result<Profile> {
        let text = read_small_file(path)?;
        let origin = path.display().to_string();
        let parsed = Self::parse_in(&text, &origin, path.parent(), chain);
        match (parsed, chain.jail) {
            // A file a batch named may be any file the user can read: its values are never
            // printed (`invalid type: string "hunter2"`), only where the error is.
            (Err(Error::Profile { origin, line, .. }), Some(_)) => Err(Error::Profile {
                origin,
                line,
                message: "not a valid profile (its text is not printed, since the batch's \
                          metadata named the file; `thdcheck profile show FILE` prints the \
                          error)"
                    .into(),
            }),
            (other, _) => other,
        }
    }

    /// The profile a batch's metadata names: a built-in name, or a `.toml` file inside the
    /// batch's own folder (`dir`), relative to it. A batch is data from anywhere: it never makes
    /// the checker read a file outside its folder (an absolute path, `../`, a link leading out),
    /// nor print the values of the file it names. A batch held in memory (`dir` = `None`) names
    /// built-in profiles only.
    ///
    /// # Errors
    /// [`Error::Value`] for `__metadata__.profile` naming no built-in profile and no file in the
    /// batch's folder; [`Error::Profile`] (its values withheld) for one that does not parse.
    pub fn from_metadata(spec: &str, dir: Option<&Path>) -> Result<Arc<Profile>> {
        let spec_t = spec.trim();
        if let Some(p) = Self::builtin(spec_t) {
            return Ok(p);
        }
        let bad = |expected: &'static str| Error::Value {
            key: "__metadata__.profile".into(),
            index: 0,
            value: spec.to_owned(),
            expected,
        };
        if !looks_like_path(spec_t) {
            return Err(bad(
                "a built-in profile name (`thdcheck profile list`) or a path to a profile file \
                 in the batch's folder",
            ));
        }
        let Some(dir) = dir else {
            return Err(bad(
                "a built-in profile name: a batch held in memory has no folder to name a file \
                 in (pass the file as profile= / --profile)",
            ));
        };
        let path = confined(dir, &dir.join(spec_t)).map_err(|_| {
            bad("a built-in profile name, or a profile file inside the batch's own folder \
                 (relative to it; a batch never names a file elsewhere: pass that one with \
                 --profile)")
        })?;
        let jail = std::fs::canonicalize(dir)
            .map_err(|source| Error::Io { path: dir.to_owned(), source })?;
        let first = std::fs::canonicalize(&path).unwrap_or_else(|_| path.clone());
        Self::load_in(&path, &Chain { files: vec![first], jail: Some(&jail) }).map(Arc::new)
    }

    /// A profile named by the user: a built-in name, or a path to a `.toml` file (relative to
    /// `dir` when given, else to the working directory).
    ///
    /// # Errors
    /// [`Error::Profile`] for a name that is no built-in profile and no file.
    pub fn resolve(spec: &str, dir: Option<&Path>) -> Result<Arc<Profile>> {
        let spec = spec.trim();
        if let Some(p) = Self::builtin(spec) {
            return Ok(p);
        }
        if looks_like_path(spec) {
            let path = match dir {
                Some(d) => d.join(spec),
                None => PathBuf::from(spec),
            };
            return Self::load(&path).map(Arc::new);
        }
        Err(Error::Profile {
            origin: "--profile".into(),
            line: None,
            message: format!(
                "{spec:?} is no built-in profile ({}) and no file (a path ends in .toml or holds \
                 a `/`)",
                Self::builtin_names()
            ),
        })
    }

    /// A profile given as JSON (the Python `profile=` dict).
    ///
    /// # Errors
    /// [`Error::Profile`] for a field that does not parse.
    pub fn from_json(json: &str) -> Result<Arc<Profile>> {
        // serde_json appends " at line 1 column N" of the JSON text the binding wrote.
        let bad = |e: serde_json::Error| Error::Profile {
            origin: "profile=".into(),
            line: None,
            message: e.to_string().split(" at line ").next().unwrap_or_default().to_owned(),
        };
        let value: serde_json::Value = serde_json::from_str(json).map_err(bad)?;
        if let Some(fields) = value.as_object() {
            let refused = unknown_field(fields.keys().map(String::as_str)).or_else(|| {
                fields.iter().find_map(|(k, v)| {
                    let one = serde_json::Map::from_iter([(k.clone(), v.clone())]);
                    let is_fact = Contract::FACTS.iter().any(|f| f.name == k.as_str());
                    is_fact
                        .then(|| serde_json::from_value::<Contract>(one.into()).err())
                        .flatten()
                        .map(|e| e.to_string())
                })
            });
            let refused = refused.or_else(|| {
                let variants = fields.get("variant").and_then(|v| v.as_array())?;
                variants.iter().enumerate().find_map(|(i, v)| {
                    variant_refusal(
                        i,
                        v.as_object()?.iter().map(|(k, v)| {
                            let one = serde_json::Map::from_iter([(k.clone(), v.clone())]);
                            let err = serde_json::from_value::<Contract>(one.into()).err();
                            (k.as_str(), err.map(|e| e.to_string()))
                        }),
                    )
                })
            });
            if let Some(message) = refused {
                return Err(Error::Profile { origin: "profile=".into(), line: None, message });
            }
        }
        let p: Profile = serde_json::from_value(value).map_err(bad)?;
        Self::finish(p, "", "profile=", None, &Chain::default(), None).map(Arc::new)
    }

    /// The built-in profile whose `[[detect]]` keys the file has, first in detection order.
    pub fn detect<'a>(keys: impl Fn(&str) -> bool + 'a) -> Option<(Arc<Profile>, String)> {
        builtins().iter().find_map(|p| {
            p.detect
                .iter()
                .find(|d| d.present.iter().all(|k| keys(k)) && !d.absent.iter().any(|k| keys(k)))
                .map(|d| {
                    let mut why = d.present.iter().map(|k| format!("`{k}`")).collect::<Vec<_>>();
                    why.extend(d.absent.iter().map(|k| format!("no `{k}`")));
                    (p.clone(), why.join(", "))
                })
        })
    }

    /// This profile with every fact `top` sets put over it (`extends`).
    fn overlaid_by(self, top: Profile) -> Profile {
        let mut map = self.map;
        map.extend(top.map);
        let mut map_when = self.map_when;
        map_when.extend(top.map_when);
        let mut sources = self.sources;
        sources.extend(top.sources);
        // A logger of `top` replaces the base's logger of the same name whole.
        let mut loggers = self.loggers;
        loggers.extend(top.loggers);
        Profile {
            name: top.name,
            stack: if top.stack.is_empty() { self.stack } else { top.stack },
            extends: top.extends,
            format: top.format.or(self.format),
            map,
            map_when,
            facts: top.facts.or(self.facts),
            side_tensors: if top.side_tensors.is_empty() {
                self.side_tensors
            } else {
                top.side_tensors
            },
            prediction_tensors: if top.prediction_tensors.is_empty() {
                self.prediction_tensors
            } else {
                top.prediction_tensors
            },
            drop: {
                let mut drop = self.drop;
                for k in top.drop {
                    if !drop.contains(&k) {
                        drop.push(k);
                    }
                }
                drop
            },
            variants: if top.variants.is_empty() { self.variants } else { top.variants },
            // Detection keys belong to the stack that has them, not to a profile built on it.
            detect: top.detect,
            fuzz: FuzzFacts {
                static_length: top.fuzz.static_length.or(self.fuzz.static_length),
                fitting_only: top.fuzz.fitting_only.or(self.fuzz.fitting_only),
                drops: top.fuzz.drops.clone().or_else(|| self.fuzz.drops.clone()),
                non_empty: top.fuzz.non_empty.or(self.fuzz.non_empty),
                examples_multiple_of_dp: top
                    .fuzz
                    .examples_multiple_of_dp
                    .or(self.fuzz.examples_multiple_of_dp),
                max_examples: top.fuzz.max_examples.or(self.fuzz.max_examples),
                empty_examples: top.fuzz.empty_examples.or(self.fuzz.empty_examples),
                cp_slot_align: top.fuzz.cp_slot_align.or(self.fuzz.cp_slot_align),
            },
            loggers,
            sources,
            origin: top.origin,
            chosen: None,
        }
    }

    /// The profile a file with these keys is read under: its first `[[variant]]` that the
    /// keys tell, put over the profile's own facts (the variant's name in
    /// [`Profile::chosen`]), with a note saying which; the profile itself when it has no
    /// variant, with a note when none tells the file.
    pub fn for_keys(
        self: &Arc<Self>,
        keys: &dyn Fn(&str) -> bool,
    ) -> (Arc<Profile>, Option<String>) {
        if self.variants.is_empty() {
            return (self.clone(), None);
        }
        let Some(v) = self.variants.iter().find(|v| v.tells(keys)) else {
            let tried: Vec<String> =
                self.variants.iter().map(|v| format!("`{}` ({})", v.name, v.told_by())).collect();
            return (
                self.clone(),
                Some(format!(
                    "profile `{}`: no variant tells these keys (tried {}): read under its common \
                     facts",
                    self.name,
                    tried.join(", ")
                )),
            );
        };
        let mut base = (**self).clone();
        base.drop.extend(v.drop.iter().cloned());
        base.map.extend(v.map.clone());
        base.sources.extend(v.sources.clone());
        base.format = v.format.or(base.format);
        base.facts = v.facts.or(base.facts);
        base.chosen = Some(v.name.clone());
        let note = format!(
            "read under variant `{}` of profile `{}` (told by {})",
            v.name,
            self.name,
            v.told_by()
        );
        (Arc::new(base), Some(note))
    }

    /// The profile's name, with the variant a file chose: `roll[worker]` (fact origins).
    pub fn label(&self) -> String {
        match &self.chosen {
            Some(v) => format!("{}[{v}]", self.name),
            None => self.name.clone(),
        }
    }

    /// The facts this profile sets, as `(field, value)` in [`FIELDS`] order (`profile show`,
    /// the contract table of `docs/batch-files.md`).
    pub fn stated_facts(&self) -> Vec<(&'static str, String)> {
        let value = toml::Value::try_from(self).unwrap_or(toml::Value::Table(Default::default()));
        let table = value.as_table().cloned().unwrap_or_default();
        let mut out = Vec::new();
        for field in fields_in_order() {
            if field == "loggers" {
                // By name only: the keys are in the profile's file (docs/loggers.md).
                if !self.loggers.is_empty() {
                    let names: Vec<&str> = self.loggers.keys().map(String::as_str).collect();
                    out.push((field, names.join(", ")));
                }
                continue;
            }
            match table.get(field) {
                None => {}
                Some(toml::Value::Table(t)) if t.is_empty() => {}
                Some(toml::Value::Table(t)) => {
                    for (k, v) in t {
                        out.push((field, format!("{k} = {}", inline(v))));
                    }
                }
                Some(v) => out.push((field, inline(v))),
            }
        }
        out
    }

    /// Whether padding segments are by design.
    pub fn padding_segments(&self) -> PaddingSegments {
        self.facts.padding_segments.unwrap_or(PaddingSegments::None)
    }
}

/// The contract table of `docs/batch-files.md`: one row per built-in profile, its facts and
/// the upstream commits they cite (`THDCHECK_BLESS=1 cargo test -p thdcheck contract_table`
/// rewrites the docs).
pub fn contract_table() -> String {
    let mut out = String::from("| profile | stack | facts | read from |\n|---|---|---|---|\n");
    for p in Profile::builtins() {
        let mut facts: Vec<String> =
            p.stated_facts().into_iter().map(|(f, v)| format!("`{f}` {v}")).collect();
        for d in &p.detect {
            let mut keys: Vec<String> = d.present.iter().map(|k| format!("`{k}`")).collect();
            keys.extend(d.absent.iter().map(|k| format!("no `{k}`")));
            facts.push(format!("told by {}", keys.join(" + ")));
        }
        let mut from: Vec<String> = p
            .sources
            .values()
            .filter_map(|s| s.split_whitespace().next())
            .map(|r| format!("`{r}`"))
            .collect();
        from.dedup();
        from.sort();
        from.dedup();
        out.push_str(&format!(
            "| `{}` | {} | {} | {} |\n",
            p.name,
            p.stack,
            if facts.is_empty() { "—".to_owned() } else { facts.join("; ") },
            from.join(", ")
        ));
    }
    out
}

fn inline(v: &toml::Value) -> String {
    match v {
        toml::Value::String(s) => s.clone(),
        toml::Value::Table(t) => {
            let parts: Vec<String> =
                t.iter().map(|(k, v)| format!("{k} → {}", inline(v))).collect();
            parts.join(", ")
        }
        toml::Value::Integer(i) => i.to_string(),
        toml::Value::Float(f) => f.to_string(),
        toml::Value::Boolean(b) => b.to_string(),
        toml::Value::Array(a) => {
            format!("[{}]", a.iter().map(inline).collect::<Vec<_>>().join(", "))
        }
        toml::Value::Datetime(d) => format!("{d:?}"),
    }
}

/// A logger's name: lowercase letters, digits, `-` and `_` (`megatron-bridge`).
fn valid_logger_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
}

fn looks_like_path(spec: &str) -> bool {
    spec.ends_with(".toml") || spec.contains('/') || spec.contains(std::path::MAIN_SEPARATOR)
}

/// The `[tool.thdcheck]` table of the nearest `pyproject.toml` from `start` upwards: its
/// `profile` (a name or a path relative to that file), or the table `[tool.thdcheck.profile]`
/// itself.
///
/// # Errors
/// [`Error::Profile`] for a `pyproject.toml` whose table does not parse.
pub fn from_pyproject(start: &Path) -> Result<Option<Arc<Profile>>> {
    for dir in start.ancestors() {
        let path = dir.join("pyproject.toml");
        // A `pyproject.toml` that is there but cannot be read (a FIFO, a device, a directory,
        // no permission, too large) is an error: skipped, it would check under no profile.
        match std::fs::symlink_metadata(&path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            _ => {}
        }
        let text = read_small_file(&path)?;
        let origin = path.display().to_string();
        let doc: toml::Table = toml::from_str(&text).map_err(|e| Error::Profile {
            origin: origin.clone(),
            line: e.span().map(|s| line_of(&text, s.start)),
            message: e.message().trim().to_owned(),
        })?;
        let Some(tool) = doc.get("tool").and_then(|t| t.get("thdcheck")) else {
            return Ok(None);
        };
        return match tool.get("profile") {
            None => Ok(None),
            Some(toml::Value::String(spec)) => Profile::resolve(spec, Some(dir)).map(Some),
            Some(toml::Value::Table(t)) => {
                let origin = format!("{origin} [tool.thdcheck.profile]");
                if let Some(message) = unknown_field(t.keys().map(String::as_str)) {
                    return Err(Error::Profile { origin, line: None, message });
                }
                let p: Profile =
                    toml::Value::Table(t.clone()).try_into().map_err(|e: toml::de::Error| {
                        Error::Profile {
                            origin: origin.clone(),
                            line: None,
                            message: e.message().trim().to_owned(),
                        }
                    })?;
                Profile::finish(p, "", &origin, Some(dir), &Chain::default(), None)
                    .map(|p| Some(Arc::new(p)))
            }
            Some(other) => Err(Error::Profile {
                origin,
                line: None,
                message: format!(
                    "[tool.thdcheck] `profile` = {}: expected a profile name, a path, or a table",
                    inline(other)
                ),
            }),
        };
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_builtin_profile_parses_and_cites_every_fact() {
        for p in Profile::builtins() {
            assert!(!p.stack.is_empty(), "{}: no `stack`", p.name);
            for (field, _) in p.stated_facts() {
                assert!(
                    p.sources.keys().any(|k| k == field || k.starts_with(&format!("{field}."))),
                    "{}: `{field}` cites no source",
                    p.name
                );
            }
            for (name, logger) in &p.loggers {
                assert!(!logger.source.is_empty(), "{}: [loggers.{name}] has no `source`", p.name);
            }
        }
    }

    #[test]
    fn contract_table_of_the_docs_is_the_profiles() {
        const BEGIN: &str = "<!-- contract-table: begin (generated from reader/profiles) -->";
        const END: &str = "<!-- contract-table: end -->";
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/batch-files.md");
        let doc = std::fs::read_to_string(&path).unwrap();
        let (Some(b), Some(e)) = (doc.find(BEGIN), doc.find(END)) else {
            panic!("docs/batch-files.md has no {BEGIN} … {END} markers")
        };
        let want = format!("\n{}", contract_table());
        let have = &doc[b + BEGIN.len()..e];
        if have != want && std::env::var_os("THDCHECK_BLESS").is_some() {
            let new = format!("{}{BEGIN}{want}{}", &doc[..b], &doc[e..]);
            std::fs::write(&path, new).unwrap();
            return;
        }
        assert_eq!(
            have, want,
            "docs/batch-files.md's contract table differs from reader/profiles; rerun with \
             THDCHECK_BLESS=1"
        );
    }

    /// Every fact of the contract is documented in `docs/profiles.md`'s fields table with its
    /// values, and every row of that table names a field a profile has: adding a fact is its
    /// line in `rules::contract`, the code that reads it, and this row.
    #[test]
    fn the_fields_table_of_the_docs_is_the_contract() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/profiles.md");
        let doc = std::fs::read_to_string(&path).unwrap();
        let rows: BTreeMap<&str, &str> = doc
            .lines()
            .filter_map(|l| l.strip_prefix("| `"))
            .filter_map(|l| l.split_once("` | "))
            .collect();
        for f in Contract::FACTS {
            let Some(values) = rows.get(f.name) else {
                panic!("docs/profiles.md has no row for the fact `{}` ({})", f.name, f.doc)
            };
            // Each value the fact takes is in its row (an enum's names; an integer's word).
            let want: Vec<&str> = f
                .expected
                .split([',', ' '])
                .filter(|w| !w.is_empty() && *w != "or" && *w != "an" && *w != "in")
                .filter(|w| !w.contains("..="))
                .collect();
            for w in want {
                assert!(values.contains(w), "docs/profiles.md: `{}` row lacks {w:?}", f.name);
            }
        }
        let known = top_level_fields();
        for name in rows.keys() {
            let field =
                name.trim_start_matches("[fuzz] ").trim_start_matches("[[").trim_end_matches("]]");
            let top = field.split(['.', ' ']).next().unwrap_or(field).trim_start_matches('[');
            assert!(
                known.contains(&top) || name.starts_with("[fuzz] ") || name.starts_with('['),
                "docs/profiles.md documents `{name}`, which no profile has"
            );
        }
    }

    #[test]
    fn bad_values_name_the_line_field_and_values() {
        let err = Profile::parse("name = \"x\"\n\nlabels = \"rolled\"\n", "x.toml", None)
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("x.toml:3:"), "{err}");
        assert!(err.contains("rolled") && err.contains("unshifted"), "{err}");
        let err = Profile::parse("name = \"x\"\nextends = \"nope\"\n", "x.toml", None)
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("x.toml:2:") && err.contains("transformers"), "{err}");
        let err = Profile::parse("name = \"X Y\"\n", "x.toml", None).unwrap_err().to_string();
        assert!(err.starts_with("x.toml:1:"), "{err}");
    }

    #[test]
    fn a_logger_is_a_table_of_keys_and_a_bad_one_names_its_line() {
        let text = "name = \"mine\"\nextends = \"areal\"\n\n[loggers.mine]\nsource = \"me/x@1 log.py: log\"\n\n\
                    [loggers.mine.keys]\n\"train/tokens\" = { record = \"batch.tokens.real\", kind = \"count\" }\n\
                    \"train/loss\" = { not_recomputed = \"needs the logits\", kind = \"rate\" }\n";
        let p = Profile::parse(text, "mine.toml", None).unwrap();
        let l = &p.loggers["mine"];
        assert_eq!(l.source, "me/x@1 log.py: log");
        let k = l.find("train/tokens").unwrap();
        assert_eq!((k.record.as_deref(), k.kind), (Ok("batch.tokens.real"), LoggedKindFact::Count));
        assert_eq!(l.find("train/loss").unwrap().record, Err("needs the logits".to_owned()));
        // `extends` keeps the base's loggers beside its own; the facts name them only.
        assert!(p.loggers.contains_key("areal"));
        assert!(
            p.stated_facts().contains(&("loggers", "areal, mine".to_owned())),
            "{:?}",
            p.stated_facts()
        );
        for (body, want) in [
            (
                "kind = \"ratio\" }",
                "x.toml:4: unknown variant `ratio`, expected one of `count`, `flops`, `rate`",
            ),
            ("kind = \"rate\", recrod = \"x\" }", "x.toml:4: unknown field `recrod`"),
            (
                "kind = \"rate\", not_recomputed = \"why\" }",
                "x.toml:4: a logged key has either `record` or",
            ),
        ] {
            let text = format!(
                "name = \"x\"\n[loggers.mine]\n[loggers.mine.keys]\n\"a/b\" = {{ record = \"batch.x\", {body}\n"
            );
            let err = Profile::parse(&text, "x.toml", None).unwrap_err().to_string();
            assert!(err.starts_with(want), "{text}\nwant {want:?}, got {err}");
        }
        let err = Profile::parse(
            "name = \"x\"\n[loggers.mine]\n[loggers.mine.keys]\n\"a\" = { kind = \"rate\" }\n",
            "x.toml",
            None,
        )
        .unwrap_err()
        .to_string();
        assert!(err.starts_with("x.toml:4: a logged key needs `record"), "{err}");
        let err = Profile::parse(
            "name = \"x\"\n\n[loggers.Mine]\nkeys = { a = { record = \"batch.cp_size\", kind = \"rate\" } }\n",
            "x.toml",
            None,
        )
        .unwrap_err()
        .to_string();
        assert!(err.starts_with("x.toml:3: [loggers] \"Mine\""), "{err}");
        let err = Profile::parse("name = \"x\"\n[loggers.mine]\nsource = \"s\"\n", "x.toml", None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("missing field `keys`"), "{err}");
    }

    #[test]
    fn a_builtin_extends_another_builtin_without_waiting_on_itself() {
        // Resolving `extends` through `builtins()` while the built-ins are being read waited on
        // that very initialisation forever (`thdcheck profile show bionemo_esm2` hung).
        let esm = Profile::builtin("bionemo_esm2").expect("a built-in");
        let base = Profile::builtin("bionemo").expect("a built-in");
        assert_eq!(esm.facts.pad_token_id, Some(1));
        assert_eq!(esm.facts.objective, Some(Objective::Mlm));
        assert_eq!(esm.fuzz, base.fuzz, "the base's fuzz defaults are inherited");
        assert_eq!(esm.loggers.keys().collect::<Vec<_>>(), base.loggers.keys().collect::<Vec<_>>());
        // Every built-in that extends another comes after it in BUILTIN.
        for (i, p) in Profile::builtins().enumerate() {
            if let Some(parent) = &p.extends {
                let at = Profile::builtins().position(|b| &b.name == parent).unwrap();
                assert!(at < i, "{} extends {parent}, listed after it", p.name);
            }
        }
    }

    #[test]
    fn extends_keeps_the_base_facts_and_overrides_a_few() {
        let p = Profile::parse(
            "name = \"mine\"\nextends = \"axolotl\"\npad_token_id = 7\n",
            "mine.toml",
            None,
        )
        .unwrap();
        let base = Profile::builtin("axolotl").unwrap();
        assert_eq!(p.facts.attention_mask, base.facts.attention_mask);
        assert_eq!(p.facts.padding_segments, base.facts.padding_segments);
        assert_eq!(p.facts.pad_token_id, Some(7));
        assert!(p.detect.is_empty());
    }
}
