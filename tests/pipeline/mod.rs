//! End to end through the `mcgp` binary, by concern: `runs` (bit for bit across thread counts
//! and cell order, the reduced paper specs, the commands' output), `resume` (killed runs and
//! bare checkouts), `failures` (recorded while the run goes on, and refused specs), `reuse`
//! (the cache: reuse, partial runs, numerics bumps) and `concurrency` (runs side by side).
//! The small spec and the helpers that drive the binary live here.
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

mod concurrency;
mod failures;
mod resume;
mod reuse;
mod runs;

const SMALL: &str = "\
name: small
seed: 7
datasets: [iris]
splits: { protocol: random, train_fraction: 0.6, repeats: 3 }
methods:
  - name: fixed
    method: laplace
    kernel: { lengthscale: 2.0, variance: 4.0 }
  - name: learned
    method: laplace
    kernel: { ard: true, lengthscale: 2.0, variance: 4.0 }
    hyper: learn
    settings: { max_hyper_iters: 15, mc_samples: 500 }
  - name: handed
    method: laplace
    kernel: { ard: true }
    hyper: { from: learned }
    settings: { mc_samples: 500 }
  - name: handed-on
    method: laplace
    kernel: { ard: true }
    hyper: { from: handed }
    settings: { mc_samples: 200 }
tables:
  - id: tab-main
    title: Main table
    metrics: [error_pct, log_pred_sum]
    paper:
      - { dataset: iris, method: learned, metric: error_pct, mean: 4.0, sd: 2.0, n: 50 }
figures:
  - { id: fig-err, title: Error, kind: errorbar, metric: error_pct }
  - { id: fig-violin, title: Violin, kind: violin, metric: log_pred_sum }
  - { id: fig-hist, title: Hist, kind: histogram, metric: hp_variance }
  - { id: fig-scatter, title: Scatter, kind: scatter, metric: log_pred_sum, methods: [fixed, learned] }
  - { id: fig-trace, title: Trace, kind: trace, trace: log_evidence, methods: [learned] }
";

fn mcgp() -> Command {
    Command::new(env!("CARGO_BIN_EXE_mcgp"))
}

fn workdir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("mcgp-test-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn run(dir: &Path, spec: &Path, envs: &[(&str, &str)]) -> std::process::Output {
    let mut cmd = mcgp();
    cmd.arg("run").arg(spec).arg("--results").arg(dir.join("results")).arg("--reports").arg(dir.join("reports"));
    for (k, v) in envs {
        cmd.env(k, v);
    }
    cmd.output().expect("mcgp runs")
}

/// Assert two sets of cell records are equal, naming the first cell that differs.
fn assert_same_cells(a: &BTreeMap<String, Value>, b: &BTreeMap<String, Value>) {
    assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>(), "different cells stored");
    for (k, va) in a {
        assert!(va == &b[k], "cell {k} differs:\n{va}\n{}", b[k]);
    }
}

/// Every stored cell record, with the fields that measure time removed.
fn cells_without_timing(results: &Path) -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(results.join("cells")).unwrap() {
        let path = entry.unwrap().path();
        let mut v: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        let obj = v.as_object_mut().unwrap();
        obj.remove("wall_seconds");
        obj.remove("cpu_seconds");
        obj["metrics"].as_object_mut().unwrap().retain(|k, _| !k.starts_with("time_"));
        for t in obj["trace"].as_array_mut().unwrap() {
            t.as_object_mut().unwrap().remove("time");
        }
        out.insert(path.file_name().unwrap().to_string_lossy().into_owned(), v);
    }
    out
}

fn manifest(results: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(results.join("manifest.json")).unwrap()).unwrap()
}

/// Run `mcgp` with arguments and environment; (success, stderr, stdout).
fn mcgp_in(dir: &Path, args: &[&str], envs: &[(&str, &str)]) -> (bool, String, String) {
    let mut cmd = mcgp();
    cmd.args(args).arg("--results").arg(dir.join("results"));
    if args[0] != "status" {
        cmd.arg("--reports").arg(dir.join("reports"));
    }
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("mcgp runs");
    (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned(), String::from_utf8_lossy(&out.stdout).into_owned())
}

fn computed_count(stderr: &str) -> usize {
    let line = stderr.lines().find(|l| l.contains(" computed, ")).unwrap_or_else(|| panic!("{stderr}"));
    line.split(" cells: ").nth(1).unwrap().split(' ').next().unwrap().parse().unwrap()
}
