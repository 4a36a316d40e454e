//! The informative vector machine (Seeger, Lawrence & Herbrich, "Efficient nonparametric
//! Bayesian modelling with sparse Gaussian process approximations"; Lawrence, Seeger &
//! Herbrich 2003): one latent GP u ~ GP(0, K) whose likelihood is kept, by ADF site
//! approximations, for d active points only, chosen one at a time by greedy forward selection.
//! Notes: shared/notes/seeger-lawrence-herbrich-ivm.md.
//!
//! This is the binary IVM:
//! - `state.rs` the representation A = K - M M^T with its O(n d) inclusion update, its
//!   recomputation for a fixed active set, and eq. 11's criterion;
//! - `select.rs` the selection criterion (eq. 5's information gain, or the differential
//!   entropy) over every non-active point or a random subset per inclusion;
//! - `learn.rs` hyper-parameter learning (eq. 11-14): major steps (reselection) and minor steps
//!   (L-BFGS with the active set frozen, sites per strategy), the paper's hyper-priors;
//! - `model.rs` prediction from the active set.
//!
//! On two classes, class index 1 is y = +1 of the probit likelihood Phi(y (u + bias)) and class
//! 0 is y = -1; the evidence reported is eq. 11's approximation log Q(D) at the final active set
//! and sites. On C > 2 classes the method is c against the rest (§4.1): C binary IVMs, task c
//! with class c as y = +1, each learning its own hyper-parameters from the one kernel of the
//! set, combined by the vote on their log predictive probabilities log Q_c(y = +1 | x) (the
//! paper's combination for Table 4; `model.rs`). One binary task of a C-class dataset is a
//! spec's `task: {one_vs_rest: c}`. The factorised multi-way IVM (`methods::ivm_multiway`)
//! reuses this module's representation, one per class.
//! Gaussian-noise sites exist for the tests (with d = n the IVM is the exact GP regression
//! posterior and eq. 11 its exact log marginal likelihood).
mod learn;
pub(crate) mod model;
mod select;
pub(crate) mod state;
#[cfg(test)]
mod tests;
mod virtual_vectors;

pub use learn::{HyperPrior, Strategy};
pub use model::{IvmModel, OneVsRestModel};
pub use select::{Criterion, Selection};
pub use virtual_vectors::VirtualVectors;

use super::{parse_settings, Diagnostics, FitContext, FitError, Fitted, HyperPolicy, Method, Problem, ProblemShape, StopReason};
use crate::kernels::{Kernel, KernelSet};
use crate::likelihoods::univariate::CavityMoments;
use crate::methods::optimize::{FirstStep, LineSearchKind};
use ndarray::{Array2, Axis};
use select::best_candidate;
use serde::{Deserialize, Serialize};
use state::{kernel_column, IvmState};

/// Version of this method's numbers, part of every cell key: bump it when a change of the code
/// (here or in shared numerics it uses) changes any number the method computes, so stored cells
/// are recomputed. `tests/numerics_versions.rs` fails when the output changes without a bump.
pub const NUMERICS_VERSION: u32 = 2;

/// Settings as written in a spec (`method: ivm`, `settings: {...}`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IvmParams {
    /// d, the number of active points (capped at the training rows). Fewer are included when
    /// no candidate is left whose site precision exceeds `min_site_precision`.
    #[serde(default = "d_active_size")]
    pub active_size: usize,
    #[serde(default)]
    pub criterion: Criterion,
    #[serde(default)]
    pub selection: Selection,
    /// Points scored per inclusion with `selection: randomized`.
    #[serde(default = "d_candidates")]
    pub candidates: usize,
    /// `selection: schedule`: the bound B on the stub rows kept, |J~| d numbers (MNIST: 3.6e7).
    #[serde(default = "d_memory_entries")]
    pub memory_entries: usize,
    /// `selection: schedule`: inclusions between two narrowings of the selection index (k).
    #[serde(default = "d_block")]
    pub block: usize,
    /// `selection: schedule`: the fraction of a narrowed index taken by the largest gains (rho).
    #[serde(default = "d_keep_best")]
    pub keep_best: f64,
    /// The probit intercept: P(y | u) = Phi(y (u + bias)); with `hyper: learn` its start value.
    #[serde(default)]
    pub bias: f64,
    /// With `hyper: learn`: learn the intercept too (eq. 12-13), as the paper does.
    #[serde(default = "d_true")]
    pub learn_bias: bool,
    /// With `hyper: learn`: the sites during minor steps (`constant`, the paper's; `hybrid`; `exact`).
    #[serde(default)]
    pub strategy: Strategy,
    /// With `hyper: learn`: major + minor steps before the final major step (the paper's 15).
    #[serde(default = "d_outer_iters")]
    pub outer_iters: u64,
    /// With `hyper: learn`: L-BFGS iterations (line searches) per minor step, at most (the paper's 8).
    #[serde(default = "d_inner_iters")]
    pub inner_iters: u64,
    /// With `hyper: learn`: end a minor step at its first line search that fails the strong
    /// Wolfe conditions (at the best point seen), as the paper's runs did ("more than half of
    /// the inner loops terminate with a failed line search", §6.1.1), instead of going on from
    /// the point the line search returned.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stop_on_failed_line_search: bool,
    /// With `hyper: learn`: the minor steps' line search, `more_thuente` (steered by the
    /// gradient) or `decrease` (cost values only, the "robust line search code which neglects
    /// gradient information" that §3.3 names for the exact strategy, whose gradient is not its
    /// cost's; a search that finds no decrease ends the minor step).
    #[serde(default, skip_serializing_if = "LineSearchKind::is_default")]
    pub line_search: LineSearchKind,
    /// With `hyper: learn`: the length of each minor step's first (steepest-descent) L-BFGS
    /// trial step, `gradient` (argmin's, the default) or `unit_length` (Fortran L-BFGS-B's, as
    /// `gfitc` and `svgp` offer): every minor step restarts L-BFGS, so this is the first trial
    /// point of every outer iteration.
    #[serde(default, skip_serializing_if = "FirstStep::is_default")]
    pub lbfgs_first_step: FirstStep,
    /// With `hyper: learn`: carry L-BFGS's curvature pairs from each minor step to the next
    /// (one quasi-Newton run whose search directions continue across reselections, a reading
    /// of §3.3's "major steps compute search directions, along which we descend using line
    /// searches with minor steps") instead of restarting it with a steepest-descent step at
    /// every minor step (the default). Pairs never span a major step: each is taken within one
    /// minor step, on one frozen criterion.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub keep_lbfgs_memory: bool,
    /// With `hyper: learn`: `paper` (§6.1's priors on v, w and the intercept) or `none`.
    #[serde(default)]
    pub hyper_prior: HyperPrior,
    /// A candidate is skipped unless its new site precision pi satisfies pi K_jj > this
    /// (the paper's epsilon, relative to the prior variance; pi^{-1/2} enters the update).
    #[serde(default = "d_min_site_precision")]
    pub min_site_precision: f64,
    /// Virtual informative vectors (§5, §6.5): after the fit, the active images' one-pixel
    /// translations join the training set and `active_size` points are selected again at the
    /// fitted hyper-parameters (`virtual_vectors.rs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub virtual_vectors: Option<VirtualVectors>,
}

fn d_active_size() -> usize {
    200
}
fn d_candidates() -> usize {
    500
}
fn d_memory_entries() -> usize {
    36_000_000
}
fn d_block() -> usize {
    100
}
fn d_keep_best() -> f64 {
    0.5
}
fn d_min_site_precision() -> f64 {
    1e-8
}
fn d_true() -> bool {
    true
}
fn d_outer_iters() -> u64 {
    15
}
fn d_inner_iters() -> u64 {
    8
}

impl Default for IvmParams {
    fn default() -> Self {
        parse_settings(&serde_json::Value::Null).expect("defaults parse")
    }
}

impl IvmParams {
    /// Check every rule; the error names the setting.
    pub fn check(self) -> Result<Ivm, String> {
        if self.active_size == 0 {
            return Err("settings.active_size must be at least 1".into());
        }
        if self.candidates == 0 {
            return Err("settings.candidates must be at least 1".into());
        }
        if self.block == 0 {
            return Err("settings.block must be at least 1".into());
        }
        if self.memory_entries == 0 {
            return Err("settings.memory_entries must be at least 1".into());
        }
        if !(0.0..=1.0).contains(&self.keep_best) {
            return Err(format!("settings.keep_best must be in [0, 1], got {}", self.keep_best));
        }
        if self.inner_iters == 0 {
            return Err("settings.inner_iters must be at least 1".into());
        }
        if self.keep_lbfgs_memory && !self.lbfgs_first_step.is_default() {
            // A unit-length first step runs in rescaled coordinates, whose pairs are not carried.
            return Err("settings.keep_lbfgs_memory: true needs settings.lbfgs_first_step: gradient (the carried pairs set every step after the first)".into());
        }
        if !self.bias.is_finite() {
            return Err(format!("settings.bias must be finite, got {}", self.bias));
        }
        if !(self.min_site_precision > 0.0 && self.min_site_precision < 1.0) {
            return Err(format!("settings.min_site_precision must be in (0, 1), got {}", self.min_site_precision));
        }
        if let Some(v) = &self.virtual_vectors {
            v.check()?;
        }
        Ok(Ivm { params: self })
    }
}

/// The likelihood of one site: what the ADF update and the selection score need.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum SiteLik {
    /// Phi(y (u + bias)), targets y = +-1.
    Probit { bias: f64 },
    /// N(y | u, noise_var), real targets.
    #[cfg_attr(not(test), allow(dead_code))]
    Gaussian { noise_var: f64 },
}

impl SiteLik {
    pub fn moments(&self, target: f64, m: f64, v: f64) -> CavityMoments {
        match *self {
            SiteLik::Probit { bias } => CavityMoments::probit(target, bias, m, v),
            SiteLik::Gaussian { noise_var } => CavityMoments::gaussian(target, noise_var, m, v),
        }
    }
}

/// Which problem a binary fit solves: the whole (two-class) problem, or task c of c against the
/// rest. A task's trace names start with `c<k>_` (the C tasks share one trace) and it takes no
/// checkpoints (its snapshot is no model of the C-class problem).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Task {
    Whole,
    AgainstTheRest(usize),
}

impl Task {
    pub fn trace_name(self, what: &str) -> String {
        match self {
            Task::Whole => what.to_string(),
            Task::AgainstTheRest(c) => format!("c{c}_{what}"),
        }
    }
}

/// The checked method.
#[derive(Clone, Debug)]
pub struct Ivm {
    params: IvmParams,
}

/// How a selection run ended.
pub(crate) struct Selected {
    pub state: IvmState,
    pub stop: StopReason,
    /// Set when fewer than d points were included because no candidate qualified.
    pub exhausted: bool,
}

impl Ivm {
    /// Greedy (or randomized greedy) forward selection of up to d active points with their
    /// ADF sites (Algorithm 1). `on_inclusion(k, state)` runs after inclusion k (from 1); a
    /// `FitError::Stop` from it ends the selection there as a normal stop.
    pub(crate) fn select(
        &self,
        kernel: &dyn Kernel,
        x: &Array2<f64>,
        targets: &[f64],
        lik: SiteLik,
        ctx: &mut FitContext,
        mut on_inclusion: impl FnMut(u64, &IvmState, &FitContext) -> Result<(), FitError>,
    ) -> Result<Selected, FitError> {
        let n = x.nrows();
        assert_eq!(targets.len(), n);
        let d_max = self.params.active_size.min(n);
        let kdiag = kernel.diag(x);
        if let Some(j) = kdiag.iter().position(|v| !(*v > 0.0 && v.is_finite())) {
            return Err(FitError::Numerical(format!("ivm: prior variance K({j}, {j}) = {} is not positive", kdiag[j])));
        }
        let mut state = IvmState::prior(kdiag);
        // Non-active positions in ascending order (ties in the score go to the smallest index).
        let mut remaining: Vec<usize> = (0..n).collect();
        // The rows of a narrowed selection index J~ (`selection: schedule`), position by position.
        let mut x_narrowed: Option<Array2<f64>> = None;
        let mut stop = StopReason::MaxIterations;
        let mut exhausted = false;
        while state.d() < d_max {
            ctx.check_deadline()?;
            let p = &self.params;
            if p.selection == Selection::Schedule && state.d() > 0 && state.d().is_multiple_of(p.block) {
                let size = select::schedule_size(remaining.len(), state.d(), p.block, d_max, p.memory_entries);
                if size < remaining.len() {
                    state = self.narrow(&state, &remaining, size, lik, targets, ctx);
                    x_narrowed = Some(x.select(Axis(0), state.rows.as_ref().expect("a narrowed state knows its rows")));
                    remaining = (0..state.n()).filter(|j| !state.active.contains(j)).collect();
                }
            }
            let candidates: Vec<usize> = match self.params.selection {
                Selection::Randomized if remaining.len() > self.params.candidates => {
                    let mut pick: Vec<usize> = rand::seq::index::sample(&mut *ctx.rng, remaining.len(), self.params.candidates)
                        .into_iter()
                        .map(|p| remaining[p])
                        .collect();
                    pick.sort_unstable();
                    pick
                }
                _ => remaining.clone(),
            };
            let Some(choice) = best_candidate(&state, lik, targets, &candidates, self.params.criterion, self.params.min_site_precision)
            else {
                exhausted = true;
                stop = StopReason::Converged;
                break;
            };
            let i = choice.index;
            let kcol = kernel_column(kernel, x_narrowed.as_ref().unwrap_or(x), i, state.kdiag[i]);
            state.include(i, &choice.moments, &kcol)?;
            remaining.retain(|&j| j != i);
            // The callback ends the selection early by returning a budget stop.
            match on_inclusion(state.d() as u64, &state, ctx) {
                Ok(()) => {}
                Err(FitError::Stop(reason)) => {
                    stop = reason;
                    break;
                }
                Err(e) => return Err(e),
            }
        }
        Ok(Selected { state, stop, exhausted })
    }

    /// The selection index narrowed to `size` of the non-active positions `remaining` (notes
    /// §2.5): the fraction `keep_best` with the largest gains under the current state (ties to
    /// the smaller position; invalid inclusions last), the rest drawn uniformly from the others;
    /// the active points always stay.
    fn narrow(&self, state: &IvmState, remaining: &[usize], size: usize, lik: SiteLik, targets: &[f64], ctx: &mut FitContext) -> IvmState {
        let p = &self.params;
        let mut scored: Vec<(usize, f64)> = remaining
            .iter()
            .map(|&j| {
                let moments = state.moments(lik, targets, j);
                let g = select::gain(&moments, state.h[j], state.a[j], p.criterion, p.min_site_precision / state.kdiag[j]);
                (j, g.unwrap_or(f64::NEG_INFINITY))
            })
            .collect();
        scored.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        let best = ((p.keep_best * size as f64).floor() as usize).min(size);
        let mut rest: Vec<usize> = scored[best..].iter().map(|&(j, _)| j).collect();
        rest.sort_unstable();
        let drawn = rand::seq::index::sample(&mut *ctx.rng, rest.len(), size - best).into_iter().map(|k| rest[k]);
        let mut keep: Vec<usize> = scored[..best].iter().map(|&(j, _)| j).chain(drawn).chain(state.active.iter().copied()).collect();
        keep.sort_unstable();
        state.restrict(&keep)
    }

    /// What every fit reports of its (final) selection.
    fn diagnostics(&self, sel: &Selected, n: usize) -> Diagnostics {
        let state = &sel.state;
        let mut diagnostics = Diagnostics {
            iterations: Some(state.d() as u64),
            stop_reason: Some(sel.stop),
            jitter: Some(state.chol.jitter()),
            ..Default::default()
        };
        diagnostics.number("active_size", state.d() as f64).number("variance_floor_hits", state.floor_hits as f64);
        // The settings' own spelling (`randomized`, `info_gain`), as a spec writes them.
        let spelled = |v: serde_json::Value| v.as_str().unwrap_or_default().to_string();
        let selection = spelled(serde_json::json!(self.params.selection));
        diagnostics.note("selection", format!("{selection}, criterion {}", spelled(serde_json::json!(self.params.criterion))));
        if sel.exhausted {
            diagnostics.note(
                "active_set",
                format!(
                    "stopped at d = {} < {}: no candidate with site precision above min_site_precision",
                    state.d(),
                    self.params.active_size.min(n)
                ),
            );
        }
        diagnostics
    }

    fn model(
        &self,
        kernel: &dyn Kernel,
        x: &Array2<f64>,
        state: &IvmState,
        lik: SiteLik,
        log_evidence: Option<f64>,
        diagnostics: Diagnostics,
    ) -> IvmModel {
        IvmModel { latent: model::ActiveSetPredictor::from_state(kernel, x, state), lik, log_evidence, diagnostics }
    }
}

impl Method for Ivm {
    fn name(&self) -> &'static str {
        "ivm"
    }

    fn supports(&self, shape: &ProblemShape, kernels: &KernelSet, hyper: HyperPolicy) -> Result<(), String> {
        if shape.n_classes < 2 {
            return Err(format!("ivm: at least two classes, the data have {}", shape.n_classes));
        }
        if !kernels.is_shared() {
            return Err("ivm: one latent GP per binary task, all from one kernel shared by the classes (no per_class)".into());
        }
        if hyper == HyperPolicy::Learn && self.params.hyper_prior == HyperPrior::Paper && kernels.class(0).as_sqexp().is_none() {
            return Err("ivm: settings.hyper_prior: paper is written for the squared-exponential kernel (type se); use hyper_prior: none for other kernels".into());
        }
        Ok(())
    }

    /// Inclusions (fixed kernel) or major steps (learning); checkpoints only for a binary problem
    /// (C > 2 runs one IVM per class against the rest, none of which is the whole model).
    fn progress(&self, shape: &ProblemShape, _hyper: HyperPolicy) -> crate::methods::Progress {
        crate::methods::Progress { budget: true, checkpoints: shape.n_classes == 2 }
    }

    fn train(&self, problem: &Problem, kernels: &KernelSet, hyper: HyperPolicy, ctx: &mut FitContext) -> Result<Box<dyn Fitted>, FitError> {
        let n_classes = problem.n_classes;
        let kernel = kernels.class(0);
        let sign = |c: usize| move |&k: &usize| if k == c { 1.0 } else { -1.0 };
        if n_classes == 2 {
            let targets: Vec<f64> = problem.y.iter().map(sign(1)).collect();
            return Ok(Box::new(self.fit_binary(kernel, problem.x, &targets, hyper, ctx, Task::Whole)?));
        }
        // c against the rest (§4.1): one binary IVM per class, fitted in class order. A task's
        // snapshot is no model of the C-class problem, so the tasks take no checkpoints.
        let tasks = (0..n_classes)
            .map(|c| {
                let targets: Vec<f64> = problem.y.iter().map(sign(c)).collect();
                self.fit_binary(kernel, problem.x, &targets, hyper, ctx, Task::AgainstTheRest(c))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Box::new(OneVsRestModel::new(tasks)))
    }
}

impl Ivm {
    /// The binary IVM on targets +-1 (the whole problem, class 1 against class 0, or one task of
    /// c against the rest), with learned or fixed hyper-parameters.
    fn fit_binary(
        &self,
        kernel: &dyn Kernel,
        x: &Array2<f64>,
        targets: &[f64],
        hyper: HyperPolicy,
        ctx: &mut FitContext,
        task: Task,
    ) -> Result<IvmModel, FitError> {
        if hyper == HyperPolicy::Learn {
            let learned = self.learn(kernel, x, targets, ctx, task)?;
            let lik = SiteLik::Probit { bias: learned.bias };
            let mut diagnostics = self.diagnostics(&learned.selected, x.nrows());
            diagnostics.iterations = Some(learned.major_steps);
            diagnostics.stop_reason = Some(learned.stop);
            diagnostics
                .number("bias", learned.bias)
                .number("criterion", learned.criterion)
                .number("hyper_evaluations", learned.evaluations as f64)
                .number("troubled_minor_steps", learned.troubled_minor_steps as f64)
                .number("failed_line_searches", learned.failed_line_searches as f64)
                .number("minor_steps_with_failed_line_search", learned.minor_steps_with_failed_line_search as f64);
            let spelled = |v: serde_json::Value| v.as_str().unwrap_or_default().to_string();
            diagnostics.note(
                "model",
                format!(
                    "binary probit IVM (one GP; class 1 is y = +1); kernel{} learned by {} major steps ({} strategy, up to {} L-BFGS iterations per minor step, hyper_prior {}), the last one the model",
                    if self.params.learn_bias { " and bias" } else { "" },
                    learned.major_steps,
                    spelled(serde_json::json!(self.params.strategy)),
                    self.params.inner_iters,
                    spelled(serde_json::json!(self.params.hyper_prior)),
                ),
            );
            if let Some(why) = &learned.first_trouble {
                diagnostics.note(
                    "minor_steps",
                    format!(
                        "{} of {} minor steps restarted or stopped on a failed line search; first: {why}",
                        learned.troubled_minor_steps,
                        learned.major_steps - 1
                    ),
                );
            }
            let state = &learned.selected.state;
            if let Some(v) = &self.params.virtual_vectors {
                return self.reselect_with_virtual_vectors(v, learned.kernel.as_ref(), x, targets, lik, state, ctx, diagnostics);
            }
            let log_evidence = state.log_evidence(lik, targets)?;
            return Ok(self.model(learned.kernel.as_ref(), x, state, lik, Some(log_evidence), diagnostics));
        }
        let lik = SiteLik::Probit { bias: self.params.bias };
        let sel = self.select(kernel, x, targets, lik, ctx, |k, state, ctx| {
            if task == Task::Whole && ctx.wants_checkpoint(k) {
                // The snapshot and its objective (eq. 11 at this active set) are built off the clock.
                let ev = ctx.off_clock(|| state.log_evidence(lik, targets).ok());
                ctx.checkpoint(k, ev, || Ok(Box::new(self.model(kernel, x, state, lik, ev, Diagnostics::default())) as Box<dyn Fitted>));
            }
            // At a fixed kernel the inclusions are the outer iterations a budget counts.
            ctx.budget_stop(k).map_or(Ok(()), |reason| Err(FitError::Stop(reason)))
        })?;
        let state = &sel.state;
        let mut diagnostics = self.diagnostics(&sel, x.nrows());
        diagnostics.note("model", "binary probit IVM (one GP; class 1 is y = +1), fixed kernel and bias");
        if let Some(v) = &self.params.virtual_vectors {
            return self.reselect_with_virtual_vectors(v, kernel, x, targets, lik, state, ctx, diagnostics);
        }
        let log_evidence = state.log_evidence(lik, targets)?;
        Ok(self.model(kernel, x, state, lik, Some(log_evidence), diagnostics))
    }

    /// The second stage of virtual informative vectors: the training set plus the translations
    /// of the fitted active images, `v.active_size` points selected on it at the fitted kernel
    /// and intercept; the model and its eq. 11 value are those of the augmented set.
    #[allow(clippy::too_many_arguments)]
    fn reselect_with_virtual_vectors(
        &self,
        v: &VirtualVectors,
        kernel: &dyn Kernel,
        x: &Array2<f64>,
        targets: &[f64],
        lik: SiteLik,
        first: &IvmState,
        ctx: &mut FitContext,
        mut diagnostics: Diagnostics,
    ) -> Result<IvmModel, FitError> {
        let (x_aug, t_aug) = virtual_vectors::augment(v, x, targets, &first.active_rows()).map_err(FitError::Unsupported)?;
        let stage2 = Ivm { params: IvmParams { active_size: v.active_size, virtual_vectors: None, ..self.params.clone() } };
        let sel = stage2.select(kernel, &x_aug, &t_aug, lik, ctx, |_, _, _| Ok(()))?;
        let state = &sel.state;
        let virtual_active = state.active.iter().filter(|&&i| i >= x.nrows()).count();
        diagnostics
            .number("first_active_size", first.d() as f64)
            .number("virtual_added", (x_aug.nrows() - x.nrows()) as f64)
            .number("active_size", state.d() as f64)
            .number("virtual_active", virtual_active as f64)
            .number("variance_floor_hits", state.floor_hits as f64);
        diagnostics.jitter = Some(diagnostics.jitter.unwrap_or(0.0).max(state.chol.jitter()));
        diagnostics.note(
            "virtual_vectors",
            format!(
                "{} active images x 4 one-pixel translations added ({} rows in all); {} points reselected at the fitted hyper-parameters, {} of them virtual",
                first.d(),
                x_aug.nrows(),
                state.d(),
                virtual_active
            ),
        );
        let log_evidence = state.log_evidence(lik, &t_aug)?;
        Ok(self.model(kernel, &x_aug, state, lik, Some(log_evidence), diagnostics))
    }
}
