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
    /// One set per class by class-weighted k-means (`class_weighted_inducing`, Galy-Fajou et
    /// al.'s authors' code, also their SEP-MGPC's sets).
    ClassWeighted {
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

/// The inducing sets of a sparse method: one set of M drawn by `init` and shared by every class,
/// or (`per_class`) one per class drawn independently; `class_weighted` gives one per class by
/// construction and so needs `per_class`.
pub fn inducing_sets(
    x: &Array2<f64>,
    y: &[usize],
    n_classes: usize,
    m: usize,
    init: &InducingInit,
    per_class: bool,
    rng: &mut Pcg64,
) -> Result<(Vec<Array2<f64>>, InitReport), String> {
    if let InducingInit::ClassWeighted { subsample, max_iters } = init {
        if !per_class {
            return Err("inducing_init: class_weighted gives one set per class, so it needs one inducing set per class".into());
        }
        return class_weighted_inducing(x, y, n_classes, m, *subsample, *max_iters, rng);
    }
    if let InducingInit::Kmeans { subsample, .. } = init {
        // k-means on fewer rows than M would give fewer than M centres, a smaller model than
        // the spec asks for, silently.
        if *subsample < m.min(x.nrows()) {
            return Err(format!(
                "inducing_init.subsample ({subsample}) must be at least M ({m}): k-means on fewer rows gives fewer than M centres"
            ));
        }
    }
    let sets = if per_class { n_classes } else { 1 };
    let mut zs = Vec::with_capacity(sets);
    let mut report = InitReport::default();
    for _ in 0..sets {
        let (z, r) = initial_inducing(x, y, n_classes, m, init, rng)?;
        report.kmeans_rows += r.kmeans_rows;
        report.kmeans_iterations = report.kmeans_iterations.max(r.kmeans_iterations);
        zs.push(z);
    }
    Ok((zs, report))
}

/// How the length-scales start (`lengthscale_init`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LengthscaleInit {
    /// As the spec's kernel gives it.
    #[default]
    Kernel,
    /// The median pairwise distance between the initial inducing inputs (every length-scale):
    /// on inputs like standardised MNIST, where pairwise distances are about 40, a length-scale
    /// of 1 makes every cross-covariance vanish. Named after `estimateL` in Villacampa-Calvo &
    /// Hernandez-Lobato's code, which computes this median but uses it as a squared
    /// length-scale, and which their MNIST scripts bypass (they start as `SqrtMedianTraining`).
    MedianInducing,
    /// The median pairwise distance between at most 10,000 random training inputs (every
    /// length-scale; Galy-Fajou et al.'s authors' initialisation for SC-MGPC and SVI-MGPC,
    /// notes §5.4).
    MedianTraining,
    /// The square root of that median over the training inputs (every length-scale): the start
    /// of Villacampa-Calvo & Hernandez-Lobato's released Satellite scripts (GFITC, EP, SEP and
    /// VI alike), whose kernel divides the inputs by sqrt(l), so that their l, set to the median
    /// distance, is a squared length-scale. (R's median averages the two middle distances of an
    /// even count; this takes the upper one.)
    SqrtMedianTraining,
}

impl LengthscaleInit {
    /// The default (for settings that leave it out of their serialised form and cell key).
    pub fn is_kernel(&self) -> bool {
        *self == LengthscaleInit::Kernel
    }
}

/// Rows the `median_training` length-scale is computed on at most (the authors' 10,000).
const MEDIAN_TRAINING_ROWS: usize = 10_000;

/// `kernels` with the length-scales `init` asks for, from the initial inducing sets `zs` (the
/// first one) or a random subsample of the training inputs `x` drawn with `rng`.
pub fn initial_kernels(
    kernels: &crate::kernels::KernelSet,
    init: LengthscaleInit,
    zs: &[Array2<f64>],
    x: &Array2<f64>,
    rng: &mut Pcg64,
) -> crate::kernels::KernelSet {
    match init {
        LengthscaleInit::Kernel => kernels.clone(),
        LengthscaleInit::MedianInducing => with_lengthscales(kernels, median_distance(&zs[0])),
        LengthscaleInit::MedianTraining => with_lengthscales(kernels, median_training_distance(x, rng)),
        LengthscaleInit::SqrtMedianTraining => with_lengthscales(kernels, median_training_distance(x, rng).sqrt()),
    }
}

/// The median pairwise distance of at most `MEDIAN_TRAINING_ROWS` random rows of `x` (all of
/// them when there are no more; `rng` is then not drawn from).
fn median_training_distance(x: &Array2<f64>, rng: &mut Pcg64) -> f64 {
    if x.nrows() <= MEDIAN_TRAINING_ROWS {
        median_distance(x)
    } else {
        let mut rows = sample(rng, x.nrows(), MEDIAN_TRAINING_ROWS).into_vec();
        rows.sort_unstable();
        median_distance(&x.select(Axis(0), &rows))
    }
}

/// Every length-scale of `kernels` set to `l` (at least 1e-6), nothing else changed.
fn with_lengthscales(kernels: &crate::kernels::KernelSet, l: f64) -> crate::kernels::KernelSet {
    let l = l.max(1e-6);
    let names = kernels.param_names();
    let mut p = kernels.log_params();
    for (v, name) in p.iter_mut().zip(&names) {
        if crate::kernels::is_lengthscale(name) {
            *v = l.ln();
        }
    }
    kernels.with_log_params(&p)
}

/// The median Euclidean distance over all pairs of rows (1 for fewer than two rows). Up to
/// 10,000 rows of 784 inputs (MNIST) this is 5e7 pairs: rows in parallel, four partial sums per
/// pair so the inner loop vectorises, and the median taken on squared distances.
pub fn median_distance(z: &Array2<f64>) -> f64 {
    use rayon::prelude::*;
    let z = z.as_standard_layout();
    let rows: Vec<&[f64]> = z.rows().into_iter().map(|r| r.to_slice().expect("standard layout")).collect();
    let rows = &rows;
    let mut d2: Vec<f64> =
        (1..rows.len()).into_par_iter().flat_map_iter(|i| rows[..i].iter().map(move |b| squared_distance(rows[i], b))).collect();
    if d2.is_empty() {
        return 1.0;
    }
    let mid = d2.len() / 2;
    let (_, v, _) = d2.select_nth_unstable_by(mid, f64::total_cmp);
    v.sqrt()
}

fn squared_distance(a: &[f64], b: &[f64]) -> f64 {
    let mut acc = [0.0; 4];
    let (ca, cb) = (a.chunks_exact(4), b.chunks_exact(4));
    let tail: f64 = ca.remainder().iter().zip(cb.remainder()).map(|(x, y)| (x - y) * (x - y)).sum();
    for (x, y) in ca.zip(cb) {
        for k in 0..4 {
            acc[k] += (x[k] - y[k]) * (x[k] - y[k]);
        }
    }
    acc.iter().sum::<f64>() + tail
}

/// What initialisation did, for the cell's diagnostics.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct InitReport {
    /// Training rows k-means ran on (0 for a random subset).
    pub kmeans_rows: usize,
    pub kmeans_iterations: usize,
}

/// M initial inducing inputs from the training inputs `x` with classes `y` (one set; see
/// `inducing_sets`).
fn initial_inducing(
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
    if let InducingInit::ClassWeighted { .. } = init {
        return Err("inducing_init: class_weighted draws every class's set at once".into());
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
            InducingInit::ClassWeighted { .. } => unreachable!("rejected above"),
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
    fn median_distance_is_the_median_over_all_pairs() {
        // Rows on a line at 0, 1, 3, 7, 15 (5 inputs, so the 4-wide partial sums and the tail
        // both count): pairwise distances 1 2 3 4 6 7 8 12 14 15 (sorted), the upper median 7.
        let x = Array2::from_shape_fn((5, 5), |(i, d)| if d == 0 { f64::from((1u32 << i) - 1) } else { 0.0 });
        assert_eq!(median_distance(&x), 7.0);
        // Against the definition on random rows, odd and even pair counts.
        let mut rng = Pcg64::seed_from_u64(4);
        for n in [6, 7] {
            let x = Array2::from_shape_fn((n, 9), |_| rand::RngExt::random_range(&mut rng, 0.0f64..1.0));
            let mut d: Vec<f64> = (0..n)
                .flat_map(|i| (0..i).map(move |j| (i, j)))
                .map(|(i, j)| (&x.row(i) - &x.row(j)).mapv(|v| v * v).sum().sqrt())
                .collect();
            d.sort_by(f64::total_cmp);
            assert!((median_distance(&x) - d[d.len() / 2]).abs() < 1e-12);
        }
        assert_eq!(median_distance(&Array2::zeros((1, 3))), 1.0);
    }

    #[test]
    fn median_training_starts_set_every_lengthscale_and_nothing_else() {
        let kernels = crate::testing::se_ard_plus_white(3, 2, 0.1);
        let x = Array2::from_shape_fn((5, 3), |(i, d)| if d == 0 { f64::from((1u32 << i) - 1) } else { 0.0 });
        let mut rng = Pcg64::seed_from_u64(1);
        let k = initial_kernels(&kernels, LengthscaleInit::MedianTraining, &[x.slice(ndarray::s![..2, ..]).to_owned()], &x, &mut rng);
        for ((name, new), old) in k.param_names().iter().zip(k.log_params()).zip(kernels.log_params()) {
            if crate::kernels::is_lengthscale(name) {
                assert!((new - 7f64.ln()).abs() < 1e-12, "{name}: the median over the training rows, not Z's");
            } else {
                assert_eq!(new, old, "{name}");
            }
        }
        // The authors' start: their l = the median is a squared length-scale, so ell = sqrt(7).
        let k = initial_kernels(&kernels, LengthscaleInit::SqrtMedianTraining, &[x.slice(ndarray::s![..2, ..]).to_owned()], &x, &mut rng);
        for ((name, new), old) in k.param_names().iter().zip(k.log_params()).zip(kernels.log_params()) {
            if crate::kernels::is_lengthscale(name) {
                assert!((2.0 * new - 7f64.ln()).abs() < 1e-12, "{name}: ell^2 is the training rows' median distance");
            } else {
                assert_eq!(new, old, "{name}");
            }
        }
        assert_eq!(
            initial_kernels(&kernels, LengthscaleInit::Kernel, std::slice::from_ref(&x), &x, &mut rng).log_params(),
            kernels.log_params()
        );
    }

    #[test]
    fn class_weighted_sets_need_one_set_per_class() {
        let x = Array2::from_shape_fn((12, 2), |(i, d)| (i * 3 + d) as f64);
        let y: Vec<usize> = (0..12).map(|i| i % 3).collect();
        let init = InducingInit::ClassWeighted { subsample: 100, max_iters: 20 };
        let mut rng = Pcg64::seed_from_u64(2);
        assert!(inducing_sets(&x, &y, 3, 4, &init, false, &mut rng).is_err());
        let (sets, _) = inducing_sets(&x, &y, 3, 4, &init, true, &mut rng).unwrap();
        assert_eq!(sets.len(), 3);
        assert!(sets.iter().all(|z| z.dim() == (4, 2)));
        let random = InducingInit::Random { per_class: false };
        assert_eq!(inducing_sets(&x, &y, 3, 4, &random, false, &mut rng).unwrap().0.len(), 1);
        assert_eq!(inducing_sets(&x, &y, 3, 4, &random, true, &mut rng).unwrap().0.len(), 3);
    }

    #[test]
    fn class_weighted_sets_lean_towards_their_class() {
        // Class 1's weight is N / N_1 - 1 on its rows and 1 on the others (class 0's likewise),
        // so with M = 1 each class's centre is the weighted mean of all rows, exactly.
        let x = Array2::from_shape_fn((60, 1), |(i, _)| if i < 50 { -1.0 - i as f64 / 50.0 } else { 1.0 + (i - 50) as f64 / 10.0 });
        let y: Vec<usize> = (0..60).map(|i| usize::from(i >= 50)).collect();
        let mut rng = Pcg64::seed_from_u64(3);
        let (sets, report) = class_weighted_inducing(&x, &y, 2, 1, 1000, 100, &mut rng).unwrap();
        assert_eq!((sets.len(), sets[0].nrows(), report.kmeans_rows), (2, 1, 60));
        for (c, own_weight) in [(0, 60.0 / 50.0 - 1.0), (1, 60.0 / 10.0 - 1.0)] {
            let w: Vec<f64> = y.iter().map(|&v| if v == c { own_weight } else { 1.0 }).collect();
            let mean = (0..60).map(|i| w[i] * x[(i, 0)]).sum::<f64>() / w.iter().sum::<f64>();
            assert!((sets[c][(0, 0)] - mean).abs() < 1e-12, "class {c}: centre {} vs weighted mean {mean}", sets[c][(0, 0)]);
        }
        let (all, _) = class_weighted_inducing(&x, &y, 2, 60, 1000, 100, &mut rng).unwrap();
        assert_eq!(all[1], x, "M >= N: Z = X");
    }

    /// The best weighted 2-means split of points on a line, by brute force: the clusters of
    /// the optimum are contiguous in sorted order, so try every cut. Returns the two centres.
    fn best_split_1d(x: &[f64], w: &[f64]) -> [f64; 2] {
        let mut order: Vec<usize> = (0..x.len()).collect();
        order.sort_by(|&a, &b| x[a].total_cmp(&x[b]));
        let centre = |idx: &[usize]| idx.iter().map(|&i| w[i] * x[i]).sum::<f64>() / idx.iter().map(|&i| w[i]).sum::<f64>();
        let cost = |idx: &[usize]| {
            let m = centre(idx);
            idx.iter().map(|&i| w[i] * (x[i] - m).powi(2)).sum::<f64>()
        };
        let cut = (1..x.len())
            .min_by(|&a, &b| (cost(&order[..a]) + cost(&order[a..])).total_cmp(&(cost(&order[..b]) + cost(&order[b..]))))
            .unwrap();
        [centre(&order[..cut]), centre(&order[cut..])]
    }

    #[test]
    fn class_weighted_two_means_find_the_weighted_optimum_where_weights_move_the_split() {
        // Class 0: 40 rows evenly on [0, 9.75]; class 1: 4 rows at 9.6..9.9. Unweighted, the
        // best split is near the middle; class 1's weights (44/4 - 1 = 10 on its rows) pull
        // the right centre to the top, class 0's (44/40 - 1 = 0.1 on its rows) even more so.
        // Neither weighted split is a fixed point of unweighted Lloyd iterations, so ignoring
        // the weights cannot land there.
        let xs: Vec<f64> = (0..44).map(|i| if i < 40 { i as f64 / 4.0 } else { 9.6 + (i - 40) as f64 / 10.0 }).collect();
        let y: Vec<usize> = (0..44).map(|i| usize::from(i >= 40)).collect();
        let x = Array2::from_shape_vec((44, 1), xs.clone()).unwrap();
        let unweighted = best_split_1d(&xs, &[1.0; 44]);
        let mut rng = Pcg64::seed_from_u64(5);
        let (sets, _) = class_weighted_inducing(&x, &y, 2, 2, 1000, 100, &mut rng).unwrap();
        for (c, own_weight) in [(0, 44.0 / 40.0 - 1.0), (1, 44.0 / 4.0 - 1.0)] {
            let w: Vec<f64> = y.iter().map(|&v| if v == c { own_weight } else { 1.0 }).collect();
            let best = best_split_1d(&xs, &w);
            assert!((best[1] - unweighted[1]).abs() > 1.0, "class {c}: the weights must move the split ({best:?} vs {unweighted:?})");
            let mut got = [sets[c][(0, 0)], sets[c][(1, 0)]];
            got.sort_by(f64::total_cmp);
            for k in 0..2 {
                assert!((got[k] - best[k]).abs() < 1e-12, "class {c}: centres {got:?} vs the weighted optimum {best:?}");
            }
        }
    }

    /// k-means on a subsample smaller than M gave fewer than M inducing inputs without a word
    /// (and a subsample of 0 panicked): refused, naming the setting.
    #[test]
    fn a_kmeans_subsample_below_m_is_refused() {
        let x = Array2::from_shape_fn((40, 2), |(i, k)| (i * (k + 1)) as f64 * 0.1);
        let y: Vec<usize> = (0..40).map(|i| i % 2).collect();
        let mut rng = Pcg64::seed_from_u64(1);
        for subsample in [0, 9] {
            let init = InducingInit::Kmeans { per_class: false, subsample, max_iters: 10 };
            let e = inducing_sets(&x, &y, 2, 10, &init, false, &mut rng).unwrap_err();
            assert!(e.contains(&format!("inducing_init.subsample ({subsample}) must be at least M (10)")), "{e}");
        }
        let init = InducingInit::Kmeans { per_class: true, subsample: 10, max_iters: 10 };
        let (sets, _) = inducing_sets(&x, &y, 2, 10, &init, true, &mut rng).unwrap();
        assert!(sets.iter().all(|z| z.nrows() == 10));
    }
}
