//! All integration tests, built into one binary.
mod loaders;
mod pipeline;
mod report;
mod spec_errors;
