//! The binary special case of VB-MNP (`vbmnp` with `binary_model: probit`; Girolami & Rogers
//! 2006 §4.4.1, eq. 4.9 and footnote 6; notes §2.10): one GP f ~ GP(0, C), y_n = f_n + eps_n
//! with eps_n ~ N(0, 1), t_n = sign(y_n), t = +1 for class index 1. The mean field Q(f) Q(y):
//!   Q(f) = N(m̃, Σ),  Σ = C (I + C)^{-1},  m̃ = Σ ỹ                       (eq. 4.9);
//!   Q(y_n) = N(m̃_n, 1) truncated to t_n y_n > 0,  ỹ_n = m̃_n + t_n phi(m̃_n) / Phi(t_n m̃_n).
//!
//! Lower bound [DERIVED]. With Q(y) optimal for the current m̃, E log p(y_n | f_n) + H[Q(y_n)]
//! = log Phi(t_n m̃_n) - Σ_nn / 2, and E log p(f) + H[Q(f)] = -1/2 m̃ᵀC⁻¹m̃ - 1/2 tr(C⁻¹Σ) +
//! N/2 - 1/2 log|C| + 1/2 log|Σ|. With tr Σ + tr C⁻¹Σ = N and log|Σ| - log|C| = -log|I+C|:
//!   L = sum_n log Phi(t_n m̃_n) - 1/2 m̃ᵀC⁻¹m̃ - 1/2 log|I + C|,
//! the exact ELBO (the printed App. C constant -(K-1)N/2 ln 2 pi is zero for one latent
//! function, so `bound_paper` = `elbo`). Each step maximises L over Q(f), then over Q(y), so L
//! never decreases at a fixed kernel. As in the multinomial code, m̃ᵀC⁻¹m̃ = m̃ᵀ(I+C)⁻¹ỹ_prev.
//!
//! Predictive: P(t* = +1) = Phi(mu* / sqrt(1 + var*)), mu* = c*ᵀ(I + C)⁻¹ỹ,
//! var* = c** - c*ᵀ(I + C)⁻¹c*. For K = 2 the two-GP model is this one on (m_2 - m_1)/sqrt 2
//! with the same C, plus a sum direction the data never see (tests below).
use super::{chol_i_plus, phi_from_kernel, VbEvidence, VbmnpParams};
use crate::kernels::KernelSet;
use crate::kernels::SqExp;
use crate::linalg::{dot, Chol};
use crate::methods::{Diagnostics, Evidence, FitContext, FitError, Fitted, HyperPolicy, Prediction, Problem, StopReason};
use crate::results::EvidenceKind;
use crate::special::{d_log_normal_cdf, log_normal_cdf, normal_cdf};
use ndarray::Array2;
use rand::RngExt;
use rand_distr::StandardNormal;
use rand_pcg::Pcg64;
use std::collections::BTreeMap;

/// Eq. 4.9 from ỹ_prev: m̃ = ỹ_prev - (I+C)⁻¹ỹ_prev, then footnote 6's ỹ at m̃ and the bound L
/// at (m̃, the optimal Q(y), C). Returns (m̃, ỹ, L).
fn binary_step(chol: &Chol, yt_prev: &[f64], t: &[f64]) -> (Vec<f64>, Vec<f64>, f64) {
    let b = chol.solve_vec(yt_prev);
    let m: Vec<f64> = yt_prev.iter().zip(&b).map(|(y, b)| y - b).collect();
    let yt = m.iter().zip(t).map(|(mi, ti)| mi + ti * d_log_normal_cdf(ti * mi)).collect();
    let loglik: f64 = m.iter().zip(t).map(|(mi, ti)| log_normal_cdf(ti * mi)).sum();
    let elbo = loglik - 0.5 * dot(&m, &b) - 0.5 * chol.log_det();
    (m, yt, elbo)
}

/// `Vbmnp::fit` for `binary_model: probit`.
pub(super) fn fit(
    p: &VbmnpParams,
    problem: &Problem,
    kernel: &SqExp,
    hyper: HyperPolicy,
    ctx: &mut FitContext,
) -> Result<VbmnpBinaryModel, FitError> {
    let (x, y) = (problem.x, problem.y);
    let n = x.nrows();
    assert_eq!(n, y.len());
    if problem.n_classes != 2 {
        return Err(FitError::Unsupported(format!(
            "vbmnp: settings.binary_model = probit is the one-GP binary model and needs exactly 2 classes, got {}",
            problem.n_classes
        )));
    }
    if hyper != HyperPolicy::Fixed {
        return Err(FitError::Unsupported(
            "vbmnp: settings.binary_model = probit supports hyper: fixed only (the importance sampler for phi is the multinomial model's)"
                .into(),
        ));
    }
    // Settings of the multinomial code that have no meaning here are refused, not ignored.
    if p.accelerate || p.evidence != VbEvidence::Paper {
        return Err(FitError::Unsupported(
            "vbmnp: settings.accelerate and settings.evidence apply to the multinomial model only (the binary model's bound is its exact ELBO)".into(),
        ));
    }
    let t: Vec<f64> = y.iter().map(|&c| if c == 1 { 1.0 } else { -1.0 }).collect();
    let chol = chol_i_plus(&kernel.gram(x))?;
    // §6.1: random start, as the multinomial model.
    let mut yt: Vec<f64> = (0..n).map(|_| ctx.rng.sample::<f64, _>(StandardNormal)).collect();
    let (mut elbo, mut prev) = (f64::NEG_INFINITY, None::<f64>);
    let (mut iters, mut converged) = (0, false);
    for it in 1..=p.max_iters {
        ctx.check_deadline()?;
        iters = it;
        let (m, yn, e) = binary_step(&chol, &yt, &t);
        yt = yn;
        elbo = e;
        let train_err = m.iter().zip(&t).filter(|(mi, ti)| *mi * *ti <= 0.0).count() as f64 / n as f64;
        ctx.record(it, &[("bound", elbo), ("elbo", elbo), ("train_error", train_err)]);
        // The multinomial model's stopping rule (relative change of the bound).
        if let Some(prev) = prev {
            if p.tol > 0.0 && (elbo - prev).abs() < p.tol * prev.abs() {
                converged = true;
                break;
            }
        }
        prev = Some(elbo);
    }
    let b = chol.solve_vec(&yt);
    Ok(VbmnpBinaryModel { x: x.clone(), kernel: kernel.clone(), chol, b, elbo, iters, converged })
}

/// The fitted binary model: the final ỹ through b = (I + C)⁻¹ỹ.
pub struct VbmnpBinaryModel {
    x: Array2<f64>,
    kernel: SqExp,
    /// Cholesky of I + C.
    chol: Chol,
    b: Vec<f64>,
    elbo: f64,
    iters: usize,
    converged: bool,
}

impl VbmnpBinaryModel {
    /// Predictive latent means and variances of f* at test inputs, [m] each.
    pub fn predictive_latents(&self, xs: &Array2<f64>) -> (Vec<f64>, Vec<f64>) {
        let Kx = self.kernel.cross(&self.x, xs); // [n, m]
        let kss = self.kernel.diag(xs);
        let n = Kx.nrows();
        let mu = (0..xs.nrows()).map(|j| (0..n).map(|i| Kx[(i, j)] * self.b[i]).sum()).collect();
        let V = self.chol.solve_l(Kx.as_ref());
        let var = crate::linalg::reduced_variances(&kss, V.as_ref());
        (mu, var)
    }

    pub fn elbo(&self) -> f64 {
        self.elbo
    }
}

impl Fitted for VbmnpBinaryModel {
    /// Each class from its own tail, so neither probability is 1 - (nearly 1).
    fn predict(&self, xs: &Array2<f64>, _rng: &mut Pcg64) -> Result<Prediction, FitError> {
        let (mu, var) = self.predictive_latents(xs);
        let mut out = Array2::zeros((xs.nrows(), 2));
        for (j, (m, v)) in mu.iter().zip(&var).enumerate() {
            let z = m / (1.0 + v).sqrt();
            out[[j, 0]] = normal_cdf(-z);
            out[[j, 1]] = normal_cdf(z);
        }
        Ok(Prediction::new(out))
    }

    fn evidence(&self) -> Option<Evidence> {
        Some(Evidence::new(self.elbo, EvidenceKind::LowerBound))
    }

    fn kernels(&self) -> KernelSet {
        KernelSet::shared(Box::new(self.kernel.clone()))
    }

    fn diagnostics(&self) -> Diagnostics {
        let mut d = Diagnostics { iterations: Some(self.iters as u64), ..Default::default() };
        d.stop_reason = Some(if self.converged { StopReason::Converged } else { StopReason::MaxIterations });
        d.note("model", "binary probit (one GP, eq. 4.9; class 1 is t = +1)").note("phi", format!("{:?}", phi_from_kernel(&self.kernel)));
        d
    }

    fn extra_metrics(&self) -> BTreeMap<String, f64> {
        let mut m = BTreeMap::new();
        m.insert("elbo".into(), self.elbo);
        m.insert("bound_paper".into(), self.elbo);
        m.insert("iterations".into(), self.iters as f64);
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::likelihoods::probit::BinaryModel;
    use crate::methods::Method;
    use rand::SeedableRng;
    use std::f64::consts::PI;

    /// s2 exp(-phi |x - x'|^2) (G&R's form) as an SqExp.
    fn iso_kernel(phi: f64, s2: f64) -> SqExp {
        SqExp { log_variance: s2.ln(), log_lengthscales: vec![-0.5 * (2.0 * phi).ln()], learn_variance: false }
    }

    fn params(binary: bool, max_iters: usize) -> VbmnpParams {
        VbmnpParams {
            tol: 0.0,
            max_iters,
            binary_model: if binary { BinaryModel::Probit } else { BinaryModel::Multinomial },
            ..Default::default()
        }
    }

    fn fit_any(
        x: &Array2<f64>,
        y: &[usize],
        kernel: &SqExp,
        p: VbmnpParams,
        seed: u64,
    ) -> (Box<dyn Fitted>, Vec<crate::results::TracePoint>) {
        let mut rng = Pcg64::seed_from_u64(seed);
        let mut ctx = FitContext::new(&mut rng, None);
        let m =
            p.check().unwrap().fit(&Problem { x, y, n_classes: 2 }, &KernelSet::shared_se(kernel), HyperPolicy::Fixed, &mut ctx).unwrap();
        (m, ctx.trace())
    }

    /// n points in 2-D, class 1 inside the unit circle, 10% of labels flipped.
    fn toy(n: usize, seed: u64) -> (Array2<f64>, Vec<usize>) {
        let mut rng = Pcg64::seed_from_u64(seed);
        let x = Array2::from_shape_fn((n, 2), |_| 1.2 * rng.sample::<f64, _>(StandardNormal));
        let y = (0..n)
            .map(|i| {
                let c = usize::from(x[[i, 0]].powi(2) + x[[i, 1]].powi(2) < 1.0);
                if rng.random::<f64>() < 0.1 {
                    1 - c
                } else {
                    c
                }
            })
            .collect();
        (x, y)
    }

    #[test]
    fn bound_never_decreases_on_a_fixed_kernel() {
        for (seed, phi, s2) in [(1, 0.5, 1.0), (2, 0.1, 20.0), (3, 3.0, 1.0), (4, 1.0, 150.0)] {
            let (x, y) = toy(30, seed);
            let (_, trace) = fit_any(&x, &y, &iso_kernel(phi, s2), params(true, 60), seed);
            let elbo: Vec<f64> = trace.iter().filter(|t| t.name == "elbo").map(|t| t.value).collect();
            assert_eq!(elbo.len(), 60);
            for w in elbo.windows(2) {
                assert!(w[1] >= w[0] - 1e-12 * w[0].abs(), "seed {seed}: {} -> {}", w[0], w[1]);
            }
            assert!(elbo[59] > elbo[0] + 1e-3, "the bound should move from a random start");
        }
    }

    #[test]
    fn two_class_multinomial_vb_is_the_binary_model_on_the_difference() {
        // With K = 2 and one C, the difference (m_2 - m_1)/sqrt 2 has prior C and unit noise: the
        // binary model. The sum direction sees no data; its Q stays N(0, Σ), which costs
        // exactly -1/2 log|I + C| of bound. So at the fixed points ELBO_K2 = L_binary -
        // 1/2 log|I + C| and the predictive probabilities agree (different random starts).
        let (x, y) = toy(15, 9);
        let kernel = iso_kernel(0.8, 2.0);
        let (k2, _) = fit_any(&x, &y, &kernel, params(false, 3000), 3);
        let (bin, _) = fit_any(&x, &y, &kernel, params(true, 3000), 4);
        let half_logdet = 0.5 * chol_i_plus(&kernel.gram(&x)).unwrap().log_det();
        let eb = bin.evidence().unwrap().value;
        let elbo2 = k2.extra_metrics()["elbo"];
        assert!((elbo2 - (eb - half_logdet)).abs() < 1e-8, "K = 2: {elbo2} vs binary {eb} - {half_logdet}");
        let xs = Array2::from_shape_fn((7, 2), |(i, j)| (i as f64 - 3.0) * 0.5 + j as f64 * 0.4);
        let p2 = k2.predict_proba(&xs, &mut Pcg64::seed_from_u64(0)).unwrap();
        let pb = bin.predict_proba(&xs, &mut Pcg64::seed_from_u64(0)).unwrap();
        for j in 0..7 {
            for c in 0..2 {
                assert!((p2[[j, c]] - pb[[j, c]]).abs() < 1e-8, "point {j} class {c}: K = 2 {} vs binary {}", p2[[j, c]], pb[[j, c]]);
            }
            assert!((pb[[j, 0]] + pb[[j, 1]] - 1.0).abs() < 1e-14);
        }
    }

    /// The exact posterior of one datum with class 1 (t = +1) at prior variance s, by the
    /// trapezoid rule on a fine grid: (log p(t), E[f | t], P(t* = +1 | t) at the same input).
    fn one_datum_exact(s: f64) -> (f64, f64, f64) {
        let sd = s.sqrt();
        let (m, h) = (20_000, 24.0 * sd / 20_000.0);
        let (mut z, mut z1, mut zp) = (0.0, 0.0, 0.0);
        for k in 0..=m {
            let f = -12.0 * sd + k as f64 * h;
            let w = if k == 0 || k == m { 0.5 } else { 1.0 } * h * (-0.5 * f * f / s).exp() / (sd * (2.0 * PI).sqrt());
            let lik = normal_cdf(f);
            z += w * lik;
            z1 += w * lik * f;
            zp += w * lik * lik;
        }
        (z.ln(), z1 / z, zp / z)
    }

    #[test]
    fn one_datum_agrees_with_the_exact_posterior_as_mean_field_theory_predicts() {
        let x = Array2::zeros((1, 1));
        let y = [1usize];
        let fit_one = |s: f64| {
            let kernel = SqExp { log_variance: s.ln(), log_lengthscales: vec![0.0], learn_variance: false };
            let mut rng = Pcg64::seed_from_u64(1);
            let mut ctx = FitContext::new(&mut rng, None);
            let m = fit(&params(true, 2000), &Problem { x: &x, y: &y, n_classes: 2 }, &kernel, HyperPolicy::Fixed, &mut ctx).unwrap();
            let (mu, _) = m.predictive_latents(&x);
            let p = m.predict_proba(&x, &mut Pcg64::seed_from_u64(0)).unwrap()[[0, 1]];
            (mu[0], p, m.elbo())
        };
        // Oracle sanity: log p(t) = ln 1/2 for a zero-mean prior; the predictive at the same
        // input is 1/2 + arcsin(s/(1+s))/pi (orthant probability of (y, y*)).
        for s in [1e-3, 1.0, 25.0] {
            let (log_z, _, p) = one_datum_exact(s);
            assert!((log_z - 0.5f64.ln()).abs() < 1e-10 && (p - 0.5 - (s / (1.0 + s)).asin() / PI).abs() < 1e-10, "oracle at s = {s}");
        }
        // Small s, by expanding both fixed points: VB has m = s r(m), r = phi/Phi, so
        // m = s r0 (1 - r0^2 s) + O(s^3) with r0 = sqrt(2/pi); the exact mean is s r0 / sqrt(1 + s).
        // Hence 1 - m_vb/m_exact = (2/pi - 1/2) s + O(s^2) and ELBO - ln 1/2 = -(1 - 2/pi) s/2 + O(s^2).
        let s = 1e-3;
        let (m_vb, _, elbo) = fit_one(s);
        let (log_z, m_ex, _) = one_datum_exact(s);
        let shrink = (1.0 - m_vb / m_ex) / s;
        assert!((shrink / (2.0 / PI - 0.5) - 1.0).abs() < 0.01, "shrinkage coefficient {shrink}");
        let gap = (elbo - log_z) / s;
        assert!((gap / (-(1.0 - 2.0 / PI) / 2.0) - 1.0).abs() < 0.01, "bound gap coefficient {gap}");
        // Larger s: the mean-field mean is shrunk (by 10% at s = 1, 26% at s = 4, 53% at s = 25),
        // but so is its predictive variance, and the predictive probabilities stay within 0.01
        // of the exact ones (0.0064, 0.0096, 0.0044 by a 30-digit solve of m = s r(m)); 0.015
        // leaves room for nothing but rounding. The bound stays below log p(t) = ln 1/2.
        for s in [0.1, 1.0, 4.0, 25.0] {
            let (m_vb, p_vb, elbo) = fit_one(s);
            let (log_z, m_ex, p_ex) = one_datum_exact(s);
            assert!(m_vb > 0.0 && m_vb < m_ex, "s = {s}: VB mean {m_vb} vs exact {m_ex}");
            assert!((p_vb - p_ex).abs() < 0.015, "s = {s}: VB predictive {p_vb} vs exact {p_ex}");
            assert!(elbo < log_z, "s = {s}: bound {elbo} above log p(t) {log_z}");
        }
    }

    #[test]
    fn binary_needs_two_classes_and_a_fixed_kernel() {
        let (x, y) = toy(6, 1);
        let kernel = iso_kernel(1.0, 1.0);
        let mut rng = Pcg64::seed_from_u64(1);
        let mut ctx = FitContext::new(&mut rng, None);
        let e = fit(&params(true, 5), &Problem { x: &x, y: &y, n_classes: 3 }, &kernel, HyperPolicy::Fixed, &mut ctx);
        assert!(matches!(e, Err(FitError::Unsupported(m)) if m.contains("exactly 2 classes")));
        let e = fit(&params(true, 5), &Problem { x: &x, y: &y, n_classes: 2 }, &kernel, HyperPolicy::Learn, &mut ctx);
        assert!(matches!(e, Err(FitError::Unsupported(m)) if m.contains("hyper: fixed")));
        for p in [VbmnpParams { accelerate: true, ..params(true, 5) }, VbmnpParams { evidence: VbEvidence::Elbo, ..params(true, 5) }] {
            let e = fit(&p, &Problem { x: &x, y: &y, n_classes: 2 }, &kernel, HyperPolicy::Fixed, &mut ctx);
            assert!(matches!(e, Err(FitError::Unsupported(m)) if m.contains("multinomial model only")));
        }
    }
}
