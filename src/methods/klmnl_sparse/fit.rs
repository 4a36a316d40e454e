//! The sweeps to convergence of the variational fit for one inducing set, and warm starts.
use super::*;

/// The fitted variational posterior for one inducing set and kernel.
pub(super) struct VarFit {
    pub st: SState,
    pub log_zh: f64,
    pub neg_kl: f64,
    pub stats: FitStats,
}

impl VarFit {
    /// The state to start the next fit from (a larger set, or other hyper-parameters).
    pub fn warm(&self, pr: &SparsePrior) -> Result<WarmStart, FitError> {
        Ok(WarmStart { w: current_w(pr, &self.st)?, b: self.st.b.clone() })
    }
}

/// Block coordinate ascent to convergence (notes D§4.2's complete sparse loop): per sweep the
/// S-steps, the joint (m, b) step and the V-step, each monotone in the bound.
pub(super) fn fit_variational(
    pr: &SparsePrior,
    params: &KlmnlSparseParams,
    warm: Option<&WarmStart>,
    ctx: Option<&FitContext>,
) -> Result<VarFit, FitError> {
    let c = pr.c();
    let mut st = match warm {
        Some(w) => warm_state(pr, w).or_else(|_| init_state(pr, params.gamma_w, params.gamma_a))?,
        None => init_state(pr, params.gamma_w, params.gamma_a)?,
    };
    let mut cur = bound(pr, &st)?.value;
    let mut stats = FitStats { bound_trace: vec![cur], ..Default::default() };
    for sweep in 0..params.max_sweeps {
        if let Some(ctx) = ctx {
            ctx.check_deadline()?;
        }
        let start = cur;
        let mf = mf_of(pr, &st.b);
        s_steps(pr, &mut st, &mf, &mut stats)?;
        let after_s = bound(pr, &st)?;
        cur = joint_b_step(pr, &mut st, &after_s, &mut stats)?;
        let mf = mf_of(pr, &st.b);
        cur = v_step(pr, &mut st, &mf, cur, &mut stats)?;
        let bt = bound(pr, &st)?;
        stats.max_b_minus_gbar = (0..pr.n() * c).map(|k| (st.b[k] - bt.terms[k / c].gbar[k % c]).abs()).fold(0.0, f64::max);
        if stats.end_sweep(sweep, start, cur, params.tol, params.b_tol) {
            break;
        }
    }
    let bt = bound(pr, &st)?;
    Ok(VarFit { st, log_zh: bt.value, neg_kl: bt.neg_kl, stats })
}
