//! Provenance of a run: written as `results/<experiment>/manifest.json` and shown in the report.
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    pub experiment: String,
    pub title: String,
    /// The paper the spec reproduces (e.g. `girolami-rogers2006`), if any.
    pub paper: Option<String>,
    pub spec_path: String,
    /// blake3 of the spec text.
    pub spec_hash: String,
    pub spec_text: String,
    pub git_commit: String,
    pub git_dirty: bool,
    pub crate_version: String,
    pub rustc: String,
    pub host: String,
    /// The machine of the run (`provenance::machine`); empty where no run is described (a
    /// manifest `mcgp report` wrote) and in manifests before 2026-12-03.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub machine: String,
    pub threads: usize,
    /// RFC 3339 UTC.
    pub started: String,
    pub finished: String,
    /// Sum of the per-cell CPU seconds of every stored cell (including cells from earlier, resumed runs).
    pub cpu_seconds: f64,
    pub wall_seconds: f64,
    pub cells_total: usize,
    pub cells_computed: usize,
    pub cells_cached: usize,
    /// Of the cached cells, those taken from another experiment's store (same cell key).
    #[serde(default)]
    pub cells_reused: usize,
    /// Of the cached cells, those computed at another commit than this run's (their method's
    /// numerics version and data are unchanged, so their key is the same).
    #[serde(default)]
    pub cells_older_code: usize,
    pub cells_failed: usize,
    /// Cells of the spec with no stored record (a report rendered from an interrupted run).
    #[serde(default)]
    pub cells_missing: usize,
}
