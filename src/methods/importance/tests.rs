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
        // The bound p-hat + z sigma-hat / sqrt(n) with z = 3.09, Chai's 99.9% one-sided normal
        // quantile (App. F) as printed, Phi^{-1}(0.999) = 3.090232306167813 to his rounding
        // (the full quantile would move log UB by about 1e-4 here, far beyond the tolerance).
        let want = [mean.ln(), sd.ln(), (mean + 3.09 * sd / n.sqrt()).ln(), ess, pbar];
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

/// Plain dense Cholesky factor (lower) of an SPD matrix, independent of the crate's routes.
fn dense_chol(a: &Mat<f64>) -> Mat<f64> {
    let p = a.nrows();
    let mut l = Mat::<f64>::zeros(p, p);
    for j in 0..p {
        let d = a[(j, j)] - (0..j).map(|k| l[(j, k)].powi(2)).sum::<f64>();
        assert!(d > 0.0, "not positive definite at {j}");
        l[(j, j)] = d.sqrt();
        for i in j + 1..p {
            l[(i, j)] = (a[(i, j)] - (0..j).map(|k| l[(i, k)] * l[(j, k)]).sum::<f64>()) / l[(j, j)];
        }
    }
    l
}

/// L^{-1} b by forward substitution.
fn forward(l: &Mat<f64>, b: &[f64]) -> Vec<f64> {
    let mut x = vec![0.0; b.len()];
    for i in 0..b.len() {
        x[i] = (b[i] - (0..i).map(|k| l[(i, k)] * x[k]).sum::<f64>()) / l[(i, i)];
    }
    x
}

/// An MC-MNL fit with n = 4, C = 3 and a random SPD K^c far from I (handed over as the source
/// cell's "kc"), at the given proposal scale; with the inputs, the kernel, K^c and the dense
/// K = Kx (x) K^c (datum-major) and Sigma (K, or V = K - K T K for the posterior scale).
fn fit_with_kc(scale: &str) -> (ImportanceModel, Array2<f64>, SqExp, Mat<f64>, Mat<f64>, Mat<f64>) {
    let (n, c) = (4, 3);
    let x = Array2::from_shape_vec((n, 1), vec![-1.2, -0.3, 0.5, 1.4]).unwrap();
    let y = vec![0, 1, 2, 1];
    let kernel = SqExp { log_variance: 2.0f64.ln(), log_lengthscales: vec![0.0], learn_variance: false };
    let mut g = Pcg64::seed_from_u64(21);
    let a = Mat::from_fn(c, c, |_, _| g.sample::<f64, _>(StandardNormal));
    let kc = Mat::from_fn(c, c, |i, j| (0..c).map(|k| a[(i, k)] * a[(j, k)]).sum::<f64>() + if i == j { 0.5 } else { 0.0 });
    let handoff =
        Handoff { vectors: BTreeMap::from([("kc".to_string(), (0..c * c).map(|k| kc[(k / c, k % c)]).collect())]), ..Default::default() };
    let settings = serde_json::json!({ "n_samples": 100, "scale": scale, "klmnl": { "kc_from_source": true } });
    let method = ImportanceParams::from_settings(&settings).unwrap().check(Lik::Logit).unwrap();
    let problem = Problem { x: &x, y: &y, n_classes: c };
    let mut rng = Pcg64::seed_from_u64(3);
    let mut ctx = FitContext::new(&mut rng, None);
    ctx.source = Some(&handoff);
    let model = method.fit_model(&problem, &kernel, HyperPolicy::Fixed, &mut ctx).unwrap();
    let p = n * c;
    // The fit works with exactly this K^c and K (no jitter), or the comparisons mean nothing.
    assert!((0..c).all(|i| (0..c).all(|j| model.km.kc()[(i, j)] == kc[(i, j)])));
    assert!(model.sampler.lx.jitter() == 0.0);
    let kx = kernel.gram(&x);
    let k = Mat::from_fn(p, p, |r, t| kx[(r / c, t / c)] * kc[(r % c, t % c)]);
    let sigma = if scale == "prior" { k.clone() } else { &k - &k * model.km.t_matrix() * &k };
    let sigma = Mat::from_fn(p, p, |r, t| 0.5 * (sigma[(r, t)] + sigma[(t, r)]));
    (model, x, kernel, kc, k, sigma)
}

/// The draws f = m + s L_Sigma z (z of `draw_batch`, datum-major), L_Sigma the dense Cholesky
/// factor of Sigma: the code's factor (L_x (x) L_c, or L_K L_S) is lower triangular with a
/// positive diagonal, so it is this one.
fn dense_draws(s: &Sampler, d: &Draws, l_sigma: &Mat<f64>) -> Vec<Vec<f64>> {
    let (c, p) = (s.c, s.n * s.c);
    (0..d.scales.len())
        .map(|b| {
            let z: Vec<f64> = (0..p).map(|r| d.z[(r / c, b * c + r % c)]).collect();
            (0..p).map(|r| s.m[r] + d.scales[b] * (0..=r).map(|t| l_sigma[(r, t)] * z[t]).sum::<f64>()).collect()
        })
        .collect()
}

/// The weight without the likelihood, `log_prior_over_proposal` + its constant (computed via
/// a = L_K^{-1} m, u = L_K^{-1} (f - m) / s and |z|^2 with log|K| cancelled), against
/// log N(f; 0, K) - log t_4(f; m, Sigma) by dense algebra (Cholesky factors and forward
/// substitution), K = Kx (x) K^c with K^c far from I, for Sigma = K (scale: prior) and
/// Sigma = V (scale: posterior), to 1e-10.
#[test]
fn the_weight_without_the_likelihood_is_the_prior_over_the_t4_density() {
    for scale in ["prior", "posterior"] {
        let (model, _, _, _, k, sigma) = fit_with_kc(scale);
        let s = &model.sampler;
        let (p, nu) = ((s.n * s.c) as f64, s.df);
        let (lk, ls) = (dense_chol(&k), dense_chol(&sigma));
        let log_det_half = |l: &Mat<f64>| (0..l.nrows()).map(|i| l[(i, i)].ln()).sum::<f64>();
        let d = s.draw_batch(&mut Pcg64::seed_from_u64(11), &ChiSquared::new(nu).unwrap(), 30);
        let u = s.whiten(&d.z);
        for (b, f) in dense_draws(s, &d, &ls).iter().enumerate() {
            let wk = forward(&lk, f);
            let log_prior = -0.5 * p * (2.0 * std::f64::consts::PI).ln() - log_det_half(&lk) - 0.5 * wk.iter().map(|v| v * v).sum::<f64>();
            let fm: Vec<f64> = f.iter().zip(&s.m).map(|(a, b)| a - b).collect();
            let delta: f64 = forward(&ls, &fm).iter().map(|v| v * v).sum();
            let log_t = lgamma((nu + p) / 2.0)
                - lgamma(nu / 2.0)
                - 0.5 * p * (nu * std::f64::consts::PI).ln()
                - log_det_half(&ls)
                - 0.5 * (nu + p) * (delta / nu).ln_1p();
            let want = log_prior - log_t;
            let got = s.log_prior_over_proposal(d.scales[b], &u, d.znorm2[b], b);
            assert!((got - want).abs() < 1e-10 * want.abs().max(1.0), "{scale}, sample {b} (s = {}): {got} vs {want}", d.scales[b]);
        }
    }
}

/// The predictive's conditional f_* | f (F.1) with K^c far from I (so the L_c product
/// `right_lc` is exercised: it returns early for K^c = I): the mean formed from the redrawn z,
/// K_*^T alpha + s (A_x^T (x) L_c) u, against dense K_*^T K^{-1} f, and the covariance of the
/// noise sqrt(kappa) L_c eps (from unit eps) against dense k_** K^c - K_*^T K^{-1} K_*, for
/// both proposal scales, to 1e-10.
#[test]
fn the_predictive_conditional_is_the_dense_gaussian_conditional() {
    for scale in ["prior", "posterior"] {
        let (model, x, kernel, kc, k, sigma) = fit_with_kc(scale);
        let s = &model.sampler;
        let (n, c, p) = (s.n, s.c, s.n * s.c);
        let xs = Array2::from_shape_vec((2, 1), vec![0.1, 2.0]).unwrap();
        let cond = model.test_conditional(&xs);
        let d = s.draw_batch(&mut Pcg64::seed_from_u64(12), &ChiSquared::new(s.df).unwrap(), 8);
        let au = cond.offsets(s, &d.z);
        let lk = dense_chol(&k);
        let fs = dense_draws(s, &d, &dense_chol(&sigma));
        let ks = kernel.cross(&x, &xs);
        let kss = kernel.diag(&xs);
        for j in 0..2 {
            // B = L_K^{-1} K_*j, K_*j = k_*j (x) K^c (p x C).
            let bcols: Vec<Vec<f64>> =
                (0..c).map(|q| forward(&lk, &(0..p).map(|r| ks[(r / c, j)] * kc[(r % c, q)]).collect::<Vec<_>>())).collect();
            let dot = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f64>();
            let point = |b: usize, eps: &[f64]| {
                let mut fj = vec![0.0; c];
                cond.point(s, &au, b, d.scales[b], j, eps, &mut fj);
                fj
            };
            // Covariance of sqrt(kappa) L_c eps: sum over unit eps of the column outer products.
            let centre = point(0, &vec![0.0; c]);
            let cols: Vec<Vec<f64>> = (0..c)
                .map(|i| {
                    let e: Vec<f64> = (0..c).map(|q| if q == i { 1.0 } else { 0.0 }).collect();
                    point(0, &e).iter().zip(&centre).map(|(a, b)| a - b).collect()
                })
                .collect();
            for q in 0..c {
                for r in 0..c {
                    let got: f64 = cols.iter().map(|col| col[q] * col[r]).sum();
                    let want = kss[j] * kc[(q, r)] - dot(&bcols[q], &bcols[r]);
                    assert!(
                        (got - want).abs() < 1e-10 * kss[j] * kc[(q, q)].max(kc[(r, r)]),
                        "{scale}, point {j}, cov ({q}, {r}): {got} vs {want}"
                    );
                }
            }
            for (b, f) in fs.iter().enumerate() {
                let w = forward(&lk, f);
                let got = point(b, &vec![0.0; c]);
                for q in 0..c {
                    let want = dot(&bcols[q], &w);
                    assert!(
                        (got[q] - want).abs() < 1e-10 * want.abs().max(1.0),
                        "{scale}, point {j}, sample {b}, class {q}: {got:?} vs mean {want}"
                    );
                }
            }
        }
        assert_eq!(n, 4);
    }
}

/// log Z_B by Monte Carlo (notes D§6.4) on n = 3, C = 2 against quadrature. -KL(q || p) from
/// explicit inverses and determinants plus sum_i E_{N(m_i, V_i)} log softmax(f_i)_{y_i} by a
/// 40 x 40 Gauss-Hermite product rule over the whitened f_i is log Z_B; the estimate lies within
/// 4 SE of it (SE = (UB - estimate) / 3.09 from the two reported numbers) and below the
/// reported bound. And log Z_h <= log Z_B <= log Z, with log Z = log int prod_i
/// sigma(s_i (f_i^1 - f_i^2)) N(f; 0, K) df (s_i = +-1 by the label) by a 3-D Gauss-Hermite
/// rule over the class differences, N(0, (K^c_11 + K^c_22 - 2 K^c_12) Kx).
#[test]
fn z_b_matches_quadrature_and_lies_between_z_h_and_z() {
    use crate::likelihoods::factorised::NormalRule;
    use faer::linalg::solvers::DenseSolveCore;
    let (n, c) = (3, 2);
    let x = Array2::from_shape_vec((n, 1), vec![-0.8, 0.1, 0.9]).unwrap();
    let y = vec![0, 1, 1];
    let kernel = SqExp { log_variance: 1.5f64.ln(), log_lengthscales: vec![0.0], learn_variance: false };
    let settings = serde_json::json!({ "n_samples": 20_000, "z_b": true });
    let method = ImportanceParams::from_settings(&settings).unwrap().check(Lik::Logit).unwrap();
    let mut rng = Pcg64::seed_from_u64(5);
    let model = method
        .fit_model(&Problem { x: &x, y: &y, n_classes: c }, &kernel, HyperPolicy::Fixed, &mut FitContext::new(&mut rng, None))
        .unwrap();
    let (ub, hat) = (model.extra["log_zb_ub"], model.extra["log_zb_hat"]);
    let km = &model.km;
    let (k, m) = (km.prior_covariance(), km.posterior_mean());
    let v = k - k * km.t_matrix() * k;
    let p = n * c;
    let kinv = k.partial_piv_lu().inverse();
    let log_det = |a: &Mat<f64>| -> f64 { a.partial_piv_lu().U().diagonal().column_vector().iter().map(|u| u.abs().ln()).sum() };
    let kinv_v = &kinv * &v;
    let tr: f64 = (0..p).map(|i| kinv_v[(i, i)]).sum();
    let mkm: f64 = (0..p).map(|i| (0..p).map(|j| m[i] * kinv[(i, j)] * m[j]).sum::<f64>()).sum();
    let neg_kl = -0.5 * (tr + mkm - p as f64 + log_det(k) - log_det(&v));
    let rule = NormalRule::gauss_hermite(40);
    let mut ell = 0.0;
    for i in 0..n {
        let (v00, v01, v11) = (v[(2 * i, 2 * i)], v[(2 * i, 2 * i + 1)], v[(2 * i + 1, 2 * i + 1)]);
        let (l00, l10) = (v00.sqrt(), v01 / v00.sqrt());
        let l11 = (v11 - l10 * l10).sqrt();
        for (za, wa) in rule.nodes.iter().zip(&rule.weights) {
            for (zb, wb) in rule.nodes.iter().zip(&rule.weights) {
                let f = [m[2 * i] + l00 * za, m[2 * i + 1] + l10 * za + l11 * zb];
                ell += wa * wb * (f[y[i]] - log_sum_exp(&f));
            }
        }
    }
    let log_zb = neg_kl + ell;
    let se = (ub - hat) / 3.09;
    assert!(ub >= hat && se > 0.0, "UB {ub} vs estimate {hat}");
    assert!((hat - log_zb).abs() < 4.0 * se, "estimate {hat} vs quadrature {log_zb} (se {se})");
    // log Z by quadrature over g = (f_i^1 - f_i^2)_i ~ N(0, s2 Kx).
    let kc = km.kc();
    let s2 = kc[(0, 0)] + kc[(1, 1)] - 2.0 * kc[(0, 1)];
    let kx = kernel.gram(&x);
    let lg = Chol::factor((kx * faer::Scale(s2)).as_ref(), "Sigma_g").unwrap();
    let lg = lg.l();
    let sign: Vec<f64> = y.iter().map(|&yi| if yi == 0 { 1.0 } else { -1.0 }).collect();
    let mut z = 0.0;
    for (a, wa) in rule.nodes.iter().zip(&rule.weights) {
        for (b, wb) in rule.nodes.iter().zip(&rule.weights) {
            for (cc, wc) in rule.nodes.iter().zip(&rule.weights) {
                let u = [*a, *b, *cc];
                let lik: f64 = (0..n)
                    .map(|i| {
                        let g: f64 = (0..=i).map(|j| lg[(i, j)] * u[j]).sum();
                        -log_sum_exp(&[0.0, -sign[i] * g])
                    })
                    .sum();
                z += wa * wb * wc * lik.exp();
            }
        }
    }
    let log_z = z.ln();
    assert!(km.log_zh() <= log_zb && log_zb <= log_z, "log Z_h {} <= log Z_B {log_zb} <= log Z {log_z}", km.log_zh());
}
