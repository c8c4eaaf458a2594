//! The bug zoo through Python, for `bench/zoo_vs_hypothesis.py` (issue 28): the catalogue, a
//! seeded search of one variant (the shrunk case as JSON), the variant's own driver as a judge
//! of a case drawn elsewhere (a Hypothesis test), and the size both sides' counterexamples are
//! measured by. Private: `thdcheck._native` only, not the package's API. Every judgment is the
//! `properties` crate's (`selfcheck::zoo_judge`, `zoo_search`, `zoo_size`); nothing is judged
//! here.

use std::time::Instant;

use properties::selfcheck::{self, Verdict};
use properties::zoo::CATALOGUE;
use pyo3::exceptions::{PyKeyError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;

fn unknown(name: &str) -> PyErr {
    PyKeyError::new_err(format!("{name} is not a zoo variant (see zoo_variants())"))
}

fn size_dict<'py>(py: Python<'py>, name: &str, case_json: &str) -> PyResult<Bound<'py, PyDict>> {
    let size = selfcheck::zoo_size(name, case_json)
        .ok_or_else(|| unknown(name))?
        .map_err(PyValueError::new_err)?;
    let d = PyDict::new(py);
    for (k, v) in size {
        d.set_item(k, v)?;
    }
    Ok(d)
}

/// Every catalogued variant: `name`, `caught_by` (the invariant), `strategy` (the proptest
/// strategy its cases are drawn from, as declared), `upstream`, `classes`.
#[pyfunction]
pub fn zoo_variants(py: Python<'_>) -> PyResult<Vec<Bound<'_, PyDict>>> {
    CATALOGUE
        .iter()
        .map(|e| {
            let d = PyDict::new(py);
            d.set_item("name", e.name)?;
            d.set_item("caught_by", e.caught_by.to_string())?;
            d.set_item("strategy", e.strategy)?;
            d.set_item("upstream", e.upstream)?;
            d.set_item("classes", e.classes.iter().map(|&c| u32::from(c)).collect::<Vec<_>>())?;
            Ok(d)
        })
        .collect()
}

/// Searches variant `name` with the seeded runner (`seed`, `cases` cases), shrinks and
/// minimizes as the zoo does: `failed`, `cases_tried` (until the first failure), `elapsed_s`
/// (the search and the shrinking, GIL released), `case_json` (the shrunk case), `violation`,
/// `invariant`, `rule` (its id), `size` (`zoo_size` of the shrunk case).
#[pyfunction]
pub fn zoo_search<'py>(
    py: Python<'py>,
    name: &str,
    seed: u64,
    cases: u32,
) -> PyResult<Bound<'py, PyDict>> {
    let t0 = Instant::now();
    let found =
        py.detach(|| selfcheck::zoo_search(name, seed, cases)).ok_or_else(|| unknown(name))?;
    let elapsed = t0.elapsed().as_secs_f64();
    let d = PyDict::new(py);
    d.set_item("elapsed_s", elapsed)?;
    d.set_item("cases_tried", found.cases_tried)?;
    d.set_item("case_json", found.case_json.as_deref())?;
    match &found.verdict {
        Verdict::Failed { violation, .. } => {
            d.set_item("failed", true)?;
            d.set_item("violation", violation.to_string())?;
            d.set_item("invariant", violation.invariant.to_string())?;
            d.set_item("rule", violation.id)?;
        }
        Verdict::Held => d.set_item("failed", false)?,
        Verdict::Aborted(why) => {
            return Err(PyValueError::new_err(format!("{name}: the search aborted: {why}")));
        }
    }
    match &found.case_json {
        Some(json) => d.set_item("size", size_dict(py, name, json)?)?,
        None => d.set_item("size", py.None())?,
    }
    Ok(d)
}

fn judged(
    name: &str,
    verdict: Option<Result<Option<rules::Violation>, String>>,
) -> PyResult<Option<String>> {
    verdict
        .ok_or_else(|| unknown(name))?
        .map(|v| v.map(|v| v.to_string()))
        .map_err(PyValueError::new_err)
}

/// Judges `case_json` (a case of variant `name`'s strategy's type, as JSON) with the variant's
/// own driver: `None` when it passes, the violation's text when it fails. `ValueError` when the
/// JSON is not such a case, `KeyError` for an unknown variant.
#[pyfunction]
pub fn zoo_judge(name: &str, case_json: &str) -> PyResult<Option<String>> {
    judged(name, selfcheck::zoo_judge(name, case_json))
}

/// [`zoo_judge`] with the variant's correct counterpart in the same driver (a control: a test
/// of the invariant must pass it).
#[pyfunction]
pub fn zoo_judge_reference(name: &str, case_json: &str) -> PyResult<Option<String>> {
    judged(name, selfcheck::zoo_judge_reference(name, case_json))
}

/// The named size components of `case_json` (variant `name`'s case type), in a fixed order.
#[pyfunction]
pub fn zoo_size<'py>(py: Python<'py>, name: &str, case_json: &str) -> PyResult<Bound<'py, PyDict>> {
    size_dict(py, name, case_json)
}
