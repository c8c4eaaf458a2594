//! LAYOUT, `eos-delimited`: documents delimited by an end-of-document token.
//!
//! Pretraining packers append the EOS (Megatron's EOD) to every document before they
//! concatenate and cut the stream into rows, and some stacks find the documents again by that
//! token (Megatron's `reset_attention_mask` and `reset_position_ids` reset after every EOD). A
//! document without its EOS never learns to stop and, to such a reader, merges with the next;
//! an EOS inside a segment means two documents share one segment and attend to each other.

use crate::checks::proof::Proof;
use crate::checks::rule::{Outcome, rule};
use crate::checks::view::LayoutView;
use crate::words::plural;
use crate::{Location, Violation};

rule! {
    /// EOS-delimited documents end with it and hold none. [`crate::checks::eos_delimited`].
    EOS_DELIMITED = "eos-delimited", Layout, "every document ends with the EOS token and no EOS sits inside one",
        batch: |c| Some(eos_delimited(c.view, c.mock)),
        layout: true,
        proof: Proof::Zoo("EosTruncatedAway");
}

/// LAYOUT, `eos-delimited`: when the stack appends the EOS to every document
/// ([`crate::contract::Contract::documents_end_with_eos`], with [`crate::contract::Contract::eos_token_id`]), every real
/// segment ends with it and none holds it before its last real token.
///
/// ```text
/// real segment i (real tokens startᵢ .. endᵢ):
///     input_ids[endᵢ − 1] = eos            except the last real segment of each row (noted)
///     input_ids[t] ≠ eos                   startᵢ ≤ t < endᵢ − 1
/// ```
///
/// A row may end in a document cut by the pack length: its last segment is noted, not
/// flagged. Padding and mock segments are not documents (a pad id equal to the EOS is fine).
/// Skipped, with why, when the stack says its documents end with the EOS but the id or the
/// tokens are missing; skipped silently when it does not say so.
///
/// # Example
/// ```
/// use rules::checks::{IntSlice, LayoutView, eos_delimited};
/// use rules::contract::{Contract, DocumentsFact};
/// // EOS = 2: the first document lost its EOS, the last one (cut by the pack length) is fine.
/// let view = LayoutView {
///     num_tokens: 6,
///     input_ids: Some(IntSlice::from(&[5, 6, 7, 2, 8, 9])),
///     cu_seqlens: IntSlice::from(&[0, 2, 4, 6]),
///     facts: Contract {
///         eos_token_id: Some(2),
///         documents: Some(DocumentsFact::Eos),
///         ..Default::default()
///     },
///     ..Default::default()
/// };
/// let v = eos_delimited(&view, &[false; 3]).violation.unwrap();
/// assert_eq!(
///     v.to_string(),
///     "LAYOUT: every document ends with the EOS token and no EOS sits inside one\n  \
///      at: segment 0, token 1, `input_ids`\n  \
///      expected: input_ids[1] = 2, the EOS ending segment 0\n  \
///      got: input_ids[1] = 6\n  \
///      note: the document ends without its EOS: the model never learns to stop there, and a \
///      reader that splits on the EOS merges it with segment 1; 1 segment broken"
/// );
/// ```
pub fn eos_delimited(view: &LayoutView<'_>, mock: &[bool]) -> Outcome {
    if !view.facts.documents_end_with_eos() {
        return EOS_DELIMITED.skipped("");
    }
    let k = view.keys();
    let Some(eos) = view.facts.eos_token_id else {
        return EOS_DELIMITED.skipped(
            "documents end with the EOS token, but its id is unknown (state the EOS token id)",
        );
    };
    let Some(ids) = view.input_ids.filter(|ids| ids.len() == view.num_tokens) else {
        return EOS_DELIMITED.skipped("no input_ids: the ends of the documents cannot be read");
    };
    let width = view.row_width().unwrap_or(view.num_tokens.max(1));
    // The real segments that hold tokens, in order, with their rows.
    let docs: Vec<usize> = (0..view.segments())
        .filter(|&i| !mock.get(i).copied().unwrap_or(false) && !view.real(i).is_empty())
        .collect();
    let row = |i: usize| view.real(i).start / width;
    let (mut first, mut bad, mut cut) = (None::<Violation>, 0usize, Vec::new());
    let mut folded = 0usize;
    for (n, &i) in docs.iter().enumerate() {
        let mut r = view.real(i);
        let next = docs.get(n + 1).copied();
        let last_of_row = next.is_none_or(|j| row(j) != row(i));
        // A row's last segment may hold the row's padding after its document's EOS (Megatron
        // folds a short sample's padding into its last document): with the pad id stated, the
        // document ends before those pad tokens.
        if last_of_row && let Some(pad) = view.facts.pad_token_id.filter(|&p| p != eos) {
            let tail = ids.slice(r.clone()).iter().rev().take_while(|&x| x == pad).count();
            if tail > 0 && tail < r.len() && ids.at(r.end - tail - 1) == eos {
                r.end -= tail;
                folded += 1;
            }
        }
        let last = r.end - 1;
        let v = if let Some(j) = ids.slice(r.start..last).iter().position(|x| x == eos) {
            let t = r.start + j;
            Some(
                EOS_DELIMITED
                    .violation()
                    .at(Location::default().segment(i).token(t).key(&k.input_ids))
                    .expected(format!(
                        "a document token at offset {j} of segment {i} (its EOS belongs at token {last})"
                    ))
                    .got(format!("{}[{t}] = {eos}, the EOS", k.input_ids))
                    .note(format!(
                        "an EOS inside a segment: two documents were merged into segment {i} \
                         (tokens {}..{}), and they attend to each other",
                        r.start, r.end
                    )),
            )
        } else if ids.at(last) != eos && (last_of_row || view.facts.cross_doc_labels_by_design()) {
            // Pretraining cuts documents wherever a sample ends, and a flattened batch
            // (Megatron's flatten_batch_for_packed_sequences) no longer shows its samples: a
            // segment without its EOS is a cut document there, noted.
            cut.push((i, row(i)));
            None
        } else if ids.at(last) != eos {
            let then = next.map_or(String::new(), |j| format!(" with segment {j}"));
            Some(
                EOS_DELIMITED
                    .violation()
                    .at(Location::default().segment(i).token(last).key(&k.input_ids))
                    .expected(format!(
                        "{}[{last}] = {eos}, the EOS ending segment {i}",
                        k.input_ids
                    ))
                    .got(format!("{}[{last}] = {}", k.input_ids, ids.at(last)))
                    .note(format!(
                        "the document ends without its EOS: the model never learns to stop \
                         there, and a reader that splits on the EOS merges it{then}"
                    )),
            )
        } else {
            None
        };
        if let Some(v) = v {
            bad += 1;
            first.get_or_insert(v);
        }
    }
    if let Some(v) = first {
        let note = v.note.as_deref().unwrap_or_default().to_owned();
        return EOS_DELIMITED
            .violated(v.note(format!("{note}; {} broken", plural(bad, "segment"))));
    }
    let mut o = EOS_DELIMITED.ok(format!(
        "each of {} ends with the EOS {eos}, none holds one inside",
        plural(docs.len() - cut.len(), "document")
    ));
    if folded > 0 {
        o.notes.push(format!(
            "{} the row's padding (pad id {}) after its EOS",
            plural(folded, "row's last document") + if folded == 1 { " holds" } else { " hold" },
            view.facts.pad_token_id.unwrap_or_default()
        ));
    }
    if let Some(&(i, r)) = cut.first() {
        o.notes.push(format!(
            "{} cut by the pack length or where a sample ends, without its EOS (segment {i} of \
             row {r} first)",
            plural(cut.len(), "document")
        ));
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::{Contract, DocumentsFact, Objective};

    /// `facts` with a pretraining objective: labels cross documents by design.
    fn pretrain(facts: Contract) -> Contract {
        Contract { objective: Some(Objective::Pretrain), ..facts }
    }
    use crate::checks::{IntSlice, Status};

    const EOS: i64 = 2;

    fn view<'a>(ids: &'a [i64], cu: &'a [i64]) -> LayoutView<'a> {
        LayoutView {
            num_tokens: ids.len(),
            input_ids: Some(IntSlice::from(ids)),
            cu_seqlens: IntSlice::from(cu),
            facts: Contract {
                eos_token_id: Some(EOS),
                documents: Some(DocumentsFact::Eos),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn every_document_ends_with_the_eos_but_a_cut_one() {
        let ids = [5, 6, 2, 7, 2, 8, 9];
        let o = eos_delimited(&view(&ids, &[0, 3, 5, 7]), &[false; 3]);
        assert_eq!(o.status, Status::Ok, "{o:?}");
        assert_eq!(o.detail, "each of 2 documents ends with the EOS 2, none holds one inside");
        assert_eq!(
            o.notes,
            ["1 document cut by the pack length or where a sample ends, without its EOS \
              (segment 2 of row 0 first)"]
        );
        // Two rows of 4, each ending in a cut document; the pad tail is the EOS id.
        let ids = [5, 2, 6, 7, 8, 2, 9, 2];
        let v = LayoutView { rows: 2, ..view(&ids, &[0, 2, 4, 6, 7]) };
        let o = eos_delimited(&v, &[false; 4]);
        assert_eq!(o.status, Status::Ok, "{o:?}");
        assert!(o.notes[0].starts_with("2 documents cut by the pack length"), "{o:?}");
    }

    #[test]
    fn under_pretraining_a_segment_without_its_eos_is_a_cut_document() {
        // Two samples of 4 flattened into one row: [5 6 2 7 | 8 2 9 2], the document 7 8 cut
        // where sample 0 ends.
        let ids = [5, 6, 2, 7, 8, 2, 9, 2];
        let cu = [0, 3, 4, 6, 8];
        assert_eq!(eos_delimited(&view(&ids, &cu), &[false; 4]).status, Status::Violated);
        let v = LayoutView { facts: pretrain(view(&ids, &cu).facts), ..view(&ids, &cu) };
        let o = eos_delimited(&v, &[false; 4]);
        assert_eq!(o.status, Status::Ok, "{o:?}");
        // An EOS inside a segment is two documents merged, pretraining or not.
        let v =
            LayoutView { facts: pretrain(view(&ids, &[0, 4, 8]).facts), ..view(&ids, &[0, 4, 8]) };
        assert_eq!(eos_delimited(&v, &[false; 2]).status, Status::Violated);
    }

    #[test]
    fn a_rows_padding_after_its_last_eos_is_folded_in_only_with_the_pad_id() {
        // Megatron's short sample: [31 32 EOS pad pad] as the row's last segment.
        let ids = [5, 2, 31, 32, 2, 0, 0];
        let cu = [0, 2, 7];
        let o = eos_delimited(&view(&ids, &cu), &[false; 2]);
        assert_eq!(o.status, Status::Violated, "without the pad id: {o:?}");
        let v = LayoutView {
            facts: Contract { pad_token_id: Some(0), ..view(&ids, &cu).facts },
            ..view(&ids, &cu)
        };
        let o = eos_delimited(&v, &[false; 2]);
        assert_eq!(o.status, Status::Ok, "{o:?}");
        assert!(o.notes[0].contains("padding (pad id 0) after its EOS"), "{o:?}");
        // Not inside a row: a segment followed by another holds no padding.
        let ids = [5, 2, 0, 31, 2];
        let v = LayoutView {
            facts: Contract { pad_token_id: Some(0), ..view(&ids, &cu).facts },
            ..view(&ids, &[0, 3, 5])
        };
        assert_eq!(eos_delimited(&v, &[false; 2]).status, Status::Violated);
    }

    #[test]
    fn an_eos_inside_a_segment_is_two_documents_merged() {
        // The offsets lost the boundary after token 2: one segment holds two documents.
        let ids = [5, 6, 2, 7, 2];
        let v = eos_delimited(&view(&ids, &[0, 5]), &[false]).violation.unwrap();
        assert_eq!((v.id, v.at.segment, v.at.token), ("eos-delimited", Some(0), Some(2)));
        assert_eq!(v.got, "input_ids[2] = 2, the EOS");
        assert_eq!(
            v.expected,
            "a document token at offset 2 of segment 0 (its EOS belongs at token 4)"
        );
        assert!(v.note.as_deref().unwrap().contains("they attend to each other"), "{v}");
        // ... even in the last segment of the row, whose missing EOS alone would be noted.
        let ids = [5, 2, 7];
        let v = eos_delimited(&view(&ids, &[0, 3]), &[false]).violation.unwrap();
        assert_eq!(v.at.token, Some(1));
    }

    #[test]
    fn padding_and_mock_segments_are_not_documents() {
        // A document, in-slot padding of EOS ids, and a mock segment of pad ids.
        let ids = [5, 2, 2, 2, 0, 0];
        let v = LayoutView {
            cu_seqlens_padded: Some(IntSlice::from(&[0, 4, 6])),
            num_real_seqs: Some(1),
            ..view(&ids, &[0, 2, 4])
        };
        let o = eos_delimited(&v, &[false, true]);
        assert_eq!(o.status, Status::Ok, "{o:?}");
        assert!(o.notes.is_empty(), "{o:?}");
    }

    #[test]
    fn skipped_unless_stated_and_readable() {
        let ids = [5, 6];
        let v = view(&ids, &[0, 1, 2]);
        let o = eos_delimited(
            &LayoutView { facts: Contract { documents: None, ..v.facts }, ..v },
            &[false; 2],
        );
        assert_eq!((o.status, o.detail.as_str()), (Status::Skipped, ""));
        let o = eos_delimited(
            &LayoutView { facts: Contract { eos_token_id: None, ..v.facts }, ..v },
            &[false; 2],
        );
        assert!(o.status == Status::Skipped && o.detail.contains("id is unknown"), "{o:?}");
        let o = eos_delimited(&LayoutView { input_ids: None, ..v }, &[false; 2]);
        assert!(o.status == Status::Skipped && o.detail.starts_with("no input_ids"), "{o:?}");
        assert!(eos_delimited(&v, &[false; 2]).is_violated());
    }
}
