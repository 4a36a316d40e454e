//! Models of the inter-class covariance K^c (Chai §9.2.2, notes D§10.4).
use super::*;

// Models of the inter-class covariance K^c (Chai §9.2.2, notes D§10.4). Every model keeps
// tr K^c = C; parameters rho start at (or near) K^c = I.

/// Lower-triangular C x C from its packed row-major entries.
pub(super) fn lower_from(rho: &[f64], c: usize) -> Mat<f64> {
    let mut l = Mat::<f64>::zeros(c, c);
    let mut k = 0;
    for i in 0..c {
        for j in 0..=i {
            l[(i, j)] = rho[k];
            k += 1;
        }
    }
    l
}

/// Eq. 46: K~ = M - M 1 1^T M / (1^T M 1) + I, K^c = C K~ / tr K~.
pub(super) fn eq46(m: &Mat<f64>) -> Mat<f64> {
    let c = m.nrows();
    let m1: Vec<f64> = (0..c).map(|i| (0..c).map(|j| m[(i, j)]).sum()).collect();
    let tot: f64 = m1.iter().sum();
    let kt = Mat::from_fn(c, c, |i, j| m[(i, j)] - m1[i] * m1[j] / tot + if i == j { 1.0 } else { 0.0 });
    let tr: f64 = (0..c).map(|i| kt[(i, i)]).sum();
    sym(&(kt * faer::Scale(c as f64 / tr)))
}

pub fn kc_init(model: &str, c: usize) -> Vec<f64> {
    match model {
        "m2" => vec![0.0; c],
        "m3" => vec![0.1f64.ln(); c],
        "m4" => {
            let mut r = vec![0.0; c * (c + 1) / 2];
            let mut k = 0;
            for i in 0..c {
                for j in 0..=i {
                    r[k] = if i == j { 0.3 } else { 0.0 };
                    k += 1;
                }
            }
            r
        }
        "m5" => vec![0.0; c * (c + 1) / 2],
        _ => Vec::new(),
    }
}

pub fn kc_of(model: &str, rho: &[f64], c: usize) -> Mat<f64> {
    let cf = c as f64;
    match model {
        "m2" => {
            let mut p = rho.to_vec();
            softmax_in_place(&mut p);
            Mat::from_fn(c, c, |i, j| if i == j { cf * p[i] } else { 0.0 })
        }
        "m3" => eq46(&Mat::from_fn(c, c, |i, j| if i == j { rho[i].exp() } else { 0.0 })),
        "m4" => {
            let l = lower_from(rho, c);
            eq46(&(&l * l.transpose()))
        }
        "m5" => {
            // log-diagonal L
            let mut l = lower_from(rho, c);
            for i in 0..c {
                l[(i, i)] = l[(i, i)].exp();
            }
            let k = &l * l.transpose();
            let tr: f64 = (0..c).map(|i| k[(i, i)]).sum();
            sym(&(k * faer::Scale(cf / tr)))
        }
        _ => eye(c),
    }
}

/// d log Z_h* / d rho = 1/2 sum_ab (dK^c/drho)_ab G_ab (dK = Kx (x) dK^c); dK^c/drho by central
/// differences of the small smooth map rho -> K^c.
pub(super) fn kc_gradient(env: &Envelope, model: &str, rho: &[f64]) -> Vec<f64> {
    let g = env.g.as_ref().expect("an envelope with the K^c contraction (envelope(.., true))");
    let c = g.nrows();
    (0..rho.len())
        .map(|k| {
            let e = 1e-6;
            let mut rp = rho.to_vec();
            rp[k] += e;
            let mut rm = rho.to_vec();
            rm[k] -= e;
            let d = (kc_of(model, &rp, c) - kc_of(model, &rm, c)) * faer::Scale(1.0 / (2.0 * e));
            0.5 * trace_prod(d.as_ref(), g.transpose())
        })
        .collect()
}

#[cfg(test)]
mod kc_tests {
    use super::*;
    use rand::RngExt;
    use rand::SeedableRng;
    use rand_distr::StandardNormal;

    #[test]
    fn kc_models_keep_the_trace_and_their_gradients_match_finite_differences() {
        let mut r = Pcg64::seed_from_u64(4);
        let n = 7;
        let c = 3;
        let y: Vec<usize> = (0..n).map(|i| i % c).collect();
        let x = Array2::from_shape_fn((n, 2), |(i, d)| r.sample::<f64, _>(StandardNormal) + if d == 0 { y[i] as f64 } else { 0.0 });
        let kern = SqExp { log_variance: 0.3, log_lengthscales: vec![0.2], learn_variance: true };
        let params = KlmnlParams { tol: 1e-14, b_tol: 1e-11, ..Default::default() };
        for model in ["m2", "m3", "m4", "m5"] {
            let rho: Vec<f64> = kc_init(model, c).iter().map(|v| v + 0.2 * r.sample::<f64, _>(StandardNormal)).collect();
            let kc = kc_of(model, &rho, c);
            let tr: f64 = (0..c).map(|i| kc[(i, i)]).sum();
            assert!((tr - c as f64).abs() < 1e-12, "{model}: tr {tr}");
            let at = |rh: &[f64]| {
                fit_variational(&Prior::new(kern.gram(&x), kc_of(model, rh, c), &y).unwrap(), &params, None, None).unwrap().log_zh
            };
            let pr = Prior::new(kern.gram(&x), kc, &y).unwrap();
            let fit = fit_variational(&pr, &params, None, None).unwrap();
            let g = kc_gradient(&envelope(&pr, &fit, true), model, &rho);
            for k in 0..rho.len() {
                let e = 1e-4;
                let mut rp = rho.clone();
                rp[k] += e;
                let mut rm = rho.clone();
                rm[k] -= e;
                let fd = (at(&rp) - at(&rm)) / (2.0 * e);
                assert!((fd - g[k]).abs() < 1e-5 * (1.0 + fd.abs()), "{model} param {k}: {} vs fd {fd}", g[k]);
            }
        }
        // M3/M4 are sum-to-zero models: 1 is an eigenvector of K^c
        for model in ["m3", "m4"] {
            let kc = kc_of(model, &kc_init(model, c).iter().map(|v| v + 0.3).collect::<Vec<_>>(), c);
            let k1: Vec<f64> = (0..c).map(|i| (0..c).map(|j| kc[(i, j)]).sum()).collect();
            assert!(k1.iter().all(|v| (v - k1[0]).abs() < 1e-12), "{model}: {k1:?}");
        }
    }
}
