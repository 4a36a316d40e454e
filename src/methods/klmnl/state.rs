//! The variational state, the bound log Z_h at it, and the acceptance rule of every update.
use super::*;

pub(crate) fn chol(a: &Mat<f64>, what: &str) -> Result<Chol, FitError> {
    Ok(Chol::factor(sym(a).as_ref(), what)?)
}

/// Sweeps in a row with the bound within tol after which b - g-bar is taken to be at its floor.
pub(super) const FLAT_SWEEPS_AT_FLOOR: usize = 5;

pub(crate) fn accept(new: f64, old: f64) -> bool {
    new >= old - 1e-12 * old.abs().max(1.0)
}

/// The variational parameters besides V; S_i and W_i in [`Prior::basis`].
#[derive(Clone)]
pub(super) struct State {
    pub(super) b: Vec<f64>,
    pub(super) s: Vec<Mat<f64>>,
    pub(super) v: VState,
    /// The W with V = (K^{-1} + W)^{-1} (exact unless a V-space mix was taken).
    pub(super) w_prev: Vec<Mat<f64>>,
    /// Whether V = (K^{-1} + w_prev)^{-1} holds exactly: false after a V-space mix with eta < 1,
    /// whose V no block-diagonal W reproduces.
    pub(super) w_exact: bool,
}

/// Running counters for diagnostics.
#[derive(Clone, Debug, Default)]
pub struct FitStats {
    pub sweeps: usize,
    pub s_line_searches: usize,
    pub b_line_searches: usize,
    pub v_line_searches: usize,
    pub max_b_minus_gbar: f64,
    pub converged: bool,
    /// Converged on the bound with b - g-bar stuck above b_tol at its floating-point floor.
    pub stopped_at_floor: bool,
    /// The last step length accepted on the W path of [`v_step`] (here or in the fit this one
    /// was warm-started from).
    pub w_path_eta: Option<f64>,
    /// Whether that step was the W path's first proposal: the next sweep's path then starts at
    /// twice it, else at it.
    pub w_path_first: bool,
    /// Sweeps in a row whose full V^fx proposal (S re-optimised at it) was rejected.
    pub full_v_rejections: usize,
    pub bound_trace: Vec<f64>,
    /// Largest diagonal jitter added to factor K for the V mix (0 when none was needed).
    pub max_jitter: f64,
    /// Sweeps in a row, up to the last, that moved the bound by at most tol.
    pub flat_sweeps: usize,
}

impl FitStats {
    /// Record sweep `sweep`, which took the bound from `start` to `cur` (with `max_b_minus_gbar`
    /// set at its end), and say whether the sweeps stop: the bound flat within `tol` and
    /// b - g-bar below `b_tol`, or the bound flat for FLAT_SWEEPS_AT_FLOOR sweeps in a row. With
    /// a large signal variance b - g-bar can stall above b_tol (1e-7 on glass at sigma^2 ~ 13)
    /// while the bound no longer moves beyond rounding: the optimum is reached as far as
    /// floating point resolves it (the envelope-theorem gradient is then accurate to the same
    /// order), so the sweeps stop instead of running to max_sweeps. Shared by the dense and the
    /// sparse fit (klmnl_sparse).
    pub(crate) fn end_sweep(&mut self, sweep: usize, start: f64, cur: f64, tol: f64, b_tol: f64) -> bool {
        self.sweeps = sweep + 1;
        self.bound_trace.push(cur);
        self.flat_sweeps = if (cur - start).abs() <= tol * cur.abs().max(1.0) { self.flat_sweeps + 1 } else { 0 };
        if self.flat_sweeps > 0 && self.max_b_minus_gbar < b_tol {
            self.converged = true;
        } else if self.flat_sweeps >= FLAT_SWEEPS_AT_FLOOR {
            self.converged = true;
            self.stopped_at_floor = true;
        }
        self.converged
    }
}

/// b_tol for a fit whose tolerance is loosened from `tol` to `looser`: the envelope gradient's
/// error shrinks with the root of the bound's, so b_tol scales with the root of the ratio.
/// Shared by the dense search's inner fits (`inner_params`) and the sparse growth's fits.
pub(crate) fn loosened_b_tol(b_tol: f64, tol: f64, looser: f64) -> f64 {
    b_tol * (looser / tol).sqrt()
}

pub(super) fn m_of(pr: &Prior, b: &[f64]) -> Vec<f64> {
    let alpha: Vec<f64> = pr.y1.iter().zip(b).map(|(y, b)| y - b).collect();
    matvec(pr.k.as_ref(), &alpha)
}

/// log Z_h (eq. 21, stable form D§2.3) and the per-datum terms.
pub(super) fn bound(pr: &Prior, st: &State, m: &[f64]) -> Result<(f64, Vec<DatumTerms>), FitError> {
    bound_at(pr, &st.v, &st.s, &st.b, m)
}

/// [`bound`] at the parts of a state (line searches move one part and share the rest).
pub(super) fn bound_at(pr: &Prior, v: &VState, s: &[Mat<f64>], b: &[f64], m: &[f64]) -> Result<(f64, Vec<DatumTerms>), FitError> {
    let c = pr.c;
    let alpha: Vec<f64> = pr.y1.iter().zip(b).map(|(y, b)| y - b).collect();
    let aka: f64 = alpha.iter().zip(m).map(|(a, m)| a * m).sum();
    let neg_kl = 0.5 * v.logdet_kinv_v + 0.5 * v.tr_tk - 0.5 * aka;
    let mut total = neg_kl;
    let mut terms = Vec::with_capacity(pr.n);
    for i in 0..pr.n {
        let vi = &v.blocks[i];
        let ldv = chol(vi, "V_i")?.log_det();
        let t = datum_terms(&m[i * c..(i + 1) * c], vi, ldv, &b[i * c..(i + 1) * c], &s[i], pr.basis())?;
        total += t.h_core + (0..c).map(|k| pr.y1[i * c + k] * m[i * c + k]).sum::<f64>();
        terms.push(t);
    }
    // A non-finite bound (an overflowed term) is an error, never a value a step compares with.
    if !total.is_finite() {
        return Err(FitError::Numerical(format!("KL-MNL: the bound log Z_h is {total}")));
    }
    Ok((total, terms))
}

pub(super) fn neg_kl(pr: &Prior, st: &State, m: &[f64]) -> f64 {
    let aka: f64 = pr.y1.iter().zip(&st.b).zip(m).map(|((y, b), m)| (y - b) * m).sum();
    0.5 * st.v.logdet_kinv_v + 0.5 * st.v.tr_tk - 0.5 * aka
}

/// E.3 initialisation: W_i = gamma_w (I/C - 11^T/C^2), V = (K^{-1} + W)^{-1}, alpha = T a,
/// b = y - alpha, S_i = V_i^{-1} + W_i (W in the class basis).
pub(super) fn init_state(pr: &Prior, w_class: &[Mat<f64>], gamma_a: f64) -> Result<State, FitError> {
    let c = pr.c;
    let w: Vec<Mat<f64>> = w_class.iter().map(|wi| pr.basis().into_basis(wi.clone())).collect();
    let v = v_from_w(pr, &w)?;
    let mut a = vec![0.0; pr.n * c];
    for i in 0..pr.n {
        for k in 0..c {
            let y = pr.y1[i * c + k];
            a[i * c + k] = gamma_a * (y + (y - 1.0) / (c as f64 - 1.0).max(1.0));
        }
    }
    let alpha = matvec(v.t.dense().as_ref(), &a);
    let b: Vec<f64> = pr.y1.iter().zip(&alpha).map(|(y, a)| y - a).collect();
    let s = (0..pr.n)
        .map(|i| -> Result<Mat<f64>, FitError> {
            let vinv = chol(&v.blocks[i], "V_i")?.solve(eye(c).as_ref());
            Ok(sym(&(vinv + &w[i])))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(State { b, s, v, w_prev: w, w_exact: true })
}

pub(super) fn default_w(n: usize, c: usize, gamma: f64) -> Vec<Mat<f64>> {
    let cf = c as f64;
    let w = Mat::from_fn(c, c, |i, j| gamma * ((if i == j { 1.0 / cf } else { 0.0 }) - 1.0 / (cf * cf)));
    vec![w; n]
}

/// W_i = S_i - V_i^{-1}, made PSD by clamping (footnote 10).
pub(super) fn current_w(pr: &Prior, st: &State) -> Result<Vec<Mat<f64>>, FitError> {
    let c = pr.c;
    (0..pr.n)
        .map(|i| {
            let vinv = chol(&st.v.blocks[i], "V_i")?.solve(eye(c).as_ref());
            let w = sym(&(&st.s[i] - vinv));
            let (lam, u) = eigh(&w)?;
            Ok(Mat::from_fn(c, c, |p, q| (0..c).map(|k| u[(p, k)] * lam[k].max(0.0) * u[(q, k)]).sum()))
        })
        .collect()
}
