//! A run: expand a spec into cells, reuse stored cells, run the rest on rayon in dependency
//! order (`scheduler`), store each finished cell atomically (`cell`), then write the tables, the
//! manifest and the report (`report`, which `mcgp report` also uses alone).
//!
//! Determinism: a cell's result depends only on its description and seed (faer runs
//! sequentially inside a cell; parallelism is across cells), so it is bit-identical on any
//! number of threads and across resumed runs.
mod cell;
mod provenance;
mod report;
mod scheduler;
pub mod shard;
mod status;

pub use cell::{is_labels_only, run_cell, PROBABILITY_METRICS};
pub use provenance::machine;
use report::{cell_ids, manifest, reused_count, CellCounts, CodeVersion};
pub use report::{report, report_only};
use scheduler::{progress_bar, ProgressLog, Scheduler};
pub use shard::{Shard, ShardPlan};
pub use status::{status, EntryStatus, StatusReport};

use crate::data::{make_splits, write_splits, Dataset, Registry, Split};
use crate::methods::ProblemShape;
use crate::results::{CellRecord, Manifest, Status, Store};
use crate::spec::{expand, Cell, Spec};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
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
    /// Recompute cells stored as failed (default: keep them, as a deterministic failure would
    /// repeat; timeouts are always retried unless `keep_failed`).
    pub retry_failed: bool,
    /// Keep cells stored as timed out instead of retrying them.
    pub keep_failed: bool,
    /// Recompute every cell, ignoring stored ones (after changing a method's code without
    /// bumping the crate version, which is part of every cell key).
    pub recompute: bool,
    /// Compute only the cells of these datasets (empty: all); the rest count as missing.
    pub datasets: Vec<String>,
    /// Compute only the cells of these method entries (empty: all), and the cells they take
    /// hyper-parameters from where those are not stored; the rest count as missing.
    pub entries: Vec<String>,
    /// Draw a progress bar (on a terminal).
    pub progress: bool,
    pub render_report: bool,
    /// Compute only this shard's cells (`mcgp run --shard I/N`, e.g. one task of a cluster's
    /// job array over a shared results folder) and write no tables, manifest or report: other
    /// shards are adding cells at the same time, and a run without a shard (or `mcgp report`)
    /// collects them.
    pub shard: Option<Shard>,
    /// The chains' assignment to shards (written by `mcgp slurm`); without it, the hash partition.
    pub shard_plan: Option<PathBuf>,
}

/// What a run did.
#[derive(Clone, Debug)]
pub struct RunSummary {
    pub manifest: Manifest,
    pub cells: Vec<CellRecord>,
    /// CPU seconds of the cells this run computed (the manifest's sum covers the stored ones too).
    pub computed_cpu_seconds: f64,
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
    /// Datasets that could not be loaded or split, with the message: their cells fail with it
    /// and the other datasets' cells run.
    pub failed_datasets: BTreeMap<String, String>,
    /// The training and test matrices of each (dataset, split) while some cell uses them.
    split_cache: SplitCache,
}

/// One split's rows, standardised (or not) as the spec says: built once and shared by every
/// cell of that split that runs at the same time (MNIST's 60k x 784 training matrix is 376 MB:
/// never a copy per cell), dropped when the last of them finishes.
pub struct SplitData {
    pub x_train: ndarray::Array2<f64>,
    pub y_train: Vec<usize>,
    pub x_test: ndarray::Array2<f64>,
    pub y_test: Vec<usize>,
    /// The training statistics the inputs were standardised with (none: raw inputs).
    pub scaler: Option<crate::data::Standardizer>,
}

type SplitCache = std::sync::Mutex<BTreeMap<(String, usize), std::sync::Weak<SplitData>>>;

impl Prepared {
    /// The split's matrices, shared with any running cell of the same split.
    pub fn split_data(&self, dataset: &str, split: usize, standardize: bool) -> std::sync::Arc<SplitData> {
        // Held while building, so two cells of one split never build it twice.
        let mut cache = self.split_cache.lock().unwrap_or_else(|e| e.into_inner());
        let key = (dataset.to_string(), split);
        if let Some(data) = cache.get(&key).and_then(std::sync::Weak::upgrade) {
            return data;
        }
        let data = &self.datasets[dataset];
        let split = &self.splits[dataset][split];
        let (train, test) = (data.subset(&split.train), data.subset(&split.test));
        let (x_train, x_test, scaler) = if standardize {
            let s = crate::data::Standardizer::fit(&train.x);
            (s.transform(&train.x), s.transform(&test.x), Some(s))
        } else {
            (train.x, test.x, None)
        };
        let shared = std::sync::Arc::new(SplitData { x_train, y_train: train.y, x_test, y_test: test.y, scaler });
        cache.retain(|_, w| w.strong_count() > 0);
        cache.insert(key, std::sync::Arc::downgrade(&shared));
        shared
    }
}

/// Load the datasets, make the splits (and write them to `store`), check that every method
/// entry supports its datasets, and expand the cells: everything a run does before its first
/// cell, so `mcgp check` (which calls this without a store) rejects what a run would.
pub fn prepare(spec: &Spec, registry: &Registry, project_root: &std::path::Path, store: Option<&Store>) -> anyhow::Result<Prepared> {
    let mut datasets = BTreeMap::new();
    let mut splits = BTreeMap::new();
    let mut n_splits = BTreeMap::new();
    let mut data_hashes = BTreeMap::new();
    let mut failed_datasets = BTreeMap::new();
    for name in &spec.raw.datasets {
        let protocol = spec.raw.splits_of(name);
        // A task the data cannot pose is a spec error, not a failure of the dataset's cells.
        let mut bad_task = None;
        let loaded = (|| -> anyhow::Result<(Dataset, String, Vec<Split>)> {
            let source = spec.raw.source_of(name);
            let (data, task) = match crate::spec::derive_dataset(spec, name, registry.load_dataset(source)?) {
                Ok(derived) => derived,
                Err(e) => {
                    bad_task = Some(e);
                    anyhow::bail!("derived dataset {name}");
                }
            };
            // The task is part of the data's identity, so of every cell key.
            let mut hash = registry.content_hash(source)? + &task;
            if let crate::data::SplitProtocol::File { path } = protocol {
                let path = project_root.join(path);
                let bytes = std::fs::read(&path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
                hash = format!("{hash}+{}", &blake3::hash(&bytes).to_hex()[..24]);
            }
            let s = make_splits(protocol, &data, crate::spec::expand::split_seed(spec, name), project_root)?;
            Ok((data, hash, s))
        })();
        if let Some(e) = bad_task {
            return Err(e.into());
        }
        match loaded {
            Ok((data, hash, s)) => {
                if let Some(store) = store {
                    write_splits(&store.splits_path(name), &s)?;
                }
                data_hashes.insert(name.clone(), hash);
                n_splits.insert(name.clone(), s.len());
                splits.insert(name.clone(), s);
                datasets.insert(name.clone(), data);
            }
            // A data error fails this dataset's cells only, where the protocol says how many
            // there are without the data; otherwise (a split file) the run cannot start.
            Err(e) => match protocol.n_splits_without_data() {
                Some(n) => {
                    // Keyed as data that could not be read: a repaired file gives new keys.
                    data_hashes.insert(name.clone(), "unreadable".into());
                    n_splits.insert(name.clone(), n);
                    failed_datasets.insert(name.clone(), format!("{e:#}"));
                }
                None => return Err(e),
            },
        }
    }
    crate::spec::check_supports(spec, &problem_shapes(&datasets, &splits))?;
    let cells = expand(spec, &n_splits, &data_hashes).map_err(|e| anyhow::anyhow!("{}: {e}", spec.file))?;
    Ok(Prepared { datasets, splits, cells, failed_datasets, split_cache: Default::default() })
}

/// Two spec files with the same `name:` would overwrite each other's tables and report: the
/// experiment folder belongs to the spec file its manifest names (while that file exists), or,
/// before a run has written a manifest (an interrupted first run, shards still under way), the
/// one its first run named in `OWNER_FILE`.
fn check_owner(spec: &Spec, store: &Store, project_root: &Path) -> anyhow::Result<()> {
    let owner_path = match store.read_manifest()? {
        Some(m) => m.spec_path,
        None => match std::fs::read_to_string(store.dir.join(OWNER_FILE)) {
            Ok(path) => path,
            Err(_) => return Ok(()),
        },
    };
    if owner_path.trim().is_empty() {
        return Ok(()); // being claimed this moment (see `claim_owner`)
    }
    // A manifest names its spec as the run was given it, relative to where it ran (the
    // checkout, as the README runs it): from elsewhere, resolve it against the checkout.
    let resolve = |p: &str| std::fs::canonicalize(p).or_else(|_| std::fs::canonicalize(project_root.join(p)));
    let (Ok(owner), Ok(this)) = (resolve(&owner_path), std::fs::canonicalize(&spec.file)) else { return Ok(()) };
    if owner != this {
        // A copy of the spec (moved by copying, say) is the same experiment in two files.
        let copy = std::fs::read(&owner).is_ok_and(|text| text == spec.text.as_bytes());
        let what_to_do = if copy {
            format!("the two files are the same text: delete {owner_path} to hand its results to {}", spec.file)
        } else {
            "give one of them another `name:` (or run it with --results elsewhere)".to_string()
        };
        anyhow::bail!(
            "{}: results of {} are stored there, and {} has the same name \"{}\"; {what_to_do}",
            store.dir.display(),
            owner_path,
            spec.file,
            spec.name()
        );
    }
    Ok(())
}

/// The spec file a run of an experiment without a manifest yet belongs to (not committed: the
/// manifest names it once the run ends).
const OWNER_FILE: &str = ".owner";

/// Records this spec (its canonical path) as the folder's owner when nothing names one yet
/// (see `check_owner`). The file is created only if absent, so of two specs of one name whose
/// first shards start together one claims the folder and the other is refused.
fn claim_owner(spec: &Spec, store: &Store, project_root: &Path) -> anyhow::Result<()> {
    let path = store.dir.join(OWNER_FILE);
    if store.read_manifest()?.is_some() {
        return Ok(());
    }
    let this = std::fs::canonicalize(&spec.file).map_err(|e| anyhow::anyhow!("{}: {e}", spec.file))?;
    match std::fs::OpenOptions::new().write(true).create_new(true).open(&path) {
        Ok(mut f) => {
            use std::io::Write;
            f.write_all(this.to_string_lossy().as_bytes())
                .and_then(|()| f.sync_all())
                .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
        }
        // Claimed by another run since `check_owner` read it: check again.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => check_owner(spec, store, project_root),
        Err(e) => Err(anyhow::anyhow!("{}: {e}", path.display())),
    }
}

/// Each dataset's shape as `Method::supports` sees it: the training rows of its smallest
/// training split (what a setting such as M inducing inputs must fit in), or all rows where it
/// has no splits.
pub fn problem_shapes(datasets: &BTreeMap<String, Dataset>, splits: &BTreeMap<String, Vec<Split>>) -> BTreeMap<String, ProblemShape> {
    datasets
        .iter()
        .map(|(name, d)| {
            let n_train = splits.get(name).and_then(|s| s.iter().map(|s| s.train.len()).min()).unwrap_or(d.y.len());
            (name.clone(), ProblemShape { n_classes: d.n_classes(), n_features: d.d(), n_train })
        })
        .collect()
}

/// `mcgp check` beyond the spec text: everything a run does before its first cell (load the
/// datasets, make the splits, check that every method entry supports every dataset it runs on,
/// expand the cells), writing nothing. Returns the number of cells.
pub fn check_with_data(spec: &Spec, registry: &Registry, project_root: &std::path::Path) -> anyhow::Result<usize> {
    let prepared = prepare(spec, registry, project_root, None)?;
    if let Some((_, message)) = prepared.failed_datasets.iter().next() {
        anyhow::bail!("{message}");
    }
    Ok(prepared.cells.len())
}

/// Run a checked spec end to end.
pub fn run(spec: &Spec, registry: &Registry, opts: &RunOptions) -> anyhow::Result<RunSummary> {
    for name in &opts.datasets {
        if !spec.raw.datasets.contains(name) {
            anyhow::bail!("--datasets: {name} is not a dataset of {} (it has: {})", spec.file, spec.raw.datasets.join(", "));
        }
    }
    for name in &opts.entries {
        if !spec.raw.methods.iter().any(|m| &m.name == name) {
            let names: Vec<&str> = spec.raw.methods.iter().map(|m| m.name.as_str()).collect();
            anyhow::bail!("--entries: {name} is not a method entry of {} (it has: {})", spec.file, names.join(", "));
        }
    }
    faer::set_global_parallelism(faer::Par::Seq);
    let started = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
    // The code that computes the cells is the checkout as the run starts: commits made while a
    // long run goes on must not be credited with its results.
    let code = CodeVersion::of(&opts.project_root);
    if code.label().is_none() {
        eprintln!(
            "warning: {} is not a git checkout: the results will not name the commit that computed them",
            opts.project_root.display()
        );
    }
    let wall = Instant::now();
    let store = Store::new(&opts.results_root, spec.name());
    // Shards of one experiment share the lock (each adds its own cells); a collecting run holds
    // it alone, so it sees every cell the shards stored and no shard writes while it collects.
    let _lock = if opts.shard.is_some() { store.lock_shared()? } else { store.lock()? };
    check_owner(spec, &store, &opts.project_root)?;
    claim_owner(spec, &store, &opts.project_root)?;
    if opts.shard.is_none() && opts.render_report {
        // Found now, not after hours of cells: the report folder must be creatable.
        let dir = opts.reports_root.join(spec.name());
        std::fs::create_dir_all(&dir).map_err(|e| {
            anyhow::anyhow!(
                "cannot create the report folder {}: {e} (nothing was computed; --reports DIR puts it elsewhere)",
                dir.display()
            )
        })?;
    }
    if opts.shard.is_none() {
        // A run killed while writing leaves temporary files; under the exclusive lock nobody
        // else writes here (a shard cannot tell another shard's file in progress from a stale one),
        // and under the render lock no snapshot report writes the report folder.
        crate::atomic::remove_stale_temporaries(&store.dir);
        let _render = store.render_lock()?;
        crate::atomic::remove_stale_temporaries(&opts.reports_root.join(spec.name()));
    }
    let mut prepared = prepare(spec, registry, &opts.project_root, Some(&store))?;
    if let Some(shard) = opts.shard {
        let plan = opts.shard_plan.as_deref().map(ShardPlan::read).transpose()?;
        if let Some(p) = plan.as_ref().filter(|p| p.experiment != spec.name()) {
            anyhow::bail!("the shard plan is for experiment {}, not {}", p.experiment, spec.name());
        }
        let shards = shard::assign(&prepared.cells, shard.count, plan.as_ref())?;
        let mut i = 0;
        prepared.cells.retain(|_| {
            i += 1;
            shards[i - 1] == shard.index
        });
    }

    // Reuse what is stored; everything else is pending.
    let mut done: BTreeMap<String, CellRecord> = BTreeMap::new();
    for cell in prepared.cells.iter().filter(|_| !opts.recompute) {
        if let Some(mut rec) = store.read_usable_cell(&cell.key)? {
            // A failure repeats on the same code and data, except a timeout (the machine's).
            let keep_failure = !opts.retry_failed && (!rec.timed_out || opts.keep_failed);
            if rec.status == Status::Ok || keep_failure {
                if relabel(&mut rec, cell) {
                    store.write_cell(&rec)?;
                }
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
            if let Some(mut rec) = stored_elsewhere(&others, cell)? {
                rec.diagnostics.insert("reused_from".into(), rec.experiment.clone());
                rec.experiment = spec.name().to_string();
                relabel(&mut rec, cell);
                store.write_cell(&rec)?;
                done.insert(cell.key.clone(), rec);
            }
        }
    }
    // A cell that failed only because its source failed is computed again once that failure no
    // longer stands (the source was retried since, or is to be now): its own fit never ran.
    // To a fixed point, down chains of such cells.
    loop {
        let source_recovered: Vec<String> = prepared
            .cells
            .iter()
            .filter(|c| done.get(&c.key).is_some_and(|r| r.source_failed))
            .filter(|c| c.depends_on.as_deref().and_then(|d| done.get(d)).is_none_or(|s| s.status == Status::Ok))
            .map(|c| c.key.clone())
            .collect();
        if source_recovered.is_empty() {
            break;
        }
        for key in source_recovered {
            done.remove(&key);
        }
    }
    let wanted = |c: &Cell| {
        (opts.datasets.is_empty() || opts.datasets.contains(&c.dataset))
            && (opts.entries.is_empty() || opts.entries.contains(&c.entry.name))
    };
    let sources_needed = sources_to_compute(&prepared.cells, &mut done, wanted);
    let selected = |c: &Cell| wanted(c) || sources_needed.contains(&c.key);
    let cached = done.len();
    let pending: Vec<&Cell> = prepared.cells.iter().filter(|c| !done.contains_key(&c.key) && selected(c)).collect();

    let bar = progress_bar(opts.progress, pending.len());
    let pool = match opts.threads {
        Some(t) => rayon::ThreadPoolBuilder::new().num_threads(t).build()?,
        None => rayon::ThreadPoolBuilder::new().build()?,
    };
    let threads = pool.current_num_threads();
    let abort_after = std::env::var("MCGP_ABORT_AFTER_CELLS").ok().and_then(|v| v.parse::<usize>().ok());
    // Test hook: pause after storing each cell, so a test can kill a run (a cluster task) while
    // it is under way with some of its cells stored.
    let pause_after_cell = std::env::var("MCGP_TEST_PAUSE_AFTER_CELL_SECONDS")
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s > 0.0)
        .map(std::time::Duration::from_secs_f64);

    // A cell runs as soon as the cell it takes hyper-parameters from is done: the cells with
    // nothing to wait for start at once, and each finished cell spawns its dependants.
    let pending_keys: std::collections::BTreeSet<&str> = pending.iter().map(|c| c.key.as_str()).collect();
    let mut dependants: BTreeMap<&str, Vec<&Cell>> = BTreeMap::new();
    let mut roots = Vec::new();
    for &cell in &pending {
        match cell.depends_on.as_deref() {
            Some(d) if !done.contains_key(d) => {
                if !pending_keys.contains(d) {
                    anyhow::bail!(
                        "cell {} {} split {} waits on a cell that is neither stored nor scheduled (spec dependency bug)",
                        cell.dataset,
                        cell.entry.name,
                        cell.split
                    );
                }
                dependants.entry(d).or_default().push(cell);
            }
            _ => roots.push(cell),
        }
    }
    // Seconds between progress lines without a terminal (MCGP_PROGRESS_SECONDS, default 60).
    let every = match std::env::var("MCGP_PROGRESS_SECONDS") {
        Err(_) => 60.0,
        Ok(v) => match v.parse::<f64>() {
            Ok(s) if s.is_finite() && s >= 0.0 => s,
            _ => {
                eprintln!("warning: MCGP_PROGRESS_SECONDS must be a number of seconds >= 0, got {v:?}; using 60");
                60.0
            }
        },
    };
    let every = std::time::Duration::from_secs_f64(every);
    let log = (!opts.progress)
        .then(|| Mutex::new(ProgressLog { started: Instant::now(), last: Instant::now(), every, total: pending.len(), failed: 0 }));
    let scheduler = Scheduler {
        spec,
        prepared: &prepared,
        store: &store,
        bar: &bar,
        log,
        done: Mutex::new(done),
        dependants,
        failure: Mutex::new(None),
        stored: Mutex::new(0),
        abort_after,
        pause_after_cell,
        commit: code.label(),
    };
    if spec.raw.one_cell_at_a_time {
        pool.install(|| scheduler.run_in_turn(roots));
    } else {
        pool.scope_fifo(|scope| {
            for cell in roots {
                let scheduler = &scheduler;
                scope.spawn_fifo(move |scope| scheduler.run_then_spawn_dependants(scope, cell));
            }
        });
    }
    if let Some(e) = scheduler.failure.into_inner().expect("no panic holds the lock") {
        return Err(e);
    }
    let done = scheduler.done.into_inner().expect("no panic holds the lock");
    if let Some(cell) = pending.iter().find(|c| !done.contains_key(&c.key)) {
        anyhow::bail!("cell {} {} split {} never became ready (dependency cycle: spec bug)", cell.dataset, cell.entry.name, cell.split);
    }
    bar.finish_and_clear();

    // Cells of datasets left out by `datasets` may be missing.
    let cells: Vec<CellRecord> = prepared.cells.iter().filter_map(|c| done.get(&c.key).cloned()).collect();
    let computed_keys: std::collections::BTreeSet<&str> = pending.iter().map(|c| c.key.as_str()).collect();
    let computed_cpu_seconds = cells.iter().filter(|c| computed_keys.contains(c.key.as_str())).map(|c| c.cpu_seconds).sum();
    if opts.shard.is_some() {
        // The shard's part is stored; the manifest describes this shard (returned, not written).
        let counts = CellCounts {
            total: prepared.cells.len(),
            computed: cells.len() - cached,
            cached,
            reused: reused_count(&cells),
            older_code: 0,
            missing: prepared.cells.len() - cells.len(),
        };
        let manifest = manifest(spec, code, &cells, started, wall.elapsed().as_secs_f64(), threads, counts);
        return Ok(RunSummary { manifest, cells, computed_cpu_seconds });
    }
    let superseded = store.superseded(&cell_ids(&prepared), &cells)?;
    store.write_tables(&cells, &superseded)?;
    let missing = prepared.cells.len() - cells.len();
    let this_commit = code.label();
    let older_code = cells.iter().filter(|c| c.commit.is_some() && c.commit != this_commit).count();
    let counts = CellCounts {
        total: prepared.cells.len(),
        computed: cells.len() - cached,
        cached,
        reused: reused_count(&cells),
        older_code,
        missing,
    };
    let manifest = manifest(spec, code, &cells, started, wall.elapsed().as_secs_f64(), threads, counts);
    store.write_manifest(&manifest)?;
    if opts.render_report {
        report(spec, &manifest, &cells, opts)?;
    }
    Ok(RunSummary { manifest, cells, computed_cpu_seconds })
}

/// Give a stored record the grid label of the cell it is taken for; true if it changed. The key
/// hashes the entry with its grid point applied, not the label, so `kernel: {variance: 0.5}` and
/// a grid over `kernel.variance` that includes 0.5 are the same computation with different
/// labels (empty, and `kernel.variance=0.5`): the record must sit in the table column of the spec
/// as it now is.
fn relabel(rec: &mut CellRecord, cell: &Cell) -> bool {
    let changed = rec.setting != cell.setting;
    if changed {
        rec.setting = cell.setting.clone();
    }
    changed
}
/// The sources a run computes beside the `wanted` cells that `done` does not hold. The unstored
/// sources of those cells are computed too, up their chains (with --entries a source may belong
/// to an entry that was not named). A cell to compute (wanted, or such a source) whose source is
/// an archived record without its handoff vectors has that source removed from `done` and
/// computed again first; to a fixed point, as that may make a further source needed.
/// (`mcgp status` counts what a run will compute with the same function.)
pub(super) fn sources_to_compute(
    cells: &[Cell],
    done: &mut BTreeMap<String, CellRecord>,
    wanted: impl Fn(&Cell) -> bool,
) -> std::collections::BTreeSet<String> {
    let by_key: BTreeMap<&str, &Cell> = cells.iter().map(|c| (c.key.as_str(), c)).collect();
    let mut sources_needed = std::collections::BTreeSet::new();
    loop {
        sources_needed.clear();
        for cell in cells.iter().filter(|c| !done.contains_key(&c.key) && wanted(c)) {
            let mut source = cell.depends_on.as_deref();
            while let Some(d) = source.filter(|d| !done.contains_key(*d)) {
                if !sources_needed.insert(d.to_string()) {
                    break;
                }
                source = by_key.get(d).and_then(|c| c.depends_on.as_deref());
            }
        }
        let without_vectors: Vec<String> = cells
            .iter()
            .filter(|c| !done.contains_key(&c.key) && (wanted(c) || sources_needed.contains(&c.key)))
            .filter_map(|c| c.depends_on.clone())
            .filter(|d| done.get(d).is_some_and(|r| r.handoff.vectors_dropped))
            .collect();
        if without_vectors.is_empty() {
            return sources_needed;
        }
        for d in without_vectors {
            done.remove(&d);
        }
    }
}

/// The record another experiment's store holds for `cell` that a run may take instead of
/// computing it: the same key, computed (not failed), with the same seed. `mcgp run` reuses it
/// and `mcgp status` counts it.
pub(crate) fn stored_elsewhere(others: &[Store], cell: &Cell) -> Result<Option<CellRecord>, crate::results::StoreError> {
    for other in others {
        if let Some(rec) = other.read_usable_cell(&cell.key)? {
            if rec.status == Status::Ok && rec.seed == cell.seed {
                return Ok(Some(rec));
            }
        }
    }
    Ok(None)
}
