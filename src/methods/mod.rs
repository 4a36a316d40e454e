//! Approximate-inference methods behind one trait.
//!
//! A method value is checked configuration (`<Name>`, built from serde `<Name>Params`) and
//! is shared by many cells; `fit` returns a new fitted model (`<Name>Model`). All randomness
//! comes from `FitContext::rng`, so a cell's seed fixes its result bit for bit.
pub mod gibbs_mnp;
pub mod importance;
pub mod klmnl;
pub mod laplace;
pub mod optimize;
pub mod vbmnp;
pub mod vbmnp_sparse;

use crate::kernels::SqExp;
use crate::linalg::LinalgError;
use crate::results::{EvidenceKind, Handoff, TracePoint};
use ndarray::Array2;
use rand_pcg::Pcg64;
use std::collections::BTreeMap;
use std::time::Instant;

/// The training problem a method sees: inputs, class indices 0..C, and C.
pub struct Problem<'a> {
    pub x: &'a Array2<f64>,
    pub y: &'a [usize],
    pub n_classes: usize,
}

/// What the method does with the kernel's hyper-parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HyperPolicy {
    /// Use the given kernel as is.
    Fixed,
    /// Start from the given kernel and maximise the method's evidence over the free log-parameters.
    Learn,
}

/// Per-fit context: randomness, the wall-clock deadline, the trace, and what the cell this
/// one depends on (`hyper: {from: ...}`) handed over.
pub struct FitContext<'a> {
    pub rng: &'a mut Pcg64,
    pub deadline: Option<Instant>,
    pub start: Instant,
    pub trace: Vec<TracePoint>,
    /// The source cell's handoff (its hyper-parameters are already in the kernel; its named
    /// vectors, e.g. a posterior mean used as an importance-sampling centre, are here).
    pub source: Option<&'a Handoff>,
}

impl<'a> FitContext<'a> {
    pub fn new(rng: &'a mut Pcg64, deadline: Option<Instant>) -> Self {
        FitContext { rng, deadline, start: Instant::now(), trace: Vec::new(), source: None }
    }

    /// Record named values at one outer iteration.
    pub fn record(&mut self, iter: usize, values: &[(&str, f64)]) {
        let time = self.start.elapsed().as_secs_f64();
        self.trace.extend(values.iter().map(|(name, value)| TracePoint { iter, time, name: name.to_string(), value: *value }));
    }

    /// Fail with `FitError::Timeout` once the deadline has passed.
    pub fn check_deadline(&self) -> Result<(), FitError> {
        match self.deadline {
            Some(d) if Instant::now() > d => Err(FitError::Timeout { seconds: self.start.elapsed().as_secs_f64() }),
            _ => Ok(()),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum FitError {
    #[error(transparent)]
    Linalg(#[from] LinalgError),
    #[error("timed out after {seconds:.1} s")]
    Timeout { seconds: f64 },
    #[error("{0}")]
    Numerical(String),
    #[error("{0}")]
    Unsupported(String),
}

/// An approximate-inference method (checked configuration).
pub trait Method: Send + Sync {
    /// The method's short name (its module and YAML `method:` value).
    fn name(&self) -> &'static str;

    fn fit(&self, problem: &Problem, kernel: &SqExp, hyper: HyperPolicy, ctx: &mut FitContext)
        -> Result<Box<dyn Fitted>, FitError>;
}

/// A fitted model.
pub trait Fitted: Send + Sync {
    /// Class probabilities for each row of `x`, [m, C]; rows sum to one. Methods that
    /// integrate by Monte Carlo draw from `rng`.
    fn predict_proba(&self, x: &Array2<f64>, rng: &mut Pcg64) -> Result<Array2<f64>, FitError>;

    /// The log marginal-likelihood value and what kind of number it is.
    fn evidence(&self) -> Option<(f64, EvidenceKind)>;

    /// The kernel the model was fitted with (after any hyper-parameter learning).
    fn kernel(&self) -> &SqExp;

    /// Non-fatal diagnostics: iterations, convergence, jitter, warnings.
    fn diagnostics(&self) -> BTreeMap<String, String>;

    /// Further named numbers the method computes (bounds, estimates, effective sample sizes,
    /// ordering checks); the runner stores each as a metric of the cell.
    fn extra_metrics(&self) -> BTreeMap<String, f64> {
        BTreeMap::new()
    }

    /// Further test-set numbers that need the true classes of the rows last passed to
    /// `predict_proba` (bounds on log p(y*), orderings against other estimates); the runner
    /// calls it after scoring and stores each entry as a metric. Fitting never sees these labels.
    fn test_metrics(&self, _y_test: &[usize]) -> BTreeMap<String, f64> {
        BTreeMap::new()
    }

    /// What dependent cells may take from this one; by default the kernel's log-parameters.
    fn handoff(&self) -> Handoff {
        Handoff { log_hyperparameters: self.kernel().log_params(), vectors: BTreeMap::new() }
    }
}

/// Methods known to the harness: (YAML name, one-line description).
pub const METHODS: &[(&str, &str)] = &[(
    "klmnl",
    "KL-MNL: variational multinomial-logit GP (Chai 2012), non-sparse; evidence = the bound log Z_h (eq. 21), hyper-parameters by L-BFGS on it",
), (
    "mc_mnl",
    "MC-MNL: importance-sampled logit marginal likelihood and predictive (Chai 2012 App. F; t4 proposal at the KL-MNL mean; evidence = 99.9% upper bound)",
), (
    "mc_mnp",
    "MC-MNP: importance-sampled multinomial-probit marginal likelihood and predictive (Chai 2012 App. F; t4 proposal at the KL-MNL mean)",
), (
    "laplace",
    "Laplace approximation for the multinomial-logit GP (Rasmussen & Williams 2006, Alg. 3.3/3.4) or, with likelihood: probit, the binary-probit GP (Alg. 3.1/3.2); evidence by Laplace, hyper-parameters by L-BFGS",
), (
    "vbmnp",
    "Variational Bayes multinomial-probit GP (Girolami & Rogers 2006; lower bound, importance-sampled RBF precisions); binary_model: probit is the one-GP binary VB of eq. 4.9",
), (
    "vbmnp_sparse",
    "Sparse VB multinomial-probit GP by ADF with random or informative point inclusion (Girolami & Rogers 2006 §5; fixed kernel, no evidence)",
), (
    "gibbs_mnp",
    "Gibbs sampler for the multinomial-probit GP (Girolami & Rogers 2006, App. D; exact cone draws, fixed hyper-parameters; evidence = prior-sampling estimate)",
)];

/// Build a checked method from its YAML name and settings. The error names the bad setting.
pub fn build(name: &str, settings: &serde_json::Value) -> Result<Box<dyn Method>, String> {
    match name {
        "laplace" => Ok(Box::new(laplace::LaplaceParams::from_settings(settings)?.check()?)),
        "klmnl" => Ok(Box::new(klmnl::KlmnlParams::from_settings(settings)?.check()?)),
        "mc_mnl" => Ok(Box::new(importance::ImportanceParams::from_settings(settings)?.check(importance::Lik::Logit)?)),
        "mc_mnp" => Ok(Box::new(importance::ImportanceParams::from_settings(settings)?.check(importance::Lik::Probit)?)),
        "vbmnp_sparse" => Ok(Box::new(vbmnp_sparse::VbmnpSparseParams::from_settings(settings)?.check()?)),
        "vbmnp" => Ok(Box::new(vbmnp::VbmnpParams::from_settings(settings)?.check()?)),
        "gibbs_mnp" => Ok(Box::new(gibbs_mnp::GibbsMnpParams::from_settings(settings)?.check()?)),
        other => Err(format!("unknown method \"{other}\"")),
    }
}

/// `<Name>Params::from_settings(&value)` for every method's settings struct: one parser for all.
pub trait FromSettings: Sized {
    fn from_settings(settings: &serde_json::Value) -> Result<Self, String>;
}

impl<T: serde::de::DeserializeOwned> FromSettings for T {
    fn from_settings(settings: &serde_json::Value) -> Result<Self, String> {
        parse_settings(settings)
    }
}

/// Deserialize a method's settings, turning serde's message into one that names the field.
pub(crate) fn parse_settings<T: serde::de::DeserializeOwned>(settings: &serde_json::Value) -> Result<T, String> {
    let value = if settings.is_null() { serde_json::Value::Object(Default::default()) } else { settings.clone() };
    serde_json::from_value(value).map_err(|e| format!("settings: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send_sync<T: Send + Sync + ?Sized>() {}

    #[test]
    fn methods_and_models_are_send_and_sync() {
        assert_send_sync::<dyn Method>();
        assert_send_sync::<dyn Fitted>();
        assert_send_sync::<laplace::Laplace>();
        assert_send_sync::<laplace::LaplaceModel>();
        assert_send_sync::<laplace::LaplaceProbitModel>();
        assert_send_sync::<vbmnp::VbmnpBinaryModel>();
    }

    #[test]
    fn every_registered_method_builds_with_default_settings() {
        for (name, _) in METHODS {
            assert_eq!(build(name, &serde_json::Value::Null).unwrap().name(), *name);
        }
        assert!(build("lapalce", &serde_json::Value::Null).is_err());
    }
}
