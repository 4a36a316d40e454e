//! Greedy forward selection of the next active point (Seeger, Lawrence & Herbrich §3.2, eq. 5,
//! Algorithm 1; notes §2.4, §2.5).
//!
//! Every candidate j (not active, so its marginal N(h_j, a_j) is its cavity) is scored by its
//! would-be ADF update. Eq. 5's score is Delta_j = -KL[Q'(u_j) || Q(u_j)] <= 0, and the point
//! to include is the one that MINIMISES it (the text, the randomized variant's "lowest scores"
//! and the multi-way rule all say so; Algorithm 1's printed argmax is a typo that would pick
//! the least informative point, notes P1). Here the gain KL_j = -Delta_j is maximised, which is
//! the same choice. Candidates whose new site precision is not above `eps` K_jj are skipped
//! (pi^{-1/2} enters the update); ties go to the smallest index.
use super::state::IvmState;
use super::SiteLik;
use crate::likelihoods::univariate::CavityMoments;
use serde::{Deserialize, Serialize};

/// What a candidate is scored by.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Criterion {
    /// Eq. 5: the information gain KL[Q'(u_j) || Q(u_j)] (depends on y_j and the mean shift).
    #[default]
    InfoGain,
    /// Lawrence et al. (2003)'s differential-entropy score H[Q(u_j)] - H[Q'(u_j)]: the point
    /// whose variance shrinks most.
    Entropy,
}

/// Which points are scored at each inclusion.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Selection {
    /// Every point not yet active.
    #[default]
    Greedy,
    /// A fresh uniform random subset of `candidates` non-active points per inclusion (drawn
    /// from the fit's seeded generator); all of them when fewer remain.
    Randomized,
    /// The paper's memory-bounded randomized greedy selection (§3.2; notes §2.5, used for
    /// MNIST): the representation is kept for a selection index J (plus the active set), every
    /// point of J is scored at each inclusion, and J is narrowed after every block of `block`
    /// inclusions so that its stub rows fit `memory_entries` numbers: of the m' points kept,
    /// the fraction `keep_best` with the largest gains, the rest drawn uniformly from the others
    /// (the fit's seeded generator). J only shrinks; eq. 11 and its gradient then sum over J~ =
    /// J + I, as the paper's criterion does.
    Schedule,
}

/// The size m' a selection index is narrowed to after a block (notes §2.5's recommendation):
/// as large as the memory allows for the next block, |J~| (d + k) <= B, but never below B / d_final,
/// the size the final active set's stub rows may take; never larger than it is.
pub(crate) fn schedule_size(remaining: usize, d: usize, block: usize, d_final: usize, memory_entries: usize) -> usize {
    let floor = memory_entries / d_final.max(1);
    let room = memory_entries / (d + block).max(1);
    floor.max(remaining.min(room)).min(remaining)
}

/// The gain of including a point with these moments under its marginal N(h, a), or `None`
/// when it is not a valid inclusion (site precision not above `min_pi`, or a non-finite value).
pub(crate) fn gain(m: &CavityMoments, h: f64, a: f64, criterion: Criterion, min_pi: f64) -> Option<f64> {
    let (pi, b) = m.site(h, a)?;
    if !(pi > min_pi && pi.is_finite() && b.is_finite()) {
        return None;
    }
    let g = match criterion {
        Criterion::InfoGain => m.info_gain(a),
        Criterion::Entropy => m.entropy_drop(a),
    };
    g.is_finite().then_some(g)
}

/// The chosen point, its moments and its gain.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Choice {
    pub index: usize,
    pub moments: CavityMoments,
    pub gain: f64,
}

/// The candidate of largest gain (= smallest eq. 5 score); `candidates` in ascending order so
/// that ties go to the smallest index. `eps` is relative to K_jj: pi'_j K_jj > eps.
pub(crate) fn best_candidate(
    state: &IvmState,
    lik: SiteLik,
    targets: &[f64],
    candidates: &[usize],
    criterion: Criterion,
    eps: f64,
) -> Option<Choice> {
    let mut best: Option<Choice> = None;
    for &j in candidates {
        let moments = state.moments(lik, targets, j);
        let Some(g) = gain(&moments, state.h[j], state.a[j], criterion, eps / state.kdiag[j]) else { continue };
        if best.is_none_or(|b| g > b.gain) {
            best = Some(Choice { index: j, moments, gain: g });
        }
    }
    best
}
