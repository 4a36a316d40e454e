//! The C per-class IVM representations and the joint greedy selection of (point, class) pairs
//! (Seeger, Lawrence & Herbrich §4.1; notes §5.2).
//!
//! Each class c keeps its own `IvmState` (the binary IVM's stub-matrix representation, with
//! its own kernel and active set I_c). One inclusion: every point j of the common selection
//! index J (all training points; a point already in some I_c' stays a candidate for the other
//! classes) gets its cavity (each class's marginal of u_{j,c}, with j's site component divided
//! out where j is active), the C-dimensional tilted moments under it (one quadrature serves
//! every class), and for each class c with j not in I_c the eq. 7 site and its score
//! Delta_{j,c}. The pair of LOWEST score is included: j into I_c only, with that site; the site
//! components j has in other classes are left as they are (the notes' recommended reading of
//! §4.1, P11: each component is set once). Pairs whose site precision is not above
//! `eps / K^c_jj` are skipped. Ties go to the smallest j, then the smallest c.
use super::sites::{cavity, delta_score, eq7_site};
use crate::likelihoods::factorised::FactorisedLik;
use crate::methods::ivm::state::IvmState;
use crate::methods::FitError;
use rayon::prelude::*;

/// The representations of all classes and where each point's site sits in them.
#[derive(Clone, Debug)]
pub(crate) struct Multiway {
    pub states: Vec<IvmState>,
    /// `site_of[c][j]`: the position of j in I_c, if active there.
    pub site_of: Vec<Vec<Option<usize>>>,
}

impl Multiway {
    /// The prior of every class: no active point.
    pub fn prior(kdiags: Vec<Vec<f64>>) -> Multiway {
        let n = kdiags.first().map_or(0, |k| k.len());
        let site_of = vec![vec![None; n]; kdiags.len()];
        Multiway { states: kdiags.into_iter().map(IvmState::prior).collect(), site_of }
    }

    pub fn n(&self) -> usize {
        self.states[0].n()
    }

    pub fn n_classes(&self) -> usize {
        self.states.len()
    }

    /// dtot = sum_c d_c.
    pub fn total(&self) -> usize {
        self.states.iter().map(|s| s.d()).sum()
    }

    /// j's site component (pi, b) in class c, if j is active there.
    pub fn site(&self, c: usize, j: usize) -> Option<(f64, f64)> {
        self.site_of[c][j].map(|k| (self.states[c].pi[k], self.states[c].b[k]))
    }

    /// The factorised cavity of point j: means and variances per class.
    pub fn cavity(&self, j: usize) -> Option<(Vec<f64>, Vec<f64>)> {
        let c = self.n_classes();
        let (mut h, mut a) = (vec![0.0; c], vec![0.0; c]);
        for k in 0..c {
            let st = &self.states[k];
            (h[k], a[k]) = cavity(st.h[j], st.a[j], self.site(k, j))?;
        }
        Some((h, a))
    }

    /// Include point j into class c's representation with the site (pi, b).
    pub fn include(&mut self, c: usize, j: usize, pi: f64, b: f64, kcol: &[f64]) -> Result<(), FitError> {
        if self.site_of[c][j].is_some() {
            return Err(FitError::Numerical(format!("ivm_multiway: point {j} is already active in class {c}")));
        }
        let pos = self.states[c].d();
        self.states[c].include_site(j, pi, b, kcol)?;
        self.site_of[c][j] = Some(pos);
        Ok(())
    }

    /// Points active in more than one class.
    pub fn shared_points(&self) -> usize {
        (0..self.n()).filter(|&j| self.site_of.iter().filter(|s| s[j].is_some()).count() > 1).count()
    }
}

/// A scored inclusion of point `index` into class `class`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Candidate {
    pub index: usize,
    pub class: usize,
    pub pi: f64,
    pub b: f64,
    /// Delta_{j,c} <= 0 (lower is more informative).
    pub delta: f64,
}

/// What scoring one point gives: its best class, or none; and whether its quadrature gave a
/// non-finite number (it is then no candidate, and the fit counts it).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct PointScore {
    pub best: Option<Candidate>,
    pub non_finite: bool,
}

/// Every class's score of point j (`None` where j is active in c or the site is not
/// admissible), and the point's outcome.
pub(crate) fn score_point(mw: &Multiway, lik: &FactorisedLik, y: usize, j: usize, eps: f64) -> (Vec<Option<Candidate>>, PointScore) {
    let c = mw.n_classes();
    let mut scores = vec![None; c];
    if (0..c).all(|k| mw.site_of[k][j].is_some()) {
        return (scores, PointScore { best: None, non_finite: false });
    }
    let Some((h, a)) = mw.cavity(j) else { return (scores, PointScore { best: None, non_finite: true }) };
    let t = lik.tilted(y, &h, &a);
    if !t.is_finite() {
        return (scores, PointScore { best: None, non_finite: true });
    }
    let mut best: Option<Candidate> = None;
    for k in 0..c {
        if mw.site_of[k][j].is_some() {
            continue;
        }
        let (pi, b) = eq7_site(h[k], a[k], t.mean[k], t.var[k]);
        if !(pi * mw.states[k].kdiag[j] > eps && pi.is_finite() && b.is_finite()) {
            continue;
        }
        let delta = delta_score(h[k], a[k], t.mean[k], pi);
        if !delta.is_finite() {
            continue;
        }
        let cand = Candidate { index: j, class: k, pi, b, delta };
        scores[k] = Some(cand);
        if best.is_none_or(|bc| delta < bc.delta) {
            best = Some(cand);
        }
    }
    (scores, PointScore { best, non_finite: false })
}

/// The inclusion of lowest Delta over all points and classes, and how many points had a
/// non-finite quadrature. Points are scored in parallel (each independently, collected in
/// order, so the choice does not depend on the number of threads).
pub(crate) fn best_inclusion(mw: &Multiway, lik: &FactorisedLik, y: &[usize], eps: f64) -> (Option<Candidate>, usize) {
    let scored: Vec<PointScore> = (0..mw.n()).into_par_iter().with_min_len(64).map(|j| score_point(mw, lik, y[j], j, eps).1).collect();
    let mut best: Option<Candidate> = None;
    let mut non_finite = 0;
    for s in &scored {
        non_finite += s.non_finite as usize;
        if let Some(cand) = s.best {
            if best.is_none_or(|b| cand.delta < b.delta) {
                best = Some(cand);
            }
        }
    }
    (best, non_finite)
}
