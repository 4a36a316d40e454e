//! The squared-exponential kernel
//!     k(x, x') = s2 exp(-1/2 sum_d (x_d - x'_d)^2 / l_d^2)
//! with one shared (isotropic) or one per-dimension (ARD) length-scale and a signal
//! variance s2. Parameters live in log space: `[log s2, log l_1, ..., log l_L]`.
use super::{view, InputGrads, Kernel};
use faer::linalg::matmul::matmul;
use faer::{Accum, Mat};
use ndarray::{Array2, ArrayView1};
use serde::{Deserialize, Serialize};

/// Squared-exponential kernel with log-space parameters
/// `[log s2, log l_1, ..., log l_L]` (L = 1 isotropic, L = d ARD).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SqExp {
    pub log_variance: f64,
    pub log_lengthscales: Vec<f64>,
    pub learn_variance: bool,
}

impl SqExp {
    pub fn is_ard(&self) -> bool {
        self.log_lengthscales.len() > 1
    }

    pub fn n_params(&self) -> usize {
        1 + self.log_lengthscales.len()
    }

    /// All log-parameters: `[log s2, log l...]`.
    pub fn log_params(&self) -> Vec<f64> {
        std::iter::once(self.log_variance).chain(self.log_lengthscales.iter().copied()).collect()
    }

    /// The same kernel with new log-parameters (same layout as `log_params`).
    pub fn with_log_params(&self, p: &[f64]) -> SqExp {
        assert_eq!(p.len(), self.n_params(), "kernel parameter vector length");
        SqExp { log_variance: p[0], log_lengthscales: p[1..].to_vec(), learn_variance: self.learn_variance }
    }

    /// Which log-parameters hyper-parameter learning may change.
    pub fn free_mask(&self) -> Vec<bool> {
        std::iter::once(self.learn_variance).chain(self.log_lengthscales.iter().map(|_| true)).collect()
    }

    /// Names, in `log_params` order: `variance`, `lengthscale` or `lengthscale_1..d`.
    pub fn param_names(&self) -> Vec<String> {
        let mut names = vec!["variance".to_string()];
        if self.is_ard() {
            names.extend((1..=self.log_lengthscales.len()).map(|i| format!("lengthscale_{i}")));
        } else {
            names.push("lengthscale".into());
        }
        names
    }

    /// (name, value in natural units) pairs.
    pub fn natural_params(&self) -> Vec<(String, f64)> {
        self.param_names().into_iter().zip(self.log_params().into_iter().map(f64::exp)).collect()
    }

    fn inv_sq_lengthscale(&self, d: usize) -> Vec<f64> {
        (0..d)
            .map(|k| {
                let l = if self.is_ard() { self.log_lengthscales[k] } else { self.log_lengthscales[0] };
                (-2.0 * l).exp()
            })
            .collect()
    }

    fn scaled_sq_dist(&self, a: ArrayView1<f64>, b: ArrayView1<f64>, w: &[f64]) -> f64 {
        a.iter().zip(b.iter()).zip(w).map(|((x, y), w)| w * (x - y) * (x - y)).sum()
    }

    /// K(X1, X2), [n1, n2].
    pub fn cross(&self, x1: &Array2<f64>, x2: &Array2<f64>) -> Mat<f64> {
        assert_eq!(x1.ncols(), x2.ncols(), "kernel inputs of different dimension");
        if !self.is_ard() {
            assert!(!self.log_lengthscales.is_empty());
        } else {
            assert_eq!(self.log_lengthscales.len(), x1.ncols(), "ARD length-scales vs input dimension");
        }
        let w = self.inv_sq_lengthscale(x1.ncols());
        let s2 = self.log_variance.exp();
        Mat::from_fn(x1.nrows(), x2.nrows(), |i, j| s2 * (-0.5 * self.scaled_sq_dist(x1.row(i), x2.row(j), &w)).exp())
    }

    /// K(X, X), [n, n], exactly symmetric.
    pub fn gram(&self, x: &Array2<f64>) -> Mat<f64> {
        let mut k = self.cross(x, x);
        super::symmetrise_from_lower(&mut k);
        k
    }

    /// k(x, x) for each row: the signal variance.
    pub fn diag(&self, x: &Array2<f64>) -> Vec<f64> {
        vec![self.log_variance.exp(); x.nrows()]
    }

    /// dK/d(log-parameter j) for every parameter, in `log_params` order, given K = gram(x).
    pub fn gram_grads(&self, x: &Array2<f64>, k: &Mat<f64>) -> Vec<Mat<f64>> {
        let n = x.nrows();
        let d = x.ncols();
        let w = self.inv_sq_lengthscale(d);
        let mut grads = vec![k.clone()]; // d/dlog s2 K = K
        if self.is_ard() {
            for dim in 0..d {
                grads.push(Mat::from_fn(n, n, |i, j| {
                    let diff = x[(i, dim)] - x[(j, dim)];
                    k[(i, j)] * diff * diff * w[dim]
                }));
            }
        } else {
            grads.push(Mat::from_fn(n, n, |i, j| k[(i, j)] * self.scaled_sq_dist(x.row(i), x.row(j), &w)));
        }
        grads
    }
}

/// The input-gradient side (sparse methods): K(Z, X) by one matrix product and the
/// reverse-mode gradients w.r.t. the log-parameters and Z.
impl SqExp {
    /// w_d = 1 / l_d^2 for each of `d` inputs.
    fn weights(&self, d: usize) -> Vec<f64> {
        if self.is_ard() {
            assert_eq!(self.log_lengthscales.len(), d, "ARD length-scales vs input dimension");
        }
        self.inv_sq_lengthscale(d)
    }

    /// K(Z, X) = s2 exp(-(|z~|^2 + |x~|^2 - 2 z~ . x~) / 2) with z~ = z / l: one product
    /// [M, d] x [d, n] instead of a d-long loop per pair, which dominates for images. Inputs
    /// far from the origin are shifted first (`shift_far_inputs`).
    pub fn cross_gemm(&self, z: &Array2<f64>, x: &Array2<f64>) -> Mat<f64> {
        assert_eq!(z.ncols(), x.ncols(), "kernel inputs of different dimension");
        let w = self.weights(z.ncols());
        let shifted = shift_far_inputs(z, x, &w);
        let (z, x) = shifted.as_ref().map_or((z, x), |(z, x)| (z, x));
        let scale = |a: &Array2<f64>| {
            let mut a = a.clone();
            for mut row in a.rows_mut() {
                row.iter_mut().zip(&w).for_each(|(v, w)| *v *= w.sqrt());
            }
            a
        };
        let (zs, xs) = (scale(z), scale(x));
        let zn: Vec<f64> = zs.rows().into_iter().map(|r| r.dot(&r)).collect();
        let xn: Vec<f64> = xs.rows().into_iter().map(|r| r.dot(&r)).collect();
        let mut g = Mat::zeros(z.nrows(), x.nrows());
        matmul(g.as_mut(), Accum::Replace, view(&zs), view(&xs).transpose(), 1.0, crate::linalg::gemm_par());
        let s2 = self.log_variance.exp();
        for j in 0..x.nrows() {
            for i in 0..z.nrows() {
                let r2 = (zn[i] + xn[j] - 2.0 * g[(i, j)]).max(0.0);
                g[(i, j)] = s2 * (-0.5 * r2).exp();
            }
        }
        g
    }

    /// Gradients of sum_ij W_ij r2_ij / ... shared by `cross_vjp` and `gram_vjp`: with
    /// W = kbar o K, returns (dlog s2, per-dimension sum_ij W_ij (a_id - b_jd)^2 w_d, W B, rowsum W).
    fn weighted_sq_dists(&self, a: &Array2<f64>, b: &Array2<f64>, wk: &Mat<f64>) -> (f64, Vec<f64>, Mat<f64>, Vec<f64>) {
        let d = a.ncols();
        let w = self.weights(d);
        let (m, n) = (wk.nrows(), wk.ncols());
        // Every sum below runs over its index in increasing order from -0.0, as `Iterator::sum`
        // does, but the loops walk the memory in order (wk is column-major, a and b row-major).
        let mut row = vec![-0.0; m];
        let mut col = vec![-0.0; n];
        for j in 0..n {
            let wk_j = crate::linalg::col_slice(wk, j);
            for (r, &v) in row.iter_mut().zip(wk_j) {
                *r += v;
            }
            col[j] = wk_j.iter().sum();
        }
        let mut wb = Mat::zeros(m, d);
        matmul(wb.as_mut(), Accum::Replace, wk.as_ref(), view(b), 1.0, crate::linalg::gemm_par());
        let (mut aa, mut bb, mut ab) = (vec![-0.0; d], vec![-0.0; d], vec![-0.0; d]);
        for (a_i, &row_i) in a.rows().into_iter().zip(&row) {
            for (acc, &v) in aa.iter_mut().zip(a_i) {
                *acc += v * v * row_i;
            }
        }
        for (b_j, &col_j) in b.rows().into_iter().zip(&col) {
            for (acc, &v) in bb.iter_mut().zip(b_j) {
                *acc += v * v * col_j;
            }
        }
        for (k, acc) in ab.iter_mut().enumerate() {
            let wb_k = crate::linalg::col_slice(&wb, k);
            *acc = a.column(k).iter().zip(wb_k).fold(-0.0, |s, (&x, &y)| s + x * y);
        }
        let per_dim = (0..d).map(|k| w[k] * (aa[k] + bb[k] - 2.0 * ab[k])).collect();
        (row.iter().sum(), per_dim, wb, row)
    }

    /// `gram_many`'s diagonal: s2, as r2 = 0 exactly there.
    fn set_diagonal(&self, k: &mut Mat<f64>) {
        let s2 = self.log_variance.exp();
        for i in 0..k.nrows() {
            k[(i, i)] = s2;
        }
    }

    fn param_grads(&self, dlog_s2: f64, per_dim: &[f64]) -> Vec<f64> {
        let mut g = vec![dlog_s2];
        if self.is_ard() {
            g.extend_from_slice(per_dim);
        } else {
            g.push(per_dim.iter().sum());
        }
        g
    }
}

/// `z` and `x` less the mean row of `z`, where that mean lies far from the origin on the
/// length-scales `w` = 1 / l^2: at more than 100 times the inputs' root-mean-square distance
/// from it. The expansion |z|^2 + |x|^2 - 2 z . x of a squared distance loses about
/// eps |x / l|^2 to rounding, which for inputs near each other but far from the origin (raw
/// years, coordinates, timestamps with `standardize: false`) is most of r^2 (a relative error
/// of K of 1e-7 at an offset of 1e4 unit spreads, 1e-3 at 1e6). Distances, so K and its
/// gradients, are unchanged by a common shift. Below that ratio (every standardised data set,
/// images in [0, 1] or [-1, 1]) the inputs are used as they are, bit for bit, and `None` is
/// returned; likewise when all the inputs coincide (no spread to compare with).
fn shift_far_inputs(z: &Array2<f64>, x: &Array2<f64>, w: &[f64]) -> Option<(Array2<f64>, Array2<f64>)> {
    let c = z.mean_axis(ndarray::Axis(0))?;
    let centre: f64 = c.iter().zip(w).map(|(c, w)| w * c * c).sum();
    let spread = |a: &Array2<f64>| {
        a.rows().into_iter().map(|r| r.iter().zip(&c).zip(w).map(|((v, c), w)| w * (v - c) * (v - c)).sum::<f64>()).sum::<f64>()
    };
    let mean_spread = (spread(z) + spread(x)) / (z.nrows() + x.nrows()) as f64;
    if !(mean_spread > 0.0 && centre > 1e4 * mean_spread) {
        return None;
    }
    Some((z - &c, x - &c))
}

/// The gradient in Z, -sides w_d (z_id rowsum_i - (W B)_id), entry by entry; walked down the
/// columns of W B (column-major) into a row-major result.
fn input_gradient(z: &Array2<f64>, w: &[f64], row: &[f64], wb: &Mat<f64>, sides: f64) -> Array2<f64> {
    let mut gz = Array2::zeros(z.dim());
    for (d, (mut gz_d, z_d)) in gz.columns_mut().into_iter().zip(z.columns()).enumerate() {
        let wb_d = crate::linalg::col_slice(wb, d);
        for (((g, &zi), &ri), &wbi) in gz_d.iter_mut().zip(z_d).zip(row).zip(wb_d) {
            *g = -sides * w[d] * (zi * ri - wbi);
        }
    }
    gz
}

/// a o b, column by column over slices.
fn hadamard(a: &Mat<f64>, b: &Mat<f64>) -> Mat<f64> {
    assert_eq!((a.nrows(), a.ncols()), (b.nrows(), b.ncols()), "hadamard of different shapes");
    let mut out = Mat::<f64>::zeros(a.nrows(), a.ncols());
    for j in 0..a.ncols() {
        let (aj, bj) = (crate::linalg::col_slice(a, j), crate::linalg::col_slice(b, j));
        crate::linalg::col_slice_mut(&mut out, j).iter_mut().zip(aj.iter().zip(bj)).for_each(|(o, (x, y))| *o = x * y);
    }
    out
}

impl Kernel for SqExp {
    fn kind(&self) -> &'static str {
        "se"
    }
    fn log_params(&self) -> Vec<f64> {
        SqExp::log_params(self)
    }
    fn with_log_params(&self, p: &[f64]) -> Box<dyn Kernel> {
        Box::new(SqExp::with_log_params(self, p))
    }
    fn free_mask(&self) -> Vec<bool> {
        SqExp::free_mask(self)
    }
    fn param_names(&self) -> Vec<String> {
        SqExp::param_names(self)
    }
    fn cross(&self, x1: &Array2<f64>, x2: &Array2<f64>) -> Mat<f64> {
        SqExp::cross(self, x1, x2)
    }
    fn gram(&self, x: &Array2<f64>) -> Mat<f64> {
        SqExp::gram(self, x)
    }
    fn diag(&self, x: &Array2<f64>) -> Vec<f64> {
        SqExp::diag(self, x)
    }
    fn gram_grads(&self, x: &Array2<f64>, k: &Mat<f64>) -> Vec<Mat<f64>> {
        SqExp::gram_grads(self, x, k)
    }
    fn clone_box(&self) -> Box<dyn Kernel> {
        Box::new(self.clone())
    }
    fn cross_many(&self, z: &Array2<f64>, x: &Array2<f64>) -> Mat<f64> {
        self.cross_gemm(z, x)
    }
    fn gram_many(&self, z: &Array2<f64>) -> Mat<f64> {
        let mut k = self.cross_gemm(z, z);
        super::symmetrise_from_lower(&mut k);
        self.set_diagonal(&mut k);
        k
    }
    fn gram_many_from_off_diagonal(&self, k: &Mat<f64>) -> Option<Mat<f64>> {
        let mut own = k.clone();
        self.set_diagonal(&mut own);
        Some(own)
    }
    fn cross_vjp(&self, z: &Array2<f64>, x: &Array2<f64>, k: &Mat<f64>, kbar: &Mat<f64>) -> InputGrads {
        // dK_ij/dlog l_d = K_ij w_d (z_id - x_jd)^2; dK_ij/dz_id = -K_ij w_d (z_id - x_jd):
        // both depend on differences only, so a common shift leaves them unchanged.
        let wk = hadamard(kbar, k);
        let w = self.weights(z.ncols());
        let shifted = shift_far_inputs(z, x, &w);
        let (z, x) = shifted.as_ref().map_or((z, x), |(z, x)| (z, x));
        let (dlog_s2, per_dim, wx, row) = self.weighted_sq_dists(z, x, &wk);
        let gz = input_gradient(z, &w, &row, &wx, 1.0);
        InputGrads { params: self.param_grads(dlog_s2, &per_dim), z: gz }
    }
    fn gram_vjp(&self, z: &Array2<f64>, k: &Mat<f64>, kbar: &Mat<f64>) -> InputGrads {
        // Z sits in both arguments: with kbar symmetric the two halves are equal.
        let wk = hadamard(kbar, k);
        let w = self.weights(z.ncols());
        let shifted = shift_far_inputs(z, z, &w);
        let z = shifted.as_ref().map_or(z, |(z, _)| z);
        let (dlog_s2, per_dim, wz, row) = self.weighted_sq_dists(z, z, &wk);
        let gz = input_gradient(z, &w, &row, &wz, 2.0);
        InputGrads { params: self.param_grads(dlog_s2, &per_dim), z: gz }
    }
    fn diag_vjp(&self, _x: &Array2<f64>, dbar: &[f64]) -> Vec<f64> {
        let mut g = vec![0.0; self.n_params()];
        g[0] = self.log_variance.exp() * dbar.iter().sum::<f64>();
        g
    }
    fn as_sqexp(&self) -> Option<&SqExp> {
        Some(self)
    }
}
