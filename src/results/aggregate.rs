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
    /// Number of finished splits that contributed.
    pub n: usize,
}

impl Aggregate {
    /// Summarise finite values; `None` when there are none.
    pub fn of(values: &[f64]) -> Option<Aggregate> {
        let v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
        let n = v.len();
        if n == 0 {
            return None;
        }
        let mean = v.iter().sum::<f64>() / n as f64;
        let sd = if n > 1 {
            (v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt()
        } else {
            0.0
        };
        Some(Aggregate { mean, sd, se: sd / (n as f64).sqrt(), n })
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

/// Aggregate every metric (and every `hp_<name>` hyper-parameter) of the finished cells
/// over splits.
pub fn aggregate(cells: &[CellRecord]) -> BTreeMap<GroupKey, Aggregate> {
    let mut groups: BTreeMap<GroupKey, Vec<f64>> = BTreeMap::new();
    for cell in cells.iter().filter(|c| c.status == Status::Ok) {
        let values = cell
            .metrics
            .iter()
            .map(|(k, v)| (k.clone(), *v))
            .chain(cell.hyperparameters.iter().map(|(k, v)| (format!("hp_{k}"), *v)));
        for (metric, value) in values {
            let key = GroupKey {
                dataset: cell.dataset.clone(),
                method: cell.method.clone(),
                setting: cell.setting.clone(),
                metric,
            };
            groups.entry(key).or_default().push(value);
        }
    }
    groups.into_iter().filter_map(|(k, v)| Aggregate::of(&v).map(|a| (k, a))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aggregate_matches_hand_computed_moments() {
        // values 1, 2, 3, 6: mean 3, sample variance (4 + 1 + 0 + 9) / 3 = 14/3.
        let a = Aggregate::of(&[1.0, 2.0, 3.0, 6.0, f64::NAN]).unwrap();
        assert_eq!(a.n, 4);
        assert!((a.mean - 3.0).abs() < 1e-15);
        assert!((a.sd - (14.0f64 / 3.0).sqrt()).abs() < 1e-15);
        assert!((a.se - (14.0f64 / 3.0).sqrt() / 2.0).abs() < 1e-15);
        assert!(Aggregate::of(&[f64::INFINITY]).is_none());
    }
}
