//! The CPU training clock (`budget: {clock: cpu}`) reads the process's CPU time, so it must be
//! the only test in its binary: another test's threads would be charged to it.
use mcgp::methods::{Budget, FitContext, StopReason, TrainingClock};
use rand_pcg::Pcg64;
use std::time::Duration;

/// Busy work of `d` CPU seconds on this thread (however loaded the machine is).
fn spin(d: Duration) {
    let t = cpu_time::ThreadTime::now();
    let mut x = 0u64;
    while t.elapsed() < d {
        x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
    }
}

#[test]
fn a_cpu_budget_counts_work_not_waiting_and_leaves_off_clock_work_out() {
    let mut rng = <Pcg64 as rand::SeedableRng>::seed_from_u64(1);
    let budget = Budget { seconds: Some(0.2), clock: TrainingClock::Cpu, ..Budget::default() };
    let ctx = FitContext::new(&mut rng, None).with_budget(Some(budget));
    // Waiting (another process holding the core, here a sleep) costs no CPU time.
    std::thread::sleep(Duration::from_millis(400));
    assert!(ctx.training_seconds() < 0.1, "slept 0.4 s, charged {}", ctx.training_seconds());
    assert_eq!(ctx.budget_stop(1), None);
    // Work off the clock (model construction) is not charged either.
    ctx.off_clock(|| spin(Duration::from_millis(300)));
    assert!(ctx.training_seconds() < 0.1, "0.3 s off the clock, charged {}", ctx.training_seconds());
    assert!(ctx.off_clock_seconds() >= 0.3, "0.3 CPU-s off the clock, counted {}", ctx.off_clock_seconds());
    // Work is: 0.3 s of CPU ends a 0.2 s budget.
    spin(Duration::from_millis(300));
    assert!(ctx.training_seconds() >= 0.2, "spun 0.3 s, charged {}", ctx.training_seconds());
    assert_eq!(ctx.budget_stop(2), Some(StopReason::BudgetSeconds));

    // The wall clock charges the sleep.
    let mut rng = <Pcg64 as rand::SeedableRng>::seed_from_u64(1);
    let wall = Budget { seconds: Some(0.2), ..Budget::default() };
    let ctx = FitContext::new(&mut rng, None).with_budget(Some(wall));
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(ctx.budget_stop(1), Some(StopReason::BudgetSeconds));
}
