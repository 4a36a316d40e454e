//! The closed-form local step of one data point (notes §4.2, eqs. 5, 6*, 7, 8*, 9*): given its
//! marginals q(f_i^c) = N(m_c, v_c), the Polya-Gamma tilts b_c = d = sqrt(E f^2), the
//! alternating fixed point of q(n_i^c) = Po(gamma_c) and q(lambda_i) = Ga(alpha, C), and the PG
//! expectations theta_c = gamma_c tanh(b_c/2) / (2 b_c), theta~ = tanh(b_y/2) / (2 b_y).
use super::PoissonRate;
use crate::likelihoods::polya_gamma::{log_cosh, pg_kl, pg_mean};
use statrs::function::gamma::{digamma, ln_gamma};

/// Local variational parameters of one point.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Local {
    /// Shape of q(lambda) = Ga(alpha, beta); beta = C (eq. 7).
    pub alpha: f64,
    /// Rates of q(n^c) = Po(gamma_c).
    pub gamma: Vec<f64>,
    /// PG tilts b_c (= d for the observed class): sqrt(E[f_c^2]) at the q(f) they were set from.
    pub tilt: Vec<f64>,
    /// E[omega^c] = gamma_c E[PG(1, b_c)].
    pub theta: Vec<f64>,
    /// E[omega~] = E[PG(1, b_y)].
    pub theta_tilde: f64,
}

impl Local {
    /// The precision weight of class c in the global update: y'_c theta~ + theta_c.
    pub fn weight(&self, c: usize, y: usize) -> f64 {
        self.theta[c] + if c == y { self.theta_tilde } else { 0.0 }
    }

    /// The mean weight of class c in the global update: y'_c - gamma_c.
    pub fn resid(&self, c: usize, y: usize) -> f64 {
        f64::from(u8::from(c == y)) - self.gamma[c]
    }
}

/// E[log lambda] under q(lambda) = Ga(alpha, beta) (shape, rate): psi(alpha) - log beta.
pub(crate) fn gamma_mean_log(alpha: f64, beta: f64) -> f64 {
    digamma(alpha) - beta.ln()
}

/// E[lambda] under q(lambda) = Ga(alpha, beta): alpha / beta.
pub(crate) fn gamma_mean(alpha: f64, beta: f64) -> f64 {
    alpha / beta
}

/// E_{q(lambda)} KL(Po(gamma) || Po(lambda)) from E[log lambda] and E[lambda]: the KL at one
/// lambda, gamma log(gamma / lambda) - gamma + lambda, is linear in log lambda and lambda, so
/// its mean is gamma log gamma - gamma - gamma E[log lambda] + E[lambda]; 0 log 0 = 0.
pub(crate) fn expected_poisson_kl(gamma: f64, mean_log_lambda: f64, mean_lambda: f64) -> f64 {
    let glng = if gamma > 0.0 { gamma * gamma.ln() } else { 0.0 };
    glng - gamma - gamma * mean_log_lambda + mean_lambda
}

/// log gamma_c given alpha (beta = C). Corrected (6*): psi(alpha) - log beta - log 2 - m/2 -
/// log cosh(b/2), from E[log lambda]. Printed (6): log beta - log 2 - lnGamma(alpha) - alpha -
/// (1 - alpha) psi(alpha) - m/2 - log cosh(b/2), i.e. exp(-entropy of q(lambda)) in place of
/// exp(E[log lambda]); in log space, so Gamma(alpha) never overflows (the paper's Stirling
/// remark becomes moot).
fn log_gamma_rate(rule: PoissonRate, alpha: f64, beta: f64, m: f64, b: f64) -> f64 {
    let common = -std::f64::consts::LN_2 - 0.5 * m - log_cosh(0.5 * b);
    match rule {
        PoissonRate::Corrected => gamma_mean_log(alpha, beta) + common,
        PoissonRate::Printed => beta.ln() - ln_gamma(alpha) - alpha - (1.0 - alpha) * digamma(alpha) + common,
    }
}

/// The local step of one point with class `y`, from a warm start `alpha0`: up to `iters`
/// rounds of (gamma from alpha, alpha = 1 + sum gamma), stopping early once alpha moves less
/// than `tol` (relative). Each round is a coordinate ascent of the ELBO under the corrected
/// rate (a contraction, rate about sum_c sigma(-m_c) / C < 1), so any round count is safe.
pub(crate) fn update(m: &[f64], v: &[f64], y: usize, alpha0: f64, rule: PoissonRate, iters: usize, tol: f64) -> Local {
    let c = m.len();
    let beta = c as f64;
    let tilt: Vec<f64> = m.iter().zip(v).map(|(m, v)| (v + m * m).sqrt()).collect();
    let mut alpha = alpha0;
    let mut gamma = vec![0.0; c];
    for _ in 0..iters.max(1) {
        for k in 0..c {
            gamma[k] = log_gamma_rate(rule, alpha, beta, m[k], tilt[k]).exp();
        }
        let next = 1.0 + gamma.iter().sum::<f64>();
        let moved = (next - alpha).abs();
        alpha = next;
        if moved <= tol * alpha {
            break;
        }
    }
    let theta = (0..c).map(|k| pg_mean(gamma[k], tilt[k])).collect();
    let theta_tilde = pg_mean(1.0, tilt[y]);
    Local { alpha, gamma, tilt, theta, theta_tilde }
}

/// The ELBO's contribution of one point (notes §6, the full expression), at marginals
/// (m_c, v_c) and local parameters `l` whose PG tilts need not match these marginals (after a
/// global step they are the previous q's). With tilts at sqrt(v + m^2) and the corrected rate
/// at its fixed point this equals the closed form of simplification 2 (tested).
pub(crate) fn bound(m: &[f64], v: &[f64], y: usize, l: &Local) -> f64 {
    let c = m.len();
    let beta = c as f64;
    let ln2 = std::f64::consts::LN_2;
    let (psi, alpha) = (digamma(l.alpha), l.alpha);
    let (mean_log_lambda, mean_lambda) = (gamma_mean_log(alpha, beta), gamma_mean(alpha, beta));
    let mut total = -ln2;
    for k in 0..c {
        let s2 = v[k] + m[k] * m[k];
        let g = l.gamma[k];
        // E_q[log p(y | f, n, omega, omega~)].
        if k == y {
            total += 0.5 * m[k] - 0.5 * l.theta_tilde * s2;
        }
        total += -g * ln2 - 0.5 * g * m[k] - 0.5 * l.theta[k] * s2;
        // E_{q(lambda)} KL(Po(gamma) || Po(lambda)).
        total -= expected_poisson_kl(g, mean_log_lambda, mean_lambda);
        // E_{q(n)} KL(PG(n, b) || PG(n, 0)) = gamma log cosh(b/2) - b^2/2 theta: linear in n,
        // so the KL at n = gamma (theta = E[PG(gamma, b)], as `update` sets it).
        total -= pg_kl(g, l.tilt[k]);
    }
    // KL(PG(1, d) || PG(1, 0)) of the observed class's omega~.
    total -= pg_kl(1.0, l.tilt[y]);
    // Entropy of Ga(alpha, beta) (the prior on lambda is the improper flat one).
    total + alpha - beta.ln() + ln_gamma(alpha) + (1.0 - alpha) * psi
}

/// Simplification 2 of notes §6: the bound at the joint local fixed point of the corrected rate.
#[cfg(test)]
pub(crate) fn bound_at_fixed_point(m: &[f64], v: &[f64], y: usize, alpha: f64) -> f64 {
    let c = m.len() as f64;
    let fy = (v[y] + m[y] * m[y]).sqrt();
    -std::f64::consts::LN_2 + 0.5 * m[y] - log_cosh(0.5 * fy) - 1.0 + alpha - c.ln() + ln_gamma(alpha) + (1.0 - alpha) * digamma(alpha)
}
