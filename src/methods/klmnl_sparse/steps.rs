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
/// through the s x s matrix I + U^T Dg^{-1} U: O(n C^2 s + n C s^2 + s^3), no nC x nC matrix
/// (the same algebra as App. E.1's three-fold Woodbury form, grouped differently).
pub(super) fn newton_direction(pr: &SparsePrior, b: &[f64], terms: &[DatumTerms]) -> Result<Vec<f64>, FitError> {
    let (n, c, s) = (pr.n(), pr.c(), pr.s);
    let nc = n * c;
    let r: Vec<f64> = (0..nc).map(|k| b[k] - terms[k / c].gbar[k % c]).collect();
    let pr_v = p_times(pr, terms, &r);
    let mut core = eye(s);
    let mut es = Vec::with_capacity(n);
    let mut dgs = Vec::with_capacity(n);
    let mut ys = Vec::with_capacity(n);
    let mut us = Vec::with_capacity(n);
    for (i, t) in terms.iter().enumerate() {
        let e = softmax_hessian_factor(&t.gbar);
        let dg = sym(&(eye(c - 1) + e.transpose() * &t.s_inv * &e));
        let ldg = chol(&dg, "I + E_i^T S_i^-1 E_i")?;
        let u = e.transpose() * pr.ltt_block(i).transpose(); // (C-1) x s
        let y = ldg.solve(u.as_ref());
        // Added in place: an s x s temporary per datum made this loop memory-bound.
        matmul(core.as_mut(), Accum::Add, u.transpose(), y.as_ref(), 1.0, Par::Seq);
        es.push(e);
        dgs.push(ldg);
        ys.push(y);
        us.push(u);
    }
    let lcore = Chol::factor_owned(sym(&core), "I + U^T Dg^-1 U")?;
    let mut zs = Vec::with_capacity(n);
    let mut tvec = vec![0.0; s];
    for i in 0..n {
        let x = matvec(es[i].transpose(), &pr_v[i * c..(i + 1) * c]);
        let z = dgs[i].solve_vec(&x);
        let uz = matvec(us[i].transpose(), &z);
        tvec.iter_mut().zip(&uz).for_each(|(a, b)| *a += b);
        zs.push(z);
    }
    let corr = lcore.solve_vec(&tvec);
    let mut d = vec![0.0; nc];
    for i in 0..n {
        let yc = matvec(ys[i].as_ref(), &corr);
        let minv: Vec<f64> = zs[i].iter().zip(&yc).map(|(z, y)| z - y).collect();
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
/// tr(K^{-1} Delta) = tr(dR) in the whitened coordinates). None off the PD cone.
pub(super) fn v_mix_slope(pr: &SparsePrior, st: &SState, vnew: &RState, eta: f64) -> Option<f64> {
    let c = pr.c();
    let dr = &vnew.r - &st.v.r;
    let re = &st.v.r * faer::Scale(1.0 - eta) + &vnew.r * faer::Scale(eta);
    let x = chol(&re, "R^cc").ok()?.solve(dr.as_ref());
    let mut val: f64 = (0..pr.s).map(|k| x[(k, k)] - dr[(k, k)]).sum();
    for i in 0..pr.n() {
        let delta = &vnew.blocks[i] - &st.v.blocks[i];
        let vi = &st.v.blocks[i] * faer::Scale(1.0 - eta) + &vnew.blocks[i] * faer::Scale(eta);
        let vinv = chol(&vi, "V_fi^cc").ok()?.solve(eye(c).as_ref());
        val += trace_prod(vinv.as_ref(), delta.as_ref()) - trace_prod(st.s[i].as_ref(), delta.as_ref());
    }
    Some(0.5 * val)
}

/// The V-step. First the fixed point R(W_f) with W_fi = S_i - V_fi^{-1} (eq. 33) with every S_i
/// re-optimised at the new V before the bound is compared (S and V are strongly coupled; the
/// dense method's `v_step` explains why alternating exact steps crawls). If that lowers the
/// bound, the paper's convex mix R^cc = (1 - eta) R + eta R^fx at fixed S (App. C.3.1), eta by
/// false position on [`v_mix_slope`].
pub(super) fn v_step(pr: &SparsePrior, st: &mut SState, mf: &[f64], cur: f64, stats: &mut FitStats) -> Result<f64, FitError> {
    let w = current_w(pr, st)?;
    let vnew = r_state(pr, r_from_w(pr, &w)?)?;
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
    let eta = false_position(|eta| v_mix_slope(pr, st, &vnew, eta).unwrap_or(-1.0));
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
