//! The variational fit at a fixed kernel: monotone, stationary and equal to the dense bound; its steps (Newton direction, V from W, the V-space mix, the line-search slopes) against dense algebra and finite differences.
use super::*;

#[test]
fn an_unreachable_b_tol_stops_at_the_floor_with_the_same_optimum() {
    // b - g-bar cannot reach 1e-30 in floating point: the fit must stop once the bound has
    // been flat for FLAT_SWEEPS_AT_FLOOR sweeps, at the optimum the normal b_tol finds.
    let (x, y) = toy(25, 3, 5);
    let kern = SqExp { log_variance: 2.5, log_lengthscales: vec![0.3], learn_variance: true };
    let pr = Prior::new(kern.gram(&x), eye(3), &y).unwrap();
    let normal = fit_variational(&pr, &KlmnlParams::default(), None, None).unwrap();
    let params = KlmnlParams { b_tol: 1e-30, max_sweeps: 400, ..KlmnlParams::default() };
    let floor = fit_variational(&pr, &params, None, None).unwrap();
    assert!(floor.stats.converged && floor.stats.stopped_at_floor, "{:?}", floor.stats);
    assert!(
        floor.stats.sweeps <= normal.stats.sweeps + FLAT_SWEEPS_AT_FLOOR + 1,
        "{} vs {} sweeps",
        floor.stats.sweeps,
        normal.stats.sweeps
    );
    assert!((floor.log_zh - normal.log_zh).abs() < 1e-9 * normal.log_zh.abs(), "{} vs {}", floor.log_zh, normal.log_zh);
}

#[test]
fn strongly_correlated_data_converge_in_few_sweeps() {
    // A long length-scale couples the 40 latent vectors strongly. Alternating exact S- and
    // V-steps contract slowly here (the S-V coupling through log|S_i V_i| - tr(S_i V_i));
    // the V-step that re-optimises S at the proposed V does not.
    let (x, y) = toy(40, 3, 11);
    let kern = SqExp { log_variance: 0.5, log_lengthscales: vec![1.5], learn_variance: true };
    let pr = Prior::new(kern.gram(&x), eye(3), &y).unwrap();
    let fit = fit_variational(&pr, &KlmnlParams::default(), None, None).unwrap();
    assert!(fit.stats.converged && fit.stats.max_b_minus_gbar < 1e-8, "{:?}", fit.stats);
    assert!(fit.stats.sweeps <= 25, "{} sweeps", fit.stats.sweeps);
}

#[test]
fn full_fit_is_monotone_stationary_and_matches_the_dense_bound() {
    let (x, y) = toy(8, 3, 5);
    let kern = SqExp { log_variance: 0.3, log_lengthscales: vec![0.0], learn_variance: true };
    let pr = Prior::new(kern.gram(&x), eye(3), &y).unwrap();
    let fit = fit_variational(&pr, &KlmnlParams::default(), None, None).unwrap();
    assert!(fit.stats.converged, "{:?}", fit.stats);
    for w in fit.stats.bound_trace.windows(2) {
        assert!(w[1] >= w[0] - 1e-10 * w[0].abs(), "bound fell: {:?}", fit.stats.bound_trace);
    }
    assert!(fit.stats.max_b_minus_gbar < 1e-8);
    let alpha = fit.alpha(&pr);
    for i in 0..8 {
        assert!(alpha[i * 3..i * 3 + 3].iter().sum::<f64>().abs() < 1e-8);
    }
    // log Z_h >= n Theorem 10 (sigma^2 = e^0.3 per latent)
    assert!(fit.log_zh >= 8.0 * theorem10_per_datum(3, 0.3f64.exp()));
    // independent dense evaluation at the same (m, V, b, S)
    let t = fit.t_dense();
    let v = &pr.k - &pr.k * &t * &pr.k;
    let d = dense_bound(&pr.k, &fit.m, &v, &fit.st.b, &fit.st.s, &pr.y1, 3);
    assert!((d - fit.log_zh).abs() < 1e-7, "dense {d} vs {}", fit.log_zh);
    // stationarity in m of the dense bound (V, b, S fixed): central differences vanish
    let mut r = rng(3);
    for _ in 0..3 {
        let dir: Vec<f64> = (0..24).map(|_| r.sample::<f64, _>(StandardNormal)).collect();
        let e = 1e-5;
        let mp: Vec<f64> = fit.m.iter().zip(&dir).map(|(a, b)| a + e * b).collect();
        let mm: Vec<f64> = fit.m.iter().zip(&dir).map(|(a, b)| a - e * b).collect();
        let g = (dense_bound(&pr.k, &mp, &v, &fit.st.b, &fit.st.s, &pr.y1, 3)
            - dense_bound(&pr.k, &mm, &v, &fit.st.b, &fit.st.s, &pr.y1, 3))
            / (2.0 * e);
        assert!(g.abs() < 1e-5, "directional derivative in m {g}");
    }
    // and V is optimal: a small symmetric perturbation of V (kept PD) does not raise the bound
    for _ in 0..3 {
        let p = random_spd(24, &mut r, 1.0);
        for sign in [-1.0, 1.0] {
            let vp = &v + &p * faer::Scale(sign * 1e-4);
            let dp = dense_bound(&pr.k, &fit.m, &vp, &fit.st.b, &fit.st.s, &pr.y1, 3);
            assert!(dp <= d + 1e-9, "V perturbation raised the bound: {dp} > {d}");
        }
    }
}

#[test]
fn a_non_diagonal_kc_fit_matches_the_dense_bound_in_the_class_basis() {
    // The state's S_i and V_i live in K^c's eigenbasis; rotated back, they must give the
    // fit's bound in the dense class-basis oracle.
    let (x, y) = toy(8, 3, 5);
    let kern = SqExp { log_variance: 0.3, log_lengthscales: vec![0.0], learn_variance: true };
    let pr = Prior::new(kern.gram(&x), rotated_kc(&[0.4, 1.0, 1.6], 2), &y).unwrap();
    assert!(pr.kc_u.is_some());
    let fit = fit_variational(&pr, &KlmnlParams::default(), None, None).unwrap();
    assert!(fit.stats.converged && !fit.stats.stopped_at_floor, "{:?}", fit.stats);
    for w in fit.stats.bound_trace.windows(2) {
        assert!(w[1] >= w[0] - 1e-10 * w[0].abs(), "bound fell: {:?}", fit.stats.bound_trace);
    }
    let v = &pr.k - &pr.k * &fit.t_dense() * &pr.k;
    let s_class: Vec<Mat<f64>> = fit.st.s.iter().map(|s| pr.basis().to_class(s)).collect();
    let d = dense_bound(&pr.k, &fit.m, &v, &fit.st.b, &s_class, &pr.y1, 3);
    assert!((d - fit.log_zh).abs() < 1e-7, "dense {d} vs {}", fit.log_zh);
    // tr(T K), which v_from_w takes from the blocks of L_B^{-1} it recovers from q
    let w = current_w(&pr, &fit.st).unwrap();
    let ve = v_from_w(&pr, &w).unwrap();
    let tk = trace_prod(ve.t.dense().as_ref(), pr.k.as_ref());
    assert!((ve.tr_tk - tk).abs() < 1e-10 * tk.abs().max(1.0), "{} vs {tk}", ve.tr_tk);
    for i in 0..8 {
        let vi = Mat::from_fn(3, 3, |p, q| v[(i * 3 + p, i * 3 + q)]);
        assert!((pr.basis().to_class(&fit.st.v.blocks[i]) - vi).norm_max() < 1e-10);
    }
}

#[test]
fn the_softmax_hessian_factor_reproduces_diag_g_minus_g_g_t() {
    for g in [
        vec![0.7, 0.3],
        vec![0.2, 0.5, 0.3],
        vec![1e-12, 0.25, 0.5, 0.25 - 1e-12],
        vec![0.0, 0.1, 0.0, 0.6, 0.3],
        vec![0.999999, 1e-6, 0.0],
    ] {
        let c = g.len();
        let f = softmax_hessian_factor(&g);
        assert_eq!((f.nrows(), f.ncols()), (c, c - 1));
        let d = Mat::from_fn(c, c, |i, j| if i == j { g[i] } else { 0.0 } - g[i] * g[j]);
        assert!((&f * f.transpose() - &d).norm_max() < 1e-15, "g = {g:?}");
    }
}

#[test]
fn the_newton_direction_solves_the_dense_system() {
    // d = -(I + D P)^{-1} (b - g-bar), P = K + blockdiag(S_i^{-1}), D_i = diag(g) - g g^T,
    // by a dense LU solve; the reduced Woodbury form must agree, for an identity and a
    // rotated K^c, at the E.3 start and after one S sweep.
    let (x, y) = toy(9, 3, 4);
    let kern = SqExp { log_variance: 0.7, log_lengthscales: vec![0.2], learn_variance: true };
    for kc in [eye(3), rotated_kc(&[0.3, 1.0, 1.7], 5)] {
        let pr = Prior::new(kern.gram(&x), kc, &y).unwrap();
        let mut st = init_state(&pr, &default_w(pr.n, 3, 1.0), 1.0).unwrap();
        let m = m_of(&pr, &st.b);
        for sweep in 0..2 {
            if sweep == 1 {
                s_steps(&pr, &mut st, &m, &mut FitStats::default()).unwrap();
            }
            let (_, terms) = bound(&pr, &st, &m).unwrap();
            let d = newton_direction(&pr, &st.b, &terms).unwrap();
            let nc = pr.n * 3;
            let mut p = pr.k.clone();
            let mut dm = Mat::<f64>::zeros(nc, nc);
            for (i, t) in terms.iter().enumerate() {
                for a in 0..3 {
                    for bb in 0..3 {
                        p[(i * 3 + a, i * 3 + bb)] += t.s_inv[(a, bb)];
                        dm[(i * 3 + a, i * 3 + bb)] = if a == bb { t.gbar[a] } else { 0.0 } - t.gbar[a] * t.gbar[bb];
                    }
                }
            }
            let x_mat = Mat::<f64>::identity(nc, nc) + &dm * &p;
            let r = Mat::from_fn(nc, 1, |k, _| -(st.b[k] - terms[k / 3].gbar[k % 3]));
            let dense = x_mat.partial_piv_lu().solve(&r);
            let scale = (0..nc).map(|k| dense[(k, 0)].abs()).fold(0.0, f64::max);
            for k in 0..nc {
                assert!((d[k] - dense[(k, 0)]).abs() < 1e-10 * scale.max(1.0), "entry {k}: {} vs {}", d[k], dense[(k, 0)]);
            }
        }
    }
}

#[test]
fn a_nearly_singular_kc_converges_cleanly_and_its_bound_is_continuous_at_the_singular_limit() {
    // With K^c's smallest eigenvalue at 1e-12 and sigma^2 = e^2.5, V_i and S_i are
    // ill-conditioned by ~1e13. Held in the class basis, their rounding put ~1e-4 nats of
    // noise on every per-datum h, so V proposals were rejected at random and the sweeps ran
    // into the flat-bound floor (or failed to factor). As lam_min -> 0 the optimised bound
    // has a limit: fits at 1e-10, 1e-13 and 0 (floored at KC_EIG_FLOOR) must agree to well
    // below that noise.
    let (x, y) = toy(30, 3, 7);
    let kern = SqExp { log_variance: 2.5, log_lengthscales: vec![0.5], learn_variance: true };
    let params = KlmnlParams::default();
    let fit_at = |lam_min: f64| {
        let pr = Prior::new(kern.gram(&x), rotated_kc(&[lam_min, 1.0, 2.0 - lam_min], 11), &y).unwrap();
        fit_variational(&pr, &params, None, None).unwrap()
    };
    let (a, b, z) = (fit_at(1e-10), fit_at(1e-13), fit_at(0.0));
    for f in [&a, &b, &z] {
        assert!(f.stats.converged && !f.stats.stopped_at_floor, "{:?}", f.stats);
        assert!(f.stats.max_b_minus_gbar < params.b_tol, "{:?}", f.stats);
    }
    assert!((a.log_zh - b.log_zh).abs() < 1e-7, "{} vs {}", a.log_zh, b.log_zh);
    assert!((z.log_zh - b.log_zh).abs() < 1e-7, "{} vs {}", z.log_zh, b.log_zh);
    let pr = Prior::new(kern.gram(&x), rotated_kc(&[0.0, 1.0, 2.0], 11), &y).unwrap();
    let (lam, _) = eigh(&pr.kc).unwrap();
    assert!(pr.kc_lam[0] == KC_EIG_FLOOR * pr.kc_lam[2] && lam[0] > 0.5 * pr.kc_lam[0], "{:?} {lam:?}", pr.kc_lam);
}

#[test]
fn v_mix_step_stops_where_the_dense_bound_is_stationary_along_the_mix() {
    let (x, y) = toy(8, 3, 5);
    let kern = SqExp { log_variance: 1.0, log_lengthscales: vec![0.0], learn_variance: true };
    let pr = Prior::new(kern.gram(&x), eye(3), &y).unwrap();
    let mut st = init_state(&pr, &default_w(8, 3, 1.0), 0.5).unwrap();
    let m = m_of(&pr, &st.b);
    let mut stats = FitStats::default();
    s_steps(&pr, &mut st, &m, &mut stats).unwrap();
    let (cur, _) = bound(&pr, &st, &m).unwrap();
    let w = current_w(&pr, &st).unwrap();
    let dense_v = |t: &Mat<f64>| &pr.k - &pr.k * t * &pr.k;
    let v_old = dense_v(&st.v.t.dense());
    let v_new = dense_v(&v_from_w(&pr, &w).unwrap().t.dense());
    let (b, s) = (st.b.clone(), st.s.clone());
    let along = |eta: f64| dense_bound(&pr.k, &m, &(&v_old * faer::Scale(1.0 - eta) + &v_new * faer::Scale(eta)), &b, &s, &pr.y1, 3);
    // The cheap slope at eta = 0 (blocks only) is the dense bound's.
    let slope0 = mix_slope_at_zero(&pr, &st, &v_from_w(&pr, &w).unwrap()).unwrap();
    let h = 1e-6;
    let fd0 = (along(h) - along(0.0)) / h;
    assert!((slope0 - fd0).abs() < 1e-4 * fd0.abs(), "slope at 0: {slope0} vs finite difference {fd0}");
    let (val, eta) = v_mix_step(&pr, &mut st, &m, cur, w, &mut None, &mut stats).unwrap();
    assert!(eta > 0.01 && eta < 0.99, "this start must give an interior step, got eta = {eta}");
    assert!(val > cur, "the step must raise the bound: {cur} -> {val}");
    // The new state is the mix at eta, and its log-determinant (from the pencil) and trace
    // terms agree with a dense evaluation with explicit inverses.
    assert!((along(eta) - val).abs() < 1e-8, "dense {} vs {val}", along(eta));
    let vs = dense_v(&st.v.t.dense());
    let vm = &v_old * faer::Scale(1.0 - eta) + &v_new * faer::Scale(eta);
    assert!((&vs - &vm).norm_max() < 1e-10);
    // False position stops where the derivative along the mix vanishes.
    let h = 1e-4;
    let slope = (along(eta + h) - along(eta - h)) / (2.0 * h);
    let scale = (along(0.99) - along(0.01)).abs() / 0.98;
    assert!(slope.abs() < 1e-6 * scale.max(1.0), "slope {slope} at eta {eta} (secant slope {scale})");
    // A second mix from this mixed state, whose L_K^T T L_K is carried rather than
    // recomputed: again the mix at its eta, with the dense bound's value.
    s_steps(&pr, &mut st, &m, &mut stats).unwrap();
    let (cur, _) = bound(&pr, &st, &m).unwrap();
    let w = current_w(&pr, &st).unwrap();
    let v_old = dense_v(&st.v.t.dense());
    let v_new = dense_v(&v_from_w(&pr, &w).unwrap().t.dense());
    let (b, s) = (st.b.clone(), st.s.clone());
    let (val, eta) = v_mix_step(&pr, &mut st, &m, cur, w, &mut None, &mut stats).unwrap();
    assert!(eta > 0.01 && val > cur, "the second mix must move: eta = {eta}, {cur} -> {val}");
    let vm = &v_old * faer::Scale(1.0 - eta) + &v_new * faer::Scale(eta);
    let dense = dense_bound(&pr.k, &m, &vm, &b, &s, &pr.y1, 3);
    assert!((dense - val).abs() < 1e-8, "second mix: dense {dense} vs {val}");
    assert!((&dense_v(&st.v.t.dense()) - &vm).norm_max() < 1e-10);
}

/// With a duplicated input K is singular and its Cholesky factor would need jitter: L_K L_K^T =
/// K + jI puts an error of about -j tr(W) on the mix's log |K^{-1} V^cc|, more than the accept
/// test's tolerance near convergence. The mix is then not taken and the state stays as it was;
/// the same start without the duplicate takes an interior step (as in the test above).
#[test]
fn v_mix_step_is_not_taken_where_k_needs_jitter() {
    let (mut x, mut y) = toy(8, 3, 5);
    let kern = SqExp { log_variance: 1.0, log_lengthscales: vec![0.0], learn_variance: true };
    let mix_from_start = |x: &Array2<f64>, y: &[usize]| {
        let pr = Prior::new(kern.gram(x), eye(3), y).unwrap();
        let mut st = init_state(&pr, &default_w(y.len(), 3, 1.0), 0.5).unwrap();
        let m = m_of(&pr, &st.b);
        let mut stats = FitStats::default();
        s_steps(&pr, &mut st, &m, &mut stats).unwrap();
        let (cur, _) = bound(&pr, &st, &m).unwrap();
        let w = current_w(&pr, &st).unwrap();
        let before = st.v.t.dense();
        let (val, eta) = v_mix_step(&pr, &mut st, &m, cur, w, &mut None, &mut stats).unwrap();
        (cur, val, eta, (&st.v.t.dense() - &before).norm_max(), pr.k.clone())
    };
    let (cur, val, eta, _, _) = mix_from_start(&x, &y);
    assert!(eta > 0.01 && val > cur, "without the duplicate the mix moves: eta = {eta}");
    let row6 = x.row(6).to_owned();
    x.row_mut(7).assign(&row6);
    y[7] = y[6];
    let (cur, val, eta, moved, k) = mix_from_start(&x, &y);
    assert!(Chol::factor(k.as_ref(), "K").is_err() && Chol::factor_with_jitter(k.as_ref(), "K").unwrap().jitter() > 0.0);
    assert!(eta == 0.0 && val == cur && moved == 0.0, "eta {eta}, {cur} -> {val}, state moved by {moved}");
}

#[test]
fn a_fit_warm_started_from_a_source_handoff_reaches_the_same_optimum_sooner() {
    let (x, y) = toy(15, 3, 12);
    let kern = SqExp { log_variance: 1.0, log_lengthscales: vec![0.3, -0.2], learn_variance: false };
    let problem = Problem { x: &x, y: &y, n_classes: 3 };
    let method = KlmnlParams::default().check().unwrap();
    let mut r = rng(4);
    let cold = method.fit_model(&problem, &kern, HyperPolicy::Fixed, &mut FitContext::new(&mut r, None)).unwrap();
    let handoff = Fitted::handoff(&cold);
    let mut ctx = FitContext::new(&mut r, None);
    ctx.source = Some(&handoff);
    let warm = method.fit_model(&problem, &kern, HyperPolicy::Fixed, &mut ctx).unwrap();
    assert!((warm.log_zh() - cold.log_zh()).abs() < 1e-8 * cold.log_zh().abs(), "{} vs {}", warm.log_zh(), cold.log_zh());
    assert!(warm.fit.stats.sweeps < cold.fit.stats.sweeps / 2, "{} vs {} sweeps", warm.fit.stats.sweeps, cold.fit.stats.sweeps);
    // A handoff of another shape (here: other data) is ignored, not an error.
    let (x2, y2) = toy(9, 3, 13);
    let mut ctx = FitContext::new(&mut r, None);
    ctx.source = Some(&handoff);
    let other = method.fit_model(&Problem { x: &x2, y: &y2, n_classes: 3 }, &kern, HyperPolicy::Fixed, &mut ctx).unwrap();
    assert!(other.fit.stats.converged);
}

#[test]
fn the_envelope_from_the_factor_of_t_matches_the_dense_contraction() {
    // R from Z (T = Z^T Z kept factored) against the dense pass over T, for the identity and a
    // rotated (non-diagonal) K^c.
    let (x, y) = toy(9, 3, 4);
    let kern = SqExp { log_variance: 0.5, log_lengthscales: vec![0.1; 2], learn_variance: true };
    for kc in [eye(3), rotated_kc(&[2.0, 0.7, 0.3], 5)] {
        let pr = Prior::new(kern.gram(&x), kc, &y).unwrap();
        let fit = fit_variational(&pr, &KlmnlParams::default(), None, None).unwrap();
        assert!(matches!(fit.st.v.t, TRep::Fx { .. }), "the test needs a factored T");
        let fast = envelope(&pr, &fit, false).r;
        let dense = envelope(&pr, &fit, true).r;
        let scale = dense.norm_max();
        assert!((&fast - &dense).norm_max() < 1e-12 * scale.max(1.0), "{:?} vs {:?}", fast, dense);
    }
}

#[test]
fn v_from_w_matches_the_dense_inverse_over_many_row_groups() {
    // n = 37 spans three of whitened_gram's groups of 16 data, whose blocks of q take only the
    // leading columns of Kx; W_i of rank 3, 2, 1 and 0 make the row offsets uneven. Oracle:
    // V = (K^{-1} + W)^{-1} = (I + K W)^{-1} K, log|K^{-1} V| = -log|I + K W| and
    // tr(T K) = tr((I + W K)^{-1} W K), all by LU solves with I + K W (K itself may be
    // too ill-conditioned to invert accurately).
    let (n, c) = (37, 3);
    let (x, y) = toy(n, c, 11);
    let kern = SqExp { log_variance: 0.4, log_lengthscales: vec![0.3], learn_variance: true };
    let pr = Prior::new(kern.gram(&x), rotated_kc(&[0.5, 1.0, 1.7], 4), &y).unwrap();
    let mut r = rng(12);
    let w_class: Vec<Mat<f64>> = (0..n)
        .map(|i| {
            let rank = 3 - i % 4;
            let f = Mat::from_fn(c, rank, |_, _| r.sample::<f64, _>(StandardNormal));
            &f * f.transpose()
        })
        .collect();
    let w: Vec<Mat<f64>> = w_class.iter().map(|wi| pr.basis().into_basis(wi.clone())).collect();
    let ve = v_from_w(&pr, &w).unwrap();
    let nc = n * c;
    let wd = Mat::from_fn(nc, nc, |p, q| if p / c == q / c { w_class[p / c][(p % c, q % c)] } else { 0.0 });
    let eye_nc = Mat::<f64>::identity(nc, nc);
    let ikw = (&eye_nc + &pr.k * &wd).partial_piv_lu();
    let v = ikw.solve(&pr.k);
    let logdet: f64 = ikw.U().diagonal().column_vector().iter().map(|u| u.abs().ln()).sum();
    assert!((ve.logdet_kinv_v + logdet).abs() < 1e-10 * logdet.abs(), "{} vs {}", ve.logdet_kinv_v, -logdet);
    let wk = &wd * &pr.k;
    let t = (&eye_nc + &wk).partial_piv_lu().solve(&wk);
    let tk: f64 = (0..nc).map(|k| t[(k, k)]).sum();
    assert!((ve.tr_tk - tk).abs() < 1e-10 * tk.abs().max(1.0), "{} vs {tk}", ve.tr_tk);
    for i in 0..n {
        let vi = Mat::from_fn(c, c, |p, q| v[(i * c + p, i * c + q)]);
        let err = (pr.basis().to_class(&ve.blocks[i]) - &vi).norm_max();
        assert!(err < 1e-10 * vi.norm_max(), "datum {i}: {err}");
    }
}

#[test]
fn a_non_finite_bound_is_an_error_not_a_value() {
    let (x, y) = toy(6, 3, 2);
    let kern = SqExp { log_variance: 0.5, log_lengthscales: vec![0.0], learn_variance: true };
    let pr = Prior::new(kern.gram(&x), eye(3), &y).unwrap();
    let st = init_state(&pr, &default_w(6, 3, 1.0), 1.0).unwrap();
    let m = m_of(&pr, &st.b);
    assert!(bound(&pr, &st, &m).unwrap().0.is_finite());
    // An overflowed mean (a step gone wild) makes the quadratic term infinite.
    let wild: Vec<f64> = m.iter().map(|v| v * 1e308 * 1e10).collect();
    assert!(matches!(bound(&pr, &st, &wild), Err(FitError::Numerical(_))), "an infinite bound must not pass");
}

/// The line searches' slopes are the derivatives of the bound along their directions (central
/// differences), from a state two sweeps into a fit (away from the optimum, so that every slope
/// is far from zero), for K^c = I and a rotated K^c: the joint b slope (App. C.2) along the
/// Newton direction of eq. 65 with m = K (y - b) moving along; per datum, the b slope (§3.1)
/// along b_step's Newton direction and a random one, and the S slope (App. C.1) along the
/// fixed point's direction S^fx - S.
#[test]
fn the_line_search_slopes_are_the_derivatives_of_the_bound() {
    let (x, y) = toy(9, 3, 4);
    let kern = SqExp { log_variance: 0.7, log_lengthscales: vec![0.2], learn_variance: true };
    let (c, e) = (3, 1e-5);
    let close = |slope: f64, fd: f64| (fd - slope).abs() < 1e-6 * (1.0 + fd.abs());
    let mut r = rng(8);
    for kc in [eye(3), rotated_kc(&[0.3, 1.0, 1.7], 5)] {
        let pr = Prior::new(kern.gram(&x), kc, &y).unwrap();
        let fit = fit_variational(&pr, &KlmnlParams { max_sweeps: 2, ..KlmnlParams::default() }, None, None).unwrap();
        let (st, m) = (&fit.st, &fit.m);
        let (_, terms) = bound(&pr, st, m).unwrap();
        let d = newton_direction(&pr, &st.b, &terms).unwrap();
        let kd = matvec(pr.k.as_ref(), &d);
        let along = |eta: f64| {
            let b2: Vec<f64> = st.b.iter().zip(&d).map(|(b, d)| b + eta * d).collect();
            let m2: Vec<f64> = m.iter().zip(&kd).map(|(m, kd)| m - eta * kd).collect();
            let (v, t) = bound_at(&pr, &st.v, &st.s, &b2, &m2).unwrap();
            (v, b2, t)
        };
        for eta in [0.0, 0.3, 0.8] {
            let fd = (along(eta + e).0 - along(eta - e).0) / (2.0 * e);
            let (_, b2, t2) = along(eta);
            let slope = joint_b_slope(&pr, &terms, &b2, &t2, &d);
            assert!(close(slope, fd), "joint b at eta {eta}: slope {slope} vs fd {fd}");
            assert!(eta > 0.0 || fd > 1e-3, "the joint Newton direction ascends at eta = 0: {fd}");
        }
        // b slopes far from zero, whose sign a flip would change beyond the tolerance.
        let mut steep_b = 0;
        for i in [0, 4, 8] {
            let r_i = i * c..(i + 1) * c;
            let (mi, bi, vi, si) = (&m[r_i.clone()], &st.b[r_i], &st.v.blocks[i], &st.s[i]);
            let lv = chol(vi, "V_i").unwrap();
            let h_at = |b: &[f64], s: &Mat<f64>| datum_terms(mi, vi, lv.log_det(), b, s, pr.basis()).unwrap();
            let t0 = h_at(bi, si);
            // b_step's direction -[I + (G - g g^T) S^{-1}]^{-1} (b - g-bar), and a random one.
            let dmat = Mat::from_fn(c, c, |p, q| if p == q { t0.gbar[p] } else { 0.0 } - t0.gbar[p] * t0.gbar[q]);
            let rhs = Mat::from_fn(c, 1, |p, _| t0.gbar[p] - bi[p]);
            let newton = (eye(c) + &dmat * &t0.s_inv).partial_piv_lu().solve(&rhs);
            let random: Vec<f64> = (0..c).map(|_| r.sample::<f64, _>(StandardNormal)).collect();
            for dir in [(0..c).map(|p| newton[(p, 0)]).collect::<Vec<f64>>(), random] {
                let at = |eta: f64| -> Vec<f64> { bi.iter().zip(&dir).map(|(b, d)| b + eta * d).collect() };
                for eta in [0.0, 0.5, 1.0] {
                    let fd = (h_at(&at(eta + e), si).h_core - h_at(&at(eta - e), si).h_core) / (2.0 * e);
                    let slope = b_slope(&h_at(&at(eta), si), &at(eta), &dir);
                    assert!(close(slope, fd), "datum {i}, b at eta {eta}: slope {slope} vs fd {fd}");
                    steep_b += usize::from(eta == 0.0 && fd.abs() > 1e-3);
                }
            }
            // S^fx - S (an ascent direction, App. C.1; near the S optimum after the sweeps'
            // S-steps, so flat) and a random positive semi-definite one (S + eta Delta stays PD).
            let fixed_point = &s_fixed_point(&lv, &t0.a_in_basis).unwrap() - si;
            let random = random_spd(c, &mut r, 0.5 * si.norm_max());
            for (k, delta) in [fixed_point, random].iter().enumerate() {
                let se = |eta: f64| si + delta * faer::Scale(eta);
                for eta in [0.0, 0.5, 1.0] {
                    let fd = (h_at(bi, &se(eta + e)).h_core - h_at(bi, &se(eta - e)).h_core) / (2.0 * e);
                    let slope = s_slope(vi, &h_at(bi, &se(eta)), delta);
                    assert!(close(slope, fd), "datum {i}, S direction {k} at eta {eta}: slope {slope} vs fd {fd}");
                    if eta == 0.0 {
                        assert!(if k == 0 { fd > 0.0 } else { fd.abs() > 1e-4 }, "datum {i}, S direction {k}: slope {fd} at eta = 0");
                    }
                }
            }
        }
        assert!(steep_b >= 3, "only {steep_b} of the b slopes at eta = 0 are far from zero");
    }
}
