//! Datasets: the registry (`data/datasets.yaml`), file loaders, train/test split protocols and
//! training-set standardisation.
//!
//! - [`Registry`] reads the registry and loads a named dataset into a [`Dataset`] (features as
//!   `f64`, labels as class indices `0..C`).
//! - [`SplitProtocol`] / [`make_splits`] turn a dataset into deterministic train/test [`Split`]s;
//!   [`write_splits`] / [`read_splits`] record them as CSV so runs (or other tools) can share them.
//! - [`Standardizer`] scales features with statistics of the training rows only.
//! - [`Task`] makes another problem of a dataset's rows (class c against the rest).
//!
//! `data/README.md` documents the registry and split-file formats for users.

mod error;
mod loaders;
mod registry;
mod splits;
mod standardize;
pub mod synthetic;
mod task;

use std::path::PathBuf;

use ndarray::{Array2, Axis};

pub use error::DataError;
pub use registry::{DatasetSpec, Format, Registry, REGISTRY_FILE};
pub(crate) use splits::allocate;
pub use splits::{make_splits, read_splits, write_splits, Split, SplitProtocol};
pub use standardize::Standardizer;
pub use task::{ClassLabel, Task};

/// The version of the data preparation every cell goes through: split generation
/// (`make_splits`, whose shuffles come from `rand`) and standardisation. A change of either
/// that moves a split or a standardised value must bump it: it enters every cell's key (from 2
/// on; at 1 the keys are as before it existed), so no stored cell computed on other splits is
/// reused. tests/numerics_versions.rs fingerprints both against it.
pub const DATA_PREP_VERSION: u32 = 1;

/// One labelled data set (all rows: the fixed training rows first, then the fixed test rows if
/// the dataset has its own test files).
#[derive(Clone, Debug)]
pub struct Dataset {
    pub name: String,
    /// Features, [n, d].
    pub x: Array2<f64>,
    /// Class index of each row, `0..n_classes()`.
    pub y: Vec<usize>,
    /// Class index -> label text (normalised: numeric labels written one way, "+1"/"1.0" -> "1").
    pub class_names: Vec<String>,
    /// Header names, or "x1".."xd" when the files have no header.
    pub feature_names: Vec<String>,
    /// Files the rows came from, as named in the registry (relative to the data folder).
    pub source: Vec<String>,
    /// Number of rows coming from the fixed training files when the dataset has its own test
    /// files (rows `n_fixed_train..` are the fixed test rows).
    pub n_fixed_train: Option<usize>,
}

impl Dataset {
    pub fn n(&self) -> usize {
        self.x.nrows()
    }

    pub fn d(&self) -> usize {
        self.x.ncols()
    }

    /// Number of classes = `class_names.len()` (a class may have no rows, e.g. in a subset).
    pub fn n_classes(&self) -> usize {
        self.class_names.len()
    }

    /// Rows `idx` as a new Dataset (same class_names so class indices stay comparable). The
    /// subset has no fixed split (`n_fixed_train` = None). Panics if an index is out of range.
    pub fn subset(&self, idx: &[usize]) -> Dataset {
        Dataset {
            name: self.name.clone(),
            x: self.x.select(Axis(0), idx),
            y: idx.iter().map(|&i| self.y[i]).collect(),
            class_names: self.class_names.clone(),
            feature_names: self.feature_names.clone(),
            source: self.source.clone(),
            n_fixed_train: None,
        }
    }

    /// Number of rows of each class among `rows` (all rows if `None`).
    pub fn class_counts(&self, rows: Option<&[usize]>) -> Vec<usize> {
        let mut counts = vec![0; self.n_classes()];
        match rows {
            Some(rows) => rows.iter().for_each(|&i| counts[self.y[i]] += 1),
            None => self.y.iter().for_each(|&c| counts[c] += 1),
        }
        counts
    }
}

/// Where the project's data folder is: `$MCGP_DATA_DIR` if set, else the first folder `data`
/// holding `datasets.yaml` found walking up from the current dir, else
/// `env!("CARGO_MANIFEST_DIR")/data`.
pub fn default_data_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("MCGP_DATA_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    if let Ok(cwd) = std::env::current_dir() {
        for dir in cwd.ancestors() {
            let candidate = dir.join("data");
            if candidate.join(REGISTRY_FILE).is_file() {
                return candidate;
            }
        }
    }
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("data")
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::array;

    #[test]
    fn subset_keeps_classes() {
        let d = Dataset {
            name: "t".into(),
            x: array![[0.0], [1.0], [2.0], [3.0]],
            y: vec![0, 1, 2, 1],
            class_names: vec!["a".into(), "b".into(), "c".into()],
            feature_names: vec!["x1".into()],
            source: vec![],
            n_fixed_train: Some(2),
        };
        let s = d.subset(&[3, 1]);
        assert_eq!(s.x, array![[3.0], [1.0]]);
        assert_eq!(s.y, [1, 1]);
        assert_eq!(s.n_classes(), 3);
        assert_eq!(s.n_fixed_train, None);
        assert_eq!(s.class_counts(None), [0, 2, 0]);
        assert_eq!(d.class_counts(Some(&[0, 1, 3])), [1, 2, 0]);
        assert_eq!((d.n(), d.d()), (4, 1));
    }
}
