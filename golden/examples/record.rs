//! Prints the metric record of each recipe file given: the table, or JSON with `--json`.
//!
//! `cargo run -p golden --example record -- golden/tests/recipes/codonfm_encodon_1b.toml`

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let json = args.iter().any(|a| a == "--json");
    for path in args.iter().filter(|a| !a.starts_with("--")) {
        let record = golden::Recipe::load(path).and_then(|r| golden::metrics(&r));
        match record {
            Ok(r) if json => {
                println!("{}", serde_json::to_string_pretty(&r).expect("serialisable"))
            }
            Ok(r) => println!("{}", r.to_table()),
            Err(e) => {
                eprintln!("{e}");
                return ExitCode::from(2);
            }
        }
    }
    ExitCode::SUCCESS
}
