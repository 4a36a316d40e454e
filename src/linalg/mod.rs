//! A small linear-algebra layer over faer that every method shares: Cholesky with an
//! explicit, reported jitter ladder; triangular solves; log-determinants; stable
//! log-sum-exp and softmax; Kronecker-structured products.
//!
//! Kernel matrices are never inverted explicitly: every `A^{-1} b` goes through `Chol`.
pub mod kron;
mod products;
pub mod small;
mod vectors;

pub use kron::{kron, kron_matvec};
pub use products::{add_gram_lower, gemm_par, matmul_lower_par, matmul_par, reduced_variances, symmetrize_from_lower};
pub use vectors::*;

use faer::dyn_stack::{MemBuffer, MemStack};
use faer::linalg::cholesky::llt::factor::{cholesky_in_place, cholesky_in_place_scratch, LltError};
use faer::linalg::triangular_solve::{solve_lower_triangular_in_place, solve_upper_triangular_in_place};
use faer::{Mat, MatMut, MatRef, Par, Side};

/// Relative jitters tried in turn (times the mean diagonal) when a matrix is not
/// numerically positive definite. The first entry is "no jitter".
pub const JITTER_LADDER: [f64; 7] = [0.0, 1e-10, 1e-9, 1e-8, 1e-7, 1e-6, 1e-5];

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LinalgError {
    #[error("{what} is not positive definite: Cholesky failed at pivot {pivot} {}", jitter_tried(*.last_jitter))]
    NotPositiveDefinite { what: String, pivot: usize, last_jitter: f64 },
    #[error("{what} contains a non-finite entry")]
    NonFinite { what: String },
    #[error("{what} did not converge")]
    NoConvergence { what: String },
}

/// How far a failed factorisation went: a factor that may not add jitter says so, rather than
/// "even with jitter 0".
fn jitter_tried(last_jitter: f64) -> String {
    if last_jitter > 0.0 {
        format!("even with jitter {last_jitter:.1e} added to the diagonal")
    } else {
        "with no jitter added".to_string()
    }
}

/// Lower Cholesky factor L of A + jitter I (A = L L^T), with the jitter that was needed.
#[derive(Clone, Debug)]
pub struct Chol {
    L: Mat<f64>,
    jitter: f64,
}

impl Chol {
    /// Factor `a` without any jitter.
    pub fn factor(a: MatRef<'_, f64>, what: &str) -> Result<Chol, LinalgError> {
        Self::factor_ladder(a, what, &[0.0])
    }

    /// Factor `a`, adding the smallest jitter of `JITTER_LADDER` (relative to the mean
    /// diagonal) that makes it succeed. The jitter used is reported by `jitter()`.
    pub fn factor_with_jitter(a: MatRef<'_, f64>, what: &str) -> Result<Chol, LinalgError> {
        Self::factor_ladder(a, what, &JITTER_LADDER)
    }

    fn factor_ladder(a: MatRef<'_, f64>, what: &str, ladder: &[f64]) -> Result<Chol, LinalgError> {
        assert_eq!(a.nrows(), a.ncols(), "Cholesky of a non-square matrix");
        let n = a.nrows();
        // llt reads the lower triangle only.
        if (0..n).any(|j| (j..n).any(|i| !a[(i, j)].is_finite())) {
            return Err(LinalgError::NonFinite { what: what.to_string() });
        }
        let scale = if n == 0 { 1.0 } else { (0..n).map(|i| a[(i, i)].abs()).sum::<f64>() / n as f64 };
        let mut last = (0, 0.0);
        for &rel in ladder {
            let jitter = rel * scale;
            let mut m = a.to_owned();
            for i in 0..n {
                m[(i, i)] += jitter;
            }
            match llt_lower_in_place(m.as_mut()) {
                Ok(()) => return Ok(Chol { L: m, jitter }),
                Err(index) => last = (index, jitter),
            }
        }
        Err(LinalgError::NotPositiveDefinite { what: what.to_string(), pivot: last.0, last_jitter: last.1 })
    }

    /// Factor `a` (its lower triangle) without jitter, in its own storage: no copy of a large
    /// matrix built only to be factored.
    pub fn factor_owned(mut a: Mat<f64>, what: &str) -> Result<Chol, LinalgError> {
        assert_eq!(a.nrows(), a.ncols(), "Cholesky of a non-square matrix");
        let n = a.nrows();
        if (0..n).any(|j| (j..n).any(|i| !a[(i, j)].is_finite())) {
            return Err(LinalgError::NonFinite { what: what.to_string() });
        }
        llt_lower_in_place(a.as_mut()).map_err(|pivot| LinalgError::NotPositiveDefinite {
            what: what.to_string(),
            pivot,
            last_jitter: 0.0,
        })?;
        Ok(Chol { L: a, jitter: 0.0 })
    }

    /// The factor of L_o (L_i L_i^T) L_o^T, given the factors L_o of `outer` and L_i of
    /// `inner`: the product L_o L_i, lower triangular as both are (its diagonal is exactly the
    /// products of theirs). No jitter is added to the product's matrix.
    pub fn nested(outer: &Chol, inner: &Chol) -> Chol {
        assert_eq!(outer.dim(), inner.dim(), "nested factors of different sizes");
        Chol { L: outer.l() * inner.l(), jitter: 0.0 }
    }

    /// Storage for `refactor_lower`: the factor of the n x n identity.
    pub fn workspace(n: usize) -> Chol {
        Chol { L: Mat::identity(n, n), jitter: 0.0 }
    }

    /// Factor (without jitter) the matrix whose lower triangle `fill_col(j, column)` writes,
    /// column j from the diagonal down, into this factor's own storage: for loops that factor
    /// thousands of same-size matrices (no allocation, no copy). After an error the factor
    /// holds garbage until the next successful call.
    pub fn refactor_lower(&mut self, what: &str, mut fill_col: impl FnMut(usize, &mut [f64])) -> Result<(), LinalgError> {
        let n = self.dim();
        for j in 0..n {
            let col = self.L.col_mut(j).try_as_col_major_mut().expect("Chol storage is column-major").as_slice_mut();
            fill_col(j, &mut col[j..]);
            // A fold rather than `any`, so that the check vectorises.
            if !col[j..].iter().fold(true, |ok, v| ok & v.is_finite()) {
                return Err(LinalgError::NonFinite { what: what.to_string() });
            }
        }
        self.jitter = 0.0;
        llt_lower_in_place(self.L.as_mut()).map_err(|pivot| LinalgError::NotPositiveDefinite {
            what: what.to_string(),
            pivot,
            last_jitter: 0.0,
        })
    }

    /// Grow the factor of A to that of [[A, c], [c^T, s]] given its new last row: `row` = l with
    /// L l = c, and `diag` = sqrt(s - l^T l) > 0 (the caller has both in a stabler form than
    /// this difference, e.g. the IVM's O(n d) inclusion). Costs one O(d^2) copy.
    pub fn push_row(&mut self, row: &[f64], diag: f64, what: &str) -> Result<(), LinalgError> {
        let d = self.dim();
        assert_eq!(row.len(), d, "Chol::push_row: row of the wrong length");
        if !(diag > 0.0 && diag.is_finite() && row.iter().all(|v| v.is_finite())) {
            return Err(LinalgError::NotPositiveDefinite { what: what.to_string(), pivot: d, last_jitter: self.jitter });
        }
        self.L.resize_with(d + 1, d + 1, |i, j| {
            if i == d && j < d {
                row[j]
            } else if i == d && j == d {
                diag
            } else {
                0.0
            }
        });
        Ok(())
    }

    pub fn dim(&self) -> usize {
        self.L.nrows()
    }

    /// The jitter that was added to the diagonal (0 when none was needed).
    pub fn jitter(&self) -> f64 {
        self.jitter
    }

    pub fn l(&self) -> MatRef<'_, f64> {
        self.L.as_ref()
    }

    /// log |A| = 2 sum log L_ii.
    pub fn log_det(&self) -> f64 {
        2.0 * (0..self.dim()).map(|i| self.L[(i, i)].ln()).sum::<f64>()
    }

    /// L^{-1} B.
    pub fn solve_l(&self, b: MatRef<'_, f64>) -> Mat<f64> {
        let mut x = b.to_owned();
        self.solve_l_in_place(&mut x);
        x
    }

    /// L^{-T} B.
    pub fn solve_lt(&self, b: MatRef<'_, f64>) -> Mat<f64> {
        let mut x = b.to_owned();
        self.solve_lt_in_place(&mut x);
        x
    }

    /// A^{-1} B via two triangular solves.
    pub fn solve(&self, b: MatRef<'_, f64>) -> Mat<f64> {
        let mut x = b.to_owned();
        self.solve_l_in_place(&mut x);
        self.solve_lt_in_place(&mut x);
        x
    }

    /// L^{-1} B with the large-product parallelism ([`gemm_par`]): for the scalable methods'
    /// [M, batch] solves.
    pub fn solve_l_par(&self, b: MatRef<'_, f64>) -> Mat<f64> {
        let mut x = b.to_owned();
        solve_lower_triangular_in_place(self.L.as_ref(), x.as_mut(), gemm_par());
        x
    }

    /// B <- L^{-1} B in B's storage, with the large-product parallelism.
    pub fn solve_l_par_in_place(&self, b: &mut Mat<f64>) {
        solve_lower_triangular_in_place(self.L.as_ref(), b.as_mut(), gemm_par());
    }

    /// A^{-1} B with the large-product parallelism.
    pub fn solve_par(&self, b: MatRef<'_, f64>) -> Mat<f64> {
        let mut x = self.solve_l_par(b);
        solve_upper_triangular_in_place(self.L.transpose(), x.as_mut(), gemm_par());
        x
    }

    /// L^{-T} B with the large-product parallelism.
    pub fn solve_lt_par(&self, b: MatRef<'_, f64>) -> Mat<f64> {
        let mut x = b.to_owned();
        solve_upper_triangular_in_place(self.L.transpose(), x.as_mut(), gemm_par());
        x
    }

    fn solve_l_in_place(&self, x: &mut Mat<f64>) {
        let (l, n) = (&self.L, self.dim());
        // The small path would solve the first n rows and return the rest unchanged.
        assert_eq!(x.nrows(), n, "right-hand side rows against the factor's order");
        if n > SMALL {
            solve_lower_triangular_in_place(l.as_ref(), x.as_mut(), Par::Seq);
            return;
        }
        // Plain loops on slices (L row-major on the stack): at C x C sizes, called for every
        // datum in every sweep, indexing overhead is the cost.
        let lr = small_row_major(l.as_ref());
        for c in 0..x.ncols() {
            let xc = x.col_mut(c).try_as_col_major_mut().expect("an owned Mat is column-major").as_slice_mut();
            for i in 0..n {
                let mut s = xc[i];
                for k in 0..i {
                    s -= lr[i * n + k] * xc[k];
                }
                xc[i] = s / lr[i * n + i];
            }
        }
    }

    fn solve_lt_in_place(&self, x: &mut Mat<f64>) {
        let (l, n) = (&self.L, self.dim());
        assert_eq!(x.nrows(), n, "right-hand side rows against the factor's order");
        if n > SMALL {
            solve_upper_triangular_in_place(l.transpose(), x.as_mut(), Par::Seq);
            return;
        }
        for c in 0..x.ncols() {
            let xc = x.col_mut(c).try_as_col_major_mut().expect("an owned Mat is column-major").as_slice_mut();
            for i in (0..n).rev() {
                // Column i of L, contiguous in faer's column-major storage.
                let li = col_slice(l, i);
                let mut s = xc[i];
                for k in i + 1..n {
                    s -= li[k] * xc[k];
                }
                xc[i] = s / li[i];
            }
        }
    }

    /// A^{-1} in full, for the few places where every entry of the inverse is the quantity
    /// sought (GPML's E_c = D^1/2 B^-1 D^1/2 of the multinomial Laplace approximation, with
    /// B = I + D^1/2 K D^1/2 well conditioned: eigenvalues >= 1). Never for a kernel matrix:
    /// solve with it instead. Costs n^3 / 3 multiply-adds after the factor (the triangular
    /// inverse and the product L^{-T} L^{-1}, each on one triangle), against n^3 for solving
    /// with n right-hand sides and forming the product in full.
    pub fn inverse(&self) -> Mat<f64> {
        let n = self.dim();
        let mut out = Mat::zeros(n, n);
        let mut mem = MemBuffer::new(faer::linalg::cholesky::llt::inverse::inverse_scratch::<f64>(n, Par::Seq));
        faer::linalg::cholesky::llt::inverse::inverse(out.as_mut(), self.L.as_ref(), Par::Seq, MemStack::new(&mut mem));
        // faer fills the lower triangle only.
        symmetrize_from_lower(&mut out);
        out
    }

    /// A^{-1} v for a vector.
    pub fn solve_vec(&self, v: &[f64]) -> Vec<f64> {
        to_vec(self.solve(col(v).as_ref()).as_ref())
    }

    /// L L^T (tests and diagnostics only).
    pub fn reconstruct(&self) -> Mat<f64> {
        &self.L * self.L.transpose()
    }
}

impl Chol {
    /// Reverse mode through the factorisation: given Lbar = df/dL (lower triangular) for this
    /// factor L of A, the symmetric Abar with df = sum_ij Abar_ij dA_ij for symmetric dA:
    /// Abar = L^{-T} sym(Phi(L^T Lbar)) L^{-1}, Phi = lower triangle with its diagonal halved
    /// (Murray 2016, "Differentiation of the Cholesky decomposition", eq. 10).
    pub fn backprop(&self, lbar: MatRef<'_, f64>) -> Mat<f64> {
        let n = self.dim();
        let g = self.L.transpose() * lbar;
        let phi = |i: usize, j: usize| match i.cmp(&j) {
            std::cmp::Ordering::Greater => g[(i, j)],
            std::cmp::Ordering::Equal => 0.5 * g[(i, i)],
            std::cmp::Ordering::Less => 0.0,
        };
        let sym = Mat::from_fn(n, n, |i, j| 0.5 * (phi(i, j) + phi(j, i)));
        let y = self.solve_lt(sym.as_ref()); // L^{-T} S
        let abar_t = self.solve_lt(y.transpose()); // L^{-T} (L^{-T} S)^T = (L^{-T} S L^{-1})^T
        Mat::from_fn(n, n, |i, j| 0.5 * (abar_t[(i, j)] + abar_t[(j, i)]))
    }
}

/// Up to this order `Chol` factors and solves with plain loops: faer's blocked routines
/// allocate workspace on every call, which dominates for the C x C blocks that KL-MNL
/// factors per datum and per sweep.
const SMALL: usize = 12;

/// The lower triangle of a matrix of order <= SMALL, row-major on the stack.
fn small_row_major(l: MatRef<'_, f64>) -> [f64; SMALL * SMALL] {
    let n = l.nrows();
    let mut out = [0.0; SMALL * SMALL];
    for j in 0..n {
        for i in j..n {
            out[i * n + j] = l[(i, j)];
        }
    }
    out
}

/// In-place lower Cholesky of an SPD matrix: reads the lower triangle, overwrites it with L and
/// zeroes the strict upper triangle (faer's blocked routine uses it as workspace);
/// `Err(pivot)` at the first non-positive pivot. Plain loops (Cholesky-Banachiewicz) up to
/// `SMALL`, faer's blocked factorisation above.
fn llt_lower_in_place(mut m: MatMut<'_, f64>) -> Result<(), usize> {
    let n = m.nrows();
    if n > SMALL {
        let mut mem = MemBuffer::new(cholesky_in_place_scratch::<f64>(n, Par::Seq, Default::default()));
        cholesky_in_place(m.as_mut(), Default::default(), Par::Seq, MemStack::new(&mut mem), Default::default())
            .map_err(|LltError::NonPositivePivot { index }| index)?;
        for j in 1..n {
            m.as_mut().col_mut(j).subrows_mut(0, j).fill(0.0);
        }
        return Ok(());
    }
    for j in 0..n {
        let mut d = m[(j, j)];
        for k in 0..j {
            d -= m[(j, k)] * m[(j, k)];
        }
        if !(d > 0.0) {
            return Err(j);
        }
        let d = d.sqrt();
        m[(j, j)] = d;
        for i in j + 1..n {
            let mut s = m[(i, j)];
            for k in 0..j {
                s -= m[(i, k)] * m[(j, k)];
            }
            m[(i, j)] = s / d;
            m[(j, i)] = 0.0;
        }
    }
    Ok(())
}

/// The symmetric pencil A + eta D (A positive definite, D symmetric) along a line search:
/// with A = L L^T and L^{-1} D L^{-T} = U diag(lambda) U^T, A + eta D = L U (I + eta diag(lambda))
/// U^T L^T, so tr((A + eta D)^{-1} D) (a line search's derivative term) costs O(p) per trial eta
/// after one factorisation and one eigenvalue decomposition (instead of a Cholesky per trial).
pub struct SymPencil {
    lambda: Vec<f64>,
}

impl SymPencil {
    pub fn new(a: MatRef<'_, f64>, d: MatRef<'_, f64>, what: &str) -> Result<SymPencil, LinalgError> {
        let la = Chol::factor(a, what)?;
        let x = la.solve_l(d); // L^{-1} D
        let y = la.solve_l(x.transpose()); // L^{-1} D^T L^{-T} = L^{-1} D L^{-T}
        let y = Mat::from_fn(y.nrows(), y.ncols(), |i, j| 0.5 * (y[(i, j)] + y[(j, i)]));
        let lambda =
            y.self_adjoint_eigenvalues(Side::Lower).map_err(|_| LinalgError::NonFinite { what: format!("L^-1 D L^-T of {what}") })?;
        Ok(SymPencil { lambda })
    }

    /// tr((A + eta D)^{-1} D), or None when A + eta D is not positive definite.
    pub fn trace_inv_times_d(&self, eta: f64) -> Option<f64> {
        let mut s = 0.0;
        for l in &self.lambda {
            let t = 1.0 + eta * l;
            if !(t > 0.0) {
                return None;
            }
            s += l / t;
        }
        Some(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{RngExt, SeedableRng};

    /// diag(K** - K*^T A^{-1} K*) through V = L^{-1} K*, against an explicit solve with A, and
    /// floored at zero where round-off (here, a prior too small) would make it negative.
    #[test]
    fn reduced_variances_are_the_conditional_variances() {
        let a = Mat::from_fn(3, 3, |i, j| if i == j { 2.0 } else { 0.5 });
        let ks = Mat::from_fn(3, 2, |i, j| (i + 2 * j) as f64 * 0.3 - 0.2);
        let prior = [1.5, 2.0];
        let chol = Chol::factor(a.as_ref(), "A").unwrap();
        let got = reduced_variances(&prior, chol.solve_l(ks.as_ref()).as_ref());
        let ainv_ks = chol.solve(ks.as_ref());
        for j in 0..2 {
            let quad: f64 = (0..3).map(|i| ks[(i, j)] * ainv_ks[(i, j)]).sum();
            assert!((got[j] - (prior[j] - quad)).abs() < 1e-14 && got[j] > 0.0, "{got:?}");
        }
        assert_eq!(reduced_variances(&[0.0, 0.0], chol.solve_l(ks.as_ref()).as_ref()), vec![0.0, 0.0]);
    }

    #[test]
    fn axpy_gives_the_bits_of_one_multiply_and_one_add_per_element() {
        // Whatever vector width the dispatch picks, each element must be y + (x a) rounded
        // twice, never fused: results may not depend on the machine.
        let mut rng = rand_pcg::Pcg64::seed_from_u64(3);
        for n in [0, 1, 7, 8, 9, 31, 64, 103] {
            let x: Vec<f64> = (0..n).map(|_| rng.random::<f64>() * 2.0 - 1.0).collect();
            let y0: Vec<f64> = (0..n).map(|_| rng.random::<f64>() * 1e3).collect();
            let a = 0.1 + rng.random::<f64>();
            let mut y = y0.clone();
            axpy(&mut y, a, &x);
            for i in 0..n {
                let product = std::hint::black_box(x[i] * a);
                assert_eq!(y[i].to_bits(), (y0[i] + product).to_bits(), "element {i} of {n}");
            }
        }
    }

    #[test]
    fn inverse_times_matrix_is_identity_and_gram_lower_is_a_t_a() {
        // Sizes on both sides of faer's blocking (and of SMALL), a random SPD matrix.
        let mut rng = rand_pcg::Pcg64::seed_from_u64(11);
        for n in [1, 3, 17, 70] {
            let b = Mat::from_fn(n, n, |_, _| rng.random_range(-1.0..1.0));
            let a = &b * b.transpose() + Mat::<f64>::identity(n, n);
            let inv = Chol::factor(a.as_ref(), "A").unwrap().inverse();
            let prod = &a * &inv;
            for i in 0..n {
                for j in 0..n {
                    let want = if i == j { 1.0 } else { 0.0 };
                    assert!((prod[(i, j)] - want).abs() < 1e-10, "n = {n}: (A A^-1)[{i},{j}] = {}", prod[(i, j)]);
                    assert_eq!(inv[(i, j)], inv[(j, i)], "n = {n}: the inverse is not symmetric");
                }
            }
            // out = I - 2 B^T B on the lower triangle; the upper triangle keeps I's zeros.
            let mut out = Mat::<f64>::identity(n, n);
            add_gram_lower(out.as_mut(), b.as_ref(), -2.0);
            let full = Mat::<f64>::identity(n, n) - (b.transpose() * &b) * faer::Scale(2.0);
            for j in 0..n {
                for i in 0..n {
                    if i >= j {
                        assert!((out[(i, j)] - full[(i, j)]).abs() < 1e-12, "n = {n}: lower ({i},{j})");
                    } else {
                        assert_eq!(out[(i, j)], 0.0, "n = {n}: upper ({i},{j}) was written");
                    }
                }
            }
        }
    }

    #[test]
    fn matvec_equals_the_product_for_contiguous_and_strided_matrices() {
        let mut rng = rand_pcg::Pcg64::seed_from_u64(12);
        let a = Mat::from_fn(9, 7, |_, _| rng.random_range(-1.0..1.0));
        let v: Vec<f64> = (0..7).map(|j| if j == 3 { 0.0 } else { rng.random_range(-1.0..1.0) }).collect();
        let want = &a * col(&v);
        let got = matvec(a.as_ref(), &v);
        // A transposed view has strided columns: the indexed path.
        let at = a.transpose().to_owned();
        let got_t = matvec(at.transpose(), &v);
        for i in 0..9 {
            assert!((got[i] - want[(i, 0)]).abs() < 1e-14);
            assert_eq!(got[i], got_t[i], "the two paths sum in the same order");
        }
    }

    #[test]
    fn cholesky_backprop_matches_finite_differences() {
        // f(A) = sum_ij Lbar_ij chol(A)_ij; perturb A_ij and A_ji together (A stays symmetric).
        let mut rng = rand_pcg::Pcg64::seed_from_u64(7);
        let n = 5;
        let b = Mat::from_fn(n, n, |_, _| rng.random_range(-1.0..1.0));
        let a = &b * b.transpose() + Mat::<f64>::identity(n, n);
        let lbar = Mat::from_fn(n, n, |i, j| if i >= j { rng.random_range(-1.0..1.0) } else { 0.0 });
        let f = |a: &Mat<f64>| {
            let c = Chol::factor(a.as_ref(), "A").unwrap();
            (0..n).flat_map(|i| (0..=i).map(move |j| (i, j))).map(|(i, j)| lbar[(i, j)] * c.l()[(i, j)]).sum::<f64>()
        };
        let abar = Chol::factor(a.as_ref(), "A").unwrap().backprop(lbar.as_ref());
        let h = 1e-6;
        for i in 0..n {
            for j in 0..=i {
                let (mut ap, mut am) = (a.clone(), a.clone());
                for (r, c) in [(i, j), (j, i)].into_iter().take(if i == j { 1 } else { 2 }) {
                    ap[(r, c)] += h;
                    am[(r, c)] -= h;
                }
                let want = (f(&ap) - f(&am)) / (2.0 * h);
                let got = if i == j { abar[(i, i)] } else { abar[(i, j)] + abar[(j, i)] };
                assert!((got - want).abs() < 1e-6, "({i},{j}): {got} vs {want}");
            }
        }
    }

    fn random_spd(n: usize, seed: u64) -> Mat<f64> {
        let mut rng = rand_pcg::Pcg64::seed_from_u64(seed);
        let b = Mat::from_fn(n, n, |_, _| rng.random::<f64>() - 0.5);
        let mut a = &b * b.transpose();
        for i in 0..n {
            a[(i, i)] += 0.1;
        }
        a
    }

    #[test]
    fn cholesky_reconstructs_and_solves() {
        // Both sides of the small-matrix threshold (plain loops up to SMALL, faer above).
        for (n, seed) in [(1, 1), (5, 2), (SMALL, 4), (SMALL + 1, 5), (40, 3)] {
            let a = random_spd(n, seed);
            let c = Chol::factor(a.as_ref(), "A").unwrap();
            assert_eq!(c.jitter(), 0.0);
            assert!((0..n).all(|j| (0..j).all(|i| c.l()[(i, j)] == 0.0)), "L is not lower triangular");
            let tol = 8.0 * n as f64 * f64::EPSILON * 100.0;
            assert!((&c.reconstruct() - &a).norm_max() < tol);
            let b = Mat::from_fn(n, 3, |i, j| (i + 2 * j) as f64 - 1.0);
            let x = c.solve(b.as_ref());
            assert!((&a * &x - &b).norm_max() < 1e4 * tol);
            assert!((c.l() * c.solve_l(b.as_ref()) - &b).norm_max() < 1e4 * tol);
            assert!((c.l().transpose() * c.solve_lt(b.as_ref()) - &b).norm_max() < 1e4 * tol);
        }
    }

    #[test]
    fn refactoring_in_place_matches_a_fresh_factor_and_recovers_from_failures() {
        for n in [4, SMALL + 3] {
            let mut work = Chol::workspace(n);
            for seed in 0..3 {
                let a = random_spd(n, 20 + seed);
                work.refactor_lower("A", |j, col| col.copy_from_slice(a.col(j).try_as_col_major().unwrap().as_slice().split_at(j).1))
                    .unwrap();
                let fresh = Chol::factor(a.as_ref(), "A").unwrap();
                assert!((work.l() - fresh.l()).norm_max() < 1e-12, "n = {n}, seed {seed}: differs from a fresh factor");
                assert!((0..n).all(|j| (0..j).all(|i| work.l()[(i, j)] == 0.0)), "upper triangle written");
                // An indefinite matrix (pivot 2 fails) and a NaN are reported, and the next call works.
                let err = work.refactor_lower("B", |j, col| {
                    col.iter_mut().enumerate().for_each(|(k, v)| {
                        *v = if k > 0 {
                            0.0
                        } else if j == 2 {
                            -1.0
                        } else {
                            1.0
                        }
                    })
                });
                assert!(matches!(err, Err(LinalgError::NotPositiveDefinite { pivot: 2, .. })), "{err:?}");
                let err = work.refactor_lower("B", |_, col| col.fill(f64::NAN));
                assert!(matches!(err, Err(LinalgError::NonFinite { .. })), "{err:?}");
            }
        }
    }

    #[test]
    fn pencil_trace_matches_a_cholesky_at_every_eta() {
        let n = 30;
        let a = random_spd(n, 3);
        let b = random_spd(n, 4);
        // Indefinite D: A + eta D stops being PD at some eta > 0.
        let d = Mat::from_fn(n, n, |i, j| b[(i, j)] - 0.6 * a[(i, j)] - if i == j { 0.3 } else { 0.0 });
        let pencil = SymPencil::new(a.as_ref(), d.as_ref(), "A").unwrap();
        let (mut pd, mut not_pd) = (0, 0);
        for k in 0..=40 {
            let eta = -1.0 + 0.1 * k as f64;
            let m = &a + &d * faer::Scale(eta);
            match Chol::factor(m.as_ref(), "A + eta D") {
                Ok(c) => {
                    pd += 1;
                    let x = c.solve(d.as_ref());
                    let tr: f64 = (0..n).map(|i| x[(i, i)]).sum();
                    let got = pencil.trace_inv_times_d(eta).expect("PD by Cholesky");
                    assert!((got - tr).abs() < 1e-8 * tr.abs().max(1.0), "eta {eta}: {got} vs {tr}");
                }
                Err(_) => {
                    not_pd += 1;
                    assert!(pencil.trace_inv_times_d(eta).is_none(), "eta {eta}: not PD, yet a value");
                }
            }
        }
        assert!(pd > 5 && not_pd > 5, "the grid must cross the PD boundary: {pd} PD, {not_pd} not");
    }

    #[test]
    fn log_det_equals_sum_of_log_eigenvalues() {
        let a = random_spd(12, 7);
        let eig = a.self_adjoint_eigenvalues(Side::Lower).unwrap();
        let want: f64 = eig.iter().map(|l| l.ln()).sum();
        let got = Chol::factor(a.as_ref(), "A").unwrap().log_det();
        assert!((got - want).abs() < 1e-10 * want.abs().max(1.0));
    }

    #[test]
    fn jitter_rescues_a_singular_matrix_and_is_reported() {
        // Rank-one 3x3: not PD, needs jitter.
        let v = [1.0, 2.0, 3.0];
        let a = Mat::from_fn(3, 3, |i, j| v[i] * v[j]);
        assert!(Chol::factor(a.as_ref(), "K").is_err());
        let c = Chol::factor_with_jitter(a.as_ref(), "K").unwrap();
        assert!(c.jitter() > 0.0);
        // The same through the blocked path (order above SMALL).
        let w: Vec<f64> = (0..SMALL + 3).map(|i| i as f64 + 1.0).collect();
        let big = Mat::from_fn(w.len(), w.len(), |i, j| w[i] * w[j]);
        assert!(Chol::factor(big.as_ref(), "K").is_err());
        assert!(Chol::factor_with_jitter(big.as_ref(), "K").unwrap().jitter() > 0.0);
        // An indefinite matrix stays an error that names it.
        let bad = Mat::from_fn(2, 2, |i, j| if i == j { -1.0 } else { 0.0 });
        let err = Chol::factor_with_jitter(bad.as_ref(), "K_glass").unwrap_err();
        assert!(err.to_string().contains("K_glass"));
    }

    #[test]
    fn log_sum_exp_and_softmax_are_stable_and_shift_invariant() {
        let x = [1000.0, 1001.0, 999.0];
        let lse = log_sum_exp(&x);
        let want = 1001.0 + ((-1.0f64).exp() + 1.0 + (-2.0f64).exp()).ln();
        assert!((lse - want).abs() < 1e-12);
        let mut p = x;
        softmax_in_place(&mut p);
        let mut q = [1.0, 2.0, 0.0];
        softmax_in_place(&mut q);
        // lse ~ 1001 carries an absolute rounding error of ~1001 eps, which exp passes on.
        for i in 0..3 {
            assert!((p[i] - q[i]).abs() < 1e-12);
        }
        assert!((p.iter().sum::<f64>() - 1.0).abs() < 1e-12);
        // softmax(1, 2, 0) = (e, e^2, 1) / (e + e^2 + 1), written out.
        let e = std::f64::consts::E;
        let want = [e / (e + e * e + 1.0), e * e / (e + e * e + 1.0), 1.0 / (e + e * e + 1.0)];
        for i in 0..3 {
            assert!((q[i] - want[i]).abs() < 1e-15, "softmax(1, 2, 0) = {q:?} vs {want:?}");
        }
        assert_eq!(argmax(&[0.1, 0.5, 0.5]), 1);
    }

    #[test]
    fn log_sum_exp_of_infinities_and_nan() {
        let (inf, nan) = (f64::INFINITY, f64::NAN);
        assert_eq!(log_sum_exp(&[]), -inf);
        assert_eq!(log_sum_exp(&[-inf, -inf]), -inf);
        assert_eq!(log_sum_exp(&[-inf, 2.0]), 2.0);
        assert_eq!(log_sum_exp(&[inf, 0.0]), inf);
        for x in [[nan, -inf], [nan, inf], [nan, 1.0], [1.0, nan]] {
            assert!(log_sum_exp(&x).is_nan(), "{x:?}");
        }
    }
}
