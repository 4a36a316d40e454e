//! Train/test split protocols, and the CSV format that records splits.
//!
//! Splits are deterministic in a seed, and split `r` is drawn from its own random stream derived
//! from `(seed, r)`: for one seed, 10 or 100 repeats give the same first 10 splits. (For k-fold
//! the stream belongs to a repeat, whose shuffle fixes all k folds.) The runner's seed and the
//! cell keys, though, are derived from the protocol's whole label, `repeats` included, so a spec
//! whose `repeats` grows draws new splits and computes every cell afresh.
//!
//! Split file format (`write_splits` / `read_splits`): CSV with header `split,role,row`, one line
//! per row index, `role` = `train` | `test`, rows 0-based into the dataset (fixed training rows
//! first, then fixed test rows).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_pcg::Pcg64;
use serde::{Deserialize, Serialize};

use super::error::DataError;
use super::Dataset;

fn one() -> usize {
    1
}

fn is_one(v: &usize) -> bool {
    *v == 1
}

/// How a dataset is divided into training and test rows.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "protocol", rename_all = "snake_case", deny_unknown_fields)]
pub enum SplitProtocol {
    /// `repeats` random partitions with `round(train_fraction * n)` training rows; optional
    /// stratification (per-class proportional allocation with largest-remainder rounding, so the
    /// total is exact). `train_size` overrides the fraction with an absolute size; `test_size`
    /// caps the test set (the remaining rows are unused).
    Random {
        train_fraction: f64,
        repeats: usize,
        #[serde(default)]
        stratify: bool,
        #[serde(default)]
        train_size: Option<usize>,
        #[serde(default)]
        test_size: Option<usize>,
    },
    /// k-fold cross-validation, `repeats` times with fresh shuffles; split index =
    /// repeat * k + fold. `test_size` caps each test fold (Galy-Fajou et al.: 10k) at its
    /// first rows in the shuffled order; the training rows stay all the other folds.
    Kfold {
        k: usize,
        #[serde(default = "one")]
        repeats: usize,
        #[serde(default)]
        stratify: bool,
        #[serde(default)]
        test_size: Option<usize>,
        /// Run only the first `folds` folds of each repeat (Galy-Fajou et al. ran MNIST on 2-3 of
        /// its 10 folds); split index = repeat * folds + fold.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        folds: Option<usize>,
    },
    /// The dataset's own train/test files. `repeats` > 1 gives that same partition again under
    /// split indices 0..repeats, so each repeat's cells draw their own seeds: independent runs
    /// of a randomized method on one fixed split (the IVM paper's ten randomized runs).
    Fixed {
        #[serde(default = "one", skip_serializing_if = "is_one")]
        repeats: usize,
    },
    /// Splits read from a split CSV; a relative path is resolved against the project root.
    File { path: String },
}

/// One train/test partition: 0-based row indices into a [`Dataset`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Split {
    pub index: usize,
    pub train: Vec<usize>,
    pub test: Vec<usize>,
}

impl SplitProtocol {
    /// Checks the parameters that do not depend on the data; Err names the field and the rule.
    pub fn validate(&self) -> Result<(), String> {
        match self {
            SplitProtocol::Random { train_fraction, repeats, train_size, test_size, .. } => {
                if !(*train_fraction > 0.0 && *train_fraction < 1.0) {
                    return Err(format!("train_fraction must be in (0, 1), found {train_fraction}"));
                }
                if *repeats < 1 {
                    return Err("repeats must be at least 1, found 0".into());
                }
                if *train_size == Some(0) {
                    return Err("train_size must be at least 1, found 0".into());
                }
                if *test_size == Some(0) {
                    return Err("test_size must be at least 1, found 0".into());
                }
            }
            SplitProtocol::Kfold { k, repeats, test_size, folds, .. } => {
                if *test_size == Some(0) {
                    return Err("test_size must be at least 1, found 0".into());
                }
                if folds.is_some_and(|f| f == 0 || f > *k) {
                    return Err(format!("folds must be 1 to k = {k}, found {}", folds.unwrap_or(0)));
                }
                if *k < 2 {
                    return Err(format!("k must be at least 2, found {k}"));
                }
                if *repeats < 1 {
                    return Err("repeats must be at least 1, found 0".into());
                }
            }
            SplitProtocol::Fixed { repeats } => {
                if *repeats < 1 {
                    return Err("repeats must be at least 1, found 0".into());
                }
            }
            SplitProtocol::File { path } => {
                if path.trim().is_empty() {
                    return Err("path must not be empty".into());
                }
            }
        }
        Ok(())
    }

    /// Short canonical description, e.g. `random[train_fraction=0.6,repeats=50,stratify=false]`.
    pub fn label(&self) -> String {
        match self {
            SplitProtocol::Random { train_fraction, repeats, stratify, train_size, test_size } => {
                let mut s = format!("random[train_fraction={train_fraction},repeats={repeats},stratify={stratify}");
                if let Some(t) = train_size {
                    s.push_str(&format!(",train_size={t}"));
                }
                if let Some(t) = test_size {
                    s.push_str(&format!(",test_size={t}"));
                }
                s.push(']');
                s
            }
            SplitProtocol::Kfold { k, repeats, stratify, test_size, folds } => {
                let mut s = format!("kfold[k={k},repeats={repeats},stratify={stratify}");
                if let Some(t) = test_size {
                    s.push_str(&format!(",test_size={t}"));
                    // Stratified caps are drawn per class since 2026-11-30 (they took the first
                    // classes' rows): a new label, so cells of the old draw are not reused.
                    if *stratify {
                        s.push_str(",cap=per_class");
                    }
                }
                if let Some(f) = folds {
                    s.push_str(&format!(",folds={f}"));
                }
                s.push(']');
                s
            }
            // One repeat keeps the label (and so the cell keys) of the plain fixed split.
            SplitProtocol::Fixed { repeats: 1 } => "fixed".into(),
            SplitProtocol::Fixed { repeats } => format!("fixed[repeats={repeats}]"),
            SplitProtocol::File { path } => format!("file[path={path}]"),
        }
    }

    /// Number of splits known without the data (a split file must be read: None).
    pub fn n_splits_without_data(&self) -> Option<usize> {
        match self {
            SplitProtocol::Random { repeats, .. } => Some(*repeats),
            SplitProtocol::Kfold { k, repeats, folds, .. } => Some(folds.unwrap_or(*k) * repeats),
            SplitProtocol::Fixed { repeats } => Some(*repeats),
            SplitProtocol::File { .. } => None,
        }
    }

    /// Number of splits this protocol gives for `data` (File reads and checks the file).
    pub fn n_splits(&self, data: &Dataset, project_root: &Path) -> Result<usize, DataError> {
        self.validate().map_err(|m| self.error(data, m))?;
        match self {
            SplitProtocol::Random { repeats, .. } => Ok(*repeats),
            SplitProtocol::Kfold { k, repeats, folds, .. } => Ok(folds.unwrap_or(*k) * repeats),
            SplitProtocol::Fixed { repeats } => {
                fixed_boundary(data).map_err(|m| self.error(data, m))?;
                Ok(*repeats)
            }
            SplitProtocol::File { path } => Ok(read_splits(&resolve(path, project_root), data.n())?.len()),
        }
    }

    fn error(&self, data: &Dataset, message: String) -> DataError {
        // The dataset with its files, so a message about row counts points at the data.
        let dataset =
            if data.source.is_empty() { format!("'{}'", data.name) } else { format!("'{}' ({})", data.name, data.source.join(", ")) };
        DataError::Split { protocol: self.label(), dataset, message }
    }
}

fn resolve(path: &str, project_root: &Path) -> PathBuf {
    let p = Path::new(path);
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        project_root.join(p)
    }
}

fn fixed_boundary(data: &Dataset) -> Result<usize, String> {
    match data.n_fixed_train {
        Some(t) if t > 0 && t < data.n() => {
            // A test class with no training row could only be guessed: refuse it, naming it.
            let mut seen = vec![false; data.n_classes()];
            data.y[..t].iter().for_each(|&c| seen[c] = true);
            if let Some(&c) = data.y[t..].iter().find(|&&c| !seen[c]) {
                return Err(format!("class '{}' occurs in the fixed test rows but in no training row", data.class_names[c]));
            }
            Ok(t)
        }
        Some(t) => Err(format!("the fixed split has {t} training rows of {}; both parts must be non-empty", data.n())),
        None => Err("the dataset has no fixed test files (no `test_files` in the registry)".into()),
    }
}

/// All splits of `data` under `protocol`, deterministic in `seed`.
pub fn make_splits(protocol: &SplitProtocol, data: &Dataset, seed: u64, project_root: &Path) -> Result<Vec<Split>, DataError> {
    protocol.validate().map_err(|m| protocol.error(data, m))?;
    let n = data.n();
    match protocol {
        SplitProtocol::Random { train_fraction, repeats, stratify, train_size, test_size } => {
            let n_train = train_size.unwrap_or_else(|| (train_fraction * n as f64).round() as usize);
            if n_train < 1 || n_train >= n {
                return Err(protocol.error(data, format!("{n_train} training rows of {n}: need at least 1 training and 1 test row")));
            }
            if let Some(m) = test_size {
                if *m > n - n_train {
                    return Err(
                        protocol.error(data, format!("test_size {m} exceeds the {} rows left after {n_train} training rows", n - n_train))
                    );
                }
            }
            Ok((0..*repeats)
                .map(|r| {
                    let mut rng = split_rng(seed, r as u64);
                    random_split(r, data, n_train, *test_size, *stratify, &mut rng)
                })
                .collect())
        }
        SplitProtocol::Kfold { k, repeats, stratify, test_size, folds } => {
            let used = folds.unwrap_or(*k);
            if *k > n {
                return Err(protocol.error(data, format!("k = {k} folds need at least {k} rows, found {n}")));
            }
            let mut splits = Vec::with_capacity(k * repeats);
            for r in 0..*repeats {
                let mut rng = split_rng(seed, r as u64);
                let order = shuffled_rows(data, *stratify, &mut rng);
                // Deal rows round-robin; with the class-grouped order of stratification each class
                // spreads evenly over the folds and fold sizes differ by at most one.
                let mut fold_of = vec![0; n];
                for (pos, &row) in order.iter().enumerate() {
                    fold_of[row] = pos % k;
                }
                for fold in 0..used {
                    let (mut test, train): (Vec<usize>, Vec<usize>) = (0..n).partition(|&i| fold_of[i] == fold);
                    if let Some(cap) = test_size.filter(|&cap| cap < test.len()) {
                        // The fold's first rows in the shuffled order; stratified, the first of
                        // each class in proportion to the fold's class counts (the order is
                        // grouped by class, so its first rows would be the first classes').
                        let in_fold: Vec<usize> = order.iter().copied().filter(|&row| fold_of[row] == fold).collect();
                        test = if *stratify {
                            let mut groups: Vec<Vec<usize>> = vec![Vec::new(); data.n_classes()];
                            for &row in &in_fold {
                                groups[data.y[row]].push(row);
                            }
                            let take = allocate(cap, &groups.iter().map(Vec::len).collect::<Vec<_>>());
                            groups.iter().zip(&take).flat_map(|(g, t)| g[..*t].iter().copied()).collect()
                        } else {
                            in_fold.into_iter().take(cap).collect()
                        };
                        test.sort_unstable();
                    }
                    splits.push(Split { index: r * used + fold, train, test });
                }
            }
            Ok(splits)
        }
        SplitProtocol::Fixed { repeats } => {
            let t = fixed_boundary(data).map_err(|m| protocol.error(data, m))?;
            Ok((0..*repeats).map(|index| Split { index, train: (0..t).collect(), test: (t..n).collect() }).collect())
        }
        SplitProtocol::File { path } => read_splits(&resolve(path, project_root), n),
    }
}

/// The random stream of split (or k-fold repeat) `r`: SplitMix64 mixing of (seed, r), so nearby
/// seeds and indices give unrelated streams.
fn split_rng(seed: u64, r: u64) -> Pcg64 {
    Pcg64::seed_from_u64(splitmix64(splitmix64(seed).wrapping_add(r)))
}

fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Row indices of each class, in class order (empty classes included).
fn rows_by_class(data: &Dataset) -> Vec<Vec<usize>> {
    let n_classes = data.n_classes().max(data.y.iter().map(|&c| c + 1).max().unwrap_or(0));
    let mut groups = vec![Vec::new(); n_classes];
    for (i, &c) in data.y.iter().enumerate() {
        groups[c].push(i);
    }
    groups
}

/// All rows in random order; stratified: each class shuffled, classes one after another.
fn shuffled_rows(data: &Dataset, stratify: bool, rng: &mut Pcg64) -> Vec<usize> {
    if stratify {
        let mut groups = rows_by_class(data);
        for g in &mut groups {
            g.shuffle(rng);
        }
        groups.concat()
    } else {
        let mut rows: Vec<usize> = (0..data.n()).collect();
        rows.shuffle(rng);
        rows
    }
}

fn random_split(index: usize, data: &Dataset, n_train: usize, test_size: Option<usize>, stratify: bool, rng: &mut Pcg64) -> Split {
    let (mut train, mut test) = if stratify {
        let mut groups = rows_by_class(data);
        for g in &mut groups {
            g.shuffle(rng);
        }
        let sizes: Vec<usize> = groups.iter().map(Vec::len).collect();
        let take = allocate(n_train, &sizes);
        let mut train = Vec::with_capacity(n_train);
        let mut rest = Vec::with_capacity(groups.len());
        for (g, t) in groups.iter().zip(&take) {
            train.extend_from_slice(&g[..*t]);
            rest.push(&g[*t..]);
        }
        let test = match test_size {
            None => rest.concat(),
            Some(m) => {
                let rest_sizes: Vec<usize> = rest.iter().map(|r| r.len()).collect();
                let take = allocate(m, &rest_sizes);
                rest.iter().zip(&take).flat_map(|(r, t)| r[..*t].iter().copied()).collect()
            }
        };
        (train, test)
    } else {
        let mut rows: Vec<usize> = (0..data.n()).collect();
        rows.shuffle(rng);
        let end = test_size.map_or(rows.len(), |m| n_train + m);
        (rows[..n_train].to_vec(), rows[n_train..end].to_vec())
    };
    train.sort_unstable();
    test.sort_unstable();
    Split { index, train, test }
}

/// Splits `total` over groups in proportion to `sizes`: floors of the exact quotas, then one more
/// to the groups with the largest remainders (ties: earlier group) until the sum is exactly
/// `total`. Requires `total <= sum(sizes)`; no group gets more than its size.
pub(crate) fn allocate(total: usize, sizes: &[usize]) -> Vec<usize> {
    let n: u128 = sizes.iter().map(|&s| s as u128).sum();
    if n == 0 {
        return vec![0; sizes.len()];
    }
    let t = total as u128;
    let mut parts: Vec<usize> = sizes.iter().map(|&s| (t * s as u128 / n) as usize).collect();
    let mut by_remainder: Vec<(u128, usize)> = sizes.iter().enumerate().map(|(i, &s)| (t * s as u128 % n, i)).collect();
    by_remainder.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    let short = total - parts.iter().sum::<usize>();
    for &(_, i) in by_remainder.iter().take(short) {
        parts[i] += 1;
    }
    parts
}

const SPLITS_HEADER: &str = "split,role,row";

/// Writes splits as CSV (`split,role,row`), atomically: a temp file in the same folder renamed
/// over `path`, so a crash never leaves a half-written split file.
pub fn write_splits(path: &Path, splits: &[Split]) -> Result<(), DataError> {
    let mut text = format!("{SPLITS_HEADER}\n");
    for s in splits {
        for (role, rows) in [("train", &s.train), ("test", &s.test)] {
            for row in rows.iter() {
                text.push_str(&format!("{},{role},{row}\n", s.index));
            }
        }
    }
    crate::atomic::write_atomic(path, text.as_bytes()).map_err(|e| DataError::io(path, e))
}

/// Reads a split CSV written by [`write_splits`] (or by another tool in that format). Checks
/// that rows are `< n_rows`, that no row is listed twice in a split, and that every split has
/// training and test rows, and that splits are numbered 0, 1, 2, ... (cells number them by
/// position). Splits come back sorted by index, rows in file order.
pub fn read_splits(path: &Path, n_rows: usize) -> Result<Vec<Split>, DataError> {
    let text = std::fs::read_to_string(path).map_err(|e| DataError::io(path, e))?;
    let mut lines = text.lines().enumerate().map(|(i, l)| (i + 1, l.trim()));
    match lines.next() {
        Some((_, h)) if h == SPLITS_HEADER => {}
        Some((_, h)) => return Err(DataError::parse(path, 1, format!("expected header '{SPLITS_HEADER}', found '{h}'"))),
        None => return Err(DataError::invalid(path, format!("empty file, expected header '{SPLITS_HEADER}'"))),
    }
    // Per split: the rows and, per dataset row, where it was seen (0 = not yet, else its line).
    struct Building {
        split: Split,
        seen: Vec<usize>,
    }
    let mut splits: BTreeMap<usize, Building> = BTreeMap::new();
    for (line, l) in lines {
        if l.is_empty() {
            continue;
        }
        let fields: Vec<&str> = l.split(',').map(str::trim).collect();
        let [split, role, row] = fields[..] else {
            return Err(DataError::parse(path, line, format!("expected 3 fields (split,role,row), found {}", fields.len())));
        };
        let split: usize =
            split.parse().map_err(|_| DataError::parse(path, line, format!("split must be a non-negative integer, found '{split}'")))?;
        let row: usize =
            row.parse().map_err(|_| DataError::parse(path, line, format!("row must be a non-negative integer, found '{row}'")))?;
        if row >= n_rows {
            return Err(DataError::parse(path, line, format!("row {row} is out of range: the dataset has {n_rows} rows (0..{n_rows})")));
        }
        let b = splits
            .entry(split)
            .or_insert_with(|| Building { split: Split { index: split, train: Vec::new(), test: Vec::new() }, seen: vec![0; n_rows] });
        if b.seen[row] != 0 {
            return Err(DataError::parse(
                path,
                line,
                format!(
                    "row {row} of split {split} was already listed at line {}; a row may appear once per split (train or test)",
                    b.seen[row]
                ),
            ));
        }
        b.seen[row] = line;
        match role {
            "train" => b.split.train.push(row),
            "test" => b.split.test.push(row),
            other => return Err(DataError::parse(path, line, format!("role must be 'train' or 'test', found '{other}'"))),
        }
    }
    if splits.is_empty() {
        return Err(DataError::invalid(path, "no splits (only the header)"));
    }
    let mut out = Vec::with_capacity(splits.len());
    for (expected, (index, b)) in splits.into_iter().enumerate() {
        // Cells and stored records number splits by position: a file numbered from 1, or with a
        // gap, would have its records and its own numbers disagree.
        if index != expected {
            return Err(DataError::invalid(
                path,
                format!("splits must be numbered 0, 1, 2, ... without gaps: found split {index} where split {expected} was expected"),
            ));
        }
        if b.split.train.is_empty() || b.split.test.is_empty() {
            return Err(DataError::invalid(
                path,
                format!("split {index} has no {} rows", if b.split.train.is_empty() { "train" } else { "test" }),
            ));
        }
        out.push(b.split);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::Array2;

    /// A dataset with the given class sizes (classes in blocks).
    fn data(sizes: &[usize]) -> Dataset {
        let y: Vec<usize> = sizes.iter().enumerate().flat_map(|(c, &s)| std::iter::repeat_n(c, s)).collect();
        let n = y.len();
        Dataset {
            name: "toy".into(),
            x: Array2::zeros((n, 1)),
            y,
            class_names: (0..sizes.len()).map(|c| c.to_string()).collect(),
            feature_names: vec!["x1".into()],
            source: vec![],
            n_fixed_train: None,
        }
    }

    fn random(train_fraction: f64, repeats: usize, stratify: bool) -> SplitProtocol {
        SplitProtocol::Random { train_fraction, repeats, stratify, train_size: None, test_size: None }
    }

    fn root() -> &'static Path {
        Path::new(".")
    }

    fn assert_partition(s: &Split, n: usize) {
        let mut all: Vec<usize> = s.train.iter().chain(&s.test).copied().collect();
        all.sort_unstable();
        assert_eq!(all, (0..n).collect::<Vec<_>>(), "split {} must partition the rows", s.index);
    }

    fn class_counts(d: &Dataset, rows: &[usize]) -> Vec<usize> {
        let mut c = vec![0; d.n_classes()];
        for &r in rows {
            c[d.y[r]] += 1;
        }
        c
    }

    #[test]
    fn random_sizes_exact_disjoint_covering() {
        let d = data(&[50, 30, 20]);
        let splits = make_splits(&random(0.6, 5, false), &d, 1, root()).expect("splits");
        assert_eq!(splits.len(), 5);
        for (r, s) in splits.iter().enumerate() {
            assert_eq!(s.index, r);
            assert_eq!(s.train.len(), 60);
            assert_eq!(s.test.len(), 40);
            assert_partition(s, 100);
        }
        assert_ne!(splits[0].train, splits[1].train, "repeats must differ");
        // round(0.333 * 100) = 33
        let s = make_splits(&random(0.333, 1, false), &d, 1, root()).expect("splits");
        assert_eq!(s[0].train.len(), 33);
    }

    #[test]
    fn stratified_proportions_and_exact_total() {
        let d = data(&[50, 30, 20]);
        for s in make_splits(&random(0.5, 3, true), &d, 7, root()).expect("splits") {
            assert_eq!(class_counts(&d, &s.train), [25, 15, 10]);
            assert_partition(&s, 100);
        }
        // 0.55 * 37 = 20.35 -> 20 training rows; quotas 20*[17,11,9]/37 = 9.19, 5.95, 4.86:
        // floors 9+5+4 = 18, the two largest remainders (class 1, then 2) get one more.
        let d = data(&[17, 11, 9]);
        let s = make_splits(&random(0.55, 1, true), &d, 7, root()).expect("splits");
        assert_eq!(class_counts(&d, &s[0].train), [9, 6, 5]);
        assert_partition(&s[0], 37);
    }

    #[test]
    fn allocate_largest_remainder() {
        assert_eq!(allocate(20, &[17, 11, 9]), [9, 6, 5]);
        assert_eq!(allocate(3, &[1, 1, 1, 1]), [1, 1, 1, 0]); // ties go to the earlier group
        assert_eq!(allocate(10, &[10, 0]), [10, 0]);
        assert_eq!(allocate(0, &[5, 5]), [0, 0]);
    }

    #[test]
    fn train_size_and_test_size() {
        let d = data(&[50, 30, 20]);
        for stratify in [false, true] {
            let p = SplitProtocol::Random { train_fraction: 0.5, repeats: 3, stratify, train_size: Some(10), test_size: Some(40) };
            for s in make_splits(&p, &d, 3, root()).expect("splits") {
                assert_eq!(s.train.len(), 10);
                assert_eq!(s.test.len(), 40);
                assert!(s.train.iter().all(|r| !s.test.contains(r)));
                if stratify {
                    assert_eq!(class_counts(&d, &s.train), [5, 3, 2]);
                    // The 90 rows left are 45/27/18; 40 of them in proportion: 20/12/8.
                    assert_eq!(class_counts(&d, &s.test), [20, 12, 8]);
                }
            }
        }
        let too_big = SplitProtocol::Random { train_fraction: 0.5, repeats: 1, stratify: false, train_size: Some(90), test_size: Some(11) };
        let msg = make_splits(&too_big, &d, 3, root()).expect_err("too big").to_string();
        assert!(msg.contains("test_size 11 exceeds the 10 rows left"), "{msg}");
    }

    #[test]
    fn kfold_test_size_caps_each_test_fold_and_keeps_the_training_folds() {
        let d = data(&[30, 20]);
        let full =
            make_splits(&SplitProtocol::Kfold { k: 5, repeats: 1, stratify: false, test_size: None, folds: None }, &d, 3, root()).unwrap();
        let capped =
            make_splits(&SplitProtocol::Kfold { k: 5, repeats: 1, stratify: false, test_size: Some(4), folds: None }, &d, 3, root())
                .unwrap();
        for (f, c) in full.iter().zip(&capped) {
            assert_eq!(c.train, f.train, "training rows are the other folds, whole");
            assert_eq!(c.test.len(), 4);
            assert!(c.test.iter().all(|r| f.test.contains(r)), "the capped fold is part of the fold");
        }
        assert!(SplitProtocol::Kfold { k: 5, repeats: 1, stratify: false, test_size: Some(0), folds: None }.validate().is_err());
    }

    /// Stratified with a cap, each test fold keeps the fold's class shares (by largest
    /// remainder), not the first classes' rows; the label says so, so cells of the old draw are
    /// not reused. Without stratification the cap and the label are as before.
    #[test]
    fn stratified_kfold_test_size_caps_each_class_in_proportion() {
        let d = data(&[50, 50, 50]);
        let p = SplitProtocol::Kfold { k: 2, repeats: 1, stratify: true, test_size: Some(30), folds: None };
        for s in make_splits(&p, &d, 3, root()).unwrap() {
            assert_eq!(class_counts(&d, &s.test), [10, 10, 10], "split {}", s.index);
            assert_eq!(s.train.len(), 75);
            assert!(s.test.iter().all(|r| !s.train.contains(r)));
        }
        assert!(p.label().contains(",test_size=30,cap=per_class"), "{}", p.label());
        let plain = SplitProtocol::Kfold { k: 2, repeats: 1, stratify: false, test_size: Some(30), folds: None };
        assert_eq!(plain.label(), "kfold[k=2,repeats=1,stratify=false,test_size=30]");
    }

    #[test]
    fn kfold_folds_runs_the_first_folds_of_the_full_partition() {
        let d = data(&[30, 20]);
        let all =
            make_splits(&SplitProtocol::Kfold { k: 5, repeats: 2, stratify: false, test_size: None, folds: None }, &d, 3, root()).unwrap();
        let p = SplitProtocol::Kfold { k: 5, repeats: 2, stratify: false, test_size: None, folds: Some(2) };
        let some = make_splits(&p, &d, 3, root()).unwrap();
        assert_eq!((some.len(), p.n_splits(&d, root()).unwrap(), p.n_splits_without_data()), (4, 4, Some(4)));
        for (i, s) in some.iter().enumerate() {
            let (r, fold) = (i / 2, i % 2);
            assert_eq!(s.index, i, "indices stay contiguous");
            assert_eq!((&s.train, &s.test), (&all[r * 5 + fold].train, &all[r * 5 + fold].test), "the same folds as k = 5 in full");
        }
        assert!(p.label().ends_with(",folds=2]"));
        assert!(SplitProtocol::Kfold { k: 5, repeats: 1, stratify: false, test_size: None, folds: Some(6) }.validate().is_err());
    }

    #[test]
    fn kfold_each_row_tested_once_per_repeat() {
        let d = data(&[23, 11, 9]);
        for stratify in [false, true] {
            let p = SplitProtocol::Kfold { k: 5, repeats: 2, stratify, test_size: None, folds: None };
            let splits = make_splits(&p, &d, 11, root()).expect("splits");
            assert_eq!(splits.len(), 10);
            assert_eq!(p.n_splits(&d, root()).expect("n"), 10);
            for r in 0..2 {
                let mut tested = vec![0; d.n()];
                for f in 0..5 {
                    let s = &splits[r * 5 + f];
                    assert_eq!(s.index, r * 5 + f);
                    assert_partition(s, d.n());
                    assert!(s.test.len() == 8 || s.test.len() == 9, "fold sizes {}", s.test.len());
                    for &i in &s.test {
                        tested[i] += 1;
                    }
                    if stratify {
                        // 23 rows over 5 folds: 4 or 5 per fold, and so on.
                        let c = class_counts(&d, &s.test);
                        assert!((4..=5).contains(&c[0]) && (2..=3).contains(&c[1]) && (1..=2).contains(&c[2]), "{c:?}");
                    }
                }
                assert!(tested.iter().all(|&t| t == 1));
            }
            assert_ne!(splits[0].test, splits[5].test, "repeats must reshuffle");
        }
    }

    #[test]
    fn deterministic_in_seed_and_independent_of_repeats() {
        let d = data(&[40, 40, 20]);
        for stratify in [false, true] {
            let a = make_splits(&random(0.7, 3, stratify), &d, 42, root()).expect("a");
            let b = make_splits(&random(0.7, 10, stratify), &d, 42, root()).expect("b");
            let c = make_splits(&random(0.7, 3, stratify), &d, 43, root()).expect("c");
            assert_eq!(a[..], b[..3]);
            assert_eq!(a, make_splits(&random(0.7, 3, stratify), &d, 42, root()).expect("again"));
            assert_ne!(a, c);
            let k1 =
                make_splits(&SplitProtocol::Kfold { k: 4, repeats: 1, stratify, test_size: None, folds: None }, &d, 5, root()).expect("k1");
            let k3 =
                make_splits(&SplitProtocol::Kfold { k: 4, repeats: 3, stratify, test_size: None, folds: None }, &d, 5, root()).expect("k3");
            assert_eq!(k1[..], k3[..4]);
        }
    }

    #[test]
    fn fixed_split() {
        let mut d = data(&[5, 5]);
        let fixed = SplitProtocol::Fixed { repeats: 1 };
        let msg = make_splits(&fixed, &d, 0, root()).expect_err("no fixed").to_string();
        assert!(msg.contains("no fixed test files"), "{msg}");
        d.n_fixed_train = Some(6);
        let s = make_splits(&fixed, &d, 0, root()).expect("fixed");
        assert_eq!(s, [Split { index: 0, train: (0..6).collect(), test: (6..10).collect() }]);
        assert_eq!(fixed.n_splits(&d, root()).expect("n"), 1);
        // Repeats: the same partition under indices 0, 1, 2 (each repeat's cells get their own seeds).
        let three = SplitProtocol::Fixed { repeats: 3 };
        let s = make_splits(&three, &d, 0, root()).expect("fixed x 3");
        assert_eq!(s.iter().map(|s| s.index).collect::<Vec<_>>(), [0, 1, 2]);
        assert!(s.iter().all(|s| s.train == (0..6).collect::<Vec<_>>() && s.test == (6..10).collect::<Vec<_>>()));
        assert_eq!(three.n_splits(&d, root()).expect("n"), 3);
        assert_eq!(three.label(), "fixed[repeats=3]");
        assert!(SplitProtocol::Fixed { repeats: 0 }.validate().expect_err("repeats").contains("repeats"));
    }

    #[test]
    fn validate_and_label() {
        assert!(random(0.6, 50, false).validate().is_ok());
        assert_eq!(random(0.6, 50, false).label(), "random[train_fraction=0.6,repeats=50,stratify=false]");
        assert!(random(1.0, 5, false).validate().expect_err("fraction").contains("train_fraction"));
        assert!(random(0.5, 0, false).validate().expect_err("repeats").contains("repeats"));
        let p = SplitProtocol::Kfold { k: 1, repeats: 1, stratify: false, test_size: None, folds: None };
        assert!(p.validate().expect_err("k").contains("k must be at least 2"));
        assert_eq!(
            SplitProtocol::Kfold { k: 10, repeats: 1, stratify: true, test_size: None, folds: None }.label(),
            "kfold[k=10,repeats=1,stratify=true]"
        );
        assert_eq!(SplitProtocol::Fixed { repeats: 1 }.label(), "fixed", "one repeat keeps the plain label (and cell keys)");
    }

    #[test]
    fn serde_from_yaml() {
        let p: SplitProtocol = serde_norway::from_str("protocol: kfold\nk: 5\n").expect("kfold");
        assert_eq!(p, SplitProtocol::Kfold { k: 5, repeats: 1, stratify: false, test_size: None, folds: None });
        let p: SplitProtocol =
            serde_norway::from_str("protocol: random\ntrain_fraction: 0.6\nrepeats: 50\ntrain_size: 300\n").expect("random");
        assert_eq!(p, SplitProtocol::Random { train_fraction: 0.6, repeats: 50, stratify: false, train_size: Some(300), test_size: None });
        let p: SplitProtocol = serde_norway::from_str("protocol: fixed\n").expect("fixed");
        assert_eq!(p, SplitProtocol::Fixed { repeats: 1 });
        assert_eq!(serde_json::to_string(&p).unwrap(), r#"{"protocol":"fixed"}"#, "one repeat writes as before");
        let p: SplitProtocol = serde_norway::from_str("protocol: fixed\nrepeats: 10\n").expect("fixed x 10");
        assert_eq!(p, SplitProtocol::Fixed { repeats: 10 });
        let p: SplitProtocol = serde_norway::from_str("protocol: file\npath: splits/x.csv\n").expect("file");
        assert_eq!(p, SplitProtocol::File { path: "splits/x.csv".into() });
        assert!(serde_norway::from_str::<SplitProtocol>("protocol: kfold\nk: 5\nfold: 3\n").is_err(), "unknown fields are rejected");
    }

    #[test]
    fn write_read_round_trip_and_file_protocol() {
        let dir = tempfile::tempdir().expect("temp dir");
        let d = data(&[30, 20]);
        let splits = make_splits(&SplitProtocol::Kfold { k: 3, repeats: 2, stratify: true, test_size: None, folds: None }, &d, 9, root())
            .expect("splits");
        let path = dir.path().join("sub/splits.csv");
        write_splits(&path, &splits).expect("write");
        assert_eq!(read_splits(&path, d.n()).expect("read"), splits);
        let p = SplitProtocol::File { path: "sub/splits.csv".into() };
        assert_eq!(p.n_splits(&d, dir.path()).expect("n"), 6);
        assert_eq!(make_splits(&p, &d, 0, dir.path()).expect("file"), splits);
        // No temp files left beside it.
        assert_eq!(std::fs::read_dir(dir.path().join("sub")).expect("dir").count(), 1);
    }

    #[test]
    fn read_errors_name_file_and_line() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("s.csv");
        let case = |text: &str| {
            std::fs::write(&path, text).expect("write");
            read_splits(&path, 10).expect_err("should fail").to_string()
        };
        let f = path.display().to_string();
        assert_eq!(case("split,row\n"), format!("{f}:1: expected header 'split,role,row', found 'split,row'"));
        assert_eq!(
            case("split,role,row\n0,train,1\n0,test,10\n"),
            format!("{f}:3: row 10 is out of range: the dataset has 10 rows (0..10)")
        );
        assert!(case("split,role,row\n0,train,1\n0,test,1\n").starts_with(&format!("{f}:3: row 1 of split 0 was already listed at line 2")));
        assert_eq!(case("split,role,row\n0,valid,1\n"), format!("{f}:2: role must be 'train' or 'test', found 'valid'"));
        assert_eq!(case("split,role,row\n0,train\n"), format!("{f}:2: expected 3 fields (split,role,row), found 2"));
        assert_eq!(case("split,role,row\nx,train,1\n"), format!("{f}:2: split must be a non-negative integer, found 'x'"));
        assert_eq!(case("split,role,row\n0,train,1\n"), format!("{f}: split 0 has no test rows"));
        let gap = format!("{f}: splits must be numbered 0, 1, 2, ... without gaps: found split 2 where split 1 was expected");
        assert_eq!(case("split,role,row\n0,train,1\n0,test,2\n2,train,1\n2,test,2\n"), gap);
        let from_one = format!("{f}: splits must be numbered 0, 1, 2, ... without gaps: found split 1 where split 0 was expected");
        assert_eq!(case("split,role,row\n1,train,1\n1,test,2\n"), from_one);
    }
}
