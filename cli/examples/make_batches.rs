//! Writes the example batches and their `expected.toml` under `examples/batches/` (or the
//! directory given as the first argument):
//!
//! ```text
//! cargo run -p thdcheck --example make_batches
//! ```

use std::path::PathBuf;

fn main() -> anyhow::Result<()> {
    let root = std::env::args_os()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/batches"));
    let examples = thdcheck::corpus::examples()?;
    for e in &examples {
        let path = root.join(e.path);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(&path, &e.bytes)?;
        println!("{:<56} {}", e.path, e.summary);
    }
    std::fs::write(
        root.join(thdcheck::expect::FILE_NAME),
        thdcheck::corpus::expected_toml(&examples),
    )?;
    std::fs::write(root.join("README.md"), thdcheck::corpus::readme(&examples))?;
    println!(
        "wrote {} batches, {} and README.md to {}",
        examples.len(),
        thdcheck::expect::FILE_NAME,
        root.display()
    );
    Ok(())
}
