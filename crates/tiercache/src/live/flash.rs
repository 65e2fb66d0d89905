//! The SSD tier of a mount: opened (or created) from its [`FlashSpec`], its dirty blocks from
//! before a restart written to BACKING before the mount is served, closed cleanly at the end,
//! and its `stats --json` `flash` object and `flash_*` metrics.

use super::config::LowerTierSpec;
use super::config_flash::{CleanerKind, FlashMode, FlashSpec};
use super::error::DaemonError;
use serde_json::{json, Value};
use std::path::Path;
use std::sync::Arc;
use tiercache_flash::format::UPGRADABLE_VERSION;
use tiercache_flash::{
    CleanerConfig, CleanerMode, FileDevice, FlashConfig, FlashDevice, FlashError, FlashTier,
    Geometry, IoChoice, IoMode, LegacyTier,
};
use tiercache_manager::{LowerTier, RecoveryReport};
use tiercache_tier::DataTier;

/// Blocks per set (2^8 = 256: 1 MiB sets of 4 KiB blocks, as in paper 001).
const SET_SHIFT: u8 = 8;

/// A flash tier of the mount. Its device holds an exclusive `flock` on the cache file or
/// device while the tier lives (two daemons on one cache would corrupt it).
#[derive(Debug, Clone)]
pub struct MountedFlash {
    pub tier: Arc<FlashTier>,
    pub spec: FlashSpec,
    pub recovery: RecoveryReport,
    /// How the cache file is read and written (`stats`: `flash.io_mode`).
    pub io_mode: IoMode,
}

/// Checks that BACKING can reopen files by handle (a write-back tier needs it to find the
/// files of its dirty blocks after a crash).
fn check_handles(backing: &Path) -> Result<(), DaemonError> {
    let root = std::fs::File::open(backing)
        .map_err(|e| DaemonError::io(backing.display().to_string(), e))?;
    let h = tiercache_manager::handle::file_handle(&root).map_err(|source| {
        DaemonError::NoFileHandles {
            backing: backing.to_path_buf(),
            source,
        }
    })?;
    tiercache_manager::handle::open_by_handle(&root, &h, libc::O_RDONLY | libc::O_DIRECTORY)
        .map_err(|source| DaemonError::NoOpenByHandle {
            backing: backing.to_path_buf(),
            source,
        })?;
    Ok(())
}

/// Opens the cache at `f.path` (never through a symlink; refused unless private to the
/// daemon's user or root, see `FileDevice`), locked for the mount: an existing tiercache flash
/// cache is opened (its own size wins; a different SIZE is an error), a missing file or an
/// empty one is created with SIZE (mode 0600), a block device whose first 128 KiB are zero is
/// formatted, a cache of format 2 is upgraded (see [`upgrade`]), anything else is refused
/// rather than overwritten. `cfg` gets the cleaner's floor once the number of sets is known.
/// Returns the tier, what was done, what an upgrade's recovery did, and the I/O mode.
fn open_device(
    f: &FlashSpec,
    mut cfg: FlashConfig,
    backing: &Path,
    device: &dyn tiercache_manager::BackingIo,
) -> Result<(FlashTier, &'static str, Option<RecoveryReport>, IoMode), DaemonError> {
    let at = f.path.display();
    let (dev, fresh) = FileDevice::open_locked(&f.path, f.size, f.io).map_err(|e| {
        if f.size.is_none() && e.kind() == std::io::ErrorKind::NotFound {
            DaemonError::refused(format!(
                "{at}: no cache there yet; give its size to create it (--flash {at}:SIZE, or \
                 `size`)"
            ))
        } else if e.kind() == std::io::ErrorKind::Unsupported && f.io != IoChoice::Auto {
            DaemonError::io(format!("{at}: --flash-io (`io`)"), e)
        } else {
            DaemonError::io(at.to_string(), e)
        }
    })?;
    let io = dev.io_mode();
    for why in dev.io_skipped() {
        log::info!("flash cache {at}: I/O mode {why}");
    }
    let regular = dev.metadata().is_ok_and(|m| m.is_file());
    if !fresh {
        // A block device is formatted when it holds nothing yet (its first 128 KiB zero,
        // `open_or_create`); a regular file only when new or empty.
        if regular && !tiercache_flash::is_formatted(&dev) {
            return Err(DaemonError::refused(format!(
                "{at}: exists and is not a tiercache flash cache; refusing to overwrite it \
                 (remove it, or give a new path)"
            )));
        }
        if let Some(size) = f.size.filter(|&s| s != dev.len()) {
            return Err(DaemonError::refused(format!(
                "{at}: a flash cache of {} bytes already; it keeps its size (asked for {size}): \
                 drop SIZE, or remove the file to make a new cache",
                dev.len()
            )));
        }
    }
    let geo = Geometry::compute(dev.len(), dev.sector_size(), cfg.block_shift, cfg.set_shift)
        .map_err(|source| DaemonError::Flash {
            what: format!("{at}: {} bytes", dev.len()),
            source,
        })?;
    cfg.cleaner.free_floor = f.free_floor.sets(geo.sets);
    let dev: Arc<dyn FlashDevice> = Arc::new(dev);
    if fresh {
        let t = FlashTier::create(dev, cfg).map_err(|source| DaemonError::Flash {
            what: at.to_string(),
            source,
        })?;
        return Ok((t, "created", None, io));
    }
    match FlashTier::open_or_create(dev.clone(), cfg.clone()) {
        Ok((t, created)) => Ok((t, if created { "created" } else { "opened" }, None, io)),
        Err(FlashError::FormatVersion { found }) if found == UPGRADABLE_VERSION => {
            let (t, report) = upgrade(f, dev, cfg, backing, device)?;
            Ok((t, "upgraded from format 2", Some(report), io))
        }
        Err(FlashError::NotFormatted(_)) => Err(DaemonError::refused(format!(
            "{at}: holds other data and is not a tiercache flash cache; refusing to overwrite \
             it (to use the device as a cache, zero its first 128 KiB)"
        ))),
        Err(source) => Err(DaemonError::Flash {
            what: at.to_string(),
            source,
        }),
    }
}

/// Upgrades a cache of format 2 (before block checksums): its dirty blocks — the only copy
/// of acknowledged writes — are written back to BACKING by the same recovery as after a
/// crash; only when that succeeded is the device reformatted as format 3 (its clean blocks
/// are lost: a cold cache). If recovery cannot write them all, the mount is refused and the
/// device is left as it was, so nothing acknowledged is ever discarded.
fn upgrade(
    f: &FlashSpec,
    dev: Arc<dyn FlashDevice>,
    cfg: FlashConfig,
    backing: &Path,
    device: &dyn tiercache_manager::BackingIo,
) -> Result<(FlashTier, RecoveryReport), DaemonError> {
    let at = f.path.display();
    let old = LegacyTier::open(dev.clone(), &cfg.name).map_err(|source| DaemonError::Flash {
        what: at.to_string(),
        source,
    })?;
    log::warn!(
        "{at}: a flash cache of format 2 (an older tiercache): writing its {} dirty blocks to \
         BACKING, then reformatting it as format 3",
        old.dirty_left()
    );
    let report = tiercache_manager::clean_recovered(&old, backing, device).map_err(|source| {
        DaemonError::Recovery {
            what: format!("{at}: upgrading from format 2"),
            source,
        }
    })?;
    if old.dirty_left() > 0 {
        return Err(DaemonError::refused(format!(
            "{at}: upgrading from format 2: {} dirty blocks were not written back; the cache \
             is left as it was",
            old.dirty_left()
        )));
    }
    drop(old);
    let t = FlashTier::create(dev, cfg).map_err(|source| DaemonError::Flash {
        what: format!("{at}: reformatting"),
        source,
    })?;
    Ok((t, report))
}

/// Opens or creates the tier, writes the dirty blocks it kept to BACKING (through `device`),
/// and returns it as a lower tier of the mount.
pub fn build(
    spec: &LowerTierSpec,
    f: &FlashSpec,
    block_size: usize,
    backing: &Path,
    device: &dyn tiercache_manager::BackingIo,
) -> Result<(LowerTier, MountedFlash), DaemonError> {
    if f.mode == FlashMode::Writeback {
        check_handles(backing)?;
    }
    let mut cleaner = CleanerConfig::new(
        match f.cleaner {
            CleanerKind::Idle => CleanerMode::Idle,
            CleanerKind::Eager => CleanerMode::Eager,
        },
        0,
    );
    cleaner.wait = f.wait;
    cleaner.dirty_max = f.dirty_max;
    let cfg = FlashConfig {
        block_shift: block_size.trailing_zeros() as u8,
        set_shift: SET_SHIFT,
        max_errors: f.max_errors,
        cleaner,
        clean_only: f.mode != FlashMode::Writeback,
        ..FlashConfig::new(spec.name.clone())
    };
    // Locked (by its device) before anything reads or formats it: two daemons starting
    // together cannot both format it.
    let (tier, how, upgraded, io_mode) = open_device(f, cfg, backing, device)?;
    let tier = Arc::new(tier);
    // Before anything is served: what it holds dirty from before goes to BACKING.
    let recovery =
        tiercache_manager::clean_recovered(&*tier, backing, device).map_err(|source| {
            DaemonError::Recovery {
                what: String::new(),
                source,
            }
        })?;
    let recovery = upgraded.unwrap_or(recovery);
    log::info!(
        "flash tier {} at {}: {} ({} sets, {} blocks), I/O {} (--flash-io {})",
        spec.name,
        f.path.display(),
        how,
        tier.geometry().sets,
        tier.info().capacity_blocks,
        io_mode,
        f.io
    );
    let mut lt = LowerTier::new(tier.clone(), spec.placement).with_seq_bypass(
        tiercache_core::seqrun::Threshold::Fixed((f.seq_cutoff / block_size as u64).max(1)),
    );
    if f.mode == FlashMode::Writethrough {
        lt = lt.with_fill_on_write();
    }
    Ok((
        lt,
        MountedFlash {
            tier,
            spec: f.clone(),
            recovery,
            io_mode,
        },
    ))
}

/// Closes the tiers after the final write-back (their clean-shutdown flag: warm restart).
pub fn close(flashes: &[MountedFlash]) -> Result<(), DaemonError> {
    for f in flashes {
        f.tier.close().map_err(|source| DaemonError::Flash {
            what: format!("closing flash tier {}", f.spec.path.display()),
            source,
        })?;
    }
    Ok(())
}

fn mode_name(m: FlashMode) -> &'static str {
    match m {
        FlashMode::Writeback => "writeback",
        FlashMode::Writethrough => "writethrough",
        FlashMode::Writearound => "writearound",
    }
}

/// `stats --json` `flash`: the first flash tier's state and counters (null without one).
pub fn stats_json(flashes: &[MountedFlash]) -> Value {
    let Some(f) = flashes.first() else {
        return Value::Null;
    };
    let mut v = serde_json::to_value(f.tier.flash_stats()).unwrap_or(Value::Null);
    v["name"] = json!(f.tier.info().name);
    v["path"] = json!(f.spec.path.display().to_string());
    v["mode"] = json!(mode_name(f.spec.mode));
    v["cleaner"] = json!(match f.spec.cleaner {
        CleanerKind::Idle => "idle",
        CleanerKind::Eager => "eager",
    });
    v["seq_cutoff"] = json!(f.spec.seq_cutoff);
    v["io_mode"] = json!(f.io_mode.name());
    v["recovery"] = serde_json::to_value(&f.recovery).unwrap_or(Value::Null);
    v
}

/// Prometheus lines of the flash tiers (`flash_*{tier}`); nothing without one.
pub fn prometheus(flashes: &[MountedFlash]) -> String {
    let mut o = String::new();
    if flashes.is_empty() {
        return o;
    }
    let stats: Vec<(String, tiercache_flash::FlashStats)> = flashes
        .iter()
        .map(|f| {
            let name = f.tier.info().name.replace('"', "'");
            (format!("tier=\"{name}\""), f.tier.flash_stats())
        })
        .collect();
    type Field = fn(&tiercache_flash::FlashStats) -> f64;
    let series: [(&str, &str, &str, Field); 7] = [
        (
            "flash_dirty_blocks",
            "gauge",
            "Blocks newer than BACKING.",
            |s| s.dirty_blocks as f64,
        ),
        (
            "flash_free_sets",
            "gauge",
            "Sets holding no dirty block.",
            |s| f64::from(s.free_sets),
        ),
        (
            "flash_cleaned_bytes_total",
            "counter",
            "Bytes cleaned to BACKING.",
            |s| s.bytes_cleaned as f64,
        ),
        (
            "flash_bypassed_total",
            "counter",
            "Requests sent to BACKING because no set was free.",
            |s| s.bypassed as f64,
        ),
        (
            "flash_cleaning",
            "gauge",
            "Cleaner state: 0 normal, 1 wait, 2 writeback.",
            |s| match s.state {
                tiercache_flash::CleanerState::Normal => 0.0,
                tiercache_flash::CleanerState::Wait => 1.0,
                tiercache_flash::CleanerState::Writeback => 2.0,
            },
        ),
        (
            "flash_degraded",
            "gauge",
            "1 after too many device errors.",
            |s| f64::from(u8::from(s.degraded)),
        ),
        (
            "flash_checksum_errors_total",
            "counter",
            "Blocks read back with other bytes than were written (clean: read from BACKING \
             instead; dirty: EIO).",
            |s| s.checksum_errors as f64,
        ),
    ];
    for (name, kind, help, field) in series {
        let samples: Vec<(&str, f64)> = stats.iter().map(|(l, s)| (l.as_str(), field(s))).collect();
        super::metrics::metric(&mut o, name, kind, help, &samples);
    }
    o
}
