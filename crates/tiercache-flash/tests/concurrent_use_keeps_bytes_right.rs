//! Several threads storing, reading and cleaning at once: every hit has the bytes of the
//! version last stored for that key by its owning thread.
#![allow(clippy::unwrap_used)]
mod common;

use common::*;
use std::sync::Arc;
use tiercache_flash::{FlashDevice, FlashTier};
use tiercache_tier::Cleaning;
use tiercache_tier::{Admit, DataTier, Lookup};

#[test]
fn threads_on_disjoint_files_never_see_each_others_bytes() {
    let d: Arc<dyn FlashDevice> = mem(8 * ((1 << 20) + 1024) + 8192);
    let t = Arc::new(FlashTier::create(d, config()).unwrap());
    let hs: Vec<_> = (0..4u64)
        .map(|th| {
            let t = t.clone();
            std::thread::spawn(move || {
                let mut last = std::collections::HashMap::new();
                for i in 0..400u64 {
                    let k = key(th, i % 40);
                    let r = if i % 3 == 0 {
                        fill(&t, &k, i)
                    } else {
                        write(&t, &k, i)
                    };
                    if r == Admit::Stored {
                        last.insert(k, i);
                    }
                    let (l, buf) = read(&t, &k);
                    if let Lookup::Hit { .. } = l {
                        let want = data(&k, last[&k], 4096);
                        assert!(buf == want, "thread {th} op {i}: wrong bytes");
                    }
                    if i % 50 == 0 {
                        for db in t.dirty_blocks(8) {
                            let mut b = vec![0u8; 4096];
                            if let Some(seq) = t.read_dirty(&db.key, db.version, &mut b).unwrap() {
                                t.mark_clean(&db.key, seq);
                            }
                        }
                        t.sync().unwrap();
                    }
                }
            })
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
}
