//! Grid settings: table columns, an x axis, heat maps of the mean over splits, and curves kept apart per setting.
use super::*;

#[test]
fn grid_settings_become_columns_and_an_x_axis() {
    let mut cells = Vec::new();
    for (i, v) in ["10", "0.5", "2"].iter().enumerate() {
        for split in 0..3 {
            let mut c = cell("alpha", split, "vb", &format!("kernel.variance={v}"));
            c.metrics.insert("error_pct".into(), 5.0 + i as f64 + split as f64);
            cells.push(c);
        }
    }
    let table = TableSpec {
        id: "tab-grid".into(),
        title: "Grid".into(),
        metrics: vec!["error_pct".into()],
        methods: vec![],
        datasets: vec![],
        tolerance: ToleranceRule::Relative { rel: 0.1 },
        paper_only: vec![],
        paper_only_datasets: Default::default(),
        paper: vec![
            PaperValue {
                setting: Some("kernel.variance=2.0".into()), // same grid point, spelled differently
                ..paper("alpha", "vb", "error_pct", 7.5, None, None)
            },
            // A grid point this run has no cells at yet: not run yet, not a miss.
            PaperValue { setting: Some("kernel.variance=7".into()), ..paper("alpha", "vb", "error_pct", 7.0, None, None) },
            // A setting outside the spec's grid: never run, so an open miss, not "not run yet".
            PaperValue { setting: Some("kernel.variance=9".into()), ..paper("alpha", "vb", "error_pct", 9.0, None, None) },
            // The gridded entry named without its setting: shown at every setting, scored at none,
            // so not reproduced, and an open miss (the run has results, the spec names none).
            paper("alpha", "vb", "error_pct", 100.0, None, None),
        ],
        paired_with: None,
        note: None,
        mean_row: false,
    };
    // A table of only a data set the harness cannot run (the IVM paper's pumadyn rows): the
    // paper's numbers under the columns of their own settings, and no run rows.
    let paper_only = TableSpec {
        id: "tab-paper-only".into(),
        title: "Paper only".into(),
        metrics: vec!["mse".into()],
        datasets: vec!["omega".into()],
        paper_only_datasets: [("omega".to_string(), "data not available offline".to_string())].into(),
        paper: vec![
            PaperValue { setting: Some("kernel.variance=10".into()), ..paper("omega", "vb", "mse", 0.0544, None, None) },
            PaperValue { setting: Some("kernel.variance=0.5".into()), ..paper("omega", "vb", "mse", 0.0464, None, None) },
        ],
        ..table.clone()
    };
    let tables = vec![table, paper_only];
    let mut fig = figure("fig-grid", FigureKind::Errorbar, Some("error_pct"));
    fig.x = Some("kernel.variance".into());
    fig.log_x = true;
    let manifest = Manifest { title: "Grid settings".into(), ..manifest() };
    let (datasets, methods) = (strings(&["alpha"]), strings(&["vb"]));
    // The spec's grid: the settings with cells, 7 (not computed yet) and 0.5 and 10 (the
    // paper-only data set's columns); not 9.
    let mut grid = planned(&datasets, &methods, &cells);
    grid.extend(["7", "0.5", "10"].map(|v| ("alpha".to_string(), "vb".to_string(), format!("kernel.variance={v}"))));
    let input = ReportInput {
        manifest: &manifest,
        tables: &tables,
        figures: std::slice::from_ref(&fig),
        datasets: &datasets,
        methods: &methods,
        cells: &cells,
        planned: &grid,
    };
    let dir = tempfile::tempdir().unwrap();
    let score = render_experiment(&input, dir.path()).unwrap();
    if let Some(demo) = std::env::var_os("MCGP_REPORT_DEMO") {
        render_experiment(&input, &Path::new(&demo).join("grid")).unwrap();
    }
    // The run at variance 2 has mean 8 (splits 7, 8, 9): |8 − 7.5| = 0.5 ≤ 0.1·7.5.
    assert_eq!((score.matched, score.compared), (1, 4));
    assert_eq!(score.misses, MissCounts { decided: 0, deviation: 0, open: 2, not_run: 1 });
    let html = std::fs::read_to_string(dir.path().join("index.html")).unwrap();
    let col = |s: &str| html.find(&format!("<th>vb [kernel.variance={s}]</th>")).unwrap_or_else(|| panic!("column {s}"));
    assert!(col("0.5") < col("2") && col("2") < col("10"), "numeric setting order");
    let grid_table = &html[html.find("<section id=\"table-tab-grid\"").unwrap()..];
    let grid_table = &grid_table[..grid_table.find("</section>").unwrap()];
    assert_eq!(grid_table.matches("<div class=\"miss\">not run yet</div>").count(), 1, "only variance 7: {grid_table}");
    assert_eq!(grid_table.matches("never run by this spec").count(), 1, "variance 9: {grid_table}");
    let only = &html[html.find("<section id=\"table-tab-paper-only\"").unwrap()..];
    let only = &only[..only.find("</section>").unwrap()];
    assert!(!only.contains(">alpha<"), "no run rows: {only}");
    let (at_half, at_ten) = (only.find("0.0464").expect("the paper's number at 0.5"), only.find("0.0544").expect("at 10"));
    assert!(at_half < at_ten, "each number under its own setting's column");
    assert_eq!(only.matches("data not available offline").count(), 3, "one cell per column: {only}");
    let svg = read_svg(&dir.path().join("figures/fig-grid.svg"));
    assert!(svg.contains("<polyline"), "series line over the grid");
    assert!(svg.contains("(log scale)"));
}

#[test]
fn heatmap_shows_the_mean_over_splits_at_every_grid_point() {
    // error_pct = 10 a + b + split on a 2 x 3 grid: the mean over splits 0, 1, 2 is 10 a + b + 1.
    let mut cells = Vec::new();
    for a in [1, 2] {
        for b in [1, 3, 5] {
            for split in 0..3 {
                let mut c = cell("alpha", split, "vb", &format!("kernel.lengthscale={a},kernel.variance={b}"));
                c.metrics.insert("error_pct".into(), (10 * a + b + split) as f64);
                cells.push(c);
            }
        }
    }
    let mut fig = figure("fig-heat", FigureKind::Heatmap, Some("error_pct"));
    fig.x = Some("kernel.variance".into());
    fig.y = Some("kernel.lengthscale".into());
    let dir = render_figure_only(&fig, "Heatmap", "alpha", "vb", &cells);
    let svg = read_svg(&dir.path().join("figures/fig-heat.svg"));
    let labels = texts(&svg);
    for want in ["12", "14", "16", "22", "24", "26"] {
        assert!(labels.iter().any(|t| t == want), "cell value {want} missing from {labels:?}");
    }
    assert!(!labels.iter().any(|t| t == "11"), "a single split's value is not a mean");
}

/// A curve figure over a grid draws one curve per (method, setting), never the settings
/// pooled: two settings of three splits each, the curves' values and the caption's split count
/// are each setting's own, and the notes name the setting.
#[test]
fn a_curve_keeps_grid_settings_apart() {
    let mut cells = Vec::new();
    for (m, level) in [(4, 1.0), (100, 5.0)] {
        for split in 0..3 {
            let mut c = cell("alpha", split, "sep", &format!("settings.inducing={m}"));
            // The trace: level + iteration (time = iteration / 10 s), the same on every split.
            c.trace =
                (1..=10).map(|i| TracePoint { iter: i, time: i as f64 / 10.0, name: "test_nll".into(), value: level + i as f64 }).collect();
            cells.push(c);
        }
    }
    let mut fig = figure("fig-curve-grid", FigureKind::Curve, None);
    fig.trace = Some("test_nll".into());
    fig.target = Some(8.0);
    let dir = render_figure_only(&fig, "Curves over a grid", "alpha", "sep", &cells);
    let svg = read_svg(&dir.path().join("figures/fig-curve-grid.svg"));
    let labels = texts(&svg);
    for want in ["sep [settings.inducing=4]", "sep [settings.inducing=100]"] {
        assert!(labels.iter().any(|t| t == want), "legend entry {want} missing from {labels:?}");
    }
    let html = std::fs::read_to_string(dir.path().join("index.html")).unwrap();
    assert!(html.contains("mean over 3 splits"), "each curve is over its own 3 splits, not 6");
    // First at or past 8 (rising): level 1 + i reaches it at i = 7 (0.7 s), level 5 + i at i = 3 (0.3 s);
    // pooled, the mean 3 + i would reach it at i = 5 (0.5 s).
    assert!(
        html.contains(
            "sep [settings.inducing=4] on 3 of 3 splits, at 0.7-0.7 s, sep [settings.inducing=100] on 3 of 3 splits, at 0.3-0.3 s"
        ),
        "time to target per setting"
    );
}
