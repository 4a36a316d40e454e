//! One conformance test over every registered method: on a tiny problem, each method that
//! supports it must give finite probabilities on the simplex and a finite evidence of its
//! declared kind, be bit-for-bit deterministic on 1 and 2 threads, stop at an iteration budget
//! with a usable model, trace checkpoints in time order, and accept exactly what `supports`
//! accepts.
use mcgp::kernels::{KernelParams, KernelSet};
use mcgp::methods::{build, Budget, Checkpoints, FitContext, FitError, Fitted, HyperPolicy, Method, Prediction, Problem, METHODS};
use ndarray::Array2;
use rand::{RngExt, SeedableRng};
use rand_distr::StandardNormal;
use rand_pcg::Pcg64;
use std::collections::BTreeMap;

/// Settings that keep every method to a fraction of a second here (also the fingerprint
/// problem's, `numerics_versions`).
pub(crate) fn quick_settings(method: &str) -> serde_json::Value {
    match method {
        "mc_mnl" | "mc_mnp" => serde_json::json!({ "n_samples": 2000, "n_test_samples": 200 }),
        "gibbs_mnp" => serde_json::json!({ "burn_in": 50, "samples": 100, "evidence_samples": 200 }),
        "vbmnp" => serde_json::json!({ "max_iters": 20, "is_samples": 50 }),
        "laplace" => serde_json::json!({ "mc_samples": 200, "max_hyper_iters": 8 }),
        "klmnl" => serde_json::json!({ "max_hyper_iters": 8 }),
        "klmnl_sparse" => serde_json::json!({ "sites": 8, "max_hyper_iters": 3 }),
        "svgp" => serde_json::json!({ "inducing": 4, "batch_size": 5, "max_iters": 20, "inducing_init": { "init": "random" } }),
        "scmgpc" => serde_json::json!({ "inducing": 4, "batch": 5, "max_iters": 20, "predict": "monte_carlo", "predict_samples": 200 }),
        "ep" | "sep" => serde_json::json!({ "inducing": 4, "max_iters": 10 }),
        "gfitc" => serde_json::json!({ "inducing": 4, "max_iters": 5 }),
        "ivm" => serde_json::json!({ "active_size": 8 }),
        "ivm_multiway" => serde_json::json!({ "active_total": 8 }),
        _ => serde_json::Value::Null,
    }
}

/// `n_per` points per class around C well-separated centres in 2-D.
fn blobs(n_per: usize, n_classes: usize, seed: u64) -> (Array2<f64>, Vec<usize>) {
    let mut rng = Pcg64::seed_from_u64(seed);
    let n = n_per * n_classes;
    let mut x = Array2::zeros((n, 2));
    let mut y = Vec::with_capacity(n);
    for i in 0..n {
        let c = i % n_classes;
        let angle = 2.0 * std::f64::consts::PI * c as f64 / n_classes as f64;
        x[(i, 0)] = 1.5 * angle.cos() + 0.5 * rng.sample::<f64, _>(StandardNormal);
        x[(i, 1)] = 1.5 * angle.sin() + 0.5 * rng.sample::<f64, _>(StandardNormal);
        y.push(c);
    }
    (x, y)
}

fn kernel_set(yaml: &str, n_classes: usize) -> KernelSet {
    serde_norway::from_str::<KernelParams>(yaml).unwrap().kernel_set(2, n_classes).unwrap()
}

struct Run {
    prediction: Prediction,
    model: Box<dyn Fitted>,
    trace: Vec<mcgp::results::TracePoint>,
}

fn fit(
    method: &str,
    problem: &Problem,
    kernels: &KernelSet,
    hyper: HyperPolicy,
    budget: Option<Budget>,
    x_test: &Array2<f64>,
) -> Result<Run, FitError> {
    let m = build(method, &quick_settings(method)).unwrap();
    let mut rng = Pcg64::seed_from_u64(7);
    let scorer = |model: &dyn Fitted, _iter: u64| -> Result<BTreeMap<String, f64>, String> {
        let p = model.predict(x_test, &mut Pcg64::seed_from_u64(3)).map_err(|e| e.to_string())?;
        p.validate(x_test.nrows(), problem.n_classes)?;
        Ok(BTreeMap::from([("p00".to_string(), p.probs[(0, 0)])]))
    };
    let mut ctx = FitContext::new(&mut rng, None).with_budget(budget).with_checkpoints(Checkpoints::Every { every: 1 }, &scorer);
    let model = m.fit(problem, kernels, hyper, &mut ctx)?;
    let trace = ctx.take_trace();
    drop(ctx);
    let prediction = model.predict(x_test, &mut rng)?;
    Ok(Run { prediction, model, trace })
}

fn bits(p: &Prediction) -> Vec<u64> {
    p.probs.iter().map(|v| v.to_bits()).collect()
}

#[test]
fn every_registered_method_keeps_the_contract() {
    let kernel_yamls = [
        "{ lengthscale: 1.0, variance: 2.0 }",
        "{ lengthscale: 1.0, per_class: true }",
        "{ type: sum, terms: [ { lengthscale: 1.0 }, { type: white, variance: 0.1 } ] }",
    ];
    let mut ran = BTreeMap::<&str, usize>::new();
    for &(method, _) in METHODS {
        for n_classes in [2, 3] {
            let (x, y) = blobs(6, n_classes, 11);
            let (x_test, _) = blobs(2, n_classes, 12);
            let problem = Problem { x: &x, y: &y, n_classes };
            for yaml in kernel_yamls {
                let kernels = kernel_set(yaml, n_classes);
                for hyper in [HyperPolicy::Fixed, HyperPolicy::Learn] {
                    let what = format!("{method}, C = {n_classes}, kernel {yaml}, {hyper:?}");
                    let m = build(method, &quick_settings(method)).unwrap();
                    let supported = m.supports(&problem.shape(), &kernels, hyper);
                    let result = fit(method, &problem, &kernels, hyper, None, &x_test);
                    let run = match (supported, result) {
                        (Ok(()), Ok(run)) => run,
                        (Err(_), Err(FitError::Unsupported(_))) => continue,
                        (Ok(()), Err(e)) => panic!("{what}: supported, but fit failed: {e}"),
                        (Err(why), Ok(_)) => panic!("{what}: fit accepted what supports refused ({why})"),
                        (Err(why), Err(e)) => panic!("{what}: refused ({why}) with a failure that is not Unsupported: {e}"),
                    };
                    *ran.entry(method).or_default() += 1;
                    run.prediction.validate(x_test.nrows(), problem.n_classes).unwrap_or_else(|e| panic!("{what}: {e}"));
                    assert_eq!(run.prediction.probs.ncols(), n_classes, "{what}");
                    if let Some(e) = run.model.evidence() {
                        assert!(e.value.is_finite(), "{what}: evidence {e:?}");
                        assert!(e.std_err.is_none_or(|s| s.is_finite() && s >= 0.0), "{what}: {e:?}");
                    }
                    assert_eq!(run.model.kernels().param_names().len(), run.model.kernels().n_params(), "{what}");
                    let handoff = run.model.handoff();
                    assert_eq!(handoff.names, run.model.kernels().param_names(), "{what}");
                    // Checkpoints: scored in time order.
                    let times: Vec<(usize, f64)> = run.trace.iter().filter(|p| p.name == "p00").map(|p| (p.iter, p.time)).collect();
                    assert!(times.windows(2).all(|w| w[0].0 < w[1].0 && w[0].1 <= w[1].1), "{what}: checkpoints out of order {times:?}");
                    assert!(run.trace.iter().all(|p| p.value.is_finite() || p.name != "p00"), "{what}");
                }
            }
        }
    }
    // Every method ran on some problem; those that support learning did it with a budget below.
    for &(method, _) in METHODS {
        assert!(ran.get(method).copied().unwrap_or(0) > 0, "{method} supported no test problem");
    }
}

#[test]
fn results_are_bit_identical_on_one_and_two_threads() {
    let (x, y) = blobs(6, 3, 21);
    let (x_test, _) = blobs(2, 3, 22);
    let problem = Problem { x: &x, y: &y, n_classes: 3 };
    let kernels = kernel_set("{ lengthscale: 1.0, variance: 2.0 }", 3);
    for &(method, _) in METHODS {
        let m = build(method, &quick_settings(method)).unwrap();
        if m.supports(&problem.shape(), &kernels, HyperPolicy::Fixed).is_err() {
            continue;
        }
        let once = |threads: usize| -> Vec<Vec<u64>> {
            let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
            pool.install(|| {
                use rayon::prelude::*;
                (0..2)
                    .into_par_iter()
                    .map(|_| bits(&fit(method, &problem, &kernels, HyperPolicy::Fixed, None, &x_test).unwrap().prediction))
                    .collect()
            })
        };
        let one = once(1);
        assert_eq!(one[0], one[1], "{method}: two fits on one thread differ");
        assert_eq!(one, once(2), "{method}: one thread vs two");
    }
}

/// The same for the sparse methods at a size where faer splits their products and solves
/// across threads (the small problem above stays below its cut-off): N = 300, M = 20 a class,
/// learning kernels and inducing inputs.
#[test]
fn sparse_methods_split_across_threads_with_the_same_bits() {
    let (x, y) = blobs(100, 3, 23);
    let (x_test, _) = blobs(10, 3, 24);
    let problem = Problem { x: &x, y: &y, n_classes: 3 };
    let kernels = kernel_set("{ lengthscale: 1.0, variance: 2.0 }", 3);
    let settings = |method: &str| match method {
        "ep" | "sep" | "gfitc" => serde_json::json!({ "inducing": 20, "max_iters": 3 }),
        "svgp" => serde_json::json!({ "inducing": 20, "batch_size": 150, "max_iters": 4, "inducing_init": { "init": "random" } }),
        "scmgpc" => serde_json::json!({ "inducing": 20, "batch": 150, "max_iters": 4, "predict": "monte_carlo", "predict_samples": 200 }),
        _ => unreachable!(),
    };
    for method in ["ep", "sep", "gfitc", "svgp", "scmgpc"] {
        let m = build(method, &settings(method)).unwrap();
        let once = |threads| fit_bits_on(threads, m.as_ref(), &problem, &kernels, HyperPolicy::Learn, &x_test);
        assert_eq!(once(1), once(2), "{method}: one thread vs two");
    }
}

/// The bits of a fit's test predictions, the fit run in a pool of `threads` threads.
fn fit_bits_on(
    threads: usize,
    m: &dyn Method,
    problem: &Problem,
    kernels: &KernelSet,
    policy: HyperPolicy,
    x_test: &Array2<f64>,
) -> Vec<u64> {
    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
    pool.install(|| {
        let mut rng = Pcg64::seed_from_u64(5);
        let mut ctx = FitContext::new(&mut rng, None);
        let fitted = m.fit(problem, kernels, policy, &mut ctx).unwrap();
        bits(&fitted.predict(x_test, &mut Pcg64::seed_from_u64(6)).unwrap())
    })
}

/// The IVMs' parallel work (the learning gradient's solves and products, the multi-way
/// scoring of every point, split in chunks of 64) only splits on problems of some hundreds of
/// points: same bits on one thread and on two at such a size.
#[test]
fn ivms_split_across_threads_with_the_same_bits() {
    let (x, y) = blobs(200, 3, 25);
    let (x_test, _) = blobs(10, 3, 26);
    let problem = Problem { x: &x, y: &y, n_classes: 3 };
    let kernels = kernel_set("{ lengthscale: 1.0, variance: 2.0 }", 3);
    let settings = |method: &str| match method {
        "ivm" => serde_json::json!({ "active_size": 40, "outer_iters": 2, "inner_iters": 3 }),
        "ivm_multiway" => serde_json::json!({ "active_total": 30 }),
        _ => unreachable!(),
    };
    for method in ["ivm", "ivm_multiway"] {
        let m = build(method, &settings(method)).unwrap();
        let policy =
            if m.supports(&problem.shape(), &kernels, HyperPolicy::Learn).is_ok() { HyperPolicy::Learn } else { HyperPolicy::Fixed };
        let once = |threads| fit_bits_on(threads, m.as_ref(), &problem, &kernels, policy, &x_test);
        assert_eq!(once(1), once(2), "{method} ({policy:?}): one thread vs two");
    }
}

#[test]
fn an_iteration_budget_is_a_normal_stop_with_a_usable_model() {
    let (x, y) = blobs(6, 3, 31);
    let (x_test, _) = blobs(2, 3, 32);
    let problem = Problem { x: &x, y: &y, n_classes: 3 };
    // The signal variance held fixed: VB-MNP learns the precisions only (and says so).
    let kernels = kernel_set("{ ard: true, lengthscale: 3.0, variance: 0.5, learn_variance: false }", 3);
    let mut learners = 0;
    for &(method, _) in METHODS {
        let m = build(method, &quick_settings(method)).unwrap();
        if m.supports(&problem.shape(), &kernels, HyperPolicy::Learn).is_err() {
            continue;
        }
        let budget = Budget { iterations: Some(2), ..Budget::default() };
        let run = fit(method, &problem, &kernels, HyperPolicy::Learn, Some(budget), &x_test).unwrap_or_else(|e| panic!("{method}: {e}"));
        run.prediction.validate(x_test.nrows(), problem.n_classes).unwrap();
        let d = run.model.diagnostics();
        let Some(i) = d.iterations.filter(|_| d.stop_reason.is_some_and(|s| s.to_string().starts_with("budget"))) else { continue };
        // (ivm on C > 2 classes fits one binary IVM per class against the rest, each to the
        // budget, and reports their iterations summed.)
        let per_fit = if method == "ivm" { 3 } else { 1 };
        assert!(i <= 2 * per_fit, "{method}: {i} iterations past a budget of 2");
        learners += 1;
        // A method that maximises its evidence ends at the best point reached: no worse than the
        // start. (VB-MNP's update of the precisions is an importance-sampled posterior mean, not
        // an ascent of its bound, so its bound may fall.)
        let fixed = fit(method, &problem, &kernels, HyperPolicy::Fixed, None, &x_test).unwrap();
        if let (Some(a), Some(b)) = (run.model.evidence(), fixed.model.evidence()) {
            if ["laplace", "klmnl"].contains(&method) {
                // (svgp takes stochastic steps: its bound need not rise in two of them.)
                assert!(a.value >= b.value - 1e-6, "{method}: budget-stopped evidence {} below the start's {}", a.value, b.value);
            }
        }
    }
    assert!(learners >= 5, "laplace, klmnl, mc_mnl, mc_mnp and vbmnp learn hyper-parameters and must stop at the budget ({learners} did)");
}

/// Input no fit can use is refused by every method with an error naming the method and the
/// fault (`Problem::check`), never an index panic: a label that is no class, fewer labels than
/// rows, no rows at all.
#[test]
fn every_method_refuses_labels_that_do_not_fit_the_problem() {
    let (x, y) = blobs(6, 3, 41);
    let kernels = kernel_set("{ lengthscale: 1.0 }", 3);
    let mut bad_label = y.clone();
    bad_label[4] = 3;
    let empty = Array2::<f64>::zeros((0, 2));
    let cases: [(&str, Problem, &str); 3] = [
        ("label 3 of 3 classes", Problem { x: &x, y: &bad_label, n_classes: 3 }, "class index 3 out of range for 3 classes"),
        ("one label short", Problem { x: &x, y: &y[1..], n_classes: 3 }, "18 rows but 17 labels"),
        ("no rows", Problem { x: &empty, y: &[], n_classes: 3 }, "no training rows"),
    ];
    for &(method, _) in METHODS {
        for (what, problem, want) in &cases {
            let m = build(method, &quick_settings(method)).unwrap();
            let mut rng = Pcg64::seed_from_u64(1);
            let mut ctx = FitContext::new(&mut rng, None);
            match m.fit(problem, &kernels, HyperPolicy::Fixed, &mut ctx) {
                Err(FitError::Unsupported(e)) => assert!(e.starts_with(method) && e.contains(want), "{method}, {what}: {e}"),
                Err(e) => panic!("{method}, {what}: not refused as unusable input: {e}"),
                Ok(_) => panic!("{method}, {what}: fitted"),
            }
        }
    }
}

/// Per-class kernels of the wrong count (two for three classes) are refused by every method,
/// by `supports` and by `fit` alike, never indexed past the end or silently cut short.
#[test]
fn every_method_refuses_per_class_kernels_of_the_wrong_count() {
    let (x, y) = blobs(6, 3, 43);
    let problem = Problem { x: &x, y: &y, n_classes: 3 };
    let two = kernel_set("{ lengthscale: 1.0, per_class: true }", 2);
    let kernels = mcgp::kernels::KernelSet::per_class(two.kernels().iter().map(|k| k.clone_box()).collect());
    for &(method, _) in METHODS {
        let m = build(method, &quick_settings(method)).unwrap();
        assert!(m.supports(&problem.shape(), &kernels, HyperPolicy::Fixed).is_err(), "{method}: supports accepted 2 kernels for 3 classes");
        let mut rng = Pcg64::seed_from_u64(1);
        let mut ctx = FitContext::new(&mut rng, None);
        let result = m.fit(&problem, &kernels, HyperPolicy::Fixed, &mut ctx);
        assert!(matches!(result, Err(FitError::Unsupported(_))), "{method}: {:?}", result.err());
    }
}

/// `fit` refuses whatever `supports` refuses, with the same message (the trait's `fit` checks
/// before it trains): over both policies, two and three classes, a shared and a per-class
/// kernel, every refusal `mcgp check` would give is also the fit's.
#[test]
fn every_fit_refuses_what_its_method_does_not_support() {
    let mut refusals = 0;
    for &(method, _) in METHODS {
        for n_classes in [2, 3] {
            let (x, y) = blobs(4, n_classes, 47);
            let problem = Problem { x: &x, y: &y, n_classes };
            for kernel in ["{ lengthscale: 1.0 }", "{ lengthscale: 1.0, per_class: true }"] {
                let kernels = kernel_set(kernel, n_classes);
                for hyper in [HyperPolicy::Fixed, HyperPolicy::Learn] {
                    let m = build(method, &quick_settings(method)).unwrap();
                    let Err(why) = m.supports(&problem.shape(), &kernels, hyper) else { continue };
                    let mut rng = Pcg64::seed_from_u64(1);
                    let mut ctx = FitContext::new(&mut rng, None);
                    match m.fit(&problem, &kernels, hyper, &mut ctx) {
                        Err(FitError::Unsupported(e)) => assert_eq!(e, why, "{method}, {n_classes} classes, {kernel}, {hyper:?}"),
                        other => panic!(
                            "{method}, {n_classes} classes, {kernel}, {hyper:?}: supports refused ({why}), fit gave {:?}",
                            other.err()
                        ),
                    }
                    refusals += 1;
                }
            }
        }
    }
    // gibbs_mnp and mc_mnp refuse learning, the two-class-only and shared-kernel-only methods
    // refuse the rest: the test must have met some.
    assert!(refusals >= 4, "only {refusals} refusals met");
}

/// `Method::progress` says what a fit does with a budget and a checkpoint schedule (`mcgp
/// check` refuses them where it says neither): fitted with an iteration budget of one and a
/// checkpoint at every iteration, each method stops at the budget exactly where it says so and
/// scores checkpoints exactly where it says so.
#[test]
fn progress_says_what_a_fit_does_with_budgets_and_checkpoints() {
    let mut mismatches = Vec::new();
    let mut checked = 0;
    for &(method, _) in METHODS {
        for n_classes in [2, 3] {
            let (x, y) = blobs(6, n_classes, 41);
            let (x_test, _) = blobs(2, n_classes, 42);
            let problem = Problem { x: &x, y: &y, n_classes };
            let kernels = kernel_set("{ lengthscale: 1.0, variance: 2.0 }", n_classes);
            for hyper in [HyperPolicy::Fixed, HyperPolicy::Learn] {
                let m = build(method, &quick_settings(method)).unwrap();
                if m.supports(&problem.shape(), &kernels, hyper).is_err() {
                    continue;
                }
                let said = m.progress(&problem.shape(), hyper);
                let budget = Budget { iterations: Some(1), ..Budget::default() };
                let run = fit(method, &problem, &kernels, hyper, Some(budget), &x_test).unwrap_or_else(|e| panic!("{method}: {e}"));
                let stopped = run.model.diagnostics().stop_reason.is_some_and(|s| s.to_string() == "budget_iterations");
                let scored = run.trace.iter().any(|p| p.name == "p00");
                if (stopped, scored) != (said.budget, said.checkpoints) {
                    mismatches.push(format!(
                        "{method}, C = {n_classes}, {hyper:?}: says budget {} / checkpoints {}, did {stopped} / {scored}",
                        said.budget, said.checkpoints
                    ));
                }
                checked += 1;
            }
        }
    }
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
    assert!(checked >= 20, "{checked} combinations");
}

/// Data a researcher's splits can produce, which no method may answer with a panic or a
/// non-finite result: each registered method either fits and then predicts finite
/// probabilities on the simplex with a finite evidence, or fails with a message (the runner
/// records the cell as failed and goes on). The list of failures is printed; a panic names the
/// method and the problem.
#[test]
fn degenerate_data_gives_valid_predictions_or_a_clean_failure() {
    let mut failures = Vec::new();
    for n_classes in [2, 3] {
        let (x, y) = blobs(6, n_classes, 31);
        let (x_test, _) = blobs(2, n_classes, 32);
        let last = n_classes - 1;
        let keep = |rows: &[usize]| (x.select(ndarray::Axis(0), rows), rows.iter().map(|&i| y[i]).collect::<Vec<_>>());
        let of_class = |c: usize| (0..y.len()).filter(|&i| y[i] == c).collect::<Vec<_>>();
        let others: Vec<usize> = (0..last).flat_map(of_class).collect();
        let mut problems: Vec<(String, Array2<f64>, Vec<usize>)> = Vec::new();
        let (xt, yt) = keep(&(0..y.len()).chain(0..y.len()).collect::<Vec<_>>());
        problems.push(("every row twice".into(), xt, yt));
        let (xt, yt) = keep(&others);
        problems.push((format!("class {} absent from training", last + 1), xt, yt));
        let (xt, yt) = keep(&others.iter().copied().chain(of_class(last).into_iter().take(1)).collect::<Vec<_>>());
        problems.push((format!("one row of class {}", last + 1), xt, yt));
        let (xt, yt) = keep(&(0..n_classes).collect::<Vec<_>>());
        problems.push(("one row per class".into(), xt, yt));
        problems.push(("inputs 1000 apart".into(), &x * 1000.0, y.clone()));
        problems.push(("every input the same".into(), Array2::zeros(x.dim()), y.clone()));
        let kernels = kernel_set("{ lengthscale: 1.0, variance: 2.0 }", n_classes);
        for &(method, _) in METHODS {
            for (name, xp, yp) in &problems {
                let problem = Problem { x: xp, y: yp, n_classes };
                for hyper in [HyperPolicy::Fixed, HyperPolicy::Learn] {
                    let what = format!("{method}, C = {n_classes}, {name}, {hyper:?}");
                    if build(method, &quick_settings(method)).unwrap().supports(&problem.shape(), &kernels, hyper).is_err() {
                        continue;
                    }
                    let outcome =
                        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| fit(method, &problem, &kernels, hyper, None, &x_test)));
                    match outcome {
                        Err(_) => panic!("{what}: the fit panicked"),
                        Ok(Err(e)) => {
                            let message = e.to_string();
                            assert!(!message.trim().is_empty(), "{what}: a failure without a message");
                            assert!(!matches!(e, FitError::Stop(_)), "{what}: a budget stop left fit: {message}");
                            failures.push(format!("{what}: {message}"));
                        }
                        Ok(Ok(run)) => {
                            run.prediction.validate(x_test.nrows(), n_classes).unwrap_or_else(|e| panic!("{what}: {e}"));
                            if let Some(e) = run.model.evidence() {
                                assert!(e.value.is_finite(), "{what}: evidence {e:?}");
                            }
                        }
                    }
                }
            }
        }
    }
    eprintln!("{} clean failures on degenerate data:\n  {}", failures.len(), failures.join("\n  "));
}
