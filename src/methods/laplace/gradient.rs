//! The gradient of the Laplace log evidence w.r.t. the kernel's log-parameters (GPML Alg. 5.1
//! for the multinomial logit, eq. 5.23 with the implicit term through the mode).
use super::newton::{column, find_mode, Mode};
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
///
/// Also returns the mode's derivative, which the implicit term computes on the way:
/// df-hat/dtheta_p = (I + K W)^{-1} dK_p a, class-major [C n, P].
pub(super) fn log_evidence_grad(mode: &Mode, K: &Mat<f64>, dKs: &[Mat<f64>]) -> (Vec<f64>, Mat<f64>) {
    let (n, C) = (mode.n, mode.n_classes);
    // Every class's E_c side by side, [n, C n], so that the solves with M's factor and the
    // product with K each run once over C n columns (2.5 n^3 multiply-adds a class in all).
    let mut E_all = Mat::<f64>::zeros(n, n * C);
    for (c, e) in mode.E.iter().enumerate() {
        E_all.as_mut().subcols_mut(c * n, n).copy_from(e);
    }
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
    // all classes) and H_c = L_M^{-1} E_c K = L_M^{-1} (K E_c)^T. With X_c = (K E_c)^T both
    // (K E_c K)_ii = sum_k X_c[k, i] K[k, i] and H's columns are contiguous.
    let KE_all = K * &E_all;
    let mut X_all = Mat::<f64>::zeros(n, n * C);
    for c in 0..C {
        X_all.as_mut().subcols_mut(c * n, n).copy_from(KE_all.subcols(c * n, n).transpose());
    }
    let KEK_diag: Vec<Vec<f64>> = (0..C)
        .map(|c| {
            (0..n).map(|i| column(X_all.as_ref(), c * n + i).iter().zip(column(K.as_ref(), i)).map(|(x, k)| x * k).sum::<f64>()).collect()
        })
        .collect();
    let H_all = mode.M.solve_l(X_all.as_ref());
    let mut s2 = vec![0.0; n * C];
    let mut V = vec![vec![0.0; C]; C];
    for i in 0..n {
        for c in 0..C {
            let hc = column(H_all.as_ref(), c * n + i);
            for d in 0..=c {
                let hd = column(H_all.as_ref(), d * n + i);
                let cross: f64 = hc.iter().zip(hd).map(|(x, y)| x * y).sum();
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
    let explicit = dKs.iter().map(|dK| {
        0.5 * (0..n).map(|k| column(Q.as_ref(), k).iter().zip(column(dK.as_ref(), k)).map(|(q, d)| q * d).sum::<f64>()).sum::<f64>()
    });
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
    let mut df = Mat::<f64>::zeros(n * C, P);
    for c in 0..C {
        let rb = &eb[c] - &mode.E[c] * &t;
        let krb = K * &rb;
        for (p, imp) in implicit.iter_mut().enumerate() {
            for i in 0..n {
                df[(c * n + i, p)] = b[c][(i, p)] - krb[(i, p)];
            }
            *imp += (0..n).map(|i| s2[c * n + i] * df[(c * n + i, p)]).sum::<f64>();
        }
    }
    (explicit.zip(implicit).map(|(e, i)| e + i).collect(), df)
}

/// da-hat/dtheta from df-hat/dtheta ([C n, P], class-major): a-hat = y - pi(f-hat), so
/// da = -W df with W's datum blocks diag(pi_i) - pi_i pi_i^T.
pub(super) fn da_from_df(mode: &Mode, df: &Mat<f64>) -> Mat<f64> {
    let (n, C) = (mode.n, mode.n_classes);
    let mut da = Mat::<f64>::zeros(n * C, df.ncols());
    for p in 0..df.ncols() {
        for i in 0..n {
            let pdf: f64 = (0..C).map(|c| mode.pi[c * n + i] * df[(c * n + i, p)]).sum();
            for c in 0..C {
                let k = c * n + i;
                da[(k, p)] = -mode.pi[k] * (df[(k, p)] - pdf);
            }
        }
    }
    da
}

/// log q(y | X, theta) and its gradient w.r.t. the kernel's log-parameters.
pub(super) fn evidence_and_grad(
    kernel: &dyn Kernel,
    problem: &Problem,
    params: &LaplaceParams,
    warm: &[&[f64]],
) -> Result<(f64, Vec<f64>, Mode), FitError> {
    let K = kernel.gram(problem.x);
    let mut mode = find_mode(&K, problem.y, problem.n_classes, params, warm)?;
    let dKs = kernel.gram_grads(problem.x, &K);
    let (grad, df) = log_evidence_grad(&mode, &K, &dKs);
    mode.da_dtheta = Some(da_from_df(&mode, &df));
    Ok((mode.log_evidence, grad, mode))
}
