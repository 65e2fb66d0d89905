//! Optional access trace: one CSV line per block access, readable by the simulator's `csv`
//! trace reader.
//!
//! Format: header `time,file,obj_id,op,class`, then `time` = whole seconds since the tier
//! started, `file` = file id (backing inode), `obj_id` = block index, `op` = `r` or `w`,
//! `class` = `priority` or `normal`. Read-ahead fills are not accesses and are not recorded.
//!
//! Invariant: the request path never blocks on the trace: records go through a bounded channel
//! with `try_send`; when it is full the record is dropped and counted. A writer thread owns the
//! output and flushes it when the trace is replaced or the tier shuts down.

use std::io::{BufWriter, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::Arc;
use std::thread::JoinHandle;
use tiercache_core::{BlockKey, Class};

/// The CSV header line.
pub const TRACE_HEADER: &str = "time,file,obj_id,op,class";

#[derive(Debug, Clone, Copy)]
pub(crate) struct TraceRecord {
    pub secs: u64,
    pub key: BlockKey,
    pub write: bool,
    pub class: Class,
}

/// The sending side, kept in the engine; the writer thread's handle is kept beside it.
#[derive(Debug)]
pub(crate) struct TraceSink {
    tx: SyncSender<TraceRecord>,
    dropped: Arc<AtomicU64>,
}

impl TraceSink {
    /// Starts the writer thread for `out`. Returns the sink and the thread to join on close.
    pub fn start(
        out: Box<dyn Write + Send>,
        queue: usize,
        dropped: Arc<AtomicU64>,
    ) -> std::io::Result<(Self, JoinHandle<()>)> {
        let (tx, rx) = sync_channel(queue);
        let counter = Arc::clone(&dropped);
        let handle = std::thread::Builder::new()
            .name("tiercache-trace".into())
            .spawn(move || write_loop(out, rx, &counter))?;
        Ok((Self { tx, dropped }, handle))
    }

    /// Queues one record; never blocks.
    #[inline]
    pub fn record(&self, rec: TraceRecord) {
        match self.tx.try_send(rec) {
            Ok(()) => {}
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                self.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

fn write_loop(out: Box<dyn Write + Send>, rx: Receiver<TraceRecord>, dropped: &AtomicU64) {
    let mut w = BufWriter::new(out);
    let mut failed = writeln!(w, "{TRACE_HEADER}").is_err();
    for r in rx {
        if failed {
            dropped.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        let op = if r.write { 'w' } else { 'r' };
        if let Err(e) = writeln!(
            w,
            "{},{},{},{},{}",
            r.secs, r.key.file.0, r.key.block.0, op, r.class
        ) {
            log::error!("trace output failed, dropping further records: {e}");
            failed = true;
            dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
    if let Err(e) = w.flush() {
        log::error!("trace output failed at close: {e}");
    }
}
