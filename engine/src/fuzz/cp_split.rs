//! CP sharding: a packed batch (token ids, unshifted labels, position ids, real and padded
//! `cu_seqlens`) and a CP size in, every rank's token ids, labels and position ids out. Every
//! token id of a request is distinct ([`CP_SPLIT_TAG_BASE`]` + storage index), so each local slot
//! maps back to the storage token it holds; the shards are judged by [`check_cp_shard_in`]
//! (coverage, the layout's order, labels rolled before the split, no silent truncation,
//! position ids) and a refusal by [`check_split_accepted_in`] (only a slot that is not a
//! multiple of `2·cp` may be refused).
//!
//! The layout is the stack's (`--cp-layout`, else the profile's `cp_layout`): the zigzag, or
//! `contiguous`, where rank r holds piece r of `cp` equal pieces of the whole pack (Ulysses,
//! slime's `--allgather-cp`) or of every slot (ring-flash-attn's varlen ring); the shards are
//! judged by the contiguous reading they follow more closely ([`closest_contiguous`]), slots
//! are padded to multiples of `cp`, and a refusal is allowed only for a slot that is not a
//! multiple of `cp`. A contiguous request says so: `"cp_layout": "contiguous"`. Or
//! `zigzag-sequence` (Megatron-LM's per-sequence zigzag): the whole pack, padded at its end to
//! a multiple of `2·cp` in 4 cases of 5, in `2·cp` chunks whatever its documents; a refusal is
//! allowed only for a pack that is not such a multiple (`"cp_layout": "zigzag-sequence"`).

use crate::args::CpSplitLayout;
use crate::protocol::{CP_SPLIT_TAG_BASE, CpSplitRequest, CpSplitResponse};
use properties::strategies::fuzz::{CpSplitFuzzCase, CpSplitFuzzParams, arb_cp_split_fuzz_case};
use proptest::prelude::*;
use proptest::strategy::BoxedStrategy;
use rules::checks::{
    CpSplitInput, FuzzTarget, ShardLayout, ShardView, closest_contiguous, judge_cp_split,
};
use serde_json::Value;
use thd::IGNORE_INDEX;

use super::{Applied, Failure, Target, cp_batch, response};

/// The cp-split target: the splitter's layout.
pub struct CpSplitTarget {
    /// The rules the run judged, for the report.
    pub(crate) applied: Applied,
    /// How the splitter lays the tokens over the ranks.
    pub layout: CpSplitLayout,
    /// The splitter pads each sequence itself to the least multiple of `align·2·cp` (of
    /// `align` at cp 1; `--cp-slot-align`): the requests' slots are that round-up.
    pub slot_align: Option<u32>,
}

impl CpSplitTarget {
    /// A target for `layout`.
    pub fn new(layout: CpSplitLayout) -> Self {
        Self { applied: Applied::default(), layout, slot_align: None }
    }

    /// The registry's CP-split rules on one answer.
    fn judge_answer(&self, input: &CpSplitInput<'_>) -> Result<(), Failure> {
        self.applied.with(|a| judge_cp_split(input, a)).map_err(Failure::stated)
    }

    /// The storage of a case's slots under the splitter's layout.
    fn storage(&self, case: &CpSplitFuzzCase) -> Vec<u32> {
        if let Some(align) = self.slot_align {
            return case.batch.aligned_storage(case.cp, align);
        }
        match self.layout {
            CpSplitLayout::ZigzagSequence => case.sequence_storage(),
            layout => case.storage(layout == CpSplitLayout::Contiguous),
        }
    }

    /// The request of a case: every token id tagged with its storage index.
    fn request(&self, case: &CpSplitFuzzCase) -> CpSplitRequest {
        let storage = self.storage(case);
        let slots = case.batch.slots(&storage);
        let tag = |g: usize| CP_SPLIT_TAG_BASE + g as i64;
        let offsets = |lens: &[u32]| {
            std::iter::once(0)
                .chain(lens.iter().scan(0i64, |acc, &l| {
                    *acc += i64::from(l);
                    Some(*acc)
                }))
                .collect()
        };
        CpSplitRequest {
            cp_size: case.cp,
            input_ids: (0..slots.len()).map(tag).collect(),
            labels: slots
                .iter()
                .enumerate()
                .map(
                    |(g, &(i, j, real))| {
                        if real && !case.batch.ignored(i, j) { tag(g) } else { IGNORE_INDEX }
                    },
                )
                .collect(),
            position_ids: slots.iter().map(|&(_, j, _)| j as i64).collect(),
            cu_seqlens: offsets(&case.batch.lens()),
            cu_seqlens_padded: offsets(&storage),
        }
    }
}

impl Target for CpSplitTarget {
    type Case = CpSplitFuzzCase;

    fn kind(&self) -> &'static str {
        "cp-split"
    }

    fn invariants(&self) -> String {
        let layout = match self.layout {
            CpSplitLayout::Zigzag => "2·cp zigzag chunks of every slot",
            CpSplitLayout::Contiguous => "contiguous pieces: no overlap, no gap, equal",
            CpSplitLayout::ZigzagSequence => "the zigzag of the whole pack",
        };
        format!("{} ({layout}; coverage, no truncation)", self.applied.text(FuzzTarget::CpSplit))
    }

    /// [`arb_cp_split_fuzz_case`]: a CP size, slots padded in 4 cases of 5, and a batch whose
    /// documents grow with `--cp-slot-align` (they cross the chunks of the splitter's slots).
    fn strategy(&self) -> BoxedStrategy<CpSplitFuzzCase> {
        arb_cp_split_fuzz_case(CpSplitFuzzParams { slot_align: self.slot_align }).boxed()
    }

    fn minimizes(&self) -> bool {
        true
    }

    /// The batch's reductions ([`cp_batch::reductions`]), then half the CP size.
    fn reductions(&self, case: &CpSplitFuzzCase) -> Vec<CpSplitFuzzCase> {
        let mut out: Vec<CpSplitFuzzCase> = cp_batch::reductions(&case.batch)
            .into_iter()
            .map(|batch| CpSplitFuzzCase { batch, ..case.clone() })
            .collect();
        if case.cp > 1 {
            out.push(CpSplitFuzzCase { cp: case.cp / 2, ..case.clone() });
        }
        out
    }

    fn payload(&self, case: &CpSplitFuzzCase) -> Value {
        let mut v = serde_json::to_value(self.request(case)).unwrap_or(Value::Null);
        if let Some(name) = layout_name(self.layout)
            && let Some(map) = v.as_object_mut()
        {
            map.insert("cp_layout".into(), name.into());
        }
        v
    }

    fn judge(
        &self,
        case: &CpSplitFuzzCase,
        send: &mut dyn FnMut() -> Result<String, Failure>,
    ) -> Result<(), Failure> {
        let (resp, line) = response::<CpSplitResponse>(send)?;
        let cp = case.cp;
        let storage = self.storage(case);
        let with = |mut f: Failure| {
            f.response = Some(line.clone());
            f
        };
        let ranks = match (resp.ranks, resp.rejected) {
            (Some(ranks), None) => ranks,
            (None, Some(why)) => {
                // Either contiguous reading may refuse a slot that is not a multiple of cp.
                let layout = match self.layout {
                    CpSplitLayout::Zigzag => ShardLayout::Zigzag,
                    CpSplitLayout::Contiguous => ShardLayout::ContiguousSlots,
                    CpSplitLayout::ZigzagSequence => ShardLayout::ZigzagSequence,
                };
                let input = CpSplitInput {
                    layout,
                    cp,
                    storage: &storage,
                    rejection: Some(&why.0),
                    view: None,
                };
                return self.judge_answer(&input).map_err(with);
            }
            _ => {
                return Err(Failure::schema(
                    "exactly one of `ranks` and `rejected` is expected",
                    &line,
                ));
            }
        };
        if ranks.len() != cp {
            return Err(Failure::schema(
                format!("{} entries in `ranks` for cp_size {cp} (one per rank)", ranks.len()),
                &line,
            ));
        }
        let with_positions = ranks.iter().filter(|r| r.position_ids.is_some()).count();
        if with_positions != 0 && with_positions != cp {
            return Err(Failure::schema(
                "`position_ids` on some ranks only (give them on every rank or on none)",
                &line,
            ));
        }
        for (r, rank) in ranks.iter().enumerate() {
            let n = rank.input_ids.len();
            let lens = [
                ("labels", Some(rank.labels.len())),
                ("position_ids", rank.position_ids.as_ref().map(Vec::len)),
            ];
            if let Some((key, len)) = lens.iter().find(|(_, len)| len.is_some_and(|l| l != n)) {
                return Err(Failure::schema(
                    format!("rank {r}: {} {key} for {n} input_ids", len.unwrap_or(0)),
                    &line,
                ));
            }
        }
        let req = self.request(case);
        let total = req.input_ids.len() as i64;
        // The storage index each local slot holds; an id that is not one of the request's
        // (a token the splitter made up, a zero fill) holds none.
        let positions: Vec<Vec<Option<usize>>> = ranks
            .iter()
            .map(|rank| {
                rank.input_ids
                    .iter()
                    .map(|&id| {
                        let g = id - CP_SPLIT_TAG_BASE;
                        (0..total).contains(&g).then_some(g as usize)
                    })
                    .collect()
            })
            .collect();
        let labels: Vec<Vec<i64>> = ranks.iter().map(|r| r.labels.clone()).collect();
        let position_ids: Option<Vec<Vec<i64>>> =
            ranks.iter().map(|r| r.position_ids.clone()).collect();
        let view = ShardView {
            cp,
            lens: &case.batch.lens(),
            storage: &storage,
            positions: &positions,
            labels: Some(&labels),
            unshifted_labels: Some(&req.labels),
            position_ids: position_ids.as_deref(),
        };
        let layout = match self.layout {
            CpSplitLayout::Zigzag => ShardLayout::Zigzag,
            CpSplitLayout::Contiguous => closest_contiguous(&view),
            CpSplitLayout::ZigzagSequence => ShardLayout::ZigzagSequence,
        };
        let input =
            CpSplitInput { layout, cp, storage: &storage, rejection: None, view: Some(&view) };
        self.judge_answer(&input).map_err(with)
    }
}

/// What a request says of a layout other than the zigzag (`"cp_layout"`); the zigzag says
/// nothing (the protocol's default).
pub(crate) fn layout_name(layout: CpSplitLayout) -> Option<&'static str> {
    match layout {
        CpSplitLayout::Zigzag => None,
        CpSplitLayout::Contiguous => Some("contiguous"),
        CpSplitLayout::ZigzagSequence => Some("zigzag-sequence"),
    }
}
