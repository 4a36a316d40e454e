//! The adaptive SVI step size of Ranganath, Wang, Blei & Xing (ICML 2013), as Galy-Fajou et
//! al.'s authors ran it (notes §5.2): for one block of natural parameters with noisy targets
//! eta_hat_t, the step that minimises the expected distance to the batch update is estimated
//! from running moments of the noise delta_t = eta_hat_t - eta_t:
//!     g <- (1 - 1/tau) g + delta / tau,   h <- (1 - 1/tau) h + |delta|^2 / tau,
//!     rho = |g|^2 / h,                   tau <- (1 - rho) tau + 1.
//! |g|^2 <= h (Cauchy-Schwarz on the running averages), so rho is in [0, 1]: near 1 while the
//! targets agree (far from the optimum), near 0 when they are dominated by minibatch noise.
//! Written here: no crate implements it.

#[derive(Clone, Debug, PartialEq)]
pub struct AdaptiveRate {
    g: Vec<f64>,
    h: f64,
    tau: f64,
    rho: f64,
}

fn squared_norm(v: &[f64]) -> f64 {
    v.iter().map(|x| x * x).sum()
}

impl AdaptiveRate {
    /// Started from sample noise vectors (the authors: 10 minibatches at the initial q, off the
    /// clock) and a window `tau` (theirs: 10 |S|).
    pub fn from_samples(deltas: &[Vec<f64>], tau: f64) -> Self {
        // With no samples g would have no entries, so |g|^2 = 0 and rho = 0 for ever.
        assert!(!deltas.is_empty(), "AdaptiveRate::from_samples: no sample noise vectors");
        let k = deltas.len() as f64;
        let dim = deltas[0].len();
        assert!(deltas.iter().all(|d| d.len() == dim), "AdaptiveRate::from_samples: noise vectors of different lengths");
        let mut g = vec![0.0; dim];
        for d in deltas {
            g.iter_mut().zip(d).for_each(|(a, b)| *a += b / k);
        }
        let h = deltas.iter().map(|d| squared_norm(d)).sum::<f64>() / k;
        let rho = if h > 0.0 { (squared_norm(&g) / h).min(1.0) } else { 1.0 };
        AdaptiveRate { g, h, tau: tau.max(1.0), rho }
    }

    /// The step for this iteration's noise `delta`.
    pub fn update(&mut self, delta: &[f64]) -> f64 {
        assert_eq!(delta.len(), self.g.len(), "AdaptiveRate::update: a noise vector of another length");
        let w = 1.0 / self.tau;
        self.g.iter_mut().zip(delta).for_each(|(a, b)| *a = (1.0 - w) * *a + w * b);
        self.h = (1.0 - w) * self.h + w * squared_norm(delta);
        self.rho = if self.h > 0.0 { (squared_norm(&self.g) / self.h).min(1.0) } else { 1.0 };
        self.tau = (1.0 - self.rho) * self.tau + 1.0;
        self.rho
    }

    pub fn rho(&self) -> f64 {
        self.rho
    }

    pub fn tau(&self) -> f64 {
        self.tau
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_distr::{Distribution, StandardNormal};
    use rand_pcg::Pcg64;

    #[test]
    fn agreeing_targets_give_full_steps_and_pure_noise_small_ones() {
        // The same delta every time: |g|^2 = h, rho = 1 and the window shrinks to 1.
        let d = vec![0.5, -2.0, 1.0];
        let mut r = AdaptiveRate::from_samples(&[d.clone(), d.clone()], 1000.0);
        assert!((r.rho() - 1.0).abs() < 1e-12);
        assert!((r.update(&d) - 1.0).abs() < 1e-12);
        assert!((r.tau() - 1.0).abs() < 1e-12);

        // Zero-mean noise in 50 dimensions: |g|^2 / h estimates |E delta|^2 / E|delta|^2 = 0,
        // up to the window's averaging, about 1 / tau_eff.
        let mut rng = Pcg64::seed_from_u64(7);
        let mut draw = || (0..50).map(|_| StandardNormal.sample(&mut rng)).collect::<Vec<f64>>();
        let init: Vec<Vec<f64>> = (0..10).map(|_| draw()).collect();
        let mut r = AdaptiveRate::from_samples(&init, 1000.0);
        let mut last = 1.0;
        for _ in 0..2000 {
            last = r.update(&draw());
            assert!((0.0..=1.0).contains(&last));
        }
        assert!(last < 0.05, "noise alone: rho {last}");

        // A signal of norm 1 under noise of norm^2 50: rho settles near 1 / (1 + 50 / tau_eff)
        // and well above the pure-noise value.
        let mut signal = AdaptiveRate::from_samples(&init, 1000.0);
        let mut rho = 0.0;
        for _ in 0..2000 {
            let mut d = draw();
            d[0] += 3.0;
            rho = signal.update(&d);
        }
        assert!(rho > 2.0 * last, "signal {rho} vs noise {last}");
    }
}
