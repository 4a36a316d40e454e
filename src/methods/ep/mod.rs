//! EP and SEP for multi-class GP classification (Villacampa-Calvo & Hernandez-Lobato, ICML
//! 2017), with the corrections of shared/notes/villacampa-calvo2017.md.
//!
//! Model: the arg-max likelihood y = argmax_c f^c(x) (Kim & Ghahramani 2006), one GP per class
//! with its own kernel (the paper's: squared-exponential ARD plus white noise, the noise on
//! K(Z, Z) too) and its own M inducing inputs Z^c. The inducing values are kept, FITC
//! approximates the conditional of f given them, and each factor p(y_i | f_i) is replaced by
//! C - 1 pairwise factors Phi((m_y - m_k) / sqrt(s_y + s_k)) (eq. 6), each depending on two
//! one-dimensional projections of the inducing values: every site is rank one.
//!
//! - `ep`: one site per factor (N (C - 1) of them), refined from its own cavity.
//! - `sep`: stochastic EP, the sites of a class tied into one (memory C M^2, independent of N),
//!   the cavity removing 1/n_c of it (n_c the factors touching class c; notes §2.12).
//!
//! Training (Fig. 1's EP-inner-approx, the paper's method): alternate one refinement of the
//! sites with one step on the kernels' log-parameters and Z along the gradient of the
//! estimate log Z_q (eq. 10, direct dependence only). `batch: full` refines every site in
//! parallel, damped by 0.5 annealed by 0.99 per iteration, and steps with the per-parameter
//! adaptive rates of App. G (x1.02 while the sign of the gradient holds, x0.5 when it flips,
//! capped at 1; in the authors' units, log l^2 for a length-scale); a failed refinement (a negative cavity variance, a factor that is not positive
//! definite) is rolled back, the damping and the rates halved, and retried. A minibatch size
//! refines the batch's sites undamped and takes an Adam step with the likelihood part scaled
//! by N / |B|. Evidence: log Z_q over all rows (an approximation, not a bound), off the clock.
mod fit;
mod gradient;
mod sparse;
mod state;
mod sweep;
#[cfg(test)]
mod tests;

use crate::kernels::KernelSet;
use crate::methods::{FitContext, FitError, Fitted, HyperPolicy, Method, Problem, ProblemShape};
use crate::scalable::inducing::LengthscaleInit;
use crate::scalable::minibatch::Batch;
use crate::scalable::{InducingInit, LearningRate};
use serde::{Deserialize, Serialize};

/// Bumped by hand whenever this method's numbers change (part of every cell key).
pub const NUMERICS_VERSION: u32 = 2;

fn d_inducing() -> usize {
    10
}
fn d_init() -> InducingInit {
    InducingInit::Random { per_class: false }
}
fn d_true() -> bool {
    true
}
fn d_batch() -> Batch {
    Batch::Named(crate::scalable::minibatch::BatchName::Full)
}
fn d_damping() -> f64 {
    0.5
}
fn d_damping_decay() -> f64 {
    0.99
}
fn d_rate() -> f64 {
    0.01
}
/// Adam's "default settings" (the authors' stochastic code: 1e-3).
fn d_adam_lr() -> LearningRate {
    LearningRate::Constant(1e-3)
}
/// The paper's 250 iterations (UCI tables).
fn d_max_iters() -> u64 {
    250
}
fn d_retries() -> u32 {
    30
}
fn d_scheme() -> Scheme {
    Scheme::InnerApprox
}
fn d_outer_tol() -> f64 {
    1e-3
}
fn d_outer_sweeps() -> u64 {
    1000
}

/// How site refinements and hyper-parameter steps alternate (the paper's Fig. 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scheme {
    /// One refinement, one step (the paper's method).
    InnerApprox,
    /// Refinements until the largest site change is below `outer_tol`, then one step
    /// (traditional EP; batch only).
    Outer,
    /// As `inner_approx`, but the step follows the full derivative of log Z_q with the sites
    /// held fixed (cavities and q moving with the kernels and Z), not eq. 10's (Fig. 1's
    /// EP-inner-exact; `ep` with batch: full only).
    InnerExact,
}

/// What moves the kernels and Z after a refinement.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Step {
    /// App. G's adaptive rates (x1.02 while a gradient keeps its sign, x0.5 when it flips).
    Adaptive,
    /// Adam with `adam_lr` on the full-data gradient.
    Adam,
}

/// Settings as written in a spec (`method: ep` or `method: sep`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EpParams {
    /// M, inducing inputs per class (ignored when `inducing_fraction` is set).
    #[serde(default = "d_inducing")]
    pub inducing: usize,
    /// M per class as a fraction of the training rows, rounded (the paper's 5%, 10%, 20%).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inducing_fraction: Option<f64>,
    /// How each class's Z starts; drawn independently per class (default: M random training
    /// inputs, the paper's).
    #[serde(default = "d_init")]
    pub inducing_init: InducingInit,
    /// Whether Z moves with the kernels.
    #[serde(default = "d_true")]
    pub learn_inducing: bool,
    /// `kernel` (default), `median_inducing` (every length-scale at the median pairwise
    /// distance of class 1's initial inducing inputs), `median_training` (of at most 10,000
    /// training inputs) or `sqrt_median_training` (its square root, the authors' start).
    #[serde(default, skip_serializing_if = "LengthscaleInit::is_kernel")]
    pub lengthscale_init: LengthscaleInit,
    /// `full` (batch EP, the tables) or a minibatch size.
    #[serde(default = "d_batch")]
    pub batch: Batch,
    /// Batch: the first iteration's damping (1 = plain EP).
    #[serde(default = "d_damping")]
    pub damping: f64,
    /// Batch: the damping's factor per iteration.
    #[serde(default = "d_damping_decay")]
    pub damping_decay: f64,
    /// Batch: the adaptive rates' start (App. G).
    #[serde(default = "d_rate")]
    pub rate: f64,
    /// Minibatch: Adam's rate.
    #[serde(default = "d_adam_lr")]
    pub adam_lr: LearningRate,
    /// Iterations (batch) or steps (minibatch) when no budget ends the run first.
    #[serde(default = "d_max_iters")]
    pub max_iters: u64,
    /// Batch: roll-backs allowed in a row before the fit fails.
    #[serde(default = "d_retries")]
    pub max_retries: u32,
    #[serde(default = "d_scheme")]
    pub scheme: Scheme,
    /// The step on the kernels and Z: by default `adaptive` in batch mode (the tables) and
    /// `adam` with minibatches; Villacampa-Calvo & Hernandez-Lobato's Fig. 3 says "ADAM with
    /// the default settings" for batch runs too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<Step>,
    /// `scheme: outer`: the sites' convergence threshold and the sweeps allowed per step.
    #[serde(default = "d_outer_tol")]
    pub outer_tol: f64,
    #[serde(default = "d_outer_sweeps")]
    pub outer_max_sweeps: u64,
    /// EP in batch mode, after a step on the kernels or Z moved the directions K^{-1} k_i:
    /// `stored` (default) keeps each site along the direction it was computed with and
    /// projects the tilted distributions on the new ones (the notes' formulas); `current`
    /// re-reads the site scalars along the new directions and rebuilds q; `lagged` keeps q and
    /// projects on the stored directions too, then stores the new sites along the new
    /// directions (the authors' batch R code).
    #[serde(default, skip_serializing_if = "SiteDirections::is_stored")]
    pub site_directions: SiteDirections,
    /// Batch, App. G's adaptive rates: the sign a length-scale's previous gradient is compared
    /// with. `own` (default, as App. G states): its own current gradient's; `summed`: the sign
    /// of the sum of every length-scale's current gradient (all classes and inputs), as the
    /// authors' batch R code does for EP and SEP (`sign$l == sign(sum(grad$gr_log_l))`; the
    /// notes call it a quirk). Amplitudes, noises and Z follow their own signs either way.
    #[serde(default, skip_serializing_if = "LengthscaleSign::is_own")]
    pub lengthscale_sign: LengthscaleSign,
    /// Predict (at the checkpoints and at the end) at an exponential moving average of the
    /// kernels' log-parameters and Z over the steps (`scalable::IterateAverage`, weights
    /// decaying by this factor a step: 0.999 is a time constant of 1,000 steps) instead of at
    /// the last step's, with the current sites. Training itself is unchanged, step for step.
    /// Off by default (the paper predicts at the last iterate).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub average_decay: Option<f64>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LengthscaleSign {
    #[default]
    Own,
    Summed,
}

impl LengthscaleSign {
    fn is_own(&self) -> bool {
        *self == LengthscaleSign::Own
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SiteDirections {
    #[default]
    Stored,
    Current,
    Lagged,
}

impl SiteDirections {
    fn is_stored(&self) -> bool {
        *self == SiteDirections::Stored
    }
}

impl EpParams {
    pub fn check(self, tied: bool) -> Result<Ep, String> {
        if self.inducing == 0 {
            return Err("settings.inducing: at least one inducing input".into());
        }
        if let Some(f) = self.inducing_fraction {
            if !(f > 0.0 && f <= 1.0) {
                return Err(format!("settings.inducing_fraction: in (0, 1], got {f}"));
            }
        }
        if self.batch == Batch::Size(0) {
            return Err("settings.batch: `full` or a minibatch size of at least 1".into());
        }
        if !(self.damping > 0.0 && self.damping <= 1.0 && self.damping_decay > 0.0 && self.damping_decay <= 1.0) {
            return Err(format!("settings.damping, damping_decay: in (0, 1], got {} and {}", self.damping, self.damping_decay));
        }
        if !(self.rate > 0.0 && self.rate.is_finite()) {
            return Err(format!("settings.rate: a positive number, got {}", self.rate));
        }
        self.adam_lr.validate("settings.adam_lr")?;
        if self.scheme == Scheme::Outer && !self.batch.is_full() {
            return Err("settings.scheme: outer refines all sites to convergence, so it needs batch: full".into());
        }
        if self.scheme == Scheme::InnerExact && (tied || !self.batch.is_full()) {
            return Err(
                "settings.scheme: inner_exact differentiates every factor's own site, so it needs method: ep and batch: full".into()
            );
        }
        if !self.site_directions.is_stored() && (tied || !self.batch.is_full()) {
            return Err(
                "settings.site_directions: current and lagged move every factor's own site, so they need method: ep and batch: full".into(),
            );
        }
        let adaptive = self.step.map_or(self.batch.is_full(), |s| s == Step::Adaptive);
        if !self.lengthscale_sign.is_own() && !adaptive {
            return Err("settings.lengthscale_sign: summed changes App. G's adaptive rates, so it needs step: adaptive (the default with batch: full)".into());
        }
        if let Some(d) = self.average_decay {
            if !(0.0..1.0).contains(&d) {
                return Err(format!("settings.average_decay: in [0, 1), got {d}"));
            }
        }
        if !(self.outer_tol > 0.0) || self.outer_max_sweeps == 0 {
            return Err("settings.outer_tol: positive; settings.outer_max_sweeps: at least 1".into());
        }
        Ok(Ep { params: self, tied })
    }

    /// M for `n` training rows.
    pub fn inducing_for(&self, n: usize) -> usize {
        crate::scalable::inducing::count(self.inducing, self.inducing_fraction, n)
    }
}

/// Checked configuration of `method: ep` (`tied: false`) or `method: sep` (`tied: true`).
pub struct Ep {
    pub params: EpParams,
    pub tied: bool,
}

impl Method for Ep {
    fn name(&self) -> &'static str {
        if self.tied {
            "sep"
        } else {
            "ep"
        }
    }

    fn supports(&self, shape: &ProblemShape, kernels: &KernelSet, _hyper: HyperPolicy) -> Result<(), String> {
        if shape.n_classes < 2 {
            return Err(format!("{}: at least 2 classes", self.name()));
        }
        kernels.check_classes(shape.n_classes, self.name())?;
        let m = self.params.inducing_for(shape.n_train);
        if m > shape.n_train {
            return Err(format!("{}: {m} inducing inputs per class but only {} training rows", self.name(), shape.n_train));
        }
        Ok(())
    }

    /// EP / SEP updates, at any policy.
    fn progress(&self, _shape: &ProblemShape, _hyper: HyperPolicy) -> crate::methods::Progress {
        crate::methods::Progress::both(true)
    }

    fn train(&self, problem: &Problem, kernels: &KernelSet, hyper: HyperPolicy, ctx: &mut FitContext) -> Result<Box<dyn Fitted>, FitError> {
        fit::train(self, problem, kernels, hyper, ctx)
    }
}
