//! The `mcgp` command line: run, check, report and list. Glue only; the work lives in the library.
use clap::{Parser, Subcommand};
use mcgp::data::{default_data_dir, Registry};
use mcgp::runner::{self, RunOptions};
use mcgp::spec::{self, Spec};
use std::io::IsTerminal;
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
        #[arg(long)]
        threads: Option<usize>,
        /// Recompute cells stored as failed.
        #[arg(long)]
        retry_failed: bool,
        /// Keep cells stored as timed out (by default a run retries them: a timeout depends on
        /// the machine).
        #[arg(long)]
        keep_failed: bool,
        /// Recompute every cell, ignoring stored results (e.g. after changing a method's code).
        #[arg(long)]
        recompute: bool,
        /// Compute only the cells of these datasets (comma-separated); the report then shows
        /// the others as not run yet, and a later run without the option completes them.
        #[arg(long, value_delimiter = ',')]
        datasets: Vec<String>,
        /// Skip the HTML report.
        #[arg(long)]
        no_report: bool,
        #[command(flatten)]
        paths: Paths,
    },
    /// Which of a spec's cells are stored, missing, or stored for older code or data (stale).
    Status {
        spec: PathBuf,
        #[command(flatten)]
        paths: Paths,
    },
    /// Check a spec without running it.
    Check {
        spec: PathBuf,
        #[command(flatten)]
        paths: Paths,
    },
    /// Re-render the report of a spec from its stored cells.
    Report {
        spec: PathBuf,
        #[command(flatten)]
        paths: Paths,
    },
    /// List the datasets and methods known.
    List {
        #[command(flatten)]
        paths: Paths,
    },
}

fn main() -> ExitCode {
    mcgp::tune_allocator();
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
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

fn options(
    paths: &Paths,
    registry: &Registry,
    threads: Option<usize>,
    retry_failed: bool,
    recompute: bool,
    render_report: bool,
) -> RunOptions {
    let data_dir = registry.data_dir().to_path_buf();
    let project_root = data_dir.parent().map(Path::to_path_buf).unwrap_or_else(|| PathBuf::from("."));
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
        progress: std::io::stderr().is_terminal(),
        render_report,
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
        no_report: false,
        paths: default_paths,
    });
    match command {
        Command::Run { spec, threads, retry_failed, keep_failed, recompute, datasets, no_report, paths } => {
            let registry = registry(&paths)?;
            let spec = load_spec(spec.as_deref(), &registry)?;
            let mut opts = options(&paths, &registry, threads, retry_failed, recompute, !no_report);
            opts.datasets = datasets;
            opts.keep_failed = keep_failed;
            eprintln!("running {} ({})", spec.name(), spec.file);
            let summary = runner::run(&spec, &registry, &opts)?;
            let m = &summary.manifest;
            eprintln!(
                "{} cells: {} computed, {} stored ({} from other experiments, {} computed at older commits with the same numerics), {} failed; {:.1} s wall, {:.1} s CPU",
                m.cells_total, m.cells_computed, m.cells_cached, m.cells_reused, m.cells_older_code, m.cells_failed, m.wall_seconds, m.cpu_seconds
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
            println!(
                "{}: ok ({} datasets, {} method entries, {cells} cells, {} tables, {} figures)",
                spec.file,
                spec.raw.datasets.len(),
                spec.raw.methods.len(),
                spec.raw.tables.len(),
                spec.raw.figures.len()
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::Status { spec, paths } => {
            let registry = registry(&paths)?;
            let spec = load_spec(Some(&spec), &registry)?;
            let opts = options(&paths, &registry, None, false, false, false);
            let status = runner::status(&spec, &registry, &opts)?;
            println!(
                "{}: {} cells: {} stored, {} missing, {} stale",
                spec.file,
                status.total,
                status.current,
                status.missing,
                status.stale.len()
            );
            for s in &status.stale {
                println!("  stale: {s}");
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Report { spec, paths } => {
            let registry = registry(&paths)?;
            let spec = load_spec(Some(&spec), &registry)?;
            let opts = options(&paths, &registry, None, false, false, true);
            runner::report_only(&spec, &registry, &opts)?;
            eprintln!("report: {}", opts.reports_root.join(spec.name()).join("index.html").display());
            Ok(ExitCode::SUCCESS)
        }
        Command::List { paths } => {
            let registry = registry(&paths)?;
            println!("datasets ({}):", registry.data_dir().display());
            for name in registry.names() {
                println!("  {}", registry.describe(&name).unwrap_or(name));
            }
            println!("methods:");
            for (name, description) in mcgp::methods::METHODS {
                println!("  {name:<10} {description}");
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}
