//! The gradient of log Z_q: against finite differences with the sites and cavities frozen, the exact gradient, at convergence, and over minibatches.
use super::*;

struct Frozen {
    /// Per class: the site sums Sigma~, mu~ (inducing-value space).
    sums: Vec<(Mat<f64>, Vec<f64>)>,
    /// Per (row, class, other class k) the cavity (m\, V\) of the factor (row, k) on that class.
    cavities: Vec<Vec<Vec<Option<DenseCavity>>>>,
}

impl Frozen {
    fn new(state: &State, x: &Array2<f64>, y: &[usize]) -> Frozen {
        let c = state.n_classes();
        let sums = state.sums.iter().map(|s| (s.precision.clone(), s.natural_mean.clone())).collect();
        let mut cavities = vec![vec![vec![None; c]; c]; y.len()];
        for class in 0..c {
            let prior = &state.priors[class];
            let (m, v) = match &state.factors {
                Some(_) => dense_posterior(prior, &state.posts[class]),
                None => {
                    let keep = 1.0 - 1.0 / state.n_factors[class];
                    dense_posterior(prior, &ClassPosterior::new(prior, &state.sums[class].scaled(keep), class).unwrap())
                }
            };
            let lam = inverse(&v);
            let h: Vec<f64> = (0..m.len()).map(|i| (0..m.len()).map(|j| lam[(i, j)] * m[j]).sum()).collect();
            for (i, &yi) in y.iter().enumerate() {
                for k in (0..c).filter(|&k| k != yi) {
                    if class != yi && class != k {
                        continue;
                    }
                    let (c1, c2, uo) = match &state.factors {
                        Some(store) => {
                            let s = &store.sites;
                            let (c1, c2) = if class == yi { (s.c1y[(i, k)], s.c2y[(i, k)]) } else { (s.c1k[(i, k)], s.c2k[(i, k)]) };
                            (c1, c2, store.dirs[class].row(i).to_vec())
                        }
                        None => (0.0, 0.0, vec![0.0; m.len()]),
                    };
                    let lc = Mat::from_fn(m.len(), m.len(), |a, b| lam[(a, b)] - c1 * uo[a] * uo[b]);
                    let vc = inverse(&lc);
                    let hc: Vec<f64> = (0..m.len()).map(|a| h[a] - c2 * uo[a]).collect();
                    let mc = (0..m.len()).map(|a| (0..m.len()).map(|b| vc[(a, b)] * hc[b]).sum()).collect();
                    cavities[i][class][k] = Some((mc, vc));
                }
            }
        }
        let _ = x;
        Frozen { sums, cavities }
    }

    fn value(&self, state: &State, theta: &[f64], x: &Array2<f64>, y: &[usize]) -> f64 {
        let n_kern = state.kernels.n_params();
        let kernels = state.kernels.with_log_params(&theta[..n_kern]);
        let mut at = n_kern;
        let c = state.n_classes();
        let mut total = 0.0;
        let mut proj = vec![vec![vec![(0.0, 0.0); c]; c]; y.len()];
        for class in 0..c {
            let z0 = &state.priors[class].z;
            let z = Array2::from_shape_vec(z0.dim(), theta[at..at + z0.len()].to_vec()).unwrap();
            at += z0.len();
            let kern = kernels.class(class);
            let kmm = kern.gram_many(&z);
            let kinv = inverse(&kmm);
            let (sig, mu) = &self.sums[class];
            let lam = Mat::from_fn(kmm.nrows(), kmm.nrows(), |a, b| kinv[(a, b)] + sig[(a, b)]);
            let v = inverse(&lam);
            let logdet = |a: &Mat<f64>| Chol::factor(a.as_ref(), "t").unwrap().log_det();
            total += 0.5 * logdet(&v) + 0.5 * quad(mu, &v, mu) - 0.5 * logdet(&kmm);
            let kmn = kern.cross_many(&z, x);
            let knn = kern.diag(x);
            for (i, &yi) in y.iter().enumerate() {
                let kc: Vec<f64> = (0..z.nrows()).map(|a| kmn[(a, i)]).collect();
                let u: Vec<f64> = (0..z.nrows()).map(|a| (0..z.nrows()).map(|b| kinv[(a, b)] * kc[b]).sum()).collect();
                let s = knn[i] - kc.iter().zip(&u).map(|(p, q)| p * q).sum::<f64>();
                for k in (0..c).filter(|&k| k != yi) {
                    if let Some((mc, vc)) = &self.cavities[i][class][k] {
                        let a: f64 = u.iter().zip(mc).map(|(p, q)| p * q).sum();
                        proj[i][class][k] = (a, s + quad(&u, vc, &u));
                    }
                }
            }
        }
        for (i, &yi) in y.iter().enumerate() {
            for k in (0..c).filter(|&k| k != yi) {
                let (ay, by) = proj[i][yi][k];
                let (ak, bk) = proj[i][k][k];
                total += log_normal_cdf((ay - ak) / (by + bk).sqrt());
            }
        }
        total
    }
}

/// Minibatch training (notes §2.11, eq. 12) scales a block's likelihood terms by N / |B| and
/// leaves the prior's part alone, so that over a partition of the rows the blocks' gradients,
/// weighted |B| / N, add up to the full-data gradient (at fixed sites, EP and SEP). Unequal
/// blocks: scaling everything, or nothing, by N / |B| breaks the sum.
#[test]
fn minibatch_gradients_over_a_partition_add_up_to_the_full_gradient() {
    let (x, y) = toy(10, 2, 3, 5);
    let all: Vec<usize> = (0..10).collect();
    for tied in [false, true] {
        let state = three_sweeps(&x, &y, tied);
        let full = state.gradient(&state.block(&x, &y, &all), 1.0).unwrap();
        let parts: [&[usize]; 3] = [&[0, 3, 7], &[1, 2], &[4, 5, 6, 8, 9]];
        let mut sum = vec![0.0; full.len()];
        for rows in parts {
            let scale = 10.0 / rows.len() as f64;
            let g = state.gradient(&state.block(&x, &y, rows), scale).unwrap();
            for (s, v) in sum.iter_mut().zip(&g) {
                *s += v / scale;
            }
        }
        let norm = full.iter().map(|v| v.abs()).fold(0.0, f64::max);
        for (j, (s, f)) in sum.iter().zip(&full).enumerate() {
            assert!((s - f).abs() < 1e-10 * (1.0 + norm), "tied {tied}, parameter {j}: weighted block sum {s} against {f}");
        }
    }
}

#[test]
fn gradient_matches_finite_differences_with_sites_and_cavities_frozen() {
    let (x, y) = toy(10, 2, 3, 5);
    let all: Vec<usize> = (0..10).collect();
    for tied in [false, true] {
        let state = three_sweeps(&x, &y, tied);
        let theta = state.theta();
        let grad = state.gradient(&state.block(&x, &y, &all), 1.0).unwrap();
        let frozen = Frozen::new(&state, &x, &y);
        let fd = central_differences(&theta, |t| frozen.value(&state, t, &x, &y));
        assert_gradient_close(&format!("tied {tied}: eq. 10 against frozen sites and cavities"), &grad, &fd, 1e-6);
    }
}

/// EP-inner-exact: log Z_q as a function of the kernels and Z alone, the sites (and the
/// directions they were stored along) fixed, differentiated by central differences. The state
/// is taken off its refinement point first, so the current directions differ from the stored
/// ones and every term of the exact gradient (cavity, removal gain, prior part) is exercised.
#[test]
fn the_exact_gradient_is_that_of_log_z_q_with_the_sites_fixed() {
    let (x, y) = toy(10, 2, 3, 5);
    let all: Vec<usize> = (0..10).collect();
    let mut state = three_sweeps(&x, &y, false);
    let mut rng = Pcg64::seed_from_u64(9);
    let theta: Vec<f64> = state.theta().iter().map(|t| t + rng.random_range(-0.1..0.1)).collect();
    state.set_theta(&theta).unwrap();
    let grad = state.exact_gradient(&state.block(&x, &y, &all)).unwrap();
    let cell = std::cell::RefCell::new(state);
    let fd = central_differences(&theta, |t| {
        let mut s = cell.borrow_mut();
        s.set_theta(t).unwrap();
        s.log_z_q(&x, &y).unwrap()
    });
    assert_gradient_close("exact gradient against d log Z_q, sites fixed", &grad, &fd, 1e-6);
    // Eq. 10 leaves the cavities' dependence out, so away from convergence it differs.
    let state = cell.into_inner();
    let approx = state.gradient(&state.block(&x, &y, &all), 1.0).unwrap();
    let gap = approx.iter().zip(&fd).map(|(a, f)| (a - f).abs()).fold(0.0, f64::max);
    assert!(gap > 1e-3, "eq. 10 should differ from the exact gradient off convergence (gap {gap})");
}

#[test]
fn at_convergence_the_exact_and_eq_10_gradients_agree() {
    let (x, y) = toy(9, 1, 3, 6);
    let kernels = se_ard_plus_white(1, 3, 0.3);
    let zs: Vec<Array2<f64>> = (0..3).map(|k| x.slice(ndarray::s![2 * k..2 * k + 2, ..]).to_owned()).collect();
    let mut state = State::new(kernels, zs, false, &y).unwrap();
    converge(&mut state, &x, &y, 300);
    let block = state.block(&x, &y, &(0..9).collect::<Vec<_>>());
    let (exact, approx) = (state.exact_gradient(&block).unwrap(), state.gradient(&block, 1.0).unwrap());
    assert_gradient_close("exact against eq. 10 at EP's fixed point", &exact, &approx, 1e-7);
}

#[test]
fn at_convergence_the_gradient_is_that_of_log_z_q() {
    let (x, y) = toy(9, 1, 3, 6);
    let kernels = se_ard_plus_white(1, 3, 0.3);
    let zs: Vec<Array2<f64>> = (0..3).map(|k| x.slice(ndarray::s![2 * k..2 * k + 2, ..]).to_owned()).collect();
    let mut state = State::new(kernels.clone(), zs.clone(), false, &y).unwrap();
    converge(&mut state, &x, &y, 300);
    let theta = state.theta();
    let all: Vec<usize> = (0..9).collect();
    let grad = state.gradient(&state.block(&x, &y, &all), 1.0).unwrap();
    let fd = central_differences(&theta, |t| {
        let mut s = State::new(kernels.clone(), zs.clone(), false, &y).unwrap();
        s.set_theta(t).unwrap();
        converge(&mut s, &x, &y, 300);
        s.log_z_q(&x, &y).unwrap()
    });
    // Every entry here is at least 0.05 in size, so the helper's absolute floor (rel) hides
    // nothing. The central differences are good to a few 1e-9 (rounding of log Z_q over the
    // step 1e-6; 300 sweeps converge EP past that), so 1e-6 leaves a wide margin.
    assert!(fd.iter().all(|v| v.abs() > 1e-2), "a small gradient entry: {fd:?}");
    assert_gradient_close("eq. 10 at convergence against d log Z_q", &grad, &fd, 1e-6);
}
