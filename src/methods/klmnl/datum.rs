//! The per-datum bound h (Theorem 6) and its updates of S_i and b_i.
use super::*;

// ---------------------------------------------------------------------------------------
// The per-datum bound h (Theorem 6).

/// The basis of the per-datum C x C matrices V_i, S_i, W_i of a fit: K^c's eigenvectors U
/// (the matrices are held as U^T X U), or the class basis (`None`: U = I, as for a diagonal
/// K^c). Vectors (m, b, g-bar) and T always stay in the class basis. See [`v_from_w`] for why.
#[derive(Clone, Copy)]
pub(crate) struct Basis<'a>(pub(super) Option<&'a Mat<f64>>);

impl Basis<'_> {
    pub(crate) const CLASS: Basis<'static> = Basis(None);

    /// U X U^T: from this basis to the class basis.
    pub(super) fn to_class(self, x: &Mat<f64>) -> Mat<f64> {
        match self.0 {
            None => x.clone(),
            Some(u) => sym(&(u * x * u.transpose())),
        }
    }

    /// U^T X U: from the class basis to this one (by value: in the class basis, a move).
    pub(super) fn into_basis(self, x: Mat<f64>) -> Mat<f64> {
        match self.0 {
            None => x,
            Some(u) => sym(&(u.transpose() * x * u)),
        }
    }
}

/// Everything h needs about one datum's (b, S): h_core = C/2 + 1/2 log|S V| - 1/2 tr(S V) -
/// log sum_c g^c (so h(y) = h_core + m^y), the normalised g-bar, S^{-1} in the class basis (for
/// the b-steps), and A (eq. 18) and S^{-1} in the basis of V and S (for the S-step).
pub(crate) struct DatumTerms {
    pub h_core: f64,
    pub gbar: Vec<f64>,
    pub s_inv: Mat<f64>,
    pub(super) a_in_basis: Mat<f64>,
    pub(super) s_inv_in_basis: Mat<f64>,
}

/// h_core for q = N(m, V) given log|V|, with V and S in `basis`. Errors if S is not positive
/// definite.
pub(crate) fn datum_terms(m: &[f64], v: &Mat<f64>, logdet_v: f64, b: &[f64], s: &Mat<f64>, basis: Basis) -> Result<DatumTerms, FitError> {
    let c = m.len();
    let ls = chol(s, "S_i")?;
    let s_inv_in_basis = sym(&ls.solve(eye(c).as_ref()));
    let s_inv = basis.to_class(&s_inv_in_basis);
    // log g^c = m^c + 1/2 (b - e^c)^T S^{-1} (b - e^c)   (eq. 16)
    let sb = matvec(s_inv.as_ref(), b);
    let bsb: f64 = b.iter().zip(&sb).map(|(x, y)| x * y).sum();
    let mut lg: Vec<f64> = (0..c).map(|k| m[k] + 0.5 * (bsb - 2.0 * sb[k] + s_inv[(k, k)])).collect();
    let lse = softmax_in_place(&mut lg);
    let gbar = lg;
    let a = Mat::from_fn(c, c, |i, j| b[i] * b[j] - b[i] * gbar[j] - gbar[i] * b[j] + if i == j { gbar[i] } else { 0.0 });
    let h_core = 0.5 * c as f64 + 0.5 * (ls.log_det() + logdet_v) - 0.5 * trace_prod(s.as_ref(), v.as_ref()) - lse;
    Ok(DatumTerms { h_core, gbar, s_inv, a_in_basis: basis.into_basis(a), s_inv_in_basis })
}

/// The S fixed point (61): S = L^{-T} P (sqrt(Lambda + I/4) + I/2) P^T L^{-1} with
/// V = L L^T and P Lambda P^T = eig(L^T A L).
pub(super) fn s_fixed_point(lv: &Chol, a: &Mat<f64>) -> Result<Mat<f64>, FitError> {
    let c = a.nrows();
    let l = lv.l();
    let lal = l.transpose() * a * l;
    let (lam, p) = eigh(&lal)?;
    let x = lv.solve_lt(p.as_ref()); // L^{-T} P
    let lt: Vec<f64> = lam.iter().map(|v| (v.max(0.0) + 0.25).sqrt() + 0.5).collect();
    Ok(sym(&Mat::from_fn(c, c, |i, j| (0..c).map(|k| x[(i, k)] * lt[k] * x[(j, k)]).sum())))
}

/// One S-step for one datum (Sec. 3.2, App. C.1). Returns the new S and its terms.
pub(crate) fn s_step(
    m: &[f64],
    v: &Mat<f64>,
    lv: &Chol,
    b: &[f64],
    s: &Mat<f64>,
    cur: DatumTerms,
    basis: Basis,
) -> Result<(Mat<f64>, DatumTerms, bool), FitError> {
    let ldv = lv.log_det();
    let s_fx = s_fixed_point(lv, &cur.a_in_basis)?;
    if let Ok(t) = datum_terms(m, v, ldv, b, &s_fx, basis) {
        if accept(t.h_core, cur.h_core) {
            return Ok((s_fx, t, false));
        }
    }
    // Convex mix S^cc = (1 - eta) S + eta S^fx; dh/deta = 1/2 tr[(-V + S^-1 + S^-1 A S^-1) Delta].
    let delta = &s_fx - s;
    let phi = |eta: f64| -> f64 {
        let se = s + &delta * faer::Scale(eta);
        match datum_terms(m, v, ldv, b, &se, basis) {
            Ok(t) => s_slope(v, &t, &delta),
            Err(_) => -1.0,
        }
    };
    let eta = false_position(phi);
    let se = s + &delta * faer::Scale(eta);
    match datum_terms(m, v, ldv, b, &se, basis) {
        Ok(t) if accept(t.h_core, cur.h_core) => Ok((se, t, true)),
        _ => Ok((s.clone(), cur, true)),
    }
}

/// dh/deta along S + eta Delta at the S whose terms are t: 1/2 tr[(-V + S^-1 + S^-1 A S^-1) Delta]
/// (App. C.1), with V, Delta in the basis of t.
pub(super) fn s_slope(v: &Mat<f64>, t: &DatumTerms, delta: &Mat<f64>) -> f64 {
    let si = &t.s_inv_in_basis;
    let g = -v + si + si * &t.a_in_basis * si;
    0.5 * trace_prod(g.as_ref(), delta.as_ref())
}

/// The S-step (61) for every datum at its (m_i, V_i) (the sparse method passes (m_fi, V_fi),
/// §4.2). One fixed-point round per datum (with its guarded line search): A depends on S
/// through g-bar (notes D§2.4.7), so (61) is a fixed point that would need several rounds to
/// settle, but every sweep of the fit comes back to it with b and V moved, so solving it
/// exactly in between buys nothing. Measured on the dense glass / thyroid / wine / iris
/// searches (benches/PROFILE.md, session 41): up to five rounds (to 1e-13) against one, the
/// fits' optima within 4e-4 nats and 6-40% less CPU.
/// `what` names V's blocks in a factorisation error.
pub(crate) fn s_sweep(
    v_blocks: &[Mat<f64>],
    m: &[f64],
    b: &[f64],
    s: &mut [Mat<f64>],
    basis: Basis,
    what: &str,
    stats: &mut FitStats,
) -> Result<(), FitError> {
    let c = if v_blocks.is_empty() { 0 } else { v_blocks[0].nrows() };
    for (i, (vi, si)) in v_blocks.iter().zip(s.iter_mut()).enumerate() {
        let lv = chol(vi, what)?;
        let (mi, bi) = (&m[i * c..(i + 1) * c], &b[i * c..(i + 1) * c]);
        let t = datum_terms(mi, vi, lv.log_det(), bi, si, basis)?;
        let (s_new, _, ls) = s_step(mi, vi, &lv, bi, si, t, basis)?;
        stats.s_line_searches += ls as usize;
        *si = s_new;
    }
    Ok(())
}

/// One b-step for one datum (Sec. 3.1): fixed point b = g-bar, else Newton with a
/// false-position step on the directional derivative.
pub(super) fn b_step(
    m: &[f64],
    v: &Mat<f64>,
    ldv: f64,
    b: &[f64],
    s: &Mat<f64>,
    cur: DatumTerms,
) -> Result<(Vec<f64>, DatumTerms), FitError> {
    let c = m.len();
    let b_fx = cur.gbar.clone();
    let t = datum_terms(m, v, ldv, &b_fx, s, Basis::CLASS)?;
    if accept(t.h_core, cur.h_core) {
        return Ok((b_fx, t));
    }
    // d = -[I + (G - g g^T) S^{-1}]^{-1} (b - g)
    let dmat = Mat::from_fn(c, c, |i, j| (if i == j { cur.gbar[i] } else { 0.0 }) - cur.gbar[i] * cur.gbar[j]);
    let x = eye(c) + &dmat * &cur.s_inv;
    let r = Mat::from_fn(c, 1, |i, _| b[i] - cur.gbar[i]);
    let sol = x.partial_piv_lu().solve(&r);
    let d: Vec<f64> = (0..c).map(|i| -sol[(i, 0)]).collect();
    let at = |eta: f64| -> Vec<f64> { (0..c).map(|i| b[i] + eta * d[i]).collect() };
    let phi = |eta: f64| -> f64 {
        let be = at(eta);
        match datum_terms(m, v, ldv, &be, s, Basis::CLASS) {
            Ok(t) => b_slope(&t, &be, &d),
            Err(_) => -1.0,
        }
    };
    let eta = false_position(phi);
    let be = at(eta);
    let t = datum_terms(m, v, ldv, &be, s, Basis::CLASS)?;
    if accept(t.h_core, cur.h_core) {
        Ok((be, t))
    } else {
        Ok((b.to_vec(), cur))
    }
}

/// dh/deta along b + eta d at be, whose terms are t: grad_b h . d with grad_b h =
/// -S^{-1} (b - g-bar) (Sec. 3.1).
pub(super) fn b_slope(t: &DatumTerms, be: &[f64], d: &[f64]) -> f64 {
    let c = be.len();
    let diff: Vec<f64> = (0..c).map(|i| be[i] - t.gbar[i]).collect();
    let g = matvec(t.s_inv.as_ref(), &diff);
    -(0..c).map(|i| g[i] * d[i]).sum::<f64>()
}

/// max over (b, S) of h_core for q = N(m, V) (one datum): the per-datum optimiser used by the
/// predictive lower bound (24) and the unit tests. Returns (max h_core, b*, S*).
pub fn optimise_datum(m: &[f64], v: &Mat<f64>) -> Result<(f64, Vec<f64>, Mat<f64>), FitError> {
    optimise_datum_jitter(m, v).map(|(h, b, s, _)| (h, b, s))
}

/// `optimise_datum` and the jitter its factor of V needed (the predictive reports it).
pub fn optimise_datum_jitter(m: &[f64], v: &Mat<f64>) -> Result<(f64, Vec<f64>, Mat<f64>, f64), FitError> {
    let c = m.len();
    let lv = Chol::factor_with_jitter(sym(v).as_ref(), "predictive V_*")?;
    // Where V_* needed jitter, every term uses the matrix factored, V_* + jI: with log |V| of
    // one and tr(S V) of the other, a near-null direction of V (S ~ 1/j there, tr(S V) ~ 0)
    // added about half a nat and (24) was no longer a lower bound. Unjittered, V_* as given.
    let jittered;
    let v = if lv.jitter() > 0.0 {
        jittered = sym(v) + Mat::<f64>::identity(c, c) * faer::Scale(lv.jitter());
        &jittered
    } else {
        v
    };
    let ldv = lv.log_det();
    let mut b = m.to_vec();
    softmax_in_place(&mut b);
    let mut s = sym(&lv.solve(eye(c).as_ref())); // S = V^{-1}: W = 0 is PSD
    let mut t = datum_terms(m, v, ldv, &b, &s, Basis::CLASS)?;
    for _ in 0..500 {
        let old = t.h_core;
        let (nb, nt) = b_step(m, v, ldv, &b, &s, t)?;
        b = nb;
        let (ns, nt, _) = s_step(m, v, &lv, &b, &s, nt, Basis::CLASS)?;
        s = ns;
        t = nt;
        let gap = b.iter().zip(&t.gbar).map(|(x, y)| (x - y).abs()).fold(0.0, f64::max);
        if (t.h_core - old).abs() < 1e-14 * old.abs().max(1.0) && gap < 1e-10 {
            break;
        }
    }
    Ok((t.h_core, b, s, lv.jitter()))
}

/// Lemma 29 / Theorem 10: the per-datum optimum of h at q = N(0, s2 I), i.e.
/// -(C-1)/2 [2r - log(r + 1/2) - 1] - log C with r = sqrt(s2/C + 1/4).
pub fn theorem10_per_datum(n_classes: usize, s2: f64) -> f64 {
    let c = n_classes as f64;
    let r = (s2 / c + 0.25).sqrt();
    -(c - 1.0) / 2.0 * (2.0 * r - (r + 0.5).ln() - 1.0) - c.ln()
}
