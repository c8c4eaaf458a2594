//! `thdcheck selfcheck`: every driver, every planted bug.

use super::*;

/// `selfcheck` holds for every seed, not only the default one. These seeds once failed the f32
/// FlashAttention rule: 3, 20, 30, 35, 39 and 2^64-1 on `mqa_odd_dim` (head dim 111: one
/// running f32 sum over the depth), 37 on `gqa_odd_dim`, 129 on `keys_empty` (the exp
/// polynomial added 1 before the small terms, and `o · (1/l)` rounded twice).
#[test]
fn selfcheck_holds_on_the_seeds_that_once_failed() {
    for seed in ["0", "3", "20", "30", "35", "37", "39", "129", "18446744073709551615"] {
        let out = thdcheck(["selfcheck", "--seed", seed]);
        assert_eq!(code(&out), 0, "seed {seed}:\n{}{}", stdout(&out), stderr(&out));
    }
}

/// `selfcheck` runs every invariant driver of the property suites on thd's pipelines, and with
/// `--zoo` every planted bug through its driver: each must be caught by the invariant the
/// catalogue names.
#[test]
fn selfcheck_runs_every_driver_and_catches_every_planted_bug() {
    let out = thdcheck(["selfcheck", "--zoo", "--cases", "8"]);
    let text = stdout(&out);
    assert_eq!(code(&out), 0, "{text}{}", stderr(&out));
    for driver in ["run_layout", "run_attention", "run_isolation", "run_loss", "run_cp_loss"] {
        assert!(text.contains(driver), "{driver} missing:\n{text}");
    }
    for entry in properties::zoo::CATALOGUE {
        let line = text
            .lines()
            .find(|l| l.split_whitespace().next() == Some(entry.name))
            .unwrap_or_else(|| panic!("{} missing:\n{text}", entry.name));
        assert!(line.ends_with("caught"), "{line}");
    }
    assert!(!text.contains("FAIL"), "{text}");
    let zero = thdcheck(["selfcheck", "--cases", "0"]);
    assert_eq!(code(&zero), 2, "--cases 0 is a usage error:\n{}", stderr(&zero));
    // The same for fuzz, which said "every invariant held" after zero cases (issue 15).
    let zero = thdcheck(["fuzz", "packer", "--cases", "0", "--", "python3", "-c", "pass"]);
    assert_eq!(code(&zero), 2, "fuzz --cases 0 is a usage error:\n{}", stderr(&zero));
}
