//! The batch reader on arbitrary bytes: parse, detect the dialect, build the packs and run every
//! check. Any panic is a bug: malformed input must come back as a `reader::Error` (exit 2).
//!
//! The first byte picks the options, so the fuzzer also explores forced dialects, label
//! conventions and the CP / padding checks.

#![no_main]

use libfuzzer_sys::fuzz_target;
use reader::{CheckOptions, Dialect, ReadOptions, check_bytes};

fuzz_target!(|data: &[u8]| {
    let (opts, bytes) = match data.split_first() {
        Some((&b, rest)) if b >= 0xf0 => (b, rest),
        _ => (0, data),
    };
    let read = ReadOptions {
        dialect: match opts & 0x3 {
            1 => Some(Dialect::Hf),
            2 => Some(Dialect::Te),
            3 => Some(Dialect::Dpo),
            _ => None,
        },
        ..ReadOptions::default()
    };
    // `..default()`: options added later keep this target building.
    let check = CheckOptions {
        cp_size: (opts & 0x4 != 0).then_some(2),
        pad_to_multiple_of: (opts & 0x8 != 0).then_some(8),
        ..CheckOptions::default()
    };
    if let Ok(report) = check_bytes(bytes.to_vec(), &read, &check) {
        let _ = report.violated();
        let _ = serde_json_len(&report);
    }
});

fn serde_json_len(report: &reader::FileReport) -> usize {
    let mut s = String::new();
    report.render(&mut s, true);
    s.len()
}
