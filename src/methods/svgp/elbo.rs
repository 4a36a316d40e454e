//! The ELBO of a block of rows and its reverse-mode gradients (whitened parameterisation):
//!     ELBO = scale sum_n E_q[log p(y_n | f_n)] - sum_c KL(q(v^c) || N(0, I)),
//! q(f_n^c) = N(a_n^T m_c, k_nn - a_n^T a_n + a_n^T S_c a_n), A = L^{-1} K(Z, X), Kmm = L L^T.
//! With scale = N / |B| a minibatch gives an unbiased estimate of the full-data ELBO.
//!
//! Gradients: g_m = A g_mu and g_S = A diag(g_var) A^T for q; for the kernels and Z,
//! Abar = sum_c m_c g_mu^T + 2 (S_c A - A) diag(g_var), then Kmn_bar = L^{-T} Abar,
//! Lbar = -tril(Kmn_bar A^T), Kmm_bar by the Cholesky reverse mode, and each kernel's
//! vector-Jacobian products with K(Z, Z), K(Z, X) and diag K(X, X).
use super::model::{Marginals, Sparse};
use super::SvgpLikelihood;
use crate::kernels::InputGrads;
use crate::likelihoods::marginal::ExpectedLogLik;
use crate::linalg::{col_slice, col_slice_mut, matmul_par};
use crate::scalable::projection::lbar_holding_u;
use faer::Mat;
use ndarray::Array2;
use rand_pcg::Pcg64;

/// Which gradients a call needs.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Wants {
    /// g_m and g_S of each class (natural gradients, or the Adam parameterisation).
    pub q: bool,
    /// Kernel log-parameters and Z.
    pub inputs: bool,
    /// With `inputs` and q(u) held fixed (unwhitened), this block's input gradients carry the
    /// KL's share too: set it on exactly one block of an objective (a minibatch step's one
    /// call; the first of the full-data blocks), since the KL is counted once, not per block.
    pub kl: bool,
}

pub(crate) struct BlockGrads {
    /// sum_n E[log p(y_n | f_n)] over the block (unscaled).
    pub ell: f64,
    /// Per class, of scale * ell.
    pub g_m: Vec<Vec<f64>>,
    pub g_s: Vec<Mat<f64>>,
    /// Of scale * ell w.r.t. the kernel set's log-parameters and Z (the KL of the whitened
    /// posterior depends on neither); unwhitened (`Sparse::whiten` false), of
    /// scale * ell at fixed q(u), minus the KL where `Wants::kl`.
    pub inputs: Option<InputGrads>,
}

/// E[log lik] of a block of rows and the gradients asked for (a Monte Carlo likelihood draws
/// from `rng`).
pub(crate) fn block(
    sparse: &Sparse,
    x: &Array2<f64>,
    y: &[usize],
    lik: &SvgpLikelihood,
    rng: &mut Pcg64,
    scale: f64,
    wants: Wants,
) -> BlockGrads {
    let mg = sparse.marginals(x);
    let (n, c) = mg.mean.dim();
    let per_row: Vec<ExpectedLogLik> = (0..n)
        .map(|j| lik.expected_log_lik(mg.mean.row(j).as_slice().expect("row"), mg.var.row(j).as_slice().expect("row"), y[j], rng))
        .collect();
    let ell = per_row.iter().map(|r| r.value).sum();
    let mut out = BlockGrads { ell, g_m: Vec::new(), g_s: Vec::new(), inputs: None };
    if !(wants.q || wants.inputs) {
        return out;
    }
    // Holding q(u) fixed, the kernel and Z gradients need the q gradients too.
    let fixed_u = wants.inputs && !sparse.whiten;
    let gmu = |class: usize| -> Vec<f64> { per_row.iter().map(|r| scale * r.d_mean[class]).collect() };
    let gvar = |class: usize| -> Vec<f64> { per_row.iter().map(|r| scale * r.d_var[class]).collect() };
    let m = sparse.m();
    let n_kernels = sparse.chols.len();
    let mut abar: Vec<Mat<f64>> = if wants.inputs { (0..n_kernels).map(|_| Mat::zeros(m, n)).collect() } else { Vec::new() };
    let mut knn_bar: Vec<Vec<f64>> = vec![vec![0.0; n]; n_kernels];
    for class in 0..c {
        let k = sparse.kernel_of(class);
        let a = &mg.blocks[k].a;
        let (gm, gv) = (gmu(class), gvar(class));
        // The element-wise passes run down A's columns on slices (through faer's bounds-checked
        // indexing they took about 7% of an evaluation at satimage's sizes). Each entry sees the
        // same operations in the same order as the row-wise definitions (bit for bit).
        if wants.q || fixed_u {
            // g_m = A g_mu, accumulated column by column from -0.0 (where f64's `sum` starts).
            let mut g_m = vec![-0.0; m];
            for (j, g) in gm.iter().enumerate() {
                g_m.iter_mut().zip(col_slice(a, j)).for_each(|(o, x)| *o += x * g);
            }
            out.g_m.push(g_m);
            let mut ad = a.clone();
            for (j, g) in gv.iter().enumerate() {
                col_slice_mut(&mut ad, j).iter_mut().for_each(|x| *x *= g);
            }
            out.g_s.push(matmul_par(ad.as_ref(), a.transpose()));
        }
        if wants.inputs {
            let mean = sparse.q[class].mean();
            let sa = &mg.sa[class];
            let ab = &mut abar[k];
            for j in 0..n {
                let (gmj, gvj) = (gm[j], gv[j]);
                let col = col_slice_mut(ab, j);
                for (i, ((o, s), x)) in col.iter_mut().zip(col_slice(sa, j)).zip(col_slice(a, j)).enumerate() {
                    *o += mean[i] * gmj + 2.0 * (s - x) * gvj;
                }
            }
            knn_bar[k].iter_mut().zip(&gv).for_each(|(b, g)| *b += g);
        }
    }
    if wants.inputs {
        let lbar_q = fixed_u.then(|| lbar_of_fixed_u(sparse, &out.g_m, &out.g_s, wants.kl));
        out.inputs = Some(input_grads(sparse, x, &mg, &abar, &knn_bar, lbar_q.as_deref()));
    }
    out
}

/// With q(u) held fixed, q(v) moves with L: each class adds
/// `scalable::projection::lbar_holding_u` to its kernel's L adjoint.
fn lbar_of_fixed_u(sparse: &Sparse, g_m: &[Vec<f64>], g_s: &[Mat<f64>], with_kl: bool) -> Vec<Mat<f64>> {
    let m = sparse.m();
    let mut sums: Vec<Mat<f64>> = (0..sparse.chols.len()).map(|_| Mat::zeros(m, m)).collect();
    for (class, q) in sparse.q.iter().enumerate() {
        let k = sparse.kernel_of(class);
        sums[k] += lbar_holding_u(&sparse.chols[k], q.mean(), &q.covariance(), &g_m[class], &g_s[class], with_kl);
    }
    sums
}

/// Kernel-parameter and Z gradients from Abar and knn_bar of each kernel.
fn input_grads(
    sparse: &Sparse,
    x: &Array2<f64>,
    mg: &Marginals,
    abar: &[Mat<f64>],
    knn_bar: &[Vec<f64>],
    lbar_q: Option<&[Mat<f64>]>,
) -> InputGrads {
    // Each prior's gradient goes to its kernel's parameters (summed where the kernel is shared)
    // and to its Z (summed where Z is shared); the Z sets are stacked in order.
    let mut params = vec![0.0; sparse.kernels.n_params()];
    let m = sparse.m();
    let mut gz = Array2::zeros((sparse.zs.len() * m, sparse.zs[0].ncols()));
    for p in 0..sparse.chols.len() {
        let (kern, chol, blk, zi) = (sparse.prior_kernel(p), &sparse.chols[p], &mg.blocks[p], sparse.prior_z(p));
        let z = &sparse.zs[zi];
        let kmn_bar = chol.solve_lt_par(abar[p].as_ref());
        let prod = matmul_par(kmn_bar.as_ref(), blk.a.transpose());
        let lbar = Mat::from_fn(m, m, |i, j| match lbar_q {
            _ if i < j => 0.0,
            Some(extra) => extra[p][(i, j)] - prod[(i, j)],
            None => -prod[(i, j)],
        });
        let kmm_bar = chol.backprop(lbar.as_ref());
        let mut g = kern.gram_vjp(z, &sparse.kmms[p], &kmm_bar);
        g.add(&kern.cross_vjp(z, x, &blk.kmn, &kmn_bar));
        for (q, d) in g.params.iter_mut().zip(kern.diag_vjp(x, &knn_bar[p])) {
            *q += d;
        }
        sparse.kernels.add_class_gradient(&mut params, p, &g.params);
        let mut rows = gz.slice_mut(ndarray::s![zi * m..(zi + 1) * m, ..]);
        rows += &g.z;
    }
    InputGrads { params, z: gz }
}

/// The full-data ELBO, block by block (for checkpoints and the evidence).
pub(crate) fn full_elbo(sparse: &Sparse, x: &Array2<f64>, y: &[usize], lik: &SvgpLikelihood, rng: &mut Pcg64) -> f64 {
    let mut ell = 0.0;
    for start in (0..x.nrows()).step_by(super::model::BLOCK_ROWS) {
        let end = (start + super::model::BLOCK_ROWS).min(x.nrows());
        let xb = x.slice(ndarray::s![start..end, ..]).to_owned();
        ell += block(sparse, &xb, &y[start..end], lik, rng, 1.0, Wants::default()).ell;
    }
    ell - sparse.q.iter().map(|q| q.kl()).sum::<f64>()
}
