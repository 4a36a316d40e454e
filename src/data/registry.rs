//! The dataset registry: `datasets.yaml` in the data folder, one entry per dataset.
//!
//! The registry says where each dataset's files are and how to read them; the loaders in
//! [`super::loaders`] do the reading. Entries are checked when the registry is loaded, so a bad
//! entry fails `mcgp list` rather than a run hours later.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::error::{show, DataError};
use super::loaders;
use super::Dataset;

/// File name of the registry inside the data folder.
pub const REGISTRY_FILE: &str = "datasets.yaml";

/// How a dataset's files are laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// Comma separated (read with polars), optional header.
    Csv,
    /// Separated by any run of spaces or tabs (lines may have trailing blanks).
    Whitespace,
    /// LIBSVM sparse text `label idx:val ...` with 1-based indices; absent entries are 0.
    Libsvm,
    /// MNIST IDX binary files, given as (images, labels) pairs.
    Idx,
    /// No files: rows drawn by a named generator (`generator`, `n`, `seed`; see [`super::synthetic`]).
    Synthetic,
}

impl Format {
    fn name(self) -> &'static str {
        match self {
            Format::Csv => "csv",
            Format::Whitespace => "whitespace",
            Format::Libsvm => "libsvm",
            Format::Idx => "idx",
            Format::Synthetic => "synthetic",
        }
    }
}

/// One entry of `datasets.yaml`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DatasetSpec {
    /// Training rows (or all rows), relative to the data folder; read in order and concatenated.
    /// Empty (omitted) for format synthetic.
    #[serde(default)]
    pub files: Vec<String>,
    /// The dataset's own fixed test rows, appended after `files`.
    #[serde(default)]
    pub test_files: Option<Vec<String>>,
    pub format: Format,
    /// First non-blank line holds column names (csv and whitespace only).
    #[serde(default)]
    pub header: bool,
    /// 0-based raw column of the label, -1 = last (csv and whitespace; default -1).
    #[serde(default)]
    pub label_column: Option<i64>,
    /// Raw column indices that are not features (row ids and the like).
    #[serde(default)]
    pub drop_columns: Vec<usize>,
    /// Number of features (libsvm only: the files do not say).
    #[serde(default)]
    pub n_features: Option<usize>,
    /// Class labels in the order that fixes the class indices; labels are normalised like the
    /// data's ("+1", "1.0" and "1" are the same). Classes listed here are kept even if no row has
    /// them.
    #[serde(default)]
    pub class_order: Option<Vec<String>>,
    /// Only the rows of these classes are kept (Villacampa-Calvo & Hernandez-Lobato's vowel:
    /// its first 6 classes); labels normalised like the data's. Left out of the serialised
    /// entry when absent, so the content hashes (cell keys) of entries without it are those
    /// from before the field existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep_classes: Option<Vec<String>>,
    /// Format synthetic: the generator's name, the number of rows and the seed.
    #[serde(default)]
    pub generator: Option<String>,
    #[serde(default)]
    pub n: Option<usize>,
    #[serde(default)]
    pub seed: Option<u64>,
    pub description: String,
    pub citation: String,
}

impl DatasetSpec {
    /// Raw label column for a file with `n_cols` columns (`None` if out of range).
    pub(crate) fn label_index(&self, n_cols: usize) -> Option<usize> {
        match self.label_column.unwrap_or(-1) {
            -1 => n_cols.checked_sub(1),
            c if c >= 0 && (c as usize) < n_cols => Some(c as usize),
            _ => None,
        }
    }

    /// The entry's own rules (those that do not need the files). Err names the field.
    fn check(&self) -> Result<(), String> {
        if self.format == Format::Synthetic {
            return self.check_synthetic();
        }
        if self.generator.is_some() || self.n.is_some() || self.seed.is_some() {
            return Err("`generator`, `n` and `seed` are only for format synthetic".into());
        }
        if self.files.is_empty() {
            return Err("`files` is empty".into());
        }
        if let Some(t) = &self.test_files {
            if t.is_empty() {
                return Err("`test_files` is empty (leave it out if there are no test files)".into());
            }
        }
        let tabular = matches!(self.format, Format::Csv | Format::Whitespace);
        let fmt = self.format.name();
        if !tabular {
            if self.header {
                return Err(format!("`header: true` is not allowed with format {fmt}"));
            }
            if self.label_column.is_some() {
                return Err(format!("`label_column` is not allowed with format {fmt} (the format fixes where the label is)"));
            }
            if !self.drop_columns.is_empty() {
                return Err(format!("`drop_columns` is not allowed with format {fmt}"));
            }
        }
        match (self.format, self.n_features) {
            (Format::Libsvm, None) => return Err("format libsvm needs `n_features`".into()),
            (Format::Libsvm, Some(0)) => return Err("`n_features` must be at least 1".into()),
            (Format::Libsvm, Some(_)) | (_, None) => {}
            (_, Some(_)) => return Err(format!("`n_features` is only for format libsvm, not {fmt}")),
        }
        if self.format == Format::Idx {
            let test_len = self.test_files.as_ref().map_or(0, Vec::len);
            if !self.files.len().is_multiple_of(2) || !test_len.is_multiple_of(2) {
                return Err("format idx needs files in (images, labels) pairs".into());
            }
        }
        if let Some(c) = self.label_column {
            if c < -1 {
                return Err(format!("`label_column` must be a 0-based column index or -1 (last), found {c}"));
            }
            if c >= 0 && self.drop_columns.contains(&(c as usize)) {
                return Err(format!("`drop_columns` contains the label column {c}"));
            }
        }
        let mut seen = HashSet::new();
        for c in &self.drop_columns {
            if !seen.insert(c) {
                return Err(format!("`drop_columns` lists column {c} twice"));
            }
        }
        if let Some(order) = &self.class_order {
            let mut seen = HashSet::new();
            for label in order {
                if !seen.insert(loaders::normalize_label(label)) {
                    return Err(format!("`class_order` lists class '{label}' twice"));
                }
            }
        }
        Ok(())
    }

    /// Rules of a `format: synthetic` entry: a known generator and `n`, no files.
    fn check_synthetic(&self) -> Result<(), String> {
        if !self.files.is_empty() || self.test_files.is_some() {
            return Err("format synthetic takes no `files` or `test_files`".into());
        }
        if self.header
            || self.label_column.is_some()
            || !self.drop_columns.is_empty()
            || self.n_features.is_some()
            || self.class_order.is_some()
            || self.keep_classes.is_some()
        {
            return Err("format synthetic allows only `generator`, `n`, `seed`, `description` and `citation`".into());
        }
        match self.generator.as_deref() {
            None => return Err("format synthetic needs `generator`".into()),
            Some(g) if !super::synthetic::GENERATORS.contains(&g) => {
                return Err(format!("unknown generator \"{g}\" (known: {})", super::synthetic::GENERATORS.join(", ")))
            }
            Some(_) => {}
        }
        match self.n {
            None => Err("format synthetic needs `n` (number of rows)".into()),
            Some(n) if n < 2 => Err(format!("`n` must be at least 2, found {n}")),
            Some(_) => Ok(()),
        }
    }
}

/// All datasets known to the project, read from `<data_dir>/datasets.yaml`.
#[derive(Debug, Clone)]
pub struct Registry {
    dir: PathBuf,
    entries: BTreeMap<String, DatasetSpec>,
}

impl Registry {
    /// Reads and checks `<data_dir>/datasets.yaml`.
    pub fn load(data_dir: &Path) -> Result<Registry, DataError> {
        let path = data_dir.join(REGISTRY_FILE);
        let registry_error = |message: String| DataError::Registry { path: show(&path), message };
        let text = std::fs::read_to_string(&path).map_err(|e| {
            registry_error(format!(
                "cannot read the dataset registry ({e}); give the folder that holds {REGISTRY_FILE} with --data DIR (or set MCGP_DATA_DIR)"
            ))
        })?;
        let entries: BTreeMap<String, DatasetSpec> =
            serde_norway::from_str(&text).map_err(|e| registry_error(format!("invalid registry: {e}")))?;
        for (name, spec) in &entries {
            if name.trim().is_empty() || name.chars().any(char::is_whitespace) {
                return Err(registry_error(format!("dataset name '{name}' must be non-empty without spaces")));
            }
            spec.check().map_err(|m| registry_error(format!("dataset '{name}': {m}")))?;
        }
        Ok(Registry { dir: data_dir.to_path_buf(), entries })
    }

    /// The data folder the registry was read from (dataset files are relative to it).
    pub fn data_dir(&self) -> &Path {
        &self.dir
    }

    /// Dataset names, sorted.
    pub fn names(&self) -> Vec<String> {
        self.entries.keys().cloned().collect()
    }

    pub fn contains(&self, name: &str) -> bool {
        self.entries.contains_key(name)
    }

    /// The registry entry of `name`.
    pub fn spec(&self, name: &str) -> Option<&DatasetSpec> {
        self.entries.get(name)
    }

    /// One line for `mcgp list`: name, description, files, and which files are missing.
    pub fn describe(&self, name: &str) -> Option<String> {
        let spec = self.entries.get(name)?;
        let mut files = match (&spec.generator, spec.n) {
            (Some(g), Some(n)) => format!("{g} n={n} seed={}", spec.seed.unwrap_or(0)),
            _ => spec.files.join(" + "),
        };
        if let Some(test) = &spec.test_files {
            files.push_str(&format!("; test: {}", test.join(" + ")));
        }
        let missing: Vec<&str> =
            spec.files.iter().chain(spec.test_files.iter().flatten()).filter(|f| !self.dir.join(f).exists()).map(String::as_str).collect();
        let mut line = format!("{name}: {} [{} {files}]", spec.description, spec.format.name());
        if !missing.is_empty() {
            line.push_str(&format!(" (MISSING: {})", missing.join(", ")));
        }
        Some(line)
    }

    /// Loads dataset `name`: all rows, the fixed training rows first.
    pub fn load_dataset(&self, name: &str) -> Result<Dataset, DataError> {
        let spec = self.entries.get(name).ok_or_else(|| self.unknown(name))?;
        if let (Format::Synthetic, Some(generator), Some(n)) = (spec.format, &spec.generator, spec.n) {
            return super::synthetic::generate(name, generator, n, spec.seed.unwrap_or(0))
                .map_err(|message| DataError::Registry { path: show(&self.dir.join(REGISTRY_FILE)), message });
        }
        loaders::load(name, spec, &self.dir)
    }

    /// The identity of a dataset's content: blake3 over its registry entry and the bytes of every
    /// file it reads (the generator version for synthetic ones), so an edited or replaced file,
    /// or a changed entry, gives another cell key. Hex, 24 digits.
    pub fn content_hash(&self, name: &str) -> Result<String, DataError> {
        let spec = self.entries.get(name).ok_or_else(|| self.unknown(name))?;
        let mut h = blake3::Hasher::new();
        h.update(serde_json::to_string(spec).expect("a registry entry serialises").as_bytes());
        if spec.format == Format::Synthetic {
            h.update(format!("generator-version {}", super::synthetic::GENERATOR_VERSION).as_bytes());
        }
        for file in spec.files.iter().chain(spec.test_files.iter().flatten()) {
            let path = self.dir.join(file);
            let bytes = std::fs::read(&path).map_err(|source| DataError::Io { path: show(&path), source })?;
            h.update(&(bytes.len() as u64).to_le_bytes());
            h.update(&bytes);
        }
        Ok(h.finalize().to_hex()[..24].to_string())
    }

    fn unknown(&self, name: &str) -> DataError {
        let suggestion = match crate::suggest::closest(name, self.entries.keys().map(String::as_str)) {
            Some(k) => format!(" (did you mean '{k}'?)"),
            None => String::new(),
        };
        DataError::UnknownDataset { name: name.to_string(), suggestion, known: self.names().join(", ") }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write_registry(text: &str) -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(dir.path().join(REGISTRY_FILE), text).expect("write registry");
        dir
    }

    #[test]
    fn unknown_name_suggests_closest() {
        let dir = write_registry(
            "iris: {files: [iris.data], format: csv, description: d, citation: c}\n\
             wine: {files: [wine.data], format: csv, description: d, citation: c}\n",
        );
        let reg = Registry::load(dir.path()).expect("registry");
        let msg = reg.load_dataset("irsi").expect_err("unknown").to_string();
        assert!(msg.contains("did you mean 'iris'"), "{msg}");
        assert!(msg.contains("known datasets: iris, wine"), "{msg}");
        let msg = reg.load_dataset("completely-different").expect_err("unknown").to_string();
        assert!(!msg.contains("did you mean"), "{msg}");
    }

    #[test]
    fn unknown_fields_and_bad_entries_are_rejected() {
        let dir = write_registry("iris: {files: [a], format: csv, description: d, citation: c, colour: red}\n");
        let msg = Registry::load(dir.path()).expect_err("unknown field").to_string();
        assert!(msg.contains("colour"), "{msg}");

        let dir = write_registry("dna: {files: [a], format: libsvm, description: d, citation: c}\n");
        let msg = Registry::load(dir.path()).expect_err("no n_features").to_string();
        assert!(msg.contains("dataset 'dna'") && msg.contains("n_features"), "{msg}");

        let dir = write_registry("x: {files: [a], format: csv, label_column: 0, drop_columns: [0], description: d, citation: c}\n");
        let msg = Registry::load(dir.path()).expect_err("label dropped").to_string();
        assert!(msg.contains("label column 0"), "{msg}");
    }

    #[test]
    fn fields_added_later_leave_older_entries_serialised_as_before() {
        // The content hash (part of every cell key) serialises the entry: a new optional field
        // must not appear in entries that do not use it.
        let dir = write_registry("x: {files: [a], format: csv, description: d, citation: c}\n");
        let reg = Registry::load(dir.path()).expect("registry");
        let text = serde_json::to_string(reg.spec("x").expect("entry")).expect("json");
        assert!(!text.contains("keep_classes"), "{text}");
    }

    #[test]
    fn class_order_accepts_numbers_and_strings() {
        let dir = write_registry("x: {files: [a], format: csv, class_order: [3, '+1', 2.0], description: d, citation: c}\n");
        let reg = Registry::load(dir.path()).expect("registry");
        let order = reg.spec("x").and_then(|s| s.class_order.clone()).expect("class_order");
        let normalised: Vec<String> = order.iter().map(|l| loaders::normalize_label(l)).collect();
        assert_eq!(normalised, ["3", "1", "2"]);
    }

    #[test]
    fn synthetic_entries_generate_and_are_checked() {
        let dir = write_registry("toy: {format: synthetic, generator: gr2006-toy, n: 90, seed: 5, description: d, citation: c}\n");
        let reg = Registry::load(dir.path()).expect("registry");
        let d = reg.load_dataset("toy").expect("generated");
        assert_eq!((d.n(), d.d(), d.n_classes()), (90, 10, 3));
        assert_eq!(d.x, reg.load_dataset("toy").expect("generated").x, "deterministic");
        assert!(reg.describe("toy").expect("known").contains("gr2006-toy n=90 seed=5"));
        for (entry, needle) in [
            ("{format: synthetic, generator: nope, n: 9, description: d, citation: c}", "unknown generator"),
            ("{format: synthetic, generator: gr2006-toy, description: d, citation: c}", "needs `n`"),
            ("{format: synthetic, n: 9, description: d, citation: c}", "needs `generator`"),
            ("{files: [a], format: synthetic, generator: gr2006-toy, n: 9, description: d, citation: c}", "no `files`"),
            ("{files: [a], format: csv, n: 9, description: d, citation: c}", "only for format synthetic"),
            ("{format: csv, description: d, citation: c}", "`files` is empty"),
        ] {
            let dir = write_registry(&format!("x: {entry}\n"));
            let msg = Registry::load(dir.path()).expect_err(entry).to_string();
            assert!(msg.contains(needle), "{entry}: {msg}");
        }
    }

    #[test]
    fn describe_flags_missing_files() {
        let dir = write_registry("iris: {files: [iris.data], format: csv, description: Fisher's iris, citation: c}\n");
        let reg = Registry::load(dir.path()).expect("registry");
        let line = reg.describe("iris").expect("known");
        assert!(line.starts_with("iris: Fisher's iris [csv iris.data]"), "{line}");
        assert!(line.contains("MISSING: iris.data"), "{line}");
        assert!(reg.describe("nope").is_none());
    }
}
