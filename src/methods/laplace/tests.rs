//! Laplace (logit) against closed forms, dense reference computations and finite differences.
use super::newton::*;
use super::*;
use crate::kernels::{KernelParams, LengthScale, SqExp};
use crate::likelihoods::{Likelihood, Softmax};
use crate::linalg::matvec;
use crate::linalg::Chol;
use crate::methods::optimize::minimize_lbfgs;
use faer::Mat;
use ndarray::Array2;
use rand::RngExt;
use rand::SeedableRng;
use rand_distr::StandardNormal;
use rand_pcg::Pcg64;

/// A tiny 3-class problem: clusters in 2-D.
fn tiny(n_per: usize, seed: u64) -> (Array2<f64>, Vec<usize>) {
    let mut rng = Pcg64::seed_from_u64(seed);
    let centres = [[0.0, 0.0], [1.5, 0.5], [0.2, 1.6]];
    let mut x = Array2::zeros((3 * n_per, 2));
    let mut y = Vec::new();
    for c in 0..3 {
        for k in 0..n_per {
            let i = c * n_per + k;
            x[(i, 0)] = centres[c][0] + 0.6 * rng.sample::<f64, _>(StandardNormal);
            x[(i, 1)] = centres[c][1] + 0.6 * rng.sample::<f64, _>(StandardNormal);
            y.push(c);
        }
    }
    (x, y)
}

fn kernel(ard: bool, ls: f64, var: f64) -> SqExp {
    KernelParams { ard, lengthscale: LengthScale::One(ls), variance: var, learn_variance: true, ..Default::default() }.build(2).unwrap()
}

#[test]
fn evidence_gradient_matches_finite_differences() {
    let (x, y) = tiny(5, 1);
    let problem = Problem { x: &x, y: &y, n_classes: 3 };
    let params = LaplaceParams { newton_tol: 1e-14, max_newton_iters: 200, ..Default::default() };
    for (ard, ls, var) in [(false, 0.8, 2.0), (true, 1.3, 5.0)] {
        let mut kern = kernel(ard, ls, var);
        if ard {
            kern.log_lengthscales[1] += 0.4;
        }
        let (_, grad, _) = evidence_and_grad(&kern, &problem, &params, &[]).unwrap();
        let p0 = kern.log_params();
        for j in 0..p0.len() {
            let h = 1e-5;
            let mut pp = p0.clone();
            pp[j] += h;
            let mut pm = p0.clone();
            pm[j] -= h;
            let vp = evidence_and_grad(&kern.with_log_params(&pp), &problem, &params, &[]).unwrap().0;
            let vm = evidence_and_grad(&kern.with_log_params(&pm), &problem, &params, &[]).unwrap().0;
            let fd = (vp - vm) / (2.0 * h);
            assert!((fd - grad[j]).abs() < 1e-6 * (1.0 + fd.abs()), "ard={ard} param {j}: analytic {} vs fd {fd}", grad[j]);
        }
    }
}

#[test]
fn the_mode_derivative_matches_finite_differences() {
    // da-hat/dtheta (the warm start's prediction) against central differences of the mode's a.
    let (x, y) = tiny(5, 3);
    let problem = Problem { x: &x, y: &y, n_classes: 3 };
    let params = LaplaceParams { newton_tol: 1e-15, max_newton_iters: 200, ..Default::default() };
    let mut kern = kernel(true, 1.1, 3.0);
    kern.log_lengthscales[1] -= 0.3;
    let (_, _, mode) = evidence_and_grad(&kern, &problem, &params, &[]).unwrap();
    let da = mode.da_dtheta.as_ref().expect("set by evidence_and_grad");
    let p0 = kern.log_params();
    for j in 0..p0.len() {
        let h = 1e-5;
        let at = |s: f64| {
            let mut p = p0.clone();
            p[j] += s * h;
            find_mode(&kern.with_log_params(&p).gram(&x), &y, 3, &params, &[]).unwrap().a
        };
        let (ap, am) = (at(1.0), at(-1.0));
        for k in 0..ap.len() {
            let fd = (ap[k] - am[k]) / (2.0 * h);
            assert!((fd - da[(k, j)]).abs() < 1e-6 * (1.0 + fd.abs()), "param {j} entry {k}: {} vs fd {fd}", da[(k, j)]);
        }
    }
}

#[test]
fn the_default_search_ends_at_the_tight_searchs_optimum() {
    // hyper_tol 1e-6 nats (the default) against 1e-10 (the old default) on an ARD problem: the
    // evidence within 1e-6 relative, the log-parameters within 1e-4, no more evaluations.
    let (x, y) = tiny(8, 6);
    let problem = Problem { x: &x, y: &y, n_classes: 3 };
    let start = KernelSet::shared_se(&kernel(true, 1.0, 1.0));
    let fit = |params: LaplaceParams| {
        let mut rng = Pcg64::seed_from_u64(1);
        let mut ctx = FitContext::new(&mut rng, None);
        params.check().unwrap().fit(&problem, &start, HyperPolicy::Learn, &mut ctx).unwrap()
    };
    let tight = fit(LaplaceParams { hyper_tol: 1e-10, ..Default::default() });
    let default = fit(LaplaceParams::default());
    let (et, ed) = (tight.evidence().unwrap().value, default.evidence().unwrap().value);
    assert!((et - ed).abs() <= 1e-6 * et.abs(), "{ed} vs {et}");
    let evals = |f: &dyn Fitted| f.diagnostics().iterations.unwrap();
    assert!(evals(&*default) <= evals(&*tight), "{} vs {}", evals(&*default), evals(&*tight));
    // The log-parameters move by O(sqrt(tol / curvature)) at such a stop: 1e-5 to 1e-6 here.
    for (a, b) in default.kernels().log_params().iter().zip(tight.kernels().log_params()) {
        assert!((a - b).abs() < 1e-4, "learned log-parameter {a} vs {b}");
    }
}

#[test]
fn mode_and_evidence_match_a_dense_independent_computation() {
    let (x, y) = tiny(4, 2);
    let n = x.nrows();
    let C = 3;
    let kern = kernel(false, 1.0, 3.0);
    let K = kern.gram(&x);
    let params = LaplaceParams { newton_tol: 1e-14, ..Default::default() };
    let mode = find_mode(&K, &y, C, &params, &[]).unwrap();

    // The exact mode of Psi(f) = -1/2 f^T Kbig^{-1} f + sum log softmax, found by a generic
    // optimiser on the dense nC-dimensional problem.
    let Kbig = dense_block_diag(K.as_ref(), C);
    let Kchol = Chol::factor(Kbig.as_ref(), "Kbig").unwrap();
    let neg_psi = |f: &[f64]| -> Result<(f64, Vec<f64>), FitError> {
        let kinv_f = Kchol.solve_vec(f);
        let mut v = 0.5 * f.iter().zip(&kinv_f).map(|(a, b)| a * b).sum::<f64>();
        let mut g = kinv_f.clone();
        for i in 0..n {
            let fi: Vec<f64> = (0..C).map(|c| f[c * n + i]).collect();
            v -= Softmax.log_prob(&fi, y[i]);
            let gi = Softmax.grad(&fi, y[i]);
            for c in 0..C {
                g[c * n + i] -= gi[c];
            }
        }
        Ok((v, g))
    };
    let opt = minimize_lbfgs(&neg_psi, &vec![0.0; n * C], &vec![true; n * C], 2000, 1e-10).unwrap();
    for k in 0..n * C {
        assert!((opt.x[k] - mode.f[k]).abs() < 1e-4, "mode entry {k}: {} vs {}", opt.x[k], mode.f[k]);
    }
    assert!((-opt.value - mode.psi).abs() < 1e-8);

    // log q = Psi - 1/2 (log |Kbig| + log |Kbig^{-1} + W|), W block diagonal per datum.
    let Kinv = Kchol.solve(Mat::<f64>::identity(n * C, n * C).as_ref());
    let mut A = Kinv.clone();
    for i in 0..n {
        let fi: Vec<f64> = (0..C).map(|c| mode.f[c * n + i]).collect();
        let W = Softmax.neg_hessian(&fi);
        for c in 0..C {
            for d in 0..C {
                A[(c * n + i, d * n + i)] += W[c][d];
            }
        }
    }
    let logdet = Kchol.log_det() + Chol::factor(A.as_ref(), "A").unwrap().log_det();
    let want = mode.psi - 0.5 * logdet;
    assert!((mode.log_evidence - want).abs() < 1e-7, "{} vs {want}", mode.log_evidence);
}

#[test]
fn predictions_match_brute_force_monte_carlo_over_the_joint_posterior() {
    let (x, y) = tiny(4, 3);
    let n = x.nrows();
    let C = 3;
    let kern = kernel(false, 1.0, 3.0);
    let mut rng = Pcg64::seed_from_u64(9);
    let mut ctx = FitContext::new(&mut rng, None);
    let method = LaplaceParams { mc_samples: 200_000, ..Default::default() }.check().unwrap();
    let model = method.fit_model(&Problem { x: &x, y: &y, n_classes: C }, &kern, HyperPolicy::Fixed, &mut ctx).unwrap();
    let xt = ndarray::array![[0.1, 0.2], [1.0, 1.0], [3.0, -2.0]];
    let mut rng2 = Pcg64::seed_from_u64(10);
    let p = model.predict_proba(&xt, &mut rng2).unwrap();

    // Brute force: draw f ~ N(f-hat, (Kbig^{-1} + W)^{-1}) densely, then f* | f from the GP
    // conditional, and average the softmax.
    let K = kern.gram(&x);
    let Kbig = dense_block_diag(K.as_ref(), C);
    let Kchol = Chol::factor_with_jitter(Kbig.as_ref(), "Kbig").unwrap();
    let mut A = Kchol.solve(Mat::<f64>::identity(n * C, n * C).as_ref());
    for i in 0..n {
        let fi: Vec<f64> = (0..C).map(|c| model.mode.f[c * n + i]).collect();
        let W = Softmax.neg_hessian(&fi);
        for c in 0..C {
            for d in 0..C {
                A[(c * n + i, d * n + i)] += W[c][d];
            }
        }
    }
    let post_cov = Chol::factor(A.as_ref(), "A").unwrap().solve(Mat::<f64>::identity(n * C, n * C).as_ref());
    let post_chol = Chol::factor_with_jitter(post_cov.as_ref(), "post").unwrap();
    let Kchol_small = Chol::factor_with_jitter(K.as_ref(), "K").unwrap();
    let Ks = kern.cross(&x, &xt);
    let kinv_ks = Kchol_small.solve(Ks.as_ref()); // [n, m]
    let mut rng3 = Pcg64::seed_from_u64(11);
    let draws = 400_000;
    // Sums of p_c(f*) and of its square per test point, for the mean and its standard error.
    let (mut acc, mut acc2) = (vec![vec![0.0; C]; xt.nrows()], vec![vec![0.0; C]; xt.nrows()]);
    for _ in 0..draws {
        let z: Vec<f64> = (0..n * C).map(|_| rng3.sample::<f64, _>(StandardNormal)).collect();
        let lz = matvec(post_chol.l(), &z);
        let f: Vec<f64> = (0..n * C).map(|k| model.mode.f[k] + lz[k]).collect();
        for j in 0..xt.nrows() {
            let cond_var = kern.diag(&xt)[j] - (0..n).map(|i| Ks[(i, j)] * kinv_ks[(i, j)]).sum::<f64>();
            let fs: Vec<f64> = (0..C)
                .map(|c| {
                    let mean: f64 = (0..n).map(|i| kinv_ks[(i, j)] * f[c * n + i]).sum();
                    mean + cond_var.max(0.0).sqrt() * rng3.sample::<f64, _>(StandardNormal)
                })
                .collect();
            for (c, pc) in Softmax.probs(&fs).iter().enumerate() {
                acc[j][c] += pc;
                acc2[j][c] += pc * pc;
            }
        }
    }
    // Both estimate E[p_c(f*)] under the Laplace posterior, independently. The brute force's
    // variance is Var(p_c) / 400000, Var(p_c) from its sample. The method averages 100000
    // antithetic pairs (g(z) + g(-z)) / 2, each of variance at most Var(p_c) (the mean of two
    // equally distributed terms), so its variance is at most Var(p_c) / 100000.
    let pairs = method.params.mc_samples.div_ceil(2) as f64;
    for j in 0..xt.nrows() {
        assert!((p.row(j).sum() - 1.0).abs() < 1e-12);
        for c in 0..C {
            let mean = acc[j][c] / draws as f64;
            let var = (acc2[j][c] - draws as f64 * mean * mean) / (draws - 1) as f64;
            let se = (var / draws as f64 + var / pairs).sqrt();
            assert!((p[(j, c)] - mean).abs() < 5.0 * se, "point {j} class {c}: {} vs {mean} (combined se {se})", p[(j, c)]);
        }
    }
}

#[test]
fn a_warm_start_finds_the_same_mode() {
    let (x, y) = tiny(5, 5);
    let params = LaplaceParams { newton_tol: 1e-14, ..Default::default() };
    let near = find_mode(&kernel(false, 0.7, 2.0).gram(&x), &y, 3, &params, &[]).unwrap();
    let K = kernel(false, 1.0, 3.0).gram(&x);
    let cold = find_mode(&K, &y, 3, &params, &[]).unwrap();
    let warm = find_mode(&K, &y, 3, &params, &[&near.a]).unwrap();
    for (a, b) in warm.f.iter().zip(&cold.f) {
        assert!((a - b).abs() < 1e-6);
    }
    assert!((warm.log_evidence - cold.log_evidence).abs() < 1e-9);
}

#[test]
fn learning_hyperparameters_raises_the_evidence() {
    let (x, y) = tiny(6, 4);
    let problem = Problem { x: &x, y: &y, n_classes: 3 };
    let start = kernel(true, 3.0, 0.5);
    let method = LaplaceParams::default().check().unwrap();
    let mut rng = Pcg64::seed_from_u64(1);
    let mut ctx = FitContext::new(&mut rng, None);
    let start = KernelSet::shared_se(&start);
    let fixed = method.fit(&problem, &start, HyperPolicy::Fixed, &mut ctx).unwrap();
    let learned = method.fit(&problem, &start, HyperPolicy::Learn, &mut ctx).unwrap();
    assert!(learned.evidence().unwrap().value > fixed.evidence().unwrap().value + 1e-3);
    assert!(!ctx.trace().is_empty());
    assert_eq!(learned.diagnostics().stop_reason, Some(crate::methods::StopReason::Converged));
    // The search ends where the evidence is stationary: its central finite differences (tight
    // Newton modes, independent of the analytic gradient the search follows) are a small
    // fraction of those at the start.
    let fd_grad = |log_params: &[f64]| -> Vec<f64> {
        let tight = LaplaceParams { newton_tol: 1e-14, ..Default::default() };
        crate::testing::central_differences(log_params, |p| {
            find_mode(&start.class(0).with_log_params(p).gram(&x), &y, 3, &tight, &[]).unwrap().log_evidence
        })
    };
    let norm = |g: Vec<f64>| g.iter().map(|v| v * v).sum::<f64>().sqrt();
    let (g_start, g_end) = (norm(fd_grad(&start.log_params())), norm(fd_grad(&learned.kernels().log_params())));
    assert!(g_end < 1e-2 * g_start, "gradient norm {g_end} at the learned point, {g_start} at the start");
}

/// I_C (x) K as a dense matrix (tests only).
fn dense_block_diag(K: faer::MatRef<'_, f64>, C: usize) -> Mat<f64> {
    let n = K.nrows();
    Mat::from_fn(n * C, n * C, |i, j| if i / n == j / n { K[(i % n, j % n)] } else { 0.0 })
}

/// `also_predict: [plug_in]` is the softmax of the latent predictive mean k*^T K^-1 f-hat
/// (GPML eq. 3.21 with f-hat at the mode), computed densely here; the main Monte Carlo
/// predictive is unchanged by asking for it.
#[test]
fn the_plug_in_alternative_is_the_softmax_of_the_predictive_mean() {
    let (x, y) = tiny(4, 3);
    let (n, C) = (x.nrows(), 3);
    let kern = kernel(false, 1.0, 3.0);
    let problem = Problem { x: &x, y: &y, n_classes: C };
    let fit = |also: Vec<crate::methods::AlsoPredict>| {
        let mut rng = Pcg64::seed_from_u64(9);
        let mut ctx = FitContext::new(&mut rng, None);
        LaplaceParams { also_predict: also, ..Default::default() }
            .check()
            .unwrap()
            .fit_model(&problem, &kern, HyperPolicy::Fixed, &mut ctx)
            .unwrap()
    };
    let (with, without) = (fit(vec![crate::methods::AlsoPredict::PlugIn]), fit(vec![]));
    let xt = ndarray::array![[0.1, 0.2], [1.0, 1.0], [3.0, -2.0]];
    let p = with.predict(&xt, &mut Pcg64::seed_from_u64(10)).unwrap();
    p.validate(3, C).unwrap();
    assert_eq!(p.probs, without.predict_proba(&xt, &mut Pcg64::seed_from_u64(10)).unwrap());
    let kinv_ks = Chol::factor_with_jitter(kern.gram(&x).as_ref(), "K").unwrap().solve(kern.cross(&x, &xt).as_ref());
    for j in 0..xt.nrows() {
        let mean: Vec<f64> = (0..C).map(|c| (0..n).map(|i| kinv_ks[(i, j)] * with.mode.f[c * n + i]).sum()).collect();
        let want = Softmax.probs(&mean);
        for c in 0..C {
            assert!((p.alternatives["plug_in"][(j, c)] - want[c]).abs() < 1e-8, "point {j} class {c}");
        }
    }
}

/// The final fit's diagnostics for `settings` (a shared isotropic kernel of variance `var`).
fn fit_diagnostics(
    x: &Array2<f64>,
    y: &[usize],
    var: f64,
    settings: serde_json::Value,
    hyper: crate::methods::HyperPolicy,
) -> crate::methods::Diagnostics {
    use crate::methods::{build, FitContext};
    let problem = Problem { x, y, n_classes: y.iter().max().unwrap() + 1 };
    let kernels = crate::kernels::KernelSet::shared(Box::new(kernel(false, 1.0, var)));
    let method = build("laplace", &settings).unwrap();
    let mut rng = Pcg64::seed_from_u64(1);
    let mut ctx = FitContext::new(&mut rng, None);
    method.fit(&problem, &kernels, hyper, &mut ctx).unwrap().diagnostics().clone()
}

/// A mode search cut off by `max_newton_iters` is flagged, not passed off as the mode: one
/// Newton step from f = 0 cannot meet the tolerance on this problem, the default budget does
/// (the final fit's `newton_converged`, and the search's count of cut-off evaluations), for
/// both likelihoods (the probit search is the logit one's: it counts the same way).
#[test]
fn a_newton_search_cut_short_is_flagged() {
    use crate::methods::HyperPolicy;
    let (x, y) = tiny(5, 3);
    let keep: Vec<usize> = (0..y.len()).filter(|&i| y[i] < 2).collect();
    let (x2, y2) = (x.select(ndarray::Axis(0), &keep), keep.iter().map(|&i| y[i]).collect::<Vec<_>>());
    for (x, y, likelihood) in [(&x, &y, "logit"), (&x2, &y2, "probit")] {
        let diagnostics = |mut settings: serde_json::Value, hyper| {
            settings["likelihood"] = likelihood.into();
            fit_diagnostics(x, y, 4.0, settings, hyper).numbers
        };
        let cut = diagnostics(serde_json::json!({ "max_newton_iters": 1 }), HyperPolicy::Fixed);
        assert_eq!((cut["newton_iterations"], cut["newton_converged"]), (1.0, 0.0), "{likelihood}");
        let full = diagnostics(serde_json::json!({}), HyperPolicy::Fixed);
        assert_eq!(full["newton_converged"], 1.0, "{likelihood}: {full:?}");
        let learned = diagnostics(serde_json::json!({ "max_newton_iters": 1, "max_hyper_iters": 3 }), HyperPolicy::Learn);
        assert!(learned["hyper_newton_unconverged"] >= 1.0, "{likelihood}: {learned:?}");
        assert_eq!(learned["hyper_newton_steps"], learned["hyper_evaluations"], "{likelihood}: one step an evaluation");
        let learned = diagnostics(serde_json::json!({ "max_hyper_iters": 3 }), HyperPolicy::Learn);
        assert_eq!(learned["hyper_newton_unconverged"], 0.0, "{likelihood}: {learned:?}");
        assert!(learned["hyper_newton_steps"] > learned["hyper_evaluations"], "{likelihood}: {learned:?}");
    }
}

/// A damped step's small change of Psi is not convergence: only a full Newton step's is.
/// Psi = -(f0 - 10)^2 - 1e6 f1^2 (maximum 0 at (10, 0)) with a poor step (0.1% of the way in
/// f0, +100 in f1): 30 halvings leave it a change of about 8.5e-9, below newton_tol (1 + |Psi|)
/// = 1e-8 at f = 0, which the rule that read the taken step's change declared convergence.
/// Such a step moves 2^-30 of the way, so Psi barely moves.
#[test]
fn newton_ascent_is_not_converged_by_damped_steps() {
    let params = LaplaceParams { max_newton_iters: 5, ..Default::default() };
    let objective = |_a: &[f64], f: &[f64]| -(f[0] - 10.0).powi(2) - 1e6 * f[1] * f[1];
    let step = |_a: &[f64], f: &[f64]| -> Result<Vec<f64>, FitError> { Ok(vec![f[0] + 0.001 * (10.0 - f[0]), f[1] + 100.0]) };
    let ascent = newton_ascent(2, |a| a.to_vec(), objective, step, &params, &[]).unwrap();
    assert!(!ascent.converged && ascent.iters == 5, "declared converged at {:?}", ascent.f);
    assert!(ascent.psi >= -100.0 - 1e-6, "Psi fell from -100 to {}", ascent.psi);
    // A good (exact Newton) step reaches the maximum; the next full step changes nothing.
    let exact = |_a: &[f64], _f: &[f64]| -> Result<Vec<f64>, FitError> { Ok(vec![10.0, 0.0]) };
    let ascent = newton_ascent(2, |a| a.to_vec(), objective, exact, &params, &[]).unwrap();
    assert!(ascent.converged && ascent.iters == 2 && ascent.f == [10.0, 0.0], "{:?}", ascent.f);
}

/// At a huge signal variance (1e8, duplicated inputs: K singular) the Newton direction from
/// f = 0 is spoilt by round-off, every class's curvature there being the same: no halving of
/// the first step ascends. Stopping there (as a rule that refused such steps did) ends at the
/// start, Psi(0) = -n log C; taking the 2^-30 step lets the next ones climb far above it.
#[test]
fn a_round_off_spoilt_first_step_does_not_end_the_mode_search() {
    let (x0, y0) = tiny(6, 4);
    let idx: Vec<usize> = (0..18).chain(0..6).collect();
    let x = x0.select(ndarray::Axis(0), &idx);
    let y: Vec<usize> = idx.iter().map(|&i| y0[i]).collect();
    let K = kernel(false, 3.0, 1e8).gram(&x);
    let mode = find_mode(&K, &y, 3, &LaplaceParams::default(), &[]).unwrap();
    let psi0 = -(y.len() as f64) * 3f64.ln();
    assert!(mode.psi > psi0 + 15.0, "Psi {} from {psi0}, {} steps", mode.psi, mode.newton_iters);
    // The evidence at the point reached, Psi - 1/2 log |I + K W| with Psi = -1/2 a^T f + sum log
    // softmax (a = K^{-1} f, here read from the search: K is singular) and |I + K W| by dense
    // elimination over the n C latent values, W's datum blocks the softmax's negative Hessian.
    let (n, C) = (y.len(), 3);
    let Kbig = dense_block_diag(K.as_ref(), C);
    let kbig_a = matvec(Kbig.as_ref(), &mode.a);
    let scale = mode.f.iter().fold(1.0f64, |m, v| m.max(v.abs()));
    for k in 0..n * C {
        assert!((kbig_a[k] - mode.f[k]).abs() < 1e-8 * scale, "f = K a at {k}: {} vs {}", kbig_a[k], mode.f[k]);
    }
    let mut ikw = Mat::<f64>::identity(n * C, n * C);
    let mut psi = -0.5 * mode.a.iter().zip(&mode.f).map(|(a, f)| a * f).sum::<f64>();
    for i in 0..n {
        let fi: Vec<f64> = (0..C).map(|c| mode.f[c * n + i]).collect();
        psi += Softmax.log_prob(&fi, y[i]);
        let W = Softmax.neg_hessian(&fi);
        for r in 0..n * C {
            for c in 0..C {
                ikw[(r, c * n + i)] += (0..C).map(|d| Kbig[(r, d * n + i)] * W[d][c]).sum::<f64>();
            }
        }
    }
    let logdet: f64 = ikw.partial_piv_lu().U().diagonal().column_vector().iter().map(|u| u.abs().ln()).sum();
    let want = psi - 0.5 * logdet;
    assert!((mode.psi - psi).abs() < 1e-8 * (1.0 + psi.abs()), "Psi {} vs {psi}", mode.psi);
    // They agree to about 3e-7 of about -61 here: |I + K W| has entries of order 1e8 W.
    assert!((mode.log_evidence - want).abs() < 1e-5, "{} vs {want}", mode.log_evidence);
}

/// The Newton step solves for the change of a (g = y - pi - a, the gradient of Psi w.r.t. f):
/// in exact arithmetic the same iterate as GPML's a = (I + W K)^{-1} (W f + y - pi). Both
/// against a dense solve with W's datum blocks diag(pi_i) - pi_i pi_i^T, at a moderate signal
/// variance where the dense system is well conditioned.
#[test]
fn the_newton_step_is_gpmls_iterate() {
    let (x, y) = tiny(5, 9);
    let (n, c) = (x.nrows(), 3);
    let K = kernel(false, 1.0, 4.0).gram(&x);
    let mut rng = Pcg64::seed_from_u64(3);
    let a: Vec<f64> = (0..n * c).map(|_| 0.3 * rng.sample::<f64, _>(StandardNormal)).collect();
    let f = block_matvec(&K, &a, c);
    let pi = class_probs(&f, n, c);
    // Dense (I + W (I_C (x) K)) a_new = W f + y - pi.
    let mut W = Mat::<f64>::zeros(n * c, n * c);
    for i in 0..n {
        for p in 0..c {
            for q in 0..c {
                W[(p * n + i, q * n + i)] = if p == q { pi[p * n + i] } else { 0.0 } - pi[p * n + i] * pi[q * n + i];
            }
        }
    }
    let mut IK = Mat::<f64>::zeros(n * c, n * c);
    for p in 0..c {
        IK.as_mut().submatrix_mut(p * n, p * n, n, n).copy_from(&K);
    }
    let A = Mat::<f64>::identity(n * c, n * c) + &W * &IK;
    let wf = &W * Mat::from_fn(n * c, 1, |k, _| f[k]);
    let rhs = Mat::from_fn(n * c, 1, |k, _| wf[(k, 0)] + if y[k % n] == k / n { 1.0 } else { 0.0 } - pi[k]);
    let dense = faer::linalg::solvers::Solve::solve(&A.partial_piv_lu(), &rhs);
    let a_new = newton_step(&K, &y, c, &a, &f).unwrap();
    for k in 0..n * c {
        assert!((a_new[k] - dense[(k, 0)]).abs() <= 1e-10 * (1.0 + dense[(k, 0)].abs()), "{k}: {} against {}", a_new[k], dense[(k, 0)]);
    }
}

/// At a signal variance of 1e6 (40 points a class, length-scale 3) the class probabilities
/// saturate. Solving for the whole new a there lost the direction near the mode: every full
/// step lowered Psi and Newton ran to `max_newton_iters` at the noise floor. Solving for the
/// change converges, at a Psi no lower than the old search's best point.
#[test]
fn newton_converges_where_the_class_probabilities_saturate() {
    let (x, y) = tiny(40, 4);
    let K = kernel(false, 3.0, 1e6).gram(&x);
    let mode = find_mode(&K, &y, 3, &LaplaceParams::default(), &[]).unwrap();
    assert!(mode.newton_converged && mode.newton_iters < 30, "{} steps, converged {}", mode.newton_iters, mode.newton_converged);
    // laplace=4 ended unconverged at Psi = -34.7196200664 after 100 steps.
    assert!(mode.psi >= -34.7196200664 - 1e-8, "Psi {}", mode.psi);
}
