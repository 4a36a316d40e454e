//! Batch training (`optimizer: lbfgs`): L-BFGS on the full-data ELBO over the kernel
//! log-parameters, Z and each class's q (mean and square root), as Villacampa-Calvo &
//! Hernandez-Lobato (2017) train VI on the UCI tables (250 iterations). Every evaluation sums
//! the ELBO and its gradient over all rows (blocks of `BLOCK_ROWS`); a Monte Carlo likelihood
//! uses the same draws at every evaluation, so the objective is a fixed function.
use super::elbo::{self, Wants};
use super::fit::sparse_at;
use super::model::{Sparse, SvgpModel, BLOCK_ROWS};
use super::posterior::Posterior;
use super::Svgp;
use crate::methods::optimize::{minimize_lbfgs_in_coordinates, LbfgsOptions};
use crate::methods::{Diagnostics, FitContext, FitError, Fitted, Problem};
use crate::scalable::inducing::InitReport;
use rand::SeedableRng;
use rand_pcg::Pcg64;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Seed of the fixed draws of a Monte Carlo likelihood.
const DRAWS_SEED: u64 = 0x1BF6_5EED;

/// The full-data ELBO at `sparse` and its gradient in theta's layout.
pub(crate) fn elbo_and_grad(sparse: &Sparse, problem: &Problem, method: &Svgp, learn_inputs: bool, n_theta: usize) -> (f64, Vec<f64>) {
    elbo_and_grad_in_blocks(sparse, problem, method, learn_inputs, n_theta, BLOCK_ROWS)
}

/// `elbo_and_grad` summed over blocks of `block_rows` rows (a test checks that the blocks add
/// up to the one-block objective).
pub(crate) fn elbo_and_grad_in_blocks(
    sparse: &Sparse,
    problem: &Problem,
    method: &Svgp,
    learn_inputs: bool,
    n_theta: usize,
    block_rows: usize,
) -> (f64, Vec<f64>) {
    let (x, y) = (problem.x, problem.y);
    let m = sparse.m();
    let (n_kern, n_z) = (sparse.kernels.n_params(), sparse.n_z());
    let mut rng = Pcg64::seed_from_u64(DRAWS_SEED);
    let mut ell = 0.0;
    let mut grad = vec![0.0; n_theta];
    let mut g_m: Vec<Vec<f64>> = vec![vec![0.0; m]; sparse.n_classes()];
    let mut g_s: Vec<faer::Mat<f64>> = (0..sparse.n_classes()).map(|_| faer::Mat::zeros(m, m)).collect();
    for start in (0..x.nrows()).step_by(block_rows) {
        let end = (start + block_rows).min(x.nrows());
        let xb = x.slice(ndarray::s![start..end, ..]).to_owned();
        let g = elbo::block(
            sparse,
            &xb,
            &y[start..end],
            &method.likelihood,
            &mut rng,
            1.0,
            Wants { q: true, inputs: learn_inputs, kl: start == 0 },
        );
        ell += g.ell;
        if let Some(inputs) = &g.inputs {
            grad[..n_kern].iter_mut().zip(&inputs.params).for_each(|(d, v)| *d += v);
            grad[n_kern..n_kern + n_z].iter_mut().zip(inputs.z.iter()).for_each(|(d, v)| *d += v);
        }
        for class in 0..sparse.n_classes() {
            g_m[class].iter_mut().zip(&g.g_m[class]).for_each(|(a, b)| *a += b);
            g_s[class] += &g.g_s[class];
        }
    }
    let mut at = n_kern + n_z;
    for (class, q) in sparse.q.iter().enumerate() {
        let Posterior::Sqrt { mean, l } = q else { unreachable!("L-BFGS holds q as mean and square root") };
        let mut g_q = Posterior::sqrt_grads(mean, l, &g_m[class], &g_s[class]);
        if !sparse.whiten {
            g_q = Posterior::sqrt_grads_unwhitened(&g_q, &sparse.chols[sparse.kernel_of(class)]);
        }
        grad[at..at + g_q.len()].copy_from_slice(&g_q);
        at += g_q.len();
    }
    (ell - sparse.q.iter().map(|q| q.kl()).sum::<f64>(), grad)
}

pub(crate) fn train(
    method: &Svgp,
    problem: &Problem,
    start: &Sparse,
    theta0: &[f64],
    free: &[bool],
    ctx: &mut FitContext,
    init: &InitReport,
) -> Result<Box<dyn Fitted>, FitError> {
    let n_kern_z = start.kernels.n_params() + start.n_z();
    let learn_inputs = free[..n_kern_z].iter().any(|&f| f);
    let evals = AtomicU64::new(0);
    let best: Mutex<Option<(f64, Vec<f64>)>> = Mutex::new(None);
    let model = |sparse: Sparse, evidence: Option<f64>, diagnostics: Diagnostics| SvgpModel {
        sparse,
        likelihood: method.likelihood.clone(),
        evidence,
        diagnostics,
    };
    let cost = |theta: &[f64]| -> Result<(f64, Vec<f64>), FitError> {
        ctx.check_deadline()?;
        ctx.budget_stop_evaluation(evals.load(Ordering::Relaxed))?;
        let sparse = sparse_at(start, theta, None, learn_inputs)?;
        let (v, g) = elbo_and_grad(&sparse, problem, method, learn_inputs, theta.len());
        let iter = evals.fetch_add(1, Ordering::Relaxed) + 1;
        let mut b = best.lock().expect("best-point lock");
        let improved = v.is_finite() && b.as_ref().is_none_or(|(bv, _)| v > *bv);
        if improved {
            ctx.record(iter as usize - 1, &[("elbo", v)]);
            *b = Some((v, theta.to_vec()));
        }
        // Every scheduled evaluation scores the best point so far (a trial point the line
        // search rejects leaves it where it was), so that each fit's curve has a point at
        // every checkpoint; the snapshot at an earlier best point is rebuilt off the clock.
        if let Some((bv, bt)) = b.as_ref() {
            let snapshot = || -> Result<Box<dyn Fitted>, FitError> {
                let at_best = if improved { sparse } else { sparse_at(start, bt, None, learn_inputs)? };
                Ok(Box::new(model(at_best, None, Diagnostics::default())))
            };
            ctx.checkpoint(iter, Some(*bv), snapshot);
        }
        Ok((-v, g.iter().map(|x| -x).collect()))
    };
    let p = &method.params;
    // Each length-scale in the chosen coordinate (log l or log l^2), everything else as it is.
    let coordinates = p.lbfgs_lengthscale.scales(&start.kernels.param_names(), theta0.len());
    let opts = LbfgsOptions { first_step: p.lbfgs_first_step, pairs: p.lbfgs_pairs, ..Default::default() };
    let min = minimize_lbfgs_in_coordinates(&cost, theta0, free, p.max_iters, 1e-10, opts, &coordinates)?;
    let sparse = sparse_at(start, &min.x, None, learn_inputs)?;
    let evidence =
        ctx.off_clock(|| elbo::full_elbo(&sparse, problem.x, problem.y, &method.likelihood, &mut Pcg64::seed_from_u64(DRAWS_SEED)));
    if !evidence.is_finite() {
        return Err(FitError::Numerical(format!("svgp: the full-data ELBO is {evidence}")));
    }
    let mut diagnostics =
        Diagnostics { iterations: Some(evals.load(Ordering::Relaxed)), stop_reason: Some(min.stop(p.max_iters)), ..Default::default() };
    diagnostics.number("hyper_iterations", min.iterations as f64).number("hyper_evaluations", min.evaluations as f64);
    diagnostics.number("inducing", (start.m() * start.zs.len()) as f64);
    diagnostics.number("kmeans_rows", init.kmeans_rows as f64);
    diagnostics.note("hyper_stop_reason", min.stop_reason);
    Ok(Box::new(model(sparse, Some(evidence), diagnostics)))
}
