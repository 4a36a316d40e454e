//! The block updates: S_i (klmnl's per-datum step at (m_fi, V_fi)), the joint (m, b) Newton step
//! with m = K_f (y - b), and V (R) by its fixed point or a convex mix.
use super::*;

/// m_f = L~ L~^T (y - b).
pub(super) fn mf_of(pr: &SparsePrior, b: &[f64]) -> Vec<f64> {
    let ymb: Vec<f64> = pr.y1().iter().zip(b).map(|(y, b)| y - b).collect();
    pr.l_times(&pr.lt_times(&ymb))
}

/// The S-step (61) for every datum, as in the dense method with (m_fi, V_fi) for (m_i, V_i)
/// (§4.2).
pub(super) fn s_steps(pr: &SparsePrior, st: &mut SState, mf: &[f64], stats: &mut FitStats) -> Result<(), FitError> {
    debug_assert_eq!(st.v.blocks.len(), pr.n());
    s_sweep(&st.v.blocks, mf, &st.b, &mut st.s, Basis::CLASS, "V_fi", stats)
}

/// P v with P = L~ L~^T + blockdiag(S_i^{-1}) (= Q + S^{-1}, Q the Nystrom matrix).
fn p_times(pr: &SparsePrior, terms: &[DatumTerms], v: &[f64]) -> Vec<f64> {
    let c = pr.c();
    let mut out = pr.l_times(&pr.lt_times(v));
    for (i, t) in terms.iter().enumerate() {
        let sv = matvec(t.s_inv.as_ref(), &v[i * c..(i + 1) * c]);
        for q in 0..c {
            out[i * c + q] += sv[q];
        }
    }
    out
}

/// The sparse Newton direction d = -(I + D P)^{-1} (b - g-bar) (§4.2, the sparse eq. 65) with
/// D = blockdiag(diag(g-bar_i) - g-bar_i g-bar_i^T) = E E^T (E_i: C x (C-1)). By Woodbury
/// (I + D P)^{-1} r = r - E M^{-1} E^T P r with M = I + E^T P E = Dg + U U^T, where
/// Dg = blockdiag(I + E_i^T S_i^{-1} E_i) and U = E^T L~ (n(C-1) x s); M^{-1} by Woodbury again,
/// through the s x s matrix I + U^T Dg^{-1} U = I + W^T W with W = L_Dg^{-1} U (Dg = L_Dg L_Dg^T
/// per datum): O(n C^2 s + n C s^2 / 2 + s^3), no nC x nC matrix (the same algebra as App.
/// E.1's three-fold Woodbury form, grouped differently). W^T W is one symmetric product over
/// all data (a rank-(C-1) update per datum kept the loop memory-bound).
pub(super) fn newton_direction(pr: &SparsePrior, b: &[f64], terms: &[DatumTerms]) -> Result<Vec<f64>, FitError> {
    let (n, c, s) = (pr.n(), pr.c(), pr.s);
    let (nc, k) = (n * c, c - 1);
    let r: Vec<f64> = (0..nc).map(|q| b[q] - terms[q / c].gbar[q % c]).collect();
    let pr_v = p_times(pr, terms, &r);
    let mut u_all = Mat::<f64>::zeros(n * k, s);
    let mut w_all = Mat::<f64>::zeros(n * k, s);
    let mut es = Vec::with_capacity(n);
    let mut dgs = Vec::with_capacity(n);
    for (i, t) in terms.iter().enumerate() {
        let e = softmax_hessian_factor(&t.gbar);
        let dg = sym(&(eye(k) + e.transpose() * &t.s_inv * &e));
        let ldg = chol(&dg, "I + E_i^T S_i^-1 E_i")?;
        let u = e.transpose() * pr.ltt_block(i).transpose(); // (C-1) x s
        w_all.as_mut().subrows_mut(i * k, k).copy_from(ldg.solve_l(u.as_ref()));
        u_all.as_mut().subrows_mut(i * k, k).copy_from(&u);
        es.push(e);
        dgs.push(ldg);
    }
    let mut core = eye(s);
    add_gram_lower(core.as_mut(), w_all.as_ref(), 1.0);
    let lcore = Chol::factor_owned(core, "I + U^T Dg^-1 U")?;
    // z = Dg^{-1} E^T P r per datum, then t = U^T z.
    let mut z_all = vec![0.0; n * k];
    for i in 0..n {
        let x = matvec(es[i].transpose(), &pr_v[i * c..(i + 1) * c]);
        z_all[i * k..(i + 1) * k].copy_from_slice(&dgs[i].solve_vec(&x));
    }
    let tvec = matvec(u_all.transpose(), &z_all);
    let corr = lcore.solve_vec(&tvec);
    // M^{-1} E^T P r = z - Dg^{-1} U corr, with Dg_i^{-1} U_i = L_Dg,i^{-T} W_i.
    let wc = matvec(w_all.as_ref(), &corr);
    let mut d = vec![0.0; nc];
    for i in 0..n {
        let yc = to_vec(dgs[i].solve_lt(col(&wc[i * k..(i + 1) * k]).as_ref()).as_ref());
        let minv: Vec<f64> = z_all[i * k..(i + 1) * k].iter().zip(&yc).map(|(z, y)| z - y).collect();
        let em = matvec(es[i].as_ref(), &minv);
        for q in 0..c {
            d[i * c + q] = -(r[i * c + q] - em[q]);
        }
    }
    Ok(d)
}

/// d/deta of the bound at b + eta d (m = K_f (y - b) moving with it, S and V fixed):
/// grad_b . d with grad_b = -(Q + S^{-1}) (b - g-bar) (App. C.2.1). S does not move, so the
/// S^{-1} blocks of the current `terms` serve every eta. None where the bound is undefined.
pub(super) fn b_slope(pr: &SparsePrior, st: &SState, terms: &[DatumTerms], d: &[f64], eta: f64) -> Option<f64> {
    let c = pr.c();
    let be: Vec<f64> = st.b.iter().zip(d).map(|(b, d)| b + eta * d).collect();
    let bt = bound_at(pr, &st.v, &st.s, &be).ok()?;
    let r2: Vec<f64> = (0..be.len()).map(|k| be[k] - bt.terms[k / c].gbar[k % c]).collect();
    let g = p_times(pr, terms, &r2);
    Some(-g.iter().zip(d).map(|(g, d)| g * d).sum::<f64>())
}

/// The joint Newton step on b (m = K_f (y - b) moves with it) along [`newton_direction`], with
/// false position on the step length when the full step lowers the bound (App. C.2.1).
pub(super) fn joint_b_step(pr: &SparsePrior, st: &mut SState, cur: &BoundAt, stats: &mut FitStats) -> Result<f64, FitError> {
    let (n, c) = (pr.n(), pr.c());
    let nc = n * c;
    let d = newton_direction(pr, &st.b, &cur.terms)?;
    let at = |eta: f64| -> Vec<f64> { (0..nc).map(|k| st.b[k] + eta * d[k]).collect() };
    if let Ok(full) = bound_at(pr, &st.v, &st.s, &at(1.0)) {
        if accept(full.value, cur.value) {
            st.b = at(1.0);
            return Ok(full.value);
        }
    }
    stats.b_line_searches += 1;
    let eta = false_position(|eta| b_slope(pr, st, &cur.terms, &d, eta).unwrap_or(-1.0));
    if eta > 0.0 {
        if let Ok(bt) = bound_at(pr, &st.v, &st.s, &at(eta)) {
            if accept(bt.value, cur.value) {
                st.b = at(eta);
                return Ok(bt.value);
            }
        }
    }
    Ok(cur.value)
}

/// d/deta of the bound along the mix R(eta) = (1 - eta) R + eta R_new at fixed S and b:
///   1/2 tr(R_eta^{-1} dR) - 1/2 tr(dR) + 1/2 sum_i tr((V_fi^eta)^{-1} D_i) - 1/2 sum_i tr(S_i D_i)
/// (dR = R_new - R, D_i = V_fi,new - V_fi; tr(V^{-1} Delta) = tr(R^{-1} dR) and
/// tr(K^{-1} Delta) = tr(dR) in the whitened coordinates). R_eta = R + eta dR is a symmetric
/// pencil: one factorisation and eigenvalue decomposition serve every trial eta (a Cholesky
/// and an s x s solve per trial were a fifth of a glass fit at 600 sites).
pub(super) struct VMix {
    pencil: SymPencil,
    tr_dr: f64,
    deltas: Vec<Mat<f64>>,
}

impl VMix {
    pub fn new(pr: &SparsePrior, st: &SState, vnew: &RState) -> Result<VMix, FitError> {
        let dr = &vnew.r - &st.v.r;
        let pencil = SymPencil::new(st.v.r.as_ref(), dr.as_ref(), "R (V = L_K R L_K^T)")?;
        let tr_dr = (0..pr.s).map(|k| dr[(k, k)]).sum();
        let deltas = (0..pr.n()).map(|i| &vnew.blocks[i] - &st.v.blocks[i]).collect();
        Ok(VMix { pencil, tr_dr, deltas })
    }

    /// The slope at eta; None off the PD cone.
    pub fn slope(&self, pr: &SparsePrior, st: &SState, eta: f64) -> Option<f64> {
        let c = pr.c();
        let mut val = self.pencil.trace_inv_times_d(eta)? - self.tr_dr;
        for (i, delta) in self.deltas.iter().enumerate() {
            let vi = &st.v.blocks[i] + delta * faer::Scale(eta);
            let vinv = chol(&vi, "V_fi^cc").ok()?.solve(eye(c).as_ref());
            val += trace_prod(vinv.as_ref(), delta.as_ref()) - trace_prod(st.s[i].as_ref(), delta.as_ref());
        }
        Some(0.5 * val)
    }
}

/// The V-step. First the fixed point R(W_f) with W_fi = S_i - V_fi^{-1} (eq. 33) with every S_i
/// re-optimised at the new V before the bound is compared (S and V are strongly coupled; the
/// dense method's `v_step` explains why alternating exact steps crawls). If that lowers the
/// bound, the paper's convex mix R^cc = (1 - eta) R + eta R^fx at fixed S (App. C.3.1), eta by
/// false position on [`VMix::slope`].
pub(super) fn v_step(pr: &SparsePrior, st: &mut SState, mf: &[f64], cur: f64, stats: &mut FitStats) -> Result<f64, FitError> {
    let w = current_w(pr, st)?;
    let vnew = r_fixed_point(pr, &w)?;
    let mut cand = SState { b: st.b.clone(), s: st.s.clone(), v: vnew.clone() };
    let mut cand_stats = FitStats::default();
    if s_steps(pr, &mut cand, mf, &mut cand_stats).is_ok() {
        if let Ok(bt) = bound(pr, &cand) {
            if accept(bt.value, cur) {
                stats.s_line_searches += cand_stats.s_line_searches;
                *st = cand;
                return Ok(bt.value);
            }
        }
    }
    stats.v_line_searches += 1;
    // The current R is positive definite, so the pencil fails only on non-finite values: then
    // no V move, as when the slope is undefined.
    let Ok(mix) = VMix::new(pr, st, &vnew) else { return Ok(cur) };
    let eta = false_position(|eta| mix.slope(pr, st, eta).unwrap_or(-1.0));
    if eta > 0.0 {
        let re = &st.v.r * faer::Scale(1.0 - eta) + &vnew.r * faer::Scale(eta);
        if let Ok(ve) = r_state(pr, re) {
            if let Ok(bt) = bound_at(pr, &ve, &st.s, &st.b) {
                if accept(bt.value, cur) {
                    st.v = ve;
                    return Ok(bt.value);
                }
            }
        }
    }
    Ok(cur)
}
