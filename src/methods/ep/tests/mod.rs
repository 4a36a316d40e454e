//! EP and SEP against mathematics (the notes' checklist item 1): the cavity projections and
//! the closed-form log s~ against dense inversion, the new q against the tilted moments by
//! quadrature, log Z_q at the prior, the gradient against finite differences of the objective
//! with the sites and cavities frozen and, at convergence, of log Z_q itself, EP's log Z_q and
//! predictive against brute-force integration of the same model and converged EP against a
//! dense sequential EP, SEP close to EP (and equal to it with one factor per class), SEP's
//! factor counts, minibatch refinement (rebuilt from quadrature) and positive semi-definite tied
//! sites, and SEP's memory independent of N.
use super::sparse::{ClassPosterior, ClassPrior};
use super::state::State;
use super::sweep::{Proj, ViewFor};
use super::EpParams;
use crate::kernels::KernelSet;
use crate::linalg::Chol;
use crate::methods::{FitContext, HyperPolicy, Problem};
use crate::special::{log_normal_cdf, normal_cdf};
use crate::testing::{assert_gradient_close, central_differences, se_ard_plus_white};
use faer::Mat;
use ndarray::Array2;
use rand::{RngExt, SeedableRng};
use rand_pcg::Pcg64;

mod gradient;
mod oracles;
mod sites;
mod training;

fn toy(n: usize, d: usize, c: usize, seed: u64) -> (Array2<f64>, Vec<usize>) {
    let mut rng = Pcg64::seed_from_u64(seed);
    let x = Array2::from_shape_fn((n, d), |_| rng.random_range(-2.0..2.0));
    // Classes by the nearest of c centres, so the problem is learnable.
    let centres = Array2::from_shape_fn((c, d), |(k, j)| if j == 0 { -1.5 + 3.0 * k as f64 / (c - 1) as f64 } else { 0.0 });
    let y = (0..n)
        .map(|i| {
            (0..c)
                .min_by(|&a, &b| {
                    let da: f64 = (0..d).map(|j| (x[(i, j)] - centres[(a, j)]).powi(2)).sum();
                    let db: f64 = (0..d).map(|j| (x[(i, j)] - centres[(b, j)]).powi(2)).sum();
                    da.total_cmp(&db)
                })
                .unwrap()
        })
        .collect();
    (x, y)
}

fn inverse(a: &Mat<f64>) -> Mat<f64> {
    Chol::factor(a.as_ref(), "test").unwrap().solve(Mat::<f64>::identity(a.nrows(), a.nrows()).as_ref())
}

fn quad(u: &[f64], a: &Mat<f64>, v: &[f64]) -> f64 {
    (0..u.len()).map(|i| (0..v.len()).map(|j| u[i] * a[(i, j)] * v[j]).sum::<f64>()).sum()
}

fn rand_spd(m: usize, rng: &mut Pcg64) -> Mat<f64> {
    let b = Mat::from_fn(m, m, |_, _| rng.random_range(-1.0..1.0));
    let mut a = &b * b.transpose();
    for i in 0..m {
        a[(i, i)] += 0.5;
    }
    a
}

/// Class c's prior at the rows of x straight from its kernel (not from `PriorRows`): K(Z, Z),
/// the site directions u_i = K^{-1} k(Z, x_i) and the FITC variances kappa_i - k_i^T u_i.
struct DenseRows {
    k: Mat<f64>,
    dirs: Vec<Vec<f64>>,
    fitc_var: Vec<f64>,
}

fn dense_rows(kern: &dyn crate::kernels::Kernel, z: &Array2<f64>, x: &Array2<f64>) -> DenseRows {
    let k = kern.gram_many(z);
    let kinv = inverse(&k);
    let kmn = kern.cross_many(z, x);
    let kappa = kern.diag(x);
    let (mut dirs, mut fitc_var) = (Vec::new(), Vec::new());
    for i in 0..x.nrows() {
        let ki: Vec<f64> = (0..z.nrows()).map(|a| kmn[(a, i)]).collect();
        let u = mat_vec(&kinv, &ki);
        fitc_var.push(kappa[i] - dot(&ki, &u));
        dirs.push(u);
    }
    DenseRows { k, dirs, fitc_var }
}

fn mat_vec(a: &Mat<f64>, v: &[f64]) -> Vec<f64> {
    (0..a.nrows()).map(|i| (0..v.len()).map(|j| a[(i, j)] * v[j]).sum()).collect()
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// a + w u u^T.
fn plus_rank_one(a: &Mat<f64>, w: f64, u: &[f64]) -> Mat<f64> {
    Mat::from_fn(a.nrows(), a.ncols(), |i, j| a[(i, j)] + w * u[i] * u[j])
}

/// 1/2 h^T Lambda^{-1} h - 1/2 log|Lambda|: log of the integral of exp(-1/2 f^T Lambda f + h^T f)
/// up to its (2 pi)^{M/2}.
fn log_gaussian_integral(lam: &Mat<f64>, h: &[f64]) -> f64 {
    0.5 * quad(h, &inverse(lam), h) - 0.5 * Chol::factor(lam.as_ref(), "t").unwrap().log_det()
}

/// The tilted distribution of one factor, N(z_y; a_y, d_y) N(z_k; a_k, d_k) Phi((z_y - z_k) / sqrt(s)):
/// log Z and the means and variances of z_y (index 0) and z_k (index 1), by a 2-D trapezoid rule
/// over +-10 cavity standard deviations (the integrand is analytic and decays like a Gaussian,
/// so the rule is accurate far past the tests' 1e-7).
struct TiltedPair {
    log_z: f64,
    mean: [f64; 2],
    var: [f64; 2],
}

fn tilted_pair(a: [f64; 2], d: [f64; 2], s: f64) -> TiltedPair {
    let n = 1201;
    let h = 20.0 / (n - 1) as f64;
    let (mut z, mut e, mut e2) = (0.0, [0.0; 2], [0.0; 2]);
    for i in 0..n {
        let u = -10.0 + i as f64 * h;
        for j in 0..n {
            let v = -10.0 + j as f64 * h;
            let f = [a[0] + d[0].sqrt() * u, a[1] + d[1].sqrt() * v];
            let w = (-0.5 * (u * u + v * v)).exp() * normal_cdf((f[0] - f[1]) / s.sqrt());
            z += w;
            for c in 0..2 {
                e[c] += w * f[c];
                e2[c] += w * f[c] * f[c];
            }
        }
    }
    let mean = [e[0] / z, e[1] / z];
    TiltedPair {
        log_z: (z * h * h / (2.0 * std::f64::consts::PI)).ln(),
        mean,
        var: [e2[0] / z - mean[0] * mean[0], e2[1] / z - mean[1] * mean[1]],
    }
}

/// The objective whose gradient eq. 10 is, with the sites and every factor's cavity frozen in
/// inducing-value space at the current state: sum_c [g(theta_c) - g(theta_prior,c)] at theta
/// plus sum over factors of log Z(theta; cavity frozen). Dense, for tests.
/// A cavity (m\, V\) in inducing-value space.
type DenseCavity = (Vec<f64>, Mat<f64>);

/// EP (or, tied, SEP) on the 10-row toy problem with the SE-ARD + white kernels, inducing
/// inputs at rows k..k + 3 for class k, after three damped sweeps over every row: sites on every
/// row, not yet at the fixed point.
fn three_sweeps(x: &Array2<f64>, y: &[usize], tied: bool) -> State {
    let zs = (0..3).map(|k| x.slice(ndarray::s![k..k + 3, ..]).to_owned()).collect();
    let mut state = State::new(se_ard_plus_white(2, 3, 0.4), zs, tied, y).unwrap();
    let all: Vec<usize> = (0..y.len()).collect();
    for _ in 0..3 {
        state.refine(&state.block(x, y, &all), 0.7, ViewFor::Sweep).unwrap();
    }
    state
}

fn dense_posterior(prior: &ClassPrior, post: &ClassPosterior) -> (Vec<f64>, Mat<f64>) {
    let k = prior.k();
    let ainv = inverse(&post.a_chol.reconstruct());
    let v = k * &ainv * k;
    let m = (0..k.nrows()).map(|i| (0..k.nrows()).map(|j| k[(i, j)] * post.beta[j]).sum()).collect();
    (m, v)
}

/// Batch EP with fixed kernels and Z to convergence (plain damping 0.5).
fn converge(state: &mut State, x: &Array2<f64>, y: &[usize], iters: usize) {
    let all: Vec<usize> = (0..y.len()).collect();
    for _ in 0..iters {
        state.refine(&state.block(x, y, &all), 0.5, ViewFor::Sweep).unwrap();
    }
}
