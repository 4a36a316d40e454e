//! Speed of the IVM on USPS c against the rest (Seeger, Lawrence & Herbrich Table 1's setting:
//! the fixed 7291 / 2007 split, pixels in [-1, 1] unscaled, RBF kernel started at v = 10,
//! w = 0.0166, i.e. length-scale sqrt(256 / w)): one fit with hyper-parameter learning at
//! d = 200 (15 outer x up to 8 inner iterations, constant strategy) on one thread, with its test
//! error and average log likelihood; then the O(n d^2) scaling of one selection at a fixed
//! kernel with n and d doubled. `cargo bench --bench ivm [-- c]` (default c = 2).
use mcgp::data::{default_data_dir, Registry, Task};
use mcgp::kernels::KernelParams;
use mcgp::methods::{self, FitContext, HyperPolicy, Problem};
use ndarray::Axis;
use rand::SeedableRng;
use std::time::Instant;

fn main() {
    // Times are the machine's: name it, as every stored cell does.
    println!("machine: {}", mcgp::runner::machine());
    faer::set_global_parallelism(faer::Par::Seq);
    let c: String = std::env::args().skip(1).find(|a| !a.starts_with('-')).unwrap_or_else(|| "2".into());
    let registry = Registry::load(&default_data_dir()).expect("registry");
    let usps = registry.load_dataset("usps").expect("usps");
    let task: Task = serde_norway::from_str(&format!("{{ one_vs_rest: {c} }}")).expect("task");
    let data = task.apply(&usps).expect("class");
    let n_train = data.n_fixed_train.expect("usps has a fixed split");
    let (train, test): (Vec<usize>, Vec<usize>) = ((0..n_train).collect(), (n_train..data.n()).collect());
    let (x, xt) = (data.x.select(Axis(0), &train), data.x.select(Axis(0), &test));
    let (y, yt): (Vec<usize>, Vec<usize>) = (train.iter().map(|&i| data.y[i]).collect(), test.iter().map(|&i| data.y[i]).collect());
    let p = x.ncols() as f64;
    let kernel_yaml = format!("{{ lengthscale: {}, variance: 10.0, learn_variance: true }}", (p / 0.0166).sqrt());
    let kernels = serde_norway::from_str::<KernelParams>(&kernel_yaml).unwrap().kernel_set(x.ncols(), 2).unwrap();
    let pool = rayon::ThreadPoolBuilder::new().num_threads(1).build().unwrap();
    pool.install(|| {
        let method = methods::build("ivm", &serde_json::json!({ "active_size": 200 })).unwrap();
        // CPU time too: on a shared machine the wall time stretches with other load.
        let (start, cpu) = (Instant::now(), cpu_time::ProcessTime::now());
        let mut rng = rand_pcg::Pcg64::seed_from_u64(0);
        let mut ctx = FitContext::new(&mut rng, None);
        let model = method.fit(&Problem { x: &x, y: &y, n_classes: 2 }, &kernels, HyperPolicy::Learn, &mut ctx).expect("fit");
        let (secs, cpu) = (start.elapsed().as_secs_f64(), cpu.elapsed().as_secs_f64());
        let probs = model.predict_proba(&xt, &mut rng).unwrap();
        let errors = (0..xt.nrows()).filter(|&j| (probs[(j, 1)] > 0.5) != (yt[j] == 1)).count();
        let tlh = (0..xt.nrows()).map(|j| probs[(j, yt[j])].ln()).sum::<f64>() / xt.nrows() as f64;
        let d = model.diagnostics();
        let k = model.kernels().class(0).natural_params();
        println!(
            "ivm USPS {c} vs rest (n = {}, p = {}), d = 200, learning (15 x 8, constant): {secs:.1} s wall, {cpu:.1} s CPU on one thread; terr {:.2}% ({errors}/{}), tlh {tlh:.4}; v = {:.3}, w = {:.4}, bias = {:.3}, {} evaluations",
            x.nrows(),
            x.ncols(),
            100.0 * errors as f64 / xt.nrows() as f64,
            xt.nrows(),
            k[0].1,
            p / (k[1].1 * k[1].1),
            d.numbers["bias"],
            d.numbers["hyper_evaluations"],
        );
        if let Some(note) = d.notes.get("minor_steps") {
            println!("  {note}");
        }
        // Scaling of one selection at a fixed kernel: O(n d (p + d)).
        let fixed = serde_norway::from_str::<KernelParams>(&format!("{{ lengthscale: {}, variance: 1.0 }}", p.sqrt())).unwrap().kernel_set(x.ncols(), 2).unwrap();
        let time = |n: usize, dd: usize| {
            let m = methods::build("ivm", &serde_json::json!({ "active_size": dd })).unwrap();
            let (xs, ys) = (x.slice(ndarray::s![..n, ..]).to_owned(), &y[..n]);
            let start = Instant::now();
            let mut rng = rand_pcg::Pcg64::seed_from_u64(0);
            let mut ctx = FitContext::new(&mut rng, None);
            m.fit(&Problem { x: &xs, y: ys, n_classes: 2 }, &fixed, HyperPolicy::Fixed, &mut ctx).expect("fit");
            start.elapsed().as_secs_f64()
        };
        let half = n_train / 2;
        let (a, b, cc) = (time(half, 100), time(2 * half, 100), time(2 * half, 200));
        println!(
            "ivm selection at a fixed kernel: n = {half}, d = 100: {a:.2} s; n doubled: {b:.2} s (x{:.2}); n and d doubled: {cc:.2} s (x{:.2} of the last; O(n d^2) alone would give x2 and x4, the kernel columns' O(n d p) x2 and x2)",
            b / a,
            cc / b
        );
        // With d well above p the O(n d^2) updates of M dominate the O(n d p) kernel columns.
        let (e, f) = (time(2 * half, 400), time(2 * half, 800));
        println!("ivm selection at a fixed kernel, n = {}: d = 400: {e:.2} s; d = 800: {f:.2} s (x{:.2}; O(n d^2) gives x4 once d >> p = {p})", 2 * half, f / e);
    });
}
