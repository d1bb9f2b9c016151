//! Confinement of result files to the configured directory.

use std::path::{Component, Path, PathBuf};

use crate::error::{Error, Result};

/// Resolves `relative` inside `root`, refusing absolute paths, `..`, and anything that is not a plain
/// relative path. Symlinks already inside `root` are the operator's business, not the payload's.
pub(crate) fn confine(root: &Path, relative: &str) -> Result<PathBuf> {
    let rel = Path::new(relative);
    if relative.is_empty() || relative.contains('\0') {
        return Err(Error::PathEscapes(relative.to_owned()));
    }
    for component in rel.components() {
        match component {
            Component::Normal(_) => {}
            Component::CurDir => {}
            _ => return Err(Error::PathEscapes(relative.to_owned())),
        }
    }
    Ok(root.join(rel))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_escapes() {
        let root = Path::new("/srv/results");
        for bad in ["", "../x", "a/../../x", "/etc/passwd", "a/../b"] {
            assert!(confine(root, bad).is_err(), "{bad}");
        }
        assert_eq!(
            confine(root, "p1/tile-3.json").unwrap(),
            PathBuf::from("/srv/results/p1/tile-3.json")
        );
    }
}
