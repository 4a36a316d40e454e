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
use super::{Diagnostics, Evidence, FitContext, FitError, Fitted, HyperPolicy, Method, Prediction, Problem, ProblemShape};
use crate::kernels::{KernelSet, SqExp};
use crate::likelihoods::probit::{log_probit_class_prob, probit_class_probs};
use crate::linalg::{leading_columns, exp_shifted_rows, log_sum_exp, softmax_in_place, Chol};
use crate::results::{EvidenceKind, Handoff};
use faer::Mat;
use ndarray::Array2;
use rand::{RngExt, SeedableRng};
use rand_distr::{ChiSquared, StandardNormal};
use rand_pcg::Pcg64;
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::collections::BTreeMap;

/// Version of this method's numbers, part of every cell key: bump it when a change of the code
/// (here or in shared numerics it uses) changes any number the method computes, so stored cells
/// are recomputed. `tests/numerics_versions.rs` fails when the output changes without a bump.
pub const NUMERICS_VERSION: u32 = 1;

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
    /// half an ulp of the sum, so log Z moves by at most n_s e^-40 (4e-13 at n_s = 1e5). On
    /// Table 3 that is 38-54% of the samples on iris, thyroid and wine and 70-89% on glass (the
    /// t proposal is wide).
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
    /// log p(y | f); the u-sample probit draws its u's from `rng`.
    fn log_prob(self, f: &[f64], y: usize, rng: &mut Pcg64) -> f64 {
        if self.lik == Lik::Probit && self.u_samples > 0 {
            let mut out = [0.0];
            self.probit_log_probs(f, &[y], std::slice::from_mut(rng), &mut out);
            out[0]
        } else {
            self.exact_log_prob(f, y)
        }
    }
    /// u-draws per datum: none for the logit.
    fn draws_per_datum(self) -> usize {
        match self.lik {
            Lik::Probit => self.u_samples,
            Lik::Logit => 0,
        }
    }
    /// log p(y | f) without u-draws: the softmax, or the probit by 1-D quadrature.
    fn exact_log_prob(self, f: &[f64], y: usize) -> f64 {
        match self.lik {
            Lik::Logit => f[y] - log_sum_exp(f),
            Lik::Probit => log_probit_class_prob(f, y),
        }
    }
    /// The u-sample probit's log p(y_k | f_k) for several data at once (f_k = `f[k C..]`; the
    /// k-th datum's u-draws from `rngs[k]`, or all from `rngs[0]` in turn if there is one): one
    /// vectorised Phi call for all of them.
    fn probit_log_probs(self, f: &[f64], ys: &[usize], rngs: &mut [Pcg64], out: &mut [f64]) {
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

    fn probs(self, f: &[f64], rng: &mut Pcg64) -> Vec<f64> {
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

    fn supports(&self, shape: &ProblemShape, kernels: &KernelSet, hyper: HyperPolicy) -> Result<(), String> {
        self.klmnl.supports(shape, kernels, hyper)
    }

    fn fit(&self, problem: &Problem, kernels: &KernelSet, hyper: HyperPolicy, ctx: &mut FitContext) -> Result<Box<dyn Fitted>, FitError> {
        let kernel = super::shared_sqexp(kernels, self.name()).map_err(FitError::Unsupported)?;
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
    /// Rows of L_K's factor in visiting order: of L_x (n x n) for the prior scale, of L_V
    /// (nC x nC, datum-major) for the posterior one.
    l_visit: Mat<f64>,
    /// The order in which the data are visited: worst fitted at the proposal centre first.
    /// Every log-likelihood term is <= 0, so the partial sums fall fastest this way and a
    /// negligible sample is recognised after fewer terms; which samples are negligible, and
    /// every kept weight, are the same in any order up to the rounding of L z (tested).
    order: Vec<usize>,
    /// constant part of log w.
    log_const: f64,
    df: f64,
    n_samples: usize,
    batch: usize,
    negligible: f64,
}

impl Sampler {
    /// One batch of proposal draws f = m + s L z: the scales s (all drawn first), z as an
    /// n x (B C) matrix in the Y layout (column b*C + c, sample b's C columns drawn in turn),
    /// |z_b|^2, and the generator's state before each sample's z, from which [`Self::redraw`]
    /// regenerates a sample alone.
    fn draw_batch(&self, rng: &mut Pcg64, chi: &ChiSquared<f64>, bsz: usize) -> Draws {
        let (n, c) = (self.n, self.c);
        let scales: Vec<f64> = (0..bsz).map(|_| (self.df / rng.sample(chi)).sqrt()).collect();
        let mut z = Mat::<f64>::zeros(n, bsz * c);
        let mut starts = Vec::with_capacity(bsz);
        for b in 0..bsz {
            starts.push(rng.clone());
            self.fill_z(rng, &mut z, b);
        }
        let znorm2 = (0..bsz).map(|b| (0..n).map(|i| (0..c).map(|q| z[(i, b * c + q)].powi(2)).sum::<f64>()).sum()).collect();
        Draws { scales, z, znorm2, starts }
    }

    /// Sample b's C columns of z, column by column.
    fn fill_z(&self, rng: &mut Pcg64, z: &mut Mat<f64>, b: usize) {
        for q in 0..self.c {
            for i in 0..self.n {
                z[(i, b * self.c + q)] = rng.sample(StandardNormal);
            }
        }
    }

    /// The z of the given samples (generator states from [`Self::draw_batch`]), bit for bit, in
    /// the Y layout.
    fn redraw(&self, starts: &[&Pcg64]) -> Mat<f64> {
        let mut z = Mat::<f64>::zeros(self.n, starts.len() * self.c);
        for (k, st) in starts.iter().enumerate() {
            self.fill_z(&mut (*st).clone(), &mut z, k);
        }
        z
    }

    /// u = L_K^{-1} (f - m) / s for draws z (Y layout, k samples): z itself for the prior
    /// scale, R z for the posterior one.
    fn whiten<'z>(&self, z: &'z Mat<f64>) -> Cow<'z, Mat<f64>> {
        match &self.post {
            None => Cow::Borrowed(z),
            Some((_, r)) => {
                let (n, c) = (self.n, self.c);
                let k = z.ncols() / c;
                let ud = r * &self.datum_major(z);
                Cow::Owned(Mat::from_fn(n, k * c, |i, col| ud[(i * c + col % c, col / c)]))
            }
        }
    }

    /// Set the visiting order of the data, and with it the rows of L_K's factor in that order.
    fn set_order(&mut self, order: Vec<usize>) {
        let c = self.c;
        self.l_visit = match &self.post {
            None => Mat::from_fn(self.n, self.n, |g, j| self.lx.l()[(order[g], j)]),
            Some((lv, _)) => Mat::from_fn(self.n * c, self.n * c, |g, j| lv[(order[g / c] * c + g % c, j)]),
        };
        self.order = order;
    }

    /// z (Y layout) as the nC x k matrix of the samples' datum-major vectors.
    fn datum_major(&self, z: &Mat<f64>) -> Mat<f64> {
        let c = self.c;
        Mat::from_fn(self.n * c, z.ncols() / c, |k, b| z[(k / c, b * c + k % c)])
    }

    /// Rows of (f - m) / s = L z for the data `order[start..start + len]`, for draws z (Y
    /// layout, k samples): len x (k C).
    fn f_rows(&self, start: usize, len: usize, z: &Mat<f64>) -> Mat<f64> {
        let c = self.c;
        let k = z.ncols() / c;
        match &self.post {
            None => self.right_lc(&(self.l_visit.as_ref().subrows(start, len) * z), k),
            Some(_) => {
                let fd = self.l_visit.as_ref().subrows(start * c, len * c) * &self.datum_major(z);
                Mat::from_fn(len, k * c, |g, col| fd[(g * c + col % c, col / c)])
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

    /// Every sample's log w split into log N(f; 0, K) - log t(f; m, Sigma_P) and the n terms
    /// log p(y_i | f_i) (datum order), or None for a sample certainly below `floor` (each
    /// term is <= 0, so a partial sum bounds the final value from above). f is formed lazily:
    /// data are visited in `order`, a group at a time, and only the samples still above the
    /// floor get the group's rows of L z (on Table 3's glass cells, about half the product of
    /// the full L z is saved). The probit's u-draws of
    /// datum i come from stream `sample * n + i` of `useed` (`first` is the batch's first sample
    /// index): a sample's draws for the data it is skipped before are never made, and the
    /// visiting order changes no draw.
    fn batch_terms(&self, d: &Draws, first: usize, useed: u64, floor: f64) -> Vec<Option<SampleTerms>> {
        let (n, c) = (self.n, self.c);
        let bsz = d.scales.len();
        let u = self.whiten(&d.z);
        let mut out: Vec<Option<SampleTerms>> = (0..bsz)
            .map(|b| Some(SampleTerms { prior: self.log_prior_over_proposal(d.scales[b], &u, d.znorm2[b], b), lik: vec![0.0; n] }))
            .collect();
        let mut partial: Vec<f64> = out.iter().map(|t| t.as_ref().map_or(0.0, |t| t.prior)).collect();
        let r = self.lik.draws_per_datum();
        // The samples still above the floor, and their column blocks in z_alive (which keeps
        // some dropped samples' columns until a quarter of its columns are such).
        let mut alive: Vec<usize> = (0..bsz).collect();
        let mut cols: Vec<usize> = (0..bsz).collect();
        let mut z_alive = Cow::Borrowed(&d.z);
        let mut rows = vec![0.0; LOGIT_GROUP * c];
        for (gi, group) in self.order.chunks(LOGIT_GROUP).enumerate() {
            if alive.is_empty() {
                break;
            }
            let fz = self.f_rows(gi * LOGIT_GROUP, group.len(), &z_alive);
            let mut dropped = false;
            for (&k, &b) in cols.iter().zip(&alive) {
                let s = d.scales[b];
                let terms = &mut out[b].as_mut().expect("alive samples have terms").lik;
                let mut below = false;
                if self.lik.lik == Lik::Logit {
                    // One vectorised exp for the group's softmax terms.
                    let e = &mut rows[..group.len() * c];
                    for g in 0..group.len() {
                        for q in 0..c {
                            e[g * c + q] = self.m[group[g] * c + q] + s * fz[(g, k * c + q)];
                        }
                    }
                    let f_max = exp_shifted_rows(e, c);
                    for (g, &i) in group.iter().enumerate() {
                        let f_y = self.m[i * c + self.y[i]] + s * fz[(g, k * c + self.y[i])];
                        terms[i] = f_y - (f_max[g] + e[g * c..(g + 1) * c].iter().sum::<f64>().ln());
                        partial[b] += terms[i];
                        if partial[b] < floor - SKIP_MARGIN {
                            below = true;
                            break;
                        }
                    }
                } else {
                    // The u-sample probit a few data at a time (one vectorised Phi call for all
                    // their r (C - 1) arguments); the checks after each datum as above.
                    let sub_len = if r > 0 { PROBIT_SUBGROUP } else { 1 };
                    'sub: for (sg, sub) in group.chunks(sub_len).enumerate() {
                        let f_sub = &mut rows[..sub.len() * c];
                        for (d, g) in (sg * sub_len..).take(sub.len()).enumerate() {
                            for q in 0..c {
                                f_sub[d * c + q] = self.m[group[g] * c + q] + s * fz[(g, k * c + q)];
                            }
                        }
                        let ys: Vec<usize> = sub.iter().map(|&i| self.y[i]).collect();
                        let mut vals = [0.0; PROBIT_SUBGROUP];
                        if r > 0 {
                            let mut rngs: Vec<Pcg64> = sub.iter().map(|&i| sample_rng(useed, (first + b) * n + i)).collect();
                            self.lik.probit_log_probs(f_sub, &ys, &mut rngs, &mut vals[..sub.len()]);
                        } else {
                            vals[0] = self.lik.exact_log_prob(f_sub, ys[0]);
                        }
                        for (d, &i) in sub.iter().enumerate() {
                            terms[i] = vals[d];
                            partial[b] += terms[i];
                            if partial[b] < floor - SKIP_MARGIN {
                                below = true;
                                break 'sub;
                            }
                        }
                    }
                }
                if below {
                    out[b] = None;
                    dropped = true;
                }
            }
            if dropped {
                let keep: Vec<usize> = (0..alive.len()).filter(|&k| out[alive[k]].is_some()).collect();
                alive = keep.iter().map(|&k| alive[k]).collect();
                cols = keep.iter().map(|&k| cols[k]).collect();
                if 4 * alive.len() < 3 * (z_alive.ncols() / c) {
                    z_alive = Cow::Owned(Mat::from_fn(n, alive.len() * c, |i, col| z_alive[(i, cols[col / c] * c + col % c)]));
                    cols = (0..alive.len()).collect();
                }
            }
        }
        out
    }

    /// log w from a sample's terms, or -inf if it is certainly below `floor`: the partial sums
    /// are checked in `order`, as [`Self::batch_terms`] does (which can only stop sooner at a
    /// higher floor), then summed and checked in datum order, so whether a sample is kept, and
    /// its weight, do not depend on `order`.
    fn log_weight(&self, t: &SampleTerms, floor: f64) -> f64 {
        // Stop only when clearly below: the datum-order total differs from a partial sum by
        // rounding and by the terms not yet added (<= 0, or a rounding hair above 0 for the
        // quadrature probit), both far below the margin.
        let mut partial = t.prior;
        for &i in &self.order {
            partial += t.lik[i];
            if partial < floor - SKIP_MARGIN {
                return f64::NEG_INFINITY;
            }
        }
        let mut lw = t.prior;
        for &term in &t.lik {
            lw += term;
            if lw < floor {
                return f64::NEG_INFINITY;
            }
        }
        lw
    }
}

/// One batch of proposal draws ([`Sampler::draw_batch`]).
struct Draws {
    scales: Vec<f64>,
    z: Mat<f64>,
    znorm2: Vec<f64>,
    starts: Vec<Pcg64>,
}

/// A sample's log-weight in parts ([`Sampler::batch_terms`]).
struct SampleTerms {
    prior: f64,
    lik: Vec<f64>,
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

/// Data per vectorised exp in the logit's log-weights (and per product L z of the lazy pass).
const LOGIT_GROUP: usize = 16;

/// Data per vectorised Phi call of the u-sample probit's log-weights: more amortise the call
/// and fill the vector blocks; fewer waste less on a sample that stops within them.
const PROBIT_SUBGROUP: usize = 4;

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
        let lx = Chol::factor_with_jitter(km.kx().as_ref(), "Kx")?;
        let lc_chol = Chol::factor_with_jitter(km.kc().as_ref(), "Kc")?;
        let lc = lc_chol.l().to_owned();
        let m = km.posterior_mean().to_vec();
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
        diagnostics.number("jitter_kx", lx.jitter());
        let post = if self.params.scale == "posterior" {
            // V = K - K T K = L_K S L_K^T with S = I - L_K^T T L_K = (I + L_K^T W L_K)^{-1}, whose
            // eigenvalues lie in (0, 1]. Factor S, not V: the cancellation in K - K T K (and the
            // jitter it then needs) would let the proposal spread into K's near-null space, where
            // the prior has no mass, and wreck the weights (glass, signal variance ~16).
            let lk = crate::linalg::kron(lx.l(), lc.as_ref());
            let s = Mat::<f64>::identity(p, p) - lk.transpose() * km.t_matrix() * &lk;
            let ls = Chol::factor_with_jitter(sym(&s).as_ref(), "I - L_K^T T L_K (proposal scale)")?;
            diagnostics.number("jitter_v", ls.jitter());
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
                Lik::Logit => lik.exact_log_prob(&m[i * c..(i + 1) * c], problem.y[i]),
                Lik::Probit => log_probit_class_prob(&m[i * c..(i + 1) * c], problem.y[i]),
            })
            .collect();
        let mut order: Vec<usize> = (0..n).collect();
        order.sort_by(|&i, &j| centre_fit[i].total_cmp(&centre_fit[j]).then(i.cmp(&j)));
        let mut sampler = Sampler {
            lik,
            order: Vec::new(),
            l_visit: Mat::new(),
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
            n_samples: self.params.n_samples,
            batch: self.params.batch,
            negligible: self.params.negligible_log_weight,
        };
        sampler.set_order(order);
        // Pass 1: the weights (evidence and diagnostics); log-weights kept (n_s scalars) for prediction.
        let chi = ChiSquared::new(nu).map_err(|e| FitError::Numerical(format!("chi-squared: {e:?}")))?;
        let mut rng = Pcg64::seed_from_u64(seed);
        // u-draws of the probit estimate come from their own streams (one per sample and datum),
        // so the f-draws can be regenerated identically at prediction time.
        let useed = seed ^ 0x9e37_79b9_7f4a_7c15;
        let mut acc = WeightAcc::new(0);
        let mut log_w = Vec::with_capacity(self.params.n_samples);
        // The samples the predictive may use: the first n_test.
        let n_test = if self.params.n_test_samples == 0 { self.params.n_samples } else { self.params.n_test_samples.min(self.params.n_samples) };
        // (index, scale, generator state) of every kept sample among them, to redraw its z.
        let mut replay = Vec::new();
        let mut half = None;
        let mut done = 0;
        let mut it = 0;
        while done < sampler.n_samples {
            ctx.check_deadline()?;
            let bsz = sampler.batch.min(sampler.n_samples - done);
            let draws = sampler.draw_batch(&mut rng, &chi, bsz);
            // The floor only rises within the batch, so its value at the start is a safe one for
            // the lazy pass; each sample is then checked against the floor at its turn.
            let terms = sampler.batch_terms(&draws, done, useed, acc.max - sampler.negligible);
            for (b, t) in terms.iter().enumerate() {
                let lw = t.as_ref().map_or(f64::NEG_INFINITY, |t| sampler.log_weight(t, acc.max - sampler.negligible));
                acc.add(lw);
                log_w.push(lw);
                if lw > f64::NEG_INFINITY && done + b < n_test {
                    replay.push((done + b, draws.scales[b], draws.starts[b].clone()));
                }
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
        diagnostics.number("is_ess", ess);
        Ok(ImportanceModel { km, sampler, log_w, replay, n_test, log_ub, diagnostics, extra })
    }
}

fn sym(a: &Mat<f64>) -> Mat<f64> {
    Mat::from_fn(a.nrows(), a.ncols(), |i, j| 0.5 * (a[(i, j)] + a[(j, i)]))
}

/// log Z_B = -KL(q || p) + L with L = sum_i E_q log p(y_i | f_i) estimated from f ~ q jointly;
/// returns (-KL + L-hat + 3.09 sd / sqrt(n_s), -KL + L-hat)  (notes D§6.4).
fn z_b_estimate(km: &KlmnlModel, lik: LikEval, ns: usize, batch: usize, rng: &mut Pcg64) -> Result<(f64, f64), FitError> {
    let (n, c) = (km.n_train(), km.n_model_classes());
    let p = n * c;
    let k = km.prior_covariance();
    let v = k - k * km.t_matrix() * k;
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
                    f[q] = km.posterior_mean()[i * c + q] + fz[(i * c + q, b)];
                }
                let yi = km.one_hot_labels()[i * c..(i + 1) * c].iter().position(|&v| v == 1.0).unwrap_or(0);
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

pub struct ImportanceModel {
    km: KlmnlModel,
    sampler: Sampler,
    log_w: Vec<f64>,
    /// (index, scale s, generator state before its z) of the samples with a finite log-weight
    /// among the first `n_test`, in index order.
    replay: Vec<(usize, f64, Pcg64)>,
    n_test: usize,
    log_ub: f64,
    diagnostics: Diagnostics,
    extra: BTreeMap<String, f64>,
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
        let pseed: u64 = rng.random();
        // Samples with weight below e^-negligible of the largest add nothing visible: skip them.
        let max_lw = self.log_w[..self.n_test].iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let visible: Vec<&(usize, f64, Pcg64)> = self.replay.iter().filter(|(k, _, _)| self.log_w[*k] >= max_lw - s.negligible).collect();
        let mut acc = WeightAcc::new(mt * c);
        let mut fstar = vec![0.0; mt * c];
        let mut eps = vec![0.0; c];
        let mut next = 0;
        for chunk in visible.chunks(s.batch) {
            // Their draws again (bit for bit), and K_*^T K^{-1} (f - m) / s = (A_x^T (x) L_c) u
            // for all of them at once: A_x^T U, then L_c per sample.
            let z = s.redraw(&chunk.iter().map(|(_, _, st)| st).collect::<Vec<_>>());
            let au = s.right_lc(&(&axt * &*s.whiten(&z)), chunk.len());
            for (k, &&(sample, scale, _)) in chunk.iter().enumerate() {
                // Every weight before this sample enters the normaliser, in sample order.
                while next < sample {
                    acc.add(self.log_w[next]);
                    next += 1;
                }
                let r = acc.add(self.log_w[sample]);
                next += 1;
                let rng = &mut sample_rng(pseed, sample);
                for j in 0..mt {
                    for q in 0..c {
                        eps[q] = rng.sample::<f64, _>(StandardNormal);
                    }
                    let sk = kappa[j].sqrt();
                    let fj = &mut fstar[j * c..(j + 1) * c];
                    for q in 0..c {
                        let noise: f64 = (0..=q).map(|k| s.lc[(q, k)] * eps[k]).sum();
                        fj[q] = means[j][q] + scale * au[(j, k * c + q)] + sk * noise;
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
        }
        while next < self.n_test {
            acc.add(self.log_w[next]);
            next += 1;
        }
        Ok((0..mt).map(|j| (0..c).map(|q| acc.pred[j * c + q] / acc.sum).collect()).collect())
    }

}

impl Fitted for ImportanceModel {
    /// IS probabilities renormalised over the present classes; the log-values of IS (over the
    /// model's classes), (24) and (25) go along as `log_pred_is`, `log_pred24`, `log_pred25`.
    fn predict(&self, x: &Array2<f64>, rng: &mut Pcg64) -> Result<Prediction, FitError> {
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
        let log_p_is = Array2::from_shape_fn((x.nrows(), cp), |(j, q)| probs[j][q].max(f64::MIN_POSITIVE).ln());
        Ok(Prediction::new(out)
            .with_values("log_pred_is", log_p_is)
            .with_values("log_pred24", leading_columns(&kl.log_p24, cp))
            .with_values("log_pred25", leading_columns(&kl.log_p25, cp)))
    }

    fn evidence(&self) -> Option<Evidence> {
        Some(Evidence::new(self.log_ub, EvidenceKind::Estimate))
    }

    fn kernels(&self) -> KernelSet {
        self.km.kernels()
    }

    fn diagnostics(&self) -> Diagnostics {
        self.diagnostics.clone()
    }

    /// IS, (24) and (25) log p(y*) sums, the bracket (24) <= IS <= (25) per point and for the
    /// sums (Chai §9.1 claim (c)), and Theorem 12's lower bound.
    fn test_metrics(&self, prediction: &Prediction, y: &[usize]) -> BTreeMap<String, f64> {
        let mut out = prediction.class_value_sums(y);
        let v = &prediction.log_class_values;
        let (is, e24, e25) = (&v["log_pred_is"], &v["log_pred24"], &v["log_pred25"]);
        let inside = y.iter().enumerate().filter(|&(j, &t)| e24[(j, t)] <= is[(j, t)] && is[(j, t)] <= e25[(j, t)]).count();
        let (s_is, s24, s25) = (out["log_pred_is_sum"], out["log_pred24_sum"], out["log_pred25_sum"]);
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

    /// The logit's grouped log-weights (f formed lazily a group of 16 data at a time, one
    /// vectorised exp per group, skip checks inside a group) against the plain sum of
    /// f_y - log sum exp(f) per datum from the full product L z, with 40 data (two full groups
    /// and a partial one); the skip decision at floors just above and below each weight; and
    /// the lazy pass at a floor that drops about half the samples keeps exactly those above it.
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
        let d = s.draw_batch(&mut Pcg64::seed_from_u64(4), &chi, 50);
        let fz = s.lx.l() * &d.z;
        let all = s.batch_terms(&d, 0, 1, f64::NEG_INFINITY);
        let mut want = vec![0.0; 50];
        for b in 0..50 {
            want[b] = s.log_prior_over_proposal(d.scales[b], &d.z, d.znorm2[b], b);
            for i in 0..n {
                let f: Vec<f64> = (0..4).map(|q| s.m[i * 4 + q] + d.scales[b] * fz[(i, b * 4 + q)]).collect();
                want[b] += f[y[i]] - log_sum_exp(&f);
            }
            let t = all[b].as_ref().expect("no floor, no skip");
            let got = s.log_weight(t, f64::NEG_INFINITY);
            assert!((got - want[b]).abs() < 1e-12 * want[b].abs(), "sample {b}: {got} vs {}", want[b]);
            assert_eq!(s.log_weight(t, want[b] + 1e-3), f64::NEG_INFINITY);
            assert_eq!(s.log_weight(t, want[b] - 1e-3), got);
        }
        let mut sorted = want.clone();
        sorted.sort_by(f64::total_cmp);
        let floor = sorted[25];
        let lazy = s.batch_terms(&d, 0, 1, floor);
        for b in 0..50 {
            if (want[b] - floor).abs() > 1e-6 {
                assert_eq!(lazy[b].is_some(), want[b] > floor, "sample {b}: {} vs floor {floor}", want[b]);
            }
            if let Some(t) = &lazy[b] {
                assert!((s.log_weight(t, f64::NEG_INFINITY) - want[b]).abs() < 1e-12 * want[b].abs());
            }
        }
    }

    #[test]
    fn a_sample_redrawn_from_its_generator_state_has_the_same_z_bit_for_bit() {
        let x = Array2::from_shape_fn((7, 1), |(i, _)| i as f64);
        let y = vec![0, 1, 2, 0, 1, 2, 0];
        let problem = Problem { x: &x, y: &y, n_classes: 3 };
        let kernel = SqExp { log_variance: 0.0, log_lengthscales: vec![0.0], learn_variance: false };
        let method = ImportanceParams::from_settings(&serde_json::json!({ "n_samples": 100 })).unwrap().check(Lik::Logit).unwrap();
        let mut rng = Pcg64::seed_from_u64(3);
        let model = method.fit_model(&problem, &kernel, HyperPolicy::Fixed, &mut FitContext::new(&mut rng, None)).unwrap();
        let s = &model.sampler;
        let d = s.draw_batch(&mut Pcg64::seed_from_u64(9), &ChiSquared::new(s.df).unwrap(), 20);
        let picks = [3usize, 4, 17];
        let z = s.redraw(&picks.iter().map(|&b| &d.starts[b]).collect::<Vec<_>>());
        for (k, &b) in picks.iter().enumerate() {
            for q in 0..3 {
                for i in 0..7 {
                    assert_eq!(z[(i, k * 3 + q)].to_bits(), d.z[(i, b * 3 + q)].to_bits(), "sample {b}");
                }
            }
        }
        // The model's replay list covers exactly the finite weights among the test samples.
        let finite: Vec<usize> = (0..model.n_test).filter(|&k| model.log_w[k].is_finite()).collect();
        assert_eq!(model.replay.iter().map(|r| r.0).collect::<Vec<_>>(), finite);
    }

    #[test]
    fn the_batched_probit_is_the_u_sample_average_of_products_of_phi() {
        // (1/R) sum_r prod_{j != y} Phi(u_r + f_y - f_j) with the same u-draws and the scalar
        // Phi, for several data at once (a generator each) and for all classes from one
        // generator in turn (the predictive's class probabilities).
        let lik = LikEval { lik: Lik::Probit, u_samples: 20 };
        let c = 4;
        let f: Vec<f64> = (0..3 * c).map(|k| ((k * 37) % 11) as f64 * 0.7 - 3.0).collect();
        let want = |fd: &[f64], y: usize, rng: &mut Pcg64| -> f64 {
            let mean = (0..20)
                .map(|_| {
                    let u: f64 = rng.sample(StandardNormal);
                    (0..c).filter(|&j| j != y).map(|j| crate::special::normal_cdf(u + fd[y] - fd[j])).product::<f64>()
                })
                .sum::<f64>()
                / 20.0;
            mean.ln()
        };
        let ys = [2, 0, 3];
        let mut out = [0.0; 3];
        let mut rngs: Vec<Pcg64> = (0..3).map(|d| Pcg64::seed_from_u64(10 + d)).collect();
        lik.probit_log_probs(&f, &ys, &mut rngs, &mut out);
        for d in 0..3 {
            let w = want(&f[d * c..(d + 1) * c], ys[d], &mut Pcg64::seed_from_u64(10 + d as u64));
            assert!((out[d] - w).abs() < 1e-13 * w.abs().max(1.0), "datum {d}: {} vs {w}", out[d]);
        }
        let got = lik.probs(&f[..c], &mut Pcg64::seed_from_u64(5));
        let mut rng = Pcg64::seed_from_u64(5);
        for (k, g) in got.iter().enumerate() {
            let w = want(&f[..c], k, &mut rng).exp();
            assert!((g - w).abs() < 1e-13 * w, "class {k}: {g} vs {w}");
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
    /// are skipped, are the same as in datum order (to rounding: f is formed in groups of data
    /// in visiting order), for both likelihoods, the probit by u-samples and by quadrature, and
    /// both proposal scales.
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
            datum.set_order((0..n).collect());
            assert_ne!(sorted.order, datum.order, "{lik:?}: the test needs a non-trivial order");
            let chi = ChiSquared::new(sorted.df).unwrap();
            let d = sorted.draw_batch(&mut Pcg64::seed_from_u64(8), &chi, 300);
            // The lazy pass at `floor`, then each sample's check at the same floor.
            let weights = |s: &Sampler, floor: f64| -> Vec<f64> {
                s.batch_terms(&d, 0, 77, floor).iter().map(|t| t.as_ref().map_or(f64::NEG_INFINITY, |t| s.log_weight(t, floor))).collect()
            };
            let full = weights(&datum, f64::NEG_INFINITY);
            let top = full.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            // Floors that put a good share of the samples below them, and one just above a sample's weight.
            for floor in [f64::NEG_INFINITY, top - 30.0, top - 5.0, full[17] + 1e-9] {
                let (a, s) = (weights(&datum, floor), weights(&sorted, floor));
                let mut skipped = 0;
                for b in 0..300 {
                    assert_eq!(a[b] == f64::NEG_INFINITY, s[b] == f64::NEG_INFINITY, "{lik:?} u={u_samples} {scale}: sample {b}, floor {floor}");
                    assert!(a[b] == s[b] || (a[b] - s[b]).abs() < 1e-12 * a[b].abs(), "{lik:?} u={u_samples} {scale}: sample {b}: {} vs {}", a[b], s[b]);
                    // A kept weight is the full one.
                    assert!(a[b] == f64::NEG_INFINITY || (a[b] - full[b]).abs() < 1e-12 * full[b].abs());
                    skipped += (a[b] == f64::NEG_INFINITY) as usize;
                }
                if floor == top - 5.0 {
                    assert!(skipped > 30, "{lik:?} u={u_samples} {scale}: only {skipped} of 300 below the floor");
                }
                if floor == full[17] + 1e-9 {
                    assert_eq!(a[17], f64::NEG_INFINITY);
                }
            }
        }
    }
}
