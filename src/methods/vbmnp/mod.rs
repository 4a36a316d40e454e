//! Variational Bayes multinomial probit GP (Girolami & Rogers 2006, "VB-MNP"; "MF-MNP" in
//! Chai 2012), with the paper's variational importance sampler for the posterior mean of the
//! RBF precisions and its predictive distribution. See notes/girolami-rogers2006.md §2–§3.
//!
//! One covariance C = s2 exp(-sum_d phi_d (x_d - x'_d)^2) is shared by all K classes (as in
//! every experiment of the paper), so Σ = C (I + C)^{-1} is one matrix and one Cholesky of
//! I + C (eigenvalues >= 1) serves all classes. C^{-1} is never formed: m̃ᵀC⁻¹m̃ =
//! m̃ᵀ(I+C)⁻¹ỹ_prev and log|Σ| - log|C| = -log|I+C| (notes §2.2, §2.7).
//!
//! Kernel conversion at the boundary: G&R's phi_d = 1 / (2 l_d^2) for the harness's SqExp
//! length-scales l_d; the signal variance s2 is held fixed (1 in the paper).
//!
//! `binary_model: probit` runs the paper's binary special case instead (§4.4.1, eq. 4.9: one
//! GP; submodule `binary`).
#![allow(non_snake_case)]
//!
//! Files: `params.rs` (settings), `updates.rs` (the VB fixed point, its bounds, SQUAREM),
//! `hyper.rs` (the importance sampler for the precisions phi), `model.rs` (the fitted model and
//! its predictive), `binary.rs` (the binary model). The phi-parameterised Gram matrices live in
//! `kernels::sqexp_phi`. The submodules share the imports below.
mod binary;
mod hyper;
mod model;
mod params;
#[cfg(test)]
mod tests;
mod updates;

pub use binary::VbmnpBinaryModel;
pub use model::VbmnpModel;
pub use params::{IsParam, IsWeight, VbEvidence, Vbmnp, VbmnpParams};
pub use updates::paper_bound;

use super::{
    parse_settings, Diagnostics, Evidence, FitContext, FitError, Fitted, HyperPolicy, Method, Prediction, Problem, ProblemShape, StopReason,
};
use crate::kernels::sqexp_phi::{gram_cross_phi, gram_phi, kernel_from_phi, phi_from_kernel, GramScratch, PairSqDiffs};
use crate::kernels::{KernelSet, SqExp};
use crate::likelihoods::probit::{predictive_class_probs, truncated_moments, BinaryModel};
use crate::linalg::{log_sum_exp, Chol};
use crate::results::{EvidenceKind, Handoff};
use faer::Mat;
use hyper::*;
use ndarray::Array2;
use rand::RngExt;
use rand_distr::StandardNormal;
use rand_pcg::Pcg64;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use updates::*;

/// Version of this method's numbers, part of every cell key: bump it when a change of the code
/// (here or in shared numerics it uses) changes any number the method computes, so stored cells
/// are recomputed. `tests/numerics_versions.rs` fails when the output changes without a bump.
pub const NUMERICS_VERSION: u32 = 1;

const LN_2PI: f64 = 1.837_877_066_409_345_5;

impl Method for Vbmnp {
    fn name(&self) -> &'static str {
        "vbmnp"
    }

    fn supports(&self, shape: &ProblemShape, kernels: &KernelSet, hyper: HyperPolicy) -> Result<(), String> {
        let p = &self.params;
        if p.binary_model == BinaryModel::Probit {
            if shape.n_classes != 2 {
                return Err(format!(
                    "vbmnp with binary_model: probit is the one-GP binary model: exactly 2 classes, the data have {}",
                    shape.n_classes
                ));
            }
            if hyper != HyperPolicy::Fixed {
                return Err("vbmnp with binary_model: probit supports hyper: fixed (or from) only".into());
            }
            if !p.also_predict.is_empty() {
                return Err("vbmnp with binary_model: probit: settings.also_predict is for the multi-class model".into());
            }
        }
        if p.accelerate && hyper == HyperPolicy::Learn {
            return Err("vbmnp: settings.accelerate needs a fixed kernel (hyper: fixed or from)".into());
        }
        let learns_variance = kernels.shared_kernel().and_then(|k| k.as_sqexp()).is_some_and(|k| k.learn_variance);
        if hyper == HyperPolicy::Learn && learns_variance {
            // Refused rather than ignored: G&R's sampler updates the precisions phi only.
            return Err("vbmnp learns the RBF precisions only and holds the signal variance fixed: set kernel.learn_variance: false".into());
        }
        // The VB-MNP hyper-parameter step samples the RBF precisions phi = 1/(2 l^2) (G&R 2006 §4.4).
        super::shared_sqexp(kernels, "vbmnp").map(|_| ())
    }

    /// VB iterations, at any policy; no checkpoints.
    fn progress(&self, _shape: &ProblemShape, _hyper: HyperPolicy) -> super::Progress {
        super::Progress { budget: true, checkpoints: false }
    }

    fn train(&self, problem: &Problem, kernels: &KernelSet, hyper: HyperPolicy, ctx: &mut FitContext) -> Result<Box<dyn Fitted>, FitError> {
        let kernel = super::shared_sqexp(kernels, "vbmnp").map_err(FitError::Unsupported)?;
        let p = &self.params;
        if p.binary_model == BinaryModel::Probit {
            return Ok(Box::new(binary::fit(p, problem, kernel, hyper, ctx)?));
        }
        let (x, y, K) = (problem.x, problem.y, problem.n_classes + p.extra_classes);
        let n = x.nrows();
        let s2 = kernel.log_variance.exp();
        let learn = hyper == HyperPolicy::Learn;
        let mut phi = phi_from_kernel(kernel);
        if let (true, Some(p0)) = (learn, p.init_phi) {
            phi.iter_mut().for_each(|v| *v = p0);
        }
        // The sampled parameter h (phi, or theta = 1/phi for `sq_lengthscale`) and eq. 4.8 at
        // the start; psi are the Exp rates of h.
        let h_of = |phi: &[f64]| phi.iter().map(|&f| p.is_param.to_precision(f)).collect::<Vec<f64>>();
        let psi_of = |h: &[f64]| h.iter().map(|f| (p.sigma + 1.0) / (p.tau + f)).collect::<Vec<f64>>();
        let mut psi = psi_of(&h_of(&phi));

        let mut C = gram_phi(x, &phi, s2);
        let mut chol = chol_i_plus(&C)?;
        // §6.1: M and Y initialised randomly.
        let mut Y = Mat::from_fn(n, K, |_, _| ctx.rng.sample::<f64, _>(StandardNormal));
        let mut elbo = f64::NEG_INFINITY;
        let mut prev_bound: Option<f64> = None;
        let mut iters = 0;
        let mut stop = StopReason::MaxIterations;
        let (mut ess_last, mut ess_min, mut is_failed) = (f64::NAN, f64::INFINITY, 0usize);
        let mut kernel_changed = false;
        if p.accelerate && learn {
            return Err(FitError::Unsupported("settings.accelerate needs a fixed kernel (hyper: fixed or from)".into()));
        }
        let mut it = 0;
        while it < p.max_iters {
            ctx.check_deadline()?;
            let (M, Yn, e) = if p.accelerate {
                let cycle = squarem_cycle(&chol, &Y, y);
                it += 3;
                cycle
            } else {
                it += 1;
                vb_step(&chol, &Y, y)
            };
            iters = it;
            Y = Yn;
            elbo = e;
            kernel_changed = false;
            let bound = paper_bound(elbo, n, K);
            let train_err =
                (0..n).filter(|&i| crate::linalg::argmax(&(0..K).map(|k| M[(i, k)]).collect::<Vec<_>>()) != y[i]).count() as f64 / n as f64;
            let mut rec: Vec<(String, f64)> = vec![("bound".into(), bound), ("elbo".into(), elbo), ("train_error".into(), train_err)];
            if learn {
                // Eqs. 4.5, 4.7, 4.8 with the freshly computed m̃.
                let V = if p.is_weight == IsWeight::Marginal { &Y } else { &M };
                let up = importance_update_kind(x, V, &psi, s2, p.is_samples, p.is_jitter, p.is_weight, p.is_param, ctx.rng)?;
                psi = psi_of(&up.phi_mean);
                phi = h_of(&up.phi_mean);
                ess_last = up.ess;
                ess_min = ess_min.min(up.ess);
                is_failed += up.failed;
                C = gram_phi(x, &phi, s2);
                chol = chol_i_plus(&C)?;
                kernel_changed = true;
                rec.push(("ess".into(), up.ess));
            }
            if phi.len() == 1 {
                rec.push(("phi".into(), phi[0]));
            } else {
                rec.extend(phi.iter().enumerate().map(|(d, v)| (format!("phi_{}", d + 1), *v)));
            }
            let rec_ref: Vec<(&str, f64)> = rec.iter().map(|(k, v)| (k.as_str(), *v)).collect();
            ctx.record(it, &rec_ref);
            if let Some(prev) = prev_bound {
                if p.tol > 0.0 && (bound - prev).abs() < p.tol * prev.abs() {
                    stop = StopReason::Converged;
                    break;
                }
            }
            // A budget ends the iterations as a normal stop; the step below makes the model.
            if let Some(reason) = ctx.budget_stop(it as u64) {
                stop = reason;
                break;
            }
            prev_bound = Some(bound);
        }
        // One more fixed-kernel step so the reported bound, m-tilde and predictions all use the
        // final phi (the bound above was for the kernel before the last IS update); without a
        // kernel change it only supplies the terms of the port's bound formula, which vbmp
        // evaluates after each update of m-tilde: the `bound_port*` values are then one step
        // past the ELBO and the paper bound (at the default tol, short of the fixed point, the
        // port's minus the paper's bound holds that step's gain besides the formulas' difference).
        let (Mf, Yn, e, sum_log_z) = vb_step_terms(&chol, &Y, y);
        if kernel_changed {
            Y = Yn;
            elbo = e;
        }
        let port = port_bounds(&C, &chol, &Mf, sum_log_z, s2);
        let (bound_port, bound_port_floored) = (port.exact, port.floored);
        let B = chol.solve(Y.as_ref());
        Ok(Box::new(VbmnpModel {
            x: x.clone(),
            kernel: kernel_from_phi(kernel, &phi),
            n_present: problem.n_classes,
            phi,
            psi,
            s2,
            chol,
            B,
            elbo,
            bound: match p.evidence {
                VbEvidence::Paper => paper_bound(elbo, n, K),
                VbEvidence::Elbo => elbo,
                VbEvidence::Port => bound_port,
                VbEvidence::PortFloored => bound_port_floored,
            },
            bound_paper: paper_bound(elbo, n, K),
            iters,
            stop,
            learned: learn,
            ess_last,
            ess_min,
            is_failed,
            bound_port,
            bound_port_floored,
            bound_port_det_free: port.det_free,
            port_log_det_c: port.log_det_c,
            also_predict: p.also_predict.clone(),
        }))
    }
}
