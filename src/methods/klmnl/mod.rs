//! KL-MNL: the variational multinomial-logit GP of Chai (2012), non-sparse.
//!
//! q(f|y) = N(m, V) with the bound h of Theorem 6 on every expected log-likelihood, so
//!     log p(y) >= log Z_B >= log Z_h = -KL(q || p) + sum_i h(y_i; q_i, b_i, S_i)      (Chai eq. 21)
//! maximised by block coordinate ascent over {S_i}, the joint (m, b) and V (Sec. 3, App. C, E).
//! Every block proposes a fixed point that is accepted only when the bound does not fall;
//! otherwise the best convex mix (1-eta) old + eta new is found by false position on the
//! directional derivative (notes D§2.4.5). Nothing inverts K: m = K (y - b) (eq. 27), so
//! alpha = K^{-1} m = y - b, and V = K - K T K with T = L_W (I + L_W^T K L_W)^{-1} L_W^T (E.2.1).
//!
//! Layout: latent vectors are datum-major, f = (f_1; ...; f_n), f_i = (f_i^1..f_i^C), so the
//! prior covariance is K = Kx (x) Kc (paper §2.3.2) and every per-datum C x C block is
//! contiguous. The hand-off vector "mean" is class-major, as the rest of the harness expects.
//!
//! Files: `params.rs` (settings), `datum.rs` (the per-datum bound h and its S and b updates),
//! `prior.rs` (the prior K = Kx (x) Kc and the V state of a W), `state.rs` (the variational
//! state and the bound), `steps.rs` (the joint (m, b) and V updates), `fit.rs` (the sweeps to
//! convergence, warm starts), `gradient.rs` (the envelope-theorem hyper-parameter gradient),
//! `kc.rs` (models M1-M5 of K^c), `learn.rs` (fitting with hyper-parameter learning),
//! `model.rs` (the fitted model and its predictive). The submodules share the imports below.
mod datum;
mod fit;
mod gradient;
mod kc;
mod learn;
mod model;
mod params;
mod prior;
mod state;
mod steps;
#[cfg(test)]
pub(crate) mod tests;

pub use datum::{optimise_datum, optimise_datum_jitter, theorem10_per_datum};
pub use kc::{kc_init, kc_of};
pub use model::{KlmnlModel, PredCache};
pub use params::{Klmnl, KlmnlParams};
// The per-datum bound h, its S-step and the acceptance rule, shared with the sparse KL-MNL
// (`klmnl_sparse`), whose per-datum terms are the same with V_fi, m_fi in place of V_i, m_i.
pub(crate) use datum::{datum_terms, s_sweep, Basis, DatumTerms};
pub(crate) use state::{accept, chol, loosened_b_tol, FitStats};
pub(crate) use steps::softmax_hessian_factor;

use super::optimize::{false_position, minimize_lbfgs};
use super::{parse_settings, Diagnostics, Evidence, FitContext, FitError, Fitted, HyperPolicy, Method, Prediction, Problem, ProblemShape};
use crate::kernels::{KernelSet, SqExp};
use crate::linalg::small::{eigh, eye, psd_factor, sym, trace_prod};
use crate::linalg::{kron, leading_columns, log_sum_exp, matvec, softmax_in_place, Chol, SymPencil};
use crate::results::{EvidenceKind, Handoff};
use faer::linalg::matmul::matmul;
use faer::linalg::solvers::Solve;
use faer::linalg::triangular_solve::solve_lower_triangular_in_place;
use faer::{Accum, Mat, MatRef, Par};
use fit::*;
use gradient::*;
use kc::*;
use ndarray::Array2;
use prior::*;
use rand_pcg::Pcg64;
use serde::{Deserialize, Serialize};
use state::*;
use std::collections::BTreeMap;
use std::sync::Mutex;
use steps::*;

/// Version of this method's numbers, part of every cell key: bump it when a change of the code
/// (here or in shared numerics it uses) changes any number the method computes, so stored cells
/// are recomputed. `tests/numerics_versions.rs` fails when the output changes without a bump.
/// 3: the C x C eigendecompositions by nalgebra instead of a cyclic Jacobi, and one S-step
/// round per datum and sweep instead of up to five (with `SHARED_NUMERICS_VERSION` 2).
/// 4: the V-space mix is not taken where K needs jitter to factor (its log-determinant from
/// the jittered factor was off by about -j tr(W)).
pub const NUMERICS_VERSION: u32 = 4;

/// Version of the pieces of this method that `klmnl_sparse` runs too (the per-datum terms and
/// their jitter search, the S-sweep, the accept rule, `FitStats`' stopping rule). Bump it with
/// `NUMERICS_VERSION` when a change moves their numbers; a change confined to the rest (the
/// V-step, the envelope gradient, the hyper-parameter search: klmnl=2 was one) bumps only
/// `NUMERICS_VERSION`, so sparse cells, whose numbers it cannot move, keep their keys.
/// 2: nalgebra's eigendecomposition and one S-step round per datum and sweep.
pub const SHARED_NUMERICS_VERSION: u32 = 2;

impl Method for Klmnl {
    fn name(&self) -> &'static str {
        "klmnl"
    }

    fn supports(&self, _shape: &ProblemShape, kernels: &KernelSet, _hyper: HyperPolicy) -> Result<(), String> {
        super::shared_sqexp(kernels, "klmnl").map(|_| ())
    }

    /// The hyper-parameter search's evaluations; no checkpoints.
    fn progress(&self, _shape: &ProblemShape, hyper: HyperPolicy) -> super::Progress {
        super::Progress { budget: hyper == HyperPolicy::Learn, checkpoints: false }
    }

    fn train(&self, problem: &Problem, kernels: &KernelSet, hyper: HyperPolicy, ctx: &mut FitContext) -> Result<Box<dyn Fitted>, FitError> {
        let kernel = super::shared_sqexp(kernels, "klmnl").map_err(FitError::Unsupported)?;
        Ok(Box::new(self.fit_model(problem, kernel, hyper, ctx)?))
    }
}
