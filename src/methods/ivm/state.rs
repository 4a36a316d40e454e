//! The IVM representation of Q(u) over all n training points (Seeger, Lawrence & Herbrich,
//! eq. 4 and App. C.1; notes §2.1, §2.3), with active set I (inclusion order), sites
//! (b_I, pi_I), pi_k > 0:
//!     A = cov Q(u) = (K^{-1} + I_{.,I} Pi I_{I,.})^{-1} = K - M M^T,
//!     B = I_d + Pi^{1/2} K_I Pi^{1/2} = L L^T,   M = K_{.,I} Pi^{1/2} L^{-T}   [n, d],
//!     beta = L^{-1} Pi^{-1/2} b,   h = mean Q(u) = M beta,   a = diag A.
//! B has eigenvalues >= 1, so nothing here inverts K or needs jitter; an inclusion appends one
//! row to L and one column to M in O(n d).
use super::SiteLik;
use crate::kernels::Kernel;
use crate::likelihoods::univariate::CavityMoments;
use crate::linalg::Chol;
use crate::methods::FitError;
use faer::Mat;
use ndarray::{Array2, Axis};

/// Marginal variances a_j = K_jj - ||M_j||^2 are kept at least this fraction of K_jj: round-off
/// can push the variance of a point next to active ones to or below zero (notes P4).
pub(crate) const VAR_FLOOR: f64 = 1e-12;

/// One kernel column K(X, x_i), [n], with entry i the kernel's diagonal value: the same code
/// path as `Kernel::diag` for K_ii (a white-noise term lives on the diagonal of K(X, X) only,
/// which `cross` leaves out).
pub(crate) fn kernel_column(kernel: &dyn Kernel, x: &Array2<f64>, i: usize, k_ii: f64) -> Vec<f64> {
    let xi = x.row(i).to_owned().insert_axis(Axis(0));
    let c = kernel.cross(x, &xi);
    let mut col: Vec<f64> = (0..x.nrows()).map(|j| c[(j, 0)]).collect();
    col[i] = k_ii;
    col
}

/// phi (eq. 11) with the per-point quantities of its gradient (App. C.2), [n] each.
#[derive(Clone, Debug)]
pub(crate) struct CriterionTerms {
    pub phi: f64,
    pub rho: Vec<f64>,
    pub delta_l2: Vec<f64>,
    /// d log Z_j / d(cavity mean): minus the gradient of phi w.r.t. a shift of u (the intercept).
    pub alpha: Vec<f64>,
}

#[derive(Clone, Debug)]
pub(crate) struct IvmState {
    /// Active indices in inclusion order.
    pub active: Vec<usize>,
    /// Site precisions pi_I and natural means b_I, [d] each.
    pub pi: Vec<f64>,
    pub b: Vec<f64>,
    /// Cholesky factor L of B, [d, d].
    pub chol: Chol,
    /// Columns of M, [d][n] (an inclusion appends one).
    pub m_cols: Vec<Vec<f64>>,
    /// beta = L^{-1} Pi^{-1/2} b, [d] (not the probit intercept).
    pub beta: Vec<f64>,
    /// Marginal means and variances of Q(u), [n] each.
    pub h: Vec<f64>,
    pub a: Vec<f64>,
    /// diag K, [n].
    pub kdiag: Vec<f64>,
    /// How often a variance was raised to its floor.
    pub floor_hits: usize,
    /// The training rows this state covers, when a selection schedule has narrowed them to a
    /// subset J~ (notes §2.5): position j here is training row `rows[j]`. None: every row, in
    /// order. Indices in `active` are positions. Targets are always passed for all training rows.
    pub rows: Option<Vec<usize>>,
}

impl IvmState {
    /// The prior: no active point, h = 0, a = diag K.
    pub fn prior(kdiag: Vec<f64>) -> IvmState {
        IvmState {
            active: Vec::new(),
            pi: Vec::new(),
            b: Vec::new(),
            chol: Chol::workspace(0),
            m_cols: Vec::new(),
            beta: Vec::new(),
            h: vec![0.0; kdiag.len()],
            a: kdiag.clone(),
            kdiag,
            floor_hits: 0,
            rows: None,
        }
    }

    /// The training row at position j.
    pub fn row(&self, j: usize) -> usize {
        self.rows.as_ref().map_or(j, |r| r[j])
    }

    /// The training rows of the active points, in inclusion order.
    pub fn active_rows(&self) -> Vec<usize> {
        self.active.iter().map(|&j| self.row(j)).collect()
    }

    /// The same Q(u) over the positions `keep` only (ascending, every active position among
    /// them): M's rows, h, a and diag K restricted, L and beta unchanged (they live on the active
    /// set), the active positions renumbered. Nothing is recomputed, so the kept rows' numbers
    /// are exactly those of the full state.
    pub fn restrict(&self, keep: &[usize]) -> IvmState {
        let mut position = vec![usize::MAX; self.n()];
        for (new, &old) in keep.iter().enumerate() {
            position[old] = new;
        }
        let active = self
            .active
            .iter()
            .map(|&i| {
                assert_ne!(position[i], usize::MAX, "IvmState::restrict: active position {i} not kept");
                position[i]
            })
            .collect();
        let pick = |v: &[f64]| keep.iter().map(|&j| v[j]).collect::<Vec<f64>>();
        IvmState {
            active,
            pi: self.pi.clone(),
            b: self.b.clone(),
            chol: self.chol.clone(),
            m_cols: self.m_cols.iter().map(|c| pick(c)).collect(),
            beta: self.beta.clone(),
            h: pick(&self.h),
            a: pick(&self.a),
            kdiag: pick(&self.kdiag),
            floor_hits: self.floor_hits,
            rows: Some(keep.iter().map(|&j| self.row(j)).collect()),
        }
    }

    pub fn n(&self) -> usize {
        self.kdiag.len()
    }

    pub fn d(&self) -> usize {
        self.active.len()
    }

    /// Include point i (not active) with the ADF site from its current marginal N(h_i, a_i)
    /// (its cavity: it had no site), given `moments` under that marginal and the kernel column
    /// `kcol` = K_{.,i}. App. C.1 with the mean update in the form h' = h + alpha A_{.,i}
    /// (equal to the paper's h + beta_new mu, without dividing by pi_i^{1/2}):
    ///     l = pi_i^{1/2} M_{i,.}^T,  l_d = sqrt(1 + pi_i a_i),  A_{.,i} = K_{.,i} - M M_{i,.}^T,
    ///     mu = pi_i^{1/2} A_{.,i} / l_d,  M' = [M, mu],  a' = a - mu o mu,
    ///     beta' = [beta; alpha_i l_d / pi_i^{1/2}].
    pub fn include(&mut self, i: usize, moments: &CavityMoments, kcol: &[f64]) -> Result<(), FitError> {
        let n = self.n();
        assert!(i < n && kcol.len() == n, "IvmState::include: index or column out of shape");
        if self.active.contains(&i) {
            return Err(FitError::Numerical(format!("ivm: point {i} is already active")));
        }
        let (hi, ai) = (self.h[i], self.a[i]);
        let (pi_i, b_i) = moments.site(hi, ai).filter(|(p, b)| *p > 0.0 && p.is_finite() && b.is_finite()).ok_or_else(|| {
            FitError::Numerical(format!("ivm: no positive finite site for point {i} (moments {moments:?}, marginal N({hi}, {ai}))"))
        })?;
        self.append(i, pi_i, b_i, moments.alpha, kcol)
    }

    /// Include point i (not active in this representation) with a given site (pi_i, b_i),
    /// pi_i > 0: what the factorised multi-way IVM does, whose sites come from the projection
    /// of a C-dimensional tilted distribution (eq. 7), not from a univariate ADF update. The
    /// mean moves by alpha A_{.,i} with alpha = (b_i - pi_i h_i) / (1 + pi_i a_i), the change
    /// of the posterior mean of u_i per unit of A_ii (for an ADF site this is the ADF alpha).
    pub fn include_site(&mut self, i: usize, pi_i: f64, b_i: f64, kcol: &[f64]) -> Result<(), FitError> {
        let n = self.n();
        assert!(i < n && kcol.len() == n, "IvmState::include_site: index or column out of shape");
        if self.active.contains(&i) {
            return Err(FitError::Numerical(format!("ivm: point {i} is already active")));
        }
        if !(pi_i > 0.0 && pi_i.is_finite() && b_i.is_finite()) {
            return Err(FitError::Numerical(format!("ivm: site (pi {pi_i}, b {b_i}) of point {i} is not positive and finite")));
        }
        let (hi, ai) = (self.h[i], self.a[i]);
        let alpha = (b_i - pi_i * hi) / (1.0 + pi_i * ai);
        self.append(i, pi_i, b_i, alpha, kcol)
    }

    /// The inclusion update proper, for a checked site (pi_i > 0) and its alpha.
    fn append(&mut self, i: usize, pi_i: f64, b_i: f64, alpha: f64, kcol: &[f64]) -> Result<(), FitError> {
        let n = self.n();
        let ai = self.a[i];
        let sp = pi_i.sqrt();
        let l: Vec<f64> = self.m_cols.iter().map(|c| sp * c[i]).collect();
        let ld = (1.0 + pi_i * ai).sqrt();
        let mut col = kcol.to_vec();
        for c in &self.m_cols {
            let mi = c[i];
            if mi != 0.0 {
                for (v, cj) in col.iter_mut().zip(c) {
                    *v -= mi * cj;
                }
            }
        }
        let scale = sp / ld;
        let mu: Vec<f64> = col.iter().map(|v| scale * v).collect();
        if mu.iter().any(|v| !v.is_finite()) {
            return Err(FitError::Numerical(format!("ivm: non-finite stub column at inclusion {} (point {i})", self.d() + 1)));
        }
        self.chol.push_row(&l, ld, "ivm B = I + Pi^1/2 K_I Pi^1/2")?;
        for j in 0..n {
            self.h[j] += alpha * col[j];
            let floor = VAR_FLOOR * self.kdiag[j];
            let aj = self.a[j] - mu[j] * mu[j];
            self.a[j] = if aj < floor {
                self.floor_hits += 1;
                floor
            } else {
                aj
            };
        }
        self.m_cols.push(mu);
        self.beta.push(alpha * ld / sp);
        self.active.push(i);
        self.pi.push(pi_i);
        self.b.push(b_i);
        Ok(())
    }

    /// The same representation computed from scratch for given active set and sites (dense
    /// algebra on the active set: B, its Cholesky factor with reported jitter, M^T = L^{-1}
    /// Pi^{1/2} K_{I,.}). The check of the incremental updates, and what a minor step (sites
    /// fixed, kernel changed) rebuilds from. Returns the cross-covariance K(X_I, X) [d, n] too,
    /// as `Kernel::cross_many_terms` keeps it (for a sum, each term's matrix, which the
    /// criterion's gradient hands to the terms' VJPs instead of rebuilding them); in the
    /// representation itself entry (r, I_r) is the kernel's diagonal value, as in
    /// `kernel_column`.
    pub fn rebuild(
        kernel: &dyn Kernel,
        x: &Array2<f64>,
        active: &[usize],
        pi: &[f64],
        b: &[f64],
    ) -> Result<(IvmState, Vec<Mat<f64>>), FitError> {
        let (n, d) = (x.nrows(), active.len());
        assert!(pi.len() == d && b.len() == d, "IvmState::rebuild: sites and active set differ in length");
        let kdiag = kernel.diag(x);
        // One matrix product for the d kernel rows (the minor steps' hot path).
        let kc_terms = kernel.cross_many_terms(&x.select(Axis(0), active), x);
        let mut kc = crate::kernels::sum_terms(&kc_terms);
        for (r, &i) in active.iter().enumerate() {
            kc[(r, i)] = kdiag[i];
        }
        let sp: Vec<f64> = pi.iter().map(|p| p.sqrt()).collect();
        let bmat = Mat::from_fn(d, d, |r, c| (if r == c { 1.0 } else { 0.0 }) + sp[r] * kc[(c, active[r])] * sp[c]);
        let chol = Chol::factor_with_jitter(bmat.as_ref(), "ivm B = I + Pi^1/2 K_I Pi^1/2")?;
        let mt = chol.solve_l(Mat::from_fn(d, n, |r, j| sp[r] * kc[(r, j)]).as_ref());
        let beta = crate::linalg::to_vec(chol.solve_l(Mat::from_fn(d, 1, |r, _| b[r] / sp[r]).as_ref()).as_ref());
        let h = (0..n).map(|j| (0..d).map(|r| mt[(r, j)] * beta[r]).sum()).collect();
        let mut floor_hits = 0;
        let a = (0..n)
            .map(|j| {
                let aj = kdiag[j] - (0..d).map(|r| mt[(r, j)] * mt[(r, j)]).sum::<f64>();
                let floor = VAR_FLOOR * kdiag[j];
                if aj < floor {
                    floor_hits += 1;
                    floor
                } else {
                    aj
                }
            })
            .collect();
        let m_cols = (0..d).map(|r| (0..n).map(|j| mt[(r, j)]).collect()).collect();
        let state =
            IvmState { active: active.to_vec(), pi: pi.to_vec(), b: b.to_vec(), chol, m_cols, beta, h, a, kdiag, floor_hits, rows: None };
        Ok((state, kc_terms))
    }

    /// The sites of a fixed active set recomputed at another kernel: ADF inclusions in the
    /// stored order, each from the point's marginal at that moment (for fixed I the sites are a
    /// deterministic function of the hyper-parameters; the hybrid and exact strategies, notes §4.6).
    pub fn replay(kernel: &dyn Kernel, x: &Array2<f64>, order: &[usize], lik: SiteLik, targets: &[f64]) -> Result<IvmState, FitError> {
        let mut state = IvmState::prior(kernel.diag(x));
        for &i in order {
            let moments = state.moments(lik, targets, i);
            let kcol = kernel_column(kernel, x, i, state.kdiag[i]);
            state.include(i, &moments, &kcol)?;
        }
        Ok(state)
    }

    /// log Q(D) = -phi, the IVM's approximation of the log marginal likelihood (eq. 11, the
    /// sum over every training point: all are kept, so J~ = {1..n}):
    ///     phi = -sum_j log Z_j + sum_{i in I} log Z~_i + (log |B| - h_I^T b) / 2,
    /// with log Z_j under j's cavity (its marginal for a non-active point; for an active one the
    /// marginal with its site divided out), and
    ///     log Z~_i = (log(1 - pi_i a_i) - (pi_i h_i^2 - 2 h_i b_i + a_i b_i^2) / (1 - pi_i a_i)) / 2.
    /// It is -log Q_EP(y_I) minus the predictive log-loss of the non-active points: exact for
    /// Gaussian noise (tested against -log N(y_I | 0, K_I + s2 I) - sum_J log N(y_j | h_j, a_j + s2)).
    pub fn log_evidence(&self, lik: SiteLik, targets: &[f64]) -> Result<f64, FitError> {
        Ok(-self.criterion_terms(lik, targets)?.phi)
    }

    /// phi of eq. 11 and, per point, what its gradient needs (App. C.2): from a fresh ADF
    /// update at the point's cavity, alpha~ = d log Z / d(cavity mean) and nu~, and
    ///     rho = (h pi - b + alpha~) / (1 - a pi),   Delta / l^2 = (nu~ - pi (1 - a pi)) / (1 - a pi)^2
    /// (rho = alpha~ and Delta / l^2 = nu~ for a non-active point, whose pi = b = 0).
    pub fn criterion_terms(&self, lik: SiteLik, targets: &[f64]) -> Result<CriterionTerms, FitError> {
        let n = self.n();
        let mut site: Vec<Option<usize>> = vec![None; n];
        for (k, &i) in self.active.iter().enumerate() {
            site[i] = Some(k);
        }
        let mut phi = 0.5 * self.chol.log_det();
        let mut terms = CriterionTerms { phi: 0.0, rho: vec![0.0; n], delta_l2: vec![0.0; n], alpha: vec![0.0; n] };
        // The active points in inclusion order, then the rest in ascending order (the order of
        // the sum is part of the stored numbers).
        let order = self.active.iter().copied().chain((0..n).filter(|&j| site[j].is_none()));
        for j in order {
            let (h, a) = (self.h[j], self.a[j]);
            let (p, b) = site[j].map_or((0.0, 0.0), |k| (self.pi[k], self.b[k]));
            let keep = 1.0 - p * a;
            if !(keep > 0.0) {
                return Err(FitError::Numerical(format!("ivm: active point {j} has no cavity (1 - pi a = {keep})")));
            }
            let a_cav = a / keep;
            let h_cav = h + a_cav * (p * h - b);
            let m = lik.moments(targets[self.row(j)], h_cav, a_cav);
            phi -= m.log_z;
            if site[j].is_some() {
                phi += 0.5 * (keep.ln() - (p * h * h - 2.0 * h * b + a * b * b) / keep);
                phi -= 0.5 * h * b;
            }
            terms.alpha[j] = m.alpha;
            terms.rho[j] = (h * p - b + m.alpha) / keep;
            terms.delta_l2[j] = (m.nu - p * keep) / (keep * keep);
        }
        if !phi.is_finite() {
            return Err(FitError::Numerical(format!("ivm: non-finite evidence approximation {phi}")));
        }
        terms.phi = phi;
        Ok(terms)
    }

    /// The ADF moments of position j's likelihood under its current marginal (its cavity while
    /// it is not active); `targets` of every training row.
    pub fn moments(&self, lik: SiteLik, targets: &[f64], j: usize) -> CavityMoments {
        lik.moments(targets[self.row(j)], self.h[j], self.a[j])
    }
}
