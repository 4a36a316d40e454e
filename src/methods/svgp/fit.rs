//! The training loop: initial Z and length-scales, then minibatch steps until the budget,
//! `max_iters` or the timeout, with checkpoints scored off the clock.
use super::elbo::{self, Wants};
use super::model::{Sparse, SvgpModel};
use super::posterior::Posterior;
use super::{NatgradRule, Optimizer, Svgp};
use crate::kernels::KernelSet;
use crate::methods::{Diagnostics, FitContext, FitError, Fitted, HyperPolicy, Problem, StopReason};
use crate::scalable::{inducing_sets, initial_kernels, Adam, Minibatches, NaturalGaussian};
use faer::Mat;
use ndarray::{Array2, Axis};
use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64;
use rayon::prelude::*;

/// Seed of the fixed Monte Carlo stream of full-data ELBO evaluations (so checkpoints of a
/// softmax fit compare like with like).
const ELBO_SEED: u64 = 0x5EED_E1B0;

pub(crate) fn train(
    method: &Svgp,
    problem: &Problem,
    kernels: &KernelSet,
    hyper: HyperPolicy,
    ctx: &mut FitContext,
) -> Result<Box<dyn Fitted>, FitError> {
    let p = &method.params;
    let (x, y, c) = (problem.x, problem.y, problem.n_classes);
    let n = x.nrows();
    // Independent streams for initialisation, batches and the likelihood's draws.
    let mut init_rng = ctx.init_rng();
    let batch_seed = ctx.rng.next_u64();
    let mut lik_rng = Pcg64::seed_from_u64(ctx.rng.next_u64());

    // Model construction, off the training clock as in Galy-Fajou et al.'s timings: one set of
    // M inducing inputs, or one per class, and the starting length-scales.
    let m = crate::scalable::inducing::count(p.inducing, p.inducing_fraction, n);
    let (zs, init) = ctx
        .off_clock(|| inducing_sets(x, y, c, m, &p.inducing_init, p.inducing_per_class, &mut init_rng))
        .map_err(FitError::Unsupported)?;
    let kernels = ctx.off_clock(|| initial_kernels(kernels, p.lengthscale_init, &zs, x, &mut init_rng));
    let m = zs[0].nrows();
    let natural = p.optimizer == Optimizer::NatgradAdam;
    let q: Vec<Posterior> = (0..c)
        .map(|_| {
            if natural {
                Posterior::Natural(NaturalGaussian::standard(m))
            } else {
                Posterior::Sqrt { mean: vec![0.0; m], l: Mat::identity(m, m) }
            }
        })
        .collect();
    let mut sparse = Sparse::new(kernels, zs, q)?;
    sparse.whiten = p.whiten;

    // Adam's vector: kernel log-parameters, then Z, then (optimizer: adam) each class's q.
    let learn_kernel = hyper == HyperPolicy::Learn;
    let n_kern = sparse.kernels.n_params();
    let n_z = sparse.n_z();
    let mut theta: Vec<f64> = sparse.kernels.log_params();
    sparse.zs.iter().for_each(|z| theta.extend(z.iter().copied()));
    let mut free: Vec<bool> = sparse.kernels.free_mask().into_iter().map(|f| f && learn_kernel).collect();
    free.extend(std::iter::repeat_n(p.learn_inducing, n_z));
    if !natural {
        for (class, q) in sparse.q.iter().enumerate() {
            if p.whiten {
                theta.extend(q.sqrt_to_flat());
            } else {
                // q(u) = N(0, K(Z, Z)), the whitened N(0, I) in u's coordinates.
                let l = sparse.chols[sparse.kernel_of(class)].l().to_owned();
                theta.extend(Posterior::Sqrt { mean: vec![0.0; m], l }.sqrt_to_flat());
            }
        }
        free.extend(std::iter::repeat_n(true, c * Posterior::n_sqrt_params(m)));
    }
    let learn_inputs = free[..n_kern + n_z].iter().any(|&f| f);
    if p.optimizer == Optimizer::Lbfgs {
        return super::lbfgs::train(method, problem, &sparse, &theta, &free, ctx, &init);
    }
    let mut adam = Adam::new(theta.len(), p.adam_lr);
    let mut batches = Minibatches::new(n, p.batch_size, batch_seed);
    let identity = Mat::<f64>::identity(m, m);
    let mut halvings = 0u64;
    // The largest jitter a retracted step's factor needed (rounding only; reported when > 0).
    let mut retraction_jitter = 0.0f64;
    let mut stop = StopReason::MaxIterations;
    let mut t = 0u64;
    let snapshot = |sparse: &Sparse| -> Result<Box<dyn Fitted>, FitError> {
        Ok(Box::new(SvgpModel {
            sparse: sparse.clone(),
            likelihood: method.likelihood.clone(),
            evidence: None,
            diagnostics: Diagnostics::default(),
        }))
    };
    let full_elbo = |sparse: &Sparse| elbo::full_elbo(sparse, x, y, &method.likelihood, &mut Pcg64::seed_from_u64(ELBO_SEED));

    while t < p.max_iters {
        ctx.check_deadline()?;
        t += 1;
        let rows = batches.next_batch();
        let xb = x.select(Axis(0), &rows);
        let yb: Vec<usize> = rows.iter().map(|&i| y[i]).collect();
        let scale = n as f64 / rows.len() as f64;
        let g = elbo::block(&sparse, &xb, &yb, &method.likelihood, &mut lik_rng, scale, Wants { q: true, inputs: learn_inputs, kl: true });
        if !g.ell.is_finite() {
            return Err(FitError::Numerical(format!("svgp: the minibatch expected log-likelihood is {} at step {t}", g.ell)));
        }
        // Gradient of -ELBO for Adam.
        let mut grad = vec![0.0; theta.len()];
        if let Some(inputs) = &g.inputs {
            grad[..n_kern].iter_mut().zip(&inputs.params).for_each(|(d, v)| *d = -v);
            grad[n_kern..n_kern + n_z].iter_mut().zip(inputs.z.iter()).for_each(|(d, v)| *d = -v);
        }
        let mut q = sparse.q.clone();
        if natural {
            let gamma = p.natgrad_lr.at(t);
            // The classes' steps are independent: one per thread (each result is the same on any
            // number of threads).
            // Per class: (halvings of a plain step, jitter of a retracted step's factor).
            let outcomes: Vec<Result<(u64, f64), FitError>> = q
                .par_iter_mut()
                .enumerate()
                .map(|(class, qc)| {
                    let Posterior::Natural(nat) = qc else { unreachable!("natural posterior") };
                    match p.natgrad_rule {
                        NatgradRule::Plain => {
                            let used = nat.step(&g.g_m[class], g.g_s[class].as_ref(), identity.as_ref(), gamma)?;
                            Ok(((gamma / used).log2().round() as u64, 0.0))
                        }
                        NatgradRule::Retracted => {
                            Ok((0, nat.step_retracted(&g.g_m[class], g.g_s[class].as_ref(), identity.as_ref(), gamma)?))
                        }
                    }
                })
                .collect();
            for outcome in outcomes {
                let (h, jitter) = outcome?;
                halvings += h;
                retraction_jitter = retraction_jitter.max(jitter);
            }
        } else {
            let mut at = n_kern + n_z;
            for (class, qc) in sparse.q.iter().enumerate() {
                let Posterior::Sqrt { mean, l } = qc else { unreachable!("sqrt posterior") };
                let mut g_q = Posterior::sqrt_grads(mean, l, &g.g_m[class], &g.g_s[class]);
                if !p.whiten {
                    g_q = Posterior::sqrt_grads_unwhitened(&g_q, &sparse.chols[sparse.kernel_of(class)]);
                }
                for v in g_q {
                    grad[at] = -v;
                    at += 1;
                }
            }
        }
        adam.step(&mut theta, &grad, &free);
        let q = if natural { Some(q) } else { None };
        sparse = sparse_at(&sparse, &theta, q, learn_inputs)?;

        ctx.checkpoint_with(t, || Some(full_elbo(&sparse)), || snapshot(&sparse));
        if let Some(reason) = ctx.budget_stop(t) {
            stop = reason;
            break;
        }
    }
    let evidence = ctx.off_clock(|| full_elbo(&sparse));
    let mut diagnostics = Diagnostics { iterations: Some(t), stop_reason: Some(stop), ..Default::default() };
    diagnostics.number("epochs", t as f64 * p.batch_size.min(n) as f64 / n as f64);
    diagnostics.number("inducing", (m * sparse.zs.len()) as f64);
    diagnostics.number("kmeans_rows", init.kmeans_rows as f64);
    diagnostics.number("kmeans_iterations", init.kmeans_iterations as f64);
    if natural {
        diagnostics.number("natgrad_halvings", halvings as f64);
        if retraction_jitter > 0.0 {
            diagnostics.number("natgrad_retraction_jitter", retraction_jitter);
        }
    }
    if !evidence.is_finite() {
        return Err(FitError::Numerical(format!("svgp: the full-data ELBO is {evidence}")));
    }
    Ok(Box::new(SvgpModel { sparse, likelihood: method.likelihood.clone(), evidence: Some(evidence), diagnostics }))
}

/// The model at Adam's (or L-BFGS's) vector `theta` = (kernel log-parameters, Z, then with
/// `q: None` each class's q as mean and square root), from the model `prev` before the step;
/// `q: Some` carries natural-gradient posteriors over. Unwhitened, q(u) stays where the step
/// left it while L moves under it.
pub(crate) fn sparse_at(prev: &Sparse, theta: &[f64], q: Option<Vec<Posterior>>, learn_inputs: bool) -> Result<Sparse, FitError> {
    let (n_kern, n_z, m, c) = (prev.kernels.n_params(), prev.n_z(), prev.m(), prev.n_classes());
    let natural = q.is_some();
    let q = q.unwrap_or_else(|| {
        let size = Posterior::n_sqrt_params(m);
        (0..c).map(|class| Posterior::sqrt_from_flat(m, &theta[n_kern + n_z + class * size..n_kern + n_z + (class + 1) * size])).collect()
    });
    let kernels = prev.kernels.with_log_params(&theta[..n_kern]);
    let d = prev.zs[0].ncols();
    let zs = (0..prev.zs.len())
        .map(|i| Array2::from_shape_vec((m, d), theta[n_kern + i * m * d..n_kern + (i + 1) * m * d].to_vec()).expect("Z shape"))
        .collect();
    let mut next = Sparse::new(kernels, zs, q)?;
    next.whiten = prev.whiten;
    if !prev.whiten && (learn_inputs || !natural) {
        next.q = (0..c)
            .map(|class| {
                let k = next.kernel_of(class);
                if natural {
                    next.q[class].reexpress(&prev.chols[k], &next.chols[k])
                } else {
                    Ok(Posterior::sqrt_whitened(&next.q[class], &next.chols[k]))
                }
            })
            .collect::<Result<_, _>>()?;
    }
    Ok(next)
}
