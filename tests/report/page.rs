//! The whole page: tables, figures, failed cells and the score together, and the provenance of the cells (commits and machines).
use super::*;

#[test]
fn report_shows_tables_figures_failures_and_score() {
    let cells = synthetic_cells();
    let (tables, figures) = (tables(), figures());
    let reports = tempfile::tempdir().unwrap();
    let out = reports.path().join("synthetic");
    let score = render_synthetic(&cells, &out);
    if let Some(demo) = std::env::var_os("MCGP_REPORT_DEMO") {
        let demo = Path::new(&demo);
        render_synthetic(&cells, &demo.join("synthetic"));
        render_index(demo).unwrap();
    }

    // Hand-computed: tab-main 2 of 4, tab-evidence 1 of 4 (one missing): gamma/laplace's means
    // leave its failed split out, so neither of its values is a match.
    assert_eq!((score.matched, score.compared, score.cells_failed), (3, 8, 1));
    // The 5 numbers not matched: beta/laplace error decided, beta/laplace evidence and
    // gamma/laplace evidence explained (their notes), gamma/laplace error open, alpha/ep
    // evidence open too: its cells ran and report no evidence (not "not run yet").
    assert_eq!(score.misses, MissCounts { decided: 1, deviation: 2, open: 2, not_run: 0 });
    let stored: Score = serde_json::from_str(&std::fs::read_to_string(out.join("score.json")).unwrap()).unwrap();
    assert_eq!(stored, score);
    assert_eq!(stored.experiment, "synthetic");
    assert_eq!(stored.finished, "2025-01-01T00:05:00Z");

    let html = std::fs::read_to_string(out.join("index.html")).unwrap();
    assert!(html.contains("41.5") && html.contains("data not available offline"), "the paper-only data set's row");
    for t in &tables {
        assert!(html.contains(&format!("id=\"table-{}\"", t.id)), "table {}", t.id);
        assert!(html.contains(&t.title), "table title {}", t.title);
    }
    assert!(
        html.contains("Matched 2 / 4"),
        "tab-main per-table score (the paper-only svm value, the variant and the repeat are not scored)"
    );
    let main = &html[html.find("id=\"table-tab-main\"").unwrap()..html.find("id=\"table-tab-evidence\"").unwrap()];
    assert_eq!(main.matches("class=\"variant\"").count(), 2, "beta/ep (variant) and alpha/laplace (repeat)");
    assert!(html.contains("svm (paper only)") && html.contains("9.25 ± 1.00 (n = 20)"), "paper-only column");
    assert!(html.contains("Matched 1 / 4"), "tab-evidence per-table score");
    assert!(html.contains("miss decided against the paper: the diag spec shows 30 is out of reach"));
    assert!(html.contains("miss explained by a stated deviation: C = 6 here, 7 in the paper"));
    let evidence_table = &html[html.find("id=\"table-tab-evidence\"").unwrap()..];
    let evidence_table = &evidence_table[..evidence_table.find("</section>").unwrap()];
    assert!(
        evidence_table.contains("not reported by its 5 cell(s)")
            && evidence_table.contains("<div class=\"miss\">open miss</div>")
            && !evidence_table.contains("<div class=\"miss\">not run yet</div>"),
        "the ep evidence no cell reports"
    );
    assert!(html.contains("2 explained by a stated deviation, 1 open"), "tab-evidence");
    assert!(html.contains("never shown"), "gamma's evidence over 4 of 5 splits is not a match: its note shows");
    assert!(html.contains("misses: 1 decided against the paper, 0 explained by a stated deviation, 1 open"), "tab-main");
    assert!(html.contains("not matched: 1 split(s) failed, not finite or unpaired"), "why gamma/laplace is not a match");
    // this run, mean ± sd: alpha/ep error 10 ± √2.5; gamma/laplace 31.5 ± √(5/3) over 4 splits.
    assert!(html.contains("10.00 ± 1.58"));
    assert!(html.contains("31.50 ± 1.29"));
    assert!(html.contains("n = 4, 1 failed"));
    // 10 − 11 = −1 in the metric's units (beside the tolerance), (10 − 11) / 2 = −0.5 paper
    // sd; the paper value without sd has no such ratio.
    assert!(html.contains("Δ −1.00 (−0.500 paper sd)"), "the difference in units and in paper sds");
    assert!(html.contains("(no paper sd)"));
    assert!(html.contains("no run result"), "the missing paper value is shown");
    assert!(html.contains("Predictive error (%)") && html.contains("Log marginal likelihood"));
    assert!(html.contains("approximation"), "evidence kind labelled");
    // Columns follow the table's method order (laplace before ep in tab-evidence).
    let ev = &html[html.find("id=\"table-tab-evidence\"").unwrap()..];
    assert!(ev.find("<th>laplace</th>").unwrap() < ev.find("<th>ep</th>").unwrap());
    // Provenance and the spec text.
    assert!(html.contains("0123456789abcdef (dirty"));
    assert!(html.contains("<details>") && html.contains("name: synthetic"));
    assert!(html.contains("5m"), "wall time shown");
    // The failed cell.
    assert!(html.contains(FAILURE));
    // Timing: time_train 0.5 + 0.1 split, so over splits 0-4 mean 700 ms and max 900 ms; the
    // failed cell (gamma/laplace split 4) is left out: mean 650 ms over 4, max 800 ms.
    let timing = &html[html.find("id=\"timing\"").expect("a timing section")..];
    let gamma = &timing[timing.find(">gamma<").unwrap()..];
    assert!(timing.find("fit 700 ms (max 900 ms)").unwrap() < timing.find(">beta<").unwrap(), "alpha's row");
    assert!(gamma.contains("fit 650 ms (max 800 ms)</div><div class=\"n\">4 cells"), "gamma/laplace without the failed cell");
    assert!(!timing.contains("predict"), "no time_predict metric, no predict line");
    // Iterations reached 10..14 over splits 0-4; the budget makes the page say so.
    assert!(timing.contains("iterations 12.0 (10-14)"), "iterations of the budgeted entry");
    assert!(timing.contains("Not bit-reproducible:</strong> ep (30.0 s)"), "wall-clock budget flagged");
    assert_eq!(timing.matches("iterations 12.0").count(), 3, "one per dataset, for ep only");

    for f in &figures {
        assert!(html.contains(&format!("id=\"fig-{}\"", f.id)), "figure {}", f.id);
        assert!(html.contains(&format!("src=\"figures/{}.svg\"", f.id)));
        read_svg(&out.join("figures").join(format!("{}.svg", f.id)));
    }
    let svg = |id: &str| read_svg(&out.join("figures").join(format!("{id}.svg")));
    // Each kind draws its data, not just a frame: markers/bars/violins/lines as appropriate.
    assert!(svg("fig-errorbar").matches("<polygon").count() >= 6, "a marker per (dataset, method)");
    assert!(svg("fig-violin").matches("<polygon").count() >= 6, "a violin per (dataset, method)");
    assert!(svg("fig-hist").matches("<rect").count() >= 8, "bars in 2 × 3 panels");
    assert!(svg("fig-scatter").matches("<polygon").count() >= 14, "a point per paired split");
    assert!(svg("fig-trace").matches("<polyline").count() >= 29, "a line per cell");
    // Curve notes: alpha's log_evidence at the peer's times (every split's last checkpoint at or
    // before them: iteration 9 at 0.5 s, iteration 11 by 2 s; -100 - 80 e^(-i/3) + offset, mean
    // offset 0), and the first checkpoint at or above -110 (iteration 7 at 0.4 s for offsets
    // -2..0, iteration 6 at 0.35 s for 1 and 2).
    assert!(
        html.contains("0.5 s: ep -104, laplace -104, peer run -40; 2 s: ep -102, laplace -102, peer run -35."),
        "values at the reference times"
    );
    assert!(html.contains("first at -110 (training time of the first checkpoint there): ep on 5 of 5 splits, at 0.35-0.4 s, laplace on 5 of 5 splits, at 0.35-0.4 s."), "time to target");
    // A log y axis says so and still draws every method's curve (grad_norm is 1 throughout).
    let log_texts = texts(&svg("fig-curve-log")).join("|");
    assert!(log_texts.contains("(log scale)") && log_texts.matches("log scale").count() >= 2, "{log_texts}");
    assert!(svg("fig-curve-log").matches("<polyline").count() >= 6, "a curve per (dataset, method)");
    assert!(svg("fig-empty").contains("no data"));
    assert!(!svg("fig-errorbar").contains("no data"));
    // Several metrics on one errorbar figure: a series per (metric, method), 95% CI bars.
    let multi = texts(&svg("fig-multi")).join("|");
    assert!(multi.contains("95% CI") && !multi.contains("± SE"), "{multi}");
    assert!(svg("fig-multi").matches("<polygon").count() >= 12, "a marker per (metric, dataset, method)");
    // Dataset names label the categorical axis.
    assert!(texts(&svg("fig-errorbar")).contains(&"alpha".to_string()));
    assert!(texts(&svg("fig-violin")).contains(&"gamma".to_string()));

    // A score written before misses were classified: its 3 misses count as open.
    let old = reports.path().join("older");
    std::fs::create_dir_all(&old).unwrap();
    std::fs::write(
        old.join("score.json"),
        r#"{"experiment":"older","title":"Older","paper":null,"matched":2,"compared":5,"cells_failed":0,"finished":"x"}"#,
    )
    .unwrap();
    render_index(reports.path()).unwrap();
    let index = std::fs::read_to_string(reports.path().join("index.html")).unwrap();
    assert!(index.contains("<td>0 / 0 / 3</td>"), "the older experiment's misses are open");
    assert!(index.contains("href=\"synthetic/index.html\""));
    assert!(index.contains("Synthetic report test"));
    assert!(index.contains("3 / 8"));
    assert!(index.contains("<td>1 / 2 / 2</td>"), "the experiment's misses by class");
    assert!(index.contains("1 decided against the paper, 2 explained by a stated deviation, 5 open"), "overall");
    assert!(index.contains("Overall: 5 / 13"), "both experiments");
}

/// The synthetic report's provenance row `key` (its header and value) and the whole page, for
/// cells edited by `edit` (given each cell's index).
fn provenance_row(key: &str, edit: impl Fn(usize, &mut CellRecord)) -> (String, String) {
    let mut cells = synthetic_cells();
    assert!(cells.len() >= 4);
    for (i, c) in cells.iter_mut().enumerate() {
        edit(i, c);
    }
    let reports = tempfile::tempdir().unwrap();
    let out = reports.path().join("synthetic");
    render_synthetic(&cells, &out);
    let html = std::fs::read_to_string(out.join("index.html")).unwrap();
    let row = html.find(&format!("<th>{key}</th>")).map(|i| html[i..].split("</tr>").next().unwrap().to_string()).unwrap_or_default();
    (row, html)
}

#[test]
fn provenance_names_the_commits_the_cells_were_computed_at() {
    // The manifest's commit is the last unsharded run's; cells reused or computed by shards
    // carry their own. The report lists each commit with its cell count, most cells first.
    let n = synthetic_cells().len();
    let (row, _) = provenance_row("Cells computed at", |i, c| {
        c.commit = match i {
            0 => Some("bbbbbbb22222222".into()),
            1 => None,
            _ => Some("aaaaaaa11111111".into()),
        }
    });
    let expected = format!("aaaaaaa ({} cells), bbbbbbb (1 cell), not recorded (1 cell)", n - 2);
    assert!(row.contains(&expected), "expected {expected:?} in the provenance, got {row:?}");
}

#[test]
fn provenance_names_the_machines_the_cells_ran_on() {
    // Times are the machine's: a resumed run, shards and reuse mix cells from several, and
    // records before the field existed have none. Each machine is listed with its cell count.
    let n = synthetic_cells().len();
    let (row, html) = provenance_row("Cells computed on", |i, c| {
        c.machine = match i {
            0 | 1 => None,
            2 => Some("CPU B (family 25 model 1, AVX2), 2 CPUs".into()),
            _ => Some("CPU A (family 25 model 17, AVX-512), 2 CPUs".into()),
        }
    });
    let expected = format!(
        "CPU A (family 25 model 17, AVX-512), 2 CPUs ({} cells), not recorded (2 cells), CPU B (family 25 model 1, AVX2), 2 CPUs (1 cell)",
        n - 3
    );
    assert!(row.contains(&expected), "expected {expected:?} in the provenance, got {row:?}");
    // The run's own machine goes with its host.
    assert!(
        html.contains("testhost (2 threads; Test CPU (TestVendor family 1 model 2, AVX2), 2 CPUs)"),
        "the host row names the run's machine"
    );
}

/// The header's score line: with nothing scored it says so (not "no paper values paper values
/// within tolerance"), and a report with cells not run yet says it is partial up front.
#[test]
fn the_header_says_when_nothing_is_scored_and_when_the_report_is_partial() {
    let cells = synthetic_cells();
    let (datasets, methods) = (strings(&DATASETS), strings(&METHODS));
    let render = |tables: &[TableSpec], missing: usize| {
        let manifest = Manifest { cells_missing: missing, ..manifest() };
        let input = ReportInput {
            manifest: &manifest,
            tables,
            figures: &[],
            datasets: &datasets,
            methods: &methods,
            cells: &cells,
            planned: &planned(&datasets, &methods, &cells),
        };
        let dir = tempfile::tempdir().unwrap();
        render_experiment(&input, dir.path()).unwrap();
        let html = std::fs::read_to_string(dir.path().join("index.html")).unwrap();
        html.lines().find(|l| l.contains("Reproduction:")).unwrap().to_string()
    };
    let none = render(&[], 0);
    assert!(none.contains("Reproduction: no paper values</span> scored") && !none.contains("within tolerance"), "{none}");
    assert!(!none.contains("partial report"), "{none}");
    let scored = render(&tables(), 7);
    assert!(scored.contains("paper values within tolerance of this run"), "{scored}");
    assert!(scored.contains("partial report: 7 cells not run yet"), "{scored}");
}
