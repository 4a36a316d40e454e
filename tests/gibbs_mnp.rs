#![allow(non_snake_case)]
//! gibbs_mnp (Girolami & Rogers 2006 App. D) against exact or brute-force answers on tiny
//! problems: Gaussian orthant probabilities (closed forms) for two classes, importance
//! sampling of the exact posterior and plain Monte Carlo over the auxiliary variables for
//! three classes.
use mcgp::kernels::SqExp;
use mcgp::likelihoods::probit;
use mcgp::methods::gibbs_mnp::{GibbsMnpModel, GibbsMnpParams};
use mcgp::methods::{FitContext, Fitted, FromSettings, HyperPolicy, Problem};
use ndarray::{array, Array2};
use rand::{RngExt, SeedableRng};
use rand_distr::StandardNormal;
use rand_pcg::Pcg64;
use std::f64::consts::PI;

fn kernel(variance: f64, lengthscale: f64) -> SqExp {
    SqExp { log_variance: variance.ln(), log_lengthscales: vec![lengthscale.ln()], learn_variance: false }
}

fn fit(x: &Array2<f64>, y: &[usize], n_classes: usize, k: &SqExp, settings: serde_json::Value, seed: u64) -> GibbsMnpModel {
    let method = GibbsMnpParams::from_settings(&settings).expect("settings").check().expect("check");
    let problem = Problem { x, y, n_classes };
    let mut rng = Pcg64::seed_from_u64(seed);
    let mut ctx = FitContext::new(&mut rng, None);
    method.fit_model(&problem, k, HyperPolicy::Fixed, &mut ctx).expect("fit")
}

/// Mean over draws of each test point's class probabilities, with batch-means standard errors
/// (batches of `batch` consecutive draws absorb the chain's autocorrelation).
fn draw_mean_and_se(draws: &[Array2<f64>], batch: usize) -> (Array2<f64>, Array2<f64>) {
    let (m, c) = draws[0].dim();
    let n_batches = draws.len() / batch;
    let mut mean = Array2::<f64>::zeros((m, c));
    let mut batch_means = Vec::new();
    for b in 0..n_batches {
        let mut bm = Array2::<f64>::zeros((m, c));
        for d in &draws[b * batch..(b + 1) * batch] {
            bm += d;
        }
        bm /= batch as f64;
        mean += &bm;
        batch_means.push(bm);
    }
    mean /= n_batches as f64;
    let mut se = Array2::<f64>::zeros((m, c));
    for bm in &batch_means {
        se += &(bm - &mean).mapv(|v| v * v);
    }
    se.mapv_inplace(|v| (v / ((n_batches - 1) * n_batches) as f64).sqrt());
    (mean, se)
}

/// P(z1 > 0, z2 > 0) for a centred bivariate normal with correlation r.
fn orthant2(r: f64) -> f64 {
    0.25 + r.asin() / (2.0 * PI)
}

/// P(z1 > 0, z2 > 0, z3 > 0) for a centred trivariate normal with correlations r12, r13, r23.
fn orthant3(r12: f64, r13: f64, r23: f64) -> f64 {
    0.125 + (r12.asin() + r13.asin() + r23.asin()) / (4.0 * PI)
}

/// Correlations of z_i = s_i (f_i + eps_i), f ~ N(0, scale K), eps ~ N(0, scale I): the
/// binary probit (scale 1) and the two-class multinomial probit (d = m_1 - m_2: scale 2).
fn signed_corr(K: &Array2<f64>, s: &[f64], i: usize, j: usize) -> f64 {
    s[i] * s[j] * K[[i, j]] / ((K[[i, i]] + 1.0) * (K[[j, j]] + 1.0)).sqrt()
}

fn dense_gram(k: &SqExp, x: &Array2<f64>) -> Array2<f64> {
    let g = k.gram(x);
    Array2::from_shape_fn((x.nrows(), x.nrows()), |(i, j)| g[(i, j)])
}

/// Two training points and one test point: the posterior predictive and the evidence are
/// ratios of Gaussian orthant probabilities (exact). For two classes the multinomial probit
/// with a shared kernel gives the same probabilities as the binary probit, so both models
/// are checked against the same closed form.
#[test]
fn two_class_predictive_and_evidence_match_orthant_probabilities() {
    // A moderate and a large signal variance (where data-augmentation samplers mix slowest).
    for variance in [2.5, 60.0] {
        two_class_case(variance);
    }
}

fn two_class_case(variance: f64) {
    let x = array![[-0.6], [0.5]];
    let x_test = array![[0.2]];
    let y = [1usize, 0];
    let k = kernel(variance, 0.9);
    let all = ndarray::concatenate![ndarray::Axis(0), x, x_test];
    let K = dense_gram(&k, &all);
    // Class 1 <-> +1, class 0 <-> -1.
    let s: Vec<f64> = y.iter().map(|&t| if t == 1 { 1.0 } else { -1.0 }).chain([1.0]).collect();
    let p_train = orthant2(signed_corr(&K, &s, 0, 1));
    let p_joint = orthant3(signed_corr(&K, &s, 0, 1), signed_corr(&K, &s, 0, 2), signed_corr(&K, &s, 1, 2));
    let exact_p1 = p_joint / p_train;
    let exact_log_evidence = p_train.ln();

    // Enough draws that the check resolves a ~0.5% change in P(t* = 1), e.g. a draw of m with
    // covariance Sigma^2 in place of Sigma.
    for (model, samples) in [("probit", 400_000), ("multinomial", 40_000)] {
        let settings = serde_json::json!({
            "burn_in": 200, "samples": samples, "evidence_samples": 40000, "trace_every": 0, "binary_model": model
        });
        let fitted = fit(&x, &y, 2, &k, settings, 11);
        let draws = fitted.predict_per_draw(&x_test);
        let (mean, se) = draw_mean_and_se(&draws, samples / 40);
        let err = (mean[[0, 1]] - exact_p1).abs();
        eprintln!(
            "s = {variance}, {model}: P(t*=1) {} vs exact {exact_p1} (se {}); evidence {:?} vs {exact_log_evidence}",
            mean[[0, 1]],
            se[[0, 1]],
            fitted.evidence()
        );
        assert!(err < 4.5 * se[[0, 1]] + 1e-4, "s = {variance}, {model}: P(t*=1) {} vs exact {exact_p1} (se {})", mean[[0, 1]], se[[0, 1]]);
        // The check has power: the prior predictive (1/2) is far outside the tolerance.
        assert!((0.5 - exact_p1).abs() > 20.0 * se[[0, 1]], "{model}: test too weak");
        let ev = fitted.evidence_estimate().expect("evidence");
        assert!(
            (ev.log_evidence - exact_log_evidence).abs() < 4.5 * ev.std_err,
            "{model}: log evidence {} vs exact {exact_log_evidence} (se {})",
            ev.log_evidence,
            ev.std_err
        );
        let e = fitted.evidence().expect("evidence");
        assert_eq!(e.kind, mcgp::results::EvidenceKind::Estimate);
        assert_eq!(e.value, ev.log_evidence);
        assert_eq!(e.std_err, Some(ev.std_err));
    }
}

/// Three classes, three training points: the posterior predictive at two test points by
/// self-normalised importance sampling with the GP prior as proposal (exact posterior,
/// weights prod_n P(t_n | m_n) from the shared probit likelihood).
#[test]
fn three_class_predictive_matches_importance_sampling_of_the_exact_posterior() {
    // A moderate and a large signal variance (the Figure 4 grid reaches s = e^5).
    for variance in [3.0, 30.0] {
        three_class_case(variance);
    }
}

fn three_class_case(variance: f64) {
    let x = array![[-1.0], [0.0], [1.1]];
    let y = [0usize, 1, 2];
    let x_test = array![[-1.3], [0.6]];
    let k = kernel(variance, 0.8);
    let settings = serde_json::json!({ "burn_in": 200, "samples": 20000, "evidence_samples": 0, "trace_every": 0 });
    let fitted = fit(&x, &y, 3, &k, settings, 5);
    let (gibbs, gibbs_se) = draw_mean_and_se(&fitted.predict_per_draw(&x_test), 500);

    // Oracle: joint prior over the 5 inputs, Cholesky by hand (tiny, well conditioned).
    let all = ndarray::concatenate![ndarray::Axis(0), x, x_test];
    let n_all = all.nrows();
    let mut K = dense_gram(&k, &all);
    for i in 0..n_all {
        K[[i, i]] += 1e-10;
    }
    let mut L = Array2::<f64>::zeros((n_all, n_all));
    for i in 0..n_all {
        for j in 0..=i {
            let s: f64 = K[[i, j]] - (0..j).map(|r| L[[i, r]] * L[[j, r]]).sum::<f64>();
            L[[i, j]] = if i == j { s.sqrt() } else { s / L[[j, j]] };
        }
    }
    let mut rng = Pcg64::seed_from_u64(77);
    let draws = 40_000;
    let (mut sw, mut sw2) = (0.0, 0.0);
    let mut num = Array2::<f64>::zeros((2, 3));
    let mut num_sq = Array2::<f64>::zeros((2, 3));
    let mut num_w2p = Array2::<f64>::zeros((2, 3));
    let mut f = Array2::<f64>::zeros((n_all, 3));
    let mut m = [0.0; 3];
    for _ in 0..draws {
        for c in 0..3 {
            let z: Vec<f64> = (0..n_all).map(|_| rng.sample::<f64, _>(StandardNormal)).collect();
            for i in 0..n_all {
                f[[i, c]] = (0..=i).map(|r| L[[i, r]] * z[r]).sum();
            }
        }
        let mut log_w = 0.0;
        for (i, &t) in y.iter().enumerate() {
            for c in 0..3 {
                m[c] = f[[i, c]];
            }
            log_w += probit::log_probit_class_prob(&m, t);
        }
        let w = log_w.exp();
        sw += w;
        sw2 += w * w;
        for j in 0..2 {
            for c in 0..3 {
                m[c] = f[[3 + j, c]];
            }
            for (c, p) in probit::probit_class_probs(&m).iter().enumerate() {
                num[[j, c]] += w * p;
                num_sq[[j, c]] += w * w * p * p;
                num_w2p[[j, c]] += w * w * p;
            }
        }
    }
    let ess = sw * sw / sw2;
    assert!(ess > 1000.0, "importance sampling too degenerate: ess {ess}");
    for j in 0..2 {
        for c in 0..3 {
            let est = num[[j, c]] / sw;
            // Delta-method se of a self-normalised IS ratio: sqrt(sum w^2 (p - est)^2) / sum w.
            let var = (num_sq[[j, c]] - 2.0 * est * num_w2p[[j, c]] + est * est * sw2) / (sw * sw);
            let is_se = var.max(0.0).sqrt();
            let tol = 4.5 * (is_se * is_se + gibbs_se[[j, c]].powi(2)).sqrt();
            eprintln!("s = {variance}, point {j} class {c}: gibbs {} IS {est} tol {tol} ess {ess}", gibbs[[j, c]]);
            assert!(
                (gibbs[[j, c]] - est).abs() < tol,
                "s = {variance}, test point {j}, class {c}: gibbs {} vs importance sampling {est} (tol {tol})",
                gibbs[[j, c]]
            );
        }
    }
    // Power: the posterior predictive differs from the prior predictive (1/3 each) by much
    // more than the tolerance at the test point next to the class-0 training point.
    assert!(gibbs[[0, 0]] - 1.0 / 3.0 > 0.15, "posterior too close to prior: {gibbs:?}");
}

/// Three classes, two points: p(t | X) by plain Monte Carlo over the auxiliary variables
/// (y_.k ~ N(0, C + I) independently per class, t_n = argmax_k y_nk), against the
/// prior-sampling estimator and its reported standard error.
#[test]
fn three_class_evidence_matches_monte_carlo_over_auxiliary_variables() {
    let x = array![[-0.4], [0.7]];
    let y = [2usize, 0];
    let k = kernel(2.0, 1.0);
    let C = dense_gram(&k, &x);
    // Cholesky of C + I (2 x 2).
    let (a, b, d) = (C[[0, 0]] + 1.0, C[[0, 1]], C[[1, 1]] + 1.0);
    let l11 = a.sqrt();
    let l21 = b / l11;
    let l22 = (d - l21 * l21).sqrt();
    let mut rng = Pcg64::seed_from_u64(3);
    let n_mc = 2_000_000;
    let mut hits = 0usize;
    for _ in 0..n_mc {
        let mut yk = [[0.0; 3]; 2];
        for c in 0..3 {
            let z1: f64 = rng.sample(StandardNormal);
            let z2: f64 = rng.sample(StandardNormal);
            yk[0][c] = l11 * z1;
            yk[1][c] = l21 * z1 + l22 * z2;
        }
        let argmax = |v: &[f64; 3]| (0..3).max_by(|&i, &j| v[i].total_cmp(&v[j])).unwrap_or(0);
        if argmax(&yk[0]) == y[0] && argmax(&yk[1]) == y[1] {
            hits += 1;
        }
    }
    let p = hits as f64 / n_mc as f64;
    let p_se = (p * (1.0 - p) / n_mc as f64).sqrt();
    let settings = serde_json::json!({ "burn_in": 10, "samples": 10, "evidence_samples": 50000, "trace_every": 0 });
    let fitted = fit(&x, &y, 3, &k, settings, 8);
    let ev = fitted.evidence_estimate().expect("evidence");
    let tol = 4.5 * (ev.std_err.powi(2) + (p_se / p).powi(2)).sqrt();
    assert!((ev.log_evidence - p.ln()).abs() < tol, "log evidence {} vs Monte Carlo {} (tol {tol})", ev.log_evidence, p.ln());
    // The reported standard error is a real Monte Carlo error, not zero.
    assert!(ev.std_err > 1e-4 && ev.std_err < 0.05, "se {}", ev.std_err);
}

#[test]
fn deterministic_in_the_seed() {
    let x = array![[-1.0, 0.2], [0.0, -0.3], [1.1, 0.5], [0.3, 0.9], [-0.5, -0.8]];
    let y = [0usize, 1, 2, 1, 0];
    let x_test = array![[0.1, 0.1], [-0.9, 0.4]];
    let k = kernel(1.5, 0.9);
    let settings = serde_json::json!({ "burn_in": 50, "samples": 100, "evidence_samples": 100, "trace_every": 5 });
    let mut rng = Pcg64::seed_from_u64(0);
    let a = fit(&x, &y, 3, &k, settings.clone(), 21);
    let b = fit(&x, &y, 3, &k, settings.clone(), 21);
    let c = fit(&x, &y, 3, &k, settings, 22);
    let pa = a.predict_proba(&x_test, &mut rng).expect("predict");
    assert_eq!(pa, b.predict_proba(&x_test, &mut rng).expect("predict"));
    assert_eq!(a.evidence(), b.evidence());
    assert_ne!(pa, c.predict_proba(&x_test, &mut rng).expect("predict"));
    for row in pa.rows() {
        assert!((row.sum() - 1.0).abs() < 1e-12 && row.iter().all(|&p| p > 0.0));
    }
}
