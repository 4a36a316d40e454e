//! The gradient of the optimised bound w.r.t. kernel and K^c parameters (envelope theorem).
use super::*;

/// The envelope-theorem gradient at the variational optimum is d log Z_h* = 1/2 tr(Q dK) with
/// Q = alpha alpha^T - T (notes D§4.3). With dK = dKx (x) Kc or Kx (x) dKc only two contractions
/// of Q are needed: R_ij = sum_ab Kc_ab Q_(ia,jb) and G_ab = sum_ij Kx_ij Q_(ia,jb). One pass over
/// the dense T gives both (forming T is the expensive part); G only when K^c is learned.
pub(super) struct Envelope {
    pub(super) r: Mat<f64>,
    pub(super) g: Option<Mat<f64>>,
}

/// `with_kc`: also G (only K^c learning needs it).
pub(super) fn envelope(pr: &Prior, fit: &VarFit, with_kc: bool) -> Envelope {
    let (n, c) = (pr.n, pr.c);
    let alpha = fit.alpha(pr);
    if let (false, TRep::Fx { lb, lwt }) = (with_kc, &fit.st.v.t) {
        return Envelope { r: r_from_factor(pr, &alpha, lb, lwt), g: None };
    }
    let t = fit.t_dense();
    let mut r = Mat::<f64>::zeros(n, n);
    let mut g = Mat::<f64>::zeros(c, c);
    for i in 0..n {
        for j in 0..n {
            let kx = pr.kx[(i, j)];
            let mut rij = 0.0;
            for a in 0..c {
                for b in 0..c {
                    let q = alpha[i * c + a] * alpha[j * c + b] - t[(i * c + a, j * c + b)];
                    rij += pr.kc[(a, b)] * q;
                    if with_kc {
                        g[(a, b)] += kx * q;
                    }
                }
            }
            r[(i, j)] = rij;
        }
    }
    Envelope { r, g: with_kc.then_some(g) }
}

/// R = A K^c A^T - sum_ab K^c_ab Z_a^T Z_b for T = Z^T Z, Z = L_B^-1 L_W^T (r x nC), with A the
/// n x C matrix of alpha and Z_a Z's columns of class a (r x n): r n^2 C multiply-adds (and the
/// solve for Z, r^2 n C / 2) instead of the dense T's r (n C)^2. Read as a (r C) x n matrix,
/// column-major Z stacks the Z_a (datum i's column is [Z_1 e_i; ...; Z_C e_i]), so the sum is
/// one product with the same stack of Y_a = sum_b K^c_ab Z_b.
fn r_from_factor(pr: &Prior, alpha: &[f64], lb: &Chol, lwt: &Mat<f64>) -> Mat<f64> {
    let (n, c) = (pr.n, pr.c);
    let r = lb.dim();
    // Z and Y in unpadded column-major storage, so that each reads as its (r C) x n stack.
    let mut z = vec![0.0; r * n * c];
    let mut zm = faer::MatMut::from_column_major_slice_mut(&mut z, r, n * c);
    zm.copy_from(lwt);
    solve_lower_triangular_in_place(lb.l(), zm.as_mut(), Par::Seq);
    let zm = faer::MatRef::from_column_major_slice(&z, r, n * c);
    let mut y = vec![0.0; r * n * c];
    let mut ym = faer::MatMut::from_column_major_slice_mut(&mut y, r, n * c);
    for i in 0..n {
        matmul(ym.as_mut().subcols_mut(i * c, c), Accum::Replace, zm.subcols(i * c, c), pr.kc.as_ref(), 1.0, Par::Seq);
    }
    let a = MatRef::from_row_major_slice(alpha, n, c);
    let mut out = a * pr.kc.as_ref() * a.transpose();
    let zs = MatRef::from_column_major_slice(&z, r * c, n);
    let ys = MatRef::from_column_major_slice(&y, r * c, n);
    matmul(out.as_mut(), Accum::Add, zs.transpose(), ys, -1.0, Par::Seq);
    out
}

/// d log Z_h* / d(log kernel parameters) = 1/2 tr(R dKx) (dK = dKx (x) Kc).
pub(super) fn hyper_gradient(env: &Envelope, dkx: &[Mat<f64>]) -> Vec<f64> {
    dkx.iter().map(|d| 0.5 * trace_prod(d.as_ref(), env.r.transpose())).collect()
}
