//! Experiment specs: YAML as written (`RawSpec`, serde with `deny_unknown_fields`) ->
//! checked (`Spec`, every problem reported at once with file:line:column and field path)
//! -> cells (`expand`), each with a stable key and its own seed.
mod check;
use check::Problem;
pub mod expand;
pub mod report_spec;

pub use expand::{expand, Cell};
pub use report_spec::{FigureKind, FigureSpec, Interval, MissClass, MissNote, PaperValue, ReferenceCurve, TableSpec, ToleranceRule};

use crate::data::{Registry, SplitProtocol};
use crate::kernels::KernelParams;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// A spec exactly as written in YAML.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSpec {
    /// Experiment name: results go to `results/<name>/`, the report to `reports/<name>/`.
    pub name: String,
    #[serde(default)]
    pub title: Option<String>,
    /// The paper reproduced (e.g. `girolami-rogers2006`).
    #[serde(default)]
    pub paper: Option<String>,
    #[serde(default)]
    pub description: Option<String>,
    /// Root seed; every split and cell seed is derived from it.
    #[serde(default)]
    pub seed: u64,
    pub datasets: Vec<String>,
    /// The split protocol of every dataset without its own entry in `dataset_splits`.
    #[serde(default)]
    pub splits: Option<SplitProtocol>,
    /// Per-dataset split protocols (a paper's table may use a different protocol per row).
    #[serde(default)]
    pub dataset_splits: BTreeMap<String, SplitProtocol>,
    /// Problems made from a registry dataset's rows, under the name the spec lists them by in
    /// `datasets`: `usps-2: { from: usps, task: { one_vs_rest: 2 } }` is digit 2 against the rest;
    /// without a task, the same rows under another name (so with their own `dataset_splits`:
    /// one data set at several training sizes). The derivation is part of the data's identity
    /// (its content hash, so of every cell key).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub derived_datasets: BTreeMap<String, DerivedDataset>,
    /// Standardise features with training-set statistics (default true).
    #[serde(default = "yes")]
    pub standardize: bool,
    /// Wall-clock limit per cell; a cell over it is recorded as failed.
    #[serde(default)]
    pub timeout_seconds: Option<f64>,
    /// Run the cells one after another, each with every thread of the run for its own
    /// parallel work: for wall-clock budgets, so each cell has the whole machine as the
    /// implementation it is compared with had.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub one_cell_at_a_time: bool,
    /// Every method entry that draws a random start of inducing inputs (ep, sep, gfitc, svgp,
    /// scmgpc, through `FitContext::init_rng`) draws it, and what it derives from it, from one
    /// seed per dataset and split, so methods with the same initialisation settings start from
    /// the same point (Villacampa-Calvo & Hernandez-Lobato: "the same initial values for all
    /// methods"); each cell's other randomness (minibatch order, samplers, other methods' random
    /// choices) stays its own. Off by default: each entry then draws its own start, as its cell
    /// seed does.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub shared_init: bool,
    pub methods: Vec<MethodEntry>,
    #[serde(default)]
    pub tables: Vec<TableSpec>,
    #[serde(default)]
    pub figures: Vec<FigureSpec>,
}

impl RawSpec {
    /// The split protocol of `dataset` (checked to exist when the spec is parsed).
    pub fn splits_of(&self, dataset: &str) -> &SplitProtocol {
        self.dataset_splits.get(dataset).or(self.splits.as_ref()).expect("every dataset has a split protocol (checked at parse)")
    }
}

fn yes() -> bool {
    true
}

/// A dataset of the spec made from a registry dataset, by a task or as it is.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DerivedDataset {
    /// The registry dataset whose rows it uses.
    pub from: String,
    /// The problem posed on those rows; none: the source's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<crate::data::Task>,
}

impl RawSpec {
    /// The registry dataset a dataset of this spec loads: itself, or a derived one's source.
    pub fn source_of<'a>(&'a self, dataset: &'a str) -> &'a str {
        self.derived_datasets.get(dataset).map_or(dataset, |d| d.from.as_str())
    }
}

/// The problem `dataset` poses, made from its source's loaded rows: the rows themselves, or its
/// task applied to them, with the spec's name. A task the data cannot pose (a class they do not
/// have) is a spec error naming the field. The second value is what the data's content hash
/// gets appended to identify the derivation (empty for a registry dataset).
pub fn derive_dataset(spec: &Spec, dataset: &str, source: crate::data::Dataset) -> Result<(crate::data::Dataset, String), SpecError> {
    let Some(derived) = spec.raw.derived_datasets.get(dataset) else { return Ok((source, String::new())) };
    let identity = serde_json::to_string(derived).expect("a derived dataset serialises");
    let Some(task) = &derived.task else {
        let mut data = source;
        data.name = dataset.to_string();
        return Ok((data, format!("+as:{identity}")));
    };
    let field = task.field();
    match task.apply(&source) {
        Ok(mut data) => {
            data.name = dataset.to_string();
            Ok((data, format!("+task:{identity}")))
        }
        Err(message) => {
            let path = format!("derived_datasets.{dataset}.task.{field}");
            let (line, column) = locate(&spec.text, &path, Some(dataset));
            Err(SpecError { file: spec.file.clone(), issues: vec![SpecIssue { line, column, path, message }] })
        }
    }
}

/// One method entry: a method implementation with its kernel, hyper-parameter policy,
/// settings and an optional grid (each grid point becomes its own cells).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MethodEntry {
    /// Unique name within the spec (table columns, `hyper: {from: ...}`).
    pub name: String,
    /// The implementation, one of `mcgp list`'s methods.
    pub method: String,
    #[serde(default)]
    pub kernel: KernelParams,
    #[serde(default)]
    pub hyper: HyperSpec,
    /// Method-specific settings (checked by the method).
    #[serde(default)]
    pub settings: serde_json::Value,
    /// Dotted paths (`kernel.variance`, `settings.mc_samples`) to lists of values;
    /// the cartesian product of the lists expands into cells.
    #[serde(default)]
    pub grid: BTreeMap<String, Vec<serde_json::Value>>,
    /// Run this entry on these of the spec's datasets only (default: all of them), e.g. a
    /// variant a paper used on one dataset. Not part of the cell key: narrowing or widening
    /// the list keeps the cells already computed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub datasets: Vec<String>,
    /// Per-dataset settings: each map's keys replace those of `settings` on that dataset's cells
    /// (a paper's table may run one row differently, e.g. a fixed number of steps on toy data);
    /// keys `kernel.<path>` replace that field of the kernel instead (a per-dataset kernel, e.g.
    /// a paper's published hyper-parameters for each data set).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub dataset_settings: BTreeMap<String, serde_json::Value>,
    /// Where the fit's iterations stop as a normal end (`{seconds: S}` or `{iterations: N}`);
    /// unlike `timeout_seconds`, reaching it is success.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<crate::methods::Budget>,
    /// At which outer iterations the runner scores the model on the test split (off the clock):
    /// `geometric`, `{every: k}` or a list. The trace gets `test_error`, `test_nll`, `objective`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoints: Option<crate::methods::Checkpoints>,
    /// On 2-D data: after the fit (off the clock), the predicted class on an n x n grid and the
    /// learned inducing inputs are recorded, for `decision_regions` figures.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision_grid: Option<DecisionGridSpec>,
}

/// `decision_grid: {n, x: [lo, hi], y: [lo, hi]}`; the box defaults to the training inputs'.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DecisionGridSpec {
    pub n: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub x: Option<[f64; 2]>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub y: Option<[f64; 2]>,
}

impl DecisionGridSpec {
    pub fn validate(&self) -> Result<(), String> {
        if !(2..=400).contains(&self.n) {
            return Err(format!("decision_grid.n: 2 to 400 points per side, got {}", self.n));
        }
        for (name, r) in [("x", self.x), ("y", self.y)] {
            if let Some([lo, hi]) = r {
                if !(lo.is_finite() && hi.is_finite() && lo < hi) {
                    return Err(format!("decision_grid.{name}: [lo, hi] with lo < hi, got [{lo}, {hi}]"));
                }
            }
        }
        Ok(())
    }
}

impl MethodEntry {
    pub fn runs_on(&self, dataset: &str) -> bool {
        self.datasets.is_empty() || self.datasets.iter().any(|d| d == dataset)
    }

    /// The entry as it runs on `dataset`: its `dataset_settings` merged into `settings` (and
    /// its `kernel.` keys into the kernel), the per-dataset fields cleared (so they enter a
    /// cell's key only through their effect). Panics on a kernel override that the checker
    /// (`try_on_dataset`) rejects.
    pub fn on_dataset(&self, dataset: &str) -> MethodEntry {
        self.try_on_dataset(dataset).unwrap_or_else(|e| panic!("unchecked spec: {e}"))
    }

    /// `on_dataset`, with a kernel override that does not make a kernel as an error.
    pub fn try_on_dataset(&self, dataset: &str) -> Result<MethodEntry, String> {
        let mut entry = MethodEntry { datasets: Vec::new(), dataset_settings: BTreeMap::new(), ..self.clone() };
        let Some(serde_json::Value::Object(over)) = self.dataset_settings.get(dataset) else { return Ok(entry) };
        if over.keys().any(|k| !k.starts_with("kernel.")) && !entry.settings.is_object() {
            entry.settings = serde_json::Value::Object(Default::default());
        }
        let mut kernel = None;
        for (k, v) in over {
            match k.strip_prefix("kernel.") {
                Some(path) => {
                    let json = kernel.get_or_insert_with(|| serde_json::to_value(&entry.kernel).expect("a kernel serialises"));
                    expand::set_path(json, path, v.clone()).map_err(|e| format!("dataset_settings.{dataset}.{k}: {e}"))?;
                }
                None => {
                    entry.settings.as_object_mut().expect("an object").insert(k.clone(), v.clone());
                }
            }
        }
        if let Some(json) = kernel {
            entry.kernel =
                serde_json::from_value(json).map_err(|e| format!("dataset_settings.{dataset}: the kernel with its overrides: {e}"))?;
            entry.kernel.validate().map_err(|e| format!("dataset_settings.{dataset}: {e}"))?;
        }
        Ok(entry)
    }
}

/// Hyper-parameter policy: `fixed`, `learn`, or `{ from: <method entry> }`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "HyperRepr", into = "HyperRepr")]
pub enum HyperSpec {
    /// Use the kernel as written.
    #[default]
    Fixed,
    /// Learn them (each method maximises its own evidence), starting from the kernel as written.
    Learn,
    /// Take them from the named method entry's fitted cell on the same dataset and split, by
    /// parameter name, except the `keep` ones (`variance`, `lengthscale`, `c2.variance`, ...:
    /// names of this entry's kernel parameters, checked against the data by `check_supports`),
    /// which stay as this entry writes or grids them (e.g. a sweep of sigma^2 at the source's
    /// length-scales).
    From { source: String, keep: Vec<String> },
}

/// How `HyperSpec` is written in YAML (a word or a map with `from` and optionally `keep`).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(untagged, expecting = "fixed, learn or { from: <method entry>, keep: [<parameter>, ...] }")]
enum HyperRepr {
    Word(String),
    From(HyperFrom),
}

/// `{ from, keep }`, with unknown keys refused (a misspelt `keep` would otherwise take every
/// parameter over, the opposite of what was asked).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct HyperFrom {
    from: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    keep: Vec<String>,
}

impl TryFrom<HyperRepr> for HyperSpec {
    type Error = String;
    fn try_from(r: HyperRepr) -> Result<Self, String> {
        match r {
            HyperRepr::Word(w) if w == "fixed" => Ok(HyperSpec::Fixed),
            HyperRepr::Word(w) if w == "learn" => Ok(HyperSpec::Learn),
            HyperRepr::Word(w) => Err(format!("hyper must be fixed, learn or {{ from: <method entry> }}, got \"{w}\"")),
            HyperRepr::From(HyperFrom { from, keep }) => {
                if keep.iter().any(|k| k.is_empty()) {
                    return Err("hyper.keep: an empty parameter name".into());
                }
                Ok(HyperSpec::From { source: from, keep })
            }
        }
    }
}

impl HyperSpec {
    /// What the method itself does: a `from` entry takes its hyper-parameters as given.
    pub fn policy(&self) -> crate::methods::HyperPolicy {
        match self {
            HyperSpec::Learn => crate::methods::HyperPolicy::Learn,
            HyperSpec::Fixed | HyperSpec::From { .. } => crate::methods::HyperPolicy::Fixed,
        }
    }
}

impl From<HyperSpec> for HyperRepr {
    fn from(h: HyperSpec) -> Self {
        match h {
            HyperSpec::Fixed => HyperRepr::Word("fixed".into()),
            HyperSpec::Learn => HyperRepr::Word("learn".into()),
            HyperSpec::From { source, keep } => HyperRepr::From(HyperFrom { from: source, keep }),
        }
    }
}

/// One problem found in a spec.
#[derive(Clone, Debug, PartialEq)]
pub struct SpecIssue {
    pub line: usize,
    pub column: usize,
    /// Dotted field path, e.g. `methods[1].settings.mc_samples`.
    pub path: String,
    pub message: String,
}

/// Every problem found in one spec file.
#[derive(Clone, Debug, PartialEq)]
pub struct SpecError {
    pub file: String,
    pub issues: Vec<SpecIssue>,
}

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (k, i) in self.issues.iter().enumerate() {
            if k > 0 {
                writeln!(f)?;
            }
            let path = if i.path.is_empty() { String::new() } else { format!("{}: ", i.path) };
            // Line 0: the file as a whole (it could not be read), no position to give.
            if i.line == 0 {
                write!(f, "{}: {}{}", self.file, path, i.message)?;
            } else {
                write!(f, "{}:{}:{}: {}{}", self.file, i.line, i.column, path, i.message)?;
            }
        }
        Ok(())
    }
}

impl std::error::Error for SpecError {}

/// A checked spec plus the text it came from.
#[derive(Clone, Debug)]
pub struct Spec {
    pub raw: RawSpec,
    pub file: String,
    pub text: String,
    /// blake3 of the text.
    pub hash: String,
}

impl Spec {
    pub fn name(&self) -> &str {
        &self.raw.name
    }

    pub fn method_names(&self) -> Vec<String> {
        self.raw.methods.iter().map(|m| m.name.clone()).collect()
    }

    pub fn method(&self, name: &str) -> Option<&MethodEntry> {
        self.raw.methods.iter().find(|m| m.name == name)
    }
}

/// Read and check a spec file.
pub fn load(path: &std::path::Path, registry: &Registry) -> Result<Spec, SpecError> {
    let file = path.display().to_string();
    let fail =
        |line, column, message| SpecError { file: file.clone(), issues: vec![SpecIssue { line, column, path: String::new(), message }] };
    let bytes = std::fs::read(path).map_err(|e| fail(0, 0, format!("cannot read: {e}")))?;
    let text = String::from_utf8(bytes).map_err(|e| {
        // Point at the first byte that is not UTF-8.
        let good = &e.as_bytes()[..e.utf8_error().valid_up_to()];
        let line = good.iter().filter(|&&b| b == b'\n').count() + 1;
        let column = String::from_utf8_lossy(&good[good.iter().rposition(|&b| b == b'\n').map_or(0, |p| p + 1)..]).chars().count() + 1;
        fail(line, column, "not UTF-8 text (a spec is YAML in UTF-8)".into())
    })?;
    parse(&text, &file, registry)
}

/// Deepest flow nesting (`[` / `{`) a spec may have; no real spec comes near it. The YAML
/// parser stops at 128 levels anyway, but takes time quadratic in the text's depth to get there.
const MAX_FLOW_DEPTH: usize = 64;

/// The first place where flow collections nest deeper than `MAX_FLOW_DEPTH`, as (line, column),
/// scanning outside quoted strings and comments in one pass.
fn too_deep(text: &str) -> Option<(usize, usize)> {
    let (mut depth, mut quote, mut comment) = (0usize, None::<char>, false);
    let (mut line, mut col) = (1, 0);
    let mut prev = ' ';
    for c in text.chars() {
        col += 1;
        if c == '\n' {
            (line, col, comment) = (line + 1, 0, false);
        } else if comment {
            // Inside a comment: nothing counts until the line ends.
        } else if let Some(q) = quote {
            if c == q {
                quote = None;
            }
        } else if c == '"' || c == '\'' {
            quote = Some(c);
        } else if c == '#' && prev.is_whitespace() {
            comment = true;
        } else if c == '[' || c == '{' {
            depth += 1;
            if depth > MAX_FLOW_DEPTH {
                return Some((line, col));
            }
        } else if c == ']' || c == '}' {
            depth = depth.saturating_sub(1);
        }
        prev = c;
    }
    None
}

/// A field path for a message, shortened in the middle when absurdly long.
fn short_path(path: String) -> String {
    const MAX: usize = 120;
    if path.chars().count() <= MAX {
        return path;
    }
    let head: String = path.chars().take(MAX / 2).collect();
    let tail: String = path.chars().rev().take(MAX / 2).collect::<Vec<_>>().into_iter().rev().collect();
    format!("{head}...{tail}")
}

/// Parse and check spec text; `file` names it in messages.
pub fn parse(text: &str, file: &str, registry: &Registry) -> Result<Spec, SpecError> {
    if let Some((line, column)) = too_deep(text) {
        let message = format!("collections nested more than {MAX_FLOW_DEPTH} levels deep");
        return Err(SpecError { file: file.to_string(), issues: vec![SpecIssue { line, column, path: String::new(), message }] });
    }
    // The typed parse keeps the last of two equal keys in a map (`grid`, `settings`,
    // `dataset_settings`, ...: serde_norway checks duplicates only in its own Value), so a
    // repeated key would drop the first silently; parsing into that Value first refuses it.
    if let Err(e) = serde_path_to_error::deserialize::<_, serde_norway::Value>(serde_norway::Deserializer::from_str(text)) {
        let issue = parse_issue(text, e);
        if issue.message.starts_with("duplicate entry") {
            // serde points at the map; point at the key's second occurrence in it.
            let key = issue.message.split('"').nth(1).unwrap_or("");
            let (line, column) = token_positions(text, issue.line.saturating_sub(1), key).nth(1).unwrap_or((issue.line, issue.column));
            let issue = SpecIssue { line, column, message: format!("{}: a key may appear only once in a map", issue.message), ..issue };
            return Err(SpecError { file: file.to_string(), issues: vec![issue] });
        }
    }
    let raw: RawSpec = serde_path_to_error::deserialize(serde_norway::Deserializer::from_str(text))
        .map_err(|e| SpecError { file: file.to_string(), issues: vec![parse_issue(text, e)] })?;
    let issues = check::check(&raw, registry);
    if !issues.is_empty() {
        let issues = issues
            .into_iter()
            .map(|(path, needle, message)| {
                let (line, column) = locate(text, &path, needle.as_deref());
                SpecIssue { line, column, path, message }
            })
            .collect();
        return Err(SpecError { file: file.to_string(), issues });
    }
    Ok(Spec { raw, file: file.to_string(), text: text.to_string(), hash: blake3::hash(text.as_bytes()).to_hex().to_string() })
}

/// A parse error as an issue: the field path, the location (or, where serde has none, the
/// field named by the path), and serde's message without its own location and path.
fn parse_issue(text: &str, e: serde_path_to_error::Error<serde_norway::Error>) -> SpecIssue {
    let path = e.path().to_string();
    let path = if path == "." { String::new() } else { short_path(path) };
    let inner = e.into_inner();
    // Serde buffers internally tagged enums (the split protocol), so their errors carry no
    // usable location; fall back to finding the field named by the path.
    let located = inner.location().map(|l| (l.line(), l.column())).filter(|&(l, c)| (l, c) != (1, 1) || path.is_empty());
    let last_key = path.rsplit(['.', '[']).next().filter(|k| !k.is_empty() && !k.ends_with(']'));
    let (line, column) = located.unwrap_or_else(|| locate(text, &path, last_key));
    let message = inner.to_string();
    let message = match message.find(" at line ") {
        Some(i) => message[..i].to_string(),
        None => message,
    };
    // serde_norway prefixes its own path ("methods[0]: ..."); ours is already shown.
    let message = match message.split_once(": ") {
        Some((head, rest)) if !head.contains(' ') => rest.to_string(),
        _ => message,
    };
    SpecIssue { line, column, path, message }
}

/// The checks that need the data's shape: for every dataset and method entry (each grid point
/// as that dataset's cells run it) the kernels build for the data's features and classes,
/// `hyper.keep` names parameters of them, and the method `supports` the combination. Every
/// problem names the entry and the dataset.
pub fn check_supports(spec: &Spec, shapes: &BTreeMap<String, crate::methods::ProblemShape>) -> Result<(), SpecError> {
    let mut issues: Vec<Problem> = Vec::new();
    for (i, m) in spec.raw.methods.iter().enumerate() {
        let Ok(points) = expand::grid_points(m) else { continue };
        for dataset in spec.raw.datasets.iter().filter(|d| m.runs_on(d)) {
            let Some(shape) = shapes.get(dataset) else { continue };
            for (label, point) in &points {
                let entry = point.on_dataset(dataset);
                let at = if label.is_empty() { format!("methods[{i}]") } else { format!("methods[{i}] [{label}]") };
                let what = format!(
                    "method entry \"{}\" ({}) on dataset \"{dataset}\" ({} classes, {} features, {} training rows in its smallest split)",
                    m.name, m.method, shape.n_classes, shape.n_features, shape.n_train
                );
                let mut fail = |msg: String| issues.push((at.clone(), Some(m.name.clone()), format!("{what}: {msg}")));
                let kernels = match entry.kernel.kernel_set(shape.n_features, shape.n_classes) {
                    Ok(k) => k,
                    Err(e) => {
                        fail(e);
                        continue;
                    }
                };
                if let HyperSpec::From { source, keep } = &entry.hyper {
                    if let Err(e) = kernels.check_keep(keep) {
                        fail(e);
                    }
                    let taken = |name: &String| !keep.iter().any(|k| crate::kernels::name_matches(k, name));
                    // A grid point or dataset override that sets a parameter taken over from the
                    // source computes the same cell as the entry as written, under another label.
                    if let Ok(written) = m.kernel.kernel_set(shape.n_features, shape.n_classes) {
                        let (names, now, was) = (kernels.param_names(), kernels.log_params(), written.log_params());
                        if written.param_names() == names {
                            if let Some(i) = (0..names.len()).find(|&i| taken(&names[i]) && now[i] != was[i]) {
                                fail(format!(
                                    "sets kernel parameter \"{}\", which hyper: {{ from: {source} }} replaces with the source's fitted value, \
                                     so every such setting computes the same cell: name it in hyper.keep, or drop the setting",
                                    names[i]
                                ));
                            }
                        }
                    }
                    // Every parameter taken over must be one the source's kernel has.
                    if let Some(src) = spec.raw.methods.iter().find(|s| &s.name == source) {
                        if let Ok(have) = src.on_dataset(dataset).kernel.kernel_set(shape.n_features, shape.n_classes) {
                            let have = have.param_names();
                            if let Some(name) = kernels.param_names().into_iter().find(|n| taken(n) && !have.contains(n)) {
                                fail(format!(
                                    "takes kernel parameter \"{name}\" from \"{source}\", whose kernel has no such parameter (it has: {}): \
                                     give both entries kernels of one shape, or name it in hyper.keep",
                                    have.join(", ")
                                ));
                            }
                        }
                    }
                }
                // The decision grid is a grid over two input dimensions, its classes one character each.
                if entry.decision_grid.is_some() && (shape.n_features != 2 || shape.n_classes > 36) {
                    fail("decision_grid needs 2-D inputs and at most 36 classes".into());
                }
                let Ok(method) = crate::methods::build(&entry.method, &entry.settings) else { continue };
                if let Err(e) = method.supports(shape, &kernels, entry.hyper.policy()) {
                    fail(format!("not supported: {e}"));
                }
                // A budget or checkpoint schedule the fit never consults would sit in the key only.
                let progress = method.progress(shape, entry.hyper.policy());
                let policy = match entry.hyper.policy() {
                    crate::methods::HyperPolicy::Fixed => "a fixed kernel",
                    crate::methods::HyperPolicy::Learn => "learned hyper-parameters",
                };
                if entry.budget.is_some_and(|b| b.seconds.is_some() || b.iterations.is_some()) && !progress.budget {
                    fail(format!("budget: {} with {policy} has no iterations a budget can end (drop seconds / iterations)", m.method));
                }
                if entry.checkpoints.is_some() && !progress.checkpoints {
                    fail(format!("checkpoints: {} with {policy} scores no checkpoints", m.method));
                }
            }
        }
    }
    if issues.is_empty() {
        return Ok(());
    }
    let issues = issues
        .into_iter()
        .map(|(path, needle, message)| {
            let (line, column) = locate(&spec.text, &path, needle.as_deref());
            SpecIssue { line, column, path, message }
        })
        .collect();
    Err(SpecError { file: spec.file.clone(), issues })
}

/// The line where item i of the block list under the top-level key at `top_line` starts, for
/// a path `key[i]...`: the (i + 1)-th line, before the next top-level key, that starts with
/// "- " at the indentation of the list's first item. None for flow lists or other paths.
fn list_item_line(text: &str, top_line: usize, path: &str) -> Option<usize> {
    let rest = path.split_once('[')?.1;
    let index: usize = rest.split_once(']')?.0.parse().ok()?;
    let mut indent = None;
    let mut seen = 0;
    for (i, line) in text.lines().enumerate().skip(top_line + 1) {
        let trimmed = line.trim_start();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let at = line.len() - trimmed.len();
        if at == 0 {
            return None;
        }
        if trimmed.starts_with("- ") && indent.is_none_or(|w| w == at) {
            indent = Some(at);
            if seen == index {
                return Some(i);
            }
            seen += 1;
        }
    }
    None
}

/// " (did you mean ...?)" for an unknown name, or the list of known names.
pub fn suggest(name: &str, known: &[String]) -> String {
    match crate::suggest::closest(name, known.iter().map(String::as_str)) {
        Some(k) => format!(" (did you mean \"{k}\"?)"),
        None => format!(" (known: {})", known.join(", ")),
    }
}

/// Line and column (1-based) of every occurrence of `needle` as a whole token (not inside a
/// longer word), from line index `from` on. Columns count characters, as an editor does.
fn token_positions<'t>(text: &'t str, from: usize, needle: &'t str) -> impl Iterator<Item = (usize, usize)> + 't {
    let is_word = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '-');
    text.lines().enumerate().skip(from).flat_map(move |(i, l)| {
        // An empty needle would match everywhere without advancing.
        let found: Vec<usize> = if needle.is_empty() { Vec::new() } else { l.match_indices(needle).map(|(col, _)| col).collect() };
        found.into_iter().filter_map(move |col| {
            let (before, after) = (l[..col].chars().last(), l[col + needle.len()..].chars().next());
            (!is_word(before) && !is_word(after)).then(|| (i + 1, l[..col].chars().count() + 1))
        })
    })
}

/// Line and column (1-based) of the best place to point at: the first occurrence of `needle`
/// as a whole token, after the line where the path's top-level key starts, or, for a path
/// into a block list (`methods[2]...`), where that item starts (so that a word every entry has,
/// `budget` or `name`, points at the entry the problem is in).
fn locate(text: &str, path: &str, needle: Option<&str>) -> (usize, usize) {
    let top = path.split(['.', '[']).next().unwrap_or("");
    let top_line = text.lines().position(|l| l.starts_with(&format!("{top}:"))).unwrap_or(0);
    let start_line = list_item_line(text, top_line, path).unwrap_or(top_line);
    let find_in = |from: usize| needle.and_then(|needle| token_positions(text, from, needle).next());
    find_in(start_line).or_else(|| find_in(0)).unwrap_or((start_line + 1, 1))
}
