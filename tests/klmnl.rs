//! KL-MNL and the importance samplers MC-MNL / MC-MNP (Chai 2012) on tiny problems, against
//! brute-force Gauss-Hermite quadrature of p(y) = E_{f ~ N(0, K)} prod_i p(y_i | f_i).
use mcgp::kernels::SqExp;
use mcgp::likelihoods::probit::log_probit_class_prob;
use mcgp::linalg::{log_sum_exp, Chol};
use mcgp::methods::importance::{ImportanceModel, ImportanceParams, Lik};
use mcgp::methods::klmnl::KlmnlParams;
use mcgp::methods::{FitContext, Fitted, FromSettings, HyperPolicy, Problem};
use mcgp::results::Handoff;
use ndarray::Array2;
use rand::SeedableRng;
use std::collections::BTreeMap;

/// Gauss-Hermite nodes and weights for E_{z ~ N(0,1)} g(z) (Golub-Welsch via the symmetric
/// tridiagonal Jacobi matrix of the probabilists' Hermite polynomials).
fn gauss_hermite(n: usize) -> (Vec<f64>, Vec<f64>) {
    let j = faer::Mat::from_fn(n, n, |a, b| if a + 1 == b || b + 1 == a { (a.max(b) as f64).sqrt() } else { 0.0 });
    let e = j.self_adjoint_eigen(faer::Side::Lower).unwrap();
    let s = e.S().column_vector();
    let nodes = (0..n).map(|k| s[k]).collect();
    let weights = (0..n).map(|k| e.U()[(0, k)].powi(2)).collect();
    (nodes, weights)
}

/// The log of a function of the latents, integrated by `quadrature_log_expectations`.
type LogIntegrand<'a> = dyn Fn(&[f64]) -> f64 + 'a;

/// log E_{f ~ N(0, K)} exp(g(f)) for each g of `log_gs`, by tensor Gauss-Hermite quadrature in
/// the whitened coordinates f = L g (datum-major latents, K = Kx (x) Kc), one pass over the
/// grid for all of them.
fn quadrature_log_expectations(kx: &faer::Mat<f64>, kc: &faer::Mat<f64>, nodes: usize, log_gs: &[&LogIntegrand<'_>]) -> Vec<f64> {
    let c = kc.nrows();
    let p = kx.nrows() * c;
    let k = faer::Mat::from_fn(p, p, |a, b| kx[(a / c, b / c)] * kc[(a % c, b % c)]);
    let l = Chol::factor(k.as_ref(), "K").unwrap();
    let (z, w) = gauss_hermite(nodes);
    let mut idx = vec![0usize; p];
    // Streaming log-sum-exp per function: (running maximum, sum of exp(term - maximum)).
    let mut acc = vec![(f64::NEG_INFINITY, 0.0f64); log_gs.len()];
    loop {
        let g: Vec<f64> = idx.iter().map(|&i| z[i]).collect();
        let lw: f64 = idx.iter().map(|&i| w[i].ln()).sum();
        let f: Vec<f64> = (0..p).map(|a| (0..=a).map(|b| l.l()[(a, b)] * g[b]).sum()).collect();
        for ((max, sum), log_g) in acc.iter_mut().zip(log_gs) {
            let t = lw + log_g(&f);
            if t > *max {
                *sum = *sum * (*max - t).exp() + 1.0;
                *max = t;
            } else {
                *sum += (t - *max).exp();
            }
        }
        let mut d = 0;
        while d < p {
            idx[d] += 1;
            if idx[d] < nodes {
                break;
            }
            idx[d] = 0;
            d += 1;
        }
        if d == p {
            break;
        }
    }
    acc.iter().map(|(max, sum)| max + sum.ln()).collect()
}

/// log prod_i p(y_i | f_i) for datum-major latents `f` (C per datum).
fn log_likelihood(f: &[f64], y: &[usize], c: usize, lik: Lik) -> f64 {
    (0..y.len())
        .map(|i| {
            let fi = &f[i * c..(i + 1) * c];
            match lik {
                Lik::Logit => fi[y[i]] - log_sum_exp(fi),
                Lik::Probit => log_probit_class_prob(fi, y[i]),
            }
        })
        .sum()
}

/// log p(y) by tensor Gauss-Hermite quadrature.
fn quadrature_log_evidence(kx: &faer::Mat<f64>, kc: &faer::Mat<f64>, y: &[usize], nodes: usize, lik: Lik) -> f64 {
    let c = kc.nrows();
    quadrature_log_expectations(kx, kc, nodes, &[&|f: &[f64]| log_likelihood(f, y, c, lik)])[0]
}

/// K^c = I_C: independent latent functions.
fn iid(c: usize) -> faer::Mat<f64> {
    faer::Mat::from_fn(c, c, |i, j| if i == j { 1.0 } else { 0.0 })
}

/// K^c = [[1, .5], [.5, 1]]: correlated latent functions.
fn kc_half() -> faer::Mat<f64> {
    faer::Mat::from_fn(2, 2, |i, j| if i == j { 1.0 } else { 0.5 })
}

fn tiny(n: usize) -> (Array2<f64>, Vec<usize>) {
    let x = Array2::from_shape_fn((n, 1), |(i, _)| i as f64 * 0.9 - 0.4);
    let y = (0..n).map(|i| i % 2).collect();
    (x, y)
}

/// An IS fit on a two-class problem; with `kc`, K^c is that matrix (handed over by a source
/// cell, `kc_from_source`), else the default I.
fn fit_is(
    lik: Lik,
    x: &Array2<f64>,
    y: &[usize],
    kern: &SqExp,
    mut settings: serde_json::Value,
    kc: Option<&faer::Mat<f64>>,
    seed: u64,
) -> ImportanceModel {
    let handoff = kc.map(|kc| {
        settings["klmnl"] = serde_json::json!({ "kc_from_source": true });
        let c = kc.nrows();
        Handoff { vectors: BTreeMap::from([("kc".to_string(), (0..c * c).map(|k| kc[(k / c, k % c)]).collect())]), ..Default::default() }
    });
    let method = ImportanceParams::from_settings(&settings).unwrap().check(lik).unwrap();
    let mut rng = rand_pcg::Pcg64::seed_from_u64(seed);
    let mut ctx = FitContext::new(&mut rng, None);
    ctx.source = handoff.as_ref();
    let problem = Problem { x, y, n_classes: 2 };
    let model = method.fit_model(&problem, kern, HyperPolicy::Fixed, &mut ctx).unwrap();
    // The fit runs with this K^c (its hand-off carries the one it used).
    let want = handoff.map_or_else(|| vec![1.0, 0.0, 0.0, 1.0], |h| h.vectors["kc"].clone());
    assert_eq!(model.handoff().vectors["kc"], want);
    model
}

fn run_is(lik: Lik, x: &Array2<f64>, y: &[usize], kern: &SqExp, settings: serde_json::Value) -> (f64, f64, f64, f64) {
    run_is_kc(lik, x, y, kern, settings, None)
}

fn run_is_kc(
    lik: Lik,
    x: &Array2<f64>,
    y: &[usize],
    kern: &SqExp,
    settings: serde_json::Value,
    kc: Option<&faer::Mat<f64>>,
) -> (f64, f64, f64, f64) {
    let model = fit_is(lik, x, y, kern, settings, kc, 17);
    let e = model.extra_metrics();
    (e["log_z_hat"], e["log_z_ub"], e["is_log_sd"], e["klmnl_log_zh"])
}

#[test]
fn mc_mnl_matches_brute_force_quadrature_and_brackets_the_bound() {
    // n = 3, C = 2: a 6-dimensional integral (notes D§11.0 item 6).
    let (x, y) = tiny(3);
    let kern = SqExp { log_variance: 1.0f64.ln(), log_lengthscales: vec![0.0], learn_variance: false };
    let exact = quadrature_log_evidence(&kern.gram(&x), &iid(2), &y, 12, Lik::Logit);
    let ns = 100_000.0f64;
    let (log_hat, log_ub, log_sd, log_zh) = run_is(Lik::Logit, &x, &y, &kern, serde_json::json!({"n_samples": 100000}));
    // |p-hat - p| within 4 standard errors (relative to p)
    let rel_se = (log_sd - exact).exp() / ns.sqrt();
    assert!(((log_hat - exact).exp() - 1.0).abs() < 4.0 * rel_se + 1e-9, "IS {log_hat} vs quadrature {exact} (rel se {rel_se})");
    assert!(log_ub >= exact, "upper bound {log_ub} below the quadrature value {exact}");
    // the variational bound is below the truth (Proposition 8)
    assert!(log_zh <= exact, "log Z_h {log_zh} above log p(y) {exact}");
    // the quadrature itself has converged
    let finer = quadrature_log_evidence(&kern.gram(&x), &iid(2), &y, 15, Lik::Logit);
    assert!((finer - exact).abs() < 1e-6);
}

/// The posterior-scale proposal (t4 with covariance 2V, Chai §9.2.2 on glass) is as exact: against
/// quadrature on the tiny problem, and on a nearly singular prior (long length-scale, large
/// variance) it agrees with the prior-scale estimate and stays above the variational bound.
#[test]
fn posterior_scale_matches_quadrature_and_survives_a_nearly_singular_prior() {
    let (x, y) = tiny(3);
    let kern = SqExp { log_variance: 1.0f64.ln(), log_lengthscales: vec![0.0], learn_variance: false };
    let exact = quadrature_log_evidence(&kern.gram(&x), &iid(2), &y, 12, Lik::Logit);
    let (log_hat, log_ub, log_sd, _) = run_is(Lik::Logit, &x, &y, &kern, serde_json::json!({"n_samples": 100000, "scale": "posterior"}));
    let rel_se = (log_sd - exact).exp() / 100_000f64.sqrt();
    assert!(((log_hat - exact).exp() - 1.0).abs() < 4.0 * rel_se + 1e-9, "IS {log_hat} vs quadrature {exact} (rel se {rel_se})");
    assert!(log_ub >= exact);
    // 40 close inputs, length-scale 6, variance 16: K is numerically singular (its Cholesky needs jitter).
    let (x, y) = tiny(40);
    let x = x.mapv(|v| v / 4.0);
    let kern = SqExp { log_variance: 16.0f64.ln(), log_lengthscales: vec![6.0f64.ln()], learn_variance: false };
    // The prior-scale weights are heavy (relative sd about 16, ESS about 360 per 1e5 samples),
    // so that arm takes 20 times the samples; 1e6 of them take about a second. Each estimate's
    // standard error is its weights' sample sd / sqrt(n_s) (stable across seeds at these sizes).
    let (n_v, n_k) = (50_000usize, 1_000_000usize);
    let (hat_v, ub_v, sd_v, zh) = run_is(Lik::Logit, &x, &y, &kern, serde_json::json!({"n_samples": n_v, "scale": "posterior"}));
    let (hat_k, _, sd_k, _) = run_is(Lik::Logit, &x, &y, &kern, serde_json::json!({"n_samples": n_k}));
    assert!(ub_v >= zh, "posterior scale: upper bound {ub_v} below log Z_h {zh}");
    let se = ((sd_v - hat_v).exp().powi(2) / n_v as f64 + (sd_k - hat_k).exp().powi(2) / n_k as f64).sqrt();
    assert!(((hat_v - hat_k).exp() - 1.0).abs() < 5.0 * se, "scale V {hat_v} vs scale K {hat_k} (rel se {se})");
}

/// F.1 predictive p(y* = c | y) = E[p(y|f) p(c|f*)] / p(y) by quadrature over the joint
/// (train + test) latents, against the IS predictive (with n_test_samples not a multiple of
/// the batch, so the regenerated draws must line up with the stored weights), for every class.
/// The IS predictive is a self-normalised average of p(c|f*) over the posterior; its standard
/// error is about sd(p(c|f*) | y) / sqrt(ESS), with the posterior variance also by quadrature.
#[test]
fn mc_mnl_predictive_matches_brute_force_quadrature() {
    predictive_matches_quadrature(None, &["prior"]);
}

/// As above with correlated latent functions, K^c = [[1, .5], [.5, 1]] (the predictive's mean
/// (A_x^T (x) L_c) u and noise L_c eps, and the weights' L_c products), at both proposal scales
/// (the posterior scale's u = R z). The correlation moves the predictive by 14 standard
/// errors, so the K^c = I answer would fail.
#[test]
fn mc_mnl_predictive_with_correlated_latents_matches_quadrature_at_both_scales() {
    predictive_matches_quadrature(Some(&kc_half()), &["prior", "posterior"]);
}

fn predictive_matches_quadrature(kc: Option<&faer::Mat<f64>>, scales: &[&str]) {
    let (x, y) = tiny(2);
    let xs = Array2::from_shape_fn((1, 1), |_| 0.3);
    let kern = SqExp { log_variance: 1.5f64.ln(), log_lengthscales: vec![0.0], learn_variance: false };
    // Joint latents: rows 0..2 training, row 2 the test point (latents 4..6).
    let xa = Array2::from_shape_fn((3, 1), |(i, _)| if i < 2 { x[(i, 0)] } else { 0.3 });
    let log_p_test = |f: &[f64], c: usize| f[4 + c] - log_sum_exp(&f[4..6]);
    let y_train = &y;
    let moment = |c: usize, power: f64| move |f: &[f64]| log_likelihood(&f[..4], y_train, 2, Lik::Logit) + power * log_p_test(f, c);
    let (m01, m02, m11, m12) = (moment(0, 1.0), moment(0, 2.0), moment(1, 1.0), moment(1, 2.0));
    // E[p(c|f*) | y] and Var(p(c|f*) | y) per class under K^c = kc.
    let quadrature = |kc: &faer::Mat<f64>| {
        let lz = quadrature_log_evidence(&kern.gram(&x), kc, &y, 20, Lik::Logit);
        let logs = quadrature_log_expectations(&kern.gram(&xa), kc, 12, &[&m01, &m02, &m11, &m12]);
        let want: Vec<f64> = (0..2).map(|c| (logs[2 * c] - lz).exp()).collect();
        let var: Vec<f64> = (0..2).map(|c| (logs[2 * c + 1] - lz).exp() - want[c] * want[c]).collect();
        (want, var)
    };
    let (want, var) = quadrature(kc.unwrap_or(&iid(2)));
    assert!((want[0] + want[1] - 1.0).abs() < 1e-6);
    let (n_samples, n_test) = (40000.0, 30500.0);
    let mut se0 = f64::INFINITY;
    for &scale in scales {
        let settings = serde_json::json!({"n_samples": 40000, "batch": 1000, "n_test_samples": 30500, "scale": scale});
        let model = fit_is(Lik::Logit, &x, &y, &kern, settings, kc, 5);
        let mut prng = rand_pcg::Pcg64::seed_from_u64(6);
        let got = model.is_predictive(&xs, &mut prng).unwrap();
        // The reported ESS is over all n_s weights; the predictive uses the first n_test of these
        // i.i.d. draws, whose ESS is that fraction of it.
        let ess = model.extra_metrics()["is_ess"] * n_test / n_samples;
        assert!((got[0].iter().sum::<f64>() - 1.0).abs() < 1e-12, "IS predictive {:?} does not sum to one", got[0]);
        for c in 0..2 {
            let se = (var[c] / ess).sqrt();
            assert!(
                (got[0][c] - want[c]).abs() < 5.0 * se,
                "{scale}, class {c}: IS predictive {:?} vs quadrature {want:?} (se {se})",
                got[0]
            );
        }
        se0 = se0.min((var[0] / ess).sqrt());
    }
    if kc.is_some() {
        // The test can tell K^c from I: their predictives differ by over 10 standard errors.
        let (iid_want, _) = quadrature(&iid(2));
        assert!((iid_want[0] - want[0]).abs() > 10.0 * se0, "K^c = I gives {iid_want:?} against {want:?} (se {se0})");
    }
}

/// Correlated latent functions, K^c = [[1, .5], [.5, 1]] (the L_c products of the prior-scale
/// draws, L_K = L_x (x) L_c of the posterior scale, and log|S| in the constant): MC-MNL at both
/// proposal scales and MC-MNP against quadrature of the same prior, within 4 standard errors.
/// The correlation moves p(y) by over 20 standard errors, so the K^c = I answer would fail.
#[test]
fn evidence_with_correlated_latents_matches_quadrature() {
    let kern = SqExp { log_variance: 1.0f64.ln(), log_lengthscales: vec![0.0], learn_variance: false };
    for (lik, n, nodes, scales, ns) in
        [(Lik::Logit, 3, 12, &["prior", "posterior"][..], 100_000usize), (Lik::Probit, 2, 16, &["prior"][..], 20_000)]
    {
        let (x, y) = tiny(n);
        let exact = quadrature_log_evidence(&kern.gram(&x), &kc_half(), &y, nodes, lik);
        let iid_value = quadrature_log_evidence(&kern.gram(&x), &iid(2), &y, nodes, lik);
        for &scale in scales {
            let settings = serde_json::json!({"n_samples": ns, "scale": scale, "n_test_samples": 200});
            let (log_hat, log_ub, log_sd, _) = run_is_kc(lik, &x, &y, &kern, settings, Some(&kc_half()));
            let rel_se = (log_sd - exact).exp() / (ns as f64).sqrt();
            assert!(
                ((log_hat - exact).exp() - 1.0).abs() < 4.0 * rel_se + 1e-9,
                "{lik:?} {scale}: IS {log_hat} vs quadrature {exact} (rel se {rel_se})"
            );
            assert!(log_ub >= exact, "{lik:?} {scale}: upper bound {log_ub} below the quadrature value {exact}");
            assert!(((iid_value - exact).exp() - 1.0).abs() > 10.0 * rel_se, "{lik:?}: K^c = I gives {iid_value} against {exact}");
        }
        // The quadrature has converged for the correlated prior too.
        let coarse = quadrature_log_evidence(&kern.gram(&x), &kc_half(), &y, nodes - 2, lik);
        assert!((exact - coarse).abs() < 1e-6, "{lik:?}: {nodes} nodes {exact}, {} nodes {coarse}", nodes - 2);
    }
}

#[test]
fn mc_mnp_matches_brute_force_quadrature() {
    let (x, y) = tiny(2);
    let kern = SqExp { log_variance: 2.0f64.ln(), log_lengthscales: vec![0.5], learn_variance: false };
    let exact = quadrature_log_evidence(&kern.gram(&x), &iid(2), &y, 16, Lik::Probit);
    let ns = 20_000.0f64;
    let (log_hat, log_ub, log_sd, _) = run_is(Lik::Probit, &x, &y, &kern, serde_json::json!({"n_samples": 20000, "n_test_samples": 200}));
    let rel_se = (log_sd - exact).exp() / ns.sqrt();
    assert!(((log_hat - exact).exp() - 1.0).abs() < 4.0 * rel_se + 1e-9, "IS {log_hat} vs quadrature {exact}");
    assert!(log_ub >= exact);
}

#[test]
fn klmnl_fit_through_the_method_api_is_monotone_and_learns() {
    let (x, y) = tiny(10);
    let kern = SqExp { log_variance: 0.0, log_lengthscales: vec![0.0], learn_variance: false };
    // Learning run to convergence (no early stop on small gains), so the gradient vanishes.
    let method = KlmnlParams { hyper_tol: 0.0, ..KlmnlParams::default() }.check().unwrap();
    let mut rng = rand_pcg::Pcg64::seed_from_u64(3);
    let mut ctx = FitContext::new(&mut rng, None);
    let problem = Problem { x: &x, y: &y, n_classes: 2 };
    let fixed = method.fit_model(&problem, &kern, HyperPolicy::Fixed, &mut ctx).unwrap();
    for w in fixed.log_zh_trace().windows(2) {
        assert!(w[1] >= w[0] - 1e-10 * w[0].abs());
    }
    let learned = method.fit_model(&problem, &kern, HyperPolicy::Learn, &mut ctx).unwrap();
    assert!(learned.log_zh() >= fixed.log_zh() - 1e-9);
    // at the learned optimum the free gradient (lengthscale) is ~0
    let g = learned.hyper_gradient();
    assert!(g[1].abs() < 1e-3, "gradient at the optimum {g:?}");
    let e = Fitted::extra_metrics(&learned);
    assert!(e["log_zh"] >= e["thm10_bound"]);
}

/// Skipping samples whose weight is certain to be below e^-40 of the largest leaves the logit
/// evidence and predictive unchanged to rounding (the bound is n_s e^-40 relative), on a
/// problem where the t proposal puts many samples far below the maximum. For the probit (with
/// its u-draws) this also checks that visiting the data worst-fitted first, which lets a
/// negligible sample stop sooner, leaves every kept weight as it is.
#[test]
fn skipping_negligible_samples_changes_nothing_visible() {
    for lik in [Lik::Logit, Lik::Probit] {
        skipping_changes_nothing_visible(lik);
    }
}

fn skipping_changes_nothing_visible(lik: Lik) {
    let (x, y) = tiny(16);
    let xs = Array2::from_shape_fn((3, 1), |(j, _)| j as f64 - 1.0);
    let kern = SqExp { log_variance: 25.0f64.ln(), log_lengthscales: vec![0.0], learn_variance: false };
    let problem = Problem { x: &x, y: &y, n_classes: 2 };
    let run = |negligible: f64| {
        let mut params = ImportanceParams::from_settings(&serde_json::json!({"n_samples": 20000, "n_test_samples": 5000})).unwrap();
        params.negligible_log_weight = negligible;
        let method = params.check(lik).unwrap();
        let mut rng = rand_pcg::Pcg64::seed_from_u64(9);
        let mut ctx = FitContext::new(&mut rng, None);
        let model = method.fit_model(&problem, &kern, HyperPolicy::Fixed, &mut ctx).unwrap();
        let pred = model.is_predictive(&xs, &mut rand_pcg::Pcg64::seed_from_u64(4)).unwrap();
        (model.extra_metrics(), pred)
    };
    let (full, pred_full) = run(f64::INFINITY);
    let (skip, pred_skip) = run(40.0);
    // The test is only meaningful if many samples were skipped. (Without skipping, the probit's
    // u-average can still be exactly 0 for a sample whose every Phi product underflows: a true
    // zero weight, counted the same way.)
    let zero_weight = if lik == Lik::Logit { 0.0 } else { 0.05 };
    assert!(full["is_skipped_frac"] <= zero_weight, "{lik:?}: zero weights {}", full["is_skipped_frac"]);
    assert!(skip["is_skipped_frac"] > full["is_skipped_frac"] + 0.3, "{lik:?}: skipped {}", skip["is_skipped_frac"]);
    for k in ["log_z_hat", "log_z_ub", "is_log_sd"] {
        assert!((full[k] - skip[k]).abs() < 1e-11, "{lik:?} {k}: {} vs {}", full[k], skip[k]);
    }
    assert!((full["is_ess"] / skip["is_ess"] - 1.0).abs() < 1e-11);
    for (a, b) in pred_full.iter().flatten().zip(pred_skip.iter().flatten()) {
        assert!((a - b).abs() < 1e-12, "predictive {a} vs {b}");
    }
    // A threshold that is not negligible is refused.
    let mut bad = ImportanceParams::from_settings(&serde_json::json!({})).unwrap();
    bad.negligible_log_weight = 10.0;
    assert!(bad.check(Lik::Logit).is_err());
}

/// With an extra, empty class (Chai's glass at C = 7), every method's `log_pred_all` is the log
/// predictive over all the model's classes, the empty one's mass kept: its exponentials sum to
/// the present classes' mass (below one), and renormalising them gives the probabilities.
#[test]
fn with_an_empty_class_log_pred_all_keeps_its_mass_and_renormalises_to_the_probabilities() {
    let (x, y) = tiny(8);
    let xt = Array2::from_shape_fn((5, 1), |(j, _)| -1.5 + 0.7 * j as f64);
    let kernels =
        serde_norway::from_str::<mcgp::kernels::KernelParams>("{ lengthscale: 1.0, variance: 2.0 }").unwrap().kernel_set(1, 2).unwrap();
    let problem = Problem { x: &x, y: &y, n_classes: 2 };
    for (method, settings) in [
        ("klmnl", serde_json::json!({ "extra_classes": 1 })),
        ("mc_mnl", serde_json::json!({ "n_samples": 2000, "n_test_samples": 500, "klmnl": { "extra_classes": 1 } })),
        ("vbmnp", serde_json::json!({ "extra_classes": 1, "max_iters": 20 })),
    ] {
        let m = mcgp::methods::build(method, &settings).unwrap();
        let mut rng = rand_pcg::Pcg64::seed_from_u64(3);
        let fitted = m.fit(&problem, &kernels, HyperPolicy::Fixed, &mut FitContext::new(&mut rng, None)).unwrap();
        let p = fitted.predict(&xt, &mut rng).unwrap();
        let all = &p.log_class_values["log_pred_all"];
        for j in 0..xt.nrows() {
            let mass: f64 = (0..2).map(|k| all[(j, k)].exp()).sum();
            assert!(mass < 1.0 - 1e-6, "{method}: the empty class keeps some mass ({mass})");
            for k in 0..2 {
                assert!((all[(j, k)].exp() / mass - p.probs[(j, k)]).abs() < 1e-9, "{method}: row {j} class {k}");
            }
        }
    }
}
