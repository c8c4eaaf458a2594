//! Writes the example batches, their `expected.toml` and `README.md` under `examples/batches/`
//! (or the directory given as the first argument); with `--malformed DIR`, writes the
//! malformed-input corpus instead (seeds for the fuzz target):
//!
//! ```text
//! cargo run -p thdcheck --example make_batches
//! cargo run -p thdcheck --example make_batches -- --malformed fuzz/corpus/batch_reader
//! ```

use std::path::PathBuf;

// The fixture generators, shared with the integration tests (not part of the library API).
// The tests read what the generator does not (`Malformed::violates`, the expected verdict).
#[path = "../tests/support/corpus.rs"]
#[allow(dead_code)]
mod corpus;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let [flag, dir] = args.as_slice()
        && flag == "--malformed"
    {
        std::fs::create_dir_all(dir)?;
        for m in corpus::malformed()? {
            std::fs::write(PathBuf::from(dir).join(m.name), &m.bytes)?;
            let verdict = m.violates.map_or("error".to_owned(), |r| format!("violates {r}"));
            println!("{:<40} {verdict:<16} {}", m.name, m.message);
        }
        return Ok(());
    }
    let root = args
        .first()
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/batches"));
    let examples = corpus::examples()?;
    for e in &examples {
        let path = root.join(e.path);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(&path, &e.bytes)?;
        println!("{:<56} {}", e.path, e.summary);
    }
    std::fs::write(root.join(thdcheck::expect::FILE_NAME), corpus::expected_toml(&examples))?;
    std::fs::write(root.join("README.md"), corpus::readme(&examples))?;
    println!(
        "wrote {} batches, {} and README.md to {}",
        examples.len(),
        thdcheck::expect::FILE_NAME,
        root.display()
    );
    Ok(())
}
