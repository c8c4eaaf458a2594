use crate::{Error, Result};

/// One document as a collator receives it: a training example's token ids and, optionally,
/// its labels. In the pack it becomes a segment.
///
/// Not [`crate::pack::Example`], which is what a packer sees: a dataset id and token counts
/// (one length, or two for a DPO pair).
///
/// Without labels a collator uses the tokens themselves (causal LM). With labels (MLM targets,
/// a prompt masked with -100, ...) they must have one entry per token.
///
/// # Example
/// ```
/// # use thd::collate::Document;
/// let clm = Document::new(vec![0, 5, 6, 2]);
/// assert_eq!(clm.label_source(), &[0, 5, 6, 2]);
/// let sft = Document::with_labels(vec![0, 5, 6, 2], vec![-100, -100, 6, 2]);
/// assert_eq!(sft.label_source(), &[-100, -100, 6, 2]);
/// assert_eq!(sft.len(), 4);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Document {
    /// Token ids.
    pub input_ids: Vec<i64>,
    /// Labels, one per token; `None` means "the tokens themselves".
    pub labels: Option<Vec<i64>>,
}

impl Document {
    /// A document whose labels are its tokens.
    ///
    /// # Example
    /// ```
    /// # use thd::collate::Document;
    /// assert_eq!(Document::new(vec![4, 5]).labels, None);
    /// ```
    pub fn new(input_ids: Vec<i64>) -> Self {
        Self { input_ids, labels: None }
    }

    /// A document with explicit labels.
    ///
    /// # Example
    /// ```
    /// # use thd::collate::Document;
    /// assert_eq!(Document::with_labels(vec![4, 5], vec![-100, 5]).labels, Some(vec![-100, 5]));
    /// ```
    pub fn with_labels(input_ids: Vec<i64>, labels: Vec<i64>) -> Self {
        Self { input_ids, labels: Some(labels) }
    }

    /// Number of tokens.
    ///
    /// # Example
    /// ```
    /// # use thd::collate::Document;
    /// assert_eq!(Document::new(vec![4, 5]).len(), 2);
    /// ```
    pub fn len(&self) -> usize {
        self.input_ids.len()
    }

    /// True when the document has no tokens.
    ///
    /// # Example
    /// ```
    /// # use thd::collate::Document;
    /// assert!(Document::default().is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.input_ids.is_empty()
    }

    /// The labels a collator starts from: `labels` if given, else `input_ids`.
    ///
    /// # Example
    /// ```
    /// # use thd::collate::Document;
    /// assert_eq!(Document::new(vec![4, 5]).label_source(), &[4, 5]);
    /// ```
    pub fn label_source(&self) -> &[i64] {
        self.labels.as_deref().unwrap_or(&self.input_ids)
    }
}

/// Checks that a batch is non-empty and every document is non-empty with matching labels.
pub(crate) fn check_documents(collator: &'static str, examples: &[Document]) -> Result<()> {
    if examples.is_empty() {
        return Err(Error::NoExamples { collator });
    }
    for (index, e) in examples.iter().enumerate() {
        if e.is_empty() {
            return Err(Error::EmptyExample { index });
        }
        if let Some(l) = &e.labels
            && l.len() != e.len()
        {
            return Err(Error::ExampleLabelsLength { index, labels: l.len(), input_ids: e.len() });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_documents_names_the_bad_document() {
        assert_eq!(check_documents("x", &[]), Err(Error::NoExamples { collator: "x" }));
        let bad = [Document::new(vec![1]), Document::new(vec![])];
        assert_eq!(check_documents("x", &bad), Err(Error::EmptyExample { index: 1 }));
        let bad = [Document::with_labels(vec![1, 2], vec![1])];
        assert_eq!(
            check_documents("x", &bad),
            Err(Error::ExampleLabelsLength { index: 0, labels: 1, input_ids: 2 })
        );
    }
}
