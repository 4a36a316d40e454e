//! The two-block Gibbs sweeps (cone draws of y, Gaussian draws of m in C's eigenbasis), the
//! probit likelihood of a draw, and the prior-sampling evidence estimate.
use super::*;

// ---------------------------------------------------------------------------------------------
// The likelihood and predictive probabilities of the probit model.

/// log P(t | m) for one datum: multinomial probit (K-vector m) or binary probit (m = [f]).
pub(super) fn log_lik_point(m: &[f64], t: usize, binary: bool) -> f64 {
    if binary {
        log_normal_cdf(if t == 1 { m[0] } else { -m[0] })
    } else {
        crate::likelihoods::probit::log_probit_class_prob_fast(m, t)
    }
}

/// Log class probabilities for latent means `mu` (K, or 1 in the binary model) and a
/// predictive variance `var` shared by the classes (shared kernel): the §3 formula with
/// v_k = v for all k is P(t = k | mu / v) with v = sqrt(1 + var). Each class's value comes
/// from its own tail (never 1 - p: Phi rounds to 1 from about 8.3, which would make the other
/// class's probability exactly 0 where its log is about -35).
pub(super) fn log_predictive_point(mu: &[f64], var: f64, binary: bool, out: &mut [f64]) {
    let v = (1.0 + var).sqrt();
    if binary {
        out[0] = log_normal_cdf(-mu[0] / v);
        out[1] = log_normal_cdf(mu[0] / v);
    } else {
        let scaled: Vec<f64> = mu.iter().map(|x| x / v).collect();
        for (k, o) in out.iter_mut().enumerate() {
            *o = crate::likelihoods::probit::log_probit_class_prob_fast(&scaled, k);
        }
        // The cones partition R^K: the exact values sum to one.
        let total = log_sum_exp(out);
        out.iter_mut().for_each(|o| *o -= total);
    }
}

// ---------------------------------------------------------------------------------------------
// The sampler.

/// The eigendecomposition C = U diag(lambda) U^T of the training kernel matrix.
pub(super) struct Eigen {
    pub(super) U: Mat<f64>,
    /// Eigenvalues clipped at 0 (rounding makes the smallest slightly negative).
    pub(super) lambda: Vec<f64>,
    pub(super) n_clipped: usize,
}

pub(super) fn eigen(C: &Mat<f64>) -> Result<Eigen, FitError> {
    let evd = C.self_adjoint_eigen(Side::Lower).map_err(|e| FitError::Numerical(format!("eigendecomposition of C failed: {e:?}")))?;
    let s = evd.S().column_vector();
    let n = C.nrows();
    let mut n_clipped = 0;
    let lambda = (0..n)
        .map(|i| {
            let l = s[i];
            if l < 0.0 {
                n_clipped += 1;
                0.0
            } else {
                l
            }
        })
        .collect();
    if (0..n).any(|i| !s[i].is_finite()) {
        return Err(FitError::Numerical("kernel matrix has non-finite eigenvalues".into()));
    }
    Ok(Eigen { U: evd.U().to_owned(), lambda, n_clipped })
}

impl GibbsMnp {
    /// `Method::fit` with the concrete model type.
    pub fn fit_model(
        &self,
        problem: &Problem,
        kernel: &SqExp,
        hyper: HyperPolicy,
        ctx: &mut FitContext,
    ) -> Result<GibbsMnpModel, FitError> {
        if hyper == HyperPolicy::Learn {
            return Err(FitError::Unsupported(
                "gibbs_mnp samples with fixed hyper-parameters only (G&R 2006 App. D); use `hyper: fixed` or take them from another cell with `hyper: {from: <entry>}`".into(),
            ));
        }
        problem.check("gibbs_mnp")?;
        let p = &self.params;
        let n = problem.x.nrows();
        let n_classes = problem.n_classes;
        if n_classes < 2 {
            return Err(FitError::Unsupported(format!("gibbs_mnp needs at least 2 classes, got {n_classes}")));
        }
        let binary = n_classes == 2 && p.binary_model == BinaryModel::Probit;
        // Number of latent functions.
        let K = if binary { 1 } else { n_classes };
        let C = kernel.gram(problem.x);
        let eig = eigen(&C)?;
        let U = &eig.U;
        let s: Vec<f64> = eig.lambda.iter().map(|l| l / (1.0 + l)).collect();
        let sqrt_s: Vec<f64> = s.iter().map(|v| v.sqrt()).collect();

        // State: M and Y, [n, K] (column k = latent function k).
        let mut M = Mat::<f64>::zeros(n, K);
        let mut Y = Mat::<f64>::zeros(n, K);
        let mut B = Mat::<f64>::zeros(n, K);
        let mut m_row = vec![0.0; K];
        let mut y_row = vec![0.0; K];
        let total = p.burn_in + p.samples * p.thin;
        let mut kept_B: Vec<Mat<f64>> = Vec::with_capacity(p.samples / p.predict_thin + 1);
        let mut n_kept = 0usize;
        let mut m_sum = Mat::<f64>::zeros(n, K);
        let mut proposals = 0usize;
        let mut kept_loglik = Vec::new();
        for sweep in 1..=total {
            ctx.check_deadline()?;
            // Block 1: y_n | m_n.
            for i in 0..n {
                let t = problem.y[i];
                if binary {
                    // y ~ N(m, 1) truncated to y > 0 (t = 1) or y < 0 (t = 0).
                    let mi = M[(i, 0)];
                    Y[(i, 0)] = if t == 1 { mi + sample_std_normal_above(-mi, ctx.rng) } else { mi - sample_std_normal_above(mi, ctx.rng) };
                    proposals += 1;
                } else {
                    for k in 0..K {
                        m_row[k] = M[(i, k)];
                    }
                    proposals += sample_cone(&m_row, t, &mut y_row, ctx.rng);
                    for k in 0..K {
                        Y[(i, k)] = y_row[k];
                    }
                }
            }
            // Block 2: m_k | y_k ~ N(Sigma y_k, Sigma) = U (s o U^T y_k + sqrt(s) o z).
            faer::linalg::matmul::matmul(B.as_mut(), faer::Accum::Replace, U.transpose(), Y.as_ref(), 1.0, faer::Par::Seq);
            let keep = sweep > p.burn_in && (sweep - p.burn_in).is_multiple_of(p.thin);
            if keep {
                n_kept += 1;
                if (n_kept - 1).is_multiple_of(p.predict_thin) {
                    kept_B.push(B.clone());
                }
            }
            for k in 0..K {
                for r in 0..n {
                    let z: f64 = ctx.rng.sample(StandardNormal);
                    B[(r, k)] = s[r] * B[(r, k)] + sqrt_s[r] * z;
                }
            }
            faer::linalg::matmul::matmul(M.as_mut(), faer::Accum::Replace, U.as_ref(), B.as_ref(), 1.0, faer::Par::Seq);
            if (0..K).any(|k| (0..n).any(|r| !M[(r, k)].is_finite())) {
                return Err(FitError::Numerical(format!("gibbs_mnp: non-finite latent draw at sweep {sweep}")));
            }
            if keep {
                m_sum += &M;
            }
            // The log-likelihood every 10 kept sweeps feeds the autocorrelation diagnostic;
            // the trace gets it every `trace_every` sweeps.
            let for_autocorr = keep && n_kept.is_multiple_of(10);
            let for_trace = p.trace_every > 0 && sweep.is_multiple_of(p.trace_every);
            if for_autocorr || for_trace {
                let ll = log_lik(&M, problem.y, binary);
                if for_autocorr {
                    kept_loglik.push(ll);
                }
                if for_trace {
                    ctx.record(sweep, &[("log_lik", ll)]);
                }
            }
        }

        // Marginal likelihood: prior draws m_k = U sqrt(lambda) o z (exact for the clipped C).
        let evidence = if p.evidence_samples >= 2 {
            let sqrt_l: Vec<f64> = eig.lambda.iter().map(|l| l.sqrt()).collect();
            let mut Z = Mat::<f64>::zeros(n, K);
            let mut Mp = Mat::<f64>::zeros(n, K);
            let mut ll = Vec::with_capacity(p.evidence_samples);
            for _ in 0..p.evidence_samples {
                ctx.check_deadline()?;
                for k in 0..K {
                    for r in 0..n {
                        let z: f64 = ctx.rng.sample(StandardNormal);
                        Z[(r, k)] = sqrt_l[r] * z;
                    }
                }
                faer::linalg::matmul::matmul(Mp.as_mut(), faer::Accum::Replace, U.as_ref(), Z.as_ref(), 1.0, faer::Par::Seq);
                ll.push(log_lik(&Mp, problem.y, binary));
            }
            Some(EvidenceEstimate::from_log_weights(&ll))
        } else {
            None
        };

        let m_mean = m_sum * faer::Scale(1.0 / n_kept as f64);
        // Numbers only (no wall-clock times: a record must be the same bits on every run).
        let mut diagnostics =
            Diagnostics { iterations: Some(total as u64), stop_reason: Some(StopReason::MaxIterations), ..Default::default() };
        diagnostics
            .number("burn_in", p.burn_in as f64)
            .number("kept_samples", n_kept as f64)
            .number("predictive_draws", kept_B.len() as f64)
            .number("cone_proposals_per_draw", proposals as f64 / (total * n).max(1) as f64)
            .number("eigenvalues_clipped", eig.n_clipped as f64)
            .note("model", if binary { "binary probit (one GP)".to_string() } else { format!("multinomial probit ({K} GPs)") });
        if let Some(tau) = integrated_autocorr_time(&kept_loglik) {
            diagnostics.number("log_lik_autocorr_time_x10", tau);
        }
        if let Some(e) = &evidence {
            diagnostics.number("evidence_ess", e.ess).number("evidence_samples", p.evidence_samples as f64);
        }
        let inv1p: Vec<f64> = eig.lambda.iter().map(|l| 1.0 / (1.0 + l)).collect();
        Ok(GibbsMnpModel {
            kernel: kernel.clone(),
            x_train: problem.x.clone(),
            n_classes,
            binary,
            U: eig.U,
            inv1p,
            kept_B,
            m_mean,
            evidence,
            diagnostics,
        })
    }
}

/// sum_n log P(t_n | m_n) for latents M [n, K].
pub(super) fn log_lik(M: &Mat<f64>, y: &[usize], binary: bool) -> f64 {
    let K = M.ncols();
    let mut row = vec![0.0; K];
    (0..M.nrows())
        .map(|i| {
            for (k, r) in row.iter_mut().enumerate() {
                *r = M[(i, k)];
            }
            log_lik_point(&row, y[i], binary)
        })
        .sum()
}
