//! Small dense symmetric matrices (the C x C blocks of multi-class GP methods): identity,
//! symmetrisation, tr(AB), eigendecomposition (cyclic Jacobi up to 12 x 12, where faer's general
//! routine has a large fixed cost per call) and a PSD square-root factor.
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

/// Symmetric eigendecomposition (eigenvalues ascending); cyclic Jacobi for the small C x C
/// blocks (faer's general routine carries a large fixed cost per call).
pub fn eigh(a: &Mat<f64>) -> Result<(Vec<f64>, Mat<f64>), LinalgError> {
    if a.nrows() <= 12 {
        return jacobi_eigh(a);
    }
    let e = sym(a)
        .self_adjoint_eigen(Side::Lower)
        .map_err(|e| LinalgError::NoConvergence { what: format!("symmetric eigendecomposition ({e:?})") })?;
    let s = e.S().column_vector();
    Ok(((0..a.nrows()).map(|i| s[i]).collect(), e.U().to_owned()))
}

pub fn jacobi_eigh(a0: &Mat<f64>) -> Result<(Vec<f64>, Mat<f64>), LinalgError> {
    // Row-major copies on the stack (n <= 12); called thousands of times per fit.
    const MAX: usize = 12;
    let n = a0.nrows();
    assert!(n <= MAX, "jacobi_eigh is for small matrices");
    let mut a = [0.0; MAX * MAX];
    let mut v = [0.0; MAX * MAX];
    for i in 0..n {
        for j in 0..n {
            a[i * n + j] = 0.5 * (a0[(i, j)] + a0[(j, i)]);
        }
        v[i * n + i] = 1.0;
    }
    if a[..n * n].iter().any(|x| !x.is_finite()) {
        return Err(LinalgError::NonFinite { what: "a matrix to eigendecompose".into() });
    }
    for _sweep in 0..60 {
        let off: f64 = (0..n).map(|i| (0..n).filter(|&j| j != i).map(|j| a[i * n + j] * a[i * n + j]).sum::<f64>()).sum();
        let scale: f64 = (0..n).map(|i| a[i * n + i] * a[i * n + i]).sum::<f64>();
        if off <= 1e-30 * scale.max(1e-300) || off == 0.0 {
            break;
        }
        for p in 0..n {
            for q in p + 1..n {
                let apq = a[p * n + q];
                if apq == 0.0 {
                    continue;
                }
                let theta = (a[q * n + q] - a[p * n + p]) / (2.0 * apq);
                let t = theta.signum() / (theta.abs() + (theta * theta + 1.0).sqrt());
                let t = if theta == 0.0 { 1.0 } else { t };
                let c = 1.0 / (t * t + 1.0).sqrt();
                let s = t * c;
                for k in 0..n {
                    let (akp, akq) = (a[k * n + p], a[k * n + q]);
                    a[k * n + p] = c * akp - s * akq;
                    a[k * n + q] = s * akp + c * akq;
                }
                for k in 0..n {
                    let (apk, aqk) = (a[p * n + k], a[q * n + k]);
                    a[p * n + k] = c * apk - s * aqk;
                    a[q * n + k] = s * apk + c * aqk;
                }
                for k in 0..n {
                    let (vkp, vkq) = (v[k * n + p], v[k * n + q]);
                    v[k * n + p] = c * vkp - s * vkq;
                    v[k * n + q] = s * vkp + c * vkq;
                }
            }
        }
    }
    let mut idx: Vec<usize> = (0..n).collect();
    idx.sort_by(|&i, &j| a[i * n + i].total_cmp(&a[j * n + j]));
    let lam = idx.iter().map(|&i| a[i * n + i]).collect();
    let u = Mat::from_fn(n, n, |r, k| v[r * n + idx[k]]);
    Ok((lam, u))
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

    #[test]
    fn jacobi_eigh_reconstructs_and_orders() {
        let b = Mat::from_fn(5, 5, |i, j| ((i * 7 + j * 3) % 5) as f64 - 2.0 + if i == j { 1.0 } else { 0.0 });
        let a = sym(&(&b * b.transpose()));
        let (lam, u) = jacobi_eigh(&a).unwrap();
        let rec = Mat::from_fn(5, 5, |i, j| (0..5).map(|k| u[(i, k)] * lam[k] * u[(j, k)]).sum::<f64>());
        assert!((&rec - &a).norm_max() < 1e-10);
        assert!(lam.windows(2).all(|w| w[0] <= w[1]));
        let want = a.self_adjoint_eigenvalues(Side::Lower).unwrap();
        for (x, y) in lam.iter().zip(&want) {
            assert!((x - y).abs() < 1e-10);
        }
    }
}
