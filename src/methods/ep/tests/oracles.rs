//! Converged EP against a dense sequential EP, and EP's log Z_q and predictive against brute-force integration.
use super::*;

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
