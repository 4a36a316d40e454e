//! The factorised multi-way IVM against mathematics: eq. 7's site reproduces the tilted
//! marginal, each class's incremental representation equals its recomputation and the dense
//! posterior after every inclusion, the selection takes the lowest Delta, and end-to-end fits
//! on separable blobs (notes §5.2, §9 R0).
use super::select::{score_point, Multiway};
use super::sites::{cavity, delta_score, eq7_site};
use super::*;
use crate::kernels::{Kernel, KernelParams};
use crate::linalg::Chol;
use crate::methods::ivm::state::IvmState;
use crate::methods::Prediction;
use crate::methods::{FitContext, FromSettings};
use faer::Mat;
use rand::{RngExt, SeedableRng};
use rand_distr::{Distribution, StandardNormal};
use rand_pcg::Pcg64;

fn close(what: &str, got: f64, want: f64, tol: f64) {
    assert!((got - want).abs() <= tol * (1.0 + want.abs()), "{what}: got {got}, want {want} (tol {tol})");
}

fn method(settings: serde_json::Value) -> IvmMultiway {
    IvmMultiwayParams::from_settings(&settings).unwrap().check().unwrap()
}

fn kernel(yaml: &str, dim: usize) -> Box<dyn Kernel> {
    serde_norway::from_str::<KernelParams>(yaml).unwrap().kernel_set(dim, 2).unwrap().class(0).clone_box()
}

/// Three different kernels, one per class (the representations must not mix them up).
fn per_class_kernels() -> KernelSet {
    KernelSet::per_class(vec![
        kernel("{ lengthscale: 0.9, variance: 2.0 }", 2),
        kernel("{ ard: true, lengthscale: [0.7, 1.6], variance: 1.3 }", 2),
        kernel("{ type: sum, terms: [ { lengthscale: 1.1, variance: 1.5 }, { type: white, variance: 0.05 } ] }", 2),
    ])
}

/// `n_per` points per class around C centres on a circle of radius `radius` in 2-D.
fn blobs(n_per: usize, c: usize, radius: f64, spread: f64, seed: u64) -> (Array2<f64>, Vec<usize>) {
    let mut rng = Pcg64::seed_from_u64(seed);
    let n = n_per * c;
    let mut x = Array2::zeros((n, 2));
    let mut y = Vec::with_capacity(n);
    for i in 0..n {
        let k = i % c;
        let angle = 2.0 * std::f64::consts::PI * k as f64 / c as f64;
        let e0: f64 = StandardNormal.sample(&mut rng);
        let e1: f64 = StandardNormal.sample(&mut rng);
        x[(i, 0)] = radius * angle.cos() + spread * e0;
        x[(i, 1)] = radius * angle.sin() + spread * e1;
        y.push(k);
    }
    (x, y)
}

/// The dense posterior for active set I with sites (pi, b): A = K - K_{.,I} (Pi^{-1} + K_I)^{-1}
/// K_{I,.} and h = A_{.,I} b, by a Cholesky solve (no inverse of K).
fn dense_posterior(k: &Mat<f64>, active: &[usize], pi: &[f64], b: &[f64]) -> (Vec<f64>, Vec<f64>) {
    let (n, d) = (k.nrows(), active.len());
    if d == 0 {
        return (vec![0.0; n], (0..n).map(|i| k[(i, i)]).collect());
    }
    let s = Mat::from_fn(d, d, |r, c| k[(active[r], active[c])] + if r == c { 1.0 / pi[r] } else { 0.0 });
    let chol = Chol::factor(s.as_ref(), "Pi^-1 + K_I").unwrap();
    let kin = Mat::from_fn(d, n, |r, j| k[(active[r], j)]);
    let w = chol.solve(kin.as_ref());
    let a_full = Mat::from_fn(n, n, |i, j| k[(i, j)] - (0..d).map(|r| kin[(r, i)] * w[(r, j)]).sum::<f64>());
    let h = (0..n).map(|i| (0..d).map(|r| a_full[(i, active[r])] * b[r]).sum()).collect();
    let a = (0..n).map(|i| a_full[(i, i)]).collect();
    (h, a)
}

/// The (class, point) included between two states.
fn included(before: &Multiway, after: &Multiway) -> (usize, usize) {
    let c = (0..after.n_classes()).find(|&k| after.states[k].d() > before.states[k].d()).expect("one class grew");
    (c, *after.states[c].active.last().unwrap())
}

/// Every number of one class's representation and its site index, as bits: what an inclusion
/// into another class must leave alone.
fn class_bits(mw: &Multiway, c: usize) -> Vec<u64> {
    let st = &mw.states[c];
    let l = st.chol.l();
    let mut bits: Vec<u64> = st.active.iter().map(|&i| i as u64).collect();
    bits.extend(st.rows.iter().flatten().map(|&r| r as u64));
    bits.extend(mw.site_of[c].iter().map(|s| s.map_or(u64::MAX, |p| p as u64)));
    bits.extend([st.floor_hits as u64, st.chol.jitter().to_bits(), l.nrows() as u64]);
    bits.extend((0..l.nrows()).flat_map(|r| (0..l.ncols()).map(move |k| l[(r, k)].to_bits())));
    for v in [&st.pi, &st.b, &st.beta, &st.h, &st.a, &st.kdiag].into_iter().chain(&st.m_cols) {
        bits.push(v.len() as u64);
        bits.extend(v.iter().map(|x| x.to_bits()));
    }
    bits
}

/// Eq. 7 with pi > 0: cavity times site has exactly the tilted mean and variance; clipped
/// (tilted variance above the cavity's): pi = 0 and the mean is still matched.
#[test]
fn eq7_site_reproduces_the_tilted_marginal() {
    let mut rng = Pcg64::seed_from_u64(1);
    for _ in 0..200 {
        let h: f64 = rng.random_range(-3.0..3.0);
        let a: f64 = rng.random_range(0.05..4.0);
        let h_t: f64 = h + rng.random_range(-1.0..1.0);
        let a_t: f64 = a * rng.random_range(0.01..0.999);
        let (pi, b) = eq7_site(h, a, h_t, a_t);
        assert!(pi > 0.0);
        let prec = 1.0 / a + pi;
        close("tilted variance", 1.0 / prec, a_t, 1e-12);
        close("tilted mean", (h / a + b) / prec, h_t, 1e-12);
        // The score is -KL[N(h_t, a_t) || N(h, a)] in eq. 5's printed form.
        let m = 1.0 + a * pi;
        let kl = 0.5 * (m.ln() + 1.0 / m + (h_t - h).powi(2) / a - 1.0);
        close("Delta = -KL", delta_score(h, a, h_t, pi), -kl, 1e-10);
        let kl_gauss = 0.5 * (a_t / a + (h_t - h).powi(2) / a - 1.0 + (a / a_t).ln());
        close("KL of the two Gaussians", kl, kl_gauss, 1e-10);
        // Clipped.
        let (pi0, b0) = eq7_site(h, a, h_t, a * 1.2);
        assert_eq!(pi0, 0.0);
        close("clipped mean", a * (h / a + b0), h_t, 1e-12);
    }
    // The cavity divides an active point's site back out.
    let (h, a, pi, b) = (0.4, 0.8, 1.7, -0.3);
    let prec = 1.0 / a + pi;
    let (hm, am) = ((h / a + b) / prec, 1.0 / prec);
    let (hc, ac) = cavity(hm, am, Some((pi, b))).unwrap();
    close("cavity mean", hc, h, 1e-12);
    close("cavity variance", ac, a, 1e-12);
}

/// After every inclusion: each class's incremental representation equals its recomputation
/// from its active set and sites and the dense posterior; the class that grew has, at the
/// included point, exactly the tilted marginal computed before the inclusion from the joint
/// cavity (eq. 7 with pi > 0) while every other class's representation is unchanged bit for
/// bit; and the included pair has the lowest Delta of all pairs (and
/// the highest is a different pair, so an argmax would fail).
#[test]
fn inclusions_match_recomputation_tilted_moments_and_lowest_delta() {
    let (x, y) = blobs(12, 3, 1.2, 0.7, 5);
    let kernels = per_class_kernels();
    let grams: Vec<Mat<f64>> = (0..3).map(|k| kernels.class(k).gram(&x)).collect();
    for settings in [
        serde_json::json!({ "active_total": 40, "intercepts": [0.2, -0.1, 0.0] }),
        serde_json::json!({ "active_total": 40, "likelihood": "multi_probit" }),
    ] {
        let m = method(settings.clone());
        let lik = m.likelihood(3);
        let eps = m.params.min_site_precision;
        let mut rng = Pcg64::seed_from_u64(1);
        let mut ctx = FitContext::new(&mut rng, None);
        let mut prev = Multiway::prior((0..3).map(|k| kernels.class(k).diag(&x)).collect());
        let mut checked = 0;
        // Inclusions of a point already active in another class (their cavities divide a site out).
        let mut shared_inclusions = 0;
        let sel = m
            .select(&kernels, &x, &y, &lik, &mut ctx, |k, mw, _| {
                let what = format!("{settings} inclusion {k}");
                // Representation vs recomputation and dense algebra.
                for c in 0..3 {
                    let st = &mw.states[c];
                    let (re, _) = IvmState::rebuild(kernels.class(c), &x, &st.active, &st.pi, &st.b).unwrap();
                    let (hd, ad) = dense_posterior(&grams[c], &st.active, &st.pi, &st.b);
                    for j in 0..st.n() {
                        close(&format!("{what}: class {c} h[{j}] vs rebuild"), st.h[j], re.h[j], 1e-9);
                        close(&format!("{what}: class {c} a[{j}] vs rebuild"), st.a[j], re.a[j], 1e-9);
                        close(&format!("{what}: class {c} h[{j}] vs dense"), st.h[j], hd[j], 1e-8);
                        close(&format!("{what}: class {c} a[{j}] vs dense"), st.a[j], ad[j], 1e-8);
                    }
                }
                // The included pair: tilted marginal reproduced, lowest Delta.
                let (c, j) = included(&prev, mw);
                // Factorised: only class c's representation moves; every other class's is the
                // same to the bit (its sites, factor, stubs and marginals).
                assert_eq!(mw.total(), prev.total() + 1, "{what}: one pair per inclusion");
                for k in (0..3).filter(|&k| k != c) {
                    assert!(class_bits(mw, k) == class_bits(&prev, k), "{what}: class {k} changed when u_{j},{c} was included");
                }
                let (hc, ac) = prev.cavity(j).unwrap();
                // The cavity, independently: each class's dense posterior without point j's site
                // (the full posterior where j is not active in that class).
                let mut shared = 0;
                for k in 0..3 {
                    let st = &prev.states[k];
                    let keep: Vec<usize> = (0..st.d()).filter(|&r| st.active[r] != j).collect();
                    shared += usize::from(keep.len() < st.d());
                    let pick = |v: &[f64]| keep.iter().map(|&r| v[r]).collect::<Vec<f64>>();
                    let active: Vec<usize> = keep.iter().map(|&r| st.active[r]).collect();
                    let (hd, ad) = dense_posterior(&grams[k], &active, &pick(&st.pi), &pick(&st.b));
                    close(&format!("{what}: cavity mean of u_{j},{k}"), hc[k], hd[j], 1e-8);
                    close(&format!("{what}: cavity variance of u_{j},{k}"), ac[k], ad[j], 1e-8);
                }
                shared_inclusions += usize::from(shared > 0);
                let t = lik.tilted(y[j], &hc, &ac);
                close(&format!("{what}: new mean of u_{j},{c}"), mw.states[c].h[j], t.mean[c], 1e-9);
                close(&format!("{what}: new variance of u_{j},{c}"), mw.states[c].a[j], t.var[c], 1e-9);
                let all: Vec<_> = (0..x.nrows()).flat_map(|i| score_point(&prev, &lik, y[i], i, eps).0).flatten().collect();
                let chosen = all.iter().find(|s| s.index == j && s.class == c).expect("the included pair was a candidate");
                assert!(all.iter().all(|s| chosen.delta <= s.delta), "{what}: a pair has a lower Delta than the included one");
                let worst = all.iter().max_by(|a, b| a.delta.total_cmp(&b.delta)).unwrap();
                assert!(worst.delta > chosen.delta, "{what}: all scores equal");
                prev = mw.clone();
                checked += 1;
                Ok(())
            })
            .unwrap();
        assert_eq!(checked, 40);
        assert!(shared_inclusions > 0, "{settings}: no point entered a second class, so no cavity divided a site out");
        assert_eq!(sel.mw.total(), 40);
        assert_eq!(sel.non_finite, 0);
        assert!(sel.mw.states.iter().all(|s| s.d() > 0 && s.pi.iter().all(|p| *p > 0.0)), "{settings}");
    }
}

/// A point may enter several classes; it stays a candidate for the classes it is not in, and
/// its cavity there divides out its other components (checked above through the tilted
/// marginal). The softmax is strictly log-concave in each u_c, so every pair's site precision
/// is positive: with `active_total` above C n the selection stops at the cap C n = 36 with every
/// point in every class, not by running dry.
///
/// It runs dry when some class can never qualify: eq. 7's site precision is pi = 1/a_t - 1/a,
/// and the tilted marginal of u_c is N(h, a) times a factor whose -log has curvature at most
/// max p_c (1 - p_c) = 1/4 (the softmax's curvature along u_c, less a variance), so by the
/// Cramer-Rao bound a_t >= 1 / (1/a + 1/4), i.e. pi <= 1/4. With class 3's prior variance 0.01,
/// pi K_jj <= 0.0025 is below a threshold of 0.01 for every point, so at most 2 n = 24 pairs
/// can enter before no candidate is left.
#[test]
fn points_enter_several_classes_and_the_selection_can_run_dry() {
    let (x, y) = blobs(4, 3, 1.0, 0.5, 9);
    let n = x.nrows();
    let select = |kernels: &KernelSet, settings: serde_json::Value| {
        let m = method(settings);
        let lik = m.likelihood(3);
        let mut rng = Pcg64::seed_from_u64(1);
        let mut ctx = FitContext::new(&mut rng, None);
        let sel = m.select(kernels, &x, &y, &lik, &mut ctx, |_, _, _| Ok(())).unwrap();
        for c in 0..3 {
            let mut a = sel.mw.states[c].active.clone();
            a.sort_unstable();
            a.dedup();
            assert_eq!(a.len(), sel.mw.states[c].d(), "class {c} has a repeated point");
        }
        sel
    };

    let full = select(&per_class_kernels(), serde_json::json!({ "active_total": 50 }));
    assert_eq!(full.mw.total(), 3 * n, "the cap is C n");
    assert!(!full.exhausted && full.stop == StopReason::MaxIterations, "stopped at the cap, not dry");
    assert_eq!(full.mw.shared_points(), n, "every point is in every class");

    let tiny_third = KernelSet::per_class(vec![
        kernel("{ lengthscale: 0.9, variance: 2.0 }", 2),
        kernel("{ ard: true, lengthscale: [0.7, 1.6], variance: 1.3 }", 2),
        kernel("{ lengthscale: 1.1, variance: 0.01 }", 2),
    ]);
    let dry = select(&tiny_third, serde_json::json!({ "active_total": 50, "min_site_precision": 0.01 }));
    assert!(dry.exhausted && dry.stop == StopReason::Converged, "the selection did not run dry");
    assert_eq!(dry.mw.states[2].d(), 0, "a class-3 site passed the threshold");
    assert!(dry.mw.total() > 0 && dry.mw.total() <= 2 * n, "{} inclusions", dry.mw.total());
}

/// Prediction with per-class kernels that differ (all squared-exponential, no white-noise term,
/// so a kernel's cross-covariance at a training row is its Gram entry): at the training rows
/// class c's latent predictive is class c's own IVM marginal (h_c, a_c); at the training and
/// test rows together it is the dense posterior of class c's Gram matrix with class c's active
/// set and sites; the classes' dense marginals differ from each other (so a model that swapped
/// kernels or states between classes fails); and predict is the likelihood's predictive of
/// those dense marginals.
#[test]
fn prediction_uses_each_class_own_kernel_and_state() {
    let (x, y) = blobs(10, 3, 1.2, 0.7, 17);
    let (xt, _) = blobs(4, 3, 1.2, 1.2, 18);
    let kernels = KernelSet::per_class(vec![
        kernel("{ lengthscale: 0.6, variance: 2.0 }", 2),
        kernel("{ ard: true, lengthscale: [0.7, 1.6], variance: 1.3 }", 2),
        kernel("{ lengthscale: 1.5, variance: 0.6 }", 2),
    ]);
    let n = x.nrows();
    let xx = ndarray::concatenate![ndarray::Axis(0), x, xt];
    for settings in [
        serde_json::json!({ "active_total": 24, "intercepts": [0.2, -0.1, 0.0] }),
        serde_json::json!({ "active_total": 24, "likelihood": "multi_probit", "intercepts": [0.2, -0.1, 0.0] }),
    ] {
        let m = method(settings.clone());
        let lik = m.likelihood(3);
        let mut rng = Pcg64::seed_from_u64(1);
        let mut ctx = FitContext::new(&mut rng, None);
        let sel = m.select(&kernels, &x, &y, &lik, &mut ctx, |_, _, _| Ok(())).unwrap();
        drop(ctx);
        let model = m.model(&kernels, &x, &sel.mw, &lik, Diagnostics::default());
        let (mean, var) = model.latent_predictive(&xx);
        let mut dense = Vec::new();
        for c in 0..3 {
            let st = &sel.mw.states[c];
            assert!(st.d() > 0, "{settings}: class {c} has no active point");
            for j in 0..n {
                close(&format!("{settings}: class {c} mean at training row {j} vs h"), mean[(j, c)], st.h[j], 1e-9);
                close(&format!("{settings}: class {c} variance at training row {j} vs a"), var[(j, c)], st.a[j], 1e-9);
            }
            let (hd, ad) = dense_posterior(&kernels.class(c).gram(&xx), &st.active, &st.pi, &st.b);
            for j in 0..xx.nrows() {
                close(&format!("{settings}: class {c} mean at row {j} vs dense"), mean[(j, c)], hd[j], 1e-8);
                close(&format!("{settings}: class {c} variance at row {j} vs dense"), var[(j, c)], ad[j], 1e-8);
            }
            dense.push((hd, ad));
        }
        for (c, d) in [(0, 1), (0, 2), (1, 2)] {
            let gap = |f: &dyn Fn(usize, usize) -> f64| (0..xx.nrows()).map(|j| (f(c, j) - f(d, j)).abs()).fold(0.0, f64::max);
            let (gm, gv) = (gap(&|k, j| dense[k].0[j]), gap(&|k, j| dense[k].1[j]));
            assert!(gm > 0.1 && gv > 0.1, "{settings}: classes {c} and {d} are too alike to tell a swap (means {gm}, variances {gv})");
        }
        let p = model.predict(&xx, &mut rng).unwrap();
        for j in 0..xx.nrows() {
            let h: Vec<f64> = (0..3).map(|c| dense[c].0[j]).collect();
            let a: Vec<f64> = (0..3).map(|c| dense[c].1[j]).collect();
            let want = lik.predictive(&h, &a);
            for c in 0..3 {
                close(&format!("{settings}: P(class {c}) at row {j}"), p.probs[(j, c)], want[c], 1e-8);
            }
        }
    }
}

/// Separable 3-class blobs: near-zero test error with both likelihoods, probabilities on the
/// simplex, and bit-for-bit the same result twice.
#[test]
fn separable_blobs_are_learned_deterministically() {
    let (x, y) = blobs(20, 3, 3.0, 0.5, 11);
    let (xt, yt) = blobs(30, 3, 3.0, 0.5, 12);
    let kernels =
        serde_norway::from_str::<KernelParams>("{ lengthscale: 1.5, variance: 4.0, per_class: true }").unwrap().kernel_set(2, 3).unwrap();
    let problem = Problem { x: &x, y: &y, n_classes: 3 };
    for settings in [serde_json::json!({ "active_total": 30 }), serde_json::json!({ "active_total": 30, "likelihood": "multi_probit" })] {
        let m = method(settings.clone());
        let run = || {
            let mut rng = Pcg64::seed_from_u64(3);
            let mut ctx = FitContext::new(&mut rng, None);
            let fitted = m.fit(&problem, &kernels, HyperPolicy::Fixed, &mut ctx).unwrap();
            drop(ctx);
            let p = fitted.predict(&xt, &mut rng).unwrap();
            (fitted, p)
        };
        let (fitted, p) = run();
        p.validate(xt.nrows(), 3).unwrap();
        let errors = p.labels().iter().zip(&yt).filter(|(a, b)| a != b).count();
        assert!(errors <= 1, "{settings}: {errors} of 90 test points misclassified");
        let mean_log_p: f64 = yt.iter().enumerate().map(|(j, &c)| p.probs[(j, c)].ln()).sum::<f64>() / 90.0;
        assert!(mean_log_p > -0.35, "{settings}: mean test log-probability {mean_log_p}");
        let d = fitted.diagnostics();
        assert_eq!(d.numbers["active_total"], 30.0);
        assert!(fitted.evidence().is_none());
        let (_, p2) = run();
        let bits = |p: &Prediction| p.probs.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&p), bits(&p2), "{settings}: two fits differ");
    }
}

#[test]
fn settings_and_supports_name_what_is_wrong() {
    let err = |v: serde_json::Value| IvmMultiwayParams::from_settings(&v).and_then(|p| p.check()).unwrap_err();
    assert!(err(serde_json::json!({ "active_total": 0 })).contains("active_total"));
    assert!(err(serde_json::json!({ "quadrature_points": 1 })).contains("quadrature_points"));
    // The multi-probit's adapted rule sets its own nodes.
    let e = err(serde_json::json!({ "likelihood": "multi_probit", "quadrature_points": 40 }));
    assert!(e.contains("settings.quadrature_points (40) applies to likelihood: softmax only"), "{e}");
    assert_eq!(method(serde_json::json!({ "likelihood": "softmax", "quadrature_points": 41 })).params.points(), 41);
    assert!(err(serde_json::json!({ "min_site_precision": 0.0 })).contains("min_site_precision"));
    assert!(
        err(serde_json::json!({ "likelihood": "logit" })).contains("likelihood")
            || err(serde_json::json!({ "likelihood": "logit" })).contains("variant")
    );
    assert!(err(serde_json::json!({ "active_size": 10 })).contains("active_size"));
    let shape = ProblemShape { n_classes: 3, n_features: 2, n_train: 10 };
    let kernels = per_class_kernels();
    let m = method(serde_json::json!({}));
    assert!(m.supports(&shape, &kernels, HyperPolicy::Fixed).is_ok());
    assert!(m.supports(&shape, &kernels, HyperPolicy::Learn).unwrap_err().contains("fixed hyper-parameters only"));
    let m = method(serde_json::json!({ "intercepts": [0.0, 1.0] }));
    assert!(m.supports(&shape, &kernels, HyperPolicy::Fixed).unwrap_err().contains("intercepts"));
    let m = method(serde_json::json!({ "quadrature_points": 200 }));
    let four = ProblemShape { n_classes: 4, ..shape };
    let four_kernels = KernelSet::per_class((0..4).map(|k| kernels.class(k.min(2)).clone_box()).collect());
    assert!(m.supports(&four, &four_kernels, HyperPolicy::Fixed).unwrap_err().contains("quadrature_points"));
    // Per-class kernels must be one per class (fewer were indexed past the end).
    assert!(method(serde_json::json!({}))
        .supports(&four, &kernels, HyperPolicy::Fixed)
        .unwrap_err()
        .contains("3 per-class kernels for 4 classes"));
    assert_eq!(method(serde_json::json!({})).params.points(), 3);
}

/// `budget: {iterations: k}` ends the selection after k inclusions, as a normal stop with a
/// usable model.
#[test]
fn an_iteration_budget_stops_after_that_many_inclusions() {
    let (x, y) = blobs(10, 3, 2.0, 0.5, 13);
    let kernels = per_class_kernels();
    let problem = Problem { x: &x, y: &y, n_classes: 3 };
    let m = method(serde_json::json!({ "active_total": 20 }));
    let mut rng = Pcg64::seed_from_u64(3);
    let budget = crate::methods::Budget { iterations: Some(7), ..Default::default() };
    let mut ctx = FitContext::new(&mut rng, None).with_budget(Some(budget));
    let fitted = m.fit(&problem, &kernels, HyperPolicy::Fixed, &mut ctx).unwrap();
    drop(ctx);
    let d = fitted.diagnostics();
    assert_eq!(d.iterations, Some(7));
    assert_eq!(d.stop_reason, Some(StopReason::BudgetIterations));
    let p = fitted.predict(&x, &mut rng).unwrap();
    p.validate(x.nrows(), 3).unwrap();
}
