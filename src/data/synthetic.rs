//! Synthetic datasets generated deterministically from a seed (registry `format: synthetic`).
//!
//! `gr2006-toy`: the 10-D, 3-class toy of Girolami & Rogers (2006) §6.1 (notes §6.1):
//! - class 1: 0.1 < x1^2 + x2^2 < 0.5 (annulus), class 2: 0.6 < x1^2 + x2^2 < 1.0 (annulus),
//!   class 3: (x1, x2) ~ N(0, 0.01 I);
//! - x3..x10 ~ N(0, 1) for every class (irrelevant dimensions);
//! - "each of the three target values was sampled uniformly": t ~ U{1, 2, 3} i.i.d.
//!
//! The paper does not say how points are drawn inside the annuli; following the notes'
//! recommendation they are uniform in area (r^2 ~ U(a, b), angle ~ U(0, 2 pi)) and class 3 is
//! the untruncated Gaussian. `gr2006-toy-binary` is the same draw with classes 2 and 3 merged
//! (G&R Figure 3: class 1 against classes 2 + 3). The `-2d` variants keep only x1 and x2 (the
//! same rows): the notes (§6.2 FLAG) note that with the 8 noise inputs an isotropic kernel is
//! nearly uninformative over the paper's (s, phi) grid, and the authors may have used x1, x2 only.
//!
//! `vc2017-gp3`: the 2-D, 3-class problem of Villacampa-Calvo & Hernandez-Lobato (2017) §4.2
//! (notes §4.2): x ~ U([-2.5, 2.5]^2), three latent functions drawn from a GP prior with a unit
//! squared-exponential kernel (amplitude 1, length-scale 1) plus latent noise 1e-3 (the paper
//! does not give them; the notes' recommendation), y = argmax_c f^c(x). The first 1000 rows are
//! the training set, drawn jointly (Cholesky of K + 1e-3 I); every later row is a test row whose
//! f is drawn from its conditional given the 1000 training values (independently per test row:
//! the joint over 10,000 test rows would need a 10^4 x 10^4 factor, and given 1000 points in
//! the square at length-scale 1 the conditional variances are of the order of the noise).
use ndarray::Array2;
use rand::{RngExt, SeedableRng};
use rand_distr::StandardNormal;
use rand_pcg::Pcg64;

use super::Dataset;

/// Version of the generators' output, part of a synthetic dataset's content hash: bump it
/// when a generator draws different rows for the same name, n and seed.
pub const GENERATOR_VERSION: u32 = 1;

/// Generators known to `format: synthetic` entries.
pub const GENERATORS: &[&str] = &["gr2006-toy", "gr2006-toy-binary", "gr2006-toy-2d", "gr2006-toy-2d-binary", "vc2017-gp3"];

/// Training rows of `vc2017-gp3` (the rest are test rows).
pub const VC2017_TRAIN: usize = 1000;

/// Number of input dimensions of the G&R toy (2 relevant + 8 noise).
pub const GR2006_TOY_DIM: usize = 10;

/// Generate `n` rows of generator `generator` from `seed`. Err names an unknown generator.
pub fn generate(name: &str, generator: &str, n: usize, seed: u64) -> Result<Dataset, String> {
    match generator {
        "gr2006-toy" => {
            let (x, y) = gr2006_toy(n, seed);
            Ok(dataset(name, x, y, &["1", "2", "3"], generator, seed))
        }
        "gr2006-toy-binary" => {
            let (x, y) = gr2006_toy(n, seed);
            Ok(dataset(name, x, merge_2_3(y), &["1", "2+3"], generator, seed))
        }
        // The same rows without the 8 noise inputs (x1, x2 only).
        "gr2006-toy-2d" => {
            let (x, y) = gr2006_toy(n, seed);
            Ok(dataset(name, x.slice(ndarray::s![.., ..2]).to_owned(), y, &["1", "2", "3"], generator, seed))
        }
        "gr2006-toy-2d-binary" => {
            let (x, y) = gr2006_toy(n, seed);
            Ok(dataset(name, x.slice(ndarray::s![.., ..2]).to_owned(), merge_2_3(y), &["1", "2+3"], generator, seed))
        }
        "vc2017-gp3" => {
            if n <= VC2017_TRAIN {
                return Err(format!("vc2017-gp3 needs more than its {VC2017_TRAIN} training rows, got n = {n}"));
            }
            let (x, y) = vc2017_gp3(n, seed)?;
            let mut d = dataset(name, x, y, &["1", "2", "3"], generator, seed);
            d.n_fixed_train = Some(VC2017_TRAIN);
            Ok(d)
        }
        other => Err(format!("unknown generator \"{other}\" (known: {})", GENERATORS.join(", "))),
    }
}

/// Class 1 against classes 2 + 3 (G&R Figure 3).
fn merge_2_3(y: Vec<usize>) -> Vec<usize> {
    y.into_iter().map(|c| usize::from(c > 0)).collect()
}

fn dataset(name: &str, x: Array2<f64>, y: Vec<usize>, classes: &[&str], generator: &str, seed: u64) -> Dataset {
    Dataset {
        name: name.to_string(),
        feature_names: (1..=x.ncols()).map(|j| format!("x{j}")).collect(),
        x,
        y,
        class_names: classes.iter().map(|c| c.to_string()).collect(),
        source: vec![format!("synthetic:{generator}:seed={seed}")],
        n_fixed_train: None,
    }
}

/// The G&R 2006 §6.1 toy: `n` rows [n, 10] and class indices 0..3.
pub fn gr2006_toy(n: usize, seed: u64) -> (Array2<f64>, Vec<usize>) {
    let mut rng = Pcg64::seed_from_u64(seed);
    let mut x = Array2::<f64>::zeros((n, GR2006_TOY_DIM));
    let mut y = Vec::with_capacity(n);
    for i in 0..n {
        let t = rng.random_range(0..3usize);
        let (x1, x2) = match t {
            0 | 1 => {
                let (a, b) = if t == 0 { (0.1, 0.5) } else { (0.6, 1.0) };
                // Uniform in area: r^2 uniform on (a, b).
                let r2 = a + (b - a) * rng.random::<f64>();
                let angle = std::f64::consts::TAU * rng.random::<f64>();
                let r = f64::sqrt(r2);
                (r * angle.cos(), r * angle.sin())
            }
            _ => (0.1 * rng.sample::<f64, _>(StandardNormal), 0.1 * rng.sample::<f64, _>(StandardNormal)),
        };
        x[[i, 0]] = x1;
        x[[i, 1]] = x2;
        for j in 2..GR2006_TOY_DIM {
            x[[i, j]] = rng.sample::<f64, _>(StandardNormal);
        }
        y.push(t);
    }
    (x, y)
}

/// The Villacampa-Calvo & Hernandez-Lobato (2017) §4.2 problem: `n` rows [n, 2], classes 0..3.
pub fn vc2017_gp3(n: usize, seed: u64) -> Result<(Array2<f64>, Vec<usize>), String> {
    const NOISE: f64 = 1e-3;
    let mut rng = Pcg64::seed_from_u64(seed);
    let x = Array2::from_shape_fn((n, 2), |_| -2.5 + 5.0 * rng.random::<f64>());
    let se = |a: usize, b: usize| (-0.5 * ((x[[a, 0]] - x[[b, 0]]).powi(2) + (x[[a, 1]] - x[[b, 1]]).powi(2))).exp();
    let m = VC2017_TRAIN;
    let k = faer::Mat::from_fn(m, m, |a, b| se(a, b) + if a == b { NOISE } else { 0.0 });
    let chol = crate::linalg::Chol::factor(k.as_ref(), "vc2017-gp3 prior").map_err(|e| e.to_string())?;
    // Training values f = L z; a test row's conditional mean is k^T K^{-1} f = h^T z with
    // h = L^{-1} k, its variance 1 + noise - h^T h: one solve for all test rows and classes.
    let z = faer::Mat::from_fn(m, 3, |_, _| rng.sample::<f64, _>(StandardNormal));
    let f_train = chol.l() * &z;
    let h = chol.solve_l_par(faer::Mat::from_fn(m, n - m, |a, i| se(m + i, a)).as_ref());
    let mut f = Array2::<f64>::zeros((n, 3));
    for i in 0..m {
        for c in 0..3 {
            f[[i, c]] = f_train[(i, c)];
        }
    }
    for i in m..n {
        let col = i - m;
        let var = (1.0 + NOISE - (0..m).map(|a| h[(a, col)] * h[(a, col)]).sum::<f64>()).max(0.0);
        for c in 0..3 {
            let mean: f64 = (0..m).map(|a| h[(a, col)] * z[(a, c)]).sum();
            f[[i, c]] = mean + var.sqrt() * rng.sample::<f64, _>(StandardNormal);
        }
    }
    let y = (0..n).map(|i| crate::linalg::argmax(f.row(i).as_slice().expect("row"))).collect();
    Ok((x, y))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn toy_classes_are_balanced_and_radii_right() {
        let n = 30_000;
        let (x, y) = gr2006_toy(n, 7);
        let mut counts = [0usize; 3];
        for &t in &y {
            counts[t] += 1;
        }
        // Multinomial(n, 1/3): sd of a count = sqrt(n * 1/3 * 2/3) ~ 81.6; allow 4 sd.
        let sd = (n as f64 * 2.0 / 9.0).sqrt();
        for c in counts {
            assert!((c as f64 - n as f64 / 3.0).abs() < 4.0 * sd, "{counts:?}");
        }
        let mut r2_class3 = Vec::new();
        for i in 0..n {
            let r2 = x[[i, 0]].powi(2) + x[[i, 1]].powi(2);
            match y[i] {
                0 => assert!(r2 > 0.1 && r2 < 0.5, "class 1 radius^2 {r2}"),
                1 => assert!(r2 > 0.6 && r2 < 1.0, "class 2 radius^2 {r2}"),
                _ => r2_class3.push(r2),
            }
        }
        // Class 3: r^2 = 0.01 chi^2_2, so E r^2 = 0.02 and P(r^2 > 0.1) = exp(-5).
        let m = r2_class3.len() as f64;
        let mean = r2_class3.iter().sum::<f64>() / m;
        // sd of r^2 is 0.02 -> standard error 0.02 / sqrt(m).
        assert!((mean - 0.02).abs() < 4.0 * 0.02 / m.sqrt(), "class 3 mean r^2 {mean}");
        let frac_out = r2_class3.iter().filter(|&&r| r > 0.1).count() as f64 / m;
        let p = (-5.0f64).exp();
        assert!((frac_out - p).abs() < 4.0 * (p * (1.0 - p) / m).sqrt(), "class 3 P(r^2 > 0.1) {frac_out}");
        // Uniform in area: within class 1, r^2 ~ U(0.1, 0.5) has mean 0.3.
        let r2_c1: Vec<f64> = (0..n).filter(|&i| y[i] == 0).map(|i| x[[i, 0]].powi(2) + x[[i, 1]].powi(2)).collect();
        let m1 = r2_c1.len() as f64;
        let mean1 = r2_c1.iter().sum::<f64>() / m1;
        assert!((mean1 - 0.3).abs() < 4.0 * (0.16f64 / 12.0).sqrt() / m1.sqrt(), "class 1 mean r^2 {mean1}");
    }

    #[test]
    fn noise_dimensions_are_standard_normal() {
        let n = 30_000;
        let (x, _) = gr2006_toy(n, 11);
        let nf = n as f64;
        for j in 2..GR2006_TOY_DIM {
            let col = x.column(j);
            let mean = col.sum() / nf;
            let var = col.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (nf - 1.0);
            let m4 = col.iter().map(|v| (v - mean).powi(4)).sum::<f64>() / nf;
            // se(mean) = 1/sqrt(n); se(var) = sqrt(2/n); kurtosis 3 with se ~ sqrt(96/n).
            assert!(mean.abs() < 4.0 / nf.sqrt(), "dim {j} mean {mean}");
            assert!((var - 1.0).abs() < 4.0 * (2.0 / nf).sqrt(), "dim {j} var {var}");
            assert!((m4 / (var * var) - 3.0).abs() < 4.0 * (96.0 / nf).sqrt(), "dim {j} kurtosis {}", m4 / (var * var));
        }
    }

    #[test]
    fn gp3_has_three_classes_in_contiguous_regions() {
        let d = generate("t", "vc2017-gp3", 3000, 5).expect("gen");
        assert_eq!(d.n_fixed_train, Some(VC2017_TRAIN));
        assert!(d.x.iter().all(|v| (-2.5..=2.5).contains(v)));
        let counts = (0..3).map(|c| d.y.iter().filter(|&&y| y == c).count()).collect::<Vec<_>>();
        assert!(counts.iter().all(|&n| n > 150), "{counts:?}");
        // A smooth draw at length-scale 1: a test row's nearest training row has its class far
        // more often than chance (1/3).
        let agree = (VC2017_TRAIN..3000)
            .filter(|&i| {
                let near = (0..VC2017_TRAIN)
                    .min_by(|&a, &b| {
                        let da = (d.x[[i, 0]] - d.x[[a, 0]]).powi(2) + (d.x[[i, 1]] - d.x[[a, 1]]).powi(2);
                        let db = (d.x[[i, 0]] - d.x[[b, 0]]).powi(2) + (d.x[[i, 1]] - d.x[[b, 1]]).powi(2);
                        da.total_cmp(&db)
                    })
                    .expect("rows");
                d.y[near] == d.y[i]
            })
            .count();
        assert!(agree as f64 / 2000.0 > 0.85, "nearest-neighbour agreement {agree} of 2000");
        assert_eq!(generate("t", "vc2017-gp3", 3000, 5).expect("gen").y, d.y);
        assert!(generate("t", "vc2017-gp3", 1000, 5).is_err());
    }

    #[test]
    fn deterministic_in_the_seed_and_binary_merges_classes() {
        let a = generate("t", "gr2006-toy", 500, 3).expect("gen");
        let b = generate("t", "gr2006-toy", 500, 3).expect("gen");
        let c = generate("t", "gr2006-toy", 500, 4).expect("gen");
        assert_eq!(a.x, b.x);
        assert_eq!(a.y, b.y);
        assert_ne!(a.x, c.x);
        let bin = generate("t", "gr2006-toy-binary", 500, 3).expect("gen");
        assert_eq!(bin.x, a.x);
        assert_eq!(bin.n_classes(), 2);
        assert!(a.y.iter().zip(&bin.y).all(|(&t, &b)| b == usize::from(t != 0)));
        let two = generate("t", "gr2006-toy-2d-binary", 500, 3).expect("gen");
        assert_eq!(two.x, a.x.slice(ndarray::s![.., ..2]));
        assert_eq!(two.y, bin.y);
        assert_eq!(generate("t", "gr2006-toy-2d", 500, 3).expect("gen").y, a.y);
        assert!(generate("t", "gr2006-tyo", 5, 1).is_err());
    }
}
