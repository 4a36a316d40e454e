//! The squared-exponential kernel in Girolami & Rogers' form C = s2 exp(-sum_d phi_d (x_d - x'_d)^2),
//! phi_d = 1 / (2 l_d^2), as VB-MNP and its sparse ADF variant use it. It is the same function as
//! `SqExp`, evaluated another way: pairwise squared differences combined with the precisions by
//! vectorised passes (the importance sampler builds thousands of Gram matrices per fit), with its
//! own summation order. Replacing it by `SqExp` would change the last bits of every committed
//! VB-MNP result, so it stays, here with the other kernels, not inside a method. Its tests check
//! it against `SqExp`, and its pairwise sums bit for bit against the plain loop.
#![allow(non_snake_case)]
use super::SqExp;
use crate::linalg::{Chol, LinalgError};
use faer::Mat;
use ndarray::Array2;

/// G&R precisions phi_d = 1 / (2 l_d^2) from the SqExp length-scales.
pub fn phi_from_kernel(kernel: &SqExp) -> Vec<f64> {
    kernel.log_lengthscales.iter().map(|l| 0.5 * (-2.0 * l).exp()).collect()
}

/// The SqExp with length-scales l_d = (2 phi_d)^{-1/2} and the given kernel's variance.
pub fn kernel_from_phi(kernel: &SqExp, phi: &[f64]) -> SqExp {
    SqExp {
        log_variance: kernel.log_variance,
        log_lengthscales: phi.iter().map(|p| -0.5 * (2.0 * p).ln()).collect(),
        learn_variance: kernel.learn_variance,
    }
}

/// C = s2 exp(-sum_d phi_d (x_id - x_jd)^2), [n, n]; `phi` has length 1 (isotropic) or d.
pub fn gram_phi(x: &Array2<f64>, phi: &[f64], s2: f64) -> Mat<f64> {
    PairSqDiffs::new(x).gram(phi, s2, 0.0)
}

/// The data of the importance sampler's Gram matrices (it builds thousands per fit), held
/// dimension-major so that each matrix is one vectorised pass over the pairs j < i per dimension
/// and one vectorised exp. The squared differences (x_ik - x_jk)^2 are formed on the fly: storing
/// them (n^2 d / 2 numbers, 324 MB on 1500 satimage rows) made every Gram matrix a stream of
/// that much memory, half of a VB-MNP fit's time there; formed from x (n d numbers, in cache)
/// they cost a subtraction and a product more, and the numbers are the same to the last bit.
pub struct PairSqDiffs {
    n: usize,
    d: usize,
    /// Dimension-major copy of x: entry k * n + i is x_ik.
    xt: Vec<f64>,
}

impl PairSqDiffs {
    pub fn new(x: &Array2<f64>) -> PairSqDiffs {
        let (n, d) = x.dim();
        let xt = (0..d).flat_map(|k| x.column(k).to_vec()).collect();
        PairSqDiffs { n, d, xt }
    }

    /// exp(-sum_k phi_k (x_ik - x_jk)^2) for every pair j < i, in the pair order, into `e`
    /// (`phi` has length 1 or d).
    fn pair_kernel(&self, phi: &[f64], e: &mut Vec<f64>) {
        assert!(phi.len() == 1 || phi.len() == self.d, "phi has {} entries for {} inputs", phi.len(), self.d);
        let w: Vec<f64> = (0..self.d).map(|k| if phi.len() == 1 { phi[0] } else { phi[k] }).collect();
        // Vectorised over the pairs, with the same sum order per pair as a loop over k.
        e.clear();
        e.resize(self.n * self.n.saturating_sub(1) / 2, 0.0);
        neg_weighted_sums(&self.xt, self.n, &w, e);
        crate::special::exp_slice(e);
    }

    /// Writes column j (diagonal down) of the Gram matrix s2 * pair kernel + add I, given the
    /// pair kernel `e` of `pair_kernel`.
    fn gram_column(&self, e: &[f64], s2: f64, add: f64, j: usize, col: &mut [f64]) {
        // Column j's pairs start after those of columns 0..j: sum_{l<j} (n - 1 - l).
        let start = j * (2 * self.n - j - 1) / 2;
        col[0] = s2 + add;
        for (v, e) in col[1..].iter_mut().zip(&e[start..start + self.n - j - 1]) {
            *v = s2 * e;
        }
    }

    /// The lower triangle (and diagonal, plus `add`) of the Gram matrix for `phi` (length 1 or
    /// d); the upper triangle is left zero. Enough for a Cholesky factorisation.
    pub fn gram_lower(&self, phi: &[f64], s2: f64, add: f64) -> Mat<f64> {
        let mut e = Vec::new();
        self.pair_kernel(phi, &mut e);
        let mut C = Mat::zeros(self.n, self.n);
        for j in 0..self.n {
            let col = C.col_mut(j).try_as_col_major_mut().expect("a fresh Mat is column-major").as_slice_mut();
            self.gram_column(&e, s2, add, j, &mut col[j..]);
        }
        C
    }

    /// Factor the Gram matrix for `phi` plus `add` on the diagonal in `scratch`'s storage.
    pub fn factor_gram<'s>(&self, phi: &[f64], s2: f64, add: f64, scratch: &'s mut GramScratch) -> Result<&'s Chol, LinalgError> {
        let GramScratch { pair_kernel, chol } = scratch;
        // A smaller scratch would factor the Gram matrix's leading block without a word.
        assert_eq!(chol.dim(), self.n, "Gram scratch made for another number of rows");
        self.pair_kernel(phi, pair_kernel);
        chol.refactor_lower("C_phi", |j, col| self.gram_column(pair_kernel, s2, add, j, col))?;
        Ok(chol)
    }

    /// The full symmetric Gram matrix for `phi` plus `add` on the diagonal.
    pub fn gram(&self, phi: &[f64], s2: f64, add: f64) -> Mat<f64> {
        let mut C = self.gram_lower(phi, s2, add);
        for j in 0..self.n {
            for i in j + 1..self.n {
                C[(j, i)] = C[(i, j)];
            }
        }
        C
    }
}

/// Storage the importance sampler reuses across its samples' Gram factorisations.
pub struct GramScratch {
    pub pair_kernel: Vec<f64>,
    pub chol: Chol,
}

impl GramScratch {
    pub fn new(n: usize) -> GramScratch {
        GramScratch { pair_kernel: Vec::new(), chol: Chol::workspace(n) }
    }
}

/// out_p = -sum_k w_k (x_ik - x_jk)^2 for the p-th pair (i, j), j < i, pairs in column-major
/// lower-triangle order (j outer), accumulated in k order, a tile of one column's pairs at a
/// time so that the partial sums stay in the L1 cache across the d passes. `xt` is x
/// dimension-major (entry k * n + i is x_ik).
#[multiversion::multiversion(targets("x86_64+avx512f", "x86_64+avx2"))]
fn neg_weighted_sums(xt: &[f64], n: usize, w: &[f64], out: &mut [f64]) {
    const TILE: usize = 512;
    let mut start = 0;
    for j in 0..n {
        // Column j's pairs are (i, j) for i = j + 1..n, at out[start..start + n - j - 1].
        let column = &mut out[start..start + n - j - 1];
        start += n - j - 1;
        for (t, tile) in column.chunks_mut(TILE).enumerate() {
            let (i0, len) = (j + 1 + t * TILE, tile.len());
            for (k, &wk) in w.iter().enumerate() {
                let xk = &xt[k * n..(k + 1) * n];
                let xjk = xk[j];
                for (o, &xik) in tile.iter_mut().zip(&xk[i0..i0 + len]) {
                    let diff = xik - xjk;
                    *o -= wk * (diff * diff);
                }
            }
        }
    }
}

/// exp(-sum_d phi_d (x1_id - x2_jd)^2) s2, [n1, n2].
pub fn gram_cross_phi(x1: &Array2<f64>, x2: &Array2<f64>, phi: &[f64], s2: f64) -> Mat<f64> {
    let d = x1.ncols();
    assert_eq!(x2.ncols(), d, "inputs of different dimensions");
    assert!(phi.len() == 1 || phi.len() == d, "phi has {} entries for {d} inputs", phi.len());
    let w: Vec<f64> = (0..d).map(|k| if phi.len() == 1 { phi[0] } else { phi[k] }).collect();
    Mat::from_fn(x1.nrows(), x2.nrows(), |i, j| {
        let (a, b) = (x1.row(i), x2.row(j));
        let s: f64 = (0..d).map(|k| w[k] * (a[k] - b[k]) * (a[k] - b[k])).sum();
        s2 * (-s).exp()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weighted_sums_equal_the_pairwise_loop_bit_for_bit() {
        // The stored-differences form this replaced: per pair, the squared difference, then the
        // weighted sum in k order. n = 600 gives columns of more than one tile.
        for (n, d) in [(7, 4), (600, 3)] {
            let x = Array2::from_shape_fn((n, d), |(i, k)| ((i * 7 + k * 13) as f64 * 0.37).sin() * (1.0 + k as f64));
            let w: Vec<f64> = (0..d).map(|k| 0.3 + 0.45 * k as f64).collect();
            let pairs = PairSqDiffs::new(&x);
            let mut out = vec![0.0; n * (n - 1) / 2];
            neg_weighted_sums(&pairs.xt, n, &w, &mut out);
            let mut p = 0;
            for j in 0..n {
                for i in j + 1..n {
                    let mut want = 0.0f64;
                    for k in 0..d {
                        want -= w[k] * (x[(i, k)] - x[(j, k)]).powi(2);
                    }
                    assert_eq!(out[p].to_bits(), want.to_bits(), "n = {n}: pair ({i}, {j})");
                    p += 1;
                }
            }
        }
    }

    #[test]
    fn kernel_conversion_round_trips_and_matches_sqexp() {
        let base = SqExp { log_variance: 0.4, log_lengthscales: vec![0.1, -0.3, 0.8], learn_variance: false };
        let phi = phi_from_kernel(&base);
        let k2 = kernel_from_phi(&base, &phi);
        // 5 points: pairs only in the vectorised exp's padded tail; 40: full blocks too.
        for n in [5, 40] {
            let x = Array2::from_shape_fn((n, 3), |(i, j)| (i as f64 * 0.7 - j as f64 * 0.3).sin());
            let (a, b) = (base.gram(&x), gram_phi(&x, &phi, 0.4f64.exp()));
            for i in 0..n {
                for j in 0..n {
                    assert!((a[(i, j)] - b[(i, j)]).abs() < 1e-14, "n = {n}: ({i}, {j})");
                }
            }
        }
        for (u, v) in k2.log_lengthscales.iter().zip(&base.log_lengthscales) {
            assert!((u - v).abs() < 1e-14);
        }
    }
}
