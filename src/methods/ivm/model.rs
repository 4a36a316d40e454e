//! The fitted IVM: prediction from the active set alone (Seeger, Lawrence & Herbrich §3.1;
//! notes §2.2): k_* = K(X_I, x_*) (d kernel evaluations), m_* = L^{-1} Pi^{1/2} k_*,
//! mu_* = beta^T m_*, sigma_*^2 = K(x_*, x_*) - ||m_*||^2; the probit predictive is
//! Q(y_* = +1) = Phi((mu_* + bias) / sqrt(1 + sigma_*^2)) (App. B.1).
use super::state::IvmState;
use super::SiteLik;
use crate::kernels::{Kernel, KernelSet};
use crate::linalg::Chol;
use crate::methods::{Diagnostics, Evidence, FitError, Fitted, Prediction};
use crate::results::EvidenceKind;
use crate::special::normal_cdf;
use faer::Mat;
use ndarray::{Array2, Axis};
use rand_pcg::Pcg64;

/// What prediction of the latent u needs of one IVM: the active rows and the factors of B
/// (shared with the factorised multi-way IVM, one per class).
#[derive(Clone, Debug)]
pub(crate) struct ActiveSetPredictor {
    pub kernel: Box<dyn Kernel>,
    /// Training rows of the active set, in inclusion order.
    pub x_active: Array2<f64>,
    pub sqrt_pi: Vec<f64>,
    pub chol: Chol,
    pub beta: Vec<f64>,
}

impl ActiveSetPredictor {
    pub fn from_state(kernel: &dyn Kernel, x: &Array2<f64>, state: &IvmState) -> Self {
        ActiveSetPredictor {
            kernel: kernel.clone_box(),
            x_active: x.select(Axis(0), &state.active),
            sqrt_pi: state.pi.iter().map(|p| p.sqrt()).collect(),
            chol: state.chol.clone(),
            beta: state.beta.clone(),
        }
    }

    /// Predictive means and variances of the latent u at the rows of `x`, [m] each.
    pub fn latent_predictive(&self, x: &Array2<f64>) -> (Vec<f64>, Vec<f64>) {
        let (d, m) = (self.x_active.nrows(), x.nrows());
        let kss = self.kernel.diag(x);
        if d == 0 {
            return (vec![0.0; m], kss);
        }
        let ks = self.kernel.cross(&self.x_active, x);
        let v = self.chol.solve_l(Mat::from_fn(d, m, |k, j| self.sqrt_pi[k] * ks[(k, j)]).as_ref());
        let mean = (0..m).map(|j| (0..d).map(|k| self.beta[k] * v[(k, j)]).sum()).collect();
        // Round-off can take k** - ||m*||^2 just below zero next to an active point.
        let var = (0..m).map(|j| (kss[j] - (0..d).map(|k| v[(k, j)] * v[(k, j)]).sum::<f64>()).max(0.0)).collect();
        (mean, var)
    }
}

pub struct IvmModel {
    pub(super) latent: ActiveSetPredictor,
    pub(super) lik: SiteLik,
    /// log Q(D) of eq. 11 (an approximation; `None` in checkpoint snapshots).
    pub(super) log_evidence: Option<f64>,
    pub(super) diagnostics: Diagnostics,
}

impl IvmModel {
    /// Predictive means and variances of the latent u at the rows of `x`, [m] each.
    pub fn latent_predictive(&self, x: &Array2<f64>) -> (Vec<f64>, Vec<f64>) {
        self.latent.latent_predictive(x)
    }

    /// Number of active points.
    pub fn active_size(&self) -> usize {
        self.latent.x_active.nrows()
    }
}

impl Fitted for IvmModel {
    /// Binary probit: class 1 is y = +1. Each class from its own tail, Phi(-z) and Phi(z), so
    /// neither probability is 1 - (nearly 1).
    fn predict(&self, x: &Array2<f64>, _rng: &mut Pcg64) -> Result<Prediction, FitError> {
        let SiteLik::Probit { bias } = self.lik else {
            return Err(FitError::Unsupported("ivm: class probabilities need the probit likelihood".into()));
        };
        let (mean, var) = self.latent_predictive(x);
        let mut probs = Array2::zeros((x.nrows(), 2));
        for (j, (m, v)) in mean.iter().zip(&var).enumerate() {
            let z = (m + bias) / (1.0 + v).sqrt();
            if !z.is_finite() {
                return Err(FitError::Numerical(format!("ivm: non-finite predictive at test row {j} (mean {m}, variance {v})")));
            }
            probs[(j, 0)] = normal_cdf(-z);
            probs[(j, 1)] = normal_cdf(z);
        }
        Ok(Prediction::new(probs))
    }

    fn evidence(&self) -> Option<Evidence> {
        self.log_evidence.map(|v| Evidence::new(v, EvidenceKind::Approximation))
    }

    fn kernels(&self) -> KernelSet {
        KernelSet::shared(self.latent.kernel.clone_box())
    }

    fn diagnostics(&self) -> Diagnostics {
        self.diagnostics.clone()
    }

    fn inducing_inputs(&self) -> Vec<Array2<f64>> {
        vec![self.latent.x_active.clone()]
    }
}
