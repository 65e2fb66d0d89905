//! The class table a partitioner sizes pools for: each class's name, hit-ratio target, floor and
//! cap, and which classes get a pool of their own.
//!
//! Invariants of a [`ClassTable`]: 2 ≤ len ≤ [`MAX_CLASSES`]; entry 0 is named `priority` and
//! entry 1 `normal`; names are unique; targets lie in 0..=1; `normal` has no cap (it takes what
//! the others leave). Paper 000's two-class parameters ([`DirprioParams`]) are the table
//! `priority {T_p, B_pmin}`, `normal {T_n, B_nmin}`.

use super::dirprio::{Amount, DirprioParams};
use crate::class::{Class, PoolId, MAX_CLASSES};
use crate::error::CoreError;

/// One class as the user gives it.
#[derive(Debug, Clone, PartialEq)]
pub struct ClassSpec {
    pub name: String,
    /// Hit-ratio goal, a fraction; `None`: best effort.
    pub target: Option<f64>,
    /// Floor of the class's pool (for `normal`: of the rest pool).
    pub min: Option<Amount>,
    /// Cap of the class's pool.
    pub max: Option<Amount>,
}

impl ClassSpec {
    /// A best-effort class with no bounds.
    pub fn named(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            target: None,
            min: None,
            max: None,
        }
    }
    /// Whether blocks of this class live in a pool of their own (`normal` never: it is the
    /// rest pool's).
    fn own_pool(&self, class: Class) -> bool {
        class != Class::NORMAL
            && (self.target.is_some() || self.min.is_some() || self.max.is_some())
    }
}

/// The classes of a tier, indexed by [`Class`]. See the module docs for the invariants.
#[derive(Debug, Clone, PartialEq)]
pub struct ClassTable {
    specs: Vec<ClassSpec>,
    /// `pool_of` for every class index, kept by every change (asked on every access).
    pools: [PoolId; MAX_CLASSES],
}

impl ClassTable {
    /// Paper 000's two classes.
    pub fn two(params: &DirprioParams) -> Self {
        Self::of(vec![
            ClassSpec {
                name: "priority".into(),
                target: Some(params.t_protected),
                min: Some(params.b_pmin),
                max: None,
            },
            ClassSpec {
                name: "normal".into(),
                target: Some(params.t_normal),
                min: Some(Amount::Blocks(params.b_nmin)),
                max: None,
            },
        ])
    }

    /// A table of checked `specs`, its pool map computed.
    fn of(specs: Vec<ClassSpec>) -> Self {
        let mut t = Self {
            specs,
            pools: [PoolId::NORMAL; MAX_CLASSES],
        };
        t.map_pools();
        t
    }

    /// Recomputes `pools` from the specs.
    fn map_pools(&mut self) {
        self.pools = std::array::from_fn(|i| match (Class::new(i), self.specs.get(i)) {
            (Some(c), Some(s)) if s.own_pool(c) => PoolId::own(c),
            _ => PoolId::NORMAL,
        });
    }

    /// The two built-in classes, best effort.
    pub fn built_in() -> Self {
        Self::of(vec![
            ClassSpec::named("priority"),
            ClassSpec::named("normal"),
        ])
    }

    /// A table of `specs`: a spec named `priority` or `normal` sets that built-in class, the
    /// others become classes 2, 3, … in order.
    pub fn new(specs: Vec<ClassSpec>) -> Result<Self, CoreError> {
        let mut t = Self::built_in();
        for s in specs {
            t.set(s)?;
        }
        Ok(t)
    }

    /// Sets the class named `spec.name`, adding it when new; checked first, nothing changes on
    /// an error. Returns its index.
    pub fn set(&mut self, spec: ClassSpec) -> Result<Class, CoreError> {
        check_spec(&spec)?;
        if let Some(c) = self.by_name(&spec.name) {
            if c == Class::NORMAL && spec.max.is_some() {
                return Err(CoreError::config(
                    "class",
                    "normal takes what the other classes leave and has no max",
                ));
            }
            self.specs[c.index()] = spec;
            self.map_pools();
            return Ok(c);
        }
        let Some(c) = Class::new(self.specs.len()) else {
            return Err(CoreError::config(
                "class",
                format!("{}: at most {MAX_CLASSES} classes", spec.name),
            ));
        };
        self.specs.push(spec);
        self.map_pools();
        Ok(c)
    }

    /// Removes class `name` (not `priority` or `normal`); classes after it move down one index.
    pub fn remove(&mut self, name: &str) -> Result<Class, CoreError> {
        match self.by_name(name) {
            Some(c) if c.index() >= 2 => {
                self.specs.remove(c.index());
                self.map_pools();
                Ok(c)
            }
            Some(_) => Err(CoreError::config(
                "class",
                format!("{name} is built in and cannot be removed"),
            )),
            None => Err(CoreError::config("class", format!("no class named {name}"))),
        }
    }

    pub fn len(&self) -> usize {
        self.specs.len()
    }
    pub fn is_empty(&self) -> bool {
        false
    }
    pub fn get(&self, class: Class) -> Option<&ClassSpec> {
        self.specs.get(class.index())
    }
    /// The class named `name`.
    pub fn by_name(&self, name: &str) -> Option<Class> {
        self.specs
            .iter()
            .position(|s| s.name == name)
            .and_then(Class::new)
    }
    /// Every class and its spec, in index order.
    pub fn iter(&self) -> impl Iterator<Item = (Class, &ClassSpec)> {
        self.specs
            .iter()
            .enumerate()
            .filter_map(|(i, s)| Class::new(i).map(|c| (c, s)))
    }
    /// The name of `class` (its default name when the table does not have it).
    pub fn name(&self, class: Class) -> &str {
        self.get(class).map_or(class.as_str(), |s| s.name.as_str())
    }
    /// The pool holding blocks of `class` when pools are separated.
    #[inline]
    pub fn pool_of(&self, class: Class) -> PoolId {
        self.pools[class.index()]
    }

    /// Resolves sizes against a tier of `capacity` blocks and checks the bounds. The rest
    /// pool's floor comes first; then each class's floor, in index order, from what is left. A
    /// percentage shrinks to fit a small tier; absolute floors that cannot all hold are an
    /// error.
    pub fn resolved(&self, capacity: u64) -> Result<Vec<ResolvedClass>, CoreError> {
        let rest_min = self.specs[Class::NORMAL.index()]
            .min
            .map_or(0, |m| m.of(capacity))
            .min(capacity);
        let mut left = capacity - rest_min;
        let mut out = Vec::with_capacity(self.specs.len());
        for (c, s) in self.iter() {
            let own = s.own_pool(c);
            let min = match (c == Class::NORMAL, s.min) {
                (true, _) => rest_min,
                (false, None) => 0,
                (false, Some(Amount::Blocks(n))) if own && n > left => {
                    return Err(match c {
                        Class::PRIORITY => CoreError::config(
                            "b-pmin",
                            format!("{n} + the other floors exceed the tier's {capacity} blocks"),
                        ),
                        _ => CoreError::config(
                            "class",
                            format!(
                                "{}: min {n} blocks + the other floors exceed the tier's \
                                 {capacity} blocks",
                                s.name
                            ),
                        ),
                    });
                }
                (false, Some(m)) => m.of(capacity).min(left),
            };
            if own {
                left -= min;
            }
            let max = s.max.map_or(capacity, |m| m.of(capacity).min(capacity));
            if max < min {
                return Err(CoreError::config(
                    "class",
                    format!("{}: max {max} blocks is below its min {min}", s.name),
                ));
            }
            out.push(ResolvedClass {
                target: s.target,
                min,
                max,
                own_pool: own,
            });
        }
        Ok(out)
    }
}

/// One class resolved against a tier's capacity, in blocks.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ResolvedClass {
    pub target: Option<f64>,
    pub min: u64,
    pub max: u64,
    pub own_pool: bool,
}

/// Whether `name` can name a class: 1–32 of a-z, A-Z, 0-9, `-` and `_`.
pub fn is_class_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 32
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

fn check_spec(s: &ClassSpec) -> Result<(), CoreError> {
    if !is_class_name(&s.name) {
        return Err(CoreError::config(
            "class",
            format!("{:?}: a name is 1–32 of a-z, A-Z, 0-9, - and _", s.name),
        ));
    }
    if let Some(t) = s.target {
        if !(0.0..=1.0).contains(&t) {
            let key = match s.name.as_str() {
                "priority" => "t-protected",
                "normal" => "t-normal",
                _ => "class target",
            };
            return Err(CoreError::config(
                key,
                format!("{}: {t} is outside 0..1", s.name),
            ));
        }
    }
    Ok(())
}

/// A partitioner's parameters: the window and the classes.
#[derive(Debug, Clone, PartialEq)]
pub struct ClassParams {
    /// Window length in accesses; `None` = B (000 §3.4.2).
    pub omega: Option<u64>,
    pub classes: ClassTable,
}

impl From<DirprioParams> for ClassParams {
    fn from(p: DirprioParams) -> Self {
        Self {
            omega: p.omega,
            classes: ClassTable::two(&p),
        }
    }
}

impl ClassParams {
    /// Paper 000's five parameters read back from the built-in classes (a class without a
    /// target reads as T = 0, without a floor as 0 blocks).
    pub fn dirprio(&self) -> DirprioParams {
        let spec = |c: Class| self.classes.get(c);
        let blocks = |a: Option<Amount>| match a {
            Some(Amount::Blocks(n)) => n,
            _ => 0,
        };
        DirprioParams {
            omega: self.omega,
            t_protected: spec(Class::PRIORITY).and_then(|s| s.target).unwrap_or(0.0),
            t_normal: spec(Class::NORMAL).and_then(|s| s.target).unwrap_or(0.0),
            b_pmin: spec(Class::PRIORITY)
                .and_then(|s| s.min)
                .unwrap_or(Amount::Blocks(0)),
            b_nmin: blocks(spec(Class::NORMAL).and_then(|s| s.min)),
        }
    }

    /// The class table, once the parameters are checked against a tier of `capacity` blocks.
    pub fn checked_table(&self, capacity: u64) -> Result<ClassTable, CoreError> {
        self.resolved(capacity)?;
        Ok(self.classes.clone())
    }

    /// Resolved against a tier of `capacity` blocks; errors name the parameter.
    pub fn resolved(&self, capacity: u64) -> Result<Resolved, CoreError> {
        if self.omega == Some(0) {
            return Err(CoreError::config("omega", "must be at least 1"));
        }
        for (_, s) in self.classes.iter() {
            check_spec(s)?;
        }
        Ok(Resolved {
            omega: self.omega.unwrap_or(capacity).max(1),
            capacity,
            classes: self.classes.resolved(capacity)?,
        })
    }
}

/// Parameters resolved against a tier's capacity B.
#[derive(Debug, Clone, PartialEq)]
pub struct Resolved {
    pub omega: u64,
    pub capacity: u64,
    /// Indexed by [`Class::index`].
    pub classes: Vec<ResolvedClass>,
}

impl Resolved {
    /// The rest pool's floor.
    pub fn rest_min(&self) -> u64 {
        self.classes[Class::NORMAL.index()].min
    }
    /// Classes with a pool of their own, in index order.
    pub fn own_pools(&self) -> impl Iterator<Item = (PoolId, &ResolvedClass)> {
        self.classes.iter().enumerate().filter_map(|(i, c)| {
            (c.own_pool)
                .then(|| PoolId::new(i))
                .flatten()
                .map(|p| (p, c))
        })
    }
    /// How many pools a tier needs (the rest pool and every class's own, by index).
    pub fn pool_count(&self) -> usize {
        self.classes.len().max(2)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn spec(name: &str, target: Option<f64>, min: Option<u64>, max: Option<u64>) -> ClassSpec {
        ClassSpec {
            name: name.into(),
            target,
            min: min.map(Amount::Blocks),
            max: max.map(Amount::Blocks),
        }
    }

    #[test]
    fn named_classes_follow_the_built_in_ones() {
        let t = ClassTable::new(vec![
            spec("web", Some(0.99), None, None),
            spec("normal", Some(0.5), Some(10), None),
            spec("backup", None, None, Some(16)),
            spec("batch", None, None, None),
        ])
        .unwrap();
        assert_eq!(t.by_name("web"), Class::new(2));
        assert_eq!(t.by_name("backup"), Class::new(3));
        assert_eq!(t.pool_of(Class::new(2).unwrap()), PoolId::new(2).unwrap());
        assert_eq!(
            t.pool_of(Class::new(4).unwrap()),
            PoolId::NORMAL,
            "batch shares"
        );
        assert_eq!(
            t.pool_of(Class::PRIORITY),
            PoolId::NORMAL,
            "unused priority"
        );
        let r = t.resolved(100).unwrap();
        assert_eq!((r[1].min, r[3].max), (10, 16));
    }

    #[test]
    fn bad_tables_are_refused_whole() {
        let mut t = ClassTable::new(vec![spec("web", Some(0.9), None, None)]).unwrap();
        let before = t.clone();
        assert!(t.set(spec("db", Some(1.5), None, None)).is_err());
        assert!(t.set(spec("bad name", None, None, None)).is_err());
        assert!(t.set(spec("normal", None, None, Some(5))).is_err());
        assert!(t.remove("normal").is_err());
        assert_eq!(t, before);
        for i in 3..MAX_CLASSES {
            t.set(spec(&format!("c{i}"), None, None, None)).unwrap();
        }
        assert!(t.set(spec("one-too-many", None, None, None)).is_err());
        let floors = ClassTable::new(vec![
            spec("a", None, Some(60), None),
            spec("b", None, Some(60), None),
        ])
        .unwrap();
        assert!(floors.resolved(100).is_err());
    }

    #[test]
    fn the_two_class_table_resolves_as_paper_000_does() {
        let p = DirprioParams::guidance(40, false);
        let r = ClassParams::from(p).resolved(40).unwrap();
        assert_eq!(r.rest_min(), 32);
        assert_eq!(r.classes[0].min, 8, "75 % of 40 shrunk to B − B_nmin");
        assert_eq!(r.omega, 40);
    }
}
