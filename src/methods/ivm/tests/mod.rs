//! The IVM against mathematics (notes §9 R0), by part: `representation.rs` (the incremental
//! state, eq. 11 and the selection against dense algebra, the exact GP and quadrature),
//! `learning.rs` (the eq. 11-14 gradients, the hyper-prior and the major/minor schedule),
//! `extensions.rs` (end-to-end fits, c against the rest and virtual informative vectors).
//! Shared helpers live here.
use super::learn::{phi_grad, HyperPrior, Sites};
use super::select::{best_candidate, gain};
use super::state::{kernel_column, IvmState};
use super::*;
use crate::kernels::KernelParams;
use crate::likelihoods::univariate::CavityMoments;
use crate::linalg::Chol;
use crate::methods::{FitContext, FromSettings};
use crate::special::{d_log_normal_cdf, log_normal_cdf};
use faer::Mat;
use gauss_quad::legendre::GaussLegendre;
use ndarray::Axis;
use rand::SeedableRng;
use rand_distr::{Distribution, StandardNormal};
use rand_pcg::Pcg64;

fn kernel(yaml: &str, dim: usize) -> Box<dyn Kernel> {
    serde_norway::from_str::<KernelParams>(yaml).unwrap().kernel_set(dim, 2).unwrap().class(0).clone_box()
}

/// Two Gaussian blobs in 2-D, centres +-(sep, sep/2), class 1 on the positive side.
fn blobs(n: usize, sep: f64, seed: u64) -> (Array2<f64>, Vec<usize>) {
    let mut rng = Pcg64::seed_from_u64(seed);
    let mut x = Array2::zeros((n, 2));
    let y: Vec<usize> = (0..n).map(|i| i % 2).collect();
    for i in 0..n {
        let s = if y[i] == 1 { 1.0 } else { -1.0 };
        let e0: f64 = StandardNormal.sample(&mut rng);
        let e1: f64 = StandardNormal.sample(&mut rng);
        x[(i, 0)] = s * sep + 0.6 * e0;
        x[(i, 1)] = s * 0.5 * sep + 0.6 * e1;
    }
    (x, y)
}

fn signs(y: &[usize]) -> Vec<f64> {
    y.iter().map(|&c| if c == 1 { 1.0 } else { -1.0 }).collect()
}

fn ivm(settings: serde_json::Value) -> Ivm {
    IvmParams::from_settings(&settings).unwrap().check().unwrap()
}

fn close(what: &str, got: f64, want: f64, tol: f64) {
    assert!((got - want).abs() <= tol * (1.0 + want.abs()), "{what}: got {got}, want {want} (tol {tol})");
}

/// The dense posterior for active set I with sites (pi, b): A = K - K_{.,I} (Pi^{-1} + K_I)^{-1}
/// K_{I,.} and h = A_{.,I} b, by a Cholesky solve (no inverse of K).
fn dense_posterior(k: &Mat<f64>, active: &[usize], pi: &[f64], b: &[f64]) -> (Vec<f64>, Vec<f64>) {
    let (n, d) = (k.nrows(), active.len());
    let s = Mat::from_fn(d, d, |r, c| k[(active[r], active[c])] + if r == c { 1.0 / pi[r] } else { 0.0 });
    let chol = Chol::factor(s.as_ref(), "Pi^-1 + K_I").unwrap();
    let kin = Mat::from_fn(d, n, |r, j| k[(active[r], j)]);
    let w = chol.solve(kin.as_ref()); // (Pi^-1 + K_I)^-1 K_{I,.}
    let a_full = Mat::from_fn(n, n, |i, j| k[(i, j)] - (0..d).map(|r| kin[(r, i)] * w[(r, j)]).sum::<f64>());
    let h = (0..n).map(|i| (0..d).map(|r| a_full[(i, active[r])] * b[r]).sum()).collect();
    let a = (0..n).map(|i| a_full[(i, i)]).collect();
    (h, a)
}

/// An RBF, an ARD and a sum with linear and white-noise terms (whose kernel column carries the
/// noise on the diagonal only): the kernels the representation and gradient tests run on.
const THREE_KERNELS: [&str; 3] = [
    "{ lengthscale: 0.9, variance: 2.0 }",
    "{ ard: true, lengthscale: [0.7, 1.6], variance: 1.3 }",
    "{ type: sum, terms: [ { lengthscale: 1.1, variance: 1.5 }, { type: linear, variance: 0.4 }, { type: white, variance: 0.05 } ] }",
];

mod extensions;
mod learning;
mod representation;

/// Log of N(y | 0, S) by a Cholesky factor of S.
fn log_gaussian(y: &[f64], s: &Mat<f64>) -> f64 {
    let chol = Chol::factor(s.as_ref(), "covariance").unwrap();
    let w = chol.solve_vec(y);
    -0.5 * y.iter().zip(&w).map(|(a, b)| a * b).sum::<f64>() - 0.5 * chol.log_det() - y.len() as f64 * crate::special::LN_SQRT_2PI
}

fn fit_learned(
    settings: serde_json::Value,
    x: &Array2<f64>,
    y: &[usize],
    kernel_yaml: &str,
) -> (Box<dyn Fitted>, Vec<crate::results::TracePoint>) {
    let kernels = serde_norway::from_str::<KernelParams>(kernel_yaml).unwrap().kernel_set(2, 2).unwrap();
    let mut rng = Pcg64::seed_from_u64(4);
    let mut ctx = FitContext::new(&mut rng, None);
    let model = ivm(settings).fit(&Problem { x, y, n_classes: 2 }, &kernels, HyperPolicy::Learn, &mut ctx).unwrap();
    (model, ctx.trace())
}

fn trace_values(trace: &[crate::results::TracePoint], name: &str) -> Vec<f64> {
    trace.iter().filter(|t| t.name == name).map(|t| t.value).collect()
}
