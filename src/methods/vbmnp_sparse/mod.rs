//! Sparse variational multinomial-probit GP: the multiclass IVM-style assumed-density
//! filtering scheme of Girolami & Rogers (2006) §5 (eqs. 5.1–5.5; notes §4).
//!
//! S points are included one at a time, either at random or by the paper's informative
//! criterion (eq. 5.5: the candidate whose own label has the lowest current predictive
//! probability). Each inclusion is an exact unit-noise GP-regression update with pseudo-target
//! ỹ_n = m̃_n + p_n (eqs. 4.3–4.4 at the current m̃_n). With one kernel shared by the classes,
//! the matrices M (S x N) and the variances s (N) of eqs. 5.1–5.3 are shared; only the K mean
//! vectors m̃_k differ (notes §4.1 [DERIVED]). The kernel is fixed (the paper fixes it).
//!
//! Predictions: after S inclusions the posterior is GP regression on the active set with the
//! stored pseudo-targets, m̃_k(x) = k_xI (K_II + I)^{-1} ỹ_I,k and
//! s(x) = k(x,x) - k_xI (K_II + I)^{-1} k_Ix, fed to the §4.5 predictive formula.
#![allow(non_snake_case)]
mod adf;
use super::{parse_settings, Diagnostics, Evidence, FitContext, FitError, Fitted, HyperPolicy, Method, Prediction, Problem, ProblemShape};
use crate::kernels::sqexp_phi::{gram_cross_phi, gram_phi, phi_from_kernel};
use crate::kernels::{KernelSet, SqExp};
use crate::likelihoods::probit::{log_predictive_class_prob, predictive_class_probs, truncated_moments};
use crate::linalg::Chol;
use adf::adf;
use faer::Mat;
use ndarray::Array2;
use rand::RngExt;
use rand_pcg::Pcg64;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Version of this method's numbers, part of every cell key: bump it when a change of the code
/// (here or in shared numerics it uses) changes any number the method computes, so stored cells
/// are recomputed. `tests/numerics_versions.rs` fails when the output changes without a bump.
pub const NUMERICS_VERSION: u32 = 1;

/// How the next point is chosen.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Inclusion {
    /// Eq. 5.5: lowest predictive probability of the candidate's own label (ties: the first
    /// step, where every score is 1/K, is drawn at random).
    #[default]
    Informative,
    /// Uniformly among the points not yet included.
    Random,
}

/// Settings (`method: vbmnp_sparse`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VbmnpSparseParams {
    /// Maximum number S of included points (§6.3: 50; §6.4: 2000); capped at N.
    #[serde(default = "d_active")]
    pub active_size: usize,
    #[serde(default)]
    pub inclusion: Inclusion,
    /// Record the training-pool error of argmax m̃ every this many inclusions (0 = never).
    #[serde(default = "d_trace_every")]
    pub trace_every: usize,
}

fn d_active() -> usize {
    50
}
fn d_trace_every() -> usize {
    1
}

impl Default for VbmnpSparseParams {
    fn default() -> Self {
        parse_settings(&serde_json::Value::Null).expect("defaults parse")
    }
}

impl VbmnpSparseParams {
    pub fn check(self) -> Result<VbmnpSparse, String> {
        if self.active_size == 0 {
            return Err("settings.active_size must be at least 1".into());
        }
        Ok(VbmnpSparse { params: self })
    }
}

#[derive(Clone, Debug)]
pub struct VbmnpSparse {
    params: VbmnpSparseParams,
}

impl Method for VbmnpSparse {
    fn name(&self) -> &'static str {
        "vbmnp_sparse"
    }

    fn supports(&self, _shape: &ProblemShape, kernels: &KernelSet, hyper: HyperPolicy) -> Result<(), String> {
        if hyper == HyperPolicy::Learn {
            return Err("vbmnp_sparse keeps the kernel fixed (as the paper does): use hyper: fixed or hyper: {from: ...}".into());
        }
        super::shared_sqexp(kernels, "vbmnp_sparse").map(|_| ())
    }

    fn train(&self, problem: &Problem, kernels: &KernelSet, _: HyperPolicy, ctx: &mut FitContext) -> Result<Box<dyn Fitted>, FitError> {
        let kernel = super::shared_sqexp(kernels, "vbmnp_sparse").map_err(FitError::Unsupported)?;
        let (x, y, K) = (problem.x, problem.y, problem.n_classes);
        let phi = phi_from_kernel(kernel);
        let s2 = kernel.log_variance.exp();
        let res = adf(x, y, K, &phi, s2, &self.params, ctx)?;
        let xa = x.select(ndarray::Axis(0), &res.active);
        let mut A = gram_phi(&xa, &phi, s2);
        for i in 0..A.nrows() {
            A[(i, i)] += 1.0;
        }
        let chol = Chol::factor(A.as_ref(), "K_II + I")?;
        let Ya = Mat::from_fn(res.active.len(), K, |i, k| res.y_active[i][k]);
        let B = chol.solve(Ya.as_ref());
        let pool_error = (0..x.nrows()).filter(|&i| crate::linalg::argmax(&res.m[i]) != y[i]).count() as f64 / x.nrows() as f64;
        Ok(Box::new(VbmnpSparseModel { xa, phi, s2, chol, B, kernel: kernel.clone(), n_active: res.active.len(), pool_error }))
    }
}

pub struct VbmnpSparseModel {
    xa: Array2<f64>,
    phi: Vec<f64>,
    s2: f64,
    chol: Chol,
    B: Mat<f64>,
    kernel: SqExp,
    n_active: usize,
    pool_error: f64,
}

impl Fitted for VbmnpSparseModel {
    fn predict(&self, xs: &Array2<f64>, _rng: &mut Pcg64) -> Result<Prediction, FitError> {
        let Kx = gram_cross_phi(&self.xa, xs, &self.phi, self.s2);
        let mu = Kx.transpose() * &self.B;
        let var = crate::linalg::reduced_variances(&vec![self.s2; xs.nrows()], self.chol.solve_l(Kx.as_ref()).as_ref());
        let K = self.B.ncols();
        let mut out = Array2::zeros((xs.nrows(), K));
        for j in 0..xs.nrows() {
            let var = var[j];
            let m: Vec<f64> = (0..K).map(|k| mu[(j, k)]).collect();
            let p = predictive_class_probs(&m, &vec![var; K]);
            for k in 0..K {
                out[[j, k]] = p[k];
            }
        }
        Ok(Prediction::new(out))
    }

    fn evidence(&self) -> Option<Evidence> {
        None
    }

    fn kernels(&self) -> KernelSet {
        KernelSet::shared(Box::new(self.kernel.clone()))
    }

    fn diagnostics(&self) -> Diagnostics {
        Diagnostics { iterations: Some(self.n_active as u64), ..Default::default() }
    }

    fn extra_metrics(&self) -> BTreeMap<String, f64> {
        let mut m = BTreeMap::new();
        m.insert("n_active".into(), self.n_active as f64);
        m.insert("pool_error".into(), self.pool_error);
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use faer::linalg::solvers::DenseSolveCore;
    use rand::SeedableRng;
    use rand_distr::StandardNormal;

    fn data(n: usize, seed: u64) -> (Array2<f64>, Vec<usize>) {
        let mut rng = Pcg64::seed_from_u64(seed);
        let x = Array2::from_shape_fn((n, 2), |_| rng.sample::<f64, _>(StandardNormal));
        let y = (0..n)
            .map(|i| {
                if x[[i, 0]] > 0.5 {
                    0
                } else if x[[i, 1]] > 0.0 {
                    1
                } else {
                    2
                }
            })
            .collect();
        (x, y)
    }

    #[test]
    fn adf_matches_batch_gp_regression_on_the_active_set() {
        // After S inclusions m̃ and s on the pool equal GP regression (unit noise) on the active
        // set with the stored pseudo-targets (notes §4.1 [DERIVED]); dense oracle. At a signal
        // variance other than 1 too, where s must start at diag(C) = s2 (notes §10.5).
        let (x, y) = data(40, 1);
        let phi = [0.6];
        for (inclusion, s2) in
            [(Inclusion::Random, 1.0), (Inclusion::Informative, 1.0), (Inclusion::Random, 2.5), (Inclusion::Informative, 2.5)]
        {
            let params = VbmnpSparseParams { active_size: 12, inclusion, trace_every: 0 };
            let mut rng = Pcg64::seed_from_u64(2);
            let mut ctx = FitContext::new(&mut rng, None);
            let r = adf(&x, &y, 3, &phi, s2, &params, &mut ctx).unwrap();
            let xa = x.select(ndarray::Axis(0), &r.active);
            let mut A = gram_phi(&xa, &phi, s2);
            for i in 0..12 {
                A[(i, i)] += 1.0;
            }
            let Ainv = A.partial_piv_lu().inverse();
            let Kx = gram_cross_phi(&x, &xa, &phi, s2);
            let W = &Kx * &Ainv;
            for i in 0..40 {
                let var = s2 - (0..12).map(|a| W[(i, a)] * Kx[(i, a)]).sum::<f64>();
                assert!((var - r.s[i]).abs() < 1e-10, "s {i}");
                for k in 0..3 {
                    let mean: f64 = (0..12).map(|a| W[(i, a)] * r.y_active[a][k]).sum();
                    assert!((mean - r.m[i][k]).abs() < 1e-10, "m {i} {k}");
                }
            }
            let mut uniq = r.active.clone();
            uniq.sort();
            uniq.dedup();
            assert_eq!(uniq.len(), 12);
        }
    }

    #[test]
    fn informative_inclusion_picks_the_lowest_own_label_probability() {
        let (x, y) = data(30, 5);
        let phi = [0.5];
        let mut rng = Pcg64::seed_from_u64(3);
        let mut ctx = FitContext::new(&mut rng, None);
        let p4 = VbmnpSparseParams { active_size: 4, inclusion: Inclusion::Informative, trace_every: 0 };
        let r4 = adf(&x, &y, 3, &phi, 1.0, &p4, &mut ctx).unwrap();
        let mut rng = Pcg64::seed_from_u64(3);
        let mut ctx = FitContext::new(&mut rng, None);
        let p5 = VbmnpSparseParams { active_size: 5, ..p4 };
        let r5 = adf(&x, &y, 3, &phi, 1.0, &p5, &mut ctx).unwrap();
        assert_eq!(&r5.active[..4], &r4.active[..]);
        let scores: Vec<(f64, usize)> = (0..30)
            .filter(|i| !r4.active.contains(i))
            .map(|i| (crate::likelihoods::probit::predictive_class_probs(&r4.m[i], &[r4.s[i]; 3])[y[i]], i))
            .collect();
        let best = scores.iter().cloned().fold((f64::INFINITY, 0), |a, b| if b.0 < a.0 { b } else { a });
        assert_eq!(r5.active[4], best.1);
    }

    /// The fitted model's predictive is the §4.5 probit predictive of unit-noise GP regression
    /// on its active set with the stored pseudo-targets: m(x) = k_xI (K_II + I)^{-1} ỹ_I and
    /// s(x) = s2 - k_xI (K_II + I)^{-1} k_Ix (dense inverse, kernel written out here), and
    /// P(t = c) = P(argmax_k (m_k + sqrt(1 + s) e_k) = c) for independent standard e_k, by Monte
    /// Carlo to 5 standard errors. Rows sum to one, and the fixed-kernel fit generalises.
    #[test]
    fn the_sparse_predictive_is_the_active_set_regression_and_generalises() {
        let (x, y) = data(200, 7);
        let kernel = SqExp { log_variance: 0.0, log_lengthscales: vec![0.0], learn_variance: false };
        let params = VbmnpSparseParams { active_size: 40, ..Default::default() };
        let fit_seed = 1;
        let mut rng = Pcg64::seed_from_u64(fit_seed);
        let mut ctx = FitContext::new(&mut rng, None);
        let m = params
            .clone()
            .check()
            .unwrap()
            .fit(&Problem { x: &x, y: &y, n_classes: 3 }, &KernelSet::shared_se(&kernel), HyperPolicy::Fixed, &mut ctx)
            .unwrap();
        let (xt, yt) = data(300, 8);
        let p = m.predict_proba(&xt, &mut Pcg64::seed_from_u64(0)).unwrap();
        let mut err = 0;
        for (i, r) in p.rows().into_iter().enumerate() {
            assert!((r.sum() - 1.0).abs() < 1e-12);
            if crate::linalg::argmax(&r.to_vec()) != yt[i] {
                err += 1;
            }
        }
        assert!((err as f64) < 0.15 * 300.0, "test error {err}/300");

        // The active set and pseudo-targets the fit stored: the ADF pass is the fit's first use
        // of its stream, so the same seed gives the same pass.
        let mut rng = Pcg64::seed_from_u64(fit_seed);
        let r = adf(&x, &y, 3, &phi_from_kernel(&kernel), 1.0, &params, &mut FitContext::new(&mut rng, None)).unwrap();
        let s = r.active.len();
        // k(x, x') = exp(-|x - x'|^2 / 2): unit variance, unit length-scale.
        let k = |a: ndarray::ArrayView1<f64>, b: ndarray::ArrayView1<f64>| {
            (-0.5 * a.iter().zip(&b).map(|(u, v)| (u - v).powi(2)).sum::<f64>()).exp()
        };
        let a = Mat::from_fn(s, s, |i, j| k(x.row(r.active[i]), x.row(r.active[j])) + if i == j { 1.0 } else { 0.0 });
        let a_inv = a.partial_piv_lu().inverse();
        let mut mc = Pcg64::seed_from_u64(3);
        let draws = 100_000;
        for j in 0..20 {
            let kx: Vec<f64> = (0..s).map(|i| k(x.row(r.active[i]), xt.row(j))).collect();
            let w: Vec<f64> = (0..s).map(|i| (0..s).map(|l| kx[l] * a_inv[(l, i)]).sum()).collect();
            let mean: Vec<f64> = (0..3).map(|c| (0..s).map(|i| w[i] * r.y_active[i][c]).sum()).collect();
            let var = 1.0 - (0..s).map(|i| w[i] * kx[i]).sum::<f64>();
            let scale = (1.0 + var).sqrt();
            let mut wins = [0usize; 3];
            for _ in 0..draws {
                let t: Vec<f64> = mean.iter().map(|m| m + scale * mc.sample::<f64, _>(StandardNormal)).collect();
                wins[crate::linalg::argmax(&t)] += 1;
            }
            for c in 0..3 {
                // The binomial standard error at the model's probability (the hypothesis tested):
                // finite also where the draws give no win for a class.
                let freq = wins[c] as f64 / draws as f64;
                let se = (p[[j, c]] * (1.0 - p[[j, c]]) / draws as f64).sqrt();
                assert!(
                    (p[[j, c]] - freq).abs() < 5.0 * se,
                    "test point {j} class {c}: model {} vs Monte Carlo {freq} (se {se})",
                    p[[j, c]]
                );
            }
        }
    }
}
