//! The fitted model: the importance-sampled predictive (F.1) and the harness contract.
use super::*;

pub struct ImportanceModel {
    pub(super) km: KlmnlModel,
    pub(super) sampler: Sampler,
    pub(super) log_w: Vec<f64>,
    /// (index, scale s, generator state before its z) of the samples with a finite log-weight
    /// among the first `n_test`, in index order.
    pub(super) replay: Vec<(usize, f64, Pcg64)>,
    pub(super) n_test: usize,
    pub(super) log_ub: f64,
    pub(super) diagnostics: Diagnostics,
    pub(super) extra: BTreeMap<String, f64>,
}

impl ImportanceModel {
    pub fn extra_metrics(&self) -> BTreeMap<String, f64> {
        self.extra.clone()
    }

    /// IS predictive class probabilities (F.1) over the model's classes, per test point.
    pub fn is_predictive(&self, x: &Array2<f64>, rng: &mut Pcg64) -> Result<Vec<Vec<f64>>, FitError> {
        let s = &self.sampler;
        let c = s.c;
        let mt = x.nrows();
        let cond = self.test_conditional(x);
        let pseed: u64 = rng.random();
        // Samples with weight below e^-negligible of the largest add nothing visible: skip them.
        let max_lw = self.log_w[..self.n_test].iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let visible: Vec<&(usize, f64, Pcg64)> = self.replay.iter().filter(|(k, _, _)| self.log_w[*k] >= max_lw - s.negligible).collect();
        let mut acc = WeightAcc::new(mt * c);
        let mut fstar = vec![0.0; mt * c];
        let mut eps = vec![0.0; c];
        let mut next = 0;
        for chunk in visible.chunks(s.batch) {
            // Their draws again (bit for bit), and K_*^T K^{-1} (f - m) / s = (A_x^T (x) L_c) u
            // for all of them at once: A_x^T U, then L_c per sample.
            let z = s.redraw(&chunk.iter().map(|(_, _, st)| st).collect::<Vec<_>>());
            let au = cond.offsets(s, &z);
            for (k, &&(sample, scale, _)) in chunk.iter().enumerate() {
                // Every weight before this sample enters the normaliser, in sample order.
                while next < sample {
                    acc.add(self.log_w[next]);
                    next += 1;
                }
                let r = acc.add(self.log_w[sample]);
                next += 1;
                let rng = &mut sample_rng(pseed, sample);
                for j in 0..mt {
                    for q in 0..c {
                        eps[q] = rng.sample::<f64, _>(StandardNormal);
                    }
                    let fj = &mut fstar[j * c..(j + 1) * c];
                    cond.point(s, &au, k, scale, j, &eps, fj);
                    // The probit's u-draws follow this point's eps in the stream.
                    if s.lik.lik == Lik::Probit {
                        let pr = s.lik.probs(fj, rng);
                        fj.copy_from_slice(&pr);
                    }
                }
                if s.lik.lik == Lik::Logit {
                    softmax_rows(&mut fstar, c);
                }
                for (a, p) in acc.pred.iter_mut().zip(&fstar) {
                    *a += r * p;
                }
            }
        }
        while next < self.n_test {
            acc.add(self.log_w[next]);
            next += 1;
        }
        if acc.sum == 0.0 {
            // Every weight among the first n_test is 0 (the fit's evidence may still be finite).
            return Err(FitError::Numerical(format!("importance predictive: all {} test-sample weights are 0", self.n_test)));
        }
        Ok((0..mt).map(|j| (0..c).map(|q| acc.pred[j * c + q] / acc.sum).collect()).collect())
    }
}

/// The conditional f_* | f of F.1 at m test inputs: f_*j ~ N(K_*j^T K^{-1} f, kappa_j K^c) with
/// K_*j = k_*j (x) K^c, K_*j^T K^{-1} f = K_*j^T alpha + s (A_x^T (x) L_c) u for a draw
/// f = m + s L_K u (m = K alpha the proposal centre, L_K = L_x (x) L_c), A_x = L_x^{-1} k_*x and
/// kappa_j = k_**j - |A_x[:, j]|^2 (so k_** K^c - K_*^T K^{-1} K_* = kappa_j K^c).
pub(super) struct TestConditional {
    /// K_*j^T alpha per test point: the conditional mean at the proposal centre.
    pub(super) means: Vec<Vec<f64>>,
    /// A_x^T (m x n).
    pub(super) axt: Mat<f64>,
    pub(super) kappa: Vec<f64>,
}

impl ImportanceModel {
    /// The conditional f_* | f at the test inputs `x` ([`TestConditional`]).
    pub(super) fn test_conditional(&self, x: &Array2<f64>) -> TestConditional {
        let (n, mt) = (self.sampler.n, x.nrows());
        // A_x = L_x^{-1} k_*x (n x m); conditional variance factor kappa_j = k_** - |A_x[:, j]|^2.
        let ks = self.km.kx_cross(x);
        let ax = self.sampler.lx.solve_l(ks.as_ref());
        let kss = self.km.kernel().diag(x);
        let kappa: Vec<f64> = (0..mt).map(|j| (kss[j] - (0..n).map(|i| ax[(i, j)].powi(2)).sum::<f64>()).max(0.0)).collect();
        let axt = ax.transpose().to_owned();
        // K_*^T alpha: mean of the test latents at the proposal centre.
        let (means, _) = self.km.latent_predictive(x);
        TestConditional { means, axt, kappa }
    }
}

impl TestConditional {
    /// K_*^T K^{-1} (f - m) / s = (A_x^T (x) L_c) u for draws z (Y layout, k samples): A_x^T U,
    /// then L_c per sample; m x (k C).
    pub(super) fn offsets(&self, s: &Sampler, z: &Mat<f64>) -> Mat<f64> {
        s.right_lc(&(&self.axt * &*s.whiten(z)), z.ncols() / s.c)
    }

    /// Test point j's latents f_*j for sample k of `au` (from [`Self::offsets`]) at scale
    /// `scale`, from C standard normals `eps`: the conditional mean + sqrt(kappa_j) L_c eps.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn point(&self, s: &Sampler, au: &Mat<f64>, k: usize, scale: f64, j: usize, eps: &[f64], fj: &mut [f64]) {
        let c = s.c;
        let sk = self.kappa[j].sqrt();
        for q in 0..c {
            let noise: f64 = (0..=q).map(|i| s.lc[(q, i)] * eps[i]).sum();
            fj[q] = self.means[j][q] + scale * au[(j, k * c + q)] + sk * noise;
        }
    }
}

impl Fitted for ImportanceModel {
    /// IS probabilities renormalised over the present classes; the log-values of IS (over the
    /// model's classes), (24) and (25) go along as `log_pred_is`, `log_pred24`, `log_pred25`,
    /// and with extra classes IS's again as `log_pred_all` (the name every method shares).
    fn predict(&self, x: &Array2<f64>, rng: &mut Pcg64) -> Result<Prediction, FitError> {
        let probs = self.is_predictive(x, rng)?;
        let kl = self.km.predictive_logs(x)?;
        let cp = self.km.n_present();
        let mut out = Array2::zeros((x.nrows(), cp));
        for (j, pj) in probs.iter().enumerate() {
            let tot: f64 = pj[..cp].iter().sum();
            for q in 0..cp {
                out[(j, q)] = pj[q] / tot;
            }
        }
        let log_p_is = Array2::from_shape_fn((x.nrows(), cp), |(j, q)| probs[j][q].max(f64::MIN_POSITIVE).ln());
        let mut prediction = Prediction::new(out);
        // With extra (empty) classes, the score over all the model's classes (see klmnl's).
        if cp < probs.first().map_or(cp, Vec::len) {
            prediction = prediction.with_values("log_pred_all", log_p_is.clone());
        }
        Ok(prediction
            .with_values("log_pred_is", log_p_is)
            .with_values("log_pred24", leading_columns(&kl.log_p24, cp))
            .with_values("log_pred25", leading_columns(&kl.log_p25, cp)))
    }

    fn evidence(&self) -> Option<Evidence> {
        Some(Evidence::new(self.log_ub, EvidenceKind::Estimate))
    }

    fn kernels(&self) -> KernelSet {
        self.km.kernels()
    }

    fn diagnostics(&self) -> Diagnostics {
        self.diagnostics.clone()
    }

    /// IS, (24) and (25) log p(y*) sums, the bracket (24) <= IS <= (25) per point and for the
    /// sums (Chai §9.1 claim (c)), and the plug-in estimate of Theorem 12's lower bound
    /// (`thm12_lower`: log p-hat in place of log p(y), so an estimate of the bound, not a bound).
    fn test_metrics(&self, prediction: &Prediction, y: &[usize]) -> BTreeMap<String, f64> {
        let mut out = prediction.class_value_sums(y);
        let v = &prediction.log_class_values;
        let (is, e24, e25) = (&v["log_pred_is"], &v["log_pred24"], &v["log_pred25"]);
        let inside = y.iter().enumerate().filter(|&(j, &t)| e24[(j, t)] <= is[(j, t)] && is[(j, t)] <= e25[(j, t)]).count();
        let (s_is, s24, s25) = (out["log_pred_is_sum"], out["log_pred24_sum"], out["log_pred25_sum"]);
        out.insert("is_minus_eq24".into(), s_is - s24);
        out.insert("eq25_minus_is".into(), s25 - s_is);
        out.insert("bracket_sum_ok".into(), if s24 <= s_is && s_is <= s25 { 1.0 } else { 0.0 });
        out.insert("bracket_point_frac".into(), inside as f64 / y.len().max(1) as f64);
        // Theorem 12 (notes D§3.5): log p(y*|y) >= sum_j max h(e^{c_j}; q_*j) + log Z_h - log p(y).
        // log p(y) is unknown; this plugs in the point estimate log p-hat (log_z_hat), which is
        // biased low (Jensen) and random, so the value is an estimate of the bound, not a bound
        // on the joint test likelihood. With the 99.9% upper confidence bound log_z_ub in place
        // of log p-hat it would be a lower bound holding with probability >= 0.999 (as far as the
        // CLT interval does); kept as is so that stored numbers do not move. For MC-MNP log p-hat
        // is the probit model's evidence while h and Z_h are the logit's (KL-MNL), so there the
        // value is not Theorem 12's for either model.
        if let (Some(zh), Some(lz)) = (self.extra.get("klmnl_log_zh"), self.extra.get("log_z_hat")) {
            out.insert("thm12_lower".into(), s24 + zh - lz);
        }
        out
    }

    fn extra_metrics(&self) -> BTreeMap<String, f64> {
        self.extra.clone()
    }

    fn handoff(&self) -> Handoff {
        self.km.handoff()
    }
}
