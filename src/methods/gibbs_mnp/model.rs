//! The fitted sampler: the kept draws and the predictive averaged over them.
use super::*;

/// The fitted sampler: the kept draws, as B = U^T y (everything prediction needs).
pub struct GibbsMnpModel {
    pub(super) kernel: SqExp,
    pub(super) x_train: Array2<f64>,
    pub(super) n_classes: usize,
    pub(super) binary: bool,
    pub(super) U: Mat<f64>,
    /// 1 / (1 + lambda_i).
    pub(super) inv1p: Vec<f64>,
    /// U^T Y of each kept draw, [n, K].
    pub(super) kept_B: Vec<Mat<f64>>,
    /// Posterior mean of M over the kept draws, [n, K].
    pub(super) m_mean: Mat<f64>,
    pub(super) evidence: Option<EvidenceEstimate>,
    pub(super) diagnostics: Diagnostics,
}

impl GibbsMnpModel {
    /// Per-draw predictive class probabilities [draw][test point][class] (tests and diagnostics).
    pub fn predict_per_draw(&self, x: &Array2<f64>) -> Vec<Array2<f64>> {
        self.log_predict_per_draw(x).into_iter().map(|l| l.mapv(f64::exp)).collect()
    }

    /// Per-draw log predictive class probabilities [draw][test point][class].
    fn log_predict_per_draw(&self, x: &Array2<f64>) -> Vec<Array2<f64>> {
        let (W, var) = self.test_projection(x);
        let m = x.nrows();
        let K = self.kept_B[0].ncols();
        let mut mu_row = vec![0.0; K];
        let mut mu = Mat::<f64>::zeros(m, K);
        self.kept_B
            .iter()
            .map(|B| {
                faer::linalg::matmul::matmul(mu.as_mut(), faer::Accum::Replace, W.as_ref(), B.as_ref(), 1.0, faer::Par::Seq);
                let mut out = Array2::<f64>::zeros((m, self.n_classes));
                let mut logp = vec![0.0; self.n_classes];
                for i in 0..m {
                    for (k, v) in mu_row.iter_mut().enumerate() {
                        *v = mu[(i, k)];
                    }
                    log_predictive_point(&mu_row, var[i], self.binary, &mut logp);
                    for (c, l) in logp.iter().enumerate() {
                        out[[i, c]] = *l;
                    }
                }
                out
            })
            .collect()
    }

    /// W = C_* U diag(1/(1+lambda)) [m, n] (so mu = W B per draw) and the predictive latent
    /// variance c(x,x) - c_*^T (I + C)^{-1} c_* per test point.
    pub(super) fn test_projection(&self, x: &Array2<f64>) -> (Mat<f64>, Vec<f64>) {
        let Cs = self.kernel.cross(x, &self.x_train);
        let diag = self.kernel.diag(x);
        let V = &Cs * &self.U;
        let n = self.inv1p.len();
        let W = Mat::from_fn(x.nrows(), n, |i, j| V[(i, j)] * self.inv1p[j]);
        let var = (0..x.nrows()).map(|i| (diag[i] - (0..n).map(|j| V[(i, j)] * V[(i, j)] * self.inv1p[j]).sum::<f64>()).max(0.0)).collect();
        (W, var)
    }

    /// Posterior mean of the latents at the training inputs, [n, K] class-major flattened.
    pub fn latent_mean(&self) -> Vec<f64> {
        let (n, K) = (self.m_mean.nrows(), self.m_mean.ncols());
        (0..K).flat_map(|k| (0..n).map(move |i| (k, i))).map(|(k, i)| self.m_mean[(i, k)]).collect()
    }

    pub fn evidence_estimate(&self) -> Option<&EvidenceEstimate> {
        self.evidence.as_ref()
    }
}

impl Fitted for GibbsMnpModel {
    fn predict(&self, x: &Array2<f64>, _rng: &mut Pcg64) -> Result<Prediction, FitError> {
        // The mean over draws in log space (log-mean-exp), so that a class whose probability
        // underflows in every draw still has its log (a far-tail test point's score).
        let draws = self.log_predict_per_draw(x);
        let mut log_mean = Array2::<f64>::zeros((x.nrows(), self.n_classes));
        let mut terms = vec![0.0; draws.len()];
        for ((i, c), v) in log_mean.indexed_iter_mut() {
            for (t, d) in terms.iter_mut().zip(&draws) {
                *t = d[[i, c]];
            }
            *v = log_sum_exp(&terms) - (draws.len() as f64).ln();
        }
        if log_mean.iter().any(|v| v.is_nan() || *v > 1e-12) {
            return Err(FitError::Numerical("gibbs_mnp: predictive log probability not a number or above 0".into()));
        }
        let mut prediction = Prediction::new(log_mean.mapv(f64::exp));
        prediction.log_score = Some(log_mean);
        Ok(prediction)
    }

    fn evidence(&self) -> Option<Evidence> {
        self.evidence.as_ref().map(|e| Evidence { value: e.log_evidence, kind: EvidenceKind::Estimate, std_err: Some(e.std_err) })
    }

    fn kernels(&self) -> KernelSet {
        KernelSet::shared(Box::new(self.kernel.clone()))
    }

    fn diagnostics(&self) -> Diagnostics {
        self.diagnostics.clone()
    }

    fn extra_metrics(&self) -> BTreeMap<String, f64> {
        let mut out = BTreeMap::new();
        if let Some(e) = &self.evidence {
            out.insert("evidence_ess".into(), e.ess);
        }
        out
    }

    fn handoff(&self) -> Handoff {
        let mut vectors = BTreeMap::new();
        vectors.insert("latent_mean".into(), self.latent_mean());
        Handoff { vectors, ..Handoff::of_kernels(&self.kernels()) }
    }
}
