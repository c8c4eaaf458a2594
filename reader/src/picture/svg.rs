//! The SVG of a picture: each row of a pack a strip of tokens, wrapped over lines of
//! [`WIDTH`] pixels, with lanes beneath it for the labels, position restarts, the mask's view and
//! the CP ranks, and every violation marked at its token.
//!
//! ```text
//!   ①                    ╭──╮ a label that leaves its document        (arrows, markers)
//!  [ 5      |  3  |pad| 7        ]   documents in alternating colours, lengths inside
//!  ▆▆▆▆  ▆▆▆▆▆  ▆▆▆▆▆▆▆             trained labels
//!  |       |     |                   position restarts
//!  ▆▆▆▆▆▆▆▆▆▆▆▆   ▆▆▆▆▆▆▆           the mask's view (its real tokens; a 4-D mask's documents)
//!  0 1 1 0 | 0 1 1 0                 CP ranks' zigzag chunks
//! ```
//!
//! Scale: each run of tokens (a segment's real tokens, its padding, a mock segment) is at least
//! [`MIN_RUN`] pixels wide and the rest of the row's pixels are shared in proportion to the
//! tokens, so every document boundary shows; a row with more runs than its lines hold is wrapped
//! over more lines (up to [`MAX_LINES`]), and past that consecutive runs are drawn as one. Runs of
//! one kind on one line are one `<path>`, so the size grows with the segments, not the tokens.

use std::fmt::Write;
use std::ops::Range;

use rules::checks::{Outcome, Status};

use super::{PackPicture, Runs};
use crate::report::FileReport;

/// Width of a strip line, in pixels.
pub const WIDTH: f64 = 960.0;
/// The narrowest run, in pixels.
pub const MIN_RUN: f64 = 2.0;
/// The most lines one row is wrapped over.
pub const MAX_LINES: usize = 256;
/// The widest token, in pixels (a batch of a few tokens is not stretched across the page).
const MAX_TOKEN: f64 = 36.0;
const LEFT: f64 = 8.0;
const STRIP: f64 = 20.0;
const LANE: f64 = 5.0;
const ABOVE: f64 = 14.0;
/// The most length labels drawn in one row.
const MAX_TEXTS: usize = 600;
/// The most label arrows drawn in one row.
const MAX_ARROWS: usize = 4000;

/// Colours, by what they show (the legend lists them).
pub mod colour {
    /// Even documents.
    pub const DOC_A: &str = "#4e79a7";
    /// Odd documents.
    pub const DOC_B: &str = "#f28e2b";
    /// Runs of many documents drawn as one (a row past [`super::MAX_LINES`] lines).
    pub const DENSE: &str = "#8c8c8c";
    /// Padding: in-slot padding and the tail.
    pub const PAD: &str = "#d9d9d9";
    /// Mock segments (padding dressed as a sequence).
    pub const MOCK: &str = "#b07aa1";
    /// Trained labels.
    pub const LABEL: &str = "#59a14f";
    /// Position restarts.
    pub const RESTART: &str = "#6b3fa0";
    /// The mask's real tokens.
    pub const MASK: &str = "#17becf";
    /// A label whose prediction targets the next document, and violations.
    pub const BAD: &str = "#e00000";
    /// A trained label at a segment's end that is not the next document's token.
    pub const CROSS_OK: &str = "#777777";
    /// CP ranks, cycled.
    pub const RANKS: [&str; 8] =
        ["#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e", "#e6ab02", "#a6761d", "#666666"];
}

/// A violation to mark: where (a flat token of the pack) and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mark {
    /// The flat token index, when the violation names one (or a segment whose start it is).
    pub token: Option<usize>,
    /// The rule's id.
    pub rule: String,
    /// The message.
    pub text: String,
}

impl Mark {
    /// The mark of a violated outcome, at its location's token, else its segment's first token
    /// (`slot_start(segment)`); `None` for an outcome that is not violated.
    pub fn of(o: &Outcome, slot_start: impl Fn(usize) -> Option<usize>) -> Option<Self> {
        if o.status != Status::Violated {
            return None;
        }
        let at = o.violation.as_ref().map(|v| &*v.at);
        // A token of a rank's shard is not a token of the pack.
        let token = at
            .filter(|a| a.rank.is_none())
            .and_then(|a| a.token.or_else(|| a.segment.and_then(&slot_start)));
        Some(Self { token, rule: o.rule.to_owned(), text: o.detail.clone() })
    }
}

/// What kind of run a piece of a row is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Doc(bool),
    Pad,
    Mock,
    Dense,
}

/// A piece of a row: a token range of one kind, and its x range on the row's unwrapped line.
#[derive(Debug, Clone)]
struct Piece {
    kind: Kind,
    tokens: Range<usize>,
    x0: f64,
    x1: f64,
}

/// An SVG being drawn top to bottom.
#[derive(Debug, Default)]
pub struct Canvas {
    body: String,
    y: f64,
    packs: usize,
    /// Where each drawn row lies: what a test needs to find a token's pixels.
    pub rows: Vec<RowPlace>,
}

/// Where a row was drawn.
#[derive(Debug, Clone)]
pub struct RowPlace {
    /// The pack (in drawing order, from 0).
    pub pack: usize,
    /// The row's tokens.
    pub span: Range<usize>,
    /// The strip's top on its first line, in pixels.
    pub top: f64,
    /// The height of one wrapped line.
    pub line_h: f64,
    /// Each run's tokens and x range on the unwrapped row.
    runs: Vec<(Range<usize>, f64, f64)>,
}

impl RowPlace {
    /// The centre of token `t`'s cell in the strip, `(x, y)` in pixels.
    pub fn token_center(&self, t: usize) -> Option<(f64, f64)> {
        if !self.span.contains(&t) {
            return None;
        }
        let pieces: Vec<Piece> = self
            .runs
            .iter()
            .map(|(r, x0, x1)| Piece { kind: Kind::Pad, tokens: r.clone(), x0: *x0, x1: *x1 })
            .collect();
        let (line, x) = wrap(center(&pieces, t));
        Some((LEFT + x, self.top + line as f64 * self.line_h + STRIP / 2.0))
    }

    /// The x of the boundary before token `t` and the y of the strip's middle.
    pub fn boundary(&self, t: usize) -> Option<(f64, f64)> {
        let pieces: Vec<Piece> = self
            .runs
            .iter()
            .map(|(r, x0, x1)| Piece { kind: Kind::Pad, tokens: r.clone(), x0: *x0, x1: *x1 })
            .collect();
        let (line, x) = wrap(x_of(&pieces, t));
        Some((LEFT + x, self.top + line as f64 * self.line_h + STRIP / 2.0))
    }
}

/// A coordinate with at most one decimal.
fn n(x: f64) -> String {
    let r = (x * 10.0).round() / 10.0;
    if r == r.trunc() { format!("{}", r as i64) } else { format!("{r:.1}") }
}

/// Text escaped for XML.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c if (c as u32) < 0x20 && c != '\n' && c != '\t' => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

/// Rectangles of one colour on the lines of a row, merged where they touch: one `<path>`.
struct Rects {
    d: String,
    last: Option<(usize, f64, f64)>,
    y: f64,
    h: f64,
}

impl Rects {
    fn new(y: f64, h: f64) -> Self {
        Self { d: String::new(), last: None, y, h }
    }

    /// Adds `[x0, x1)` of the unwrapped row, split over the lines it crosses.
    fn add(&mut self, x0: f64, x1: f64, line_h: f64) {
        let (mut x0, x1) = (x0, x1.max(x0 + 0.6));
        while x0 < x1 {
            let line = (x0 / WIDTH).floor().max(0.0) as usize;
            let end = x1.min((line + 1) as f64 * WIDTH);
            let (a, b) = (x0 - line as f64 * WIDTH, end - line as f64 * WIDTH);
            match &mut self.last {
                Some((l, _, lb)) if *l == line && a - *lb < 0.5 => *lb = lb.max(b),
                _ => {
                    self.flush(line_h);
                    self.last = Some((line, a, b));
                }
            }
            x0 = end;
        }
    }

    fn flush(&mut self, line_h: f64) {
        if let Some((line, a, b)) = self.last.take() {
            // Whole pixels (drawn with crisp edges): a run of MIN_RUN pixels keeps at least one
            // pixel of its own colour, never a blend with its neighbours.
            let y = self.y + line as f64 * line_h;
            let (a, b) = (a.round(), b.round().max(a.round() + 1.0));
            let w = n(b - a);
            let _ = write!(self.d, "M{},{}h{w}v{}h-{w}z", n(LEFT + a), n(y), n(self.h));
        }
    }

    fn finish(mut self, out: &mut String, fill: &str, line_h: f64) {
        self.flush(line_h);
        if !self.d.is_empty() {
            let _ = writeln!(
                out,
                r#"<path fill="{fill}" shape-rendering="crispEdges" d="{}"/>"#,
                self.d
            );
        }
    }
}

impl Canvas {
    /// A new canvas.
    pub fn new() -> Self {
        Self::default()
    }

    /// Text, wrapped at the strip's width; `weight`: `bold` or `normal`; `fill` its colour.
    pub fn text(&mut self, s: &str, weight: &str, fill: &str) {
        let mut line = String::new();
        for word in s.split(' ') {
            if !line.is_empty() && line.chars().count() + word.chars().count() >= 150 {
                self.text_line(&line, weight, fill);
                line = "    ".to_owned();
            } else if !line.is_empty() {
                line.push(' ');
            }
            line.push_str(word);
        }
        self.text_line(&line, weight, fill);
    }

    fn text_line(&mut self, s: &str, weight: &str, fill: &str) {
        self.y += 15.0;
        let _ = writeln!(
            self.body,
            r#"<text x="{LEFT}" y="{}" font-weight="{weight}" fill="{fill}">{}</text>"#,
            n(self.y - 3.0),
            escape(s)
        );
    }

    /// Vertical space.
    pub fn gap(&mut self, h: f64) {
        self.y += h;
    }

    /// The strips of a pack's rows, its violations marked (numbered from `first`), and a line
    /// per violation beneath them. Returns the number of marks drawn.
    pub fn pack(&mut self, pic: &PackPicture, marks: &[Mark], first: usize) -> usize {
        let width = pic.row_width().max(1);
        let rows = pic.tokens.div_ceil(width).max(1);
        for row in 0..rows {
            let span = row * width..((row + 1) * width).min(pic.tokens);
            if rows > 1 {
                self.text(&format!("row {row}"), "normal", "#444");
            }
            self.row(pic, span, marks, first);
        }
        self.packs += 1;
        for (i, m) in marks.iter().enumerate() {
            let at = match m.token {
                Some(t) => format!("token {t}"),
                None => "no token".to_owned(),
            };
            self.text(
                &format!("({}) {} [{at}]: {}", first + i, m.rule, clip(&m.text, 600)),
                "normal",
                colour::BAD,
            );
        }
        marks.len()
    }

    /// One row: `span` of the pack's tokens.
    fn row(&mut self, pic: &PackPicture, span: Range<usize>, marks: &[Mark], first: usize) {
        let pieces = pieces(pic, span.clone());
        let tokens = span.len().max(1);
        // Lines: enough for every run at MIN_RUN, with a quarter to spare for the tokens.
        let need = pieces.len() as f64 * MIN_RUN * 1.25;
        let lines = ((need / WIDTH).ceil() as usize).clamp(1, MAX_LINES);
        let mut total = lines as f64 * WIDTH;
        if lines == 1 {
            total = total.min(tokens as f64 * MAX_TOKEN + pieces.len() as f64 * MIN_RUN);
        }
        let pieces = dense(pieces, total);
        let per_token = (total - pieces.len() as f64 * MIN_RUN).max(0.0) / tokens as f64;
        let mut x = 0.0;
        let pieces: Vec<Piece> = pieces
            .into_iter()
            .map(|(kind, r)| {
                let w = MIN_RUN + r.len() as f64 * per_token;
                let p = Piece { kind, tokens: r, x0: x, x1: (x + w).min(total) };
                x += w;
                p
            })
            .collect();
        let at = |t: usize| x_of(&pieces, t);
        // Lanes beneath the strip, as the batch has them.
        let mut lanes: Vec<(&str, f64)> = Vec::new();
        let top = self.y + ABOVE;
        let mut y = top + STRIP + 2.0;
        let mut lane = |name: &'static str, h: f64| {
            lanes.push((name, y));
            y += h + 1.0;
        };
        if pic.labels.is_some() {
            lane("labels", LANE);
        }
        if pic.restarts.is_some() {
            lane("restarts", LANE);
        }
        if pic.mask.is_some() {
            lane("mask", LANE + 1.0);
        }
        if pic.mask_documents.is_some() {
            lane("mask-docs", LANE + 1.0);
        }
        if pic.cp_size.is_some() {
            lane("cp", LANE + 1.0);
        }
        let line_h = (y - self.y) + 8.0;
        self.rows.push(RowPlace {
            pack: self.packs,
            span: span.clone(),
            top,
            line_h,
            runs: pieces.iter().map(|p| (p.tokens.clone(), p.x0, p.x1)).collect(),
        });
        let lane_y = |name: &str| lanes.iter().find(|l| l.0 == name).map(|l| l.1);
        let out = &mut self.body;
        // The strip: the odd documents' colour beneath, the other kinds on top.
        let mut base = Rects::new(top, STRIP);
        base.add(0.0, total, line_h);
        base.finish(out, colour::DOC_B, line_h);
        let mut kinds: Vec<(Kind, Rects)> = [Kind::Doc(true), Kind::Pad, Kind::Mock, Kind::Dense]
            .into_iter()
            .map(|k| (k, Rects::new(top, STRIP)))
            .collect();
        for p in &pieces {
            if let Some((_, r)) = kinds.iter_mut().find(|(k, _)| *k == p.kind) {
                r.add(p.x0, p.x1, line_h);
            }
        }
        for (k, r) in kinds {
            let fill = match k {
                Kind::Doc(_) => colour::DOC_A,
                Kind::Pad => colour::PAD,
                Kind::Mock => colour::MOCK,
                Kind::Dense => colour::DENSE,
            };
            r.finish(out, fill, line_h);
        }
        // Token separators, when a token is wide enough to be seen as one.
        if per_token >= 8.0 {
            let mut d = String::new();
            for p in &pieces {
                for t in p.tokens.start + 1..p.tokens.end {
                    let (line, xl) = wrap(at(t));
                    let _ =
                        write!(d, "M{},{}v{STRIP}", n(LEFT + xl), n(top + line as f64 * line_h));
                }
            }
            if !d.is_empty() {
                let _ = writeln!(out, r##"<path stroke="#ffffff" stroke-opacity="0.6" d="{d}"/>"##);
            }
        }
        // Lengths inside the runs wide enough for them.
        let mut texts = 0;
        for p in &pieces {
            let label = match p.kind {
                Kind::Doc(_) => p.tokens.len().to_string(),
                Kind::Pad => format!("pad {}", p.tokens.len()),
                Kind::Mock => format!("mock {}", p.tokens.len()),
                Kind::Dense => continue,
            };
            let w = p.x1 - p.x0;
            let (line, xl) = wrap(p.x0);
            if texts >= MAX_TEXTS || w < 6.5 * label.len() as f64 + 4.0 || xl + w > WIDTH {
                continue;
            }
            texts += 1;
            let _ = writeln!(
                out,
                r##"<text x="{}" y="{}" text-anchor="middle" fill="{}">{label}</text>"##,
                n(LEFT + xl + w / 2.0),
                n(top + line as f64 * line_h + 14.0),
                if matches!(p.kind, Kind::Pad) { "#333333" } else { "#ffffff" }
            );
        }
        let clip_to = |r: &Range<usize>| r.start.max(span.start)..r.end.min(span.end);
        let runs_lane = |runs: &Runs, name: &str, h: f64, fill: &str, out: &mut String| {
            let Some(ly) = lane_y(name) else { return };
            let mut rects = Rects::new(ly, h);
            let from = runs.runs.partition_point(|r| r.end <= span.start);
            for r in runs.runs[from..].iter().take_while(|r| r.start < span.end) {
                let r = clip_to(r);
                if !r.is_empty() {
                    rects.add(at(r.start), at(r.end), line_h);
                }
            }
            rects.finish(out, fill, line_h);
        };
        if let Some(l) = &pic.labels {
            runs_lane(l, "labels", LANE, colour::LABEL, out);
        }
        if let Some(r) = &pic.restarts {
            let Some(ly) = lane_y("restarts") else { return };
            let mut rects = Rects::new(ly, LANE);
            let from = r.runs.partition_point(|r| r.end <= span.start);
            for r in r.runs[from..].iter().take_while(|r| r.start < span.end) {
                let x = at(r.start);
                rects.add(x, x + 1.0, line_h);
            }
            rects.finish(out, colour::RESTART, line_h);
        }
        if let Some((_, m)) = &pic.mask {
            runs_lane(m, "mask", LANE + 1.0, colour::MASK, out);
        }
        if let Some((_, m)) = &pic.mask_documents {
            // Alternating, as the offsets' documents are.
            let (even, odd): (Vec<_>, Vec<_>) =
                m.runs.iter().cloned().enumerate().partition(|(i, _)| i % 2 == 0);
            let strip = |v: Vec<(usize, Range<usize>)>| Runs {
                runs: v.into_iter().map(|(_, r)| r).collect(),
                complete: true,
            };
            runs_lane(&strip(even), "mask-docs", LANE + 1.0, colour::DOC_A, out);
            runs_lane(&strip(odd), "mask-docs", LANE + 1.0, colour::DOC_B, out);
        }
        if let (Some(cp), Some(ly)) = (pic.cp_size, lane_y("cp")) {
            let mut ranks: Vec<Rects> = (0..cp).map(|_| Rects::new(ly, LANE + 1.0)).collect();
            if pic.grouped == 1 && pic.slots.len() * 2 * cp <= super::MAX_MARKS {
                for s in &pic.slots {
                    let len = s.end - s.start;
                    if len == 0 || !len.is_multiple_of(2 * cp) {
                        continue;
                    }
                    let chunk = len / (2 * cp);
                    for c in 0..2 * cp {
                        let r = clip_to(&(s.start + c * chunk..s.start + (c + 1) * chunk));
                        if r.is_empty() {
                            continue;
                        }
                        let rank = if c < cp { c } else { 2 * cp - 1 - c };
                        ranks[rank].add(at(r.start), at(r.end), line_h);
                    }
                }
            }
            for (r, rects) in ranks.into_iter().enumerate() {
                rects.finish(out, colour::RANKS[r % colour::RANKS.len()], line_h);
            }
        }
        // Labels whose prediction leaves its segment: an arc from the predicting token to the
        // next document's first token, above the strip.
        let mut arrows = [String::new(), String::new()];
        for c in pic
            .crossings
            .iter()
            .filter(|c| span.contains(&c.from) && span.contains(&c.to))
            .take(MAX_ARROWS)
        {
            let (x0, x1) = (center(&pieces, c.from), center(&pieces, c.to));
            let ((l0, a), (l1, b)) = (wrap(x0), wrap(x1));
            let y0 = top + l0 as f64 * line_h;
            let d = &mut arrows[usize::from(c.targets_next)];
            if l0 == l1 {
                let mid = (a + b) / 2.0;
                let _ = write!(
                    d,
                    "M{},{}Q{},{} {},{}",
                    n(LEFT + a),
                    n(y0),
                    n(LEFT + mid),
                    n(y0 - ABOVE + 1.0),
                    n(LEFT + b.max(a + 1.0)),
                    n(y0)
                );
            } else {
                let _ = write!(d, "M{},{}v-{}", n(LEFT + a), n(y0), n(ABOVE - 3.0));
            }
        }
        for (d, colour, dash) in [
            (&arrows[1], colour::BAD, ""),
            (&arrows[0], colour::CROSS_OK, r#" stroke-dasharray="2,2""#),
        ] {
            if !d.is_empty() {
                let _ = writeln!(
                    out,
                    r#"<path fill="none" stroke="{colour}" stroke-width="1.5"{dash} d="{d}"/>"#
                );
            }
        }
        // Violations: a red line through the strip at the token, and its number above.
        for (i, m) in marks.iter().enumerate() {
            // A token at T (offsets that end past the tokens) is drawn at the last row's end.
            let last_row = span.end == pic.tokens;
            let Some(t) = m.token.filter(|t| span.contains(t) || (last_row && *t >= span.end))
            else {
                continue;
            };
            let (line, xl) = wrap(center(&pieces, t.min(span.end.saturating_sub(1))));
            let y0 = top + line as f64 * line_h;
            let x = n(LEFT + xl);
            let _ = writeln!(
                out,
                r##"<path stroke="{bad}" stroke-width="2" d="M{x},{}v{}"/><circle cx="{x}" cy="{}" r="6" fill="{bad}"/><text x="{x}" y="{}" text-anchor="middle" font-size="9" fill="#ffffff">{}</text>"##,
                n(y0 - 2.0),
                n(STRIP + 4.0),
                n(y0 - 7.0),
                n(y0 - 4.0),
                first + i,
                bad = colour::BAD,
            );
        }
        self.y += lines as f64 * line_h;
    }

    /// The legend of a picture: what each colour and lane shows.
    pub fn legend(&mut self, pic: Option<&PackPicture>) {
        self.y += 6.0;
        let mut x = LEFT;
        let y = self.y;
        let mut item = |fill: &str, what: &str, out: &mut String| {
            let _ = write!(
                out,
                r##"<rect x="{}" y="{}" width="10" height="10" fill="{fill}"/><text x="{}" y="{}" fill="#333">{}</text>"##,
                n(x),
                n(y),
                n(x + 13.0),
                n(y + 9.0),
                escape(what)
            );
            x += 13.0 + 6.2 * what.len() as f64 + 12.0;
        };
        let out = &mut self.body;
        item(colour::DOC_A, "document", out);
        item(colour::DOC_B, "next document", out);
        item(colour::PAD, "padding", out);
        item(colour::MOCK, "mock segment", out);
        if let Some(p) = pic {
            if p.labels.is_some() {
                item(colour::LABEL, &format!("trained label ({})", p.convention), out);
            }
            if !p.crossings.is_empty() {
                item(colour::BAD, "label of the next document", out);
            }
            if p.restarts.is_some() {
                item(colour::RESTART, "position restart", out);
            }
            if let Some((k, _)) = &p.mask {
                item(colour::MASK, &format!("{k}: real"), out);
            }
            if let Some(c) = p.cp_size {
                item(colour::RANKS[0], &format!("CP ranks ({c}), zigzag"), out);
            }
            if p.stride > 1 {
                let _ = write!(
                    out,
                    r##"<text x="{}" y="{}" fill="#555">lanes read every {} tokens and at every boundary</text>"##,
                    n(x),
                    n(y + 9.0),
                    p.stride
                );
            }
        }
        out.push('\n');
        self.y += 16.0;
    }

    /// The finished `<svg>` element.
    pub fn finish(&self) -> String {
        let w = n(WIDTH + 2.0 * LEFT);
        let h = n(self.y + 8.0);
        format!(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" \
             viewBox=\"0 0 {w} {h}\" font-family=\"DejaVu Sans, Verdana, sans-serif\" \
             font-size=\"11\">\n<rect width=\"{w}\" height=\"{h}\" fill=\"#ffffff\"/>\n{}</svg>\n",
            self.body
        )
    }
}

/// `s` cut to `max` characters, with an ellipsis.
fn clip(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_owned()
    } else {
        s.chars().take(max).collect::<String>() + "…"
    }
}

/// A position on the unwrapped row as (line, x within the line).
fn wrap(x: f64) -> (usize, f64) {
    let line = (x / WIDTH).floor().max(0.0) as usize;
    (line, x - line as f64 * WIDTH)
}

/// The x of token `t`'s left edge on the unwrapped row.
fn x_of(pieces: &[Piece], t: usize) -> f64 {
    let i = pieces.partition_point(|p| p.tokens.end <= t);
    match pieces.get(i) {
        Some(p) if p.tokens.start <= t => {
            let len = p.tokens.len().max(1) as f64;
            p.x0 + (t - p.tokens.start) as f64 * (p.x1 - p.x0) / len
        }
        Some(p) => p.x0,
        None => pieces.last().map_or(0.0, |p| p.x1),
    }
}

/// The x of token `t`'s centre.
fn center(pieces: &[Piece], t: usize) -> f64 {
    (x_of(pieces, t) + x_of(pieces, t + 1)) / 2.0
}

/// The runs of a row's tokens `span`, in order: each segment's real tokens, its padding, mock
/// segments, and the padding outside every slot.
fn pieces(pic: &PackPicture, span: Range<usize>) -> Vec<(Kind, Range<usize>)> {
    let mut out = Vec::new();
    let mut push = |kind: Kind, r: Range<usize>| {
        let r = r.start.max(span.start)..r.end.min(span.end);
        if !r.is_empty() {
            out.push((kind, r));
        }
    };
    let mut cursor = span.start;
    let from = pic.slots.partition_point(|s| s.end <= span.start);
    for (i, s) in pic.slots.iter().enumerate().skip(from) {
        if s.start >= span.end {
            break;
        }
        if s.start > cursor {
            push(Kind::Pad, cursor..s.start);
        }
        let doc = if pic.grouped > 1 { Kind::Dense } else { Kind::Doc(i % 2 == 0) };
        if s.mock {
            push(Kind::Mock, s.start..s.end);
        } else {
            push(doc, s.start..s.real_end);
            push(Kind::Pad, s.real_end..s.end);
        }
        cursor = cursor.max(s.end);
    }
    if cursor < span.end {
        push(Kind::Pad, cursor..span.end);
    }
    out
}

/// The pieces merged into runs of [`Kind::Dense`] where there are more than `total` pixels hold
/// at [`MIN_RUN`] each (with a quarter to spare for the tokens).
fn dense(pieces: Vec<(Kind, Range<usize>)>, total: f64) -> Vec<(Kind, Range<usize>)> {
    let fit = (total / (MIN_RUN * 1.25)).floor().max(1.0) as usize;
    if pieces.len() <= fit {
        return pieces;
    }
    let per = pieces.len().div_ceil(fit);
    pieces
        .chunks(per)
        .map(|c| {
            let kind = if c.iter().all(|p| p.0 == c[0].0) { c[0].0 } else { Kind::Dense };
            (kind, c[0].1.start..c[c.len() - 1].1.end)
        })
        .collect()
}

/// The picture of a file's report as one `<svg>`: per pack, its facts, its rows and its
/// violations; then the file's own checks and the legend. A pack without a picture (the report
/// was made without [`crate::ReadOptions::picture`]) shows its facts and violations only.
pub fn file(report: &FileReport, causal: bool) -> String {
    file_canvas(report, causal).finish()
}

/// [`file()`]'s canvas, before it is finished: where each row lies ([`Canvas::rows`]).
pub fn file_canvas(report: &FileReport, causal: bool) -> Canvas {
    let mut c = Canvas::new();
    let mut n_marks = 1;
    let mut first_pic = None;
    for p in &report.packs {
        if let Some(part) = &p.part {
            c.text(part, "bold", "#222");
        }
        for line in facts_lines(&p.facts, causal) {
            c.text(&line, "normal", "#222");
        }
        let marks: Vec<Mark> = p
            .checks
            .iter()
            .filter_map(|o| {
                Mark::of(o, |seg| {
                    let pic = p.picture.as_ref()?;
                    pic.slots.get(seg / pic.grouped).map(|s| s.start)
                })
            })
            .collect();
        match &p.picture {
            Some(pic) => {
                first_pic.get_or_insert(pic);
                n_marks += c.pack(pic, &marks, n_marks);
            }
            None => {
                for (i, m) in marks.iter().enumerate() {
                    c.text(
                        &format!("({}) {}: {}", n_marks + i, m.rule, clip(&m.text, 600)),
                        "normal",
                        colour::BAD,
                    );
                }
                n_marks += marks.len();
            }
        }
        c.gap(6.0);
    }
    for o in report.checks.iter().filter(|o| o.status == Status::Violated) {
        c.text(&format!("({n_marks}) {}: {}", o.rule, clip(&o.detail, 600)), "normal", colour::BAD);
        n_marks += 1;
    }
    for note in &report.notes {
        c.text(&format!("note: {}", clip(note, 600)), "normal", "#555");
    }
    c.legend(first_pic);
    c
}

/// The report's facts of a pack, as the lines beside its rows.
pub fn facts_lines(f: &rules::checks::BatchFacts, causal: bool) -> Vec<String> {
    let (sym, u, h, w) = if causal {
        ("Σs(s+1)/2", f.useful.triangle, f.hardware.triangle, f.whole_pack.triangle)
    } else {
        ("Σs²", f.useful.sum_squares, f.hardware.sum_squares, f.whole_pack.sum_squares)
    };
    let ratio = if h > 0 {
        format!(" ({:.1}% useful)", 100.0 * u as f64 / h as f64)
    } else {
        String::new()
    };
    vec![
        format!(
            "{} tokens: {} real, {} mock, {} pad · {} segments ({} real, {} mock){}",
            f.tokens,
            f.real_tokens,
            f.mock_tokens,
            f.pad_tokens,
            f.segments,
            f.real_segments,
            f.mock_segments,
            match f.valid_labels {
                Some(v) => format!(" · {v} trained labels"),
                None => " · no labels".to_owned(),
            }
        ),
        format!("useful {sym} = {u} · hardware {h} (varlen){ratio}, {w} (whole pack)"),
    ]
}
