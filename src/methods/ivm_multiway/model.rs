//! The fitted factorised multi-way IVM: per class c the latent predictive N(mu_c, s2_c) of its
//! own IVM (d_c kernel evaluations, notes §2.2), and Q(y* | x*) = E[P(y* | u*)] under
//! u*_c ~ N(mu_c, s2_c) independently, by the same rule as the fit (notes §5.2), normalised.
use crate::kernels::KernelSet;
use crate::likelihoods::factorised::FactorisedLik;
use crate::methods::ivm::model::ActiveSetPredictor;
use crate::methods::{Diagnostics, Evidence, FitError, Fitted, Prediction};
use ndarray::Array2;
use rand_pcg::Pcg64;

pub struct IvmMultiwayModel {
    pub(super) classes: Vec<ActiveSetPredictor>,
    pub(super) lik: FactorisedLik,
    pub(super) kernels: KernelSet,
    pub(super) diagnostics: Diagnostics,
}

impl IvmMultiwayModel {
    /// Latent predictive means and variances, [m, C] each.
    pub fn latent_predictive(&self, x: &Array2<f64>) -> (Array2<f64>, Array2<f64>) {
        let (m, c) = (x.nrows(), self.classes.len());
        let mut mean = Array2::zeros((m, c));
        let mut var = Array2::zeros((m, c));
        for (k, cls) in self.classes.iter().enumerate() {
            let (mu, s2) = cls.latent_predictive(x);
            for j in 0..m {
                mean[(j, k)] = mu[j];
                var[(j, k)] = s2[j];
            }
        }
        (mean, var)
    }

    /// Active-set size of each class.
    pub fn active_sizes(&self) -> Vec<usize> {
        self.classes.iter().map(|c| c.x_active.nrows()).collect()
    }
}

impl Fitted for IvmMultiwayModel {
    fn predict(&self, x: &Array2<f64>, _rng: &mut Pcg64) -> Result<Prediction, FitError> {
        let (mean, var) = self.latent_predictive(x);
        let c = self.classes.len();
        let mut probs = Array2::zeros((x.nrows(), c));
        for j in 0..x.nrows() {
            let h = mean.row(j).to_vec();
            let a = var.row(j).to_vec();
            let p = self.lik.predictive(&h, &a);
            if p.iter().any(|v| !v.is_finite()) {
                return Err(FitError::Numerical(format!(
                    "ivm_multiway: non-finite predictive at test row {j} (means {h:?}, variances {a:?})"
                )));
            }
            for k in 0..c {
                probs[(j, k)] = p[k];
            }
        }
        Ok(Prediction::new(probs))
    }

    /// None: the paper gives no marginal-likelihood approximation for the factorised
    /// multi-way IVM (its hyper-parameters come from elsewhere, notes §5.2).
    fn evidence(&self) -> Option<Evidence> {
        None
    }

    fn kernels(&self) -> KernelSet {
        self.kernels.clone()
    }

    fn diagnostics(&self) -> Diagnostics {
        self.diagnostics.clone()
    }

    fn inducing_inputs(&self) -> Vec<Array2<f64>> {
        self.classes.iter().map(|c| c.x_active.clone()).collect()
    }
}
