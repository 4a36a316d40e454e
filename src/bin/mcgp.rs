//! The `mcgp` command line: run, check, report and list. Glue only; the work lives in the library.
use clap::{Parser, Subcommand};
use mcgp::data::{default_data_dir, Registry};
use mcgp::runner::{self, RunOptions, Shard};
use mcgp::spec::{self, Spec};
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// The default spec, embedded so `mcgp` with no arguments runs on a fresh checkout.
const QUICKSTART: &str = include_str!("../../experiments/quickstart.yaml");
const QUICKSTART_PATH: &str = "experiments/quickstart.yaml";

#[derive(Parser)]
#[command(
    name = "mcgp",
    version,
    about = "Multi-class Gaussian process classification: reproduce papers, compare methods, write HTML reports"
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(clap::Args, Clone)]
struct Paths {
    /// Folder of per-experiment results.
    #[arg(long, default_value = "results")]
    results: PathBuf,
    /// Folder of HTML reports.
    #[arg(long, default_value = "reports")]
    reports: PathBuf,
    /// Data folder (default: $MCGP_DATA_DIR, else the nearest data/datasets.yaml).
    #[arg(long)]
    data: Option<PathBuf>,
}

#[derive(Subcommand)]
enum Command {
    /// Run every cell of a spec that is not stored yet, then write the tables and the report.
    Run {
        /// The spec (YAML); default: the embedded experiments/quickstart.yaml.
        spec: Option<PathBuf>,
        /// Worker threads (default: all cores, or RAYON_NUM_THREADS).
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
        threads: Option<u64>,
        /// Recompute cells stored as failed.
        #[arg(long)]
        retry_failed: bool,
        /// Keep cells stored as timed out (by default a run retries them: a timeout depends on
        /// the machine).
        #[arg(long, conflicts_with = "retry_failed")]
        keep_failed: bool,
        /// Recompute every cell, ignoring stored results (e.g. after changing a method's code).
        #[arg(long)]
        recompute: bool,
        /// Compute only the cells of these datasets (comma-separated); the report then shows
        /// the others as not run yet, and a later run without the option completes them.
        #[arg(long, value_delimiter = ',')]
        datasets: Vec<String>,
        /// Compute only the cells of these method entries (comma-separated), and the unstored
        /// cells they take hyper-parameters from: e.g. after one method's numerics changed in a
        /// spec run only in part. Combines with --datasets.
        #[arg(long, value_delimiter = ',')]
        entries: Vec<String>,
        /// Skip the HTML report.
        #[arg(long)]
        no_report: bool,
        /// Compute only shard I of N (0 <= I < N; e.g. one task of a job array sharing the
        /// results folder): every chain of dependent cells falls in one shard. Writes no tables
        /// or report; a run without --shard, or `mcgp report`, collects every stored cell.
        #[arg(long, value_name = "I/N")]
        shard: Option<Shard>,
        /// With --shard: the chains' assignment that `mcgp slurm` wrote (default: a hash of
        /// each chain's first cell key).
        #[arg(long, value_name = "FILE", requires = "shard")]
        shard_plan: Option<PathBuf>,
        #[command(flatten)]
        paths: Paths,
    },
    /// Write SLURM scripts that run a spec as a job array (one task per shard) over the shared
    /// results folder, and a collection job that renders the report after it.
    Slurm {
        spec: PathBuf,
        /// Array tasks (shards).
        #[arg(long, default_value_t = 4)]
        shards: usize,
        /// Time limit of each task, in SLURM's syntax (e.g. 2:00:00).
        #[arg(long)]
        time: Option<String>,
        /// CPUs per task (the task runs that many threads).
        #[arg(long, default_value_t = 1)]
        cpus_per_task: usize,
        /// SLURM partition.
        #[arg(long)]
        partition: Option<String>,
        /// Submit with sbatch and print the job ids.
        #[arg(long)]
        submit: bool,
        #[command(flatten)]
        paths: Paths,
    },
    /// Which of a spec's cells are stored, missing, or stored for older code or data (stale);
    /// with several specs, also what recomputing their stale cells costs in all (a cell they
    /// share counted once).
    Status {
        #[arg(required = true, num_args = 1..)]
        specs: Vec<PathBuf>,
        #[command(flatten)]
        paths: Paths,
    },
    /// Check a spec without running it.
    Check {
        spec: PathBuf,
        #[command(flatten)]
        paths: Paths,
    },
    /// Re-render the report of a spec from its stored cells (while a run of it is under way, a
    /// snapshot of the cells stored so far, leaving the tables to the run).
    Report {
        spec: PathBuf,
        /// While a run of the spec is under way, wait for it to end and then write the tables
        /// and the report (the SLURM collection job does), instead of rendering a snapshot.
        #[arg(long)]
        wait: bool,
        #[command(flatten)]
        paths: Paths,
    },
    /// List the datasets and methods known; with a method's name, its settings and their defaults.
    List {
        /// A method (e.g. laplace): print every setting it takes with its default, as a spec's
        /// `settings:` would write them.
        method: Option<String>,
        #[command(flatten)]
        paths: Paths,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        // A closed pipe (`mcgp status SPEC | head -1`) ends the output, not in an error: the
        // reader has what it wanted (ripgrep does the same).
        Err(e) if e.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", error_chain(&e));
            ExitCode::from(2)
        }
    }
}

/// On Ctrl-C or SIGTERM during `mcgp run`, end as the signal would (status 128 + its number) after one line on
/// what is kept: every cell is written whole by rename, so the cells finished so far are stored
/// and a new run takes them up (a half-written temporary file is removed by the next run).
fn say_what_an_interruption_leaves() {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let Ok(mut signals) = signal_hook::iterator::Signals::new([SIGINT, SIGTERM]) else { return };
    std::thread::spawn(move || {
        if let Some(signal) = signals.forever().next() {
            eprintln!("\ninterrupted: the cells finished so far are stored; the same `mcgp run` again computes only the rest");
            std::process::exit(128 + signal);
        }
    });
}

/// The error and its causes, as anyhow's `{:#}` joins them, except a cause that the message
/// so far already ends with: most of the crate's errors print their cause in their own message
/// (thiserror's `source` fields), which `{:#}` would repeat.
fn error_chain(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if out.is_empty() {
            out = text;
        } else if !out.ends_with(&text) {
            out = format!("{out}: {text}");
        }
    }
    out
}

fn registry(paths: &Paths) -> anyhow::Result<Registry> {
    let dir = paths.data.clone().unwrap_or_else(default_data_dir);
    Ok(Registry::load(&dir)?)
}

fn load_spec(path: Option<&Path>, registry: &Registry) -> anyhow::Result<Spec> {
    match path {
        Some(p) => Ok(spec::load(p, registry)?),
        None => Ok(spec::parse(QUICKSTART, &format!("{QUICKSTART_PATH} (embedded)"), registry)?),
    }
}

/// The checkout whose commit the results credit and against which a spec's relative split
/// files resolve: the data folder's parent when that is a checkout (the default layout), else
/// the nearest checkout around the working directory (`--data /mnt/datasets` run from inside
/// one), else the data folder's parent as before.
fn project_root(data_dir: &Path) -> PathBuf {
    let is_checkout = |d: &Path| d.join(".git").exists() || d.join("Cargo.toml").is_file();
    // `--data d1` has the parent "" (not a path canonicalize accepts): the working directory.
    let parent = data_dir.parent().filter(|p| !p.as_os_str().is_empty()).map(Path::to_path_buf).unwrap_or_else(|| PathBuf::from("."));
    if is_checkout(&parent) {
        return parent;
    }
    std::env::current_dir().ok().and_then(|cwd| cwd.ancestors().find(|d| is_checkout(d)).map(Path::to_path_buf)).unwrap_or(parent)
}

fn options(
    paths: &Paths,
    registry: &Registry,
    threads: Option<usize>,
    retry_failed: bool,
    recompute: bool,
    render_report: bool,
) -> RunOptions {
    let data_dir = registry.data_dir().to_path_buf();
    let project_root = project_root(&data_dir);
    RunOptions {
        project_root,
        data_dir,
        results_root: paths.results.clone(),
        reports_root: paths.reports.clone(),
        threads,
        retry_failed,
        keep_failed: false,
        recompute,
        datasets: Vec::new(),
        entries: Vec::new(),
        progress: std::io::stderr().is_terminal(),
        render_report,
        shard: None,
        shard_plan: None,
    }
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let default_paths = Paths { results: "results".into(), reports: "reports".into(), data: None };
    let command = cli.command.unwrap_or(Command::Run {
        spec: None,
        threads: None,
        retry_failed: false,
        keep_failed: false,
        recompute: false,
        datasets: Vec::new(),
        entries: Vec::new(),
        no_report: false,
        shard: None,
        shard_plan: None,
        paths: default_paths,
    });
    match command {
        Command::Run { spec, threads, retry_failed, keep_failed, recompute, datasets, entries, no_report, shard, shard_plan, paths } => {
            say_what_an_interruption_leaves();
            let registry = registry(&paths)?;
            let spec = load_spec(spec.as_deref(), &registry)?;
            // A shard renders nothing: the other shards' cells are not all stored yet.
            let mut opts = options(&paths, &registry, threads.map(|t| t as usize), retry_failed, recompute, !no_report && shard.is_none());
            opts.datasets = datasets;
            opts.entries = entries;
            opts.keep_failed = keep_failed;
            opts.shard = shard;
            opts.shard_plan = shard_plan;
            if let Some(shard) = shard {
                eprintln!("running {} ({}), shard {shard}, on {}", spec.name(), spec.file, runner::machine());
                let summary = runner::run(&spec, &registry, &opts)?;
                let m = &summary.manifest;
                eprintln!(
                    "shard {shard}: {} cells: {} computed, {} stored, {} failed; {:.1} s wall, {:.1} s CPU computing; tables and report: `mcgp report` (or `mcgp run`) once every shard is done",
                    m.cells_total, m.cells_computed, m.cells_cached, m.cells_failed, m.wall_seconds, summary.computed_cpu_seconds + 0.0
                );
                return Ok(if summary.failed() > 0 { ExitCode::from(1) } else { ExitCode::SUCCESS });
            }
            eprintln!("running {} ({}) on {}", spec.name(), spec.file, runner::machine());
            let summary = runner::run(&spec, &registry, &opts)?;
            let m = &summary.manifest;
            let not_run = if m.cells_missing > 0 {
                format!(", {} not run (left out by --datasets / --entries)", m.cells_missing)
            } else {
                String::new()
            };
            let all_cpu = if m.cpu_seconds.to_bits() != (summary.computed_cpu_seconds + 0.0).to_bits() {
                format!(" ({:.1} s CPU in all the cells)", m.cpu_seconds)
            } else {
                String::new()
            };
            eprintln!(
                "{} cells: {} computed, {} stored ({} from other experiments, {} computed at older commits with the same numerics){not_run}; {} of them failed; {:.1} s wall, {:.1} s CPU computing{all_cpu}",
                m.cells_total, m.cells_computed, m.cells_cached, m.cells_reused, m.cells_older_code, m.cells_failed, m.wall_seconds, summary.computed_cpu_seconds + 0.0
            );
            eprintln!("results: {}", opts.results_root.join(spec.name()).display());
            if !no_report {
                eprintln!("report:  {}", opts.reports_root.join(spec.name()).join("index.html").display());
            }
            Ok(if summary.failed() > 0 { ExitCode::from(1) } else { ExitCode::SUCCESS })
        }
        Command::Check { spec, paths } => {
            let registry = registry(&paths)?;
            let spec = load_spec(Some(&spec), &registry)?;
            let opts = options(&paths, &registry, None, false, false, false);
            let cells = runner::check_with_data(&spec, &registry, &opts.project_root)?;
            writeln!(
                std::io::stdout(),
                "{}: ok ({} datasets, {} method entries, {cells} cells, {} tables, {} figures)",
                spec.file,
                spec.raw.datasets.len(),
                spec.raw.methods.len(),
                spec.raw.tables.len(),
                spec.raw.figures.len()
            )?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Status { specs, paths } => {
            let registry = registry(&paths)?;
            let mut again: std::collections::BTreeMap<String, f64> = std::collections::BTreeMap::new();
            for spec in &specs {
                let spec = load_spec(Some(spec), &registry)?;
                let opts = options(&paths, &registry, None, false, false, false);
                let status = runner::status(&spec, &registry, &opts)?;
                print_status(&spec.file, &status)?;
                for (key, cpu) in &status.again {
                    again.entry(key.clone()).or_insert(*cpu);
                }
            }
            if specs.len() > 1 {
                writeln!(
                    std::io::stdout(),
                    "{} specs: {} distinct cells to compute again (stale, or sources archived without their handoff vectors), whose stored records took {:.1} CPU s",
                    specs.len(),
                    again.len(),
                    again.values().sum::<f64>()
                )?;
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Slurm { spec: spec_path, shards, time, cpus_per_task, partition, submit, paths } => {
            let registry = registry(&paths)?;
            let spec = load_spec(Some(&spec_path), &registry)?;
            let opts = options(&paths, &registry, None, false, false, false);
            // The jobs start elsewhere: every path absolute.
            let absolute = |p: &Path| -> anyhow::Result<PathBuf> {
                std::fs::create_dir_all(p).ok();
                std::fs::canonicalize(p).map_err(|e| anyhow::anyhow!("{}: {e}", p.display()))
            };
            let slurm = mcgp::slurm::SlurmOptions {
                shards,
                time,
                cpus_per_task,
                partition,
                binary: std::env::current_exe()?,
                project_root: absolute(&opts.project_root)?,
                spec_path: std::fs::canonicalize(&spec_path).map_err(|e| anyhow::anyhow!("{}: {e}", spec_path.display()))?,
                results_root: absolute(&opts.results_root)?,
                reports_root: absolute(&opts.reports_root)?,
                data_dir: absolute(&opts.data_dir)?,
            };
            let files = mcgp::slurm::write_scripts(&spec, &registry, &slurm)?;
            let estimate: Vec<String> = files.plan_value.estimated_seconds.iter().map(|s| format!("{s:.0}")).collect();
            writeln!(
                std::io::stdout(),
                "{}: {} cells in {shards} shards, estimated seconds per shard {} ({} cells timed by a previous run)",
                spec.name(),
                files.cells,
                estimate.join(", "),
                files.timed_cells
            )?;
            writeln!(std::io::stdout(), "array:      {}", files.array.display())?;
            writeln!(std::io::stdout(), "collection: {}", files.collect.display())?;
            writeln!(std::io::stdout(), "shard plan: {}", files.plan.display())?;
            if submit {
                let (array, collect) = mcgp::slurm::submit(&files)?;
                writeln!(std::io::stdout(), "submitted array job {array} ({shards} tasks) and collection job {collect} (after the array)")?;
            } else {
                writeln!(std::io::stdout(), "submit:     {} (or mcgp slurm ... --submit)", files.submit.display())?;
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Report { spec, wait, paths } => {
            let registry = registry(&paths)?;
            let spec = load_spec(Some(&spec), &registry)?;
            let opts = options(&paths, &registry, None, false, false, true);
            runner::report_only(&spec, &registry, &opts, wait)?;
            eprintln!("report: {}", opts.reports_root.join(spec.name()).join("index.html").display());
            Ok(ExitCode::SUCCESS)
        }
        Command::List { method: Some(name), .. } => {
            let Some(defaults) = mcgp::methods::default_settings(&name) else {
                let known: Vec<String> = mcgp::methods::METHODS.iter().map(|(n, _)| n.to_string()).collect();
                anyhow::bail!("unknown method \"{name}\"{}", mcgp::spec::suggest(&name, &known));
            };
            let description = mcgp::methods::METHODS.iter().find(|(n, _)| *n == name).map_or("", |(_, d)| d);
            writeln!(std::io::stdout(), "{name}: {description}")?;
            writeln!(std::io::stdout(), "settings (defaults):")?;
            let yaml = serde_norway::to_string(&defaults)?;
            for line in yaml.lines() {
                writeln!(std::io::stdout(), "  {line}")?;
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::List { paths, .. } => {
            let registry = registry(&paths)?;
            writeln!(std::io::stdout(), "datasets ({}):", registry.data_dir().display())?;
            for name in registry.names() {
                writeln!(std::io::stdout(), "  {}", registry.describe(&name).unwrap_or(name))?;
            }
            writeln!(std::io::stdout(), "methods:")?;
            for (name, description) in mcgp::methods::METHODS {
                writeln!(std::io::stdout(), "  {name:<10} {description}")?;
            }
            writeln!(std::io::stdout(), "(mcgp list METHOD: its settings and their defaults)")?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// One spec's `mcgp status`: the counts, the stale cells with their reasons, and a row per
/// method entry and dataset.
fn print_status(file: &str, status: &runner::StatusReport) -> std::io::Result<()> {
    writeln!(
        std::io::stdout(),
        "{}: {} cells: {} stored, {} missing, {} stale{}{}",
        file,
        status.total,
        status.current,
        status.missing,
        status.stale.len(),
        if status.stale.is_empty() {
            String::new()
        } else {
            format!(" (their stored records took {:.1} CPU s, on the machines the records name)", status.stale_cpu_seconds)
        },
        if status.reusable > 0 {
            format!(" ({} of the cells not stored here are stored by other experiments; a run reuses them)", status.reusable)
        } else {
            String::new()
        }
    )?;
    if status.sources_again > 0 {
        writeln!(
            std::io::stdout(),
            "  and {} stored cells a run computes again first (archived without the handoff vectors their missing or stale dependants need; their records took {:.1} CPU s)",
            status.sources_again,
            status.sources_again_cpu_seconds
        )?;
    }
    for s in &status.stale {
        writeln!(std::io::stdout(), "  stale: {s}")?;
    }
    let width = status.by_entry.iter().map(|e| e.entry.len() + e.dataset.len() + 1).max().unwrap_or(0).max(13);
    writeln!(
        std::io::stdout(),
        "  {:<width$} {:>8} {:>6} {:>7} {:>5} {:>11} {:>8}",
        "entry/dataset",
        "computed",
        "failed",
        "missing",
        "stale",
        "stale CPU s",
        "reusable"
    )?;
    for e in &status.by_entry {
        writeln!(
            std::io::stdout(),
            "  {:<width$} {:>8} {:>6} {:>7} {:>5} {:>11.1} {:>8}",
            format!("{}/{}", e.entry, e.dataset),
            e.ok,
            e.failed,
            e.missing,
            e.stale,
            e.stale_cpu_seconds,
            e.reusable
        )?;
    }
    Ok(())
}
