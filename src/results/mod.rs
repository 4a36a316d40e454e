//! Results: per-cell records, their collection into tables (parquet/CSV), aggregation over
//! splits and the run manifest.
pub mod aggregate;
pub mod manifest;
pub mod nonfinite;
pub mod record;
pub mod store;

pub use aggregate::{aggregate, mean_over_datasets, paired_aggregate, Aggregate, GroupKey, MEAN_OVER_DATASETS};
pub use manifest::Manifest;
pub use record::{CellRecord, DecisionGrid, EvidenceKind, Handoff, Status, TracePoint};
pub use store::{write_atomic, ExperimentLock, Store, StoreError};
