//! The gradient of log Z_q (eq. 10) with respect to the kernels' log-parameters and the
//! inducing inputs, the sites held fixed: the prior term -1/2 tr(M_c dK_c) and the direct
//! dependence of every factor's log Z on k_i, K and kappa_i with its cavity held fixed in
//! inducing-value space (notes §2.8). Written in adjoint form, so the kernels' vector-Jacobian
//! products give every parameter's derivative (and Z's) at once.
//!
//! For one side of a factor on class c, with u = K^{-1} k_i, p = K^{-1} m\ , w = K^{-1} V\ u,
//! a = u^T m\ and b = s_i + u^T V\ u:
//!     da/dk = p,            da/dK = -(u p^T + p u^T) / 2
//!     db/dk = 2 (w - u),    db/dK = u u^T - u w^T - w u^T,    db/dkappa = 1
//! and log Z depends on a through g_a = +-beta / sqrt(B), on b through g_b = -beta alpha / (2B).
//! With P = sum g_a p and W = sum g_b w over the factors touching (i, c), the adjoints are
//!     Kbar(Z, x_i) = P + 2 (W - G_b u),   Kbar(Z, Z) = -(U R^T + R U^T),  R = P/2 + W - U G_b / 2,
//! summed over the rows, plus -M_c / 2 with M_c = K^{-1} - A^{-1} - beta beta^T for the prior.
use super::sparse::{ClassPosterior, ClassPrior};
use super::sweep::{ClassView, GradScalars};
use crate::kernels::{InputGrads, Kernel};
use crate::linalg::matmul_par;
use faer::Mat;
use ndarray::Array2;

/// d log Z_q / d(class c's kernel log-parameters, Z^c) from the block `x` of rows seen in `view`;
/// `scale` multiplies the likelihood part (N / |B| for a minibatch), not the prior part.
#[allow(clippy::too_many_arguments)]
pub(crate) fn class_gradient(
    kernel: &dyn Kernel,
    prior: &ClassPrior,
    post: &ClassPosterior,
    view: &ClassView,
    x: &Array2<f64>,
    g: &GradScalars,
    class: usize,
    scale: f64,
) -> InputGrads {
    let (m, n) = (prior.m(), x.nrows());
    let u = &view.rows.dirs;
    let col = |a: &Array2<f64>, j: usize| a[(j, class)];
    let ko = |r: usize, j: usize| view.ainv_ko.as_ref().map_or(0.0, |k| k[(r, j)]);
    let p = Mat::from_fn(m, n, |r, j| col(&g.ga, j) * view.beta[r] + col(&g.ga_cm, j) * ko(r, j));
    let w = Mat::from_fn(m, n, |r, j| col(&g.gb, j) * view.ainv_k[(r, j)] + col(&g.gb_cw, j) * ko(r, j));
    let kmn_bar = Mat::from_fn(m, n, |r, j| scale * (p[(r, j)] + 2.0 * (w[(r, j)] - col(&g.gb, j) * u[(r, j)])));
    let rr = Mat::from_fn(m, n, |r, j| scale * (0.5 * p[(r, j)] + w[(r, j)] - 0.5 * col(&g.gb, j) * u[(r, j)]));
    let ur = matmul_par(u.as_ref(), rr.transpose());
    // The prior's M_c = K^{-1} - A^{-1} - beta beta^T: an adjoint, never used to solve.
    let eye = Mat::<f64>::identity(m, m);
    let k_inv = prior.chol.solve(eye.as_ref());
    let a_inv = post.a_chol.solve(eye.as_ref());
    let kmm_bar =
        Mat::from_fn(m, m, |a, b| -(ur[(a, b)] + ur[(b, a)]) - 0.5 * (k_inv[(a, b)] - a_inv[(a, b)] - post.beta[a] * post.beta[b]));
    let knn_bar: Vec<f64> = (0..n).map(|j| scale * col(&g.gb, j)).collect();
    let mut out = kernel.gram_vjp(&prior.z, &prior.kmm, &kmm_bar);
    out.add(&kernel.cross_vjp(&prior.z, x, &view.rows.kmn, &kmn_bar));
    for (o, d) in out.params.iter_mut().zip(kernel.diag_vjp(x, &knn_bar)) {
        *o += d;
    }
    out
}
