//! The predictive lower bound (24) against E log softmax, with and without jitter on V.
use super::*;

/// The predictive lower bound (24) where V_* is not positive definite (a rounding-level
/// negative eigenvalue, as a near-singular K^c gives): the factor needs jitter, and (24) must
/// still lie below E log softmax under N(m, V_*) (Monte Carlo over V's positive part, 200,000
/// draws). With log |V + jI| beside tr(S V) it lay about half a nat above.
#[test]
fn the_predictive_bound_stays_below_e_log_softmax_when_v_needs_jitter() {
    // V = Q diag(-1e-15, 1, 2) Q^T with Q the Householder reflection of u = (1, 2, 3).
    let u = [1.0, 2.0, 3.0];
    let uu: f64 = u.iter().map(|x| x * x).sum();
    let q = Mat::from_fn(3, 3, |i, j| if i == j { 1.0 } else { 0.0 } - 2.0 * u[i] * u[j] / uu);
    let lambda = [-1e-15, 1.0, 2.0];
    let v = Mat::from_fn(3, 3, |i, j| (0..3).map(|k| q[(i, k)] * lambda[k] * q[(j, k)]).sum::<f64>());
    let m = [0.5, -0.2, 0.1];
    let (h, _, _, jitter) = optimise_datum_jitter(&m, &v).unwrap();
    assert!(jitter > 0.0, "the case needs jitter");
    let mut r = rng(3);
    let (draws, mut s1, mut s2) = (200_000, 0.0, 0.0);
    for _ in 0..draws {
        let z: Vec<f64> = (0..3).map(|k| lambda[k].max(0.0).sqrt() * r.sample::<f64, _>(StandardNormal)).collect();
        let f: Vec<f64> = (0..3).map(|i| m[i] + (0..3).map(|k| q[(i, k)] * z[k]).sum::<f64>()).collect();
        let l = f[0] - crate::linalg::log_sum_exp(&f);
        s1 += l;
        s2 += l * l;
    }
    let mean = s1 / draws as f64;
    let se = ((s2 / draws as f64 - mean * mean) / draws as f64).sqrt();
    assert!(h + m[0] <= mean + 5.0 * se, "(24) {} above E log softmax {mean} +- {se}", h + m[0]);
    // And it is a useful bound, not far below.
    assert!(h + m[0] > mean - 0.1, "(24) {} far below E log softmax {mean}", h + m[0]);
}

/// The predictive lower bound (24) by value, at test points near the data and away from it:
/// q(f_*|y) recomputed from the fitted m, V = K - K T K and explicit K^{-1} (Chai §2.3.3:
/// m_* = K_*^T K^{-1} m, V_* = K_** - K_*^T K^{-1} K_* + K_*^T K^{-1} V K^{-1} K_*), and (24)
/// checked against it by `check_eq24_against_the_mathematics`.
#[test]
fn the_predictive_lower_bound_24_is_the_tight_bound_on_e_log_softmax() {
    let (x, y) = toy(12, 3, 21);
    let kern = SqExp { log_variance: 0.5, log_lengthscales: vec![0.0], learn_variance: true };
    let problem = Problem { x: &x, y: &y, n_classes: 3 };
    let mut r = rng(7);
    let model =
        KlmnlParams::default().check().unwrap().fit_model(&problem, &kern, HyperPolicy::Fixed, &mut FitContext::new(&mut r, None)).unwrap();
    let (k, c) = (model.prior_covariance(), 3);
    let nc = k.nrows();
    let kinv = k.partial_piv_lu().inverse();
    let v = k - k * model.t_matrix() * k;
    let xt = Array2::from_shape_fn((5, 2), |(j, d)| if d == 0 { 0.8 * j as f64 - 0.6 } else { 0.5 - 0.4 * j as f64 });
    let ks = kern.cross(&x, &xt);
    let cache = model.predictive_logs(&xt).unwrap();
    let (means, covs) = model.latent_predictive(&xt);
    for j in 0..xt.nrows() {
        let kj = Mat::from_fn(nc, c, |p, q| if p % c == q { ks[(p / c, j)] } else { 0.0 });
        let kinv_kj = &kinv * &kj;
        let m: Vec<f64> = (0..c).map(|q| (0..nc).map(|p| kinv_kj[(p, q)] * model.posterior_mean()[p]).sum()).collect();
        let vs = eye(c) * faer::Scale(kern.diag(&xt)[j]) - kj.transpose() * &kinv_kj + kinv_kj.transpose() * &v * &kinv_kj;
        // The model's stable form (K_*^T alpha, K_** - K_*^T T K_*) is the same q(f_*|y).
        for q in 0..c {
            assert!((means[j][q] - m[q]).abs() < 1e-8, "point {j}: mean {:?} vs {m:?}", means[j]);
        }
        assert!((&covs[j] - &vs).norm_max() < 1e-8, "point {j}: V_* {:?} vs {vs:?}", covs[j]);
        check_eq24_against_the_mathematics(j, &cache.log_p24[j], &m, &sym(&vs), &mut r);
    }
}
