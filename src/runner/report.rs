//! What a run leaves besides its cells: the manifest (which code computed which cells, and
//! how long it took), the tables and the rendered report; and `mcgp report`, which renders them
//! again from the stored cells.
use super::{check_owner, prepare, provenance, relabel, Prepared, RunOptions, RunSummary};
use crate::data::Registry;
use crate::report::{render_experiment, render_index, ReportInput};
use crate::results::{CellRecord, Manifest, Status, Store};
use crate::spec::Spec;
/// Render `reports/<experiment>/` and refresh `reports/index.html` (one renderer of an
/// experiment's report at a time: a run's and a snapshot's never interleave their files).
pub fn report(spec: &Spec, manifest: &Manifest, cells: &[CellRecord], opts: &RunOptions) -> anyhow::Result<()> {
    let _render = Store::new(&opts.results_root, spec.name()).render_lock()?;
    let methods = spec.method_names();
    let planned = crate::spec::expand::planned_groups(spec).map_err(|e| anyhow::anyhow!("{}: {e}", spec.name()))?;
    let input = ReportInput {
        manifest,
        tables: &spec.raw.tables,
        figures: &spec.raw.figures,
        datasets: &spec.raw.datasets,
        methods: &methods,
        cells,
        planned: &planned,
    };
    render_experiment(&input, &opts.reports_root.join(spec.name()))?;
    render_index(&opts.reports_root)?;
    for name in unreported_names(spec, cells) {
        eprintln!("warning: {}: {name}", spec.file);
    }
    Ok(())
}

/// The tables' and figures' metrics and traces that none of the finished cells they show
/// reports, each with the closest name those cells do report. Which metrics exist depends on
/// the methods (many report their own), so a spec cannot be checked for them before cells are
/// computed; a misspelt name would otherwise show only as "not reported" on the page.
pub(super) fn unreported_names(spec: &Spec, cells: &[CellRecord]) -> Vec<String> {
    let finished: Vec<&CellRecord> = cells.iter().filter(|c| c.status == Status::Ok).collect();
    let mut out = Vec::new();
    let mut check = |what: String, methods: &[String], datasets: &[String], names: &mut dyn Iterator<Item = (&String, bool)>| {
        let shown: Vec<&CellRecord> = finished
            .iter()
            .copied()
            .filter(|c| (methods.is_empty() || methods.contains(&c.method)) && (datasets.is_empty() || datasets.contains(&c.dataset)))
            .collect();
        if shown.is_empty() {
            return;
        }
        for (name, is_trace) in names {
            let reported = |c: &&CellRecord| if is_trace { c.trace.iter().any(|p| &p.name == name) } else { c.value(name).is_some() };
            if shown.iter().any(reported) {
                continue;
            }
            let candidates: std::collections::BTreeSet<String> = shown
                .iter()
                .flat_map(|c| -> Vec<String> {
                    if is_trace {
                        c.trace.iter().map(|p| p.name.clone()).collect()
                    } else {
                        let hyper = c.hyperparameters.keys().map(|p| format!("hp_{p}"));
                        c.metrics.keys().cloned().chain(c.derived_metrics().into_iter().map(|(n, _)| n)).chain(hyper).collect()
                    }
                })
                .collect();
            let hint = crate::suggest::closest(name, candidates.iter().map(String::as_str))
                .map(|k| format!(" (did you mean `{k}`?)"))
                .unwrap_or_default();
            let kind = if is_trace { "trace" } else { "metric" };
            out.push(format!("{what}: {kind} `{name}` is reported by none of the {} finished cells it shows{hint}", shown.len()));
        }
    };
    for t in &spec.raw.tables {
        check(format!("table `{}`", t.id), &t.methods, &t.datasets, &mut t.metrics.iter().map(|m| (m, false)));
    }
    for f in &spec.raw.figures {
        let metrics = f.metric.iter().chain(&f.metrics).map(|m| (m, false));
        check(format!("figure `{}`", f.id), &f.methods, &f.datasets, &mut metrics.chain(f.trace.iter().map(|t| (t, true))));
    }
    out
}

/// (dataset, entry, setting, split) of every cell of a prepared spec.
pub(super) fn cell_ids(prepared: &Prepared) -> Vec<(String, String, String, usize)> {
    prepared.cells.iter().map(|c| (c.dataset.clone(), c.entry.name.clone(), c.setting.clone(), c.split)).collect()
}

/// Re-render the report of a spec from its stored cells (no computation). Works on an
/// interrupted run too: the report then says how many cells are not stored yet. While a run
/// or shards of the spec are under way it renders a snapshot of the cells stored so far (each
/// cell file is written whole, by rename) and leaves the folder's tables, archive and manifest
/// to the run, which writes them and the report again when it ends; with `wait` it waits for
/// the run to end instead and then writes them itself.
pub fn report_only(spec: &Spec, registry: &Registry, opts: &RunOptions, wait: bool) -> anyhow::Result<RunSummary> {
    let store = Store::new(&opts.results_root, spec.name());
    let lock = if wait { Some(store.lock()?) } else { store.try_lock()? };
    let snapshot = lock.is_none();
    check_owner(spec, &store, &opts.project_root)?;
    if snapshot {
        eprintln!(
            "{}: a run of this experiment is under way: rendering a snapshot of the cells stored so far \
             (the run writes the tables and the report again when it ends)",
            store.dir.display()
        );
    } else {
        // What a killed run or shard left half-written (no one else writes under the exclusive lock).
        crate::atomic::remove_stale_temporaries(&store.dir);
    }
    // A snapshot writes nothing into the folder the run owns (not even the split files: the
    // run's start clears half-written files, which could be the snapshot's).
    let prepared = prepare(spec, registry, &opts.project_root, (!snapshot).then_some(&store))?;
    let mut cells = Vec::new();
    for c in &prepared.cells {
        if let Some(mut r) = store.read_usable_cell(&c.key)? {
            // Relabelled in memory only: the next run rewrites the file under its lock.
            relabel(&mut r, c);
            cells.push(r);
        }
    }
    if cells.is_empty() {
        anyhow::bail!("{}: no stored cells of this spec; run it first", store.dir.display());
    }
    let missing = prepared.cells.len() - cells.len();
    // A stored manifest of this spec that describes exactly these cells (a finished run, or a
    // partial one already reported with the same cells missing) is kept, so a re-render is
    // byte for byte; otherwise a manifest is made now. "These cells": the same count missing is
    // not enough, since cells recomputed under new keys (a numerics bump run by shards, say)
    // leave none missing; their CPU seconds summed in the same order (to the bit) and their
    // failures must be the manifest's too.
    let same_cells = |m: &Manifest| {
        let cpu: f64 = cells.iter().map(|c| c.cpu_seconds).sum();
        m.cpu_seconds.to_bits() == cpu.to_bits() && m.cells_failed == cells.iter().filter(|c| c.status == Status::Failed).count()
    };
    let manifest = match store.read_manifest()? {
        Some(m)
            if m.spec_hash == spec.hash
                && m.cells_missing == missing
                && (missing == 0 || m.cells_total == prepared.cells.len())
                && same_cells(&m) =>
        {
            m
        }
        old => {
            let now = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
            let counts = CellCounts {
                total: prepared.cells.len(),
                computed: 0,
                cached: cells.len(),
                reused: reused_count(&cells),
                older_code: 0,
                missing,
            };
            let mut fresh = manifest(spec, CodeVersion::of(&opts.project_root), &cells, now, 0.0, 0, counts);
            // Every cell is stored as that run left them but the spec text changed (say, a
            // note): the spec provenance is new; the code that computed the cells and the run's
            // timing are the earlier run's. Cells stored since are described by the checkout.
            if let Some(m) = old.filter(|m| missing == 0 && same_cells(m)) {
                fresh.git_commit = m.git_commit;
                fresh.git_dirty = m.git_dirty;
                fresh.crate_version = m.crate_version;
                fresh.rustc = m.rustc;
                fresh.host = m.host;
                fresh.machine = m.machine;
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
    if !snapshot {
        let superseded = store.superseded(&cell_ids(&prepared), &cells)?;
        store.write_tables(&cells, &superseded)?;
        store.write_manifest(&manifest)?;
    }
    report(spec, &manifest, &cells, opts)?;
    drop(lock);
    Ok(RunSummary { manifest, cells, computed_cpu_seconds: 0.0 })
}

/// Stored cells taken from another experiment (in this run or an earlier, resumed one).
pub(super) fn reused_count(cells: &[CellRecord]) -> usize {
    cells.iter().filter(|c| c.diagnostics.contains_key("reused_from")).count()
}

pub(super) struct CellCounts {
    pub(super) total: usize,
    pub(super) computed: usize,
    pub(super) cached: usize,
    /// Of the cached, taken from other experiments' stores.
    pub(super) reused: usize,
    /// Of the cached, computed at another commit.
    pub(super) older_code: usize,
    pub(super) missing: usize,
}

/// The git commit of a checkout and whether it has uncommitted changes.
pub(super) struct CodeVersion {
    commit: String,
    dirty: bool,
}

impl CodeVersion {
    pub(super) fn of(root: &std::path::Path) -> CodeVersion {
        CodeVersion { commit: provenance::git_commit(root), dirty: provenance::git_dirty(root) }
    }

    /// `abc1234...` or `abc1234...+dirty`; None outside a git checkout.
    pub(super) fn label(&self) -> Option<String> {
        (!self.commit.is_empty() && self.commit != "unknown").then(|| {
            if self.dirty {
                format!("{}+dirty", self.commit)
            } else {
                self.commit.clone()
            }
        })
    }
}

/// Provenance of the stored `cells` of `spec`, computed by `code`.
pub(super) fn manifest(
    spec: &Spec,
    code: CodeVersion,
    cells: &[CellRecord],
    started: String,
    wall_seconds: f64,
    threads: usize,
    counts: CellCounts,
) -> Manifest {
    Manifest {
        experiment: spec.name().to_string(),
        title: spec.raw.title.clone().unwrap_or_else(|| spec.name().to_string()),
        paper: spec.raw.paper.clone(),
        spec_path: spec.file.clone(),
        spec_hash: spec.hash.clone(),
        spec_text: spec.text.clone(),
        git_commit: code.commit,
        git_dirty: code.dirty,
        crate_version: crate::VERSION.to_string(),
        rustc: provenance::RUSTC.to_string(),
        host: gethostname::gethostname().to_string_lossy().into_owned(),
        // A manifest of no run (threads 0, `mcgp report`) names no machine: its cells name theirs.
        machine: if threads == 0 { String::new() } else { provenance::machine().to_string() },
        threads,
        started,
        finished: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
        cpu_seconds: cells.iter().map(|c| c.cpu_seconds).sum(),
        wall_seconds,
        cells_total: counts.total,
        cells_computed: counts.computed,
        cells_cached: counts.cached,
        cells_reused: counts.reused,
        cells_older_code: counts.older_code,
        cells_failed: cells.iter().filter(|c| c.status == Status::Failed).count(),
        cells_missing: counts.missing,
    }
}
