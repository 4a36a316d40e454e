//! Kronecker-structured helpers for latent vectors laid out class-major:
//! f = [f^1; f^2; ...; f^C], each f^c of length n, so a covariance Kc (x) Kx acts
//! on f without ever forming the nC x nC matrix.
use faer::{Mat, MatRef};

/// The explicit Kronecker product A (x) B (tests and tiny problems only).
pub fn kron(a: MatRef<'_, f64>, b: MatRef<'_, f64>) -> Mat<f64> {
    let (p, q) = (b.nrows(), b.ncols());
    Mat::from_fn(a.nrows() * p, a.ncols() * q, |i, j| a[(i / p, j / q)] * b[(i % p, j % q)])
}

/// (A (x) B) v where v is stacked in blocks of b.ncols(): with V the b.ncols() x a.ncols()
/// matrix whose columns are the blocks, the result is vec(B V A^T). Cost O(pq(m + n)) instead of O(p^2 q^2).
pub fn kron_matvec(a: MatRef<'_, f64>, b: MatRef<'_, f64>, v: &[f64]) -> Vec<f64> {
    let q = b.ncols();
    assert_eq!(v.len(), a.ncols() * q, "kron_matvec: vector length");
    let V = Mat::from_fn(q, a.ncols(), |i, j| v[j * q + i]);
    let out = b * V * a.transpose();
    let p = b.nrows();
    (0..a.nrows() * p).map(|k| out[(k % p, k / p)]).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kron_matvec_equals_explicit_product() {
        let a = Mat::from_fn(3, 2, |i, j| (i as f64 + 1.0) * (j as f64 - 0.5));
        let b = Mat::from_fn(4, 5, |i, j| ((i * 7 + j * 3) % 5) as f64 - 2.0);
        let v: Vec<f64> = (0..10).map(|k| (k as f64).sin()).collect();
        let explicit = crate::linalg::matvec(kron(a.as_ref(), b.as_ref()).as_ref(), &v);
        let fast = kron_matvec(a.as_ref(), b.as_ref(), &v);
        assert_eq!(explicit.len(), 12);
        for (x, y) in explicit.iter().zip(&fast) {
            assert!((x - y).abs() < 1e-12);
        }
    }
}
