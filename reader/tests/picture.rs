//! The pictures of `check --html`, rendered for real: resvg draws the SVG and the pixels at a
//! document boundary, a padding token and a marked violation are asserted; the page parses as
//! XML; the SVG of a few committed bad batches is a reviewed snapshot.

use std::path::{Path, PathBuf};

use reader::picture::{html, svg};
use reader::tensors::{BatchFile, write_ints};
use reader::{CheckOptions, FileReport, ReadOptions, check_file};

fn batches() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/batches")
}

fn drawn(path: &Path) -> FileReport {
    let read = ReadOptions { picture: true, ..ReadOptions::default() };
    check_file(BatchFile::read(path).unwrap(), &read, &CheckOptions::default()).unwrap()
}

/// The SVG rendered by resvg (no fonts loaded: text is not drawn, shapes are).
fn render(svg: &str) -> resvg::tiny_skia::Pixmap {
    let tree = resvg::usvg::Tree::from_str(svg, &resvg::usvg::Options::default()).unwrap();
    let size = tree.size().to_int_size();
    let mut pixmap = resvg::tiny_skia::Pixmap::new(size.width(), size.height()).unwrap();
    resvg::render(&tree, resvg::tiny_skia::Transform::default(), &mut pixmap.as_mut());
    pixmap
}

fn rgb(pixmap: &resvg::tiny_skia::Pixmap, (x, y): (f64, f64)) -> String {
    // The pixel whose square holds the point.
    let p = pixmap.pixel(x.floor() as u32, y.floor() as u32).unwrap().demultiply();
    format!("#{:02x}{:02x}{:02x}", p.red(), p.green(), p.blue())
}

#[test]
fn picture_pixels_show_boundary_padding_and_violation() {
    // hf_cross_doc_label: documents of 4, 3 and 5 tokens; the label at token 4 (segment 1's
    // first token) is trained, so segment 0's last prediction targets the next document.
    let report = drawn(&batches().join("bad/hf_cross_doc_label.safetensors"));
    let canvas = svg::file_canvas(&report, false);
    let pixmap = render(&canvas.finish());
    let row = &canvas.rows[0];
    // Either side of the boundary at token 4 (2 px off the violation's line, which is at the
    // centre of token 4).
    let (bx, by) = row.boundary(4).unwrap();
    assert_eq!(rgb(&pixmap, (bx - 4.0, by)), svg::colour::DOC_A, "segment 0's last token");
    let (cx, _) = row.token_center(4).unwrap();
    assert_eq!(rgb(&pixmap, ((bx + cx) / 2.0 - 2.0, by)), svg::colour::DOC_B, "segment 1's first");
    // The violation: a red line through token 4, and its numbered marker above the strip.
    assert_eq!(rgb(&pixmap, (cx, by)), svg::colour::BAD, "the violation's line at token 4");
    assert_eq!(rgb(&pixmap, (cx - 3.0, row.top - 7.0)), svg::colour::BAD, "its marker");

    // te_padding_mask_from_token_ids: 2 rows of 6, one pad token; the mask's violation at 8.
    let report = drawn(&batches().join("bad/te_padding_mask_from_token_ids.safetensors"));
    let pic = report.packs[0].picture.as_ref().unwrap();
    let pad = pic
        .slots
        .iter()
        .find(|s| s.real_end < s.end)
        .map(|s| s.real_end)
        .unwrap_or(pic.slots.last().unwrap().end);
    let canvas = svg::file_canvas(&report, false);
    let pixmap = render(&canvas.finish());
    let row = canvas.rows.iter().find(|r| r.span.contains(&pad)).unwrap();
    let (px, py) = row.token_center(pad).unwrap();
    assert_eq!(rgb(&pixmap, (px + 4.0, py)), svg::colour::PAD, "pad token {pad}");
    let row = canvas.rows.iter().find(|r| r.span.contains(&8)).unwrap();
    assert_eq!(rgb(&pixmap, row.token_center(8).unwrap()), svg::colour::BAD, "mask at token 8");
}

#[test]
fn picture_page_is_well_formed() {
    let mut page = Vec::new();
    html::begin(&mut page, "thdcheck check <all> & \"more\"").unwrap();
    for dir in ["bad", "good"] {
        let mut files: Vec<PathBuf> = std::fs::read_dir(batches().join(dir))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "safetensors"))
            .collect();
        files.sort();
        for f in files {
            let r = drawn(&f);
            let name = f.display().to_string();
            let svg = svg::file(&r, false);
            html::section(
                &mut page,
                &name,
                &r.verdict(),
                Some(true),
                Some(&svg),
                &r.text(&name, false),
            )
            .unwrap();
        }
    }
    html::end(&mut page, "done").unwrap();
    let page = String::from_utf8(page).unwrap();
    let opts = roxmltree::ParsingOptions { allow_dtd: true, ..Default::default() };
    let doc = roxmltree::Document::parse_with_options(&page, opts).unwrap();
    let svgs = doc.descendants().filter(|n| n.tag_name().name() == "svg").count();
    assert_eq!(svgs, 20, "one picture per file");
    // Offline: nothing is fetched.
    for needle in ["http://", "https://", "<script", "<link", "<img"] {
        let hits = page.matches(needle).count();
        let allowed = if needle == "http://" { svgs } else { 0 }; // the SVG namespace only
        assert_eq!(hits, allowed, "{needle}");
    }
}

#[test]
fn picture_of_a_long_row_keeps_every_boundary_and_stays_small() {
    // 200 000 tokens in 997 documents of 1..400 tokens, one trained label leaking at the end.
    let mut lens = Vec::new();
    let (mut total, mut x) = (0i64, 7i64);
    while total < 200_000 {
        x = (x * 1_103_515_245 + 12_345) % 2_147_483_648;
        let n = (x % 400 + 1).min(200_000 - total);
        lens.push(n);
        total += n;
    }
    let t = total as usize;
    let mut cu = vec![0i64];
    let mut pos = Vec::with_capacity(t);
    for &n in &lens {
        cu.push(cu.last().unwrap() + n);
        pos.extend(0..n);
    }
    let ids: Vec<i64> = (0..t as i64).map(|i| 10 + i % 1000).collect();
    let mut labels = ids.clone();
    for &s in &cu[..cu.len() - 1] {
        labels[s as usize] = -100;
    }
    let leak = cu[lens.len() - 1] as usize; // the last document's first token, trained
    labels[leak] = ids[leak];
    let bytes = write_ints(
        &[
            ("input_ids", vec![1, t], ids),
            ("labels", vec![1, t], labels),
            ("position_ids", vec![1, t], pos),
            ("cu_seq_lens_q", vec![cu.len()], cu.clone()),
        ],
        &[],
    )
    .unwrap();
    let read = ReadOptions { picture: true, ..ReadOptions::default() };
    let report =
        check_file(BatchFile::from_bytes(bytes).unwrap(), &read, &CheckOptions::default()).unwrap();
    assert_eq!(report.violated(), vec!["cross-doc-label"]);
    let canvas = svg::file_canvas(&report, false);
    let page = canvas.finish();
    assert!(page.len() < 200_000, "{} bytes", page.len());
    let pixmap = render(&page);
    let row = &canvas.rows[0];
    // Every document keeps a pixel of its own colour: its first (runs are drawn on whole
    // pixels, at least one wide).
    for (i, w) in cu.windows(2).enumerate() {
        let (x0, y) = row.boundary(w[0] as usize).unwrap();
        let (x1, _) = row.boundary(w[1] as usize).unwrap();
        let width = if x1 >= x0 { x1 - x0 } else { x1 + svg::WIDTH - x0 }; // wrapped
        assert!(width >= svg::MIN_RUN - 1e-9, "document {i} is {width} px");
        let want = if i % 2 == 0 { svg::colour::DOC_A } else { svg::colour::DOC_B };
        let x = if x0.round() >= 968.0 - 1e-9 { continue } else { x0.round() + 0.5 };
        if w[0] as usize == leak || w[1] as usize == leak {
            continue; // the violation's line crosses it
        }
        assert_eq!(rgb(&pixmap, (x, y)), want, "document {i} at x {x0:.1}..{x1:.1}");
    }
    // The violation stays visible at its token.
    let (vx, vy) = row.token_center(leak).unwrap();
    assert_eq!(rgb(&pixmap, (vx, vy)), svg::colour::BAD);
}

#[test]
fn picture_svg_snapshots() {
    for name in [
        "hf_cross_doc_label",
        "hf_mock_without_num_real_seqs",
        "hf_position_ids_not_reset",
        "te_padding_mask_from_token_ids",
        "te_cp_not_divisible",
    ] {
        let report = drawn(&batches().join(format!("bad/{name}.safetensors")));
        insta::assert_snapshot!(format!("svg_{name}"), svg::file(&report, false));
    }
}
