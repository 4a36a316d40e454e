//! The fitted sparse model: its latent predictive, (24) and (25), and the harness contract.
use super::*;

pub struct KlmnlSparseModel {
    pub(super) kernel: SqExp,
    pub(super) x_train: Array2<f64>,
    pub(super) n_present: usize,
    pub(super) predictive: String,
    pub(super) pr: SparsePrior,
    pub(super) fit: VarFit,
    /// u = L~^T (y - b), so alpha = K^{-1} m = L_K^{-T} u.
    pub(super) u: Vec<f64>,
    pub(super) diagnostics: Diagnostics,
    pub(super) extra: BTreeMap<String, f64>,
}

impl KlmnlSparseModel {
    pub fn log_zh(&self) -> f64 {
        self.fit.log_zh
    }
    /// The inducing sites (datum, class), in the order they were added.
    pub fn sites(&self) -> &[Site] {
        &self.pr.sites
    }
    pub fn kernel(&self) -> &SqExp {
        &self.kernel
    }
    pub fn log_zh_trace(&self) -> &[f64] {
        &self.fit.stats.bound_trace
    }

    /// q(f_*|y) per test point: m_* = K_z*^T alpha and V_* = K_** - K_z*^T T K_z* (notes D§4.2)
    /// with K_z* (s x C) whitened once, l = L_K^{-1} K_z*: m_* = l^T u, V_* = K_** - l^T (I - R) l.
    pub fn latent_predictive(&self, x: &Array2<f64>) -> (Vec<Vec<f64>>, Vec<Mat<f64>>) {
        let (c, s) = (self.pr.c(), self.pr.s);
        let kc = &self.pr.base.kc;
        let ks = self.kernel.cross(&self.x_train, x);
        let kss = self.kernel.diag(x);
        let imr = eye(s) - &self.fit.st.v.r;
        let mut means = Vec::with_capacity(x.nrows());
        let mut covs = Vec::with_capacity(x.nrows());
        for j in 0..x.nrows() {
            let kz = Mat::from_fn(s, c, |a, q| {
                let (i, ca) = self.pr.sites[a];
                ks[(i, j)] * kc[(ca, q)]
            });
            let l = self.pr.lk.solve_l(kz.as_ref());
            means.push((0..c).map(|q| (0..s).map(|a| l[(a, q)] * self.u[a]).sum()).collect());
            let v = kc * faer::Scale(kss[j]) - l.transpose() * &imr * &l;
            covs.push(sym(&v));
        }
        (means, covs)
    }
}

impl Fitted for KlmnlSparseModel {
    /// Probabilities by (25) over the present classes; (24) and (25) go along as `log_pred24`
    /// and `log_pred25`, and `predictive: eq24` scores by (24), as the dense method.
    fn predict(&self, x: &Array2<f64>, _rng: &mut Pcg64) -> Result<Prediction, FitError> {
        let (means, covs) = self.latent_predictive(x);
        let cp = self.n_present;
        let mut out = Array2::zeros((x.nrows(), cp));
        let mut log_p24 = Vec::with_capacity(means.len());
        let mut log_p25 = Vec::with_capacity(means.len());
        let mut jitter = 0.0f64;
        for (j, (m, v)) in means.iter().zip(&covs).enumerate() {
            let (h, _, _, jit) = optimise_datum_jitter(m, v)?;
            jitter = jitter.max(jit);
            log_p24.push(m.iter().map(|mc| h + mc).collect::<Vec<f64>>());
            let lse = log_sum_exp(m);
            log_p25.push(m.iter().map(|mc| mc - lse).collect::<Vec<f64>>());
            let mut l: Vec<f64> = m[..cp].to_vec();
            softmax_in_place(&mut l);
            for k in 0..cp {
                out[(j, k)] = l[k];
            }
        }
        let p24 = leading_columns(&log_p24, cp);
        let mut prediction =
            Prediction::new(out).with_values("log_pred24", p24.clone()).with_values("log_pred25", leading_columns(&log_p25, cp));
        if self.predictive == "eq24" {
            prediction.log_score = Some(p24);
        }
        prediction.jitter = jitter;
        Ok(prediction)
    }

    fn evidence(&self) -> Option<Evidence> {
        Some(Evidence::new(self.fit.log_zh, EvidenceKind::LowerBound))
    }

    fn kernels(&self) -> KernelSet {
        KernelSet::shared(Box::new(self.kernel.clone()))
    }

    fn diagnostics(&self) -> Diagnostics {
        self.diagnostics.clone()
    }

    fn extra_metrics(&self) -> BTreeMap<String, f64> {
        self.extra.clone()
    }

    /// The distinct training inputs that carry an inducing site.
    fn inducing_inputs(&self) -> Vec<Array2<f64>> {
        let mut rows: Vec<usize> = self.pr.sites.iter().map(|s| s.0).collect();
        rows.sort_unstable();
        rows.dedup();
        let d = self.x_train.ncols();
        vec![Array2::from_shape_fn((rows.len(), d), |(r, k)| self.x_train[(rows[r], k)])]
    }

    fn handoff(&self) -> Handoff {
        let mut h = Handoff::of_kernels(&self.kernels());
        h.vectors.insert("log_zh".into(), vec![self.fit.log_zh]);
        h.vectors.insert("sites".into(), self.pr.sites.iter().map(|&(i, k)| (i * self.pr.c() + k) as f64).collect());
        h
    }
}
