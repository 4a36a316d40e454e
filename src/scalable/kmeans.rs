//! k-means (Lloyd's algorithm from a k-means++ start) for inducing-input initialisation.
//!
//! Written here rather than taken from linfa-clustering: that crate is built on another
//! ndarray major version and its parallel reductions do not promise the same centres on 1 and
//! 2 threads, which a cell's bit-for-bit reproducibility needs. Here the distances come from
//! one matrix product per iteration and every sum runs in a fixed order.
use crate::kernels::view;
use faer::linalg::matmul::matmul;
use faer::{Accum, Mat};
use ndarray::{Array2, Axis};
use rand::RngExt;
use rand_pcg::Pcg64;
use rayon::prelude::*;

/// Centres and the objective (sum of squared distances to the nearest centre) after each
/// Lloyd iteration.
#[derive(Clone, Debug)]
pub struct KMeans {
    pub centres: Array2<f64>,
    pub objective: Vec<f64>,
    pub iterations: usize,
}

/// k-means of the rows of `x`: k-means++ seeding, then Lloyd iterations until no assignment
/// changes or `max_iters`. An empty cluster keeps its centre. Needs 1 <= k <= rows.
pub fn kmeans(x: &Array2<f64>, k: usize, max_iters: usize, rng: &mut Pcg64) -> KMeans {
    lloyd(x, None, k, max_iters, rng)
}

/// Weighted k-means: minimises sum_i w_i |x_i - c(i)|^2 by weighted k-means++ seeding
/// (probability proportional to w_i d_i^2) and weighted Lloyd iterations (centre = weighted
/// mean), until no assignment changes or `max_iters`. Galy-Fajou et al.'s per-class inducing
/// sets weight class c's rows so the class and the rest carry equal mass. A cluster of zero
/// weight keeps its centre. Needs 1 <= k <= rows and weights >= 0 with a positive sum.
pub fn weighted_kmeans(x: &Array2<f64>, w: &[f64], k: usize, max_iters: usize, rng: &mut Pcg64) -> KMeans {
    assert!(w.len() == x.nrows() && w.iter().all(|v| *v >= 0.0) && w.iter().sum::<f64>() > 0.0, "weighted k-means: weights");
    lloyd(x, Some(w), k, max_iters, rng)
}

/// Both k-means: without weights every row weighs exactly 1.0, so the unweighted centres,
/// objective and draws are those of plain k-means bit for bit (the first centre is then drawn
/// uniformly by index, as it always was).
fn lloyd(x: &Array2<f64>, w: Option<&[f64]>, k: usize, max_iters: usize, rng: &mut Pcg64) -> KMeans {
    let n = x.nrows();
    assert!(k >= 1 && k <= n, "k-means: k = {k} centres for {n} points");
    let weight = |i: usize| w.map_or(1.0, |w| w[i]);
    let mut centres = plus_plus(x, w, k, rng);
    let mut assign = vec![usize::MAX; n];
    let mut objective = Vec::new();
    let mut iterations = 0;
    for _ in 0..max_iters {
        let (new_assign, d) = nearest(x, &centres);
        objective.push((0..n).map(|i| weight(i) * d[i]).sum());
        if new_assign == assign {
            break;
        }
        assign = new_assign;
        iterations += 1;
        let mut sums = Array2::<f64>::zeros(centres.dim());
        let mut mass = vec![0.0; k];
        for (i, &c) in assign.iter().enumerate() {
            sums.row_mut(c).scaled_add(weight(i), &x.row(i));
            mass[c] += weight(i);
        }
        for c in 0..k {
            if mass[c] > 0.0 {
                centres.row_mut(c).assign(&(&sums.row(c) / mass[c]));
            }
        }
    }
    KMeans { centres, objective, iterations }
}

/// Squared distance of every row to every centre, [n, k], by |x|^2 + |c|^2 - 2 x.c.
fn sq_dists(x: &Array2<f64>, centres: &Array2<f64>) -> Mat<f64> {
    let xn: Vec<f64> = x.rows().into_iter().map(|r| r.dot(&r)).collect();
    let cn: Vec<f64> = centres.rows().into_iter().map(|r| r.dot(&r)).collect();
    let mut g = Mat::zeros(x.nrows(), centres.nrows());
    matmul(g.as_mut(), Accum::Replace, view(x), view(centres).transpose(), 1.0, crate::linalg::gemm_par());
    Mat::from_fn(x.nrows(), centres.nrows(), |i, c| (xn[i] + cn[c] - 2.0 * g[(i, c)]).max(0.0))
}

/// The nearest centre of each row (first on ties) and the squared distance to it.
fn nearest(x: &Array2<f64>, centres: &Array2<f64>) -> (Vec<usize>, Vec<f64>) {
    let d = sq_dists(x, centres);
    (0..x.nrows())
        .map(|i| (0..centres.nrows()).map(|c| (c, d[(i, c)])).fold((0, f64::INFINITY), |a, b| if b.1 < a.1 { b } else { a }))
        .unzip()
}

/// k-means++ seeding (Arthur & Vassilvitskii 2007), weighted where `w` is given: the first
/// centre uniformly (with probability proportional to w), each next one with probability
/// proportional to (w_i times) the squared distance to the nearest centre so far.
fn plus_plus(x: &Array2<f64>, w: Option<&[f64]>, k: usize, rng: &mut Pcg64) -> Array2<f64> {
    let n = x.nrows();
    let draw = |p: &[f64], rng: &mut Pcg64| -> Option<usize> {
        let total: f64 = p.iter().sum();
        if total <= 0.0 {
            return None;
        }
        let mut u = rng.random_range(0.0..total);
        Some(
            p.iter()
                .position(|&d| {
                    u -= d;
                    u < 0.0
                })
                .unwrap_or(n - 1),
        )
    };
    let first = match w {
        None => rng.random_range(0..n),
        Some(w) => draw(w, rng).expect("positive weights"),
    };
    let mut chosen = vec![first];
    let mut d2: Vec<f64> = vec![f64::INFINITY; n];
    while chosen.len() < k {
        let last = x.row(*chosen.last().expect("one centre"));
        d2.par_iter_mut().enumerate().for_each(|(i, d)| {
            let e: f64 = x.row(i).iter().zip(last.iter()).map(|(a, b)| (a - b) * (a - b)).sum();
            *d = d.min(e);
        });
        let weighted: Vec<f64>;
        let p = match w {
            None => &d2,
            Some(w) => {
                weighted = d2.iter().zip(w).map(|(d, w)| d * w).collect();
                &weighted
            }
        };
        // Every (weighted) point sits on a centre: take any row not yet chosen.
        let next = draw(p, rng).unwrap_or_else(|| (0..n).find(|i| !chosen.contains(i)).expect("k <= n"));
        chosen.push(next);
    }
    x.select(Axis(0), &chosen)
}

/// The exact objective by direct sums (tests check the iterations against it).
pub fn objective(x: &Array2<f64>, centres: &Array2<f64>) -> f64 {
    x.rows()
        .into_iter()
        .map(|r| {
            centres
                .rows()
                .into_iter()
                .map(|c| r.iter().zip(c.iter()).map(|(a, b)| (a - b) * (a - b)).sum::<f64>())
                .fold(f64::INFINITY, f64::min)
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn blobs(rng: &mut Pcg64) -> Array2<f64> {
        let centres = [[0.0, 0.0], [5.0, 5.0], [-5.0, 4.0]];
        Array2::from_shape_fn((300, 2), |(i, d)| centres[i % 3][d] + rng.random_range(-1.0..1.0))
    }

    #[test]
    fn the_objective_never_increases_and_blobs_are_found() {
        let mut rng = Pcg64::seed_from_u64(5);
        let x = blobs(&mut rng);
        let km = kmeans(&x, 3, 100, &mut rng);
        for w in km.objective.windows(2) {
            assert!(w[1] <= w[0] * (1.0 + 1e-12), "objective rose: {:?}", km.objective);
        }
        assert!((objective(&x, &km.centres) - km.objective.last().unwrap()).abs() < 1e-8 * km.objective[0]);
        // Each true centre has a k-means centre within 0.3.
        for t in [[0.0, 0.0], [5.0, 5.0], [-5.0, 4.0]] {
            let near = km.centres.rows().into_iter().any(|c| ((c[0] - t[0]).powi(2) + (c[1] - t[1]).powi(2)).sqrt() < 0.3);
            assert!(near, "no centre near {t:?}: {:?}", km.centres);
        }
    }

    #[test]
    fn weighted_kmeans_with_unit_weights_finds_blobs_and_weights_pull_centres() {
        let mut rng = Pcg64::seed_from_u64(5);
        let x = blobs(&mut rng);
        let km = weighted_kmeans(&x, &vec![1.0; 300], 3, 100, &mut rng);
        for wnd in km.objective.windows(2) {
            assert!(wnd[1] <= wnd[0] * (1.0 + 1e-12), "objective rose: {:?}", km.objective);
        }
        assert!((objective(&x, &km.centres) - km.objective.last().unwrap()).abs() < 1e-8 * km.objective[0]);
        // One centre, weights only on blob 1 (rows i % 3 == 1): the centre is blob 1's mean.
        let w: Vec<f64> = (0..300).map(|i| if i % 3 == 1 { 1.0 } else { 0.0 }).collect();
        let one = weighted_kmeans(&x, &w, 1, 10, &mut rng);
        let mean = x.select(Axis(0), &(0..300).filter(|i| i % 3 == 1).collect::<Vec<_>>()).mean_axis(Axis(0)).unwrap();
        assert!((&one.centres.row(0) - &mean).iter().all(|d| d.abs() < 1e-12), "{:?} vs {mean:?}", one.centres);
    }

    #[test]
    fn same_seed_same_centres_on_one_and_two_threads() {
        let x = blobs(&mut Pcg64::seed_from_u64(6));
        let run = |threads: usize| {
            let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
            pool.install(|| kmeans(&x, 7, 50, &mut Pcg64::seed_from_u64(9)).centres)
        };
        assert_eq!(run(1), run(2));
    }
}
