//! The squared-exponential kernel
//!     k(x, x') = s2 exp(-1/2 sum_d (x_d - x'_d)^2 / l_d^2)
//! with one shared (isotropic) or one per-dimension (ARD) length-scale and a signal
//! variance s2. Parameters live in log space: `[log s2, log l_1, ..., log l_L]`.
use super::Kernel;
use faer::Mat;
use ndarray::{Array2, ArrayView1};
use serde::{Deserialize, Serialize};

/// Squared-exponential kernel with log-space parameters
/// `[log s2, log l_1, ..., log l_L]` (L = 1 isotropic, L = d ARD).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SqExp {
    pub log_variance: f64,
    pub log_lengthscales: Vec<f64>,
    pub learn_variance: bool,
}

impl SqExp {
    pub fn is_ard(&self) -> bool {
        self.log_lengthscales.len() > 1
    }

    pub fn n_params(&self) -> usize {
        1 + self.log_lengthscales.len()
    }

    /// All log-parameters: `[log s2, log l...]`.
    pub fn log_params(&self) -> Vec<f64> {
        std::iter::once(self.log_variance).chain(self.log_lengthscales.iter().copied()).collect()
    }

    /// The same kernel with new log-parameters (same layout as `log_params`).
    pub fn with_log_params(&self, p: &[f64]) -> SqExp {
        assert_eq!(p.len(), self.n_params(), "kernel parameter vector length");
        SqExp { log_variance: p[0], log_lengthscales: p[1..].to_vec(), learn_variance: self.learn_variance }
    }

    /// Which log-parameters hyper-parameter learning may change.
    pub fn free_mask(&self) -> Vec<bool> {
        std::iter::once(self.learn_variance).chain(self.log_lengthscales.iter().map(|_| true)).collect()
    }

    /// Names, in `log_params` order: `variance`, `lengthscale` or `lengthscale_1..d`.
    pub fn param_names(&self) -> Vec<String> {
        let mut names = vec!["variance".to_string()];
        if self.is_ard() {
            names.extend((1..=self.log_lengthscales.len()).map(|i| format!("lengthscale_{i}")));
        } else {
            names.push("lengthscale".into());
        }
        names
    }

    /// (name, value in natural units) pairs.
    pub fn natural_params(&self) -> Vec<(String, f64)> {
        self.param_names().into_iter().zip(self.log_params().into_iter().map(f64::exp)).collect()
    }

    fn inv_sq_lengthscale(&self, d: usize) -> Vec<f64> {
        (0..d)
            .map(|k| {
                let l = if self.is_ard() { self.log_lengthscales[k] } else { self.log_lengthscales[0] };
                (-2.0 * l).exp()
            })
            .collect()
    }

    fn scaled_sq_dist(&self, a: ArrayView1<f64>, b: ArrayView1<f64>, w: &[f64]) -> f64 {
        a.iter().zip(b.iter()).zip(w).map(|((x, y), w)| w * (x - y) * (x - y)).sum()
    }

    /// K(X1, X2), [n1, n2].
    pub fn cross(&self, x1: &Array2<f64>, x2: &Array2<f64>) -> Mat<f64> {
        assert_eq!(x1.ncols(), x2.ncols(), "kernel inputs of different dimension");
        if !self.is_ard() {
            assert!(!self.log_lengthscales.is_empty());
        } else {
            assert_eq!(self.log_lengthscales.len(), x1.ncols(), "ARD length-scales vs input dimension");
        }
        let w = self.inv_sq_lengthscale(x1.ncols());
        let s2 = self.log_variance.exp();
        Mat::from_fn(x1.nrows(), x2.nrows(), |i, j| s2 * (-0.5 * self.scaled_sq_dist(x1.row(i), x2.row(j), &w)).exp())
    }

    /// K(X, X), [n, n], exactly symmetric.
    pub fn gram(&self, x: &Array2<f64>) -> Mat<f64> {
        let mut k = self.cross(x, x);
        super::symmetrise_from_lower(&mut k);
        k
    }

    /// k(x, x) for each row: the signal variance.
    pub fn diag(&self, x: &Array2<f64>) -> Vec<f64> {
        vec![self.log_variance.exp(); x.nrows()]
    }

    /// dK/d(log-parameter j) for every parameter, in `log_params` order, given K = gram(x).
    pub fn gram_grads(&self, x: &Array2<f64>, k: &Mat<f64>) -> Vec<Mat<f64>> {
        let n = x.nrows();
        let d = x.ncols();
        let w = self.inv_sq_lengthscale(d);
        let mut grads = vec![k.clone()]; // d/dlog s2 K = K
        if self.is_ard() {
            for dim in 0..d {
                grads.push(Mat::from_fn(n, n, |i, j| {
                    let diff = x[(i, dim)] - x[(j, dim)];
                    k[(i, j)] * diff * diff * w[dim]
                }));
            }
        } else {
            grads.push(Mat::from_fn(n, n, |i, j| k[(i, j)] * self.scaled_sq_dist(x.row(i), x.row(j), &w)));
        }
        grads
    }
}

impl Kernel for SqExp {
    fn kind(&self) -> &'static str {
        "se"
    }
    fn log_params(&self) -> Vec<f64> {
        SqExp::log_params(self)
    }
    fn with_log_params(&self, p: &[f64]) -> Box<dyn Kernel> {
        Box::new(SqExp::with_log_params(self, p))
    }
    fn free_mask(&self) -> Vec<bool> {
        SqExp::free_mask(self)
    }
    fn param_names(&self) -> Vec<String> {
        SqExp::param_names(self)
    }
    fn cross(&self, x1: &Array2<f64>, x2: &Array2<f64>) -> Mat<f64> {
        SqExp::cross(self, x1, x2)
    }
    fn gram(&self, x: &Array2<f64>) -> Mat<f64> {
        SqExp::gram(self, x)
    }
    fn diag(&self, x: &Array2<f64>) -> Vec<f64> {
        SqExp::diag(self, x)
    }
    fn gram_grads(&self, x: &Array2<f64>, k: &Mat<f64>) -> Vec<Mat<f64>> {
        SqExp::gram_grads(self, x, k)
    }
    fn clone_box(&self) -> Box<dyn Kernel> {
        Box::new(self.clone())
    }
    fn as_sqexp(&self) -> Option<&SqExp> {
        Some(self)
    }
}
