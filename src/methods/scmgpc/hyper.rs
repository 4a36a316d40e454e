//! The gradient of the ELBO with respect to the kernels' log-parameters, local parameters and
//! q(v) held fixed, in adjoint (reverse-mode) form as svgp's: one pass per class gives the
//! adjoints of K(Z, X), K(Z, Z) and diag K(X, X), and the kernels' vector-Jacobian products
//! turn them into all D + 1 parameter derivatives at once (O(|S| M + M^2) per parameter), never
//! one re-evaluation per parameter. The part of the ELBO that depends on the kernels is
//!     L_h = s sum_{i in S} sum_c [ r_i^c m_i^c / 2 - w_i^c (v_i^c + (m_i^c)^2) / 2 ],
//! with m = a^T mu, v = k(x, x) + jitter - a^T a + a^T S a, a = L^{-1} k(Z, x); the KL of
//! q(v) against N(0, I) does not depend on them while q(v) is held fixed, but does when q(u)
//! is (`hold_u`, the default: then q(v) = L^{-1} q(u) moves with L). The same pass gives the
//! gradient with respect to every class's inducing inputs Z^c (`learn_inducing`): the kernels'
//! VJPs return it alongside the parameters'.
use super::local::Local;
use super::model::{mm, Marginals, Sparse};
use crate::scalable::projection::lbar_holding_u;
use ndarray::Array2;

/// L_h of a block of rows (the finite-difference test's objective).
#[cfg(test)]
pub(crate) fn objective(sparse: &Sparse, x: &Array2<f64>, y: &[usize], locals: &[Local], scale: f64) -> f64 {
    let mg = sparse.marginals(x);
    let mut total = 0.0;
    for (j, l) in locals.iter().enumerate() {
        for c in 0..sparse.n_classes() {
            let (m, v) = (mg.mean[(j, c)], mg.var[(j, c)]);
            total += 0.5 * l.resid(c, y[j]) * m - 0.5 * l.weight(c, y[j]) * (v + m * m);
        }
    }
    scale * total
}

/// The gradient of L_h (or L_h - KL): with respect to the kernel set's log-parameters (in
/// `log_params` order) and to each class's inducing inputs.
pub(crate) struct HyperGradient {
    pub params: Vec<f64>,
    pub z: Vec<Array2<f64>>,
}

impl HyperGradient {
    pub fn is_finite(&self) -> bool {
        self.params.iter().chain(self.z.iter().flatten()).all(|v| v.is_finite())
    }
}

/// dL_h / d(log-parameters) and dL_h / dZ^c from the marginals `mg` of the rows `x` under the
/// current q; with `hold_u`, of L_h - KL with q(u) held fixed (the authors' objective, notes
/// §5.3), which adds `lbar_holding_u` to each class's L adjoint.
pub(crate) fn gradient(
    sparse: &Sparse,
    x: &Array2<f64>,
    y: &[usize],
    mg: &Marginals,
    locals: &[Local],
    scale: f64,
    hold_u: bool,
) -> HyperGradient {
    let n = x.nrows();
    let mut out = vec![0.0; sparse.kernels.n_params()];
    let mut z = Vec::with_capacity(sparse.n_classes());
    for c in 0..sparse.n_classes() {
        let g = &sparse.classes[c];
        let blk = &mg.blocks[c];
        let mu = g.q.mean();
        let m = blk.a.nrows();
        // dL_h/dm_j and dL_h/dv_j.
        let gmu: Vec<f64> =
            (0..n).map(|j| scale * (0.5 * locals[j].resid(c, y[j]) - locals[j].weight(c, y[j]) * mg.mean[(j, c)])).collect();
        let gvar: Vec<f64> = (0..n).map(|j| -0.5 * scale * locals[j].weight(c, y[j])).collect();
        // dL/dA = mu gmu^T + 2 (S A - A) diag(gvar); A = L^{-1} Kmn gives Kmn_bar = L^{-T} A_bar
        // and L_bar = -tril(Kmn_bar A^T); the Cholesky reverse mode gives Kmm_bar.
        let abar = faer::Mat::from_fn(m, n, |i, j| mu[i] * gmu[j] + 2.0 * (blk.sa[(i, j)] - blk.a[(i, j)]) * gvar[j]);
        let kmn_bar = g.chol.solve_lt_par(abar.as_ref());
        let prod = mm(kmn_bar.as_ref(), blk.a.transpose());
        let mut lbar = faer::Mat::from_fn(m, m, |i, j| if i >= j { -prod[(i, j)] } else { 0.0 });
        if hold_u {
            // g_m = A gmu and g_S = A diag(gvar) A^T: the q(v) gradients of L_h.
            let g_m: Vec<f64> = (0..m).map(|i| (0..n).map(|j| blk.a[(i, j)] * gmu[j]).sum()).collect();
            let ad = faer::Mat::from_fn(m, n, |i, j| blk.a[(i, j)] * gvar[j]);
            let g_s = mm(ad.as_ref(), blk.a.transpose());
            lbar += lbar_holding_u(&g.chol, mu, &g.q.covariance(), &g_m, &g_s, true);
        }
        let kmm_bar = g.chol.backprop(lbar.as_ref());
        let kern = sparse.kernel(c);
        let mut gr = kern.gram_vjp(&g.z, &g.kmm, &kmm_bar);
        gr.add(&kern.cross_vjp(&g.z, x, &blk.kmn, &kmn_bar));
        let diag = kern.diag_vjp(x, &gvar);
        let total: Vec<f64> = gr.params.iter().zip(diag).map(|(p, d)| p + d).collect();
        sparse.kernels.add_class_gradient(&mut out, c, &total);
        z.push(gr.z);
    }
    HyperGradient { params: out, z }
}
