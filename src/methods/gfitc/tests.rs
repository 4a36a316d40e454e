//! GFITC against mathematics: the O(N M^2) posterior and normaliser against the dense N x N
//! forms, the gradient at converged EP against finite differences of log Z_EP re-converged,
//! log Z_EP against the exact probability on a one-row problem, and learning that raises it.
use super::fitc::ClassFitc;
use super::inner::{self, InnerSettings};
use super::{classes_at, gradient, GfitcParams};
use crate::linalg::Chol;
use crate::methods::{FitContext, HyperPolicy, Problem};
use crate::testing::{assert_gradient_close, central_differences, se_ard_plus_white};
use faer::Mat;
use ndarray::Array2;
use rand::{RngExt, SeedableRng};
use rand_pcg::Pcg64;

fn toy(n: usize, c: usize, seed: u64) -> (Array2<f64>, Vec<usize>) {
    let mut rng = Pcg64::seed_from_u64(seed);
    let x = Array2::from_shape_fn((n, 2), |_| rng.random_range(-2.0..2.0));
    let y = (0..n).map(|i| (((x[(i, 0)] + 2.0) / 4.0 * c as f64) as usize).min(c - 1)).collect();
    (x, y)
}

/// The kernels' log-parameters followed by each class's inducing inputs, rows k m..(k + 1) m of x.
fn theta_with_leading_rows(kernels: &crate::kernels::KernelSet, x: &Array2<f64>, m: usize, c: usize) -> Vec<f64> {
    let mut theta = kernels.log_params();
    for k in 0..c {
        theta.extend(x.slice(ndarray::s![m * k..m * (k + 1), ..]).iter().copied());
    }
    theta
}

fn inverse(a: &Mat<f64>) -> Mat<f64> {
    Chol::factor(a.as_ref(), "test").unwrap().solve(Mat::<f64>::identity(a.nrows(), a.nrows()).as_ref())
}

#[test]
fn posterior_and_normaliser_match_the_dense_forms() {
    let (x, _) = toy(7, 3, 1);
    let kernels = se_ard_plus_white(2, 3, 0.2);
    let z = x.slice(ndarray::s![0..3, ..]).to_owned();
    let f = ClassFitc::new(kernels.class(0), z, &x, 0).unwrap();
    let mut rng = Pcg64::seed_from_u64(2);
    let tau: Vec<f64> = (0..7).map(|_| rng.random_range(0.1..2.0)).collect();
    let nu: Vec<f64> = (0..7).map(|_| rng.random_range(-1.0..1.0)).collect();
    let post = f.posterior(&tau, &nu, 0).unwrap();
    // Dense: K_FITC = Q + D, Sigma = (K_FITC^{-1} + T)^{-1}, mu = Sigma nu.
    let kinv = inverse(&f.k());
    let q = f.kmn.transpose() * &kinv * &f.kmn;
    let kf = Mat::from_fn(7, 7, |i, j| q[(i, j)] + if i == j { f.d[i] } else { 0.0 });
    let kf_inv = inverse(&kf);
    let sigma = inverse(&Mat::from_fn(7, 7, |i, j| kf_inv[(i, j)] + if i == j { tau[i] } else { 0.0 }));
    for i in 0..7 {
        let mu: f64 = (0..7).map(|j| sigma[(i, j)] * nu[j]).sum();
        assert!((post.mean[i] - mu).abs() < 1e-10, "mean {i}: {} vs {mu}", post.mean[i]);
        assert!((post.var[i] - sigma[(i, i)]).abs() < 1e-10, "var {i}");
    }
    let logdet = |a: &Mat<f64>| Chol::factor(a.as_ref(), "t").unwrap().log_det();
    let mu: Vec<f64> = (0..7).map(|i| (0..7).map(|j| sigma[(i, j)] * nu[j]).sum()).collect();
    let dense = 0.5 * logdet(&sigma) - 0.5 * logdet(&kf) + 0.5 * nu.iter().zip(&mu).map(|(a, b)| a * b).sum::<f64>();
    assert!((f.log_normaliser_gain(&post, &tau, &nu) - dense).abs() < 1e-10);
}

/// The inner loop run to a site change of 1e-12, plain (the default) and Anderson-accelerated:
/// the tests that need a converged EP run with both.
const TIGHT: [InnerSettings; 2] = [
    InnerSettings { damping: 0.5, damping_decay: 1.0, tol: 1e-12, max_iters: 5000, anderson: 0 },
    InnerSettings { damping: 0.5, damping_decay: 1.0, tol: 1e-12, max_iters: 5000, anderson: 3 },
];

#[test]
fn anderson_acceleration_reaches_the_damped_iterations_fixed_point_in_fewer_sweeps() {
    // EP's fixed point does not depend on how it is reached: the plain damped sweeps and the
    // accelerated ones, both run to a site change of 1e-11, must end at the same sites and the
    // same log Z_EP. (Without annealing: annealed by 0.99 a sweep, the plain damping is 1e-7
    // after 1,500 sweeps, and its damped site change falls below any tolerance short of the
    // fixed point.)
    let (x, y) = toy(60, 3, 5);
    let kernels = se_ard_plus_white(2, 3, 0.3);
    let shapes = [(6, 2); 3];
    let theta = theta_with_leading_rows(&kernels, &x, 6, 3);
    let (_, classes) = classes_at(&kernels, &shapes, &theta, &x).unwrap();
    let fit = |anderson: usize| {
        let settings = InnerSettings { damping: 0.5, damping_decay: 1.0, tol: 1e-11, max_iters: 5000, anderson };
        let mut sites = inner::initial_sites(60, 3, &y);
        let (posts, report) = inner::run(&classes, &y, &mut sites, settings).unwrap();
        assert!(report.converged, "depth {anderson}: {report:?}");
        (inner::log_z(&classes, &posts, &sites, &y).unwrap(), sites, report.iterations)
    };
    let (lz_plain, plain, sweeps_plain) = fit(0);
    let (lz_acc, acc, sweeps_acc) = fit(3);
    assert!(acc.max_change(&plain) < 1e-8, "sites differ by {}", acc.max_change(&plain));
    assert!((lz_acc - lz_plain).abs() < 1e-8 * lz_plain.abs().max(1.0), "log Z_EP {lz_acc} vs {lz_plain}");
    assert!(2 * sweeps_acc < sweeps_plain, "accelerated {sweeps_acc} sweeps against plain {sweeps_plain}");
}

#[test]
fn log_z_ep_on_one_row_is_close_to_the_exact_probability() {
    // One row, three classes, M = 1: f^c ~ N(0, kappa) independently, p(y) = P(f_y largest).
    let x = Array2::from_shape_vec((1, 2), vec![0.3, -0.2]).unwrap();
    let kernels = se_ard_plus_white(2, 3, 0.2);
    let theta: Vec<f64> = kernels.log_params().into_iter().chain([0.0, 0.0, 1.0, 1.0, -1.0, 0.5]).collect();
    let (_, classes) = classes_at(&kernels, &[(1, 2); 3], &theta, &x).unwrap();
    let y = vec![1];
    let kappa = 1.3 + 0.2;
    let exact = crate::likelihoods::probit::log_argmax_prob(&[0.0; 3], &[kappa; 3], 1);
    assert!((exact - (1.0f64 / 3.0).ln()).abs() < 1e-9);
    for settings in TIGHT {
        let mut sites = inner::initial_sites(1, 3, &y);
        let (posts, report) = inner::run(&classes, &y, &mut sites, settings).unwrap();
        assert!(report.converged);
        let lz = inner::log_z(&classes, &posts, &sites, &y).unwrap();
        assert!((lz - exact).abs() < 0.03, "{settings:?}: log Z_EP {lz} vs exact {exact}");
    }
}

#[test]
fn gradient_at_convergence_matches_finite_differences_of_log_z_ep() {
    let (x, y) = toy(8, 3, 3);
    let kernels = se_ard_plus_white(2, 3, 0.3);
    let shapes = [(2, 2); 3];
    let theta = theta_with_leading_rows(&kernels, &x, 2, 3);
    for settings in TIGHT {
        let at = |t: &[f64]| {
            let (ks, classes) = classes_at(&kernels, &shapes, t, &x).unwrap();
            let mut sites = inner::initial_sites(8, 3, &y);
            let (posts, report) = inner::run(&classes, &y, &mut sites, settings).unwrap();
            assert!(report.converged);
            (inner::log_z(&classes, &posts, &sites, &y).unwrap(), gradient(&ks, &classes, &posts, &sites, &x, &y))
        };
        let (_, grad) = at(&theta);
        let fd = central_differences(&theta, |t| at(t).0);
        let what = format!("the GFITC gradient at convergence against d log Z_EP (Anderson depth {})", settings.anderson);
        assert_gradient_close(&what, &grad, &fd, 1e-5);
    }
}

#[test]
fn an_improper_anderson_proposal_is_refused_though_a_and_its_cavities_pass() {
    // Two classes, M = 1 (Z = (0, 0)), and class 2's k-side site precisions tau set by hand (the
    // y-side sites on class 1 stay 1e-2). The acceptance test used to ask only for A's factor
    // and valid cavities; a posterior is proper iff Sigma^{-1} = K_FITC^{-1} + T is positive
    // definite, checked here densely.
    let kernels = se_ard_plus_white(2, 2, 0.2);
    let theta: Vec<f64> = kernels.log_params().into_iter().chain([1.0, 1.0, 0.0, 0.0]).collect();
    // (rows, tau from D, whether the posterior is proper)
    type TauOf = fn(&[f64]) -> Vec<f64>;
    let cases: [(Vec<f64>, TauOf, bool); 3] = [
        // The review's example: one row, 1 + tau D = -0.2, so Sigma = 1 / (1 / kappa + tau) < 0
        // (K_FITC = kappa on one row) while A = K + k^2 tau / (1 + D tau) > 0.
        (vec![0.3, -0.2], |d| vec![-1.2 / d[0]], false),
        // Two rows, 1 + tau D = (-0.5, 0.15): A > 0 and both marginal variances positive (0.95
        // and 20.9), yet Sigma^{-1} has a negative eigenvalue (-2.28): only 1 + tau D > 0 sees it.
        (vec![0.3, -0.2, -0.5, 0.6], |d| vec![-1.5 / d[0], -0.85 / d[1]], false),
        // Proper: one row, tau = -0.3 > -1 / kappa.
        (vec![0.3, -0.2], |_| vec![-0.3], true),
    ];
    for (case, (rows, tau_of, proper)) in cases.into_iter().enumerate() {
        let n = rows.len() / 2;
        let x = Array2::from_shape_vec((n, 2), rows).unwrap();
        let (_, classes) = classes_at(&kernels, &[(1, 2); 2], &theta, &x).unwrap();
        let y = vec![0; n];
        let tau = tau_of(&classes[1].d);
        let mut sites = inner::initial_sites(n, 2, &y);
        for (i, t) in tau.iter().enumerate() {
            sites.c1k[(i, 1)] = *t;
            sites.c2k[(i, 1)] = 0.3 * (i as f64 + 1.0);
        }
        // Dense: P = K_FITC^{-1} + T and its inverse (n <= 2, by hand: P may be indefinite).
        let f = &classes[1];
        let q = f.kmn.transpose() * &inverse(&f.k()) * &f.kmn;
        let kf_inv = inverse(&Mat::from_fn(n, n, |i, j| q[(i, j)] + if i == j { f.d[i] } else { 0.0 }));
        let p = Mat::from_fn(n, n, |i, j| kf_inv[(i, j)] + if i == j { tau[i] } else { 0.0 });
        let (det, sigma_diag) = match n {
            1 => (p[(0, 0)], vec![1.0 / p[(0, 0)]]),
            _ => {
                let det = p[(0, 0)] * p[(1, 1)] - p[(0, 1)] * p[(1, 0)];
                (det, vec![p[(1, 1)] / det, p[(0, 0)] / det])
            }
        };
        let dense_proper = p[(0, 0)] > 0.0 && det > 0.0;
        assert_eq!(dense_proper, proper, "case {case}: the dense precision {p:?}");
        // What the old test accepted: every posterior exists (the Woodbury marginals are the
        // dense ones) and every cavity is valid.
        let posts = inner::posteriors(&classes, &sites, &y).unwrap();
        for (i, v) in sigma_diag.iter().enumerate() {
            assert!((posts[1].var[i] - v).abs() < 1e-10 * v.abs(), "case {case}: variance {} vs dense {v}", posts[1].var[i]);
        }
        let refined = inner::refine(&posts, &sites, &y).expect("valid cavities");
        match inner::accept_proposal(&classes, &sites, &y) {
            Some((p, r)) => {
                assert!(proper, "case {case}: an improper proposal accepted");
                assert_eq!(p[1].var, posts[1].var);
                assert_eq!(r.to_flat(), refined.to_flat());
            }
            None => assert!(!proper, "case {case}: a proper proposal refused"),
        }
    }
}

#[test]
fn a_failed_first_refinement_restarts_from_the_initial_sites_under_acceleration() {
    let (x, y) = toy(20, 3, 7);
    let kernels = se_ard_plus_white(2, 3, 0.3);
    let theta = theta_with_leading_rows(&kernels, &x, 3, 3);
    let (_, classes) = classes_at(&kernels, &[(3, 2); 3], &theta, &x).unwrap();
    // Warm-start sites whose first refinement fails: row 0's two y-side sites, +5 and -5, sum to
    // zero, so every posterior exists, but the +5 site's cavity precision 1 / v - 5 is negative
    // (v, the marginal variance, is near the prior's 1.8).
    let mut warm = inner::initial_sites(20, 3, &y);
    let others: Vec<usize> = (0..3).filter(|&k| k != y[0]).collect();
    warm.c1y[(0, others[0])] = 5.0;
    warm.c1y[(0, others[1])] = -5.0;
    let posts = inner::posteriors(&classes, &warm, &y).unwrap();
    assert!(1.0 / posts[y[0]].var[0] < 5.0, "variance {}", posts[y[0]].var[0]);
    assert!(inner::refine(&posts, &warm, &y).is_none());
    // The plain iteration fails as it always did (damping does not enter the first
    // refinement), leaving the sites as they were.
    let mut sites = warm.clone();
    assert!(inner::run(&classes, &y, &mut sites, TIGHT[0]).is_err());
    assert_eq!(sites.to_flat(), warm.to_flat());
    // The accelerated one starts again from the initial sites: the run from them, to the bit.
    let (posts, report) = inner::run(&classes, &y, &mut sites, TIGHT[1]).unwrap();
    assert!(report.restarted && report.converged, "{report:?}");
    let mut fresh = inner::initial_sites(20, 3, &y);
    let (_, fresh_report) = inner::run(&classes, &y, &mut fresh, TIGHT[1]).unwrap();
    assert!(!fresh_report.restarted);
    assert_eq!(sites.to_flat(), fresh.to_flat());
    assert_eq!(report.iterations, fresh_report.iterations);
    // And that is EP's fixed point: the plain iteration's sites and log Z_EP.
    let mut plain = inner::initial_sites(20, 3, &y);
    let (plain_posts, _) = inner::run(&classes, &y, &mut plain, TIGHT[0]).unwrap();
    assert!(sites.max_change(&plain) < 1e-8, "sites differ by {}", sites.max_change(&plain));
    let (lz, lz_plain) = (inner::log_z(&classes, &posts, &sites, &y).unwrap(), inner::log_z(&classes, &plain_posts, &plain, &y).unwrap());
    assert!((lz - lz_plain).abs() < 1e-8 * lz_plain.abs(), "log Z_EP {lz} vs {lz_plain}");
}

#[test]
fn learning_raises_log_z_ep_and_classifies_the_toy_problem() {
    for first_step in ["gradient", "unit_length"] {
        learning_raises_log_z_ep_with(first_step);
    }
}

fn learning_raises_log_z_ep_with(first_step: &str) {
    let (x, y) = toy(60, 3, 4);
    let kernels = se_ard_plus_white(2, 3, 1.0);
    let fit = |hyper: HyperPolicy| {
        let method =
            crate::methods::build("gfitc", &serde_json::json!({ "inducing": 5, "max_iters": 30, "lbfgs_first_step": first_step })).unwrap();
        let mut rng = Pcg64::seed_from_u64(5);
        let mut ctx = FitContext::new(&mut rng, None);
        let model = method.fit(&Problem { x: &x, y: &y, n_classes: 3 }, &kernels, hyper, &mut ctx).unwrap();
        (model, ctx.take_trace())
    };
    let ((fixed, _), (learned, trace)) = (fit(HyperPolicy::Fixed), fit(HyperPolicy::Learn));
    let (f, l) = (fixed.evidence().unwrap().value, learned.evidence().unwrap().value);
    // The fit is its best evaluation (not EP re-run at the optimum from other warm-start sites).
    let best = trace.iter().filter(|p| p.name == "log_evidence").map(|p| p.value).fold(f64::NEG_INFINITY, f64::max);
    assert_eq!(l, best);
    assert!(l > f, "{first_step}: learned log Z_EP {l} not above the fixed kernel's {f}");
    let probs = learned.predict(&x, &mut Pcg64::seed_from_u64(0)).unwrap().probs;
    let errors = (0..60).filter(|&i| crate::linalg::argmax(probs.row(i).as_slice().unwrap()) != y[i]).count();
    assert!(errors <= 6, "{first_step}: {errors} of 60 training rows misclassified");
}

#[test]
fn the_default_first_step_and_inner_scheme_are_not_written_into_the_settings() {
    // Settings enter the cell keys: a default that is written would change every stored key.
    let parse = |v: serde_json::Value| serde_json::from_value::<GfitcParams>(v).unwrap();
    let default = serde_json::to_value(parse(serde_json::json!({ "inducing": 5 }))).unwrap();
    assert!(default.get("lbfgs_first_step").is_none(), "{default}");
    assert!(default.get("inner_anderson").is_none(), "{default}");
    let accelerated = serde_json::to_value(parse(serde_json::json!({ "inducing": 5, "inner_anderson": 3 }))).unwrap();
    assert_eq!(accelerated["inner_anderson"], 3);
    let unit = serde_json::to_value(parse(serde_json::json!({ "inducing": 5, "lbfgs_first_step": "unit_length" }))).unwrap();
    assert_eq!(unit["lbfgs_first_step"], "unit_length");
}

#[test]
fn the_authors_start_fits_as_a_kernel_written_with_that_lengthscale() {
    // With the kernel held fixed, `lengthscale_init: sqrt_median_training` must give the fit of
    // a spec whose kernel already has every length-scale at sqrt(median distance) (the same
    // log Z_EP to the bit), and not the fit from the written length-scale of 1.
    let (x, y) = toy(40, 3, 6);
    let start = crate::scalable::inducing::median_distance(&x).sqrt();
    let fit = |kernel_l: f64, init: &str| {
        let method = crate::methods::build("gfitc", &serde_json::json!({ "inducing": 5, "lengthscale_init": init })).unwrap();
        let kernels = se_ard_plus_white(2, 3, 1.0);
        let kernels = kernels.with_log_params(
            &kernels
                .param_names()
                .iter()
                .zip(kernels.log_params())
                .map(|(n, v)| if crate::kernels::is_lengthscale(n) { kernel_l.ln() } else { v })
                .collect::<Vec<_>>(),
        );
        let mut rng = Pcg64::seed_from_u64(5);
        let mut ctx = FitContext::new(&mut rng, None);
        method.fit(&Problem { x: &x, y: &y, n_classes: 3 }, &kernels, HyperPolicy::Fixed, &mut ctx).unwrap().evidence().unwrap().value
    };
    let authors = fit(1.0, "sqrt_median_training");
    assert_eq!(authors, fit(start, "kernel"));
    assert_ne!(authors, fit(1.0, "kernel"));
}

#[test]
fn the_lengthscale_coordinate_and_the_pair_count_change_the_path_not_the_optimum() {
    // L-BFGS in log l^2 or with 5 curvature pairs is the same maximisation of log Z_EP: run to
    // convergence (Z held, so few parameters) every variant must reach the base's maximum; cut
    // after 10 iterations (5 pairs differ from 10 from the seventh on) each must be elsewhere on
    // its way (the setting reaches the search).
    let (x, y) = toy(40, 3, 6);
    let kernels = se_ard_plus_white(2, 3, 1.0);
    let fit = |extra: serde_json::Value, iters: u64| {
        let mut settings =
            serde_json::json!({ "inducing": 4, "learn_inducing": false, "max_iters": iters, "lbfgs_first_step": "unit_length" });
        settings.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        let method = crate::methods::build("gfitc", &settings).unwrap();
        let mut rng = Pcg64::seed_from_u64(5);
        let mut ctx = FitContext::new(&mut rng, None);
        method.fit(&Problem { x: &x, y: &y, n_classes: 3 }, &kernels, HyperPolicy::Learn, &mut ctx).unwrap().evidence().unwrap().value
    };
    let variants = [
        serde_json::json!({ "lbfgs_lengthscale": "log_squared" }),
        serde_json::json!({ "lbfgs_pairs": 5 }),
        serde_json::json!({ "lbfgs_lengthscale": "log_squared", "lbfgs_pairs": 5 }),
    ];
    let base_short = fit(serde_json::json!({}), 10);
    let base = fit(serde_json::json!({}), 500);
    assert!(base > base_short, "{base} {base_short}");
    for v in &variants {
        let (short, long) = (fit(v.clone(), 10), fit(v.clone(), 500));
        assert_ne!(short, base_short, "{v}: the same path as the base");
        assert!((long - base).abs() < 1e-3 * base.abs().max(1.0), "{v}: maximum {long} against the base's {base}");
    }
}

#[test]
fn a_pair_count_of_zero_is_refused() {
    let err = crate::methods::build("gfitc", &serde_json::json!({ "lbfgs_pairs": 0 })).err().unwrap();
    assert!(err.to_string().contains("lbfgs_pairs"), "{err}");
}
