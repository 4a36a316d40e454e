//! Running the pending cells: each as soon as the cell it takes hyper-parameters from is done
//! (or one at a time, in order), storing each finished cell atomically, with progress on a bar
//! or as plain lines.
use super::{run_cell, Prepared};
use crate::results::{CellRecord, Status, Store};
use crate::spec::{Cell, Spec};
use indicatif::{ProgressBar, ProgressStyle};
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Instant;
/// Runs pending cells and, as each finishes, the cells waiting on it.
pub(super) struct Scheduler<'a> {
    pub(super) spec: &'a Spec,
    pub(super) prepared: &'a Prepared,
    pub(super) store: &'a Store,
    pub(super) bar: &'a ProgressBar,
    /// Without a terminal (no bar): a progress line on stderr at most every `ProgressLog::every`.
    pub(super) log: Option<Mutex<ProgressLog>>,
    /// Stored and finished cells by key.
    pub(super) done: Mutex<BTreeMap<String, CellRecord>>,
    /// Pending cells by the key of the cell they wait on.
    pub(super) dependants: BTreeMap<&'a str, Vec<&'a Cell>>,
    /// The first error that stops the run (a result that could not be stored).
    pub(super) failure: Mutex<Option<anyhow::Error>>,
    /// Cells stored by this run; its lock also serialises the writes (see `abort_after`).
    pub(super) stored: Mutex<usize>,
    /// Test hook: abort the process after this many stored cells, as a kill would.
    pub(super) abort_after: Option<usize>,
    /// Test hook: sleep after storing each cell.
    pub(super) pause_after_cell: Option<std::time::Duration>,
    /// The code's commit, stored in every record.
    pub(super) commit: Option<String>,
}

impl<'a> Scheduler<'a> {
    pub(super) fn run_then_spawn_dependants<'s>(&'s self, scope: &rayon::ScopeFifo<'s>, cell: &'a Cell)
    where
        'a: 's,
    {
        for &dependant in self.run_one(cell) {
            scope.spawn_fifo(move |scope| self.run_then_spawn_dependants(scope, dependant));
        }
    }

    /// `one_cell_at_a_time`: every cell in turn on this (pool) thread, its dependants after
    /// it, so the other threads are free for the cell's own parallel products.
    pub(super) fn run_in_turn(&self, roots: Vec<&'a Cell>) {
        let mut queue: std::collections::VecDeque<&'a Cell> = roots.into();
        while let Some(cell) = queue.pop_front() {
            queue.extend(self.run_one(cell).iter().copied());
        }
    }

    /// Run and store one cell; returns the cells waiting on it.
    fn run_one(&self, cell: &'a Cell) -> &[&'a Cell] {
        if self.failure.lock().expect("no panic holds the lock").is_some() {
            return &[];
        }
        let source = cell.depends_on.as_ref().and_then(|d| self.done.lock().expect("no panic holds the lock").get(d).cloned());
        let record = run_cell(self.spec, cell, self.prepared, source.as_ref(), self.commit.as_deref());
        // Storing and counting are one step under the lock, so the abort hook stops the
        // process with exactly `abort_after` cells on disk (no other thread can store one
        // between this write and the abort).
        let n = {
            let mut stored = self.stored.lock().expect("no panic holds the lock");
            if let Err(e) = self.store.write_cell(&record) {
                self.failure.lock().expect("no panic holds the lock").get_or_insert(e.into());
                return &[];
            }
            *stored += 1;
            if self.abort_after == Some(*stored) {
                std::process::abort();
            }
            *stored
        };
        if let Some(pause) = self.pause_after_cell {
            std::thread::sleep(pause);
        }
        self.bar.inc(1);
        if record.status == Status::Failed {
            self.bar.println(format!(
                "failed: {} {} split {}: {}",
                cell.dataset,
                cell.entry.name,
                cell.split,
                record.error.as_deref().unwrap_or("")
            ));
        }
        if let Some(log) = &self.log {
            log.lock().expect("no panic holds the lock").cell_done(n, record.status == Status::Failed);
        }
        self.done.lock().expect("no panic holds the lock").insert(cell.key.clone(), record);
        self.dependants.get(cell.key.as_str()).map_or(&[], |d| d.as_slice())
    }
}

/// Plain progress lines for runs without a terminal (e.g. under nohup).
pub(super) struct ProgressLog {
    pub(super) started: Instant,
    pub(super) last: Instant,
    pub(super) every: std::time::Duration,
    pub(super) total: usize,
    pub(super) failed: usize,
}

impl ProgressLog {
    fn cell_done(&mut self, done: usize, failed: bool) {
        self.failed += failed as usize;
        if self.last.elapsed() >= self.every {
            self.last = Instant::now();
            let elapsed = crate::report::format::duration(self.started.elapsed().as_secs_f64());
            eprintln!("{done}/{} cells computed ({} failed), {elapsed}", self.total, self.failed);
        }
    }
}

pub(super) fn progress_bar(enabled: bool, n: usize) -> ProgressBar {
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
