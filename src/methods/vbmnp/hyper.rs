//! The variational importance sampler for the posterior mean of the RBF precisions phi
//! (G&R eqs. 4.5-4.8).
use super::*;

/// Result of one importance-sampling update of Q(phi) (eqs. 4.5, 4.7).
pub(crate) struct IsUpdate {
    pub phi_mean: Vec<f64>,
    pub ess: f64,
    /// Samples that could not be factorised (weight zero).
    pub failed: usize,
}

/// log prod_k N(m_k; 0, C_phi + add I) over the columns of M, up to the constant
/// -(nK/2) ln 2 pi (and without the determinant if `with_det` is false); None if C_phi + add I
/// is not numerically positive definite.
pub(super) fn log_is_weight_kind(
    pairs: &PairSqDiffs,
    M: &Mat<f64>,
    phi: &[f64],
    s2: f64,
    add: f64,
    with_det: bool,
    scratch: &mut GramScratch,
) -> Option<f64> {
    let chol = pairs.factor_gram(phi, s2, add, scratch).ok()?;
    let Z = chol.solve_l(M.as_ref());
    let quad: f64 = (0..Z.ncols()).map(|k| (0..Z.nrows()).map(|i| Z[(i, k)] * Z[(i, k)]).sum::<f64>()).sum();
    let det = if with_det { chol.log_det() } else { 0.0 };
    let v = -0.5 * quad - 0.5 * M.ncols() as f64 * det;
    v.is_finite().then_some(v)
}

/// Self-normalised importance sampling with the prior Exp(psi_d) (rate form) as proposal:
/// phĩ = sum_s w_s phi^s, w_s ∝ prod_k N(m̃_k; 0, C_{phi^s}) (shared kernel; notes §2.4),
/// weights in log space. ESS = 1 / sum w_s^2.
#[cfg(test)]
pub(crate) fn importance_update(
    x: &Array2<f64>,
    M: &Mat<f64>,
    psi: &[f64],
    s2: f64,
    n_samples: usize,
    jitter: f64,
    rng: &mut Pcg64,
) -> Result<IsUpdate, FitError> {
    importance_update_kind(x, M, psi, s2, n_samples, jitter, IsWeight::Paper, IsParam::Precision, rng)
}

/// `importance_update` for any weight variant and parameterisation; `V` is m̃ (paper, port) or
/// ỹ (marginal). The samples, `psi` (their Exp rates) and the returned mean are in the
/// parameterisation `param`; the Gram matrices use the corresponding precisions.
#[allow(clippy::too_many_arguments)]
pub(crate) fn importance_update_kind(
    x: &Array2<f64>,
    V: &Mat<f64>,
    psi: &[f64],
    s2: f64,
    n_samples: usize,
    jitter: f64,
    kind: IsWeight,
    param: IsParam,
    rng: &mut Pcg64,
) -> Result<IsUpdate, FitError> {
    let M = V;
    let pairs = PairSqDiffs::new(x);
    // Exp(rate psi) by inversion (1 - U is in (0, 1]), drawn in order; then one Cholesky per
    // weight. Sequential on purpose: the runner parallelises across cells, and a worker that
    // waited inside a nested parallel loop could pick up a whole other cell meanwhile, which
    // would count against this cell's time and timeout.
    let samples: Vec<Vec<f64>> = (0..n_samples).map(|_| psi.iter().map(|p| -(1.0 - rng.random::<f64>()).ln() / p).collect()).collect();
    let (add, with_det) = match kind {
        IsWeight::Paper => (jitter * s2, true),
        IsWeight::Port => (1.0, false),
        IsWeight::Marginal => (1.0, true),
    };
    let mut scratch = GramScratch::new(M.nrows());
    let log_w: Vec<f64> = samples
        .iter()
        .map(|v| {
            let phi: Vec<f64> = v.iter().map(|&a| param.to_precision(a)).collect();
            log_is_weight_kind(&pairs, M, &phi, s2, add, with_det, &mut scratch).unwrap_or(f64::NEG_INFINITY)
        })
        .collect();
    let failed = log_w.iter().filter(|l| **l == f64::NEG_INFINITY).count();
    let lse = log_sum_exp(&log_w);
    if !lse.is_finite() {
        return Err(FitError::Numerical("importance sampler: every sample of C_phi failed to factorise".into()));
    }
    let w: Vec<f64> = log_w.iter().map(|l| (l - lse).exp()).collect();
    let mut phi_mean = vec![0.0; psi.len()];
    for (s, ws) in samples.iter().zip(&w) {
        for (m, p) in phi_mean.iter_mut().zip(s) {
            *m += ws * p;
        }
    }
    let ess = 1.0 / w.iter().map(|v| v * v).sum::<f64>();
    Ok(IsUpdate { phi_mean, ess, failed })
}
