//! Speed of one SEP step (Villacampa-Calvo & Hernandez-Lobato 2017; issue 20) at vc2017-fig5's
//! MNIST sizes: M = 200 inducing inputs per class, minibatch |B| = 200, C = 10 classes,
//! D = 784 inputs, one squared-exponential ARD plus white-noise kernel per class, kernels and
//! Z learned by Adam. The step time is the difference of two fits with iteration budgets 20
//! and 120, over 100 steps (benches/steps), so initialisation and the final log Z_q are not
//! counted; in a pool of one thread and in one of every core. `cargo bench --bench sep`.
//!
//! Flop model per class and step (multiply-adds x 2, M = |B|): four [M, D] x [D, M] products
//! (K(Z, X_B), K(Z, Z), and the two kernel VJPs' kbar-weighted products), 8 M^2 D; and about
//! 16 M^3 multiply-adds of M x M work (triangular solves for the block's directions and
//! projections, two cavities and a posterior per step at 2 1/3 M^3 each, the site sum, the
//! gradient's outer product and the two inverses its prior part needs, the Cholesky of K).
//! The target, SEP below 2.5% test error within 20 minutes on 2 cores, is measured by
//! experiments/vc2017-fig5-2cores.yaml; this bench is the step time that target rests on.
mod steps;

use mcgp::kernels::{Kernel, KernelSet, SqExp, Sum, White};
use mcgp::methods::{self, HyperPolicy, Problem};
use ndarray::Array2;
use rand::{RngExt, SeedableRng};
use rand_pcg::Pcg64;

fn main() {
    // Times are the machine's: name it, as every stored cell does.
    println!("machine: {}", mcgp::runner::machine());
    faer::set_global_parallelism(faer::Par::Seq);
    let (n, d, c, m) = (4000, 784, 10, 200);
    let mut rng = Pcg64::seed_from_u64(1);
    let x = Array2::from_shape_fn((n, d), |_| if rng.random_range(0.0..1.0) < 0.8 { 0.0 } else { rng.random_range(0.0..1.0) });
    let y: Vec<usize> = (0..n).map(|i| i % c).collect();
    let problem = Problem { x: &x, y: &y, n_classes: c };
    let class_kernel = || -> Box<dyn Kernel> {
        let se = SqExp { log_variance: 0.0, log_lengthscales: vec![0.0; d], learn_variance: true };
        Box::new(Sum::new(vec![Box::new(se), Box::new(White { log_variance: 0.0, learn_variance: true })]))
    };
    let kernels = KernelSet::per_class((0..c).map(|_| class_kernel()).collect());
    let settings = serde_json::json!({ "inducing": m, "batch": 200, "lengthscale_init": "median_inducing" });
    let method = methods::build("sep", &settings).expect("sep");
    let mf = m as f64;
    let gflop = c as f64 * 2.0 * (4.0 * mf * mf * d as f64 + 16.0 * mf.powi(3)) / 1e9;
    println!("sep step, M = {m}, |B| = 200, C = {c}, D = {d}, {gflop:.2} GFlop counted per step:");
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    for threads in [1, cores].into_iter().collect::<std::collections::BTreeSet<_>>() {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().expect("thread pool");
        let [wall, cpu] = pool.install(|| steps::seconds_per_step(method.as_ref(), &problem, &kernels, HyperPolicy::Learn));
        println!(
            "  {threads} thread(s): {:.1} ms wall, {:.1} ms process CPU per step; {:.1} GFlop/s counted (wall)",
            1e3 * wall,
            1e3 * cpu,
            gflop / wall
        );
    }
}
