//! All integration tests, built into one binary.
mod conformance;
mod fuzz;
mod gibbs_mnp;
mod klmnl;
mod loaders;
mod pipeline;
mod report;
mod spec_errors;
mod vbmnp;
