//! Fitting: the inducing set grown from a random start (active or random expansion, §9.3), with
//! `hyper: learn` one L-BFGS line search on the kernel per expansion and a final optimisation
//! (§9.4).
use super::*;
use std::sync::{Arc, Mutex};

/// One arm of the expansion: the final prior, fit and kernel, and log Z~_h* per set size.
pub(super) struct Grown {
    pub pr: SparsePrior,
    pub fit: VarFit,
    pub kernel: SqExp,
    pub sizes: Vec<(usize, f64)>,
    pub hyper_evals: usize,
    pub hyper_stop: Option<String>,
}

impl KlmnlSparse {
    pub(super) fn base(&self, problem: &Problem, kernel: &SqExp, c: usize) -> Arc<Base> {
        Arc::new(Base::new(kernel.gram(problem.x), eye(c), problem.y, self.params.noise))
    }

    /// Maximise log Z~_h* over the kernel's free log-parameters for a fixed set of sites by the
    /// shared L-BFGS (`iters` iterations; 1 = one line search), every evaluation warm-started
    /// from the last optimum and fitted with `fp`'s tolerances, gradients by App. C.4. Returns
    /// the kernel, its prior and fit.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn learn_kernel(
        &self,
        problem: &Problem,
        kernel: &SqExp,
        c: usize,
        sites: &[Site],
        warm: WarmStart,
        iters: u64,
        fp: &KlmnlSparseParams,
        ctx: &FitContext,
        evals: &mut usize,
    ) -> Result<(SqExp, SparsePrior, VarFit, String), FitError> {
        let per = problem.y.len() as f64;
        let warm = Mutex::new(warm);
        let count = Mutex::new(0usize);
        let f = |x: &[f64]| -> Result<(f64, Vec<f64>), FitError> {
            ctx.check_deadline()?;
            let kern = kernel.with_log_params(x);
            let base = self.base(problem, &kern, c);
            let dkx = kern.gram_grads(problem.x, &base.kx);
            let pr = SparsePrior::new(base, sites.to_vec())?;
            let w = warm.lock().expect("warm start lock").clone();
            let fit = fit_variational(&pr, fp, Some(&w), Some(ctx))?;
            let g = hyper_gradient(&pr, &fit.st, &dkx)?;
            *warm.lock().expect("warm start lock") = fit.warm(&pr)?;
            *count.lock().expect("eval counter") += 1;
            // Per datum, as the dense method: gradients of order one keep L-BFGS's first step sane.
            Ok((-fit.log_zh / per, g.iter().map(|v| -v / per).collect()))
        };
        let res = minimize_lbfgs(&f, &kernel.log_params(), &kernel.free_mask(), iters, self.params.hyper_tol / per)?;
        *evals += count.into_inner().expect("eval counter");
        let kernel = kernel.with_log_params(&res.x);
        let pr = SparsePrior::new(self.base(problem, &kernel, c), sites.to_vec())?;
        let w = warm.into_inner().expect("warm start lock");
        let fit = fit_variational(&pr, fp, Some(&w), Some(ctx))?;
        Ok((kernel, pr, fit, res.stop_reason))
    }

    /// Grow the set from `start` to `target` sites, `delta` per round, by `selection`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn grow(
        &self,
        problem: &Problem,
        kernel: &SqExp,
        c: usize,
        start: &[Site],
        selection: Selection,
        target: usize,
        learn: bool,
        ctx: &mut FitContext,
    ) -> Result<Grown, FitError> {
        let p = &self.params;
        let growth = p.growth();
        let delta = p.delta.unwrap_or(c);
        let mut kernel = kernel.clone();
        let mut sites = start.to_vec();
        let mut pr = SparsePrior::new(self.base(problem, &kernel, c), sites.clone())?;
        let mut fit = fit_variational(&pr, &growth, None, Some(ctx))?;
        let mut sizes = vec![(pr.s, fit.log_zh)];
        let mut hyper_evals = 0;
        let mut hyper_stop = None;
        while pr.s < target {
            ctx.check_deadline()?;
            let k = delta.min(target - pr.s);
            let new = choose(&pr, &fit.st, p, selection, k, ctx.rng)?;
            sites.extend(new.iter().map(|&q| (q / c, q % c)));
            let warm = fit.warm(&pr)?;
            pr = SparsePrior::new(pr.base.clone(), sites.clone())?;
            fit = fit_variational(&pr, &growth, Some(&warm), Some(ctx))?;
            if learn {
                let warm = fit.warm(&pr)?;
                let (kern, pr2, fit2, stop) = self.learn_kernel(problem, &kernel, c, &sites, warm, 1, &growth, ctx, &mut hyper_evals)?;
                (kernel, pr, fit, hyper_stop) = (kern, pr2, fit2, Some(stop));
            }
            sizes.push((pr.s, fit.log_zh));
        }
        // The final set: its kernel optimised (or kept) and its fit to the full tolerance.
        let warm = fit.warm(&pr)?;
        if learn {
            let (kern, pr2, fit2, stop) =
                self.learn_kernel(problem, &kernel, c, &sites, warm, p.max_hyper_iters, p, ctx, &mut hyper_evals)?;
            (kernel, pr, fit, hyper_stop) = (kern, pr2, fit2, Some(stop));
        } else {
            fit = fit_variational(&pr, p, Some(&warm), Some(ctx))?;
        }
        if let Some(last) = sizes.last_mut() {
            last.1 = fit.log_zh;
        }
        Ok(Grown { pr, fit, kernel, sizes, hyper_evals, hyper_stop })
    }

    /// The target number of sites: `sites`, or the source cell's per-class count (its metric of
    /// that name, else its hand-off vector) x C.
    fn target(&self, ctx: &FitContext, n: usize, c: usize) -> Result<usize, FitError> {
        let s = match &self.params.sites_per_class_from_source {
            Some(name) => {
                let v = ctx
                    .source_metrics
                    .and_then(|m| m.get(name).copied())
                    .or_else(|| ctx.source.and_then(|h| h.vectors.get(name)).and_then(|v| v.first().copied()))
                    .ok_or_else(|| {
                        FitError::Unsupported(format!(
                            "sites_per_class_from_source: the source cell has no metric or hand-off vector \"{name}\""
                        ))
                    })?;
                if !(v.is_finite() && v >= 0.0) {
                    return Err(FitError::Numerical(format!("sites_per_class_from_source: \"{name}\" is {v}")));
                }
                (v.round() as usize).max(1).saturating_mul(c)
            }
            None => self.params.sites,
        };
        Ok(s.min(n * c))
    }

    pub fn fit_model(
        &self,
        problem: &Problem,
        kernel: &SqExp,
        hyper: HyperPolicy,
        ctx: &mut FitContext,
    ) -> Result<KlmnlSparseModel, FitError> {
        problem.check("klmnl_sparse")?;
        let p = &self.params;
        let c = problem.n_classes + p.extra_classes;
        if c < 2 {
            return Err(FitError::Unsupported("sparse KL-MNL needs at least two classes".into()));
        }
        let n = problem.y.len();
        let target = self.target(ctx, n, c)?;
        let delta = p.delta.unwrap_or(c);
        let start_len = p.start.unwrap_or(delta).min(target);
        let all: Vec<usize> = (0..n * c).collect();
        // The random start, shared by the active and the random arm (§9.3).
        let start: Vec<Site> = sample_distinct(&all, start_len, ctx.rng).into_iter().map(|q| (q / c, q % c)).collect();
        let learn = hyper == HyperPolicy::Learn || p.learn_kernel;
        let grown = self.grow(problem, kernel, c, &start, self.selection, target, learn, ctx)?;
        let mut extra = BTreeMap::new();
        for &(s, v) in &grown.sizes {
            extra.insert(format!("log_zh_s{s}"), v);
            ctx.record(s, &[("log_zh", v)]);
        }
        if p.compare_random {
            let random = self.grow(problem, kernel, c, &start, Selection::Random, target, learn, ctx)?;
            for (&(s, a), &(_, r)) in grown.sizes.iter().zip(&random.sizes) {
                extra.insert(format!("log_zh_random_s{s}"), r);
                extra.insert(format!("active_minus_random_s{s}"), a - r);
                // Chai's Figure 5 per split: the trace's iteration axis is the set size.
                ctx.record(s, &[("active_minus_random", a - r)]);
            }
            extra.insert("active_minus_random".into(), grown.fit.log_zh - random.fit.log_zh);
        }
        let Grown { pr, fit, kernel, hyper_evals, hyper_stop, .. } = grown;
        let mut diagnostics = Diagnostics::default();
        let jitter = pr.noise_eff - pr.base.noise;
        diagnostics.jitter = (jitter > 0.0).then_some(jitter);
        diagnostics
            .number("sweeps", fit.stats.sweeps as f64)
            .number("converged", f64::from(u8::from(fit.stats.converged)))
            .number("max_b_minus_gbar", fit.stats.max_b_minus_gbar)
            .number("line_searches_s", fit.stats.s_line_searches as f64)
            .number("line_searches_b", fit.stats.b_line_searches as f64)
            .number("line_searches_v", fit.stats.v_line_searches as f64)
            .number("hyper_evaluations", hyper_evals as f64);
        if let Some(stop) = hyper_stop {
            diagnostics.note("hyper_stop", stop);
        }
        if fit.stats.stopped_at_floor {
            diagnostics.note("stopped_at_floor", "b - g-bar stalled above b_tol with the bound flat");
        }
        diagnostics.stop_reason = Some(if fit.stats.converged { StopReason::Converged } else { StopReason::MaxIterations });
        extra.insert("log_zh".into(), fit.log_zh);
        extra.insert("neg_kl".into(), fit.neg_kl);
        extra.insert("n_sites".into(), pr.s as f64);
        extra.insert("inducing_noise".into(), pr.noise_eff);
        extra.insert("sweeps".into(), fit.stats.sweeps as f64);
        let ymb: Vec<f64> = pr.y1().iter().zip(&fit.st.b).map(|(y, b)| y - b).collect();
        let u = pr.lt_times(&ymb);
        Ok(KlmnlSparseModel {
            kernel,
            x_train: problem.x.clone(),
            n_present: problem.n_classes,
            predictive: p.predictive.clone(),
            pr,
            fit,
            u,
            diagnostics,
            extra,
        })
    }
}
