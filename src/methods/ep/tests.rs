//! EP and SEP against mathematics (the notes' checklist item 1): the cavity projections and
//! the closed-form log s~ against dense inversion, the new q against the tilted moments by
//! quadrature, log Z_q at the prior, the gradient against finite differences of the objective
//! with the sites and cavities frozen and, at convergence, of log Z_q itself, EP's log Z_q and
//! predictive against brute-force integration of the same model and converged EP against a
//! dense sequential EP, SEP close to EP (and equal to it with one factor per class), SEP's
//! factor counts and positive semi-definite tied sites, and SEP's memory independent of N.
use super::sparse::{ClassPosterior, ClassPrior};
use super::state::State;
use super::sweep::{Proj, ViewFor};
use super::EpParams;
use crate::kernels::KernelSet;
use crate::linalg::Chol;
use crate::methods::{FitContext, HyperPolicy, Problem};
use crate::special::{log_normal_cdf, normal_cdf};
use crate::testing::{assert_gradient_close, central_differences, se_ard_plus_white};
use faer::Mat;
use ndarray::Array2;
use rand::{RngExt, SeedableRng};
use rand_pcg::Pcg64;

fn toy(n: usize, d: usize, c: usize, seed: u64) -> (Array2<f64>, Vec<usize>) {
    let mut rng = Pcg64::seed_from_u64(seed);
    let x = Array2::from_shape_fn((n, d), |_| rng.random_range(-2.0..2.0));
    // Classes by the nearest of c centres, so the problem is learnable.
    let centres = Array2::from_shape_fn((c, d), |(k, j)| if j == 0 { -1.5 + 3.0 * k as f64 / (c - 1) as f64 } else { 0.0 });
    let y = (0..n)
        .map(|i| {
            (0..c)
                .min_by(|&a, &b| {
                    let da: f64 = (0..d).map(|j| (x[(i, j)] - centres[(a, j)]).powi(2)).sum();
                    let db: f64 = (0..d).map(|j| (x[(i, j)] - centres[(b, j)]).powi(2)).sum();
                    da.total_cmp(&db)
                })
                .unwrap()
        })
        .collect();
    (x, y)
}

fn inverse(a: &Mat<f64>) -> Mat<f64> {
    Chol::factor(a.as_ref(), "test").unwrap().solve(Mat::<f64>::identity(a.nrows(), a.nrows()).as_ref())
}

fn quad(u: &[f64], a: &Mat<f64>, v: &[f64]) -> f64 {
    (0..u.len()).map(|i| (0..v.len()).map(|j| u[i] * a[(i, j)] * v[j]).sum::<f64>()).sum()
}

fn rand_spd(m: usize, rng: &mut Pcg64) -> Mat<f64> {
    let b = Mat::from_fn(m, m, |_, _| rng.random_range(-1.0..1.0));
    let mut a = &b * b.transpose();
    for i in 0..m {
        a[(i, i)] += 0.5;
    }
    a
}

#[test]
fn cavity_projections_and_log_s_match_dense_inversion() {
    let mut rng = Pcg64::seed_from_u64(1);
    let m = 4;
    for _ in 0..5 {
        let v = rand_spd(m, &mut rng);
        let mean: Vec<f64> = (0..m).map(|_| rng.random_range(-1.0..1.0)).collect();
        let u: Vec<f64> = (0..m).map(|_| rng.random_range(-1.0..1.0)).collect();
        let uo: Vec<f64> = (0..m).map(|_| rng.random_range(-1.0..1.0)).collect();
        let vm = |w: &[f64]| (0..m).map(|i| (0..m).map(|j| v[(i, j)] * w[j]).sum::<f64>()).collect::<Vec<f64>>();
        let dot = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f64>();
        let proj =
            Proj { d_uu: quad(&u, &v, &u), d_uo: quad(&u, &v, &uo), d_oo: quad(&uo, &v, &uo), t_u: dot(&u, &mean), t_o: dot(&uo, &mean) };
        // A site that can be removed (1 - C1 d_oo = 0.4 > 0), and one that cannot.
        let (c1, c2) = (0.6 / proj.d_oo, -0.4);
        assert!(proj.cavity(1.2 / proj.d_oo, c2).is_none());
        // Dense: Lambda\ = V^{-1} - c1 uo uo^T, h\ = V^{-1} m - c2 uo.
        let lam = inverse(&v);
        let lam_cav = Mat::from_fn(m, m, |i, j| lam[(i, j)] - c1 * uo[i] * uo[j]);
        let h: Vec<f64> = (0..m).map(|i| (0..m).map(|j| lam[(i, j)] * mean[j]).sum::<f64>() - c2 * uo[i]).collect();
        let v_cav = inverse(&lam_cav);
        let m_cav: Vec<f64> = (0..m).map(|i| (0..m).map(|j| v_cav[(i, j)] * h[j]).sum()).collect();
        let cav = proj.cavity(c1, c2).unwrap();
        assert!((cav.var - quad(&u, &v_cav, &u)).abs() < 1e-10, "{} vs {}", cav.var, quad(&u, &v_cav, &u));
        assert!((cav.mean - dot(&u, &m_cav)).abs() < 1e-10);
        // The gradient's vectors: K^{-1} m\ = beta + c_m A^{-1} k_o and K^{-1} V\ u = A^{-1} k + c_w A^{-1} k_o
        // become, with K = I, m\ = m + c_m V uo and V\ u = V u + c_w V uo.
        let (vu, vuo) = (vm(&u), vm(&uo));
        for i in 0..m {
            assert!((m_cav[i] - (mean[i] + cav.c_m * vuo[i])).abs() < 1e-10);
            let vcu: f64 = (0..m).map(|j| v_cav[(i, j)] * u[j]).sum();
            assert!((vcu - (vu[i] + cav.c_w * vuo[i])).abs() < 1e-10);
        }
        // log s~ - log Z = g(theta\) - g(theta), g = 1/2 log|V| + 1/2 m^T V^{-1} m.
        let g = |cov: &Mat<f64>, mu: &[f64]| 0.5 * Chol::factor(cov.as_ref(), "t").unwrap().log_det() + 0.5 * quad(mu, &inverse(cov), mu);
        let dense = g(&v_cav, &m_cav) - g(&v, &mean);
        assert!((proj.removal_gain(c1, c2) - dense).abs() < 1e-10, "{} vs {dense}", proj.removal_gain(c1, c2));
    }
}

/// Class c's prior at the rows of x straight from its kernel (not from `PriorRows`): K(Z, Z),
/// the site directions u_i = K^{-1} k(Z, x_i) and the FITC variances kappa_i - k_i^T u_i.
struct DenseRows {
    k: Mat<f64>,
    dirs: Vec<Vec<f64>>,
    fitc_var: Vec<f64>,
}

fn dense_rows(kern: &dyn crate::kernels::Kernel, z: &Array2<f64>, x: &Array2<f64>) -> DenseRows {
    let k = kern.gram_many(z);
    let kinv = inverse(&k);
    let kmn = kern.cross_many(z, x);
    let kappa = kern.diag(x);
    let (mut dirs, mut fitc_var) = (Vec::new(), Vec::new());
    for i in 0..x.nrows() {
        let ki: Vec<f64> = (0..z.nrows()).map(|a| kmn[(a, i)]).collect();
        let u = mat_vec(&kinv, &ki);
        fitc_var.push(kappa[i] - dot(&ki, &u));
        dirs.push(u);
    }
    DenseRows { k, dirs, fitc_var }
}

fn mat_vec(a: &Mat<f64>, v: &[f64]) -> Vec<f64> {
    (0..a.nrows()).map(|i| (0..v.len()).map(|j| a[(i, j)] * v[j]).sum()).collect()
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// a + w u u^T.
fn plus_rank_one(a: &Mat<f64>, w: f64, u: &[f64]) -> Mat<f64> {
    Mat::from_fn(a.nrows(), a.ncols(), |i, j| a[(i, j)] + w * u[i] * u[j])
}

/// 1/2 h^T Lambda^{-1} h - 1/2 log|Lambda|: log of the integral of exp(-1/2 f^T Lambda f + h^T f)
/// up to its (2 pi)^{M/2}.
fn log_gaussian_integral(lam: &Mat<f64>, h: &[f64]) -> f64 {
    0.5 * quad(h, &inverse(lam), h) - 0.5 * Chol::factor(lam.as_ref(), "t").unwrap().log_det()
}

/// The tilted distribution of one factor, N(z_y; a_y, d_y) N(z_k; a_k, d_k) Phi((z_y - z_k) / sqrt(s)):
/// log Z and the means and variances of z_y (index 0) and z_k (index 1), by a 2-D trapezoid rule
/// over +-10 cavity standard deviations (the integrand is analytic and decays like a Gaussian,
/// so the rule is accurate far past the tests' 1e-7).
struct TiltedPair {
    log_z: f64,
    mean: [f64; 2],
    var: [f64; 2],
}

fn tilted_pair(a: [f64; 2], d: [f64; 2], s: f64) -> TiltedPair {
    let n = 1201;
    let h = 20.0 / (n - 1) as f64;
    let (mut z, mut e, mut e2) = (0.0, [0.0; 2], [0.0; 2]);
    for i in 0..n {
        let u = -10.0 + i as f64 * h;
        for j in 0..n {
            let v = -10.0 + j as f64 * h;
            let f = [a[0] + d[0].sqrt() * u, a[1] + d[1].sqrt() * v];
            let w = (-0.5 * (u * u + v * v)).exp() * normal_cdf((f[0] - f[1]) / s.sqrt());
            z += w;
            for c in 0..2 {
                e[c] += w * f[c];
                e2[c] += w * f[c] * f[c];
            }
        }
    }
    let mean = [e[0] / z, e[1] / z];
    TiltedPair {
        log_z: (z * h * h / (2.0 * std::f64::consts::PI)).ln(),
        mean,
        var: [e2[0] / z - mean[0] * mean[0], e2[1] / z - mean[1] * mean[1]],
    }
}

/// Two classes and two nearby rows of different classes. Row 1 is refined alone first (its
/// cavity is the prior, zero-mean); row 0's cavity then carries row 1's site, so its means
/// differ and alpha-hat is far from 0: that exercises the alpha term of gamma =
/// beta (beta + alpha) / B and the sign of a_y - a_k, which a zero-mean cavity hides. After
/// each undamped refinement both classes' projections on the row's directions must be the
/// tilted moments, by quadrature from cavities built densely from the kernel: class k's is
/// where the paper's eq. 53 prints the wrong sign.
#[test]
fn refinements_from_a_non_zero_cavity_give_both_classes_the_tilted_moments() {
    let x = Array2::from_shape_vec((2, 2), vec![0.2, -0.1, 0.5, 0.2]).unwrap();
    let y = vec![1, 0];
    let zs = vec![
        Array2::from_shape_vec((3, 2), vec![-1.0, 0.0, 0.0, 0.5, 1.0, -0.5]).unwrap(),
        Array2::from_shape_vec((3, 2), vec![-0.5, -0.5, 0.4, 0.2, 1.2, 0.8]).unwrap(),
    ];
    let kernels = se_ard_plus_white(2, 2, 0.3);
    let rows: Vec<DenseRows> = (0..2).map(|c| dense_rows(kernels.class(c), &zs[c], &x)).collect();
    let mut state = State::new(kernels.clone(), zs, false, &y).unwrap();
    assert!(state.priors.iter().all(|p| p.chol.jitter() == 0.0), "the dense K must be the code's");
    // The dense q of each class in natural parameters (Lambda, h), from the prior.
    let mut lam: Vec<Mat<f64>> = rows.iter().map(|r| inverse(&r.k)).collect();
    let mut h: Vec<Vec<f64>> = vec![vec![0.0; 3]; 2];
    for i in [1, 0] {
        // Row i has no site yet, so its factor's cavity is q itself.
        let classes = [y[i], 1 - y[i]];
        let cavity: Vec<(f64, f64)> = classes
            .iter()
            .map(|&c| {
                let (v, u) = (inverse(&lam[c]), &rows[c].dirs[i]);
                (dot(u, &mat_vec(&v, &h[c])), quad(u, &v, u))
            })
            .collect();
        let (a, d) = ([cavity[0].0, cavity[1].0], [cavity[0].1, cavity[1].1]);
        let s = rows[classes[0]].fitc_var[i] + rows[classes[1]].fitc_var[i];
        let tilted = tilted_pair(a, d, s);
        state.refine(&state.block(&x, &y, &[i]), 1.0, ViewFor::Sweep).unwrap();
        let (lam_cav, h_cav) = (lam.clone(), h.clone());
        for (side, &c) in classes.iter().enumerate() {
            let (m, v) = dense_posterior(&state.priors[c], &state.posts[c]);
            let u = &rows[c].dirs[i];
            let (mean, var) = (dot(u, &m), quad(u, &v, u));
            assert!((mean - tilted.mean[side]).abs() < 1e-7, "row {i} class {c}: mean {mean} vs tilted {}", tilted.mean[side]);
            assert!((var - tilted.var[side]).abs() < 1e-7, "row {i} class {c}: variance {var} vs tilted {}", tilted.var[side]);
            // Carry the site that gives these moments: the tilted marginal over the cavity's.
            let (prec, nat) = (1.0 / tilted.var[side] - 1.0 / d[side], tilted.mean[side] / tilted.var[side] - a[side] / d[side]);
            lam[c] = plus_rank_one(&lam[c], prec, u);
            h[c].iter_mut().zip(u).for_each(|(hc, uc)| *hc += nat * uc);
        }
        if i == 0 {
            let alpha = (a[0] - a[1]) / (s + d[0] + d[1]).sqrt();
            assert!(alpha < -0.2, "row 0's cavity should favour row 1's class (alpha {alpha})");
            // With row 0's site in place, its factor's log Z and log s~ - log Z (= g(theta\) - g(theta)).
            let block = state.block(&x, &y, &[0]);
            let (views, stored) = state.views(&block, ViewFor::Sweep).unwrap();
            let sw = super::sweep::sweep(&views, &block.y, &stored, super::sweep::Adjoints::None).unwrap();
            assert!((sw.log_z - tilted.log_z).abs() < 1e-7, "log Z {} vs {}", sw.log_z, tilted.log_z);
            let gain: f64 = (0..2).map(|c| log_gaussian_integral(&lam_cav[c], &h_cav[c]) - log_gaussian_integral(&lam[c], &h[c])).sum();
            assert!((sw.removal_gain - gain).abs() < 1e-7, "removal gain {} vs {gain}", sw.removal_gain);
        }
    }
}

#[test]
fn log_z_q_at_the_prior_is_the_sum_of_log_phi() {
    let (x, y) = toy(12, 2, 3, 4);
    let kernels = se_ard_plus_white(2, 3, 0.5);
    let zs: Vec<Array2<f64>> = (0..3).map(|k| x.slice(ndarray::s![k..k + 4, ..]).to_owned()).collect();
    for tied in [false, true] {
        let state = State::new(kernels.clone(), zs.clone(), tied, &y).unwrap();
        // Zero sites: every cavity is the prior, every mean 0, so each factor's log Z = log Phi(0).
        let expected = 12.0 * 2.0 * log_normal_cdf(0.0);
        let got = state.log_z_q(&x, &y).unwrap();
        assert!((got - expected).abs() < 1e-10, "tied {tied}: {got} vs {expected}");
    }
}

/// The objective whose gradient eq. 10 is, with the sites and every factor's cavity frozen in
/// inducing-value space at the current state: sum_c [g(theta_c) - g(theta_prior,c)] at theta
/// plus sum over factors of log Z(theta; cavity frozen). Dense, for tests.
/// A cavity (m\, V\) in inducing-value space.
type DenseCavity = (Vec<f64>, Mat<f64>);

struct Frozen {
    /// Per class: the site sums Sigma~, mu~ (inducing-value space).
    sums: Vec<(Mat<f64>, Vec<f64>)>,
    /// Per (row, class, other class k) the cavity (m\, V\) of the factor (row, k) on that class.
    cavities: Vec<Vec<Vec<Option<DenseCavity>>>>,
}

/// EP (or, tied, SEP) on the 10-row toy problem with the SE-ARD + white kernels, inducing
/// inputs at rows k..k + 3 for class k, after three damped sweeps over every row: sites on every
/// row, not yet at the fixed point.
fn three_sweeps(x: &Array2<f64>, y: &[usize], tied: bool) -> State {
    let zs = (0..3).map(|k| x.slice(ndarray::s![k..k + 3, ..]).to_owned()).collect();
    let mut state = State::new(se_ard_plus_white(2, 3, 0.4), zs, tied, y).unwrap();
    let all: Vec<usize> = (0..y.len()).collect();
    for _ in 0..3 {
        state.refine(&state.block(x, y, &all), 0.7, ViewFor::Sweep).unwrap();
    }
    state
}

fn dense_posterior(prior: &ClassPrior, post: &ClassPosterior) -> (Vec<f64>, Mat<f64>) {
    let k = prior.k();
    let ainv = inverse(&post.a_chol.reconstruct());
    let v = k * &ainv * k;
    let m = (0..k.nrows()).map(|i| (0..k.nrows()).map(|j| k[(i, j)] * post.beta[j]).sum()).collect();
    (m, v)
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

/// Batch EP with fixed kernels and Z to convergence (plain damping 0.5).
fn converge(state: &mut State, x: &Array2<f64>, y: &[usize], iters: usize) {
    let all: Vec<usize> = (0..y.len()).collect();
    for _ in 0..iters {
        state.refine(&state.block(x, y, &all), 0.5, ViewFor::Sweep).unwrap();
    }
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

/// Sequential EP on the pairwise factors of eq. 6, dense in inducing-value space and written
/// from the textbook recipe, not from the code's rank-one formulas: each factor's cavity by
/// dividing its two sites out of q; the tilted moments of its two projections from
/// Z = Phi(alpha), alpha = (a_y - a_k) / sqrt(B) (mean a_y + d_y beta / sqrt(B) and
/// a_k - d_k beta / sqrt(B), variance d - d^2 beta (beta + alpha) / B); each new site the tilted
/// marginal divided by the cavity's; q rebuilt from the prior and every site after each factor
/// (no drift from incremental updates). At convergence, log Z_EP from its definition:
///     log Z_EP = log of the integral of p(fbar) prod_f s~_f t~_f(fbar),
/// t~_f the unnormalised sites exp(-p z^2 / 2 + h z) on the projections and
/// log s~_f = log Z_f - log of the integral of q\f t~_f (one 1-D Gaussian integral per side).
/// Returns log Z_EP and each class's (m, V).
#[allow(clippy::type_complexity)]
fn dense_ep_oracle(kernels: &KernelSet, zs: &[Array2<f64>], x: &Array2<f64>, y: &[usize]) -> (f64, Vec<(Vec<f64>, Mat<f64>)>) {
    let (n, c) = (y.len(), zs.len());
    let rows: Vec<DenseRows> = (0..c).map(|k| dense_rows(kernels.class(k), &zs[k], x)).collect();
    let prior: Vec<Mat<f64>> = rows.iter().map(|r| inverse(&r.k)).collect();
    // sites[i][k][side]: (precision, natural mean) of factor (i, k) on class [y_i, k][side].
    let mut sites = vec![vec![[(0.0, 0.0); 2]; c]; n];
    let natural = |sites: &[Vec<[(f64, f64); 2]>], class: usize| {
        let mut lam = prior[class].clone();
        let mut h = vec![0.0; lam.nrows()];
        for (i, &yi) in y.iter().enumerate() {
            for k in (0..c).filter(|&k| k != yi) {
                for (side, cl) in [yi, k].into_iter().enumerate() {
                    if cl == class {
                        let (p, nat) = sites[i][k][side];
                        lam = plus_rank_one(&lam, p, &rows[class].dirs[i]);
                        h.iter_mut().zip(&rows[class].dirs[i]).for_each(|(a, u)| *a += nat * u);
                    }
                }
            }
        }
        (lam, h)
    };
    // The cavity projection (mean, variance) of factor (i, k) on `side`, from the sites.
    let cavity = |sites: &[Vec<[(f64, f64); 2]>], i: usize, k: usize, side: usize| {
        let class = [y[i], k][side];
        let (lam, h) = natural(sites, class);
        let (p, nat) = sites[i][k][side];
        let u = &rows[class].dirs[i];
        let v = inverse(&plus_rank_one(&lam, -p, u));
        let hc: Vec<f64> = h.iter().zip(u).map(|(a, b)| a - nat * b).collect();
        (dot(u, &mat_vec(&v, &hc)), quad(u, &v, u))
    };
    let alpha_beta = |cav: [(f64, f64); 2], i: usize, k: usize| {
        let b = cav[0].1 + cav[1].1 + rows[y[i]].fitc_var[i] + rows[k].fitc_var[i];
        let alpha = (cav[0].0 - cav[1].0) / b.sqrt();
        let beta = (-0.5 * alpha * alpha - crate::special::LN_SQRT_2PI - log_normal_cdf(alpha)).exp();
        (alpha, beta, b)
    };
    let mut change = f64::INFINITY;
    for _ in 0..2000 {
        change = 0.0;
        for i in 0..n {
            for k in (0..c).filter(|&k| k != y[i]) {
                let cav = [cavity(&sites, i, k, 0), cavity(&sites, i, k, 1)];
                let (alpha, beta, b) = alpha_beta(cav, i, k);
                for (side, sign) in [(0, 1.0), (1, -1.0)] {
                    let (a, d) = cav[side];
                    let mean = a + sign * d * beta / b.sqrt();
                    let var = d - d * d * beta * (beta + alpha) / b;
                    let new = (1.0 / var - 1.0 / d, mean / var - a / d);
                    let old = sites[i][k][side];
                    change = f64::max(change, f64::max((new.0 - old.0).abs(), (new.1 - old.1).abs()));
                    sites[i][k][side] = new;
                }
            }
        }
        if change < 1e-14 {
            break;
        }
    }
    assert!(change < 1e-12, "the dense oracle did not converge (last change {change})");
    let mut log_z = 0.0;
    let mut posterior = Vec::new();
    for (class, prior_lam) in prior.iter().enumerate() {
        let (lam, h) = natural(&sites, class);
        log_z += log_gaussian_integral(&lam, &h) - log_gaussian_integral(prior_lam, &vec![0.0; h.len()]);
        let v = inverse(&lam);
        posterior.push((mat_vec(&v, &h), v));
    }
    for i in 0..n {
        for k in (0..c).filter(|&k| k != y[i]) {
            let cav = [cavity(&sites, i, k, 0), cavity(&sites, i, k, 1)];
            log_z += log_normal_cdf(alpha_beta(cav, i, k).0);
            for (side, &(a, d)) in cav.iter().enumerate() {
                // log of the integral of N(z; a, d) exp(-p z^2 / 2 + h z).
                let (p, nat) = sites[i][k][side];
                log_z -= -0.5 * (1.0 + p * d).ln() + (nat * nat * d + 2.0 * nat * a - p * a * a) / (2.0 * (1.0 + p * d));
            }
        }
    }
    (log_z, posterior)
}

/// The code's parallel, damped EP (every site from the same q) converged on fixed kernels and
/// Z must reach the fixed point of the dense sequential oracle: log Z_q and every class's q
/// to 1e-8 (the fixed point does not depend on the schedule or the damping). A tight check
/// of the whole EP, from the directions and FITC variances to eq. 60's log Z_q.
#[test]
fn converged_ep_is_the_fixed_point_of_a_dense_sequential_ep() {
    let problems = [(toy(6, 1, 3, 7), 1, 0.3), (toy(10, 2, 3, 12), 2, 0.4)];
    for ((x, y), m, noise) in problems {
        let d = x.ncols();
        let kernels = se_ard_plus_white(d, 3, noise);
        let zs: Vec<Array2<f64>> = (0..3).map(|k| x.slice(ndarray::s![m * k..m * k + m, ..]).to_owned()).collect();
        let (oracle_log_z, oracle_q) = dense_ep_oracle(&kernels, &zs, &x, &y);
        let mut state = State::new(kernels, zs, false, &y).unwrap();
        assert!(state.priors.iter().all(|p| p.chol.jitter() == 0.0), "the oracle's K must be the code's");
        let all: Vec<usize> = (0..y.len()).collect();
        let mut change = f64::INFINITY;
        for _ in 0..1000 {
            change = state.refine(&state.block(&x, &y, &all), 0.5, ViewFor::Sweep).unwrap();
            if change < 1e-14 {
                break;
            }
        }
        assert!(change < 1e-12, "M = {m}: parallel EP did not converge (last change {change})");
        let log_z_q = state.log_z_q(&x, &y).unwrap();
        assert!((log_z_q - oracle_log_z).abs() < 1e-8, "M = {m}: log Z_q {log_z_q} vs the dense oracle's {oracle_log_z}");
        for (k, (om, ov)) in oracle_q.iter().enumerate() {
            let (cm, cv) = dense_posterior(&state.priors[k], &state.posts[k]);
            for a in 0..m {
                assert!((cm[a] - om[a]).abs() < 1e-8, "M = {m}, class {k}: mean {a} {} vs {}", cm[a], om[a]);
                for b in 0..m {
                    assert!((cv[(a, b)] - ov[(a, b)]).abs() < 1e-8, "M = {m}, class {k}: covariance ({a}, {b})");
                }
            }
        }
    }
}

/// log p(y) and p(y* | y) of the model EP approximates (the pairwise factors of eq. 6, FITC),
/// with one inducing value per class, by a 3-D grid whose integrand is built from the kernel
/// (K(Z, Z), k(Z, x), kappa), not from the code's prior rows. The tolerances are EP's own
/// approximation error on this problem, not the code's; the tight check of the same problem is
/// `converged_ep_is_the_fixed_point_of_a_dense_sequential_ep`.
#[test]
fn ep_matches_brute_force_integration_on_a_tiny_problem() {
    let (x, y) = toy(6, 1, 3, 7);
    let kernels = se_ard_plus_white(1, 3, 0.3);
    let zs: Vec<Array2<f64>> = (0..3).map(|k| x.slice(ndarray::s![k..k + 1, ..]).to_owned()).collect();
    let xs = Array2::from_shape_vec((1, 1), vec![0.1]).unwrap();
    // Brute force over fbar in R^3: prior N(0, K_c) per class, factors Phi((u_y fy - u_k fk) / sqrt(s_y + s_k)).
    let rows: Vec<DenseRows> = (0..3).map(|k| dense_rows(kernels.class(k), &zs[k], &x)).collect();
    let test_rows: Vec<DenseRows> = (0..3).map(|k| dense_rows(kernels.class(k), &zs[k], &xs)).collect();
    let sd: Vec<f64> = rows.iter().map(|r| r.k[(0, 0)].sqrt()).collect();
    let mut state = State::new(kernels.clone(), zs, false, &y).unwrap();
    converge(&mut state, &x, &y, 400);
    let log_z_q = state.log_z_q(&x, &y).unwrap();
    let g = 61;
    let h = 12.0 / (g - 1) as f64;
    let mut log_terms = Vec::new();
    let mut pred = [0.0; 3];
    for a in 0..g {
        for b in 0..g {
            for cc in 0..g {
                let e = [-6.0 + a as f64 * h, -6.0 + b as f64 * h, -6.0 + cc as f64 * h];
                let f: Vec<f64> = (0..3).map(|k| sd[k] * e[k]).collect();
                let mut lw = -0.5 * e.iter().map(|v| v * v).sum::<f64>();
                for (i, &yi) in y.iter().enumerate() {
                    for k in (0..3).filter(|&k| k != yi) {
                        let my = rows[yi].dirs[i][0] * f[yi];
                        let mk = rows[k].dirs[i][0] * f[k];
                        lw += log_normal_cdf((my - mk) / (rows[yi].fitc_var[i] + rows[k].fitc_var[i]).sqrt());
                    }
                }
                log_terms.push(lw);
                // p(y* = c | fbar): the exact arg-max likelihood over the FITC conditionals.
                let mean: Vec<f64> = (0..3).map(|k| test_rows[k].dirs[0][0] * f[k]).collect();
                let var: Vec<f64> = (0..3).map(|k| test_rows[k].fitc_var[0]).collect();
                for (c, p) in pred.iter_mut().enumerate() {
                    *p += lw.exp() * crate::likelihoods::probit::log_argmax_prob(&mean, &var, c).exp();
                }
            }
        }
    }
    let log_z_grid = crate::linalg::log_sum_exp(&log_terms) + 3.0 * (h / (2.0 * std::f64::consts::PI).sqrt()).ln();
    let total: f64 = log_terms.iter().map(|v| v.exp()).sum();
    let model = state.model(None, Default::default());
    let ep_pred = crate::methods::Fitted::predict(&model, &xs, &mut Pcg64::seed_from_u64(0)).unwrap().probs;
    assert!((log_z_q - log_z_grid).abs() < 0.05, "EP log Z_q {log_z_q} vs brute force {log_z_grid}");
    for c in 0..3 {
        assert!((ep_pred[(0, c)] - pred[c] / total).abs() < 0.02, "class {c}: EP {} vs brute force {}", ep_pred[(0, c)], pred[c] / total);
    }
}

fn fit(
    name: &str,
    settings: serde_json::Value,
    x: &Array2<f64>,
    y: &[usize],
    kernels: &KernelSet,
    hyper: HyperPolicy,
) -> Box<dyn crate::methods::Fitted> {
    let method = crate::methods::build(name, &settings).unwrap();
    let mut rng = Pcg64::seed_from_u64(11);
    let mut ctx = FitContext::new(&mut rng, None);
    method.fit(&Problem { x, y, n_classes: 3 }, kernels, hyper, &mut ctx).unwrap()
}

#[test]
fn sep_is_close_to_ep_and_both_classify_the_toy_problem() {
    let (x, y) = toy(60, 2, 3, 8);
    let kernels = se_ard_plus_white(2, 3, 0.1);
    let settings = serde_json::json!({ "inducing": 6, "max_iters": 60, "damping_decay": 1.0 });
    let ep = fit("ep", settings.clone(), &x, &y, &kernels, HyperPolicy::Fixed);
    let sep = fit("sep", settings, &x, &y, &kernels, HyperPolicy::Fixed);
    // Each must classify on its own (SEP is not checked through EP): first the training
    // errors, then how close the two are.
    let mut rng = Pcg64::seed_from_u64(0);
    let (pe, ps) = (ep.predict(&x, &mut rng).unwrap().probs, sep.predict(&x, &mut rng).unwrap().probs);
    for (name, probs) in [("EP", &pe), ("SEP", &ps)] {
        let errors = (0..60).filter(|&i| crate::linalg::argmax(probs.row(i).as_slice().unwrap()) != y[i]).count();
        assert!(errors <= 6, "{name} misclassifies {errors} of 60 training rows");
    }
    let max_gap = pe.iter().zip(ps.iter()).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
    assert!(max_gap < 0.1, "EP and SEP predictive probabilities differ by {max_gap}");
    let (ze, zs) = (ep.evidence().unwrap().value, sep.evidence().unwrap().value);
    assert!((ze - zs).abs() < 0.05 * ze.abs(), "log Z_q: EP {ze}, SEP {zs}");
}

/// One row, two classes: each class is touched by one factor (n_c = 1), so SEP's cavity takes
/// out the whole tied site and SEP is EP: the same q and log Z_q, and q carries the factor's
/// tilted moments (the cavity is the prior). A second refinement must leave it there (its
/// cavity must again be the prior, which a wrong n_c would not give).
#[test]
fn sep_with_one_factor_per_class_is_ep() {
    let x = Array2::from_shape_vec((1, 2), vec![0.3, -0.2]).unwrap();
    let y = vec![0];
    let zs = vec![
        Array2::from_shape_vec((3, 2), vec![-1.0, 0.0, 0.0, 0.5, 1.0, -0.5]).unwrap(),
        Array2::from_shape_vec((3, 2), vec![-0.5, -0.5, 0.4, 0.2, 1.2, 0.8]).unwrap(),
    ];
    let kernels = se_ard_plus_white(2, 2, 0.3);
    let rows: Vec<DenseRows> = (0..2).map(|c| dense_rows(kernels.class(c), &zs[c], &x)).collect();
    let d: Vec<f64> = rows.iter().map(|r| quad(&r.dirs[0], &r.k, &r.dirs[0])).collect();
    let tilted = tilted_pair([0.0, 0.0], [d[0], d[1]], rows[0].fitc_var[0] + rows[1].fitc_var[0]);
    let fitted = |tied: bool| {
        let mut state = State::new(kernels.clone(), zs.clone(), tied, &y).unwrap();
        assert_eq!(state.n_factors, vec![1.0, 1.0]);
        for _ in 0..2 {
            state.refine(&state.block(&x, &y, &[0]), 1.0, ViewFor::Sweep).unwrap();
        }
        state
    };
    let (ep, sep) = (fitted(false), fitted(true));
    let (ze, zs_) = (ep.log_z_q(&x, &y).unwrap(), sep.log_z_q(&x, &y).unwrap());
    assert!((ze - zs_).abs() < 1e-12, "log Z_q: EP {ze}, SEP {zs_}");
    for c in 0..2 {
        let ((me, ve), (ms, vs)) = (dense_posterior(&ep.priors[c], &ep.posts[c]), dense_posterior(&sep.priors[c], &sep.posts[c]));
        for a in 0..3 {
            assert!((me[a] - ms[a]).abs() < 1e-12, "class {c}: mean {a}, EP {} SEP {}", me[a], ms[a]);
            for b in 0..3 {
                assert!((ve[(a, b)] - vs[(a, b)]).abs() < 1e-12, "class {c}: covariance ({a}, {b})");
            }
        }
        let u = &rows[c].dirs[0];
        let (mean, var) = (dot(u, &ms), quad(u, &vs, u));
        assert!((mean - tilted.mean[c]).abs() < 1e-7, "class {c}: SEP mean {mean} vs tilted {}", tilted.mean[c]);
        assert!((var - tilted.var[c]).abs() < 1e-7, "class {c}: SEP variance {var} vs tilted {}", tilted.var[c]);
    }
}

/// n_c, the factors touching class c, counted by hand: a row of class c has C - 1 factors, all
/// touching c; a row of another class has one factor against c.
#[test]
fn sep_counts_the_factors_touching_each_class() {
    // C = 4, y = (0, 2, 2, 1, 2): class 0 gets 3 (row 0) + 1 + 1 + 1 + 1 = 7; class 1 gets
    // 1 + 1 + 1 + 3 + 1 = 7; class 2 gets 1 + 3 + 3 + 1 + 3 = 11; class 3 gets 1 from every row = 5.
    let y = vec![0, 2, 2, 1, 2];
    let (x, _) = toy(5, 2, 4, 13);
    let zs = (0..4).map(|_| x.slice(ndarray::s![0..2, ..]).to_owned()).collect();
    let state = State::new(se_ard_plus_white(2, 4, 0.3), zs, true, &y).unwrap();
    assert_eq!(state.n_factors, vec![7.0, 7.0, 11.0, 5.0]);
    // Each factor touches two classes: sum n_c = 2 N (C - 1).
    assert_eq!(state.n_factors.iter().sum::<f64>(), 2.0 * 5.0 * 3.0);
}

/// The tied site of each class is a sum of positive rank-one site precisions, scaled by
/// non-negative weights (1 - rho n_B / n_c and rho), so it stays positive semi-definite
/// through batch and minibatch refinements. The large noise keeps K^{-1} dominant, so that q
/// would stay positive definite with a negative site precision and this check, not a failed
/// Cholesky factor, reports it.
#[test]
fn sep_tied_site_precisions_stay_positive_semi_definite() {
    let (x, y) = toy(30, 2, 3, 14);
    let kernels = se_ard_plus_white(2, 3, 3.0);
    let zs = (0..3).map(|k| x.slice(ndarray::s![4 * k..4 * k + 4, ..]).to_owned()).collect();
    let mut state = State::new(kernels, zs, true, &y).unwrap();
    let all: Vec<usize> = (0..30).collect();
    let check = |state: &State, when: &str| {
        for (k, sums) in state.sums.iter().enumerate() {
            let (eig, _) = crate::linalg::small::eigh(&sums.precision).unwrap();
            assert!(eig[0] >= -1e-12, "{when}: class {k}'s tied precision has eigenvalue {}", eig[0]);
            assert!(eig[eig.len() - 1] > 1e-3, "{when}: class {k}'s tied precision is empty");
        }
    };
    for it in 0..30 {
        state.refine(&state.block(&x, &y, &all), 0.5, ViewFor::Sweep).unwrap();
        check(&state, &format!("batch iteration {it}"));
    }
    for (b, chunk) in all.chunks(7).enumerate() {
        state.refine(&state.block(&x, &y, chunk), 1.0, ViewFor::Sweep).unwrap();
        check(&state, &format!("minibatch {b}"));
    }
}

/// `step: adam` in batch mode: Adam's first step moves every free coordinate by at most its
/// rate (bias-corrected, |m / sqrt(v)| = 1), so each learned inducing input stays within 0.01
/// of the training input it started at, where the adaptive rates (0.01 x the gradient) move
/// some coordinate further.
#[test]
fn a_batch_adam_step_moves_inducing_inputs_by_at_most_its_rate() {
    let (x, y) = toy(60, 2, 3, 10);
    let kernels = se_ard_plus_white(2, 3, 0.1);
    let largest_move = |step: &str| {
        let settings = serde_json::json!({ "inducing": 5, "max_iters": 1, "step": step, "adam_lr": 0.01 });
        let model = fit("ep", settings, &x, &y, &kernels, HyperPolicy::Fixed);
        let zs = model.inducing_inputs();
        assert_eq!(zs.len(), 3);
        zs.iter()
            .flat_map(|z| z.rows().into_iter().map(|r| r.to_owned()).collect::<Vec<_>>())
            .map(|r| x.rows().into_iter().map(|xr| (&xr - &r).iter().fold(0.0f64, |a, v| a.max(v.abs()))).fold(f64::INFINITY, f64::min))
            .fold(0.0f64, f64::max)
    };
    let adam = largest_move("adam");
    assert!(adam > 0.005 && adam <= 0.01 + 1e-9, "Adam moved an inducing input by {adam}");
    let adaptive = largest_move("adaptive");
    assert!(adaptive > 0.01 + 1e-9, "the adaptive rates moved at most {adaptive}");
}

#[test]
fn learning_raises_log_z_q_in_batch_and_minibatch_mode() {
    let (x, y) = toy(60, 2, 3, 9);
    let kernels = se_ard_plus_white(2, 3, 1.0);
    for name in ["ep", "sep"] {
        let fixed = fit(name, serde_json::json!({ "inducing": 5, "max_iters": 40 }), &x, &y, &kernels, HyperPolicy::Fixed);
        let learned = fit(name, serde_json::json!({ "inducing": 5, "max_iters": 40 }), &x, &y, &kernels, HyperPolicy::Learn);
        let (f, l) = (fixed.evidence().unwrap().value, learned.evidence().unwrap().value);
        assert!(l > f, "{name}: learned log Z_q {l} not above the fixed kernel's {f}");
        let mini = fit(
            name,
            serde_json::json!({ "inducing": 5, "max_iters": 300, "batch": 10, "adam_lr": 0.01 }),
            &x,
            &y,
            &kernels,
            HyperPolicy::Learn,
        );
        let z = mini.evidence().unwrap().value;
        assert!(z > f, "{name}: minibatch log Z_q {z} not above the fixed kernel's batch value {f}");
    }
}

/// `average_decay`: training is untouched (the same log Z_q, bit for bit); decay 0 averages
/// nothing (the last iterate's predictions, bit for bit); a positive decay predicts elsewhere.
#[test]
fn predicting_at_the_iterates_average_leaves_training_alone() {
    let (x, y) = toy(60, 2, 3, 9);
    let kernels = se_ard_plus_white(2, 3, 1.0);
    let run = |average: Option<f64>| {
        let mut settings = serde_json::json!({ "inducing": 5, "max_iters": 200, "batch": 10, "adam_lr": 0.01 });
        if let Some(d) = average {
            settings["average_decay"] = serde_json::json!(d);
        }
        let model = fit("sep", settings, &x, &y, &kernels, HyperPolicy::Learn);
        let probs = model.predict(&x, &mut Pcg64::seed_from_u64(0)).unwrap().probs;
        (model.evidence().unwrap().value, probs)
    };
    let (z_last, p_last) = run(None);
    let (z_zero, p_zero) = run(Some(0.0));
    let (z_avg, p_avg) = run(Some(0.95));
    assert_eq!(z_last.to_bits(), z_zero.to_bits());
    assert_eq!(z_last.to_bits(), z_avg.to_bits(), "the average must not feed back into training");
    assert!(p_last.iter().zip(p_zero.iter()).all(|(a, b)| a.to_bits() == b.to_bits()), "decay 0 is the last iterate");
    let gap = p_last.iter().zip(p_avg.iter()).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
    assert!(gap > 1e-6 && gap < 0.2, "the average's predictions differ from the last iterate's by {gap}");
}

#[test]
fn sep_memory_does_not_grow_with_n_and_ep_memory_does() {
    let kernels = se_ard_plus_white(2, 3, 0.5);
    let bytes = |n: usize, tied: bool| {
        let (x, y) = toy(n, 2, 3, 10);
        let zs = (0..3).map(|k| x.slice(ndarray::s![k..k + 4, ..]).to_owned()).collect();
        State::new(kernels.clone(), zs, tied, &y).unwrap().site_bytes()
    };
    assert_eq!(bytes(20, true), bytes(200, true));
    // EP: 4 scalars per (row, class) and an M-vector per (row, class): (4 + 4) 3 8 bytes per row.
    assert_eq!(bytes(200, false) - bytes(20, false), 180 * 3 * (4 + 4) * 8);
}

#[test]
fn settings_are_checked_with_the_field_named() {
    for (bad, field) in [
        (serde_json::json!({ "inducing": 0 }), "inducing"),
        (serde_json::json!({ "inducing_fraction": 1.5 }), "inducing_fraction"),
        (serde_json::json!({ "damping": 0.0 }), "damping"),
        (serde_json::json!({ "batch": 0 }), "batch"),
        (serde_json::json!({ "site_directions": "lagged" }), "site_directions"),
        (serde_json::json!({ "lengthscale_sign": "summed", "batch": 10 }), "lengthscale_sign"),
        (serde_json::json!({ "lengthscale_sign": "summed", "step": "adam" }), "lengthscale_sign"),
        (serde_json::json!({ "average_decay": 1.0 }), "average_decay"),
    ] {
        let err = match serde_json::from_value::<EpParams>(bad).map_err(|e| e.to_string()).and_then(|p| p.check(true).map(|_| ())) {
            Err(e) => e,
            Ok(()) => panic!("accepted a bad {field}"),
        };
        assert!(err.contains(field), "{err}");
    }
    assert_eq!(serde_json::from_value::<EpParams>(serde_json::json!({ "inducing_fraction": 0.05 })).unwrap().inducing_for(193), 10);
}

/// `site_directions`: while the kernels and Z stand still every site's stored direction is the
/// current one, so the three readings refine alike and re-reading the sites changes nothing.
/// After a step, `lagged` projects q on the stored directions and `current` rebuilds q along
/// the new ones: both checked against dense algebra.
/// A minibatch refinement moves q incrementally: it takes the block's old sites out along their
/// old directions and puts the new ones in along the current directions. Whatever the order of
/// blocks, q must stay the posterior of the stored sites, Lambda = K^{-1} + sum_i C1_i o_i o_i^T
/// and h = sum_i C2_i o_i over every row's stored direction o_i, rebuilt densely here after
/// partial refinements that follow a step on the kernels (so old and current directions differ).
#[test]
fn partial_refinements_keep_q_the_posterior_of_the_stored_sites() {
    let (x, y) = toy(10, 2, 3, 5);
    let mut state = three_sweeps(&x, &y, false);
    let mut rng = Pcg64::seed_from_u64(11);
    let theta: Vec<f64> = state.theta().iter().map(|t| t + rng.random_range(-0.2..0.2)).collect();
    state.set_theta(&theta).unwrap();
    for rows in [&[2usize, 5, 7][..], &[0, 1, 2, 3], &[9, 4]] {
        state.refine(&state.block(&x, &y, rows), 1.0, ViewFor::Sweep).unwrap();
        let store = state.factors.as_ref().unwrap();
        for k in 0..3 {
            let prior = &state.priors[k];
            let mut lam = inverse(prior.k());
            let mm = lam.nrows();
            let mut h = vec![0.0; mm];
            for i in 0..10 {
                let (c1, c2) = store.sites.on_class(i, y[i], k);
                let o = store.dirs[k].row(i).to_vec();
                for r in 0..mm {
                    h[r] += c2 * o[r];
                    for q in 0..mm {
                        lam[(r, q)] += c1 * o[r] * o[q];
                    }
                }
            }
            let v = inverse(&lam);
            let m: Vec<f64> = (0..mm).map(|r| (0..mm).map(|q| v[(r, q)] * h[q]).sum()).collect();
            let (m_got, v_got) = dense_posterior(prior, &state.posts[k]);
            for r in 0..mm {
                assert!((m[r] - m_got[r]).abs() < 1e-8, "block {rows:?}, class {k}: mean {r} {} against {}", m_got[r], m[r]);
                for q in 0..mm {
                    assert!((v[(r, q)] - v_got[(r, q)]).abs() < 1e-8, "block {rows:?}, class {k}: covariance ({r}, {q})");
                }
            }
        }
    }
}

#[test]
fn site_directions_agree_at_rest_and_project_where_they_say_after_a_step() {
    let (x, y) = toy(10, 2, 3, 5);
    let all: Vec<usize> = (0..10).collect();
    let fresh = || three_sweeps(&x, &y, false);
    let (mut a, mut b, mut c) = (fresh(), fresh(), fresh());
    a.refine(&a.block(&x, &y, &all), 0.7, ViewFor::Sweep).unwrap();
    b.refine(&b.block(&x, &y, &all), 0.7, ViewFor::SweepAlongStored).unwrap();
    c.realign(&c.block(&x, &y, &all)).unwrap();
    c.refine(&c.block(&x, &y, &all), 0.7, ViewFor::Sweep).unwrap();
    for k in 0..3 {
        for (other, name) in [(&b, "lagged"), (&c, "current")] {
            let gap = a.posts[k].beta.iter().zip(&other.posts[k].beta).map(|(p, q)| (p - q).abs()).fold(0.0, f64::max);
            assert!(gap < 1e-10, "class {k}: {name} differs from stored at rest by {gap}");
        }
    }

    // A step on the kernels and Z: the stored directions are now stale.
    let mut rng = Pcg64::seed_from_u64(9);
    let theta: Vec<f64> = a.theta().iter().map(|t| t + rng.random_range(-0.2..0.2)).collect();
    a.set_theta(&theta).unwrap();
    let block = a.block(&x, &y, &all);
    let (views, _) = a.views(&block, ViewFor::SweepAlongStored).unwrap();
    let store = a.factors.as_ref().unwrap();
    for k in 0..3 {
        let (m, v) = dense_posterior(&a.priors[k], &a.posts[k]);
        for i in 0..10 {
            let uo = store.dirs[k].row(i).to_vec();
            let p = &views[k].proj[i];
            let (d, t) = (quad(&uo, &v, &uo), uo.iter().zip(&m).map(|(u, w)| u * w).sum::<f64>());
            assert!(
                (p.d_uu - d).abs() < 1e-9 && (p.d_uo - d).abs() < 1e-9 && (p.d_oo - d).abs() < 1e-9,
                "class {k} row {i}: {p:?} against d {d}"
            );
            assert!((p.t_u - t).abs() < 1e-9 && (p.t_o - t).abs() < 1e-9, "class {k} row {i}: {p:?} against t {t}");
        }
    }
    // The default reading (`stored`, notes §2.9) projects q on both directions: the current
    // u_i = K^{-1} k_i (the new kernel's) and the stored o_i the site was built along, with
    // d_uu = u^T V u, d_uo = u^T V o, d_oo = o^T V o, t_u = u^T m and t_o = o^T m.
    let (views, _) = a.views(&block, ViewFor::Sweep).unwrap();
    for k in 0..3 {
        let (m, v) = dense_posterior(&a.priors[k], &a.posts[k]);
        let dirs = &block.prior_rows[k].dirs;
        let mut moved = 0.0f64;
        for i in 0..10 {
            let u: Vec<f64> = (0..dirs.nrows()).map(|r| dirs[(r, i)]).collect();
            let o = store.dirs[k].row(i).to_vec();
            let dot = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f64>();
            let want = [quad(&u, &v, &u), quad(&u, &v, &o), quad(&o, &v, &o), dot(&u, &m), dot(&o, &m)];
            let p = &views[k].proj[i];
            let got = [p.d_uu, p.d_uo, p.d_oo, p.t_u, p.t_o];
            for (name, (g, w)) in ["d_uu", "d_uo", "d_oo", "t_u", "t_o"].iter().zip(got.iter().zip(&want)) {
                assert!((g - w).abs() < 1e-9 * (1.0 + w.abs()), "class {k} row {i}: {name} {g} against {w}");
            }
            moved = moved.max((want[0] - want[2]).abs());
        }
        assert!(moved > 1e-6, "class {k}: the step left the directions where they were, so the check is moot");
    }
    // Re-read along the current directions u_i = K^{-1} k_i: Lambda = K^{-1} + sum C1 u u^T.
    a.realign(&block).unwrap();
    let store = a.factors.as_ref().unwrap();
    for k in 0..3 {
        let prior = &a.priors[k];
        let kinv = inverse(prior.k());
        let dirs = &block.prior_rows[k].dirs;
        let mm = kinv.nrows();
        let mut lam = kinv.clone();
        let mut h = vec![0.0; mm];
        for i in 0..10 {
            let (c1, c2) = store.sites.on_class(i, y[i], k);
            for r in 0..mm {
                h[r] += c2 * dirs[(r, i)];
                for s in 0..mm {
                    lam[(r, s)] += c1 * dirs[(r, i)] * dirs[(s, i)];
                }
            }
            let stored: Vec<f64> = store.dirs[k].row(i).to_vec();
            assert!((0..mm).all(|r| (stored[r] - dirs[(r, i)]).abs() < 1e-12), "class {k} row {i}: directions not updated");
        }
        let v = inverse(&lam);
        let m: Vec<f64> = (0..mm).map(|r| (0..mm).map(|s| v[(r, s)] * h[s]).sum()).collect();
        let (m_got, v_got) = dense_posterior(prior, &a.posts[k]);
        for r in 0..mm {
            assert!((m[r] - m_got[r]).abs() < 1e-8, "class {k}: mean {r} {} against {}", m_got[r], m[r]);
            for s in 0..mm {
                assert!((v[(r, s)] - v_got[(r, s)]).abs() < 1e-8, "class {k}: covariance ({r}, {s})");
            }
        }
    }
}

/// App. G's rule, x1.02 while the sign holds and x0.5 when it flips, in both readings: with
/// `summed` a length-scale whose own gradient keeps its sign is halved when the sum of the
/// length-scales' gradients has the other sign, and one whose own gradient flipped grows when
/// the sum has its previous sign; the other parameters follow their own signs either way.
#[test]
fn adaptive_rates_compare_length_scales_with_the_summed_sign_when_asked() {
    use super::fit::AdaptiveRates;
    // Parameters: two length-scales (unit 0.25), one amplitude (unit 1).
    let unit = vec![0.25, 0.25, 1.0];
    let free = [true; 3];
    let first = [1.0, -3.0, 2.0];
    // The rate each parameter's second step was taken with: its move / (unit x gradient).
    let second_rates = |summed: Option<Vec<bool>>, second: [f64; 3]| {
        let mut rates = AdaptiveRates::new(0.01, unit.clone(), summed);
        let mut theta = [0.0; 3];
        rates.step(&mut theta, &first, &free);
        let before = theta;
        rates.step(&mut theta, &second, &free);
        (0..3).map(|j| (theta[j] - before[j]) / (unit[j] * second[j])).collect::<Vec<f64>>()
    };
    let (held, flipped) = (0.0102, 0.005);
    let expect = |got: Vec<f64>, want: [f64; 3], what: &str| {
        assert!(got.iter().zip(want).all(|(g, w)| (g - w).abs() < 1e-15), "{what}: rates {got:?}, expected {want:?}");
    };
    let ls = Some(vec![true, true, false]);
    // Own signs held (+ +, - -); their sum 2 - 5 = -3 < 0.
    let second = [2.0, -5.0, 4.0];
    expect(second_rates(None, second), [held, held, held], "own, both held");
    expect(second_rates(ls.clone(), second), [flipped, held, held], "summed: + against a - sum halves");
    // Own signs both flipped (+ -, - +); their sum -4 + 1 = -3 < 0.
    let second = [-4.0, 1.0, 4.0];
    expect(second_rates(None, second), [flipped, flipped, held], "own, both flipped");
    expect(second_rates(ls, second), [flipped, held, held], "summed: - against a - sum grows though its own flipped");
}
