//! The fitted model: its latent predictive, (24) and (25), and the harness contract.
use super::*;

/// Per test point and class, the log of (24) and (25).
#[derive(Clone, Debug)]
pub struct PredCache {
    pub log_p24: Vec<Vec<f64>>,
    pub log_p25: Vec<Vec<f64>>,
    /// Largest jitter a predictive covariance V_* needed (0 when none).
    pub jitter: f64,
}

pub struct KlmnlModel {
    pub(super) kernel: SqExp,
    pub(super) x_train: Array2<f64>,
    pub(super) n_present: usize,
    pub(super) predictive: String,
    pub(super) pr: Prior,
    pub(super) fit: VarFit,
    /// T = K^{-1} - K^{-1} V K^{-1} (dense) and alpha = K^{-1} m = y - b.
    pub(super) t: Mat<f64>,
    pub(super) alpha: Vec<f64>,
    pub(super) diagnostics: Diagnostics,
    pub(super) extra: BTreeMap<String, f64>,
}

impl KlmnlModel {
    pub fn log_zh(&self) -> f64 {
        self.fit.log_zh
    }
    /// -KL(q(f|y) || p(f)).
    pub fn neg_kl(&self) -> f64 {
        self.fit.neg_kl
    }
    /// Classes present in the data (the model may have extra, empty ones).
    pub fn n_present(&self) -> usize {
        self.n_present
    }
    pub fn n_model_classes(&self) -> usize {
        self.pr.c
    }
    /// Training points of the fit.
    pub fn n_train(&self) -> usize {
        self.pr.n
    }
    /// The input kernel's Gram matrix Kx [n, n] at the fitted hyper-parameters.
    pub fn kx(&self) -> &Mat<f64> {
        &self.pr.kx
    }
    /// The inter-class covariance K^c [C, C].
    pub fn kc(&self) -> &Mat<f64> {
        &self.pr.kc
    }
    /// The prior covariance K = Kx (x) Kc [nC, nC], datum-major.
    pub fn prior_covariance(&self) -> &Mat<f64> {
        &self.pr.k
    }
    /// The posterior mean m of q(f|y) [nC], datum-major.
    pub fn posterior_mean(&self) -> &[f64] {
        &self.fit.m
    }
    /// T = K^{-1} - K^{-1} V K^{-1} [nC, nC], so that V = K - K T K.
    pub fn t_matrix(&self) -> &Mat<f64> {
        &self.t
    }
    /// The training labels one-hot [nC], datum-major.
    pub fn one_hot_labels(&self) -> &[f64] {
        &self.pr.y1
    }
    pub fn x_train(&self) -> &Array2<f64> {
        &self.x_train
    }
    pub fn kernel(&self) -> &SqExp {
        &self.kernel
    }
    /// Cross covariance kx(X_train, x), [n, m].
    pub fn kx_cross(&self, x: &Array2<f64>) -> Mat<f64> {
        self.kernel.cross(&self.x_train, x)
    }
    pub fn log_zh_trace(&self) -> &[f64] {
        &self.fit.stats.bound_trace
    }
    pub fn hyper_gradient(&self) -> Vec<f64> {
        let dkx = self.kernel.gram_grads(&self.x_train, &self.pr.kx);
        hyper_gradient(&envelope(&self.pr, &self.fit, false), &dkx)
    }

    /// q(f_*|y) per test point: m_* = K_*^T alpha, V_* = K_** - K_*^T T K_* (notes D§3.4).
    pub fn latent_predictive(&self, x: &Array2<f64>) -> (Vec<Vec<f64>>, Vec<Mat<f64>>) {
        let c = self.pr.c;
        let ks = self.kx_cross(x); // n x m
        let kss = self.kernel.diag(x);
        let n = self.pr.n;
        let mut means = Vec::with_capacity(x.nrows());
        let mut covs = Vec::with_capacity(x.nrows());
        for j in 0..x.nrows() {
            // K_*j = k_*j (x) Kc: nC x C
            let kj = Mat::from_fn(n * c, c, |r, q| ks[(r / c, j)] * self.pr.kc[(r % c, q)]);
            let mean = Mat::from_fn(c, 1, |q, _| (0..n * c).map(|r| kj[(r, q)] * self.alpha[r]).sum::<f64>());
            let tk = &self.t * &kj;
            let v = &self.pr.kc * faer::Scale(kss[j]) - kj.transpose() * tk;
            means.push((0..c).map(|q| mean[(q, 0)]).collect());
            covs.push(sym(&v));
        }
        (means, covs)
    }

    /// Per test point and class: log of (24) and (25), over the model's C classes.
    pub fn predictive_logs(&self, x: &Array2<f64>) -> Result<PredCache, FitError> {
        let (means, covs) = self.latent_predictive(x);
        let mut log_p24 = Vec::with_capacity(means.len());
        let mut log_p25 = Vec::with_capacity(means.len());
        let mut jitter = 0.0f64;
        for (m, v) in means.iter().zip(&covs) {
            let (h, _, _, j) = optimise_datum_jitter(m, v)?;
            jitter = jitter.max(j);
            log_p24.push(m.iter().map(|mc| h + mc).collect());
            let lse = log_sum_exp(m);
            log_p25.push(m.iter().map(|mc| mc - lse).collect());
        }
        Ok(PredCache { log_p24, log_p25, jitter })
    }

    pub fn extra_metrics(&self) -> BTreeMap<String, f64> {
        self.extra.clone()
    }
}

impl Fitted for KlmnlModel {
    /// Probabilities by (25) over the present classes (the extra, empty classes are dropped);
    /// the log-values of (24) and (25) go along as `log_pred24` and `log_pred25`, and with extra
    /// classes the log score over all classes as `log_pred_all`. With
    /// `predictive: eq24` the log predictive score is (24), a lower bound on p(y* | y) that does
    /// not sum to one over the classes (normalised, it equals (25)).
    fn predict(&self, x: &Array2<f64>, _rng: &mut Pcg64) -> Result<Prediction, FitError> {
        let logs = self.predictive_logs(x)?;
        let cp = self.n_present;
        let mut out = Array2::zeros((x.nrows(), cp));
        for j in 0..x.nrows() {
            let mut l: Vec<f64> = logs.log_p25[j][..cp].to_vec();
            softmax_in_place(&mut l);
            for c in 0..cp {
                out[(j, c)] = l[c];
            }
        }
        let log_p24 = leading_columns(&logs.log_p24, cp);
        let mut prediction =
            Prediction::new(out).with_values("log_pred24", log_p24.clone()).with_values("log_pred25", leading_columns(&logs.log_p25, cp));
        // With extra (empty) classes, the log score under all C classes, their mass kept (not
        // renormalised over the present ones): Chai's glass scores read so (chai2012-table3-glass-c7).
        if cp < self.pr.c {
            let all = if self.predictive == "eq24" { log_p24.clone() } else { leading_columns(&logs.log_p25, cp) };
            prediction = prediction.with_values("log_pred_all", all);
        }
        if self.predictive == "eq24" {
            prediction.log_score = Some(log_p24);
        }
        prediction.jitter = logs.jitter;
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

    fn handoff(&self) -> Handoff {
        // m class-major, as the harness's other methods lay out latent vectors.
        let (n, c) = (self.pr.n, self.pr.c);
        let mean: Vec<f64> = (0..c).flat_map(|q| (0..n).map(move |i| (i, q))).map(|(i, q)| self.fit.m[i * c + q]).collect();
        let mut vectors = BTreeMap::new();
        vectors.insert("mean".into(), mean);
        vectors.insert("log_zh".into(), vec![self.fit.log_zh]);
        vectors.insert("kc".into(), (0..c * c).map(|k| self.pr.kc[(k / c, k % c)]).collect());
        // The variational state, for dependent cells to warm-start from.
        let warm = WarmStart::from_fit(&self.pr, &self.fit);
        vectors.insert("warm_w".into(), warm.w.iter().flat_map(|wi| (0..c * c).map(move |k| wi[(k / c, k % c)])).collect());
        vectors.insert("warm_b".into(), warm.b);
        Handoff { vectors, ..Handoff::of_kernels(&self.kernels()) }
    }
}
