//! Covariance functions. The squared-exponential kernel
//!     k(x, x') = s2 exp(-1/2 sum_d (x_d - x'_d)^2 / l_d^2)
//! with one shared (isotropic) or one per-dimension (ARD) length-scale and a signal
//! variance s2. Parameters live in log space; gradients are w.r.t. log-parameters.
use faer::Mat;
use ndarray::{Array2, ArrayView1};
use serde::{Deserialize, Serialize};

/// The kernel as written in a spec (natural units). `lengthscale` is one number
/// (isotropic, or the starting value of every ARD length-scale) or one per feature.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KernelParams {
    /// One length-scale per input dimension (ARD) instead of one shared.
    #[serde(default)]
    pub ard: bool,
    #[serde(default = "one_lengthscale")]
    pub lengthscale: LengthScale,
    #[serde(default = "one")]
    pub variance: f64,
    /// Whether hyper-parameter learning adapts the signal variance (false: "unit variance" kernels).
    #[serde(default = "yes")]
    pub learn_variance: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum LengthScale {
    One(f64),
    PerFeature(Vec<f64>),
}

fn one() -> f64 {
    1.0
}
fn yes() -> bool {
    true
}
fn one_lengthscale() -> LengthScale {
    LengthScale::One(1.0)
}

impl Default for KernelParams {
    fn default() -> Self {
        KernelParams { ard: false, lengthscale: one_lengthscale(), variance: 1.0, learn_variance: true }
    }
}

impl KernelParams {
    /// Check the values; the error names the field.
    pub fn validate(&self) -> Result<(), String> {
        if !(self.variance.is_finite() && self.variance > 0.0) {
            return Err(format!("kernel.variance must be a positive number, got {}", self.variance));
        }
        let ls: Vec<f64> = match &self.lengthscale {
            LengthScale::One(l) => vec![*l],
            LengthScale::PerFeature(v) => {
                if !self.ard {
                    return Err("kernel.lengthscale is a list but kernel.ard is false".into());
                }
                v.clone()
            }
        };
        if let Some(l) = ls.iter().find(|l| !(l.is_finite() && **l > 0.0)) {
            return Err(format!("kernel.lengthscale must be positive, got {l}"));
        }
        Ok(())
    }

    /// The kernel for `d`-dimensional inputs.
    pub fn build(&self, d: usize) -> Result<SqExp, String> {
        self.validate()?;
        let log_lengthscales = match (&self.lengthscale, self.ard) {
            (LengthScale::One(l), false) => vec![l.ln()],
            (LengthScale::One(l), true) => vec![l.ln(); d],
            (LengthScale::PerFeature(v), _) if v.len() == d => v.iter().map(|l| l.ln()).collect(),
            (LengthScale::PerFeature(v), _) => {
                return Err(format!("kernel.lengthscale has {} entries but the data have {d} features", v.len()))
            }
        };
        Ok(SqExp { log_variance: self.variance.ln(), log_lengthscales, learn_variance: self.learn_variance })
    }
}

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
        let n = x.nrows();
        let mut k = self.cross(x, x);
        for i in 0..n {
            for j in 0..i {
                k[(j, i)] = k[(i, j)];
            }
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::array;

    fn naive_sqexp(s2: f64, ls: &[f64], a: &[f64], b: &[f64]) -> f64 {
        let mut r = 0.0;
        for k in 0..a.len() {
            let l = if ls.len() == 1 { ls[0] } else { ls[k] };
            r += (a[k] - b[k]).powi(2) / (l * l);
        }
        s2 * (-0.5 * r).exp()
    }

    #[test]
    fn gram_matches_naive_formula() {
        let x = array![[0.0, 1.0], [0.5, -0.3], [2.0, 0.1]];
        let kern = KernelParams { ard: true, lengthscale: LengthScale::PerFeature(vec![0.7, 1.9]), variance: 2.5, learn_variance: true }
            .build(2)
            .unwrap();
        let k = kern.gram(&x);
        for i in 0..3 {
            for j in 0..3 {
                let want = naive_sqexp(2.5, &[0.7, 1.9], x.row(i).as_slice().unwrap(), x.row(j).as_slice().unwrap());
                assert!((k[(i, j)] - want).abs() < 1e-14);
            }
        }
    }

    #[test]
    fn gradients_match_central_differences() {
        let x = array![[0.0, 1.0, 0.2], [0.5, -0.3, 1.1], [2.0, 0.1, -0.4], [-1.0, 0.4, 0.0]];
        for ard in [false, true] {
            let kern = KernelParams { ard, lengthscale: LengthScale::One(1.3), variance: 0.8, learn_variance: true }.build(3).unwrap();
            let p0 = kern.log_params();
            let k = kern.gram(&x);
            let grads = kern.gram_grads(&x, &k);
            assert_eq!(grads.len(), kern.n_params());
            for j in 0..p0.len() {
                let h = 1e-6;
                let mut pp = p0.clone();
                pp[j] += h;
                let mut pm = p0.clone();
                pm[j] -= h;
                let fd = (&kern.with_log_params(&pp).gram(&x) - &kern.with_log_params(&pm).gram(&x)) * faer::Scale(1.0 / (2.0 * h));
                assert!((&fd - &grads[j]).norm_max() < 1e-8, "ard={ard} param {j}");
            }
        }
    }

    #[test]
    fn bad_kernel_params_are_named() {
        let p = KernelParams { variance: -1.0, ..Default::default() };
        assert!(p.validate().unwrap_err().contains("kernel.variance"));
        let p = KernelParams { ard: true, lengthscale: LengthScale::PerFeature(vec![1.0, 2.0]), ..Default::default() };
        assert!(p.build(3).unwrap_err().contains("3 features"));
    }
}
