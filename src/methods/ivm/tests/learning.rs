//! Hyper-parameter learning: eq. 14 and eq. 12-13 against finite differences and the exact GP, the hyper-prior, the major/minor schedule.
use super::*;

/// Central finite difference of f at x along coordinate k.
fn central(f: &dyn Fn(&[f64]) -> f64, x: &[f64], k: usize, h: f64) -> f64 {
    let (mut up, mut down) = (x.to_vec(), x.to_vec());
    up[k] += h;
    down[k] -= h;
    (f(&up) - f(&down)) / (2.0 * h)
}

/// (f) Eq. 14 (kernel) and eq. 12-13 (intercept) are the exact gradient of phi(theta, s) with
/// I, J and the sites frozen (the paper's own check): against central differences of phi, at
/// hyper-parameters away from those the sites were selected at, for the RBF, the ARD and a sum
/// with linear and white-noise terms (the K_I block, the cross block and the diagonal each carry
/// a parameter's dependence).
#[test]
fn phi_gradient_matches_finite_differences_with_frozen_sites() {
    let (x, y) = blobs(40, 0.7, 31);
    let targets = signs(&y);
    for yaml in THREE_KERNELS {
        let kern = kernel(yaml, 2);
        let method = ivm(serde_json::json!({ "active_size": 12 }));
        let mut rng = Pcg64::seed_from_u64(1);
        let mut ctx = FitContext::new(&mut rng, None);
        let sel = method.select(kern.as_ref(), &x, &targets, SiteLik::Probit { bias: 0.2 }, &mut ctx, |_, _, _| Ok(())).unwrap();
        let sites = Sites::of(&sel.state);
        // Move every parameter and the intercept off the selection point.
        let mut theta: Vec<f64> = kern.log_params().iter().enumerate().map(|(k, p)| p + 0.15 * (k as f64 + 1.0).sin()).collect();
        theta.push(-0.35);
        let np = kern.n_params();
        let phi =
            |t: &[f64]| phi_grad(kern.with_log_params(&t[..np]).as_ref(), &x, &targets, SiteLik::Probit { bias: t[np] }, &sites).unwrap();
        let at = phi(&theta);
        let value = |t: &[f64]| phi(t).phi;
        let mut grad = at.kernel.clone();
        grad.push(at.bias);
        for (k, g) in grad.iter().enumerate() {
            let fd = central(&value, &theta, k, 1e-5);
            assert!((g - fd).abs() <= 1e-6 * (1.0 + fd.abs()), "{yaml}: dphi/dtheta[{k}] = {g}, finite difference {fd}");
            assert!(fd.abs() > 1e-4, "{yaml}: parameter {k} must matter for the test to mean anything ({fd})");
        }
    }
}

/// At the point the sites were selected at, phi from the rebuilt representation (a minor
/// step's) equals -log Q(D) of the incremental one (a major step's).
#[test]
fn a_minor_step_rebuild_starts_from_the_major_steps_criterion() {
    let (x, y) = blobs(60, 0.8, 32);
    let targets = signs(&y);
    let kern = kernel("{ lengthscale: 1.2, variance: 3.0 }", 2);
    let lik = SiteLik::Probit { bias: -0.1 };
    let mut rng = Pcg64::seed_from_u64(1);
    let mut ctx = FitContext::new(&mut rng, None);
    let sel = ivm(serde_json::json!({ "active_size": 20 })).select(kern.as_ref(), &x, &targets, lik, &mut ctx, |_, _, _| Ok(())).unwrap();
    let rebuilt = phi_grad(kern.as_ref(), &x, &targets, lik, &Sites::of(&sel.state)).unwrap().phi;
    close("phi rebuilt vs incremental", rebuilt, -sel.state.log_evidence(lik, &targets).unwrap(), 1e-10);
    // The replay of the same order at the same kernel gives the same sites.
    let re = IvmState::replay(kern.as_ref(), &x, &sel.state.active, lik, &targets).unwrap();
    for k in 0..20 {
        close(&format!("replayed pi[{k}]"), re.pi[k], sel.state.pi[k], 1e-12);
        close(&format!("replayed b[{k}]"), re.b[k], sel.state.b[k], 1e-12);
    }
}

/// Gaussian regression with d = n and the exact sites (pi = 1/s2, b = y/s2): phi is
/// -log N(y | 0, K + s2 I) and its eq. 14 gradient is the exact GP's marginal-likelihood
/// gradient, -(1/2) tr((a a^T - (K + s2 I)^{-1}) dK/dtheta), a = (K + s2 I)^{-1} y (R&W eq. 5.9).
#[test]
fn gaussian_with_all_points_active_gives_the_exact_marginal_likelihood_and_its_gradient() {
    let n = 20;
    let (x, _) = blobs(n, 0.5, 33);
    let y: Vec<f64> = (0..n).map(|i| (1.2 * x[(i, 0)]).sin() - 0.5 * x[(i, 1)] + 0.07 * ((i * 5) % 3) as f64).collect();
    let s2 = 0.15;
    let lik = SiteLik::Gaussian { noise_var: s2 };
    for yaml in ["{ lengthscale: 0.8, variance: 1.6 }", "{ ard: true, lengthscale: [0.6, 1.9], variance: 0.9 }"] {
        let kern = kernel(yaml, 2);
        // Any inclusion order: with exact sites the posterior does not depend on it.
        let sites =
            Sites { active: (0..n).rev().collect(), pi: vec![1.0 / s2; n], b: (0..n).rev().map(|i| y[i] / s2).collect(), rows: None };
        let pg = phi_grad(kern.as_ref(), &x, &y, lik, &sites).unwrap();
        let k = kern.gram(&x);
        let ky = Mat::from_fn(n, n, |i, j| k[(i, j)] + if i == j { s2 } else { 0.0 });
        close(&format!("{yaml}: phi"), pg.phi, -log_gaussian(&y, &ky), 1e-10);
        let chol = Chol::factor(ky.as_ref(), "K + s2 I").unwrap();
        let alpha = chol.solve_vec(&y);
        let kinv = chol.solve(crate::linalg::small::eye(n).as_ref());
        for (p, dk) in kern.gram_grads(&x, &k).iter().enumerate() {
            let mut g = 0.0;
            for i in 0..n {
                for j in 0..n {
                    g -= 0.5 * (alpha[i] * alpha[j] - kinv[(i, j)]) * dk[(j, i)];
                }
            }
            close(&format!("{yaml}: dphi/dtheta[{p}]"), pg.kernel[p], g, 1e-9);
        }
    }
}

/// The paper's hyper-prior: its gradient against finite differences, and its mode where the
/// paper puts it (log v = -1, w = p / l^2 = 1, intercept 0); `none` adds nothing.
#[test]
fn the_paper_hyper_prior_has_its_mode_at_the_stated_values() {
    let dim = 7;
    let kern = kernel("{ lengthscale: 1.0, variance: 1.0 }", dim);
    let pen = |t: &[f64]| HyperPrior::Paper.penalty(kern.with_log_params(&t[..2]).as_ref(), Some(t[2]), dim);
    let theta = [0.4, -0.3, 1.7];
    let (_, gk, gb) = pen(&theta);
    for (k, g) in gk.iter().chain([gb].iter()).enumerate() {
        let fd = central(&|t: &[f64]| pen(t).0, &theta, k, 1e-6);
        close(&format!("prior gradient {k}"), *g, fd, 1e-7);
    }
    // Mode: log v = -1, l^2 = p (w = 1), bias 0.
    let mode = [-1.0, 0.5 * (dim as f64).ln(), 0.0];
    let (_, gk, gb) = pen(&mode);
    assert!(gk.iter().all(|g| g.abs() < 1e-12) && gb.abs() < 1e-12, "{gk:?} {gb}");
    // Values: (log v + 1)^2 / 2 + shape log w + rate / w + b^2 / 50.
    let w = dim as f64 * (0.6f64).exp();
    close("prior value", pen(&theta).0, 0.5 * 1.4 * 1.4 + 0.5 * w.ln() + 0.5 / w + 1.7 * 1.7 / 50.0, 1e-12);
    let ard = kernel("{ ard: true, lengthscale: [1.0, 2.0], variance: 1.0 }", 2);
    let (_, g, _) = HyperPrior::Paper.penalty(ard.as_ref(), None, 2);
    assert_eq!(&g[1..], &[0.0, 0.0], "no prior on ARD length-scales");
    assert_eq!(HyperPrior::None.penalty(kern.as_ref(), Some(3.0), dim), (0.0, vec![0.0, 0.0], 0.0));
}

/// The hybrid strategy (notes §4.6): the first inner iteration of a minor step runs on the
/// major step's sites, every later one on the sites replayed by ADF over the frozen active set
/// at the current theta. With one outer iteration, from the poor start:
/// - one inner iteration: hybrid and constant are the same fit, bit for bit;
/// - two: the first ends at the constant fit's theta_1, so the minor step's reported
///   criterion is phi at the hybrid's final theta_2 with the sites replayed at theta_1 (eq. 11
///   rebuilt for the frozen active set of the start), which differs from phi with the start's
///   sites, and the hybrid fit differs from the constant one.
#[test]
fn the_hybrid_strategy_replays_the_sites_after_its_first_inner_iteration() {
    let (x, y) = unbalanced_blobs();
    let targets = signs(&y);
    let settings = |strategy: &str, inner: u64| serde_json::json!({ "active_size": 15, "outer_iters": 1, "inner_iters": inner, "strategy": strategy, "hyper_prior": "none" });
    let theta = |m: &dyn Fitted| (m.kernels().class(0).log_params(), m.diagnostics().numbers["bias"]);
    let bits = |(k, b): (Vec<f64>, f64)| k.iter().chain([&b]).map(|v| v.to_bits()).collect::<Vec<_>>();
    let (constant_1, _) = fit_learned(settings("constant", 1), &x, &y, POOR_START);
    let (hybrid_1, _) = fit_learned(settings("hybrid", 1), &x, &y, POOR_START);
    assert_eq!(bits(theta(hybrid_1.as_ref())), bits(theta(constant_1.as_ref())), "one inner iteration: hybrid is constant");
    let (constant_2, _) = fit_learned(settings("constant", 2), &x, &y, POOR_START);
    let (hybrid_2, trace) = fit_learned(settings("hybrid", 2), &x, &y, POOR_START);
    assert_ne!(bits(theta(hybrid_2.as_ref())), bits(theta(constant_2.as_ref())), "two inner iterations: hybrid differs from constant");
    let (theta_1, theta_2) = (theta(constant_1.as_ref()), theta(hybrid_2.as_ref()));
    assert_ne!(bits(theta_1.clone()), bits(theta_2.clone()), "the second inner iteration moved");
    // The start's active set and sites (greedy selection at the start, intercept 0), and the
    // sites replayed on that active set at theta_1.
    let start = kernel(POOR_START, 2);
    let mut rng = Pcg64::seed_from_u64(4);
    let mut ctx = FitContext::new(&mut rng, None);
    let lik0 = SiteLik::Probit { bias: 0.0 };
    let first = ivm(settings("hybrid", 2)).select(start.as_ref(), &x, &targets, lik0, &mut ctx, |_, _, _| Ok(())).unwrap().state;
    let kernel_1 = start.with_log_params(&theta_1.0);
    let replayed = IvmState::replay(kernel_1.as_ref(), &x, &first.active, SiteLik::Probit { bias: theta_1.1 }, &targets).unwrap();
    let kernel_2 = start.with_log_params(&theta_2.0);
    let lik_2 = SiteLik::Probit { bias: theta_2.1 };
    let phi_replayed = phi_grad(kernel_2.as_ref(), &x, &targets, lik_2, &Sites::of(&replayed)).unwrap().phi;
    let phi_frozen = phi_grad(kernel_2.as_ref(), &x, &targets, lik_2, &Sites::of(&first)).unwrap().phi;
    let minor = trace_values(&trace, "criterion_minor");
    assert_eq!(minor.len(), 1);
    close("hybrid minor criterion = phi(theta_2) at the sites replayed at theta_1", minor[0], phi_replayed, 1e-9);
    assert!(
        (phi_replayed - phi_frozen).abs() > 1e-4 * phi_frozen.abs(),
        "replayed {phi_replayed} vs frozen {phi_frozen}: the check is moot"
    );
}

/// Unbalanced classes (three quarters of class 0 kept), where the intercept matters.
fn unbalanced_blobs() -> (Array2<f64>, Vec<usize>) {
    let (x0, y0) = blobs(120, 0.9, 41);
    let keep: Vec<usize> = (0..120).filter(|&i| y0[i] == 1 || i % 4 != 0).collect();
    (x0.select(Axis(0), &keep), keep.iter().map(|&i| y0[i]).collect())
}

/// A poor start for `unbalanced_blobs`: the length-scale 6x too long.
const POOR_START: &str = "{ lengthscale: 6.0, variance: 0.5, learn_variance: true }";

/// The major/minor schedule: each minor step lowers the criterion phi - log P with I and the
/// sites frozen (constant strategy), from a poor start the learning lowers the criterion from
/// the first major step to the last, moves the kernel and intercept, and the learned model
/// classifies held-out points; hybrid and exact run the same schedule.
#[test]
fn learning_lowers_the_criterion_across_major_and_minor_steps() {
    let (x, y) = unbalanced_blobs();
    let (xt, yt) = blobs(300, 0.9, 42);
    let kernel_yaml = POOR_START;
    let settings = serde_json::json!({ "active_size": 25, "outer_iters": 4, "inner_iters": 5 });
    let (model, trace) = fit_learned(settings.clone(), &x, &y, kernel_yaml);
    let major = trace_values(&trace, "criterion");
    let minor = trace_values(&trace, "criterion_minor");
    assert_eq!((major.len(), minor.len()), (5, 4), "4 outer iterations and a final major step");
    for k in 0..4 {
        assert!(minor[k] < major[k] - 1e-6, "minor step {k} must lower the frozen criterion: {} -> {}", major[k], minor[k]);
    }
    assert!(major[4] < major[0] - 1.0, "learning from a poor start lowers the criterion: {major:?}");
    let d = model.diagnostics();
    assert_eq!(d.iterations, Some(5));
    assert_eq!(d.numbers["criterion"], major[4]);
    assert!(d.numbers["bias"] != 0.0);
    let learned = model.kernels().class(0).log_params();
    assert!(learned[1] < 6f64.ln() - 0.3, "the length-scale shrinks from 6: {learned:?}");
    let p = model.predict(&xt, &mut Pcg64::seed_from_u64(0)).unwrap();
    let errors = (0..xt.nrows()).filter(|&j| (p.probs[(j, 1)] > 0.5) != (yt[j] == 1)).count();
    assert!(errors < 45, "{errors} errors of 300");
    // Deterministic, on one thread or two.
    for threads in [1, 2] {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
        let (again, _) = pool.install(|| fit_learned(settings.clone(), &x, &y, kernel_yaml));
        assert_eq!(again.kernels().class(0).log_params(), learned, "{threads} thread(s)");
        let q = again.predict(&xt, &mut Pcg64::seed_from_u64(0)).unwrap();
        assert!(p.probs.iter().zip(q.probs.iter()).all(|(a, b)| a.to_bits() == b.to_bits()), "{threads} thread(s)");
    }
    for strategy in ["hybrid", "exact"] {
        let (m, trace) = fit_learned(
            serde_json::json!({ "active_size": 25, "outer_iters": 2, "inner_iters": 4, "strategy": strategy }),
            &x,
            &y,
            kernel_yaml,
        );
        let major = trace_values(&trace, "criterion");
        assert_eq!(major.len(), 3, "{strategy}");
        assert!(major[2] < major[0], "{strategy}: {major:?}");
        assert!(m.evidence().is_some_and(|e| e.value.is_finite()), "{strategy}");
    }
    // The exact strategy with the line search on cost values alone: its cost is the criterion
    // with the sites recomputed, which the minor step starts from (the major step's sites are
    // the replay's at the same theta) and which each accepted step lowers.
    let (_, trace) = fit_learned(
        serde_json::json!({ "active_size": 25, "outer_iters": 3, "inner_iters": 4, "strategy": "exact", "line_search": "decrease" }),
        &x,
        &y,
        kernel_yaml,
    );
    let (major, minor) = (trace_values(&trace, "criterion"), trace_values(&trace, "criterion_minor"));
    assert_eq!((major.len(), minor.len()), (4, 3));
    for k in 0..3 {
        assert!(minor[k] <= major[k] + 1e-12 * major[k].abs(), "exact minor step {k} raised its criterion: {} -> {}", major[k], minor[k]);
    }
    assert!(minor[0] < major[0] - 1e-6, "the first minor step lowers the criterion: {major:?} / {minor:?}");
}

/// `lbfgs_first_step: unit_length` reaches the minor steps' optimiser: one minor step of one
/// line search on cost values (trial steps 1, 1/2, 1/4, ... of the first direction) moves the
/// log-parameters and the intercept by exactly 2^-k, where the default's first direction is
/// the gradient itself, of another length.
#[test]
fn the_unit_length_first_step_moves_the_minor_step_by_a_power_of_two() {
    let (x, y) = unbalanced_blobs();
    let kernel_yaml = POOR_START;
    let start = kernel(kernel_yaml, 2).log_params();
    let step_length = |first_step: &str| {
        let settings = serde_json::json!({ "active_size": 25, "outer_iters": 1, "inner_iters": 1, "strategy": "constant",
            "line_search": "decrease", "lbfgs_first_step": first_step });
        let (model, _) = fit_learned(settings, &x, &y, kernel_yaml);
        let mut moved: Vec<f64> = model.kernels().class(0).log_params().iter().zip(&start).map(|(a, b)| a - b).collect();
        moved.push(model.diagnostics().numbers["bias"]);
        moved.iter().map(|d| d * d).sum::<f64>().sqrt()
    };
    let unit = step_length("unit_length");
    let halvings = -unit.log2();
    assert!(unit > 0.0 && (halvings - halvings.round()).abs() < 1e-9, "a unit-length first step halved: {unit}");
    let gradient = step_length("gradient");
    let k = -gradient.log2();
    assert!(gradient > 0.0 && (k - k.round()).abs() > 1e-6, "the gradient-long first step: {gradient}");
}

/// `keep_lbfgs_memory` carries L-BFGS's pairs from one minor step to the next: with one minor
/// step there is nothing to carry and the fit is the default's to the bit; with three, every
/// minor step after the first starts from the carried pairs and the fit moves elsewhere. (That
/// the carried pairs give a quasi-Newton first step is the optimiser's test.)
#[test]
fn carried_lbfgs_memory_changes_only_the_minor_steps_after_the_first() {
    let (x, y) = unbalanced_blobs();
    let fitted = |outer: u64, keep: bool| {
        let settings = serde_json::json!({ "active_size": 25, "outer_iters": outer, "inner_iters": 2, "strategy": "constant",
            "keep_lbfgs_memory": keep });
        let (model, _) = fit_learned(settings, &x, &y, POOR_START);
        let mut theta = model.kernels().class(0).log_params();
        theta.push(model.diagnostics().numbers["bias"]);
        theta
    };
    assert_eq!(fitted(1, true), fitted(1, false), "one minor step: nothing carried");
    let (kept, restarted) = (fitted(3, true), fitted(3, false));
    let moved = kept.iter().zip(&restarted).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
    assert!(moved > 1e-6, "three minor steps: {kept:?} against {restarted:?}");
}

#[test]
fn carried_lbfgs_memory_needs_the_gradient_first_step() {
    let settings = serde_json::json!({ "keep_lbfgs_memory": true, "lbfgs_first_step": "unit_length" });
    let err = IvmParams::from_settings(&settings).unwrap().check().unwrap_err();
    assert!(err.contains("keep_lbfgs_memory") && err.contains("lbfgs_first_step"), "{err}");
}
