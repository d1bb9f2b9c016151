//! The inbox: the one directory documents are accepted from. A path named by a request (a
//! command line, an MCP tool's arguments) is confined to it: resolved with its symbolic links
//! and `..` first, and refused with an [`InboxError`] when what it names lies outside.
//!
//! A relative path is taken from the inbox, an absolute one as it is; either is accepted only
//! when its real path is inside the inbox's real path. The inbox is resolved at every call, so
//! it may be created (or moved behind a link) after the pipeline starts.

use std::collections::HashSet;
use std::io;
use std::path::{Path, PathBuf};

/// Why a path was not accepted from the inbox.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InboxError {
    /// The inbox itself cannot be resolved (missing, unreadable): create it, or fix the setting.
    #[error("the inbox {} is not usable: {source}", .inbox.display())]
    Unusable {
        /// The inbox as configured.
        inbox: PathBuf,
        /// Why it could not be resolved.
        source: io::Error,
    },
    /// The path cannot be resolved (it does not exist, a link is broken, a directory is not
    /// readable).
    #[error("{}: {source}", .path.display())]
    Unresolved {
        /// The path as it was tried (a relative path joined to the inbox).
        path: PathBuf,
        /// Why it could not be resolved.
        source: io::Error,
    },
    /// The path leads out of the inbox (`..`, a symbolic link, an absolute path elsewhere).
    #[error("{} is outside the inbox {}", .path.display(), .inbox.display())]
    Outside {
        /// The path as it was named.
        path: PathBuf,
        /// The inbox's real path.
        inbox: PathBuf,
    },
    /// The path is inside the inbox but is not a file (a directory, say).
    #[error("{} is not a file", .path.display())]
    NotAFile {
        /// The path as it was named.
        path: PathBuf,
    },
    /// A directory inside the inbox could not be listed.
    #[error("{}: {source}", .dir.display())]
    Unlisted {
        /// The directory.
        dir: PathBuf,
        /// Why it could not be listed.
        source: io::Error,
    },
}

/// The directory documents are accepted from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inbox {
    dir: PathBuf,
}

impl Inbox {
    /// The inbox at `dir` (resolved at each use, not now).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    /// The inbox's directory as configured.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// `path` if it is a file inside the inbox, as its real path (symbolic links and `..`
    /// resolved first).
    pub fn file(&self, path: &Path) -> Result<PathBuf, InboxError> {
        let file = self.confine(path)?;
        if !file.is_file() {
            return Err(InboxError::NotAFile {
                path: path.to_path_buf(),
            });
        }
        Ok(file)
    }

    /// `path` (a file or a directory) as its real path, if that is inside the inbox (symbolic
    /// links and `..` resolved first).
    pub fn confine(&self, path: &Path) -> Result<PathBuf, InboxError> {
        let inbox = std::fs::canonicalize(&self.dir).map_err(|source| InboxError::Unusable {
            inbox: self.dir.clone(),
            source,
        })?;
        let candidate = if path.is_relative() {
            inbox.join(path)
        } else {
            path.to_path_buf()
        };
        let real = std::fs::canonicalize(&candidate).map_err(|source| InboxError::Unresolved {
            path: candidate,
            source,
        })?;
        if !real.starts_with(&inbox) {
            return Err(InboxError::Outside {
                path: path.to_path_buf(),
                inbox,
            });
        }
        Ok(real)
    }

    /// The PDFs under directory `dir` (recursively, sorted by path), each confined to the inbox:
    /// a symbolic link to a file outside it is listed with its refusal, a link to a directory
    /// outside it is not followed, and a link back up the tree is read once. Fails only when
    /// a directory cannot be listed.
    pub fn pdfs_under(&self, dir: &Path) -> Result<Vec<Result<PathBuf, InboxError>>, InboxError> {
        let mut found = Vec::new();
        let mut dirs = vec![dir.to_path_buf()];
        // Directories by their real path: a link back up the tree is read once, not forever.
        let mut seen = HashSet::new();
        while let Some(d) = dirs.pop() {
            let Ok(real) = self.confine(&d) else {
                continue; // a link out of the inbox
            };
            if !seen.insert(real) {
                continue;
            }
            let unlisted = |source| InboxError::Unlisted {
                dir: d.clone(),
                source,
            };
            for entry in std::fs::read_dir(&d).map_err(unlisted)? {
                let path = entry.map_err(unlisted)?.path();
                if path.is_dir() {
                    dirs.push(path);
                } else if path
                    .extension()
                    .is_some_and(|e| e.eq_ignore_ascii_case("pdf"))
                {
                    let file = self.file(&path);
                    found.push((path, file));
                }
            }
        }
        found.sort_by(|(a, _), (b, _)| a.cmp(b));
        Ok(found.into_iter().map(|(_, file)| file).collect())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// A temporary directory holding `inbox/` (with `a.pdf`, `sub/b.PDF`, `notes.txt`) and,
    /// beside it, `secret.pdf`.
    fn setup() -> (tempfile::TempDir, Inbox) {
        let root = tempfile::tempdir().unwrap();
        let inbox = root.path().join("inbox");
        std::fs::create_dir_all(inbox.join("sub")).unwrap();
        std::fs::write(inbox.join("a.pdf"), b"%PDF").unwrap();
        std::fs::write(inbox.join("sub/b.PDF"), b"%PDF").unwrap();
        std::fs::write(inbox.join("notes.txt"), b"x").unwrap();
        std::fs::write(root.path().join("secret.pdf"), b"%PDF").unwrap();
        (root, Inbox::new(inbox))
    }

    fn real(p: &Path) -> PathBuf {
        std::fs::canonicalize(p).unwrap()
    }

    #[test]
    fn a_file_inside_is_accepted_relative_or_absolute() {
        let (_root, inbox) = setup();
        let a = real(&inbox.dir().join("a.pdf"));
        assert_eq!(inbox.file(Path::new("a.pdf")).unwrap(), a);
        assert_eq!(inbox.file(&inbox.dir().join("a.pdf")).unwrap(), a);
        // `..` that stays inside is resolved, not refused.
        assert_eq!(inbox.file(Path::new("sub/../a.pdf")).unwrap(), a);
    }

    #[test]
    fn dot_dot_out_of_the_inbox_is_refused() {
        let (_root, inbox) = setup();
        let e = inbox.file(Path::new("../secret.pdf")).unwrap_err();
        assert!(matches!(e, InboxError::Outside { .. }), "{e:?}");
        assert!(e.to_string().contains("outside the inbox"), "{e}");
    }

    #[test]
    fn an_absolute_path_elsewhere_is_refused() {
        let (root, inbox) = setup();
        let e = inbox.file(&root.path().join("secret.pdf")).unwrap_err();
        assert!(matches!(e, InboxError::Outside { .. }), "{e:?}");
        // The inbox's own parent, a directory, is outside too.
        let e = inbox.confine(root.path()).unwrap_err();
        assert!(matches!(e, InboxError::Outside { .. }), "{e:?}");
    }

    #[cfg(unix)]
    #[test]
    fn a_symbolic_link_out_of_the_inbox_is_refused() {
        let (root, inbox) = setup();
        let link = inbox.dir().join("link.pdf");
        std::os::unix::fs::symlink(root.path().join("secret.pdf"), &link).unwrap();
        let e = inbox.file(Path::new("link.pdf")).unwrap_err();
        assert!(matches!(e, InboxError::Outside { .. }), "{e:?}");
        // A link to a directory outside: refused as a target, and not followed by a listing.
        std::os::unix::fs::symlink(root.path(), inbox.dir().join("up")).unwrap();
        let e = inbox.confine(Path::new("up")).unwrap_err();
        assert!(matches!(e, InboxError::Outside { .. }), "{e:?}");
        let listed = inbox.pdfs_under(inbox.dir()).unwrap();
        let refused: Vec<_> = listed.iter().filter_map(|f| f.as_ref().err()).collect();
        assert_eq!(refused.len(), 1, "{listed:?}");
        assert!(matches!(refused[0], InboxError::Outside { .. }));
        assert_eq!(listed.iter().filter(|f| f.is_ok()).count(), 2, "{listed:?}");
    }

    #[test]
    fn what_is_not_a_file_or_not_there_is_refused_with_its_reason() {
        let (root, inbox) = setup();
        let e = inbox.file(Path::new("sub")).unwrap_err();
        assert!(matches!(e, InboxError::NotAFile { .. }), "{e:?}");
        let e = inbox.file(Path::new("missing.pdf")).unwrap_err();
        assert!(matches!(e, InboxError::Unresolved { .. }), "{e:?}");
        assert!(std::error::Error::source(&e).is_some());
        let gone = Inbox::new(root.path().join("no-inbox"));
        let e = gone.file(Path::new("a.pdf")).unwrap_err();
        assert!(matches!(e, InboxError::Unusable { .. }), "{e:?}");
    }

    #[test]
    fn pdfs_under_a_directory_are_listed_by_path_whatever_their_case() {
        let (_root, inbox) = setup();
        let listed: Vec<PathBuf> = inbox
            .pdfs_under(inbox.dir())
            .unwrap()
            .into_iter()
            .map(Result::unwrap)
            .collect();
        assert_eq!(
            listed,
            vec![
                real(&inbox.dir().join("a.pdf")),
                real(&inbox.dir().join("sub/b.PDF"))
            ]
        );
    }
}
