//! The kernels' reverse-mode gradients (used by the sparse methods) against central finite
//! differences of the matrices themselves.
use super::*;
use crate::testing::central_differences;
use faer::Mat;
use ndarray::Array2;
use rand::{RngExt, SeedableRng};
use rand_pcg::Pcg64;

fn random(rows: usize, cols: usize, rng: &mut Pcg64) -> Array2<f64> {
    Array2::from_shape_fn((rows, cols), |_| rng.random_range(-1.0..1.0))
}

fn random_mat(rows: usize, cols: usize, sym: bool, rng: &mut Pcg64) -> Mat<f64> {
    let mut m = Mat::from_fn(rows, cols, |_, _| rng.random_range(-1.0..1.0));
    if sym {
        m = Mat::from_fn(rows, cols, |i, j| m[(i, j)] + m[(j, i)]);
    }
    m
}

fn kernels() -> Vec<Box<dyn Kernel>> {
    let se = SqExp { log_variance: 0.3, log_lengthscales: vec![-0.2], learn_variance: true };
    let ard = SqExp { log_variance: -0.4, log_lengthscales: vec![0.1, -0.3, 0.5], learn_variance: true };
    let lin = Linear { log_variance: -0.7, learn_variance: true };
    let white = White { log_variance: -1.5, learn_variance: true };
    let sum = Sum::new(vec![Box::new(ard.clone()), Box::new(white.clone()), Box::new(lin.clone())]);
    // One term with a cross-covariance: the sum's VJP reuses the k it is given.
    let ard_white = Sum::new(vec![Box::new(ard.clone()), Box::new(white.clone())]);
    let white_se = Sum::new(vec![Box::new(white.clone()), Box::new(se.clone())]);
    vec![Box::new(se), Box::new(ard), Box::new(lin), Box::new(white), Box::new(sum), Box::new(ard_white), Box::new(white_se)]
}

#[test]
fn a_sum_with_one_cross_term_reuses_k_to_the_last_bit() {
    // Kernel plus white noise: K(Z, X) of the sum is the kernel's own plus exact zeros, so the
    // VJP given the sum's k must equal the kernel's VJP given its own rebuilt K, bit for bit.
    let mut rng = Pcg64::seed_from_u64(7);
    let (z, x) = (random(5, 3, &mut rng), random(9, 3, &mut rng));
    let kbar = random_mat(5, 9, false, &mut rng);
    let ard = SqExp { log_variance: -0.4, log_lengthscales: vec![0.1, -0.3, 0.5], learn_variance: true };
    let white = White { log_variance: -1.5, learn_variance: true };
    for sum in
        [Sum::new(vec![Box::new(ard.clone()), Box::new(white.clone())]), Sum::new(vec![Box::new(white.clone()), Box::new(ard.clone())])]
    {
        assert!(!sum.cross_is_zero());
        let got = sum.cross_vjp(&z, &x, &sum.cross_many(&z, &x), &kbar);
        let own = ard.cross_vjp(&z, &x, &ard.cross_many(&z, &x), &kbar);
        let white_params = white.cross_vjp(&z, &x, &ard.cross_many(&z, &x), &kbar).params;
        assert_eq!(white_params, vec![0.0], "white noise has no cross-covariance gradient");
        let first_is_white = sum.terms()[0].cross_is_zero();
        let want: Vec<f64> = if first_is_white {
            [white_params.clone(), own.params.clone()].concat()
        } else {
            [own.params.clone(), white_params.clone()].concat()
        };
        assert_eq!(got.params.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), want.iter().map(|v| v.to_bits()).collect::<Vec<_>>());
        // Z's gradient: the sum adds the terms' into zeros, white noise's being zero.
        let want_z = &Array2::<f64>::zeros(z.dim()) + &own.z;
        assert_eq!(got.z.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), want_z.iter().map(|v| v.to_bits()).collect::<Vec<_>>());
    }
    assert!(Sum::new(vec![Box::new(white.clone()), Box::new(white)]).cross_is_zero());
}

#[test]
fn kernel_matrices_kept_term_by_term_give_the_same_bits() {
    // What the IVM's criterion gradient relies on: keeping a sum's terms (instead of letting
    // the VJP rebuild them) changes no bit of K, of the parameter gradients or of Z's.
    let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    let mat_bits =
        |m: &Mat<f64>| (0..m.ncols()).flat_map(|j| (0..m.nrows()).map(move |i| (i, j))).map(|ij| m[ij].to_bits()).collect::<Vec<_>>();
    let mut rng = Pcg64::seed_from_u64(11);
    let (z, x) = (random(4, 3, &mut rng), random(7, 3, &mut rng));
    let (kbar, sym) = (random_mat(4, 7, false, &mut rng), random_mat(4, 4, true, &mut rng));
    for k in kernels() {
        let terms = k.cross_many_terms(&z, &x);
        let whole = k.cross_many(&z, &x);
        assert_eq!(mat_bits(&sum_terms(&terms)), mat_bits(&whole), "{}: K", k.kind());
        let (got, want) = (k.cross_vjp_terms(&z, &x, &terms, &kbar), k.cross_vjp(&z, &x, &whole, &kbar));
        assert_eq!(bits(&got.params), bits(&want.params), "{}: cross params", k.kind());
        assert_eq!(bits(got.z.as_slice().unwrap()), bits(want.z.as_slice().unwrap()), "{}: cross Z", k.kind());
        // A sum with one term that is not white noise reuses the k it is given for that term.
        let gram_terms = k.gram_terms(&z);
        let (got, want) = (k.gram_vjp_terms(&z, &gram_terms, &sym), k.gram_vjp(&z, &sum_terms(&gram_terms), &sym));
        assert_eq!(bits(&got.params), bits(&want.params), "{}: gram params", k.kind());
        assert_eq!(bits(got.z.as_slice().unwrap()), bits(want.z.as_slice().unwrap()), "{}: gram Z", k.kind());
    }
}

fn assert_close(what: &str, got: &[f64], want: &[f64]) {
    crate::testing::assert_gradient_close(what, got, want, 1e-6);
}

fn dot(a: &Mat<f64>, b: &Mat<f64>) -> f64 {
    super::frobenius_dot(a, b)
}

#[test]
fn cross_many_equals_cross() {
    let mut rng = Pcg64::seed_from_u64(1);
    let (z, x) = (random(4, 3, &mut rng), random(6, 3, &mut rng));
    for k in kernels() {
        let (a, b) = (k.cross(&z, &x), k.cross_many(&z, &x));
        for i in 0..4 {
            for j in 0..6 {
                assert!((a[(i, j)] - b[(i, j)]).abs() < 1e-13, "{}: {} vs {}", k.kind(), a[(i, j)], b[(i, j)]);
            }
        }
        let (a, b) = (k.gram(&z), k.gram_many(&z));
        for i in 0..4 {
            for j in 0..4 {
                assert!((a[(i, j)] - b[(i, j)]).abs() < 1e-13, "{} gram: {} vs {}", k.kind(), a[(i, j)], b[(i, j)]);
                assert_eq!(b[(i, j)], b[(j, i)]);
            }
        }
    }
}

#[test]
fn cross_gram_and_diag_gradients_match_finite_differences() {
    let mut rng = Pcg64::seed_from_u64(2);
    let (z, x) = (random(4, 3, &mut rng), random(5, 3, &mut rng));
    let kbar = random_mat(4, 5, false, &mut rng);
    let kbar_sym = random_mat(4, 4, true, &mut rng);
    let dbar: Vec<f64> = (0..5).map(|_| rng.random_range(-1.0..1.0)).collect();
    for k in kernels() {
        let name = k.kind();
        let p0 = k.log_params();
        let zflat: Vec<f64> = z.iter().copied().collect();
        let with_z = |v: &[f64]| Array2::from_shape_vec(z.dim(), v.to_vec()).unwrap();

        let g = k.cross_vjp(&z, &x, &k.cross_many(&z, &x), &kbar);
        assert_close(
            &format!("{name} cross params"),
            &g.params,
            &central_differences(&p0, |p| dot(&kbar, &k.with_log_params(p).cross(&z, &x))),
        );
        let gz: Vec<f64> = g.z.iter().copied().collect();
        assert_close(&format!("{name} cross Z"), &gz, &central_differences(&zflat, |v| dot(&kbar, &k.cross(&with_z(v), &x))));

        let g = k.gram_vjp(&z, &k.gram_many(&z), &kbar_sym);
        assert_close(
            &format!("{name} gram params"),
            &g.params,
            &central_differences(&p0, |p| dot(&kbar_sym, &k.with_log_params(p).gram(&z))),
        );
        let gz: Vec<f64> = g.z.iter().copied().collect();
        assert_close(&format!("{name} gram Z"), &gz, &central_differences(&zflat, |v| dot(&kbar_sym, &k.gram(&with_z(v)))));

        let g = k.diag_vjp(&x, &dbar);
        let f = |p: &[f64]| k.with_log_params(p).diag(&x).iter().zip(&dbar).map(|(a, b)| a * b).sum::<f64>();
        assert_close(&format!("{name} diag params"), &g, &central_differences(&p0, f));
    }
}

/// Translation invariance of the squared exponential far from the origin: with every input
/// moved by a common offset of 1e6 (near points, far from the origin, as raw years or
/// coordinates are), K(Z, X), K(Z, Z) and their reverse-mode gradients equal those at the
/// origin. The expansion of r^2 without the shift errs by about 1e-3 relative in K here.
#[test]
fn the_squared_exponential_is_translation_invariant_far_from_the_origin() {
    let mut rng = Pcg64::seed_from_u64(4);
    let (z, x) = (random(5, 3, &mut rng), random(7, 3, &mut rng));
    let (kbar, kbar_sym) = (random_mat(5, 7, false, &mut rng), random_mat(5, 5, true, &mut rng));
    let offset = ndarray::array![1e6, -3e6, 2e6];
    let (zf, xf) = (&z + &offset, &x + &offset);
    for k in [
        SqExp { log_variance: 0.3, log_lengthscales: vec![-0.2], learn_variance: true },
        SqExp { log_variance: -0.4, log_lengthscales: vec![0.1, -0.3, 0.5], learn_variance: true },
    ] {
        let close = |what: &str, a: &[f64], b: &[f64]| {
            for (a, b) in a.iter().zip(b) {
                assert!((a - b).abs() <= 1e-8 * (1.0 + a.abs()), "{what}: {a} at the origin, {b} far from it");
            }
        };
        let flat = |m: &Mat<f64>| (0..m.ncols()).flat_map(|j| (0..m.nrows()).map(move |i| m[(i, j)])).collect::<Vec<f64>>();
        let (kzx, kzx_far) = (k.cross_many(&z, &x), k.cross_many(&zf, &xf));
        close("K(Z, X)", &flat(&kzx), &flat(&kzx_far));
        close("K(Z, Z)", &flat(&k.gram_many(&z)), &flat(&k.gram_many(&zf)));
        let (g, g_far) = (k.cross_vjp(&z, &x, &kzx, &kbar), k.cross_vjp(&zf, &xf, &kzx_far, &kbar));
        close("cross_vjp params", &g.params, &g_far.params);
        close("cross_vjp Z", g.z.as_slice().unwrap(), g_far.z.as_slice().unwrap());
        let (kzz, kzz_far) = (k.gram_many(&z), k.gram_many(&zf));
        let (g, g_far) = (k.gram_vjp(&z, &kzz, &kbar_sym), k.gram_vjp(&zf, &kzz_far, &kbar_sym));
        close("gram_vjp params", &g.params, &g_far.params);
        close("gram_vjp Z", g.z.as_slice().unwrap(), g_far.z.as_slice().unwrap());
    }
}
