//! A Gaussian q(u) = N(m, S) over M inducing values held in natural parameters
//! theta1 = S^{-1} m and Lambda = S^{-1}, and the natural-gradient step on them.
//!
//! For an objective E_q[sum_n log p(y_n | f_n)] - KL(q || N(0, P^{-1})), the natural gradient
//! in theta equals the ordinary gradient in the expectation parameters eta = (m, S + m m^T),
//! so a step of length gamma is
//!     theta1 <- (1 - gamma) theta1 + gamma (g_m - 2 g_S m)
//!     Lambda <- (1 - gamma) Lambda + gamma (P - 2 g_S)
//! with g_m, g_S the gradients of the expected log-likelihood alone w.r.t. m and S
//! (Hensman, Fusi & Lawrence 2013; Salimbeni, Eleftheriadis & Hensman 2018). For a Gaussian
//! likelihood the expected log-likelihood is linear in eta and one step of length 1 lands on
//! the exact posterior.
use crate::linalg::{Chol, LinalgError};
use faer::{Mat, MatRef};

#[derive(Clone, Debug)]
pub struct NaturalGaussian {
    theta1: Vec<f64>,
    precision: Mat<f64>,
    chol: Chol,
    mean: Vec<f64>,
}

impl NaturalGaussian {
    /// q = N(0, I) (the whitened prior).
    pub fn standard(m: usize) -> Self {
        let precision = Mat::identity(m, m);
        let chol = Chol::factor(precision.as_ref(), "q(u) precision").expect("identity");
        NaturalGaussian { theta1: vec![0.0; m], precision, chol, mean: vec![0.0; m] }
    }

    /// From a mean and a precision matrix.
    pub fn from_mean_precision(mean: Vec<f64>, precision: Mat<f64>) -> Result<Self, LinalgError> {
        let chol = Chol::factor(precision.as_ref(), "q(u) precision")?;
        let theta1 = crate::linalg::matvec(precision.as_ref(), &mean);
        Ok(NaturalGaussian { theta1, precision, chol, mean })
    }

    pub fn dim(&self) -> usize {
        self.mean.len()
    }

    /// The first natural parameter, Lambda m.
    pub fn theta1(&self) -> &[f64] {
        &self.theta1
    }

    pub fn mean(&self) -> &[f64] {
        &self.mean
    }

    /// Lambda = S^{-1}.
    pub fn precision(&self) -> MatRef<'_, f64> {
        self.precision.as_ref()
    }

    /// The same q(u) in the whitened coordinates of a new factor: u = L_old v = L_new v', so
    /// v' = T^{-1} v with T = L_old^{-1} L_new (lower triangular), m' = L_new^{-1} L_old m and
    /// Lambda' = T^T Lambda T. A sparse GP whose kernel step holds q(u) fixed (the unwhitened
    /// parameterisation) carries its whitened q across the step with this.
    pub fn reexpress(&self, old: &Chol, new: &Chol) -> Result<NaturalGaussian, LinalgError> {
        use crate::linalg::{col, matmul_par, to_vec};
        let mean = to_vec(new.solve_l(matmul_par(old.l(), col(&self.mean).as_ref()).as_ref()).as_ref());
        let t = old.solve_l(new.l());
        let p = matmul_par(t.transpose(), matmul_par(self.precision.as_ref(), t.as_ref()).as_ref());
        let precision = Mat::from_fn(p.nrows(), p.ncols(), |i, j| 0.5 * (p[(i, j)] + p[(j, i)]));
        NaturalGaussian::from_mean_precision(mean, precision)
    }

    /// S B = Lambda^{-1} B.
    pub fn cov_times(&self, b: MatRef<'_, f64>) -> Mat<f64> {
        self.chol.solve_par(b)
    }

    /// S, explicitly (tests and small problems).
    pub fn covariance(&self) -> Mat<f64> {
        self.cov_times(Mat::<f64>::identity(self.dim(), self.dim()).as_ref())
    }

    /// log |S|.
    pub fn log_det_cov(&self) -> f64 {
        -self.chol.log_det()
    }

    /// tr S = |L^{-1}|_F^2 for Lambda = L L^T.
    pub fn trace_cov(&self) -> f64 {
        let li = self.chol.solve_l(Mat::<f64>::identity(self.dim(), self.dim()).as_ref());
        let mut s = 0.0;
        for j in 0..li.ncols() {
            for i in 0..li.nrows() {
                s += li[(i, j)] * li[(i, j)];
            }
        }
        s
    }

    /// KL(q || N(0, I)) = 1/2 (tr S + m^T m - M - log |S|).
    pub fn kl_standard(&self) -> f64 {
        let mm: f64 = self.mean.iter().map(|v| v * v).sum();
        0.5 * (self.trace_cov() + mm - self.dim() as f64 - self.log_det_cov())
    }

    /// One natural-gradient step of length `gamma` towards prior precision `prior_precision`
    /// (prior mean zero), given the expected log-likelihood's gradients `g_m` and symmetric
    /// `g_s`. If the new precision is not positive definite (a likelihood that is not
    /// log-concave can make it so) the step is halved, up to 20 times; returns the length used.
    pub fn step(&mut self, g_m: &[f64], g_s: MatRef<'_, f64>, prior_precision: MatRef<'_, f64>, gamma: f64) -> Result<f64, LinalgError> {
        finite_gradients(g_m, g_s)?;
        let m = self.dim();
        let gsm = crate::linalg::matvec(g_s, &self.mean);
        let mut gamma = gamma;
        for _ in 0..20 {
            // g_S enters symmetrised: (g_S + g_S^T) = 2 g_S for a symmetric gradient.
            let precision = Mat::from_fn(m, m, |i, j| {
                (1.0 - gamma) * self.precision[(i, j)] + gamma * (prior_precision[(i, j)] - (g_s[(i, j)] + g_s[(j, i)]))
            });
            if let Ok(chol) = Chol::factor(precision.as_ref(), "q(u) precision") {
                self.theta1 = (0..m).map(|i| (1.0 - gamma) * self.theta1[i] + gamma * (g_m[i] - 2.0 * gsm[i])).collect();
                self.mean = chol.solve_vec(&self.theta1);
                self.precision = precision;
                self.chol = chol;
                return Ok(gamma);
            }
            gamma *= 0.5;
        }
        Err(LinalgError::NotPositiveDefinite { what: "q(u) precision after a natural-gradient step".into(), pivot: 0, last_jitter: 0.0 })
    }

    /// Move the natural parameters a fraction `rho` of the way to a target given in natural
    /// parameters: theta1 <- (1 - rho) theta1 + rho t1, Lambda <- (1 - rho) Lambda + rho T.
    /// For a conditionally conjugate model the target is the exact complete-conditional update
    /// (CAVI at rho = 1, SVI in between; Hoffman et al. 2013). A convex combination of positive
    /// definite precisions is positive definite, so no step is ever halved.
    pub fn blend(&mut self, t1: &[f64], target_precision: MatRef<'_, f64>, rho: f64) -> Result<(), LinalgError> {
        if !t1.iter().all(|v| v.is_finite()) {
            return Err(LinalgError::NonFinite { what: "the natural-parameter target theta1".into() });
        }
        let m = self.dim();
        let precision = if rho == 1.0 {
            target_precision.to_owned()
        } else {
            Mat::from_fn(m, m, |i, j| (1.0 - rho) * self.precision[(i, j)] + rho * target_precision[(i, j)])
        };
        let chol = Chol::factor(precision.as_ref(), "q(u) precision")?;
        self.theta1 = if rho == 1.0 { t1.to_vec() } else { (0..m).map(|i| (1.0 - rho) * self.theta1[i] + rho * t1[i]).collect() };
        self.mean = chol.solve_vec(&self.theta1);
        self.precision = precision;
        self.chol = chol;
        Ok(())
    }

    /// The natural-gradient step with the positive-definite retraction of Lin, Schmidt & Khan
    /// (ICML 2020, "Handling the positive-definite constraint in the Bayesian learning rule"):
    ///     G = P - 2 g_S - Lambda,   Lambda <- Lambda + gamma G + gamma^2/2 G Lambda^{-1} G,
    ///     m <- m + gamma Lambda_new^{-1} (g_m - P m).
    /// The new precision is positive definite for any gamma and any g_S (it is
    /// Lambda/2 + (Lambda^{1/2} + gamma G Lambda^{-1/2})(...)^T / 2), so likelihoods that are not
    /// log-concave (robust-max) never need a halved step; to first order in gamma it is `step`.
    /// Rounding can still leave the new precision a hair short of positive definite, so it is
    /// factored with jitter; returns the jitter that needed (0 almost always) for the caller to
    /// report. The stored precision is the retraction's, without it.
    pub fn step_retracted(
        &mut self,
        g_m: &[f64],
        g_s: MatRef<'_, f64>,
        prior_precision: MatRef<'_, f64>,
        gamma: f64,
    ) -> Result<f64, LinalgError> {
        finite_gradients(g_m, g_s)?;
        let m = self.dim();
        let g = Mat::from_fn(m, m, |i, j| prior_precision[(i, j)] - (g_s[(i, j)] + g_s[(j, i)]) - self.precision[(i, j)]);
        // G Lambda^{-1} G = W^T W with W = L^{-1} G (Lambda = L L^T): one triangular solve and
        // one product, exactly symmetric.
        let w = self.chol.solve_l_par(g.as_ref());
        let wtw = crate::linalg::matmul_par(w.transpose(), w.as_ref());
        let precision = Mat::from_fn(m, m, |i, j| {
            let (a, b) = if i >= j { (i, j) } else { (j, i) };
            self.precision[(i, j)] + gamma * g[(i, j)] + 0.5 * gamma * gamma * wtw[(a, b)]
        });
        let chol = Chol::factor_with_jitter(precision.as_ref(), "q(u) precision")?;
        let pm = crate::linalg::matvec(prior_precision, &self.mean);
        let grad: Vec<f64> = (0..m).map(|i| g_m[i] - pm[i]).collect();
        let step = chol.solve_vec(&grad);
        self.mean = (0..m).map(|i| self.mean[i] + gamma * step[i]).collect();
        self.theta1 = crate::linalg::matvec(precision.as_ref(), &self.mean);
        self.precision = precision;
        let jitter = chol.jitter();
        self.chol = chol;
        Ok(jitter)
    }
}

/// The expected log-likelihood's gradients must be finite: a NaN in g_m would pass into q's
/// mean with the step reported as taken, and one in g_S would be halved 20 times and reported
/// as a precision that is not positive definite, both far from the cause.
fn finite_gradients(g_m: &[f64], g_s: MatRef<'_, f64>) -> Result<(), LinalgError> {
    if !g_m.iter().all(|v| v.is_finite()) {
        return Err(LinalgError::NonFinite { what: "the expected log-likelihood's gradient in the mean".into() });
    }
    if !(0..g_s.ncols()).all(|j| (0..g_s.nrows()).all(|i| g_s[(i, j)].is_finite())) {
        return Err(LinalgError::NonFinite { what: "the expected log-likelihood's gradient in the covariance".into() });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_unit_step_with_a_gaussian_likelihood_lands_on_the_exact_posterior() {
        // u ~ N(0, I), y = H u + noise (sd 0.5): E_q[log p(y|u)] has g_m = H^T (y - H m)/s2,
        // g_S = -H^T H / (2 s2), at any q; the posterior is N(P^{-1} H^T y / s2, P^{-1}) with
        // P = I + H^T H / s2.
        let h = Mat::from_fn(4, 3, |i, j| ((i * 3 + j) as f64 * 0.7).sin());
        let y = [0.3, -1.2, 0.8, 2.0];
        let s2 = 0.25;
        let mut q =
            NaturalGaussian::from_mean_precision(vec![1.0, -2.0, 0.5], Mat::from_fn(3, 3, |i, j| if i == j { 3.0 } else { 0.4 })).unwrap();
        let resid: Vec<f64> = (0..4).map(|i| y[i] - (0..3).map(|j| h[(i, j)] * q.mean()[j]).sum::<f64>()).collect();
        let g_m: Vec<f64> = (0..3).map(|j| (0..4).map(|i| h[(i, j)] * resid[i]).sum::<f64>() / s2).collect();
        let hth = h.transpose() * &h;
        let g_s = Mat::from_fn(3, 3, |i, j| -hth[(i, j)] / (2.0 * s2));
        let used = q.step(&g_m, g_s.as_ref(), Mat::<f64>::identity(3, 3).as_ref(), 1.0).unwrap();
        assert_eq!(used, 1.0);
        let p = Mat::from_fn(3, 3, |i, j| if i == j { 1.0 } else { 0.0 } + hth[(i, j)] / s2);
        let hty: Vec<f64> = (0..3).map(|j| (0..4).map(|i| h[(i, j)] * y[i]).sum::<f64>() / s2).collect();
        let want = Chol::factor(p.as_ref(), "P").unwrap().solve_vec(&hty);
        for j in 0..3 {
            assert!((q.mean()[j] - want[j]).abs() < 1e-12, "{:?} vs {want:?}", q.mean());
        }
        let s = q.covariance();
        let ps = &p * &s;
        for i in 0..3 {
            for j in 0..3 {
                assert!((ps[(i, j)] - if i == j { 1.0 } else { 0.0 }).abs() < 1e-12);
            }
        }
    }

    #[test]
    fn the_retracted_step_stays_positive_definite_where_the_plain_one_fails_and_agrees_to_first_order() {
        let start =
            || NaturalGaussian::from_mean_precision(vec![0.2, -0.4], Mat::from_fn(2, 2, |i, j| if i == j { 2.0 } else { 0.3 })).unwrap();
        let eye = Mat::<f64>::identity(2, 2);
        let g_m = [0.5, -0.1];
        // A strongly positive g_S (a likelihood that rewards variance): I - 2 g_S is indefinite.
        let g_s = Mat::from_fn(2, 2, |i, j| if i == j { 3.0 } else { 0.5 });
        let mut plain = start();
        assert!(plain.step(&g_m, g_s.as_ref(), eye.as_ref(), 1.0).unwrap() < 1.0, "the plain step must halve");
        let mut retracted = start();
        // Positive definite by construction: no jitter needed (the value returned is reported).
        assert_eq!(retracted.step_retracted(&g_m, g_s.as_ref(), eye.as_ref(), 1.0).unwrap(), 0.0);
        assert!(retracted.log_det_cov().is_finite());
        // First order: for small gamma the two agree to O(gamma^2).
        let gamma = 1e-4;
        let (mut a, mut b) = (start(), start());
        a.step(&g_m, g_s.as_ref(), eye.as_ref(), gamma).unwrap();
        b.step_retracted(&g_m, g_s.as_ref(), eye.as_ref(), gamma).unwrap();
        for i in 0..2 {
            assert!((a.mean()[i] - b.mean()[i]).abs() < 1e-6, "{:?} vs {:?}", a.mean(), b.mean());
            for j in 0..2 {
                assert!((a.precision[(i, j)] - b.precision[(i, j)]).abs() < 1e-6);
            }
        }
    }

    /// Lin, Schmidt & Khan (2020)'s retraction for a Gaussian in precision form, computed
    /// densely: G = P - 2 g_S - Lambda (the natural-gradient direction of the precision: the
    /// ELBO's fixed point is Lambda = P - 2 g_S), Lambda_new = Lambda + gamma G +
    /// gamma^2 / 2 G Lambda^{-1} G, and the mean moves along the natural gradient
    /// Lambda_new^{-1} dELBO/dm, dELBO/dm = g_m - P m (zero prior mean). At gamma = 1 with an
    /// indefinite P - 2 g_S the new precision is still positive definite.
    #[test]
    fn the_retracted_step_is_the_dense_retraction_at_a_full_step() {
        let (mean, lam) = (vec![0.2, -0.4, 0.7], Mat::from_fn(3, 3, |i, j| if i == j { 2.0 + i as f64 } else { 0.3 }));
        let prior = Mat::from_fn(3, 3, |i, j| if i == j { 1.5 } else { -0.2 });
        let g_m = [0.5, -0.1, 0.3];
        let g_s = Mat::from_fn(3, 3, |i, j| if i == j { 2.0 + 0.5 * i as f64 } else { 0.4 });
        let inv = |a: &Mat<f64>| Chol::factor(a.as_ref(), "t").unwrap().inverse();
        let g = Mat::from_fn(3, 3, |i, j| prior[(i, j)] - 2.0 * g_s[(i, j)] - lam[(i, j)]);
        let glg = &g * inv(&lam) * &g;
        let want = Mat::from_fn(3, 3, |i, j| lam[(i, j)] + g[(i, j)] + 0.5 * glg[(i, j)]);
        let pm: Vec<f64> = (0..3).map(|i| (0..3).map(|j| prior[(i, j)] * mean[j]).sum::<f64>()).collect();
        let want_inv = inv(&want);
        let want_mean: Vec<f64> = (0..3).map(|i| mean[i] + (0..3).map(|j| want_inv[(i, j)] * (g_m[j] - pm[j])).sum::<f64>()).collect();
        let target = Mat::from_fn(3, 3, |i, j| prior[(i, j)] - 2.0 * g_s[(i, j)]);
        assert!(Chol::factor(target.as_ref(), "P - 2 g_S").is_err(), "the plain step's target must be indefinite");
        let mut q = NaturalGaussian::from_mean_precision(mean, lam.clone()).unwrap();
        assert_eq!(q.step_retracted(&g_m, g_s.as_ref(), prior.as_ref(), 1.0).unwrap(), 0.0);
        for i in 0..3 {
            assert!((q.mean()[i] - want_mean[i]).abs() < 1e-12, "mean {:?} vs {want_mean:?}", q.mean());
            let theta1: f64 = (0..3).map(|j| want[(i, j)] * want_mean[j]).sum();
            assert!((q.theta1()[i] - theta1).abs() < 1e-12, "theta1 {:?}", q.theta1());
            for j in 0..3 {
                assert!(
                    (q.precision()[(i, j)] - want[(i, j)]).abs() < 1e-12,
                    "precision ({i}, {j}): {} vs {}",
                    q.precision()[(i, j)],
                    want[(i, j)]
                );
            }
        }
    }

    #[test]
    fn kl_to_the_standard_normal_is_zero_there_and_matches_its_closed_form() {
        assert!(NaturalGaussian::standard(4).kl_standard().abs() < 1e-14);
        // 1-D: KL(N(m, s) || N(0, 1)) = (s + m^2 - 1 - ln s) / 2.
        let q = NaturalGaussian::from_mean_precision(vec![0.7], Mat::from_fn(1, 1, |_, _| 1.0 / 0.3)).unwrap();
        assert!((q.kl_standard() - 0.5 * (0.3 + 0.49 - 1.0 - 0.3f64.ln())).abs() < 1e-14);
    }

    /// A non-finite gradient is refused as such by every update, and q is left as it was.
    #[test]
    fn non_finite_gradients_are_refused_and_leave_q_unchanged() {
        let start =
            || NaturalGaussian::from_mean_precision(vec![0.2, -0.4], Mat::from_fn(2, 2, |i, j| if i == j { 2.0 } else { 0.3 })).unwrap();
        let prior = Mat::<f64>::identity(2, 2);
        let fine = Mat::from_fn(2, 2, |i, j| if i == j { -0.1 } else { 0.0 });
        let bad_s = Mat::from_fn(2, 2, |i, j| if i == 1 && j == 0 { f64::NAN } else { -0.1 });
        for (g_m, g_s) in [(vec![f64::NAN, 0.0], fine.clone()), (vec![0.1, 0.0], bad_s), (vec![0.1, f64::INFINITY], fine.clone())] {
            let mut q = start();
            let e = q.step(&g_m, g_s.as_ref(), prior.as_ref(), 0.5).unwrap_err();
            assert!(matches!(e, LinalgError::NonFinite { .. }), "{e}");
            let e = q.step_retracted(&g_m, g_s.as_ref(), prior.as_ref(), 0.5).unwrap_err();
            assert!(matches!(e, LinalgError::NonFinite { .. }), "{e}");
            assert_eq!(q.mean(), start().mean());
        }
        let mut q = start();
        let e = q.blend(&[0.0, f64::NAN], prior.as_ref(), 0.5).unwrap_err();
        assert!(matches!(e, LinalgError::NonFinite { .. }), "{e}");
        assert_eq!(q.mean(), start().mean());
    }
}
