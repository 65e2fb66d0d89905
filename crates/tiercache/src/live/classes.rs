//! Classes on the mount: which files belong to which class, and the `[[class]]` tables of the
//! config file.
//!
//! A rule names a directory inside the mount, relative to its root (it need not exist), and a
//! class by name. Without `recursive`, files directly under the directory are in the class
//! (paper 000's priority directories); with it, the whole subtree. A file gets the class of the
//! most specific matching rule (the longest directory); files no rule matches are `normal`.
//! Priority directories are rules of class `priority`. Each directory has at most one rule.

use super::config::SizeValue;
use super::error::ConfigError;
use super::priority::PriorityRule;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use tiercache_core::partition::{Amount, ClassParams, ClassTable};
use tiercache_core::Class;

/// One class directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClassRule {
    /// Relative to the mount root, normalised (no `.`/`..`, no leading `/`).
    pub dir: PathBuf,
    pub recursive: bool,
    /// The class's name in the table in force.
    pub class: String,
}

impl ClassRule {
    /// Whether the file at `rel` (relative to the mount root) is under this rule.
    fn matches(&self, rel: &Path) -> bool {
        let parent = rel.parent().unwrap_or(Path::new(""));
        if self.recursive {
            parent.starts_with(&self.dir)
        } else {
            parent == self.dir
        }
    }
}

/// The set of rules; cheap to query per open. Invariant: no two rules share a directory.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ClassRules {
    rules: Vec<ClassRule>,
}

impl ClassRules {
    pub fn rules(&self) -> &[ClassRule] {
        &self.rules
    }

    /// Adds a rule; an existing rule for the same directory (of any class) is replaced.
    /// Returns true if the rules changed.
    pub fn add(&mut self, rule: ClassRule) -> bool {
        if self.rules.contains(&rule) {
            return false;
        }
        self.rules.retain(|r| r.dir != rule.dir);
        self.rules.push(rule);
        true
    }

    /// Removes the rule for `dir` if it is of class `class`; true if there was one.
    pub fn remove(&mut self, dir: &Path, class: &str) -> bool {
        let before = self.rules.len();
        self.rules.retain(|r| !(r.dir == dir && r.class == class));
        self.rules.len() != before
    }

    /// Removes every rule of `class`; returns how many went.
    pub fn remove_class(&mut self, class: &str) -> usize {
        let before = self.rules.len();
        self.rules.retain(|r| r.class != class);
        before - self.rules.len()
    }

    /// The rules of `class`.
    pub fn of_class<'a>(&'a self, class: &'a str) -> impl Iterator<Item = &'a ClassRule> + 'a {
        self.rules.iter().filter(move |r| r.class == class)
    }

    /// The priority directories (rules of class `priority`), as `tiercache priority` shows
    /// them.
    pub fn priority_rules(&self) -> Vec<PriorityRule> {
        self.of_class("priority")
            .map(|r| PriorityRule {
                dir: r.dir.clone(),
                recursive: r.recursive,
            })
            .collect()
    }

    /// The class name of the file at `rel` (relative to the mount root): the most specific
    /// matching rule's, `None` when no rule matches (the file is `normal`).
    pub fn class_name_of(&self, rel: &Path) -> Option<&str> {
        self.rules
            .iter()
            .filter(|r| r.matches(rel))
            .max_by_key(|r| r.dir.components().count())
            .map(|r| r.class.as_str())
    }

    /// The class of the file at `rel` in `table` (a rule naming a class the table lacks counts
    /// as no rule).
    pub fn class_of(&self, rel: &Path, table: &ClassTable) -> Class {
        self.class_name_of(rel)
            .and_then(|n| table.by_name(n))
            .unwrap_or(Class::NORMAL)
    }
}

/// The class table in force and the rules naming its classes; changed together
/// (`CacheDataPath::update_classes`).
#[derive(Debug, Clone, PartialEq)]
pub struct LiveClasses {
    pub params: ClassParams,
    pub rules: ClassRules,
    /// `class add|set priority --target …` was given on the running mount: the user chose
    /// `priority`'s target (`none` included), so a first priority directory keeps it.
    priority_target_chosen: bool,
}

impl LiveClasses {
    /// The mount's table and rules; no target chosen on the running mount yet.
    pub fn new(params: ClassParams, rules: ClassRules) -> Self {
        Self {
            params,
            rules,
            priority_target_chosen: false,
        }
    }

    /// Records a `class add|set NAME` with `bounds`: whether it chose `priority`'s target for
    /// the first time.
    pub(super) fn note_priority_target(&mut self, name: &str, bounds: &ClassBounds) -> bool {
        let chosen = name == "priority" && bounds.target.is_some();
        let new = chosen && !self.priority_target_chosen;
        self.priority_target_chosen |= chosen;
        new
    }

    /// Whether the user chose `priority`'s target on the running mount.
    pub(super) fn priority_target_chosen(&self) -> bool {
        self.priority_target_chosen
    }
}

/// What `tiercache class add|set` changes of a class: each value as given (a fraction, a size
/// such as `64M`, or `none` to clear it); `None`: unchanged.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ClassBounds {
    pub target: Option<String>,
    pub min: Option<String>,
    pub max: Option<String>,
}

/// One `[[class]]` table of the config file (or one `--class` flag), unchecked.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClassToml {
    pub name: String,
    /// Directories whose direct children are in the class.
    #[serde(default)]
    pub dirs: Vec<PathBuf>,
    /// Directories whose whole subtree is in the class.
    #[serde(default)]
    pub recursive: Vec<PathBuf>,
    /// The hit-ratio target, a fraction; none: best effort.
    pub target: Option<f64>,
    /// Floor and cap of the class's pool, in bytes (`"64M"`).
    pub min: Option<SizeValue>,
    pub max: Option<SizeValue>,
}

/// `bytes` as blocks of `block_size`, rounding up (a floor or cap is never below what was
/// asked for).
pub fn bytes_to_blocks(bytes: u64, block_size: u64) -> Amount {
    Amount::Blocks(bytes.div_ceil(block_size.max(1)))
}

/// A size given as text (`"64M"`) in blocks of `block_size`.
pub fn size_to_blocks(text: &str, block_size: u64) -> Result<Amount, ConfigError> {
    Ok(bytes_to_blocks(super::size::parse_size(text)?, block_size))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tiercache_core::partition::ClassSpec;

    fn rule(dir: &str, recursive: bool, class: &str) -> ClassRule {
        ClassRule {
            dir: dir.into(),
            recursive,
            class: class.into(),
        }
    }

    #[test]
    fn direct_children_only_unless_recursive() {
        let table = ClassTable::built_in();
        let mut p = ClassRules::default();
        p.add(rule("www/top", false, "priority"));
        let class = |p: &ClassRules, f: &str| p.class_of(Path::new(f), &table);
        assert_eq!(class(&p, "www/top/index.html"), Class::PRIORITY);
        assert_eq!(class(&p, "www/top/img/a.png"), Class::NORMAL);
        assert_eq!(class(&p, "www/other.html"), Class::NORMAL);
        p.add(rule("www/top", true, "priority"));
        assert_eq!(p.rules().len(), 1);
        assert_eq!(class(&p, "www/top/img/a.png"), Class::PRIORITY);
        assert!(p.remove(Path::new("www/top"), "priority"));
        assert_eq!(class(&p, "www/top/index.html"), Class::NORMAL);
        let mut root = ClassRules::default();
        root.add(rule("", false, "priority"));
        assert_eq!(class(&root, "a.txt"), Class::PRIORITY);
    }

    #[test]
    fn the_most_specific_rule_decides() {
        let table = ClassTable::new(vec![ClassSpec::named("web"), ClassSpec::named("backup")])
            .expect("a valid table");
        let web = table.by_name("web").expect("web");
        let backup = table.by_name("backup").expect("backup");
        let mut p = ClassRules::default();
        p.add(rule("srv", true, "web"));
        p.add(rule("srv/backup", true, "backup"));
        p.add(rule("srv/backup/keep", false, "priority"));
        let class = |p: &ClassRules, f: &str| p.class_of(Path::new(f), &table);
        assert_eq!(class(&p, "srv/a/index.html"), web);
        assert_eq!(class(&p, "srv/backup/x/day1.tar"), backup);
        assert_eq!(class(&p, "srv/backup/keep/list"), Class::PRIORITY);
        assert_eq!(class(&p, "srv/backup/keep/deeper/f"), backup);
        assert_eq!(class(&p, "other/f"), Class::NORMAL);
        // A directory has one rule: adding it for another class moves it.
        assert!(p.add(rule("srv/backup", true, "web")));
        assert_eq!(class(&p, "srv/backup/x/day1.tar"), web);
        assert!(!p.remove(Path::new("srv/backup"), "backup"));
        assert_eq!(p.remove_class("web"), 2);
        assert_eq!(class(&p, "srv/backup/x/day1.tar"), Class::NORMAL);
        assert_eq!(p.priority_rules().len(), 1);
        // A rule naming a class the table lacks counts as none.
        p.add(rule("gone", false, "nosuch"));
        assert_eq!(class(&p, "gone/f"), Class::NORMAL);
    }

    #[test]
    fn sizes_round_up_to_whole_blocks() {
        assert_eq!(size_to_blocks("64M", 4096).unwrap(), Amount::Blocks(16384));
        assert_eq!(size_to_blocks("5000", 4096).unwrap(), Amount::Blocks(2));
        assert_eq!(size_to_blocks("0", 4096).unwrap(), Amount::Blocks(0));
        assert!(size_to_blocks("lots", 4096).is_err());
    }
}
