//! The exact solution of one datum's sub-problem: minimise
//!     1/2 x^T (a I + b 1 1^T) x - g . x   over  lo <= x_k <= hi  (and, for CS, sum_k x_k <= cap),
//! the form every formulation's block takes (its Hessian is a multiple of the identity plus a
//! multiple of the all-ones matrix). By the KKT conditions x_k = clip((g_k - b t - lambda) / a)
//! with t = sum_k x_k, so the whole block reduces to one monotone piecewise-linear equation in a
//! scalar, solved exactly between its breakpoints (no iteration, no tolerance).

use smallvec::SmallVec;

/// A block's values: at most 2 (Q - 1) breakpoints, on the stack for Q <= 9 (the allocations of
/// plain vectors here were a third of a grid search's time on glass), spilling to the heap beyond.
pub(crate) type BlockVec = SmallVec<[f64; 16]>;

/// Bounds and the optional sum cap of a block.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct BlockBounds {
    pub lo: f64,
    /// `f64::INFINITY` for no upper bound.
    pub hi: f64,
    /// sum_k x_k <= cap (Crammer-Singer's sum_k alpha_ik <= C).
    pub cap: Option<f64>,
}

/// argmin of 1/2 x^T (a I + b J) x - g . x over the bounds. Requires a > 0 and a + b m > 0 for
/// every m <= g.len() (the Hessian positive definite on every face), which each formulation's
/// block satisfies.
pub(crate) fn solve_block(a: f64, b: f64, g: &[f64], bounds: BlockBounds) -> BlockVec {
    debug_assert!(a > 0.0 && a + b.min(0.0) * g.len() as f64 > 0.0, "block Hessian not positive definite: a {a}, b {b}");
    let BlockBounds { lo, hi, cap } = bounds;
    let clip = |v: f64| v.max(lo).min(hi);
    // Without the cap: t = sum_k clip((g_k - b t) / a), i.e. the root of t - sum(...) (slope
    // 1 + (b / a) #free > 0).
    let t = if b == 0.0 { g.iter().map(|&gk| clip(gk / a)).sum() } else { root(1.0, b, a, g, lo, hi, 0.0) };
    let x: BlockVec = g.iter().map(|&gk| clip((gk - b * t) / a)).collect();
    match cap {
        Some(cap) if x.iter().sum::<f64>() > cap => {
            // The cap is active: t = cap and lambda > 0 with sum_k clip((g_k - b cap - lambda) / a) = cap,
            // the root of -sum(...) + cap in lambda (slope #free / a >= 0).
            let shifted: BlockVec = g.iter().map(|&gk| gk - b * cap).collect();
            let lambda = root(0.0, 1.0, a, &shifted, lo, hi, -cap);
            shifted.iter().map(|&gk| clip((gk - lambda) / a)).collect()
        }
        _ => x,
    }
}

/// The root of chi(s) = w0 s - sum_k clip((g_k - c s) / a, lo, hi) - r, a nondecreasing
/// piecewise-linear function (c != 0): evaluated at its breakpoints, then solved exactly on the
/// linear piece where it changes sign.
fn root(w0: f64, c: f64, a: f64, g: &[f64], lo: f64, hi: f64, r: f64) -> f64 {
    let chi = |s: f64| w0 * s - g.iter().map(|&gk| ((gk - c * s) / a).max(lo).min(hi)).sum::<f64>() - r;
    // The slope of chi on the piece containing s (free coordinates only move with s).
    let slope_at = |s: f64| {
        let free = g.iter().filter(|&&gk| {
            let v = (gk - c * s) / a;
            v > lo && v < hi
        });
        w0 + c / a * free.count() as f64
    };
    let mut bps: BlockVec = g.iter().flat_map(|&gk| [(gk - a * lo) / c, (gk - a * hi) / c]).filter(|s| s.is_finite()).collect();
    bps.sort_by(f64::total_cmp);
    bps.dedup();
    let Some(&first) = bps.first() else { return 0.0 };
    let values: BlockVec = bps.iter().map(|&s| chi(s)).collect();
    match values.iter().position(|&v| v >= 0.0) {
        Some(j) if values[j] == 0.0 => bps[j],
        Some(0) => {
            // Left of every breakpoint: one linear piece.
            let slope = slope_at(first - 1.0);
            if slope > 0.0 {
                first - values[0] / slope
            } else {
                first
            }
        }
        Some(j) => {
            let (s0, s1, v0, v1) = (bps[j - 1], bps[j], values[j - 1], values[j]);
            s0 - v0 * (s1 - s0) / (v1 - v0)
        }
        None => {
            let last = *bps.last().expect("non-empty");
            let slope = slope_at(last + 1.0);
            if slope > 0.0 {
                last - values[values.len() - 1] / slope
            } else {
                last
            }
        }
    }
}
