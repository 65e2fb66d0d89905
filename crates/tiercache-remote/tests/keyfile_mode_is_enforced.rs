//! The key file is created 0600, never overwritten, and refused when group/other may access
//! it, missing or malformed — each with an error naming the path.
#![allow(clippy::unwrap_used)]
use std::fs;
use std::os::unix::fs::PermissionsExt;
use tiercache_remote::{keyfile, RemoteError};

#[test]
fn generate_then_load_with_mode_checks() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("remote.key");
    let k = keyfile::generate(&path).unwrap();
    let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let text = fs::read_to_string(&path).unwrap();
    assert_eq!(text.len(), 65, "64 hex digits and a newline");
    assert_eq!(keyfile::load(&path).unwrap(), k);

    let again = keyfile::generate(&path).unwrap_err();
    assert!(again.to_string().contains("already exists"), "{again}");
    assert_eq!(keyfile::load(&path).unwrap(), k, "not overwritten");

    for bad in [0o640, 0o604, 0o660, 0o644, 0o700 | 0o007] {
        fs::set_permissions(&path, fs::Permissions::from_mode(bad)).unwrap();
        let e = keyfile::load(&path).unwrap_err();
        assert!(matches!(e, RemoteError::KeyFile { .. }));
        let msg = e.to_string();
        assert!(msg.contains(&path.display().to_string()), "{msg}");
        assert!(msg.contains("group/others"), "{msg}");
        assert!(!msg.contains('\n'), "one line: {msg}");
    }
    fs::set_permissions(&path, fs::Permissions::from_mode(0o400)).unwrap();
    assert_eq!(
        keyfile::load(&path).unwrap(),
        k,
        "read-only for the owner is fine"
    );
}

#[test]
fn missing_and_malformed_key_files_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope.key");
    let e = keyfile::load(&missing).unwrap_err();
    assert!(e.to_string().contains("nope.key"), "{e}");

    let bad = dir.path().join("bad.key");
    fs::write(&bad, "not a key\n").unwrap();
    fs::set_permissions(&bad, fs::Permissions::from_mode(0o600)).unwrap();
    let e = keyfile::load(&bad).unwrap_err();
    assert!(e.to_string().contains("malformed"), "{e}");
    assert!(e.to_string().contains("bad.key"), "{e}");
}

#[test]
fn two_generated_keys_differ() {
    let dir = tempfile::tempdir().unwrap();
    let a = keyfile::generate(&dir.path().join("a")).unwrap();
    let b = keyfile::generate(&dir.path().join("b")).unwrap();
    assert_ne!(a, b);
}
