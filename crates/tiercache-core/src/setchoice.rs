//! The set choice of a set-mapped tier: which cache set a block of an unmapped backing set
//! takes. One rule for the SSD tier (`tiercache-flash`, which then does the I/O) and the
//! simulator's [`crate::setindex::SetIndex`] (which replays it on metadata), so that `sim`
//! makes the set choices the mount makes.
//!
//! Rule: a free set if there is one; else the least recently used mapped set without dirty
//! blocks among the `scan` coldest, the sets passed over keeping their places (a dirty set
//! stays cold, so it is the first candidate again once cleaned); else none (the store is
//! refused or retried). Only decides: the caller drops the victim's blocks and maps it.

/// How many mapped sets, from the cold end, a set choice looks at (the SSD tier's
/// `FlashConfig::alloc_scan` default).
pub const DEFAULT_ALLOC_SCAN: usize = 64;

/// The decision of [`choose_set`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetChoice {
    /// Take a set from the free list.
    Free,
    /// Reuse this mapped set: drop its (clean) blocks, unmap it, then take it.
    Reuse(u32),
    /// No free set and none of the scanned sets is clean.
    Full,
}

/// Decides where a newly mapped backing set goes. `coldest_first`: the mapped sets from the
/// least recently used end; `dirty(set)`: the set holds a dirty block. Looks at no more than
/// `scan` sets and reorders nothing.
#[inline]
pub fn choose_set(
    has_free: bool,
    coldest_first: impl Iterator<Item = u32>,
    scan: usize,
    mut dirty: impl FnMut(u32) -> bool,
) -> SetChoice {
    if has_free {
        return SetChoice::Free;
    }
    match coldest_first.take(scan).find(|&s| !dirty(s)) {
        Some(s) => SetChoice::Reuse(s),
        None => SetChoice::Full,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_first_then_the_coldest_clean_set_within_the_scan() {
        let cold = [4u32, 7, 2, 9];
        let dirty = |s: u32| s == 4 || s == 7;
        assert_eq!(
            choose_set(true, cold.into_iter(), 64, dirty),
            SetChoice::Free
        );
        assert_eq!(
            choose_set(false, cold.into_iter(), 64, dirty),
            SetChoice::Reuse(2)
        );
        assert_eq!(
            choose_set(false, cold.into_iter(), 2, dirty),
            SetChoice::Full
        );
        assert_eq!(
            choose_set(false, [].into_iter(), 64, dirty),
            SetChoice::Full
        );
    }
}
