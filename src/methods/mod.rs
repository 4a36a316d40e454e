//! Approximate-inference methods behind one trait.
//!
//! A method value is checked configuration (`<Name>`, built from serde `<Name>Params`) and
//! is shared by many cells; `fit` returns a new fitted model (`<Name>Model`). All randomness
//! comes from `FitContext::rng`, so a cell's seed fixes its result bit for bit.
pub mod laplace;
pub mod optimize;

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

/// Per-fit context: randomness, the wall-clock deadline and the trace.
pub struct FitContext<'a> {
    pub rng: &'a mut Pcg64,
    pub deadline: Option<Instant>,
    pub start: Instant,
    pub trace: Vec<TracePoint>,
}

impl<'a> FitContext<'a> {
    pub fn new(rng: &'a mut Pcg64, deadline: Option<Instant>) -> Self {
        FitContext { rng, deadline, start: Instant::now(), trace: Vec::new() }
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

    /// What dependent cells may take from this one; by default the kernel's log-parameters.
    fn handoff(&self) -> Handoff {
        Handoff { log_hyperparameters: self.kernel().log_params(), vectors: BTreeMap::new() }
    }
}

/// Methods known to the harness: (YAML name, one-line description).
pub const METHODS: &[(&str, &str)] = &[(
    "laplace",
    "Laplace approximation for the multinomial-logit GP (Rasmussen & Williams 2006, Alg. 3.3/3.4; evidence by Laplace, hyper-parameters by L-BFGS)",
)];

/// Build a checked method from its YAML name and settings. The error names the bad setting.
pub fn build(name: &str, settings: &serde_json::Value) -> Result<Box<dyn Method>, String> {
    match name {
        "laplace" => Ok(Box::new(laplace::LaplaceParams::from_settings(settings)?.check()?)),
        other => Err(format!("unknown method \"{other}\"")),
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
    }

    #[test]
    fn every_registered_method_builds_with_default_settings() {
        for (name, _) in METHODS {
            assert_eq!(build(name, &serde_json::Value::Null).unwrap().name(), *name);
        }
        assert!(build("lapalce", &serde_json::Value::Null).is_err());
    }
}
