//! The mount's classes: `--class` flags (or else the config file's `[[class]]` tables) and the
//! priority directories, as class specs for the partitioner and the rules that put files in
//! them. Every error names the flag or the file's table and what is wrong, in one line.

use super::partition_flags::ClassFlag;
use crate::live::classes::{bytes_to_blocks, ClassRule, ClassRules, ClassToml};
use crate::live::config::{MountOptions, SizeValue};
use crate::live::error::ConfigError;
use crate::live::priority::normalize;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use tiercache_core::class::MAX_CLASSES;
use tiercache_core::partition::{Amount, ClassSpec, ClassTable};

/// The classes of a mount, checked.
#[derive(Debug, Default)]
pub(super) struct MountClasses {
    /// The user's classes, in order (empty: paper 000's two classes).
    pub specs: Vec<ClassSpec>,
    /// Every class directory, priority directories included.
    pub rules: ClassRules,
    /// Where the classes came from, for errors of the table as a whole: `--class`, or the file.
    pub whence: String,
}

/// `--class` arguments as the `[[class]]` tables they stand for.
pub(super) fn class_flags(args: &[String]) -> Result<Option<Vec<ClassToml>>, ConfigError> {
    if args.is_empty() {
        return Ok(None);
    }
    let mut out = Vec::with_capacity(args.len());
    for a in args {
        let f: ClassFlag = a.parse().map_err(|e| ConfigError::bad("--class", e))?;
        // Sizes are checked here, so that a bad one names its argument; blocks come later.
        f.spec(|v| {
            crate::live::size::parse_size(v)
                .map(Amount::Blocks)
                .map_err(|e| e.to_string())
        })
        .map_err(|e| ConfigError::bad(format!("--class {a}"), e))?;
        out.push(ClassToml {
            name: f.name,
            dirs: f.dirs.into_iter().map(PathBuf::from).collect(),
            recursive: Vec::new(),
            target: f.target,
            min: f.min.map(SizeValue::Text),
            max: f.max.map(SizeValue::Text),
        });
    }
    Ok(Some(out))
}

/// Where priority directories came from, for errors: `--priority`, or `FILE: priority`.
pub(super) fn priority_whence(config: Option<&Path>, flags: &MountOptions) -> String {
    match config {
        Some(cfg) if flags.priority.is_none() => format!("{}: priority", cfg.display()),
        _ => "--priority".to_string(),
    }
}

/// The classes of `o` (flags over the file); `from_flags`: they came from `--class`; `config`:
/// the file. Directories are made relative to `mountpoint`, sizes blocks of `block_size`.
pub(super) fn mount_classes(
    o: &MountOptions,
    from_flags: bool,
    priority_whence: &str,
    config: Option<&Path>,
    mountpoint: &Path,
    block_size: u64,
) -> Result<MountClasses, ConfigError> {
    let whence = match (from_flags, config) {
        (false, Some(cfg)) => format!("[[class]] ({})", cfg.display()),
        _ => "--class".to_string(),
    };
    let of = |name: &str| match (from_flags, config) {
        (false, Some(cfg)) => format!("[[class]] {name} ({})", cfg.display()),
        _ => format!("--class {name}"),
    };
    let mut out = MountClasses {
        whence,
        ..MountClasses::default()
    };
    // Which class named each directory, so that a directory in two classes is refused.
    let mut owner: HashMap<PathBuf, String> = HashMap::new();
    let mut add_rule = |rules: &mut ClassRules, at: &str, rule: ClassRule| {
        if let Some(other) = owner.insert(rule.dir.clone(), rule.class.clone()) {
            if other != rule.class {
                let shown = if rule.dir.as_os_str().is_empty() {
                    Path::new(".")
                } else {
                    &rule.dir
                };
                return Err(ConfigError::bad(
                    at,
                    format!(
                        "directory {} is in both classes {other} and {}",
                        shown.display(),
                        rule.class
                    ),
                ));
            }
        }
        rules.add(rule);
        Ok(())
    };
    for (dirs, recursive) in [(&o.priority, false), (&o.priority_recursive, true)] {
        for d in dirs.iter().flatten() {
            let dir = normalize(d, mountpoint).map_err(|e| e.at(priority_whence))?;
            let rule = ClassRule {
                dir,
                recursive,
                class: "priority".into(),
            };
            add_rule(&mut out.rules, priority_whence, rule)?;
        }
    }
    let tables = o.classes.as_deref().unwrap_or_default();
    let users = tables
        .iter()
        .filter(|t| t.name != "priority" && t.name != "normal")
        .count();
    if users + 2 > MAX_CLASSES {
        return Err(ConfigError::bad(
            &out.whence,
            format!("{users} classes besides priority and normal: at most {MAX_CLASSES} in all"),
        ));
    }
    for (i, t) in tables.iter().enumerate() {
        let at = of(&t.name);
        if tables[..i].iter().any(|u| u.name == t.name) {
            return Err(ConfigError::bad(at, "the name is given twice"));
        }
        out.specs
            .push(spec(t, block_size).map_err(|e| e.at(at.clone()))?);
        for (dirs, recursive) in [(&t.dirs, false), (&t.recursive, true)] {
            for d in dirs {
                let dir = normalize(d, mountpoint).map_err(|e| e.at(at.clone()))?;
                let rule = ClassRule {
                    dir,
                    recursive,
                    class: t.name.clone(),
                };
                add_rule(&mut out.rules, &at, rule)?;
            }
        }
    }
    Ok(out)
}

/// The spec of one table, checked by itself (name, target, sizes, no `max` on `normal`).
fn spec(t: &ClassToml, block_size: u64) -> Result<ClassSpec, ConfigError> {
    if let Some(v) = t.target {
        if !(0.0..=1.0).contains(&v) {
            return Err(ConfigError::invalid(format!("target {v} is outside 0..1")));
        }
    }
    let size = |key: &str, v: &Option<SizeValue>| -> Result<Option<Amount>, ConfigError> {
        v.as_ref()
            .map(|v| {
                Ok(bytes_to_blocks(
                    v.bytes().map_err(|e| e.at(key))?,
                    block_size,
                ))
            })
            .transpose()
    };
    let spec = ClassSpec {
        name: t.name.clone(),
        target: t.target,
        min: size("min", &t.min)?,
        max: size("max", &t.max)?,
    };
    ClassTable::built_in()
        .set(spec.clone())
        .map_err(|e| ConfigError::invalid(core_reason(&e.to_string())))?;
    Ok(spec)
}

/// A core error's reason without its parameter name (`class: web: …` → `web: …`): the place
/// is named by the caller.
fn core_reason(e: &str) -> String {
    e.strip_prefix("class: ").unwrap_or(e).to_string()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn opts(toml: &str) -> MountOptions {
        crate::live::config::parse(toml).unwrap()
    }

    fn classes(toml: &str) -> Result<MountClasses, String> {
        let cfg = Path::new("tc.toml");
        mount_classes(
            &opts(toml),
            false,
            "priority",
            Some(cfg),
            Path::new("/m"),
            4096,
        )
        .map_err(|e| e.to_string())
    }

    #[test]
    fn class_tables_become_specs_and_rules() {
        let c = classes(
            "priority = [\"hot\"]\n\
             [[class]]\nname = \"web\"\ndirs = [\"www/top\"]\nrecursive = [\"www/static\"]\n\
             target = 0.99\nmin = \"64M\"\n\
             [[class]]\nname = \"backup\"\ndirs = [\"/m/backup\"]\nmax = \"16M\"\n",
        )
        .unwrap();
        assert_eq!(c.specs.len(), 2);
        assert_eq!(c.specs[0].target, Some(0.99));
        assert_eq!(c.specs[0].min, Some(Amount::Blocks(16384)));
        assert_eq!(c.specs[1].max, Some(Amount::Blocks(4096)));
        let r = &c.rules;
        assert_eq!(
            r.class_name_of(Path::new("www/static/a/b.css")),
            Some("web")
        );
        assert_eq!(r.class_name_of(Path::new("www/top/i.html")), Some("web"));
        assert_eq!(r.class_name_of(Path::new("backup/d.tar")), Some("backup"));
        assert_eq!(r.class_name_of(Path::new("hot/f")), Some("priority"));
        assert_eq!(r.class_name_of(Path::new("other/f")), None);
    }

    #[test]
    fn bad_class_tables_name_the_table_and_the_fault() {
        let one = |toml: &str| classes(toml).map(|_| ()).unwrap_err();
        let t = |body: &str| format!("[[class]]\nname = \"web\"\n{body}");
        assert_eq!(
            one(&t("target = 1.5\n")),
            "[[class]] web (tc.toml): target 1.5 is outside 0..1"
        );
        assert_eq!(
            one(&t("dirs = [\"/etc\"]\n")),
            "[[class]] web (tc.toml): directory /etc is not inside the mount /m"
        );
        assert_eq!(
            one(&t("min = \"lots\"\n")),
            "[[class]] web (tc.toml): min: `lots` is not a size (use e.g. 4096, 4K, 256M, 1G)"
        );
        assert_eq!(
            one("[[class]]\nname = \"normal\"\nmax = \"1M\"\n"),
            "[[class]] normal (tc.toml): normal takes what the other classes leave and has no max"
        );
        assert_eq!(
            one(&format!("{}{}", t(""), t(""))),
            "[[class]] web (tc.toml): the name is given twice"
        );
        assert!(one(&t(
            "dirs = [\"a\"]\n[[class]]\nname = \"db\"\ndirs = [\"a\"]\n"
        ))
        .ends_with("directory a is in both classes web and db"));
        let many: String = (0..7)
            .map(|i| format!("[[class]]\nname = \"c{i}\"\n"))
            .collect();
        assert_eq!(
            one(&many),
            "[[class]] (tc.toml): 7 classes besides priority and normal: at most 8 in all"
        );
        let e = crate::live::config::parse("[[class]]\nname = \"web\"\ncolour = 1\n");
        assert_eq!(e.unwrap_err().0, 3, "an unknown key names its line");
    }

    #[test]
    fn class_flags_stand_for_tables() {
        let t = class_flags(&["web:www/top,www/s:0.99:min=64M".into()])
            .unwrap()
            .unwrap();
        assert_eq!(
            t[0].dirs,
            [PathBuf::from("www/top"), PathBuf::from("www/s")]
        );
        assert_eq!(t[0].target, Some(0.99));
        let e = class_flags(&["web:a:1.5".into()]).unwrap_err().to_string();
        assert!(e.starts_with("--class: \"web:a:1.5\": target"), "{e}");
        assert!(class_flags(&[]).unwrap().is_none());
    }
}
