//! Runs end to end: bit for bit across thread counts and cell order, every reduced paper spec clean, hyper-parameters handed on as written, checkpoints off the clock, and what `check`, `list`, `status` and the summary line print.
use super::*;

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
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.lines().any(|l| l.starts_with("warning:")), "{}: {stderr}", spec.display());
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

/// A figure's or table's metric that none of the finished cells it shows reports (a misspelt
/// name, which a spec check cannot know: methods report their own metrics) is named on stderr
/// with the closest name they do report; the run still succeeds.
#[test]
fn a_metric_no_cell_reports_is_named_with_the_closest_one() {
    let work = workdir("unreported-metric");
    let spec = work.join("small.yaml");
    std::fs::write(&spec, SMALL.replace("kind: errorbar, metric: error_pct", "kind: errorbar, metric: eror_pct")).unwrap();
    let out = run(&work, &spec, &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let warnings: Vec<&str> = stderr.lines().filter(|l| l.starts_with("warning:")).collect();
    assert_eq!(warnings.len(), 1, "{stderr}");
    assert!(
        warnings[0].ends_with(
            "figure `fig-err`: metric `eror_pct` is reported by none of the 12 finished cells it shows (did you mean `error_pct`?)"
        ),
        "{stderr}"
    );
}
