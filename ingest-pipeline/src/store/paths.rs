//! A document's path as bytes: a file name need not be UTF-8, and the stored path must open the
//! very file that was submitted.

use std::path::{Path, PathBuf};

use super::Document;

impl Document {
    /// The exact path the document was submitted from, to open it again (its name need not be
    /// UTF-8).
    pub fn source_path(&self) -> PathBuf {
        match &self.path_bytes {
            Some(bytes) => path_from_bytes(bytes),
            None => PathBuf::from(&self.path),
        }
    }
}

/// A path as bytes: exact on Unix (a file name is any bytes but `/` and NUL), its UTF-8 form
/// elsewhere.
pub fn path_to_bytes(path: &Path) -> Vec<u8> {
    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStrExt;
        path.as_os_str().as_bytes().to_vec()
    }
    #[cfg(not(unix))]
    {
        path.to_string_lossy().as_bytes().to_vec()
    }
}

/// The path [`path_to_bytes`] gave these bytes for.
pub fn path_from_bytes(bytes: &[u8]) -> PathBuf {
    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStrExt;
        PathBuf::from(std::ffi::OsStr::from_bytes(bytes))
    }
    #[cfg(not(unix))]
    {
        PathBuf::from(String::from_utf8_lossy(bytes).into_owned())
    }
}
