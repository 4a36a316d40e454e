//! SVGP against mathematics: the Gaussian-likelihood identities, finite-difference gradients,
//! an unbiased minibatch estimate, and a fit that learns.
use super::elbo::{self, Wants};
use super::model::Sparse;
use super::posterior::Posterior;
use super::*;
use crate::kernels::{KernelSet, SqExp};
use crate::linalg::Chol;
use crate::scalable::NaturalGaussian;
use crate::testing::central_differences;
use faer::Mat;
use ndarray::Array2;
use rand::{RngExt, SeedableRng};

fn se(l: f64, s2: f64) -> SqExp {
    SqExp { log_variance: s2.ln(), log_lengthscales: vec![l.ln()], learn_variance: true }
}

fn inputs(n: usize, d: usize, seed: u64) -> Array2<f64> {
    let mut rng = Pcg64::seed_from_u64(seed);
    Array2::from_shape_fn((n, d), |_| rng.random_range(-2.0..2.0))
}

#[test]
fn with_z_equal_x_and_a_gaussian_likelihood_one_natural_step_is_exact_and_the_elbo_is_the_evidence() {
    let x = inputs(6, 1, 1);
    let targets = vec![0.3, -0.8, 1.1, 0.2, -0.4, 0.9];
    let noise = 0.1;
    let lik = SvgpLikelihood::Gaussian { targets: targets.clone(), noise };
    let kernels = KernelSet::shared_se(&se(0.9, 1.3));
    let rows: Vec<usize> = (0..6).collect();
    // An arbitrary starting q.
    let start = NaturalGaussian::from_mean_precision(
        vec![0.5, -1.0, 0.2, 0.0, 0.3, -0.2],
        Mat::from_fn(6, 6, |i, j| if i == j { 2.0 } else { 0.1 }),
    )
    .unwrap();
    let mut sparse = Sparse::new(kernels.clone(), vec![x.clone()], vec![Posterior::Natural(start)]).unwrap();
    let mut rng = Pcg64::seed_from_u64(0);
    let g = elbo::block(&sparse, &x, &rows, &lik, &mut rng, 1.0, Wants { q: true, inputs: false, kl: true });
    let Posterior::Natural(q) = &mut sparse.q[0] else { unreachable!() };
    q.step(&g.g_m[0], g.g_s[0].as_ref(), Mat::<f64>::identity(6, 6).as_ref(), 1.0).unwrap();

    // Exact: u | y ~ N(K (K + s2 I)^{-1} y, K - K (K + s2 I)^{-1} K); v = L^{-1} u.
    let k = kernels.class(0).gram(&x);
    let ky = Chol::factor(Mat::from_fn(6, 6, |i, j| k[(i, j)] + if i == j { noise } else { 0.0 }).as_ref(), "K + s2 I").unwrap();
    let alpha = ky.solve_vec(&targets);
    let mean_u = crate::linalg::matvec(k.as_ref(), &alpha);
    let lk = &sparse.chols[0];
    let want_v = crate::linalg::to_vec(lk.solve_l(crate::linalg::col(&mean_u).as_ref()).as_ref());
    for (a, b) in sparse.q[0].mean().iter().zip(&want_v) {
        assert!((a - b).abs() < 1e-9, "posterior mean {:?} vs exact {want_v:?}", sparse.q[0].mean());
    }
    // log N(y | 0, K + s2 I).
    let exact = -0.5 * crate::linalg::dot(&targets, &alpha) - 0.5 * ky.log_det() - 3.0 * (2.0 * std::f64::consts::PI).ln();
    let bound = elbo::full_elbo(&sparse, &x, &rows, &lik, &mut rng);
    assert!((bound - exact).abs() < 1e-8, "ELBO {bound} vs log marginal likelihood {exact}");
}

/// A 3-class problem with M = 4 inducing inputs (one set, or `per_class_z` one per class),
/// and a q with some structure.
fn problem(per_class: bool, natural: bool) -> (Sparse, Array2<f64>, Vec<usize>) {
    problem_with(per_class, false, natural)
}

fn problem_with(per_class: bool, per_class_z: bool, natural: bool) -> (Sparse, Array2<f64>, Vec<usize>) {
    let x = inputs(9, 2, 2);
    let y: Vec<usize> = (0..9).map(|i| i % 3).collect();
    let zs: Vec<Array2<f64>> = if per_class_z { (0..3).map(|c| inputs(4, 2, 3 + c as u64)).collect() } else { vec![inputs(4, 2, 3)] };
    let kernels = if per_class {
        KernelSet::per_class(
            (0..3).map(|c| Box::new(se(0.8 + 0.2 * c as f64, 1.0 + 0.3 * c as f64)) as Box<dyn crate::kernels::Kernel>).collect(),
        )
    } else {
        KernelSet::shared_se(&se(1.1, 1.7))
    };
    let mut rng = Pcg64::seed_from_u64(4);
    let q = (0..3)
        .map(|_| {
            let mean: Vec<f64> = (0..4).map(|_| rng.random_range(-1.0..1.0)).collect();
            let l = Mat::from_fn(4, 4, |i, j| {
                if i == j {
                    0.5 + rng.random_range(0.0..0.5)
                } else if i > j {
                    0.2 * rng.random_range(-1.0..1.0)
                } else {
                    0.0
                }
            });
            if natural {
                let s = &l * l.transpose();
                let prec = Chol::factor(s.as_ref(), "S").unwrap().solve(Mat::<f64>::identity(4, 4).as_ref());
                let prec = Mat::from_fn(4, 4, |i, j| 0.5 * (prec[(i, j)] + prec[(j, i)]));
                Posterior::Natural(NaturalGaussian::from_mean_precision(mean, prec).unwrap())
            } else {
                Posterior::Sqrt { mean, l }
            }
        })
        .collect();
    (Sparse::new(kernels, zs, q).unwrap(), x, y)
}

/// All inducing inputs, set after set, row-major.
fn flat_zs(zs: &[Array2<f64>]) -> Vec<f64> {
    zs.iter().flat_map(|z| z.iter().copied()).collect()
}

/// Sets shaped like `like` from `flat_zs`' layout.
fn zs_from(v: &[f64], like: &[Array2<f64>]) -> Vec<Array2<f64>> {
    let size = like[0].len();
    like.iter().enumerate().map(|(i, z)| Array2::from_shape_vec(z.dim(), v[i * size..(i + 1) * size].to_vec()).unwrap()).collect()
}

fn assert_close(what: &str, got: &[f64], want: &[f64]) {
    crate::testing::assert_gradient_close(what, got, want, 1e-5);
}

#[test]
fn elbo_gradients_in_kernel_parameters_inducing_inputs_and_q_match_finite_differences() {
    let lik = SvgpLikelihood::RobustMax(crate::likelihoods::marginal::RobustMax::new(1e-3, 20));
    let scale = 2.5;
    for (per_class, per_class_z) in [(false, false), (true, false), (false, true), (true, true)] {
        let (sparse, x, y) = problem_with(per_class, per_class_z, false);
        let ell = |s: &Sparse| scale * elbo::block(s, &x, &y, &lik, &mut Pcg64::seed_from_u64(0), scale, Wants::default()).ell;
        let g = elbo::block(&sparse, &x, &y, &lik, &mut Pcg64::seed_from_u64(0), scale, Wants { q: true, inputs: true, kl: true });
        let inputs = g.inputs.as_ref().unwrap();
        let p0 = sparse.kernels.log_params();
        let with = |p: &[f64], zs: Vec<Array2<f64>>| Sparse::new(sparse.kernels.with_log_params(p), zs, sparse.q.clone()).unwrap();
        let what = format!("per_class={per_class} per_class_z={per_class_z}");
        assert_close(&format!("{what} kernel"), &inputs.params, &central_differences(&p0, |p| ell(&with(p, sparse.zs.clone()))));
        let gz: Vec<f64> = inputs.z.iter().copied().collect();
        assert_close(&format!("{what} Z"), &gz, &central_differences(&flat_zs(&sparse.zs), |v| ell(&with(&p0, zs_from(v, &sparse.zs)))));
        // q: the Adam parameterisation's gradient of E[log lik] - KL, class by class.
        for class in 0..3 {
            let flat = sparse.q[class].sqrt_to_flat();
            let Posterior::Sqrt { mean, l } = &sparse.q[class] else { unreachable!() };
            let got = Posterior::sqrt_grads(mean, l, &g.g_m[class], &g.g_s[class]);
            let objective = |v: &[f64]| {
                let mut q = sparse.q.clone();
                q[class] = Posterior::sqrt_from_flat(4, v);
                let s = Sparse { q, ..sparse.clone() };
                ell(&s) - s.q[class].kl()
            };
            assert_close(&format!("per_class={per_class} q{class}"), &got, &central_differences(&flat, objective));
        }
    }
}

#[test]
fn reexpressing_q_under_a_new_factor_keeps_q_of_u() {
    for natural in [false, true] {
        let (sparse, _, _) = problem(false, natural);
        let old = &sparse.chols[0];
        let new = Sparse::new(KernelSet::shared_se(&se(0.7, 2.4)), sparse.zs.clone(), sparse.q.clone()).unwrap().chols[0].clone();
        for q in &sparse.q {
            let moved = q.reexpress(old, &new).unwrap();
            // u's mean L m and covariance L S L^T, before and after.
            let mean_u = |l: &Chol, p: &Posterior| crate::linalg::matvec(l.l(), p.mean());
            let cov_u = |l: &Chol, p: &Posterior| l.l() * p.covariance() * l.l().transpose();
            for (a, b) in mean_u(old, q).iter().zip(mean_u(&new, &moved)) {
                assert!((a - b).abs() < 1e-10, "natural={natural}: mean of u {a} vs {b}");
            }
            let (a, b) = (cov_u(old, q), cov_u(&new, &moved));
            for i in 0..4 {
                for j in 0..4 {
                    assert!((a[(i, j)] - b[(i, j)]).abs() < 1e-10, "natural={natural}: covariance of u");
                }
            }
            if let Posterior::Sqrt { l, .. } = &moved {
                assert!((0..4).all(|i| (i + 1..4).all(|j| l[(i, j)] == 0.0)), "the sqrt factor stays lower triangular");
            }
        }
    }
}

#[test]
fn unwhitened_gradients_hold_q_of_u_fixed_and_match_finite_differences() {
    let lik = SvgpLikelihood::RobustMax(crate::likelihoods::marginal::RobustMax::new(1e-3, 20));
    let scale = 2.5;
    for (per_class, per_class_z, natural) in
        [(false, false, false), (true, false, false), (false, false, true), (true, false, true), (false, true, true)]
    {
        let (mut sparse, x, y) = problem_with(per_class, per_class_z, natural);
        sparse.whiten = false;
        let g = elbo::block(&sparse, &x, &y, &lik, &mut Pcg64::seed_from_u64(0), scale, Wants { q: true, inputs: true, kl: true });
        let inputs = g.inputs.as_ref().unwrap();
        // F(theta, Z) = scale E[log lik] - KL with q(u) fixed: q(v) re-expressed under each L.
        let objective = |p: &[f64], zs: Vec<Array2<f64>>| {
            let mut s = Sparse::new(sparse.kernels.with_log_params(p), zs, sparse.q.clone()).unwrap();
            s.q = (0..3).map(|c| sparse.q[c].reexpress(&sparse.chols[s.kernel_of(c)], &s.chols[s.kernel_of(c)]).unwrap()).collect();
            let ell = elbo::block(&s, &x, &y, &lik, &mut Pcg64::seed_from_u64(0), scale, Wants::default()).ell;
            scale * ell - s.q.iter().map(|q| q.kl()).sum::<f64>()
        };
        let what = format!("per_class={per_class} per_class_z={per_class_z} natural={natural}");
        let p0 = sparse.kernels.log_params();
        assert_close(&format!("{what} kernel"), &inputs.params, &central_differences(&p0, |p| objective(p, sparse.zs.clone())));
        let gz: Vec<f64> = inputs.z.iter().copied().collect();
        let fd = central_differences(&flat_zs(&sparse.zs), |v| objective(&p0, zs_from(v, &sparse.zs)));
        assert_close(&format!("{what} Z"), &gz, &fd);
        // The whitened gradient differs: the test can tell the two apart.
        let whitened = elbo::block(
            &Sparse { whiten: true, ..sparse.clone() },
            &x,
            &y,
            &lik,
            &mut Pcg64::seed_from_u64(0),
            scale,
            Wants { q: true, inputs: true, kl: true },
        );
        let diff: f64 = whitened.inputs.unwrap().params.iter().zip(&inputs.params).map(|(a, b)| (a - b).abs()).sum();
        assert!(diff > 1e-3, "{what}: whitened and unwhitened kernel gradients coincide");
    }
}

#[test]
fn unwhitened_sqrt_parameter_gradients_match_finite_differences() {
    let lik = SvgpLikelihood::RobustMax(crate::likelihoods::marginal::RobustMax::new(1e-3, 20));
    let scale = 2.5;
    let (sparse, x, y) = problem(true, false);
    let g = elbo::block(&sparse, &x, &y, &lik, &mut Pcg64::seed_from_u64(0), scale, Wants { q: true, inputs: false, kl: true });
    for class in 0..3 {
        let chol = &sparse.chols[sparse.kernel_of(class)];
        // Unwhitened parameters of the current q: m_u = L m_v, L_Su = L L_Sv.
        let Posterior::Sqrt { mean, l } = &sparse.q[class] else { unreachable!() };
        let u = Posterior::Sqrt { mean: crate::linalg::matvec(chol.l(), mean), l: chol.l() * l };
        let got = Posterior::sqrt_grads_unwhitened(&Posterior::sqrt_grads(mean, l, &g.g_m[class], &g.g_s[class]), chol);
        let objective = |v: &[f64]| {
            let mut q = sparse.q.clone();
            q[class] = Posterior::sqrt_whitened(&Posterior::sqrt_from_flat(4, v), chol);
            let s = Sparse { q, ..sparse.clone() };
            scale * elbo::block(&s, &x, &y, &lik, &mut Pcg64::seed_from_u64(0), scale, Wants::default()).ell - s.q[class].kl()
        };
        assert_close(&format!("unwhitened q{class}"), &got, &central_differences(&u.sqrt_to_flat(), objective));
    }
}

#[test]
fn natural_and_sqrt_posteriors_give_the_same_marginals_and_kl() {
    let (a, x, _) = problem(false, false);
    let (b, _, _) = problem(false, true);
    let (ma, mb) = (a.marginals(&x), b.marginals(&x));
    for (u, v) in ma.mean.iter().zip(mb.mean.iter()).chain(ma.var.iter().zip(mb.var.iter())) {
        assert!((u - v).abs() < 1e-10);
    }
    for c in 0..3 {
        assert!((a.q[c].kl() - b.q[c].kl()).abs() < 1e-10);
    }
}

#[test]
fn a_minibatch_estimate_is_unbiased_over_an_epoch() {
    let lik = SvgpLikelihood::RobustMax(crate::likelihoods::marginal::RobustMax::new(1e-3, 20));
    let (sparse, x, y) = problem(false, true);
    let n = x.nrows();
    let full = elbo::full_elbo(&sparse, &x, &y, &lik, &mut Pcg64::seed_from_u64(0));
    let kl: f64 = sparse.q.iter().map(|q| q.kl()).sum();
    let mut batches = crate::scalable::Minibatches::new(n, 3, 5);
    let estimates: Vec<f64> = (0..batches.batches_per_epoch())
        .map(|_| {
            let rows = batches.next_batch();
            let xb = x.select(ndarray::Axis(0), &rows);
            let yb: Vec<usize> = rows.iter().map(|&i| y[i]).collect();
            let scale = n as f64 / rows.len() as f64;
            scale * elbo::block(&sparse, &xb, &yb, &lik, &mut Pcg64::seed_from_u64(0), scale, Wants::default()).ell - kl
        })
        .collect();
    let mean = estimates.iter().sum::<f64>() / estimates.len() as f64;
    assert!((mean - full).abs() < 1e-10 * full.abs(), "mean of an epoch's estimates {mean} vs full ELBO {full}");
    assert!(estimates.iter().any(|e| (e - full).abs() > 1e-6), "the batches differ from each other");
}

#[test]
fn training_raises_the_elbo_and_separates_three_blobs() {
    use crate::methods::{FitContext, HyperPolicy, Problem};
    let mut rng = Pcg64::seed_from_u64(8);
    let centres = [[0.0, 2.0], [2.0, -1.0], [-2.0, -1.0]];
    let x = Array2::from_shape_fn((150, 2), |(i, d)| centres[i % 3][d] + 0.6 * rng.random_range(-1.0..1.0));
    let y: Vec<usize> = (0..150).map(|i| i % 3).collect();
    for (likelihood, optimizer, whiten) in [
        ("robust_max", "natgrad_adam", true),
        ("softmax", "natgrad_adam", true),
        ("robust_max", "adam", true),
        ("robust_max", "natgrad_adam", false),
        ("robust_max", "adam", false),
        ("robust_max", "lbfgs", true),
        ("robust_max", "lbfgs-per-class-z", true),
        // Villacampa-Calvo & Hernandez-Lobato's VI as vc2017-tables runs it.
        ("robust_max", "lbfgs-per-class-z-unit-step", false),
    ] {
        let unit_step = optimizer.ends_with("-unit-step");
        let optimizer = optimizer.trim_end_matches("-unit-step");
        let (optimizer, per_class_z) = (optimizer.trim_end_matches("-per-class-z"), optimizer.ends_with("per-class-z"));
        let first_step = if unit_step { "unit_length" } else { "gradient" };
        let settings = serde_json::json!({ "inducing": 10, "batch_size": 30, "max_iters": 300, "likelihood": likelihood, "optimizer": optimizer, "adam_lr": 0.03, "whiten": whiten, "inducing_per_class": per_class_z, "lbfgs_first_step": first_step });
        let method = crate::methods::build("svgp", &settings).unwrap();
        let kernels = KernelSet::shared_se(&se(1.0, 1.0));
        let problem = Problem { x: &x, y: &y, n_classes: 3 };
        let mut fit_rng = Pcg64::seed_from_u64(1);
        let mut ctx = FitContext::new(&mut fit_rng, None);
        let model = method.fit(&problem, &kernels, HyperPolicy::Learn, &mut ctx).unwrap();
        let probs = model.predict(&x, &mut Pcg64::seed_from_u64(2)).unwrap().probs;
        let errors = (0..150).filter(|&i| crate::linalg::argmax(probs.row(i).as_slice().unwrap()) != y[i]).count();
        assert!(errors <= 3, "{likelihood}/{optimizer}/whiten={whiten}: {errors} training errors of 150");
        // The prior q (the start) has ELBO = N E[log lik at f ~ prior]; the fit must beat it.
        let evidence = model.evidence().unwrap().value;
        assert!(evidence > -150.0 * (3.0f64).ln(), "{likelihood}/{optimizer}/whiten={whiten}: ELBO {evidence} no better than guessing");
    }
}

#[test]
fn the_lbfgs_objective_gradient_matches_finite_differences_of_the_full_elbo() {
    let method =
        crate::methods::parse_settings::<SvgpParams>(&serde_json::json!({ "inducing": 4, "optimizer": "lbfgs" })).unwrap().check().unwrap();
    for (whiten, per_class_z) in [(true, false), (false, false), (true, true)] {
        let (mut start, x, y) = problem_with(false, per_class_z, false);
        start.whiten = whiten;
        assert_lbfgs_gradient(&format!("whiten {whiten}, per-class Z {per_class_z}"), &start, &x, &y, &method);
    }
}

/// The full-data objective is summed over blocks of rows (2000 at a time): with q(u) held fixed
/// (unwhitened) the KL's share of the kernel and Z gradient belongs to one block only. Blocks
/// of 4 rows must give the one-block ELBO and gradient, and the gradient must match finite
/// differences.
#[test]
fn the_lbfgs_objective_adds_up_over_blocks_of_rows() {
    let method =
        crate::methods::parse_settings::<SvgpParams>(&serde_json::json!({ "inducing": 4, "optimizer": "lbfgs" })).unwrap().check().unwrap();
    for whiten in [false, true] {
        let (mut start, x, y) = problem_with(false, false, false);
        start.whiten = whiten;
        assert!(x.nrows() > 8, "at least three blocks of 4 rows");
        let mut theta = start.kernels.log_params();
        theta.extend(flat_zs(&start.zs));
        for qc in &start.q {
            theta.extend(qc.sqrt_to_flat());
        }
        let problem = crate::methods::Problem { x: &x, y: &y, n_classes: 3 };
        let at = |t: &[f64]| super::fit::sparse_at(&start, t, None, true).unwrap();
        let in_blocks = |t: &[f64], rows: usize| super::lbfgs::elbo_and_grad_in_blocks(&at(t), &problem, &method, true, t.len(), rows);
        let (one, g_one) = in_blocks(&theta, x.nrows());
        let (many, g_many) = in_blocks(&theta, 4);
        assert!((one - many).abs() <= 1e-12 * one.abs(), "whiten {whiten}: ELBO {one} against {many}");
        let what = format!("whiten {whiten}: blocks of 4 against one block");
        crate::testing::assert_gradient_close(&what, &g_many, &g_one, 1e-10);
        let fd = central_differences(&theta, |t| in_blocks(t, 4).0);
        crate::testing::assert_gradient_close(&format!("whiten {whiten}: blocks of 4 against finite differences"), &g_many, &fd, 1e-5);
    }
}

/// The L-BFGS objective's gradient over (kernel log-parameters, Z, q's square-root parameters)
/// at `start` against central differences of the ELBO.
fn assert_lbfgs_gradient(what: &str, start: &Sparse, x: &Array2<f64>, y: &[usize], method: &Svgp) {
    let mut theta = start.kernels.log_params();
    theta.extend(flat_zs(&start.zs));
    for qc in &start.q {
        theta.extend(qc.sqrt_to_flat());
    }
    let problem = crate::methods::Problem { x, y, n_classes: 3 };
    let at = |t: &[f64]| super::fit::sparse_at(start, t, None, true).unwrap();
    let (_, grad) = super::lbfgs::elbo_and_grad(&at(&theta), &problem, method, true, theta.len());
    let fd = central_differences(&theta, |t| super::lbfgs::elbo_and_grad(&at(t), &problem, method, true, t.len()).0);
    crate::testing::assert_gradient_close(what, &grad, &fd, 1e-5);
}

/// The configuration vc2017-tables runs (Villacampa-Calvo & Hernandez-Lobato's VI): one
/// squared-exponential ARD plus white-noise kernel per class, inducing inputs per class, q(u)
/// unwhitened, the robust-max likelihood. The white term enters K(Z, Z) and k(x, x) but no
/// cross-covariance, so its gradient is a path the shared-kernel cases above never take.
#[test]
fn the_lbfgs_gradient_matches_finite_differences_in_the_vc2017_configuration() {
    use crate::kernels::{Kernel, Sum, White};
    let method = crate::methods::parse_settings::<SvgpParams>(
        &serde_json::json!({ "inducing": 4, "optimizer": "lbfgs", "likelihood": "robust_max", "epsilon": 0.001, "inducing_per_class": true, "whiten": false }),
    )
    .unwrap()
    .check()
    .unwrap();
    let (base, x, y) = problem_with(false, true, false);
    let kernels = KernelSet::per_class(
        (0..3)
            .map(|c| {
                let ard = SqExp {
                    log_variance: (1.0 + 0.4 * c as f64).ln(),
                    log_lengthscales: vec![0.7f64.ln(), (1.3 + 0.2 * c as f64).ln()],
                    learn_variance: true,
                };
                let white = White { log_variance: (0.05 * (c + 1) as f64).ln(), learn_variance: true };
                Box::new(Sum::new(vec![Box::new(ard), Box::new(white)])) as Box<dyn Kernel>
            })
            .collect(),
    );
    let mut start = Sparse::new(kernels, base.zs.clone(), base.q.clone()).unwrap();
    start.whiten = false;
    // The white variances are free parameters: the check must reach them.
    assert_eq!(start.kernels.log_params().len(), 3 * 4, "three classes x (variance, two length-scales, white variance)");
    assert_lbfgs_gradient("vc2017 configuration", &start, &x, &y, &method);
}

#[test]
fn the_lengthscale_coordinate_and_the_pair_count_reach_batch_lbfgs() {
    // Fifteen L-BFGS iterations from the same start: moving the length-scale in log l^2, or
    // keeping one curvature pair, takes another path (another ELBO); each still learns.
    use crate::methods::{FitContext, HyperPolicy, Problem};
    let mut rng = Pcg64::seed_from_u64(8);
    let centres = [[0.0, 2.0], [2.0, -1.0], [-2.0, -1.0]];
    let x = Array2::from_shape_fn((60, 2), |(i, d)| centres[i % 3][d] + 0.6 * rng.random_range(-1.0..1.0));
    let y: Vec<usize> = (0..60).map(|i| i % 3).collect();
    let elbo = |extra: serde_json::Value| {
        let mut settings = serde_json::json!({ "inducing": 6, "max_iters": 15, "optimizer": "lbfgs", "whiten": false });
        settings.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        let method = crate::methods::build("svgp", &settings).unwrap();
        let kernels = KernelSet::shared_se(&se(1.0, 1.0));
        let mut fit_rng = Pcg64::seed_from_u64(1);
        let mut ctx = FitContext::new(&mut fit_rng, None);
        method.fit(&Problem { x: &x, y: &y, n_classes: 3 }, &kernels, HyperPolicy::Learn, &mut ctx).unwrap().evidence().unwrap().value
    };
    let base = elbo(serde_json::json!({}));
    let squared = elbo(serde_json::json!({ "lbfgs_lengthscale": "log_squared" }));
    let one_pair = elbo(serde_json::json!({ "lbfgs_pairs": 1 }));
    assert!(base != squared && base != one_pair, "{base} {squared} {one_pair}");
    for v in [base, squared, one_pair] {
        assert!(v > -60.0 * 3f64.ln(), "ELBO {v} no better than guessing");
    }
}

#[test]
fn batch_lbfgs_scores_every_scheduled_checkpoint_at_the_best_point_so_far() {
    // A checkpoint at every evaluation: the rejected trial points of the line searches too,
    // each scored at the best point so far (its objective never falls along the trace), and
    // the scores at an unimproved evaluation equal the previous ones.
    use crate::methods::{Checkpoints, FitContext, HyperPolicy, Problem};
    use std::collections::BTreeMap;
    let mut rng = Pcg64::seed_from_u64(8);
    let centres = [[0.0, 2.0], [2.0, -1.0], [-2.0, -1.0]];
    let x = Array2::from_shape_fn((60, 2), |(i, d)| centres[i % 3][d] + 0.9 * rng.random_range(-1.0..1.0));
    let y: Vec<usize> = (0..60).map(|i| i % 3).collect();
    let settings = serde_json::json!({ "inducing": 6, "max_iters": 25, "optimizer": "lbfgs", "whiten": false,
        "inducing_per_class": true, "lbfgs_first_step": "unit_length", "likelihood": "robust_max", "epsilon": 0.001 });
    let method = crate::methods::build("svgp", &settings).unwrap();
    let kernels = KernelSet::shared_se(&se(1.0, 1.0));
    let scorer = |model: &dyn crate::methods::Fitted, _iter: u64| -> Result<BTreeMap<String, f64>, String> {
        let p = model.predict(&x, &mut Pcg64::seed_from_u64(3)).map_err(|e| e.to_string())?;
        Ok(BTreeMap::from([("p00".to_string(), p.probs[(0, 0)])]))
    };
    let mut fit_rng = Pcg64::seed_from_u64(1);
    let mut ctx = FitContext::new(&mut fit_rng, None).with_checkpoints(Checkpoints::Every { every: 1 }, &scorer);
    let model = method.fit(&Problem { x: &x, y: &y, n_classes: 3 }, &kernels, HyperPolicy::Learn, &mut ctx).unwrap();
    let trace = ctx.take_trace();
    drop(ctx);
    let evaluations = model.diagnostics().iterations.unwrap() as usize;
    let points = |name: &str| -> Vec<(usize, f64)> { trace.iter().filter(|p| p.name == name).map(|p| (p.iter, p.value)).collect() };
    let (objective, p00) = (points("objective"), points("p00"));
    assert_eq!(objective.iter().map(|p| p.0).collect::<Vec<_>>(), (1..=evaluations).collect::<Vec<_>>());
    assert_eq!(p00.len(), evaluations);
    let unimproved: Vec<usize> = (1..evaluations).filter(|&k| objective[k].1 == objective[k - 1].1).collect();
    assert!(!unimproved.is_empty(), "no rejected trial point in {evaluations} evaluations: the test needs one");
    for k in unimproved {
        assert_eq!(p00[k].1.to_bits(), p00[k - 1].1.to_bits(), "evaluation {}: not the best point's model", k + 1);
    }
    assert!(objective.windows(2).all(|w| w[1].1 >= w[0].1));
}
