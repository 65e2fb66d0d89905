//! The mountinfo field decoder (`unescape_mountinfo`: mount points other users named, read
//! before every mount) fed arbitrary text: no panic, never longer than its input, and every
//! field the kernel escapes decodes to the name it escaped.
#![allow(clippy::unwrap_used)]

use proptest::prelude::*;
use tiercache_fuse::unescape_mountinfo;

/// A name as the kernel writes it in mountinfo: space, tab, newline and `\` as `\ooo`.
fn kernel_escape(name: &[u8]) -> String {
    let mut out = String::new();
    for &b in name {
        if matches!(b, b' ' | b'\t' | b'\n' | b'\\') {
            out.push_str(&format!("\\{b:03o}"));
        } else {
            out.push(char::from(b));
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Arbitrary text, and text dense in backslashes and digits (escapes cut short, above
    /// `\377`, at the very end).
    #[test]
    fn unescape_takes_arbitrary_text(
        any_text in ".{0,200}",
        escapes in "([\\\\0-9a ]{0,4}){0,30}",
    ) {
        for field in [any_text.as_str(), escapes.as_str()] {
            let out = unescape_mountinfo(field);
            prop_assert!(out.len() <= field.len());
        }
    }

    /// Every name of printable ASCII and the escaped bytes round trips.
    #[test]
    fn kernel_escaped_names_round_trip(name in prop::collection::vec(
        prop_oneof![0x20u8..0x7f, Just(b'\t'), Just(b'\n'), Just(b'\\')], 0..100)
    ) {
        prop_assert_eq!(unescape_mountinfo(kernel_escape(&name)), name);
    }
}
