//! `tiercache flash check PATH [--json]`: verifies an SSD-tier cache file or device (the
//! `tiercache-flash` format, `docs/design.md` §6) without changing it, and reports what a
//! mount would find there.
//!
//! Every block a mount would use is read and checked against its checksum (format 3):
//! `corrupt_blocks` counts those that fail; `unverified_blocks` those that cannot be checked
//! (after a crash, dirty blocks an overwrite in place may have been cut in). A cache of
//! format 2 (no checksums; a mount upgrades it) is reported from its records.
//!
//! Exit status: 0 when the cache is consistent (torn record slots are expected after a crash
//! and are recovered from); 1 when it is not a tiercache flash cache, cannot be read, its
//! records contradict each other (duplicate tags, dirty bits that are not valid, stray bits),
//! or some block fails its checksum.

use clap::{Args, Subcommand};
use std::path::PathBuf;
use std::sync::Arc;
use tiercache_flash::device::check_private;
use tiercache_flash::format::{FORMAT_VERSION, UPGRADABLE_VERSION};
use tiercache_flash::{FileDevice, FlashError, FlashTier, LegacyTier};

#[derive(Subcommand, Debug)]
pub enum FlashCommand {
    /// Verify a cache file or device and report valid and dirty blocks (changes nothing).
    Check(CheckArgs),
}

#[derive(Args, Debug)]
pub struct CheckArgs {
    /// The cache file or block device.
    pub path: PathBuf,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn run(cmd: FlashCommand) -> Result<(), String> {
    match cmd {
        FlashCommand::Check(a) => check(&a),
    }
}

fn check(a: &CheckArgs) -> Result<(), String> {
    let at = a.path.display();
    if a.path.symlink_metadata().is_err() {
        return Err(format!("{at}: no such file or device"));
    }
    // Read only and never through a symlink; an owner or mode a mount would refuse is only
    // warned about here (reading changes nothing).
    let dev = Arc::new(FileDevice::open_read_only(&a.path).map_err(|e| format!("{at}: {e}"))?);
    let r = match FlashTier::check(dev.as_ref()) {
        Err(FlashError::FormatVersion { found }) if found == UPGRADABLE_VERSION => {
            LegacyTier::open(dev.clone(), "flash")
                .map_err(|e| format!("{at}: {e}"))?
                .check_report()
        }
        r => r.map_err(|e| format!("{at}: {e}"))?,
    };
    if let Err(why) = dev
        .metadata()
        .map_err(|e| e.to_string())
        .and_then(|m| check_private(&m, &a.path).map_err(|e| e.to_string()))
    {
        eprintln!("warning: {at}: a mount would refuse it: {why}");
    }
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&r).map_err(|e| e.to_string())?
        );
    } else {
        println!(
            "{at}: tiercache flash cache, format {}, {} sets of {} blocks of {} B ({} mapped)",
            r.format_version, r.sets, r.set_blocks, r.block_size, r.mapped_sets
        );
        println!(
            "  {} valid blocks, {} dirty (newer than BACKING), {} usable by the next mount ({})",
            r.valid_blocks,
            r.dirty_blocks,
            r.usable_blocks,
            if r.clean_shutdown {
                "clean shutdown: every valid block"
            } else {
                "not shut down cleanly: dirty blocks only"
            }
        );
        println!(
            "  superblock copies valid: {} of 2; torn record slots: {}; sets without a record: {}",
            r.superblocks_valid, r.torn_records, r.sets_without_record
        );
        if r.format_version == UPGRADABLE_VERSION {
            println!(
                "  format 2 (an older tiercache, no block checksums): the next mount writes its \
                 dirty blocks back to BACKING, then reformats it as format {FORMAT_VERSION}"
            );
        } else {
            println!(
                "  blocks failing their checksum: {}; unverified (an overwrite cut by a crash): {}",
                r.corrupt_blocks, r.unverified_blocks
            );
        }
    }
    if r.corrupt_blocks > 0 {
        return Err(format!(
            "{at}: {} blocks fail their checksum (bit rot, or a torn, lost or misdirected \
             write): a mount reads clean ones from BACKING and fails dirty ones with EIO",
            r.corrupt_blocks
        ));
    }
    let bad = r.duplicate_tags + r.dirty_not_valid + r.stray_bits;
    if bad > 0 {
        return Err(format!(
            "{at}: inconsistent records: {} duplicate tags, {} with dirty bits not valid, {} \
             with stray bits",
            r.duplicate_tags, r.dirty_not_valid, r.stray_bits
        ));
    }
    Ok(())
}
