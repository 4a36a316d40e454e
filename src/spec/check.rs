//! The semantic rules of a spec, every one checked and every problem collected (not stopping
//! at the first), each as (field path, text to point at, message): names, datasets, splits,
//! methods and their settings at every grid point, budgets, tables, figures, references.
use super::*;

pub(super) type Problem = (String, Option<String>, String); // (field path, text to locate, message)

/// Longest experiment or method entry name (they name folders and table columns).
const MAX_NAME: usize = 100;

/// Every semantic rule, collected rather than stopping at the first.
pub(super) fn check(raw: &RawSpec, registry: &Registry) -> Vec<Problem> {
    let mut out: Vec<Problem> = Vec::new();
    let mut err = |path: String, needle: Option<&str>, msg: String| out.push((path, needle.map(str::to_string), msg));

    if raw.name.is_empty() || !raw.name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
        err("name".into(), Some("name"), format!("must be non-empty letters, digits, '-' or '_' (it names folders), got \"{}\"", raw.name));
    } else if raw.name.len() > MAX_NAME {
        err("name".into(), Some("name"), format!("must be at most {MAX_NAME} characters (it names folders), got {}", raw.name.len()));
    }
    if raw.datasets.is_empty() {
        err("datasets".into(), Some("datasets"), "must list at least one dataset".into());
    }
    let registry_names = registry.names();
    let known_datasets: Vec<String> = registry_names.iter().cloned().chain(raw.derived_datasets.keys().cloned()).collect();
    for (i, d) in raw.datasets.iter().enumerate() {
        if raw.datasets[..i].contains(d) {
            err(format!("datasets[{i}]"), Some(d), format!("\"{d}\" is listed twice (its cells would be counted twice)"));
        }
        if !registry.contains(d) && !raw.derived_datasets.contains_key(d) {
            err(format!("datasets[{i}]"), Some(d), format!("unknown dataset \"{d}\"{}", suggest(d, &known_datasets)));
        }
    }
    for (name, derived) in &raw.derived_datasets {
        // The name becomes a file name (the splits' CSV) and a `--datasets` list entry.
        if !is_plain_name(name) {
            err(
                format!("derived_datasets.{name}"),
                Some(name),
                format!("\"{name}\": a derived dataset's name must be letters, digits, '-', '_' or '.' (not first): it names files"),
            );
        }
        if registry.contains(name) {
            err(
                format!("derived_datasets.{name}"),
                Some(name),
                format!("\"{name}\" is a registry dataset: give the derived problem its own name (e.g. {name}-task)"),
            );
        } else if !raw.datasets.contains(name) {
            err(format!("derived_datasets.{name}"), Some(name), format!("\"{name}\" is not listed in `datasets`"));
        }
        if !registry.contains(&derived.from) {
            err(
                format!("derived_datasets.{name}.from"),
                Some(&derived.from),
                format!("unknown dataset \"{}\"{}", derived.from, suggest(&derived.from, &registry_names)),
            );
        }
    }
    if let Some(Err(e)) = raw.splits.as_ref().map(SplitProtocol::validate) {
        err("splits".into(), Some("splits"), e);
    }
    for (name, protocol) in &raw.dataset_splits {
        if !raw.datasets.contains(name) {
            err(
                format!("dataset_splits.{name}"),
                Some(name),
                format!("\"{name}\" is not a dataset of this spec{}", suggest(name, &raw.datasets)),
            );
        }
        if let Err(e) = protocol.validate() {
            err(format!("dataset_splits.{name}"), Some(name), e);
        }
    }
    if raw.splits.is_none() {
        for (i, d) in raw.datasets.iter().enumerate() {
            if !raw.dataset_splits.contains_key(d) {
                err(
                    format!("datasets[{i}]"),
                    Some(d),
                    format!("no split protocol for \"{d}\": give `splits` (all datasets) or `dataset_splits.{d}`"),
                );
            }
        }
    }
    if let Some(t) = raw.timeout_seconds {
        if !(t.is_finite() && t > 0.0) {
            err("timeout_seconds".into(), Some("timeout_seconds"), format!("must be a positive number of seconds, got {t}"));
        }
    }
    if raw.methods.is_empty() {
        err("methods".into(), Some("methods"), "must list at least one method".into());
    }
    let names: Vec<String> = raw.methods.iter().map(|m| m.name.clone()).collect();
    let known_methods: Vec<String> = crate::methods::METHODS.iter().map(|(n, _)| n.to_string()).collect();
    let mut seen = BTreeSet::new();
    for (i, m) in raw.methods.iter().enumerate() {
        let at = format!("methods[{i}]");
        if m.name.trim().is_empty() || m.name.len() > MAX_NAME {
            err(format!("{at}.name"), Some("name"), format!("must be 1 to {MAX_NAME} characters, not blank, got \"{}\"", m.name));
        }
        if !seen.insert(m.name.clone()) {
            err(format!("{at}.name"), Some(&m.name), format!("duplicate method name \"{}\"", m.name));
        }
        if !known_methods.contains(&m.method) {
            err(format!("{at}.method"), Some(&m.method), format!("unknown method \"{}\"{}", m.method, suggest(&m.method, &known_methods)));
            continue;
        }
        for (key, values) in &m.grid {
            if !(key.starts_with("kernel.") || key.starts_with("settings.")) {
                err(format!("{at}.grid.{key}"), Some(key), "grid keys must start with \"kernel.\" or \"settings.\"".into());
            }
            if values.is_empty() {
                err(format!("{at}.grid.{key}"), Some(key), "a grid needs at least one value".into());
            }
            // Values become the cells' setting labels `key=value,...`, which the report splits.
            let ambiguous = |v: &serde_json::Value| match v {
                serde_json::Value::Array(_) | serde_json::Value::Object(_) => true,
                serde_json::Value::String(s) => s.contains([',', '=']),
                _ => false,
            };
            if let Some(v) = values.iter().find(|v| ambiguous(v)) {
                err(
                    format!("{at}.grid.{key}"),
                    Some(key),
                    format!("grid values are numbers, booleans or strings without ',' or '=' (they label the cells), got {v}"),
                );
            }
        }
        // Check every grid point, so a bad value is caught before the run.
        match expand::grid_points(m) {
            Ok(points) => {
                for (label, entry) in points {
                    let where_ = if label.is_empty() { at.clone() } else { format!("{at} [{label}]") };
                    if let Err(e) = entry.kernel.validate() {
                        err(where_.clone(), Some(&m.name), e);
                    }
                    if let Err(e) = crate::methods::build(&entry.method, &entry.settings) {
                        // Point at the settings key the message names, else at the entry.
                        let key = settings_key(&e).unwrap_or(&m.name).to_string();
                        err(where_.clone(), Some(&key), e);
                    }
                    if let Some(Err(e)) = entry.budget.as_ref().map(crate::methods::Budget::validate) {
                        err(format!("{where_}.budget"), Some("budget"), e);
                    }
                    if entry.budget.is_some_and(|b| b.clock == crate::methods::TrainingClock::Cpu) && !raw.one_cell_at_a_time {
                        err(
                            format!("{where_}.budget.clock"),
                            Some("clock"),
                            "cpu charges the whole process's CPU time to the cell, so the spec needs `one_cell_at_a_time: true`".into(),
                        );
                    }
                    if let Some(Err(e)) = entry.checkpoints.as_ref().map(crate::methods::Checkpoints::validate) {
                        err(format!("{where_}.checkpoints"), Some("checkpoints"), e);
                    }
                    if let Some(Err(e)) = entry.decision_grid.as_ref().map(DecisionGridSpec::validate) {
                        err(format!("{where_}.decision_grid"), Some("decision_grid"), e);
                    }
                }
            }
            Err(e) => err(format!("{at}.grid"), Some(&m.name), e),
        }
        check_refs(&mut err, &at, &m.datasets, &raw.datasets, "datasets", "dataset of this spec");
        for (d, over) in &m.dataset_settings {
            let here = format!("{at}.dataset_settings.{d}");
            if !raw.datasets.contains(d) || !m.runs_on(d) {
                err(here, Some(d), format!("\"{d}\" is not a dataset this entry runs on{}", suggest(d, &raw.datasets)));
            } else if !over.is_object() {
                err(here, Some(d), "must be a map of settings".into());
            } else {
                // An override of a gridded key would run the override under every grid label
                // (with one grid value nothing else would catch it).
                for k in over.as_object().into_iter().flat_map(|o| o.keys()) {
                    let as_grid_key = if k.starts_with("kernel.") { k.clone() } else { format!("settings.{k}") };
                    let nested = |a: &str, b: &str| a == b || a.starts_with(&format!("{b}."));
                    if let Some(g) = m.grid.keys().find(|g| nested(g, &as_grid_key) || nested(&as_grid_key, g)) {
                        err(
                            format!("{here}.{k}"),
                            Some(k),
                            format!("overrides the grid key {g}, so this dataset's cells would run the override under the grid's labels: drop one of them"),
                        );
                    }
                }
                // Every grid point as this dataset's cells run it (the override on top); points
                // invalid without the override are reported above.
                for (label, point) in expand::grid_points(m).unwrap_or_default() {
                    let where_ = if label.is_empty() { here.clone() } else { format!("{here} [{label}]") };
                    let on_dataset = match point.try_on_dataset(d) {
                        Ok(entry) => entry,
                        Err(e) => {
                            err(where_, Some(d), e);
                            break;
                        }
                    };
                    if crate::methods::build(&m.method, &point.settings).is_err() {
                        continue;
                    }
                    if let Err(e) = crate::methods::build(&m.method, &on_dataset.settings) {
                        err(where_, Some(d), e);
                    }
                }
            }
        }
        if let HyperSpec::From { source: src, .. } = &m.hyper {
            match raw.methods.iter().find(|s| &s.name == src) {
                None => err(format!("{at}.hyper.from"), Some(src), format!("no method entry named \"{src}\"{}", suggest(src, &names))),

                Some(s) if !s.grid.is_empty() => err(
                    format!("{at}.hyper.from"),
                    Some(src),
                    format!("\"{src}\" has a grid, so it has no single fit per split to take hyper-parameters from"),
                ),
                Some(_) if src == &m.name => {
                    err(format!("{at}.hyper.from"), Some(src), "a method cannot take hyper-parameters from itself".into())
                }
                Some(s) => {
                    if let Some(d) = raw.datasets.iter().find(|d| m.runs_on(d) && !s.runs_on(d)) {
                        let msg = format!("\"{src}\" does not run on dataset \"{d}\", where \"{}\" needs its hyper-parameters", m.name);
                        err(format!("{at}.hyper.from"), Some(src), msg);
                    }
                }
            }
        }
    }
    if let Some(cycle) = hyper_cycle(&raw.methods) {
        err("methods".into(), Some(&cycle), format!("hyper.from forms a cycle through \"{cycle}\""));
    }
    let mut ids = BTreeSet::new();
    for (i, t) in raw.tables.iter().enumerate() {
        let at = format!("tables[{i}]");
        if !ids.insert(t.id.clone()) {
            err(format!("{at}.id"), Some(&t.id), format!("duplicate table/figure id \"{}\"", t.id));
        }
        if t.metrics.is_empty() {
            err(format!("{at}.metrics"), Some(&t.id), "must list at least one metric".into());
        }
        check_refs(&mut err, &at, &t.methods, &names, "methods", "method entry");
        if let Some((field, v)) = t.tolerance.bad_parameter() {
            err(format!("{at}.tolerance.{field}"), Some(&t.id), format!("must be a finite number >= 0, got {v}"));
        }
        // A table may list only the paper's data sets it cannot run (rows of published numbers).
        let known: Vec<String> = raw.datasets.iter().chain(t.paper_only_datasets.keys()).cloned().collect();
        check_refs(&mut err, &at, &t.datasets, &known, "datasets", "dataset of this spec or of the table's paper_only_datasets");
        let run: Vec<String> = t.datasets.iter().filter(|d| raw.datasets.contains(d)).cloned().collect();
        if t.datasets.is_empty() || !run.is_empty() {
            check_coverage(&mut err, &at, &t.methods, t.paired_with.as_deref(), &run, raw);
        }
        if t.mean_row && t.paired_with.is_some() {
            err(format!("{at}.mean_row"), None, "a paired table (paired_with) has no mean row".into());
        }
        if let Some(base) = &t.paired_with {
            if !names.contains(base) {
                err(format!("{at}.paired_with"), Some(base), format!("\"{base}\" is not a method entry{}", suggest(base, &names)));
            }
        }
        for (k, col) in t.paper_only.iter().enumerate() {
            if names.contains(col) {
                err(
                    format!("{at}.paper_only[{k}]"),
                    Some(col),
                    format!("\"{col}\" is a method entry of this spec; paper_only is for methods it does not run"),
                );
            }
        }
        for d in t.paper_only_datasets.keys().filter(|d| raw.datasets.contains(d)) {
            err(
                format!("{at}.paper_only_datasets.{d}"),
                Some(d),
                format!("\"{d}\" is a dataset of this spec; paper_only_datasets is for data sets it does not run"),
            );
        }
        for (k, p) in t.paper.iter().enumerate() {
            if !names.contains(&p.method) && !t.paper_only.contains(&p.method) {
                let known: Vec<String> = names.iter().chain(&t.paper_only).cloned().collect();
                err(
                    format!("{at}.paper[{k}].method"),
                    Some(&p.method),
                    format!("no method entry or paper_only column named \"{}\"{}", p.method, suggest(&p.method, &known)),
                );
            }
            if !t.metrics.contains(&p.metric) {
                err(
                    format!("{at}.paper[{k}].metric"),
                    Some(&p.metric),
                    format!("\"{}\" is not one of the table's metrics{}", p.metric, suggest(&p.metric, &t.metrics)),
                );
            }
            // The keys of a setting are the entry's grid keys or its settings (a paper value at
            // a setting the spec does not run shows as a column of misses, so its values are
            // not checked), so that a misspelt key does not make a column of its own.
            if let (Some(entry), Some(setting)) = (raw.methods.iter().find(|m| m.name == p.method), &p.setting) {
                let defaults = crate::methods::default_settings(&entry.method);
                let known = |key: &str| {
                    entry.grid.contains_key(key)
                        || key
                            .strip_prefix("settings.")
                            .is_some_and(|k| entry.settings.get(k).is_some() || defaults.as_ref().is_some_and(|d| d.get(k).is_some()))
                };
                for (key, _) in crate::report::parse_setting(setting).into_iter().filter(|(k, _)| !known(k)) {
                    let mut keys: Vec<String> = entry.grid.keys().cloned().collect();
                    keys.extend(defaults.iter().flat_map(|d| d.as_object()).flat_map(|o| o.keys()).map(|k| format!("settings.{k}")));
                    err(
                        format!("{at}.paper[{k}].setting"),
                        Some(setting),
                        format!("\"{key}\" is neither a grid key nor a setting of method entry \"{}\"{}", p.method, suggest(key, &keys)),
                    );
                }
            }
            let mean_row = t.mean_row && p.dataset == crate::results::MEAN_OVER_DATASETS;
            if !raw.datasets.contains(&p.dataset) && !t.paper_only_datasets.contains_key(&p.dataset) && !mean_row {
                err(
                    format!("{at}.paper[{k}].dataset"),
                    Some(&p.dataset),
                    format!(
                        "\"{}\" is neither a dataset of this spec nor one of the table's paper_only_datasets{}",
                        p.dataset,
                        if p.dataset == crate::results::MEAN_OVER_DATASETS {
                            " (\"mean\" names the mean row: set mean_row: true)"
                        } else {
                            ""
                        }
                    ),
                );
            }
            for (j, a) in p.also.iter().enumerate() {
                if !names.contains(a) {
                    err(format!("{at}.paper[{k}].also[{j}]"), Some(a), format!("no method entry named \"{a}\"{}", suggest(a, &names)));
                }
            }
            if let Some(m) = &p.miss {
                if !p.scored {
                    err(
                        format!("{at}.paper[{k}].miss"),
                        None,
                        "a number with scored: false is never a miss; drop `miss` or `scored`".into(),
                    );
                }
                if m.why.trim().is_empty() {
                    err(format!("{at}.paper[{k}].miss.why"), None, "must say what decides or explains the miss".into());
                }
            }
        }
    }
    for (i, f) in raw.figures.iter().enumerate() {
        let at = format!("figures[{i}]");
        if !ids.insert(f.id.clone()) {
            err(format!("{at}.id"), Some(&f.id), format!("duplicate table/figure id \"{}\"", f.id));
        }
        // The id names the figure's file under figures/.
        if f.id.is_empty() || f.id.starts_with('.') || f.id.contains(['/', '\\']) {
            err(format!("{at}.id"), Some("id"), format!("\"{}\" is not a plain file name (it names the figure's SVG file)", f.id));
        }
        match (f.kind, f.trace_x.as_deref()) {
            (_, None) | (FigureKind::Trace, Some("iter" | "time")) => {}
            (FigureKind::Trace, Some(x)) => err(format!("{at}.trace_x"), Some(x), format!("iter or time, got \"{x}\"")),
            (_, Some(_)) => err(format!("{at}.trace_x"), Some("trace_x"), "only trace figures take `trace_x`".into()),
        }
        // x and y name grid keys of the figure's entries (errorbar's x may be `dataset`).
        let takes = |axis: &str| match f.kind {
            FigureKind::Errorbar | FigureKind::DecisionRegions => axis == "x",
            FigureKind::Heatmap => true,
            _ => false,
        };
        let shown: Vec<&MethodEntry> = raw.methods.iter().filter(|m| f.methods.is_empty() || f.methods.contains(&m.name)).collect();
        for (axis, key) in [("x", &f.x), ("y", &f.y)] {
            let Some(key) = key.as_deref() else { continue };
            if !takes(axis) {
                err(format!("{at}.{axis}"), Some(key), format!("a {:?} figure takes no `{axis}`", f.kind).to_lowercase());
            } else if !(shown.iter().any(|m| m.grid.contains_key(key)) || (f.kind == FigureKind::Errorbar && key == "dataset")) {
                let keys: Vec<String> = shown.iter().flat_map(|m| m.grid.keys().cloned()).collect();
                err(
                    format!("{at}.{axis}"),
                    Some(key),
                    format!("\"{key}\" is not a grid key of the figure's entries{}", suggest(key, &keys)),
                );
            }
        }
        check_refs(&mut err, &at, &f.methods, &names, "methods", "method entry");
        check_refs(&mut err, &at, &f.datasets, &raw.datasets, "datasets", "dataset of this spec");
        check_coverage(&mut err, &at, &f.methods, None, &f.datasets, raw);
        for (k, r) in f.reference.iter().enumerate() {
            if let Some(d) = r.dataset.as_ref().filter(|d| !raw.datasets.contains(d)) {
                err(format!("{at}.reference[{k}].dataset"), Some(d), format!("\"{d}\" is not a dataset of this spec"));
            }
            if r.points.is_empty() || r.points.iter().any(|p| !(p[0] > 0.0 && p[0].is_finite() && p[1].is_finite())) {
                err(format!("{at}.reference[{k}].points"), Some(&r.label), "points: a list of [seconds > 0, value] pairs".into());
            }
        }
        if !f.reference.is_empty() && f.kind != FigureKind::Curve {
            err(format!("{at}.reference"), Some(&f.id), "only curve figures take `reference`".into());
        }
        if f.log_y && f.kind != FigureKind::Curve {
            err(format!("{at}.log_y"), Some(&f.id), "only curve figures take `log_y`".into());
        }
        if let Some(t) = f.target {
            if f.kind != FigureKind::Curve {
                err(format!("{at}.target"), Some(&f.id), "only curve figures take `target`".into());
            } else if !t.is_finite() {
                err(format!("{at}.target"), Some(&f.id), format!("a finite value, got {t}"));
            }
        }
        if let Some(d) = f.settle_within {
            if f.kind != FigureKind::Curve {
                err(format!("{at}.settle_within"), Some(&f.id), "only curve figures take `settle_within`".into());
            } else if !(d.is_finite() && d >= 0.0) {
                err(format!("{at}.settle_within"), Some(&f.id), format!("a distance >= 0, got {d}"));
            }
        }
        match f.kind {
            FigureKind::Trace if f.trace.is_none() => {
                err(format!("{at}.trace"), Some(&f.id), "a trace figure needs `trace` (the traced quantity)".into())
            }
            FigureKind::Trace => {}
            FigureKind::Curve if f.trace.is_none() => {
                err(format!("{at}.trace"), Some(&f.id), "a curve figure needs `trace` (test_error, test_nll, objective, ...)".into())
            }
            FigureKind::Curve => {}
            FigureKind::DecisionRegions if !raw.methods.iter().any(|m| m.decision_grid.is_some()) => {
                err(at.clone(), Some(&f.id), "a decision_regions figure needs a method entry with `decision_grid`".into())
            }
            FigureKind::DecisionRegions => {}
            FigureKind::Heatmap if f.x.is_none() || f.y.is_none() || f.metric.is_none() => {
                err(at.clone(), Some(&f.id), "a heatmap figure needs `metric`, `x` and `y` (grid keys)".into())
            }
            FigureKind::Errorbar if f.metric.is_some() != f.metrics.is_empty() => {
                err(format!("{at}.metric"), Some(&f.id), "an errorbar figure needs either `metric` or `metrics` (a list), not both".into())
            }
            FigureKind::Errorbar => {}
            _ if !f.metrics.is_empty() => {
                err(format!("{at}.metrics"), Some(&f.id), "only errorbar figures take `metrics`; use `metric`".into())
            }
            _ if f.metric.is_none() => {
                err(format!("{at}.metric"), Some(&f.id), format!("a {:?} figure needs `metric`", f.kind).to_lowercase())
            }
            FigureKind::Scatter if f.methods.len() != 2 => {
                err(format!("{at}.methods"), Some(&f.id), "a scatter figure needs exactly two methods (x, y)".into())
            }
            _ => {}
        }
    }
    out
}

/// Letters, digits, '-', '_' and '.', not first: safe as a file name and in a comma list.
fn is_plain_name(name: &str) -> bool {
    !name.is_empty() && !name.starts_with('.') && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

fn check_refs(err: &mut impl FnMut(String, Option<&str>, String), at: &str, used: &[String], known: &[String], field: &str, what: &str) {
    for (k, u) in used.iter().enumerate() {
        if !known.contains(u) {
            err(format!("{at}.{field}[{k}]"), Some(u), format!("\"{u}\" is not a {what}{}", suggest(u, known)));
        }
    }
}

/// A table or figure must not show an entry on a dataset it does not run on: the empty cell
/// would read as a missing result. (Empty `methods` / `datasets` mean all of the spec's.)
fn check_coverage(
    err: &mut impl FnMut(String, Option<&str>, String),
    at: &str,
    methods: &[String],
    base: Option<&str>,
    datasets: &[String],
    raw: &RawSpec,
) {
    let datasets = if datasets.is_empty() { &raw.datasets[..] } else { datasets };
    let shown: Vec<(String, &MethodEntry)> = if methods.is_empty() {
        raw.methods.iter().map(|m| ("methods".to_string(), m)).collect()
    } else {
        methods
            .iter()
            .enumerate()
            .filter_map(|(k, name)| raw.methods.iter().find(|m| &m.name == name).map(|m| (format!("methods[{k}]"), m)))
            .collect()
    };
    let base = base.and_then(|b| raw.methods.iter().find(|m| m.name == b)).map(|m| ("paired_with".to_string(), m));
    for (field, entry) in shown.into_iter().chain(base) {
        if let Some(d) = datasets.iter().find(|d| !entry.runs_on(d)) {
            err(
                format!("{at}.{field}"),
                Some(&entry.name),
                format!(
                    "\"{}\" runs only on [{}], not on \"{d}\": give this table or figure `datasets:` among those",
                    entry.name,
                    entry.datasets.join(", ")
                ),
            );
        }
    }
}

/// The name of an entry on a `hyper: {from: ...}` cycle, if any.
fn hyper_cycle(methods: &[MethodEntry]) -> Option<String> {
    for start in methods {
        let mut cur = start;
        for _ in 0..=methods.len() {
            match &cur.hyper {
                HyperSpec::From { source: src, .. } => match methods.iter().find(|m| &m.name == src) {
                    Some(next) if next.name == start.name => return Some(start.name.clone()),
                    Some(next) => cur = next,
                    None => break,
                },
                _ => break,
            }
        }
    }
    None
}

/// The settings key a method's settings error names (`settings.select.fold: ...` -> `fold`).
fn settings_key(message: &str) -> Option<&str> {
    let path = message.strip_prefix("settings.")?.split(':').next()?;
    let key = path.rsplit('.').next()?.split('[').next()?;
    (!key.is_empty() && !key.contains(' ')).then_some(key)
}
