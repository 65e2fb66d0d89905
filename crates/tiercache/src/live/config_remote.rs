//! The remote tier's settings: the keys of a `[[tier]] kind = "remote"` table and the
//! `--remote*` flags of `tiercache mount`, checked into a [`RemoteSpec`].
//!
//! Keys: `servers` (`memcached://HOST:PORT[,HOST:PORT...]`, required), `key_file` (required:
//! values are encrypted and authenticated; `tiercache keygen FILE` makes one; relative to the
//! config file's directory), `namespace`
//! (default `tiercache`), `threshold` (sequential-run length in blocks from which reads go to
//! BACKING, or `"auto"`; default 32), `timeout_ms` (default 50), plus the common `name`, `size`
//! (default: the servers' memory limits), `policy`, `placement` (default inclusive).

use super::config::{test_only_key, At, ConfigFile, SizeValue, TierTable};
use super::error::ConfigError;
use std::ops::Range;
use std::path::PathBuf;
use std::time::Duration;
use tiercache_core::seqrun::Threshold;

/// Default namespace: clients sharing a pool need distinct ones only if they must not share.
pub const DEFAULT_NAMESPACE: &str = "tiercache";
/// Default per-request timeout of a memcached server.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(50);

/// A remote tier, checked (the URL is parsed and the key read when the mount starts).
#[derive(Debug, Clone, PartialEq)]
pub struct RemoteSpec {
    /// `HOST:PORT` of each server.
    pub servers: Vec<String>,
    pub key_file: PathBuf,
    pub namespace: String,
    pub threshold: Threshold,
    pub timeout: Duration,
}

/// The `--remote*` flags of `tiercache mount`.
#[derive(Debug, Clone, Default)]
pub struct RemoteFlags {
    pub url: Option<String>,
    pub key_file: Option<PathBuf>,
    pub namespace: Option<String>,
    pub threshold: Option<String>,
    pub placement: Option<String>,
    pub timeout_ms: Option<u64>,
    pub size: Option<String>,
}

impl RemoteFlags {
    fn any(&self) -> bool {
        self.url.is_some()
            || self.key_file.is_some()
            || self.namespace.is_some()
            || self.threshold.is_some()
            || self.placement.is_some()
            || self.timeout_ms.is_some()
            || self.size.is_some()
    }
}

/// Applies the `--remote*` flags to the lower tiers (from `--tier` flags or the file): with
/// one remote tier there, the flags change its keys (`--remote URL` its servers); with none,
/// `--remote URL` adds one, last (memory → … → remote → BACKING).
pub fn apply_remote_flags(
    tiers: Option<Vec<TierTable>>,
    f: &RemoteFlags,
) -> Result<Option<Vec<TierTable>>, ConfigError> {
    if !f.any() {
        return Ok(tiers);
    }
    let mut tiers = tiers.unwrap_or_default();
    let remotes = tiers.iter().filter(|t| t.kind.value == "remote").count();
    if remotes > 1 {
        return Err(ConfigError::bad(
            "--remote*",
            "the config file has several remote tiers; set them there",
        ));
    }
    if remotes == 0 {
        let Some(url) = &f.url else {
            return Err(ConfigError::bad(
                "--remote-*",
                "no remote tier to apply it to (give --remote URL, or a [[tier]] \
                 kind = \"remote\" in the config file)",
            ));
        };
        tiers.push(TierTable {
            servers: Some(At::flag(url.clone())),
            ..TierTable::of_kind("remote")
        });
    }
    let table = tiers.iter_mut().find(|t| t.kind.value == "remote");
    let Some(t) = table else {
        return Err(ConfigError::bad("--remote", "internal error: no tier"));
    };
    t.from_flags = Some("remote");
    if let Some(url) = &f.url {
        t.servers = Some(At::flag(url.clone()));
    }
    if let Some(k) = &f.key_file {
        t.key_file = Some(At::flag(k.clone()));
    }
    if let Some(n) = &f.namespace {
        t.namespace = Some(At::flag(n.clone()));
    }
    if let Some(n) = &f.threshold {
        t.threshold = Some(At::flag(SizeValue::Text(n.clone())));
    }
    if let Some(p) = &f.placement {
        t.placement = Some(At::flag(p.clone()));
    }
    if let Some(ms) = f.timeout_ms {
        t.timeout_ms = Some(At::flag(ms));
    }
    if let Some(s) = &f.size {
        t.size = Some(At::flag(SizeValue::Text(s.clone())));
    }
    Ok(Some(tiers))
}

/// Where a remote key came from: `FILE:LINE`, or the flag that set it.
fn place<T>(cf: &ConfigFile, t: &TierTable, at: &At<T>, flag: &str) -> String {
    match at.span {
        None => format!("--{flag}"),
        Some(_) => cf.place(t, at),
    }
}

impl ConfigFile {
    /// Checks the remote keys of `t` (kind `remote`).
    pub(super) fn remote_spec(&self, t: &TierTable) -> Result<RemoteSpec, ConfigError> {
        if let Some((span, key)) = test_only_key(t) {
            return Err(ConfigError::bad(
                self.place_span(t, span),
                format!("`{key}` is only for kind = \"test\", not \"remote\""),
            ));
        }
        let Some(servers) = &t.servers else {
            return Err(ConfigError::bad(
                self.place(t, &t.kind),
                "a remote tier needs `servers` (memcached://HOST:PORT[,HOST:PORT...])",
            ));
        };
        let servers_at = place(self, t, servers, "remote");
        let list = tiercache_remote::parse_url(servers.value.trim())
            .map_err(|e| ConfigError::bad(servers_at.clone(), e.to_string()))?;
        let Some(key) = &t.key_file else {
            return Err(ConfigError::bad(
                servers_at,
                "a remote tier needs a key file (--remote-key FILE or `key_file`; \
                 create one with `tiercache keygen FILE`): values on the servers are encrypted \
                 and authenticated with it",
            ));
        };
        let namespace = match &t.namespace {
            None => DEFAULT_NAMESPACE.to_string(),
            Some(n) => {
                let v = n.value.trim();
                if v.is_empty() || v.len() > 64 || v.contains(char::is_whitespace) {
                    return Err(ConfigError::bad(
                        place(self, t, n, "remote-namespace"),
                        format!("namespace `{}`: 1 to 64 characters, no spaces", n.value),
                    ));
                }
                v.to_string()
            }
        };
        let threshold = match &t.threshold {
            None => Threshold::default(),
            Some(at) => {
                let parsed = match &at.value {
                    SizeValue::Bytes(0) => Err(tiercache_core::ParseError::invalid(
                        "0",
                        "expected a run length ≥ 1 or `auto`",
                    )),
                    SizeValue::Bytes(n) => Ok(Threshold::Fixed(*n)),
                    SizeValue::Text(s) => s.trim().parse::<Threshold>(),
                };
                parsed.map_err(|e| {
                    ConfigError::bad(
                        format!("{}: threshold", place(self, t, at, "remote-threshold")),
                        e.to_string(),
                    )
                })?
            }
        };
        let timeout = match &t.timeout_ms {
            None => DEFAULT_TIMEOUT,
            Some(at) if at.value == 0 || at.value > 60_000 => {
                return Err(ConfigError::bad(
                    place(self, t, at, "remote-timeout"),
                    format!("timeout {} ms: expected 1 to 60000", at.value),
                ))
            }
            Some(at) => Duration::from_millis(at.value),
        };
        // A relative `key_file` in the config file is relative to the file's directory.
        let key_file = match (&key.span, &self.path) {
            (Some(_), Some(cfg)) if key.value.is_relative() => cfg
                .parent()
                .map_or_else(|| key.value.clone(), |d| d.join(&key.value)),
            _ => key.value.clone(),
        };
        Ok(RemoteSpec {
            servers: list,
            key_file,
            namespace,
            threshold,
            timeout,
        })
    }
}

/// The first key given that only a `remote` tier takes, and where.
pub fn remote_only_key(t: &TierTable) -> Option<(&Option<Range<usize>>, &'static str)> {
    let spans = [
        (t.servers.as_ref().map(|a| &a.span), "servers"),
        (t.key_file.as_ref().map(|a| &a.span), "key_file"),
        (t.namespace.as_ref().map(|a| &a.span), "namespace"),
        (t.threshold.as_ref().map(|a| &a.span), "threshold"),
        (t.timeout_ms.as_ref().map(|a| &a.span), "timeout_ms"),
    ];
    spans.into_iter().find_map(|(s, key)| s.map(|s| (s, key)))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn file(text: &str) -> ConfigFile {
        ConfigFile::from_text(std::path::Path::new("tc.toml"), text.to_string()).unwrap()
    }

    #[test]
    fn a_remote_table_is_checked_with_file_and_line() {
        let text = "[[tier]]\nkind = \"remote\"\nservers = \"memcached://127.0.0.1:11211\"\n\
                    key_file = \"/etc/tc.key\"\nthreshold = \"auto\"\n";
        let mut f = file(text);
        let mem = f.fold_memory_tier().unwrap();
        let tiers = f.options.tiers.clone().unwrap();
        let specs = f.lower_tiers(&tiers, 4096, &mem).unwrap();
        let r = specs[0].remote.clone().unwrap();
        assert_eq!(r.servers, vec!["127.0.0.1:11211"]);
        assert_eq!(r.threshold, Threshold::Auto);
        assert_eq!(r.namespace, DEFAULT_NAMESPACE);
        assert_eq!(specs[0].capacity_bytes, 0);
        assert_eq!(
            specs[0].placement,
            tiercache_core::hierarchy::Placement::Inclusive
        );
        for (text, at, says) in [
            (
                "[[tier]]\nkind = \"remote\"\nkey_file = \"k\"\n",
                "tc.toml:2:",
                "needs `servers`",
            ),
            (
                "[[tier]]\nkind = \"remote\"\nkey_file = \"k\"\nservers = \"http://h:1\"\n",
                "tc.toml:4:",
                "http://h:1",
            ),
            (
                "[[tier]]\nkind = \"remote\"\nkey_file = \"k\"\nservers = \"memcached://h:1,hx\"\n",
                "tc.toml:4:",
                "hx",
            ),
            (
                "[[tier]]\nkind = \"remote\"\nservers = \"memcached://h:1\"\n",
                "tc.toml:3:",
                "needs a key file",
            ),
            (
                "[[tier]]\nkind = \"remote\"\nservers = \"memcached://h:1\"\nkey_file = \"k\"\n\
                 threshold = 0\n",
                "tc.toml:5:",
                "threshold",
            ),
            (
                "[[tier]]\nkind = \"test\"\nsize = \"1M\"\nthreshold = 4\n",
                "tc.toml:4:",
                "only for kind = \"remote\"",
            ),
            (
                "[[tier]]\nkind = \"remote\"\nservers = \"memcached://h:1\"\nkey_file = \"k\"\n\
                 accepts_dirty = true\n",
                "tc.toml:5:",
                "only for kind = \"test\"",
            ),
        ] {
            let mut f = file(text);
            let mem = f.fold_memory_tier().unwrap();
            let tiers = f.options.tiers.clone().unwrap();
            let e = f.lower_tiers(&tiers, 4096, &mem).unwrap_err().to_string();
            assert!(e.starts_with(at) && e.contains(says), "{text}: {e}");
        }
    }

    #[test]
    fn remote_flags_add_a_last_tier_or_change_the_files() {
        let flags = RemoteFlags {
            url: Some("memcached://127.0.0.1:1".into()),
            key_file: Some("/k".into()),
            threshold: Some("7".into()),
            ..RemoteFlags::default()
        };
        let test = TierTable::from_flag("test:1M").unwrap();
        let tiers = apply_remote_flags(Some(vec![test]), &flags)
            .unwrap()
            .unwrap();
        assert_eq!(tiers.len(), 2);
        let f = ConfigFile::default();
        let specs = f.lower_tiers(&tiers, 4096, "memory").unwrap();
        assert_eq!(
            specs[1].remote.as_ref().unwrap().threshold,
            Threshold::Fixed(7)
        );
        // Without --remote and without a remote tier: an error naming the flags.
        let e = apply_remote_flags(
            None,
            &RemoteFlags {
                namespace: Some("x".into()),
                ..RemoteFlags::default()
            },
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("--remote"), "{e}");
        let bad = RemoteFlags {
            url: Some("memcached://h:1".into()),
            key_file: Some("/k".into()),
            threshold: Some("zero".into()),
            ..RemoteFlags::default()
        };
        let tiers = apply_remote_flags(None, &bad).unwrap().unwrap();
        let e = f
            .lower_tiers(&tiers, 4096, "memory")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("--remote-threshold: threshold"), "{e}");
    }

    #[test]
    fn remote_url_flag_keeps_the_files_other_remote_keys() {
        let text = "[[tier]]\nkind = \"remote\"\nservers = \"memcached://10.0.0.1:11211\"\n\
                    key_file = \"tc.key\"\nnamespace = \"farm\"\n";
        let mut f =
            ConfigFile::from_text(std::path::Path::new("/etc/tc/tc.toml"), text.into()).unwrap();
        let mem = f.fold_memory_tier().unwrap();
        let flags = RemoteFlags {
            url: Some("memcached://127.0.0.1:5".into()),
            ..RemoteFlags::default()
        };
        let tiers = apply_remote_flags(f.options.tiers.clone(), &flags)
            .unwrap()
            .unwrap();
        assert_eq!(tiers.len(), 1);
        let specs = f.lower_tiers(&tiers, 4096, &mem).unwrap();
        let r = specs[0].remote.clone().unwrap();
        assert_eq!(r.servers, vec!["127.0.0.1:5"]);
        assert_eq!(r.namespace, "farm");
        assert_eq!(r.key_file, std::path::PathBuf::from("/etc/tc/tc.key"));
    }
}
