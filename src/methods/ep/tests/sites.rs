//! Site updates and q: cavities and log s~ against dense inversion, the new q against the tilted moments, log Z_q at the prior, partial refinements and the stored directions after a step.
use super::*;

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
            let sw = super::super::sweep::sweep(&views, &block.y, &stored, super::super::sweep::Adjoints::None).unwrap();
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

/// q's factor of A = K + K Sigma~ K through the prior's, L (I + L^T Sigma~ L) L^T: the same A
/// as the direct factor where both work, and a factor of A where coincident inducing inputs
/// (a training row drawn twice) leave K singular up to its jitter and the direct one fails.
#[test]
fn the_posterior_factored_through_the_prior_is_a_factor_of_a() {
    let kern = se_ard_plus_white(2, 1, 1e-14);
    let (x, _) = toy(8, 2, 3, 21);
    let check = |z: Array2<f64>, expect_direct_to_fail: bool| {
        let prior = ClassPrior::new(kern.class(0), z, 0).unwrap();
        let rows = dense_rows(kern.class(0), &prior.z, &x);
        let m = prior.m();
        let dirs = Mat::from_fn(m, 8, |a, j| rows.dirs[j][a]);
        // Site precisions large enough that the rounding of K Sigma~ K swamps K's jitter-sized
        // eigenvalues when two inducing inputs coincide.
        let prec: Vec<f64> = (0..8).map(|j| 100.0 * (0.5 + 0.3 * j as f64)).collect();
        let mean: Vec<f64> = (0..8).map(|j| (j as f64 - 3.5) * 0.4).collect();
        let sums = super::super::sparse::SiteSums::from_directions(dirs.as_ref(), &prec, &mean);
        let k = prior.k();
        let a = k + k * &sums.precision * k;
        let scale = (0..m).map(|i| a[(i, i)]).fold(0.0, f64::max);
        let nested = ClassPosterior::factor_through_prior(&prior, &sums, "A").unwrap();
        let back = nested.reconstruct();
        for i in 0..m {
            for j in 0..m {
                assert!((back[(i, j)] - a[(i, j)]).abs() <= 1e-12 * scale, "({i}, {j}): {} against {}", back[(i, j)], a[(i, j)]);
            }
        }
        assert_eq!(Chol::factor(a.as_ref(), "A").is_err(), expect_direct_to_fail);
        // The posterior takes whichever works, and its mean solves A beta = K mu~.
        let post = ClassPosterior::new(&prior, &sums, 0).unwrap();
        let residual = mat_vec(&a, &post.beta).iter().zip(mat_vec(k, &sums.natural_mean)).map(|(l, r)| (l - r).abs()).fold(0.0, f64::max);
        assert!(residual <= 1e-9 * scale, "A beta - K mu~ = {residual}");
        if !expect_direct_to_fail {
            let direct = Chol::factor(a.as_ref(), "A").unwrap();
            assert!((direct.log_det() - nested.log_det()).abs() < 1e-10, "log |A|: {} against {}", direct.log_det(), nested.log_det());
        }
    };
    check(x.slice(ndarray::s![0..4, ..]).to_owned(), false);
    let twice = ndarray::concatenate![ndarray::Axis(0), x.slice(ndarray::s![0..3, ..]), x.slice(ndarray::s![0..3, ..])];
    check(twice, true);
}
