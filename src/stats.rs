//! Monte Carlo statistics shared by the samplers: the integrated autocorrelation time of a chain
//! and the log-mean-exp estimator with its delta-method standard error.
use crate::linalg::log_sum_exp;

/// Geyer's initial-positive-sequence estimate of the integrated autocorrelation time, floored at
/// 1 (a negatively correlated chain, whose tau is below 1, is reported as an independent one).
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
/// error (from the weights' sample variance, divisor S - 1) and the effective sample size of the
/// weights exp(l_s). When every weight is 0 (all l_s = -inf) the estimate is -inf with an
/// infinite standard error and no effective sample. A NaN or +inf log weight gives NaN for all
/// three (no estimate), never a finite standard error beside a meaningless mean.
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
        if l.iter().any(|v| v.is_nan() || *v == f64::INFINITY) {
            // (ratio would be NaN, and f64::max(NaN, 0) is 0: a standard error of 0.)
            return EvidenceEstimate { log_evidence: f64::NAN, std_err: f64::NAN, ess: f64::NAN };
        }
        if lse == f64::NEG_INFINITY {
            return EvidenceEstimate { log_evidence: f64::NEG_INFINITY, std_err: f64::INFINITY, ess: 0.0 };
        }
        let l2: Vec<f64> = l.iter().map(|v| 2.0 * v).collect();
        let lse2 = log_sum_exp(&l2);
        // ratio = S sum w^2 / (sum w)^2, so the sample variance over the squared mean is
        // (ratio - 1) S / (S - 1) and se(log p-hat) = sd(w) / (sqrt(S) mean(w)) = sqrt((ratio - 1) / (S - 1)).
        let ratio = (lse2 - 2.0 * lse + S.ln()).exp();
        let std_err = ((ratio - 1.0).max(0.0) / (S - 1.0).max(1.0)).sqrt();
        EvidenceEstimate { log_evidence: lse - S.ln(), std_err, ess: (2.0 * lse - lse2).exp() }
    }
}

#[cfg(test)]
mod tests {
    use rand::{RngExt, SeedableRng};
    use rand_distr::StandardNormal;

    #[test]
    fn the_autocorrelation_time_of_an_ar1_chain_is_1_plus_phi_over_1_minus_phi() {
        // x_t = phi x_{t-1} + e_t has rho(k) = phi^k, so tau = 1 + 2 sum_k phi^k = (1 + phi) / (1 - phi).
        // On 2e5 steps Geyer's estimate has a relative sd of about sqrt(4 M / n) for a window of
        // M lags (under 3% here); 10% separates it from a wrong sum (1 + sum: 5 instead of 9 at 0.8).
        let mut rng = rand_pcg::Pcg64::seed_from_u64(31);
        for phi in [0.0, 0.5, 0.8] {
            let mut x = vec![0.0; 200_000];
            for t in 1..x.len() {
                x[t] = phi * x[t - 1] + rng.sample::<f64, _>(StandardNormal);
            }
            let tau = super::integrated_autocorr_time(&x).expect("a long chain");
            let want = (1.0f64 + phi) / (1.0 - phi);
            assert!((tau - want).abs() < 0.1 * want, "phi {phi}: tau {tau} vs {want}");
        }
    }
}
