//! The fitted multinomial-logit Laplace model: the latent predictive (GPML Alg. 3.4) and the
//! class probabilities by Monte Carlo over it.
use super::newton::Mode;
use crate::kernels::{Kernel, KernelSet};
use crate::likelihoods::{Likelihood, Softmax};
use crate::linalg::Chol;
use crate::methods::AlsoPredict;
use crate::methods::{Diagnostics, Evidence, FitError, Fitted, Prediction};
use crate::results::EvidenceKind;
use faer::Mat;
use ndarray::Array2;
use rand::RngExt;
use rand_distr::StandardNormal;
use rand_pcg::Pcg64;
use std::collections::BTreeMap;

/// A fitted Laplace model.
pub struct LaplaceModel {
    pub(super) kernel: Box<dyn Kernel>,
    pub(super) x_train: Array2<f64>,
    pub(super) mode: Mode,
    pub(super) mc_samples: usize,
    /// Rules scored beside the Monte Carlo predictive (the final model's only).
    pub(super) also_predict: Vec<AlsoPredict>,
    pub(super) diagnostics: Diagnostics,
}

impl LaplaceModel {
    /// Predictive latent means [m, C] and covariances (m of [C, C]) at test inputs (GPML Alg. 3.4 / eq. 3.43).
    pub fn latent_predictive(&self, x: &Array2<f64>) -> (Vec<Vec<f64>>, Vec<Mat<f64>>) {
        let (n, C) = (self.mode.n, self.mode.n_classes);
        let m = x.nrows();
        let Ks = self.kernel.cross(&self.x_train, x); // [n, m]
        let kss = self.kernel.diag(x);
        let EK: Vec<Mat<f64>> = self.mode.E.iter().map(|e| e * &Ks).collect();
        let HM: Vec<Mat<f64>> = EK.iter().map(|ek| self.mode.M.solve_l(ek.as_ref())).collect();
        let mut means = Vec::with_capacity(m);
        let mut covs = Vec::with_capacity(m);
        for j in 0..m {
            // mu_c = k*^T (y_c - pi_c) = k*^T a_c at the mode.
            means.push((0..C).map(|c| (0..n).map(|i| Ks[(i, j)] * self.mode.a[c * n + i]).sum()).collect());
            let mut S = Mat::<f64>::zeros(C, C);
            for c in 0..C {
                for d in 0..=c {
                    let mut v: f64 = (0..n).map(|r| HM[c][(r, j)] * HM[d][(r, j)]).sum();
                    if c == d {
                        v += kss[j] - (0..n).map(|i| Ks[(i, j)] * EK[c][(i, j)]).sum::<f64>();
                    }
                    S[(c, d)] = v;
                    S[(d, c)] = v;
                }
            }
            covs.push(S);
        }
        (means, covs)
    }

    /// The posterior mode f-hat, class-major [C n].
    pub fn mode(&self) -> &[f64] {
        &self.mode.f
    }

    /// Psi(f-hat): the unnormalised log posterior at the mode.
    pub fn log_posterior_at_mode(&self) -> f64 {
        self.mode.psi
    }
}

impl Fitted for LaplaceModel {
    fn predict(&self, x: &Array2<f64>, rng: &mut Pcg64) -> Result<Prediction, FitError> {
        let C = self.mode.n_classes;
        // One antithetic set of standard-normal draws serves every test point.
        let half = self.mc_samples.div_ceil(2);
        let mut z = Vec::with_capacity(2 * half);
        for _ in 0..half {
            let v: Vec<f64> = (0..C).map(|_| rng.sample::<f64, _>(StandardNormal)).collect();
            z.push(v.iter().map(|x| -x).collect());
            z.push(v);
        }
        let (means, covs) = self.latent_predictive(x);
        let mut out = Array2::zeros((x.nrows(), C));
        let mut jitter = 0.0f64;
        for (j, (mu, S)) in means.iter().zip(&covs).enumerate() {
            let L = Chol::factor_with_jitter(S.as_ref(), "predictive latent covariance")?;
            jitter = jitter.max(L.jitter());
            let p = Softmax.predictive_probs(mu, L.l(), &z);
            for c in 0..C {
                out[(j, c)] = p[c];
            }
        }
        let mut prediction = Prediction { jitter, ..Prediction::new(out) };
        for rule in &self.also_predict {
            let probs = match rule {
                AlsoPredict::PlugIn => {
                    let mut p = Array2::zeros((x.nrows(), C));
                    means.iter().enumerate().for_each(|(j, mu)| p.row_mut(j).assign(&ndarray::Array1::from(Softmax.probs(mu))));
                    p
                }
            };
            prediction = prediction.with_alternative(rule.name(), probs);
        }
        Ok(prediction)
    }

    fn evidence(&self) -> Option<Evidence> {
        Some(Evidence::new(self.mode.log_evidence, EvidenceKind::Approximation))
    }

    fn kernels(&self) -> KernelSet {
        KernelSet::shared(self.kernel.clone())
    }

    fn diagnostics(&self) -> Diagnostics {
        self.diagnostics.clone()
    }

    /// `log_evidence_blockdiag_det` (diagnostic): the approximation with log|I + W^1/2 K W^1/2|
    /// replaced by sum_c log|I + D_c^1/2 K D_c^1/2|, i.e. W = D - Pi Pi^T taken as its diagonal
    /// part D = diag(pi) in the determinant (dropping the 1/2 log|sum_c E_c| term).
    fn extra_metrics(&self) -> BTreeMap<String, f64> {
        let mut m = BTreeMap::new();
        m.insert("log_evidence_blockdiag_det".into(), self.mode.log_evidence + 0.5 * self.mode.M.log_det());
        m
    }
}
