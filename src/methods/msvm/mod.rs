//! Single-machine multi-class SVMs, as MSVMpack (Lauer & Guermeur 2011) defines them and Chai
//! (2012, §9.4, Table 4) ran them: Weston-Watkins (`ww`), Crammer-Singer (`cs`), Lee-Lin-Wahba
//! (`llw`) and Guermeur-Monfrini's quadratic-loss M-SVM (`msvm2`), each with its bias, on the
//! one shared kernel of the set (Chai's sqexpiso: see the kernel note below).
//!
//! Files: `formulation.rs` the four machines' primal and dual algebra (one table), `block.rs` the
//! exact solution of one datum's block, `solver.rs` block coordinate ascent with the bias by the
//! method of multipliers, `model.rs` the fitted machine (labels only).
//!
//! Why hand-written: no maintained Rust crate implements these multi-class machines (checked on
//! docs.rs, 2026-11): linfa-svm 0.8 is a binary SMO (C / nu / one-class), multi-class only by
//! linfa's one-vs-all composition; ferrolearn-linear's `MultiClass::CrammerSinger` is liblinear's
//! linear Crammer-Singer (no kernel, no bias). None has WW, LLW or MSVM2, or MSVMpack's biases;
//! MSVMpack itself is C.
//!
//! Kernel: MSVMpack's Gaussian RBF is exp(-|x - x'|^2 / (2 sigma^2)), and Chai's grid value
//! theta is that sigma, the length-scale of sqexpiso (45) with sigma_x = 1 (C plays the role of
//! the signal variance). So theta maps onto mcgp's squared-exponential `lengthscale` with
//! `variance: 1`.
//!
//! The machines predict labels (argmax_k h_k(x)), not probabilities: `Prediction::labels_only`,
//! so cells are scored by their errors and carry no log-predictive metrics. Evidence: none.
//! Extra metric `n_sv` (data with a nonzero dual variable); diagnostics `dual_objective`,
//! `primal_objective`, `duality_gap` (primal - dual at the solution) and `infeasibility`
//! (largest |sum_i beta_ik|, the bias's equality constraints).
mod block;
mod formulation;
mod model;
mod solver;
#[cfg(test)]
mod tests;

pub use formulation::Formulation;
pub use model::MsvmModel;

use super::{parse_settings, Diagnostics, FitContext, FitError, Fitted, HyperPolicy, Method, Problem, ProblemShape};
use crate::kernels::KernelSet;
use ndarray::Axis;
use serde::{Deserialize, Serialize};
use solver::{objectives, solve, DualSolution, SolverSettings};

/// Version of this method's numbers, part of every cell key: bump it when a change of the code
/// (here or in shared numerics it uses) changes any number the method computes, so stored cells
/// are recomputed. `tests/numerics_versions.rs` fails when the output changes without a bump.
/// 2: the stopping tests scale with C below 1 (absolute tolerances stopped LLW after two sweeps
/// at C = 0.01).
pub const NUMERICS_VERSION: u32 = 2;

/// Settings as written in a spec (`method: msvm`, `settings: {...}`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MsvmParams {
    #[serde(default)]
    pub formulation: Formulation,
    /// The soft-margin parameter C.
    #[serde(default = "d_c")]
    pub c: f64,
    /// Stop when, after a sweep, no block moved by more than this, the bias moved by at most
    /// this, and the duality gap at that bias is at most this relative to the primal (margin
    /// units: (K_ii + rho) |delta alpha|, |delta b|, rho the solver's penalty); below C = 1,
    /// this times C (the outputs shrink with C).
    #[serde(default = "d_tol")]
    pub tol: f64,
    /// Sweeps over the data allowed; reaching it is `max_iterations`, and
    /// the model at that point is used (as Chai's footnote 8 did with MSVMpack).
    #[serde(default = "d_max_sweeps")]
    pub max_sweeps: u64,
}

fn d_c() -> f64 {
    1.0
}
fn d_tol() -> f64 {
    1e-3
}
fn d_max_sweeps() -> u64 {
    20_000
}

impl Default for MsvmParams {
    fn default() -> Self {
        parse_settings(&serde_json::Value::Null).expect("defaults parse")
    }
}

impl MsvmParams {
    /// Check every rule; the error names the setting.
    pub fn check(self) -> Result<Msvm, String> {
        if !(self.c.is_finite() && self.c > 0.0) {
            return Err(format!("settings.c must be a positive number, got {}", self.c));
        }
        if !(self.tol.is_finite() && self.tol > 0.0) {
            return Err(format!("settings.tol must be a positive number, got {}", self.tol));
        }
        if self.max_sweeps == 0 {
            return Err("settings.max_sweeps must be at least 1".into());
        }
        Ok(Msvm { params: self })
    }
}

/// The checked method.
#[derive(Clone, Debug)]
pub struct Msvm {
    params: MsvmParams,
}

impl Msvm {
    pub fn params(&self) -> &MsvmParams {
        &self.params
    }
}

impl Method for Msvm {
    fn name(&self) -> &'static str {
        "msvm"
    }

    fn supports(&self, shape: &ProblemShape, kernels: &KernelSet, hyper: HyperPolicy) -> Result<(), String> {
        if shape.n_classes < 2 {
            return Err(format!("msvm: needs at least two classes, the data have {}", shape.n_classes));
        }
        if !kernels.is_shared() {
            return Err("msvm: one kernel shared by the classes (no per_class)".into());
        }
        if hyper == HyperPolicy::Learn {
            return Err("msvm: a fixed kernel (hyper: fixed); an SVM has no evidence to learn it by, select C and the length-scale with `select:` instead".into());
        }
        Ok(())
    }

    /// Solver sweeps; no checkpoints.
    fn progress(&self, _shape: &ProblemShape, _hyper: HyperPolicy) -> super::Progress {
        super::Progress { budget: true, checkpoints: false }
    }

    fn train(&self, problem: &Problem, kernels: &KernelSet, _: HyperPolicy, ctx: &mut FitContext) -> Result<Box<dyn Fitted>, FitError> {
        let (x, y, q) = (problem.x, problem.y, problem.n_classes);
        let kernel = kernels.class(0);
        let k = kernel.gram(x);
        if (0..k.nrows()).any(|i| !(k[(i, i)].is_finite() && k[(i, i)] > 0.0)) {
            return Err(FitError::Numerical("msvm: a kernel diagonal entry is not positive".into()));
        }
        // An off-diagonal NaN would pass every stopping test (f64::max skips NaN) and end as a
        // NaN decision value at prediction: refused here, where its cause is.
        if !(0..k.ncols()).all(|j| (0..k.nrows()).all(|i| k[(i, j)].is_finite())) {
            return Err(FitError::Numerical("msvm: the kernel matrix has a non-finite entry".into()));
        }
        let p = &self.params;
        let settings = SolverSettings { c: p.c, tol: p.tol, max_sweeps: p.max_sweeps };
        let sol = solve(p.formulation, &k, y, q, settings, Some(ctx))?;
        let obj = objectives(p.formulation, &sol, y, p.c);
        let sv: Vec<usize> = (0..y.len()).filter(|&i| sol.alpha[i].iter().any(|a| *a != 0.0)).collect();
        let mut diagnostics = Diagnostics { iterations: Some(sol.sweeps), stop_reason: Some(sol.stop), ..Default::default() };
        diagnostics
            .number("dual_objective", obj.dual)
            .number("primal_objective", obj.primal)
            .number("duality_gap", obj.primal - obj.dual)
            // What the stopping rule certifies: the gap of the problem at the final bias, the
            // dual taken with the multiplier term b . S (S_k = sum_i beta_ik, zero at the
            // optimum); duality_gap above can be negative while S != 0.
            .number("duality_gap_at_bias", obj.primal - (obj.dual - bias_term(&sol)))
            .number("infeasibility", obj.infeasibility);
        diagnostics.note("model", format!("{} multi-class SVM, C = {}, bias by the method of multipliers", p.formulation.name(), p.c));
        Ok(Box::new(MsvmModel {
            formulation: p.formulation,
            kernel: kernel.clone_box(),
            x_sv: x.select(Axis(0), &sv),
            beta_sv: sv.iter().map(|&i| sol.beta[i].clone()).collect(),
            bias: sol.bias.clone(),
            n_sv: sv.len(),
            diagnostics,
        }))
    }
}

/// b . S, S_k = sum_i beta_ik: the multiplier term the solver's certificate subtracts from the
/// dual at a bias b.
pub(super) fn bias_term(sol: &DualSolution) -> f64 {
    sol.bias.iter().enumerate().map(|(k, b)| b * sol.beta.iter().map(|row| row[k]).sum::<f64>()).sum()
}
