//! Exact draws from truncated Gaussians for the multinomial probit: a standard normal above a
//! bound (plain rejection near the mode, Robert 1995 in the tail), and the auxiliary y_n of one
//! datum on its cone {y_t > y_j for all j} (the winner from its log-concave marginal by
//! rejection under the tangent parabola, then the others truncated above it).
use crate::special::{d_log_normal_cdf, log_normal_cdf};
use rand::RngExt;
use rand_distr::StandardNormal;
use rand_pcg::Pcg64;

/// z ~ N(0, 1) truncated to (b, inf): plain rejection for b < 0.45 (acceptance >= 0.33),
/// else Robert (1995) with an Exp(lambda) proposal shifted to b (acceptance >= 0.76).
/// A bound that is NaN, +inf or so large that b^2 overflows (no draw can be accepted: the loop
/// would never end) gives NaN, which the sampler reports as an error.
pub fn sample_std_normal_above(b: f64, rng: &mut Pcg64) -> f64 {
    if b.is_nan() || b > 1e150 {
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
pub fn winner_log_density_only(y: f64, m: &[f64], t: usize) -> f64 {
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
pub fn winner_log_density(y: f64, m: &[f64], t: usize) -> (f64, f64, f64) {
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
pub fn winner_mode_tol(m: &[f64], t: usize, tol: f64) -> f64 {
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
pub fn sample_cone(m: &[f64], t: usize, y: &mut [f64], rng: &mut Pcg64) -> usize {
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
