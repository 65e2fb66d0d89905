//! A blocking memcached meta-protocol client for one server over `std::net::TcpStream`, with
//! a small pool of idle connections and a deadline on every request.
//!
//! Invariant: a connection goes back to the idle pool only after a request on it completed
//! with a well-formed, expected reply. After a timeout, an I/O error, a malformed reply or an
//! error reply the connection is dropped: its stream may be out of sync.

use crate::error::RemoteError;
use crate::proto::{self, Reply};
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Idle connections kept per server: enough for the FUSE request threads reading at once, so
/// concurrent readers reuse connections instead of opening one per read.
pub const IDLE_CAP: usize = 16;

/// One TCP connection with its read buffer.
#[derive(Debug)]
struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
    /// Unconsumed bytes are `buf[start..end]`.
    start: usize,
    end: usize,
}

fn remaining(deadline: Instant) -> io::Result<Duration> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(io::Error::new(io::ErrorKind::TimedOut, "request timed out"));
    }
    Ok(left)
}

impl Conn {
    fn connect(addr: &SocketAddr, deadline: Instant) -> io::Result<Conn> {
        let stream = TcpStream::connect_timeout(addr, remaining(deadline)?)?;
        stream.set_nodelay(true)?;
        Ok(Conn {
            stream,
            buf: vec![0; 16 * 1024],
            start: 0,
            end: 0,
        })
    }

    fn send(&mut self, bytes: &[u8], deadline: Instant) -> io::Result<()> {
        let mut off = 0;
        while off < bytes.len() {
            self.stream.set_write_timeout(Some(remaining(deadline)?))?;
            match self.stream.write(&bytes[off..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => off += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(timeout_kind(e)),
            }
        }
        Ok(())
    }

    /// Reads more bytes into the buffer (growing it up to `limit`), honouring `deadline`.
    fn fill(&mut self, deadline: Instant, limit: usize) -> io::Result<()> {
        if self.start > 0 && self.end == self.buf.len() {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if self.end == self.buf.len() {
            if self.buf.len() >= limit {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "reply larger than expected",
                ));
            }
            let grown = (self.buf.len() * 2).min(limit);
            self.buf.resize(grown, 0);
        }
        loop {
            self.stream.set_read_timeout(Some(remaining(deadline)?))?;
            match self.stream.read(&mut self.buf[self.end..]) {
                Ok(0) => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "server closed the connection",
                    ))
                }
                Ok(n) => {
                    self.end += n;
                    return Ok(());
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(timeout_kind(e)),
            }
        }
    }

    fn consume(&mut self, n: usize) {
        self.start += n;
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
    }
}

/// Whether `e` says the peer had closed the connection (not a timeout or a bad reply).
fn closed_under_us(e: &RemoteError) -> bool {
    matches!(e, RemoteError::Io { source, .. } if matches!(
        source.kind(),
        io::ErrorKind::UnexpectedEof
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::BrokenPipe
    ))
}

/// Read/write timeouts surface as `WouldBlock` on Linux; call them what they are.
fn timeout_kind(e: io::Error) -> io::Error {
    if e.kind() == io::ErrorKind::WouldBlock {
        io::Error::new(io::ErrorKind::TimedOut, "request timed out")
    } else {
        e
    }
}

/// What `stats settings` reports that the tier needs ([`ServerClient::settings`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ServerSettings {
    /// `maxbytes`: memory for items (`-m`).
    pub maxbytes: Option<u64>,
    /// `item_size_max`: the largest item, header and key included (`-I`).
    pub item_size_max: Option<u64>,
}

/// A client for one memcached server.
#[derive(Debug)]
pub struct ServerClient {
    name: String,
    addr: SocketAddr,
    /// Per-request timeout in ns (changed live by [`ServerClient::set_timeout`]).
    timeout_ns: AtomicU64,
    /// Largest value accepted in a `VA` reply.
    max_value: usize,
    idle: Mutex<Vec<Conn>>,
}

/// A request in progress on one checked-out connection.
struct Req<'a> {
    client: &'a ServerClient,
    conn: Conn,
    deadline: Instant,
}

impl Req<'_> {
    fn io(&self, e: io::Error) -> RemoteError {
        RemoteError::Io {
            server: self.client.name.clone(),
            source: e,
        }
    }

    fn protocol(&self, source: proto::ProtoError) -> RemoteError {
        RemoteError::Protocol {
            server: self.client.name.clone(),
            source,
        }
    }

    /// A well-formed reply that does not answer what was asked.
    fn unexpected(&self, what: String) -> RemoteError {
        self.protocol(proto::ProtoError::Unexpected(what))
    }

    fn send(&mut self, bytes: &[u8]) -> Result<(), RemoteError> {
        let deadline = self.deadline;
        self.conn.send(bytes, deadline).map_err(|e| self.io(e))
    }

    /// The next reply; error replies become [`RemoteError::Server`].
    fn reply(&mut self) -> Result<Reply, RemoteError> {
        let reply = self.any_reply()?;
        if reply.is_error() {
            return Err(RemoteError::Server {
                server: self.client.name.clone(),
                msg: format!("{reply:?}"),
            });
        }
        Ok(reply)
    }

    /// The next reply, error replies included.
    fn any_reply(&mut self) -> Result<Reply, RemoteError> {
        // Saturating: a bound near `usize::MAX` must not wrap to a tiny buffer limit.
        let limit = self.client.max_value.saturating_add(proto::MAX_LINE + 4);
        loop {
            let parsed = proto::parse_reply(
                &self.conn.buf[self.conn.start..self.conn.end],
                self.client.max_value,
            );
            match parsed {
                Ok(Some((reply, n))) => {
                    self.conn.consume(n);
                    return Ok(reply);
                }
                Ok(None) => {
                    let deadline = self.deadline;
                    self.conn.fill(deadline, limit).map_err(|e| self.io(e))?;
                }
                Err(why) => return Err(self.protocol(why)),
            }
        }
    }

    /// The next text line (for `stats`).
    fn line(&mut self) -> Result<String, RemoteError> {
        loop {
            match proto::parse_line(&self.conn.buf[self.conn.start..self.conn.end]) {
                Ok(Some((line, n))) => {
                    let line = line.to_string();
                    self.conn.consume(n);
                    return Ok(line);
                }
                Ok(None) => {
                    let deadline = self.deadline;
                    self.conn
                        .fill(deadline, 64 * 1024)
                        .map_err(|e| self.io(e))?;
                }
                Err(why) => return Err(self.protocol(why)),
            }
        }
    }
}

impl ServerClient {
    /// A client for `addr` (`name` is how errors and stats call it). Connects lazily.
    pub fn new(name: String, addr: SocketAddr, timeout: Duration, max_value: usize) -> Self {
        Self {
            name,
            addr,
            timeout_ns: AtomicU64::new(u64::try_from(timeout.as_nanos()).unwrap_or(u64::MAX)),
            max_value,
            idle: Mutex::new(Vec::new()),
        }
    }

    /// The per-request timeout in force.
    pub fn timeout(&self) -> Duration {
        Duration::from_nanos(self.timeout_ns.load(Relaxed))
    }

    /// A new per-request timeout, for requests that start from now on.
    pub fn set_timeout(&self, timeout: Duration) {
        let ns = u64::try_from(timeout.as_nanos()).unwrap_or(u64::MAX);
        self.timeout_ns.store(ns, Relaxed);
    }

    /// The name given at construction (the configured `host:port`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Drops every idle connection (after the server was found down: they are dead).
    pub fn clear_idle(&self) {
        self.idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
    }

    /// Runs one request on an idle or new connection; the connection is kept only on success.
    /// A reused idle connection that turns out closed (the server restarted since) is not a
    /// server failure: the idle pool is emptied and the request retried once on a new
    /// connection within the same deadline.
    fn request<T>(
        &self,
        mut f: impl FnMut(&mut Req<'_>) -> Result<T, RemoteError>,
    ) -> Result<T, RemoteError> {
        let deadline = Instant::now() + self.timeout();
        let idle = self
            .idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop();
        let reused = idle.is_some();
        match self.attempt(idle, deadline, &mut f) {
            Err(e) if reused && closed_under_us(&e) => {
                self.clear_idle();
                self.attempt(None, deadline, &mut f)
            }
            other => other,
        }
    }

    fn attempt<T>(
        &self,
        conn: Option<Conn>,
        deadline: Instant,
        f: &mut impl FnMut(&mut Req<'_>) -> Result<T, RemoteError>,
    ) -> Result<T, RemoteError> {
        let conn = match conn {
            Some(c) => c,
            None => Conn::connect(&self.addr, deadline).map_err(|e| RemoteError::Io {
                server: self.name.clone(),
                source: e,
            })?,
        };
        let mut req = Req {
            client: self,
            conn,
            deadline,
        };
        let out = f(&mut req)?;
        if req.conn.start == req.conn.end {
            let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
            if idle.len() < IDLE_CAP {
                idle.push(req.conn);
            }
        }
        Ok(out)
    }

    fn check_key(&self, key: &str) -> Result<(), RemoteError> {
        if proto::valid_key(key) {
            Ok(())
        } else {
            Err(RemoteError::Protocol {
                server: self.name.clone(),
                source: proto::ProtoError::InvalidKey(key.to_string()),
            })
        }
    }

    /// `mg <key> v`: the value, or `None` on `EN`.
    pub fn get(&self, key: &str) -> Result<Option<Vec<u8>>, RemoteError> {
        self.check_key(key)?;
        self.request(|r| {
            let mut out = Vec::with_capacity(key.len() + 8);
            proto::encode_get(&mut out, key);
            r.send(&out)?;
            match r.reply()? {
                Reply::Value { data, opaque: None } => Ok(Some(data)),
                Reply::Miss { opaque: None } => Ok(None),
                other => Err(r.unexpected(format!("reply to mg: {other:?}"))),
            }
        })
    }

    /// `ms <key> <len>`: `true` when stored (`HD`), `false` on `NS`.
    pub fn set(&self, key: &str, data: &[u8]) -> Result<bool, RemoteError> {
        self.check_key(key)?;
        self.request(|r| {
            let mut out = Vec::with_capacity(key.len() + data.len() + 24);
            proto::encode_set(&mut out, key, data, false, None);
            r.send(&out)?;
            match r.reply()? {
                Reply::Done { opaque: None } => Ok(true),
                Reply::NotStored { opaque: None } => Ok(false),
                other => Err(r.unexpected(format!("reply to ms: {other:?}"))),
            }
        })
    }

    /// `md <key>`: `true` when something was deleted.
    pub fn delete(&self, key: &str) -> Result<bool, RemoteError> {
        self.check_key(key)?;
        self.request(|r| {
            let mut out = Vec::with_capacity(key.len() + 8);
            proto::encode_delete(&mut out, key, false, None);
            r.send(&out)?;
            match r.reply()? {
                Reply::Done { opaque: None } => Ok(true),
                Reply::NotFound { opaque: None } => Ok(false),
                other => Err(r.unexpected(format!("reply to md: {other:?}"))),
            }
        })
    }

    /// Quiet pipelined `ms … q O<i>` for every item, ended by `mn`. Returns per item whether it
    /// is known to be stored.
    ///
    /// Quiet mode sends nothing for a stored item; `NS`/`EX` name their item by the `O` token.
    /// A `SERVER_ERROR` (`object too large for cache`, `out of memory storing object`) is a
    /// per-item failure that memcached sends without the token, after swallowing the item's
    /// data (the stream stays in sync): replies come in item order, so it belongs to an item
    /// after the last token seen before it and before the first token seen after it; every
    /// item in that window counts as not stored. Such a batch is still a success for the
    /// server's health. `CLIENT_ERROR` and `ERROR` fail the whole request (the stream may be
    /// out of sync).
    ///
    /// The client's deadline covers the whole pipelined batch: callers bound its bytes.
    pub fn set_batch(&self, items: &[(&str, &[u8])]) -> Result<Vec<bool>, RemoteError> {
        for (k, _) in items {
            self.check_key(k)?;
        }
        let mut stored = vec![true; items.len()];
        self.request(|r| {
            stored.fill(true);
            let bytes: usize = items.iter().map(|(k, v)| k.len() + v.len() + 32).sum();
            let mut out = Vec::with_capacity(bytes + 4);
            for (i, (k, v)) in items.iter().enumerate() {
                let token =
                    u32::try_from(i).map_err(|_| r.unexpected("batch: too large".to_string()))?;
                proto::encode_set(&mut out, k, v, true, Some(token));
            }
            proto::encode_noop(&mut out);
            r.send(&out)?;
            // Replies in order: `Some(i)` an item's token, `None` a SERVER_ERROR.
            let mut seen: Vec<Option<usize>> = Vec::new();
            loop {
                match r.any_reply()? {
                    Reply::NoOp => break,
                    Reply::NotStored { opaque: Some(i) } | Reply::Exists { opaque: Some(i) }
                        if (i as usize) < items.len() =>
                    {
                        stored[i as usize] = false;
                        seen.push(Some(i as usize));
                    }
                    // Quiet mode suppresses HD, but a server may still send it.
                    Reply::Done { opaque: Some(i) } if (i as usize) < items.len() => {
                        seen.push(Some(i as usize));
                    }
                    Reply::ServerError(msg) => {
                        log::debug!("memcached {}: item not stored: {msg}", self.name);
                        seen.push(None);
                    }
                    other => return Err(r.unexpected(format!("reply in ms batch: {other:?}"))),
                }
            }
            for (n, _) in seen.iter().enumerate().filter(|(_, t)| t.is_none()) {
                let after = seen[..n].iter().rev().find_map(|t| *t).map_or(0, |i| i + 1);
                let before = seen[n + 1..].iter().find_map(|t| *t).unwrap_or(items.len());
                for s in stored.iter_mut().take(before).skip(after) {
                    *s = false;
                }
            }
            Ok(())
        })?;
        Ok(stored)
    }

    /// Quiet pipelined `md … q` for every key, ended by `mn`.
    pub fn delete_batch(&self, keys: &[&str]) -> Result<(), RemoteError> {
        for k in keys {
            self.check_key(k)?;
        }
        self.request(|r| {
            let mut out = Vec::with_capacity(keys.iter().map(|k| k.len() + 8).sum::<usize>() + 4);
            for k in keys {
                proto::encode_delete(&mut out, k, true, None);
            }
            proto::encode_noop(&mut out);
            r.send(&out)?;
            loop {
                match r.reply()? {
                    Reply::NoOp => return Ok(()),
                    // memcached 1.6 still reports NF for a quiet md; HD may come too.
                    Reply::NotFound { opaque: None } | Reply::Done { opaque: None } => {}
                    other => return Err(r.unexpected(format!("reply in md batch: {other:?}"))),
                }
            }
        })
    }

    /// `mn` → `MN`: the liveness probe.
    pub fn noop(&self) -> Result<(), RemoteError> {
        self.request(|r| {
            r.send(b"mn\r\n")?;
            match r.reply()? {
                Reply::NoOp => Ok(()),
                other => Err(r.unexpected(format!("reply to mn: {other:?}"))),
            }
        })
    }

    /// `version` → the server's version string.
    pub fn version(&self) -> Result<String, RemoteError> {
        self.request(|r| {
            r.send(b"version\r\n")?;
            match r.reply()? {
                Reply::Version(v) => Ok(v),
                other => Err(r.unexpected(format!("reply to version: {other:?}"))),
            }
        })
    }

    /// `stats settings` → the server's memory limit (`maxbytes`, its `-m`, the same number
    /// `stats` calls `limit_maxbytes`) and largest item (`item_size_max`, its `-I`), each
    /// `None` when the server does not report it.
    pub fn settings(&self) -> Result<ServerSettings, RemoteError> {
        self.request(|r| {
            r.send(b"stats settings\r\n")?;
            let mut found = ServerSettings::default();
            loop {
                let line = r.line()?;
                if line == "END" {
                    return Ok(found);
                }
                let mut t = line.split(' ');
                let slot = match (t.next(), t.next()) {
                    (Some("STAT"), Some("maxbytes")) => &mut found.maxbytes,
                    (Some("STAT"), Some("item_size_max")) => &mut found.item_size_max,
                    (Some("STAT"), Some(_)) => continue,
                    _ => return Err(r.unexpected(format!("stats line {line:?}"))),
                };
                let v = t.next().unwrap_or("");
                *slot = Some(
                    v.parse::<u64>()
                        .map_err(|_| r.unexpected(format!("stats value in {line:?}")))?,
                );
            }
        })
    }

    /// `stats` → the server's `limit_maxbytes` (its `-m`).
    pub fn limit_maxbytes(&self) -> Result<u64, RemoteError> {
        self.request(|r| {
            r.send(b"stats\r\n")?;
            let mut found = None;
            loop {
                let line = r.line()?;
                if line == "END" {
                    break;
                }
                let mut t = line.split(' ');
                match (t.next(), t.next(), t.next()) {
                    (Some("STAT"), Some("limit_maxbytes"), Some(v)) => {
                        found = Some(
                            v.parse::<u64>()
                                .map_err(|_| r.unexpected(format!("limit_maxbytes {v:?}")))?,
                        );
                    }
                    (Some("STAT"), Some(_), _) => {}
                    _ => return Err(r.unexpected(format!("stats line {line:?}"))),
                }
            }
            found.ok_or_else(|| r.unexpected("stats without limit_maxbytes".to_string()))
        })
    }
}
