//! The gradient of the Laplace log evidence w.r.t. the kernel's log-parameters (GPML Alg. 5.1
//! for the multinomial logit, eq. 5.23 with the implicit term through the mode).
use super::newton::{find_mode, Mode};
use super::LaplaceParams;
use crate::kernels::Kernel;
use crate::linalg::{add_gram_lower, symmetrize_from_lower};
use crate::methods::{FitError, Problem};
use faer::{Mat, MatRef};

/// Gradient of the approximate log marginal likelihood w.r.t. the kernel's log-parameters:
/// the explicit part 1/2 a^T dK a - 1/2 tr((K + W^{-1})^{-1} dK) plus the implicit part
/// through f-hat, s2^T (I + K W)^{-1} dK (y - pi), where
/// s2 = d/df [-1/2 log |I + K W|] = -1/2 tr((K^{-1} + W)^{-1} dW/df). Per datum, with V the
/// C x C posterior covariance block and dW/df_k from dpi_c/df_k = pi_c (delta_ck - pi_k):
/// s2_k = -1/2 pi_k [V_kk - sum_c pi_c V_cc - 2 (V pi)_k + 2 pi^T V pi].
pub(super) fn log_evidence_grad(mode: &Mode, K: &Mat<f64>, dKs: &[Mat<f64>]) -> Vec<f64> {
    let (n, C) = (mode.n, mode.n_classes);
    // Every class's E_c side by side, [n, C n], so that the solves with M's factor and the
    // product with K each run once over C n columns (2.5 n^3 multiply-adds a class in all).
    let E_all = Mat::from_fn(n, n * C, |i, j| mode.E[j / n][(i, j % n)]);
    // P_c = M^{-1/2} E_c (L_M^{-1} E_c), so that E_c M^{-1} E_c' = P_c^T P_c'.
    let P_all = mode.M.solve_l(E_all.as_ref());
    // (K + W^{-1})^{-1} restricted to the shared-kernel trace: R_sum = sum_c (E_c - P_c^T P_c),
    // its lower triangle by symmetric rank-n updates, then mirrored.
    let mut R_sum = Mat::<f64>::zeros(n, n);
    for c in 0..C {
        R_sum += &mode.E[c];
        add_gram_lower(R_sum.as_mut(), P_all.subcols(c * n, n), -1.0);
    }
    symmetrize_from_lower(&mut R_sum);
    // a a^T summed over classes.
    let AAt = Mat::from_fn(n, n, |i, k| (0..C).map(|c| mode.a[c * n + i] * mode.a[c * n + k]).sum::<f64>());

    // Posterior covariance blocks V_i[c, c'] = cov(f_i^c, f_i^c') under (K^{-1} + W)^{-1}
    // = delta_cc' (K_ii - (K E_c K)_ii) + (K E_c M^{-1} E_c' K)_ii, from K E_c (one product for
    // all classes) and H_c = L_M^{-1} E_c K = L_M^{-1} (K E_c)^T.
    let KE_all = K * &E_all;
    let KEK_diag: Vec<Vec<f64>> =
        (0..C).map(|c| (0..n).map(|i| (0..n).map(|k| KE_all[(i, c * n + k)] * K[(k, i)]).sum::<f64>()).collect()).collect();
    let H_all = mode.M.solve_l(Mat::from_fn(n, n * C, |r, j| KE_all[(j % n, (j / n) * n + r)]).as_ref());
    let H: Vec<MatRef<'_, f64>> = (0..C).map(|c| H_all.subcols(c * n, n)).collect();
    let mut s2 = vec![0.0; n * C];
    let mut V = vec![vec![0.0; C]; C];
    for i in 0..n {
        for c in 0..C {
            for d in 0..=c {
                let cross: f64 = (0..n).map(|r| H[c][(r, i)] * H[d][(r, i)]).sum();
                let v = cross + if c == d { K[(i, i)] - KEK_diag[c][i] } else { 0.0 };
                V[c][d] = v;
                V[d][c] = v;
            }
        }
        let p: Vec<f64> = (0..C).map(|c| mode.pi[c * n + i]).collect();
        let vp: Vec<f64> = (0..C).map(|c| (0..C).map(|d| V[c][d] * p[d]).sum()).collect();
        let pvp: f64 = (0..C).map(|c| p[c] * vp[c]).sum();
        let pdiag: f64 = (0..C).map(|c| p[c] * V[c][c]).sum();
        for k in 0..C {
            s2[k * n + i] = -0.5 * p[k] * (V[k][k] - pdiag - 2.0 * vp[k] + 2.0 * pvp);
        }
    }

    // The explicit term 1/2 tr((a a^T - R_sum) dK) of every parameter.
    let Q = &AAt - &R_sum;
    let explicit = dKs.iter().map(|dK| 0.5 * (0..n).map(|k| (0..n).map(|i| Q[(i, k)] * dK[(i, k)]).sum::<f64>()).sum::<f64>());
    // The implicit term s2^T (I + K W)^{-1} dK a, for all P parameters at once: per class c the
    // columns b_pc = dK_p a_c, [n, P], then (I + K W)^{-1} b = b - K (K + W^{-1})^{-1} b with
    // (K + W^{-1})^{-1} b = E b - E M^{-1} sum_c E_c b_c: every product a matrix product over the
    // P parameters (they were 4 C + 1 matrix-vector products a parameter).
    let P = dKs.len();
    let A = MatRef::from_column_major_slice(&mode.a, n, C);
    let dKA: Vec<Mat<f64>> = dKs.iter().map(|dK| dK * A).collect(); // [n, C] a parameter
    let b: Vec<Mat<f64>> = (0..C).map(|c| Mat::from_fn(n, P, |i, p| dKA[p][(i, c)])).collect();
    let eb: Vec<Mat<f64>> = (0..C).map(|c| &mode.E[c] * &b[c]).collect();
    let mut sum_eb = Mat::<f64>::zeros(n, P);
    for e in &eb {
        sum_eb += e;
    }
    let t = mode.M.solve(sum_eb.as_ref());
    let mut implicit = vec![0.0; P];
    for c in 0..C {
        let rb = &eb[c] - &mode.E[c] * &t;
        let krb = K * &rb;
        for (p, imp) in implicit.iter_mut().enumerate() {
            *imp += (0..n).map(|i| s2[c * n + i] * (b[c][(i, p)] - krb[(i, p)])).sum::<f64>();
        }
    }
    explicit.zip(implicit).map(|(e, i)| e + i).collect()
}

/// log q(y | X, theta) and its gradient w.r.t. the kernel's log-parameters.
pub(super) fn evidence_and_grad(
    kernel: &dyn Kernel,
    problem: &Problem,
    params: &LaplaceParams,
    warm: Option<&[f64]>,
) -> Result<(f64, Vec<f64>, Mode), FitError> {
    let K = kernel.gram(problem.x);
    let mode = find_mode(&K, problem.y, problem.n_classes, params, warm)?;
    let dKs = kernel.gram_grads(problem.x, &K);
    let grad = log_evidence_grad(&mode, &K, &dKs);
    Ok((mode.log_evidence, grad, mode))
}
