//! Tables: this run's summaries beside the paper's published numbers.
use super::format::{entry_columns, mean_sd, method_label, metric_label, num, settings_equal, signed};
use super::tolerance::{describe, within_tolerance};
use super::ReportInput;
use crate::results::{mean_over_datasets, paired_aggregate, Aggregate, CellRecord, EvidenceKind, GroupKey, Status, MEAN_OVER_DATASETS};
use crate::runner::{is_labels_only, PROBABILITY_METRICS};
use crate::spec::{MissClass, PaperValue, TableSpec};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

/// One paper value held against one run summary. A paper value without a setting on a
/// gridded method entry is held against every setting of that entry (one comparison each).
struct Comparison<'a> {
    paper: &'a PaperValue,
    /// The method entry compared: the paper value's own, or one of its `also` variants.
    method: String,
    /// Counts in the score: the paper value's own entry, at its one setting, when `scored`.
    scored: bool,
    /// The run's setting string compared against.
    setting: String,
    run: Option<Aggregate>,
    /// (matched, tolerance, rule) when there is a run summary.
    outcome: Option<(bool, f64, String)>,
    /// Cells stored for this (data set, entry, setting): with no run summary, none means not
    /// run yet, some mean a miss (every cell failed, or none reports the metric).
    stored: usize,
    /// The spec expands cells at this (data set, entry, setting): without any stored, the
    /// number is not run yet; outside the spec's grid it never will be.
    planned: bool,
}

impl Comparison<'_> {
    fn matched(&self) -> bool {
        self.outcome.as_ref().is_some_and(|o| o.0)
    }

    /// No result to compare because nothing was computed for it yet (a partial run).
    fn not_run(&self) -> bool {
        self.run.is_none() && self.stored == 0 && self.planned
    }

    /// No result because the spec runs no cell at this data set, entry and setting.
    fn outside_grid(&self) -> bool {
        self.run.is_none() && self.stored == 0 && !self.planned
    }
}

/// What a cell shows for a published number at a setting (or on a data set) the spec never
/// runs: a miss, never "not run yet".
const NOT_IN_GRID: &str = "never run by this spec";

/// A run's mean and its spread over the splits; one split has no spread to show.
fn run_mean_sd(a: &Aggregate) -> String {
    mean_sd(a.mean, (a.n > 1).then_some(a.sd))
}

#[derive(Serialize)]
pub struct TableView {
    pub id: String,
    pub title: String,
    pub columns: Vec<String>,
    pub rows: Vec<RowView>,
    pub rule: String,
    /// Published numbers within tolerance, and published numbers scored (each once).
    pub matched: usize,
    pub compared: usize,
    /// The scored numbers missed, by what is known about them.
    pub misses: MissCounts,
    pub note: Option<String>,
    /// Comparisons whose (dataset, metric, method) is not a row/column of the table.
    pub outside: Vec<OutsideView>,
}

/// Scored published numbers not matched: decided against the paper by a committed diagnostic,
/// explained by a stated deviation, open, or not run yet (no cell of this run stored for it: a
/// partial run, whose numbers are not reproduced yet but are not known to be missed either).
/// Cells that all failed, or that do not report the metric, are misses, not "not run yet".
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct MissCounts {
    pub decided: usize,
    pub deviation: usize,
    pub open: usize,
    #[serde(default)]
    pub not_run: usize,
}

impl MissCounts {
    pub fn total(&self) -> usize {
        self.decided + self.deviation + self.open + self.not_run
    }

    pub fn sum(self, other: MissCounts) -> MissCounts {
        MissCounts {
            decided: self.decided + other.decided,
            deviation: self.deviation + other.deviation,
            open: self.open + other.open,
            not_run: self.not_run + other.not_run,
        }
    }

    fn add(&mut self, class: Option<MissClass>) {
        match class {
            Some(MissClass::Decided) => self.decided += 1,
            Some(MissClass::Deviation) => self.deviation += 1,
            None => self.open += 1,
        }
    }
}

/// The text a missed number carries: its class and why.
fn miss_text(paper: &PaperValue) -> String {
    match &paper.miss {
        Some(m) => match m.class {
            MissClass::Decided => format!("miss decided against the paper: {}", m.why),
            MissClass::Deviation => format!("miss explained by a stated deviation: {}", m.why),
        },
        None => "open miss".into(),
    }
}

#[derive(Serialize)]
pub struct RowView {
    pub dataset: String,
    /// Rows the dataset header spans; 0 on all but the dataset's first row.
    pub dataset_rowspan: usize,
    pub metric: String,
    pub metric_label: String,
    pub cells: Vec<CellView>,
}

#[derive(Serialize)]
pub struct CellView {
    /// CSS class: `match`, `mismatch`, `notrun` (scored, no result yet), `variant`, `nopaper`
    /// or `paperonly`.
    pub class: &'static str,
    pub run: String,
    pub n: String,
    pub evidence: Option<String>,
    pub paper: Option<String>,
    pub diff: Option<String>,
    pub tolerance: Option<String>,
    /// A scored number this run misses: its class and why (see [`MissCounts`]).
    pub miss: Option<String>,
}

#[derive(Serialize)]
pub struct OutsideView {
    pub class: &'static str,
    pub text: String,
}

/// The columns of a table: each method entry once per grid setting, in setting order.
fn columns(spec: &TableSpec, methods: &[String], cells: &[CellRecord]) -> Vec<(String, String)> {
    entry_columns(methods, |method| {
        let from_cells = cells.iter().filter(move |c| &c.method == method).map(|c| c.setting.as_str());
        // A paper value may name a setting this run never produced: give it a column so the miss shows.
        let from_paper = spec.paper.iter().filter(move |p| &p.method == method).filter_map(|p| p.setting.as_deref());
        from_cells.chain(from_paper)
    })
}

/// Every comparison of the table's paper values with this run. Each published number is scored
/// once: against the entry it names, at its setting (or the entry's only one); its `also`
/// variants, the other settings of a gridded entry it names no setting of, and values marked
/// `scored: false` are compared and shown but not scored.
fn compare<'a>(
    spec: &'a TableSpec,
    cells: &[CellRecord],
    planned: &BTreeSet<(String, String, String)>,
    aggregates: &BTreeMap<GroupKey, Aggregate>,
) -> Vec<Comparison<'a>> {
    let mut out = Vec::new();
    for paper in spec.paper.iter().filter(|p| !spec.paper_only.contains(&p.method) && !spec.paper_only_datasets.contains_key(&p.dataset)) {
        for method in std::iter::once(&paper.method).chain(&paper.also) {
            let mut run_settings: Vec<&str> = Vec::new();
            for c in cells.iter().filter(|c| &c.method == method) {
                if !run_settings.contains(&c.setting.as_str()) {
                    run_settings.push(&c.setting);
                }
            }
            let targets: Vec<String> = match &paper.setting {
                // Use the run's spelling of the grid point so lookups and columns agree.
                Some(s) => vec![run_settings.iter().find(|r| settings_equal(r, s)).map_or(s.clone(), |r| r.to_string())],
                None if run_settings.is_empty() => vec![String::new()],
                None => run_settings.iter().map(|s| s.to_string()).collect(),
            };
            let one_target = targets.len() == 1;
            for setting in targets {
                let key = GroupKey {
                    dataset: paper.dataset.clone(),
                    method: method.clone(),
                    setting: setting.clone(),
                    metric: paper.metric.clone(),
                };
                let run = aggregates.get(&key).copied();
                // One pass over the entry's cells at this setting: those stored (a mean row has no
                // cells of its own, so the entry's cells on any data set count) and, on this data
                // set, those failed (left out like non-finite splits: no match over the rest).
                let is_mean = key.dataset == MEAN_OVER_DATASETS;
                let (stored, failed) = cells
                    .iter()
                    .filter(|c| (is_mean || c.dataset == key.dataset) && c.method == key.method && c.setting == key.setting)
                    .fold((0, 0), |(s, f), c| (s + 1, f + usize::from(c.status == Status::Failed && c.dataset == key.dataset)));
                let outcome =
                    run.map(|r| within_tolerance(&spec.tolerance, paper, &Aggregate { n_nonfinite: r.n_nonfinite + failed, ..r }));
                // A paired entry has no result until its base has cells on the data set too.
                let base_missing =
                    spec.paired_with.as_ref().is_some_and(|b| !cells.iter().any(|c| &c.method == b && c.dataset == key.dataset));
                let stored = if base_missing { 0 } else { stored };
                let scored = paper.scored && method == &paper.method && one_target;
                // A mean row is planned where any data set is.
                let planned = planned.iter().any(|(d, m, s)| {
                    (is_mean || d == &key.dataset) && m == &key.method && (s == &key.setting || settings_equal(s, &key.setting))
                });
                out.push(Comparison { paper, method: method.clone(), scored, setting, run, outcome, stored, planned });
            }
        }
    }
    out
}

fn evidence_label(kind: EvidenceKind) -> &'static str {
    match kind {
        EvidenceKind::Exact => "exact",
        EvidenceKind::LowerBound => "lower bound",
        EvidenceKind::Approximation => "approximation",
        EvidenceKind::Estimate => "estimate",
    }
}

/// `positive`: in a paired table, the number of splits with a positive difference.
fn cell_view(
    run: Option<Aggregate>,
    positive: Option<usize>,
    group: &[&CellRecord],
    metric: &str,
    comparison: Option<&Comparison>,
) -> CellView {
    let failed = group.iter().filter(|c| c.status == Status::Failed).count();
    let (run_text, n_text) = match run {
        // Every split gave a non-finite value: nothing to average (not "NaN ± NaN").
        Some(a) if a.n == 0 => ("—".into(), format!("all {} not finite", a.n_nonfinite)),
        Some(a) => {
            let mut n = format!("n = {}", a.n);
            if let Some(k) = positive {
                n = format!("{n} pairs, > 0 on {k}");
            }
            if failed > 0 {
                n.push_str(&format!(", {failed} failed"));
            }
            if a.n_nonfinite > 0 && group.is_empty() {
                // A mean row (no cells of its own): splits some data set lacks.
                n.push_str(&format!(", {} split(s) left out (failed, not finite or not run on some data set)", a.n_nonfinite));
            } else if a.n_nonfinite > 0 && positive.is_some() {
                n.push_str(&format!(", {} not finite or without a base split (left out)", a.n_nonfinite));
            } else if a.n_nonfinite > 0 {
                n.push_str(&format!(", {} not finite (left out)", a.n_nonfinite));
            }
            (run_mean_sd(&a), n)
        }
        None if failed > 0 && failed == group.len() => ("—".into(), format!("all {failed} failed")),
        None if failed > 0 => ("—".into(), format!("{failed} failed, {} not reporting it", group.len() - failed)),
        // A method that predicts labels only (an SVM) has no predictive likelihood.
        None if PROBABILITY_METRICS.contains(&metric) && !group.is_empty() && group.iter().all(|c| is_labels_only(c)) => {
            ("no probabilities".into(), String::new())
        }
        None if group.is_empty() => ("—".into(), "no result".into()),
        // Cells that ran but carry no value of this metric (the method does not report it, or
        // the table names a metric no method gives).
        None => ("—".into(), format!("not reported by its {} cell(s)", group.len())),
    };
    // An ELBO and an EP log Z must never share a column unlabelled.
    let evidence = if metric == "log_evidence" {
        let mut kinds: Vec<&str> = group.iter().filter_map(|c| c.evidence_kind).map(evidence_label).collect();
        kinds.sort_unstable();
        kinds.dedup();
        (!kinds.is_empty()).then(|| kinds.join(", "))
    } else {
        None
    };
    let mut view = CellView { class: "nopaper", run: run_text, n: n_text, evidence, paper: None, diff: None, tolerance: None, miss: None };
    if let Some(c) = comparison {
        let p = c.paper;
        let n = p.n.map(|n| format!(" (n = {n})")).unwrap_or_default();
        view.paper = Some(format!("{}{n}", mean_sd(p.mean, p.sd)));
        view.class = match (c.scored, c.matched(), c.not_run()) {
            (false, _, _) => "variant",
            (true, true, _) => "match",
            (true, false, false) => "mismatch",
            (true, false, true) => "notrun",
        };
        if c.outside_grid() {
            view.n = NOT_IN_GRID.into();
        }
        match view.class {
            "mismatch" => view.miss = Some(miss_text(p)),
            "notrun" => view.miss = Some("not run yet".into()),
            _ => {}
        }
        match (&c.outcome, c.run) {
            (Some((_, tol, rule)), Some(r)) => {
                // In the metric's units, comparable with the tolerance below it; then in paper sds.
                let d = r.mean - p.mean;
                let delta = if d.is_finite() { format!("Δ {}", signed(d)) } else { "Δ n/a".into() };
                view.diff = Some(match p.sd.filter(|sd| *sd > 0.0 && d.is_finite()) {
                    Some(sd) => format!("{delta} ({} paper sd)", signed(d / sd)),
                    None if p.sd == Some(0.0) => format!("{delta} (paper sd 0)"),
                    None => format!("{delta} (no paper sd)"),
                });
                view.tolerance = Some(format!("±{} = {rule}", num(*tol)));
            }
            _ => view.diff = Some("no run result".into()),
        }
    }
    view
}

/// A column of a method (or a row of a data set) this harness does not run: the paper's number
/// alone, and why.
fn paper_only_view(paper: Option<&PaperValue>, why: &str) -> CellView {
    CellView {
        class: "paperonly",
        run: why.into(),
        n: String::new(),
        evidence: None,
        paper: paper.map(|p| format!("{}{}", mean_sd(p.mean, p.sd), p.n.map(|n| format!(" (n = {n})")).unwrap_or_default())),
        diff: None,
        tolerance: None,
        miss: None,
    }
}

pub fn build(spec: &TableSpec, input: &ReportInput, aggregates: &BTreeMap<GroupKey, Aggregate>) -> TableView {
    // Rows of run data sets; the paper-only ones come after them, with the paper's numbers.
    let datasets: Vec<String> = if spec.datasets.is_empty() {
        input.datasets.to_vec()
    } else {
        spec.datasets.iter().filter(|d| !spec.paper_only_datasets.contains_key(*d)).cloned().collect()
    };
    let methods = if spec.methods.is_empty() { input.methods } else { &spec.methods[..] };
    let columns = columns(spec, methods, input.cells);
    // A paired table shows (and compares with the paper) per-split differences from its base.
    let paired = spec.paired_with.as_deref().map(|base| paired_aggregate(input.cells, base));
    let paired_means: Option<BTreeMap<GroupKey, Aggregate>> =
        paired.as_ref().map(|p| p.iter().map(|(k, (a, _))| (k.clone(), *a)).collect());
    let aggregates = paired_means.as_ref().unwrap_or(aggregates);
    // The mean row: its summaries join the others under the data-set key `mean`.
    let with_mean: Option<BTreeMap<GroupKey, Aggregate>> = (spec.mean_row && spec.paired_with.is_none()).then(|| {
        let mut all = aggregates.clone();
        all.extend(mean_over_datasets(input.cells, &datasets));
        all
    });
    let aggregates = with_mean.as_ref().unwrap_or(aggregates);
    let row_datasets: Vec<String> = datasets.iter().cloned().chain(with_mean.as_ref().map(|_| MEAN_OVER_DATASETS.to_string())).collect();
    let comparisons = compare(spec, input.cells, input.planned, aggregates);

    // One row per (dataset, metric); the dataset's name spans its metrics' rows.
    let row = |dataset: &String, i: usize, metric: &String, cells: Vec<CellView>| RowView {
        dataset: if dataset == MEAN_OVER_DATASETS { "mean over the data sets".into() } else { dataset.clone() },
        dataset_rowspan: if i == 0 { spec.metrics.len() } else { 0 },
        metric: metric.clone(),
        metric_label: metric_label(metric),
        cells,
    };
    let paper_value = |dataset: &String, method: &String, metric: &String| {
        spec.paper.iter().find(|p| &p.dataset == dataset && &p.method == method && &p.metric == metric)
    };
    let mut rows = Vec::new();
    for dataset in &row_datasets {
        for (i, metric) in spec.metrics.iter().enumerate() {
            let cells = columns
                .iter()
                .map(|(method, setting)| {
                    let key =
                        GroupKey { dataset: dataset.clone(), method: method.clone(), setting: setting.clone(), metric: metric.clone() };
                    let group: Vec<&CellRecord> =
                        input.cells.iter().filter(|c| &c.dataset == dataset && &c.method == method && &c.setting == setting).collect();
                    // A cell shows its scored comparison where it has one, else a variant's.
                    let here = |c: &&Comparison| {
                        &c.paper.dataset == dataset && &c.method == method && &c.paper.metric == metric && &c.setting == setting
                    };
                    let comparison = comparisons.iter().filter(here).find(|c| c.scored).or_else(|| comparisons.iter().find(here));
                    let positive = paired.as_ref().and_then(|p| p.get(&key)).map(|(_, k)| *k);
                    cell_view(aggregates.get(&key).copied(), positive, &group, metric, comparison)
                })
                .chain(spec.paper_only.iter().map(|method| paper_only_view(paper_value(dataset, method, metric), "not run")))
                .collect();
            rows.push(row(dataset, i, metric, cells));
        }
    }
    for (dataset, why) in &spec.paper_only_datasets {
        for (i, metric) in spec.metrics.iter().enumerate() {
            // A gridded entry's columns show the paper's number at their own setting.
            let at_setting = |method: &String, setting: &String| {
                spec.paper.iter().find(|p| {
                    &p.dataset == dataset
                        && &p.method == method
                        && &p.metric == metric
                        && p.setting.as_deref().is_none_or(|s| setting.is_empty() || settings_equal(s, setting))
                })
            };
            let cells = columns
                .iter()
                .map(|(method, setting)| paper_only_view(at_setting(method, setting), why))
                .chain(spec.paper_only.iter().map(|method| paper_only_view(paper_value(dataset, method, metric), why)))
                .collect();
            rows.push(row(dataset, i, metric, cells));
        }
    }

    let outside = comparisons
        .iter()
        .filter(|c| !row_datasets.contains(&c.paper.dataset) || !spec.metrics.contains(&c.paper.metric) || !methods.contains(&c.method))
        .map(|c| {
            let p = c.paper;
            let what = format!(
                "{} / {} / {}{}",
                p.dataset,
                method_label(&c.method, &c.setting),
                p.metric,
                if c.scored { "" } else { " (not scored)" }
            );
            match (&c.outcome, c.run) {
                (Some((ok, tol, rule)), Some(r)) => OutsideView {
                    class: if !c.scored {
                        "variant"
                    } else if *ok {
                        "match"
                    } else {
                        "mismatch"
                    },
                    text: format!("{what}: run {} vs paper {} (tolerance ±{} = {rule})", run_mean_sd(&r), mean_sd(p.mean, p.sd), num(*tol))
                        + &if c.scored && !*ok { format!(" ({})", miss_text(p)) } else { String::new() },
                },
                _ if c.outside_grid() => OutsideView {
                    class: if c.scored { "mismatch" } else { "variant" },
                    text: format!(
                        "{what}: paper {}, {NOT_IN_GRID}{}",
                        mean_sd(p.mean, p.sd),
                        if c.scored { format!(" ({})", miss_text(p)) } else { String::new() }
                    ),
                },
                _ if c.not_run() => OutsideView {
                    class: if c.scored { "notrun" } else { "variant" },
                    text: format!("{what}: paper {}, no run result", mean_sd(p.mean, p.sd)),
                },
                _ => OutsideView {
                    class: if c.scored { "mismatch" } else { "variant" },
                    text: format!(
                        "{what}: paper {}, no value in this run's {} cell(s) (failed, or the metric not reported){}",
                        mean_sd(p.mean, p.sd),
                        c.stored,
                        if c.scored { format!(" ({})", miss_text(p)) } else { String::new() }
                    ),
                },
            }
        })
        .collect();

    // Every scored published number is matched, not run yet (no result of this run at the entry
    // and setting it names) or a miss, also one without a single comparison (a gridded entry
    // named without its setting), which then counts as not reproduced.
    let scored: Vec<&PaperValue> = spec
        .paper
        .iter()
        .filter(|p| p.scored && !spec.paper_only.contains(&p.method) && !spec.paper_only_datasets.contains_key(&p.dataset))
        .collect();
    let mut matched = 0;
    let mut misses = MissCounts::default();
    for p in &scored {
        let own = || comparisons.iter().filter(|c| c.scored && std::ptr::eq(c.paper, *p));
        if own().any(|c| c.matched()) {
            matched += 1;
        } else if own().next().is_some() && own().all(|c| c.not_run()) {
            misses.not_run += 1;
        } else {
            misses.add(p.miss.as_ref().map(|m| m.class));
        }
    }

    TableView {
        id: spec.id.clone(),
        title: spec.title.clone(),
        columns: columns.iter().map(|(m, s)| method_label(m, s)).chain(spec.paper_only.iter().map(|m| format!("{m} (paper only)"))).collect(),
        rows,
        rule: describe(&spec.tolerance),
        matched,
        compared: scored.len(),
        misses,
        note: match (&spec.paired_with, &spec.note) {
            (Some(base), note) => Some(format!(
                "Paired with {base}: every entry is the per-split difference (column minus {base}), mean ± sd over the splits both have; \"> 0 on k\" counts the splits where it is positive.{}",
                note.as_ref().map(|n| format!(" {n}")).unwrap_or_default()
            )),
            (None, note) => note.clone(),
        },
        outside,
    }
}
