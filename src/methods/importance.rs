//! Importance-sampling "ground truth" of Chai (2012) §9 and App. F: MC-MNL (logit) and MC-MNP
//! (probit) marginal likelihoods and predictive probabilities.
//!
//! Proposal: multivariate t with nu = 4 degrees of freedom, location the KL-MNL mean m* fitted
//! at the same hyper-parameters, scale matrix K (covariance 2K; `scale: posterior` uses V).
//! Weights w = p(y|f) p(f) / p_s(f) are formed in log space and streamed in batches (never
//! stored as samples x nC); the reported evidence is the 99.9% upper confidence bound
//! log(p-hat + 3.09 sigma-hat / sqrt(n_s)) (notes D§6.1). Predictive probabilities by F.1:
//! f_* | f ~ N(K_*^T K^{-1} f, K_** - K_*^T K^{-1} K_*) with the same normalised weights.
//!
//! With K = Kx (x) Kc and the prior scale, L_K = L_x (x) L_c: one batch of draws is an
//! n x (B C) matrix Y and L_K z is L_x Y (then L_c per sample), a matrix-matrix product.
use super::klmnl::{KlmnlModel, KlmnlParams};
use super::{FitContext, FitError, Fitted, HyperPolicy, Method, Problem};
use crate::kernels::SqExp;
use crate::likelihoods::probit::{log_probit_class_prob, probit_class_probs};
use crate::linalg::{exp_shifted_rows, log_sum_exp, softmax_in_place, Chol};
use crate::results::{EvidenceKind, Handoff};
use faer::Mat;
use ndarray::Array2;
use rand::{RngExt, SeedableRng};
use rand_distr::{ChiSquared, StandardNormal};
use rand_pcg::Pcg64;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Mutex;

/// One-sided 99.9% normal quantile used by the paper's upper bound.
const Z999: f64 = 3.09;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImportanceParams {
    /// n_s, the number of importance samples.
    #[serde(default = "d_samples")]
    pub n_samples: usize,
    /// Samples per batch (matrix-matrix products).
    #[serde(default = "d_batch")]
    pub batch: usize,
    /// Degrees of freedom of the t proposal.
    #[serde(default = "d_df")]
    pub df: f64,
    /// Proposal scale matrix: `prior` (K, the paper's Table 3) or `posterior` (the KL-MNL V, §9.2.2 glass).
    #[serde(default = "d_scale")]
    pub scale: String,
    /// Samples used for the test predictive (the first ones of the stream); 0 = all.
    #[serde(default)]
    pub n_test_samples: usize,
    /// Also estimate the 99.9% upper bound on log Z_B by sampling q (§9.1.1, notes D§6.4).
    #[serde(default)]
    pub z_b: bool,
    /// MC-MNP only: u-samples per probit probability (App. F.1: "twenty samples"; fresh per
    /// sample and datum, so the weight stays unbiased); 0 = accurate 1-D quadrature (slow).
    #[serde(default = "d_u")]
    pub probit_u_samples: usize,
    /// A sample whose log-weight is certain to end more than this many nats below the running
    /// maximum stops early and counts as weight 0 (each log p(y_i|f_i) <= 0, so a partial sum
    /// bounds the final log-weight). Each such weight is < e^-40 ~ 4e-18 of the largest, below
    /// half an ulp of the sum, so log Z moves by at most n_s e^-40 (4e-13 at n_s = 1e5); most
    /// samples are such on Chai's data sets (99-99.9% on thyroid, wine and glass: the t proposal
    /// is wide), which makes MC-MNP 3-5x faster.
    /// `.inf` evaluates every sample in full.
    #[serde(default = "d_negligible")]
    pub negligible_log_weight: f64,
    /// Overrides the kernel's signal variance (passed to the KL-MNL fit; grid over it for Figure 1).
    #[serde(default)]
    pub prior_variance: Option<f64>,
    /// Settings of the KL-MNL fit that supplies the proposal centre.
    #[serde(default)]
    pub klmnl: KlmnlParams,
}

fn d_samples() -> usize {
    100_000
}
fn d_batch() -> usize {
    1000
}
fn d_df() -> f64 {
    4.0
}
fn d_u() -> usize {
    20
}
fn d_negligible() -> f64 {
    40.0
}
fn d_scale() -> String {
    "prior".into()
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lik {
    Logit,
    Probit,
}

thread_local! {
    /// The probit's r (C - 1) arguments and their Phi values, reused across calls.
    static PROBIT_SCRATCH: std::cell::RefCell<Vec<f64>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The likelihood as evaluated inside the sampler: exact softmax, or the probit by quadrature
/// or by the unbiased u-sample average (1/R) sum_r prod_{j != c} Phi(u_r + f_c - f_j).
#[derive(Clone, Copy, Debug)]
struct LikEval {
    lik: Lik,
    u_samples: usize,
}

impl LikEval {
    fn log_prob(self, f: &[f64], y: usize, rng: &mut Pcg64) -> f64 {
        self.log_prob_with(f, y, (0..self.u_samples).map(|_| rng.sample(StandardNormal)))
    }
    /// u-draws per datum: none for the logit.
    fn draws_per_datum(self) -> usize {
        match self.lik {
            Lik::Probit => self.u_samples,
            Lik::Logit => 0,
        }
    }
    /// log p(y | f) given this datum's u-draws (`u_samples` of them; unused by the exact likelihoods).
    fn log_prob_with(self, f: &[f64], y: usize, us: impl Iterator<Item = f64>) -> f64 {
        match (self.lik, self.u_samples) {
            (Lik::Logit, _) => f[y] - log_sum_exp(f),
            (Lik::Probit, 0) => log_probit_class_prob(f, y),
            (Lik::Probit, r) => {
                // All r (C - 1) arguments u + f_y - f_j at once, for the vectorised Phi.
                let others = f.len() - 1;
                if others == 0 {
                    return 0.0;
                }
                let acc = PROBIT_SCRATCH.with_borrow_mut(|buf| {
                    buf.resize(2 * r * others, 0.0);
                    let (args, phi) = buf.split_at_mut(r * others);
                    let mut k = 0;
                    for u in us {
                        for (j, fj) in f.iter().enumerate() {
                            if j != y {
                                args[k] = u + f[y] - fj;
                                k += 1;
                            }
                        }
                    }
                    assert_eq!(k, r * others, "expected {r} u-draws");
                    crate::special::normal_cdf_slice(args, phi);
                    phi.chunks_exact(others).map(|p| p.iter().product::<f64>()).sum::<f64>()
                });
                (acc / r as f64).ln()
            }
        }
    }
    fn probs(self, f: &[f64], rng: &mut Pcg64) -> Vec<f64> {
        match (self.lik, self.u_samples) {
            (Lik::Logit, _) => {
                let mut p = f.to_vec();
                softmax_in_place(&mut p);
                p
            }
            (Lik::Probit, 0) => probit_class_probs(f),
            (Lik::Probit, _) => (0..f.len()).map(|c| self.log_prob(f, c, rng).exp()).collect(),
        }
    }
}

impl ImportanceParams {
    pub fn check(self, lik: Lik) -> Result<Importance, String> {
        if self.n_samples < 100 {
            return Err(format!("settings.n_samples must be at least 100, got {}", self.n_samples));
        }
        if self.batch == 0 || self.batch > 100_000 {
            return Err(format!("settings.batch must be in 1..=100000, got {}", self.batch));
        }
        if !(self.df > 2.0 && self.df.is_finite()) {
            return Err(format!("settings.df must be > 2 (finite variance), got {}", self.df));
        }
        if self.scale != "prior" && self.scale != "posterior" {
            return Err(format!("settings.scale must be prior or posterior, got {}", self.scale));
        }
        if !(self.negligible_log_weight >= 36.8) {
            // Below ln 2^53 a skipped weight could still change the sum's last bit.
            return Err(format!("settings.negligible_log_weight must be at least 36.8 (ln 2^53; .inf disables the skip), got {}", self.negligible_log_weight));
        }
        if self.klmnl.predictive != "eq25" {
            return Err("settings.klmnl.predictive must be eq25 here".into());
        }
        let mut kp = self.klmnl.clone();
        if self.prior_variance.is_some() {
            kp.prior_variance = self.prior_variance;
        }
        let klmnl = kp.check().map_err(|e| e.replace("settings.", "settings.klmnl."))?;
        Ok(Importance { lik, params: self, klmnl })
    }
}

pub struct Importance {
    lik: Lik,
    params: ImportanceParams,
    klmnl: super::klmnl::Klmnl,
}

impl Method for Importance {
    fn name(&self) -> &'static str {
        match self.lik {
            Lik::Logit => "mc_mnl",
            Lik::Probit => "mc_mnp",
        }
    }

    fn fit(&self, problem: &Problem, kernel: &SqExp, hyper: HyperPolicy, ctx: &mut FitContext) -> Result<Box<dyn Fitted>, FitError> {
        Ok(Box::new(self.fit_model(problem, kernel, hyper, ctx)?))
    }
}

/// Streaming log-space accumulator of importance weights (and weighted test probabilities).
struct WeightAcc {
    max: f64,
    sum: f64,
    sum2: f64,
    count: usize,
    pred: Vec<f64>,
}

impl WeightAcc {
    fn new(npred: usize) -> Self {
        WeightAcc { max: f64::NEG_INFINITY, sum: 0.0, sum2: 0.0, count: 0, pred: vec![0.0; npred] }
    }
    /// Make `lw` representable relative to the running max; returns exp(lw - max).
    fn rel(&mut self, lw: f64) -> f64 {
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
    fn add(&mut self, lw: f64) -> f64 {
        let r = self.rel(lw);
        self.sum += r;
        self.sum2 += r * r;
        self.count += 1;
        r
    }
    /// (log p-hat, log sigma-hat, log UB, ESS).
    fn summary(&self) -> (f64, f64, f64, f64) {
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

/// What the sampler needs, fixed for a fit: the KL-MNL model and the Kronecker factors.
#[derive(Clone)]
struct Sampler {
    lik: LikEval,
    n: usize,
    c: usize,
    y: Vec<usize>,
    /// m* datum-major and a = L_K^{-1} m*.
    m: Vec<f64>,
    a: Vec<f64>,
    lx: Chol,
    lc: Mat<f64>,
    /// Posterior scale only: L_V and R = L_K^{-1} L_V (dense, p x p).
    post: Option<(Mat<f64>, Mat<f64>)>,
    /// The order in which `log_weight` visits the data: worst fitted at the proposal centre
    /// first. Every log-likelihood term is <= 0, so the partial sums fall fastest this way and
    /// a negligible sample is recognised after fewer terms; which samples are negligible, and
    /// every kept weight, are the same in any order (tested to the bit).
    order: Vec<usize>,
    /// constant part of log w.
    log_const: f64,
    df: f64,
    seed: u64,
    n_samples: usize,
    batch: usize,
    negligible: f64,
}

impl Sampler {
    /// One batch: for every sample, (s, u = L_K^{-1}(f - m)/s, f) with f datum-major.
    /// `u` and `f` are returned as n x (B C) matrices in the Y layout (column b*C + c); `f` is
    /// left empty (0 x 0) unless `with_f` (the predictive pass regenerates the draws for u only).
    fn batch(&self, rng: &mut Pcg64, chi: &ChiSquared<f64>, bsz: usize, with_f: bool) -> (Vec<f64>, Mat<f64>, Mat<f64>, Vec<f64>) {
        let (n, c) = (self.n, self.c);
        let p = n * c;
        let scales: Vec<f64> = (0..bsz).map(|_| (self.df / rng.sample(chi)).sqrt()).collect();
        let z = Mat::from_fn(n, bsz * c, |_, _| rng.sample::<f64, _>(StandardNormal));
        let znorm2: Vec<f64> = (0..bsz).map(|b| (0..n).map(|i| (0..c).map(|q| z[(i, b * c + q)].powi(2)).sum::<f64>()).sum()).collect();
        match &self.post {
            None if !with_f => (scales, z, Mat::new(), znorm2),
            None => {
                // L_K z = L_x Z L_c^T per sample.
                let x = self.lx.l() * &z;
                let fz = self.right_lc(&x, bsz);
                (scales, z, fz, znorm2)
            }
            Some((lv, r)) => {
                let zd = Mat::from_fn(p, bsz, |k, b| z[(k / c, b * c + k % c)]);
                let ud = r * &zd;
                let back = |m: &Mat<f64>| Mat::from_fn(n, bsz * c, |i, col| m[(i * c + col % c, col / c)]);
                let fz = if with_f { back(&(lv * &zd)) } else { Mat::new() };
                (scales, back(&ud), fz, znorm2)
            }
        }
    }

    /// X L_c^T per sample block of C columns.
    fn right_lc(&self, x: &Mat<f64>, bsz: usize) -> Mat<f64> {
        let c = self.c;
        let identity = (0..c).all(|i| (0..c).all(|j| (self.lc[(i, j)] - if i == j { 1.0 } else { 0.0 }).abs() == 0.0));
        if identity {
            return x.clone();
        }
        Mat::from_fn(x.nrows(), bsz * c, |i, col| {
            let (b, q) = (col / c, col % c);
            (0..=q).map(|k| self.lc[(q, k)] * x[(i, b * c + k)]).sum()
        })
    }

    /// log N(f; 0, K) - log t(f; m, Sigma_P) for sample b of a batch: the weight without the likelihood.
    fn log_prior_over_proposal(&self, s: f64, u: &Mat<f64>, znorm2: f64, b: usize) -> f64 {
        let (n, c) = (self.n, self.c);
        let p = (n * c) as f64;
        let (mut au, mut uu) = (0.0, 0.0);
        for i in 0..n {
            for q in 0..c {
                let uv = u[(i, b * c + q)];
                au += self.a[i * c + q] * uv;
                uu += uv * uv;
            }
        }
        let aa: f64 = self.a.iter().map(|v| v * v).sum();
        let quad = aa + 2.0 * s * au + s * s * uu;
        let delta = s * s * znorm2;
        -0.5 * quad + 0.5 * (self.df + p) * (delta / self.df).ln_1p() + self.log_const
    }

    /// log w for sample b of a batch, or -inf as soon as it is certain to be below `floor`
    /// (the likelihood terms are <= 0, so each partial sum bounds the final value from above).
    /// The probit's u-draws of datum i come from stream `sample * n + i` of `useed`: a sample's
    /// draws for the data it is skipped before are never made, and the visiting order changes
    /// no draw.
    #[allow(clippy::too_many_arguments)]
    fn log_weight(&self, s: f64, u: &Mat<f64>, fz: &Mat<f64>, znorm2: f64, b: usize, floor: f64, useed: u64, sample: usize) -> f64 {
        let (n, c) = (self.n, self.c);
        let mut lw = self.log_prior_over_proposal(s, u, znorm2, b);
        let r = self.lik.draws_per_datum();
        let mut f = vec![0.0; c];
        let mut terms = vec![0.0; n];
        let mut partial = lw;
        if self.lik.lik == Lik::Logit {
            // The softmax terms a group of data at a time, for one vectorised exp per group;
            // the skip check after each datum is the same as below.
            let mut rows = vec![0.0; LOGIT_GROUP * c];
            let mut f_y = [0.0; LOGIT_GROUP];
            for group in self.order.chunks(LOGIT_GROUP) {
                let e = &mut rows[..group.len() * c];
                for (g, &i) in group.iter().enumerate() {
                    for q in 0..c {
                        e[g * c + q] = self.m[i * c + q] + s * fz[(i, b * c + q)];
                    }
                    f_y[g] = e[g * c + self.y[i]];
                }
                let f_max = exp_shifted_rows(e, c);
                for (g, &i) in group.iter().enumerate() {
                    terms[i] = f_y[g] - (f_max[g] + e[g * c..(g + 1) * c].iter().sum::<f64>().ln());
                    partial += terms[i];
                    if partial < floor - SKIP_MARGIN {
                        return f64::NEG_INFINITY;
                    }
                }
            }
        } else {
            for &i in &self.order {
                for q in 0..c {
                    f[q] = self.m[i * c + q] + s * fz[(i, b * c + q)];
                }
                terms[i] = if r > 0 {
                    self.lik.log_prob(&f, self.y[i], &mut sample_rng(useed, sample * n + i))
                } else {
                    self.lik.log_prob_with(&f, self.y[i], std::iter::empty())
                };
                partial += terms[i];
                // Stop only when clearly below: the datum-order total differs from this partial sum
                // by rounding and by the terms not yet added (<= 0, or a rounding hair above 0 for
                // the quadrature probit), both far below the margin.
                if partial < floor - SKIP_MARGIN {
                    return f64::NEG_INFINITY;
                }
            }
        }
        // Summed and checked in datum order, so whether a sample is kept, and its weight, do not
        // depend on `order`.
        for t in terms {
            lw += t;
            if lw < floor {
                return f64::NEG_INFINITY;
            }
        }
        lw
    }
}

/// Softmax of every row of a row-major matrix with `c` columns, in place, with one vectorised
/// exp for all rows.
fn softmax_rows(x: &mut [f64], c: usize) {
    exp_shifted_rows(x, c);
    for row in x.chunks_exact_mut(c) {
        let sum: f64 = row.iter().sum();
        for v in row.iter_mut() {
            *v /= sum;
        }
    }
}

/// Data per vectorised exp in the logit's log-weights.
const LOGIT_GROUP: usize = 16;

/// Nats by which a partial sum in `Sampler::order` must be below the floor to stop early.
const SKIP_MARGIN: f64 = 1e-6;

/// The random stream of sample `index`: its own, so skipping a negligible sample leaves the
/// draws of every other sample unchanged.
fn sample_rng(seed: u64, index: usize) -> Pcg64 {
    Pcg64::seed_from_u64(seed.wrapping_add(index as u64))
}

fn lgamma(x: f64) -> f64 {
    statrs::function::gamma::ln_gamma(x)
}

impl Importance {
    pub fn fit_model(&self, problem: &Problem, kernel: &SqExp, hyper: HyperPolicy, ctx: &mut FitContext) -> Result<ImportanceModel, FitError> {
        let km = self.klmnl.fit_model(problem, kernel, hyper, ctx)?;
        let (n, c) = (problem.y.len(), km.n_model_classes());
        let p = n * c;
        let lx = Chol::factor_with_jitter(km.pr.kx.as_ref(), "Kx")?;
        let lc_chol = Chol::factor_with_jitter(km.pr.kc.as_ref(), "Kc")?;
        let lc = lc_chol.l().to_owned();
        let m = km.fit.m.clone();
        // a = L_K^{-1} m = vec(L_x^{-1} M L_c^{-T}), M the n x C matrix of m.
        let mm = Mat::from_fn(n, c, |i, q| m[i * c + q]);
        let t1 = lx.solve_l(mm.as_ref());
        let t2 = lc_chol.solve_l(t1.transpose()); // L_c^{-1} (L_x^{-1} M)^T : C x n
        let a: Vec<f64> = (0..p).map(|k| t2[(k % c, k / c)]).collect();
        let nu = self.params.df;
        let pf = p as f64;
        // log N(f; 0, K) - log t(f; m, Sigma_P) without the data-dependent parts.
        let mut log_const = -lgamma((nu + pf) / 2.0) + lgamma(nu / 2.0) + 0.5 * pf * (std::f64::consts::PI * nu).ln()
            - 0.5 * pf * (2.0 * std::f64::consts::PI).ln();
        let mut diagnostics = km.diagnostics();
        diagnostics.insert("jitter_kx".into(), format!("{:.3e}", lx.jitter()));
        let post = if self.params.scale == "posterior" {
            // V = K - K T K = L_K S L_K^T with S = I - L_K^T T L_K = (I + L_K^T W L_K)^{-1}, whose
            // eigenvalues lie in (0, 1]. Factor S, not V: the cancellation in K - K T K (and the
            // jitter it then needs) would let the proposal spread into K's near-null space, where
            // the prior has no mass, and wreck the weights (glass, signal variance ~16).
            let lk = crate::linalg::kron(lx.l(), lc.as_ref());
            let s = Mat::<f64>::identity(p, p) - lk.transpose() * &km.t * &lk;
            let ls = Chol::factor_with_jitter(sym(&s).as_ref(), "I - L_K^T T L_K (proposal scale)")?;
            diagnostics.insert("jitter_v".into(), format!("{:.3e}", ls.jitter()));
            // + 1/2 log|V| - 1/2 log|K| = + 1/2 log|S|
            log_const += 0.5 * ls.log_det();
            let r = ls.l().to_owned(); // L_K^{-1} L_V
            Some((&lk * &r, r))
        } else {
            None
        };
        let seed: u64 = ctx.rng.random();
        let lik = LikEval { lik: self.lik, u_samples: self.params.probit_u_samples };
        let centre_fit: Vec<f64> = (0..n)
            .map(|i| match self.lik {
                Lik::Logit => lik.log_prob_with(&m[i * c..(i + 1) * c], problem.y[i], std::iter::empty()),
                Lik::Probit => log_probit_class_prob(&m[i * c..(i + 1) * c], problem.y[i]),
            })
            .collect();
        let mut order: Vec<usize> = (0..n).collect();
        order.sort_by(|&i, &j| centre_fit[i].total_cmp(&centre_fit[j]).then(i.cmp(&j)));
        let sampler = Sampler {
            lik,
            order,
            n,
            c,
            y: problem.y.to_vec(),
            m,
            a,
            lx,
            lc,
            post,
            log_const,
            df: nu,
            seed,
            n_samples: self.params.n_samples,
            batch: self.params.batch,
            negligible: self.params.negligible_log_weight,
        };
        // Pass 1: the weights (evidence and diagnostics); log-weights kept (n_s scalars) for prediction.
        let chi = ChiSquared::new(nu).map_err(|e| FitError::Numerical(format!("chi-squared: {e:?}")))?;
        let mut rng = Pcg64::seed_from_u64(seed);
        // u-draws of the probit estimate come from their own streams (one per sample and datum),
        // so the f-draws can be regenerated identically at prediction time.
        let useed = seed ^ 0x9e37_79b9_7f4a_7c15;
        let mut acc = WeightAcc::new(0);
        let mut log_w = Vec::with_capacity(self.params.n_samples);
        let mut half = None;
        let mut done = 0;
        let mut it = 0;
        while done < sampler.n_samples {
            ctx.check_deadline()?;
            let bsz = sampler.batch.min(sampler.n_samples - done);
            let (scales, u, fz, zn) = sampler.batch(&mut rng, &chi, bsz, true);
            for b in 0..bsz {
                let floor = acc.max - sampler.negligible;
                let lw = sampler.log_weight(scales[b], &u, &fz, zn[b], b, floor, useed, done + b);
                acc.add(lw);
                log_w.push(lw);
            }
            done += bsz;
            if half.is_none() && done * 2 >= sampler.n_samples {
                half = Some(acc.summary());
            }
            it += 1;
            if it % 10 == 0 || done == sampler.n_samples {
                let (_, _, ub, ess) = acc.summary();
                ctx.record(done, &[("is_log_ub", ub), ("is_ess", ess)]);
            }
        }
        let (log_p, log_sd, log_ub, ess) = acc.summary();
        let max_frac = (log_w.iter().copied().fold(f64::NEG_INFINITY, f64::max) - acc.max).exp() / acc.sum;
        let mut extra = BTreeMap::new();
        extra.insert("log_z_ub".into(), log_ub);
        extra.insert("log_z_hat".into(), log_p);
        extra.insert("is_log_sd".into(), log_sd);
        extra.insert("is_ess".into(), ess);
        extra.insert("is_ess_frac".into(), ess / sampler.n_samples as f64);
        extra.insert("is_max_weight_frac".into(), max_frac);
        let skipped = log_w.iter().filter(|v| **v == f64::NEG_INFINITY).count();
        extra.insert("is_skipped_frac".into(), skipped as f64 / sampler.n_samples as f64);
        if let Some((_, _, ub_half, _)) = half {
            extra.insert("is_log_ub_half".into(), ub_half);
        }
        extra.insert("klmnl_log_zh".into(), km.log_zh());
        extra.insert("gap_z_minus_zh".into(), log_ub - km.log_zh());
        extra.insert("order_zh_le_z".into(), if km.log_zh() <= log_ub { 1.0 } else { 0.0 });
        if self.params.z_b {
            let (lzb, lzb_mean) = z_b_estimate(&km, sampler.lik, self.params.n_samples, sampler.batch, &mut rng)?;
            extra.insert("log_zb_ub".into(), lzb);
            extra.insert("log_zb_hat".into(), lzb_mean);
            extra.insert("gap_z_minus_zb".into(), log_ub - lzb);
            extra.insert("gap_zb_minus_zh".into(), lzb - km.log_zh());
        }
        diagnostics.insert("is_ess".into(), format!("{ess:.1}"));
        let n_test = if self.params.n_test_samples == 0 { self.params.n_samples } else { self.params.n_test_samples.min(self.params.n_samples) };
        Ok(ImportanceModel { km, sampler, log_w, n_test, log_ub, diagnostics, extra, cache: Mutex::new(None) })
    }
}

fn sym(a: &Mat<f64>) -> Mat<f64> {
    Mat::from_fn(a.nrows(), a.ncols(), |i, j| 0.5 * (a[(i, j)] + a[(j, i)]))
}

/// log Z_B = -KL(q || p) + L with L = sum_i E_q log p(y_i | f_i) estimated from f ~ q jointly;
/// returns (-KL + L-hat + 3.09 sd / sqrt(n_s), -KL + L-hat)  (notes D§6.4).
fn z_b_estimate(km: &KlmnlModel, lik: LikEval, ns: usize, batch: usize, rng: &mut Pcg64) -> Result<(f64, f64), FitError> {
    let (n, c) = (km.pr.n, km.pr.c);
    let p = n * c;
    let k = &km.pr.k;
    let v = k - k * &km.t * k;
    let lv = Chol::factor_with_jitter(sym(&v).as_ref(), "V")?;
    let (mut s1, mut s2) = (0.0, 0.0);
    let mut done = 0;
    let mut f = vec![0.0; c];
    while done < ns {
        let bsz = batch.min(ns - done);
        let z = Mat::from_fn(p, bsz, |_, _| rng.sample::<f64, _>(StandardNormal));
        let fz = lv.l() * &z;
        for b in 0..bsz {
            let mut l = 0.0;
            for i in 0..n {
                for q in 0..c {
                    f[q] = km.fit.m[i * c + q] + fz[(i * c + q, b)];
                }
                let yi = km.pr.y1[i * c..(i + 1) * c].iter().position(|&v| v == 1.0).unwrap_or(0);
                l += lik.log_prob(&f, yi, rng);
            }
            s1 += l;
            s2 += l * l;
        }
        done += bsz;
    }
    let mean = s1 / ns as f64;
    let sd = ((s2 - ns as f64 * mean * mean) / (ns as f64 - 1.0)).max(0.0).sqrt();
    Ok((km.neg_kl() + mean + Z999 * sd / (ns as f64).sqrt(), km.neg_kl() + mean))
}

#[derive(Clone, Debug)]
pub struct IsPredCache {
    pub log_p_is: Vec<Vec<f64>>,
    pub log_p24: Vec<Vec<f64>>,
    pub log_p25: Vec<Vec<f64>>,
}

pub struct ImportanceModel {
    km: KlmnlModel,
    sampler: Sampler,
    log_w: Vec<f64>,
    n_test: usize,
    log_ub: f64,
    diagnostics: BTreeMap<String, String>,
    extra: BTreeMap<String, f64>,
    cache: Mutex<Option<IsPredCache>>,
}

impl ImportanceModel {
    pub fn extra_metrics(&self) -> BTreeMap<String, f64> {
        self.extra.clone()
    }

    /// IS predictive class probabilities (F.1) over the model's classes, per test point.
    pub fn is_predictive(&self, x: &Array2<f64>, rng: &mut Pcg64) -> Result<Vec<Vec<f64>>, FitError> {
        let s = &self.sampler;
        let (n, c) = (s.n, s.c);
        let mt = x.nrows();
        // A_x = L_x^{-1} k_*x (n x m); conditional variance factor kappa_j = k_** - |A_x[:, j]|^2.
        let ks = self.km.kx_cross(x);
        let ax = s.lx.solve_l(ks.as_ref());
        let kss = self.km.kernel().diag(x);
        let kappa: Vec<f64> = (0..mt).map(|j| (kss[j] - (0..n).map(|i| ax[(i, j)].powi(2)).sum::<f64>()).max(0.0)).collect();
        let axt = ax.transpose().to_owned();
        // K_*^T alpha: mean of the test latents at the proposal centre.
        let (means, _) = self.km.latent_predictive(x);
        let chi = ChiSquared::new(s.df).map_err(|e| FitError::Numerical(format!("chi-squared: {e:?}")))?;
        let mut srng = Pcg64::seed_from_u64(s.seed);
        let pseed: u64 = rng.random();
        // Samples with weight below e^-negligible of the largest add nothing visible: skip them.
        let max_lw = self.log_w[..self.n_test].iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let mut acc = WeightAcc::new(mt * c);
        let mut done = 0;
        let mut fstar = vec![0.0; mt * c];
        let mut eps = vec![0.0; c];
        while done < self.n_test {
            // Regenerate the same draws as the weight pass (same seed, same batch sizes), and use
            // the first `bsz` of the batch.
            let full = s.batch.min(s.n_samples - done);
            let bsz = full.min(self.n_test - done);
            let (scales, u, _, _) = s.batch(&mut srng, &chi, full, false);
            // Only the samples whose weight is visible (often a small fraction) need their test
            // latents: gather their columns of u first.
            let kept: Vec<usize> = (0..bsz).filter(|&b| self.log_w[done + b] >= max_lw - s.negligible).collect();
            let u_kept = Mat::from_fn(n, kept.len() * c, |i, col| u[(i, kept[col / c] * c + col % c)]);
            // K_*^T K^{-1} (f - m) / s = (A_x^T (x) L_c) u  -> A_x^T U then L_c per sample.
            let au = s.right_lc(&(&axt * &u_kept), kept.len());
            let mut next_kept = kept.iter().copied().enumerate().peekable();
            for b in 0..bsz {
                let r = acc.add(self.log_w[done + b]);
                let Some((k, _)) = next_kept.next_if(|&(_, kb)| kb == b) else { continue };
                let rng = &mut sample_rng(pseed, done + b);
                for j in 0..mt {
                    for q in 0..c {
                        eps[q] = rng.sample::<f64, _>(StandardNormal);
                    }
                    let sk = kappa[j].sqrt();
                    let fj = &mut fstar[j * c..(j + 1) * c];
                    for q in 0..c {
                        let noise: f64 = (0..=q).map(|k| s.lc[(q, k)] * eps[k]).sum();
                        fj[q] = means[j][q] + scales[b] * au[(j, k * c + q)] + sk * noise;
                    }
                    // The probit's u-draws follow this point's eps in the stream.
                    if s.lik.lik == Lik::Probit {
                        let pr = s.lik.probs(fj, rng);
                        fj.copy_from_slice(&pr);
                    }
                }
                if s.lik.lik == Lik::Logit {
                    softmax_rows(&mut fstar, c);
                }
                for (a, p) in acc.pred.iter_mut().zip(&fstar) {
                    *a += r * p;
                }
            }
            done += bsz;
        }
        Ok((0..mt).map(|j| (0..c).map(|q| acc.pred[j * c + q] / acc.sum).collect()).collect())
    }

    /// Test-set numbers needing the true classes: IS, (24) and (25) log p(y*) sums, the bracket
    /// (24) <= IS <= (25) per point and for the sums (Chai §9.1 claim (c)).
    pub fn test_metrics(&self, y: &[usize]) -> BTreeMap<String, f64> {
        let mut out = BTreeMap::new();
        let Some(cache) = self.cache.lock().ok().and_then(|c| c.clone()) else { return out };
        if cache.log_p_is.len() != y.len() {
            return out;
        }
        let (mut s_is, mut s24, mut s25, mut inside) = (0.0, 0.0, 0.0, 0usize);
        for (j, &t) in y.iter().enumerate() {
            let (a, b, c) = (cache.log_p_is[j][t], cache.log_p24[j][t], cache.log_p25[j][t]);
            s_is += a;
            s24 += b;
            s25 += c;
            if b <= a && a <= c {
                inside += 1;
            }
        }
        out.insert("log_pred_is_sum".into(), s_is);
        out.insert("log_pred24_sum".into(), s24);
        out.insert("log_pred25_sum".into(), s25);
        out.insert("is_minus_eq24".into(), s_is - s24);
        out.insert("eq25_minus_is".into(), s25 - s_is);
        out.insert("bracket_sum_ok".into(), if s24 <= s_is && s_is <= s25 { 1.0 } else { 0.0 });
        out.insert("bracket_point_frac".into(), inside as f64 / y.len().max(1) as f64);
        // Theorem 12: log p(y*|y) >= sum_j max h(e^{c_j}; q_*j) + log Z_h - log p(y), with log p(y)
        // from this sampler's estimate (a proper lower bound on the joint test likelihood).
        if let (Some(zh), Some(lz)) = (self.extra.get("klmnl_log_zh"), self.extra.get("log_z_hat")) {
            out.insert("thm12_lower".into(), s24 + zh - lz);
        }
        out
    }
}

impl Fitted for ImportanceModel {
    fn predict_proba(&self, x: &Array2<f64>, rng: &mut Pcg64) -> Result<Array2<f64>, FitError> {
        let probs = self.is_predictive(x, rng)?;
        let kl = self.km.predictive_logs(x)?;
        let cp = self.km.n_present();
        let mut out = Array2::zeros((x.nrows(), cp));
        for (j, pj) in probs.iter().enumerate() {
            let tot: f64 = pj[..cp].iter().sum();
            for q in 0..cp {
                out[(j, q)] = pj[q] / tot;
            }
        }
        let log_p_is = probs.iter().map(|p| p.iter().map(|v| v.max(f64::MIN_POSITIVE).ln()).collect()).collect();
        if let Ok(mut g) = self.cache.lock() {
            *g = Some(IsPredCache { log_p_is, log_p24: kl.log_p24, log_p25: kl.log_p25 });
        }
        Ok(out)
    }

    fn evidence(&self) -> Option<(f64, EvidenceKind)> {
        Some((self.log_ub, EvidenceKind::Estimate))
    }

    fn kernel(&self) -> &SqExp {
        self.km.kernel()
    }

    fn diagnostics(&self) -> BTreeMap<String, String> {
        self.diagnostics.clone()
    }

    fn test_metrics(&self, y_test: &[usize]) -> BTreeMap<String, f64> {
        // The inherent method: it scores the predictions cached by the last predict_proba.
        ImportanceModel::test_metrics(self, y_test)
    }

    fn extra_metrics(&self) -> BTreeMap<String, f64> {
        self.extra.clone()
    }

    fn handoff(&self) -> Handoff {
        self.km.handoff()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::methods::FromSettings;

    /// The logit's grouped log-weights (one vectorised exp per 16 data, skip checks inside a
    /// group) against the plain sum of f_y - log sum exp(f) per datum, with 40 data (two full
    /// groups and a partial one), and the skip decision at floors just above and below.
    #[test]
    fn grouped_logit_log_weights_match_the_per_datum_softmax() {
        let n = 40;
        let x = Array2::from_shape_fn((n, 2), |(i, k)| ((i * (k + 3)) as f64 * 0.37).sin());
        let y: Vec<usize> = (0..n).map(|i| (i * 5 / 3) % 4).collect();
        let problem = Problem { x: &x, y: &y, n_classes: 4 };
        let kernel = SqExp { log_variance: 4.0f64.ln(), log_lengthscales: vec![0.0], learn_variance: false };
        let method = ImportanceParams::from_settings(&serde_json::json!({ "n_samples": 100 })).unwrap().check(Lik::Logit).unwrap();
        let mut rng = Pcg64::seed_from_u64(3);
        let model = method.fit_model(&problem, &kernel, HyperPolicy::Fixed, &mut FitContext::new(&mut rng, None)).unwrap();
        let s = &model.sampler;
        let chi = ChiSquared::new(s.df).unwrap();
        let (scales, u, fz, zn) = s.batch(&mut Pcg64::seed_from_u64(4), &chi, 50, true);
        for b in 0..50 {
            let mut want = s.log_prior_over_proposal(scales[b], &u, zn[b], b);
            for i in 0..n {
                let f: Vec<f64> = (0..4).map(|q| s.m[i * 4 + q] + scales[b] * fz[(i, b * 4 + q)]).collect();
                want += f[y[i]] - log_sum_exp(&f);
            }
            let got = s.log_weight(scales[b], &u, &fz, zn[b], b, f64::NEG_INFINITY, 1, b);
            assert!((got - want).abs() < 1e-12 * want.abs(), "sample {b}: {got} vs {want}");
            assert_eq!(s.log_weight(scales[b], &u, &fz, zn[b], b, want + 1e-3, 1, b), f64::NEG_INFINITY);
            assert_eq!(s.log_weight(scales[b], &u, &fz, zn[b], b, want - 1e-3, 1, b), got);
        }
    }

    #[test]
    fn softmax_rows_is_the_softmax_of_each_row() {
        let c = 5;
        let mut x: Vec<f64> = (0..37 * c).map(|k| ((k * 7919) % 101) as f64 * 0.31 - 15.0).collect();
        let want: Vec<f64> = x.chunks(c).flat_map(|row| { let mut r = row.to_vec(); softmax_in_place(&mut r); r }).collect();
        softmax_rows(&mut x, c);
        for (g, w) in x.iter().zip(&want) {
            assert!((g - w).abs() <= 1e-13 * w + 1e-300, "{g} vs {w}");
        }
    }

    /// Visiting the data worst-fitted first only decides sooner: every weight, and which samples
    /// are skipped, are the same to the bit as in datum order, for both likelihoods, the probit
    /// by u-samples and by quadrature, and both proposal scales.
    #[test]
    fn the_visiting_order_changes_no_weight_and_no_skip_decision() {
        let n = 12;
        let x = Array2::from_shape_fn((n, 1), |(i, _)| i as f64 / 3.0 - 2.0);
        let y: Vec<usize> = (0..n).map(|i| (i * 7 / 3) % 3).collect();
        let problem = Problem { x: &x, y: &y, n_classes: 3 };
        let kernel = SqExp { log_variance: 9.0f64.ln(), log_lengthscales: vec![0.0], learn_variance: false };
        let cases = [(Lik::Logit, 20, "prior"), (Lik::Probit, 20, "prior"), (Lik::Probit, 0, "prior"), (Lik::Probit, 20, "posterior")];
        for (lik, u_samples, scale) in cases {
            let settings = serde_json::json!({ "n_samples": 200, "n_test_samples": 50, "probit_u_samples": u_samples, "scale": scale });
            let method = ImportanceParams::from_settings(&settings).unwrap().check(lik).unwrap();
            let mut rng = Pcg64::seed_from_u64(5);
            let mut ctx = FitContext::new(&mut rng, None);
            let model = method.fit_model(&problem, &kernel, HyperPolicy::Fixed, &mut ctx).unwrap();
            let sorted = model.sampler.clone();
            let mut datum = model.sampler.clone();
            datum.order = (0..n).collect();
            assert_ne!(sorted.order, datum.order, "{lik:?}: the test needs a non-trivial order");
            let chi = ChiSquared::new(sorted.df).unwrap();
            let (scales, u, fz, zn) = sorted.batch(&mut Pcg64::seed_from_u64(8), &chi, 300, true);
            let weight = |s: &Sampler, b: usize, floor: f64| s.log_weight(scales[b], &u, &fz, zn[b], b, floor, 77, b);
            let full: Vec<f64> = (0..300).map(|b| weight(&datum, b, f64::NEG_INFINITY)).collect();
            let top = full.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            // Floors that put a good share of the samples below them, and one just at a sample's weight.
            for floor in [f64::NEG_INFINITY, top - 30.0, top - 5.0, full[17]] {
                let mut skipped = 0;
                for b in 0..300 {
                    let (a, s) = (weight(&datum, b, floor), weight(&sorted, b, floor));
                    assert_eq!(a.to_bits(), s.to_bits(), "{lik:?} u={u_samples} {scale}: sample {b}, floor {floor}");
                    skipped += (a == f64::NEG_INFINITY) as usize;
                }
                if floor == top - 5.0 {
                    assert!(skipped > 30, "{lik:?} u={u_samples} {scale}: only {skipped} of 300 below the floor");
                }
            }
        }
    }
}
