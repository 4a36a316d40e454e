//! The training loop: class-weighted k-means inducing sets, then steps (local step on the
//! batch, global natural-parameter step, an Adam step on the kernels (and with
//! `learn_inducing` the inducing inputs) every `hyper_every`)
//! until the budget, `max_iters` or the timeout, with checkpoints scored off the clock.
use super::global::{blend, local_step, target_noise, targets};
use super::model::{ScmgpcModel, Sparse};
use super::{elbo, hyper, Rho, Scmgpc};
use crate::kernels::KernelSet;
use crate::methods::{Diagnostics, FitContext, FitError, Fitted, HyperPolicy, Problem, StopReason};
use crate::scalable::adaptive_rate::AdaptiveRate;
use crate::scalable::{class_weighted_inducing, initial_kernels, Adam, Minibatches, NaturalGaussian};
use ndarray::{Array2, Axis};
use rand::Rng;

pub(crate) fn train(
    method: &Scmgpc,
    problem: &Problem,
    kernels: &KernelSet,
    hyper_policy: HyperPolicy,
    ctx: &mut FitContext,
) -> Result<Box<dyn Fitted>, FitError> {
    let p = &method.params;
    let (x, y, c) = (problem.x, problem.y, problem.n_classes);
    let n = x.nrows();
    // Independent streams for initialisation and batches.
    let mut init_rng = ctx.init_rng();
    let batch_seed = ctx.rng.next_u64();

    // Model construction, off the training clock as in the authors' timings (notes §9.2).
    let (zs, init) = ctx
        .off_clock(|| class_weighted_inducing(x, y, c, p.inducing, p.kmeans_subsample, p.kmeans_iters, &mut init_rng))
        .map_err(FitError::Unsupported)?;
    let kernels = ctx.off_clock(|| initial_kernels(kernels, p.lengthscale_init, &zs, x, &mut init_rng));
    let m = zs[0].nrows();
    // q(v^c) = N(0, I), i.e. q(u^c) = p(u^c) (the authors start at Sigma = I in u; batch CAVI
    // overwrites either in its first step).
    let qs = (0..c).map(|_| NaturalGaussian::standard(m)).collect();
    let mut sparse = Sparse::new(kernels, zs, qs, p.jitter)?;
    // alpha_i = C (notes §5.4), warm-started from here on.
    let mut alpha = vec![c as f64; n];

    // Adam's vector: the kernels' log-parameters, then (`learn_inducing`) every class's Z^c
    // row by row.
    let learn_kernels = hyper_policy == HyperPolicy::Learn;
    let mut theta = sparse.kernels.log_params();
    let n_kernel = theta.len();
    let mut free: Vec<bool> = sparse.kernels.free_mask().into_iter().map(|f| f && learn_kernels).collect();
    if p.learn_inducing {
        for g in &sparse.classes {
            theta.extend(g.z.iter());
            free.extend(std::iter::repeat_n(true, g.z.len()));
        }
    }
    let learn = free.iter().any(|&f| f);
    let mut adam = Adam::new(theta.len(), p.adam_lr);
    let full_batch = p.batch.is_full();
    let size = p.batch.rows(n);
    let mut batches = Minibatches::new(n, size, batch_seed);
    let all_rows: Vec<usize> = (0..n).collect();
    // Ranganath et al.'s rate per class, started (off the clock, as the authors' "MCInit") from
    // the target noise of 10 minibatches at the initial q; their window is 10 |S|.
    let mut adaptive: Option<Vec<AdaptiveRate>> = match p.rho {
        Rho::Adaptive(_) if !full_batch => Some(ctx.off_clock(|| {
            const SAMPLES: usize = 10;
            let mut noise: Vec<Vec<Vec<f64>>> = vec![Vec::with_capacity(SAMPLES); c];
            for _ in 0..SAMPLES {
                let rows = batches.next_batch();
                let xb = x.select(Axis(0), &rows);
                let yb: Vec<usize> = rows.iter().map(|&i| y[i]).collect();
                let mut alpha_b: Vec<f64> = rows.iter().map(|&i| alpha[i]).collect();
                let (mg, locals) = local_step(method, &sparse, &xb, &yb, &mut alpha_b);
                let t = targets(&mg, &yb, &locals, n as f64 / rows.len() as f64);
                (0..c).for_each(|k| noise[k].push(target_noise(&sparse, &t, k)));
            }
            noise.iter().map(|d| AdaptiveRate::from_samples(d, (SAMPLES * size) as f64)).collect()
        })),
        _ => None,
    };
    let mut stop = StopReason::MaxIterations;
    let mut t = 0u64;
    let mut rho = 1.0;
    let snapshot = |sparse: &Sparse| -> Result<Box<dyn Fitted>, FitError> {
        Ok(Box::new(ScmgpcModel {
            sparse: sparse.clone(),
            predict: p.predict,
            also_predict: Vec::new(),
            predict_samples: p.predict_samples,
            evidence: None,
            diagnostics: Diagnostics::default(),
        }))
    };

    while t < p.max_iters {
        ctx.check_deadline()?;
        t += 1;
        let rows = if full_batch { all_rows.clone() } else { batches.next_batch() };
        let xb = x.select(Axis(0), &rows);
        let yb: Vec<usize> = rows.iter().map(|&i| y[i]).collect();
        let mut alpha_b: Vec<f64> = rows.iter().map(|&i| alpha[i]).collect();
        let (mg, locals) = local_step(method, &sparse, &xb, &yb, &mut alpha_b);
        rows.iter().zip(&alpha_b).for_each(|(&i, &a)| alpha[i] = a);
        if let Some(bad) = alpha_b.iter().find(|a| !a.is_finite()) {
            return Err(FitError::Numerical(format!("scmgpc: a local shape alpha is {bad} at step {t}")));
        }
        let scale = n as f64 / rows.len() as f64;
        let target = targets(&mg, &yb, &locals, scale);
        let rhos: Vec<f64> = match (&mut adaptive, p.rho) {
            _ if full_batch => vec![1.0; c],
            (Some(rates), _) => rates.iter_mut().enumerate().map(|(k, r)| r.update(&target_noise(&sparse, &target, k))).collect(),
            (None, Rho::Schedule(schedule)) => vec![schedule.at(t); c],
            (None, Rho::Adaptive(_)) => unreachable!("adaptive rates are built for minibatch runs"),
        };
        rho = rhos.iter().sum::<f64>() / c as f64;
        blend(&mut sparse, &target, &rhos)?;
        if learn && t.is_multiple_of(p.hyper_every) {
            // At the new q, with this step's local parameters (Alg. 1's order).
            let mg = sparse.marginals(&xb);
            let g = hyper::gradient(&sparse, &xb, &yb, &mg, &locals, scale, !p.whiten);
            if !g.is_finite() {
                return Err(FitError::Numerical(format!("scmgpc: a kernel or inducing-input gradient is not finite at step {t}")));
            }
            let mut descent: Vec<f64> = g.params.iter().map(|v| -v).collect();
            if p.learn_inducing {
                descent.extend(g.z.iter().flatten().map(|v| -v));
            }
            adam.step(&mut theta, &descent, &free);
            let kernels = sparse.kernels.with_log_params(&theta[..n_kernel]);
            let mut next = if p.learn_inducing {
                let mut rest = &theta[n_kernel..];
                let zs = sparse
                    .classes
                    .iter()
                    .map(|g| {
                        let (this, tail) = rest.split_at(g.z.len());
                        rest = tail;
                        Array2::from_shape_vec(g.z.dim(), this.to_vec()).expect("Z's shape")
                    })
                    .collect();
                sparse.moved(kernels, zs)?
            } else {
                sparse.with_kernels(kernels)?
            };
            if !p.whiten {
                // q(u) stays where the global step left it while L moves under it.
                for (new, old) in next.classes.iter_mut().zip(&sparse.classes) {
                    new.q = old.q.reexpress(&old.chol, &new.chol)?;
                }
            }
            sparse = next;
        }
        ctx.checkpoint_with(t, || Some(elbo::full(method, &sparse, x, y, &alpha)), || snapshot(&sparse));
        if let Some(reason) = ctx.budget_stop(t) {
            stop = reason;
            break;
        }
    }
    let evidence = ctx.off_clock(|| elbo::full(method, &sparse, x, y, &alpha));
    if !evidence.is_finite() {
        return Err(FitError::Numerical(format!("scmgpc: the full-data ELBO is {evidence}")));
    }
    let mut diagnostics = Diagnostics { iterations: Some(t), stop_reason: Some(stop), ..Default::default() };
    diagnostics.number("epochs", t as f64 * size as f64 / n as f64);
    diagnostics.number("inducing", m as f64);
    if p.learn_inducing {
        diagnostics.note("inducing_inputs", "learned (Adam, with the kernels' schedule)".to_string());
    }
    diagnostics.number("kmeans_rows", init.kmeans_rows as f64);
    diagnostics.number("kmeans_iterations", init.kmeans_iterations as f64);
    diagnostics.number("rho_last", rho);
    diagnostics.number("alpha_mean", alpha.iter().sum::<f64>() / n as f64);
    diagnostics.note("poisson_rate", format!("{:?}", p.poisson_rate).to_lowercase());
    diagnostics.note("predict", format!("{:?}", p.predict));
    diagnostics.note("batch", if full_batch { "full (batch CAVI, rho = 1)".to_string() } else { format!("{size} (SVI, rho {:?})", p.rho) });
    Ok(Box::new(ScmgpcModel {
        sparse,
        predict: p.predict,
        also_predict: p.also_predict.clone(),
        predict_samples: p.predict_samples,
        evidence: Some(evidence),
        diagnostics,
    }))
}
