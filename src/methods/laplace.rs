//! Laplace approximation for the multinomial-logit GP (Rasmussen & Williams 2006,
//! Algorithms 3.3 and 3.4; Williams & Barber 1998), with the approximate log marginal
//! likelihood and its exact gradient for hyper-parameter learning. `likelihood: probit`
//! selects the binary-probit Laplace instead (GPML Alg. 3.1, 3.2, 5.1; submodule `probit`);
//! both share the damped Newton iteration and the hyper-parameter search below.
//!
//! Layout: latent vectors are class-major, f = [f^1; ...; f^C] with f^c in R^n. All C
//! latent functions share one kernel K (as in Girolami & Rogers 2006 and Chai 2012), so
//! the prior covariance is I_C (x) K. Nothing inverts K: every solve goes through
//! B_c = I + D_c^{1/2} K D_c^{1/2} (eigenvalues >= 1) and M M^T = sum_c E_c.
use super::optimize::minimize_lbfgs;
use super::{parse_settings, Diagnostics, Evidence, FitContext, FitError, Fitted, HyperPolicy, Method, Prediction, Problem, ProblemShape, StopReason};
use crate::kernels::{Kernel, KernelSet};
use crate::likelihoods::{Likelihood, Softmax};
use crate::linalg::{log_sum_exp, matvec, softmax_in_place, Chol};
use crate::results::EvidenceKind;
use faer::Mat;
use ndarray::Array2;
use rand::RngExt;
use rand_distr::StandardNormal;
use rand_pcg::Pcg64;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

mod probit;
pub use probit::LaplaceProbitModel;

/// Settings as written in a spec (`method: laplace`, `settings: {...}`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LaplaceParams {
    /// Newton iterations allowed to find the posterior mode.
    #[serde(default = "default_newton_iters")]
    pub max_newton_iters: usize,
    /// Stop Newton when the objective changes by less than this (relative).
    #[serde(default = "default_newton_tol")]
    pub newton_tol: f64,
    /// Monte Carlo draws per test point for the predictive class probabilities (Alg. 3.4).
    #[serde(default = "default_mc_samples")]
    pub mc_samples: usize,
    /// L-BFGS iterations for hyper-parameter learning.
    #[serde(default = "default_hyper_iters")]
    pub max_hyper_iters: u64,
    /// `logit` (multinomial logit, C latent functions, any C >= 2) or `probit` (binary probit
    /// Phi(t f) with one latent function: exactly two classes, class index 1 is t = +1 as in
    /// `gibbs_mnp`'s binary model; predictions are exact, so `mc_samples` is unused).
    #[serde(default)]
    pub likelihood: LaplaceLikelihood,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LaplaceLikelihood {
    #[default]
    Logit,
    Probit,
}

fn default_newton_iters() -> usize {
    100
}
fn default_newton_tol() -> f64 {
    1e-10
}
fn default_mc_samples() -> usize {
    4000
}
fn default_hyper_iters() -> u64 {
    100
}

impl Default for LaplaceParams {
    fn default() -> Self {
        parse_settings(&serde_json::Value::Null).expect("defaults parse")
    }
}

impl LaplaceParams {
    /// Check every rule; the error names the setting.
    pub fn check(self) -> Result<Laplace, String> {
        if self.max_newton_iters == 0 {
            return Err("settings.max_newton_iters must be at least 1".into());
        }
        if !(self.newton_tol > 0.0 && self.newton_tol < 1.0) {
            return Err(format!("settings.newton_tol must be in (0, 1), got {}", self.newton_tol));
        }
        if self.mc_samples < 2 {
            return Err(format!("settings.mc_samples must be at least 2, got {}", self.mc_samples));
        }
        Ok(Laplace { params: self })
    }
}

/// The checked method.
#[derive(Clone, Debug)]
pub struct Laplace {
    params: LaplaceParams,
}

/// The posterior mode for one kernel matrix and everything derived from the curvature there.
#[derive(Clone)]
struct Mode {
    n: usize,
    n_classes: usize,
    /// f-hat, class-major [C n].
    f: Vec<f64>,
    /// a = K^{-1} f-hat = y - pi at the mode, class-major [C n].
    a: Vec<f64>,
    /// pi at the mode, class-major [C n].
    pi: Vec<f64>,
    /// E_c = D_c^{1/2} B_c^{-1} D_c^{1/2}, one [n, n] per class.
    E: Vec<Mat<f64>>,
    /// Cholesky of sum_c E_c.
    M: Chol,
    /// Psi(f-hat) = -1/2 f^T K^{-1} f + sum_i log p(y_i | f_i).
    psi: f64,
    /// The Laplace approximation to log p(y | X): Psi - 1/2 log |I + K W|.
    log_evidence: f64,
    newton_iters: usize,
}

/// Psi(f) for f = K a.
fn objective(a: &[f64], f: &[f64], y: &[usize], n: usize, n_classes: usize) -> f64 {
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
fn class_probs(f: &[f64], n: usize, n_classes: usize) -> Vec<f64> {
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
fn curvature(K: &Mat<f64>, pi: &[f64], n_classes: usize) -> Result<(Vec<Mat<f64>>, Chol, f64), FitError> {
    let n = K.nrows();
    let mut E = Vec::with_capacity(n_classes);
    let mut half_log_det = 0.0;
    let mut sum_e = Mat::<f64>::zeros(n, n);
    for c in 0..n_classes {
        let sq: Vec<f64> = pi[c * n..(c + 1) * n].iter().map(|p| p.sqrt()).collect();
        let B = Mat::from_fn(n, n, |i, j| (if i == j { 1.0 } else { 0.0 }) + sq[i] * K[(i, j)] * sq[j]);
        let L = Chol::factor(B.as_ref(), "I + D^1/2 K D^1/2")?;
        half_log_det += 0.5 * L.log_det();
        let Q = L.solve_l(Mat::from_fn(n, n, |i, j| if i == j { sq[i] } else { 0.0 }).as_ref());
        let Ec = Q.transpose() * &Q;
        sum_e += &Ec;
        E.push(Ec);
    }
    let M = Chol::factor(sum_e.as_ref(), "sum_c E_c")?;
    half_log_det += 0.5 * M.log_det();
    Ok((E, M, half_log_det))
}

/// Newton's method for the posterior mode (GPML Alg. 3.3): `newton_ascent` with the
/// multinomial-logit step.
///
/// `warm` is an `a` from a nearby kernel (hyper-parameter learning): f = K a is then a good
/// start, used only when it beats f = 0.
fn find_mode(K: &Mat<f64>, y: &[usize], n_classes: usize, params: &LaplaceParams, warm: Option<&[f64]>) -> Result<Mode, FitError> {
    let n = K.nrows();
    let nc = n * n_classes;
    let step = |f: &[f64]| -> Result<Vec<f64>, FitError> {
        let pi = class_probs(f, n, n_classes);
        let (E, M, _) = curvature(K, &pi, n_classes)?;
        // b = W f + y - pi, with (W f)_i = pi_i o f_i - pi_i (pi_i . f_i).
        let mut b = vec![0.0; nc];
        for i in 0..n {
            let pf: f64 = (0..n_classes).map(|c| pi[c * n + i] * f[c * n + i]).sum();
            for c in 0..n_classes {
                let k = c * n + i;
                b[k] = pi[k] * (f[k] - pf) + if y[i] == c { 1.0 } else { 0.0 } - pi[k];
            }
        }
        // c = E K b;  a = b - c + E R M^{-T} M^{-1} R^T c.
        let mut cvec = vec![0.0; nc];
        let mut rtc = vec![0.0; n];
        for c in 0..n_classes {
            let kb = matvec(K.as_ref(), &b[c * n..(c + 1) * n]);
            let ec = matvec(E[c].as_ref(), &kb);
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
                a_new[k] = b[k] - cvec[k] + es[i];
            }
        }
        Ok(a_new)
    };
    let ascent = newton_ascent(
        nc,
        |a| block_matvec(K, a, n_classes),
        |a, f| objective(a, f, y, n, n_classes),
        step,
        params,
        warm,
    )?;
    let (f, a, psi) = (ascent.f, ascent.a, ascent.psi);
    let pi = class_probs(&f, n, n_classes);
    let (E, M, half_log_det) = curvature(K, &pi, n_classes)?;
    Ok(Mode { n, n_classes, f, a, pi, E, M, psi, log_evidence: psi - half_log_det, newton_iters: ascent.iters })
}

/// The end point of `newton_ascent`: a and f = K a at the mode, Psi there, Newton steps taken.
struct Ascent {
    a: Vec<f64>,
    f: Vec<f64>,
    psi: f64,
    iters: usize,
}

/// Damped Newton ascent on Psi(f) = -1/2 a^T f + log p(y | f), f = K a, shared by both
/// likelihoods: `step(f)` returns the full Newton step's a (GPML Alg. 3.1 line 7 or 3.3
/// line 10), which is halved towards the current a (f = K a is linear) whenever it would
/// lower Psi. Starts from f = 0, or from f = K `warm` when that is better. Stops when Psi
/// changes by less than `newton_tol` relative, or after `max_newton_iters` steps.
fn newton_ascent(
    dim: usize,
    kmul: impl Fn(&[f64]) -> Vec<f64>,
    objective: impl Fn(&[f64], &[f64]) -> f64,
    mut step: impl FnMut(&[f64]) -> Result<Vec<f64>, FitError>,
    params: &LaplaceParams,
    warm: Option<&[f64]>,
) -> Result<Ascent, FitError> {
    let mut f = vec![0.0; dim];
    let mut a = vec![0.0; dim];
    let mut psi = objective(&a, &f);
    if let Some(a0) = warm {
        let f0 = kmul(a0);
        let psi0 = objective(a0, &f0);
        if psi0 > psi {
            (a, f, psi) = (a0.to_vec(), f0, psi0);
        }
    }
    let mut iters = 0;
    for _ in 0..params.max_newton_iters {
        iters += 1;
        let mut a_new = step(&f)?;
        let mut f_new = kmul(&a_new);
        let mut psi_new = objective(&a_new, &f_new);
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
        let converged = (psi_new - psi).abs() <= params.newton_tol * (1.0 + psi.abs());
        a = a_new;
        f = f_new;
        psi = psi_new;
        if converged {
            break;
        }
    }
    Ok(Ascent { a, f, psi, iters })
}

/// (I_C (x) K) v for class-major v.
fn block_matvec(K: &Mat<f64>, v: &[f64], n_classes: usize) -> Vec<f64> {
    let n = K.nrows();
    (0..n_classes).flat_map(|c| matvec(K.as_ref(), &v[c * n..(c + 1) * n])).collect()
}

/// Gradient of the approximate log marginal likelihood w.r.t. the kernel's log-parameters:
/// the explicit part 1/2 a^T dK a - 1/2 tr((K + W^{-1})^{-1} dK) plus the implicit part
/// through f-hat, s2^T (I + K W)^{-1} dK (y - pi), where
/// s2 = d/df [-1/2 log |I + K W|] = -1/2 tr((K^{-1} + W)^{-1} dW/df). Per datum, with V the
/// C x C posterior covariance block and dW/df_k from dpi_c/df_k = pi_c (delta_ck - pi_k):
/// s2_k = -1/2 pi_k [V_kk - sum_c pi_c V_cc - 2 (V pi)_k + 2 pi^T V pi].
fn log_evidence_grad(mode: &Mode, K: &Mat<f64>, dKs: &[Mat<f64>]) -> Vec<f64> {
    let (n, C) = (mode.n, mode.n_classes);
    // P_c = M^{-1} E_c so that E_c S^{-1} E_c' = P_c^T P_c'.
    let P: Vec<Mat<f64>> = mode.E.iter().map(|e| mode.M.solve_l(e.as_ref())).collect();
    // (K + W^{-1})^{-1} restricted to the shared-kernel trace: R_sum = sum_c (E_c - P_c^T P_c).
    let mut R_sum = Mat::<f64>::zeros(n, n);
    for c in 0..C {
        R_sum += &mode.E[c];
        R_sum -= P[c].transpose() * &P[c];
    }
    // a a^T summed over classes.
    let AAt = Mat::from_fn(n, n, |i, k| (0..C).map(|c| mode.a[c * n + i] * mode.a[c * n + k]).sum::<f64>());

    // Posterior covariance blocks V_i[c, c'] = cov(f_i^c, f_i^c') under (K^{-1} + W)^{-1}
    // = delta_cc' (K_ii - (K E_c K)_ii) + (K E_c S^{-1} E_c' K)_ii.
    let H: Vec<Mat<f64>> = P.iter().map(|p| p * K).collect(); // M^{-1} E_c K
    let KEK_diag: Vec<Vec<f64>> = mode
        .E
        .iter()
        .map(|e| {
            let G = e * K;
            (0..n).map(|i| (0..n).map(|k| K[(i, k)] * G[(k, i)]).sum::<f64>()).collect()
        })
        .collect();
    let mut s2 = vec![0.0; n * C];
    let mut V = vec![vec![0.0; C]; C];
    for i in 0..n {
        for c in 0..C {
            for d in 0..=c {
                let cross: f64 = (0..n).map(|r| H[c][(r, i)] * H[d][(r, i)]).sum();
                let v = cross + if c == d { K[(i, i)] - KEK_diag[c][i] } else { 0.0 };
                V[c][d] = v;
                V[d][c] = v;
            }
        }
        let p: Vec<f64> = (0..C).map(|c| mode.pi[c * n + i]).collect();
        let vp: Vec<f64> = (0..C).map(|c| (0..C).map(|d| V[c][d] * p[d]).sum()).collect();
        let pvp: f64 = (0..C).map(|c| p[c] * vp[c]).sum();
        let pdiag: f64 = (0..C).map(|c| p[c] * V[c][c]).sum();
        for k in 0..C {
            s2[k * n + i] = -0.5 * p[k] * (V[k][k] - pdiag - 2.0 * vp[k] + 2.0 * pvp);
        }
    }

    dKs.iter()
        .map(|dK| {
            let mut explicit = 0.0;
            for i in 0..n {
                for k in 0..n {
                    explicit += (AAt[(i, k)] - R_sum[(i, k)]) * dK[(i, k)];
                }
            }
            explicit *= 0.5;
            // b = dK (y - pi) (= dK a at the mode); (I + K W)^{-1} b = b - K (K + W^{-1})^{-1} b.
            let b: Vec<Vec<f64>> = (0..C).map(|c| matvec(dK.as_ref(), &mode.a[c * n..(c + 1) * n])).collect();
            let eb: Vec<Vec<f64>> = (0..C).map(|c| matvec(mode.E[c].as_ref(), &b[c])).collect();
            let sum_eb: Vec<f64> = (0..n).map(|i| (0..C).map(|c| eb[c][i]).sum()).collect();
            let t = mode.M.solve_vec(&sum_eb);
            let mut implicit = 0.0;
            for c in 0..C {
                let et = matvec(mode.E[c].as_ref(), &t);
                let rb: Vec<f64> = (0..n).map(|i| eb[c][i] - et[i]).collect();
                let krb = matvec(K.as_ref(), &rb);
                implicit += (0..n).map(|i| s2[c * n + i] * (b[c][i] - krb[i])).sum::<f64>();
            }
            explicit + implicit
        })
        .collect()
}

/// log q(y | X, theta) and its gradient w.r.t. the kernel's log-parameters.
fn evidence_and_grad(kernel: &dyn Kernel, problem: &Problem, params: &LaplaceParams, warm: Option<&[f64]>) -> Result<(f64, Vec<f64>, Mode), FitError> {
    let K = kernel.gram(problem.x);
    let mode = find_mode(&K, problem.y, problem.n_classes, params, warm)?;
    let dKs = kernel.gram_grads(problem.x, &K);
    let grad = log_evidence_grad(&mode, &K, &dKs);
    Ok((mode.log_evidence, grad, mode))
}

impl Method for Laplace {
    fn name(&self) -> &'static str {
        "laplace"
    }

    fn supports(&self, shape: &ProblemShape, kernels: &KernelSet, _hyper: HyperPolicy) -> Result<(), String> {
        if !kernels.is_shared() {
            return Err("laplace: one kernel shared by all classes (prior I_C (x) K); per_class kernels are not supported".into());
        }
        if self.params.likelihood == LaplaceLikelihood::Probit && shape.n_classes != 2 {
            return Err(format!("laplace with likelihood: probit is the binary model: exactly 2 classes, the data have {}", shape.n_classes));
        }
        Ok(())
    }

    fn fit(&self, problem: &Problem, kernels: &KernelSet, hyper: HyperPolicy, ctx: &mut FitContext) -> Result<Box<dyn Fitted>, FitError> {
        self.supports(&problem.shape(), kernels, hyper).map_err(FitError::Unsupported)?;
        let kernel = kernels.class(0);
        match self.params.likelihood {
            LaplaceLikelihood::Logit => Ok(Box::new(self.fit_model(problem, kernel, hyper, ctx)?)),
            LaplaceLikelihood::Probit => Ok(Box::new(self.fit_probit(problem, kernel, hyper, ctx)?)),
        }
    }
}

/// Maximise an approximate log evidence over the kernel's free log-parameters by L-BFGS
/// (shared by both likelihoods). `evidence(kernel, warm)` returns the value, its gradient and
/// the mode, whose `warm_start` seeds the next evaluation's Newton iteration. Evaluations are
/// the outer iterations: each traces the best value so far as `log_evidence`, a budget ends the
/// search at the best point, and at scheduled checkpoints `model(kernel, mode)` of the best
/// point so far is scored. Records the optimiser's diagnostics.
fn learn_kernel<Mo: Clone + Send + Sync>(
    kernel: &dyn Kernel,
    max_iters: u64,
    ctx: &FitContext,
    diagnostics: &mut Diagnostics,
    evidence: impl Fn(&dyn Kernel, Option<&[f64]>) -> Result<(f64, Vec<f64>, Mo), FitError> + Sync,
    warm_start: impl Fn(&Mo) -> Vec<f64> + Sync,
    model: impl Fn(Box<dyn Kernel>, Mo) -> Box<dyn Fitted> + Sync,
) -> Result<Box<dyn Kernel>, FitError> {
    let evals = std::sync::atomic::AtomicU64::new(0);
    let best: std::sync::Mutex<Option<(f64, Box<dyn Kernel>, Option<Mo>)>> = std::sync::Mutex::new(None);
    let last_a: std::sync::Mutex<Option<Vec<f64>>> = std::sync::Mutex::new(None);
    let cost = |p: &[f64]| -> Result<(f64, Vec<f64>), FitError> {
        ctx.check_deadline()?;
        let done = evals.load(std::sync::atomic::Ordering::Relaxed);
        if let Some(stop) = ctx.budget_stop(done) {
            return Err(FitError::Stop(stop));
        }
        let warm = last_a.lock().expect("warm-start lock").clone();
        let k = kernel.with_log_params(p);
        let (v, g, mode) = evidence(k.as_ref(), warm.as_deref())?;
        *last_a.lock().expect("warm-start lock") = Some(warm_start(&mode));
        let iter = evals.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        // Trace the best evidence so far (line-search trial points would make it jagged).
        let mut best = best.lock().expect("best-point lock");
        if best.as_ref().is_none_or(|(b, _, _)| v > *b) {
            ctx.record(iter as usize - 1, &[("log_evidence", v)]);
            *best = Some((v, k, ctx.has_checkpoints().then_some(mode)));
        }
        let (b, bk, bm) = best.as_ref().expect("set above");
        ctx.checkpoint(iter, Some(*b), || Ok(model(bk.clone(), bm.clone().expect("kept with checkpoints"))))?;
        Ok((-v, g.iter().map(|x| -x).collect()))
    };
    let min = minimize_lbfgs(&cost, &kernel.log_params(), &kernel.free_mask(), max_iters, 1e-10)?;
    diagnostics.iterations = Some(evals.into_inner());
    diagnostics.stop_reason = Some(min.stopped_by.unwrap_or(if min.iterations >= max_iters { StopReason::MaxIterations } else { StopReason::Converged }));
    diagnostics.number("hyper_iterations", min.iterations as f64).number("hyper_evaluations", min.evaluations as f64);
    diagnostics.note("hyper_stop_reason", min.stop_reason);
    Ok(kernel.with_log_params(&min.x))
}

impl Laplace {
    /// `Method::fit` with the concrete model type, for `likelihood: logit` (`fit_probit` is
    /// the probit one).
    pub fn fit_model(&self, problem: &Problem, kernel: &dyn Kernel, hyper: HyperPolicy, ctx: &mut FitContext) -> Result<LaplaceModel, FitError> {
        assert_eq!(problem.x.nrows(), problem.y.len());
        if self.params.likelihood != LaplaceLikelihood::Logit {
            return Err(FitError::Unsupported("laplace: fit_model is the logit path; settings.likelihood is probit".into()));
        }
        let mut diagnostics = Diagnostics::default();
        let model = |kernel: Box<dyn Kernel>, mode: Mode| -> Box<dyn Fitted> {
            Box::new(LaplaceModel { kernel, x_train: problem.x.clone(), mode, mc_samples: self.params.mc_samples, diagnostics: Diagnostics::default() })
        };
        let kernel = match hyper {
            HyperPolicy::Fixed => kernel.clone_box(),
            HyperPolicy::Learn => learn_kernel(
                kernel,
                self.params.max_hyper_iters,
                ctx,
                &mut diagnostics,
                |k, warm| evidence_and_grad(k, problem, &self.params, warm),
                |mode| mode.a.clone(),
                model,
            )?,
        };
        ctx.check_deadline()?;
        let K = kernel.gram(problem.x);
        let mode = find_mode(&K, problem.y, problem.n_classes, &self.params, None)?;
        diagnostics.number("newton_iterations", mode.newton_iters as f64);
        Ok(LaplaceModel { kernel, x_train: problem.x.clone(), mode, mc_samples: self.params.mc_samples, diagnostics })
    }
}

/// A fitted Laplace model.
pub struct LaplaceModel {
    kernel: Box<dyn Kernel>,
    x_train: Array2<f64>,
    mode: Mode,
    mc_samples: usize,
    diagnostics: Diagnostics,
}

impl LaplaceModel {
    /// Predictive latent means [m, C] and covariances (m of [C, C]) at test inputs (GPML Alg. 3.4 / eq. 3.43).
    pub fn latent_predictive(&self, x: &Array2<f64>) -> (Vec<Vec<f64>>, Vec<Mat<f64>>) {
        let (n, C) = (self.mode.n, self.mode.n_classes);
        let m = x.nrows();
        let Ks = self.kernel.cross(&self.x_train, x); // [n, m]
        let kss = self.kernel.diag(x);
        let EK: Vec<Mat<f64>> = self.mode.E.iter().map(|e| e * &Ks).collect();
        let HM: Vec<Mat<f64>> = EK.iter().map(|ek| self.mode.M.solve_l(ek.as_ref())).collect();
        let mut means = Vec::with_capacity(m);
        let mut covs = Vec::with_capacity(m);
        for j in 0..m {
            // mu_c = k*^T (y_c - pi_c) = k*^T a_c at the mode.
            means.push((0..C).map(|c| (0..n).map(|i| Ks[(i, j)] * self.mode.a[c * n + i]).sum()).collect());
            let mut S = Mat::<f64>::zeros(C, C);
            for c in 0..C {
                for d in 0..=c {
                    let mut v: f64 = (0..n).map(|r| HM[c][(r, j)] * HM[d][(r, j)]).sum();
                    if c == d {
                        v += kss[j] - (0..n).map(|i| Ks[(i, j)] * EK[c][(i, j)]).sum::<f64>();
                    }
                    S[(c, d)] = v;
                    S[(d, c)] = v;
                }
            }
            covs.push(S);
        }
        (means, covs)
    }

    /// The posterior mode f-hat, class-major [C n].
    pub fn mode(&self) -> &[f64] {
        &self.mode.f
    }

    /// Psi(f-hat): the unnormalised log posterior at the mode.
    pub fn log_posterior_at_mode(&self) -> f64 {
        self.mode.psi
    }
}

impl Fitted for LaplaceModel {
    fn predict(&self, x: &Array2<f64>, rng: &mut Pcg64) -> Result<Prediction, FitError> {
        let C = self.mode.n_classes;
        // One antithetic set of standard-normal draws serves every test point.
        let half = self.mc_samples.div_ceil(2);
        let mut z = Vec::with_capacity(2 * half);
        for _ in 0..half {
            let v: Vec<f64> = (0..C).map(|_| rng.sample::<f64, _>(StandardNormal)).collect();
            z.push(v.iter().map(|x| -x).collect());
            z.push(v);
        }
        let (means, covs) = self.latent_predictive(x);
        let mut out = Array2::zeros((x.nrows(), C));
        for (j, (mu, S)) in means.iter().zip(&covs).enumerate() {
            let L = Chol::factor_with_jitter(S.as_ref(), "predictive latent covariance")?;
            let p = Softmax.predictive_probs(mu, L.l(), &z);
            for c in 0..C {
                out[(j, c)] = p[c];
            }
        }
        Ok(Prediction::new(out))
    }

    fn evidence(&self) -> Option<Evidence> {
        Some(Evidence::new(self.mode.log_evidence, EvidenceKind::Approximation))
    }

    fn kernels(&self) -> KernelSet {
        KernelSet::shared(self.kernel.clone())
    }

    fn diagnostics(&self) -> Diagnostics {
        self.diagnostics.clone()
    }

    /// `log_evidence_blockdiag_det` (diagnostic): the approximation with log|I + W^1/2 K W^1/2|
    /// replaced by sum_c log|I + D_c^1/2 K D_c^1/2|, i.e. W = D - Pi Pi^T taken as its diagonal
    /// part D = diag(pi) in the determinant (dropping the 1/2 log|sum_c E_c| term).
    fn extra_metrics(&self) -> BTreeMap<String, f64> {
        let mut m = BTreeMap::new();
        m.insert("log_evidence_blockdiag_det".into(), self.mode.log_evidence + 0.5 * self.mode.M.log_det());
        m
    }
}

/// I_C (x) K as a dense matrix (tests only).
#[cfg(test)]
fn dense_block_diag(K: faer::MatRef<'_, f64>, C: usize) -> Mat<f64> {
    let n = K.nrows();
    Mat::from_fn(n * C, n * C, |i, j| if i / n == j / n { K[(i % n, j % n)] } else { 0.0 })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::{KernelParams, LengthScale, SqExp};
    use crate::methods::optimize::minimize_lbfgs;
    use rand::SeedableRng;

    /// A tiny 3-class problem: clusters in 2-D.
    fn tiny(n_per: usize, seed: u64) -> (Array2<f64>, Vec<usize>) {
        let mut rng = Pcg64::seed_from_u64(seed);
        let centres = [[0.0, 0.0], [1.5, 0.5], [0.2, 1.6]];
        let mut x = Array2::zeros((3 * n_per, 2));
        let mut y = Vec::new();
        for c in 0..3 {
            for k in 0..n_per {
                let i = c * n_per + k;
                x[(i, 0)] = centres[c][0] + 0.6 * rng.sample::<f64, _>(StandardNormal);
                x[(i, 1)] = centres[c][1] + 0.6 * rng.sample::<f64, _>(StandardNormal);
                y.push(c);
            }
        }
        (x, y)
    }

    fn kernel(ard: bool, ls: f64, var: f64) -> SqExp {
        KernelParams { ard, lengthscale: LengthScale::One(ls), variance: var, learn_variance: true, ..Default::default() }.build(2).unwrap()
    }

    #[test]
    fn evidence_gradient_matches_finite_differences() {
        let (x, y) = tiny(5, 1);
        let problem = Problem { x: &x, y: &y, n_classes: 3 };
        let params = LaplaceParams { newton_tol: 1e-14, max_newton_iters: 200, ..Default::default() };
        for (ard, ls, var) in [(false, 0.8, 2.0), (true, 1.3, 5.0)] {
            let mut kern = kernel(ard, ls, var);
            if ard {
                kern.log_lengthscales[1] += 0.4;
            }
            let (_, grad, _) = evidence_and_grad(&kern, &problem, &params, None).unwrap();
            let p0 = kern.log_params();
            for j in 0..p0.len() {
                let h = 1e-5;
                let mut pp = p0.clone();
                pp[j] += h;
                let mut pm = p0.clone();
                pm[j] -= h;
                let vp = evidence_and_grad(&kern.with_log_params(&pp), &problem, &params, None).unwrap().0;
                let vm = evidence_and_grad(&kern.with_log_params(&pm), &problem, &params, None).unwrap().0;
                let fd = (vp - vm) / (2.0 * h);
                assert!((fd - grad[j]).abs() < 1e-6 * (1.0 + fd.abs()), "ard={ard} param {j}: analytic {} vs fd {fd}", grad[j]);
            }
        }
    }

    #[test]
    fn mode_and_evidence_match_a_dense_independent_computation() {
        let (x, y) = tiny(4, 2);
        let n = x.nrows();
        let C = 3;
        let kern = kernel(false, 1.0, 3.0);
        let K = kern.gram(&x);
        let params = LaplaceParams { newton_tol: 1e-14, ..Default::default() };
        let mode = find_mode(&K, &y, C, &params, None).unwrap();

        // The exact mode of Psi(f) = -1/2 f^T Kbig^{-1} f + sum log softmax, found by a generic
        // optimiser on the dense nC-dimensional problem.
        let Kbig = dense_block_diag(K.as_ref(), C);
        let Kchol = Chol::factor(Kbig.as_ref(), "Kbig").unwrap();
        let neg_psi = |f: &[f64]| -> Result<(f64, Vec<f64>), FitError> {
            let kinv_f = Kchol.solve_vec(f);
            let mut v = 0.5 * f.iter().zip(&kinv_f).map(|(a, b)| a * b).sum::<f64>();
            let mut g = kinv_f.clone();
            for i in 0..n {
                let fi: Vec<f64> = (0..C).map(|c| f[c * n + i]).collect();
                v -= Softmax.log_prob(&fi, y[i]);
                let gi = Softmax.grad(&fi, y[i]);
                for c in 0..C {
                    g[c * n + i] -= gi[c];
                }
            }
            Ok((v, g))
        };
        let opt = minimize_lbfgs(&neg_psi, &vec![0.0; n * C], &vec![true; n * C], 2000, 1e-10).unwrap();
        for k in 0..n * C {
            assert!((opt.x[k] - mode.f[k]).abs() < 1e-4, "mode entry {k}: {} vs {}", opt.x[k], mode.f[k]);
        }
        assert!((-opt.value - mode.psi).abs() < 1e-8);

        // log q = Psi - 1/2 (log |Kbig| + log |Kbig^{-1} + W|), W block diagonal per datum.
        let Kinv = Kchol.solve(Mat::<f64>::identity(n * C, n * C).as_ref());
        let mut A = Kinv.clone();
        for i in 0..n {
            let fi: Vec<f64> = (0..C).map(|c| mode.f[c * n + i]).collect();
            let W = Softmax.neg_hessian(&fi);
            for c in 0..C {
                for d in 0..C {
                    A[(c * n + i, d * n + i)] += W[c][d];
                }
            }
        }
        let logdet = Kchol.log_det() + Chol::factor(A.as_ref(), "A").unwrap().log_det();
        let want = mode.psi - 0.5 * logdet;
        assert!((mode.log_evidence - want).abs() < 1e-7, "{} vs {want}", mode.log_evidence);
    }

    #[test]
    fn predictions_match_brute_force_monte_carlo_over_the_joint_posterior() {
        let (x, y) = tiny(4, 3);
        let n = x.nrows();
        let C = 3;
        let kern = kernel(false, 1.0, 3.0);
        let mut rng = Pcg64::seed_from_u64(9);
        let mut ctx = FitContext::new(&mut rng, None);
        let method = LaplaceParams { mc_samples: 20000, ..Default::default() }.check().unwrap();
        let model = method.fit_model(&Problem { x: &x, y: &y, n_classes: C }, &kern, HyperPolicy::Fixed, &mut ctx).unwrap();
        let xt = ndarray::array![[0.1, 0.2], [1.0, 1.0], [3.0, -2.0]];
        let mut rng2 = Pcg64::seed_from_u64(10);
        let p = model.predict_proba(&xt, &mut rng2).unwrap();

        // Brute force: draw f ~ N(f-hat, (Kbig^{-1} + W)^{-1}) densely, then f* | f from the GP
        // conditional, and average the softmax.
        let K = kern.gram(&x);
        let Kbig = dense_block_diag(K.as_ref(), C);
        let Kchol = Chol::factor_with_jitter(Kbig.as_ref(), "Kbig").unwrap();
        let mut A = Kchol.solve(Mat::<f64>::identity(n * C, n * C).as_ref());
        for i in 0..n {
            let fi: Vec<f64> = (0..C).map(|c| model.mode.f[c * n + i]).collect();
            let W = Softmax.neg_hessian(&fi);
            for c in 0..C {
                for d in 0..C {
                    A[(c * n + i, d * n + i)] += W[c][d];
                }
            }
        }
        let post_cov = Chol::factor(A.as_ref(), "A").unwrap().solve(Mat::<f64>::identity(n * C, n * C).as_ref());
        let post_chol = Chol::factor_with_jitter(post_cov.as_ref(), "post").unwrap();
        let Kchol_small = Chol::factor_with_jitter(K.as_ref(), "K").unwrap();
        let Ks = kern.cross(&x, &xt);
        let kinv_ks = Kchol_small.solve(Ks.as_ref()); // [n, m]
        let mut rng3 = Pcg64::seed_from_u64(11);
        let draws = 40000;
        let mut acc = vec![vec![0.0; C]; xt.nrows()];
        for _ in 0..draws {
            let z: Vec<f64> = (0..n * C).map(|_| rng3.sample::<f64, _>(StandardNormal)).collect();
            let lz = matvec(post_chol.l(), &z);
            let f: Vec<f64> = (0..n * C).map(|k| model.mode.f[k] + lz[k]).collect();
            for j in 0..xt.nrows() {
                let cond_var = kern.diag(&xt)[j] - (0..n).map(|i| Ks[(i, j)] * kinv_ks[(i, j)]).sum::<f64>();
                let fs: Vec<f64> = (0..C)
                    .map(|c| {
                        let mean: f64 = (0..n).map(|i| kinv_ks[(i, j)] * f[c * n + i]).sum();
                        mean + cond_var.max(0.0).sqrt() * rng3.sample::<f64, _>(StandardNormal)
                    })
                    .collect();
                for (c, pc) in Softmax.probs(&fs).iter().enumerate() {
                    acc[j][c] += pc / draws as f64;
                }
            }
        }
        for j in 0..xt.nrows() {
            assert!((p.row(j).sum() - 1.0).abs() < 1e-12);
            for c in 0..C {
                // Two independent MC estimates (20000 and 40000 draws): 0.01 is > 5 standard errors.
                assert!((p[(j, c)] - acc[j][c]).abs() < 0.01, "point {j} class {c}: {} vs {}", p[(j, c)], acc[j][c]);
            }
        }
    }

    #[test]
    fn a_warm_start_finds_the_same_mode() {
        let (x, y) = tiny(5, 5);
        let params = LaplaceParams { newton_tol: 1e-14, ..Default::default() };
        let near = find_mode(&kernel(false, 0.7, 2.0).gram(&x), &y, 3, &params, None).unwrap();
        let K = kernel(false, 1.0, 3.0).gram(&x);
        let cold = find_mode(&K, &y, 3, &params, None).unwrap();
        let warm = find_mode(&K, &y, 3, &params, Some(&near.a)).unwrap();
        for (a, b) in warm.f.iter().zip(&cold.f) {
            assert!((a - b).abs() < 1e-6);
        }
        assert!((warm.log_evidence - cold.log_evidence).abs() < 1e-9);
    }

    #[test]
    fn learning_hyperparameters_raises_the_evidence() {
        let (x, y) = tiny(6, 4);
        let problem = Problem { x: &x, y: &y, n_classes: 3 };
        let start = kernel(true, 3.0, 0.5);
        let method = LaplaceParams::default().check().unwrap();
        let mut rng = Pcg64::seed_from_u64(1);
        let mut ctx = FitContext::new(&mut rng, None);
        let start = KernelSet::shared_se(&start);
        let fixed = method.fit(&problem, &start, HyperPolicy::Fixed, &mut ctx).unwrap();
        let learned = method.fit(&problem, &start, HyperPolicy::Learn, &mut ctx).unwrap();
        assert!(learned.evidence().unwrap().value > fixed.evidence().unwrap().value + 1e-3);
        assert!(!ctx.trace().is_empty());
    }
}
