//! Small dense symmetric matrices (the C x C blocks of multi-class GP methods): identity,
//! symmetrisation, tr(AB), eigendecomposition (nalgebra's up to 12 x 12, where faer's general routine
//! has a large fixed cost per call) and a PSD square-root factor.
use super::LinalgError;
use faer::{Mat, MatRef, Side};

pub fn eye(n: usize) -> Mat<f64> {
    Mat::from_fn(n, n, |i, j| if i == j { 1.0 } else { 0.0 })
}

pub fn sym(a: &Mat<f64>) -> Mat<f64> {
    Mat::from_fn(a.nrows(), a.ncols(), |i, j| 0.5 * (a[(i, j)] + a[(j, i)]))
}

pub fn trace_prod(a: MatRef<'_, f64>, b: MatRef<'_, f64>) -> f64 {
    // tr(A B) = sum_ij A_ij B_ji
    let mut s = 0.0;
    for i in 0..a.nrows() {
        for j in 0..a.ncols() {
            s += a[(i, j)] * b[(j, i)];
        }
    }
    s
}

/// Symmetric eigendecomposition of sym(A): eigenvalues ascending, eigenvectors as columns.
///
/// Orders up to 12 (the C x C blocks, called per datum thousands of times per fit) go to
/// nalgebra's Householder tridiagonalisation + implicit QR, about 2x (order 6) to 3.5x (order
/// 10) faster than a cyclic Jacobi sweep here (benches/PROFILE.md, session 40); faer's routine is
/// kept for larger matrices, where nalgebra's unblocked reduction falls behind and faer's fixed
/// cost per call no longer matters.
pub fn eigh(a: &Mat<f64>) -> Result<(Vec<f64>, Mat<f64>), LinalgError> {
    let n = a.nrows();
    if (0..n).any(|i| (0..n).any(|j| !a[(i, j)].is_finite())) {
        return Err(LinalgError::NonFinite { what: "a matrix to eigendecompose".into() });
    }
    if n <= 12 {
        let m = nalgebra::DMatrix::from_fn(n, n, |i, j| 0.5 * (a[(i, j)] + a[(j, i)]));
        let e = nalgebra::SymmetricEigen::try_new(m, f64::EPSILON, 0)
            .ok_or_else(|| LinalgError::NoConvergence { what: "symmetric eigendecomposition (small)".into() })?;
        let mut idx: Vec<usize> = (0..n).collect();
        idx.sort_by(|&i, &j| e.eigenvalues[i].total_cmp(&e.eigenvalues[j]));
        let lam = idx.iter().map(|&k| e.eigenvalues[k]).collect();
        return Ok((lam, Mat::from_fn(n, n, |r, k| e.eigenvectors[(r, idx[k])])));
    }
    let e = sym(a)
        .self_adjoint_eigen(Side::Lower)
        .map_err(|e| LinalgError::NoConvergence { what: format!("symmetric eigendecomposition ({e:?})") })?;
    let s = e.S().column_vector();
    Ok(((0..n).map(|i| s[i]).collect(), e.U().to_owned()))
}

/// F with F F^T = A for a PSD C x C matrix A: the columns U_k sqrt(lam_k) of its eigenvalues
/// above 1e-12 of the largest (below that they are rounding noise or negligible).
pub fn psd_factor(a: &Mat<f64>) -> Result<Mat<f64>, LinalgError> {
    let (lam, u) = eigh(a)?;
    let lmax = lam.iter().copied().fold(0.0, f64::max);
    let keep: Vec<usize> = (0..lam.len()).filter(|&k| lam[k] > 1e-12 * lmax.max(1e-300) && lam[k] > 0.0).collect();
    Ok(Mat::from_fn(a.nrows(), keep.len(), |p, q| u[(p, keep[q])] * lam[keep[q]].sqrt()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Against faer's eigenvalues and the reconstruction U diag(lam) U^T = A, at every small order
    /// and one above the switch, with repeated eigenvalues (a rank-deficient Gram matrix).
    #[test]
    fn eigh_reconstructs_orders_and_agrees_with_faer() {
        for n in [1usize, 2, 3, 5, 6, 10, 12, 13] {
            let b = Mat::from_fn(n, n.saturating_sub(2).max(1), |i, j| ((i * 7 + j * 3) % 5) as f64 - 2.0 + if i == j { 1.0 } else { 0.0 });
            let a = sym(&(&b * b.transpose()));
            let (lam, u) = eigh(&a).unwrap();
            let rec = Mat::from_fn(n, n, |i, j| (0..n).map(|k| u[(i, k)] * lam[k] * u[(j, k)]).sum::<f64>());
            assert!((&rec - &a).norm_max() < 1e-10 * a.norm_max(), "order {n}");
            let utu = u.transpose() * &u;
            assert!((&utu - eye(n)).norm_max() < 1e-12, "order {n}: U not orthonormal");
            assert!(lam.windows(2).all(|w| w[0] <= w[1]), "order {n}: not ascending");
            let want = a.self_adjoint_eigenvalues(Side::Lower).unwrap();
            for (x, y) in lam.iter().zip(&want) {
                assert!((x - y).abs() < 1e-10 * a.norm_max(), "order {n}: {x} vs {y}");
            }
        }
        let mut bad = eye(3);
        bad[(0, 1)] = f64::NAN;
        assert!(eigh(&bad).is_err());
    }
}
