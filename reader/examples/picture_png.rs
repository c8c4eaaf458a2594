//! Renders the picture of one batch file to a PNG with resvg (the system's fonts), as
//! `docs/img/` is made:
//!
//! ```text
//! cargo run -p reader --example picture_png -- BATCH.safetensors OUT.png [--svg OUT.svg]
//! ```

use reader::picture::svg;
use reader::tensors::BatchFile;
use reader::{CheckOptions, ReadOptions, check_file};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(batch), Some(out)) = (args.first(), args.get(1)) else {
        return Err("usage: picture_png BATCH.safetensors OUT.png [--svg OUT.svg]".into());
    };
    // An SVG already drawn (`fuzz --html`'s, cut out of the page) is rendered as it is.
    let picture = if batch.ends_with(".svg") {
        std::fs::read_to_string(batch)?
    } else {
        let read = ReadOptions { picture: true, ..ReadOptions::default() };
        let file = BatchFile::read(std::path::Path::new(batch))?;
        svg::file(&check_file(file, &read, &CheckOptions::default())?, false)
    };
    if let Some(i) = args.iter().position(|a| a == "--svg") {
        std::fs::write(args.get(i + 1).ok_or("--svg needs a path")?, &picture)?;
    }
    let mut opt = resvg::usvg::Options::default();
    opt.fontdb_mut().load_system_fonts();
    let tree = resvg::usvg::Tree::from_str(&picture, &opt)?;
    let size = tree.size().to_int_size();
    let mut pixmap = resvg::tiny_skia::Pixmap::new(size.width(), size.height()).ok_or("empty")?;
    resvg::render(&tree, resvg::tiny_skia::Transform::default(), &mut pixmap.as_mut());
    pixmap.save_png(out)?;
    println!("{out}: {}x{} px", size.width(), size.height());
    Ok(())
}
