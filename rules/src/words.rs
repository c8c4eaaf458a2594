//! The words of messages and reports: what the rules' messages, the readers' errors and the
//! command's summaries all say the same way.

/// `"1 segment"`, `"3 segments"`.
///
/// # Example
/// ```
/// use rules::words::plural;
/// assert_eq!(plural(1, "rank"), "1 rank");
/// assert_eq!(plural(0, "token"), "0 tokens");
/// ```
pub fn plural(n: usize, one: &str) -> String {
    if n == 1 { format!("1 {one}") } else { format!("{n} {one}s") }
}
