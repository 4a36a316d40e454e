//! The contract between the harness and a method: what a method is given ([`Problem`],
//! a [`KernelSet`], a [`HyperPolicy`], a [`FitContext`](super::FitContext)), what it may refuse
//! up front ([`Method::supports`]), and what a fitted model gives back ([`Prediction`],
//! [`Evidence`], [`Diagnostics`]).
use super::FitContext;
use crate::kernels::KernelSet;
use crate::linalg::{argmax, LinalgError};
use crate::results::{EvidenceKind, Handoff};
use ndarray::Array2;
use rand_pcg::Pcg64;
use std::collections::BTreeMap;

/// The training problem a method sees: inputs, class indices 0..C, and C.
pub struct Problem<'a> {
    pub x: &'a Array2<f64>,
    pub y: &'a [usize],
    pub n_classes: usize,
}

impl Problem<'_> {
    pub fn shape(&self) -> ProblemShape {
        ProblemShape { n_classes: self.n_classes, n_features: self.x.ncols(), n_train: self.x.nrows() }
    }

    /// What every method's `fit` needs of its input, checked first by `Method::fit`: one label
    /// per row, each a class index below `n_classes`, at least one row. The runner's problems
    /// pass by construction (the loaders check the files); programmatic callers get this error
    /// instead of an index panic deep inside a method.
    pub fn check(&self, method: &str) -> Result<(), FitError> {
        if self.x.nrows() != self.y.len() {
            return Err(FitError::Unsupported(format!("{method}: {} rows but {} labels", self.x.nrows(), self.y.len())));
        }
        if self.y.is_empty() {
            return Err(FitError::Unsupported(format!("{method}: no training rows")));
        }
        if let Some(&bad) = self.y.iter().find(|&&c| c >= self.n_classes) {
            return Err(FitError::Unsupported(format!("{method}: class index {bad} out of range for {} classes", self.n_classes)));
        }
        Ok(())
    }
}

/// What `supports` may look at: known from the dataset before any cell runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProblemShape {
    pub n_classes: usize,
    pub n_features: usize,
    /// Training rows of the largest split.
    pub n_train: usize,
}

/// What the method does with the kernel's hyper-parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HyperPolicy {
    /// Use the given kernels as they are.
    Fixed,
    /// Start from the given kernels and maximise the method's evidence over the free log-parameters.
    Learn,
}

/// Why a fit's iterations ended. Reaching a budget is a normal stop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopReason {
    /// The method's own convergence test passed.
    Converged,
    /// The method's own iteration limit (a setting such as `max_hyper_iters`).
    MaxIterations,
    /// `budget: {seconds: S}`: training time reached S (machine-dependent).
    BudgetSeconds,
    /// `budget: {iterations: N}`: the method's outer iteration N was done.
    BudgetIterations,
    /// The search ended before its convergence test or any limit: its optimiser gave up (a
    /// line search found no decrease, restarts included). The result is the best point reached.
    Stalled,
}

impl std::fmt::Display for StopReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            StopReason::Converged => "converged",
            StopReason::MaxIterations => "max_iterations",
            StopReason::BudgetSeconds => "budget_seconds",
            StopReason::BudgetIterations => "budget_iterations",
            StopReason::Stalled => "stalled",
        })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum FitError {
    #[error(transparent)]
    Linalg(#[from] LinalgError),
    #[error("timed out after {seconds:.1} s")]
    Timeout { seconds: f64 },
    /// Not a failure: a budget ended the iterations. Inner loops return it so the method can
    /// end at its best point (the shared optimiser does so itself); it never leaves `fit`.
    #[error("stopped: {0}")]
    Stop(StopReason),
    #[error("{0}")]
    Numerical(String),
    #[error("{0}")]
    Unsupported(String),
}

impl FitError {
    /// Results computed in parallel (per class, say), failing with the first error in their
    /// order: rayon's own `collect` into a `Result` returns whichever error a thread met first,
    /// so the message a failed cell stores would depend on the thread count.
    pub fn first_in_order<T>(results: Vec<Result<T, FitError>>) -> Result<Vec<T>, FitError> {
        results.into_iter().collect()
    }
}

/// An approximate-inference method (checked configuration, shared by many cells).
pub trait Method: Send + Sync {
    /// The method's short name (its module and YAML `method:` value).
    fn name(&self) -> &'static str;

    /// Whether this method runs on a problem of this shape with these kernels and this
    /// hyper-parameter policy. `mcgp check` calls it for every (dataset, method entry) pair, so
    /// an unsupported combination is a spec error, not a failure of every cell. The message
    /// says what is needed ("binary problems only", "a fixed kernel").
    fn supports(&self, _shape: &ProblemShape, _kernels: &KernelSet, _hyper: HyperPolicy) -> Result<(), String> {
        Ok(())
    }

    /// What this fit does with an entry's `budget:` (seconds or iterations) and `checkpoints:`
    /// on a problem of this shape under this policy: whether it asks
    /// `FitContext::budget_stop` at its iterations and scores checkpoints there. `mcgp check`
    /// refuses either where the fit does not (it would run to its own end with the budget or the
    /// schedule only in the cell's key). Neither by default; tests/conformance.rs fits every
    /// method with both and checks this against what the fit did.
    fn progress(&self, _shape: &ProblemShape, _hyper: HyperPolicy) -> Progress {
        Progress::default()
    }

    /// Fit on `problem`: first `Problem::check` and this method's own `supports` for the
    /// problem's shape, kernels and policy, then `train`. Every caller (the runner, selection's
    /// inner fits, tests) comes through here, so no method trains on input it refuses.
    fn fit(&self, problem: &Problem, kernels: &KernelSet, hyper: HyperPolicy, ctx: &mut FitContext) -> Result<Box<dyn Fitted>, FitError> {
        problem.check(self.name())?;
        self.supports(&problem.shape(), kernels, hyper).map_err(FitError::Unsupported)?;
        self.train(problem, kernels, hyper, ctx)
    }

    /// The fit itself, on a problem `fit` has checked. Call `fit`, not this.
    fn train(&self, problem: &Problem, kernels: &KernelSet, hyper: HyperPolicy, ctx: &mut FitContext) -> Result<Box<dyn Fitted>, FitError>;
}

/// See `Method::progress`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Progress {
    /// A budget's seconds or iterations can end the fit.
    pub budget: bool,
    /// The fit scores `checkpoints:`.
    pub checkpoints: bool,
}

impl Progress {
    /// Both, or neither.
    pub fn both(yes: bool) -> Progress {
        Progress { budget: yes, checkpoints: yes }
    }
}

/// A fitted model.
pub trait Fitted: Send + Sync {
    /// Predictions for each row of `x`. Methods that integrate by Monte Carlo draw from `rng`.
    fn predict(&self, x: &Array2<f64>, rng: &mut Pcg64) -> Result<Prediction, FitError>;

    /// The class probabilities of `predict` alone, [m, C].
    fn predict_proba(&self, x: &Array2<f64>, rng: &mut Pcg64) -> Result<Array2<f64>, FitError> {
        self.predict(x, rng).map(|p| p.probs)
    }

    /// The log marginal-likelihood value, what kind of number it is, and its standard error.
    fn evidence(&self) -> Option<Evidence>;

    /// The kernels the model was fitted with (after any hyper-parameter learning).
    fn kernels(&self) -> KernelSet;

    /// Iterations, stop reason, jitter and other numbers, and text notes.
    fn diagnostics(&self) -> Diagnostics;

    /// Further named numbers the method computes (bounds, estimates, effective sample sizes,
    /// ordering checks); the runner stores each as a metric of the cell.
    fn extra_metrics(&self) -> BTreeMap<String, f64> {
        BTreeMap::new()
    }

    /// Test-set numbers that need the true classes, computed from this model's own
    /// `prediction` of the test rows (fitting never sees these labels). By default the sum over
    /// rows of each of the prediction's `log_class_values` at the true class, as `<name>_sum`.
    fn test_metrics(&self, prediction: &Prediction, y_test: &[usize]) -> BTreeMap<String, f64> {
        prediction.class_value_sums(y_test)
    }

    /// The inducing inputs of a sparse model, one set per class or one shared (none for a
    /// dense one), in the training inputs' units: the runner records them with a decision grid.
    fn inducing_inputs(&self) -> Vec<Array2<f64>> {
        Vec::new()
    }

    /// What dependent cells may take from this one; by default the kernels' named log-parameters.
    fn handoff(&self) -> Handoff {
        Handoff::of_kernels(&self.kernels())
    }
}

/// A predictive a Gaussian-latent method can score beside its own (`also_predict`), as a
/// `Prediction::alternatives` entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AlsoPredict {
    /// The latents' posterior (predictive) means plugged into the likelihood, their
    /// (co)variance dropped.
    PlugIn,
}

impl AlsoPredict {
    /// The rule as a spec writes it, the suffix of its metrics.
    pub fn name(self) -> &'static str {
        match self {
            AlsoPredict::PlugIn => "plug_in",
        }
    }
}

/// ln p with a probability that underflowed to 0 floored at the smallest normal double (about
/// -708 nats), so that one point cannot make a sum of logs -inf.
pub fn floored_ln(p: f64) -> f64 {
    p.max(f64::MIN_POSITIVE).ln()
}

/// What `Fitted::predict` returns for m rows and C classes.
#[derive(Clone, Debug, PartialEq)]
pub struct Prediction {
    /// [m, C] class probabilities; each row on the simplex (checked by the runner).
    pub probs: Array2<f64>,
    /// [m, C] the log predictive value the method is scored by when it is not ln(probs):
    /// Chai's eq. 24 is a lower bound on p(y* | y) and does not sum to one over the classes.
    /// The runner's `log_pred_*` metrics use it; the error rate always uses `probs`.
    pub log_score: Option<Array2<f64>>,
    /// Named [m, C] per-row, per-class log-values (bounds, other estimators) that
    /// `Fitted::test_metrics` reads at the true class.
    pub log_class_values: BTreeMap<String, Array2<f64>>,
    /// Named [m, C] class probabilities of the same fit by another predictive rule (an
    /// ablation of the rule without refitting): the runner scores each as the main one, its
    /// metrics suffixed `_<name>` (`error_pct_monte_carlo`).
    pub alternatives: BTreeMap<String, Array2<f64>>,
    /// Largest diagonal jitter added to a matrix while predicting (0 when none); the runner
    /// stores it as `diag_predict_jitter`.
    pub jitter: f64,
    /// The method predicts labels, not probabilities (an SVM): `probs` is the one-hot encoding
    /// of the labels, so the error rate is scored and the log-predictive metrics are left out.
    pub labels_only: bool,
}

impl Prediction {
    pub fn new(probs: Array2<f64>) -> Self {
        Prediction {
            probs,
            log_score: None,
            log_class_values: BTreeMap::new(),
            alternatives: BTreeMap::new(),
            jitter: 0.0,
            labels_only: false,
        }
    }

    /// Predicted labels of a method without probabilities, as one-hot rows over `n_classes`
    /// (what the error rate reads) with `labels_only` set (no `log_pred_*` metrics).
    pub fn labels_only(labels: &[usize], n_classes: usize) -> Self {
        let probs = Array2::from_shape_fn((labels.len(), n_classes), |(i, c)| if labels[i] == c { 1.0 } else { 0.0 });
        Prediction { labels_only: true, ..Prediction::new(probs) }
    }

    /// The log predictive value row i is scored by at class `yi` (every `log_pred_*` metric and
    /// a cross-validation by NLL read it): the method's own log score where it has one, kept
    /// where finite (it may lie far below a probability's floor, computed accurately in log
    /// space) and floored as a probability where -inf; otherwise ln(probs), floored. Left as
    /// -inf, one point would make a split's sum non-finite, and a non-finite split drops out of
    /// the aggregates: the worst split would vanish from the mean.
    pub fn log_pred(&self, i: usize, yi: usize) -> f64 {
        match &self.log_score {
            Some(l) if l[(i, yi)] == f64::NEG_INFINITY => floored_ln(0.0),
            Some(l) => l[(i, yi)],
            None => floored_ln(self.probs[(i, yi)]),
        }
    }

    /// How many rows `log_pred` scores at the floor (a probability of 0, or a log score of
    /// -inf, at the true class): the runner notes them, since the floor stands in for -inf.
    pub fn floored_rows(&self, y: &[usize]) -> usize {
        let floored = |i: usize, yi: usize| match &self.log_score {
            Some(l) => l[(i, yi)] == f64::NEG_INFINITY,
            None => self.probs[(i, yi)] < f64::MIN_POSITIVE,
        };
        y.iter().enumerate().filter(|&(i, &yi)| floored(i, yi)).count()
    }

    /// The predicted class of each row: the most probable (the first on ties), what every
    /// error count reads.
    pub fn labels(&self) -> Vec<usize> {
        self.probs.rows().into_iter().map(|r| argmax(&r.to_vec())).collect()
    }

    pub fn with_values(mut self, name: &str, values: Array2<f64>) -> Self {
        assert_eq!(values.dim(), self.probs.dim(), "{name}: per-class values of another shape than the probabilities");
        self.log_class_values.insert(name.to_string(), values);
        self
    }

    pub fn with_alternative(mut self, name: &str, probs: Array2<f64>) -> Self {
        assert_eq!(probs.dim(), self.probs.dim(), "{name}: alternative probabilities of another shape");
        self.alternatives.insert(name.to_string(), probs);
        self
    }

    /// Check the shape (a row per test point, a column per class), every probability (the
    /// main ones and each alternative's) is finite and in [0, 1] and each row sums to one (to
    /// 1e-9), and every log-value is a number (not NaN; -inf is a valid log of zero).
    pub fn validate(&self, n_rows: usize, n_classes: usize) -> Result<(), String> {
        let (m, c) = self.probs.dim();
        if m != n_rows {
            return Err(format!("prediction has {m} rows for {n_rows} test points"));
        }
        // More columns would let argmax name a class that does not exist (counted as an error).
        if c != n_classes {
            return Err(format!("prediction has {c} columns for {n_classes} classes"));
        }
        check_simplex_rows(&self.probs, "")?;
        for (name, probs) in &self.alternatives {
            if probs.dim() != (m, c) {
                return Err(format!("alternative {name}: shape {:?}, expected {:?}", probs.dim(), (m, c)));
            }
            check_simplex_rows(probs, &format!(" ({name})"))?;
        }
        let named = self.log_score.iter().map(|v| ("log_score", v)).chain(self.log_class_values.iter().map(|(k, v)| (k.as_str(), v)));
        for (name, values) in named {
            if values.dim() != (m, c) {
                return Err(format!("{name}: shape {:?}, expected {:?}", values.dim(), (m, c)));
            }
            if let Some(j) = values.rows().into_iter().position(|r| r.iter().any(|v| v.is_nan() || *v == f64::INFINITY)) {
                return Err(format!("{name} of test row {j} is NaN or +inf"));
            }
        }
        Ok(())
    }

    /// sum_j values[j, y_j] for each named value, as `<name>_sum`.
    pub fn class_value_sums(&self, y: &[usize]) -> BTreeMap<String, f64> {
        self.log_class_values.iter().map(|(name, v)| (format!("{name}_sum"), y.iter().enumerate().map(|(j, &c)| v[(j, c)]).sum())).collect()
    }
}

/// Every row of `probs` on the simplex: entries finite in [0, 1], sums 1 to 1e-9 C.
fn check_simplex_rows(probs: &Array2<f64>, which: &str) -> Result<(), String> {
    let c = probs.ncols();
    for (j, row) in probs.rows().into_iter().enumerate() {
        if let Some(p) = row.iter().find(|p| !(p.is_finite() && (0.0..=1.0).contains(*p))) {
            return Err(format!("predicted probability{which} {p} of test row {j} is not in [0, 1]"));
        }
        let s: f64 = row.sum();
        if (s - 1.0).abs() > 1e-9 * c as f64 {
            return Err(format!("predicted probabilities{which} of test row {j} sum to {s}, not 1"));
        }
    }
    Ok(())
}

/// A log marginal-likelihood value and what kind of number it is. An ELBO and an EP log Z
/// never share a column without this label.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Evidence {
    pub value: f64,
    pub kind: EvidenceKind,
    /// Monte Carlo standard error of an `Estimate`.
    pub std_err: Option<f64>,
}

impl Evidence {
    pub fn new(value: f64, kind: EvidenceKind) -> Self {
        Evidence { value, kind, std_err: None }
    }
}

/// What a fit reports beside its model: numbers (stored as metrics `diag_<name>`) and text.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Diagnostics {
    /// The method's outer iterations done (the iteration axis of its checkpoints).
    pub iterations: Option<u64>,
    pub stop_reason: Option<StopReason>,
    /// Largest diagonal jitter added to make a matrix positive definite.
    pub jitter: Option<f64>,
    /// Further numbers: evaluations, effective sample sizes, acceptance rates, ...
    pub numbers: BTreeMap<String, f64>,
    /// Text: optimiser messages, warnings, the variant used.
    pub notes: BTreeMap<String, String>,
}

impl Diagnostics {
    pub fn number(&mut self, name: &str, value: f64) -> &mut Self {
        self.numbers.insert(name.to_string(), value);
        self
    }

    pub fn note(&mut self, name: &str, text: impl Into<String>) -> &mut Self {
        self.notes.insert(name.to_string(), text.into());
        self
    }

    /// The numbers as metrics: `diag_iterations`, `diag_jitter`, `diag_<name>`.
    pub fn metrics(&self) -> BTreeMap<String, f64> {
        let mut out: BTreeMap<String, f64> = self.numbers.iter().map(|(k, v)| (format!("diag_{k}"), *v)).collect();
        if let Some(i) = self.iterations {
            out.insert("diag_iterations".into(), i as f64);
        }
        if let Some(j) = self.jitter {
            out.insert("diag_jitter".into(), j);
        }
        out
    }

    /// The text entries, with the stop reason, for the cell record.
    pub fn texts(&self) -> BTreeMap<String, String> {
        let mut out = self.notes.clone();
        if let Some(s) = self.stop_reason {
            out.insert("stop_reason".into(), s.to_string());
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::FitError;
    use rayon::prelude::*;

    #[test]
    fn parallel_failures_report_the_first_in_order_on_any_thread_count() {
        // Items 3, 10, 17, ... fail; the later ones fail at once, item 3 only after some work,
        // so a thread can meet a later failure first. The error is item 3's on 1 to 4 threads.
        for threads in 1..=4 {
            let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
            let results: Vec<Result<usize, FitError>> = pool.install(|| {
                (0..64usize)
                    .into_par_iter()
                    .map(|k| {
                        if k == 3 {
                            std::thread::sleep(std::time::Duration::from_millis(20));
                        }
                        if k % 7 == 3 {
                            Err(FitError::Numerical(format!("item {k}")))
                        } else {
                            Ok(k)
                        }
                    })
                    .collect()
            });
            let err = FitError::first_in_order(results).expect_err("items fail");
            assert_eq!(err.to_string(), "item 3", "{threads} threads");
        }
        let all = FitError::first_in_order((0..5usize).map(Ok).collect()).unwrap();
        assert_eq!(all, vec![0, 1, 2, 3, 4]);
    }
}
