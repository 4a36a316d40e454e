//! The Gibbs sampler: exact draws against their distributions, the estimators, the fit.
use super::*;
use crate::likelihoods::truncated::*;
use crate::methods::FromSettings;
use crate::special::{d_log_normal_cdf, normal_cdf, normal_pdf};
use rand::SeedableRng;

/// |mean - expected| <= 4.5 standard errors.
fn assert_mean(xs: &[f64], expected: f64, what: &str) {
    let n = xs.len() as f64;
    let mean = xs.iter().sum::<f64>() / n;
    let sd = (xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt();
    assert!((mean - expected).abs() <= 4.5 * sd / n.sqrt(), "{what}: mean {mean} vs {expected} (se {})", sd / n.sqrt());
}

/// Kolmogorov-Smirnov distance between a sample and a CDF.
fn ks(xs: &mut [f64], cdf: impl Fn(f64) -> f64) -> f64 {
    xs.sort_by(|a, b| a.total_cmp(b));
    let n = xs.len() as f64;
    xs.iter()
        .enumerate()
        .map(|(i, &x)| {
            let f = cdf(x);
            (f - i as f64 / n).abs().max((f - (i + 1) as f64 / n).abs())
        })
        .fold(0.0, f64::max)
}

#[test]
fn one_sided_truncated_normal_matches_its_distribution() {
    let mut rng = Pcg64::seed_from_u64(1);
    let n = 40_000;
    // Both branches (plain rejection below 0.45, exponential rejection above), far tail included.
    for b in [-1.5, 0.0, 0.44, 0.46, 2.0, 8.0, 30.0] {
        let mut xs: Vec<f64> = (0..n).map(|_| sample_std_normal_above(b, &mut rng)).collect();
        assert!(xs.iter().all(|&x| x > b));
        // E[z | z > b] = phi(b) / Phi(-b) (inverse Mills ratio, tail-stable form).
        let mills = d_log_normal_cdf(-b);
        assert_mean(&xs, mills, &format!("b = {b}"));
        // Var = 1 + b r - r^2: check the second moment too.
        let second: Vec<f64> = xs.iter().map(|x| (x - mills).powi(2)).collect();
        assert_mean(&second, 1.0 + b * mills - mills * mills, &format!("b = {b} variance"));
        // Survival function Phi(-z) / Phi(-b) in log space; KS at the 0.1% level is 1.95/sqrt(n).
        let d = ks(&mut xs, |z| 1.0 - (log_normal_cdf(-z) - log_normal_cdf(-b)).exp());
        assert!(d < 1.95 / (n as f64).sqrt(), "b = {b}: KS distance {d}");
    }
}

/// E[y] of the cone-truncated N(m, I): reference values from notes §2.3 (56,001-point
/// trapezoid rule, computed independently of this code). t is 0-based here.
#[test]
fn cone_draws_match_the_truncated_gaussian_means_from_the_notes() {
    let cases: [(&[f64], usize, &[f64]); 5] = [
        (&[0.0, 0.0, 0.0], 0, &[0.84628438, -0.42314219, -0.42314219]),
        (&[0.5, -0.2, 0.1], 0, &[1.12177135, -0.46069451, -0.26107685]),
        (&[0.5, -0.2, 0.1], 1, &[-0.13676735, 0.88207297, -0.34530562]),
        // Z = 1.8e-5: naive rejection from N(m, I) would need ~56,000 proposals per draw.
        (&[-3.0, 2.0, 1.0, 0.0], 0, &[0.55743251, 0.09490385, -0.12804553, -0.52429084]),
        // Z = 7.7e-9.
        (&[-4.0, 4.0], 0, &[0.11818845, -0.11818845]),
    ];
    let mut rng = Pcg64::seed_from_u64(2);
    let n = 40_000;
    for (m, t, expected) in cases {
        let mut draws = vec![Vec::with_capacity(n); m.len()];
        let mut y = vec![0.0; m.len()];
        let mut proposals = 0;
        for _ in 0..n {
            proposals += sample_cone(m, t, &mut y, &mut rng);
            assert!((0..m.len()).all(|j| j == t || y[j] < y[t]), "draw outside the cone");
            for (j, d) in draws.iter_mut().enumerate() {
                d.push(y[j]);
            }
        }
        for (j, d) in draws.iter().enumerate() {
            assert_mean(d, expected[j], &format!("m = {m:?}, t = {t}, component {j}"));
        }
        // Acceptance >= 1/sqrt(K) is guaranteed (curvature of h in [-K, -1]).
        let per_draw = proposals as f64 / n as f64;
        assert!(per_draw <= (m.len() as f64).sqrt() * 1.05, "{per_draw} proposals per draw");
    }
}

/// The winner's marginal against its CDF by brute-force quadrature of
/// phi(y - m_t) prod_j Phi(y - m_j) on a fine grid.
#[test]
fn cone_winner_marginal_passes_a_ks_test() {
    let m = [0.3, 1.5, -0.7, 1.0];
    let t = 2;
    let mut rng = Pcg64::seed_from_u64(3);
    let n = 40_000;
    let mut y = vec![0.0; 4];
    let mut xs: Vec<f64> = (0..n)
        .map(|_| {
            sample_cone(&m, t, &mut y, &mut rng);
            y[t]
        })
        .collect();
    let (lo, step, nodes) = (-8.0, 1e-3, 20_001);
    let dens: Vec<f64> = (0..nodes)
        .map(|i| {
            let v = lo + i as f64 * step;
            normal_pdf(v - m[t]) * (0..4).filter(|&j| j != t).map(|j| normal_cdf(v - m[j])).product::<f64>()
        })
        .collect();
    let mut cum = vec![0.0; nodes];
    for i in 1..nodes {
        cum[i] = cum[i - 1] + 0.5 * step * (dens[i] + dens[i - 1]);
    }
    let total = cum[nodes - 1];
    let cdf = |v: f64| {
        let pos = ((v - lo) / step).clamp(0.0, (nodes - 1) as f64);
        let i = (pos as usize).min(nodes - 2);
        let frac = pos - i as f64;
        (cum[i] * (1.0 - frac) + cum[i + 1] * frac) / total
    };
    let d = ks(&mut xs, cdf);
    assert!(d < 1.95 / (n as f64).sqrt(), "KS distance {d}");
    // And a sampler that drew the winner from N(m_t, 1) would fail this test.
    let mut wrong: Vec<f64> = (0..n).map(|_| m[t] + rng.sample::<f64, _>(StandardNormal)).collect();
    assert!(ks(&mut wrong, cdf) > 1.95 / (n as f64).sqrt());
}

#[test]
fn eigen_form_of_sigma_matches_a_dense_solve() {
    let x = Array2::from_shape_fn((12, 2), |(i, j)| ((i * 7 + j * 3) % 11) as f64 / 4.0);
    let kernel = SqExp { log_variance: 1.5f64.ln(), log_lengthscales: vec![0.8f64.ln()], learn_variance: false };
    let C = kernel.gram(&x);
    let eig = eigen(&C).expect("eigen");
    let n = C.nrows();
    let S = Mat::from_fn(n, n, |i, j| (0..n).map(|r| eig.U[(i, r)] * eig.lambda[r] / (1.0 + eig.lambda[r]) * eig.U[(j, r)]).sum::<f64>());
    // Oracle: Sigma = C (I + C)^{-1} = (I + C)^{-1} C via a dense LU solve.
    let IpC = Mat::from_fn(n, n, |i, j| C[(i, j)] + if i == j { 1.0 } else { 0.0 });
    use faer::linalg::solvers::Solve;
    let dense = IpC.partial_piv_lu().solve(&C);
    let err = (0..n).flat_map(|i| (0..n).map(move |j| (i, j))).map(|(i, j)| (S[(i, j)] - dense[(i, j)]).abs()).fold(0.0, f64::max);
    assert!(err < 1e-12, "max |Sigma_eig - Sigma_dense| = {err}");
}

#[test]
fn evidence_estimate_matches_known_weights() {
    // Equal weights: log p = l, se 0, ess = S.
    let e = EvidenceEstimate::from_log_weights(&[-3.0; 50]);
    assert!((e.log_evidence + 3.0).abs() < 1e-12 && e.std_err < 1e-7 && (e.ess - 50.0).abs() < 1e-9);
    // Weights (1, 3): mean 2, sample sd (divisor S - 1) sqrt(2), so the mean's standard error
    // is sqrt(2) / sqrt(2) = 1 and the delta method gives se(log p-hat) = 1 / 2.
    let e = EvidenceEstimate::from_log_weights(&[0.0, 3f64.ln()]);
    assert!((e.log_evidence - 2f64.ln()).abs() < 1e-12);
    assert!((e.std_err - 0.5).abs() < 1e-12, "{}", e.std_err);
    assert!((e.ess - 16.0 / 10.0).abs() < 1e-12);
    // No weight at all: -inf, not NaN.
    let e = EvidenceEstimate::from_log_weights(&[f64::NEG_INFINITY; 4]);
    assert!(e.log_evidence == f64::NEG_INFINITY && e.std_err == f64::INFINITY && e.ess == 0.0, "{e:?}");
    // A NaN or +inf weight: no estimate, and above all no standard error of 0.
    for bad in [f64::NAN, f64::INFINITY] {
        let e = EvidenceEstimate::from_log_weights(&[-1.0, bad, -2.0]);
        assert!(e.log_evidence.is_nan() && e.std_err.is_nan() && e.ess.is_nan(), "{e:?}");
    }
}

#[test]
fn settings_are_checked_and_learning_is_refused() {
    assert!(GibbsMnpParams::from_settings(&serde_json::json!({"burnin": 3})).is_err());
    let msg = GibbsMnpParams::from_settings(&serde_json::json!({"samples": 0})).expect("parse").check().expect_err("0 samples");
    assert!(msg.contains("settings.samples"), "{msg}");
    let p = GibbsMnpParams::from_settings(&serde_json::json!({"binary_model": "multinomial"})).expect("parse");
    assert_eq!(p.binary_model, BinaryModel::Multinomial);
    let method = GibbsMnpParams::default().check().expect("defaults");
    let x = Array2::from_shape_fn((4, 1), |(i, _)| i as f64);
    let problem = Problem { x: &x, y: &[0, 1, 2, 0], n_classes: 3 };
    let kernel = SqExp { log_variance: 0.0, log_lengthscales: vec![0.0], learn_variance: false };
    let mut rng = Pcg64::seed_from_u64(0);
    let mut ctx = FitContext::new(&mut rng, None);
    match method.fit_model(&problem, &kernel, HyperPolicy::Learn, &mut ctx) {
        Err(FitError::Unsupported(msg)) => assert!(msg.contains("fixed hyper-parameters"), "{msg}"),
        Err(e) => panic!("wrong error {e}"),
        Ok(_) => panic!("learning must be refused"),
    }
}

#[test]
fn fast_quadrature_matches_the_shared_probit_likelihood() {
    use crate::likelihoods::probit;
    let mut rng = Pcg64::seed_from_u64(9);
    let mut worst: f64 = 0.0;
    for case in 0..600 {
        let k = 2 + case % 5;
        let scale = [0.3, 1.0, 3.0, 8.0][case % 4];
        let m: Vec<f64> = (0..k).map(|_| scale * rng.sample::<f64, _>(StandardNormal)).collect();
        let t = case % k;
        let reference = probit::log_probit_class_prob(&m, t);
        let fast = crate::likelihoods::probit::log_probit_class_prob_fast(&m, t);
        let err = (fast - reference).abs() / reference.abs().max(1.0);
        worst = worst.max(err);
        assert!(err < 1e-6, "m = {m:?}, t = {t}: {fast} vs {reference}");
        // Predictive with a shared variance against the shared module's per-class form.
        let var = [0.0, 0.5, 3.0][case % 3];
        let mut out = vec![0.0; k];
        log_predictive_point(&m, var, false, &mut out);
        out.iter_mut().for_each(|o| *o = o.exp());
        let reference = probit::predictive_class_probs(&m, &vec![var; k]);
        for (a, b) in out.iter().zip(&reference) {
            assert!((a - b).abs() < 1e-6, "predictive {out:?} vs {reference:?}");
        }
    }
    // Far tail (notes §2.3: m = (-4, 4), t = 1 has Z = 7.7086e-09; K = 2 closed form Phi(d / sqrt 2)).
    let d = -16.0;
    let exact = log_normal_cdf(d / std::f64::consts::SQRT_2);
    assert!((crate::likelihoods::probit::log_probit_class_prob_fast(&[0.0, -d], 0) - exact).abs() < 1e-6 * exact.abs(), "worst {worst}");
}

#[test]
fn the_binary_predictive_takes_each_class_from_its_own_tail() {
    // P(t = 0 | mu, var) = Phi(-mu / v), v = sqrt(1 + var). At mu / v = 12, 1 - Phi(12) is 0 in
    // floating point; the log must be the tail's, checked against the asymptotic series
    // log Phi(-x) = -x^2/2 - log(x sqrt(2 pi)) + log(1 - 1/x^2 + 3/x^4 - 15/x^6 + ...).
    for (mu, var) in [(12.0, 0.0), (-15.0 * 2f64.sqrt(), 1.0), (40.0, 0.0)] {
        let x = mu / (1.0f64 + var).sqrt();
        let mut out = [0.0; 2];
        log_predictive_point(&[mu], var, true, &mut out);
        let a = x.abs();
        let series = -0.5 * a * a - (a * (2.0 * std::f64::consts::PI).sqrt()).ln()
            + (1.0 - 1.0 / a.powi(2) + 3.0 / a.powi(4) - 15.0 / a.powi(6)).ln();
        let (tail, bulk) = if x > 0.0 { (out[0], out[1]) } else { (out[1], out[0]) };
        assert!((tail - series).abs() < 1e-6 * series.abs(), "x = {x}: log P(tail class) {tail} vs series {series}");
        assert!(bulk <= 0.0 && bulk > -1e-30, "x = {x}: the other class's log P {bulk}");
    }
}

#[test]
fn model_is_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<GibbsMnp>();
    assert_send_sync::<GibbsMnpModel>();
}

#[test]
fn a_bound_beyond_every_draw_gives_nan_instead_of_looping() {
    let mut rng = Pcg64::seed_from_u64(1);
    for b in [f64::INFINITY, 1e200, f64::NAN] {
        assert!(sample_std_normal_above(b, &mut rng).is_nan(), "b = {b}");
    }
    // Far but representable bounds still draw: z > b and z - b ~ Exp(b) (mean about 1 / b).
    let z = sample_std_normal_above(1e6, &mut rng);
    assert!(z > 1e6 && z - 1e6 < 1e-4, "{z}");
}
