//! Adam (Kingma & Ba 2015) on a flat parameter vector, with a learning-rate schedule.
//!
//! Written here rather than taken from a crate: the Rust optimiser crates (argmin, which the
//! harness uses for L-BFGS, among them) offer no Adam over a plain slice with a per-step
//! schedule and a mask of frozen parameters; the update is a few lines and is tested below.
use serde::{Deserialize, Serialize};

/// A step size per iteration t (from 1): a constant; base (t + tau)^-kappa; or a warm-up from
/// `start` to `end`, log-linear over `steps` iterations, then `end` (Salimbeni et al. 2018's
/// schedule for natural-gradient steps under likelihoods that are not log-concave).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged, deny_unknown_fields)]
pub enum LearningRate {
    Constant(f64),
    Decay { base: f64, tau: f64, kappa: f64 },
    Warmup { start: f64, end: f64, steps: u64 },
}

impl LearningRate {
    pub fn at(&self, t: u64) -> f64 {
        match *self {
            LearningRate::Constant(r) => r,
            LearningRate::Decay { base, tau, kappa } => base * (t as f64 + tau).powf(-kappa),
            LearningRate::Warmup { start, end, steps } => {
                let f = (t.saturating_sub(1) as f64 / steps.max(1) as f64).min(1.0);
                (start.ln() + f * (end.ln() - start.ln())).exp()
            }
        }
    }

    pub fn validate(&self, field: &str) -> Result<(), String> {
        let ok = match *self {
            LearningRate::Constant(r) => r.is_finite() && r > 0.0,
            LearningRate::Decay { base, tau, kappa } => {
                base.is_finite() && base > 0.0 && tau.is_finite() && tau >= 0.0 && kappa.is_finite() && kappa >= 0.0
            }
            LearningRate::Warmup { start, end, .. } => start.is_finite() && start > 0.0 && end.is_finite() && end > 0.0,
        };
        if ok {
            Ok(())
        } else {
            Err(format!(
                "{field}: a positive rate, {{base > 0, tau >= 0, kappa >= 0}} for base (t + tau)^-kappa, or {{start > 0, end > 0, steps}}"
            ))
        }
    }
}

/// The element-wise update of [`Adam::step`], `k` = [beta1, beta2, eps, rate, c1, c2]. Frozen
/// parameters are kept by a select rather than a branch, so that the loop vectorises (sparse
/// methods move 10^6 inducing-input coordinates a step: the branchy scalar loop was 7% of an
/// SEP MNIST step); each element's arithmetic is the same sequence of IEEE operations, so the
/// results are the scalar loop's to the bit.
#[multiversion::multiversion(targets("x86_64+avx512f", "x86_64+avx2"))]
fn adam_update(x: &mut [f64], m: &mut [f64], v: &mut [f64], grad: &[f64], free: &[bool], k: [f64; 6]) {
    let [b1, b2, eps, lr, c1, c2] = k;
    let params = x.iter_mut().zip(m.iter_mut()).zip(v.iter_mut()).zip(grad).zip(free);
    for ((((x, m), v), &g), &free) in params {
        let m_new = b1 * *m + (1.0 - b1) * g;
        let v_new = b2 * *v + (1.0 - b2) * g * g;
        let x_new = *x - lr * (m_new / c1) / ((v_new / c2).sqrt() + eps);
        *m = if free { m_new } else { *m };
        *v = if free { v_new } else { *v };
        *x = if free { x_new } else { *x };
    }
}

/// Adam state for n parameters; `step` descends (minimises).
#[derive(Clone, Debug)]
pub struct Adam {
    rate: LearningRate,
    beta1: f64,
    beta2: f64,
    eps: f64,
    m: Vec<f64>,
    v: Vec<f64>,
    t: u64,
}

impl Adam {
    /// The usual constants: beta1 = 0.9, beta2 = 0.999, eps = 1e-8 (as TensorFlow's 1e-7 only
    /// matters for gradients near zero).
    pub fn new(n: usize, rate: LearningRate) -> Self {
        Adam { rate, beta1: 0.9, beta2: 0.999, eps: 1e-8, m: vec![0.0; n], v: vec![0.0; n], t: 0 }
    }

    /// One step x <- x - rate(t) mhat / (sqrt(vhat) + eps) on the parameters marked free.
    pub fn step(&mut self, x: &mut [f64], grad: &[f64], free: &[bool]) {
        assert_eq!(x.len(), self.m.len());
        assert_eq!(grad.len(), self.m.len());
        assert_eq!(free.len(), self.m.len(), "Adam::step: a free-parameter mask of another length");
        self.t += 1;
        let lr = self.rate.at(self.t);
        let (c1, c2) = (1.0 - self.beta1.powi(self.t as i32), 1.0 - self.beta2.powi(self.t as i32));
        adam_update(x, &mut self.m, &mut self.v, grad, free, [self.beta1, self.beta2, self.eps, lr, c1, c2]);
    }

    pub fn steps_done(&self) -> u64 {
        self.t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_step_has_the_rate_as_its_length_and_frozen_parameters_stay() {
        // mhat = g, vhat = g^2 at t = 1: the step is rate * sign(g) (up to eps).
        let mut adam = Adam::new(3, LearningRate::Constant(0.1));
        let mut x = [1.0, -2.0, 5.0];
        adam.step(&mut x, &[3.0, -0.01, 7.0], &[true, true, false]);
        assert!((x[0] - 0.9).abs() < 1e-8 && (x[1] + 1.9).abs() < 1e-6 && x[2] == 5.0);
    }

    /// The vectorised update against the plain per-element loop with a branch, bit for bit,
    /// over mixed free and frozen parameters (gradients of every sign and scale, zeros).
    #[test]
    fn the_vectorised_update_is_the_scalar_loop_to_the_bit() {
        let n = 1003;
        let grad: Vec<f64> = (0..n).map(|i| ((i * 37 % 101) as f64 - 50.0) * 10f64.powi(i as i32 % 7 - 3)).collect();
        let free: Vec<bool> = (0..n).map(|i| i % 5 != 2).collect();
        let mut adam = Adam::new(n, LearningRate::Constant(0.01));
        let mut x: Vec<f64> = (0..n).map(|i| (i as f64 * 0.37).sin()).collect();
        let (mut x_ref, mut m_ref, mut v_ref) = (x.clone(), vec![0.0; n], vec![0.0; n]);
        for t in 1..=3 {
            adam.step(&mut x, &grad, &free);
            let (c1, c2) = (1.0 - 0.9f64.powi(t), 1.0 - 0.999f64.powi(t));
            for i in 0..n {
                if free[i] {
                    m_ref[i] = 0.9 * m_ref[i] + (1.0 - 0.9) * grad[i];
                    v_ref[i] = 0.999 * v_ref[i] + (1.0 - 0.999) * grad[i] * grad[i];
                    x_ref[i] -= 0.01 * (m_ref[i] / c1) / ((v_ref[i] / c2).sqrt() + 1e-8);
                }
            }
        }
        for i in 0..n {
            assert_eq!(x[i].to_bits(), x_ref[i].to_bits(), "x[{i}]");
            assert_eq!(adam.m[i].to_bits(), m_ref[i].to_bits(), "m[{i}]");
            assert_eq!(adam.v[i].to_bits(), v_ref[i].to_bits(), "v[{i}]");
        }
    }

    #[test]
    fn adam_minimises_an_ill_conditioned_quadratic() {
        // f = 1/2 (x0^2 + 100 x1^2), minimum at 0.
        let mut adam = Adam::new(2, LearningRate::Decay { base: 0.5, tau: 1.0, kappa: 0.5 });
        let mut x = [3.0, -2.0];
        for _ in 0..3000 {
            let g = [x[0], 100.0 * x[1]];
            adam.step(&mut x, &g, &[true, true]);
        }
        assert!(x[0].abs() < 1e-2 && x[1].abs() < 1e-2, "{x:?}");
        assert_eq!(adam.steps_done(), 3000);
    }

    #[test]
    fn schedules_follow_their_formula() {
        let r = LearningRate::Decay { base: 2.0, tau: 3.0, kappa: 0.5 };
        assert!((r.at(1) - 1.0).abs() < 1e-15 && (r.at(13) - 0.5).abs() < 1e-15);
        assert_eq!(LearningRate::Constant(0.01).at(1000), 0.01);
        let w = LearningRate::Warmup { start: 1e-4, end: 1e-1, steps: 3 };
        let rates: Vec<f64> = (1..=5).map(|t| w.at(t)).collect();
        for (r, want) in rates.iter().zip([1e-4, 1e-3, 1e-2, 1e-1, 1e-1]) {
            assert!((r / want - 1.0).abs() < 1e-12, "{rates:?}");
        }
        assert!(LearningRate::Constant(-1.0).validate("lr").is_err());
        let parsed: LearningRate = serde_norway::from_str("{base: 0.1, tau: 1, kappa: 0.6}").unwrap();
        assert_eq!(parsed, LearningRate::Decay { base: 0.1, tau: 1.0, kappa: 0.6 });
    }
}
