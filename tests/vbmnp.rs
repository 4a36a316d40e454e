//! VB multinomial probit (Girolami & Rogers 2006) against the exact Gibbs sampler.
use mcgp::kernels::{KernelSet, SqExp};
use mcgp::methods::{build, FitContext, Fitted, HyperPolicy, Problem};
use ndarray::Array2;
use rand::SeedableRng;
use rand_pcg::Pcg64;

fn fit(name: &str, settings: serde_json::Value, x: &Array2<f64>, y: &[usize], kernel: &SqExp, seed: u64) -> Box<dyn Fitted> {
    let method = build(name, &settings).unwrap();
    let mut rng = Pcg64::seed_from_u64(seed);
    let mut ctx = FitContext::new(&mut rng, None);
    method.fit(&Problem { x, y, n_classes: 3 }, &KernelSet::shared_se(kernel), HyperPolicy::Fixed, &mut ctx).unwrap()
}

/// The paper's claim (§6.2, Figures 3–4, Table 1) on a tiny problem: at the same fixed kernel
/// the VB predictive probabilities agree with the Gibbs sampler's (exact up to Monte Carlo
/// error). VB is an approximation, so the allowance is the Gibbs Monte Carlo error (4 standard
/// errors from the spread of 4 independent chains of 1000 kept draws) plus an approximation
/// margin of 0.015 (VB's largest gap here is 0.009).
#[test]
fn gibbs_sampler_and_vb_agree_on_a_tiny_problem() {
    let xs = [-2.0, -1.6, -1.1, -0.7, -0.3, 0.0, 0.2, 0.6, 0.9, 1.3, 1.8, 2.2];
    let y = vec![0, 0, 0, 1, 0, 1, 1, 1, 2, 1, 2, 2];
    let x = Array2::from_shape_vec((12, 1), xs.to_vec()).unwrap();
    // G&R kernel exp(-phi (x - x')^2) with phi = 0.5 (lengthscale 1), unit amplitude.
    let kernel = SqExp { log_variance: 0.0, log_lengthscales: vec![0.0], learn_variance: false };
    let xt = Array2::from_shape_vec((5, 1), vec![-1.8, -0.5, 0.4, 1.5, 3.0]).unwrap();
    let vb = fit("vbmnp", serde_json::json!({ "tol": 0.0, "max_iters": 300 }), &x, &y, &kernel, 1);
    let p_vb = vb.predict_proba(&xt, &mut Pcg64::seed_from_u64(0)).unwrap();
    // Four independent chains: their spread gives the Monte Carlo error of the Gibbs estimate.
    let chains: Vec<Array2<f64>> = (0..4)
        .map(|s| {
            let g =
                fit("gibbs_mnp", serde_json::json!({ "burn_in": 500, "samples": 1000, "evidence_samples": 0 }), &x, &y, &kernel, 10 + s);
            g.predict_proba(&xt, &mut Pcg64::seed_from_u64(s)).unwrap()
        })
        .collect();
    let mut max_diff: f64 = 0.0;
    for j in 0..5 {
        for k in 0..3 {
            let vals: Vec<f64> = chains.iter().map(|c| c[[j, k]]).collect();
            let mean = vals.iter().sum::<f64>() / 4.0;
            let sd = (vals.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / 3.0).sqrt();
            let se = sd / 2.0;
            let diff = (p_vb[[j, k]] - mean).abs();
            max_diff = max_diff.max(diff);
            assert!(diff < 4.0 * se + 0.015, "point {j} class {k}: VB {} vs Gibbs {mean} (se {se})", p_vb[[j, k]]);
        }
        assert!((p_vb.row(j).sum() - 1.0).abs() < 1e-12);
    }
    // The comparison is not vacuous: predictions are far from uniform at the outer points.
    assert!(p_vb[[0, 0]] > 0.6 && p_vb[[3, 2]] > 0.5, "{p_vb:?}");
    eprintln!("max |VB - Gibbs| = {max_diff:.4}");
}
