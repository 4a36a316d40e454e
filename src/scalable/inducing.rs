//! Initial inducing inputs Z: a random subset of the training inputs (pooled or per class),
//! or k-means centres (pooled or per class), k-means on a seeded subsample for large sets.
use super::kmeans::{kmeans, weighted_kmeans};
use crate::data::allocate;
use ndarray::{Array2, Axis};
use rand::seq::index::sample;
use rand_pcg::Pcg64;
use serde::{Deserialize, Serialize};

fn default_subsample() -> usize {
    20_000
}
fn default_kmeans_iters() -> usize {
    100
}

/// `inducing: {init: ...}` of a sparse method.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "init", rename_all = "snake_case", deny_unknown_fields)]
pub enum InducingInit {
    /// M training inputs drawn without replacement; `per_class`: each class gives its share
    /// of M in proportion to its size (largest remainder, at least one per class present).
    Random {
        #[serde(default)]
        per_class: bool,
    },
    /// k-means centres of at most `subsample` random training inputs; `per_class` (class-
    /// weighted k-means): each class's share of M from k-means on that class's rows.
    Kmeans {
        #[serde(default)]
        per_class: bool,
        #[serde(default = "default_subsample")]
        subsample: usize,
        #[serde(default = "default_kmeans_iters")]
        max_iters: usize,
    },
}

impl Default for InducingInit {
    fn default() -> Self {
        InducingInit::Kmeans { per_class: false, subsample: default_subsample(), max_iters: default_kmeans_iters() }
    }
}

/// M for `n` training rows: `fraction` of them rounded (at least 1, at most n) when given
/// (Villacampa-Calvo & Hernandez-Lobato's 5%, 10%, 20%), else `m`.
pub fn count(m: usize, fraction: Option<f64>, n: usize) -> usize {
    match fraction {
        Some(f) => ((f * n as f64).round() as usize).clamp(1, n),
        None => m,
    }
}

/// How the length-scales start (`lengthscale_init`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LengthscaleInit {
    /// As the spec's kernel gives it.
    #[default]
    Kernel,
    /// The median pairwise distance between the initial inducing inputs (every length-scale;
    /// the authors' `estimateL` in Villacampa-Calvo & Hernandez-Lobato's code): on inputs like
    /// standardised MNIST, where pairwise distances are about 40, a length-scale of 1 makes
    /// every cross-covariance vanish.
    MedianInducing,
}

/// Every length-scale of `kernels` set to the median pairwise distance of the rows of `z`.
pub fn with_median_lengthscales(kernels: &crate::kernels::KernelSet, z: &Array2<f64>) -> crate::kernels::KernelSet {
    let l = median_distance(z).max(1e-6);
    let names = kernels.param_names();
    let mut p = kernels.log_params();
    for (v, name) in p.iter_mut().zip(&names) {
        if crate::kernels::is_lengthscale(name) {
            *v = l.ln();
        }
    }
    kernels.with_log_params(&p)
}

/// The median Euclidean distance over all pairs of rows (1 for fewer than two rows).
pub fn median_distance(z: &Array2<f64>) -> f64 {
    let m = z.nrows();
    let mut d: Vec<f64> =
        (0..m).flat_map(|i| (0..i).map(move |j| (i, j))).map(|(i, j)| (&z.row(i) - &z.row(j)).mapv(|v| v * v).sum().sqrt()).collect();
    if d.is_empty() {
        return 1.0;
    }
    let mid = d.len() / 2;
    let (_, v, _) = d.select_nth_unstable_by(mid, f64::total_cmp);
    *v
}

/// What initialisation did, for the cell's diagnostics.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct InitReport {
    /// Training rows k-means ran on (0 for a random subset).
    pub kmeans_rows: usize,
    pub kmeans_iterations: usize,
}

/// M initial inducing inputs from the training inputs `x` with classes `y`.
pub fn initial_inducing(
    x: &Array2<f64>,
    y: &[usize],
    n_classes: usize,
    m: usize,
    init: &InducingInit,
    rng: &mut Pcg64,
) -> Result<(Array2<f64>, InitReport), String> {
    let n = x.nrows();
    if m == 0 || m > n {
        return Err(format!("{m} inducing inputs for {n} training rows: need 1 <= M <= N"));
    }
    let groups: Vec<Vec<usize>> = match init {
        InducingInit::Random { per_class: true } | InducingInit::Kmeans { per_class: true, .. } => {
            let mut g = vec![Vec::new(); n_classes];
            y.iter().enumerate().for_each(|(i, &c)| g[c].push(i));
            g.retain(|g| !g.is_empty());
            if m < g.len() {
                return Err(format!("per-class inducing inputs: M = {m} is fewer than the {} classes present", g.len()));
            }
            g
        }
        _ => vec![(0..n).collect()],
    };
    // Every group present gets at least one: allocate M - groups, then add one each.
    let sizes: Vec<usize> = groups.iter().map(|g| g.len()).collect();
    let extra = allocate(m - groups.len(), &sizes.iter().map(|s| s - 1).collect::<Vec<_>>());
    let shares: Vec<usize> = extra.iter().map(|e| e + 1).collect();
    let mut report = InitReport::default();
    let mut parts = Vec::new();
    for (rows, &k) in groups.iter().zip(&shares) {
        match init {
            InducingInit::Random { .. } => {
                let pick: Vec<usize> = sample(rng, rows.len(), k).into_iter().map(|i| rows[i]).collect();
                parts.push(x.select(Axis(0), &pick));
            }
            InducingInit::Kmeans { subsample, max_iters, .. } => {
                let used: Vec<usize> = if rows.len() > *subsample {
                    let mut s: Vec<usize> = sample(rng, rows.len(), *subsample).into_iter().map(|i| rows[i]).collect();
                    s.sort_unstable();
                    s
                } else {
                    rows.clone()
                };
                let km = kmeans(&x.select(Axis(0), &used), k.min(used.len()), *max_iters, rng);
                report.kmeans_rows += used.len();
                report.kmeans_iterations = report.kmeans_iterations.max(km.iterations);
                parts.push(km.centres);
            }
        }
    }
    let views: Vec<_> = parts.iter().map(|p| p.view()).collect();
    let z = ndarray::concatenate(Axis(0), &views).map_err(|e| e.to_string())?;
    Ok((z, report))
}

/// One set of M inducing inputs per class by class-weighted k-means (Galy-Fajou et al. 2018's
/// authors' code): for class c, k-means of the training inputs with weight N/N_c - 1 on class
/// c's rows and 1 on the others, so the class and the rest carry equal mass and the centres
/// crowd where class c's function changes. k-means runs on at most `subsample` random rows
/// (one subsample for all classes; weights from its class counts). With M >= N every class
/// gets Z = X (all rows, in order): nothing to summarise.
pub fn class_weighted_inducing(
    x: &Array2<f64>,
    y: &[usize],
    n_classes: usize,
    m: usize,
    subsample: usize,
    max_iters: usize,
    rng: &mut Pcg64,
) -> Result<(Vec<Array2<f64>>, InitReport), String> {
    let n = x.nrows();
    if m == 0 {
        return Err("class-weighted inducing inputs: M = 0".into());
    }
    if m >= n {
        return Ok((vec![x.clone(); n_classes], InitReport::default()));
    }
    let used: Vec<usize> = if n > subsample.max(m) {
        let mut s: Vec<usize> = sample(rng, n, subsample.max(m)).into_vec();
        s.sort_unstable();
        s
    } else {
        (0..n).collect()
    };
    let xs = x.select(Axis(0), &used);
    let ys: Vec<usize> = used.iter().map(|&i| y[i]).collect();
    let mut report = InitReport { kmeans_rows: used.len(), kmeans_iterations: 0 };
    let mut sets = Vec::with_capacity(n_classes);
    for c in 0..n_classes {
        let nc = ys.iter().filter(|&&v| v == c).count();
        // A class absent from the rows, or the only class present: plain k-means.
        let wc = if nc == 0 || nc == ys.len() { 1.0 } else { ys.len() as f64 / nc as f64 - 1.0 };
        let w: Vec<f64> = ys.iter().map(|&v| if v == c { wc } else { 1.0 }).collect();
        let km = weighted_kmeans(&xs, &w, m, max_iters, rng);
        report.kmeans_iterations = report.kmeans_iterations.max(km.iterations);
        sets.push(km.centres);
    }
    Ok((sets, report))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn shares_follow_class_sizes_and_rows_come_from_the_data() {
        let x = Array2::from_shape_fn((40, 2), |(i, d)| (i * 2 + d) as f64);
        let y: Vec<usize> = (0..40).map(|i| if i < 30 { 0 } else { 1 }).collect();
        let mut rng = Pcg64::seed_from_u64(1);
        let (z, _) = initial_inducing(&x, &y, 2, 8, &InducingInit::Random { per_class: true }, &mut rng).unwrap();
        assert_eq!(z.nrows(), 8);
        let class_of = |r: ndarray::ArrayView1<f64>| if r[0] < 60.0 { 0 } else { 1 };
        let from_0 = z.rows().into_iter().filter(|r| class_of(*r) == 0).count();
        assert_eq!(from_0, 6, "30:10 rows give 6:2 of 8");
        for r in z.rows() {
            assert!(x.rows().into_iter().any(|xr| xr == r));
        }
        let (z, report) =
            initial_inducing(&x, &y, 2, 5, &InducingInit::Kmeans { per_class: false, subsample: 20, max_iters: 50 }, &mut rng).unwrap();
        assert_eq!((z.nrows(), report.kmeans_rows), (5, 20));
        assert!(initial_inducing(&x, &y, 2, 41, &InducingInit::default(), &mut rng).is_err());
    }

    #[test]
    fn class_weighted_sets_lean_towards_their_class() {
        // Class 0 on the left (x < 0), class 1 on the right; 10 of 60 rows are class 1.
        let x = Array2::from_shape_fn((60, 1), |(i, _)| if i < 50 { -1.0 - i as f64 / 50.0 } else { 1.0 + (i - 50) as f64 / 10.0 });
        let y: Vec<usize> = (0..60).map(|i| usize::from(i >= 50)).collect();
        let mut rng = Pcg64::seed_from_u64(3);
        let (sets, report) = class_weighted_inducing(&x, &y, 2, 4, 1000, 100, &mut rng).unwrap();
        assert_eq!((sets.len(), sets[0].nrows(), report.kmeans_rows), (2, 4, 60));
        // Class 1 has weight 60/10 - 1 = 5 per row: its rows carry half the mass, so about half
        // the centres sit on the right; unweighted it would get 1 of 4.
        let right = |z: &Array2<f64>| z.iter().filter(|v| **v > 0.0).count();
        assert!(right(&sets[1]) >= 2, "{:?}", sets[1]);
        assert!(right(&sets[0]) >= 1, "class 0: weight 60/50 - 1 = 0.2 on its own rows, {:?}", sets[0]);
        let (all, _) = class_weighted_inducing(&x, &y, 2, 60, 1000, 100, &mut rng).unwrap();
        assert_eq!(all[1], x, "M >= N: Z = X");
    }
}
