//! Per-datum log-likelihoods of a sample (logit or probit) and the streaming log-space
//! accumulator of importance weights.
use super::*;

thread_local! {
    /// The probit's r (C - 1) arguments and their Phi values, reused across calls.
    static PROBIT_SCRATCH: std::cell::RefCell<Vec<f64>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The likelihood as evaluated inside the sampler: exact softmax, or the probit by quadrature
/// or by the unbiased u-sample average (1/R) sum_r prod_{j != c} Phi(u_r + f_c - f_j).
#[derive(Clone, Copy, Debug)]
pub(super) struct LikEval {
    pub(super) lik: Lik,
    pub(super) u_samples: usize,
}

impl LikEval {
    /// log p(y | f); the u-sample probit draws its u's from `rng`.
    pub(super) fn log_prob(self, f: &[f64], y: usize, rng: &mut Pcg64) -> f64 {
        if self.lik == Lik::Probit && self.u_samples > 0 {
            let mut out = [0.0];
            self.probit_log_probs(f, &[y], std::slice::from_mut(rng), &mut out);
            out[0]
        } else {
            self.exact_log_prob(f, y)
        }
    }
    /// u-draws per datum: none for the logit.
    pub(super) fn draws_per_datum(self) -> usize {
        match self.lik {
            Lik::Probit => self.u_samples,
            Lik::Logit => 0,
        }
    }
    /// log p(y | f) without u-draws: the softmax, or the probit by 1-D quadrature.
    pub(super) fn exact_log_prob(self, f: &[f64], y: usize) -> f64 {
        match self.lik {
            Lik::Logit => f[y] - log_sum_exp(f),
            Lik::Probit => log_probit_class_prob(f, y),
        }
    }
    /// The u-sample probit's log p(y_k | f_k) for several data at once (f_k = `f[k C..]`; the
    /// k-th datum's u-draws from `rngs[k]`, or all from `rngs[0]` in turn if there is one): one
    /// vectorised Phi call for all of them.
    pub(super) fn probit_log_probs(self, f: &[f64], ys: &[usize], rngs: &mut [Pcg64], out: &mut [f64]) {
        let c = f.len() / ys.len();
        let (r, others) = (self.u_samples, c - 1);
        if others == 0 {
            out.fill(0.0);
            return;
        }
        let per = r * others;
        PROBIT_SCRATCH.with_borrow_mut(|buf| {
            buf.resize(2 * per * ys.len(), 0.0);
            let (args, phi) = buf.split_at_mut(per * ys.len());
            let mut k = 0;
            for (d, &y) in ys.iter().enumerate() {
                let fd = &f[d * c..(d + 1) * c];
                let rng = &mut rngs[if rngs.len() == 1 { 0 } else { d }];
                for _ in 0..r {
                    let u: f64 = rng.sample(StandardNormal);
                    for (j, fj) in fd.iter().enumerate() {
                        if j != y {
                            args[k] = u + fd[y] - fj;
                            k += 1;
                        }
                    }
                }
            }
            crate::special::normal_cdf_slice(args, phi);
            for (o, pd) in out.iter_mut().zip(phi.chunks_exact(per)) {
                *o = (pd.chunks_exact(others).map(|p| p.iter().product::<f64>()).sum::<f64>() / r as f64).ln();
            }
        });
    }

    pub(super) fn probs(self, f: &[f64], rng: &mut Pcg64) -> Vec<f64> {
        match (self.lik, self.u_samples) {
            (Lik::Logit, _) => {
                let mut p = f.to_vec();
                softmax_in_place(&mut p);
                p
            }
            (Lik::Probit, 0) => probit_class_probs(f),
            (Lik::Probit, _) => {
                // Every class at once, its u-draws in turn from `rng`.
                let c = f.len();
                let fs: Vec<f64> = f.iter().copied().cycle().take(c * c).collect();
                let ys: Vec<usize> = (0..c).collect();
                let mut out = vec![0.0; c];
                self.probit_log_probs(&fs, &ys, std::slice::from_mut(rng), &mut out);
                out.iter().map(|v| v.exp()).collect()
            }
        }
    }
}

/// Streaming log-space accumulator of importance weights (and weighted test probabilities).
pub(super) struct WeightAcc {
    pub(super) max: f64,
    pub(super) sum: f64,
    pub(super) sum2: f64,
    pub(super) count: usize,
    pub(super) pred: Vec<f64>,
}

impl WeightAcc {
    pub(super) fn new(npred: usize) -> Self {
        WeightAcc { max: f64::NEG_INFINITY, sum: 0.0, sum2: 0.0, count: 0, pred: vec![0.0; npred] }
    }
    /// Make `lw` representable relative to the running max; returns exp(lw - max).
    pub(super) fn rel(&mut self, lw: f64) -> f64 {
        // A zero weight (lw = -inf: a skipped sample, or a u-sample probit whose every product
        // of Phi underflowed) is exactly 0, settled before the comparison with max: while max
        // is still -inf, exp(lw - max) would be exp(-inf + inf) = NaN and poison every sum.
        if lw == f64::NEG_INFINITY {
            return 0.0;
        }
        if lw > self.max {
            let shrink = if self.max.is_finite() { (self.max - lw).exp() } else { 0.0 };
            self.sum *= shrink;
            self.sum2 *= shrink * shrink;
            for p in self.pred.iter_mut() {
                *p *= shrink;
            }
            self.max = lw;
        }
        (lw - self.max).exp()
    }
    pub(super) fn add(&mut self, lw: f64) -> f64 {
        let r = self.rel(lw);
        self.sum += r;
        self.sum2 += r * r;
        self.count += 1;
        r
    }
    /// (log p-hat, log sigma-hat, log UB, ESS). With every weight zero (sum 0, max -inf) the
    /// logs are -inf and the ESS is 0.
    pub(super) fn summary(&self) -> (f64, f64, f64, f64) {
        if self.sum == 0.0 {
            let ninf = f64::NEG_INFINITY;
            return (ninf, ninf, ninf, 0.0);
        }
        let n = self.count as f64;
        let mean = self.sum / n;
        let var = ((self.sum2 - n * mean * mean) / (n - 1.0)).max(0.0);
        let sd = var.sqrt();
        let log_p = self.max + mean.ln();
        let log_sd = self.max + sd.ln();
        let log_ub = self.max + (mean + Z999 * sd / n.sqrt()).ln();
        let ess = self.sum * self.sum / self.sum2;
        (log_p, log_sd, log_ub, ess)
    }
}

/// Data per vectorised exp in the logit's log-weights (and per product L z of the lazy pass).
pub(super) const LOGIT_GROUP: usize = 16;

/// Data per vectorised Phi call of the u-sample probit's log-weights: more amortise the call
/// and fill the vector blocks; fewer waste less on a sample that stops within them.
pub(super) const PROBIT_SUBGROUP: usize = 4;

/// Nats by which a partial sum in `Sampler::order` must be below the floor to stop early.
pub(super) const SKIP_MARGIN: f64 = 1e-6;

/// The random stream of sample `index`: its own, so skipping a negligible sample leaves the
/// draws of every other sample unchanged.
pub(super) fn sample_rng(seed: u64, index: usize) -> Pcg64 {
    Pcg64::seed_from_u64(seed.wrapping_add(index as u64))
}

pub(super) fn lgamma(x: f64) -> f64 {
    statrs::function::gamma::ln_gamma(x)
}
