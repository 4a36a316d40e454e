//! `mcgp run --shard I/N` and `mcgp slurm` without a cluster: shards run one after another
//! into one results folder give, once collected, the tables of a plain run; bad shard syntax is
//! a usage error; the sbatch scripts say what they should. (scripts/slurm-test.sh runs the same
//! through a real SLURM scheduler.)
use std::path::{Path, PathBuf};
use std::process::Command;

fn mcgp() -> Command {
    Command::new(env!("CARGO_BIN_EXE_mcgp"))
}

fn workdir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("mcgp-test-shard-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Run `mcgp` in `dir`'s results and reports folders; (exit code, stderr, stdout).
fn mcgp_at(dir: &Path, args: &[&str]) -> (Option<i32>, String, String) {
    let mut cmd = mcgp();
    cmd.args(args).arg("--results").arg(dir.join("results"));
    if args[0] != "status" {
        cmd.arg("--reports").arg(dir.join("reports"));
    }
    let out = cmd.output().expect("mcgp runs");
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned(), String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The tables a run writes, without timing rows (summary, results) and the trace time column.
fn tables(results: &Path) -> Vec<String> {
    let read = |f: &str| std::fs::read_to_string(results.join(f)).unwrap_or_else(|e| panic!("{f}: {e}"));
    let mut out: Vec<String> = Vec::new();
    for f in ["summary.csv", "results.csv"] {
        out.extend(read(f).lines().filter(|l| !l.contains(",time_")).map(|l| format!("{f}: {l}")));
    }
    for l in read("traces.csv").lines() {
        let cols: Vec<&str> = l.split(',').collect();
        out.push(format!("traces.csv: {} {}", cols[..7].join(","), cols[8..].join(",")));
    }
    out
}

fn computed(stderr: &str) -> usize {
    let line = stderr.lines().find(|l| l.contains(" computed, ")).unwrap_or_else(|| panic!("{stderr}"));
    line.split(" cells: ").nth(1).unwrap().split(' ').next().unwrap().parse().unwrap()
}

#[test]
fn shards_one_after_another_then_a_report_give_the_tables_of_a_plain_run() {
    // Chains: mf-mnp -> kl-mnl-mf -> {mc-mnp-mf, kl-mnl-mf-eq24, mc-mnl-mf}, kl-mnl-kl -> ...
    let spec = root().join("experiments/ci/chai2012-table3.yaml");
    let spec = spec.to_str().unwrap();
    let exp = "chai2012-table3-ci";
    let plain = workdir("plain");
    let (code, stderr, _) = mcgp_at(&plain, &["run", spec]);
    assert_eq!(code, Some(0), "{stderr}");
    let total = computed(&stderr);
    assert_eq!(total, 16);

    let sharded = workdir("sharded");
    let mut sum = 0;
    for i in 0..3 {
        let (code, stderr, _) = mcgp_at(&sharded, &["run", spec, "--shard", &format!("{i}/3")]);
        assert_eq!(code, Some(0), "{stderr}");
        assert!(stderr.contains(&format!("shard {i}/3: ")), "{stderr}");
        sum += computed(&stderr);
        // A shard renders nothing and writes no tables.
        let dir = sharded.join("results").join(exp);
        assert!(!dir.join("summary.csv").exists() && !dir.join("manifest.json").exists() && !sharded.join("reports").join(exp).exists());
    }
    assert_eq!(sum, total, "every cell computed by exactly one shard");
    // A shard run again computes nothing.
    let (code, stderr, _) = mcgp_at(&sharded, &["run", spec, "--shard", "1/3"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(computed(&stderr), 0, "{stderr}");
    let (code, stdout_err, stdout) = mcgp_at(&sharded, &["status", spec]);
    assert_eq!(code, Some(0), "{stdout_err}");
    assert!(stdout.contains("16 cells: 16 stored, 0 missing, 0 stale"), "{stdout}");
    assert!(
        stdout.lines().any(|l| l.split_whitespace().collect::<Vec<_>>() == ["mc-mnl-kl/wine", "1", "0", "0", "0", "0.0", "0"]),
        "{stdout}"
    );

    let (code, stderr, _) = mcgp_at(&sharded, &["report", spec]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(sharded.join("reports").join(exp).join("index.html").exists());
    assert_eq!(tables(&plain.join("results").join(exp)), tables(&sharded.join("results").join(exp)));
    // `mcgp run` without a shard collects too, computing nothing.
    let (code, stderr, _) = mcgp_at(&sharded, &["run", spec]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(computed(&stderr), 0, "{stderr}");
    assert_eq!(tables(&plain.join("results").join(exp)), tables(&sharded.join("results").join(exp)));
}

#[test]
fn a_shard_missing_is_reported_per_entry_and_dataset() {
    let spec = root().join("experiments/ci/chai2012-table4.yaml");
    let spec = spec.to_str().unwrap();
    let dir = workdir("status");
    let (code, stderr, _) = mcgp_at(&dir, &["run", spec, "--shard", "0/2"]);
    assert_eq!(code, Some(0), "{stderr}");
    let done = computed(&stderr);
    let (code, _, stdout) = mcgp_at(&dir, &["status", spec]);
    assert_eq!(code, Some(0));
    // 5 method entries (KL-MNL and the four SVMs) x 2 data sets x 1 split.
    let total = 10;
    assert!(stdout.contains(&format!("{total} cells: {done} stored, {} missing", total - done)), "{stdout}");
    let rows: Vec<Vec<&str>> =
        stdout.lines().filter(|l| l.contains("/iris") || l.contains("/wine")).map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(rows.len(), total, "{stdout}");
    let stored: usize = rows.iter().map(|r| r[1].parse::<usize>().unwrap()).sum();
    let missing: usize = rows.iter().map(|r| r[3].parse::<usize>().unwrap()).sum();
    assert_eq!((stored, missing), (done, total - done), "{stdout}");
}

#[test]
fn bad_shard_syntax_is_a_usage_error() {
    let spec = root().join("experiments/ci/chai2012-table4.yaml");
    let dir = workdir("syntax");
    for bad in ["3/2", "0/0", "a/b", "2", "-1/2"] {
        let (code, stderr, _) = mcgp_at(&dir, &["run", spec.to_str().unwrap(), &format!("--shard={bad}")]);
        assert_eq!(code, Some(2), "{bad}: {stderr}");
        assert!(stderr.contains("--shard") && stderr.contains(bad), "{bad}: {stderr}");
    }
    assert!(!dir.join("results/chai2012-table4-ci/cells").exists(), "nothing computed");
    // A plan needs a shard.
    let (code, stderr, _) = mcgp_at(&dir, &["run", spec.to_str().unwrap(), "--shard-plan", "x.json"]);
    assert_eq!(code, Some(2), "{stderr}");
}

#[test]
fn slurm_writes_an_array_a_dependent_collection_job_and_a_plan_shards_follow() {
    let spec = root().join("experiments/ci/chai2012-table3.yaml");
    let spec = spec.to_str().unwrap();
    let exp = "chai2012-table3-ci";
    let dir = workdir("slurm");
    let args = ["slurm", spec, "--shards", "3", "--cpus-per-task", "2", "--time", "1:30:00", "--partition", "short"];
    let (code, stderr, stdout) = mcgp_at(&dir, &args);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.contains("16 cells in 3 shards") && stdout.contains("(0 cells timed by a previous run)"), "{stdout}");
    let slurm = dir.join("results").join(exp).join("slurm");
    let array = std::fs::read_to_string(slurm.join("array.sbatch")).unwrap();
    for line in [
        "#SBATCH --array=0-2\n",
        "#SBATCH --cpus-per-task=2\n",
        "#SBATCH --time=1:30:00\n",
        "#SBATCH --partition=short\n",
        "--shard \"$SLURM_ARRAY_TASK_ID/3\" --shard-plan ",
        "--threads \"${SLURM_CPUS_PER_TASK:-1}\"",
    ] {
        assert!(array.contains(line), "array.sbatch lacks {line:?}:\n{array}");
    }
    assert!(array.starts_with("#!/bin/bash\n") && array.contains(" run '") && array.contains(&format!("'{spec}'")), "{array}");
    let collect = std::fs::read_to_string(slurm.join("collect.sbatch")).unwrap();
    assert!(
        collect.contains(" report --wait '") && !collect.contains("--array") && collect.contains("#SBATCH --time=1:30:00\n"),
        "{collect}"
    );
    let submit = std::fs::read_to_string(slurm.join("submit.sh")).unwrap();
    assert!(submit.contains("sbatch --parsable") && submit.contains("--dependency=afterany:$array"), "{submit}");
    // The plan the array reads, named by its content.
    let plans = |dir: &std::path::Path| -> Vec<std::path::PathBuf> {
        let mut p: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.file_name().unwrap().to_str().unwrap().starts_with("shard-plan-"))
            .collect();
        p.sort();
        p
    };
    let plan_path = plans(&slurm).pop().expect("a shard plan");
    assert!(array.contains(&format!("--shard-plan '{}'", plan_path.display())), "{array}");
    let plan: serde_json::Value = serde_json::from_slice(&std::fs::read(&plan_path).unwrap()).unwrap();
    assert_eq!(plan["shards"], 3);
    // 4 chains (5, 5, 3, 3 cells at 1 s each while nothing is timed) over 3 shards: 6, 5, 5.
    let mut est: Vec<f64> = plan["estimated_seconds"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
    est.sort_by(f64::total_cmp);
    assert_eq!(est, [5.0, 5.0, 6.0]);

    // The shards as the array would run them, with the plan: every cell once, sizes as planned.
    let mut counts = Vec::new();
    for i in 0..3 {
        let (code, stderr, _) = mcgp_at(&dir, &["run", spec, "--shard", &format!("{i}/3"), "--shard-plan", plan_path.to_str().unwrap()]);
        assert_eq!(code, Some(0), "{stderr}");
        counts.push(computed(&stderr));
    }
    counts.sort();
    assert_eq!(counts, [5, 5, 6]);
    // A plan for another number of shards is refused.
    let (code, stderr, _) = mcgp_at(&dir, &["run", spec, "--shard", "0/2", "--shard-plan", plan_path.to_str().unwrap()]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("plan is for 3 shards"), "{stderr}");

    // With stored cells, the plan uses their times: a new plan beside the first, which an array
    // still running goes on reading.
    let (code, stderr, stdout) = mcgp_at(&dir, &args);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.contains("(16 cells timed by a previous run)"), "{stdout}");
    let now = plans(&slurm);
    assert!(now.len() == 2 && now.contains(&plan_path), "{now:?}");
    let array = std::fs::read_to_string(slurm.join("array.sbatch")).unwrap();
    let newest = now.iter().find(|p| array.contains(&format!("--shard-plan '{}'", p.display()))).expect("the new array's plan");
    assert_ne!(newest, &plan_path, "the timed plan differs from the untimed one");
    let first: serde_json::Value = serde_json::from_slice(&std::fs::read(&plan_path).unwrap()).unwrap();
    assert_eq!(first, plan, "the first plan is left as it was");
}
