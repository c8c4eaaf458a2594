//! The options of `thdcheck fuzz` and `thdcheck metrics`, and how a batch is read and checked
//! (clap derive): the command flattens them into its subcommands, and the Python package parses
//! its keyword arguments with the same definitions.

use std::path::PathBuf;
use std::sync::Arc;

use clap::{Args, ValueEnum};

use reader::Dialect;
use reader::profile::Profile;
use rules::checks::FuzzTarget;

/// `thdcheck metrics --help`: exit codes and the record's keys.
pub const METRICS_AFTER_HELP: &str = "Exit codes: 0 the record was printed (and every logged value \
agrees), 1 a logged value disagrees, 2 the recipe, batch or logged JSON cannot be read, or none \
of the logged values can be compared.\n\
Recipes: golden/tests/recipes/*.toml. Logger keys: docs/loggers.md.\n\
Example: thdcheck metrics --recipe R.toml --batch mb0.safetensors --batch cp_ranks/ --grad-acc 2 \
--dp-size 8 --logger areal --expect logged.json";

/// Options of `thdcheck metrics`.
#[derive(Debug, Args)]
pub struct MetricsArgs {
    /// The recipe (TOML; see golden/tests/recipes/).
    #[arg(long, value_name = "R.toml")]
    pub recipe: PathBuf,
    /// A dumped batch, or a directory of them: its tokens, attention work, FLOPs and MFU under
    /// the recipe's model and timing (keys under `batch.`). Repeat it for the micro-batches of
    /// one step; each file is a micro-batch, except the rank files of a CP group (`cp_rank`,
    /// `cp_size`; one directory), which are reassembled into the global micro-batch they hold.
    #[arg(long = "batch", value_name = "FILE|DIR")]
    pub batches: Vec<PathBuf>,
    /// The batches are one data-parallel rank's: the step's counts and FLOPs are this many times
    /// theirs (what Megatron-Bridge extrapolates without its all-reduce). Rates per GPU divide by
    /// the recipe's num_gpus.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=65536))]
    pub dp_size: u64,
    /// Micro-batches per optimizer step (gradient accumulation): must be the number of
    /// micro-batches given with --batch, which together make the step.
    #[arg(long, value_name = "K", value_parser = clap::value_parser!(u64).range(1..=65536))]
    pub grad_acc: Option<u64>,
    /// Read --expect under this logger's own key names: a logger of the built-in profiles
    /// (`bionemo`, `megatron-bridge`, `areal`, `open-instruct-dpo`, `open-instruct-dpo-cache`,
    /// `open-instruct-sft`), or a `[loggers.NAME]` table of the --profile given, which is looked
    /// up first (docs/loggers.md has the mapping and the upstream file and commit of each key).
    #[arg(long, value_name = "NAME")]
    pub logger: Option<String>,
    // How the batches are read (the options of `thdcheck check`).
    /// How the batches are read.
    #[command(flatten)]
    pub read: BatchOpts,
    /// Override the recipe's step time, seconds.
    #[arg(long, value_name = "S", allow_hyphen_values = true, value_parser = positive_f64)]
    pub step_time: Option<f64>,
    /// A logger's values (JSON) to compare with the record.
    #[arg(long, value_name = "LOGGED.json")]
    pub expect: Option<PathBuf>,
    /// Relative tolerance for non-integer values (rates, MFU, ratios): float64 loggers agree to far better than this.
    #[arg(long, default_value_t = 1e-6, allow_hyphen_values = true, value_parser = non_negative_f64)]
    pub rtol: f64,
    /// Absolute tolerance for non-integer values.
    #[arg(long, default_value_t = 1e-9, allow_hyphen_values = true, value_parser = non_negative_f64)]
    pub atol: f64,
    /// One JSON document on stdout.
    #[arg(long)]
    pub json: bool,
}

/// `thdcheck fuzz --help`: what each target checks, and the exit codes.
pub const FUZZ_AFTER_HELP: &str = "Collators: the batch is read and checked with the options of \
`thdcheck check` (--dialect, --map, --labels, --sentinel, --position-base, --pad-token-id, \
--cp-size, --pad-to-multiple-of, --causal); token ids include 0 and the --pad-token-id. A \
failure is shrunk keeping its kind and first violated check (an adapter error or crash: its \
exception's type and place); each distinct failure of the run is shrunk and reported on its own \
unless --first-failure. The first request after each \
(re)start of the adapter waits --startup-timeout-ms, later ones --timeout-ms.\n\
Exit codes: 0 every case passed, 1 a case failed (violation, crash, hang, malformed answer), 2 \
the adapter could not be started or a usage error.\n\
Loss: one global batch per case, sent at cp 1, 2, 4 and 8 (one request each); the reported loss \
is judged against the oracle's f64 loss to --rtol. Cp-split: a refusal is allowed only for \
a slot that is not a multiple of 2·cp (with --cp-layout contiguous: of cp). Loss and cp-split \
shard by the profile's cp_layout unless --cp-layout says otherwise.\n\
Example: thdcheck fuzz packer -- python3 adapters/python/examples/greedy_packer.py\n\
Example: thdcheck fuzz loss -- python3 adapters/python/examples/cp_loss.py\n\
Example: thdcheck fuzz cp-split -- python3 adapters/python/examples/cp_split.py\n\
Attention: every case is also sent with some documents' inputs perturbed (isolation) and, when \
causal, with each document's last token perturbed; --cp-size N sends every zigzag rank's shard, \
--causal only causal requests, --dtype the dtype.\n\
Example: thdcheck fuzz attention --dtype bf16 -- python3 adapters/python/examples/attention.py";

/// `fuzz attention --dtype`: the dtype of q, k, v (every value is exactly representable in it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum AttnDtypeArg {
    /// float32.
    #[default]
    F32,
    /// bfloat16.
    Bf16,
    /// float16.
    F16,
}

/// Options of `thdcheck fuzz`.
#[derive(Debug, Args)]
pub struct FuzzArgs {
    /// packer, collator, logger, loss, cp-split or attention.
    #[arg(value_enum)]
    pub target: FuzzTarget,
    /// Cases to generate (passing ones; shrinking runs come on top). At least 1: zero cases
    /// would prove nothing.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..))]
    pub cases: u32,
    /// Seed of the case generator (same seed, same cases).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Per-request timeout in milliseconds; an adapter that does not answer is a hang.
    #[arg(long, default_value_t = 5000, value_parser = clap::value_parser!(u64).range(1..))]
    pub timeout_ms: u64,
    /// Timeout in milliseconds of the first request after the adapter (re)starts, instead of
    /// --timeout-ms: its start-up (`import torch`, loading a tokenizer) happens then.
    #[arg(long, default_value_t = 60_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub startup_timeout_ms: u64,
    /// The longest answer line read, in bytes; a longer one is reported as `too-long` and the
    /// adapter killed (never buffered without bound).
    #[arg(long, default_value_t = 256 << 20, value_parser = clap::value_parser!(u64).range(1..=1 << 40))]
    pub max_line_bytes: u64,
    /// A failure class that counts as passing (`violation dpo-offsets`, a check id such as
    /// `dpo-offsets`, or a kind such as `crash`), so that the next class is shrunk. Repeatable.
    /// A failing run lists every other class it met ("also failing").
    #[arg(long, value_name = "CLASS")]
    pub ignore: Vec<String>,
    /// At most this many runs after the first failure: shrinking it, replaying it, and the scan
    /// of fresh cases for other failing classes (at most 256; none after a crash, a hang, a
    /// too-long or not-json answer). Each further distinct failure gets as many to shrink it. A
    /// crashing adapter is restarted per run.
    #[arg(long, default_value_t = 1000)]
    pub max_shrink_runs: u32,
    /// Stop at the first failure: shrink it and report it alone. Without it the run goes on
    /// with the rest of --cases after a failure, and shrinks and reports each distinct failure
    /// (another rule, another exception type or place) on its own, at most 8, then scans fresh
    /// cases for other failing classes. The Python fuzzers' default.
    #[arg(long, conflicts_with = "also_failing")]
    pub first_failure: bool,
    /// Also write one self-contained HTML page drawing the shrunk request and the adapter's
    /// answer (packs, ranks, dropped examples) as strips of tokens.
    #[arg(long, value_name = "FILE")]
    pub html: Option<std::path::PathBuf>,
    /// At most this many fresh cases in the scan for other failing classes after a failure
    /// (also bounded by --max-shrink-runs and by 256).
    #[arg(long, value_name = "N", default_value_t = 256)]
    pub also_failing: u32,
    /// Collator contract: sft (flatten, the default) or dpo (chosen/rejected/concatenated
    /// keys). Collator only: any other target refuses it (a packer's pairs are `--pairs`).
    #[arg(long, value_enum)]
    pub mode: Option<crate::protocol::CollatorMode>,
    /// Packer: also require that no two packs fit together (first-fit-like strategies); in a
    /// session, among the packs of each call.
    #[arg(long)]
    pub first_fit: bool,
    /// Packer: drive a streaming packer through sessions (protocol version 2: `start`, pushes
    /// over several epochs, `end_epoch`, `finish`), checking conservation over the whole
    /// session.
    #[arg(long)]
    pub session: bool,
    /// Packer: the capacity counts padded tokens: every sequence (and piece) takes `⌈len / M⌉·M`
    /// (bionemo's `pad_sequences_to_be_divisible_by`); sent as `pad_to_multiple_of`.
    #[arg(long, value_name = "M", value_parser = clap::value_parser!(u64).range(1..=1 << 20))]
    pub pad_sequences_to_multiple_of: Option<u64>,
    /// Packer: at most K examples per pack (open-instruct's loader: the per-rank batch size);
    /// sent as `max_seqs_per_pack`.
    #[arg(long, value_name = "K", value_parser = clap::value_parser!(u64).range(1..=1 << 20))]
    pub max_seqs_per_pack: Option<u64>,
    /// Packer: packs are dealt to R data-parallel ranks, and the answer's `ranks` must give
    /// every rank as many packs; sent as `dp_size`. A fixed R stays R in every case and in
    /// every counterexample; a range `LO..HI` (both ends included, as `1..8`, also written
    /// `1..=8`) draws R per case, and the shrinker may lower it, never below LO.
    #[arg(long, value_name = "R|LO..HI", value_parser = parse_dp_size)]
    pub dp_size: Option<DpSize>,
    /// Packer: examples are DPO pairs `{"id", "chosen", "rejected"}`; each branch goes to its
    /// own row of the same capacity.
    #[arg(long)]
    pub pairs: bool,
    /// Packer: generate only examples that fit the capacity (padded), for a packer that refuses
    /// longer ones; without it, a refusal is accepted only for a request holding one. Also the
    /// profile's `[fuzz] fitting_only = true`.
    #[arg(long)]
    pub fitting_only: bool,
    /// Packer: also generate examples of 0 tokens (in some cases), for a stack whose pipeline
    /// can hand its packer an empty example; each must be packed or declared dropped like any
    /// other. Off by default: no real stack read so far sends one. Also the profile's `[fuzz]
    /// empty_examples = true`.
    #[arg(long)]
    pub empty_examples: bool,
    /// Packer: what it may drop (repeatable): `over-length` examples (the default), the
    /// `dp-remainder` (the trailing packs beyond a multiple of --dp-size, a loader's
    /// `drop_last`), `drop-last` (each epoch's last, incomplete pack, lost without being
    /// reported: what an epoch loses must fit one pack), or `none`. Any other drop is a
    /// `packer-drops` violation, any other loss `packer-conservation`. Default: the profile's
    /// `[fuzz] drops`, else over-length.
    #[arg(long, value_enum, value_name = "KIND")]
    pub drops: Vec<reader::profile::DropFact>,
    /// Packer: it asserts a non-empty request (every push of a session), so none is generated.
    /// Also the profile's `[fuzz] non_empty = true`.
    #[arg(long)]
    pub non_empty: bool,
    /// Packer: it asserts an example count divisible by --dp-size, so every request (every
    /// push) holds a multiple of it. Also the profile's `[fuzz] examples_multiple_of_dp`.
    #[arg(long, requires = "dp_size")]
    pub examples_multiple_of_dp: bool,
    /// Packer: at most N examples a request (a push of a session). Also the profile's `[fuzz]
    /// max_examples`.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub max_examples: Option<u64>,
    /// Judge the request in FILE (one JSON request line, as a failing report prints it)
    /// instead of generated cases: no shrinking; exit 0 when it passes, 1 with its failure.
    /// Packer (one-shot) and collator.
    #[arg(long, value_name = "FILE")]
    pub request: Option<std::path::PathBuf>,
    /// Packer: every request asks for at least k packs (`min_packs`: a balanced partitioner's
    /// k_partitions, open-instruct's min_num_batches), k drawn per case: one more than first
    /// fit needs, as many as the examples, or any number up to that. The answer must hold
    /// min(k, examples) packs, none empty. One-shot requests only.
    #[arg(long, conflicts_with = "session")]
    pub min_packs: bool,
    /// Packer: which generators draw the cases: `mixed` (the uniform shapes and the
    /// edge-biased swarm), `uniform` or `edge`.
    #[arg(long, value_enum, default_value = "mixed")]
    pub generation: Generation,
    /// Logger: the FLOPs formula the logger implements (the request says which; the model's
    /// causal convention follows it: Megatron halves, bionemo's perf_logger does not).
    #[arg(long, value_enum, default_value = "megatron-lm")]
    pub formula: Formula,
    /// Logger: the largest CP size generated (1, 2 or 4), e.g. 1 for a logger whose CP
    /// accounting is known to be unfinished.
    #[arg(long, default_value_t = 4, value_parser = clap::builder::TypedValueParser::map(
        clap::builder::PossibleValuesParser::new(["1", "2", "4"]),
        |s: String| s.parse::<u64>().unwrap_or(1),
    ))]
    pub max_cp: u64,
    /// Logger: at most this many micro-batches per step (1 for a stack without gradient
    /// accumulation, such as bionemo's esm2).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=16))]
    pub max_micro_batches: u32,
    /// Logger: the layouts generated (repeatable; default all): flat, mock-pad (bionemo's
    /// pad_to_multiple_of mock segment, marked by num_real_seqs), cp-pad (slots padded to 2·cp),
    /// bshd (one document per row of [B, S], no offsets).
    #[arg(long = "layout", value_enum, value_name = "LAYOUT")]
    pub layouts: Vec<LayoutKind>,
    /// Logger and loss: relative tolerance of the floats judged (logged rates; the reported
    /// loss and Σ NLL against the oracle's f64 loss). Default: for a loss, the dtype its answer
    /// declares (`"dtype"`): 1e-9 for float64 or none (another order of the same f64
    /// arithmetic), 1e-5 for float32; 1e-6 for a logger (float32
    /// metric accumulators, such as torchmetrics', round a correct rate at about 4e-8). Counts
    /// and FLOPs are exact.
    #[arg(long, value_name = "RTOL", allow_hyphen_values = true, value_parser = non_negative_f64)]
    pub rtol: Option<f64>,
    /// Loss and cp-split: how the stack's CP split lays the tokens over the ranks: `zigzag`
    /// (every slot in 2·cp chunks, rank r holding chunks r and 2·cp−1−r: TransformerEngine,
    /// Megatron), `contiguous` (cp equal contiguous pieces, rank r holding piece r of the whole
    /// pack, or of every slot: Ulysses, slime --allgather-cp, ring attention) or
    /// `zigzag-sequence` (the whole pack in 2·cp chunks whatever its documents: Megatron-LM's
    /// per-sequence zigzag; cp-split only). The loss's shards and the splitter's expected shards
    /// follow it. Default: the profile's `cp_layout`, else `zigzag`.
    #[arg(long, value_enum, value_name = "LAYOUT")]
    pub cp_layout: Option<CpSplitLayout>,
    /// cp-split: the splitter pads each sequence itself to the least multiple of K·2·cp tokens
    /// (of K at cp 1) and never takes a slot of the request's choosing, so every request's
    /// slots are that round-up, without a spare block (SkyRL: K = its tensor-parallel size).
    /// Zigzag layout only. Default: the profile's `[fuzz] cp_slot_align`, else the request's
    /// own slots (padded to 2·cp, sometimes a block more, sometimes not at all).
    /// From 1 to 1024 (`reader::profile::CP_SLOT_ALIGN_MAX`, the profile's bound too).
    #[arg(long, value_name = "K", allow_hyphen_values = true, value_parser = parse_cp_slot_align)]
    pub cp_slot_align: Option<u32>,
    /// Collator: which requests ask for a static max_seq_length (`never` for a collator that
    /// does not pad to one, such as transformers' DataCollatorWithFlattening). Default: the
    /// profile's `[fuzz] static_length`, else `sometimes`.
    #[arg(long, value_enum)]
    pub static_length: Option<StaticLength>,
    /// Collator: one request in four has a max_seq_length below what its examples need; the
    /// collator must keep the longest prefix of examples that fits (`documents` expects it).
    #[arg(long)]
    pub over_budget: bool,
    /// Collator: it inserts this token at the start of each example (BOS); `documents` expects it.
    #[arg(long, value_name = "ID", allow_hyphen_values = true)]
    pub add_bos: Option<i64>,
    /// Collator: it appends this token to each example (EOS); `documents` expects it.
    #[arg(long, value_name = "ID", allow_hyphen_values = true)]
    pub add_eos: Option<i64>,
    /// Attention: the dtype of q, k and v (values exactly representable in it); the output is
    /// judged by the FlashAttention rule of that dtype.
    #[arg(long, value_enum, default_value = "f32")]
    pub dtype: AttnDtypeArg,
    /// Attention: no padding between documents (slots are the real lengths; with --cp-size
    /// they are still rounded up to 2·cp), for an attention that finds documents from position
    /// ids alone.
    #[arg(long)]
    pub unpadded: bool,
    // Collator: how its batch is read and checked, as `thdcheck check` reads a dumped file.
    /// How the batches are read and checked.
    #[command(flatten)]
    pub batch: BatchOpts,
    /// One JSON document on stdout instead of the text report (no progress bar).
    #[arg(long)]
    pub json: bool,
    /// No progress bar.
    #[arg(short, long)]
    pub quiet: bool,
    /// The adapter command and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<String>,
}

impl FuzzArgs {
    /// The CP layout of `fuzz loss` and `fuzz cp-split`: `--cp-layout`, else the stated
    /// profile's `cp_layout`, else the zigzag (as `--static-length` falls back on the profile's
    /// `[fuzz] static_length`).
    pub fn cp_split_layout(&self, profile: Option<&Profile>) -> CpSplitLayout {
        use reader::profile::CpLayout;
        if let Some(l) = self.cp_layout {
            return l;
        }
        match profile.and_then(|p| p.facts.cp_layout) {
            Some(CpLayout::Contiguous) => CpSplitLayout::Contiguous,
            Some(CpLayout::ZigzagSequence) => CpSplitLayout::ZigzagSequence,
            Some(CpLayout::Zigzag) | None => CpSplitLayout::Zigzag,
        }
    }
}

/// `--profile NAME|FILE`.
fn parse_profile(s: &str) -> Result<Arc<Profile>, String> {
    Profile::resolve(s, None).map_err(|e| e.to_string())
}

/// `--cp-slot-align K`: the bound and the message of a profile's `[fuzz] cp_slot_align`.
/// `--dp-size`: one DP size, or a range of them drawn per case.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DpSize {
    /// The smallest (a fixed size: the size).
    pub lo: u64,
    /// The largest, included (a fixed size: the size).
    pub hi: u64,
}

impl DpSize {
    /// The size when it is fixed (`lo == hi`).
    pub fn fixed(self) -> Option<u64> {
        (self.lo == self.hi).then_some(self.lo)
    }
}

impl std::fmt::Display for DpSize {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.fixed() {
            Some(r) => write!(f, "{r}"),
            None => write!(f, "{}..{}", self.lo, self.hi),
        }
    }
}

/// `R`, `LO..HI` or `LO..=HI` (both ends included either way), each from 1 to 1024.
///
/// # Example
/// ```
/// use engine::args::{DpSize, parse_dp_size};
/// assert_eq!(parse_dp_size("4"), Ok(DpSize { lo: 4, hi: 4 }));
/// assert_eq!(parse_dp_size("1..8"), Ok(DpSize { lo: 1, hi: 8 }));
/// assert_eq!(parse_dp_size("1..=8"), parse_dp_size("1..8"));
/// assert!(parse_dp_size("8..1").is_err() && parse_dp_size("0").is_err());
/// ```
///
/// # Errors
/// Not a size or a range of sizes from 1 to 1024, or a range whose end is below its start.
pub fn parse_dp_size(s: &str) -> Result<DpSize, String> {
    let one = |t: &str| match t.trim().parse::<u64>() {
        Ok(r) if (1..=1024).contains(&r) => Ok(r),
        _ => Err(format!("`{t}` is not a DP size from 1 to 1024")),
    };
    let (lo, hi) = match s.split_once("..") {
        None => (one(s)?, one(s)?),
        Some((a, b)) => (one(a)?, one(b.strip_prefix('=').unwrap_or(b))?),
    };
    if hi < lo {
        return Err(format!("`{s}`: the range ends below its start"));
    }
    Ok(DpSize { lo, hi })
}

fn parse_cp_slot_align(s: &str) -> Result<u32, String> {
    let v: i128 = s.trim().parse().map_err(|e| format!("{s:?} is not a whole number: {e}"))?;
    reader::profile::cp_slot_align(v)
}

/// How a batch is read and checked: shared by `check` (dumped files) and `fuzz collator`
/// (the batches a collator returns).
#[derive(Debug, Clone, Args)]
pub struct BatchOpts {
    /// Read the keys in this dialect instead of detecting it.
    #[arg(long, value_enum)]
    pub dialect: Option<Dialect>,
    /// Rename a key before reading, e.g. --map tokens=input_ids (repeatable).
    #[arg(long = "map", value_name = "KEY=NAME", value_parser = parse_map)]
    pub map: Vec<(String, String)>,
    /// Label convention, if not the dialect's (hf, dpo: unshifted; te: shifted).
    #[arg(long, value_enum)]
    pub labels: Option<reader::profile::LabelsFact>,
    /// Empty-slot sentinel of seq_lens and trailing cu_seqlens entries (default -1000, or the
    /// profile's).
    #[arg(long, allow_hyphen_values = true)]
    pub sentinel: Option<i64>,
    /// The models' first position id (RoBERTa/ESM: padding_idx + 1). Without it, position ids
    /// may start at 0, or at one base shared by every segment (noted in the report).
    #[arg(long, allow_hyphen_values = true)]
    pub position_base: Option<i64>,
    /// The tokenizer's pad id. Without a mask or num_real_seqs, a segment made only of it with
    /// every label -100 is a mock segment (bionemo pad_to_multiple_of, #1561). Also read from
    /// the file's metadata (`pad_token_id`), like `position_base` and `labels`.
    #[arg(long, allow_hyphen_values = true)]
    pub pad_token_id: Option<i64>,
    /// A label value the loss ignores besides -100 (TE's padding_label_id), read as -100.
    /// Also read from the file's metadata (`ignore_index`).
    #[arg(long, allow_hyphen_values = true)]
    pub ignore_index: Option<i64>,
    /// The tokenizer's EOS id, which ends every document under a profile whose
    /// `documents = "eos"` (Megatron-LM's EOD). Also read from the file's metadata
    /// (`eos_token_id`).
    #[arg(long, allow_hyphen_values = true)]
    pub eos_token_id: Option<i64>,
    /// The stack's contract: a built-in profile's name (`thdcheck profile list`) or a profile
    /// file (`.toml`, docs/profiles.md). Also metadata `profile`, then `[tool.thdcheck]` in
    /// pyproject.toml; OLMo-core and Megatron-Bridge are also told by their keys.
    #[arg(long, value_name = "NAME|FILE", value_parser = parse_profile)]
    pub profile: Option<Arc<Profile>>,
    /// What the loss trains, where the batch cannot say it (also metadata `objective`; the
    /// olmo_core profile implies pretrain): `pretrain` trains across documents on purpose, so
    /// a label that is the next document's first token is noted, not flagged.
    #[arg(long, value_enum)]
    pub objective: Option<reader::formats::Objective>,
    /// Check that each batch shards over this many context-parallel ranks (zigzag), at most
    /// [`rules::MAX_CP_SIZE`] (what a file may state).
    #[arg(
        long,
        help = concat!(
            "Check that each batch shards over this many context-parallel ranks (zigzag), at most ",
            rules::max_cp_size!(),
            " (what a file may state)"
        ),
        value_parser = clap::value_parser!(u32).range(1..=i64::from(rules::MAX_CP_SIZE))
    )]
    pub cp_size: Option<u32>,
    /// Check that the token count is a multiple of this (the collator's pad_to_multiple_of).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub pad_to_multiple_of: Option<u32>,
    /// Causal attention (a causal LM; its profile says `attention = "causal"`): useful work is
    /// the exact triangle Σ s(s+1)/2, and each valid label must be the token it predicts
    /// (`label-targets`, skipped without it).
    #[arg(long, conflicts_with = "mlm")]
    pub causal: bool,
    /// Masked LM (ESM, BERT): labels are targets at their own position, never shifted across a
    /// boundary (also metadata `mlm = true` or `causal = false`). For `fuzz collator`, the
    /// collator may also replace input ids (mask or random tokens), so `documents` compares only
    /// the segment lengths and labels are not compared with ids.
    #[arg(long)]
    pub mlm: bool,
}

impl BatchOpts {
    /// What the keys cannot say: dialect, renames, label convention, sentinel, position base,
    /// pad id, second ignore value, profile.
    ///
    /// # Errors
    /// [`reader::Error::Profile`] for a `pyproject.toml` whose `[tool.thdcheck]` profile does
    /// not parse (read only when `--profile` is not given).
    pub fn read_options(&self) -> reader::Result<reader::ReadOptions> {
        let default_profile = match self.profile {
            Some(_) => None,
            None => match std::env::current_dir() {
                Ok(dir) => reader::profile::from_pyproject(&dir)?,
                Err(_) => None,
            },
        };
        Ok(reader::ReadOptions {
            dialect: self.dialect,
            map: self.map.clone(),
            stated: reader::profile::Contract {
                labels: self.labels,
                sentinel: self.sentinel,
                position_base: self.position_base,
                pad_token_id: self.pad_token_id,
                ignore_index: self.ignore_index,
                eos_token_id: self.eos_token_id,
                objective: self.objective,
                ..Default::default()
            },
            profile: self.profile.clone(),
            default_profile,
            picture: false,
        })
    }

    /// The options of the batch rules: CP size, pad multiple, causal or masked LM.
    pub fn check_options(&self) -> reader::CheckOptions {
        reader::CheckOptions {
            cp_size: self.cp_size.map(|c| c as usize),
            pad_to_multiple_of: self.pad_to_multiple_of.map(|m| m as usize),
            causal: self.causal,
            masked_lm: self.mlm || self.objective == Some(reader::formats::Objective::Mlm),
        }
    }
}

fn parse_map(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((from, to)) if !from.is_empty() && !to.is_empty() => {
            Ok((from.to_owned(), to.to_owned()))
        }
        _ => Err(format!(
            "expected KEY=NAME (a key in the file = the name the dialect uses), got `{s}`"
        )),
    }
}

/// A finite number ≥ 0 (a tolerance); a negative one is named as such, not as an unknown flag.
fn non_negative_f64(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        Ok(v) => Err(format!("{v} is not a finite number ≥ 0")),
        Err(e) => Err(format!("{s:?} is not a number: {e}")),
    }
}

/// A finite number > 0 (a duration).
fn positive_f64(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        Ok(v) => Err(format!("{v} is not a finite number > 0")),
        Err(e) => Err(format!("{s:?} is not a number: {e}")),
    }
}

// The value enums of the fuzz options live here, beside the arguments that take them, so that
// the arguments depend on nothing of the engines that read them.

/// Which requests carry a static `max_seq_length` (`--static-length`): a collator that never
/// pads to one (transformers' `DataCollatorWithFlattening`, bionemo's) gets `never`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum StaticLength {
    /// Half the requests, at or above what the examples need.
    #[default]
    Sometimes,
    /// No request: `max_seq_length` is always null.
    Never,
    /// Every request.
    Always,
}

/// Which generators draw the packer cases (`--generation`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Generation {
    /// The uniform shapes and the edge-biased swarm, mixed (two cases in three uniform).
    #[default]
    Mixed,
    /// The uniform shapes alone: lengths as fractions of the capacity, arbitrary, tiny or equal.
    Uniform,
    /// The edge-biased swarm alone: lengths at the capacity ± 1 and of one token, sums at
    /// k·capacity ± 1, counts at k·R ± 1 for the DP size R, each feature on in a random subset
    /// of the cases.
    Edge,
}

/// How a CP split lays the tokens over the ranks (`--cp-layout`; a profile's `cp_layout`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum CpSplitLayout {
    /// Every slot in 2·cp equal chunks; rank r holds chunks r and 2·cp−1−r.
    #[default]
    Zigzag,
    /// cp equal contiguous pieces; rank r holds piece r of the whole pack (or of every slot).
    Contiguous,
    /// The whole pack in 2·cp equal chunks, whatever its documents; rank r holds chunks r and
    /// 2·cp−1−r of it (Megatron-LM's per-sequence zigzag for inter-document masking).
    ZigzagSequence,
}

/// The FLOPs formula a logger implements (`--formula`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Formula {
    /// Megatron-LM / Megatron-Bridge `num_floating_point_operations` (causal half).
    MegatronLm,
    /// bionemo `perf_logger.py` (PR #1548): never halves for causal attention.
    BionemoPerfLogger,
}

/// The layouts `--layout` can ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LayoutKind {
    /// One row, the documents back to back.
    Flat,
    /// A mock pad segment fills the pack to a multiple of m ∈ {8, 16} (bionemo).
    MockPad,
    /// Every document's slot padded to a multiple of 2·cp (context parallelism).
    CpPad,
    /// One document per right-padded row of [B, S], no offsets.
    Bshd,
}
