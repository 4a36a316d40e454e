//! The hyper-parameter search both Laplace likelihoods share: L-BFGS on the approximate log
//! evidence, with budgets and checkpoints.
use super::LaplaceParams;
use crate::kernels::Kernel;
use crate::methods::optimize::minimize_lbfgs;
use crate::methods::{Diagnostics, FitContext, FitError, Fitted};
use faer::Mat;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

/// What the search needs of an evaluation's posterior mode, whichever the likelihood.
pub(super) trait SearchMode: Clone + Send + Sync {
    /// Newton steps taken to find it.
    fn newton_iters(&self) -> usize;
    /// Whether Newton met its tolerance (else the mode is the best point reached).
    fn newton_converged(&self) -> bool;
    /// The next evaluation's Newton start.
    fn warm_start(&self) -> WarmStart;
}

/// What an evaluation leaves for the next one's Newton start: the mode's a, and where known its
/// derivative w.r.t. the log-parameters ([dim, P]), from which the next mode is predicted to
/// first order (the implicit-function derivative the gradient computes anyway): Newton then
/// starts O(|d theta|^2) from the mode instead of O(|d theta|).
pub(super) struct WarmStart {
    pub(super) a: Vec<f64>,
    pub(super) da_dtheta: Option<Mat<f64>>,
}

impl WarmStart {
    /// The starts to try at log-parameters `p`, having been computed at `at`: the predicted a
    /// (first), then a itself (a line search's far trial points can make the prediction worse).
    fn candidates(&self, at: &[f64], p: &[f64]) -> Vec<Vec<f64>> {
        let Some(da) = &self.da_dtheta else { return vec![self.a.clone()] };
        let mut pred = self.a.clone();
        for (j, (x, x0)) in p.iter().zip(at).enumerate() {
            let step = x - x0;
            if step != 0.0 {
                for (k, v) in pred.iter_mut().enumerate() {
                    *v += da[(k, j)] * step;
                }
            }
        }
        vec![pred, self.a.clone()]
    }
}

/// Maximise an approximate log evidence over the kernel's free log-parameters by L-BFGS
/// (shared by both likelihoods). `evidence(kernel, warm)` returns the value, its gradient and
/// the mode, whose `warm_start` seeds the next evaluation's Newton iteration (candidate starts,
/// the best taken). Evaluations are
/// the outer iterations: each traces the best value so far as `log_evidence`, a budget ends the
/// search at the best point, and at scheduled checkpoints `model(kernel, mode)` of the best
/// point so far is scored. Records the optimiser's diagnostics, and the search's Newton work:
/// `hyper_newton_steps` over all evaluations (the benchmark's flop count) and
/// `hyper_newton_unconverged`, the evaluations whose mode search stopped short of its
/// tolerance (their evidence and gradient are those of the best point reached).
pub(super) fn learn_kernel<Mo: SearchMode>(
    kernel: &dyn Kernel,
    params: &LaplaceParams,
    ctx: &FitContext,
    diagnostics: &mut Diagnostics,
    evidence: impl Fn(&dyn Kernel, &[&[f64]]) -> Result<(f64, Vec<f64>, Mo), FitError> + Sync,
    model: impl Fn(Box<dyn Kernel>, Mo) -> Box<dyn Fitted> + Sync,
) -> Result<Box<dyn Kernel>, FitError> {
    let max_iters = params.max_hyper_iters;
    let evals = AtomicU64::new(0);
    let newton_steps = AtomicUsize::new(0);
    let newton_unconverged = AtomicUsize::new(0);
    // (evidence, kernel, mode when checkpoints need it) of the best evaluation so far.
    type Best<Mo> = Option<(f64, Box<dyn Kernel>, Option<Mo>)>;
    let best: Mutex<Best<Mo>> = Mutex::new(None);
    // The last evaluation's log-parameters and warm start.
    let last: Mutex<Option<(Vec<f64>, WarmStart)>> = Mutex::new(None);
    let cost = |p: &[f64]| -> Result<(f64, Vec<f64>), FitError> {
        ctx.check_deadline()?;
        ctx.budget_stop_evaluation(evals.load(Ordering::Relaxed))?;
        let starts = last.lock().expect("warm-start lock").as_ref().map(|(at, w)| w.candidates(at, p)).unwrap_or_default();
        let starts: Vec<&[f64]> = starts.iter().map(Vec::as_slice).collect();
        let k = kernel.with_log_params(p);
        let (v, g, mode) = evidence(k.as_ref(), &starts)?;
        newton_steps.fetch_add(mode.newton_iters(), Ordering::Relaxed);
        newton_unconverged.fetch_add(usize::from(!mode.newton_converged()), Ordering::Relaxed);
        *last.lock().expect("warm-start lock") = Some((p.to_vec(), mode.warm_start()));
        let iter = evals.fetch_add(1, Ordering::Relaxed) + 1;
        // Trace the best evidence so far (line-search trial points would make it jagged).
        let mut best = best.lock().expect("best-point lock");
        if best.as_ref().is_none_or(|(b, _, _)| v > *b) {
            ctx.record(iter as usize - 1, &[("log_evidence", v)]);
            *best = Some((v, k, ctx.has_checkpoints().then_some(mode)));
        }
        let (b, bk, bm) = best.as_ref().expect("set above");
        ctx.checkpoint(iter, Some(*b), || Ok(model(bk.clone(), bm.clone().expect("kept with checkpoints"))));
        Ok((-v, g.iter().map(|x| -x).collect()))
    };
    let min = minimize_lbfgs(&cost, &kernel.log_params(), &kernel.free_mask(), max_iters, params.hyper_tol)?;
    diagnostics.iterations = Some(evals.into_inner());
    diagnostics.stop_reason = Some(min.stop(max_iters));
    diagnostics.number("hyper_iterations", min.iterations as f64).number("hyper_evaluations", min.evaluations as f64);
    diagnostics.number("hyper_newton_steps", newton_steps.into_inner() as f64);
    diagnostics.number("hyper_newton_unconverged", newton_unconverged.into_inner() as f64);
    diagnostics.note("hyper_stop_reason", min.stop_reason);
    Ok(kernel.with_log_params(&min.x))
}
