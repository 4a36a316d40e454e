//! Bad specs give errors that name the file, the line and column, the field and the rule.
use mcgp::data::{default_data_dir, Registry};
use mcgp::spec::parse;

fn registry() -> Registry {
    Registry::load(&default_data_dir()).expect("registry loads")
}

const GOOD: &str = "\
name: t
datasets: [iris]
splits: { protocol: random, train_fraction: 0.6, repeats: 2 }
methods:
  - name: lap
    method: laplace
";

fn error_of(text: &str) -> String {
    parse(text, "bad.yaml", &registry()).expect_err("spec must be rejected").to_string()
}

#[test]
fn a_good_spec_parses() {
    let spec = parse(GOOD, "good.yaml", &registry()).expect("valid");
    assert_eq!(spec.name(), "t");
}

#[test]
fn unknown_field_is_named_with_its_line() {
    let text = GOOD.replace("    method: laplace\n", "    method: laplace\n    kernl: { ard: true }\n");
    let e = error_of(&text);
    assert!(e.starts_with("bad.yaml:"), "{e}");
    assert!(e.contains("unknown field `kernl`"), "{e}");
    assert!(e.contains(":7:"), "line 7 expected: {e}");
}

#[test]
fn wrong_type_is_named_with_its_line() {
    let text = GOOD.replace("repeats: 2", "repeats: many");
    let e = error_of(&text);
    assert!(e.contains("bad.yaml:3:"), "{e}");
    assert!(e.contains("invalid type") && e.contains("many"), "{e}");
}

#[test]
fn unknown_dataset_suggests_the_closest_name() {
    let text = GOOD.replace("[iris]", "[irsi]");
    let e = error_of(&text);
    assert!(e.contains("bad.yaml:2:"), "{e}");
    assert!(e.contains("datasets[0]: unknown dataset \"irsi\" (did you mean \"iris\"?)"), "{e}");
}

#[test]
fn unknown_method_suggests_the_closest_name() {
    let text = GOOD.replace("method: laplace", "method: lapalce");
    let e = error_of(&text);
    assert!(e.contains("bad.yaml:6:"), "{e}");
    assert!(e.contains("methods[0].method: unknown method \"lapalce\" (did you mean \"laplace\"?)"), "{e}");
}

#[test]
fn every_problem_is_reported_at_once() {
    let text = GOOD.replace("[iris]", "[irsi, wnie]").replace("method: laplace", "method: nope");
    let e = error_of(&text);
    assert_eq!(e.lines().count(), 3, "{e}");
}

#[test]
fn bad_settings_and_references_are_caught_before_running() {
    let text = format!(
        "{GOOD}    settings: {{ mc_samples: 1 }}\n  - name: lap2\n    method: laplace\n    hyper: {{ from: lapp }}\n    kernel: {{ variance: -1 }}\n"
    );
    let e = error_of(&text);
    assert!(e.contains("mc_samples must be at least 2"), "{e}");
    assert!(e.contains("no method entry named \"lapp\" (did you mean \"lap\"?)"), "{e}");
    assert!(e.contains("kernel.variance must be a positive number"), "{e}");
}

#[test]
fn split_protocol_rules_are_checked() {
    let text = GOOD.replace("train_fraction: 0.6", "train_fraction: 1.5");
    let e = error_of(&text);
    assert!(e.contains("splits") && e.contains("train_fraction"), "{e}");
}

#[test]
fn errorbar_figures_take_metric_or_metrics_and_a_known_interval() {
    let fig = |body: &str| format!("{GOOD}figures:\n  - {{ id: f, title: F, kind: errorbar, {body} }}\n");
    parse(&fig("metrics: [error_pct, log_pred_sum], interval: ci95"), "good.yaml", &registry()).expect("metrics + ci95 are valid");
    let e = error_of(&fig("metric: error_pct, metrics: [log_pred_sum]"));
    assert!(e.contains("figures[0].metric") && e.contains("either `metric` or `metrics`"), "{e}");
    let e = error_of(&fig("metric: error_pct, interval: ci90"));
    assert!(e.contains("unknown variant `ci90`"), "{e}");
    let e = error_of(&format!("{GOOD}figures:\n  - {{ id: v, title: V, kind: violin, metrics: [error_pct] }}\n"));
    assert!(e.contains("only errorbar figures take `metrics`"), "{e}");
}

#[test]
fn hyper_keep_names_only_kernel_parameters() {
    // Kernel parameter names depend on the data (ARD: one length-scale per feature), so keep is
    // checked with the data, by `mcgp check` and before a run.
    let text = format!("{GOOD}  - name: sweep\n    method: laplace\n    hyper: {{ from: lap, keep: [varience] }}\n");
    let e = data_error_of(&text);
    assert!(
        e.contains("bad.yaml:7:")
            && e.contains("methods[1]")
            && e.contains("\"varience\" is not a parameter of this kernel (it has: variance, lengthscale)"),
        "{e}"
    );
    let ok = format!(
        "{GOOD}  - name: sweep\n    method: laplace\n    kernel: {{ ard: true }}\n    hyper: {{ from: lap, keep: [lengthscale] }}\n"
    );
    let spec = parse(&ok, "ok.yaml", &registry()).expect("keep: [lengthscale] is valid");
    mcgp::runner::check_with_data(&spec, &registry(), std::path::Path::new(env!("CARGO_MANIFEST_DIR")))
        .expect("lengthscale covers lengthscale_1..4");
}

/// The error `mcgp check` gives for a spec that parses but does not fit its data.
fn data_error_of(text: &str) -> String {
    let spec = parse(text, "bad.yaml", &registry()).expect("the text alone is valid");
    format!(
        "{:#}",
        mcgp::runner::check_with_data(&spec, &registry(), std::path::Path::new(env!("CARGO_MANIFEST_DIR")))
            .expect_err("spec must be rejected with the data")
    )
}

/// What must fit in a split's training rows is checked against them, not the dataset's rows:
/// iris has 150, a 0.6 split trains on 90, so 120 inducing inputs fail every cell.
#[test]
fn inducing_inputs_are_checked_against_the_training_rows_of_a_split() {
    let text = format!("{GOOD}  - name: ep\n    method: ep\n    settings: {{ inducing: 120 }}\n");
    let e = data_error_of(&text);
    assert!(
        e.contains("(3 classes, 4 features, 90 training rows in its smallest split)")
            && e.contains("120 inducing inputs per class but only 90 training rows"),
        "{e}"
    );
    let fits = format!("{GOOD}  - name: ep\n    method: ep\n    settings: {{ inducing: 90 }}\n");
    let spec = parse(&fits, "good.yaml", &registry()).unwrap();
    mcgp::runner::check_with_data(&spec, &registry(), std::path::Path::new(env!("CARGO_MANIFEST_DIR")))
        .expect("90 inducing inputs fit 90 rows");
}

#[test]
fn an_unsupported_dataset_and_method_pair_is_a_spec_error_naming_both() {
    // The binary-probit Laplace on iris (3 classes), and a per-class kernel for Laplace.
    let text = format!("{GOOD}  - name: probit\n    method: laplace\n    settings: {{ likelihood: probit }}\n  - name: per-class\n    method: laplace\n    kernel: {{ per_class: true }}\n");
    let e = data_error_of(&text);
    assert!(
        e.contains("bad.yaml:7:")
            && e.contains("method entry \"probit\" (laplace) on dataset \"iris\" (3 classes, 4 features, 90 training rows in its smallest split): not supported")
            && e.contains("exactly 2 classes"),
        "{e}"
    );
    assert!(
        e.contains("method entry \"per-class\" (laplace) on dataset \"iris\"") && e.contains("per_class kernels are not supported"),
        "{e}"
    );
    assert_eq!(e.lines().count(), 2, "{e}");
}

#[test]
fn a_paired_table_must_name_a_method_entry() {
    let text = format!("{GOOD}tables:\n  - {{ id: p, title: P, metrics: [error_pct], paired_with: lp }}\n");
    let e = error_of(&text);
    assert!(e.contains("tables[0].paired_with") && e.contains("\"lp\" is not a method entry (did you mean \"lap\"?)"), "{e}");
    let ok = format!("{GOOD}tables:\n  - {{ id: p, title: P, metrics: [error_pct], paired_with: lap }}\n");
    assert!(parse(&ok, "ok.yaml", &registry()).is_ok());
}

#[test]
fn an_entry_restricted_to_some_datasets_names_only_spec_datasets_and_has_its_sources_there() {
    let two = GOOD.replace("datasets: [iris]", "datasets: [iris, wine]");
    let text = format!("{two}  - name: only\n    method: laplace\n    datasets: [wnie]\n");
    let e = error_of(&text);
    assert!(e.contains("methods[1].datasets[0]") && e.contains("\"wnie\" is not a dataset of this spec (did you mean \"wine\"?)"), "{e}");
    // A source restricted to iris cannot hand hyper-parameters to an entry that runs on wine.
    let text = format!(
        "{two}  - name: src\n    method: laplace\n    datasets: [iris]\n  - name: dst\n    method: laplace\n    hyper: {{ from: src }}\n"
    );
    let e = error_of(&text);
    assert!(e.contains("methods[2].hyper.from") && e.contains("\"src\" does not run on dataset \"wine\", where \"dst\" needs"), "{e}");
    let ok = text.replace("hyper: { from: src }", "hyper: { from: src }\n    datasets: [iris]");
    parse(&ok, "ok.yaml", &registry()).expect("source and entry on the same dataset");
    // A table showing the restricted entry on a dataset it does not run on is refused, by name...
    let shown = format!("{two}  - name: only\n    method: laplace\n    datasets: [iris]\ntables:\n  - {{ id: t, title: T, metrics: [error_pct], methods: [lap, only] }}\n");
    let e = error_of(&shown);
    assert!(e.contains("tables[0].methods[1]") && e.contains("\"only\" runs only on [iris], not on \"wine\""), "{e}");
    // ...and when the table lists every entry by default; restricting the table's datasets fixes it.
    let all = shown.replace(", methods: [lap, only]", "");
    assert!(error_of(&all).contains("tables[0].methods"), "{}", error_of(&all));
    parse(&shown.replace("methods: [lap, only]", "methods: [lap, only], datasets: [iris]"), "ok.yaml", &registry())
        .expect("table on iris only");
}

#[test]
fn a_restricted_entry_expands_on_its_datasets_only_with_the_keys_it_has_unrestricted() {
    use std::collections::BTreeMap;
    let two = GOOD.replace("datasets: [iris]", "datasets: [iris, wine]");
    let splits: BTreeMap<String, usize> = [("iris".to_string(), 2), ("wine".to_string(), 2)].into();
    let open = parse(&two, "open.yaml", &registry()).unwrap();
    let narrowed = parse(&format!("{two}    datasets: [wine]\n"), "narrow.yaml", &registry()).unwrap();
    let all = mcgp::spec::expand(&open, &splits, &Default::default()).unwrap();
    let some = mcgp::spec::expand(&narrowed, &splits, &Default::default()).unwrap();
    assert_eq!(all.len(), 4);
    assert_eq!(some.len(), 2);
    assert!(some.iter().all(|c| c.dataset == "wine"));
    for c in &some {
        let same = all.iter().find(|a| a.dataset == c.dataset && a.split == c.split).unwrap();
        assert_eq!(c.key, same.key, "narrowing an entry must not change its cells' keys");
        assert_eq!(c.seed, same.seed);
    }
}

/// The groups a report counts as planned are exactly those of the cells the spec expands:
/// every grid point of an entry, on the data sets it runs on.
#[test]
fn planned_groups_are_the_expanded_cells_groups() {
    use std::collections::{BTreeMap, BTreeSet};
    let text = format!(
        "{}  - name: grid\n    method: laplace\n    datasets: [wine]\n    grid: {{ settings.newton_tol: [1e-8, 1e-10] }}\n",
        GOOD.replace("datasets: [iris]", "datasets: [iris, wine]")
    );
    let spec = parse(&text, "grid.yaml", &registry()).unwrap();
    let splits: BTreeMap<String, usize> = [("iris".to_string(), 2), ("wine".to_string(), 3)].into();
    let cells = mcgp::spec::expand(&spec, &splits, &Default::default()).unwrap();
    let from_cells: BTreeSet<(String, String, String)> =
        cells.iter().map(|c| (c.dataset.clone(), c.entry.name.clone(), c.setting.clone())).collect();
    let planned = mcgp::spec::expand::planned_groups(&spec).unwrap();
    assert_eq!(planned, from_cells);
    // lap on both data sets, grid's two settings on wine only.
    assert_eq!(planned.len(), 4, "{planned:?}");
    assert!(!planned.iter().any(|(d, m, _)| d == "iris" && m == "grid"));
}

/// `shared_init: true` gives every entry on a dataset split one init seed (different across
/// splits and datasets), keeps each cell's own seed, and changes the keys (the fits' starts
/// move); without it there is no init seed and the keys are those of a spec that never heard
/// of the field.
#[test]
fn shared_init_gives_the_entries_of_a_split_one_init_seed_and_its_own_keys() {
    use std::collections::BTreeMap;
    let two = GOOD.replace("datasets: [iris]", "datasets: [iris, wine]")
        + "  - name: other\n    method: laplace\n    kernel: { lengthscale: 2.0 }\n";
    let splits: BTreeMap<String, usize> = [("iris".to_string(), 2), ("wine".to_string(), 2)].into();
    let own = mcgp::spec::expand(&parse(&two, "own.yaml", &registry()).unwrap(), &splits, &Default::default()).unwrap();
    let off = two.replace("methods:", "shared_init: false\nmethods:");
    let off = mcgp::spec::expand(&parse(&off, "off.yaml", &registry()).unwrap(), &splits, &Default::default()).unwrap();
    let on = two.replace("methods:", "shared_init: true\nmethods:");
    let on = mcgp::spec::expand(&parse(&on, "on.yaml", &registry()).unwrap(), &splits, &Default::default()).unwrap();
    assert_eq!(own.len(), 8);
    for ((a, b), c) in own.iter().zip(&off).zip(&on) {
        assert_eq!((a.init_seed, b.init_seed), (None, None));
        assert_eq!((&a.key, a.seed), (&b.key, b.seed), "shared_init: false must leave the keys alone");
        assert_ne!(a.key, c.key, "a shared start is another fit");
        assert!(c.init_seed.is_some());
    }
    for c in &on {
        for d in &on {
            let same_split = c.dataset == d.dataset && c.split == d.split;
            assert_eq!(c.init_seed == d.init_seed, same_split, "{} {} / {} {}", c.dataset, c.split, d.dataset, d.split);
            if same_split && c.entry.name != d.entry.name {
                assert_ne!(c.seed, d.seed, "each cell keeps its own seed");
            }
        }
    }
}

#[test]
fn datasets_may_have_their_own_split_protocols() {
    let two = GOOD.replace("datasets: [iris]", "datasets: [iris, wine]");
    // A dataset without any protocol is named.
    let text = two.replace(
        "splits: { protocol: random, train_fraction: 0.6, repeats: 2 }",
        "dataset_splits:\n  iris: { protocol: random, train_fraction: 0.6, repeats: 2 }",
    );
    let e = error_of(&text);
    assert!(e.contains("datasets[1]") && e.contains("no split protocol for \"wine\""), "{e}");
    // Unknown dataset names and bad protocols are caught with their path.
    let text = format!("{two}dataset_splits:\n  wnie: {{ protocol: random, train_fraction: 1.5, repeats: 2 }}\n");
    let e = error_of(&text);
    assert!(e.contains("dataset_splits.wnie") && e.contains("(did you mean \"wine\"?)"), "{e}");
    assert!(e.contains("train_fraction"), "{e}");
}

#[test]
fn a_per_dataset_protocol_gives_the_cells_a_spec_with_that_protocol_alone_would() {
    use std::collections::BTreeMap;
    let iris_only = parse(GOOD, "a.yaml", &registry()).unwrap();
    let wine_only =
        parse(&GOOD.replace("datasets: [iris]", "datasets: [wine]").replace("repeats: 2", "repeats: 3"), "b.yaml", &registry()).unwrap();
    let both = parse(
        &GOOD
            .replace("datasets: [iris]", "datasets: [iris, wine]")
            .replace("methods:", "dataset_splits:\n  wine: { protocol: random, train_fraction: 0.6, repeats: 3 }\nmethods:"),
        "c.yaml",
        &registry(),
    )
    .unwrap();
    assert_eq!(both.raw.splits_of("wine").label(), wine_only.raw.splits_of("wine").label());
    assert_ne!(both.raw.splits_of("iris").label(), both.raw.splits_of("wine").label());
    let n: BTreeMap<String, usize> = [("iris".to_string(), 2), ("wine".to_string(), 3)].into();
    let merged = mcgp::spec::expand(&both, &n, &Default::default()).unwrap();
    let separate: Vec<_> = mcgp::spec::expand(&iris_only, &n, &Default::default())
        .unwrap()
        .into_iter()
        .chain(mcgp::spec::expand(&wine_only, &n, &Default::default()).unwrap())
        .collect();
    assert_eq!(merged.len(), 5);
    for c in &merged {
        let s = separate.iter().find(|s| s.dataset == c.dataset && s.split == c.split).unwrap();
        assert_eq!(c.key, s.key, "{} split {}: the merged spec must reuse the separate spec's cells", c.dataset, c.split);
    }
    assert_eq!(mcgp::spec::expand::split_seed(&both, "wine"), mcgp::spec::expand::split_seed(&wine_only, "wine"));
}

#[test]
fn dataset_settings_override_one_datasets_cells_only() {
    use std::collections::BTreeMap;
    let two = GOOD.replace("datasets: [iris]", "datasets: [iris, wine]");
    let plain = parse(&two, "a.yaml", &registry()).unwrap();
    let with = parse(
        &format!("{two}    settings: {{ max_hyper_iters: 5 }}\n    dataset_settings: {{ wine: {{ max_hyper_iters: 9 }} }}\n"),
        "b.yaml",
        &registry(),
    )
    .unwrap();
    let n: BTreeMap<String, usize> = [("iris".to_string(), 1), ("wine".to_string(), 1)].into();
    let cells = mcgp::spec::expand(&with, &n, &Default::default()).unwrap();
    let setting = |d: &str| cells.iter().find(|c| c.dataset == d).unwrap().entry.settings["max_hyper_iters"].clone();
    assert_eq!(setting("iris"), 5);
    assert_eq!(setting("wine"), 9);
    // An override enters the key of that dataset's cells only.
    let base = parse(&format!("{two}    settings: {{ max_hyper_iters: 5 }}\n"), "c.yaml", &registry()).unwrap();
    let base_cells = mcgp::spec::expand(&base, &n, &Default::default()).unwrap();
    let key = |cs: &[mcgp::spec::Cell], d: &str| cs.iter().find(|c| c.dataset == d).unwrap().key.clone();
    assert_eq!(key(&cells, "iris"), key(&base_cells, "iris"));
    assert_ne!(key(&cells, "wine"), key(&base_cells, "wine"));
    assert_eq!(mcgp::spec::expand(&plain, &n, &Default::default()).unwrap().len(), 2);
    // Unknown datasets and bad values are named with their path.
    let e = error_of(&format!("{two}    dataset_settings: {{ wnie: {{ max_hyper_iters: 9 }} }}\n"));
    assert!(e.contains("methods[0].dataset_settings.wnie") && e.contains("(did you mean \"wine\"?)"), "{e}");
    let e = error_of(&format!("{two}    dataset_settings: {{ wine: {{ max_hyper_itres: 9 }} }}\n"));
    assert!(e.contains("methods[0].dataset_settings.wine") && e.contains("max_hyper_itres"), "{e}");
}

#[test]
fn dataset_settings_kernel_keys_set_one_datasets_kernel() {
    use std::collections::BTreeMap;
    let two = GOOD.replace("datasets: [iris]", "datasets: [iris, wine]");
    let text = format!(
        "{two}    kernel: {{ lengthscale: 2.0, variance: 1.0 }}\n    dataset_settings: {{ wine: {{ kernel.lengthscale: 7.5, kernel.variance: 3.0, max_hyper_iters: 9 }} }}\n"
    );
    let spec = parse(&text, "k.yaml", &registry()).unwrap();
    let n: BTreeMap<String, usize> = [("iris".to_string(), 1), ("wine".to_string(), 1)].into();
    let cells = mcgp::spec::expand(&spec, &n, &Default::default()).unwrap();
    let cell = |d: &str| cells.iter().find(|c| c.dataset == d).unwrap().clone();
    let (iris, wine) = (cell("iris"), cell("wine"));
    let kernel = |c: &mcgp::spec::Cell| serde_json::to_value(&c.entry.kernel).unwrap();
    assert_eq!((kernel(&iris)["lengthscale"].clone(), kernel(&iris)["variance"].clone()), (2.0.into(), 1.0.into()));
    assert_eq!((kernel(&wine)["lengthscale"].clone(), kernel(&wine)["variance"].clone()), (7.5.into(), 3.0.into()));
    assert_eq!(wine.entry.settings["max_hyper_iters"], 9);
    assert!(iris.entry.settings.get("max_hyper_iters").is_none(), "a kernel key does not leak into the settings");
    // The override enters wine's key only: iris keys as the spec without it.
    let base = parse(&format!("{two}    kernel: {{ lengthscale: 2.0, variance: 1.0 }}\n"), "b.yaml", &registry()).unwrap();
    let base_cells = mcgp::spec::expand(&base, &n, &Default::default()).unwrap();
    let key = |cs: &[mcgp::spec::Cell], d: &str| cs.iter().find(|c| c.dataset == d).unwrap().key.clone();
    assert_eq!(key(&cells, "iris"), key(&base_cells, "iris"));
    assert_ne!(key(&cells, "wine"), key(&base_cells, "wine"));
    // A kernel field that does not exist, or a value the kernel rejects, is named with its path.
    let e = error_of(&text.replace("kernel.lengthscale: 7.5", "kernel.lengthscal: 7.5"));
    assert!(e.contains("methods[0].dataset_settings.wine") && e.contains("lengthscal"), "{e}");
    let e = error_of(&text.replace("kernel.lengthscale: 7.5", "kernel.lengthscale: -1.0"));
    assert!(e.contains("methods[0].dataset_settings.wine") && e.contains("lengthscale"), "{e}");
}

#[test]
fn dataset_settings_are_checked_on_every_grid_point() {
    // Valid alone (extra_classes with the default multinomial model; a probit grid point with no
    // extra classes), invalid together: the probit point with wine's extra class.
    let spec = "\
name: t
datasets: [iris, wine]
splits: { protocol: random, train_fraction: 0.6, repeats: 2 }
methods:
  - name: vb
    method: vbmnp
    grid: { settings.binary_model: [multinomial, probit] }
    dataset_settings: { wine: { extra_classes: 1 } }
";
    let e = error_of(spec);
    assert!(
        e.contains("methods[0].dataset_settings.wine [settings.binary_model=probit]")
            && e.contains("extra_classes needs binary_model: multinomial"),
        "{e}"
    );
    assert!(!e.contains("binary_model=multinomial]"), "only the bad point is named: {e}");
    parse(&spec.replace("extra_classes: 1", "extra_classes: 0"), "ok.yaml", &registry()).expect("valid without the extra class");
}

/// Inputs that once hung `check` or passed it and then failed every cell of a run.
#[test]
fn empty_names_duplicates_infinite_timeouts_long_names_and_deep_nesting_are_rejected_at_once() {
    let t0 = std::time::Instant::now();
    // Empty strings (an empty needle once looped forever when locating the error).
    for (from, to, want) in [
        ("  - name: lap\n", "  - name: \"\"\n", "methods[0].name: must be 1 to 100 characters"),
        ("datasets: [iris]", "datasets: [\"\"]", "unknown dataset \"\""),
        ("    method: laplace\n", "    method: \"\"\n", "unknown method \"\""),
    ] {
        let e = error_of(&GOOD.replace(from, to));
        assert!(e.contains(want) && e.starts_with("bad.yaml:"), "{e}");
    }
    let e = error_of(&format!("{GOOD}    hyper: {{ from: \"\" }}\n"));
    assert!(e.contains("no method entry named \"\""), "{e}");
    let e = error_of(&format!("{GOOD}    grid: {{ \"\": [1] }}\n"));
    assert!(e.contains("grid keys must start with"), "{e}");
    let e = error_of(&GOOD.replace("datasets: [iris]", "datasets: [iris, wine, iris]"));
    assert!(e.contains("bad.yaml:2:") && e.contains("datasets[2]") && e.contains("listed twice"), "{e}");
    let e = error_of(&format!("{GOOD}timeout_seconds: .inf\n"));
    assert!(e.contains("timeout_seconds: must be a positive number of seconds, got inf"), "{e}");
    let e = error_of(&GOOD.replace("name: t\n", &format!("name: {}\n", "x".repeat(300))));
    assert!(e.contains("bad.yaml:1:") && e.contains("at most 100 characters"), "{e}");
    let deep = format!("{GOOD}    settings: {}{}\n", "[".repeat(30_000), "]".repeat(30_000));
    let e = error_of(&deep);
    assert!(e.contains("bad.yaml:7:") && e.contains("nested more than 64 levels"), "{e}");
    // Not quadratic: all of the above in well under a second on any machine.
    assert!(t0.elapsed() < std::time::Duration::from_secs(5), "{:?}", t0.elapsed());
    // The same bracket depth inside a quoted string or a comment is text, not nesting.
    let quoted = format!("{GOOD}    settings: {{ likelihood: logit }}  # {}\n", "[".repeat(100));
    parse(&quoted, "ok.yaml", &registry()).expect("brackets in a comment");
}

#[test]
fn a_spec_that_is_not_utf8_is_located_at_its_first_bad_byte() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("latin1.yaml");
    let mut bytes = GOOD.as_bytes().to_vec();
    let at = GOOD.find("laplace").unwrap() + 3;
    bytes.insert(at, 0xe9); // 'é' in Latin-1
    std::fs::write(&path, bytes).unwrap();
    let e = mcgp::spec::load(&path, &registry()).unwrap_err().to_string();
    assert!(e.contains("latin1.yaml:6:16: not UTF-8"), "{e}");
}

#[test]
fn a_setting_a_method_would_ignore_is_refused() {
    // VB-MNP learns the RBF precisions and holds the signal variance: learn_variance: true
    // (the kernel's default) with hyper: learn would be silently ignored.
    let text = format!("{GOOD}  - name: vb\n    method: vbmnp\n    hyper: learn\n");
    let e = data_error_of(&text);
    assert!(e.contains("method entry \"vb\" (vbmnp)") && e.contains("set kernel.learn_variance: false"), "{e}");
    let ok = format!("{GOOD}  - name: vb\n    method: vbmnp\n    hyper: learn\n    kernel: {{ learn_variance: false }}\n");
    let spec = parse(&ok, "ok.yaml", &registry()).unwrap();
    mcgp::runner::check_with_data(&spec, &registry(), std::path::Path::new(env!("CARGO_MANIFEST_DIR"))).expect("accepted");
}

#[test]
fn curve_only_fields_belong_to_curve_figures_and_are_checked() {
    // (field, a good value, a bad value, what the bad value's error says)
    for (field, good, bad, why) in [("target", "3.25", ".nan", "a finite value"), ("settle_within", "1.0", "-1", "a distance >= 0")] {
        let figure = |kind: &str, value: &str| {
            format!("{GOOD}figures:\n  - {{ id: f, title: F, kind: {kind}, trace: test_error, metric: error_pct, {field}: {value} }}\n")
        };
        let at = format!("figures[0].{field}");
        let e = error_of(&figure("errorbar", good));
        assert!(e.contains(&at) && e.contains(&format!("only curve figures take `{field}`")), "{e}");
        let e = error_of(&figure("curve", bad));
        assert!(e.contains(&at) && e.contains(why), "{e}");
        parse(&figure("curve", good), "good.yaml", &registry()).expect("a curve with the field");
    }
}

#[test]
fn a_miss_note_needs_a_scored_number_and_a_reason() {
    let table = |value: &str| {
        format!("{GOOD}tables:\n  - id: t\n    title: T\n    metrics: [error_pct]\n    paper:\n      - {{ dataset: iris, method: lap, metric: error_pct, mean: 3.0, {value} }}\n")
    };
    parse(&table("miss: { class: decided, why: \"diag.yaml shows it\" }"), "good.yaml", &registry()).expect("a decided miss is valid");
    let e = error_of(&table("scored: false, miss: { class: deviation, why: \"C = 6\" }"));
    assert!(e.contains("bad.yaml:") && e.contains("tables[0].paper[0].miss") && e.contains("never a miss"), "{e}");
    let e = error_of(&table("miss: { class: deviation, why: \" \" }"));
    assert!(e.contains("tables[0].paper[0].miss.why") && e.contains("must say what decides or explains"), "{e}");
    let e = error_of(&table("miss: { class: unexplained, why: \"x\" }"));
    assert!(e.contains("unknown variant `unexplained`"), "{e}");
}

#[test]
fn tolerance_parameters_must_be_finite_and_not_negative() {
    let table = |tol: &str| format!("{GOOD}tables:\n  - id: t\n    title: T\n    metrics: [error_pct]\n    tolerance: {tol}\n");
    parse(&table("{ rule: standard_error, k: 3, rounding: 0.5 }"), "good.yaml", &registry()).expect("rounding 0.5 is valid");
    let e = error_of(&table("{ rule: standard_error, k: 3, rounding: -0.5 }"));
    assert!(e.contains("tables[0].tolerance.rounding") && e.contains("finite number >= 0, got -0.5"), "{e}");
    let e = error_of(&table("{ rule: absolute, abs: .nan }"));
    assert!(e.contains("tables[0].tolerance.abs"), "{e}");
    // The old name of the standard-error rule's rounding is refused, not silently ignored.
    let e = error_of(&table("{ rule: standard_error, k: 3, floor: 0.5 }"));
    assert!(e.contains("floor"), "{e}");
}

/// `derived_datasets`: class c against the rest of a registry dataset. The problem is binary on
/// the same rows, its task enters the data hash and so every cell key (another class gives other
/// keys with everything else equal), and a class the data do not have is a spec error naming
/// the field; names are checked like datasets.
#[test]
fn a_derived_one_vs_rest_dataset_is_binary_keyed_by_its_task_and_checked_against_the_data() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let text = |c: &str| {
        format!(
            "name: t\ndatasets: [iris, iris-c]\nderived_datasets:\n  iris-c: {{ from: iris, task: {{ one_vs_rest: {c} }} }}\n\
             splits: {{ protocol: random, train_fraction: 0.6, repeats: 2 }}\nmethods:\n  - name: probit\n    method: laplace\n\
             \x20   settings: {{ likelihood: probit }}\n    datasets: [iris-c]\n"
        )
    };
    let prepare = |c: &str| mcgp::runner::prepare(&parse(&text(c), "t.yaml", &registry()).unwrap(), &registry(), root, None).unwrap();
    let setosa = prepare("Iris-setosa");
    let data = &setosa.datasets["iris-c"];
    assert_eq!(data.class_names, ["not Iris-setosa", "Iris-setosa"]);
    let iris = &setosa.datasets["iris"];
    let k = iris.class_names.iter().position(|n| n == "Iris-setosa").unwrap();
    assert!(data.y.iter().zip(&iris.y).all(|(&b, &y)| b == usize::from(y == k)));
    assert_eq!(data.class_counts(None), [100, 50]);
    assert_eq!(setosa.cells.len(), 2, "the binary-probit entry runs on the derived dataset only");
    let versicolor = prepare("Iris-versicolor");
    for (a, b) in setosa.cells.iter().zip(&versicolor.cells) {
        assert_eq!((a.dataset.as_str(), a.split, a.seed), (b.dataset.as_str(), b.split, b.seed));
        assert_ne!(a.key, b.key, "the task is part of the key");
        assert_ne!(a.data_hash, b.data_hash);
    }
    let e = data_error_of(&text("Iris-setsa"));
    assert!(
        e.contains("bad.yaml:4:")
            && e.contains("derived_datasets.iris-c.task.one_vs_rest: class \"Iris-setsa\" is not a class of iris (its classes: Iris-setosa, Iris-versicolor, Iris-virginica)"),
        "{e}"
    );
    // Names: listed in `datasets`, a known source, not a registry name.
    let e = error_of(&text("Iris-setosa").replace("[iris, iris-c]", "[iris]").replace("datasets: [iris-c]", "datasets: [iris]"));
    assert!(e.contains("derived_datasets.iris-c: \"iris-c\" is not listed in `datasets`"), "{e}");
    let e = error_of(&text("Iris-setosa").replace("from: iris,", "from: irsi,"));
    assert!(e.contains("derived_datasets.iris-c.from: unknown dataset \"irsi\" (did you mean \"iris\"?)"), "{e}");
    let e = error_of(&text("Iris-setosa").replace("iris-c", "wine"));
    assert!(e.contains("derived_datasets.wine: \"wine\" is a registry dataset"), "{e}");
}

/// A derived dataset without a task is its source's rows under another name, with its own
/// split protocol (one data set at two training sizes in one spec): the same labels and
/// features, the sizes each protocol asks for, and keys of its own (the derivation is part of
/// the data hash, so the alias never shares cells with its source).
#[test]
fn a_derived_dataset_without_a_task_is_the_same_rows_with_its_own_splits() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let text = "name: t\ndatasets: [iris, iris-small]\nderived_datasets:\n  iris-small: { from: iris }\n\
                splits: { protocol: random, train_fraction: 0.6, repeats: 2 }\n\
                dataset_splits:\n  iris-small: { protocol: random, train_fraction: 0.6, train_size: 30, repeats: 2 }\n\
                methods:\n  - name: la\n    method: laplace\n";
    let prepared = mcgp::runner::prepare(&parse(text, "t.yaml", &registry()).unwrap(), &registry(), root, None).unwrap();
    let (iris, small) = (&prepared.datasets["iris"], &prepared.datasets["iris-small"]);
    assert_eq!(small.name, "iris-small");
    assert_eq!((&small.y, &small.class_names), (&iris.y, &iris.class_names));
    assert_eq!(small.x, iris.x);
    let train_sizes = |d: &str| prepared.splits[d].iter().map(|s| s.train.len()).collect::<Vec<_>>();
    assert_eq!(train_sizes("iris"), [90, 90]);
    assert_eq!(train_sizes("iris-small"), [30, 30]);
    let hash = |d: &str| prepared.cells.iter().find(|c| c.dataset == d).unwrap().data_hash.clone();
    assert_ne!(hash("iris"), hash("iris-small"));
}

#[test]
fn a_mean_row_paper_value_needs_the_mean_row_and_no_pairing() {
    let table = |extra: &str| {
        format!("{GOOD}tables:\n  - id: t\n    title: T\n    metrics: [time_train]\n{extra}    paper:\n      - {{ dataset: mean, method: lap, metric: time_train, mean: 3.0, scored: false }}\n")
    };
    parse(&table("    mean_row: true\n"), "good.yaml", &registry()).expect("a mean row with its paper value");
    let e = error_of(&table(""));
    assert!(e.contains("tables[0].paper[0].dataset") && e.contains("set mean_row: true"), "{e}");
    let e = error_of(&table("    mean_row: true\n    paired_with: lap\n"));
    assert!(e.contains("tables[0].mean_row") && e.contains("a paired table"), "{e}");
}

#[test]
fn a_key_repeated_in_a_map_is_refused_with_its_line() {
    // The typed parse would keep only the last of the two grids.
    let text = format!("{GOOD}    grid:\n      kernel.variance: [0.1, 1.0]\n      kernel.variance: [10.0, 100.0]\n");
    let e = error_of(&text);
    // Located at the key's second occurrence, named by the map's path.
    assert!(e.contains("bad.yaml:9:7: methods[0].grid: duplicate entry with key \"kernel.variance\""), "{e}");
    // In a flow map, on the same line.
    let settings = format!("{GOOD}    settings: {{ max_hyper_iters: 5, max_hyper_iters: 9 }}\n");
    let e = error_of(&settings);
    assert!(e.contains(":7:37: ") && e.contains("duplicate entry"), "{e}");
}

#[test]
fn unknown_keys_of_hyper_from_and_checkpoints_are_refused() {
    let text = format!("{GOOD}  - name: sweep\n    method: laplace\n    hyper: {{ from: lap, kep: [variance] }}\n");
    let e = error_of(&text);
    // (Serde reads the untagged forms from a buffer: the location is the entry's, the path names the field.)
    assert!(e.contains("bad.yaml:7:") && e.contains("methods[1].hyper: fixed, learn or { from: <method entry>, keep:"), "{e}");
    // The forms that are valid still parse (and keep their meaning).
    parse(&text.replace("kep:", "keep:"), "ok.yaml", &registry()).expect("keep is valid");
    parse(&format!("{GOOD}  - name: b\n    method: laplace\n    hyper: {{ from: lap }}\n"), "ok.yaml", &registry()).expect("from alone");
    let e = error_of(&format!("{GOOD}    checkpoints: {{ every: 5, evry: 2 }}\n"));
    assert!(e.contains("bad.yaml:5:") && e.contains("methods[0].checkpoints: geometric, { every: <k> } or a list of iterations"), "{e}");
    parse(&format!("{GOOD}    checkpoints: {{ every: 5 }}\n"), "ok.yaml", &registry()).expect("every alone");
}

#[test]
fn a_sum_kernel_has_no_variance_of_its_own() {
    let e = error_of(&format!(
        "{GOOD}    kernel: {{ type: sum, variance: 4.0, terms: [ {{ lengthscale: 1.0 }}, {{ type: white, variance: 0.1 }} ] }}\n"
    ));
    assert!(e.contains("a sum kernel has no variance of its own"), "{e}");
}

#[test]
fn a_dataset_override_of_a_gridded_key_is_refused() {
    // With one grid value nothing else catches it: wine's cells would run 50 labelled 10.
    let text =
        format!("{GOOD}    grid: {{ settings.max_hyper_iters: [10] }}\n    dataset_settings: {{ iris: {{ max_hyper_iters: 50 }} }}\n");
    let e = error_of(&text);
    assert!(
        e.contains("methods[0].dataset_settings.iris.max_hyper_iters") && e.contains("overrides the grid key settings.max_hyper_iters"),
        "{e}"
    );
    let kernel =
        format!("{GOOD}    grid: {{ kernel.variance: [1.0, 2.0] }}\n    dataset_settings: {{ iris: {{ kernel.variance: 3.0 }} }}\n");
    assert!(error_of(&kernel).contains("overrides the grid key kernel.variance"), "{}", error_of(&kernel));
    // Another key beside the grid's is fine.
    parse(&text.replace("max_hyper_iters: 50", "max_newton_iters: 50"), "ok.yaml", &registry()).expect("a key the grid does not set");
}

#[test]
fn a_setting_that_hyper_from_overwrites_is_refused() {
    // The grid's variances would all be replaced by the source's fitted one: three labels, one cell.
    let sweep = format!(
        "{GOOD}  - name: sweep\n    method: laplace\n    hyper: {{ from: lap }}\n    grid: {{ kernel.variance: [0.1, 1.0, 10.0] }}\n"
    );
    let e = data_error_of(&sweep);
    assert!(
        e.contains("methods[1] [kernel.variance=0.1]") && e.contains("sets kernel parameter \"variance\", which hyper: { from: lap }"),
        "{e}"
    );
    // With keep the grid is a real sweep at the source's length-scale.
    let kept = sweep.replace("hyper: { from: lap }", "hyper: { from: lap, keep: [variance] }");
    let spec = parse(&kept, "ok.yaml", &registry()).unwrap();
    mcgp::runner::check_with_data(&spec, &registry(), std::path::Path::new(env!("CARGO_MANIFEST_DIR")))
        .expect("kept parameters may be gridded");
    // A parameter the source's kernel does not have (ARD against an isotropic source).
    let ard = format!("{GOOD}  - name: ard\n    method: laplace\n    kernel: {{ ard: true }}\n    hyper: {{ from: lap }}\n");
    let e = data_error_of(&ard);
    assert!(e.contains("takes kernel parameter \"lengthscale_1\" from \"lap\", whose kernel has no such parameter"), "{e}");
}

#[test]
fn a_decision_grid_needs_two_dimensional_inputs() {
    let e = data_error_of(&format!("{GOOD}    decision_grid: {{ n: 20 }}\n"));
    assert!(e.contains("method entry \"lap\" (laplace) on dataset \"iris\"") && e.contains("decision_grid needs 2-D inputs"), "{e}");
}

#[test]
fn figure_ids_axes_and_trace_x_are_checked_before_running() {
    let fig = |f: &str| format!("{GOOD}    grid: {{ kernel.variance: [1.0, 2.0] }}\nfigures:\n  - {{ {f} }}\n");
    let e = error_of(&fig("id: a/b, title: t, kind: errorbar, metric: error_pct"));
    assert!(e.contains("figures[0].id") && e.contains("not a plain file name"), "{e}");
    let e = error_of(&fig("id: f, title: t, kind: errorbar, metric: error_pct, x: kernel.varience"));
    assert!(e.contains("figures[0].x") && e.contains("not a grid key of the figure's entries (did you mean \"kernel.variance\"?)"), "{e}");
    let e = error_of(&fig("id: f, title: t, kind: trace, trace: bound, trace_x: tme"));
    assert!(e.contains("figures[0].trace_x") && e.contains("iter or time, got \"tme\""), "{e}");
    let e = error_of(&fig("id: f, title: t, kind: violin, metric: error_pct, trace_x: time"));
    assert!(e.contains("only trace figures take `trace_x`"), "{e}");
    let e = error_of(&fig("id: f, title: t, kind: violin, metric: error_pct, x: kernel.variance"));
    assert!(e.contains("figures[0].x") && e.contains("a violin figure takes no `x`"), "{e}");
    for ok in [
        "id: f, title: t, kind: errorbar, metric: error_pct, x: kernel.variance",
        "id: f, title: t, kind: errorbar, metric: error_pct, x: dataset",
        "id: f, title: t, kind: trace, trace: bound, trace_x: time",
    ] {
        parse(&fig(ok), "ok.yaml", &registry()).unwrap_or_else(|e| panic!("{ok}: {e}"));
    }
}

#[test]
fn a_derived_dataset_name_is_a_plain_file_name() {
    let text = GOOD.replace("datasets: [iris]", "datasets: [\"../iris-escape\"]\nderived_datasets: { \"../iris-escape\": { from: iris } }");
    let e = error_of(&text);
    assert!(e.contains("derived_datasets.../iris-escape") && e.contains("it names files"), "{e}");
}

#[test]
fn a_problem_in_a_later_entry_points_at_that_entry() {
    // Both entries have `checkpoints`: the bad one is the second (line 10), not the first (line 7).
    let text = format!("{GOOD}    checkpoints: geometric\n  - name: other\n    method: laplace\n    checkpoints: {{ every: 0 }}\n");
    let e = error_of(&text);
    assert!(e.contains("bad.yaml:10:") && e.contains("methods[1]") && e.contains("checkpoints.every must be at least 1"), "{e}");
    // A duplicate name points at the duplicate.
    let e = error_of(&format!("{GOOD}  - name: lap\n    method: laplace\n"));
    assert!(e.contains("bad.yaml:7:") && e.contains("duplicate method name \"lap\""), "{e}");
}

#[test]
fn a_grid_value_that_would_make_an_ambiguous_label_is_refused() {
    // `kernel.lengthscale=[1.0,2.0]` would split at its comma when the report reads the label.
    let e = error_of(&format!("{GOOD}    kernel: {{ ard: true }}\n    grid: {{ kernel.lengthscale: [[1.0, 2.0, 3.0, 4.0]] }}\n"));
    assert!(e.contains("methods[0].grid.kernel.lengthscale") && e.contains("grid values are numbers, booleans or strings"), "{e}");
}

#[test]
fn a_budget_or_checkpoints_the_fit_never_consults_are_refused() {
    // Laplace with a fixed kernel is one Newton solve: nothing for a budget to end or a checkpoint to score.
    let e = data_error_of(&format!("{GOOD}    budget: {{ iterations: 5 }}\n    checkpoints: geometric\n"));
    assert!(
        e.contains("method entry \"lap\" (laplace) on dataset \"iris\"")
            && e.contains("budget: laplace with a fixed kernel has no iterations a budget can end")
            && e.contains("checkpoints: laplace with a fixed kernel scores no checkpoints"),
        "{e}"
    );
    // Learning, it has: the search's evaluations.
    let ok = format!("{GOOD}    hyper: learn\n    budget: {{ iterations: 5 }}\n    checkpoints: geometric\n");
    let spec = parse(&ok, "ok.yaml", &registry()).unwrap();
    mcgp::runner::check_with_data(&spec, &registry(), std::path::Path::new(env!("CARGO_MANIFEST_DIR")))
        .expect("a learning laplace takes both");
    // A clock alone stops nothing, so it is fine anywhere.
    let clock = format!("{GOOD}    budget: {{ clock: cpu }}\none_cell_at_a_time: true\n");
    let spec = parse(&clock, "ok.yaml", &registry()).unwrap();
    mcgp::runner::check_with_data(&spec, &registry(), std::path::Path::new(env!("CARGO_MANIFEST_DIR"))).expect("clock only");
}

#[test]
fn columns_count_characters_not_bytes() {
    // "ü" is two bytes: the column of "irsi" is 17 in characters (18 in bytes).
    let e = error_of(&GOOD.replace("datasets: [iris]", "datasets: [\"ü\", irsi]"));
    assert!(e.contains("bad.yaml:2:17: datasets[1]: unknown dataset \"irsi\""), "{e}");
}

#[test]
fn a_paper_values_metric_and_setting_keys_must_be_the_tables_and_the_entrys() {
    let spec = |grid: &str, value: &str| {
        format!(
            "{GOOD}{grid}tables:\n  - id: t\n    title: T\n    metrics: [error_pct]\n    paper:\n      - {{ dataset: iris, method: lap, mean: 3.0, {value} }}\n"
        )
    };
    let grid = "    grid: { settings.max_hyper_iters: [5, 10] }\n";
    parse(&spec(grid, "metric: error_pct, setting: \"settings.max_hyper_iters=10\""), "good.yaml", &registry()).expect("a grid point");
    parse(&spec(grid, "metric: error_pct"), "good.yaml", &registry()).expect("no setting: every grid point");
    // A setting the spec does not run (the paper's own: a column of misses), on a grid key or
    // on any setting of the method, gridded or not.
    parse(&spec(grid, "metric: error_pct, setting: \"settings.max_hyper_iters=300\""), "good.yaml", &registry()).expect("a value not run");
    parse(&spec("", "metric: error_pct, setting: \"settings.mc_samples=100\""), "good.yaml", &registry()).expect("a setting not gridded");
    let e = error_of(&spec(grid, "metric: error_pcnt"));
    assert!(e.contains("tables[0].paper[0].metric: \"error_pcnt\" is not one of the table's metrics (did you mean \"error_pct\"?)"), "{e}");
    let e = error_of(&spec(grid, "metric: error_pct, setting: \"settings.max_hyper_iter=10\""));
    assert!(
        e.contains("tables[0].paper[0].setting: \"settings.max_hyper_iter\" is neither a grid key nor a setting of method entry \"lap\" (did you mean \"settings.max_hyper_iters\"?)"),
        "{e}"
    );
    let e = error_of(&spec("", "metric: error_pct, setting: \"kernel.varaince=2\""));
    assert!(e.contains("\"kernel.varaince\" is neither a grid key nor a setting"), "{e}");
}

/// A method's settings error names the settings field and points at its line: an unknown key
/// with the closest known one, a value of the wrong type with the key it was given for.
#[test]
fn settings_errors_name_the_field_and_its_line() {
    let unknown = format!("{GOOD}  - name: ep\n    method: ep\n    settings:\n      inducing: 5\n      max_iter: 50\n");
    let e = error_of(&unknown);
    assert!(
        e.contains("bad.yaml:11:7:") && e.contains("settings.max_iter: unknown field") && e.contains("(did you mean `max_iters`?)"),
        "{e}"
    );
    let wrong_type = format!("{GOOD}  - name: ep\n    method: ep\n    settings:\n      inducing: 5\n      max_iters: fifty\n");
    let e = error_of(&wrong_type);
    assert!(e.contains("bad.yaml:11:7:") && e.contains("settings.max_iters: invalid type: string \"fifty\""), "{e}");
}
