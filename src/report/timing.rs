//! The timing table: how long each method entry took per cell (one split), at each of its grid
//! settings (a column each, as in the results tables), to fit and to predict, so that speed is read off the report beside the results.
//! It also shows the outer iterations each fit reached and, for entries run to a wall-clock
//! budget, that their iteration counts (and so their numbers) depend on the machine.
use super::format::{duration, entry_columns, method_label, settings_equal};
use super::ReportInput;
use crate::results::Status;
use serde::Serialize;

#[derive(Serialize)]
pub struct TimingView {
    /// Method entries in spec order, each once per grid setting ("entry [setting]").
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

/// Mean and maximum over the finished cells of each dataset, method entry and grid setting of
/// the `time_train` and `time_predict` metrics (settings apart: an entry's M = 5% and 20% cells
/// pooled would give a time no configuration has).
pub fn build(input: &ReportInput) -> TimingView {
    let columns =
        entry_columns(input.methods, |method| input.cells.iter().filter(move |c| &c.method == method).map(|c| c.setting.as_str()));
    let rows = input
        .datasets
        .iter()
        .map(|dataset| {
            let cells = columns
                .iter()
                .map(|(method, setting)| {
                    let ok: Vec<_> = input
                        .cells
                        .iter()
                        .filter(|c| {
                            c.status == Status::Ok && &c.dataset == dataset && &c.method == method && settings_equal(&c.setting, setting)
                        })
                        .collect();
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
    TimingView { columns: columns.iter().map(|(m, s)| method_label(m, s)).collect(), rows, budgeted }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::{CellRecord, Manifest};

    fn cell(method: &str, split: usize, setting: &str, fit: f64) -> CellRecord {
        CellRecord {
            metrics: [("time_train".to_string(), fit), ("time_predict".to_string(), 0.5)].into(),
            ..crate::testing::cell_record("iris", method, split, setting)
        }
    }

    #[test]
    fn each_grid_setting_gets_its_own_column_and_mean() {
        // M = 4 takes 1 s and 3 s, M = 100 takes 20 s: pooled they would read 8 s, a time no setting has.
        let cells = vec![
            cell("sep", 0, "settings.inducing=100", 20.0),
            cell("sep", 0, "settings.inducing=4", 1.0),
            cell("sep", 1, "settings.inducing=4", 3.0),
            cell("ep", 0, "", 7.0),
        ];
        let (manifest, datasets, methods) = (Manifest::default(), vec!["iris".to_string()], vec!["sep".to_string(), "ep".to_string()]);
        let planned = Default::default();
        let input = ReportInput {
            manifest: &manifest,
            tables: &[],
            figures: &[],
            datasets: &datasets,
            methods: &methods,
            cells: &cells,
            planned: &planned,
        };
        let view = build(&input);
        // Numeric setting order (4 before 100), then the entry without a grid.
        assert_eq!(view.columns, ["sep [settings.inducing=4]", "sep [settings.inducing=100]", "ep"]);
        let row = &view.rows[0];
        assert_eq!(row.cells.iter().map(|c| c.n).collect::<Vec<_>>(), [2, 1, 1]);
        assert_eq!(row.cells[0].fit, format!("{} (max {})", duration(2.0), duration(3.0)));
        assert_eq!(row.cells[1].fit, format!("{} (max {})", duration(20.0), duration(20.0)));
        assert_eq!(row.cells[2].fit, format!("{} (max {})", duration(7.0), duration(7.0)));
    }
}
