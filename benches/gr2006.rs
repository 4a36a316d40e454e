//! Speed target of the Girolami & Rogers (2006) reproduction (issue 3): one VB-MNP fit with
//! ARD hyper-parameter estimation (the variational importance sampler) on glass, the largest
//! Table 1 dataset (n_train = 128, C = 6, d = 9), with the settings of Table 1's VB column (the
//! paper's weights, 500 samples, 1% rule), of its `vb-port` column (R-port weights, 0.1% rule;
//! its hyper-parameters feed Laplace and Gibbs) and with Chai (2012)'s MF-MNP settings (1000
//! samples, 1e-6 rule, at most 50 iterations). Wall time of one fit (one core: the runner
//! parallelises across cells, not inside them). Then the Table 1 spec itself on 2 of its 50
//! splits (every cell recomputed on 2 threads), from which the whole spec's time is
//! extrapolated. `cargo bench --bench gr2006`.
mod common;

use mcgp::data::{default_data_dir, make_splits, Registry, SplitProtocol, Standardizer};
use mcgp::kernels::{KernelParams, KernelSet};
use mcgp::methods::{self, FitContext, HyperPolicy, Problem};
use rand::SeedableRng;
use std::time::Instant;

fn main() {
    // Times are the machine's: name it, as every stored cell does.
    println!("machine: {}", mcgp::runner::machine());
    faer::set_global_parallelism(faer::Par::Seq);
    let registry = Registry::load(&default_data_dir()).expect("registry");
    let glass = registry.load_dataset("glass").expect("glass");
    let protocol = SplitProtocol::Random { train_fraction: 0.6, repeats: 1, stratify: false, train_size: None, test_size: None };
    let split = &make_splits(&protocol, &glass, 1, &default_data_dir()).expect("split")[0];
    let train = glass.subset(&split.train);
    let x = Standardizer::fit(&train.x).transform(&train.x);
    let problem = Problem { x: &x, y: &train.y, n_classes: glass.n_classes() };
    let kernel =
        KernelParams { ard: true, lengthscale: mcgp::kernels::LengthScale::One(std::f64::consts::FRAC_1_SQRT_2), ..Default::default() }
            .build(glass.d())
            .expect("kernel");
    let settings = [
        ("Table 1 vb (paper weights, 500 samples, 1% rule)", serde_json::json!({})),
        ("Table 1 vb-port (port weights, 500 samples, 0.1% rule)", serde_json::json!({"is_weight": "port", "tol": 0.001})),
        (
            "Chai MF-MNP (port weights, 1000 samples, 1e-6 rule, <= 50 iterations)",
            serde_json::json!({"is_weight": "port", "is_samples": 1000, "sigma": 1e-6, "tau": 1e-6, "tol": 1e-6, "max_iters": 50}),
        ),
    ];
    for (label, s) in settings {
        let method = methods::build("vbmnp", &s).expect("vbmnp");
        let mut rng = rand_pcg::Pcg64::seed_from_u64(0);
        let mut ctx = FitContext::new(&mut rng, None);
        let t = Instant::now();
        let fit = method.fit(&problem, &KernelSet::shared_se(&kernel), HyperPolicy::Learn, &mut ctx).expect("fit");
        let iters = fit.diagnostics().iterations.unwrap_or_default();
        println!("vbmnp on glass, {label}: {:.2} s, {iters} iterations", t.elapsed().as_secs_f64());
    }
    common::spec_on_two_splits(&registry, "gr2006-table1");
}
