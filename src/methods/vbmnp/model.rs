//! The fitted VB-MNP model: its predictive latents and class probabilities (G&R eq. 4.10).
use super::*;

/// The fitted model: the final ỹ through B = (I + C)^{-1} ỹ, for the predictive of §4.5.
pub struct VbmnpModel {
    pub(super) x: Array2<f64>,
    pub(super) kernel: SqExp,
    /// Classes in the data: the first n_present of the model's K (the rest are `extra_classes`).
    pub(super) n_present: usize,
    pub(super) phi: Vec<f64>,
    pub(super) psi: Vec<f64>,
    pub(super) s2: f64,
    pub(super) chol: Chol,
    pub(super) B: Mat<f64>,
    pub(super) elbo: f64,
    /// The evidence (the `evidence` setting's bound) and the printed App. C bound.
    pub(super) bound: f64,
    pub(super) bound_paper: f64,
    pub(super) iters: usize,
    /// Why the iterations ended: converged, the iteration limit, or a budget.
    pub(super) stop: StopReason,
    pub(super) learned: bool,
    pub(super) ess_last: f64,
    pub(super) ess_min: f64,
    pub(super) is_failed: usize,
    /// Diagnostics: the R port's bound formula (exact and with its log-det floor).
    pub(super) bound_port: f64,
    pub(super) bound_port_floored: f64,
    /// vbmp's formula without its determinant terms, and log|C + 1e-10 s2 I| (see `PortBounds`).
    pub(super) bound_port_det_free: f64,
    pub(super) port_log_det_c: f64,
    pub(super) also_predict: Vec<crate::methods::AlsoPredict>,
}

impl VbmnpModel {
    /// Predictive latent means [m, K] and variances [m] (shared kernel: one per point).
    pub fn predictive_latents(&self, xs: &Array2<f64>) -> (Mat<f64>, Vec<f64>) {
        let Kx = gram_cross_phi(&self.x, xs, &self.phi, self.s2);
        let mu = Kx.transpose() * &self.B;
        let V = self.chol.solve_l(Kx.as_ref());
        let var = crate::linalg::reduced_variances(&vec![self.s2; xs.nrows()], V.as_ref());
        (mu, var)
    }

    pub fn elbo(&self) -> f64 {
        self.elbo
    }
}

/// The first `cp` of the K class probabilities `p`, renormalised over them when the model has
/// extra (empty) classes.
fn present_classes(p: &[f64], cp: usize) -> ndarray::Array1<f64> {
    let total: f64 = if cp < p.len() { p[..cp].iter().sum() } else { 1.0 };
    p[..cp].iter().map(|v| v / total).collect()
}

impl Fitted for VbmnpModel {
    fn predict(&self, xs: &Array2<f64>, _rng: &mut Pcg64) -> Result<Prediction, FitError> {
        let (mu, var) = self.predictive_latents(xs);
        let (K, cp) = (mu.ncols(), self.n_present);
        let mut out = Array2::zeros((xs.nrows(), cp));
        let mut all = Array2::zeros((xs.nrows(), cp));
        let mut plug_in = Array2::zeros((xs.nrows(), cp));
        for j in 0..xs.nrows() {
            let m: Vec<f64> = (0..K).map(|k| mu[(j, k)]).collect();
            let p = predictive_class_probs(&m, &vec![var[j]; K]);
            for k in 0..cp {
                all[[j, k]] = p[k].max(f64::MIN_POSITIVE).ln();
            }
            out.row_mut(j).assign(&present_classes(&p, cp));
            if !self.also_predict.is_empty() {
                plug_in.row_mut(j).assign(&present_classes(&predictive_class_probs(&m, &vec![0.0; K]), cp));
            }
        }
        // With extra (empty) classes, the log score over all K, their mass kept (see klmnl's).
        let mut prediction = if cp < K { Prediction::new(out).with_values("log_pred_all", all) } else { Prediction::new(out) };
        for rule in &self.also_predict {
            prediction = match rule {
                crate::methods::AlsoPredict::PlugIn => prediction.with_alternative(rule.name(), plug_in.clone()),
            };
        }
        Ok(prediction)
    }

    fn evidence(&self) -> Option<Evidence> {
        Some(Evidence::new(self.bound, EvidenceKind::LowerBound))
    }

    fn kernels(&self) -> KernelSet {
        KernelSet::shared(Box::new(self.kernel.clone()))
    }

    fn diagnostics(&self) -> Diagnostics {
        let mut d = Diagnostics { iterations: Some(self.iters as u64), ..Default::default() };
        d.stop_reason = Some(self.stop);
        d.note("phi", format!("{:?}", self.phi)).note("hyper_learned", self.learned.to_string());
        if self.learned {
            d.number("is_failed_samples", self.is_failed as f64);
        }
        d
    }

    fn extra_metrics(&self) -> BTreeMap<String, f64> {
        let mut m = BTreeMap::new();
        m.insert("elbo".into(), self.elbo);
        m.insert("bound_paper".into(), self.bound_paper);
        m.insert("iterations".into(), self.iters as f64);
        m.insert("bound_port".into(), self.bound_port);
        m.insert("bound_port_floored".into(), self.bound_port_floored);
        m.insert("bound_port_det_free".into(), self.bound_port_det_free);
        m.insert("port_log_det_c".into(), self.port_log_det_c);
        if self.learned {
            m.insert("ess_last".into(), self.ess_last);
            m.insert("ess_min".into(), self.ess_min);
        }
        m
    }

    fn handoff(&self) -> Handoff {
        let mut vectors = BTreeMap::new();
        vectors.insert("phi".into(), self.phi.clone());
        vectors.insert("psi".into(), self.psi.clone());
        Handoff { vectors, ..Handoff::of_kernels(&self.kernels()) }
    }
}
