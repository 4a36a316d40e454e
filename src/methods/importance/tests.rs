//! Importance sampling: grouped log-weights against per-datum forms, and the estimators.
use super::*;
use crate::methods::FromSettings;

/// The logit's grouped log-weights (f formed lazily a group of 16 data at a time, one
/// vectorised exp per group, skip checks inside a group) against the plain sum of
/// f_y - log sum exp(f) per datum from the full product L z, with 40 data (two full groups
/// and a partial one); the skip decision at floors just above and below each weight; and
/// the lazy pass at a floor that drops about half the samples keeps exactly those above it.
#[test]
fn grouped_logit_log_weights_match_the_per_datum_softmax() {
    let n = 40;
    let x = Array2::from_shape_fn((n, 2), |(i, k)| ((i * (k + 3)) as f64 * 0.37).sin());
    let y: Vec<usize> = (0..n).map(|i| (i * 5 / 3) % 4).collect();
    let problem = Problem { x: &x, y: &y, n_classes: 4 };
    let kernel = SqExp { log_variance: 4.0f64.ln(), log_lengthscales: vec![0.0], learn_variance: false };
    let method = ImportanceParams::from_settings(&serde_json::json!({ "n_samples": 100 })).unwrap().check(Lik::Logit).unwrap();
    let mut rng = Pcg64::seed_from_u64(3);
    let model = method.fit_model(&problem, &kernel, HyperPolicy::Fixed, &mut FitContext::new(&mut rng, None)).unwrap();
    let s = &model.sampler;
    let chi = ChiSquared::new(s.df).unwrap();
    let d = s.draw_batch(&mut Pcg64::seed_from_u64(4), &chi, 50);
    let fz = s.lx.l() * &d.z;
    let all = s.batch_terms(&d, 0, 1, f64::NEG_INFINITY);
    let mut want = vec![0.0; 50];
    for b in 0..50 {
        want[b] = s.log_prior_over_proposal(d.scales[b], &d.z, d.znorm2[b], b);
        for i in 0..n {
            let f: Vec<f64> = (0..4).map(|q| s.m[i * 4 + q] + d.scales[b] * fz[(i, b * 4 + q)]).collect();
            want[b] += f[y[i]] - log_sum_exp(&f);
        }
        let t = all[b].as_ref().expect("no floor, no skip");
        let got = s.log_weight(t, f64::NEG_INFINITY);
        assert!((got - want[b]).abs() < 1e-12 * want[b].abs(), "sample {b}: {got} vs {}", want[b]);
        assert_eq!(s.log_weight(t, want[b] + 1e-3), f64::NEG_INFINITY);
        assert_eq!(s.log_weight(t, want[b] - 1e-3), got);
    }
    let mut sorted = want.clone();
    sorted.sort_by(f64::total_cmp);
    let floor = sorted[25];
    let lazy = s.batch_terms(&d, 0, 1, floor);
    for b in 0..50 {
        if (want[b] - floor).abs() > 1e-6 {
            assert_eq!(lazy[b].is_some(), want[b] > floor, "sample {b}: {} vs floor {floor}", want[b]);
        }
        if let Some(t) = &lazy[b] {
            assert!((s.log_weight(t, f64::NEG_INFINITY) - want[b]).abs() < 1e-12 * want[b].abs());
        }
    }
}

#[test]
fn a_sample_redrawn_from_its_generator_state_has_the_same_z_bit_for_bit() {
    let x = Array2::from_shape_fn((7, 1), |(i, _)| i as f64);
    let y = vec![0, 1, 2, 0, 1, 2, 0];
    let problem = Problem { x: &x, y: &y, n_classes: 3 };
    let kernel = SqExp { log_variance: 0.0, log_lengthscales: vec![0.0], learn_variance: false };
    let method = ImportanceParams::from_settings(&serde_json::json!({ "n_samples": 100 })).unwrap().check(Lik::Logit).unwrap();
    let mut rng = Pcg64::seed_from_u64(3);
    let model = method.fit_model(&problem, &kernel, HyperPolicy::Fixed, &mut FitContext::new(&mut rng, None)).unwrap();
    let s = &model.sampler;
    let d = s.draw_batch(&mut Pcg64::seed_from_u64(9), &ChiSquared::new(s.df).unwrap(), 20);
    let picks = [3usize, 4, 17];
    let z = s.redraw(&picks.iter().map(|&b| &d.starts[b]).collect::<Vec<_>>());
    for (k, &b) in picks.iter().enumerate() {
        for q in 0..3 {
            for i in 0..7 {
                assert_eq!(z[(i, k * 3 + q)].to_bits(), d.z[(i, b * 3 + q)].to_bits(), "sample {b}");
            }
        }
    }
    // The model's replay list covers exactly the finite weights among the test samples.
    let finite: Vec<usize> = (0..model.n_test).filter(|&k| model.log_w[k].is_finite()).collect();
    assert_eq!(model.replay.iter().map(|r| r.0).collect::<Vec<_>>(), finite);
}

#[test]
fn the_batched_probit_is_the_u_sample_average_of_products_of_phi() {
    // (1/R) sum_r prod_{j != y} Phi(u_r + f_y - f_j) with the same u-draws and the scalar
    // Phi, for several data at once (a generator each) and for all classes from one
    // generator in turn (the predictive's class probabilities).
    let lik = LikEval { lik: Lik::Probit, u_samples: 20 };
    let c = 4;
    let f: Vec<f64> = (0..3 * c).map(|k| ((k * 37) % 11) as f64 * 0.7 - 3.0).collect();
    let want = |fd: &[f64], y: usize, rng: &mut Pcg64| -> f64 {
        let mean = (0..20)
            .map(|_| {
                let u: f64 = rng.sample(StandardNormal);
                (0..c).filter(|&j| j != y).map(|j| crate::special::normal_cdf(u + fd[y] - fd[j])).product::<f64>()
            })
            .sum::<f64>()
            / 20.0;
        mean.ln()
    };
    let ys = [2, 0, 3];
    let mut out = [0.0; 3];
    let mut rngs: Vec<Pcg64> = (0..3).map(|d| Pcg64::seed_from_u64(10 + d)).collect();
    lik.probit_log_probs(&f, &ys, &mut rngs, &mut out);
    for d in 0..3 {
        let w = want(&f[d * c..(d + 1) * c], ys[d], &mut Pcg64::seed_from_u64(10 + d as u64));
        assert!((out[d] - w).abs() < 1e-13 * w.abs().max(1.0), "datum {d}: {} vs {w}", out[d]);
    }
    let got = lik.probs(&f[..c], &mut Pcg64::seed_from_u64(5));
    let mut rng = Pcg64::seed_from_u64(5);
    for (k, g) in got.iter().enumerate() {
        let w = want(&f[..c], k, &mut rng).exp();
        assert!((g - w).abs() < 1e-13 * w, "class {k}: {g} vs {w}");
    }
}

#[test]
fn softmax_rows_is_the_softmax_of_each_row() {
    let c = 5;
    let mut x: Vec<f64> = (0..37 * c).map(|k| ((k * 7919) % 101) as f64 * 0.31 - 15.0).collect();
    let want: Vec<f64> = x
        .chunks(c)
        .flat_map(|row| {
            let mut r = row.to_vec();
            softmax_in_place(&mut r);
            r
        })
        .collect();
    softmax_rows(&mut x, c);
    for (g, w) in x.iter().zip(&want) {
        assert!((g - w).abs() <= 1e-13 * w + 1e-300, "{g} vs {w}");
    }
}

/// Visiting the data worst-fitted first only decides sooner: every weight, and which samples
/// are skipped, are the same as in datum order (to rounding: f is formed in groups of data
/// in visiting order), for both likelihoods, the probit by u-samples and by quadrature, and
/// both proposal scales.
#[test]
fn the_visiting_order_changes_no_weight_and_no_skip_decision() {
    let n = 12;
    let x = Array2::from_shape_fn((n, 1), |(i, _)| i as f64 / 3.0 - 2.0);
    let y: Vec<usize> = (0..n).map(|i| (i * 7 / 3) % 3).collect();
    let problem = Problem { x: &x, y: &y, n_classes: 3 };
    let kernel = SqExp { log_variance: 9.0f64.ln(), log_lengthscales: vec![0.0], learn_variance: false };
    let cases = [(Lik::Logit, 20, "prior"), (Lik::Probit, 20, "prior"), (Lik::Probit, 0, "prior"), (Lik::Probit, 20, "posterior")];
    for (lik, u_samples, scale) in cases {
        let settings = serde_json::json!({ "n_samples": 200, "n_test_samples": 50, "probit_u_samples": u_samples, "scale": scale });
        let method = ImportanceParams::from_settings(&settings).unwrap().check(lik).unwrap();
        let mut rng = Pcg64::seed_from_u64(5);
        let mut ctx = FitContext::new(&mut rng, None);
        let model = method.fit_model(&problem, &kernel, HyperPolicy::Fixed, &mut ctx).unwrap();
        let sorted = model.sampler.clone();
        let mut datum = model.sampler.clone();
        datum.set_order((0..n).collect());
        assert_ne!(sorted.order, datum.order, "{lik:?}: the test needs a non-trivial order");
        let chi = ChiSquared::new(sorted.df).unwrap();
        let d = sorted.draw_batch(&mut Pcg64::seed_from_u64(8), &chi, 300);
        // The lazy pass at `floor`, then each sample's check at the same floor.
        let weights = |s: &Sampler, floor: f64| -> Vec<f64> {
            s.batch_terms(&d, 0, 77, floor).iter().map(|t| t.as_ref().map_or(f64::NEG_INFINITY, |t| s.log_weight(t, floor))).collect()
        };
        let full = weights(&datum, f64::NEG_INFINITY);
        let top = full.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        // Floors that put a good share of the samples below them, and one just above a sample's weight.
        for floor in [f64::NEG_INFINITY, top - 30.0, top - 5.0, full[17] + 1e-9] {
            let (a, s) = (weights(&datum, floor), weights(&sorted, floor));
            let mut skipped = 0;
            for b in 0..300 {
                assert_eq!(
                    a[b] == f64::NEG_INFINITY,
                    s[b] == f64::NEG_INFINITY,
                    "{lik:?} u={u_samples} {scale}: sample {b}, floor {floor}"
                );
                assert!(
                    a[b] == s[b] || (a[b] - s[b]).abs() < 1e-12 * a[b].abs(),
                    "{lik:?} u={u_samples} {scale}: sample {b}: {} vs {}",
                    a[b],
                    s[b]
                );
                // A kept weight is the full one.
                assert!(a[b] == f64::NEG_INFINITY || (a[b] - full[b]).abs() < 1e-12 * full[b].abs());
                skipped += (a[b] == f64::NEG_INFINITY) as usize;
            }
            if floor == top - 5.0 {
                assert!(skipped > 30, "{lik:?} u={u_samples} {scale}: only {skipped} of 300 below the floor");
            }
            if floor == full[17] + 1e-9 {
                assert_eq!(a[17], f64::NEG_INFINITY);
            }
        }
    }
}

/// The accumulator's (log p-hat, log sigma-hat, log UB, ESS) and weighted average against the
/// plain formulas over the weights w = e^lw, a zero weight (lw = -inf, e.g. a u-sample probit
/// whose every product of Phi underflowed) counting as 0 wherever it comes: first (while the
/// running maximum is still -inf), in the middle, last.
#[test]
fn zero_weights_count_as_zero_wherever_they_come() {
    let ninf = f64::NEG_INFINITY;
    let finite = [-3.0, -1.25, -2.5, -0.75];
    let preds = [0.1, 0.7, 0.4, 0.9];
    for zeros_at in [vec![0], vec![0, 1], vec![2], vec![0, 3, 6], vec![4]] {
        // The finite weights in order, a zero weight inserted at each position of `zeros_at`.
        let mut lws = Vec::new();
        let mut ps = Vec::new();
        let mut it = finite.iter().zip(&preds);
        for k in 0..finite.len() + zeros_at.len() {
            if zeros_at.contains(&k) {
                lws.push(ninf);
                ps.push(0.5);
            } else {
                let (&lw, &p) = it.next().unwrap();
                lws.push(lw);
                ps.push(p);
            }
        }
        let mut acc = WeightAcc::new(1);
        for (&lw, &p) in lws.iter().zip(&ps) {
            let r = acc.add(lw);
            acc.pred[0] += r * p;
        }
        let w: Vec<f64> = lws.iter().map(|v| v.exp()).collect();
        let n = w.len() as f64;
        let mean = w.iter().sum::<f64>() / n;
        let sd = (w.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt();
        let ess = w.iter().sum::<f64>().powi(2) / w.iter().map(|v| v * v).sum::<f64>();
        let pbar = w.iter().zip(&ps).map(|(v, p)| v * p).sum::<f64>() / w.iter().sum::<f64>();
        let (log_p, log_sd, log_ub, got_ess) = acc.summary();
        let want = [mean.ln(), sd.ln(), (mean + Z999 * sd / n.sqrt()).ln(), ess, pbar];
        let got = [log_p, log_sd, log_ub, got_ess, acc.pred[0] / acc.sum];
        for (g, w) in got.iter().zip(&want) {
            assert!((g - w).abs() < 1e-13 * w.abs().max(1.0), "zeros at {zeros_at:?}: {got:?} vs {want:?}");
        }
        assert_eq!(acc.count, lws.len());
    }
    // Every weight zero: p-hat = 0, so log p-hat, log sigma-hat and the bound are -inf and the
    // ESS is 0 (no sample carries weight), not NaN.
    let mut acc = WeightAcc::new(2);
    for _ in 0..5 {
        assert_eq!(acc.add(ninf), 0.0);
    }
    assert_eq!(acc.summary(), (ninf, ninf, ninf, 0.0));
    assert_eq!(acc.sum, 0.0);
}

/// A u-sample MC-MNP fit whose every weight is 0 (prior sd 1e4: in each sample some datum's
/// f_y lies far below another class's, so all its products of Phi underflow) is an error that
/// says so, not a NaN (or -inf) evidence.
#[test]
fn a_fit_with_every_weight_zero_is_an_error() {
    let n = 30;
    let x = Array2::from_shape_fn((n, 1), |(i, _)| i as f64 * 1.7);
    let y: Vec<usize> = (0..n).map(|i| i % 3).collect();
    let problem = Problem { x: &x, y: &y, n_classes: 3 };
    let kernel = SqExp { log_variance: 1e8f64.ln(), log_lengthscales: vec![0.0], learn_variance: false };
    let method = ImportanceParams::from_settings(&serde_json::json!({ "n_samples": 200 })).unwrap().check(Lik::Probit).unwrap();
    let mut rng = Pcg64::seed_from_u64(3);
    let res = method.fit_model(&problem, &kernel, HyperPolicy::Fixed, &mut FitContext::new(&mut rng, None));
    match res {
        Err(FitError::Numerical(msg)) => assert!(msg.contains("weights are 0"), "{msg}"),
        Err(e) => panic!("another error: {e:?}"),
        Ok(m) => panic!("a fit: {:?}", m.extra_metrics()),
    }
}

/// The predictive with every weight among the first n_test zero (the rest may carry the
/// evidence) has no normaliser: an error, not 0/0 probabilities.
#[test]
fn a_predictive_with_every_test_weight_zero_is_an_error() {
    let x = Array2::from_shape_fn((6, 1), |(i, _)| i as f64 * 0.8);
    let y = vec![0, 1, 2, 0, 1, 2];
    let problem = Problem { x: &x, y: &y, n_classes: 3 };
    let kernel = SqExp { log_variance: 0.0, log_lengthscales: vec![0.0], learn_variance: false };
    let settings = serde_json::json!({ "n_samples": 300, "n_test_samples": 100 });
    let method = ImportanceParams::from_settings(&settings).unwrap().check(Lik::Logit).unwrap();
    let mut rng = Pcg64::seed_from_u64(3);
    let mut model = method.fit_model(&problem, &kernel, HyperPolicy::Fixed, &mut FitContext::new(&mut rng, None)).unwrap();
    let xs = Array2::from_shape_fn((2, 1), |(j, _)| j as f64);
    let p = model.is_predictive(&xs, &mut Pcg64::seed_from_u64(4)).unwrap();
    assert!(p.iter().all(|row| (row.iter().sum::<f64>() - 1.0).abs() < 1e-12));
    // As if every test sample's products of Phi had underflowed.
    model.log_w[..100].fill(f64::NEG_INFINITY);
    model.replay.clear();
    match model.is_predictive(&xs, &mut Pcg64::seed_from_u64(4)) {
        Err(FitError::Numerical(msg)) => assert!(msg.contains("weights are 0"), "{msg}"),
        other => panic!("not the error: {other:?}"),
    }
}
