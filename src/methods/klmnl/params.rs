//! Settings of `method: klmnl` and their checks.
use super::*;

/// Settings as written in a spec (`method: klmnl`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KlmnlParams {
    /// Block-coordinate sweeps (S, joint m/b, V) allowed per variational fit.
    #[serde(default = "d_max_sweeps")]
    pub max_sweeps: usize,
    /// Stop when log Z_h rises by less than tol * max(1, |log Z_h|) in a sweep and b = g-bar to
    /// b_tol, or when the bound has stayed that flat for 5 sweeps (b - g-bar at its rounding floor).
    #[serde(default = "d_tol")]
    pub tol: f64,
    #[serde(default = "d_b_tol")]
    pub b_tol: f64,
    /// gamma of the E.3 initialisation W_i = gamma_w (I/C - 11^T/C^2).
    #[serde(default = "one")]
    pub gamma_w: f64,
    /// gamma of the E.3 initial "data" a_i = gamma_a (y_i + (y_i - 1)/(C - 1)).
    #[serde(default = "one")]
    pub gamma_a: f64,
    /// L-BFGS iterations for hyper-parameter learning (`hyper: learn`).
    #[serde(default = "d_hyper_iters")]
    pub max_hyper_iters: u64,
    /// Hyper-parameter learning has converged when an L-BFGS iteration raises log Z_h* by less
    /// than this many nats. Tables report log Z to 0.01, and along the flat directions of an
    /// ARD bound (length-scales drifting out) tighter stops buy thousandths of a nat for
    /// dozens of O(p^3) evaluations.
    #[serde(default = "d_hyper_tol")]
    pub hyper_tol: f64,
    /// Latent classes the model has beyond those present in the data (Chai keeps C = 7 for
    /// glass, whose class 4 is empty: `extra_classes: 1`). predict_proba drops them and
    /// renormalises over the present classes.
    #[serde(default)]
    pub extra_classes: usize,
    /// What predict_proba returns: `eq25` (re-normalised softmax at the predictive mean) or
    /// `eq24` (exp of the lower bound (24) per class: rows sum to less than one).
    #[serde(default = "d_predictive")]
    pub predictive: String,
    /// Overrides the kernel's signal variance sigma^2 (after any `hyper: {from: ...}`), e.g. for
    /// Chai's Figure 1 sweep of sigma^2 * usqexpard(theta_MF) (grid over `settings.prior_variance`).
    #[serde(default)]
    pub prior_variance: Option<f64>,
    /// Inter-class covariance K^c (Chai §9.2.2): m1 (I), m2 (C diag(softmax rho)), m3 (eq. 46
    /// with diagonal M), m4 (eq. 46 with M = L L^T), m5 (C L L^T / tr(L L^T)); all keep tr K^c = C.
    #[serde(default = "d_kc")]
    pub kc_model: String,
    /// Learn the K^c parameters by maximising log Z_h* (with the kernel fixed unless `hyper: learn`).
    #[serde(default)]
    pub learn_kc: bool,
    /// Take K^c from the source cell's hand-off (vector "kc") instead of the model's start.
    #[serde(default)]
    pub kc_from_source: bool,
}

pub(super) fn d_kc() -> String {
    "m1".into()
}

pub(super) fn d_max_sweeps() -> usize {
    1000
}
pub(super) fn d_tol() -> f64 {
    1e-10
}
pub(super) fn d_b_tol() -> f64 {
    1e-8
}
pub(super) fn one() -> f64 {
    1.0
}
pub(super) fn d_hyper_iters() -> u64 {
    100
}
pub(super) fn d_hyper_tol() -> f64 {
    1e-4
}
pub(super) fn d_predictive() -> String {
    "eq25".into()
}

impl Default for KlmnlParams {
    fn default() -> Self {
        parse_settings(&serde_json::Value::Null).expect("defaults parse")
    }
}

impl KlmnlParams {
    pub fn check(self) -> Result<Klmnl, String> {
        if self.max_sweeps == 0 {
            return Err("settings.max_sweeps must be at least 1".into());
        }
        if !(self.tol > 0.0 && self.tol < 1.0) {
            return Err(format!("settings.tol must be in (0, 1), got {}", self.tol));
        }
        if !(self.b_tol > 0.0) {
            return Err(format!("settings.b_tol must be positive, got {}", self.b_tol));
        }
        if !(self.hyper_tol >= 0.0 && self.hyper_tol.is_finite()) {
            return Err(format!("settings.hyper_tol must be a number of nats >= 0, got {}", self.hyper_tol));
        }
        if !(self.gamma_w > 0.0 && self.gamma_w.is_finite()) {
            return Err(format!("settings.gamma_w must be positive, got {}", self.gamma_w));
        }
        if !(self.gamma_a > 0.0 && self.gamma_a.is_finite()) {
            return Err(format!("settings.gamma_a must be positive, got {}", self.gamma_a));
        }
        if self.extra_classes > 10 {
            return Err(format!("settings.extra_classes must be at most 10, got {}", self.extra_classes));
        }
        if let Some(v) = self.prior_variance {
            if !(v > 0.0 && v.is_finite()) {
                return Err(format!("settings.prior_variance must be positive, got {v}"));
            }
        }
        if !["m1", "m2", "m3", "m4", "m5"].contains(&self.kc_model.as_str()) {
            return Err(format!("settings.kc_model must be one of m1..m5, got {}", self.kc_model));
        }
        if self.predictive != "eq25" && self.predictive != "eq24" {
            return Err(format!("settings.predictive must be eq25 or eq24, got {}", self.predictive));
        }
        Ok(Klmnl { params: self })
    }
}

/// The checked method.
#[derive(Clone, Debug)]
pub struct Klmnl {
    pub params: KlmnlParams,
}
