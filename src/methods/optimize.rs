//! The one outer optimiser every method uses for hyper-parameters: L-BFGS (argmin, More-Thuente
//! line search) minimising a cost over log-parameters, a subset of which may be held fixed.
use super::FitError;
use argmin::core::{CostFunction, Executor, Gradient, State};
use argmin::solver::linesearch::MoreThuenteLineSearch;
use argmin::solver::quasinewton::LBFGS;
use std::sync::Mutex;

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
}

type CostAndGrad<'a> = dyn Fn(&[f64]) -> Result<(f64, Vec<f64>), FitError> + Sync + 'a;

/// argmin calls cost and gradient separately; one evaluation computes both, so cache the last.
struct Problem<'a> {
    f: &'a CostAndGrad<'a>,
    x0: Vec<f64>,
    free: Vec<usize>,
    cache: &'a Mutex<Cache>,
}

#[derive(Default)]
struct Cache {
    last: Option<(Vec<f64>, f64, Vec<f64>)>,
    best: Option<(Vec<f64>, f64)>,
    evaluations: usize,
    fatal: Option<FitError>,
}

impl Problem<'_> {
    fn full(&self, z: &[f64]) -> Vec<f64> {
        let mut x = self.x0.clone();
        for (k, &i) in self.free.iter().enumerate() {
            x[i] = z[k];
        }
        x
    }

    fn eval(&self, z: &[f64]) -> Result<(f64, Vec<f64>), argmin::core::Error> {
        let mut cache = self.cache.lock().expect("optimiser cache poisoned");
        if let Some((zc, v, g)) = &cache.last {
            if zc.as_slice() == z {
                return Ok((*v, g.clone()));
            }
        }
        let x = self.full(z);
        match (self.f)(&x) {
            Ok((v, g)) if v.is_finite() && g.iter().all(|gi| gi.is_finite()) => {
                let gz: Vec<f64> = self.free.iter().map(|&i| g[i]).collect();
                cache.evaluations += 1;
                if cache.best.as_ref().is_none_or(|(_, b)| v < *b) {
                    cache.best = Some((x, v));
                }
                cache.last = Some((z.to_vec(), v, gz.clone()));
                Ok((v, gz))
            }
            Ok(_) => Err(argmin::core::Error::msg("non-finite objective or gradient")),
            Err(e) => {
                let msg = e.to_string();
                if matches!(e, FitError::Timeout { .. }) {
                    cache.fatal = Some(e);
                }
                Err(argmin::core::Error::msg(msg))
            }
        }
    }
}

impl CostFunction for Problem<'_> {
    type Param = Vec<f64>;
    type Output = f64;
    fn cost(&self, z: &Vec<f64>) -> Result<f64, argmin::core::Error> {
        self.eval(z).map(|(v, _)| v)
    }
}

impl Gradient for Problem<'_> {
    type Param = Vec<f64>;
    type Gradient = Vec<f64>;
    fn gradient(&self, z: &Vec<f64>) -> Result<Vec<f64>, argmin::core::Error> {
        self.eval(z).map(|(_, g)| g)
    }
}

/// Minimise `f` (value and gradient w.r.t. the full vector) over the entries of `x0` where
/// `free` is true, by L-BFGS with memory 10. A step that fails (non-finite value, line-search
/// trouble) ends the run at the best point seen; a timeout is returned as an error.
pub fn minimize_lbfgs(f: &CostAndGrad<'_>, x0: &[f64], free: &[bool], max_iters: u64) -> Result<Minimum, FitError> {
    assert_eq!(x0.len(), free.len());
    let free_idx: Vec<usize> = (0..x0.len()).filter(|&i| free[i]).collect();
    let cache = Mutex::new(Cache::default());
    let problem = Problem { f, x0: x0.to_vec(), free: free_idx.clone(), cache: &cache };
    let z0: Vec<f64> = free_idx.iter().map(|&i| x0[i]).collect();
    if z0.is_empty() || max_iters == 0 {
        let (value, _) = f(x0)?;
        return Ok(Minimum { x: x0.to_vec(), value, iterations: 0, evaluations: 1, stop_reason: "nothing to optimise".into() });
    }
    // The first evaluation must succeed: there is no fallback point without it.
    problem.eval(&z0).map_err(|e| fatal_or(&cache, e))?;

    let linesearch = MoreThuenteLineSearch::new();
    let solver = LBFGS::new(linesearch, 10)
        .with_tolerance_grad(1e-6)
        .and_then(|s| s.with_tolerance_cost(1e-10))
        .map_err(|e| FitError::Numerical(e.to_string()))?;
    let outcome = Executor::new(problem, solver).configure(|s| s.param(z0).max_iters(max_iters)).run();

    let (iterations, stop_reason) = match &outcome {
        Ok(res) => (
            res.state().get_iter(),
            res.state().get_termination_reason().map(|r| r.text().to_string()).unwrap_or_default(),
        ),
        Err(e) => (0, format!("stopped early: {e}")),
    };
    let mut cache = cache.into_inner().expect("optimiser cache poisoned");
    if let Some(fatal) = cache.fatal.take() {
        return Err(fatal);
    }
    let (x, value) = cache.best.expect("first evaluation succeeded");
    Ok(Minimum { x, value, iterations, evaluations: cache.evaluations, stop_reason })
}

fn fatal_or(cache: &Mutex<Cache>, e: argmin::core::Error) -> FitError {
    let mut cache = cache.lock().expect("optimiser cache poisoned");
    cache.fatal.take().unwrap_or_else(|| FitError::Numerical(e.to_string()))
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
        let m = minimize_lbfgs(&f, &[-1.2, 1.0, 5.0], &[true, true, false], 500).unwrap();
        assert!((m.x[0] - 1.0).abs() < 1e-4 && (m.x[1] - 1.0).abs() < 1e-4, "{:?}", m);
        assert_eq!(m.x[2], 5.0);
        assert!((m.value - 4.0).abs() < 1e-6);
    }

    #[test]
    fn a_timeout_is_an_error_not_a_result() {
        let f = |_: &[f64]| -> Result<(f64, Vec<f64>), FitError> { Err(FitError::Timeout { seconds: 1.0 }) };
        assert!(matches!(minimize_lbfgs(&f, &[0.0], &[true], 10), Err(FitError::Timeout { .. })));
    }
}
