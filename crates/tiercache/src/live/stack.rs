//! The cache a mount serves from: BACKING's device (uncached or kept, behind the device model
//! with `--emulate`), the tiers below memory, and the memory tier over them.

use super::config::{LowerTierKind, LowerTierSpec};
use super::daemon::Settings;
use super::error::DaemonError;
use super::flash::{self, MountedFlash};
use super::remote::{self, MountedRemote};
use std::io::BufWriter;
use std::path::Path;
use std::sync::Arc;
use tiercache_manager::{
    BackingCache, BackingIo, EmulatedBacking, LowerTier, MemCache, RealBacking, UncachedBacking,
};

/// The memory tier and its stack, the remote and flash tiers again (for their stats), and the
/// device model's label when BACKING is behind one.
pub(super) type OpenCache = (
    Arc<MemCache>,
    Vec<MountedRemote>,
    Vec<MountedFlash>,
    Option<String>,
);

/// Builds the cache of a mount over `backing` (canonical) from its settings. Recovery of a
/// persistent tier writes to BACKING here, before the mount.
pub(super) fn open_cache(s: &Settings, backing: &Path) -> Result<OpenCache, DaemonError> {
    let real = backing_device(s.backing_cache, backing);
    let (device, emulation): (Arc<dyn BackingIo>, Option<String>) = match s.emulate.clone() {
        Some(model) => {
            let label = format!("MODEL {model}");
            (Arc::new(EmulatedBacking::new(real, model)), Some(label))
        }
        None => (real, None),
    };
    let (lower, remotes, flashes) = build_lower_tiers(
        &s.lower_tiers,
        s.mem.block_size.bytes() as usize,
        backing,
        &*device,
    )?;
    let mem = Arc::new(MemCache::with_tiers(s.mem.clone(), device, lower)?);
    if !flashes.is_empty() {
        // Only files on BACKING's own mount go into a persistent tier (their handles reopen
        // them after a crash).
        let root = std::fs::File::open(backing)
            .map_err(|e| DaemonError::io(backing.display().to_string(), e))?;
        if let Err(e) = mem.set_backing_root(&root) {
            log::warn!("BACKING {}: no file handles ({e})", backing.display());
        }
    }
    if let Some(path) = &s.trace_out {
        let trace_out = || format!("--trace-out {}", path.display());
        let f = std::fs::File::create(path).map_err(|e| DaemonError::io(trace_out(), e))?;
        mem.set_trace(Some(Box::new(BufWriter::new(f))))
            .map_err(|e| DaemonError::io(trace_out(), e))?;
    }
    Ok((mem, remotes, flashes, emulation))
}

/// The tiers below memory (top first), and the remote and flash ones again for their stats.
type LowerStack = (Vec<LowerTier>, Vec<MountedRemote>, Vec<MountedFlash>);

/// The device BACKING's data goes through: uncached (probed on BACKING's file system, the
/// outcome logged) unless `--backing-cache keep`.
fn backing_device(cache: BackingCache, backing: &Path) -> Arc<dyn BackingIo> {
    match cache {
        BackingCache::Keep => {
            log::info!(
                "BACKING I/O: buffered, its pages kept in the page cache (--backing-cache keep)"
            );
            Arc::new(RealBacking)
        }
        BackingCache::Drop => {
            let u = UncachedBacking::new();
            u.probe(backing);
            Arc::new(u)
        }
    }
}

/// Builds the tiers below memory from their specs, top first; also returns the remote ones
/// (for their own stats). Recovery of a persistent tier writes to BACKING through `device`.
fn build_lower_tiers(
    specs: &[LowerTierSpec],
    block_size: usize,
    backing: &Path,
    device: &dyn BackingIo,
) -> Result<LowerStack, DaemonError> {
    let mut remotes = Vec::new();
    let mut flashes = Vec::new();
    let tiers = specs
        .iter()
        .enumerate()
        .map(|(position, spec)| {
            let tier: Arc<dyn tiercache_tier::DataTier> = match spec.kind {
                LowerTierKind::Test => {
                    let blocks =
                        usize::try_from(spec.capacity_bytes / block_size as u64).map_err(|_| {
                            DaemonError::refused(format!("tier {}: too large", spec.name))
                        })?;
                    let mut cfg = tiercache_memtier::TestTierConfig::new(
                        spec.name.clone(),
                        blocks,
                        block_size,
                    );
                    cfg.policy = spec.policy;
                    cfg.read_latency = spec.read_latency;
                    cfg.write_latency = spec.write_latency;
                    cfg.accepts_dirty = spec.accepts_dirty;
                    Arc::new(tiercache_memtier::TestTier::new(cfg)?)
                }
                LowerTierKind::Remote => {
                    let r = spec.remote.as_ref().ok_or_else(|| {
                        DaemonError::refused(format!("tier {}: no remote settings", spec.name))
                    })?;
                    let t = remote::build(spec, r, block_size)?;
                    remotes.push(MountedRemote {
                        tier: Arc::clone(&t),
                        position,
                    });
                    let lt = LowerTier::new(t, spec.placement).with_seq_bypass(r.threshold);
                    return Ok(lt);
                }
                LowerTierKind::Flash => {
                    let f = spec.flash.as_ref().ok_or_else(|| {
                        DaemonError::refused(format!("tier {}: no flash settings", spec.name))
                    })?;
                    let (lt, mounted) = flash::build(spec, f, block_size, backing, device)?;
                    flashes.push(mounted);
                    return Ok(lt);
                }
            };
            Ok(LowerTier::new(tier, spec.placement))
        })
        .collect::<Result<Vec<_>, DaemonError>>()?;
    Ok((tiers, remotes, flashes))
}
