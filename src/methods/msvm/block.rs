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
pub(crate) fn solve_block(a: f64, b: f64, g: &[f64], bounds: BlockBounds, x: &mut [f64]) {
    debug_assert!(a > 0.0 && a + b.min(0.0) * g.len() as f64 > 0.0, "block Hessian not positive definite: a {a}, b {b}");
    assert_eq!(x.len(), g.len());
    let BlockBounds { lo, hi, cap } = bounds;
    let clip = |v: f64| v.max(lo).min(hi);
    // Without the cap: t = sum_k clip((g_k - b t) / a), i.e. the root of t - sum(...) (slope
    // 1 + (b / a) #free > 0).
    let t = if b == 0.0 { g.iter().map(|&gk| clip(gk / a)).sum() } else { root(1.0, b, a, g, lo, hi, 0.0) };
    x.iter_mut().zip(g).for_each(|(xk, &gk)| *xk = clip((gk - b * t) / a));
    if let Some(cap) = cap {
        if x.iter().sum::<f64>() > cap {
            // The cap is active: t = cap and lambda > 0 with sum_k clip((g_k - b cap - lambda) / a) = cap,
            // the root of -sum(...) + cap in lambda (slope #free / a >= 0).
            let shifted: BlockVec = g.iter().map(|&gk| gk - b * cap).collect();
            let lambda = root(0.0, 1.0, a, &shifted, lo, hi, -cap);
            x.iter_mut().zip(&shifted).for_each(|(xk, &gk)| *xk = clip((gk - lambda) / a));
        }
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
    let mut bps = BlockVec::new();
    for &gk in g {
        for s in [(gk - a * lo) / c, (gk - a * hi) / c] {
            if s.is_finite() {
                bps.push(s);
            }
        }
    }
    bps.sort_by(f64::total_cmp);
    bps.dedup();
    let Some(&first) = bps.first() else { return 0.0 };
    // chi at the breakpoints in increasing order, up to the first where it is >= 0 (evaluated
    // lazily: the same values as evaluating all, about half the work).
    let mut previous: Option<f64> = None;
    for (j, &s1) in bps.iter().enumerate() {
        let v1 = chi(s1);
        if v1 >= 0.0 {
            return match previous {
                _ if v1 == 0.0 => s1,
                // Left of every breakpoint: one linear piece.
                None => {
                    let slope = slope_at(first - 1.0);
                    if slope > 0.0 {
                        first - v1 / slope
                    } else {
                        first
                    }
                }
                Some(v0) => {
                    let s0 = bps[j - 1];
                    s0 - v0 * (s1 - s0) / (v1 - v0)
                }
            };
        }
        previous = Some(v1);
    }
    let last = *bps.last().expect("non-empty");
    let slope = slope_at(last + 1.0);
    if slope > 0.0 {
        last - previous.expect("non-empty") / slope
    } else {
        last
    }
}
