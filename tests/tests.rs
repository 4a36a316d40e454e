//! All integration tests, built into one binary.
mod conformance;
mod fuzz;
mod gibbs_mnp;
mod klmnl;
mod loaders;
mod numerics_versions;
mod pipeline;
mod report;
mod spec_errors;
mod vbmnp;
