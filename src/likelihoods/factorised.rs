//! Multi-class likelihoods P(y | u), u in R^C, under a factorised Gaussian cavity
//! u_c ~ N(h_c, a_c) independently: the normaliser Z = E[P(y | u)] and the means and variances
//! of the tilted distribution P(y | u) N(u | h, diag a) / Z per component, which is all a
//! factorised EP / ADF site update needs (Seeger, Lawrence & Herbrich §4.1, eq. 6; notes
//! §5.2-5.4). Both likelihoods carry fixed intercepts p_c.
//!
//! - Softmax P(y | u) = exp(u_y + p_y) / sum_c exp(u_c + p_c) by the Gauss-Hermite product rule
//!   with N nodes per axis (N^C points; the paper's satimage runs use N = 3, 729 points for
//!   C = 6; notes §5.4, §3.5).
//! - Multivariate probit (eq. 8) P(y | u) = P(v_y = max_c v_c), v = u + p + n, n ~ N(0, I), by
//!   the paper's App. D reduction to one 1-D integral over v_y (notes §5.3): given v_y the other
//!   classes are independent, P(v_c < v_y | v_y) = Phi((v_y - mu_c) / sigma_c) with
//!   mu_c = h_c + p_c, sigma_c^2 = a_c + 1, and u_y | v_y is Gaussian. The integral is the
//!   arg-max probability of `likelihoods::probit` (the EP predictive and G&R's probit), so it
//!   is computed by the same adapted rule (`probit::log_concave_rule`: mode-centred, spacing
//!   set by the steepest factor, reach set by the integrand's own decay), which follows the
//!   integrand into the tails and stays accurate when one class's cavity variance is hundreds of
//!   times another's (the paper's plain Gauss-Hermite rule does neither).
//!
//! Accumulation is in log space where it can underflow: the multi-probit nodes by logsumexp
//! of the rule's log (weight x integrand); the softmax grid by a linear-domain sum that is used only when
//! its total is far above underflow (every term is positive, so no cancellation), and by a
//! logsumexp over the grid otherwise.
use crate::likelihoods::probit::log_concave_rule;
use crate::linalg::log_sum_exp;
use crate::special::d_log_normal_cdf;
use gauss_quad::hermite::GaussHermite;
use std::f64::consts::{PI, SQRT_2};

/// A quadrature rule for E[f(x)], x ~ N(0, 1): sum_k weights_k f(nodes_k), weights summing to
/// one. Gauss-Hermite with N nodes is exact for polynomials of degree 2N - 1.
#[derive(Clone, Debug, PartialEq)]
pub struct NormalRule {
    pub nodes: Vec<f64>,
    pub weights: Vec<f64>,
    pub log_weights: Vec<f64>,
}

impl NormalRule {
    /// The N-node Gauss-Hermite rule for the standard normal: physicists' nodes t_k (weight
    /// exp(-t^2)) scaled to x_k = sqrt(2) t_k, weights w_k / sqrt(pi). N = 3 gives 0, +-sqrt(3)
    /// with weights 2/3, 1/6, 1/6 (notes §3.5).
    pub fn gauss_hermite(n: usize) -> NormalRule {
        let rule = GaussHermite::new(std::num::NonZeroUsize::new(n).expect("a rule needs at least one node"));
        let mut pairs: Vec<(f64, f64)> = rule.iter().map(|(t, w)| (SQRT_2 * t, w / PI.sqrt())).collect();
        pairs.sort_by(|a, b| a.0.total_cmp(&b.0));
        let nodes = pairs.iter().map(|p| p.0).collect();
        let weights: Vec<f64> = pairs.iter().map(|p| p.1).collect();
        let log_weights = weights.iter().map(|w| w.ln()).collect();
        NormalRule { nodes, weights, log_weights }
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }
}

/// log Z and the per-class means and variances of a tilted distribution.
#[derive(Clone, Debug, PartialEq)]
pub struct TiltedMoments {
    pub log_z: f64,
    pub mean: Vec<f64>,
    pub var: Vec<f64>,
}

impl TiltedMoments {
    /// Every number finite and every variance non-negative.
    pub fn is_finite(&self) -> bool {
        self.log_z.is_finite() && self.mean.iter().all(|v| v.is_finite()) && self.var.iter().all(|v| v.is_finite() && *v >= 0.0)
    }
}

/// Which multi-class likelihood, with its rule and intercepts.
#[derive(Clone, Debug, PartialEq)]
pub enum FactorisedLik {
    /// Softmax by the product rule of `rule` on every axis.
    Softmax { rule: NormalRule, intercepts: Vec<f64> },
    /// Multivariate probit (eq. 8) by the adapted 1-D rule over v_y.
    MultiProbit { intercepts: Vec<f64> },
}

impl FactorisedLik {
    pub fn softmax(points: usize, intercepts: Vec<f64>) -> Self {
        FactorisedLik::Softmax { rule: NormalRule::gauss_hermite(points), intercepts }
    }

    pub fn multi_probit(intercepts: Vec<f64>) -> Self {
        FactorisedLik::MultiProbit { intercepts }
    }

    pub fn n_classes(&self) -> usize {
        match self {
            FactorisedLik::Softmax { intercepts, .. } | FactorisedLik::MultiProbit { intercepts, .. } => intercepts.len(),
        }
    }

    /// Z = E[P(y | u)] and the tilted means and variances of every u_c, under u_c ~ N(h_c, a_c).
    pub fn tilted(&self, y: usize, h: &[f64], a: &[f64]) -> TiltedMoments {
        let c = self.n_classes();
        assert!(y < c && h.len() == c && a.len() == c, "FactorisedLik::tilted: class or cavity out of shape");
        match self {
            FactorisedLik::Softmax { rule, intercepts } => softmax_tilted(rule, intercepts, y, h, a),
            FactorisedLik::MultiProbit { intercepts } => probit_tilted(intercepts, y, h, a),
        }
    }

    /// Predictive class probabilities Q(y = c) = E[P(c | u)], u_c ~ N(h_c, a_c), each from its
    /// own log Z and normalised (the rules make them sum to one only approximately for the
    /// multi-probit; the softmax product rule sums to one at every grid point).
    pub fn predictive(&self, h: &[f64], a: &[f64]) -> Vec<f64> {
        let log_z: Vec<f64> = (0..self.n_classes()).map(|y| self.tilted(y, h, a).log_z).collect();
        let total = log_sum_exp(&log_z);
        log_z.iter().map(|l| (l - total).exp()).collect()
    }
}

/// Below this the softmax grid's linear-domain total is recomputed in log space (far above
/// the smallest normal number, so the flushed terms are negligible relative to Z).
const LINEAR_Z_FLOOR: f64 = 1e-250;

/// The softmax product rule. With u_{c,k} = h_c + sqrt(a_c) x_k, each grid point g has
/// P(y | u_g) = 1 / (1 + sum_{c != y} r_c(g_c, g_y)), r_c(k, k') = exp(u_{c,k} + p_c - u_{y,k'} - p_y),
/// so a walk over the grid (class y outermost) needs one addition per level and one division
/// per point, and no exponential per point. The walk returns the weight of each subtree, which
/// is added to the marginal mass of its node, so the tilted marginals come from the N masses
/// of each axis: E[u_c] = h_c + sqrt(a_c) sum_k P_k x_k, Var = a_c sum_k P_k (x_k - m)^2.
fn softmax_tilted(rule: &NormalRule, p: &[f64], y: usize, h: &[f64], a: &[f64]) -> TiltedMoments {
    let (c, n) = (p.len(), rule.len());
    let sd: Vec<f64> = a.iter().map(|v| v.max(0.0).sqrt()).collect();
    let others: Vec<usize> = (0..c).filter(|&k| k != y).collect();
    let mut walk = Walk { w: &rule.weights, n, r: vec![0.0; others.len() * n], mass: vec![0.0; others.len() * n] };
    let mut mass_y = vec![0.0; n];
    for (ky, m) in mass_y.iter_mut().enumerate() {
        let uy = h[y] + p[y] + sd[y] * rule.nodes[ky];
        for (l, &k) in others.iter().enumerate() {
            for kc in 0..n {
                walk.r[l * n + kc] = (h[k] + p[k] + sd[k] * rule.nodes[kc] - uy).exp();
            }
        }
        *m = walk.walk(0, 0.0, rule.weights[ky]);
    }
    let z: f64 = mass_y.iter().sum();
    let mut masses = vec![Vec::new(); c];
    let log_z = if z > LINEAR_Z_FLOOR && z.is_finite() {
        masses[y] = mass_y;
        for (l, &k) in others.iter().enumerate() {
            masses[k] = walk.mass[l * n..(l + 1) * n].to_vec();
        }
        z.ln()
    } else {
        softmax_log_grid(rule, p, y, h, &sd, &mut masses)
    };
    let total: Vec<f64> = masses.iter().map(|m| m.iter().sum()).collect();
    let mut mean = vec![0.0; c];
    let mut var = vec![0.0; c];
    for k in 0..c {
        // Standardised moments first, so a variance that shrinks a lot loses no digits.
        let probs: Vec<f64> = masses[k].iter().map(|m| m / total[k]).collect();
        let mz: f64 = probs.iter().zip(&rule.nodes).map(|(q, x)| q * x).sum();
        let vz: f64 = probs.iter().zip(&rule.nodes).map(|(q, x)| q * (x - mz) * (x - mz)).sum();
        mean[k] = h[k] + sd[k] * mz;
        var[k] = a[k].max(0.0) * vz;
    }
    TiltedMoments { log_z, mean, var }
}

/// The grid walk of `softmax_tilted` for one node of class y: `r[l * n + k]` the ratio of
/// level l (the l-th class other than y) at its node k, `mass[l * n + k]` the accumulated
/// weight of the points whose level-l node is k.
struct Walk<'a> {
    w: &'a [f64],
    n: usize,
    r: Vec<f64>,
    mass: Vec<f64>,
}

impl Walk<'_> {
    /// The total of w_g P(y | u_g) over the subtree below `level` with the ratios summed so far
    /// `s` and the weight product `w`. An infinite ratio gives P = 0 (u_c far above u_y).
    fn walk(&mut self, level: usize, s: f64, w: f64) -> f64 {
        if level * self.n == self.r.len() {
            return w / (1.0 + s);
        }
        let mut total = 0.0;
        if (level + 1) * self.n == self.r.len() {
            // The last level's points inline (the same operations as the leaf case, in the same
            // order): most of the walk's calls are here.
            for k in 0..self.n {
                let t = (w * self.w[k]) / (1.0 + (s + self.r[level * self.n + k]));
                self.mass[level * self.n + k] += t;
                total += t;
            }
            return total;
        }
        for k in 0..self.n {
            let t = self.walk(level + 1, s + self.r[level * self.n + k], w * self.w[k]);
            self.mass[level * self.n + k] += t;
            total += t;
        }
        total
    }
}

/// The softmax product rule entirely in log space: log(w_g P(y | u_g)) at every grid point,
/// logsumexp over the grid. For a point whose every grid value underflows (u_y far below
/// another class everywhere); slower (C exponentials per point). Fills `masses` with the
/// marginal masses scaled by exp(-max) and returns log Z.
fn softmax_log_grid(rule: &NormalRule, p: &[f64], y: usize, h: &[f64], sd: &[f64], masses: &mut [Vec<f64>]) -> f64 {
    let (c, n) = (p.len(), rule.len());
    let points = n.pow(c as u32);
    let mut idx = vec![0usize; c];
    let mut u = vec![0.0; c];
    let mut log_q = Vec::with_capacity(points);
    for _ in 0..points {
        let mut lw = 0.0;
        for k in 0..c {
            u[k] = h[k] + p[k] + sd[k] * rule.nodes[idx[k]];
            lw += rule.log_weights[idx[k]];
        }
        log_q.push(lw + u[y] - log_sum_exp(&u));
        advance(&mut idx, n);
    }
    let max = log_q.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    for m in masses.iter_mut() {
        *m = vec![0.0; n];
    }
    let mut total = 0.0;
    idx.fill(0);
    for lq in &log_q {
        let q = (lq - max).exp();
        total += q;
        for k in 0..c {
            masses[k][idx[k]] += q;
        }
        advance(&mut idx, n);
    }
    max + total.ln()
}

/// The next grid index in mixed radix n (first axis fastest).
fn advance(idx: &mut [usize], n: usize) {
    for v in idx.iter_mut() {
        *v += 1;
        if *v < n {
            return;
        }
        *v = 0;
    }
}

/// The multivariate probit by App. D's 1-D integral (notes §5.3). With mu_c = h_c + p_c,
/// sigma_c = sqrt(a_c + 1), and x the standardised v_y = mu_y + sigma_y x, the integrand
/// N(x) prod_{c != y} Phi(z_c(x)), z_c(x) = (sigma_y x + mu_y - mu_c) / sigma_c, is summed at
/// the nodes x_k of the adapted rule (`probit::log_concave_rule` with slopes sigma_y / sigma_c
/// and offsets (mu_y - mu_c) / sigma_c), whose log (weight x integrand) are l_k:
///     log Z = logsumexp_k l_k,  wbar_k = exp(l_k - log Z).
/// For c != y, with H = N / Phi and om_{c,k} = wbar_k H(z_{c,k}):
///     h'_c = h_c - (a_c / sigma_c) sum_k om_{c,k},
///     a'_c = a_c - (a_c / sigma_c)^2 ((sum_k om_{c,k})^2 + sum_k om_{c,k} z_{c,k});
/// for y, as u_y | v_y = N(h_y + (a_y / sigma_y) x, a_y / sigma_y^2):
///     h'_y = h_y + (a_y / sigma_y) m,  a'_y = a_y / sigma_y^2 + (a_y / sigma_y)^2 sum_k wbar_k (x_k - m)^2,
/// m = sum_k wbar_k x_k (the notes' [DERIVED] form, equal to the paper's 2-D rule).
///
/// The rule [NOT IN PAPER]: the paper's plain Gauss-Hermite rule puts its nodes where N(x) is,
/// but far on the wrong side of the decision the integrand lives in the tail of N (at
/// x ~ (mu_c - mu_y) / sigma_y), and when sigma_y is many times some sigma_c the factor
/// Phi(z_c) is a step narrower than the rule's spacing. The adapted rule is centred at the
/// integrand's mode and spaced by its steepest factor.
fn probit_tilted(p: &[f64], y: usize, h: &[f64], a: &[f64]) -> TiltedMoments {
    let c = p.len();
    let mu: Vec<f64> = (0..c).map(|k| h[k] + p[k]).collect();
    let sigma: Vec<f64> = a.iter().map(|v| (v.max(0.0) + 1.0).sqrt()).collect();
    let others: Vec<usize> = (0..c).filter(|&j| j != y).collect();
    let (slopes, offsets): (Vec<f64>, Vec<f64>) = others.iter().map(|&j| (sigma[y] / sigma[j], (mu[y] - mu[j]) / sigma[j])).unzip();
    let rule = log_concave_rule(&slopes, &offsets);
    let log_z = rule.log_total;
    let wbar: Vec<f64> = rule.log_w.iter().map(|l| (l - log_z).exp()).collect();
    let mut mean = vec![0.0; c];
    let mut var = vec![0.0; c];
    let m: f64 = wbar.iter().zip(&rule.u).map(|(w, x)| w * x).sum();
    let spread: f64 = wbar.iter().zip(&rule.u).map(|(w, x)| w * (x - m) * (x - m)).sum();
    let scale_y = a[y].max(0.0) / sigma[y];
    mean[y] = h[y] + scale_y * m;
    var[y] = a[y].max(0.0) / (sigma[y] * sigma[y]) + scale_y * scale_y * spread;
    for (&j, (slope, offset)) in others.iter().zip(slopes.iter().zip(&offsets)) {
        let scale = a[j].max(0.0) / sigma[j];
        let (mut s_om, mut s_omz) = (0.0, 0.0);
        for (w, x) in wbar.iter().zip(&rule.u) {
            let zk = slope * x + offset;
            let om = w * d_log_normal_cdf(zk);
            s_om += om;
            s_omz += om * zk;
        }
        mean[j] = h[j] - scale * s_om;
        // The factor (sum omega)^2 + sum omega z is the tilted variance reduction in units
        // of a_c^2 / sigma_c^2; it lies in [0, 1) in exact arithmetic.
        var[j] = a[j].max(0.0) - scale * scale * (s_om * s_om + s_omz);
    }
    TiltedMoments { log_z, mean, var }
}

#[cfg(test)]
mod tests;
