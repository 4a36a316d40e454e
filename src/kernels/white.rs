//! White noise on the latent function: k(x, x') = s2 when x and x' are the same data point.
//! It adds s2 I to K(X, X) and s2 to each k(x*, x*), but nothing to a cross-covariance
//! between two sets of points (two distinct sets never share a point, as in GPflow's White).
//! Villacampa-Calvo & Hernandez-Lobato add such a term to each class's latent process.
use super::{InputGrads, Kernel};
use faer::Mat;
use ndarray::Array2;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct White {
    pub log_variance: f64,
    pub learn_variance: bool,
}

impl Kernel for White {
    fn kind(&self) -> &'static str {
        "white"
    }
    fn log_params(&self) -> Vec<f64> {
        vec![self.log_variance]
    }
    fn with_log_params(&self, p: &[f64]) -> Box<dyn Kernel> {
        assert_eq!(p.len(), 1, "white kernel parameter vector length");
        Box::new(White { log_variance: p[0], ..self.clone() })
    }
    fn free_mask(&self) -> Vec<bool> {
        vec![self.learn_variance]
    }
    fn param_names(&self) -> Vec<String> {
        vec!["variance".into()]
    }
    fn cross(&self, x1: &Array2<f64>, x2: &Array2<f64>) -> Mat<f64> {
        assert_eq!(x1.ncols(), x2.ncols(), "kernel inputs of different dimension");
        Mat::zeros(x1.nrows(), x2.nrows())
    }
    fn gram(&self, x: &Array2<f64>) -> Mat<f64> {
        let s2 = self.log_variance.exp();
        Mat::from_fn(x.nrows(), x.nrows(), |i, j| if i == j { s2 } else { 0.0 })
    }
    fn diag(&self, x: &Array2<f64>) -> Vec<f64> {
        vec![self.log_variance.exp(); x.nrows()]
    }
    fn gram_grads(&self, _x: &Array2<f64>, k: &Mat<f64>) -> Vec<Mat<f64>> {
        vec![k.clone()]
    }
    fn clone_box(&self) -> Box<dyn Kernel> {
        Box::new(self.clone())
    }
    fn cross_is_zero(&self) -> bool {
        true
    }
    fn cross_vjp(&self, z: &Array2<f64>, _x: &Array2<f64>, _k: &Mat<f64>, _kbar: &Mat<f64>) -> InputGrads {
        InputGrads::zeros(1, z.dim()) // no cross-covariance between two sets of points
    }
    fn gram_vjp(&self, z: &Array2<f64>, _k: &Mat<f64>, kbar: &Mat<f64>) -> InputGrads {
        let s2 = self.log_variance.exp();
        InputGrads { params: vec![s2 * (0..z.nrows()).map(|i| kbar[(i, i)]).sum::<f64>()], z: Array2::zeros(z.dim()) }
    }
    fn diag_vjp(&self, _x: &Array2<f64>, dbar: &[f64]) -> Vec<f64> {
        vec![self.log_variance.exp() * dbar.iter().sum::<f64>()]
    }
}
