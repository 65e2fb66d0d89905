//! There was no package: `scripts/package.sh` builds a Debian package with the binary, the C
//! library and header, man pages and shell completions generated from the CLI, the systemd
//! units, the Grafana dashboard and the alert rules. Unpacked into a scratch root
//! (`dpkg -x`), its `tiercache --version` runs and every part is where Debian expects it.
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::process::Command;

#[test]
fn the_package_unpacks_into_a_scratch_root_and_runs() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = tempfile::tempdir().unwrap();
    // What this test binary's build made (target/release): no second cargo build here.
    let built = Command::new(repo.join("scripts/package.sh"))
        .args(["--no-build", "--out"])
        .arg(out.path())
        .arg("--release-dir")
        .arg(Path::new(env!("CARGO_BIN_EXE_tiercache")).parent().unwrap())
        .output()
        .unwrap();
    assert!(
        built.status.success(),
        "package.sh: {}",
        String::from_utf8_lossy(&built.stderr)
    );
    let deb = String::from_utf8(built.stdout).unwrap().trim().to_string();
    assert!(deb.ends_with(".deb") && Path::new(&deb).is_file(), "{deb}");
    let root = tempfile::tempdir().unwrap();
    let x = Command::new("dpkg")
        .arg("-x")
        .arg(&deb)
        .arg(root.path())
        .status()
        .unwrap();
    assert!(x.success());
    let r = root.path();
    let v = Command::new(r.join("usr/bin/tiercache"))
        .arg("--version")
        .output()
        .unwrap();
    assert!(v.status.success());
    let version = String::from_utf8(v.stdout).unwrap();
    assert_eq!(
        version.trim(),
        format!("tiercache {}", env!("CARGO_PKG_VERSION"))
    );
    // The package's own version is the binary's.
    let field = Command::new("dpkg-deb")
        .args(["-f", &deb, "Version"])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8(field.stdout).unwrap().trim(),
        env!("CARGO_PKG_VERSION")
    );
    let lib = std::fs::read_dir(r.join("usr/lib"))
        .unwrap()
        .flatten()
        .map(|d| d.path())
        .find_map(|d| {
            let so = if d.is_dir() {
                d.join("libtiercache_capi.so")
            } else {
                d
            };
            (so.ends_with("libtiercache_capi.so") && so.is_file()).then_some(so)
        })
        .expect("libtiercache_capi.so under usr/lib (or its multiarch directory)");
    assert!(lib.is_file(), "{}", lib.display());
    for f in [
        "usr/include/tiercache.h",
        "usr/share/man/man1/tiercache.1.gz",
        "usr/share/man/man1/tiercache-mount.1.gz",
        "usr/share/man/man1/tiercache-reload.1.gz",
        "usr/share/bash-completion/completions/tiercache",
        "usr/share/zsh/vendor-completions/_tiercache",
        "usr/share/fish/vendor_completions.d/tiercache.fish",
        "usr/share/tiercache/grafana/tiercache.json",
        "usr/lib/systemd/system/tiercache@.service",
        "usr/share/tiercache/prometheus/tiercache-rules.yml",
    ] {
        let p = r.join(f);
        assert!(
            p.is_file() && p.metadata().unwrap().len() > 0,
            "{f} missing"
        );
    }
    let header = std::fs::read_to_string(r.join("usr/include/tiercache.h")).unwrap();
    assert!(header.contains("TIERCACHE_H"), "{header}");
    let bash =
        std::fs::read_to_string(r.join("usr/share/bash-completion/completions/tiercache")).unwrap();
    assert!(
        bash.contains("reload") && bash.contains("--config"),
        "{bash}"
    );
    // The man page is troff that names the command's flags.
    let man = Command::new("sh")
        .arg("-c")
        .arg("gzip -dc \"$0\"")
        .arg(r.join("usr/share/man/man1/tiercache-mount.1.gz"))
        .output()
        .unwrap();
    let man = String::from_utf8(man.stdout).unwrap();
    assert!(man.starts_with(".ie") || man.contains(".TH"), "{man}");
    assert!(man.contains("config"), "{man}");
    // Every systemd unit in the repository is in the package.
    let units = repo.join("packaging/systemd");
    if let Ok(dir) = std::fs::read_dir(&units) {
        for u in dir.flatten().filter(|u| u.path().is_file()) {
            let p = r.join("usr/lib/systemd/system").join(u.file_name());
            assert!(p.is_file(), "{} not packaged", u.path().display());
        }
    }
}
