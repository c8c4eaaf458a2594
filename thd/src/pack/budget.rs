use super::Example;

/// The DPO pair budget: how many leading examples fit one pack, on every branch.
///
/// This is open-instruct's `count_features_within_token_budget` (#1466, `ee0c460`): the longest
/// prefix whose chosen total and rejected total both stay within `budget`. An exact fit is kept
/// (the comparison is strict `>`). With `budget = None` everything fits. Single sequences use
/// their one branch. The rule has one implementation,
/// [`collate::count_features_within_token_budget`](crate::collate::count_features_within_token_budget);
/// this is its packer-side view.
///
/// ```text
/// count = max { k ≥ 1 : Σ_{i<k} chosenᵢ ≤ budget  and  Σ_{i<k} rejectedᵢ ≤ budget }   (k ≤ n)
/// count = n when budget is None;  count = 0 when n = 0
/// ```
///
/// The `k ≥ 1` is upstream's: the first example is kept even when it alone exceeds the budget,
/// which gives an over-capacity pack. The packers in this module never reach that case: they
/// apply their [`OverLength`](super::OverLength) policy first.
///
/// # Example
/// ```
/// use thd::pack::{Example, count_within_token_budget};
/// let four: Vec<Example> = (0..4).map(|i| Example::pair(i, 100, 100)).collect();
/// assert_eq!(count_within_token_budget(&four, Some(300)), 3);
/// assert_eq!(count_within_token_budget(&four, Some(150)), 1);
/// assert_eq!(count_within_token_budget(&four, None), 4);
/// assert_eq!(count_within_token_budget(&[Example::pair(0, 400, 10)], Some(300)), 1); // upstream's k ≥ 1
/// ```
pub fn count_within_token_budget(examples: &[Example], budget: Option<u32>) -> usize {
    // One implementation of the rule: the DPO collator's.
    let lens: Vec<(usize, usize)> = examples
        .iter()
        .map(|e| {
            let [a, b] = e.lens.branches();
            (a as usize, b as usize)
        })
        .collect();
    crate::collate::count_features_within_token_budget(&lens, budget.map(|b| b as usize))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_counts_single_sequences_on_one_branch() {
        let xs = [Example::single(0, 60), Example::single(1, 40), Example::single(2, 1)];
        assert_eq!(count_within_token_budget(&xs, Some(100)), 2);
        assert_eq!(count_within_token_budget(&[], Some(100)), 0);
    }
}
