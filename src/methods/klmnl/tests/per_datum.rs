//! The per-datum bound h: Theorem 10's optimum, Lemma 29's closed form, and the chain (9) <= (10) <= max h <= E log softmax <= its upper bound.
use super::*;

/// Theorem 10's closed form at the settings of Chai's Table 3 column (C = 3 and 7; sigma^2 = 1,
/// and pi^2/6 for the probit-matched variance): it is the optimum of the per-datum bound at
/// q(f) = N(0, sigma^2 I), found numerically by `optimise_datum`, and it lies between Jensen's
/// bound (10), -log C - sigma^2 / 2, and the exact E log softmax(f)_y by Monte Carlo (5 SE).
#[test]
fn theorem10_is_the_per_datum_optimum_between_jensen_and_the_expected_loglik() {
    let mut r = rng(3);
    for c in [3usize, 7] {
        for s2 in [1.0, std::f64::consts::PI.powi(2) / 6.0] {
            let closed = theorem10_per_datum(c, s2);
            let (h, _, _) = optimise_datum(&vec![0.0; c], &(eye(c) * faer::Scale(s2))).unwrap();
            assert!((h - closed).abs() < 1e-8, "C = {c}, s2 = {s2}: optimum {h} vs closed form {closed}");
            let jensen = -(c as f64).ln() - 0.5 * s2;
            assert!(jensen < closed, "C = {c}, s2 = {s2}: Jensen {jensen} vs {closed}");
            let draws = 200_000;
            let (mut s1, mut sq) = (0.0, 0.0);
            for _ in 0..draws {
                let f: Vec<f64> = (0..c).map(|_| s2.sqrt() * r.sample::<f64, _>(StandardNormal)).collect();
                let l = f[0] - log_sum_exp(&f);
                s1 += l;
                sq += l * l;
            }
            let ell = s1 / draws as f64;
            let se = ((sq / draws as f64 - ell * ell) / draws as f64).sqrt();
            assert!(closed < ell + 5.0 * se, "C = {c}, s2 = {s2}: closed form {closed} above E log softmax {ell} (se {se})");
        }
    }
}

#[test]
fn per_datum_optimum_matches_lemma29_closed_form() {
    for (c, s2, want) in [(3usize, 1.0, -1.392044), (7, 1.0, -2.348509), (3, 4.0, -2.050873)] {
        let v = eye(c) * faer::Scale(s2);
        let m = vec![0.0; c];
        let (h, b, s) = optimise_datum(&m, &v).unwrap();
        // h(y) = h_core + m^y = h_core at m = 0
        assert!((h - want).abs() < 1e-6, "C={c} s2={s2}: {h} vs {want}");
        assert!((h - theorem10_per_datum(c, s2)).abs() < 1e-8);
        for bc in &b {
            assert!((bc - 1.0 / c as f64).abs() < 1e-7);
        }
        // eigenvalues of s2 S* are {1, lambda x (C-1)}, lambda = r + 1/2
        let lam = (s2 / c as f64 + 0.25).sqrt() + 0.5;
        let (ev, _) = eigh(&(s * faer::Scale(s2))).unwrap();
        assert!((ev[0] - 1.0).abs() < 1e-6, "{ev:?}");
        for e in &ev[1..] {
            assert!((e - lam).abs() < 1e-6, "{ev:?} vs {lam}");
        }
    }
}

/// Jensen bounds (9) and (10), the exact softmax at the mean (Lemma 7) and a long Monte
/// Carlo estimate of the expected log-likelihood bracket max h.
#[test]
fn bound_chain_j9_j10_le_max_h_le_expected_loglik_le_upper() {
    let mut r = rng(11);
    for trial in 0..3 {
        let c = 4;
        let m: Vec<f64> = (0..c).map(|_| 2.0 * r.sample::<f64, _>(StandardNormal)).collect();
        let v = random_spd(c, &mut r, 2.0);
        let y = trial % c;
        let (hcore, b, s) = optimise_datum(&m, &v).unwrap();
        let h = hcore + m[y];
        let ey = |k: usize| -> Vec<f64> { (0..c).map(|q| if q == k { 1.0 } else { 0.0 }).collect() };
        let quad = |d: &[f64]| -> f64 { (0..c).map(|p| (0..c).map(|q| d[p] * v[(p, q)] * d[q]).sum::<f64>()).sum() };
        let j9 = m[y]
            - log_sum_exp(
                &(0..c)
                    .map(|k| {
                        let d: Vec<f64> = ey(y).iter().zip(ey(k)).map(|(a, b)| a - b).collect();
                        m[k] + 0.5 * quad(&d)
                    })
                    .collect::<Vec<_>>(),
            );
        let j10 = m[y] - log_sum_exp(&(0..c).map(|k| m[k] + 0.5 * v[(k, k)]).collect::<Vec<_>>());
        let upper = m[y] - log_sum_exp(&m);
        // Monte Carlo l = E log softmax(f)_y, f ~ N(m, V)
        let lv = Chol::factor(v.as_ref(), "V").unwrap();
        // The relaxations of D§2.2 exactly: h(y; q, b = y, S = V^{-1}) is Jensen's (9) and
        // h(y; q, b = 0, S = V^{-1}) is (10).
        let v_inv = lv.solve(eye(c).as_ref());
        let h_at = |b: &[f64]| datum_terms(&m, &v, lv.log_det(), b, &v_inv, Basis::CLASS).unwrap().h_core + m[y];
        let (h9, h10) = (h_at(&ey(y)), h_at(&vec![0.0; c]));
        assert!((h9 - j9).abs() < 1e-12 * j9.abs().max(1.0), "trial {trial}: h(b = y, S = V^-1) {h9} vs (9) {j9}");
        assert!((h10 - j10).abs() < 1e-12 * j10.abs().max(1.0), "trial {trial}: h(b = 0, S = V^-1) {h10} vs (10) {j10}");
        let ns = 400_000;
        let (mut s1, mut s2) = (0.0, 0.0);
        for _ in 0..ns {
            let z: Vec<f64> = (0..c).map(|_| r.sample::<f64, _>(StandardNormal)).collect();
            let f: Vec<f64> = (0..c).map(|p| m[p] + (0..=p).map(|q| lv.l()[(p, q)] * z[q]).sum::<f64>()).collect();
            let l = f[y] - log_sum_exp(&f);
            s1 += l;
            s2 += l * l;
        }
        let ell = s1 / ns as f64;
        let se = ((s2 / ns as f64 - ell * ell) / ns as f64).sqrt();
        assert!(j9 <= h + 1e-10 && j10 <= h + 1e-10, "trial {trial}: j9 {j9} j10 {j10} h {h}");
        assert!(h <= ell + 4.0 * se, "trial {trial}: h {h} > l {ell} (se {se})");
        assert!(ell <= upper + 4.0 * se);
        // tight: the gap is a few hundredths of a nat (notes D§13)
        assert!(ell - h < 0.1, "trial {trial}: gap {}", ell - h);
        // at the optimum b sums to one and W* = S* - V^{-1} has exactly one zero eigenvalue (on 1)
        assert!((b.iter().sum::<f64>() - 1.0).abs() < 1e-8);
        let w = &s - lv.solve(eye(c).as_ref());
        let (ev, u) = eigh(&w).unwrap();
        assert!(ev[0].abs() < 1e-7 && ev[1] > 1e-6, "{ev:?}");
        let dot1: f64 = (0..c).map(|p| u[(p, 0)]).sum::<f64>().abs() / (c as f64).sqrt();
        assert!((dot1 - 1.0).abs() < 1e-6);
    }
}
