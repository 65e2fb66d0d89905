//! [`FlashStats`]: the flash tier's counters for `stats --json` (`flash.*`), and the
//! occupancy figures the cleaner and the manager read.

use crate::cleaner::CleanerState;
use crate::tier::FlashTier;
use serde::Serialize;

/// Flash-specific counters for `stats --json` (`flash.*`; the field names are the JSON keys).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct FlashStats {
    /// The cleaner's state: `"normal"`, `"wait"` or `"writeback"`.
    pub state: CleanerState,
    pub sets: u32,
    /// Sets holding no dirty block (unmapped, or reusable at once): what the cleaner keeps
    /// at or above its floor.
    pub free_sets: u32,
    /// The cleaner's floor for `free_sets`.
    pub free_floor: u32,
    /// Unmapped sets (a subset of `free_sets`).
    pub unmapped_sets: u32,
    pub dirty_sets: u32,
    pub valid_blocks: u64,
    pub dirty_blocks: u64,
    pub bytes_cleaned: u64,
    /// Times the cleaning advice said `Bypass` (no free set, or detaching).
    pub bypassed: u64,
    /// Index RAM and the checksum-table cache (by capacity) / capacity in blocks.
    pub ram_bytes_per_block: f64,
    /// Too many device errors (or tainted): reads miss, stores are turned down, the manager
    /// cleans what it can read and detaches (`DataTier::detaching`).
    pub degraded: bool,
    /// A device sync or a drop's record failed: `sync()` fails for good (see the module docs).
    pub tainted: bool,
    pub errors: u64,
    /// Stores turned down because the set holds dirty blocks of another content version.
    pub version_conflicts: u64,
    /// Files whose meta (size, mtime, handle) is kept in RAM and on the device.
    pub files_with_meta: u64,
    /// Found at the last open: record slots that were torn or damaged.
    pub torn_records: u32,
    /// Found at the last open: dirty blocks recovered (to be cleaned).
    pub recovered_dirty_blocks: u64,
    /// Found at the last open: files holding dirty blocks (`recovered_files`).
    pub recovered_files: u64,
    /// Whether the last open found a clean shutdown (warm restart).
    pub opened_clean: bool,
    /// Blocks read back from the device with other bytes than were written there (bit rot, a
    /// torn, lost or misdirected write): a clean one was dropped (read from BACKING instead),
    /// a dirty one failed with an I/O error. Also counted in `errors`.
    pub checksum_errors: u64,
    /// Found at the last open (after a crash): dirty blocks whose overwrite in place may have
    /// been under way, taken as they are (each sector old or new bytes) without a check.
    pub unverified_blocks: u64,
    /// Dirty stores over a block the device held dirty without its in-place bit, parked in
    /// RAM until the next sync (`crate::park`).
    pub parked_blocks: u64,
    /// Records written (and synced) by syncs to set the in-place bits of parked blocks.
    pub in_place_records: u64,
    pub record_writes: u64,
    pub device_syncs: u64,
}

impl FlashTier {
    /// Flash counters (`stats --json` `flash.*`).
    pub fn flash_stats(&self) -> FlashStats {
        let st = self.st();
        let mut f = st.fs.clone();
        f.state = st.cleaner.state();
        f.sets = self.geo.sets;
        f.free_sets = self.geo.sets - st.idx.dirty_sets;
        f.free_floor = self.cfg.cleaner.free_floor;
        f.unmapped_sets = st.idx.free.len() as u32;
        f.dirty_sets = st.idx.dirty_sets;
        f.valid_blocks = st.idx.valid_blocks;
        f.dirty_blocks = st.idx.dirty_blocks;
        f.bypassed = st.bypassed;
        f.files_with_meta = Self::files_with_meta(&st);
        f.recovered_files = st.recovered.len() as u64;
        f.ram_bytes_per_block =
            (st.idx.ram_bytes() + st.sums.ram_bytes()) as f64 / self.geo.capacity_blocks() as f64;
        f
    }

    /// Index RAM per cached block (by allocated capacity, hash table and lists included, and
    /// the cache of checksum tables).
    pub fn ram_bytes_per_block(&self) -> f64 {
        let st = self.st();
        (st.idx.ram_bytes() + st.sums.ram_bytes()) as f64 / self.geo.capacity_blocks() as f64
    }

    /// Sets that hold no dirty block (free, or reusable at once): the cleaner's "free sets".
    pub fn reclaimable_sets(&self) -> u32 {
        self.geo.sets - self.st().idx.dirty_sets
    }

    /// Dirty blocks / capacity.
    pub fn dirty_fraction(&self) -> f64 {
        self.st().idx.dirty_blocks as f64 / self.geo.capacity_blocks() as f64
    }
}
