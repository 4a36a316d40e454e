//! Hyper-parameter learning: the envelope gradient against finite differences, the search's end against a grid and a tight search, and the settings' checks.
use super::*;

#[test]
fn hyper_gradient_matches_finite_differences_of_the_optimised_bound() {
    let (x, y) = toy(7, 3, 9);
    let params = KlmnlParams { tol: 1e-14, b_tol: 1e-11, ..Default::default() };
    for ard in [false, true] {
        let kern = if ard {
            SqExp { log_variance: 0.2, log_lengthscales: vec![0.1, -0.2], learn_variance: true }
        } else {
            SqExp { log_variance: 0.5, log_lengthscales: vec![0.3], learn_variance: true }
        };
        let at = |p: &[f64]| -> f64 {
            let k = kern.with_log_params(p);
            fit_variational(&Prior::new(k.gram(&x), eye(3), &y).unwrap(), &params, None, None).unwrap().log_zh
        };
        let kx = kern.gram(&x);
        let dkx = kern.gram_grads(&x, &kx);
        let pr = Prior::new(kx, eye(3), &y).unwrap();
        let fit = fit_variational(&pr, &params, None, None).unwrap();
        let g = hyper_gradient(&envelope(&pr, &fit, false), &dkx);
        let p0 = kern.log_params();
        for j in 0..p0.len() {
            let e = 1e-4;
            let mut pp = p0.clone();
            pp[j] += e;
            let mut pm = p0.clone();
            pm[j] -= e;
            let fd = (at(&pp) - at(&pm)) / (2.0 * e);
            assert!((fd - g[j]).abs() < 1e-5 * (1.0 + fd.abs()), "ard={ard} param {j}: formula {} vs fd {fd}", g[j]);
        }
    }
}

/// Learning the two length-scales (the variance held at 1) by a search run to L-BFGS's own
/// convergence raises the optimised bound clearly above the fixed kernel's and ends where the
/// bound's free partial derivatives vanish; predictions of the learned model are consistent.
#[test]
fn learning_raises_the_bound_and_predictions_are_consistent() {
    let (x, y) = toy(12, 3, 21);
    let kern = SqExp { log_variance: 0.0, log_lengthscales: vec![0.0, 0.0], learn_variance: false };
    let mut r = rng(1);
    let problem = Problem { x: &x, y: &y, n_classes: 3 };
    let method = KlmnlParams { hyper_tol: 0.0, ..KlmnlParams::default() }.check().unwrap();
    let mut ctx = FitContext::new(&mut r, None);
    let fixed = method.fit_model(&problem, &kern, HyperPolicy::Fixed, &mut ctx).unwrap();
    let learned = method.fit_model(&problem, &kern, HyperPolicy::Learn, &mut ctx).unwrap();
    // The bound is deterministic and each fit converges to 1e-10 relative; learning gains about
    // 1.9 nats here, so 0.5 nats fails a search that did not move (or moved the wrong way).
    assert!(learned.log_zh() > fixed.log_zh() + 0.5, "learned {} vs fixed {}", learned.log_zh(), fixed.log_zh());
    // At an interior optimum the free entries (the length-scales) of the gradient vanish: below
    // 1e-4 of their size at the start (about 2e-7 against 0.4 here). The variance's entry is
    // not free and need not vanish.
    let free = kern.free_mask();
    let largest_free = |g: Vec<f64>| g.iter().zip(&free).filter(|(_, f)| **f).map(|(v, _)| v.abs()).fold(0.0, f64::max);
    let (at_start, at_end) = (largest_free(fixed.hyper_gradient()), largest_free(learned.hyper_gradient()));
    assert!(at_end < 1e-4 * at_start, "free gradient {:?} at the learned kernel ({at_start} at the start)", learned.hyper_gradient());
    assert_eq!(learned.kernel().log_variance, 0.0, "unit variance kept fixed");
    let (xt, _) = toy(5, 3, 77);
    let cache = learned.predictive_logs(&xt).unwrap();
    for j in 0..5 {
        // (24) <= (25) class-wise (the two share their argmax by construction: both are m_c
        // plus a constant of the row), and the latent means sum to zero (K^c = I)
        for c in 0..3 {
            assert!(cache.log_p24[j][c] <= cache.log_p25[j][c] + 1e-12);
        }
    }
    let (means, _) = learned.latent_predictive(&xt);
    for m in means {
        assert!(m.iter().sum::<f64>().abs() < 1e-8);
    }
}

#[test]
fn learning_reaches_the_best_bound_of_a_fine_grid() {
    // Inner fits run loose while the outer steps are large (inner_params); the optimum must
    // still be the true one: no point of a grid around it may beat it.
    let (x, y) = toy(14, 3, 8);
    let kern = SqExp { log_variance: 0.5, log_lengthscales: vec![0.0], learn_variance: false };
    let problem = Problem { x: &x, y: &y, n_classes: 3 };
    let tight = KlmnlParams { hyper_tol: 0.0, ..KlmnlParams::default() }.check().unwrap();
    let mut r = rng(2);
    let learned = tight.fit_model(&problem, &kern, HyperPolicy::Learn, &mut FitContext::new(&mut r, None)).unwrap();
    let l0 = learned.kernel().log_lengthscales[0];
    let at = |l: f64| {
        let k = SqExp { log_lengthscales: vec![l], ..kern.clone() };
        fit_variational(&Prior::new(k.gram(&x), eye(3), &y).unwrap(), &KlmnlParams::default(), None, None).unwrap().log_zh
    };
    let best_grid = (-20..=20).map(|k| at(l0 + 0.01 * k as f64)).fold(f64::NEG_INFINITY, f64::max);
    assert!(learned.log_zh() >= best_grid - 1e-8, "learned {} vs grid {best_grid}", learned.log_zh());
    // The default stop (an iteration gains < 1e-4 nats) ends near it, and sooner.
    let default = KlmnlParams::default().check().unwrap();
    let stopped = default.fit_model(&problem, &kern, HyperPolicy::Learn, &mut FitContext::new(&mut r, None)).unwrap();
    assert!(stopped.log_zh() >= best_grid - 1e-3, "stopped at {} vs grid {best_grid}", stopped.log_zh());
    // Issue 25's bar: the default search's bound within 1e-6 relative of the tight search's.
    let gap = learned.log_zh() - stopped.log_zh();
    assert!(gap <= 1e-6 * learned.log_zh().abs(), "default {} vs tight {}", stopped.log_zh(), learned.log_zh());
    let evals = |m: &KlmnlModel| m.extra["hyper_evaluations"];
    assert!(evals(&stopped) < evals(&learned), "{} vs {} evaluations", evals(&stopped), evals(&learned));
    // and the schedule itself: tight without history or once the steps are small
    let p = KlmnlParams::default();
    assert_eq!(inner_params(&p, &[]).tol, p.tol);
    assert_eq!(inner_params(&p, &[-100.0, -100.0 + 1e-9]).tol, p.tol);
    let loose = inner_params(&p, &[-150.0, -140.0]);
    assert_eq!(loose.tol, 1e-6);
    assert!((loose.b_tol - p.b_tol * 100.0).abs() < 1e-18);
}

#[test]
fn with_an_ard_kernel_the_default_search_ends_within_1e_6_of_the_tight_searchs_bound() {
    // Issue 25's bar for the default stop (hyper_tol 1e-4 nats): the learned bound within 1e-6
    // relative of a search run to L-BFGS's own convergence, with two length-scales and the
    // variance learned (flat directions included), and in fewer evaluations.
    let (x, y) = toy(18, 3, 21);
    let kern = SqExp { log_variance: 0.0, log_lengthscales: vec![0.0; 2], learn_variance: true };
    let problem = Problem { x: &x, y: &y, n_classes: 3 };
    let fit = |params: KlmnlParams| {
        let mut r = rng(5);
        params.check().unwrap().fit_model(&problem, &kern, HyperPolicy::Learn, &mut FitContext::new(&mut r, None)).unwrap()
    };
    let tight = fit(KlmnlParams { hyper_tol: 0.0, ..KlmnlParams::default() });
    let default = fit(KlmnlParams::default());
    let gap = tight.log_zh() - default.log_zh();
    assert!(gap.abs() <= 1e-6 * tight.log_zh().abs(), "default {} vs tight {}", default.log_zh(), tight.log_zh());
    assert!(default.extra["hyper_evaluations"] <= tight.extra["hyper_evaluations"]);
}

#[test]
fn settings_are_checked_by_name() {
    let e = KlmnlParams { predictive: "eq26".into(), ..Default::default() }.check().unwrap_err();
    assert!(e.contains("settings.predictive"));
    let e = KlmnlParams { hyper_tol: -1e-4, ..Default::default() }.check().unwrap_err();
    assert!(e.contains("settings.hyper_tol"), "{e}");
    assert!(KlmnlParams::from_settings(&serde_json::json!({"max_sweep": 3})).is_err());
}
