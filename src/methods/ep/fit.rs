//! The training loop (EP-inner-approx or -exact): per iteration one refinement of the sites (all of
//! them, or a minibatch's) and one step on the kernels and Z, until `max_iters`, the budget or
//! the timeout; checkpoints scored off the clock.
use super::state::State;
use super::sweep::ViewFor;
use super::{Ep, Scheme};
use crate::kernels::KernelSet;
use crate::methods::{Diagnostics, FitContext, FitError, Fitted, HyperPolicy, Method, Problem, StopReason};
use crate::scalable::{inducing_sets, initial_kernels, Adam, IterateAverage, Minibatches};
use rand::Rng;

/// App. G's adaptive rates: one per parameter, x1.02 while the gradient's sign holds, x0.5
/// when it flips, capped at 1 (gradient ascent). The rule is not invariant to the
/// parameterisation, so steps are taken in the authors' units: their length-scale parameter is
/// log l^2 = 2 log l, where a step of rate r moves log l by r g / 4 for g = d/d log l (`unit`
/// 0.25 for length-scales, 1 for the rest).
///
/// With `summed` (the parameters that are length-scales), a length-scale's previous gradient is
/// compared with the sign of the sum of every free length-scale's current gradient instead of
/// its own (`lengthscale_sign: summed`, the authors' batch code).
pub(super) struct AdaptiveRates {
    rate: Vec<f64>,
    last: Vec<f64>,
    unit: Vec<f64>,
    summed: Option<Vec<bool>>,
}

impl AdaptiveRates {
    pub(super) fn new(start: f64, unit: Vec<f64>, summed: Option<Vec<bool>>) -> Self {
        let n = unit.len();
        AdaptiveRates { rate: vec![start; n], last: vec![0.0; n], unit, summed }
    }

    pub(super) fn step(&mut self, theta: &mut [f64], grad: &[f64], free: &[bool]) {
        let lengthscale_sum: Option<f64> =
            self.summed.as_ref().map(|is_ls| (0..grad.len()).filter(|&j| is_ls[j] && free[j]).map(|j| grad[j]).sum());
        for j in 0..theta.len() {
            if !free[j] {
                continue;
            }
            if self.last[j] != 0.0 {
                let now = match (&self.summed, lengthscale_sum) {
                    (Some(is_ls), Some(sum)) if is_ls[j] => sum,
                    _ => grad[j],
                };
                self.rate[j] = if now * self.last[j] >= 0.0 { (self.rate[j] * 1.02).min(1.0) } else { self.rate[j] * 0.5 };
            }
            self.last[j] = grad[j];
            theta[j] += self.unit[j] * self.rate[j] * grad[j];
        }
    }

    pub(super) fn halve(&mut self) {
        self.rate.iter_mut().for_each(|r| *r *= 0.5);
    }
}

pub(crate) fn train(
    method: &Ep,
    problem: &Problem,
    kernels: &KernelSet,
    hyper: HyperPolicy,
    ctx: &mut FitContext,
) -> Result<Box<dyn Fitted>, FitError> {
    let p = &method.params;
    let (x, y, c) = (problem.x, problem.y, problem.n_classes);
    let n = x.nrows();
    let mut init_rng = ctx.init_rng();
    let batch_seed = ctx.rng.next_u64();

    // Model construction (one inducing set per class, the starting length-scales), off the
    // training clock as in Galy-Fajou et al.'s timings.
    let m = p.inducing_for(n);
    let (zs, _) = ctx.off_clock(|| inducing_sets(x, y, c, m, &p.inducing_init, true, &mut init_rng)).map_err(FitError::Unsupported)?;
    let kernels = ctx.off_clock(|| initial_kernels(kernels, p.lengthscale_init, &zs, x, &mut init_rng));
    let mut state = State::new(kernels, zs, method.tied, y)?;

    let mut theta = state.theta();
    let n_kern = state.kernels.n_params();
    let learn = hyper == HyperPolicy::Learn;
    let mut free: Vec<bool> = state.kernels.free_mask().into_iter().map(|f| f && learn).collect();
    free.extend(std::iter::repeat_n(p.learn_inducing, theta.len() - n_kern));
    let moves = free.iter().any(|&f| f);
    let full = p.batch.is_full();
    let mut is_lengthscale: Vec<bool> = state.kernels.param_names().iter().map(|n| crate::kernels::is_lengthscale(n)).collect();
    is_lengthscale.resize(theta.len(), false);
    let unit: Vec<f64> = is_lengthscale.iter().map(|&l| if l { 0.25 } else { 1.0 }).collect();
    let summed = (p.lengthscale_sign == super::LengthscaleSign::Summed).then_some(is_lengthscale);
    let mut rates = AdaptiveRates::new(p.rate, unit, summed);
    let mut adam = Adam::new(theta.len(), p.adam_lr);
    let mut batches = Minibatches::new(n, p.batch.rows(n), batch_seed);
    let all_rows: Vec<usize> = (0..n).collect();
    let mut damping = if full { p.damping } else { 1.0 };
    let use_adam = p.step.map_or(!full, |s| s == super::Step::Adam);
    let (mut rollbacks, mut skipped, mut total_sweeps) = (0u64, 0u64, 0u64);
    let mut stop = StopReason::MaxIterations;
    let mut t = 0u64;
    // Predictions at the average of the iterates when asked for (training never reads it).
    let mut average = p.average_decay.filter(|_| moves).map(|d| IterateAverage::new(d, &free));
    let snapshot = |s: &State, average: &Option<IterateAverage>| -> Result<Box<dyn Fitted>, FitError> {
        Ok(Box::new(match average {
            Some(a) => s.model_at(&a.average(&s.theta()), None, Diagnostics::default())?,
            None => s.model(None, Diagnostics::default()),
        }))
    };

    while t < p.max_iters {
        ctx.check_deadline()?;
        t += 1;
        let rows = if full { all_rows.clone() } else { batches.next_batch() };
        let block = state.block(x, y, &rows);
        if p.site_directions == super::SiteDirections::Current && t > 1 && moves {
            state.realign(&block)?;
        }
        // Lagged from the second refinement on: the first one's stored directions are zero.
        let purpose = if p.site_directions == super::SiteDirections::Lagged && t > 1 { ViewFor::SweepAlongStored } else { ViewFor::Sweep };
        // Inner-approx: one refinement; outer: refinements until the sites settle.
        let sweeps = if p.scheme == Scheme::Outer { p.outer_max_sweeps } else { 1 };
        if p.scheme == Scheme::Outer {
            // Each step's EP starts its damping schedule afresh (warm-started sites).
            damping = p.damping;
        }
        for sweep in 0..sweeps {
            let mut retries = 0;
            let change = loop {
                match state.refine(&block, damping, purpose) {
                    Ok(change) => break change,
                    // A minibatch's failed refinement leaves its sites as they were.
                    Err(_) if !full => {
                        skipped += 1;
                        break 0.0;
                    }
                    // The very first refinement has no earlier state to fall back on (notes
                    // §2.7); later sweeps of the outer scheme's first step do.
                    Err(e) if (t == 1 && sweep == 0) || retries >= p.max_retries => {
                        return Err(FitError::Numerical(format!(
                            "{}: refinement failed at iteration {t} after {retries} roll-backs: {e}",
                            method.name()
                        )))
                    }
                    // Not the authors' roll-back (notes §2.7): they halve that iteration's
                    // damping only and step back to the state before the previous iteration;
                    // here the damping stays halved and the retry starts from the current state
                    // (a failed refinement stores nothing). With positive site precisions no
                    // cavity can fail in exact arithmetic, and no stored EP or SEP cell rolled
                    // back (diag_rollbacks is 0 in all 5,863 stored EP and SEP cells).
                    Err(_) => {
                        retries += 1;
                        rollbacks += 1;
                        damping *= 0.5;
                        rates.halve();
                    }
                }
            };
            total_sweeps += 1;
            if p.scheme == Scheme::Outer {
                damping *= p.damping_decay;
                if change < p.outer_tol {
                    break;
                }
            }
        }
        if moves {
            let scale = n as f64 / rows.len() as f64;
            let grad = if p.scheme == Scheme::InnerExact { state.exact_gradient(&block)? } else { state.gradient(&block, scale)? };
            if !use_adam {
                rates.step(&mut theta, &grad, &free);
            } else {
                // Adam steps each length-scale in theta's own coordinate, log l, where the
                // adaptive rates above convert to the authors' log l^2: Adam's steps are about
                // `adam_lr` long in its coordinate, so a given rate moves log l about twice as
                // far as the authors' (whose step of log l^2 moves log l by half of it;
                // vc2017-fig5* and Figure 3's `step: adam` entries).
                let mut descent = grad;
                descent.iter_mut().for_each(|g| *g = -*g);
                adam.step(&mut theta, &descent, &free);
            }
            if state.set_theta(&theta).is_err() {
                // A step to kernels or inducing inputs whose matrices fail: stay, smaller steps
                // (a failed `set_theta` leaves the state as it was, so its theta is the old one;
                // no copy of theta is kept per step: 1.6 million numbers on MNIST).
                theta = state.theta();
                rates.halve();
                rollbacks += 1;
            }
            if let Some(a) = &mut average {
                a.update(&theta);
            }
        }
        if full && p.scheme != Scheme::Outer {
            damping *= p.damping_decay;
        }
        ctx.checkpoint_with(t, || state.log_z_q(x, y).ok(), || snapshot(&state, &average));
        if let Some(reason) = ctx.budget_stop(t) {
            stop = reason;
            break;
        }
    }
    let evidence = ctx.off_clock(|| state.log_z_q(x, y))?;
    if !evidence.is_finite() {
        return Err(FitError::Numerical(format!("{}: log Z_q is {evidence}", method.name())));
    }
    let mut diagnostics = Diagnostics { iterations: Some(t), stop_reason: Some(stop), ..Default::default() };
    diagnostics.number("inducing", m as f64);
    diagnostics.number("epochs", t as f64 * p.batch.rows(n) as f64 / n as f64);
    diagnostics.number("rollbacks", rollbacks as f64);
    diagnostics.number("site_sweeps", total_sweeps as f64);
    diagnostics.number("damping_last", damping);
    if !full {
        diagnostics.number("skipped_batches", skipped as f64);
    }
    diagnostics.number("state_bytes", state.site_bytes() as f64);
    diagnostics.note("batch", if full { "full (parallel updates, damped)".to_string() } else { format!("{} (undamped)", p.batch.rows(n)) });
    diagnostics.note("step", if use_adam { format!("Adam {:?}", p.adam_lr) } else { format!("adaptive rates from {}", p.rate) });
    match &average {
        Some(a) => {
            diagnostics
                .note("predicts_at", format!("the iterates' moving average (decay {} a step); log Z_q at the last iterate", a.decay()));
            Ok(Box::new(state.model_at(&a.average(&theta), Some(evidence), diagnostics)?))
        }
        None => Ok(Box::new(state.model(Some(evidence), diagnostics))),
    }
}
