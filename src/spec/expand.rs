//! Expanding a checked spec into cells: dataset x split x method entry x grid point.
use super::{HyperSpec, MethodEntry, Spec};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

/// One unit of work. Its `key` hashes its canonical description (dataset, split protocol and
/// seed, split, method entry as run on the dataset, source cell, crate version), the numerics
/// version of its method and the content of its data, so a stored result is reused exactly when
/// nothing that could change it has changed. Its `seed` derives from the description alone, so
/// new code or data recomputes a cell with the same random draws.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Cell {
    pub key: String,
    pub dataset: String,
    pub split: usize,
    /// The method entry with the grid point applied.
    pub entry: MethodEntry,
    /// `k=v,...` with keys sorted; empty without a grid.
    pub setting: String,
    /// Key of the cell whose hyper-parameters this one takes (same dataset and split).
    pub depends_on: Option<String>,
    pub seed: u64,
    /// With `shared_init`, the seed of the fit's initialisation, shared by every entry on this
    /// dataset split (`FitContext::init_rng`).
    pub init_seed: Option<u64>,
    /// The method's numerics version (`methods::numerics_version`) in the key.
    pub numerics: String,
    /// The dataset's content hash in the key (registry entry, files, split file).
    pub data_hash: String,
}

/// The seed of the splits of one dataset: shared by every method, so all see the same splits.
pub fn split_seed(spec: &Spec, dataset: &str) -> u64 {
    let text = format!("split\n{}\n{dataset}\n{}", spec.raw.seed, spec.raw.splits_of(dataset).label());
    seed_from(&text)
}

fn seed_from(text: &str) -> u64 {
    let h = blake3::hash(text.as_bytes());
    u64::from_le_bytes(h.as_bytes()[..8].try_into().expect("8 bytes"))
}

/// Every grid point of an entry as (label, entry with the point applied, grid cleared).
pub fn grid_points(entry: &MethodEntry) -> Result<Vec<(String, MethodEntry)>, String> {
    let mut base = entry.clone();
    base.grid.clear();
    let mut points = vec![(Vec::<String>::new(), serde_json::to_value(&base).map_err(|e| e.to_string())?)];
    for (key, values) in &entry.grid {
        let mut next = Vec::with_capacity(points.len() * values.len());
        for (labels, value) in &points {
            for v in values {
                let mut value = value.clone();
                set_path(&mut value, key, v.clone())?;
                let mut labels = labels.clone();
                labels.push(format!("{key}={}", compact(v)));
                next.push((labels, value));
            }
        }
        points = next;
    }
    points
        .into_iter()
        .map(|(labels, value)| {
            let entry: MethodEntry = serde_json::from_value(value).map_err(|e| format!("grid point {}: {e}", labels.join(",")))?;
            Ok((labels.join(","), entry))
        })
        .collect()
}

fn compact(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Set `a.b.c` in a JSON object, creating objects on the way.
pub(crate) fn set_path(root: &mut serde_json::Value, path: &str, v: serde_json::Value) -> Result<(), String> {
    let mut cur = root;
    let parts: Vec<&str> = path.split('.').collect();
    for (i, part) in parts.iter().enumerate() {
        if cur.is_null() {
            *cur = serde_json::Value::Object(Default::default());
        }
        let obj = cur.as_object_mut().ok_or_else(|| format!("grid key {path}: {part} is not a map"))?;
        if i + 1 == parts.len() {
            obj.insert(part.to_string(), v);
            return Ok(());
        }
        cur = obj.entry(part.to_string()).or_insert(serde_json::Value::Null);
    }
    Ok(())
}

/// (data set, method entry, setting) of every cell group the spec expands, computed yet or
/// not: a report tells a published number this run has not reached yet from one at a setting
/// (or on a data set) the spec never runs.
pub fn planned_groups(spec: &Spec) -> Result<BTreeSet<(String, String, String)>, String> {
    let mut out = BTreeSet::new();
    for m in &spec.raw.methods {
        for (setting, _) in grid_points(m)? {
            for dataset in spec.raw.datasets.iter().filter(|d| m.runs_on(d)) {
                out.insert((dataset.clone(), m.name.clone(), setting.clone()));
            }
        }
    }
    Ok(out)
}

/// All cells, ordered by dataset, method entry (spec order), grid point and split.
/// `n_splits` gives the number of splits per dataset, `data_hashes` each dataset's content hash
/// (a dataset without one keys as empty content).
pub fn expand(spec: &Spec, n_splits: &BTreeMap<String, usize>, data_hashes: &BTreeMap<String, String>) -> Result<Vec<Cell>, String> {
    let mut by_entry: BTreeMap<String, Vec<(String, MethodEntry)>> = BTreeMap::new();
    for m in &spec.raw.methods {
        by_entry.insert(m.name.clone(), grid_points(m)?);
    }
    // Keys of cells that others depend on: (entry, dataset, split) -> key. Entries are
    // resolved sources-first (the checker has rejected cycles).
    let mut keys: BTreeMap<(String, String, usize), (String, String)> = BTreeMap::new();
    let mut order: Vec<&MethodEntry> = Vec::new();
    while order.len() < spec.raw.methods.len() {
        let before = order.len();
        for m in &spec.raw.methods {
            let ready = match &m.hyper {
                HyperSpec::From { source: src, .. } => order.iter().any(|o| &o.name == src),
                _ => true,
            };
            if ready && !order.iter().any(|o| o.name == m.name) {
                order.push(m);
            }
        }
        if order.len() == before {
            return Err("hyper.from forms a cycle".into());
        }
    }
    let mut cells_by_entry: BTreeMap<String, Vec<Cell>> = BTreeMap::new();
    for m in order {
        let mut cells = Vec::new();
        for dataset in spec.raw.datasets.iter().filter(|d| m.runs_on(d)) {
            let splits = *n_splits.get(dataset).ok_or_else(|| format!("no splits for dataset {dataset}"))?;
            for (setting, entry) in &by_entry[&m.name] {
                // The entry as this dataset's cells run it (what the key must cover).
                let entry = &entry.on_dataset(dataset);
                for split in 0..splits {
                    // (key, key without checkpoint schedules) of the source cell.
                    let source = match &m.hyper {
                        HyperSpec::From { source: src, .. } => Some(
                            keys.get(&(src.clone(), dataset.clone(), split))
                                .ok_or_else(|| format!("{}: no cell of \"{src}\" for {dataset} split {split}", m.name))?
                                .clone(),
                        ),
                        _ => None,
                    };
                    let canonical = |entry: &MethodEntry, depends_on: Option<&String>| {
                        let mut text = serde_json::json!({
                            "version": crate::VERSION,
                            "dataset": dataset,
                            "splits": spec.raw.splits_of(dataset).label(),
                            "split_seed": split_seed(spec, dataset),
                            "split": split,
                            "standardize": spec.raw.standardize,
                            "timeout_seconds": spec.raw.timeout_seconds,
                            "entry": entry,
                            "depends_on": depends_on,
                        });
                        if spec.raw.shared_init {
                            // Only when set, so the keys of every other spec stay as they were.
                            text["shared_init"] = serde_json::Value::Bool(true);
                        }
                        if crate::data::DATA_PREP_VERSION != 1 {
                            // From the first bump on (version 1 keys as before it existed).
                            text["data_prep"] = crate::data::DATA_PREP_VERSION.into();
                        }
                        blake3::hash(text.to_string().as_bytes()).to_hex()[..24].to_string()
                    };
                    let description = canonical(entry, source.as_ref().map(|s| &s.0));
                    let numerics = crate::methods::entry_numerics_version(&entry.method, &entry.settings)
                        .ok_or_else(|| format!("unknown method \"{}\"", entry.method))?;
                    let data_hash = data_hashes.get(dataset).cloned().unwrap_or_default();
                    let key = blake3::hash(format!("{description}\n{numerics}\n{data_hash}").as_bytes()).to_hex()[..24].to_string();
                    // The seed ignores checkpoint schedules and decision grids (this cell's and
                    // its sources'): scoring snapshots or a grid never changes what a fit
                    // computes, so adding them keeps every number.
                    let unscored =
                        canonical(&MethodEntry { checkpoints: None, decision_grid: None, ..entry.clone() }, source.as_ref().map(|s| &s.1));
                    let seed = seed_from(&format!("cell\n{}\n{unscored}", spec.raw.seed));
                    if setting.is_empty() {
                        keys.insert((m.name.clone(), dataset.clone(), split), (key.clone(), unscored));
                    }
                    let init_seed = spec.raw.shared_init.then(|| seed_from(&format!("init\n{}\n{dataset}\n{split}", spec.raw.seed)));
                    let depends_on = source.map(|s| s.0);
                    cells.push(Cell {
                        key,
                        dataset: dataset.clone(),
                        split,
                        entry: entry.clone(),
                        setting: setting.clone(),
                        depends_on,
                        seed,
                        init_seed,
                        numerics,
                        data_hash,
                    });
                }
            }
        }
        cells_by_entry.insert(m.name.clone(), cells);
    }
    // Two cells with one key are one computation listed twice: a repeated grid value, values that
    // parse to the same setting ([1, 1.0]), or a `dataset_settings` value that overrides a
    // gridded key. Run, both would count in the aggregates (n doubled, the standard error
    // shrunk) and the stored record would carry whichever label finished last. (The entry's name
    // is in the key, so only grid points of one entry can collide.)
    for (name, cells) in &cells_by_entry {
        let mut seen: BTreeMap<&str, &str> = BTreeMap::new();
        for c in cells {
            if let Some(other) = seen.insert(&c.key, &c.setting) {
                return Err(format!(
                    "methods entry \"{name}\": grid points {other} and {} are the same computation on dataset {} split {}: \
                     remove the repeated grid value, or the `dataset_settings` value that overrides the grid",
                    c.setting, c.dataset, c.split
                ));
            }
        }
    }
    // Present in report order: dataset, then the spec's method order.
    let mut all = Vec::new();
    for dataset in &spec.raw.datasets {
        for m in &spec.raw.methods {
            all.extend(cells_by_entry[&m.name].iter().filter(|c| &c.dataset == dataset).cloned());
        }
    }
    Ok(all)
}
