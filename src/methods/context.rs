//! What a fit runs in: its randomness, its clock, its budget and timeout, its trace, and the
//! runner's checkpoint hook that scores snapshots of the model on the test split off the clock.
use super::{FitError, Fitted, StopReason};
use crate::results::{Handoff, TracePoint};
use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// `budget:` of a method entry: where its iterations stop, as a normal end of the fit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Budget {
    /// Training seconds (checkpoint scoring excluded). Not bit-reproducible: the iteration it
    /// ends at depends on the machine, so the record keeps the iterations reached.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seconds: Option<f64>,
    /// The method's outer iterations (hyper-parameter evaluations, sweeps, steps).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iterations: Option<u64>,
    /// The clock `seconds` and the trace's times read (default wall). `{clock: cpu}` alone
    /// stops nothing and only moves training time (time_train, the traces) to the CPU clock.
    #[serde(default, skip_serializing_if = "TrainingClock::is_wall")]
    pub clock: TrainingClock,
}

/// Which clock measures training time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TrainingClock {
    /// Elapsed time: what a user waits, but it stretches when other work shares the machine.
    #[default]
    Wall,
    /// CPU time of the whole process, every thread: Galy-Fajou et al.'s and Villacampa-Calvo
    /// & Hernandez-Lobato's measure (one BLAS thread, R's user time). Another process's load
    /// does not consume it, so a budget run can share the machine; the spec must run its cells
    /// one at a time, or other cells' threads would be charged to this one.
    Cpu,
}

impl TrainingClock {
    pub fn is_wall(&self) -> bool {
        *self == TrainingClock::Wall
    }
}

impl Budget {
    pub fn validate(&self) -> Result<(), String> {
        match (self.seconds, self.iterations) {
            // `{clock: cpu}` alone: no stop, training time and trace times on the CPU clock.
            (None, None) if self.clock == TrainingClock::Cpu => Ok(()),
            (None, None) => Err("budget: give seconds, iterations or clock: cpu".into()),
            (Some(s), _) if !(s.is_finite() && s > 0.0) => Err(format!("budget.seconds must be a positive number, got {s}")),
            (_, Some(0)) => Err("budget.iterations must be at least 1".into()),
            _ => Ok(()),
        }
    }
}

/// `checkpoints:` of a method entry: at which outer iterations the runner scores the model.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged, from = "CheckpointsRepr")]
pub enum Checkpoints {
    /// `geometric`: 1..9, 10..95 step 5, 100..950 step 50, then every 1000.
    Named(CheckpointGrid),
    /// `{ every: k }`: k, 2k, 3k, ...
    Every { every: u64 },
    /// An explicit list of iterations.
    At(Vec<u64>),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckpointGrid {
    Geometric,
}

/// How `Checkpoints` is read: the same forms, with unknown keys of `{ every }` refused (an
/// untagged struct variant would skip them).
#[derive(Deserialize)]
#[serde(untagged, expecting = "geometric, { every: <k> } or a list of iterations")]
enum CheckpointsRepr {
    Named(CheckpointGrid),
    Every(EveryRepr),
    At(Vec<u64>),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EveryRepr {
    every: u64,
}

impl From<CheckpointsRepr> for Checkpoints {
    fn from(r: CheckpointsRepr) -> Self {
        match r {
            CheckpointsRepr::Named(g) => Checkpoints::Named(g),
            CheckpointsRepr::Every(EveryRepr { every }) => Checkpoints::Every { every },
            CheckpointsRepr::At(v) => Checkpoints::At(v),
        }
    }
}

impl Checkpoints {
    pub fn validate(&self) -> Result<(), String> {
        match self {
            Checkpoints::Every { every: 0 } => Err("checkpoints.every must be at least 1".into()),
            Checkpoints::At(v) if v.is_empty() || v.contains(&0) => Err("checkpoints: a list of iterations from 1 on, not empty".into()),
            _ => Ok(()),
        }
    }

    /// Whether iteration `iter` (from 1) is scored.
    pub fn contains(&self, iter: u64) -> bool {
        match self {
            Checkpoints::Named(CheckpointGrid::Geometric) => match iter {
                0 => false,
                1..=9 => true,
                10..=95 => iter.is_multiple_of(5),
                100..=950 => iter.is_multiple_of(50),
                _ => iter.is_multiple_of(1000),
            },
            Checkpoints::Every { every } => iter > 0 && iter.is_multiple_of(*every),
            Checkpoints::At(v) => v.contains(&iter),
        }
    }
}

/// Scores a snapshot of the model (the runner's: test error, test NLL on the test split).
pub type ScoreSnapshot<'a> = dyn Fn(&dyn Fitted, u64) -> Result<BTreeMap<String, f64>, String> + Sync + 'a;

/// Training time: time since the fit started on the chosen clock, less the time spent
/// scoring checkpoints and in `off_clock` work.
struct Clock {
    kind: TrainingClock,
    start: Instant,
    start_cpu: cpu_time::ProcessTime,
    paused: Mutex<Duration>,
}

impl Clock {
    fn new() -> Self {
        Clock {
            kind: TrainingClock::Wall,
            start: Instant::now(),
            start_cpu: cpu_time::ProcessTime::now(),
            paused: Mutex::new(Duration::ZERO),
        }
    }

    /// Time since the start on this clock, pauses included.
    fn elapsed(&self) -> Duration {
        match self.kind {
            TrainingClock::Wall => self.start.elapsed(),
            TrainingClock::Cpu => self.start_cpu.elapsed(),
        }
    }

    fn training_seconds(&self) -> f64 {
        self.elapsed().saturating_sub(*self.paused.lock().expect("clock lock")).as_secs_f64()
    }

    /// Run `f` and leave the time it took out of training time.
    fn pause<T>(&self, f: impl FnOnce() -> T) -> T {
        let paused_at = self.elapsed();
        let out = f();
        let took = self.elapsed().saturating_sub(paused_at);
        *self.paused.lock().expect("clock lock") += took;
        out
    }
}

/// Per-fit context: randomness, clock, timeout, budget, trace, checkpoints, and what the cell
/// this one depends on (`hyper: {from: ...}`) handed over.
pub struct FitContext<'a> {
    pub rng: &'a mut Pcg64,
    /// Wall-clock time at which the fit fails (`timeout_seconds`).
    pub deadline: Option<Instant>,
    /// The source cell's handoff (its hyper-parameters are already in the kernels; its named
    /// vectors, e.g. a posterior mean used as an importance-sampling centre, are here).
    pub source: Option<&'a Handoff>,
    /// The source cell's stored metrics (e.g. `n_sv` of an SVM cell, from which Chai's Table 5
    /// takes its number of inducing sites): records keep them even where their hand-off
    /// vectors were left out or predate the quantity.
    pub source_metrics: Option<&'a BTreeMap<String, f64>>,
    clock: Clock,
    budget: Option<Budget>,
    trace: Mutex<Vec<TracePoint>>,
    checkpoints: Option<(Checkpoints, &'a ScoreSnapshot<'a>)>,
    /// Scheduled checkpoints that could not be scored, as "iteration k: why".
    checkpoint_failures: Mutex<Vec<String>>,
    /// The spec's `shared_init` seed for this dataset split, if set (`init_rng`).
    init_seed: Option<u64>,
}

impl<'a> FitContext<'a> {
    pub fn new(rng: &'a mut Pcg64, deadline: Option<Instant>) -> Self {
        FitContext {
            rng,
            deadline,
            source: None,
            source_metrics: None,
            clock: Clock::new(),
            budget: None,
            trace: Mutex::new(Vec::new()),
            checkpoints: None,
            checkpoint_failures: Mutex::new(Vec::new()),
            init_seed: None,
        }
    }

    /// Start the fit's initialisation from `seed` (the spec's `shared_init`) instead of a draw
    /// from the cell's own stream.
    pub fn with_init_seed(mut self, seed: Option<u64>) -> Self {
        self.init_seed = seed;
        self
    }

    /// The generator a method draws its starting point from (inducing inputs, initial
    /// length-scales): seeded by the next draw of the cell's stream, or by the spec's shared
    /// seed when there is one. The cell's stream advances by one draw either way, so whatever
    /// the method draws after (minibatch order, samplers) is the same with and without it.
    pub fn init_rng(&mut self) -> Pcg64 {
        let own = self.rng.next_u64();
        Pcg64::seed_from_u64(self.init_seed.unwrap_or(own))
    }

    pub fn with_budget(mut self, budget: Option<Budget>) -> Self {
        self.clock.kind = budget.map(|b| b.clock).unwrap_or_default();
        self.budget = budget;
        self
    }

    /// Score snapshots at the scheduled iterations with `score` (the runner's test scorer).
    pub fn with_checkpoints(mut self, schedule: Checkpoints, score: &'a ScoreSnapshot<'a>) -> Self {
        self.checkpoints = Some((schedule, score));
        self
    }

    /// Seconds of training so far (checkpoint scoring excluded).
    pub fn training_seconds(&self) -> f64 {
        self.clock.training_seconds()
    }

    /// Seconds left out of training time so far (checkpoint scoring, `off_clock` work), on the
    /// training clock.
    pub fn off_clock_seconds(&self) -> f64 {
        self.clock.paused.lock().expect("clock lock").as_secs_f64()
    }

    /// Record named values at one outer iteration, at the current training time.
    pub fn record(&self, iter: usize, values: &[(&str, f64)]) {
        let time = self.training_seconds();
        let mut trace = self.trace.lock().expect("trace lock");
        trace.extend(values.iter().map(|(name, value)| TracePoint { iter, time, name: name.to_string(), value: *value }));
    }

    /// The trace so far.
    pub fn trace(&self) -> Vec<TracePoint> {
        self.trace.lock().expect("trace lock").clone()
    }

    /// The trace, leaving it empty.
    pub fn take_trace(&mut self) -> Vec<TracePoint> {
        std::mem::take(self.trace.get_mut().expect("trace lock"))
    }

    /// Fail with `FitError::Timeout` once the deadline has passed.
    pub fn check_deadline(&self) -> Result<(), FitError> {
        match self.deadline {
            Some(d) if Instant::now() > d => Err(FitError::Timeout { seconds: self.clock.start.elapsed().as_secs_f64() }),
            _ => Ok(()),
        }
    }

    /// For an optimiser's cost function, called before an evaluation after `done` others: the
    /// budget's stop as an error, never before the first evaluation (the search has no point to
    /// end at without it: a budget spent before the fit's first evaluation failed the fit).
    pub fn budget_stop_evaluation(&self, done: u64) -> Result<(), FitError> {
        match self.budget_stop(done) {
            Some(stop) if done > 0 => Err(FitError::Stop(stop)),
            _ => Ok(()),
        }
    }

    /// Whether the budget ends the fit after outer iteration `done` (counted from 1).
    pub fn budget_stop(&self, done: u64) -> Option<StopReason> {
        let b = self.budget?;
        if b.iterations.is_some_and(|n| done >= n) {
            return Some(StopReason::BudgetIterations);
        }
        if b.seconds.is_some_and(|s| self.training_seconds() >= s) {
            return Some(StopReason::BudgetSeconds);
        }
        None
    }

    /// The iteration budget, if any (for methods that pass a limit to an inner solver).
    pub fn budget_iterations(&self) -> Option<u64> {
        self.budget.and_then(|b| b.iterations)
    }

    /// Run `f` with the training clock paused (work the method does for the record, not for
    /// the fit: a final full-data ELBO).
    pub fn off_clock<T>(&self, f: impl FnOnce() -> T) -> T {
        self.clock.pause(f)
    }

    /// Whether iteration `iter` is scheduled for a checkpoint (cheap: a method asks before it
    /// builds a snapshot).
    pub fn wants_checkpoint(&self, iter: u64) -> bool {
        self.checkpoints.as_ref().is_some_and(|(s, _)| s.contains(iter))
    }

    /// Whether a checkpoint schedule is set (a method may skip keeping what snapshots need).
    pub fn has_checkpoints(&self) -> bool {
        self.checkpoints.is_some()
    }

    /// At a scheduled iteration, build a snapshot of the model as of outer iteration `iter` and
    /// score it on the test split, both with the clock paused, and trace its test numbers and
    /// the method's `objective` at the training time reached. Does nothing off the schedule.
    /// A snapshot that cannot be built or scored is left out of the trace and noted
    /// (`take_checkpoint_failures`), never returned: scoring must not change the fit (inside an
    /// optimiser's objective an error would count as a failed evaluation and move the search).
    pub fn checkpoint<S>(&self, iter: u64, objective: Option<f64>, snapshot: S)
    where
        S: FnOnce() -> Result<Box<dyn Fitted>, FitError>,
    {
        self.checkpoint_with(iter, || objective, snapshot)
    }

    /// `checkpoint` with an objective that is itself computed off the clock (a full-data ELBO
    /// of a minibatch method).
    pub fn checkpoint_with<O, S>(&self, iter: u64, objective: O, snapshot: S)
    where
        O: FnOnce() -> Option<f64>,
        S: FnOnce() -> Result<Box<dyn Fitted>, FitError>,
    {
        let Some((schedule, score)) = &self.checkpoints else { return };
        if !schedule.contains(iter) {
            return;
        }
        let time = self.training_seconds();
        let (objective, scored) = self.clock.pause(|| {
            let objective = objective();
            (objective, snapshot().map_err(|e| e.to_string()).and_then(|model| score(model.as_ref(), iter)))
        });
        let mut trace = self.trace.lock().expect("trace lock");
        match scored {
            Ok(scored) => trace.extend(scored.into_iter().map(|(name, value)| TracePoint { iter: iter as usize, time, name, value })),
            Err(e) => self.checkpoint_failures.lock().expect("checkpoint failures lock").push(format!("iteration {iter}: {e}")),
        }
        if let Some(v) = objective {
            trace.push(TracePoint { iter: iter as usize, time, name: "objective".into(), value: v });
        }
    }

    /// The scheduled checkpoints that could not be scored, as "iteration k: why", leaving none.
    pub fn take_checkpoint_failures(&mut self) -> Vec<String> {
        std::mem::take(self.checkpoint_failures.get_mut().expect("checkpoint failures lock"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_geometric_grid_is_dense_early_and_sparse_late() {
        let g = Checkpoints::Named(CheckpointGrid::Geometric);
        let hits: Vec<u64> = (0..=3000).filter(|&i| g.contains(i)).collect();
        let mut want: Vec<u64> = (1..=9).collect();
        want.extend((10..=95).step_by(5));
        want.extend((100..=950).step_by(50));
        want.extend([1000, 2000, 3000]);
        assert_eq!(hits, want);
        assert!(Checkpoints::Every { every: 7 }.contains(14) && !Checkpoints::Every { every: 7 }.contains(15));
        assert!(Checkpoints::Every { every: 0 }.validate().is_err());
        let parsed: Checkpoints = serde_norway::from_str("geometric").unwrap();
        assert_eq!(parsed, g);
        let parsed: Checkpoints = serde_norway::from_str("{ every: 3 }").unwrap();
        assert_eq!(parsed, Checkpoints::Every { every: 3 });
    }

    #[test]
    fn an_iteration_budget_stops_at_its_count_and_a_budget_needs_a_limit() {
        let mut rng = <Pcg64 as rand::SeedableRng>::seed_from_u64(1);
        let ctx = FitContext::new(&mut rng, None).with_budget(Some(Budget { iterations: Some(3), ..Budget::default() }));
        assert_eq!(ctx.budget_stop(2), None);
        assert_eq!(ctx.budget_stop(3), Some(StopReason::BudgetIterations));
        assert!(Budget::default().validate().is_err());
        assert!(Budget { seconds: Some(f64::INFINITY), ..Budget::default() }.validate().is_err());
        let mut rng = <Pcg64 as rand::SeedableRng>::seed_from_u64(1);
        let ctx = FitContext::new(&mut rng, None).with_budget(Some(Budget { seconds: Some(1e-9), ..Budget::default() }));
        std::thread::sleep(Duration::from_millis(1));
        assert_eq!(ctx.budget_stop(1), Some(StopReason::BudgetSeconds));
    }

    #[test]
    fn a_clock_only_budget_stops_nothing_and_reads_cpu_time() {
        let clock_only = Budget { clock: TrainingClock::Cpu, ..Budget::default() };
        clock_only.validate().unwrap();
        let mut rng = <Pcg64 as rand::SeedableRng>::seed_from_u64(1);
        let ctx = FitContext::new(&mut rng, None).with_budget(Some(clock_only));
        assert_eq!(ctx.budget_stop(1_000_000), None);
        // (What the CPU clock reads is tested in tests/cpu_clock.rs, a process of its own.)
        assert_eq!(ctx.clock.kind, TrainingClock::Cpu);
    }

    /// Three shifted clouds in 2-D, labelled 0, 1, 2 in turn (n / 3 points each).
    fn three_clouds(n: usize) -> (ndarray::Array2<f64>, Vec<usize>) {
        let x = ndarray::Array2::from_shape_fn((n, 2), |(i, j)| 2.0 * (i % 3) as f64 + ((7 * i + 13 * j) as f64 * 0.618).sin());
        (x, (0..n).map(|i| i % 3).collect())
    }

    /// One squared-exponential kernel shared by the classes, unit length-scales and variance.
    fn shared_unit_se() -> crate::kernels::KernelSet {
        crate::kernels::KernelSet::shared_se(&crate::kernels::SqExp {
            log_variance: 0.0,
            log_lengthscales: vec![0.0, 0.0],
            learn_variance: true,
        })
    }

    /// A checkpoint whose snapshot cannot be scored is noted and left out of the trace; the
    /// fit goes on as without checkpoints (inside the optimiser's objective an error would
    /// count as a failed evaluation and move the search).
    #[test]
    fn a_failing_checkpoint_is_noted_and_does_not_move_the_fit() {
        use crate::methods::{Fitted, HyperPolicy, Problem};
        use std::collections::BTreeMap;
        let (x, y) = three_clouds(45);
        let problem = Problem { x: &x, y: &y, n_classes: 3 };
        let kernels = shared_unit_se();
        let method = crate::methods::build("laplace", &serde_json::json!({ "max_hyper_iters": 8, "mc_samples": 50 })).unwrap();
        let fails_on_even = |model: &dyn Fitted, iter: u64| -> Result<BTreeMap<String, f64>, String> {
            if iter.is_multiple_of(2) {
                return Err("no prediction today".into());
            }
            let p = model.predict(&x, &mut <Pcg64 as rand::SeedableRng>::seed_from_u64(3)).map_err(|e| e.to_string())?;
            Ok(BTreeMap::from([("p00".to_string(), p.probs[(0, 0)])]))
        };
        let fit = |checkpoints: bool| {
            let mut rng = <Pcg64 as rand::SeedableRng>::seed_from_u64(5);
            let mut ctx = FitContext::new(&mut rng, None);
            if checkpoints {
                ctx = ctx.with_checkpoints(Checkpoints::Every { every: 1 }, &fails_on_even);
            }
            let model = method.fit(&problem, &kernels, HyperPolicy::Learn, &mut ctx).unwrap();
            (model.kernels().log_params(), model.evidence().unwrap().value, ctx.take_trace(), ctx.take_checkpoint_failures())
        };
        let (plain, plain_evidence, _, none) = fit(false);
        let (scored, scored_evidence, trace, failures) = fit(true);
        assert!(none.is_empty());
        assert_eq!(plain.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), scored.iter().map(|v| v.to_bits()).collect::<Vec<_>>());
        assert_eq!(plain_evidence.to_bits(), scored_evidence.to_bits());
        let scored_at: Vec<usize> = trace.iter().filter(|p| p.name == "p00").map(|p| p.iter).collect();
        let objective_at: Vec<usize> = trace.iter().filter(|p| p.name == "objective").map(|p| p.iter).collect();
        assert!(scored_at.len() >= 2 && scored_at.iter().all(|i| i % 2 == 1), "{scored_at:?}");
        assert_eq!(objective_at, (1..=objective_at.len()).collect::<Vec<_>>());
        assert_eq!(failures.len(), objective_at.len() / 2);
        assert_eq!(failures[0], "iteration 2: no prediction today");
    }

    /// A budget already spent when the fit starts (preparation took longer) ends each L-BFGS
    /// search after its first evaluation, at that point; it failed the fit (the optimiser had
    /// no point to end at).
    #[test]
    fn a_budget_spent_before_the_first_evaluation_ends_the_search_after_it() {
        use crate::methods::{HyperPolicy, Problem};
        let (x, y) = three_clouds(30);
        let problem = Problem { x: &x, y: &y, n_classes: 3 };
        let shared = shared_unit_se();
        let per_class = crate::testing::se_ard_plus_white(2, 3, 0.5);
        let cases = [
            ("laplace", serde_json::json!({ "max_hyper_iters": 8 }), &shared),
            ("klmnl", serde_json::json!({ "max_hyper_iters": 8 }), &shared),
            ("gfitc", serde_json::json!({ "inducing": 5, "max_iters": 8 }), &per_class),
            ("svgp", serde_json::json!({ "optimizer": "lbfgs", "inducing": 5, "max_iters": 8 }), &per_class),
        ];
        for (name, settings, kernels) in cases {
            let method = crate::methods::build(name, &settings).unwrap();
            let mut rng = <Pcg64 as rand::SeedableRng>::seed_from_u64(5);
            let budget = Budget { seconds: Some(1e-9), ..Budget::default() };
            let mut ctx = FitContext::new(&mut rng, None).with_budget(Some(budget));
            std::thread::sleep(Duration::from_millis(1));
            let model = method.fit(&problem, kernels, HyperPolicy::Learn, &mut ctx).unwrap_or_else(|e| panic!("{name}: {e}"));
            let d = model.diagnostics();
            assert_eq!(d.stop_reason, Some(StopReason::BudgetSeconds), "{name}");
            assert!(model.kernels().log_params().iter().all(|v| v.is_finite()), "{name}");
        }
    }

    /// `shared_init`: four methods drawing their inducing inputs from the same init seed start
    /// from the same training inputs, whatever their cells' own seeds; from their own streams
    /// (no shared seed) they do not.
    #[test]
    fn a_shared_init_seed_gives_every_method_the_same_inducing_inputs() {
        use crate::methods::{HyperPolicy, Problem};
        use ndarray::Array2;
        let (x, y) = three_clouds(60);
        let kernels = crate::testing::se_ard_plus_white(2, 3, 0.5);
        let start = |name: &str, settings: serde_json::Value, cell_seed: u64, init: Option<u64>| -> Vec<Array2<f64>> {
            let method = crate::methods::build(name, &settings).unwrap();
            let mut rng = <Pcg64 as rand::SeedableRng>::seed_from_u64(cell_seed);
            let mut ctx = FitContext::new(&mut rng, None).with_init_seed(init);
            let problem = Problem { x: &x, y: &y, n_classes: 3 };
            method.fit(&problem, &kernels, HyperPolicy::Fixed, &mut ctx).unwrap().inducing_inputs()
        };
        let ep = serde_json::json!({ "inducing": 4, "max_iters": 2, "learn_inducing": false });
        let gfitc = serde_json::json!({ "inducing": 4, "max_iters": 2, "learn_inducing": false });
        let vi = serde_json::json!({ "inducing": 4, "inducing_per_class": true, "inducing_init": { "init": "random" },
            "learn_inducing": false, "max_iters": 2 });
        let runs = [("ep", &ep, 1), ("sep", &ep, 2), ("gfitc", &gfitc, 3), ("svgp", &vi, 4)];
        let shared: Vec<Vec<Array2<f64>>> = runs.iter().map(|(name, s, seed)| start(name, (*s).clone(), *seed, Some(99))).collect();
        assert_eq!(shared[0].len(), 3, "one set per class");
        for (run, zs) in runs.iter().zip(&shared) {
            assert_eq!(zs, &shared[0], "{} started elsewhere", run.0);
        }
        // Each inducing input is a training input (a random subset, drawn per class).
        for z in &shared[0] {
            for row in z.rows() {
                assert!(x.rows().into_iter().any(|r| r == row), "{row} is not a training input");
            }
        }
        let own: Vec<Vec<Array2<f64>>> = runs.iter().map(|(name, s, seed)| start(name, (*s).clone(), *seed, None)).collect();
        assert_ne!(own[0], own[1], "ep and sep drew the same start from different cell seeds");
        assert_ne!(own[0], shared[0]);
    }
}
