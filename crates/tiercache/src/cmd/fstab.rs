//! The mount.fuse form, `tiercache SOURCE MOUNTPOINT [-o OPTIONS]`: what `mount -t
//! fuse.tiercache` and an fstab line run. mount(8) runs `mount.fuse3`, which runs
//! `tiercache SOURCE MOUNTPOINT -o OPTIONS` through `/bin/sh` (so `tiercache` is found in
//! PATH), after taking out `user`, `users`, `nouser`, `auto`, `noauto`, `_netdev`, `nofail`,
//! `setuid=` and `drop_privileges`, and adding `dev` and `suid` unless `nodev`/`nosuid` were
//! given (libfuse `util/mount.fuse.c`).
//!
//! [`rewrite`] turns that form into `tiercache mount SOURCE MOUNTPOINT --NAME=VALUE ...`
//! before the command line is parsed: every flag of `tiercache mount` (but `--foreground`) is
//! `-o NAME=VALUE` (`-o NAME` for one without a value, `_` or `-` between words); the generic
//! mount flags go to `--mount-flags` (but `dev` and `suid`, which mount.fuse3 adds to every
//! list: ignored); what mount(8) and systemd handle themselves is ignored;
//! anything else is an error naming the option, before anything is mounted. The mount then
//! daemonizes like `tiercache mount`, returning once it serves, as mount(8) expects.

use std::ffi::{OsStr, OsString};

/// Options mount(8), systemd or the kernel handle without us: accepted, no effect here.
/// (`default_permissions` is always on.)
const IGNORED: &[&str] = &[
    "defaults",
    "auto",
    "noauto",
    "nofail",
    "_netdev",
    "user",
    "users",
    "nouser",
    "owner",
    "group",
    "default_permissions",
];

/// Generic mount flags, passed on to the mount itself (`--mount-flags`).
pub const MOUNT_FLAGS: &[&str] = &[
    "ro", "rw", "dev", "nodev", "suid", "nosuid", "exec", "noexec", "atime", "noatime", "sync",
    "async", "dirsync",
];

/// Flags of `tiercache mount` that have no `-o` spelling: `--foreground` would keep mount(8)
/// waiting for good; `--mount-flags` is what the generic flags become.
const NOT_OPTIONS: &[&str] = &["foreground", "mount-flags", "help"];

/// The command line to parse, and whether it came in the mount.fuse form (its errors are
/// then one line, clap's usage being about the other form).
#[derive(Debug)]
pub struct Argv {
    pub args: Vec<OsString>,
    pub fuse_form: bool,
}

/// `args` (the program name first) unchanged unless it is the mount.fuse form: its first
/// argument is neither a subcommand (of `cli`) nor an option, and is a path (has a `/`, or
/// exists), so that a mistyped subcommand still gets clap's "similar subcommand" tip.
pub fn rewrite(cli: &clap::Command, args: Vec<OsString>) -> Result<Argv, String> {
    let first = args
        .get(1)
        .filter(|a| {
            a.as_encoded_bytes().contains(&b'/')
                || std::path::Path::new(a).symlink_metadata().is_ok()
        })
        .map(|a| a.to_string_lossy().into_owned());
    let is_subcommand = |name: &str| {
        name == "help"
            || cli
                .get_subcommands()
                .any(|c| c.get_name() == name || c.get_all_aliases().any(|a| a == name))
    };
    match first {
        Some(f) if !f.starts_with('-') && !is_subcommand(&f) => {}
        _ => {
            return Ok(Argv {
                args,
                fuse_form: false,
            })
        }
    }
    let mount = cli
        .find_subcommand("mount")
        .ok_or_else(|| "no mount subcommand".to_string())?;
    let mut paths = Vec::new();
    let mut opts: Vec<String> = Vec::new();
    let mut it = args.iter().skip(1);
    while let Some(a) = it.next() {
        let text = a.to_string_lossy();
        if text == "-o" {
            let v = it
                .next()
                .ok_or_else(|| "-o: missing its list of options".to_string())?;
            opts.push(utf8(v, "-o")?.to_string());
        } else if let Some(v) = text.strip_prefix("-o") {
            opts.push(v.to_string());
        } else if text.starts_with('-') {
            return Err(format!(
                "{text}: unexpected argument (the mount.fuse form is SOURCE MOUNTPOINT -o OPTIONS)"
            ));
        } else {
            paths.push(a.clone());
        }
    }
    let [source, mountpoint] = <[OsString; 2]>::try_from(paths).map_err(|p| {
        format!(
            "expected SOURCE MOUNTPOINT [-o OPTIONS], got {} path(s)",
            p.len()
        )
    })?;
    let mut out = vec![
        args.first().cloned().unwrap_or_else(|| "tiercache".into()),
        "mount".into(),
        source,
        mountpoint,
    ];
    out.extend(options(mount, &opts.join(","))?.into_iter().map(Into::into));
    Ok(Argv {
        args: out,
        fuse_form: true,
    })
}

fn utf8<'a>(v: &'a OsStr, what: &str) -> Result<&'a str, String> {
    v.to_str()
        .ok_or_else(|| format!("{what}: {} is not UTF-8", v.to_string_lossy()))
}

/// One comma-separated option list as `tiercache mount` flags.
fn options(mount: &clap::Command, list: &str) -> Result<Vec<String>, String> {
    let mut flags: Vec<String> = Vec::new();
    let mut generic: Vec<&str> = Vec::new();
    // `remote=memcached://a:1,b:2`: mount.fuse splits at every comma, so a bare `HOST:PORT`
    // right after `remote=` continues its server list.
    let mut remote_at: Option<usize> = None;
    for opt in list.split(',').filter(|o| !o.is_empty()) {
        let (name, value) = match opt.split_once('=') {
            Some((n, v)) => (n, Some(v)),
            None => (opt, None),
        };
        if IGNORED.contains(&name) || name.starts_with("x-") || name == "comment" {
            remote_at = None;
            continue;
        }
        if value.is_none() && (name == "dev" || name == "suid") {
            // mount.fuse3 appends `dev` and `suid` to every list that does not negate them,
            // so they cannot tell what was asked for: a mount stays nodev,nosuid unless
            // `mount_flags` in its config file says otherwise.
            remote_at = None;
            continue;
        }
        if value.is_none() && MOUNT_FLAGS.contains(&name) {
            generic.push(name);
            remote_at = None;
            continue;
        }
        let long = name.replace('_', "-");
        let arg = mount
            .get_arguments()
            .find(|a| a.get_long() == Some(long.as_str()))
            .filter(|_| !NOT_OPTIONS.contains(&long.as_str()));
        let Some(arg) = arg else {
            if let (Some(i), None, true) = (remote_at, value, opt.contains(':')) {
                flags[i].push(',');
                flags[i].push_str(opt);
                continue;
            }
            return Err(format!(
                "-o {opt}: unknown option (each `tiercache mount --NAME VALUE` is -o NAME=VALUE)"
            ));
        };
        let takes = arg.get_action().takes_values();
        let optional = arg.get_num_args().is_some_and(|n| n.min_values() == 0);
        remote_at = None;
        match (value, takes) {
            (Some(v), true) => {
                if long == "remote" {
                    remote_at = Some(flags.len());
                }
                flags.push(format!("--{long}={v}"));
            }
            (None, true) if optional => flags.push(format!("--{long}")),
            (None, true) => {
                let meta = arg
                    .get_value_names()
                    .and_then(|n| n.first())
                    .map_or("VALUE".to_string(), |n| n.to_string());
                return Err(format!("-o {opt}: needs a value ({name}={meta})"));
            }
            (Some(_), false) => return Err(format!("-o {opt}: takes no value (write -o {name})")),
            (None, false) => flags.push(format!("--{long}")),
        }
    }
    if !generic.is_empty() {
        flags.push(format!("--mount-flags={}", generic.join(",")));
    }
    Ok(flags)
}

/// Parses `--mount-flags` (`ro,noexec,...`; a later flag overrides an earlier one).
pub fn mount_flags(list: &str) -> Result<tiercache_fuse::MountFlags, String> {
    let mut f = tiercache_fuse::MountFlags::default();
    for flag in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        match flag {
            "ro" => f.read_only = true,
            "rw" => f.read_only = false,
            "dev" => f.dev = true,
            "nodev" => f.dev = false,
            "suid" => f.suid = true,
            "nosuid" => f.suid = false,
            "exec" => f.noexec = false,
            "noexec" => f.noexec = true,
            "atime" => f.noatime = false,
            "noatime" => f.noatime = true,
            "sync" => f.sync = true,
            "async" => f.sync = false,
            "dirsync" => f.dirsync = true,
            other => {
                return Err(format!(
                    "unknown mount flag `{other}` (expected {})",
                    MOUNT_FLAGS.join("|")
                ))
            }
        }
    }
    Ok(f)
}

/// Whether `mountpoint` is already a tiercache mount of `source`: `mount -a` runs every
/// fstab line again, and cannot tell ours are mounted (their source in the mount table
/// is `tiercache:BACKING`), so that is success, not an error.
pub fn already_mounted(source: &std::path::Path, mountpoint: &std::path::Path) -> bool {
    let Ok(backing) = std::fs::canonicalize(source) else {
        return false;
    };
    // Canonical without asking the mount itself (its daemon may hang).
    let mp = crate::live::control::canonical_mountpoint(mountpoint);
    super::mounts::mount_at(&mp)
        .is_some_and(|m| m.is_tiercache() && m.backing().as_deref() == Some(backing.as_path()))
}

/// An error of a mount made from `-o` options names the option as written there: `--memory:
/// ...` becomes `-o memory: ...`.
pub fn name_option(e: &str) -> String {
    match e.strip_prefix("--") {
        Some(rest) => format!("-o {rest}"),
        None => e.to_string(),
    }
}

/// A clap error of a rewritten command line as one line: the option the user wrote is named by
/// the `--NAME` clap names.
pub fn one_line(e: &clap::Error) -> String {
    let text = e.to_string();
    let first = text.lines().next().unwrap_or_default();
    let first = first.strip_prefix("error: ").unwrap_or(first);
    let name = match e.get(clap::error::ContextKind::InvalidArg) {
        Some(clap::error::ContextValue::String(arg)) => arg
            .split_whitespace()
            .next()
            .and_then(|a| a.strip_prefix("--"))
            .map(str::to_string),
        _ => None,
    };
    match name {
        Some(n) => format!("-o {n}: {first}"),
        None => format!("-o: {first}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{Arg, ArgAction, Command};

    fn cli() -> Command {
        Command::new("tiercache").subcommand(
            Command::new("mount")
                .arg(Arg::new("memory").long("memory"))
                .arg(Arg::new("remote").long("remote"))
                .arg(Arg::new("block-size").long("block-size"))
                .arg(
                    Arg::new("allow-other")
                        .long("allow-other")
                        .num_args(0..=1)
                        .default_missing_value("true"),
                )
                .arg(
                    Arg::new("foreground")
                        .long("foreground")
                        .action(ArgAction::SetTrue),
                ),
        )
    }

    fn run(args: &[&str]) -> Result<Vec<String>, String> {
        let argv = rewrite(&cli(), args.iter().map(|a| a.into()).collect())?;
        Ok(argv
            .args
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect())
    }

    #[test]
    fn options_become_flags_and_standard_ones_are_kept_or_ignored() {
        let got = run(&[
            "tc",
            "/s",
            "/m",
            "-o",
            "rw,memory=2G,block_size=8K,allow_other,noauto,x-systemd.automount,_netdev,nofail,\
             remote=memcached://a:1,b:2,dev,suid",
        ])
        .unwrap();
        assert_eq!(
            got,
            [
                "tc",
                "mount",
                "/s",
                "/m",
                "--memory=2G",
                "--block-size=8K",
                "--allow-other",
                "--remote=memcached://a:1,b:2",
                "--mount-flags=rw"
            ]
        );
        assert_eq!(run(&["tc", "mount", "/s", "/m"]).unwrap()[1], "mount");
        // A mistyped subcommand is left to clap (its tip names `mount`).
        assert_eq!(run(&["tc", "mout", "/s", "/m"]).unwrap()[1], "mout");
    }

    #[test]
    fn bad_options_are_named() {
        let e = run(&["tc", "/s", "/m", "-o", "memory=1G,bogus=1"]).unwrap_err();
        assert!(e.starts_with("-o bogus=1: unknown option"), "{e}");
        let e = run(&["tc", "/s", "/m", "-o", "foreground"]).unwrap_err();
        assert!(e.contains("-o foreground: unknown option"), "{e}");
        let e = run(&["tc", "/s", "/m", "-o", "memory"]).unwrap_err();
        assert!(e.contains("-o memory: needs a value"), "{e}");
        let e = run(&["tc", "/s", "-o", "memory=1G"]).unwrap_err();
        assert!(e.contains("got 1 path"), "{e}");
        let e = run(&["tc", "/s", "/m", "/x"]).unwrap_err();
        assert!(e.contains("got 3 path"), "{e}");
    }

    #[test]
    fn mount_flags_parse_and_later_ones_win() {
        let f = mount_flags("ro,dev,nosuid,noexec,rw").unwrap();
        assert!(!f.read_only && f.dev && !f.suid && f.noexec);
        assert!(mount_flags("ro,bogus").unwrap_err().contains("`bogus`"));
    }
}
