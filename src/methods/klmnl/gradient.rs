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

/// d log Z_h* / d(log kernel parameters) = 1/2 tr(R dKx) (dK = dKx (x) Kc).
pub(super) fn hyper_gradient(env: &Envelope, dkx: &[Mat<f64>]) -> Vec<f64> {
    dkx.iter().map(|d| 0.5 * trace_prod(d.as_ref(), env.r.transpose())).collect()
}
