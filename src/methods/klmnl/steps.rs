//! The block updates: the joint (m, b) Newton step, the V fixed point and its convex mix, S.
use super::*;

/// The joint Newton step on b with m = K (y - b) (eq. 65): d = -(I + D P)^{-1} (b - g-bar) with
/// P = K + S^{-1} and D = blockdiag(diag(g-bar_i) - g-bar_i g-bar_i^T). D_i = E_i E_i^T with E_i of
/// C - 1 columns ([`softmax_hessian_factor`]), and by Woodbury
/// (I + D P)^{-1} r = r - E (I + E^T P E)^{-1} E^T P r: an SPD system of size n (C - 1) whose
/// matrix comes block by block, (E^T K E)_ij = Kx_ij E_i^T Kc E_j, without forming P.
pub(super) fn newton_direction(pr: &Prior, b: &[f64], terms: &[DatumTerms]) -> Result<Vec<f64>, FitError> {
    let (n, c) = (pr.n, pr.c);
    let nc = n * c;
    let es: Vec<Mat<f64>> = terms.iter().map(|t| softmax_hessian_factor(&t.gbar)).collect();
    // M = I + E^T K E + blockdiag(E_i^T S_i^{-1} E_i).
    let (mut mm, offs) = kron_sandwich_lower(&pr.kx, pr.kc.as_ref(), &es);
    let r = offs[n];
    for (i, (e, t)) in es.iter().zip(terms).enumerate() {
        let ese = e.transpose() * &t.s_inv * e;
        for a in 0..e.ncols() {
            for bb in 0..=a {
                mm[(offs[i] + a, offs[i] + bb)] += ese[(a, bb)] + if a == bb { 1.0 } else { 0.0 };
            }
        }
    }
    let lm = Chol::factor_owned(mm, "I + E^T (K + S^-1) E")?;
    let rvec: Vec<f64> = (0..nc).map(|k| b[k] - terms[k / c].gbar[k % c]).collect();
    let prv = p_times(pr, terms, &rvec);
    let mut u = vec![0.0; r];
    for (i, e) in es.iter().enumerate() {
        let ui = matvec(e.transpose(), &prv[i * c..(i + 1) * c]);
        u[offs[i]..offs[i + 1]].copy_from_slice(&ui);
    }
    let vsol = lm.solve_vec(&u);
    let mut d = vec![0.0; nc];
    for (i, e) in es.iter().enumerate() {
        let ev = matvec(e.as_ref(), &vsol[offs[i]..offs[i + 1]]);
        for q in 0..c {
            d[i * c + q] = -(rvec[i * c + q] - ev[q]);
        }
    }
    Ok(d)
}

/// F (C x C-1) with F F^T = diag(g) - g g^T for a probability vector g, in closed form:
/// E = (I - g 1^T) diag(sqrt g) is one factor (expand, using sum g = 1), and E s = 0 for the unit
/// vector s = sqrt g, so with the Householder reflector H that maps s to +-e_C the last column of
/// E H vanishes and F is the rest.
pub(crate) fn softmax_hessian_factor(g: &[f64]) -> Mat<f64> {
    let c = g.len();
    let sq: Vec<f64> = g.iter().map(|v| v.max(0.0).sqrt()).collect();
    let e = Mat::from_fn(c, c, |i, k| (if i == k { 1.0 } else { 0.0 } - g[i]) * sq[k]);
    // H = I - 2 w w^T / (w^T w) with w = s + |s| e_C (s_C >= 0, so no cancellation).
    let mut w = sq.clone();
    w[c - 1] += sq.iter().map(|v| v * v).sum::<f64>().sqrt();
    let ww: f64 = w.iter().map(|v| v * v).sum();
    Mat::from_fn(c, c - 1, |i, j| {
        let ew: f64 = (0..c).map(|k| e[(i, k)] * w[k]).sum();
        e[(i, j)] - 2.0 * ew * w[j] / ww
    })
}

/// P v with P = K + blockdiag(S_i^{-1}).
pub(super) fn p_times(pr: &Prior, terms: &[DatumTerms], v: &[f64]) -> Vec<f64> {
    let c = pr.c;
    let mut out = matvec(pr.k.as_ref(), v);
    for (i, t) in terms.iter().enumerate() {
        let sv = matvec(t.s_inv.as_ref(), &v[i * c..(i + 1) * c]);
        for q in 0..c {
            out[i * c + q] += sv[q];
        }
    }
    out
}

/// The joint Newton step on b and m = K (y - b) along [`newton_direction`], with false position
/// on the step length when the full step lowers the bound (App. C.2).
pub(super) fn joint_b_step(
    pr: &Prior,
    st: &mut State,
    m: &mut Vec<f64>,
    cur: f64,
    terms: &[DatumTerms],
    stats: &mut FitStats,
) -> Result<f64, FitError> {
    let (n, c) = (pr.n, pr.c);
    let nc = n * c;
    let d = newton_direction(pr, &st.b, terms)?;
    let kd = matvec(pr.k.as_ref(), &d);
    // Only b and m move: the candidates share S and V with the current state.
    // (bound, b, m, per-datum terms) at b + eta d.
    type Candidate = (f64, Vec<f64>, Vec<f64>, Vec<DatumTerms>);
    let eval = |eta: f64| -> Result<Candidate, FitError> {
        let b2: Vec<f64> = (0..nc).map(|k| st.b[k] + eta * d[k]).collect();
        let m2: Vec<f64> = (0..nc).map(|k| m[k] - eta * kd[k]).collect();
        let (v, t) = bound_at(pr, &st.v, &st.s, &b2, &m2)?;
        Ok((v, b2, m2, t))
    };
    if let Ok((v, b2, m2, _)) = eval(1.0) {
        if accept(v, cur) {
            st.b = b2;
            *m = m2;
            return Ok(v);
        }
    }
    stats.b_line_searches += 1;
    // phi(eta) = grad_b log Z_h . d with grad_b = -(K + S^{-1}) (b - g-bar)   (App. C.2)
    let phi = |eta: f64| -> f64 {
        match eval(eta) {
            Ok((_, b2, _, t)) => joint_b_slope(pr, terms, &b2, &t, &d),
            Err(_) => -1.0,
        }
    };
    let eta = false_position(phi);
    if let Ok((v, b2, m2, _)) = eval(eta) {
        if accept(v, cur) {
            st.b = b2;
            *m = m2;
            return Ok(v);
        }
    }
    Ok(cur)
}

/// The slope of the bound along the joint b direction d at b2 (m = K (y - b2)), whose per-datum
/// terms are t2: grad_b log Z_h . d with grad_b = -(K + S^{-1}) (b2 - g-bar(b2)) (App. C.2).
/// S^{-1} comes from `terms`, any terms of the same S.
pub(super) fn joint_b_slope(pr: &Prior, terms: &[DatumTerms], b2: &[f64], t2: &[DatumTerms], d: &[f64]) -> f64 {
    let (nc, c) = (pr.n * pr.c, pr.c);
    let r2: Vec<f64> = (0..nc).map(|k| b2[k] - t2[k / c].gbar[k % c]).collect();
    let g = p_times(pr, terms, &r2);
    -(0..nc).map(|k| g[k] * d[k]).sum::<f64>()
}

/// The V-step: V^fx = (K^{-1} + W)^{-1} with W_i = S_i - V_i^{-1} (eq. 28, E.2.1); if the bound
/// falls, false position on the convex mix T^cc = (1 - eta) T_old + eta T_new (App. C.3).
pub(super) fn v_step(
    pr: &Prior,
    st: &mut State,
    m: &[f64],
    cur: f64,
    lk: &mut Option<Chol>,
    stats: &mut FitStats,
) -> Result<f64, FitError> {
    let w = current_w(pr, st)?;
    // First the natural-gradient step of the bound maximised over S: V = (K^{-1} + W^fx)^{-1}
    // with every S_i re-optimised at the new V before the bound is compared. S and V are
    // strongly coupled through 1/2 (log|S_i V_i| - tr(S_i V_i)): alternating exact S- and
    // V-steps contract by only 1/2 per sweep in one dimension, and far less with correlated
    // data (70-200 sweeps on glass), whereas W^fx = S*(V_i) - V_i^{-1} depends only weakly on
    // V (W^fx -> A_i as V_i -> 0), so this step converges in about ten sweeps.
    // Near the optimum of a warm-started fit that step is rejected in most sweeps (the W path
    // below settles at eta 1/8 on glass) and each rejection costs an O(p^3) V: after two
    // rejections in a row it is tried only every fourth sweep.
    let try_full = stats.full_v_rejections < 2 || stats.sweeps.is_multiple_of(4);
    if try_full {
        if let Ok(ve) = v_from_w(pr, &w) {
            let mut cand = State { b: st.b.clone(), s: st.s.clone(), v: ve, w_prev: w.clone(), w_exact: true };
            let mut cand_stats = FitStats::default();
            if s_steps(pr, &mut cand, m, &mut cand_stats).is_ok() {
                if let Ok((v, _)) = bound(pr, &cand, m) {
                    if accept(v, cur) {
                        stats.s_line_searches += cand_stats.s_line_searches;
                        stats.full_v_rejections = 0;
                        *st = cand;
                        return Ok(v);
                    }
                }
            }
        }
        stats.full_v_rejections += 1;
    }
    // Otherwise, at fixed S: the fixed point W^fx = S - V_blk^{-1} (eq. 28) overshoots (in one
    // dimension the map W -> W^fx has derivative -1 at the optimum), so propose
    // W(eta) = W_prev + eta (W^fx - W_prev) for decreasing eta (V stays (K^{-1} + W)^{-1}, an
    // ascent direction: d/deta at 0 is 1/2 tr(dW V dW V) >= 0), accepting the first that does
    // not lower the bound; else the paper's V-space convex mix by false position. The W path
    // starts at the current V only if V = (K^{-1} + W_prev)^{-1}; after a V-space mix it starts
    // at the V before the mix, below the current bound, so it is skipped.
    // The path starts at the eta last accepted (in this fit or, warm-started, its predecessor),
    // or at twice it when that was the first proposal of its path: on glass it settles at 1/8
    // or 1/16 in most sweeps, which from 1/2 would cost two or three rejected O(p^3) proposals
    // a sweep, and from twice the last eta one.
    let etas: Vec<f64> = match (st.w_exact, stats.w_path_eta) {
        (false, _) => Vec::new(),
        (true, None) => vec![0.5, 0.25, 0.125, 1.0 / 16.0, 1.0 / 64.0, 1.0 / 256.0],
        (true, Some(last)) => {
            let start = if stats.w_path_first { (2.0 * last).min(0.5) } else { last };
            (0..6).map(|k| start / 2f64.powi(k)).filter(|&e| e >= 1.0 / 256.0).collect()
        }
    };
    for (k, eta) in etas.into_iter().enumerate() {
        let we: Vec<Mat<f64>> = st.w_prev.iter().zip(&w).map(|(a, b)| a * faer::Scale(1.0 - eta) + b * faer::Scale(eta)).collect();
        let Ok(ve) = v_from_w(pr, &we) else { continue };
        if let Ok((v, _)) = bound_at(pr, &ve, &st.s, &st.b, m) {
            if accept(v, cur) {
                st.v = ve;
                st.w_prev = we;
                stats.w_path_eta = Some(eta);
                stats.w_path_first = k == 0;
                return Ok(v);
            }
        }
    }
    Ok(v_mix_step(pr, st, m, cur, w, lk, stats)?.0)
}

/// The paper's V-space step (App. C.3): false position on the convex mix
/// T^cc = (1 - eta) T + eta T^fx (V^cc is the same mix of V and V^fx), at fixed S; taken only when
/// the cheaper proposals of [`v_step`] lowered the bound. Returns the bound and eta (the state
/// moves only when the bound does not fall).
pub(super) fn v_mix_step(
    pr: &Prior,
    st: &mut State,
    m: &[f64],
    cur: f64,
    w: Vec<Mat<f64>>,
    lk: &mut Option<Chol>,
    stats: &mut FitStats,
) -> Result<(f64, f64), FitError> {
    let vnew = v_from_w(pr, &w)?;
    stats.v_line_searches += 1;
    // Where the mix is no ascent direction, false position stops at eta = 0: skip the O(p^3) work.
    if st.w_exact && !(mix_slope_at_zero(pr, st, &vnew)? > 0.0) {
        return Ok((cur, 0.0));
    }
    // The mix works in K's whitened coordinates. Where K is too ill-conditioned for them (a
    // nearly singular K^c), A = I - L_K^T T L_K may not factor: then the mix is not taken, which
    // keeps the state (the bound stays monotone) and leaves the next sweep's steps to move V.
    // Likewise where K itself needs jitter to factor (duplicated inputs): with L_K L_K^T =
    // K + jI, log |K^{-1} V^cc| from L_K is off by about -j tr(W), which near convergence is
    // larger than the accept test's tolerance, so the mix would be taken or refused on an error.
    if lk.is_none() {
        let Ok(l) = Chol::factor(pr.k.as_ref(), "K") else { return Ok((cur, 0.0)) };
        *lk = Some(l);
    }
    let lkc = lk.as_ref().expect("just set");
    let (t_old, p_old) = st.v.t.with_sandwich(lkc.l());
    let (t_new, p_new) = vnew.t.with_sandwich(lkc.l());
    // K^{-1} V^cc = I - L_K^T T^cc L_K = A + eta D with A = I - P_old (the current state's, PD)
    // and D = P_old - P_new: one pencil factorisation serves every trial eta.
    let nc = pr.n * pr.c;
    let a = Mat::from_fn(nc, nc, |i, j| (if i == j { 1.0 } else { 0.0 }) - p_old[(i, j)]);
    let d = &p_old - &p_new;
    let Ok(pencil) = SymPencil::new(a.as_ref(), d.as_ref(), "I - L_K^T T L_K") else { return Ok((cur, 0.0)) };
    let block = |i: usize, eta: f64| &st.v.blocks[i] * faer::Scale(1.0 - eta) + &vnew.blocks[i] * faer::Scale(eta);
    // d/deta = 1/2 tr((V^cc)^{-1} Delta) - 1/2 tr(K^{-1} Delta) + 1/2 sum_i tr((V_i^cc)^{-1} Delta_i) - 1/2 sum_i tr(S_i Delta_i)
    let tr_kinv_delta = st.v.tr_tk - vnew.tr_tk; // tr((T_old - T_new) K)
    let phi = |eta: f64| -> f64 {
        let Some(mut val) = pencil.trace_inv_times_d(eta) else { return -1.0 };
        val -= tr_kinv_delta;
        for i in 0..pr.n {
            let delta = &vnew.blocks[i] - &st.v.blocks[i];
            let Ok(lv) = chol(&block(i, eta), "V_i") else { return -1.0 };
            let vi_inv = lv.solve(eye(pr.c).as_ref());
            val += trace_prod(vi_inv.as_ref(), delta.as_ref()) - trace_prod(st.s[i].as_ref(), delta.as_ref());
        }
        0.5 * val
    };
    let eta = false_position(phi);
    if eta == 0.0 {
        return Ok((cur, eta));
    }
    // The accepted point's log-determinant from its own Cholesky factor: the pencil's
    // eigenvalues carry errors of order eps cond(A) |D|, fine for choosing eta but not for
    // the bound the state keeps.
    let Ok(lc) = chol(&(&a + &d * faer::Scale(eta)), "I - L_K^T T^cc L_K") else { return Ok((cur, eta)) };
    let logdet_kinv_v = lc.log_det();
    let cand = State {
        b: st.b.clone(),
        s: st.s.clone(),
        v: VState {
            t: TRep::Dense {
                t: &t_old * faer::Scale(1.0 - eta) + &t_new * faer::Scale(eta),
                p: &p_old * faer::Scale(1.0 - eta) + &p_new * faer::Scale(eta),
            },
            blocks: (0..pr.n).map(|i| block(i, eta)).collect(),
            logdet_kinv_v,
            tr_tk: (1.0 - eta) * st.v.tr_tk + eta * vnew.tr_tk,
        },
        w_exact: eta == 1.0,
        w_prev: if eta == 1.0 { w } else { st.w_prev.clone() },
    };
    let (v, _) = bound(pr, &cand, m)?;
    if accept(v, cur) {
        *st = cand;
        Ok((v, eta))
    } else {
        Ok((cur, eta))
    }
}

/// d/deta of the bound along the V-space mix (1 - eta) V + eta V_new at eta = 0 (fixed S),
/// for a state with V = (K^{-1} + W_prev)^{-1}: then tr(V^{-1} Delta) - tr(K^{-1} Delta) =
/// tr(W_prev Delta) with W_prev block-diagonal, so the slope needs only the diagonal blocks,
/// 1/2 sum_i tr((W_prev,i + V_i^{-1} - S_i) Delta_i), O(n C^3) instead of O(p^3).
pub(super) fn mix_slope_at_zero(pr: &Prior, st: &State, vnew: &VState) -> Result<f64, FitError> {
    debug_assert!(st.w_exact);
    let mut slope = 0.0;
    for i in 0..pr.n {
        let vi_inv = chol(&st.v.blocks[i], "V_i")?.solve(eye(pr.c).as_ref());
        let g = &st.w_prev[i] + vi_inv - &st.s[i];
        slope += trace_prod(g.as_ref(), (&vnew.blocks[i] - &st.v.blocks[i]).as_ref());
    }
    Ok(0.5 * slope)
}

/// The S-step (61) for every datum.
pub(super) fn s_steps(pr: &Prior, st: &mut State, m: &[f64], stats: &mut FitStats) -> Result<(), FitError> {
    s_sweep(&st.v.blocks, m, &st.b, &mut st.s, pr.basis(), "V_i", stats)
}
