//! `mcgp status`: a spec's cells against what its experiment folder stores (computed, failed,
//! missing, stale with the reason read off the stored record), per method entry and dataset.
use super::{prepare, RunOptions};
use crate::data::Registry;
use crate::results::{CellRecord, Status, Store};
use crate::spec::Spec;
use std::collections::BTreeMap;

/// What `mcgp status` reports.
#[derive(Clone, Debug, PartialEq)]
pub struct StatusReport {
    pub total: usize,
    /// Cells stored under their current key.
    pub current: usize,
    /// Cells with no record at all.
    pub missing: usize,
    /// Of the cells not stored here, those another experiment under the same results root
    /// stores under the same key (a run takes their records instead of computing them).
    pub reusable: usize,
    /// Cells with a record only under an older key: "dataset entry [setting] split k: why".
    pub stale: Vec<String>,
    /// The CPU seconds the stale cells' stored records took: about what recomputing them costs
    /// on the machines that computed them (a numerics bump's rerun, planned before it starts).
    pub stale_cpu_seconds: f64,
    /// Stored cells that a run computes again before their missing or stale dependants: the
    /// archive leaves out the handoff vectors those need (a fresh clone has only the archive).
    pub sources_again: usize,
    /// The CPU seconds those sources' records took.
    pub sources_again_cpu_seconds: f64,
    /// The stale cells and the sources computed again, by their current key, with the CPU
    /// seconds their stored records took: the keys let the costs of several specs be summed
    /// without counting a cell they share twice.
    pub again: BTreeMap<String, f64>,
    /// Counts per method entry and dataset, in the spec's order.
    pub by_entry: Vec<EntryStatus>,
}

/// One method entry on one dataset in `mcgp status`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EntryStatus {
    pub entry: String,
    pub dataset: String,
    pub total: usize,
    /// Stored under their current key, as computed.
    pub ok: usize,
    /// Stored under their current key, as failed.
    pub failed: usize,
    /// Not stored under their current key (stale ones included).
    pub missing: usize,
    /// Of the missing, stored under an older key.
    pub stale: usize,
    /// The CPU seconds those stale records took.
    pub stale_cpu_seconds: f64,
    /// Of the missing, stored by another experiment under the same key.
    pub reusable: usize,
}

/// Compare a spec's cells with what its experiment folder stores: a record of the same
/// dataset, entry, setting and split under another key is stale, and the reason is read off
/// what the record says of its code and data.
pub fn status(spec: &Spec, registry: &Registry, opts: &RunOptions) -> anyhow::Result<StatusReport> {
    let store = Store::new(&opts.results_root, spec.name());
    let prepared = prepare(spec, registry, &opts.project_root, None)?;
    let keys: std::collections::BTreeSet<&str> = prepared.cells.iter().map(|c| c.key.as_str()).collect();
    let mut older: BTreeMap<(String, String, String, usize), CellRecord> = BTreeMap::new();
    let mut current = std::collections::BTreeSet::new();
    // Of several older records of a cell, the newest cell file's (as the archive keeps it).
    for rec in store.all_cells_newest_first()? {
        if keys.contains(rec.key.as_str()) {
            current.insert(rec.key.clone());
        } else {
            older.entry((rec.dataset.clone(), rec.method.clone(), rec.setting.clone(), rec.split)).or_insert(rec);
        }
    }
    // A fresh clone has only the committed archive: its records under other keys are stale too
    // (a cell file's record, the newer, takes precedence).
    for rec in store.archived_cells()? {
        if !keys.contains(rec.key.as_str()) {
            older.entry((rec.dataset.clone(), rec.method.clone(), rec.setting.clone(), rec.split)).or_insert(rec);
        }
    }
    let others = store.others()?;
    let mut report = StatusReport {
        total: prepared.cells.len(),
        current: 0,
        missing: 0,
        reusable: 0,
        stale: Vec::new(),
        stale_cpu_seconds: 0.0,
        sources_again: 0,
        sources_again_cpu_seconds: 0.0,
        again: BTreeMap::new(),
        by_entry: Vec::new(),
    };
    // What a run would take as done: the stored cells, and those another experiment stores.
    let mut done: BTreeMap<String, CellRecord> = BTreeMap::new();
    let mut by_entry: BTreeMap<(&str, &str), EntryStatus> = BTreeMap::new();
    for cell in &prepared.cells {
        let counts = by_entry.entry((cell.entry.name.as_str(), cell.dataset.as_str())).or_insert_with(|| EntryStatus {
            entry: cell.entry.name.clone(),
            dataset: cell.dataset.clone(),
            ..Default::default()
        });
        counts.total += 1;
        // A current record in a cell file, or only in the committed archive (a fresh clone).
        let stored =
            if current.contains(&cell.key) { store.read_usable_cell(&cell.key)? } else { store.read_cell(&cell.key).ok().flatten() };
        if let Some(rec) = stored {
            report.current += 1;
            match rec.status {
                Status::Ok => counts.ok += 1,
                Status::Failed => counts.failed += 1,
            }
            done.insert(cell.key.clone(), rec);
            continue;
        }
        counts.missing += 1;
        if let Some(rec) = super::stored_elsewhere(&others, cell)? {
            counts.reusable += 1;
            report.reusable += 1;
            done.insert(cell.key.clone(), rec);
        }
        let Some(rec) = older.get(&(cell.dataset.clone(), cell.entry.name.clone(), cell.setting.clone(), cell.split)) else {
            report.missing += 1;
            continue;
        };
        counts.stale += 1;
        counts.stale_cpu_seconds += rec.cpu_seconds;
        report.stale_cpu_seconds += rec.cpu_seconds;
        report.again.insert(cell.key.clone(), rec.cpu_seconds);
        let why = match (&rec.numerics, &rec.data_hash) {
            (None, _) | (_, None) => "stored before code and data versions were recorded".to_string(),
            (Some(n), _) if n != &cell.numerics => format!("numerics {n} -> {}", cell.numerics),
            (_, Some(d)) if d != &cell.data_hash => "the data changed".to_string(),
            _ => "the spec entry, the split or the source cell changed".to_string(),
        };
        let setting = if cell.setting.is_empty() { String::new() } else { format!(" [{}]", cell.setting) };
        report.stale.push(format!("{} {}{setting} split {}: {why}", cell.dataset, cell.entry.name, cell.split));
    }
    // The stored sources a run computes again (archived without the handoff vectors a cell it
    // computes needs), decided as the run decides.
    let stored_cpu: BTreeMap<String, f64> = done.iter().map(|(k, r)| (k.clone(), r.cpu_seconds)).collect();
    super::sources_to_compute(&prepared.cells, &mut done, |_| true);
    for (key, cpu) in stored_cpu.into_iter().filter(|(k, _)| !done.contains_key(k)) {
        report.sources_again += 1;
        report.sources_again_cpu_seconds += cpu;
        report.again.insert(key, cpu);
    }
    // In the spec's order: datasets, then method entries.
    for dataset in &spec.raw.datasets {
        for m in &spec.raw.methods {
            if let Some(c) = by_entry.remove(&(m.name.as_str(), dataset.as_str())) {
                report.by_entry.push(c);
            }
        }
    }
    Ok(report)
}
