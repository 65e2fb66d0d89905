//! Reuse distances over a stream of block accesses: for each access, the distinct blocks
//! touched since the previous access to the same block (Mattson's stack distance), in
//! amortized O(log n) per access, with forgetting by key and by age.
//!
//! Time is a counter of accesses; a tracked block has one *mark* at its last access time.
//! The distance of an access is the number of marks after the block's previous mark. Marks are
//! a bitmap with a count per word and a Fenwick tree per group of words; times are renumbered
//! (compacted) when they run out, once per `3 × tracked` accesses.
//!
//! Invariants: every tracked block has exactly one mark, at its last access; `live` is the
//! number of marks; the map holds every tracked block at its mark's time, plus blocks forgotten
//! as least recent since the last compaction, at unmarked times (times only grow between
//! compactions, so an unmarked time is never marked again before the next one).

use rustc_hash::FxHashMap;

/// A Fenwick (binary indexed) tree of counts: prefix sums and updates in O(log n).
#[derive(Debug)]
struct Fenwick {
    tree: Vec<u32>,
}

impl Fenwick {
    fn len(&self) -> usize {
        self.tree.len() - 1
    }

    /// A tree holding `counts`, built in O(n).
    fn from_counts(counts: &[u32]) -> Self {
        let len = counts.len();
        let mut tree = vec![0u32; len + 1];
        for i in 1..=len {
            tree[i] += counts[i - 1];
            let parent = i + (i & i.wrapping_neg());
            if parent <= len {
                tree[parent] += tree[i];
            }
        }
        Self { tree }
    }

    /// Adds `v` at position `i` (0-based).
    fn add(&mut self, i: usize, v: i32) {
        let mut i = i + 1;
        while i < self.tree.len() {
            self.tree[i] = self.tree[i].wrapping_add_signed(v);
            i += i & i.wrapping_neg();
        }
    }

    /// Sum of positions `0..i`.
    fn prefix(&self, i: usize) -> u64 {
        let mut i = i.min(self.len());
        let mut s = 0u64;
        while i > 0 {
            s += u64::from(self.tree[i]);
            i &= i - 1;
        }
        s
    }
}

/// Words of marks per group: a group's count is one Fenwick entry.
const GROUP: usize = 64;

/// 0/1 marks over access times, for counting the distinct blocks touched since a given time:
/// a bit per time, a count per 64-bit word, and a Fenwick tree of the counts per group of
/// [`GROUP`] words. Setting or clearing a mark touches one word, one count and a tree walk
/// over `len / 4096` entries (none to speak of at a sampler's size); a prefix is a tree walk,
/// a sum of at most `GROUP` byte counts (vectorized) and one popcount.
/// Invariants: `counts[w]` is the popcount of `bits[w]`; the tree's entry for group `g` is the
/// sum of its words' counts.
#[derive(Debug)]
struct Marks {
    bits: Vec<u64>,
    counts: Vec<u8>,
    groups: Fenwick,
}

impl Marks {
    fn with_len(n: usize) -> Self {
        Self::ones(0, n)
    }

    /// `len` positions (rounded up to whole groups of words), the first `ones` marked;
    /// O(len / 64).
    fn ones(ones: usize, len: usize) -> Self {
        let words = len.div_ceil(64 * GROUP).max(1) * GROUP;
        let mut bits = vec![0u64; words];
        let mut counts = vec![0u8; words];
        let mut groups = vec![0u32; words / GROUP];
        for (w, (b, c)) in bits.iter_mut().zip(&mut counts).enumerate() {
            let n = ones.saturating_sub(w * 64).min(64);
            *b = if n == 64 { u64::MAX } else { (1u64 << n) - 1 };
            *c = n as u8;
            groups[w / GROUP] += n as u32;
        }
        Self {
            bits,
            counts,
            groups: Fenwick::from_counts(&groups),
        }
    }

    fn len(&self) -> usize {
        self.bits.len() * 64
    }

    /// Marks position `i`, which is not marked.
    fn set(&mut self, i: usize) {
        let w = i / 64;
        debug_assert_eq!((self.bits[w] >> (i % 64)) & 1, 0, "mark {i} set twice");
        self.bits[w] |= 1 << (i % 64);
        self.counts[w] += 1;
        self.groups.add(w / GROUP, 1);
    }

    /// Unmarks position `i`, which is marked.
    fn clear(&mut self, i: usize) {
        let w = i / 64;
        debug_assert_eq!((self.bits[w] >> (i % 64)) & 1, 1, "mark {i} not set");
        self.bits[w] &= !(1 << (i % 64));
        self.counts[w] -= 1;
        self.groups.add(w / GROUP, -1);
    }

    fn is_set(&self, i: usize) -> bool {
        self.bits
            .get(i / 64)
            .is_some_and(|w| (w >> (i % 64)) & 1 == 1)
    }

    /// The first marked position at or after `i`, if any.
    fn first_from(&self, i: usize) -> Option<usize> {
        let mut w = i / 64;
        let mut word = self.bits.get(w)? & (u64::MAX << (i % 64));
        while word == 0 {
            w += 1;
            word = *self.bits.get(w)?;
        }
        Some(w * 64 + word.trailing_zeros() as usize)
    }

    /// Marks at positions `0..i`.
    fn prefix(&self, i: usize) -> u64 {
        let i = i.min(self.len());
        let (w, b) = (i / 64, i % 64);
        let partial = match self.bits.get(w) {
            Some(&word) if b > 0 => u64::from((word & ((1u64 << b) - 1)).count_ones()),
            _ => 0,
        };
        let g = w / GROUP;
        let within: u32 = self.counts[g * GROUP..w]
            .iter()
            .map(|&c| u32::from(c))
            .sum();
        self.groups.prefix(g) + u64::from(within) + partial
    }
}

/// Reuse distances of the accesses it is given, over the blocks it tracks.
#[derive(Debug)]
pub(super) struct ReuseTracker {
    /// Each tracked block's last access time (its one live mark in `marks`), and blocks
    /// forgotten as least recent since the last compaction, whose time is no longer marked
    /// (dropped at the next compaction: a removal per forget would cost a second hash probe
    /// on the sampled path).
    last: FxHashMap<u64, usize>,
    marks: Marks,
    /// Marks set: the blocks tracked.
    live: usize,
    /// The next access time; `<= marks.len()` (compacted at the next access when equal).
    /// Times only grow between compactions, so an unmarked time is never marked again
    /// before the next one: an entry of `last` at an unmarked time is a forgotten block.
    now: usize,
    /// No mark lies before it (`<= now`): the least recent block is found by scanning
    /// forward from here, amortized O(1).
    oldest: usize,
}

// Every tracked block has exactly one mark, so the marks number `live`: a reuse distance is
// that count less the marks up to the previous access (one tree query, not two).

impl ReuseTracker {
    pub(super) fn new() -> Self {
        Self::with_capacity(0)
    }

    /// Room for `blocks` tracked blocks without rehashing.
    pub(super) fn with_capacity(blocks: usize) -> Self {
        let marks = Marks::with_len((blocks * 4).max(1024));
        Self {
            last: FxHashMap::with_capacity_and_hasher(blocks, Default::default()),
            marks,
            live: 0,
            now: 0,
            oldest: 0,
        }
    }

    /// Records an access to `key`: `Some(d)` with `d` distinct tracked blocks touched since its
    /// previous access, or `None` for its first since tracked (a cold miss).
    #[inline]
    pub(super) fn access(&mut self, key: u64) -> Option<u64> {
        if self.now == self.marks.len() {
            self.compact();
        }
        let t = self.now;
        self.now += 1;
        let prev = self.last.insert(key, t).filter(|&p| self.marks.is_set(p));
        let d = match prev {
            // All marks lie before `t`: those after `p` were touched since.
            Some(p) => {
                let since = self.live as u64 - self.marks.prefix(p + 1);
                self.marks.clear(p);
                Some(since)
            }
            None => {
                self.live += 1;
                None
            }
        };
        self.marks.set(t);
        d
    }

    /// Stops tracking the least recently accessed block (LRU order: every block accessed since
    /// is still tracked, so the distances of those that stay are unchanged).
    pub(super) fn forget_oldest(&mut self) {
        if let Some(t) = self.marks.first_from(self.oldest) {
            self.oldest = t + 1;
            self.marks.clear(t);
            self.live -= 1;
        }
    }

    /// Stops tracking `key`.
    pub(super) fn forget(&mut self, key: u64) {
        if let Some(p) = self.last.remove(&key) {
            if self.marks.is_set(p) {
                self.marks.clear(p);
                self.live -= 1;
            }
        }
    }

    /// Renumbers the live marks 0.. in time order, into new marks with room to grow, and drops
    /// forgotten blocks: O(n) in the old length (a rank per mark from a running count per
    /// word, no sort; the new tree built in one pass), once per `3 × live` accesses, so
    /// amortized O(1) per access; memory proportional to the tracked blocks.
    fn compact(&mut self) {
        let mut before = Vec::with_capacity(self.marks.bits.len());
        let mut n = 0usize;
        for w in &self.marks.bits {
            before.push(n);
            n += w.count_ones() as usize;
        }
        debug_assert_eq!(n, self.live);
        let old = &self.marks;
        self.last.retain(|_, t| old.is_set(*t));
        let rank = |t: usize| {
            let (w, b) = (t / 64, t % 64);
            before[w] + (old.bits[w] & ((1u64 << b) - 1)).count_ones() as usize
        };
        for t in self.last.values_mut() {
            *t = rank(*t);
        }
        self.marks = Marks::ones(n, (n * 4).max(1024));
        self.now = n;
        self.oldest = 0;
    }

    pub(super) fn tracked(&self) -> usize {
        self.live
    }

    /// Room for `entries` in the map without rehashing.
    pub(super) fn reserve(&mut self, entries: usize) {
        self.last.reserve(entries.saturating_sub(self.last.len()));
    }

    /// The blocks tracked now, in no particular order.
    pub(super) fn tracked_keys(&self) -> impl Iterator<Item = u64> + '_ {
        self.last
            .iter()
            .filter(|&(_, &t)| self.marks.is_set(t))
            .map(|(&k, _)| k)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn reuse_distance_counts_distinct_blocks_in_between() {
        let mut t = ReuseTracker::new();
        assert_eq!(t.access(1), None);
        assert_eq!(t.access(2), None);
        assert_eq!(t.access(2), Some(0));
        assert_eq!(t.access(3), None);
        // 2 and 3 were touched since 1's last access; 2 twice counts once.
        assert_eq!(t.access(1), Some(2));
        assert_eq!(t.access(3), Some(1));
    }

    #[test]
    fn marks_built_whole_count_as_marks_set_one_by_one() {
        for (ones, len) in [(0, 1), (1, 1), (5, 8), (64, 64), (65, 200), (1000, 4096)] {
            let fast = Marks::ones(ones, len);
            let mut slow = Marks::with_len(len);
            (0..ones).for_each(|i| slow.set(i));
            assert_eq!(fast.bits, slow.bits, "{ones} of {len}");
            assert_eq!(fast.counts, slow.counts, "{ones} of {len}");
            assert_eq!(fast.groups.tree, slow.groups.tree, "{ones} of {len}");
            for i in [0, 1, ones / 2, ones, len] {
                assert_eq!(
                    fast.prefix(i),
                    i.min(ones) as u64,
                    "prefix {i}, {ones} of {len}"
                );
            }
        }
    }

    #[derive(Debug, Clone)]
    enum Op {
        Access(u64),
        Forget(u64),
        ForgetOldest,
    }

    proptest! {
        /// The tracker against an LRU stack kept by brute force, through compactions (it
        /// starts at its smallest size), forgets by key and by age.
        #[test]
        fn tracker_is_an_lru_stack(ops in prop::collection::vec(
            prop_oneof![
                8 => (0u64..300).prop_map(Op::Access),
                1 => (0u64..300).prop_map(Op::Forget),
                2 => Just(Op::ForgetOldest),
            ],
            1..5000,
        )) {
            let mut t = ReuseTracker::new();
            let mut stack: Vec<u64> = Vec::new(); // least recent first
            for op in ops {
                match op {
                    Op::Access(k) => {
                        let want = stack.iter().position(|&x| x == k).map(|i| {
                            stack.remove(i);
                            (stack.len() - i) as u64
                        });
                        stack.push(k);
                        prop_assert_eq!(t.access(k), want);
                    }
                    Op::Forget(k) => {
                        stack.retain(|&x| x != k);
                        t.forget(k);
                    }
                    Op::ForgetOldest => {
                        if !stack.is_empty() {
                            stack.remove(0);
                        }
                        t.forget_oldest();
                    }
                }
                prop_assert_eq!(t.tracked(), stack.len());
            }
            let mut keys: Vec<u64> = t.tracked_keys().collect();
            keys.sort_unstable();
            stack.sort_unstable();
            prop_assert_eq!(keys, stack);
        }
    }

    #[test]
    fn compaction_keeps_distances() {
        let mut t = ReuseTracker::new();
        // No compaction within the test: marks for 4 × 2^14 accesses.
        let mut m = ReuseTracker::with_capacity(1 << 14);
        for i in 0..5000u64 {
            let k = (i * 7919) % 37;
            assert_eq!(t.access(k), m.access(k), "access {i}");
        }
    }

    #[test]
    fn compaction_keeps_distances_with_blocks_forgotten() {
        let mut t = ReuseTracker::new();
        let mut m = ReuseTracker::with_capacity(1 << 18);
        let mut x = 12345u64;
        for i in 0..200_000u64 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let k = (x >> 33) % 3000;
            if i % 7 == 0 {
                t.forget(k);
                m.forget(k);
            } else {
                assert_eq!(t.access(k), m.access(k), "access {i}");
            }
        }
        assert_eq!(t.tracked(), m.tracked());
    }
}
