//! Readers for the four file formats of the registry, and the assembly of their rows into a
//! [`Dataset`].
//!
//! Every reader appends rows to one [`Table`] (row-major values plus raw label text), so the
//! training and test files of a dataset end up in one matrix without copying large data twice
//! (MNIST is 70000 x 784). Labels stay text until all files are read, because the class indices
//! depend on the set of labels over all files.

use std::collections::{HashMap, HashSet};
use std::io::{Cursor, Read};
use std::path::Path;

use ndarray::Array2;
use polars::prelude::{CsvReadOptions, SerReader};

use super::error::{show, DataError};
use super::registry::{DatasetSpec, Format};
use super::Dataset;

/// Loads every file of `spec` (paths relative to `dir`) into a [`Dataset`].
pub(crate) fn load(name: &str, spec: &DatasetSpec, dir: &Path) -> Result<Dataset, DataError> {
    let test_files: &[String] = spec.test_files.as_deref().unwrap_or(&[]);
    // Report a missing file before spending time parsing the others.
    for file in spec.files.iter().chain(test_files) {
        let path = dir.join(file);
        if !path.exists() {
            return Err(DataError::MissingFile { path: show(&path), dataset: name.to_string(), description: spec.description.clone() });
        }
    }

    let mut table = Table::default();
    read_files(&mut table, &spec.files, spec, dir)?;
    let mut n_train = table.labels.len();
    read_files(&mut table, test_files, spec, dir)?;
    if let Some(keep) = &spec.keep_classes {
        let files = spec.files.iter().chain(test_files).map(|f| show(&dir.join(f))).collect::<Vec<_>>().join(", ");
        n_train = table
            .keep_classes(keep, n_train)
            .map_err(|c| DataError::invalid(dir, format!("dataset '{name}': keep_classes lists '{c}', which no row of {files} has")))?;
    }

    let d = table.width.unwrap_or(0);
    let n = table.labels.len();
    if n == 0 {
        let files = spec.files.iter().chain(test_files).map(|f| show(&dir.join(f))).collect::<Vec<_>>();
        return Err(DataError::invalid(dir, format!("dataset '{name}' has no rows in {}", files.join(", "))));
    }
    let files = || spec.files.iter().chain(test_files).map(|f| show(&dir.join(f))).collect::<Vec<_>>().join(", ");
    // A dataset a classifier cannot use is an error here, naming its files, not a puzzling
    // split or fit failure later (binary garbage once loaded as a one-row dataset).
    if d == 0 {
        return Err(DataError::invalid(
            dir,
            format!("dataset '{name}' has no feature columns in {} (every column dropped, or only the label)", files()),
        ));
    }
    if n < 2 {
        return Err(DataError::invalid(dir, format!("dataset '{name}' has {n} row in {}: at least 2 are needed", files())));
    }
    let (class_names, y) = assign_classes(&table, spec.class_order.as_deref(), dir)?;
    if class_names.len() < 2 {
        return Err(DataError::invalid(dir, format!("dataset '{name}' has one class only ({:?}) in {}", class_names, files())));
    }
    // A class of class_order that no row has would be a class no method can learn, scored as if
    // present (a one-class dataset listing two classes scored 0% error).
    let mut has_rows = vec![false; class_names.len()];
    y.iter().for_each(|&c| has_rows[c] = true);
    if let Some(c) = has_rows.iter().position(|h| !h) {
        return Err(DataError::invalid(
            dir,
            format!("dataset '{name}': class_order lists '{}', which no row of {} has", class_names[c], files()),
        ));
    }
    let feature_names = table.feature_names.take().unwrap_or_else(|| (1..=d).map(|j| format!("x{j}")).collect());
    let x = Array2::from_shape_vec((n, d), std::mem::take(&mut table.values))
        .map_err(|e| DataError::invalid(dir, format!("dataset '{name}': cannot shape {n} x {d} matrix: {e}")))?;
    Ok(Dataset {
        name: name.to_string(),
        x,
        y,
        class_names,
        feature_names,
        source: spec.files.iter().chain(test_files).cloned().collect(),
        n_fixed_train: spec.test_files.as_ref().map(|_| n_train),
    })
}

fn read_files(table: &mut Table, files: &[String], spec: &DatasetSpec, dir: &Path) -> Result<(), DataError> {
    match spec.format {
        Format::Idx => {
            for pair in files.chunks(2) {
                if let [a, b] = pair {
                    read_idx_pair(table, &dir.join(a), &dir.join(b))?;
                }
            }
        }
        format => {
            for file in files {
                let path = dir.join(file);
                let bytes = read_bytes(&path)?;
                match format {
                    Format::Csv => read_csv(table, &path, bytes, spec)?,
                    Format::Whitespace => read_whitespace(table, &path, &bytes, spec)?,
                    Format::Libsvm => read_libsvm(table, &path, &bytes, spec.n_features.unwrap_or(0))?,
                    // Idx is read above; synthetic entries have no files (Registry generates them).
                    Format::Idx | Format::Synthetic => {}
                }
            }
        }
    }
    Ok(())
}

/// Rows read so far, over all files of one dataset.
#[derive(Default)]
struct Table {
    /// Number of features, fixed by the first file.
    width: Option<usize>,
    /// The file that fixed `width` (for the error when a later file disagrees).
    width_from: String,
    /// Row-major feature values.
    values: Vec<f64>,
    /// Raw label text per row.
    labels: Vec<String>,
    /// (file, line) of each row, for errors about labels.
    origins: Vec<(usize, usize)>,
    files: Vec<String>,
    feature_names: Option<Vec<String>>,
}

impl Table {
    /// Drop the rows whose label is not in `keep` (normalised like the class names); returns
    /// how many of the first `n_train` rows remain, or an entry of `keep` that no row has (a
    /// typo would otherwise drop a class silently).
    fn keep_classes(&mut self, keep: &[String], n_train: usize) -> Result<usize, String> {
        let present: HashSet<String> = self.labels.iter().map(|l| normalize_label(l)).collect();
        if let Some(missing) = keep.iter().find(|l| !present.contains(&normalize_label(l))) {
            return Err(missing.clone());
        }
        let keep: HashSet<String> = keep.iter().map(|l| normalize_label(l)).collect();
        let d = self.width.unwrap_or(0);
        let mask: Vec<bool> = self.labels.iter().map(|l| keep.contains(&normalize_label(l))).collect();
        let mut row = 0;
        self.values.retain(|_| {
            let k = mask[row / d.max(1)];
            row += 1;
            k
        });
        let mut i = 0;
        self.labels.retain(|_| (mask[i], i += 1).0);
        let mut i = 0;
        self.origins.retain(|_| (mask[i], i += 1).0);
        Ok(mask[..n_train].iter().filter(|&&k| k).count())
    }
}

impl Table {
    /// Starts a new file with `d` features; all files of a dataset must agree on `d`.
    fn begin_file(&mut self, path: &Path, d: usize, names: Option<Vec<String>>) -> Result<(), DataError> {
        match self.width {
            Some(w) if w != d => {
                return Err(DataError::invalid(path, format!("expected {w} features (like {}), found {d}", self.width_from)))
            }
            // Columns are matched by position: with headers, a later file must name them alike
            // (test columns in another order would be swapped silently).
            Some(_) => {
                if let (Some(first), Some(these)) = (&self.feature_names, &names) {
                    if first != these {
                        return Err(DataError::invalid(
                            path,
                            format!(
                                "feature columns {these:?} differ from {first:?} of {}: files of a dataset must agree",
                                self.width_from
                            ),
                        ));
                    }
                }
            }
            None => {
                self.width = Some(d);
                self.width_from = show(path);
                self.feature_names = names;
            }
        }
        self.files.push(show(path));
        Ok(())
    }

    fn push_label(&mut self, label: String, line: usize) {
        self.labels.push(label);
        self.origins.push((self.files.len() - 1, line));
    }
}

/// File contents, gunzipped when the name ends in `.gz`.
fn read_bytes(path: &Path) -> Result<Vec<u8>, DataError> {
    let raw = std::fs::read(path).map_err(|e| DataError::io(path, e))?;
    if path.extension().is_some_and(|e| e == "gz") {
        let mut out = Vec::with_capacity(raw.len() * 4);
        // MultiGzDecoder: `cat a.gz b.gz` is a valid gzip file too.
        flate2::read::MultiGzDecoder::new(&raw[..])
            .read_to_end(&mut out)
            .map_err(|e| DataError::invalid(path, format!("cannot gunzip: {e}")))?;
        Ok(out)
    } else {
        Ok(raw)
    }
}

fn to_text<'a>(path: &Path, bytes: &'a [u8]) -> Result<&'a str, DataError> {
    std::str::from_utf8(bytes).map_err(|e| {
        let line = 1 + bytes[..e.valid_up_to()].iter().filter(|&&b| b == b'\n').count();
        DataError::parse(path, line, "not UTF-8 text")
    })
}

/// Parses one feature value; surrounding blanks are allowed (UCI isolet writes ", 0.5").
fn parse_value(path: &Path, line: usize, column: usize, text: &str) -> Result<f64, DataError> {
    let t = text.trim();
    match t.parse::<f64>() {
        Ok(v) if v.is_finite() => Ok(v),
        _ => Err(DataError::parse(path, line, format!("column {column}: expected a finite number, found '{t}'"))),
    }
}

/// Which raw columns are features, and which one is the label, for a file with `n_cols` columns.
fn layout(path: &Path, line: usize, n_cols: usize, spec: &DatasetSpec) -> Result<(usize, Vec<usize>), DataError> {
    let label = spec.label_index(n_cols).ok_or_else(|| {
        DataError::parse(path, line, format!("label_column {} is out of range for {n_cols} columns", spec.label_column.unwrap_or(-1)))
    })?;
    if let Some(c) = spec.drop_columns.iter().find(|&&c| c >= n_cols) {
        return Err(DataError::parse(path, line, format!("drop_columns has column {c}, but the file has only {n_cols} columns")));
    }
    let features = (0..n_cols).filter(|c| *c != label && !spec.drop_columns.contains(c)).collect();
    Ok((label, features))
}

/// Comma-separated text, parsed by polars with every column read as text; values are then
/// converted here so a bad value is reported with its file and line.
fn read_csv(table: &mut Table, path: &Path, bytes: Vec<u8>, spec: &DatasetSpec) -> Result<(), DataError> {
    // Pre-pass: drop blank lines (iris ends with one) and CR line ends, remember each kept line's
    // number, and check the column count so a short row gets "file:line: expected .. columns"
    // rather than a silent null. Lines with quotes are left to polars (a quoted comma is data).
    let mut cleaned = Vec::with_capacity(bytes.len());
    let mut line_numbers = Vec::new();
    let mut expected: Option<usize> = None;
    for (i, raw) in bytes.split(|&b| b == b'\n').enumerate() {
        let line = raw.strip_suffix(b"\r").unwrap_or(raw);
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        if !line.contains(&b'"') {
            let cols = 1 + line.iter().filter(|&&b| b == b',').count();
            match expected {
                None => expected = Some(cols),
                Some(e) if e != cols => return Err(DataError::parse(path, i + 1, format!("expected {e} columns, found {cols}"))),
                Some(_) => {}
            }
        }
        cleaned.extend_from_slice(line);
        cleaned.push(b'\n');
        line_numbers.push(i + 1);
    }
    drop(bytes);
    let first_line = line_numbers.first().copied().unwrap_or(1);
    let data_lines = if spec.header { line_numbers.get(1..).unwrap_or(&[]) } else { &line_numbers[..] };
    if data_lines.is_empty() {
        return Err(DataError::invalid(path, "no data rows"));
    }

    let df = CsvReadOptions::default()
        .with_has_header(spec.header)
        .with_infer_schema_length(Some(0)) // every column as text
        .into_reader_with_file_handle(Cursor::new(cleaned))
        .finish()
        .map_err(|e| DataError::invalid(path, format!("CSV parse error: {e}")))?;
    if df.height() != data_lines.len() {
        return Err(DataError::invalid(
            path,
            format!("polars read {} rows, expected {} non-blank data lines", df.height(), data_lines.len()),
        ));
    }
    let (label, features) = layout(path, first_line, df.width(), spec)?;
    let names = spec.header.then(|| features.iter().map(|&c| df.columns()[c].name().to_string()).collect::<Vec<_>>());
    table.begin_file(path, features.len(), names)?;

    let text_column = |c: usize| df.columns()[c].str().map_err(|e| DataError::invalid(path, format!("column {c} is not text: {e}")));
    let d = features.len();
    let start = table.values.len();
    table.values.resize(start + data_lines.len() * d, 0.0);
    for (j, &c) in features.iter().enumerate() {
        for (i, value) in text_column(c)?.iter().enumerate() {
            let line = data_lines[i];
            let text = value.ok_or_else(|| DataError::parse(path, line, format!("column {c}: missing value")))?;
            table.values[start + i * d + j] = parse_value(path, line, c, text)?;
        }
    }
    for (i, value) in text_column(label)?.iter().enumerate() {
        let line = data_lines[i];
        let text = value.ok_or_else(|| DataError::parse(path, line, format!("column {label}: missing label")))?;
        if text.trim().is_empty() {
            return Err(DataError::parse(path, line, format!("column {label}: empty label")));
        }
        table.push_label(text.trim().to_string(), line);
    }
    Ok(())
}

/// Text whose columns are separated by runs of blanks (polars needs a single-byte separator, and
/// some files end lines with a trailing space).
fn read_whitespace(table: &mut Table, path: &Path, bytes: &[u8], spec: &DatasetSpec) -> Result<(), DataError> {
    let text = to_text(path, bytes)?;
    let mut lines = text.lines().enumerate().map(|(i, l)| (i + 1, l)).filter(|(_, l)| !l.trim().is_empty()).peekable();
    let header: Option<Vec<&str>> = if spec.header { lines.next().map(|(_, l)| l.split_whitespace().collect()) } else { None };
    let Some(&(first_line, first)) = lines.peek() else {
        return Err(DataError::invalid(path, "no data rows"));
    };
    let n_cols = header.as_ref().map_or_else(|| first.split_whitespace().count(), Vec::len);
    let (label, features) = layout(path, first_line, n_cols, spec)?;
    let names = header.map(|h| features.iter().map(|&c| h[c].to_string()).collect());
    table.begin_file(path, features.len(), names)?;

    let mut fields = Vec::with_capacity(n_cols);
    for (line, l) in lines {
        fields.clear();
        fields.extend(l.split_whitespace());
        if fields.len() != n_cols {
            return Err(DataError::parse(path, line, format!("expected {n_cols} columns, found {}", fields.len())));
        }
        for &c in &features {
            let v = parse_value(path, line, c, fields[c])?;
            table.values.push(v);
        }
        table.push_label(fields[label].to_string(), line);
    }
    Ok(())
}

/// LIBSVM sparse text: `label idx:val idx:val ...`, 1-based indices, absent entries are 0.
fn read_libsvm(table: &mut Table, path: &Path, bytes: &[u8], n_features: usize) -> Result<(), DataError> {
    let text = to_text(path, bytes)?;
    table.begin_file(path, n_features, None)?;
    for (i, l) in text.lines().enumerate() {
        let line = i + 1;
        let mut tokens = l.split_whitespace();
        let Some(label) = tokens.next() else { continue };
        if label.contains(':') {
            return Err(DataError::parse(path, line, format!("expected a label before the index:value pairs, found '{label}'")));
        }
        let start = table.values.len();
        table.values.resize(start + n_features, 0.0);
        let mut given = vec![false; n_features];
        for token in tokens {
            let bad = |what: &str| DataError::parse(path, line, format!("expected index:value, found '{token}' ({what})"));
            let (index, value) = token.split_once(':').ok_or_else(|| bad("no ':'"))?;
            let index: usize = index.parse().map_err(|_| bad("index is not a positive integer"))?;
            if index == 0 || index > n_features {
                return Err(DataError::parse(
                    path,
                    line,
                    format!("feature index {index} is outside 1..={n_features} (n_features in the registry)"),
                ));
            }
            if std::mem::replace(&mut given[index - 1], true) {
                return Err(DataError::parse(path, line, format!("feature index {index} appears twice")));
            }
            table.values[start + index - 1] = parse_value(path, line, index, value)?;
        }
        table.push_label(label.to_string(), line);
    }
    Ok(())
}

const IDX_IMAGES_MAGIC: u32 = 2051;
const IDX_LABELS_MAGIC: u32 = 2049;

fn be_u32(bytes: &[u8], at: usize) -> Option<u32> {
    let b = bytes.get(at..at + 4)?;
    Some(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

/// One MNIST-style (images, labels) pair of IDX files; pixels are scaled to [0, 1] by /255.
fn read_idx_pair(table: &mut Table, images_path: &Path, labels_path: &Path) -> Result<(), DataError> {
    let images = read_bytes(images_path)?;
    let labels = read_bytes(labels_path)?;

    let magic = be_u32(&images, 0);
    if magic != Some(IDX_IMAGES_MAGIC) {
        return Err(DataError::invalid(
            images_path,
            format!("expected an IDX image file (magic {IDX_IMAGES_MAGIC}), found magic {magic:?}; idx files are listed as (images, labels) pairs"),
        ));
    }
    let (Some(count), Some(rows), Some(cols)) = (be_u32(&images, 4), be_u32(&images, 8), be_u32(&images, 12)) else {
        return Err(DataError::invalid(images_path, "IDX header is shorter than 16 bytes"));
    };
    let (n, d) = (count as usize, rows as usize * cols as usize);
    // Checked: a corrupt header must give an error, not a wrapped size.
    let expected_len = n.checked_mul(d).and_then(|p| p.checked_add(16));
    if expected_len != Some(images.len()) {
        return Err(DataError::invalid(
            images_path,
            format!("expected 16 + {n} x {rows} x {cols} bytes for {n} images of {rows}x{cols}, found {} bytes", images.len()),
        ));
    }

    let magic = be_u32(&labels, 0);
    if magic != Some(IDX_LABELS_MAGIC) {
        return Err(DataError::invalid(
            labels_path,
            format!("expected an IDX label file (magic {IDX_LABELS_MAGIC}), found magic {magic:?}"),
        ));
    }
    let label_count = be_u32(&labels, 4).map(|c| c as usize);
    if label_count != Some(n) || labels.len() != 8 + n {
        return Err(DataError::invalid(
            labels_path,
            format!(
                "expected {n} labels (one per image in {}), found {label_count:?} in the header and {} label bytes",
                show(images_path),
                labels.len().saturating_sub(8)
            ),
        ));
    }

    table.begin_file(images_path, d, None)?;
    table.values.extend(images[16..].iter().map(|&p| f64::from(p) / 255.0));
    for (i, &label) in labels[8..].iter().enumerate() {
        // "line" of an IDX row = 1-based record number.
        table.push_label(label.to_string(), i + 1);
    }
    Ok(())
}

/// Canonical class name of a raw label: blanks trimmed, and numbers written one way, so "1",
/// "+1", "1.0", "1." and "01" are all class "1". Non-numeric labels are kept as they are.
pub(crate) fn normalize_label(raw: &str) -> String {
    let t = raw.trim();
    match numeric_label(t) {
        // f64's Display is the shortest text that round-trips: 1.0 -> "1", 1.50 -> "1.5".
        // Adding 0.0 turns -0 into 0.
        Some(v) => format!("{}", v + 0.0),
        None => t.to_string(),
    }
}

/// The value of a label that is a plain decimal number (not "nan", "inf" or "1e5x").
fn numeric_label(t: &str) -> Option<f64> {
    let plain = !t.is_empty()
        && t.chars().any(|c| c.is_ascii_digit())
        && t.chars().all(|c| c.is_ascii_digit() || matches!(c, '.' | '+' | '-' | 'e' | 'E'));
    if !plain {
        return None;
    }
    t.parse::<f64>().ok().filter(|v| v.is_finite())
}

/// Class names and per-row class indices. Default order: numeric when every label is a number,
/// otherwise lexicographic; `class_order` overrides it.
fn assign_classes(table: &Table, class_order: Option<&[String]>, dir: &Path) -> Result<(Vec<String>, Vec<usize>), DataError> {
    // Normalise each distinct raw text once (MNIST has 70000 rows but 10 texts).
    let mut normal: HashMap<&str, String> = HashMap::new();
    for raw in &table.labels {
        if !normal.contains_key(raw.as_str()) {
            normal.insert(raw.as_str(), normalize_label(raw));
        }
    }

    let class_names: Vec<String> = match class_order {
        Some(order) => {
            let names: Vec<String> = order.iter().map(|l| normalize_label(l)).collect();
            for (row, raw) in table.labels.iter().enumerate() {
                if !names.contains(&normal[raw.as_str()]) {
                    let (file, line) = table.origins[row];
                    let path = table.files.get(file).map_or_else(|| show(dir), Clone::clone);
                    return Err(DataError::Parse {
                        path,
                        line,
                        message: format!("label '{raw}' is not in the registry's class_order [{}]", order.join(", ")),
                    });
                }
            }
            names
        }
        None => {
            let mut names: Vec<String> = normal.values().cloned().collect();
            names.sort();
            names.dedup();
            let values: Option<Vec<f64>> = names.iter().map(|n| numeric_label(n)).collect();
            if let Some(values) = values {
                let mut pairs: Vec<(f64, String)> = values.into_iter().zip(names).collect();
                pairs.sort_by(|a, b| a.0.total_cmp(&b.0));
                names = pairs.into_iter().map(|(_, n)| n).collect();
            }
            names
        }
    };

    let index: HashMap<&str, usize> = class_names.iter().enumerate().map(|(i, n)| (n.as_str(), i)).collect();
    let y = table.labels.iter().map(|raw| index[normal[raw.as_str()].as_str()]).collect();
    Ok((class_names, y))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(format: Format) -> DatasetSpec {
        DatasetSpec {
            files: vec!["f".into()],
            test_files: None,
            format,
            header: false,
            label_column: None,
            drop_columns: vec![],
            n_features: None,
            class_order: None,
            keep_classes: None,
            generator: None,
            n: None,
            seed: None,
            description: "test".into(),
            citation: "none".into(),
        }
    }

    fn p() -> &'static Path {
        Path::new("mem.txt")
    }

    #[test]
    fn label_normalisation() {
        for raw in ["1", "+1", "1.0", "1.", " 1 ", "01", "1.000"] {
            assert_eq!(normalize_label(raw), "1", "{raw}");
        }
        assert_eq!(normalize_label("-1"), "-1");
        assert_eq!(normalize_label("-0"), "0");
        assert_eq!(normalize_label("2.50"), "2.5");
        assert_eq!(normalize_label("Iris-setosa"), "Iris-setosa");
        assert_eq!(normalize_label("nan"), "nan");
        assert_eq!(normalize_label("e"), "e");
    }

    #[test]
    fn class_order_numeric_and_text() {
        let mut t = Table::default();
        t.files.push("f".into());
        for l in ["10", "+2", "2.0", "1."] {
            t.push_label(l.into(), 1);
        }
        let (names, y) = assign_classes(&t, None, p()).expect("classes");
        assert_eq!(names, ["1", "2", "10"]); // numeric, not "1" < "10" < "2"
        assert_eq!(y, [2, 1, 1, 0]);

        let mut t = Table::default();
        t.files.push("f".into());
        for l in ["van", "bus", "opel"] {
            t.push_label(l.into(), 1);
        }
        let (names, y) = assign_classes(&t, None, p()).expect("classes");
        assert_eq!(names, ["bus", "opel", "van"]);
        assert_eq!(y, [2, 0, 1]);

        let order = vec!["van".to_string(), "opel".into(), "bus".into(), "saab".into()];
        let (names, y) = assign_classes(&t, Some(&order), p()).expect("classes");
        assert_eq!(names, ["van", "opel", "bus", "saab"]);
        assert_eq!(y, [0, 2, 1]);

        let short = vec!["van".to_string()];
        let msg = assign_classes(&t, Some(&short), p()).expect_err("bus not listed").to_string();
        assert!(msg.starts_with("f:1: label 'bus'"), "{msg}");
    }

    #[test]
    fn keep_classes_drops_other_rows_and_counts_the_training_part() {
        let mut t = Table { width: Some(2), ..Default::default() };
        t.files.push("f".into());
        for (i, l) in ["1", "7", "2", "7", "1.0"].iter().enumerate() {
            t.values.extend([i as f64, 10.0 * i as f64]);
            t.push_label(l.to_string(), i + 1);
        }
        // Rows 0-2 from the training files, 3-4 from the test files.
        let n_train = t.keep_classes(&["+1".to_string(), "2".to_string()], 3).unwrap();
        assert_eq!(n_train, 2);
        assert_eq!(t.labels, ["1", "2", "1.0"]);
        assert_eq!(t.values, [0.0, 0.0, 2.0, 20.0, 4.0, 40.0]);
        assert_eq!(t.origins.iter().map(|o| o.1).collect::<Vec<_>>(), [1, 3, 5]);
    }

    #[test]
    fn whitespace_parsing() {
        let text = b"1 2  3 a \n\n4\t5 6 b\n";
        let mut t = Table::default();
        read_whitespace(&mut t, p(), text, &spec(Format::Whitespace)).expect("parse");
        assert_eq!(t.width, Some(3));
        assert_eq!(t.values, [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        assert_eq!(t.labels, ["a", "b"]);

        let mut s = spec(Format::Whitespace);
        s.label_column = Some(0);
        s.drop_columns = vec![1];
        let mut t = Table::default();
        read_whitespace(&mut t, p(), b"x 9 1 2\ny 9 3 4\n", &s).expect("parse");
        assert_eq!(t.values, [1.0, 2.0, 3.0, 4.0]);
        assert_eq!(t.labels, ["x", "y"]);

        let msg =
            read_whitespace(&mut Table::default(), p(), b"1 2 a\n1 2 3 a\n", &spec(Format::Whitespace)).expect_err("ragged").to_string();
        assert_eq!(msg, "mem.txt:2: expected 3 columns, found 4");
        let msg =
            read_whitespace(&mut Table::default(), p(), b"1 2 a\n1 ? a\n", &spec(Format::Whitespace)).expect_err("bad value").to_string();
        assert_eq!(msg, "mem.txt:2: column 1: expected a finite number, found '?'");
    }

    #[test]
    fn libsvm_parsing() {
        let text = b"+1 1:0.5 3:2\n-1 2:1\n\n2\n";
        let mut t = Table::default();
        read_libsvm(&mut t, p(), text, 3).expect("parse");
        assert_eq!(t.values, [0.5, 0.0, 2.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0]);
        assert_eq!(t.labels, ["+1", "-1", "2"]);
        assert_eq!(t.origins, [(0, 1), (0, 2), (0, 4)]);

        let msg = read_libsvm(&mut Table::default(), p(), b"1 1:1\n1 4:1\n", 3).expect_err("index").to_string();
        assert!(msg.starts_with("mem.txt:2: feature index 4 is outside 1..=3"), "{msg}");
        let msg = read_libsvm(&mut Table::default(), p(), b"1:1 2:1\n", 3).expect_err("no label").to_string();
        assert!(msg.starts_with("mem.txt:1: expected a label"), "{msg}");
        let msg = read_libsvm(&mut Table::default(), p(), b"1 1=1\n", 3).expect_err("syntax").to_string();
        assert!(msg.starts_with("mem.txt:1: expected index:value, found '1=1'"), "{msg}");
    }

    #[test]
    fn csv_parsing() {
        let mut s = spec(Format::Csv);
        s.header = true;
        s.drop_columns = vec![0];
        s.label_column = Some(1);
        let text = b"id,y,a,b\r\n1,+1,.5,2\r\n2,2., -1 ,3e1\r\n\r\n".to_vec();
        let mut t = Table::default();
        read_csv(&mut t, p(), text, &s).expect("parse");
        assert_eq!(t.values, [0.5, 2.0, -1.0, 30.0]);
        assert_eq!(t.labels, ["+1", "2."]);
        assert_eq!(t.feature_names.as_deref(), Some(&["a".to_string(), "b".to_string()][..]));

        let msg = read_csv(&mut Table::default(), p(), b"1,2,3\n\n1,2\n".to_vec(), &spec(Format::Csv)).expect_err("short row").to_string();
        assert_eq!(msg, "mem.txt:3: expected 3 columns, found 2");
        let msg = read_csv(&mut Table::default(), p(), b"1,2,a\n1,x,b\n".to_vec(), &spec(Format::Csv)).expect_err("bad value").to_string();
        assert_eq!(msg, "mem.txt:2: column 1: expected a finite number, found 'x'");
    }

    #[test]
    fn files_must_agree_on_width() {
        let mut t = Table::default();
        read_whitespace(&mut t, Path::new("a.txt"), b"1 2 a\n", &spec(Format::Whitespace)).expect("first");
        let msg = read_whitespace(&mut t, Path::new("b.txt"), b"1 a\n", &spec(Format::Whitespace)).expect_err("width").to_string();
        assert_eq!(msg, "b.txt: expected 2 features (like a.txt), found 1");
    }

    #[test]
    fn idx_pair_round_trip() {
        let dir = tempfile::tempdir().expect("temp dir");
        let images = dir.path().join("img");
        let labels = dir.path().join("lab");
        let mut img = vec![0, 0, 8, 3, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 2];
        img.extend([0u8, 255, 51, 102]);
        std::fs::write(&images, &img).expect("write");
        std::fs::write(&labels, [0u8, 0, 8, 1, 0, 0, 0, 2, 7, 3]).expect("write");
        let mut t = Table::default();
        read_idx_pair(&mut t, &images, &labels).expect("idx");
        assert_eq!(t.width, Some(2));
        assert_eq!(t.values, [0.0, 1.0, 0.2, 0.4]);
        assert_eq!(t.labels, ["7", "3"]);
        // Swapped pair: a clear error about the magic number.
        let msg = read_idx_pair(&mut Table::default(), &labels, &images).expect_err("swapped").to_string();
        assert!(msg.contains("expected an IDX image file (magic 2051)"), "{msg}");
    }
}
