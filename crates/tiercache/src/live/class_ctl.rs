//! `tiercache class add|set|remove|list` and `tiercache priority add|remove|list` on the
//! running mount: the changes go to the data path (`CacheDataPath::update_classes`), which
//! hands a new class table to the memory tier and reclassifies the files it has seen.

use super::adapter::CacheDataPath;
use super::classes::{size_to_blocks, ClassBounds, ClassRule, LiveClasses};
use super::control::Request;
use super::error::DaemonError;
use super::priority::normalize;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use tiercache_core::partition::{Amount, ClassSpec, DirprioParams};
use tiercache_core::Class;

/// Answers a class or priority request; `None` for any other request.
pub fn handle(
    data: &CacheDataPath,
    mountpoint: &Path,
    req: &Request,
) -> Option<Result<Value, DaemonError>> {
    let r = match req {
        Request::ClassAdd {
            name,
            dirs,
            recursive,
            bounds,
        } => add(data, mountpoint, name, dirs, *recursive, bounds),
        Request::ClassSet { name, bounds } => set(data, name, bounds),
        Request::ClassRemove { name } => remove(data, name),
        Request::ClassList => Ok(json!({ "classes": list_json(data) })),
        Request::PriorityAdd { dir, recursive } => priority_add(data, mountpoint, dir, *recursive),
        Request::PriorityRemove { dir } => priority_remove(data, mountpoint, dir),
        Request::PriorityList => Ok(json!({ "rules": data.priority_rules() })),
        _ => return None,
    };
    Some(r)
}

/// The memory tier's block size and capacity in blocks.
fn geometry(data: &CacheDataPath) -> (u64, u64) {
    let c = data.mem().config();
    (c.block_size.bytes(), c.capacity_blocks as u64)
}

/// `spec` with `bounds` applied (`none` clears a value).
fn with_bounds(
    mut spec: ClassSpec,
    bounds: &ClassBounds,
    block_size: u64,
) -> Result<ClassSpec, DaemonError> {
    if let Some(t) = &bounds.target {
        spec.target = match t.trim() {
            "none" | "-" => None,
            t => Some(
                t.parse::<f64>()
                    .ok()
                    .filter(|v| (0.0..=1.0).contains(v))
                    .ok_or_else(|| {
                        DaemonError::refused(format!(
                            "--target: {t:?} is not a fraction in 0..1 (or none)"
                        ))
                    })?,
            ),
        };
    }
    let size = |flag: &str, v: &Option<String>, old: Option<Amount>| match v.as_deref() {
        None => Ok(old),
        Some("none") => Ok(None),
        Some(v) => size_to_blocks(v, block_size)
            .map(Some)
            .map_err(|e| DaemonError::from(e.at(flag.to_string()))),
    };
    spec.min = size("--min", &bounds.min, spec.min)?;
    spec.max = size("--max", &bounds.max, spec.max)?;
    Ok(spec)
}

/// Sets `spec` in the table of `next`, checked against a tier of `capacity` blocks; whether
/// the table changed.
fn set_spec(next: &mut LiveClasses, spec: ClassSpec, capacity: u64) -> Result<bool, DaemonError> {
    let before = next.params.classes.clone();
    next.params.classes.set(spec)?;
    next.params.resolved(capacity)?;
    Ok(next.params.classes != before)
}

fn add(
    data: &CacheDataPath,
    mountpoint: &Path,
    name: &str,
    dirs: &[PathBuf],
    recursive: bool,
    bounds: &ClassBounds,
) -> Result<Value, DaemonError> {
    let (bs, capacity) = geometry(data);
    let dirs = dirs
        .iter()
        .map(|d| normalize(d, mountpoint))
        .collect::<Result<Vec<_>, _>>()?;
    let changed = data.update_classes(|next| {
        let old = next.params.classes.by_name(name);
        let spec = old
            .and_then(|c| next.params.classes.get(c).cloned())
            .unwrap_or_else(|| ClassSpec::named(name));
        let mut changed = set_spec(next, with_bounds(spec, bounds, bs)?, capacity)?;
        changed |= next.note_priority_target(name, bounds);
        for dir in &dirs {
            changed |= next.rules.add(ClassRule {
                dir: dir.clone(),
                recursive,
                class: name.to_string(),
            });
        }
        Ok(changed)
    })?;
    log::info!("class add {name} ({} directories)", dirs.len());
    Ok(json!({ "changed": changed, "classes": list_json(data) }))
}

fn set(data: &CacheDataPath, name: &str, bounds: &ClassBounds) -> Result<Value, DaemonError> {
    let (bs, capacity) = geometry(data);
    let changed = data.update_classes(|next| {
        let spec = next
            .params
            .classes
            .by_name(name)
            .and_then(|c| next.params.classes.get(c).cloned())
            .ok_or_else(|| DaemonError::refused(format!("no class named {name}")))?;
        let changed = set_spec(next, with_bounds(spec, bounds, bs)?, capacity)?;
        Ok(next.note_priority_target(name, bounds) | changed)
    })?;
    log::info!("class set {name}");
    Ok(json!({ "changed": changed, "classes": list_json(data) }))
}

fn remove(data: &CacheDataPath, name: &str) -> Result<Value, DaemonError> {
    data.update_classes(|next| {
        next.params.classes.remove(name)?;
        next.rules.remove_class(name);
        Ok(true)
    })?;
    log::info!("class remove {name}");
    Ok(json!({ "changed": true, "classes": list_json(data) }))
}

fn priority_add(
    data: &CacheDataPath,
    mountpoint: &Path,
    dir: &Path,
    recursive: bool,
) -> Result<Value, DaemonError> {
    let dir = normalize(dir, mountpoint)?;
    let (_, capacity) = geometry(data);
    let added = data.update_classes(|next| {
        let new = !next.rules.of_class("priority").any(|r| r.dir == dir);
        // A priority directory means paper 000's class `priority` with T_p. On a mount whose
        // classes left `priority` unused (no directory, no target, no floor), the first one
        // gives it the default T_p, as `--priority` at mount time would have — unless the user
        // chose its target on this mount.
        let unused =
            next.rules.of_class("priority").next().is_none() && !next.priority_target_chosen();
        if let Some(spec) = next.params.classes.get(Class::PRIORITY).cloned() {
            if unused && spec.target.is_none() && spec.min.is_none() {
                let t_p = DirprioParams::guidance(capacity, false).t_protected;
                next.params.classes.set(ClassSpec {
                    target: Some(t_p),
                    ..spec
                })?;
            }
        }
        next.rules.add(ClassRule {
            dir: dir.clone(),
            recursive,
            class: "priority".into(),
        });
        Ok(new)
    })?;
    log::info!("priority add {} (recursive: {recursive})", dir.display());
    Ok(json!({ "changed": added, "rules": data.priority_rules() }))
}

fn priority_remove(
    data: &CacheDataPath,
    mountpoint: &Path,
    dir: &Path,
) -> Result<Value, DaemonError> {
    let dir = normalize(dir, mountpoint)?;
    if !data.update_classes(|next| Ok(next.rules.remove(&dir, "priority")))? {
        return Err(DaemonError::refused(format!(
            "{} is not a priority directory",
            dir.display()
        )));
    }
    log::info!("priority remove {}", dir.display());
    Ok(json!({ "changed": true, "rules": data.priority_rules() }))
}

/// The classes in force, in index order: name, target, bounds in blocks and directories.
pub fn list_json(data: &CacheDataPath) -> Value {
    let (_, capacity) = geometry(data);
    let live = data.classes();
    let classes: Vec<Value> = live
        .params
        .classes
        .iter()
        .map(|(_, s)| {
            let dirs = |recursive: bool| -> Vec<PathBuf> {
                live.rules
                    .of_class(&s.name)
                    .filter(|r| r.recursive == recursive)
                    .map(|r| r.dir.clone())
                    .collect()
            };
            json!({
                "name": s.name,
                "target": s.target,
                "min_blocks": s.min.map(|m| m.of(capacity)),
                "max_blocks": s.max.map(|m| m.of(capacity)),
                "dirs": dirs(false),
                "recursive": dirs(true),
            })
        })
        .collect();
    Value::Array(classes)
}
