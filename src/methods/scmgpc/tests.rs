//! SC-MGPC against mathematics (the notes' U1-U7, §13): augmentation expectations against
//! Monte Carlo, the local bound and its oracle vector, monotone batch CAVI (and the printed
//! eq. 6 breaking it), sparse = full with Z = X, one SVI step = one CAVI sweep, the kernel
//! gradient against finite differences, and the predictive against the oracle table.
use super::global::{global_step, local_step};
use super::local::{self, Local};
use super::model::Sparse;
use super::predict::{self, PredictRule};
use super::{elbo, hyper, PoissonRate, Scmgpc};
use crate::kernels::{Kernel, KernelSet, SqExp};
use crate::linalg::Chol;
use crate::methods::{Budget, Checkpoints, FitContext, Fitted, FromSettings, HyperPolicy, Method, Problem};
use crate::scalable::NaturalGaussian;
use faer::Mat;
use ndarray::Array2;
use rand::{RngExt, SeedableRng};
use rand_distr::{Distribution, Gamma, StandardNormal};
use rand_pcg::Pcg64;
use std::collections::BTreeMap;

fn method(settings: serde_json::Value) -> Scmgpc {
    super::ScmgpcParams::from_settings(&settings).unwrap().check().unwrap()
}

fn sigma(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

fn log_lik(f: &[f64], y: usize) -> f64 {
    (sigma(f[y]) / f.iter().map(|&v| sigma(v)).sum::<f64>()).ln()
}

/// The notes' §13.2 problem: N = 12 points in 2-D, C = 3, SE kernel (variance 2, length-scale 1).
fn tiny_problem(seed: u64) -> (Array2<f64>, Vec<usize>, KernelSet) {
    let mut rng = Pcg64::seed_from_u64(seed);
    let x = Array2::from_shape_fn((12, 2), |_| rng.random_range(-2.0..2.0));
    let y: Vec<usize> = (0..12).map(|i| i % 3).collect();
    let k = SqExp { log_variance: 2f64.ln(), log_lengthscales: vec![0.0], learn_variance: true };
    (x, y, KernelSet::shared_se(&k))
}

/// Z = X for every class, q(v) = N(0, I).
fn full_sparse(x: &Array2<f64>, kernels: &KernelSet, c: usize, jitter: f64) -> Sparse {
    let qs = (0..c).map(|_| NaturalGaussian::standard(x.nrows())).collect();
    Sparse::new(kernels.clone(), vec![x.clone(); c], qs, jitter).unwrap()
}

/// Batch CAVI sweeps on all rows; the ELBO after each sweep's global step, at its locals.
fn cavi_elbos(m: &Scmgpc, sparse: &mut Sparse, x: &Array2<f64>, y: &[usize], sweeps: usize) -> Vec<f64> {
    let mut alpha = vec![3.0; x.nrows()];
    (0..sweeps)
        .map(|_| {
            let (mg, locals) = local_step(m, sparse, x, y, &mut alpha);
            global_step(sparse, &mg, y, &locals, 1.0, 1.0).unwrap();
            elbo::with_locals(sparse, x, y, &locals)
        })
        .collect()
}

/// U1 (Gamma/Poisson part): the expectations the local step and the ELBO use
/// (`local::gamma_mean_log`, `gamma_mean`, `expected_poisson_kl`), against Monte Carlo under
/// lambda ~ Ga(alpha, beta): E[log lambda], E[lambda], and E_{q(lambda)} KL(Po(gamma) ||
/// Po(lambda)) with the KL of each draw summed over n by brute force. Tolerances are 5 Monte
/// Carlo standard errors of the sample.
#[test]
fn gamma_and_poisson_expectations_match_monte_carlo() {
    let mut rng = Pcg64::seed_from_u64(1);
    let draws = 200_000;
    // KL(Po(gamma) || Po(lambda)) = sum_n Po(n | gamma) log(Po(n | gamma) / Po(n | lambda))
    // = sum_n Po(n | gamma) (n log(gamma / lambda) - gamma + lambda); 200 terms leave a tail
    // far below rounding for these rates (gamma <= 1.3).
    let kl_by_sum = |gamma: f64, lambda: f64| -> f64 {
        let log_ratio = (gamma / lambda).ln();
        let (mut p, mut s) = ((-gamma).exp(), 0.0);
        for n in 0..200 {
            s += p * (n as f64 * log_ratio - gamma + lambda);
            p *= gamma / (n as f64 + 1.0);
        }
        s
    };
    for (alpha, beta, gamma) in [(1.4f64, 3.0f64, 0.2f64), (7.5, 10.0, 1.3), (0.8, 2.0, 0.05)] {
        let g = Gamma::new(alpha, 1.0 / beta).unwrap();
        let lam: Vec<f64> = (0..draws).map(|_| g.sample(&mut rng)).collect();
        let check = |what: &str, vals: Vec<f64>, want: f64| {
            let mean = vals.iter().sum::<f64>() / draws as f64;
            let sd = (vals.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (draws - 1) as f64).sqrt();
            let se = sd / (draws as f64).sqrt();
            assert!((mean - want).abs() < 5.0 * se, "{what} (alpha {alpha}, beta {beta}): MC {mean} vs {want} (se {se})");
        };
        let (mean_log, mean) = (local::gamma_mean_log(alpha, beta), local::gamma_mean(alpha, beta));
        check("E log lambda", lam.iter().map(|l| l.ln()).collect(), mean_log);
        check("E lambda", lam.clone(), mean);
        check("E KL(Po || Po)", lam.iter().map(|&l| kl_by_sum(gamma, l)).collect(), local::expected_poisson_kl(gamma, mean_log, mean));
    }
    // 0 log 0 = 0: with gamma = 0 the KL is lambda itself.
    assert_eq!(local::expected_poisson_kl(0.0, -1.0, 0.7), 0.7);
}

/// U2: the notes' §13.1 test vector (point-mass q(f), iterated to convergence from alpha = 3),
/// the closed form of simplification 2 against the full expression, and the bound below the
/// exact log-likelihood on 1000 random (f, y, C); the printed eq. 6 gives a looser bound.
#[test]
fn the_local_bound_matches_the_oracle_and_stays_below_the_log_likelihood() {
    let (f, v) = ([1.0, -0.5, 0.3], [0.0; 3]);
    let l = local::update(&f, &v, 0, 3.0, PoissonRate::Corrected, 500, 1e-15);
    assert!((l.alpha - 1.422293).abs() < 1e-6, "alpha {}", l.alpha);
    for (g, want) in l.gamma.iter().zip([0.086238, 0.199596, 0.136458]) {
        assert!((g - want).abs() < 1e-6, "gamma {:?}", l.gamma);
    }
    let b = local::bound(&f, &v, 0, &l);
    assert!((b - -1.093938).abs() < 1e-6, "bound {b}");
    assert!((log_lik(&f, 0) - -0.833864).abs() < 1e-6);
    assert!((local::bound_at_fixed_point(&f, &v, 0, l.alpha) - b).abs() < 1e-9);

    let mut rng = Pcg64::seed_from_u64(2);
    let mut looser_at_10 = Vec::new();
    for case in 0..1000 {
        let c = rng.random_range(2..=10usize);
        let f: Vec<f64> = (0..c).map(|_| 2.0 * rng.sample::<f64, _>(StandardNormal)).collect();
        let v = vec![0.0; c];
        let y = rng.random_range(0..c);
        let l = local::update(&f, &v, y, c as f64, PoissonRate::Corrected, 500, 1e-15);
        let b = local::bound(&f, &v, y, &l);
        let exact = log_lik(&f, y);
        assert!(b <= exact + 1e-12, "case {case}: bound {b} above log-likelihood {exact}");
        if case < 50 {
            // Simplification 2 equals the full expression at the fixed point, also with v > 0.
            let v: Vec<f64> = (0..c).map(|_| rng.random_range(0.0..2.0)).collect();
            let l = local::update(&f, &v, y, c as f64, PoissonRate::Corrected, 500, 1e-15);
            assert!((local::bound(&f, &v, y, &l) - local::bound_at_fixed_point(&f, &v, y, l.alpha)).abs() < 1e-9, "case {case}");
        }
        if c == 10 {
            let p = local::update(&f, &v, y, c as f64, PoissonRate::Printed, 500, 1e-15);
            looser_at_10.push(b - local::bound(&f, &v, y, &p));
        }
    }
    assert!(!looser_at_10.is_empty() && looser_at_10.iter().all(|d| *d > 0.0), "printed eq. 6 not looser at C = 10: {looser_at_10:?}");
}

/// U3: batch CAVI on the notes' tiny problem (full GP, Z = X): the ELBO never falls under the
/// corrected rate and stays below a Monte Carlo estimate of log p(y); under the printed eq. 6 it
/// is not monotone and ends lower.
#[test]
fn batch_cavi_is_monotone_only_with_the_corrected_rate() {
    let (x, y, kernels) = tiny_problem(3);
    let corrected = method(serde_json::json!({ "local_iters": 20 }));
    let printed = method(serde_json::json!({ "local_iters": 20, "poisson_rate": "printed" }));
    let mut sparse = full_sparse(&x, &kernels, 3, 1e-6);
    let good = cavi_elbos(&corrected, &mut sparse, &x, &y, 60);
    for (t, w) in good.windows(2).enumerate() {
        assert!(w[1] >= w[0] - 1e-9 * w[0].abs(), "corrected: ELBO fell at sweep {}: {:?}", t + 2, &good[..t + 2]);
    }
    let mut sparse_p = full_sparse(&x, &kernels, 3, 1e-6);
    let bad = cavi_elbos(&printed, &mut sparse_p, &x, &y, 60);
    assert!(bad.windows(2).any(|w| w[1] < w[0] - 1e-6), "printed eq. 6: the ELBO never fell: {bad:?}");
    assert!(bad.last().unwrap() < good.last().unwrap(), "printed {} vs corrected {}", bad.last().unwrap(), good.last().unwrap());
    // log p(y) by 20000 prior draws of f (each class independent).
    let k = kernels.class(0).gram(&x);
    let chol = Chol::factor_with_jitter(k.as_ref(), "K").unwrap();
    let mut rng = Pcg64::seed_from_u64(4);
    let logs: Vec<f64> = (0..20_000)
        .map(|_| {
            let f: Vec<Vec<f64>> = (0..3)
                .map(|_| {
                    let z: Vec<f64> = (0..12).map(|_| rng.sample(StandardNormal)).collect();
                    (0..12).map(|i| (0..=i).map(|j| chol.l()[(i, j)] * z[j]).sum()).collect()
                })
                .collect();
            (0..12).map(|i| log_lik(&[f[0][i], f[1][i], f[2][i]], y[i])).sum()
        })
        .collect();
    let log_py = crate::linalg::log_sum_exp(&logs) - (logs.len() as f64).ln();
    assert!(good.last().unwrap() < &log_py, "ELBO {} above the MC log p(y) {log_py}", good.last().unwrap());
}

/// U4: with Z = X the sparse CAVI fixed point equals that of the full GP with kernel K +
/// jitter I (a dense CAVI written here: q(f^c) = N(V r / 2, V), V = (K^{-1} + diag w)^{-1},
/// computed as K - K W^{1/2} B^{-1} W^{1/2} K, B = I + W^{1/2} K W^{1/2}), to 1e-6.
#[test]
fn sparse_with_z_equal_x_is_the_full_gp() {
    let (x, y, kernels) = tiny_problem(5);
    let jitter = 1e-9;
    let m = method(serde_json::json!({ "local_iters": 20, "jitter": jitter }));
    let mut sparse = full_sparse(&x, &kernels, 3, jitter);
    cavi_elbos(&m, &mut sparse, &x, &y, 100);
    let mg = sparse.marginals(&x);

    let n = 12;
    let mut kf = kernels.class(0).gram(&x);
    (0..n).for_each(|i| kf[(i, i)] += jitter);
    let (mut mean, mut var) = (Array2::<f64>::zeros((n, 3)), Array2::from_shape_fn((n, 3), |(i, _)| kf[(i, i)]));
    let mut alpha = vec![3.0; n];
    for _ in 0..100 {
        let locals: Vec<Local> = (0..n)
            .map(|i| {
                let l = local::update(
                    mean.row(i).as_slice().unwrap(),
                    var.row(i).as_slice().unwrap(),
                    y[i],
                    alpha[i],
                    PoissonRate::Corrected,
                    20,
                    1e-10,
                );
                alpha[i] = l.alpha;
                l
            })
            .collect();
        for c in 0..3 {
            let sw: Vec<f64> = (0..n).map(|i| locals[i].weight(c, y[i]).sqrt()).collect();
            let b = Mat::from_fn(n, n, |i, j| f64::from(u8::from(i == j)) + sw[i] * kf[(i, j)] * sw[j]);
            let bc = Chol::factor(b.as_ref(), "B").unwrap();
            let wk = Mat::from_fn(n, n, |i, j| sw[i] * kf[(i, j)]);
            let s = bc.solve(wk.as_ref());
            let v = Mat::from_fn(n, n, |i, j| kf[(i, j)] - (0..n).map(|k| wk[(k, i)] * s[(k, j)]).sum::<f64>());
            let r: Vec<f64> = (0..n).map(|i| 0.5 * locals[i].resid(c, y[i])).collect();
            for i in 0..n {
                mean[(i, c)] = (0..n).map(|j| v[(i, j)] * r[j]).sum();
                var[(i, c)] = v[(i, i)];
            }
        }
    }
    for i in 0..n {
        for c in 0..3 {
            assert!((mg.mean[(i, c)] - mean[(i, c)]).abs() < 1e-6, "mean ({i}, {c}): {} vs {}", mg.mean[(i, c)], mean[(i, c)]);
            assert!((mg.var[(i, c)] - var[(i, c)]).abs() < 1e-6, "var ({i}, {c}): {} vs {}", mg.var[(i, c)], var[(i, c)]);
        }
    }
}

fn blobs(n_per: usize, c: usize, seed: u64) -> (Array2<f64>, Vec<usize>) {
    let mut rng = Pcg64::seed_from_u64(seed);
    let x = Array2::from_shape_fn((n_per * c, 2), |(i, d)| {
        let a = 2.0 * std::f64::consts::PI * (i % c) as f64 / c as f64;
        1.5 * if d == 0 { a.cos() } else { a.sin() } + 0.5 * rng.sample::<f64, _>(StandardNormal)
    });
    (x, (0..n_per * c).map(|i| i % c).collect())
}

/// U5: one SVI step with |S| = N and rho = 1 is one batch CAVI sweep (same seed, so the same
/// inducing sets; the minibatch visits the rows in another order, so equal to rounding).
#[test]
fn one_svi_step_with_all_rows_and_rho_one_is_one_cavi_sweep() {
    let (x, y) = blobs(10, 3, 8);
    let xt = blobs(3, 3, 9).0;
    let problem = Problem { x: &x, y: &y, n_classes: 3 };
    let kernels = KernelSet::per_class(
        (0..3)
            .map(|c| Box::new(SqExp { log_variance: 0.1 * c as f64, log_lengthscales: vec![0.2], learn_variance: true }) as Box<dyn Kernel>)
            .collect(),
    );
    let run = |settings: serde_json::Value, steps: u64| {
        let mut rng = Pcg64::seed_from_u64(11);
        let mut ctx = FitContext::new(&mut rng, None).with_budget(Some(Budget { iterations: Some(steps), ..Budget::default() }));
        let fitted = method(settings).fit(&problem, &kernels, HyperPolicy::Fixed, &mut ctx).unwrap();
        let p = fitted.predict(&xt, &mut Pcg64::seed_from_u64(1)).unwrap();
        (p.probs, fitted.evidence().unwrap().value)
    };
    for steps in [1, 3] {
        let (pa, ea) = run(serde_json::json!({ "inducing": 7, "batch": "full" }), steps);
        let (pb, eb) = run(serde_json::json!({ "inducing": 7, "batch": 30, "rho": 1.0 }), steps);
        let diff = (&pa - &pb).iter().fold(0.0f64, |a, v| a.max(v.abs()));
        assert!(diff < 1e-10, "{steps} steps: predictions differ by {diff}");
        assert!((ea - eb).abs() < 1e-9 * ea.abs(), "{steps} steps: ELBO {ea} vs {eb}");
        // A step of rho < 1 is a different fit (the test can fail).
        let (pc, _) = run(serde_json::json!({ "inducing": 7, "batch": 30, "rho": 0.5 }), steps);
        assert!((&pa - &pc).iter().any(|v| v.abs() > 1e-6));
    }
}

/// U6: the adjoint-form gradient of L_h against central finite differences, per-class ARD
/// kernels (D = 3, M = 4, |S| = 6, s = 10) and a shared one, at a random q and locals; with
/// respect to the kernels' log-parameters and every class's inducing inputs.
#[test]
fn the_kernel_gradient_matches_finite_differences() {
    let mut rng = Pcg64::seed_from_u64(12);
    let x = Array2::from_shape_fn((6, 3), |_| rng.random_range(-1.0..1.0));
    let y = vec![0, 1, 2, 0, 1, 1];
    let ard =
        |v: f64, l: [f64; 3]| Box::new(SqExp { log_variance: v, log_lengthscales: l.to_vec(), learn_variance: true }) as Box<dyn Kernel>;
    for kernels in [
        KernelSet::per_class(vec![ard(0.2, [0.1, -0.2, 0.3]), ard(-0.3, [0.4, 0.0, -0.1]), ard(0.5, [-0.3, 0.2, 0.2])]),
        KernelSet::shared(ard(0.1, [0.2, -0.1, 0.0])),
    ] {
        let zs: Vec<Array2<f64>> = (0..3).map(|_| Array2::from_shape_fn((4, 3), |_| rng.random_range(-1.0..1.0))).collect();
        let qs: Vec<NaturalGaussian> = (0..3)
            .map(|_| {
                let b = Mat::from_fn(4, 4, |_, _| rng.random_range(-0.5..0.5));
                let prec = Mat::from_fn(4, 4, |i, j| (0..4).map(|k| b[(i, k)] * b[(j, k)]).sum::<f64>() + if i == j { 1.5 } else { 0.0 });
                NaturalGaussian::from_mean_precision((0..4).map(|_| rng.random_range(-1.0..1.0)).collect(), prec).unwrap()
            })
            .collect();
        let sparse = Sparse::new(kernels.clone(), zs, qs, 1e-3).unwrap();
        let mg = sparse.marginals(&x);
        let locals: Vec<Local> = (0..6)
            .map(|j| {
                local::update(
                    mg.mean.row(j).as_slice().unwrap(),
                    mg.var.row(j).as_slice().unwrap(),
                    y[j],
                    3.0,
                    PoissonRate::Corrected,
                    5,
                    1e-10,
                )
            })
            .collect();
        // The objective at kernel log-parameters and inducing inputs packed in one vector,
        // with q(v) held fixed or (`hold_u`) q(u) = L q(v) re-expressed under the moved L.
        let n_kernel = kernels.log_params().len();
        let packed: Vec<f64> = kernels.log_params().into_iter().chain(sparse.classes.iter().flat_map(|g| g.z.iter().copied())).collect();
        let objective = |p: &[f64], hold_u: bool| {
            let zs =
                (0..3).map(|c| Array2::from_shape_vec((4, 3), p[n_kernel + 12 * c..n_kernel + 12 * (c + 1)].to_vec()).unwrap()).collect();
            let mut moved = sparse.moved(kernels.with_log_params(&p[..n_kernel]), zs).unwrap();
            if !hold_u {
                return hyper::objective(&moved, &x, &y, &locals, 10.0);
            }
            for (new, old) in moved.classes.iter_mut().zip(&sparse.classes) {
                new.q = old.q.reexpress(&old.chol, &new.chol).unwrap();
            }
            hyper::objective(&moved, &x, &y, &locals, 10.0) - moved.kl()
        };
        let pack = |g: hyper::HyperGradient| -> Vec<f64> { g.params.into_iter().chain(g.z.iter().flatten().copied()).collect() };
        let got = pack(hyper::gradient(&sparse, &x, &y, &mg, &locals, 10.0, false));
        let want = crate::testing::central_differences(&packed, |p| objective(p, false));
        crate::testing::assert_gradient_close("dL_h / d(log theta, Z)", &got, &want, 1e-6);
        // Holding q(u) fixed (the authors' objective): L_h - KL with q(v) = L^{-1} q(u)
        // re-expressed under each perturbed kernel and Z.
        let got_u = pack(hyper::gradient(&sparse, &x, &y, &mg, &locals, 10.0, true));
        let want_u = crate::testing::central_differences(&packed, |p| objective(p, true));
        crate::testing::assert_gradient_close("d(L_h - KL) / d(log theta, Z) at fixed q(u)", &got_u, &want_u, 1e-6);
        let apart: f64 = got.iter().zip(&got_u).map(|(a, b)| (a - b).abs()).sum();
        assert!(apart > 1e-3, "holding q(u) or q(v) fixed must give different gradients");
        assert!(got[n_kernel..].iter().any(|v| v.abs() > 1e-3), "the inducing inputs' gradient is not trivially zero");
    }
}

/// U7: the predictive against the notes' §7.4 table: the three Taylor variants to 1e-4, Monte
/// Carlo (2e5 draws) within 0.003.
// 0.3926 in the table is an oracle value, not an approximation of pi/8.
#[allow(clippy::approx_constant)]
#[test]
fn the_predictive_matches_the_oracle_table() {
    // (mean, var, [MC, Taylor correct, Taylor printed, Taylor 2018 code]).
    type Case = (Vec<f64>, Vec<f64>, [Vec<f64>; 4]);
    let mut cases: Vec<Case> = vec![
        (
            vec![1.0, 0.0, -1.0],
            vec![0.5; 3],
            [vec![0.4789, 0.3311, 0.1900], vec![0.4788, 0.3298, 0.1914], vec![0.4809, 0.3307, 0.1884], vec![0.4745, 0.3280, 0.1975]],
        ),
        (
            vec![2.0, -1.0, -1.0, 0.5],
            vec![1.0, 0.2, 2.0, 0.5],
            [
                vec![0.4166, 0.1364, 0.1488, 0.2982],
                vec![0.4125, 0.1353, 0.1587, 0.2935],
                vec![0.4121, 0.1354, 0.1592, 0.2933],
                vec![0.3926, 0.1390, 0.1867, 0.2816],
            ],
        ),
    ];
    let ten = |a: f64, b: f64| std::iter::once(a).chain(std::iter::repeat_n(b, 9)).collect::<Vec<f64>>();
    cases.push((ten(3.0, -3.0), vec![1.0; 10], [ten(0.6075, 0.0436), ten(0.6002, 0.0444), ten(0.6282, 0.0413), ten(0.5659, 0.0482)]));
    let mut rng = Pcg64::seed_from_u64(13);
    for (mean, var, [mc, taylor, printed, code]) in &cases {
        for (rule, want, tol) in
            [(PredictRule::Taylor, taylor, 1e-4), (PredictRule::TaylorPrinted, printed, 1e-4), (PredictRule::TaylorCode2018, code, 1e-4)]
        {
            let got = predict::probs(rule, mean, var, &[]);
            for (g, w) in got.iter().zip(want) {
                assert!((g - w).abs() < tol, "{rule:?} at {mean:?}: {got:?} vs {want:?}");
            }
        }
        let draws = predict::normal_draws(200_000, mean.len(), &mut rng);
        let got = predict::probs(PredictRule::MonteCarlo, mean, var, &draws);
        for (g, w) in got.iter().zip(mc) {
            assert!((g - w).abs() < 0.003, "MC at {mean:?}: {got:?} vs {mc:?}");
        }
        assert!((got.iter().sum::<f64>() - 1.0).abs() < 1e-12);
    }
}

/// Batch CAVI with learned kernels on separable blobs: the training error is small, the final
/// ELBO is above the first checkpoint's and above that of the same 30 steps with the kernel
/// held fixed (a coarse end-to-end check of the loop and of the kernel steps in it).
#[test]
fn a_fit_separates_blobs() {
    let (x, y) = blobs(15, 3, 14);
    let problem = Problem { x: &x, y: &y, n_classes: 3 };
    let kernels = KernelSet::shared_se(&SqExp { log_variance: 0.0, log_lengthscales: vec![0.0], learn_variance: true });
    let m = method(serde_json::json!({ "inducing": 10, "batch": "full", "hyper_every": 1, "adam_lr": 0.05 }));
    let budget = Some(Budget { iterations: Some(30), ..Budget::default() });
    let mut rng = Pcg64::seed_from_u64(15);
    // Every checkpoint traces the full-data ELBO as its objective; the scores are not needed.
    let no_scores = |_: &dyn Fitted, _: u64| Ok(BTreeMap::new());
    let mut ctx = FitContext::new(&mut rng, None).with_budget(budget).with_checkpoints(Checkpoints::Every { every: 1 }, &no_scores);
    let fitted = m.fit(&problem, &kernels, HyperPolicy::Learn, &mut ctx).unwrap();
    let first = ctx.trace().iter().find(|t| t.name == "objective").expect("a checkpoint at step 1").value;
    drop(ctx);
    let fixed = {
        let mut rng = Pcg64::seed_from_u64(15);
        let mut ctx = FitContext::new(&mut rng, None).with_budget(budget);
        m.fit(&problem, &kernels, HyperPolicy::Fixed, &mut ctx).unwrap().evidence().unwrap().value
    };
    // The ELBO is deterministic here; 1 nat is far above rounding and a fifth of what learning
    // the kernel gains on this problem (about 5 nats either way), so a loop whose kernel steps
    // did nothing (or went the wrong way) fails.
    let last = fitted.evidence().unwrap().value;
    assert!(last > first + 1.0, "final ELBO {last} vs {first} at the first checkpoint");
    assert!(last > fixed + 1.0, "learned-kernel ELBO {last} vs {fixed} with the kernel fixed");
    let p = fitted.predict(&x, &mut rng).unwrap();
    p.validate(x.nrows(), problem.n_classes).unwrap();
    let wrong = (0..x.nrows()).filter(|&i| crate::linalg::argmax(p.probs.row(i).as_slice().unwrap()) != y[i]).count();
    assert!(wrong <= 3, "{wrong} of 45 training points misclassified");
    assert_ne!(fitted.kernels().log_params(), kernels.log_params(), "the kernel did not move");
}

/// `learn_inducing`: batch CAVI with Adam on Z alone (kernel fixed) moves every class's
/// inducing inputs and ends at a higher full-data ELBO than the same steps with Z held at its
/// k-means start, on blobs where 2 inducing inputs per class cannot sit everywhere.
#[test]
fn learned_inducing_inputs_move_and_raise_the_elbo() {
    let (x, y) = blobs(15, 3, 16);
    let problem = Problem { x: &x, y: &y, n_classes: 3 };
    let kernels = KernelSet::shared_se(&SqExp { log_variance: 0.0, log_lengthscales: vec![-0.5], learn_variance: true });
    let fit = |learn_inducing: bool| {
        let mut rng = Pcg64::seed_from_u64(17);
        let mut ctx = FitContext::new(&mut rng, None).with_budget(Some(Budget { iterations: Some(80), ..Budget::default() }));
        let m = method(
            serde_json::json!({ "inducing": 2, "batch": "full", "hyper_every": 1, "adam_lr": 0.05, "learn_inducing": learn_inducing }),
        );
        m.fit(&problem, &kernels, HyperPolicy::Fixed, &mut ctx).unwrap()
    };
    let (fixed, learned) = (fit(false), fit(true));
    assert_eq!(fixed.kernels().log_params(), learned.kernels().log_params(), "the kernel is fixed");
    for (z0, z1) in fixed.inducing_inputs().iter().zip(learned.inducing_inputs()) {
        let moved = (z0 - &z1).iter().map(|v| v.abs()).fold(0.0, f64::max);
        assert!(moved > 0.05, "a class's inducing inputs moved only {moved}");
    }
    let (e0, e1) = (fixed.evidence().unwrap().value, learned.evidence().unwrap().value);
    assert!(e1 > e0 + 1e-3, "learned Z: ELBO {e1}, fixed Z: {e0}");
}

/// `rho: adaptive` (Ranganath et al. 2013): with every row in each "minibatch" the targets
/// carry no sampling noise and the rate stays near a full step; with 3 of 30 rows it falls.
/// Either way the fit improves on the prior's ELBO.
#[test]
fn the_adaptive_rate_steps_fully_without_minibatch_noise_and_less_with_it() {
    let (x, y) = blobs(10, 3, 16);
    let problem = Problem { x: &x, y: &y, n_classes: 3 };
    let kernels = KernelSet::shared_se(&SqExp { log_variance: 0.0, log_lengthscales: vec![0.0], learn_variance: true });
    // `steps` = 0 stops before the first step: the evidence is then the ELBO at q(u) = p(u)
    // (the fit's start), with the same inducing inputs and kernel as the runs that step.
    let run = |batch: usize, steps: u64| {
        let mut rng = Pcg64::seed_from_u64(17);
        let mut ctx = FitContext::new(&mut rng, None).with_budget(Some(Budget { iterations: Some(steps.max(1)), ..Budget::default() }));
        let m = method(serde_json::json!({ "inducing": 8, "batch": batch, "rho": "adaptive", "max_iters": steps }));
        let fitted = m.fit(&problem, &kernels, HyperPolicy::Fixed, &mut ctx).unwrap();
        (fitted.diagnostics().numbers["rho_last"], fitted.evidence().unwrap().value)
    };
    let (rho_all, elbo_all) = run(30, 5);
    let (rho_few, elbo_few) = run(3, 200);
    assert!(rho_all > 0.5 && rho_all <= 1.0, "all rows: rho {rho_all}");
    assert!(rho_few < 0.5 * rho_all, "3 of 30 rows: rho {rho_few} against {rho_all}");
    // The ELBO is computed on all rows, without sampling; both runs end about 9 nats above
    // the start, so 1 nat is far above rounding, and a run that did not move q (or moved it
    // the wrong way) fails.
    for (what, prior, elbo) in [("all rows", run(30, 0).1, elbo_all), ("3 rows", run(3, 0).1, elbo_few)] {
        assert!(elbo > prior + 1.0, "{what}: ELBO {elbo} vs {prior} at q = prior");
    }
    assert_eq!(method(serde_json::json!({ "rho": "adaptive" })).params.rho, super::Rho::Adaptive(super::AdaptiveRho::Adaptive));
    assert!(super::ScmgpcParams::from_settings(&serde_json::json!({ "rho": "adaptve" })).is_err(), "a misspelt rate is an error");
}

/// `also_predict`: each alternative of one fitted model is that rule's predictive of the same
/// q (the rule's own formula at the model's marginals; Monte Carlo from the draws the main
/// Monte Carlo rule would use, so equal to it bit for bit), and a Taylor alternative differs
/// from the main code2018 rule (else the test could not tell them apart).
#[test]
fn every_alternative_rule_scores_the_same_fit() {
    let (x, y) = blobs(10, 3, 4);
    let problem = Problem { x: &x, y: &y, n_classes: 3 };
    let kernels = KernelSet::shared_se(&SqExp { log_variance: 0.0, log_lengthscales: vec![0.0], learn_variance: true });
    let fit = |settings: serde_json::Value| {
        let mut rng = Pcg64::seed_from_u64(5);
        let mut ctx = FitContext::new(&mut rng, None).with_budget(Some(Budget { iterations: Some(5), ..Budget::default() }));
        method(settings).fit(&problem, &kernels, HyperPolicy::Fixed, &mut ctx).unwrap()
    };
    let base = serde_json::json!({ "inducing": 8, "batch": "full", "predict": "taylor_code2018", "also_predict": ["taylor", "monte_carlo"], "predict_samples": 500 });
    let fitted = fit(base.clone());
    let p = fitted.predict(&x, &mut Pcg64::seed_from_u64(9)).unwrap();
    p.validate(x.nrows(), 3).unwrap();
    assert_eq!(p.alternatives.keys().collect::<Vec<_>>(), ["monte_carlo", "taylor"]);
    for rule in ["taylor", "monte_carlo"] {
        let mut alone = base.clone();
        alone["predict"] = rule.into();
        alone["also_predict"] = serde_json::json!([]);
        let q = fit(alone).predict(&x, &mut Pcg64::seed_from_u64(9)).unwrap();
        assert!(q.alternatives.is_empty());
        assert_eq!(p.alternatives[rule], q.probs, "{rule}");
    }
    let gap = (&p.alternatives["taylor"] - &p.probs).iter().fold(0.0f64, |a, v| a.max(v.abs()));
    assert!(gap > 1e-6, "taylor and taylor_code2018 agree to {gap}: the test cannot tell them apart");
}

/// The printed Eq. 6 (the branch the paper-fidelity runs use) at one point, against the
/// authors' formula evaluated in 30-digit arithmetic (mpmath): gamma = beta / (2 Gamma(alpha)
/// cosh(b / 2)) exp(-alpha - (1 - alpha) psi(alpha) - m / 2) at alpha = beta = 3, m = 0.4,
/// b = 1.1 is 0.16757880733514935; the corrected rate e^psi(alpha) / (2 beta cosh(b / 2))
/// e^(-m / 2) there is 0.29725548869052820.
#[test]
fn the_printed_and_corrected_poisson_rates_match_their_formulas_at_one_point() {
    // b = sqrt(v + m^2) = 1.1 with m = 0.4; C = 3 classes make beta = 3; one round from
    // alpha = 3 computes gamma at alpha = 3.
    let (m, v) = ([0.4, 0.4, 0.4], [1.05, 1.05, 1.05]);
    let printed = local::update(&m, &v, 0, 3.0, PoissonRate::Printed, 1, 0.0);
    let corrected = local::update(&m, &v, 0, 3.0, PoissonRate::Corrected, 1, 0.0);
    assert!((printed.gamma[0] - 0.16757880733514935).abs() < 1e-14, "{}", printed.gamma[0]);
    assert!((corrected.gamma[0] - 0.29725548869052820).abs() < 1e-14, "{}", corrected.gamma[0]);
}

/// The N / |S| scaling of a minibatch's targets: over one epoch of minibatches (7 rows a batch
/// of 24, so the last is short), each batch's data part (theta1, Lambda - I) weighted by
/// |S| / N sums to the full data's, as an unbiased estimate must.
#[test]
fn minibatch_targets_weighted_over_an_epoch_sum_to_the_full_data_targets() {
    let (x, y) = blobs(8, 3, 21);
    let n = x.nrows();
    let kernels = KernelSet::shared_se(&SqExp { log_variance: 0.3, log_lengthscales: vec![0.1], learn_variance: true });
    let m = method(serde_json::json!({ "inducing": 6 }));
    let z = x.slice(ndarray::s![0..6, ..]).to_owned();
    let sparse = Sparse::new(kernels, vec![z; 3], (0..3).map(|_| NaturalGaussian::standard(6)).collect(), 1e-3).unwrap();
    let mut alpha = vec![3.0; n];
    let (mg, locals) = local_step(&m, &sparse, &x, &y, &mut alpha);
    let full = super::global::targets(&mg, &y, &locals, 1.0);
    let mut batches = crate::scalable::minibatch::Minibatches::new(n, 7, 5);
    let mut sum: Vec<(Vec<f64>, Mat<f64>)> = full.iter().map(|(t, p)| (vec![0.0; t.len()], Mat::zeros(p.nrows(), p.ncols()))).collect();
    let mut sizes = Vec::new();
    for _ in 0..batches.batches_per_epoch() {
        let rows = batches.next_batch();
        sizes.push(rows.len());
        let xb = x.select(ndarray::Axis(0), &rows);
        let yb: Vec<usize> = rows.iter().map(|&i| y[i]).collect();
        let mut alpha_b = vec![3.0; rows.len()];
        let (mgb, lb) = local_step(&m, &sparse, &xb, &yb, &mut alpha_b);
        let w = rows.len() as f64 / n as f64;
        for (acc, (t, p)) in sum.iter_mut().zip(super::global::targets(&mgb, &yb, &lb, n as f64 / rows.len() as f64)) {
            acc.0.iter_mut().zip(&t).for_each(|(a, v)| *a += w * v);
            acc.1 += Mat::<f64>::from_fn(p.nrows(), p.ncols(), |i, k| w * (p[(i, k)] - if i == k { 1.0 } else { 0.0 }));
        }
    }
    assert_eq!(sizes, vec![7, 7, 7, 3]);
    for ((t, p), (st, sp)) in full.iter().zip(&sum) {
        for (a, b) in t.iter().zip(st) {
            assert!((a - b).abs() < 1e-12 * (1.0 + a.abs()), "theta1 {a} vs {b}");
        }
        for i in 0..p.nrows() {
            for k in 0..p.ncols() {
                let a = p[(i, k)] - if i == k { 1.0 } else { 0.0 };
                assert!((a - sp[(i, k)]).abs() < 1e-12 * (1.0 + a.abs()), "Lambda - I ({i}, {k}): {a} vs {}", sp[(i, k)]);
            }
        }
    }
}
