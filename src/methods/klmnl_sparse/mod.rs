//! Sparse KL-MNL: the variational multinomial-logit GP of Chai (2012) over a set of inducing
//! sites (Sec. 4, 6.1, App. C.2.1, C.3.1, C.4, D, E.1-E.3; notes D§4).
//!
//! Inducing variables z are latent values at sites (datum, class) of the training set (Remark
//! 14), with isotropic noise, z = f(sites) + eps, so that their covariance K = K_zz + sigma_eps^2 I
//! is well conditioned (Remark 13). q(f, z) = p(f|z) N(z; m, V) (eq. 29) and
//!     log p(y) >= log Z~_h = -KL(q(z) || p(z)) + sum_i h(y_i; q(f_i), b_i, S_i)      (eq. 30-32)
//! with h the per-datum bound of Theorem 6, shared with the dense `klmnl` (its S-step and terms).
//!
//! Representation (no inverse of a kernel matrix anywhere): L_K = chol(K), the whitened cross
//! covariance L~^T = L_K^{-1} K_f (s x nC), the tie m = K_f (y - b) (so alpha = K^{-1} m =
//! L_K^{-T} L~^T (y - b)), and V = L_K R L_K^T with R SPD (s x s), whose fixed point is
//! R = (I + L~^T W_f L~)^{-1} (eq. 33, E.2.2). Then K^{-1} V = L_K^{-T} R L_K^T, so
//! -KL = s/2 + 1/2 log|R| - 1/2 tr R - 1/2 |L~^T (y - b)|^2 and V_fi = K_ff,ii - L~_i (I - R) L~_i^T.
//!
//! Fitting: block coordinate ascent over {S_i}, the joint (m, b) Newton step and V, every
//! proposal accepted only if the bound does not fall, else the best convex mix by false
//! position (as the dense method). Sites grow from a random start by active (d2 / d3 scores,
//! App. D) or random expansion; with `hyper: learn` each expansion is followed by one L-BFGS
//! line search on the kernel's log-parameters (App. C.4 gradient) and the final set by a full
//! optimisation (Sec. 9.4).
//!
//! Layout: latent vectors are datum-major (index i C + c), as in `klmnl`.
//!
//! Files: `params.rs` (settings), `prior.rs` (sites, K, L_K, L~), `state.rs` (the variational
//! state and the bound), `steps.rs` (S, joint b and V updates), `fit.rs` (sweeps, warm starts),
//! `gradient.rs` (App. C.4 hyper-parameter gradient), `select.rs` (d2, d3 and the closed form
//! D.1 of the gain of a site), `learn.rs` (expansion and hyper-parameter learning), `model.rs`
//! (the fitted model and its predictive).
mod fit;
mod gradient;
mod learn;
mod model;
mod params;
mod prior;
mod select;
mod state;
mod steps;
#[cfg(test)]
mod tests;

pub use model::KlmnlSparseModel;
pub use params::{KlmnlSparse, KlmnlSparseParams, Selection};

use super::klmnl::{
    accept, chol, datum_terms, loosened_b_tol, optimise_datum_jitter, s_sweep, softmax_hessian_factor, Basis, DatumTerms, FitStats,
};
use super::optimize::{false_position, minimize_lbfgs};
use super::{
    parse_settings, Diagnostics, Evidence, FitContext, FitError, Fitted, HyperPolicy, Method, Prediction, Problem, ProblemShape, StopReason,
};
use crate::kernels::{KernelSet, SqExp};
use crate::linalg::small::{eigh, eye, psd_factor, sym, trace_prod};
use crate::linalg::{add_gram_lower, col, leading_columns, log_sum_exp, matvec, softmax_in_place, to_vec, Chol, SymPencil};
use crate::results::{EvidenceKind, Handoff};
use faer::linalg::matmul::matmul;
use faer::{Accum, Mat, Par};
use fit::*;
use gradient::*;
use ndarray::Array2;
use prior::*;
use rand_pcg::Pcg64;
use select::*;
use serde::{Deserialize, Serialize};
use state::*;
use std::collections::BTreeMap;
use steps::*;

/// Version of this method's numbers, part of every cell key: bump it when a change of the code
/// (here or in shared numerics it uses, e.g. `klmnl`'s per-datum steps) changes any number the
/// method computes. `tests/numerics_versions.rs` fails when the output changes without a bump.
/// 2: the fits at intermediate set sizes stop at `growth_tol` (1e-7) instead of tol (1e-10).
/// 3: the same algebra in other products (the Newton step's and B's symmetric products on one
/// triangle, the V fixed point's blocks from B's factor, the V mix's slope by a pencil), so
/// the last bits differ.
pub const NUMERICS_VERSION: u32 = 3;

impl Method for KlmnlSparse {
    fn name(&self) -> &'static str {
        "klmnl_sparse"
    }

    fn supports(&self, _shape: &ProblemShape, kernels: &KernelSet, _hyper: HyperPolicy) -> Result<(), String> {
        super::shared_sqexp(kernels, "klmnl_sparse").map(|_| ())
    }

    fn train(&self, problem: &Problem, kernels: &KernelSet, hyper: HyperPolicy, ctx: &mut FitContext) -> Result<Box<dyn Fitted>, FitError> {
        let kernel = super::shared_sqexp(kernels, "klmnl_sparse").map_err(FitError::Unsupported)?;
        Ok(Box::new(self.fit_model(problem, kernel, hyper, ctx)?))
    }
}
