//! Hyper-parameter learning for the IVM (Seeger, Lawrence & Herbrich §3.3, App. C.2, §6.1;
//! notes §4): minimise phi(theta) - log P(theta), phi = -log Q(D | theta) of eq. 11, over the
//! kernel's free log-parameters and the probit intercept.
//!
//! phi depends on theta directly and through the active set I and the sites s = (pi_I, b_I),
//! which the selection chooses discontinuously. The gradient used is the exact gradient of
//! phi(theta, s) with I, J and s frozen (eq. 14 for the kernel, eq. 12-13 for the intercept),
//! tested against finite differences of that function. The schedule alternates
//! - major steps: select I and its sites afresh at the current theta (Algorithm 1), and
//! - minor steps: up to `inner_iters` L-BFGS iterations (each one line search) on phi with I
//!   frozen and the sites per `strategy`: `constant` (frozen, the paper's choice for every
//!   reported result: criterion and gradient agree), `hybrid` (recomputed by ADF over I in the
//!   stored order at the start of every inner iteration, frozen within its line search), `exact`
//!   (recomputed at every evaluation; the gradient then ignores their dependence on theta, so
//!   line searches may fail, as the paper found).
//!
//! `outer_iters` major + minor steps, then a final major step whose active set is the model.
use super::state::IvmState;
use super::{Ivm, Selected, SiteLik, Task};
use crate::kernels::Kernel;
use crate::linalg::{col, matmul_par, small::eye};
use crate::methods::optimize::{minimize_lbfgs_resume, CostAndGrad, LbfgsMemory, LbfgsOptions, FAILED_LINE_SEARCH};
use crate::methods::{FitContext, FitError, StopReason};
use faer::Mat;
use ndarray::{Array2, Axis};
use serde::{Deserialize, Serialize};
use std::borrow::Cow;

/// What the sites do during a minor step (notes §4.6).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Strategy {
    #[default]
    Constant,
    Hybrid,
    Exact,
}

/// The hyper-prior added to phi.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HyperPrior {
    /// §6.1 for the RBF kernel of eq. 9, k = v exp(-(w / 2p) |x - x'|^2) (so w = p / l^2 in
    /// the harness's length-scale l): log v ~ N(-1, 1); w^{-1} ~ Gamma with mean 1 and one degree
    /// of freedom, read as shape 1/2, rate 1/2 (chi^2_1) and taken as a density of the optimised
    /// log w (the notes' P7 recommendation); intercept ~ N(0, 25) (25 the variance). With an ARD
    /// kernel only the variance and intercept priors apply (a prior on each w_j would defeat ARD).
    #[default]
    Paper,
    None,
}

/// Shape and rate of the Gamma prior on w^{-1}.
const INV_W_SHAPE: f64 = 0.5;
const INV_W_RATE: f64 = 0.5;
/// Mean and variance of the normal prior on log v, and the intercept's prior variance.
const LOG_V_MEAN: f64 = -1.0;
const LOG_V_VAR: f64 = 1.0;
const BIAS_VAR: f64 = 25.0;

impl HyperPrior {
    /// -log P(theta) up to a constant and its gradient w.r.t. the kernel's log-parameters, and
    /// w.r.t. the intercept when it is learned (`bias` given). `dim` is p of eq. 9.
    pub(crate) fn penalty(self, kernel: &dyn Kernel, bias: Option<f64>, dim: usize) -> (f64, Vec<f64>, f64) {
        let theta = kernel.log_params();
        let mut grad = vec![0.0; theta.len()];
        if self == HyperPrior::None {
            return (0.0, grad, 0.0);
        }
        let mut value = 0.0;
        for (k, name) in kernel.param_names().iter().enumerate() {
            match name.as_str() {
                "variance" => {
                    let z = theta[k] - LOG_V_MEAN;
                    value += 0.5 * z * z / LOG_V_VAR;
                    grad[k] = z / LOG_V_VAR;
                }
                // log w = log p - 2 log l: -log p(log w) = shape log w + rate / w.
                "lengthscale" => {
                    let w = dim as f64 * (-2.0 * theta[k]).exp();
                    value += INV_W_SHAPE * w.ln() + INV_W_RATE / w;
                    grad[k] = -2.0 * INV_W_SHAPE + 2.0 * INV_W_RATE / w;
                }
                _ => {}
            }
        }
        let gb = bias.map_or(0.0, |b| {
            value += 0.5 * b * b / BIAS_VAR;
            b / BIAS_VAR
        });
        (value, grad, gb)
    }
}

/// An active set in inclusion order with its sites, and the rows J~ the criterion sums over:
/// what a minor step holds fixed.
#[derive(Clone, Debug)]
pub(crate) struct Sites {
    /// Positions in `rows` (in the training rows when `rows` is None).
    pub active: Vec<usize>,
    pub pi: Vec<f64>,
    pub b: Vec<f64>,
    /// The training rows J~ of a narrowed selection (`selection: schedule`); None: all.
    pub rows: Option<Vec<usize>>,
}

impl Sites {
    pub fn of(state: &IvmState) -> Sites {
        Sites { active: state.active.clone(), pi: state.pi.clone(), b: state.b.clone(), rows: state.rows.clone() }
    }

    /// The inputs and targets of the rows the criterion sums over, position by position.
    pub fn view<'a>(&self, x: &'a Array2<f64>, targets: &'a [f64]) -> (Cow<'a, Array2<f64>>, Cow<'a, [f64]>) {
        match &self.rows {
            None => (Cow::Borrowed(x), Cow::Borrowed(targets)),
            Some(rows) => (Cow::Owned(x.select(Axis(0), rows)), Cow::Owned(rows.iter().map(|&r| targets[r]).collect())),
        }
    }
}

/// phi(theta, s) and its gradient with I, J and the sites frozen.
pub(crate) struct PhiGrad {
    pub phi: f64,
    /// d phi / d(kernel log-parameters), in `log_params` order.
    pub kernel: Vec<f64>,
    /// d phi / d(intercept) (eq. 12-13): -sum_j alpha~_j.
    pub bias: f64,
}

/// phi = -log Q(D) of eq. 11 at `kernel` for frozen active set and sites (the representation
/// rebuilt from scratch, O(n d^2)), and its exact gradient (App. C.2, eq. 14): with J~ = all n
/// points (no randomization), per point rho and Delta/l^2 from `criterion_terms`,
///     E2 = diag(-(rho^2 - Delta/l^2) / 2),  e1 = rho,  E1 = M L^{-1} Pi^{1/2} [n, d],
///     E3 = Pi^{1/2} L^{-T},  v = Pi^{1/2} L^{-T} beta,
///     G = -2 E2 E1 - e1 v^T + I_{.,I} (E1^T E2 E1 + E3 E3^T / 2 + (E1^T e1 - v / 2) v^T)   [n, d],
///     dphi = tr(E2 d diag K) + tr(G^T dK_{.,I}),
/// every entry of K_{.,I} a separate term (the K_I block, symmetric, through `gram_vjp`; the
/// rest through `cross_vjp`; the diagonal through `diag_vjp`).
pub(crate) fn phi_grad(kernel: &dyn Kernel, x: &Array2<f64>, targets: &[f64], lik: SiteLik, sites: &Sites) -> Result<PhiGrad, FitError> {
    let (x, targets) = sites.view(x, targets);
    let (x, targets) = (x.as_ref(), targets.as_ref());
    let (state, kc_terms) = IvmState::rebuild(kernel, x, &sites.active, &sites.pi, &sites.b)?;
    let t = state.criterion_terms(lik, targets)?;
    let (n, d) = (x.nrows(), sites.active.len());
    let e2: Vec<f64> = (0..n).map(|j| -0.5 * (t.rho[j] * t.rho[j] - t.delta_l2[j])).collect();
    let mut grad = kernel.diag_vjp(x, &e2);
    let bias = -t.alpha.iter().sum::<f64>();
    if d > 0 {
        let sp: Vec<f64> = sites.pi.iter().map(|p| p.sqrt()).collect();
        let scale_rows = |mut m: Mat<f64>| {
            for r in 0..m.nrows() {
                for c in 0..m.ncols() {
                    m[(r, c)] *= sp[r];
                }
            }
            m
        };
        // E1^T = Pi^{1/2} L^{-T} M^T, [d, n].
        let e1t = scale_rows(state.chol.solve_lt_par(Mat::from_fn(d, n, |r, j| state.m_cols[r][j]).as_ref()));
        let e3 = scale_rows(state.chol.solve_lt(eye(d).as_ref()));
        let v = crate::linalg::to_vec(scale_rows(state.chol.solve_lt(col(&state.beta).as_ref())).as_ref());
        // The d x d bracket added to the active rows of G.
        let e1t_e2 = Mat::from_fn(d, n, |r, j| e1t[(r, j)] * e2[j]);
        let mut bracket = matmul_par(e1t_e2.as_ref(), e1t.transpose());
        let e3e3 = &e3 * e3.transpose();
        let w: Vec<f64> = (0..d).map(|r| (0..n).map(|j| e1t[(r, j)] * t.rho[j]).sum::<f64>() - 0.5 * v[r]).collect();
        for r in 0..d {
            for l in 0..d {
                bracket[(r, l)] += 0.5 * e3e3[(r, l)] + w[r] * v[l];
            }
        }
        // G^T [d, n]: column j holds dphi / dK_{j, I_l}, l = 0..d.
        let mut gt = Mat::from_fn(d, n, |l, j| -2.0 * e2[j] * e1t[(l, j)] - v[l] * t.rho[j]);
        let act = &sites.active;
        let g_act = Mat::from_fn(d, d, |r, l| gt[(l, act[r])] + bracket[(r, l)]);
        for &i in act {
            for l in 0..d {
                gt[(l, i)] = 0.0;
            }
        }
        let x_act = x.select(Axis(0), act);
        // gt is zero in the active columns, so the VJP reads kc_terms' entries there (the
        // cross-covariance's, not the diagonal values the representation put in) only times 0.
        let cross = kernel.cross_vjp_terms(&x_act, x, &kc_terms, &gt);
        let sym = Mat::from_fn(d, d, |r, l| 0.5 * (g_act[(r, l)] + g_act[(l, r)]));
        let block = kernel.gram_vjp_terms(&x_act, &kernel.gram_terms(&x_act), &sym);
        for (k, g) in grad.iter_mut().enumerate() {
            *g += cross.params[k] + block.params[k];
        }
    }
    Ok(PhiGrad { phi: t.phi, kernel: grad, bias })
}

/// What learning ends with: the final major step at the learned hyper-parameters.
pub(crate) struct Learned {
    pub kernel: Box<dyn Kernel>,
    pub bias: f64,
    pub selected: Selected,
    /// phi - log P at the final major step.
    pub criterion: f64,
    pub major_steps: u64,
    pub stop: StopReason,
    pub evaluations: usize,
    /// Minor steps whose optimiser reported trouble (a failed line search or evaluation), and
    /// the first one's message.
    pub troubled_minor_steps: usize,
    pub first_trouble: Option<String>,
    /// Line searches of the minor steps that ended without the strong Wolfe conditions, and the
    /// minor steps with at least one (the paper's "inner loops [that] terminate with a failed
    /// line search" under `stop_on_failed_line_search`).
    pub failed_line_searches: usize,
    pub minor_steps_with_failed_line_search: usize,
}

impl Ivm {
    /// The major/minor schedule from the given kernel and the `bias` setting.
    /// `task` names the trace's entries and says whether checkpoints are taken.
    pub(crate) fn learn(
        &self,
        kernel: &dyn Kernel,
        x: &Array2<f64>,
        targets: &[f64],
        ctx: &mut FitContext,
        task: Task,
    ) -> Result<Learned, FitError> {
        let p = &self.params;
        let np = kernel.n_params();
        let dim = x.ncols();
        let mut theta = kernel.log_params();
        theta.push(p.bias);
        let mut free = kernel.free_mask();
        free.push(p.learn_bias);
        let split = |theta: &[f64]| (kernel.with_log_params(&theta[..np]), SiteLik::Probit { bias: theta[np] });
        let prior = |k: &dyn Kernel, bias: f64| p.hyper_prior.penalty(k, p.learn_bias.then_some(bias), dim);
        // (phi - log P) / n and its gradient at theta for given sites. Per training point: the
        // same minimiser, but L-BFGS's first step (steepest descent, unit step length) is then
        // O(1) in the log-parameters and the intercept rather than O(n), which on USPS threw the
        // intercept to -270 in the first line search and left the fit there.
        let per_point = 1.0 / x.nrows() as f64;
        let objective = |ctx: &FitContext, theta: &[f64], sites: &Sites| -> Result<(f64, Vec<f64>), FitError> {
            ctx.check_deadline()?;
            let (k, lik) = split(theta);
            let pg = phi_grad(k.as_ref(), x, targets, lik, sites)?;
            let (pv, pk, pb) = prior(k.as_ref(), theta[np]);
            let mut g: Vec<f64> = pg.kernel.iter().zip(&pk).map(|(a, b)| per_point * (a + b)).collect();
            g.push(per_point * (pg.bias + pb));
            Ok((per_point * (pg.phi + pv), g))
        };
        // The sites of the frozen active set recomputed at theta, over the frozen rows J~.
        let replay = |theta: &[f64], frozen: &Sites| -> Result<Sites, FitError> {
            let (k, lik) = split(theta);
            let (xs, ts) = frozen.view(x, targets);
            let state = IvmState::replay(k.as_ref(), &xs, &frozen.active, lik, &ts)?;
            Ok(Sites { rows: frozen.rows.clone(), ..Sites::of(&state) })
        };
        let name = |what: &str| task.trace_name(what);
        let (criterion_name, log_q_name, bias_name, minor_name) = (name("criterion"), name("log_q"), name("bias"), name("criterion_minor"));
        let (mut evaluations, mut troubled, mut first_trouble) = (0, 0, None);
        let (mut failed_line_searches, mut minor_steps_failed) = (0, 0);
        let opts = LbfgsOptions {
            first_step: p.lbfgs_first_step,
            stop_on_failed_line_search: p.stop_on_failed_line_search,
            line_search: p.line_search,
            pairs: None,
        };
        // L-BFGS's pairs, carried between minor steps with `keep_lbfgs_memory` and dropped after
        // each one otherwise.
        let memory = std::cell::RefCell::new(LbfgsMemory::default());
        let minimize = |f: &CostAndGrad<'_>, t0: &[f64], iters: u64, tol: f64| {
            let mut memory = memory.borrow_mut();
            if !p.keep_lbfgs_memory {
                *memory = LbfgsMemory::default();
            }
            minimize_lbfgs_resume(f, t0, &free, iters, tol, opts, &mut memory)
        };
        let mut major = 0u64;
        loop {
            major += 1;
            let (k, lik) = split(&theta);
            let selected = self.select(k.as_ref(), x, targets, lik, ctx, |_, _, _| Ok(()))?;
            let phi = selected.state.criterion_terms(lik, targets)?.phi;
            let criterion = phi + prior(k.as_ref(), theta[np]).0;
            ctx.record(major as usize - 1, &[(&criterion_name, criterion), (&log_q_name, -phi), (&bias_name, theta[np])]);
            if task == Task::Whole && ctx.wants_checkpoint(major) {
                let ev = Some(-phi);
                ctx.checkpoint(major, Some(criterion), || {
                    Ok(Box::new(self.model(k.as_ref(), x, &selected.state, lik, ev, Default::default())) as Box<dyn crate::methods::Fitted>)
                });
            }
            let budget = ctx.budget_stop(major);
            if major > p.outer_iters || budget.is_some() {
                let stop = budget.unwrap_or(StopReason::MaxIterations);
                return Ok(Learned {
                    kernel: k,
                    bias: theta[np],
                    selected,
                    criterion,
                    major_steps: major,
                    stop,
                    evaluations,
                    troubled_minor_steps: troubled,
                    first_trouble,
                    failed_line_searches,
                    minor_steps_with_failed_line_search: minor_steps_failed,
                });
            }
            // Minor step: I (and J) frozen.
            let ctx = &*ctx;
            let sites = Sites::of(&selected.state);
            let tol = 1e-10 * per_point;
            // The optimiser's message when it restarted or stopped on a failed line search.
            let troubled_run = |m: &crate::methods::optimize::Minimum| {
                let troubled = ["restart", "stopped early", FAILED_LINE_SEARCH].iter().any(|w| m.stop_reason.contains(w));
                troubled.then(|| m.stop_reason.clone())
            };
            let mut failed_here = 0;
            // (theta, criterion) at the end of the minor step, with the sites it ended with.
            let (next, value, trouble) = match p.strategy {
                Strategy::Constant => {
                    let m = minimize(&|t: &[f64]| objective(ctx, t, &sites), &theta, p.inner_iters, tol)?;
                    evaluations += m.evaluations;
                    failed_here += m.failed_line_searches;
                    (m.x.clone(), m.value, troubled_run(&m))
                }
                Strategy::Hybrid => {
                    let (mut t, mut value, mut trouble) = (theta.clone(), criterion * per_point, None);
                    for inner in 0..p.inner_iters {
                        let s = if inner == 0 { sites.clone() } else { replay(&t, &sites)? };
                        let m = minimize(&|t: &[f64]| objective(ctx, t, &s), &t, 1, tol)?;
                        evaluations += m.evaluations;
                        failed_here += m.failed_line_searches;
                        trouble = trouble.or_else(|| troubled_run(&m));
                        value = m.value;
                        let failed = m.stop_reason.contains(FAILED_LINE_SEARCH);
                        if m.x == t {
                            break;
                        }
                        t = m.x;
                        if failed {
                            break;
                        }
                    }
                    (t, value, trouble)
                }
                Strategy::Exact => {
                    let f = |t: &[f64]| objective(ctx, t, &replay(t, &sites)?);
                    let m = minimize(&f, &theta, p.inner_iters, tol)?;
                    evaluations += m.evaluations;
                    failed_here += m.failed_line_searches;
                    (m.x.clone(), m.value, troubled_run(&m))
                }
            };
            failed_line_searches += failed_here;
            minor_steps_failed += (failed_here > 0) as usize;
            if let Some(why) = trouble {
                troubled += 1;
                first_trouble.get_or_insert(format!("minor step {major}: {why}"));
            }
            ctx.record(major as usize - 1, &[(&minor_name, value / per_point)]);
            theta = next;
        }
    }
}
