//! The machines against mathematics: each solution's dual objective equals its primal objective
//! (strong duality), it satisfies the KKT conditions of its own primal, and it matches the
//! optimum of the primal QP written out in a finite feature space (K = L L^T, phi(x_i) = L_i)
//! and solved by a generic interior-point solver (Clarabel): optimal value and decision values.
use super::block::{solve_block, BlockBounds};
use super::formulation::Formulation;
use super::solver::{objectives, solve, DualSolution, SolverSettings};
use super::*;
use crate::kernels::SqExp;
use crate::linalg::Chol;
use crate::methods::{build, StopReason};
use clarabel::algebra::CscMatrix;
use clarabel::solver::{DefaultSettings, DefaultSolver, IPSolver, SolverStatus, SupportedConeT};
use faer::Mat;
use ndarray::Array2;
use rand::{RngExt, SeedableRng};
use rand_pcg::Pcg64;

const ALL: [Formulation; 4] = [Formulation::Ww, Formulation::Cs, Formulation::Llw, Formulation::Msvm2];

/// n points in 2-D around q class centres (overlapping at spread 1), classes cycling.
fn problem(n: usize, q: usize, spread: f64, seed: u64) -> (Array2<f64>, Vec<usize>) {
    let mut rng = Pcg64::seed_from_u64(seed);
    let y: Vec<usize> = (0..n).map(|i| i % q).collect();
    let x = Array2::from_shape_fn((n, 2), |(i, k)| {
        let angle = 2.0 * std::f64::consts::PI * y[i] as f64 / q as f64;
        let centre = if k == 0 { angle.cos() } else { angle.sin() } * 1.5;
        centre + spread * (rng.random::<f64>() - 0.5) * 2.0
    });
    (x, y)
}

fn kernel(lengthscale: f64) -> SqExp {
    SqExp { log_variance: 0.0, log_lengthscales: vec![lengthscale.ln()], learn_variance: false }
}

fn tight(c: f64) -> SolverSettings {
    SolverSettings { c, tol: 1e-11, max_sweeps: 2_000_000 }
}

/// The margin m of the machines' constraints as MSVMpack defines them (Lauer & Guermeur 2011;
/// the table in `formulation.rs`): h_y - h_k >= 1 - xi for WW and CS, -h_k >= 1/(Q-1) - xi for
/// LLW and MSVM2 (whose outputs sum to zero). Written out here so that the QP oracle and the KKT
/// check do not take it from the code under test.
fn constraint_margin(form: Formulation, q: usize) -> f64 {
    match form {
        Formulation::Ww | Formulation::Cs => 1.0,
        Formulation::Llw | Formulation::Msvm2 => 1.0 / (q as f64 - 1.0),
    }
}

/// MSVM2's c_M (Guermeur & Monfrini 2011, MSVMpack): M = I + c_M 1 1^T ((Q-1) x per datum)
/// with c_M = (sqrt(Q) - 1)/(Q - 1), the square root of I + 1 1^T
/// (`msvm2_m_is_the_square_root_of_i_plus_ones` checks that numerically).
fn msvm2_c_m(q: usize) -> f64 {
    let q = q as f64;
    (q.sqrt() - 1.0) / (q - 1.0)
}

/// (I + c_M 1 1^T)^2 = I + 1 1^T for the x blocks of MSVM2's M, entry by entry, and
/// its inverse is I - (c_M / sqrt(Q)) 1 1^T (the form the KKT check's stationarity in xi uses);
/// the code's constants are these.
#[test]
fn msvm2_m_is_the_square_root_of_i_plus_ones() {
    for q in 2..=7 {
        let (c, r) = (msvm2_c_m(q), q - 1);
        let m = Mat::from_fn(r, r, |i, j| if i == j { 1.0 } else { 0.0 } + c);
        let m_inv = Mat::from_fn(r, r, |i, j| if i == j { 1.0 } else { 0.0 } - c / (q as f64).sqrt());
        let square = &m * &m;
        let identity = &m * &m_inv;
        for i in 0..r {
            for j in 0..r {
                let delta = if i == j { 1.0 } else { 0.0 };
                assert!((square[(i, j)] - (delta + 1.0)).abs() < 1e-14, "Q = {q}: M^2[{i},{j}] = {}", square[(i, j)]);
                assert!((identity[(i, j)] - delta).abs() < 1e-14, "Q = {q}: (M M^-1)[{i},{j}] = {}", identity[(i, j)]);
            }
        }
        assert_eq!(Formulation::c_m(q), c, "Q = {q}");
        for form in ALL {
            assert_eq!(form.margin(q), constraint_margin(form, q), "{form:?}, Q = {q}");
        }
    }
}

/// The primal of `form` as a QP over z = [w_1..w_Q (n each), b (Q), xi], solved by Clarabel:
/// (optimal value, the kernel part h - b [n][Q] at the training points: w is unique, while the
/// bias may be an interval when many multipliers sit at their bounds).
fn primal_qp(form: Formulation, k: &Mat<f64>, y: &[usize], q: usize, c: f64) -> (f64, Vec<Vec<f64>>) {
    let n = y.len();
    let l = Chol::factor(k.as_ref(), "K").unwrap();
    let l = l.l();
    let per_datum_slack = form == Formulation::Cs;
    let n_xi = if per_datum_slack { n } else { n * (q - 1) };
    let nw = q * n;
    let nz = nw + q + n_xi;
    let w = |c: usize, j: usize| c * n + j;
    let b = |c: usize| nw + c;
    // Slack index of (i, k != y_i).
    let xi = |i: usize, k: usize| {
        if per_datum_slack {
            nw + q + i
        } else {
            nw + q + i * (q - 1) + if k < y[i] { k } else { k - 1 }
        }
    };
    // h_k(x_i) as a row of coefficients over z.
    let h_row = |i: usize, k: usize, sign: f64, row: &mut [f64]| {
        for j in 0..n {
            row[w(k, j)] += sign * l[(i, j)];
        }
        row[b(k)] += sign;
    };
    let mut p = vec![vec![0.0; nz]; nz];
    for (j, row) in p.iter_mut().enumerate().take(nw) {
        row[j] = 1.0;
    }
    let mut qv = vec![0.0; nz];
    let margin = constraint_margin(form, q);
    if form == Formulation::Msvm2 {
        // C xi^T M xi = 1/2 xi^T (2 C M) xi, M_i = I + c_M 1 1^T per datum.
        let cm = msvm2_c_m(q);
        for i in 0..n {
            for k in (0..q).filter(|&k| k != y[i]) {
                for l2 in (0..q).filter(|&l2| l2 != y[i]) {
                    p[xi(i, k)][xi(i, l2)] = 2.0 * c * (if k == l2 { 1.0 } else { 0.0 } + cm);
                }
            }
        }
    } else {
        for v in qv.iter_mut().skip(nw + q) {
            *v = c;
        }
    }
    // Equalities (A z = rhs): sum_k b_k = 0 (a free shift for WW / CS, required for LLW /
    // MSVM2), and sum_k w_k = 0 for LLW / MSVM2.
    let mut eq: Vec<(Vec<f64>, f64)> = Vec::new();
    let mut row = vec![0.0; nz];
    (0..q).for_each(|c| row[b(c)] = 1.0);
    eq.push((row, 0.0));
    if matches!(form, Formulation::Llw | Formulation::Msvm2) {
        for j in 0..n {
            let mut row = vec![0.0; nz];
            (0..q).for_each(|c| row[w(c, j)] = 1.0);
            eq.push((row, 0.0));
        }
    }
    // Inequalities as A z <= rhs.
    let mut ineq: Vec<(Vec<f64>, f64)> = Vec::new();
    for i in 0..n {
        for k in (0..q).filter(|&k| k != y[i]) {
            let mut row = vec![0.0; nz];
            match form {
                // h_y - h_k >= 1 - xi  <=>  -(h_y - h_k) - xi <= -1.
                Formulation::Ww | Formulation::Cs => {
                    h_row(i, y[i], -1.0, &mut row);
                    h_row(i, k, 1.0, &mut row);
                }
                // -h_k >= m - xi  <=>  h_k - xi <= -m.
                Formulation::Llw | Formulation::Msvm2 => h_row(i, k, 1.0, &mut row),
            }
            row[xi(i, k)] -= 1.0;
            ineq.push((row, -margin));
        }
    }
    if form != Formulation::Msvm2 {
        for s in nw + q..nz {
            let mut row = vec![0.0; nz];
            row[s] = -1.0;
            ineq.push((row, 0.0));
        }
    }
    let (n_eq, n_ineq) = (eq.len(), ineq.len());
    let (rows, rhs): (Vec<Vec<f64>>, Vec<f64>) = eq.into_iter().chain(ineq).unzip();
    let cones = [SupportedConeT::ZeroConeT(n_eq), SupportedConeT::NonnegativeConeT(n_ineq)];
    let settings =
        DefaultSettings { verbose: false, tol_gap_abs: 1e-11, tol_gap_rel: 1e-11, tol_feas: 1e-11, max_iter: 500, ..Default::default() };
    let mut solver = DefaultSolver::new(&CscMatrix::from(&p), &qv, &CscMatrix::from(&rows), &rhs, &cones, settings).unwrap();
    solver.solve();
    assert!(matches!(solver.solution.status, SolverStatus::Solved | SolverStatus::AlmostSolved), "clarabel: {:?}", solver.solution.status);
    let z = &solver.solution.x;
    let h = (0..n)
        .map(|i| {
            (0..q)
                .map(|k| {
                    let mut row = vec![0.0; nz];
                    h_row(i, k, 1.0, &mut row);
                    row[b(k)] = 0.0;
                    row.iter().zip(z).map(|(a, b)| a * b).sum()
                })
                .collect()
        })
        .collect();
    (solver.solution.obj_val, h)
}

/// The largest violation of the KKT conditions of `form`'s primal at a dual solution (given
/// w = sum beta phi, which is stationarity in w): complementary slackness and primal
/// feasibility per constraint, dual feasibility (bounds), and stationarity in b (sum beta = 0).
fn kkt_violation(form: Formulation, sol: &DualSolution, y: &[usize], c: f64) -> f64 {
    let q = sol.bias.len();
    let m = constraint_margin(form, q);
    let mut worst = objectives(form, sol, y, c).infeasibility;
    for (i, (a, f)) in sol.alpha.iter().zip(&sol.f).enumerate() {
        let h: Vec<f64> = f.iter().zip(&sol.bias).map(|(f, b)| f + b).collect();
        let yi = y[i];
        let others: Vec<usize> = (0..q).filter(|&k| k != yi).collect();
        worst = worst.max(-a.iter().cloned().fold(f64::INFINITY, f64::min)).max(a[yi].abs());
        match form {
            Formulation::Ww | Formulation::Llw => {
                for &k in &others {
                    // g >= 0 is the margin constraint without slack: r = h_y - h_k - 1 (WW) or -h_k - m (LLW).
                    let r = if form == Formulation::Ww { h[yi] - h[k] - 1.0 } else { -h[k] - m };
                    let xi = (-r).max(0.0);
                    worst = worst.max(a[k] - c); // alpha <= C
                    if a[k] > 0.0 {
                        worst = worst.max((r + xi).abs()); // active constraint
                    }
                    if a[k] < c {
                        worst = worst.max(xi); // no slack below the bound
                    }
                }
            }
            Formulation::Cs => {
                let xi = others.iter().map(|&k| 1.0 - h[yi] + h[k]).fold(0.0, f64::max);
                let s: f64 = a.iter().sum();
                worst = worst.max(s - c);
                for &k in &others {
                    if a[k] > 0.0 {
                        worst = worst.max((h[yi] - h[k] - 1.0 + xi).abs());
                    }
                }
                // (The cap is met to rounding: the block's values sum to C up to an ulp or two.)
                if s < c * (1.0 - 1e-12) {
                    worst = worst.max(xi);
                }
            }
            Formulation::Msvm2 => {
                // xi = M^{-1} alpha / (2C) (stationarity in xi); -h_k >= m - xi_k, equality where alpha_k > 0.
                let cm = msvm2_c_m(q);
                let s: f64 = others.iter().map(|&k| a[k]).sum();
                for &k in &others {
                    let xi = (a[k] - cm / (q as f64).sqrt() * s) / (2.0 * c);
                    let r = -h[k] - m + xi;
                    worst = worst.max(-r);
                    if a[k] > 0.0 {
                        worst = worst.max(r.abs());
                    }
                }
            }
        }
    }
    worst
}

#[test]
fn each_machine_matches_the_generic_qp_with_zero_duality_gap_and_kkt() {
    for (seed, n, q, c, ls) in [(1, 15, 3, 1.0, 1.0), (2, 16, 4, 10.0, 0.7), (3, 18, 3, 0.1, 2.0), (4, 20, 4, 100.0, 1.5)] {
        let (x, y) = problem(n, q, 1.2, seed);
        let k = kernel(ls).gram(&x);
        for form in ALL {
            let sol = solve(form, &k, &y, q, tight(c), None).unwrap();
            assert_eq!(sol.stop, StopReason::Converged, "{form:?} seed {seed}: did not converge in {} sweeps", sol.sweeps);
            let obj = objectives(form, &sol, &y, c);
            let scale = obj.primal.abs().max(1.0);
            assert!((obj.primal - obj.dual).abs() <= 1e-7 * scale, "{form:?} seed {seed}: primal {} dual {}", obj.primal, obj.dual);
            let kkt = kkt_violation(form, &sol, &y, c);
            assert!(kkt <= 1e-6, "{form:?} seed {seed}: KKT violated by {kkt}");
            let (p_star, f_star) = primal_qp(form, &k, &y, q, c);
            assert!((obj.primal - p_star).abs() <= 1e-6 * scale, "{form:?} seed {seed}: ours {} vs QP {p_star}", obj.primal);
            for (i, (f, fs)) in sol.f.iter().zip(&f_star).enumerate() {
                for kk in 0..q {
                    assert!(
                        (f[kk] - fs[kk]).abs() <= 1e-5 * fs[kk].abs().max(1.0),
                        "{form:?} seed {seed}: <w_{kk}, phi(x_{i})> = {} vs QP {}",
                        f[kk],
                        fs[kk]
                    );
                }
            }
        }
    }
}

#[test]
fn a_solution_stopped_after_one_sweep_has_a_positive_gap() {
    // The gap is a real certificate: stopped after one sweep, primal exceeds dual (a tight
    // solve's zero gap is checked against the generic QP's optimum elsewhere).
    let (x, y) = problem(15, 3, 1.2, 7);
    let k = kernel(1.0).gram(&x);
    for form in ALL {
        let sol = solve(form, &k, &y, 3, SolverSettings { c: 10.0, tol: 1e-11, max_sweeps: 1 }, None).unwrap();
        assert_eq!(sol.stop, StopReason::MaxIterations);
        let obj = objectives(form, &sol, &y, 10.0);
        assert!(obj.primal - obj.dual > 1e-3, "{form:?}: gap {} after one sweep", obj.primal - obj.dual);
    }
}

/// Weak duality of the problem at a fixed bias b: for any feasible alpha, D(alpha) - b . S(alpha)
/// is a lower bound on that problem's optimum, and so on P(w(alpha), b). The certified gap
/// (duality_gap_at_bias) is therefore >= 0 after one sweep and after a tight solve, where the
/// plain P - D can be negative (S != 0) at small C.
#[test]
fn the_gap_at_the_bias_is_never_negative() {
    // Unbalanced classes (14 / 4 / 2), where the bias matters.
    let (x, _) = problem(20, 3, 1.2, 7);
    let y: Vec<usize> = (0..20)
        .map(|i| {
            if i < 14 {
                0
            } else if i < 18 {
                1
            } else {
                2
            }
        })
        .collect();
    let k = kernel(1.0).gram(&x);
    let mut largest_bias_term = 0.0f64;
    for form in ALL {
        for (c, sweeps) in [(0.01, 1), (0.01, 3), (0.01, 5000), (10.0, 1), (10.0, 3), (10.0, 5000)] {
            let sol = solve(form, &k, &y, 3, SolverSettings { c, tol: 1e-11, max_sweeps: sweeps }, None).unwrap();
            let obj = objectives(form, &sol, &y, c);
            let gap = obj.primal - (obj.dual - bias_term(&sol));
            assert!(gap >= -1e-10 * obj.primal.abs().max(1.0), "{form:?}, C = {c}, {sweeps} sweeps: gap at the bias {gap}");
            largest_bias_term = largest_bias_term.max(bias_term(&sol).abs() / obj.primal.abs().max(1e-3));
        }
    }
    // The multiplier term is material on some of these solutions (else this tests nothing).
    assert!(largest_bias_term > 1e-2, "largest |b . S| / |P| {largest_bias_term}");
}

#[test]
fn the_block_solver_matches_the_generic_qp() {
    let mut rng = Pcg64::seed_from_u64(11);
    for trial in 0..40 {
        let m = 2 + trial % 5;
        let a = 0.2 + rng.random::<f64>() * 3.0;
        // b from the most negative allowed (a + b m > 0) to positive.
        let b = -a / (m as f64 + 0.5) + rng.random::<f64>() * 2.0 * a;
        let g: Vec<f64> = (0..m).map(|_| (rng.random::<f64>() - 0.3) * 4.0).collect();
        let bounds = match trial % 3 {
            0 => BlockBounds { lo: 0.0, hi: 0.7, cap: None },
            1 => BlockBounds { lo: 0.0, hi: f64::INFINITY, cap: Some(0.5) },
            _ => BlockBounds { lo: 0.0, hi: f64::INFINITY, cap: None },
        };
        let mut x = vec![0.0; m];
        solve_block(a, b, &g, bounds, &mut x);
        let p: Vec<Vec<f64>> = (0..m).map(|i| (0..m).map(|j| b + if i == j { a } else { 0.0 }).collect()).collect();
        let qv: Vec<f64> = g.iter().map(|v| -v).collect();
        let mut rows: Vec<Vec<f64>> = Vec::new();
        let mut rhs = Vec::new();
        for i in 0..m {
            let mut r = vec![0.0; m];
            r[i] = -1.0;
            rows.push(r);
            rhs.push(-bounds.lo);
            if bounds.hi.is_finite() {
                let mut r = vec![0.0; m];
                r[i] = 1.0;
                rows.push(r);
                rhs.push(bounds.hi);
            }
        }
        if let Some(cap) = bounds.cap {
            rows.push(vec![1.0; m]);
            rhs.push(cap);
        }
        let cones = [SupportedConeT::NonnegativeConeT(rows.len())];
        let settings = DefaultSettings { verbose: false, tol_gap_abs: 1e-12, tol_gap_rel: 1e-12, tol_feas: 1e-12, ..Default::default() };
        let mut s = DefaultSolver::new(&CscMatrix::from(&p), &qv, &CscMatrix::from(&rows), &rhs, &cones, settings).unwrap();
        s.solve();
        for (ours, qp) in x.iter().zip(&s.solution.x) {
            assert!((ours - qp).abs() < 1e-6, "trial {trial}: {x:?} vs {:?}", s.solution.x);
        }
    }
}

#[test]
fn separable_classes_are_fitted_without_error_at_large_c() {
    let (x, y) = problem(30, 3, 0.4, 5);
    let kernels = KernelSet::shared_se(&kernel(1.0));
    for form in ALL {
        let m = build("msvm", &serde_json::json!({ "formulation": form.name(), "c": 1000.0, "tol": 1e-8 })).unwrap();
        let mut rng = Pcg64::seed_from_u64(0);
        let mut ctx = FitContext::new(&mut rng, None);
        let fitted = m.fit(&Problem { x: &x, y: &y, n_classes: 3 }, &kernels, HyperPolicy::Fixed, &mut ctx).unwrap();
        let p = fitted.predict(&x, &mut Pcg64::seed_from_u64(1)).unwrap();
        assert!(p.labels_only);
        let wrong = y.iter().enumerate().filter(|(i, &c)| p.probs[(*i, c)] != 1.0).count();
        assert_eq!(wrong, 0, "{form:?}: {wrong} training errors on separable data");
        let n_sv = fitted.extra_metrics()["n_sv"];
        assert!((3.0..30.0).contains(&n_sv), "{form:?}: {n_sv} support vectors");
        let d = fitted.diagnostics();
        assert!(d.numbers["duality_gap"].abs() <= 1e-4 * d.numbers["primal_objective"].abs().max(1.0), "{form:?}: {:?}", d.numbers);
    }
}

#[test]
fn settings_are_checked_and_learning_is_refused() {
    let err = |v: serde_json::Value| build("msvm", &v).err().unwrap_or_default();
    assert!(err(serde_json::json!({ "c": -1.0 })).contains("settings.c"));
    assert!(err(serde_json::json!({ "tol": 0.0 })).contains("settings.tol"));
    assert!(err(serde_json::json!({ "max_sweeps": 0 })).contains("settings.max_sweeps"));
    assert!(err(serde_json::json!({ "formulation": "ovr" })).contains("unknown variant `ovr`"));
    let m = build("msvm", &serde_json::Value::Null).unwrap();
    let shape = ProblemShape { n_classes: 3, n_features: 2, n_train: 10 };
    let kernels = KernelSet::shared_se(&kernel(1.0));
    assert!(m.supports(&shape, &kernels, HyperPolicy::Learn).unwrap_err().contains("fixed kernel"));
    assert!(m.supports(&shape, &kernels, HyperPolicy::Fixed).is_ok());
}

/// The default tolerance certifies the machine at small C too: the tests scale with C below 1,
/// where every output shrinks with C (with margin-unit tolerances LLW stopped after two sweeps
/// at C = 0.01, its outputs 80% off, and WW, MSVM2 several per cent).
#[test]
fn the_default_tolerance_holds_at_small_c() {
    let (x, y) = problem(48, 4, 1.5, 21);
    let k = kernel(1.0).gram(&x);
    for form in ALL {
        for c in [0.001, 0.01, 0.1] {
            let sol = solve(form, &k, &y, 4, SolverSettings { c, tol: d_tol(), max_sweeps: 200_000 }, None).unwrap();
            assert_eq!(sol.stop, StopReason::Converged, "{form:?}, C = {c}");
            let (_, f_star) = primal_qp(form, &k, &y, 4, c);
            let scale = f_star.iter().flatten().fold(0.0f64, |m, v| m.max(v.abs()));
            let err = sol.f.iter().flatten().zip(f_star.iter().flatten()).fold(0.0f64, |m, (a, b)| m.max((a - b).abs()));
            assert!(err <= 1e-2 * scale, "{form:?}, C = {c}: outputs off by {err:.3e} of {scale:.3e}");
        }
    }
}

/// Unbalanced classes at Q = 2 and Q = 6 (the generic QP again, where the bias matters most).
#[test]
fn each_machine_matches_the_generic_qp_on_unbalanced_classes() {
    for (seed, q, counts, c) in [(31u64, 2usize, vec![14usize, 4], 1.0), (32, 6, vec![8, 5, 3, 2, 2, 1], 10.0)] {
        let n: usize = counts.iter().sum();
        let (x, _) = problem(n, q, 1.2, seed);
        let y: Vec<usize> = counts.iter().enumerate().flat_map(|(k, &m)| std::iter::repeat_n(k, m)).collect();
        let k = kernel(1.0).gram(&x);
        for form in ALL {
            let sol = solve(form, &k, &y, q, tight(c), None).unwrap();
            assert_eq!(sol.stop, StopReason::Converged, "{form:?} Q = {q}");
            let obj = objectives(form, &sol, &y, c);
            let (p_star, f_star) = primal_qp(form, &k, &y, q, c);
            let scale = obj.primal.abs().max(1.0);
            assert!((obj.primal - p_star).abs() <= 1e-6 * scale, "{form:?} Q = {q}: ours {} vs QP {p_star}", obj.primal);
            let kkt = kkt_violation(form, &sol, &y, c);
            assert!(kkt <= 1e-6, "{form:?} Q = {q}: KKT violated by {kkt}");
            for (f, fs) in sol.f.iter().zip(&f_star) {
                for kk in 0..q {
                    assert!((f[kk] - fs[kk]).abs() <= 1e-5 * fs[kk].abs().max(1.0), "{form:?} Q = {q}: {} vs QP {}", f[kk], fs[kk]);
                }
            }
        }
    }
}

/// A class with no training point (as in a cross-validation fold that holds a rare class's only
/// members out): every machine still meets its certificate (for WW and CS any bias of the
/// empty class below some value is optimal; the multiplier steps stop once its dual variables
/// sit at zero) and, on separable data, classifies every training point correctly, so never
/// predicts the empty class there.
#[test]
fn a_class_without_training_points_is_never_predicted() {
    let (x, _) = problem(18, 2, 0.4, 41);
    // Classes 0 and 2 as problem() places classes 0 and 1; class 1 has no point.
    let y: Vec<usize> = (0..18).map(|i| if i % 2 == 0 { 0 } else { 2 }).collect();
    let kernels = KernelSet::shared_se(&kernel(1.0));
    for form in ALL {
        let m = build("msvm", &serde_json::json!({ "formulation": form.name(), "c": 10.0, "tol": 1e-8, "max_sweeps": 1_000_000 })).unwrap();
        let mut rng = Pcg64::seed_from_u64(0);
        let mut ctx = FitContext::new(&mut rng, None);
        let fitted = m.fit(&Problem { x: &x, y: &y, n_classes: 3 }, &kernels, HyperPolicy::Fixed, &mut ctx).unwrap();
        assert_eq!(fitted.diagnostics().stop_reason, Some(StopReason::Converged), "{form:?}");
        let p = fitted.predict(&x, &mut Pcg64::seed_from_u64(1)).unwrap();
        let wrong = y.iter().enumerate().filter(|(i, &c)| p.probs[(*i, c)] != 1.0).count();
        assert_eq!(wrong, 0, "{form:?}: {wrong} training points misclassified");
    }
}
