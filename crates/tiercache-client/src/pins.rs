//! [`PinCounts`]: how many references this process holds to each slot — the bookkeeping behind
//! a client's pin bits (one bit per slot in its pin area, set with the first reference and
//! cleared with the last).
//!
//! A table indexed by slot, in pages made on first use: counting a reference is two index
//! operations, no hashing, on the path every block of a read takes twice (pin and release).
//! Memory follows the slots this process has used: at most 4 bytes per slot of the cache,
//! in pages of [`PAGE`] slots kept until the client goes.

/// Slots per page of counters (16 KiB).
const PAGE: usize = 4096;

/// References per slot (see the module docs). Only slots a header validated are counted, so
/// every index is below the region's slot count.
#[derive(Debug, Default)]
pub(crate) struct PinCounts {
    pages: Vec<Option<Box<[u32]>>>,
    /// Slots with at least one reference.
    held: usize,
}

impl PinCounts {
    /// References to `slot` (0 if none).
    #[inline]
    pub(crate) fn get(&self, slot: u32) -> u32 {
        let (p, i) = split(slot);
        self.pages
            .get(p)
            .and_then(Option::as_ref)
            .map_or(0, |page| page[i])
    }

    /// One more reference to `slot`; whether it is the first (its pin bit was not ours yet).
    #[inline]
    pub(crate) fn add(&mut self, slot: u32) -> bool {
        let (p, i) = split(slot);
        if p >= self.pages.len() {
            self.pages.resize_with(p + 1, || None);
        }
        let page = self.pages[p].get_or_insert_with(|| vec![0; PAGE].into_boxed_slice());
        page[i] = page[i].saturating_add(1);
        let first = page[i] == 1;
        self.held += usize::from(first);
        first
    }

    /// One reference to `slot` fewer; whether it was the last (its pin bit goes now). A slot
    /// with no reference stays at none.
    #[inline]
    pub(crate) fn remove(&mut self, slot: u32) -> bool {
        let (p, i) = split(slot);
        let Some(page) = self.pages.get_mut(p).and_then(Option::as_mut) else {
            return false;
        };
        if page[i] == 0 {
            return false;
        }
        page[i] -= 1;
        let last = page[i] == 0;
        self.held -= usize::from(last);
        last
    }

    /// Slots with at least one reference.
    pub(crate) fn held(&self) -> usize {
        self.held
    }

    /// Forgets every reference; the slots that had any.
    pub(crate) fn take_all(&mut self) -> Vec<u32> {
        let mut slots = Vec::with_capacity(self.held);
        for (p, page) in std::mem::take(&mut self.pages).into_iter().enumerate() {
            let Some(page) = page else { continue };
            for (i, &refs) in page.iter().enumerate() {
                if refs > 0 {
                    // Below the region's slot count (module docs), so it fits in a u32.
                    slots.push(u32::try_from(p * PAGE + i).unwrap_or(u32::MAX));
                }
            }
        }
        self.held = 0;
        slots
    }
}

/// Page and index within it of `slot`.
#[inline]
fn split(slot: u32) -> (usize, usize) {
    let s = slot as usize;
    (s / PAGE, s % PAGE)
}

#[cfg(test)]
mod tests {
    use super::{PinCounts, PAGE};

    #[test]
    fn the_first_reference_and_the_last_are_told() {
        let mut c = PinCounts::default();
        let far = (3 * PAGE + 7) as u32;
        assert_eq!(c.get(far), 0);
        assert!(!c.remove(far), "nothing to drop: not the last");
        assert!(c.add(far), "first");
        assert!(!c.add(far), "second");
        assert!(c.add(5), "first of another slot, another page");
        assert_eq!((c.get(far), c.get(5), c.held()), (2, 1, 2));
        assert!(!c.remove(far));
        assert!(c.remove(far), "last");
        assert!(!c.remove(far), "none left");
        assert_eq!((c.get(far), c.held()), (0, 1));
        assert!(c.add(far), "first again");
        assert_eq!(c.take_all(), vec![5, far]);
        assert_eq!((c.get(far), c.get(5), c.held()), (0, 0, 0));
    }
}
