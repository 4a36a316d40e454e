//! The linear kernel k(x, x') = s2 x . x' (a Bayesian linear model on the inputs).
use super::{frobenius_dot, view, InputGrads, Kernel};
use faer::linalg::matmul::matmul;
use faer::Accum;
use faer::Mat;
use ndarray::Array2;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Linear {
    pub log_variance: f64,
    pub learn_variance: bool,
}

impl Kernel for Linear {
    fn kind(&self) -> &'static str {
        "linear"
    }
    fn log_params(&self) -> Vec<f64> {
        vec![self.log_variance]
    }
    fn with_log_params(&self, p: &[f64]) -> Box<dyn Kernel> {
        assert_eq!(p.len(), 1, "linear kernel parameter vector length");
        Box::new(Linear { log_variance: p[0], ..self.clone() })
    }
    fn free_mask(&self) -> Vec<bool> {
        vec![self.learn_variance]
    }
    fn param_names(&self) -> Vec<String> {
        vec!["variance".into()]
    }
    fn cross(&self, x1: &Array2<f64>, x2: &Array2<f64>) -> Mat<f64> {
        assert_eq!(x1.ncols(), x2.ncols(), "kernel inputs of different dimension");
        let s2 = self.log_variance.exp();
        Mat::from_fn(x1.nrows(), x2.nrows(), |i, j| s2 * x1.row(i).dot(&x2.row(j)))
    }
    fn gram(&self, x: &Array2<f64>) -> Mat<f64> {
        let mut k = self.cross(x, x);
        super::symmetrise_from_lower(&mut k);
        k
    }
    fn diag(&self, x: &Array2<f64>) -> Vec<f64> {
        let s2 = self.log_variance.exp();
        x.rows().into_iter().map(|r| s2 * r.dot(&r)).collect()
    }
    fn gram_grads(&self, _x: &Array2<f64>, k: &Mat<f64>) -> Vec<Mat<f64>> {
        vec![k.clone()] // K is linear in s2: dK/dlog s2 = K
    }
    fn clone_box(&self) -> Box<dyn Kernel> {
        Box::new(self.clone())
    }
    fn cross_vjp(&self, _z: &Array2<f64>, x: &Array2<f64>, k: &Mat<f64>, kbar: &Mat<f64>) -> InputGrads {
        // K = s2 Z X^T: dlog s2 -> sum kbar o K; dZ = s2 kbar X.
        let mut gz = Mat::zeros(kbar.nrows(), x.ncols());
        matmul(gz.as_mut(), Accum::Replace, kbar.as_ref(), view(x), self.log_variance.exp(), crate::linalg::gemm_par());
        InputGrads { params: vec![frobenius_dot(kbar, k)], z: Array2::from_shape_fn((gz.nrows(), gz.ncols()), |(i, j)| gz[(i, j)]) }
    }
    fn gram_vjp(&self, z: &Array2<f64>, k: &Mat<f64>, kbar: &Mat<f64>) -> InputGrads {
        let mut g = self.cross_vjp(z, z, k, kbar);
        g.z *= 2.0; // Z in both arguments, kbar symmetric
        g
    }
    fn diag_vjp(&self, x: &Array2<f64>, dbar: &[f64]) -> Vec<f64> {
        vec![self.diag(x).iter().zip(dbar).map(|(k, d)| k * d).sum()]
    }
}
