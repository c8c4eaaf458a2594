//! LAYOUT properties of the formats beyond offsets: the reference 4-D mask builder, EOS packer
//! and side-tensor producer keep the layout contract, and the `block-mask` rule (through the
//! per-query summary a reader hands it) flags a mask exactly when some real token's keys are not
//! its own document's. The planted bugs are in `zoo_props`.

use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::Index;

use crate::checks::{BlockMaskSummary, LayoutView, block_mask, mock_segments};
use crate::strategies::{Sizes, arb_collate_case, arb_eos_case, arb_mask_case};
use crate::subjects::{
    Collator, MaskBuilder, ThdSubject, run_block_mask, run_eos_pack, run_side_tensors,
};

proptest! {
    /// A block-diagonal 4-D mask over any collated pack (any padding, causal or bidirectional)
    /// lets every real token see exactly its own document.
    #[test]
    fn block_masks_keep_each_token_to_its_document(case in arb_mask_case(Sizes::SMALL)) {
        run_block_mask(&ThdSubject, &case)?;
    }

    /// Documents truncated before their EOS is appended, packed and cut into rows, each end
    /// with the EOS and hold none inside (a document cut at a row's end is noted, not flagged).
    #[test]
    fn eos_packs_end_every_document_with_its_eos(case in arb_eos_case(Sizes::SMALL)) {
        run_eos_pack(&ThdSubject, &case)?;
    }

    /// Side tensors padded back to `T` pass `token-counts` beside any collated pack.
    #[test]
    fn side_tensors_have_one_entry_per_token(case in arb_collate_case(Sizes::SMALL)) {
        run_side_tensors(&ThdSubject, &case)?;
    }

    /// Differential: flip a few entries of the reference mask; `block-mask` is violated exactly
    /// when some real token's set of allowed keys is no longer its document's (causal: up to
    /// itself), the set computed key by key from the dense mask, not from the summary.
    #[test]
    fn block_mask_flags_exactly_the_masks_that_cross_documents(
        case in arb_mask_case(Sizes::TINY),
        flips in vec((any::<Index>(), any::<Index>()), 0..3),
    ) {
        let c = &case.collate;
        let pack = ThdSubject.collate(&c.sft.examples(), &c.padding, c.position_base).unwrap();
        let t = pack.input_ids.len();
        let mut dense = ThdSubject.build_mask(&pack, case.bidirectional);
        for (q, k) in &flips {
            let at = q.index(t) * t + k.index(t);
            dense[at] = !dense[at];
        }
        let summary = BlockMaskSummary::from_dense(1, t, &dense);
        let view = LayoutView {
            block_mask: Some(summary.view("attention_mask")),
            facts: rules::contract::Contract {
                attention: case.bidirectional.then_some(rules::contract::Attention::Bidirectional),
                ..pack.view(c.position_base).facts
            },
            ..pack.view(c.position_base)
        };
        let mock = mock_segments(&view);
        let wrong = (0..view.segments()).filter(|&i| !mock[i]).any(|i| {
            let r = view.real(i);
            r.clone().any(|q| {
                (0..t).any(|k| {
                    let want = r.contains(&k) && (case.bidirectional || k <= q);
                    dense[q * t + k] != want
                })
            })
        });
        let o = block_mask(&view, &mock);
        prop_assert_eq!(o.is_violated(), wrong, "{:?}", o);
    }
}
