//! The self-check behind `thdcheck selfcheck`: `thd`'s pipelines ([`ThdSubject`]) run through
//! the same [`subjects`](crate::subjects) drivers as the property suites, on cases drawn from
//! the same strategies with a seeded runner, plus a fixed grid of low-precision comparisons
//! (f32 `thd` against the f64 oracle by the tolerance policy of `oracle::tolerance`).
//!
//! Nothing here is a rule of its own: the drivers call the checks of [`crate::checks`], and the
//! f32 rows apply `oracle::tolerance::flash_rule` and the LOSS tolerance.
//!
//! ```
//! use properties::selfcheck::{Verdict, drivers};
//! let rows = drivers(7, 4);
//! assert!(rows.iter().all(|r| matches!(r.verdict, Verdict::Held)), "{rows:#?}");
//! ```

use std::fmt::Debug;

use candle_core::{DType, Device, Tensor};
use oracle::cases::{self, GridCase};
use oracle::compare::compare;
use oracle::tolerance::{FlashReport, ToleranceClass, flash_rule, tolerance};
use proptest::sample::Index;
use proptest::strategy::Strategy;
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestError, TestRng, TestRunner};
use thd::{AttnOptions, AttnShape, Float, LabelConvention, SeqLens};

use crate::harness::PackerClaims;
use crate::strategies::{
    Sizes, arb_attn_case, arb_collate_case, arb_cp_loss_case, arb_dpo_case, arb_eos_case,
    arb_flops_case, arb_mask_case, arb_mfu_case, arb_packer_case, arb_sft_case, arb_shard_case,
    arb_tokens_cp_case, arb_work_case, mix, noise,
};
use crate::subjects::{
    ThdSubject, run_attention, run_block_mask, run_cp_loss, run_cp_shard, run_dpo, run_eos_pack,
    run_flops, run_isolation, run_layout, run_loss, run_mfu_pad, run_packer_case, run_side_tensors,
    run_tokens_cp, run_work,
};
use crate::{Checked, Invariant, Location, Violation};

// Beside `Violation` (the zoo's JSON entry points return it too, without importing this module).
pub use crate::Verdict;

/// One driver's row.
#[derive(Debug, Clone)]
pub struct DriverRow {
    /// The invariant the driver checks.
    pub invariant: Invariant,
    /// The driver, as `run_*` (what it runs).
    pub driver: &'static str,
    /// Cases asked for.
    pub cases: u32,
    /// The outcome.
    pub verdict: Verdict,
}

/// A proptest runner whose generator is seeded by `seed` (the same seed, the same cases).
pub fn seeded_runner(seed: u64, cases: u32) -> TestRunner {
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&seed.to_le_bytes());
    let config = Config {
        cases,
        failure_persistence: None,
        max_shrink_iters: 100_000,
        max_shrink_time: 0,
        fork: false,
        timeout: 0,
        verbose: 0,
        ..Config::default()
    };
    TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &bytes))
}

/// Runs `run` on the cases `runner` draws from `strategy`; on a failure, the shrunk case and
/// its violation.
pub fn run_cases<S>(
    mut runner: TestRunner,
    strategy: S,
    run: impl Fn(&S::Value) -> Checked,
) -> Verdict
where
    S: Strategy,
    S::Value: Debug,
{
    match runner.run(&strategy, |case| run(&case).map_err(|v| TestCaseError::fail(v.to_string()))) {
        Ok(()) => Verdict::Held,
        Err(TestError::Fail(_, minimal)) => match run(&minimal) {
            Err(violation) => Verdict::Failed { case: format!("{minimal:#?}"), violation },
            Ok(()) => Verdict::Aborted(format!("the shrunk case passes on a rerun: {minimal:?}")),
        },
        Err(TestError::Abort(why)) => Verdict::Aborted(why.to_string()),
    }
}

/// [`run_cases`], and then the shrunk case minimized one step at a time
/// ([`crate::minimal::minimize`]) to a case none of whose reductions fails alike: how the zoo
/// runs its variants.
#[cfg(any(test, feature = "zoo"))]
pub fn run_minimized<S>(
    runner: TestRunner,
    strategy: S,
    run: impl Fn(&S::Value) -> Checked,
) -> Verdict
where
    S: Strategy,
    S::Value: Debug + crate::minimal::Reductions,
{
    match crate::minimal::shrunk(runner, strategy, &run) {
        Ok(None) => Verdict::Held,
        Ok(Some(case)) => match run(&case) {
            Err(violation) => Verdict::Failed { case: format!("{case:#?}"), violation },
            Ok(()) => Verdict::Aborted(format!("the shrunk case passes on a rerun: {case:?}")),
        },
        Err(why) => Verdict::Aborted(why),
    }
}

/// Every subject driver on [`ThdSubject`], `cases` cases each, drawn with `seed`.
pub fn drivers(seed: u64, cases: u32) -> Vec<DriverRow> {
    let r = || seeded_runner(seed, cases);
    let row = |invariant, driver, verdict| DriverRow { invariant, driver, cases, verdict };
    let s = ThdSubject;
    vec![
        row(
            Invariant::Layout,
            "run_layout",
            run_cases(r(), arb_collate_case(Sizes::SMALL), |c| run_layout(&s, c)),
        ),
        row(
            Invariant::Layout,
            "run_block_mask",
            run_cases(r(), arb_mask_case(Sizes::SMALL), |c| run_block_mask(&s, c)),
        ),
        row(
            Invariant::Layout,
            "run_eos_pack",
            run_cases(r(), arb_eos_case(Sizes::SMALL), |c| run_eos_pack(&s, c)),
        ),
        row(
            Invariant::Layout,
            "run_side_tensors",
            run_cases(r(), arb_collate_case(Sizes::SMALL), |c| run_side_tensors(&s, c)),
        ),
        row(
            Invariant::Attn,
            "run_attention",
            run_cases(r(), arb_attn_case(), |c| run_attention(&s, c)),
        ),
        row(
            Invariant::Attn,
            "run_isolation",
            run_cases(r(), (arb_attn_case(), proptest::arbitrary::any::<Index>()), |(c, i)| {
                run_isolation(&s, c, i.index(c.lens.len()))
            }),
        ),
        row(
            Invariant::Loss,
            "run_loss",
            run_cases(r(), arb_sft_case(Sizes::SMALL), |c| run_loss(&s, c)),
        ),
        row(
            Invariant::CpLoss,
            "run_cp_loss",
            run_cases(r(), arb_cp_loss_case(Sizes::SMALL), |c| run_cp_loss(&s, c)),
        ),
        row(
            Invariant::CpShard,
            "run_cp_shard",
            run_cases(r(), arb_shard_case(Sizes::SMALL), |c| run_cp_shard(&s, c)),
        ),
        row(
            Invariant::TokensCp,
            "run_tokens_cp",
            run_cases(r(), arb_tokens_cp_case(Sizes::SMALL), |c| run_tokens_cp(&s, c)),
        ),
        row(Invariant::Work, "run_work", run_cases(r(), arb_work_case(), |c| run_work(&s, c))),
        row(
            Invariant::MfuPad,
            "run_mfu_pad",
            run_cases(r(), arb_mfu_case(), |c| run_mfu_pad(&s, c)),
        ),
        row(Invariant::Flops, "run_flops", run_cases(r(), arb_flops_case(), |c| run_flops(&s, c))),
        row(Invariant::Dpo, "run_dpo", run_cases(r(), arb_dpo_case(), |c| run_dpo(&s, c))),
        row(
            Invariant::Packer,
            "run_packer_case",
            run_cases(r(), arb_packer_case(), |c| {
                let spec = c.spec;
                let make = || spec.build().expect("the strategy builds valid specs");
                run_packer_case(&make, c, &PackerClaims::of_spec(&spec)).map(|_| ())
            }),
        ),
    ]
}

/// One case of the fixed attention grid (`oracle::cases::small`): f64 `thd` against the f64
/// oracle at the ATTN tolerance, f32 `thd` against the f64 oracle by the FlashAttention rule.
#[derive(Debug, Clone)]
pub struct AttnPrecision {
    /// The grid case.
    pub case: GridCase,
    /// `max|thd f64 − oracle f64|`.
    pub f64_max: f64,
    /// The f32 comparison (max error, bound, mean ratio).
    pub f32: FlashReport,
    /// The first failure, if any.
    pub violation: Option<Violation>,
}

/// The attention grid at `seed`.
///
/// # Errors
/// candle's or `thd`'s message when a grid case cannot run at all (a bug, not a verdict).
pub fn attention_precision(seed: u64) -> Result<Vec<AttnPrecision>, String> {
    cases::small().into_iter().map(|case| attention_row(case, seed)).collect()
}

fn attention_row(case: GridCase, seed: u64) -> Result<AttnPrecision, String> {
    let dev = Device::Cpu;
    let err = |e: candle_core::Error| format!("case {}: {e}", case.name);
    let inputs = case.inputs(seed, DType::F64, &dev).map_err(err)?;
    let spec = case.spec();
    let oracle = |q: &Tensor, k: &Tensor, v: &Tensor| {
        oracle::varlen_attention(q, k, v, &case.lens_q, &case.lens_k, &spec).map_err(err)
    };
    let reference = oracle(&inputs.q, &inputs.k, &inputs.v)?;
    let out64 = fast_path::<f64>(&case, &inputs.q, &inputs.k, &inputs.v)?;
    let report = compare(
        &format!("{} (thd f64 vs oracle f64)", case.name),
        &out64,
        &reference,
        &case.lens_q,
        tolerance(ToleranceClass::Attention, DType::F64),
    )
    .map_err(err)?;
    let f64_max = report.max_abs.as_ref().map_or(0.0, |d| d.diff);

    let low = inputs.to_dtype(DType::F32).map_err(err)?;
    let naive = oracle(&low.q, &low.k, &low.v)?;
    let out32 = fast_path::<f32>(&case, &low.q, &low.k, &low.v)?;
    let flash = flash_rule(&out32, &naive, &reference).map_err(err)?;

    let at = Location::default().context(case.to_string());
    let violation = if !report.passed() {
        Some(
            Violation::for_property_tests(
                Invariant::Attn,
                "f64 fast path within 1e-12 of the f64 oracle",
            )
            .id(crate::checks::ATTN_ORACLE.id)
            .at(at)
            .expected("max|Δ| ≤ 1e-12")
            .got(report.to_string()),
        )
    } else if !flash.passed() {
        Some(
            Violation::for_property_tests(
                Invariant::Attn,
                "f32 fast path within the FlashAttention rule",
            )
            .id(crate::checks::ATTN_ORACLE.id)
            .at(at)
            .expected(format!("max|out − ref64| ≤ {:.3e}", flash.bound))
            .got(flash.to_string()),
        )
    } else {
        None
    };
    Ok(AttnPrecision { case, f64_max, f32: flash, violation })
}

/// `thd::varlen_attention` in `F` on the case's tensors; `[Tq, H, D]` in `F`.
fn fast_path<F: Float + candle_core::WithDType>(
    case: &GridCase,
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
) -> Result<Tensor, String> {
    let name = &case.name;
    let flat = |t: &Tensor| -> Result<Vec<F>, String> {
        t.flatten_all().and_then(|t| t.to_vec1::<F>()).map_err(|e| format!("case {name}: {e}"))
    };
    let thd_err = |e: thd::Error| format!("case {name}: thd: {e}");
    let cu_q = SeqLens::new(case.lens_q.clone()).to_cu_seqlens().map_err(thd_err)?;
    let cu_k = SeqLens::new(case.lens_k.clone()).to_cu_seqlens().map_err(thd_err)?;
    let shape = AttnShape { heads: case.heads, kv_heads: case.kv_heads, head_dim: case.head_dim };
    let opts = AttnOptions { causal: case.causal, scale: None };
    let out = thd::varlen_attention(&flat(q)?, &flat(k)?, &flat(v)?, &cu_q, &cu_k, shape, &opts)
        .map_err(thd_err)?;
    Tensor::from_vec(out, q.dims(), q.device()).map_err(|e| format!("case {name}: {e}"))
}

/// One loss comparison: `thd::packed_cross_entropy` in `dtype` against the oracle's
/// per-sequence cross-entropy in f64, at the LOSS tolerance of `dtype`.
#[derive(Debug, Clone)]
pub struct LossPrecision {
    /// The case's name.
    pub name: &'static str,
    /// Sequence lengths.
    pub lens: Vec<u32>,
    /// Vocabulary size.
    pub vocab: usize,
    /// The dtype `thd` ran in.
    pub dtype: DType,
    /// `thd`'s mean.
    pub thd: f64,
    /// The oracle's mean.
    pub oracle: f64,
    /// The failure, if any.
    pub violation: Option<Violation>,
}

/// The loss grid at `seed`: three cases, f64 and f32 each.
///
/// # Errors
/// candle's or `thd`'s message when a case cannot run at all.
pub fn loss_precision(seed: u64) -> Result<Vec<LossPrecision>, String> {
    let mut rows = Vec::new();
    for (name, lens, vocab) in [
        ("loss_small", vec![5u32, 0, 7, 3], 11usize),
        ("loss_ignored", vec![1, 1, 1], 7),
        ("loss_wide_vocab", vec![33, 64, 1, 30], 1000),
    ] {
        for dtype in [DType::F64, DType::F32] {
            rows.push(
                loss_row(name, &lens, vocab, dtype, seed)
                    .map_err(|e| format!("loss case {name} ({}): {e}", dtype.as_str()))?,
            );
        }
    }
    Ok(rows)
}

/// Seeded logits (uniform in [-6, 6)) and raw labels (about 1 in 5 ignored); the collated labels carry -100 at
/// every sequence start, and the oracle shifts within each sequence on its own.
fn loss_row(
    name: &'static str,
    lens: &[u32],
    vocab: usize,
    dtype: DType,
    seed: u64,
) -> Result<LossPrecision, String> {
    let dev = Device::Cpu;
    let tokens: usize = lens.iter().map(|&s| s as usize).sum();
    let logits: Vec<f64> = (0..tokens * vocab).map(|i| 6.0 * noise(seed, &[1, i as u64])).collect();
    let raw: Vec<i64> = (0..tokens as u64)
        .map(|i| {
            if mix(seed, &[2, i]).is_multiple_of(5) {
                thd::IGNORE_INDEX
            } else {
                (mix(seed, &[3, i]) % vocab as u64) as i64
            }
        })
        .collect();
    let mut collated = raw.clone();
    let mut start = 0;
    for &s in lens {
        if s > 0 {
            collated[start] = thd::IGNORE_INDEX;
        }
        start += s as usize;
    }
    let c = |e: candle_core::Error| e.to_string();
    let t = |e: thd::Error| e.to_string();
    let logits = Tensor::from_vec(logits, (tokens, vocab), &dev)
        .and_then(|l| l.to_dtype(dtype))
        .map_err(c)?;
    let wide = logits.to_dtype(DType::F64).map_err(c)?;
    let expected = oracle::cross_entropy(&wide, &raw, lens).map_err(c)?.mean();
    let got = match dtype {
        DType::F32 => {
            let flat = logits.flatten_all().and_then(|l| l.to_vec1::<f32>()).map_err(c)?;
            thd::packed_cross_entropy(&flat, vocab, &collated, LabelConvention::Unshifted)
        }
        _ => {
            let flat = wide.flatten_all().and_then(|l| l.to_vec1::<f64>()).map_err(c)?;
            thd::packed_cross_entropy(&flat, vocab, &collated, LabelConvention::Unshifted)
        }
    }
    .map_err(t)?
    .mean();
    let tol = tolerance(ToleranceClass::Loss, dtype);
    let violation = (!tol.allows(got, expected)).then(|| {
        Violation::for_property_tests(
            Invariant::Loss,
            "the packed loss within the LOSS tolerance of the oracle",
        )
        .id(crate::checks::LOSS_MEAN.id)
        .at(Location::default().context(format!("{name} ({})", dtype.as_str())))
        .expected(format!("{expected} (rtol {:e}, atol {:e})", tol.rtol, tol.atol))
        .got(got)
    });
    Ok(LossPrecision {
        name,
        lens: lens.to_vec(),
        vocab,
        dtype,
        thd: got,
        oracle: expected,
        violation,
    })
}

/// The zoo, run through the drivers: every catalogued variant must be caught by its invariant.
#[cfg(any(test, feature = "zoo"))]
mod zoo_drivers {
    use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
    use thd::pack::{BinPackingOptions, Packer, PackerSpec};

    use super::{Verdict, run_minimized};
    use crate::Checked;
    use crate::harness::{PackerClaims, PackerPlan, check_packer};
    use crate::strategies::{
        PackerStream, PackerStreamParams, Sizes, arb_attn_case, arb_collate_case, arb_cp_loss_case,
        arb_dpo_case, arb_eos_case, arb_flops_case, arb_mask_case, arb_mfu_case,
        arb_micro_batch_loss_case, arb_packer_stream, arb_sft_case, arb_shard_case,
        arb_tokens_cp_case, arb_work_case,
    };
    use crate::subjects::{
        run_attention, run_block_mask, run_cp_loss, run_cp_shard, run_cp_shard_contiguous, run_dpo,
        run_eos_pack, run_flops, run_layout, run_loss, run_mfu_pad, run_side_tensors,
        run_tokens_cp, run_work,
    };
    use crate::zoo::{self, CATALOGUE, ZooEntry};

    /// Cases tried before a variant counts as missed.
    pub const ZOO_CASES: u32 = 4096;

    /// The zoo's runner: proptest's fixed deterministic generator, [`ZOO_CASES`] cases, so
    /// every run (and every pinned snapshot) sees the same cases and the same shrunk result.
    pub fn zoo_runner() -> TestRunner {
        let config = Config {
            cases: ZOO_CASES,
            failure_persistence: None,
            max_shrink_iters: 100_000,
            max_shrink_time: 0,
            fork: false,
            timeout: 0,
            verbose: 0,
            ..Config::default()
        };
        TestRunner::new_with_rng(config, TestRng::deterministic_rng(RngAlgorithm::ChaCha))
    }

    /// One catalogued variant and what its driver did.
    #[derive(Debug, Clone)]
    pub struct ZooRow {
        /// The catalogue entry.
        pub entry: &'static ZooEntry,
        /// [`Verdict::Failed`] when the driver caught the variant (the expected outcome).
        pub verdict: Verdict,
    }

    impl ZooRow {
        /// Caught, and by the invariant the catalogue names.
        pub fn caught(&self) -> bool {
            matches!(&self.verdict, Verdict::Failed { violation, .. }
                if violation.invariant == self.entry.caught_by)
        }
    }

    /// Every catalogued variant through [`zoo_variant`] with [`zoo_runner`].
    pub fn zoo_rows() -> Vec<ZooRow> {
        CATALOGUE
            .iter()
            .map(|entry| ZooRow {
                entry,
                verdict: zoo_variant(entry.name, zoo_runner)
                    .expect("every catalogued variant has a driver (tested)"),
            })
            .collect()
    }

    pub(crate) fn packer_stream(
        make: impl Fn(u32) -> Box<dyn Packer>,
        claims: PackerClaims,
    ) -> impl Fn(&PackerStream) -> Checked {
        move |s: &PackerStream| {
            let plan = PackerPlan {
                batch_size: s.batch_size,
                epochs: s.epochs,
                seed: s.seed,
                shuffle: s.shuffle,
            };
            check_packer(&|| make(s.capacity), &s.dataset, &plan, &claims).map(|_| ())
        }
    }

    /// How a declared variant's cases are run: `driver: f` as `f(&zoo::Name, case)`, `run: expr`
    /// as written.
    macro_rules! cases_of {
        (driver, $name:ident, $driver:expr) => {
            |c| $driver(&zoo::$name, c)
        };
        (run, $name:ident, $run:expr) => {
            $run
        };
    }

    /// The correct counterpart of a declared variant, for the controls of a benchmark (a test of
    /// the invariant must pass it): `driver: f` as `f(&ThdSubject, case)` (the contiguous split's
    /// reference is handled by name in `zoo_judge_reference`), `run: expr` as a built-in packer
    /// ([`reference_packer`]).
    #[cfg(any(test, feature = "serde"))]
    macro_rules! reference_of {
        (driver, $name:ident, $driver:expr) => {
            |c| $driver(&crate::subjects::ThdSubject, c)
        };
        (run, $name:ident, $run:expr) => {
            reference_packer(stringify!($name))
        };
    }

    /// The built-in packer a zoo packer gets wrong, held to the same claims: best fit for
    /// `StarvedBestFit`, the sequential budget with its carry (dropping over-long examples) for
    /// the others.
    #[cfg(any(test, feature = "serde"))]
    fn reference_packer(name: &str) -> impl Fn(&PackerStream) -> Checked + use<> {
        use thd::pack::{OverLength, SequentialOptions};
        let best_fit = name == "StarvedBestFit";
        let spec = move |capacity| {
            if best_fit {
                PackerSpec::BestFit { capacity, options: BinPackingOptions::default() }
            } else {
                PackerSpec::SequentialBudget {
                    capacity,
                    options: SequentialOptions {
                        over_length: OverLength::Drop,
                        ..SequentialOptions::default()
                    },
                }
            }
        };
        let claims = PackerClaims::of_spec(&spec(1));
        packer_stream(move |c| spec(c).build().expect("a valid built-in spec"), claims)
    }

    macro_rules! dispatch {
        ($(($name:ident, $module:ident, $inv:ident, [$($class:literal),*], $upstream:literal,
            $strategy:expr, $how:ident, $run:expr, $test:ident))*) => {
            /// Runs zoo variant `name` through the driver of the invariant that must catch it
            /// (its declaration in `crate::zoo::zoo_variants!`), on cases from `runner()`;
            /// `None` if `name` is not a variant.
            pub fn zoo_variant(name: &str, runner: impl Fn() -> TestRunner) -> Option<Verdict> {
                Some(match name {
                    $(stringify!($name) => {
                        run_minimized(runner(), $strategy, cases_of!($how, $name, $run))
                    })*
                    _ => return None,
                })
            }

            /// Runs zoo variant `name` as [`zoo_variant`] does and judges every one-step
            /// reduction of its shrunk case ([`crate::minimal`]); `None` if `name` is not a
            /// variant.
            pub fn zoo_minimality(
                name: &str,
                runner: impl Fn() -> TestRunner,
            ) -> Option<crate::minimal::Minimality> {
                Some(match name {
                    $(stringify!($name) => {
                        crate::minimal::minimality(runner(), $strategy, cases_of!($how, $name, $run))
                    })*
                    _ => return None,
                })
            }

            /// Judges the case `case_json` (JSON of the variant's strategy's case type) with
            /// zoo variant `name`'s own driver, as [`zoo_variant`] runs it: `Ok(None)` when it
            /// passes, `Ok(Some(violation))` when it fails, `Err` when the JSON is not such a
            /// case (or the driver panics on it); `None` if `name` is not a variant.
            #[cfg(any(test, feature = "serde"))]
            pub fn zoo_judge(
                name: &str,
                case_json: &str,
            ) -> Option<Result<Option<crate::Violation>, String>> {
                Some(match name {
                    $(stringify!($name) => {
                        crate::zoo::json::judge($strategy, case_json, cases_of!($how, $name, $run))
                    })*
                    _ => return None,
                })
            }

            /// [`zoo_judge`] with the variant's correct counterpart (`thd`'s subject, the
            /// plain contiguous split, or a built-in packer) in the same driver: a test of the
            /// invariant must pass it.
            #[cfg(any(test, feature = "serde"))]
            pub fn zoo_judge_reference(
                name: &str,
                case_json: &str,
            ) -> Option<Result<Option<crate::Violation>, String>> {
                if name == "OverlappingContiguousSplit" {
                    return Some(crate::zoo::json::judge(
                        arb_shard_case(Sizes::SMALL),
                        case_json,
                        |c| run_cp_shard_contiguous(&crate::subjects::ContiguousSplit, c),
                    ));
                }
                Some(match name {
                    $(stringify!($name) => {
                        crate::zoo::json::judge($strategy, case_json, reference_of!($how, $name, $run))
                    })*
                    _ => return None,
                })
            }

            /// Searches zoo variant `name` as [`zoo_variant`] does, with
            /// [`seeded_runner`]`(seed, cases)`, and hands back the shrunk case as JSON;
            /// `None` if `name` is not a variant.
            #[cfg(any(test, feature = "serde"))]
            pub fn zoo_search(name: &str, seed: u64, cases: u32) -> Option<crate::zoo::json::ZooSearch> {
                Some(match name {
                    $(stringify!($name) => {
                        crate::zoo::json::search(
                            super::seeded_runner(seed, cases),
                            $strategy,
                            cases_of!($how, $name, $run),
                        )
                    })*
                    _ => return None,
                })
            }

            /// The size of the case `case_json` of variant `name`'s case type
            /// ([`crate::zoo::json::CaseSize`]); `None` if `name` is not a variant.
            #[cfg(any(test, feature = "serde"))]
            pub fn zoo_size(name: &str, case_json: &str) -> Option<Result<Vec<(String, u64)>, String>> {
                Some(match name {
                    $(stringify!($name) => crate::zoo::json::size($strategy, case_json),)*
                    _ => return None,
                })
            }
        };
    }
    crate::zoo::zoo_variants!(dispatch);
}
#[cfg(any(test, feature = "zoo"))]
pub use zoo_drivers::{ZOO_CASES, ZooRow, zoo_minimality, zoo_rows, zoo_runner, zoo_variant};
#[cfg(all(any(test, feature = "zoo"), any(test, feature = "serde")))]
pub use zoo_drivers::{zoo_judge, zoo_judge_reference, zoo_search, zoo_size};
