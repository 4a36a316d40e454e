//! EP and SEP against mathematics (the notes' checklist item 1): the cavity projections and
//! the closed-form log s~ against dense inversion, the new q against the tilted moments by
//! quadrature, log Z_q at the prior, the gradient against finite differences of the objective
//! with the sites and cavities frozen and, at convergence, of log Z_q itself, EP's log Z_q and
//! predictive against brute-force integration of the same model, SEP close to EP, and SEP's
//! memory independent of N.
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
use ndarray::{Array2, Axis};
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

/// The 2-D quadrature of the tilted distribution of one factor with Gaussian projections.
fn tilted_moments(ay: f64, dy: f64, ak: f64, dk: f64, s: f64) -> (f64, f64, f64) {
    let n = 1201;
    let h = 20.0 / (n - 1) as f64;
    let (mut z, mut e, mut e2) = (0.0, 0.0, 0.0);
    for i in 0..n {
        let u = -10.0 + i as f64 * h;
        let zy = ay + dy.sqrt() * u;
        for j in 0..n {
            let v = -10.0 + j as f64 * h;
            let zk = ak + dk.sqrt() * v;
            let w = (-0.5 * (u * u + v * v)).exp() * normal_cdf((zy - zk) / s.sqrt());
            z += w;
            e += w * zy;
            e2 += w * zy * zy;
        }
    }
    let mean = e / z;
    ((z * h * h / (2.0 * std::f64::consts::PI)).ln(), mean, e2 / z - mean * mean)
}

#[test]
fn one_undamped_refinement_gives_the_tilted_moments_of_a_single_factor() {
    // Two classes and one row: one factor, whose new q must carry its tilted moments.
    let (x, _) = toy(5, 2, 2, 3);
    let kernels = se_ard_plus_white(2, 2, 0.3);
    let zs = vec![x.slice(ndarray::s![0..3, ..]).to_owned(), x.slice(ndarray::s![2..5, ..]).to_owned()];
    let y = vec![1];
    let x1 = x.select(Axis(0), &[4]);
    let mut state = State::new(kernels.clone(), zs, false, &y).unwrap();
    let rows = state.priors.iter().enumerate().map(|(k, p)| p.rows(kernels.class(k), &x1)).collect::<Vec<_>>();
    // Cavity = prior: projections u^T K u = k^T K^{-1} k, means 0.
    let d: Vec<f64> = rows.iter().map(|r| (0..3).map(|a| r.kmn[(a, 0)] * r.dirs[(a, 0)]).sum()).collect();
    let s: f64 = rows.iter().map(|r| r.fitc_var[0]).sum();
    let (log_z, mean_y, var_y) = tilted_moments(0.0, d[1], 0.0, d[0], s);
    state.refine(&state.block(&x1, &y, &[0]), 1.0, ViewFor::Sweep).unwrap();
    // Posterior projection of class y = 1 along u.
    let post = &state.posts[1];
    let e = post.a_chol.solve_l_par(rows[1].kmn.as_ref());
    let proj_var: f64 = (0..3).map(|a| e[(a, 0)] * e[(a, 0)]).sum();
    let proj_mean: f64 = (0..3).map(|a| rows[1].kmn[(a, 0)] * post.beta[a]).sum();
    assert!((proj_mean - mean_y).abs() < 1e-7, "mean {proj_mean} vs {mean_y}");
    assert!((proj_var - var_y).abs() < 1e-7, "var {proj_var} vs {var_y}");
    // log Z_q of one factor with its site in place equals its log Z (EP is exact for one factor).
    let lzq = state.log_z_q(&x1, &y).unwrap();
    assert!((lzq - log_z).abs() < 1e-7, "log Z_q {lzq} vs {log_z}");
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

#[test]
fn gradient_matches_finite_differences_with_sites_and_cavities_frozen() {
    let (x, y) = toy(10, 2, 3, 5);
    let kernels = se_ard_plus_white(2, 3, 0.4);
    for tied in [false, true] {
        let zs = (0..3).map(|k| x.slice(ndarray::s![k..k + 3, ..]).to_owned()).collect();
        let mut state = State::new(kernels.clone(), zs, tied, &y).unwrap();
        let all: Vec<usize> = (0..10).collect();
        for _ in 0..3 {
            state.refine(&state.block(&x, &y, &all), 0.7, ViewFor::Sweep).unwrap();
        }
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
    let kernels = se_ard_plus_white(2, 3, 0.4);
    let zs = (0..3).map(|k| x.slice(ndarray::s![k..k + 3, ..]).to_owned()).collect();
    let mut state = State::new(kernels, zs, false, &y).unwrap();
    let all: Vec<usize> = (0..10).collect();
    for _ in 0..3 {
        state.refine(&state.block(&x, &y, &all), 0.7, ViewFor::Sweep).unwrap();
    }
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

/// log p(y) and p(y* | y) of the model EP approximates (the pairwise factors of eq. 6, FITC),
/// with one inducing value per class, by a 3-D grid.
#[test]
fn ep_matches_brute_force_integration_on_a_tiny_problem() {
    let (x, y) = toy(6, 1, 3, 7);
    let kernels = se_ard_plus_white(1, 3, 0.3);
    let zs: Vec<Array2<f64>> = (0..3).map(|k| x.slice(ndarray::s![k..k + 1, ..]).to_owned()).collect();
    let mut state = State::new(kernels.clone(), zs, false, &y).unwrap();
    converge(&mut state, &x, &y, 400);
    let log_z_q = state.log_z_q(&x, &y).unwrap();
    // Brute force over fbar in R^3: prior N(0, K_c) per class, factors Phi((u_y fy - u_k fk) / sqrt(s_y + s_k)).
    let rows: Vec<_> = (0..3).map(|k| state.priors[k].rows(kernels.class(k), &x)).collect();
    let sd: Vec<f64> = (0..3).map(|k| state.priors[k].k()[(0, 0)].sqrt()).collect();
    let xs = Array2::from_shape_vec((1, 1), vec![0.1]).unwrap();
    let test_rows: Vec<_> = (0..3).map(|k| state.priors[k].rows(kernels.class(k), &xs)).collect();
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
                        let my = rows[yi].dirs[(0, i)] * f[yi];
                        let mk = rows[k].dirs[(0, i)] * f[k];
                        lw += log_normal_cdf((my - mk) / (rows[yi].fitc_var[i] + rows[k].fitc_var[i]).sqrt());
                    }
                }
                log_terms.push(lw);
                // p(y* = c | fbar): the exact arg-max likelihood over the FITC conditionals.
                let mean: Vec<f64> = (0..3).map(|k| test_rows[k].dirs[(0, 0)] * f[k]).collect();
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
    let (ze, zs) = (ep.evidence().unwrap().value, sep.evidence().unwrap().value);
    assert!((ze - zs).abs() < 0.05 * ze.abs(), "log Z_q: EP {ze}, SEP {zs}");
    let mut rng = Pcg64::seed_from_u64(0);
    let (pe, ps) = (ep.predict(&x, &mut rng).unwrap().probs, sep.predict(&x, &mut rng).unwrap().probs);
    let max_gap = pe.iter().zip(ps.iter()).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
    assert!(max_gap < 0.1, "EP and SEP predictive probabilities differ by {max_gap}");
    let errors = (0..60).filter(|&i| crate::linalg::argmax(pe.row(i).as_slice().unwrap()) != y[i]).count();
    assert!(errors <= 6, "EP misclassifies {errors} of 60 training rows");
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
#[test]
fn site_directions_agree_at_rest_and_project_where_they_say_after_a_step() {
    let (x, y) = toy(10, 2, 3, 5);
    let kernels = se_ard_plus_white(2, 3, 0.4);
    let all: Vec<usize> = (0..10).collect();
    let fresh = || {
        let zs = (0..3).map(|k| x.slice(ndarray::s![k..k + 3, ..]).to_owned()).collect();
        let mut state = State::new(kernels.clone(), zs, false, &y).unwrap();
        for _ in 0..3 {
            state.refine(&state.block(&x, &y, &all), 0.7, ViewFor::Sweep).unwrap();
        }
        state
    };
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
