//! The contract: every fact about a batch that its tensors cannot show, as one record.
//!
//! A fact (the tokenizer's pad id, whether labels are already shifted, where a stack puts its
//! padding) comes from the command line, the batch's metadata, the stack's profile or the
//! project's `pyproject.toml`, and is resolved once into a [`Contract`]; the rules read it from
//! [`crate::checks::LayoutView::facts`]. The record is declared once, by the table at the
//! bottom of this file: adding a fact is one line here, the rule that reads it, and its row in
//! `docs/profiles.md` (a test holds that table to [`Contract::FACTS`]). A profile file's keys,
//! a metadata key and `thdcheck profile show` all take their names and values from here.
//!
//! ```
//! use rules::contract::{Attention, Contract};
//! let flag = Contract { pad_token_id: Some(0), ..Default::default() };
//! let mut metadata = Contract::default();
//! metadata.set("pad_token_id", "2").unwrap()?;
//! metadata.set("attention", "causal").unwrap()?;
//! // The higher layer wins fact by fact.
//! let resolved = flag.or(metadata);
//! assert_eq!((resolved.pad_token_id, resolved.attention), (Some(0), Some(Attention::Causal)));
//! assert_eq!(metadata.set("attention", "sideways"), Some(Err("causal or bidirectional")));
//! # Ok::<(), &str>(())
//! ```

use serde::{Deserialize, Serialize};

use crate::MAX_CP_SIZE;

/// A value a fact can hold: read from a string (metadata, a Python keyword) and shown.
pub trait FactValue: Sized + Copy {
    /// What the string must be, for messages and docs.
    const EXPECTED: &'static str;
    /// Reads the value.
    ///
    /// # Errors
    /// [`FactValue::EXPECTED`] when `s` is not one.
    fn parse(s: &str) -> Result<Self, &'static str>;
    /// The value as a profile writes it.
    fn show(&self) -> String;
}

impl FactValue for i64 {
    const EXPECTED: &'static str = "an integer";
    fn parse(s: &str) -> Result<Self, &'static str> {
        s.trim().parse().map_err(|_| Self::EXPECTED)
    }
    fn show(&self) -> String {
        self.to_string()
    }
}

/// A count from 1 to [`MAX_CP_SIZE`]: a CP size, a `pad_to_multiple_of`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "i64", into = "i64")]
pub struct Count(usize);

impl Count {
    /// The count, if it is from 1 to [`MAX_CP_SIZE`].
    pub fn new(n: usize) -> Option<Self> {
        (1..=MAX_CP_SIZE as usize).contains(&n).then_some(Self(n))
    }

    /// The count.
    pub fn get(self) -> usize {
        self.0
    }
}

impl TryFrom<i64> for Count {
    type Error = &'static str;
    fn try_from(v: i64) -> Result<Self, &'static str> {
        usize::try_from(v).ok().and_then(Self::new).ok_or(Self::EXPECTED)
    }
}

impl From<Count> for i64 {
    fn from(c: Count) -> i64 {
        c.0 as i64
    }
}

impl FactValue for Count {
    const EXPECTED: &'static str = concat!("an integer in 1..=", crate::max_cp_size!());
    fn parse(s: &str) -> Result<Self, &'static str> {
        s.trim().parse::<usize>().ok().and_then(Self::new).ok_or(Self::EXPECTED)
    }
    fn show(&self) -> String {
        self.0.to_string()
    }
}

/// Declares a fact's enum: its values as profiles, metadata and the command line spell them.
macro_rules! fact_enum {
    ($(#[$meta:meta])* $name:ident, $expected:literal { $($(#[doc = $doc:literal])* $variant:ident = $text:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
        #[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
        pub enum $name {
            $($(#[doc = $doc])* #[serde(rename = $text)] #[cfg_attr(feature = "clap", value(name = $text))] $variant,)+
        }

        impl $name {
            /// Every value, as written.
            pub const VALUES: &'static [&'static str] = &[$($text),+];

            /// The value as written.
            pub fn name(self) -> &'static str {
                match self { $(Self::$variant => $text,)+ }
            }
        }

        impl FactValue for $name {
            const EXPECTED: &'static str = $expected;
            fn parse(s: &str) -> Result<Self, &'static str> {
                match s.trim() { $($text => Ok(Self::$variant),)+ _ => Err($expected) }
            }
            fn show(&self) -> String {
                self.name().to_owned()
            }
        }
    };
}

fact_enum! {
    /// How labels relate to the tokens (`labels`).
    LabelsFact, "unshifted, shifted or from-input-ids" {
        /// `labels[t]` is token t; the loss shifts them (Hugging Face).
        Unshifted = "unshifted",
        /// Already rolled: `logits[t]` predicts `labels[t]` (Megatron, TE).
        Shifted = "shifted",
        /// No labels tensor: the model derives them from `input_ids` across each row, under
        /// `label_mask` / `attention_mask` / `instance_mask` (OLMo-core's `get_labels`).
        FromInputIds = "from-input-ids",
    }
}

impl LabelsFact {
    /// The convention labels are read under, when this states one (`from-input-ids`: the
    /// labels are derived, and the format decides).
    pub fn convention(self) -> Option<thd::LabelConvention> {
        match self {
            Self::Unshifted => Some(thd::LabelConvention::Unshifted),
            Self::Shifted => Some(thd::LabelConvention::Shifted),
            Self::FromInputIds => None,
        }
    }
}

fact_enum! {
    /// Whether the loss reads the label of each document's last prediction (`boundary_labels`).
    BoundaryLabelsFact, "read or masked-by-loss" {
        /// The loss reads every label the batch carries: a label at a document's last
        /// prediction that is the next document's first token is a leak. The default.
        Read = "read",
        /// The loss masks each document's last prediction itself, from the offsets (Unsloth's
        /// `mask_packed_sequence_boundaries` over `packed_seq_lengths`): a label there is never
        /// read, so one that crosses into the next document is noted, not flagged.
        MaskedByLoss = "masked-by-loss",
    }
}

fact_enum! {
    /// Whether the stack can take a zero-length sequence (`empty_segments`).
    EmptySegmentsFact, "allowed or forbidden" {
        /// A zero-length segment (a repeated offset) is no document, counted apart wherever
        /// it sits (TE pads `[0, 3, 3]`, Automodel packs `[2, 0, 2]`). The default.
        Allowed = "allowed",
        /// The stack's kernel or model cannot take one (a linear-attention conv1d over an
        /// empty sequence): a zero-length segment anywhere, leading, inside or trailing, is
        /// `mock-nonempty`.
        Forbidden = "forbidden",
    }
}

fact_enum! {
    /// Whether the documents of a row attend to each other (`document_attention`).
    DocumentAttention, "isolated or shared" {
        /// Each document attends only to itself (offsets, a block mask, restarts given to the
        /// kernel): the hardware work is each slot's. The default.
        Isolated = "isolated",
        /// Plain packing, by design: the kernel sees each row whole (an all-ones mask, no
        /// offsets), so the documents of a row attend to each other and the hardware work is
        /// each row's; the useful work stays each document's.
        Shared = "shared",
    }
}

fact_enum! {
    /// What the key offsets hold beside the query offsets (`key_offsets`).
    KeyOffsetsFact, "same or longer" {
        /// The query offsets again: self-attention packing has one set (`qk-offsets`). The
        /// default.
        Same = "same",
        /// Each document's keys reach back past its queries, by design (into the previous
        /// micro-sequence, a cached prefix): as many documents, each with at least as many keys
        /// as queries.
        Longer = "longer",
    }
}

fact_enum! {
    /// How position ids count (`positions`).
    PositionsFact, "per-document, per-row or continued" {
        /// From the base at every document's first token (`position-ids`). The default.
        PerDocument = "per-document",
        /// From the base at every row's first token, on through its documents, by design
        /// (Megatron-LM's `reset_attention_mask` without `reset_position_ids`; plain packing):
        /// `position-ids` holds each real token to its offset in its row.
        PerRow = "per-row",
        /// From the base at every document's first token, except a row's first one, which may
        /// continue a document the previous row's end cut (packers that split a document
        /// across rows): its positions go on counting from wherever they start.
        Continued = "continued",
    }
}

fact_enum! {
    /// Whether the loss reads the labels on padding tokens (`padding_labels`).
    PaddingLabelsFact, "read or masked-by-loss" {
        /// The loss reads every label the batch carries: a label on padding is trained
        /// (`pad-labels`). The default.
        Read = "read",
        /// The loss never reads a label on the padding after a document's real tokens or after
        /// the last slot (it slices the real tokens, or masks them itself): such labels are
        /// read as -100, and noted. A mock segment's labels are still judged.
        MaskedByLoss = "masked-by-loss",
    }
}

fact_enum! {
    /// What a `loss_mask` trains when the batch has no labels (`loss_mask`).
    LossMaskFact, "unshifted or shifted" {
        /// `loss_mask[t]` trains token `t` as a target; the loss rolls it.
        Unshifted = "unshifted",
        /// Pre-rolled: `loss_mask[t]` trains the prediction at `t`, whose target is token
        /// `t + 1` (AReaL from `d58cca56f`).
        Shifted = "shifted",
    }
}

fact_enum! {
    /// What an `attention_mask` holds (`attention_mask`).
    MaskFact, "padding, sample-numbers or row-flags" {
        /// 1 on real tokens, 0 on padding (a value above 1 is still read as sample numbers).
        Padding = "padding",
        /// Any integer mask is the sample number within the row: 1, 2, 3 … per sample, 0 on
        /// padding (a pack of one sample is all ones).
        SampleNumbers = "sample-numbers",
        /// One value per row is not a token mask: unused at cp = 1, and refused under CP, where
        /// the split slices it along the tokens.
        RowFlags = "row-flags",
    }
}

fact_enum! {
    /// How documents are delimited when the file has no key that delimits them (`documents`).
    DocumentsFact, "keys, row-pad-tail, eos or block-mask" {
        /// Offsets, `doc_lens`, sample numbers, position-id restarts or mask rows; without any
        /// of them the file is unreadable.
        Keys = "keys",
        /// Without such a key: one document per row, its trailing pad ids the padding.
        RowPadTail = "row-pad-tail",
        /// Every document ends with the EOS token (`eos_token_id`), and the model derives its
        /// document mask from the token ids (Megatron-LM's `reset_attention_mask`): without a
        /// key that delimits them, a document ends after every EOS; with one, a document that
        /// lacks its EOS or holds one inside is flagged (`eos-delimited`).
        Eos = "eos",
        /// A 4-D block-diagonal attention mask is what delimits them (the kernel's only
        /// document boundaries): a document starts at a query whose first visible key is
        /// itself, even where position ids do not restart there (Megatron-LM's
        /// `reset_attention_mask` without `reset_position_ids`).
        BlockMask = "block-mask",
    }
}

fact_enum! {
    /// What `true` means in a boolean 4-D attention mask `[B, 1, S, S]` (`block_mask`); an
    /// additive float mask is unambiguous (0 attends, a large negative value masks).
    BlockMaskFact, "true-attends or true-masks" {
        /// `true` lets the query see the key (PyTorch SDPA, transformers).
        TrueAttends = "true-attends",
        /// `true` masks the key out (Megatron-LM's `get_ltor_masks_and_position_ids`:
        /// `attention_mask < 0.5`).
        TrueMasks = "true-masks",
    }
}

fact_enum! {
    /// How a context-parallel split lays a sequence over the ranks (`cp_layout`).
    CpLayout, "zigzag, contiguous or zigzag-sequence" {
        /// Every slot in `2·cp` chunks, rank r holding chunks r and 2·cp−1−r (TE, bionemo,
        /// Megatron's `get_batch_on_this_cp_rank`): load-balanced causal attention.
        Zigzag = "zigzag",
        /// Every slot (or the whole pack) in `cp` contiguous pieces, rank r holding piece r
        /// (Ulysses-style sequence parallelism, ring attention without load balancing).
        Contiguous = "contiguous",
        /// The whole sequence (a flattened pretraining row, its documents ignored) in `2·cp`
        /// chunks, rank r holding r and 2·cp−1−r, the rank files keeping the global offsets
        /// (Megatron-LM's per-sequence zigzag,
        /// `get_batch_on_this_cp_rank(use_per_sequence_balancing)`, for inter-document masking).
        ZigzagSequence = "zigzag-sequence",
    }
}

fact_enum! {
    /// Where padding may sit as segments of its own (`padding_segments`).
    PaddingSegments, "none, per-row, any or absorbed" {
        /// A padding segment is a mock segment: marked or flagged.
        None = "none",
        /// One final padding segment per row, by design; one per pad token is flagged.
        PerRow = "per-row",
        /// Final padding segments by design, one per pad token included.
        Any = "any",
        /// No padding segment: the padding at a row's end continues the row's last document
        /// (its position ids go on counting, or its `seq_lens` entry counts it), so the pad ids
        /// that end that document are read as its padding (`pad_token_id` needed).
        Absorbed = "absorbed",
    }
}

fact_enum! {
    /// How the offsets end before their sentinel entries (`offsets_end`).
    OffsetsEnd, "sentinel or first-negative" {
        /// Trailing sentinel entries (`sentinel`) are dropped; `KEY_argmin` cuts them where
        /// given.
        Sentinel = "sentinel",
        /// Also cut at the first negative entry when there is no `KEY_argmin`.
        FirstNegative = "first-negative",
    }
}

fact_enum! {
    /// What the offsets the kernel gets hold (`offsets`).
    OffsetsFact, "real or padded-slots" {
        /// Each document's real tokens (a `_padded` key, when there is one, its storage
        /// slots): the default.
        Real = "real",
        /// Each document's storage slot, its real tokens first and then its padding, and no
        /// offsets of real lengths: the real lengths are in the padding mask, one row per slot
        /// (its row sums: verl's and SkyRL's `preprocess_packed_seqs` keep the `[B, S]` mask
        /// they packed) or one entry per token (each slot's count of real tokens); without a
        /// mask, `seq_lens`; without either, with a pad id, each slot less the pad ids that end
        /// it (slime's and AReaL's CP ranks).
        PaddedSlots = "padded-slots",
    }
}

fact_enum! {
    /// What trailing zero-length repeats of the last offset are (`trailing_repeats`).
    TrailingRepeats, "segments or row-padding" {
        /// Empty segments, judged by the rules.
        Segments = "segments",
        /// The padding of ragged rows: dropped, and noted.
        RowPadding = "row-padding",
    }
}

fact_enum! {
    /// The attention the model computes (`attention`).
    Attention, "causal or bidirectional" {
        /// Causal: useful work is the triangle Σ s(s+1)/2.
        Causal = "causal",
        /// Bidirectional (encoders): useful work is Σ s².
        Bidirectional = "bidirectional",
    }
}

fact_enum! {
    /// What the loss trains, where the batch cannot say it (`objective`).
    Objective, "sft, pretrain or mlm" {
        /// Each document is its own example: a prediction of the next document's first token
        /// is a leak (`cross-doc-label`). The default.
        Sft = "sft",
        /// The token stream is trained across documents on purpose (pretraining: OLMo-core,
        /// axolotl's pretraining path): such predictions are noted, not flagged.
        Pretrain = "pretrain",
        /// Masked LM (ESM, BERT): labels are targets at their own position, never shifted
        /// across a boundary; the attention is bidirectional unless stated.
        Mlm = "mlm",
    }
}

/// One fact of the record: its name (the profile's key and the metadata's), what it says and
/// the values it takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FactInfo {
    /// The name.
    pub name: &'static str,
    /// The first line of its documentation.
    pub doc: &'static str,
    /// Its values.
    pub expected: &'static str,
}

/// Declares the record: every fact once, with its documentation and its type.
macro_rules! contract {
    ($($(#[doc = $doc:literal])+ $name:ident: $ty:ty,)+) => {
        /// Every fact about a batch that its tensors cannot show, each `None` when nobody
        /// stated it (the format's reading and the defaults of packed training then apply).
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
        pub struct Contract {
            $($(#[doc = $doc])+ #[serde(default, skip_serializing_if = "Option::is_none")] pub $name: Option<$ty>,)+
        }

        impl Contract {
            /// Every fact, in the order `profile show` prints them.
            pub const FACTS: &'static [FactInfo] = &[$(FactInfo {
                name: stringify!($name),
                doc: contract!(@first $($doc)+),
                expected: <$ty as FactValue>::EXPECTED,
            },)+];

            /// This record's facts, and `lower`'s where this one states none.
            #[must_use]
            pub fn or(self, lower: Self) -> Self {
                Self { $($name: self.$name.or(lower.$name),)+ }
            }

            /// Sets the fact `name` from its written value: `None` when no fact has that name.
            ///
            /// # Errors
            /// What the value must be, when it is not one.
            pub fn set(&mut self, name: &str, value: &str) -> Option<Result<(), &'static str>> {
                match name {
                    $(stringify!($name) => Some(<$ty as FactValue>::parse(value).map(|v| self.$name = Some(v))),)+
                    _ => None,
                }
            }

            /// The facts stated, `(name, value as written)`, in [`Contract::FACTS`] order.
            pub fn stated(&self) -> Vec<(&'static str, String)> {
                let mut out = Vec::new();
                $(if let Some(v) = &self.$name { out.push((stringify!($name), v.show())); })+
                out
            }
        }
    };
    (@first $first:literal $($rest:literal)*) => { $first };
}

contract! {
    /// How labels relate to the tokens (default: the format's: unshifted for the Hugging Face
    /// keys, shifted for TransformerEngine's).
    labels: LabelsFact,
    /// A label value the loss ignores besides -100 (read as -100).
    ignore_index: i64,
    /// The tokenizer's pad id: without a mask, a segment made only of it with every label -100
    /// is a mock segment.
    pad_token_id: i64,
    /// The model's first position id (`padding_idx + 1` for RoBERTa / ESM; default 0, or one
    /// base shared by every segment, noted).
    position_base: i64,
    /// The empty-slot sentinel of `seq_lens` and trailing offsets entries (default -1000).
    sentinel: i64,
    /// What an `attention_mask` holds.
    attention_mask: MaskFact,
    /// How documents are delimited without a key that delimits them.
    documents: DocumentsFact,
    /// What the offsets the kernel gets hold (default: real lengths).
    offsets: OffsetsFact,
    /// How the offsets end before their sentinel entries.
    offsets_end: OffsetsEnd,
    /// What trailing zero-length repeats of the last offset are.
    trailing_repeats: TrailingRepeats,
    /// What the loss trains (default `sft`).
    objective: Objective,
    /// Whether the loss reads the label of each document's last prediction (default `read`).
    boundary_labels: BoundaryLabelsFact,
    /// Whether the loss reads the labels on padding tokens (default `read`).
    padding_labels: PaddingLabelsFact,
    /// How position ids count (default `per-document`).
    positions: PositionsFact,
    /// What the key offsets hold beside the query offsets (default `same`).
    key_offsets: KeyOffsetsFact,
    /// Whether the documents of a row attend to each other (default `isolated`).
    document_attention: DocumentAttention,
    /// Whether the stack can take a zero-length sequence (default `allowed`).
    empty_segments: EmptySegmentsFact,
    /// The attention the model computes (default: neither stated, so useful work is Σ s²).
    attention: Attention,
    /// Where padding may sit as segments of its own (default `none`).
    padding_segments: PaddingSegments,
    /// The tokenizer's EOS id (with `documents = "eos"`).
    eos_token_id: i64,
    /// What `true` means in a boolean 4-D attention mask (default `true-attends`).
    block_mask: BlockMaskFact,
    /// How a CP split lays a sequence over the ranks (default `zigzag`).
    cp_layout: CpLayout,
    /// Without labels, what a `loss_mask` trains: token `t` itself (`unshifted`) or the
    /// prediction at `t` (`shifted`); default: the `labels` fact.
    loss_mask: LossMaskFact,
    /// The CP size a whole batch is meant for: it must shard over that many ranks.
    cp_size: Count,
    /// The token count `T` must be a multiple of this.
    pad_to_multiple_of: Count,
}

impl Contract {
    /// Useful work is the causal triangle `Σ s(s+1)/2`; every valid label is checked against
    /// the token it predicts.
    pub fn causal(&self) -> bool {
        self.attention == Some(Attention::Causal)
    }

    /// Every real token attends to its whole document (an encoder or masked LM): labels are
    /// targets at their own position and useful work is `Σ s²`.
    pub fn bidirectional(&self) -> bool {
        self.attention == Some(Attention::Bidirectional)
            || (self.objective == Some(Objective::Mlm) && !self.causal())
    }

    /// The objective trains across documents by design (pretraining): a label that is the next
    /// document's first token is noted by `cross-doc-label`, not flagged.
    pub fn cross_doc_labels_by_design(&self) -> bool {
        self.objective == Some(Objective::Pretrain)
    }

    /// The stack puts its pack padding in final segments on purpose (Megatron-Bridge): an
    /// unmarked all-padding segment is noted by `mock-marked`, not flagged.
    pub fn padding_segment_by_design(&self) -> bool {
        matches!(self.padding_segments, Some(PaddingSegments::PerRow | PaddingSegments::Any))
    }

    /// With [`Contract::padding_segment_by_design`]: only one padding segment per row is by
    /// design, at the row's end (axolotl after #2739); one per pad token is flagged.
    pub fn padding_segment_per_row(&self) -> bool {
        self.padding_segments == Some(PaddingSegments::PerRow)
    }

    /// Every document ends with the EOS token (`documents = "eos"`).
    pub fn documents_end_with_eos(&self) -> bool {
        self.documents == Some(DocumentsFact::Eos)
    }

    /// Reads one layer from its written values (a batch's `__metadata__`, keyword arguments):
    /// every key that names a fact, and the aliases a dump writes (`causal = true | false`,
    /// `mlm = true`). Keys that name no fact are left to whoever reads them.
    ///
    /// # Errors
    /// `(key, value, what it must be)` for the first value that does not parse.
    pub fn from_written<'a>(
        pairs: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<Self, (String, String, &'static str)> {
        let mut c = Self::default();
        for (key, value) in pairs {
            let bad = |why| (key.to_owned(), value.to_owned(), why);
            let flag = |v: &str| match v.trim() {
                "1" | "true" | "True" => Some(true),
                "0" | "false" | "False" => Some(false),
                _ => None,
            };
            match key {
                // A dump's booleans: a causal model, or an encoder; a masked-LM objective.
                "causal" => match flag(value) {
                    Some(true) => c.attention = c.attention.or(Some(Attention::Causal)),
                    Some(false) => c.attention = c.attention.or(Some(Attention::Bidirectional)),
                    None => return Err(bad("true or false")),
                },
                // Its name in the dumps written before it was a fact.
                "loss_mask_convention" => match LossMaskFact::parse(value) {
                    Ok(v) => c.loss_mask = c.loss_mask.or(Some(v)),
                    Err(why) => return Err(bad(why)),
                },
                "mlm" => match flag(value) {
                    Some(true) => c.objective = c.objective.or(Some(Objective::Mlm)),
                    Some(false) => {}
                    None => return Err(bad("true or false")),
                },
                _ => {
                    if let Some(Err(why)) = c.set(key, value) {
                        return Err(bad(why));
                    }
                }
            }
        }
        Ok(c.settled())
    }

    /// A masked-LM objective stated without an attention is bidirectional attention at the
    /// same layer (an encoder), so a lower layer's `attention = "causal"` cannot undo it.
    #[must_use]
    pub fn settled(mut self) -> Self {
        if self.objective == Some(Objective::Mlm) && self.attention.is_none() {
            self.attention = Some(Attention::Bidirectional);
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_fact_has_a_name_a_doc_and_values() {
        let mut names: Vec<&str> = Contract::FACTS.iter().map(|f| f.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), Contract::FACTS.len());
        for f in Contract::FACTS {
            assert!(!f.doc.is_empty() && !f.expected.is_empty(), "{f:?}");
            // Every fact can be set from its written value.
            assert!(Contract::default().set(f.name, "").is_some(), "{}", f.name);
        }
    }

    #[test]
    fn written_values_round_trip_and_bad_ones_name_the_key() {
        let c = Contract::from_written([
            ("pad_token_id", "0"),
            ("labels", "shifted"),
            ("cp_size", "4"),
            ("profile", "trl"),
        ])
        .unwrap();
        assert_eq!(
            c.stated(),
            [("labels", "shifted".into()), ("pad_token_id", "0".into()), ("cp_size", "4".into())]
        );
        assert_eq!(
            Contract::from_written([("cp_size", "0")]).unwrap_err(),
            ("cp_size".into(), "0".into(), "an integer in 1..=65536")
        );
        assert_eq!(Contract::from_written([("causal", "maybe")]).unwrap_err().2, "true or false");
    }

    #[test]
    fn mlm_means_bidirectional_unless_stated() {
        let mlm = Contract::from_written([("mlm", "true")]).unwrap();
        assert!(mlm.bidirectional() && !mlm.causal());
        let profile = Contract { attention: Some(Attention::Causal), ..Default::default() };
        assert!(mlm.or(profile).bidirectional());
        let causal = Contract::from_written([("causal", "true"), ("objective", "mlm")]).unwrap();
        assert!(causal.causal() && !causal.bidirectional());
    }
}
