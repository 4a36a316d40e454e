//! Exact inference for the multinomial-probit GP by two-block Gibbs sampling (Girolami &
//! Rogers 2006, §4.1 and App. D; notes/girolami-rogers2006.md §5.1).
//!
//! Model: m_k ~ GP(0, C) for k = 1..K (one kernel shared by the classes), y_nk = m_nk + eps,
//! eps ~ N(0, 1), t_n = argmax_k y_nk. The two blocks are
//!   y_n | m_n ~ N(m_n, I) truncated to the cone {y_{t_n} > y_j for all j},
//!   m_k | y_k ~ N(Sigma y_k, Sigma),  Sigma = C (I + C)^{-1}.
//! With C = U diag(lambda) U^T (one eigendecomposition), Sigma = U diag(lambda/(1+lambda)) U^T,
//! so a draw of every m_k costs O(N^2) per class and sweep; C itself is never inverted.
//!
//! The cone draw is exact (notes §5.1, recommended method; no naive rejection): first the
//! winner y_{n,t} from its log-concave marginal phi(y - m_t) prod_{j != t} Phi(y - m_j), by
//! rejection from a unit-variance Gaussian under the tangent parabola at a point near the
//! mode (valid because the log-density has curvature <= -1; acceptance >= 1/sqrt(K) near
//! the mode, whatever P(t | m) is), then every other y_nj from N(m_nj, 1) truncated above at
//! y_{n,t} (Robert 1995 exponential rejection in the tail).
//!
//! For two classes the default is the paper's binary model (§4.4.1: one GP, P(t = 1 | m) =
//! Phi(m)), as in its Figure 3; `binary_model: multinomial` keeps two GPs.
//!
//! Predictions average, over the kept draws, the §3 predictive formula with the draw's
//! mu_k = y_k^T (I + C)^{-1} c_new and var = c - c_new^T (I + C)^{-1} c_new (notes §5.1
//! [DERIVED]: m_new integrated analytically). The marginal likelihood is the paper's
//! prior-sampling estimate (§6.2): log mean_s p(t | m^(s)), m^(s) from the GP prior, with its
//! delta-method Monte Carlo standard error. The one-dimensional expectations over u use an
//! adaptive Gauss-Hermite rule (fast path, checked against `likelihoods::probit`).
//!
//! Cost per sweep: N cone draws (O(K) each) and two [N, N] x [N, K] products; the one
//! O(N^3) step is the eigendecomposition. Prediction: K 1-D integrals per test point and
//! predictive draw (`predict_thin` thins the draws used).
#![allow(non_snake_case)]
//!
//! Files: `params.rs` (settings), `sampler.rs` (the Gibbs sweeps and the evidence estimate),
//! `model.rs` (the kept draws and the predictive). The exact truncated-Gaussian and cone draws
//! live in `likelihoods::truncated`, the autocorrelation time and the log-mean-exp estimator in
//! `stats`. The submodules share the imports below.
mod model;
mod params;
mod sampler;
#[cfg(test)]
mod tests;

pub use crate::stats::EvidenceEstimate;
pub use model::GibbsMnpModel;
pub use params::{GibbsMnp, GibbsMnpParams};

use super::{
    parse_settings, Diagnostics, Evidence, FitContext, FitError, Fitted, HyperPolicy, Method, Prediction, Problem, ProblemShape, StopReason,
};
use crate::kernels::{KernelSet, SqExp};
use crate::likelihoods::probit::BinaryModel;
use crate::likelihoods::truncated::{sample_cone, sample_std_normal_above};
use crate::linalg::log_sum_exp;
use crate::results::{EvidenceKind, Handoff};
use crate::special::log_normal_cdf;
use crate::stats::integrated_autocorr_time;
use faer::{Mat, Side};
use ndarray::Array2;
use rand::RngExt;
use rand_distr::StandardNormal;
use rand_pcg::Pcg64;
use sampler::*;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Version of this method's numbers, part of every cell key: bump it when a change of the code
/// (here or in shared numerics it uses) changes any number the method computes, so stored cells
/// are recomputed. `tests/numerics_versions.rs` fails when the output changes without a bump.
pub const NUMERICS_VERSION: u32 = 4;

impl Method for GibbsMnp {
    fn name(&self) -> &'static str {
        "gibbs_mnp"
    }

    fn supports(&self, shape: &ProblemShape, kernels: &KernelSet, hyper: HyperPolicy) -> Result<(), String> {
        if hyper == HyperPolicy::Learn {
            return Err("gibbs_mnp samples with fixed hyper-parameters only (use hyper: fixed or hyper: {from: <entry>})".into());
        }
        if shape.n_classes < 2 {
            return Err(format!("gibbs_mnp needs at least 2 classes, got {}", shape.n_classes));
        }
        super::shared_sqexp(kernels, "gibbs_mnp").map(|_| ())
    }

    fn train(&self, problem: &Problem, kernels: &KernelSet, hyper: HyperPolicy, ctx: &mut FitContext) -> Result<Box<dyn Fitted>, FitError> {
        let kernel = super::shared_sqexp(kernels, "gibbs_mnp").map_err(FitError::Unsupported)?;
        Ok(Box::new(self.fit_model(problem, kernel, hyper, ctx)?))
    }
}
