//! Predictive class probabilities E[g^k(f*)], g^k(f) = sigma(f_k) / sum_c sigma(f_c), under
//! independent q(f*^c) = N(mu_c, v_c) (notes §7).
//!
//! `taylor` (default): the paper's second-order expansion around mu with the corrected second
//! derivative (notes §7.3, checked against Monte Carlo):
//!     d2 g^k / d f_c^2 = -sigma_k s'_c ((1 - 2 sigma_c) S - 2 s'_c) / S^3      (c != k)
//!                      = (S - sigma_k) s'_k ((1 - 2 sigma_k) S - 2 s'_k) / S^3  (c = k),
//! s'_c = sigma_c (1 - sigma_c), S = sum sigma; the printed formula is this times S/2
//! (`taylor_printed`), the authors' 2018 code's times S (`taylor_code2018`). Each factor is
//! common to all k for a fixed c, so every variant sums to one before clamping; all clamp at
//! 1e-12 and renormalise (the expansion can go negative). `monte_carlo`: the average of g over
//! seeded draws shared by every test row. `plug_in`: g(mu).
use crate::likelihoods::logistic_softmax::LogisticSoftmax;
use crate::likelihoods::{monte_carlo_predictive, Likelihood};
use faer::Mat;
use rand_distr::{Distribution, StandardNormal};
use rand_pcg::Pcg64;
use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PredictRule {
    Taylor,
    TaylorPrinted,
    TaylorCode2018,
    MonteCarlo,
    PlugIn,
}

impl PredictRule {
    /// The rule as a spec writes it (`monte_carlo`).
    pub fn name(self) -> String {
        match serde_json::to_value(self) {
            Ok(serde_json::Value::String(s)) => s,
            _ => unreachable!("a unit variant serialises to its name"),
        }
    }
}

/// `samples` standard-normal C-vectors.
pub(crate) fn normal_draws(samples: usize, c: usize, rng: &mut Pcg64) -> Vec<Vec<f64>> {
    (0..samples).map(|_| (0..c).map(|_| StandardNormal.sample(rng)).collect()).collect()
}

fn sigmoid(x: f64) -> f64 {
    if x >= 0.0 {
        1.0 / (1.0 + (-x).exp())
    } else {
        let e = x.exp();
        e / (1.0 + e)
    }
}

/// Class probabilities at marginals (mean, var); `draws` for `monte_carlo`.
pub(crate) fn probs(rule: PredictRule, mean: &[f64], var: &[f64], draws: &[Vec<f64>]) -> Vec<f64> {
    let c = mean.len();
    match rule {
        PredictRule::PlugIn => LogisticSoftmax.probs(mean),
        PredictRule::MonteCarlo => {
            let sd = Mat::from_fn(c, c, |i, j| if i == j { var[i].max(0.0).sqrt() } else { 0.0 });
            monte_carlo_predictive(&LogisticSoftmax, mean, sd.as_ref(), draws)
        }
        PredictRule::Taylor | PredictRule::TaylorPrinted | PredictRule::TaylorCode2018 => {
            let sig: Vec<f64> = mean.iter().map(|&m| sigmoid(m)).collect();
            let s: f64 = sig.iter().sum();
            let factor = match rule {
                PredictRule::TaylorPrinted => s / 2.0,
                PredictRule::TaylorCode2018 => s,
                _ => 1.0,
            };
            let d1: Vec<f64> = sig.iter().map(|v| v * (1.0 - v)).collect();
            // ((1 - 2 sigma_c) S - 2 s'_c) / S^3, shared by every k.
            let curv: Vec<f64> = (0..c).map(|j| ((1.0 - 2.0 * sig[j]) * s - 2.0 * d1[j]) / (s * s * s)).collect();
            let mut p: Vec<f64> = (0..c)
                .map(|k| {
                    let mut e = sig[k] / s;
                    for j in 0..c {
                        let h = if j == k { (s - sig[k]) * d1[k] * curv[k] } else { -sig[k] * d1[j] * curv[j] };
                        e += 0.5 * factor * h * var[j];
                    }
                    e.max(1e-12)
                })
                .collect();
            let total: f64 = p.iter().sum();
            p.iter_mut().for_each(|v| *v /= total);
            p
        }
    }
}
