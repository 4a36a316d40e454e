//! Likelihoods of one latent value u and their EP/ADF moments under a Gaussian cavity
//! N(u | m, v): the binary probit with an intercept, P(y | u) = Phi(y (u + bias)), y = +-1,
//! and Gaussian noise, N(y | u, s2). What a univariate site update needs is
//!     log Z = log E[t(u)],  alpha = d log Z / dm,  nu = -d^2 log Z / dm^2
//! (Seeger, Lawrence & Herbrich, App. B.1): the tilted distribution has mean m + v alpha and
//! variance v (1 - v nu), and the Gaussian site matching it has precision nu / (1 - v nu).
//! Both likelihoods are log-concave, so 0 <= v nu < 1 and the site precision is never negative.
//!
//! The probit moments come from the stable log Phi derivatives of `special` (Mills-ratio
//! continued fraction in the lower tail), so nothing cancels far on the wrong side of the
//! decision boundary; Z itself is never formed.
use crate::special::{d_log_normal_cdf, log_normal_cdf, neg_d2_log_normal_cdf, LN_SQRT_2PI};

/// log Z, alpha and nu of one tilted distribution t(u) N(u | m, v).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CavityMoments {
    pub log_z: f64,
    pub alpha: f64,
    pub nu: f64,
}

impl CavityMoments {
    /// Binary probit Phi(y (u + bias)), y = +1 or -1, under the cavity N(m, v):
    /// Z = Phi(z), z = y (m + bias) / sqrt(1 + v), alpha = y r(z) / sqrt(1 + v) and
    /// nu = r(z) (r(z) + z) / (1 + v) with r = phi / Phi; nu (1 + v) is in (0, 1).
    pub fn probit(y: f64, bias: f64, m: f64, v: f64) -> CavityMoments {
        let s2 = 1.0 + v;
        let s = s2.sqrt();
        let z = y * (m + bias) / s;
        CavityMoments { log_z: log_normal_cdf(z), alpha: y * d_log_normal_cdf(z) / s, nu: neg_d2_log_normal_cdf(z) / s2 }
    }

    /// Gaussian noise N(y | u, noise_var) under the cavity N(m, v): Z = N(y | m, v + noise_var),
    /// alpha = (y - m) / (v + noise_var), nu = 1 / (v + noise_var).
    pub fn gaussian(y: f64, noise_var: f64, m: f64, v: f64) -> CavityMoments {
        let total = v + noise_var;
        let r = y - m;
        CavityMoments { log_z: -LN_SQRT_2PI - 0.5 * total.ln() - 0.5 * r * r / total, alpha: r / total, nu: 1.0 / total }
    }

    /// Mean of the tilted distribution.
    pub fn tilted_mean(&self, m: f64, v: f64) -> f64 {
        m + v * self.alpha
    }

    /// Variance of the tilted distribution, v (1 - v nu).
    pub fn tilted_var(&self, v: f64) -> f64 {
        v * (1.0 - v * self.nu)
    }

    /// The Gaussian site exp(b u - pi u^2 / 2) whose product with the cavity N(m, v) has the
    /// tilted mean and variance: (pi, b) = (nu, m nu + alpha) / (1 - v nu). `None` when
    /// 1 - v nu is not positive (impossible for a log-concave likelihood in exact arithmetic).
    pub fn site(&self, m: f64, v: f64) -> Option<(f64, f64)> {
        let shrink = 1.0 - v * self.nu;
        (shrink > 0.0 && self.nu >= 0.0).then(|| (self.nu / shrink, (m * self.nu + self.alpha) / shrink))
    }

    /// KL[tilted || cavity] = (v alpha^2 - v nu - log(1 - v nu)) / 2 >= 0: the information gain
    /// of the ADF update (minus the score Delta of Seeger et al.'s eq. 5).
    pub fn info_gain(&self, v: f64) -> f64 {
        0.5 * (v * self.alpha * self.alpha - v * self.nu - (-v * self.nu).ln_1p())
    }

    /// Entropy reduction H[cavity] - H[tilted] = -log(1 - v nu) / 2 >= 0 (Lawrence et al. 2003's
    /// differential-entropy score: how much the variance of u shrinks).
    pub fn entropy_drop(&self, v: f64) -> f64 {
        -0.5 * (-v * self.nu).ln_1p()
    }
}
