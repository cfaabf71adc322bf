//! Configuration errors: every one names the file, the key and what was expected.

use std::fmt;
use std::path::{Path, PathBuf};

/// A configuration that cannot be used. The appliance never starts half-configured: loading
/// fails as a whole with the first error found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The file (empty when the text did not come from a file).
    pub file: PathBuf,
    /// The key's path, like `port[1].vdev` or `table[0].entry[2].key[0]` (empty for syntax
    /// errors, whose message gives line and column).
    pub key: String,
    /// What was expected, and what was found.
    pub message: String,
}

impl ConfigError {
    /// An error at `key` of `file`.
    pub fn new(file: &Path, key: impl Into<String>, message: impl Into<String>) -> Self {
        ConfigError { file: file.to_path_buf(), key: key.into(), message: message.into() }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if !self.key.is_empty() {
            write!(f, ": key `{}`", self.key)?;
        }
        write!(f, ": {}", self.message)
    }
}

impl std::error::Error for ConfigError {}
