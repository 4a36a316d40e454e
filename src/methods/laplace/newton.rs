//! The posterior mode of the multinomial-logit GP for one kernel matrix (GPML Alg. 3.3): damped
//! Newton ascent on Psi(f) = -1/2 f^T K^{-1} f + log p(y | f) in the stable B form, and the
//! curvature at the mode that the evidence, its gradient and the predictive need.
use super::LaplaceParams;
use crate::linalg::{log_sum_exp, matvec, softmax_in_place, Chol};
use faer::MatRef;

/// Column j of a column-major matrix as a slice.
pub(super) fn column(m: MatRef<'_, f64>, j: usize) -> &[f64] {
    m.col(j).try_as_col_major().expect("column-major storage").as_slice()
}
use crate::methods::FitError;
use faer::Mat;

/// The posterior mode for one kernel matrix and everything derived from the curvature there.
#[derive(Clone)]
pub(super) struct Mode {
    pub(super) n: usize,
    pub(super) n_classes: usize,
    /// f-hat, class-major [C n].
    pub(super) f: Vec<f64>,
    /// a = K^{-1} f-hat = y - pi at the mode, class-major [C n].
    pub(super) a: Vec<f64>,
    /// pi at the mode, class-major [C n].
    pub(super) pi: Vec<f64>,
    /// E_c = D_c^{1/2} B_c^{-1} D_c^{1/2}, one [n, n] per class.
    pub(super) E: Vec<Mat<f64>>,
    /// Cholesky of sum_c E_c, with the jitter it needed (`M.jitter()`, the fit's `diag_jitter`).
    /// A guard, not a known case: a probe of variances up to 1e12 (duplicated inputs, K
    /// singular) never needed it; what fails there is Newton, flagged unconverged.
    pub(super) M: Chol,
    /// Psi(f-hat) = -1/2 f^T K^{-1} f + sum_i log p(y_i | f_i).
    pub(super) psi: f64,
    /// The Laplace approximation to log p(y | X): Psi - 1/2 log |I + K W|.
    pub(super) log_evidence: f64,
    pub(super) newton_iters: usize,
    /// Whether Newton met `newton_tol` (false: it stopped at `max_newton_iters`, and f-hat is
    /// the best point reached, not the mode to that tolerance).
    pub(super) newton_converged: bool,
    /// da-hat/d(log-parameter p) as column p, class-major [C n, P], where the gradient was
    /// computed (`evidence_and_grad`): the next evaluation's Newton start is predicted by it.
    pub(super) da_dtheta: Option<Mat<f64>>,
}

impl super::SearchMode for Mode {
    fn newton_iters(&self) -> usize {
        self.newton_iters
    }
    fn newton_converged(&self) -> bool {
        self.newton_converged
    }
    /// a and, where the gradient computed it, its derivative (the next start is predicted).
    fn warm_start(&self) -> super::WarmStart {
        super::WarmStart { a: self.a.clone(), da_dtheta: self.da_dtheta.clone() }
    }
}

/// Psi(f) for f = K a.
pub(super) fn objective(a: &[f64], f: &[f64], y: &[usize], n: usize, n_classes: usize) -> f64 {
    let quad = -0.5 * a.iter().zip(f).map(|(x, y)| x * y).sum::<f64>();
    let mut loglik = 0.0;
    let mut fi = vec![0.0; n_classes];
    for i in 0..n {
        for (c, v) in fi.iter_mut().enumerate() {
            *v = f[c * n + i];
        }
        loglik += fi[y[i]] - log_sum_exp(&fi);
    }
    quad + loglik
}

/// Class probabilities per datum for class-major latents.
pub(super) fn class_probs(f: &[f64], n: usize, n_classes: usize) -> Vec<f64> {
    let mut pi = vec![0.0; n * n_classes];
    let mut fi = vec![0.0; n_classes];
    for i in 0..n {
        for (c, v) in fi.iter_mut().enumerate() {
            *v = f[c * n + i];
        }
        softmax_in_place(&mut fi);
        for (c, v) in fi.iter().enumerate() {
            pi[c * n + i] = *v;
        }
    }
    pi
}

/// E_c for every class, the Cholesky of their sum, and 1/2 log |I + K W| (GPML Alg. 3.3 lines 5-9).
/// E_c = D_c^1/2 B_c^{-1} D_c^1/2 comes from B_c's Cholesky inverse (n^3 / 2 multiply-adds a
/// class with the factor; solving L_c Q = D_c^1/2 and forming Q^T Q took 5 n^3 / 3).
/// B_c's lower triangle is written straight into one reused factor's storage and E_c scaled in
/// place, column by column on slices: at n ~ 100 element-wise passes through indexing closures
/// cost as much as the factorisations.
pub(super) fn curvature(K: &Mat<f64>, pi: &[f64], n_classes: usize) -> Result<(Vec<Mat<f64>>, Chol, f64), FitError> {
    let n = K.nrows();
    let mut E = Vec::with_capacity(n_classes);
    let mut half_log_det = 0.0;
    let mut sum_e = Mat::<f64>::zeros(n, n);
    let mut L = Chol::workspace(n);
    let mut sq = vec![0.0; n];
    for c in 0..n_classes {
        for (s, p) in sq.iter_mut().zip(&pi[c * n..(c + 1) * n]) {
            *s = p.sqrt();
        }
        L.refactor_lower("I + D^1/2 K D^1/2", |j, col| {
            let k = &column(K.as_ref(), j)[j..];
            for (r, (b, kij)) in col.iter_mut().zip(k).enumerate() {
                *b = (if r == 0 { 1.0 } else { 0.0 }) + sq[j + r] * kij * sq[j];
            }
        })?;
        half_log_det += 0.5 * L.log_det();
        let mut Ec = L.inverse();
        for j in 0..n {
            let e = Ec.col_mut(j).try_as_col_major_mut().expect("a fresh Mat is column-major").as_slice_mut();
            let s = sum_e.col_mut(j).try_as_col_major_mut().expect("a fresh Mat is column-major").as_slice_mut();
            for (i, (e, s)) in e.iter_mut().zip(s).enumerate() {
                *e = sq[i] * *e * sq[j];
                *s += *e;
            }
        }
        E.push(Ec);
    }
    let M = Chol::factor_with_jitter(sum_e.as_ref(), "sum_c E_c")?;
    half_log_det += 0.5 * M.log_det();
    Ok((E, M, half_log_det))
}

/// One full Newton step of the multinomial-logit mode search from a (f = K a): the new a.
pub(super) fn newton_step(K: &Mat<f64>, y: &[usize], n_classes: usize, a: &[f64], f: &[f64]) -> Result<Vec<f64>, FitError> {
    let (n, nc) = (K.nrows(), K.nrows() * n_classes);
    let pi = class_probs(f, n, n_classes);
    let (E, M, _) = curvature(K, &pi, n_classes)?;
    // The Newton step in a solves for the change, (I + W K) da = g with g = y - pi - a the
    // gradient of Psi w.r.t. f: the iterate a + da is GPML's a = (I + W K)^{-1} (W f + y - pi)
    // (Alg. 3.3 line 10), but the solve's error is relative to the step, not to the new a.
    // The Woodbury solve below goes through D_c = diag(pi_c) and sum_c E_c, whose difference
    // makes W: with saturated class probabilities (large signal variances) it loses most
    // digits, and solving for the whole a there spoilt the direction near the mode, so
    // Newton ran to `max_newton_iters` at Psi's noise floor (benches/PROFILE.md, session 65).
    let g: Vec<f64> = (0..nc).map(|k| if y[k % n] == k / n { 1.0 } else { 0.0 } - pi[k] - a[k]).collect();
    // c = E K g;  da = g - c + E R M^{-T} M^{-1} R^T c.
    let mut cvec = vec![0.0; nc];
    let mut rtc = vec![0.0; n];
    for c in 0..n_classes {
        let kg = matvec(K.as_ref(), &g[c * n..(c + 1) * n]);
        let ec = matvec(E[c].as_ref(), &kg);
        for i in 0..n {
            cvec[c * n + i] = ec[i];
            rtc[i] += ec[i];
        }
    }
    let s = M.solve_vec(&rtc);
    let mut a_new = vec![0.0; nc];
    for c in 0..n_classes {
        let es = matvec(E[c].as_ref(), &s);
        for i in 0..n {
            let k = c * n + i;
            a_new[k] = a[k] + g[k] - cvec[k] + es[i];
        }
    }
    Ok(a_new)
}

/// Newton's method for the posterior mode (GPML Alg. 3.3): `newton_ascent` with the
/// multinomial-logit step.
///
/// `warm` are candidate `a`s from a nearby kernel (hyper-parameter learning): f = K a is then a
/// good start; the best of them and f = 0 is taken.
pub(super) fn find_mode(K: &Mat<f64>, y: &[usize], n_classes: usize, params: &LaplaceParams, warm: &[&[f64]]) -> Result<Mode, FitError> {
    let n = K.nrows();
    let nc = n * n_classes;
    let step = |a: &[f64], f: &[f64]| newton_step(K, y, n_classes, a, f);
    let ascent = newton_ascent(nc, |a| block_matvec(K, a, n_classes), |a, f| objective(a, f, y, n, n_classes), step, params, warm)?;
    let (f, a, psi) = (ascent.f, ascent.a, ascent.psi);
    let pi = class_probs(&f, n, n_classes);
    let (E, M, half_log_det) = curvature(K, &pi, n_classes)?;
    Ok(Mode {
        n,
        n_classes,
        f,
        a,
        pi,
        E,
        M,
        psi,
        log_evidence: psi - half_log_det,
        newton_iters: ascent.iters,
        newton_converged: ascent.converged,
        da_dtheta: None,
    })
}

/// The end point of `newton_ascent`: a and f = K a at the mode, Psi there, Newton steps taken.
pub(super) struct Ascent {
    pub(super) a: Vec<f64>,
    pub(super) f: Vec<f64>,
    pub(super) psi: f64,
    pub(super) iters: usize,
    /// `newton_tol` met before `max_newton_iters`.
    pub(super) converged: bool,
}

/// Damped Newton ascent on Psi(f) = -1/2 a^T f + log p(y | f), f = K a, shared by both
/// likelihoods: `step(a, f)` returns the full Newton step's a (GPML Alg. 3.1 line 7 or 3.3
/// line 10), which is halved towards the current a (f = K a is linear) whenever it would
/// lower Psi. Starts from the best of f = 0 and f = K a for the candidates a in `warm` (the
/// first of equals).
///
/// Converged when the full Newton step changes Psi by less than `newton_tol` relative, up or
/// down: near the mode that change is half the squared Newton decrement, and where the
/// computed direction is only as accurate as an ill-conditioned K allows (large signal
/// variances) it is round-off of that size. The change a halved step makes says nothing: far
/// from the mode a poor direction halved many times also changes Psi by little. Stops
/// unconverged after `max_newton_iters` steps.
pub(super) fn newton_ascent(
    dim: usize,
    kmul: impl Fn(&[f64]) -> Vec<f64>,
    objective: impl Fn(&[f64], &[f64]) -> f64,
    mut step: impl FnMut(&[f64], &[f64]) -> Result<Vec<f64>, FitError>,
    params: &LaplaceParams,
    warm: &[&[f64]],
) -> Result<Ascent, FitError> {
    let mut f = vec![0.0; dim];
    let mut a = vec![0.0; dim];
    let mut psi = objective(&a, &f);
    for &a0 in warm {
        let f0 = kmul(a0);
        let psi0 = objective(a0, &f0);
        if psi0 > psi {
            (a, f, psi) = (a0.to_vec(), f0, psi0);
        }
    }
    let (mut iters, mut converged) = (0, false);
    for _ in 0..params.max_newton_iters {
        iters += 1;
        let mut a_new = step(&a, &f)?;
        let mut f_new = kmul(&a_new);
        let mut psi_new = objective(&a_new, &f_new);
        // NaN (a step into a non-finite region) is never a small change.
        converged = (psi_new - psi).abs() <= params.newton_tol * (1.0 + psi.abs());
        let mut halvings = 0;
        while !(psi_new >= psi - 1e-12 * psi.abs()) && halvings < 30 {
            for k in 0..dim {
                a_new[k] = 0.5 * (a[k] + a_new[k]);
                f_new[k] = 0.5 * (f[k] + f_new[k]);
            }
            psi_new = objective(&a_new, &f_new);
            halvings += 1;
        }
        if !psi_new.is_finite() {
            return Err(FitError::Numerical("Laplace: Newton objective became non-finite".into()));
        }
        // A step still lowering Psi after 30 halvings is taken all the same: it moves 2^-30
        // of the way, and where the direction was spoilt by round-off (from f = 0 at huge
        // signal variances, where every class's curvature is the same) the next step from
        // there ascends; stopping instead would end the search at the start.
        a = a_new;
        f = f_new;
        psi = psi_new;
        if converged {
            break;
        }
    }
    Ok(Ascent { a, f, psi, iters, converged })
}

/// (I_C (x) K) v for class-major v.
pub(super) fn block_matvec(K: &Mat<f64>, v: &[f64], n_classes: usize) -> Vec<f64> {
    let n = K.nrows();
    (0..n_classes).flat_map(|c| matvec(K.as_ref(), &v[c * n..(c + 1) * n])).collect()
}
