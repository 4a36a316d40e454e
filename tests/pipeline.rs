//! End to end through the `mcgp` binary: determinism across thread counts, resume after an
//! abrupt kill without recomputing, failed cells recorded while the run goes on, and a
//! report that holds every table and figure the spec asks for.
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

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

#[test]
fn quickstart_is_bit_identical_on_one_and_two_threads() {
    let spec = Path::new(env!("CARGO_MANIFEST_DIR")).join("experiments/quickstart.yaml");
    let one = workdir("threads1");
    let two = workdir("threads2");
    assert!(run(&one, &spec, &[("RAYON_NUM_THREADS", "1")]).status.success());
    assert!(run(&two, &spec, &[("RAYON_NUM_THREADS", "2")]).status.success());
    assert_eq!(manifest(&one.join("results/quickstart"))["threads"], 1);
    assert_eq!(manifest(&two.join("results/quickstart"))["threads"], 2);
    let a = cells_without_timing(&one.join("results/quickstart"));
    let b = cells_without_timing(&two.join("results/quickstart"));
    assert_eq!(a.len(), 60);
    assert_same_cells(&a, &b);
    // Every cell and the manifest name the machine they ran on (the report reads times by it).
    let machine = manifest(&one.join("results/quickstart"))["machine"].as_str().map(str::to_string);
    assert!(machine.as_deref().is_some_and(|m| m.ends_with(" CPU") || m.ends_with(" CPUs")), "{machine:?}");
    assert!(a.values().chain(b.values()).all(|c| c["machine"].as_str() == machine.as_deref()), "a cell without the run's machine");
}

/// `one_cell_at_a_time` only changes the order cells run in: the same cells, bit for bit, with
/// a dependent entry (laplace-from-learned) still after its source.
#[test]
fn cells_in_turn_give_the_cells_of_a_parallel_run() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(root.join("experiments/quickstart.yaml")).unwrap();
    let parallel = workdir("in-turn-parallel");
    let in_turn = workdir("in-turn");
    let spec = in_turn.join("quickstart.yaml");
    std::fs::write(&spec, text.replace("standardize: true\n", "standardize: true\none_cell_at_a_time: true\n")).unwrap();
    assert!(std::fs::read_to_string(&spec).unwrap().contains("one_cell_at_a_time: true"));
    assert!(run(&parallel, &root.join("experiments/quickstart.yaml"), &[("RAYON_NUM_THREADS", "2")]).status.success());
    let out = run(&in_turn, &spec, &[("RAYON_NUM_THREADS", "2")]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_same_cells(
        &cells_without_timing(&parallel.join("results/quickstart")),
        &cells_without_timing(&in_turn.join("results/quickstart")),
    );
}

#[test]
fn a_killed_run_resumes_without_recomputing_and_gives_the_same_results() {
    let dir = workdir("resume");
    let spec = dir.join("small.yaml");
    std::fs::write(&spec, SMALL).unwrap();

    // Die abruptly after 4 stored cells.
    let killed = run(&dir, &spec, &[("MCGP_ABORT_AFTER_CELLS", "4")]);
    assert!(!killed.status.success());
    let results = dir.join("results/small");
    let before: BTreeMap<String, Vec<u8>> = std::fs::read_dir(results.join("cells"))
        .unwrap()
        .map(|e| {
            let p = e.unwrap().path();
            (p.file_name().unwrap().to_string_lossy().into_owned(), std::fs::read(&p).unwrap())
        })
        .collect();
    assert_eq!(before.len(), 4);

    // A partial report can be rendered from the 4 stored cells, and says it is partial.
    let partial = mcgp()
        .arg("report")
        .arg(&spec)
        .arg("--results")
        .arg(dir.join("results"))
        .arg("--reports")
        .arg(dir.join("reports"))
        .output()
        .unwrap();
    assert!(partial.status.success(), "{}", String::from_utf8_lossy(&partial.stderr));
    let html = std::fs::read_to_string(dir.join("reports/small/index.html")).unwrap();
    assert!(html.contains("8 not run yet (partial report)"), "partial report must say so");
    let index = std::fs::read_to_string(dir.join("reports/index.html")).unwrap();
    assert!(index.contains("8 (partial report)"), "the index flags the partial report");

    let resumed = run(&dir, &spec, &[("MCGP_PROGRESS_SECONDS", "0")]);
    assert!(resumed.status.success(), "{}", String::from_utf8_lossy(&resumed.stderr));
    // Without a terminal, progress comes as plain lines (here one per cell).
    let log = String::from_utf8_lossy(&resumed.stderr);
    assert!(log.contains("8/8 cells computed (0 failed)"), "{log}");
    let m = manifest(&results);
    assert_eq!(m["cells_total"], 12);
    assert_eq!(m["cells_cached"], 4);
    assert_eq!(m["cells_computed"], 8);
    // The 4 finished cells were not recomputed: their files, timings included, are untouched.
    for (name, bytes) in &before {
        assert_eq!(&std::fs::read(results.join("cells").join(name)).unwrap(), bytes);
    }

    // Same results as a run that was never interrupted.
    let clean = workdir("resume-clean");
    assert!(run(&clean, &spec, &[]).status.success());
    let cells = cells_without_timing(&results);
    assert_same_cells(&cells, &cells_without_timing(&clean.join("results/small")));
    // Hyper-parameters pass down a chain of two hand-offs (learned -> handed -> handed-on).
    let of = |method: &str, split: u64| {
        cells.values().find(|c| c["method"] == method && c["split"] == split).unwrap()["hyperparameters"].clone()
    };
    for split in 0..3 {
        assert_eq!(of("handed-on", split), of("learned", split), "split {split}");
        assert_ne!(of("learned", split), of("fixed", split), "split {split}: the source must have learned");
    }
    for f in ["results.csv", "results.parquet", "summary.csv", "traces.csv", "traces.parquet", "splits/iris.csv"] {
        assert!(results.join(f).exists(), "{f} missing");
    }

    // The report holds every table and figure the spec asks for.
    let report = dir.join("reports/small");
    let html = std::fs::read_to_string(report.join("index.html")).unwrap();
    for id in ["tab-main", "fig-err", "fig-violin", "fig-hist", "fig-scatter", "fig-trace"] {
        assert!(html.contains(id), "report lacks {id}");
    }
    for id in ["fig-err", "fig-violin", "fig-hist", "fig-scatter", "fig-trace"] {
        let svg = std::fs::read_to_string(report.join("figures").join(format!("{id}.svg"))).unwrap();
        assert!(svg.contains("<svg"), "{id}.svg is not SVG");
    }
    assert!(std::fs::read_to_string(dir.join("reports/index.html")).unwrap().contains("small"));

    // --recompute ignores the stored cells and reproduces them bit for bit.
    let stored = cells_without_timing(&results);
    let out = mcgp()
        .args(["run", "--recompute", "--no-report"])
        .arg(&spec)
        .arg("--results")
        .arg(dir.join("results"))
        .arg("--reports")
        .arg(dir.join("reports"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(manifest(&results)["cells_computed"], 12);
    assert_same_cells(&stored, &cells_without_timing(&results));

    // `mcgp report` re-renders from the stored cells alone.
    std::fs::remove_dir_all(&report).unwrap();
    let out = mcgp()
        .arg("report")
        .arg(&spec)
        .arg("--results")
        .arg(dir.join("results"))
        .arg("--reports")
        .arg(dir.join("reports"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(std::fs::read_to_string(report.join("index.html")).unwrap().contains("tab-main"));

    // Editing only the spec's text (a note) and re-rendering records the new spec but keeps the
    // run's own timing and the code that computed the cells (here a run made at another commit).
    let mut run_manifest = manifest(&results);
    run_manifest["git_commit"] = "feedc0de".into();
    std::fs::write(results.join("manifest.json"), serde_json::to_vec_pretty(&run_manifest).unwrap()).unwrap();
    let before = manifest(&results);
    std::fs::write(&spec, SMALL.replace("seed: 7", "description: a note added after the run\nseed: 7")).unwrap();
    let out = mcgp()
        .arg("report")
        .arg(&spec)
        .arg("--results")
        .arg(dir.join("results"))
        .arg("--reports")
        .arg(dir.join("reports"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let after = manifest(&results);
    assert_ne!(after["spec_hash"], before["spec_hash"]);
    assert!(after["spec_text"].as_str().unwrap().contains("a note added after the run"));
    for key in ["started", "finished", "wall_seconds", "threads", "cells_computed", "git_commit", "git_dirty", "rustc"] {
        assert_eq!(after[key], before[key], "{key} must be the run's");
    }
}

#[test]
fn a_failing_cell_is_recorded_and_the_run_goes_on() {
    let dir = workdir("failing");
    let spec = dir.join("fail.yaml");
    // A timeout no fit can meet makes every cell fail; the run still finishes and reports them.
    let text = SMALL.replace("seed: 7", "seed: 7\ntimeout_seconds: 0.000001").replace("repeats: 3", "repeats: 1");
    std::fs::write(&spec, text).unwrap();
    let out = run(&dir, &spec, &[]);
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    let cells = cells_without_timing(&dir.join("results/small"));
    assert_eq!(cells.len(), 4);
    let failed: Vec<&Value> = cells.values().filter(|c| c["status"] == "failed").collect();
    assert!(failed.iter().any(|c| c["error"].as_str().unwrap().contains("timed out")), "{cells:?}");
    // The dependent cell fails because its source failed, with a message that says so.
    assert!(failed.iter().any(|c| c["method"] == "handed" && c["error"].as_str().unwrap().contains("\"learned\"")));
    assert!(failed.iter().any(|c| c["method"] == "handed-on" && c["error"].as_str().unwrap().contains("\"handed\"")));
    let html = std::fs::read_to_string(dir.join("reports/small/index.html")).unwrap();
    assert!(html.contains("timed out"));
}

#[test]
fn check_and_list_work() {
    let spec = Path::new(env!("CARGO_MANIFEST_DIR")).join("experiments/quickstart.yaml");
    let out = mcgp().arg("check").arg(&spec).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = mcgp().arg("list").output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("glass") && text.contains("laplace"), "{text}");
    // A method's settings with their defaults, as YAML a spec's `settings:` takes.
    let out = mcgp().args(["list", "laplace"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && text.contains("  max_hyper_iters: 100") && text.contains("  newton_tol: 1e-10"), "{text}");
    let out = mcgp().args(["list", "laplac"]).output().unwrap();
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("did you mean \"laplace\""));
    let dir = workdir("badspec");
    let bad = dir.join("bad.yaml");
    std::fs::write(&bad, SMALL.replace("[iris]", "[irsi]")).unwrap();
    let out = mcgp().arg("check").arg(&bad).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("did you mean \"iris\""));
}

/// A reader that closes the pipe early (`mcgp list | head -1`) ends the output quietly, with
/// success, instead of a panic on the failed write.
#[test]
fn a_closed_output_pipe_ends_quietly() {
    let mut child = mcgp().arg("list").stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn().unwrap();
    drop(child.stdout.take()); // the reader goes away before anything is written
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "exit {:?}: {stderr}", out.status.code());
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// Every reduced paper spec under experiments/ci/ runs end to end with no failed cell and
/// renders every table and figure it asks for. (The full specs are run by hand; their
/// reports are committed.)
#[test]
fn reduced_paper_specs_run_clean() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("experiments/ci");
    let mut specs: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map(|rd| rd.map(|e| e.unwrap().path()).filter(|p| p.extension().is_some_and(|e| e == "yaml")).collect())
        .unwrap_or_default();
    specs.sort();
    for spec in specs {
        let name = spec.file_stem().unwrap().to_string_lossy().into_owned();
        let work = workdir(&format!("ci-{name}"));
        let out = run(&work, &spec, &[]);
        assert!(out.status.success(), "{}: {}", spec.display(), String::from_utf8_lossy(&out.stderr));
        let text = std::fs::read_to_string(&spec).unwrap();
        let raw: Value = serde_norway::from_str(&text).unwrap();
        let experiment = raw["name"].as_str().unwrap();
        let html = std::fs::read_to_string(work.join("reports").join(experiment).join("index.html")).unwrap();
        for section in ["tables", "figures"] {
            for item in raw[section].as_array().into_iter().flatten() {
                let id = item["id"].as_str().unwrap();
                assert!(html.contains(id), "{}: report lacks {section} item {id}", spec.display());
            }
        }
    }
}

/// `hyper: {from: X, keep: [variance]}` takes the source's length-scales and keeps this entry's
/// (gridded) signal variance: a sigma^2 sweep at learned length-scales.
#[test]
fn hyper_from_keeps_the_named_parameters_as_written() {
    let dir = workdir("keep");
    let spec = dir.join("keep.yaml");
    std::fs::write(
        &spec,
        "\
name: keep
seed: 3
datasets: [iris]
splits: { protocol: random, train_fraction: 0.6, repeats: 1 }
methods:
  - name: learned
    method: laplace
    kernel: { ard: true, lengthscale: 2.0, variance: 1.0, learn_variance: false }
    hyper: learn
    settings: { max_hyper_iters: 10, mc_samples: 200 }
  - name: sweep
    method: laplace
    kernel: { ard: true, variance: 1.0, learn_variance: false }
    hyper: { from: learned, keep: [variance] }
    settings: { mc_samples: 200 }
    grid: { kernel.variance: [0.5, 8.0] }
",
    )
    .unwrap();
    let out = run(&dir, &spec, &[]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let cells = cells_without_timing(&dir.join("results/keep"));
    let hp = |c: &Value, k: &str| c["hyperparameters"][k].as_f64().unwrap();
    let learned: Vec<&Value> = cells.values().filter(|c| c["method"] == "learned").collect();
    let sweep: Vec<&Value> = cells.values().filter(|c| c["method"] == "sweep").collect();
    assert_eq!((learned.len(), sweep.len()), (1, 2));
    let mut variances: Vec<f64> = sweep.iter().map(|c| hp(c, "variance")).collect();
    variances.sort_by(f64::total_cmp);
    assert!((variances[0] - 0.5).abs() < 1e-12 && (variances[1] - 8.0).abs() < 1e-12, "{variances:?}");
    for c in &sweep {
        for d in 1..=4 {
            let k = format!("lengthscale_{d}");
            assert!((hp(c, &k) - hp(learned[0], &k)).abs() < 1e-12, "{k}: {} vs {}", hp(c, &k), hp(learned[0], &k));
        }
    }
    assert!((hp(learned[0], "lengthscale_1") - 2.0).abs() > 1e-6, "the source must have learned");
}

#[test]
fn a_cell_stored_by_another_experiment_is_reused_not_recomputed() {
    let dir = workdir("reuse");
    let first = dir.join("small.yaml");
    std::fs::write(&first, SMALL).unwrap();
    assert!(run(&dir, &first, &[]).status.success());

    // Another spec with the same seed and split protocol shares the entry "learned" (same
    // key) and adds an entry of its own; a third spec differs only in its seed.
    let shared = "\
name: NAME
seed: SEED
datasets: [iris]
splits: { protocol: random, train_fraction: 0.6, repeats: 3 }
methods:
  - name: learned
    method: laplace
    kernel: { ard: true, lengthscale: 2.0, variance: 4.0 }
    hyper: learn
    settings: { max_hyper_iters: 15, mc_samples: 500 }
  - name: other
    method: laplace
    kernel: { lengthscale: 1.0, variance: 2.0 }
";
    let second = dir.join("second.yaml");
    std::fs::write(&second, shared.replace("NAME", "second").replace("SEED", "7")).unwrap();
    // `mcgp status` counts the three a run will take from the first experiment.
    let (ok, stderr, stdout) = mcgp_in(&dir, &["status", second.to_str().unwrap()], &[]);
    assert!(ok, "{stderr}");
    assert!(
        stdout.contains("6 cells: 0 stored, 6 missing, 0 stale (3 of the cells not stored here are stored by other experiments"),
        "{stdout}"
    );
    let row = |entry: &str| stdout.lines().find(|l| l.trim_start().starts_with(entry)).unwrap_or_else(|| panic!("{stdout}")).to_string();
    assert_eq!(row("learned/iris").split_whitespace().collect::<Vec<_>>(), ["learned/iris", "0", "0", "3", "0", "0.0", "3"]);
    assert_eq!(row("other/iris").split_whitespace().collect::<Vec<_>>(), ["other/iris", "0", "0", "3", "0", "0.0", "0"]);
    let out = run(&dir, &second, &[]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let m = manifest(&dir.join("results/second"));
    assert_eq!(m["cells_total"], 6);
    assert_eq!(m["cells_reused"], 3);
    assert_eq!(m["cells_cached"], 3);
    assert_eq!(m["cells_computed"], 3);

    // The reused records are the first run's, filed under the new experiment.
    let theirs = cells_without_timing(&dir.join("results/small"));
    let ours = cells_without_timing(&dir.join("results/second"));
    let mut reused = 0;
    for (name, mut v) in ours {
        if v["method"] != "learned" {
            assert!(v["diagnostics"].get("reused_from").is_none());
            continue;
        }
        assert_eq!(v["experiment"], "second");
        assert_eq!(v["diagnostics"]["reused_from"], "small");
        v["experiment"] = "small".into();
        v["diagnostics"].as_object_mut().unwrap().remove("reused_from");
        assert!(v == theirs[&name], "reused cell {name} differs from its source");
        reused += 1;
    }
    assert_eq!(reused, 3);

    // A different seed means different splits: nothing is reused.
    let third = dir.join("third.yaml");
    std::fs::write(&third, shared.replace("NAME", "third").replace("SEED", "8")).unwrap();
    assert!(run(&dir, &third, &[]).status.success());
    let m = manifest(&dir.join("results/third"));
    assert_eq!(m["cells_reused"], 0);
    assert_eq!(m["cells_computed"], 6);
}

#[test]
fn datasets_option_computes_a_subset_and_a_later_run_completes_it() {
    let dir = workdir("subset");
    let spec = dir.join("two.yaml");
    std::fs::write(
        &spec,
        "name: two\nseed: 3\ndatasets: [iris, wine]\nsplits: { protocol: random, train_fraction: 0.6, repeats: 2 }\n\
         methods:\n  - { name: fixed, method: laplace, kernel: { lengthscale: 2.0, variance: 4.0 } }\n",
    )
    .unwrap();
    let with = |extra: &[&str]| {
        let mut cmd = mcgp();
        cmd.arg("run").arg(&spec).args(extra).arg("--results").arg(dir.join("results")).arg("--reports").arg(dir.join("reports"));
        cmd.output().unwrap()
    };

    let bad = with(&["--datasets", "iris,glas"]);
    assert_eq!(bad.status.code(), Some(2));
    let msg = String::from_utf8_lossy(&bad.stderr);
    assert!(msg.contains("glas is not a dataset of") && msg.contains("iris, wine"), "{msg}");

    assert!(with(&["--datasets", "wine"]).status.success());
    let results = dir.join("results/two");
    let m = manifest(&results);
    assert_eq!((m["cells_computed"].as_u64(), m["cells_missing"].as_u64()), (Some(2), Some(2)));
    let stored = cells_without_timing(&results);
    assert!(stored.values().all(|v| v["dataset"] == "wine"));
    assert!(std::fs::read_to_string(dir.join("reports/two/index.html")).unwrap().contains("2 not run yet (partial report)"));

    assert!(with(&[]).status.success());
    let m = manifest(&results);
    assert_eq!((m["cells_computed"].as_u64(), m["cells_cached"].as_u64(), m["cells_missing"].as_u64()), (Some(2), Some(2), Some(0)));
}

#[test]
fn entries_option_computes_named_entries_and_the_unstored_sources_they_need() {
    let dir = workdir("entries");
    let spec = dir.join("three.yaml");
    std::fs::write(
        &spec,
        "name: three\nseed: 3\ndatasets: [iris]\nsplits: { protocol: random, train_fraction: 0.6, repeats: 2 }\n\
         methods:\n  - { name: fixed, method: laplace, kernel: { lengthscale: 2.0, variance: 4.0 } }\n\
         \x20 - { name: learned, method: laplace, kernel: { lengthscale: 2.0, variance: 4.0 }, hyper: learn, settings: { max_hyper_iters: 3 } }\n\
         \x20 - { name: after, method: laplace, kernel: { lengthscale: 2.0, variance: 4.0 }, hyper: { from: learned } }\n",
    )
    .unwrap();
    let with = |extra: &[&str]| {
        let mut cmd = mcgp();
        cmd.arg("run").arg(&spec).args(extra).arg("--results").arg(dir.join("results")).arg("--reports").arg(dir.join("reports"));
        cmd.output().unwrap()
    };
    let bad = with(&["--entries", "fixd"]);
    assert_eq!(bad.status.code(), Some(2));
    let msg = String::from_utf8_lossy(&bad.stderr);
    assert!(msg.contains("fixd is not a method entry of") && msg.contains("fixed, learned, after"), "{msg}");

    // `after` takes its kernel from `learned`, which is not stored yet: both are computed.
    let out = with(&["--entries", "after"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let results = dir.join("results/three");
    let stored = cells_without_timing(&results);
    let entries = |stored: &std::collections::BTreeMap<String, serde_json::Value>| {
        let mut e: Vec<String> = stored.values().map(|v| v["method"].as_str().unwrap().to_string()).collect();
        e.sort();
        e
    };
    assert_eq!(entries(&stored), ["after", "after", "learned", "learned"]);
    assert_eq!(manifest(&results)["cells_missing"].as_u64(), Some(2));

    // The remaining entry alone: its two cells computed, the four stored ones reused.
    let out = with(&["--entries", "fixed"]);
    assert!(out.status.success());
    let m = manifest(&results);
    assert_eq!((m["cells_computed"].as_u64(), m["cells_cached"].as_u64(), m["cells_missing"].as_u64()), (Some(2), Some(4), Some(0)));
}

#[test]
fn checkpoints_trace_test_scores_off_the_clock_without_changing_the_fit() {
    let dir = workdir("checkpoints");
    let plain = dir.join("plain.yaml");
    std::fs::write(&plain, SMALL).unwrap();
    let scored = dir.join("scored.yaml");
    let with_checkpoints = SMALL.replace(
        "    settings: { max_hyper_iters: 15, mc_samples: 500 }\n",
        "    settings: { max_hyper_iters: 15, mc_samples: 500 }\n    checkpoints: geometric\n",
    );
    std::fs::write(&scored, with_checkpoints.replace("name: small", "name: scored")).unwrap();
    let budget = dir.join("budget.yaml");
    let with_budget = SMALL.replace(
        "    settings: { max_hyper_iters: 15, mc_samples: 500 }\n",
        "    settings: { max_hyper_iters: 15, mc_samples: 500 }\n    budget: { iterations: 3 }\n    checkpoints: { every: 1 }\n",
    );
    std::fs::write(&budget, with_budget.replace("name: small", "name: budget")).unwrap();
    for spec in [&plain, &scored, &budget] {
        let out = run(&dir, spec, &[]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    let learned = |exp: &str| -> Vec<Value> {
        let mut cells: Vec<Value> =
            cells_without_timing(&dir.join("results").join(exp)).into_values().filter(|c| c["method"] == "learned").collect();
        cells.sort_by_key(|c| c["split"].as_u64());
        cells
    };
    let (plain, scored, budget) = (learned("small"), learned("scored"), learned("budget"));
    assert_eq!(plain.len(), 3);
    for (a, b) in plain.iter().zip(&scored) {
        // Same seed, same fit, same numbers: checkpoints only add trace points.
        assert_eq!(a["seed"], b["seed"]);
        assert_eq!(a["metrics"], b["metrics"]);
        assert_eq!(a["hyperparameters"], b["hyperparameters"]);
        let ckpt: Vec<u64> =
            b["trace"].as_array().unwrap().iter().filter(|p| p["name"] == "test_error").map(|p| p["iter"].as_u64().unwrap()).collect();
        let evaluations = a["metrics"]["diag_iterations"].as_f64().unwrap() as u64;
        // Evaluations 1..9 (then 10, 15, ...) up to the last, which closes the trace.
        let want: Vec<u64> = (1..=evaluations).filter(|&i| i <= 9 || (i <= 95 && i % 5 == 0)).chain([evaluations]).collect();
        let mut want = want;
        want.dedup();
        assert_eq!(ckpt, want, "split {}", a["split"]);
        assert!(b["trace"].as_array().unwrap().iter().any(|p| p["name"] == "test_nll"));
    }
    // Training times of the checkpoints (read with time) never go backwards and never pass the
    // training time, which leaves out the scoring: that is counted apart, in time_checkpoints.
    let raw = |exp: &str| -> Vec<Value> {
        std::fs::read_dir(dir.join("results").join(exp).join("cells"))
            .unwrap()
            .map(|cell| serde_json::from_slice(&std::fs::read(cell.unwrap().path()).unwrap()).unwrap())
            .filter(|v: &Value| v["method"] == "learned")
            .collect()
    };
    for v in raw("scored") {
        let t: Vec<f64> =
            v["trace"].as_array().unwrap().iter().filter(|p| p["name"] == "test_error").map(|p| p["time"].as_f64().unwrap()).collect();
        assert!(t.windows(2).all(|w| w[0] <= w[1]), "{t:?}");
        let train = v["metrics"]["time_train"].as_f64().unwrap();
        assert!(t.iter().all(|&ti| ti <= train), "checkpoint times {t:?} past time_train {train}");
        assert!(v["metrics"]["time_checkpoints"].as_f64().unwrap() > 0.0, "scoring off the clock is counted: {}", v["metrics"]);
    }
    assert!(raw("small").iter().all(|v| v["metrics"].get("time_checkpoints").is_none()), "no checkpoints, no scoring time");
    // A budget of 3 evaluations is a normal stop at the best of those three.
    for c in &budget {
        assert_eq!(c["status"], "ok");
        assert_eq!(c["diagnostics"]["stop_reason"], "budget_iterations");
        assert_eq!(c["metrics"]["diag_iterations"], 3.0);
        let trace = c["trace"].as_array().unwrap();
        let evidence: Vec<f64> = trace.iter().filter(|p| p["name"] == "objective").map(|p| p["value"].as_f64().unwrap()).collect();
        assert_eq!(evidence.len(), 3);
        assert!(evidence.windows(2).all(|w| w[0] <= w[1]), "best so far never falls: {evidence:?}");
        // The final model refits the mode at the best point from a cold start (Newton's
        // tolerance apart from the warm-started evaluation).
        assert!((c["metrics"]["log_evidence"].as_f64().unwrap() - evidence[2]).abs() < 1e-6);
    }
}

#[test]
fn stored_non_finite_values_and_cut_short_records_do_not_block_a_resumed_run() {
    let dir = workdir("nonfinite");
    let spec = dir.join("small.yaml");
    std::fs::write(&spec, SMALL).unwrap();
    assert!(run(&dir, &spec, &[]).status.success());
    let cells_dir = dir.join("results/small/cells");
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&cells_dir).unwrap().map(|e| e.unwrap().path()).collect();
    paths.sort();
    let cell_of = |method: &str| {
        paths
            .iter()
            .find(|p| {
                let v: Value = serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap();
                v["method"] == method && v["split"] == 0
            })
            .unwrap()
            .clone()
    };
    // A NaN metric as an older version stored it (null), one as this version does ("NaN"),
    // an infinite hyper-parameter, and a record cut short.
    let (fixed, learned, handed) = (cell_of("fixed"), cell_of("learned"), cell_of("handed-on"));
    let mut v: Value = serde_json::from_slice(&std::fs::read(&fixed).unwrap()).unwrap();
    v["metrics"]["log_evidence"] = Value::Null;
    v["metrics"]["error_pct"] = Value::String("NaN".into());
    v["hyperparameters"]["variance"] = Value::String("inf".into());
    std::fs::write(&fixed, serde_json::to_vec(&v).unwrap()).unwrap();
    let text = std::fs::read(&learned).unwrap();
    std::fs::write(&handed, &text[..text.len() / 2]).unwrap();
    let out = run(&dir, &spec, &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("not a valid cell record") && stderr.contains("computed again"), "{stderr}");
    assert_eq!(computed_count(&stderr), 1, "only the cut-short cell is recomputed: {stderr}");
    let summary = std::fs::read_to_string(dir.join("results/small/summary.csv")).unwrap();
    let row = |metric: &str| summary.lines().find(|l| l.starts_with(&format!("iris,fixed,\"\",{metric},"))).unwrap().to_string();
    // 3 splits: 2 finite values and 1 left out, and said so.
    assert!(row("error_pct").ends_with(",2,1"), "{}", row("error_pct"));
    assert!(row("log_evidence").ends_with(",2,1"), "{}", row("log_evidence"));
    assert!(row("hp_variance").ends_with(",2,1"), "{}", row("hp_variance"));
    assert!(row("log_pred_sum").ends_with(",3,0"), "{}", row("log_pred_sum"));
    let report = std::fs::read_to_string(dir.join("reports/small/index.html")).unwrap();
    assert!(report.contains("1 not finite (left out)"), "the report says so");
    // The stored record reads back with its NaN.
    let back: Value = serde_json::from_slice(&std::fs::read(&fixed).unwrap()).unwrap();
    assert_eq!(back["metrics"]["error_pct"], "NaN");
}

#[test]
fn concurrent_runs_of_one_experiment_compute_each_cell_once() {
    let dir = workdir("concurrent");
    let spec = dir.join("small.yaml");
    std::fs::write(&spec, SMALL).unwrap();
    let start = || {
        let mut cmd = mcgp();
        cmd.arg("run").arg(&spec).arg("--results").arg(dir.join("results")).arg("--reports").arg(dir.join("reports"));
        cmd.stderr(std::process::Stdio::piped()).spawn().expect("mcgp starts")
    };
    let (a, b) = (start(), start());
    let (a, b) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
    let computed = |o: &std::process::Output| -> usize {
        let text = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{text}");
        let line = text.lines().find(|l| l.contains(" computed, ")).unwrap_or_else(|| panic!("{text}"));
        line.split(" cells: ").nth(1).unwrap().split(' ').next().unwrap().parse().unwrap()
    };
    // 4 entries x 3 splits: every cell computed by exactly one of the two runs.
    assert_eq!(computed(&a) + computed(&b), 12);
    // (Usually one waits for the other's lock; on a loaded machine the first may finish before
    // the second starts, which this cannot tell apart, so only the outcome is checked.)
    // The same tables as one run alone.
    let alone = workdir("concurrent-alone");
    let spec_alone = alone.join("small.yaml");
    std::fs::write(&spec_alone, SMALL).unwrap();
    assert!(run(&alone, &spec_alone, &[]).status.success());
    assert_same_cells(&cells_without_timing(&dir.join("results/small")), &cells_without_timing(&alone.join("results/small")));
    let summary = |d: &Path| std::fs::read_to_string(d.join("results/small/summary.csv")).unwrap();
    let no_time = |s: String| s.lines().filter(|l| !l.contains(",time_")).map(str::to_string).collect::<Vec<_>>();
    assert_eq!(no_time(summary(&dir)), no_time(summary(&alone)));

    // A second spec file with the same name is refused, naming both files.
    let twin = dir.join("twin.yaml");
    std::fs::write(&twin, SMALL.replace("seed: 7", "seed: 8")).unwrap();
    let out = run(&dir, &twin, &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("small.yaml") && stderr.contains("twin.yaml") && stderr.contains("another `name:`"), "{stderr}");
}

/// `mcgp report` while a run of the spec holds its lock: a snapshot of the stored cells is
/// rendered at once (it must not wait for the run), and the folder's tables stay the run's.
#[test]
fn a_report_during_a_run_renders_a_snapshot_and_leaves_the_tables_to_the_run() {
    let dir = workdir("snapshot-report");
    let spec = dir.join("small.yaml");
    std::fs::write(&spec, SMALL).unwrap();
    assert!(run(&dir, &spec, &[]).status.success());
    let summary = dir.join("results/small/summary.csv");
    let index = dir.join("reports/small/index.html");
    let rendered = std::fs::read_to_string(&index).unwrap();
    // A run under way, as far as the report can tell: the experiment's lock held.
    let lock = mcgp::results::Store::new(&dir.join("results"), "small").lock().unwrap();
    std::fs::write(&summary, "the run's to write\n").unwrap();
    std::fs::remove_file(&index).unwrap();
    let report = || {
        let mut cmd = mcgp();
        cmd.arg("report").arg(&spec).arg("--results").arg(dir.join("results")).arg("--reports").arg(dir.join("reports"));
        cmd.stderr(std::process::Stdio::piped()).spawn().expect("mcgp starts")
    };
    let mut child = report();
    let started = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > std::time::Duration::from_secs(120) {
            child.kill().unwrap();
            panic!("mcgp report waited for the run instead of rendering a snapshot");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("rendering a snapshot"), "{stderr}");
    assert_eq!(std::fs::read_to_string(&index).unwrap(), rendered, "the snapshot of every stored cell is the run's report");
    assert_eq!(std::fs::read_to_string(&summary).unwrap(), "the run's to write\n", "a snapshot leaves the tables alone");
    // With --wait it waits for the run (the SLURM collection job's way), then writes the tables.
    let mut waiting = mcgp();
    waiting.arg("report").arg("--wait").arg(&spec).arg("--results").arg(dir.join("results")).arg("--reports").arg(dir.join("reports"));
    let mut waiting = waiting.stderr(std::process::Stdio::piped()).spawn().expect("mcgp starts");
    std::thread::sleep(std::time::Duration::from_secs(3));
    assert!(waiting.try_wait().unwrap().is_none(), "report --wait did not wait for the run");
    drop(lock);
    let out = waiting.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && stderr.contains("waiting for it to finish") && !stderr.contains("rendering a snapshot"), "{stderr}");
    assert!(std::fs::read_to_string(&summary).unwrap().starts_with("dataset,"), "tables written after the wait");
    // Once the run has ended, a report takes the lock and writes the tables again.
    std::fs::write(&summary, "stale\n").unwrap();
    let out = report().wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && !stderr.contains("rendering a snapshot"), "{stderr}");
    assert!(std::fs::read_to_string(&summary).unwrap().starts_with("dataset,"), "tables rewritten");
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

#[test]
fn a_numerics_bump_recomputes_exactly_that_method_and_its_dependants() {
    let dir = workdir("numerics-bump");
    let spec = dir.join("mixed.yaml");
    std::fs::write(
        &spec,
        "name: mixed\nseed: 3\ndatasets: [iris]\nsplits: { protocol: random, train_fraction: 0.6, repeats: 2 }\nmethods:\n\
         \x20 - { name: lap, method: laplace, settings: { mc_samples: 200 } }\n\
         \x20 - { name: kl, method: klmnl, kernel: { lengthscale: 2.0 } }\n\
         \x20 - { name: lap-from-kl, method: laplace, hyper: { from: kl }, settings: { mc_samples: 200 } }\n\
         \x20 - { name: vbs, method: vbmnp_sparse, settings: { active_size: 20 } }\n",
    )
    .unwrap();
    let spec = spec.to_str().unwrap();
    let (ok, stderr, _) = mcgp_in(&dir, &["run", spec], &[]);
    assert!(ok, "{stderr}");
    assert_eq!(computed_count(&stderr), 8);
    let before = cells_without_timing(&dir.join("results/mixed"));
    // KL-MNL's numerics change: its 2 cells and the 2 that take its hyper-parameters are stale.
    let bump = [("MCGP_TEST_BUMP_NUMERICS", "klmnl")];
    let (ok, stdout_err, stdout) = mcgp_in(&dir, &["status", spec], &bump);
    assert!(ok, "{stdout_err}");
    assert!(stdout.contains("8 cells: 4 stored, 0 missing, 4 stale"), "{stdout}");
    assert!(stdout.contains("stale: iris kl split 0: numerics klmnl=4 -> klmnl=4+test-bump"), "{stdout}");
    assert!(stdout.contains("stale: iris lap-from-kl split 1: the spec entry, the split or the source cell changed"), "{stdout}");
    // What their rerun costs: the CPU seconds of the stale records, summed (printed to 0.1 s).
    let stale_cpu: f64 = std::fs::read_dir(dir.join("results/mixed/cells"))
        .unwrap()
        .flatten()
        .map(|e| serde_json::from_slice::<Value>(&std::fs::read(e.path()).unwrap()).unwrap())
        .filter(|c| ["kl", "lap-from-kl"].contains(&c["method"].as_str().unwrap()))
        .map(|c| c["cpu_seconds"].as_f64().unwrap())
        .sum();
    let printed: f64 = stdout
        .split("4 stale (their stored records took ")
        .nth(1)
        .and_then(|t| t.split(" CPU s").next())
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("no stale CPU in {stdout}"));
    assert!(stale_cpu > 0.0 && (printed - stale_cpu).abs() <= 0.051, "printed {printed}, the stale records took {stale_cpu}");
    // A fresh clone holds only the committed archive: the same cells are stale there.
    let fresh = dir.join("fresh");
    std::fs::create_dir_all(fresh.join("results/mixed")).unwrap();
    std::fs::copy(dir.join("results/mixed/cells.jsonl.zst"), fresh.join("results/mixed/cells.jsonl.zst")).unwrap();
    let (ok, stdout_err, stdout) = mcgp_in(&fresh, &["status", spec], &bump);
    assert!(ok, "{stdout_err}");
    assert!(stdout.contains("8 cells: 4 stored, 0 missing, 4 stale"), "archive only: {stdout}");
    // There a laplace bump also has kl computed again first (lap-from-kl needs its handoff
    // vectors, which the archive leaves out), as the run then does; the checkout's cell files
    // keep the vectors, so there nothing is computed again.
    let bump_laplace = [("MCGP_TEST_BUMP_NUMERICS", "laplace")];
    let (ok, stdout_err, stdout) = mcgp_in(&fresh, &["status", spec], &bump_laplace);
    assert!(ok, "{stdout_err}");
    assert!(stdout.contains("8 cells: 4 stored, 0 missing, 4 stale"), "{stdout}");
    assert!(stdout.contains("and 2 stored cells a run computes again first"), "{stdout}");
    let (ok, _, stdout) = mcgp_in(&dir, &["status", spec], &bump_laplace);
    assert!(ok && stdout.contains("4 stale") && !stdout.contains("computes again"), "{stdout}");
    let fresh_run = dir.join("fresh-run");
    std::fs::create_dir_all(fresh_run.join("results/mixed")).unwrap();
    std::fs::copy(dir.join("results/mixed/cells.jsonl.zst"), fresh_run.join("results/mixed/cells.jsonl.zst")).unwrap();
    let (ok, stderr, _) = mcgp_in(&fresh_run, &["run", spec], &bump_laplace);
    assert!(ok && computed_count(&stderr) == 6, "the 4 stale cells and kl's 2: {stderr}");
    let (ok, stderr, _) = mcgp_in(&dir, &["run", spec], &bump);
    assert!(ok, "{stderr}");
    assert_eq!(computed_count(&stderr), 4, "{stderr}");
    let after = cells_without_timing(&dir.join("results/mixed"));
    // The reused cells' records are the same files; the recomputed ones have new keys but the
    // same seeds and numbers (nothing really changed in the code).
    let method_of = |v: &Value| v["method"].as_str().unwrap().to_string();
    // (Records under old keys stay in the folder; `mcgp status` lists them as stale.)
    let mut new: Vec<String> = after.iter().filter(|(k, _)| !before.contains_key(*k)).map(|(_, v)| method_of(v)).collect();
    new.sort();
    assert_eq!(new, ["kl", "kl", "lap-from-kl", "lap-from-kl"]);
    let numbers = |cells: &BTreeMap<String, Value>, m: &str| -> Vec<(Value, Value)> {
        let mut v: Vec<(Value, Value)> =
            cells.values().filter(|c| method_of(c) == m).map(|c| (c["seed"].clone(), c["metrics"].clone())).collect();
        v.sort_by_key(|(s, _)| s.as_u64());
        v
    };
    let recomputed: BTreeMap<String, Value> = after.into_iter().filter(|(k, _)| !before.contains_key(k)).collect();
    assert_eq!(numbers(&before, "kl"), numbers(&recomputed, "kl"));
    assert_eq!(numbers(&before, "lap-from-kl"), numbers(&recomputed, "lap-from-kl"));
}

/// A run that recomputes only part of a spec after a numerics bump (here `--entries lap` on a
/// fresh clone, which holds only the committed archive) rewrites the archive; the records of the
/// cells it did not recompute must stay in it (stale, not missing), or their last results would
/// be lost from the next commit.
#[test]
fn a_partial_run_after_a_bump_keeps_the_stale_records_in_the_archive() {
    let dir = workdir("bump-keeps-stale");
    let spec = dir.join("mixed.yaml");
    std::fs::write(
        &spec,
        "name: mixed\nseed: 3\ndatasets: [iris]\nsplits: { protocol: random, train_fraction: 0.6, repeats: 2 }\nmethods:\n\
         \x20 - { name: lap, method: laplace, settings: { mc_samples: 200 } }\n\
         \x20 - { name: kl, method: klmnl, kernel: { lengthscale: 2.0 } }\n",
    )
    .unwrap();
    let spec = spec.to_str().unwrap();
    let (ok, stderr, _) = mcgp_in(&dir, &["run", spec], &[]);
    assert!(ok, "{stderr}");
    let fresh = dir.join("fresh");
    std::fs::create_dir_all(fresh.join("results/mixed")).unwrap();
    std::fs::copy(dir.join("results/mixed/cells.jsonl.zst"), fresh.join("results/mixed/cells.jsonl.zst")).unwrap();
    let bump = [("MCGP_TEST_BUMP_NUMERICS", "klmnl")];
    let (ok, stderr, _) = mcgp_in(&fresh, &["run", spec, "--entries", "lap"], &bump);
    assert!(ok, "{stderr}");
    assert_eq!(computed_count(&stderr), 0, "the lap cells are current in the archive: {stderr}");
    let (ok, stdout_err, stdout) = mcgp_in(&fresh, &["status", spec], &bump);
    assert!(ok, "{stdout_err}");
    assert!(stdout.contains("4 cells: 2 stored, 0 missing, 2 stale"), "{stdout}");
    // `mcgp report` rewrites the archive too, and keeps them as well.
    let (ok, stderr, _) = mcgp_in(&fresh, &["report", spec], &bump);
    assert!(ok, "{stderr}");
    let (_, _, stdout) = mcgp_in(&fresh, &["status", spec], &bump);
    assert!(stdout.contains("4 cells: 2 stored, 0 missing, 2 stale"), "after report: {stdout}");
}

#[test]
fn edited_data_and_timeouts_are_recomputed() {
    let dir = workdir("identity");
    let data = dir.join("data");
    std::fs::create_dir_all(&data).unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    std::fs::copy(root.join("data/iris.data"), data.join("iris.data")).unwrap();
    std::fs::write(
        data.join("datasets.yaml"),
        "iris: { files: [iris.data], format: csv, header: false, label_column: -1, description: d, citation: c }\n",
    )
    .unwrap();
    let spec = dir.join("small.yaml");
    std::fs::write(&spec, SMALL).unwrap();
    let args = |extra: &[&'static str]| -> Vec<String> {
        let mut a = vec!["run".to_string(), spec.to_str().unwrap().to_string(), "--data".into(), data.to_str().unwrap().to_string()];
        a.extend(extra.iter().map(|s| s.to_string()));
        a
    };
    let run_with = |extra: &[&'static str]| {
        let a = args(extra);
        let refs: Vec<&str> = a.iter().map(String::as_str).collect();
        let (ok, stderr, _) = mcgp_in(&dir, &refs, &[]);
        assert!(ok, "{stderr}");
        computed_count(&stderr)
    };
    assert_eq!(run_with(&[]), 12);
    assert_eq!(run_with(&[]), 0, "nothing changed");
    // One value of one row edited: every cell of the dataset is computed again.
    let text = std::fs::read_to_string(data.join("iris.data")).unwrap().replacen("5.1,3.5,1.4,0.2", "5.2,3.5,1.4,0.2", 1);
    std::fs::write(data.join("iris.data"), text).unwrap();
    assert_eq!(run_with(&[]), 12, "an edited data file gives new keys");

    // A timed-out cell is retried by the next run (it depends on the machine), unless kept.
    let timed = dir.join("timed.yaml");
    std::fs::write(
        &timed,
        SMALL
            .replace("name: small", "name: timed")
            .replace("seed: 7", "seed: 7\ntimeout_seconds: 0.000001")
            .replace("repeats: 3", "repeats: 1"),
    )
    .unwrap();
    let timed = timed.to_str().unwrap();
    let (_, stderr, _) = mcgp_in(&dir, &["run", timed, "--data", data.to_str().unwrap()], &[]);
    let records = cells_without_timing(&dir.join("results/timed"));
    let failed = records.values().filter(|c| c["status"] == "failed").count();
    let timed_out = records.values().filter(|c| c["timed_out"] == true).count();
    assert!(timed_out >= 1 && timed_out == failed, "{timed_out} timed out of {failed} failed: {stderr}");
    let (_, stderr, _) = mcgp_in(&dir, &["run", timed, "--data", data.to_str().unwrap(), "--keep-failed"], &[]);
    assert_eq!(computed_count(&stderr), 0, "--keep-failed keeps them: {stderr}");
    let (_, stderr, _) = mcgp_in(&dir, &["run", timed, "--data", data.to_str().unwrap()], &[]);
    assert_eq!(computed_count(&stderr), failed, "every timed-out cell is retried: {stderr}");
}

#[test]
fn a_checkout_without_cell_files_re_renders_the_report_and_resumes_from_the_archive() {
    let dir = workdir("archive");
    let spec = dir.join("small.yaml");
    std::fs::write(&spec, SMALL).unwrap();
    let spec = spec.to_str().unwrap();
    let (ok, stderr, _) = mcgp_in(&dir, &["run", spec], &[]);
    assert!(ok, "{stderr}");
    let results = dir.join("results/small");
    let page = dir.join("reports/small/index.html");
    let (html, summary) = (std::fs::read(&page).unwrap(), std::fs::read(results.join("summary.csv")).unwrap());
    let archive = std::fs::read(results.join("cells.jsonl.zst")).unwrap();
    // What git holds: no cell files, no split files, no CSV copies of the long tables.
    std::fs::remove_dir_all(results.join("cells")).unwrap();
    std::fs::remove_dir_all(results.join("splits")).unwrap();
    std::fs::remove_file(&page).unwrap();
    let (ok, stderr, _) = mcgp_in(&dir, &["report", spec], &[]);
    assert!(ok, "{stderr}");
    assert!(std::fs::read(&page).unwrap() == html, "the re-rendered report is byte for byte the same");
    assert_eq!(std::fs::read(results.join("summary.csv")).unwrap(), summary);
    assert_eq!(std::fs::read(results.join("cells.jsonl.zst")).unwrap(), archive, "the archive is written deterministically");
    let (ok, stderr, _) = mcgp_in(&dir, &["run", spec], &[]);
    assert!(ok, "{stderr}");
    assert_eq!(computed_count(&stderr), 0, "a run resumes from the archive: {stderr}");
    // A damaged archive stops the run, naming it, and is left as it is: counting it as empty
    // would write an archive without its records (all of them lost on a partial run).
    std::fs::write(results.join("cells.jsonl.zst"), b"not zstd").unwrap();
    let (ok, stderr, _) = mcgp_in(&dir, &["run", spec, "--entries", "fixed"], &[]);
    assert!(!ok && stderr.contains("cells.jsonl.zst: not a zstd archive") && stderr.contains("restore it"), "{stderr}");
    assert_eq!(std::fs::read(results.join("cells.jsonl.zst")).unwrap(), b"not zstd", "the damaged archive is untouched");
    // Moved aside, the cells are computed again.
    std::fs::rename(results.join("cells.jsonl.zst"), dir.join("damaged.zst")).unwrap();
    let (ok, stderr, _) = mcgp_in(&dir, &["run", spec], &[]);
    assert!(ok && computed_count(&stderr) == 12, "{stderr}");
}

/// The archive leaves out handoff vectors; a new cell that takes over from an archived one
/// has that source computed again first, to the same record.
#[test]
fn a_new_dependant_of_an_archived_cell_recomputes_its_source_to_the_same_record() {
    let dir = workdir("archive-source");
    let spec = dir.join("handoff.yaml");
    let base = "\
name: handoff
seed: 5
datasets: [iris]
splits: { protocol: random, train_fraction: 0.6, repeats: 2 }
methods:
  - name: kl
    method: klmnl
    kernel: { lengthscale: 1.0, variance: 1.0 }
    hyper: fixed
";
    std::fs::write(&spec, base).unwrap();
    let spec_s = spec.to_str().unwrap();
    let (ok, stderr, _) = mcgp_in(&dir, &["run", spec_s], &[]);
    assert!(ok, "{stderr}");
    let results = dir.join("results/handoff");
    let first = cells_without_timing(&results);
    assert!(first.values().all(|c| !c["handoff"]["vectors"].as_object().unwrap().is_empty()), "KL-MNL hands off vectors");
    std::fs::remove_dir_all(results.join("cells")).unwrap();
    let dependant = "  - name: mc
    method: mc_mnl
    kernel: { lengthscale: 1.0, variance: 1.0 }
    hyper: { from: kl }
    settings: { n_samples: 2000, n_test_samples: 200 }
";
    std::fs::write(&spec, format!("{base}{dependant}")).unwrap();
    let (ok, stderr, _) = mcgp_in(&dir, &["run", spec_s], &[]);
    assert!(ok, "{stderr}");
    assert_eq!(computed_count(&stderr), 4, "the two sources again, then the two new cells: {stderr}");
    let second = cells_without_timing(&results);
    for (file, cell) in &first {
        let mut again = second[file].clone();
        let mut cell = cell.clone();
        // The commit differs only if the checkout changed between the runs (it does not here).
        again.as_object_mut().unwrap().remove("commit");
        cell.as_object_mut().unwrap().remove("commit");
        assert_eq!(again, cell, "source {file} recomputed to the same record");
    }
}

/// What git holds is enough to re-render every committed report: for each experiment with a
/// committed cell archive, `mcgp report` in a folder holding only the specs, the data and that
/// experiment's committed results writes its report folder byte for byte as committed.
#[test]
fn committed_reports_re_render_byte_for_byte_from_committed_results() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let copy_dir = |from: &Path, to: &Path| {
        std::fs::create_dir_all(to).unwrap();
        for e in std::fs::read_dir(from).unwrap().flatten() {
            if e.path().is_file() {
                std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
            }
        }
    };
    let mut checked = 0;
    let mut experiments: Vec<PathBuf> = std::fs::read_dir(root.join("results")).unwrap().flatten().map(|e| e.path()).collect();
    experiments.sort();
    for results in experiments.into_iter().filter(|p| p.join("cells.jsonl.zst").is_file()) {
        let name = results.file_name().unwrap().to_string_lossy().into_owned();
        let spec = root.join("experiments").join(format!("{name}.yaml"));
        if !spec.is_file() {
            continue;
        }
        let dir = workdir(&format!("fresh-{name}"));
        copy_dir(&root.join("experiments"), &dir.join("experiments"));
        std::fs::create_dir_all(dir.join("results")).unwrap();
        for f in ["cells.jsonl.zst", "manifest.json", "results.parquet", "summary.csv", "traces.parquet"] {
            let (from, to) = (results.join(f), dir.join("results").join(&name));
            std::fs::create_dir_all(&to).unwrap();
            if from.is_file() {
                std::fs::copy(&from, to.join(f)).unwrap();
            }
        }
        let out = mcgp()
            .current_dir(&dir)
            .args(["report", &format!("experiments/{name}.yaml"), "--data"])
            .arg(root.join("data"))
            .output()
            .unwrap();
        assert!(out.status.success(), "{name}: {}", String::from_utf8_lossy(&out.stderr));
        let (committed, rendered) = (root.join("reports").join(&name), dir.join("reports").join(&name));
        for sub in ["", "figures"] {
            let Ok(entries) = std::fs::read_dir(committed.join(sub)) else { continue };
            for e in entries.flatten().filter(|e| e.path().is_file()) {
                let again = std::fs::read(rendered.join(sub).join(e.file_name())).unwrap_or_default();
                assert!(
                    again == std::fs::read(e.path()).unwrap(),
                    "{name}: {} differs when re-rendered from the committed results",
                    e.path().display()
                );
            }
        }
        checked += 1;
    }
    eprintln!("re-rendered {checked} committed reports from their committed results");
    assert!(checked >= 1, "no committed experiment has a cell archive");
}

/// Every file under `dir` that a reader would open parses: cell records, the archive, tables.
fn assert_all_readable(dir: &Path) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        assert!(!name.starts_with(".tmp"), "{}: a temporary file was left behind", path.display());
        if path.is_dir() {
            assert_all_readable(&path);
        } else if name.ends_with(".json") {
            serde_json::from_slice::<Value>(&std::fs::read(&path).unwrap()).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        } else if name.ends_with(".zst") {
            zstd::decode_all(&std::fs::read(&path).unwrap()[..]).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        }
    }
}

#[test]
fn twenty_random_kills_and_resumes_end_with_the_tables_of_an_uninterrupted_run() {
    use rand::{RngExt, SeedableRng};
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let spec = root.join("experiments/ci/gr2006-fig3.yaml");
    let name = "ci-gr2006-fig3";
    let calm = workdir("kills-calm");
    assert!(run(&calm, &spec, &[]).status.success());
    let dir = workdir("kills");
    let cells_dir = dir.join("results").join(name).join("cells");
    let total = cells_without_timing(&calm.join("results").join(name)).len();
    let stored = || {
        std::fs::read_dir(&cells_dir)
            .map_or(0, |d| d.filter(|e| e.as_ref().unwrap().path().extension().is_some_and(|x| x == "json")).count())
    };
    let mut rng = rand_pcg::Pcg64::seed_from_u64(20);
    // (killed while running, cells stored after the kill), per attempt.
    let mut attempts = Vec::new();
    for _ in 0..20 {
        // The whole spec computes in about 0.3 s: a pause of 0.1 s after each stored cell
        // stretches a run well past the kill window (20-400 ms: at most about 8 cells an
        // attempt on 2 threads), so that kills land while cells are still being computed.
        let mut child = mcgp()
            .arg("run")
            .arg(&spec)
            .arg("--results")
            .arg(dir.join("results"))
            .arg("--reports")
            .arg(dir.join("reports"))
            .env("MCGP_TEST_PAUSE_AFTER_CELL_SECONDS", "0.1")
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(rng.random_range(20..400)));
        let running = child.try_wait().unwrap().is_none();
        child.kill().ok(); // SIGKILL
        child.wait().unwrap();
        attempts.push((running, stored()));
        if dir.join("results").exists() {
            // Anything a reader opens after a kill parses (temporaries aside, cleaned by the next run).
            for sub in [dir.join("results").join(name), dir.join("reports").join(name)] {
                if sub.exists() {
                    mcgp::atomic::remove_stale_temporaries(&sub);
                    assert_all_readable(&sub);
                }
            }
        }
    }
    // The kills hit runs under way, and several of them left a partial store that the next
    // attempt resumed (the stored count never falls: no finished cell is lost or recomputed).
    let partial = attempts.iter().filter(|&&(running, n)| running && n > 0 && n < total).count();
    assert!(partial >= 3, "kills with some but not all of {total} cells stored: {attempts:?}");
    assert!(attempts.windows(2).all(|w| w[0].1 <= w[1].1), "{attempts:?}");
    let out = run(&dir, &spec, &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(computed_count(&stderr), total - attempts.last().unwrap().1, "the last run computes only what no attempt stored");
    assert_all_readable(&dir.join("results").join(name));
    assert_all_readable(&dir.join("reports").join(name));
    assert_same_cells(&cells_without_timing(&dir.join("results").join(name)), &cells_without_timing(&calm.join("results").join(name)));
    let table = |d: &Path| -> Vec<String> {
        std::fs::read_to_string(d.join("results").join(name).join("summary.csv"))
            .unwrap()
            .lines()
            .filter(|l| !l.contains(",time_"))
            .map(str::to_string)
            .collect()
    };
    assert_eq!(table(&dir), table(&calm));
}

#[test]
fn a_data_error_fails_that_datasets_cells_and_the_others_run() {
    let dir = workdir("data-error");
    let data = dir.join("data");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::copy(Path::new(env!("CARGO_MANIFEST_DIR")).join("data/iris.data"), data.join("iris.data")).unwrap();
    std::fs::write(data.join("broken.csv"), "1.0,2.0,a\n3.0,x,b\n").unwrap();
    std::fs::write(
        data.join("datasets.yaml"),
        "iris: { files: [iris.data], format: csv, header: false, label_column: -1, description: d, citation: c }\n\
         broken: { files: [broken.csv], format: csv, header: false, label_column: -1, description: d, citation: c }\n",
    )
    .unwrap();
    let spec = dir.join("two.yaml");
    std::fs::write(&spec, SMALL.replace("datasets: [iris]", "datasets: [iris, broken]")).unwrap();
    let (spec, data) = (spec.to_str().unwrap(), data.to_str().unwrap());
    let out = mcgp()
        .args(["run", spec, "--data", data])
        .arg("--results")
        .arg(dir.join("results"))
        .arg("--reports")
        .arg(dir.join("reports"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "some cells failed, the run went on: {stderr}");
    let cells = cells_without_timing(&dir.join("results/small"));
    let (ok, failed): (Vec<&Value>, Vec<&Value>) = cells.values().partition(|c| c["status"] == "ok");
    assert!(ok.len() == 12 && ok.iter().all(|c| c["dataset"] == "iris"), "every iris cell ran");
    assert!(failed.len() == 12 && failed.iter().all(|c| c["dataset"] == "broken"));
    let msg = failed[0]["error"].as_str().unwrap();
    assert!(msg.contains("broken.csv:2") && msg.contains("dataset broken"), "{msg}");
    // check still refuses the spec, naming the file.
    let out = mcgp().args(["check", spec, "--data", data]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("broken.csv:2"));
    // A checkout without cell files whose iris file is unreadable for a while: the iris cells
    // fail, and the archive keeps their computed records, so that with the file back nothing
    // is computed again (the failures had made the archive drop them).
    std::fs::remove_dir_all(dir.join("results/small/cells")).unwrap();
    let iris = std::fs::read(Path::new(data).join("iris.data")).unwrap();
    std::fs::write(Path::new(data).join("iris.data"), "1.0,2.0,a\n3.0,x,b\n").unwrap();
    let (_, stderr, _) = mcgp_in(&dir, &["run", spec, "--data", data], &[]);
    assert_eq!(computed_count(&stderr), 12, "the iris cells fail on their unreadable file: {stderr}");
    std::fs::remove_dir_all(dir.join("results/small/cells")).unwrap();
    std::fs::write(Path::new(data).join("iris.data"), iris).unwrap();
    let (_, stderr, _) = mcgp_in(&dir, &["run", spec, "--data", data], &[]);
    assert_eq!(computed_count(&stderr), 0, "the iris records survived the failed run: {stderr}");
}

/// A cell that failed only because its source failed is computed again once the source has
/// been: a retry of the source alone (`--retry-failed --entries`) must not leave its dependants
/// failed for good, since their own fits never ran.
#[test]
fn dependants_of_a_failed_source_are_computed_once_the_source_is() {
    let dir = workdir("source-retried");
    let spec = dir.join("small.yaml");
    std::fs::write(&spec, SMALL.replace("repeats: 3", "repeats: 1")).unwrap();
    let spec = spec.to_str().unwrap();
    let (ok, stderr, _) = mcgp_in(&dir, &["run", spec], &[("MCGP_TEST_FAIL_ENTRY", "learned")]);
    assert!(!ok && computed_count(&stderr) == 4, "{stderr}");
    let failed = |cells: &BTreeMap<String, Value>| -> Vec<String> {
        let mut v: Vec<String> =
            cells.values().filter(|c| c["status"] == "failed").map(|c| c["method"].as_str().unwrap().to_string()).collect();
        v.sort();
        v
    };
    let cells = cells_without_timing(&dir.join("results/small"));
    assert_eq!(failed(&cells), ["handed", "handed-on", "learned"]);
    assert!(cells.values().filter(|c| c["method"] == "handed").all(|c| c["source_failed"] == true));
    assert!(cells.values().filter(|c| c["method"] == "learned").all(|c| c.get("source_failed").is_none()));
    // The source alone is retried; its dependants are not named, so not computed yet.
    let (ok, stderr, _) = mcgp_in(&dir, &["run", spec, "--retry-failed", "--entries", "learned"], &[]);
    assert!(ok && computed_count(&stderr) == 1, "{stderr}");
    // A plain run computes the two dependants (it kept their failures before).
    let (ok, stderr, _) = mcgp_in(&dir, &["run", spec], &[]);
    assert!(ok, "{stderr}");
    assert_eq!(computed_count(&stderr), 2, "{stderr}");
    let (ok, stderr, _) = mcgp_in(&dir, &["run", spec], &[]);
    assert!(ok && computed_count(&stderr) == 0, "{stderr}");
    // A dependant's own failure (not its source's) is kept as before (--recompute computes
    // the chain up to it again).
    let (ok, stderr, _) = mcgp_in(&dir, &["run", spec, "--recompute", "--entries", "handed-on"], &[("MCGP_TEST_FAIL_ENTRY", "handed-on")]);
    assert!(!ok && computed_count(&stderr) == 3, "{stderr}");
    let (_, stderr, _) = mcgp_in(&dir, &["run", spec], &[]);
    assert_eq!(computed_count(&stderr), 0, "{stderr}");
}

#[test]
fn concurrent_runs_of_two_specs_sharing_a_results_folder_store_every_cell_once() {
    let dir = workdir("two-specs");
    let (a, b) = (dir.join("a.yaml"), dir.join("b.yaml"));
    std::fs::write(&a, SMALL.replace("name: small", "name: first")).unwrap();
    // The second shares `fixed` and `learned` (same seed and splits) and adds nothing else.
    let shared: String = SMALL.lines().take_while(|l| !l.starts_with("  - name: handed")).map(|l| format!("{l}\n")).collect();
    std::fs::write(&b, shared.replace("name: small", "name: second")).unwrap();
    let start = |spec: &Path| {
        mcgp()
            .arg("run")
            .arg(spec)
            .arg("--results")
            .arg(dir.join("results"))
            .arg("--reports")
            .arg(dir.join("reports"))
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (pa, pb) = (start(&a), start(&b));
    for out in [pa.wait_with_output().unwrap(), pb.wait_with_output().unwrap()] {
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    let first = cells_without_timing(&dir.join("results/first"));
    let second = cells_without_timing(&dir.join("results/second"));
    assert_eq!((first.len(), second.len()), (12, 6), "each experiment stores each of its cells once");
    // Shared cells are the same computation whichever run stored it first.
    let strip = |v: &Value| {
        let mut v = v.clone();
        let o = v.as_object_mut().unwrap();
        o.remove("experiment");
        o["diagnostics"].as_object_mut().unwrap().remove("reused_from");
        v
    };
    for (k, v) in &second {
        assert_eq!(strip(v), strip(&first[k]), "cell {k}");
    }
    let alone = workdir("two-specs-alone");
    std::fs::write(alone.join("b.yaml"), shared.replace("name: small", "name: second")).unwrap();
    assert!(run(&alone, &alone.join("b.yaml"), &[]).status.success());
    let table = |d: &Path| -> Vec<String> {
        std::fs::read_to_string(d.join("results/second/summary.csv"))
            .unwrap()
            .lines()
            .filter(|l| !l.contains(",time_"))
            .map(str::to_string)
            .collect()
    };
    assert_eq!(table(&dir), table(&alone));
}

/// Grid points that are one computation (a repeated value, or `dataset_settings` overriding
/// the gridded key) are refused before anything runs, naming the entry and the settings.
#[test]
fn two_cells_that_are_one_computation_are_refused() {
    let dir = workdir("duplicate-cells");
    let base = "name: dup\nseed: 3\ndatasets: [iris]\nsplits: { protocol: random, train_fraction: 0.6, repeats: 2 }\nmethods:\n";
    for (entry, expected) in [
        (
            "  - { name: lap, method: laplace, grid: { kernel.variance: [0.5, 0.5] } }\n",
            ["methods entry \"lap\"", "the same computation on dataset iris split 0", "kernel.variance=0.5"],
        ),
        // (The spec check names this one first: an override of a gridded key.)
        (
            "  - { name: lap, method: laplace, grid: { settings.mc_samples: [100, 200] }, dataset_settings: { iris: { mc_samples: 50 } } }\n",
            ["methods[0].dataset_settings.iris.mc_samples", "overrides the grid key settings.mc_samples", "dup.yaml:6:"],
        ),
    ] {
        let spec = dir.join("dup.yaml");
        std::fs::write(&spec, format!("{base}{entry}")).unwrap();
        for command in ["check", "run"] {
            let (ok, stderr, _) = mcgp_in(&dir, &[command, spec.to_str().unwrap()], &[]);
            assert!(!ok, "{command} must refuse: {stderr}");
            assert!(expected.iter().all(|e| stderr.contains(e)), "{stderr}");
        }
        assert!(!dir.join("results/dup/cells").exists(), "nothing was computed");
    }
}

/// A fixed value turned into a grid that includes it: the stored cells are the same
/// computation, reused, and now carry the grid's label (the table column they belong in).
/// And the report of a spec whose cells were recomputed under new keys (shards after a numerics
/// bump, no run collecting them) describes the cells stored now, not the run before.
#[test]
fn reused_cells_take_the_grid_label_and_the_manifest_follows_recomputed_cells() {
    let dir = workdir("relabel");
    let spec = dir.join("relabel.yaml");
    let head = "name: relabel\nseed: 3\ndatasets: [iris]\nsplits: { protocol: random, train_fraction: 0.6, repeats: 2 }\nmethods:\n";
    std::fs::write(&spec, format!("{head}  - {{ name: lap, method: laplace, kernel: {{ variance: 0.5 }} }}\n")).unwrap();
    let spec = spec.to_str().unwrap();
    let (ok, stderr, _) = mcgp_in(&dir, &["run", spec], &[]);
    assert!(ok, "{stderr}");
    assert_eq!(computed_count(&stderr), 2);
    std::fs::write(spec, format!("{head}  - {{ name: lap, method: laplace, grid: {{ kernel.variance: [0.5, 1.0] }} }}\n")).unwrap();
    let (ok, stderr, _) = mcgp_in(&dir, &["run", spec], &[]);
    assert!(ok, "{stderr}");
    assert_eq!(computed_count(&stderr), 2, "only the variance-1.0 cells are new: {stderr}");
    let cells = cells_without_timing(&dir.join("results/relabel"));
    let mut settings: Vec<&str> = cells.values().map(|c| c["setting"].as_str().unwrap()).collect();
    settings.sort();
    assert_eq!(settings, ["kernel.variance=0.5", "kernel.variance=0.5", "kernel.variance=1.0", "kernel.variance=1.0"]);
    let csv = std::fs::read_to_string(dir.join("results/relabel/results.csv")).unwrap();
    assert!(!csv.lines().skip(1).any(|l| l.contains(",lap,,")), "no row without the grid label:\n{csv}");

    // A shard recomputes every cell under new keys; `mcgp report` collects them.
    let cpu_sum = |dir: &Path| -> f64 {
        let mut records: Vec<(String, f64)> = std::fs::read_dir(dir.join("results/relabel/cells"))
            .unwrap()
            .map(|e| {
                let v: Value = serde_json::from_slice(&std::fs::read(e.unwrap().path()).unwrap()).unwrap();
                (v["key"].as_str().unwrap().to_string(), v["cpu_seconds"].as_f64().unwrap())
            })
            .collect();
        records.sort_by(|a, b| a.0.cmp(&b.0));
        records.iter().map(|r| r.1).sum()
    };
    let before = manifest(&dir.join("results/relabel"));
    let bump = [("MCGP_TEST_BUMP_NUMERICS", "laplace")];
    let (ok, stderr, _) = mcgp_in(&dir, &["run", spec, "--shard", "0/1"], &bump);
    assert!(ok, "{stderr}");
    assert_eq!(computed_count(&stderr), 4, "{stderr}");
    let (ok, stderr, _) = mcgp_in(&dir, &["report", spec], &bump);
    assert!(ok, "{stderr}");
    let after = manifest(&dir.join("results/relabel"));
    let total = cpu_sum(&dir) - before["cpu_seconds"].as_f64().unwrap();
    assert!(
        (after["cpu_seconds"].as_f64().unwrap() - total).abs() <= 1e-9 * total.max(1.0),
        "the manifest must describe the recomputed cells: {} against {total} (the earlier run's {})",
        after["cpu_seconds"],
        before["cpu_seconds"]
    );
    assert_ne!(after["cpu_seconds"], before["cpu_seconds"]);
    // Re-rendered without a change, it is kept as it is.
    let (ok, stderr, _) = mcgp_in(&dir, &["report", spec], &bump);
    assert!(ok, "{stderr}");
    assert_eq!(manifest(&dir.join("results/relabel")), after);
}

/// A data folder outside the checkout (`--data /mnt/datasets`) does not cost the results their
/// provenance: the commit is the checkout's the run starts in, not that of the data's parent.
#[test]
fn a_data_folder_elsewhere_keeps_the_checkouts_commit() {
    let dir = workdir("data-elsewhere");
    let data = dir.join("datasets");
    std::fs::create_dir_all(&data).unwrap();
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    for f in ["datasets.yaml", "iris.data", "wine.data"] {
        std::fs::copy(here.join("data").join(f), data.join(f)).unwrap();
    }
    let head = Command::new("git").arg("-C").arg(here).args(["rev-parse", "HEAD"]).output();
    let Some(head) = head.ok().filter(|o| o.status.success()).map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string()) else {
        eprintln!("not a git checkout: nothing to compare");
        return;
    };
    // Run from the checkout (cargo runs integration tests in the package root).
    let spec = here.join("experiments/quickstart.yaml");
    let (ok, stderr, _) = mcgp_in(&dir, &["run", spec.to_str().unwrap(), "--data", data.to_str().unwrap()], &[]);
    assert!(ok, "{stderr}");
    let m = manifest(&dir.join("results/quickstart"));
    assert_eq!(m["git_commit"].as_str(), Some(head.as_str()), "{m}");
}

/// Before any run has written a manifest (shards only, or an interrupted first run), the
/// experiment folder still belongs to the spec file that ran first.
#[test]
fn a_spec_with_the_same_name_is_refused_before_the_first_manifest() {
    let dir = workdir("owner-before-manifest");
    let spec = dir.join("small.yaml");
    std::fs::write(&spec, SMALL).unwrap();
    let shard = |spec: &Path, which: &str| {
        let mut cmd = mcgp();
        cmd.arg("run").arg(spec).arg("--shard").arg(which);
        cmd.arg("--results").arg(dir.join("results")).arg("--reports").arg(dir.join("reports"));
        cmd.output().expect("mcgp runs")
    };
    assert!(shard(&spec, "0/2").status.success());
    assert!(!dir.join("results/small/manifest.json").exists(), "a shard writes no manifest");
    let twin = dir.join("twin.yaml");
    std::fs::write(&twin, SMALL.replace("seed: 7", "seed: 8")).unwrap();
    let out = shard(&twin, "1/2");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("small.yaml") && stderr.contains("twin.yaml") && stderr.contains("another `name:`"), "{stderr}");
    // The owner itself goes on.
    assert!(shard(&spec, "1/2").status.success());
}

/// The run's summary line gives the CPU seconds of the cells it computed, not of every stored
/// cell: a run that finds everything stored computed for none.
#[test]
fn the_summary_line_counts_the_cpu_of_this_run_only() {
    let dir = workdir("summary-cpu");
    let spec = dir.join("small.yaml");
    std::fs::write(&spec, SMALL).unwrap();
    let first = run(&dir, &spec, &[]);
    assert!(first.status.success());
    let again = run(&dir, &spec, &[]);
    let stderr = String::from_utf8_lossy(&again.stderr);
    let line = stderr.lines().find(|l| l.contains(" computed, ")).unwrap_or_else(|| panic!("{stderr}"));
    assert!(line.starts_with("12 cells: 0 computed, 12 stored") && line.contains(" 0.0 s CPU computing ("), "{line}");
    let first = String::from_utf8_lossy(&first.stderr);
    let line = first.lines().find(|l| l.contains(" computed, ")).unwrap_or_else(|| panic!("{first}"));
    assert!(line.starts_with("12 cells: 12 computed") && !line.contains(" 0.0 s CPU computing"), "{line}");
}

/// `mcgp status` on several specs sums what recomputing their stale cells costs, a cell they
/// share (the same key in both experiments' stores) counted once.
#[test]
fn status_of_several_specs_counts_a_shared_stale_cell_once() {
    let dir = workdir("status-several");
    let text = "name: NAME\nseed: 3\ndatasets: [iris]\nsplits: { protocol: random, train_fraction: 0.6, repeats: 2 }\nmethods:\n\
                \x20 - { name: kl, method: klmnl, kernel: { lengthscale: 2.0 } }\n";
    let (a, b) = (dir.join("a.yaml"), dir.join("b.yaml"));
    std::fs::write(&a, text.replace("NAME", "first")).unwrap();
    std::fs::write(&b, text.replace("NAME", "second")).unwrap();
    let (a, b) = (a.to_str().unwrap(), b.to_str().unwrap());
    for spec in [a, b] {
        let (ok, stderr, _) = mcgp_in(&dir, &["run", spec], &[]);
        assert!(ok, "{stderr}");
    }
    let (ok, stderr, stdout) = mcgp_in(&dir, &["status", a, b], &[("MCGP_TEST_BUMP_NUMERICS", "klmnl")]);
    assert!(ok, "{stderr}");
    let number_after = |text: &str, lead: &str| -> Vec<f64> {
        text.split(lead).skip(1).filter_map(|t| t.split(" CPU s").next().and_then(|n| n.parse().ok())).collect()
    };
    let per_spec = number_after(&stdout, "2 stale (their stored records took ");
    let total = number_after(
        &stdout,
        "2 specs: 2 distinct cells to compute again (stale, or sources archived without their handoff vectors), whose stored records took ",
    );
    assert!(per_spec.len() == 2 && per_spec[0] > 0.0 && per_spec[0] == per_spec[1], "{stdout}");
    assert!(total.len() == 1 && (total[0] - per_spec[0]).abs() <= 0.051, "the shared cells once: {stdout}");
}
