//! The keys real training loggers write, mapped onto the record of `thdcheck metrics`, so that
//! `thdcheck metrics --logger STACK --expect LOGGED.json` reads the JSON a logger wrote under
//! its own names. Each key names the upstream file and commit it was read from;
//! `docs/loggers.md` has the formulas and the known bugs of each.

/// A stack whose logger's keys are known.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum Logger {
    /// bionemo-recipes `perf_logger.py` (PR #1548 head `b9f31aec7`; recipe formula
    /// `bionemo_perf_logger`).
    Bionemo,
    /// Megatron-Bridge `training_log` + `flop_utils.py` (HEAD `067f987df`; formula
    /// `megatron_lm`).
    MegatronBridge,
    /// AReaL's SFT `LMEngine` + `stats_tracker` (`sft/*`, `95e2379d0`).
    Areal,
    /// open-instruct `dpo.py` (OLMo-core `PerfCallback`, `e6c3044aa`).
    OpenInstructDpo,
    /// open-instruct `dpo_tune_cache.py` (Accelerate, `e6c3044aa`).
    OpenInstructDpoCache,
    /// open-instruct `finetune.py` (SFT, Accelerate, `e6c3044aa`).
    OpenInstructSft,
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
            Logger::OpenInstructDpo => OPEN_INSTRUCT_DPO,
            Logger::OpenInstructDpoCache => OPEN_INSTRUCT_DPO_CACHE,
            Logger::OpenInstructSft => OPEN_INSTRUCT_SFT,
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
const WALL: &str = "wall time: give it as --step-time";
const LOGITS: &str = "needs the logits (`thdcheck fuzz loss` checks a loss function)";
const NOT_BATCH: &str = "optimizer or memory state, not a property of the batches";
const BIONEMO: &[LoggedKey] = &[
    key("train/total_unpadded_tokens_per_batch", "batch.tokens.real", Count, PERF_LOGGER),
    key(
        "train/tokens_per_second_per_gpu",
        "batch.stored_tokens_per_second_per_gpu",
        Rate,
        PERF_LOGGER,
    ),
    key(
        "train/unpadded_tokens_per_second_per_gpu",
        "batch.tokens_per_second_per_gpu",
        Rate,
        PERF_LOGGER,
    ),
    key("train/tflops_per_gpu", "batch.tflops_per_gpu.useful", Rate, PERF_LOGGER),
    key("train/tflops_per_gpu_padded", "batch.tflops_per_gpu.hardware", Rate, PERF_LOGGER),
    key("train/mfu_pct", "batch.mfu_pct.useful", Rate, PERF_LOGGER),
    key("train/mfu_padded_pct", "batch.mfu_pct.hardware", Rate, PERF_LOGGER),
    not_recomputed("train/step_time", WALL, Rate, PERF_LOGGER),
    not_recomputed("train/loss", LOGITS, Rate, PERF_LOGGER),
    not_recomputed("train/perplexity", LOGITS, Rate, PERF_LOGGER),
    not_recomputed("train/grad_norm", NOT_BATCH, Rate, PERF_LOGGER),
    not_recomputed("train/learning_rate", NOT_BATCH, Rate, PERF_LOGGER),
    not_recomputed("train/global_step", NOT_BATCH, Count, PERF_LOGGER),
];
const TRAINING_LOG: &str =
    "src/megatron/bridge/training/utils/train_utils.py training_log + flop_utils.py @ 067f987df";
const MEGATRON_BRIDGE: &[LoggedKey] = &[
    key("throughput/tflops/device", "batch.megatron.tflops_per_gpu", Rate, TRAINING_LOG),
    // The MLflow spelling of the same value.
    key("throughput/tflops_per_device", "batch.megatron.tflops_per_gpu", Rate, TRAINING_LOG),
    key("throughput/tflops", "batch.megatron.tflops", Rate, TRAINING_LOG),
    not_recomputed("iteration-time", WALL, Rate, TRAINING_LOG),
    not_recomputed("lm loss", LOGITS, Rate, TRAINING_LOG),
    not_recomputed(
        "throughput/tokens_per_sec",
        "config batch size × wall time, not the batches' tokens",
        Rate,
        TRAINING_LOG,
    ),
];
const LM_ENGINE: &str =
    "areal/engine/sft/lm_engine.py + areal/utils/stats_tracker.py @ 95e2379d0 (#1249)";
const AREAL: &[LoggedKey] = &[
    key("sft/n_tokens", "batch.tokens.real", Count, LM_ENGINE),
    key("sft/n_valid_tokens", "batch.tokens.valid", Count, LM_ENGINE),
    key("sft/prompt_tokens", "batch.tokens.prompt", Count, LM_ENGINE),
    key("sft/n_seqs", "batch.sequences.with_valid_labels", Count, LM_ENGINE),
    not_recomputed("sft/loss/avg", LOGITS, Rate, LM_ENGINE),
    not_recomputed("sft/loss/min", LOGITS, Rate, LM_ENGINE),
    not_recomputed("sft/loss/max", LOGITS, Rate, LM_ENGINE),
    not_recomputed("sft/ppl/avg", LOGITS, Rate, LM_ENGINE),
    not_recomputed("sft/ppl/min", LOGITS, Rate, LM_ENGINE),
    not_recomputed("sft/ppl/max", LOGITS, Rate, LM_ENGINE),
    not_recomputed("sft/grad_norm", NOT_BATCH, Rate, LM_ENGINE),
    not_recomputed("sft/lr", NOT_BATCH, Rate, LM_ENGINE),
];
const DPO_PY: &str = "open_instruct/dpo.py + olmo_core_callbacks.py PerfCallback @ e6c3044aa";
const MFU_STEP: &str = "open-instruct's approximate_learner_utilization (sequences of the average \
                        length, peak 990 TFLOP/s): another formula than the record's";
const OPEN_INSTRUCT_DPO: &[LoggedKey] = &[
    key("train/token_count", "batch.tokens.real", Count, DPO_PY),
    key("train/padding_fraction", "batch.padding_fraction", Rate, DPO_PY),
    key("train/global_sequences_per_step", "batch.sequences.real", Count, DPO_PY),
    key("perf/tokens_per_second_step", "batch.tokens_per_second", Rate, DPO_PY),
    key("perf/tokens_per_second", "batch.tokens_per_second", Rate, DPO_PY),
    key("perf/tokens_per_second_per_gpu", "batch.tokens_per_second_per_gpu", Rate, DPO_PY),
    not_recomputed("perf/mfu_step", MFU_STEP, Rate, DPO_PY),
    not_recomputed("perf/mfu", MFU_STEP, Rate, DPO_PY),
    not_recomputed("train_loss", LOGITS, Rate, DPO_PY),
    not_recomputed("train/loss", LOGITS, Rate, DPO_PY),
    not_recomputed("learning_rate", NOT_BATCH, Rate, DPO_PY),
];
const DPO_CACHE_PY: &str = "open_instruct/dpo_tune_cache.py @ e6c3044aa";
const OPEN_INSTRUCT_DPO_CACHE: &[LoggedKey] = &[
    // Counts valid labels, not real tokens, under the same name as dpo.py.
    key("perf/tokens_per_second_step", "batch.valid_tokens_per_second", Rate, DPO_CACHE_PY),
    not_recomputed("perf/mfu_step", MFU_STEP, Rate, DPO_CACHE_PY),
    not_recomputed("train_loss", LOGITS, Rate, DPO_CACHE_PY),
    not_recomputed("learning_rate", NOT_BATCH, Rate, DPO_CACHE_PY),
];
const FINETUNE_PY: &str = "open_instruct/finetune.py @ e6c3044aa";
const OPEN_INSTRUCT_SFT: &[LoggedKey] = &[
    key("total_tokens_this_log_period", "batch.tokens.real", Count, FINETUNE_PY),
    not_recomputed("total_tokens", "cumulative over the run", Count, FINETUNE_PY),
    not_recomputed("total_tokens_including_padding", "cumulative over the run", Count, FINETUNE_PY),
    not_recomputed("train_loss", LOGITS, Rate, FINETUNE_PY),
    not_recomputed("learning_rate", NOT_BATCH, Rate, FINETUNE_PY),
];
