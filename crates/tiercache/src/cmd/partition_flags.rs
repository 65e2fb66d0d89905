//! The partitioner flags `mount` and `sim` share: `--partition`, `--omega`, `--t-protected`,
//! `--t-normal`, `--b-pmin`, `--b-nmin`, and the grammar of `--class`.

use clap::Args;
use std::str::FromStr;
use tiercache_core::partition::{
    Amount, ClassParams, ClassSpec, ClassTable, DirprioParams, PartitionConfig, PartitionKind,
};

#[derive(Args, Debug, Clone, Default)]
pub struct PartitionFlags {
    /// Pool partitioner: none|basic|dirprio|static|mrc [default: dirprio for mount, none for
    /// sim]. `mrc` sizes the protected pool from each class's miss-ratio curve (SHARDS
    /// sampling) to meet T_p and T_n with the fewest blocks.
    #[arg(long, value_name = "KIND")]
    pub partition: Option<PartitionKind>,
    /// dirprio/mrc window ω in block accesses [default: the tier's capacity B].
    #[arg(long, value_name = "N")]
    pub omega: Option<u64>,
    /// dirprio/mrc T_p, a fraction [default: 1.0; mrc: 1.0 is never reachable, give e.g. 0.95].
    #[arg(long, value_name = "F")]
    pub t_protected: Option<f64>,
    /// dirprio/mrc T_n, a fraction [default: 0.65].
    #[arg(long, value_name = "F")]
    pub t_normal: Option<f64>,
    /// dirprio/mrc B_pmin (static: the protected size), blocks or a percentage of B
    /// [default: 75%].
    #[arg(long, value_name = "N|P%")]
    pub b_pmin: Option<Amount>,
    /// dirprio/mrc B_nmin in blocks [default: 32].
    #[arg(long, value_name = "N")]
    pub b_nmin: Option<u64>,
}

impl PartitionFlags {
    /// These flags over `base` (values from a config file), then paper 000's §3.4 guidance;
    /// checked against a tier of `capacity` blocks. Errors name the flag.
    pub fn resolve(
        &self,
        base: &PartitionFlags,
        default_kind: PartitionKind,
        capacity: u64,
    ) -> Result<PartitionConfig, String> {
        self.resolve_classes(base, default_kind, capacity, &[], true)
    }

    /// Like [`PartitionFlags::resolve`], with the user's classes. Without any, paper 000's two
    /// classes with its guidance. With some, `priority` and `normal` get paper 000's values
    /// only where asked for: `priority` is a class with T_p (default 1.0) and B_pmin (if given)
    /// when `priority_in_use` (priority directories, a workload of class `priority`) or a
    /// `--t-protected`/`--b-pmin` is given, else it is unused; `normal` gets T_n if given and
    /// B_nmin (default 32 blocks). A class spec named `priority` or `normal` overrides.
    pub fn resolve_classes(
        &self,
        base: &PartitionFlags,
        default_kind: PartitionKind,
        capacity: u64,
        classes: &[ClassSpec],
        priority_in_use: bool,
    ) -> Result<PartitionConfig, String> {
        if classes.is_empty() {
            return self.resolve_two(base, default_kind, capacity);
        }
        let g = DirprioParams::guidance(capacity, false);
        let t_p = self.t_protected.or(base.t_protected);
        let b_pmin = self.b_pmin.or(base.b_pmin);
        let mut specs = Vec::new();
        if priority_in_use || t_p.is_some() || b_pmin.is_some() {
            specs.push(ClassSpec {
                name: "priority".into(),
                target: Some(t_p.unwrap_or(g.t_protected)),
                min: b_pmin,
                max: None,
            });
        }
        specs.push(ClassSpec {
            name: "normal".into(),
            target: self.t_normal.or(base.t_normal),
            min: Some(Amount::Blocks(
                self.b_nmin.or(base.b_nmin).unwrap_or(g.b_nmin),
            )),
            max: None,
        });
        specs.extend(classes.iter().cloned());
        let table = ClassTable::new(specs).map_err(|e| format!("--class: {e}"))?;
        let params = ClassParams {
            omega: self.omega.or(base.omega),
            classes: table,
        };
        params.resolved(capacity).map_err(|e| format!("--{e}"))?;
        Ok(PartitionConfig {
            kind: self.partition.or(base.partition).unwrap_or(default_kind),
            params,
        })
    }

    fn resolve_two(
        &self,
        base: &PartitionFlags,
        default_kind: PartitionKind,
        capacity: u64,
    ) -> Result<PartitionConfig, String> {
        let g = DirprioParams::guidance(capacity, false);
        let params = DirprioParams {
            omega: self.omega.or(base.omega),
            t_protected: self
                .t_protected
                .or(base.t_protected)
                .unwrap_or(g.t_protected),
            t_normal: self.t_normal.or(base.t_normal).unwrap_or(g.t_normal),
            b_pmin: self.b_pmin.or(base.b_pmin).unwrap_or(g.b_pmin),
            b_nmin: self.b_nmin.or(base.b_nmin).unwrap_or(g.b_nmin),
        };
        if params.omega == Some(0) {
            return Err("--omega: must be at least 1".into());
        }
        params.resolved(capacity).map_err(|e| format!("--{e}"))?;
        Ok(PartitionConfig {
            kind: self.partition.or(base.partition).unwrap_or(default_kind),
            params: params.into(),
        })
    }
}

/// One `--class NAME:DIR[,DIR]:TARGET[:min=SIZE][:max=SIZE]` as given: a name, directories
/// (none in `sim`), an optional hit-ratio target (empty: best effort) and optional bounds whose
/// unit the front end decides (`mount`: bytes such as `64M`; `sim`: blocks or `P%`).
#[derive(Debug, Clone, PartialEq)]
pub struct ClassFlag {
    pub name: String,
    pub dirs: Vec<String>,
    pub target: Option<f64>,
    pub min: Option<String>,
    pub max: Option<String>,
}

impl FromStr for ClassFlag {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut parts = s.split(':');
        let name = parts.next().unwrap_or_default().to_string();
        if name.is_empty() {
            return Err(format!(
                "{s:?}: expected NAME:DIR[,DIR]:TARGET[:min=SIZE][:max=SIZE]"
            ));
        }
        let dirs = parts
            .next()
            .unwrap_or_default()
            .split(',')
            .filter(|d| !d.is_empty())
            .map(str::to_string)
            .collect();
        let target = match parts.next().unwrap_or_default().trim() {
            "" | "-" => None,
            t => Some(
                t.parse::<f64>()
                    .ok()
                    .filter(|v| (0.0..=1.0).contains(v))
                    .ok_or_else(|| format!("{s:?}: target {t:?} is not a fraction in 0..1"))?,
            ),
        };
        let (mut min, mut max) = (None, None);
        for bound in parts {
            match bound.split_once('=') {
                Some(("min", v)) if !v.is_empty() => min = Some(v.to_string()),
                Some(("max", v)) if !v.is_empty() => max = Some(v.to_string()),
                _ => return Err(format!("{s:?}: {bound:?} is not min=SIZE or max=SIZE")),
            }
        }
        Ok(Self {
            name,
            dirs,
            target,
            min,
            max,
        })
    }
}

impl ClassFlag {
    /// The class spec, bounds converted by `amount`.
    pub fn spec(
        &self,
        amount: impl Fn(&str) -> Result<Amount, String>,
    ) -> Result<ClassSpec, String> {
        let conv = |v: &Option<String>| v.as_deref().map(&amount).transpose();
        Ok(ClassSpec {
            name: self.name.clone(),
            target: self.target,
            min: conv(&self.min)?,
            max: conv(&self.max)?,
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn class_flags_parse_names_dirs_targets_and_bounds() {
        let c: ClassFlag = "web:www/top,www/static:0.99:min=64M".parse().unwrap();
        assert_eq!(c.name, "web");
        assert_eq!(c.dirs, ["www/top", "www/static"]);
        assert_eq!(
            (c.target, c.min.as_deref(), c.max),
            (Some(0.99), Some("64M"), None)
        );
        let c: ClassFlag = "backup:backup::max=16M".parse().unwrap();
        assert_eq!((c.target, c.max.as_deref()), (None, Some("16M")));
        let c: ClassFlag = "batch".parse().unwrap();
        assert!(c.dirs.is_empty() && c.target.is_none());
        for bad in [
            ":a:0.5",
            "web:a:1.5",
            "web:a:x",
            "web:a:0.5:size=3",
            "web:a:0.5:min=",
        ] {
            assert!(bad.parse::<ClassFlag>().is_err(), "{bad}");
        }
    }

    #[test]
    fn classes_leave_priority_unused_unless_asked_for() {
        let web = ClassSpec {
            name: "web".into(),
            target: Some(0.9),
            min: None,
            max: None,
        };
        let f = PartitionFlags::default();
        let p = f
            .resolve_classes(
                &f,
                PartitionKind::Dirprio,
                1000,
                std::slice::from_ref(&web),
                false,
            )
            .unwrap();
        let t = &p.params.classes;
        assert_eq!(t.by_name("web").map(|c| c.index()), Some(2));
        assert_eq!(t.get(tiercache_core::Class::PRIORITY).unwrap().target, None);
        let p = f
            .resolve_classes(&f, PartitionKind::Dirprio, 1000, &[web], true)
            .unwrap();
        let prio = p
            .params
            .classes
            .get(tiercache_core::Class::PRIORITY)
            .unwrap();
        assert_eq!((prio.target, prio.min), (Some(1.0), None));
    }
}
