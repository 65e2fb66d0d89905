//! Tests of how `mount`'s flags and config file become settings.

#![allow(clippy::unwrap_used)]
use super::*;
use crate::live::reload::ReloadError;
use clap::Parser;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    mount: MountArgs,
}

/// `tiercache mount --config FILE MOUNTPOINT` over a fresh BACKING and MOUNTPOINT.
fn args(dir: &Path, config: &Path) -> MountArgs {
    for d in ["b", "m"] {
        std::fs::create_dir_all(dir.join(d)).unwrap();
    }
    let (b, m) = (dir.join("b"), dir.join("m"));
    let argv = ["tiercache", "--config"]
        .map(std::ffi::OsStr::new)
        .into_iter()
        .chain([config.as_os_str(), b.as_os_str(), m.as_os_str()]);
    Cli::try_parse_from(argv).unwrap().mount
}

/// What a reload sees: a config file gone is an I/O error, a bad value in it a value error
/// naming where; both say the same lines as before.
#[test]
fn reload_tells_an_unreadable_file_from_a_bad_value() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("tc.toml");
    let a = args(dir.path(), &cfg);
    let reload = |a: &MountArgs| settings_at(a, true).map_err(ReloadError::Config);

    let gone = reload(&a).unwrap_err();
    let ReloadError::Config(e) = &gone else {
        panic!("not a config error: {gone:?}")
    };
    assert!(
        matches!(e.root(), ConfigError::Read { source, .. }
            if source.kind() == std::io::ErrorKind::NotFound),
        "{e:?}"
    );
    assert!(std::error::Error::source(e).is_some());
    assert_eq!(
        gone.to_string(),
        format!("{}: No such file or directory (os error 2)", cfg.display())
    );

    std::fs::write(&cfg, "memory = \"lots\"\n").unwrap();
    let bad = reload(&a).unwrap_err();
    let ReloadError::Config(e) = &bad else {
        panic!("not a config error: {bad:?}")
    };
    assert!(matches!(e.root(), ConfigError::Invalid(_)), "{e:?}");
    assert_eq!(
        bad.to_string(),
        format!(
            "memory ({}): `lots` is not a size (use e.g. 4096, 4K, 256M, 1G)",
            cfg.display()
        )
    );

    std::fs::write(&cfg, "memory = \"64M\"\ncolour = 1\n").unwrap();
    let e = settings_at(&a, true).unwrap_err();
    assert!(matches!(&e, ConfigError::Syntax { line: 2, .. }), "{e:?}");
    std::fs::write(&cfg, "memory = \"64M\"\n").unwrap();
    assert!(reload(&a).is_ok());
}

/// A BACKING that is a file, not a directory: the OS error kept, its number not shown.
#[test]
fn a_backing_that_is_no_directory_keeps_the_os_error() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("f");
    std::fs::write(&file, b"").unwrap();
    let e = check_dir("BACKING", &file).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!("BACKING {}: Not a directory", file.display())
    );
    let ConfigError::Dir { source, .. } = &e else {
        panic!("{e:?}")
    };
    assert_eq!(source.raw_os_error(), Some(libc::ENOTDIR));
}
