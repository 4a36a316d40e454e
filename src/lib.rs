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

/// Crate version; part of every cell key so a new version never reuses stale results.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Keep freed large blocks in the heap. The dense methods allocate and free matrices of several
/// MB every sweep; glibc's default returns each one to the OS (mmap threshold, heap trimming),
/// so every sweep pays for page faults and zeroing again (about 25% of a KL-MNL fit on glass).
/// Call once at the start of a binary; a no-op off glibc.
pub fn tune_allocator() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets allocator parameters; called before any worker thread starts.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 256 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 1 << 30);
    }
}
