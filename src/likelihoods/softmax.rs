//! The multinomial-logit (softmax) likelihood p(y = c | f) = exp(f_c) / sum_k exp(f_k).
use super::Likelihood;
use crate::linalg::{exp_shifted_rows, log_sum_exp, softmax_in_place};

#[derive(Clone, Copy, Debug, Default)]
pub struct Softmax;

impl Likelihood for Softmax {
    fn log_prob(&self, f: &[f64], y: usize) -> f64 {
        f[y] - log_sum_exp(f)
    }

    fn probs(&self, f: &[f64]) -> Vec<f64> {
        let mut p = f.to_vec();
        softmax_in_place(&mut p);
        p
    }
}

impl Softmax {
    /// Gradient of log p(y | f) in f: onehot(y) - pi.
    pub fn grad(&self, f: &[f64], y: usize) -> Vec<f64> {
        let mut g: Vec<f64> = self.probs(f).iter().map(|p| -p).collect();
        g[y] += 1.0;
        g
    }

    /// Negative Hessian of log p(y | f) in f: W = diag(pi) - pi pi^T (independent of y).
    pub fn neg_hessian(&self, f: &[f64]) -> Vec<Vec<f64>> {
        let p = self.probs(f);
        (0..p.len()).map(|i| (0..p.len()).map(|j| if i == j { p[i] - p[i] * p[j] } else { -p[i] * p[j] }).collect()).collect()
    }
}

/// Softmax of every row of a row-major matrix with `c` columns, in place, with one vectorised
/// exp for all rows.
pub fn softmax_rows(x: &mut [f64], c: usize) {
    exp_shifted_rows(x, c);
    for row in x.chunks_exact_mut(c) {
        let sum: f64 = row.iter().sum();
        for v in row.iter_mut() {
            *v /= sum;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grad_and_hessian_match_finite_differences() {
        let f = [0.3, -1.2, 2.0, 0.1];
        let y = 2;
        let lik = Softmax;
        let h = 1e-5;
        let g = lik.grad(&f, y);
        let w = lik.neg_hessian(&f);
        for k in 0..4 {
            let mut fp = f;
            fp[k] += h;
            let mut fm = f;
            fm[k] -= h;
            let fd = (lik.log_prob(&fp, y) - lik.log_prob(&fm, y)) / (2.0 * h);
            assert!((fd - g[k]).abs() < 1e-8);
            let gp = lik.grad(&fp, y);
            let gm = lik.grad(&fm, y);
            for j in 0..4 {
                let fd2 = -(gp[j] - gm[j]) / (2.0 * h);
                assert!((fd2 - w[j][k]).abs() < 1e-8);
            }
        }
    }

    #[test]
    fn two_class_softmax_is_the_logistic_function() {
        // With f = (a, 0), p(y = 0) = 1 / (1 + exp(-a)).
        for a in [-30.0, -1.0, 0.0, 2.5, 40.0] {
            let p = Softmax.probs(&[a, 0.0]);
            assert!((p[0] - 1.0 / (1.0 + f64::exp(-a))).abs() < 1e-15);
        }
    }
}
