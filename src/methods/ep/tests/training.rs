//! Fits: SEP against EP, SEP's factor counts, tied sites and memory, the learning steps and rates, and the settings' checks.
use super::*;

fn fit(
    name: &str,
    settings: serde_json::Value,
    x: &Array2<f64>,
    y: &[usize],
    kernels: &KernelSet,
    hyper: HyperPolicy,
) -> Box<dyn crate::methods::Fitted> {
    let method = crate::methods::build(name, &settings).unwrap();
    let mut rng = Pcg64::seed_from_u64(11);
    let mut ctx = FitContext::new(&mut rng, None);
    method.fit(&Problem { x, y, n_classes: 3 }, kernels, hyper, &mut ctx).unwrap()
}

#[test]
fn sep_is_close_to_ep_and_both_classify_the_toy_problem() {
    let (x, y) = toy(60, 2, 3, 8);
    let kernels = se_ard_plus_white(2, 3, 0.1);
    let settings = serde_json::json!({ "inducing": 6, "max_iters": 60, "damping_decay": 1.0 });
    let ep = fit("ep", settings.clone(), &x, &y, &kernels, HyperPolicy::Fixed);
    let sep = fit("sep", settings, &x, &y, &kernels, HyperPolicy::Fixed);
    // Each must classify on its own (SEP is not checked through EP): first the training
    // errors, then how close the two are.
    let mut rng = Pcg64::seed_from_u64(0);
    let (pe, ps) = (ep.predict(&x, &mut rng).unwrap().probs, sep.predict(&x, &mut rng).unwrap().probs);
    for (name, probs) in [("EP", &pe), ("SEP", &ps)] {
        let errors = (0..60).filter(|&i| crate::linalg::argmax(probs.row(i).as_slice().unwrap()) != y[i]).count();
        assert!(errors <= 6, "{name} misclassifies {errors} of 60 training rows");
    }
    let max_gap = pe.iter().zip(ps.iter()).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
    assert!(max_gap < 0.1, "EP and SEP predictive probabilities differ by {max_gap}");
    let (ze, zs) = (ep.evidence().unwrap().value, sep.evidence().unwrap().value);
    assert!((ze - zs).abs() < 0.05 * ze.abs(), "log Z_q: EP {ze}, SEP {zs}");
}

/// One row, two classes: each class is touched by one factor (n_c = 1), so SEP's cavity takes
/// out the whole tied site and SEP is EP: the same q and log Z_q, and q carries the factor's
/// tilted moments (the cavity is the prior). A second refinement must leave it there (its
/// cavity must again be the prior, which a wrong n_c would not give).
#[test]
fn sep_with_one_factor_per_class_is_ep() {
    let x = Array2::from_shape_vec((1, 2), vec![0.3, -0.2]).unwrap();
    let y = vec![0];
    let zs = vec![
        Array2::from_shape_vec((3, 2), vec![-1.0, 0.0, 0.0, 0.5, 1.0, -0.5]).unwrap(),
        Array2::from_shape_vec((3, 2), vec![-0.5, -0.5, 0.4, 0.2, 1.2, 0.8]).unwrap(),
    ];
    let kernels = se_ard_plus_white(2, 2, 0.3);
    let rows: Vec<DenseRows> = (0..2).map(|c| dense_rows(kernels.class(c), &zs[c], &x)).collect();
    let d: Vec<f64> = rows.iter().map(|r| quad(&r.dirs[0], &r.k, &r.dirs[0])).collect();
    let tilted = tilted_pair([0.0, 0.0], [d[0], d[1]], rows[0].fitc_var[0] + rows[1].fitc_var[0]);
    let fitted = |tied: bool| {
        let mut state = State::new(kernels.clone(), zs.clone(), tied, &y).unwrap();
        assert_eq!(state.n_factors, vec![1.0, 1.0]);
        for _ in 0..2 {
            state.refine(&state.block(&x, &y, &[0]), 1.0, ViewFor::Sweep).unwrap();
        }
        state
    };
    let (ep, sep) = (fitted(false), fitted(true));
    let (ze, zs_) = (ep.log_z_q(&x, &y).unwrap(), sep.log_z_q(&x, &y).unwrap());
    assert!((ze - zs_).abs() < 1e-12, "log Z_q: EP {ze}, SEP {zs_}");
    for c in 0..2 {
        let ((me, ve), (ms, vs)) = (dense_posterior(&ep.priors[c], &ep.posts[c]), dense_posterior(&sep.priors[c], &sep.posts[c]));
        for a in 0..3 {
            assert!((me[a] - ms[a]).abs() < 1e-12, "class {c}: mean {a}, EP {} SEP {}", me[a], ms[a]);
            for b in 0..3 {
                assert!((ve[(a, b)] - vs[(a, b)]).abs() < 1e-12, "class {c}: covariance ({a}, {b})");
            }
        }
        let u = &rows[c].dirs[0];
        let (mean, var) = (dot(u, &ms), quad(u, &vs, u));
        assert!((mean - tilted.mean[c]).abs() < 1e-7, "class {c}: SEP mean {mean} vs tilted {}", tilted.mean[c]);
        assert!((var - tilted.var[c]).abs() < 1e-7, "class {c}: SEP variance {var} vs tilted {}", tilted.var[c]);
    }
}

/// n_c, the factors touching class c, counted by hand: a row of class c has C - 1 factors, all
/// touching c; a row of another class has one factor against c.
#[test]
fn sep_counts_the_factors_touching_each_class() {
    // C = 4, y = (0, 2, 2, 1, 2): class 0 gets 3 (row 0) + 1 + 1 + 1 + 1 = 7; class 1 gets
    // 1 + 1 + 1 + 3 + 1 = 7; class 2 gets 1 + 3 + 3 + 1 + 3 = 11; class 3 gets 1 from every row = 5.
    let y = vec![0, 2, 2, 1, 2];
    let (x, _) = toy(5, 2, 4, 13);
    let zs = (0..4).map(|_| x.slice(ndarray::s![0..2, ..]).to_owned()).collect();
    let state = State::new(se_ard_plus_white(2, 4, 0.3), zs, true, &y).unwrap();
    assert_eq!(state.n_factors, vec![7.0, 7.0, 11.0, 5.0]);
    // Each factor touches two classes: sum n_c = 2 N (C - 1).
    assert_eq!(state.n_factors.iter().sum::<f64>(), 2.0 * 5.0 * 3.0);
}

/// SEP's minibatch refinement: each class's tied site gives up rho n_B,c / n_c of itself and
/// takes rho times the fresh sites of the batch's factors, where n_B,c counts the batch's
/// factors touching class c (the notes' per-class tying). Everything here is rebuilt from the
/// dense prior: the SEP cavity of class c (the prior times (1 - 1 / n_c) of the tied site),
/// each factor's tilted moments by 2-D quadrature, its sites by moment matching along the
/// row's direction u. The batch (two rows of class 0, one of class 2) mixes the classes
/// unlike the data, so n_B,c / n_c differs between the classes and from n_B / N.
#[test]
fn sep_minibatch_refinement_replaces_the_batch_share_of_each_tied_site() {
    let (x, y) = toy(10, 2, 3, 5);
    let (c, rho) = (3, 0.6);
    let mut state = three_sweeps(&x, &y, true);
    let kernels = se_ard_plus_white(2, 3, 0.4);
    let rows: Vec<DenseRows> = (0..c).map(|k| dense_rows(kernels.class(k), &x.slice(ndarray::s![k..k + 3, ..]).to_owned(), &x)).collect();
    let of_class = |k: usize| (0..y.len()).filter(|&i| y[i] == k).collect::<Vec<_>>();
    let batch: Vec<usize> = of_class(0)[..2].iter().chain(&of_class(2)[..1]).copied().collect();
    // Factors touching class k, counted by hand: C - 1 for a row of class k, one for another.
    let touching = |ys: &mut dyn Iterator<Item = usize>, k: usize| ys.map(|v| if v == k { (c - 1) as f64 } else { 1.0 }).sum::<f64>();
    let shares: Vec<f64> = (0..c).map(|k| touching(&mut batch.iter().map(|&i| y[i]), k) / touching(&mut y.iter().copied(), k)).collect();
    assert!(shares.iter().any(|s| (s - batch.len() as f64 / y.len() as f64).abs() > 0.05), "{shares:?}");
    assert!((shares[0] - shares[1]).abs() > 0.05, "{shares:?}");
    // The SEP cavities, dense: precision K^-1 + (1 - 1/n_c) P_c, natural mean (1 - 1/n_c) h_c.
    let cavities: Vec<(Vec<f64>, Mat<f64>)> = (0..c)
        .map(|k| {
            let keep = 1.0 - 1.0 / touching(&mut y.iter().copied(), k);
            let (kinv, sums) = (inverse(&rows[k].k), &state.sums[k]);
            let prec = Mat::from_fn(3, 3, |a, b| kinv[(a, b)] + keep * sums.precision[(a, b)]);
            let v = inverse(&prec);
            let m = mat_vec(&v, &sums.natural_mean.iter().map(|h| keep * h).collect::<Vec<_>>());
            (m, v)
        })
        .collect();
    // The fresh sites of the batch's factors, summed per class in inducing-value space.
    let mut fresh: Vec<(Mat<f64>, Vec<f64>)> = (0..c).map(|_| (Mat::zeros(3, 3), vec![0.0; 3])).collect();
    for &i in &batch {
        for k in (0..c).filter(|&k| k != y[i]) {
            let pair = [y[i], k];
            let (a, d) = (
                pair.map(|p| dot(&rows[p].dirs[i], &cavities[p].0)),
                pair.map(|p| quad(&rows[p].dirs[i], &cavities[p].1, &rows[p].dirs[i])),
            );
            let t = tilted_pair(a, d, rows[y[i]].fitc_var[i] + rows[k].fitc_var[i]);
            for (slot, &p) in pair.iter().enumerate() {
                let (tau, nu) = (1.0 / t.var[slot] - 1.0 / d[slot], t.mean[slot] / t.var[slot] - a[slot] / d[slot]);
                let u = &rows[p].dirs[i];
                fresh[p].0 = plus_rank_one(&fresh[p].0, tau, u);
                fresh[p].1.iter_mut().zip(u).for_each(|(h, v)| *h += nu * v);
            }
        }
    }
    let old: Vec<_> = state.sums.iter().map(|s| (s.precision.clone(), s.natural_mean.clone())).collect();
    state.refine(&state.block(&x, &y, &batch), rho, ViewFor::Sweep).unwrap();
    for k in 0..c {
        let keep = 1.0 - rho * shares[k];
        let new = &state.sums[k];
        for a in 0..3 {
            let want = keep * old[k].1[a] + rho * fresh[k].1[a];
            assert!((new.natural_mean[a] - want).abs() < 1e-6, "class {k}: natural mean {a} {} against {want}", new.natural_mean[a]);
            for b in 0..3 {
                let want = keep * old[k].0[(a, b)] + rho * fresh[k].0[(a, b)];
                assert!(
                    (new.precision[(a, b)] - want).abs() < 1e-6,
                    "class {k}: precision ({a}, {b}) {} against {want}",
                    new.precision[(a, b)]
                );
            }
        }
    }
}

/// The tied site of each class is a sum of positive rank-one site precisions, scaled by
/// non-negative weights (1 - rho n_B / n_c and rho), so it stays positive semi-definite
/// through batch and minibatch refinements. The large noise keeps K^{-1} dominant, so that q
/// would stay positive definite with a negative site precision and this check, not a failed
/// Cholesky factor, reports it.
#[test]
fn sep_tied_site_precisions_stay_positive_semi_definite() {
    let (x, y) = toy(30, 2, 3, 14);
    let kernels = se_ard_plus_white(2, 3, 3.0);
    let zs = (0..3).map(|k| x.slice(ndarray::s![4 * k..4 * k + 4, ..]).to_owned()).collect();
    let mut state = State::new(kernels, zs, true, &y).unwrap();
    let all: Vec<usize> = (0..30).collect();
    let check = |state: &State, when: &str| {
        for (k, sums) in state.sums.iter().enumerate() {
            let (eig, _) = crate::linalg::small::eigh(&sums.precision).unwrap();
            assert!(eig[0] >= -1e-12, "{when}: class {k}'s tied precision has eigenvalue {}", eig[0]);
            assert!(eig[eig.len() - 1] > 1e-3, "{when}: class {k}'s tied precision is empty");
        }
    };
    for it in 0..30 {
        state.refine(&state.block(&x, &y, &all), 0.5, ViewFor::Sweep).unwrap();
        check(&state, &format!("batch iteration {it}"));
    }
    for (b, chunk) in all.chunks(7).enumerate() {
        state.refine(&state.block(&x, &y, chunk), 1.0, ViewFor::Sweep).unwrap();
        check(&state, &format!("minibatch {b}"));
    }
}

/// `step: adam` in batch mode: Adam's first step moves every free coordinate by at most its
/// rate (bias-corrected, |m / sqrt(v)| = 1), so each learned inducing input stays within 0.01
/// of the training input it started at, where the adaptive rates (0.01 x the gradient) move
/// some coordinate further.
#[test]
fn a_batch_adam_step_moves_inducing_inputs_by_at_most_its_rate() {
    let (x, y) = toy(60, 2, 3, 10);
    let kernels = se_ard_plus_white(2, 3, 0.1);
    let largest_move = |step: &str| {
        let settings = serde_json::json!({ "inducing": 5, "max_iters": 1, "step": step, "adam_lr": 0.01 });
        let model = fit("ep", settings, &x, &y, &kernels, HyperPolicy::Fixed);
        let zs = model.inducing_inputs();
        assert_eq!(zs.len(), 3);
        zs.iter()
            .flat_map(|z| z.rows().into_iter().map(|r| r.to_owned()).collect::<Vec<_>>())
            .map(|r| x.rows().into_iter().map(|xr| (&xr - &r).iter().fold(0.0f64, |a, v| a.max(v.abs()))).fold(f64::INFINITY, f64::min))
            .fold(0.0f64, f64::max)
    };
    let adam = largest_move("adam");
    assert!(adam > 0.005 && adam <= 0.01 + 1e-9, "Adam moved an inducing input by {adam}");
    let adaptive = largest_move("adaptive");
    assert!(adaptive > 0.01 + 1e-9, "the adaptive rates moved at most {adaptive}");
}

#[test]
fn learning_raises_log_z_q_in_batch_and_minibatch_mode() {
    let (x, y) = toy(60, 2, 3, 9);
    let kernels = se_ard_plus_white(2, 3, 1.0);
    for name in ["ep", "sep"] {
        let fixed = fit(name, serde_json::json!({ "inducing": 5, "max_iters": 40 }), &x, &y, &kernels, HyperPolicy::Fixed);
        let learned = fit(name, serde_json::json!({ "inducing": 5, "max_iters": 40 }), &x, &y, &kernels, HyperPolicy::Learn);
        let (f, l) = (fixed.evidence().unwrap().value, learned.evidence().unwrap().value);
        assert!(l > f, "{name}: learned log Z_q {l} not above the fixed kernel's {f}");
        let mini = fit(
            name,
            serde_json::json!({ "inducing": 5, "max_iters": 300, "batch": 10, "adam_lr": 0.01 }),
            &x,
            &y,
            &kernels,
            HyperPolicy::Learn,
        );
        let z = mini.evidence().unwrap().value;
        assert!(z > f, "{name}: minibatch log Z_q {z} not above the fixed kernel's batch value {f}");
    }
}

/// `average_decay`: training is untouched (the same log Z_q, bit for bit); decay 0 averages
/// nothing (the last iterate's predictions, bit for bit); a positive decay predicts elsewhere.
#[test]
fn predicting_at_the_iterates_average_leaves_training_alone() {
    let (x, y) = toy(60, 2, 3, 9);
    let kernels = se_ard_plus_white(2, 3, 1.0);
    let run = |average: Option<f64>| {
        let mut settings = serde_json::json!({ "inducing": 5, "max_iters": 200, "batch": 10, "adam_lr": 0.01 });
        if let Some(d) = average {
            settings["average_decay"] = serde_json::json!(d);
        }
        let model = fit("sep", settings, &x, &y, &kernels, HyperPolicy::Learn);
        let probs = model.predict(&x, &mut Pcg64::seed_from_u64(0)).unwrap().probs;
        (model.evidence().unwrap().value, probs)
    };
    let (z_last, p_last) = run(None);
    let (z_zero, p_zero) = run(Some(0.0));
    let (z_avg, p_avg) = run(Some(0.95));
    assert_eq!(z_last.to_bits(), z_zero.to_bits());
    assert_eq!(z_last.to_bits(), z_avg.to_bits(), "the average must not feed back into training");
    assert!(p_last.iter().zip(p_zero.iter()).all(|(a, b)| a.to_bits() == b.to_bits()), "decay 0 is the last iterate");
    let gap = p_last.iter().zip(p_avg.iter()).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
    assert!(gap > 1e-6 && gap < 0.2, "the average's predictions differ from the last iterate's by {gap}");
}

#[test]
fn sep_memory_does_not_grow_with_n_and_ep_memory_does() {
    let kernels = se_ard_plus_white(2, 3, 0.5);
    let bytes = |n: usize, tied: bool| {
        let (x, y) = toy(n, 2, 3, 10);
        let zs = (0..3).map(|k| x.slice(ndarray::s![k..k + 4, ..]).to_owned()).collect();
        State::new(kernels.clone(), zs, tied, &y).unwrap().site_bytes()
    };
    assert_eq!(bytes(20, true), bytes(200, true));
    // EP: 4 scalars per (row, class) and an M-vector per (row, class): (4 + 4) 3 8 bytes per row.
    assert_eq!(bytes(200, false) - bytes(20, false), 180 * 3 * (4 + 4) * 8);
}

#[test]
fn settings_are_checked_with_the_field_named() {
    for (bad, field) in [
        (serde_json::json!({ "inducing": 0 }), "inducing"),
        (serde_json::json!({ "inducing_fraction": 1.5 }), "inducing_fraction"),
        (serde_json::json!({ "damping": 0.0 }), "damping"),
        (serde_json::json!({ "batch": 0 }), "batch"),
        (serde_json::json!({ "site_directions": "lagged" }), "site_directions"),
        (serde_json::json!({ "lengthscale_sign": "summed", "batch": 10 }), "lengthscale_sign"),
        (serde_json::json!({ "lengthscale_sign": "summed", "step": "adam" }), "lengthscale_sign"),
        (serde_json::json!({ "average_decay": 1.0 }), "average_decay"),
    ] {
        let err = match serde_json::from_value::<EpParams>(bad).map_err(|e| e.to_string()).and_then(|p| p.check(true).map(|_| ())) {
            Err(e) => e,
            Ok(()) => panic!("accepted a bad {field}"),
        };
        assert!(err.contains(field), "{err}");
    }
    assert_eq!(serde_json::from_value::<EpParams>(serde_json::json!({ "inducing_fraction": 0.05 })).unwrap().inducing_for(193), 10);
}

/// App. G's rule, x1.02 while the sign holds and x0.5 when it flips, in both readings: with
/// `summed` a length-scale whose own gradient keeps its sign is halved when the sum of the
/// length-scales' gradients has the other sign, and one whose own gradient flipped grows when
/// the sum has its previous sign; the other parameters follow their own signs either way.
#[test]
fn adaptive_rates_compare_length_scales_with_the_summed_sign_when_asked() {
    use super::super::fit::AdaptiveRates;
    // Parameters: two length-scales (unit 0.25), one amplitude (unit 1).
    let unit = vec![0.25, 0.25, 1.0];
    let free = [true; 3];
    let first = [1.0, -3.0, 2.0];
    // The rate each parameter's second step was taken with: its move / (unit x gradient).
    let second_rates = |summed: Option<Vec<bool>>, second: [f64; 3]| {
        let mut rates = AdaptiveRates::new(0.01, unit.clone(), summed);
        let mut theta = [0.0; 3];
        rates.step(&mut theta, &first, &free);
        let before = theta;
        rates.step(&mut theta, &second, &free);
        (0..3).map(|j| (theta[j] - before[j]) / (unit[j] * second[j])).collect::<Vec<f64>>()
    };
    let (held, flipped) = (0.0102, 0.005);
    let expect = |got: Vec<f64>, want: [f64; 3], what: &str| {
        assert!(got.iter().zip(want).all(|(g, w)| (g - w).abs() < 1e-15), "{what}: rates {got:?}, expected {want:?}");
    };
    let ls = Some(vec![true, true, false]);
    // Own signs held (+ +, - -); their sum 2 - 5 = -3 < 0.
    let second = [2.0, -5.0, 4.0];
    expect(second_rates(None, second), [held, held, held], "own, both held");
    expect(second_rates(ls.clone(), second), [flipped, held, held], "summed: + against a - sum halves");
    // Own signs both flipped (+ -, - +); their sum -4 + 1 = -3 < 0.
    let second = [-4.0, 1.0, 4.0];
    expect(second_rates(None, second), [flipped, flipped, held], "own, both flipped");
    expect(second_rates(ls, second), [flipped, held, held], "summed: - against a - sum grows though its own flipped");
}
