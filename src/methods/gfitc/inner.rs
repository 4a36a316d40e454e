//! EP on the exact pairwise step factors Theta(f_i^y - f_i^k) under the classes' FITC priors
//! (Kim & Ghahramani 2006 with Naish-Guzman & Holden's FITC): every factor's two sites are
//! one-dimensional, on f_i^y and f_i^k, refined in parallel from cavities of the posterior
//! marginals, damped (0.5, annealed by 0.99 per iteration), until the largest change of a site
//! parameter is below `tol`, each damped step optionally extrapolated by Anderson acceleration
//! (`settings.inner_anderson`, see `run`).
//! A failed iteration (a cavity variance that is not positive) is rolled back and retried with
//! half the damping.
use super::fitc::{ClassFitc, FitcPosterior};
use crate::likelihoods::pairwise_step::{PairSites, Side, Tilted};
use crate::methods::FitError;
use crate::scalable::anderson::Anderson;
use rayon::prelude::*;

/// The inner loop's settings.
#[derive(Clone, Copy, Debug)]
pub(crate) struct InnerSettings {
    pub damping: f64,
    pub damping_decay: f64,
    pub tol: f64,
    pub max_iters: usize,
    /// Anderson acceleration's depth (0: the plain damped iteration).
    pub anderson: usize,
}

/// What the inner loop did.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct InnerReport {
    pub iterations: usize,
    pub converged: bool,
    pub rollbacks: usize,
}

/// The sites' starting values (the authors': precision 1e-2, natural mean 0).
pub(crate) fn initial_sites(n: usize, c: usize, y: &[usize]) -> PairSites {
    let mut s = PairSites::zeros(n, c);
    for (i, &yi) in y.iter().enumerate() {
        for k in (0..c).filter(|&k| k != yi) {
            s.c1y[(i, k)] = 1e-2;
            s.c1k[(i, k)] = 1e-2;
        }
    }
    s
}

/// Per class the summed site precisions and natural means on f^c.
fn totals(sites: &PairSites, y: &[usize], c: usize) -> Vec<(Vec<f64>, Vec<f64>)> {
    (0..c).map(|k| (0..y.len()).map(|i| sites.on_class(i, y[i], k)).unzip()).collect()
}

pub(crate) fn posteriors(classes: &[ClassFitc], sites: &PairSites, y: &[usize]) -> Result<Vec<FitcPosterior>, FitError> {
    let t = totals(sites, y, classes.len());
    (0..classes.len()).into_par_iter().map(|k| classes[k].posterior(&t[k].0, &t[k].1, k)).collect()
}

/// The cavity of one side: the marginal N(m, v) without the site (precision p, natural mean h).
fn cavity(m: f64, v: f64, p: f64, h: f64) -> Option<(f64, f64)> {
    let prec = 1.0 / v - p;
    (prec > 0.0).then(|| (m / v - h) / prec).map(|mean| (mean, 1.0 / prec))
}

/// One parallel refinement of every factor's sites (undamped); `None` when a cavity fails.
fn refine(posts: &[FitcPosterior], sites: &PairSites, y: &[usize]) -> Option<PairSites> {
    let c = posts.len();
    let mut new = sites.clone();
    for (i, &yi) in y.iter().enumerate() {
        for k in (0..c).filter(|&k| k != yi) {
            let (my, vy) = cavity(posts[yi].mean[i], posts[yi].var[i], sites.c1y[(i, k)], sites.c2y[(i, k)])?;
            let (mk, vk) = cavity(posts[k].mean[i], posts[k].var[i], sites.c1k[(i, k)], sites.c2k[(i, k)])?;
            let (sy, sk) = (Side { mean: my, var: vy, fitc_var: 0.0 }, Side { mean: mk, var: vk, fitc_var: 0.0 });
            let t = Tilted::new(sy, sk)?;
            let (ny, nk) = (t.site(sy, 1.0), t.site(sk, -1.0));
            new.c1y[(i, k)] = ny.precision;
            new.c2y[(i, k)] = ny.natural_mean;
            new.c1k[(i, k)] = nk.precision;
            new.c2k[(i, k)] = nk.natural_mean;
        }
    }
    Some(new)
}

/// Run EP from `sites` (warm start) to convergence; `sites` holds the result.
///
/// With `anderson` > 0 each sweep's damped sites G(x) are extrapolated by Anderson
/// acceleration over the last `anderson` sweeps (`scalable::anderson`): the damped parallel
/// update contracts the error by at most the damping each sweep (about 9 sweeps an L-BFGS
/// evaluation on satimage), the accelerated one by much more, and the fixed point and the
/// stopping rule (the damped step's largest site change from the current sites) are the same;
/// the last step is the damped one, as without acceleration. A proposal is taken only where
/// every class's posterior exists and every cavity is valid; otherwise the damped step is, and
/// the history is dropped. There is no further progress safeguard (a valid proposal is taken
/// even if its damped change is larger): in vc2017-gfitc-anderson's and -fig4-anderson's 510
/// fits every inner run converged.
///
/// A damped step is taken only where its posteriors exist and its cavities are valid, too;
/// otherwise the sweep is retried from the same sites with half the damping (the authors'
/// roll-back to the previous approximation). From positive sites this cannot happen in exact
/// arithmetic: the step factors are log-concave, so a refinement's site precisions are
/// positive, damped mixtures keep them so, and a cavity is then the marginal of the prior times
/// the other sites, with a positive precision. An accepted extrapolation may hold negative site
/// precisions, though. Where the check passes, its refinement is the one the next sweep would
/// compute, so it changes no fit that ran before it (no stored GFITC cell failed, and 360 of
/// them recomputed with it are the same to the last bit).
pub(crate) fn run(
    classes: &[ClassFitc],
    y: &[usize],
    sites: &mut PairSites,
    s: InnerSettings,
) -> Result<(Vec<FitcPosterior>, InnerReport), FitError> {
    let mut posts = posteriors(classes, sites, y)?;
    let mut report = InnerReport::default();
    let mut damping = s.damping;
    let mut accel = Anderson::new(s.anderson);
    // The refinement at the current sites, where the acceptance test computed it already.
    let mut refined: Option<PairSites> = None;
    while report.iterations < s.max_iters {
        report.iterations += 1;
        let Some(new) = refined.take().or_else(|| refine(&posts, sites, y)) else {
            report.rollbacks += 1;
            damping *= 0.5;
            if report.rollbacks > 30 {
                return Err(FitError::Numerical("gfitc: a cavity variance stayed negative after 30 roll-backs".into()));
            }
            continue;
        };
        let damped = sites.damped(&new, damping);
        // The authors' convergence measure: the damped step's largest site change (with
        // acceleration too, since an extrapolated step can stall short of the fixed point).
        let change = damped.max_change(sites);
        let converged = change < s.tol;
        let mut accepted = None;
        if s.anderson > 0 && !converged {
            let (proposal, extrapolated) = accel.next(&sites.to_flat(), &damped.to_flat());
            if extrapolated {
                let proposal = sites.shaped_from_flat(&proposal);
                accepted = posteriors(classes, &proposal, y).ok().and_then(|p| refine(&p, &proposal, y).map(|r| (proposal, p, Some(r))));
                if accepted.is_none() {
                    accel.reset();
                }
            }
        }
        let (next, next_posts, next_refined) = match accepted {
            Some(a) => a,
            None => match posteriors(classes, &damped, y).ok().and_then(|p| refine(&p, &damped, y).map(|r| (p, r))) {
                Some((p, r)) => (damped, p, Some(r)),
                None => {
                    report.rollbacks += 1;
                    damping *= 0.5;
                    accel.reset();
                    // The same sites again: their refinement is `new`.
                    refined = Some(new);
                    continue;
                }
            },
        };
        posts = next_posts;
        *sites = next;
        refined = next_refined;
        damping *= s.damping_decay;
        if converged {
            report.converged = true;
            break;
        }
    }
    Ok((posts, report))
}

/// log Z_EP (notes §3.1): over the factors log Z plus, per side, the marginal-cavity terms
/// 1/2 log v\ - 1/2 log v + 1/2 m\^2 / v\ - 1/2 m^2 / v, plus each class's g(theta) - g(prior).
pub(crate) fn log_z(classes: &[ClassFitc], posts: &[FitcPosterior], sites: &PairSites, y: &[usize]) -> Result<f64, FitError> {
    let c = classes.len();
    let t = totals(sites, y, c);
    let mut total: f64 = (0..c).map(|k| classes[k].log_normaliser_gain(&posts[k], &t[k].0, &t[k].1)).sum();
    let fail = || FitError::Numerical("gfitc: a cavity variance is not positive at the final sites".into());
    for (i, &yi) in y.iter().enumerate() {
        for k in (0..c).filter(|&k| k != yi) {
            let mut sides = [Side { mean: 0.0, var: 0.0, fitc_var: 0.0 }; 2];
            for (j, (class, p, h)) in
                [(yi, sites.c1y[(i, k)], sites.c2y[(i, k)]), (k, sites.c1k[(i, k)], sites.c2k[(i, k)])].into_iter().enumerate()
            {
                let (m, v) = (posts[class].mean[i], posts[class].var[i]);
                let (mc, vc) = cavity(m, v, p, h).ok_or_else(fail)?;
                total += 0.5 * (vc.ln() - v.ln()) + 0.5 * (mc * mc / vc - m * m / v);
                sides[j] = Side { mean: mc, var: vc, fitc_var: 0.0 };
            }
            total += Tilted::new(sides[0], sides[1]).ok_or_else(fail)?.log_z;
        }
    }
    Ok(total)
}
