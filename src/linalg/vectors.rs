//! Small vector and slice helpers: columns as slices, dot and axpy, matvec, log-sum-exp,
//! softmax and arg-max.
use faer::{Mat, MatRef};

/// A column vector as an n x 1 matrix.
pub fn col(v: &[f64]) -> Mat<f64> {
    Mat::from_fn(v.len(), 1, |i, _| v[i])
}

/// The first column of `m` as a Vec.
pub fn to_vec(m: MatRef<'_, f64>) -> Vec<f64> {
    (0..m.nrows()).map(|i| m[(i, 0)]).collect()
}

/// y += a x, element by element. Compiled for AVX-512 and AVX2 as well, chosen at run time:
/// one multiply and one add per element (Rust never fuses them), so every target gives the
/// same bits.
#[multiversion::multiversion(targets("x86_64+avx512f", "x86_64+avx2"))]
pub fn axpy(y: &mut [f64], a: f64, x: &[f64]) {
    assert_eq!(y.len(), x.len());
    for (yi, &xi) in y.iter_mut().zip(x) {
        *yi += xi * a;
    }
}

pub fn dot(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// Column j of an owned matrix as a slice (faer stores a `Mat` column-major).
pub fn col_slice(a: &Mat<f64>, j: usize) -> &[f64] {
    a.col(j).try_as_col_major().expect("an owned Mat is column-major").as_slice()
}

/// Column j of an owned matrix as a mutable slice.
pub fn col_slice_mut(a: &mut Mat<f64>, j: usize) -> &mut [f64] {
    a.col_mut(j).try_as_col_major_mut().expect("an owned Mat is column-major").as_slice_mut()
}

/// A v for a vector v.
pub fn matvec(a: MatRef<'_, f64>, v: &[f64]) -> Vec<f64> {
    assert_eq!(a.ncols(), v.len());
    let mut out = vec![0.0; a.nrows()];
    for j in 0..a.ncols() {
        let vj = v[j];
        if vj != 0.0 {
            // A contiguous column runs as a plain slice loop (vectorised, no bounds checks);
            // each out[i] sees the same sums in the same order either way.
            match a.col(j).try_as_col_major() {
                Some(col) => out.iter_mut().zip(col.as_slice()).for_each(|(o, x)| *o += x * vj),
                None => out.iter_mut().enumerate().for_each(|(i, o)| *o += a[(i, j)] * vj),
            }
        }
    }
    out
}

/// log sum_i exp(x_i), without overflow; -inf for an empty slice (or all entries -inf), +inf
/// if an entry is +inf, NaN if an entry is NaN.
pub fn log_sum_exp(x: &[f64]) -> f64 {
    let max = x.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if !max.is_finite() {
        // f64::max passes over NaN: a NaN entry must not vanish behind an infinite one.
        return if x.iter().any(|v| v.is_nan()) { f64::NAN } else { max };
    }
    max + x.iter().map(|v| (v - max).exp()).sum::<f64>().ln()
}

/// Every row (length `c`) of a row-major `x` shifted by its maximum and exponentiated in place,
/// with one vectorised exp for all rows; returns the maxima. Row sums then give log-sum-exp
/// (max + ln sum) and the softmax (entry / sum).
pub fn exp_shifted_rows(x: &mut [f64], c: usize) -> Vec<f64> {
    let max: Vec<f64> = x.chunks_exact(c).map(|row| row.iter().copied().fold(f64::NEG_INFINITY, f64::max)).collect();
    for (row, m) in x.chunks_exact_mut(c).zip(&max) {
        for v in row.iter_mut() {
            *v -= m;
        }
    }
    crate::special::exp_slice(x);
    max
}

/// softmax(x) in place; returns log sum exp(x).
pub fn softmax_in_place(x: &mut [f64]) -> f64 {
    let lse = log_sum_exp(x);
    for v in x.iter_mut() {
        *v = (*v - lse).exp();
    }
    lse
}

/// Index of the largest entry (the first on ties): the one argmax every method's labels use.
pub fn argmax(x: &[f64]) -> usize {
    let mut best = 0;
    for (i, &v) in x.iter().enumerate() {
        if v > x[best] {
            best = i;
        }
    }
    best
}

/// [m, c] from m rows, each with at least c entries: the first c of each (e.g. per-class values
/// over the classes present in the data when a model has extra, empty ones).
pub fn leading_columns(rows: &[Vec<f64>], c: usize) -> ndarray::Array2<f64> {
    ndarray::Array2::from_shape_fn((rows.len(), c), |(j, q)| rows[j][q])
}
