//! Laplace approximation for the multinomial-logit GP (Rasmussen & Williams 2006,
//! Algorithms 3.3 and 3.4; Williams & Barber 1998), with the approximate log marginal
//! likelihood and its exact gradient for hyper-parameter learning. `likelihood: probit`
//! selects the binary-probit Laplace instead (GPML Alg. 3.1, 3.2, 5.1; submodule `probit`);
//! both share the damped Newton iteration and the hyper-parameter search below.
//!
//! Layout: latent vectors are class-major, f = [f^1; ...; f^C] with f^c in R^n. All C
//! latent functions share one kernel K (as in Girolami & Rogers 2006 and Chai 2012), so
//! the prior covariance is I_C (x) K. Nothing inverts K: every solve goes through
//! B_c = I + D_c^{1/2} K D_c^{1/2} (eigenvalues >= 1) and M M^T = sum_c E_c.
//!
//! Files: `newton.rs` the posterior mode (damped Newton on Psi), `gradient.rs` the approximate
//! evidence's gradient, `learn.rs` the hyper-parameter search both likelihoods share,
//! `model.rs` the fitted logit model and its predictive, `probit.rs` the binary-probit model.
mod gradient;
mod learn;
mod model;
mod newton;
mod probit;
#[cfg(test)]
mod tests;

pub use model::LaplaceModel;
pub use probit::LaplaceProbitModel;

use super::{parse_settings, Diagnostics, FitContext, FitError, Fitted, HyperPolicy, Method, Problem, ProblemShape};
use crate::kernels::{Kernel, KernelSet};
use gradient::evidence_and_grad;
use learn::{learn_kernel, SearchMode, WarmStart};
use newton::{find_mode, newton_ascent, Mode};
use serde::{Deserialize, Serialize};

/// Version of this method's numbers, part of every cell key: bump it when a change of the code
/// (here or in shared numerics it uses) changes any number the method computes, so stored cells
/// are recomputed. `tests/numerics_versions.rs` fails when the output changes without a bump.
pub const NUMERICS_VERSION: u32 = 5;

/// Settings as written in a spec (`method: laplace`, `settings: {...}`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LaplaceParams {
    /// Newton iterations allowed to find the posterior mode.
    #[serde(default = "default_newton_iters")]
    pub max_newton_iters: usize,
    /// Stop Newton when the objective changes by less than this (relative).
    #[serde(default = "default_newton_tol")]
    pub newton_tol: f64,
    /// Monte Carlo draws per test point for the predictive class probabilities (Alg. 3.4).
    #[serde(default = "default_mc_samples")]
    pub mc_samples: usize,
    /// L-BFGS iterations for hyper-parameter learning.
    #[serde(default = "default_hyper_iters")]
    pub max_hyper_iters: u64,
    /// Hyper-parameter learning has converged when an L-BFGS iteration changes the log
    /// evidence by less than this many nats. Below about 1e-6 the search walks along the flat
    /// directions of an ARD evidence (length-scales of irrelevant inputs drifting out): on
    /// thyroid 1e-10 took 283 evaluations to 103 for 1e-6, for 2e-9 nats of evidence (1e-10
    /// relative). Much looser stops can end on one short step far from the optimum (1e-4:
    /// thyroid 3.5 nats below it).
    #[serde(default = "default_hyper_tol")]
    pub hyper_tol: f64,
    /// `logit` (multinomial logit, C latent functions, any C >= 2) or `probit` (binary probit
    /// Phi(t f) with one latent function: exactly two classes, class index 1 is t = +1 as in
    /// `gibbs_mnp`'s binary model; predictions are exact, so `mc_samples` is unused).
    #[serde(default)]
    pub likelihood: LaplaceLikelihood,
    /// Further predictives the final model is also scored by, each metric suffixed by its
    /// name (`log_pred_sum_plug_in`): a diagnostic of which predictive a published number used.
    /// `plug_in`: the softmax of the latent predictive mean (the Monte Carlo predictive of
    /// GPML Alg. 3.4 averages it over the latent covariance).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub also_predict: Vec<crate::methods::AlsoPredict>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LaplaceLikelihood {
    #[default]
    Logit,
    Probit,
}

fn default_newton_iters() -> usize {
    100
}
fn default_newton_tol() -> f64 {
    1e-10
}
fn default_mc_samples() -> usize {
    4000
}
fn default_hyper_iters() -> u64 {
    100
}
fn default_hyper_tol() -> f64 {
    1e-6
}

impl Default for LaplaceParams {
    fn default() -> Self {
        parse_settings(&serde_json::Value::Null).expect("defaults parse")
    }
}

impl LaplaceParams {
    /// Check every rule; the error names the setting.
    pub fn check(self) -> Result<Laplace, String> {
        if self.max_newton_iters == 0 {
            return Err("settings.max_newton_iters must be at least 1".into());
        }
        if !(self.newton_tol > 0.0 && self.newton_tol < 1.0) {
            return Err(format!("settings.newton_tol must be in (0, 1), got {}", self.newton_tol));
        }
        if !(self.hyper_tol >= 0.0 && self.hyper_tol.is_finite()) {
            return Err(format!("settings.hyper_tol must be a number of nats >= 0, got {}", self.hyper_tol));
        }
        if self.mc_samples < 2 {
            return Err(format!("settings.mc_samples must be at least 2, got {}", self.mc_samples));
        }
        if self.likelihood == LaplaceLikelihood::Probit && !self.also_predict.is_empty() {
            return Err("settings.also_predict is for the logit model (likelihood: probit predicts exactly)".into());
        }
        Ok(Laplace { params: self })
    }
}

/// The checked method.
#[derive(Clone, Debug)]
pub struct Laplace {
    params: LaplaceParams,
}

impl Method for Laplace {
    fn name(&self) -> &'static str {
        "laplace"
    }

    fn supports(&self, shape: &ProblemShape, kernels: &KernelSet, _hyper: HyperPolicy) -> Result<(), String> {
        if !kernels.is_shared() {
            return Err("laplace: one kernel shared by all classes (prior I_C (x) K); per_class kernels are not supported".into());
        }
        if self.params.likelihood == LaplaceLikelihood::Probit && shape.n_classes != 2 {
            return Err(format!(
                "laplace with likelihood: probit is the binary model: exactly 2 classes, the data have {}",
                shape.n_classes
            ));
        }
        Ok(())
    }

    /// The hyper-parameter search's evaluations (a fixed kernel is one Newton solve).
    fn progress(&self, _shape: &ProblemShape, hyper: HyperPolicy) -> crate::methods::Progress {
        crate::methods::Progress::both(hyper == HyperPolicy::Learn)
    }

    fn train(&self, problem: &Problem, kernels: &KernelSet, hyper: HyperPolicy, ctx: &mut FitContext) -> Result<Box<dyn Fitted>, FitError> {
        let kernel = kernels.class(0);
        match self.params.likelihood {
            LaplaceLikelihood::Logit => Ok(Box::new(self.fit_model(problem, kernel, hyper, ctx)?)),
            LaplaceLikelihood::Probit => Ok(Box::new(self.fit_probit(problem, kernel, hyper, ctx)?)),
        }
    }
}

impl Laplace {
    /// `Method::fit` with the concrete model type, for `likelihood: logit` (`fit_probit` is
    /// the probit one).
    pub fn fit_model(
        &self,
        problem: &Problem,
        kernel: &dyn Kernel,
        hyper: HyperPolicy,
        ctx: &mut FitContext,
    ) -> Result<LaplaceModel, FitError> {
        problem.check("laplace")?;
        if self.params.likelihood != LaplaceLikelihood::Logit {
            return Err(FitError::Unsupported("laplace: fit_model is the logit path; settings.likelihood is probit".into()));
        }
        let mut diagnostics = Diagnostics::default();
        let model = |kernel: Box<dyn Kernel>, mode: Mode| -> Box<dyn Fitted> {
            Box::new(LaplaceModel {
                kernel,
                x_train: problem.x.clone(),
                mode,
                mc_samples: self.params.mc_samples,
                also_predict: Vec::new(),
                diagnostics: Diagnostics::default(),
            })
        };
        let kernel = match hyper {
            HyperPolicy::Fixed => kernel.clone_box(),
            HyperPolicy::Learn => learn_kernel(
                kernel,
                &self.params,
                ctx,
                &mut diagnostics,
                |k, warm| evidence_and_grad(k, problem, &self.params, warm),
                model,
            )?,
        };
        ctx.check_deadline()?;
        let K = kernel.gram(problem.x);
        let mode = find_mode(&K, problem.y, problem.n_classes, &self.params, &[])?;
        diagnostics.number("newton_iterations", mode.newton_iters as f64);
        diagnostics.number("newton_converged", if mode.newton_converged { 1.0 } else { 0.0 });
        diagnostics.jitter = (mode.M.jitter() > 0.0).then_some(mode.M.jitter());
        Ok(LaplaceModel {
            kernel,
            x_train: problem.x.clone(),
            mode,
            mc_samples: self.params.mc_samples,
            also_predict: self.params.also_predict.clone(),
            diagnostics,
        })
    }
}
