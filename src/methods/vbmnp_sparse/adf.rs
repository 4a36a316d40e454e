//! The ADF pass over the training pool with random or informative inclusion (G&R eqs. 5.1-5.4).
use super::*;

/// Result of the ADF pass over the training pool.
pub(super) struct AdfResult {
    pub active: Vec<usize>,
    /// Pseudo-targets ỹ_n at inclusion, [S][K].
    pub y_active: Vec<Vec<f64>>,
    /// Final m̃ on the pool, [N][K], and variances s, [N].
    pub m: Vec<Vec<f64>>,
    #[cfg_attr(not(test), allow(dead_code))]
    pub s: Vec<f64>,
}

/// The ADF pass (eqs. 5.1–5.4, with ν = 1/(1 + s_n) cached before 5.2; notes §4.1 FLAG).
pub(super) fn adf(
    x: &Array2<f64>,
    y: &[usize],
    k_classes: usize,
    phi: &[f64],
    s2: f64,
    params: &VbmnpSparseParams,
    ctx: &mut FitContext,
) -> Result<AdfResult, FitError> {
    let n = x.nrows();
    let s_max = params.active_size.min(n);
    let mut Mrows: Vec<Vec<f64>> = Vec::with_capacity(s_max);
    let mut s = vec![s2; n];
    let mut m = vec![vec![0.0; k_classes]; n];
    let mut included = vec![false; n];
    let mut active = Vec::with_capacity(s_max);
    let mut y_active = Vec::with_capacity(s_max);
    for l in 0..s_max {
        if l % 16 == 0 {
            ctx.check_deadline()?;
        }
        let cand = match (params.inclusion, l) {
            (Inclusion::Random, _) | (Inclusion::Informative, 0) => {
                let free: Vec<usize> = (0..n).filter(|&i| !included[i]).collect();
                free[ctx.rng.random_range(0..free.len())]
            }
            (Inclusion::Informative, _) => {
                // Eq. 5.5 in log space; shared kernel: one variance per point.
                let mut best = (f64::INFINITY, usize::MAX);
                for i in (0..n).filter(|&i| !included[i]) {
                    let lp = log_predictive_class_prob(&m[i], &vec![s[i]; k_classes], y[i]);
                    if lp < best.0 {
                        best = (lp, i);
                    }
                }
                best.1
            }
        };
        // Residuals p_n = ỹ_n - m̃_n at the current m̃_n (eqs. 4.3–4.4).
        let tm = truncated_moments(&m[cand], y[cand]);
        let p: Vec<f64> = (0..k_classes).map(|k| tm.mean[k] - m[cand][k]).collect();
        y_active.push(tm.mean.clone());
        // Eq. 5.1: Σ_n = C[:, n] - Mᵀ M[:, n].
        let xc = x.row(cand).to_owned().insert_axis(ndarray::Axis(0));
        let c = gram_cross_phi(x, &xc, phi, s2);
        let mut sig: Vec<f64> = (0..n).map(|i| c[(i, 0)]).collect();
        for row in &Mrows {
            let a = row[cand];
            if a != 0.0 {
                for (si, ri) in sig.iter_mut().zip(row) {
                    *si -= a * ri;
                }
            }
        }
        let nu = 1.0 / (1.0 + s[cand]);
        if !nu.is_finite() {
            return Err(FitError::Numerical(format!("sparse ADF: non-finite variance at inclusion {l}")));
        }
        // Eqs. 5.2–5.4 with the cached ν.
        for i in 0..n {
            s[i] -= nu * sig[i] * sig[i];
            for k in 0..k_classes {
                m[i][k] += nu * p[k] * sig[i];
            }
        }
        let sq = nu.sqrt();
        Mrows.push(sig.iter().map(|v| sq * v).collect());
        included[cand] = true;
        active.push(cand);
        if params.trace_every > 0 && (l + 1) % params.trace_every == 0 {
            let err = (0..n).filter(|&i| crate::linalg::argmax(&m[i]) != y[i]).count() as f64 / n as f64;
            ctx.record(l + 1, &[("pool_error", err), ("n_included", (l + 1) as f64)]);
        }
    }
    Ok(AdfResult { active, y_active, m, s })
}
