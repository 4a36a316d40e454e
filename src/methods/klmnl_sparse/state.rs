//! The variational state (b, {S_i}, V = L_K R L_K^T), the bound log Z~_h at it (eq. 32 in the
//! whitened form of the module doc) and the E.3 initialisation.
use super::*;

/// V = L_K R L_K^T through R (s x s, SPD), with what the bound needs of it: log|R| = log|K^{-1}V|,
/// tr R = tr(K^{-1}V) and the diagonal blocks V_fi = K_ff,ii - L~_i (I - R) L~_i^T (eq. 31).
/// A convex mix of two V's is the same mix of their R's.
#[derive(Clone)]
pub(super) struct RState {
    pub r: Mat<f64>,
    pub logdet_r: f64,
    pub tr_r: f64,
    pub blocks: Vec<Mat<f64>>,
}

/// The RState of an R; errors if R is not positive definite.
pub(super) fn r_state(pr: &SparsePrior, r: Mat<f64>) -> Result<RState, FitError> {
    let r = sym(&r);
    let logdet_r = chol(&r, "R (V = L_K R L_K^T)")?.log_det();
    let tr_r = (0..pr.s).map(|k| r[(k, k)]).sum();
    // (I - R) L~^T, then V_fi = K_ff,ii - L~_i (I - R) L~_i^T: the only blocks of V_f needed.
    let m = &pr.ltt - &r * &pr.ltt;
    let c = pr.c();
    let blocks = (0..pr.n())
        .map(|i| {
            let mi = m.as_ref().subcols(i * c, c);
            sym(&(pr.kff_block(i) - pr.ltt_block(i).transpose() * mi))
        })
        .collect();
    Ok(RState { r, logdet_r, tr_r, blocks })
}

/// The fixed point R = (I + L~^T W_f L~)^{-1} of V = (K^{-1} + K^{-1} K_f W_f K_f^T K^{-1})^{-1}
/// (eq. 33, E.2.2) for PSD blocks W_fi = F_i F_i^T, with its RState. B = I + L~^T W_f L~ has
/// eigenvalues >= 1, so its explicit inverse is well conditioned (B is no kernel matrix). From
/// B = L_B L_B^T the RState's terms need no product with R: log|R| = -log|B| and
/// L~_i^T R L~_i = Z_i^T Z_i with Z = L_B^{-1} L~^T (one triangular solve, half the
/// multiply-adds of R L~^T, and no second factorisation).
pub(super) fn r_fixed_point(pr: &SparsePrior, w: &[Mat<f64>]) -> Result<RState, FitError> {
    let lb = b_factor(pr, w)?;
    let r = lb.inverse();
    let tr_r = (0..pr.s).map(|k| r[(k, k)]).sum();
    let z = lb.solve_l(pr.ltt.as_ref());
    let c = pr.c();
    let blocks = (0..pr.n())
        .map(|i| {
            let (li, zi) = (pr.ltt_block(i), z.as_ref().subcols(i * c, c));
            sym(&(pr.kff_block(i) - li.transpose() * li + zi.transpose() * zi))
        })
        .collect();
    Ok(RState { r, logdet_r: -lb.log_det(), tr_r, blocks })
}

/// The factor of B = I + L~^T W_f L~ = I + U U^T, U = [L~_i F_i]_i.
fn b_factor(pr: &SparsePrior, w: &[Mat<f64>]) -> Result<Chol, FitError> {
    let fs: Vec<Mat<f64>> = w.iter().map(psd_factor).collect::<Result<_, _>>()?;
    let rank: usize = fs.iter().map(|f| f.ncols()).sum();
    // U^T (rank x s), so that U U^T is one symmetric product (lower triangle only: all the
    // Cholesky factorisation reads).
    let mut ut = Mat::<f64>::zeros(rank, pr.s);
    let mut off = 0;
    for (i, f) in fs.iter().enumerate() {
        let ui_t = f.transpose() * pr.ltt_block(i).transpose();
        ut.as_mut().subrows_mut(off, f.ncols()).copy_from(&ui_t);
        off += f.ncols();
    }
    let mut b = eye(pr.s);
    add_gram_lower(b.as_mut(), ut.as_ref(), 1.0);
    Ok(Chol::factor_owned(b, "B = I + L~^T W_f L~")?)
}

/// R of [`r_fixed_point`] alone.
#[cfg(test)]
pub(super) fn r_from_w(pr: &SparsePrior, w: &[Mat<f64>]) -> Result<Mat<f64>, FitError> {
    Ok(b_factor(pr, w)?.inverse())
}

/// The variational parameters: b (nC, datum-major; m = K_f (y - b)), S_i and V.
#[derive(Clone)]
pub(super) struct SState {
    pub b: Vec<f64>,
    pub s: Vec<Mat<f64>>,
    pub v: RState,
}

/// The bound and what the steps need of it.
pub(super) struct BoundAt {
    pub value: f64,
    pub terms: Vec<DatumTerms>,
    /// -KL(q(z) || p(z)).
    pub neg_kl: f64,
}

/// log Z~_h (eq. 32) at (V, {S_i}, b) with the tie m = K_f (y - b):
/// -KL = s/2 + 1/2 log|R| - 1/2 tr R - 1/2 |L~^T (y - b)|^2, plus sum_i h_i at (m_fi, V_fi).
pub(super) fn bound_at(pr: &SparsePrior, v: &RState, s: &[Mat<f64>], b: &[f64]) -> Result<BoundAt, FitError> {
    let c = pr.c();
    let ymb: Vec<f64> = pr.y1().iter().zip(b).map(|(y, b)| y - b).collect();
    let u = pr.lt_times(&ymb);
    let uu: f64 = u.iter().map(|x| x * x).sum();
    let neg_kl = 0.5 * (pr.s as f64 + v.logdet_r - v.tr_r - uu);
    let mf = pr.l_times(&u);
    let mut value = neg_kl;
    let mut terms = Vec::with_capacity(pr.n());
    for i in 0..pr.n() {
        let vi = &v.blocks[i];
        let ldv = chol(vi, "V_fi")?.log_det();
        let r = i * c..(i + 1) * c;
        let t = datum_terms(&mf[r.clone()], vi, ldv, &b[r.clone()], &s[i], Basis::CLASS)?;
        value += t.h_core + pr.y1()[r.clone()].iter().zip(&mf[r]).map(|(y, m)| y * m).sum::<f64>();
        terms.push(t);
    }
    if !value.is_finite() {
        return Err(FitError::Numerical(format!("sparse KL-MNL bound is not finite ({value})")));
    }
    Ok(BoundAt { value, terms, neg_kl })
}

pub(super) fn bound(pr: &SparsePrior, st: &SState) -> Result<BoundAt, FitError> {
    bound_at(pr, &st.v, &st.s, &st.b)
}

/// W_fi = S_i - V_fi^{-1}, made PSD by clamping (footnote 10).
pub(super) fn current_w(pr: &SparsePrior, st: &SState) -> Result<Vec<Mat<f64>>, FitError> {
    let c = pr.c();
    (0..pr.n())
        .map(|i| {
            let vinv = chol(&st.v.blocks[i], "V_fi")?.solve(eye(c).as_ref());
            let w = sym(&(&st.s[i] - vinv));
            let (lam, u) = eigh(&w)?;
            Ok(Mat::from_fn(c, c, |p, q| (0..c).map(|k| u[(p, k)] * lam[k].max(0.0) * u[(q, k)]).sum()))
        })
        .collect()
}

/// S_i = V_fi^{-1} + W_i (the Lemma 5 definition), for every datum.
fn s_from_w(pr: &SparsePrior, v: &RState, w: &[Mat<f64>]) -> Result<Vec<Mat<f64>>, FitError> {
    let c = pr.c();
    (0..pr.n()).map(|i| Ok(sym(&(chol(&v.blocks[i], "V_fi")?.solve(eye(c).as_ref()) + &w[i])))).collect()
}

/// A previous optimum (another set or other hyper-parameters) to start from: the W_f blocks
/// and b carry over, V and S follow from them on the new prior.
#[derive(Clone)]
pub(super) struct WarmStart {
    pub w: Vec<Mat<f64>>,
    pub b: Vec<f64>,
}

pub(super) fn warm_state(pr: &SparsePrior, warm: &WarmStart) -> Result<SState, FitError> {
    let v = r_fixed_point(pr, &warm.w)?;
    let s = s_from_w(pr, &v, &warm.w)?;
    Ok(SState { b: warm.b.clone(), s, v })
}

/// E.3 (sparse): W_fi = gamma_w (I/C - 11^T/C^2), V = L_K R L_K^T with R from W_f,
/// m_f = L~ R L~^T W_f a for a_i = gamma_a (y_i + (y_i - 1)/(C - 1)), b = y - W_f (a - m_f)
/// (so m = K_f (y - b) = V K^{-1} K_f W_f a) and S_i = V_fi^{-1} + W_fi.
pub(super) fn init_state(pr: &SparsePrior, gamma_w: f64, gamma_a: f64) -> Result<SState, FitError> {
    let (n, c) = (pr.n(), pr.c());
    let cf = c as f64;
    let w1 = Mat::from_fn(c, c, |p, q| gamma_w * ((if p == q { 1.0 / cf } else { 0.0 }) - 1.0 / (cf * cf)));
    let w = vec![w1.clone(); n];
    let v = r_fixed_point(pr, &w)?;
    let y1 = pr.y1();
    let a: Vec<f64> = y1.iter().map(|&y| gamma_a * (y + (y - 1.0) / (cf - 1.0).max(1.0))).collect();
    let wa = block_times(&w, &a, c);
    let mf = pr.l_times(&matvec(v.r.as_ref(), &pr.lt_times(&wa)));
    let amf: Vec<f64> = a.iter().zip(&mf).map(|(a, m)| a - m).collect();
    let wamf = block_times(&w, &amf, c);
    let b: Vec<f64> = y1.iter().zip(&wamf).map(|(y, x)| y - x).collect();
    let s = s_from_w(pr, &v, &w)?;
    Ok(SState { b, s, v })
}

/// blockdiag(blocks) v for C x C blocks.
pub(super) fn block_times(blocks: &[Mat<f64>], v: &[f64], c: usize) -> Vec<f64> {
    blocks.iter().enumerate().flat_map(|(i, bl)| matvec(bl.as_ref(), &v[i * c..(i + 1) * c])).collect()
}
