//! Priority directories (paper 000): which files are `priority`.
//!
//! A rule names a directory inside the mount, relative to its root (it need not exist). Without
//! `recursive`, files directly under it are priority (the paper); with it, the whole subtree.

use super::error::ConfigError;
use serde::{Deserialize, Serialize};
use std::path::{Component, Path, PathBuf};
use tiercache_core::Class;

/// One priority directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PriorityRule {
    /// Relative to the mount root, normalised (no `.`/`..`, no leading `/`).
    pub dir: PathBuf,
    pub recursive: bool,
}

/// The set of rules; cheap to query per open.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct PriorityDirs {
    rules: Vec<PriorityRule>,
}

/// Makes `dir` relative to the mount root: an absolute path must lie under `mountpoint`; `..`
/// may not climb out of the mount.
pub fn normalize(dir: &Path, mountpoint: &Path) -> Result<PathBuf, ConfigError> {
    let rel = if dir.is_absolute() {
        dir.strip_prefix(mountpoint).map_err(|_| {
            ConfigError::invalid(format!(
                "priority directory {} is not inside the mount {}",
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
                        "priority directory {} leaves the mount",
                        dir.display()
                    )));
                }
            }
            Component::Prefix(_) => {
                return Err(ConfigError::invalid(format!(
                    "priority directory {}: unsupported path",
                    dir.display()
                )))
            }
        }
    }
    Ok(out)
}

impl PriorityDirs {
    pub fn rules(&self) -> &[PriorityRule] {
        &self.rules
    }
    /// Adds a rule; an existing rule for the same directory is replaced. Returns true if new.
    pub fn add(&mut self, rule: PriorityRule) -> bool {
        let existed = self.remove(&rule.dir);
        self.rules.push(rule);
        !existed
    }
    /// Removes the rule for `dir`; true if there was one.
    pub fn remove(&mut self, dir: &Path) -> bool {
        let before = self.rules.len();
        self.rules.retain(|r| r.dir != dir);
        self.rules.len() != before
    }
    /// The class of the file at `rel` (relative to the mount root).
    pub fn class_of(&self, rel: &Path) -> Class {
        let parent = rel.parent().unwrap_or(Path::new(""));
        let hit = self.rules.iter().any(|r| {
            if r.recursive {
                parent.starts_with(&r.dir)
            } else {
                parent == r.dir
            }
        });
        if hit {
            Class::PRIORITY
        } else {
            Class::NORMAL
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn direct_children_only_unless_recursive() {
        let mut p = PriorityDirs::default();
        p.add(PriorityRule {
            dir: "www/top".into(),
            recursive: false,
        });
        assert_eq!(p.class_of(Path::new("www/top/index.html")), Class::PRIORITY);
        assert_eq!(p.class_of(Path::new("www/top/img/a.png")), Class::NORMAL);
        assert_eq!(p.class_of(Path::new("www/other.html")), Class::NORMAL);
        p.add(PriorityRule {
            dir: "www/top".into(),
            recursive: true,
        });
        assert_eq!(p.rules().len(), 1);
        assert_eq!(p.class_of(Path::new("www/top/img/a.png")), Class::PRIORITY);
        assert!(p.remove(Path::new("www/top")));
        assert_eq!(p.class_of(Path::new("www/top/index.html")), Class::NORMAL);
        let mut root = PriorityDirs::default();
        root.add(PriorityRule {
            dir: "".into(),
            recursive: false,
        });
        assert_eq!(root.class_of(Path::new("a.txt")), Class::PRIORITY);
    }

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
