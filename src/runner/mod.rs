//! The scheduler: expand a spec into cells, reuse stored cells, run the rest on rayon in
//! dependency order, store each finished cell atomically, then write the tables, the
//! manifest and the report.
//!
//! Determinism: a cell's result depends only on its description and seed (faer runs
//! sequentially inside a cell; parallelism is across cells), so it is bit-identical on any
//! number of threads and across resumed runs.
mod cell;
mod provenance;

pub use cell::run_cell;

use crate::data::{make_splits, write_splits, Dataset, Registry, Split};
use crate::report::{render_experiment, render_index, ReportInput};
use crate::results::{CellRecord, Manifest, Status, Store};
use crate::spec::{expand, Cell, Spec};
use indicatif::{ProgressBar, ProgressStyle};
use rayon::prelude::*;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

/// Where things are and how to run.
#[derive(Clone, Debug)]
pub struct RunOptions {
    pub project_root: PathBuf,
    pub data_dir: PathBuf,
    pub results_root: PathBuf,
    pub reports_root: PathBuf,
    /// Worker threads (default: rayon's default, which honours RAYON_NUM_THREADS).
    pub threads: Option<usize>,
    /// Recompute cells stored as failed (default: keep them, as a deterministic failure would repeat).
    pub retry_failed: bool,
    /// Recompute every cell, ignoring stored ones (after changing a method's code without
    /// bumping the crate version, which is part of every cell key).
    pub recompute: bool,
    /// Compute only the cells of these datasets (empty: all); the rest count as missing.
    pub datasets: Vec<String>,
    /// Draw a progress bar (on a terminal).
    pub progress: bool,
    pub render_report: bool,
}

/// What a run did.
#[derive(Clone, Debug)]
pub struct RunSummary {
    pub manifest: Manifest,
    pub cells: Vec<CellRecord>,
}

impl RunSummary {
    pub fn failed(&self) -> usize {
        self.cells.iter().filter(|c| c.status == Status::Failed).count()
    }
}

/// The data a cell needs: every dataset once, and its splits.
pub struct Prepared {
    pub datasets: BTreeMap<String, Dataset>,
    pub splits: BTreeMap<String, Vec<Split>>,
    pub cells: Vec<Cell>,
}

/// Load the datasets, make (and write) the splits, and expand the cells.
pub fn prepare(spec: &Spec, registry: &Registry, opts: &RunOptions, store: &Store) -> anyhow::Result<Prepared> {
    let mut datasets = BTreeMap::new();
    let mut splits = BTreeMap::new();
    let mut n_splits = BTreeMap::new();
    for name in &spec.raw.datasets {
        let data = registry.load_dataset(name)?;
        let seed = crate::spec::expand::split_seed(spec, name);
        let s = make_splits(spec.raw.splits_of(name), &data, seed, &opts.project_root)?;
        write_splits(&store.splits_path(name), &s)?;
        n_splits.insert(name.clone(), s.len());
        splits.insert(name.clone(), s);
        datasets.insert(name.clone(), data);
    }
    let cells = expand(spec, &n_splits).map_err(anyhow::Error::msg)?;
    Ok(Prepared { datasets, splits, cells })
}

/// Run a checked spec end to end.
pub fn run(spec: &Spec, registry: &Registry, opts: &RunOptions) -> anyhow::Result<RunSummary> {
    for name in &opts.datasets {
        if !spec.raw.datasets.contains(name) {
            anyhow::bail!("--datasets: {name} is not a dataset of {} (it has: {})", spec.file, spec.raw.datasets.join(", "));
        }
    }
    faer::set_global_parallelism(faer::Par::Seq);
    let started = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
    let wall = Instant::now();
    let store = Store::new(&opts.results_root, spec.name());
    let prepared = prepare(spec, registry, opts, &store)?;

    // Reuse what is stored; everything else is pending.
    let mut done: BTreeMap<String, CellRecord> = BTreeMap::new();
    for cell in prepared.cells.iter().filter(|_| !opts.recompute) {
        if let Some(rec) = store.read_cell(&cell.key)? {
            if rec.status == Status::Ok || !opts.retry_failed {
                done.insert(cell.key.clone(), rec);
            }
        }
    }
    // A cell with the same key stored by another experiment is the same computation (the key
    // hashes dataset, split protocol and seed, method entry, source cell and crate version):
    // take its record instead of recomputing it, e.g. the MF-MNP cells Chai's specs share.
    if !opts.recompute {
        let others = store.others()?;
        for cell in &prepared.cells {
            if done.contains_key(&cell.key) {
                continue;
            }
            for other in &others {
                let Some(mut rec) = other.read_cell(&cell.key)? else { continue };
                if rec.status != Status::Ok || rec.seed != cell.seed {
                    continue;
                }
                rec.diagnostics.insert("reused_from".into(), rec.experiment.clone());
                rec.experiment = spec.name().to_string();
                store.write_cell(&rec)?;
                done.insert(cell.key.clone(), rec);
                break;
            }
        }
    }
    let cached = done.len();
    let selected = |c: &Cell| opts.datasets.is_empty() || opts.datasets.contains(&c.dataset);
    let pending: Vec<&Cell> = prepared.cells.iter().filter(|c| !done.contains_key(&c.key) && selected(c)).collect();

    let bar = progress_bar(opts.progress, pending.len());
    let pool = match opts.threads {
        Some(t) => rayon::ThreadPoolBuilder::new().num_threads(t).build()?,
        None => rayon::ThreadPoolBuilder::new().build()?,
    };
    let threads = pool.current_num_threads();
    let abort_after = std::env::var("MCGP_ABORT_AFTER_CELLS").ok().and_then(|v| v.parse::<usize>().ok());
    let stored = AtomicUsize::new(0);

    // Dependency layers: a cell runs once the cell it takes hyper-parameters from is done.
    let mut remaining = pending;
    while !remaining.is_empty() {
        let (ready, waiting): (Vec<&Cell>, Vec<&Cell>) =
            remaining.into_iter().partition(|c| c.depends_on.as_ref().is_none_or(|d| done.contains_key(d)));
        if ready.is_empty() {
            anyhow::bail!("cells wait on cells that are neither stored nor scheduled (spec dependency bug)");
        }
        let results: Vec<anyhow::Result<CellRecord>> = pool.install(|| {
            ready
                .par_iter()
                .map(|cell| {
                    let source = cell.depends_on.as_ref().and_then(|d| done.get(d));
                    let record = run_cell(spec, cell, &prepared, source);
                    store.write_cell(&record)?;
                    bar.inc(1);
                    if record.status == Status::Failed {
                        bar.println(format!("failed: {} {} split {}: {}", cell.dataset, cell.entry.name, cell.split, record.error.as_deref().unwrap_or("")));
                    }
                    let n = stored.fetch_add(1, Ordering::SeqCst) + 1;
                    if abort_after == Some(n) {
                        // Test hook: die abruptly, as a kill would, after n stored cells.
                        std::process::abort();
                    }
                    Ok(record)
                })
                .collect()
        });
        for r in results {
            let r = r?;
            done.insert(r.key.clone(), r);
        }
        remaining = waiting;
    }
    bar.finish_and_clear();

    // Cells of datasets left out by `datasets` may be missing.
    let cells: Vec<CellRecord> = prepared.cells.iter().filter_map(|c| done.get(&c.key).cloned()).collect();
    store.write_tables(&cells)?;
    let missing = prepared.cells.len() - cells.len();
    let counts = CellCounts { total: prepared.cells.len(), computed: cells.len() - cached, cached, reused: reused_count(&cells), missing };
    let manifest = manifest(spec, opts, &cells, started, wall.elapsed().as_secs_f64(), threads, counts);
    store.write_manifest(&manifest)?;
    if opts.render_report {
        report(spec, &manifest, &cells, opts)?;
    }
    Ok(RunSummary { manifest, cells })
}

/// Render `reports/<experiment>/` and refresh `reports/index.html`.
pub fn report(spec: &Spec, manifest: &Manifest, cells: &[CellRecord], opts: &RunOptions) -> anyhow::Result<()> {
    let methods = spec.method_names();
    let input = ReportInput {
        manifest,
        tables: &spec.raw.tables,
        figures: &spec.raw.figures,
        datasets: &spec.raw.datasets,
        methods: &methods,
        cells,
    };
    render_experiment(&input, &opts.reports_root.join(spec.name()))?;
    render_index(&opts.reports_root)?;
    Ok(())
}

/// Re-render the report of a spec from its stored cells (no computation). Works on an
/// interrupted run too: the report then says how many cells are not stored yet.
pub fn report_only(spec: &Spec, registry: &Registry, opts: &RunOptions) -> anyhow::Result<RunSummary> {
    let store = Store::new(&opts.results_root, spec.name());
    let prepared = prepare(spec, registry, opts, &store)?;
    let mut cells = Vec::new();
    for c in &prepared.cells {
        if let Some(r) = store.read_cell(&c.key)? {
            cells.push(r);
        }
    }
    if cells.is_empty() {
        anyhow::bail!("{}: no stored cells of this spec; run it first", store.dir.display());
    }
    let missing = prepared.cells.len() - cells.len();
    // A finished run's manifest describes it; a partial one gets a manifest made now.
    let manifest = match store.read_manifest()? {
        Some(m) if missing == 0 && m.spec_hash == spec.hash => m,
        old => {
            let now = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
            let counts = CellCounts { total: prepared.cells.len(), computed: 0, cached: cells.len(), reused: reused_count(&cells), missing };
            let mut fresh = manifest(spec, opts, &cells, now, 0.0, 0, counts);
            // Every cell is stored but the spec text changed (say, a note): the spec and code
            // provenance are new, the run's own timing is the earlier run's.
            if let Some(m) = old.filter(|_| missing == 0) {
                fresh.started = m.started;
                fresh.finished = m.finished;
                fresh.wall_seconds = m.wall_seconds;
                fresh.threads = m.threads;
                fresh.cells_computed = m.cells_computed;
                fresh.cells_cached = m.cells_cached;
                fresh.cells_reused = m.cells_reused;
            }
            fresh
        }
    };
    store.write_tables(&cells)?;
    store.write_manifest(&manifest)?;
    report(spec, &manifest, &cells, opts)?;
    Ok(RunSummary { manifest, cells })
}

/// Stored cells taken from another experiment (in this run or an earlier, resumed one).
fn reused_count(cells: &[CellRecord]) -> usize {
    cells.iter().filter(|c| c.diagnostics.contains_key("reused_from")).count()
}

struct CellCounts {
    total: usize,
    computed: usize,
    cached: usize,
    /// Of the cached, taken from other experiments' stores.
    reused: usize,
    missing: usize,
}

/// Provenance of the stored `cells` of `spec`.
fn manifest(spec: &Spec, opts: &RunOptions, cells: &[CellRecord], started: String, wall_seconds: f64, threads: usize, counts: CellCounts) -> Manifest {
    Manifest {
        experiment: spec.name().to_string(),
        title: spec.raw.title.clone().unwrap_or_else(|| spec.name().to_string()),
        paper: spec.raw.paper.clone(),
        spec_path: spec.file.clone(),
        spec_hash: spec.hash.clone(),
        spec_text: spec.text.clone(),
        git_commit: provenance::git_commit(&opts.project_root),
        git_dirty: provenance::git_dirty(&opts.project_root),
        crate_version: crate::VERSION.to_string(),
        rustc: provenance::RUSTC.to_string(),
        host: gethostname::gethostname().to_string_lossy().into_owned(),
        threads,
        started,
        finished: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
        cpu_seconds: cells.iter().map(|c| c.cpu_seconds).sum(),
        wall_seconds,
        cells_total: counts.total,
        cells_computed: counts.computed,
        cells_cached: counts.cached,
        cells_reused: counts.reused,
        cells_failed: cells.iter().filter(|c| c.status == Status::Failed).count(),
        cells_missing: counts.missing,
    }
}

fn progress_bar(enabled: bool, n: usize) -> ProgressBar {
    if !enabled {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(n as u64);
    bar.set_style(
        ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:40} {pos}/{len} cells, ETA {eta}")
            .expect("valid template")
            .progress_chars("=> "),
    );
    bar
}
