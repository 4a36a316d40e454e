//! The one outer optimiser every method uses for hyper-parameters: L-BFGS (argmin; More-Thuente
//! line search, or one on cost values alone where the gradient is not the cost's) minimising a
//! cost over log-parameters, a subset of which may be held fixed.
//! The driver (restarts, budgets, carried curvature pairs) is here; the line searches it can use
//! are in `line_search.rs`.
mod line_search;
#[cfg(test)]
mod tests;

use super::{FitError, StopReason};
use argmin::core::{CostFunction, Executor, Gradient, State, TerminationReason};
use argmin::solver::linesearch::MoreThuenteLineSearch;
use argmin::solver::quasinewton::LBFGS;
use line_search::{DecreaseOnly, Search, WolfeChecked};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// Result of a minimisation.
#[derive(Clone, Debug)]
pub struct Minimum {
    /// Full parameter vector (fixed entries unchanged).
    pub x: Vec<f64>,
    pub value: f64,
    pub iterations: u64,
    pub evaluations: usize,
    /// Why it stopped, in argmin's words (or the line-search failure that ended it).
    pub stop_reason: String,
    /// Set when a budget ended the search (`FitError::Stop` from an evaluation).
    pub stopped_by: Option<StopReason>,
    /// The search's own convergence test (argmin's gradient or cost tolerance) ended it, or
    /// there was nothing to optimise; false when a limit, a budget, or a line search or restart
    /// that gave up ended it.
    pub converged: bool,
    /// Line searches that ended without the strong Wolfe conditions (see [`WolfeChecked`]).
    pub failed_line_searches: usize,
}

impl Minimum {
    /// The fit's stop reason for a search allowed `max_iters` iterations: the budget that ended
    /// it, else convergence, else the iteration limit, else `Stalled` (the optimiser gave up).
    pub fn stop(&self, max_iters: u64) -> StopReason {
        self.stopped_by.unwrap_or(if self.converged {
            StopReason::Converged
        } else if self.iterations >= max_iters {
            StopReason::MaxIterations
        } else {
            StopReason::Stalled
        })
    }
}

/// A cost to minimise: its value and gradient at a full parameter vector.
pub type CostAndGrad<'a> = dyn Fn(&[f64]) -> Result<(f64, Vec<f64>), FitError> + Sync + 'a;

/// argmin calls cost and gradient separately; one evaluation computes both, so cache the last.
/// The optimiser's parameter w maps to the free entries of the full vector as
/// `offset + w / scale` (offset 0 and scale 1 on the first run: w is then the entries themselves).
struct Problem<'a> {
    f: &'a CostAndGrad<'a>,
    x0: Vec<f64>,
    free: Vec<usize>,
    offset: Vec<f64>,
    scale: f64,
    cache: &'a Mutex<Cache>,
}

#[derive(Default)]
struct Cache {
    last: Option<(Vec<f64>, f64, Vec<f64>)>,
    best: Option<(Vec<f64>, f64)>,
    evaluations: usize,
    /// An evaluation of this run failed (a numerical error or a non-finite value).
    failed: bool,
    fatal: Option<FitError>,
}

impl Problem<'_> {
    fn full(&self, w: &[f64]) -> Vec<f64> {
        let mut x = self.x0.clone();
        for (k, &i) in self.free.iter().enumerate() {
            x[i] = self.offset[k] + w[k] / self.scale;
        }
        x
    }

    fn grad_w(&self, g: &[f64]) -> Vec<f64> {
        self.free.iter().map(|&i| g[i] / self.scale).collect()
    }

    fn eval(&self, w: &[f64]) -> Result<(f64, Vec<f64>), argmin::core::Error> {
        let mut cache = self.cache.lock().expect("optimiser cache poisoned");
        let x = self.full(w);
        if let Some((xc, v, g)) = &cache.last {
            if *xc == x {
                return Ok((*v, self.grad_w(g)));
            }
        }
        match (self.f)(&x) {
            Ok((v, g)) if v.is_finite() && g.iter().all(|gi| gi.is_finite()) => {
                cache.evaluations += 1;
                if cache.best.as_ref().is_none_or(|(_, b)| v < *b) {
                    cache.best = Some((x.clone(), v));
                }
                let gw = self.grad_w(&g);
                cache.last = Some((x, v, g));
                Ok((v, gw))
            }
            Ok(_) => {
                cache.failed = true;
                Err(argmin::core::Error::msg("non-finite objective or gradient"))
            }
            Err(e) => {
                let msg = e.to_string();
                if matches!(e, FitError::Timeout { .. } | FitError::Stop(_)) {
                    cache.fatal = Some(e);
                }
                cache.failed = true;
                Err(argmin::core::Error::msg(msg))
            }
        }
    }
}

impl CostFunction for Problem<'_> {
    type Param = Vec<f64>;
    type Output = f64;
    fn cost(&self, w: &Vec<f64>) -> Result<f64, argmin::core::Error> {
        self.eval(w).map(|(v, _)| v)
    }
}

impl Gradient for Problem<'_> {
    type Param = Vec<f64>;
    type Gradient = Vec<f64>;
    fn gradient(&self, w: &Vec<f64>) -> Result<Vec<f64>, argmin::core::Error> {
        self.eval(w).map(|(_, g)| g)
    }
}

/// Restarts after a failed evaluation (see `minimize_lbfgs`).
const MAX_RESTARTS: u32 = 3;

/// Minimise `f` (value and gradient w.r.t. the full vector) over the entries of `x0` where
/// `free` is true, by L-BFGS with memory 10. A timeout is returned as an error. Where an
/// evaluation fails (a numerical error or a non-finite value: a trial point too far out, such
/// as a near-singular covariance) or the line search gets no descent direction, L-BFGS restarts
/// from the best point seen, with fresh memory and a first step 4^k times shorter on restart k,
/// up to `MAX_RESTARTS` times within the `max_iters` budget; then it ends at the best point.
/// It converges when the gradient norm falls below 1e-6 or an iteration changes the cost by
/// less than `tol_cost`. An evaluation that returns `FitError::Stop` (a budget reached) ends the
/// search at the best point so far, with the stop as its `stop_reason`.
///
/// Behaviours to know (found by a review; kept, since changing them moves stored numbers):
/// - The gradient test is argmin's, on the gradient in the scaled coordinates w = s (z - z0),
///   g / s: under `FirstStep::UnitLength` (s = sqrt|g0|) and after restart k (s times 4^k) a
///   run stops once |g| < 1e-6 s, not 1e-6.
/// - An evaluation counts as failed if any entry of the gradient is non-finite, also an entry
///   of a fixed parameter, which then triggers a restart.
/// - Under `LineSearchKind::Decrease` one failed trial point marks the run as in trouble: it
///   restarts from the best point (dropping its curvature pairs) even if it would converge.
/// - A solver resumed with carried pairs (`minimize_lbfgs_resume`) starts argmin's iteration
///   count at 0, and argmin trims the pairs only from iteration m on: it may hold up to 2m pairs.
pub fn minimize_lbfgs(f: &CostAndGrad<'_>, x0: &[f64], free: &[bool], max_iters: u64, tol_cost: f64) -> Result<Minimum, FitError> {
    minimize_lbfgs_with(f, x0, free, max_iters, tol_cost, FirstStep::Gradient)
}

/// The length of L-BFGS's first (steepest-descent) trial step.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FirstStep {
    /// The gradient itself (argmin's default): a cost whose start gradient is large makes the
    /// first trial point correspondingly far.
    #[default]
    Gradient,
    /// Unit length in the parameters, 1 / |g| times the gradient, as Fortran L-BFGS-B (scipy's
    /// and R optim's) starts: a steep start (such as robust-max's log epsilon per misordered
    /// row) then does not throw the kernel amplitudes e^30 out in one step.
    UnitLength,
}

impl FirstStep {
    /// For `skip_serializing_if`: a method's settings (and so its cells' keys) mention the
    /// first step only where a spec chose the non-default one.
    pub fn is_default(&self) -> bool {
        *self == FirstStep::default()
    }
}

/// `minimize_lbfgs` with the first step's length chosen (the restart rule applies on top).
pub fn minimize_lbfgs_with(
    f: &CostAndGrad<'_>,
    x0: &[f64],
    free: &[bool],
    max_iters: u64,
    tol_cost: f64,
    first_step: FirstStep,
) -> Result<Minimum, FitError> {
    let opts = LbfgsOptions { first_step, ..Default::default() };
    minimize_lbfgs_resume(f, x0, free, max_iters, tol_cost, opts, &mut LbfgsMemory::default())
}

/// Curvature pairs L-BFGS keeps unless `LbfgsOptions::pairs` says otherwise.
pub const LBFGS_PAIRS: usize = 10;

/// The choices `minimize_lbfgs_resume` offers beyond `minimize_lbfgs`.
#[derive(Clone, Copy, Debug, Default)]
pub struct LbfgsOptions {
    pub first_step: FirstStep,
    /// Curvature pairs kept (L-BFGS's m; `None`: `LBFGS_PAIRS`). R's `optim` (L-BFGS-B) keeps 5.
    pub pairs: Option<usize>,
    /// End the search at the first line search that fails the strong Wolfe conditions (at the
    /// best point seen), as an L-BFGS driver that reports the failure does, instead of going on
    /// from the point the line search returned.
    pub stop_on_failed_line_search: bool,
    pub line_search: LineSearchKind,
}

/// The coordinate an optimiser moves a length-scale l in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LengthscaleCoordinate {
    /// log l, the kernels' own log-parameter.
    #[default]
    Log,
    /// log l^2 = 2 log l.
    LogSquared,
}

impl LengthscaleCoordinate {
    pub fn is_log(&self) -> bool {
        *self == LengthscaleCoordinate::Log
    }

    /// The factor from log l to this coordinate.
    pub fn scale(&self) -> f64 {
        match self {
            LengthscaleCoordinate::Log => 1.0,
            LengthscaleCoordinate::LogSquared => 2.0,
        }
    }

    /// The coordinate scales (`minimize_lbfgs_in_coordinates`' c) of a parameter vector of `n`
    /// entries whose first ones are named `kernel_params` (the kernels' log-parameters): this
    /// coordinate's scale on each length-scale, 1 on everything else.
    pub fn scales(&self, kernel_params: &[String], n: usize) -> Vec<f64> {
        let mut c = vec![1.0; n];
        for (c, name) in c.iter_mut().zip(kernel_params) {
            if crate::kernels::is_lengthscale(name) {
                *c = self.scale();
            }
        }
        c
    }
}

/// How each L-BFGS iteration searches along its direction.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LineSearchKind {
    /// More-Thuente (MINPACK's), steered by the gradient at every trial point; each ending is
    /// checked against the strong Wolfe conditions ([`WolfeChecked`]).
    #[default]
    MoreThuente,
    /// Cost values only ([`DecreaseOnly`]): the trial steps 1, 1/2, 1/4, ... of the direction,
    /// the first with a lower cost than the start's taken; none in `DECREASE_TRIALS` trials is a
    /// failed line search, which ends the search at the best point seen.
    Decrease,
}

impl LineSearchKind {
    /// For `skip_serializing_if`: settings mention the line search only where a spec chose
    /// the non-default one, so the cells' keys of every other spec stay as they were.
    pub fn is_default(&self) -> bool {
        *self == LineSearchKind::default()
    }
}

/// What the stop reason of a search ended by a failed line search contains (under
/// `stop_on_failed_line_search`, or any failure of a `Decrease` search).
pub const FAILED_LINE_SEARCH: &str = "line search failed";

type Lbfgs = LBFGS<Search, Vec<f64>, Vec<f64>, f64>;

/// What a carried solver was built with: line search, stop on a failed one, cost tolerance,
/// curvature pairs.
type SolverSettings = (LineSearchKind, bool, f64, Option<usize>);

/// L-BFGS's curvature pairs, carried from one search to the next on the same parameters
/// (`minimize_lbfgs_resume`), so that a search whose cost changed between runs (the IVM's
/// minor steps after each reselection) starts with the earlier runs' quasi-Newton scaling
/// instead of a steepest-descent step. Empty after a run that restarted, failed or used
/// scaled coordinates (its pairs are not in the parameters' own units).
#[derive(Default)]
pub struct LbfgsMemory {
    /// The solver holding the pairs, with the settings it was built with (its line search and
    /// cost tolerance): a run with other settings starts afresh rather than inherit them.
    solver: Option<(Lbfgs, SolverSettings)>,
    /// Failed line searches of every solver this memory has held (the solver's line search
    /// counts into it, so a resumed solver keeps counting here).
    failures: Arc<AtomicUsize>,
}

impl LbfgsMemory {
    /// Curvature pairs are held for the next run.
    pub fn is_empty(&self) -> bool {
        self.solver.is_none()
    }
}

/// `minimize_lbfgs` with every option of [`LbfgsOptions`], starting from the curvature pairs in `memory` (when it holds any and
/// the run's coordinates are the parameters themselves), and leaving this run's pairs there.
/// The first direction is then -H g with the carried H rather than -g; `opts.first_step`
/// applies only when the memory is empty.
pub fn minimize_lbfgs_resume(
    f: &CostAndGrad<'_>,
    x0: &[f64],
    free: &[bool],
    max_iters: u64,
    tol_cost: f64,
    opts: LbfgsOptions,
    memory: &mut LbfgsMemory,
) -> Result<Minimum, FitError> {
    let settings = (opts.line_search, opts.stop_on_failed_line_search, tol_cost, opts.pairs);
    let mut carried = memory.solver.take().filter(|(_, built)| *built == settings).map(|(solver, _)| solver);
    let failures = memory.failures.clone();
    let failures_before = failures.load(Ordering::Relaxed);
    let first_step = if carried.is_some() { FirstStep::Gradient } else { opts.first_step };
    assert_eq!(x0.len(), free.len());
    let free_idx: Vec<usize> = (0..x0.len()).filter(|&i| free[i]).collect();
    let cache = Mutex::new(Cache::default());
    let z0: Vec<f64> = free_idx.iter().map(|&i| x0[i]).collect();
    if z0.is_empty() || max_iters == 0 {
        let (value, _) = f(x0)?;
        return Ok(Minimum {
            x: x0.to_vec(),
            value,
            iterations: 0,
            evaluations: 1,
            stop_reason: "nothing to optimise".into(),
            stopped_by: None,
            converged: z0.is_empty(),
            failed_line_searches: 0,
        });
    }
    let problem = |offset: Vec<f64>, scale: f64| Problem { f, x0: x0.to_vec(), free: free_idx.clone(), offset, scale, cache: &cache };
    // The first evaluation must succeed: there is no fallback point without it.
    let (_, g0) = problem(vec![0.0; z0.len()], 1.0).eval(&z0).map_err(|e| fatal_or(&cache, e))?;

    // In w = s (z - z0) the steepest-descent step -grad_w is |g| / s^2 long in z: s = sqrt|g|
    // makes it 1. The quasi-Newton steps after it are invariant to a uniform scale.
    let g_norm = g0.iter().map(|g| g * g).sum::<f64>().sqrt();
    let base_scale = match first_step {
        FirstStep::UnitLength if g_norm > 0.0 => g_norm.sqrt(),
        _ => 1.0,
    };
    let (mut offset, mut scale) = (vec![0.0; z0.len()], 1.0);
    let mut start = z0.clone();
    if base_scale != 1.0 {
        (offset, scale, start) = (z0, base_scale, vec![0.0; start.len()]);
    }
    let mut iterations = 0;
    let mut restarts = 0;
    let mut first_trouble: Option<String> = None;
    let mut stopped_by = None;
    let mut clean_end = false;
    let mut converged = false;
    // The best value when the current run began (none for the first run): a run after a
    // restart that meets argmin's cost test without improving on it has not converged, its
    // steps were rejected (a cost change of zero passes that test).
    let mut best_at_run_start: Option<f64> = None;
    let mut last_solver: Option<Lbfgs>;
    let stop_reason = loop {
        let solver = match carried.take() {
            // Carried pairs are in the parameters' own units: only a run in those units uses them.
            Some(solver) if base_scale == 1.0 && restarts == 0 => solver,
            _ => {
                let line_search = match opts.line_search {
                    LineSearchKind::MoreThuente => Search::MoreThuente(Box::new(WolfeChecked::new(
                        MoreThuenteLineSearch::new(),
                        failures.clone(),
                        opts.stop_on_failed_line_search,
                    ))),
                    LineSearchKind::Decrease => Search::Decrease(DecreaseOnly::new(failures.clone())),
                };
                LBFGS::new(line_search, opts.pairs.unwrap_or(LBFGS_PAIRS))
                    .with_tolerance_grad(1e-6)
                    .and_then(|s| s.with_tolerance_cost(tol_cost))
                    .map_err(|e| FitError::Numerical(e.to_string()))?
            }
        };
        let budget = max_iters - iterations;
        let outcome = Executor::new(problem(offset.clone(), scale), solver).configure(|s| s.param(start).max_iters(budget)).run();
        let (used, reason, solver_converged) = match &outcome {
            Ok(res) => {
                let why = res.state().get_termination_reason();
                let solver_converged = matches!(why, Some(TerminationReason::SolverConverged | TerminationReason::TargetCostReached));
                (res.state().get_iter(), why.map(|r| r.text().to_string()).unwrap_or_default(), solver_converged)
            }
            Err(e) => (0, format!("stopped early: {e}"), false),
        };
        last_solver = outcome.ok().map(|res| res.solver);
        iterations += used;
        let mut c = cache.lock().expect("optimiser cache poisoned");
        match c.fatal.take() {
            // A budget ends the search at the best point so far: a normal stop, not a failure.
            Some(FitError::Stop(why)) => {
                stopped_by = Some(why);
                break why.to_string();
            }
            Some(fatal) => return Err(fatal),
            None => {}
        }
        let trouble = c.failed || reason.contains("descent direction");
        if !trouble || restarts == MAX_RESTARTS || iterations >= max_iters {
            clean_end = !trouble && restarts == 0;
            let improved = best_at_run_start.is_none_or(|b| c.best.as_ref().is_some_and(|(_, v)| *v < b));
            converged = !trouble && solver_converged && improved;
            break match (restarts, first_trouble) {
                (0, _) => reason,
                (k, Some(first)) => format!("{reason} (after {k} restart(s) from the best point; first: {first})"),
                (_, None) => reason,
            };
        }
        first_trouble.get_or_insert(reason);
        restarts += 1;
        c.failed = false;
        let (best, best_value) = c.best.clone().expect("first evaluation succeeded");
        best_at_run_start = Some(best_value);
        drop(c);
        // From the best point, in w = 4^k (z - z_best): the first (steepest-descent) step is 16^k
        // times shorter in z, and the quasi-Newton steps after it are scale-free.
        offset = free_idx.iter().map(|&i| best[i]).collect();
        scale = base_scale * 4f64.powi(restarts as i32);
        start = vec![0.0; free_idx.len()];
    };
    let cache = cache.into_inner().expect("optimiser cache poisoned");
    let (x, value) = cache.best.expect("first evaluation succeeded");
    // The pairs are kept only from a run in the parameters' own units that ended without
    // trouble (a failed evaluation or a restart leaves pairs that may not describe the cost).
    if base_scale == 1.0 && clean_end {
        memory.solver = last_solver.map(|solver| (solver, settings));
    }
    let failed_line_searches = failures.load(Ordering::Relaxed) - failures_before;
    Ok(Minimum { x, value, iterations, evaluations: cache.evaluations, stop_reason, stopped_by, converged, failed_line_searches })
}

/// `minimize_lbfgs_resume` (with a fresh memory) in the coordinates u = c * x, element-wise,
/// instead of x: the optimum is the same, the path is not (L-BFGS's first step and its scaling
/// H0 = gamma I depend on the coordinates). `c` > 0 per entry; x0 and the result are in x.
pub fn minimize_lbfgs_in_coordinates(
    f: &CostAndGrad<'_>,
    x0: &[f64],
    free: &[bool],
    max_iters: u64,
    tol_cost: f64,
    opts: LbfgsOptions,
    c: &[f64],
) -> Result<Minimum, FitError> {
    assert_eq!(c.len(), x0.len());
    assert!(c.iter().all(|&c| c > 0.0 && c.is_finite()), "coordinate scales are positive");
    let in_u = in_coordinates(f, c);
    let u0: Vec<f64> = x0.iter().zip(c).map(|(x, c)| x * c).collect();
    let mut min = minimize_lbfgs_resume(&in_u, &u0, free, max_iters, tol_cost, opts, &mut LbfgsMemory::default())?;
    min.x.iter_mut().zip(c).for_each(|(u, c)| *u /= c);
    Ok(min)
}

/// The cost `f` of x as a function of u = c * x: f(u / c), gradient g(u / c) / c.
fn in_coordinates<'a>(f: &'a CostAndGrad<'a>, c: &'a [f64]) -> impl Fn(&[f64]) -> Result<(f64, Vec<f64>), FitError> + Sync + 'a {
    move |u: &[f64]| {
        let x: Vec<f64> = u.iter().zip(c).map(|(u, c)| u / c).collect();
        let (v, g) = f(&x)?;
        Ok((v, g.iter().zip(c).map(|(g, c)| g / c).collect()))
    }
}

fn fatal_or(cache: &Mutex<Cache>, e: argmin::core::Error) -> FitError {
    let mut cache = cache.lock().expect("optimiser cache poisoned");
    cache.fatal.take().unwrap_or_else(|| FitError::Numerical(e.to_string()))
}

/// False position with Illinois end-point down-weighting for a decreasing derivative phi on
/// [0, 1] (notes D§2.4.5); returns the root (or an end-point when phi does not change sign).
pub fn false_position(mut phi: impl FnMut(f64) -> f64) -> f64 {
    let (mut lo, mut hi) = (0.0, 1.0);
    let (mut flo, mut fhi) = (phi(0.0), phi(1.0));
    if !(flo > 0.0) {
        return 0.0;
    }
    if fhi >= 0.0 {
        return 1.0;
    }
    let mut side = 0i8;
    let mut eta = 0.5;
    for _ in 0..60 {
        eta = (lo * fhi - hi * flo) / (fhi - flo);
        if !eta.is_finite() {
            eta = 0.5 * (lo + hi);
        }
        let f = phi(eta);
        if f.abs() < 1e-13 || hi - lo < 1e-12 {
            return eta;
        }
        if f > 0.0 {
            lo = eta;
            flo = f;
            if side == 1 {
                fhi *= 0.5;
            }
            side = 1;
        } else {
            hi = eta;
            fhi = f;
            if side == -1 {
                flo *= 0.5;
            }
            side = -1;
        }
    }
    eta
}
