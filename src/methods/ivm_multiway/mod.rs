//! The factorised multi-way IVM (Seeger, Lawrence & Herbrich §4.1-4.2, App. D; notes §5.2-5.4,
//! §7.5): C independent a-priori GPs u_c ~ GP(0, K^c), a coupled likelihood P(y | u), u in R^C,
//! and a posterior approximated by a product of per-class IVMs, each with its own active set
//! I_c, built by joint greedy selection of (point, class) pairs with factorised ADF sites.
//!
//! - `sites.rs` eq. 7's site update with the (.)_+ clipping, the cavity, the score Delta_{j,c};
//! - `select.rs` the C representations (the binary IVM's `IvmState`, one per class) and the
//!   choice of the lowest Delta over the common selection index (notes P1, P11);
//! - `model.rs` prediction: per-class latent predictive, Q(y* | x*) by the fit's rule;
//! - the likelihood moments (softmax by the Gauss-Hermite product rule, multivariate probit by
//!   App. D's reduction to a 1-D integral, computed by the adapted rule of
//!   `likelihoods::probit`, which is not in the paper) are shared numerics in
//!   `likelihoods::factorised`.
//!
//! Hyper-parameters are fixed (kernels one per class or shared, intercepts given): the paper
//! has no learning criterion for this model (its satimage values came from another method,
//! notes P12). Evidence: none. No randomized selection: every point is scored at every
//! inclusion, so a fit is deterministic in its data and settings.
mod model;
mod select;
mod sites;
#[cfg(test)]
mod tests;

pub use model::IvmMultiwayModel;

use super::{parse_settings, Diagnostics, FitContext, FitError, Fitted, HyperPolicy, Method, Problem, ProblemShape, StopReason};
use crate::kernels::KernelSet;
use crate::likelihoods::factorised::FactorisedLik;
use crate::methods::ivm::model::ActiveSetPredictor;
use crate::methods::ivm::state::kernel_column;
use ndarray::Array2;
use select::{best_inclusion, Multiway};
use serde::{Deserialize, Serialize};

/// Version of this method's numbers, part of every cell key: bump it when a change of the code
/// (here or in shared numerics it uses) changes any number the method computes, so stored cells
/// are recomputed. `tests/numerics_versions.rs` fails when the output changes without a bump.
pub const NUMERICS_VERSION: u32 = 1;

/// Version of the multi-probit's numbers, beyond `NUMERICS_VERSION`, for the entries that
/// select it (`likelihood: multi_probit`), so that its changes re-key only those cells. 2: the
/// 1-D integral by the adapted rule of `likelihoods::probit` (it was a mode-centred 32-node
/// Gauss-Hermite rule, off by up to 9e-2 in log Z where one cavity variance is ~1e4 times
/// another).
pub const MULTI_PROBIT_NUMERICS_VERSION: u32 = 2;

/// The numerics tag of one entry's settings beyond `NUMERICS_VERSION`: the multi-probit's.
pub fn entry_numerics(settings: &serde_json::Value) -> Option<String> {
    let probit = settings.get("likelihood").and_then(|v| v.as_str()) == Some("multi_probit");
    probit.then(|| format!("ivm_multiway_probit={MULTI_PROBIT_NUMERICS_VERSION}"))
}

/// The largest softmax product grid (quadrature_points^C points per moment evaluation).
const MAX_GRID_POINTS: f64 = 1e7;

/// The coupled likelihood P(y | u).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MultiwayLikelihood {
    /// exp(u_y + p_y) / sum_c exp(u_c + p_c), moments by the Gauss-Hermite product rule (the
    /// paper's satimage runs: 3 points per axis).
    #[default]
    Softmax,
    /// Eq. 8, P(u_y + p_y + n_y = max_c (u_c + p_c + n_c)), n ~ N(0, I), moments by App. D's
    /// reduction to a 1-D integral over v_y, computed by the adapted rule of
    /// `likelihoods::probit` (not in the paper: its plain Gauss-Hermite rule misses the
    /// integrand far on the wrong side of the decision and where one cavity variance is many
    /// times another).
    MultiProbit,
}

/// Settings as written in a spec (`method: ivm_multiway`, `settings: {...}`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IvmMultiwayParams {
    #[serde(default)]
    pub likelihood: MultiwayLikelihood,
    /// dtot = sum_c d_c, the inclusions in all (capped at C times the training rows). Fewer are
    /// made when no pair is left whose site precision exceeds `min_site_precision`.
    #[serde(default = "d_active_total")]
    pub active_total: usize,
    /// Gauss-Hermite nodes per axis of the softmax product rule (default 3, the paper's: exact
    /// for polynomials of degree 5 per axis; more for diagnostics, P18). The multi-probit's
    /// 1-D rule sets its own nodes (as many as the integrand needs), so it takes none.
    #[serde(default)]
    pub quadrature_points: Option<usize>,
    /// The fixed intercepts p_c, one per class (empty: all zero).
    #[serde(default)]
    pub intercepts: Vec<f64>,
    /// A pair (j, c) is skipped unless its site precision pi satisfies pi K^c_jj > this (the
    /// paper's epsilon, relative to the prior variance; pi^{-1/2} enters the update).
    #[serde(default = "d_min_site_precision")]
    pub min_site_precision: f64,
}

fn d_active_total() -> usize {
    200
}
fn d_min_site_precision() -> f64 {
    1e-8
}

impl Default for IvmMultiwayParams {
    fn default() -> Self {
        parse_settings(&serde_json::Value::Null).expect("defaults parse")
    }
}

impl IvmMultiwayParams {
    /// Check every rule; the error names the setting.
    pub fn check(self) -> Result<IvmMultiway, String> {
        if self.active_total == 0 {
            return Err("settings.active_total must be at least 1".into());
        }
        if let Some(q) = self.quadrature_points {
            // One node puts all mass at the cavity mean: a zero tilted variance, no site.
            if !(2..=200).contains(&q) {
                return Err(format!("settings.quadrature_points must be in 2..=200, got {q}"));
            }
            if self.likelihood == MultiwayLikelihood::MultiProbit {
                return Err(format!(
                    "settings.quadrature_points ({q}) applies to likelihood: softmax only: the multi-probit's 1-D integral \
                     is computed by an adapted rule that places as many nodes as the integrand needs"
                ));
            }
        }
        if let Some(p) = self.intercepts.iter().find(|p| !p.is_finite()) {
            return Err(format!("settings.intercepts must be finite, got {p}"));
        }
        if !(self.min_site_precision > 0.0 && self.min_site_precision < 1.0) {
            return Err(format!("settings.min_site_precision must be in (0, 1), got {}", self.min_site_precision));
        }
        Ok(IvmMultiway { params: self })
    }

    /// The softmax product rule's nodes per axis.
    pub fn points(&self) -> usize {
        self.quadrature_points.unwrap_or(3)
    }
}

/// The checked method.
#[derive(Clone, Debug)]
pub struct IvmMultiway {
    params: IvmMultiwayParams,
}

/// How a selection run ended.
pub(crate) struct Selected {
    pub mw: Multiway,
    pub stop: StopReason,
    /// Set when fewer than dtot pairs were included because none qualified.
    pub exhausted: bool,
    /// Point scorings whose quadrature gave a non-finite number (no candidate then).
    pub non_finite: usize,
}

impl IvmMultiway {
    /// The likelihood with its rule, for C classes.
    pub(crate) fn likelihood(&self, n_classes: usize) -> FactorisedLik {
        let p = &self.params;
        let intercepts = if p.intercepts.is_empty() { vec![0.0; n_classes] } else { p.intercepts.clone() };
        match p.likelihood {
            MultiwayLikelihood::Softmax => FactorisedLik::softmax(p.points(), intercepts),
            MultiwayLikelihood::MultiProbit => FactorisedLik::multi_probit(intercepts),
        }
    }

    /// Joint greedy selection of up to dtot (point, class) inclusions. `on_inclusion(k, mw)`
    /// runs after inclusion k (from 1); a `FitError::Stop` from it ends the selection there.
    pub(crate) fn select(
        &self,
        kernels: &KernelSet,
        x: &Array2<f64>,
        y: &[usize],
        lik: &FactorisedLik,
        ctx: &mut FitContext,
        mut on_inclusion: impl FnMut(u64, &Multiway, &FitContext) -> Result<(), FitError>,
    ) -> Result<Selected, FitError> {
        let (n, c) = (x.nrows(), lik.n_classes());
        assert_eq!(y.len(), n);
        let mut kdiags = Vec::with_capacity(c);
        for k in 0..c {
            let kd = kernels.class(k).diag(x);
            if let Some(j) = kd.iter().position(|v| !(*v > 0.0 && v.is_finite())) {
                return Err(FitError::Numerical(format!("ivm_multiway: prior variance K^{k}({j}, {j}) = {} is not positive", kd[j])));
            }
            kdiags.push(kd);
        }
        let mut mw = Multiway::prior(kdiags);
        let d_max = self.params.active_total.min(n * c);
        let (mut stop, mut exhausted, mut non_finite) = (StopReason::MaxIterations, false, 0);
        while mw.total() < d_max {
            ctx.check_deadline()?;
            let (choice, bad) = best_inclusion(&mw, lik, y, self.params.min_site_precision);
            non_finite += bad;
            let Some(cand) = choice else {
                exhausted = true;
                stop = StopReason::Converged;
                break;
            };
            let kcol = kernel_column(kernels.class(cand.class), x, cand.index, mw.states[cand.class].kdiag[cand.index]);
            mw.include(cand.class, cand.index, cand.pi, cand.b, &kcol)?;
            match on_inclusion(mw.total() as u64, &mw, ctx) {
                Ok(()) => {}
                Err(FitError::Stop(reason)) => {
                    stop = reason;
                    break;
                }
                Err(e) => return Err(e),
            }
        }
        Ok(Selected { mw, stop, exhausted, non_finite })
    }

    pub(crate) fn model(
        &self,
        kernels: &KernelSet,
        x: &Array2<f64>,
        mw: &Multiway,
        lik: &FactorisedLik,
        diagnostics: Diagnostics,
    ) -> IvmMultiwayModel {
        IvmMultiwayModel {
            classes: mw.states.iter().enumerate().map(|(k, st)| ActiveSetPredictor::from_state(kernels.class(k), x, st)).collect(),
            lik: lik.clone(),
            kernels: kernels.clone(),
            diagnostics,
        }
    }

    fn diagnostics(&self, sel: &Selected, n: usize) -> Diagnostics {
        let mw = &sel.mw;
        let c = mw.n_classes();
        let mut d = Diagnostics {
            iterations: Some(mw.total() as u64),
            stop_reason: Some(sel.stop),
            jitter: Some(mw.states.iter().map(|s| s.chol.jitter()).fold(0.0, f64::max)),
            ..Default::default()
        };
        d.number("active_total", mw.total() as f64)
            .number("variance_floor_hits", mw.states.iter().map(|s| s.floor_hits).sum::<usize>() as f64)
            .number("shared_points", mw.shared_points() as f64)
            .number("non_finite_moments", sel.non_finite as f64);
        for (k, st) in mw.states.iter().enumerate() {
            // 1-based like the kernels' per-class names.
            d.number(&format!("active_size_c{}", k + 1), st.d() as f64);
        }
        let p = &self.params;
        let rule = match p.likelihood {
            MultiwayLikelihood::Softmax => {
                format!("softmax, Gauss-Hermite product rule {}^{c} = {} points", p.points(), p.points().pow(c as u32))
            }
            MultiwayLikelihood::MultiProbit => "multivariate probit, App. D 1-D integral by the adapted rule".to_string(),
        };
        d.note(
            "model",
            format!(
                "factorised multi-way IVM ({rule}; intercepts {}); fixed kernels and intercepts; greedy selection of the lowest Delta over all (point, class) pairs, no randomization",
                if p.intercepts.is_empty() { "0".to_string() } else { format!("{:?}", p.intercepts) }
            ),
        );
        d.note("evidence", "none: the paper has no marginal-likelihood approximation for the factorised multi-way IVM");
        if sel.exhausted {
            d.note(
                "active_set",
                format!(
                    "stopped at dtot = {} < {}: no (point, class) pair with site precision above min_site_precision",
                    mw.total(),
                    p.active_total.min(n * c)
                ),
            );
        }
        if sel.non_finite > 0 {
            d.note("non_finite_moments", format!("{} point scorings gave non-finite tilted moments and were skipped", sel.non_finite));
        }
        d
    }
}

impl Method for IvmMultiway {
    fn name(&self) -> &'static str {
        "ivm_multiway"
    }

    fn supports(&self, shape: &ProblemShape, kernels: &KernelSet, hyper: HyperPolicy) -> Result<(), String> {
        let c = shape.n_classes;
        if c < 2 {
            return Err(format!("ivm_multiway: needs at least two classes, the data have {c}"));
        }
        kernels.check_classes(c, "ivm_multiway")?;
        if hyper == HyperPolicy::Learn {
            return Err("ivm_multiway: fixed hyper-parameters only (hyper: fixed): the paper has no learning criterion for the factorised multi-way IVM (its satimage kernels came from another method, notes P12)".into());
        }
        let p = &self.params;
        if !p.intercepts.is_empty() && p.intercepts.len() != c {
            return Err(format!("ivm_multiway: settings.intercepts has {} entries for {c} classes", p.intercepts.len()));
        }
        if p.likelihood == MultiwayLikelihood::Softmax && (p.points() as f64).powi(c as i32) > MAX_GRID_POINTS {
            return Err(format!(
                "ivm_multiway: settings.quadrature_points {} gives a softmax product rule of {}^{c} points, more than {MAX_GRID_POINTS:e}",
                p.points(),
                p.points()
            ));
        }
        Ok(())
    }

    /// The inclusions.
    fn progress(&self, _shape: &ProblemShape, _hyper: HyperPolicy) -> crate::methods::Progress {
        crate::methods::Progress::both(true)
    }

    fn train(&self, problem: &Problem, kernels: &KernelSet, _: HyperPolicy, ctx: &mut FitContext) -> Result<Box<dyn Fitted>, FitError> {
        let (x, y, c) = (problem.x, problem.y, problem.n_classes);
        let lik = self.likelihood(c);
        let sel = self.select(kernels, x, y, &lik, ctx, |k, mw, ctx| {
            if ctx.wants_checkpoint(k) {
                ctx.checkpoint(k, None, || Ok(Box::new(self.model(kernels, x, mw, &lik, Diagnostics::default())) as Box<dyn Fitted>));
            }
            // The inclusions are the outer iterations a budget counts.
            ctx.budget_stop(k).map_or(Ok(()), |reason| Err(FitError::Stop(reason)))
        })?;
        let diagnostics = self.diagnostics(&sel, x.nrows());
        Ok(Box::new(self.model(kernels, x, &sel.mw, &lik, diagnostics)))
    }
}
