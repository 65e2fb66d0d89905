//! Model check (loom) of the zero-copy pin protocol: a client never reads a slot's bytes while
//! the daemon rewrites them for another block, whatever the interleaving. Run with
//! `RUSTFLAGS="--cfg loom" cargo test -p tiercache-memtier --test loom_pin_protocol --release`
//! (`.ci/run` does); without `--cfg loom` this file is empty.
#![cfg(loom)]

use loom::cell::UnsafeCell;
use loom::sync::Arc;
use loom::thread;
use tiercache_memtier::shm::SlotHeader;

/// A slot: its header and its bytes (one word stands for the block).
struct Slot {
    h: SlotHeader,
    bytes: UnsafeCell<u64>,
}

fn published(file: u64, block: u64, value: u64) -> Arc<Slot> {
    let s = Slot {
        h: SlotHeader::default(),
        bytes: UnsafeCell::new(value),
    };
    s.h.publish(file, block);
    s.h.set_valid();
    Arc::new(s)
}

#[test]
fn a_pinned_slot_is_never_rewritten() {
    loom::model(|| {
        let s = published(1, 1, 11);
        let c = Arc::clone(&s);
        let client = thread::spawn(move || {
            if c.h.try_pin(1, 1, 1).is_some() {
                // SAFETY (model): loom reports any access racing with the daemon's write.
                let v = c.bytes.with(|p| unsafe { *p });
                assert_eq!(v, 11, "pinned block 1 but read another block's bytes");
                c.h.unpin(1);
            }
        });
        if s.h.claim() {
            s.bytes.with_mut(|p| unsafe { *p = 22 });
            s.h.publish(1, 2);
            s.h.set_valid();
        }
        client.join().unwrap();
    });
}

#[test]
fn a_retired_pinned_slot_reports_the_pin_until_the_client_lets_go() {
    loom::model(|| {
        let s = published(5, 0, 50);
        let c = Arc::clone(&s);
        let client = thread::spawn(move || {
            if c.h.try_pin(5, 0, 4).is_some() {
                // SAFETY (model): loom checks that no access races with another (it fails if one does).
                let v = c.bytes.with(|p| unsafe { *p });
                assert_eq!(v, 50);
                c.h.unpin(4);
            }
        });
        // The daemon retires the block; it may reuse the slot only once nobody pins it.
        s.h.retire();
        if !s.h.pinned() {
            // SAFETY (model): loom checks that no access races with another (it fails if one does).
            s.bytes.with_mut(|p| unsafe { *p = 0 });
        }
        client.join().unwrap();
    });
}

#[test]
fn two_clients_and_a_claim() {
    // Three threads: bounded preemptions keep the search to seconds (3 covers the Dekker
    // interleavings, which need two).
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(3);
    b.check(|| {
        let s = published(2, 2, 7);
        let mut hs = Vec::new();
        for bit in [1u64, 2] {
            let c = Arc::clone(&s);
            hs.push(thread::spawn(move || {
                if c.h.try_pin(2, 2, bit).is_some() {
                    // SAFETY (model): loom checks that no access races with another (it fails if one does).
                    let v = c.bytes.with(|p| unsafe { *p });
                    assert_eq!(v, 7);
                    c.h.unpin(bit);
                }
            }));
        }
        if s.h.claim() {
            // SAFETY (model): loom checks that no access races with another (it fails if one does).
            s.bytes.with_mut(|p| unsafe { *p = 9 });
        }
        for h in hs {
            h.join().unwrap();
        }
    });
}

#[test]
fn write_back_never_calls_an_in_place_update_clean_before_it_copied_it() {
    use loom::sync::atomic::{AtomicU64, Ordering::SeqCst};
    loom::model(|| {
        let s = published(3, 3, 0);
        s.h.begin_write(1);
        let data = Arc::new(AtomicU64::new(0));
        let (c, d) = (Arc::clone(&s), Arc::clone(&data));
        let client = thread::spawn(move || {
            d.store(1, SeqCst); // the in-place update
            c.h.end_write(1);
        });
        // Write-back as the manager does it: sequence snapshot, copy, then `mark_clean`'s
        // check — writers first, then the sequence (engine.rs).
        let snap = s.h.wseq.load(SeqCst);
        let copied = data.load(SeqCst);
        let clean = !s.h.writing() && s.h.wseq.load(SeqCst) == snap;
        if clean {
            assert_eq!(copied, 1, "marked clean without the update's bytes");
        }
        client.join().unwrap();
    });
}
