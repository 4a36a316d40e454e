//! Exact draws from truncated Gaussians for the multinomial probit: a standard normal above a
//! bound (plain rejection near the mode, Robert 1995 in the tail), and the auxiliary y_n of one
//! datum on its cone {y_t > y_j for all j} (the winner from its log-concave marginal by
//! rejection under the tangent parabola, then the others truncated above it).
use super::probit::{h_derivs, h_only, mode_tol, offsets};
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

/// One exact draw of y ~ N(m, I) truncated to the cone where component t is the largest
/// (notes §5.1 recommended method). Returns the number of proposals the winner needed.
pub fn sample_cone(m: &[f64], t: usize, y: &mut [f64], rng: &mut Pcg64) -> usize {
    // In the offset u = y_t - m_t the winner's marginal is exp(h(u)), h = log phi(u) +
    // sum_{j != t} log Phi(u + m_t - m_j): the integrand of log P(t | m), whose h, h' and mode
    // `probit` provides. Because h'' <= -1 everywhere, at any point u0 the tangent parabola
    // bounds h:
    //   h(u) <= h(u0) + h'(u0) (u - u0) - (u - u0)^2 / 2 = const - (u - c)^2 / 2,  c = u0 + h'(u0),
    // so N(c, 1) dominates exp(h) and rejection against it is exact for every u0. Near the
    // mode the acceptance is >= 1/sqrt(K) (h'' >= -K); a loose mode (steps below 0.01) is enough.
    let (a, b) = offsets(m, t);
    let u0 = mode_tol(&a, &b, 1e-2);
    let h0 = h_only(u0, &a, &b);
    let (dh0, _) = h_derivs(u0, &a, &b);
    let c = u0 + dh0;
    let mut proposals = 0;
    let winner = loop {
        proposals += 1;
        let z: f64 = rng.sample(StandardNormal);
        let cand = c + z;
        let d = cand - u0;
        let bound = h0 + dh0 * d - 0.5 * d * d;
        let log_acc = h_only(cand, &a, &b) - bound;
        let u: f64 = rng.random();
        if u.ln() < log_acc {
            break m[t] + cand;
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
