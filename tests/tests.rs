//! All integration tests, built into one binary.
#![allow(clippy::excessive_precision)] // reference values keep every digit of their source
#![allow(clippy::needless_range_loop)] // index loops follow the formulas
mod conformance;
mod fuzz;
mod gibbs_mnp;
mod klmnl;
mod loaders;
mod numerics_versions;
mod pipeline;
mod report;
mod shard;
mod spec_errors;
mod vbmnp;
