//! Speed of one GFITC evaluation (Villacampa-Calvo & Hernandez-Lobato 2017's baseline; issue
//! 20) at vc2017-tables' largest cells: satimage, a 20 / 80 random split (N = 1,287, d = 36,
//! C = 6), M = 20% = 257 inducing inputs per class, the paper's kernel and the authors'
//! training setup, with the inner EP plain (the authors' damped sweeps, the default) and
//! Anderson-accelerated (`inner_anderson: 3`). An evaluation is one L-BFGS evaluation of
//! log Z_EP: EP re-converged from the last sites, then the gradient. Its time and inner sweeps
//! are the difference of two fits with budgets of 20 and 60 evaluations, so the start and
//! the prediction are not counted. One thread. `cargo bench --bench gfitc`.
//!
//! Flop count per class (multiply-adds x 2, N = 1,287, M = 257): a sweep forms
//! A = K + K_mn G K_nm from its lower triangle (N M^2) and solves L_A^-1 R (N M^2), about
//! 1.1 GFlop over the six classes; the gradient is about 5 GFlop an evaluation
//! (benches/PROFILE.md, sessions 34 and 54).
use mcgp::data::{default_data_dir, make_splits, Registry, SplitProtocol, Standardizer};
use mcgp::kernels::{Kernel, KernelSet, SqExp, Sum, White};
use mcgp::methods::{self, Budget, FitContext, HyperPolicy, Problem};
use rand::SeedableRng;
use rand_pcg::Pcg64;

fn main() {
    // Times are the machine's: name it, as every stored cell does.
    println!("machine: {}", mcgp::runner::machine());
    faer::set_global_parallelism(faer::Par::Seq);
    let registry = Registry::load(&default_data_dir()).expect("registry");
    let data = registry.load_dataset("satimage").expect("satimage");
    let protocol = SplitProtocol::Random { train_fraction: 0.2, repeats: 1, stratify: false, train_size: None, test_size: None };
    let split = make_splits(&protocol, &data, 1, &default_data_dir()).expect("split").swap_remove(0);
    let train = data.subset(&split.train);
    let x = Standardizer::fit(&train.x).transform(&train.x);
    let (d, c) = (data.d(), data.n_classes());
    let problem = Problem { x: &x, y: &train.y, n_classes: c };
    let class_kernel = || -> Box<dyn Kernel> {
        let se = SqExp { log_variance: 0.0, log_lengthscales: vec![0.0; d], learn_variance: true };
        Box::new(Sum::new(vec![Box::new(se), Box::new(White { log_variance: 0.0, learn_variance: true })]))
    };
    let kernels = KernelSet::per_class((0..c).map(|_| class_kernel()).collect());
    println!("gfitc evaluation, satimage 20 / 80 (N = {}, d = {d}, C = {c}), M = 20% per class, one thread:", x.nrows());
    let mut per_eval = Vec::new();
    for anderson in [0, 3] {
        let settings = serde_json::json!({
            "inducing_fraction": 0.2,
            "lbfgs_first_step": "unit_length",
            "lengthscale_init": "sqrt_median_training",
            "lbfgs_lengthscale": "log_squared",
            "lbfgs_pairs": 5,
            "inner_anderson": anderson,
        });
        let method = methods::build("gfitc", &settings).expect("gfitc");
        // [CPU seconds, evaluations, inner sweeps] of a fit with an evaluation budget.
        let fit = |evaluations: u64| -> [f64; 3] {
            let cpu = cpu_time::ProcessTime::now();
            let mut rng = Pcg64::seed_from_u64(0);
            let mut ctx = FitContext::new(&mut rng, None).with_budget(Some(Budget { iterations: Some(evaluations), ..Budget::default() }));
            let fitted = method.fit(&problem, &kernels, HyperPolicy::Learn, &mut ctx).expect("fit");
            let diag = fitted.diagnostics();
            let number = |k: &str| diag.numbers.get(k).copied().unwrap_or(f64::NAN);
            [cpu.elapsed().as_secs_f64(), diag.iterations.map_or(f64::NAN, |i| i as f64), number("inner_sweeps")]
        };
        let (short, long) = (fit(20), fit(60));
        let evals = long[1] - short[1];
        let (ms, sweeps) = (1e3 * (long[0] - short[0]) / evals, (long[2] - short[2]) / evals);
        let name = if anderson == 0 { "plain (the authors')" } else { "Anderson depth 3" };
        println!("  inner EP {name:>22}: {ms:6.1} ms CPU and {sweeps:4.2} inner sweeps an evaluation (evaluations 21-60)");
        per_eval.push(ms);
    }
    println!("  accelerated / plain: {:.2}x less CPU an evaluation", per_eval[0] / per_eval[1]);
}
