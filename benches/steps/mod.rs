//! Shared by the step benches (svgp, scmgpc, sep): the time of one training step of a
//! stochastic method, as the difference of two fits with iteration budgets 20 and 120 over
//! 100 steps, so initialisation and whatever a fit does after its last step are not counted.
use mcgp::kernels::KernelSet;
use mcgp::methods::{Budget, FitContext, HyperPolicy, Method, Problem};
use rand::SeedableRng;
use rand_pcg::Pcg64;
use std::time::Instant;

/// Seconds of one step: [wall, process CPU].
pub fn seconds_per_step(method: &dyn Method, problem: &Problem, kernels: &KernelSet, hyper: HyperPolicy) -> [f64; 2] {
    let fit = |steps: u64| {
        let (start, cpu) = (Instant::now(), cpu_time::ProcessTime::now());
        let mut rng = Pcg64::seed_from_u64(0);
        let mut ctx = FitContext::new(&mut rng, None).with_budget(Some(Budget { iterations: Some(steps), ..Budget::default() }));
        method.fit(problem, kernels, hyper, &mut ctx).expect("fit");
        [start.elapsed().as_secs_f64(), cpu.elapsed().as_secs_f64()]
    };
    let (long, short) = (fit(120), fit(20));
    [0, 1].map(|k| (long[k] - short[k]) / 100.0)
}
