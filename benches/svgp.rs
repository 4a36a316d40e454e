//! Speed of one SVI-MGPC step at the MNIST spec's sizes: M = 200 inducing inputs, minibatch
//! |B| = 200, C = 10 latent GPs, D = 784 inputs, kernel and Z learned, natural gradients for
//! q(u) (and, for comparison, Adam alone and the softmax likelihood). The step time is the
//! difference of two fits with iteration budgets 20 and 120, over 100 steps (benches/steps), so
//! initialisation is not counted. `cargo bench --bench svgp` (all cores of the machine; set
//! RAYON_NUM_THREADS to compare).
mod steps;

use mcgp::kernels::{KernelSet, SqExp};
use mcgp::methods::{self, HyperPolicy, Problem};
use ndarray::Array2;
use rand::{RngExt, SeedableRng};
use rand_pcg::Pcg64;

fn main() {
    // Times are the machine's: name it, as every stored cell does.
    println!("machine: {}", mcgp::runner::machine());
    faer::set_global_parallelism(faer::Par::Seq);
    let (n, d, c) = (4000, 784, 10);
    let mut rng = Pcg64::seed_from_u64(1);
    let x = Array2::from_shape_fn((n, d), |_| if rng.random_range(0.0..1.0) < 0.8 { 0.0 } else { rng.random_range(0.0..1.0) });
    let y: Vec<usize> = (0..n).map(|i| i % c).collect();
    let problem = Problem { x: &x, y: &y, n_classes: c };
    let kernels = KernelSet::shared_se(&SqExp { log_variance: 0.0, log_lengthscales: vec![10f64.ln()], learn_variance: true });
    println!("svgp step, M = 200, |B| = 200, C = {c}, D = {d}, {} threads:", rayon::current_num_threads());
    for (label, settings) in [
        (
            "robust-max, natural gradients + Adam",
            serde_json::json!({ "inducing": 200, "inducing_init": { "init": "random" }, "likelihood": "robust_max" }),
        ),
        (
            "robust-max, Adam only",
            serde_json::json!({ "inducing": 200, "inducing_init": { "init": "random" }, "likelihood": "robust_max", "optimizer": "adam" }),
        ),
        (
            "softmax (20 draws), natural gradients + Adam",
            serde_json::json!({ "inducing": 200, "inducing_init": { "init": "random" }, "likelihood": "softmax" }),
        ),
    ] {
        let method = methods::build("svgp", &settings).expect("svgp");
        let [wall, cpu] = steps::seconds_per_step(method.as_ref(), &problem, &kernels, HyperPolicy::Learn);
        println!("  {label}: {:.1} ms wall, {:.1} ms process CPU per step", 1e3 * wall, 1e3 * cpu);
    }
}
