//! Splitting a spec's cells into shards, so a cluster's job array (one task per shard) computes
//! them over a shared results folder.
//!
//! A cell that takes hyper-parameters or output from another cell (`depends_on`) must run in
//! the same process as its source, so the unit of assignment is a *chain*: every cell with the
//! root it leads back to. Two assignments exist:
//!
//! - the hash partition (no plan): blake3 of the root's key, modulo N. Every task computes it
//!   alone from the spec, so no coordination is needed, but shard sizes are only balanced on
//!   average;
//! - a shard plan: `mcgp slurm` balances the chains once (greedy longest-first on the cells'
//!   stored wall times from a previous run) and writes the assignment next to the sbatch
//!   script; every task reads that one file. Balancing inside each task instead would read the
//!   store while other tasks add cells to it, so two tasks could see different times and
//!   disagree about who owns a chain (a cell computed twice or never). Chains the plan does not
//!   know (the spec changed since) fall back to the hash partition.
use crate::spec::Cell;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

/// Shard `index` of `count` (0-based, as SLURM's `$SLURM_ARRAY_TASK_ID` of `--array=0-(N-1)`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shard {
    pub index: usize,
    pub count: usize,
}

impl std::str::FromStr for Shard {
    type Err = String;

    /// `I/N` with 0 <= I < N.
    fn from_str(s: &str) -> Result<Shard, String> {
        let usage = || format!("\"{s}\" is not a shard I/N (0 <= I < N, e.g. 0/4)");
        let (i, n) = s.split_once('/').ok_or_else(usage)?;
        let (index, count): (usize, usize) = (i.trim().parse().map_err(|_| usage())?, n.trim().parse().map_err(|_| usage())?);
        if count == 0 {
            return Err(format!("\"{s}\": the number of shards must be at least 1"));
        }
        if index >= count {
            return Err(format!("\"{s}\": shard index {index} is out of range 0..{} (shards are numbered from 0)", count - 1));
        }
        Ok(Shard { index, count })
    }
}

impl std::fmt::Display for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

/// A precomputed assignment of chains to shards (`mcgp slurm` writes it as JSON).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ShardPlan {
    pub experiment: String,
    pub shards: usize,
    /// Key of each chain's root -> shard.
    pub roots: BTreeMap<String, usize>,
    /// Estimated seconds of each shard (what the balancing saw; informative only).
    pub estimated_seconds: Vec<f64>,
}

impl ShardPlan {
    pub fn read(path: &Path) -> anyhow::Result<ShardPlan> {
        let bytes = std::fs::read(path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        serde_json::from_slice(&bytes).map_err(|e| anyhow::anyhow!("{}: not a shard plan: {e}", path.display()))
    }

    pub fn write(&self, path: &Path) -> anyhow::Result<()> {
        let json = serde_json::to_vec_pretty(self)?;
        crate::atomic::write_atomic(path, &json).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
    }
}

/// The key of the root of each cell's chain (the cell itself when it depends on nothing), in
/// the cells' order. A source outside `cells` ends the chain where it is referenced.
pub fn chain_roots(cells: &[Cell]) -> Vec<String> {
    let by_key: BTreeMap<&str, &Cell> = cells.iter().map(|c| (c.key.as_str(), c)).collect();
    cells
        .iter()
        .map(|c| {
            let mut cur = c;
            // The expansion rejects cycles; the bound guards against a malformed cell list.
            for _ in 0..=cells.len() {
                match cur.depends_on.as_deref().and_then(|d| by_key.get(d)) {
                    Some(source) => cur = source,
                    None => break,
                }
            }
            match cur.depends_on.as_deref() {
                Some(d) if !by_key.contains_key(d) => d.to_string(),
                _ => cur.key.clone(),
            }
        })
        .collect()
}

/// The hash partition: shard of a chain root.
pub fn hash_shard(root: &str, count: usize) -> usize {
    let h = blake3::hash(format!("mcgp-shard\n{root}").as_bytes());
    (u64::from_le_bytes(h.as_bytes()[..8].try_into().expect("8 bytes")) % count as u64) as usize
}

/// The shard of every cell (in order): from the plan where it knows the cell's chain, else
/// the hash partition. A plan for another number of shards is an error.
pub fn assign(cells: &[Cell], count: usize, plan: Option<&ShardPlan>) -> anyhow::Result<Vec<usize>> {
    if let Some(p) = plan {
        if p.shards != count {
            anyhow::bail!("the shard plan is for {} shards, not {count}", p.shards);
        }
    }
    Ok(chain_roots(cells)
        .iter()
        .map(|root| plan.and_then(|p| p.roots.get(root).copied()).filter(|&s| s < count).unwrap_or_else(|| hash_shard(root, count)))
        .collect())
}

/// Balance chains over `count` shards: longest chain first, each to the shard with the least
/// estimated time so far (ties: the lower shard; equal chains: the smaller root key), so the
/// plan is a function of the cells and their costs alone. `cost[i]` is cell i's estimated seconds.
pub fn balanced_plan(experiment: &str, cells: &[Cell], cost: &[f64], count: usize) -> ShardPlan {
    let roots = chain_roots(cells);
    let mut chains: BTreeMap<&str, f64> = BTreeMap::new();
    for (root, c) in roots.iter().zip(cost) {
        *chains.entry(root.as_str()).or_default() += c;
    }
    let mut order: Vec<(&str, f64)> = chains.into_iter().collect();
    order.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(b.0)));
    let mut load = vec![0.0f64; count];
    let mut assigned = BTreeMap::new();
    for (root, c) in order {
        let (shard, _) = load.iter().enumerate().min_by(|a, b| a.1.total_cmp(b.1).then_with(|| a.0.cmp(&b.0))).expect("count >= 1");
        load[shard] += c;
        assigned.insert(root.to_string(), shard);
    }
    ShardPlan { experiment: experiment.to_string(), shards: count, roots: assigned, estimated_seconds: load }
}

/// Estimated seconds of each cell: its stored wall time where a previous run stored it, else
/// the mean stored time of its method entry, else the mean of all stored cells, else 1 s.
pub fn estimate_costs(cells: &[Cell], stored_seconds: &[Option<f64>]) -> Vec<f64> {
    let mut by_entry: BTreeMap<&str, (f64, usize)> = BTreeMap::new();
    let (mut sum, mut n) = (0.0, 0usize);
    for (c, s) in cells.iter().zip(stored_seconds) {
        if let Some(s) = s.filter(|s| s.is_finite() && *s >= 0.0) {
            let e = by_entry.entry(c.entry.name.as_str()).or_default();
            e.0 += s;
            e.1 += 1;
            sum += s;
            n += 1;
        }
    }
    let overall = if n > 0 { sum / n as f64 } else { 1.0 };
    cells
        .iter()
        .zip(stored_seconds)
        .map(|(c, s)| match s.filter(|s| s.is_finite() && *s >= 0.0) {
            Some(s) => s,
            None => by_entry.get(c.entry.name.as_str()).map_or(overall, |(sum, n)| sum / *n as f64),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cell(key: &str, dep: Option<&str>) -> Cell {
        let entry: crate::spec::MethodEntry =
            serde_json::from_value(serde_json::json!({ "name": format!("e-{key}"), "method": "laplace" })).expect("a minimal entry");
        Cell {
            key: key.into(),
            dataset: "iris".into(),
            split: 0,
            entry,
            setting: String::new(),
            depends_on: dep.map(str::to_string),
            seed: 0,
            init_seed: None,
            numerics: String::new(),
            data_hash: String::new(),
        }
    }

    /// 30 chains: roots r0..r29, each with a child, some with a grandchild and a second child.
    fn cells() -> Vec<Cell> {
        let mut out = Vec::new();
        for i in 0..30 {
            out.push(cell(&format!("r{i}"), None));
            out.push(cell(&format!("c{i}"), Some(&format!("r{i}"))));
            if i % 3 == 0 {
                out.push(cell(&format!("g{i}"), Some(&format!("c{i}"))));
                out.push(cell(&format!("d{i}"), Some(&format!("r{i}"))));
            }
        }
        out
    }

    fn check_partition(cells: &[Cell], count: usize, plan: Option<&ShardPlan>) {
        let shards = assign(cells, count, plan).unwrap();
        let roots = chain_roots(cells);
        // Every cell in exactly one shard: one number each, in range (so the shards I = 0..N-1
        // taken together are every cell once).
        assert_eq!(shards.len(), cells.len());
        assert!(shards.iter().all(|&s| s < count));
        // Chains stay together: a cell is in its source's shard.
        let index: BTreeMap<&str, usize> = cells.iter().enumerate().map(|(i, c)| (c.key.as_str(), i)).collect();
        for (i, c) in cells.iter().enumerate() {
            if let Some(d) = &c.depends_on {
                assert_eq!(shards[i], shards[index[d.as_str()]], "{} apart from its source {d}", c.key);
            }
            assert_eq!(shards[i], shards[index[roots[i].as_str()]]);
        }
    }

    #[test]
    fn roots_follow_chains() {
        let cells = cells();
        let roots = chain_roots(&cells);
        let of = |k: &str| roots[cells.iter().position(|c| c.key == k).unwrap()].clone();
        assert_eq!(of("r3"), "r3");
        assert_eq!(of("c3"), "r3");
        assert_eq!(of("g3"), "r3");
        assert_eq!(of("d3"), "r3");
    }

    #[test]
    fn hash_partition_covers_every_cell_once_and_keeps_chains_together() {
        let cells = cells();
        for count in [1, 2, 3, 4, 7, 50] {
            check_partition(&cells, count, None);
        }
        // Stable: the same cells give the same shards, in any order.
        let mut reversed = cells.clone();
        reversed.reverse();
        let a = assign(&cells, 4, None).unwrap();
        let mut b = assign(&reversed, 4, None).unwrap();
        b.reverse();
        assert_eq!(a, b);
        // 30 chains over 4 shards: none empty (blake3 spreads them).
        assert!((0..4).all(|s| a.contains(&s)));
    }

    #[test]
    fn balanced_plan_covers_every_cell_once_keeps_chains_and_balances() {
        let cells = cells();
        let stored: Vec<Option<f64>> = cells.iter().enumerate().map(|(i, _)| (i % 5 != 0).then_some((i % 7) as f64 + 0.5)).collect();
        let cost = estimate_costs(&cells, &stored);
        for count in [1, 2, 3, 4, 7] {
            let plan = balanced_plan("x", &cells, &cost, count);
            check_partition(&cells, count, Some(&plan));
            // Greedy longest-first: the spread is at most the largest chain.
            let roots = chain_roots(&cells);
            let mut chain_cost: BTreeMap<&str, f64> = BTreeMap::new();
            for (r, c) in roots.iter().zip(&cost) {
                *chain_cost.entry(r).or_default() += c;
            }
            let largest = chain_cost.values().cloned().fold(0.0, f64::max);
            let (lo, hi) = plan.estimated_seconds.iter().fold((f64::MAX, 0.0f64), |(lo, hi), &s| (lo.min(s), hi.max(s)));
            assert!(hi - lo <= largest + 1e-9, "{:?}", plan.estimated_seconds);
            // Deterministic.
            assert_eq!(plan, balanced_plan("x", &cells, &cost, count));
        }
        // A chain the plan does not know falls back to the hash partition.
        let plan = balanced_plan("x", &cells[..10], &cost[..10], 4);
        check_partition(&cells, 4, Some(&plan));
        assert!(assign(&cells, 3, Some(&plan)).is_err());
    }

    #[test]
    fn shard_syntax() {
        assert_eq!("0/4".parse::<Shard>(), Ok(Shard { index: 0, count: 4 }));
        assert_eq!("3/4".parse::<Shard>(), Ok(Shard { index: 3, count: 4 }));
        for bad in ["3/2", "2/2", "0/0", "a/b", "1", "-1/2", "1/2/3", ""] {
            assert!(bad.parse::<Shard>().is_err(), "{bad}");
        }
    }
}
