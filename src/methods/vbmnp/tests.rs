//! VB-MNP against closed forms, the binary model, Monte Carlo and the paper's constants.
use super::*;
use crate::special::normal_cdf;
use rand::SeedableRng;

fn toy(n: usize, d: usize, k: usize, seed: u64) -> (Array2<f64>, Vec<usize>) {
    let mut rng = Pcg64::seed_from_u64(seed);
    let x = Array2::from_shape_fn((n, d), |_| rng.sample::<f64, _>(StandardNormal));
    // Classes by angle sector of the first two coordinates (or sign for d = 1), plus noise.
    let y = (0..n)
        .map(|i| {
            let a = if d > 1 { x[[i, 1]].atan2(x[[i, 0]]) } else { x[[i, 0]] };
            let s = ((a + std::f64::consts::PI) / (2.0 * std::f64::consts::PI) * k as f64) as usize;
            if rng.random::<f64>() < 0.1 {
                rng.random_range(0..k)
            } else {
                s.min(k - 1)
            }
        })
        .collect();
    (x, y)
}

fn fit(
    x: &Array2<f64>,
    y: &[usize],
    k: usize,
    kernel: &SqExp,
    hyper: HyperPolicy,
    params: VbmnpParams,
    seed: u64,
) -> (Box<dyn Fitted>, Vec<crate::results::TracePoint>) {
    let mut rng = Pcg64::seed_from_u64(seed);
    let mut ctx = FitContext::new(&mut rng, None);
    let m = params.check().unwrap().fit(&Problem { x, y, n_classes: k }, &KernelSet::shared_se(kernel), hyper, &mut ctx).unwrap();
    let trace = ctx.trace();
    (m, trace)
}

fn iso_kernel(phi: f64, s2: f64) -> SqExp {
    SqExp { log_variance: s2.ln(), log_lengthscales: vec![-0.5 * (2.0 * phi).ln()], learn_variance: false }
}

/// An extra (empty) class is the model with one more class that no datum has: the same fit,
/// the printed bound's constant counts it, and the predictions are the bigger model's
/// renormalised over the present classes.
#[test]
fn an_extra_class_is_a_class_no_datum_has() {
    let (x, y) = toy(30, 2, 3, 4);
    let kernel = iso_kernel(0.5, 1.0);
    let params = |extra: usize| VbmnpParams { extra_classes: extra, tol: 0.0, max_iters: 8, ..Default::default() };
    let (with_extra, _) = fit(&x, &y, 3, &kernel, HyperPolicy::Fixed, params(1), 9);
    let (four, _) = fit(&x, &y, 4, &kernel, HyperPolicy::Fixed, params(0), 9);
    let (e1, e4) = (with_extra.extra_metrics(), four.extra_metrics());
    assert_eq!(e1["elbo"], e4["elbo"]);
    assert!((e1["bound_paper"] - (e1["elbo"] - 1.5 * 30.0 * LN_2PI)).abs() < 1e-9);
    let xs = Array2::from_shape_fn((7, 2), |(i, j)| (i as f64 * 0.9 + j as f64).sin() * 2.0);
    let mut rng = Pcg64::seed_from_u64(1);
    let (p1, p4) = (with_extra.predict_proba(&xs, &mut rng).unwrap(), four.predict_proba(&xs, &mut rng).unwrap());
    assert_eq!((p1.ncols(), p4.ncols()), (3, 4));
    for j in 0..7 {
        let present: f64 = (0..3).map(|k| p4[[j, k]]).sum();
        assert!(present < 1.0 && p4[[j, 3]] > 0.0, "the empty class has some predictive mass");
        for k in 0..3 {
            assert!((p1[[j, k]] - p4[[j, k]] / present).abs() < 1e-14);
        }
    }
}

#[test]
fn bound_never_decreases_on_a_fixed_kernel() {
    for (seed, k, phi, s2) in [(1, 3, 0.5, 1.0), (2, 4, 0.1, 4.0), (3, 3, 2.0, 1.0)] {
        let (x, y) = toy(40, 2, k, seed);
        let params = VbmnpParams { tol: 0.0, max_iters: 40, ..Default::default() };
        let (_, trace) = fit(&x, &y, k, &iso_kernel(phi, s2), HyperPolicy::Fixed, params, seed);
        let elbo: Vec<f64> = trace.iter().filter(|t| t.name == "elbo").map(|t| t.value).collect();
        assert_eq!(elbo.len(), 40);
        for w in elbo.windows(2) {
            assert!(w[1] >= w[0] - 1e-10 * w[0].abs(), "seed {seed}: {} -> {}", w[0], w[1]);
        }
        assert!(elbo[39] > elbo[0] + 1e-3, "the bound should move from a random start");
    }
}

/// The three ways a fit ends: at max_iters, on the paper's 1% rule (the first step whose
/// printed bound moved by less than tol relative, as the trace shows), and at an iteration
/// budget (before the rule could stop it).
#[test]
fn each_stop_reason_is_the_rule_that_ended_the_fit() {
    let (x, y) = toy(30, 2, 3, 5);
    let kernel = iso_kernel(0.5, 1.0);
    let (capped, _) = fit(&x, &y, 3, &kernel, HyperPolicy::Fixed, VbmnpParams { tol: 0.0, max_iters: 7, ..Default::default() }, 2);
    let d = capped.diagnostics();
    assert_eq!((d.stop_reason, d.iterations), (Some(StopReason::MaxIterations), Some(7)));

    let tol = 1e-4;
    let (converged, trace) = fit(&x, &y, 3, &kernel, HyperPolicy::Fixed, VbmnpParams { tol, max_iters: 500, ..Default::default() }, 2);
    let d = converged.diagnostics();
    assert_eq!(d.stop_reason, Some(StopReason::Converged));
    let bound: Vec<f64> = trace.iter().filter(|t| t.name == "bound").map(|t| t.value).collect();
    assert_eq!(Some(bound.len() as u64), d.iterations);
    assert!(bound.len() > 3, "stopped before the budget test below could tell: {bound:?}");
    let small = |w: &[f64]| (w[1] - w[0]).abs() < tol * w[0].abs();
    let pairs: Vec<bool> = bound.windows(2).map(small).collect();
    assert!(pairs[pairs.len() - 1] && !pairs[..pairs.len() - 1].iter().any(|b| *b), "the rule's first pass ends the fit: {bound:?}");

    let budget = crate::methods::Budget { iterations: Some(3), ..Default::default() };
    let mut rng = Pcg64::seed_from_u64(2);
    let mut ctx = FitContext::new(&mut rng, None).with_budget(Some(budget));
    let params = VbmnpParams { tol, max_iters: 500, ..Default::default() };
    let budgeted = params
        .check()
        .unwrap()
        .fit(&Problem { x: &x, y: &y, n_classes: 3 }, &KernelSet::shared_se(&kernel), HyperPolicy::Fixed, &mut ctx)
        .unwrap();
    let d = budgeted.diagnostics();
    assert_eq!((d.stop_reason, d.iterations), (Some(StopReason::BudgetIterations), Some(3)));
}

#[test]
fn squarem_reaches_the_plain_fixed_point_in_far_fewer_steps() {
    // A large signal variance: the plain map contracts like s/(1+s) per step.
    let (x, y) = toy(30, 2, 3, 4);
    let kernel = iso_kernel(20.0, 60.0);
    let xt = Array2::from_shape_fn((7, 2), |(i, j)| (i as f64 * 0.9 - j as f64 * 1.3).sin() * 1.5);
    let mut rng = Pcg64::seed_from_u64(1);
    let run = |tol: f64, max_iters: usize, accelerate: bool| {
        let params = VbmnpParams { tol, max_iters, accelerate, ..Default::default() };
        let (m, _) = fit(&x, &y, 3, &kernel, HyperPolicy::Fixed, params, 5);
        (m.extra_metrics()["elbo"], m.extra_metrics()["iterations"], m)
    };
    let (e_plain, _, m_plain) = run(0.0, 6000, false);
    let (e_acc, it_acc, m_acc) = run(1e-13, 6000, true);
    let (e_short, _, _) = run(0.0, it_acc as usize, false);
    assert!((e_acc - e_plain).abs() < 1e-7 * e_plain.abs(), "SQUAREM {e_acc} vs plain {e_plain}");
    assert!(it_acc < 600.0, "SQUAREM took {it_acc} steps");
    // The plain map given the same number of steps is still visibly short of the optimum.
    assert!(e_plain - e_short > 1e-4, "plain after {it_acc} steps: {e_short} vs {e_plain}");
    let (pp, pa) = (m_plain.predict_proba(&xt, &mut rng).unwrap(), m_acc.predict_proba(&xt, &mut rng).unwrap());
    for (a, b) in pp.iter().zip(pa.iter()) {
        assert!((a - b).abs() < 1e-5, "predictive {a} vs {b}");
    }
    // Learning hyper-parameters moves the map; acceleration is refused there.
    let params = VbmnpParams { accelerate: true, ..Default::default() };
    let mut rng = Pcg64::seed_from_u64(5);
    let mut ctx = FitContext::new(&mut rng, None);
    let err =
        params.check().unwrap().fit(&Problem { x: &x, y: &y, n_classes: 3 }, &KernelSet::shared_se(&kernel), HyperPolicy::Learn, &mut ctx);
    assert!(err.is_err());
}

#[test]
fn the_evidence_setting_chooses_which_bound_is_reported() {
    let x = Array2::from_shape_vec((4, 1), vec![-0.8, 0.1, 0.9, 1.5]).unwrap();
    let y = vec![0, 1, 2, 1];
    let kernel = iso_kernel(0.7, 2.0);
    let run = |evidence: VbEvidence| {
        let params = VbmnpParams { tol: 0.0, max_iters: 30, evidence, ..Default::default() };
        let (m, _) = fit(&x, &y, 3, &kernel, HyperPolicy::Fixed, params, 5);
        (m.evidence().unwrap().value, m.extra_metrics())
    };
    let (paper, metrics) = run(VbEvidence::Paper);
    // The printed App. C bound is the ELBO less (K - 1) N/2 ln 2 pi (notes §2.7).
    assert!((paper - (metrics["elbo"] - 4.0 * LN_2PI)).abs() < 1e-9);
    assert_eq!(run(VbEvidence::Elbo).0, metrics["elbo"]);
    assert_eq!(run(VbEvidence::Port).0, metrics["bound_port"]);
    assert_eq!(run(VbEvidence::PortFloored).0, metrics["bound_port_floored"]);
    let err = parse_settings::<VbmnpParams>(&serde_json::json!({"evidence": "vbmp"})).unwrap_err();
    assert!(err.contains("unknown variant `vbmp`") && err.contains("port_floored"), "{err}");
}

#[test]
fn bound_lies_below_the_exact_log_marginal_and_paper_constant_is_applied() {
    // N = 3, K = 3: log p(t | X) by Monte Carlo over (m, eps) from the prior (notes §2.7).
    let x = Array2::from_shape_vec((3, 1), vec![-0.8, 0.1, 0.9]).unwrap();
    let y = vec![0, 1, 2];
    let (kernel, s2) = (iso_kernel(0.7, 2.0), 2.0);
    let params = VbmnpParams { tol: 0.0, max_iters: 200, ..Default::default() };
    let (m, _) = fit(&x, &y, 3, &kernel, HyperPolicy::Fixed, params, 5);
    let elbo = m.extra_metrics()["elbo"];
    let Evidence { value: bound, kind, .. } = m.evidence().unwrap();
    assert_eq!(kind, EvidenceKind::LowerBound);
    assert!((bound - (elbo - 3.0 * LN_2PI)).abs() < 1e-5);
    let C = gram_phi(&x, &[0.7], s2);
    let L = Chol::factor(C.as_ref(), "C").unwrap();
    let mut rng = Pcg64::seed_from_u64(11);
    let draws = 300_000;
    let mut hits = 0usize;
    for _ in 0..draws {
        let mut f = [[0.0; 3]; 3];
        for c in 0..3 {
            let z: Vec<f64> = (0..3).map(|_| rng.sample::<f64, _>(StandardNormal)).collect();
            for i in 0..3 {
                f[i][c] = (0..=i).map(|j| L.l()[(i, j)] * z[j]).sum::<f64>() + rng.sample::<f64, _>(StandardNormal);
            }
        }
        if (0..3).all(|i| crate::linalg::argmax(&f[i]) == y[i]) {
            hits += 1;
        }
    }
    let p = hits as f64 / draws as f64;
    let log_p = p.ln();
    let se = ((1.0 - p) / (p * draws as f64)).sqrt();
    assert!(elbo < log_p - 3.0 * se, "ELBO {elbo} vs log p(t) {log_p}");
}

/// Binary VB (G&R eq. 4.9) with kernel C, run to convergence; returns (ỹ', ELBO).
fn binary_vb(C: &Mat<f64>, t: &[f64]) -> (Vec<f64>, f64) {
    let n = C.nrows();
    let chol = chol_i_plus(C).unwrap();
    let mut yt = vec![0.0; n];
    let mut elbo = 0.0;
    for _ in 0..3000 {
        let b = chol.solve_vec(&yt);
        let m: Vec<f64> = (0..n).map(|i| yt[i] - b[i]).collect();
        let quad: f64 = m.iter().zip(&b).map(|(a, b)| a * b).sum();
        elbo = (0..n).map(|i| normal_cdf(t[i] * m[i]).ln()).sum::<f64>() - 0.5 * quad - 0.5 * chol.log_det();
        yt = (0..n).map(|i| m[i] + t[i] * crate::special::d_log_normal_cdf(t[i] * m[i])).collect();
    }
    (yt, elbo)
}

#[test]
fn two_classes_reduce_to_binary_probit_vb() {
    // With K = 2, f = (m_1 - m_2)/sqrt 2 follows the binary VB of eq. 4.9 with the same C,
    // m_1 + m_2 -> 0, and ELBO_K2 = ELBO_binary - 1/2 log|I + C| at the fixed point.
    let (x, y) = toy(15, 2, 2, 9);
    let kernel = iso_kernel(0.8, 1.0);
    let params = VbmnpParams { tol: 0.0, max_iters: 3000, ..Default::default() };
    let (m, _) = fit(&x, &y, 2, &kernel, HyperPolicy::Fixed, params, 3);
    let C = gram_phi(&x, &[0.8], 1.0);
    let t: Vec<f64> = y.iter().map(|&c| if c == 0 { 1.0 } else { -1.0 }).collect();
    let (yb, elbo_b) = binary_vb(&C, &t);
    let elbo = m.extra_metrics()["elbo"];
    let half_logdet = 0.5 * chol_i_plus(&C).unwrap().log_det();
    assert!((elbo - (elbo_b - half_logdet)).abs() < 1e-7, "{elbo} vs {}", elbo_b - half_logdet);
    // Predictive: P(class 0) = Phi(f_new / sqrt(1 + s^2)), f_new = ỹ'ᵀ(I+C)^{-1}c.
    let xs = Array2::from_shape_fn((6, 2), |(i, j)| (i as f64 - 2.5) * 0.6 + j as f64 * 0.3);
    let probs = m.predict_proba(&xs, &mut Pcg64::seed_from_u64(0)).unwrap();
    let chol = chol_i_plus(&C).unwrap();
    let cx = gram_cross_phi(&x, &xs, &[0.8], 1.0);
    let a = chol.solve_vec(&yb);
    for j in 0..6 {
        let c: Vec<f64> = (0..15).map(|i| cx[(i, j)]).collect();
        let f = crate::linalg::dot(&a, &c);
        let v = 1.0 - crate::linalg::dot(&c, &chol.solve_vec(&c));
        let want = normal_cdf(f / (1.0 + v).sqrt());
        assert!((probs[[j, 0]] - want).abs() < 1e-8, "{} vs {want}", probs[[j, 0]]);
        assert!((probs[[j, 0]] + probs[[j, 1]] - 1.0).abs() < 1e-12);
    }
}

/// Dense oracle: log det and x^T A^{-1} x (summed over the columns x of `rhs`), from `dense_solve`.
fn dense_logdet_quad(a: &[Vec<f64>], rhs: &[Vec<f64>]) -> (f64, f64) {
    let (sol, logdet) = dense_solve(a, rhs);
    let quad = sol.iter().zip(rhs).map(|(s, x)| s.iter().zip(x).map(|(a, b)| a * b).sum::<f64>()).sum();
    (logdet, quad)
}

/// Q(v) ∝ w(v) Exp(v; psi) on a fine grid over v in (0, 40 / psi]: its mean, sd and
/// (E_p W)^2 / E_p W^2 (the expected ESS per sample of self-normalised IS with the prior as
/// proposal), with `log_w` the log weight.
struct GridQ {
    mean: f64,
    sd: f64,
    ess_per_sample: f64,
}

fn grid_posterior(log_w: &dyn Fn(f64) -> f64, psi: f64, n_grid: usize) -> GridQ {
    let h = 40.0 / psi / n_grid as f64;
    let lws: Vec<f64> = (1..=n_grid).map(|i| log_w(i as f64 * h)).collect();
    let lmax = lws.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let (mut z, mut z1, mut z2, mut zw2) = (0.0, 0.0, 0.0, 0.0);
    for (i, lw) in lws.iter().enumerate() {
        let v = (i + 1) as f64 * h;
        let prior = psi * (-psi * v).exp() * h;
        let w = (lw - lmax).exp();
        z += prior * w;
        z1 += prior * w * v;
        z2 += prior * w * v * v;
        zw2 += prior * w * w;
    }
    let mean = z1 / z;
    GridQ { mean, sd: (z2 / z - mean * mean).sqrt(), ess_per_sample: z * z / zw2 }
}

impl GridQ {
    /// The sampler's estimate within 4 standard errors sd_Q / sqrt(ESS) of the grid mean
    /// (self-normalised IS), and its ESS within 10 % of the expected S (E_p W)^2 / E_p W^2.
    fn check_sampler(&self, up: &IsUpdate, samples: usize, what: &str) {
        let se = self.sd / up.ess.sqrt();
        assert!(
            (up.phi_mean[0] - self.mean).abs() < 4.0 * se,
            "{what}: {} vs {} (sd {}, ess {})",
            up.phi_mean[0],
            self.mean,
            self.sd,
            up.ess
        );
        let ess_expected = samples as f64 * self.ess_per_sample;
        assert!((up.ess / ess_expected - 1.0).abs() < 0.1, "{what}: ess {} vs {ess_expected}", up.ess);
    }
}

#[test]
fn importance_sampler_matches_a_brute_force_grid_over_phi() {
    // Q(phi) ∝ prod_k N(m̃_k; 0, C_phi + jI) Exp(phi; psi): posterior mean, sd and the expected
    // ESS S (E_p W)^2 / E_p W^2 by a fine grid, against the sampler with S = 20000 (within 4
    // standard errors sd_Q / sqrt(ESS)).
    let x = Array2::from_shape_vec((6, 1), vec![-1.2, -0.5, 0.0, 0.4, 1.1, 1.5]).unwrap();
    let M = Mat::from_fn(6, 2, |i, k| (x[[i, 0]] * (1.0 + k as f64)).sin() * 0.8);
    let (psi, jitter, s2) = (0.7, 1e-3, 1.0);
    let log_w = |phi: f64| {
        let a: Vec<Vec<f64>> = (0..6)
            .map(|i| (0..6).map(|j| (-phi * (x[[i, 0]] - x[[j, 0]]).powi(2)).exp() + if i == j { jitter } else { 0.0 }).collect())
            .collect();
        let rhs: Vec<Vec<f64>> = (0..2).map(|k| (0..6).map(|i| M[(i, k)]).collect()).collect();
        let (ld, q) = dense_logdet_quad(&a, &rhs);
        -0.5 * q - ld
    };
    let q = grid_posterior(&log_w, psi, 200_000);
    let s = 20_000;
    let mut rng = Pcg64::seed_from_u64(4);
    let up = importance_update(&x, &M, &[psi], s2, s, jitter, &mut rng).unwrap();
    assert_eq!(up.failed, 0);
    q.check_sampler(&up, s, "paper");
    let mean = q.mean;
    // The weights must actually matter (the posterior mean differs from the prior mean 1/psi).
    assert!((mean - 1.0 / psi).abs() > 0.1 * mean);
}

#[test]
fn sq_lengthscale_sampler_matches_a_brute_force_grid_over_theta() {
    // vbmp's parameterisation: theta = 1/phi carries the Exp(psi) prior, C = exp(-dx^2/theta).
    // Q(theta) ∝ prod_k N(m̃_k; 0, C_{1/theta} + jI) Exp(theta; psi): E_Q[theta] by a fine grid
    // against the sampler (S = 20000), and E_Q[theta] differs from 1 / E_Q[phi] under the
    // precision parameterisation with the same prior rate (the two estimators differ).
    let x = Array2::from_shape_vec((6, 1), vec![-1.2, -0.5, 0.0, 0.4, 1.1, 1.5]).unwrap();
    let M = Mat::from_fn(6, 2, |i, k| (x[[i, 0]] * (1.0 + k as f64)).sin() * 0.8);
    let (psi, jitter, s2) = (0.7, 1e-3, 1.0);
    let log_w = |phi: f64| {
        let a: Vec<Vec<f64>> = (0..6)
            .map(|i| (0..6).map(|j| (-phi * (x[[i, 0]] - x[[j, 0]]).powi(2)).exp() + if i == j { jitter } else { 0.0 }).collect())
            .collect();
        let rhs: Vec<Vec<f64>> = (0..2).map(|k| (0..6).map(|i| M[(i, k)]).collect()).collect();
        let (ld, q) = dense_logdet_quad(&a, &rhs);
        -0.5 * q - ld
    };
    // Q over theta (prior Exp(theta; psi), likelihood at phi = 1/theta) and over phi.
    let theta_q = grid_posterior(&|t| log_w(1.0 / t), psi, 100_000);
    let theta_mean = theta_q.mean;
    let phi_mean = grid_posterior(&|p| log_w(p), psi, 100_000).mean;
    let mut rng = Pcg64::seed_from_u64(4);
    let s = 20_000;
    let up = importance_update_kind(&x, &M, &[psi], s2, s, jitter, IsWeight::Paper, IsParam::SqLengthscale, &mut rng).unwrap();
    assert_eq!(up.failed, 0);
    theta_q.check_sampler(&up, s, "sq_lengthscale");
    // (0.445 vs 0.477 here: the grid values are deterministic.)
    assert!((1.0 / theta_mean - phi_mean).abs() > 0.03 * phi_mean, "1/E[theta] {} vs E[phi] {phi_mean}", 1.0 / theta_mean);
}

/// `is_weight: port` and `marginal` against the grid, as `paper` above. Port (vbmp's
/// varphiUpdate: its PHI = computeKernel + diag(1), weight exp(-1/2 sum diag(Mᵀ PHI^{-1} M))):
/// log w = -1/2 sum_k m̃_kᵀ(C_phi + I)^{-1}m̃_k, no determinant. Marginal (m integrated out of
/// N(ỹ; m, I) N(m; 0, C_phi)): log w = sum_k log N(ỹ_k; 0, C_phi + I). The I is the unit
/// auxiliary noise, not scaled by s2 (s2 = 1.5 here tells the two apart), and neither uses the
/// jitter. The three estimators' grid means are far apart in units of the sampler's standard
/// error, so a variant computed with another's weight fails.
#[test]
fn port_and_marginal_weights_match_a_brute_force_grid_over_phi() {
    let x = Array2::from_shape_vec((6, 1), vec![-1.2, -0.5, 0.0, 0.4, 1.1, 1.5]).unwrap();
    let V = Mat::from_fn(6, 2, |i, k| (x[[i, 0]] * (1.0 + k as f64)).sin() * 1.5);
    let (psi, jitter, s2, s) = (0.7, 1e-3, 1.5, 20_000);
    // log det and the quadratic form of s2 exp(-phi dx^2) + add I by dense elimination.
    let dense = |phi: f64, add: f64| {
        let a: Vec<Vec<f64>> = (0..6)
            .map(|i| (0..6).map(|j| s2 * (-phi * (x[[i, 0]] - x[[j, 0]]).powi(2)).exp() + if i == j { add } else { 0.0 }).collect())
            .collect();
        let rhs: Vec<Vec<f64>> = (0..2).map(|k| (0..6).map(|i| V[(i, k)]).collect()).collect();
        dense_logdet_quad(&a, &rhs)
    };
    let port = grid_posterior(&|phi| -0.5 * dense(phi, 1.0).1, psi, 100_000);
    let marginal = grid_posterior(
        &|phi| {
            let (ld, q) = dense(phi, 1.0);
            -0.5 * q - ld
        },
        psi,
        100_000,
    );
    let paper = grid_posterior(
        &|phi| {
            let (ld, q) = dense(phi, jitter * s2);
            -0.5 * q - ld
        },
        psi,
        100_000,
    );
    let mut ses = Vec::new();
    for (kind, q) in [(IsWeight::Port, &port), (IsWeight::Marginal, &marginal), (IsWeight::Paper, &paper)] {
        let mut rng = Pcg64::seed_from_u64(6);
        let up = importance_update_kind(&x, &V, &[psi], s2, s, jitter, kind, IsParam::Precision, &mut rng).unwrap();
        assert_eq!(up.failed, 0);
        q.check_sampler(&up, s, &format!("{kind:?}"));
        ses.push(q.sd / up.ess.sqrt());
    }
    let se = ses.iter().cloned().fold(0.0, f64::max);
    for q in [&port, &marginal, &paper] {
        assert!((q.mean - 1.0 / psi).abs() > 10.0 * se, "grid mean {} is too close to the prior's {} (se {se})", q.mean, 1.0 / psi);
    }
    for (a, b) in [(&port, &marginal), (&port, &paper), (&marginal, &paper)] {
        assert!((a.mean - b.mean).abs() > 10.0 * se, "grid means {} and {} are too close to tell apart (se {se})", a.mean, b.mean);
    }
}

#[test]
fn port_bound_formula_matches_its_dense_terms() {
    // vbmp's bound differs from ours only in m̃ᵀ(I+C)^{-1}m̃ for m̃ᵀC^{-1}m̃ (its trace terms
    // cancel); with its log-det floor active on both determinants the -K/2 log|I+C| term
    // vanishes. Checked against dense inverses, for a small problem (no floor) and a smooth
    // kernel on 80 points (log|C| far below ln 1e-200).
    for (n, phi, floored) in [(5usize, 0.8, false), (80, 0.05, true)] {
        let x = Array2::from_shape_fn((n, 1), |(i, _)| -2.0 + 4.0 * i as f64 / (n - 1) as f64);
        let y: Vec<usize> = (0..n).map(|i| (3 * i / n).min(2)).collect();
        let C = gram_phi(&x, &[phi], 1.0);
        let chol = chol_i_plus(&C).unwrap();
        let mut rng = Pcg64::seed_from_u64(3);
        let mut Y = Mat::from_fn(n, 3, |_, _| rng.sample::<f64, _>(StandardNormal));
        for _ in 0..20 {
            Y = vb_step(&chol, &Y, &y).1;
        }
        let (M, _, elbo, slz) = vb_step_terms(&chol, &Y, &y);
        let PortBounds { exact, floored: with_floor, det_free, log_det_c } = port_bounds(&C, &chol, &M, slz, 1.0);
        let dense =
            |add: f64| -> Vec<Vec<f64>> { (0..n).map(|i| (0..n).map(|j| C[(i, j)] + if i == j { add } else { 0.0 }).collect()).collect() };
        let rhs: Vec<Vec<f64>> = (0..3).map(|k| (0..n).map(|i| M[(i, k)]).collect()).collect();
        let (ld_ic, q_ic) = dense_logdet_quad(&dense(1.0), &rhs);
        let (ld_c, _) = dense_logdet_quad(&dense(1e-10), &rhs);
        let want = slz - 0.5 * q_ic - 1.5 * ld_ic - (n as f64) * LN_2PI;
        assert!((exact - want).abs() < 1e-6 * want.abs(), "{exact} vs {want}");
        // Ours uses m̃ᵀC^{-1}m̃ >= m̃ᵀ(I+C)^{-1}m̃, so the port's value is never lower.
        assert!(exact >= paper_bound(elbo, n, 3) - 1e-9);
        if n == 5 {
            let (_, q_c) = dense_logdet_quad(&dense(0.0), &rhs);
            assert!((exact - paper_bound(elbo, n, 3) - 0.5 * (q_c - q_ic)).abs() < 1e-6 * q_c.abs());
        }
        assert_eq!(ld_c < PORT_LOG_FLOOR, floored, "log|C| = {ld_c}");
        assert!((log_det_c - ld_c).abs() < 1e-6 * ld_c.abs(), "{log_det_c} vs {ld_c}");
        assert!((det_free - (want + 1.5 * ld_ic)).abs() < 1e-6 * want.abs(), "{det_free}");
        let want_floor = if floored { want + 1.5 * ld_ic } else { want };
        assert!((with_floor - want_floor).abs() < 1e-6 * want.abs(), "{with_floor} vs {want_floor}");
    }
}

/// One learning step is G&R's importance-sampling update (eqs. 4.5, 4.7, 4.8): after the first
/// VB step from phi0, the kernel handed over has phi = E_Q[phi], with
/// Q(phi) ∝ prod_k N(m̃_k; 0, C_phi + j s2 I) Exp(phi; psi0),
/// psi0 = (sigma + 1) / (tau + phi0) and m̃ that step's. Oracle:
/// Q's mean and sd on a fine grid over phi (dense LU determinants), at m̃ recomputed from the
/// fit's random start (its first draws) by one VB step; tolerance 5 sd_Q / sqrt(ESS). Q's mean
/// is far from phi0, so a fit that kept phi0 fails. Then, with ARD over 3 inputs, the learned
/// precisions are the ones handed over in the kernel.
#[test]
fn learning_runs_and_hands_over_the_estimated_kernel() {
    let (n, k, seed, phi0) = (20, 3, 8, 1.0);
    let (x, y) = toy(n, 1, k, 21);
    let kernel = SqExp { log_variance: 0.0, log_lengthscales: vec![0.0], learn_variance: false };
    let params = VbmnpParams { is_samples: 20_000, is_jitter: 1e-3, max_iters: 1, init_phi: Some(phi0), ..Default::default() };
    let (sigma, tau, jitter) = (params.sigma, params.tau, params.is_jitter);
    let (m, _) = fit(&x, &y, k, &kernel, HyperPolicy::Learn, params, seed);
    let learned = phi_from_kernel(m.kernels().class(0).as_sqexp().unwrap())[0];
    let ess = m.extra_metrics()["ess_last"];
    // The fit's start: Y drawn first from its stream (§6.1), then one VB step at phi0.
    let mut rng = Pcg64::seed_from_u64(seed);
    let y0 = Mat::from_fn(n, k, |_, _| rng.sample::<f64, _>(StandardNormal));
    let (mt, _, _) = vb_step(&chol_i_plus(&gram_phi(&x, &[phi0], 1.0)).unwrap(), &y0, &y);
    let psi0 = (sigma + 1.0) / (tau + phi0);
    let log_w = |phi: f64| {
        let a: Vec<Vec<f64>> = (0..n)
            .map(|i| (0..n).map(|j| (-phi * (x[[i, 0]] - x[[j, 0]]).powi(2)).exp() + if i == j { jitter } else { 0.0 }).collect())
            .collect();
        let rhs: Vec<Vec<f64>> = (0..k).map(|c| (0..n).map(|i| mt[(i, c)]).collect()).collect();
        let (ld, q) = dense_logdet_quad(&a, &rhs);
        -0.5 * q - 0.5 * k as f64 * ld - psi0 * phi
    };
    let (n_grid, hi) = (20_000, 40.0 / psi0);
    let h = hi / n_grid as f64;
    let lws: Vec<f64> = (1..=n_grid).map(|i| log_w(i as f64 * h)).collect();
    let lmax = lws.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let (mut z, mut z1, mut z2) = (0.0, 0.0, 0.0);
    for (i, lw) in lws.iter().enumerate() {
        let (phi, w) = ((i + 1) as f64 * h, (lw - lmax).exp());
        z += w;
        z1 += w * phi;
        z2 += w * phi * phi;
    }
    let (mean, sd) = (z1 / z, (z2 / z - (z1 / z).powi(2)).sqrt());
    let se = sd / ess.sqrt();
    assert!((learned - mean).abs() < 5.0 * se, "learned phi {learned} vs E_Q[phi] {mean} (sd {sd}, ESS {ess})");
    assert!((mean - phi0).abs() > 10.0 * se, "E_Q[phi] {mean} is too close to the start {phi0} to tell an update from none");

    let (x, y) = toy(30, 3, 3, 21);
    let kernel = SqExp { log_variance: 0.0, log_lengthscales: vec![0.0; 3], learn_variance: false };
    let params = VbmnpParams { is_samples: 50, max_iters: 5, init_phi: Some(1.0), ..Default::default() };
    let (m, trace) = fit(&x, &y, 3, &kernel, HyperPolicy::Learn, params, 8);
    let phi: Vec<f64> = (1..=3).map(|d| trace.iter().rfind(|t| t.name == format!("phi_{d}")).unwrap().value).collect();
    let back = phi_from_kernel(m.kernels().class(0).as_sqexp().unwrap());
    for (a, b) in phi.iter().zip(&back) {
        assert!((a / b - 1.0).abs() < 1e-12);
    }
    assert_eq!(m.handoff().log_hyperparameters, m.kernels().log_params());
    let p = m.predict_proba(&x, &mut Pcg64::seed_from_u64(0)).unwrap();
    for r in p.rows() {
        assert!((r.sum() - 1.0).abs() < 1e-12 && r.iter().all(|v| *v >= 0.0));
    }
}

/// Dense oracle: A^{-1} r for each column r of `rhs` and log|A|, by Gaussian elimination with
/// partial pivoting.
fn dense_solve(a: &[Vec<f64>], rhs: &[Vec<f64>]) -> (Vec<Vec<f64>>, f64) {
    let n = a.len();
    let mut m: Vec<Vec<f64>> = a.to_vec();
    let mut r: Vec<Vec<f64>> = rhs.to_vec();
    let mut logdet = 0.0;
    for col in 0..n {
        let piv = (col..n).max_by(|&i, &j| m[i][col].abs().partial_cmp(&m[j][col].abs()).unwrap()).unwrap();
        m.swap(col, piv);
        for v in r.iter_mut() {
            v.swap(col, piv);
        }
        logdet += m[col][col].abs().ln();
        for i in col + 1..n {
            let f = m[i][col] / m[col][col];
            for j in col..n {
                m[i][j] -= f * m[col][j];
            }
            for v in r.iter_mut() {
                v[i] -= f * v[col];
            }
        }
    }
    let sol = r
        .iter()
        .map(|v| {
            let mut s = vec![0.0; n];
            for i in (0..n).rev() {
                s[i] = (v[i] - (i + 1..n).map(|j| m[i][j] * s[j]).sum::<f64>()) / m[i][i];
            }
            s
        })
        .collect();
    (sol, logdet)
}

/// P(class k) = E_u[prod_{j != k} Phi(u + (m_k - m_j) / sqrt(1 + v))], u ~ N(0, 1), by a
/// midpoint sum over u in [-15, 15]: G&R §4.5's predictive with one latent variance v shared
/// by the classes; v = 0 gives 𝒵_n = P(t_n | m̃_n) of eq. 4.2.
fn probit_class_prob(m: &[f64], v: f64, k: usize) -> f64 {
    let (steps, lo, hi) = (30_000, -15.0, 15.0);
    let du = (hi - lo) / steps as f64;
    let sd = (1.0 + v).sqrt();
    (0..steps)
        .map(|i| {
            let u = lo + (i as f64 + 0.5) * du;
            let rest: f64 = (0..m.len()).filter(|&j| j != k).map(|j| normal_cdf(u + (m[k] - m[j]) / sd)).product();
            crate::special::normal_pdf(u) * rest * du
        })
        .sum()
}

/// After the last importance-sampling update the fit takes one more fixed-kernel VB step at
/// the final phi, so the reported ELBO, m̃ and the predictive all belong to that phi. Oracle:
/// the fit replayed from its random stream (Y from N(0, 1), then per iteration a VB step and
/// the IS update, eqs. 4.5-4.8), which must land on the fit's phi; then at phi_final, by dense
/// elimination on I + C (C built here from the formula s2 exp(-phi dx^2)):
///     m̃ = ỹ_T - (I + C)^{-1} ỹ_T (= C (I + C)^{-1} ỹ_T, ỹ_T the last loop step's ỹ),
///     ELBO = sum_n log 𝒵_n(m̃) - 1/2 sum_k m̃_kᵀ(I + C)^{-1}ỹ_T,k - K/2 log|I + C|
/// (m̃ᵀC^{-1}m̃ written without C^{-1}; 𝒵_n by a midpoint sum), ỹ = E[y | m̃] (eq. 4.3), and
/// the §4.5 predictive at test points: mean ỹᵀ(I + C)^{-1}c, variance s2 - cᵀ(I + C)^{-1}c,
/// class probabilities by a midpoint sum. The last IS update moves phi by several percent,
/// so the loop's own last ELBO (for the previous phi) is far from the oracle's and a fit that
/// skipped the final step fails.
#[test]
fn the_learned_model_takes_a_final_step_at_the_final_phi() {
    let (n, k, seed, phi0, iters, s2) = (20, 3, 8, 1.0, 3, 1.5);
    let (x, y) = toy(n, 1, k, 21);
    let kernel = SqExp { log_variance: f64::ln(s2), log_lengthscales: vec![0.0], learn_variance: false };
    let params = VbmnpParams { is_samples: 500, is_jitter: 1e-6, max_iters: iters, tol: 0.0, init_phi: Some(phi0), ..Default::default() };
    let (sigma, tau, jitter, samples) = (params.sigma, params.tau, params.is_jitter, params.is_samples);
    let (m, trace) = fit(&x, &y, k, &kernel, HyperPolicy::Learn, params, seed);
    assert_eq!(m.extra_metrics()["iterations"], iters as f64);

    // Replay.
    let mut rng = Pcg64::seed_from_u64(seed);
    let mut yt = Mat::from_fn(n, k, |_, _| rng.sample::<f64, _>(StandardNormal));
    let (mut phi, mut phi_prev) = (vec![phi0], vec![phi0]);
    let mut psi = vec![(sigma + 1.0) / (tau + phi0)];
    for _ in 0..iters {
        let (mt, yn, _) = vb_step(&chol_i_plus(&gram_phi(&x, &phi, s2)).unwrap(), &yt, &y);
        yt = yn;
        let up = importance_update_kind(&x, &mt, &psi, s2, samples, jitter, IsWeight::Paper, IsParam::Precision, &mut rng).unwrap();
        psi = up.phi_mean.iter().map(|f| (sigma + 1.0) / (tau + f)).collect();
        phi_prev = std::mem::replace(&mut phi, up.phi_mean);
    }
    let learned = phi_from_kernel(m.kernels().class(0).as_sqexp().unwrap());
    assert!((learned[0] / phi[0] - 1.0).abs() < 1e-12, "replay phi {} vs the fit's {}", phi[0], learned[0]);
    assert!((phi[0] / phi_prev[0] - 1.0).abs() > 0.03, "the last IS update hardly moved phi: {} -> {}", phi_prev[0], phi[0]);

    // Dense algebra at phi_final.
    let phi = phi[0];
    let cov = |a: f64, b: f64| s2 * (-phi * (a - b) * (a - b)).exp();
    let a: Vec<Vec<f64>> = (0..n).map(|i| (0..n).map(|j| cov(x[[i, 0]], x[[j, 0]]) + if i == j { 1.0 } else { 0.0 }).collect()).collect();
    let cols: Vec<Vec<f64>> = (0..k).map(|c| (0..n).map(|i| yt[(i, c)]).collect()).collect();
    let (b, log_det) = dense_solve(&a, &cols);
    let mt: Vec<Vec<f64>> = (0..n).map(|i| (0..k).map(|c| cols[c][i] - b[c][i]).collect()).collect();
    let sum_log_z: f64 = (0..n).map(|i| probit_class_prob(&mt[i], 0.0, y[i]).ln()).sum();
    let quad: f64 = (0..k).map(|c| (0..n).map(|i| mt[i][c] * b[c][i]).sum::<f64>()).sum();
    let elbo = sum_log_z - 0.5 * quad - 0.5 * k as f64 * log_det;
    let got = m.extra_metrics()["elbo"];
    assert!((got - elbo).abs() < 1e-9 * elbo.abs(), "model ELBO {got} vs dense at phi_final {elbo}");
    let loop_last = trace.iter().rfind(|t| t.name == "elbo").unwrap().value;
    assert!((loop_last - elbo).abs() > 1e-2, "the loop's last ELBO {loop_last} is too close to the final step's {elbo} to tell");

    // The predictive at phi_final from the final ỹ.
    let y_final: Vec<Vec<f64>> = (0..k).map(|c| (0..n).map(|i| truncated_moments(&mt[i], y[i]).mean[c]).collect()).collect();
    let xs = Array2::from_shape_fn((6, 1), |(j, _)| -2.0 + 0.8 * j as f64);
    let probs = m.predict_proba(&xs, &mut Pcg64::seed_from_u64(0)).unwrap();
    for j in 0..6 {
        let c: Vec<f64> = (0..n).map(|i| cov(x[[i, 0]], xs[[j, 0]])).collect();
        let (ac, _) = dense_solve(&a, std::slice::from_ref(&c));
        let v = s2 - c.iter().zip(&ac[0]).map(|(p, q)| p * q).sum::<f64>();
        let mean: Vec<f64> = (0..k).map(|cl| y_final[cl].iter().zip(&ac[0]).map(|(p, q)| p * q).sum()).collect();
        for cl in 0..k {
            let want = probit_class_prob(&mean, v, cl);
            assert!((probs[[j, cl]] - want).abs() < 1e-9, "test point {j}, class {cl}: {} vs {want}", probs[[j, cl]]);
        }
    }
}

/// `is_jitter` must be positive. Why: on 30 points in [-2, 2] a smooth sample (phi = 1e-3) has
/// a Gram matrix that is singular in floating point: without jitter its weight cannot be
/// computed (the sampler would give it weight zero, silently), with the default 1e-8 s2 it
/// can, and a rough sample (phi = 10) factorises either way. So a zero jitter would remove
/// exactly the smooth end of the proposal.
#[test]
fn is_jitter_must_be_positive_because_smooth_samples_fail_without_it() {
    for bad in [0.0, -1e-8, 1.0, f64::NAN] {
        let err = VbmnpParams { is_jitter: bad, ..Default::default() }.check().unwrap_err();
        assert!(err.contains("settings.is_jitter must be in (0, 1)") && err.contains("smooth samples"), "{bad}: {err}");
    }
    assert!(VbmnpParams { is_jitter: 1e-12, ..Default::default() }.check().is_ok());
    let x = Array2::from_shape_fn((30, 1), |(i, _)| -2.0 + 4.0 * i as f64 / 29.0);
    let M = Mat::from_fn(30, 2, |i, k| (x[[i, 0]] * (1.0 + k as f64)).sin());
    let pairs = PairSqDiffs::new(&x);
    let mut scratch = GramScratch::new(30);
    let weight = |phi: f64, add: f64, scratch: &mut GramScratch| log_is_weight_kind(&pairs, &M, &[phi], 1.0, add, true, scratch);
    assert!(weight(1e-3, 0.0, &mut scratch).is_none(), "the smooth Gram matrix factorised without jitter");
    assert!(weight(1e-3, 1e-8, &mut scratch).is_some());
    assert!(weight(10.0, 0.0, &mut scratch).is_some());
}

/// `also_predict: [plug_in]`: every class shares the latent variance v at a test point, so the
/// VB predictive is the plug-in one at the means scaled by 1 / sqrt(1 + v) < 1. Scaling the
/// gaps m_k - m_j (>= 0 for the top class k) down can only lower the top class's probability:
/// the plug-in alternative ranks the classes as the VB predictive does and gives the top class
/// strictly more mass wherever v > 0. The main probabilities are those of a fit without it.
#[test]
fn the_plug_in_alternative_is_the_sharper_predictive_of_the_same_fit() {
    let (x, y) = toy(40, 2, 3, 6);
    let kernel = iso_kernel(0.5, 2.0);
    let params = |also: Vec<crate::methods::AlsoPredict>| VbmnpParams { tol: 0.0, max_iters: 10, also_predict: also, ..Default::default() };
    let (with, _) = fit(&x, &y, 3, &kernel, HyperPolicy::Fixed, params(vec![crate::methods::AlsoPredict::PlugIn]), 2);
    let (without, _) = fit(&x, &y, 3, &kernel, HyperPolicy::Fixed, params(vec![]), 2);
    let xs = Array2::from_shape_fn((9, 2), |(i, j)| (i as f64 * 1.3 + j as f64).cos() * 1.5);
    let mut rng = Pcg64::seed_from_u64(1);
    let p = with.predict(&xs, &mut rng).unwrap();
    p.validate(9, p.probs.ncols()).unwrap();
    assert_eq!(p.probs, without.predict_proba(&xs, &mut rng).unwrap());
    let plug = &p.alternatives["plug_in"];
    for j in 0..9 {
        let (vb, pi) = (p.probs.row(j).to_vec(), plug.row(j).to_vec());
        let top = crate::linalg::argmax(&vb);
        assert_eq!(crate::linalg::argmax(&pi), top, "row {j}: the rankings differ");
        assert!(pi[top] > vb[top] + 1e-6, "row {j}: plug-in {} is not sharper than VB {}", pi[top], vb[top]);
    }
}
