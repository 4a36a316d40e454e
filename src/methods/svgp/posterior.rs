//! q(v^c) = N(m, S) of one class's whitened inducing values (u = L v, Kmm = L L^T): held in
//! natural parameters when natural gradients move it, or as (m, lower-triangular sqrt of S)
//! when Adam moves everything (GPflow's q_mu, q_sqrt).
use crate::linalg::{col, matmul_par, to_vec, Chol, LinalgError};
use crate::scalable::NaturalGaussian;
use faer::{Mat, MatRef};

#[derive(Clone, Debug)]
pub enum Posterior {
    Natural(NaturalGaussian),
    Sqrt { mean: Vec<f64>, l: Mat<f64> },
}

impl Posterior {
    pub fn mean(&self) -> &[f64] {
        match self {
            Posterior::Natural(q) => q.mean(),
            Posterior::Sqrt { mean, .. } => mean,
        }
    }

    /// S A.
    pub fn cov_times(&self, a: MatRef<'_, f64>) -> Mat<f64> {
        match self {
            Posterior::Natural(q) => q.cov_times(a),
            Posterior::Sqrt { l, .. } => matmul_par(l.as_ref(), matmul_par(l.transpose(), a).as_ref()),
        }
    }

    /// S, explicitly (M x M).
    pub fn covariance(&self) -> Mat<f64> {
        match self {
            Posterior::Natural(q) => q.covariance(),
            Posterior::Sqrt { l, .. } => matmul_par(l.as_ref(), l.transpose()),
        }
    }

    /// The same q(u) in the whitened coordinates of a new factor: u = L_old v = L_new v', so
    /// v' = T^{-1} v with T = L_old^{-1} L_new (lower triangular): m' = L_new^{-1} L_old m and
    /// Lambda' = T^T Lambda T, or L_S' = L_new^{-1} L_old L_S (lower triangular again). This is
    /// how the unwhitened parameterisation keeps q(u) where it is when the kernel or Z move.
    pub fn reexpress(&self, old: &Chol, new: &Chol) -> Result<Posterior, LinalgError> {
        match self {
            Posterior::Natural(q) => Ok(Posterior::Natural(q.reexpress(old, new)?)),
            Posterior::Sqrt { mean, l } => Ok(Posterior::Sqrt {
                mean: to_vec(new.solve_l(matmul_par(old.l(), col(mean).as_ref()).as_ref()).as_ref()),
                l: lower(new.solve_l(matmul_par(old.l(), l.as_ref()).as_ref())),
            }),
        }
    }

    /// q(v) from the unwhitened sqrt parameters (m_u, L_Su) of q(u): v = L^{-1} u, so
    /// m_v = L^{-1} m_u and L_Sv = L^{-1} L_Su (lower triangular).
    pub fn sqrt_whitened(u: &Posterior, chol: &Chol) -> Posterior {
        let Posterior::Sqrt { mean, l } = u else { unreachable!("sqrt parameters") };
        Posterior::Sqrt { mean: to_vec(chol.solve_l(col(mean).as_ref()).as_ref()), l: lower(chol.solve_l(l.as_ref())) }
    }

    /// Gradients in the unwhitened sqrt parameters from those in the whitened ones (flat, the
    /// layout of `sqrt_grads`): g_{m_u} = L^{-T} g_{m_v}, g_{L_Su} = tril(L^{-T} g_{L_Sv}).
    pub fn sqrt_grads_unwhitened(g_v: &[f64], chol: &Chol) -> Vec<f64> {
        let m = chol.dim();
        let gm = chol.solve_lt(col(&g_v[..m]).as_ref());
        let gl = chol.solve_lt(Posterior::sqrt_from_flat(m, g_v).sqrt_factor().as_ref());
        let mut out = to_vec(gm.as_ref());
        for j in 0..m {
            for i in j..m {
                out.push(gl[(i, j)]);
            }
        }
        out
    }

    fn sqrt_factor(&self) -> &Mat<f64> {
        match self {
            Posterior::Sqrt { l, .. } => l,
            Posterior::Natural(_) => unreachable!("natural-parameter posteriors have no sqrt factor"),
        }
    }

    /// KL(q || N(0, I)).
    pub fn kl(&self) -> f64 {
        match self {
            Posterior::Natural(q) => q.kl_standard(),
            Posterior::Sqrt { mean, l } => {
                let m = mean.len();
                let (mut tr, mut logdet) = (0.0, 0.0);
                for j in 0..m {
                    logdet += 2.0 * l[(j, j)].abs().ln();
                    for i in j..m {
                        tr += l[(i, j)] * l[(i, j)];
                    }
                }
                0.5 * (tr + mean.iter().map(|v| v * v).sum::<f64>() - m as f64 - logdet)
            }
        }
    }

    /// For the Adam parameterisation: gradients of E[log lik] - KL w.r.t. (m, lower entries of
    /// L, column by column), given the expected log-likelihood's g_m and symmetric g_S.
    /// d/dL: 2 g_S L from the likelihood; -(L - L^{-T}) from the KL.
    pub fn sqrt_grads(mean: &[f64], l: &Mat<f64>, g_m: &[f64], g_s: &Mat<f64>) -> Vec<f64> {
        let m = mean.len();
        let mut out: Vec<f64> = mean.iter().zip(g_m).map(|(v, g)| g - v).collect();
        let gl = g_s * l;
        // L^{-T}: the KL's log-determinant term; L is triangular, so L^{-T} is upper and its
        // lower part is the diagonal 1 / L_jj.
        for j in 0..m {
            for i in j..m {
                let kl = l[(i, j)] - if i == j { 1.0 / l[(j, j)] } else { 0.0 };
                out.push(2.0 * gl[(i, j)] - kl);
            }
        }
        out
    }

    /// Number of free values of the sqrt parameterisation for M inducing values.
    pub fn n_sqrt_params(m: usize) -> usize {
        m + m * (m + 1) / 2
    }

    /// The sqrt parameterisation from a flat vector (layout of `sqrt_grads`).
    pub fn sqrt_from_flat(m: usize, v: &[f64]) -> Posterior {
        let mean = v[..m].to_vec();
        let mut l = Mat::zeros(m, m);
        let mut at = m;
        for j in 0..m {
            for i in j..m {
                l[(i, j)] = v[at];
                at += 1;
            }
        }
        Posterior::Sqrt { mean, l }
    }

    /// Flat (m, lower L) of a sqrt posterior.
    pub fn sqrt_to_flat(&self) -> Vec<f64> {
        match self {
            Posterior::Sqrt { mean, l } => {
                let m = mean.len();
                let mut v = mean.clone();
                for j in 0..m {
                    for i in j..m {
                        v.push(l[(i, j)]);
                    }
                }
                v
            }
            Posterior::Natural(_) => unreachable!("natural-parameter posteriors are not flattened"),
        }
    }
}

/// The prior-side factor of one kernel: K(Z, Z) = L L^T with its jitter.
pub(crate) fn kmm_factor(kmm: &Mat<f64>, class_or_shared: &str) -> Result<Chol, crate::linalg::LinalgError> {
    Chol::factor_with_jitter(kmm.as_ref(), &format!("K(Z, Z) of {class_or_shared}"))
}

/// The lower triangle of `a` (exact zeros above the diagonal).
fn lower(a: Mat<f64>) -> Mat<f64> {
    Mat::from_fn(a.nrows(), a.ncols(), |i, j| if i >= j { a[(i, j)] } else { 0.0 })
}
