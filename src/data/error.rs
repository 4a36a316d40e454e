//! The one error type of the data module.
//!
//! Every message names the file it is about (and the line, where one applies) and says what was
//! expected, so a user can fix the data or the registry without reading the code.

use std::path::Path;

#[derive(Debug, thiserror::Error)]
pub enum DataError {
    /// A file could not be opened, read or written.
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },

    /// A file named in the registry (or a split file) does not exist.
    #[error(
        "{path}: file not found (needed by dataset '{dataset}': {description}). \
         SOURCES.md in the data folder lists which datasets are available offline."
    )]
    MissingFile { path: String, dataset: String, description: String },

    /// A problem at one line of a text file.
    #[error("{path}:{line}: {message}")]
    Parse { path: String, line: usize, message: String },

    /// A problem with a whole file (binary headers, row counts, column counts across files).
    #[error("{path}: {message}")]
    Invalid { path: String, message: String },

    /// `datasets.yaml` is unreadable or an entry breaks a rule.
    #[error("{path}: {message}")]
    Registry { path: String, message: String },

    /// A dataset name that is not in the registry.
    #[error("unknown dataset '{name}'{suggestion}; known datasets: {known}")]
    UnknownDataset {
        name: String,
        /// Either empty or " (did you mean 'x'?)" (already formatted).
        suggestion: String,
        known: String,
    },

    /// A split protocol that cannot be applied to this dataset.
    #[error("split protocol {protocol} on dataset {dataset}: {message}")]
    Split {
        protocol: String,
        /// The name in quotes and the files it came from: `'iris' (iris.data)`.
        dataset: String,
        message: String,
    },
}

/// Path text for messages (paths are shown as given, not canonicalised, so they match what the
/// user typed or what the registry says).
pub(crate) fn show(path: &Path) -> String {
    path.display().to_string()
}

impl DataError {
    pub(crate) fn io(path: &Path, source: std::io::Error) -> Self {
        DataError::Io { path: show(path), source }
    }

    pub(crate) fn parse(path: &Path, line: usize, message: impl Into<String>) -> Self {
        DataError::Parse { path: show(path), line, message: message.into() }
    }

    pub(crate) fn invalid(path: &Path, message: impl Into<String>) -> Self {
        DataError::Invalid { path: show(path), message: message.into() }
    }
}
