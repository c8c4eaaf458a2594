//! The one error type of the `thd` crate.
//!
//! Every variant names the rule that was broken and carries the index and value at fault, so a
//! message can be acted on without a debugger: `cu_seqlens must be non-decreasing: cu[3]=17 <
//! cu[2]=20`.

/// Result alias for `thd`.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong when building or processing a packed batch.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    // ---- LAYOUT: cu_seqlens -------------------------------------------------------------
    /// `cu_seqlens` needs at least one entry (`B + 1` entries for `B` segments).
    #[error("{name} must have at least one entry (B + 1 for B segments), got an empty list")]
    CuSeqlensEmpty {
        /// Which offsets: `cu_seqlens` or `cu_seqlens_padded`.
        name: &'static str,
    },
    /// `cu[0]` must be 0.
    #[error("{name} must start at 0, got {name}[0]={first}")]
    CuSeqlensStart {
        /// Which offsets.
        name: &'static str,
        /// The first entry.
        first: i64,
    },
    /// Offsets must never decrease.
    #[error("{name} must be non-decreasing: {name}[{index}]={value} < {name}[{prev_index}]={prev}", prev_index = index - 1)]
    CuSeqlensDecreasing {
        /// Which offsets.
        name: &'static str,
        /// Index of the entry that is smaller than its predecessor.
        index: usize,
        /// Its value.
        value: i64,
        /// The predecessor's value.
        prev: i64,
    },
    /// Offsets are int32 in every kernel that consumes them.
    #[error("{name} must fit int32: {name}[{index}]={value} > {max}", max = i32::MAX)]
    CuSeqlensOverflow {
        /// Which offsets.
        name: &'static str,
        /// Index of the entry.
        index: usize,
        /// The value that does not fit.
        value: i64,
    },
    /// The last offset addresses tokens that do not exist.
    #[error(
        "{name} must end at or before the token count: {name}[{index}]={value} > {tokens} tokens"
    )]
    CuSeqlensBeyondTokens {
        /// Which offsets.
        name: &'static str,
        /// Index of the last entry.
        index: usize,
        /// Its value.
        value: i64,
        /// Number of tokens in the batch.
        tokens: usize,
    },
    /// Real and padded offsets must describe the same segments.
    #[error("cu_seqlens_padded has {padded} segments but cu_seqlens has {real}")]
    SegmentCountMismatch {
        /// Segments in `cu_seqlens`.
        real: usize,
        /// Segments in `cu_seqlens_padded`.
        padded: usize,
    },
    /// A padded length is storage for the real one, so it can never be shorter.
    #[error(
        "padded length must be >= real length: segment {segment} has real length {real} but padded length {padded}"
    )]
    PaddedShorterThanReal {
        /// Segment index.
        segment: usize,
        /// Real length `s_i`.
        real: i64,
        /// Padded length `p_i`.
        padded: i64,
    },
    /// A per-token tensor disagrees with `input_ids` in length.
    #[error("{key} has {len} entries but input_ids has {expected}")]
    TokenCountMismatch {
        /// The key at fault.
        key: &'static str,
        /// Its length.
        len: usize,
        /// The length of `input_ids`.
        expected: usize,
    },
    /// Position ids must restart at 0 at each segment start and count up inside it.
    #[error(
        "position_ids must restart at each segment start: segment {segment}, token {token} (offset {offset} in the segment) has position id {got}, expected {offset}"
    )]
    PositionIdsNotReset {
        /// Segment index.
        segment: usize,
        /// Flat token index in the pack.
        token: usize,
        /// Offset of that token within its segment (the expected position id).
        offset: usize,
        /// The position id found.
        got: i64,
    },
    /// The last token of a segment would be trained to predict the next document's first token.
    #[error(
        "no label may cross a document boundary: the target of segment {segment}'s last token is labels[{token}]={label}, the next document's first token (expected -100 or the segment's own target)"
    )]
    CrossDocumentLabel {
        /// Segment whose last token would leak.
        segment: usize,
        /// Flat index of the label that is read as that token's target.
        token: usize,
        /// The label found there.
        label: i64,
    },
    /// `num_real_seqs` counts leading real segments, so it cannot exceed the segment count.
    #[error("num_real_seqs={num_real_seqs} exceeds the number of segments ({segments})")]
    NumRealSeqsTooLarge {
        /// The value given.
        num_real_seqs: usize,
        /// Segments in the batch.
        segments: usize,
    },
    /// A mock segment (one past `num_real_seqs`) that holds no token: a duplicated offset, as
    /// a padding step that appends its tail offset when nothing needed padding leaves it (AReaL
    /// #1103; it crashed conv1d).
    #[error(
        "mock segment {segment} holds no token: {name}[{segment}] = {name}[{next}] = {offset}; a mock segment is padding and must hold at least one token (or be left out)"
    )]
    EmptyMockSegment {
        /// The offsets that address storage (`cu_seqlens_padded` if given, else `cu_seqlens`).
        name: &'static str,
        /// The mock segment.
        segment: usize,
        /// `segment + 1`, the index of the repeated offset.
        next: usize,
        /// The repeated offset.
        offset: i64,
    },
    /// Total length of a [`crate::SeqLens`] does not fit the int32 offsets.
    #[error("sequence lengths sum to {total}, which does not fit int32 cu_seqlens")]
    TotalLengthOverflow {
        /// The sum of the lengths.
        total: u64,
    },

    // ---- attention ----------------------------------------------------------------------
    /// Query heads must be a multiple of key/value heads (MHA, GQA, MQA).
    #[error("heads ({heads}) must be a positive multiple of kv_heads ({kv_heads})")]
    HeadsNotMultiple {
        /// Query heads.
        heads: usize,
        /// Key/value heads.
        kv_heads: usize,
    },
    /// Head dimension must be positive.
    #[error("head_dim must be positive, got 0")]
    ZeroHeadDim,
    /// A tensor does not have the element count its shape implies.
    #[error("{key} has {len} elements, expected {expected} ({shape})")]
    ShapeMismatch {
        /// Which tensor.
        key: &'static str,
        /// Elements given.
        len: usize,
        /// Elements expected.
        expected: usize,
        /// The shape that implies `expected`, in words.
        shape: String,
    },
    /// A packed tensor must hold a whole number of token rows.
    #[error(
        "{key} has {len} elements, which is not a whole number of token rows of {row} elements (heads × head_dim)"
    )]
    RaggedTensor {
        /// Which tensor.
        key: &'static str,
        /// Elements given.
        len: usize,
        /// Elements per token row.
        row: usize,
    },
    /// Query and key offsets must describe the same segments.
    #[error("cu_seqlens_q has {q} segments but cu_seqlens_k has {k}")]
    AttnSegmentCountMismatch {
        /// Segments in the query offsets.
        q: usize,
        /// Segments in the key offsets.
        k: usize,
    },
    /// Offsets address token rows past the end of a tensor.
    #[error("cu_seqlens for {key} addresses {needed} tokens but {key} holds {tokens} token rows")]
    TokensBeyondTensor {
        /// Which tensor.
        key: &'static str,
        /// The last offset (tokens addressed).
        needed: usize,
        /// Token rows the tensor holds.
        tokens: usize,
    },

    // ---- loss ---------------------------------------------------------------------------
    /// A label is neither -100 nor a vocabulary index.
    #[error("labels[{index}]={label} is outside the vocabulary [0, {vocab}) and is not -100")]
    LabelOutOfRange {
        /// Flat token index.
        index: usize,
        /// The label.
        label: i64,
        /// Vocabulary size.
        vocab: usize,
    },
    /// The vocabulary must have at least one entry.
    #[error("vocab must be positive, got 0")]
    ZeroVocab,

    // ---- collate (thd::collate) ---------------------------------------------------------
    /// A collator was given no examples (or a BSHD batch with no sequences).
    #[error("{collator}: the batch has no examples; pass at least one")]
    NoExamples {
        /// The collator or conversion that needed one.
        collator: &'static str,
    },
    /// An example has no tokens: it would become a zero-length segment with a dangling label.
    #[error("example {index} has no tokens; drop it before collating")]
    EmptyExample {
        /// Position of the example in the batch.
        index: usize,
    },
    /// An example's labels do not line up with its tokens.
    #[error("example {index} has {labels} labels but {input_ids} input_ids")]
    ExampleLabelsLength {
        /// Position of the example in the batch.
        index: usize,
        /// Number of labels.
        labels: usize,
        /// Number of tokens.
        input_ids: usize,
    },
    /// Static padding to `max_seq_length` would have to truncate.
    #[error(
        "the pack holds {tokens} tokens but max_seq_length is {max_seq_length}; padding never truncates: raise max_seq_length, pack fewer examples, or use Overflow::LeaveUnpadded"
    )]
    PackOverMaxLength {
        /// Tokens in the pack.
        tokens: usize,
        /// The static length asked for.
        max_seq_length: usize,
    },
    /// A padding multiple, divisibility factor or chunk size of 0.
    #[error("{name} must be positive, got 0")]
    ZeroFactor {
        /// The option at fault, e.g. `pad_to_multiple_of`.
        name: &'static str,
    },
    /// Tokens past the last offset belong to no segment, so a step that appends or moves
    /// segments would misplace them.
    #[error(
        "{op}: offsets cover {covered} of {tokens} tokens; every token must belong to a segment (drop the static padding first)"
    )]
    UncoveredTokens {
        /// The operation that needs full coverage.
        op: &'static str,
        /// Tokens the (storage) offsets cover.
        covered: usize,
        /// Tokens in the batch.
        tokens: usize,
    },
    /// Per-sequence CP padding applies to a batch whose segments are not padded yet.
    #[error("{op}: the batch already has cu_seqlens_padded; pad each sequence once")]
    AlreadyPadded {
        /// The operation that was asked for.
        op: &'static str,
    },
    /// A per-sequence length in `seq_lens`/`seq_lens_padded` is negative and not the sentinel.
    #[error("{key}[{row}][{col}]={value} is negative and not the sentinel {sentinel}")]
    NegativeSeqLen {
        /// `seq_lens` or `seq_lens_padded`.
        key: &'static str,
        /// Row (pack) index.
        row: usize,
        /// Column (sequence-in-pack) index.
        col: usize,
        /// The value found.
        value: i64,
        /// The sentinel that marks an empty slot.
        sentinel: i64,
    },
    /// `seq_lens` and `seq_lens_padded` must mark the same slots as empty.
    #[error(
        "seq_lens[{row}][{col}]={real} but seq_lens_padded[{row}][{col}]={padded}: the sentinel must sit in the same slots of both"
    )]
    SentinelMismatch {
        /// Row (pack) index.
        row: usize,
        /// Column index.
        col: usize,
        /// `seq_lens` value.
        real: i64,
        /// `seq_lens_padded` value.
        padded: i64,
    },
    /// The slots of a BSHD row must tile it: every row but the last exactly, the last at most.
    #[error(
        "row {row}'s sequence slots sum to {slots} tokens but rows hold {seq_len}; a row's slots must fill it (the last row's may stop short), or offsets address the wrong tokens"
    )]
    RowSlotsMismatch {
        /// Row (pack) index.
        row: usize,
        /// Σ of the row's padded (or real) lengths.
        slots: i64,
        /// Row length `S`.
        seq_len: usize,
    },
    /// Splitting rows into chunks would drop the remainder rows.
    #[error(
        "{rows} rows do not split into {num_chunks} equal chunks; the remainder rows would be dropped"
    )]
    RowsNotDivisible {
        /// Rows in the batch.
        rows: usize,
        /// Chunks asked for.
        num_chunks: usize,
    },
    /// An input the operation cannot do without is absent.
    #[error("{op} needs {key}, which is absent")]
    MissingKey {
        /// The key, e.g. `seq_lens`.
        key: &'static str,
        /// The operation that needs it.
        op: &'static str,
    },
    /// Without pack metadata, pad ids must form one trailing run, or content would be masked.
    #[error(
        "input_ids[{index}]={pad_token_id} is the pad id but a non-pad token follows it; the pad id also occurs as content, so pass seq_lens instead"
    )]
    PadIdInContent {
        /// First pad position that is followed by a non-pad token.
        index: usize,
        /// The pad id.
        pad_token_id: i64,
    },

    // ---- context parallelism (thd::cp) --------------------------------------------------
    /// The context-parallel size must be at least 1.
    #[error("cp size must be positive, got 0")]
    ZeroCpSize,
    /// A rank outside `0..cp`.
    #[error("cp rank {rank} is out of range for cp size {cp}")]
    CpRankOutOfRange {
        /// The rank asked for.
        rank: usize,
        /// The CP size.
        cp: usize,
    },
    /// Zigzag sharding cuts each sequence into `2·cp` equal chunks; a remainder would be dropped.
    #[error(
        "segment {segment} has (padded) length {length}, not divisible by 2*cp = {divisor}; pad each sequence to a multiple of {divisor} (collate::pad_for_cp) instead of truncating"
    )]
    CpLengthNotDivisible {
        /// Segment index.
        segment: usize,
        /// Its storage length.
        length: usize,
        /// `2·cp`.
        divisor: usize,
    },
    /// Reassembly needs exactly one shard per rank.
    #[error("reassembly needs one shard per rank: got {got} shards for cp size {cp}")]
    CpShardCount {
        /// Shards given.
        got: usize,
        /// The CP size.
        cp: usize,
    },
    /// A shard does not have the length its rank holds.
    #[error("shard of rank {rank} has {len} elements, expected {expected}")]
    CpShardLength {
        /// The rank.
        rank: usize,
        /// Elements given.
        len: usize,
        /// Elements the rank holds (tokens / cp × row width).
        expected: usize,
    },

    // ---- packers (thd::pack) ------------------------------------------------------------
    /// A pack must be able to hold at least one token.
    #[error("{packer}: pack capacity must be positive, got 0")]
    ZeroCapacity {
        /// The packer that was configured.
        packer: &'static str,
    },
    /// An example does not fit an empty pack and the over-length policy is `Error`.
    #[error(
        "example {id} needs {len} tokens on the {branch} branch but a pack holds {capacity}; raise the capacity, or use OverLength::Drop to drop it with a reported count"
    )]
    ExampleTooLong {
        /// The example's id.
        id: u64,
        /// Tokens it needs on that branch (padded to the packer's divisibility, if any).
        len: u64,
        /// `single`, `chosen` or `rejected`.
        branch: &'static str,
        /// The pack capacity.
        capacity: u32,
    },
    /// The strategy packs single sequences only.
    #[error(
        "{packer} packs single sequences, but example {id} is a chosen/rejected pair; use sequential_budget or a bin packer for DPO pairs"
    )]
    PairNotSupported {
        /// The packer.
        packer: &'static str,
        /// The pair's id.
        id: u64,
    },
    /// A pack holds more than the capacity on some branch.
    #[error(
        "pack {pack} holds {load} tokens on the {branch} branch, more than the capacity {capacity}"
    )]
    PackOverCapacity {
        /// Index of the pack.
        pack: usize,
        /// `single`, `chosen` or `rejected`.
        branch: &'static str,
        /// Its storage on that branch.
        load: u64,
        /// The capacity.
        capacity: u32,
    },

    // ---- accounting (thd::metrics) ------------------------------------------------------
    /// A model dimension that every FLOPs formula multiplies by is zero.
    #[error("model dims: {field} must be positive, got 0")]
    ModelDimZero {
        /// The field at fault.
        field: &'static str,
    },
    /// The MLP has 2 projections (up, down) or 3 (gate, up, down: SwiGLU).
    #[error("model dims: mlp_projections must be 2 or 3, got {got}")]
    MlpProjections {
        /// The value given.
        got: u32,
    },
    /// The padded vocabulary is storage for the real one, so it can never be smaller.
    #[error("model dims: padded_vocab ({padded_vocab}) must be >= vocab ({vocab})")]
    PaddedVocabTooSmall {
        /// Vocabulary size.
        vocab: u64,
        /// Padded vocabulary size.
        padded_vocab: u64,
    },
    /// An argmin index points past the offsets it truncates.
    #[error("{name}_argmin={argmin} is past the end of {name} ({len} entries)")]
    ArgminOutOfRange {
        /// Which offsets: `cu_seqlens` or `cu_seqlens_unpadded`.
        name: &'static str,
        /// The argmin given.
        argmin: usize,
        /// Number of offsets.
        len: usize,
    },
    /// Cross-attention pairs query sequence `i` with key/value sequence `i`.
    #[error(
        "cross-attention needs matching query and key/value sequences: {query} query vs {key} key/value sequences"
    )]
    CrossAttentionSeqCount {
        /// Query sub-sequences.
        query: usize,
        /// Key/value sub-sequences.
        key: usize,
    },
    /// A rate or time must be a positive, finite number.
    #[error("{quantity} must be positive and finite, got {value}")]
    NotPositive {
        /// What was given, e.g. `step_time_s` or `peak_flops_per_gpu`.
        quantity: &'static str,
        /// The value, as printed.
        value: String,
    },
    /// A model's projection width does not fit `u64` (`heads · head_dim`): no formula can use it.
    #[error("model dims: {what} = {left} · {right} does not fit u64")]
    ModelDimOverflow {
        /// The product, e.g. `heads·head_dim`.
        what: &'static str,
        /// Its left factor.
        left: u64,
        /// Its right factor.
        right: u64,
    },
    /// A FLOPs count past `u128`: the model dimensions or token counts are past any real step.
    /// Reported instead of a wrapped (silently wrong) count.
    #[error(
        "{formula}: the FLOPs count does not fit u128 (model dims and token counts past any real step)"
    )]
    FlopsOverflow {
        /// The formula, e.g. `megatron_flops`.
        formula: &'static str,
    },
    /// A rate that is not a finite number: its divisor (a step time, a peak) is so small that
    /// the quotient overflows `f64`. Reported instead of `inf`.
    #[error("{quantity} is not a finite number ({value}): {divisor} is too small to divide by")]
    RateNotFinite {
        /// The rate, e.g. `flops_per_second_per_gpu`.
        quantity: &'static str,
        /// The rate as computed (`inf`, `NaN`).
        value: String,
        /// The input at fault: `time_s` or `peak_flops_per_gpu`.
        divisor: &'static str,
    },
    /// A count that divides or repeats must be positive.
    #[error("{quantity} must be positive, got 0")]
    ZeroCount {
        /// What was given, e.g. `num_gpus`, `cp_size`, `data_parallel_size`, `batch_size`.
        quantity: &'static str,
    },
    /// A batch has nothing the formula can measure.
    #[error("{context}: the batch is empty ({what})")]
    EmptyBatch {
        /// The function that needed a non-empty batch.
        context: &'static str,
        /// What was missing, e.g. `no cu_seq_lens_q, attention_mask or input_ids shape`.
        what: &'static str,
    },
    /// A mask row holds a value other than 0 or 1.
    #[error("attention_mask[{row}][{col}]={value} must be 0 or 1")]
    MaskValue {
        /// Row (sample) index.
        row: usize,
        /// Column (token) index.
        col: usize,
        /// The value found.
        value: i64,
    },
    /// All rows of a BSHD tensor must have the same length.
    #[error("attention_mask row {row} has {len} entries but row 0 has {expected}")]
    RaggedMask {
        /// The row at fault.
        row: usize,
        /// Its length.
        len: usize,
        /// Row 0's length.
        expected: usize,
    },
}
