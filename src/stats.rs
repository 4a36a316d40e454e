//! Monte Carlo statistics shared by the samplers: the integrated autocorrelation time of a chain
//! and the log-mean-exp estimator with its delta-method standard error.
use crate::linalg::log_sum_exp;

/// Geyer's initial-positive-sequence estimate of the integrated autocorrelation time.
pub fn integrated_autocorr_time(x: &[f64]) -> Option<f64> {
    let n = x.len();
    if n < 10 {
        return None;
    }
    let mean = x.iter().sum::<f64>() / n as f64;
    let c0 = x.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n as f64;
    if !(c0 > 0.0) {
        return None;
    }
    let rho = |lag: usize| (0..n - lag).map(|i| (x[i] - mean) * (x[i + lag] - mean)).sum::<f64>() / (n as f64 * c0);
    let mut tau = -1.0;
    let mut lag = 0;
    while lag + 1 < n / 2 {
        let pair = rho(lag) + rho(lag + 1);
        if pair <= 0.0 {
            break;
        }
        tau += 2.0 * pair;
        lag += 2;
    }
    Some(tau.max(1.0))
}

/// log p-hat(t | X) = log mean_s exp(l_s) from prior draws, with its delta-method standard
/// error and the effective sample size of the weights exp(l_s).
#[derive(Clone, Debug)]
pub struct EvidenceEstimate {
    pub log_evidence: f64,
    pub std_err: f64,
    pub ess: f64,
}

impl EvidenceEstimate {
    pub fn from_log_weights(l: &[f64]) -> Self {
        let S = l.len() as f64;
        let lse = log_sum_exp(l);
        let l2: Vec<f64> = l.iter().map(|v| 2.0 * v).collect();
        let lse2 = log_sum_exp(&l2);
        // Var(w)/mean(w)^2 = S sum w^2 / (sum w)^2 - 1 ; se(log p-hat) = sqrt(that / S).
        let ratio = (lse2 - 2.0 * lse + S.ln()).exp();
        let std_err = ((ratio - 1.0).max(0.0) / S).sqrt();
        EvidenceEstimate { log_evidence: lse - S.ln(), std_err, ess: (2.0 * lse - lse2).exp() }
    }
}
