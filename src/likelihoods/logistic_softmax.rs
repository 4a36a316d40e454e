//! The logistic-softmax likelihood of Galy-Fajou et al. (2018), eq. 1:
//! p(y = k | f) = sigma(f_k) / sum_c sigma(f_c) = softmax(log sigma(f)),
//! and the identities of its three augmentations (Gamma, Poisson, Polya-Gamma), which make
//! every complete conditional conjugate. Unlike the softmax it is not shift-invariant.
use super::Likelihood;
use crate::linalg::{log_sum_exp, softmax_in_place};

#[derive(Clone, Copy, Debug, Default)]
pub struct LogisticSoftmax;

/// log sigma(x), stable for large |x|.
pub fn log_sigmoid(x: f64) -> f64 {
    if x >= 0.0 {
        -(-x).exp().ln_1p()
    } else {
        x - x.exp().ln_1p()
    }
}

impl Likelihood for LogisticSoftmax {
    fn log_prob(&self, f: &[f64], y: usize) -> f64 {
        let ls: Vec<f64> = f.iter().map(|&v| log_sigmoid(v)).collect();
        ls[y] - log_sum_exp(&ls)
    }

    fn probs(&self, f: &[f64]) -> Vec<f64> {
        let mut p: Vec<f64> = f.iter().map(|&v| log_sigmoid(v)).collect();
        softmax_in_place(&mut p);
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::likelihoods::polya_gamma::log_cosh;

    fn sigma(x: f64) -> f64 {
        1.0 / (1.0 + (-x).exp())
    }

    /// U1: the three augmentation identities, numerically.
    #[test]
    fn the_augmentations_recover_the_likelihood() {
        let f = [1.0, -0.5, 0.3, 2.2];
        // Gamma: int_0^inf e^{-lambda z} d lambda = 1/z, by the trapezoid rule on [0, 60/z].
        for z in [0.3, 1.0, 2.7] {
            let (h, steps) = (60.0 / z / 200_000.0, 200_000);
            let integral: f64 =
                (0..=steps).map(|i| if i == 0 || i == steps { 0.5 } else { 1.0 } * (-(i as f64 * h) * z).exp()).sum::<f64>() * h;
            // Trapezoid error ~ h^2 z / 12 relative, and e^{-60} from the cut.
            assert!((integral * z - 1.0).abs() < 1e-7, "{integral} vs {}", 1.0 / z);
        }
        // Poisson: sum_{n >= 0} sigma(-f)^n Po(n | lambda) = exp(-lambda sigma(f)), n up to 200.
        for lambda in [0.1f64, 2.0, 15.0] {
            for &fc in &f {
                let (mut term, mut sum) = ((-lambda).exp(), 0.0);
                for n in 0..200 {
                    sum += term * sigma(-fc).powi(n);
                    term *= lambda / (n + 1) as f64;
                }
                assert!((sum - (-lambda * sigma(fc)).exp()).abs() < 1e-14, "lambda {lambda}, f {fc}");
            }
        }
        // Polya-Gamma: 2^{-n} e^{n z / 2} cosh^{-n}(z / 2) = sigma(z)^n.
        for n in 0..6 {
            for &z in &f {
                let lhs = (-(n as f64) * std::f64::consts::LN_2 + 0.5 * n as f64 * z - n as f64 * log_cosh(0.5 * z)).exp();
                assert!((lhs - sigma(z).powi(n)).abs() < 1e-14);
            }
        }
        // Eq. 1 and its two forms.
        let p = LogisticSoftmax.probs(&f);
        let s: f64 = f.iter().map(|&v| sigma(v)).sum();
        for k in 0..f.len() {
            assert!((p[k] - sigma(f[k]) / s).abs() < 1e-15);
            assert!((LogisticSoftmax.log_prob(&f, k) - (sigma(f[k]) / s).ln()).abs() < 1e-14);
        }
        assert!((log_sigmoid(-800.0) + 800.0).abs() < 1e-12 && log_sigmoid(800.0) == 0.0);
    }
}
