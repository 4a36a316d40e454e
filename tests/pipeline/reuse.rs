//! The honest cache: a stored cell is reused wherever its key matches, partial runs (`--datasets`, `--entries`) complete later, and a numerics bump recomputes exactly the cells it moves while the archive keeps the stale records.
use super::*;

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
