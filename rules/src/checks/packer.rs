//! PACKER: what a packer emitted, against what it was given.

use std::collections::BTreeMap;

use thd::pack::{Example, Pack};

use crate::checks::input::{DeclaredDrops, EmittedPack, PackerInput, PackerPoint, PackerRun};
use crate::checks::proof::Proof;
use crate::checks::rule::{Fuzz, rule};
use crate::{Checked, Invariant, Location, Violation};

rule! {
    /// Dealt packs balance over the data-parallel ranks. [`crate::checks::check_dealing`].
    /// Judged first: a rank short of packs explains whatever else is off.
    PACKER_DEALING = "packer-dealing", Packer, "every data-parallel rank gets the same number of packs",
        fuzz: Fuzz::Packer(Some(judge_dealing)),
        proof: Proof::Adapter("padding_batch_packer");
    /// Packers conserve their input. [`crate::checks::check_conservation`] (with
    /// `packer-capacity`), [`crate::checks::check_emitted_so_far`] after each call of a
    /// session, [`crate::checks::check_refusal`] on a refusal.
    PACKER_CONSERVATION = "packer-conservation", Packer, "every example is emitted or reported dropped, exactly once",
        fuzz: Fuzz::Packer(Some(judge_conservation)),
        proof: Proof::Zoo("DropsOverflow");
    /// Packs fit. Reported by `packer-conservation`'s functions, which account for every pack.
    PACKER_CAPACITY = "packer-capacity", Packer, "every pack is non-empty and respects the capacity (and the packer's maximum sequences per pack)",
        fuzz: Fuzz::Packer(None),
        proof: Proof::Zoo("KeepsOverLongExample");
    /// A packer drops only what its stack declares it may. [`crate::checks::check_drops`].
    PACKER_DROPS = "packer-drops", Packer, "an example is dropped only as declared: longer than the capacity (over-length), or in the trailing packs cut to a multiple of the DP size (dp-remainder)",
        fuzz: Fuzz::Packer(Some(judge_drops)),
        proof: Proof::Test("cli/tests/fuzz_minimal.rs::drops_are_accepted_only_as_declared");
    /// A partitioner asked for k packs gives them. [`crate::checks::check_min_packs`].
    PACKER_MIN_PACKS = "packer-min-packs", Packer, "asked for at least k packs (k partitions, a minimum number of batches), the answer holds min(k, examples emitted) packs or more",
        fuzz: Fuzz::Packer(Some(judge_min_packs)),
        proof: Proof::Adapter("balanced_packer");
    /// First-fit-like packers leave no two packs that fit together. [`crate::checks::check_pairwise_full`].
    PACKER_FIRST_FIT = "packer-first-fit", Packer, "any two packs together exceed the capacity",
        fuzz: Fuzz::Packer(Some(judge_first_fit)),
        proof: Proof::Zoo("StarvedBestFit");
    /// A packing strategy stays within its proven bound of the optimum (the property tests of
    /// `thd`'s packers, on calls of at most 12 single sequences). [`crate::checks::check_quality`].
    PACKER_QUALITY = "packer-quality", Packer, "bins within the strategy's bound of the optimum (FF/BF <= floor(1.7·OPT), FFD <= 11/9·OPT + 6/9)",
        proof: Proof::Test("rules/src/checks/proofs.rs::packer_quality_strict_fit_test");
    /// Same input, same packs. [`crate::checks::check_deterministic`].
    PACKER_DETERMINISTIC = "packer-deterministic", Packer, "same input and options give the same packs",
        fuzz: Fuzz::Packer(Some(judge_deterministic)),
        proof: Proof::Zoo("UnseededShuffle");
}

/// `packer-dealing`: with a DP size, at a one-shot answer and at the end of every epoch.
pub(crate) fn judge_dealing(i: &PackerInput<'_>) -> Option<Checked> {
    if !matches!(i.point, PackerPoint::Once | PackerPoint::EpochEnd) {
        return None;
    }
    i.dp_size.map(|r| check_dealing(i.ranks, r))
}

/// `packer-conservation` (and `packer-capacity`): the whole run at a one-shot answer and at
/// `finish`, the packs so far after each call, and a refusal.
pub(crate) fn judge_conservation(i: &PackerInput<'_>) -> Option<Checked> {
    match i.point {
        PackerPoint::Once | PackerPoint::Finish => Some(check_conservation(i.run, i.capacity)),
        PackerPoint::Call => Some(check_emitted_so_far(i.run, i.capacity)),
        PackerPoint::Refused => Some(check_refusal(i.run, i.capacity, i.declared)),
        PackerPoint::EpochEnd | PackerPoint::Replay => None,
    }
}

/// `packer-drops`: once everything pushed is accounted for.
pub(crate) fn judge_drops(i: &PackerInput<'_>) -> Option<Checked> {
    matches!(i.point, PackerPoint::Once | PackerPoint::Finish)
        .then(|| check_drops(i.run, i.capacity, i.declared))
}

/// `packer-min-packs`: a one-shot answer to a request that asks for a minimum.
pub(crate) fn judge_min_packs(i: &PackerInput<'_>) -> Option<Checked> {
    if i.point != PackerPoint::Once {
        return None;
    }
    i.min_packs.map(|k| check_min_packs(i.packs, k))
}

/// `packer-first-fit`: among one answer's packs, when the packer is held to first fit.
pub(crate) fn judge_first_fit(i: &PackerInput<'_>) -> Option<Checked> {
    (i.first_fit && matches!(i.point, PackerPoint::Once | PackerPoint::Call))
        .then(|| check_pairwise_full(i.packs, i.capacity))
}

/// `packer-deterministic`: the replay against the first run.
pub(crate) fn judge_deterministic(i: &PackerInput<'_>) -> Option<Checked> {
    if i.point != PackerPoint::Replay {
        return None;
    }
    i.replay.map(|(a, b)| check_deterministic(a, b))
}

fn v(rule: &str) -> Violation {
    Violation::new(Invariant::Packer, rule).id(PACKER_CONSERVATION.id)
}

/// PACKER, conservation and capacity: nothing lost, nothing duplicated, every pack fits.
///
/// ```text
/// after finish: pending = 0
/// every pack non-empty; load_b = Σ padded_b ≤ C on each branch b; padded ≥ lens per item
/// ∀ id: #pieces at offset 0 (emitted or dropped) = #times pushed
///       Σ tokens of its pieces (emitted or dropped) = Σ tokens pushed, per branch
/// ```
///
/// # Errors
/// The first rule broken, naming the example id and the pack.
///
/// # Example
/// ```
/// use rules::checks::{EmittedPack, PackerRun, check_conservation};
/// use thd::pack::{Example, Pack};
/// let run = PackerRun {
///     pushed: vec![Example::single(0, 6), Example::single(1, 6)],
///     packs: vec![EmittedPack { epoch: 0, call: 0, pack: Pack::new(vec![Example::single(0, 6).item()]) }],
///     ..Default::default()
/// };
/// let v = check_conservation(&run, 10).unwrap_err(); // example 1 was carried and then lost
/// assert_eq!(v.at.example, Some(1));
/// ```
pub fn check_conservation(run: &PackerRun, capacity: u32) -> Checked {
    if run.pending_after_finish != 0 {
        return Err(v("nothing stays pending after finish")
            .expected(0)
            .got(run.pending_after_finish));
    }
    check_accounting(run, capacity, true)
}

/// PACKER, mid-stream: the packs emitted so far respect the capacity and hold no example more
/// often (or with more tokens) than it was pushed; examples still pending are not yet owed.
///
/// # Errors
/// The first rule broken.
///
/// # Example
/// ```
/// use rules::checks::{EmittedPack, PackerRun, check_emitted_so_far};
/// use thd::pack::{Example, Pack};
/// let pack = |id| EmittedPack { epoch: 0, call: 0, pack: Pack::new(vec![Example::single(id, 3).item()]) };
/// let mut run = PackerRun { pushed: vec![Example::single(0, 3), Example::single(1, 3)], ..Default::default() };
/// run.packs = vec![pack(0)];
/// assert!(check_emitted_so_far(&run, 10).is_ok()); // example 1 is still pending
/// run.packs = vec![pack(0), pack(0)];
/// assert!(check_emitted_so_far(&run, 10).is_err()); // example 0 emitted twice
/// ```
pub fn check_emitted_so_far(run: &PackerRun, capacity: u32) -> Checked {
    check_accounting(run, capacity, false)
}

/// Pack rules, then per-id accounting: exact when `complete`, at most what was pushed otherwise.
fn check_accounting(run: &PackerRun, capacity: u32, complete: bool) -> Checked {
    let cap = u64::from(capacity);
    // Padding packs are indexed after the real ones, as the packer listed them.
    for (index, e) in run.packs.iter().chain(&run.padding).enumerate() {
        let at = Location::default().epoch(e.epoch).pack(index);
        if e.pack.is_empty() {
            return Err(v("a pack is never empty")
                .id(PACKER_CAPACITY.id)
                .at(at)
                .expected(">= 1 item")
                .got("0 items"));
        }
        for item in &e.pack.items {
            let (l, p) = (item.lens.branches(), item.padded.branches());
            if p[0] < l[0] || p[1] < l[1] {
                return Err(v("an item's storage is at least its real length")
                    .id(PACKER_CAPACITY.id)
                    .at(at.clone().example(item.id))
                    .expected(format!(">= {l:?}"))
                    .got(format!("{p:?}")));
            }
        }
        if let Some(k) = run.max_items.filter(|&k| e.pack.len() > k) {
            return Err(v("every pack holds at most the packer's maximum number of sequences")
                .id(PACKER_CAPACITY.id)
                .at(at)
                .expected(format!("<= {k} items"))
                .got(format!(
                    "{} items: ids {:?}",
                    e.pack.len(),
                    e.pack.ids().collect::<Vec<_>>()
                )));
        }
        let load = e.pack.load();
        // A declared over-long example alone in its pack is over the capacity on purpose.
        let alone_oversize = match e.pack.items.as_slice() {
            [item] => {
                run.oversize.contains(&item.id)
                    && item.lens.branches().iter().any(|&l| run.padded(l) > cap)
            }
            _ => false,
        };
        if let Some(b) = (0..2).find(|&b| load[b] > cap).filter(|_| !alone_oversize) {
            return Err(v("every pack respects the capacity")
                .id(PACKER_CAPACITY.id)
                .at(at)
                .expected(format!("<= {capacity} tokens on branch {b}"))
                .got(format!(
                    "{} tokens: {:?}",
                    load[b],
                    e.pack.items.iter().map(|i| (i.id, i.padded.branches()[b])).collect::<Vec<_>>()
                )));
        }
    }
    // A declaration of `oversize` is itself checked: the example is longer than the capacity
    // (one that shares its pack already breaks the capacity above).
    for &id in &run.oversize {
        let longest = run.pushed.iter().filter(|e| e.id == id).map(|e| run.padded_longest(e)).max();
        if longest.is_some_and(|l| l <= cap) {
            return Err(v("only an example longer than the capacity is oversize")
                .id(PACKER_CAPACITY.id)
                .at(Location::default().example(id))
                .expected(format!("a length > {capacity} for an example declared oversize"))
                .got(format!("{} tokens", longest.unwrap_or(0))));
        }
    }
    // Per id: (times pushed, tokens per branch) in, (heads, tokens per branch) out.
    let mut ins: BTreeMap<u64, (u64, [u64; 2])> = BTreeMap::new();
    for e in &run.pushed {
        let slot = ins.entry(e.id).or_default();
        let b = e.lens.branches();
        *slot = (slot.0 + 1, [slot.1[0] + b[0], slot.1[1] + b[1]]);
    }
    let mut outs: BTreeMap<u64, (u64, [u64; 2], Option<usize>)> = BTreeMap::new();
    let pieces = run
        .packs
        .iter()
        .enumerate()
        .flat_map(|(k, e)| e.pack.items.iter().map(move |i| (Some(k), i)))
        .chain(run.dropped.iter().map(|d| (None, &d.item)));
    for (pack, item) in pieces {
        let slot = outs.entry(item.id).or_default();
        let b = item.lens.branches();
        let head = u64::from(item.offset == 0);
        *slot = (slot.0 + head, [slot.1[0] + b[0], slot.1[1] + b[1]], slot.2.or(pack));
    }
    let lost_by_design = if complete && (run.drop_last || run.dp_remainder_lost.is_some()) {
        lost_by_design(run, &outs, cap)
    } else {
        Vec::new()
    };
    for (&id, &(n, tokens)) in &ins {
        if lost_by_design.contains(&id) {
            continue;
        }
        let (heads, got, pack) = outs.get(&id).copied().unwrap_or_default();
        let mut at = Location::default().example(id);
        if let Some(p) = pack {
            at = at.pack(p);
        }
        if heads > n || (complete && heads != n) {
            let what = if heads < n {
                "lost (neither emitted nor reported dropped)"
            } else {
                "duplicated"
            };
            let mut err = v("every pushed example is emitted or reported dropped, exactly once")
                .at(at)
                .expected(format!("{n} time(s)"))
                .got(format!("{heads} time(s): {what}"));
            if run.drop_last && heads < n {
                err = err.note(
                    "--drops drop-last accepts the examples an epoch loses only when they fit \
                     together in one pack",
                );
            } else if let Some(r) = run.dp_remainder_lost.filter(|_| heads < n) {
                err = err.note(format!(
                    "--drops dp-remainder accepts the examples an epoch loses only when they \
                     fill fewer packs than the {r} ranks"
                ));
            }
            return Err(err);
        }
        if (0..2).any(|b| got[b] > tokens[b]) || (complete && got != tokens) {
            return Err(v("every token of every example is emitted or reported dropped")
                .at(at)
                .expected(format!("{tokens:?} tokens per branch"))
                .got(format!("{got:?}")));
        }
    }
    if let Some((&id, _)) = outs.iter().find(|(id, _)| !ins.contains_key(id)) {
        return Err(v("a packer emits only ids it was given")
            .at(Location::default().example(id))
            .expected("no such id")
            .got("emitted"));
    }
    if let Some(item) =
        run.padding.iter().flat_map(|e| &e.pack.items).find(|i| !ins.contains_key(&i.id))
    {
        return Err(v("a padding pack repeats examples it was given")
            .at(Location::default().example(item.id))
            .expected("an id that was pushed")
            .got("a padding pack holds an id never pushed"));
    }
    if complete {
        check_pieces_tile(run, &ins)?;
    }
    Ok(())
}

/// The ids lost by design: of each epoch, the examples pushed once that no pack or drop holds
/// any piece of, when together they fit one pack (`drop_last`: padded, on every branch, at most
/// `max_items`) or fill fewer packs than there are ranks (`dp_remainder_lost`); an epoch that
/// loses more keeps its losses, for conservation to report. Under `drop_last` the examples of
/// the epoch reported dropped that fit the capacity count in that one pack too: reporting a
/// drop-last loss is never judged worse than losing it silently ([`check_drops`] accepts them
/// on the same terms).
fn lost_by_design(
    run: &PackerRun,
    outs: &BTreeMap<u64, (u64, [u64; 2], Option<usize>)>,
    cap: u64,
) -> Vec<u64> {
    let mut out = Vec::new();
    for (lost, reported) in drop_last_epochs(run, |id| outs.contains_key(&id), cap).values() {
        let all: Vec<&Example> = lost.iter().chain(reported).copied().collect();
        let one_pack = fits_one_pack(run, &all, cap);
        let load = |b: usize| lost.iter().map(|e| run.padded(e.lens.branches()[b])).sum::<u64>();
        let packs = (0..2).map(|b| load(b).div_ceil(cap.max(1))).max().unwrap_or(0);
        let remainder = run.dp_remainder_lost.is_some_and(|r| packs < r);
        if (run.drop_last && one_pack) || remainder {
            out.extend(lost.iter().map(|e| e.id));
        }
    }
    out
}

/// Per epoch, the examples pushed once that nothing holds (`held(id)` false: lost unreported)
/// and those reported dropped that fit the capacity: what a `drop_last` loses of that epoch,
/// silently or reported.
fn drop_last_epochs(
    run: &PackerRun,
    held: impl Fn(u64) -> bool,
    cap: u64,
) -> BTreeMap<usize, (Vec<&Example>, Vec<&Example>)> {
    let mut times: BTreeMap<u64, usize> = BTreeMap::new();
    for e in &run.pushed {
        *times.entry(e.id).or_default() += 1;
    }
    let reported: std::collections::BTreeSet<u64> = run.dropped.iter().map(|d| d.item.id).collect();
    let mut by_epoch: BTreeMap<usize, (Vec<&Example>, Vec<&Example>)> = BTreeMap::new();
    for (k, e) in run.pushed.iter().enumerate() {
        if times.get(&e.id) != Some(&1) {
            continue;
        }
        let epoch = run.pushed_epochs.get(k).copied().unwrap_or(0);
        if reported.contains(&e.id) {
            if run.padded_longest(e) <= cap {
                by_epoch.entry(epoch).or_default().1.push(e);
            }
        } else if !held(e.id) {
            by_epoch.entry(epoch).or_default().0.push(e);
        }
    }
    by_epoch
}

/// Whether `examples` fit one pack together: padded, on every branch, at most `max_items`.
fn fits_one_pack(run: &PackerRun, examples: &[&Example], cap: u64) -> bool {
    let load = |b: usize| examples.iter().map(|e| run.padded(e.lens.branches()[b])).sum::<u64>();
    (0..2).all(|b| load(b) <= cap) && run.max_items.is_none_or(|k| examples.len() <= k)
}

/// PACKER, refusal: a packer may refuse a request (bionemo's `TokenPackingDataset` raises
/// `ValueError` on an example longer than its budget) only when the request holds an example
/// it cannot fit (a padded length over the capacity on some branch) and the stack may lose
/// such an example (over-length drops declared, the default). Refusing a request it could pack
/// loses every example in it; under `--drops none` every example must be packed (an over-long
/// one alone, as `oversize`), so a refusal is a loss too.
///
/// # Errors
/// The request could be packed, or it holds an over-long example the stack must pack.
///
/// # Example
/// ```
/// use rules::checks::{DeclaredDrops, PackerRun, check_refusal};
/// use thd::pack::Example;
/// let run = PackerRun { pushed: vec![Example::single(0, 6), Example::single(1, 12)], ..Default::default() };
/// let any = DeclaredDrops::default();
/// assert!(check_refusal(&run, 10, any).is_ok()); // example 1 cannot fit
/// assert!(check_refusal(&run, 12, any).is_err()); // both fit: nothing to refuse
/// let none = DeclaredDrops { over_length: false, dp_remainder: None };
/// assert!(check_refusal(&run, 10, none).is_err()); // --drops none: example 1 must be packed
/// ```
pub fn check_refusal(run: &PackerRun, capacity: u32, declared: DeclaredDrops) -> Checked {
    let cap = u64::from(capacity);
    let longest = run.pushed.iter().map(|e| run.padded_longest(e)).max().unwrap_or(0);
    if longest > cap && declared.over_length {
        return Ok(());
    }
    if longest > cap {
        return Err(v(
            "a packer refuses only a request whose over-long examples its stack may lose",
        )
        .expected(format!(
            "packs of the {} example(s), the one(s) over {capacity} tokens alone \
                 (`oversize`): the stack declares no over-length drop (--drops)",
            run.pushed.len()
        ))
        .got(format!("a refusal (the longest example takes {longest} tokens)")));
    }
    Err(v("a packer refuses only a request it cannot pack (an example longer than the capacity)")
        .expected(format!(
            "packs of the {} example(s), all of at most {capacity} tokens",
            run.pushed.len()
        ))
        .got(format!("a refusal (the longest example takes {longest} tokens)")))
}

/// PACKER, drops: an example reported dropped is one the declaration names. Over-length: its
/// padded length exceeds the capacity. DP remainder: the dropped examples that fit would fill
/// fewer packs than there are ranks (`⌈Σ padded / C⌉ < R`, per branch): what cutting the packs
/// to a multiple of `R` can drop, and no more.
///
/// # Errors
/// The first dropped example no declaration covers.
///
/// # Example
/// ```
/// use rules::checks::{DeclaredDrops, PackerRun, check_drops};
/// use thd::pack::{DropReason, Dropped, Example};
/// let drop = |id, len| Dropped { item: Example::single(id, len).item(), reason: DropReason::OverLength };
/// let run = PackerRun {
///     pushed: vec![Example::single(0, 6), Example::single(1, 12)],
///     dropped: vec![drop(1, 12)],
///     ..Default::default()
/// };
/// assert!(check_drops(&run, 10, DeclaredDrops::default()).is_ok()); // 12 > 10
/// let none = DeclaredDrops { over_length: false, dp_remainder: None };
/// assert_eq!(check_drops(&run, 10, none).unwrap_err().id, "packer-drops");
/// let fits = PackerRun { dropped: vec![drop(0, 6)], ..run };
/// assert!(check_drops(&fits, 10, DeclaredDrops::default()).is_err()); // 6 fits: not over-length
/// ```
pub fn check_drops(run: &PackerRun, capacity: u32, declared: DeclaredDrops) -> Checked {
    let cap = u64::from(capacity);
    let longest = |id: u64| {
        run.pushed.iter().filter(|e| e.id == id).map(|e| run.padded_longest(e)).max().unwrap_or(0)
    };
    // Under `drop_last`, the fitting drops of an epoch whose whole loss (these and the ones
    // lost silently) fits one pack: what conservation accepts unreported.
    let drop_last: Vec<u64> = if run.drop_last {
        let held = |id: u64| run.packs.iter().any(|e| e.pack.items.iter().any(|i| i.id == id));
        drop_last_epochs(run, held, cap)
            .values()
            .filter(|(lost, reported)| {
                let all: Vec<&Example> = lost.iter().chain(reported).copied().collect();
                fits_one_pack(run, &all, cap)
            })
            .flat_map(|(_, reported)| reported.iter().map(|e| e.id))
            .collect()
    } else {
        Vec::new()
    };
    let mut fitting = [0u64; 2];
    let mut first_fitting = None;
    for d in &run.dropped {
        let l = longest(d.item.id);
        if (l > cap && declared.over_length) || drop_last.contains(&d.item.id) {
            continue;
        }
        if declared.dp_remainder.is_none() {
            let why = if l > cap {
                "an over-length example dropped, and the stack declares no drops".to_owned()
            } else {
                format!("an example of {l} tokens that fits the capacity of {capacity}")
            };
            return Err(v("an example is dropped only as the stack declares")
                .id(PACKER_DROPS.id)
                .at(Location::default().example(d.item.id))
                .expected(if declared.over_length && run.drop_last {
                    format!(
                        "only examples longer than {capacity} tokens dropped (--drops \
                         over-length), or an epoch's last, incomplete pack (--drops drop-last: \
                         what an epoch loses fits one pack)"
                    )
                } else if declared.over_length {
                    format!(
                        "only examples longer than {capacity} tokens dropped (--drops over-length)"
                    )
                } else {
                    "no example dropped (--drops none)".to_owned()
                })
                .got(format!("dropped: {why}")));
        }
        first_fitting.get_or_insert(d.item.id);
        for (b, n) in d.item.lens.branches().into_iter().enumerate() {
            fitting[b] += run.padded(n);
        }
    }
    if let (Some(r), Some(id)) = (declared.dp_remainder, first_fitting) {
        let packs = fitting.iter().map(|t| t.div_ceil(cap.max(1))).max().unwrap_or(0);
        if packs >= r {
            return Err(v("only the trailing packs beyond a multiple of the DP size are dropped")
                .id(PACKER_DROPS.id)
                .at(Location::default().example(id))
                .expected(format!(
                    "dropped examples that fill fewer than {r} packs of {capacity} tokens                      (--drops dp-remainder)"
                ))
                .got(format!(
                    "{} tokens dropped (branches {fitting:?}): at least {packs} packs",
                    fitting[0].max(fitting[1])
                )));
        }
    }
    Ok(())
}

/// PACKER, a minimum number of packs: a packer asked for at least `k` packs (a balanced
/// partitioner's `k_partitions`, open-instruct's `min_num_batches`) answers at least
/// `min(k, examples)` non-empty packs, `examples` the distinct examples it emitted (fewer cannot
/// fill `k`). Empty packs are `packer-capacity` violations of their own.
///
/// # Errors
/// Fewer packs than that.
///
/// # Example
/// ```
/// use rules::checks::check_min_packs;
/// use thd::pack::{Example, Pack};
/// let pack = |ids: &[u64]| Pack::new(ids.iter().map(|&i| Example::single(i, 1).item()).collect());
/// assert!(check_min_packs(&[pack(&[0]), pack(&[1, 2])], 2).is_ok());
/// assert!(check_min_packs(&[pack(&[0])], 4).is_ok()); // one example fills one pack
/// assert_eq!(check_min_packs(&[pack(&[0, 1])], 2).unwrap_err().id, "packer-min-packs");
/// ```
pub fn check_min_packs(packs: &[Pack], k: u64) -> Checked {
    let examples: std::collections::BTreeSet<u64> =
        packs.iter().flat_map(|p| p.items.iter().map(|i| i.id)).collect();
    let want = k.min(examples.len() as u64);
    let got = packs.iter().filter(|p| !p.is_empty()).count() as u64;
    if got < want {
        return Err(v("asked for at least k packs, the answer holds min(k, examples) of them")
            .id(PACKER_MIN_PACKS.id)
            .expected(format!(
                "at least {want} packs (min_packs {k}, {} examples emitted)",
                examples.len()
            ))
            .got(format!("{got} packs")));
    }
    Ok(())
}

/// PACKER, dealing: packs dealt to `dp_size` data-parallel ranks give every rank the same
/// number of packs (open-instruct's loader pads with repeated batches so that they do), and
/// name only ranks that exist. `ranks[k]` is the rank of the k-th pack dealt so far; checked
/// where the packer promises balance (the end of an answer, of an epoch).
///
/// # Errors
/// A rank out of range, or the first rank with another count than rank 0's.
///
/// # Example
/// ```
/// use rules::checks::check_dealing;
/// assert!(check_dealing(&[0, 1, 0, 1], 2).is_ok());
/// let e = check_dealing(&[0, 1, 0], 2).unwrap_err();
/// assert_eq!(e.id, "packer-dealing");
/// ```
pub fn check_dealing(ranks: &[u64], dp_size: u64) -> Checked {
    if let Some((k, &r)) = ranks.iter().enumerate().find(|&(_, &r)| r >= dp_size) {
        return Err(v("every pack goes to a data-parallel rank that exists")
            .id(PACKER_DEALING.id)
            .at(Location::default().pack(k))
            .expected(format!("a rank in 0..{dp_size}"))
            .got(format!("rank {r}")));
    }
    let mut counts = vec![0usize; usize::try_from(dp_size).unwrap_or(0)];
    for &r in ranks {
        if let Some(c) = usize::try_from(r).ok().and_then(|r| counts.get_mut(r)) {
            *c += 1;
        }
    }
    if let Some((r, &c)) = counts.iter().enumerate().find(|&(_, &c)| c != counts[0]) {
        return Err(v("every data-parallel rank gets the same number of packs")
            .id(PACKER_DEALING.id)
            .expected(format!("{} pack(s) on each of the {dp_size} ranks, as on rank 0", counts[0]))
            .got(format!("{c} on rank {r} (packs per rank: {counts:?})")));
    }
    Ok(())
}

/// The pieces of an example split across packs (bionemo's `split_samples`) tile it: sorted by
/// offset they start at 0 and each starts where the one before ends, so the right token count
/// cannot hide a gap and an overlap. Examples pushed more than once are left to the counts.
fn check_pieces_tile(run: &PackerRun, ins: &BTreeMap<u64, (u64, [u64; 2])>) -> Checked {
    let mut pieces: BTreeMap<u64, Vec<(u32, u64)>> = BTreeMap::new();
    let all =
        run.packs.iter().flat_map(|e| &e.pack.items).chain(run.dropped.iter().map(|d| &d.item));
    for item in all {
        pieces.entry(item.id).or_default().push((item.offset, item.lens.branches()[0]));
    }
    for (id, mut ps) in pieces {
        if ps.len() < 2 || ins.get(&id).is_none_or(|&(n, _)| n != 1) {
            continue;
        }
        ps.sort_unstable();
        let mut next = 0u64;
        for &(offset, len) in &ps {
            if u64::from(offset) != next {
                return Err(v("the pieces of a split example tile it")
                    .at(Location::default().example(id))
                    .expected(format!("a piece starting at token {next}"))
                    .got(format!(
                        "pieces (offset, tokens) {ps:?}: {}",
                        if u64::from(offset) > next { "a gap" } else { "an overlap" }
                    )));
            }
            next += len;
        }
    }
    Ok(())
}

/// PACKER, first-fit quality: among the packs one call emitted, any two together exceed the
/// capacity on some branch (otherwise the later pack's first item would have fit the earlier
/// pack). Holds for first fit, best fit and first-fit decreasing over one instance.
///
/// # Errors
/// The first pair of packs that would fit together.
///
/// # Example
/// ```
/// use rules::checks::check_pairwise_full;
/// use thd::pack::{Example, Pack};
/// let p = |id, len| Pack::new(vec![Example::single(id, len).item()]);
/// assert!(check_pairwise_full(&[p(0, 6), p(1, 5)], 10).is_ok());
/// assert!(check_pairwise_full(&[p(0, 6), p(1, 4)], 10).is_err());
/// ```
pub fn check_pairwise_full(packs: &[Pack], capacity: u32) -> Checked {
    let cap = u64::from(capacity);
    let loads: Vec<[u64; 2]> = packs.iter().map(Pack::load).collect();
    for i in 0..loads.len() {
        for j in i + 1..loads.len() {
            if (0..2).all(|b| loads[i][b] + loads[j][b] <= cap) {
                return Err(v(
                    "any two packs of a first-fit-like packer together exceed the capacity",
                )
                .id(PACKER_FIRST_FIT.id)
                .at(Location::default().pack(j))
                .expected(format!("load(pack {i}) + load(pack {j}) > {capacity}"))
                .got(format!("{:?} + {:?}", loads[i], loads[j]))
                .note(format!(
                    "pack {j} starts with example {}, which fits in pack {i}",
                    packs[j].items.first().map_or(0, |x| x.id)
                )));
            }
        }
    }
    Ok(())
}

/// The bin-packing quality bound a strategy claims on small instances.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QualityBound {
    /// First fit / best fit: `bins ≤ ⌊1.7·OPT⌋` (Dósa & Sgall 2013/2014).
    FirstFit,
    /// First-fit decreasing: `bins ≤ 11/9·OPT + 6/9` (Dósa 2007, tight).
    FirstFitDecreasing,
}

/// PACKER, quality on a small instance with a known optimum.
///
/// # Errors
/// More bins than the bound allows.
///
/// # Example
/// ```
/// use rules::checks::{QualityBound, check_quality};
/// assert!(check_quality(QualityBound::FirstFitDecreasing, 3, 2).is_ok());
/// assert!(check_quality(QualityBound::FirstFitDecreasing, 4, 2).is_err());
/// ```
pub fn check_quality(bound: QualityBound, bins: usize, opt: usize) -> Checked {
    let (ok, text) = match bound {
        QualityBound::FirstFit => {
            (10 * bins <= 17 * opt, format!("<= ⌊1.7·{opt}⌋ = {}", 17 * opt / 10))
        }
        QualityBound::FirstFitDecreasing => (
            9 * bins <= 11 * opt + 6,
            format!("<= 11/9·{opt} + 6/9 = {:.3}", (11 * opt + 6) as f64 / 9.0),
        ),
    };
    if ok {
        Ok(())
    } else {
        Err(v("bins within the strategy's bound of the optimum")
            .id(PACKER_QUALITY.id)
            .expected(text)
            .got(format!("{bins} bins (OPT = {opt})")))
    }
}

/// PACKER, determinism: two runs on the same input and options emit the same packs.
///
/// # Errors
/// The first pack that differs.
///
/// # Example
/// ```
/// use rules::checks::{EmittedPack, check_deterministic};
/// use thd::pack::{Example, Pack};
/// let a = vec![EmittedPack { epoch: 0, call: 0, pack: Pack::new(vec![Example::single(0, 1).item()]) }];
/// assert!(check_deterministic(&a, &a).is_ok());
/// ```
pub fn check_deterministic(a: &[EmittedPack], b: &[EmittedPack]) -> Checked {
    let ids = |p: &EmittedPack| p.pack.ids().collect::<Vec<_>>();
    for k in 0..a.len().max(b.len()) {
        let (x, y) = (a.get(k), b.get(k));
        if x != y {
            return Err(v("same input and options (and seed) give the same packs")
                .id(PACKER_DETERMINISTIC.id)
                .at(Location::default().pack(k))
                .expected(x.map_or("no pack".to_string(), |p| {
                    format!("ids {:?} (epoch {})", ids(p), p.epoch)
                }))
                .got(y.map_or("no pack".to_string(), |p| {
                    format!("ids {:?} (epoch {})", ids(p), p.epoch)
                })));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(packs: Vec<Vec<(u64, u32)>>, pushed: &[(u64, u32)], oversize: &[u64]) -> PackerRun {
        PackerRun {
            pushed: pushed.iter().map(|&(id, l)| Example::single(id, l)).collect(),
            packs: packs
                .into_iter()
                .map(|p| EmittedPack {
                    epoch: 0,
                    call: 0,
                    pack: Pack::new(
                        p.into_iter().map(|(id, l)| Example::single(id, l).item()).collect(),
                    ),
                })
                .collect(),
            oversize: oversize.to_vec(),
            ..Default::default()
        }
    }

    #[test]
    fn a_declared_over_long_example_alone_in_its_pack_is_allowed_and_nothing_else() {
        let pushed = [(0, 4), (1, 15)];
        // Example 1 (15 tokens) alone beyond a capacity of 10, declared: allowed.
        let ok = run(vec![vec![(0, 4)], vec![(1, 15)]], &pushed, &[1]);
        assert_eq!(check_conservation(&ok, 10), Ok(()));
        // Undeclared: the capacity rule, as before.
        let undeclared = run(vec![vec![(0, 4)], vec![(1, 15)]], &pushed, &[]);
        assert_eq!(check_conservation(&undeclared, 10).unwrap_err().id, "packer-capacity");
        // Declared, but sharing its pack.
        let shared = run(vec![vec![(0, 4), (1, 15)]], &pushed, &[1]);
        let e = check_conservation(&shared, 10).unwrap_err();
        assert_eq!(
            (e.id, e.rule.as_str()),
            ("packer-capacity", "every pack respects the capacity")
        );
        // Pieces (bionemo split_samples): two halves tile the example; an overlap of the
        // same total does not.
        let piece = |id: u64, offset: u32, len: u32| {
            let mut i = Example::single(id, len).item();
            i.offset = offset;
            i
        };
        let split = |a: (u32, u32), b: (u32, u32)| PackerRun {
            pushed: vec![Example::single(7, 8)],
            packs: [a, b]
                .into_iter()
                .map(|(o, l)| EmittedPack {
                    epoch: 0,
                    call: 0,
                    pack: Pack::new(vec![piece(7, o, l)]),
                })
                .collect(),
            ..Default::default()
        };
        assert_eq!(check_conservation(&split((0, 4), (4, 4)), 4), Ok(()));
        let e = check_conservation(&split((0, 4), (2, 4)), 4).unwrap_err();
        assert_eq!(e.rule, "the pieces of a split example tile it", "{e}");
        assert!(e.got.contains("an overlap"), "{e}");
        // A padding pack repeating example 0 is excluded from conservation; unmarked, it is a
        // duplicate; one holding an id never pushed is invented.
        let mut padded = run(vec![vec![(0, 4)], vec![(1, 15)]], &pushed, &[1]);
        padded.padding = run(vec![vec![(0, 4)]], &[], &[]).packs;
        assert_eq!(check_conservation(&padded, 10), Ok(()));
        let unmarked = run(vec![vec![(0, 4)], vec![(1, 15)], vec![(0, 4)]], &pushed, &[1]);
        assert!(check_conservation(&unmarked, 10).unwrap_err().got.contains("duplicated"));
        padded.padding = run(vec![vec![(9, 4)]], &[], &[]).packs;
        let e = check_conservation(&padded, 10).unwrap_err();
        assert_eq!(e.rule, "a padding pack repeats examples it was given", "{e}");
        // A limit on sequences per pack is a capacity too.
        let mut three = run(vec![vec![(0, 1), (1, 1), (2, 1)]], &[(0, 1), (1, 1), (2, 1)], &[]);
        assert_eq!(check_conservation(&three, 10), Ok(()));
        three.max_items = Some(2);
        let e = check_conservation(&three, 10).unwrap_err();
        assert_eq!((e.id, e.expected.as_str()), ("packer-capacity", "<= 2 items"), "{e}");
        // Padded to a multiple of 4, a 5-token example takes 8: over a capacity of 6 it cannot
        // fit, so it may be declared oversize, and a refusal of it is accepted.
        let mut padded5 = run(vec![vec![(1, 5)]], &[(1, 5)], &[1]);
        assert!(check_conservation(&padded5, 6).is_err(), "unpadded, 5 tokens fit 6");
        padded5.pad_to_multiple_of = Some(4);
        assert_eq!(check_conservation(&padded5, 6), Ok(()));
        assert_eq!(check_refusal(&padded5, 6, DeclaredDrops::default()), Ok(()));
        padded5.pad_to_multiple_of = None;
        assert!(check_refusal(&padded5, 6, DeclaredDrops::default()).is_err());
        // Declared, but it fits: a declaration that hides nothing is still wrong.
        let fits = run(vec![vec![(0, 4)], vec![(1, 15)]], &pushed, &[0, 1]);
        let e = check_conservation(&fits, 10).unwrap_err();
        assert_eq!(e.rule, "only an example longer than the capacity is oversize", "{e}");
    }
}
