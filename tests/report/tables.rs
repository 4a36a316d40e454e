//! Tables beside the paper's values: paired differences, failed and non-finite cells, values not run yet, mean rows, and labels-only methods.
use super::*;

#[test]
fn a_paired_difference_over_some_splits_is_shown_not_matched_and_text_is_escaped() {
    // ep - laplace is 1.0 on every split, but laplace's split 2 failed: the mean over the two
    // pairs equals the paper's number exactly, and must still not match (the missing pair may
    // be the worst). The failure message and the table's note carry markup, shown as text.
    let mut cells = Vec::new();
    for split in 0..3 {
        let mut base = cell("alpha", split, "laplace", "");
        base.metrics.insert("error_pct".into(), 5.0);
        if split == 2 {
            base.status = Status::Failed;
            base.error = Some("<script>alert(1)</script> & more".into());
        }
        cells.push(base);
        let mut ep = cell("alpha", split, "ep", "");
        ep.metrics.insert("error_pct".into(), 6.0);
        cells.push(ep);
    }
    let table = TableSpec {
        id: "tab-paired".into(),
        title: "Paired".into(),
        metrics: vec!["error_pct".into()],
        methods: vec!["ep".into()],
        datasets: vec![],
        tolerance: ToleranceRule::Absolute { abs: 0.5 },
        paper_only: vec![],
        paper_only_datasets: Default::default(),
        paper: vec![paper("alpha", "ep", "error_pct", 1.0, None, None)],
        paired_with: Some("laplace".into()),
        note: Some("x < y & <b>bold</b>".into()),
        mean_row: false,
    };
    let (score, dir) = render_table_only(table, &["alpha"], &cells);
    assert_eq!((score.matched, score.compared), (0, 1));
    assert_eq!(score.misses, MissCounts { decided: 0, deviation: 0, open: 1, not_run: 0 });
    let html = std::fs::read_to_string(dir.path().join("index.html")).unwrap();
    let table = &html[html.find("id=\"table-tab-paired\"").unwrap()..];
    assert!(table.contains("1 not finite or without a base split (left out)"), "the unpaired split is counted");
    assert!(table.contains("not matched: 1 split(s) failed, not finite or unpaired"), "and named as the reason");
    assert!(html.contains("x &lt; y &amp; &lt;b&gt;bold&lt;/b&gt;") && !html.contains("<b>bold</b>"), "the note is text");
    assert!(html.contains("&lt;script&gt;alert(1)&lt;/script&gt; &amp; more") && !html.contains("<script>alert"), "the failure is text");
}

#[test]
fn cells_that_all_failed_are_a_miss_and_one_split_shows_no_spread() {
    let mut cells = Vec::new();
    for split in 0..3 {
        let mut c = cell("alpha", split, "ep", "");
        c.status = Status::Failed;
        c.error = Some(FAILURE.into());
        cells.push(c);
    }
    let mut one = cell("alpha", 0, "laplace", "");
    one.metrics.insert("error_pct".into(), 5.0);
    cells.push(one);
    let table = TableSpec {
        id: "tab-failed".into(),
        title: "Failed".into(),
        metrics: vec!["error_pct".into()],
        methods: vec![],
        datasets: vec![],
        tolerance: ToleranceRule::Absolute { abs: 1.0 },
        paper_only: vec![],
        paper_only_datasets: Default::default(),
        paper: vec![paper("alpha", "ep", "error_pct", 4.0, None, None), paper("alpha", "laplace", "error_pct", 5.5, Some(1.0), Some(10))],
        paired_with: None,
        note: None,
        mean_row: false,
    };
    let (score, dir) = render_table_only(table, &["alpha"], &cells);
    // ep ran and failed on every split: a miss (open), not "not run yet"; laplace's one split
    // matches (|5 - 5.5| <= 1).
    assert_eq!((score.matched, score.compared), (1, 2));
    assert_eq!(score.misses, MissCounts { decided: 0, deviation: 0, open: 1, not_run: 0 });
    let html = std::fs::read_to_string(dir.path().join("index.html")).unwrap();
    let table = &html[html.find("id=\"table-tab-failed\"").unwrap()..];
    assert!(
        table.contains("all 3 failed") && table.contains("open miss") && !table.contains("<div class=\"miss\">not run yet</div>"),
        "ep's failed cells"
    );
    // One split: its value alone (a "± 0" would claim a spread of zero).
    assert!(table.contains("5.00") && table.contains("n = 1") && !table.contains("5.00 ± "), "laplace's single split");
}

/// A value no split gave finitely is shown as such, never as "NaN ± NaN", and is no match.
#[test]
fn a_value_no_split_gave_finitely_is_shown_as_such() {
    let cells: Vec<CellRecord> = (0..3)
        .map(|split| {
            let mut c = cell("alpha", split, "vb", "");
            c.metrics.insert("error_pct".into(), f64::NAN);
            c
        })
        .collect();
    let table = TableSpec {
        id: "tab-nan".into(),
        title: "Nothing finite".into(),
        metrics: vec!["error_pct".into()],
        methods: vec![],
        datasets: vec![],
        tolerance: ToleranceRule::Absolute { abs: 1.0 },
        paper_only: vec![],
        paper_only_datasets: Default::default(),
        paper: vec![paper("alpha", "vb", "error_pct", 5.0, None, None)],
        paired_with: None,
        note: None,
        mean_row: false,
    };
    let (manifest, datasets, methods) = (manifest(), strings(&["alpha"]), strings(&["vb"]));
    let tables = [table];
    let input = ReportInput {
        manifest: &manifest,
        tables: &tables,
        figures: &[],
        datasets: &datasets,
        methods: &methods,
        cells: &cells,
        planned: &planned(&datasets, &methods, &cells),
    };
    let dir = tempfile::tempdir().unwrap();
    let score = render_experiment(&input, dir.path()).unwrap();
    assert_eq!((score.matched, score.compared), (0, 1));
    let html = std::fs::read_to_string(dir.path().join("index.html")).unwrap();
    assert!(html.contains("all 3 not finite") && !html.contains("NaN"), "the cell says why it has no value");
}

/// A paired entry whose base has no cell on the data set yet has no result and is not run yet
/// (not a miss), whatever its own cells.
#[test]
fn a_paired_value_without_its_base_is_not_run_yet() {
    let mut cells = Vec::new();
    for split in 0..2 {
        let mut c = cell("alpha", split, "laplace", "");
        c.metrics.insert("error_pct".into(), 3.0);
        cells.push(c);
    }
    let table = TableSpec {
        id: "tab-pair".into(),
        title: "Paired without base".into(),
        metrics: vec!["error_pct".into()],
        methods: vec!["laplace".into()],
        datasets: vec![],
        tolerance: ToleranceRule::Absolute { abs: 0.01 },
        paper_only: vec![],
        paper_only_datasets: Default::default(),
        paper: vec![paper("alpha", "laplace", "error_pct", 2.0, None, None)],
        paired_with: Some("ep".into()),
        note: None,
        mean_row: false,
    };
    let (score, _dir) = render_table_only(table, &["alpha"], &cells);
    assert_eq!((score.matched, score.compared), (0, 1));
    assert_eq!(score.misses, MissCounts { decided: 0, deviation: 0, open: 0, not_run: 1 });
}

#[test]
fn a_paired_table_shows_per_split_differences_and_compares_them_with_the_paper() {
    let cells = synthetic_cells();
    // laplace - ep error: 12 - 10 = 2 (alpha), 22 - 20 (beta), 32 - 30 (gamma) on every split,
    // since both share the split offsets; gamma's failed laplace split leaves 4 pairs.
    let table = TableSpec {
        id: "tab-paired".into(),
        title: "Paired".into(),
        metrics: vec!["error_pct".into()],
        methods: vec!["laplace".into()],
        datasets: vec![],
        tolerance: ToleranceRule::Absolute { abs: 0.01 },
        paper_only: vec![],
        paper_only_datasets: Default::default(),
        paper: vec![paper("alpha", "laplace", "error_pct", 2.0, None, None), paper("beta", "laplace", "error_pct", 12.0, None, None)],
        paired_with: Some("ep".into()),
        note: None,
        mean_row: false,
    };
    let (manifest, datasets, methods) = (manifest(), strings(&DATASETS), strings(&METHODS));
    let tables = [table];
    let input = ReportInput {
        manifest: &manifest,
        tables: &tables,
        figures: &[],
        datasets: &datasets,
        methods: &methods,
        cells: &cells,
        planned: &planned(&datasets, &methods, &cells),
    };
    let reports = tempfile::tempdir().unwrap();
    let score = render_experiment(&input, &reports.path().join("paired")).unwrap();
    // The difference 2 matches the first paper value; 12 (the raw beta error would be 22) does not.
    assert_eq!((score.matched, score.compared), (1, 2));
    let html = std::fs::read_to_string(reports.path().join("paired/index.html")).unwrap();
    assert!(html.contains("2.00 ± 0"), "the paired mean, not the raw 12.00");
    assert!(!html.contains("12.00 ± 1.58"));
    assert!(html.contains("n = 5 pairs, &gt; 0 on 5") || html.contains("n = 5 pairs, > 0 on 5"), "pairs and positives");
    assert!(html.contains("n = 4 pairs"), "gamma: the failed split has no pair");
    assert!(html.contains("Paired with ep"));
}

#[test]
fn a_mean_row_averages_each_split_over_the_data_sets_and_meets_the_papers_average() {
    let cells = synthetic_cells();
    // error_pct per split: ep 10 / 20 / 30 + offset on alpha / beta / gamma, so the per-split
    // mean over the three is 20 + offset: 20 ± √2.5 = 1.58 over 5 splits; laplace 12 / 22 / 32
    // + offset with gamma's split 4 failed, so splits 0-3 only: 22 + (-2, -1, 0, 1), mean 21.5.
    let table = TableSpec {
        id: "tab-mean".into(),
        title: "With a mean row".into(),
        metrics: vec!["error_pct".into()],
        methods: vec![],
        datasets: vec![],
        tolerance: ToleranceRule::Absolute { abs: 0.01 },
        paper_only: vec![],
        paper_only_datasets: Default::default(),
        paper: vec![
            paper("mean", "laplace", "error_pct", 21.5, None, None),
            // Another machine's time-like number: shown, not scored.
            PaperValue { scored: false, ..paper("mean", "ep", "error_pct", 25.0, None, None) },
        ],
        paired_with: None,
        note: None,
        mean_row: true,
    };
    let (manifest, datasets, methods) = (manifest(), strings(&DATASETS), strings(&METHODS));
    let tables = [table];
    let input = ReportInput {
        manifest: &manifest,
        tables: &tables,
        figures: &[],
        datasets: &datasets,
        methods: &methods,
        cells: &cells,
        planned: &planned(&datasets, &methods, &cells),
    };
    let reports = tempfile::tempdir().unwrap();
    let score = render_experiment(&input, &reports.path().join("mean")).unwrap();
    // 21.5 is laplace's mean over the complete splits, shown; a mean that leaves a split out
    // is never a match (the failed split is likely the worst).
    assert_eq!((score.matched, score.compared), (0, 1));
    let html = std::fs::read_to_string(reports.path().join("mean/index.html")).unwrap();
    assert!(html.contains("mean over the data sets"));
    assert!(html.contains("20.00 ± 1.58"), "ep's mean row");
    assert!(html.contains("21.50 ± 1.29"), "laplace's mean row: sd of 20, 21, 22, 23");
    assert!(html.contains("n = 4, 1 split(s) left out"), "gamma's failed split is left out of the mean row, and said so");
    assert!(html.contains("not matched: 1 split(s) failed, not finite or unpaired"), "the rule says why it is not a match");
    assert!(!html.contains("outside this table"), "the mean row's paper values are inside the table");
}

/// A mean row's value with no summary is a miss when its entry's cells ran (here one data set
/// failed on every split, so no split has every data set) and not run yet when it has none.
#[test]
fn a_mean_row_without_a_summary_is_a_miss_only_if_its_entry_ran() {
    let mut cells = Vec::new();
    for split in 0..2 {
        let mut ok = cell("alpha", split, "laplace", "");
        ok.metrics.insert("error_pct".into(), 5.0);
        cells.push(ok);
        let mut failed = cell("beta", split, "laplace", "");
        failed.status = Status::Failed;
        failed.error = Some(FAILURE.into());
        cells.push(failed);
    }
    let table = TableSpec {
        id: "tab-mean-missing".into(),
        title: "Mean row without a summary".into(),
        metrics: vec!["error_pct".into()],
        methods: vec![],
        datasets: vec![],
        tolerance: ToleranceRule::Absolute { abs: 0.01 },
        paper_only: vec![],
        paper_only_datasets: Default::default(),
        paper: vec![paper("mean", "laplace", "error_pct", 5.0, None, None), paper("mean", "ep", "error_pct", 6.0, None, None)],
        paired_with: None,
        note: None,
        mean_row: true,
    };
    let (score, _dir) = render_table_only(table, &["alpha", "beta"], &cells);
    assert_eq!((score.matched, score.compared), (0, 2));
    assert_eq!(score.misses, MissCounts { decided: 0, deviation: 0, open: 1, not_run: 1 });
}

#[test]
fn a_labels_only_method_shows_no_probabilities_in_a_likelihood_row() {
    // An SVM's cells: errors, no log_pred_* metrics, marked labels only by the runner.
    let mut cells = Vec::new();
    for split in 0..3 {
        let mut svm = cell("alpha", split, "svm", "");
        svm.metrics.insert("error_pct".into(), 4.0 + split as f64);
        svm.diagnostics.insert("predictions".into(), "labels only (no probabilities)".into());
        cells.push(svm);
        let mut gp = cell("alpha", split, "gp", "");
        gp.metrics.insert("error_pct".into(), 3.0);
        gp.metrics.insert("log_pred_sum".into(), -20.0);
        cells.push(gp);
    }
    let table = TableSpec {
        id: "tab-labels".into(),
        title: "Labels only".into(),
        metrics: vec!["error_pct".into(), "log_pred_sum".into()],
        methods: vec![],
        datasets: vec![],
        tolerance: ToleranceRule::default(),
        paper_only: vec![],
        paper_only_datasets: Default::default(),
        paper: vec![],
        paired_with: None,
        note: None,
        mean_row: false,
    };
    let manifest = Manifest { title: "Labels only".into(), ..manifest() };
    let (datasets, methods) = (strings(&["alpha"]), strings(&["gp", "svm"]));
    let input = ReportInput {
        manifest: &manifest,
        tables: std::slice::from_ref(&table),
        figures: &[],
        datasets: &datasets,
        methods: &methods,
        cells: &cells,
        planned: &planned(&datasets, &methods, &cells),
    };
    let dir = tempfile::tempdir().unwrap();
    render_experiment(&input, dir.path()).unwrap();
    let html = std::fs::read_to_string(dir.path().join("index.html")).unwrap();
    assert_eq!(html.matches("no probabilities").count(), 1, "the svm's likelihood cell, once");
    assert!(!html.contains("no result"), "no cell of this table is missing a result");
}
