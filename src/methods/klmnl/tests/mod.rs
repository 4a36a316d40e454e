//! KL-MNL against closed forms, brute-force quadrature, dense references and finite differences.
use super::datum::{b_slope, s_fixed_point, s_slope};
use super::learn::inner_params;
use super::*;
use crate::methods::FromSettings;
use faer::linalg::solvers::DenseSolveCore;
use rand::{RngExt, SeedableRng};
use rand_distr::StandardNormal;

mod fit;
mod learning;
mod per_datum;
mod predictive;

fn rng(seed: u64) -> Pcg64 {
    Pcg64::seed_from_u64(seed)
}

fn random_spd(c: usize, r: &mut Pcg64, scale: f64) -> Mat<f64> {
    let b = Mat::from_fn(c, c, |_, _| r.sample::<f64, _>(StandardNormal));
    let mut a = &b * b.transpose() * faer::Scale(scale / c as f64);
    for i in 0..c {
        a[(i, i)] += 0.1 * scale;
    }
    a
}

fn toy(n: usize, c: usize, seed: u64) -> (Array2<f64>, Vec<usize>) {
    let mut r = rng(seed);
    let y: Vec<usize> = (0..n).map(|i| i % c).collect();
    let x = Array2::from_shape_fn((n, 2), |(i, d)| r.sample::<f64, _>(StandardNormal) + if d == 0 { y[i] as f64 } else { 0.0 });
    (x, y)
}

/// log Z_h (eq. 21) from dense matrices with explicit inverses: an independent oracle.
fn dense_bound(k: &Mat<f64>, m: &[f64], v: &Mat<f64>, b: &[f64], s: &[Mat<f64>], y1: &[f64], c: usize) -> f64 {
    let nc = m.len();
    let kinv = k.partial_piv_lu().inverse();
    let kinv_v = &kinv * v;
    let ld_k: f64 = Chol::factor(k.as_ref(), "K").unwrap().log_det();
    let ld_v: f64 = Chol::factor(sym(v).as_ref(), "V").unwrap().log_det();
    let mut tr = 0.0;
    for i in 0..nc {
        tr += kinv_v[(i, i)];
    }
    let mkm: f64 = (0..nc).map(|i| (0..nc).map(|j| m[i] * kinv[(i, j)] * m[j]).sum::<f64>()).sum();
    let mut total = -0.5 * (tr + mkm - nc as f64 + ld_k - ld_v);
    for i in 0..nc / c {
        let vi = Mat::from_fn(c, c, |p, q| v[(i * c + p, i * c + q)]);
        let si = &s[i];
        let sinv = si.partial_piv_lu().inverse();
        let sv = si * &vi;
        let ld_sv = Chol::factor(si.as_ref(), "S").unwrap().log_det() + Chol::factor(sym(&vi).as_ref(), "Vi").unwrap().log_det();
        let mut trsv = 0.0;
        for p in 0..c {
            trsv += sv[(p, p)];
        }
        let lg: Vec<f64> = (0..c)
            .map(|k| {
                let d: Vec<f64> = (0..c).map(|p| b[i * c + p] - if p == k { 1.0 } else { 0.0 }).collect();
                m[i * c + k] + 0.5 * (0..c).map(|p| (0..c).map(|q| d[p] * sinv[(p, q)] * d[q]).sum::<f64>()).sum::<f64>()
            })
            .collect();
        let my: f64 = (0..c).map(|p| m[i * c + p] * y1[i * c + p]).sum();
        total += 0.5 * c as f64 + 0.5 * ld_sv - 0.5 * trsv + my - log_sum_exp(&lg);
    }
    total
}

/// K^c = Q diag(lam) Q^T with a random rotation Q.
fn rotated_kc(lam: &[f64], seed: u64) -> Mat<f64> {
    let (_, q) = eigh(&random_spd(lam.len(), &mut rng(seed), 1.0)).unwrap();
    Mat::from_fn(lam.len(), lam.len(), |i, j| (0..lam.len()).map(|k| q[(i, k)] * lam[k] * q[(j, k)]).sum())
}

/// log |det A| from the diagonal of a dense LU factor (an oracle that uses no symmetry).
fn log_abs_det(a: &Mat<f64>) -> f64 {
    a.partial_piv_lu().U().diagonal().column_vector().iter().map(|u| u.abs().ln()).sum()
}

/// Checks one test point's log of (24) against the mathematics, given its latent predictive
/// N(m, V) recomputed densely by the caller: (a) the (24) probabilities of the C classes sum to
/// at most one (each is a lower bound on a probability); (b) each lies below E log softmax(f)_c
/// under N(m, V) by Monte Carlo (5 SE), and within 0.1 nats of it (the bound is tight, notes
/// D§13: 0.01-0.02 nats per datum); (c) (24) - m^c is one number for every class, the optimum
/// over (b, S) of C/2 + 1/2 log|S V| - 1/2 tr(S V) - log sum_c g^c: the optimiser's (b, S)
/// satisfy the stationarity conditions b = g-bar (Lemma 26) and -S V S + S + A = 0 (Lemma 27),
/// where this concave function is at its maximum, and there its value, from explicit inverses
/// and determinants, is (24) - m^c.
pub(crate) fn check_eq24_against_the_mathematics(point: usize, log_p24: &[f64], m: &[f64], v: &Mat<f64>, rng: &mut Pcg64) {
    let c = m.len();
    let mass: f64 = log_p24.iter().map(|l| l.exp()).sum();
    assert!(mass <= 1.0, "point {point}: the (24) probabilities sum to {mass}");
    // (b) E log softmax(f)_c by Monte Carlo, the draws shared by the classes.
    let lv = Chol::factor(sym(v).as_ref(), "V_*").unwrap();
    let draws = 100_000;
    let (mut s1, mut s2) = (vec![0.0; c], vec![0.0; c]);
    for _ in 0..draws {
        let z: Vec<f64> = (0..c).map(|_| rng.sample::<f64, _>(StandardNormal)).collect();
        let f: Vec<f64> = (0..c).map(|p| m[p] + (0..=p).map(|q| lv.l()[(p, q)] * z[q]).sum::<f64>()).collect();
        let lse = log_sum_exp(&f);
        for k in 0..c {
            s1[k] += f[k] - lse;
            s2[k] += (f[k] - lse).powi(2);
        }
    }
    for k in 0..c {
        let ell = s1[k] / draws as f64;
        let se = ((s2[k] / draws as f64 - ell * ell) / draws as f64).sqrt();
        let gap = ell - log_p24[k];
        assert!(gap >= -5.0 * se && gap < 0.1, "point {point}, class {k}: (24) {} vs E log softmax {ell} (se {se})", log_p24[k]);
    }
    // (c) the per-datum optimum, one for every class.
    let h = log_p24[0] - m[0];
    for k in 1..c {
        assert!((log_p24[k] - m[k] - h).abs() < 1e-12 * h.abs().max(1.0), "point {point}: (24) - m^c varies over the classes");
    }
    let (_, b, s) = optimise_datum(m, v).unwrap();
    let s_inv = s.partial_piv_lu().inverse();
    let diff = |k: usize| -> Vec<f64> { (0..c).map(|p| b[p] - if p == k { 1.0 } else { 0.0 }).collect() };
    let quad = |d: &[f64]| -> f64 { (0..c).map(|p| (0..c).map(|q| d[p] * s_inv[(p, q)] * d[q]).sum::<f64>()).sum() };
    let lg: Vec<f64> = (0..c).map(|k| m[k] + 0.5 * quad(&diff(k))).collect();
    let lse = log_sum_exp(&lg);
    let gbar: Vec<f64> = lg.iter().map(|l| (l - lse).exp()).collect();
    for k in 0..c {
        assert!((b[k] - gbar[k]).abs() < 1e-8, "point {point}: b {b:?} is not g-bar {gbar:?}");
    }
    let a = Mat::from_fn(c, c, |p, q| (0..c).map(|k| gbar[k] * diff(k)[p] * diff(k)[q]).sum::<f64>());
    let residual = -(&s * v * &s) + &s + &a;
    assert!(residual.norm_max() < 1e-7 * s.norm_max(), "point {point}: -S V S + S + A = {residual:?}");
    let sv = &s * v;
    let tr_sv: f64 = (0..c).map(|p| sv[(p, p)]).sum();
    let dense = 0.5 * c as f64 + 0.5 * log_abs_det(&sv) - 0.5 * tr_sv - lse;
    assert!((dense - h).abs() < 1e-9 * h.abs().max(1.0), "point {point}: (24) - m^c = {h}, h at the optimiser {dense}");
}
