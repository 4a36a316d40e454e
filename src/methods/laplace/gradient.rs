//! The gradient of the Laplace log evidence w.r.t. the kernel's log-parameters (GPML Alg. 5.1
//! for the multinomial logit, eq. 5.23 with the implicit term through the mode).
use super::newton::{find_mode, Mode};
use super::LaplaceParams;
use crate::kernels::Kernel;
use crate::linalg::matvec;
use crate::methods::{FitError, Problem};
use faer::Mat;

/// Gradient of the approximate log marginal likelihood w.r.t. the kernel's log-parameters:
/// the explicit part 1/2 a^T dK a - 1/2 tr((K + W^{-1})^{-1} dK) plus the implicit part
/// through f-hat, s2^T (I + K W)^{-1} dK (y - pi), where
/// s2 = d/df [-1/2 log |I + K W|] = -1/2 tr((K^{-1} + W)^{-1} dW/df). Per datum, with V the
/// C x C posterior covariance block and dW/df_k from dpi_c/df_k = pi_c (delta_ck - pi_k):
/// s2_k = -1/2 pi_k [V_kk - sum_c pi_c V_cc - 2 (V pi)_k + 2 pi^T V pi].
pub(super) fn log_evidence_grad(mode: &Mode, K: &Mat<f64>, dKs: &[Mat<f64>]) -> Vec<f64> {
    let (n, C) = (mode.n, mode.n_classes);
    // P_c = M^{-1} E_c so that E_c S^{-1} E_c' = P_c^T P_c'.
    let P: Vec<Mat<f64>> = mode.E.iter().map(|e| mode.M.solve_l(e.as_ref())).collect();
    // (K + W^{-1})^{-1} restricted to the shared-kernel trace: R_sum = sum_c (E_c - P_c^T P_c).
    let mut R_sum = Mat::<f64>::zeros(n, n);
    for c in 0..C {
        R_sum += &mode.E[c];
        R_sum -= P[c].transpose() * &P[c];
    }
    // a a^T summed over classes.
    let AAt = Mat::from_fn(n, n, |i, k| (0..C).map(|c| mode.a[c * n + i] * mode.a[c * n + k]).sum::<f64>());

    // Posterior covariance blocks V_i[c, c'] = cov(f_i^c, f_i^c') under (K^{-1} + W)^{-1}
    // = delta_cc' (K_ii - (K E_c K)_ii) + (K E_c S^{-1} E_c' K)_ii.
    let H: Vec<Mat<f64>> = P.iter().map(|p| p * K).collect(); // M^{-1} E_c K
    let KEK_diag: Vec<Vec<f64>> = mode
        .E
        .iter()
        .map(|e| {
            let G = e * K;
            (0..n).map(|i| (0..n).map(|k| K[(i, k)] * G[(k, i)]).sum::<f64>()).collect()
        })
        .collect();
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

    dKs.iter()
        .map(|dK| {
            let mut explicit = 0.0;
            for i in 0..n {
                for k in 0..n {
                    explicit += (AAt[(i, k)] - R_sum[(i, k)]) * dK[(i, k)];
                }
            }
            explicit *= 0.5;
            // b = dK (y - pi) (= dK a at the mode); (I + K W)^{-1} b = b - K (K + W^{-1})^{-1} b.
            let b: Vec<Vec<f64>> = (0..C).map(|c| matvec(dK.as_ref(), &mode.a[c * n..(c + 1) * n])).collect();
            let eb: Vec<Vec<f64>> = (0..C).map(|c| matvec(mode.E[c].as_ref(), &b[c])).collect();
            let sum_eb: Vec<f64> = (0..n).map(|i| (0..C).map(|c| eb[c][i]).sum()).collect();
            let t = mode.M.solve_vec(&sum_eb);
            let mut implicit = 0.0;
            for c in 0..C {
                let et = matvec(mode.E[c].as_ref(), &t);
                let rb: Vec<f64> = (0..n).map(|i| eb[c][i] - et[i]).collect();
                let krb = matvec(K.as_ref(), &rb);
                implicit += (0..n).map(|i| s2[c * n + i] * (b[c][i] - krb[i])).sum::<f64>();
            }
            explicit + implicit
        })
        .collect()
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
