//! The line searches L-BFGS runs with: More-Thuente checked against the strong Wolfe
//! conditions, and a search on cost values alone (for costs whose gradient is not their own).
use super::FAILED_LINE_SEARCH;
use crate::linalg::dot;
use argmin::core::{CostFunction, Gradient, IterState, LineSearch, Problem as ArgminProblem, Solver, State, TerminationReason, KV};
use argmin::solver::linesearch::MoreThuenteLineSearch;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// The message of a More-Thuente search that fails the strong Wolfe conditions.
const FAILED_WOLFE: &str = "line search failed the strong Wolfe conditions";
/// Trial steps of a `Decrease` line search before it fails: the last is 2^-19 of the direction
/// (L-BFGS's first direction is the gradient itself, of any length).
pub(super) const DECREASE_TRIALS: usize = 20;

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
pub(super) struct WolfeChecked<L> {
    inner: L,
    failures: Arc<AtomicUsize>,
    stop: bool,
    direction: Vec<f64>,
    /// The start point, its cost and its gradient.
    start: Option<(Vec<f64>, f64, Vec<f64>)>,
}

impl<L> WolfeChecked<L> {
    pub(super) fn new(inner: L, failures: Arc<AtomicUsize>, stop: bool) -> Self {
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
pub(super) struct DecreaseOnly {
    failures: Arc<AtomicUsize>,
    direction: Vec<f64>,
    /// The start point and its cost.
    start: Option<(Vec<f64>, f64)>,
    step: f64,
    trials: usize,
}

impl DecreaseOnly {
    pub(super) fn new(failures: Arc<AtomicUsize>) -> Self {
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
pub(super) enum Search {
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
