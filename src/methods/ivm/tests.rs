//! The IVM against mathematics (notes §9 R0): the incremental representation against its
//! recomputation and the dense posterior, d = n Gaussian regression against the exact GP, the
//! probit ADF moments against quadrature, the direction of the selection, and an end-to-end fit.
use super::learn::{phi_grad, HyperPrior, Sites};
use super::select::{best_candidate, gain};
use super::state::{kernel_column, IvmState};
use super::*;
use crate::kernels::KernelParams;
use crate::likelihoods::univariate::CavityMoments;
use crate::linalg::Chol;
use crate::methods::{FitContext, FromSettings};
use crate::special::{d_log_normal_cdf, log_normal_cdf};
use faer::Mat;
use gauss_quad::legendre::GaussLegendre;
use ndarray::Axis;
use rand::SeedableRng;
use rand_distr::{Distribution, StandardNormal};
use rand_pcg::Pcg64;

fn kernel(yaml: &str, dim: usize) -> Box<dyn Kernel> {
    serde_norway::from_str::<KernelParams>(yaml).unwrap().kernel_set(dim, 2).unwrap().class(0).clone_box()
}

/// Two Gaussian blobs in 2-D, centres +-(sep, sep/2), class 1 on the positive side.
fn blobs(n: usize, sep: f64, seed: u64) -> (Array2<f64>, Vec<usize>) {
    let mut rng = Pcg64::seed_from_u64(seed);
    let mut x = Array2::zeros((n, 2));
    let y: Vec<usize> = (0..n).map(|i| i % 2).collect();
    for i in 0..n {
        let s = if y[i] == 1 { 1.0 } else { -1.0 };
        let e0: f64 = StandardNormal.sample(&mut rng);
        let e1: f64 = StandardNormal.sample(&mut rng);
        x[(i, 0)] = s * sep + 0.6 * e0;
        x[(i, 1)] = s * 0.5 * sep + 0.6 * e1;
    }
    (x, y)
}

fn signs(y: &[usize]) -> Vec<f64> {
    y.iter().map(|&c| if c == 1 { 1.0 } else { -1.0 }).collect()
}

fn ivm(settings: serde_json::Value) -> Ivm {
    IvmParams::from_settings(&settings).unwrap().check().unwrap()
}

fn close(what: &str, got: f64, want: f64, tol: f64) {
    assert!((got - want).abs() <= tol * (1.0 + want.abs()), "{what}: got {got}, want {want} (tol {tol})");
}

/// The dense posterior for active set I with sites (pi, b): A = K - K_{.,I} (Pi^{-1} + K_I)^{-1}
/// K_{I,.} and h = A_{.,I} b, by a Cholesky solve (no inverse of K).
fn dense_posterior(k: &Mat<f64>, active: &[usize], pi: &[f64], b: &[f64]) -> (Vec<f64>, Vec<f64>) {
    let (n, d) = (k.nrows(), active.len());
    let s = Mat::from_fn(d, d, |r, c| k[(active[r], active[c])] + if r == c { 1.0 / pi[r] } else { 0.0 });
    let chol = Chol::factor(s.as_ref(), "Pi^-1 + K_I").unwrap();
    let kin = Mat::from_fn(d, n, |r, j| k[(active[r], j)]);
    let w = chol.solve(kin.as_ref()); // (Pi^-1 + K_I)^-1 K_{I,.}
    let a_full = Mat::from_fn(n, n, |i, j| k[(i, j)] - (0..d).map(|r| kin[(r, i)] * w[(r, j)]).sum::<f64>());
    let h = (0..n).map(|i| (0..d).map(|r| a_full[(i, active[r])] * b[r]).sum()).collect();
    let a = (0..n).map(|i| a_full[(i, i)]).collect();
    (h, a)
}

/// An RBF, an ARD and a sum with linear and white-noise terms (whose kernel column carries the
/// noise on the diagonal only): the kernels the representation and gradient tests run on.
const THREE_KERNELS: [&str; 3] = [
    "{ lengthscale: 0.9, variance: 2.0 }",
    "{ ard: true, lengthscale: [0.7, 1.6], variance: 1.3 }",
    "{ type: sum, terms: [ { lengthscale: 1.1, variance: 1.5 }, { type: linear, variance: 0.4 }, { type: white, variance: 0.05 } ] }",
];

/// (a) After every inclusion, the incremental state equals its recomputation from scratch
/// (L, M, beta, h, a) and the dense posterior (h, a), for three kernels including a white-noise
/// sum (whose kernel column must carry the noise on the diagonal only).
#[test]
fn incremental_representation_matches_recomputation_after_every_inclusion() {
    let (x, y) = blobs(40, 0.8, 3);
    let targets = signs(&y);
    for yaml in THREE_KERNELS {
        let kern = kernel(yaml, 2);
        let k = kern.gram(&x);
        let method = ivm(serde_json::json!({ "active_size": 15, "bias": 0.3 }));
        let mut rng = Pcg64::seed_from_u64(1);
        let mut ctx = FitContext::new(&mut rng, None);
        let mut checked = 0;
        let sel = method
            .select(kern.as_ref(), &x, &targets, SiteLik::Probit { bias: 0.3 }, &mut ctx, |_, st, _| {
                let (re, _) = IvmState::rebuild(kern.as_ref(), &x, &st.active, &st.pi, &st.b).unwrap();
                let d = st.d();
                for r in 0..d {
                    for c in 0..=r {
                        close(&format!("{yaml}: L[{r},{c}] at d = {d}"), st.chol.l()[(r, c)], re.chol.l()[(r, c)], 1e-10);
                    }
                    close(&format!("{yaml}: beta[{r}]"), st.beta[r], re.beta[r], 1e-9);
                    for j in 0..st.n() {
                        close(&format!("{yaml}: M[{j},{r}]"), st.m_cols[r][j], re.m_cols[r][j], 1e-10);
                    }
                }
                let (h, a) = dense_posterior(&k, &st.active, &st.pi, &st.b);
                for j in 0..st.n() {
                    close(&format!("{yaml}: h[{j}] vs rebuild at d = {d}"), st.h[j], re.h[j], 1e-9);
                    close(&format!("{yaml}: a[{j}] vs rebuild"), st.a[j], re.a[j], 1e-10);
                    close(&format!("{yaml}: h[{j}] vs dense"), st.h[j], h[j], 1e-8);
                    close(&format!("{yaml}: a[{j}] vs dense"), st.a[j], a[j], 1e-8);
                }
                checked += 1;
                Ok(())
            })
            .unwrap();
        assert_eq!(checked, 15, "{yaml}");
        assert_eq!(sel.state.floor_hits, 0, "{yaml}");
        // Each active point entered with the ADF site of its marginal before inclusion:
        // pi = 1/a' - 1/a (the tilted variance's precision minus the cavity's) is checked in
        // the moments test; here the sites are positive and the active set has no repeats.
        let mut sorted = sel.state.active.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), 15);
        assert!(sel.state.pi.iter().all(|p| *p > 0.0));
    }
}

/// (b) Gaussian regression with d = n: the IVM's Q(u) is the exact GP posterior, at the training
/// points (h, a) and at test points (prediction from the active set):
/// mean K_*^T (K + s2 I)^{-1} y, variance k_** - K_*^T (K + s2 I)^{-1} K_*.
#[test]
fn gaussian_regression_with_all_points_active_is_the_exact_gp_posterior() {
    let n = 25;
    let (x, _) = blobs(n, 0.5, 8);
    let y: Vec<f64> = (0..n).map(|i| (1.3 * x[(i, 0)]).sin() + 0.4 * x[(i, 1)] + 0.1 * ((i * 7) % 5) as f64).collect();
    let xt = Array2::from_shape_fn((7, 2), |(i, k)| ((i * (k + 3)) as f64 * 0.41).cos() * 1.2);
    let kern = kernel("{ ard: true, lengthscale: [0.8, 1.4], variance: 1.7 }", 2);
    let s2 = 0.09;
    let method = ivm(serde_json::json!({ "active_size": n }));
    let mut rng = Pcg64::seed_from_u64(2);
    let mut ctx = FitContext::new(&mut rng, None);
    let lik = SiteLik::Gaussian { noise_var: s2 };
    let sel = method.select(kern.as_ref(), &x, &y, lik, &mut ctx, |_, _, _| Ok(())).unwrap();
    assert_eq!(sel.state.d(), n);
    assert!(sel.state.pi.iter().all(|p| (p * s2 - 1.0).abs() < 1e-10), "Gaussian sites are pi = 1/s2");
    let model = method.model(kern.as_ref(), &x, &sel.state, lik, None, Diagnostics::default());
    // Exact GP: (K + s2 I) by Cholesky.
    let k = kern.gram(&x);
    let ky = Mat::from_fn(n, n, |i, j| k[(i, j)] + if i == j { s2 } else { 0.0 });
    let chol = Chol::factor(ky.as_ref(), "K + s2 I").unwrap();
    let alpha = chol.solve_vec(&y);
    for j in 0..n {
        let mean: f64 = (0..n).map(|i| k[(j, i)] * alpha[i]).sum();
        let w = chol.solve_vec(&(0..n).map(|i| k[(i, j)]).collect::<Vec<_>>());
        let var = k[(j, j)] - (0..n).map(|i| k[(i, j)] * w[i]).sum::<f64>();
        close(&format!("train mean {j}"), sel.state.h[j], mean, 1e-9);
        close(&format!("train var {j}"), sel.state.a[j], var, 1e-9);
    }
    let ks = kern.cross(&x, &xt);
    let kss = kern.diag(&xt);
    let (pm, pv) = model.latent_predictive(&xt);
    for j in 0..xt.nrows() {
        let kj: Vec<f64> = (0..n).map(|i| ks[(i, j)]).collect();
        let mean: f64 = kj.iter().zip(&alpha).map(|(a, b)| a * b).sum();
        let w = chol.solve_vec(&kj);
        let var = kss[j] - kj.iter().zip(&w).map(|(a, b)| a * b).sum::<f64>();
        close(&format!("test mean {j}"), pm[j], mean, 1e-9);
        close(&format!("test var {j}"), pv[j], var, 1e-9);
    }
}

/// Log of N(y | 0, S) by a Cholesky factor of S.
fn log_gaussian(y: &[f64], s: &Mat<f64>) -> f64 {
    let chol = Chol::factor(s.as_ref(), "covariance").unwrap();
    let w = chol.solve_vec(y);
    -0.5 * y.iter().zip(&w).map(|(a, b)| a * b).sum::<f64>() - 0.5 * chol.log_det() - y.len() as f64 * crate::special::LN_SQRT_2PI
}

/// Eq. 11 for Gaussian noise is exact (notes §4.1 [DERIVED]): log Q(D) equals
/// log N(y_I | 0, K_I + s2 I) plus sum_{j not in I} log N(y_j | h_j, a_j + s2) at every d, and
/// the exact log marginal likelihood log N(y | 0, K + s2 I) at d = n.
#[test]
fn gaussian_evidence_is_the_active_evidence_plus_the_predictive_log_loss() {
    let n = 25;
    let (x, _) = blobs(n, 0.5, 9);
    let y: Vec<f64> = (0..n).map(|i| (1.1 * x[(i, 0)]).cos() - 0.3 * x[(i, 1)] + 0.05 * ((i * 3) % 7) as f64).collect();
    let kern = kernel("{ lengthscale: 0.9, variance: 1.4 }", 2);
    let k = kern.gram(&x);
    let s2 = 0.2;
    let lik = SiteLik::Gaussian { noise_var: s2 };
    let method = ivm(serde_json::json!({ "active_size": n }));
    let mut rng = Pcg64::seed_from_u64(3);
    let mut ctx = FitContext::new(&mut rng, None);
    let mut checked = 0;
    method
        .select(kern.as_ref(), &x, &y, lik, &mut ctx, |d, st, _| {
            let act = &st.active;
            let s = Mat::from_fn(act.len(), act.len(), |r, c| k[(act[r], act[c])] + if r == c { s2 } else { 0.0 });
            let y_act: Vec<f64> = act.iter().map(|&i| y[i]).collect();
            let rest: f64 = (0..n)
                .filter(|j| !act.contains(j))
                .map(|j| -crate::special::LN_SQRT_2PI - 0.5 * (st.a[j] + s2).ln() - 0.5 * (y[j] - st.h[j]).powi(2) / (st.a[j] + s2))
                .sum();
            close(&format!("log Q(D) at d = {d}"), st.log_evidence(lik, &y).unwrap(), log_gaussian(&y_act, &s) + rest, 1e-10);
            checked += 1;
            Ok(())
        })
        .unwrap();
    assert_eq!(checked, n);
}

/// log Z, mean and variance of the tilted Phi(y (u + bias)) N(u | m, v), by Gauss-Legendre
/// panels (20 nodes each) over +-30 sd around the integrand's mode, in log space relative to
/// the mode's value; the mode by bisection of the log integrand's derivative (decreasing).
fn probit_tilted_by_quadrature(y: f64, bias: f64, m: f64, v: f64) -> (f64, f64, f64) {
    let log_f = |u: f64| -0.5 * (u - m) * (u - m) / v - 0.5 * (2.0 * std::f64::consts::PI * v).ln() + log_normal_cdf(y * (u + bias));
    let dlog_f = |u: f64| -(u - m) / v + y * d_log_normal_cdf(y * (u + bias));
    let (mut lo, mut hi) = (m - 1e3 * (1.0 + v), m + 1e3 * (1.0 + v));
    for _ in 0..300 {
        let mid = 0.5 * (lo + hi);
        if dlog_f(mid) > 0.0 {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    let mode = 0.5 * (lo + hi);
    let top = log_f(mode);
    let sd = v.sqrt();
    let rule = GaussLegendre::new(20.try_into().unwrap());
    let (mut s0, mut s1, mut s2) = (0.0, 0.0, 0.0);
    let panels = 480;
    let width = 60.0 * sd / panels as f64;
    for p in 0..panels {
        let a = mode - 30.0 * sd + p as f64 * width;
        s0 += rule.integrate(a, a + width, |u| (log_f(u) - top).exp());
        s1 += rule.integrate(a, a + width, |u| (u - mode) * (log_f(u) - top).exp());
        s2 += rule.integrate(a, a + width, |u| (u - mode) * (u - mode) * (log_f(u) - top).exp());
    }
    let shift = s1 / s0;
    (top + s0.ln(), mode + shift, s2 / s0 - shift * shift)
}

/// (c) The probit ADF moments (log Z, tilted mean m + v alpha, tilted variance v (1 - v nu))
/// against quadrature, from the bulk to far tails on both sides (z down to about -47, where
/// Z ~ 1e-480 is far below the smallest double and only log Z exists), and the site they give
/// against its definition pi = 1/v' - 1/v, b = m'/v' - m/v.
#[test]
fn probit_moments_match_quadrature_into_the_far_tails() {
    for &(y, bias, m, v) in &[
        (1.0, 0.0, 0.3, 1.2),
        (-1.0, 0.5, 2.0, 0.5),
        (1.0, 0.0, -10.0, 1.0),
        (1.0, -1.0, -40.0, 2.0),
        (-1.0, 0.0, 50.0, 0.1),
        (1.0, 0.0, 8.0, 1.0),
        (-1.0, 0.2, -3.0, 25.0),
    ] {
        let mo = CavityMoments::probit(y, bias, m, v);
        let (log_z, mean, var) = probit_tilted_by_quadrature(y, bias, m, v);
        let what = format!("y {y} bias {bias} m {m} v {v}");
        close(&format!("{what}: log Z"), mo.log_z, log_z, 1e-11);
        close(&format!("{what}: tilted mean"), mo.tilted_mean(m, v), mean, 1e-10);
        close(&format!("{what}: tilted variance"), mo.tilted_var(v), var, 1e-9);
        let (pi, b) = mo.site(m, v).unwrap();
        let (m1, v1) = (mo.tilted_mean(m, v), mo.tilted_var(v));
        close(&format!("{what}: site precision"), pi, 1.0 / v1 - 1.0 / v, 1e-8);
        close(&format!("{what}: site mean"), b, m1 / v1 - m / v, 1e-8);
        assert!(pi > 0.0 && mo.nu * v < 1.0, "{what}: log-concave site");
    }
    // Gaussian noise: the site is exact, pi = 1/s2 and b = y/s2 whatever the cavity.
    let g = CavityMoments::gaussian(0.7, 0.25, -0.4, 1.3);
    let (pi, b) = g.site(-0.4, 1.3).unwrap();
    close("gaussian pi", pi, 4.0, 1e-13);
    close("gaussian b", b, 2.8, 1e-13);
}

/// (d) The selection includes the point of LARGEST information gain KL = -Delta (argmin of eq.
/// 5's Delta), not Algorithm 1's printed argmax Delta; the gain equals eq. 5 written out.
#[test]
fn selection_picks_the_most_informative_point() {
    // Three candidates with equal prior variance and no correlation (their marginals are what
    // the criterion sees): probit targets +1 with the current mean far on the right side, far on
    // the wrong side, and at zero.
    let mut st = IvmState::prior(vec![1.0; 3]);
    st.h = vec![3.0, -2.0, 0.0];
    let targets = [1.0, 1.0, -1.0];
    let lik = SiteLik::Probit { bias: 0.0 };
    let deltas: Vec<f64> = (0..3)
        .map(|j| {
            // Eq. 5: Delta = -(log m + 1/m + (h' - h)^2 / a - 1) / 2, m = 1 + a pi'.
            let mo = st.moments(lik, &targets, j);
            let (pi, _) = mo.site(st.h[j], st.a[j]).unwrap();
            let mj = 1.0 + st.a[j] * pi;
            let shift = mo.tilted_mean(st.h[j], st.a[j]) - st.h[j];
            let delta = -0.5 * (mj.ln() + 1.0 / mj + shift * shift / st.a[j] - 1.0);
            close(&format!("gain {j} = -Delta"), gain(&mo, st.h[j], st.a[j], Criterion::InfoGain, 0.0).unwrap(), -delta, 1e-12);
            delta
        })
        .collect();
    let argmin = (0..3).min_by(|&i, &j| deltas[i].total_cmp(&deltas[j])).unwrap();
    let argmax = (0..3).max_by(|&i, &j| deltas[i].total_cmp(&deltas[j])).unwrap();
    assert_eq!(argmin, 1, "the misclassified point is the most informative: {deltas:?}");
    assert_eq!(argmax, 0, "the printed argmax would take the confidently right point: {deltas:?}");
    let choice = best_candidate(&st, lik, &targets, &[0, 1, 2], Criterion::InfoGain, 1e-8).unwrap();
    assert_eq!(choice.index, 1);
    // Gaussian noise: the information gain prefers the largest surprise |y - h|; the entropy
    // score ignores y and prefers the largest variance.
    let mut st = IvmState::prior(vec![1.0, 1.0, 2.0]);
    st.h = vec![0.0; 3];
    let lik = SiteLik::Gaussian { noise_var: 0.5 };
    let targets = [0.1, 3.0, -0.2];
    assert_eq!(best_candidate(&st, lik, &targets, &[0, 1, 2], Criterion::InfoGain, 1e-8).unwrap().index, 1);
    assert_eq!(best_candidate(&st, lik, &targets, &[0, 1, 2], Criterion::Entropy, 1e-8).unwrap().index, 2);
    // Ties go to the smallest index; a candidate whose site precision is below eps K_jj is
    // skipped (a probit point far on the right side gives pi ~ 1e-15).
    let mut st = IvmState::prior(vec![1.0; 3]);
    st.h = vec![9.0, 0.0, 0.0];
    let lik = SiteLik::Probit { bias: 0.0 };
    assert!(gain(&st.moments(lik, &[1.0], 0), 9.0, 1.0, Criterion::InfoGain, 1e-8).is_none());
    assert_eq!(best_candidate(&st, lik, &[1.0, 1.0, 1.0], &[0, 1, 2], Criterion::InfoGain, 1e-8).unwrap().index, 1);
    assert!(best_candidate(&st, lik, &[1.0, 1.0, 1.0], &[0], Criterion::InfoGain, 1e-8).is_none());
}

fn fit(method: &Ivm, x: &Array2<f64>, y: &[usize], seed: u64) -> Box<dyn Fitted> {
    let kernels = serde_norway::from_str::<KernelParams>("{ lengthscale: 1.0, variance: 2.0 }").unwrap().kernel_set(2, 2).unwrap();
    let mut rng = Pcg64::seed_from_u64(seed);
    let mut ctx = FitContext::new(&mut rng, None);
    method.fit(&Problem { x, y, n_classes: 2 }, &kernels, HyperPolicy::Fixed, &mut ctx).unwrap()
}

/// (e) Two separable blobs: a 20-point IVM classifies held-out points well, greedy and
/// randomized; the randomized fit is deterministic in its seed and depends on it.
#[test]
fn separable_blobs_end_to_end_and_deterministic_in_the_seed() {
    let (x, y) = blobs(80, 1.5, 21);
    let (xt, yt) = blobs(200, 1.5, 22);
    let greedy = ivm(serde_json::json!({ "active_size": 20 }));
    let randomized = ivm(serde_json::json!({ "active_size": 20, "selection": "randomized", "candidates": 15 }));
    for (what, method) in [("greedy", &greedy), ("randomized", &randomized)] {
        let model = fit(method, &x, &y, 5);
        let p = model.predict(&xt, &mut Pcg64::seed_from_u64(0)).unwrap();
        p.validate(xt.nrows()).unwrap();
        let errors = (0..xt.nrows()).filter(|&j| (p.probs[(j, 1)] > 0.5) != (yt[j] == 1)).count();
        assert!(errors <= 4, "{what}: {errors} errors of {}", xt.nrows());
        let d = model.diagnostics();
        assert!(d.iterations.is_some_and(|k| (1..=20).contains(&k)), "{what}: {d:?}");
        assert_eq!(model.inducing_inputs()[0].nrows() as u64, d.iterations.unwrap());
        assert!(model.evidence().is_some_and(|e| e.value.is_finite() && e.value < 0.0), "{what}");
        assert!(d.notes["selection"].starts_with(what), "{:?}", d.notes);
    }
    let bits = |m: &dyn Fitted| -> Vec<u64> {
        let mut v: Vec<u64> = m.predict(&xt, &mut Pcg64::seed_from_u64(0)).unwrap().probs.iter().map(|p| p.to_bits()).collect();
        v.extend(m.inducing_inputs()[0].iter().map(|p| p.to_bits()));
        v
    };
    let a = bits(fit(&randomized, &x, &y, 5).as_ref());
    assert_eq!(a, bits(fit(&randomized, &x, &y, 5).as_ref()), "same seed, same fit");
    assert!((6..10).any(|s| bits(fit(&randomized, &x, &y, s).as_ref()) != a), "the random subsets come from the seed");
}

#[test]
fn refuses_per_class_kernels_one_class_and_the_paper_prior_on_other_kernels() {
    let m = ivm(serde_json::Value::Null);
    let kernels = serde_norway::from_str::<KernelParams>("{ lengthscale: 1.0 }").unwrap().kernel_set(2, 3).unwrap();
    let shape = ProblemShape { n_classes: 3, n_features: 2, n_train: 10 };
    assert_eq!(m.supports(&shape, &kernels, HyperPolicy::Learn), Ok(()), "c against the rest");
    assert!(m.supports(&ProblemShape { n_classes: 1, ..shape }, &kernels, HyperPolicy::Fixed).unwrap_err().contains("at least two"));
    let per_class = serde_norway::from_str::<KernelParams>("{ lengthscale: 1.0, per_class: true }").unwrap().kernel_set(2, 3).unwrap();
    assert!(m.supports(&shape, &per_class, HyperPolicy::Fixed).unwrap_err().contains("per_class"));
    let kernels = serde_norway::from_str::<KernelParams>("{ lengthscale: 1.0 }").unwrap().kernel_set(2, 2).unwrap();
    let shape = ProblemShape { n_classes: 2, ..shape };
    assert_eq!(m.supports(&shape, &kernels, HyperPolicy::Learn), Ok(()));
    let linear = serde_norway::from_str::<KernelParams>("{ type: linear, variance: 1.0 }").unwrap().kernel_set(2, 2).unwrap();
    assert!(m.supports(&shape, &linear, HyperPolicy::Learn).unwrap_err().contains("settings.hyper_prior"));
    assert_eq!(ivm(serde_json::json!({ "hyper_prior": "none" })).supports(&shape, &linear, HyperPolicy::Learn), Ok(()));
    assert!(IvmParams::from_settings(&serde_json::json!({ "inner_iters": 0 })).unwrap().check().unwrap_err().contains("inner_iters"));
    assert!(IvmParams::from_settings(&serde_json::json!({ "strategy": "exakt" })).is_err());
    assert!(IvmParams::from_settings(&serde_json::json!({ "active_sise": 3 })).is_err());
    assert!(IvmParams::from_settings(&serde_json::json!({ "active_size": 0 })).unwrap().check().is_err());
}

/// The kernel column keeps a white-noise term on the diagonal only, as `gram` does.
#[test]
fn kernel_column_agrees_with_the_gram_matrix() {
    let (x, _) = blobs(9, 1.0, 4);
    let kern = kernel("{ type: sum, terms: [ { lengthscale: 0.7 }, { type: white, variance: 0.3 } ] }", 2);
    let k = kern.gram(&x);
    let kd = kern.diag(&x);
    for i in 0..9 {
        let c = kernel_column(kern.as_ref(), &x, i, kd[i]);
        for j in 0..9 {
            close(&format!("K[{j},{i}]"), c[j], k[(j, i)], 1e-14);
        }
    }
}

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

fn fit_learned(
    settings: serde_json::Value,
    x: &Array2<f64>,
    y: &[usize],
    kernel_yaml: &str,
) -> (Box<dyn Fitted>, Vec<crate::results::TracePoint>) {
    let kernels = serde_norway::from_str::<KernelParams>(kernel_yaml).unwrap().kernel_set(2, 2).unwrap();
    let mut rng = Pcg64::seed_from_u64(4);
    let mut ctx = FitContext::new(&mut rng, None);
    let model = ivm(settings).fit(&Problem { x, y, n_classes: 2 }, &kernels, HyperPolicy::Learn, &mut ctx).unwrap();
    (model, ctx.trace())
}

fn trace_values(trace: &[crate::results::TracePoint], name: &str) -> Vec<f64> {
    trace.iter().filter(|t| t.name == name).map(|t| t.value).collect()
}

/// The major/minor schedule: each minor step lowers the criterion phi - log P with I and the
/// sites frozen (constant strategy), from a poor start the learning lowers the criterion from
/// the first major step to the last, moves the kernel and intercept, and the learned model
/// classifies held-out points; hybrid and exact run the same schedule.
#[test]
fn learning_lowers_the_criterion_across_major_and_minor_steps() {
    // Unbalanced classes (intercept matters) and a poor start (length-scale 6x too long).
    let (x0, y0) = blobs(120, 0.9, 41);
    let keep: Vec<usize> = (0..120).filter(|&i| y0[i] == 1 || i % 4 != 0).collect();
    let x = x0.select(Axis(0), &keep);
    let y: Vec<usize> = keep.iter().map(|&i| y0[i]).collect();
    let (xt, yt) = blobs(300, 0.9, 42);
    let kernel_yaml = "{ lengthscale: 6.0, variance: 0.5, learn_variance: true }";
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
}

/// Eq. 11 for the probit likelihood is the EP evidence of the active points at their stored
/// sites plus the predictive log-loss of the rest (notes §4.1 [DERIVED]), recomputed here by
/// dense Gaussian algebra independent of the stub representation: each site
/// t~_i(u) = s_i exp(b_i u - pi_i u^2 / 2) with s_i normalising cavity x site to the tilted
/// normaliser Z_i at the cavity of the final posterior,
///     log Z_EP = sum_I log s_i - log|I + Pi K_I| / 2 + b^T (K_I^{-1} + Pi)^{-1} b / 2,
///     log s_i  = log Z_i - log int N(u | m, v) exp(b u - pi u^2 / 2) du
///              = log Z_i + log(1 + pi v) / 2 - (m / v + b)^2 / (2 (1 / v + pi)) + m^2 / (2 v),
/// with (m, v) the cavity, (K_I^{-1} + Pi)^{-1} = K_I - K_I (Pi^{-1} + K_I)^{-1} K_I, and
///     log Q(D) = log Z_EP + sum_{j not in I} log Phi(y_j (h_j + bias) / sqrt(1 + a_j)).
/// Checked after every inclusion up to d = n on two kernels and three intercepts (the last far
/// from the data's balance, as learning drives it on USPS).
#[test]
fn probit_evidence_is_the_dense_ep_evidence_of_the_active_points_plus_the_predictive_log_loss() {
    let n = 18;
    let (x, y) = blobs(n, 0.4, 21);
    let t = signs(&y);
    for spec in &THREE_KERNELS[..2] {
        let kern = kernel(spec, 2);
        let k = kern.gram(&x);
        for bias in [0.0, -1.5, -12.0] {
            let lik = SiteLik::Probit { bias };
            let method = ivm(serde_json::json!({ "active_size": n }));
            let mut rng = Pcg64::seed_from_u64(4);
            let mut ctx = FitContext::new(&mut rng, None);
            let mut checked = 0;
            method
                .select(kern.as_ref(), &x, &t, lik, &mut ctx, |_, st, _| {
                    let (act, pi, b, d) = (&st.active, &st.pi, &st.b, st.d());
                    let (h, a) = dense_posterior(&k, act, pi, b);
                    let mut log_z_ep = 0.0;
                    for (r, &i) in act.iter().enumerate() {
                        // The cavity: the dense marginal with the site divided out.
                        let v = 1.0 / (1.0 / a[i] - pi[r]);
                        let m = v * (h[i] / a[i] - b[r]);
                        let log_z = log_normal_cdf(t[i] * (m + bias) / (1.0 + v).sqrt());
                        log_z_ep +=
                            log_z + 0.5 * (1.0 + pi[r] * v).ln() - (m / v + b[r]).powi(2) / (2.0 * (1.0 / v + pi[r])) + m * m / (2.0 * v);
                    }
                    let kd = Mat::from_fn(d, d, |r, c| k[(act[r], act[c])]);
                    let s = Mat::from_fn(d, d, |r, c| kd[(r, c)] + if r == c { 1.0 / pi[r] } else { 0.0 });
                    let chol = Chol::factor(s.as_ref(), "Pi^-1 + K_I").unwrap();
                    let kb: Vec<f64> = (0..d).map(|r| (0..d).map(|c| kd[(r, c)] * b[c]).sum()).collect();
                    let w = chol.solve_vec(&kb);
                    let quad = b.iter().zip(&kb).map(|(u, v)| u * v).sum::<f64>() - kb.iter().zip(&w).map(|(u, v)| u * v).sum::<f64>();
                    // |I + Pi K_I| = |Pi| |Pi^-1 + K_I|.
                    let logdet = chol.log_det() + pi.iter().map(|p| p.ln()).sum::<f64>();
                    log_z_ep += -0.5 * logdet + 0.5 * quad;
                    let rest: f64 =
                        (0..n).filter(|j| !act.contains(j)).map(|j| log_normal_cdf(t[j] * (h[j] + bias) / (1.0 + a[j]).sqrt())).sum();
                    close(&format!("{spec}, bias {bias}, log Q(D) at d = {d}"), st.log_evidence(lik, &t).unwrap(), log_z_ep + rest, 1e-9);
                    checked += 1;
                    Ok(())
                })
                .unwrap();
            assert_eq!(checked, n);
        }
    }
}

/// Three blobs in 2-D (centres on a circle of radius `r`), class i % 3.
fn three_blobs(n: usize, r: f64, seed: u64) -> (Array2<f64>, Vec<usize>) {
    let mut rng = Pcg64::seed_from_u64(seed);
    let y: Vec<usize> = (0..n).map(|i| i % 3).collect();
    let x = Array2::from_shape_fn((n, 2), |(i, k)| {
        let angle = 2.0 * std::f64::consts::PI * y[i] as f64 / 3.0;
        let e: f64 = StandardNormal.sample(&mut rng);
        r * if k == 0 { angle.cos() } else { angle.sin() } + 0.5 * e
    });
    (x, y)
}

/// c against the rest (§4.1) on three classes: task c is exactly the binary IVM fitted on the
/// problem "class c (y = +1) against the rest" (its Q_c(y = +1 | x), its active set, its learned
/// kernel and intercept, bit for bit, fixed and learned), the probabilities are
/// softmax_c log Q_c(y = +1 | x) so the label is the vote argmax_c log Q_c, the traces of the
/// C learning runs are kept apart by their `c<k>_` names, no evidence is claimed, and the three
/// separable blobs are classified.
#[test]
fn c_against_the_rest_is_the_vote_of_the_binary_tasks() {
    let (x, y) = three_blobs(90, 2.0, 61);
    let (xt, yt) = three_blobs(150, 2.0, 62);
    let kernels3 = serde_norway::from_str::<KernelParams>("{ lengthscale: 1.0, variance: 2.0 }").unwrap().kernel_set(2, 3).unwrap();
    let kernels2 = serde_norway::from_str::<KernelParams>("{ lengthscale: 1.0, variance: 2.0 }").unwrap().kernel_set(2, 2).unwrap();
    let method = ivm(serde_json::json!({ "active_size": 15, "outer_iters": 2, "inner_iters": 3 }));
    for hyper in [HyperPolicy::Fixed, HyperPolicy::Learn] {
        let mut rng = Pcg64::seed_from_u64(3);
        let mut ctx = FitContext::new(&mut rng, None);
        let multi = method.fit(&Problem { x: &x, y: &y, n_classes: 3 }, &kernels3, hyper, &mut ctx).unwrap();
        let trace = ctx.trace();
        drop(ctx);
        let p = multi.predict(&xt, &mut Pcg64::seed_from_u64(0)).unwrap();
        p.validate(xt.nrows()).unwrap();
        assert!(multi.evidence().is_none());
        let mut log_q = Array2::<f64>::zeros((xt.nrows(), 3));
        for c in 0..3 {
            let yc: Vec<usize> = y.iter().map(|&k| usize::from(k == c)).collect();
            let mut rng = Pcg64::seed_from_u64(3);
            let mut ctx = FitContext::new(&mut rng, None);
            let binary = method.fit(&Problem { x: &x, y: &yc, n_classes: 2 }, &kernels2, hyper, &mut ctx).unwrap();
            let q = binary.predict(&xt, &mut Pcg64::seed_from_u64(0)).unwrap();
            for j in 0..xt.nrows() {
                log_q[(j, c)] = q.probs[(j, 1)].ln();
            }
            // The task's own scores: the binary model's error and mean log predictive on the
            // problem "class c against the rest" of the test rows.
            let scores = multi.test_metrics(&p, &yt);
            let binary_errors = (0..xt.nrows()).filter(|&j| (q.probs[(j, 1)] > 0.5) != (yt[j] == c)).count();
            close(
                &format!("{hyper:?}: task {c} error"),
                scores[&format!("task{c}_error_pct")],
                100.0 * binary_errors as f64 / xt.nrows() as f64,
                1e-12,
            );
            let tlh = (0..xt.nrows()).map(|j| q.probs[(j, usize::from(yt[j] == c))].ln()).sum::<f64>() / xt.nrows() as f64;
            close(&format!("{hyper:?}: task {c} tlh"), scores[&format!("task{c}_log_pred_mean")], tlh, 1e-9);
            assert_eq!(multi.inducing_inputs()[c], binary.inducing_inputs()[0], "{hyper:?}: task {c}'s active set");
            let bits = |v: Vec<f64>| v.iter().map(|p| p.to_bits()).collect::<Vec<_>>();
            assert_eq!(
                bits(multi.kernels().class(c).log_params()),
                bits(binary.kernels().class(0).log_params()),
                "{hyper:?}: task {c}'s kernel"
            );
            if hyper == HyperPolicy::Learn {
                let bias = binary.diagnostics().numbers["bias"];
                assert_eq!(multi.diagnostics().numbers[&format!("c{c}_bias")].to_bits(), bias.to_bits());
                assert_eq!(trace_values(&trace, &format!("c{c}_bias")).last().copied(), Some(bias), "task {c}'s trace");
            }
        }
        let tagged = |name: &str| ["c0_", "c1_", "c2_"].iter().any(|tag| name.starts_with(tag));
        assert!(trace.iter().all(|t| tagged(&t.name)), "every trace name carries its task");
        assert_eq!(trace.is_empty(), hyper == HyperPolicy::Fixed);
        let mut errors = 0;
        for j in 0..xt.nrows() {
            let row: Vec<f64> = (0..3).map(|c| log_q[(j, c)]).collect();
            let lse = crate::linalg::log_sum_exp(&row);
            for c in 0..3 {
                close(&format!("{hyper:?}: p({c} | x_{j})"), p.probs[(j, c)], (row[c] - lse).exp(), 1e-12);
            }
            let vote = crate::linalg::argmax(&row);
            assert_eq!(crate::linalg::argmax(p.probs.row(j).as_slice().unwrap()), vote);
            errors += usize::from(vote != yt[j]);
        }
        assert!(errors <= 5, "{hyper:?}: {errors} errors of {}", xt.nrows());
    }
}

/// The four one-pixel translations of a 2 x 3 image, by hand: up, down, left, right, the
/// vacated row or column at the background value.
#[test]
fn virtual_vectors_translate_an_image_by_one_pixel_each_way() {
    let v = super::VirtualVectors { image: [2, 3], background: -1.0, active_size: 1 };
    let image = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
    let [up, down, left, right] = v.translations(&image);
    assert_eq!(up, [4.0, 5.0, 6.0, -1.0, -1.0, -1.0]);
    assert_eq!(down, [-1.0, -1.0, -1.0, 1.0, 2.0, 3.0]);
    assert_eq!(left, [2.0, 3.0, -1.0, 5.0, 6.0, -1.0]);
    assert_eq!(right, [-1.0, 1.0, 2.0, -1.0, 4.0, 5.0]);
    assert!(IvmParams::from_settings(&serde_json::json!({ "virtual_vectors": { "image": [0, 3], "background": 0.0, "active_size": 2 } }))
        .unwrap()
        .check()
        .unwrap_err()
        .contains("virtual_vectors.image"));
}

/// Virtual informative vectors (§6.5) are a second selection: the fit with `virtual_vectors`
/// equals (bit for bit) a fit at the first stage's hyper-parameters on the training set
/// augmented by the translations of the first stage's active images, with fixed and with
/// learned hyper-parameters (which the second stage does not relearn); an image shape that is
/// not the input width is a clear error.
#[test]
fn virtual_vectors_reselect_on_the_augmented_set_at_the_fitted_hyper_parameters() {
    // 3 x 3 images: class 1 a bright middle row, class 0 a bright middle column, plus noise.
    let mut rng = Pcg64::seed_from_u64(71);
    let n = 40;
    let y: Vec<usize> = (0..n).map(|i| i % 2).collect();
    let x = Array2::from_shape_fn((n, 9), |(i, p)| {
        let on = if y[i] == 1 { p / 3 == 1 } else { p % 3 == 1 };
        let e: f64 = StandardNormal.sample(&mut rng);
        (if on { 1.0 } else { -1.0 }) + 0.4 * e
    });
    let kernels = serde_norway::from_str::<KernelParams>("{ lengthscale: 2.5, variance: 2.0 }").unwrap().kernel_set(9, 2).unwrap();
    let virt = super::VirtualVectors { image: [3, 3], background: -1.0, active_size: 10 };
    let settings = |v: Option<&super::VirtualVectors>, d: usize| serde_json::json!({ "active_size": d, "outer_iters": 2, "inner_iters": 3, "hyper_prior": "none", "virtual_vectors": v });
    let run = |method: &Ivm, x: &Array2<f64>, y: &[usize], kernels: &KernelSet, hyper: HyperPolicy| {
        let mut rng = Pcg64::seed_from_u64(2);
        let mut ctx = FitContext::new(&mut rng, None);
        method.fit(&Problem { x, y, n_classes: 2 }, kernels, hyper, &mut ctx)
    };
    let bits = |m: &dyn Fitted, xs: &Array2<f64>| -> Vec<u64> {
        let mut v: Vec<u64> = m.predict(xs, &mut Pcg64::seed_from_u64(0)).unwrap().probs.iter().map(|p| p.to_bits()).collect();
        v.extend(m.inducing_inputs()[0].iter().map(|p| p.to_bits()));
        v.extend(m.evidence().map(|e| e.value.to_bits()));
        v
    };
    for hyper in [HyperPolicy::Fixed, HyperPolicy::Learn] {
        let with_virtual = run(&ivm(settings(Some(&virt), 6)), &x, &y, &kernels, hyper).unwrap();
        let first = run(&ivm(settings(None, 6)), &x, &y, &kernels, hyper).unwrap();
        // The first stage's active rows, found among the training rows.
        let active: Vec<usize> = first.inducing_inputs()[0].rows().into_iter().map(|r| (0..n).find(|&i| x.row(i) == r).unwrap()).collect();
        assert_eq!(active.len(), 6);
        let targets = signs(&y);
        let (x_aug, t_aug) = super::virtual_vectors::augment(&virt, &x, &targets, &active).unwrap();
        assert_eq!((x_aug.nrows(), t_aug.len()), (n + 24, n + 24));
        let y_aug: Vec<usize> = t_aug.iter().map(|&t| usize::from(t > 0.0)).collect();
        // The second stage at the first stage's kernel and intercept, fixed.
        let bias = first.diagnostics().numbers.get("bias").copied().unwrap_or(0.0);
        let fitted_kernels = first.kernels();
        let plain = ivm(serde_json::json!({ "active_size": 10, "bias": bias }));
        let second = run(&plain, &x_aug, &y_aug, &fitted_kernels, HyperPolicy::Fixed).unwrap();
        assert_eq!(bits(with_virtual.as_ref(), &x), bits(second.as_ref(), &x), "{hyper:?}");
        let d = with_virtual.diagnostics();
        assert_eq!((d.numbers["first_active_size"], d.numbers["virtual_added"], d.numbers["active_size"]), (6.0, 24.0, 10.0));
    }
    let wrong = super::VirtualVectors { image: [4, 4], ..virt };
    let e = run(&ivm(settings(Some(&wrong), 6)), &x, &y, &kernels, HyperPolicy::Fixed).err().unwrap().to_string();
    assert!(e.contains("virtual_vectors.image") && e.contains("9 features"), "{e}");
}

/// The memory-bounded schedule (notes §2.5). (a) With room for every row it is greedy
/// selection, bit for bit. (b) With a small bound the selection index shrinks after each
/// block to `schedule_size`'s size (never below B / d_final, the active points always kept,
/// deterministic in the seed and dependent on it), and the narrowed state is the same Q(u) as
/// the dense posterior of the active set restricted to its rows (h, a), with eq. 11 over J~
/// equal to a minor step's rebuild on those rows. (c) Learning on a narrowed selection runs,
/// its criterion over J~ agreeing between major and minor steps.
#[test]
fn the_memory_bounded_schedule_narrows_the_selection_index_and_keeps_the_posterior() {
    let (x, y) = blobs(120, 0.7, 81);
    let targets = signs(&y);
    let kern = kernel("{ lengthscale: 1.1, variance: 2.5 }", 2);
    let lik = SiteLik::Probit { bias: 0.2 };
    let select = |settings: serde_json::Value, seed: u64| {
        let mut rng = Pcg64::seed_from_u64(seed);
        let mut ctx = FitContext::new(&mut rng, None);
        ivm(settings).select(kern.as_ref(), &x, &targets, lik, &mut ctx, |_, _, _| Ok(())).unwrap().state
    };
    // (a) B large: no narrowing, the greedy selection.
    let greedy = select(serde_json::json!({ "active_size": 24 }), 1);
    let roomy = select(serde_json::json!({ "active_size": 24, "selection": "schedule", "block": 5, "memory_entries": 1_000_000 }), 1);
    assert!(roomy.rows.is_none());
    assert_eq!(
        (&roomy.active, roomy.pi.iter().map(|v| v.to_bits()).collect::<Vec<_>>()),
        (&greedy.active, greedy.pi.iter().map(|v| v.to_bits()).collect())
    );
    // (b) B = 1200 numbers, d = 24 in blocks of 5: |J~| must end at max(B / 24, ...) = 50.
    let tight = serde_json::json!({ "active_size": 24, "selection": "schedule", "block": 5, "memory_entries": 1200, "keep_best": 0.5 });
    let narrow = select(tight.clone(), 1);
    let rows = narrow.rows.clone().expect("narrowed");
    let (mut remaining, mut d) = (120 - 5, 5);
    let mut expected = 120;
    while d < 24 {
        let size = super::select::schedule_size(remaining, d, 5, 24, 1200);
        if size < remaining {
            expected = size + d;
            remaining = size;
        }
        remaining -= 5.min(24 - d);
        d += 5.min(24 - d);
    }
    assert_eq!((rows.len(), narrow.d()), (expected, 24));
    assert!(rows.len() >= 1200 / 24 && rows.windows(2).all(|w| w[0] < w[1]));
    let act = narrow.active_rows();
    assert!(act.iter().all(|r| rows.contains(r)));
    assert_eq!(narrow.rows, select(tight.clone(), 1).rows, "deterministic in the seed");
    assert!((2..6).any(|s| select(tight.clone(), s).rows != narrow.rows), "the random part comes from the seed");
    // The narrowed state is the dense posterior of its active set at its rows.
    let k = kern.gram(&x);
    let (h, a) = dense_posterior(&k, &act, &narrow.pi, &narrow.b);
    for (j, &r) in rows.iter().enumerate() {
        close(&format!("h at row {r}"), narrow.h[j], h[r], 1e-9);
        close(&format!("a at row {r}"), narrow.a[j], a[r], 1e-9);
    }
    // Eq. 11 over J~, incremental (major step) and rebuilt on those rows (minor step).
    let phi = -narrow.log_evidence(lik, &targets).unwrap();
    close("phi over J~", phi_grad(kern.as_ref(), &x, &targets, lik, &Sites::of(&narrow)).unwrap().phi, phi, 1e-10);
    // (c) Learning with the schedule.
    let kernels = serde_norway::from_str::<KernelParams>("{ lengthscale: 2.0, variance: 1.0 }").unwrap().kernel_set(2, 2).unwrap();
    let mut settings = tight;
    settings["outer_iters"] = 2.into();
    settings["inner_iters"] = 3.into();
    let mut rng = Pcg64::seed_from_u64(7);
    let mut ctx = FitContext::new(&mut rng, None);
    let model = ivm(settings).fit(&Problem { x: &x, y: &y, n_classes: 2 }, &kernels, HyperPolicy::Learn, &mut ctx).unwrap();
    let trace = ctx.trace();
    drop(ctx);
    let major = trace_values(&trace, "criterion");
    let minor = trace_values(&trace, "criterion_minor");
    assert_eq!((major.len(), minor.len()), (3, 2));
    assert!(
        minor[0] <= major[0] + 1e-9,
        "the minor step starts from the major step's criterion over J~ and lowers it: {major:?} {minor:?}"
    );
    assert_eq!(model.inducing_inputs()[0].nrows(), 24);
}
