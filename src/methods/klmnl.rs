//! KL-MNL: the variational multinomial-logit GP of Chai (2012), non-sparse.
//!
//! q(f|y) = N(m, V) with the bound h of Theorem 6 on every expected log-likelihood, so
//!     log p(y) >= log Z_B >= log Z_h = -KL(q || p) + sum_i h(y_i; q_i, b_i, S_i)      (Chai eq. 21)
//! maximised by block coordinate ascent over {S_i}, the joint (m, b) and V (Sec. 3, App. C, E).
//! Every block proposes a fixed point that is accepted only when the bound does not fall;
//! otherwise the best convex mix (1-eta) old + eta new is found by false position on the
//! directional derivative (notes D§2.4.5). Nothing inverts K: m = K (y - b) (eq. 27), so
//! alpha = K^{-1} m = y - b, and V = K - K T K with T = L_W (I + L_W^T K L_W)^{-1} L_W^T (E.2.1).
//!
//! Layout: latent vectors are datum-major, f = (f_1; ...; f_n), f_i = (f_i^1..f_i^C), so the
//! prior covariance is K = Kx (x) Kc (paper §2.3.2) and every per-datum C x C block is
//! contiguous. The hand-off vector "mean" is class-major, as the rest of the harness expects.
use super::optimize::minimize_lbfgs;
use super::{parse_settings, Diagnostics, Evidence, FitContext, FitError, Fitted, HyperPolicy, Method, Prediction, Problem, ProblemShape, StopReason};
use crate::kernels::{KernelSet, SqExp};
use crate::linalg::{kron, log_sum_exp, matvec, softmax_in_place, Chol, SymPencil};
use crate::results::{EvidenceKind, Handoff};
use faer::linalg::solvers::Solve;
use faer::linalg::matmul::matmul;
use faer::linalg::triangular_solve::solve_lower_triangular_in_place;
use faer::{Accum, Mat, MatRef, Par, Side};
use ndarray::Array2;
use rand_pcg::Pcg64;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Mutex;

/// Version of this method's numbers, part of every cell key: bump it when a change of the code
/// (here or in shared numerics it uses) changes any number the method computes, so stored cells
/// are recomputed. `tests/numerics_versions.rs` fails when the output changes without a bump.
pub const NUMERICS_VERSION: u32 = 1;

/// Settings as written in a spec (`method: klmnl`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KlmnlParams {
    /// Block-coordinate sweeps (S, joint m/b, V) allowed per variational fit.
    #[serde(default = "d_max_sweeps")]
    pub max_sweeps: usize,
    /// Stop when log Z_h rises by less than tol * max(1, |log Z_h|) in a sweep and b = g-bar to
    /// b_tol, or when the bound has stayed that flat for 5 sweeps (b - g-bar at its rounding floor).
    #[serde(default = "d_tol")]
    pub tol: f64,
    #[serde(default = "d_b_tol")]
    pub b_tol: f64,
    /// gamma of the E.3 initialisation W_i = gamma_w (I/C - 11^T/C^2).
    #[serde(default = "one")]
    pub gamma_w: f64,
    /// gamma of the E.3 initial "data" a_i = gamma_a (y_i + (y_i - 1)/(C - 1)).
    #[serde(default = "one")]
    pub gamma_a: f64,
    /// L-BFGS iterations for hyper-parameter learning (`hyper: learn`).
    #[serde(default = "d_hyper_iters")]
    pub max_hyper_iters: u64,
    /// Hyper-parameter learning has converged when an L-BFGS iteration raises log Z_h* by less
    /// than this many nats. Tables report log Z to 0.01, and along the flat directions of an
    /// ARD bound (length-scales drifting out) tighter stops buy thousandths of a nat for
    /// dozens of O(p^3) evaluations.
    #[serde(default = "d_hyper_tol")]
    pub hyper_tol: f64,
    /// Latent classes the model has beyond those present in the data (Chai keeps C = 7 for
    /// glass, whose class 4 is empty: `extra_classes: 1`). predict_proba drops them and
    /// renormalises over the present classes.
    #[serde(default)]
    pub extra_classes: usize,
    /// What predict_proba returns: `eq25` (re-normalised softmax at the predictive mean) or
    /// `eq24` (exp of the lower bound (24) per class: rows sum to less than one).
    #[serde(default = "d_predictive")]
    pub predictive: String,
    /// Overrides the kernel's signal variance sigma^2 (after any `hyper: {from: ...}`), e.g. for
    /// Chai's Figure 1 sweep of sigma^2 * usqexpard(theta_MF) (grid over `settings.prior_variance`).
    #[serde(default)]
    pub prior_variance: Option<f64>,
    /// Inter-class covariance K^c (Chai §9.2.2): m1 (I), m2 (C diag(softmax rho)), m3 (eq. 46
    /// with diagonal M), m4 (eq. 46 with M = L L^T), m5 (C L L^T / tr(L L^T)); all keep tr K^c = C.
    #[serde(default = "d_kc")]
    pub kc_model: String,
    /// Learn the K^c parameters by maximising log Z_h* (with the kernel fixed unless `hyper: learn`).
    #[serde(default)]
    pub learn_kc: bool,
    /// Take K^c from the source cell's hand-off (vector "kc") instead of the model's start.
    #[serde(default)]
    pub kc_from_source: bool,
}

fn d_kc() -> String {
    "m1".into()
}

fn d_max_sweeps() -> usize {
    1000
}
fn d_tol() -> f64 {
    1e-10
}
fn d_b_tol() -> f64 {
    1e-8
}
fn one() -> f64 {
    1.0
}
fn d_hyper_iters() -> u64 {
    100
}
fn d_hyper_tol() -> f64 {
    1e-4
}
fn d_predictive() -> String {
    "eq25".into()
}

impl Default for KlmnlParams {
    fn default() -> Self {
        parse_settings(&serde_json::Value::Null).expect("defaults parse")
    }
}

impl KlmnlParams {
    pub fn check(self) -> Result<Klmnl, String> {
        if self.max_sweeps == 0 {
            return Err("settings.max_sweeps must be at least 1".into());
        }
        if !(self.tol > 0.0 && self.tol < 1.0) {
            return Err(format!("settings.tol must be in (0, 1), got {}", self.tol));
        }
        if !(self.b_tol > 0.0) {
            return Err(format!("settings.b_tol must be positive, got {}", self.b_tol));
        }
        if !(self.hyper_tol >= 0.0 && self.hyper_tol.is_finite()) {
            return Err(format!("settings.hyper_tol must be a number of nats >= 0, got {}", self.hyper_tol));
        }
        if !(self.gamma_w > 0.0 && self.gamma_w.is_finite()) {
            return Err(format!("settings.gamma_w must be positive, got {}", self.gamma_w));
        }
        if !(self.gamma_a > 0.0 && self.gamma_a.is_finite()) {
            return Err(format!("settings.gamma_a must be positive, got {}", self.gamma_a));
        }
        if self.extra_classes > 10 {
            return Err(format!("settings.extra_classes must be at most 10, got {}", self.extra_classes));
        }
        if let Some(v) = self.prior_variance {
            if !(v > 0.0 && v.is_finite()) {
                return Err(format!("settings.prior_variance must be positive, got {v}"));
            }
        }
        if !["m1", "m2", "m3", "m4", "m5"].contains(&self.kc_model.as_str()) {
            return Err(format!("settings.kc_model must be one of m1..m5, got {}", self.kc_model));
        }
        if self.predictive != "eq25" && self.predictive != "eq24" {
            return Err(format!("settings.predictive must be eq25 or eq24, got {}", self.predictive));
        }
        Ok(Klmnl { params: self })
    }
}

/// The checked method.
#[derive(Clone, Debug)]
pub struct Klmnl {
    pub params: KlmnlParams,
}

// ---------------------------------------------------------------------------------------
// Small dense helpers (C x C).

fn eye(n: usize) -> Mat<f64> {
    Mat::from_fn(n, n, |i, j| if i == j { 1.0 } else { 0.0 })
}

fn sym(a: &Mat<f64>) -> Mat<f64> {
    Mat::from_fn(a.nrows(), a.ncols(), |i, j| 0.5 * (a[(i, j)] + a[(j, i)]))
}

fn trace_prod(a: MatRef<'_, f64>, b: MatRef<'_, f64>) -> f64 {
    // tr(A B) = sum_ij A_ij B_ji
    let mut s = 0.0;
    for i in 0..a.nrows() {
        for j in 0..a.ncols() {
            s += a[(i, j)] * b[(j, i)];
        }
    }
    s
}

/// Symmetric eigendecomposition (eigenvalues ascending); cyclic Jacobi for the small C x C
/// blocks (faer's general routine carries a large fixed cost per call).
fn eigh(a: &Mat<f64>) -> Result<(Vec<f64>, Mat<f64>), FitError> {
    if a.nrows() <= 12 {
        return jacobi_eigh(a);
    }
    let e = sym(a).self_adjoint_eigen(Side::Lower).map_err(|e| FitError::Numerical(format!("eigendecomposition failed: {e:?}")))?;
    let s = e.S().column_vector();
    Ok(((0..a.nrows()).map(|i| s[i]).collect(), e.U().to_owned()))
}

fn jacobi_eigh(a0: &Mat<f64>) -> Result<(Vec<f64>, Mat<f64>), FitError> {
    // Row-major copies on the stack (n <= 12); called thousands of times per fit.
    const MAX: usize = 12;
    let n = a0.nrows();
    assert!(n <= MAX, "jacobi_eigh is for small matrices");
    let mut a = [0.0; MAX * MAX];
    let mut v = [0.0; MAX * MAX];
    for i in 0..n {
        for j in 0..n {
            a[i * n + j] = 0.5 * (a0[(i, j)] + a0[(j, i)]);
        }
        v[i * n + i] = 1.0;
    }
    if a[..n * n].iter().any(|x| !x.is_finite()) {
        return Err(FitError::Numerical("eigendecomposition of a non-finite matrix".into()));
    }
    for _sweep in 0..60 {
        let off: f64 = (0..n).map(|i| (0..n).filter(|&j| j != i).map(|j| a[i * n + j] * a[i * n + j]).sum::<f64>()).sum();
        let scale: f64 = (0..n).map(|i| a[i * n + i] * a[i * n + i]).sum::<f64>();
        if off <= 1e-30 * scale.max(1e-300) || off == 0.0 {
            break;
        }
        for p in 0..n {
            for q in p + 1..n {
                let apq = a[p * n + q];
                if apq == 0.0 {
                    continue;
                }
                let theta = (a[q * n + q] - a[p * n + p]) / (2.0 * apq);
                let t = theta.signum() / (theta.abs() + (theta * theta + 1.0).sqrt());
                let t = if theta == 0.0 { 1.0 } else { t };
                let c = 1.0 / (t * t + 1.0).sqrt();
                let s = t * c;
                for k in 0..n {
                    let (akp, akq) = (a[k * n + p], a[k * n + q]);
                    a[k * n + p] = c * akp - s * akq;
                    a[k * n + q] = s * akp + c * akq;
                }
                for k in 0..n {
                    let (apk, aqk) = (a[p * n + k], a[q * n + k]);
                    a[p * n + k] = c * apk - s * aqk;
                    a[q * n + k] = s * apk + c * aqk;
                }
                for k in 0..n {
                    let (vkp, vkq) = (v[k * n + p], v[k * n + q]);
                    v[k * n + p] = c * vkp - s * vkq;
                    v[k * n + q] = s * vkp + c * vkq;
                }
            }
        }
    }
    let mut idx: Vec<usize> = (0..n).collect();
    idx.sort_by(|&i, &j| a[i * n + i].total_cmp(&a[j * n + j]));
    let lam = idx.iter().map(|&i| a[i * n + i]).collect();
    let u = Mat::from_fn(n, n, |r, k| v[r * n + idx[k]]);
    Ok((lam, u))
}

fn chol(a: &Mat<f64>, what: &str) -> Result<Chol, FitError> {
    Ok(Chol::factor(sym(a).as_ref(), what)?)
}

/// F with F F^T = A for a PSD C x C matrix A: the columns U_k sqrt(lam_k) of its eigenvalues
/// above 1e-12 of the largest (below that they are rounding noise or negligible).
fn psd_factor(a: &Mat<f64>) -> Result<Mat<f64>, FitError> {
    let (lam, u) = eigh(a)?;
    let lmax = lam.iter().copied().fold(0.0, f64::max);
    let keep: Vec<usize> = (0..lam.len()).filter(|&k| lam[k] > 1e-12 * lmax.max(1e-300) && lam[k] > 0.0).collect();
    Ok(Mat::from_fn(a.nrows(), keep.len(), |p, q| u[(p, keep[q])] * lam[keep[q]].sqrt()))
}

/// False position with Illinois end-point down-weighting for a decreasing derivative phi on
/// [0, 1] (notes D§2.4.5); returns the root (or an end-point when phi does not change sign).
pub(crate) fn false_position(mut phi: impl FnMut(f64) -> f64) -> f64 {
    let (mut lo, mut hi) = (0.0, 1.0);
    let (mut flo, mut fhi) = (phi(0.0), phi(1.0));
    if !(flo > 0.0) {
        return 0.0;
    }
    if fhi >= 0.0 {
        return 1.0;
    }
    let mut side = 0i8;
    let mut eta = 0.5;
    for _ in 0..60 {
        eta = (lo * fhi - hi * flo) / (fhi - flo);
        if !eta.is_finite() {
            eta = 0.5 * (lo + hi);
        }
        let f = phi(eta);
        if f.abs() < 1e-13 || hi - lo < 1e-12 {
            return eta;
        }
        if f > 0.0 {
            lo = eta;
            flo = f;
            if side == 1 {
                fhi *= 0.5;
            }
            side = 1;
        } else {
            hi = eta;
            fhi = f;
            if side == -1 {
                flo *= 0.5;
            }
            side = -1;
        }
    }
    eta
}

/// Sweeps in a row with the bound within tol after which b - g-bar is taken to be at its floor.
const FLAT_SWEEPS_AT_FLOOR: usize = 5;

fn accept(new: f64, old: f64) -> bool {
    new >= old - 1e-12 * old.abs().max(1.0)
}

// ---------------------------------------------------------------------------------------
// The per-datum bound h (Theorem 6).

/// The basis of the per-datum C x C matrices V_i, S_i, W_i of a fit: K^c's eigenvectors U
/// (the matrices are held as U^T X U), or the class basis (`None`: U = I, as for a diagonal
/// K^c). Vectors (m, b, g-bar) and T always stay in the class basis. See [`v_from_w`] for why.
#[derive(Clone, Copy)]
pub(crate) struct Basis<'a>(Option<&'a Mat<f64>>);

impl Basis<'_> {
    pub(crate) const CLASS: Basis<'static> = Basis(None);

    /// U X U^T: from this basis to the class basis.
    fn to_class(self, x: &Mat<f64>) -> Mat<f64> {
        match self.0 {
            None => x.clone(),
            Some(u) => sym(&(u * x * u.transpose())),
        }
    }

    /// U^T X U: from the class basis to this one (by value: in the class basis, a move).
    fn from_class(self, x: Mat<f64>) -> Mat<f64> {
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
    a_in_basis: Mat<f64>,
    s_inv_in_basis: Mat<f64>,
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
    Ok(DatumTerms { h_core, gbar, s_inv, a_in_basis: basis.from_class(a), s_inv_in_basis })
}

/// The S fixed point (61): S = L^{-T} P (sqrt(Lambda + I/4) + I/2) P^T L^{-1} with
/// V = L L^T and P Lambda P^T = eig(L^T A L).
fn s_fixed_point(lv: &Chol, a: &Mat<f64>) -> Result<Mat<f64>, FitError> {
    let c = a.nrows();
    let l = lv.l();
    let lal = l.transpose() * a * l;
    let (lam, p) = eigh(&lal)?;
    let x = lv.solve_lt(p.as_ref()); // L^{-T} P
    let lt: Vec<f64> = lam.iter().map(|v| (v.max(0.0) + 0.25).sqrt() + 0.5).collect();
    Ok(sym(&Mat::from_fn(c, c, |i, j| (0..c).map(|k| x[(i, k)] * lt[k] * x[(j, k)]).sum())))
}

/// One S-step for one datum (Sec. 3.2, App. C.1). Returns the new S and its terms.
fn s_step(m: &[f64], v: &Mat<f64>, lv: &Chol, b: &[f64], s: &Mat<f64>, cur: DatumTerms, basis: Basis) -> Result<(Mat<f64>, DatumTerms, bool), FitError> {
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
            Ok(t) => {
                let si = &t.s_inv_in_basis;
                let g = -v + si + si * &t.a_in_basis * si;
                0.5 * trace_prod(g.as_ref(), delta.as_ref())
            }
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

/// One b-step for one datum (Sec. 3.1): fixed point b = g-bar, else Newton with a
/// false-position step on the directional derivative.
fn b_step(m: &[f64], v: &Mat<f64>, ldv: f64, b: &[f64], s: &Mat<f64>, cur: DatumTerms) -> Result<(Vec<f64>, DatumTerms), FitError> {
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
            Ok(t) => {
                let diff: Vec<f64> = (0..c).map(|i| be[i] - t.gbar[i]).collect();
                let g = matvec(t.s_inv.as_ref(), &diff);
                -(0..c).map(|i| g[i] * d[i]).sum::<f64>()
            }
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

/// max over (b, S) of h_core for q = N(m, V) (one datum): the per-datum optimiser used by the
/// predictive lower bound (24) and the unit tests. Returns (max h_core, b*, S*).
pub fn optimise_datum(m: &[f64], v: &Mat<f64>) -> Result<(f64, Vec<f64>, Mat<f64>), FitError> {
    let c = m.len();
    let lv = Chol::factor_with_jitter(sym(v).as_ref(), "predictive V_*")?;
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
    Ok((t.h_core, b, s))
}

/// Lemma 29 / Theorem 10: the per-datum optimum of h at q = N(0, s2 I), i.e.
/// -(C-1)/2 [2r - log(r + 1/2) - 1] - log C with r = sqrt(s2/C + 1/4).
pub fn theorem10_per_datum(n_classes: usize, s2: f64) -> f64 {
    let c = n_classes as f64;
    let r = (s2 / c + 0.25).sqrt();
    -(c - 1.0) / 2.0 * (2.0 * r - (r + 0.5).ln() - 1.0) - c.ln()
}

// ---------------------------------------------------------------------------------------
// The full variational state.

/// V through T (V = K - K T K): either the fixed-point form T = Z^T Z with Z = L_B^{-1} L_W^T
/// (kept factored: the sweeps need only the blocks of V, so Z is formed on demand) or a dense
/// T after a convex-mix line search, with P = L_K^T T L_K (the next mix's starting point, linear
/// in T, so a mix of two states mixes their P).
#[derive(Clone)]
enum TRep {
    Fx { lb: Chol, lwt: Mat<f64> },
    Dense { t: Mat<f64>, p: Mat<f64> },
}

impl TRep {
    fn dense(&self) -> Mat<f64> {
        match self {
            TRep::Fx { lb, lwt } => {
                let z = lb.solve_l(lwt.as_ref());
                z.transpose() * &z
            }
            TRep::Dense { t, .. } => t.clone(),
        }
    }

    /// (T, L_K^T T L_K) for the L_K factor `l`; from Z (2 r p^2 flops for r = rank W) rather
    /// than from a dense T (2 p^3).
    fn with_sandwich(&self, l: MatRef<'_, f64>) -> (Mat<f64>, Mat<f64>) {
        match self {
            TRep::Fx { lb, lwt } => {
                let z = lb.solve_l(lwt.as_ref());
                let zl = &z * l;
                (z.transpose() * &z, zl.transpose() * &zl)
            }
            TRep::Dense { t, p } => (t.clone(), p.clone()),
        }
    }
}

/// A V candidate: T, the diagonal blocks V_i (in [`Prior::basis`]), log|K^{-1}V| and tr(T K).
#[derive(Clone)]
struct VState {
    t: TRep,
    blocks: Vec<Mat<f64>>,
    logdet_kinv_v: f64,
    tr_tk: f64,
}

/// Everything fixed for one kernel: K = Kx (x) Kc (datum-major), y one-hot, sizes, and K^c's
/// eigendecomposition Kc = U diag(lam) U^T (U = I, not stored, for a diagonal K^c).
pub(crate) struct Prior {
    pub n: usize,
    pub c: usize,
    pub k: Mat<f64>,
    pub kx: Mat<f64>,
    pub kc: Mat<f64>,
    pub y1: Vec<f64>,
    kc_lam: Vec<f64>,
    kc_u: Option<Mat<f64>>,
}

/// K^c's eigenvalues are floored at this fraction of the largest: below it they are rounding
/// noise of K^c's entries (eps |K^c| ~ 1e-15) and may come out zero or negative. A learned K^c
/// (M5) can approach singularity, the bound rising towards its limit at the boundary of the PSD
/// cone; with the floor the fits there stay defined and differ from that limit by O(1e-14).
const KC_EIG_FLOOR: f64 = 1e-14;

impl Prior {
    pub fn new(kx: Mat<f64>, kc: Mat<f64>, y: &[usize]) -> Result<Prior, FitError> {
        let n = kx.nrows();
        let c = kc.nrows();
        let diagonal = (0..c).all(|i| (0..c).all(|j| i == j || kc[(i, j)] == 0.0));
        let (mut kc_lam, kc_u) = if diagonal {
            ((0..c).map(|i| kc[(i, i)]).collect::<Vec<_>>(), None)
        } else {
            let (lam, u) = jacobi_eigh(&kc)?;
            (lam, Some(u))
        };
        let floor = KC_EIG_FLOOR * kc_lam.iter().copied().fold(0.0, f64::max);
        let kc = if kc_lam.iter().all(|&l| l >= floor) {
            kc
        } else {
            kc_lam.iter_mut().for_each(|l| *l = l.max(floor));
            match &kc_u {
                Some(u) => Mat::from_fn(c, c, |i, j| (0..c).map(|k| u[(i, k)] * kc_lam[k] * u[(j, k)]).sum()),
                None => Mat::from_fn(c, c, |i, j| if i == j { kc_lam[i] } else { 0.0 }),
            }
        };
        let k = kron(kx.as_ref(), kc.as_ref());
        let mut y1 = vec![0.0; n * c];
        for (i, &yi) in y.iter().enumerate() {
            y1[i * c + yi] = 1.0;
        }
        Ok(Prior { n, c, k, kx, kc, y1, kc_lam, kc_u })
    }

    /// The basis the per-datum matrices of a fit at this prior are held in.
    fn basis(&self) -> Basis<'_> {
        Basis(self.kc_u.as_ref())
    }
}

/// V^fx = (K^{-1} + W)^{-1} via E.2.1: W = L_W L_W^T per block (eigenvalues > eps kept),
/// B = I + L_W^T K L_W, T = L_W B^{-1} L_W^T, V = K - K T K, log|K^{-1}V| = -log|B|.
/// W's blocks come, and V's blocks go, in K^c's eigenbasis ([`Prior::basis`]).
///
/// Why that basis: a learned K^c (model M5) can be nearly singular (smallest eigenvalue lam_min
/// down to 1e-11). Along its near-null direction V_i's variance is about lam_min Kx_ii and S_i,
/// optimised against V_i, about its inverse. Held in the class basis, V_i and S_i carry errors
/// of order eps |V_i| and eps |S_i|, so log|V_i| and tr(S_i V_i) in h were each off by about
/// eps cond(V_i) ~ 1e-6 nats per datum: every V proposal then differed from the current state
/// by ~1e-5 nats of noise, the small true gains near the optimum were rejected, and the sweeps
/// crawled (2-20 s per fit, > 1000 s per M5 learning run on glass). In K^c's eigenbasis the
/// near-null direction is a coordinate axis: K = Kx (x) diag(lam) scales its rows exactly, the
/// blocks come out accurate entry by entry, and Cholesky, being invariant to diagonal scaling,
/// keeps that accuracy.
fn v_from_w(pr: &Prior, w: &[Mat<f64>]) -> Result<VState, FitError> {
    let (n, c) = (pr.n, pr.c);
    let nc = n * c;
    // Block columns of L_W: (datum, C x r_i factor F_i in K^c's eigenbasis).
    let fs: Vec<Mat<f64>> = w.iter().map(psd_factor).collect::<Result<_, _>>()?;
    // B = I + L_W^T (Kx (x) diag(lam)) L_W, and L_W^T in the class basis (T is kept there).
    let lam = Mat::from_fn(c, c, |p, q| if p == q { pr.kc_lam[p] } else { 0.0 });
    let (mut bm, offs) = kron_sandwich_lower(&pr.kx, lam.as_ref(), &fs);
    let r = offs[n];
    let mut lwt = Mat::<f64>::zeros(r, nc);
    for (i, f) in fs.iter().enumerate() {
        let f_class = match &pr.kc_u {
            Some(u) => u * f,
            None => f.clone(),
        };
        lwt.as_mut().submatrix_mut(offs[i], i * c, f.ncols(), c).copy_from(f_class.transpose());
        for k in offs[i]..offs[i + 1] {
            bm[(k, k)] += 1.0;
        }
    }
    let cols: Vec<(usize, Mat<f64>)> = fs.into_iter().enumerate().collect();
    let lb = Chol::factor_owned(bm, "B = I + L_W^T K L_W")?;
    let q_store = whitened_gram(pr, &lb, &cols, &offs);
    let q = faer::MatRef::from_column_major_slice(&q_store, r, nc);
    let blocks: Vec<Mat<f64>> = (0..n)
        .map(|i| {
            let qi = q.as_ref().subcols(i * c, c);
            let ki = Mat::from_fn(c, c, |p, qq| if p == qq { pr.kx[(i, i)] * pr.kc_lam[p] } else { 0.0 });
            sym(&(ki - qi.transpose() * qi))
        })
        .collect();
    // tr(T K) = tr(B^{-1} L_W^T K L_W) = tr(B^{-1} (B - I)) = r - tr(B^{-1}), where
    // tr(B^{-1}) = ||L_B^{-1}||_F^2 comes from q without a triangular inverse (r^3 / 3 flops):
    // q L_W = L_B^{-1} (B - I) = L_B^T - L_B^{-1}, so L_B^{-1} is 1 / L_kk on the diagonal and
    // -(q L_W) below it. Column block i of q L_W is q[:, datum i] F_i.
    let l = lb.l();
    let mut tr_binv: f64 = (0..r).map(|k| 1.0 / (l[(k, k)] * l[(k, k)])).sum();
    for ((i, f), &o) in cols.iter().zip(&offs) {
        let qf = q.as_ref().subcols(i * c, c) * f;
        for k in 0..f.ncols() {
            tr_binv += (o + k + 1..r).map(|j| qf[(j, k)] * qf[(j, k)]).sum::<f64>();
        }
    }
    let tr_tk = r as f64 - tr_binv;
    let logdet_kinv_v = -lb.log_det();
    Ok(VState { t: TRep::Fx { lb, lwt }, blocks, logdet_kinv_v, tr_tk })
}

/// The lower triangle of E^T (Kx (x) Kc) E for E = blockdiag(E_1, ..., E_n) (E_i: C x r_i): block
/// (i, j) is Kx_ij E_i^T Kc E_j, from one r x C x r product. Also the column offsets of the
/// blocks (n + 1 of them, the last r = sum r_i).
fn kron_sandwich_lower(kx: &Mat<f64>, kc: MatRef<'_, f64>, es: &[Mat<f64>]) -> (Mat<f64>, Vec<usize>) {
    let c = kc.nrows();
    let mut offs = Vec::with_capacity(es.len() + 1);
    let mut datum_of = Vec::new();
    offs.push(0);
    for (i, e) in es.iter().enumerate() {
        datum_of.extend(std::iter::repeat_n(i, e.ncols()));
        offs.push(offs[i] + e.ncols());
    }
    let r = offs[es.len()];
    let mut e_all = Mat::<f64>::zeros(c, r);
    for (i, e) in es.iter().enumerate() {
        e_all.as_mut().subcols_mut(offs[i], e.ncols()).copy_from(e);
    }
    let kc_e = kc * &e_all;
    let mut out = Mat::<f64>::zeros(r, r);
    matmul(out.as_mut(), Accum::Replace, e_all.transpose(), kc_e.as_ref(), 1.0, Par::Seq);
    for col in 0..r {
        let j = datum_of[col];
        for row in col..r {
            out[(row, col)] *= kx[(datum_of[row], j)];
        }
    }
    (out, offs)
}

/// q = L_B^{-1} L_W^T K (r x nC, in K^c's eigenbasis, column-major), the factor of K T K = q^T q, by two
/// structured steps instead of one dense triangular solve (r^2 nC flops):
/// 1. Z = L_B^{-1} L_W^T. Datum i's columns of L_W^T are zero above its row offset o_i, and so
///    are Z's (forward substitution), so they need only the trailing triangle L_B[o_i.., o_i..]
///    (solved for a group of data at a time): about r^3 / 3 flops.
/// 2. q = Z (Kx (x) diag(lam)). Z stored column-major as r x nC is, read with rows (c, row), the
///    rC x n matrix whose product with Kx gives q in the same layout: 2 r C n^2 flops.
fn whitened_gram(pr: &Prior, lb: &Chol, cols: &[(usize, Mat<f64>)], offs: &[usize]) -> Vec<f64> {
    const GROUP: usize = 16;
    let (n, c) = (pr.n, pr.c);
    let r = lb.dim();
    let mut z = vec![0.0; r * n * c];
    {
        let mut zm = faer::MatMut::from_column_major_slice_mut(&mut z, r, n * c);
        for ((i, f), &o) in cols.iter().zip(offs) {
            zm.as_mut().submatrix_mut(o, i * c, f.ncols(), c).copy_from(f.transpose());
        }
        for i0 in (0..n).step_by(GROUP) {
            let (o, width) = (offs[i0], (n - i0).min(GROUP) * c);
            if o < r {
                solve_lower_triangular_in_place(lb.l().submatrix(o, o, r - o, r - o), zm.as_mut().submatrix_mut(o, i0 * c, r - o, width), Par::Seq);
            }
        }
    }
    let zp = faer::MatRef::from_column_major_slice(&z, r * c, n);
    let mut q = vec![0.0; r * n * c];
    let mut qp = faer::MatMut::from_column_major_slice_mut(&mut q, r * c, n);
    matmul(qp.as_mut(), Accum::Replace, zp, pr.kx.as_ref(), 1.0, Par::Seq);
    for (col, qc) in q.chunks_exact_mut(r).enumerate() {
        let lam = pr.kc_lam[col % c];
        qc.iter_mut().for_each(|v| *v *= lam);
    }
    q
}

/// The variational parameters besides V; S_i and W_i in [`Prior::basis`].
#[derive(Clone)]
struct State {
    b: Vec<f64>,
    s: Vec<Mat<f64>>,
    v: VState,
    /// The W with V = (K^{-1} + W)^{-1} (exact unless a V-space mix was taken).
    w_prev: Vec<Mat<f64>>,
    /// Whether V = (K^{-1} + w_prev)^{-1} holds exactly: false after a V-space mix with eta < 1,
    /// whose V no block-diagonal W reproduces.
    w_exact: bool,
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
    pub bound_trace: Vec<f64>,
}

fn m_of(pr: &Prior, b: &[f64]) -> Vec<f64> {
    let alpha: Vec<f64> = pr.y1.iter().zip(b).map(|(y, b)| y - b).collect();
    matvec(pr.k.as_ref(), &alpha)
}

/// log Z_h (eq. 21, stable form D§2.3) and the per-datum terms.
fn bound(pr: &Prior, st: &State, m: &[f64]) -> Result<(f64, Vec<DatumTerms>), FitError> {
    bound_at(pr, &st.v, &st.s, &st.b, m)
}

/// [`bound`] at the parts of a state (line searches move one part and share the rest).
fn bound_at(pr: &Prior, v: &VState, s: &[Mat<f64>], b: &[f64], m: &[f64]) -> Result<(f64, Vec<DatumTerms>), FitError> {
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
    Ok((total, terms))
}

fn neg_kl(pr: &Prior, st: &State, m: &[f64]) -> f64 {
    let aka: f64 = pr.y1.iter().zip(&st.b).zip(m).map(|((y, b), m)| (y - b) * m).sum();
    0.5 * st.v.logdet_kinv_v + 0.5 * st.v.tr_tk - 0.5 * aka
}

/// E.3 initialisation: W_i = gamma_w (I/C - 11^T/C^2), V = (K^{-1} + W)^{-1}, alpha = T a,
/// b = y - alpha, S_i = V_i^{-1} + W_i (W in the class basis).
fn init_state(pr: &Prior, w_class: &[Mat<f64>], gamma_a: f64) -> Result<State, FitError> {
    let c = pr.c;
    let w: Vec<Mat<f64>> = w_class.iter().map(|wi| pr.basis().from_class(wi.clone())).collect();
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

fn default_w(n: usize, c: usize, gamma: f64) -> Vec<Mat<f64>> {
    let cf = c as f64;
    let w = Mat::from_fn(c, c, |i, j| gamma * ((if i == j { 1.0 / cf } else { 0.0 }) - 1.0 / (cf * cf)));
    vec![w; n]
}

/// W_i = S_i - V_i^{-1}, made PSD by clamping (footnote 10).
fn current_w(pr: &Prior, st: &State) -> Result<Vec<Mat<f64>>, FitError> {
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

/// The joint Newton step on b with m = K (y - b) (eq. 65): d = -(I + D P)^{-1} (b - g-bar) with
/// P = K + S^{-1} and D = blockdiag(diag(g-bar_i) - g-bar_i g-bar_i^T). D_i = E_i E_i^T with E_i of
/// C - 1 columns ([`softmax_hessian_factor`]), and by Woodbury
/// (I + D P)^{-1} r = r - E (I + E^T P E)^{-1} E^T P r: an SPD system of size n (C - 1) whose
/// matrix comes block by block, (E^T K E)_ij = Kx_ij E_i^T Kc E_j, without forming P.
fn newton_direction(pr: &Prior, b: &[f64], terms: &[DatumTerms]) -> Result<Vec<f64>, FitError> {
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
fn softmax_hessian_factor(g: &[f64]) -> Mat<f64> {
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
fn p_times(pr: &Prior, terms: &[DatumTerms], v: &[f64]) -> Vec<f64> {
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
fn joint_b_step(pr: &Prior, st: &mut State, m: &mut Vec<f64>, cur: f64, terms: &[DatumTerms], stats: &mut FitStats) -> Result<f64, FitError> {
    let (n, c) = (pr.n, pr.c);
    let nc = n * c;
    let d = newton_direction(pr, &st.b, terms)?;
    let kd = matvec(pr.k.as_ref(), &d);
    // Only b and m move: the candidates share S and V with the current state.
    let eval = |eta: f64| -> Result<(f64, Vec<f64>, Vec<f64>, Vec<DatumTerms>), FitError> {
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
            Ok((_, b2, _, t)) => {
                let r2: Vec<f64> = (0..nc).map(|k| b2[k] - t[k / c].gbar[k % c]).collect();
                let g = p_times(pr, terms, &r2);
                -(0..nc).map(|k| g[k] * d[k]).sum::<f64>()
            }
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

/// The V-step: V^fx = (K^{-1} + W)^{-1} with W_i = S_i - V_i^{-1} (eq. 28, E.2.1); if the bound
/// falls, false position on the convex mix T^cc = (1 - eta) T_old + eta T_new (App. C.3).
fn v_step(pr: &Prior, st: &mut State, m: &[f64], cur: f64, lk: &mut Option<Chol>, stats: &mut FitStats) -> Result<f64, FitError> {
    let w = current_w(pr, st)?;
    // First the natural-gradient step of the bound maximised over S: V = (K^{-1} + W^fx)^{-1}
    // with every S_i re-optimised at the new V before the bound is compared. S and V are
    // strongly coupled through 1/2 (log|S_i V_i| - tr(S_i V_i)): alternating exact S- and
    // V-steps contract by only 1/2 per sweep in one dimension, and far less with correlated
    // data (70-200 sweeps on glass), whereas W^fx = S*(V_i) - V_i^{-1} depends only weakly on
    // V (W^fx -> A_i as V_i -> 0), so this step converges in about ten sweeps.
    if let Ok(ve) = v_from_w(pr, &w) {
        let mut cand = State { b: st.b.clone(), s: st.s.clone(), v: ve, w_prev: w.clone(), w_exact: true };
        let mut cand_stats = FitStats::default();
        if s_steps(pr, &mut cand, m, &mut cand_stats).is_ok() {
            if let Ok((v, _)) = bound(pr, &cand, m) {
                if accept(v, cur) {
                    stats.s_line_searches += cand_stats.s_line_searches;
                    *st = cand;
                    return Ok(v);
                }
            }
        }
    }
    // Otherwise, at fixed S: the fixed point W^fx = S - V_blk^{-1} (eq. 28) overshoots (in one
    // dimension the map W -> W^fx has derivative -1 at the optimum), so propose
    // W(eta) = W_prev + eta (W^fx - W_prev) for decreasing eta (V stays (K^{-1} + W)^{-1}, an
    // ascent direction: d/deta at 0 is 1/2 tr(dW V dW V) >= 0), accepting the first that does
    // not lower the bound; else the paper's V-space convex mix by false position. The W path
    // starts at the current V only if V = (K^{-1} + W_prev)^{-1}; after a V-space mix it starts
    // at the V before the mix, below the current bound, so it is skipped.
    // A warm-started fit (hyper-parameter learning) starts the path at twice the eta its
    // predecessor last accepted: on glass it settles at 1/8 or 1/16 in most evaluations, which
    // from 1/2 would cost two or three rejected O(p^3) proposals.
    let etas: Vec<f64> = match (st.w_exact, stats.w_path_eta) {
        (false, _) => Vec::new(),
        (true, None) => vec![0.5, 0.25, 0.125, 1.0 / 16.0, 1.0 / 64.0, 1.0 / 256.0],
        (true, Some(last)) => {
            let start = (2.0 * last).min(0.5);
            (0..6).map(|k| start / 2f64.powi(k)).filter(|&e| e >= 1.0 / 256.0).collect()
        }
    };
    for eta in etas {
        let we: Vec<Mat<f64>> = st.w_prev.iter().zip(&w).map(|(a, b)| a * faer::Scale(1.0 - eta) + b * faer::Scale(eta)).collect();
        let Ok(ve) = v_from_w(pr, &we) else { continue };
        if let Ok((v, _)) = bound_at(pr, &ve, &st.s, &st.b, m) {
            if accept(v, cur) {
                st.v = ve;
                st.w_prev = we;
                stats.w_path_eta = Some(eta);
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
fn v_mix_step(pr: &Prior, st: &mut State, m: &[f64], cur: f64, w: Vec<Mat<f64>>, lk: &mut Option<Chol>, stats: &mut FitStats) -> Result<(f64, f64), FitError> {
    let vnew = v_from_w(pr, &w)?;
    stats.v_line_searches += 1;
    // Where the mix is no ascent direction, false position stops at eta = 0: skip the O(p^3) work.
    if st.w_exact && !(mix_slope_at_zero(pr, st, &vnew)? > 0.0) {
        return Ok((cur, 0.0));
    }
    // The mix works in K's whitened coordinates. Where K is too ill-conditioned for them (a
    // nearly singular K^c), A = I - L_K^T T L_K may not factor: then the mix is not taken, which
    // keeps the state (the bound stays monotone) and leaves the next sweep's steps to move V.
    if lk.is_none() {
        let Ok(l) = Chol::factor_with_jitter(pr.k.as_ref(), "K") else { return Ok((cur, 0.0)) };
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
fn mix_slope_at_zero(pr: &Prior, st: &State, vnew: &VState) -> Result<f64, FitError> {
    debug_assert!(st.w_exact);
    let mut slope = 0.0;
    for i in 0..pr.n {
        let vi_inv = chol(&st.v.blocks[i], "V_i")?.solve(eye(pr.c).as_ref());
        let g = &st.w_prev[i] + vi_inv - &st.s[i];
        slope += trace_prod(g.as_ref(), (&vnew.blocks[i] - &st.v.blocks[i]).as_ref());
    }
    Ok(0.5 * slope)
}

/// The fitted variational posterior for one kernel.
pub(crate) struct VarFit {
    st: State,
    pub m: Vec<f64>,
    pub log_zh: f64,
    pub neg_kl: f64,
    pub stats: FitStats,
}

impl VarFit {
    pub fn alpha(&self, pr: &Prior) -> Vec<f64> {
        pr.y1.iter().zip(&self.st.b).map(|(y, b)| y - b).collect()
    }
    pub fn t_dense(&self) -> Mat<f64> {
        self.st.v.t.dense()
    }
    /// The W to warm-start from (V = (K^{-1} + W)^{-1}), in the class basis: the next fit's
    /// K^c, and so its basis, may differ.
    pub fn w(&self, pr: &Prior) -> Vec<Mat<f64>> {
        self.st.w_prev.iter().map(|w| pr.basis().to_class(w)).collect()
    }
}

fn s_steps(pr: &Prior, st: &mut State, m: &[f64], stats: &mut FitStats) -> Result<(), FitError> {
    let c = pr.c;
    // S-step for every datum (61).
    for i in 0..pr.n {
        let vi = st.v.blocks[i].clone();
        let lv = chol(&vi, "V_i")?;
        let (mi, bi) = (&m[i * c..(i + 1) * c], &st.b[i * c..(i + 1) * c]);
        let mut t = datum_terms(mi, &vi, lv.log_det(), bi, &st.s[i], pr.basis())?;
        // A depends on S through g-bar: a few fixed-point rounds per sweep (notes D§2.4.7).
        for _ in 0..5 {
            let before = t.h_core;
            let (s_new, t_new, ls) = s_step(mi, &vi, &lv, bi, &st.s[i], t, pr.basis())?;
            stats.s_line_searches += ls as usize;
            st.s[i] = s_new;
            t = t_new;
            if (t.h_core - before).abs() < 1e-13 * before.abs().max(1.0) {
                break;
            }
        }
    }
    Ok(())
}

/// A previous optimum (other hyper-parameters) to start a fit from.
#[derive(Clone)]
pub(crate) struct WarmStart {
    /// W blocks in the class basis (the next fit's K^c, and so its basis, may differ).
    w: Vec<Mat<f64>>,
    b: Vec<f64>,
    w_path_eta: Option<f64>,
}

impl WarmStart {
    fn from_fit(pr: &Prior, fit: &VarFit) -> WarmStart {
        WarmStart { w: fit.w(pr), b: fit.st.b.clone(), w_path_eta: fit.stats.w_path_eta }
    }

    /// The state a source cell handed over (vectors `warm_w`, its W blocks row-major, and
    /// `warm_b`), if it has the shape of an n-datum, C-class fit.
    fn from_handoff(h: Option<&Handoff>, n: usize, c: usize) -> Option<WarmStart> {
        let (w, b) = (h?.vectors.get("warm_w")?, h?.vectors.get("warm_b")?);
        (w.len() == n * c * c && b.len() == n * c).then(|| WarmStart {
            w: w.chunks_exact(c * c).map(|wi| Mat::from_fn(c, c, |p, q| wi[p * c + q])).collect(),
            b: b.clone(),
            w_path_eta: None,
        })
    }
}

/// Block coordinate ascent to convergence (notes D§2.4.8), from the E.3 initialisation or `warm`.
pub(crate) fn fit_variational(pr: &Prior, params: &KlmnlParams, warm: Option<&WarmStart>, ctx: Option<&FitContext>) -> Result<VarFit, FitError> {
    let c = pr.c;
    let mut st = match warm {
        Some(WarmStart { w: w_class, b, .. }) => {
            let w: Vec<Mat<f64>> = w_class.iter().map(|wi| pr.basis().from_class(wi.clone())).collect();
            let v = v_from_w(pr, &w)?;
            let s = (0..pr.n)
                .map(|i| -> Result<Mat<f64>, FitError> { Ok(sym(&(chol(&v.blocks[i], "V_i")?.solve(eye(c).as_ref()) + &w[i]))) })
                .collect::<Result<Vec<_>, _>>()?;
            State { b: b.to_vec(), s, v, w_prev: w, w_exact: true }
        }
        None => init_state(pr, &default_w(pr.n, c, params.gamma_w), params.gamma_a)?,
    };
    let mut m = m_of(pr, &st.b);
    let (mut cur, _) = bound(pr, &st, &m)?;
    let mut stats = FitStats { bound_trace: vec![cur], w_path_eta: warm.and_then(|w| w.w_path_eta), ..Default::default() };
    let mut lk: Option<Chol> = None;
    let mut flat_sweeps = 0;
    for sweep in 0..params.max_sweeps {
        if let Some(ctx) = ctx {
            ctx.check_deadline()?;
        }
        let start = cur;
        s_steps(pr, &mut st, &m, &mut stats)?;
        let (after_s, terms) = bound(pr, &st, &m)?;
        cur = after_s;
        cur = joint_b_step(pr, &mut st, &mut m, cur, &terms, &mut stats)?;
        cur = v_step(pr, &mut st, &m, cur, &mut lk, &mut stats)?;
        // b - g-bar at the current point (ḡ does not depend on V).
        let (_, terms) = bound(pr, &st, &m)?;
        stats.max_b_minus_gbar = (0..pr.n * c).map(|k| (st.b[k] - terms[k / c].gbar[k % c]).abs()).fold(0.0, f64::max);
        stats.sweeps = sweep + 1;
        stats.bound_trace.push(cur);
        flat_sweeps = if (cur - start).abs() <= params.tol * cur.abs().max(1.0) { flat_sweeps + 1 } else { 0 };
        if flat_sweeps > 0 && stats.max_b_minus_gbar < params.b_tol {
            stats.converged = true;
            break;
        }
        // With a large signal variance b - g-bar can stall above b_tol (1e-7 on glass at
        // sigma^2 ~ 13) while the bound no longer moves beyond rounding: the optimum is reached
        // as far as floating point resolves it (the envelope-theorem gradient is then accurate to
        // the same order), so stop instead of sweeping to max_sweeps.
        if flat_sweeps >= FLAT_SWEEPS_AT_FLOOR {
            stats.converged = true;
            stats.stopped_at_floor = true;
            break;
        }
    }
    let nk = neg_kl(pr, &st, &m);
    Ok(VarFit { st, m, log_zh: cur, neg_kl: nk, stats })
}

/// The envelope-theorem gradient at the variational optimum is d log Z_h* = 1/2 tr(Q dK) with
/// Q = alpha alpha^T - T (notes D§4.3). With dK = dKx (x) Kc or Kx (x) dKc only two contractions
/// of Q are needed: R_ij = sum_ab Kc_ab Q_(ia,jb) and G_ab = sum_ij Kx_ij Q_(ia,jb). One pass over
/// the dense T gives both (forming T is the expensive part); G only when K^c is learned.
pub(crate) struct Envelope {
    r: Mat<f64>,
    g: Option<Mat<f64>>,
}

/// `with_kc`: also G (only K^c learning needs it).
pub(crate) fn envelope(pr: &Prior, fit: &VarFit, with_kc: bool) -> Envelope {
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
pub(crate) fn hyper_gradient(env: &Envelope, dkx: &[Mat<f64>]) -> Vec<f64> {
    dkx.iter().map(|d| 0.5 * trace_prod(d.as_ref(), env.r.transpose())).collect()
}

// ---------------------------------------------------------------------------------------
// Models of the inter-class covariance K^c (Chai §9.2.2, notes D§10.4). Every model keeps
// tr K^c = C; parameters rho start at (or near) K^c = I.

/// Lower-triangular C x C from its packed row-major entries.
fn lower_from(rho: &[f64], c: usize) -> Mat<f64> {
    let mut l = Mat::<f64>::zeros(c, c);
    let mut k = 0;
    for i in 0..c {
        for j in 0..=i {
            l[(i, j)] = rho[k];
            k += 1;
        }
    }
    l
}

/// Eq. 46: K~ = M - M 1 1^T M / (1^T M 1) + I, K^c = C K~ / tr K~.
fn eq46(m: &Mat<f64>) -> Mat<f64> {
    let c = m.nrows();
    let m1: Vec<f64> = (0..c).map(|i| (0..c).map(|j| m[(i, j)]).sum()).collect();
    let tot: f64 = m1.iter().sum();
    let kt = Mat::from_fn(c, c, |i, j| m[(i, j)] - m1[i] * m1[j] / tot + if i == j { 1.0 } else { 0.0 });
    let tr: f64 = (0..c).map(|i| kt[(i, i)]).sum();
    sym(&(kt * faer::Scale(c as f64 / tr)))
}

pub fn kc_init(model: &str, c: usize) -> Vec<f64> {
    match model {
        "m2" => vec![0.0; c],
        "m3" => vec![0.1f64.ln(); c],
        "m4" => {
            let mut r = vec![0.0; c * (c + 1) / 2];
            let mut k = 0;
            for i in 0..c {
                for j in 0..=i {
                    r[k] = if i == j { 0.3 } else { 0.0 };
                    k += 1;
                }
            }
            r
        }
        "m5" => vec![0.0; c * (c + 1) / 2],
        _ => Vec::new(),
    }
}

pub fn kc_of(model: &str, rho: &[f64], c: usize) -> Mat<f64> {
    let cf = c as f64;
    match model {
        "m2" => {
            let mut p = rho.to_vec();
            softmax_in_place(&mut p);
            Mat::from_fn(c, c, |i, j| if i == j { cf * p[i] } else { 0.0 })
        }
        "m3" => eq46(&Mat::from_fn(c, c, |i, j| if i == j { rho[i].exp() } else { 0.0 })),
        "m4" => {
            let l = lower_from(rho, c);
            eq46(&(&l * l.transpose()))
        }
        "m5" => {
            // log-diagonal L
            let mut l = lower_from(rho, c);
            for i in 0..c {
                l[(i, i)] = l[(i, i)].exp();
            }
            let k = &l * l.transpose();
            let tr: f64 = (0..c).map(|i| k[(i, i)]).sum();
            sym(&(k * faer::Scale(cf / tr)))
        }
        _ => eye(c),
    }
}

/// d log Z_h* / d rho = 1/2 sum_ab (dK^c/drho)_ab G_ab (dK = Kx (x) dK^c); dK^c/drho by central
/// differences of the small smooth map rho -> K^c.
fn kc_gradient(env: &Envelope, model: &str, rho: &[f64]) -> Vec<f64> {
    let g = env.g.as_ref().expect("an envelope with the K^c contraction (envelope(.., true))");
    let c = g.nrows();
    (0..rho.len())
        .map(|k| {
            let e = 1e-6;
            let mut rp = rho.to_vec();
            rp[k] += e;
            let mut rm = rho.to_vec();
            rm[k] -= e;
            let d = (kc_of(model, &rp, c) - kc_of(model, &rm, c)) * faer::Scale(1.0 / (2.0 * e));
            0.5 * trace_prod(d.as_ref(), g.transpose())
        })
        .collect()
}

// ---------------------------------------------------------------------------------------
// The method and the fitted model.

impl Method for Klmnl {
    fn name(&self) -> &'static str {
        "klmnl"
    }

    fn supports(&self, _shape: &ProblemShape, kernels: &KernelSet, _hyper: HyperPolicy) -> Result<(), String> {
        super::shared_sqexp(kernels, "klmnl").map(|_| ())
    }

    fn fit(&self, problem: &Problem, kernels: &KernelSet, hyper: HyperPolicy, ctx: &mut FitContext) -> Result<Box<dyn Fitted>, FitError> {
        let kernel = super::shared_sqexp(kernels, "klmnl").map_err(FitError::Unsupported)?;
        Ok(Box::new(self.fit_model(problem, kernel, hyper, ctx)?))
    }
}

/// The variational fit's tolerances for the next evaluation of hyper-parameter learning, given
/// the optimised bounds so far: while the outer steps still move the bound by much, the inner
/// fit need not resolve it to 1e-10 (the envelope gradient's error shrinks with the root of the
/// bound's), so tol follows a thousandth of the last change, between `params.tol` and 1e-6,
/// and b_tol scales with its root. The last evaluations, whose changes are tiny, are as tight
/// as a plain fit.
fn inner_params(params: &KlmnlParams, bounds: &[f64]) -> KlmnlParams {
    let mut p = params.clone();
    if let [.., a, b] = bounds {
        let rel = 1e-3 * (b - a).abs() / b.abs().max(1.0);
        p.tol = rel.clamp(params.tol, 1e-6f64.max(params.tol));
        p.b_tol = params.b_tol * (p.tol / params.tol).sqrt();
    }
    p
}

impl Klmnl {
    pub fn fit_model(&self, problem: &Problem, kernel: &SqExp, hyper: HyperPolicy, ctx: &mut FitContext) -> Result<KlmnlModel, FitError> {
        let c = problem.n_classes + self.params.extra_classes;
        if c < 2 {
            return Err(FitError::Unsupported("KL-MNL needs at least two classes".into()));
        }
        let model = self.params.kc_model.clone();
        let mut rho = kc_init(&model, c);
        let mut kc = kc_of(&model, &rho, c);
        if self.params.kc_from_source {
            let v = ctx.source.and_then(|h| h.vectors.get("kc")).ok_or_else(|| FitError::Unsupported("kc_from_source: the source cell handed over no \"kc\"".into()))?;
            if v.len() != c * c {
                return Err(FitError::Unsupported(format!("kc_from_source: \"kc\" has {} entries, expected {}", v.len(), c * c)));
            }
            kc = Mat::from_fn(c, c, |i, j| v[i * c + j]);
        }
        let mut kernel = kernel.clone();
        if let Some(v) = self.params.prior_variance {
            kernel.log_variance = v.ln();
        }
        let mut diagnostics = BTreeMap::new();
        let mut hyper_evals = 0usize;
        let mut stopped_by = None;
        let mut final_warm: Option<WarmStart> = None;
        let learn_kernel = hyper == HyperPolicy::Learn;
        let learn_kc = self.params.learn_kc && !rho.is_empty() && !self.params.kc_from_source;
        if learn_kernel || learn_kc {
            // Maximise log Z_h* over [free kernel log-parameters, K^c parameters], warm-starting
            // every variational fit from the last optimum (App. E.3); gradients by the envelope theorem.
            let nk = kernel.n_params();
            let warm: Mutex<Option<WarmStart>> = Mutex::new(None);
            let evals = Mutex::new(0usize);
            let trace_vals: Mutex<Vec<f64>> = Mutex::new(Vec::new());
            let ctx_ref: &FitContext = &*ctx;
            let kc_fixed = kc.clone();
            let f = |p: &[f64]| -> Result<(f64, Vec<f64>), FitError> {
                ctx_ref.check_deadline()?;
                if let Some(stop) = ctx_ref.budget_stop(*evals.lock().expect("eval counter") as u64) {
                    return Err(FitError::Stop(stop));
                }
                let kern = kernel.with_log_params(&p[..nk]);
                let kx = kern.gram(problem.x);
                let dkx = kern.gram_grads(problem.x, &kx);
                let kcp = if learn_kc { kc_of(&model, &p[nk..], c) } else { kc_fixed.clone() };
                let pr = Prior::new(kx, kcp, problem.y)?;
                let w_guard = warm.lock().expect("warm start lock").clone();
                let params = inner_params(&self.params, &trace_vals.lock().expect("trace lock"));
                let fit = match &w_guard {
                    Some(w) => fit_variational(&pr, &params, Some(w), Some(ctx_ref))
                        .or_else(|_| fit_variational(&pr, &params, None, Some(ctx_ref)))?,
                    None => fit_variational(&pr, &params, None, Some(ctx_ref))?,
                };
                let env = envelope(&pr, &fit, learn_kc);
                let mut g = hyper_gradient(&env, &dkx);
                if learn_kc {
                    g.extend(kc_gradient(&env, &model, &p[nk..]));
                } else {
                    g.extend(vec![0.0; p.len() - nk]);
                }
                *warm.lock().expect("warm start lock") = Some(WarmStart::from_fit(&pr, &fit));
                *evals.lock().expect("eval counter") += 1;
                trace_vals.lock().expect("trace lock").push(fit.log_zh);
                // Per datum: the same optimum, but gradients of order one keep the optimiser's
                // first (unit) step from jumping to extreme hyper-parameters.
                let per = problem.y.len() as f64;
                Ok((-fit.log_zh / per, g.iter().map(|v| -v / per).collect()))
            };
            let mut x0 = kernel.log_params();
            x0.extend(&rho);
            let mut free: Vec<bool> = kernel.free_mask().into_iter().map(|f| f && learn_kernel).collect();
            free.extend(rho.iter().map(|_| learn_kc));
            // The cost is per datum (see `f`), so is its tolerance.
            let tol_cost = self.params.hyper_tol / problem.y.len() as f64;
            let res = minimize_lbfgs(&f, &x0, &free, self.params.max_hyper_iters, tol_cost)?;
            kernel = kernel.with_log_params(&res.x[..nk]);
            if learn_kc {
                rho = res.x[nk..].to_vec();
                kc = kc_of(&model, &rho, c);
            }
            hyper_evals = *evals.lock().expect("eval counter");
            final_warm = warm.into_inner().expect("warm start lock");
            for (k, v) in trace_vals.lock().expect("trace lock").iter().enumerate() {
                ctx.record(k, &[("log_zh", *v)]);
            }
            diagnostics.insert("hyper_stop".into(), res.stop_reason.clone());
            diagnostics.insert("hyper_iterations".into(), res.iterations.to_string());
            stopped_by = res.stopped_by;
        }
        let kx = kernel.gram(problem.x);
        let pr = Prior::new(kx, kc, problem.y)?;
        // The optimum is unique (the bound is concave), so a warm start changes only the cost:
        // from the learning's last optimum, else from a source cell's fit (e.g. the KL-MNL fit
        // at the same hyper-parameters that an importance-sampling cell centres on).
        let source_warm = if final_warm.is_none() { WarmStart::from_handoff(ctx.source, pr.n, c) } else { None };
        let warm = final_warm.as_ref().or(source_warm.as_ref());
        let fit = match fit_variational(&pr, &self.params, warm, Some(ctx)) {
            Ok(fit) => fit,
            Err(_) if warm.is_some() => fit_variational(&pr, &self.params, None, Some(ctx))?,
            Err(e) => return Err(e),
        };
        for (k, v) in fit.stats.bound_trace.iter().enumerate() {
            if hyper == HyperPolicy::Fixed {
                ctx.record(k, &[("log_zh", *v)]);
            }
        }
        diagnostics.insert("sweeps".into(), fit.stats.sweeps.to_string());
        diagnostics.insert("converged".into(), fit.stats.converged.to_string());
        if fit.stats.stopped_at_floor {
            diagnostics.insert("stopped_at_floor".into(), "true (b - g-bar stalled above b_tol with the bound flat)".into());
        }
        diagnostics.insert("max_b_minus_gbar".into(), format!("{:.3e}", fit.stats.max_b_minus_gbar));
        diagnostics.insert("line_searches_s_b_v".into(), format!("{}/{}/{}", fit.stats.s_line_searches, fit.stats.b_line_searches, fit.stats.v_line_searches));
        diagnostics.insert("hyper_evaluations".into(), hyper_evals.to_string());
        let s2 = kernel.log_variance.exp();
        let n = problem.y.len() as f64;
        let mut extra = BTreeMap::new();
        for i in 0..c {
            extra.insert(format!("kc_var_{}", i + 1), pr.kc[(i, i)]);
            for j in 0..i {
                extra.insert(format!("kc_corr_{}{}", j + 1, i + 1), pr.kc[(i, j)] / (pr.kc[(i, i)] * pr.kc[(j, j)]).sqrt());
            }
        }
        extra.insert("log_zh".into(), fit.log_zh);
        extra.insert("neg_kl".into(), fit.neg_kl);
        extra.insert("thm10_bound".into(), n * theorem10_per_datum(c, s2));
        extra.insert("thm10_bound_probit".into(), n * theorem10_per_datum(c, s2 * std::f64::consts::PI.powi(2) / 6.0));
        extra.insert("sweeps".into(), fit.stats.sweeps as f64);
        extra.insert("hyper_evaluations".into(), hyper_evals as f64);
        let alpha = fit.alpha(&pr);
        let sum_alpha = (0..pr.n).map(|i| alpha[i * c..(i + 1) * c].iter().sum::<f64>().abs()).fold(0.0, f64::max);
        extra.insert("max_abs_sum_alpha".into(), sum_alpha);
        Ok(KlmnlModel {
            kernel,
            x_train: problem.x.clone(),
            n_present: problem.n_classes,
            predictive: self.params.predictive.clone(),
            t: fit.t_dense(),
            alpha,
            pr,
            fit,
            diagnostics,
            stopped_by,
            hyper_evals,
            extra,
        })
    }
}

/// Per test point and class, the log of (24) and (25).
#[derive(Clone, Debug)]
pub struct PredCache {
    pub log_p24: Vec<Vec<f64>>,
    pub log_p25: Vec<Vec<f64>>,
}

pub struct KlmnlModel {
    kernel: SqExp,
    x_train: Array2<f64>,
    n_present: usize,
    predictive: String,
    pub(crate) pr: Prior,
    pub(crate) fit: VarFit,
    /// T = K^{-1} - K^{-1} V K^{-1} (dense) and alpha = K^{-1} m = y - b.
    pub(crate) t: Mat<f64>,
    pub(crate) alpha: Vec<f64>,
    diagnostics: BTreeMap<String, String>,
    stopped_by: Option<StopReason>,
    hyper_evals: usize,
    extra: BTreeMap<String, f64>,
}

impl KlmnlModel {
    pub fn log_zh(&self) -> f64 {
        self.fit.log_zh
    }
    /// -KL(q(f|y) || p(f)).
    pub fn neg_kl(&self) -> f64 {
        self.fit.neg_kl
    }
    /// Classes present in the data (the model may have extra, empty ones).
    pub fn n_present(&self) -> usize {
        self.n_present
    }
    pub fn n_model_classes(&self) -> usize {
        self.pr.c
    }
    pub fn x_train(&self) -> &Array2<f64> {
        &self.x_train
    }
    pub fn kernel(&self) -> &SqExp {
        &self.kernel
    }
    /// Cross covariance kx(X_train, x), [n, m].
    pub fn kx_cross(&self, x: &Array2<f64>) -> Mat<f64> {
        self.kernel.cross(&self.x_train, x)
    }
    pub fn log_zh_trace(&self) -> &[f64] {
        &self.fit.stats.bound_trace
    }
    pub fn hyper_gradient(&self) -> Vec<f64> {
        let dkx = self.kernel.gram_grads(&self.x_train, &self.pr.kx);
        hyper_gradient(&envelope(&self.pr, &self.fit, false), &dkx)
    }

    /// q(f_*|y) per test point: m_* = K_*^T alpha, V_* = K_** - K_*^T T K_* (notes D§3.4).
    pub fn latent_predictive(&self, x: &Array2<f64>) -> (Vec<Vec<f64>>, Vec<Mat<f64>>) {
        let c = self.pr.c;
        let ks = self.kx_cross(x); // n x m
        let kss = self.kernel.diag(x);
        let n = self.pr.n;
        let mut means = Vec::with_capacity(x.nrows());
        let mut covs = Vec::with_capacity(x.nrows());
        for j in 0..x.nrows() {
            // K_*j = k_*j (x) Kc: nC x C
            let kj = Mat::from_fn(n * c, c, |r, q| ks[(r / c, j)] * self.pr.kc[(r % c, q)]);
            let mean = Mat::from_fn(c, 1, |q, _| (0..n * c).map(|r| kj[(r, q)] * self.alpha[r]).sum::<f64>());
            let tk = &self.t * &kj;
            let v = &self.pr.kc * faer::Scale(kss[j]) - kj.transpose() * tk;
            means.push((0..c).map(|q| mean[(q, 0)]).collect());
            covs.push(sym(&v));
        }
        (means, covs)
    }

    /// Per test point and class: log of (24) and (25), over the model's C classes.
    pub fn predictive_logs(&self, x: &Array2<f64>) -> Result<PredCache, FitError> {
        let (means, covs) = self.latent_predictive(x);
        let mut log_p24 = Vec::with_capacity(means.len());
        let mut log_p25 = Vec::with_capacity(means.len());
        for (m, v) in means.iter().zip(&covs) {
            let (h, _, _) = optimise_datum(m, v)?;
            log_p24.push(m.iter().map(|mc| h + mc).collect());
            let lse = log_sum_exp(m);
            log_p25.push(m.iter().map(|mc| mc - lse).collect());
        }
        Ok(PredCache { log_p24, log_p25 })
    }

    pub fn extra_metrics(&self) -> BTreeMap<String, f64> {
        self.extra.clone()
    }
}

/// [m, C] from per-row vectors, over the first C classes (the present ones).
pub(crate) fn present_columns(rows: &[Vec<f64>], c: usize) -> Array2<f64> {
    Array2::from_shape_fn((rows.len(), c), |(j, q)| rows[j][q])
}

impl Fitted for KlmnlModel {
    /// Probabilities by (25) over the present classes (the extra, empty classes are dropped);
    /// the log-values of (24) and (25) go along as `log_pred24` and `log_pred25`. With
    /// `predictive: eq24` the log predictive score is (24), a lower bound on p(y* | y) that does
    /// not sum to one over the classes (normalised, it equals (25)).
    fn predict(&self, x: &Array2<f64>, _rng: &mut Pcg64) -> Result<Prediction, FitError> {
        let logs = self.predictive_logs(x)?;
        let cp = self.n_present;
        let mut out = Array2::zeros((x.nrows(), cp));
        for j in 0..x.nrows() {
            let mut l: Vec<f64> = logs.log_p25[j][..cp].to_vec();
            softmax_in_place(&mut l);
            for c in 0..cp {
                out[(j, c)] = l[c];
            }
        }
        let log_p24 = present_columns(&logs.log_p24, cp);
        let mut prediction = Prediction::new(out).with_values("log_pred24", log_p24.clone()).with_values("log_pred25", present_columns(&logs.log_p25, cp));
        if self.predictive == "eq24" {
            prediction.log_score = Some(log_p24);
        }
        Ok(prediction)
    }

    fn evidence(&self) -> Option<Evidence> {
        Some(Evidence::new(self.fit.log_zh, EvidenceKind::LowerBound))
    }

    fn kernels(&self) -> KernelSet {
        KernelSet::shared(Box::new(self.kernel.clone()))
    }

    fn diagnostics(&self) -> Diagnostics {
        let mut d = Diagnostics::from_texts(&self.diagnostics);
        if self.hyper_evals > 0 {
            d.iterations = Some(self.hyper_evals as u64);
            d.stop_reason = self.stopped_by.or(Some(StopReason::Converged));
        }
        d
    }

    fn extra_metrics(&self) -> BTreeMap<String, f64> {
        self.extra.clone()
    }

    fn handoff(&self) -> Handoff {
        // m class-major, as the harness's other methods lay out latent vectors.
        let (n, c) = (self.pr.n, self.pr.c);
        let mean: Vec<f64> = (0..c).flat_map(|q| (0..n).map(move |i| (i, q))).map(|(i, q)| self.fit.m[i * c + q]).collect();
        let mut vectors = BTreeMap::new();
        vectors.insert("mean".into(), mean);
        vectors.insert("log_zh".into(), vec![self.fit.log_zh]);
        vectors.insert("kc".into(), (0..c * c).map(|k| self.pr.kc[(k / c, k % c)]).collect());
        // The variational state, for dependent cells to warm-start from.
        let warm = WarmStart::from_fit(&self.pr, &self.fit);
        vectors.insert("warm_w".into(), warm.w.iter().flat_map(|wi| (0..c * c).map(move |k| wi[(k / c, k % c)])).collect());
        vectors.insert("warm_b".into(), warm.b);
        Handoff { vectors, ..Handoff::of_kernels(&self.kernels()) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::methods::FromSettings;
    use rand::{RngExt, SeedableRng};
    use rand_distr::StandardNormal;
    use faer::linalg::solvers::DenseSolveCore;

    fn rng(seed: u64) -> Pcg64 {
        Pcg64::seed_from_u64(seed)
    }

    fn random_spd(c: usize, r: &mut Pcg64, scale: f64) -> Mat<f64> {
        let b = Mat::from_fn(c, c, |_, _| r.sample::<f64, _>(StandardNormal));
        let mut a = &b * b.transpose() * faer::Scale(scale / c as f64);
        for i in 0..c {
            a[(i, i)] += 0.1 * scale;
        }
        a
    }

    #[test]
    fn theorem10_reproduces_table3_column() {
        // notes D§3.3 (n·bound, sigma^2 = 1 and pi^2/6)
        let p6 = std::f64::consts::PI.powi(2) / 6.0;
        for (n, c, want, want_probit) in
            [(90, 3, -125.284, -139.839), (129, 3, -179.574, -200.437), (106, 3, -147.557, -164.700), (128, 7, -300.609, -331.060)]
        {
            assert!((n as f64 * theorem10_per_datum(c, 1.0) - want).abs() < 5e-3, "n={n}");
            assert!((n as f64 * theorem10_per_datum(c, p6) - want_probit).abs() < 5e-3, "n={n}");
            // and the weaker closed form of Theorem 10 is below it
            assert!(theorem10_per_datum(c, 1.0) > -0.5 - (c as f64).ln());
        }
    }

    #[test]
    fn per_datum_optimum_matches_lemma29_closed_form() {
        for (c, s2, want) in [(3usize, 1.0, -1.392044), (7, 1.0, -2.348509), (3, 4.0, -2.050873)] {
            let v = eye(c) * faer::Scale(s2);
            let m = vec![0.0; c];
            let (h, b, s) = optimise_datum(&m, &v).unwrap();
            // h(y) = h_core + m^y = h_core at m = 0
            assert!((h - want).abs() < 1e-6, "C={c} s2={s2}: {h} vs {want}");
            assert!((h - theorem10_per_datum(c, s2)).abs() < 1e-8);
            for bc in &b {
                assert!((bc - 1.0 / c as f64).abs() < 1e-7);
            }
            // eigenvalues of s2 S* are {1, lambda x (C-1)}, lambda = r + 1/2
            let lam = (s2 / c as f64 + 0.25).sqrt() + 0.5;
            let (ev, _) = eigh(&(s * faer::Scale(s2))).unwrap();
            assert!((ev[0] - 1.0).abs() < 1e-6, "{ev:?}");
            for e in &ev[1..] {
                assert!((e - lam).abs() < 1e-6, "{ev:?} vs {lam}");
            }
        }
    }

    /// Jensen bounds (9) and (10), the exact softmax at the mean (Lemma 7) and a long Monte
    /// Carlo estimate of the expected log-likelihood bracket max h.
    #[test]
    fn bound_chain_j9_j10_le_max_h_le_expected_loglik_le_upper() {
        let mut r = rng(11);
        for trial in 0..3 {
            let c = 4;
            let m: Vec<f64> = (0..c).map(|_| 2.0 * r.sample::<f64, _>(StandardNormal)).collect();
            let v = random_spd(c, &mut r, 2.0);
            let y = trial % c;
            let (hcore, b, s) = optimise_datum(&m, &v).unwrap();
            let h = hcore + m[y];
            let ey = |k: usize| -> Vec<f64> { (0..c).map(|q| if q == k { 1.0 } else { 0.0 }).collect() };
            let quad = |d: &[f64]| -> f64 { (0..c).map(|p| (0..c).map(|q| d[p] * v[(p, q)] * d[q]).sum::<f64>()).sum() };
            let j9 = m[y] - log_sum_exp(&(0..c).map(|k| {
                let d: Vec<f64> = ey(y).iter().zip(ey(k)).map(|(a, b)| a - b).collect();
                m[k] + 0.5 * quad(&d)
            }).collect::<Vec<_>>());
            let j10 = m[y] - log_sum_exp(&(0..c).map(|k| m[k] + 0.5 * v[(k, k)]).collect::<Vec<_>>());
            let upper = m[y] - log_sum_exp(&m);
            // Monte Carlo l = E log softmax(f)_y, f ~ N(m, V)
            let lv = Chol::factor(v.as_ref(), "V").unwrap();
            let ns = 400_000;
            let (mut s1, mut s2) = (0.0, 0.0);
            for _ in 0..ns {
                let z: Vec<f64> = (0..c).map(|_| r.sample::<f64, _>(StandardNormal)).collect();
                let f: Vec<f64> = (0..c).map(|p| m[p] + (0..=p).map(|q| lv.l()[(p, q)] * z[q]).sum::<f64>()).collect();
                let l = f[y] - log_sum_exp(&f);
                s1 += l;
                s2 += l * l;
            }
            let ell = s1 / ns as f64;
            let se = ((s2 / ns as f64 - ell * ell) / ns as f64).sqrt();
            assert!(j9 <= h + 1e-10 && j10 <= h + 1e-10, "trial {trial}: j9 {j9} j10 {j10} h {h}");
            assert!(h <= ell + 4.0 * se, "trial {trial}: h {h} > l {ell} (se {se})");
            assert!(ell <= upper + 4.0 * se);
            // tight: the gap is a few hundredths of a nat (notes D§13)
            assert!(ell - h < 0.1, "trial {trial}: gap {}", ell - h);
            // at the optimum b sums to one and W* = S* - V^{-1} has exactly one zero eigenvalue (on 1)
            assert!((b.iter().sum::<f64>() - 1.0).abs() < 1e-8);
            let w = &s - lv.solve(eye(c).as_ref());
            let (ev, u) = eigh(&w).unwrap();
            assert!(ev[0].abs() < 1e-7 && ev[1] > 1e-6, "{ev:?}");
            let dot1: f64 = (0..c).map(|p| u[(p, 0)]).sum::<f64>().abs() / (c as f64).sqrt();
            assert!((dot1 - 1.0).abs() < 1e-6);
        }
    }

    fn toy(n: usize, c: usize, seed: u64) -> (Array2<f64>, Vec<usize>) {
        let mut r = rng(seed);
        let y: Vec<usize> = (0..n).map(|i| i % c).collect();
        let x = Array2::from_shape_fn((n, 2), |(i, d)| r.sample::<f64, _>(StandardNormal) + if d == 0 { y[i] as f64 } else { 0.0 });
        (x, y)
    }

    /// log Z_h (eq. 21) from dense matrices with explicit inverses: an independent oracle.
    fn dense_bound(k: &Mat<f64>, m: &[f64], v: &Mat<f64>, b: &[f64], s: &[Mat<f64>], y1: &[f64], c: usize) -> f64 {
        let nc = m.len();
        let kinv = k.partial_piv_lu().inverse();
        let kinv_v = &kinv * v;
        let ld_k: f64 = Chol::factor(k.as_ref(), "K").unwrap().log_det();
        let ld_v: f64 = Chol::factor(sym(v).as_ref(), "V").unwrap().log_det();
        let mut tr = 0.0;
        for i in 0..nc {
            tr += kinv_v[(i, i)];
        }
        let mkm: f64 = (0..nc).map(|i| (0..nc).map(|j| m[i] * kinv[(i, j)] * m[j]).sum::<f64>()).sum();
        let mut total = -0.5 * (tr + mkm - nc as f64 + ld_k - ld_v);
        for i in 0..nc / c {
            let vi = Mat::from_fn(c, c, |p, q| v[(i * c + p, i * c + q)]);
            let si = &s[i];
            let sinv = si.partial_piv_lu().inverse();
            let sv = si * &vi;
            let ld_sv = Chol::factor(si.as_ref(), "S").unwrap().log_det() + Chol::factor(sym(&vi).as_ref(), "Vi").unwrap().log_det();
            let mut trsv = 0.0;
            for p in 0..c {
                trsv += sv[(p, p)];
            }
            let lg: Vec<f64> = (0..c)
                .map(|k| {
                    let d: Vec<f64> = (0..c).map(|p| b[i * c + p] - if p == k { 1.0 } else { 0.0 }).collect();
                    m[i * c + k] + 0.5 * (0..c).map(|p| (0..c).map(|q| d[p] * sinv[(p, q)] * d[q]).sum::<f64>()).sum::<f64>()
                })
                .collect();
            let my: f64 = (0..c).map(|p| m[i * c + p] * y1[i * c + p]).sum();
            total += 0.5 * c as f64 + 0.5 * ld_sv - 0.5 * trsv + my - log_sum_exp(&lg);
        }
        total
    }

    #[test]
    fn an_unreachable_b_tol_stops_at_the_floor_with_the_same_optimum() {
        // b - g-bar cannot reach 1e-30 in floating point: the fit must stop once the bound has
        // been flat for FLAT_SWEEPS_AT_FLOOR sweeps, at the optimum the normal b_tol finds.
        let (x, y) = toy(25, 3, 5);
        let kern = SqExp { log_variance: 2.5, log_lengthscales: vec![0.3], learn_variance: true };
        let pr = Prior::new(kern.gram(&x), eye(3), &y).unwrap();
        let normal = fit_variational(&pr, &KlmnlParams::default(), None, None).unwrap();
        let params = KlmnlParams { b_tol: 1e-30, max_sweeps: 400, ..KlmnlParams::default() };
        let floor = fit_variational(&pr, &params, None, None).unwrap();
        assert!(floor.stats.converged && floor.stats.stopped_at_floor, "{:?}", floor.stats);
        assert!(floor.stats.sweeps <= normal.stats.sweeps + FLAT_SWEEPS_AT_FLOOR + 1, "{} vs {} sweeps", floor.stats.sweeps, normal.stats.sweeps);
        assert!((floor.log_zh - normal.log_zh).abs() < 1e-9 * normal.log_zh.abs(), "{} vs {}", floor.log_zh, normal.log_zh);
    }

    #[test]
    fn strongly_correlated_data_converge_in_few_sweeps() {
        // A long length-scale couples the 40 latent vectors strongly. Alternating exact S- and
        // V-steps contract slowly here (the S-V coupling through log|S_i V_i| - tr(S_i V_i));
        // the V-step that re-optimises S at the proposed V does not.
        let (x, y) = toy(40, 3, 11);
        let kern = SqExp { log_variance: 0.5, log_lengthscales: vec![1.5], learn_variance: true };
        let pr = Prior::new(kern.gram(&x), eye(3), &y).unwrap();
        let fit = fit_variational(&pr, &KlmnlParams::default(), None, None).unwrap();
        assert!(fit.stats.converged && fit.stats.max_b_minus_gbar < 1e-8, "{:?}", fit.stats);
        assert!(fit.stats.sweeps <= 25, "{} sweeps", fit.stats.sweeps);
    }

    #[test]
    fn full_fit_is_monotone_stationary_and_matches_the_dense_bound() {
        let (x, y) = toy(8, 3, 5);
        let kern = SqExp { log_variance: 0.3, log_lengthscales: vec![0.0], learn_variance: true };
        let pr = Prior::new(kern.gram(&x), eye(3), &y).unwrap();
        let fit = fit_variational(&pr, &KlmnlParams::default(), None, None).unwrap();
        assert!(fit.stats.converged, "{:?}", fit.stats);
        for w in fit.stats.bound_trace.windows(2) {
            assert!(w[1] >= w[0] - 1e-10 * w[0].abs(), "bound fell: {:?}", fit.stats.bound_trace);
        }
        assert!(fit.stats.max_b_minus_gbar < 1e-8);
        let alpha = fit.alpha(&pr);
        for i in 0..8 {
            assert!(alpha[i * 3..i * 3 + 3].iter().sum::<f64>().abs() < 1e-8);
        }
        // log Z_h >= n Theorem 10 (sigma^2 = e^0.3 per latent)
        assert!(fit.log_zh >= 8.0 * theorem10_per_datum(3, 0.3f64.exp()));
        // independent dense evaluation at the same (m, V, b, S)
        let t = fit.t_dense();
        let v = &pr.k - &pr.k * &t * &pr.k;
        let d = dense_bound(&pr.k, &fit.m, &v, &fit.st.b, &fit.st.s, &pr.y1, 3);
        assert!((d - fit.log_zh).abs() < 1e-7, "dense {d} vs {}", fit.log_zh);
        // stationarity in m of the dense bound (V, b, S fixed): central differences vanish
        let mut r = rng(3);
        for _ in 0..3 {
            let dir: Vec<f64> = (0..24).map(|_| r.sample::<f64, _>(StandardNormal)).collect();
            let e = 1e-5;
            let mp: Vec<f64> = fit.m.iter().zip(&dir).map(|(a, b)| a + e * b).collect();
            let mm: Vec<f64> = fit.m.iter().zip(&dir).map(|(a, b)| a - e * b).collect();
            let g = (dense_bound(&pr.k, &mp, &v, &fit.st.b, &fit.st.s, &pr.y1, 3) - dense_bound(&pr.k, &mm, &v, &fit.st.b, &fit.st.s, &pr.y1, 3)) / (2.0 * e);
            assert!(g.abs() < 1e-5, "directional derivative in m {g}");
        }
        // and V is optimal: a small symmetric perturbation of V (kept PD) does not raise the bound
        for _ in 0..3 {
            let p = random_spd(24, &mut r, 1.0);
            for sign in [-1.0, 1.0] {
                let vp = &v + &p * faer::Scale(sign * 1e-4);
                let dp = dense_bound(&pr.k, &fit.m, &vp, &fit.st.b, &fit.st.s, &pr.y1, 3);
                assert!(dp <= d + 1e-9, "V perturbation raised the bound: {dp} > {d}");
            }
        }
    }

    /// K^c = Q diag(lam) Q^T with a random rotation Q.
    fn rotated_kc(lam: &[f64], seed: u64) -> Mat<f64> {
        let (_, q) = jacobi_eigh(&random_spd(lam.len(), &mut rng(seed), 1.0)).unwrap();
        Mat::from_fn(lam.len(), lam.len(), |i, j| (0..lam.len()).map(|k| q[(i, k)] * lam[k] * q[(j, k)]).sum())
    }

    #[test]
    fn a_non_diagonal_kc_fit_matches_the_dense_bound_in_the_class_basis() {
        // The state's S_i and V_i live in K^c's eigenbasis; rotated back, they must give the
        // fit's bound in the dense class-basis oracle.
        let (x, y) = toy(8, 3, 5);
        let kern = SqExp { log_variance: 0.3, log_lengthscales: vec![0.0], learn_variance: true };
        let pr = Prior::new(kern.gram(&x), rotated_kc(&[0.4, 1.0, 1.6], 2), &y).unwrap();
        assert!(pr.kc_u.is_some());
        let fit = fit_variational(&pr, &KlmnlParams::default(), None, None).unwrap();
        assert!(fit.stats.converged && !fit.stats.stopped_at_floor, "{:?}", fit.stats);
        for w in fit.stats.bound_trace.windows(2) {
            assert!(w[1] >= w[0] - 1e-10 * w[0].abs(), "bound fell: {:?}", fit.stats.bound_trace);
        }
        let v = &pr.k - &pr.k * &fit.t_dense() * &pr.k;
        let s_class: Vec<Mat<f64>> = fit.st.s.iter().map(|s| pr.basis().to_class(s)).collect();
        let d = dense_bound(&pr.k, &fit.m, &v, &fit.st.b, &s_class, &pr.y1, 3);
        assert!((d - fit.log_zh).abs() < 1e-7, "dense {d} vs {}", fit.log_zh);
        // tr(T K), which v_from_w takes from the blocks of L_B^{-1} it recovers from q
        let w = current_w(&pr, &fit.st).unwrap();
        let ve = v_from_w(&pr, &w).unwrap();
        let tk = trace_prod(ve.t.dense().as_ref(), pr.k.as_ref());
        assert!((ve.tr_tk - tk).abs() < 1e-10 * tk.abs().max(1.0), "{} vs {tk}", ve.tr_tk);
        for i in 0..8 {
            let vi = Mat::from_fn(3, 3, |p, q| v[(i * 3 + p, i * 3 + q)]);
            assert!((pr.basis().to_class(&fit.st.v.blocks[i]) - vi).norm_max() < 1e-10);
        }
    }

    #[test]
    fn the_softmax_hessian_factor_reproduces_diag_g_minus_g_g_t() {
        for g in [vec![0.7, 0.3], vec![0.2, 0.5, 0.3], vec![1e-12, 0.25, 0.5, 0.25 - 1e-12], vec![0.0, 0.1, 0.0, 0.6, 0.3], vec![0.999999, 1e-6, 0.0]] {
            let c = g.len();
            let f = softmax_hessian_factor(&g);
            assert_eq!((f.nrows(), f.ncols()), (c, c - 1));
            let d = Mat::from_fn(c, c, |i, j| if i == j { g[i] } else { 0.0 } - g[i] * g[j]);
            assert!((&f * f.transpose() - &d).norm_max() < 1e-15, "g = {g:?}");
        }
    }

    #[test]
    fn the_newton_direction_solves_the_dense_system() {
        // d = -(I + D P)^{-1} (b - g-bar), P = K + blockdiag(S_i^{-1}), D_i = diag(g) - g g^T,
        // by a dense LU solve; the reduced Woodbury form must agree, for an identity and a
        // rotated K^c, at the E.3 start and after one S sweep.
        let (x, y) = toy(9, 3, 4);
        let kern = SqExp { log_variance: 0.7, log_lengthscales: vec![0.2], learn_variance: true };
        for kc in [eye(3), rotated_kc(&[0.3, 1.0, 1.7], 5)] {
            let pr = Prior::new(kern.gram(&x), kc, &y).unwrap();
            let mut st = init_state(&pr, &default_w(pr.n, 3, 1.0), 1.0).unwrap();
            let m = m_of(&pr, &st.b);
            for sweep in 0..2 {
                if sweep == 1 {
                    s_steps(&pr, &mut st, &m, &mut FitStats::default()).unwrap();
                }
                let (_, terms) = bound(&pr, &st, &m).unwrap();
                let d = newton_direction(&pr, &st.b, &terms).unwrap();
                let nc = pr.n * 3;
                let mut p = pr.k.clone();
                let mut dm = Mat::<f64>::zeros(nc, nc);
                for (i, t) in terms.iter().enumerate() {
                    for a in 0..3 {
                        for bb in 0..3 {
                            p[(i * 3 + a, i * 3 + bb)] += t.s_inv[(a, bb)];
                            dm[(i * 3 + a, i * 3 + bb)] = if a == bb { t.gbar[a] } else { 0.0 } - t.gbar[a] * t.gbar[bb];
                        }
                    }
                }
                let x_mat = Mat::<f64>::identity(nc, nc) + &dm * &p;
                let r = Mat::from_fn(nc, 1, |k, _| -(st.b[k] - terms[k / 3].gbar[k % 3]));
                let dense = x_mat.partial_piv_lu().solve(&r);
                let scale = (0..nc).map(|k| dense[(k, 0)].abs()).fold(0.0, f64::max);
                for k in 0..nc {
                    assert!((d[k] - dense[(k, 0)]).abs() < 1e-10 * scale.max(1.0), "entry {k}: {} vs {}", d[k], dense[(k, 0)]);
                }
            }
        }
    }

    #[test]
    fn a_nearly_singular_kc_converges_cleanly_and_its_bound_is_continuous_at_the_singular_limit() {
        // With K^c's smallest eigenvalue at 1e-12 and sigma^2 = e^2.5, V_i and S_i are
        // ill-conditioned by ~1e13. Held in the class basis, their rounding put ~1e-4 nats of
        // noise on every per-datum h, so V proposals were rejected at random and the sweeps ran
        // into the flat-bound floor (or failed to factor). As lam_min -> 0 the optimised bound
        // has a limit: fits at 1e-10, 1e-13 and 0 (floored at KC_EIG_FLOOR) must agree to well
        // below that noise.
        let (x, y) = toy(30, 3, 7);
        let kern = SqExp { log_variance: 2.5, log_lengthscales: vec![0.5], learn_variance: true };
        let params = KlmnlParams::default();
        let fit_at = |lam_min: f64| {
            let pr = Prior::new(kern.gram(&x), rotated_kc(&[lam_min, 1.0, 2.0 - lam_min], 11), &y).unwrap();
            fit_variational(&pr, &params, None, None).unwrap()
        };
        let (a, b, z) = (fit_at(1e-10), fit_at(1e-13), fit_at(0.0));
        for f in [&a, &b, &z] {
            assert!(f.stats.converged && !f.stats.stopped_at_floor, "{:?}", f.stats);
            assert!(f.stats.max_b_minus_gbar < params.b_tol, "{:?}", f.stats);
        }
        assert!((a.log_zh - b.log_zh).abs() < 1e-7, "{} vs {}", a.log_zh, b.log_zh);
        assert!((z.log_zh - b.log_zh).abs() < 1e-7, "{} vs {}", z.log_zh, b.log_zh);
        let pr = Prior::new(kern.gram(&x), rotated_kc(&[0.0, 1.0, 2.0], 11), &y).unwrap();
        let (lam, _) = jacobi_eigh(&pr.kc).unwrap();
        assert!(pr.kc_lam[0] == KC_EIG_FLOOR * pr.kc_lam[2] && lam[0] > 0.5 * pr.kc_lam[0], "{:?} {lam:?}", pr.kc_lam);
    }

    #[test]
    fn v_mix_step_stops_where_the_dense_bound_is_stationary_along_the_mix() {
        let (x, y) = toy(8, 3, 5);
        let kern = SqExp { log_variance: 1.0, log_lengthscales: vec![0.0], learn_variance: true };
        let pr = Prior::new(kern.gram(&x), eye(3), &y).unwrap();
        let mut st = init_state(&pr, &default_w(8, 3, 1.0), 0.5).unwrap();
        let m = m_of(&pr, &st.b);
        let mut stats = FitStats::default();
        s_steps(&pr, &mut st, &m, &mut stats).unwrap();
        let (cur, _) = bound(&pr, &st, &m).unwrap();
        let w = current_w(&pr, &st).unwrap();
        let dense_v = |t: &Mat<f64>| &pr.k - &pr.k * t * &pr.k;
        let v_old = dense_v(&st.v.t.dense());
        let v_new = dense_v(&v_from_w(&pr, &w).unwrap().t.dense());
        let (b, s) = (st.b.clone(), st.s.clone());
        let along = |eta: f64| dense_bound(&pr.k, &m, &(&v_old * faer::Scale(1.0 - eta) + &v_new * faer::Scale(eta)), &b, &s, &pr.y1, 3);
        // The cheap slope at eta = 0 (blocks only) is the dense bound's.
        let slope0 = mix_slope_at_zero(&pr, &st, &v_from_w(&pr, &w).unwrap()).unwrap();
        let h = 1e-6;
        let fd0 = (along(h) - along(0.0)) / h;
        assert!((slope0 - fd0).abs() < 1e-4 * fd0.abs(), "slope at 0: {slope0} vs finite difference {fd0}");
        let (val, eta) = v_mix_step(&pr, &mut st, &m, cur, w, &mut None, &mut stats).unwrap();
        assert!(eta > 0.01 && eta < 0.99, "this start must give an interior step, got eta = {eta}");
        assert!(val > cur, "the step must raise the bound: {cur} -> {val}");
        // The new state is the mix at eta, and its log-determinant (from the pencil) and trace
        // terms agree with a dense evaluation with explicit inverses.
        assert!((along(eta) - val).abs() < 1e-8, "dense {} vs {val}", along(eta));
        let vs = dense_v(&st.v.t.dense());
        let vm = &v_old * faer::Scale(1.0 - eta) + &v_new * faer::Scale(eta);
        assert!((&vs - &vm).norm_max() < 1e-10);
        // False position stops where the derivative along the mix vanishes.
        let h = 1e-4;
        let slope = (along(eta + h) - along(eta - h)) / (2.0 * h);
        let scale = (along(0.99) - along(0.01)).abs() / 0.98;
        assert!(slope.abs() < 1e-6 * scale.max(1.0), "slope {slope} at eta {eta} (secant slope {scale})");
        // A second mix from this mixed state, whose L_K^T T L_K is carried rather than
        // recomputed: again the mix at its eta, with the dense bound's value.
        s_steps(&pr, &mut st, &m, &mut stats).unwrap();
        let (cur, _) = bound(&pr, &st, &m).unwrap();
        let w = current_w(&pr, &st).unwrap();
        let v_old = dense_v(&st.v.t.dense());
        let v_new = dense_v(&v_from_w(&pr, &w).unwrap().t.dense());
        let (b, s) = (st.b.clone(), st.s.clone());
        let (val, eta) = v_mix_step(&pr, &mut st, &m, cur, w, &mut None, &mut stats).unwrap();
        assert!(eta > 0.01 && val > cur, "the second mix must move: eta = {eta}, {cur} -> {val}");
        let vm = &v_old * faer::Scale(1.0 - eta) + &v_new * faer::Scale(eta);
        let dense = dense_bound(&pr.k, &m, &vm, &b, &s, &pr.y1, 3);
        assert!((dense - val).abs() < 1e-8, "second mix: dense {dense} vs {val}");
        assert!((&dense_v(&st.v.t.dense()) - &vm).norm_max() < 1e-10);
    }

    #[test]
    fn hyper_gradient_matches_finite_differences_of_the_optimised_bound() {
        let (x, y) = toy(7, 3, 9);
        let params = KlmnlParams { tol: 1e-14, b_tol: 1e-11, ..Default::default() };
        for ard in [false, true] {
            let kern = if ard {
                SqExp { log_variance: 0.2, log_lengthscales: vec![0.1, -0.2], learn_variance: true }
            } else {
                SqExp { log_variance: 0.5, log_lengthscales: vec![0.3], learn_variance: true }
            };
            let at = |p: &[f64]| -> f64 {
                let k = kern.with_log_params(p);
                fit_variational(&Prior::new(k.gram(&x), eye(3), &y).unwrap(), &params, None, None).unwrap().log_zh
            };
            let kx = kern.gram(&x);
            let dkx = kern.gram_grads(&x, &kx);
            let pr = Prior::new(kx, eye(3), &y).unwrap();
            let fit = fit_variational(&pr, &params, None, None).unwrap();
            let g = hyper_gradient(&envelope(&pr, &fit, false), &dkx);
            let p0 = kern.log_params();
            for j in 0..p0.len() {
                let e = 1e-4;
                let mut pp = p0.clone();
                pp[j] += e;
                let mut pm = p0.clone();
                pm[j] -= e;
                let fd = (at(&pp) - at(&pm)) / (2.0 * e);
                assert!((fd - g[j]).abs() < 1e-5 * (1.0 + fd.abs()), "ard={ard} param {j}: formula {} vs fd {fd}", g[j]);
            }
        }
    }

    #[test]
    fn learning_raises_the_bound_and_predictions_are_consistent() {
        let (x, y) = toy(12, 3, 21);
        let kern = SqExp { log_variance: 0.0, log_lengthscales: vec![0.0, 0.0], learn_variance: false };
        let mut r = rng(1);
        let problem = Problem { x: &x, y: &y, n_classes: 3 };
        let method = KlmnlParams::default().check().unwrap();
        let mut ctx = FitContext::new(&mut r, None);
        let fixed = method.fit_model(&problem, &kern, HyperPolicy::Fixed, &mut ctx).unwrap();
        let learned = method.fit_model(&problem, &kern, HyperPolicy::Learn, &mut ctx).unwrap();
        assert!(learned.log_zh() >= fixed.log_zh() - 1e-9);
        assert_eq!(learned.kernel().log_variance, 0.0, "unit variance kept fixed");
        let (xt, _) = toy(5, 3, 77);
        let cache = learned.predictive_logs(&xt).unwrap();
        for j in 0..5 {
            // (24) <= (25) class-wise, the same argmax, and the latent means sum to zero (K^c = I)
            for c in 0..3 {
                assert!(cache.log_p24[j][c] <= cache.log_p25[j][c] + 1e-12);
            }
            assert_eq!(crate::linalg::argmax(&cache.log_p24[j]), crate::linalg::argmax(&cache.log_p25[j]));
        }
        let (means, _) = learned.latent_predictive(&xt);
        for m in means {
            assert!(m.iter().sum::<f64>().abs() < 1e-8);
        }
    }

    #[test]
    fn learning_reaches_the_best_bound_of_a_fine_grid() {
        // Inner fits run loose while the outer steps are large (inner_params); the optimum must
        // still be the true one: no point of a grid around it may beat it.
        let (x, y) = toy(14, 3, 8);
        let kern = SqExp { log_variance: 0.5, log_lengthscales: vec![0.0], learn_variance: false };
        let problem = Problem { x: &x, y: &y, n_classes: 3 };
        let tight = KlmnlParams { hyper_tol: 0.0, ..KlmnlParams::default() }.check().unwrap();
        let mut r = rng(2);
        let learned = tight.fit_model(&problem, &kern, HyperPolicy::Learn, &mut FitContext::new(&mut r, None)).unwrap();
        let l0 = learned.kernel().log_lengthscales[0];
        let at = |l: f64| {
            let k = SqExp { log_lengthscales: vec![l], ..kern.clone() };
            fit_variational(&Prior::new(k.gram(&x), eye(3), &y).unwrap(), &KlmnlParams::default(), None, None).unwrap().log_zh
        };
        let best_grid = (-20..=20).map(|k| at(l0 + 0.01 * k as f64)).fold(f64::NEG_INFINITY, f64::max);
        assert!(learned.log_zh() >= best_grid - 1e-8, "learned {} vs grid {best_grid}", learned.log_zh());
        // The default stop (an iteration gains < 1e-4 nats) ends near it, and sooner.
        let default = KlmnlParams::default().check().unwrap();
        let stopped = default.fit_model(&problem, &kern, HyperPolicy::Learn, &mut FitContext::new(&mut r, None)).unwrap();
        assert!(stopped.log_zh() >= best_grid - 1e-3, "stopped at {} vs grid {best_grid}", stopped.log_zh());
        let evals = |m: &KlmnlModel| m.extra["hyper_evaluations"];
        assert!(evals(&stopped) < evals(&learned), "{} vs {} evaluations", evals(&stopped), evals(&learned));
        // and the schedule itself: tight without history or once the steps are small
        let p = KlmnlParams::default();
        assert_eq!(inner_params(&p, &[]).tol, p.tol);
        assert_eq!(inner_params(&p, &[-100.0, -100.0 + 1e-9]).tol, p.tol);
        let loose = inner_params(&p, &[-150.0, -140.0]);
        assert_eq!(loose.tol, 1e-6);
        assert!((loose.b_tol - p.b_tol * 100.0).abs() < 1e-18);
    }

    #[test]
    fn a_fit_warm_started_from_a_source_handoff_reaches_the_same_optimum_sooner() {
        let (x, y) = toy(15, 3, 12);
        let kern = SqExp { log_variance: 1.0, log_lengthscales: vec![0.3, -0.2], learn_variance: false };
        let problem = Problem { x: &x, y: &y, n_classes: 3 };
        let method = KlmnlParams::default().check().unwrap();
        let mut r = rng(4);
        let cold = method.fit_model(&problem, &kern, HyperPolicy::Fixed, &mut FitContext::new(&mut r, None)).unwrap();
        let handoff = Fitted::handoff(&cold);
        let mut ctx = FitContext::new(&mut r, None);
        ctx.source = Some(&handoff);
        let warm = method.fit_model(&problem, &kern, HyperPolicy::Fixed, &mut ctx).unwrap();
        assert!((warm.log_zh() - cold.log_zh()).abs() < 1e-8 * cold.log_zh().abs(), "{} vs {}", warm.log_zh(), cold.log_zh());
        assert!(warm.fit.stats.sweeps < cold.fit.stats.sweeps / 2, "{} vs {} sweeps", warm.fit.stats.sweeps, cold.fit.stats.sweeps);
        // A handoff of another shape (here: other data) is ignored, not an error.
        let (x2, y2) = toy(9, 3, 13);
        let mut ctx = FitContext::new(&mut r, None);
        ctx.source = Some(&handoff);
        let other = method.fit_model(&Problem { x: &x2, y: &y2, n_classes: 3 }, &kern, HyperPolicy::Fixed, &mut ctx).unwrap();
        assert!(other.fit.stats.converged);
    }

    #[test]
    fn settings_are_checked_by_name() {
        let e = KlmnlParams { predictive: "eq26".into(), ..Default::default() }.check().unwrap_err();
        assert!(e.contains("settings.predictive"));
        let e = KlmnlParams { hyper_tol: -1e-4, ..Default::default() }.check().unwrap_err();
        assert!(e.contains("settings.hyper_tol"), "{e}");
        assert!(KlmnlParams::from_settings(&serde_json::json!({"max_sweep": 3})).is_err());
    }
}

#[cfg(test)]
mod jacobi_tests {
    use super::*;

    #[test]
    fn jacobi_eigh_reconstructs_and_orders() {
        let b = Mat::from_fn(5, 5, |i, j| ((i * 7 + j * 3) % 5) as f64 - 2.0 + if i == j { 1.0 } else { 0.0 });
        let a = sym(&(&b * b.transpose()));
        let (lam, u) = jacobi_eigh(&a).unwrap();
        let rec = Mat::from_fn(5, 5, |i, j| (0..5).map(|k| u[(i, k)] * lam[k] * u[(j, k)]).sum::<f64>());
        assert!((&rec - &a).norm_max() < 1e-10);
        assert!(lam.windows(2).all(|w| w[0] <= w[1]));
        let want = a.self_adjoint_eigenvalues(Side::Lower).unwrap();
        for (x, y) in lam.iter().zip(&want) {
            assert!((x - y).abs() < 1e-10);
        }
    }
}

#[cfg(test)]
mod kc_tests {
    use super::*;
    use rand::SeedableRng;
    use rand_distr::StandardNormal;
    use rand::RngExt;

    #[test]
    fn kc_models_keep_the_trace_and_their_gradients_match_finite_differences() {
        let mut r = Pcg64::seed_from_u64(4);
        let n = 7;
        let c = 3;
        let y: Vec<usize> = (0..n).map(|i| i % c).collect();
        let x = Array2::from_shape_fn((n, 2), |(i, d)| r.sample::<f64, _>(StandardNormal) + if d == 0 { y[i] as f64 } else { 0.0 });
        let kern = SqExp { log_variance: 0.3, log_lengthscales: vec![0.2], learn_variance: true };
        let params = KlmnlParams { tol: 1e-14, b_tol: 1e-11, ..Default::default() };
        for model in ["m2", "m3", "m4", "m5"] {
            let rho: Vec<f64> = kc_init(model, c).iter().map(|v| v + 0.2 * r.sample::<f64, _>(StandardNormal)).collect();
            let kc = kc_of(model, &rho, c);
            let tr: f64 = (0..c).map(|i| kc[(i, i)]).sum();
            assert!((tr - c as f64).abs() < 1e-12, "{model}: tr {tr}");
            let at = |rh: &[f64]| fit_variational(&Prior::new(kern.gram(&x), kc_of(model, rh, c), &y).unwrap(), &params, None, None).unwrap().log_zh;
            let pr = Prior::new(kern.gram(&x), kc, &y).unwrap();
            let fit = fit_variational(&pr, &params, None, None).unwrap();
            let g = kc_gradient(&envelope(&pr, &fit, true), model, &rho);
            for k in 0..rho.len() {
                let e = 1e-4;
                let mut rp = rho.clone();
                rp[k] += e;
                let mut rm = rho.clone();
                rm[k] -= e;
                let fd = (at(&rp) - at(&rm)) / (2.0 * e);
                assert!((fd - g[k]).abs() < 1e-5 * (1.0 + fd.abs()), "{model} param {k}: {} vs fd {fd}", g[k]);
            }
        }
        // M3/M4 are sum-to-zero models: 1 is an eigenvector of K^c
        for model in ["m3", "m4"] {
            let kc = kc_of(model, &kc_init(model, c).iter().map(|v| v + 0.3).collect::<Vec<_>>(), c);
            let k1: Vec<f64> = (0..c).map(|i| (0..c).map(|j| kc[(i, j)]).sum()).collect();
            assert!(k1.iter().all(|v| (v - k1[0]).abs() < 1e-12), "{model}: {k1:?}");
        }
    }
}
