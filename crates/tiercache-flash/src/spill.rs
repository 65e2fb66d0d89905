//! Spilling: the clean blocks of a set dropped to reuse it for a clean store
//! (a clean `DataTier::store` that may spill) are read back from the device and handed to
//! the tier's spill hook, so the manager can demote them into the tier below.
//!
//! Invariant: a block is handed over only with the bytes the device returned for its slot,
//! read under the tier's lock before the set is dropped (nothing can overwrite them
//! meanwhile), and only if they pass its checksum; a run of blocks that cannot be read, or a
//! block that fails its checksum, is dropped unspilled (and counted as a device error), never
//! handed over with other bytes.

use crate::sums::Checked;
use crate::tier::{FlashTier, State};
use tiercache_core::Class;
use tiercache_tier::{SpillSink, Spilled, TierKey};

impl FlashTier {
    /// Hands the clean blocks of set `id`, about to be dropped for reuse, to `spill`: read in
    /// runs of adjacent blocks, with the set's tag and version. The flash tier keeps no class
    /// per block: they go as `Normal`.
    pub(crate) fn spill_set(&self, st: &mut State, id: u32, spill: &dyn SpillSink) {
        let bs = self.geo.block_size();
        let n = self.geo.set_blocks();
        let m = st.idx.sets[id as usize];
        let clean = |st: &State, b: usize| st.idx.is_valid(id, b) && !st.idx.is_dirty(id, b);
        let mut buf = Vec::new();
        let mut b = 0;
        while b < n {
            if !clean(st, b) {
                b += 1;
                continue;
            }
            let mut end = b + 1;
            while end < n && clean(st, end) {
                end += 1;
            }
            buf.resize((end - b) * bs, 0);
            match self.dev.read_at(&mut buf, self.geo.block_off(id, b)) {
                Ok(()) => {
                    for (i, read) in buf.chunks_exact(bs).enumerate() {
                        // Parked bytes are the newest (the device's are older).
                        let parked = Self::parked(st, id, b + i).map(|d| d.to_vec());
                        let good = parked.is_some()
                            || matches!(self.check_sum(st, id, b + i, read), Ok(Checked::Good));
                        if !good {
                            continue;
                        }
                        let data = parked.as_deref().unwrap_or(read);
                        let block = (m.set_index << self.geo.set_shift) | (b + i) as u64;
                        spill.spill(Spilled {
                            key: TierKey::new(m.file, block),
                            version: m.version,
                            class: Class::NORMAL,
                            data,
                        });
                    }
                }
                Err(e) => {
                    let e = self.fail(st, e);
                    log::warn!("{e}; {} clean blocks dropped without spilling", end - b);
                }
            }
            b = end;
        }
    }
}
