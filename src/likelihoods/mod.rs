//! Multi-class likelihoods p(y | f) for a latent C-vector f per datum.
pub mod factorised;
pub mod logistic_softmax;
pub mod marginal;
pub mod pairwise_step;
pub mod polya_gamma;
pub mod probit;
pub mod softmax;
pub mod truncated;
pub mod univariate;

pub use probit::Probit;
pub use softmax::Softmax;

use faer::MatRef;

/// A multi-class likelihood, per datum, on a latent C-vector.
pub trait Likelihood: Send + Sync {
    /// log p(y | f).
    fn log_prob(&self, f: &[f64], y: usize) -> f64;

    /// p(y = c | f) for every class c.
    fn probs(&self, f: &[f64]) -> Vec<f64>;

    /// Predictive class probabilities E[p(y = c | f)] under f ~ N(mean, L L^T), by averaging
    /// over the standard-normal draws `z` (each a C-vector), which the caller supplies so that
    /// one set of draws serves every test point and the estimate is deterministic in the seed.
    fn predictive_probs(&self, mean: &[f64], cov_chol: MatRef<'_, f64>, z: &[Vec<f64>]) -> Vec<f64> {
        monte_carlo_predictive(self, mean, cov_chol, z)
    }
}

/// The Monte Carlo predictive shared by every likelihood: the average of `probs` at
/// f = mean + L z over the draws z, renormalised.
pub fn monte_carlo_predictive<L: Likelihood + ?Sized>(lik: &L, mean: &[f64], cov_chol: MatRef<'_, f64>, z: &[Vec<f64>]) -> Vec<f64> {
    let c = mean.len();
    let mut acc = vec![0.0; c];
    let mut f = vec![0.0; c];
    for zs in z {
        for (i, fi) in f.iter_mut().enumerate() {
            *fi = mean[i] + (0..=i).map(|k| cov_chol[(i, k)] * zs[k]).sum::<f64>();
        }
        for (a, p) in acc.iter_mut().zip(lik.probs(&f)) {
            *a += p;
        }
    }
    let total: f64 = acc.iter().sum();
    acc.iter().map(|a| a / total).collect()
}
