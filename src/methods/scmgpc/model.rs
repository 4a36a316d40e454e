//! The sparse model: per class c a kernel, its own inducing inputs Z^c, the factor of
//! K(Z^c, Z^c) + jitter I, and q(v^c) in natural parameters for the whitened inducing values
//! v^c = L_c^{-1} u^c. Whitening is a fixed linear change of variables for fixed kernels, and
//! natural-parameter averaging commutes with it, so CAVI and SVI steps at a given rho are exactly
//! those of the paper's q(u^c) = N(mu^c, Sigma^c) (the adaptive rate's own value is not
//! invariant: `global::target_noise`); a hyper-parameter step holds q(u) fixed by default (q(v)
//! re-expressed under the new factor, as the authors' objective has it), or q(v) with
//! `whiten: true`. The jitter is the authors' 1e-3 on K_mm and on k(x, x), i.e. a
//! white-noise term of the latent GP. K(Z, X) carries none, so Z = X leaves
//! K~_ii = 2 j - j^2 [(K + j I)^{-1}]_ii, between j and 2 j (not 0), as in the authors' code.
use super::predict::{self, PredictRule};
use crate::kernels::{Kernel, KernelSet};
use crate::linalg::{matmul_par, Chol};
use crate::methods::{Diagnostics, Evidence, FitError, Fitted, Prediction};
use crate::results::EvidenceKind;
use crate::scalable::NaturalGaussian;
use faer::Mat;
use ndarray::{s, Array2};
use rand_pcg::Pcg64;
use rayon::prelude::*;

/// Rows per block when a large set is pushed through the model (bounds the [M, rows] buffers).
pub(crate) const BLOCK_ROWS: usize = 2000;

#[derive(Clone, Debug)]
pub(crate) struct ClassGp {
    pub z: Array2<f64>,
    /// K(Z, Z) without jitter (the kernel's own, for its gradient).
    pub kmm: Mat<f64>,
    /// Factor of K(Z, Z) + jitter I (plus any ladder jitter it needed).
    pub chol: Chol,
    pub q: NaturalGaussian,
}

#[derive(Clone, Debug)]
pub(crate) struct Sparse {
    pub kernels: KernelSet,
    pub classes: Vec<ClassGp>,
    pub jitter: f64,
}

/// What class c contributes at a block of rows.
pub(crate) struct ClassBlock {
    pub kmn: Mat<f64>,
    /// A = L^{-1} K(Z, X): kappa_i u = a_i^T v.
    pub a: Mat<f64>,
    /// S A, S the covariance of q(v).
    pub sa: Mat<f64>,
}

/// q(f_i^c) = N(mean, var) at a block of rows, [rows, C], with the per-class blocks.
pub(crate) struct Marginals {
    pub mean: Array2<f64>,
    pub var: Array2<f64>,
    pub blocks: Vec<ClassBlock>,
}

impl Sparse {
    pub fn new(kernels: KernelSet, zs: Vec<Array2<f64>>, qs: Vec<NaturalGaussian>, jitter: f64) -> Result<Sparse, FitError> {
        let classes = zs
            .into_iter()
            .zip(qs)
            .enumerate()
            .map(|(c, (z, q))| {
                let kmm = kernels.class(c).gram_many(&z);
                let chol = factor(&kmm, jitter, c)?;
                Ok(ClassGp { z, kmm, chol, q })
            })
            .collect::<Result<Vec<_>, FitError>>()?;
        Ok(Sparse { kernels, classes, jitter })
    }

    /// The same Z and q(v) under new kernels.
    pub fn with_kernels(&self, kernels: KernelSet) -> Result<Sparse, FitError> {
        let zs = self.classes.iter().map(|g| g.z.clone()).collect();
        self.moved(kernels, zs)
    }

    /// The same q(v) under new kernels and inducing inputs.
    pub fn moved(&self, kernels: KernelSet, zs: Vec<Array2<f64>>) -> Result<Sparse, FitError> {
        let qs = self.classes.iter().map(|g| g.q.clone()).collect();
        Sparse::new(kernels, zs, qs, self.jitter)
    }

    pub fn n_classes(&self) -> usize {
        self.classes.len()
    }

    pub fn kernel(&self, c: usize) -> &dyn Kernel {
        self.kernels.class(c)
    }

    /// Largest jitter the factors needed beyond the fixed one.
    pub fn ladder_jitter(&self) -> f64 {
        self.classes.iter().map(|g| g.chol.jitter()).fold(0.0, f64::max)
    }

    /// Marginals at the rows of `x` (one block; callers block large sets). Classes in parallel:
    /// each is independent, so the result does not depend on the thread count.
    pub fn marginals(&self, x: &Array2<f64>) -> Marginals {
        let n = x.nrows();
        let per: Vec<(ClassBlock, Vec<f64>, Vec<f64>)> = (0..self.n_classes())
            .into_par_iter()
            .map(|c| {
                let g = &self.classes[c];
                let k = self.kernel(c);
                let kmn = k.cross_many(&g.z, x);
                let a = g.chol.solve_l_par(kmn.as_ref());
                let sa = g.q.cov_times(a.as_ref());
                let knn = k.diag(x);
                let mu = g.q.mean();
                let (mut mean, mut var) = (vec![0.0; n], vec![0.0; n]);
                for (j, (m, aa, asa)) in crate::scalable::projection::projections(&a, mu, &sa).into_iter().enumerate() {
                    mean[j] = m;
                    // K~_ii clamped at 0 (rounding can take it a hair below), as the authors do.
                    var[j] = (knn[j] + self.jitter - aa).max(0.0) + asa;
                    var[j] = var[j].max(1e-12);
                }
                (ClassBlock { kmn, a, sa }, mean, var)
            })
            .collect();
        let c = self.n_classes();
        let mut mean = Array2::zeros((n, c));
        let mut var = Array2::zeros((n, c));
        let mut blocks = Vec::with_capacity(c);
        for (k, (b, m, v)) in per.into_iter().enumerate() {
            mean.column_mut(k).assign(&ndarray::Array1::from(m));
            var.column_mut(k).assign(&ndarray::Array1::from(v));
            blocks.push(b);
        }
        Marginals { mean, var, blocks }
    }

    /// Marginal means and variances only, block by block (prediction, full-data ELBO).
    pub fn marginals_blocked(&self, x: &Array2<f64>, mut each: impl FnMut(usize, &Marginals)) {
        for start in (0..x.nrows()).step_by(BLOCK_ROWS) {
            let end = (start + BLOCK_ROWS).min(x.nrows());
            let mg = self.marginals(&x.slice(s![start..end, ..]).to_owned());
            each(start, &mg);
        }
    }

    /// sum_c KL(q(u^c) || p(u^c)) = sum_c KL(q(v^c) || N(0, I)).
    pub fn kl(&self) -> f64 {
        self.classes.iter().map(|g| g.q.kl_standard()).sum()
    }
}

/// K(Z, Z) + jitter I, factored (the ladder adds more only if that fails).
fn factor(kmm: &Mat<f64>, jitter: f64, c: usize) -> Result<Chol, FitError> {
    let m = kmm.nrows();
    let with = Mat::from_fn(m, m, |i, j| kmm[(i, j)] + if i == j { jitter } else { 0.0 });
    Ok(Chol::factor_with_jitter(with.as_ref(), &format!("K(Z, Z) of class {}", c + 1))?)
}

/// A fitted SC-MGPC model.
pub struct ScmgpcModel {
    pub(crate) sparse: Sparse,
    pub(crate) predict: PredictRule,
    /// Rules scored beside `predict` as the prediction's alternatives.
    pub(crate) also_predict: Vec<PredictRule>,
    pub(crate) predict_samples: usize,
    pub(crate) evidence: Option<f64>,
    pub(crate) diagnostics: Diagnostics,
}

impl Fitted for ScmgpcModel {
    fn predict(&self, x: &Array2<f64>, rng: &mut Pcg64) -> Result<Prediction, FitError> {
        let c = self.sparse.n_classes();
        let rules: Vec<PredictRule> = std::iter::once(self.predict).chain(self.also_predict.iter().copied()).collect();
        // One set of draws shared by every Monte Carlo rule and test row.
        let draws = if rules.contains(&PredictRule::MonteCarlo) { predict::normal_draws(self.predict_samples, c, rng) } else { Vec::new() };
        let mut probs = vec![Array2::zeros((x.nrows(), c)); rules.len()];
        self.sparse.marginals_blocked(x, |start, mg| {
            for j in 0..mg.mean.nrows() {
                let (m, v) = (mg.mean.row(j), mg.var.row(j));
                for (rule, out) in rules.iter().zip(probs.iter_mut()) {
                    let p = predict::probs(*rule, m.as_slice().expect("row"), v.as_slice().expect("row"), &draws);
                    out.row_mut(start + j).assign(&ndarray::Array1::from(p));
                }
            }
        });
        if probs.iter().flatten().any(|p: &f64| !p.is_finite()) {
            return Err(FitError::Numerical("scmgpc: a predicted probability is not finite".into()));
        }
        let mut probs = probs.into_iter();
        let mut prediction = Prediction::new(probs.next().expect("the main rule"));
        for (rule, p) in self.also_predict.iter().zip(probs) {
            prediction = prediction.with_alternative(&rule.name(), p);
        }
        prediction.jitter = self.sparse.jitter + self.sparse.ladder_jitter();
        Ok(prediction)
    }

    fn evidence(&self) -> Option<Evidence> {
        self.evidence.map(|v| Evidence::new(v, EvidenceKind::LowerBound))
    }

    fn kernels(&self) -> KernelSet {
        self.sparse.kernels.clone()
    }

    fn inducing_inputs(&self) -> Vec<Array2<f64>> {
        self.sparse.classes.iter().map(|c| c.z.clone()).collect()
    }

    fn diagnostics(&self) -> Diagnostics {
        let mut d = self.diagnostics.clone();
        d.jitter = Some(self.sparse.jitter + self.sparse.ladder_jitter());
        d
    }
}

/// A dense product helper for the global and hyper steps.
pub(crate) fn mm(a: faer::MatRef<'_, f64>, b: faer::MatRef<'_, f64>) -> Mat<f64> {
    matmul_par(a, b)
}
