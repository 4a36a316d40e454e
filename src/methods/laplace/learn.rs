//! The hyper-parameter search both Laplace likelihoods share: L-BFGS on the approximate log
//! evidence, with budgets and checkpoints.
use crate::kernels::Kernel;
use crate::methods::optimize::minimize_lbfgs;
use crate::methods::{Diagnostics, FitContext, FitError, Fitted, StopReason};

/// Maximise an approximate log evidence over the kernel's free log-parameters by L-BFGS
/// (shared by both likelihoods). `evidence(kernel, warm)` returns the value, its gradient and
/// the mode, whose `warm_start` seeds the next evaluation's Newton iteration. Evaluations are
/// the outer iterations: each traces the best value so far as `log_evidence`, a budget ends the
/// search at the best point, and at scheduled checkpoints `model(kernel, mode)` of the best
/// point so far is scored. Records the optimiser's diagnostics.
pub(super) fn learn_kernel<Mo: Clone + Send + Sync>(
    kernel: &dyn Kernel,
    max_iters: u64,
    ctx: &FitContext,
    diagnostics: &mut Diagnostics,
    evidence: impl Fn(&dyn Kernel, Option<&[f64]>) -> Result<(f64, Vec<f64>, Mo), FitError> + Sync,
    warm_start: impl Fn(&Mo) -> Vec<f64> + Sync,
    model: impl Fn(Box<dyn Kernel>, Mo) -> Box<dyn Fitted> + Sync,
) -> Result<Box<dyn Kernel>, FitError> {
    let evals = std::sync::atomic::AtomicU64::new(0);
    // (evidence, kernel, mode when checkpoints need it) of the best evaluation so far.
    type Best<Mo> = Option<(f64, Box<dyn Kernel>, Option<Mo>)>;
    let best: std::sync::Mutex<Best<Mo>> = std::sync::Mutex::new(None);
    let last_a: std::sync::Mutex<Option<Vec<f64>>> = std::sync::Mutex::new(None);
    let cost = |p: &[f64]| -> Result<(f64, Vec<f64>), FitError> {
        ctx.check_deadline()?;
        let done = evals.load(std::sync::atomic::Ordering::Relaxed);
        if let Some(stop) = ctx.budget_stop(done) {
            return Err(FitError::Stop(stop));
        }
        let warm = last_a.lock().expect("warm-start lock").clone();
        let k = kernel.with_log_params(p);
        let (v, g, mode) = evidence(k.as_ref(), warm.as_deref())?;
        *last_a.lock().expect("warm-start lock") = Some(warm_start(&mode));
        let iter = evals.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        // Trace the best evidence so far (line-search trial points would make it jagged).
        let mut best = best.lock().expect("best-point lock");
        if best.as_ref().is_none_or(|(b, _, _)| v > *b) {
            ctx.record(iter as usize - 1, &[("log_evidence", v)]);
            *best = Some((v, k, ctx.has_checkpoints().then_some(mode)));
        }
        let (b, bk, bm) = best.as_ref().expect("set above");
        ctx.checkpoint(iter, Some(*b), || Ok(model(bk.clone(), bm.clone().expect("kept with checkpoints"))))?;
        Ok((-v, g.iter().map(|x| -x).collect()))
    };
    let min = minimize_lbfgs(&cost, &kernel.log_params(), &kernel.free_mask(), max_iters, 1e-10)?;
    diagnostics.iterations = Some(evals.into_inner());
    diagnostics.stop_reason =
        Some(min.stopped_by.unwrap_or(if min.iterations >= max_iters { StopReason::MaxIterations } else { StopReason::Converged }));
    diagnostics.number("hyper_iterations", min.iterations as f64).number("hyper_evaluations", min.evaluations as f64);
    diagnostics.note("hyper_stop_reason", min.stop_reason);
    Ok(kernel.with_log_params(&min.x))
}
