//! One pass over the factors of a block of rows: every factor's cavity, tilted moments and new
//! site, the log normalisers, and the per-row scalars the gradient needs.
//!
//! EP's cavity of factor (i, k) on class c removes that factor's own site (C1, C2) along the
//! direction u_o it was stored with; the tilted distribution uses the current u = K^{-1} k_i,
//! which differs from u_o after a kernel or Z step (notes §2.9). With the posterior
//! projections d_uu = u^T V u, d_uo = u^T V u_o, d_oo = u_o^T V u_o, t_u = u^T m, t_o = u_o^T m:
//!     cavity variance  u^T V\ u = d_uu + r d_uo^2,           r = C1 / (1 - C1 d_oo)
//!     cavity mean      u^T m\   = t_u + (C1 t_o - C2) d_uo / (1 - C1 d_oo)
//! SEP's cavity is one per class (the tied site scaled by 1 - 1/n_c), the same formulas with
//! C1 = C2 = 0 on the cavity's own projections.
use super::sparse::{ClassPosterior, ClassPrior, PriorRows};
use crate::likelihoods::pairwise_step::{PairSites, Side, Site1d, Tilted};
use crate::linalg::col_slice;
use crate::methods::FitError;
use faer::Mat;
use ndarray::Array2;

/// Projections of one row's direction(s) on class c's q (or SEP's class cavity).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Proj {
    pub d_uu: f64,
    pub d_uo: f64,
    pub d_oo: f64,
    pub t_u: f64,
    pub t_o: f64,
}

/// A factor's cavity along the current direction, and the coefficients of A^{-1} k_o in
/// K^{-1} m\ (`c_m`) and in K^{-1} V\ u (`c_w`) that the gradient needs.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Cavity {
    pub mean: f64,
    pub var: f64,
    pub c_m: f64,
    pub c_w: f64,
}

impl Proj {
    /// The cavity after removing the site (c1, c2) stored along u_o. `None` when the removal
    /// is not positive definite (1 - C1 d_oo <= 0) or the variance is not positive.
    pub fn cavity(&self, c1: f64, c2: f64) -> Option<Cavity> {
        let keep = 1.0 - c1 * self.d_oo;
        if !(keep > 0.0) {
            return None;
        }
        let r = c1 / keep;
        let var = self.d_uu + r * self.d_uo * self.d_uo;
        if !(var >= 0.0 && var.is_finite()) {
            return None;
        }
        Some(Cavity { mean: self.t_u + (c1 * self.t_o - c2) * self.d_uo / keep, var, c_m: r * self.t_o - c2 / keep, c_w: r * self.d_uo })
    }

    /// g(theta\) - g(theta) of removing the site (c1, c2) stored along u_o: the part of
    /// log s~ besides log Z (notes §2.5, the corrected eq. 61), for one side.
    pub fn removal_gain(&self, c1: f64, c2: f64) -> f64 {
        if c1 == 0.0 && c2 == 0.0 {
            // No site to remove (SEP's factors, or one not yet refined): the gain is exactly 0.
            return 0.0;
        }
        let keep = 1.0 - c1 * self.d_oo;
        -0.5 * keep.ln() + (c1 * self.t_o * self.t_o - 2.0 * c2 * self.t_o + c2 * c2 * self.d_oo) / (2.0 * keep)
    }

    /// EP-inner-exact: the derivatives of log Z + `removal_gain` of one side with respect to the
    /// projections d_uo, d_oo and t_o, given g_mean = d log Z / d(cavity mean) and g_var =
    /// d log Z / d(cavity variance), the site (c1, c2) held fixed. With keep = 1 - C1 d_oo,
    /// r = C1 / keep, e = (C1 t_o - C2) / keep and Q = C1 t_o^2 - 2 C2 t_o + C2^2 d_oo:
    ///     var = d_uu + r d_uo^2,  mean = t_u + e d_uo,  gain = -1/2 log keep + Q / (2 keep),
    ///     dr/dd_oo = r^2,  de/dd_oo = e r,  de/dt_o = r.
    /// (The derivatives in d_uu and t_u are g_var and g_mean themselves.)
    pub fn exact_adjoints(&self, c1: f64, c2: f64, g_mean: f64, g_var: f64) -> (f64, f64, f64) {
        let keep = 1.0 - c1 * self.d_oo;
        let r = c1 / keep;
        let e = (c1 * self.t_o - c2) / keep;
        let q = c1 * self.t_o * self.t_o - 2.0 * c2 * self.t_o + c2 * c2 * self.d_oo;
        let d_uo = g_var * 2.0 * r * self.d_uo + g_mean * e;
        let gain_oo = 0.5 * r + c2 * c2 / (2.0 * keep) + q * c1 / (2.0 * keep * keep);
        let d_oo = g_var * r * r * self.d_uo * self.d_uo + g_mean * e * r * self.d_uo + gain_oo;
        let t_o = g_mean * r * self.d_uo + e;
        (d_uo, d_oo, t_o)
    }
}

/// What a view is for: a sweep needs only the projections, a gradient also the directions
/// mapped by A^{-1}: per class two more [M, M] x [M, n] triangular solves for EP (of its view's
/// five products) and one more for SEP (of two), which the refinement and the evidence skip.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ViewFor {
    Sweep,
    /// EP: a sweep that projects q and the cavities on the directions the sites were stored
    /// along, not the current ones (`site_directions: lagged`, the authors' batch code).
    SweepAlongStored,
    Gradient,
}

/// A^{-1} applied to a block's directions (A of the posterior, or of SEP's cavity).
pub(crate) struct AinvDirs {
    /// A^{-1} k_i per row, [M, n].
    pub k: Mat<f64>,
    /// EP: A^{-1} k_o per row, k_o = K u_o (the stored direction in kernel space).
    pub ko: Option<Mat<f64>>,
}

/// Class c's view of a block of rows (borrowing the block's prior rows).
pub(crate) struct ClassView<'a> {
    pub rows: &'a PriorRows,
    /// `Some` for a view built `ViewFor::Gradient`.
    pub ainv: Option<AinvDirs>,
    /// K^{-1} m of the posterior (EP) or of SEP's cavity.
    pub beta: Vec<f64>,
    pub proj: Vec<Proj>,
}

impl<'a> ClassView<'a> {
    /// EP: projections on the posterior `post`, with the stored directions `old_dirs` [M, n]
    /// (f-bar space; zero columns for rows without sites yet).
    pub fn per_factor(
        prior: &ClassPrior,
        rows: &'a PriorRows,
        post: &ClassPosterior,
        old_dirs: &Mat<f64>,
        purpose: ViewFor,
    ) -> ClassView<'a> {
        let ko = crate::linalg::matmul_par(prior.k().as_ref(), old_dirs.as_ref());
        let e_o = post.a_chol.solve_l_par(ko.as_ref());
        let n = rows.kmn.ncols();
        debug_assert_eq!(ko.nrows(), prior.m());
        // Sums in index order over contiguous columns.
        let col = |a: &Mat<f64>, b: &Mat<f64>, j: usize| col_slice(a, j).iter().zip(col_slice(b, j)).map(|(x, y)| x * y).sum::<f64>();
        let t_o = |j: usize| col_slice(&ko, j).iter().zip(&post.beta).map(|(x, y)| x * y).sum::<f64>();
        if purpose == ViewFor::SweepAlongStored {
            // Only the stored directions: the current ones' triangular solve is skipped.
            let proj = (0..n)
                .map(|j| {
                    let (d, t) = (col(&e_o, &e_o, j), t_o(j));
                    Proj { d_uu: d, d_uo: d, d_oo: d, t_u: t, t_o: t }
                })
                .collect();
            return ClassView { rows, ainv: None, beta: post.beta.clone(), proj };
        }
        let e_u = post.a_chol.solve_l_par(rows.kmn.as_ref());
        let proj = (0..n)
            .map(|j| Proj {
                d_uu: col(&e_u, &e_u, j),
                d_uo: col(&e_u, &e_o, j),
                d_oo: col(&e_o, &e_o, j),
                t_u: col_slice(&rows.kmn, j).iter().zip(&post.beta).map(|(x, y)| x * y).sum(),
                t_o: t_o(j),
            })
            .collect();
        let ainv = (purpose == ViewFor::Gradient)
            .then(|| AinvDirs { k: post.a_chol.solve_lt_par(e_u.as_ref()), ko: Some(post.a_chol.solve_lt_par(e_o.as_ref())) });
        ClassView { rows, ainv, beta: post.beta.clone(), proj }
    }

    /// SEP: projections on the class cavity `cavity`.
    pub fn tied(prior: &ClassPrior, rows: &'a PriorRows, cavity: &ClassPosterior, purpose: ViewFor) -> ClassView<'a> {
        let e_u = cavity.a_chol.solve_l_par(rows.kmn.as_ref());
        debug_assert_eq!(e_u.nrows(), prior.m());
        let proj = (0..rows.kmn.ncols())
            .map(|j| {
                let (e, k) = (col_slice(&e_u, j), col_slice(&rows.kmn, j));
                Proj { d_uu: e.iter().map(|v| v * v).sum(), t_u: k.iter().zip(&cavity.beta).map(|(a, b)| a * b).sum(), ..Proj::default() }
            })
            .collect();
        let ainv = (purpose == ViewFor::Gradient).then(|| AinvDirs { k: cavity.a_chol.solve_lt_par(e_u.as_ref()), ko: None });
        ClassView { rows, ainv, beta: cavity.beta.clone(), proj }
    }
}

/// Per row and class, sums over the factors touching (row, class) of d log Z / d a (`ga`),
/// times c_m (`ga_cm`), d log Z / d b (`gb`), times c_w (`gb_cw`); and, for EP-inner-exact,
/// of the derivatives of log s~ in the projections d_uo, d_oo and t_o (`Proj::exact_adjoints`;
/// in d_uu and t_u they are `gb` and `ga`).
#[derive(Clone, Debug)]
pub(crate) struct GradScalars {
    pub ga: Array2<f64>,
    pub ga_cm: Array2<f64>,
    pub gb: Array2<f64>,
    pub gb_cw: Array2<f64>,
    pub exact_uo: Array2<f64>,
    pub exact_oo: Array2<f64>,
    pub exact_to: Array2<f64>,
}

/// Which per-row gradient scalars a sweep accumulates: a refinement and the evidence need none,
/// eq. 10's gradient the first four of `GradScalars`, EP-inner-exact all seven.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Adjoints {
    None,
    Eq10,
    Exact,
}

/// What a sweep gives back.
pub(crate) struct Sweep {
    /// The new sites of every factor of the block (undamped).
    pub sites: PairSites,
    /// sum of log Z over the block's factors.
    pub log_z: f64,
    /// EP: sum over the block's factors of the two removal gains (log s~ - log Z).
    pub removal_gain: f64,
    /// `None` for `Adjoints::None`; for `Adjoints::Eq10` the exact-only arrays are empty.
    pub grad: Option<GradScalars>,
}

/// Cavities, tilted moments and new sites of every factor of the rows with classes `y`, and
/// the gradient scalars `adjoints` asks for.
pub(crate) fn sweep(views: &[ClassView<'_>], y: &[usize], stored: &PairSites, adjoints: Adjoints) -> Result<Sweep, FitError> {
    let (n, c) = (y.len(), views.len());
    let mut sites = PairSites::zeros(n, c);
    let zeros = || Array2::<f64>::zeros((n, c));
    let exact = adjoints == Adjoints::Exact;
    let exact_zeros = || if exact { zeros() } else { Array2::zeros((0, 0)) };
    let mut grad = (adjoints != Adjoints::None).then(|| GradScalars {
        ga: zeros(),
        ga_cm: zeros(),
        gb: zeros(),
        gb_cw: zeros(),
        exact_uo: exact_zeros(),
        exact_oo: exact_zeros(),
        exact_to: exact_zeros(),
    });
    let (mut log_z, mut removal_gain) = (0.0, 0.0);
    let fail =
        |j: usize, k: usize, what: &str| FitError::Numerical(format!("ep: {what} for the factor of row {} against class {}", j + 1, k + 1));
    for (j, &yj) in y.iter().enumerate() {
        for k in (0..c).filter(|&k| k != yj) {
            let (c1y, c2y, c1k, c2k) = (stored.c1y[(j, k)], stored.c2y[(j, k)], stored.c1k[(j, k)], stored.c2k[(j, k)]);
            let (py, pk) = (&views[yj].proj[j], &views[k].proj[j]);
            let cav_y = py.cavity(c1y, c2y).ok_or_else(|| fail(j, k, "a negative cavity variance"))?;
            let cav_k = pk.cavity(c1k, c2k).ok_or_else(|| fail(j, k, "a negative cavity variance"))?;
            let side_y = Side { mean: cav_y.mean, var: cav_y.var, fitc_var: views[yj].rows.fitc_var[j] };
            let side_k = Side { mean: cav_k.mean, var: cav_k.var, fitc_var: views[k].rows.fitc_var[j] };
            let t = Tilted::new(side_y, side_k).ok_or_else(|| fail(j, k, "a non-finite tilted distribution"))?;
            let Site1d { precision: p_y, natural_mean: h_y } = t.site(side_y, 1.0);
            let Site1d { precision: p_k, natural_mean: h_k } = t.site(side_k, -1.0);
            sites.c1y[(j, k)] = p_y;
            sites.c2y[(j, k)] = h_y;
            sites.c1k[(j, k)] = p_k;
            sites.c2k[(j, k)] = h_k;
            log_z += t.log_z;
            removal_gain += py.removal_gain(c1y, c2y) + pk.removal_gain(c1k, c2k);
            let Some(grad) = grad.as_mut() else { continue };
            let (ga, gb) = (t.d_mean(), t.d_var());
            for (class, sign, cav, proj, c1, c2) in [(yj, 1.0, cav_y, py, c1y, c2y), (k, -1.0, cav_k, pk, c1k, c2k)] {
                grad.ga[(j, class)] += sign * ga;
                grad.ga_cm[(j, class)] += sign * ga * cav.c_m;
                grad.gb[(j, class)] += gb;
                grad.gb_cw[(j, class)] += gb * cav.c_w;
                if exact {
                    let (uo, oo, to) = proj.exact_adjoints(c1, c2, sign * ga, gb);
                    grad.exact_uo[(j, class)] += uo;
                    grad.exact_oo[(j, class)] += oo;
                    grad.exact_to[(j, class)] += to;
                }
            }
        }
    }
    if !(log_z.is_finite() && removal_gain.is_finite()) {
        return Err(FitError::Numerical(format!("ep: the log normalisers of a block are not finite ({log_z}, {removal_gain})")));
    }
    Ok(Sweep { sites, log_z, removal_gain, grad })
}
