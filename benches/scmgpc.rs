//! Speed of one SC-MGPC SVI step at Galy-Fajou et al.'s MNIST sizes: M = 200 inducing inputs
//! per class, minibatch |S| = 100, C = 10 classes, D = 784 inputs, one SE kernel per class
//! learned by Adam every step (adjoint-form gradient), and without kernel learning. The step
//! time is the difference of two fits with iteration budgets 20 and 120, over 100 steps
//! (benches/steps), so initialisation (class-weighted k-means, cut short here) and the final
//! full-data ELBO are not counted. `cargo bench --bench scmgpc` (set RAYON_NUM_THREADS to compare thread counts).
//! Both wall and process CPU time are printed: on a shared machine the CPU time is the
//! measure (with one thread it does not grow with other work), the wall time what a user waits.
mod steps;

use mcgp::kernels::{Kernel, KernelSet, SqExp};
use mcgp::methods::{self, HyperPolicy, Problem};
use ndarray::Array2;
use rand::{RngExt, SeedableRng};
use rand_pcg::Pcg64;

fn main() {
    // Times are the machine's: name it, as every stored cell does.
    println!("machine: {}", mcgp::runner::machine());
    faer::set_global_parallelism(faer::Par::Seq);
    let (n, d, c) = (2000, 784, 10);
    let mut rng = Pcg64::seed_from_u64(1);
    let x = Array2::from_shape_fn((n, d), |_| if rng.random_range(0.0..1.0) < 0.8 { 0.0 } else { rng.random_range(0.0..1.0) });
    let y: Vec<usize> = (0..n).map(|i| i % c).collect();
    let problem = Problem { x: &x, y: &y, n_classes: c };
    let kernels = KernelSet::per_class(
        (0..c)
            .map(|_| Box::new(SqExp { log_variance: 0.0, log_lengthscales: vec![10f64.ln()], learn_variance: true }) as Box<dyn Kernel>)
            .collect(),
    );
    let settings = serde_json::json!({ "inducing": 200, "batch": 100, "kmeans_subsample": 1000, "kmeans_iters": 2 });
    println!("scmgpc SVI step, M = 200, |S| = 100, C = {c}, D = {d}, {} threads:", rayon::current_num_threads());
    for (label, hyper) in [("kernels learned every step", HyperPolicy::Learn), ("kernels fixed", HyperPolicy::Fixed)] {
        let method = methods::build("scmgpc", &settings).expect("scmgpc");
        let [wall, cpu] = steps::seconds_per_step(method.as_ref(), &problem, &kernels, hyper).map(|t| 1e3 * t);
        println!("  {label}: {wall:.1} ms wall, {cpu:.1} ms process CPU per step");
    }
}
