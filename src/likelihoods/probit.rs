//! The multinomial probit likelihood of Girolami & Rogers (2006) and the one-dimensional
//! Gaussian expectations it needs (notes/girolami-rogers2006.md §1.5, §2.3, §3, §10.1).
//!
//! Every quantity is an integral over u ~ N(0, 1) of a log-concave integrand
//!     exp(h(u)),  h(u) = log phi(u) + sum_j log Phi(a_j u + b_j),
//! computed in log space by a mode-centred trapezoid rule: the mode u* of h is found by a
//! safeguarded Newton iteration (h'' <= -1, so h' is strictly decreasing), the window is
//! widened until h has dropped by `LOG_DROP` on both sides, and the node spacing is a
//! fraction of the narrowest local width 1 / sqrt(1 + sum_j a_j^2). For an analytic,
//! rapidly decaying integrand the trapezoid rule converges geometrically, and because the
//! rule follows the integrand it stays accurate far in the tails (𝒵 ~ 1e-30 and below),
//! where a fixed 20-node Gauss–Hermite rule is wrong in the first digit (notes §2.11).
use super::Likelihood;
use crate::special::{d_log_normal_cdf, log_normal_cdf, LN_SQRT_2PI};
use faer::MatRef;
use serde::{Deserialize, Serialize};

/// Integrand values below exp(max h - LOG_DROP) are left out (relative error ~1e-17).
const LOG_DROP: f64 = 42.0;
/// Node spacing as a fraction of the narrowest local Gaussian width of the integrand; the
/// trapezoid error for a Gaussian of width s at step h is ~2 exp(-2 pi^2 s^2 / h^2) (~1e-22 here).
const STEP_FRACTION: f64 = 0.4;
/// The cap on the nodes. It binds when one factor is much steeper than the Gaussian: in
/// `log_argmax_prob` when the class integrated over has a standard deviation several hundred
/// times another's, as GFITC's learned amplitudes give on satimage (ratios near 1000). The
/// spacing then exceeds the step's width and the rule's log error grows to about 4e-4 nats at
/// ratios of 1e3-1e5 (against the two-class closed form) and more far in the tails: a known
/// limit, left as it is because changing the rule would move every stored EP, SEP and GFITC
/// prediction that hit it (benches/PROFILE.md, session 52). The fix, Gauss-Legendre panels
/// that follow the local width, waits for the next rerun of those cells:
/// benches/pending/argmax-panels.patch.
const MAX_NODES: usize = 4000;

/// A quadrature rule adapted to one log-concave integrand: nodes u_i and the log of
/// (trapezoid weight x integrand value) at each node.
#[derive(Clone, Debug)]
pub struct LogRule {
    pub u: Vec<f64>,
    pub log_w: Vec<f64>,
    /// log of the integral: log-sum-exp of `log_w`.
    pub log_total: f64,
}

impl LogRule {
    /// sum_i w_i g(u_i) / sum_i w_i: the expectation of g under the normalised integrand.
    pub fn expect(&self, g: impl Fn(f64) -> f64) -> f64 {
        let mut num = 0.0;
        let mut den = 0.0;
        for (u, lw) in self.u.iter().zip(&self.log_w) {
            let w = (lw - self.log_total).exp();
            num += w * g(*u);
            den += w;
        }
        num / den
    }
}

/// h(u) = log phi(u) + sum_j log Phi(a_j u + b_j): its first two derivatives. (The curvature
/// term keeps r (x + r), which cancels below x = -5 where `special::neg_d2_log_normal_cdf`
/// does not: there it only sets a Newton step and the rule's width, where 1e-8 relative is
/// harmless, and moving it would move every arg-max prediction's last bits, so it waits for
/// benches/pending/argmax-panels.patch, which replaces that rule.)
pub(crate) fn h_derivs(u: f64, a: &[f64], b: &[f64]) -> (f64, f64) {
    let (mut d1, mut d2) = (-u, -1.0);
    for (aj, bj) in a.iter().zip(b) {
        let x = aj * u + bj;
        let r = d_log_normal_cdf(x);
        d1 += aj * r;
        // d/dx [phi/Phi] = -r (x + r), in (-1, 0).
        d2 -= aj * aj * r * (x + r);
    }
    (d1, d2)
}

/// h(u) itself (with the normal density's constant).
pub(crate) fn h_only(u: f64, a: &[f64], b: &[f64]) -> f64 {
    -0.5 * u * u - LN_SQRT_2PI + a.iter().zip(b).map(|(aj, bj)| log_normal_cdf(aj * u + bj)).sum::<f64>()
}

/// The mode of h to full precision (`mode_tol` at 1e-12).
fn mode(a: &[f64], b: &[f64]) -> f64 {
    mode_tol(a, b, 1e-12)
}

/// The mode of h: h' is strictly decreasing (h'' <= -1), so h'(u) <= h'(0) - u for u > 0 and
/// h'(u) >= h'(0) + |u| for u < 0 give a bracket; Newton steps are kept inside it, stopping
/// once a step or the bracket is below tol (1 + |u|).
pub(crate) fn mode_tol(a: &[f64], b: &[f64], tol: f64) -> f64 {
    let (g0, _) = h_derivs(0.0, a, b);
    let (mut lo, mut hi) = if g0 > 0.0 { (0.0, g0 + 1.0) } else { (g0 - 1.0, 0.0) };
    let mut u = 0.0;
    for _ in 0..200 {
        let (g, gg) = h_derivs(u, a, b);
        if g > 0.0 {
            lo = u;
        } else {
            hi = u;
        }
        let mut next = u - g / gg;
        if !(next > lo && next < hi) {
            next = 0.5 * (lo + hi);
        }
        if (next - u).abs() <= tol * (1.0 + u.abs()) || hi - lo <= tol * (1.0 + u.abs()) {
            return next;
        }
        u = next;
    }
    u
}

/// The adapted rule for exp(h(u)), h(u) = log phi(u) + sum_j log Phi(a_j u + b_j).
/// Requires a_j > 0 (all uses here). `log_total` is log E_u[prod_j Phi(a_j u + b_j)].
pub fn log_concave_rule(a: &[f64], b: &[f64]) -> LogRule {
    assert_eq!(a.len(), b.len());
    let u0 = mode(a, b);
    let h0 = h_only(u0, a, b);
    let (_, curv) = h_derivs(u0, a, b);
    let width0 = 1.0 / (-curv).sqrt();
    // Narrowest local width: in the far left tail h'' -> -(1 + sum a_j^2).
    let narrowest = 1.0 / (1.0 + a.iter().map(|x| x * x).sum::<f64>()).sqrt();
    let step = STEP_FRACTION * narrowest.min(width0);
    let reach = |dir: f64| {
        let mut delta = width0;
        while h_only(u0 + dir * delta, a, b) > h0 - LOG_DROP && delta < 1e3 {
            delta *= 1.25;
        }
        delta
    };
    let (left, right) = (reach(-1.0), reach(1.0));
    let n = (((left + right) / step).ceil() as usize + 1).clamp(9, MAX_NODES);
    let h = (left + right) / (n - 1) as f64;
    let lo = u0 - left;
    let mut u = Vec::with_capacity(n);
    let mut log_w = Vec::with_capacity(n);
    for i in 0..n {
        let ui = lo + i as f64 * h;
        u.push(ui);
        // Trapezoid: end nodes count half (their values are ~exp(-LOG_DROP) anyway).
        let end = if i == 0 || i == n - 1 { std::f64::consts::LN_2 } else { 0.0 };
        log_w.push(h_only(ui, a, b) + h.ln() - end);
    }
    let log_total = crate::linalg::log_sum_exp(&log_w);
    LogRule { u, log_w, log_total }
}

/// log P(t = k | m) = log E_u[prod_{j != k} Phi(u + m_k - m_j)], u ~ N(0, 1)
/// (G&R 2006 §3; notes §1.5). Accurate in log space far into the tails.
pub fn log_probit_class_prob(m: &[f64], k: usize) -> f64 {
    let (a, b) = offsets(m, k);
    log_concave_rule(&a, &b).log_total
}

/// Nodes of the fast rule below (16: relative error of log P below ~2e-7 over random
/// K = 2..6 problems with latent scales up to 8; tested against `log_probit_class_prob`).
const FAST_NODES: usize = 16;

thread_local! {
    /// The fast rule's node arguments and their ln Phi, reused across calls.
    static FAST_SCRATCH: std::cell::RefCell<Vec<f64>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Physicists' Gauss-Hermite nodes x_i and log weights (weight exp(-x^2)) by Golub-Welsch:
/// eigenvalues of the Jacobi matrix with off-diagonal sqrt(i/2); weights sqrt(pi) v_0i^2.
fn gauss_hermite(n: usize) -> (Vec<f64>, Vec<f64>) {
    let J = faer::Mat::from_fn(n, n, |i, j| if i + 1 == j || j + 1 == i { (i.max(j) as f64 / 2.0).sqrt() } else { 0.0 });
    let evd = J.self_adjoint_eigen(faer::Side::Lower).expect("Jacobi matrix eigendecomposition");
    let x: Vec<f64> = (0..n).map(|i| evd.S().column_vector()[i]).collect();
    let log_w = (0..n).map(|i| 0.5 * std::f64::consts::PI.ln() + 2.0 * evd.U()[(0, i)].abs().ln()).collect();
    (x, log_w)
}

/// `log_probit_class_prob` by a fixed-size adaptive Gauss-Hermite rule: 16 nodes centred at
/// the integrand's mode and scaled by its curvature there, so it still follows the integrand
/// into the far tails. About 10x cheaper; for inner loops that run it millions of times (the
/// Gibbs sampler's predictive), where its ~1e-7 relative error is far below Monte Carlo error.
pub fn log_probit_class_prob_fast(m: &[f64], k: usize) -> f64 {
    static RULE: std::sync::OnceLock<(Vec<f64>, Vec<f64>)> = std::sync::OnceLock::new();
    let (x, log_w) = RULE.get_or_init(|| gauss_hermite(FAST_NODES));
    let (a, b) = offsets(m, k);
    let u = mode(&a, &b);
    let (_, d2h) = h_derivs(u, &a, &b);
    // exp(h) ~ exp(h(u*) - (v - u*)^2 / (2 s^2)) with s^2 = -1/h'': substitute v = u* + sqrt(2) s x.
    let scale = std::f64::consts::SQRT_2 / (-d2h).sqrt();
    // Every node's ln Phi terms at once, for the vectorised ln Phi.
    let others = b.len();
    let nodes: [f64; FAST_NODES] = std::array::from_fn(|i| u + scale * x[i]);
    let mut terms = [0.0; FAST_NODES];
    FAST_SCRATCH.with_borrow_mut(|buf| {
        buf.clear();
        buf.extend(nodes.iter().flat_map(|v| a.iter().zip(&b).map(move |(aj, bj)| aj * v + bj)));
        buf.resize(2 * FAST_NODES * others, 0.0);
        let (args, logs) = buf.split_at_mut(FAST_NODES * others);
        crate::special::log_normal_cdf_slice(args, logs);
        for (i, (term, v)) in terms.iter_mut().zip(&nodes).enumerate() {
            let h = -0.5 * v * v - LN_SQRT_2PI + logs[i * others..(i + 1) * others].iter().sum::<f64>();
            *term = log_w[i] + x[i] * x[i] + h;
        }
    });
    crate::linalg::log_sum_exp(&terms) + scale.ln()
}

/// P(t = k | m) for the multinomial probit likelihood (see `log_probit_class_prob`).
pub fn probit_class_prob(m: &[f64], k: usize) -> f64 {
    log_probit_class_prob(m, k).exp()
}

/// P(t = k | m) for every class k, [C]; sums to one up to quadrature error (~1e-12).
pub fn probit_class_probs(m: &[f64]) -> Vec<f64> {
    (0..m.len()).map(|k| probit_class_prob(m, k)).collect()
}

/// (a, b) of h for class k's cone {y_k > y_j for all j != k} of y ~ N(m, I), in the offset
/// u = y_k - m_k: a_j = 1, b_j = m_k - m_j over j != k.
pub(crate) fn offsets(m: &[f64], k: usize) -> (Vec<f64>, Vec<f64>) {
    let b: Vec<f64> = (0..m.len()).filter(|&j| j != k).map(|j| m[k] - m[j]).collect();
    (vec![1.0; b.len()], b)
}

/// Moments of Q(y_n): N(m, I) truncated to the cone where component t is largest
/// (G&R 2006 eqs. 4.2–4.4; notes §2.3).
#[derive(Clone, Debug)]
pub struct TruncatedMoments {
    /// log 𝒵_n = log P(t | m).
    pub log_z: f64,
    /// E[y] under the truncated Gaussian, [C]; sum_k (E[y_k] - m_k) = 0 (eq. 4.4).
    pub mean: Vec<f64>,
}

/// 𝒵 and ỹ = E[y] for y ~ N(m, I) truncated to {y_t > y_j for all j != t}.
/// For k != t, ỹ_k = m_k - E_u[phi(u + d_k) prod_{j != t,k} Phi(u + d_j)] / 𝒵 with
/// d_j = m_t - m_j (eq. 4.3); the numerator's integrand is 𝒵's integrand times the inverse
/// Mills ratio phi/Phi(u + d_k), so the same adapted nodes serve both (no underflow: only
/// ratios of weights are formed). ỹ_t follows from eq. 4.4.
pub fn truncated_moments(m: &[f64], t: usize) -> TruncatedMoments {
    let c = m.len();
    let (a, b) = offsets(m, t);
    let rule = log_concave_rule(&a, &b);
    let mut mean = m.to_vec();
    let mut sum_p = 0.0;
    let mut idx = 0;
    for k in 0..c {
        if k == t {
            continue;
        }
        let dk = b[idx];
        idx += 1;
        let p = -rule.expect(|u| d_log_normal_cdf(u + dk));
        mean[k] += p;
        sum_p += p;
    }
    mean[t] -= sum_p;
    TruncatedMoments { log_z: rule.log_total, mean }
}

/// log P(t = k) under the predictive y_j ~ N(mean_j, 1 + var_j) independently:
/// log E_u[prod_{j != k} Phi((u v_k + mean_k - mean_j) / v_j)], v_j = sqrt(1 + var_j)
/// (G&R 2006 §4.5 and App. B; notes §3, §5.1). `var` are the latent variances (without
/// the unit auxiliary noise).
pub fn log_predictive_class_prob(mean: &[f64], var: &[f64], k: usize) -> f64 {
    let with_noise: Vec<f64> = var.iter().map(|s| 1.0 + s.max(0.0)).collect();
    log_argmax_prob(mean, &with_noise, k)
}

/// log P(f_k is the largest) for independent f_j ~ N(mean_j, var_j):
/// log E_u[prod_{j != k} Phi((u s_k + mean_k - mean_j) / s_j)], s_j = sqrt(var_j), by the
/// adapted rule (accurate far into the tails). The predictive of the arg-max likelihood
/// (Kim & Ghahramani 2006; Villacampa-Calvo & Hernandez-Lobato 2017 eq. 68). Variances must be
/// positive.
pub fn log_argmax_prob(mean: &[f64], var: &[f64], k: usize) -> f64 {
    assert_eq!(mean.len(), var.len());
    let s: Vec<f64> = var.iter().map(|v| v.sqrt()).collect();
    let (a, b): (Vec<f64>, Vec<f64>) = (0..mean.len()).filter(|&j| j != k).map(|j| (s[k] / s[j], (mean[k] - mean[j]) / s[j])).unzip();
    log_concave_rule(&a, &b).log_total
}

/// Predictive class probabilities [C] for independent Gaussian latents N(mean_j, var_j)
/// under the probit link (see `log_predictive_class_prob`). The exact values sum to one
/// (the cones partition R^C); the quadrature values are renormalised, a ~1e-12 change.
pub fn predictive_class_probs(mean: &[f64], var: &[f64]) -> Vec<f64> {
    let mut p: Vec<f64> = (0..mean.len()).map(|k| log_predictive_class_prob(mean, var, k).exp()).collect();
    let s: f64 = p.iter().sum();
    p.iter_mut().for_each(|x| *x /= s);
    p
}

/// The multinomial probit likelihood as a `Likelihood`.
#[derive(Clone, Copy, Debug, Default)]
pub struct Probit;

impl Likelihood for Probit {
    fn log_prob(&self, f: &[f64], y: usize) -> f64 {
        log_probit_class_prob(f, y)
    }

    fn probs(&self, f: &[f64]) -> Vec<f64> {
        probit_class_probs(f)
    }

    /// Exact 1-D rule when the covariance is diagonal; otherwise the Monte Carlo average
    /// of `probs` over the supplied draws.
    fn predictive_probs(&self, mean: &[f64], cov_chol: MatRef<'_, f64>, z: &[Vec<f64>]) -> Vec<f64> {
        let c = mean.len();
        let diagonal = (0..c).all(|i| (0..c).all(|j| i == j || cov_chol[(i, j)] == 0.0));
        if diagonal {
            let var: Vec<f64> = (0..c).map(|i| cov_chol[(i, i)].powi(2)).collect();
            return predictive_class_probs(mean, &var);
        }
        super::monte_carlo_predictive(self, mean, cov_chol, z)
    }
}

/// Which probit model a two-class problem runs: the binary one with one latent function
/// (t = +1 for class index 1), or the multinomial one with two.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BinaryModel {
    #[default]
    Probit,
    Multinomial,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::special::normal_cdf;
    use rand::{RngExt, SeedableRng};

    /// Brute-force oracle: composite trapezoid on a huge fixed window, in log space.
    fn brute(m: &[f64], t: usize) -> (f64, Vec<f64>) {
        let c = m.len();
        let n = 400_001;
        let (lo, hi) = (-40.0, 40.0);
        let h = (hi - lo) / (n - 1) as f64;
        let mut logs = Vec::with_capacity(n);
        let mut num_logs: Vec<Vec<f64>> = vec![Vec::with_capacity(n); c];
        for i in 0..n {
            let u = lo + i as f64 * h;
            let base = -0.5 * u * u - LN_SQRT_2PI;
            let lp: Vec<f64> = (0..c).map(|j| if j == t { 0.0 } else { log_normal_cdf(u + m[t] - m[j]) }).collect();
            let s: f64 = lp.iter().sum();
            logs.push(base + s + h.ln());
            for k in 0..c {
                if k != t {
                    let x = u + m[t] - m[k];
                    num_logs[k].push(base + s - lp[k] + (-0.5 * x * x - LN_SQRT_2PI) + h.ln());
                }
            }
        }
        let log_z = crate::linalg::log_sum_exp(&logs);
        let mut y = m.to_vec();
        for k in 0..c {
            if k != t {
                y[k] -= (crate::linalg::log_sum_exp(&num_logs[k]) - log_z).exp();
            }
        }
        // y_t = m_t + u: its mean directly, not from eq. 4.4 (which the code uses).
        y[t] += (0..n).map(|i| (logs[i] - log_z).exp() * (lo + i as f64 * h)).sum::<f64>();
        (log_z, y)
    }

    // Reference values from notes/girolami-rogers2006.md §2.3 (56,001-point trapezoid; t 0-based here).
    #[test]
    fn truncated_moments_match_the_notes_oracle_values() {
        let cases: [(&[f64], usize, f64, &[f64]); 6] = [
            (&[0.0, 0.0, 0.0], 0, 0.3333333333, &[0.84628438, -0.42314219, -0.42314219]),
            (&[0.5, -0.2, 0.1], 0, 0.4942529687, &[1.12177135, -0.46069451, -0.26107685]),
            (&[0.5, -0.2, 0.1], 1, 0.2023486834, &[-0.13676735, 0.88207297, -0.34530562]),
            (&[-3.0, 2.0, 1.0, 0.0], 0, 1.78778e-05, &[0.55743251, 0.09490385, -0.12804553, -0.52429084]),
            (&[1.0, -1.0], 0, 0.9213503965, &[1.11263562, -1.11263562]),
            (&[-4.0, 4.0], 0, 7.7086e-09, &[0.11818845, -0.11818845]),
        ];
        for (m, t, z, y) in cases {
            let tm = truncated_moments(m, t);
            let zr = tm.log_z.exp();
            assert!(((zr - z) / z).abs() < 2e-5, "Z {m:?}: {zr} vs {z}");
            for k in 0..m.len() {
                assert!((tm.mean[k] - y[k]).abs() < 2e-8, "y {m:?} k={k}: {} vs {}", tm.mean[k], y[k]);
            }
        }
    }

    #[test]
    fn equal_means_give_order_statistics() {
        // E[max of 3 iid N(0,1)] = 3 / (2 sqrt(pi)).
        let tm = truncated_moments(&[0.7, 0.7, 0.7], 2);
        let e = 3.0 / (2.0 * std::f64::consts::PI.sqrt());
        assert!((tm.mean[2] - 0.7 - e).abs() < 1e-12);
        assert!((tm.mean[0] - 0.7 + e / 2.0).abs() < 1e-12);
        assert!((tm.log_z - (1.0f64 / 3.0).ln()).abs() < 1e-12);
    }

    #[test]
    fn two_classes_match_the_closed_form_far_into_the_tail() {
        // K = 2: 𝒵 = Phi(d / sqrt 2), p_k = -phi(d/sqrt2) / (sqrt2 Phi(d/sqrt2)), d = m_t - m_k.
        for d in [-38.0, -16.0, -8.0, -1.0, 0.0, 0.5, 3.0, 9.0] {
            let tm = truncated_moments(&[d, 0.0], 0);
            let x = d / std::f64::consts::SQRT_2;
            let log_z = log_normal_cdf(x);
            let p = -d_log_normal_cdf(x) / std::f64::consts::SQRT_2;
            assert!((tm.log_z - log_z).abs() < 1e-11 * (1.0 + log_z.abs()), "d={d}: {} vs {log_z}", tm.log_z);
            assert!((tm.mean[1] - p).abs() < 1e-10 * (1.0 + p.abs()), "d={d}: {} vs {p}", tm.mean[1]);
            assert!((tm.mean[0] - d + p).abs() < 1e-10 * (1.0 + p.abs()));
        }
        // The notes' value for d = -16: 𝒵 = 5.612e-30, p = -8.06156.
        let tm = truncated_moments(&[-8.0, 8.0], 0);
        assert!((tm.log_z.exp() / 5.612e-30 - 1.0).abs() < 1e-3);
        assert!((tm.mean[1] - 8.0 + 8.06156).abs() < 1e-4);
    }

    #[test]
    fn truncated_moments_match_brute_force_quadrature_in_far_tails() {
        let cases: [(&[f64], usize); 5] = [
            (&[-9.0, 6.0, 2.0, 0.0], 0),
            (&[-20.0, 0.0, 0.0], 0),
            (&[3.0, -1.0, 0.5, 2.9, -4.0, 1.0], 4),
            (&[0.0; 10], 3),
            (&[12.0, -3.0, 0.0], 0),
        ];
        for (m, t) in cases {
            let (lz, y) = brute(m, t);
            let tm = truncated_moments(m, t);
            assert!((tm.log_z - lz).abs() < 1e-9 * (1.0 + lz.abs()), "{m:?}: {} vs {lz}", tm.log_z);
            for k in 0..m.len() {
                assert!((tm.mean[k] - y[k]).abs() < 1e-8 * (1.0 + y[k].abs()), "{m:?} k={k}: {} vs {}", tm.mean[k], y[k]);
            }
            // Eq. 4.4, sum_k (E[y_k] - m_k) = 0, holds for the code by construction; here it
            // checks the oracle, whose E[y_t] is integrated directly.
            let s: f64 = y.iter().sum::<f64>() - m.iter().sum::<f64>();
            assert!(s.abs() < 1e-8 * (1.0 + y[t].abs()), "{m:?}: the oracle's sum of E[y] - m is {s}");
        }
    }

    #[test]
    fn truncated_moments_match_monte_carlo() {
        // Rejection sampling from N(m, I) restricted to the cone (m chosen so 𝒵 is not tiny).
        let m = [0.3, -0.4, 0.9];
        let t = 1;
        let mut rng = rand_pcg::Pcg64::seed_from_u64(7);
        let (mut acc, mut hits, total) = ([0.0; 3], 0usize, 2_000_000usize);
        for _ in 0..total {
            let y: Vec<f64> = m.iter().map(|mi| mi + rng.sample::<f64, _>(rand_distr::StandardNormal)).collect();
            if (0..3).all(|j| j == t || y[t] > y[j]) {
                hits += 1;
                for k in 0..3 {
                    acc[k] += y[k];
                }
            }
        }
        let tm = truncated_moments(&m, t);
        let z_mc = hits as f64 / total as f64;
        let z = tm.log_z.exp();
        assert!((z_mc - z).abs() < 4.0 * (z * (1.0 - z) / total as f64).sqrt(), "{z_mc} vs {z}");
        for k in 0..3 {
            // Standard error of a truncated-normal mean with variance < 1.5 per component.
            let se = (1.5 / hits as f64).sqrt();
            assert!((acc[k] / hits as f64 - tm.mean[k]).abs() < 4.0 * se, "k={k}");
        }
    }

    #[test]
    fn predictive_matches_the_notes_values_and_sums_to_one() {
        let cases: [(&[f64], &[f64], &[f64]); 2] = [
            (&[0.5, -0.2, 0.1], &[0.3, 0.3, 0.3], &[0.47433110, 0.21701182, 0.30865708]),
            (&[1.0, 0.0, -1.0, 0.5], &[0.1, 0.5, 1.0, 2.0], &[0.45196519, 0.15557103, 0.05685362, 0.33561016]),
        ];
        for (mu, var, want) in cases {
            let raw: Vec<f64> = (0..mu.len()).map(|k| log_predictive_class_prob(mu, var, k).exp()).collect();
            assert!((raw.iter().sum::<f64>() - 1.0).abs() < 1e-10);
            for k in 0..mu.len() {
                assert!((raw[k] - want[k]).abs() < 2e-8, "{k}: {} vs {}", raw[k], want[k]);
            }
        }
        // Sums to one far from the centre and with very unequal variances.
        let mu = [30.0, -12.0, 0.0, 4.0, 4.1];
        let var = [0.01, 50.0, 3.0, 0.0, 1e3];
        let raw: f64 = (0..5).map(|k| log_predictive_class_prob(&mu, &var, k).exp()).sum();
        assert!((raw - 1.0).abs() < 1e-10, "{raw}");
    }

    #[test]
    fn predictive_matches_monte_carlo_over_latents() {
        let mu = [0.4, -0.3, 1.0];
        let var = [0.5, 2.0, 0.2];
        let p = predictive_class_probs(&mu, &var);
        let mut rng = rand_pcg::Pcg64::seed_from_u64(3);
        let n = 400_000;
        let mut counts = [0usize; 3];
        for _ in 0..n {
            let y: Vec<f64> = (0..3).map(|j| mu[j] + (1.0 + var[j]).sqrt() * rng.sample::<f64, _>(rand_distr::StandardNormal)).collect();
            counts[crate::linalg::argmax(&y)] += 1;
        }
        for k in 0..3 {
            let f = counts[k] as f64 / n as f64;
            assert!((f - p[k]).abs() < 4.0 * (p[k] * (1.0 - p[k]) / n as f64).sqrt(), "{k}: {f} vs {}", p[k]);
        }
    }

    #[test]
    fn binary_predictive_is_phi_of_scaled_difference() {
        // Two classes: P(1) = Phi((m1 - m2) / sqrt(2 + v1 + v2)).
        let p = predictive_class_probs(&[0.8, -0.5], &[0.3, 1.2]);
        let want = normal_cdf(1.3 / (2.0f64 + 1.5).sqrt());
        assert!((p[0] - want).abs() < 1e-12);
    }

    #[test]
    fn argmax_matches_the_two_class_closed_form_at_unequal_scales() {
        // P(f_k > f_j) = Phi((m_k - m_j) / sqrt(v_k + v_j)) for any variances: the rule
        // integrates over f_k, where a narrow other class is a near-step of width s_j / s_k.
        // Accurate while the node cap (MAX_NODES) leaves the spacing fine enough: standard-
        // deviation ratios up to a few hundred (at 1000 this fails; see MAX_NODES).
        for ratio in [1.0f64, 3.0, 10.0, 30.0, 100.0, 300.0] {
            for (sk, sj) in [(ratio, 1.0), (1.0, ratio)] {
                for d in [-40.0f64, -9.0, -1.0, 0.0, 0.7, 5.0] {
                    let (var, mean) = ([sk * sk, sj * sj], [d * (sk * sk + sj * sj).sqrt(), 0.0]);
                    let got = log_argmax_prob(&mean, &var, 0);
                    let want = log_normal_cdf(d);
                    assert!((got - want).abs() < 1e-10 * (1.0 + want.abs()), "s_k {sk}, s_j {sj}, d {d}: {got} vs {want}");
                }
            }
        }
    }

    #[test]
    fn likelihood_trait_is_consistent() {
        let f = [0.2, 1.5, -0.7, 0.0];
        let p = Probit.probs(&f);
        assert!((p.iter().sum::<f64>() - 1.0).abs() < 1e-11);
        assert!((Probit.log_prob(&f, 2) - p[2].ln()).abs() < 1e-12);
    }
}
