//! The tensors of one `.safetensors` file, decoded on demand into the few element types the
//! checks need (`i64` for ids, labels and offsets; `bool` for masks). A large file is
//! memory-mapped, and its int32 / int64 per-token tensors are read in place ([`Column`]): an
//! int32 batch is never widened, so checking a file takes little more memory than the file.

use std::collections::BTreeMap;
use std::io::Read;
use std::ops::{Deref, Range};
use std::path::Path;
use std::sync::Arc;

use rules::checks::IntSlice;
use safetensors::{Dtype, SafeTensors};

use crate::{Error, Result};

/// One tensor's header entry, and where its bytes are.
#[derive(Debug, Clone)]
pub struct Entry {
    /// Element type.
    pub dtype: Dtype,
    /// Shape (`[]` for a scalar).
    pub shape: Vec<usize>,
    storage: Arc<Storage>,
    bytes: Range<usize>,
}

impl Entry {
    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }
}

/// An integer tensor, widened to `i64`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ints {
    /// Shape as stored.
    pub shape: Vec<usize>,
    /// Values, row-major.
    pub values: Vec<i64>,
}

/// Files at least this large are memory-mapped rather than read (smaller ones cost more in
/// `mmap` / `munmap` calls than a read).
const MAP_AT_LEAST: u64 = 1 << 20;

/// Bytes that some other owner keeps alive and unchanged while they are shared (a Python
/// buffer, for the `thdcheck` Python package): what [`BatchFile::from_buffers`] reads in place.
pub trait SharedBytes: AsRef<[u8]> + Send + Sync + std::fmt::Debug {}

impl<T: AsRef<[u8]> + Send + Sync + std::fmt::Debug> SharedBytes for T {}

/// One tensor held elsewhere, for [`BatchFile::from_buffers`]: name, dtype, shape, bytes.
pub type SharedTensor = (String, Dtype, Vec<usize>, Box<dyn SharedBytes>);

/// The bytes of a file (memory-mapped, or read) or of one tensor held elsewhere.
#[derive(Debug)]
enum Storage {
    Mapped(memmap2::Mmap),
    Read(Vec<u8>),
    Shared(Box<dyn SharedBytes>),
}

impl Deref for Storage {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            Storage::Mapped(m) => m,
            Storage::Read(v) => v,
            Storage::Shared(b) => (**b).as_ref(),
        }
    }
}

/// A per-token integer tensor: the stored int32 / int64 values in place (in the mapped or read
/// file) where their alignment allows, else widened to an owned `i64` vector. The rules read it
/// through [`Column::ints`].
///
/// # Example
/// ```
/// use reader::tensors::{BatchFile, Column, write_ints};
/// let file = BatchFile::from_bytes(write_ints(&[("input_ids", vec![3], vec![7, 8, 9])], &[])?)?;
/// let (shape, ids) = file.column("input_ids")?;
/// assert_eq!((shape, ids.len(), ids.ints().at(2)), (vec![3], 3, 9));
/// assert_eq!(Column::from(vec![7, 8, 9]).ints(), ids.ints());
/// # Ok::<(), reader::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct Column(Repr);

#[derive(Debug, Clone)]
enum Repr {
    Owned(Vec<i64>),
    InFile { bytes: Arc<Storage>, range: Range<usize>, int32: bool },
}

impl Default for Column {
    fn default() -> Self {
        Column(Repr::Owned(Vec::new()))
    }
}

impl From<Vec<i64>> for Column {
    fn from(v: Vec<i64>) -> Self {
        Column(Repr::Owned(v))
    }
}

impl Column {
    /// The values, as the rules read them.
    pub fn ints(&self) -> IntSlice<'_> {
        match &self.0 {
            Repr::Owned(v) => IntSlice::I64(v),
            // Alignment and length were checked when the column was made, and the bytes behind
            // the `Arc` never move.
            Repr::InFile { bytes, range, int32: true } => {
                IntSlice::I32(bytemuck::cast_slice(&bytes[range.clone()]))
            }
            Repr::InFile { bytes, range, int32: false } => {
                IntSlice::I64(bytemuck::cast_slice(&bytes[range.clone()]))
            }
        }
    }

    /// Number of values.
    pub fn len(&self) -> usize {
        self.ints().len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The values as an owned vector (widened): for a reader that rewrites them.
    pub fn into_vec(self) -> Vec<i64> {
        match self.0 {
            Repr::Owned(v) => v,
            Repr::InFile { .. } => self.ints().to_vec(),
        }
    }

    /// Whether the values are read in place from the file (not widened).
    pub fn in_place(&self) -> bool {
        matches!(self.0, Repr::InFile { .. })
    }

    /// Keeps the first `len` values (all of them if there are fewer), in place: what a reader
    /// that cuts sentinel entries off stored offsets does.
    ///
    /// # Example
    /// ```
    /// use reader::tensors::Column;
    /// let mut cu = Column::from(vec![0, 3, 5, -1, -1]);
    /// cu.truncate(3);
    /// assert_eq!(cu.ints().to_vec(), vec![0, 3, 5]);
    /// ```
    pub fn truncate(&mut self, len: usize) {
        match &mut self.0 {
            Repr::Owned(v) => v.truncate(len),
            Repr::InFile { range, int32, .. } => {
                let width = if *int32 { 4 } else { 8 };
                let keep = len.min(range.len() / width);
                range.end = range.start + keep * width;
            }
        }
    }
}

impl PartialEq for Column {
    /// The same values, whatever their width and wherever they are held.
    fn eq(&self, other: &Self) -> bool {
        self.ints() == other.ints()
    }
}

impl Eq for Column {}

/// A parsed `.safetensors` file: its bytes, the tensor index and the `__metadata__` strings.
///
/// # Example
/// ```
/// use reader::tensors::{BatchFile, write_ints};
/// let bytes = write_ints(&[("cu_seq_lens_q", vec![3], vec![0, 2, 5])], &[])?;
/// let file = BatchFile::from_bytes(bytes)?;
/// assert_eq!(file.ints("cu_seq_lens_q")?.values, vec![0, 2, 5]);
/// assert!(file.ints("labels").is_err());
/// # Ok::<(), reader::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct BatchFile {
    entries: BTreeMap<String, Entry>,
    metadata: BTreeMap<String, String>,
    /// The folder of the file it was read from (`None`: bytes or buffers held in memory):
    /// where a profile its metadata names may be.
    dir: Option<std::path::PathBuf>,
    /// The keys whose values were read (shared with the rows cut from it): what a report lists
    /// as not read is the rest.
    read: Arc<std::sync::Mutex<std::collections::BTreeSet<String>>>,
}

impl BatchFile {
    /// Reads and parses a file.
    ///
    /// # Errors
    /// [`Error::Io`] if it cannot be read; the errors of [`BatchFile::from_bytes`].
    pub fn read(path: &Path) -> Result<Self> {
        let io = |source| Error::Io { path: path.to_owned(), source };
        // Opening a FIFO would wait for a writer; a device would be read without end.
        if !std::fs::metadata(path).map_err(io)?.is_file() {
            return Err(io(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "not a regular file (a FIFO, a device or a directory)",
            )));
        }
        let mut file = std::fs::File::open(path).map_err(io)?;
        let len = file.metadata().map_err(io)?.len();
        if len >= MAP_AT_LEAST {
            // The 8-byte header length first: a file whose header cannot be there (a garbage
            // file of any size) is rejected before anything past its first bytes is read or
            // mapped.
            let mut head = [0u8; 64];
            file.read_exact(&mut head).map_err(io)?;
            header_fits(&head, len)?;
            // SAFETY: the map is only read. As with every reader that maps its input (ripgrep
            // maps large files the same way), another process truncating the file while it is
            // checked can end this one with SIGBUS; rewriting it in place changes what is read.
            let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io)?;
            return Self::from_storage(Storage::Mapped(map)).map(|f| f.in_folder_of(path));
        }
        let mut bytes = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
        file.read_to_end(&mut bytes).map_err(io)?;
        Self::from_bytes(bytes).map(|f| f.in_folder_of(path))
    }

    /// This batch as read from the file at `path` (its metadata may name a profile in that
    /// file's folder).
    #[must_use]
    pub fn in_folder_of(mut self, path: &Path) -> Self {
        let dir = path.parent().unwrap_or(Path::new(""));
        self.dir = Some(if dir.as_os_str().is_empty() { Path::new(".") } else { dir }.to_owned());
        self
    }

    /// The folder of the file the batch was read from (`None`: held in memory).
    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }

    /// Parses the bytes of a safetensors file.
    ///
    /// # Errors
    /// [`Error::Format`] for a truncated file, a bad header or offsets that do not match the
    /// data.
    pub fn from_bytes(bytes: Vec<u8>) -> Result<Self> {
        Self::from_storage(Storage::Read(bytes))
    }

    fn from_storage(bytes: Storage) -> Result<Self> {
        let bytes = Arc::new(bytes);
        let (entries, metadata) = {
            let st = SafeTensors::deserialize(&bytes)
                .map_err(|e| Error::Format { detail: format!("{e}{}", format_hint(&bytes)) })?;
            let base = bytes.as_ptr() as usize;
            let mut entries = BTreeMap::new();
            for (name, view) in st.iter() {
                let start = view.data().as_ptr() as usize - base;
                entries.insert(
                    name.to_owned(),
                    Entry {
                        dtype: view.dtype(),
                        shape: view.shape().to_vec(),
                        storage: Arc::clone(&bytes),
                        bytes: start..start + view.data().len(),
                    },
                );
            }
            let (_, meta) = SafeTensors::read_metadata(&bytes)
                .map_err(|e| Error::Format { detail: e.to_string() })?;
            let metadata: BTreeMap<String, String> =
                meta.metadata().clone().unwrap_or_default().into_iter().collect();
            (entries, metadata)
        };
        Ok(Self { entries, metadata, dir: None, read: Arc::default() })
    }

    /// A batch made of tensors held elsewhere (the Python package passes the buffers of numpy
    /// arrays and torch tensors): each is read in place, as a mapped file's are.
    ///
    /// # Errors
    /// [`Error::Format`] when a tensor's bytes do not hold its shape of its dtype.
    ///
    /// # Example
    /// ```
    /// use safetensors::Dtype;
    /// use reader::tensors::BatchFile;
    /// let ids: Vec<u8> = [5i64, 6, 7].iter().flat_map(|v| v.to_le_bytes()).collect();
    /// let file = BatchFile::from_buffers(vec![("input_ids".into(), Dtype::I64, vec![3], Box::new(ids) as _)], Default::default())?;
    /// let (_, col) = file.column("input_ids")?;
    /// assert_eq!((col.in_place(), col.ints().at(2)), (true, 7));
    /// # Ok::<(), reader::Error>(())
    /// ```
    pub fn from_buffers(
        tensors: Vec<SharedTensor>,
        metadata: BTreeMap<String, String>,
    ) -> Result<Self> {
        let mut entries = BTreeMap::new();
        for (name, dtype, shape, bytes) in tensors {
            let len = (*bytes).as_ref().len();
            let need = shape
                .iter()
                .try_fold(1usize, |acc, &d| acc.checked_mul(d))
                .and_then(|n| n.checked_mul(dtype.bitsize()))
                .filter(|bits| bits % 8 == 0 && bits / 8 == len);
            if need.is_none() {
                return Err(Error::Format {
                    detail: format!(
                        "tensor `{name}`: shape {shape:?} of {dtype:?} does not fit its {len} bytes"
                    ),
                });
            }
            let storage = Arc::new(Storage::Shared(bytes));
            entries.insert(name, Entry { dtype, shape, storage, bytes: 0..len });
        }
        Ok(Self { entries, metadata, dir: None, read: Arc::default() })
    }

    /// Tensor names, sorted.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.entries.keys().map(String::as_str)
    }

    /// Whether the file has a tensor `key`.
    pub fn contains(&self, key: &str) -> bool {
        self.entries.contains_key(key)
    }

    /// The header entry of `key`.
    pub fn entry(&self, key: &str) -> Option<&Entry> {
        self.entries.get(key)
    }

    /// The `__metadata__` strings.
    pub fn metadata(&self) -> &BTreeMap<String, String> {
        &self.metadata
    }

    /// Renames `from` to `to` (the `--map` option); an existing `to` is replaced.
    ///
    /// # Errors
    /// [`Error::MapSource`] if there is no tensor `from`.
    pub fn rename(&mut self, from: &str, to: &str) -> Result<()> {
        let entry = self
            .entries
            .remove(from)
            .ok_or_else(|| Error::MapSource { from: from.to_owned(), to: to.to_owned() })?;
        self.entries.insert(to.to_owned(), entry);
        Ok(())
    }

    /// Takes `key` out of the file (a profile's `drop`): whether it was there.
    pub fn remove(&mut self, key: &str) -> bool {
        self.entries.remove(key).is_some()
    }

    /// Row `r` of a file whose tensors are stacked `[rows, …]` (NeMo Automodel's
    /// `split_batch_into_thd_chunks`: one independent pack per row): every tensor whose first
    /// dimension is `rows` is cut to that row; the others are kept whole.
    ///
    /// # Errors
    /// [`Error::Format`] if the row cannot be written back (it always can for a parsed file).
    pub fn row(&self, r: usize, rows: usize) -> Result<Self> {
        let mut parts = Vec::new();
        for (name, e) in &self.entries {
            let b = &e.storage[e.bytes.clone()];
            match e.shape.split_first() {
                Some((&n, rest)) if n == rows && r < n => {
                    let width = b.len() / n;
                    parts.push((
                        name.as_str(),
                        e.dtype,
                        rest.to_vec(),
                        &b[r * width..(r + 1) * width],
                    ));
                }
                _ => parts.push((name.as_str(), e.dtype, e.shape.clone(), b)),
            }
        }
        let meta: Vec<(&str, &str)> =
            self.metadata.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let mut row = Self::from_bytes(write_raw(parts, &meta)?)?;
        row.read = Arc::clone(&self.read);
        row.dir.clone_from(&self.dir);
        Ok(row)
    }

    fn get(&self, key: &str) -> Result<(&Entry, &[u8])> {
        let e = self.entries.get(key).ok_or_else(|| Error::MissingKey {
            key: key.to_owned(),
            dialect: "any",
            hint: String::new(),
        })?;
        self.mark_read(key);
        Ok((e, &e.storage[e.bytes.clone()]))
    }

    /// Counts `key` as read: a tensor judged by its header alone (a side tensor's length).
    pub fn mark_read(&self, key: &str) {
        if let Ok(mut read) = self.read.lock()
            && !read.contains(key)
        {
            read.insert(key.to_owned());
        }
    }

    /// The keys whose values nothing has read yet (sorted): after a format has read the file,
    /// what its report lists as not read (labels under a key of the stack's own, a `[map]` the
    /// wrong way round).
    pub fn unread(&self) -> Vec<String> {
        let read = self.read.lock().map(|r| r.clone()).unwrap_or_default();
        self.entries.keys().filter(|k| !read.contains(*k)).cloned().collect()
    }

    /// A per-token integer tensor: int32 and int64 read in place where aligned (as safetensors
    /// writes them), any other integer dtype widened.
    ///
    /// # Errors
    /// Those of [`BatchFile::ints`].
    pub fn column(&self, key: &str) -> Result<(Vec<usize>, Column)> {
        let (e, b) = self.get(key)?;
        let aligned = cfg!(target_endian = "little")
            && match e.dtype {
                Dtype::I32 => bytemuck::try_cast_slice::<u8, i32>(b).is_ok(),
                Dtype::I64 => bytemuck::try_cast_slice::<u8, i64>(b).is_ok(),
                _ => false,
            };
        if aligned {
            let repr = Repr::InFile {
                bytes: Arc::clone(&e.storage),
                range: e.bytes.clone(),
                int32: e.dtype == Dtype::I32,
            };
            return Ok((e.shape.clone(), Column(repr)));
        }
        let Ints { shape, values } = self.ints(key)?;
        Ok((shape, Column::from(values)))
    }

    /// An integer tensor (any signed or unsigned integer dtype), widened to `i64`.
    ///
    /// # Errors
    /// [`Error::Dtype`] for a float or bool tensor; [`Error::Value`] for a `u64` above
    /// `i64::MAX`.
    pub fn ints(&self, key: &str) -> Result<Ints> {
        let (e, b) = self.get(key)?;
        let values = match e.dtype {
            Dtype::I64 => le::<8, _>(b, i64::from_le_bytes),
            Dtype::I32 => le::<4, _>(b, |x| i64::from(i32::from_le_bytes(x))),
            Dtype::I16 => le::<2, _>(b, |x| i64::from(i16::from_le_bytes(x))),
            Dtype::I8 => b.iter().map(|&x| i64::from(x as i8)).collect(),
            Dtype::U8 => b.iter().map(|&x| i64::from(x)).collect(),
            Dtype::U16 => le::<2, _>(b, |x| i64::from(u16::from_le_bytes(x))),
            Dtype::U32 => le::<4, _>(b, |x| i64::from(u32::from_le_bytes(x))),
            Dtype::U64 => {
                let wide = le::<8, _>(b, u64::from_le_bytes);
                if let Some(index) = wide.iter().position(|&v| v > i64::MAX as u64) {
                    return Err(Error::Value {
                        key: key.to_owned(),
                        index,
                        value: wide[index].to_string(),
                        expected: "a value that fits int64",
                    });
                }
                wide.into_iter().map(|v| v as i64).collect()
            }
            other => {
                return Err(Error::Dtype {
                    key: key.to_owned(),
                    dtype: format!("{other:?}"),
                    expected: "an integer dtype (int64 or int32)",
                });
            }
        };
        Ok(Ints { shape: e.shape.clone(), values })
    }

    /// A 0/1 mask: bool, integer or float dtype, every value 0 or 1.
    ///
    /// # Errors
    /// [`Error::NotFinite`] for a NaN or infinite float; [`Error::Value`] for any other value
    /// than 0 or 1; [`Error::Dtype`] for a dtype that is none of these.
    pub fn mask(&self, key: &str) -> Result<(Vec<usize>, Vec<bool>)> {
        let (e, b) = self.get(key)?;
        let floats: Option<Vec<f64>> = match e.dtype {
            Dtype::F64 => Some(le::<8, _>(b, f64::from_le_bytes)),
            Dtype::F32 => Some(le::<4, _>(b, |x| f64::from(f32::from_le_bytes(x)))),
            Dtype::F16 => Some(le::<2, _>(b, |x| f16_to_f64(u16::from_le_bytes(x)))),
            Dtype::BF16 => Some(le::<2, _>(b, |x| {
                f64::from(f32::from_bits(u32::from(u16::from_le_bytes(x)) << 16))
            })),
            _ => None,
        };
        let values = match (e.dtype, floats) {
            (_, Some(f)) => {
                let mut out = Vec::with_capacity(f.len());
                for (index, &v) in f.iter().enumerate() {
                    if !v.is_finite() {
                        return Err(Error::NotFinite { key: key.to_owned(), index, value: v });
                    }
                    out.push(mask_value(key, index, v == 1.0, v == 0.0, || v.to_string())?);
                }
                out
            }
            (Dtype::BOOL, None) => {
                let mut out = Vec::with_capacity(b.len());
                for (index, &v) in b.iter().enumerate() {
                    out.push(mask_value(key, index, v == 1, v == 0, || v.to_string())?);
                }
                out
            }
            _ => {
                let ints = self.ints(key).map_err(|err| match err {
                    Error::Dtype { key, dtype, .. } => Error::Dtype {
                        key,
                        dtype,
                        expected: "bool, an integer or a float dtype (a 0/1 mask)",
                    },
                    other => other,
                })?;
                let mut out = Vec::with_capacity(ints.values.len());
                for (index, &v) in ints.values.iter().enumerate() {
                    out.push(mask_value(key, index, v == 1, v == 0, || v.to_string())?);
                }
                out
            }
        };
        Ok((e.shape.clone(), values))
    }
}

impl BatchFile {
    /// A 4-D attention mask (`[B, 1, S, S]`, or `[B, S, S]`) as its raw `true` entries: a float
    /// mask is additive (`true` where 0, the query attends; `false` where negative, `-inf`
    /// included); a boolean or integer one is 0/1 as stored (what `true` means is the
    /// profile's `block_mask` fact). Returns `(rows, width, entries)`, row-major.
    ///
    /// # Errors
    /// A shape that is not `[B, 1, S, S]` / `[B, S, S]`; a float entry that is positive or NaN,
    /// an integer one other than 0 or 1: [`Error::Value`] naming the flat index.
    pub fn block_mask(&self, key: &str) -> Result<(usize, usize, Vec<bool>)> {
        let (e, b) = self.get(key)?;
        let (rows, width) = match e.shape.as_slice() {
            [b, 1, q, k] | [b, q, k] if q == k => (*b, *q),
            _ => {
                return Err(Error::Shape {
                    key: key.to_owned(),
                    shape: e.shape.clone(),
                    expected: "[B, 1, S, S] or [B, S, S] (a square mask per row)".into(),
                });
            }
        };
        let additive = |index: usize, v: f64| -> Result<bool> {
            if v == 0.0 {
                Ok(true)
            } else if v < 0.0 {
                Ok(false)
            } else {
                Err(Error::Value {
                    key: key.to_owned(),
                    index,
                    value: v.to_string(),
                    expected: "0 (attends) or a negative value (masked) in an additive mask",
                })
            }
        };
        let values = match e.dtype {
            Dtype::F64 => le::<8, _>(b, f64::from_le_bytes),
            Dtype::F32 => le::<4, _>(b, |x| f64::from(f32::from_le_bytes(x))),
            Dtype::F16 => le::<2, _>(b, |x| f16_to_f64(u16::from_le_bytes(x))),
            Dtype::BF16 => {
                le::<2, _>(b, |x| f64::from(f32::from_bits(u32::from(u16::from_le_bytes(x)) << 16)))
            }
            _ => {
                let (_, bits) = self.mask(key)?;
                return Ok((rows, width, bits));
            }
        };
        let mut out = Vec::with_capacity(values.len());
        for (index, &v) in values.iter().enumerate() {
            out.push(additive(index, v)?);
        }
        Ok((rows, width, out))
    }
}

fn mask_value(
    key: &str,
    index: usize,
    one: bool,
    zero: bool,
    show: impl FnOnce() -> String,
) -> Result<bool> {
    if one || zero {
        Ok(one)
    } else {
        Err(Error::Value { key: key.to_owned(), index, value: show(), expected: "0 or 1 (a mask)" })
    }
}

fn le<const N: usize, T>(bytes: &[u8], f: impl Fn([u8; N]) -> T) -> Vec<T> {
    bytes
        .chunks_exact(N)
        .map(|c| {
            let mut a = [0u8; N];
            a.copy_from_slice(c);
            f(a)
        })
        .collect()
}

fn f16_to_f64(h: u16) -> f64 {
    let sign = if h & 0x8000 != 0 { -1.0 } else { 1.0 };
    let exp = i32::from((h >> 10) & 0x1f);
    let frac = f64::from(h & 0x3ff);
    match exp {
        0 => sign * frac * 2f64.powi(-24),
        31 if frac == 0.0 => sign * f64::INFINITY,
        31 => f64::NAN,
        _ => sign * (1.0 + frac / 1024.0) * 2f64.powi(exp - 15),
    }
}

/// A hint for the commonest ways a file is not safetensors at all.
/// The first tensor whose header entry does not fit: its bytes against its dtype and shape, or
/// data past the end of the file. `None` when the header is not a JSON object of entries.
fn tensor_at_fault(bytes: &[u8]) -> Option<String> {
    let n = usize::try_from(u64::from_le_bytes(bytes.get(..8)?.try_into().ok()?)).ok()?;
    let header: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(bytes.get(8..8usize.checked_add(n)?)?).ok()?;
    let data = bytes.len() - 8 - n;
    for (name, e) in header.iter().filter(|(k, _)| *k != "__metadata__") {
        let dtype = e.get("dtype")?.as_str()?;
        let width: u64 = match dtype {
            "BOOL" | "U8" | "I8" | "F8_E5M2" | "F8_E4M3" => 1,
            "I16" | "U16" | "F16" | "BF16" => 2,
            "I32" | "U32" | "F32" => 4,
            "I64" | "U64" | "F64" => 8,
            _ => return Some(format!("tensor `{name}`: unknown dtype {dtype}")),
        };
        let shape: Vec<u64> =
            e.get("shape")?.as_array()?.iter().map(|d| d.as_u64()).collect::<Option<_>>()?;
        let offs: Vec<u64> =
            e.get("data_offsets")?.as_array()?.iter().map(|d| d.as_u64()).collect::<Option<_>>()?;
        let [start, end] = offs[..] else {
            return Some(format!("tensor `{name}`: data_offsets {offs:?} are not [start, end]"));
        };
        let need = shape.iter().try_fold(width, |acc, &d| acc.checked_mul(d));
        if need != end.checked_sub(start) {
            return Some(format!(
                "tensor `{name}`: shape {shape:?} of {dtype} needs {} bytes, its data_offsets \
                 [{start}, {end}] hold {}",
                need.map_or("more than 2^64".into(), |b| b.to_string()),
                end.saturating_sub(start)
            ));
        }
        if end > data as u64 {
            return Some(format!(
                "tensor `{name}`: data_offsets [{start}, {end}] end past the {data} data bytes of \
                 the file (truncated?)"
            ));
        }
    }
    None
}

/// What the bytes say about a file safetensors could not parse: a torch zip, a truncated file,
/// text, or a header-length field that does not fit the file (with both numbers).
/// The largest header the safetensors reader accepts (its `MAX_HEADER_SIZE`).
const MAX_HEADER_BYTES: u64 = 100_000_000;

/// Whether the header length in the first 8 bytes of `head` (the first bytes of a file of
/// `len` bytes) can be right: the checks `SafeTensors::deserialize` makes first, with the same
/// messages, on the first bytes alone.
fn header_fits(head: &[u8], len: u64) -> Result<()> {
    let Some(n) = head.get(..8).and_then(|b| <[u8; 8]>::try_from(b).ok()).map(u64::from_le_bytes)
    else {
        return Err(Error::Format { detail: format!("header too small{}", hint(head, len)) });
    };
    let problem = if n > MAX_HEADER_BYTES {
        "header too large"
    } else if n > len - 8 {
        "invalid header length"
    } else {
        return Ok(());
    };
    Err(Error::Format { detail: format!("{problem}{}", hint(head, len)) })
}

fn format_hint(bytes: &[u8]) -> String {
    hint(bytes, bytes.len() as u64)
}

/// What the first bytes `bytes` of a file of `len` bytes say about it: a hint for a file the
/// safetensors reader rejected.
fn hint(bytes: &[u8], len: u64) -> String {
    if bytes.starts_with(b"PK\x03\x04") {
        return " (this looks like a torch.save zip archive; dump with safetensors.torch.save_file)"
            .into();
    }
    let Some(head) = bytes.get(..8).and_then(|b| <[u8; 8]>::try_from(b).ok()) else {
        return format!(
            " (the file has {len} bytes, fewer than the 8-byte header length: truncated?)"
        );
    };
    let header = u64::from_le_bytes(head);
    let after = len.saturating_sub(8);
    let start: String = bytes.iter().take(16).map(|&b| b as char).collect();
    let text = bytes.iter().take(64).all(|&b| b.is_ascii_graphic() || b.is_ascii_whitespace());
    let what = if text {
        format!("; the file starts with text {start:?}: not a safetensors file")
    } else {
        String::new()
    };
    if let Some(tensor) = tensor_at_fault(bytes) {
        return format!(" ({tensor})");
    }
    if header > after {
        format!(
            " (bytes 0..8 give a header of {header} bytes, but only {after} bytes follow{what})"
        )
    } else if bytes.get(8) != Some(&b'{') {
        format!(" (the {header}-byte header at byte 8 is not a JSON object{what})")
    } else {
        format!(" (header of {header} bytes at byte 8; {after} bytes after the length field)")
    }
}

/// Serialises integer tensors as a safetensors file (int64, or int32 for keys whose name
/// contains `cu_seq`, like the Python collators), with `__metadata__` strings. Used by the
/// example corpus, the tests and the fuzz seeds.
///
/// # Errors
/// [`Error::Format`] if the shape does not match the number of values.
pub fn write_ints(
    tensors: &[(&str, Vec<usize>, Vec<i64>)],
    metadata: &[(&str, &str)],
) -> Result<Vec<u8>> {
    let owned: Vec<(String, Dtype, Vec<usize>, Vec<u8>)> = tensors
        .iter()
        .map(|(name, shape, values)| {
            let n: usize = shape.iter().product();
            if n != values.len() {
                return Err(Error::Format {
                    detail: format!("{name}: shape {shape:?} for {} values", values.len()),
                });
            }
            let int32 = name.contains("cu_seq");
            let bytes: Vec<u8> = if int32 {
                values.iter().flat_map(|&v| (v as i32).to_le_bytes()).collect()
            } else {
                values.iter().flat_map(|&v| v.to_le_bytes()).collect()
            };
            Ok((
                (*name).to_owned(),
                if int32 { Dtype::I32 } else { Dtype::I64 },
                shape.clone(),
                bytes,
            ))
        })
        .collect::<Result<_>>()?;
    write_raw(owned.iter().map(|(n, d, s, b)| (n.as_str(), *d, s.clone(), b.as_slice())), metadata)
}

/// Serialises raw tensors (name, dtype, shape, little-endian bytes).
///
/// # Errors
/// [`Error::Format`] if a byte length does not match its dtype and shape.
pub fn write_raw<'a>(
    tensors: impl IntoIterator<Item = (&'a str, Dtype, Vec<usize>, &'a [u8])>,
    metadata: &[(&str, &str)],
) -> Result<Vec<u8>> {
    let views = tensors
        .into_iter()
        .map(|(name, dtype, shape, bytes)| {
            safetensors::tensor::TensorView::new(dtype, shape, bytes)
                .map(|v| (name.to_owned(), v))
                .map_err(|e| Error::Format { detail: format!("{name}: {e}") })
        })
        .collect::<Result<Vec<_>>>()?;
    let meta = (!metadata.is_empty())
        .then(|| metadata.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect());
    safetensors::serialize(views, meta).map_err(|e| Error::Format { detail: e.to_string() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_large_file_is_mapped_and_its_int32_tensors_read_in_place() {
        let dir = tempfile::tempdir().unwrap();
        let n = (MAP_AT_LEAST as usize) / 4 + 5;
        let ids: Vec<i64> = (0..n as i64).map(|i| i % 50_000 - 7).collect();
        let values: Vec<u8> = ids.iter().flat_map(|&v| (v as i32).to_le_bytes()).collect();
        let bytes = write_raw([("input_ids", Dtype::I32, vec![1, n], &values[..])], &[]).unwrap();
        let path = dir.path().join("big.safetensors");
        std::fs::write(&path, &bytes).unwrap();
        let file = BatchFile::read(&path).unwrap();
        assert!(matches!(*file.entries["input_ids"].storage, Storage::Mapped(_)));
        let (shape, col) = file.column("input_ids").unwrap();
        assert_eq!(shape, vec![1, n]);
        assert!(col.in_place());
        assert!(matches!(col.ints(), IntSlice::I32(_)), "int32 stays int32");
        assert_eq!(col.ints(), IntSlice::I64(&ids));
        // The same bytes read (not mapped) give the same column, in place too.
        let read = BatchFile::from_bytes(bytes).unwrap();
        assert_eq!(read.column("input_ids").unwrap().1.ints(), col.ints());
    }

    #[test]
    fn a_misaligned_tensor_is_widened_not_misread() {
        // A 3-byte bool tensor before an int32 one: the int32 data starts 3 bytes in.
        let mut header = br#"{"a":{"dtype":"BOOL","shape":[3],"data_offsets":[0,3]},"input_ids":{"dtype":"I32","shape":[2],"data_offsets":[3,11]}}"#.to_vec();
        header.resize(header.len().next_multiple_of(8), b' ');
        let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
        bytes.extend(header);
        bytes.extend([1, 0, 1]);
        bytes.extend(7i32.to_le_bytes());
        bytes.extend((-100i32).to_le_bytes());
        let file = BatchFile::from_bytes(bytes).unwrap();
        let (_, col) = file.column("input_ids").unwrap();
        assert!(!col.in_place());
        assert_eq!(col.ints(), IntSlice::I64(&[7, -100]));
        // Other integer widths are widened too.
        let u16s: Vec<u8> = [5u16, 6].iter().flat_map(|v| v.to_le_bytes()).collect();
        let file = BatchFile::from_bytes(
            write_raw([("input_ids", Dtype::U16, vec![2], &u16s[..])], &[]).unwrap(),
        )
        .unwrap();
        let (_, col) = file.column("input_ids").unwrap();
        assert_eq!((col.in_place(), col.ints()), (false, IntSlice::I64(&[5, 6])));
    }

    #[test]
    fn f16_decodes_ones_zeros_and_nan() {
        assert_eq!(f16_to_f64(0x3c00), 1.0);
        assert_eq!(f16_to_f64(0x0000), 0.0);
        assert!(f16_to_f64(0x7e00).is_nan());
        assert_eq!(f16_to_f64(0xc000), -2.0);
    }

    #[test]
    fn mask_accepts_bool_int_and_float() {
        let one = 1.0f32.to_le_bytes();
        let zero = 0.0f32.to_le_bytes();
        let floats: Vec<u8> = [one, zero].concat();
        let bytes = write_raw(
            [
                ("b", Dtype::BOOL, vec![2], &[1u8, 0][..]),
                ("f", Dtype::F32, vec![2], floats.as_slice()),
            ],
            &[],
        )
        .unwrap();
        let file = BatchFile::from_bytes(bytes).unwrap();
        assert_eq!(file.mask("b").unwrap().1, vec![true, false]);
        assert_eq!(file.mask("f").unwrap().1, vec![true, false]);
        assert!(file.ints("f").unwrap_err().to_string().contains("dtype F32"));
    }
}
