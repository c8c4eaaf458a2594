//! The subprocess adapter protocol (version 1): JSON lines, one request per line on the
//! adapter's stdin, one response per line on its stdout. `docs/protocol.md` is the user-facing
//! description; this module is the definition.
//!
//! ```text
//! → {"thdcheck":1,"id":0,"kind":"packer","capacity":16,"seed":7,"examples":[{"id":0,"len":5},{"id":1,"len":12}]}
//! ← {"thdcheck":1,"id":0,"packs":[[0],[1]],"dropped":[]}
//! → {"thdcheck":1,"id":1,"kind":"collator","mode":"sft","max_seq_length":null,"examples":[{"input_ids":[3,4,5]}]}
//! ← {"thdcheck":1,"id":1,"batch":{"input_ids":[[3,4,5]],"labels":[[-100,4,5]],"cu_seq_lens_q":[0,3]}}
//! ← {"thdcheck":1,"id":1,"error":"Traceback ..."}     (the adapter's function raised)
//! → {"thdcheck":1,"id":2,"kind":"loss","cp_size":2,"vocab":2,"ranks":[{"cp_rank":0,"labels":[0,-100],"logits":[[-1.65,0.52],[-0.08,2.81]]},{"cp_rank":1,"labels":[0,0],"logits":[[-2.8,2.25],[-2.1,2.8]]}]}
//! ← {"thdcheck":1,"id":2,"loss":4.080641481543856,"parts":[{"nll":2.278116569469779,"count":1},{"nll":9.96380787516179,"count":2}],"n_valid_tokens":3}
//! → {"thdcheck":1,"id":3,"kind":"cp-split","cp_size":2,"input_ids":[1000,1001,1002,1003],"labels":[1000,1001,1002,-100],"position_ids":[0,1,2,3],"cu_seqlens":[0,3],"cu_seqlens_padded":[0,4]}
//! ← {"thdcheck":1,"id":3,"ranks":[{"input_ids":[1000,1003],"labels":[1001,-100],"position_ids":[0,3]},{"input_ids":[1001,1002],"labels":[1002,-100],"position_ids":[1,2]}]}
//! ← {"thdcheck":1,"id":3,"rejected":"ValueError: ..."}   (a splitter refused the layout)
//! ```
//!
//! A loss case is one global batch sent at every CP size (one request each, [`LossRequest`]);
//! a cp-split case one batch and one CP size ([`CpSplitRequest`]).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use reader::tensors::write_raw;
use reader::{Error, Result};

/// The protocol version every request and response carries under the key `thdcheck`.
pub const VERSION: u64 = 1;

/// The protocol version of a packer session's requests and answers (`fuzz packer --session`:
/// `start`, `push`, `end_epoch`, `finish`); one-shot packer requests and every other kind are
/// version [`VERSION`].
pub const SESSION_VERSION: u64 = 2;

/// One example offered to a packer: `{"id": 0, "len": 9}`, or for a DPO pair (`--pairs`)
/// `{"id": 0, "chosen": 9, "rejected": 4}`.
pub type PackerExample = thd::pack::Example;

/// What configures a packer beyond its capacity; each key is sent only when set, so a packer
/// that knows none of them sees the requests of protocol version 1 unchanged.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PackerOptions {
    /// Every example (and piece) takes `⌈len / m⌉·m` tokens of the capacity (bionemo's
    /// `pad_sequences_to_be_divisible_by`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pad_to_multiple_of: Option<u64>,
    /// At most this many entries per pack (open-instruct's loader: the per-rank batch size).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_seqs_per_pack: Option<u64>,
    /// Packs are dealt to this many data-parallel ranks; the answer says which rank gets each
    /// pack (`ranks`), and every rank gets as many packs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dp_size: Option<u64>,
    /// At least this many packs (a balanced partitioner's `k_partitions`, open-instruct's
    /// `min_num_batches`): as many as there are examples to fill them when there are fewer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_packs: Option<u64>,
}

/// A packer request: pack these examples into packs of at most `capacity` tokens.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PackerRequest {
    /// Pack capacity in tokens.
    pub capacity: u64,
    /// Seed for any shuffling the packer does (same request, same answer).
    pub seed: u64,
    /// The examples, in dataset order.
    pub examples: Vec<PackerExample>,
    /// Options beyond the capacity.
    #[serde(flatten)]
    pub options: PackerOptions,
}

/// One request of a packer session (protocol version [`SESSION_VERSION`]): the packer keeps its
/// state from `start` to `finish`, across calls and epochs.
///
/// ```text
/// → {"thdcheck":2,"id":0,"kind":"packer","op":"start","capacity":20,"seed":0}
/// → {"thdcheck":2,"id":1,"kind":"packer","op":"push","epoch":0,"examples":[{"id":0,"len":9}]}
/// → {"thdcheck":2,"id":2,"kind":"packer","op":"end_epoch","epoch":0}
/// → {"thdcheck":2,"id":3,"kind":"packer","op":"finish"}
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum PackerSessionRequest {
    /// A new packer (any earlier one is gone).
    Start {
        /// Pack capacity in tokens.
        capacity: u64,
        /// Seed for any shuffling the packer does.
        seed: u64,
        /// Options beyond the capacity.
        #[serde(flatten)]
        options: PackerOptions,
    },
    /// More examples of the current epoch (ids unique over the session).
    Push {
        /// The epoch, from 0.
        epoch: u64,
        /// The examples, in stream order.
        examples: Vec<PackerExample>,
    },
    /// The epoch's data is exhausted.
    EndEpoch {
        /// The epoch that ends.
        epoch: u64,
    },
    /// No more data: emit everything still held.
    Finish,
}

/// A packer's answer (to a one-shot request, or to one call of a session): packs of example
/// ids, the ids it deliberately dropped, and what it declares of them; or a refusal.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PackerResponse {
    /// Packs, each a list of example ids or pieces of examples (absent in a refusal, and
    /// empty when a session call emits nothing).
    #[serde(default)]
    pub packs: Option<Vec<Vec<PackEntry>>>,
    /// Examples dropped on purpose (e.g. longer than the capacity); anything else missing is
    /// a lost example.
    #[serde(default)]
    pub dropped: Vec<u64>,
    /// Examples longer than the capacity that the packer placed alone in a pack of their own,
    /// on purpose (open-instruct GRPO `pack_sequences`); checked: each is longer than the
    /// capacity. Additive to protocol version 1: absent means none.
    #[serde(default)]
    pub oversize: Vec<u64>,
    /// Indices into `packs` of the packs that repeat earlier examples on purpose (a padding
    /// batch, so every rank gets the same number of batches: open-instruct's loader with
    /// `drop_last=False`); checked for capacity, excluded from conservation.
    #[serde(default)]
    pub padding: Vec<usize>,
    /// With `dp_size`: the data-parallel rank of every pack, parallel to `packs`.
    #[serde(default)]
    pub ranks: Option<Vec<u64>>,
    /// The packer refused the request (bionemo's `TokenPackingDataset` raises on an example
    /// longer than the capacity); accepted only for a request it could not pack.
    #[serde(default)]
    pub rejected: Option<Shown>,
    /// How many examples the packer still holds (a session's `finish`: must be 0).
    #[serde(default)]
    pub pending: Option<u64>,
}

impl PackerResponse {
    /// The packs (none in a refusal).
    pub fn packs(&self) -> &[Vec<PackEntry>] {
        self.packs.as_deref().unwrap_or_default()
    }
}

/// One entry of a pack: a whole example (its id), or a piece of one split across packs,
/// `[id, start, end]` (tokens `start..end` of the example; bionemo's `split_samples`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum PackEntry {
    /// The whole example.
    Whole(u64),
    /// Tokens `start..end` of the example.
    Piece(u64, u64, u64),
}

impl PackEntry {
    /// The example's id.
    pub fn id(self) -> u64 {
        match self {
            PackEntry::Whole(id) | PackEntry::Piece(id, ..) => id,
        }
    }
}

/// One example offered to a collator.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum CollatorExample {
    /// A preference pair (mode `dpo`).
    Pair {
        /// Chosen tokens.
        chosen_input_ids: Vec<i64>,
        /// Rejected tokens.
        rejected_input_ids: Vec<i64>,
        /// Dataset index.
        index: i64,
    },
    /// One sequence (mode `sft`).
    Single {
        /// Tokens.
        input_ids: Vec<i64>,
    },
}

/// Which collator contract a request exercises.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum CollatorMode {
    /// Flatten single sequences into one pack.
    Sft,
    /// Flatten chosen and rejected branches and concatenate them (open-instruct DPO keys).
    Dpo,
}

/// A collator request: collate these examples into one batch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CollatorRequest {
    /// The contract.
    pub mode: CollatorMode,
    /// Static pack length (per branch for DPO); the examples always fit it.
    pub max_seq_length: Option<u64>,
    /// The examples, in order.
    pub examples: Vec<CollatorExample>,
}

/// Wraps a payload in the envelope: `{"thdcheck": 1, "id": id, "kind": kind, ...payload}`.
///
/// # Example
/// ```
/// use engine::protocol::{PackerExample, PackerRequest, envelope};
/// let req = PackerRequest {
///     capacity: 8, seed: 0, examples: vec![PackerExample::single(0, 3)], options: Default::default(),
/// };
/// let line = envelope(4, "packer", &req).to_string();
/// assert_eq!(line, r#"{"capacity":8,"examples":[{"id":0,"len":3}],"id":4,"kind":"packer","seed":0,"thdcheck":1}"#);
/// ```
pub fn envelope<T: Serialize>(id: u64, kind: &str, payload: &T) -> Value {
    let mut v = serde_json::to_value(payload).unwrap_or(Value::Null);
    if let Value::Object(m) = &mut v {
        // A packer session's payload names its own version (2).
        m.entry("thdcheck").or_insert(VERSION.into());
        m.insert("id".into(), id.into());
        m.insert("kind".into(), kind.into());
    }
    v
}

/// Why a response line is not a valid response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BadResponse {
    /// Not JSON at all.
    NotJson(String),
    /// JSON, but not what the protocol says (version, id, fields).
    Schema(String),
    /// The adapter's own function raised; the adapter reported it.
    AdapterError(String),
    /// The answer carries an earlier request's id: the adapter wrote two answers to an
    /// earlier request (a protocol fault, reported as `schema`).
    Stale(String),
}

/// What an answer may hold beyond what its request holds, in JSON values ([`json_values`]):
/// the answers to the generated requests hold far less (a collator padding every batch to a
/// fixed length of a few thousand tokens included).
pub const ANSWER_VALUES_SLACK: usize = 1 << 20;

/// What an answer may hold per JSON value of its request: a packer's pieces or a collator's
/// keys, each some values per token of the request, stay well under it.
pub const ANSWER_VALUES_PER_REQUEST_VALUE: usize = 16;

/// How many JSON values a line holds, as an upper bound: its `[`, `{` and `,` outside strings
/// (each opens an array or an object, or separates one more element), plus one. One pass over
/// the bytes, nothing allocated: what decoding the line would cost is known before it is
/// decoded (every value costs a few dozen bytes decoded, an empty list `[]` 24).
///
/// # Example
/// ```
/// use engine::protocol::json_values;
/// assert_eq!(json_values(r#"{"packs":[[],[],[]],"note":"a,b[c"}"#), 9);
/// ```
pub fn json_values(line: &str) -> usize {
    let (mut n, mut in_string, mut escaped) = (1usize, false, false);
    for &b in line.as_bytes() {
        if in_string {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
        } else {
            match b {
                b'"' => in_string = true,
                b'[' | b'{' | b',' => n += 1,
                _ => {}
            }
        }
    }
    n
}

/// The most JSON values an answer to the request line `request` may hold
/// ([`ANSWER_VALUES_SLACK`] + [`ANSWER_VALUES_PER_REQUEST_VALUE`] per value of the request).
pub fn answer_values_limit(request: &str) -> usize {
    json_values(request)
        .saturating_mul(ANSWER_VALUES_PER_REQUEST_VALUE)
        .saturating_add(ANSWER_VALUES_SLACK)
}

/// Checks that an answer line holds at most `limit` JSON values before anything decodes it, so
/// that what an answer costs in memory is bounded by its request and not only by the line's
/// length (a line of `[],` costs 24 bytes per 3 decoded, a `serde_json::Value` of it 32 times
/// the line).
///
/// # Errors
/// [`BadResponse::NotJson`] if a line over the limit is not JSON (checked without decoding it),
/// [`BadResponse::Schema`] if it is.
pub fn check_answer_size(line: &str, limit: usize) -> std::result::Result<(), BadResponse> {
    let n = json_values(line);
    if n <= limit {
        return Ok(());
    }
    serde_json::from_str::<serde::de::IgnoredAny>(line).map_err(|e| not_json(&e, line))?;
    Err(BadResponse::Schema(format!(
        "the answer holds {n} JSON values, more than the {limit} an answer to this request may \
         hold ({ANSWER_VALUES_SLACK} + {ANSWER_VALUES_PER_REQUEST_VALUE} per value of the \
         request); it is not decoded"
    )))
}

fn not_json(e: &serde_json::Error, line: &str) -> BadResponse {
    let shown: String = line.chars().take(120).collect();
    BadResponse::NotJson(format!("{e} in {shown:?}"))
}

/// A string field of an answer that is only shown (an error, a refusal): at most
/// [`SHOWN_CHARS`] characters are kept, so a huge one costs nothing beyond its line.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct Shown(pub String);

/// The characters of a [`Shown`] string kept.
pub const SHOWN_CHARS: usize = 4000;

impl std::fmt::Display for Shown {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for Shown {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Shown;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> std::result::Result<Shown, E> {
                Ok(Shown(match v.char_indices().nth(SHOWN_CHARS) {
                    None => v.to_owned(),
                    Some((cut, _)) => format!("{}… ({} bytes in all)", &v[..cut], v.len()),
                }))
            }
            fn visit_bool<E>(self, v: bool) -> std::result::Result<Shown, E> {
                Ok(Shown(v.to_string()))
            }
            fn visit_i64<E>(self, v: i64) -> std::result::Result<Shown, E> {
                Ok(Shown(v.to_string()))
            }
            fn visit_u64<E>(self, v: u64) -> std::result::Result<Shown, E> {
                Ok(Shown(v.to_string()))
            }
            fn visit_f64<E>(self, v: f64) -> std::result::Result<Shown, E> {
                Ok(Shown(v.to_string()))
            }
            fn visit_unit<E>(self) -> std::result::Result<Shown, E> {
                Ok(Shown("null".into()))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                seq: A,
            ) -> std::result::Result<Shown, A::Error> {
                let v = Value::deserialize(serde::de::value::SeqAccessDeserializer::new(seq))?;
                Ok(Shown(v.to_string()))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                map: A,
            ) -> std::result::Result<Shown, A::Error> {
                let v = Value::deserialize(serde::de::value::MapAccessDeserializer::new(map))?;
                Ok(Shown(v.to_string()))
            }
        }
        d.deserialize_any(V)
    }
}

/// A response's envelope, read without decoding the rest of the line.
#[derive(Deserialize)]
struct Envelope {
    #[serde(default)]
    thdcheck: Option<Value>,
    #[serde(default)]
    id: Option<Value>,
    #[serde(default)]
    error: Option<Shown>,
    #[serde(default)]
    invalid: Option<Shown>,
}

/// Reads a response line to the request `id` of protocol `version` (the request's: [`VERSION`],
/// or [`SESSION_VERSION`] in a packer session): checks the envelope (version, id) and decodes
/// the payload straight into `T` (never through a `serde_json::Value` of the whole line, which
/// costs 30 times it). Request ids grow: an answer with a smaller id is an earlier request's.
///
/// # Errors
/// [`BadResponse`] saying what is wrong with the line.
pub fn parse_response<T: for<'de> Deserialize<'de>>(
    line: &str,
    id: u64,
    version: u64,
) -> std::result::Result<T, BadResponse> {
    let schema = |e: serde_json::Error| {
        if e.is_data() { BadResponse::Schema(e.to_string()) } else { not_json(&e, line) }
    };
    if !line.trim_start().starts_with('{') {
        serde_json::from_str::<serde::de::IgnoredAny>(line).map_err(|e| not_json(&e, line))?;
        return Err(BadResponse::Schema("the response is not a JSON object".into()));
    }
    let env: Envelope = serde_json::from_str(line).map_err(schema)?;
    match env.thdcheck.as_ref().and_then(Value::as_u64) {
        Some(v) if v == version => {}
        Some(other) => {
            return Err(BadResponse::Schema(format!(
                "protocol version {other}, expected {version}, the request's ({VERSION}, or \
                 {SESSION_VERSION} in a packer session)"
            )));
        }
        None => {
            return Err(BadResponse::Schema(
                "missing \"thdcheck\": 1 (the protocol version)".into(),
            ));
        }
    }
    match env.id.as_ref().and_then(Value::as_u64) {
        Some(got) if got == id => {}
        Some(got) if got < id => {
            return Err(BadResponse::Stale(format!(
                "response id {got}, expected {id}: request {got} was answered again, and that \
                 second answer was read as the answer to request {id} (one line per request: \
                 every later answer is out of step)"
            )));
        }
        Some(got) => return Err(BadResponse::Schema(format!("response id {got}, expected {id}"))),
        None => return Err(BadResponse::Schema("missing \"id\"".into())),
    }
    if let Some(e) = env.error {
        return Err(BadResponse::AdapterError(e.0));
    }
    // The adapter helper's word that the function's answer cannot be stated in the protocol
    // (a packer index outside the request): a schema fault, as the raw answer would be.
    if let Some(why) = env.invalid {
        return Err(BadResponse::Schema(format!("the adapter helper: {why}")));
    }
    serde_json::from_str(line).map_err(schema)
}

/// Encodes a collator's JSON batch (`{"input_ids": [[...]], "cu_seq_lens_q": [...], ...}`) as
/// the safetensors file `save_file` would have written, so that `check` reads it: integers
/// become int64 (int32 for `cu_seq*` keys), `[[...]]` a `[B, S]` tensor, a number a scalar,
/// `true`/`false` a scalar 1/0. Strings and `null` are skipped.
///
/// # Errors
/// [`Error::Value`] for a float, a ragged or deeper list, or a non-integer element.
pub fn batch_to_safetensors(batch: &serde_json::Map<String, Value>) -> Result<Vec<u8>> {
    let mut tensors: Vec<(String, safetensors::Dtype, Vec<usize>, Vec<u8>)> = Vec::new();
    for (key, value) in batch {
        let bad = |index: usize, v: &Value, expected| Error::Value {
            key: key.clone(),
            index,
            value: v.to_string(),
            expected,
        };
        let int = |index: usize, v: &Value| -> Result<i64> {
            match v {
                Value::Bool(b) => Ok(i64::from(*b)),
                _ => v.as_i64().ok_or_else(|| bad(index, v, "an integer")),
            }
        };
        let (shape, values): (Vec<usize>, Vec<i64>) = match value {
            Value::Null | Value::String(_) | Value::Object(_) => continue,
            Value::Number(_) | Value::Bool(_) => (vec![], vec![int(0, value)?]),
            Value::Array(items) if items.iter().all(|x| !x.is_array()) => (
                vec![items.len()],
                items.iter().enumerate().map(|(i, x)| int(i, x)).collect::<Result<_>>()?,
            ),
            Value::Array(rows) => {
                let width = rows.first().and_then(Value::as_array).map_or(0, Vec::len);
                let mut flat = Vec::with_capacity(rows.len() * width);
                for (r, row) in rows.iter().enumerate() {
                    let Some(row) = row.as_array().filter(|a| a.len() == width) else {
                        return Err(bad(r, row, "rows of equal length (a [B, S] tensor)"));
                    };
                    for (c, x) in row.iter().enumerate() {
                        if x.is_array() {
                            return Err(bad(r * width + c, x, "at most two dimensions"));
                        }
                        flat.push(int(r * width + c, x)?);
                    }
                }
                (vec![rows.len(), width], flat)
            }
        };
        let int32 = key.contains("cu_seq");
        let bytes: Vec<u8> = if int32 {
            values.iter().flat_map(|&v| (v as i32).to_le_bytes()).collect()
        } else {
            values.iter().flat_map(|&v| v.to_le_bytes()).collect()
        };
        let dtype = if int32 { safetensors::Dtype::I32 } else { safetensors::Dtype::I64 };
        tensors.push((key.clone(), dtype, shape, bytes));
    }
    write_raw(tensors.iter().map(|(k, d, s, b)| (k.as_str(), *d, s.clone(), b.as_slice())), &[])
}

// ---- loss: CP-local losses (CP-LOSS, TOKENS-CP) ---------------------------------------------

/// One CP rank's shard of a [`LossRequest`]: its tokens in local (zigzag) order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LossShard {
    /// The rank.
    pub cp_rank: usize,
    /// `[T/cp, vocab]`: the logits of the rank's tokens (f64).
    pub logits: Vec<Vec<f64>>,
    /// `[T/cp]`: the labels rolled on the full sequence before the split (shifted: local token
    /// `k` predicts `labels[k]`), -100 where nothing is predicted (ignored, the last token of a
    /// sequence, padding).
    pub labels: Vec<i64>,
}

/// A loss request: one global batch as every rank of a CP group of `cp_size` holds it; answer
/// the loss the pipeline would report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LossRequest {
    /// The CP size.
    pub cp_size: usize,
    /// Vocabulary size (the width of every logits row; labels are in `0..vocab` or -100).
    pub vocab: usize,
    /// Every rank's shard, rank 0 first.
    pub ranks: Vec<LossShard>,
}

/// One rank's local sums, as a loss adapter may report them.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LossPart {
    /// Σ NLL over the rank's valid labels.
    #[serde(deserialize_with = "json_f64")]
    pub nll: f64,
    /// The rank's valid labels.
    pub count: u64,
}

/// A loss response: the reduced loss, and optionally its parts and the count a logger logs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LossResponse {
    /// The loss the pipeline reports (a number, or `"NaN"`, `"Infinity"`, `"-Infinity"`).
    #[serde(deserialize_with = "json_f64")]
    pub loss: f64,
    /// Every rank's `(Σ NLL, count)`, rank 0 first, if the adapter reports them.
    #[serde(default)]
    pub parts: Option<Vec<LossPart>>,
    /// The valid-token count the pipeline would log for the batch, if it reports one.
    #[serde(default)]
    pub n_valid_tokens: Option<u64>,
    /// The dtype the loss was computed in (`float64` when not declared): its tolerance against
    /// the oracle follows it unless `--rtol` states one.
    #[serde(default)]
    pub dtype: Option<LossDtype>,
}

/// The dtype a loss adapter declares its loss was computed in (`"dtype"` of the answer; the
/// adapter helper fills it from a tensor's dtype).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LossDtype {
    /// Double precision: the oracle's arithmetic in another order.
    Float64,
    /// Single precision: DESIGN.md's loss tolerance in f32.
    Float32,
}

/// Reads a float that may be written as a number or, since JSON has no NaN, as the string
/// `"NaN"`, `"Infinity"` or `"-Infinity"`.
fn json_f64<'de, D: serde::Deserializer<'de>>(d: D) -> std::result::Result<f64, D::Error> {
    struct F64;
    impl serde::de::Visitor<'_> for F64 {
        type Value = f64;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a number, or \"NaN\", \"Infinity\", \"-Infinity\"")
        }
        fn visit_f64<E: serde::de::Error>(self, v: f64) -> std::result::Result<f64, E> {
            Ok(v)
        }
        fn visit_i64<E: serde::de::Error>(self, v: i64) -> std::result::Result<f64, E> {
            Ok(v as f64)
        }
        fn visit_u64<E: serde::de::Error>(self, v: u64) -> std::result::Result<f64, E> {
            Ok(v as f64)
        }
        fn visit_str<E: serde::de::Error>(self, v: &str) -> std::result::Result<f64, E> {
            match v {
                "NaN" => Ok(f64::NAN),
                "Infinity" => Ok(f64::INFINITY),
                "-Infinity" => Ok(f64::NEG_INFINITY),
                _ => Err(E::invalid_value(serde::de::Unexpected::Str(v), &self)),
            }
        }
    }
    d.deserialize_any(F64)
}

/// Quotes the bare tokens `NaN`, `Infinity` and `-Infinity` outside JSON strings. Python's
/// `json.dumps` writes a non-finite float that way, which is not JSON; quoted, a NaN loss is
/// read (and judged: a loss is never NaN) instead of failing as `not-json`.
///
/// # Example
/// ```
/// use engine::protocol::quote_non_finite;
/// assert_eq!(quote_non_finite(r#"{"loss": NaN, "e": "NaN"}"#), r#"{"loss": "NaN", "e": "NaN"}"#);
/// assert_eq!(quote_non_finite("[-Infinity, 1.5]"), r#"["-Infinity", 1.5]"#);
/// ```
pub fn quote_non_finite(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let (mut in_string, mut escaped) = (false, false);
    let mut rest = line;
    while let Some(c) = rest.chars().next() {
        if in_string {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            }
        } else if c == '"' {
            in_string = true;
        } else if let Some(tok) =
            ["NaN", "Infinity", "-Infinity"].into_iter().find(|t| rest.starts_with(t))
        {
            out.push('"');
            out.push_str(tok);
            out.push('"');
            rest = &rest[tok.len()..];
            continue;
        }
        out.push(c);
        rest = &rest[c.len_utf8()..];
    }
    out
}

// ---- cp-split: CP sharding (CP-SHARD) --------------------------------------------------------

/// A cp-split request: shard this packed batch over `cp_size` ranks (zigzag, labels rolled
/// before the split). Every token id is distinct: token `g` (storage order) has id
/// [`CP_SPLIT_TAG_BASE`]` + g`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpSplitRequest {
    /// The CP size.
    pub cp_size: usize,
    /// `[T]` token ids, padding included.
    pub input_ids: Vec<i64>,
    /// `[T]` labels, unshifted (Hugging Face: `labels[t]` is token `t`'s own id), -100 for
    /// ignored tokens and padding.
    pub labels: Vec<i64>,
    /// `[T]` position ids: each token's offset in its segment's slot.
    pub position_ids: Vec<i64>,
    /// `B + 1` offsets of the real lengths.
    pub cu_seqlens: Vec<i64>,
    /// `B + 1` offsets of the storage (padded) slots; equal to `cu_seqlens` when unpadded.
    pub cu_seqlens_padded: Vec<i64>,
}

/// The id of the batch's token 0 in a [`CpSplitRequest`].
pub const CP_SPLIT_TAG_BASE: i64 = 1000;

/// One rank's tensors in a [`CpSplitResponse`], in local order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpSplitShard {
    /// Local token ids.
    pub input_ids: Vec<i64>,
    /// Local labels, shifted (local token `k` predicts `labels[k]`).
    pub labels: Vec<i64>,
    /// Local position ids, if the splitter shards them.
    #[serde(default)]
    pub position_ids: Option<Vec<i64>>,
}

/// A cp-split response: every rank's tensors, or the reason the layout was rejected.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpSplitResponse {
    /// Every rank's tensors, rank 0 first.
    #[serde(default)]
    pub ranks: Option<Vec<CpSplitShard>>,
    /// Why the splitter refused the layout (allowed only when a slot is not a multiple of
    /// `2·cp`).
    #[serde(default)]
    pub rejected: Option<Shown>,
}

// ---- attention: a packed attention against the oracle (ATTN) ---------------------------------

/// `[T, heads, head_dim]` values, one list per token.
pub type Rows3 = Vec<Vec<Vec<f64>>>;

/// One CP rank's shard of an [`AttentionRequest`]: the rows it holds (zigzag: chunks `r` and
/// `2·cp − 1 − r` of every slot), in local order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AttentionShard {
    /// The rank.
    pub cp_rank: usize,
    /// `[n]` the global position id of each local row (its offset in its slot).
    pub position_ids: Vec<i64>,
    /// `[n, heads, head_dim]`.
    pub q: Rows3,
    /// `[n, kv_heads, head_dim]`.
    pub k: Rows3,
    /// `[n, kv_heads, head_dim]`.
    pub v: Rows3,
}

/// An attention request: packed q, k, v (or every CP rank's shard of them) and the layout;
/// answer the output (and optionally the log-sum-exp). Scale `1/sqrt(head_dim)`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AttentionRequest {
    /// `f32`, `bf16` or `f16`: every value of q, k and v is exactly representable in it.
    pub dtype: String,
    /// Causal within each document.
    pub causal: bool,
    /// Query heads.
    pub heads: usize,
    /// Key / value heads (GQA: `heads` is a multiple).
    pub kv_heads: usize,
    /// Head dimension.
    pub head_dim: usize,
    /// `B + 1` offsets of the real lengths.
    pub cu_seqlens: Vec<i64>,
    /// `B + 1` offsets of the storage slots (real tokens first, then padding).
    pub cu_seqlens_padded: Vec<i64>,
    /// The longest real document.
    pub max_seqlen: u32,
    /// `[T]` each token's offset in its slot.
    pub position_ids: Vec<i64>,
    /// `[T, heads, head_dim]` (without CP).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub q: Option<Rows3>,
    /// `[T, kv_heads, head_dim]` (without CP).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub k: Option<Rows3>,
    /// `[T, kv_heads, head_dim]` (without CP).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub v: Option<Rows3>,
    /// The CP size (with CP).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cp_size: Option<usize>,
    /// `zigzag` (with CP).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cp_layout: Option<String>,
    /// Every rank's shard, rank 0 first (with CP).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ranks: Option<Vec<AttentionShard>>,
}

/// A float of an answer: a number, or `"NaN"`, `"Infinity"`, `"-Infinity"`.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(transparent)]
pub struct JsonF64(#[serde(deserialize_with = "json_f64")] pub f64);

/// One rank's answer (or the whole answer without CP).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct AttentionOutput {
    /// `[n, heads, head_dim]`.
    pub out: Vec<Vec<Vec<JsonF64>>>,
    /// `[n, heads]`, natural log, if the attention returns it.
    #[serde(default)]
    pub lse: Option<Vec<Vec<JsonF64>>>,
}

/// An attention response: the output (and LSE), or every rank's (with CP).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct AttentionResponse {
    /// Without CP: `[T, heads, head_dim]`.
    #[serde(default)]
    pub out: Option<Vec<Vec<Vec<JsonF64>>>>,
    /// Without CP: `[T, heads]`, if the attention returns it.
    #[serde(default)]
    pub lse: Option<Vec<Vec<JsonF64>>>,
    /// With CP: every rank's, rank 0 first.
    #[serde(default)]
    pub ranks: Option<Vec<AttentionOutput>>,
}
