//! A fitted sparse arg-max-likelihood model (EP, SEP and GFITC of Villacampa-Calvo &
//! Hernandez-Lobato 2017 all end in one): per class c inducing inputs Z, the factor of
//! K = K(Z, Z), and q(u) = N(K beta, K A^{-1} K) given by the factor of A and beta. The
//! predictive (eqs. 65-68): m*_c = k*^T beta_c, v*_c = kappa* - k*^T K^{-1} k* + k*^T A^{-1} k*, and
//! p(y* = c) = P(f_c is the largest) for independent N(m*_j, v*_j), a one-dimensional integral
//! by the adapted rule of `likelihoods::probit` (accurate in the tails, where the authors' fixed
//! 100-point grid is not).
use crate::kernels::KernelSet;
use crate::likelihoods::probit::log_argmax_prob;
use crate::linalg::Chol;
use crate::methods::{Diagnostics, Evidence, FitError, Fitted, Prediction};
use crate::results::EvidenceKind;
use ndarray::{s, Array2};
use rand_pcg::Pcg64;
use rayon::prelude::*;

const BLOCK_ROWS: usize = 2000;

/// Class c's part of the model.
#[derive(Clone, Debug)]
pub struct ArgmaxClass {
    pub z: Array2<f64>,
    /// Factor of K(Z, Z) (plus its jitter).
    pub k_chol: Chol,
    /// Factor of A.
    pub a_chol: Chol,
    /// K^{-1} times the mean of q(u).
    pub beta: Vec<f64>,
}

#[derive(Clone)]
pub struct ArgmaxModel {
    pub kernels: KernelSet,
    pub classes: Vec<ArgmaxClass>,
    /// log Z_q of the fit.
    pub evidence: Option<f64>,
    pub diagnostics: Diagnostics,
}

impl ArgmaxModel {
    /// Latent means and variances [rows, C] at the rows of `x`.
    pub(crate) fn marginals(&self, x: &Array2<f64>) -> (Array2<f64>, Array2<f64>) {
        let (n, c) = (x.nrows(), self.classes.len());
        let per: Vec<(Vec<f64>, Vec<f64>)> = (0..c)
            .into_par_iter()
            .map(|k| {
                let class = &self.classes[k];
                let kernel = self.kernels.class(k);
                let kmn = kernel.cross_many(&class.z, x);
                let ek = class.k_chol.solve_l_par(kmn.as_ref());
                let ea = class.a_chol.solve_l_par(kmn.as_ref());
                let knn = kernel.diag(x);
                let m = class.z.nrows();
                let sq = |e: &faer::Mat<f64>, j: usize| (0..m).map(|r| e[(r, j)] * e[(r, j)]).sum::<f64>();
                let mean = (0..n).map(|j| (0..m).map(|r| kmn[(r, j)] * class.beta[r]).sum()).collect();
                // Clamped: rounding can take the FITC part a hair below zero.
                let var = (0..n).map(|j| ((knn[j] - sq(&ek, j)).max(0.0) + sq(&ea, j)).max(1e-12)).collect();
                (mean, var)
            })
            .collect();
        let mut mean = Array2::zeros((n, c));
        let mut var = Array2::zeros((n, c));
        for (k, (m, v)) in per.into_iter().enumerate() {
            mean.column_mut(k).assign(&ndarray::Array1::from(m));
            var.column_mut(k).assign(&ndarray::Array1::from(v));
        }
        (mean, var)
    }
}

impl Fitted for ArgmaxModel {
    fn predict(&self, x: &Array2<f64>, _rng: &mut Pcg64) -> Result<Prediction, FitError> {
        let c = self.classes.len();
        let mut probs = Array2::zeros((x.nrows(), c));
        for start in (0..x.nrows()).step_by(BLOCK_ROWS) {
            let end = (start + BLOCK_ROWS).min(x.nrows());
            let (mean, var) = self.marginals(&x.slice(s![start..end, ..]).to_owned());
            let rows: Vec<Vec<f64>> = (0..end - start)
                .into_par_iter()
                .map(|j| {
                    let (m, v) = (mean.row(j).to_vec(), var.row(j).to_vec());
                    let mut p: Vec<f64> = (0..c).map(|k| log_argmax_prob(&m, &v, k).exp()).collect();
                    // The exact values sum to one (the cones partition R^C): quadrature error only.
                    let total: f64 = p.iter().sum();
                    p.iter_mut().for_each(|q| *q /= total);
                    p
                })
                .collect();
            for (j, p) in rows.into_iter().enumerate() {
                probs.row_mut(start + j).assign(&ndarray::Array1::from(p));
            }
        }
        let mut prediction = Prediction::new(probs);
        prediction.jitter = self.jitter();
        Ok(prediction)
    }

    fn evidence(&self) -> Option<Evidence> {
        self.evidence.map(|v| Evidence::new(v, EvidenceKind::Approximation))
    }

    fn kernels(&self) -> KernelSet {
        self.kernels.clone()
    }

    fn inducing_inputs(&self) -> Vec<Array2<f64>> {
        self.classes.iter().map(|c| c.z.clone()).collect()
    }

    fn diagnostics(&self) -> Diagnostics {
        let mut d = self.diagnostics.clone();
        d.jitter = Some(self.jitter());
        d
    }
}

impl ArgmaxModel {
    fn jitter(&self) -> f64 {
        self.classes.iter().map(|c| c.k_chol.jitter()).fold(0.0, f64::max)
    }
}
