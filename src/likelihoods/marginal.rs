//! Expectations of a multi-class likelihood under independent Gaussian marginals
//! f_c ~ N(mu_c, var_c), with their gradients in mu and var: what the sparse variational
//! methods need per datum (their q(f_n) factorises over the classes).
//!
//! - [`RobustMax`]: p(y | f) = 1 - eps if f_y is the largest, eps / (C - 1) otherwise
//!   (Hernandez-Lobato et al. 2011; GPflow's MultiClass(RobustMax)). E[log p] is linear in
//!   P(f_y largest) = E_{f_y}[prod_{c != y} Phi((f_y - mu_c) / sd_c)], a 1-D integral by
//!   Gauss-Hermite quadrature (20 nodes as GPflow and the authors' VI). The rule spaces its
//!   nodes by sd_y, so where another class's sd is much smaller its Phi factor is a step
//!   between nodes and the rule errs (a review against 30-digit quadrature: means (0, 1, -1,
//!   0.5), variances (9, 0.1, 0.1, 0.1), P(f_0 largest) 0.3767 against 0.3663, dP/dmu_0 0.354
//!   against 0.125; equal scales to about 2e-5). Kept for fidelity to GPflow and because
//!   moving it moves every robust-max svgp number; `probit::log_argmax_prob` computes the same
//!   integral accurately at any scale ratio, the candidate for the next numerics batch
//!   (benches/pending/README.md).
//! - [`SoftmaxMc`]: the softmax by Monte Carlo with standard-normal draws the caller supplies
//!   (reparameterised, so the gradients are exact for those draws).
use crate::linalg::{log_sum_exp, softmax_in_place};
use crate::special::{d_log_normal_cdf, log_normal_cdf};
use gauss_quad::hermite::GaussHermite;
use std::f64::consts::{PI, SQRT_2};

/// E[log p(y | f)] and its gradients w.r.t. the marginal means and variances.
#[derive(Clone, Debug, PartialEq)]
pub struct ExpectedLogLik {
    pub value: f64,
    pub d_mean: Vec<f64>,
    pub d_var: Vec<f64>,
}

/// The robust-max likelihood with its quadrature rule.
#[derive(Clone, Debug)]
pub struct RobustMax {
    pub epsilon: f64,
    /// Nodes t_i and weights w_i / sqrt(pi) of the Gauss-Hermite rule for E over N(0, 1/2).
    nodes: Vec<(f64, f64)>,
}

impl RobustMax {
    pub fn new(epsilon: f64, n_nodes: usize) -> Self {
        assert!(epsilon > 0.0 && epsilon < 1.0, "robust-max epsilon in (0, 1)");
        let rule = GaussHermite::new(std::num::NonZeroUsize::new(n_nodes).expect("at least one node"));
        let nodes = rule.iter().map(|(t, w)| (*t, *w / PI.sqrt())).collect();
        RobustMax { epsilon, nodes }
    }

    /// P(f_y > f_c for all c != y) and its gradients in mean and var.
    pub fn prob_is_largest(&self, mean: &[f64], var: &[f64], y: usize) -> ExpectedLogLik {
        let c = mean.len();
        let sd: Vec<f64> = var.iter().map(|v| v.max(1e-300).sqrt()).collect();
        let (mut p, mut d_mean, mut d_sd) = (0.0, vec![0.0; c], vec![0.0; c]);
        let mut z = vec![0.0; c];
        for &(t, w) in &self.nodes {
            // f_y = mu_y + sqrt(2) sd_y t at this node.
            let fy = mean[y] + SQRT_2 * sd[y] * t;
            let mut log_prod = 0.0;
            for k in (0..c).filter(|&k| k != y) {
                z[k] = (fy - mean[k]) / sd[k];
                log_prod += log_normal_cdf(z[k]);
            }
            let term = w * log_prod.exp();
            p += term;
            if term == 0.0 {
                continue;
            }
            for k in (0..c).filter(|&k| k != y) {
                // d term / d z_k = term * phi(z_k) / Phi(z_k).
                let g = term * d_log_normal_cdf(z[k]);
                d_mean[k] -= g / sd[k];
                d_sd[k] -= g * z[k] / sd[k];
                d_mean[y] += g / sd[k];
                d_sd[y] += g * SQRT_2 * t / sd[k];
            }
        }
        let d_var = d_sd.iter().zip(&sd).map(|(g, s)| g / (2.0 * s)).collect();
        ExpectedLogLik { value: p, d_mean, d_var }
    }

    /// (log p(y | f) when f_y is largest, when it is not).
    fn log_levels(&self, c: usize) -> (f64, f64) {
        ((1.0 - self.epsilon).ln(), (self.epsilon / (c as f64 - 1.0)).ln())
    }

    /// E[log p(y | f)] = P log(1 - eps) + (1 - P) log(eps / (C - 1)), P = P(f_y largest).
    pub fn expected_log_lik(&self, mean: &[f64], var: &[f64], y: usize) -> ExpectedLogLik {
        let (hi, lo) = self.log_levels(mean.len());
        let mut e = self.prob_is_largest(mean, var, y);
        e.value = lo + e.value * (hi - lo);
        e.d_mean.iter_mut().chain(e.d_var.iter_mut()).for_each(|g| *g *= hi - lo);
        e
    }

    /// Predictive p(y = k) = P_k (1 - eps) + (1 - P_k) eps / (C - 1), normalised (the
    /// quadrature's P_k sum to one only to its accuracy).
    pub fn predictive(&self, mean: &[f64], var: &[f64]) -> Vec<f64> {
        self.predictive_and_expected_log_lik(mean, var).0
    }

    /// The predictive (E[p(y = k | f)], probabilities, as `predictive`) and E[log p(y = k | f)] for every
    /// class k from one quadrature per class: the two test scores Villacampa-Calvo &
    /// Hernandez-Lobato's Fig. 7 sets side by side (E[log p] <= log E[p] by Jensen).
    pub fn predictive_and_expected_log_lik(&self, mean: &[f64], var: &[f64]) -> (Vec<f64>, Vec<f64>) {
        let c = mean.len();
        let lo = self.epsilon / (c as f64 - 1.0);
        let (hi_log, lo_log) = self.log_levels(c);
        let big: Vec<f64> = (0..c).map(|k| self.prob_is_largest(mean, var, k).value.clamp(0.0, 1.0)).collect();
        let mut p: Vec<f64> = big.iter().map(|pk| pk * (1.0 - self.epsilon) + (1.0 - pk) * lo).collect();
        let s: f64 = p.iter().sum();
        p.iter_mut().for_each(|v| *v /= s);
        let elog = big.iter().map(|pk| lo_log + pk * (hi_log - lo_log)).collect();
        (p, elog)
    }
}

/// The softmax likelihood by Monte Carlo over given standard-normal draws (each a C-vector).
#[derive(Clone, Copy, Debug, Default)]
pub struct SoftmaxMc;

impl SoftmaxMc {
    /// (1/S) sum_s log softmax_y(mu + sd o e_s) and its exact gradients for these draws.
    pub fn expected_log_lik(&self, mean: &[f64], var: &[f64], y: usize, draws: &[Vec<f64>]) -> ExpectedLogLik {
        let c = mean.len();
        let sd: Vec<f64> = var.iter().map(|v| v.max(0.0).sqrt()).collect();
        let (mut value, mut d_mean, mut d_var) = (0.0, vec![0.0; c], vec![0.0; c]);
        let mut f = vec![0.0; c];
        for e in draws {
            f.iter_mut().enumerate().for_each(|(k, v)| *v = mean[k] + sd[k] * e[k]);
            value += f[y] - log_sum_exp(&f);
            softmax_in_place(&mut f);
            for k in 0..c {
                let g = if k == y { 1.0 } else { 0.0 } - f[k];
                d_mean[k] += g;
                // d f_k / d var_k = e_k / (2 sd_k).
                if sd[k] > 0.0 {
                    d_var[k] += g * e[k] / (2.0 * sd[k]);
                }
            }
        }
        let s = draws.len() as f64;
        ExpectedLogLik { value: value / s, d_mean: d_mean.iter().map(|g| g / s).collect(), d_var: d_var.iter().map(|g| g / s).collect() }
    }

    /// (1/S) sum_s softmax(mu + sd o e_s).
    pub fn predictive(&self, mean: &[f64], var: &[f64], draws: &[Vec<f64>]) -> Vec<f64> {
        let c = mean.len();
        let mut p = vec![0.0; c];
        let mut f = vec![0.0; c];
        for e in draws {
            f.iter_mut().enumerate().for_each(|(k, v)| *v = mean[k] + var[k].max(0.0).sqrt() * e[k]);
            softmax_in_place(&mut f);
            p.iter_mut().zip(&f).for_each(|(a, b)| *a += b);
        }
        let s: f64 = p.iter().sum();
        p.iter_mut().for_each(|v| *v /= s);
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::central_differences;
    use rand::SeedableRng;
    use rand_distr::{Distribution, StandardNormal};
    use rand_pcg::Pcg64;

    #[test]
    fn robust_max_probability_matches_brute_force_monte_carlo() {
        let rm = RobustMax::new(1e-3, 20);
        let mean = [0.4, -0.3, 1.1];
        let var: [f64; 3] = [0.8, 1.5, 0.3];
        let mut rng = Pcg64::seed_from_u64(3);
        let n = 1_000_000;
        let mut wins = [0usize; 3];
        for _ in 0..n {
            let f: Vec<f64> = (0..3)
                .map(|k| {
                    mean[k]
                        + var[k].sqrt() * {
                            let e: f64 = StandardNormal.sample(&mut rng);
                            e
                        }
                })
                .collect();
            wins[crate::linalg::argmax(&f)] += 1;
        }
        let mut total = 0.0;
        for y in 0..3 {
            let p = rm.prob_is_largest(&mean, &var, y).value;
            let mc = wins[y] as f64 / n as f64;
            let se = (mc * (1.0 - mc) / n as f64).sqrt();
            assert!((p - mc).abs() < 4.0 * se, "class {y}: quadrature {p} vs Monte Carlo {mc} +- {se}");
            total += p;
        }
        // 20 nodes integrate the kinked product of Phi's to a few 1e-5 (GPflow's accuracy too).
        assert!((total - 1.0).abs() < 1e-4, "P(largest) sums to {total}");
        // The predictive mixes P(largest) with the label noise: (1 - eps) P + eps / (C - 1) (1 - P).
        let pred = rm.predictive(&mean, &var);
        for y in 0..3 {
            let mc = wins[y] as f64 / n as f64;
            let (want, se) = (mc * (1.0 - 1e-3) + (1.0 - mc) * 1e-3 / 2.0, (mc * (1.0 - mc) / n as f64).sqrt());
            assert!((pred[y] - want).abs() < 4.0 * se, "class {y}: predictive {} vs Monte Carlo {want} +- {se}", pred[y]);
        }
    }

    /// The events "f_k is the largest" partition the space, so the unnormalised P_k sum to one
    /// up to the rule's error: about 2e-5 with 20 nodes at equal scales (the module's note).
    /// `predictive` renormalises, so its sum cannot show this.
    #[test]
    fn robust_max_probabilities_of_being_largest_sum_to_one_at_equal_scales() {
        let rm = RobustMax::new(1e-3, 20);
        for (mean, var) in [([0.4, -0.3, 1.1], [0.8; 3]), ([0.0, 0.0, 0.0], [1.0; 3]), ([2.0, -1.0, 0.5], [0.3; 3])] {
            let total: f64 = (0..3).map(|k| rm.prob_is_largest(&mean, &var, k).value).sum();
            assert!((total - 1.0).abs() < 2e-5, "means {mean:?}, variances {var:?}: P(largest) sums to {total}");
        }
    }

    /// At zero variance P(f_y largest) is 1 or 0, so E[log p] is exactly one of the two levels,
    /// log(1 - eps) and log(eps / (C - 1)); and by Jensen E[log p(y = k | f)] <= log E[p(y = k | f)].
    #[test]
    fn robust_max_levels_at_zero_variance_and_jensen() {
        let eps = 0.01;
        let rm = RobustMax::new(eps, 20);
        let mean = [0.4, -0.3, 1.1, 0.2];
        for y in 0..4 {
            let want = if y == 2 { (1.0 - eps).ln() } else { (eps / 3.0).ln() };
            let got = rm.expected_log_lik(&mean, &[0.0; 4], y).value;
            assert!((got - want).abs() < 1e-12, "y = {y}: E[log p] {got} vs {want}");
        }
        let var = [0.8, 1.5, 0.3, 2.0];
        let (pred, elog) = rm.predictive_and_expected_log_lik(&mean, &var);
        for k in 0..4 {
            assert!(elog[k] < pred[k].ln() - 1e-3, "class {k}: E[log p] {} not below log E[p] {}", elog[k], pred[k].ln());
        }
    }

    #[test]
    fn robust_max_gradients_match_finite_differences() {
        let rm = RobustMax::new(1e-3, 20);
        let mean = [0.4, -0.3, 1.1, 0.2];
        let var = [0.8, 1.5, 0.3, 2.0];
        for y in 0..4 {
            let e = rm.expected_log_lik(&mean, &var, y);
            let dm = central_differences(&mean, |m| rm.expected_log_lik(m, &var, y).value);
            let dv = central_differences(&var, |v| rm.expected_log_lik(&mean, v, y).value);
            for k in 0..4 {
                assert!((e.d_mean[k] - dm[k]).abs() < 1e-7, "y={y} dmean[{k}]: {} vs {}", e.d_mean[k], dm[k]);
                assert!((e.d_var[k] - dv[k]).abs() < 1e-7, "y={y} dvar[{k}]: {} vs {}", e.d_var[k], dv[k]);
            }
        }
    }

    #[test]
    fn softmax_monte_carlo_gradients_are_exact_for_the_draws_and_the_estimate_converges() {
        let mut rng = Pcg64::seed_from_u64(4);
        let draws: Vec<Vec<f64>> = (0..50).map(|_| (0..3).map(|_| StandardNormal.sample(&mut rng)).collect()).collect();
        let (mean, var) = ([0.5, -0.2, 0.1], [0.7, 0.2, 1.3]);
        let e = SoftmaxMc.expected_log_lik(&mean, &var, 1, &draws);
        let dm = central_differences(&mean, |m| SoftmaxMc.expected_log_lik(m, &var, 1, &draws).value);
        let dv = central_differences(&var, |v| SoftmaxMc.expected_log_lik(&mean, v, 1, &draws).value);
        for k in 0..3 {
            assert!((e.d_mean[k] - dm[k]).abs() < 1e-7 && (e.d_var[k] - dv[k]).abs() < 1e-7);
        }
        // With zero variance the expectation is log softmax at the mean, exactly.
        let exact = SoftmaxMc.expected_log_lik(&mean, &[0.0; 3], 1, &draws).value;
        assert!((exact - (mean[1] - log_sum_exp(&mean))).abs() < 1e-14);

        // With 1e5 draws the estimates are within 5 standard errors of E[log softmax_1] and
        // E[softmax] by a 40-node Gauss-Hermite product rule (40^3 nodes; the integrands are
        // smooth, so the rule is exact far below the Monte Carlo error). Variances far from 1,
        // where a variance taken for a standard deviation would show.
        let var: [f64; 3] = [3.0, 0.25, 2.0];
        let draws: Vec<Vec<f64>> = (0..100_000).map(|_| (0..3).map(|_| StandardNormal.sample(&mut rng)).collect()).collect();
        let rule: Vec<(f64, f64)> =
            GaussHermite::new(std::num::NonZeroUsize::new(40).unwrap()).iter().map(|(t, w)| (SQRT_2 * t, w / PI.sqrt())).collect();
        let (mut quad_log, mut quad_p) = (0.0, [0.0; 3]);
        for &(a, wa) in &rule {
            for &(b, wb) in &rule {
                for &(c, wc) in &rule {
                    let f: Vec<f64> = [a, b, c].iter().enumerate().map(|(k, e)| mean[k] + var[k].sqrt() * e).collect();
                    let w = wa * wb * wc;
                    let lse = log_sum_exp(&f);
                    quad_log += w * (f[1] - lse);
                    (0..3).for_each(|k| quad_p[k] += w * (f[k] - lse).exp());
                }
            }
        }
        // Standard errors from the draws themselves.
        let per_draw = |g: &dyn Fn(&[f64]) -> f64| {
            let v: Vec<f64> = draws.iter().map(|e| g(&(0..3).map(|k| mean[k] + var[k].sqrt() * e[k]).collect::<Vec<_>>())).collect();
            let m = v.iter().sum::<f64>() / v.len() as f64;
            (v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (v.len() as f64 - 1.0) / v.len() as f64).sqrt()
        };
        let got = SoftmaxMc.expected_log_lik(&mean, &var, 1, &draws).value;
        let se = per_draw(&|f: &[f64]| f[1] - log_sum_exp(f));
        assert!((got - quad_log).abs() < 5.0 * se, "E[log softmax_1]: Monte Carlo {got} vs quadrature {quad_log} (se {se})");
        let pred = SoftmaxMc.predictive(&mean, &var, &draws);
        for k in 0..3 {
            let se = per_draw(&|f: &[f64]| (f[k] - log_sum_exp(f)).exp());
            assert!((pred[k] - quad_p[k]).abs() < 5.0 * se, "class {k}: predictive {} vs quadrature {} (se {se})", pred[k], quad_p[k]);
        }
    }
}
