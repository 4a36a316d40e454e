//! The spec's description of what to render: tables (with the paper's published
//! numbers beside this run's) and figures.
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A table: rows are (dataset, metric), columns are method entries. Each cell shows
/// this run's mean ± sd over splits next to the paper's value when one is given.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TableSpec {
    pub id: String,
    pub title: String,
    /// Metrics shown, one row per dataset and metric, in this order.
    pub metrics: Vec<String>,
    /// Method entries shown as columns; all of the spec's methods when omitted.
    #[serde(default)]
    pub methods: Vec<String>,
    /// Datasets shown; all of the spec's datasets when omitted.
    #[serde(default)]
    pub datasets: Vec<String>,
    /// How "matches the paper" is decided for this table.
    #[serde(default)]
    pub tolerance: ToleranceRule,
    /// The paper's published numbers (shown beside this run's; never used as results).
    #[serde(default)]
    pub paper: Vec<PaperValue>,
    /// Columns the paper reports for methods this harness does not run (e.g. its SVM
    /// baselines): shown with the paper's numbers only, never scored.
    #[serde(default)]
    pub paper_only: Vec<String>,
    /// Rows of data sets the paper reports and this harness cannot run, each with the reason
    /// (e.g. "data not available offline"): shown with the paper's numbers, never scored.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub paper_only_datasets: BTreeMap<String, String>,
    /// Show every entry as the per-split difference from this method entry (mean +- sd over
    /// the splits both have, and on how many the difference is positive): paired comparisons
    /// such as Chai's Figure 2. Paper values are then compared with those differences.
    #[serde(default)]
    pub paired_with: Option<String>,
    /// Free text shown under the table (e.g. why a column is expected to differ).
    #[serde(default)]
    pub note: Option<String>,
    /// Add, after the data sets' rows, a row per metric with each column's mean over the
    /// table's data sets, as papers do for training times (Villacampa-Calvo et al.'s "Avg.
    /// Time"): per split the mean over the data sets, then mean ± sd over the splits every data
    /// set finished (`results::mean_over_datasets`). Paper values for it name the data set
    /// `mean`. Not with `paired_with`.
    #[serde(default, skip_serializing_if = "is_false")]
    pub mean_row: bool,
}

/// One published number: the mean (and sd over `n` splits, when the paper gives it)
/// of `metric` for `method` on `dataset`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PaperValue {
    pub dataset: String,
    pub method: String,
    pub metric: String,
    /// The grid point (`k=v,...`) when the method entry has a grid; omitted otherwise.
    #[serde(default)]
    pub setting: Option<String>,
    pub mean: f64,
    #[serde(default)]
    pub sd: Option<f64>,
    #[serde(default)]
    pub n: Option<usize>,
    /// Other method entries shown against this number (variants, settings the paper did not
    /// use): compared and marked, but not scored. The number is scored once, against `method`,
    /// the entry the spec names as the reproduction of this paper column.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub also: Vec<String>,
    /// False for a number that is not a separate published value (a difference of two
    /// published numbers, a repeat): shown and compared, not scored.
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub scored: bool,
    /// What is known about this number when this run misses it: decided against the paper by a
    /// committed diagnostic, or explained by a deviation the spec states. A scored number missed
    /// without one is an open miss. Ignored when the number is matched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub miss: Option<MissNote>,
}

/// Why a published number is not reproduced; the index counts misses by `class`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MissNote {
    pub class: MissClass,
    /// The evidence, naming the diagnostic spec or the stated deviation.
    pub why: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MissClass {
    /// A committed diagnostic shows the published number is not what the paper's method gives
    /// (e.g. a bound above the exact value it bounds).
    Decided,
    /// The run differs from the paper in a stated way that accounts for the miss.
    Deviation,
}

fn yes() -> bool {
    true
}

fn is_true(b: &bool) -> bool {
    *b
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// The rule deciding whether this run's mean matches a published one.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "rule", rename_all = "snake_case", deny_unknown_fields)]
pub enum ToleranceRule {
    /// |run - paper| <= k * sqrt(sd_paper^2/n_paper + sd_run^2/n_run) + rounding (the default,
    /// k = 3, rounding 0). `rounding` is for papers that print their numbers rounded: half the
    /// last printed digit, since a printed "0.11 +- 0" stands for any mean in [0.105, 0.115), and
    /// the run matches when it is within k SE of some value of that interval (the two
    /// uncertainties add; neither covers the other). Falls back to `relative` with `rel` where
    /// the paper gives no sd.
    StandardError {
        #[serde(default = "default_k")]
        k: f64,
        #[serde(default = "default_rel")]
        rel: f64,
        #[serde(default, skip_serializing_if = "is_zero")]
        rounding: f64,
    },
    /// |run - paper| <= max(k * sd_paper, floor): a published spread over folds as the scale
    /// (Galy-Fajou et al.'s success criterion, 2 sd with floors 0.02 error and 0.05 NLL);
    /// `floor` alone where the paper gives no sd.
    Spread {
        k: f64,
        #[serde(default)]
        floor: f64,
    },
    /// |run - paper| <= rel * |paper|.
    Relative { rel: f64 },
    /// |run - paper| <= abs.
    Absolute { abs: f64 },
}

impl ToleranceRule {
    /// The first parameter that is negative or not finite, as (field, value).
    pub fn bad_parameter(&self) -> Option<(&'static str, f64)> {
        let fields: Vec<(&'static str, f64)> = match *self {
            ToleranceRule::StandardError { k, rel, rounding } => vec![("k", k), ("rel", rel), ("rounding", rounding)],
            ToleranceRule::Spread { k, floor } => vec![("k", k), ("floor", floor)],
            ToleranceRule::Relative { rel } => vec![("rel", rel)],
            ToleranceRule::Absolute { abs } => vec![("abs", abs)],
        };
        fields.into_iter().find(|(_, v)| !(v.is_finite() && *v >= 0.0))
    }
}

fn default_k() -> f64 {
    3.0
}
fn default_rel() -> f64 {
    0.1
}
fn is_zero(v: &f64) -> bool {
    *v == 0.0
}

impl Default for ToleranceRule {
    fn default() -> Self {
        ToleranceRule::StandardError { k: default_k(), rel: default_rel(), rounding: 0.0 }
    }
}

/// The kinds of figure the report can draw.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FigureKind {
    /// Mean ± standard error of `metric` against `x` (dataset names or a grid key), one line per method.
    Errorbar,
    /// Distribution over splits of `metric`, one violin per (dataset, method).
    Violin,
    /// Histogram over splits of `metric` (or of a hyper-parameter `hp_<name>`), one panel per method.
    Histogram,
    /// Paired scatter over splits: `metric` of `methods[0]` (x) against `methods[1]` (y), y = x drawn.
    Scatter,
    /// Per-iteration trace `trace` against iteration or wall time, one line per cell.
    Trace,
    /// Learning curves: trace `trace` against training time (log10), mean ± 1 sd over splits
    /// at the iterations every split reached, one line per method, one panel per dataset,
    /// with `reference` curves (another implementation's published or measured values).
    Curve,
    /// Mean over splits of `metric` over a two-dimensional grid (`x` and `y` are grid keys),
    /// one panel per (method, dataset), colour bands with the value written in each cell.
    Heatmap,
    /// Decision regions of 2-D classifiers: a panel per (method, value of the grid key `x`),
    /// from the cells' recorded `decision_grid` (the lowest split), with the learned inducing
    /// inputs.
    DecisionRegions,
}

/// The error bars of an errorbar figure.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Interval {
    #[default]
    Se,
    Ci95,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FigureSpec {
    pub id: String,
    pub title: String,
    pub kind: FigureKind,
    /// The metric plotted (errorbar, violin, histogram, scatter).
    #[serde(default)]
    pub metric: Option<String>,
    /// Errorbar only: several metrics on one axis, one series per (method, metric), instead of `metric`.
    #[serde(default)]
    pub metrics: Vec<String>,
    /// Errorbar only: the bars drawn, `se` (mean ± standard error, default) or `ci95` (95%
    /// confidence interval of the mean, Student t with n - 1 degrees of freedom).
    #[serde(default)]
    pub interval: Interval,
    /// Errorbar x axis: `dataset` (default) or a grid key such as `kernel.variance`.
    #[serde(default)]
    pub x: Option<String>,
    /// Heatmap y axis: a grid key.
    #[serde(default)]
    pub y: Option<String>,
    /// Trace name (trace figures).
    #[serde(default)]
    pub trace: Option<String>,
    /// Trace x axis: `iter` (default) or `time`.
    #[serde(default)]
    pub trace_x: Option<String>,
    #[serde(default)]
    pub methods: Vec<String>,
    #[serde(default)]
    pub datasets: Vec<String>,
    /// Logarithmic x axis (errorbar over a grid, trace over time).
    #[serde(default)]
    pub log_x: bool,

    /// Curve figures: reference points drawn beside the runs' curves.
    #[serde(default)]
    pub reference: Vec<ReferenceCurve>,
    /// Curve figures: a logarithmic y axis (test errors that fall from 90% to 3%).
    #[serde(default)]
    pub log_y: bool,
    /// Curve figures: a value to reach (e.g. a peer's final test error); the report states,
    /// per method, the training time at which each split's trace first got to it or below.
    #[serde(default)]
    pub target: Option<f64>,
    /// Curve figures: how fast each method settles: the report states, per method, the
    /// training time from which each split's trace stays within this distance (in the trace's
    /// units) of that split's final value, median and range over the splits.
    #[serde(default)]
    pub settle_within: Option<f64>,

    #[serde(default)]
    pub caption: Option<String>,
}

/// A reference curve of a curve figure: (training seconds, value) points of another
/// implementation, e.g. a peer run of GPflow on a machine of the same kind.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReferenceCurve {
    pub label: String,
    /// The dataset panel it belongs to (all panels when absent).
    #[serde(default)]
    pub dataset: Option<String>,
    pub points: Vec<[f64; 2]>,
}
