//! Optional access trace: one CSV line per block access, readable by the simulator's `csv`
//! trace reader.
//!
//! Format: header `time,file,obj_id,op,class`, then `time` = whole seconds since the tier
//! started, `file` = file id (backing inode), `obj_id` = block index, `op` = `r` or `w`,
//! `class` = `priority` or `normal`. Read-ahead fills are not accesses and are not recorded.
//!
//! Invariant: the request path never blocks on the trace: records go through a bounded channel
//! with `try_send`; when it is full the record is dropped and counted. A writer thread owns the
//! output and flushes it at least once a second while records come (and after a second idle),
//! and when the trace is replaced or the tier shuts down — so a killed daemon loses at most the
//! last second of the trace.

use std::io::{BufWriter, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
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

/// How long a written record may sit in the writer's buffer at most (about: the writer flushes
/// when it has been idle this long, and after a record once this long passed since the last
/// flush), so that a killed daemon loses at most this much of the trace.
const FLUSH_EVERY: Duration = Duration::from_secs(1);

fn write_loop(out: Box<dyn Write + Send>, rx: Receiver<TraceRecord>, dropped: &AtomicU64) {
    let mut w = BufWriter::new(out);
    let mut failed = writeln!(w, "{TRACE_HEADER}").is_err();
    let mut unflushed = !failed;
    let mut last_flush = Instant::now();
    loop {
        let r = match rx.recv_timeout(FLUSH_EVERY) {
            Ok(r) => Some(r),
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => break,
        };
        if let Some(r) = r {
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
                continue;
            }
            unflushed = true;
            if last_flush.elapsed() < FLUSH_EVERY {
                continue;
            }
        }
        if unflushed && !failed {
            if let Err(e) = w.flush() {
                log::error!("trace output failed, dropping further records: {e}");
                failed = true;
            }
            unflushed = false;
        }
        last_flush = Instant::now();
    }
    if let Err(e) = w.flush() {
        log::error!("trace output failed at close: {e}");
    }
}

#[cfg(test)]
mod tests {
    //! The `--trace-out` writer flushed only at shutdown, so `kill -9` lost its tail: it now
    //! flushes at least once a second.
    use super::*;
    use std::sync::Mutex;
    use tiercache_core::{BlockIndex, FileId};

    /// An output whose bytes are visible only once flushed (like a file behind a `BufWriter`
    /// whose process is killed).
    #[derive(Debug, Clone, Default)]
    struct Flushed {
        pending: Arc<Mutex<Vec<u8>>>,
        visible: Arc<Mutex<Vec<u8>>>,
    }

    impl Write for Flushed {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.pending
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            let mut p = self
                .pending
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            self.visible
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .append(&mut p);
            Ok(())
        }
    }

    fn rec(block: u64) -> TraceRecord {
        TraceRecord {
            secs: 0,
            key: BlockKey {
                file: FileId(7),
                block: BlockIndex(block),
            },
            write: false,
            class: Class::NORMAL,
        }
    }

    fn visible_lines(out: &Flushed) -> usize {
        let v = out
            .visible
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        v.iter().filter(|&&b| b == b'\n').count()
    }

    fn wait_for_lines(out: &Flushed, n: usize) {
        let t = Instant::now();
        while visible_lines(out) < n {
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "records not flushed while the trace is open ({} lines)",
                visible_lines(out)
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    #[test]
    fn records_reach_the_output_while_the_trace_is_open() {
        let out = Flushed::default();
        let dropped = Arc::new(AtomicU64::new(0));
        let (sink, handle) = TraceSink::start(Box::new(out.clone()), 64, dropped).unwrap();
        sink.record(rec(1));
        sink.record(rec(2));
        // Idle: flushed within about a second, with the sink still open.
        wait_for_lines(&out, 3);
        // A busy stream is flushed too, not only when it pauses.
        let t = Instant::now();
        let mut b = 3;
        while t.elapsed() < Duration::from_millis(2500) {
            sink.record(rec(b));
            b += 1;
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(visible_lines(&out) >= 10, "{} lines", visible_lines(&out));
        drop(sink);
        handle.join().unwrap();
        assert_eq!(
            visible_lines(&out),
            b as usize,
            "header and every record at close"
        );
    }
}
