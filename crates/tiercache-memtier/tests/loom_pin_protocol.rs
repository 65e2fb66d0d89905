//! Model check (loom) of the zero-copy pin protocol: a client never reads a slot's bytes while
//! the daemon rewrites them for another block, whatever the interleaving. Each client's pins
//! live in a pin word of its own (its pin area), read by the daemon inside its change window.
//! Run with `RUSTFLAGS="--cfg loom" cargo test -p tiercache-memtier --test loom_pin_protocol
//! --release` (`.ci/run` does); without `--cfg loom` this file is empty.
#![cfg(loom)]

use loom::cell::UnsafeCell;
use loom::sync::atomic::{AtomicU64, Ordering::SeqCst};
use loom::sync::Arc;
use loom::thread;
use tiercache_memtier::shm::{pin_mask, unpin, SlotHeader};

const SLOT: u32 = 5;

/// A slot: its header, its bytes (one word stands for the block), and two clients' pin words.
struct Slot {
    h: SlotHeader,
    bytes: UnsafeCell<u64>,
    pins: [AtomicU64; 2],
}

impl Slot {
    /// The daemon's view: any client's bit for the slot.
    fn pinned(&self) -> bool {
        self.pins
            .iter()
            .any(|w| w.load(SeqCst) & pin_mask(SLOT) != 0)
    }
}

fn published(file: u64, block: u64, value: u64) -> Arc<Slot> {
    let s = Slot {
        h: SlotHeader::default(),
        bytes: UnsafeCell::new(value),
        pins: [AtomicU64::new(0), AtomicU64::new(0)],
    };
    s.h.publish(file, block);
    s.h.set_valid();
    Arc::new(s)
}

/// Client `c`: pins `block` of `file`, reads the bytes, unpins; the bytes must be `want`.
fn client(s: Arc<Slot>, c: usize, file: u64, block: u64, want: u64) -> thread::JoinHandle<()> {
    thread::spawn(move || {
        let m = pin_mask(SLOT);
        if s.h.try_pin(file, block, &s.pins[c], m).is_some() {
            // SAFETY (model): loom reports any access racing with the daemon's write.
            let v = s.bytes.with(|p| unsafe { *p });
            assert_eq!(v, want, "pinned the block but read another block's bytes");
            unpin(&s.pins[c], m);
        }
    })
}

#[test]
fn a_pinned_slot_is_never_rewritten() {
    loom::model(|| {
        let s = published(1, 1, 11);
        let t = client(Arc::clone(&s), 0, 1, 1, 11);
        if s.h.claim(|| s.pinned()) {
            // SAFETY (model): loom checks that no access races with another.
            s.bytes.with_mut(|p| unsafe { *p = 22 });
            s.h.publish(1, 2);
            s.h.set_valid();
        }
        t.join().unwrap();
    });
}

#[test]
fn a_retired_pinned_slot_reports_the_pin_until_the_client_lets_go() {
    loom::model(|| {
        let s = published(5, 0, 50);
        let t = client(Arc::clone(&s), 1, 5, 0, 50);
        // The daemon retires the block; it may reuse the slot only once nobody pins it.
        s.h.retire(|| s.pinned());
        if !s.pinned() {
            // SAFETY (model): loom checks that no access races with another.
            s.bytes.with_mut(|p| unsafe { *p = 0 });
        }
        t.join().unwrap();
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
        let hs = [
            client(Arc::clone(&s), 0, 2, 2, 7),
            client(Arc::clone(&s), 1, 2, 2, 7),
        ];
        if s.h.claim(|| s.pinned()) {
            // SAFETY (model): loom checks that no access races with another.
            s.bytes.with_mut(|p| unsafe { *p = 9 });
        }
        for h in hs {
            h.join().unwrap();
        }
    });
}
