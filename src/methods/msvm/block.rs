//! The exact solution of one datum's sub-problem: minimise
//!     1/2 x^T (a I + b 1 1^T) x - g . x   over  lo <= x_k <= hi  (and, for CS, sum_k x_k <= cap),
//! the form every formulation's block takes (its Hessian is a multiple of the identity plus a
//! multiple of the all-ones matrix). By the KKT conditions x_k = clip((g_k - b t - lambda) / a)
//! with t = sum_k x_k, so the whole block reduces to one monotone piecewise-linear equation in a
//! scalar, solved exactly between its breakpoints (no iteration, no tolerance).

/// Runs `f` on `n` zeroed scratch values: on the stack up to 32 (a block's g and x up to Q = 17
/// classes, its breakpoints and chi values up to Q = 9; the allocations of plain vectors here
/// were a third of a grid search's time on glass, and a returned small vector's copies another
/// tenth), on the heap beyond.
pub(crate) fn with_scratch<R>(n: usize, f: impl FnOnce(&mut [f64]) -> R) -> R {
    const STACK: usize = 32;
    if n <= STACK {
        f(&mut [0.0; STACK][..n])
    } else {
        f(&mut vec![0.0; n])
    }
}

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
            with_scratch(g.len(), |shifted| {
                shifted.iter_mut().zip(g).for_each(|(sk, &gk)| *sk = gk - b * cap);
                let lambda = root(0.0, 1.0, a, shifted, lo, hi, -cap);
                x.iter_mut().zip(&*shifted).for_each(|(xk, &gk)| *xk = clip((gk - lambda) / a));
            });
        }
    }
}

/// The root of chi(s) = w0 s - sum_k clip((g_k - c s) / a, lo, hi) - r, a nondecreasing
/// piecewise-linear function (c != 0): evaluated at its breakpoints, then solved exactly on the
/// linear piece where it changes sign.
///
/// The piece is found without sorting the breakpoints: chi is evaluated at all of them (one
/// loop the compiler vectorises across breakpoints), and the piece's right end is the smallest
/// breakpoint with chi >= 0, its left end the largest breakpoint below that. These are the
/// values a scan of the sorted breakpoints stopping at the first chi >= 0 finds (for any chi
/// as computed, monotone or not in its last bits), so the root is the scan's to the bit; the
/// scan's sort, with its mispredicted branches, was the larger part of an SVM grid search.
fn root(w0: f64, c: f64, a: f64, g: &[f64], lo: f64, hi: f64, r: f64) -> f64 {
    // Room for the breakpoints padded to whole chunks, and chi's values there.
    let room = (2 * g.len()).div_ceil(CHUNK) * CHUNK;
    with_scratch(2 * room, |scratch| {
        let (bps, chi) = scratch.split_at_mut(room);
        root_in(w0, c, a, g, lo, hi, r, bps, chi)
    })
}

/// Breakpoints whose chi values are summed together (in registers: one AVX2 vector).
const CHUNK: usize = 4;

/// [`root`] with scratch space for 2 g.len() breakpoints (`bps`) and chi's values there.
/// Compiled for AVX-512 and AVX2 as well, chosen at run time: IEEE division, min and max give
/// the same bits on every target (and Rust never fuses the multiply and subtract).
#[allow(clippy::too_many_arguments)]
#[multiversion::multiversion(targets("x86_64+avx512f", "x86_64+avx2"))]
fn root_in(w0: f64, c: f64, a: f64, g: &[f64], lo: f64, hi: f64, r: f64, bps: &mut [f64], chi: &mut [f64]) -> f64 {
    // The slope of chi on the piece containing s (free coordinates only move with s).
    let slope_at = |s: f64| {
        let free = g.iter().filter(|&&gk| {
            let v = (gk - c * s) / a;
            v > lo && v < hi
        });
        w0 + c / a * free.count() as f64
    };
    let mut nb = 0;
    for &gk in g {
        for s in [(gk - a * lo) / c, (gk - a * hi) / c] {
            if s.is_finite() {
                bps[nb] = s;
                nb += 1;
            }
        }
    }
    if nb == 0 {
        return 0.0;
    }
    // chi at every breakpoint, the sum over k in g's order from -0.0 (as `Iterator::sum`), a
    // chunk of breakpoints at a time; the chunks' padding (copies of the first breakpoint) is
    // computed and ignored.
    let padded = nb.div_ceil(CHUNK) * CHUNK;
    for j in nb..padded {
        bps[j] = bps[0];
    }
    let term = |gk: f64, s: f64| ((gk - c * s) / a).max(lo).min(hi);
    for (s, v) in bps[..padded].chunks_exact(CHUNK).zip(chi.chunks_exact_mut(CHUNK)) {
        let mut acc = [-0.0; CHUNK];
        for &gk in g {
            for (acc_l, &s_l) in acc.iter_mut().zip(s) {
                *acc_l += term(gk, s_l);
            }
        }
        for ((v_l, &s_l), acc_l) in v.iter_mut().zip(s).zip(acc) {
            *v_l = w0 * s_l - acc_l - r;
        }
    }
    let (bps, chi) = (&bps[..nb], &chi[..nb]);
    // Among equal breakpoints (only -0.0 and 0.0 differ in bits) the sorted, deduplicated list
    // keeps the first in total order: `before` breaks ties the same way.
    let before = |x: f64, y: f64| x < y || (x == y && x.total_cmp(&y).is_lt());
    let mut first = 0;
    let mut last = 0;
    let mut hit: Option<usize> = None;
    for j in 0..nb {
        if before(bps[j], bps[first]) {
            first = j;
        }
        if bps[j] > bps[last] || (bps[j] == bps[last] && before(bps[j], bps[last])) {
            last = j;
        }
        if chi[j] >= 0.0 && hit.is_none_or(|h| before(bps[j], bps[h])) {
            hit = Some(j);
        }
    }
    let Some(h) = hit else {
        // chi < 0 at every breakpoint: the root lies right of the last.
        let slope = slope_at(bps[last] + 1.0);
        return if slope > 0.0 { bps[last] - chi[last] / slope } else { bps[last] };
    };
    let (s1, v1) = (bps[h], chi[h]);
    if v1 == 0.0 {
        return s1;
    }
    // The breakpoint before s1 in sorted order: the largest below it.
    let mut previous: Option<usize> = None;
    for j in 0..nb {
        if bps[j] < s1 && previous.is_none_or(|p| bps[j] > bps[p] || (bps[j] == bps[p] && before(bps[j], bps[p]))) {
            previous = Some(j);
        }
    }
    match previous {
        // Left of every breakpoint: one linear piece.
        None => {
            let slope = slope_at(bps[first] - 1.0);
            if slope > 0.0 {
                bps[first] - v1 / slope
            } else {
                bps[first]
            }
        }
        Some(p) => {
            let (s0, v0) = (bps[p], chi[p]);
            s0 - v0 * (s1 - s0) / (v1 - v0)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{RngExt, SeedableRng};
    use rand_pcg::Pcg64;

    /// The root as first written: sort and deduplicate the breakpoints, scan them in increasing
    /// order to the first with chi >= 0, and interpolate on the piece before it.
    fn root_by_sorted_scan(w0: f64, c: f64, a: f64, g: &[f64], lo: f64, hi: f64, r: f64) -> f64 {
        let chi = |s: f64| w0 * s - g.iter().map(|&gk| ((gk - c * s) / a).max(lo).min(hi)).sum::<f64>() - r;
        let slope_at = |s: f64| w0 + c / a * g.iter().filter(|&&gk| ((gk - c * s) / a) > lo && ((gk - c * s) / a) < hi).count() as f64;
        let mut bps: Vec<f64> = g.iter().flat_map(|&gk| [(gk - a * lo) / c, (gk - a * hi) / c]).filter(|s| s.is_finite()).collect();
        bps.sort_by(f64::total_cmp);
        bps.dedup();
        let Some(&first) = bps.first() else { return 0.0 };
        let mut previous: Option<f64> = None;
        for (j, &s1) in bps.iter().enumerate() {
            let v1 = chi(s1);
            if v1 >= 0.0 {
                return match previous {
                    _ if v1 == 0.0 => s1,
                    None => {
                        let slope = slope_at(first - 1.0);
                        if slope > 0.0 {
                            first - v1 / slope
                        } else {
                            first
                        }
                    }
                    Some(v0) => bps[j - 1] - v0 * (s1 - bps[j - 1]) / (v1 - v0),
                };
            }
            previous = Some(v1);
        }
        let last = *bps.last().unwrap();
        let slope = slope_at(last + 1.0);
        if slope > 0.0 {
            last - previous.unwrap() / slope
        } else {
            last
        }
    }

    #[test]
    fn root_gives_the_sorted_scans_bits_and_a_zero_of_chi() {
        let mut rng = Pcg64::seed_from_u64(11);
        for case in 0..20_000 {
            // Up to 40 breakpoints (the heap path too); values on a coarse grid tie often
            // (equal breakpoints, chi exactly 0 at one).
            let len = 1 + case % 20;
            let coarse = case % 3 == 0;
            let g: Vec<f64> =
                (0..len).map(|_| if coarse { (rng.random_range(-4..5) as f64) * 0.5 } else { rng.random::<f64>() * 6.0 - 3.0 }).collect();
            let a = 0.5 + rng.random::<f64>() * 2.0;
            // The blocks' three shapes: c > 0 (WW, CS's cap), c < 0 with slope > 0 (LLW, MSVM2).
            let (w0, c, hi, r) = match case % 4 {
                0 => (1.0, a * rng.random::<f64>(), 1.0 + rng.random::<f64>(), 0.0),
                1 => (1.0, -a / (len as f64 + 1.0), 1.0 + rng.random::<f64>(), 0.0),
                2 => (1.0, -a / (len as f64 + 1.0) * rng.random::<f64>(), f64::INFINITY, 0.0),
                _ => (0.0, 1.0, f64::INFINITY, -(0.1 + rng.random::<f64>())),
            };
            let (got, want) = (root(w0, c, a, &g, 0.0, hi, r), root_by_sorted_scan(w0, c, a, &g, 0.0, hi, r));
            assert_eq!(got.to_bits(), want.to_bits(), "case {case}: {got} against {want}");
            let chi = w0 * got - g.iter().map(|&gk| ((gk - c * got) / a).clamp(0.0, hi)).sum::<f64>() - r;
            assert!(chi.abs() < 1e-9 * (1.0 + got.abs()), "case {case}: chi(root) = {chi}");
        }
    }
}
