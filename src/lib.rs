//! mcgp: a research harness for multi-class Gaussian process classification.
//!
//! Data flows one way: `spec` (YAML) -> cells -> `methods` -> `results` -> `report`.
//! `runner` schedules the cells on rayon; `data`, `kernels`, `likelihoods`, `linalg`, `special`
//! and `stats` are the numerical building blocks the methods share.
#![allow(non_snake_case)] // numeric code uses the papers' symbols (K, L, W, ...)
// Numeric code style, on purpose:
#![allow(clippy::excessive_precision)] // coefficients and reference values keep every digit of their source
#![allow(clippy::needless_range_loop)] // index loops follow the papers' subscripts (i, j, c, k)
#![allow(clippy::neg_cmp_op_on_partial_ord)] // `!(x > 0.0)` rejects NaN along with non-positive values

pub mod atomic;
pub mod data;
pub mod kernels;
pub mod likelihoods;
pub mod linalg;
pub mod methods;
pub mod report;
pub mod results;
pub mod runner;
pub mod scalable;
pub mod slurm;
pub mod spec;
pub mod special;
pub mod stats;
pub mod suggest;
#[cfg(test)]
pub(crate) mod testing;

/// mimalloc as the allocator of every binary linking this crate (benches and tests too). The
/// dense methods allocate and free millions of small 64-byte-aligned matrices (faer's C x C
/// blocks) and, every sweep, matrices of several MB: glibc served the first through memalign
/// and its bins (malloc / free about 13% of a KL-MNL fit on glass) and returned the second to
/// the OS unless tuned by mallopt; mimalloc keeps both in its own pages. Measured by interleaved
/// runs (benches/PROFILE.md, session 39): KL-MNL on glass with ARD learning 14% less CPU, an IVM
/// fit 6%, SEP's MNIST step about 5%; every number bit for bit the same.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Crate version; part of every cell key so a new version never reuses stale results.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
