//! Runs side by side: concurrent runs of one experiment, or of two specs sharing a results folder, store each cell once, and a report during a run renders a snapshot without waiting.
use super::*;

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
