//! The one outer optimiser every method uses for hyper-parameters: L-BFGS (argmin; More-Thuente
//! line search, or one on cost values alone where the gradient is not the cost's) minimising a
//! cost over log-parameters, a subset of which may be held fixed.
use super::{FitError, StopReason};
use crate::linalg::dot;
use argmin::core::{
    CostFunction, Executor, Gradient, IterState, LineSearch, Problem as ArgminProblem, Solver, State, TerminationReason, KV,
};
use argmin::solver::linesearch::MoreThuenteLineSearch;
use argmin::solver::quasinewton::LBFGS;
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
    /// Line searches that ended without the strong Wolfe conditions (see [`WolfeChecked`]).
    pub failed_line_searches: usize,
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
    minimize_lbfgs_opts(f, x0, free, max_iters, tol_cost, LbfgsOptions { first_step, ..Default::default() })
}

/// The choices `minimize_lbfgs_opts` offers beyond `minimize_lbfgs`.
#[derive(Clone, Copy, Debug, Default)]
pub struct LbfgsOptions {
    pub first_step: FirstStep,
    /// End the search at the first line search that fails the strong Wolfe conditions (at the
    /// best point seen), as an L-BFGS driver that reports the failure does, instead of going on
    /// from the point the line search returned.
    pub stop_on_failed_line_search: bool,
    pub line_search: LineSearchKind,
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
/// The message of a More-Thuente search that fails the strong Wolfe conditions.
const FAILED_WOLFE: &str = "line search failed the strong Wolfe conditions";
/// Trial steps of a `Decrease` line search before it fails: the last is 2^-19 of the direction
/// (L-BFGS's first direction is the gradient itself, of any length).
const DECREASE_TRIALS: usize = 20;

/// `minimize_lbfgs` with every option of [`LbfgsOptions`].
pub fn minimize_lbfgs_opts(
    f: &CostAndGrad<'_>,
    x0: &[f64],
    free: &[bool],
    max_iters: u64,
    tol_cost: f64,
    opts: LbfgsOptions,
) -> Result<Minimum, FitError> {
    minimize_lbfgs_resume(f, x0, free, max_iters, tol_cost, opts, &mut LbfgsMemory::default())
}

type Lbfgs = LBFGS<Search, Vec<f64>, Vec<f64>, f64>;

/// L-BFGS's curvature pairs, carried from one search to the next on the same parameters
/// (`minimize_lbfgs_resume`), so that a search whose cost changed between runs (the IVM's
/// minor steps after each reselection) starts with the earlier runs' quasi-Newton scaling
/// instead of a steepest-descent step. Empty after a run that restarted, failed or used
/// scaled coordinates (its pairs are not in the parameters' own units).
#[derive(Default)]
pub struct LbfgsMemory {
    /// The solver holding the pairs, with the settings it was built with (its line search and
    /// cost tolerance): a run with other settings starts afresh rather than inherit them.
    solver: Option<(Lbfgs, LineSearchKind, bool, f64)>,
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

/// `minimize_lbfgs_opts` starting from the curvature pairs in `memory` (when it holds any and
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
    let settings = (opts.line_search, opts.stop_on_failed_line_search, tol_cost);
    let mut carried = memory.solver.take().filter(|(_, kind, stop, tol)| (*kind, *stop, *tol) == settings).map(|(solver, ..)| solver);
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
                LBFGS::new(line_search, 10)
                    .with_tolerance_grad(1e-6)
                    .and_then(|s| s.with_tolerance_cost(tol_cost))
                    .map_err(|e| FitError::Numerical(e.to_string()))?
            }
        };
        let budget = max_iters - iterations;
        let outcome = Executor::new(problem(offset.clone(), scale), solver).configure(|s| s.param(start).max_iters(budget)).run();
        let (used, reason) = match &outcome {
            Ok(res) => (res.state().get_iter(), res.state().get_termination_reason().map(|r| r.text().to_string()).unwrap_or_default()),
            Err(e) => (0, format!("stopped early: {e}")),
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
            break match (restarts, first_trouble) {
                (0, _) => reason,
                (k, Some(first)) => format!("{reason} (after {k} restart(s) from the best point; first: {first})"),
                (_, None) => reason,
            };
        }
        first_trouble.get_or_insert(reason);
        restarts += 1;
        c.failed = false;
        let (best, _) = c.best.clone().expect("first evaluation succeeded");
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
        memory.solver = last_solver.map(|solver| (solver, settings.0, settings.1, settings.2));
    }
    let failed_line_searches = failures.load(Ordering::Relaxed) - failures_before;
    Ok(Minimum { x, value, iterations, evaluations: cache.evaluations, stop_reason, stopped_by, failed_line_searches })
}

/// More-Thuente's c1 and c2 (argmin's defaults, MINPACK's): sufficient decrease and curvature.
const WOLFE_C1: f64 = 1e-4;
const WOLFE_C2: f64 = 0.9;

/// A line search that checks its result against the strong Wolfe conditions. Why: argmin's
/// More-Thuente reports every ending as converged, also MINPACK's warnings (the interval of
/// uncertainty below xtol, a step at its bound, rounding errors), and L-BFGS then goes on from
/// that step. With a gradient that is not the cost's (the IVM's exact strategy differentiates
/// with the sites frozen while its cost recomputes them) such endings are the rule. Each one is
/// counted; under `stop` it is returned as an error, which ends the L-BFGS run (argmin turns a
/// line search's error into a `SolverExit`).
#[derive(Clone)]
struct WolfeChecked<L> {
    inner: L,
    failures: Arc<AtomicUsize>,
    stop: bool,
    direction: Vec<f64>,
    /// The start point, its cost and its gradient.
    start: Option<(Vec<f64>, f64, Vec<f64>)>,
}

impl<L> WolfeChecked<L> {
    fn new(inner: L, failures: Arc<AtomicUsize>, stop: bool) -> Self {
        WolfeChecked { inner, failures, stop, direction: Vec::new(), start: None }
    }
}

impl<L: LineSearch<Vec<f64>, f64>> LineSearch<Vec<f64>, f64> for WolfeChecked<L> {
    fn search_direction(&mut self, direction: Vec<f64>) {
        self.direction.clone_from(&direction);
        self.inner.search_direction(direction);
    }

    fn initial_step_length(&mut self, step_length: f64) -> Result<(), argmin::core::Error> {
        self.inner.initial_step_length(step_length)
    }
}

type LineState = IterState<Vec<f64>, Vec<f64>, (), (), (), f64>;

impl<O, L: Solver<O, LineState>> Solver<O, LineState> for WolfeChecked<L> {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn init(&mut self, problem: &mut ArgminProblem<O>, state: LineState) -> Result<(LineState, Option<KV>), argmin::core::Error> {
        // L-BFGS hands the line search its start: the point, its cost and its gradient.
        self.start = match (state.get_param(), state.get_gradient()) {
            (Some(x), Some(g)) => Some((x.clone(), state.get_cost(), g.clone())),
            _ => None,
        };
        self.inner.init(problem, state)
    }

    fn next_iter(&mut self, problem: &mut ArgminProblem<O>, state: LineState) -> Result<(LineState, Option<KV>), argmin::core::Error> {
        let (state, kv) = self.inner.next_iter(problem, state)?;
        if let (true, Some((x0, f0, g0)), Some(x), Some(g)) = (state.terminated(), &self.start, state.get_param(), state.get_gradient()) {
            let step: Vec<f64> = x.iter().zip(x0).map(|(a, b)| a - b).collect();
            let decrease = state.get_cost() <= f0 + WOLFE_C1 * dot(&step, g0);
            let curvature = dot(g, &self.direction).abs() <= WOLFE_C2 * dot(g0, &self.direction).abs();
            if !(decrease && curvature) {
                self.failures.fetch_add(1, Ordering::Relaxed);
                if self.stop {
                    return Err(argmin::core::Error::msg(FAILED_WOLFE));
                }
            }
        }
        Ok((state, kv))
    }

    fn terminate(&mut self, state: &LineState) -> argmin::core::TerminationStatus {
        self.inner.terminate(state)
    }
}

/// A line search that reads cost values only. Why not argmin's `BacktrackingLineSearch`: its
/// Armijo condition reads the start's gradient, and it has no limit on its trials (it halves
/// until the condition holds). Where the gradient is not the cost's (the IVM's exact strategy:
/// its cost recomputes the sites, its gradient holds them frozen), Seeger et al. (§3.3) call
/// for "special 'robust' line search code which neglects gradient information"; this is the
/// simplest such search. The direction still comes from L-BFGS's (gradient-based) memory.
#[derive(Clone)]
struct DecreaseOnly {
    failures: Arc<AtomicUsize>,
    direction: Vec<f64>,
    /// The start point and its cost.
    start: Option<(Vec<f64>, f64)>,
    step: f64,
    trials: usize,
}

impl DecreaseOnly {
    fn new(failures: Arc<AtomicUsize>) -> Self {
        DecreaseOnly { failures, direction: Vec::new(), start: None, step: 1.0, trials: 0 }
    }
}

impl LineSearch<Vec<f64>, f64> for DecreaseOnly {
    fn search_direction(&mut self, direction: Vec<f64>) {
        self.direction = direction;
    }

    fn initial_step_length(&mut self, step_length: f64) -> Result<(), argmin::core::Error> {
        self.step = step_length;
        Ok(())
    }
}

impl<O: CostFunction<Param = Vec<f64>, Output = f64>> Solver<O, LineState> for DecreaseOnly {
    fn name(&self) -> &str {
        "decrease-only backtracking"
    }

    fn init(&mut self, _problem: &mut ArgminProblem<O>, state: LineState) -> Result<(LineState, Option<KV>), argmin::core::Error> {
        let x = state.get_param().ok_or_else(|| argmin::core::Error::msg("line search without a start point"))?;
        // L-BFGS's memory without the curvature condition (which this search does not enforce)
        // can turn its direction uphill; as with More-Thuente, that error restarts L-BFGS.
        if state.get_gradient().is_some_and(|g| dot(g, &self.direction) >= 0.0) {
            return Err(argmin::core::Error::msg("the search direction is not a descent direction"));
        }
        self.start = Some((x.clone(), state.get_cost()));
        (self.step, self.trials) = (1.0, 0);
        Ok((state, None))
    }

    fn next_iter(&mut self, problem: &mut ArgminProblem<O>, state: LineState) -> Result<(LineState, Option<KV>), argmin::core::Error> {
        let (x0, f0) = self.start.as_ref().expect("init sets the start");
        let x: Vec<f64> = x0.iter().zip(&self.direction).map(|(a, d)| a + self.step * d).collect();
        self.trials += 1;
        // A failed evaluation (too far out) counts as no decrease; the optimiser's cache keeps
        // a budget's or a timeout's error for the caller.
        if let Ok(f) = problem.cost(&x) {
            if f < *f0 {
                return Ok((state.param(x).cost(f).terminate_with(TerminationReason::SolverConverged), None));
            }
        }
        if self.trials == DECREASE_TRIALS {
            self.failures.fetch_add(1, Ordering::Relaxed);
            return Err(argmin::core::Error::msg(format!("{FAILED_LINE_SEARCH}: no decrease in {DECREASE_TRIALS} trial steps")));
        }
        self.step *= 0.5;
        Ok((state, None))
    }
}

type MoreThuente = MoreThuenteLineSearch<Vec<f64>, Vec<f64>, f64>;

/// The line search of one L-BFGS run, either kind (argmin's L-BFGS takes one line-search type).
#[derive(Clone)]
enum Search {
    MoreThuente(Box<WolfeChecked<MoreThuente>>),
    Decrease(DecreaseOnly),
}

impl LineSearch<Vec<f64>, f64> for Search {
    fn search_direction(&mut self, direction: Vec<f64>) {
        match self {
            Search::MoreThuente(s) => s.search_direction(direction),
            Search::Decrease(s) => s.search_direction(direction),
        }
    }

    fn initial_step_length(&mut self, step_length: f64) -> Result<(), argmin::core::Error> {
        match self {
            Search::MoreThuente(s) => s.initial_step_length(step_length),
            Search::Decrease(s) => s.initial_step_length(step_length),
        }
    }
}

impl<O> Solver<O, LineState> for Search
where
    O: CostFunction<Param = Vec<f64>, Output = f64> + Gradient<Param = Vec<f64>, Gradient = Vec<f64>>,
{
    fn name(&self) -> &str {
        match self {
            Search::MoreThuente(s) => Solver::<O, LineState>::name(s.as_ref()),
            Search::Decrease(s) => Solver::<O, LineState>::name(s),
        }
    }

    fn init(&mut self, problem: &mut ArgminProblem<O>, state: LineState) -> Result<(LineState, Option<KV>), argmin::core::Error> {
        match self {
            Search::MoreThuente(s) => s.as_mut().init(problem, state),
            Search::Decrease(s) => s.init(problem, state),
        }
    }

    fn next_iter(&mut self, problem: &mut ArgminProblem<O>, state: LineState) -> Result<(LineState, Option<KV>), argmin::core::Error> {
        match self {
            Search::MoreThuente(s) => s.as_mut().next_iter(problem, state),
            Search::Decrease(s) => s.next_iter(problem, state),
        }
    }

    fn terminate(&mut self, state: &LineState) -> argmin::core::TerminationStatus {
        match self {
            Search::MoreThuente(s) => Solver::<O, LineState>::terminate(s.as_mut(), state),
            Search::Decrease(s) => Solver::<O, LineState>::terminate(s, state),
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_minimum_of_a_rosenbrock_valley_with_a_fixed_coordinate() {
        // f(a, b, c) = (1 - a)^2 + 100 (b - a^2)^2 + (c - 3)^2, with c held at 5.
        let f = |x: &[f64]| -> Result<(f64, Vec<f64>), FitError> {
            let (a, b, c) = (x[0], x[1], x[2]);
            let v = (1.0 - a).powi(2) + 100.0 * (b - a * a).powi(2) + (c - 3.0).powi(2);
            let g = vec![-2.0 * (1.0 - a) - 400.0 * a * (b - a * a), 200.0 * (b - a * a), 2.0 * (c - 3.0)];
            Ok((v, g))
        };
        let m = minimize_lbfgs(&f, &[-1.2, 1.0, 5.0], &[true, true, false], 500, 1e-10).unwrap();
        assert!((m.x[0] - 1.0).abs() < 1e-4 && (m.x[1] - 1.0).abs() < 1e-4, "{:?}", m);
        assert_eq!(m.x[2], 5.0);
        assert!((m.value - 4.0).abs() < 1e-6);
    }

    #[test]
    fn a_failed_trial_point_restarts_from_the_best_point_with_shorter_steps() {
        // f(x) = (x - 10)^2, undefined beyond x = 5 (a wall like a near-singular covariance):
        // the first L-BFGS step from 0 lands at 20 and fails. Restarting from the best point with
        // shorter steps gets close to the wall instead of stopping at the start (x = 0).
        let f = |x: &[f64]| -> Result<(f64, Vec<f64>), FitError> {
            if x[0] > 5.0 {
                return Err(FitError::Numerical("beyond the wall".into()));
            }
            Ok(((x[0] - 10.0).powi(2), vec![2.0 * (x[0] - 10.0)]))
        };
        let m = minimize_lbfgs(&f, &[0.0], &[true], 100, 1e-10).unwrap();
        assert!(m.x[0] > 3.5 && m.x[0] <= 5.0, "{m:?}");
        assert!(m.stop_reason.contains("restart"), "{}", m.stop_reason);
        // A smooth problem never restarts, so its path is the plain L-BFGS one.
        let g = |x: &[f64]| -> Result<(f64, Vec<f64>), FitError> { Ok(((x[0] - 1.0).powi(2), vec![2.0 * (x[0] - 1.0)])) };
        let m = minimize_lbfgs(&g, &[0.0], &[true], 100, 1e-10).unwrap();
        assert!(!m.stop_reason.contains("restart") && (m.x[0] - 1.0).abs() < 1e-6, "{m:?}");
    }

    #[test]
    fn the_unit_length_first_step_goes_one_unit_where_the_gradient_step_goes_its_length() {
        // f(x, y) = 500 ((x - 3)^2 + (y + 4)^2): gradient (-3000, 4000) at the origin, norm 5000.
        // The first trial point is x0 - g (5000 away) by default and x0 - g / |g| (1 away) under
        // UnitLength, as Fortran L-BFGS-B starts; both then reach the minimum.
        for (first, want) in [(FirstStep::Gradient, 5000.0), (FirstStep::UnitLength, 1.0)] {
            let seen = Mutex::new(Vec::new());
            let f = |x: &[f64]| -> Result<(f64, Vec<f64>), FitError> {
                seen.lock().unwrap().push(x.to_vec());
                let (a, b) = (x[0] - 3.0, x[1] + 4.0);
                Ok((500.0 * (a * a + b * b), vec![1000.0 * a, 1000.0 * b]))
            };
            let m = minimize_lbfgs_with(&f, &[0.0, 0.0], &[true, true], 100, 1e-12, first).unwrap();
            let seen = seen.into_inner().unwrap();
            let step = seen[1].iter().map(|v| v * v).sum::<f64>().sqrt();
            assert!((step - want).abs() < 1e-9 * want, "{first:?}: first trial step {step}, want {want}");
            // Along -g: the direction (3, -4) / 5.
            assert!((seen[1][0] * 4.0 + seen[1][1] * 3.0).abs() < 1e-6 * want, "{first:?}: {:?}", seen[1]);
            assert!((m.x[0] - 3.0).abs() < 1e-5 && (m.x[1] + 4.0).abs() < 1e-5, "{first:?}: {m:?}");
        }
    }

    #[test]
    fn carried_curvature_pairs_make_the_next_runs_first_step_newtons() {
        // f_c(x) = 50 (x - c)^2 has curvature 100. Every pair (s, y) of a run on f_1 has
        // y = 100 s, so L-BFGS's H is exactly 1/100 and a second run, on f_-2 from x = 0 with
        // the pairs carried, takes the Newton step -g / 100 = -2: its first trial point is the
        // minimum. Without them the first trial point is x0 - g = -200.
        let cost =
            |c: f64| move |x: &[f64]| -> Result<(f64, Vec<f64>), FitError> { Ok((50.0 * (x[0] - c).powi(2), vec![100.0 * (x[0] - c)])) };
        let mut memory = LbfgsMemory::default();
        let first = minimize_lbfgs_resume(&cost(1.0), &[0.0], &[true], 100, 1e-14, LbfgsOptions::default(), &mut memory).unwrap();
        assert!((first.x[0] - 1.0).abs() < 1e-6, "{first:?}");
        assert!(!memory.is_empty(), "a clean run leaves its pairs");
        for (carry, want) in [(true, -2.0), (false, -200.0)] {
            let seen = Mutex::new(Vec::new());
            let f = |x: &[f64]| {
                seen.lock().unwrap().push(x[0]);
                cost(-2.0)(x)
            };
            let mut fresh = LbfgsMemory::default();
            let m = minimize_lbfgs_resume(
                &f,
                &[0.0],
                &[true],
                100,
                1e-14,
                LbfgsOptions::default(),
                if carry { &mut memory } else { &mut fresh },
            )
            .unwrap();
            let seen = seen.into_inner().unwrap();
            assert!((seen[1] - want).abs() < 1e-9 * want.abs(), "carry {carry}: first trial point {}, want {want}", seen[1]);
            assert!((m.x[0] + 2.0).abs() < 1e-6, "carry {carry}: {m:?}");
        }
    }

    #[test]
    fn a_run_with_other_settings_does_not_inherit_the_carried_solver() {
        // The pairs of a run at one cost tolerance are not offered to a run at another (the
        // carried solver would bring its tolerance and line search along): its first trial
        // point is then x0 - g = -200, as with no memory.
        let cost =
            |c: f64| move |x: &[f64]| -> Result<(f64, Vec<f64>), FitError> { Ok((50.0 * (x[0] - c).powi(2), vec![100.0 * (x[0] - c)])) };
        let mut memory = LbfgsMemory::default();
        minimize_lbfgs_resume(&cost(1.0), &[0.0], &[true], 100, 1e-14, LbfgsOptions::default(), &mut memory).unwrap();
        assert!(!memory.is_empty());
        let seen = Mutex::new(Vec::new());
        let f = |x: &[f64]| {
            seen.lock().unwrap().push(x[0]);
            cost(-2.0)(x)
        };
        minimize_lbfgs_resume(&f, &[0.0], &[true], 100, 1e-10, LbfgsOptions::default(), &mut memory).unwrap();
        assert_eq!(seen.into_inner().unwrap()[1], -200.0);
    }

    #[test]
    fn pairs_are_not_carried_out_of_a_run_in_rescaled_coordinates() {
        // A unit-length first step works in w = sqrt|g| (z - z0), whose pairs are not in z's units.
        let f = |x: &[f64]| -> Result<(f64, Vec<f64>), FitError> { Ok((50.0 * (x[0] - 1.0).powi(2), vec![100.0 * (x[0] - 1.0)])) };
        let mut memory = LbfgsMemory::default();
        let opts = LbfgsOptions { first_step: FirstStep::UnitLength, ..Default::default() };
        minimize_lbfgs_resume(&f, &[0.0], &[true], 100, 1e-14, opts, &mut memory).unwrap();
        assert!(memory.is_empty());
        minimize_lbfgs_resume(&f, &[0.0], &[true], 100, 1e-14, LbfgsOptions::default(), &mut memory).unwrap();
        assert!(!memory.is_empty());
    }

    #[test]
    fn a_budget_stop_ends_at_the_best_point_so_far() {
        // Rosenbrock from (-1.2, 1): far from converged when the sixth evaluation reports the
        // budget spent; the result is the best of the five points evaluated.
        let seen = Mutex::new(Vec::new());
        let f = |x: &[f64]| -> Result<(f64, Vec<f64>), FitError> {
            let mut seen = seen.lock().unwrap();
            if seen.len() == 5 {
                return Err(FitError::Stop(StopReason::BudgetIterations));
            }
            let (a, b) = (x[0], x[1]);
            let v = (1.0 - a).powi(2) + 100.0 * (b - a * a).powi(2);
            seen.push(v);
            Ok((v, vec![-2.0 * (1.0 - a) - 400.0 * a * (b - a * a), 200.0 * (b - a * a)]))
        };
        let m = minimize_lbfgs(&f, &[-1.2, 1.0], &[true, true], 100, 1e-10).unwrap();
        let seen = seen.into_inner().unwrap();
        assert_eq!((m.evaluations, m.stopped_by), (5, Some(StopReason::BudgetIterations)));
        assert_eq!(m.value, seen.iter().copied().fold(f64::INFINITY, f64::min));
        assert!(m.value > 1e-3, "not converged: {m:?}");
    }

    #[test]
    fn line_searches_failing_the_wolfe_conditions_are_counted_and_can_end_the_search() {
        // Cost (x - 1)^2 with a "gradient" 2 (x - 5) (a wrong one, as the IVM's exact strategy
        // has): from x = 0 the steps the cost accepts (f <= 1, x in [0, 2]) and those where the
        // stated slope has flattened (|x - 5| <= 0.9 * 5, x in [0.5, 9.5]) overlap only on [0.5, 2],
        // and L-BFGS soon leaves it (the stated gradient vanishes at 5): some line searches end
        // without the strong Wolfe conditions.
        let wrong = |x: &[f64]| -> Result<(f64, Vec<f64>), FitError> { Ok(((x[0] - 1.0).powi(2), vec![2.0 * (x[0] - 5.0)])) };
        let go_on = minimize_lbfgs(&wrong, &[0.0], &[true], 20, 1e-12).unwrap();
        assert!(go_on.failed_line_searches > 0, "{go_on:?}");
        assert!(!go_on.stop_reason.contains(FAILED_LINE_SEARCH), "{go_on:?}");
        let opts = LbfgsOptions { stop_on_failed_line_search: true, ..Default::default() };
        let stop = minimize_lbfgs_opts(&wrong, &[0.0], &[true], 20, 1e-12, opts).unwrap();
        assert_eq!(stop.failed_line_searches, 1, "{stop:?}");
        assert!(stop.stop_reason.contains(FAILED_LINE_SEARCH), "{stop:?}");
        assert!(stop.evaluations < go_on.evaluations, "{stop:?} / {go_on:?}");
        // It ends at the best point it evaluated, never above the start.
        assert!(stop.value <= 1.0, "{stop:?}");
        // A consistent gradient: no failure, and the option changes nothing.
        let f = |x: &[f64]| -> Result<(f64, Vec<f64>), FitError> {
            let (a, b) = (x[0], x[1]);
            Ok(((1.0 - a).powi(2) + 100.0 * (b - a * a).powi(2), vec![-2.0 * (1.0 - a) - 400.0 * a * (b - a * a), 200.0 * (b - a * a)]))
        };
        let plain = minimize_lbfgs(&f, &[-1.2, 1.0], &[true, true], 30, 1e-10).unwrap();
        let checked = minimize_lbfgs_opts(&f, &[-1.2, 1.0], &[true, true], 30, 1e-10, opts).unwrap();
        assert_eq!(plain.failed_line_searches, 0, "{plain:?}");
        assert_eq!((plain.x, plain.value, plain.evaluations), (checked.x, checked.value, checked.evaluations));
    }

    #[test]
    fn the_decrease_line_search_reads_costs_only_and_fails_where_nothing_decreases() {
        // A cost whose stated gradient points uphill (f = x^2, "gradient" -2x): every trial step
        // along its L-BFGS direction raises the cost, so the first line search fails after its
        // trials and the search ends at the start.
        let uphill = |x: &[f64]| -> Result<(f64, Vec<f64>), FitError> { Ok((x[0] * x[0], vec![-2.0 * x[0]])) };
        let opts = LbfgsOptions { line_search: LineSearchKind::Decrease, ..Default::default() };
        let m = minimize_lbfgs_opts(&uphill, &[1.0], &[true], 20, 1e-12, opts).unwrap();
        assert_eq!((m.x.clone(), m.value, m.failed_line_searches), (vec![1.0], 1.0, 1), "{m:?}");
        assert_eq!(m.evaluations, 1 + DECREASE_TRIALS, "{m:?}");
        assert!(m.stop_reason.contains(FAILED_LINE_SEARCH), "{m:?}");
        // The wrong gradient of the Wolfe test above, traced by hand. From x = 0 (g = -10) the
        // first direction is +10: trials 10, 5, 2.5 raise the cost (81, 16, 2.25 > 1), 1.25 lowers
        // it (0.0625) and is taken, read off the cost alone. Then g = -7.5, L-BFGS's scale
        // s y / y y = 1.25 * 2.5 / 6.25 = 0.5 gives the direction +3.75: every trial lies right of
        // 1.25, where the cost only rises, so after 20 trials the search fails and ends at 1.25.
        // (A search reading the stated slope at its trial points, which never turns positive
        // before x = 5, would not take 1.25 after exactly four trials.)
        let seen = Mutex::new(Vec::new());
        let wrong = |x: &[f64]| -> Result<(f64, Vec<f64>), FitError> {
            seen.lock().unwrap().push(x[0]);
            Ok(((x[0] - 1.0).powi(2), vec![2.0 * (x[0] - 5.0)]))
        };
        let m = minimize_lbfgs_opts(&wrong, &[0.0], &[true], 20, 1e-12, opts).unwrap();
        let seen = seen.into_inner().unwrap();
        assert_eq!(&seen[..5], &[0.0, 10.0, 5.0, 2.5, 1.25]);
        assert!(seen[5..].iter().all(|&x| x > 1.25), "{seen:?}");
        assert_eq!((m.x, m.value, m.evaluations, m.failed_line_searches), (vec![1.25], 0.0625, 1 + 4 + DECREASE_TRIALS, 1));
        // A consistent gradient: L-BFGS with this search still solves Rosenbrock's problem.
        let rosen = |x: &[f64]| -> Result<(f64, Vec<f64>), FitError> {
            let (a, b) = (x[0], x[1]);
            Ok(((1.0 - a).powi(2) + 100.0 * (b - a * a).powi(2), vec![-2.0 * (1.0 - a) - 400.0 * a * (b - a * a), 200.0 * (b - a * a)]))
        };
        let m = minimize_lbfgs_opts(&rosen, &[-1.2, 1.0], &[true, true], 500, 1e-14, opts).unwrap();
        assert!((m.x[0] - 1.0).abs() < 1e-4 && (m.x[1] - 1.0).abs() < 1e-4, "{m:?}");
    }

    #[test]
    fn a_timeout_is_an_error_not_a_result() {
        let f = |_: &[f64]| -> Result<(f64, Vec<f64>), FitError> { Err(FitError::Timeout { seconds: 1.0 }) };
        assert!(matches!(minimize_lbfgs(&f, &[0.0], &[true], 10, 1e-10), Err(FitError::Timeout { .. })));
    }
}
