//! Failures: a failing cell or data set is recorded while the run goes on, dependants follow their source once it is computed, edited data and timeouts are recomputed, and specs that would store one computation twice are refused before anything runs.
use super::*;

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
    // A copy of the same text (a spec moved by copying) is told how to hand the results over.
    let copy = dir.join("copy.yaml");
    std::fs::write(&copy, SMALL).unwrap();
    let out = shard(&copy, "1/2");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("the two files are the same text: delete") && stderr.contains("to hand its results to"), "{stderr}");
    // The owner itself goes on.
    assert!(shard(&spec, "1/2").status.success());
}

/// A report folder that cannot be created stops the run before its first cell (not after
/// hours of them), naming the folder and the option; a results folder likewise, and each
/// message carries its OS cause once.
#[test]
fn an_unwritable_report_or_results_folder_stops_the_run_before_any_cell() {
    let work = workdir("unwritable-folders");
    let spec = work.join("small.yaml");
    std::fs::write(&spec, SMALL).unwrap();
    let file = work.join("a-file");
    std::fs::write(&file, "not a folder").unwrap();
    let out = mcgp()
        .arg("run")
        .arg(&spec)
        .arg("--results")
        .arg(work.join("results"))
        .arg("--reports")
        .arg(file.join("reports"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    let folder = file.join("reports").join("small");
    assert!(
        stderr.contains(&format!("cannot create the report folder {}", folder.display())) && stderr.contains("nothing was computed"),
        "{stderr}"
    );
    let cells = work.join("results").join("small").join("cells");
    assert!(std::fs::read_dir(&cells).map_or(true, |mut d| d.next().is_none()), "cells were computed: {stderr}");
    let out = mcgp()
        .arg("run")
        .arg(&spec)
        .arg("--results")
        .arg(file.join("results"))
        .arg("--reports")
        .arg(work.join("reports"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    let line = stderr.lines().find(|l| l.starts_with("error:")).unwrap_or_default();
    assert!(line.contains("cannot create the results folder") && line.contains("--results DIR"), "{stderr}");
    let cause = line.rsplit(": ").next().unwrap();
    assert_eq!(line.matches(cause).count(), 1, "the cause is repeated: {line}");
}
