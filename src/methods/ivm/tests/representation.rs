//! The representation, eq. 11 and the selection against dense algebra, the exact GP and quadrature.
use super::*;

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

/// The variance floor (notes P4): a point whose marginal variance the inclusions drive below
/// 1e-12 K_jj is held there, and counted. Nearly noise-free regression on a duplicated input:
/// including point 0 (its target the largest, so the most informative) leaves it and its
/// duplicate, point 1, a variance of about the noise 1e-14, below the floor; every other point
/// keeps the exact one-point posterior variance K_jj - K_j0^2 / (K_00 + s2).
#[test]
fn the_variance_floor_holds_points_driven_below_it_and_counts_them() {
    let xs = [0.0, 0.0, 1.5, -1.7, 3.1, -3.4];
    let x = Array2::from_shape_fn((6, 1), |(i, _)| xs[i]);
    let y = [5.0, 5.0, 0.1, -0.2, 0.3, 0.0];
    let kern = kernel("{ lengthscale: 1.0, variance: 1.7 }", 1);
    let s2 = 1e-14;
    let method = ivm(serde_json::json!({ "active_size": 1 }));
    let mut rng = Pcg64::seed_from_u64(3);
    let mut ctx = FitContext::new(&mut rng, None);
    let sel = method.select(kern.as_ref(), &x, &y, SiteLik::Gaussian { noise_var: s2 }, &mut ctx, |_, _, _| Ok(())).unwrap();
    let st = &sel.state;
    assert_eq!(st.active, vec![0]);
    let k = kern.gram(&x);
    let floor = 1e-12 * 1.7;
    assert_eq!((st.a[0], st.a[1]), (floor, floor), "the included point and its duplicate sit at the floor");
    assert_eq!(st.floor_hits, 2);
    for j in 2..6 {
        let exact = k[(j, j)] - k[(j, 0)] * k[(j, 0)] / (k[(0, 0)] + s2);
        assert!(exact > 1e-3, "point {j} is far from the floor");
        close(&format!("a[{j}]"), st.a[j], exact, 1e-12);
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

/// The probit predictive of a fitted IVM (notes §2.2, §3.2): Q(y_* = +1) = Phi((mu_* + bias) /
/// sqrt(1 + sigma_*^2)), Q(y_* = -1) its complement. With d = n every site is kept, so Q(u) is
/// the GP posterior under Gaussian pseudo-observations b_i / pi_i with noise variances 1 / pi_i:
/// mu_* = k_*^T (K + Pi^{-1})^{-1} Pi^{-1} b and sigma_*^2 = k_** - k_*^T (K + Pi^{-1})^{-1} k_*,
/// computed here by dense algebra from the fitted sites. The intercept is away from 0 and the
/// kernel variance away from 1, so a dropped intercept, a wrong sign of it, or sqrt(sigma^2)
/// or sqrt(2 + sigma^2) in place of sqrt(1 + sigma^2) moves every probability.
#[test]
fn probit_predictive_with_all_points_active_is_phi_of_the_dense_posterior() {
    let n = 16;
    let (x, y) = blobs(n, 0.5, 12);
    let targets = signs(&y);
    let xt = Array2::from_shape_fn((9, 2), |(i, k)| ((i * (k + 2)) as f64 * 0.53).sin() * 1.6);
    let kernel_yaml = "{ lengthscale: 0.9, variance: 2.5 }";
    let kern = kernel(kernel_yaml, 2);
    let kernels = serde_norway::from_str::<KernelParams>(kernel_yaml).unwrap().kernel_set(2, 2).unwrap();
    let bias = 0.45;
    let method = ivm(serde_json::json!({ "active_size": n, "bias": bias }));
    let mut rng = Pcg64::seed_from_u64(6);
    let mut ctx = FitContext::new(&mut rng, None);
    let fitted = method.fit(&Problem { x: &x, y: &y, n_classes: 2 }, &kernels, HyperPolicy::Fixed, &mut ctx).unwrap();
    drop(ctx);
    let probs = fitted.predict(&xt, &mut Pcg64::seed_from_u64(0)).unwrap().probs;
    // The sites of that fit: greedy selection at a fixed kernel draws nothing, so selecting
    // again gives the same active set, checked against the fitted model's active rows.
    let mut rng = Pcg64::seed_from_u64(6);
    let mut ctx = FitContext::new(&mut rng, None);
    let sel = method.select(kern.as_ref(), &x, &targets, SiteLik::Probit { bias }, &mut ctx, |_, _, _| Ok(())).unwrap();
    let st = &sel.state;
    assert_eq!(st.d(), n, "every point active");
    assert_eq!(fitted.inducing_inputs()[0], x.select(Axis(0), &st.active_rows()));
    // Dense GP algebra in the training order: (K + Pi^{-1}) by Cholesky, pseudo-targets b / pi.
    let mut pi = vec![0.0; n];
    let mut b = vec![0.0; n];
    for (r, &i) in st.active.iter().enumerate() {
        (pi[i], b[i]) = (st.pi[r], st.b[r]);
    }
    let k = kern.gram(&x);
    let kn = Mat::from_fn(n, n, |i, j| k[(i, j)] + if i == j { 1.0 / pi[i] } else { 0.0 });
    let chol = Chol::factor(kn.as_ref(), "K + Pi^-1").unwrap();
    let w = chol.solve_vec(&(0..n).map(|i| b[i] / pi[i]).collect::<Vec<_>>());
    let ks = kern.cross(&x, &xt);
    let kss = kern.diag(&xt);
    let mut spread = (f64::INFINITY, f64::NEG_INFINITY);
    for j in 0..xt.nrows() {
        let kj: Vec<f64> = (0..n).map(|i| ks[(i, j)]).collect();
        let mean: f64 = kj.iter().zip(&w).map(|(a, b)| a * b).sum();
        let var = kss[j] - kj.iter().zip(&chol.solve_vec(&kj)).map(|(a, b)| a * b).sum::<f64>();
        let z = (mean + bias) / (1.0 + var).sqrt();
        close(&format!("Q(y = +1) at test row {j}"), probs[(j, 1)], crate::special::normal_cdf(z), 1e-10);
        close(&format!("Q(y = -1) at test row {j}"), probs[(j, 0)], crate::special::normal_cdf(-z), 1e-10);
        spread = (spread.0.min(var), spread.1.max(var));
    }
    // The test rows reach from the data (small variance) to far from it (near the prior's).
    assert!(spread.0 < 0.5 && spread.1 > 1.5, "predictive variances {spread:?}");
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
/// 5's Delta), not Algorithm 1's printed argmax Delta; the gain equals eq. 5 written out and
/// the differential-entropy score its closed form, at prior variances other than 1.
#[test]
fn selection_picks_the_most_informative_point() {
    // Three candidates with unequal prior variances (none 1, so a dropped variance factor
    // shows) and no correlation (their marginals are what the criterion sees): probit targets
    // +1, +1, -1 with the current mean far on the right side, far on the wrong side, and at zero.
    let mut st = IvmState::prior(vec![1.5, 0.7, 2.5]);
    st.h = vec![3.0, -2.0, 0.0];
    let targets = [1.0, 1.0, -1.0];
    let lik = SiteLik::Probit { bias: 0.0 };
    let mut entropy_drops = Vec::new();
    let deltas: Vec<f64> = (0..3)
        .map(|j| {
            let (h, a, y) = (st.h[j], st.a[j], targets[j]);
            // Eq. 5: Delta = -(log m + 1/m + (h' - h)^2 / a - 1) / 2, m = 1 + a pi'.
            let mo = st.moments(lik, &targets, j);
            let (pi, _) = mo.site(h, a).unwrap();
            let mj = 1.0 + a * pi;
            let shift = mo.tilted_mean(h, a) - h;
            let delta = -0.5 * (mj.ln() + 1.0 / mj + shift * shift / a - 1.0);
            close(&format!("gain {j} = -Delta"), gain(&mo, h, a, Criterion::InfoGain, 0.0).unwrap(), -delta, 1e-12);
            // The differential-entropy score H[Q(u_j)] - H[Q'(u_j)] = -log(1 - a nu) / 2 (notes
            // §2.4), with the probit's nu = H(z) (H(z) + z) / (1 + a), z = y h / sqrt(1 + a),
            // H = N / Phi (§3.2), written out here.
            let z = y * h / (1.0 + a).sqrt();
            let hazard = (-0.5 * z * z - crate::special::LN_SQRT_2PI - log_normal_cdf(z)).exp();
            let nu = hazard * (hazard + z) / (1.0 + a);
            let drop = -0.5 * (1.0 - a * nu).ln();
            close(&format!("entropy score {j}"), gain(&mo, h, a, Criterion::Entropy, 0.0).unwrap(), drop, 1e-12);
            entropy_drops.push(drop);
            delta
        })
        .collect();
    let argmin = (0..3).min_by(|&i, &j| deltas[i].total_cmp(&deltas[j])).unwrap();
    let argmax = (0..3).max_by(|&i, &j| deltas[i].total_cmp(&deltas[j])).unwrap();
    assert_eq!(argmin, 1, "the misclassified point is the most informative: {deltas:?}");
    assert_eq!(argmax, 0, "the printed argmax would take the confidently right point: {deltas:?}");
    let choice = best_candidate(&st, lik, &targets, &[0, 1, 2], Criterion::InfoGain, 1e-8).unwrap();
    assert_eq!(choice.index, 1);
    // The entropy score ignores the mean shift: the widest marginal at the boundary (point 2,
    // a = 2.5) shrinks most, ahead of the misclassified point 1 (a = 0.7).
    let widest = (0..3).max_by(|&i, &j| entropy_drops[i].total_cmp(&entropy_drops[j])).unwrap();
    assert_eq!(widest, 2, "{entropy_drops:?}");
    assert_eq!(best_candidate(&st, lik, &targets, &[0, 1, 2], Criterion::Entropy, 1e-8).unwrap().index, 2);
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

/// The memory-bounded schedule (notes §2.5). (a) With room for every row it is greedy
/// selection, bit for bit. (b) With a small bound the selection index shrinks after each
/// block to the size of notes §2.5's rule worked out by hand (never below B / d_final, the
/// active points always kept, the best-scoring half of each narrowed index among the kept by
/// the information gain's closed form, deterministic in the seed and dependent on it), and the
/// narrowed state is the same Q(u) as
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
    // (b) B = 1200 numbers, d = 24 in blocks of 5. Notes §2.5's rule, after each block:
    // m' = max(floor(B / d_final), min(|J \ I|, floor(B / (|I| + k)))), J narrowed to m' when
    // m' < |J \ I|. By hand, floor(B / d_final) = 1200 / 24 = 50 and:
    //   d = 5:  |J \ I| = 115, m' = max(50, min(115, 1200 / 10 = 120)) = 115, kept whole;
    //   d = 10: |J \ I| = 110, m' = max(50, min(110, 1200 / 15 = 80)) = 80;
    //   d = 15: |J \ I| = 80 - 5 = 75, m' = max(50, min(75, 1200 / 20 = 60)) = 60;
    //   d = 20: |J \ I| = 60 - 5 = 55, m' = max(50, min(55, 1200 / 25 = 48)) = 50;
    // the last 4 inclusions come from those 50, so J~ ends with 50 + 20 = 70 rows.
    let tight = serde_json::json!({ "active_size": 24, "selection": "schedule", "block": 5, "memory_entries": 1200, "keep_best": 0.5 });
    let narrow = select(tight.clone(), 1);
    let rows = narrow.rows.clone().expect("narrowed");
    assert_eq!((rows.len(), narrow.d()), (70, 24));
    // Each narrowing keeps the fraction rho = 0.5 of m' with the largest information gains
    // under the state before it (the rest drawn from the others). The gains here are the
    // notes' closed form (§2.4, §3.2) on the dense posterior of that state's active set:
    //   KL_j = (a alpha^2 - a nu - log(1 - a nu)) / 2,  s = sqrt(1 + a),  z = y (h + bias) / s,
    //   alpha = y H(z) / s,  nu = H(z) (H(z) + z) / s^2,  H = N / Phi.
    let mut states: Vec<IvmState> = Vec::new();
    let mut rng = Pcg64::seed_from_u64(1);
    let mut ctx = FitContext::new(&mut rng, None);
    ivm(tight.clone())
        .select(kern.as_ref(), &x, &targets, lik, &mut ctx, |_, st, _| {
            states.push(st.clone());
            Ok(())
        })
        .unwrap();
    let k = kern.gram(&x);
    let bias = 0.2;
    for (d, non_active, size) in [(10, 110, 80), (15, 75, 60), (20, 55, 50)] {
        // states[d - 1] is the state after inclusion d, before the narrowing; states[d] after it.
        let (before, after) = (&states[d - 1], &states[d]);
        let before_active = before.active_rows();
        let candidates: Vec<usize> =
            before.rows.clone().unwrap_or_else(|| (0..120).collect()).into_iter().filter(|r| !before_active.contains(r)).collect();
        let kept: Vec<usize> = after.rows.clone().expect("narrowed").into_iter().filter(|r| !before_active.contains(r)).collect();
        assert_eq!((candidates.len(), kept.len()), (non_active, size), "at d = {d}");
        let (h, a) = dense_posterior(&k, &before_active, &before.pi, &before.b);
        let mut gains: Vec<(usize, f64)> = candidates
            .iter()
            .map(|&r| {
                let (t, s) = (targets[r], (1.0 + a[r]).sqrt());
                let z = t * (h[r] + bias) / s;
                let hazard = (-0.5 * z * z - crate::special::LN_SQRT_2PI - log_normal_cdf(z)).exp();
                let (alpha, nu) = (t * hazard / s, hazard * (hazard + z) / (s * s));
                (r, 0.5 * (a[r] * alpha * alpha - a[r] * nu - (-a[r] * nu).ln_1p()))
            })
            .collect();
        gains.sort_by(|p, q| q.1.total_cmp(&p.1));
        let best = size / 2;
        assert!(gains[best - 1].1 - gains[best].1 > 1e-9, "at d = {d}: a near tie at the cut makes the check moot");
        for &(r, g) in &gains[..best] {
            assert!(kept.contains(&r), "at d = {d}: row {r} (gain {g}) is among the {best} largest gains but was not kept");
        }
        // The other half is drawn, not the next best.
        assert!(gains[best..size].iter().any(|(r, _)| !kept.contains(r)), "at d = {d}: the kept rows are the {size} best");
    }
    assert!(rows.len() >= 1200 / 24 && rows.windows(2).all(|w| w[0] < w[1]));
    let act = narrow.active_rows();
    assert!(act.iter().all(|r| rows.contains(r)));
    assert_eq!(narrow.rows, select(tight.clone(), 1).rows, "deterministic in the seed");
    assert!((2..6).any(|s| select(tight.clone(), s).rows != narrow.rows), "the random part comes from the seed");
    // The narrowed state is the dense posterior of its active set at its rows.
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

/// `selection: randomized` (§3.2): at each inclusion a fresh uniform subset of `candidates`
/// non-active points is drawn from the fit's generator, and the point included is the one of
/// largest eq. 5 gain within that subset, not over all points. The subsets are replayed from a
/// copy of the generator; the gains are computed from the state before each inclusion.
#[test]
fn randomized_selection_includes_the_best_point_of_each_drawn_subset() {
    let (x, y) = blobs(60, 0.8, 17);
    let targets = signs(&y);
    let kern = kernel("{ lengthscale: 0.9, variance: 2.0 }", 2);
    let lik = SiteLik::Probit { bias: 0.1 };
    let (d, size) = (15, 6);
    let method = ivm(serde_json::json!({ "active_size": d, "selection": "randomized", "candidates": size }));
    let mut rng = Pcg64::seed_from_u64(23);
    let mut replica = rng.clone();
    let mut before = vec![IvmState::prior(kern.diag(&x))];
    let mut ctx = FitContext::new(&mut rng, None);
    let sel = method
        .select(kern.as_ref(), &x, &targets, lik, &mut ctx, |_, st, _| {
            before.push(st.clone());
            Ok(())
        })
        .unwrap();
    assert_eq!(sel.state.d(), d);
    let min_pi = |st: &IvmState, j: usize| method.params.min_site_precision / st.kdiag[j];
    let score = |st: &IvmState, j: usize| gain(&st.moments(lik, &targets, j), st.h[j], st.a[j], Criterion::InfoGain, min_pi(st, j));
    let mut remaining: Vec<usize> = (0..x.nrows()).collect();
    let mut not_the_greedy_choice = 0;
    for k in 0..d {
        let st = &before[k];
        let subset: Vec<usize> = rand::seq::index::sample(&mut replica, remaining.len(), size).into_iter().map(|p| remaining[p]).collect();
        let best_of = |points: &[usize]| {
            points.iter().copied().filter_map(|j| score(st, j).map(|g| (j, g))).fold(None, |b: Option<(usize, f64)>, (j, g)| match b {
                Some((bj, bg)) if bg > g || (bg == g && bj < j) => Some((bj, bg)),
                _ => Some((j, g)),
            })
        };
        let included = sel.state.active[k];
        assert_eq!(before[k + 1].active[k], included, "inclusion {k} is the k-th active point");
        assert_eq!(Some(included), best_of(&subset).map(|b| b.0), "inclusion {k}: the best of the drawn subset {subset:?}");
        if Some(included) != best_of(&remaining).map(|b| b.0) {
            not_the_greedy_choice += 1;
        }
        remaining.retain(|&j| j != included);
    }
    // With 6 of 45-60 points scored, most inclusions are not the full greedy choice.
    assert!(not_the_greedy_choice >= d / 2, "only {not_the_greedy_choice} of {d} inclusions differ from greedy");
}
