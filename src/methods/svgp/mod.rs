//! SVI-MGPC: the sparse variational multi-class GP classifier of Hensman, Matthews &
//! Ghahramani (AISTATS 2015) trained on minibatches (GPflow's SVGP with a MultiClass
//! likelihood).
//!
//! C latent GPs f^c share M inducing inputs Z; q(u^c) is a full-covariance Gaussian in the
//! whitened parameterisation u^c = L v^c (K(Z, Z) = L L^T, v^c ~ N(m_c, S_c)); kernels are
//! shared or one per class. The likelihood is robust-max (epsilon, 1-D Gauss-Hermite
//! quadrature) or softmax (Monte Carlo). Each step takes a minibatch, scales its expected
//! log-likelihood by N / |B|, moves q by a natural-gradient step and the kernel's
//! log-parameters and Z by Adam (`optimizer: natgrad_adam`, the default), or everything by
//! Adam (`optimizer: adam`). Evidence: the full-data ELBO, a lower bound, computed off the
//! clock at checkpoints and at the end.
mod elbo;
mod fit;
mod lbfgs;
mod model;
mod posterior;
#[cfg(test)]
mod tests;

pub use model::SvgpModel;

use crate::kernels::KernelSet;
use crate::likelihoods::marginal::{ExpectedLogLik, RobustMax, SoftmaxMc};
use crate::methods::optimize::{FirstStep, LengthscaleCoordinate};
use crate::methods::{FitContext, FitError, Fitted, HyperPolicy, Method, Problem, ProblemShape};
use crate::scalable::inducing::LengthscaleInit;
use crate::scalable::{InducingInit, LearningRate};
use rand_distr::{Distribution, StandardNormal};
use rand_pcg::Pcg64;
use serde::{Deserialize, Serialize};

/// Bumped by hand whenever this method's numbers change (part of every cell key).
pub const NUMERICS_VERSION: u32 = 5;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LikelihoodKind {
    RobustMax,
    Softmax,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Optimizer {
    /// Natural-gradient steps for q(u), Adam for the kernel and Z.
    NatgradAdam,
    /// Adam for everything (q as mean and lower-triangular square root).
    Adam,
    /// Batch L-BFGS on the full-data ELBO over everything (q as for `adam`), `max_iters`
    /// iterations (Villacampa-Calvo & Hernandez-Lobato's VI on the UCI tables: 250);
    /// minibatch settings are ignored. A budget's `iterations` and the checkpoint schedule
    /// count objective evaluations (line-search trials included), as `laplace`'s do; each
    /// checkpoint scores the best point so far.
    Lbfgs,
}

fn d_m() -> usize {
    100
}
fn d_batch() -> usize {
    200
}
fn d_eps() -> f64 {
    1e-3
}
fn d_nodes() -> usize {
    20
}
fn d_train_samples() -> usize {
    20
}
fn d_predict_samples() -> usize {
    200
}
/// 0.316 (t + 1000)^-0.5: 0.01 at the start (GPflow's constant), 0.0032 after 9000 steps. With
/// natural gradients holding q(u), a constant 0.01 keeps Z and the kernel moving late in a run:
/// on MNIST (M = 200, |B| = 200) the test error wandered between 3.12% and 3.47% from one
/// checkpoint to the next after 9000 steps. This decay reached 3.04% at 78 s and 2.92% / NLL
/// 0.102 at 150 s against the constant's 3.43% / 0.124 (150 s probes at commit 92b72cc).
fn d_adam_lr() -> LearningRate {
    LearningRate::Decay { base: 0.316, tau: 1000.0, kappa: 0.5 }
}
/// (t + 10)^-0.75: 0.18 at the start, 0.03 after 100 steps, 0.006 after 1000. A constant step
/// keeps q an average of the last ~1/gamma minibatch targets, each scaled by N / |B|: on MNIST
/// (60k, |B| = 200) a constant 0.1 averages ~2000 images at the precision of 60000, and its
/// full-data ELBO fell from -68k to -138k over 600 s while the error stalled at 5.4%. This
/// Robbins-Monro schedule reached 3.46% after 1500 steps, ELBO -33k (Adam alone: 8%).
fn d_natgrad_lr() -> LearningRate {
    LearningRate::Decay { base: 1.0, tau: 10.0, kappa: 0.75 }
}
fn d_true() -> bool {
    true
}
fn d_max_iters() -> u64 {
    1_000_000
}
fn d_lengthscale_init() -> LengthscaleInit {
    LengthscaleInit::Kernel
}

/// Settings as written in a spec (`method: svgp`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SvgpParams {
    /// M, the number of inducing inputs (per set; ignored when `inducing_fraction` is set).
    #[serde(default = "d_m")]
    pub inducing: usize,
    /// M as a fraction of the training rows, rounded (Villacampa-Calvo & Hernandez-Lobato's
    /// 5%, 10%, 20% per class).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inducing_fraction: Option<f64>,
    /// How Z starts (default k-means on at most 20k rows).
    #[serde(default)]
    pub inducing_init: InducingInit,
    /// Whether Adam moves Z.
    #[serde(default = "d_true")]
    pub learn_inducing: bool,
    /// One set of M inducing inputs per class, drawn independently (Villacampa-Calvo &
    /// Hernandez-Lobato's VI), instead of one set shared by the classes.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub inducing_per_class: bool,
    #[serde(default = "d_likelihood")]
    pub likelihood: LikelihoodKind,
    /// Robust-max: probability mass spread over the other classes.
    #[serde(default = "d_eps")]
    pub epsilon: f64,
    /// Robust-max: Gauss-Hermite nodes.
    #[serde(default = "d_nodes")]
    pub quadrature_nodes: usize,
    /// Softmax: Monte Carlo draws per row for the expected log-likelihood.
    #[serde(default = "d_train_samples")]
    pub train_samples: usize,
    /// Softmax: Monte Carlo draws per row for the predictive.
    #[serde(default = "d_predict_samples")]
    pub predict_samples: usize,
    #[serde(default = "d_batch")]
    pub batch_size: usize,
    #[serde(default = "d_optimizer")]
    pub optimizer: Optimizer,
    #[serde(default = "d_adam_lr")]
    pub adam_lr: LearningRate,
    #[serde(default = "d_natgrad_lr")]
    pub natgrad_lr: LearningRate,
    /// `retracted` (default): Lin, Schmidt & Khan (2020)'s positive-definite step, first-order
    /// equal to the natural-gradient step; `plain`: the natural-gradient step itself, halved
    /// where the new precision would not be positive definite. Robust-max is not log-concave:
    /// on 5k MNIST images plain steps of 0.01 stalled at 51% test error, retracted steps of 0.1
    /// gave 9% after 100 steps.
    #[serde(default = "d_natgrad_rule")]
    pub natgrad_rule: NatgradRule,
    /// Steps when no budget ends the run first.
    #[serde(default = "d_max_iters")]
    pub max_iters: u64,
    #[serde(default = "d_lengthscale_init")]
    pub lengthscale_init: LengthscaleInit,
    /// `true` (default): q(v) over whitened inducing values u = L v is the parameter, held
    /// fixed when the kernel or Z move; `false`: q(u) itself (GPflow's whiten=False).
    #[serde(default = "d_true")]
    pub whiten: bool,
    /// `optimizer: lbfgs`: the first trial step, `gradient` (default) or `unit_length` (1 / |g|
    /// times the gradient, Fortran L-BFGS-B's start). Robust-max costs log epsilon per
    /// misordered row, so the start gradient is steep: on svmguide2 the gradient-long first step
    /// took a class's amplitude to 1e13, where that class's noise outvotes the others' signal.
    #[serde(default, skip_serializing_if = "FirstStep::is_default")]
    pub lbfgs_first_step: FirstStep,
    /// `optimizer: lbfgs`: curvature pairs kept (default 10; R's `optim`, which the authors'
    /// VI ran, keeps 5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lbfgs_pairs: Option<usize>,
    /// `optimizer: lbfgs`: the coordinate L-BFGS steps each length-scale in, `log` (default) or
    /// `log_squared` (log l^2, the parameter of the authors' R code, whose kernel divides the
    /// inputs by sqrt(l)): the optimum is the same, the path is not.
    #[serde(default, skip_serializing_if = "LengthscaleCoordinate::is_log")]
    pub lbfgs_lengthscale: LengthscaleCoordinate,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NatgradRule {
    Plain,
    Retracted,
}

fn d_natgrad_rule() -> NatgradRule {
    NatgradRule::Retracted
}

fn d_likelihood() -> LikelihoodKind {
    LikelihoodKind::RobustMax
}

fn d_optimizer() -> Optimizer {
    Optimizer::NatgradAdam
}

impl SvgpParams {
    pub fn check(self) -> Result<Svgp, String> {
        if self.inducing == 0 {
            return Err("settings.inducing: at least one inducing input".into());
        }
        if let Some(f) = self.inducing_fraction {
            if !(f > 0.0 && f <= 1.0) {
                return Err(format!("settings.inducing_fraction: in (0, 1], got {f}"));
            }
        }
        if self.batch_size == 0 {
            return Err("settings.batch_size: at least 1".into());
        }
        if !(self.epsilon > 0.0 && self.epsilon < 1.0) {
            return Err(format!("settings.epsilon: in (0, 1), got {}", self.epsilon));
        }
        if self.lbfgs_pairs == Some(0) {
            return Err("settings.lbfgs_pairs: at least 1".into());
        }
        if self.quadrature_nodes == 0 || self.train_samples == 0 || self.predict_samples == 0 {
            return Err("settings.quadrature_nodes, train_samples, predict_samples: at least 1".into());
        }
        self.adam_lr.validate("settings.adam_lr")?;
        self.natgrad_lr.validate("settings.natgrad_lr")?;
        let top = match self.natgrad_lr {
            LearningRate::Constant(r) => r,
            LearningRate::Decay { base, tau, kappa } => base * (1.0 + tau).powf(-kappa),
            LearningRate::Warmup { start, end, .. } => start.max(end),
        };
        if top > 1.0 {
            return Err(format!("settings.natgrad_lr: a natural-gradient step above 1 overshoots, got {top}"));
        }
        let likelihood = match self.likelihood {
            LikelihoodKind::RobustMax => SvgpLikelihood::RobustMax(RobustMax::new(self.epsilon, self.quadrature_nodes)),
            LikelihoodKind::Softmax => SvgpLikelihood::Softmax { train_samples: self.train_samples, predict_samples: self.predict_samples },
        };
        Ok(Svgp { params: self, likelihood })
    }
}

/// The likelihood with its integration rule.
#[derive(Clone, Debug)]
pub enum SvgpLikelihood {
    RobustMax(RobustMax),
    Softmax {
        train_samples: usize,
        predict_samples: usize,
    },
    /// Tests only: y_n = targets[n] + N(0, noise) with "class" n the row's index, one latent.
    #[cfg(test)]
    Gaussian {
        targets: Vec<f64>,
        noise: f64,
    },
}

fn normal_draws(n: usize, c: usize, rng: &mut Pcg64) -> Vec<Vec<f64>> {
    (0..n).map(|_| (0..c).map(|_| StandardNormal.sample(rng)).collect()).collect()
}

impl SvgpLikelihood {
    /// E[log p(y | f)] under independent marginals; the softmax draws from `rng`.
    pub fn expected_log_lik(&self, mean: &[f64], var: &[f64], y: usize, rng: &mut Pcg64) -> ExpectedLogLik {
        match self {
            SvgpLikelihood::RobustMax(rm) => rm.expected_log_lik(mean, var, y),
            SvgpLikelihood::Softmax { train_samples, .. } => {
                SoftmaxMc.expected_log_lik(mean, var, y, &normal_draws(*train_samples, mean.len(), rng))
            }
            #[cfg(test)]
            SvgpLikelihood::Gaussian { targets, noise } => {
                let r = targets[y] - mean[0];
                ExpectedLogLik {
                    value: -0.5 * (2.0 * std::f64::consts::PI * noise).ln() - (r * r + var[0]) / (2.0 * noise),
                    d_mean: vec![r / noise],
                    d_var: vec![-0.5 / noise],
                }
            }
        }
    }

    /// Predictive class probabilities; the softmax draws from `rng`.
    pub fn predictive(&self, mean: &[f64], var: &[f64], rng: &mut Pcg64) -> Vec<f64> {
        match self {
            SvgpLikelihood::RobustMax(rm) => rm.predictive(mean, var),
            SvgpLikelihood::Softmax { predict_samples, .. } => {
                SoftmaxMc.predictive(mean, var, &normal_draws(*predict_samples, mean.len(), rng))
            }
            #[cfg(test)]
            SvgpLikelihood::Gaussian { .. } => vec![1.0],
        }
    }
}

/// Checked configuration of `method: svgp`.
pub struct Svgp {
    pub params: SvgpParams,
    likelihood: SvgpLikelihood,
}

impl Method for Svgp {
    fn name(&self) -> &'static str {
        "svgp"
    }

    fn supports(&self, shape: &ProblemShape, kernels: &KernelSet, _hyper: HyperPolicy) -> Result<(), String> {
        if shape.n_classes < 2 {
            return Err("svgp: at least 2 classes".into());
        }
        kernels.check_classes(shape.n_classes, "svgp")?;
        let m = crate::scalable::inducing::count(self.params.inducing, self.params.inducing_fraction, shape.n_train);
        if m > shape.n_train {
            return Err(format!("svgp: {m} inducing inputs but only {} training rows", shape.n_train));
        }
        Ok(())
    }

    /// SVI steps or batch L-BFGS objective evaluations, at any policy.
    fn progress(&self, _shape: &ProblemShape, _hyper: HyperPolicy) -> crate::methods::Progress {
        crate::methods::Progress::both(true)
    }

    fn train(&self, problem: &Problem, kernels: &KernelSet, hyper: HyperPolicy, ctx: &mut FitContext) -> Result<Box<dyn Fitted>, FitError> {
        fit::train(self, problem, kernels, hyper, ctx)
    }
}
