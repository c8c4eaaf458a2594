//! No offsets: per-token sample numbers, LLM Foundry's `sequence_id` (0, 1, 2 … per sample of
//! a row, -1 on padding) or axolotl's multipack `attention_mask` (1, 2, 3 … per pack, 0 on
//! padding).

use safetensors::Dtype;

use super::common::{same_tokens, token_rows};
use super::hf::{self, Boundaries};
use super::{Format, Input, Read};
use crate::profile::{Dialect, MaskFact};
use crate::tensors::{BatchFile, Ints};
use crate::{Error, Result};
use rules::words::plural;

/// Documents from runs of one sample number.
pub struct SampleNumbers;

fn numbered(input: &Input<'_>) -> Result<Option<(String, Vec<i64>, i64)>> {
    let tokens = input.file.entry("input_ids").map_or(0, |e| e.shape.iter().product());
    sample_numbers(
        input.file,
        "input_ids",
        tokens,
        input.facts.attention_mask == Some(MaskFact::SampleNumbers),
    )
}

impl Format for SampleNumbers {
    fn name(&self) -> &'static str {
        "sample-numbers"
    }
    fn family(&self) -> Option<Dialect> {
        Some(Dialect::Hf)
    }
    fn summary(&self) -> &'static str {
        "no offsets: per-token sample numbers, `sequence_id` (-1 on padding) or an integer `attention_mask` numbering the samples (0 on padding)"
    }
    fn claims(&self, input: &Input<'_>) -> Result<bool> {
        Ok(hf::no_offsets(input.file) && numbered(input)?.is_some())
    }
    fn read(&self, input: &Input<'_>) -> Result<Read> {
        let Some((key, numbers, pad)) = numbered(input)? else {
            return Err(hf::unread(input));
        };
        hf::read_single(input, move |_, rows, tokens, _| {
            let (real, storage) = sample_runs(&key, &numbers, pad, rows, tokens)?;
            let note = format!(
                "no offsets: {} read from the sample numbers of `{key}` ({pad} on padding{})",
                plural(real.windows(2).filter(|w| w[1] > w[0]).count(), "document"),
                if real.windows(2).any(|w| w[1] == w[0]) {
                    "; left padding is an empty segment of its own"
                } else {
                    ""
                }
            );
            Ok(Boundaries {
                cu: real.into(),
                storage: Some(storage),
                real_mask: Some(numbers.iter().map(|&x| x != pad).collect()),
                names: Some((
                    format!("{key} (sample numbers)"),
                    format!("{key} (samples, padding at each row's end)"),
                )),
                notes: vec![note],
                ..Boundaries::default()
            })
        })
    }
}

/// Per-token sample numbers, if the file has them: `sequence_id` (LLM Foundry's binpacking,
/// `llmfoundry/data/packing.py`: 0, 1, 2 … per sample of a row, -1 on padding), or an integer
/// `attention_mask` holding a value above 1, or any integer one under a profile whose
/// `attention_mask = "sample-numbers"`
/// (axolotl's multipack collators: 1, 2, 3 … per sample, 0 on padding; a pack of one sample is
/// all ones). Returns the key, the numbers and the padding value.
///
/// # Errors
/// A tensor of another length than the tokens.
pub(super) fn sample_numbers(
    file: &BatchFile,
    ids_key: &str,
    tokens: usize,
    numbered_mask: bool,
) -> Result<Option<(String, Vec<i64>, i64)>> {
    for (key, pad) in [("sequence_id", -1), ("attention_mask", 0)] {
        if !file.contains(key) {
            continue;
        }
        let integer = file.entry(key).is_some_and(|e| {
            !matches!(e.dtype, Dtype::F64 | Dtype::F32 | Dtype::F16 | Dtype::BF16 | Dtype::BOOL)
        });
        if !integer {
            continue;
        }
        let Ints { shape, values } = file.ints(key)?;
        token_rows(key, &shape)?;
        same_tokens(key, values.len(), ids_key, tokens)?;
        if key == "sequence_id" || numbered_mask || values.iter().any(|&v| v > 1) {
            return Ok(Some((key.to_owned(), values, pad)));
        }
    }
    Ok(None)
}

/// Documents from per-token sample numbers: within each row, a document is a run of one number
/// other than `pad`. Padding after a row's samples belongs to the slot of its last sample;
/// padding before them (left padding) is an empty document of its own. Returns the real and the
/// storage offsets.
///
/// # Errors
/// [`Error::Value`] naming the first token of a sample between padding, or a number below the
/// padding value.
pub(super) fn sample_runs(
    key: &str,
    numbers: &[i64],
    pad: i64,
    rows: usize,
    tokens: usize,
) -> Result<(Vec<i64>, Vec<i64>)> {
    let width = tokens.checked_div(rows).unwrap_or(0);
    let (mut real, mut storage) = (vec![0i64], vec![0i64]);
    for r in 0..rows {
        let (row_start, row_end) = (r * width, r * width + width);
        let lead = numbers[row_start..row_end].iter().take_while(|&&x| x == pad).count();
        if lead > 0 {
            // Left padding (the collator follows the tokenizer's padding side), or a row of
            // padding only: an empty document whose slot is the padding.
            real.push(real[real.len() - 1]);
            storage.push((row_start + lead) as i64);
        }
        let start = row_start + lead;
        let row = &numbers[start..row_end];
        let samples = row.iter().take_while(|&&x| x != pad).count();
        if let Some(j) = row[samples..].iter().position(|&x| x != pad) {
            return Err(Error::Value {
                key: key.to_owned(),
                index: start + samples + j,
                value: row[samples + j].to_string(),
                expected: "the padding value before or after a row's samples only (padding \
                           between samples is not read yet)",
            });
        }
        if let Some(j) = row[..samples].iter().position(|&x| x < pad) {
            return Err(Error::Value {
                key: key.to_owned(),
                index: start + j,
                value: row[j].to_string(),
                expected: "a sample number (at least the padding value)",
            });
        }
        let mut t = 0;
        while t < samples {
            let n = row[t..samples].iter().take_while(|&&x| x == row[t]).count();
            real.push(real[real.len() - 1] + n as i64);
            t += n;
            // The padding after a row's last sample is that sample's slot padding.
            let end = if t == samples { row_end } else { start + t };
            storage.push(end as i64);
        }
    }
    Ok((real, storage))
}
