//! What [`crate::RemoteTier::connect`] asks the servers before the tier starts: each server's
//! `stats settings`, all servers at once (one timeout in all, not one per server), checked
//! against the block size, and the index capacity derived from the reported memory, capped
//! at what the host can afford.

use crate::client::ServerSettings;
use crate::crypt;
use crate::error::RemoteError;
use crate::index::Index;
use crate::pool::Pool;

/// memcached's per-item bytes besides key and value: the item header with its CAS (56 B on a
/// 64-bit build), the key's terminating NUL and the value's `\r\n`.
pub const ITEM_HEADER: usize = 56 + 3;

/// Assumed server memory when no server reports it (memcached's `-m 64`).
const DEFAULT_SERVER_BYTES: u64 = 64 << 20;

/// Share of the host's physical memory the index may take at most (1/16).
const INDEX_RAM_SHARE: u64 = 16;

/// The bytes memcached needs for one item holding a block of `block_size` (sealed value, key
/// name, item header); `-I` must be at least this.
pub fn item_bytes(block_size: usize) -> u64 {
    (block_size + crypt::OVERHEAD + crypt::NAME_LEN + ITEM_HEADER) as u64
}

/// Asks every server for its settings at once (scoped threads; each request is bounded by the
/// timeout). `Err` per server that did not answer.
pub fn probe_all(pool: &Pool) -> Vec<Result<ServerSettings, RemoteError>> {
    let ask = |i: usize| match pool.server(i) {
        Some(s) => s.client.settings(),
        None => Ok(ServerSettings::default()),
    };
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..pool.len())
            .map(|i| {
                std::thread::Builder::new()
                    .name("remote-probe".into())
                    .spawn_scoped(scope, move || ask(i))
            })
            .collect();
        handles
            .into_iter()
            .enumerate()
            .map(|(i, h)| match h {
                // No thread to spare: ask from here (slower, still bounded per server).
                Err(_) => ask(i),
                Ok(h) => h.join().unwrap_or_else(|_| {
                    Err(RemoteError::Config(format!("probe of server {i} panicked")))
                }),
            })
            .collect()
    })
}

/// Refuses a server whose largest item cannot hold one block's item.
pub fn check_item_size(
    tier: &str,
    server: &str,
    settings: &ServerSettings,
    block_size: usize,
) -> Result<(), RemoteError> {
    let need = item_bytes(block_size);
    match settings.item_size_max {
        Some(max) if max < need => Err(RemoteError::Config(format!(
            "{tier}: memcached {server} stores items of at most {max} bytes (item_size_max), \
             but a {block_size}-byte block needs {need} bytes (block + {} value overhead + \
             {} key + {ITEM_HEADER} item header); start memcached with -I {} or use smaller \
             blocks",
            crypt::OVERHEAD,
            crypt::NAME_LEN,
            suggest_item_size(need)
        ))),
        _ => Ok(()),
    }
}

/// A `-I` value (`<n>k` or `<n>m`) at least `need` bytes: the next power of two.
fn suggest_item_size(need: u64) -> String {
    let p = need.next_power_of_two();
    if p >= 1 << 20 {
        format!("{}m", p >> 20)
    } else {
        format!("{}k", (p >> 10).max(1))
    }
}

/// The index capacity for `reported` bytes of server memory (`None`: no server said; then
/// [`DEFAULT_SERVER_BYTES`] per server), capped at what the host can afford for the index.
pub fn derived_capacity(
    tier: &str,
    reported: Option<u64>,
    servers: usize,
    block_size: usize,
) -> u64 {
    let item = item_bytes(block_size);
    // Slab classes grow by 1.25: on average an item wastes about an eighth of its chunk.
    let item = item + item / 8;
    let bytes = reported.unwrap_or(DEFAULT_SERVER_BYTES.saturating_mul(servers as u64));
    let wanted = (bytes / item).max(1);
    let cap = host_index_cap();
    if wanted > cap {
        log::warn!(
            "{tier}: the servers report {bytes} bytes ({wanted} blocks), more than this host \
             can index with 1/{INDEX_RAM_SHARE} of its memory; the index holds at most {cap} \
             blocks"
        );
        return cap;
    }
    wanted
}

/// Blocks the index may hold: 1/16 of physical memory at the index's bytes per entry.
pub fn host_index_cap() -> u64 {
    // SAFETY: sysconf has no preconditions; it returns -1 for an unknown name.
    let (pages, page) = unsafe {
        (
            libc::sysconf(libc::_SC_PHYS_PAGES),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    // Unknown: assume 1 GiB, a small host.
    let ram = match (u64::try_from(pages), u64::try_from(page)) {
        (Ok(n), Ok(p)) if n > 0 && p > 0 => n.saturating_mul(p),
        _ => 1 << 30,
    };
    let per_entry = Index::nominal_bytes_per_block().ceil().max(1.0) as u64;
    (ram / INDEX_RAM_SHARE / per_entry).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn item_size_check_and_suggestion() {
        let s = |max| ServerSettings {
            maxbytes: None,
            item_size_max: Some(max),
        };
        assert!(check_item_size("t", "a:1", &s(1 << 20), 4096).is_ok());
        assert!(check_item_size("t", "a:1", &ServerSettings::default(), 1 << 20).is_ok());
        let e = check_item_size("t", "a:1", &s(1 << 20), 1 << 20)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("a:1") && e.contains("-I 2m"), "{e}");
        assert_eq!(suggest_item_size(5000), "8k");
        assert_eq!(suggest_item_size(100), "1k");
    }

    #[test]
    fn capacity_is_capped_by_the_host() {
        let cap = host_index_cap();
        assert!(cap > 1000);
        assert_eq!(derived_capacity("t", Some(u64::MAX), 1, 4096), cap);
        assert!(derived_capacity("t", None, 2, 4096) < cap);
    }
}
