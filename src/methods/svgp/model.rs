//! The sparse model: kernels, inducing inputs Z, the factor of K(Z, Z) per kernel and q(v^c)
//! per class; its marginals q(f_n^c) and the predictive.
use super::posterior::{kmm_factor, Posterior};
use super::SvgpLikelihood;
use crate::kernels::KernelSet;
use crate::linalg::Chol;
use crate::methods::{Diagnostics, Evidence, FitError, Fitted, Prediction};
use crate::results::EvidenceKind;
use faer::Mat;
use ndarray::{s, Array2};
use rand_pcg::Pcg64;

/// Rows per block when a large set is pushed through the model (bounds the [M, rows] buffers).
pub(crate) const BLOCK_ROWS: usize = 2000;

#[derive(Clone, Debug)]
pub struct Sparse {
    pub kernels: KernelSet,
    /// The inducing inputs: one set shared by the classes, or one per class
    /// (`inducing_per_class`, Villacampa-Calvo & Hernandez-Lobato's VI).
    pub zs: Vec<Array2<f64>>,
    /// Factor of K(Z, Z) for each distinct (kernel, Z) pair, a "prior" (one if both are shared,
    /// else one per class).
    pub chols: Vec<Chol>,
    /// Gram K(Z, Z) of each prior (without jitter), for its gradient.
    pub kmms: Vec<Mat<f64>>,
    pub q: Vec<Posterior>,
    /// The parameterisation optimised: whitened (q(v) held fixed when the kernel or Z move,
    /// the default) or unwhitened (q(u) held fixed: the kernel and Z gradients then carry
    /// q(v)'s dependence on L, and `Posterior::reexpress` carries q across their steps).
    /// q is held as q(v) either way.
    pub whiten: bool,
}

/// What one kernel contributes at a block of rows: K(Z, X), A = L^{-1} K(Z, X), diag K(X, X).
pub(crate) struct KernelBlock {
    pub kmn: Mat<f64>,
    pub a: Mat<f64>,
    pub knn: Vec<f64>,
}

/// Marginal means and variances [rows, C] of q(f), with what the gradients need.
pub(crate) struct Marginals {
    pub mean: Array2<f64>,
    pub var: Array2<f64>,
    pub blocks: Vec<KernelBlock>,
    /// S_c A for each class c (A of its kernel).
    pub sa: Vec<Mat<f64>>,
}

impl Sparse {
    /// `zs`: one set shared by all classes, or one per class.
    pub fn new(kernels: KernelSet, zs: Vec<Array2<f64>>, q: Vec<Posterior>) -> Result<Sparse, FitError> {
        let n_priors = kernels.kernels().len().max(zs.len());
        let mut chols = Vec::new();
        let mut kmms = Vec::new();
        for p in 0..n_priors {
            let (k, z) = (&kernels.kernels()[p.min(kernels.kernels().len() - 1)], &zs[p.min(zs.len() - 1)]);
            let kmm = k.gram_many(z);
            let what = if n_priors == 1 { "the shared kernel".to_string() } else { format!("class {}", p + 1) };
            chols.push(kmm_factor(&kmm, &what)?);
            kmms.push(kmm);
        }
        Ok(Sparse { kernels, zs, chols, kmms, q, whiten: true })
    }

    pub fn n_classes(&self) -> usize {
        self.q.len()
    }

    /// Index of the prior (kernel and Z) of class c.
    pub fn kernel_of(&self, c: usize) -> usize {
        if self.chols.len() == 1 {
            0
        } else {
            c
        }
    }

    /// The kernel of prior p.
    pub fn prior_kernel(&self, p: usize) -> &dyn crate::kernels::Kernel {
        self.kernels.kernels()[p.min(self.kernels.kernels().len() - 1)].as_ref()
    }

    /// Index into `zs` of prior p's inducing inputs.
    pub fn prior_z(&self, p: usize) -> usize {
        p.min(self.zs.len() - 1)
    }

    /// M, the inducing inputs of each prior.
    pub fn m(&self) -> usize {
        self.zs[0].nrows()
    }

    /// Number of inducing-input coordinates (all sets).
    pub fn n_z(&self) -> usize {
        self.zs.iter().map(|z| z.len()).sum()
    }

    pub fn jitter(&self) -> f64 {
        self.chols.iter().map(|c| c.jitter()).fold(0.0, f64::max)
    }

    pub(crate) fn marginals(&self, x: &Array2<f64>) -> Marginals {
        let blocks: Vec<KernelBlock> = (0..self.chols.len())
            .map(|p| {
                let (k, chol) = (self.prior_kernel(p), &self.chols[p]);
                let kmn = k.cross_many(&self.zs[self.prior_z(p)], x);
                let a = chol.solve_l_par(kmn.as_ref());
                KernelBlock { knn: k.diag(x), kmn, a }
            })
            .collect();
        let (n, c) = (x.nrows(), self.n_classes());
        let mut mean = Array2::zeros((n, c));
        let mut var = Array2::zeros((n, c));
        let mut sa = Vec::with_capacity(c);
        for class in 0..c {
            let b = &blocks[self.kernel_of(class)];
            let m = self.q[class].mean();
            let s_a = self.q[class].cov_times(b.a.as_ref());
            for (j, (mu, aa, asa)) in crate::scalable::projection::projections(&b.a, m, &s_a).into_iter().enumerate() {
                mean[(j, class)] = mu;
                // Clamped: rounding can take k(x, x) - a^T a a hair below zero.
                var[(j, class)] = (b.knn[j] - aa + asa).max(1e-12);
            }
            sa.push(s_a);
        }
        Marginals { mean, var, blocks, sa }
    }
}

/// A fitted SVGP.
pub struct SvgpModel {
    pub(crate) sparse: Sparse,
    pub(crate) likelihood: SvgpLikelihood,
    pub(crate) evidence: Option<f64>,
    pub(crate) diagnostics: Diagnostics,
}

impl Fitted for SvgpModel {
    fn predict(&self, x: &Array2<f64>, rng: &mut Pcg64) -> Result<Prediction, FitError> {
        let c = self.sparse.n_classes();
        let mut probs = Array2::zeros((x.nrows(), c));
        // Robust-max: E[log p(y = k | f)] beside the predictive (log E[p]), for Fig. 7-style traces.
        let mut expected_log = match self.likelihood {
            SvgpLikelihood::RobustMax(_) => Some(Array2::zeros((x.nrows(), c))),
            _ => None,
        };
        for start in (0..x.nrows()).step_by(BLOCK_ROWS) {
            let end = (start + BLOCK_ROWS).min(x.nrows());
            let block = x.slice(s![start..end, ..]).to_owned();
            let m = self.sparse.marginals(&block);
            for j in 0..end - start {
                let (mean, var) = (m.mean.row(j).to_vec(), m.var.row(j).to_vec());
                let p = match (&self.likelihood, expected_log.as_mut()) {
                    (SvgpLikelihood::RobustMax(rm), Some(e)) => {
                        let (p, elog) = rm.predictive_and_expected_log_lik(&mean, &var);
                        e.row_mut(start + j).assign(&ndarray::Array1::from(elog));
                        p
                    }
                    _ => self.likelihood.predictive(&mean, &var, rng),
                };
                probs.row_mut(start + j).assign(&ndarray::Array1::from(p));
            }
        }
        let mut prediction = Prediction::new(probs);
        if let Some(e) = expected_log {
            prediction = prediction.with_values("expected_log_lik", e);
        }
        prediction.jitter = self.sparse.jitter();
        Ok(prediction)
    }

    fn evidence(&self) -> Option<Evidence> {
        self.evidence.map(|v| Evidence::new(v, EvidenceKind::LowerBound))
    }

    fn kernels(&self) -> KernelSet {
        self.sparse.kernels.clone()
    }

    fn inducing_inputs(&self) -> Vec<Array2<f64>> {
        self.sparse.zs.clone()
    }

    fn diagnostics(&self) -> Diagnostics {
        let mut d = self.diagnostics.clone();
        d.jitter = Some(self.sparse.jitter());
        d
    }
}
