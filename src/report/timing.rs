//! The timing table: how long each method entry took per cell (one split, at one grid setting
//! where the entry has a grid), to fit and to predict, so that speed is read off the report beside the results.
//! It also shows the outer iterations each fit reached and, for entries run to a wall-clock
//! budget, that their iteration counts (and so their numbers) depend on the machine.
use super::format::duration;
use super::ReportInput;
use crate::results::Status;
use serde::Serialize;

#[derive(Serialize)]
pub struct TimingView {
    /// Method entries in spec order.
    pub columns: Vec<String>,
    pub rows: Vec<TimingRow>,
    /// Entries that ran to a time budget (wall clock or CPU): "name (S s)".
    pub budgeted: Vec<String>,
}

#[derive(Serialize)]
pub struct TimingRow {
    pub dataset: String,
    /// One per column: mean fit time (and the largest) and mean predict time; empty texts
    /// where no cell finished.
    pub cells: Vec<TimingCell>,
}

#[derive(Serialize)]
pub struct TimingCell {
    pub fit: String,
    pub predict: String,
    /// Outer iterations reached (`diag_iterations`): "mean (min-max)"; empty without.
    pub iterations: String,
    pub n: usize,
}

/// Mean and maximum over the finished cells of each dataset and method entry (all grid
/// settings together) of the `time_train` and `time_predict` metrics.
pub fn build(input: &ReportInput) -> TimingView {
    let rows = input
        .datasets
        .iter()
        .map(|dataset| {
            let cells = input
                .methods
                .iter()
                .map(|method| {
                    let ok: Vec<_> =
                        input.cells.iter().filter(|c| c.status == Status::Ok && &c.dataset == dataset && &c.method == method).collect();
                    let times = |metric: &str| -> Vec<f64> { ok.iter().filter_map(|c| c.metrics.get(metric).copied()).collect() };
                    let (fit, predict) = (times("time_train"), times("time_predict"));
                    TimingCell {
                        fit: summary(&fit, true),
                        predict: summary(&predict, false),
                        iterations: range(&times("diag_iterations")),
                        n: ok.len(),
                    }
                })
                .collect();
            TimingRow { dataset: dataset.clone(), cells }
        })
        .collect();
    let budgeted = input
        .methods
        .iter()
        .filter_map(|method| {
            let seconds = input.cells.iter().filter(|c| &c.method == method).find_map(|c| c.metrics.get("budget_seconds"))?;
            Some(format!("{method} ({})", duration(*seconds)))
        })
        .collect();
    TimingView { columns: input.methods.to_vec(), rows, budgeted }
}

/// "mean (min-max)" of iteration counts, or the one value when all agree; empty without values.
fn range(values: &[f64]) -> String {
    if values.is_empty() {
        return String::new();
    }
    let mean = values.iter().sum::<f64>() / values.len() as f64;
    let (lo, hi) = values.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| (a.min(*v), b.max(*v)));
    if lo == hi {
        format!("{lo}")
    } else {
        format!("{mean:.1} ({lo}-{hi})")
    }
}

/// "mean" or "mean (max max)"; empty without values.
fn summary(values: &[f64], with_max: bool) -> String {
    if values.is_empty() {
        return String::new();
    }
    let mean = values.iter().sum::<f64>() / values.len() as f64;
    let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if with_max {
        format!("{} (max {})", duration(mean), duration(max))
    } else {
        duration(mean)
    }
}
