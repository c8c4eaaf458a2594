//! PACKER zoo: packers that lose examples, overflow, starve or depend on hidden state.

use std::sync::atomic::{AtomicU64, Ordering};

use thd::pack::{
    BestFit, BinPackingOptions, Dropped, Example, FirstFit, Pack, Packer, count_within_token_budget,
};

/// The sequential token budget without the overflow carry: each batch's longest fitting prefix
/// becomes a pack and the rest is silently discarded (trl #482 "Num examples … decreased to 4862
/// from 109955"; open-instruct OI-B7 "Missing N indices" before the #1472 carry).
#[derive(Debug, Clone)]
pub struct DropsOverflow {
    /// Tokens per pack.
    pub capacity: u32,
}

impl Packer for DropsOverflow {
    fn name(&self) -> &str {
        "zoo::DropsOverflow"
    }

    fn capacity(&self) -> u32 {
        self.capacity
    }

    fn push(&mut self, batch: &[Example]) -> thd::Result<Vec<Pack>> {
        let k = count_within_token_budget(batch, Some(self.capacity));
        Ok((k > 0)
            .then(|| Pack::new(batch[..k].iter().map(|e| e.item()).collect()))
            .into_iter()
            .collect())
    }

    fn end_epoch(&mut self) -> thd::Result<Vec<Pack>> {
        Ok(Vec::new())
    }

    fn pending(&self) -> usize {
        0
    }

    fn dropped(&self) -> &[Dropped] {
        &[]
    }
}

/// open-instruct's budget rule as is: at least one example per pack, even one longer than the
/// budget, which then goes out alone in an over-capacity pack (`count_features_within_token_budget`
/// keeps a lone 400-token pair at budget 300; the static shape is silently broken).
#[derive(Debug, Clone, Default)]
pub struct KeepsOverLongExample {
    /// Tokens per pack.
    pub capacity: u32,
    carry: Vec<Example>,
}

impl KeepsOverLongExample {
    /// A packer with budget `capacity`.
    pub fn new(capacity: u32) -> Self {
        Self { capacity, carry: Vec::new() }
    }
}

impl Packer for KeepsOverLongExample {
    fn name(&self) -> &str {
        "zoo::KeepsOverLongExample"
    }

    fn capacity(&self) -> u32 {
        self.capacity
    }

    fn push(&mut self, batch: &[Example]) -> thd::Result<Vec<Pack>> {
        self.carry.extend_from_slice(batch);
        if self.carry.is_empty() {
            return Ok(Vec::new());
        }
        let k = count_within_token_budget(&self.carry, Some(self.capacity));
        Ok(vec![Pack::new(self.carry.drain(..k).map(Example::item).collect())])
    }

    fn end_epoch(&mut self) -> thd::Result<Vec<Pack>> {
        let mut out = Vec::new();
        while !self.carry.is_empty() {
            out.extend(self.push(&[])?);
        }
        Ok(out)
    }

    fn pending(&self) -> usize {
        self.carry.len()
    }

    fn dropped(&self) -> &[Dropped] {
        &[]
    }
}

/// Best fit starved of documents: each pushed batch is packed on its own, so bins are never
/// topped up across batches, yet the packs are released together at the end of the epoch as
/// if they were one instance (sandyresearch/parcae #8: "~67% of every batch is padding").
#[derive(Debug, Clone)]
pub struct StarvedBestFit {
    /// Tokens per pack.
    pub capacity: u32,
    held: Vec<Pack>,
}

impl StarvedBestFit {
    /// A packer with capacity `capacity`.
    pub fn new(capacity: u32) -> Self {
        Self { capacity, held: Vec::new() }
    }
}

impl Packer for StarvedBestFit {
    fn name(&self) -> &str {
        "zoo::StarvedBestFit"
    }

    fn capacity(&self) -> u32 {
        self.capacity
    }

    fn push(&mut self, batch: &[Example]) -> thd::Result<Vec<Pack>> {
        let mut bf = BestFit::new(self.capacity, BinPackingOptions::default())?;
        self.held.extend(thd::pack::pack_all(&mut bf, batch)?);
        Ok(Vec::new())
    }

    fn end_epoch(&mut self) -> thd::Result<Vec<Pack>> {
        Ok(std::mem::take(&mut self.held))
    }

    fn pending(&self) -> usize {
        self.held.iter().map(Pack::len).sum()
    }

    fn dropped(&self) -> &[Dropped] {
        &[]
    }
}

/// A streaming next-fit packer that carries its open pack across pushes, as open-instruct's
/// loader does since #1472, but resets its state at the end of an epoch and forgets the carry:
/// the examples that were waiting for the next push are neither emitted nor reported dropped.
/// Only a session that ends an epoch with a carry sees it.
#[derive(Debug, Clone, Default)]
pub struct DropsCarryAtEpochEnd {
    /// Tokens per pack.
    pub capacity: u32,
    carry: Vec<Example>,
    load: [u64; 2],
}

impl DropsCarryAtEpochEnd {
    /// A packer with capacity `capacity`.
    pub fn new(capacity: u32) -> Self {
        Self { capacity, ..Self::default() }
    }
}

impl Packer for DropsCarryAtEpochEnd {
    fn name(&self) -> &str {
        "zoo::DropsCarryAtEpochEnd"
    }

    fn capacity(&self) -> u32 {
        self.capacity
    }

    fn push(&mut self, batch: &[Example]) -> thd::Result<Vec<Pack>> {
        let cap = u64::from(self.capacity);
        let mut out = Vec::new();
        for e in batch {
            let b = e.lens.branches();
            if (0..2).any(|k| self.load[k] + b[k] > cap) && !self.carry.is_empty() {
                out.push(Pack::new(self.carry.drain(..).map(Example::item).collect()));
                self.load = [0, 0];
            }
            self.carry.push(*e);
            self.load = [self.load[0] + b[0], self.load[1] + b[1]];
        }
        Ok(out)
    }

    fn end_epoch(&mut self) -> thd::Result<Vec<Pack>> {
        // BUG: the state is reset for the next epoch, and the carry with it.
        self.carry.clear();
        self.load = [0, 0];
        Ok(Vec::new())
    }

    fn pending(&self) -> usize {
        self.carry.len()
    }

    fn dropped(&self) -> &[Dropped] {
        &[]
    }
}

static RUNS: AtomicU64 = AtomicU64::new(0);

/// First fit over a buffer rotated by a process-wide counter instead of a seed: the packs
/// depend on how many packers ran before (an unseeded shuffle; a resumed run packs differently).
#[derive(Debug, Clone)]
pub struct UnseededShuffle {
    inner: FirstFit,
    salt: u64,
}

impl UnseededShuffle {
    /// A packer with capacity `capacity`; every instance gets the next value of the counter.
    ///
    /// # Panics
    /// If `capacity == 0`.
    pub fn new(capacity: u32) -> Self {
        let inner = FirstFit::new(capacity, BinPackingOptions::default()).expect("capacity > 0");
        Self { inner, salt: RUNS.fetch_add(1, Ordering::Relaxed) }
    }
}

impl Packer for UnseededShuffle {
    fn name(&self) -> &str {
        "zoo::UnseededShuffle"
    }

    fn capacity(&self) -> u32 {
        self.inner.capacity()
    }

    fn push(&mut self, batch: &[Example]) -> thd::Result<Vec<Pack>> {
        let mut b = batch.to_vec();
        if !b.is_empty() {
            let k = (self.salt as usize) % b.len();
            b.rotate_left(k);
        }
        self.inner.push(&b)
    }

    fn end_epoch(&mut self) -> thd::Result<Vec<Pack>> {
        self.inner.end_epoch()
    }

    fn pending(&self) -> usize {
        self.inner.pending()
    }

    fn dropped(&self) -> &[Dropped] {
        self.inner.dropped()
    }
}

/// Restarts the counter behind [`UnseededShuffle`] (so a test that shows its failure is
/// reproducible).
pub fn reset_unseeded_runs() {
    RUNS.store(0, Ordering::Relaxed);
}
