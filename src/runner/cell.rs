//! Running one cell: build the training problem from its split, fit, predict the test
//! rows and score them. The method never sees test labels.
use super::{Prepared, SplitData};
use crate::kernels::KernelSet;
use crate::linalg::argmax;
use crate::methods::{self, floored_ln, Evidence, FitContext, Fitted, Prediction, Problem};
use crate::results::{CellRecord, DecisionGrid, EvidenceKind, Handoff, Status, TracePoint};
use crate::spec::{Cell, DecisionGridSpec, HyperSpec, Spec};
use ndarray::Array2;
use rand::SeedableRng;
use rand_pcg::Pcg64;
use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

struct Outcome {
    decision_grid: Option<DecisionGrid>,
    metrics: BTreeMap<String, f64>,
    evidence_kind: Option<EvidenceKind>,
    hyperparameters: BTreeMap<String, f64>,
    diagnostics: BTreeMap<String, String>,
    trace: Vec<crate::results::TracePoint>,
    handoff: Handoff,
}

/// Run one cell; never fails: an error or a panic becomes a failed record with its message.
pub fn run_cell(spec: &Spec, cell: &Cell, prepared: &Prepared, source: Option<&CellRecord>, commit: Option<&str>) -> CellRecord {
    let wall = Instant::now();
    // The CPU the cell used: its thread's, which misses the work it hands to other threads
    // (faer's products, per-class loops) when cells share the pool; with one cell at a time
    // the whole process's, which is then all the cell's.
    let cpu = Cpu::start(spec.raw.one_cell_at_a_time);
    let result = catch_unwind(AssertUnwindSafe(|| fit_and_score(spec, cell, prepared, source))).unwrap_or_else(|panic| {
        let msg = panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "unknown panic".into());
        Err(CellFailure::from(format!("panicked: {msg}")))
    });
    let mut record = CellRecord {
        key: cell.key.clone(),
        experiment: spec.name().to_string(),
        dataset: cell.dataset.clone(),
        split: cell.split,
        method: cell.entry.name.clone(),
        method_kind: cell.entry.method.clone(),
        setting: cell.setting.clone(),
        status: Status::Ok,
        error: None,
        seed: cell.seed,
        metrics: BTreeMap::new(),
        evidence_kind: None,
        hyperparameters: BTreeMap::new(),
        diagnostics: BTreeMap::new(),
        trace: Vec::new(),
        handoff: Handoff::default(),
        wall_seconds: 0.0,
        cpu_seconds: 0.0,
        commit: commit.map(str::to_string),
        machine: Some(super::provenance::machine().to_string()),
        numerics: Some(cell.numerics.clone()),
        data_hash: Some(cell.data_hash.clone()),
        timed_out: false,
        source_failed: false,
        decision_grid: None,
    };
    match result {
        Ok(o) => {
            record.metrics = o.metrics;
            record.evidence_kind = o.evidence_kind;
            record.hyperparameters = o.hyperparameters;
            record.diagnostics = o.diagnostics;
            record.trace = o.trace;
            record.handoff = o.handoff;
            record.decision_grid = o.decision_grid;
        }
        Err(CellFailure { message, timed_out, source_failed }) => {
            record.status = Status::Failed;
            record.timed_out = timed_out;
            record.source_failed = source_failed;
            record.error = Some(format!(
                "cell {}/{}{}/split {} ({}): {message}",
                cell.dataset,
                cell.entry.name,
                setting_suffix(cell),
                cell.split,
                spec.file
            ));
        }
    }
    record.wall_seconds = wall.elapsed().as_secs_f64();
    record.cpu_seconds = cpu.seconds();
    record
}

/// A cell's CPU clock: the process's or the thread's (see `run_cell`).
enum Cpu {
    Process(cpu_time::ProcessTime),
    Thread(cpu_time::ThreadTime),
}

impl Cpu {
    fn start(whole_process: bool) -> Cpu {
        if whole_process {
            Cpu::Process(cpu_time::ProcessTime::now())
        } else {
            Cpu::Thread(cpu_time::ThreadTime::now())
        }
    }

    fn seconds(&self) -> f64 {
        match self {
            Cpu::Process(t) => t.elapsed().as_secs_f64(),
            Cpu::Thread(t) => t.elapsed().as_secs_f64(),
        }
    }
}

fn setting_suffix(cell: &Cell) -> String {
    if cell.setting.is_empty() {
        String::new()
    } else {
        format!("[{}]", cell.setting)
    }
}

/// Why a cell failed; a timeout is told apart because it depends on the machine, and a
/// source's failure because it goes away when the source is computed again.
struct CellFailure {
    message: String,
    timed_out: bool,
    source_failed: bool,
}

impl From<String> for CellFailure {
    fn from(message: String) -> Self {
        CellFailure { message, timed_out: false, source_failed: false }
    }
}

impl From<methods::FitError> for CellFailure {
    fn from(e: methods::FitError) -> Self {
        CellFailure { timed_out: matches!(e, methods::FitError::Timeout { .. }), message: e.to_string(), source_failed: false }
    }
}

fn fit_and_score(spec: &Spec, cell: &Cell, prepared: &Prepared, source: Option<&CellRecord>) -> Result<Outcome, CellFailure> {
    // Test hook: a failure that a retry does not repeat (as a crash fixed since would not).
    if std::env::var("MCGP_TEST_FAIL_ENTRY").is_ok_and(|name| name == cell.entry.name) {
        return Err("failed by MCGP_TEST_FAIL_ENTRY".to_string().into());
    }
    if let Some(message) = prepared.failed_datasets.get(&cell.dataset) {
        return Err(format!("dataset {}: {message}", cell.dataset).into());
    }
    let data = &prepared.datasets[&cell.dataset];
    let split_data = prepared.split_data(&cell.dataset, cell.split, spec.raw.standardize);
    let (x_train, x_test) = (&split_data.x_train, &split_data.x_test);
    let (y_train, y_test) = (&split_data.y_train, &split_data.y_test);

    let method = methods::build(&cell.entry.method, &cell.entry.settings)?;
    let mut kernels = cell.entry.kernel.kernel_set(data.d(), data.n_classes())?;
    if let HyperSpec::From { source: src, keep } = &cell.entry.hyper {
        let rec = source.ok_or_else(|| format!("the cell of \"{src}\" it takes hyper-parameters from is missing"))?;
        if rec.status != Status::Ok {
            // A source that timed out is retried by the next run, and so must this cell be.
            return Err(CellFailure {
                message: format!("the cell of \"{src}\" it takes hyper-parameters from failed"),
                timed_out: rec.timed_out,
                source_failed: true,
            });
        }
        kernels = take_over(&kernels, &rec.handoff, keep).map_err(|e| format!("hyper.from \"{src}\": {e}"))?;
    }
    let policy = cell.entry.hyper.policy();
    let problem = Problem { x: x_train, y: y_train, n_classes: data.n_classes() };

    let mut rng = Pcg64::seed_from_u64(cell.seed);
    let deadline = spec.raw.timeout_seconds.map(|t| Instant::now() + Duration::from_secs_f64(t));
    // Checkpoint snapshots are scored with their own draws (seeded by the cell and the
    // iteration), so scoring never moves the fit's random stream.
    let score_snapshot = |model: &dyn Fitted, iter: u64| -> Result<BTreeMap<String, f64>, String> {
        let mut rng = Pcg64::seed_from_u64(cell.seed ^ iter.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let prediction = model.predict(x_test, &mut rng).map_err(|e| e.to_string())?;
        prediction.validate(y_test.len(), data.n_classes())?;
        Ok(checkpoint_scores(&prediction, y_test))
    };
    let mut ctx = FitContext::new(&mut rng, deadline).with_budget(cell.entry.budget).with_init_seed(cell.init_seed);
    if let Some(schedule) = &cell.entry.checkpoints {
        ctx = ctx.with_checkpoints(schedule.clone(), &score_snapshot);
    }
    ctx.source = source.map(|r| &r.handoff);
    ctx.source_metrics = source.map(|r| &r.metrics);
    let fitted = method.fit(&problem, &kernels, policy, &mut ctx)?;
    let time_train = ctx.training_seconds();
    let mut trace = ctx.take_trace();
    let time_off_clock = ctx.off_clock_seconds();
    let checkpoint_failures = ctx.take_checkpoint_failures();
    drop(ctx);

    let predict_start = Instant::now();
    let prediction = fitted.predict(x_test, &mut rng)?;
    let time_predict = predict_start.elapsed().as_secs_f64();
    prediction.validate(y_test.len(), data.n_classes())?;

    let diagnostics = fitted.diagnostics();
    let mut diagnostic_texts = diagnostics.texts();
    if prediction.labels_only {
        diagnostic_texts.insert(PREDICTIONS_NOTE.into(), LABELS_ONLY.into());
    } else if let Some(note) = floored_note(&prediction, y_test) {
        diagnostic_texts.insert(LOG_PRED_FLOORED.into(), note);
    }
    if let Some(first) = checkpoint_failures.first() {
        diagnostic_texts.insert(
            "checkpoint_failures".into(),
            format!(
                "{} scheduled checkpoints could not be scored (left out of the trace); the first at {first}",
                checkpoint_failures.len()
            ),
        );
    }
    let mut metrics = score(&prediction, y_test);
    if prediction.jitter > 0.0 {
        metrics.insert("diag_predict_jitter".into(), prediction.jitter);
    }
    metrics.insert("n_train".into(), y_train.len() as f64);
    metrics.insert("time_train".into(), time_train);
    metrics.insert("time_predict".into(), time_predict);
    if cell.entry.checkpoints.is_some() {
        // The final model closes the trace, at the iterations the fit reached.
        let last = trace.iter().map(|p| p.iter).max().unwrap_or(0);
        let iter = diagnostics.iterations.map_or(last, |i| i as usize).max(last);
        let scores = checkpoint_scores(&prediction, y_test);
        // The final model replaces a checkpoint at the same iteration.
        trace.retain(|p| !(p.iter == iter && scores.contains_key(&p.name)));
        for (name, value) in scores {
            trace.push(TracePoint { iter, time: time_train, name, value });
        }
        // On the training clock's own scale (CPU seconds under a CPU budget), so the two add up.
        metrics.insert("time_checkpoints".into(), time_off_clock);
    }
    if let Some(b) = cell.entry.budget.filter(|b| b.seconds.is_some()) {
        // A wall-clock budget is machine-dependent: keep where it ended.
        metrics.insert("budget_seconds".into(), b.seconds.unwrap_or_default());
    }
    // The runner's own metrics take precedence over a method's extra ones of the same name.
    let own = fitted.test_metrics(&prediction, y_test).into_iter().chain(fitted.extra_metrics()).chain(diagnostics.metrics());
    for (name, value) in own {
        metrics.entry(name).or_insert(value);
    }
    let evidence = fitted.evidence();
    metrics.extend(evidence_metrics(evidence)?);
    let decision_grid = match cell.entry.decision_grid {
        Some(g) => Some(decision_grid(&g, fitted.as_ref(), &split_data, cell.seed)?),
        None => None,
    };
    let fitted_kernels = fitted.kernels();
    Ok(Outcome {
        decision_grid,
        metrics,
        evidence_kind: evidence.map(|e| e.kind),
        hyperparameters: fitted_kernels.natural_params().into_iter().collect(),
        diagnostics: diagnostic_texts,
        trace,
        handoff: fitted.handoff(),
    })
}

/// The fitted model's most probable class on the spec's grid over a 2-D input space (the
/// training inputs' box by default), and its inducing inputs, in the data's own units.
fn decision_grid(spec: &DecisionGridSpec, model: &dyn Fitted, data: &SplitData, seed: u64) -> Result<DecisionGrid, CellFailure> {
    let raw_train = match &data.scaler {
        Some(s) => s.inverse_transform(&data.x_train),
        None => data.x_train.clone(),
    };
    if raw_train.ncols() != 2 {
        return Err(format!("decision_grid needs 2-D inputs, this data set has {}", raw_train.ncols()).into());
    }
    let bounds = |col: usize| {
        let v = raw_train.column(col);
        [v.iter().copied().fold(f64::INFINITY, f64::min), v.iter().copied().fold(f64::NEG_INFINITY, f64::max)]
    };
    let (x, y, n) = (spec.x.unwrap_or_else(|| bounds(0)), spec.y.unwrap_or_else(|| bounds(1)), spec.n);
    let points = ndarray::Array2::from_shape_fn((n * n, 2), |(k, d)| {
        if d == 0 {
            DecisionGrid::coordinate(x, n, k % n)
        } else {
            DecisionGrid::coordinate(y, n, k / n)
        }
    });
    let points = match &data.scaler {
        Some(s) => s.transform(&points),
        None => points,
    };
    // Its own draws (a Monte Carlo predictive), so the grid never moves the cell's numbers.
    let mut rng = Pcg64::seed_from_u64(seed ^ 0xD1B5_4A32_D192_ED03);
    let probs = model.predict_proba(&points, &mut rng)?;
    let labels = probs
        .rows()
        .into_iter()
        .map(|row| char::from_digit(argmax(row.as_slice().expect("standard layout")) as u32, 36))
        .collect::<Option<String>>()
        .ok_or_else(|| CellFailure::from("decision_grid: at most 36 classes".to_string()))?;
    let inducing = model
        .inducing_inputs()
        .into_iter()
        .map(|z| {
            let z = match &data.scaler {
                Some(s) => s.inverse_transform(&z),
                None => z,
            };
            z.rows().into_iter().map(|r| [r[0], r[1]]).collect::<Vec<[f64; 2]>>()
        })
        .collect::<Vec<_>>();
    if inducing.iter().flatten().flatten().any(|v| !v.is_finite()) {
        return Err(CellFailure::from("decision_grid: a learned inducing input is not finite".to_string()));
    }
    Ok(DecisionGrid { x, y, n, labels, inducing })
}

/// The kernels with a source cell's hyper-parameters: by name where the source names them,
/// by position for records written before names were handed over.
fn take_over(kernels: &KernelSet, handoff: &Handoff, keep: &[String]) -> Result<KernelSet, String> {
    let p = &handoff.log_hyperparameters;
    if !handoff.names.is_empty() {
        return kernels.take_over(&handoff.names, p, keep);
    }
    if p.len() != kernels.n_params() {
        return Err(format!("handed over {} hyper-parameters but this kernel has {}", p.len(), kernels.n_params()));
    }
    kernels.take_over(&kernels.param_names(), p, keep)
}

/// What a checkpoint traces: test error (%), mean test NLL (nats per point), and the mean at
/// the true class of each per-class log-value the prediction carries (`test_<name>`, e.g.
/// svgp's `test_expected_log_lik`, E[log p] beside the NLL's log E[p]).
fn checkpoint_scores(prediction: &Prediction, y: &[usize]) -> BTreeMap<String, f64> {
    let s = score(prediction, y);
    let mut out = BTreeMap::from([("test_error".to_string(), s["error_pct"])]);
    if let Some(mean) = s.get("log_pred_mean") {
        out.insert("test_nll".to_string(), -mean);
    }
    for (name, sum) in prediction.class_value_sums(y) {
        let name = name.trim_end_matches("_sum");
        out.insert(format!("test_{name}"), sum / y.len().max(1) as f64);
    }
    out
}

/// The metrics that need predictive probabilities: a labels-only prediction has none of them.
pub const PROBABILITY_METRICS: &[&str] = &["log_pred_sum", "log_pred_mean"];

/// The diagnostics entry (and its value) that marks a cell whose method predicts labels only;
/// the report shows "no probabilities" for its `PROBABILITY_METRICS`.
pub const PREDICTIONS_NOTE: &str = "predictions";
pub const LABELS_ONLY: &str = "labels only (no probabilities)";

/// The diagnostics entry that counts the test rows scored at `floored_ln`'s floor.
pub const LOG_PRED_FLOORED: &str = "log_pred_floored";

/// "k of m test rows ..." where some rows' log predictive value stands at the floor (their
/// probability underflowed to 0), which makes `log_pred_sum` an upper value, not the sum.
fn floored_note(prediction: &Prediction, y: &[usize]) -> Option<String> {
    let k = prediction.floored_rows(y);
    (k > 0).then(|| {
        format!(
            "{k} of {} test rows had probability 0 at the true class, each scored {:.2} (ln of the smallest normal double); log_pred_sum is an upper value",
            y.len(),
            floored_ln(0.0)
        )
    })
}

/// Whether a stored cell's method predicted labels only.
pub fn is_labels_only(record: &CellRecord) -> bool {
    record.diagnostics.get(PREDICTIONS_NOTE).is_some_and(|v| v == LABELS_ONLY)
}

/// Test-set metrics from a prediction (class probabilities [m, C], and the method's own log
/// score where it has one) and the true classes. A labels-only prediction (an SVM's) is scored
/// by its errors alone: its `log_pred_*` metrics are absent, not NaN. Each alternative
/// predictive rule of the same fit is scored by its probabilities, as `<metric>_<rule>`.
pub fn score(prediction: &Prediction, y: &[usize]) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    out.insert("n_test".into(), y.len() as f64);
    let log_pred = |i: usize, yi: usize| prediction.log_pred(i, yi);
    out.extend(score_rule(&prediction.probs, log_pred, y, prediction.labels_only, ""));
    for (name, probs) in &prediction.alternatives {
        out.extend(score_rule(probs, |i, yi| floored_ln(probs[(i, yi)]), y, false, &format!("_{name}")));
    }
    out
}

/// Errors of the most probable classes of `probs` (the first on ties) and, unless labels
/// only, the sum and mean of `log_pred(row, true class)`; names suffixed by `suffix`.
fn score_rule(
    probs: &Array2<f64>,
    log_pred: impl Fn(usize, usize) -> f64,
    y: &[usize],
    labels_only: bool,
    suffix: &str,
) -> BTreeMap<String, f64> {
    let m = y.len();
    let errors = probs.rows().into_iter().zip(y).filter(|(row, &yi)| argmax(&row.to_vec()) != yi).count();
    let mut out = BTreeMap::new();
    out.insert(format!("error_count{suffix}"), errors as f64);
    out.insert(format!("error_rate{suffix}"), errors as f64 / m as f64);
    out.insert(format!("error_pct{suffix}"), 100.0 * errors as f64 / m as f64);
    if !labels_only {
        let sum: f64 = y.iter().enumerate().map(|(i, &yi)| log_pred(i, yi)).sum();
        let [sum_name, mean_name] = PROBABILITY_METRICS else { unreachable!("two probability metrics") };
        out.insert(format!("{sum_name}{suffix}"), sum);
        out.insert(format!("{mean_name}{suffix}"), sum / m as f64);
    }
    out
}

/// `log_evidence` (and `log_evidence_se`) of a fitted model; a NaN or infinite evidence means
/// the method failed, whatever it predicted, and fails the cell.
fn evidence_metrics(evidence: Option<Evidence>) -> Result<Vec<(String, f64)>, String> {
    let Some(e) = evidence else { return Ok(Vec::new()) };
    if !e.value.is_finite() || e.std_err.is_some_and(|s| !s.is_finite()) {
        return Err(format!("the fitted model's log evidence is {} (standard error {:?}): not a result", e.value, e.std_err));
    }
    let mut out = vec![("log_evidence".to_string(), e.value)];
    out.extend(e.std_err.map(|se| ("log_evidence_se".to_string(), se)));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::methods::{Diagnostics, Evidence, FitError};
    use ndarray::{array, Array2};

    /// Class 1 where the raw first input is above 1, else class 0; its inducing inputs are the
    /// standardised points (0, 0) and (1, 1). It sees standardised inputs, as fitted models do.
    struct Threshold {
        scaler: crate::data::Standardizer,
    }

    impl Fitted for Threshold {
        fn predict(&self, x: &Array2<f64>, _rng: &mut Pcg64) -> Result<Prediction, FitError> {
            let raw = self.scaler.inverse_transform(x);
            Ok(Prediction::new(Array2::from_shape_fn((x.nrows(), 2), |(i, c)| if (raw[[i, 0]] > 1.0) == (c == 1) { 0.9 } else { 0.1 })))
        }
        fn evidence(&self) -> Option<Evidence> {
            None
        }
        fn kernels(&self) -> KernelSet {
            crate::testing::se_ard_plus_white(2, 1, 0.1)
        }
        fn diagnostics(&self) -> Diagnostics {
            Diagnostics::default()
        }
        fn inducing_inputs(&self) -> Vec<Array2<f64>> {
            vec![array![[0.0, 0.0], [1.0, 1.0]]]
        }
    }

    /// An alternative rule is scored by its own probabilities, by hand: errors from its
    /// argmax, log p at the true class from its entries; the main metrics are untouched.
    #[test]
    fn an_alternative_rule_is_scored_by_its_own_probabilities() {
        let main = array![[0.9, 0.1], [0.2, 0.8], [0.3, 0.7]];
        let alt = array![[0.4, 0.6], [0.6, 0.4], [0.1, 0.9]];
        let p = Prediction::new(main).with_alternative("other", alt);
        p.validate(3, 2).unwrap();
        let s = score(&p, &[0, 1, 1]);
        assert_eq!(s["error_count"], 0.0);
        assert_eq!(s["error_count_other"], 2.0);
        assert!((s["error_pct_other"] - 200.0 / 3.0).abs() < 1e-12);
        let want = 0.4f64.ln() + 0.4f64.ln() + 0.9f64.ln();
        assert!((s["log_pred_sum_other"] - want).abs() < 1e-12);
        assert!((s["log_pred_mean_other"] - want / 3.0).abs() < 1e-12);
        assert!((s["log_pred_sum"] - (0.9f64.ln() + 0.8f64.ln() + 0.7f64.ln())).abs() < 1e-12);
        // An alternative off the simplex is refused, and named.
        let bad = Prediction::new(array![[0.5, 0.5]]).with_alternative("bad", array![[0.5, 0.6]]);
        assert!(bad.validate(1, 2).unwrap_err().contains("(bad)"));
        // A column per class: no more (argmax could name a class that does not exist).
        assert!(p.validate(3, 3).unwrap_err().contains("2 columns for 3 classes"));
    }

    /// A finite evidence becomes metrics; a NaN or infinite one (or standard error) fails.
    #[test]
    fn a_non_finite_evidence_fails_the_cell() {
        assert!(evidence_metrics(None).unwrap().is_empty());
        let ok = evidence_metrics(Some(Evidence { value: -12.5, kind: EvidenceKind::Exact, std_err: Some(0.25) })).unwrap();
        assert_eq!(ok, vec![("log_evidence".to_string(), -12.5), ("log_evidence_se".to_string(), 0.25)]);
        for (value, se) in [(f64::NAN, None), (f64::NEG_INFINITY, None), (f64::INFINITY, None), (-1.0, Some(f64::NAN))] {
            let e = evidence_metrics(Some(Evidence { value, kind: EvidenceKind::Exact, std_err: se })).unwrap_err();
            assert!(e.contains("log evidence is") && e.contains("not a result"), "{e}");
        }
    }

    /// A method's own log score: finite values are summed as they are, even below a
    /// probability's floor; -inf (an underflow) is floored as a probability is, so that the
    /// split stays finite and in the aggregates.
    #[test]
    fn a_log_score_is_kept_where_finite_and_floored_where_minus_infinity() {
        let probs = array![[1.0, 0.0], [0.5, 0.5]];
        let mut p = Prediction::new(probs);
        p.log_score = Some(array![[0.0, -1000.0], [0.5f64.ln(), f64::NEG_INFINITY]]);
        p.validate(2, 2).unwrap();
        let s = score(&p, &[1, 1]);
        let want = -1000.0 + f64::MIN_POSITIVE.ln();
        assert!(s["log_pred_sum"].is_finite());
        assert_eq!(s["log_pred_sum"], want);
        // The floored row is counted; the finite -1000 is not.
        let note = floored_note(&p, &[1, 1]).unwrap();
        assert!(note.starts_with("1 of 2 test rows") && note.contains("-708.40"), "{note}");
        assert_eq!(floored_note(&p, &[0, 0]), None);
        // Without a log score, a probability below the smallest normal double is floored.
        let q = Prediction::new(array![[1.0, 0.0], [1.0 - 1e-310, 1e-310], [0.5, 0.5]]);
        assert_eq!(q.floored_rows(&[1, 1, 1]), 2);
        assert_eq!(q.floored_rows(&[0, 0, 1]), 0);
    }

    #[test]
    fn a_decision_grid_is_in_the_datas_units() {
        // Raw training inputs x in [0, 4], y in [10, 30].
        let raw = array![[0.0, 10.0], [4.0, 30.0], [2.0, 20.0], [1.0, 15.0]];
        let scaler = crate::data::Standardizer::fit(&raw);
        let data = SplitData {
            x_train: scaler.transform(&raw),
            y_train: vec![0, 1, 1, 0],
            x_test: raw.clone(),
            y_test: vec![],
            scaler: Some(scaler.clone()),
        };
        let model = Threshold { scaler: scaler.clone() };
        let g = decision_grid(&DecisionGridSpec { n: 5, x: None, y: None }, &model, &data, 1).unwrap_or_else(|e| panic!("{}", e.message));
        // The box is the raw training box; x = 0, 1, 2, 3, 4: class 1 from x = 2 on, every row.
        assert_eq!((g.x, g.n), ([0.0, 4.0], 5));
        assert!((g.y[0] - 10.0).abs() < 1e-12 && (g.y[1] - 30.0).abs() < 1e-12, "{:?}", g.y);
        assert_eq!(g.labels, "00111".repeat(5));
        // Inducing inputs back in raw units: standardised (0, 0) is the mean (1.75, 18.75) and
        // (1, 1) the mean plus one sd.
        let (mean, sd) = ([1.75, 18.75], &scaler.scale);
        assert_eq!(g.inducing[0][0], mean);
        assert!((g.inducing[0][1][0] - (mean[0] + sd[0])).abs() < 1e-12 && (g.inducing[0][1][1] - (mean[1] + sd[1])).abs() < 1e-12);
        // A given box is used as is; 3-D data is refused.
        let g = decision_grid(&DecisionGridSpec { n: 3, x: Some([-1.0, 3.0]), y: Some([0.0, 1.0]) }, &model, &data, 1)
            .unwrap_or_else(|e| panic!("{}", e.message));
        assert_eq!(g.labels, "001".repeat(3));
        let three =
            SplitData { x_train: Array2::zeros((2, 3)), y_train: vec![0, 1], x_test: Array2::zeros((0, 3)), y_test: vec![], scaler: None };
        assert!(decision_grid(&DecisionGridSpec { n: 3, x: None, y: None }, &model, &three, 1).is_err());
    }

    #[test]
    fn a_labels_only_prediction_is_scored_by_errors_without_probability_metrics() {
        let p = Prediction::labels_only(&[0, 2, 1, 1], 3);
        assert_eq!(p.probs, ndarray::array![[1.0, 0.0, 0.0], [0.0, 0.0, 1.0], [0.0, 1.0, 0.0], [0.0, 1.0, 0.0]]);
        p.validate(4, 3).unwrap();
        let s = score(&p, &[0, 1, 1, 2]);
        assert_eq!((s["error_count"], s["n_test"]), (2.0, 4.0));
        assert!(PROBABILITY_METRICS.iter().all(|m| !s.contains_key(*m)), "{s:?}");
        let c = checkpoint_scores(&p, &[0, 1, 1, 2]);
        assert_eq!(c.get("test_error"), Some(&50.0));
        assert!(!c.contains_key("test_nll"));
        // A probabilistic prediction keeps them.
        assert!(PROBABILITY_METRICS.iter().all(|m| score(&Prediction::new(p.probs.clone()), &[0, 1, 1, 2]).contains_key(*m)));
    }

    #[test]
    fn score_counts_errors_and_sums_log_probabilities() {
        let probs = ndarray::array![[0.7, 0.2, 0.1], [0.1, 0.3, 0.6], [0.5, 0.25, 0.25]];
        let y = [0, 1, 0];
        let s = score(&Prediction::new(probs), &y);
        assert_eq!(s["error_count"], 1.0);
        assert!((s["error_pct"] - 100.0 / 3.0).abs() < 1e-12);
        let want = 0.7f64.ln() + 0.3f64.ln() + 0.5f64.ln();
        assert!((s["log_pred_sum"] - want).abs() < 1e-12);
        assert!((s["log_pred_mean"] - want / 3.0).abs() < 1e-12);
    }
}
