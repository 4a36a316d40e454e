//! Shared by the dense-method benches (`laplace`, `klmnl`; issue 25): one core, the default
//! settings a one-cell spec gets, ARD squared-exponential kernel with learned variance and
//! length-scales, on split 0 of a 60/40 random split of glass, thyroid, wine and iris (glass:
//! 128 training rows, C = 6, d = 9), plus glass with the kernel fixed. Prints the median fit
//! time (process CPU seconds, so that other load on the machine does not inflate it), the work
//! of the search, the flop rate reached on the method's counted dense work, the test log
//! predictive (mean over the 40% held out), and the evidence and learned log-parameters, so
//! that a change of the code can be checked for the same optimum.
//!
//! `MCGP_BENCH_EXPORT=DIR` also writes the four data sets' standardised rows, as the fits see
//! them, to `DIR/<data set>-train.csv` and `-test.csv` (inputs, then the class index; not the
//! scaling runs'), so that a peer can be timed on exactly the same problem
//! (benches/peers/sklearn_laplace.py: scikit-learn's Laplace classifier, side by side with
//! `cargo bench --bench laplace`).
//!
//! `cargo bench --bench <method> -- scaling` instead times fits with the kernel fixed at its
//! defaults (isotropic squared exponential) as n and C grow: random training subsets of
//! satimage (C = 6, d = 36) of the sizes in `DenseBench::scaling_n`, and the first C classes of
//! letter (d = 16) at `DenseBench::scaling_c`'s size, then satimage with the ARD kernel learned
//! at `DenseBench::scaling_learned_n`'s sizes. Each line gives the CPU seconds and the
//! counted flop rate: a rate that falls as n or C grows marks work growing faster than the
//! arithmetic of the flop model.
use mcgp::data::{default_data_dir, make_splits, Dataset, Registry, SplitProtocol, Standardizer};
use mcgp::kernels::{KernelParams, KernelSet};
use mcgp::methods::{self, Diagnostics, FitContext, HyperPolicy, Method, Problem};
use rand::SeedableRng;

/// Median CPU seconds of the process over `reps` calls: the fit runs on one thread, so on an
/// idle machine this is its wall time, and other load on the machine does not inflate it.
pub fn median_seconds(reps: usize, mut f: impl FnMut()) -> f64 {
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

/// What a bench needs to know of a method: its name, repetitions per data set, and its counted
/// flops from a fit's diagnostics (n rows, C classes, P kernel parameters), with a label saying
/// what the count covers.
pub struct DenseBench {
    pub method: &'static str,
    pub reps: usize,
    pub flops: fn(n: f64, c: f64, params: f64, diag: &Diagnostics) -> f64,
    pub work: fn(diag: &Diagnostics) -> String,
    /// Training sizes of the n-scaling runs on satimage.
    pub scaling_n: &'static [usize],
    /// Class counts of the C-scaling runs on letter, and their training size.
    pub scaling_c: (&'static [usize], usize),
    /// Training sizes of the satimage runs with the ARD kernel learned.
    pub scaling_learned_n: &'static [usize],
}

/// One timed case: a data set, the rows to train and test on, whether the kernel is ARD and
/// learned.
struct Case<'a> {
    label: String,
    data: &'a Dataset,
    train: Vec<usize>,
    test: Vec<usize>,
    ard: bool,
    policy: HyperPolicy,
    reps: usize,
}

pub fn run(bench: &DenseBench) {
    // Times are the machine's: name it, as every stored cell does.
    println!("machine: {}", mcgp::runner::machine());
    faer::set_global_parallelism(faer::Par::Seq);
    let registry = Registry::load(&default_data_dir()).expect("registry");
    // The default settings; MCGP_BENCH_SETTINGS (JSON) overrides them for experiments.
    let settings = std::env::var("MCGP_BENCH_SETTINGS").map(|s| serde_json::from_str(&s).expect("JSON settings")).unwrap_or_default();
    let method = methods::build(bench.method, &settings).expect("method");
    let only: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with('-')).collect();
    if only.iter().any(|o| o == "scaling") {
        return scaling(bench, method.as_ref(), &registry);
    }
    for (name, ard, policy) in [
        ("glass", false, HyperPolicy::Fixed),
        ("glass", true, HyperPolicy::Learn),
        ("thyroid", true, HyperPolicy::Learn),
        ("wine", true, HyperPolicy::Learn),
        ("iris", true, HyperPolicy::Learn),
    ] {
        if !only.is_empty() && !only.iter().any(|o| o == name) {
            continue;
        }
        let data = registry.load_dataset(name).expect("dataset");
        let protocol = SplitProtocol::Random { train_fraction: 0.6, repeats: 1, stratify: false, train_size: None, test_size: None };
        let split = make_splits(&protocol, &data, 1, &default_data_dir()).expect("split").swap_remove(0);
        let label = if policy == HyperPolicy::Learn { "ARD learned" } else { "fixed kernel" };
        let case = Case { label: label.to_string(), data: &data, train: split.train, test: split.test, ard, policy, reps: bench.reps };
        time_case(bench, method.as_ref(), &case, true);
    }
}

/// The n- and C-scaling runs (see the module's doc), one fit each.
fn scaling(bench: &DenseBench, method: &dyn Method, registry: &Registry) {
    let random = |train_size: usize, test_size: usize| SplitProtocol::Random {
        train_fraction: 0.5,
        repeats: 1,
        stratify: false,
        train_size: Some(train_size),
        test_size: Some(test_size),
    };
    let satimage = registry.load_dataset("satimage").expect("dataset");
    for &n in bench.scaling_n {
        let split = make_splits(&random(n, 1000), &satimage, 1, &default_data_dir()).expect("split").swap_remove(0);
        let case = Case {
            label: "fixed kernel".into(),
            data: &satimage,
            train: split.train,
            test: split.test,
            ard: false,
            policy: HyperPolicy::Fixed,
            reps: 1,
        };
        time_case(bench, method, &case, false);
    }
    let letter = registry.load_dataset("letter").expect("dataset");
    let (classes, n) = bench.scaling_c;
    for &c in classes {
        let rows: Vec<usize> = (0..letter.n()).filter(|&i| letter.y[i] < c).collect();
        let mut first = letter.subset(&rows);
        first.class_names.truncate(c);
        first.name = format!("letter, first {c} classes");
        let split = make_splits(&random(n, 500), &first, 1, &default_data_dir()).expect("split").swap_remove(0);
        let case = Case {
            label: "fixed kernel".into(),
            data: &first,
            train: split.train,
            test: split.test,
            ard: false,
            policy: HyperPolicy::Fixed,
            reps: 1,
        };
        time_case(bench, method, &case, false);
    }
    for &n in bench.scaling_learned_n {
        let split = make_splits(&random(n, 1000), &satimage, 1, &default_data_dir()).expect("split").swap_remove(0);
        let case = Case {
            label: "ARD learned".into(),
            data: &satimage,
            train: split.train,
            test: split.test,
            ard: true,
            policy: HyperPolicy::Learn,
            reps: 1,
        };
        time_case(bench, method, &case, false);
    }
}

/// Fits `case` `reps` times and prints the median CPU seconds, the work, the counted flop rate
/// and the test log predictive; with `detail`, also the evidence, the learned log-parameters
/// and the optimiser's stop.
fn time_case(bench: &DenseBench, method: &dyn Method, case: &Case, detail: bool) {
    let data = case.data;
    let (train, test) = (data.subset(&case.train), data.subset(&case.test));
    let standardizer = Standardizer::fit(&train.x);
    let x = standardizer.transform(&train.x);
    let xt = standardizer.transform(&test.x);
    if let (true, Ok(dir)) = (detail, std::env::var("MCGP_BENCH_EXPORT")) {
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("creating {dir}: {e}"));
        export_rows(&std::path::Path::new(&dir).join(format!("{}-train.csv", data.name)), &x, &train.y);
        export_rows(&std::path::Path::new(&dir).join(format!("{}-test.csv", data.name)), &xt, &test.y);
    }
    let problem = Problem { x: &x, y: &train.y, n_classes: data.n_classes() };
    let kernel = KernelParams { ard: case.ard, ..Default::default() }.build(data.d()).expect("kernel");
    let kernels = KernelSet::shared_se(&kernel);
    let fit = || {
        let mut rng = rand_pcg::Pcg64::seed_from_u64(0);
        let mut ctx = FitContext::new(&mut rng, None);
        method.fit(&problem, &kernels, case.policy, &mut ctx).expect("fit")
    };
    let secs = median_seconds(case.reps, || drop(fit()));
    let fitted = fit();
    let diag = fitted.diagnostics();
    let (n, c) = (x.nrows() as f64, data.n_classes() as f64);
    let params = fitted.kernels().log_params().len() as f64;
    let rate = (bench.flops)(n, c, params, &diag) / secs / 1e9;
    let mut rng = rand_pcg::Pcg64::seed_from_u64(1);
    let pred = fitted.predict(&xt, &mut rng).expect("predict");
    let scores = pred.log_score.unwrap_or_else(|| pred.probs.mapv(f64::ln));
    let tlp = test.y.iter().enumerate().map(|(i, &y)| scores[(i, y)]).sum::<f64>() / test.y.len() as f64;
    println!(
        "{} {} (n = {n}, C = {c}), {}: {secs:.3} CPU s (median of {}), {}, {rate:.1} GFlop/s counted, test log pred {tlp:.6}",
        bench.method,
        data.name,
        case.label,
        case.reps,
        (bench.work)(&diag)
    );
    if detail {
        let log_params: Vec<String> = fitted.kernels().log_params().iter().map(|v| format!("{v:.9}")).collect();
        println!("    log evidence {:.10}, log-parameters [{}]", fitted.evidence().expect("evidence").value, log_params.join(", "));
        println!("    stop: {:?}", diag.notes);
    }
}

/// One row per datum: the inputs, then the class index (no header), every number in Rust's
/// shortest round-trip form, so that a peer reads the same bits.
fn export_rows(path: &std::path::Path, x: &ndarray::Array2<f64>, y: &[usize]) {
    let mut out = String::new();
    for (row, label) in x.rows().into_iter().zip(y) {
        for v in row {
            out.push_str(&format!("{v},"));
        }
        out.push_str(&format!("{label}\n"));
    }
    std::fs::write(path, out).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
}
