//! `thdcheck selfcheck`: renders [`properties::selfcheck`] as tables. Every comparison and
//! every rule lives there (and in `rules::checks` / `oracle::tolerance`); this module
//! only prints.

use anyhow::{Result, anyhow};
use properties::selfcheck::{
    Verdict, ZOO_CASES, attention_precision, drivers, loss_precision, zoo_rows,
};

/// Runs every check and prints the tables. `Ok(true)` when all of them pass.
pub fn run(seed: u64, cases: u32, zoo: bool) -> Result<bool> {
    let mut all_ok = true;
    println!("thdcheck selfcheck: THD fast path vs BSHD oracle (seed {seed})\n");
    println!(
        "{:<18} {:>4} {:>6} {:>10} {:>6}  {:>11}  {:>22}  {:>6}  verdict",
        "case", "segs", "tokens", "H/KV/D", "mask", "f64 max|Δ|", "f32 max err / bound", "ratio"
    );
    for row in attention_precision(seed).map_err(|e| anyhow!(e))? {
        let case = &row.case;
        all_ok &= row.violation.is_none();
        println!(
            "{:<18} {:>4} {:>6} {:>10} {:>6}  {:>11.2e}  {:>10.2e} / {:>9.2e}  {:>6.3}  {}",
            case.name,
            case.lens_q.len(),
            case.tokens_q(),
            format!("{}/{}/{}", case.heads, case.kv_heads, case.head_dim),
            if case.causal { "causal" } else { "bidir" },
            row.f64_max,
            row.f32.max_err,
            row.f32.bound,
            row.f32.mean_ratio(),
            verdict(row.violation.is_none()),
        );
        if let Some(v) = row.violation {
            println!("    {}", v.to_string().replace('\n', "\n    "));
        }
    }

    println!();
    println!(
        "{:<20} {:>4} {:>6} {:>8}  {:>14} {:>15}  {:>9}  verdict",
        "loss case", "segs", "tokens", "vocab", "thd mean", "oracle mean", "|Δ|"
    );
    for row in loss_precision(seed).map_err(|e| anyhow!(e))? {
        all_ok &= row.violation.is_none();
        println!(
            "{:<20} {:>4} {:>6} {:>8}  {:>14.9} {:>15.9}  {:>9.2e}  {}",
            format!("{}/{}", row.name, row.dtype.as_str()),
            row.lens.len(),
            row.lens.iter().sum::<u32>(),
            row.vocab,
            row.thd,
            row.oracle,
            (row.thd - row.oracle).abs(),
            verdict(row.violation.is_none()),
        );
        if let Some(v) = row.violation {
            println!("    {}", v.to_string().replace('\n', "\n    "));
        }
    }

    println!();
    println!("{:<10} {:<18} {:>6}  verdict", "invariant", "driver (thd)", "cases");
    for row in drivers(seed, cases) {
        let ok = matches!(row.verdict, Verdict::Held);
        all_ok &= ok;
        println!(
            "{:<10} {:<18} {:>6}  {}",
            row.invariant.to_string(),
            row.driver,
            row.cases,
            verdict(ok)
        );
        match row.verdict {
            Verdict::Held => {}
            Verdict::Failed { case, violation } => {
                println!("    minimal case:\n    {}", case.replace('\n', "\n    "));
                println!("    {}", violation.to_string().replace('\n', "\n    "));
            }
            Verdict::Aborted(why) => println!("    the runner gave up: {why}"),
        }
    }

    if zoo {
        println!();
        println!("planted bugs (properties::zoo), {ZOO_CASES} fixed cases each:");
        println!("{:<30} {:<10} {:<10}  verdict", "variant", "expected", "caught by");
        for row in zoo_rows() {
            let ok = row.caught();
            all_ok &= ok;
            let (by, detail) = match &row.verdict {
                Verdict::Failed { violation, .. } => {
                    (violation.invariant.to_string(), violation.summary())
                }
                Verdict::Held => ("-".to_string(), "passed every case: MISSED".to_string()),
                Verdict::Aborted(why) => ("-".to_string(), format!("the runner gave up: {why}")),
            };
            println!(
                "{:<30} {:<10} {:<10}  {}",
                row.entry.name,
                row.entry.caught_by.to_string(),
                by,
                if ok { "caught" } else { "FAIL" }
            );
            println!("    {detail}");
        }
    }

    println!();
    if all_ok {
        println!("verdict: ok (every check passed)");
    } else {
        println!("verdict: FAILED (see the rows marked FAIL)");
    }
    Ok(all_ok)
}

fn verdict(ok: bool) -> &'static str {
    if ok { "ok" } else { "FAIL" }
}
