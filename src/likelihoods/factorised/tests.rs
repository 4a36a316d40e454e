//! The factorised multi-class moments against mathematics: the 3-point rule's closed form and
//! its polynomial exactness, the softmax grid walk against a direct sum over the grid and
//! against Monte Carlo, the log-space fallback, and the multi-probit 1-D form (App. D) against
//! a 2-D / 3-D product rule and Monte Carlo (notes §9 R0 g).
use super::*;
use crate::special::{log_normal_cdf, normal_cdf};
use rand::{RngExt, SeedableRng};
use rand_distr::{Distribution, StandardNormal};
use rand_pcg::Pcg64;

fn close(what: &str, got: f64, want: f64, tol: f64) {
    assert!((got - want).abs() <= tol * (1.0 + want.abs()), "{what}: got {got}, want {want} (tol {tol})");
}

/// E[x^k], x ~ N(0, 1).
fn normal_moment(k: usize) -> f64 {
    if k % 2 == 1 {
        0.0
    } else {
        (1..k).step_by(2).map(|v| v as f64).product()
    }
}

#[test]
fn three_point_rule_is_the_closed_form_and_exact_to_degree_five_per_axis() {
    let rule = NormalRule::gauss_hermite(3);
    let s3 = 3f64.sqrt();
    for (got, want) in rule.nodes.iter().zip([-s3, 0.0, s3]) {
        close("node", *got, want, 1e-14);
    }
    for (got, want) in rule.weights.iter().zip([1.0 / 6.0, 2.0 / 3.0, 1.0 / 6.0]) {
        close("weight", *got, want, 1e-14);
    }
    // The product rule on three axes integrates x1^k1 x2^k2 x3^k3 exactly for every k <= 5 ...
    let grid = |k: [usize; 3]| -> f64 {
        let mut total = 0.0;
        for a in 0..3 {
            for b in 0..3 {
                for c in 0..3 {
                    let w = rule.weights[a] * rule.weights[b] * rule.weights[c];
                    total += w * rule.nodes[a].powi(k[0] as i32) * rule.nodes[b].powi(k[1] as i32) * rule.nodes[c].powi(k[2] as i32);
                }
            }
        }
        total
    };
    for k0 in 0..=5 {
        for k1 in 0..=5 {
            for k2 in 0..=5 {
                let want = normal_moment(k0) * normal_moment(k1) * normal_moment(k2);
                close(&format!("E[x^{k0} y^{k1} z^{k2}]"), grid([k0, k1, k2]), want, 1e-13);
            }
        }
    }
    // ... and not degree 6 (E x^6 = 15, the rule gives 2 * 27 / 6 = 9): the check can fail.
    close("the rule's x^6", grid([6, 0, 0]), 9.0, 1e-13);
    assert_eq!(normal_moment(6), 15.0);
}

/// A cavity for C classes: means in [-2, 2], variances in [0.1, 3], intercepts in [-0.5, 0.5].
fn random_cavity(c: usize, rng: &mut Pcg64) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let h = (0..c).map(|_| rng.random_range(-2.0..2.0)).collect();
    let a = (0..c).map(|_| rng.random_range(0.1..3.0)).collect();
    let p = (0..c).map(|_| rng.random_range(-0.5..0.5)).collect();
    (h, a, p)
}

/// The softmax product rule written directly: every grid point, its weight and P(y | u) by a
/// logsumexp, summed in log space; (log Z, means, variances).
fn direct_softmax(rule: &NormalRule, p: &[f64], y: usize, h: &[f64], a: &[f64]) -> (f64, Vec<f64>, Vec<f64>) {
    let (c, n) = (p.len(), rule.len());
    let points = n.pow(c as u32);
    let mut log_q = Vec::new();
    let mut us = Vec::new();
    for g in 0..points {
        let mut rest = g;
        let mut u = vec![0.0; c];
        let mut lw = 0.0;
        for k in 0..c {
            let idx = rest % n;
            rest /= n;
            u[k] = h[k] + a[k].sqrt() * rule.nodes[idx];
            lw += rule.weights[idx].ln();
        }
        let f: Vec<f64> = (0..c).map(|k| u[k] + p[k]).collect();
        log_q.push(lw + f[y] - log_sum_exp(&f));
        us.push(u);
    }
    let log_z = log_sum_exp(&log_q);
    let mut mean = vec![0.0; c];
    let mut second = vec![0.0; c];
    for (lq, u) in log_q.iter().zip(&us) {
        let q = (lq - log_z).exp();
        for k in 0..c {
            mean[k] += q * u[k];
            second[k] += q * u[k] * u[k];
        }
    }
    let var = (0..c).map(|k| second[k] - mean[k] * mean[k]).collect();
    (log_z, mean, var)
}

#[test]
fn softmax_walk_equals_the_direct_product_rule_sum() {
    let mut rng = Pcg64::seed_from_u64(1);
    for (c, n) in [(3, 3), (4, 3), (3, 5), (6, 3)] {
        for _ in 0..5 {
            let (h, a, p) = random_cavity(c, &mut rng);
            let y = rng.random_range(0..c);
            let lik = FactorisedLik::softmax(n, p.clone());
            let t = lik.tilted(y, &h, &a);
            let (log_z, mean, var) = direct_softmax(&NormalRule::gauss_hermite(n), &p, y, &h, &a);
            close(&format!("C {c}, N {n}: log Z"), t.log_z, log_z, 1e-12);
            for k in 0..c {
                close(&format!("C {c}, N {n}: mean {k}"), t.mean[k], mean[k], 1e-11);
                close(&format!("C {c}, N {n}: var {k}"), t.var[k], var[k], 1e-10);
                // Log-concave likelihood: the tilted variance is below the cavity's.
                assert!(t.var[k] < a[k], "C {c}: var {k} {} not below {}", t.var[k], a[k]);
            }
        }
    }
}

/// Far on the wrong side every grid value underflows in the linear domain; the log-space
/// fallback still gives the product rule's value (the direct sum is in log space throughout).
#[test]
fn softmax_far_on_the_wrong_side_falls_back_to_log_space() {
    let rule = NormalRule::gauss_hermite(3);
    let (h, a, p) = (vec![-700.0, 100.0, 0.0], vec![1.0, 2.0, 0.5], vec![0.0, 0.1, -0.2]);
    let lik = FactorisedLik::Softmax { rule: rule.clone(), intercepts: p.clone() };
    let t = lik.tilted(0, &h, &a);
    assert!(t.is_finite(), "{t:?}");
    assert!(t.log_z < -575.0, "log Z {} should be about -800", t.log_z);
    let (log_z, mean, var) = direct_softmax(&rule, &p, 0, &h, &a);
    close("log Z", t.log_z, log_z, 1e-12);
    for k in 0..3 {
        close(&format!("mean {k}"), t.mean[k], mean[k], 1e-10);
        close(&format!("var {k}"), t.var[k], var[k], 1e-8);
    }
    // And in the ordinary regime the fallback equals the walk.
    let (h, a) = (vec![0.3, -0.4, 1.0], vec![1.0, 0.7, 2.0]);
    let mut masses = vec![Vec::new(); 3];
    let sd: Vec<f64> = a.iter().map(|v: &f64| v.sqrt()).collect();
    let lz = softmax_log_grid(&rule, &p, 2, &h, &sd, &mut masses);
    close("fallback log Z", lz, lik.tilted(2, &h, &a).log_z, 1e-13);
}

/// Seeded Monte Carlo estimates of Z = E[f(u)] and the tilted means and variances for a
/// likelihood value f, with standard errors (ratio estimators by the delta method).
struct McMoments {
    z: f64,
    z_se: f64,
    mean: Vec<f64>,
    mean_se: Vec<f64>,
    var: Vec<f64>,
    var_se: Vec<f64>,
}

/// One Monte Carlo draw: the latent vector and the likelihood value there.
type Draw = (Vec<f64>, f64);

fn monte_carlo(c: usize, draws: usize, seed: u64, mut sample: impl FnMut(&mut Pcg64) -> Draw) -> McMoments {
    let mut rng = Pcg64::seed_from_u64(seed);
    let samples: Vec<Draw> = (0..draws).map(|_| sample(&mut rng)).collect();
    let nf = draws as f64;
    let z = samples.iter().map(|s| s.1).sum::<f64>() / nf;
    let z_se = (samples.iter().map(|s| (s.1 - z).powi(2)).sum::<f64>() / (nf - 1.0)).sqrt() / nf.sqrt();
    let mut out = McMoments { z, z_se, mean: vec![0.0; c], mean_se: vec![0.0; c], var: vec![0.0; c], var_se: vec![0.0; c] };
    for k in 0..c {
        let m = samples.iter().map(|s| s.1 * s.0[k]).sum::<f64>() / nf / z;
        let v = samples.iter().map(|s| s.1 * (s.0[k] - m).powi(2)).sum::<f64>() / nf / z;
        let sd = |f: &dyn Fn(&Draw) -> f64| (samples.iter().map(|s| f(s).powi(2)).sum::<f64>() / (nf - 1.0)).sqrt() / nf.sqrt() / z;
        out.mean[k] = m;
        out.mean_se[k] = sd(&|s| s.1 * (s.0[k] - m));
        out.var[k] = v;
        out.var_se[k] = sd(&|s| s.1 * ((s.0[k] - m).powi(2) - v));
    }
    out
}

fn within(what: &str, got: f64, want: f64, se: f64) {
    assert!((got - want).abs() <= 5.0 * se + 1e-12, "{what}: quadrature {got}, Monte Carlo {want} +- {se} (5 SE)");
}

#[test]
fn softmax_moments_match_a_high_order_rule_and_monte_carlo() {
    let mut rng = Pcg64::seed_from_u64(2);
    for case in 0..3 {
        let (h, a, p) = random_cavity(3, &mut rng);
        let y = case % 3;
        // A 20-point product rule (this module) against an independent 40-point direct sum
        // (the 20-point rule's own error here is about 1e-8).
        let t = FactorisedLik::softmax(20, p.clone()).tilted(y, &h, &a);
        let (log_z, mean, var) = direct_softmax(&NormalRule::gauss_hermite(40), &p, y, &h, &a);
        close(&format!("case {case}: log Z vs 40^3 rule"), t.log_z, log_z, 1e-7);
        for k in 0..3 {
            close(&format!("case {case}: mean {k} vs 40^3 rule"), t.mean[k], mean[k], 1e-6);
            close(&format!("case {case}: var {k} vs 40^3 rule"), t.var[k], var[k], 1e-6);
        }
        let mc = monte_carlo(3, 400_000, 10 + case as u64, |r| {
            let u: Vec<f64> = (0..3).map(|k| h[k] + a[k].sqrt() * gauss(r)).collect();
            let f: Vec<f64> = (0..3).map(|k| u[k] + p[k]).collect();
            let prob = (f[y] - log_sum_exp(&f)).exp();
            (u, prob)
        });
        within(&format!("case {case}: Z"), t.log_z.exp(), mc.z, mc.z_se);
        for k in 0..3 {
            within(&format!("case {case}: mean {k}"), t.mean[k], mc.mean[k], mc.mean_se[k]);
            within(&format!("case {case}: var {k}"), t.var[k], mc.var[k], mc.var_se[k]);
        }
        // The paper's 3-point rule is crude (exact to degree 5 per axis, P18) but close here.
        let t3 = FactorisedLik::softmax(3, p.clone()).tilted(y, &h, &a);
        close(&format!("case {case}: 3-point log Z"), t3.log_z, t.log_z, 0.05);
    }
}

/// App. D's moments by an independent rule: Z and u_y's moments by a 2-D product rule over
/// (u_y, n_y), u_j's (j != y) by a 3-D rule over (u_y, n_y, u_j) with n_j integrated in closed
/// form, P(v_j < v_y | u_j, v_y) = Phi(v_y - u_j - p_j), and the other classes by
/// Phi((v_y - mu_i) / sigma_i).
fn probit_product_rule(rule: &NormalRule, p: &[f64], y: usize, h: &[f64], a: &[f64]) -> (f64, Vec<f64>, Vec<f64>) {
    let c = p.len();
    let sig: Vec<f64> = a.iter().map(|v| (v + 1.0).sqrt()).collect();
    let others_but = |vy: f64, skip: usize| -> f64 {
        (0..c).filter(|&i| i != y && i != skip).map(|i| normal_cdf((vy - h[i] - p[i]) / sig[i])).product()
    };
    let (mut z, mut my, mut sy) = (0.0, 0.0, 0.0);
    for (xa, wa) in rule.nodes.iter().zip(&rule.weights) {
        for (xb, wb) in rule.nodes.iter().zip(&rule.weights) {
            let uy = h[y] + a[y].sqrt() * xa;
            let vy = uy + p[y] + xb;
            let f = wa * wb * others_but(vy, usize::MAX);
            z += f;
            my += f * uy;
            sy += f * uy * uy;
        }
    }
    let mut mean = vec![0.0; c];
    let mut var = vec![0.0; c];
    mean[y] = my / z;
    var[y] = sy / z - mean[y] * mean[y];
    for j in (0..c).filter(|&j| j != y) {
        let (mut zj, mut m1, mut m2) = (0.0, 0.0, 0.0);
        for (xa, wa) in rule.nodes.iter().zip(&rule.weights) {
            for (xb, wb) in rule.nodes.iter().zip(&rule.weights) {
                let vy = h[y] + a[y].sqrt() * xa + p[y] + xb;
                let rest = others_but(vy, j);
                for (xc, wc) in rule.nodes.iter().zip(&rule.weights) {
                    let uj = h[j] + a[j].sqrt() * xc;
                    let f = wa * wb * wc * rest * normal_cdf(vy - uj - p[j]);
                    zj += f;
                    m1 += f * uj;
                    m2 += f * uj * uj;
                }
            }
        }
        close(&format!("3-D rule's Z for class {j} vs the 2-D one"), zj, z, 1e-9);
        mean[j] = m1 / zj;
        var[j] = m2 / zj - mean[j] * mean[j];
    }
    (z.ln(), mean, var)
}

#[test]
fn multi_probit_one_dimensional_form_matches_a_product_rule_and_monte_carlo() {
    let mut rng = Pcg64::seed_from_u64(3);
    for case in 0..3 {
        let (h, a, p) = random_cavity(3, &mut rng);
        let y = case % 3;
        let t = FactorisedLik::multi_probit(p.clone()).tilted(y, &h, &a);
        let (log_z, mean, var) = probit_product_rule(&NormalRule::gauss_hermite(40), &p, y, &h, &a);
        close(&format!("case {case}: log Z vs product rule"), t.log_z, log_z, 1e-8);
        for k in 0..3 {
            close(&format!("case {case}: mean {k} vs product rule"), t.mean[k], mean[k], 1e-7);
            close(&format!("case {case}: var {k} vs product rule"), t.var[k], var[k], 1e-7);
            assert!(t.var[k] < a[k], "case {case}: var {k} {} not below {}", t.var[k], a[k]);
        }
        // Monte Carlo on eq. 8 itself: draw u and the noise n, weight by 1{v_y is largest}.
        let mc = monte_carlo(3, 400_000, 20 + case as u64, |r| {
            let u: Vec<f64> = (0..3).map(|k| h[k] + a[k].sqrt() * gauss(r)).collect();
            let v: Vec<f64> = (0..3).map(|k| u[k] + p[k] + gauss(r)).collect::<Vec<f64>>();
            let top = (0..3).all(|k| v[k] <= v[y]);
            (u, if top { 1.0 } else { 0.0 })
        });
        within(&format!("case {case}: Z"), t.log_z.exp(), mc.z, mc.z_se);
        for k in 0..3 {
            within(&format!("case {case}: mean {k}"), t.mean[k], mc.mean[k], mc.mean_se[k]);
            within(&format!("case {case}: var {k}"), t.var[k], mc.var[k], mc.var_se[k]);
        }
    }
}

/// Far on the wrong side (u_y's cavity mean 37 below another class's) the integrand over v_y
/// lives in the tail of N(x) (its mode near x = 10), where the plain 32-node rule has almost no
/// weight (it fails this test; checked by hand with the centring switched off): the mode-centred rule
/// against dense midpoint sums, 1-D over x for Z and u_y (u_y | v_y Gaussian), 2-D over (x, u_j)
/// for the other classes (n_j integrated in closed form).
#[test]
fn multi_probit_far_on_the_wrong_side_follows_the_integrand_into_the_tail() {
    let (h, a, p) = (vec![-25.0, 12.0, 1.0], vec![0.2, 2.0, 0.5], vec![0.0, 0.2, -0.1]);
    let y = 0;
    let t = FactorisedLik::multi_probit(p.clone()).tilted(y, &h, &a);
    assert!(t.is_finite(), "{t:?}");
    let mu: Vec<f64> = (0..3).map(|k| h[k] + p[k]).collect();
    let sig: Vec<f64> = a.iter().map(|v| (v + 1.0).sqrt()).collect();
    let ln_norm = |x: f64| -0.5 * x * x - crate::special::LN_SQRT_2PI;
    let log_rest = |x: f64, skip: usize| -> f64 {
        (0..3).filter(|&i| i != y && i != skip).map(|i| log_normal_cdf((sig[y] * x + mu[y] - mu[i]) / sig[i])).sum()
    };
    // 1-D: x in [-40, 40].
    let (lo, hi, m) = (-40.0, 40.0, 80_000);
    let dx = (hi - lo) / m as f64;
    let xs: Vec<f64> = (0..m).map(|i| lo + (i as f64 + 0.5) * dx).collect();
    let logs: Vec<f64> = xs.iter().map(|&x| ln_norm(x) + log_rest(x, usize::MAX) + dx.ln()).collect();
    let log_z = log_sum_exp(&logs);
    let w: Vec<f64> = logs.iter().map(|l| (l - log_z).exp()).collect();
    let mx: f64 = w.iter().zip(&xs).map(|(w, x)| w * x).sum();
    let vx: f64 = w.iter().zip(&xs).map(|(w, x)| w * (x - mx) * (x - mx)).sum();
    close("log Z", t.log_z, log_z, 1e-7);
    close("mean y", t.mean[y], h[y] + a[y] / sig[y] * mx, 1e-6);
    close("var y", t.var[y], a[y] / (sig[y] * sig[y]) + (a[y] / sig[y]).powi(2) * vx, 1e-6);
    // 2-D: (x, u_j = h_j + sqrt(a_j) s), x in [-10, 30], s in [-40, 10] (u_1 is pushed about
    // 20 prior standard deviations down).
    for j in [1, 2] {
        let (mx2, ms) = (4000, 2000);
        let dx = 40.0 / mx2 as f64;
        let ds = 50.0 / ms as f64;
        let mut terms = Vec::with_capacity(mx2 * ms);
        let mut uj = Vec::with_capacity(mx2 * ms);
        for ix in 0..mx2 {
            let x = -10.0 + (ix as f64 + 0.5) * dx;
            let base = ln_norm(x) + log_rest(x, j) + dx.ln() + ds.ln();
            let vy = sig[y] * x + mu[y];
            for is in 0..ms {
                let sv = -40.0 + (is as f64 + 0.5) * ds;
                let u = h[j] + a[j].sqrt() * sv;
                terms.push(base + ln_norm(sv) + log_normal_cdf(vy - u - p[j]));
                uj.push(u);
            }
        }
        let lz = log_sum_exp(&terms);
        close(&format!("log Z by the 2-D sum for class {j}"), lz, log_z, 1e-6);
        let w: Vec<f64> = terms.iter().map(|l| (l - lz).exp()).collect();
        let m1: f64 = w.iter().zip(&uj).map(|(w, u)| w * u).sum();
        let v1: f64 = w.iter().zip(&uj).map(|(w, u)| w * (u - m1) * (u - m1)).sum();
        close(&format!("mean {j}"), t.mean[j], m1, 1e-5);
        close(&format!("var {j}"), t.var[j], v1, 1e-5);
    }
}

#[test]
fn predictive_probabilities_are_the_normalised_log_z() {
    let mut rng = Pcg64::seed_from_u64(4);
    // The softmax product rule sums to one at every grid point; the multi-probit's classes
    // are integrated by different adapted 1-D rules, each with its own small error (~1e-10).
    for (lik, tol) in
        [(FactorisedLik::softmax(3, vec![0.1, -0.2, 0.0, 0.3]), 1e-13), (FactorisedLik::multi_probit(vec![0.1, -0.2, 0.0, 0.3]), 1e-9)]
    {
        let (h, a, _) = random_cavity(4, &mut rng);
        let probs = lik.predictive(&h, &a);
        close("sum", probs.iter().sum::<f64>(), 1.0, 1e-14);
        let z: Vec<f64> = (0..4).map(|y| lik.tilted(y, &h, &a).log_z.exp()).collect();
        // The events partition the space: the unnormalised values already sum to one.
        close("sum of Z", z.iter().sum::<f64>(), 1.0, tol);
        for y in 0..4 {
            close(&format!("class {y}"), probs[y], z[y], tol);
        }
    }
}

fn gauss(r: &mut Pcg64) -> f64 {
    StandardNormal.sample(r)
}

/// The Gauss-Hermite rule with gauss-quad's nodes and weights recomputed from the Christoffel
/// function, accurate in relative terms at every node: w_k = 1 / sum_{j<N} p_j(t_k)^2 for the
/// orthonormal Hermite polynomials p_j of the weight exp(-t^2) (t = x / sqrt 2), by their
/// three-term recurrence p_{j+1} = sqrt(2/(j+1)) t p_j - sqrt(j/(j+1)) p_{j-1}, rescaled
/// against overflow; normal-rule weight w / sqrt(pi). Checked against numpy and mpmath values
/// in `gauss_hermite_weights_match_independent_values_to_their_accuracy`.
fn christoffel_rule(n: usize) -> NormalRule {
    let nodes = NormalRule::gauss_hermite(n).nodes;
    let log_weights: Vec<f64> = nodes
        .iter()
        .map(|&x| {
            let t = x / SQRT_2;
            let (mut prev, mut cur, mut sum, mut log_scale) = (0.0f64, PI.powf(-0.25), PI.powf(-0.5), 0.0f64);
            for j in 0..n - 1 {
                let jf = j as f64;
                let next = (2.0 / (jf + 1.0)).sqrt() * t * cur - (jf / (jf + 1.0)).sqrt() * prev;
                (prev, cur) = (cur, next);
                sum += cur * cur;
                if sum > 1e100 {
                    (prev, cur, sum) = (prev * 1e-50, cur * 1e-50, sum * 1e-100);
                    log_scale += 100.0 * std::f64::consts::LN_10;
                }
            }
            -(sum.ln() + log_scale) - 0.5 * PI.ln()
        })
        .collect();
    let weights = log_weights.iter().map(|l| l.exp()).collect();
    NormalRule { nodes, weights, log_weights }
}

/// The rule's nodes and log-weights at N = 20 and N = 40 (far-tail weights) against
/// numpy's, hard-coded (the non-negative half; the rule is symmetric):
///     python3 -c "import numpy as np; x, w = np.polynomial.hermite.hermgauss(N);
///       print(list(np.sqrt(2) * x[x > 0]), list(np.log(w[x > 0]) - 0.5 * np.log(np.pi)))"
/// (numpy 2.4.6; these agree with a 50-digit mpmath evaluation, roots of H_N and
/// w = 2^{N-1} N! sqrt(pi) / (N^2 H_{N-1}(t)^2), to 3e-14 in log w). gauss-quad's Golub-Welsch
/// weights are the squared first components of eigenvectors whose components carry an
/// absolute error of a few ulps, so a weight w has a relative error of order eps / sqrt(w):
/// 1e-14 in the bulk, 1e-9 at N = 20's outermost node (w = 1e-13), 5 % at N = 40's
/// (w = 1.4e-29). The tolerance on log w is 1e-13 + 32 eps / sqrt(w); the recurrence of
/// `christoffel_rule` is accurate everywhere (1e-12 relative).
#[test]
fn gauss_hermite_weights_match_independent_values_to_their_accuracy() {
    let cases: [(usize, &[f64], &[f64]); 2] = [
        (
            20,
            &[
                0.3469641570813559,
                1.0429453488027511,
                1.745247320814127,
                2.458663611172368,
                3.18901481655339,
                3.9439673506573163,
                4.734581334046055,
                5.5787388058932015,
                6.510590157013655,
                7.619048541679759,
            ],
            &[
                -1.344028046485978,
                -1.8217692891416606,
                -2.7886144987405204,
                -4.268852429362512,
                -6.303382957935047,
                -8.957045728135233,
                -12.333424067234969,
                -16.60789549709157,
                -22.11676111764163,
                -29.704241511181127,
            ],
        ),
        (
            40,
            &[
                0.24683289602272435,
                0.7408707252859306,
                1.2360320047991582,
                1.7330905906317216,
                2.232859218634872,
                2.7362083404654314,
                3.2440887329998707,
                3.757559776168986,
                4.2778261563627495,
                4.8062871920938735,
                5.344605445720087,
                5.894805675372019,
                6.459423377583768,
                7.041738406453829,
                7.646163764541462,
                8.278940623659476,
                8.949504543855554,
                9.673556366934031,
                10.481560534674268,
                11.453377841548733,
            ],
            &[
                -1.6551729475411765,
                -1.8976460448073365,
                -2.38404920270534,
                -3.1173451416138036,
                -4.102103939927234,
                -5.344666088282054,
                -6.8533816675892325,
                -8.638948883135956,
                -10.714888164909972,
                -13.098208745557471,
                -15.810359202332004,
                -18.878613964400387,
                -22.338159341081,
                -26.235361104329137,
                -30.633156137557403,
                -35.62057479952705,
                -41.331173614492016,
                -47.98368286931244,
                -55.99175631847168,
                -66.39527186689521,
            ],
        ),
    ];
    for (n, nodes, log_w) in cases {
        let rule = NormalRule::gauss_hermite(n);
        let exact = christoffel_rule(n);
        assert_eq!(rule.len(), n);
        let half = n / 2;
        for k in 0..half {
            // Node k of the positive half and its mirror image.
            for idx in [half + k, half - 1 - k] {
                let what = format!("N {n}, node {idx}");
                assert!(
                    (rule.nodes[idx].abs() - nodes[k]).abs() < 1e-13 * nodes[k].max(1.0),
                    "{what}: {} vs {}",
                    rule.nodes[idx],
                    nodes[k]
                );
                let tol = 1e-13 + 32.0 * f64::EPSILON / log_w[k].mul_add(0.5, 0.0).exp();
                let err = rule.log_weights[idx] - log_w[k];
                assert!(err.abs() < tol, "{what}: log w {} vs {} (error {err:e}, tolerance {tol:e})", rule.log_weights[idx], log_w[k]);
                let err = exact.log_weights[idx] - log_w[k];
                assert!(err.abs() < 1e-12, "{what}: recurrence log w {} vs {} (error {err:e})", exact.log_weights[idx], log_w[k]);
            }
        }
        assert!((rule.weights.iter().sum::<f64>() - 1.0).abs() < 1e-14);
    }
}

/// The multi-probit tilted moments by a dense midpoint sum over the standardised v_y, x, of
/// the same 1-D integrals the rule approximates (no Gauss-Hermite anywhere):
///     Z = int N(x) prod_{c != y} Phi(z_c(x)) dx,  z_c(x) = (sigma_y x + mu_y - mu_c) / sigma_c,
/// u_y's moments from x's under the tilted density (u_y | v_y Gaussian), and for c != y
/// h'_c = h_c - (a_c / sigma_c) E[H(z_c)], a'_c = a_c - (a_c / sigma_c)^2 (E[H]^2 + E[H z_c]),
/// H = N / Phi (checked against product rules and Monte Carlo above). The integrand is
/// log-concave with curvature at least 1, so it is negligible 30 units from its largest value
/// on a coarse scan of [-100, 100]; the grid there has step 2e-3 (the integrand's narrowest
/// feature, the width sigma_c / sigma_y of a steep factor, is at least 0.01 for the cavities
/// below: five grid steps, where the midpoint rule's error is of order exp(-2 pi^2 25)).
fn probit_dense(p: &[f64], y: usize, h: &[f64], a: &[f64]) -> (f64, Vec<f64>, Vec<f64>) {
    let c = p.len();
    let mu: Vec<f64> = (0..c).map(|k| h[k] + p[k]).collect();
    let sig: Vec<f64> = a.iter().map(|v| (v + 1.0).sqrt()).collect();
    let z = |x: f64, j: usize| (sig[y] * x + mu[y] - mu[j]) / sig[j];
    let g = |x: f64| -0.5 * x * x - crate::special::LN_SQRT_2PI + (0..c).filter(|&j| j != y).map(|j| log_normal_cdf(z(x, j))).sum::<f64>();
    let x0 = (0..=20_000).map(|i| -100.0 + 0.01 * i as f64).max_by(|u, v| g(*u).total_cmp(&g(*v))).unwrap();
    let (m, dx) = (30_000, 2e-3);
    let xs: Vec<f64> = (0..m).map(|i| x0 - 30.0 + (i as f64 + 0.5) * dx).collect();
    let logs: Vec<f64> = xs.iter().map(|&x| g(x) + dx.ln()).collect();
    let log_z = log_sum_exp(&logs);
    let w: Vec<f64> = logs.iter().map(|l| (l - log_z).exp()).collect();
    let ex: f64 = w.iter().zip(&xs).map(|(w, x)| w * x).sum();
    let vx: f64 = w.iter().zip(&xs).map(|(w, x)| w * (x - ex) * (x - ex)).sum();
    let mut mean = vec![0.0; c];
    let mut var = vec![0.0; c];
    for j in 0..c {
        let r = a[j] / sig[j];
        if j == y {
            mean[j] = h[j] + r * ex;
            var[j] = a[j] / (sig[j] * sig[j]) + r * r * vx;
        } else {
            let (mut e_h, mut e_hz) = (0.0, 0.0);
            for (w, &x) in w.iter().zip(&xs) {
                let (zj, hz) = (z(x, j), d_log_normal_cdf(z(x, j)));
                e_h += w * hz;
                e_hz += w * hz * zj;
            }
            mean[j] = h[j] - r * e_h;
            var[j] = a[j] - r * r * (e_h * e_h + e_hz);
        }
    }
    (log_z, mean, var)
}

/// A multi-probit cavity: intercepts p, class y, means h, variances a.
type ProbitCavity = (Vec<f64>, usize, Vec<f64>, Vec<f64>);

/// Random multi-probit cavities: C in 3..=6, means in [-3, 3], variances log-uniform in
/// [0.05, a_max], intercepts in [-0.5, 0.5], and every third one far on the wrong side (u_y's
/// mean 10 to 30 below the others').
fn probit_cavities(count: usize, a_max: f64, seed: u64) -> Vec<ProbitCavity> {
    let mut rng = Pcg64::seed_from_u64(seed);
    (0..count)
        .map(|i| {
            let c = rng.random_range(3..=6);
            let y = rng.random_range(0..c);
            let mut h: Vec<f64> = (0..c).map(|_| rng.random_range(-3.0..3.0)).collect();
            let a: Vec<f64> = (0..c).map(|_| rng.random_range(0.05f64.ln()..a_max.ln()).exp()).collect();
            let p: Vec<f64> = (0..c).map(|_| rng.random_range(-0.5..0.5)).collect();
            if i % 3 == 2 {
                h[y] -= rng.random_range(10.0..30.0);
            }
            (p, y, h, a)
        })
        .collect()
}

/// The largest differences between two tilted-moment results over cavities: |log Z| and the
/// relative mean and variance, max |x - x'| / (1 + |x'|).
fn worst(pairs: impl Iterator<Item = (TiltedMoments, (f64, Vec<f64>, Vec<f64>))>) -> (f64, f64) {
    let (mut dz, mut dm) = (0.0f64, 0.0f64);
    for (t, (lz, m, v)) in pairs {
        dz = dz.max((t.log_z - lz).abs());
        for k in 0..m.len() {
            dm = dm.max((t.mean[k] - m[k]).abs() / (1.0 + m[k].abs())).max((t.var[k] - v[k]).abs() / (1.0 + v[k].abs()));
        }
    }
    (dz, dm)
}

/// The adapted rule against the dense sum on random cavities, a third far on the wrong side
/// of the decision, with variances up to 1e4 (so that sigma_y / sigma_c reaches about 100,
/// where a Gauss-Hermite rule on the Gaussian's scale sees Phi(z_c) as a step between two
/// nodes: the mode-centred 32-node rule the multi-probit had erred there by up to 9e-2 in
/// log Z), and on the hand-made worst case, one class's variance 1e4 against 0.05.
#[test]
fn multi_probit_adapted_rule_matches_the_dense_sum_at_any_variance_ratio() {
    let mut cases = probit_cavities(120, 1e4, 9);
    cases.push((vec![0.0, 0.1, -0.2], 0, vec![0.3, -0.5, 1.0], vec![1e4, 0.05, 0.05]));
    cases.push((vec![0.0, 0.1, -0.2], 1, vec![0.3, -0.5, 1.0], vec![1e4, 0.05, 0.05]));
    cases.push((vec![0.0, 0.0, 0.0, 0.0], 2, vec![-20.0, 3.0, -30.0, 1.0], vec![0.05, 1e4, 0.05, 300.0]));
    let pairs = cases.iter().map(|(p, y, h, a)| {
        let t = FactorisedLik::multi_probit(p.clone()).tilted(*y, h, a);
        assert!(t.is_finite() && t.log_z <= 0.0, "{t:?} at {:?}", (p, y, h, a));
        (t, probit_dense(p, *y, h, a))
    });
    let (dz, dm) = worst(pairs);
    assert!(dz < 1e-9 && dm < 1e-8, "the adapted rule vs the dense sum: log Z {dz:e}, moments {dm:e}");
}
