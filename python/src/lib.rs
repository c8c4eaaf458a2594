//! `thdcheck._native`: the PyO3 binding under the `thdcheck` Python package. It only moves
//! data across: the tensors a collator returned (read in place, under the GIL), the options,
//! and the report back as text and JSON. It binds the libraries the command is built on, not the
//! command: batches are read by the `reader` crate and judged by the rules of `properties`, and
//! `fuzz` and `metrics` run the `engine` crate, the same code as `thdcheck fuzz` and `thdcheck
//! metrics`; nothing is judged here. The command itself is the `thdcheck-cli` wheel (`cli/`).

use std::collections::BTreeMap;
use std::sync::Arc;

use clap::ValueEnum;
use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyValueError};
use pyo3::prelude::*;
use reader::formats::{Dialect, Objective};
use reader::profile::{Contract, LabelsFact, Profile};
use reader::tensors::{BatchFile, SharedTensor};
use reader::{CheckOptions, ReadOptions};
use safetensors::Dtype;

mod zoo;

create_exception!(
    _native,
    BatchError,
    PyValueError,
    "A batch that cannot be read or understood (the command's exit code 2): the message names \
     the key, index and value at fault."
);

/// A tensor's bytes inside a Python object (a CPU torch tensor or a numpy array, C-contiguous)
/// that this value keeps alive.
struct Held {
    _owner: Py<PyAny>,
    ptr: usize,
    len: usize,
}

impl std::fmt::Debug for Held {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Held({} bytes at {:#x})", self.len, self.ptr)
    }
}

impl AsRef<[u8]> for Held {
    fn as_ref(&self) -> &[u8] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: `ptr` and `len` are the data pointer and byte size of the C-contiguous CPU
        // buffer of `_owner` (a torch tensor's `data_ptr()` / numpy's `__array_interface__`),
        // which this value keeps alive. It is only read while `check` runs, holding the GIL:
        // no Python code can change or free the buffer meanwhile.
        unsafe { std::slice::from_raw_parts(self.ptr as *const u8, self.len) }
    }
}

fn dtype(name: &str, code: &str) -> PyResult<Dtype> {
    Ok(match code {
        "I64" => Dtype::I64,
        "I32" => Dtype::I32,
        "I16" => Dtype::I16,
        "I8" => Dtype::I8,
        "U8" => Dtype::U8,
        "U16" => Dtype::U16,
        "U32" => Dtype::U32,
        "U64" => Dtype::U64,
        "BOOL" => Dtype::BOOL,
        "F64" => Dtype::F64,
        "F32" => Dtype::F32,
        "F16" => Dtype::F16,
        "BF16" => Dtype::BF16,
        other => {
            return Err(BatchError::new_err(format!(
                "`{name}`: dtype {other} is not one thdcheck reads (integers, bool, floats)"
            )));
        }
    })
}

/// The tensors the Python side prepared, as [`BatchFile::from_buffers`] takes them: `bytes`
/// (copied) or `(owner, data_ptr, nbytes)` (read in place, the owner kept alive).
fn shared_tensors(tensors: Vec<PyTensor<'_>>) -> PyResult<Vec<SharedTensor>> {
    let mut shared: Vec<SharedTensor> = Vec::with_capacity(tensors.len());
    for (key, code, shape, data) in tensors {
        let dt = dtype(&key, &code)?;
        let bytes: Box<dyn reader::tensors::SharedBytes> = if let Ok(b) = data.extract::<Vec<u8>>()
        {
            Box::new(b)
        } else {
            let (owner, ptr, len): (Py<PyAny>, usize, usize) = data.extract()?;
            Box::new(Held { _owner: owner, ptr, len })
        };
        shared.push((key, dt, shape, bytes));
    }
    Ok(shared)
}

/// One tensor from the Python side: name, dtype code, shape, data.
type PyTensor<'py> = (String, String, Vec<usize>, Bound<'py, PyAny>);

fn choice<T: ValueEnum>(what: &str, v: Option<&str>) -> PyResult<Option<T>> {
    v.map(|s| {
        T::from_str(s, true).map_err(|_| {
            let names: Vec<String> = T::value_variants()
                .iter()
                .filter_map(|x| x.to_possible_value().map(|p| p.get_name().to_owned()))
                .collect();
            PyValueError::new_err(format!("{what}={s:?}: expected one of {}", names.join(", ")))
        })
    })
    .transpose()
}

/// A profile stated by the caller, and the project's default beside it.
type Profiles = (Option<Arc<Profile>>, Option<Arc<Profile>>);

/// The profile `profile=` names (a name or a path), or `profile_json` (a dict, sent as JSON),
/// and, when neither is given, the project's `[tool.thdcheck]` from the working directory: the
/// command's resolution order. Returns `(stated, default)`.
fn profiles(profile: Option<&str>, profile_json: Option<&str>) -> PyResult<Profiles> {
    let bad = |e: reader::Error| PyValueError::new_err(e.to_string());
    let stated = match (profile, profile_json) {
        (Some(spec), _) => Some(Profile::resolve(spec, None).map_err(bad)?),
        (None, Some(json)) => Some(Profile::from_json(json).map_err(bad)?),
        (None, None) => None,
    };
    let default = match (&stated, std::env::current_dir()) {
        (None, Ok(dir)) => reader::profile::from_pyproject(&dir).map_err(bad)?,
        _ => None,
    };
    Ok((stated, default))
}

/// The profile a check with these options reads, as a dump must name it to replay on its own:
/// `(true, name)` for a built-in profile, `(false, text)` for any other (a file, a dict, the
/// project's `pyproject.toml`): the whole profile as TOML, its `extends` chain already applied,
/// so that the file the guard writes beside a dump needs no other file. `None` when nothing
/// names a profile: the keys decide, on replay as in the check.
#[pyfunction]
#[pyo3(signature = (profile=None, profile_json=None))]
fn resolved_profile(
    profile: Option<&str>,
    profile_json: Option<&str>,
) -> PyResult<Option<(bool, String)>> {
    let (stated, default) = profiles(profile, profile_json)?;
    let Some(p) = stated.or(default) else { return Ok(None) };
    if Profile::builtin(&p.name).is_some_and(|b| Arc::ptr_eq(&b, &p)) {
        return Ok(Some((true, p.name.clone())));
    }
    let mut flat = (*p).clone();
    flat.extends = None; // applied: its facts are this profile's now
    let text = toml::to_string(&flat)
        .map_err(|e| PyValueError::new_err(format!("profile {:?} as TOML: {e}", p.name)))?;
    Ok(Some((false, text)))
}

/// Checks one batch. `tensors`: `(name, dtype, shape, data)`, where data is `bytes` (copied) or
/// `(owner, data_ptr, nbytes)` for a C-contiguous CPU buffer read in place. Returns the text
/// report, the JSON report, the violated rule ids and the report's picture.
#[pyfunction]
#[pyo3(signature = (
    tensors, *, name, metadata, dialect=None, map=None, labels=None, sentinel=None,
    position_base=None, pad_token_id=None, ignore_index=None, eos_token_id=None, profile=None,
    profile_json=None,
    objective=None, cp_size=None, pad_to_multiple_of=None, causal=false, mlm=false
))]
#[allow(clippy::too_many_arguments)]
fn check(
    tensors: Vec<PyTensor<'_>>,
    name: &str,
    metadata: BTreeMap<String, String>,
    dialect: Option<&str>,
    map: Option<Vec<(String, String)>>,
    labels: Option<&str>,
    sentinel: Option<i64>,
    position_base: Option<i64>,
    pad_token_id: Option<i64>,
    ignore_index: Option<i64>,
    eos_token_id: Option<i64>,
    profile: Option<&str>,
    profile_json: Option<&str>,
    objective: Option<&str>,
    cp_size: Option<usize>,
    pad_to_multiple_of: Option<usize>,
    causal: bool,
    mlm: bool,
) -> PyResult<(String, String, Vec<String>, Picture)> {
    let shared = shared_tensors(tensors)?;
    for (what, v) in [("cp_size", cp_size), ("pad_to_multiple_of", pad_to_multiple_of)] {
        if v.is_some_and(|n| n == 0 || n > rules::MAX_CP_SIZE as usize) {
            return Err(PyValueError::new_err(format!(
                "{what}={v:?}: expected 1..={}",
                rules::MAX_CP_SIZE
            )));
        }
    }
    let (profile, default_profile) = profiles(profile, profile_json)?;
    let read = ReadOptions {
        dialect: choice::<Dialect>("dialect", dialect)?,
        map: map.unwrap_or_default(),
        // The keywords are the options' layer of the facts, as the command's flags are.
        stated: Contract {
            labels: match labels {
                None => None,
                Some("unshifted") => Some(LabelsFact::Unshifted),
                Some("shifted") => Some(LabelsFact::Shifted),
                Some(other) => {
                    return Err(PyValueError::new_err(format!(
                        "labels={other:?}: expected \"unshifted\" or \"shifted\""
                    )));
                }
            },
            sentinel,
            position_base,
            pad_token_id,
            ignore_index,
            eos_token_id,
            objective: choice::<Objective>("objective", objective)?,
            ..Contract::default()
        },
        profile,
        default_profile,
        // The notebook's picture (`Report._repr_html_`): gathered with the check, drawn when asked.
        picture: true,
    };
    let opts = CheckOptions { cp_size, pad_to_multiple_of, causal, masked_lm: mlm };
    let result = BatchFile::from_buffers(shared, metadata)
        .and_then(|file| reader::check_file(file, &read, &opts));
    let report = result.map_err(|e| BatchError::new_err(format!("{name}: {e}")))?;
    let json = serde_json::to_string(&report)
        .map_err(|e| PyValueError::new_err(format!("report to JSON: {e}")))?;
    let violated = report.violated().into_iter().map(str::to_owned).collect();
    let text = report.text(name, causal);
    let picture = Picture { report, name: name.to_owned(), causal };
    Ok((text, json, violated, picture))
}

/// What a report's picture is drawn from: the report with its packs' pictures; drawn only when
/// a notebook asks (`html()`), so a check that is not shown pays for no SVG.
#[pyclass(frozen)]
struct Picture {
    report: reader::FileReport,
    name: String,
    causal: bool,
}

#[pymethods]
impl Picture {
    /// The report's section of HTML (inline SVG and CSS), as `check --html` draws it.
    fn html(&self) -> String {
        let svg = reader::picture::svg::file(&self.report, self.causal);
        let r = &self.report;
        let passed = (!r.violated().is_empty() || r.checked()).then(|| r.violated().is_empty());
        reader::picture::html::cell(
            &self.name,
            &r.verdict(),
            passed,
            Some(&svg),
            &r.text(&self.name, self.causal),
        )
    }
}

/// The HTML of a fuzz run's JSON report (`FuzzResult`, `FuzzFailure`): the shrunk request and
/// the answer drawn as `fuzz --html` draws them.
#[pyfunction]
fn fuzz_html(report: &str) -> PyResult<String> {
    let doc: serde_json::Value =
        serde_json::from_str(report).map_err(|e| PyValueError::new_err(format!("report: {e}")))?;
    let svg = engine::fuzz::picture::svg(&doc);
    let name = format!("fuzz {}", doc["target"].as_str().unwrap_or("?"));
    let passed = Some(doc.get("failure").is_none());
    let verdict = engine::fuzz::picture::verdict(&doc);
    Ok(reader::picture::html::cell(&name, &verdict, passed, Some(&svg), ""))
}

/// The subcommand `name`'s arguments parsed from `argv` by the command's own definitions, so
/// the keyword options of the Python functions are exactly the command's flags; a bad one is a
/// `ValueError` with clap's message.
fn parse_args<T: clap::Args + clap::FromArgMatches>(
    name: &'static str,
    argv: impl IntoIterator<Item = String>,
) -> PyResult<T> {
    let full: Vec<String> = std::iter::once(name.to_owned()).chain(argv).collect();
    let matches =
        T::augment_args(clap::Command::new(name)).try_get_matches_from(&full).map_err(|e| {
            PyValueError::new_err(e.render().to_string().trim_start_matches("error: ").to_owned())
        })?;
    T::from_arg_matches(&matches).map_err(|e| PyValueError::new_err(e.to_string()))
}

/// Runs `thdcheck fuzz` in this process: `argv` are the command's arguments after `fuzz`
/// (the target first, `--json` added here), and `answer(request_line) -> response_line` stands
/// for the adapter. The cases, the rules and the shrinking are the command's. Returns the JSON
/// report.
#[pyfunction]
fn fuzz(argv: Vec<String>, answer: Bound<'_, PyAny>) -> PyResult<String> {
    let tail = ["--json", "--", "<python function>"].map(str::to_owned);
    let args: engine::args::FuzzArgs = parse_args("fuzz", argv.into_iter().chain(tail))?;
    // A Python exception the wrapper did not turn into an error answer is answered as one, so
    // the engine reports it as an adapter error and shrinks it. A `BaseException` that is no
    // `Exception` (KeyboardInterrupt from Ctrl-C, SystemExit) stops the run instead: it is kept,
    // every later request is answered at once without calling Python, and it is raised when the
    // engine returns. Pending signals are checked before each request, so Ctrl-C between two
    // calls of the function stops the run too.
    let py = answer.py();
    let mut stopped: Option<PyErr> = None;
    let mut call = |line: &str| -> String {
        let id = || {
            serde_json::from_str::<serde_json::Value>(line)
                .ok()
                .and_then(|r| r.get("id").cloned())
                .unwrap_or_default()
        };
        if stopped.is_none() {
            let reply = py
                .check_signals()
                .and_then(|()| answer.call1((line,)))
                .and_then(|r| r.extract::<String>());
            match reply {
                Ok(reply) => return reply,
                Err(e) if e.is_instance_of::<PyException>(py) => {
                    return serde_json::json!({"thdcheck": 1, "id": id(), "error": e.to_string()})
                        .to_string();
                }
                Err(e) => stopped = Some(e),
            }
        }
        serde_json::json!({"thdcheck": 1, "id": id(), "error": "interrupted"}).to_string()
    };
    let mut out = Vec::new();
    let ran = engine::fuzz::run_in_process(&args, &mut call, &mut out);
    if let Some(e) = stopped {
        return Err(e);
    }
    ran.map_err(|e| PyValueError::new_err(format!("{e:#}")))?;
    String::from_utf8(out).map_err(|e| PyValueError::new_err(e.to_string()))
}

/// Runs `thdcheck metrics --json` with `argv` (the arguments after `metrics`: `--recipe`, ...)
/// on micro-batches held in memory: `(label, tensors, metadata)` each. Returns the JSON
/// document the command prints.
#[pyfunction]
#[allow(clippy::type_complexity)]
fn metrics(
    argv: Vec<String>,
    batches: Vec<(String, Vec<PyTensor<'_>>, BTreeMap<String, String>)>,
) -> PyResult<String> {
    let args: engine::args::MetricsArgs = parse_args("metrics", argv)?;
    let mut files = Vec::with_capacity(batches.len());
    for (label, tensors, metadata) in batches {
        let file = BatchFile::from_buffers(shared_tensors(tensors)?, metadata)
            .map_err(|e| BatchError::new_err(format!("{label}: {e}")))?;
        files.push((label, file));
    }
    let doc = engine::metrics_cmd::record_json(&args, files)
        .map_err(|e| BatchError::new_err(format!("{e:#}")))?;
    Ok(doc.to_string())
}

/// The extension module.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(check, m)?)?;
    m.add_function(wrap_pyfunction!(fuzz, m)?)?;
    m.add_function(wrap_pyfunction!(fuzz_html, m)?)?;
    m.add_class::<Picture>()?;
    m.add_function(wrap_pyfunction!(metrics, m)?)?;
    m.add_function(wrap_pyfunction!(resolved_profile, m)?)?;
    m.add_function(wrap_pyfunction!(zoo::zoo_variants, m)?)?;
    m.add_function(wrap_pyfunction!(zoo::zoo_search, m)?)?;
    m.add_function(wrap_pyfunction!(zoo::zoo_judge, m)?)?;
    m.add_function(wrap_pyfunction!(zoo::zoo_judge_reference, m)?)?;
    m.add_function(wrap_pyfunction!(zoo::zoo_size, m)?)?;
    m.add("BatchError", m.py().get_type::<BatchError>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
