//! What every whitened sparse GP computes at a block of rows: with A = L^{-1} K(Z, X)
//! (K(Z, Z) = L L^T) and q(v) = N(m, S) over the whitened inducing values, column j gives the
//! marginal q(f_j) = N(a_j^T m, k_jj - a_j^T a_j + a_j^T S a_j). Each method applies its own
//! floor to the variance (rounding can take k_jj - a_j^T a_j a hair below zero).
use faer::Mat;

/// Per column j of A: (a_j^T m, a_j^T a_j, a_j^T (S A)_j), given `sa` = S A.
pub fn projections(a: &Mat<f64>, mean: &[f64], sa: &Mat<f64>) -> Vec<(f64, f64, f64)> {
    (0..a.ncols())
        .map(|j| {
            let (mut mu, mut aa, mut asa) = (0.0, 0.0, 0.0);
            for i in 0..a.nrows() {
                let aij = a[(i, j)];
                mu += aij * mean[i];
                aa += aij * aij;
                asa += aij * sa[(i, j)];
            }
            (mu, aa, asa)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn projections_are_the_marginal_moments_of_a_linear_map() {
        // f = A^T v, v ~ N(m, S): E f_j = a_j^T m, Var f_j = a_j^T S a_j, computed densely.
        let a = Mat::from_fn(3, 4, |i, j| ((i * 4 + j) as f64 * 0.37).sin());
        let mean = [0.5, -1.0, 2.0];
        let s = Mat::from_fn(3, 3, |i, j| if i == j { 1.5 } else { 0.2 });
        let sa = &s * &a;
        for (j, (mu, aa, asa)) in projections(&a, &mean, &sa).into_iter().enumerate() {
            let col: Vec<f64> = (0..3).map(|i| a[(i, j)]).collect();
            let want_mu: f64 = col.iter().zip(&mean).map(|(x, y)| x * y).sum();
            let want_var: f64 = (0..3).flat_map(|i| (0..3).map(move |k| (i, k))).map(|(i, k)| col[i] * s[(i, k)] * col[k]).sum();
            assert!((mu - want_mu).abs() < 1e-14 && (asa - want_var).abs() < 1e-14);
            assert!((aa - col.iter().map(|x| x * x).sum::<f64>()).abs() < 1e-14);
        }
    }
}
