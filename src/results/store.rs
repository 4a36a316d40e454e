//! On-disk layout of an experiment's results, all written atomically (temp file + rename):
//!
//! ```text
//! results/<experiment>/cells/<key>.json   one CellRecord per finished cell (not committed)
//! results/<experiment>/cells.jsonl.zst     every current record, compressed (committed: a fresh
//!                                          checkout re-renders the report and resumes from it)
//! results/<experiment>/splits/<dataset>.csv  the splits the run used
//! results/<experiment>/results.{parquet,csv} one row per cell x metric
//! results/<experiment>/traces.{parquet,csv} per-iteration traces
//! results/<experiment>/summary.csv         mean / sd / se over splits
//! results/<experiment>/manifest.json       provenance
//! ```
use super::{aggregate, CellRecord, Manifest, Status};
use polars::prelude::*;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("cannot create the results folder {path} (--results DIR puts it elsewhere): {source}")]
    CreateDir { path: PathBuf, source: std::io::Error },
    #[error("{path}: not a valid cell record: {source}")]
    Parse { path: PathBuf, source: serde_json::Error },
    #[error("{path}: {source}")]
    Polars { path: PathBuf, source: PolarsError },
    #[error("{path}: {message}; it is left as it is: restore it (git checkout -- {path}) or move it aside, and run again")]
    Archive { path: PathBuf, message: String },
}

/// Write `bytes` to `path` atomically (see `crate::atomic`).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), StoreError> {
    crate::atomic::write_atomic(path, bytes).map_err(|source| StoreError::Io { path: path.to_path_buf(), source })
}

/// An experiment's advisory lock (`results/<experiment>/.lock`), held until dropped. One `mcgp
/// run` of an experiment at a time (or its shards side by side): a second one waits for the
/// first to end, then finds its cells stored; `mcgp report` meanwhile renders a snapshot. The
/// operating system releases it if the holder dies.
#[derive(Debug)]
pub struct ExperimentLock {
    _file: std::fs::File,
}

/// How a lock is held.
#[derive(Clone, Copy)]
enum Mode {
    Shared,
    Exclusive,
}

/// The experiment's lock and the report-rendering lock, in `results/<experiment>/`.
const LOCK_FILE: &str = ".lock";
const RENDER_LOCK_FILE: &str = ".render.lock";

/// File name of an experiment's cell archive.
pub const ARCHIVE: &str = "cells.jsonl.zst";

/// zstd level of the archive: slow to write (seconds), small in git, fast to read.
const ARCHIVE_LEVEL: i32 = 19;

/// The folder of one experiment's results.
#[derive(Clone, Debug)]
pub struct Store {
    pub dir: PathBuf,
    /// The archive's records by key, read on first use.
    archive: std::sync::OnceLock<Result<BTreeMap<String, CellRecord>, String>>,
}

impl Store {
    pub fn new(results_root: &Path, experiment: &str) -> Store {
        Store::at(results_root.join(experiment))
    }

    fn at(dir: PathBuf) -> Store {
        Store { dir, archive: std::sync::OnceLock::new() }
    }

    /// The archived records. An archive that cannot be read (a damaged file, a record of a
    /// newer version) is an error naming it: counting it as empty would compute its cells
    /// again and then write an archive without them, losing the committed results.
    fn archive(&self) -> Result<&BTreeMap<String, CellRecord>, StoreError> {
        let path = self.dir.join(ARCHIVE);
        let read = self.archive.get_or_init(|| {
            if !path.exists() {
                return Ok(BTreeMap::new());
            }
            read_archive(&path).map(|records| records.into_iter().map(|r| (r.key.clone(), r)).collect())
        });
        read.as_ref().map_err(|e| StoreError::Archive { path: path.clone(), message: e.clone() })
    }

    /// Write the archive of `cells`: one compact JSON record a line, in key order, zstd level 19,
    /// without handoff vectors.
    pub fn write_archive(&self, cells: &[CellRecord]) -> Result<(), StoreError> {
        let path = self.dir.join(ARCHIVE);
        let mut sorted: Vec<&CellRecord> = cells.iter().collect();
        sorted.sort_by(|a, b| a.key.cmp(&b.key));
        let mut text = Vec::new();
        for c in sorted {
            // Everything but the handoff vectors (see `Handoff::vectors_dropped`).
            let mut c = c.clone();
            if !c.handoff.vectors.is_empty() {
                c.handoff.vectors.clear();
                c.handoff.vectors_dropped = true;
            }
            serde_json::to_writer(&mut text, &c).map_err(|source| StoreError::Parse { path: path.clone(), source })?;
            text.push(b'\n');
        }
        let bytes = zstd::encode_all(&text[..], ARCHIVE_LEVEL).map_err(|source| StoreError::Io { path: path.clone(), source })?;
        write_atomic(&path, &bytes)
    }

    /// Take the experiment's lock exclusively, waiting (with a message on stderr) while another
    /// process holds it: a run that writes the tables, the archive and the report.
    pub fn lock(&self) -> Result<ExperimentLock, StoreError> {
        self.take(LOCK_FILE, Mode::Exclusive, true).map(|l| l.expect("a waiting lock is taken"))
    }

    /// Take the experiment's lock shared: a shard run (`mcgp run --shard`) only adds its own
    /// cells, each file atomically, so shards run side by side; a run that collects every cell
    /// (exclusive) waits for them to end, and they wait for it.
    pub fn lock_shared(&self) -> Result<ExperimentLock, StoreError> {
        self.take(LOCK_FILE, Mode::Shared, true).map(|l| l.expect("a waiting lock is taken"))
    }

    /// The experiment's lock taken exclusively if nobody holds it, `None` while a run or shard
    /// does (`mcgp report` then renders a snapshot instead of waiting for the run to end).
    pub fn try_lock(&self) -> Result<Option<ExperimentLock>, StoreError> {
        self.take(LOCK_FILE, Mode::Exclusive, false)
    }

    /// A lock of the report's rendering alone (`results/<experiment>/.render.lock`): a
    /// snapshot report taken while a run goes on and the run's own report never write the same
    /// report folder at once.
    pub fn render_lock(&self) -> Result<ExperimentLock, StoreError> {
        self.take(RENDER_LOCK_FILE, Mode::Exclusive, true).map(|l| l.expect("a waiting lock is taken"))
    }

    fn take(&self, name: &str, mode: Mode, wait: bool) -> Result<Option<ExperimentLock>, StoreError> {
        let path = self.dir.join(name);
        let io = |source| StoreError::Io { path: path.clone(), source };
        std::fs::create_dir_all(&self.dir).map_err(|source| StoreError::CreateDir { path: self.dir.clone(), source })?;
        // Read access too: NFSv4 takes a shared flock as a read lock, refused on a write-only fd.
        let file = std::fs::OpenOptions::new().create(true).truncate(false).read(true).write(true).open(&path).map_err(io)?;
        let attempt = match mode {
            Mode::Shared => file.try_lock_shared(),
            Mode::Exclusive => file.try_lock(),
        };
        match attempt {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) if !wait => return Ok(None),
            Err(std::fs::TryLockError::WouldBlock) => {
                if name == LOCK_FILE {
                    eprintln!("{}: another mcgp run of this experiment is under way; waiting for it to finish", self.dir.display());
                }
                match mode {
                    Mode::Shared => file.lock_shared().map_err(io)?,
                    Mode::Exclusive => file.lock().map_err(io)?,
                }
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(io(e)),
        }
        Ok(Some(ExperimentLock { _file: file }))
    }

    pub fn cell_path(&self, key: &str) -> PathBuf {
        self.dir.join("cells").join(format!("{key}.json"))
    }

    pub fn splits_path(&self, dataset: &str) -> PathBuf {
        self.dir.join("splits").join(format!("{dataset}.csv"))
    }

    pub fn write_cell(&self, record: &CellRecord) -> Result<(), StoreError> {
        let path = self.cell_path(&record.key);
        let json = serde_json::to_vec_pretty(record).map_err(|source| StoreError::Parse { path: path.clone(), source })?;
        write_atomic(&path, &json)
    }

    /// The stored record of a cell, if there is a readable one. A record that cannot be parsed
    /// (a file cut short by a crash of an older version, or edited by hand) counts as missing,
    /// so its cell is computed again, with a warning on stderr; I/O errors are errors.
    pub fn read_usable_cell(&self, key: &str) -> Result<Option<CellRecord>, StoreError> {
        match self.read_cell(key) {
            Err(e @ StoreError::Parse { .. }) => {
                eprintln!("warning: {e}; the cell is computed again");
                Ok(None)
            }
            other => other,
        }
    }

    /// The stored record of a cell, if there is one: its file, else its archived record.
    pub fn read_cell(&self, key: &str) -> Result<Option<CellRecord>, StoreError> {
        let path = self.cell_path(key);
        match std::fs::read(&path) {
            Ok(bytes) => {
                let record: CellRecord = serde_json::from_slice(&bytes).map_err(|source| StoreError::Parse { path, source })?;
                // A failure in a cell file (a timeout here) does not hide the same cell computed
                // elsewhere and archived under the same key (a pulled archive).
                if record.status == Status::Failed {
                    if let Some(ok) = self.archive()?.get(key).filter(|r| r.status == Status::Ok) {
                        return Ok(Some(ok.clone()));
                    }
                }
                Ok(Some(record))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(self.archive()?.get(key).cloned()),
            Err(e) => Err(StoreError::Io { path, source: e }),
        }
    }

    /// `all_cells`, the most recently written cell file first (then by key): of several stored
    /// keys of one cell (successive numerics versions, say), the first is the last computed.
    pub fn all_cells_newest_first(&self) -> Result<Vec<CellRecord>, StoreError> {
        let mut dated: Vec<(std::time::SystemTime, CellRecord)> = Vec::new();
        for rec in self.all_cells()? {
            let path = self.cell_path(&rec.key);
            let written = std::fs::metadata(&path).and_then(|m| m.modified()).map_err(|source| StoreError::Io { path, source })?;
            dated.push((written, rec));
        }
        dated.sort_by(|(ta, a), (tb, b)| tb.cmp(ta).then_with(|| a.key.cmp(&b.key)));
        Ok(dated.into_iter().map(|(_, r)| r).collect())
    }

    /// Every readable record in the store (unreadable ones are left out with a warning).
    pub fn all_cells(&self) -> Result<Vec<CellRecord>, StoreError> {
        let dir = self.dir.join("cells");
        let entries = match std::fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => return Err(StoreError::Io { path: dir, source }),
        };
        let mut keys: Vec<String> = Vec::new();
        for entry in entries {
            let path = entry.map_err(|source| StoreError::Io { path: dir.clone(), source })?.path();
            if let Some(key) = path.file_name().and_then(|n| n.to_str()).and_then(|n| n.strip_suffix(".json")) {
                keys.push(key.to_string());
            }
        }
        keys.sort();
        let mut out = Vec::new();
        for key in keys {
            out.extend(self.read_usable_cell(&key)?);
        }
        Ok(out)
    }

    /// The records of the committed archive (cells.jsonl.zst), cell files or not.
    pub fn archived_cells(&self) -> Result<Vec<CellRecord>, StoreError> {
        Ok(self.archive()?.values().cloned().collect())
    }

    /// The stores of the other experiments under the same results root.
    pub fn others(&self) -> Result<Vec<Store>, StoreError> {
        let Some(root) = self.dir.parent() else { return Ok(Vec::new()) };
        let entries = match std::fs::read_dir(root) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => return Err(StoreError::Io { path: root.to_path_buf(), source }),
        };
        let mut others = Vec::new();
        for entry in entries {
            let dir = entry.map_err(|source| StoreError::Io { path: root.to_path_buf(), source })?.path();
            if dir != self.dir && (dir.join("cells").is_dir() || dir.join(ARCHIVE).is_file()) {
                others.push(Store::at(dir));
            }
        }
        others.sort_by(|a, b| a.dir.cmp(&b.dir));
        Ok(others)
    }

    pub fn write_manifest(&self, m: &Manifest) -> Result<(), StoreError> {
        let path = self.dir.join("manifest.json");
        let json = serde_json::to_vec_pretty(m).map_err(|source| StoreError::Parse { path: path.clone(), source })?;
        write_atomic(&path, &json)
    }

    pub fn read_manifest(&self) -> Result<Option<Manifest>, StoreError> {
        let path = self.dir.join("manifest.json");
        match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|source| StoreError::Parse { path, source }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(StoreError::Io { path, source: e }),
        }
    }

    /// The stored records (cell files, then the committed archive) of the cells `wanted`
    /// (dataset, entry, setting, split) that `current` holds no computed record of: older keys
    /// of those cells (another numerics version, data or spec entry), where `current` failed
    /// only the computed ones. `write_tables` puts them
    /// back into the archive, so that a partial run or a report after a numerics bump does not
    /// drop the last results of the cells it did not recompute.
    pub fn superseded(&self, wanted: &[(String, String, String, usize)], current: &[CellRecord]) -> Result<Vec<CellRecord>, StoreError> {
        type Id = (String, String, String, usize);
        let id = |r: &CellRecord| -> Id { (r.dataset.clone(), r.method.clone(), r.setting.clone(), r.split) };
        // A cell whose current record failed (its data unreadable, say) keeps its last computed
        // record beside the failure, so that the archive does not lose it.
        let ok = |r: &&CellRecord| r.status == Status::Ok;
        let computed: std::collections::BTreeSet<Id> = current.iter().filter(ok).map(id).collect();
        let failed: std::collections::BTreeSet<Id> = current.iter().filter(|r| !ok(r)).map(id).collect();
        let current_keys: std::collections::BTreeSet<&str> = current.iter().map(|r| r.key.as_str()).collect();
        let open: std::collections::BTreeSet<&Id> = wanted.iter().filter(|w| !computed.contains(*w)).collect();
        let mut out: BTreeMap<Id, CellRecord> = BTreeMap::new();
        for r in self.all_cells_newest_first()?.into_iter().chain(self.archived_cells()?) {
            let i = id(&r);
            if !open.contains(&i) || current_keys.contains(r.key.as_str()) || (failed.contains(&i) && !ok(&&r)) {
                continue;
            }
            // The first found (the newest cell file, then the archive), unless a later one was
            // computed where the first failed.
            match out.get(&i) {
                Some(kept) if ok(&kept) || !ok(&&r) => {}
                _ => {
                    out.insert(i, r);
                }
            }
        }
        Ok(out.into_values().collect())
    }

    /// Write results.parquet / results.csv (long: one row per cell x metric), traces.csv and
    /// summary.csv for `cells` (in the order given), and the archive of `cells` and `superseded`
    /// (see [`Store::superseded`]).
    pub fn write_tables(&self, cells: &[CellRecord], superseded: &[CellRecord]) -> Result<(), StoreError> {
        self.write_frames(cells)?;
        if superseded.is_empty() {
            return self.write_archive(cells);
        }
        let all: Vec<CellRecord> = cells.iter().chain(superseded).cloned().collect();
        self.write_archive(&all)
    }

    /// The tables of `write_tables`, without the archive.
    fn write_frames(&self, cells: &[CellRecord]) -> Result<(), StoreError> {
        let mut df = long_table(cells).map_err(|source| StoreError::Polars { path: self.dir.join("results.parquet"), source })?;
        self.write_frame(&mut df, "results")?;
        let mut tr = trace_table(cells).map_err(|source| StoreError::Polars { path: self.dir.join("traces.parquet"), source })?;
        self.write_frame(&mut tr, "traces")?;
        let mut summary = summary_table(cells).map_err(|source| StoreError::Polars { path: self.dir.join("summary.csv"), source })?;
        self.write_csv(&mut summary, "summary.csv")
    }

    fn write_frame(&self, df: &mut DataFrame, stem: &str) -> Result<(), StoreError> {
        let path = self.dir.join(format!("{stem}.parquet"));
        let mut buf = Vec::new();
        ParquetWriter::new(&mut buf).finish(df).map_err(|source| StoreError::Polars { path: path.clone(), source })?;
        write_atomic(&path, &buf)?;
        self.write_csv(df, &format!("{stem}.csv"))
    }

    fn write_csv(&self, df: &mut DataFrame, name: &str) -> Result<(), StoreError> {
        let path = self.dir.join(name);
        let mut buf = Vec::new();
        CsvWriter::new(&mut buf).finish(df).map_err(|source| StoreError::Polars { path: path.clone(), source })?;
        write_atomic(&path, &buf)
    }
}

/// The records of an archive file.
fn read_archive(path: &Path) -> Result<Vec<CellRecord>, String> {
    let bytes = std::fs::read(path).map_err(|e| e.to_string())?;
    let text = zstd::decode_all(&bytes[..]).map_err(|e| format!("not a zstd archive: {e}"))?;
    text.split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .enumerate()
        .map(|(i, line)| serde_json::from_slice(line).map_err(|e| format!("record {}: {e}", i + 1)))
        .collect()
}

/// One row per (cell, metric); hyper-parameters as metrics `hp_<name>`; a failed cell as one
/// row with metric `failed` and its message.
pub fn long_table(cells: &[CellRecord]) -> PolarsResult<DataFrame> {
    let mut cols: [Vec<String>; 8] = Default::default();
    let mut split = Vec::new();
    let mut value: Vec<Option<f64>> = Vec::new();
    for c in cells {
        let mut push = |metric: String, v: Option<f64>, err: &str| {
            cols[0].push(c.experiment.clone());
            cols[1].push(c.key.clone());
            cols[2].push(c.dataset.clone());
            cols[3].push(c.method.clone());
            cols[4].push(c.method_kind.clone());
            cols[5].push(c.setting.clone());
            cols[6].push(metric);
            cols[7].push(err.to_string());
            split.push(c.split as u32);
            value.push(v);
        };
        match c.status {
            Status::Ok => {
                for (m, v) in &c.metrics {
                    push(m.clone(), Some(*v), "");
                }
                for (m, v) in c.derived_metrics() {
                    push(m, Some(v), "");
                }
                for (h, v) in &c.hyperparameters {
                    push(format!("hp_{h}"), Some(*v), "");
                }
            }
            Status::Failed => push("failed".into(), None, c.error.as_deref().unwrap_or("")),
        }
    }
    let [experiment, key, dataset, method, method_kind, setting, metric, error] = cols;
    DataFrame::new_infer_height(vec![
        Column::new("experiment".into(), experiment),
        Column::new("key".into(), key),
        Column::new("dataset".into(), dataset),
        Column::new("split".into(), split),
        Column::new("method".into(), method),
        Column::new("method_kind".into(), method_kind),
        Column::new("setting".into(), setting),
        Column::new("metric".into(), metric),
        Column::new("value".into(), value),
        Column::new("error".into(), error),
    ])
}

fn trace_table(cells: &[CellRecord]) -> PolarsResult<DataFrame> {
    let (mut key, mut dataset, mut method, mut setting, mut name) = (vec![], vec![], vec![], vec![], vec![]);
    let (mut split, mut iter, mut time, mut value) = (vec![], vec![], vec![], vec![]);
    for c in cells {
        for t in &c.trace {
            key.push(c.key.clone());
            dataset.push(c.dataset.clone());
            method.push(c.method.clone());
            setting.push(c.setting.clone());
            split.push(c.split as u32);
            name.push(t.name.clone());
            iter.push(t.iter as u32);
            time.push(t.time);
            value.push(t.value);
        }
    }
    DataFrame::new_infer_height(vec![
        Column::new("key".into(), key),
        Column::new("dataset".into(), dataset),
        Column::new("split".into(), split),
        Column::new("method".into(), method),
        Column::new("setting".into(), setting),
        Column::new("name".into(), name),
        Column::new("iter".into(), iter),
        Column::new("time".into(), time),
        Column::new("value".into(), value),
    ])
}

fn summary_table(cells: &[CellRecord]) -> PolarsResult<DataFrame> {
    let agg = aggregate(cells);
    let (mut dataset, mut method, mut setting, mut metric) = (vec![], vec![], vec![], vec![]);
    let (mut mean, mut sd, mut se, mut n, mut n_nonfinite) = (vec![], vec![], vec![], vec![], vec![]);
    for (k, a) in agg {
        dataset.push(k.dataset);
        method.push(k.method);
        setting.push(k.setting);
        metric.push(k.metric);
        mean.push(a.mean);
        sd.push(a.sd);
        se.push(a.se);
        n.push(a.n as u32);
        n_nonfinite.push(a.n_nonfinite as u32);
    }
    DataFrame::new_infer_height(vec![
        Column::new("dataset".into(), dataset),
        Column::new("method".into(), method),
        Column::new("setting".into(), setting),
        Column::new("metric".into(), metric),
        Column::new("mean".into(), mean),
        Column::new("sd".into(), sd),
        Column::new("se".into(), se),
        Column::new("n".into(), n),
        Column::new("n_nonfinite".into(), n_nonfinite),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(key: &str, split: usize, ok: bool) -> CellRecord {
        serde_json::from_value(serde_json::json!({
            "key": key, "experiment": "e", "dataset": "iris", "split": split, "method": "lap",
            "method_kind": "laplace", "setting": "", "status": if ok { "ok" } else { "failed" },
            "error": if ok { None } else { Some("it failed") }, "seed": 1, "metrics": {},
            "evidence_kind": null, "hyperparameters": {}, "diagnostics": {}, "trace": [],
            "handoff": { "log_hyperparameters": [], "names": [], "vectors": {} },
            "wall_seconds": 1.0, "cpu_seconds": 1.0
        }))
        .unwrap()
    }

    fn store(name: &str) -> Store {
        let dir = std::env::temp_dir().join(format!("mcgp-store-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        Store::at(dir)
    }

    fn wanted(split: usize) -> Vec<(String, String, String, usize)> {
        vec![("iris".into(), "lap".into(), String::new(), split)]
    }

    #[test]
    fn a_failed_cell_file_does_not_hide_the_same_key_computed_in_the_archive() {
        let s = store("failed-file");
        s.write_archive(&[record("k", 0, true)]).unwrap();
        s.write_cell(&record("k", 0, false)).unwrap();
        assert_eq!(Store::at(s.dir.clone()).read_cell("k").unwrap().unwrap().status, Status::Ok);
        // A computed cell file is the record, whatever the archive holds.
        s.write_archive(&[record("k", 0, false)]).unwrap();
        s.write_cell(&record("k", 0, true)).unwrap();
        assert_eq!(Store::at(s.dir.clone()).read_cell("k").unwrap().unwrap().status, Status::Ok);
    }

    #[test]
    fn a_failed_current_record_keeps_the_cells_last_computed_one_in_the_archive() {
        let s = store("failed-current");
        s.write_archive(&[record("old", 0, true)]).unwrap();
        let kept = s.superseded(&wanted(0), &[record("new", 0, false)]).unwrap();
        assert_eq!(kept.iter().map(|r| r.key.as_str()).collect::<Vec<_>>(), ["old"]);
        // A computed current record supersedes it.
        assert!(s.superseded(&wanted(0), &[record("new", 0, true)]).unwrap().is_empty());
        // With no current record, the older record is kept whatever its status.
        s.write_archive(&[record("old", 0, false)]).unwrap();
        let kept = Store::at(s.dir.clone()).superseded(&wanted(0), &[]).unwrap();
        assert_eq!(kept.iter().map(|r| r.key.as_str()).collect::<Vec<_>>(), ["old"]);
    }

    #[test]
    fn of_several_older_records_of_a_cell_the_newest_is_kept() {
        let s = store("newest");
        // Written in key order: the key order would pick the oldest.
        for key in ["a", "b", "c"] {
            s.write_cell(&record(key, 0, true)).unwrap();
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let kept = s.superseded(&wanted(0), &[]).unwrap();
        assert_eq!(kept.iter().map(|r| r.key.as_str()).collect::<Vec<_>>(), ["c"]);
    }

    #[test]
    fn an_unreadable_archive_is_an_error_and_is_not_counted_as_empty() {
        let s = store("damaged");
        std::fs::create_dir_all(&s.dir).unwrap();
        std::fs::write(s.dir.join(ARCHIVE), b"not zstd").unwrap();
        let e = s.read_cell("k").unwrap_err().to_string();
        assert!(e.contains("cells.jsonl.zst") && e.contains("not a zstd archive"), "{e}");
        assert!(s.archived_cells().is_err());
        // A record a newer version wrote (an unknown status) is refused the same way.
        let s = store("newer");
        std::fs::create_dir_all(&s.dir).unwrap();
        let line = serde_json::to_string(&record("k", 0, true)).unwrap().replace("\"ok\"", "\"paused\"");
        std::fs::write(s.dir.join(ARCHIVE), zstd::encode_all(line.as_bytes(), 1).unwrap()).unwrap();
        let e = s.archived_cells().unwrap_err().to_string();
        assert!(e.contains("record 1"), "{e}");
    }
}
