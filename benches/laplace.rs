//! Speed of the multinomial-logit Laplace fit (issue 25): one core, the default settings a
//! one-cell spec gets, ARD squared-exponential kernel with learned variance and length-scales,
//! on split 0 of a 60/40 random split of glass, thyroid, wine and iris (glass: 128 training
//! rows, C = 6, d = 9), plus glass with the kernel fixed. Prints the median fit time of a few
//! repetitions, the evaluations and Newton steps of the search, the flop rate reached on the
//! counted dense work (below), and the evidence and learned log-parameters, so that a change
//! of the code can be checked for the same optimum.
//!
//! Flop model (multiply-adds x 2; n training rows, C classes, P kernel parameters): a Newton
//! step's curvature is C Cholesky factors of B_c (n^3/6 each) and their inverses (n^3/3), the
//! factor of M (n^3/6) and about 4C + 1 matrix-vector products; a gradient is 2.5 C n^3 (K E_c,
//! two triangular solves with M's factor, the symmetric products P_c^T P_c) and (4C + 2) n^2 a
//! parameter. Every evaluation computes the curvature once more at its mode.
//!
//! `cargo bench --bench laplace`. Where the time went before and after: benches/PROFILE.md.
use mcgp::data::{default_data_dir, make_splits, Registry, SplitProtocol, Standardizer};
use mcgp::kernels::{KernelParams, KernelSet};
use mcgp::methods::{self, FitContext, HyperPolicy, Problem};
use rand::SeedableRng;

/// Median CPU seconds of the process over `reps` calls: the fit runs on one thread, so on an
/// idle machine this is its wall time, and other load on the machine does not inflate it.
fn median_seconds(reps: usize, mut f: impl FnMut()) -> f64 {
    let mut t: Vec<f64> = (0..reps)
        .map(|_| {
            let start = cpu_time::ProcessTime::now();
            f();
            start.elapsed().as_secs_f64()
        })
        .collect();
    t.sort_by(f64::total_cmp);
    t[reps / 2]
}

/// The counted dense flops of a learned fit (module docs).
fn flops(n: f64, c: f64, params: f64, evaluations: f64, newton_steps: f64) -> f64 {
    let curvature = (c / 2.0 + 1.0 / 6.0) * n.powi(3) + (4.0 * c + 1.0) * n * n;
    let gradient = 2.5 * c * n.powi(3) + params * (4.0 * c + 2.0) * n * n;
    2.0 * ((newton_steps + evaluations) * curvature + evaluations * gradient)
}

fn main() {
    mcgp::tune_allocator();
    faer::set_global_parallelism(faer::Par::Seq);
    let registry = Registry::load(&default_data_dir()).expect("registry");
    let method = methods::build("laplace", &serde_json::Value::Null).expect("laplace");
    for (name, ard, policy) in [
        ("glass", false, HyperPolicy::Fixed),
        ("glass", true, HyperPolicy::Learn),
        ("thyroid", true, HyperPolicy::Learn),
        ("wine", true, HyperPolicy::Learn),
        ("iris", true, HyperPolicy::Learn),
    ] {
        let data = registry.load_dataset(name).expect("dataset");
        let protocol = SplitProtocol::Random { train_fraction: 0.6, repeats: 1, stratify: false, train_size: None, test_size: None };
        let split = &make_splits(&protocol, &data, 1, &default_data_dir()).expect("split")[0];
        let train = data.subset(&split.train);
        let x = Standardizer::fit(&train.x).transform(&train.x);
        let problem = Problem { x: &x, y: &train.y, n_classes: data.n_classes() };
        let kernel = KernelParams { ard, ..Default::default() }.build(data.d()).expect("kernel");
        let kernels = KernelSet::shared_se(&kernel);
        let fit = || {
            let mut rng = rand_pcg::Pcg64::seed_from_u64(0);
            let mut ctx = FitContext::new(&mut rng, None);
            method.fit(&problem, &kernels, policy, &mut ctx).expect("fit")
        };
        let secs = median_seconds(5, || drop(fit()));
        let fitted = fit();
        let diag = fitted.diagnostics();
        let number = |k: &str| diag.numbers.get(k).copied().unwrap_or(0.0);
        let (n, c) = (x.nrows() as f64, data.n_classes() as f64);
        let label = if policy == HyperPolicy::Learn { "ARD learned" } else { "fixed kernel" };
        print!("laplace {name} (n = {n}, C = {c}), {label}: {secs:.3} CPU s (median of 5)");
        if policy == HyperPolicy::Learn {
            let (evals, steps) = (number("hyper_evaluations"), number("hyper_newton_steps"));
            let params = fitted.kernels().log_params().len() as f64;
            let rate = flops(n, c, params, evals, steps) / secs / 1e9;
            print!(", {evals} evaluations, {steps} Newton steps, {rate:.1} GFlop/s counted");
        }
        println!();
        let log_params: Vec<String> = fitted.kernels().log_params().iter().map(|v| format!("{v:.9}")).collect();
        println!("    log evidence {:.10}, log-parameters [{}]", fitted.evidence().expect("evidence").value, log_params.join(", "));
    }
}
