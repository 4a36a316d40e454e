//! mcgp: a research harness for multi-class Gaussian process classification.
//!
//! Data flows one way: `spec` (YAML) -> cells -> `methods` -> `results` -> `report`.
//! `runner` schedules the cells on rayon; `data`, `kernels`, `likelihoods` and `linalg`
//! are the numerical building blocks the methods share.
#![allow(non_snake_case)] // numeric code uses the papers' symbols (K, L, W, ...)

pub mod atomic;
pub mod data;
pub mod kernels;
pub mod likelihoods;
pub mod linalg;
pub mod methods;
pub mod report;
pub mod results;
pub mod runner;
pub mod spec;
pub mod special;
pub mod suggest;

/// Crate version; part of every cell key so a new version never reuses stale results.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
