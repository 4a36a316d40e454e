//! The state of an EP or SEP fit: kernels, each class's prior and q, and the sites.
//!
//! EP keeps every factor's four site scalars and, per (row, class), the direction its sites
//! were stored along (N x C x M numbers: 0.96 GB on MNIST with M = 200). SEP keeps only the
//! tied site of each class (C M^2 numbers, independent of N) and the count n_c of factors
//! touching class c, (N - N_c) + N_c (C - 1): its cavity takes 1 - 1/n_c of the tied site.
use super::gradient::{class_gradient, class_gradient_exact, ClassTerms};
use super::sparse::{ClassPosterior, ClassPrior, PriorRows, SiteSums};
use super::sweep::{sweep, Adjoints, ClassView, Sweep, ViewFor};
use crate::kernels::InputGrads;
use crate::kernels::KernelSet;
use crate::likelihoods::pairwise_step::PairSites;
use crate::methods::FitError;
use crate::scalable::argmax_model::{ArgmaxClass, ArgmaxModel};
use faer::Mat;
use ndarray::{Array2, Axis};
use rayon::prelude::*;

/// Rows per block when the full data are swept for the evidence (bounds the [M, rows] buffers).
const BLOCK_ROWS: usize = 2000;

/// A block of training rows with what every class's prior gives there: built once per step and
/// shared by the refinement and the gradient (only q changes between them; the kernel cross
/// products dominate a minibatch step).
pub(crate) struct Block {
    pub rows: Vec<usize>,
    pub x: Array2<f64>,
    pub y: Vec<usize>,
    pub prior_rows: Vec<PriorRows>,
}

/// EP's per-factor sites over the whole training set.
#[derive(Clone, Debug)]
pub(crate) struct FactorStore {
    /// [N, C], see `PairSites`.
    pub sites: PairSites,
    /// Per class, [N, M]: the direction (in inducing-value space) of row i's sites on the class.
    pub dirs: Vec<Array2<f64>>,
}

/// Not `Clone`: EP's directions are large; snapshots take the model part only.
#[derive(Debug)]
pub(crate) struct State {
    pub kernels: KernelSet,
    pub priors: Vec<ClassPrior>,
    pub sums: Vec<SiteSums>,
    pub posts: Vec<ClassPosterior>,
    /// EP's sites; `None` for SEP.
    pub factors: Option<FactorStore>,
    /// SEP: n_c, the factors touching each class.
    pub n_factors: Vec<f64>,
    n_rows: usize,
}

/// Factors of rows with classes `y` that touch class c: (N - N_c) + N_c (C - 1).
pub(crate) fn factors_per_class(y: &[usize], c: usize) -> Vec<f64> {
    (0..c)
        .map(|class| {
            let own = y.iter().filter(|&&v| v == class).count();
            ((y.len() - own) + own * (c - 1)) as f64
        })
        .collect()
}

impl State {
    /// Sites at zero (q = the prior) for `n` training rows with classes `y`.
    pub fn new(kernels: KernelSet, zs: Vec<Array2<f64>>, tied: bool, y: &[usize]) -> Result<State, FitError> {
        let c = zs.len();
        let priors = zs.into_iter().enumerate().map(|(k, z)| ClassPrior::new(kernels.class(k), z, k)).collect::<Result<Vec<_>, _>>()?;
        let sums: Vec<SiteSums> = priors.iter().map(|p| SiteSums::zeros(p.m())).collect();
        let posts = priors.iter().zip(&sums).enumerate().map(|(k, (p, s))| ClassPosterior::new(p, s, k)).collect::<Result<Vec<_>, _>>()?;
        let factors = (!tied).then(|| FactorStore {
            sites: PairSites::zeros(y.len(), c),
            dirs: priors.iter().map(|p| Array2::zeros((y.len(), p.m()))).collect(),
        });
        Ok(State { kernels, priors, sums, posts, factors, n_factors: factors_per_class(y, c), n_rows: y.len() })
    }

    pub fn n_classes(&self) -> usize {
        self.priors.len()
    }

    /// N, the training rows the sites belong to.
    pub fn n_rows(&self) -> usize {
        self.n_rows
    }

    /// Bytes the sites take: the site sums per class, and EP's per-factor scalars and directions.
    pub fn site_bytes(&self) -> usize {
        let sums: usize = self.sums.iter().map(|s| s.precision.nrows() * s.precision.ncols() + s.natural_mean.len()).sum();
        let factors = self.factors.as_ref().map_or(0, |f| 4 * f.sites.c1y.len() + f.dirs.iter().map(|d| d.len()).sum::<usize>());
        8 * (sums + factors)
    }

    /// The fitted model of the current state.
    pub fn model(&self, evidence: Option<f64>, diagnostics: crate::methods::Diagnostics) -> ArgmaxModel {
        model_of(&self.kernels, &self.priors, &self.posts, evidence, diagnostics)
    }

    /// The fitted model at kernels and inducing inputs `theta` (see `gradient`) with the current
    /// sites, the state unchanged: predictions at an average of the iterates.
    pub fn model_at(
        &self,
        theta: &[f64],
        evidence: Option<f64>,
        diagnostics: crate::methods::Diagnostics,
    ) -> Result<ArgmaxModel, FitError> {
        let (kernels, priors, posts) = self.at_theta(theta)?;
        Ok(model_of(&kernels, &priors, &posts, evidence, diagnostics))
    }

    pub fn is_tied(&self) -> bool {
        self.factors.is_none()
    }

    /// SEP's class cavities: the tied site scaled by 1 - 1/n_c.
    fn cavities(&self) -> Result<Vec<ClassPosterior>, FitError> {
        let cavities = (0..self.n_classes())
            .into_par_iter()
            .map(|k| {
                let keep = 1.0 - 1.0 / self.n_factors[k].max(1.0);
                ClassPosterior::new(&self.priors[k], &self.sums[k].scaled(keep), k)
                    .map_err(|e| FitError::Numerical(format!("sep: the cavity of class {} is not positive definite ({e})", k + 1)))
            })
            .collect::<Vec<_>>();
        FitError::first_in_order(cavities)
    }

    /// The block of training rows `rows` under the current kernels and inducing inputs.
    pub fn block(&self, x: &Array2<f64>, y: &[usize], rows: &[usize]) -> Block {
        let xb = x.select(Axis(0), rows);
        let prior_rows = (0..self.n_classes()).into_par_iter().map(|k| self.priors[k].rows(self.kernels.class(k), &xb)).collect();
        Block { rows: rows.to_vec(), y: rows.iter().map(|&i| y[i]).collect(), x: xb, prior_rows }
    }

    /// Every class's view of a block, and the block's stored sites.
    pub fn views<'b>(&self, block: &'b Block, purpose: ViewFor) -> Result<(Vec<ClassView<'b>>, PairSites), FitError> {
        let (c, rows) = (self.n_classes(), &block.rows);
        match &self.factors {
            Some(store) => {
                let views = (0..c)
                    .into_par_iter()
                    .map(|k| {
                        let p = &self.priors[k];
                        let old = Mat::from_fn(p.m(), rows.len(), |a, j| store.dirs[k][(rows[j], a)]);
                        ClassView::per_factor(p, &block.prior_rows[k], &self.posts[k], &old, purpose)
                    })
                    .collect();
                let pick = |a: &Array2<f64>| a.select(Axis(0), rows);
                let s = &store.sites;
                Ok((views, PairSites { c1y: pick(&s.c1y), c2y: pick(&s.c2y), c1k: pick(&s.c1k), c2k: pick(&s.c2k) }))
            }
            None => {
                let cavities = self.cavities()?;
                let views =
                    (0..c).into_par_iter().map(|k| ClassView::tied(&self.priors[k], &block.prior_rows[k], &cavities[k], purpose)).collect();
                Ok((views, PairSites::zeros(rows.len(), c)))
            }
        }
    }

    /// EP, every row in `block`: re-read every stored site along its row's current direction
    /// K^{-1} k_i (not the one it was computed along) and rebuild q from them: the notes'
    /// alternative to stale directions after a step on the kernels or Z. A no-op for SEP.
    pub fn realign(&mut self, block: &Block) -> Result<(), FitError> {
        let Some(store) = &mut self.factors else { return Ok(()) };
        assert_eq!(block.rows.len(), self.n_rows, "realign needs every training row");
        let c = self.priors.len();
        let sums: Vec<SiteSums> = (0..c)
            .map(|k| {
                let (prec, mean): (Vec<f64>, Vec<f64>) = (0..self.n_rows).map(|j| store.sites.on_class(j, block.y[j], k)).unzip();
                SiteSums::from_directions(block.prior_rows[k].dirs.as_ref(), &prec, &mean)
            })
            .collect();
        let posts: Vec<ClassPosterior> =
            FitError::first_in_order((0..c).into_par_iter().map(|k| ClassPosterior::new(&self.priors[k], &sums[k], k)).collect())?;
        for (k, dirs) in store.dirs.iter_mut().enumerate() {
            let cur = &block.prior_rows[k].dirs;
            for (j, &i) in block.rows.iter().enumerate() {
                dirs.row_mut(i).iter_mut().enumerate().for_each(|(a, d)| *d = cur[(a, j)]);
            }
        }
        self.sums = sums;
        self.posts = posts;
        Ok(())
    }

    /// Refine the sites of the factors of `rows`, damped by `rho` (1: plain EP), and rebuild q.
    /// Everything is computed before anything is written: on error the state is unchanged
    /// (the batch loop's roll-back), and EP's N x C x M directions are never copied. Returns
    /// the largest change of a site parameter (SEP: of the tied site's entries over n_c, the
    /// change of an average site), the outer scheme's convergence measure.
    pub fn refine(&mut self, block: &Block, rho: f64, purpose: ViewFor) -> Result<f64, FitError> {
        let (rows, yb, n) = (&block.rows, &block.y, self.n_rows());
        let (views, stored) = self.views(block, purpose)?;
        let sw = sweep(&views, yb, &stored, Adjoints::None)?;
        let c = self.n_classes();
        let nb = rows.len();
        let new = stored.damped(&sw.sites, rho);
        let sums: Vec<SiteSums> = match &self.factors {
            Some(store) => (0..c)
                .into_par_iter()
                .map(|k| {
                    let m = self.priors[k].m();
                    let (prec_new, mean_new): (Vec<f64>, Vec<f64>) = (0..nb).map(|j| new.on_class(j, yb[j], k)).unzip();
                    let dirs_new = &views[k].rows.dirs;
                    if nb == n {
                        SiteSums::from_directions(dirs_new.as_ref(), &prec_new, &mean_new)
                    } else {
                        // Add the new sites and take out the old ones along their old directions.
                        let (prec_old, mean_old): (Vec<f64>, Vec<f64>) = (0..nb).map(|j| stored.on_class(j, yb[j], k)).unzip();
                        let both = Mat::from_fn(m, 2 * nb, |a, j| if j < nb { dirs_new[(a, j)] } else { store.dirs[k][(rows[j - nb], a)] });
                        let prec: Vec<f64> = prec_new.iter().copied().chain(prec_old.iter().map(|v| -v)).collect();
                        let mean: Vec<f64> = mean_new.iter().copied().chain(mean_old.iter().map(|v| -v)).collect();
                        self.sums[k].mix(1.0, &SiteSums::from_directions(both.as_ref(), &prec, &mean), 1.0)
                    }
                })
                .collect(),
            None => {
                let batch_factors = factors_per_class(yb, c);
                (0..c)
                    .into_par_iter()
                    .map(|k| {
                        let (prec, mean): (Vec<f64>, Vec<f64>) = (0..nb).map(|j| sw.sites.on_class(j, yb[j], k)).unzip();
                        let fresh = SiteSums::from_directions(views[k].rows.dirs.as_ref(), &prec, &mean);
                        // Take out rho n_B / n of the tied site and put in rho times the batch's new sites.
                        let keep = 1.0 - rho * batch_factors[k] / self.n_factors[k].max(1.0);
                        self.sums[k].mix(keep, &fresh, rho)
                    })
                    .collect()
            }
        };
        let posts: Vec<ClassPosterior> =
            FitError::first_in_order((0..c).into_par_iter().map(|k| ClassPosterior::new(&self.priors[k], &sums[k], k)).collect())?;
        let change = match &self.factors {
            Some(_) => [(&new.c1y, &stored.c1y), (&new.c2y, &stored.c2y), (&new.c1k, &stored.c1k), (&new.c2k, &stored.c2k)]
                .iter()
                .flat_map(|(a, b)| a.iter().zip(b.iter()).map(|(u, v)| (u - v).abs()))
                .fold(0.0, f64::max),
            None => (0..c)
                .map(|k| {
                    let (old, new) = (&self.sums[k], &sums[k]);
                    let m = old.natural_mean.len();
                    let prec = (0..m)
                        .flat_map(|a| (0..m).map(move |b| (a, b)))
                        .map(|(a, b)| (new.precision[(a, b)] - old.precision[(a, b)]).abs());
                    let mean = new.natural_mean.iter().zip(&old.natural_mean).map(|(u, v)| (u - v).abs());
                    prec.chain(mean).fold(0.0, f64::max) / self.n_factors[k].max(1.0)
                })
                .fold(0.0, f64::max),
        };
        // Commit.
        self.sums = sums;
        self.posts = posts;
        if let Some(store) = &mut self.factors {
            for (k, view) in views.iter().enumerate() {
                for (j, &i) in rows.iter().enumerate() {
                    store.dirs[k].row_mut(i).iter_mut().enumerate().for_each(|(a, d)| *d = view.rows.dirs[(a, j)]);
                }
            }
            for (j, &i) in rows.iter().enumerate() {
                let s = &mut store.sites;
                for (dst, src) in [(&mut s.c1y, &new.c1y), (&mut s.c2y, &new.c2y), (&mut s.c1k, &new.c1k), (&mut s.c2k, &new.c2k)] {
                    dst.row_mut(i).assign(&src.row(j));
                }
            }
        }
        Ok(change)
    }

    /// d log Z_q / d theta at the rows `rows` (likelihood part scaled by `scale`), theta = the
    /// kernels' log-parameters then each class's Z (row-major): eq. 10, the cavities held fixed.
    pub fn gradient(&self, block: &Block, scale: f64) -> Result<Vec<f64>, FitError> {
        self.class_gradients(block, Adjoints::Eq10, |t| class_gradient(t, scale))
    }

    /// EP-inner-exact: the full d log Z_q / d theta with the sites held fixed in inducing-value
    /// space (`class_gradient_exact`); `block` must hold every training row. EP only.
    pub fn exact_gradient(&self, block: &Block) -> Result<Vec<f64>, FitError> {
        if self.is_tied() || block.rows.len() != self.n_rows() {
            return Err(FitError::Unsupported("ep: the exact gradient needs per-factor sites and every row".into()));
        }
        self.class_gradients(block, Adjoints::Exact, class_gradient_exact)
    }

    /// One sweep over `block` at the current q accumulating `adjoints`, then `per_class` for
    /// every class, assembled.
    fn class_gradients(
        &self,
        block: &Block,
        adjoints: Adjoints,
        per_class: impl Fn(&ClassTerms) -> InputGrads + Sync,
    ) -> Result<Vec<f64>, FitError> {
        let (views, stored) = self.views(block, ViewFor::Gradient)?;
        let sw = sweep(&views, &block.y, &stored, adjoints)?;
        let g = sw.grad.as_ref().expect("a gradient sweep accumulates its adjoints");
        let per: Vec<_> = (0..self.n_classes())
            .into_par_iter()
            .map(|k| {
                let (prior, post, view) = (&self.priors[k], &self.posts[k], &views[k]);
                per_class(&ClassTerms { kernel: self.kernels.class(k), prior, post, view, x: &block.x, g, class: k })
            })
            .collect();
        self.assemble(&per)
    }

    /// Per-class gradients into theta's layout (see `gradient`), checked finite.
    fn assemble(&self, per: &[InputGrads]) -> Result<Vec<f64>, FitError> {
        // Sized once: growing it by each class's Z (1.57 million numbers on MNIST) reallocated
        // and copied it, and the fresh pages cost the kernel's zeroing, about 2% of a step.
        let total = self.kernels.n_params() + per.iter().map(|g| g.z.len()).sum::<usize>();
        let mut out = Vec::with_capacity(total);
        out.resize(self.kernels.n_params(), 0.0);
        for (k, g) in per.iter().enumerate() {
            self.kernels.add_class_gradient(&mut out, k, &g.params);
        }
        for g in per {
            out.extend(g.z.iter().copied());
        }
        if let Some(v) = out.iter().find(|v| !v.is_finite()) {
            return Err(FitError::Numerical(format!("ep: a gradient entry is {v}")));
        }
        Ok(out)
    }

    /// The current theta (see `gradient`).
    pub fn theta(&self) -> Vec<f64> {
        let mut t = self.kernels.log_params();
        for p in &self.priors {
            t.extend(p.z.iter().copied());
        }
        t
    }

    /// Move to new kernels and inducing inputs `theta`, the sites held fixed in inducing-value
    /// space (the prior swapped under them, as the authors' code does). On error the state is
    /// unchanged.
    pub fn set_theta(&mut self, theta: &[f64]) -> Result<(), FitError> {
        let (kernels, priors, posts) = self.at_theta(theta)?;
        self.kernels = kernels;
        self.priors = priors;
        self.posts = posts;
        Ok(())
    }

    /// Kernels, priors and posteriors (of the current site sums) at `theta`.
    fn at_theta(&self, theta: &[f64]) -> Result<(KernelSet, Vec<ClassPrior>, Vec<ClassPosterior>), FitError> {
        let n_kern = self.kernels.n_params();
        let kernels = self.kernels.with_log_params(&theta[..n_kern]);
        let mut at = n_kern;
        let mut zs = Vec::with_capacity(self.n_classes());
        for p in &self.priors {
            let len = p.z.len();
            zs.push(Array2::from_shape_vec(p.z.dim(), theta[at..at + len].to_vec()).expect("Z shape"));
            at += len;
        }
        let priors: Vec<ClassPrior> =
            FitError::first_in_order(zs.into_par_iter().enumerate().map(|(k, z)| ClassPrior::new(kernels.class(k), z, k)).collect())?;
        let posts = FitError::first_in_order(
            (0..self.n_classes()).into_par_iter().map(|k| ClassPosterior::new(&priors[k], &self.sums[k], k)).collect(),
        )?;
        Ok((kernels, priors, posts))
    }

    /// The estimate log Z_q of log p(y) (eq. 9) over all rows: EP, sum_c [g(theta_c) -
    /// g(theta_prior,c)] + sum over factors of log s~; SEP, the same with the tied site's
    /// log s~ (notes §2.12): sum log Z + sum_c n_c [g(theta\_c) - g(theta_c)].
    ///
    /// Always eq. 9 of the stored state as it is (sites removed along their stored directions,
    /// factors projected on the current ones), also under `site_directions: lagged`, where the
    /// authors' `computeEvidence` projects on the stored directions as their refinement does:
    /// after a step that moved the kernels or Z the two estimates differ (the fit does not; only
    /// the reported evidence and Figure 1's traces).
    pub fn log_z_q(&self, x: &Array2<f64>, y: &[usize]) -> Result<f64, FitError> {
        let n = x.nrows();
        let mut total: f64 = (0..self.n_classes()).map(|k| self.posts[k].log_normaliser_gain(&self.priors[k])).sum();
        if self.is_tied() {
            let cavities = self.cavities()?;
            total += (0..self.n_classes())
                .map(|k| self.n_factors[k] * (cavities[k].log_normaliser(&self.priors[k]) - self.posts[k].log_normaliser(&self.priors[k])))
                .sum::<f64>();
        }
        for start in (0..n).step_by(BLOCK_ROWS) {
            let rows: Vec<usize> = (start..(start + BLOCK_ROWS).min(n)).collect();
            let block = self.block(x, y, &rows);
            let (views, stored) = self.views(&block, ViewFor::Sweep)?;
            let Sweep { log_z, removal_gain, .. } = sweep(&views, &block.y, &stored, Adjoints::None)?;
            total += log_z + if self.is_tied() { 0.0 } else { removal_gain };
        }
        Ok(total)
    }
}

/// The fitted model of kernels, priors and posteriors.
fn model_of(
    kernels: &KernelSet,
    priors: &[ClassPrior],
    posts: &[ClassPosterior],
    evidence: Option<f64>,
    diagnostics: crate::methods::Diagnostics,
) -> ArgmaxModel {
    let classes = priors
        .iter()
        .zip(posts)
        .map(|(p, q)| ArgmaxClass { z: p.z.clone(), k_chol: p.chol.clone(), a_chol: q.a_chol.clone(), beta: q.beta.clone() })
        .collect();
    ArgmaxModel { kernels: kernels.clone(), classes, evidence, diagnostics }
}
