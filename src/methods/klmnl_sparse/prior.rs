//! The prior of an inducing set: K = K_zz + sigma_eps^2 I, its factor L_K and the whitened cross
//! covariance L~^T = L_K^{-1} K_f.
use super::*;
use std::sync::Arc;

/// A site: the latent value of class `.1` at training datum `.0` (Remark 14).
pub type Site = (usize, usize);

/// Everything fixed for one kernel: Kx over the training inputs, K^c, y one-hot (datum-major)
/// and the inducing noise.
pub(super) struct Base {
    pub n: usize,
    pub c: usize,
    pub kx: Mat<f64>,
    pub kc: Mat<f64>,
    pub y1: Vec<f64>,
    /// sigma_eps^2 = noise_rel x the mean prior variance of the nC latent values: independent of
    /// the set, so a larger set extends the same model (Proposition 17 and App. D need that).
    pub noise: f64,
    pub noise_rel: f64,
}

impl Base {
    pub fn new(kx: Mat<f64>, kc: Mat<f64>, y: &[usize], noise_rel: f64) -> Base {
        let (n, c) = (kx.nrows(), kc.nrows());
        let mut y1 = vec![0.0; n * c];
        for (i, &yi) in y.iter().enumerate() {
            y1[i * c + yi] = 1.0;
        }
        let noise = noise_rel * mean_diag(&kx) * mean_diag(&kc);
        Base { n, c, kx, kc, y1, noise, noise_rel }
    }

    /// Prior covariance of the latent values p = (i, c) and q = (j, d) (datum-major indices).
    #[inline]
    pub fn kff(&self, p: usize, q: usize) -> f64 {
        let c = self.c;
        self.kx[(p / c, q / c)] * self.kc[(p % c, q % c)]
    }
}

pub(super) fn mean_diag(a: &Mat<f64>) -> f64 {
    (0..a.nrows()).map(|i| a[(i, i)]).sum::<f64>() / a.nrows().max(1) as f64
}

/// The prior of one inducing set.
pub(super) struct SparsePrior {
    pub base: Arc<Base>,
    pub sites: Vec<Site>,
    pub s: usize,
    /// L_K L_K^T = K_zz + noise_eff I.
    pub lk: Chol,
    /// L~^T = L_K^{-1} K_f (s x nC): column q is L_K^{-1} k_q for the latent value q.
    pub ltt: Mat<f64>,
    /// sigma_eps^2 plus the jitter L_K needed (reported): the noise every inducing variable has.
    pub noise_eff: f64,
}

impl SparsePrior {
    pub fn new(base: Arc<Base>, sites: Vec<Site>) -> Result<SparsePrior, FitError> {
        let (c, s) = (base.c, sites.len());
        let nc = base.n * c;
        let idx: Vec<usize> = sites.iter().map(|&(i, k)| i * c + k).collect();
        let k = Mat::from_fn(s, s, |a, b| base.kff(idx[a], idx[b]) + if a == b { base.noise } else { 0.0 });
        let lk = Chol::factor_with_jitter(k.as_ref(), "K = K_zz + sigma_eps^2 I")?;
        let kf = Mat::from_fn(s, nc, |a, q| base.kff(idx[a], q));
        let ltt = lk.solve_l(kf.as_ref());
        let noise_eff = base.noise + lk.jitter();
        Ok(SparsePrior { base, sites, s, lk, ltt, noise_eff })
    }

    pub fn n(&self) -> usize {
        self.base.n
    }
    pub fn c(&self) -> usize {
        self.base.c
    }
    pub fn y1(&self) -> &[f64] {
        &self.base.y1
    }

    /// K_ff,ii = Kx_ii K^c, the prior covariance of datum i's C latent values.
    pub fn kff_block(&self, i: usize) -> Mat<f64> {
        let kii = self.base.kx[(i, i)];
        Mat::from_fn(self.c(), self.c(), |p, q| kii * self.base.kc[(p, q)])
    }

    /// L~^T v for an nC-vector v (s-vector).
    pub fn lt_times(&self, v: &[f64]) -> Vec<f64> {
        matvec(self.ltt.as_ref(), v)
    }

    /// L~ u for an s-vector u (nC-vector).
    pub fn l_times(&self, u: &[f64]) -> Vec<f64> {
        matvec(self.ltt.transpose(), u)
    }

    /// Datum i's C columns of L~^T (s x C), i.e. L~_i^T.
    pub fn ltt_block(&self, i: usize) -> faer::MatRef<'_, f64> {
        self.ltt.as_ref().subcols(i * self.c(), self.c())
    }
}
