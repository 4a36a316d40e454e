//! Grid selection by cross-validation inside the training split, for any method entry:
//!
//! ```yaml
//! settings:
//!   formulation: ww
//!   select:
//!     grid: { settings.c: [0.01, 0.1, 1, 10, 100, 1000], kernel.lengthscale: [0.1, 1, 5, 10, 15] }
//!     folds: 5          # default 5, at least 2
//!     metric: error     # the number of misclassified validation points; or nll, the validation
//!                       # negative log predictive (the runner's log_pred_* rule), for calibration
//! ```
//!
//! `build` turns such settings into a [`Select`] wrapping the method: its `fit` splits the
//! training rows into `folds` folds (a permutation drawn from the cell's rng; row p of it goes to
//! fold p mod folds), fits every grid point on every fold's complement, sums the metric over
//! the validation rows of all folds (errors, or -log p(y | x) by `Prediction::log_pred`), picks
//! the point with the least (ties: the first in grid order; a point that fails on a fold or
//! scores NaN is passed over), and refits that point on the whole training split. Grid keys
//! are `settings.<name>` (a setting of the method) or `kernel.<parameter>` (a kernel
//! parameter by name, in natural units, e.g.
//! `kernel.lengthscale`, covering every ARD and per-class copy). Grid order: keys sorted by name,
//! the last key varying fastest. The chosen values are recorded as metrics `selected_<name>`
//! (numbers; `<name>` is the key's text after its last dot, or the whole key with dots as
//! underscores where two keys end alike) and a diagnostics note, the cross-validated error rate as `select_cv_error` and,
//! with `metric: nll`, the cross-validated NLL per row as `select_cv_nll`.
use super::{
    build, parse_settings, Diagnostics, Evidence, FitContext, FitError, Fitted, HyperPolicy, Method, Prediction, Problem, ProblemShape,
};
use crate::kernels::KernelSet;
use crate::results::Handoff;
use ndarray::{Array2, Axis};
use rand::seq::SliceRandom;
use rand::{RngExt, SeedableRng};
use rand_pcg::Pcg64;
use serde::Deserialize;
use std::collections::BTreeMap;

/// `settings.select` as written.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SelectSpec {
    grid: BTreeMap<String, Vec<serde_json::Value>>,
    #[serde(default = "five")]
    folds: usize,
    #[serde(default = "error_metric")]
    metric: String,
}

fn five() -> usize {
    5
}
fn error_metric() -> String {
    "error".into()
}

/// The metrics a selection can minimise.
const METRICS: &[&str] = &["error", "nll"];

/// What a selection minimises, summed over the validation rows of all folds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Metric {
    /// Misclassified rows.
    Error,
    /// -log p(y | x) as the runner scores it (`Prediction::log_pred`).
    Nll,
}

/// One grid point: its values in grid-key order, the method built with its settings, and the
/// kernel parameters it sets (name, log-value).
struct GridPoint {
    values: Vec<(String, serde_json::Value)>,
    method: Box<dyn Method>,
    kernel: Vec<(String, f64)>,
}

/// A method wrapped in cross-validated grid selection.
pub struct Select {
    points: Vec<GridPoint>,
    folds: usize,
    metric: Metric,
    /// The metric recording each grid key's chosen value, in grid-key order.
    selected_names: Vec<String>,
}

/// Build `name` with `settings` whose `select` entry is `select`: every grid point's method is
/// built (and so checked) here. Errors name the field under `settings.select`.
pub(crate) fn build_select(name: &str, settings: &serde_json::Value, select: &serde_json::Value) -> Result<Select, String> {
    let spec: SelectSpec = parse_settings(select).map_err(|e| e.replacen("settings", "settings.select", 1))?;
    if spec.grid.is_empty() {
        return Err("settings.select.grid: give at least one key (settings.<name> or kernel.<parameter>) with a list of values".into());
    }
    if spec.folds < 2 {
        return Err(format!("settings.select.folds must be at least 2, got {}", spec.folds));
    }
    if !METRICS.contains(&spec.metric.as_str()) {
        return Err(format!("settings.select.metric: unknown metric \"{}\" (known: {})", spec.metric, METRICS.join(", ")));
    }
    for (key, values) in &spec.grid {
        let at = format!("settings.select.grid.{key}");
        if values.is_empty() {
            return Err(format!("{at}: an empty list"));
        }
        match key.split_once('.') {
            Some(("settings", s)) if !s.is_empty() && s != "select" => {}
            Some(("kernel", p)) if !p.is_empty() => {
                if let Some(v) = values.iter().find(|v| !v.as_f64().is_some_and(|x| x.is_finite() && x > 0.0)) {
                    return Err(format!("{at}: kernel parameters are positive numbers, got {v}"));
                }
            }
            _ => return Err(format!("{at}: a grid key is settings.<name> or kernel.<parameter>")),
        }
    }
    // The cartesian product, the last key fastest.
    let mut combos: Vec<Vec<(String, serde_json::Value)>> = vec![Vec::new()];
    for (key, values) in &spec.grid {
        combos =
            combos.into_iter().flat_map(|c| values.iter().map(move |v| [c.clone(), vec![(key.clone(), v.clone())]].concat())).collect();
    }
    let base = settings.as_object().cloned().unwrap_or_default();
    let points = combos
        .into_iter()
        .map(|values| {
            let mut s = base.clone();
            s.remove("select");
            let mut kernel = Vec::new();
            for (key, v) in &values {
                match key.split_once('.') {
                    Some(("settings", name)) => {
                        s.insert(name.to_string(), v.clone());
                    }
                    Some((_, param)) => kernel.push((param.to_string(), v.as_f64().expect("checked").ln())),
                    None => unreachable!("checked"),
                }
            }
            let method =
                build(name, &serde_json::Value::Object(s)).map_err(|e| format!("settings.select.grid at {}: {e}", describe(&values)))?;
            Ok(GridPoint { values, method, kernel })
        })
        .collect::<Result<Vec<_>, String>>()?;
    let metric = if spec.metric == "nll" { Metric::Nll } else { Metric::Error };
    let selected_names = selected_metric_names(spec.grid.keys());
    Ok(Select { points, folds: spec.folds, metric, selected_names })
}

/// `selected_<name>` for each grid key: the text after its last dot (`kernel.lengthscale` ->
/// `selected_lengthscale`), or the whole key with dots as underscores where two keys end alike
/// (`kernel.se.variance` and `kernel.white.variance`), which would otherwise share one metric.
fn selected_metric_names<'a>(keys: impl Iterator<Item = &'a String> + Clone) -> Vec<String> {
    let last = |k: &'a str| k.rsplit('.').next().unwrap_or(k);
    keys.clone()
        .map(|k| {
            if keys.clone().filter(|o| last(o) == last(k)).count() > 1 {
                format!("selected_{}", k.replace('.', "_"))
            } else {
                format!("selected_{}", last(k))
            }
        })
        .collect()
}

/// `settings.c=10, kernel.lengthscale=1`.
fn describe(values: &[(String, serde_json::Value)]) -> String {
    values.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(", ")
}

/// The fold of each of n rows: a permutation drawn from `rng`, its p-th row in fold p mod k.
pub fn fold_assignment(n: usize, k: usize, rng: &mut Pcg64) -> Vec<usize> {
    let mut perm: Vec<usize> = (0..n).collect();
    perm.shuffle(rng);
    let mut fold = vec![0; n];
    for (p, &row) in perm.iter().enumerate() {
        fold[row] = p % k;
    }
    fold
}

impl GridPoint {
    fn kernels(&self, kernels: &KernelSet) -> Result<KernelSet, String> {
        self.kernel.iter().try_fold(kernels.clone(), |ks, (name, log_v)| {
            ks.with_named(name, *log_v).map_err(|e| format!("settings.select.grid.kernel.{name}: {e}"))
        })
    }
}

impl Method for Select {
    fn name(&self) -> &'static str {
        self.points[0].method.name()
    }

    fn supports(&self, shape: &ProblemShape, kernels: &KernelSet, hyper: HyperPolicy) -> Result<(), String> {
        if shape.n_train < self.folds {
            return Err(format!("settings.select.folds: {} folds of {} training rows", self.folds, shape.n_train));
        }
        for p in &self.points {
            p.method.supports(shape, &p.kernels(kernels)?, hyper)?;
        }
        Ok(())
    }

    /// The refit's (the cross-validation's inner fits run without a budget or checkpoints).
    fn progress(&self, shape: &ProblemShape, hyper: HyperPolicy) -> super::Progress {
        self.points[0].method.progress(shape, hyper)
    }

    fn train(&self, problem: &Problem, kernels: &KernelSet, hyper: HyperPolicy, ctx: &mut FitContext) -> Result<Box<dyn Fitted>, FitError> {
        let n = problem.y.len();
        let fold = fold_assignment(n, self.folds, ctx.rng);
        // One seed for the inner fits, each of which gets its own stream from it.
        let seed: u64 = ctx.rng.random();
        // (point, its score, errors, NLL) of the least score so far.
        let mut best: Option<(usize, f64, usize, f64)> = None;
        let mut failed = 0usize;
        'points: for (pi, point) in self.points.iter().enumerate() {
            let point_kernels = point.kernels(kernels).map_err(FitError::Unsupported)?;
            let (mut errors, mut nll) = (0usize, 0.0f64);
            for f in 0..self.folds {
                let (train, val): (Vec<usize>, Vec<usize>) = (0..n).partition(|&i| fold[i] != f);
                let (x, y) = (problem.x.select(Axis(0), &train), train.iter().map(|&i| problem.y[i]).collect::<Vec<_>>());
                let x_val = problem.x.select(Axis(0), &val);
                let mut rng = Pcg64::seed_from_u64(seed ^ ((pi * self.folds + f) as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
                let mut inner = FitContext::new(&mut rng, ctx.deadline);
                let fitted = point.method.fit(&Problem { x: &x, y: &y, n_classes: problem.n_classes }, &point_kernels, hyper, &mut inner);
                drop(inner);
                // A fold's prediction is checked as the runner checks a cell's: NaN
                // probabilities would otherwise score finitely (floored) and could be chosen.
                let predicted = fitted.and_then(|m| m.predict(&x_val, &mut rng)).and_then(|p| {
                    p.validate(val.len(), problem.n_classes).map_err(|e| FitError::Numerical(format!("fold {f}: {e}")))?;
                    Ok(p)
                });
                match predicted {
                    Ok(p) => {
                        errors += p.labels().iter().zip(&val).filter(|(label, &i)| **label != problem.y[i]).count();
                        if self.metric == Metric::Nll {
                            if p.labels_only {
                                return Err(FitError::Unsupported(format!(
                                    "settings.select.metric: nll needs predictive probabilities, and {} predicts labels only",
                                    point.method.name()
                                )));
                            }
                            nll -= val.iter().enumerate().map(|(j, &i)| p.log_pred(j, problem.y[i])).sum::<f64>();
                        }
                    }
                    Err(e @ FitError::Timeout { .. }) => return Err(e),
                    // A grid point that cannot be fitted on a fold is never chosen.
                    Err(_) => {
                        failed += 1;
                        continue 'points;
                    }
                }
            }
            let score = match self.metric {
                Metric::Error => errors as f64,
                Metric::Nll => nll,
            };
            if score.is_nan() {
                failed += 1;
                continue;
            }
            if best.is_none_or(|(_, s, _, _)| score < s) {
                best = Some((pi, score, errors, nll));
            }
        }
        let Some((pi, _, errors, nll)) = best else {
            return Err(FitError::Numerical("select: no grid point could be fitted on every fold".into()));
        };
        let chosen = &self.points[pi];
        let inner = chosen.method.fit(problem, &chosen.kernels(kernels).map_err(FitError::Unsupported)?, hyper, ctx)?;
        let mut note = format!("{} ({}-fold CV errors {errors} of {n}", describe(&chosen.values), self.folds);
        if self.metric == Metric::Nll {
            note.push_str(&format!(", NLL {nll:.6}; chosen by NLL"));
        }
        note.push(')');
        if failed > 0 {
            note.push_str(&format!("; {failed} grid points failed on a fold and were passed over"));
        }
        let selected =
            self.selected_names.iter().zip(&chosen.values).filter_map(|(name, (_, v))| Some((name.clone(), v.as_f64()?))).collect();
        let cv_nll = (self.metric == Metric::Nll).then(|| nll / n as f64);
        Ok(Box::new(Selected { inner, selected, cv_error: errors as f64 / n as f64, cv_nll, note }))
    }
}

/// The refitted model at the chosen grid point, with the selection on its record.
struct Selected {
    inner: Box<dyn Fitted>,
    selected: BTreeMap<String, f64>,
    cv_error: f64,
    /// The cross-validated NLL per row, where it chose (`metric: nll`).
    cv_nll: Option<f64>,
    note: String,
}

impl Fitted for Selected {
    fn predict(&self, x: &Array2<f64>, rng: &mut Pcg64) -> Result<Prediction, FitError> {
        self.inner.predict(x, rng)
    }

    fn predict_proba(&self, x: &Array2<f64>, rng: &mut Pcg64) -> Result<Array2<f64>, FitError> {
        self.inner.predict_proba(x, rng)
    }

    fn evidence(&self) -> Option<Evidence> {
        self.inner.evidence()
    }

    fn kernels(&self) -> KernelSet {
        self.inner.kernels()
    }

    fn diagnostics(&self) -> Diagnostics {
        let mut d = self.inner.diagnostics();
        d.note("select", self.note.clone());
        d
    }

    fn extra_metrics(&self) -> BTreeMap<String, f64> {
        let mut m = self.inner.extra_metrics();
        m.extend(self.selected.clone());
        m.insert("select_cv_error".into(), self.cv_error);
        if let Some(v) = self.cv_nll {
            m.insert("select_cv_nll".into(), v);
        }
        m
    }

    fn test_metrics(&self, prediction: &Prediction, y_test: &[usize]) -> BTreeMap<String, f64> {
        self.inner.test_metrics(prediction, y_test)
    }

    fn inducing_inputs(&self) -> Vec<Array2<f64>> {
        self.inner.inducing_inputs()
    }

    fn handoff(&self) -> Handoff {
        self.inner.handoff()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::SqExp;

    /// 36 points in 2-D around 3 overlapping class centres.
    fn problem(n: usize, seed: u64) -> (Array2<f64>, Vec<usize>) {
        let mut rng = Pcg64::seed_from_u64(seed);
        let y: Vec<usize> = (0..n).map(|i| i % 3).collect();
        let x = Array2::from_shape_fn((n, 2), |(i, k)| {
            let angle = 2.0 * std::f64::consts::PI * y[i] as f64 / 3.0;
            (if k == 0 { angle.cos() } else { angle.sin() }) + 2.0 * (rng.random::<f64>() - 0.5) * 1.3
        });
        (x, y)
    }

    fn se(lengthscale: f64) -> KernelSet {
        KernelSet::shared_se(&SqExp { log_variance: 0.0, log_lengthscales: vec![lengthscale.ln()], learn_variance: false })
    }

    #[test]
    fn the_wrapper_picks_what_a_brute_force_loop_over_the_same_folds_picks_and_refits_it() {
        let (x, y) = problem(36, 3);
        let (x_test, _) = problem(12, 4);
        let (cs, ls) = ([0.01, 1.0, 100.0], [0.2, 1.0, 4.0]);
        let settings = serde_json::json!({
            "formulation": "llw", "tol": 1e-6,
            "select": { "grid": { "settings.c": cs, "kernel.lengthscale": ls }, "folds": 3 }
        });
        let m = build("msvm", &settings).unwrap();
        let kernels = se(1.0);
        let problem = Problem { x: &x, y: &y, n_classes: 3 };
        let mut rng = Pcg64::seed_from_u64(9);
        let mut ctx = FitContext::new(&mut rng, None);
        let fitted = m.fit(&problem, &kernels, HyperPolicy::Fixed, &mut ctx).unwrap();
        drop(ctx);

        // Brute force: the same folds (the same first draws of the same rng), every grid point
        // in grid order (kernel.lengthscale before settings.c, the latter fastest), errors
        // counted by hand, the first minimum kept.
        let fold = fold_assignment(36, 3, &mut Pcg64::seed_from_u64(9));
        let mut table = Vec::new();
        for &l in &ls {
            for &c in &cs {
                let direct = build("msvm", &serde_json::json!({ "formulation": "llw", "tol": 1e-6, "c": c })).unwrap();
                let mut errors = 0;
                for f in 0..3 {
                    let train: Vec<usize> = (0..36).filter(|&i| fold[i] != f).collect();
                    let val: Vec<usize> = (0..36).filter(|&i| fold[i] == f).collect();
                    let xt = x.select(Axis(0), &train);
                    let yt: Vec<usize> = train.iter().map(|&i| y[i]).collect();
                    let mut r = Pcg64::seed_from_u64(0);
                    let mut c2 = FitContext::new(&mut r, None);
                    let model = direct.fit(&Problem { x: &xt, y: &yt, n_classes: 3 }, &se(l), HyperPolicy::Fixed, &mut c2).unwrap();
                    let p = model.predict(&x.select(Axis(0), &val), &mut Pcg64::seed_from_u64(0)).unwrap();
                    for (j, &i) in val.iter().enumerate() {
                        let label = (0..3).find(|&k| p.probs[(j, k)] == 1.0).unwrap();
                        errors += usize::from(label != y[i]);
                    }
                }
                table.push((l, c, errors));
            }
        }
        let min = table.iter().map(|t| t.2).min().unwrap();
        let &(best_l, best_c, best_e) = table.iter().find(|t| t.2 == min).unwrap();
        // The grid must discriminate, or the test would pass by accident.
        assert!(table.iter().any(|t| t.2 > min + 2), "{table:?}");
        let extra = fitted.extra_metrics();
        assert_eq!((extra["selected_lengthscale"], extra["selected_c"]), (best_l, best_c), "{table:?}");
        assert_eq!(extra["select_cv_error"], best_e as f64 / 36.0);
        assert!(extra.contains_key("n_sv"), "the inner model's metrics stay");

        // The chosen model is a direct fit at that point on the whole training split.
        let direct = build("msvm", &serde_json::json!({ "formulation": "llw", "tol": 1e-6, "c": best_c })).unwrap();
        let mut r = Pcg64::seed_from_u64(0);
        let mut c2 = FitContext::new(&mut r, None);
        let model = direct.fit(&problem, &se(best_l), HyperPolicy::Fixed, &mut c2).unwrap();
        let want = model.predict(&x_test, &mut Pcg64::seed_from_u64(0)).unwrap();
        let got = fitted.predict(&x_test, &mut Pcg64::seed_from_u64(0)).unwrap();
        assert_eq!(got, want);
        assert_eq!(fitted.diagnostics().numbers, model.diagnostics().numbers);
        assert_eq!(fitted.kernels().log_params(), se(best_l).log_params());
        assert!(fitted.diagnostics().notes["select"].contains("3-fold CV errors"));
    }

    #[test]
    fn grid_keys_that_end_alike_get_metrics_of_their_own() {
        let keys: Vec<String> =
            ["kernel.lengthscale", "kernel.se.variance", "kernel.white.variance", "settings.c"].iter().map(|k| k.to_string()).collect();
        assert_eq!(
            selected_metric_names(keys.iter()),
            ["selected_lengthscale", "selected_kernel_se_variance", "selected_kernel_white_variance", "selected_c"]
        );
    }

    #[test]
    fn a_bad_select_is_an_error_naming_the_field() {
        let err = |select: serde_json::Value| build("msvm", &serde_json::json!({ "select": select })).err().unwrap_or_default();
        assert!(err(serde_json::json!({ "grid": {} })).contains("settings.select.grid"));
        assert!(err(serde_json::json!({ "grid": { "settings.c": [] } })).contains("settings.select.grid.settings.c: an empty list"));
        assert!(err(serde_json::json!({ "grid": { "settings.c": [1] }, "folds": 1 })).contains("settings.select.folds"));
        assert!(err(serde_json::json!({ "grid": { "settings.c": [1] }, "metric": "auc" }))
            .contains("settings.select.metric: unknown metric \"auc\""));
        assert!(err(serde_json::json!({ "grid": { "c": [1] } })).contains("settings.select.grid.c"));
        assert!(err(serde_json::json!({ "grid": { "kernel.lengthscale": [0] } })).contains("settings.select.grid.kernel.lengthscale"));
        assert!(err(serde_json::json!({ "grid": { "settings.c": [-1] } })).contains("settings.c must be a positive"));
        assert!(err(serde_json::json!({ "grid": { "settings.c": [1] }, "fold": 3 }))
            .contains("settings.select.fold: unknown field `fold`, expected one of"));
        assert!(err(serde_json::json!({ "grid": { "settings.c": [1] }, "fold": 3 })).ends_with("(did you mean `folds`?)"));
        // A kernel parameter the kernel does not have is refused by supports.
        let m = build("msvm", &serde_json::json!({ "select": { "grid": { "kernel.period": [1.0] } } })).unwrap();
        let shape = ProblemShape { n_classes: 3, n_features: 2, n_train: 30 };
        assert!(m.supports(&shape, &se(1.0), HyperPolicy::Fixed).unwrap_err().contains("kernel.period"));
        assert!(m
            .supports(&ProblemShape { n_train: 4, ..shape }, &se(1.0), HyperPolicy::Fixed)
            .unwrap_err()
            .contains("settings.select.folds"));
    }

    /// `metric: nll` picks the grid point whose validation rows, summed over the same folds, have
    /// the least -ln p(y | x), computed here from the probabilities of direct fits, where the
    /// error count would pick another point (so the metric is the one used); it records the
    /// CV NLL per row. A labels-only method cannot be selected by NLL.
    #[test]
    fn the_nll_metric_picks_the_least_validation_nll_of_a_brute_force_loop() {
        let (x, y) = problem(36, 3);
        let ls = [0.05, 0.3, 1.0, 3.0, 30.0];
        let m = build("laplace", &serde_json::json!({ "select": { "grid": { "kernel.lengthscale": ls }, "folds": 3, "metric": "nll" } }))
            .unwrap();
        let problem_ = Problem { x: &x, y: &y, n_classes: 3 };
        let mut rng = Pcg64::seed_from_u64(9);
        let mut ctx = FitContext::new(&mut rng, None);
        let fitted = m.fit(&problem_, &se(1.0), HyperPolicy::Fixed, &mut ctx).unwrap();
        drop(ctx);

        // The same folds and the same random streams (Laplace's predictive is Monte Carlo): the
        // cell's rng draws the folds, then one seed, from which fit (grid point g, fold f) runs
        // on the stream seed ^ (3 g + f) x the golden-ratio constant.
        let mut cell_rng = Pcg64::seed_from_u64(9);
        let fold = fold_assignment(36, 3, &mut cell_rng);
        let seed: u64 = cell_rng.random();
        let direct = build("laplace", &serde_json::Value::Null).unwrap();
        let mut table = Vec::new();
        for (g, &l) in ls.iter().enumerate() {
            let (mut nll, mut errors) = (0.0, 0);
            for f in 0..3 {
                let train: Vec<usize> = (0..36).filter(|&i| fold[i] != f).collect();
                let val: Vec<usize> = (0..36).filter(|&i| fold[i] == f).collect();
                let yt: Vec<usize> = train.iter().map(|&i| y[i]).collect();
                let mut r = Pcg64::seed_from_u64(seed ^ ((g * 3 + f) as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
                let mut c2 = FitContext::new(&mut r, None);
                let xt = x.select(Axis(0), &train);
                let model = direct.fit(&Problem { x: &xt, y: &yt, n_classes: 3 }, &se(l), HyperPolicy::Fixed, &mut c2).unwrap();
                drop(c2);
                let p = model.predict(&x.select(Axis(0), &val), &mut r).unwrap();
                for (j, &i) in val.iter().enumerate() {
                    nll -= p.probs[(j, y[i])].ln();
                    let label = (0..3).max_by(|&a, &b| p.probs[(j, a)].total_cmp(&p.probs[(j, b)]).then(b.cmp(&a))).unwrap();
                    errors += usize::from(label != y[i]);
                }
            }
            table.push((l, nll, errors));
        }
        let best = table.iter().min_by(|a, b| a.1.total_cmp(&b.1)).unwrap();
        let least_errors = table.iter().map(|t| t.2).min().unwrap();
        let by_errors = table.iter().find(|t| t.2 == least_errors).unwrap();
        assert_ne!(best.0, by_errors.0, "the error count must pick another point, or the metric is not tested: {table:?}");
        let extra = fitted.extra_metrics();
        assert_eq!(extra["selected_lengthscale"], best.0, "{table:?}");
        assert!((extra["select_cv_nll"] - best.1 / 36.0).abs() < 1e-12, "{} vs {table:?}", extra["select_cv_nll"]);
        assert_eq!(extra["select_cv_error"], best.2 as f64 / 36.0);
        assert!(fitted.diagnostics().notes["select"].contains("chosen by NLL"));

        let svm =
            build("msvm", &serde_json::json!({ "select": { "grid": { "settings.c": [1.0] }, "folds": 3, "metric": "nll" } })).unwrap();
        let mut rng = Pcg64::seed_from_u64(9);
        let mut ctx = FitContext::new(&mut rng, None);
        let e = svm.fit(&problem_, &se(1.0), HyperPolicy::Fixed, &mut ctx).err().unwrap().to_string();
        assert!(e.contains("settings.select.metric: nll needs predictive probabilities"), "{e}");
    }

    /// A method whose predictions are NaN: a grid point of it must be passed over, not scored
    /// through the log floor or argmax's first column.
    struct NanMethod;
    struct NanModel(KernelSet, usize);

    impl Method for NanMethod {
        fn name(&self) -> &'static str {
            "nan"
        }
        fn train(&self, problem: &Problem, kernels: &KernelSet, _: HyperPolicy, _: &mut FitContext) -> Result<Box<dyn Fitted>, FitError> {
            Ok(Box::new(NanModel(kernels.clone(), problem.n_classes)))
        }
    }

    impl Fitted for NanModel {
        fn predict(&self, x: &Array2<f64>, _: &mut Pcg64) -> Result<Prediction, FitError> {
            Ok(Prediction::new(Array2::from_elem((x.nrows(), self.1), f64::NAN)))
        }
        fn evidence(&self) -> Option<Evidence> {
            None
        }
        fn kernels(&self) -> KernelSet {
            self.0.clone()
        }
        fn diagnostics(&self) -> Diagnostics {
            Diagnostics::default()
        }
    }

    #[test]
    fn a_grid_point_whose_fold_predictions_are_not_valid_is_passed_over() {
        // Class 0 everywhere but a few rows: NaN rows' argmax (the first column) would score
        // as well as any real fit, and as the first grid point it would win the tie.
        let (x, _) = problem(30, 7);
        let y: Vec<usize> = (0..30).map(|i| usize::from(i % 10 == 0)).collect();
        let real = build("laplace", &serde_json::json!({ "mc_samples": 50 })).unwrap();
        let point = |method: Box<dyn Method>| GridPoint { values: Vec::new(), method, kernel: Vec::new() };
        let select =
            Select { points: vec![point(Box::new(NanMethod)), point(real)], folds: 3, metric: Metric::Error, selected_names: Vec::new() };
        let problem = Problem { x: &x, y: &y, n_classes: 2 };
        let mut rng = Pcg64::seed_from_u64(3);
        let mut ctx = FitContext::new(&mut rng, None);
        let fitted = select.fit(&problem, &se(1.0), HyperPolicy::Fixed, &mut ctx).unwrap();
        drop(ctx);
        let p = fitted.predict(&x, &mut Pcg64::seed_from_u64(4)).unwrap();
        assert!(p.probs.iter().all(|v| v.is_finite()), "the NaN grid point was chosen");
        let note = fitted.diagnostics().texts()["select"].clone();
        assert!(note.contains("1 grid points failed"), "{note}");
    }
}
