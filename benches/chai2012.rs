//! Speed targets of the Chai (2012) reproduction (issue 4), timed with std::time (no criterion):
//!   1. KL-MNL fit on glass (128 x 6 classes, 768 latents) at fixed hyper-parameters;
//!   2. the same with hyper-parameter learning (usqexpard, unit variance, L-BFGS on log Z_h*);
//!   3. MC-MNL importance sampling with n_s = 100,000 on glass (fit of the KL-MNL centre included);
//!   4. MC-MNP, the same with the probit likelihood (20 u-samples per probability), and its IS
//!      predictive on the 86 held-out points with 20,000 samples (Table 3's MC-MNP cell);
//!   5. sparse KL-MNL (issue 21) on glass grown to 300 inducing sites from 25 random ones, 25 per
//!      round by d3 / d2 (the Figure 5 settings), fixed kernel: seconds per expansion round;
//!   6. the Table 3 spec itself (experiments/chai2012-table3.yaml) on 2 of its 50 splits, every
//!      cell recomputed on 2 threads, from which the whole spec's time is extrapolated.
//!
//! Run: `cargo bench --bench chai2012` (needs `[[bench]] name = "chai2012"  harness = false`).
mod common;

use mcgp::data::{default_data_dir, Registry, Standardizer};
use mcgp::kernels::SqExp;
use mcgp::methods::importance::{ImportanceParams, Lik};
use mcgp::methods::klmnl::KlmnlParams;
use mcgp::methods::klmnl_sparse::KlmnlSparseParams;
use mcgp::methods::{FitContext, Fitted, FromSettings, HyperPolicy, Problem};
use rand::SeedableRng;
use std::time::Instant;

fn main() {
    // Times are the machine's: name it, as every stored cell does.
    println!("machine: {}", mcgp::runner::machine());
    let registry = Registry::load(&default_data_dir()).expect("data registry");
    let data = registry.load_dataset("glass").expect("glass");
    // The first 128 rows of a fixed permutation (60% of 214), standardised.
    let mut idx: Vec<usize> = (0..data.n()).collect();
    let mut state = 12345u64;
    for i in (1..idx.len()).rev() {
        state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        idx.swap(i, (state >> 33) as usize % (i + 1));
    }
    let train = data.subset(&idx[..128]);
    let x = Standardizer::fit(&train.x).transform(&train.x);
    let problem = Problem { x: &x, y: &train.y, n_classes: data.n_classes() };
    let kernel = SqExp { log_variance: 0.0, log_lengthscales: vec![0.0; data.d()], learn_variance: false };
    let mut rng = rand_pcg::Pcg64::seed_from_u64(1);

    let method = KlmnlParams::default().check().expect("defaults");
    let t = Instant::now();
    let mut ctx = FitContext::new(&mut rng, None);
    let fixed = method.fit_model(&problem, &kernel, HyperPolicy::Fixed, &mut ctx).expect("fit");
    println!("klmnl glass fixed:   {:8.2} s  log Z_h = {:.4}", t.elapsed().as_secs_f64(), fixed.log_zh());

    let t = Instant::now();
    let learned = method.fit_model(&problem, &kernel, HyperPolicy::Learn, &mut ctx).expect("fit");
    println!(
        "klmnl glass learned: {:8.2} s  log Z_h = {:.4}  ({} evaluations)",
        t.elapsed().as_secs_f64(),
        learned.log_zh(),
        Fitted::extra_metrics(&learned)["hyper_evaluations"]
    );

    let sparse = KlmnlSparseParams { sites: 300, start: Some(25), delta: Some(25), ..Default::default() }.check().expect("settings");
    let t = Instant::now();
    let model = sparse.fit_model(&problem, &kernel, HyperPolicy::Fixed, &mut ctx).expect("sparse fit");
    let secs = t.elapsed().as_secs_f64();
    println!(
        "klmnl_sparse glass 25 -> 300 sites: {:8.2} s  ({:.3} s per expansion round of 11)  log Z~_h = {:.4}",
        secs,
        secs / 11.0,
        model.log_zh()
    );

    let is = ImportanceParams::from_settings(&serde_json::json!({"n_samples": 100000})).unwrap().check(Lik::Logit).unwrap();
    let t = Instant::now();
    let model = is.fit_model(&problem, &kernel, HyperPolicy::Fixed, &mut ctx).expect("IS");
    let e = model.extra_metrics();
    println!(
        "mc_mnl glass 1e5:    {:8.2} s  log Z UB = {:.4}, ESS = {:.1} (incl. the KL-MNL centre fit)",
        t.elapsed().as_secs_f64(),
        e["log_z_ub"],
        e["is_ess"]
    );

    let test = data.subset(&idx[128..]);
    let xt = Standardizer::fit(&train.x).transform(&test.x);
    let is = ImportanceParams::from_settings(&serde_json::json!({"n_samples": 100000, "n_test_samples": 20000}))
        .unwrap()
        .check(Lik::Probit)
        .unwrap();
    let t = Instant::now();
    let model = is.fit_model(&problem, &kernel, HyperPolicy::Fixed, &mut ctx).expect("IS");
    let fit = t.elapsed().as_secs_f64();
    let e = model.extra_metrics();
    model.is_predictive(&xt, &mut rand_pcg::Pcg64::seed_from_u64(2)).expect("predictive");
    println!(
        "mc_mnp glass 1e5:    {:8.2} s  ({:.2} s weights, the rest the 2e4-sample predictive) log Z UB = {:.4}, ESS = {:.1}, {:.0}% of samples stopped early",
        t.elapsed().as_secs_f64(),
        fit,
        e["log_z_ub"],
        e["is_ess"],
        100.0 * e["is_skipped_frac"]
    );

    // Target 5.
    common::spec_on_two_splits(&registry, "chai2012-table3");
}
