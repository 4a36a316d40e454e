//! Speed of the Laplace method on glass (the largest Table 1 dataset: n_train = 128, C = 6,
//! d = 9): one fit with fixed hyper-parameters and one with ARD hyper-parameter learning.
//! `cargo bench --bench laplace`; prints the median of a few repetitions.
use mcgp::data::{default_data_dir, make_splits, Registry, SplitProtocol, Standardizer};
use mcgp::kernels::{KernelParams, KernelSet};
use mcgp::methods::{self, FitContext, HyperPolicy, Problem};
use rand::SeedableRng;
use std::time::Instant;

fn median_seconds(reps: usize, mut f: impl FnMut()) -> f64 {
    let mut t: Vec<f64> = (0..reps)
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed().as_secs_f64()
        })
        .collect();
    t.sort_by(f64::total_cmp);
    t[reps / 2]
}

fn main() {
    mcgp::tune_allocator();
    faer::set_global_parallelism(faer::Par::Seq);
    let registry = Registry::load(&default_data_dir()).expect("registry");
    let glass = registry.load_dataset("glass").expect("glass");
    let protocol = SplitProtocol::Random { train_fraction: 0.6, repeats: 1, stratify: false, train_size: None, test_size: None };
    let split = &make_splits(&protocol, &glass, 1, &default_data_dir()).expect("split")[0];
    let train = glass.subset(&split.train);
    let x = Standardizer::fit(&train.x).transform(&train.x);
    let problem = Problem { x: &x, y: &train.y, n_classes: glass.n_classes() };
    let method = methods::build("laplace", &serde_json::Value::Null).expect("laplace");
    for (label, ard, policy) in [("fixed kernel", false, HyperPolicy::Fixed), ("ARD hyper-parameter learning", true, HyperPolicy::Learn)] {
        let kernel = KernelParams { ard, ..Default::default() }.build(glass.d()).expect("kernel");
        let secs = median_seconds(5, || {
            let mut rng = rand_pcg::Pcg64::seed_from_u64(0);
            let mut ctx = FitContext::new(&mut rng, None);
            method.fit(&problem, &KernelSet::shared_se(&kernel), policy, &mut ctx).expect("fit");
        });
        println!("laplace on glass (n = {}, C = {}), {label}: {:.3} s (median of 5)", x.nrows(), glass.n_classes(), secs);
    }
}
