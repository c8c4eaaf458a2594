//! One self-contained page (inline CSS and SVG, no script, nothing fetched): a section per
//! batch file with its verdict, its picture ([`super::svg`]) and its text report. The page is
//! written piece by piece ([`begin`], [`section`], [`end`]), so `thdcheck check --html` holds one
//! report at a time; [`fragment`] is one section alone, for a notebook's `_repr_html_`.
//!
//! The page is well-formed XML as well as HTML (every element closed, text escaped), so a test
//! parses it with an XML parser.

use std::io::{self, Write};

use super::svg::escape;

const STYLE: &str = "section.thdcheck{font-family:DejaVu Sans,Verdana,sans-serif;color:#222;\
margin:0 0 24px 0;padding:8px;border:1px solid #ddd;border-radius:4px}\
.thdcheck h2{font-size:15px;margin:0 0 6px 0;font-family:monospace}\
.thdcheck .verdict{font-weight:bold;margin:4px 0}.thdcheck .pass{color:#2b7a2b}\
.thdcheck .fail{color:#c00000}.thdcheck .other{color:#8a6d00}.thdcheck .pic{overflow-x:auto}\
.thdcheck pre{font-size:12px;white-space:pre-wrap}.thdcheck summary{cursor:pointer;color:#555}";

/// The start of a page titled `title`.
///
/// # Errors
/// The writer's.
pub fn begin(out: &mut dyn Write, title: &str) -> io::Result<()> {
    write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\"/>\n<title>{}</title>\n\
         <style>body{{margin:16px}}{STYLE}</style>\n</head>\n<body>\n<h1 style=\"font-size:18px\">{}</h1>\n",
        escape(title),
        escape(title)
    )
}

/// A file's section: its name, its verdict (`passed`: `Some(true)` pass, `Some(false)` fail,
/// `None` neither), its picture (an `<svg>`, or nothing) and its text report, folded.
///
/// # Errors
/// The writer's.
pub fn section(
    out: &mut dyn Write,
    name: &str,
    verdict: &str,
    passed: Option<bool>,
    svg: Option<&str>,
    text: &str,
) -> io::Result<()> {
    write!(out, "{}", fragment(name, verdict, passed, svg, text))
}

/// A section alone (a notebook cell's HTML).
pub fn fragment(
    name: &str,
    verdict: &str,
    passed: Option<bool>,
    svg: Option<&str>,
    text: &str,
) -> String {
    let class = match passed {
        Some(true) => "pass",
        Some(false) => "fail",
        None => "other",
    };
    format!(
        "<section class=\"thdcheck\">\n<h2>{}</h2>\n<p class=\"verdict {class}\">{}</p>\n<div class=\"pic\">\n{}</div>\n\
         <details><summary>report</summary><pre>{}</pre></details>\n</section>\n",
        escape(name),
        escape(verdict),
        svg.unwrap_or(""),
        escape(text)
    )
}

/// A section with its own style, for a notebook cell (`_repr_html_`): nothing outside it is
/// styled.
pub fn cell(
    name: &str,
    verdict: &str,
    passed: Option<bool>,
    svg: Option<&str>,
    text: &str,
) -> String {
    format!("<div>\n<style>{STYLE}</style>\n{}</div>\n", fragment(name, verdict, passed, svg, text))
}

/// The end of a page, with a closing line (the run's summary).
///
/// # Errors
/// The writer's.
pub fn end(out: &mut dyn Write, summary: &str) -> io::Result<()> {
    write!(out, "<p><b>{}</b></p>\n</body>\n</html>\n", escape(summary))
}
