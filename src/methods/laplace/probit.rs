//! Binary-probit Laplace approximation (`laplace` with `likelihood: probit`): GPML (Rasmussen
//! & Williams 2006) Alg. 3.1 (Newton mode, stable B form), 3.2 (predictive) and 5.1 (gradient
//! of the approximate log marginal likelihood), with one latent function f ~ GP(0, K) and
//! log p(t | f) = sum_i log Phi(t_i f_i), t_i = +1 for class index 1 and -1 for class 0 (as in
//! `gibbs_mnp`'s binary model). Panel (c) of Girolami & Rogers (2006) Figure 3; notes §5.2.
//!
//! W = -d^2 log Phi(t f)/df^2 lies in (0, 1) (`special::neg_d2_log_normal_cdf`, accurate in the
//! far tails), so B = I + W^1/2 K W^1/2 has eigenvalues in [1, 1 + lambda_max(K)] and factorises
//! without jitter; K itself is never inverted.
use super::{learn_kernel, newton_ascent, Laplace, LaplaceParams, SearchMode, WarmStart};
use crate::kernels::{Kernel, KernelSet};
use crate::linalg::{col, dot, matvec, to_vec, Chol};
use crate::methods::{Diagnostics, Evidence, FitContext, FitError, Fitted, HyperPolicy, Prediction, Problem};
use crate::results::EvidenceKind;
use crate::special::{d3_log_normal_cdf, d_log_normal_cdf, log_normal_cdf, neg_d2_log_normal_cdf, normal_cdf};
use faer::Mat;
use ndarray::Array2;
use rand_pcg::Pcg64;

/// The posterior mode for one kernel matrix and the curvature there.
#[derive(Clone)]
struct ProbitMode {
    /// f-hat, [n].
    f: Vec<f64>,
    /// a = K^{-1} f-hat from Newton, [n].
    a: Vec<f64>,
    /// d log p(t | f)/df at f-hat (= a at an exact mode), [n].
    grad: Vec<f64>,
    /// W^{1/2} at f-hat, [n].
    sW: Vec<f64>,
    /// Cholesky of B = I + W^1/2 K W^1/2 at f-hat.
    L: Chol,
    /// Psi(f-hat) = -1/2 f^T K^{-1} f + sum_i log Phi(t_i f_i).
    psi: f64,
    /// Psi(f-hat) - 1/2 log |B| (GPML eq. 3.32).
    log_evidence: f64,
    newton_iters: usize,
    /// As `Mode::newton_converged`.
    newton_converged: bool,
}

impl SearchMode for ProbitMode {
    fn newton_iters(&self) -> usize {
        self.newton_iters
    }
    fn newton_converged(&self) -> bool {
        self.newton_converged
    }
    /// a alone: no derivative of the mode is computed on this path.
    fn warm_start(&self) -> WarmStart {
        WarmStart { a: self.a.clone(), da_dtheta: None }
    }
}

/// t_i = +1 for class index 1, -1 for class 0.
fn signs(y: &[usize]) -> Vec<f64> {
    y.iter().map(|&c| if c == 1 { 1.0 } else { -1.0 }).collect()
}

/// Psi for f = K a.
fn objective(a: &[f64], f: &[f64], t: &[f64]) -> f64 {
    -0.5 * dot(a, f) + f.iter().zip(t).map(|(fi, ti)| log_normal_cdf(ti * fi)).sum::<f64>()
}

/// d log Phi(t f)/df = t r(t f) and W = -d^2 log Phi(t f)/df^2 (t^2 = 1), per datum.
fn grad_and_w(f: &[f64], t: &[f64]) -> (Vec<f64>, Vec<f64>) {
    f.iter().zip(t).map(|(fi, ti)| (ti * d_log_normal_cdf(ti * fi), neg_d2_log_normal_cdf(ti * fi))).unzip()
}

/// Cholesky of B = I + diag(sW) K diag(sW).
fn factor_b(K: &Mat<f64>, sW: &[f64]) -> Result<Chol, FitError> {
    let n = K.nrows();
    let B = Mat::from_fn(n, n, |i, j| (if i == j { 1.0 } else { 0.0 }) + sW[i] * K[(i, j)] * sW[j]);
    Ok(Chol::factor(B.as_ref(), "I + W^1/2 K W^1/2")?)
}

/// One full Newton step of the mode search from a (f = K a): the new a. As the multinomial
/// step (`newton::newton_step`), it solves for the change, (I + W K) da = grad - a (the
/// gradient of Psi w.r.t. f), through B: (I + W K)^{-1} r = r - W^1/2 L^T \ (L \ (W^1/2 K r)).
/// In exact arithmetic this is GPML's iterate a = (I + W K)^{-1} (W f + grad) (Alg. 3.1 lines
/// 6-7); the solve's error is relative to the step, not to the new a, which matters where
/// t f is far in the tails and the mode's a is large.
fn newton_step(K: &Mat<f64>, t: &[f64], a: &[f64], f: &[f64]) -> Result<Vec<f64>, FitError> {
    let n = K.nrows();
    let (g, W) = grad_and_w(f, t);
    let sW: Vec<f64> = W.iter().map(|w| w.sqrt()).collect();
    let L = factor_b(K, &sW)?;
    let r: Vec<f64> = (0..n).map(|i| g[i] - a[i]).collect();
    let kr = matvec(K.as_ref(), &r);
    let c = L.solve_l(col(&(0..n).map(|i| sW[i] * kr[i]).collect::<Vec<_>>()).as_ref());
    let v = to_vec(L.solve_lt(c.as_ref()).as_ref());
    Ok((0..n).map(|i| a[i] + r[i] - sW[i] * v[i]).collect())
}

/// Newton's method for the mode (GPML Alg. 3.1) through the shared damped ascent.
fn find_mode(K: &Mat<f64>, t: &[f64], params: &LaplaceParams, warm: Option<&[f64]>) -> Result<ProbitMode, FitError> {
    let n = K.nrows();
    let step = |a: &[f64], f: &[f64]| newton_step(K, t, a, f);
    let ascent = newton_ascent(n, |a| matvec(K.as_ref(), a), |a, f| objective(a, f, t), step, params, warm.as_slice())?;
    let (grad, W) = grad_and_w(&ascent.f, t);
    let sW: Vec<f64> = W.iter().map(|w| w.sqrt()).collect();
    let L = factor_b(K, &sW)?;
    let log_evidence = ascent.psi - 0.5 * L.log_det();
    Ok(ProbitMode {
        f: ascent.f,
        a: ascent.a,
        grad,
        sW,
        L,
        psi: ascent.psi,
        log_evidence,
        newton_iters: ascent.iters,
        newton_converged: ascent.converged,
    })
}

/// Gradient of log q(t | X, theta) w.r.t. the kernel's log-parameters (GPML Alg. 5.1):
/// explicit part 1/2 a^T dK a - 1/2 tr(Z dK), Z = (K + W^{-1})^{-1} = W^1/2 B^{-1} W^1/2, plus
/// the implicit part through f-hat, s2^T (I + K W)^{-1} dK grad with
/// s2_i = d/df_i [-1/2 log |B|] = -1/2 Sigma_ii dW_i/df_i = +1/2 Sigma_ii d^3 log p/df_i^3
/// (dW/df = -d^3 log p), Sigma = (K^{-1} + W)^{-1}, diag Sigma = diag K - diag(C^T C),
/// C = L \ (W^1/2 K).
fn log_evidence_grad(mode: &ProbitMode, K: &Mat<f64>, t: &[f64], dKs: &[Mat<f64>]) -> Vec<f64> {
    let n = K.nrows();
    let sW = &mode.sW;
    let R = mode.L.solve_l(Mat::from_fn(n, n, |i, j| if i == j { sW[i] } else { 0.0 }).as_ref());
    let Z = R.transpose() * &R;
    let C = mode.L.solve_l(Mat::from_fn(n, n, |i, j| sW[i] * K[(i, j)]).as_ref());
    let s2: Vec<f64> = (0..n)
        .map(|i| {
            let var = K[(i, i)] - (0..n).map(|r| C[(r, i)] * C[(r, i)]).sum::<f64>();
            0.5 * var * t[i] * d3_log_normal_cdf(t[i] * mode.f[i])
        })
        .collect();
    dKs.iter()
        .map(|dK| {
            let dka = matvec(dK.as_ref(), &mode.a);
            let mut tr = 0.0;
            for j in 0..n {
                for i in 0..n {
                    tr += Z[(i, j)] * dK[(i, j)];
                }
            }
            let s1 = 0.5 * dot(&mode.a, &dka) - 0.5 * tr;
            let b = matvec(dK.as_ref(), &mode.grad);
            let kzb = matvec(K.as_ref(), &matvec(Z.as_ref(), &b));
            let s3: Vec<f64> = (0..n).map(|i| b[i] - kzb[i]).collect();
            s1 + dot(&s2, &s3)
        })
        .collect()
}

/// log q(t | X, theta), its gradient w.r.t. the kernel's log-parameters, and the mode.
fn evidence_and_grad(
    kernel: &dyn Kernel,
    x: &Array2<f64>,
    t: &[f64],
    params: &LaplaceParams,
    warm: Option<&[f64]>,
) -> Result<(f64, Vec<f64>, ProbitMode), FitError> {
    let K = kernel.gram(x);
    let mode = find_mode(&K, t, params, warm)?;
    let dKs = kernel.gram_grads(x, &K);
    let grad = log_evidence_grad(&mode, &K, t, &dKs);
    Ok((mode.log_evidence, grad, mode))
}

impl Laplace {
    /// `Method::fit` for `likelihood: probit`, with the concrete model type.
    pub fn fit_probit(
        &self,
        problem: &Problem,
        kernel: &dyn Kernel,
        hyper: HyperPolicy,
        ctx: &mut FitContext,
    ) -> Result<LaplaceProbitModel, FitError> {
        problem.check("laplace")?;
        if problem.n_classes != 2 {
            return Err(FitError::Unsupported(format!(
                "laplace: settings.likelihood = probit is the binary model and needs exactly 2 classes, got {}",
                problem.n_classes
            )));
        }
        let t = signs(problem.y);
        let mut diagnostics = Diagnostics::default();
        let model = |kernel: Box<dyn Kernel>, mode: ProbitMode| -> Box<dyn Fitted> {
            Box::new(LaplaceProbitModel { kernel, x_train: problem.x.clone(), mode, diagnostics: Diagnostics::default() })
        };
        let kernel = match hyper {
            HyperPolicy::Fixed => kernel.clone_box(),
            HyperPolicy::Learn => learn_kernel(
                kernel,
                &self.params,
                ctx,
                &mut diagnostics,
                |k, warm| evidence_and_grad(k, problem.x, &t, &self.params, warm.first().copied()),
                model,
            )?,
        };
        ctx.check_deadline()?;
        let K = kernel.gram(problem.x);
        let mode = find_mode(&K, &t, &self.params, None)?;
        diagnostics.number("newton_iterations", mode.newton_iters as f64);
        diagnostics.number("newton_converged", if mode.newton_converged { 1.0 } else { 0.0 });
        diagnostics.note("model", "binary probit (one GP; class 1 is t = +1)");
        Ok(LaplaceProbitModel { kernel, x_train: problem.x.clone(), mode, diagnostics })
    }
}

/// A fitted binary-probit Laplace model.
pub struct LaplaceProbitModel {
    kernel: Box<dyn Kernel>,
    x_train: Array2<f64>,
    mode: ProbitMode,
    diagnostics: Diagnostics,
}

impl LaplaceProbitModel {
    /// Predictive latent means and variances of f* at test inputs, [m] each (GPML Alg. 3.2:
    /// mu* = k*^T grad log p(t | f-hat), var* = k** - v^T v with v = L \ (W^1/2 k*)).
    pub fn latent_predictive(&self, x: &Array2<f64>) -> (Vec<f64>, Vec<f64>) {
        let Ks = self.kernel.cross(&self.x_train, x); // [n, m]
        let kss = self.kernel.diag(x);
        let n = Ks.nrows();
        let mean = (0..x.nrows()).map(|j| (0..n).map(|i| Ks[(i, j)] * self.mode.grad[i]).sum()).collect();
        let V = self.mode.L.solve_l(Mat::from_fn(n, x.nrows(), |i, j| self.mode.sW[i] * Ks[(i, j)]).as_ref());
        let var = crate::linalg::reduced_variances(&kss, V.as_ref());
        (mean, var)
    }

    /// The posterior mode f-hat, [n].
    pub fn mode(&self) -> &[f64] {
        &self.mode.f
    }

    /// Psi(f-hat): the unnormalised log posterior at the mode.
    pub fn log_posterior_at_mode(&self) -> f64 {
        self.mode.psi
    }
}

impl Fitted for LaplaceProbitModel {
    /// Exact under the Gaussian approximation: E Phi(f*) = Phi(mu* / sqrt(1 + var*)) (GPML
    /// eq. 3.82); each class from its own tail so that neither probability is 1 - (nearly 1).
    fn predict(&self, x: &Array2<f64>, _rng: &mut Pcg64) -> Result<Prediction, FitError> {
        let (mean, var) = self.latent_predictive(x);
        let mut out = Array2::zeros((x.nrows(), 2));
        for (j, (m, v)) in mean.iter().zip(&var).enumerate() {
            let z = m / (1.0 + v).sqrt();
            out[(j, 0)] = normal_cdf(-z);
            out[(j, 1)] = normal_cdf(z);
        }
        Ok(Prediction::new(out))
    }

    fn evidence(&self) -> Option<Evidence> {
        Some(Evidence::new(self.mode.log_evidence, EvidenceKind::Approximation))
    }

    fn kernels(&self) -> KernelSet {
        KernelSet::shared(self.kernel.clone())
    }

    fn diagnostics(&self) -> Diagnostics {
        self.diagnostics.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::{KernelParams, LengthScale, SqExp};
    use crate::methods::laplace::LaplaceLikelihood;
    use rand::{RngExt, SeedableRng};
    use rand_distr::StandardNormal;

    fn probit_params() -> LaplaceParams {
        LaplaceParams { newton_tol: 1e-14, max_newton_iters: 200, likelihood: LaplaceLikelihood::Probit, ..Default::default() }
    }

    /// n points in 2-D; class 1 where x1 + 0.5 x2 > 0, with 15% of the labels flipped.
    fn tiny(n: usize, seed: u64) -> (Array2<f64>, Vec<usize>) {
        let mut rng = Pcg64::seed_from_u64(seed);
        let x = Array2::from_shape_fn((n, 2), |_| rng.sample::<f64, _>(StandardNormal));
        let y = (0..n)
            .map(|i| {
                let c = usize::from(x[(i, 0)] + 0.5 * x[(i, 1)] > 0.0);
                if rng.random::<f64>() < 0.15 {
                    1 - c
                } else {
                    c
                }
            })
            .collect();
        (x, y)
    }

    fn kernel(ard: bool, ls: f64, var: f64) -> SqExp {
        KernelParams { ard, lengthscale: LengthScale::One(ls), variance: var, learn_variance: true, ..Default::default() }.build(2).unwrap()
    }

    /// log |det A| by Gaussian elimination with partial pivoting (a dense oracle, no symmetry used).
    fn dense_log_abs_det(mut a: Vec<Vec<f64>>) -> f64 {
        let n = a.len();
        let mut logdet = 0.0;
        for c in 0..n {
            let p = (c..n).max_by(|&i, &j| a[i][c].abs().partial_cmp(&a[j][c].abs()).unwrap()).unwrap();
            a.swap(c, p);
            logdet += a[c][c].abs().ln();
            for i in c + 1..n {
                let m = a[i][c] / a[c][c];
                for j in c..n {
                    a[i][j] -= m * a[c][j];
                }
            }
        }
        logdet
    }

    /// The step solves for the change of a; in exact arithmetic it is GPML's iterate
    /// a = (I + W K)^{-1} (W f + grad), here against a dense LU solve of that system.
    #[test]
    fn the_newton_step_is_gpmls_iterate() {
        let (x, y) = tiny(14, 8);
        let K = kernel(false, 0.9, 3.0).gram(&x);
        let t = signs(&y);
        let mut rng = Pcg64::seed_from_u64(5);
        let a: Vec<f64> = (0..14).map(|_| 0.4 * rng.sample::<f64, _>(StandardNormal)).collect();
        let f = matvec(K.as_ref(), &a);
        let (g, W) = grad_and_w(&f, &t);
        let A = Mat::from_fn(14, 14, |i, j| if i == j { 1.0 } else { 0.0 } + W[i] * K[(i, j)]);
        let rhs = Mat::from_fn(14, 1, |i, _| W[i] * f[i] + g[i]);
        let dense = faer::linalg::solvers::Solve::solve(&A.partial_piv_lu(), &rhs);
        let a_new = newton_step(&K, &t, &a, &f).unwrap();
        for i in 0..14 {
            assert!((a_new[i] - dense[(i, 0)]).abs() <= 1e-10 * (1.0 + dense[(i, 0)].abs()), "{i}: {} against {}", a_new[i], dense[(i, 0)]);
        }
    }

    /// At signal variances where t f reaches far into the tails (W there is tiny and a large),
    /// the search still converges to a stationary point: K^{-1} f = grad, read as a = grad.
    #[test]
    fn newton_converges_at_large_signal_variances() {
        let (x, y) = tiny(30, 6);
        let t = signs(&y);
        for var in [1e4, 1e6, 1e8] {
            let K = kernel(false, 1.0, var).gram(&x);
            let mode = find_mode(&K, &t, &LaplaceParams { likelihood: LaplaceLikelihood::Probit, ..Default::default() }, None).unwrap();
            assert!(mode.newton_converged, "variance {var}: {} steps, not converged", mode.newton_iters);
            let g: Vec<f64> = (0..30).map(|i| t[i] * d_log_normal_cdf(t[i] * mode.f[i])).collect();
            for i in 0..30 {
                assert!(
                    (mode.a[i] - g[i]).abs() <= 1e-6 * (1.0 + g[i].abs()),
                    "variance {var}, {i}: a {} against grad {}",
                    mode.a[i],
                    g[i]
                );
            }
        }
    }

    #[test]
    fn the_mode_satisfies_f_equals_k_times_the_likelihood_gradient() {
        for (seed, ls, var) in [(1, 0.8, 1.0), (2, 1.5, 20.0), (3, 0.3, 4.0)] {
            let (x, y) = tiny(12, seed);
            let K = kernel(false, ls, var).gram(&x);
            let t = signs(&y);
            let mode = find_mode(&K, &t, &probit_params(), None).unwrap();
            // Stationarity of Psi: K^{-1} f = grad log p(t | f), i.e. f = K grad, with the
            // gradient recomputed from f-hat alone.
            let g: Vec<f64> = (0..12).map(|i| t[i] * d_log_normal_cdf(t[i] * mode.f[i])).collect();
            let kg = matvec(K.as_ref(), &g);
            for i in 0..12 {
                assert!((mode.f[i] - kg[i]).abs() < 1e-8 * (1.0 + mode.f[i].abs()), "seed {seed} i {i}: {} vs {}", mode.f[i], kg[i]);
            }
            assert!(mode.f.iter().any(|v| v.abs() > 0.1), "a non-trivial mode");
        }
    }

    /// The Laplace evidence -1/2 f^T K^{-1} f + sum log Phi(t f) - 1/2 log |I + K W| at f, given
    /// K^{-1} f: W by central differences of d log Phi, |I + W^1/2 K W^1/2| = |I + K W| by
    /// elimination on the non-symmetric I + K W.
    fn dense_log_evidence(K: &Mat<f64>, t: &[f64], f: &[f64], kinv_f: &[f64]) -> f64 {
        let n = f.len();
        let quad = dot(f, kinv_f);
        let loglik: f64 = (0..n).map(|i| log_normal_cdf(t[i] * f[i])).sum();
        let h = 1e-5;
        let W: Vec<f64> = (0..n).map(|i| -(d_log_normal_cdf(t[i] * f[i] + h) - d_log_normal_cdf(t[i] * f[i] - h)) / (2.0 * h)).collect();
        let ikw: Vec<Vec<f64>> = (0..n).map(|i| (0..n).map(|j| (if i == j { 1.0 } else { 0.0 }) + K[(i, j)] * W[j]).collect()).collect();
        -0.5 * quad + loglik - 0.5 * dense_log_abs_det(ikw)
    }

    #[test]
    fn log_evidence_matches_a_dense_independent_computation() {
        let (x, y) = tiny(10, 4);
        let t = signs(&y);
        for (ls, var) in [(0.7, 2.0), (1.2, 9.0)] {
            let K = kernel(false, ls, var).gram(&x);
            let mode = find_mode(&K, &t, &probit_params(), None).unwrap();
            // K^{-1} f through a Cholesky of K itself (the method never solves with K).
            let kinv_f = Chol::factor(K.as_ref(), "K").unwrap().solve_vec(&mode.f);
            let want = dense_log_evidence(&K, &t, &mode.f, &kinv_f);
            assert!((mode.log_evidence - want).abs() < 1e-7, "{} vs {want}", mode.log_evidence);
        }
    }

    #[test]
    fn evidence_gradient_matches_finite_differences() {
        let (x, y) = tiny(10, 5);
        let t = signs(&y);
        let params = probit_params();
        for (ard, ls, var) in [(false, 0.8, 2.0), (true, 1.3, 5.0)] {
            let mut kern = kernel(ard, ls, var);
            if ard {
                kern.log_lengthscales[1] += 0.4;
            }
            let (_, grad, _) = evidence_and_grad(&kern, &x, &t, &params, None).unwrap();
            let p0 = kern.log_params();
            for j in 0..p0.len() {
                let h = 1e-5;
                let mut pp = p0.clone();
                pp[j] += h;
                let mut pm = p0.clone();
                pm[j] -= h;
                let vp = evidence_and_grad(&kern.with_log_params(&pp), &x, &t, &params, None).unwrap().0;
                let vm = evidence_and_grad(&kern.with_log_params(&pm), &x, &t, &params, None).unwrap().0;
                let fd = (vp - vm) / (2.0 * h);
                assert!((fd - grad[j]).abs() < 1e-6 * (1.0 + fd.abs()), "ard={ard} param {j}: analytic {} vs fd {fd}", grad[j]);
            }
        }
    }

    #[test]
    fn predictions_match_quadrature_over_the_dense_latent_predictive() {
        let (x, y) = tiny(10, 6);
        let kern = kernel(false, 0.9, 3.0);
        let method = LaplaceParams { likelihood: LaplaceLikelihood::Probit, newton_tol: 1e-14, ..Default::default() }.check().unwrap();
        let mut rng = Pcg64::seed_from_u64(1);
        let mut ctx = FitContext::new(&mut rng, None);
        let model = method.fit_probit(&Problem { x: &x, y: &y, n_classes: 2 }, &kern, HyperPolicy::Fixed, &mut ctx).unwrap();
        let xt = ndarray::array![[0.1, 0.2], [1.0, -1.0], [-2.0, 0.5], [4.0, 4.0]];
        let p = model.predict_proba(&xt, &mut Pcg64::seed_from_u64(2)).unwrap();

        // Dense: q(f) = N(f-hat, (K^{-1} + W)^{-1}); f* | f ~ N(k*^T K^{-1} f, k** - k*^T K^{-1} k*),
        // so mu* = k*^T K^{-1} f-hat and var* = k** - k*^T K^{-1} k* + k*^T K^{-1} S K^{-1} k*.
        let n = x.nrows();
        let K = kern.gram(&x);
        let Kchol = Chol::factor(K.as_ref(), "K").unwrap();
        let Kinv = Kchol.solve(Mat::<f64>::identity(n, n).as_ref());
        let t = signs(&y);
        let mut A = Kinv.clone();
        for i in 0..n {
            A[(i, i)] += neg_d2_log_normal_cdf(t[i] * model.mode.f[i]);
        }
        let S = Chol::factor(A.as_ref(), "K^-1 + W").unwrap().solve(Mat::<f64>::identity(n, n).as_ref());
        let Ks = kern.cross(&x, &xt);
        for j in 0..xt.nrows() {
            let ks: Vec<f64> = (0..n).map(|i| Ks[(i, j)]).collect();
            let kik = Kchol.solve_vec(&ks);
            let mu = dot(&kik, &model.mode.f);
            let var = 3.0 - dot(&ks, &kik) + dot(&kik, &matvec(S.as_ref(), &kik));
            // E Phi(f*) by the trapezoid rule over +-12 sd (error far below 1e-10).
            let sd = var.sqrt();
            let m = 4000;
            let h = 24.0 * sd / m as f64;
            let mut acc = 0.0;
            for k in 0..=m {
                let f = mu - 12.0 * sd + k as f64 * h;
                let w = if k == 0 || k == m { 0.5 } else { 1.0 };
                acc += w * h * normal_cdf(f) * (-0.5 * ((f - mu) / sd).powi(2)).exp() / (sd * (2.0 * std::f64::consts::PI).sqrt());
            }
            assert!((p[(j, 1)] - acc).abs() < 1e-8, "point {j}: {} vs quadrature {acc}", p[(j, 1)]);
            assert!((p[(j, 0)] + p[(j, 1)] - 1.0).abs() < 1e-14);
        }
        // The far test point reverts to the prior: mean 0, probability 1/2.
        assert!((p[(3, 1)] - 0.5).abs() < 1e-6);
    }

    #[test]
    fn a_huge_signal_variance_keeps_newton_stable() {
        // Signal variance 1e6 and a smooth kernel: K is numerically singular and the undamped
        // Newton steps overshoot; at the mode t f reaches ~60, where W underflows to 0. The mode
        // condition must still hold, and B (eigenvalues >= 1) factorises without jitter.
        let x = Array2::from_shape_fn((16, 1), |(i, _)| -1.0 + 2.0 * i as f64 / 15.0);
        let mut y: Vec<usize> = (0..16).map(|i| usize::from(i >= 8)).collect();
        y[3] = 1;
        let K = KernelParams { ard: false, lengthscale: LengthScale::One(0.5), variance: 1e6, learn_variance: false, ..Default::default() }
            .build(1)
            .unwrap()
            .gram(&x);
        let t = signs(&y);
        let mode = find_mode(&K, &t, &probit_params(), None).unwrap();
        assert!(mode.newton_iters < 200, "Newton did not converge");
        let (g, W) = grad_and_w(&mode.f, &t);
        assert!(W.iter().all(|w| *w >= 0.0 && *w < 1.0), "{W:?}");
        let kg = matvec(K.as_ref(), &g);
        let scale = mode.f.iter().fold(1.0f64, |m, v| m.max(v.abs()));
        for i in 0..16 {
            assert!((mode.f[i] - kg[i]).abs() < 1e-8 * scale, "i {i}: {} vs {}", mode.f[i], kg[i]);
        }
        assert!(mode.L.jitter() == 0.0);
        // The evidence by the dense formula, K^{-1} f read as the likelihood gradient g (the mode
        // condition f = K g just checked: K itself is numerically singular, no solve with it
        // means anything).
        let want = dense_log_evidence(&K, &t, &mode.f, &g);
        // They agree to about 3e-10 here.
        assert!((mode.log_evidence - want).abs() < 1e-7, "{} vs {want}", mode.log_evidence);
    }

    #[test]
    fn learning_hyperparameters_raises_the_evidence() {
        let (x, y) = tiny(16, 7);
        let problem = Problem { x: &x, y: &y, n_classes: 2 };
        let start = kernel(true, 3.0, 0.5);
        let method = LaplaceParams { likelihood: LaplaceLikelihood::Probit, ..Default::default() }.check().unwrap();
        let mut rng = Pcg64::seed_from_u64(1);
        let mut ctx = FitContext::new(&mut rng, None);
        let start = KernelSet::shared_se(&start);
        let fixed = crate::methods::Method::fit(&method, &problem, &start, HyperPolicy::Fixed, &mut ctx).unwrap();
        let learned = crate::methods::Method::fit(&method, &problem, &start, HyperPolicy::Learn, &mut ctx).unwrap();
        assert!(learned.evidence().unwrap().value > fixed.evidence().unwrap().value + 1e-3);
        assert!(!ctx.trace().is_empty());
        assert_eq!(learned.predict_proba(&x, &mut Pcg64::seed_from_u64(0)).unwrap().ncols(), 2);
    }

    #[test]
    fn probit_needs_exactly_two_classes() {
        let (x, _) = tiny(6, 8);
        let y = vec![0, 1, 2, 0, 1, 2];
        let method = LaplaceParams { likelihood: LaplaceLikelihood::Probit, ..Default::default() }.check().unwrap();
        let mut rng = Pcg64::seed_from_u64(1);
        let mut ctx = FitContext::new(&mut rng, None);
        let e = method.fit_probit(&Problem { x: &x, y: &y, n_classes: 3 }, &kernel(false, 1.0, 1.0), HyperPolicy::Fixed, &mut ctx);
        assert!(matches!(e, Err(FitError::Unsupported(m)) if m.contains("exactly 2 classes")));
    }
}
