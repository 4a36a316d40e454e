//! Summaries over splits: mean, standard deviation and standard error.
use super::record::{CellRecord, Status};
use serde::Serialize;
use std::collections::BTreeMap;

/// Mean, sample standard deviation (n - 1 denominator) and standard error over splits.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Aggregate {
    pub mean: f64,
    pub sd: f64,
    pub se: f64,
    /// Number of finished splits that contributed (finite values).
    pub n: usize,
    /// Values left out because they were NaN or infinite.
    pub n_nonfinite: usize,
}

impl Aggregate {
    /// Summarise the finite values and count the others; `None` without values. With no
    /// finite value the mean, sd and se are NaN (and `n` is 0).
    pub fn of(values: &[f64]) -> Option<Aggregate> {
        let v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
        let n = v.len();
        let n_nonfinite = values.len() - n;
        if n == 0 {
            return (n_nonfinite > 0).then_some(Aggregate { mean: f64::NAN, sd: f64::NAN, se: f64::NAN, n: 0, n_nonfinite });
        }
        let mean = v.iter().sum::<f64>() / n as f64;
        let sd = if n > 1 { (v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt() } else { 0.0 };
        Some(Aggregate { mean, sd, se: sd / (n as f64).sqrt(), n, n_nonfinite })
    }
}

/// Identifies one summary row: a metric of a method entry (at one grid setting) on a dataset.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct GroupKey {
    pub dataset: String,
    pub method: String,
    pub setting: String,
    pub metric: String,
}

/// A cell's metrics, its derived metrics and its hyper-parameters (as `hp_<name>`).
fn values(cell: &CellRecord) -> impl Iterator<Item = (String, f64)> + '_ {
    cell.metrics
        .iter()
        .map(|(k, v)| (k.clone(), *v))
        .chain(cell.derived_metrics())
        .chain(cell.hyperparameters.iter().map(|(k, v)| (format!("hp_{k}"), *v)))
}

/// Aggregate every metric (and every `hp_<name>` hyper-parameter) of the finished cells
/// over splits.
pub fn aggregate(cells: &[CellRecord]) -> BTreeMap<GroupKey, Aggregate> {
    let mut groups: BTreeMap<GroupKey, Vec<f64>> = BTreeMap::new();
    for cell in cells.iter().filter(|c| c.status == Status::Ok) {
        for (metric, value) in values(cell) {
            let key = GroupKey { dataset: cell.dataset.clone(), method: cell.method.clone(), setting: cell.setting.clone(), metric };
            groups.entry(key).or_default().push(value);
        }
    }
    groups.into_iter().filter_map(|(k, v)| Aggregate::of(&v).map(|a| (k, a))).collect()
}

/// Per-split differences against the method entry `base`: for every finished cell and metric,
/// the value minus the base entry's on the same dataset and split (at the same grid setting
/// when the base has it, else at its only one), summarised over splits; with, per group, the
/// number of splits where the difference is positive. A finished cell whose split the base has
/// not finished (or whose base lacks the metric) is counted in `n_nonfinite`, so that a mean over
/// some of the splits is shown but never matched; a group with no pair at all has no summary.
pub fn paired_aggregate(cells: &[CellRecord], base: &str) -> BTreeMap<GroupKey, (Aggregate, usize)> {
    let ok = |c: &&CellRecord| c.status == Status::Ok;
    let bases: BTreeMap<(&str, usize, &str), &CellRecord> =
        cells.iter().filter(ok).filter(|c| c.method == base).map(|c| ((c.dataset.as_str(), c.split, c.setting.as_str()), c)).collect();
    // The base's only setting, when it has one (no grid: "", or a one-point grid), over its
    // cells of any status (a grid point that failed everywhere is still a setting).
    let mut base_settings: Vec<&str> = cells.iter().filter(|c| c.method == base).map(|c| c.setting.as_str()).collect();
    base_settings.sort_unstable();
    base_settings.dedup();
    let only_setting = if let [only] = base_settings[..] { Some(only) } else { None };
    // Per group: the differences, and the finished splits with no base value to pair with.
    let mut groups: BTreeMap<GroupKey, (Vec<f64>, usize)> = BTreeMap::new();
    for cell in cells.iter().filter(ok) {
        let key = |setting| (cell.dataset.as_str(), cell.split, setting);
        let base = bases.get(&key(cell.setting.as_str())).or_else(|| only_setting.and_then(|s| bases.get(&key(s))));
        for (metric, value) in values(cell) {
            let base_value = base.and_then(|b| b.value(&metric));
            let key = GroupKey { dataset: cell.dataset.clone(), method: cell.method.clone(), setting: cell.setting.clone(), metric };
            let (differences, unpaired) = groups.entry(key).or_default();
            match base_value {
                Some(bv) => differences.push(value - bv),
                None => *unpaired += 1,
            }
        }
    }
    groups
        .into_iter()
        .filter(|(_, (d, _))| !d.is_empty())
        .filter_map(|(k, (d, unpaired))| {
            let positive = d.iter().filter(|v| **v > 0.0).count();
            Aggregate::of(&d).map(|a| (k, (Aggregate { n_nonfinite: a.n_nonfinite + unpaired, ..a }, positive)))
        })
        .collect()
}

/// The data-set key of a table's mean row (`mean_row`): in group keys and in paper values.
pub const MEAN_OVER_DATASETS: &str = "mean";

/// For a table's mean row (a paper's "average over the data sets" row, such as Villacampa-Calvo
/// et al.'s Avg. Time): per method entry, grid setting, metric and split index, the mean of the
/// value over `datasets`, kept where every one of them has a finite value at that split, then
/// summarised over those splits. The mean is the mean of the data sets' means when every split
/// is complete; the sd is that of the per-split averages (split r of one data set and of another
/// are unrelated draws, so this pairs them only to give the average a spread). Keyed with
/// dataset [`MEAN_OVER_DATASETS`]. A split some data set failed, gave a non-finite value for, or
/// has not run is left out and counted in `n_nonfinite` (so that the mean over the rest is
/// shown but never matched, as for a single data set).
pub fn mean_over_datasets(cells: &[CellRecord], datasets: &[String]) -> BTreeMap<GroupKey, Aggregate> {
    type Split<'a> = (&'a str, &'a str, String, usize);
    let mut per_split: BTreeMap<Split, Vec<f64>> = BTreeMap::new();
    // Every split index any data set has a cell for (of any status), per method entry and setting.
    let mut splits: BTreeMap<(&str, &str), std::collections::BTreeSet<usize>> = BTreeMap::new();
    for cell in cells.iter().filter(|c| datasets.contains(&c.dataset)) {
        splits.entry((cell.method.as_str(), cell.setting.as_str())).or_default().insert(cell.split);
        if cell.status != Status::Ok {
            continue;
        }
        for (metric, value) in values(cell).filter(|(_, v)| v.is_finite()) {
            per_split.entry((cell.method.as_str(), cell.setting.as_str(), metric, cell.split)).or_default().push(value);
        }
    }
    let mut groups: BTreeMap<GroupKey, Vec<f64>> = BTreeMap::new();
    for ((method, setting, metric, _), v) in per_split {
        if v.len() == datasets.len() {
            let key = GroupKey { dataset: MEAN_OVER_DATASETS.into(), method: method.into(), setting: setting.into(), metric };
            groups.entry(key).or_default().push(v.iter().sum::<f64>() / v.len() as f64);
        }
    }
    groups
        .into_iter()
        .filter_map(|(k, v)| {
            let all = splits.get(&(k.method.as_str(), k.setting.as_str())).map_or(v.len(), |s| s.len());
            Aggregate::of(&v).map(|a| (k, Aggregate { n_nonfinite: all.saturating_sub(v.len()), ..a }))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aggregate_matches_hand_computed_moments() {
        // values 1, 2, 3, 6: mean 3, sample variance (4 + 1 + 0 + 9) / 3 = 14/3.
        let a = Aggregate::of(&[1.0, 2.0, 3.0, 6.0, f64::NAN]).unwrap();
        assert_eq!((a.n, a.n_nonfinite), (4, 1));
        assert!((a.mean - 3.0).abs() < 1e-15);
        assert!((a.sd - (14.0f64 / 3.0).sqrt()).abs() < 1e-15);
        assert!((a.se - (14.0f64 / 3.0).sqrt() / 2.0).abs() < 1e-15);
        let none = Aggregate::of(&[f64::INFINITY, f64::NAN]).unwrap();
        assert_eq!((none.n, none.n_nonfinite), (0, 2));
        assert!(none.mean.is_nan());
        assert!(Aggregate::of(&[]).is_none());
    }

    fn cell(method: &str, split: usize, setting: &str, v: f64) -> CellRecord {
        CellRecord {
            metrics: [("log_evidence".to_string(), v)].into(),
            hyperparameters: [("lengthscale".to_string(), 2.0 * v)].into(),
            ..crate::testing::cell_record("iris", method, split, setting)
        }
    }

    #[test]
    fn mean_over_datasets_averages_complete_splits_only() {
        let on = |dataset: &str, split: usize, v: f64| CellRecord { dataset: dataset.into(), ..cell("m", split, "", v) };
        // Split 0: (1 + 3) / 2 = 2; split 1: (2 + 6) / 2 = 4; split 2 has only "iris" and is left
        // out; "wine" is not among the data sets averaged.
        let cells = vec![
            on("iris", 0, 1.0),
            on("glass", 0, 3.0),
            on("iris", 1, 2.0),
            on("glass", 1, 6.0),
            on("iris", 2, 100.0),
            on("wine", 0, 50.0),
        ];
        let means = mean_over_datasets(&cells, &["iris".to_string(), "glass".to_string()]);
        let key = |metric: &str| GroupKey {
            dataset: MEAN_OVER_DATASETS.into(),
            method: "m".into(),
            setting: String::new(),
            metric: metric.into(),
        };
        let a = means[&key("log_evidence")];
        // Split 2 is left out, and counted so (a mean over some splits is never matched).
        assert_eq!((a.n, a.n_nonfinite), (2, 1));
        assert!((a.mean - 3.0).abs() < 1e-15);
        assert!((a.sd - 2f64.sqrt()).abs() < 1e-15);
        // Hyper-parameters are averaged like metrics: 2v.
        assert!((means[&key("hp_lengthscale")].mean - 6.0).abs() < 1e-15);
        assert!(mean_over_datasets(&cells, &["iris".to_string(), "vehicle".to_string()]).is_empty());
    }

    #[test]
    fn paired_differences_match_hand_computed_values() {
        // base 1, 2, 4 on splits 0-2; "a" 2, 1, 7 (differences 1, -1, 3); "b" has a grid and
        // pairs with the base's only setting; split 3 of "a" has no base: left out and counted
        // (a mean over some splits must never match a published number).
        let cells = vec![
            cell("base", 0, "", 1.0),
            cell("base", 1, "", 2.0),
            cell("base", 2, "", 4.0),
            cell("a", 0, "", 2.0),
            cell("a", 1, "", 1.0),
            cell("a", 2, "", 7.0),
            cell("a", 3, "", 9.0),
            cell("b", 0, "s=1", 0.5),
        ];
        let p = paired_aggregate(&cells, "base");
        let key = |m: &str, s: &str, metric: &str| GroupKey {
            dataset: "iris".into(),
            method: m.into(),
            setting: s.into(),
            metric: metric.into(),
        };
        let (a, pos) = p[&key("a", "", "log_evidence")];
        assert_eq!((a.n, a.n_nonfinite, pos), (3, 1, 2));
        assert!((a.mean - 1.0).abs() < 1e-15 && (a.sd - 2.0).abs() < 1e-15);
        let (h, _) = p[&key("a", "", "hp_lengthscale")];
        assert!((h.mean - 2.0).abs() < 1e-15);
        let (b, pos) = p[&key("b", "s=1", "log_evidence")];
        assert_eq!((b.n, pos), (1, 0));
        assert!((b.mean + 0.5).abs() < 1e-15);
        let (z, _) = p[&key("base", "", "log_evidence")];
        assert_eq!((z.mean, z.sd, z.n_nonfinite), (0.0, 0.0, 0));
        // A base split that failed leaves its pair out, counted as well.
        let mut failed_base = cells.clone();
        failed_base[1].status = Status::Failed;
        let (a, pos) = paired_aggregate(&failed_base, "base")[&key("a", "", "log_evidence")];
        assert_eq!((a.n, a.n_nonfinite, pos), (2, 2, 2));
        // A base run at one grid point ("t=2") is its only setting too: "c" pairs with it.
        let cells = vec![cell("base", 0, "t=2", 1.0), cell("base", 1, "t=2", 2.0), cell("c", 0, "s=1", 4.0), cell("c", 1, "s=1", 4.0)];
        let (c, pos) = paired_aggregate(&cells, "base")[&key("c", "s=1", "log_evidence")];
        assert_eq!((c.n, pos), (2, 2));
        assert!((c.mean - 2.5).abs() < 1e-15);
        // With two settings the base has no only one: "c" at a third setting has no pair.
        let mut two = cells.clone();
        two.push(cell("base", 0, "t=3", 0.0));
        assert!(!paired_aggregate(&two, "base").contains_key(&key("c", "s=1", "log_evidence")));
        // Also when the second setting's cells all failed: it is still a setting of the base.
        two.last_mut().unwrap().status = Status::Failed;
        assert!(!paired_aggregate(&two, "base").contains_key(&key("c", "s=1", "log_evidence")));
    }
}
