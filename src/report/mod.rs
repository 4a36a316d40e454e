//! Static HTML reports: one page per experiment (tables beside the paper's numbers,
//! figures as SVG, provenance, failures) and an index page over all experiments.
//!
//! Everything shown is computed here into view-model structs; the Tera templates only
//! lay them out (no arithmetic in templates).
mod figures;
pub(crate) mod format;
// The spec check reads a paper value's setting as the report does.
pub(crate) use format::parse_setting;
mod tables;
mod timing;
mod tolerance;

pub use tables::MissCounts;
pub use tolerance::within_tolerance;

use crate::results::{aggregate, CellRecord, Manifest, Status};
use crate::spec::{FigureSpec, TableSpec};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

const EXPERIMENT_TEMPLATE: &str = include_str!("templates/experiment.html");
const INDEX_TEMPLATE: &str = include_str!("templates/index.html");
const STYLE: &str = include_str!("templates/style.css");

/// Everything one experiment's page is made from.
pub struct ReportInput<'a> {
    pub manifest: &'a Manifest,
    pub tables: &'a [TableSpec],
    pub figures: &'a [FigureSpec],
    /// Spec order.
    pub datasets: &'a [String],
    /// Spec order of method entry names.
    pub methods: &'a [String],
    pub cells: &'a [CellRecord],
    /// (data set, method entry, setting) of every cell group the spec expands
    /// (`spec::expand::planned_groups`): a published number with no cells is "not run yet" only
    /// where the spec plans some, else a miss at a setting the spec does not run.
    pub planned: &'a BTreeSet<(String, String, String)>,
}

/// How well an experiment reproduced its paper; written as `score.json` beside the page.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Score {
    pub experiment: String,
    pub title: String,
    pub paper: Option<String>,
    /// Published numbers within tolerance of this run's mean (each counted once, against the
    /// entry the spec names as its reproduction).
    pub matched: usize,
    /// Published numbers scored: one per paper value (variants, derived values and repeats are
    /// shown but not scored). A paper value with no run result counts here, unmatched.
    pub compared: usize,
    /// The scored numbers missed (compared - matched), by class: decided against the paper by a
    /// committed diagnostic, explained by a stated deviation, open.
    #[serde(default)]
    pub misses: MissCounts,
    pub cells_failed: usize,
    /// Cells of the spec not stored yet (a partial report of an interrupted run).
    #[serde(default)]
    pub cells_missing: usize,
    /// When the run finished (RFC 3339), from the manifest.
    pub finished: String,
}

#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("cannot write {path}: {source}")]
    Write { path: PathBuf, source: std::io::Error },
    #[error("cannot read {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("cannot draw figure `{id}`: {message}")]
    Figure { id: String, message: String },
    #[error("cannot render template {template}: {message}")]
    Template { template: String, message: String },
    #[error("cannot encode {path}: {source}")]
    Json { path: PathBuf, source: serde_json::Error },
}

/// Writes `<out_dir>/index.html`, `<out_dir>/figures/<figure id>.svg` and
/// `<out_dir>/score.json` (last, so a score means the page is complete); returns the score.
pub fn render_experiment(input: &ReportInput, out_dir: &Path) -> Result<Score, ReportError> {
    let figures_dir = out_dir.join("figures");
    std::fs::create_dir_all(&figures_dir).map_err(|source| ReportError::Write { path: figures_dir.clone(), source })?;

    let aggregates = aggregate(input.cells);
    let tables: Vec<tables::TableView> = input.tables.iter().map(|t| tables::build(t, input, &aggregates)).collect();

    let mut figure_views = Vec::new();
    for spec in input.figures {
        // The id becomes a file name: refuse anything that could leave figures/.
        if spec.id.is_empty() || spec.id.starts_with('.') || spec.id.contains(['/', '\\']) {
            return Err(ReportError::Figure { id: spec.id.clone(), message: "the id is not a plain file name".into() });
        }
        let drawn = figures::draw(spec, input).map_err(|message| ReportError::Figure { id: spec.id.clone(), message })?;
        write_atomic(&figures_dir.join(format!("{}.svg", spec.id)), drawn.svg.as_bytes())?;
        let caption = spec.caption.iter().cloned().chain(drawn.notes).collect::<Vec<_>>().join(" ");
        figure_views.push(FigureView { id: spec.id.clone(), title: spec.title.clone(), src: format!("figures/{}.svg", spec.id), caption });
    }

    let m = input.manifest;
    let score = Score {
        experiment: m.experiment.clone(),
        title: m.title.clone(),
        paper: m.paper.clone(),
        matched: tables.iter().map(|t| t.matched).sum(),
        compared: tables.iter().map(|t| t.compared).sum(),
        misses: tables.iter().fold(MissCounts::default(), |a, t| a.sum(t.misses)),
        cells_failed: input.cells.iter().filter(|c| c.status == Status::Failed).count(),
        cells_missing: input.manifest.cells_missing,
        finished: m.finished.clone(),
    };
    let failed = input
        .cells
        .iter()
        .filter(|c| c.status == Status::Failed)
        .map(|c| FailedView {
            dataset: c.dataset.clone(),
            split: c.split,
            method: c.method.clone(),
            setting: c.setting.clone(),
            error: c.error.clone().unwrap_or_else(|| "(no message)".into()),
        })
        .collect();
    let view = ExperimentView {
        style: STYLE,
        title: m.title.clone(),
        experiment: m.experiment.clone(),
        paper: m.paper.clone(),
        score: score_view(score.matched, score.compared),
        provenance: provenance(m, input.cells),
        spec_path: m.spec_path.clone(),
        spec_text: m.spec_text.clone(),
        tables,
        figures: figure_views,
        timing: timing::build(input),
        threads: m.threads,
        failed,
        cells_missing: m.cells_missing,
    };
    let html = render_template("experiment.html", EXPERIMENT_TEMPLATE, &view)?;
    write_atomic(&out_dir.join("index.html"), html.as_bytes())?;
    let score_path = out_dir.join("score.json");
    let json = serde_json::to_string_pretty(&score).map_err(|source| ReportError::Json { path: score_path.clone(), source })?;
    write_atomic(&score_path, json.as_bytes())?;
    Ok(score)
}

/// Writes `<reports_dir>/index.html` listing every experiment found as
/// `<reports_dir>/*/score.json`, with its reproduction score and a link to its page.
/// An unreadable score file is listed as such rather than hiding the other experiments.
pub fn render_index(reports_dir: &Path) -> Result<(), ReportError> {
    let read_err = |source| ReportError::Read { path: reports_dir.to_path_buf(), source };
    // Runs of two experiments render the index side by side: one reading the scores while the
    // other writes its own and the index could end with the index that misses the other's new
    // score written last. The read and the write are one step under this lock.
    let lock_path = reports_dir.join(".index.lock");
    let lock_err = |source| ReportError::Write { path: lock_path.clone(), source };
    std::fs::create_dir_all(reports_dir).map_err(lock_err)?;
    let lock = std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(&lock_path).map_err(lock_err)?;
    lock.lock().map_err(lock_err)?;
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(reports_dir)
        .map_err(read_err)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("score.json").is_file())
        .collect();
    dirs.sort();
    let mut rows = Vec::new();
    let mut problems = Vec::new();
    let mut scores = Vec::new();
    for dir in dirs {
        let name = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let path = dir.join("score.json");
        let parsed = std::fs::read_to_string(&path)
            .map_err(|e| e.to_string())
            .and_then(|text| serde_json::from_str::<Score>(&text).map_err(|e| e.to_string()));
        match parsed {
            Ok(mut s) => {
                // A score written before misses were classified (or a miss the spec says nothing
                // about) is open.
                let unclassified = s.compared.saturating_sub(s.matched).saturating_sub(s.misses.total());
                s.misses.open += unclassified;
                scores.push((s.matched, s.compared, s.misses));
                rows.push(IndexRow {
                    href: format!("{name}/index.html"),
                    experiment: s.experiment,
                    title: s.title,
                    paper: s.paper,
                    score: score_view(s.matched, s.compared),
                    misses: s.misses,
                    cells_failed: s.cells_failed,
                    cells_missing: s.cells_missing,
                    finished: s.finished,
                })
            }
            Err(e) => problems.push(format!("{name}/score.json: {e}")),
        }
    }
    let (matched, compared, misses) = scores.iter().fold((0, 0, MissCounts::default()), |(m, c, x), s| (m + s.0, c + s.1, x.sum(s.2)));
    let total = score_view(matched, compared);
    let html = render_template("index.html", INDEX_TEMPLATE, &IndexView { style: STYLE, rows, problems, total, misses })?;
    write_atomic(&reports_dir.join("index.html"), html.as_bytes())
}

// ---------------------------------------------------------------------------------------
// View models

#[derive(Serialize)]
struct ExperimentView {
    style: &'static str,
    title: String,
    experiment: String,
    paper: Option<String>,
    score: ScoreView,
    provenance: Vec<KeyValue>,
    spec_path: String,
    spec_text: String,
    tables: Vec<tables::TableView>,
    figures: Vec<FigureView>,
    timing: timing::TimingView,
    /// Threads of the run (cells that ran at the same time shared the machine).
    threads: usize,
    failed: Vec<FailedView>,
    /// Cells of the spec not stored yet: the header says the report is partial.
    cells_missing: usize,
}

#[derive(Serialize)]
struct KeyValue {
    key: &'static str,
    value: String,
}

#[derive(Serialize)]
struct ScoreView {
    text: String,
    /// `good` (all matched), `partial`, `bad` (none) or `none` (nothing compared).
    class: &'static str,
}

#[derive(Serialize)]
struct FigureView {
    id: String,
    title: String,
    src: String,
    caption: String,
}

#[derive(Serialize)]
struct FailedView {
    dataset: String,
    split: usize,
    method: String,
    setting: String,
    error: String,
}

#[derive(Serialize)]
struct IndexView {
    style: &'static str,
    rows: Vec<IndexRow>,
    problems: Vec<String>,
    /// Published numbers matched over all experiments.
    total: ScoreView,
    /// Misses over all experiments, by class.
    misses: MissCounts,
}

#[derive(Serialize)]
struct IndexRow {
    href: String,
    experiment: String,
    title: String,
    paper: Option<String>,
    score: ScoreView,
    misses: MissCounts,
    cells_failed: usize,
    cells_missing: usize,
    finished: String,
}

fn score_view(matched: usize, compared: usize) -> ScoreView {
    if compared == 0 {
        return ScoreView { text: "no paper values".into(), class: "none" };
    }
    let class = match matched {
        m if m == compared => "good",
        0 => "bad",
        _ => "partial",
    };
    let pct = 100.0 * matched as f64 / compared as f64;
    ScoreView { text: format!("{matched} / {compared} ({pct:.0}%)"), class }
}

/// The commits the cells were computed at, most cells first (`abc1234 (480 cells), ...`): the
/// manifest's commit is the last unsharded run's, while shards and reuse bring cells computed by
/// other code (with the same numerics, or their keys would differ).
fn cell_commits(cells: &[CellRecord]) -> String {
    counted(cells.iter().map(|c| c.commit.as_deref().map(|h| h.chars().take(7).collect())))
}

/// The machines the cells were computed on, most cells first: their times are those machines'
/// (a resumed run, shards and reuse mix them).
fn cell_machines(cells: &[CellRecord]) -> String {
    counted(cells.iter().map(|c| c.machine.clone()))
}

/// Each distinct value with its count, most first, then by value; None as "not recorded".
fn counted(values: impl Iterator<Item = Option<String>>) -> String {
    let mut counts: std::collections::BTreeMap<String, usize> = std::collections::BTreeMap::new();
    for v in values {
        *counts.entry(v.unwrap_or_else(|| "not recorded".to_string())).or_default() += 1;
    }
    let mut counts: Vec<(String, usize)> = counts.into_iter().collect();
    counts.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    counts.iter().map(|(value, n)| format!("{value} ({n} cell{})", if *n == 1 { "" } else { "s" })).collect::<Vec<_>>().join(", ")
}

fn provenance(m: &Manifest, records: &[CellRecord]) -> Vec<KeyValue> {
    let commit = if m.git_dirty { format!("{} (dirty: uncommitted changes)", m.git_commit) } else { m.git_commit.clone() };
    let mut cells = format!("{} total: {} computed, {} cached, {} failed", m.cells_total, m.cells_computed, m.cells_cached, m.cells_failed);
    if m.cells_reused > 0 {
        cells.push_str(&format!(" ({} of the cached taken from other experiments with the same cell key)", m.cells_reused));
    }
    if m.cells_missing > 0 {
        cells.push_str(&format!(", {} not run yet (partial report)", m.cells_missing));
    }
    [
        ("Git commit (this report's run)", commit),
        ("Cells computed at", cell_commits(records)),
        ("Cells computed on", cell_machines(records)),
        ("Spec", format!("{} (blake3 {})", m.spec_path, m.spec_hash)),
        ("mcgp version", m.crate_version.clone()),
        ("rustc", m.rustc.clone()),
        // A manifest `mcgp report` made (threads 0) describes no run: every cell was computed
        // by an earlier one (their commits are in "Cells computed at").
        (
            "Host",
            if m.threads == 0 {
                format!("{} (report rendered from stored cells, no run)", m.host)
            } else {
                let machine = if m.machine.is_empty() { String::new() } else { format!("; {}", m.machine) };
                format!("{} ({} threads{machine})", m.host, m.threads)
            },
        ),
        ("Started", m.started.clone()),
        ("Finished", m.finished.clone()),
        ("Wall time", if m.threads == 0 { "none (no run)".to_string() } else { format::duration(m.wall_seconds) }),
        ("CPU time (all cells)", format::duration(m.cpu_seconds)),
        ("Cells", cells),
    ]
    .into_iter()
    .map(|(key, value)| KeyValue { key, value })
    .collect()
}

fn render_template(name: &str, source: &str, view: &impl Serialize) -> Result<String, ReportError> {
    let fail = |e: tera::Error| {
        // Tera's top-level message rarely says what went wrong; the cause chain does.
        let mut message = e.to_string();
        let mut source = std::error::Error::source(&e);
        while let Some(s) = source {
            message.push_str(&format!(": {s}"));
            source = s.source();
        }
        ReportError::Template { template: name.to_string(), message }
    };
    let mut tera = tera::Tera::default();
    tera.set_escape_fn(escape_html);
    tera.add_raw_template(name, source).map_err(fail)?;
    let context = tera::Context::from_serialize(view).map_err(fail)?;
    tera.render(name, &context).map_err(fail)
}

/// HTML escaping for text and quoted attributes. Unlike Tera's default it leaves `/`
/// alone, so paths such as `figures/x.svg` stay readable in the page source.
fn escape_html(input: &str) -> String {
    let mut out = String::with_capacity(input.len());
    for c in input.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#x27;"),
            c => out.push(c),
        }
    }
    out
}

fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), ReportError> {
    crate::atomic::write_atomic(path, bytes).map_err(|source| ReportError::Write { path: path.to_path_buf(), source })
}
