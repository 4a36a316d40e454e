//! Running one cell: build the training problem from its split, fit, predict the test
//! rows and score them. The method never sees test labels.
use super::Prepared;
use crate::data::Standardizer;
use crate::linalg::argmax;
use crate::methods::{self, FitContext, HyperPolicy, Problem};
use crate::results::{CellRecord, EvidenceKind, Handoff, Status};
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
pub fn run_cell(spec: &Spec, cell: &Cell, prepared: &Prepared, source: Option<&CellRecord>) -> CellRecord {
    let wall = Instant::now();
    let cpu = cpu_time::ThreadTime::now();
    let result = catch_unwind(AssertUnwindSafe(|| fit_and_score(spec, cell, prepared, source)))
        .unwrap_or_else(|panic| {
            let msg = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "unknown panic".into());
            Err(format!("panicked: {msg}"))
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
        Err(message) => {
            record.status = Status::Failed;
            record.error = Some(format!("cell {}/{}{}/split {} ({}): {message}", cell.dataset, cell.entry.name, setting_suffix(cell), cell.split, spec.file));
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

fn fit_and_score(spec: &Spec, cell: &Cell, prepared: &Prepared, source: Option<&CellRecord>) -> Result<Outcome, String> {
    let data = &prepared.datasets[&cell.dataset];
    let split = &prepared.splits[&cell.dataset][cell.split];
    let train = data.subset(&split.train);
    let test = data.subset(&split.test);
    let (x_train, x_test) = if spec.raw.standardize {
        let s = Standardizer::fit(&train.x);
        (s.transform(&train.x), s.transform(&test.x))
    } else {
        (train.x.clone(), test.x.clone())
    };

    let method = methods::build(&cell.entry.method, &cell.entry.settings)?;
    let mut kernel = cell.entry.kernel.build(data.d())?;
    let policy = match &cell.entry.hyper {
        HyperSpec::Fixed => HyperPolicy::Fixed,
        HyperSpec::Learn => HyperPolicy::Learn,
        HyperSpec::From { source: src, keep } => {
            let rec = source.ok_or_else(|| format!("the cell of \"{src}\" it takes hyper-parameters from is missing"))?;
            if rec.status != Status::Ok {
                return Err(format!("the cell of \"{src}\" it takes hyper-parameters from failed"));
            }
            let p = &rec.handoff.log_hyperparameters;
            if p.len() != kernel.n_params() {
                return Err(format!("\"{src}\" handed over {} hyper-parameters but this kernel has {}", p.len(), kernel.n_params()));
            }
            let written = kernel.clone();
            kernel = kernel.with_log_params(p);
            if keep.iter().any(|k| k == "variance") {
                kernel.log_variance = written.log_variance;
            }
            if keep.iter().any(|k| k == "lengthscale") {
                kernel.log_lengthscales = written.log_lengthscales;
            }
            HyperPolicy::Fixed
        }
    };

    let mut rng = Pcg64::seed_from_u64(cell.seed);
    let deadline = spec.raw.timeout_seconds.map(|t| Instant::now() + Duration::from_secs_f64(t));
    let fit_start = Instant::now();
    let problem = Problem { x: &x_train, y: &train.y, n_classes: data.n_classes() };
    let mut ctx = FitContext::new(&mut rng, deadline);
    ctx.source = source.map(|r| &r.handoff);
    let fitted = method.fit(&problem, &kernel, policy, &mut ctx).map_err(|e| e.to_string())?;
    let trace = std::mem::take(&mut ctx.trace);
    let time_train = fit_start.elapsed().as_secs_f64();

    let predict_start = Instant::now();
    let probs = fitted.predict_proba(&x_test, &mut rng).map_err(|e| e.to_string())?;
    let time_predict = predict_start.elapsed().as_secs_f64();

    let mut metrics = score(&probs, &test.y);
    metrics.insert("n_train".into(), train.y.len() as f64);
    metrics.insert("time_train".into(), time_train);
    metrics.insert("time_predict".into(), time_predict);
    // The runner's own metrics take precedence over a method's extra ones of the same name.
    for (name, value) in fitted.test_metrics(&test.y).into_iter().chain(fitted.extra_metrics()) {
        metrics.entry(name).or_insert(value);
    }
    let evidence = fitted.evidence();
    if let Some((v, _)) = evidence {
        metrics.insert("log_evidence".into(), v);
    }
    Ok(Outcome {
        metrics,
        evidence_kind: evidence.map(|(_, k)| k),
        hyperparameters: fitted.kernel().natural_params().into_iter().collect(),
        diagnostics: fitted.diagnostics(),
        trace,
        handoff: fitted.handoff(),
    })
}

/// Test-set metrics from predictive probabilities [m, C] and true classes.
pub fn score(probs: &ndarray::Array2<f64>, y: &[usize]) -> BTreeMap<String, f64> {
    let m = y.len();
    let mut errors = 0usize;
    let mut log_pred = 0.0;
    for (i, &yi) in y.iter().enumerate() {
        let row = probs.row(i);
        let p: Vec<f64> = row.iter().copied().collect();
        if argmax(&p) != yi {
            errors += 1;
        }
        // A probability that underflowed to 0 would make the sum -inf; floor it at the
        // smallest normal double (about -708 nats) so one point cannot erase the rest.
        log_pred += p[yi].max(f64::MIN_POSITIVE).ln();
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
        let s = score(&probs, &y);
        assert_eq!(s["error_count"], 1.0);
        assert!((s["error_pct"] - 100.0 / 3.0).abs() < 1e-12);
        let want = 0.7f64.ln() + 0.3f64.ln() + 0.5f64.ln();
        assert!((s["log_pred_sum"] - want).abs() < 1e-12);
        assert!((s["log_pred_mean"] - want / 3.0).abs() < 1e-12);
    }
}
