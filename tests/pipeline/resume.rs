//! Interrupted runs and bare checkouts: a killed run resumes without recomputing and ends with an uninterrupted run's tables, damaged records do not block it, and what git holds re-renders every report and resumes from the archive.
use super::*;

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

/// Ctrl-C (SIGINT) ends a run with status 130 and one line saying that the finished cells are
/// stored, and the same run again completes the rest.
#[test]
fn an_interrupted_run_says_what_it_kept_and_resumes() {
    let work = workdir("sigint");
    let spec = work.join("small.yaml");
    std::fs::write(&spec, SMALL).unwrap();
    let mut cmd = mcgp();
    cmd.arg("run").arg(&spec).arg("--results").arg(work.join("results")).arg("--reports").arg(work.join("reports"));
    cmd.env("MCGP_TEST_PAUSE_AFTER_CELL_SECONDS", "0.3").stderr(std::process::Stdio::piped());
    let child = cmd.spawn().unwrap();
    let cells = work.join("results").join("small").join("cells");
    let t0 = std::time::Instant::now();
    while std::fs::read_dir(&cells).map_or(0, |d| d.count()) == 0 {
        assert!(t0.elapsed().as_secs() < 60, "no cell stored within a minute");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let killed = std::process::Command::new("kill").arg("-INT").arg(child.id().to_string()).status().unwrap();
    assert!(killed.success());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    assert!(stderr.contains("interrupted: the cells finished so far are stored"), "{stderr}");
    let out = run(&work, &spec, &[]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}
