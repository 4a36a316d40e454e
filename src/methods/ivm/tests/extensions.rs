//! End-to-end fits, c against the rest and virtual informative vectors.
use super::*;
use ndarray::s;

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
        p.validate(xt.nrows(), 2).unwrap();
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
        p.validate(xt.nrows(), 3).unwrap();
        assert!(multi.evidence().is_none());
        // Each task's discriminant mu_c + bias_c against its own predictive: Q_c(+1 | x) =
        // Phi((mu_c + bias_c) / sqrt(1 + var_c)) is above 1/2 exactly where it is positive.
        let (disc, log_q_pos) = (&p.log_class_values[model::TASK_DISCRIMINANT], &p.log_class_values[model::TASK_LOG_Q]);
        for (d, q) in disc.iter().zip(log_q_pos) {
            assert!(d.abs() < 1e-9 || (*d > 0.0) == (*q > 0.5f64.ln()), "{hyper:?}: discriminant {d}, log Q {q}");
        }
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
    let v = crate::methods::ivm::VirtualVectors { image: [2, 3], background: -1.0, active_size: 1 };
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
/// augmented by the translations of the first stage's active images (built here by hand and
/// compared row by row with the method's augmentation), with fixed and with
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
    let virt = crate::methods::ivm::VirtualVectors { image: [3, 3], background: -1.0, active_size: 10 };
    let settings = |v: Option<&crate::methods::ivm::VirtualVectors>, d: usize| serde_json::json!({ "active_size": d, "outer_iters": 2, "inner_iters": 3, "hyper_prior": "none", "virtual_vectors": v });
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
        // The augmented set by hand: the training rows, then per active image (in inclusion
        // order) its content moved up, down, left and right by one pixel (the 3 x 3 grid's
        // slices, the vacated row or column at the background -1), each with its source's label.
        let mut x_aug = x.clone();
        let mut y_aug = y.clone();
        for &i in &active {
            let image = x.row(i).to_owned().into_shape_with_order((3, 3)).unwrap();
            for (to_rows, from_rows, to_cols, from_cols) in [
                (s![0..2, ..], s![1..3, ..], s![.., ..], s![.., ..]), // up: row r takes row r + 1
                (s![1..3, ..], s![0..2, ..], s![.., ..], s![.., ..]), // down
                (s![.., ..], s![.., ..], s![.., 0..2], s![.., 1..3]), // left: column c takes c + 1
                (s![.., ..], s![.., ..], s![.., 1..3], s![.., 0..2]), // right
            ] {
                let mut shifted = Array2::from_elem((3, 3), -1.0);
                shifted.slice_mut(to_rows).slice_mut(to_cols).assign(&image.slice(from_rows).slice(from_cols));
                x_aug.push_row(shifted.flatten().view()).unwrap();
                y_aug.push(y[i]);
            }
        }
        assert_eq!((x_aug.nrows(), y_aug.len()), (n + 24, n + 24));
        // The method's augmentation is the same, row by row.
        let (x_code, t_code) = crate::methods::ivm::virtual_vectors::augment(&virt, &x, &signs(&y), &active).unwrap();
        assert_eq!(x_code.dim(), x_aug.dim());
        for r in 0..n + 24 {
            assert_eq!(x_code.row(r), x_aug.row(r), "{hyper:?}: augmented row {r}");
            assert_eq!(t_code[r], if y_aug[r] == 1 { 1.0 } else { -1.0 }, "{hyper:?}: target of augmented row {r}");
        }
        // The second stage at the first stage's kernel and intercept, fixed.
        let bias = first.diagnostics().numbers.get("bias").copied().unwrap_or(0.0);
        let fitted_kernels = first.kernels();
        let plain = ivm(serde_json::json!({ "active_size": 10, "bias": bias }));
        let second = run(&plain, &x_aug, &y_aug, &fitted_kernels, HyperPolicy::Fixed).unwrap();
        assert_eq!(bits(with_virtual.as_ref(), &x), bits(second.as_ref(), &x), "{hyper:?}");
        let d = with_virtual.diagnostics();
        assert_eq!((d.numbers["first_active_size"], d.numbers["virtual_added"], d.numbers["active_size"]), (6.0, 24.0, 10.0));
    }
    let wrong = crate::methods::ivm::VirtualVectors { image: [4, 4], ..virt };
    let e = run(&ivm(settings(Some(&wrong), 6)), &x, &y, &kernels, HyperPolicy::Fixed).err().unwrap().to_string();
    assert!(e.contains("virtual_vectors.image") && e.contains("9 features"), "{e}");
}

/// Table 4's two readings of "voting with these discriminants" differ where the tasks'
/// predictive variances do. Row 0 has discriminants mu + bias = (1.0, 0.8) and variances (4, 0):
/// Q = (Phi(1 / sqrt 5), Phi(0.8)) = (0.67, 0.79) votes for task 1, the discriminants for task 0
/// (its true class); rows 1 and 2 agree. `error_pct_discriminant` counts by the discriminants.
#[test]
fn the_vote_by_discriminants_ranks_mean_plus_intercept() {
    let disc: Array2<f64> = ndarray::array![[1.0, 0.8], [-0.5, 0.2], [0.3, -2.0]];
    let var: Array2<f64> = ndarray::array![[4.0, 0.0], [1.0, 1.0], [0.0, 9.0]];
    let z = Array2::from_shape_fn((3, 2), |(j, c)| disc[(j, c)] / (1.0 + var[(j, c)]).sqrt());
    let log_q = z.mapv(crate::special::log_normal_cdf);
    let mut probs = log_q.clone();
    for mut row in probs.rows_mut() {
        crate::linalg::softmax_in_place(row.as_slice_mut().unwrap());
    }
    let mut p = crate::methods::Prediction::new(probs);
    p.log_class_values.insert(model::TASK_LOG_Q.into(), log_q.clone());
    p.log_class_values.insert(model::TASK_LOG_Q_REST.into(), z.mapv(|v| crate::special::log_normal_cdf(-v)));
    p.log_class_values.insert(model::TASK_DISCRIMINANT.into(), disc);
    p.validate(3, 2).unwrap();
    let y = [0, 1, 0];
    let main_votes: Vec<usize> = log_q.rows().into_iter().map(|r| crate::linalg::argmax(&r.to_vec())).collect();
    assert_eq!(main_votes, [1, 1, 0], "the main vote by log Q");
    let scores = OneVsRestModel::new(Vec::new()).test_metrics(&p, &y);
    assert_eq!(scores["error_pct_discriminant"], 0.0);
    let flipped = [1, 1, 0];
    let scores = OneVsRestModel::new(Vec::new()).test_metrics(&p, &flipped);
    assert!((scores["error_pct_discriminant"] - 100.0 / 3.0).abs() < 1e-12);
}
