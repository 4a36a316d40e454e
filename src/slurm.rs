//! `mcgp slurm`: run a spec on a SLURM cluster as a job array over a shared results folder.
//!
//! The cluster's own scheduler does the distribution (queueing, nodes, time limits,
//! resubmission); mcgp only writes the scripts: an array with one task per shard
//! (`mcgp run SPEC --shard $SLURM_ARRAY_TASK_ID/N`), a collection job that renders the report
//! once the array has ended (`afterany`, so a partial report still appears when a task died),
//! and the shard plan that both read. Every cell is stored atomically by the task that computes
//! it, so a task killed by a time limit or a node failure leaves complete cells only, and
//! submitting the array again computes just what is missing.
use crate::data::Registry;
use crate::results::Store;
use crate::runner::shard::{balanced_plan, estimate_costs};
use crate::runner::{prepare, ShardPlan};
use crate::spec::Spec;
use std::path::{Path, PathBuf};

/// What `mcgp slurm` was asked for, with every path absolute (the jobs run elsewhere, from
/// another working directory).
#[derive(Clone, Debug)]
pub struct SlurmOptions {
    pub shards: usize,
    /// `--time` of each array task (SLURM's syntax, e.g. `2:00:00`), if given.
    pub time: Option<String>,
    pub cpus_per_task: usize,
    pub partition: Option<String>,
    /// The `mcgp` binary the jobs run (this one).
    pub binary: PathBuf,
    pub project_root: PathBuf,
    pub spec_path: PathBuf,
    pub results_root: PathBuf,
    pub reports_root: PathBuf,
    pub data_dir: PathBuf,
}

/// The files `mcgp slurm` wrote.
#[derive(Clone, Debug)]
pub struct SlurmFiles {
    pub dir: PathBuf,
    pub array: PathBuf,
    pub collect: PathBuf,
    pub submit: PathBuf,
    pub plan: PathBuf,
    /// Stored cells whose time the plan used, of all cells.
    pub timed_cells: usize,
    pub cells: usize,
    pub plan_value: ShardPlan,
}

/// Quote for a POSIX shell.
fn sh(p: &Path) -> String {
    format!("'{}'", p.display().to_string().replace('\'', r"'\''"))
}

/// The value of an `#SBATCH --output` directive for the file `pattern` in `dir`: sbatch splits
/// a directive at blanks and ends it at `#` unless quoted, and expands `%` patterns in the file
/// name, so the folder is double-quoted (its `"` and `\` escaped) with its `%` doubled, and
/// `pattern` (SLURM's `%a`, `%A`, `%j`) follows as SLURM should expand it.
pub(crate) fn sbatch_output(dir: &Path, pattern: &str) -> String {
    let folder = dir.display().to_string().replace('\\', "\\\\").replace('"', "\\\"").replace('%', "%%");
    format!("\"{folder}/{pattern}\"")
}

/// Write the shard plan, the array script, the collection script and a `submit.sh` that submits
/// both (the collection job depending on the array) into `<results>/<experiment>/slurm/`.
pub fn write_scripts(spec: &Spec, registry: &Registry, opts: &SlurmOptions) -> anyhow::Result<SlurmFiles> {
    if opts.shards == 0 {
        anyhow::bail!("--shards must be at least 1");
    }
    if opts.cpus_per_task == 0 {
        anyhow::bail!("--cpus-per-task must be at least 1");
    }
    let store = Store::new(&opts.results_root, spec.name());
    let prepared = prepare(spec, registry, &opts.project_root, None)?;
    // Where a previous run stored a cell, its wall time; the rest are estimated from those.
    let mut stored = Vec::with_capacity(prepared.cells.len());
    for c in &prepared.cells {
        stored.push(store.read_cell(&c.key).ok().flatten().map(|r| r.wall_seconds));
    }
    let timed_cells = stored.iter().filter(|s| s.is_some()).count();
    let cost = estimate_costs(&prepared.cells, &stored);
    let plan = balanced_plan(spec.name(), &prepared.cells, &cost, opts.shards);

    let dir = store.dir.join("slurm");
    let logs = dir.join("logs");
    std::fs::create_dir_all(&logs).map_err(|e| anyhow::anyhow!("{}: {e}", logs.display()))?;
    // Named by its content, so that writing the scripts again (say after some cells were
    // stored, which changes the balance) leaves the plan of an array still running in place:
    // its pending tasks go on reading the plan its other tasks read.
    let json = serde_json::to_vec_pretty(&plan)?;
    let plan_path = dir.join(format!("shard-plan-{}.json", &blake3::hash(&json).to_hex()[..12]));
    plan.write(&plan_path)?;

    let name = spec.name();
    let n = opts.shards;
    let estimate: Vec<String> = plan.estimated_seconds.iter().map(|s| format!("{s:.0}")).collect();
    let mut array = format!(
        "#!/bin/bash\n\
         # Written by `mcgp slurm` for experiment {name}: {cells} cells in {n} shards, one array task each.\n\
         # Estimated seconds per shard (from {timed_cells} stored cell times): {est}.\n\
         # Each task stores its cells in the shared results folder and renders nothing;\n\
         # collect.sbatch renders the report. Resubmitting computes only the missing cells.\n\
         #SBATCH --job-name=mcgp-{name}\n\
         #SBATCH --array=0-{last}\n\
         #SBATCH --ntasks=1\n\
         #SBATCH --cpus-per-task={cpus}\n",
        cells = prepared.cells.len(),
        est = estimate.join(", "),
        last = n - 1,
        cpus = opts.cpus_per_task,
    );
    let mut collect = format!(
        "#!/bin/bash\n\
         # Written by `mcgp slurm` for experiment {name}: collects the cells the array stored into the\n\
         # tables and the report (submit it with --dependency=afterany:<array job id>, as submit.sh does).\n\
         #SBATCH --job-name=mcgp-{name}-collect\n\
         #SBATCH --ntasks=1\n\
         #SBATCH --cpus-per-task=1\n"
    );
    for script in [&mut array, &mut collect] {
        if let Some(t) = &opts.time {
            script.push_str(&format!("#SBATCH --time={t}\n"));
        }
        if let Some(p) = &opts.partition {
            script.push_str(&format!("#SBATCH --partition={p}\n"));
        }
    }
    array.push_str(&format!("#SBATCH --output={}\n", sbatch_output(&logs, "shard-%a-job-%A.out")));
    collect.push_str(&format!("#SBATCH --output={}\n", sbatch_output(&logs, "collect-job-%j.out")));
    let common = format!("--results {} --reports {} --data {}", sh(&opts.results_root), sh(&opts.reports_root), sh(&opts.data_dir));
    array.push_str(&format!(
        "set -euo pipefail\n\
         cd {root}\n\
         # Threads: the CPUs SLURM gave this task.\n\
         exec {bin} run {spec} --shard \"$SLURM_ARRAY_TASK_ID/{n}\" --shard-plan {plan} --threads \"${{SLURM_CPUS_PER_TASK:-1}}\" {common}\n",
        root = sh(&opts.project_root),
        bin = sh(&opts.binary),
        spec = sh(&opts.spec_path),
        plan = sh(&plan_path),
    ));
    collect.push_str(&format!(
        "set -euo pipefail\n\
         cd {root}\n\
         exec {bin} report --wait {spec} {common}\n",
        root = sh(&opts.project_root),
        bin = sh(&opts.binary),
        spec = sh(&opts.spec_path),
    ));
    let array_path = dir.join("array.sbatch");
    let collect_path = dir.join("collect.sbatch");
    let submit = format!(
        "#!/bin/bash\n\
         # Submit the array, then the collection job after it (whatever the tasks' outcome).\n\
         # Run again to resubmit: tasks whose cells are all stored end at once.\n\
         set -euo pipefail\n\
         array=$(sbatch --parsable {array})\n\
         array=${{array%%;*}}\n\
         collect=$(sbatch --parsable --dependency=afterany:$array {collect})\n\
         collect=${{collect%%;*}}\n\
         echo \"array job $array ({n} tasks), collection job $collect\"\n",
        array = sh(&array_path),
        collect = sh(&collect_path),
    );
    let submit_path = dir.join("submit.sh");
    for (path, text) in [(&array_path, &array), (&collect_path, &collect), (&submit_path, &submit)] {
        crate::atomic::write_atomic(path, text.as_bytes()).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
                .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        }
    }
    Ok(SlurmFiles {
        dir,
        array: array_path,
        collect: collect_path,
        submit: submit_path,
        plan: plan_path,
        timed_cells,
        cells: prepared.cells.len(),
        plan_value: plan,
    })
}

/// `sbatch` a script with extra arguments; the job id it prints (`--parsable`: `id[;cluster]`).
fn sbatch(args: &[String], script: &Path) -> anyhow::Result<String> {
    let out = std::process::Command::new("sbatch")
        .arg("--parsable")
        .args(args)
        .arg(script)
        .output()
        .map_err(|e| anyhow::anyhow!("cannot run sbatch ({e}); is SLURM installed and on PATH?"))?;
    if !out.status.success() {
        anyhow::bail!("sbatch {} failed: {}", script.display(), String::from_utf8_lossy(&out.stderr).trim());
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let id = text.trim().split(';').next().unwrap_or("").to_string();
    if id.is_empty() {
        anyhow::bail!("sbatch {} printed no job id", script.display());
    }
    Ok(id)
}

/// Submit the array and the collection job after it; (array job id, collection job id).
pub fn submit(files: &SlurmFiles) -> anyhow::Result<(String, String)> {
    let array = sbatch(&[], &files.array)?;
    let collect = sbatch(&[format!("--dependency=afterany:{array}")], &files.collect)?;
    Ok((array, collect))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A results folder with a blank, a `#`, a `%` and a double quote: sbatch would end the
    /// unquoted value at the blank (or the `#`) and expand the `%`.
    #[test]
    fn output_directives_quote_the_folder_and_keep_the_patterns() {
        let got = sbatch_output(Path::new("/tmp/my res#1/100%/a\"b/logs"), "shard-%a-job-%A.out");
        assert_eq!(got, r#""/tmp/my res#1/100%%/a\"b/logs/shard-%a-job-%A.out""#);
        assert_eq!(sbatch_output(Path::new("/r/logs"), "collect-job-%j.out"), "\"/r/logs/collect-job-%j.out\"");
    }
}
