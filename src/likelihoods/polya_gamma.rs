//! Polya-Gamma and related closed forms used by augmented (conditionally conjugate) logistic
//! models: the PG mean, the KL of a tilted PG against its untilted prior, and a stable
//! log cosh. Galy-Fajou et al. (2018) need them for the logistic-softmax likelihood; they are
//! likelihood facts, not a method's, so they live here.

/// log cosh(x) without overflow: |x| + log(1 + e^{-2|x|}) - log 2. Accurate to ~1e-16 in
/// absolute terms, not relative ones near 0 (log cosh x ~ x^2/2 cancels: 1e-7 relative at
/// x = 1e-5, all digits at 1e-8), so `pg_kl` at c below about 1e-3 is correct only to ~1e-16
/// absolute and can come out a rounding below 0. Kept as is: ln1p(2 sinh^2(x/2)) would be exact
/// there but moves the last bits of every SC-MGPC number.
pub fn log_cosh(x: f64) -> f64 {
    let a = x.abs();
    a + (-2.0 * a).exp().ln_1p() - std::f64::consts::LN_2
}

/// E[omega] for omega ~ PG(b, c): b / (2c) tanh(c / 2), even in c. The quotient is 0/0 at
/// c = 0 only (it keeps full relative accuracy down to c = 1e-300, a review found); below
/// |c| = 1e-3 the series b/4 (1 - c^2/12 + c^4/120) is used, its truncation error there below
/// b c^6 / 4 * 17/20160 < 1e-21 b, which covers c = 0 and costs nothing.
pub fn pg_mean(b: f64, c: f64) -> f64 {
    let c = c.abs();
    if c < 1e-3 {
        let c2 = c * c;
        0.25 * b * (1.0 - c2 / 12.0 + c2 * c2 / 120.0)
    } else {
        0.5 * b * (0.5 * c).tanh() / c
    }
}

/// KL(PG(b, c) || PG(b, 0)) = b log cosh(c/2) - c^2/2 E[omega], by the tilting identity
/// PG(w | b, c) = cosh^b(c/2) e^{-c^2 w / 2} PG(w | b, 0).
pub fn pg_kl(b: f64, c: f64) -> f64 {
    b * log_cosh(0.5 * c) - 0.5 * c * c * pg_mean(b, c)
}

/// A draw of PG(b, c) by the truncated infinite-sum representation
/// omega = 1/(2 pi^2) sum_{k=1}^{K} g_k / ((k - 1/2)^2 + c^2/(4 pi^2)), g_k ~ Gamma(b, 1).
/// Truncation at K terms biases the mean low by about b / (2 pi^2 K); for tests only.
pub fn pg_sample_truncated(b: f64, c: f64, terms: usize, rng: &mut rand_pcg::Pcg64) -> f64 {
    use rand_distr::{Distribution, Gamma};
    let gamma = Gamma::new(b, 1.0).expect("PG shape b > 0");
    let pi2 = std::f64::consts::PI * std::f64::consts::PI;
    let shift = c * c / (4.0 * pi2);
    (1..=terms).map(|k| gamma.sample(rng) / ((k as f64 - 0.5).powi(2) + shift)).sum::<f64>() / (2.0 * pi2)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn log_cosh_is_stable_and_exact() {
        for x in [-30.0f64, -2.5, -1e-8, 0.0, 0.3, 4.0, 700.0, 1e4] {
            let want = if x.abs() < 300.0 { f64::cosh(x).ln() } else { x.abs() - std::f64::consts::LN_2 };
            assert!((log_cosh(x) - want).abs() < 1e-12 * (1.0 + want.abs()), "{x}: {} vs {want}", log_cosh(x));
        }
    }

    #[test]
    fn the_pg_mean_is_continuous_through_zero() {
        // Either side of the switch at 1e-3 and at 0 the two forms agree.
        for b in [0.5, 1.0, 3.0] {
            assert_eq!(pg_mean(b, 0.0), 0.25 * b);
            let (lo, hi) = (pg_mean(b, 0.999_999e-3), 0.5 * b * (0.5f64 * 1.000_001e-3).tanh() / 1.000_001e-3);
            // Over the 2e-9 gap pg_mean itself moves by b/4 c^2/6 1e-6 ~ 2.5e-13 b/3.
            assert!((lo - hi).abs() < 1e-12, "{lo} vs {hi}");
            assert!((pg_mean(b, -2.0) - pg_mean(b, 2.0)).abs() == 0.0);
        }
    }

    /// U1 (PG part): the closed-form mean against the truncated series sampler, 1e5 draws; the
    /// tolerance is 5 standard errors plus the known truncation bias b / (2 pi^2 K). Also the
    /// tilting identity behind `pg_kl`, E_{PG(b,c)}[e^{c^2 w / 2}] = cosh^b(c/2), to 5 standard
    /// errors of the tilted draws.
    #[test]
    fn the_pg_mean_matches_monte_carlo() {
        let mut rng = rand_pcg::Pcg64::seed_from_u64(19);
        let (terms, draws) = (200, 100_000);
        let pi2 = std::f64::consts::PI.powi(2);
        let mean_and_se = |v: &[f64]| {
            let mean = v.iter().sum::<f64>() / v.len() as f64;
            let sd = (v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (v.len() - 1) as f64).sqrt();
            (mean, sd / (v.len() as f64).sqrt())
        };
        for (b, c) in [(1.0, 0.0), (1.0, 2.5), (3.0, 0.7), (0.4, 6.0)] {
            let w: Vec<f64> = (0..draws).map(|_| pg_sample_truncated(b, c, terms, &mut rng)).collect();
            let (mean, se) = mean_and_se(&w);
            let bias = b / (2.0 * pi2 * terms as f64);
            let want = pg_mean(b, c);
            assert!((mean + bias - want).abs() < 5.0 * se, "PG({b}, {c}): MC {mean} (+bias {bias}) vs {want}, se {se}");
            // E[e^{s w}] under PG(b, c) is prod_k (1 - s / (2 pi^2 d_k))^-b, d_k = (k - 1/2)^2 +
            // c^2 / (4 pi^2): at s = c^2 / 2 the identity; e^{c^2 w / 2} has a finite variance
            // (s = c^2 finite) only for c < pi. The K-term sampler drops the factors k > K, which
            // scale the tilt by exp(-b s / (2 pi^2 K)) to first order (the mean's bias likewise).
            if c > 0.0 && c < 3.0 {
                let s = 0.5 * c * c;
                let tilted: Vec<f64> = w.iter().map(|v| (s * v).exp()).collect();
                let (tilt, se) = mean_and_se(&tilted);
                let want = (b * log_cosh(0.5 * c) - b * s / (2.0 * pi2 * terms as f64)).exp();
                assert!((tilt - want).abs() < 5.0 * se, "tilting identity PG({b}, {c}): {tilt} vs {want} (se {se})");
            }
        }
    }
}
