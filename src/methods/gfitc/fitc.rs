//! One class's FITC prior at the training rows and its EP posterior, all in O(N M^2).
//!
//! K_FITC = Q + D, Q = K_nm K^{-1} K_mn, D = diag(kappa - Q_ii) (kappa and K = K(Z, Z) with the
//! kernel's white noise). With site precisions tau and natural means nu on f, the posterior
//! N(mu, Sigma), Sigma = (K_FITC^{-1} + T)^{-1}, is by Woodbury (notes §3.1)
//!     Sigma = D_s + R A^{-1} R^T,  D_s = D / (1 + D tau),  R = diag(1 / (1 + D tau)) K_nm,
//!     A = K + K_mn diag(g) K_nm,   g = tau / (1 + D tau),
//! so the marginals need one M x M factor and one triangular solve of an M x N block, and the
//! inducing values' q(u) is N(K beta, K A^{-1} K) with beta = A^{-1} R^T nu.
use crate::kernels::Kernel;
use crate::linalg::{col_slice, col_slice_mut, matmul_lower_par, matmul_par, symmetrize_from_lower, Chol};
use crate::methods::FitError;
use faer::Mat;
use ndarray::Array2;

#[derive(Clone, Debug)]
pub(crate) struct ClassFitc {
    pub z: Array2<f64>,
    /// K(Z, Z) as the kernel gives it, for its gradient.
    pub kmm: Mat<f64>,
    /// Factor of K(Z, Z) plus any ladder jitter.
    pub k_chol: Chol,
    /// K(Z, X), [M, N].
    pub kmn: Mat<f64>,
    /// D = kappa - Q_ii, floored at 1e-12.
    pub d: Vec<f64>,
}

#[derive(Clone, Debug)]
pub(crate) struct FitcPosterior {
    pub a_chol: Chol,
    pub mean: Vec<f64>,
    pub var: Vec<f64>,
    /// A^{-1} R^T nu.
    pub beta: Vec<f64>,
    /// g = tau / (1 + D tau).
    pub g: Vec<f64>,
}

impl ClassFitc {
    pub fn new(kernel: &dyn Kernel, z: Array2<f64>, x: &Array2<f64>, class: usize) -> Result<ClassFitc, FitError> {
        let kmm = kernel.gram_many(&z);
        let k_chol = Chol::factor_with_jitter(kmm.as_ref(), &format!("K(Z, Z) of class {}", class + 1))?;
        let kmn = kernel.cross_many(&z, x);
        let v = k_chol.solve_l_par(kmn.as_ref());
        let knn = kernel.diag(x);
        let d = (0..x.nrows()).map(|i| (knn[i] - (0..z.nrows()).map(|a| v[(a, i)] * v[(a, i)]).sum::<f64>()).max(1e-12)).collect();
        Ok(ClassFitc { z, kmm, k_chol, kmn, d })
    }

    pub fn m(&self) -> usize {
        self.z.nrows()
    }

    /// K(Z, Z) plus the jitter its factor needed.
    pub fn k(&self) -> Mat<f64> {
        let j = self.k_chol.jitter();
        Mat::from_fn(self.m(), self.m(), |a, b| self.kmm[(a, b)] + if a == b { j } else { 0.0 })
    }

    /// The posterior under site precisions `tau` (>= 0) and natural means `nu`.
    ///
    /// The M x N passes run column by column on slices (faer stores column-major), with every
    /// sum in the same order as the per-entry formulas above, from the empty sum: the same bits.
    pub fn posterior(&self, tau: &[f64], nu: &[f64], class: usize) -> Result<FitcPosterior, FitError> {
        let (m, n) = (self.m(), self.d.len());
        let s: Vec<f64> = (0..n).map(|i| 1.0 / (1.0 + self.d[i] * tau[i])).collect();
        let g: Vec<f64> = (0..n).map(|i| tau[i] * s[i]).collect();
        let zero = std::iter::empty::<f64>().sum::<f64>();
        // K_mn G and R = K_mn S; R^T nu accumulated alongside, entry a over i ascending.
        let mut kg = Mat::<f64>::zeros(m, n);
        let mut r = Mat::<f64>::zeros(m, n);
        let mut rnu = vec![zero; m];
        for i in 0..n {
            let k_i = col_slice(&self.kmn, i);
            col_slice_mut(&mut kg, i).iter_mut().zip(k_i).for_each(|(o, k)| *o = k * g[i]);
            let r_i = col_slice_mut(&mut r, i);
            r_i.iter_mut().zip(k_i).for_each(|(o, k)| *o = k * s[i]);
            rnu.iter_mut().zip(r_i.iter()).for_each(|(acc, v)| *acc += v * nu[i]);
        }
        // A = K + K_mn G K_nm: only its lower triangle is computed, then mirrored.
        let mut a = matmul_lower_par(kg.as_ref(), self.kmn.transpose());
        drop(kg);
        let jitter = self.k_chol.jitter();
        for j in 0..m {
            a[(j, j)] += self.kmm[(j, j)] + jitter;
            for i in j + 1..m {
                a[(i, j)] += self.kmm[(i, j)];
            }
        }
        symmetrize_from_lower(&mut a);
        let a_chol = Chol::factor(a.as_ref(), &format!("the FITC posterior of class {}", class + 1))?;
        let beta = a_chol.solve_vec(&rnu);
        let mean = (0..n).map(|i| self.d[i] * s[i] * nu[i] + col_slice(&r, i).iter().zip(&beta).map(|(v, b)| v * b).sum::<f64>()).collect();
        // E = L_A^{-1} R, in R's storage.
        a_chol.solve_l_par_in_place(&mut r);
        let var = (0..n).map(|i| self.d[i] * s[i] + col_slice(&r, i).iter().map(|e| e * e).sum::<f64>()).collect();
        Ok(FitcPosterior { a_chol, mean, var, beta, g })
    }

    /// g(theta) - g(theta_prior) of the class: 1/2 log|Sigma| - 1/2 log|K_FITC| + 1/2 nu^T mu,
    /// with log|Sigma| - log|K_FITC| = -log|I + T K_FITC| = -sum log(1 + tau D) - log|A| + log|K|.
    pub fn log_normaliser_gain(&self, post: &FitcPosterior, tau: &[f64], nu: &[f64]) -> f64 {
        let logs: f64 = tau.iter().zip(&self.d).map(|(t, d)| (1.0 + t * d).ln()).sum();
        0.5 * (-logs - post.a_chol.log_det() + self.k_chol.log_det()) + 0.5 * nu.iter().zip(&post.mean).map(|(a, b)| a * b).sum::<f64>()
    }

    /// Adjoints of log Z_EP with respect to K(Z, X) [M, N], K(Z, Z) [M, M] and kappa [N], at
    /// converged sites (the sites' own dependence vanishes there): log Z moves with K_FITC as
    /// 1/2 tr[(b b^T - W) dK_FITC], W = (K_FITC + T^{-1})^{-1} = G - G K_nm A^{-1} K_mn G
    /// (G = diag(g)), b = W tau^{-1} nu (GPML §3.6; notes §3.1). Through Q = P K^{-1} P^T
    /// (P = K_nm) with H = Gbar - diag(Gbar), Gbar = (b b^T - W) / 2:
    ///     Pbar = 2 H P K^{-1},  Kbar = -K^{-1} P^T H P K^{-1},  kappabar = diag(Gbar),
    /// and W P = G P A^{-1} K, so nothing of size N x N is formed.
    pub fn adjoints(&self, post: &FitcPosterior, tau: &[f64], nu: &[f64]) -> (Mat<f64>, Mat<f64>, Vec<f64>) {
        let (m, n) = (self.m(), self.d.len());
        let g = &post.g;
        // b = W (nu / tau): G (nu / tau) = nu / (1 + D tau), then the low-rank part.
        let gmu: Vec<f64> = (0..n).map(|i| nu[i] / (1.0 + self.d[i] * tau[i])).collect();
        let zero = std::iter::empty::<f64>().sum::<f64>();
        // K_mn-weighted sums accumulated column by column (entry a over i ascending, as a per-row sum).
        let weighted_sum = |w: &[f64]| {
            let mut acc = vec![zero; m];
            for (i, wi) in w.iter().enumerate() {
                acc.iter_mut().zip(col_slice(&self.kmn, i)).for_each(|(o, k)| *o += k * wi);
            }
            acc
        };
        let pg = weighted_sum(&gmu);
        let ap = post.a_chol.solve_vec(&pg);
        let b: Vec<f64> =
            (0..n).map(|i| gmu[i] - g[i] * col_slice(&self.kmn, i).iter().zip(&ap).map(|(k, p)| k * p).sum::<f64>()).collect();
        // diag W = g - g^2 |L_A^{-1} p_i|^2.
        let e = post.a_chol.solve_l_par(self.kmn.as_ref());
        let w_diag: Vec<f64> = (0..n).map(|i| g[i] - g[i] * g[i] * col_slice(&e, i).iter().map(|v| v * v).sum::<f64>()).collect();
        let gbar_diag: Vec<f64> = (0..n).map(|i| 0.5 * (b[i] * b[i] - w_diag[i])).collect();
        // Gbar P = (b (b^T P) - W P) / 2 with W P = G P A^{-1} K, [N, M] held as its transpose [M, N].
        let btp = weighted_sum(&b);
        let ainv_k = post.a_chol.solve(self.k().as_ref()); // A^{-1} K, [M, M]
        let wp_t = matmul_par(ainv_k.transpose(), Mat::from_fn(m, n, |a, i| self.kmn[(a, i)] * g[i]).as_ref()); // (W P)^T
        let hp_t = Mat::from_fn(m, n, |a, i| 0.5 * (btp[a] * b[i] - wp_t[(a, i)]) - gbar_diag[i] * self.kmn[(a, i)]);
        // Pbar^T = 2 K^{-1} (H P)^T; Kbar = -K^{-1} (P^T H P) K^{-1}.
        let kinv_hp_t = self.k_chol.solve_par(hp_t.as_ref());
        let kmn_bar = Mat::from_fn(m, n, |a, i| 2.0 * kinv_hp_t[(a, i)]);
        let pthp = matmul_par(kinv_hp_t.as_ref(), self.kmn.transpose()); // K^{-1} P^T H P
        let kinv_pthp_kinv = self.k_chol.solve(pthp.transpose()); // K^{-1} (K^{-1} P^T H P)^T = K^{-1} P^T H P K^{-1}
        let kmm_bar = Mat::from_fn(m, m, |a, c| -0.5 * (kinv_pthp_kinv[(a, c)] + kinv_pthp_kinv[(c, a)]));
        (kmn_bar, kmm_bar, gbar_diag)
    }
}
