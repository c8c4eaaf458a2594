//! The generic packer harness: drive any [`Packer`] over epochs of batches, check every PACKER
//! rule, and report its efficiency against the lower bound `⌈Σs / C⌉`.

use thd::pack::{Example, Packer, PackerSpec};

use crate::checks::{
    EmittedPack, PackerRun, QualityBound, check_conservation, check_deterministic,
    check_pairwise_full, check_quality,
};
use crate::{Invariant, Location, Violation};

/// How a dataset is fed to a packer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PackerPlan {
    /// Examples per pushed batch (≥ 1).
    pub batch_size: usize,
    /// Epochs.
    pub epochs: u32,
    /// Reshuffle seed.
    pub seed: u64,
    /// Reshuffle every epoch (a Fisher–Yates shuffle seeded by `(seed, epoch)`).
    pub shuffle: bool,
}

/// What a strategy promises beyond conservation and capacity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PackerClaims {
    /// Any two packs emitted by one call together exceed the capacity (first fit, best fit,
    /// FFD over one instance).
    pub first_fit_like: bool,
    /// The approximation bound against OPT, checked on calls that emit ≤ 12 single items.
    pub bound: Option<QualityBound>,
}

impl PackerClaims {
    /// The claims of a built-in strategy: first-fit-like and bounded when it packs a whole
    /// epoch as one instance (no window).
    ///
    /// # Example
    /// ```
    /// use properties::harness::PackerClaims;
    /// use thd::pack::{BinPackingOptions, PackerSpec};
    /// let ffd = PackerSpec::FirstFitDecreasing { capacity: 10, options: BinPackingOptions::default() };
    /// assert!(PackerClaims::of_spec(&ffd).first_fit_like);
    /// ```
    pub fn of_spec(spec: &PackerSpec) -> Self {
        match *spec {
            PackerSpec::FirstFit { options, .. } | PackerSpec::BestFit { options, .. }
                if options.window.is_none() =>
            {
                Self { first_fit_like: true, bound: Some(QualityBound::FirstFit) }
            }
            PackerSpec::FirstFitDecreasing { options, .. } if options.window.is_none() => {
                Self { first_fit_like: true, bound: Some(QualityBound::FirstFitDecreasing) }
            }
            _ => Self::default(),
        }
    }
}

/// What the harness measured.
#[derive(Debug, Clone, PartialEq)]
pub struct PackerReport {
    /// The packer's name.
    pub name: String,
    /// Packs emitted.
    pub packs: u64,
    /// `max_b ⌈Σ real_b / C⌉`, a lower bound on any packer's pack count.
    pub lower_bound: u64,
    /// `lower_bound / packs` (1 when there are no packs).
    pub efficiency: f64,
    /// Real tokens over stored capacity, `Σ real / (packs · C)` per row.
    pub fill: f64,
    /// Examples (or pieces) reported dropped.
    pub dropped: usize,
}

/// The order of one epoch: the identity, or a Fisher–Yates shuffle seeded by `(seed, epoch)`.
pub fn epoch_permutation(n: usize, seed: u64, epoch: u32, shuffle: bool) -> Vec<usize> {
    let mut order: Vec<usize> = (0..n).collect();
    if shuffle {
        for i in (1..n).rev() {
            let j = (crate::strategies::mix(seed, &[9, u64::from(epoch), i as u64])
                % (i as u64 + 1)) as usize;
            order.swap(i, j);
        }
    }
    order
}

/// Runs `packer` over `dataset` according to `plan` and records everything.
///
/// # Errors
/// The packer's error message, with the call that failed.
pub fn run_packer(
    packer: &mut dyn Packer,
    dataset: &[Example],
    plan: &PackerPlan,
) -> Result<PackerRun, String> {
    let mut run = PackerRun::default();
    let mut call = 0usize;
    let record = |run: &mut PackerRun,
                  epoch: usize,
                  packs: Vec<thd::pack::Pack>,
                  call: &mut usize| {
        run.packs.extend(packs.into_iter().map(|pack| EmittedPack { epoch, call: *call, pack }));
        *call += 1;
    };
    for epoch in 0..plan.epochs {
        let order = epoch_permutation(dataset.len(), plan.seed, epoch, plan.shuffle);
        for chunk in order.chunks(plan.batch_size.max(1)) {
            let batch: Vec<Example> = chunk.iter().map(|&i| dataset[i]).collect();
            let packs = packer.push(&batch).map_err(|e| format!("push in epoch {epoch}: {e}"))?;
            run.pushed.extend(batch);
            record(&mut run, epoch as usize, packs, &mut call);
        }
        let packs = packer.end_epoch().map_err(|e| format!("end_epoch {epoch}: {e}"))?;
        record(&mut run, epoch as usize, packs, &mut call);
    }
    let packs = packer.finish().map_err(|e| format!("finish: {e}"))?;
    record(&mut run, plan.epochs as usize, packs, &mut call);
    run.dropped = packer.dropped().to_vec();
    run.pending_after_finish = packer.pending();
    Ok(run)
}

/// The fewest bins of capacity `capacity` that hold `lens`, by dynamic programming over subsets
/// (`n ≤ 16`; `3ⁿ` steps).
///
/// # Panics
/// If some length exceeds the capacity or `n > 16`.
///
/// # Example
/// ```
/// use properties::harness::optimal_bins;
/// assert_eq!(optimal_bins(&[5, 5, 4, 4, 2], 10), 2);
/// assert_eq!(optimal_bins(&[], 10), 0);
/// ```
pub fn optimal_bins(lens: &[u32], capacity: u32) -> usize {
    let n = lens.len();
    assert!(n <= 16, "optimal_bins is exponential: {n} items");
    assert!(lens.iter().all(|&l| l <= capacity), "an item exceeds the capacity");
    let full = (1usize << n) - 1;
    let sum: Vec<u64> = (0..=full)
        .map(|m| (0..n).filter(|i| m >> i & 1 == 1).map(|i| u64::from(lens[i])).sum())
        .collect();
    let mut dp = vec![usize::MAX; full + 1];
    dp[0] = 0;
    for m in 1..=full {
        let low = m & m.wrapping_neg();
        let mut s = m;
        while s > 0 {
            if s & low != 0 && sum[s] <= u64::from(capacity) && dp[m ^ s] != usize::MAX {
                dp[m] = dp[m].min(dp[m ^ s] + 1);
            }
            s = (s - 1) & m;
        }
    }
    dp[full]
}

/// The PACKER invariant for any packer: runs a fresh packer from `make` twice over `dataset`
/// and checks conservation, capacity, determinism, and the claimed first-fit property and
/// OPT bound; returns the efficiency report.
///
/// ```text
/// multiset(ids pushed) = multiset(ids emitted) ⊎ multiset(ids dropped)     (after finish)
/// every pack: Σ padded ≤ C per branch;  pending() = 0 after finish;  two runs, same packs
/// first-fit-like: any two packs of one call exceed C together
/// bound: FF/BF ≤ ⌊1.7·OPT⌋, FFD ≤ 11/9·OPT + 6/9  (calls of ≤ 12 single items, OPT exact)
/// ```
///
/// # Errors
/// The first [`Violation`], located by epoch, pack and example id.
///
/// # Example
/// ```
/// use properties::harness::{PackerClaims, PackerPlan, check_packer};
/// use thd::pack::{BinPackingOptions, Example, Packer, PackerSpec};
/// let spec = PackerSpec::FirstFitDecreasing { capacity: 10, options: BinPackingOptions::default() };
/// let data: Vec<Example> = [5, 5, 4, 4, 2].iter().enumerate().map(|(i, &l)| Example::single(i as u64, l)).collect();
/// let plan = PackerPlan { batch_size: 2, epochs: 2, seed: 7, shuffle: true };
/// let report = check_packer(&|| spec.build().unwrap(), &data, &plan, &PackerClaims::of_spec(&spec))?;
/// assert_eq!((report.packs, report.lower_bound), (4, 4));
/// # Ok::<(), properties::Violation>(())
/// ```
pub fn check_packer(
    make: &dyn Fn() -> Box<dyn Packer>,
    dataset: &[Example],
    plan: &PackerPlan,
    claims: &PackerClaims,
) -> Result<PackerReport, Violation> {
    let mut packer = make();
    let name = packer.name().to_string();
    let capacity = packer.capacity();
    let fail = |e: String| {
        Violation::for_property_tests(Invariant::Packer, "the packer accepts every valid input")
            .at(Location::default().context(&name))
            .expected("packs")
            .got(format!("an error: {e}"))
    };
    let run = run_packer(packer.as_mut(), dataset, plan).map_err(fail)?;
    let within = |v: Violation| v.within(&name);
    check_conservation(&run, capacity).map_err(within)?;
    let again = run_packer(make().as_mut(), dataset, plan).map_err(fail)?;
    check_deterministic(&run.packs, &again.packs).map_err(within)?;
    if claims.first_fit_like || claims.bound.is_some() {
        let mut calls: Vec<Vec<&EmittedPack>> = Vec::new();
        for p in &run.packs {
            match calls.last_mut() {
                Some(c) if c[0].call == p.call => c.push(p),
                _ => calls.push(vec![p]),
            }
        }
        for group in calls {
            let packs: Vec<thd::pack::Pack> = group.iter().map(|e| e.pack.clone()).collect();
            let ctx = format!("{name}, epoch {}, call {}", group[0].epoch, group[0].call);
            if claims.first_fit_like {
                check_pairwise_full(&packs, capacity).map_err(|v| v.within(&ctx))?;
            }
            let items: Vec<&thd::pack::PackItem> = packs.iter().flat_map(|p| &p.items).collect();
            if let Some(bound) = claims.bound
                && items.len() <= 12
                && items.iter().all(|i| !i.lens.is_pair())
            {
                let lens: Vec<u32> = items.iter().map(|i| i.padded.branches()[0] as u32).collect();
                check_quality(bound, packs.len(), optimal_bins(&lens, capacity))
                    .map_err(|v| v.within(format!("{ctx}, lengths {lens:?}, C = {capacity}")))?;
            }
        }
    }
    let real = run.packs.iter().fold([0u64; 2], |a, e| {
        let r = e.pack.real();
        [a[0] + r[0], a[1] + r[1]]
    });
    let cap = u64::from(capacity);
    let lower_bound = real.iter().map(|t| t.div_ceil(cap)).max().unwrap_or(0);
    let packs = run.packs.len() as u64;
    let rows: u64 = run.packs.iter().map(|e| if e.pack.is_pair() { 2 } else { 1 }).sum();
    Ok(PackerReport {
        name,
        packs,
        lower_bound,
        efficiency: if packs == 0 { 1.0 } else { lower_bound as f64 / packs as f64 },
        fill: if rows == 0 { 1.0 } else { (real[0] + real[1]) as f64 / (rows * cap) as f64 },
        dropped: run.dropped.len(),
    })
}
