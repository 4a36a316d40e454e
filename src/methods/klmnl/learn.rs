//! Fitting, with hyper-parameter learning by L-BFGS on the optimised bound.
use super::*;

/// The variational fit's tolerances for the next evaluation of hyper-parameter learning, given
/// the optimised bounds so far: while the outer steps still move the bound by much, the inner
/// fit need not resolve it to 1e-10 (the envelope gradient's error shrinks with the root of the
/// bound's), so tol follows a thousandth of the last change, between `params.tol` and 1e-6,
/// and b_tol scales with its root. The last evaluations, whose changes are tiny, are as tight
/// as a plain fit.
pub(super) fn inner_params(params: &KlmnlParams, bounds: &[f64]) -> KlmnlParams {
    let mut p = params.clone();
    if let [.., a, b] = bounds {
        let rel = 1e-3 * (b - a).abs() / b.abs().max(1.0);
        p.tol = rel.clamp(params.tol, 1e-6f64.max(params.tol));
        p.b_tol = loosened_b_tol(params.b_tol, params.tol, p.tol);
    }
    p
}

impl Klmnl {
    pub fn fit_model(&self, problem: &Problem, kernel: &SqExp, hyper: HyperPolicy, ctx: &mut FitContext) -> Result<KlmnlModel, FitError> {
        problem.check("klmnl")?;
        let c = problem.n_classes + self.params.extra_classes;
        if c < 2 {
            return Err(FitError::Unsupported("KL-MNL needs at least two classes".into()));
        }
        let model = self.params.kc_model.clone();
        let mut rho = kc_init(&model, c);
        let mut kc = kc_of(&model, &rho, c);
        if self.params.kc_from_source {
            let v = ctx
                .source
                .and_then(|h| h.vectors.get("kc"))
                .ok_or_else(|| FitError::Unsupported("kc_from_source: the source cell handed over no \"kc\"".into()))?;
            if v.len() != c * c {
                return Err(FitError::Unsupported(format!("kc_from_source: \"kc\" has {} entries, expected {}", v.len(), c * c)));
            }
            kc = Mat::from_fn(c, c, |i, j| v[i * c + j]);
        }
        let mut kernel = kernel.clone();
        if let Some(v) = self.params.prior_variance {
            kernel.log_variance = v.ln();
        }
        let mut diagnostics = Diagnostics::default();
        let warm_retries = std::sync::atomic::AtomicUsize::new(0);
        // Sweeps over all evaluations of the bound (the work of the search: the benchmark's flop count).
        let search_sweeps = std::sync::atomic::AtomicUsize::new(0);
        let mut hyper_evals = 0usize;
        let mut final_warm: Option<WarmStart> = None;
        let learn_kernel = hyper == HyperPolicy::Learn;
        let learn_kc = self.params.learn_kc && !rho.is_empty() && !self.params.kc_from_source;
        if learn_kernel || learn_kc {
            // Maximise log Z_h* over [free kernel log-parameters, K^c parameters], warm-starting
            // every variational fit from the last optimum (App. E.3); gradients by the envelope theorem.
            let nk = kernel.n_params();
            let warm: Mutex<Option<WarmStart>> = Mutex::new(None);
            let evals = Mutex::new(0usize);
            let trace_vals: Mutex<Vec<f64>> = Mutex::new(Vec::new());
            let ctx_ref: &FitContext = &*ctx;
            let kc_fixed = kc.clone();
            let f = |p: &[f64]| -> Result<(f64, Vec<f64>), FitError> {
                ctx_ref.check_deadline()?;
                ctx_ref.budget_stop_evaluation(*evals.lock().expect("eval counter") as u64)?;
                let kern = kernel.with_log_params(&p[..nk]);
                let kx = kern.gram(problem.x);
                let dkx = kern.gram_grads(problem.x, &kx);
                let kcp = if learn_kc { kc_of(&model, &p[nk..], c) } else { kc_fixed.clone() };
                let pr = Prior::new(kx, kcp, problem.y)?;
                let w_guard = warm.lock().expect("warm start lock").clone();
                let params = inner_params(&self.params, &trace_vals.lock().expect("trace lock"));
                let fit = match &w_guard {
                    Some(w) => fit_variational(&pr, &params, Some(w), Some(ctx_ref)).or_else(|_| {
                        // Reported: a warm start that failed and was retried from the default state.
                        warm_retries.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        fit_variational(&pr, &params, None, Some(ctx_ref))
                    })?,
                    None => fit_variational(&pr, &params, None, Some(ctx_ref))?,
                };
                search_sweeps.fetch_add(fit.stats.sweeps, std::sync::atomic::Ordering::Relaxed);
                let env = envelope(&pr, &fit, learn_kc);
                let mut g = hyper_gradient(&env, &dkx);
                if learn_kc {
                    g.extend(kc_gradient(&env, &model, &p[nk..]));
                } else {
                    g.extend(vec![0.0; p.len() - nk]);
                }
                *warm.lock().expect("warm start lock") = Some(WarmStart::from_fit(&pr, &fit));
                *evals.lock().expect("eval counter") += 1;
                trace_vals.lock().expect("trace lock").push(fit.log_zh);
                // Per datum: the same optimum, but gradients of order one keep the optimiser's
                // first (unit) step from jumping to extreme hyper-parameters.
                let per = problem.y.len() as f64;
                Ok((-fit.log_zh / per, g.iter().map(|v| -v / per).collect()))
            };
            let mut x0 = kernel.log_params();
            x0.extend(&rho);
            let mut free: Vec<bool> = kernel.free_mask().into_iter().map(|f| f && learn_kernel).collect();
            free.extend(rho.iter().map(|_| learn_kc));
            // The cost is per datum (see `f`), so is its tolerance.
            let tol_cost = self.params.hyper_tol / problem.y.len() as f64;
            let res = minimize_lbfgs(&f, &x0, &free, self.params.max_hyper_iters, tol_cost)?;
            kernel = kernel.with_log_params(&res.x[..nk]);
            if learn_kc {
                rho = res.x[nk..].to_vec();
                kc = kc_of(&model, &rho, c);
            }
            hyper_evals = *evals.lock().expect("eval counter");
            final_warm = warm.into_inner().expect("warm start lock");
            for (k, v) in trace_vals.lock().expect("trace lock").iter().enumerate() {
                ctx.record(k, &[("log_zh", *v)]);
            }
            diagnostics.note("hyper_stop", res.stop_reason.clone()).number("hyper_iterations", res.iterations as f64);
            diagnostics.iterations = Some(hyper_evals as u64);
            diagnostics.stop_reason = Some(res.stop(self.params.max_hyper_iters));
        }
        let kx = kernel.gram(problem.x);
        let pr = Prior::new(kx, kc, problem.y)?;
        // The optimum is unique (the bound is concave), so a warm start changes only the cost:
        // from the learning's last optimum, else from a source cell's fit (e.g. the KL-MNL fit
        // at the same hyper-parameters that an importance-sampling cell centres on).
        let source_warm = if final_warm.is_none() { WarmStart::from_handoff(ctx.source, pr.n, c) } else { None };
        let warm = final_warm.as_ref().or(source_warm.as_ref());
        let fit = match fit_variational(&pr, &self.params, warm, Some(ctx)) {
            Ok(fit) => fit,
            Err(_) if warm.is_some() => {
                warm_retries.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                fit_variational(&pr, &self.params, None, Some(ctx))?
            }
            Err(e) => return Err(e),
        };
        for (k, v) in fit.stats.bound_trace.iter().enumerate() {
            if hyper == HyperPolicy::Fixed {
                ctx.record(k, &[("log_zh", *v)]);
            }
        }
        diagnostics.jitter = (fit.stats.max_jitter > 0.0).then_some(fit.stats.max_jitter);
        diagnostics.number("sweeps", fit.stats.sweeps as f64).number("converged", f64::from(u8::from(fit.stats.converged)));
        if fit.stats.stopped_at_floor {
            diagnostics.note("stopped_at_floor", "b - g-bar stalled above b_tol with the bound flat");
        }
        diagnostics
            .number("max_b_minus_gbar", fit.stats.max_b_minus_gbar)
            .number("line_searches_s", fit.stats.s_line_searches as f64)
            .number("line_searches_b", fit.stats.b_line_searches as f64)
            .number("line_searches_v", fit.stats.v_line_searches as f64)
            .number("hyper_evaluations", hyper_evals as f64)
            .number("hyper_sweeps", search_sweeps.into_inner() as f64)
            .number("warm_start_retries", warm_retries.into_inner() as f64);
        let s2 = kernel.log_variance.exp();
        let n = problem.y.len() as f64;
        let mut extra = BTreeMap::new();
        for i in 0..c {
            extra.insert(format!("kc_var_{}", i + 1), pr.kc[(i, i)]);
            for j in 0..i {
                extra.insert(format!("kc_corr_{}{}", j + 1, i + 1), pr.kc[(i, j)] / (pr.kc[(i, i)] * pr.kc[(j, j)]).sqrt());
            }
        }
        extra.insert("log_zh".into(), fit.log_zh);
        extra.insert("neg_kl".into(), fit.neg_kl);
        extra.insert("thm10_bound".into(), n * theorem10_per_datum(c, s2));
        extra.insert("thm10_bound_probit".into(), n * theorem10_per_datum(c, s2 * std::f64::consts::PI.powi(2) / 6.0));
        extra.insert("sweeps".into(), fit.stats.sweeps as f64);
        extra.insert("hyper_evaluations".into(), hyper_evals as f64);
        let alpha = fit.alpha(&pr);
        let sum_alpha = (0..pr.n).map(|i| alpha[i * c..(i + 1) * c].iter().sum::<f64>().abs()).fold(0.0, f64::max);
        extra.insert("max_abs_sum_alpha".into(), sum_alpha);
        Ok(KlmnlModel {
            kernel,
            x_train: problem.x.clone(),
            n_present: problem.n_classes,
            predictive: self.params.predictive.clone(),
            t: fit.t_dense(),
            alpha,
            pr,
            fit,
            diagnostics,
            extra,
        })
    }
}
