//! Priority directories (paper 000) as `tiercache priority` names them, and where a class
//! directory lies in the mount. The rules themselves, of every class, are `live::classes`'.
//!
//! A priority directory is a directory inside the mount, relative to its root (it need not
//! exist). Without `recursive`, files directly under it are priority (the paper); with it, the
//! whole subtree.

use super::error::ConfigError;
use serde::{Deserialize, Serialize};
use std::path::{Component, Path, PathBuf};

/// One priority directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PriorityRule {
    /// Relative to the mount root, normalised (no `.`/`..`, no leading `/`).
    pub dir: PathBuf,
    pub recursive: bool,
}

/// Makes `dir` relative to the mount root: an absolute path must lie under `mountpoint`; `..`
/// may not climb out of the mount.
pub fn normalize(dir: &Path, mountpoint: &Path) -> Result<PathBuf, ConfigError> {
    let rel = if dir.is_absolute() {
        dir.strip_prefix(mountpoint).map_err(|_| {
            ConfigError::invalid(format!(
                "directory {} is not inside the mount {}",
                dir.display(),
                mountpoint.display()
            ))
        })?
    } else {
        dir
    };
    let mut out = PathBuf::new();
    for c in rel.components() {
        match c {
            Component::Normal(p) => out.push(p),
            Component::CurDir | Component::RootDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    return Err(ConfigError::invalid(format!(
                        "directory {} leaves the mount",
                        dir.display()
                    )));
                }
            }
            Component::Prefix(_) => {
                return Err(ConfigError::invalid(format!(
                    "directory {}: unsupported path",
                    dir.display()
                )))
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalizes_inside_the_mount() {
        let m = Path::new("/srv/fast");
        assert_eq!(
            normalize(Path::new("/srv/fast/a/./b"), m).unwrap(),
            PathBuf::from("a/b")
        );
        assert_eq!(
            normalize(Path::new("a/../c"), m).unwrap(),
            PathBuf::from("c")
        );
        assert!(normalize(Path::new("/etc"), m).is_err());
        assert!(normalize(Path::new("../x"), m).is_err());
    }
}
