//! The keys real training loggers write, mapped onto the record of `thdcheck metrics`, so that
//! `thdcheck metrics --logger STACK --expect LOGGED.json` reads the JSON a logger wrote under
//! its own names. Each key names the upstream file and commit it was read from;
//! `docs/loggers.md` has the formulas and the known bugs of each.

/// A stack whose logger's keys are known.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum Logger {
    /// bionemo-recipes `perf_logger.py` (PR #1548 head `b9f31aec7`).
    Bionemo,
    /// Megatron-Bridge `training_log` + `flop_utils.py` (#3839 as re-landed, HEAD).
    MegatronBridge,
    /// AReaL's SFT/LM engine `stats_tracker` (`sft/*`).
    Areal,
    /// open-instruct's SFT and DPO training loops.
    OpenInstruct,
}

/// What kind of number a key holds (picks the rule of `properties::checks::check_logged`).
pub use properties::checks::LoggedKind;

/// One key a logger writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoggedKey {
    /// The key as it appears in the logged dict (wandb name).
    pub key: &'static str,
    /// The record key (`thdcheck metrics --json`, under `record`) holding the value it must
    /// have, or why thdcheck cannot recompute it from batches.
    pub record: Result<&'static str, &'static str>,
    /// Count, FLOPs or rate.
    pub kind: LoggedKind,
    /// Where upstream computes it (file and commit).
    pub source: &'static str,
}

impl Logger {
    /// The keys this logger writes.
    pub fn keys(self) -> &'static [LoggedKey] {
        match self {
            Logger::Bionemo => BIONEMO,
            Logger::MegatronBridge => MEGATRON_BRIDGE,
            Logger::Areal => AREAL,
            Logger::OpenInstruct => OPEN_INSTRUCT,
        }
    }

    /// The entry of `key`, if this logger writes it.
    ///
    /// # Example
    /// ```
    /// use thdcheck::loggers::Logger;
    /// let k = Logger::Bionemo.find("train/mfu_pct").unwrap();
    /// assert_eq!(k.record, Ok("batch.mfu_pct.useful"));
    /// assert!(Logger::Bionemo.find("train/nonsense").is_none());
    /// ```
    pub fn find(self, key: &str) -> Option<&'static LoggedKey> {
        self.keys().iter().find(|k| k.key == key)
    }
}

const fn key(
    key: &'static str,
    record: &'static str,
    kind: LoggedKind,
    source: &'static str,
) -> LoggedKey {
    LoggedKey { key, record: Ok(record), kind, source }
}

const fn not_recomputed(
    key: &'static str,
    why: &'static str,
    kind: LoggedKind,
    source: &'static str,
) -> LoggedKey {
    LoggedKey { key, record: Err(why), kind, source }
}

use LoggedKind::{Count, Rate};

const PERF_LOGGER: &str = "bionemo-recipes/recipes/*/perf_logger.py @ b9f31aec7 (PR #1548)";
const BIONEMO: &[LoggedKey] = &[
    key("train/mfu_pct", "batch.mfu_pct.useful", Rate, PERF_LOGGER),
    key("train/mfu_padded_pct", "batch.mfu_pct.hardware", Rate, PERF_LOGGER),
];
const TRAINING_LOG: &str =
    "src/megatron/bridge/training/utils/train_utils.py training_log @ 067f987df";
const MEGATRON_BRIDGE: &[LoggedKey] = &[
    key("throughput/tflops/device", "batch.megatron.tflops_per_gpu", Rate, TRAINING_LOG),
    key("throughput/tflops", "batch.megatron.tflops", Rate, TRAINING_LOG),
];
const LM_ENGINE: &str =
    "areal/engine/sft/lm_engine.py + areal/utils/stats_tracker.py @ 95e2379d0 (#1249)";
const AREAL: &[LoggedKey] = &[
    key("sft/n_tokens", "batch.tokens.real", Count, LM_ENGINE),
    key("sft/n_valid_tokens", "batch.tokens.valid", Count, LM_ENGINE),
    key("sft/prompt_tokens", "batch.tokens.prompt", Count, LM_ENGINE),
    key("sft/n_seqs", "batch.sequences.with_valid_labels", Count, LM_ENGINE),
    not_recomputed("sft/loss/avg", "needs the logits: use `thdcheck fuzz loss`", Rate, LM_ENGINE),
    not_recomputed("sft/ppl/avg", "needs the logits", Rate, LM_ENGINE),
    not_recomputed("sft/ppl/min", "needs the logits", Rate, LM_ENGINE),
    not_recomputed("sft/ppl/max", "needs the logits", Rate, LM_ENGINE),
];
const OPEN_INSTRUCT: &[LoggedKey] = &[];
