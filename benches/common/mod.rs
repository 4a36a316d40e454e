//! Shared by the benches: a paper spec run on 2 of its 50 splits, from which the whole spec's
//! time is extrapolated.
use mcgp::data::{default_data_dir, Registry};
use std::collections::BTreeMap;

/// Run `experiments/<name>.yaml` with every `repeats: 50` replaced by `repeats: 2` (nothing else
/// changed), every cell recomputed on 2 threads into a temporary folder; print the wall and CPU
/// time, the whole spec's extrapolation (x25) and the CPU seconds per method and data set.
pub fn spec_on_two_splits(registry: &Registry, name: &str) {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let file = root.join(format!("experiments/{name}.yaml"));
    let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    assert!(text.contains("repeats: 50 }") || text.contains("repeats: 50, "), "{name} no longer has `repeats: 50`: update this bench");
    let reduced = text.replace("repeats: 50 }", "repeats: 2 }").replace("repeats: 50, ", "repeats: 2, ");
    let spec = mcgp::spec::parse(&reduced, &file.display().to_string(), registry).expect("the reduced spec parses");
    let tmp = tempfile::tempdir().expect("a temporary folder");
    let opts = mcgp::runner::RunOptions {
        project_root: root.to_path_buf(),
        data_dir: default_data_dir(),
        results_root: tmp.path().join("results"),
        reports_root: tmp.path().join("reports"),
        threads: Some(2),
        retry_failed: false,
        keep_failed: false,
        recompute: true,
        datasets: Vec::new(),
        entries: Vec::new(),
        progress: false,
        render_report: false,
        shard: None,
        shard_plan: None,
    };
    let summary = mcgp::runner::run(&spec, registry, &opts).expect("the reduced spec runs");
    let m = &summary.manifest;
    assert_eq!(summary.failed(), 0, "failed cells in the reduced {name} run");
    println!(
        "{name}, 2 splits: {:8.2} s wall, {:.1} s CPU ({} cells); whole spec (x25): {:.0} CPU-min, {:.0} min on 2 cores",
        m.wall_seconds,
        m.cpu_seconds,
        m.cells_total,
        25.0 * m.cpu_seconds / 60.0,
        25.0 * m.cpu_seconds / 120.0
    );
    // Where the time goes: CPU seconds per method and data set, summed over the 2 splits.
    let mut by_cell: BTreeMap<(String, String), f64> = BTreeMap::new();
    for c in &summary.cells {
        *by_cell.entry((c.method.clone(), c.dataset.clone())).or_default() += c.cpu_seconds;
    }
    for ((method, dataset), cpu) in by_cell {
        println!("  {method:>16} {dataset:>10}: {cpu:6.1} s CPU");
    }
}
