//! Running one cell: build the training problem from its split, fit, predict the test
//! rows and score them. The method never sees test labels.
use super::Prepared;
use crate::kernels::KernelSet;
use crate::linalg::argmax;
use crate::methods::{self, FitContext, Fitted, Prediction, Problem};
use crate::results::{CellRecord, EvidenceKind, Handoff, Status, TracePoint};
use crate::spec::{Cell, HyperSpec, Spec};
use rand::SeedableRng;
use rand_pcg::Pcg64;
use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

struct Outcome {
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
    let cpu = cpu_time::ThreadTime::now();
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
        numerics: Some(cell.numerics.clone()),
        data_hash: Some(cell.data_hash.clone()),
        timed_out: false,
    };
    match result {
        Ok(o) => {
            record.metrics = o.metrics;
            record.evidence_kind = o.evidence_kind;
            record.hyperparameters = o.hyperparameters;
            record.diagnostics = o.diagnostics;
            record.trace = o.trace;
            record.handoff = o.handoff;
        }
        Err(CellFailure { message, timed_out }) => {
            record.status = Status::Failed;
            record.timed_out = timed_out;
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
    record.cpu_seconds = cpu.elapsed().as_secs_f64();
    record
}

fn setting_suffix(cell: &Cell) -> String {
    if cell.setting.is_empty() {
        String::new()
    } else {
        format!("[{}]", cell.setting)
    }
}

/// Why a cell failed; a timeout is told apart because it depends on the machine.
struct CellFailure {
    message: String,
    timed_out: bool,
}

impl From<String> for CellFailure {
    fn from(message: String) -> Self {
        CellFailure { message, timed_out: false }
    }
}

impl From<methods::FitError> for CellFailure {
    fn from(e: methods::FitError) -> Self {
        CellFailure { timed_out: matches!(e, methods::FitError::Timeout { .. }), message: e.to_string() }
    }
}

fn fit_and_score(spec: &Spec, cell: &Cell, prepared: &Prepared, source: Option<&CellRecord>) -> Result<Outcome, CellFailure> {
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
            });
        }
        kernels = take_over(&kernels, &rec.handoff, keep).map_err(|e| format!("hyper.from \"{src}\": {e}"))?;
    }
    let policy = cell.entry.hyper.policy();
    let problem = Problem { x: x_train, y: y_train, n_classes: data.n_classes() };
    method.supports(&problem.shape(), &kernels, policy)?;

    let mut rng = Pcg64::seed_from_u64(cell.seed);
    let deadline = spec.raw.timeout_seconds.map(|t| Instant::now() + Duration::from_secs_f64(t));
    // Checkpoint snapshots are scored with their own draws (seeded by the cell and the
    // iteration), so scoring never moves the fit's random stream.
    let score_snapshot = |model: &dyn Fitted, iter: u64| -> Result<BTreeMap<String, f64>, String> {
        let mut rng = Pcg64::seed_from_u64(cell.seed ^ iter.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let prediction = model.predict(x_test, &mut rng).map_err(|e| e.to_string())?;
        prediction.validate(y_test.len())?;
        Ok(checkpoint_scores(&prediction, y_test))
    };
    let fit_start = Instant::now();
    let mut ctx = FitContext::new(&mut rng, deadline).with_budget(cell.entry.budget);
    if let Some(schedule) = &cell.entry.checkpoints {
        ctx = ctx.with_checkpoints(schedule.clone(), &score_snapshot);
    }
    ctx.source = source.map(|r| &r.handoff);
    let fitted = method.fit(&problem, &kernels, policy, &mut ctx)?;
    let time_train = ctx.training_seconds();
    let mut trace = ctx.take_trace();
    let fit_wall = fit_start.elapsed().as_secs_f64();
    drop(ctx);

    let predict_start = Instant::now();
    let prediction = fitted.predict(x_test, &mut rng)?;
    let time_predict = predict_start.elapsed().as_secs_f64();
    prediction.validate(y_test.len())?;

    let diagnostics = fitted.diagnostics();
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
        metrics.insert("time_checkpoints".into(), fit_wall - time_train);
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
    if let Some(e) = evidence {
        metrics.insert("log_evidence".into(), e.value);
        if let Some(se) = e.std_err {
            metrics.insert("log_evidence_se".into(), se);
        }
    }
    let fitted_kernels = fitted.kernels();
    Ok(Outcome {
        metrics,
        evidence_kind: evidence.map(|e| e.kind),
        hyperparameters: fitted_kernels.natural_params().into_iter().collect(),
        diagnostics: diagnostics.texts(),
        trace,
        handoff: fitted.handoff(),
    })
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
    let mut out = BTreeMap::from([("test_error".to_string(), s["error_pct"]), ("test_nll".to_string(), -s["log_pred_mean"])]);
    for (name, sum) in prediction.class_value_sums(y) {
        let name = name.trim_end_matches("_sum");
        out.insert(format!("test_{name}"), sum / y.len().max(1) as f64);
    }
    out
}

/// Test-set metrics from a prediction (class probabilities [m, C], and the method's own log
/// score where it has one) and the true classes.
pub fn score(prediction: &Prediction, y: &[usize]) -> BTreeMap<String, f64> {
    let m = y.len();
    let mut errors = 0usize;
    let mut log_pred = 0.0;
    for (i, &yi) in y.iter().enumerate() {
        let row = prediction.probs.row(i);
        let p: Vec<f64> = row.iter().copied().collect();
        if argmax(&p) != yi {
            errors += 1;
        }
        log_pred += match &prediction.log_score {
            Some(l) => l[(i, yi)],
            // A probability that underflowed to 0 would make the sum -inf; floor it at the
            // smallest normal double (about -708 nats) so one point cannot erase the rest.
            None => p[yi].max(f64::MIN_POSITIVE).ln(),
        };
    }
    let mut out = BTreeMap::new();
    out.insert("n_test".into(), m as f64);
    out.insert("error_count".into(), errors as f64);
    out.insert("error_rate".into(), errors as f64 / m as f64);
    out.insert("error_pct".into(), 100.0 * errors as f64 / m as f64);
    out.insert("log_pred_sum".into(), log_pred);
    out.insert("log_pred_mean".into(), log_pred / m as f64);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

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
