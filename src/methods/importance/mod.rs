//! Importance-sampling "ground truth" of Chai (2012) §9 and App. F: MC-MNL (logit) and MC-MNP
//! (probit) marginal likelihoods and predictive probabilities.
//!
//! Proposal: multivariate t with nu = 4 degrees of freedom, location the KL-MNL mean m* fitted
//! at the same hyper-parameters, scale matrix K (covariance 2K; `scale: posterior` uses V).
//! Weights w = p(y|f) p(f) / p_s(f) are formed in log space and streamed in batches (never
//! stored as samples x nC); the reported evidence is the 99.9% upper confidence bound
//! log(p-hat + 3.09 sigma-hat / sqrt(n_s)) (notes D§6.1). Predictive probabilities by F.1:
//! f_* | f ~ N(K_*^T K^{-1} f, K_** - K_*^T K^{-1} K_*) with the same normalised weights.
//!
//! With K = Kx (x) Kc and the prior scale, L_K = L_x (x) L_c: one batch of draws is an
//! n x (B C) matrix Y and L_K z is L_x Y (then L_c per sample), a matrix-matrix product.
//!
//! Files: `params.rs` (settings), `weights.rs` (per-datum log-likelihoods of a sample and the
//! streaming weight accumulator), `proposal.rs` (the t proposal, its draws and the weight pass),
//! `estimate.rs` (the fit: the evidence estimate and its bounds), `predictive.rs` (the fitted
//! model and its predictive). The submodules share the imports below.
mod estimate;
mod params;
mod predictive;
mod proposal;
#[cfg(test)]
mod tests;
mod weights;

pub use params::{ImportanceParams, Lik};
pub use predictive::ImportanceModel;

use super::klmnl::{KlmnlModel, KlmnlParams};
use super::{Diagnostics, Evidence, FitContext, FitError, Fitted, HyperPolicy, Method, Prediction, Problem, ProblemShape};
use crate::kernels::{KernelSet, SqExp};
use crate::likelihoods::probit::{log_probit_class_prob, probit_class_probs};
use crate::likelihoods::softmax::softmax_rows;
use crate::linalg::small::sym;
use crate::linalg::{exp_shifted_rows, leading_columns, log_sum_exp, softmax_in_place, Chol};
use crate::results::{EvidenceKind, Handoff};
use faer::Mat;
use ndarray::Array2;
use proposal::*;
use rand::{RngExt, SeedableRng};
use rand_distr::{ChiSquared, StandardNormal};
use rand_pcg::Pcg64;
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::collections::BTreeMap;
use weights::*;

/// Version of this method's numbers, part of every cell key: bump it when a change of the code
/// (here or in shared numerics it uses) changes any number the method computes, so stored cells
/// are recomputed. `tests/numerics_versions.rs` fails when the output changes without a bump.
pub const NUMERICS_VERSION: u32 = 1;

/// One-sided 99.9% normal quantile used by the paper's upper bound.
const Z999: f64 = 3.09;

pub struct Importance {
    lik: Lik,
    params: ImportanceParams,
    klmnl: super::klmnl::Klmnl,
}

impl Method for Importance {
    fn name(&self) -> &'static str {
        match self.lik {
            Lik::Logit => "mc_mnl",
            Lik::Probit => "mc_mnp",
        }
    }

    fn supports(&self, shape: &ProblemShape, kernels: &KernelSet, hyper: HyperPolicy) -> Result<(), String> {
        self.klmnl.supports(shape, kernels, hyper)
    }

    /// KL-MNL's (the sampler's centre is its fit).
    fn progress(&self, shape: &ProblemShape, hyper: HyperPolicy) -> super::Progress {
        self.klmnl.progress(shape, hyper)
    }

    fn train(&self, problem: &Problem, kernels: &KernelSet, hyper: HyperPolicy, ctx: &mut FitContext) -> Result<Box<dyn Fitted>, FitError> {
        let kernel = super::shared_sqexp(kernels, self.name()).map_err(FitError::Unsupported)?;
        Ok(Box::new(self.fit_model(problem, kernel, hyper, ctx)?))
    }
}
