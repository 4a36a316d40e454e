//! Exact inference for the multinomial-probit GP by two-block Gibbs sampling (Girolami &
//! Rogers 2006, §4.1 and App. D; notes/girolami-rogers2006.md §5.1).
//!
//! Model: m_k ~ GP(0, C) for k = 1..K (one kernel shared by the classes), y_nk = m_nk + eps,
//! eps ~ N(0, 1), t_n = argmax_k y_nk. The two blocks are
//!   y_n | m_n ~ N(m_n, I) truncated to the cone {y_{t_n} > y_j for all j},
//!   m_k | y_k ~ N(Sigma y_k, Sigma),  Sigma = C (I + C)^{-1}.
//! With C = U diag(lambda) U^T (one eigendecomposition), Sigma = U diag(lambda/(1+lambda)) U^T,
//! so a draw of every m_k costs O(N^2) per class and sweep; C itself is never inverted.
//!
//! The cone draw is exact (notes §5.1, recommended method; no naive rejection): first the
//! winner y_{n,t} from its log-concave marginal phi(y - m_t) prod_{j != t} Phi(y - m_j), by
//! rejection from a unit-variance Gaussian under the tangent parabola at a point near the
//! mode (valid because the log-density has curvature <= -1; acceptance >= 1/sqrt(K) near
//! the mode, whatever P(t | m) is), then every other y_nj from N(m_nj, 1) truncated above at
//! y_{n,t} (Robert 1995 exponential rejection in the tail).
//!
//! For two classes the default is the paper's binary model (§4.4.1: one GP, P(t = 1 | m) =
//! Phi(m)), as in its Figure 3; `binary_model: multinomial` keeps two GPs.
//!
//! Predictions average, over the kept draws, the §3 predictive formula with the draw's
//! mu_k = y_k^T (I + C)^{-1} c_new and var = c - c_new^T (I + C)^{-1} c_new (notes §5.1
//! [DERIVED]: m_new integrated analytically). The marginal likelihood is the paper's
//! prior-sampling estimate (§6.2): log mean_s p(t | m^(s)), m^(s) from the GP prior, with its
//! delta-method Monte Carlo standard error. The one-dimensional expectations over u use an
//! adaptive Gauss-Hermite rule (fast path, checked against `likelihoods::probit`).
//!
//! Cost per sweep: N cone draws (O(K) each) and two [N, N] x [N, K] products; the one
//! O(N^3) step is the eigendecomposition. Prediction: K 1-D integrals per test point and
//! predictive draw (`predict_thin` thins the draws used).
#![allow(non_snake_case)]
use crate::likelihoods::probit::BinaryModel;
use super::{parse_settings, Diagnostics, Evidence, FitContext, FitError, Fitted, HyperPolicy, Method, Prediction, Problem, ProblemShape};
use crate::kernels::{KernelSet, SqExp};
use crate::linalg::log_sum_exp;
use crate::results::{EvidenceKind, Handoff};
use crate::special::{d_log_normal_cdf, log_normal_cdf, normal_cdf};
use faer::{Mat, Side};
use ndarray::Array2;
use rand::RngExt;
use rand_distr::StandardNormal;
use rand_pcg::Pcg64;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Instant;

/// Version of this method's numbers, part of every cell key: bump it when a change of the code
/// (here or in shared numerics it uses) changes any number the method computes, so stored cells
/// are recomputed. `tests/numerics_versions.rs` fails when the output changes without a bump.
pub const NUMERICS_VERSION: u32 = 1;

/// Settings as written in a spec (`method: gibbs_mnp`, `settings: {...}`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GibbsMnpParams {
    /// Sweeps discarded before keeping samples (paper §6.2: 2000).
    #[serde(default = "default_burn_in")]
    pub burn_in: usize,
    /// Samples kept after burn-in (paper §6.2: 1000).
    #[serde(default = "default_samples")]
    pub samples: usize,
    /// Sweeps between kept samples (1 = keep every sweep after burn-in, as in the paper).
    #[serde(default = "one")]
    pub thin: usize,
    /// GP-prior draws for the marginal-likelihood estimate (paper §6.2: 1000); 0 = none.
    #[serde(default = "default_evidence_samples")]
    pub evidence_samples: usize,
    /// Record the trace `log_lik` = sum_n log P(t_n | m_n) of the current draw every this many
    /// sweeps (0 = never). (Its integrated autocorrelation time over every 10th kept draw is
    /// always computed and goes into the diagnostics as `log_lik_autocorr_time_x10`.)
    #[serde(default = "default_trace_every")]
    pub trace_every: usize,
    /// Use every this many kept draws for the predictive probabilities (1 = all, as the paper).
    #[serde(default = "one")]
    pub predict_thin: usize,
    /// Two classes: `probit` (one GP, P(t=1|m) = Phi(m), the paper's binary model) or
    /// `multinomial` (two GPs, the K = 2 multinomial probit).
    #[serde(default)]
    pub binary_model: BinaryModel,
}

fn default_burn_in() -> usize {
    2000
}
fn default_samples() -> usize {
    1000
}
fn one() -> usize {
    1
}
fn default_evidence_samples() -> usize {
    1000
}
fn default_trace_every() -> usize {
    100
}

impl Default for GibbsMnpParams {
    fn default() -> Self {
        parse_settings(&serde_json::Value::Null).expect("defaults parse")
    }
}

impl GibbsMnpParams {
    /// Check every rule; the error names the setting.
    pub fn check(self) -> Result<GibbsMnp, String> {
        if self.samples == 0 {
            return Err("settings.samples must be at least 1".into());
        }
        if self.thin == 0 {
            return Err("settings.thin must be at least 1".into());
        }
        if self.predict_thin == 0 || self.predict_thin > self.samples {
            return Err(format!("settings.predict_thin must be in 1..=samples ({}), got {}", self.samples, self.predict_thin));
        }
        if self.evidence_samples == 1 {
            return Err("settings.evidence_samples must be 0 (no estimate) or at least 2".into());
        }
        Ok(GibbsMnp { params: self })
    }
}

/// The checked method.
#[derive(Clone, Debug)]
pub struct GibbsMnp {
    params: GibbsMnpParams,
}

impl Method for GibbsMnp {
    fn name(&self) -> &'static str {
        "gibbs_mnp"
    }

    fn supports(&self, shape: &ProblemShape, kernels: &KernelSet, hyper: HyperPolicy) -> Result<(), String> {
        if hyper == HyperPolicy::Learn {
            return Err("gibbs_mnp samples with fixed hyper-parameters only (use hyper: fixed or hyper: {from: <entry>})".into());
        }
        if shape.n_classes < 2 {
            return Err(format!("gibbs_mnp needs at least 2 classes, got {}", shape.n_classes));
        }
        super::shared_sqexp(kernels, "gibbs_mnp").map(|_| ())
    }

    fn fit(&self, problem: &Problem, kernels: &KernelSet, hyper: HyperPolicy, ctx: &mut FitContext) -> Result<Box<dyn Fitted>, FitError> {
        let kernel = super::shared_sqexp(kernels, "gibbs_mnp").map_err(FitError::Unsupported)?;
        Ok(Box::new(self.fit_model(problem, kernel, hyper, ctx)?))
    }
}

// ---------------------------------------------------------------------------------------------
// Exact draws from truncated Gaussians.

/// z ~ N(0, 1) truncated to (b, inf): plain rejection for b < 0.45 (acceptance >= 0.33),
/// else Robert (1995) with an Exp(lambda) proposal shifted to b (acceptance >= 0.76).
pub(crate) fn sample_std_normal_above(b: f64, rng: &mut Pcg64) -> f64 {
    if b.is_nan() {
        return f64::NAN;
    }
    if b < 0.45 {
        loop {
            let z: f64 = rng.sample(StandardNormal);
            if z > b {
                return z;
            }
        }
    }
    let lambda = 0.5 * (b + (b * b + 4.0).sqrt());
    loop {
        let u: f64 = rng.random();
        // 1 - u lies in (0, 1]: ln is finite.
        let z = b - (1.0 - u).ln() / lambda;
        let v: f64 = rng.random();
        if v < (-0.5 * (z - lambda) * (z - lambda)).exp() {
            return z;
        }
    }
}

/// h(y) of `winner_log_density` without the derivatives (the rejection step's test).
fn winner_log_density_only(y: f64, m: &[f64], t: usize) -> f64 {
    let d = y - m[t];
    let mut h = -0.5 * d * d;
    for (j, &mj) in m.iter().enumerate() {
        if j != t {
            h += log_normal_cdf(y - mj);
        }
    }
    h
}

/// log of the winner's unnormalised marginal density, h(y) = log phi(y - m_t) + sum_{j != t}
/// log Phi(y - m_j) (up to a constant), and its first two derivatives.
fn winner_log_density(y: f64, m: &[f64], t: usize) -> (f64, f64, f64) {
    let d = y - m[t];
    let (mut h, mut dh, mut d2h) = (-0.5 * d * d, -d, -1.0);
    for (j, &mj) in m.iter().enumerate() {
        if j != t {
            let x = y - mj;
            let r = d_log_normal_cdf(x);
            h += log_normal_cdf(x);
            dh += r;
            // d/dx [phi/Phi] = -r (x + r), in (-1, 0).
            d2h -= r * (x + r);
        }
    }
    (h, dh, d2h)
}

/// The mode of h (strictly concave, h'' in [-K, -1]): Newton safeguarded by a bracket
/// (h'(m_t) > 0 and h'' <= -1 give [m_t, m_t + h'(m_t)]), stopping once |h'(y)| < tol (1 + |y|).
/// The sampler needs only a point near the mode (its tangent-parabola envelope is exact anywhere).
fn winner_mode_tol(m: &[f64], t: usize, tol: f64) -> f64 {
    let (_, d0, _) = winner_log_density(m[t], m, t);
    let (mut lo, mut hi) = (m[t], m[t] + d0.max(0.0));
    let mut y = 0.5 * (lo + hi);
    for _ in 0..100 {
        let (_, dh, d2h) = winner_log_density(y, m, t);
        if dh.abs() < tol * (1.0 + y.abs()) {
            break;
        }
        if dh > 0.0 {
            lo = y;
        } else {
            hi = y;
        }
        let newton = y - dh / d2h;
        y = if newton > lo && newton < hi { newton } else { 0.5 * (lo + hi) };
        if hi - lo < 1e-14 * (1.0 + y.abs()) {
            break;
        }
    }
    y
}

/// One exact draw of y ~ N(m, I) truncated to the cone where component t is the largest
/// (notes §5.1 recommended method). Returns the number of proposals the winner needed.
pub(crate) fn sample_cone(m: &[f64], t: usize, y: &mut [f64], rng: &mut Pcg64) -> usize {
    // Because h'' <= -1 everywhere, at any point y0 the tangent parabola bounds h:
    //   h(y) <= h(y0) + h'(y0) (y - y0) - (y - y0)^2 / 2 = const - (y - c)^2 / 2,  c = y0 + h'(y0),
    // so N(c, 1) dominates exp(h) and rejection against it is exact for every y0. Near the
    // mode the acceptance is >= 1/sqrt(K) (h'' >= -K); a loose mode (|h'| < 0.01) is enough.
    let y0 = winner_mode_tol(m, t, 1e-2);
    let (h0, dh0, _) = winner_log_density(y0, m, t);
    let c = y0 + dh0;
    let mut proposals = 0;
    let winner = loop {
        proposals += 1;
        let z: f64 = rng.sample(StandardNormal);
        let cand = c + z;
        let d = cand - y0;
        let bound = h0 + dh0 * d - 0.5 * d * d;
        let log_acc = winner_log_density_only(cand, m, t) - bound;
        let u: f64 = rng.random();
        if u.ln() < log_acc {
            break cand;
        }
    };
    for (j, yj) in y.iter_mut().enumerate() {
        *yj = if j == t {
            winner
        } else {
            // y_j - m_j = -z with z > m_j - winner.
            m[j] - sample_std_normal_above(m[j] - winner, rng)
        };
    }
    proposals
}

// ---------------------------------------------------------------------------------------------
// The likelihood and predictive probabilities of the probit model.

/// log P(t | m) for one datum: multinomial probit (K-vector m) or binary probit (m = [f]).
fn log_lik_point(m: &[f64], t: usize, binary: bool) -> f64 {
    if binary {
        log_normal_cdf(if t == 1 { m[0] } else { -m[0] })
    } else {
        crate::likelihoods::probit::log_probit_class_prob_fast(m, t)
    }
}

/// Class probabilities for latent means `mu` (K, or 1 in the binary model) and a predictive
/// variance `var` shared by the classes (shared kernel): the §3 formula with v_k = v for all
/// k is P(t = k | mu / v) with v = sqrt(1 + var).
fn predictive_point(mu: &[f64], var: f64, binary: bool, out: &mut [f64]) {
    let v = (1.0 + var).sqrt();
    if binary {
        let p1 = normal_cdf(mu[0] / v);
        out[0] = 1.0 - p1;
        out[1] = p1;
    } else {
        let scaled: Vec<f64> = mu.iter().map(|x| x / v).collect();
        let mut total = 0.0;
        for (k, o) in out.iter_mut().enumerate() {
            *o = crate::likelihoods::probit::log_probit_class_prob_fast(&scaled, k).exp();
            total += *o;
        }
        // The cones partition R^K: the exact values sum to one.
        out.iter_mut().for_each(|o| *o /= total);
    }
}

// ---------------------------------------------------------------------------------------------
// The sampler.

/// The eigendecomposition C = U diag(lambda) U^T of the training kernel matrix.
struct Eigen {
    U: Mat<f64>,
    /// Eigenvalues clipped at 0 (rounding makes the smallest slightly negative).
    lambda: Vec<f64>,
    n_clipped: usize,
}

fn eigen(C: &Mat<f64>) -> Result<Eigen, FitError> {
    let evd = C.self_adjoint_eigen(Side::Lower).map_err(|e| FitError::Numerical(format!("eigendecomposition of C failed: {e:?}")))?;
    let s = evd.S().column_vector();
    let n = C.nrows();
    let mut n_clipped = 0;
    let lambda = (0..n)
        .map(|i| {
            let l = s[i];
            if l < 0.0 {
                n_clipped += 1;
                0.0
            } else {
                l
            }
        })
        .collect();
    if (0..n).any(|i| !s[i].is_finite()) {
        return Err(FitError::Numerical("kernel matrix has non-finite eigenvalues".into()));
    }
    Ok(Eigen { U: evd.U().to_owned(), lambda, n_clipped })
}

impl GibbsMnp {
    /// `Method::fit` with the concrete model type.
    pub fn fit_model(&self, problem: &Problem, kernel: &SqExp, hyper: HyperPolicy, ctx: &mut FitContext) -> Result<GibbsMnpModel, FitError> {
        if hyper == HyperPolicy::Learn {
            return Err(FitError::Unsupported(
                "gibbs_mnp samples with fixed hyper-parameters only (G&R 2006 App. D); use `hyper: fixed` or take them from another cell with `hyper: {from: <entry>}`".into(),
            ));
        }
        let p = &self.params;
        let n = problem.x.nrows();
        let n_classes = problem.n_classes;
        if n_classes < 2 {
            return Err(FitError::Unsupported(format!("gibbs_mnp needs at least 2 classes, got {n_classes}")));
        }
        if let Some(&bad) = problem.y.iter().find(|&&t| t >= n_classes) {
            return Err(FitError::Numerical(format!("class index {bad} out of range for {n_classes} classes")));
        }
        let binary = n_classes == 2 && p.binary_model == BinaryModel::Probit;
        // Number of latent functions.
        let K = if binary { 1 } else { n_classes };
        let start = Instant::now();
        let C = kernel.gram(problem.x);
        let eig = eigen(&C)?;
        let U = &eig.U;
        let s: Vec<f64> = eig.lambda.iter().map(|l| l / (1.0 + l)).collect();
        let sqrt_s: Vec<f64> = s.iter().map(|v| v.sqrt()).collect();

        // State: M and Y, [n, K] (column k = latent function k).
        let mut M = Mat::<f64>::zeros(n, K);
        let mut Y = Mat::<f64>::zeros(n, K);
        let mut B = Mat::<f64>::zeros(n, K);
        let mut m_row = vec![0.0; K];
        let mut y_row = vec![0.0; K];
        let total = p.burn_in + p.samples * p.thin;
        let mut kept_B: Vec<Mat<f64>> = Vec::with_capacity(p.samples / p.predict_thin + 1);
        let mut n_kept = 0usize;
        let mut m_sum = Mat::<f64>::zeros(n, K);
        let mut proposals = 0usize;
        let mut kept_loglik = Vec::new();
        for sweep in 1..=total {
            ctx.check_deadline()?;
            // Block 1: y_n | m_n.
            for i in 0..n {
                let t = problem.y[i];
                if binary {
                    // y ~ N(m, 1) truncated to y > 0 (t = 1) or y < 0 (t = 0).
                    let mi = M[(i, 0)];
                    Y[(i, 0)] = if t == 1 { mi + sample_std_normal_above(-mi, ctx.rng) } else { mi - sample_std_normal_above(mi, ctx.rng) };
                    proposals += 1;
                } else {
                    for k in 0..K {
                        m_row[k] = M[(i, k)];
                    }
                    proposals += sample_cone(&m_row, t, &mut y_row, ctx.rng);
                    for k in 0..K {
                        Y[(i, k)] = y_row[k];
                    }
                }
            }
            // Block 2: m_k | y_k ~ N(Sigma y_k, Sigma) = U (s o U^T y_k + sqrt(s) o z).
            faer::linalg::matmul::matmul(B.as_mut(), faer::Accum::Replace, U.transpose(), Y.as_ref(), 1.0, faer::Par::Seq);
            let keep = sweep > p.burn_in && (sweep - p.burn_in) % p.thin == 0;
            if keep {
                n_kept += 1;
                if (n_kept - 1) % p.predict_thin == 0 {
                    kept_B.push(B.clone());
                }
            }
            for k in 0..K {
                for r in 0..n {
                    let z: f64 = ctx.rng.sample(StandardNormal);
                    B[(r, k)] = s[r] * B[(r, k)] + sqrt_s[r] * z;
                }
            }
            faer::linalg::matmul::matmul(M.as_mut(), faer::Accum::Replace, U.as_ref(), B.as_ref(), 1.0, faer::Par::Seq);
            if (0..K).any(|k| (0..n).any(|r| !M[(r, k)].is_finite())) {
                return Err(FitError::Numerical(format!("gibbs_mnp: non-finite latent draw at sweep {sweep}")));
            }
            if keep {
                m_sum += &M;
            }
            // The log-likelihood every 10 kept sweeps feeds the autocorrelation diagnostic;
            // the trace gets it every `trace_every` sweeps.
            let for_autocorr = keep && n_kept % 10 == 0;
            let for_trace = p.trace_every > 0 && sweep % p.trace_every == 0;
            if for_autocorr || for_trace {
                let ll = log_lik(&M, problem.y, binary);
                if for_autocorr {
                    kept_loglik.push(ll);
                }
                if for_trace {
                    ctx.record(sweep, &[("log_lik", ll)]);
                }
            }
        }
        let sample_seconds = start.elapsed().as_secs_f64();

        // Marginal likelihood: prior draws m_k = U sqrt(lambda) o z (exact for the clipped C).
        let evidence_start = Instant::now();
        let evidence = if p.evidence_samples >= 2 {
            let sqrt_l: Vec<f64> = eig.lambda.iter().map(|l| l.sqrt()).collect();
            let mut Z = Mat::<f64>::zeros(n, K);
            let mut Mp = Mat::<f64>::zeros(n, K);
            let mut ll = Vec::with_capacity(p.evidence_samples);
            for _ in 0..p.evidence_samples {
                ctx.check_deadline()?;
                for k in 0..K {
                    for r in 0..n {
                        let z: f64 = ctx.rng.sample(StandardNormal);
                        Z[(r, k)] = sqrt_l[r] * z;
                    }
                }
                faer::linalg::matmul::matmul(Mp.as_mut(), faer::Accum::Replace, U.as_ref(), Z.as_ref(), 1.0, faer::Par::Seq);
                ll.push(log_lik(&Mp, problem.y, binary));
            }
            Some(EvidenceEstimate::from_log_weights(&ll))
        } else {
            None
        };
        let evidence_seconds = evidence_start.elapsed().as_secs_f64();

        let m_mean = m_sum * faer::Scale(1.0 / n_kept as f64);
        let mut diagnostics = BTreeMap::new();
        diagnostics.insert("sweeps".into(), total.to_string());
        diagnostics.insert("burn_in".into(), p.burn_in.to_string());
        diagnostics.insert("kept_samples".into(), n_kept.to_string());
        diagnostics.insert("predictive_draws".into(), kept_B.len().to_string());
        diagnostics.insert("model".into(), if binary { "binary probit (one GP)".into() } else { format!("multinomial probit ({K} GPs)") });
        diagnostics.insert("sample_seconds".into(), format!("{sample_seconds:.3}"));
        diagnostics.insert("seconds_per_sweep".into(), format!("{:.3e}", sample_seconds / total as f64));
        diagnostics.insert("cone_proposals_per_draw".into(), format!("{:.4}", proposals as f64 / (total * n).max(1) as f64));
        diagnostics.insert("eigenvalues_clipped".into(), eig.n_clipped.to_string());
        if let Some(tau) = integrated_autocorr_time(&kept_loglik) {
            diagnostics.insert("log_lik_autocorr_time_x10".into(), format!("{tau:.2}"));
        }
        if let Some(e) = &evidence {
            diagnostics.insert("evidence_mc_se".into(), format!("{:.4}", e.std_err));
            diagnostics.insert("evidence_ess".into(), format!("{:.2}", e.ess));
            diagnostics.insert("evidence_samples".into(), p.evidence_samples.to_string());
            diagnostics.insert("evidence_seconds".into(), format!("{evidence_seconds:.3}"));
        }
        let inv1p: Vec<f64> = eig.lambda.iter().map(|l| 1.0 / (1.0 + l)).collect();
        Ok(GibbsMnpModel {
            kernel: kernel.clone(),
            x_train: problem.x.clone(),
            n_classes,
            binary,
            U: eig.U,
            inv1p,
            kept_B,
            m_mean,
            evidence,
            diagnostics,
        })
    }
}

/// sum_n log P(t_n | m_n) for latents M [n, K].
fn log_lik(M: &Mat<f64>, y: &[usize], binary: bool) -> f64 {
    let K = M.ncols();
    let mut row = vec![0.0; K];
    (0..M.nrows())
        .map(|i| {
            for (k, r) in row.iter_mut().enumerate() {
                *r = M[(i, k)];
            }
            log_lik_point(&row, y[i], binary)
        })
        .sum()
}

/// Geyer's initial-positive-sequence estimate of the integrated autocorrelation time.
fn integrated_autocorr_time(x: &[f64]) -> Option<f64> {
    let n = x.len();
    if n < 10 {
        return None;
    }
    let mean = x.iter().sum::<f64>() / n as f64;
    let c0 = x.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n as f64;
    if !(c0 > 0.0) {
        return None;
    }
    let rho = |lag: usize| (0..n - lag).map(|i| (x[i] - mean) * (x[i + lag] - mean)).sum::<f64>() / (n as f64 * c0);
    let mut tau = -1.0;
    let mut lag = 0;
    while lag + 1 < n / 2 {
        let pair = rho(lag) + rho(lag + 1);
        if pair <= 0.0 {
            break;
        }
        tau += 2.0 * pair;
        lag += 2;
    }
    Some(tau.max(1.0))
}

/// log p-hat(t | X) = log mean_s exp(l_s) from prior draws, with its delta-method standard
/// error and the effective sample size of the weights exp(l_s).
#[derive(Clone, Debug)]
pub struct EvidenceEstimate {
    pub log_evidence: f64,
    pub std_err: f64,
    pub ess: f64,
}

impl EvidenceEstimate {
    pub fn from_log_weights(l: &[f64]) -> Self {
        let S = l.len() as f64;
        let lse = log_sum_exp(l);
        let l2: Vec<f64> = l.iter().map(|v| 2.0 * v).collect();
        let lse2 = log_sum_exp(&l2);
        // Var(w)/mean(w)^2 = S sum w^2 / (sum w)^2 - 1 ; se(log p-hat) = sqrt(that / S).
        let ratio = (lse2 - 2.0 * lse + S.ln()).exp();
        let std_err = ((ratio - 1.0).max(0.0) / S).sqrt();
        EvidenceEstimate { log_evidence: lse - S.ln(), std_err, ess: (2.0 * lse - lse2).exp() }
    }
}

/// The fitted sampler: the kept draws, as B = U^T y (everything prediction needs).
pub struct GibbsMnpModel {
    kernel: SqExp,
    x_train: Array2<f64>,
    n_classes: usize,
    binary: bool,
    U: Mat<f64>,
    /// 1 / (1 + lambda_i).
    inv1p: Vec<f64>,
    /// U^T Y of each kept draw, [n, K].
    kept_B: Vec<Mat<f64>>,
    /// Posterior mean of M over the kept draws, [n, K].
    m_mean: Mat<f64>,
    evidence: Option<EvidenceEstimate>,
    diagnostics: BTreeMap<String, String>,
}

impl GibbsMnpModel {
    /// Per-draw predictive class probabilities [draw][test point][class] (tests and diagnostics).
    pub fn predict_per_draw(&self, x: &Array2<f64>) -> Vec<Array2<f64>> {
        let (W, var) = self.test_projection(x);
        let m = x.nrows();
        let K = self.kept_B[0].ncols();
        let mut mu_row = vec![0.0; K];
        let mut mu = Mat::<f64>::zeros(m, K);
        self.kept_B
            .iter()
            .map(|B| {
                faer::linalg::matmul::matmul(mu.as_mut(), faer::Accum::Replace, W.as_ref(), B.as_ref(), 1.0, faer::Par::Seq);
                let mut out = Array2::<f64>::zeros((m, self.n_classes));
                let mut probs = vec![0.0; self.n_classes];
                for i in 0..m {
                    for (k, v) in mu_row.iter_mut().enumerate() {
                        *v = mu[(i, k)];
                    }
                    predictive_point(&mu_row, var[i], self.binary, &mut probs);
                    for (c, p) in probs.iter().enumerate() {
                        out[[i, c]] = *p;
                    }
                }
                out
            })
            .collect()
    }

    /// W = C_* U diag(1/(1+lambda)) [m, n] (so mu = W B per draw) and the predictive latent
    /// variance c(x,x) - c_*^T (I + C)^{-1} c_* per test point.
    fn test_projection(&self, x: &Array2<f64>) -> (Mat<f64>, Vec<f64>) {
        let Cs = self.kernel.cross(x, &self.x_train);
        let diag = self.kernel.diag(x);
        let V = &Cs * &self.U;
        let n = self.inv1p.len();
        let W = Mat::from_fn(x.nrows(), n, |i, j| V[(i, j)] * self.inv1p[j]);
        let var = (0..x.nrows()).map(|i| (diag[i] - (0..n).map(|j| V[(i, j)] * V[(i, j)] * self.inv1p[j]).sum::<f64>()).max(0.0)).collect();
        (W, var)
    }

    /// Posterior mean of the latents at the training inputs, [n, K] class-major flattened.
    pub fn latent_mean(&self) -> Vec<f64> {
        let (n, K) = (self.m_mean.nrows(), self.m_mean.ncols());
        (0..K).flat_map(|k| (0..n).map(move |i| (k, i))).map(|(k, i)| self.m_mean[(i, k)]).collect()
    }

    pub fn evidence_estimate(&self) -> Option<&EvidenceEstimate> {
        self.evidence.as_ref()
    }
}

impl Fitted for GibbsMnpModel {
    fn predict(&self, x: &Array2<f64>, _rng: &mut Pcg64) -> Result<Prediction, FitError> {
        let draws = self.predict_per_draw(x);
        let mut mean = Array2::<f64>::zeros((x.nrows(), self.n_classes));
        for d in &draws {
            mean += d;
        }
        mean /= draws.len() as f64;
        if mean.iter().any(|v| !v.is_finite()) {
            return Err(FitError::Numerical("gibbs_mnp: non-finite predictive probability".into()));
        }
        Ok(Prediction::new(mean))
    }

    fn evidence(&self) -> Option<Evidence> {
        self.evidence.as_ref().map(|e| Evidence { value: e.log_evidence, kind: EvidenceKind::Estimate, std_err: Some(e.std_err) })
    }

    fn kernels(&self) -> KernelSet {
        KernelSet::shared(Box::new(self.kernel.clone()))
    }

    fn diagnostics(&self) -> Diagnostics {
        Diagnostics::from_texts(&self.diagnostics)
    }

    fn extra_metrics(&self) -> BTreeMap<String, f64> {
        let mut out = BTreeMap::new();
        if let Some(e) = &self.evidence {
            out.insert("evidence_ess".into(), e.ess);
        }
        out
    }

    fn handoff(&self) -> Handoff {
        let mut vectors = BTreeMap::new();
        vectors.insert("latent_mean".into(), self.latent_mean());
        Handoff { vectors, ..Handoff::of_kernels(&self.kernels()) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::methods::FromSettings;
    use crate::special::normal_pdf;
    use rand::SeedableRng;

    /// |mean - expected| <= 4.5 standard errors.
    fn assert_mean(xs: &[f64], expected: f64, what: &str) {
        let n = xs.len() as f64;
        let mean = xs.iter().sum::<f64>() / n;
        let sd = (xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt();
        assert!((mean - expected).abs() <= 4.5 * sd / n.sqrt(), "{what}: mean {mean} vs {expected} (se {})", sd / n.sqrt());
    }

    /// Kolmogorov-Smirnov distance between a sample and a CDF.
    fn ks(xs: &mut [f64], cdf: impl Fn(f64) -> f64) -> f64 {
        xs.sort_by(|a, b| a.total_cmp(b));
        let n = xs.len() as f64;
        xs.iter().enumerate().map(|(i, &x)| {
            let f = cdf(x);
            (f - i as f64 / n).abs().max((f - (i + 1) as f64 / n).abs())
        }).fold(0.0, f64::max)
    }

    #[test]
    fn one_sided_truncated_normal_matches_its_distribution() {
        let mut rng = Pcg64::seed_from_u64(1);
        let n = 40_000;
        // Both branches (plain rejection below 0.45, exponential rejection above), far tail included.
        for b in [-1.5, 0.0, 0.44, 0.46, 2.0, 8.0, 30.0] {
            let mut xs: Vec<f64> = (0..n).map(|_| sample_std_normal_above(b, &mut rng)).collect();
            assert!(xs.iter().all(|&x| x > b));
            // E[z | z > b] = phi(b) / Phi(-b) (inverse Mills ratio, tail-stable form).
            let mills = d_log_normal_cdf(-b);
            assert_mean(&xs, mills, &format!("b = {b}"));
            // Var = 1 + b r - r^2: check the second moment too.
            let second: Vec<f64> = xs.iter().map(|x| (x - mills).powi(2)).collect();
            assert_mean(&second, 1.0 + b * mills - mills * mills, &format!("b = {b} variance"));
            // Survival function Phi(-z) / Phi(-b) in log space; KS at the 0.1% level is 1.95/sqrt(n).
            let d = ks(&mut xs, |z| 1.0 - (log_normal_cdf(-z) - log_normal_cdf(-b)).exp());
            assert!(d < 1.95 / (n as f64).sqrt(), "b = {b}: KS distance {d}");
        }
    }

    /// E[y] of the cone-truncated N(m, I): reference values from notes §2.3 (56,001-point
    /// trapezoid rule, computed independently of this code). t is 0-based here.
    #[test]
    fn cone_draws_match_the_truncated_gaussian_means_from_the_notes() {
        let cases: [(&[f64], usize, &[f64]); 5] = [
            (&[0.0, 0.0, 0.0], 0, &[0.84628438, -0.42314219, -0.42314219]),
            (&[0.5, -0.2, 0.1], 0, &[1.12177135, -0.46069451, -0.26107685]),
            (&[0.5, -0.2, 0.1], 1, &[-0.13676735, 0.88207297, -0.34530562]),
            // Z = 1.8e-5: naive rejection from N(m, I) would need ~56,000 proposals per draw.
            (&[-3.0, 2.0, 1.0, 0.0], 0, &[0.55743251, 0.09490385, -0.12804553, -0.52429084]),
            // Z = 7.7e-9.
            (&[-4.0, 4.0], 0, &[0.11818845, -0.11818845]),
        ];
        let mut rng = Pcg64::seed_from_u64(2);
        let n = 40_000;
        for (m, t, expected) in cases {
            let mut draws = vec![Vec::with_capacity(n); m.len()];
            let mut y = vec![0.0; m.len()];
            let mut proposals = 0;
            for _ in 0..n {
                proposals += sample_cone(m, t, &mut y, &mut rng);
                assert!((0..m.len()).all(|j| j == t || y[j] < y[t]), "draw outside the cone");
                for (j, d) in draws.iter_mut().enumerate() {
                    d.push(y[j]);
                }
            }
            for (j, d) in draws.iter().enumerate() {
                assert_mean(d, expected[j], &format!("m = {m:?}, t = {t}, component {j}"));
            }
            // Acceptance >= 1/sqrt(K) is guaranteed (curvature of h in [-K, -1]).
            let per_draw = proposals as f64 / n as f64;
            assert!(per_draw <= (m.len() as f64).sqrt() * 1.05, "{per_draw} proposals per draw");
        }
    }

    /// The winner's marginal against its CDF by brute-force quadrature of
    /// phi(y - m_t) prod_j Phi(y - m_j) on a fine grid.
    #[test]
    fn cone_winner_marginal_passes_a_ks_test() {
        let m = [0.3, 1.5, -0.7, 1.0];
        let t = 2;
        let mut rng = Pcg64::seed_from_u64(3);
        let n = 40_000;
        let mut y = vec![0.0; 4];
        let mut xs: Vec<f64> = (0..n).map(|_| {
            sample_cone(&m, t, &mut y, &mut rng);
            y[t]
        }).collect();
        let (lo, step, nodes) = (-8.0, 1e-3, 20_001);
        let dens: Vec<f64> = (0..nodes).map(|i| {
            let v = lo + i as f64 * step;
            normal_pdf(v - m[t]) * (0..4).filter(|&j| j != t).map(|j| normal_cdf(v - m[j])).product::<f64>()
        }).collect();
        let mut cum = vec![0.0; nodes];
        for i in 1..nodes {
            cum[i] = cum[i - 1] + 0.5 * step * (dens[i] + dens[i - 1]);
        }
        let total = cum[nodes - 1];
        let cdf = |v: f64| {
            let pos = ((v - lo) / step).clamp(0.0, (nodes - 1) as f64);
            let i = (pos as usize).min(nodes - 2);
            let frac = pos - i as f64;
            (cum[i] * (1.0 - frac) + cum[i + 1] * frac) / total
        };
        let d = ks(&mut xs, cdf);
        assert!(d < 1.95 / (n as f64).sqrt(), "KS distance {d}");
        // And a sampler that drew the winner from N(m_t, 1) would fail this test.
        let mut wrong: Vec<f64> = (0..n).map(|_| m[t] + rng.sample::<f64, _>(StandardNormal)).collect();
        assert!(ks(&mut wrong, cdf) > 1.95 / (n as f64).sqrt());
    }

    #[test]
    fn eigen_form_of_sigma_matches_a_dense_solve() {
        let x = Array2::from_shape_fn((12, 2), |(i, j)| ((i * 7 + j * 3) % 11) as f64 / 4.0);
        let kernel = SqExp { log_variance: 1.5f64.ln(), log_lengthscales: vec![0.8f64.ln()], learn_variance: false };
        let C = kernel.gram(&x);
        let eig = eigen(&C).expect("eigen");
        let n = C.nrows();
        let S = Mat::from_fn(n, n, |i, j| (0..n).map(|r| eig.U[(i, r)] * eig.lambda[r] / (1.0 + eig.lambda[r]) * eig.U[(j, r)]).sum::<f64>());
        // Oracle: Sigma = C (I + C)^{-1} = (I + C)^{-1} C via a dense LU solve.
        let IpC = Mat::from_fn(n, n, |i, j| C[(i, j)] + if i == j { 1.0 } else { 0.0 });
        use faer::linalg::solvers::Solve;
        let dense = IpC.partial_piv_lu().solve(&C);
        let err = (0..n).flat_map(|i| (0..n).map(move |j| (i, j))).map(|(i, j)| (S[(i, j)] - dense[(i, j)]).abs()).fold(0.0, f64::max);
        assert!(err < 1e-12, "max |Sigma_eig - Sigma_dense| = {err}");
    }

    #[test]
    fn evidence_estimate_matches_known_weights() {
        // Equal weights: log p = l, se 0, ess = S.
        let e = EvidenceEstimate::from_log_weights(&[-3.0; 50]);
        assert!((e.log_evidence + 3.0).abs() < 1e-12 && e.std_err < 1e-7 && (e.ess - 50.0).abs() < 1e-9);
        // Weights (1, 3): mean 2, sd(w)/mean = 1/sqrt(2) * sqrt(2)/2... direct: se = sqrt((S sum w^2/(sum w)^2 - 1)/S).
        let e = EvidenceEstimate::from_log_weights(&[0.0, 3f64.ln()]);
        assert!((e.log_evidence - 2f64.ln()).abs() < 1e-12);
        let expected_se = ((2.0 * 10.0 / 16.0 - 1.0) / 2.0f64).sqrt();
        assert!((e.std_err - expected_se).abs() < 1e-12, "{}", e.std_err);
        assert!((e.ess - 16.0 / 10.0).abs() < 1e-12);
    }

    #[test]
    fn settings_are_checked_and_learning_is_refused() {
        assert!(GibbsMnpParams::from_settings(&serde_json::json!({"burnin": 3})).is_err());
        let msg = GibbsMnpParams::from_settings(&serde_json::json!({"samples": 0})).expect("parse").check().expect_err("0 samples");
        assert!(msg.contains("settings.samples"), "{msg}");
        let p = GibbsMnpParams::from_settings(&serde_json::json!({"binary_model": "multinomial"})).expect("parse");
        assert_eq!(p.binary_model, BinaryModel::Multinomial);
        let method = GibbsMnpParams::default().check().expect("defaults");
        let x = Array2::from_shape_fn((4, 1), |(i, _)| i as f64);
        let problem = Problem { x: &x, y: &[0, 1, 2, 0], n_classes: 3 };
        let kernel = SqExp { log_variance: 0.0, log_lengthscales: vec![0.0], learn_variance: false };
        let mut rng = Pcg64::seed_from_u64(0);
        let mut ctx = FitContext::new(&mut rng, None);
        match method.fit_model(&problem, &kernel, HyperPolicy::Learn, &mut ctx) {
            Err(FitError::Unsupported(msg)) => assert!(msg.contains("fixed hyper-parameters"), "{msg}"),
            Err(e) => panic!("wrong error {e}"),
            Ok(_) => panic!("learning must be refused"),
        }
    }

    #[test]
    fn fast_quadrature_matches_the_shared_probit_likelihood() {
        use crate::likelihoods::probit;
        let mut rng = Pcg64::seed_from_u64(9);
        let mut worst: f64 = 0.0;
        for case in 0..600 {
            let k = 2 + case % 5;
            let scale = [0.3, 1.0, 3.0, 8.0][case % 4];
            let m: Vec<f64> = (0..k).map(|_| scale * rng.sample::<f64, _>(StandardNormal)).collect();
            let t = case % k;
            let reference = probit::log_probit_class_prob(&m, t);
            let fast = crate::likelihoods::probit::log_probit_class_prob_fast(&m, t);
            let err = (fast - reference).abs() / reference.abs().max(1.0);
            worst = worst.max(err);
            assert!(err < 1e-6, "m = {m:?}, t = {t}: {fast} vs {reference}");
            // Predictive with a shared variance against the shared module's per-class form.
            let var = [0.0, 0.5, 3.0][case % 3];
            let mut out = vec![0.0; k];
            predictive_point(&m, var, false, &mut out);
            let reference = probit::predictive_class_probs(&m, &vec![var; k]);
            for (a, b) in out.iter().zip(&reference) {
                assert!((a - b).abs() < 1e-6, "predictive {out:?} vs {reference:?}");
            }
        }
        // Far tail (notes §2.3: m = (-4, 4), t = 1 has Z = 7.7086e-09; K = 2 closed form Phi(d / sqrt 2)).
        let d = -16.0;
        let exact = log_normal_cdf(d / std::f64::consts::SQRT_2);
        assert!((crate::likelihoods::probit::log_probit_class_prob_fast(&[0.0, -d], 0) - exact).abs() < 1e-6 * exact.abs(), "worst {worst}");
    }

    #[test]
    fn model_is_send_and_sync() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<GibbsMnp>();
        assert_send_sync::<GibbsMnpModel>();
    }
}

