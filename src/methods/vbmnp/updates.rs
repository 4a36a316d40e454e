//! The VB fixed point (G&R eqs. 4.1-4.3 with Σ = C (I + C)^{-1}), the bounds it reports, and
//! SQUAREM acceleration of the fixed-kernel iteration.
use super::*;

/// Eq. 4.6 then eqs. 4.3–4.4 and the bound (notes §2.7, "Stable evaluation"):
/// B = (I+C)^{-1} ỹ_prev, m̃ = ỹ_prev - B, ỹ = E_Q(Y)[y] at m̃,
/// ELBO = sum_n log 𝒵_n - 1/2 sum_k m̃_kᵀ B_k - K/2 log|I+C|, evaluated at the consistent
/// (m̃, 𝒵(m̃), C) triple. Returns (m̃, new ỹ, ELBO).
pub(crate) fn vb_step(chol: &Chol, Y_prev: &Mat<f64>, y: &[usize]) -> (Mat<f64>, Mat<f64>, f64) {
    let (M, Y, elbo, _) = vb_step_terms(chol, Y_prev, y);
    (M, Y, elbo)
}

/// `vb_step`, also returning sum_n log Z_n.
pub(super) fn vb_step_terms(chol: &Chol, Y_prev: &Mat<f64>, y: &[usize]) -> (Mat<f64>, Mat<f64>, f64, f64) {
    let (n, K) = (Y_prev.nrows(), Y_prev.ncols());
    let B = chol.solve(Y_prev.as_ref());
    let M = Mat::from_fn(n, K, |i, k| Y_prev[(i, k)] - B[(i, k)]);
    let mut Y = Mat::zeros(n, K);
    let mut sum_log_z = 0.0;
    let mut m = vec![0.0; K];
    for i in 0..n {
        for (k, v) in m.iter_mut().enumerate() {
            *v = M[(i, k)];
        }
        let tm = truncated_moments(&m, y[i]);
        sum_log_z += tm.log_z;
        for k in 0..K {
            Y[(i, k)] = tm.mean[k];
        }
    }
    let quad: f64 = (0..K).map(|k| (0..n).map(|i| M[(i, k)] * B[(i, k)]).sum::<f64>()).sum();
    let elbo = sum_log_z - 0.5 * quad - 0.5 * K as f64 * chol.log_det();
    (M, Y, elbo, sum_log_z)
}

/// vbmp's bound formula (`port_bounds`) in its variants.
pub(super) struct PortBounds {
    /// Exact log-determinants.
    pub(super) exact: f64,
    /// Both log-determinants floored at ln 1e-200, as vbmp does.
    pub(super) floored: f64,
    /// Both determinant terms gone: what vbmp reports whenever det C < 1e-200, e.g. if its
    /// det(C) sees C without the 1e-10 jitter (numerically singular for smooth kernels).
    pub(super) det_free: f64,
    /// log|C + 1e-10 s2 I|: whether it is below the floor decides between the forms above.
    pub(super) log_det_c: f64,
}

/// ln 1e-200, the floor of vbmp's `safeLog` (applied there to det(C) and det(C (I+C)^{-1})).
pub(super) const PORT_LOG_FLOOR: f64 = -460.517_018_598_809_1;

/// The R port's (vbmp) lower-bound formula at a consistent (m, Z(m), C), for diagnosis only:
/// sum log Z - 1/2 sum_k m_k^T (I+C)^{-1} m_k + K/2 [log|C(I+C)^{-1}| - log|C|] - (K-1)N/2 ln 2 pi
/// (its trace terms cancel: tr C(I+C)^{-1} + tr (I+C)^{-1} = N). Returns the value with exact
/// log-determinants and the value with vbmp's floor of ln 1e-200 on both determinants (vbmp
/// takes log(det(.)), which underflows for smooth RBF kernels, so both terms are floored and
/// the determinant contribution vanishes). If C + 1e-10 s2 I cannot be factorised,
/// `log_det_c` is NaN and `floored` equals `det_free` (f64::max passes over the NaN, so both
/// floors bind, as vbmp's floor does on a singular C); `exact` does not depend on it.
pub(super) fn port_bounds(C: &Mat<f64>, chol: &Chol, M: &Mat<f64>, sum_log_z: f64, s2: f64) -> PortBounds {
    let (n, K) = (M.nrows(), M.ncols());
    let Z = chol.solve_l(M.as_ref());
    let quad: f64 = (0..K).map(|k| (0..n).map(|i| Z[(i, k)] * Z[(i, k)]).sum::<f64>()).sum();
    let ld_ic = chol.log_det();
    let mut Cj = C.clone();
    for i in 0..n {
        Cj[(i, i)] += 1e-10 * s2;
    }
    let ld_c = Chol::factor(Cj.as_ref(), "C").map(|c| c.log_det()).unwrap_or(f64::NAN);
    let base = sum_log_z - 0.5 * quad - 0.5 * (K as f64 - 1.0) * n as f64 * LN_2PI;
    let exact = base - 0.5 * K as f64 * ld_ic;
    let floored = base + 0.5 * K as f64 * ((ld_c - ld_ic).max(PORT_LOG_FLOOR) - ld_c.max(PORT_LOG_FLOOR));
    PortBounds { exact, floored, det_free: base, log_det_c: ld_c }
}

/// One SQUAREM cycle (Varadhan & Roland 2008, scheme S3) on Y -> T(Y), the map of `vb_step`
/// at a fixed kernel: Y1 = T(Y0), Y2 = T(Y1), r = Y1 - Y0, v = Y2 - 2 Y1 + Y0,
/// alpha = -|r|/|v| (at most -1), Y' = Y0 - 2 alpha r + alpha^2 v, then one more step from Y'.
/// The ELBO is a function of the Y a step starts from (through m̃ = C (I+C)^{-1} Y) and never
/// falls along T, so Y' is kept only if ELBO(Y') >= ELBO(Y1); otherwise the cycle ends at Y2.
/// Returns (m̃, next Y, ELBO) with the same meaning as `vb_step`'s.
pub(super) fn squarem_cycle(chol: &Chol, Y0: &Mat<f64>, y: &[usize]) -> (Mat<f64>, Mat<f64>, f64) {
    let (M0, Y1, e0) = vb_step(chol, Y0, y);
    let (M1, Y2, e1) = vb_step(chol, &Y1, y);
    let r = &Y1 - Y0;
    let v = &Y2 - &Y1 * faer::Scale(2.0) + Y0;
    let (nr, nv) = (r.norm_l2(), v.norm_l2());
    if !(nv > 0.0 && nr.is_finite() && nv.is_finite()) {
        return if e1 >= e0 { (M1, Y2, e1) } else { (M0, Y1, e0) };
    }
    let alpha = (-nr / nv).min(-1.0);
    let Yp = Y0 - &r * faer::Scale(2.0 * alpha) + &v * faer::Scale(alpha * alpha);
    let (Mp, Y3, ep) = vb_step(chol, &Yp, y);
    if ep.is_finite() && ep >= e1 {
        (Mp, Y3, ep)
    } else {
        (M1, Y2, e1)
    }
}

/// The printed App. C bound: ELBO - (K-1) N/2 ln 2 pi (notes §2.7, the Table 1 convention).
pub fn paper_bound(elbo: f64, n: usize, n_classes: usize) -> f64 {
    elbo - 0.5 * (n_classes as f64 - 1.0) * n as f64 * LN_2PI
}

pub(super) fn chol_i_plus(C: &Mat<f64>) -> Result<Chol, FitError> {
    let n = C.nrows();
    let mut A = C.clone();
    for i in 0..n {
        A[(i, i)] += 1.0;
    }
    Ok(Chol::factor(A.as_ref(), "I + C")?)
}
