//! What every whitened sparse GP computes at a block of rows: with A = L^{-1} K(Z, X)
//! (K(Z, Z) = L L^T) and q(v) = N(m, S) over the whitened inducing values, column j gives the
//! marginal q(f_j) = N(a_j^T m, k_jj - a_j^T a_j + a_j^T S a_j). Each method applies its own
//! floor to the variance (rounding can take k_jj - a_j^T a_j a hair below zero).
use crate::linalg::Chol;
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

/// The part of dF/dL that holding q(u) fixed adds when the kernel or Z move (the unwhitened
/// parameterisation), for one class with factor L of K(Z, Z), whitened q(v) = N(m, S) and the
/// gradients g_m, g_S of its expected log-likelihood (S symmetric). With q(u) fixed,
/// m_v = L^{-1} m_u and S_v = L^{-1} S_u L^{-T} move with L; for
/// F = E[log lik] - KL(q(v) || N(0, I)), a = dF/dm_v = g_m - m and
/// B = dF/dS_v = g_S - (I - S^{-1}) / 2, dm_v = -L^{-1} dL m_v and
/// dS_v = -L^{-1} dL S_v - (.)^T give dF/dL = -tril(L^{-T} (a m^T + 2 B S)), where
/// 2 B S = 2 g_S S - S + I needs no inverse. Lower triangular, to add to L's adjoint.
///
/// The KL's share (-m m^T - S + I inside the bracket) is counted once per objective: a sum
/// over blocks of rows passes `with_kl` for one block only (without it, only the expected
/// log-likelihood's share g_m m^T + 2 g_S S, which adds up over blocks).
pub fn lbar_holding_u(chol: &Chol, mean: &[f64], cov: &Mat<f64>, g_m: &[f64], g_s: &Mat<f64>, with_kl: bool) -> Mat<f64> {
    let m = mean.len();
    let gs_s = crate::linalg::matmul_par(g_s.as_ref(), cov.as_ref());
    let x = if with_kl {
        Mat::from_fn(m, m, |i, j| (g_m[i] - mean[i]) * mean[j] + 2.0 * gs_s[(i, j)] - cov[(i, j)] + if i == j { 1.0 } else { 0.0 })
    } else {
        Mat::from_fn(m, m, |i, j| g_m[i] * mean[j] + 2.0 * gs_s[(i, j)])
    };
    let t = chol.solve_lt(x.as_ref());
    Mat::from_fn(m, m, |i, j| if i >= j { -t[(i, j)] } else { 0.0 })
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
