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
use crate::linalg::{col_slice, col_slice_mut, matmul_par};
use faer::Mat;
use ndarray::Array2;

/// What class c's gradient is computed from: its kernel, prior and q, its view of the block `x`
/// of rows, and the sweep's per-row scalars.
pub(crate) struct ClassTerms<'a> {
    pub kernel: &'a dyn Kernel,
    pub prior: &'a ClassPrior,
    pub post: &'a ClassPosterior,
    pub view: &'a ClassView<'a>,
    pub x: &'a Array2<f64>,
    pub g: &'a GradScalars,
    pub class: usize,
}

/// d log Z_q / d(class c's kernel log-parameters, Z^c) by eq. 10; `scale` multiplies the
/// likelihood part (N / |B| for a minibatch), not the prior part.
pub(crate) fn class_gradient(t: &ClassTerms, scale: f64) -> InputGrads {
    let ClassTerms { kernel, prior, post, view, x, g, class } = *t;
    let (m, n) = (prior.m(), x.nrows());
    let u = &view.rows.dirs;
    let ainv = view.ainv.as_ref().expect("a gradient needs a view built for it (ViewFor::Gradient)");
    // Column by column over slices (faer stores columns contiguously): P and W are formed per
    // entry and never stored. SEP has no stored directions; its A^{-1} k_o is a column of
    // zeros, kept in the sums so that every entry is the same expression as EP's.
    let zeros = vec![0.0; m];
    let mut kmn_bar = Mat::<f64>::zeros(m, n);
    let mut rr = Mat::<f64>::zeros(m, n);
    for j in 0..n {
        let (ga, ga_cm, gb, gb_cw) = (g.ga[(j, class)], g.ga_cm[(j, class)], g.gb[(j, class)], g.gb_cw[(j, class)]);
        let ko = ainv.ko.as_ref().map_or(&zeros[..], |k| col_slice(k, j));
        let (ak, uj) = (col_slice(&ainv.k, j), col_slice(u, j));
        let kbar = col_slice_mut(&mut kmn_bar, j);
        let rbar = col_slice_mut(&mut rr, j);
        for r in 0..m {
            let p = ga * view.beta[r] + ga_cm * ko[r];
            let w = gb * ak[r] + gb_cw * ko[r];
            kbar[r] = scale * (p + 2.0 * (w - gb * uj[r]));
            rbar[r] = scale * (0.5 * p + w - 0.5 * gb * uj[r]);
        }
    }
    let ur = matmul_par(u.as_ref(), rr.transpose());
    let prior_bar = prior_adjoint(prior, post);
    let kmm_bar = Mat::from_fn(m, m, |a, b| -(ur[(a, b)] + ur[(b, a)]) + prior_bar[(a, b)]);
    let knn_bar: Vec<f64> = (0..n).map(|j| scale * g.gb[(j, class)]).collect();
    kernel_vjps(kernel, prior, view, x, &kmm_bar, &kmn_bar, &knn_bar)
}

/// The prior part's adjoint in K, -M_c / 2 with M_c = K^{-1} - A^{-1} - beta beta^T (eqs.
/// 63-64): the inverses are adjoints here, never used to solve.
fn prior_adjoint(prior: &ClassPrior, post: &ClassPosterior) -> Mat<f64> {
    let m = prior.m();
    let eye = Mat::<f64>::identity(m, m);
    let k_inv = prior.chol.solve(eye.as_ref());
    let a_inv = post.a_chol.solve(eye.as_ref());
    Mat::from_fn(m, m, |a, b| -0.5 * (k_inv[(a, b)] - a_inv[(a, b)] - post.beta[a] * post.beta[b]))
}

/// The kernel's log-parameter and Z gradients from the adjoints of K(Z, Z), K(Z, X) and the
/// diagonal kappa(X).
fn kernel_vjps(
    kernel: &dyn Kernel,
    prior: &ClassPrior,
    view: &ClassView,
    x: &Array2<f64>,
    kmm_bar: &Mat<f64>,
    kmn_bar: &Mat<f64>,
    knn_bar: &[f64],
) -> InputGrads {
    let mut out = kernel.gram_vjp(&prior.z, &prior.kmm, kmm_bar);
    out.add(&kernel.cross_vjp(&prior.z, x, &view.rows.kmn, kmn_bar));
    for (o, d) in out.params.iter_mut().zip(kernel.diag_vjp(x, knn_bar)) {
        *o += d;
    }
    out
}

/// EP-inner-exact (Fig. 1): d log Z_q / d(class c's kernel log-parameters, Z^c) in full, the
/// sites held fixed in inducing-value space but the cavities and q moving with K (eq. 10 holds
/// them fixed). EP only (`view` from `ClassView::per_factor`), all rows.
///
/// log Z_q depends on class c through V = (K^{-1} + Sigma~)^{-1}, m = V mu~, the current
/// directions u_i = K^{-1} k_i and the FITC variances s_i = kappa_i - k_i^T u_i, via the
/// projections d_uu = u^T V u, d_uo = u^T V u_o, d_oo = u_o^T V u_o, t_u = u^T m, t_o = u_o^T m
/// (adjoints from `GradScalars`: gb, exact_uo, exact_oo, ga, exact_to; s_i's is gb) and the
/// prior part 1/2 log|V| + 1/2 mu~^T V mu~ - 1/2 log|K|. With dV = V K^{-1} dK K^{-1} V,
/// K^{-1} V = A^{-1} K, a_i = A^{-1} k_i and b_i = A^{-1} k_o,i (the view's), the adjoints are
///     Kbar  = sum_i [d_uu a a^T + d_uo sym(a b^T) + d_oo b b^T] + sym(mhat beta^T)
///             - sym(e_i u_i^T) + sum_i s_i u_i u_i^T - M_c / 2,   mhat = sum_i (t_u a + t_o b),
///     kbar_i = e_i - 2 s_i u_i,   e_i = 2 d_uu a_i + d_uo b_i + t_u beta   (= K^{-1} d/du_i),
///     kappabar_i = s_i,
/// with sym(X) = (X + X^T) / 2 and M_c as in `class_gradient` (the prior part: 1/2 A^{-1}
/// + 1/2 beta beta^T - 1/2 K^{-1}).
pub(crate) fn class_gradient_exact(t: &ClassTerms) -> InputGrads {
    let ClassTerms { kernel, prior, post, view, x, g, class } = *t;
    let (m, n) = (prior.m(), x.nrows());
    let ainv = view.ainv.as_ref().expect("a gradient needs a view built for it (ViewFor::Gradient)");
    let (u, a) = (&view.rows.dirs, &ainv.k);
    let b = ainv.ko.as_ref().expect("EP-inner-exact needs EP's per-factor view");
    let beta = &post.beta;
    let col = |arr: &Array2<f64>, j: usize| arr[(j, class)];
    let (d_uu, d_uo, d_oo, t_u, t_o) =
        (|j| col(&g.gb, j), |j| col(&g.exact_uo, j), |j| col(&g.exact_oo, j), |j| col(&g.ga, j), |j| col(&g.exact_to, j));
    // s_i enters log Z exactly as d_uu does (both add to the variance B), so its adjoint is g_b.
    let s_bar = d_uu;
    let e = Mat::from_fn(m, n, |r, j| 2.0 * d_uu(j) * a[(r, j)] + d_uo(j) * b[(r, j)] + t_u(j) * beta[r]);
    // One product [a | b | U diag(s) - E] [G1 | G2 | U]^T for the three rank-n sums, with
    // G1 = a diag(d_uu) + b diag(d_uo / 2) and G2 = a diag(d_uo / 2) + b diag(d_oo).
    let left = Mat::from_fn(m, 3 * n, |r, k| match k / n {
        0 => a[(r, k)],
        1 => b[(r, k - n)],
        _ => s_bar(k - 2 * n) * u[(r, k - 2 * n)] - e[(r, k - 2 * n)],
    });
    let right = Mat::from_fn(m, 3 * n, |r, k| match k / n {
        0 => d_uu(k) * a[(r, k)] + 0.5 * d_uo(k) * b[(r, k)],
        1 => 0.5 * d_uo(k - n) * a[(r, k - n)] + d_oo(k - n) * b[(r, k - n)],
        _ => u[(r, k - 2 * n)],
    });
    let sums = matmul_par(left.as_ref(), right.transpose());
    let mhat: Vec<f64> = (0..m).map(|r| (0..n).map(|j| t_u(j) * a[(r, j)] + t_o(j) * b[(r, j)]).sum()).collect();
    let prior_bar = prior_adjoint(prior, post);
    let kmm_bar =
        Mat::from_fn(m, m, |p, q| 0.5 * (sums[(p, q)] + sums[(q, p)]) + 0.5 * (mhat[p] * beta[q] + beta[p] * mhat[q]) + prior_bar[(p, q)]);
    let kmn_bar = Mat::from_fn(m, n, |r, j| e[(r, j)] - 2.0 * s_bar(j) * u[(r, j)]);
    let knn_bar: Vec<f64> = (0..n).map(s_bar).collect();
    kernel_vjps(kernel, prior, view, x, &kmm_bar, &kmn_bar, &knn_bar)
}
