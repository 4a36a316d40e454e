//! Each class's sparse prior and its Gaussian q over the inducing values, in the "K-space"
//! form that needs no inverse of a kernel matrix.
//!
//! Class c has its own inducing inputs Z^c and K = K(Z^c, Z^c) (the kernel's white noise on
//! the diagonal, as the authors add sigma_0 to K_mm). Every site is one-dimensional along
//! u_i = K^{-1} k_i, k_i = k(Z^c, x_i), so the sites of a class sum to a precision Sigma~ and a
//! natural mean mu~ in inducing-value space (`SiteSums`, held fixed when the kernel or Z move,
//! as the paper's sites are). With A = K + K Sigma~ K and beta = A^{-1} K mu~,
//!     q(fbar) = N(m, V),  m = K beta,  V = K A^{-1} K,
//! and the projections the EP updates need are k^T A^{-1} k = u^T V u and k^T beta = u^T m.
use crate::kernels::Kernel;
use crate::linalg::{col_slice_mut, matmul_par, Chol, LinalgError};
use crate::methods::FitError;
use faer::{Mat, MatRef};
use ndarray::Array2;

/// Class c's prior over its inducing values.
#[derive(Clone, Debug)]
pub(crate) struct ClassPrior {
    pub z: Array2<f64>,
    /// K(Z, Z) as the kernel gives it (white noise included), for its gradient.
    pub kmm: Mat<f64>,
    /// Factor of K(Z, Z) plus any ladder jitter it needed.
    pub chol: Chol,
    /// K(Z, Z) plus that jitter, the matrix `chol` factors (built once; every q and cavity
    /// of the class is formed from it).
    k: Mat<f64>,
}

/// What class c's prior gives at a block of rows.
#[derive(Clone, Debug)]
pub(crate) struct PriorRows {
    /// K(Z, X), [M, n].
    pub kmn: Mat<f64>,
    /// K^{-1} K(Z, X): the site directions u_i, [M, n].
    pub dirs: Mat<f64>,
    /// The FITC conditional variances kappa_i - k_i^T K^{-1} k_i (kappa with the noise).
    pub fitc_var: Vec<f64>,
}

impl ClassPrior {
    pub fn new(kernel: &dyn Kernel, z: Array2<f64>, class: usize) -> Result<ClassPrior, FitError> {
        let kmm = kernel.gram_many(&z);
        let chol = Chol::factor_with_jitter(kmm.as_ref(), &format!("K(Z, Z) of class {}", class + 1))?;
        let j = chol.jitter();
        let k = Mat::from_fn(kmm.nrows(), kmm.ncols(), |a, b| kmm[(a, b)] + if a == b { j } else { 0.0 });
        Ok(ClassPrior { z, kmm, chol, k })
    }

    pub fn m(&self) -> usize {
        self.z.nrows()
    }

    /// K(Z, Z) + jitter, the matrix `chol` factors.
    pub fn k(&self) -> &Mat<f64> {
        &self.k
    }

    pub fn rows(&self, kernel: &dyn Kernel, x: &Array2<f64>) -> PriorRows {
        let kmn = kernel.cross_many(&self.z, x);
        let half = self.chol.solve_l_par(kmn.as_ref());
        let knn = kernel.diag(x);
        let fitc_var =
            (0..x.nrows()).map(|i| (knn[i] - (0..self.m()).map(|a| half[(a, i)] * half[(a, i)]).sum::<f64>()).max(0.0)).collect();
        let dirs = self.chol.solve_lt_par(half.as_ref());
        PriorRows { kmn, dirs, fitc_var }
    }
}

/// The sites of class c summed in inducing-value space: precision Sigma~ and natural mean mu~.
#[derive(Clone, Debug)]
pub(crate) struct SiteSums {
    pub precision: Mat<f64>,
    pub natural_mean: Vec<f64>,
}

impl SiteSums {
    pub fn zeros(m: usize) -> SiteSums {
        SiteSums { precision: Mat::zeros(m, m), natural_mean: vec![0.0; m] }
    }

    /// w Sigma~ and w mu~ (SEP's cavity takes 1 - 1/n of the tied site).
    pub fn scaled(&self, w: f64) -> SiteSums {
        SiteSums {
            precision: Mat::from_fn(self.precision.nrows(), self.precision.ncols(), |i, j| w * self.precision[(i, j)]),
            natural_mean: self.natural_mean.iter().map(|v| w * v).collect(),
        }
    }

    /// a Self + b other.
    pub fn mix(&self, a: f64, other: &SiteSums, b: f64) -> SiteSums {
        let m = self.natural_mean.len();
        SiteSums {
            precision: Mat::from_fn(m, m, |i, j| a * self.precision[(i, j)] + b * other.precision[(i, j)]),
            natural_mean: self.natural_mean.iter().zip(&other.natural_mean).map(|(x, y)| a * x + b * y).collect(),
        }
    }

    /// Sum over the columns j of `dirs` of (prec_j u_j u_j^T, mean_j u_j).
    pub fn from_directions(dirs: MatRef<'_, f64>, prec: &[f64], mean: &[f64]) -> SiteSums {
        let (m, n) = (dirs.nrows(), dirs.ncols());
        let mut weighted = Mat::<f64>::zeros(m, n);
        // mu~_a = sum_j dirs[a, j] mean_j, accumulated column by column: each entry sees the
        // same terms in the same order (j ascending, from the empty sum) as a per-row sum.
        let mut natural_mean = vec![std::iter::empty::<f64>().sum::<f64>(); m];
        for j in 0..n {
            let d = dirs.col(j).try_as_col_major().expect("the directions are column-major").as_slice();
            col_slice_mut(&mut weighted, j).iter_mut().zip(d).for_each(|(w, v)| *w = v * prec[j]);
            natural_mean.iter_mut().zip(d).for_each(|(acc, v)| *acc += v * mean[j]);
        }
        let mut precision = matmul_par(weighted.as_ref(), dirs.transpose());
        symmetrise(&mut precision);
        SiteSums { precision, natural_mean }
    }
}

/// Class c's q(fbar) = N(K beta, K A^{-1} K) with A = K + K Sigma~ K.
#[derive(Clone, Debug)]
pub(crate) struct ClassPosterior {
    pub a_chol: Chol,
    /// K mu~.
    pub k_mu: Vec<f64>,
    /// A^{-1} K mu~: the mean is K beta.
    pub beta: Vec<f64>,
}

impl ClassPosterior {
    pub fn new(prior: &ClassPrior, sums: &SiteSums, class: usize) -> Result<ClassPosterior, FitError> {
        let k = prior.k();
        let ks = matmul_par(k.as_ref(), sums.precision.as_ref());
        let mut a = matmul_par(ks.as_ref(), k.as_ref());
        a += k;
        symmetrise(&mut a);
        let what = format!("the posterior of class {}", class + 1);
        let a_chol = match Chol::factor(a.as_ref(), &what) {
            Ok(f) => f,
            Err(direct) => Self::factor_through_prior(prior, sums, &what).map_err(|_| direct)?,
        };
        let k_mu = crate::linalg::matvec(k.as_ref(), &sums.natural_mean);
        let beta = a_chol.solve_vec(&k_mu);
        if beta.iter().any(|v| !v.is_finite()) {
            return Err(FitError::Numerical(format!("ep: the posterior mean of class {} is not finite", class + 1)));
        }
        Ok(ClassPosterior { a_chol, k_mu, beta })
    }

    /// A = K + K Sigma~ K factored as L (I + L^T Sigma~ L) L^T with K = L L^T, for when the
    /// direct factor fails: K nearly singular (coincident inducing inputs, from duplicated
    /// training rows) leaves A eigenvalues at K's jitter that the rounding of K Sigma~ K swamps,
    /// while the middle factor stays near I there. The direct form is tried first because
    /// every stored cell was computed with it (none reached this path: diag_rollbacks,
    /// skipped_batches and checkpoint failures are 0 in all stored EP and SEP cells, and a
    /// failed factor ends in one of those or in a failed cell), so their numbers stand.
    pub(super) fn factor_through_prior(prior: &ClassPrior, sums: &SiteSums, what: &str) -> Result<Chol, LinalgError> {
        let l = prior.chol.l();
        let mut b = l.transpose() * (&sums.precision * l);
        symmetrise(&mut b);
        for i in 0..b.nrows() {
            b[(i, i)] += 1.0;
        }
        Ok(Chol::nested(&prior.chol, &Chol::factor(b.as_ref(), what)?))
    }

    /// g(theta) - g(theta_prior) of this class: 1/2 log|V| + 1/2 m^T V^{-1} m - 1/2 log|K|
    /// = 1/2 log|K| - 1/2 log|A| + 1/2 beta^T K mu~ (the 2 pi terms cancel).
    pub fn log_normaliser_gain(&self, prior: &ClassPrior) -> f64 {
        0.5 * prior.chol.log_det() - 0.5 * self.a_chol.log_det() + 0.5 * crate::linalg::dot(&self.beta, &self.k_mu)
    }

    /// 1/2 log|V| + 1/2 m^T V^{-1} m: g(theta) without its 2 pi term.
    pub fn log_normaliser(&self, prior: &ClassPrior) -> f64 {
        prior.chol.log_det() - 0.5 * self.a_chol.log_det() + 0.5 * crate::linalg::dot(&self.beta, &self.k_mu)
    }
}

/// Make a matrix exactly symmetric from its two triangles' average.
pub(crate) fn symmetrise(a: &mut Mat<f64>) {
    for i in 0..a.nrows() {
        for j in 0..i {
            let v = 0.5 * (a[(i, j)] + a[(j, i)]);
            a[(i, j)] = v;
            a[(j, i)] = v;
        }
    }
}
