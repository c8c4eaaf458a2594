//! Small helpers for the words of reports, shared by the readers and the renderers (kept apart
//! from both so that neither imports the other for them).

/// `"1 segment"`, `"3 segments"`.
pub fn plural(n: usize, one: &str) -> String {
    if n == 1 { format!("1 {one}") } else { format!("{n} {one}s") }
}
