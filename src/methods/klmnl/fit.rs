//! The sweeps to convergence of the variational fit, and warm starts.
use super::*;

/// The fitted variational posterior for one kernel.
pub(super) struct VarFit {
    pub(super) st: State,
    pub m: Vec<f64>,
    pub log_zh: f64,
    pub neg_kl: f64,
    pub stats: FitStats,
}

impl VarFit {
    pub fn alpha(&self, pr: &Prior) -> Vec<f64> {
        pr.y1.iter().zip(&self.st.b).map(|(y, b)| y - b).collect()
    }
    pub fn t_dense(&self) -> Mat<f64> {
        self.st.v.t.dense()
    }
    /// The W to warm-start from (V = (K^{-1} + W)^{-1}), in the class basis: the next fit's
    /// K^c, and so its basis, may differ.
    pub fn w(&self, pr: &Prior) -> Vec<Mat<f64>> {
        self.st.w_prev.iter().map(|w| pr.basis().to_class(w)).collect()
    }
}

/// A previous optimum (other hyper-parameters) to start a fit from.
#[derive(Clone)]
pub(super) struct WarmStart {
    /// W blocks in the class basis (the next fit's K^c, and so its basis, may differ).
    pub(super) w: Vec<Mat<f64>>,
    pub(super) b: Vec<f64>,
    pub(super) w_path_eta: Option<f64>,
}

impl WarmStart {
    pub(super) fn from_fit(pr: &Prior, fit: &VarFit) -> WarmStart {
        WarmStart { w: fit.w(pr), b: fit.st.b.clone(), w_path_eta: fit.stats.w_path_eta }
    }

    /// The state a source cell handed over (vectors `warm_w`, its W blocks row-major, and
    /// `warm_b`), if it has the shape of an n-datum, C-class fit.
    pub(super) fn from_handoff(h: Option<&Handoff>, n: usize, c: usize) -> Option<WarmStart> {
        let (w, b) = (h?.vectors.get("warm_w")?, h?.vectors.get("warm_b")?);
        (w.len() == n * c * c && b.len() == n * c).then(|| WarmStart {
            w: w.chunks_exact(c * c).map(|wi| Mat::from_fn(c, c, |p, q| wi[p * c + q])).collect(),
            b: b.clone(),
            w_path_eta: None,
        })
    }
}

/// Block coordinate ascent to convergence (notes D§2.4.8), from the E.3 initialisation or `warm`.
pub(super) fn fit_variational(
    pr: &Prior,
    params: &KlmnlParams,
    warm: Option<&WarmStart>,
    ctx: Option<&FitContext>,
) -> Result<VarFit, FitError> {
    let c = pr.c;
    let mut st = match warm {
        Some(WarmStart { w: w_class, b, .. }) => {
            let w: Vec<Mat<f64>> = w_class.iter().map(|wi| pr.basis().into_basis(wi.clone())).collect();
            let v = v_from_w(pr, &w)?;
            let s = (0..pr.n)
                .map(|i| -> Result<Mat<f64>, FitError> { Ok(sym(&(chol(&v.blocks[i], "V_i")?.solve(eye(c).as_ref()) + &w[i]))) })
                .collect::<Result<Vec<_>, _>>()?;
            State { b: b.to_vec(), s, v, w_prev: w, w_exact: true }
        }
        None => init_state(pr, &default_w(pr.n, c, params.gamma_w), params.gamma_a)?,
    };
    let mut m = m_of(pr, &st.b);
    let (mut cur, _) = bound(pr, &st, &m)?;
    let mut stats = FitStats { bound_trace: vec![cur], w_path_eta: warm.and_then(|w| w.w_path_eta), ..Default::default() };
    let mut lk: Option<Chol> = None;
    for sweep in 0..params.max_sweeps {
        if let Some(ctx) = ctx {
            ctx.check_deadline()?;
        }
        let start = cur;
        s_steps(pr, &mut st, &m, &mut stats)?;
        let (after_s, terms) = bound(pr, &st, &m)?;
        cur = after_s;
        cur = joint_b_step(pr, &mut st, &mut m, cur, &terms, &mut stats)?;
        cur = v_step(pr, &mut st, &m, cur, &mut lk, &mut stats)?;
        // b - g-bar at the current point (ḡ does not depend on V).
        let (_, terms) = bound(pr, &st, &m)?;
        stats.max_b_minus_gbar = (0..pr.n * c).map(|k| (st.b[k] - terms[k / c].gbar[k % c]).abs()).fold(0.0, f64::max);
        if stats.end_sweep(sweep, start, cur, params.tol, params.b_tol) {
            break;
        }
    }
    let nk = neg_kl(pr, &st, &m);
    Ok(VarFit { st, m, log_zh: cur, neg_kl: nk, stats })
}
