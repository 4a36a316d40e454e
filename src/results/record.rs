//! The per-cell record: what one (dataset, split, method, setting) cell produced.
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Outcome of a cell.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Ok,
    Failed,
}

/// What kind of number a method's marginal-likelihood value is. An ELBO and an
/// EP log Z must never share a column without this label.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EvidenceKind {
    Exact,
    LowerBound,
    Approximation,
    Estimate,
}

/// One point of a per-iteration trace (for metric-vs-iteration / wall-time figures).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TracePoint {
    pub iter: usize,
    /// Training seconds since the start of the fit (checkpoint scoring excluded).
    #[serde(with = "super::nonfinite::scalar")]
    pub time: f64,
    pub name: String,
    #[serde(with = "super::nonfinite::scalar")]
    pub value: f64,
}

/// What a finished cell hands to cells that depend on it (same dataset and split).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Handoff {
    /// Log-space kernel hyper-parameters, in the kernels' own order.
    #[serde(with = "super::nonfinite::vec")]
    pub log_hyperparameters: Vec<f64>,
    /// Their names (`variance`, `lengthscale_2`, `c1.variance`); a dependent cell takes them
    /// over by name. Empty in records written before names were handed over (then by position).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub names: Vec<String>,
    /// Named vectors, e.g. a posterior mean used as an importance-sampling centre.
    #[serde(with = "super::nonfinite::vec_map")]
    pub vectors: BTreeMap<String, Vec<f64>>,
    /// The record came from the committed archive, which leaves out the vectors (KL-MNL's
    /// warm-start state alone would be tens of MB per experiment): a cell that takes over from
    /// this one has its source recomputed first (deterministic, so the same record).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub vectors_dropped: bool,
}

/// Everything one cell produced; stored as `results/<experiment>/cells/<key>.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CellRecord {
    pub key: String,
    pub experiment: String,
    pub dataset: String,
    pub split: usize,
    /// The spec's name for the method entry (e.g. `laplace-learned`).
    pub method: String,
    /// The method implementation (e.g. `laplace`).
    pub method_kind: String,
    /// The grid point, `k=v,...` with keys sorted; empty when the entry has no grid.
    pub setting: String,
    pub status: Status,
    pub error: Option<String>,
    pub seed: u64,
    /// Metrics by name: `error_count`, `error_rate`, `log_pred_sum`, `log_pred_mean`,
    /// `log_evidence`, `time_train`, `n_train`, `n_test`, and method-specific ones.
    #[serde(with = "super::nonfinite::map")]
    pub metrics: BTreeMap<String, f64>,
    pub evidence_kind: Option<EvidenceKind>,
    /// Hyper-parameters in natural units, by name.
    #[serde(with = "super::nonfinite::map")]
    pub hyperparameters: BTreeMap<String, f64>,
    /// Non-fatal diagnostics (iterations, jitter used, convergence, warnings).
    pub diagnostics: BTreeMap<String, String>,
    pub trace: Vec<TracePoint>,
    pub handoff: Handoff,
    /// The git commit of the code that computed it (`+dirty` with uncommitted changes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    /// The machine that computed it (`provenance::machine`: CPU, family and model, vector
    /// instructions, CPUs), to read its times by; None in records before 2026-12-03.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine: Option<String>,
    /// The method's numerics version and the data's content hash, as in the key (to tell why a
    /// stored cell is stale).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub numerics: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_hash: Option<String>,
    /// A failure by `timeout_seconds`: machine-dependent, so retried by the next run.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub timed_out: bool,
    /// A failure because the cell it takes hyper-parameters from failed (its own fit never
    /// ran): computed again once that failure no longer stands.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub source_failed: bool,
    /// The predicted class over a grid of a 2-D input space and the learned inducing inputs
    /// (`decision_grid:` of the method entry), for decision-region figures.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision_grid: Option<DecisionGrid>,
    #[serde(with = "super::nonfinite::scalar")]
    pub wall_seconds: f64,
    /// CPU seconds of the cell: the process's where the spec runs one cell at a time, else
    /// the cell's thread's (which misses work handed to other threads; records before
    /// 2026-12-01 hold the thread's in every case).
    #[serde(with = "super::nonfinite::scalar")]
    pub cpu_seconds: f64,
}

/// A 2-D classifier's decision regions, in the data's own units (before standardisation).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DecisionGrid {
    /// The box: x from `x[0]` to `x[1]`, y likewise; `n` points per side, ends included.
    pub x: [f64; 2],
    pub y: [f64; 2],
    pub n: usize,
    /// The most probable class at each point, row by row from (x[0], y[0]) with x running
    /// fastest, one character per point ('0'-'9', then 'a'-'z'): 10,000 points in 10 kB.
    pub labels: String,
    /// The learned inducing inputs, one set per class or one shared, as (x, y) pairs.
    pub inducing: Vec<Vec<[f64; 2]>>,
}

impl DecisionGrid {
    /// The class at grid point (i, j) (x index i, y index j).
    pub fn class_at(&self, i: usize, j: usize) -> Option<usize> {
        self.labels.as_bytes().get(j * self.n + i).and_then(|&b| (b as char).to_digit(36)).map(|d| d as usize)
    }

    /// Grid coordinate k (0..n) on the axis [lo, hi].
    pub fn coordinate(range: [f64; 2], n: usize, k: usize) -> f64 {
        range[0] + (range[1] - range[0]) * k as f64 / (n.max(2) - 1) as f64
    }

    /// Of all inducing inputs, the percentage that lie within `STACKED_WITHIN` of the box's
    /// width of another inducing input of the same set: how far the learned inputs stack on top
    /// of each other (Villacampa-Calvo & Hernandez-Lobato 2017's Figure 3 claim), as a number.
    /// `None` without inducing inputs.
    pub fn stacked_pct(&self) -> Option<f64> {
        let delta = STACKED_WITHIN * (self.x[1] - self.x[0]).abs();
        let total: usize = self.inducing.iter().map(Vec::len).sum();
        if total == 0 {
            return None;
        }
        let close = |a: &[f64; 2], b: &[f64; 2]| (a[0] - b[0]).hypot(a[1] - b[1]) < delta;
        let stacked: usize = self
            .inducing
            .iter()
            .map(|set| set.iter().enumerate().filter(|(i, z)| set.iter().enumerate().any(|(j, w)| j != *i && close(z, w))).count())
            .sum();
        Some(100.0 * stacked as f64 / total as f64)
    }
}

/// Two inducing inputs closer than this fraction of the decision grid's width count as stacked.
pub const STACKED_WITHIN: f64 = 0.01;

/// The name of the derived metric [`DecisionGrid::stacked_pct`].
pub const STACKED_METRIC: &str = "inducing_stacked_pct";

impl CellRecord {
    /// Metrics derived from what the record stores (not computed by the method, so they need no
    /// recomputation when added): `inducing_stacked_pct` from the decision grid's inducing inputs.
    pub fn derived_metrics(&self) -> Vec<(String, f64)> {
        self.decision_grid.as_ref().and_then(DecisionGrid::stacked_pct).map(|v| (STACKED_METRIC.to_string(), v)).into_iter().collect()
    }

    /// The value of `name` for this cell: a metric the method reported, else a derived one
    /// ([`CellRecord::derived_metrics`]), else for `hp_<p>` the hyper-parameter p.
    pub fn value(&self, name: &str) -> Option<f64> {
        self.metrics
            .get(name)
            .copied()
            .or_else(|| (name == STACKED_METRIC).then(|| self.decision_grid.as_ref().and_then(DecisionGrid::stacked_pct)).flatten())
            .or_else(|| name.strip_prefix("hp_").and_then(|p| self.hyperparameters.get(p)).copied())
    }
}

impl Handoff {
    /// The kernels' named log-parameters, no vectors.
    pub fn of_kernels(kernels: &crate::kernels::KernelSet) -> Handoff {
        Handoff {
            log_hyperparameters: kernels.log_params(),
            names: kernels.param_names(),
            vectors: BTreeMap::new(),
            vectors_dropped: false,
        }
    }
}

#[cfg(test)]
mod stacking_tests {
    use super::*;

    fn grid(inducing: Vec<Vec<[f64; 2]>>) -> DecisionGrid {
        DecisionGrid { x: [-2.5, 2.5], y: [-2.5, 2.5], n: 2, labels: "0000".into(), inducing }
    }

    #[test]
    fn stacked_inducing_inputs_are_counted_within_each_set() {
        // delta = 0.01 x 5 = 0.05. Set 0: two inputs 0.03 apart (both stacked), one alone;
        // set 1: an input at the same place as set 0's pair, alone in its own set (not stacked),
        // and one 0.06 from it (not stacked).
        let g = grid(vec![vec![[0.0, 0.0], [0.03, 0.0], [1.0, 1.0]], vec![[0.0, 0.0], [0.0, 0.06]]]);
        assert_eq!(g.stacked_pct(), Some(100.0 * 2.0 / 5.0));
        // All on one point: every input stacked; none: no value.
        assert_eq!(grid(vec![vec![[0.5, 0.5]; 4]]).stacked_pct(), Some(100.0));
        assert_eq!(grid(vec![vec![]]).stacked_pct(), None);
        // A single input per set is never stacked.
        assert_eq!(grid(vec![vec![[0.0, 0.0]], vec![[0.0, 0.0]]]).stacked_pct(), Some(0.0));
    }
}
