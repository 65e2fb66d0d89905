//! What `bench web` runs around a mount: a memory cgroup (v1 or v2), nginx, the `tar` backup
//! streams, `wrk`, and the work tree. Every process it starts is in its own process group and
//! is stopped (the group killed, waited for) when its guard is dropped, also on error.

use crate::bench::BenchError;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::ffi::OsStringExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A memory cgroup of its own with a limit; removed when dropped (after its processes went).
pub(crate) struct Cgroup {
    dir: PathBuf,
    /// The file a process writes its pid to, to join.
    pub(crate) procs: PathBuf,
}

/// Where the memory controller is: `(mount directory, cgroup v2)`.
fn memory_controller() -> Result<(PathBuf, bool), BenchError> {
    let mounts = std::fs::read_to_string("/proc/self/mounts")
        .map_err(|e| BenchError::io("/proc/self/mounts", e))?;
    let mut v2 = None;
    for l in mounts.lines() {
        let f: Vec<&str> = l.split(' ').collect();
        if f.len() < 4 {
            continue;
        }
        let dir = PathBuf::from(std::ffi::OsString::from_vec(
            tiercache_fuse::unescape_mountinfo(f[1]),
        ));
        if f[2] == "cgroup" && f[3].split(',').any(|o| o == "memory") {
            return Ok((dir, false));
        }
        if f[2] == "cgroup2" && v2.is_none() {
            let ctl = std::fs::read_to_string(dir.join("cgroup.controllers")).unwrap_or_default();
            if ctl.split_whitespace().any(|c| c == "memory") {
                v2 = Some(dir);
            }
        }
    }
    v2.map(|d| (d, true)).ok_or_else(|| {
        BenchError::scenario(
            "no memory cgroup controller (cgroup v1 `memory` or v2 with `memory`): bench web \
             needs one to give nginx and tar a memory limit",
        )
    })
}

impl Cgroup {
    /// A new cgroup named `name` limited to `limit` bytes (page cache included).
    pub(crate) fn new(name: &str, limit: u64) -> Result<Self, BenchError> {
        let (root, v2) = memory_controller()?;
        if v2 {
            // Children get the controller only if the parent hands it down.
            let _ = std::fs::write(root.join("cgroup.subtree_control"), "+memory");
        }
        let dir = root.join(name);
        let _ = std::fs::remove_dir(&dir);
        std::fs::create_dir(&dir)
            .map_err(|e| BenchError::io(format!("cgroup {}", dir.display()), e))?;
        let cg = Cgroup {
            procs: dir.join("cgroup.procs"),
            dir,
        };
        let knob = if v2 {
            "memory.max"
        } else {
            "memory.limit_in_bytes"
        };
        let path = cg.dir.join(knob);
        std::fs::write(&path, limit.to_string())
            .map_err(|e| BenchError::io(format!("cgroup limit {}", path.display()), e))?;
        Ok(cg)
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        // The processes are gone (their guards were dropped first); a moment for the kernel.
        for _ in 0..50 {
            if std::fs::remove_dir(&self.dir).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        log::warn!("cgroup {} could not be removed", self.dir.display());
    }
}

/// A shell command line word, quoted.
pub(crate) fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// Starts `sh -c SCRIPT` in its own process group, after joining `cgroup` (when given) so
/// everything it runs is charged there from its first page.
pub(crate) fn spawn_in(
    cgroup: Option<&Cgroup>,
    script: &str,
    out: Stdio,
) -> Result<Child, BenchError> {
    let full = match cgroup {
        Some(cg) => format!(
            "echo $$ > {} || exit 97; {script}",
            sh_quote(&cg.procs.to_string_lossy())
        ),
        None => script.to_string(),
    };
    Command::new("sh")
        .arg("-c")
        .arg(full)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .map_err(|e| BenchError::io("sh", e))
}

/// Ends a process group started by [`spawn_in`] and reaps its leader.
pub(crate) fn stop_group(child: &mut Child) {
    if let Ok(pgid) = i32::try_from(child.id()) {
        // SAFETY: plain kill(2) of a process group we created.
        unsafe {
            libc::kill(-pgid, libc::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        // SAFETY: as above.
        unsafe {
            libc::kill(-pgid, libc::SIGKILL);
        }
    }
    let _ = child.wait();
}

/// A free TCP port on loopback (bound and released: another process could take it meanwhile,
/// which the start of nginx then reports).
pub(crate) fn free_port() -> Result<u16, BenchError> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(|e| BenchError::io("loopback", e))?;
    l.local_addr()
        .map(|a| a.port())
        .map_err(|e| BenchError::io("loopback", e))
}

/// nginx with one worker, `sendfile off`, serving `root` on loopback; stopped when dropped.
pub(crate) struct Nginx {
    child: Child,
    pub(crate) addr: SocketAddr,
}

impl Nginx {
    pub(crate) fn start(work: &Path, root: &Path, cgroup: &Cgroup) -> Result<Self, BenchError> {
        let port = free_port()?;
        let conf = work.join("nginx.conf");
        let w = work.display();
        let text = format!(
            "worker_processes 1;\ndaemon off;\nuser root;\npid {w}/nginx.pid;\n\
             error_log {w}/nginx-error.log warn;\nevents {{ worker_connections 256; }}\n\
             http {{\n  access_log off;\n  sendfile off;\n  open_file_cache off;\n\
             \x20 keepalive_requests 10000000;\n  client_body_temp_path {w}/body;\n\
             \x20 types {{ text/html html; }}\n  default_type application/octet-stream;\n\
             \x20 server {{ listen 127.0.0.1:{port}; root {}; }}\n}}\n",
            root.display()
        );
        std::fs::write(&conf, text)
            .map_err(|e| BenchError::io(format!("{}", conf.display()), e))?;
        let script = format!(
            "exec nginx -p {} -c {} -e {}",
            sh_quote(&work.to_string_lossy()),
            sh_quote(&conf.to_string_lossy()),
            sh_quote(&work.join("nginx-error.log").to_string_lossy())
        );
        let child = spawn_in(Some(cgroup), &script, Stdio::null())?;
        let mut n = Nginx {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(n.addr).is_err() {
            if let Ok(Some(st)) = n.child.try_wait() {
                let log = std::fs::read_to_string(work.join("nginx-error.log")).unwrap_or_default();
                return Err(BenchError::scenario(format!(
                    "nginx exited with {st}: {}",
                    log.lines().last().unwrap_or("(no log)")
                )));
            }
            if Instant::now() > deadline {
                return Err(BenchError::scenario("nginx did not listen within 10 s"));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(n)
    }

    /// `GET path` over a fresh connection; the body's length (an error unless 200).
    pub(crate) fn get(&self, path: &str) -> Result<usize, BenchError> {
        let mut s = TcpStream::connect(self.addr).map_err(|e| BenchError::io("nginx", e))?;
        s.set_read_timeout(Some(Duration::from_secs(60)))
            .map_err(|e| BenchError::io("nginx", e))?;
        write!(s, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n")
            .map_err(|e| BenchError::io("nginx", e))?;
        let mut resp = Vec::new();
        s.read_to_end(&mut resp)
            .map_err(|e| BenchError::io("nginx", e))?;
        let head_end = resp
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .ok_or_else(|| BenchError::tool("nginx: no response head"))?;
        let status = String::from_utf8_lossy(&resp[..head_end.min(64)]).to_string();
        if !status.starts_with("HTTP/1.1 200") {
            return Err(BenchError::scenario(format!(
                "nginx answered {} for {path}",
                status.lines().next().unwrap_or("")
            )));
        }
        Ok(resp.len() - head_end - 4)
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        stop_group(&mut self.child);
    }
}

/// `streams` backup streams, each `tar` over its part of the bulk tree again and again, its
/// archive read and thrown away by a thread here (GNU tar skips reading files when the
/// archive is /dev/null); stopped when dropped.
pub(crate) struct Backups {
    children: Vec<Child>,
    drains: Vec<JoinHandle<()>>,
    bytes: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    started: Instant,
}

impl Backups {
    /// Stream `i` of `streams` archives the directories `parts[j]` with `j % streams == i`.
    pub(crate) fn start(
        bulk: &Path,
        parts: &[String],
        streams: usize,
        cgroup: &Cgroup,
    ) -> Result<Self, BenchError> {
        let mut b = Backups {
            children: Vec::new(),
            drains: Vec::new(),
            bytes: Arc::new(AtomicU64::new(0)),
            stop: Arc::new(AtomicBool::new(false)),
            started: Instant::now(),
        };
        for i in 0..streams {
            let mine: Vec<String> = parts
                .iter()
                .enumerate()
                .filter(|(j, _)| j % streams == i)
                .map(|(_, p)| sh_quote(p))
                .collect();
            let script = format!(
                "while :; do tar -C {} -cf - {} || exit 1; done",
                sh_quote(&bulk.to_string_lossy()),
                mine.join(" ")
            );
            let mut child = spawn_in(Some(cgroup), &script, Stdio::piped())?;
            let mut out = child
                .stdout
                .take()
                .ok_or_else(|| BenchError::tool("tar: no stdout"))?;
            b.children.push(child);
            let (bytes, stop) = (Arc::clone(&b.bytes), Arc::clone(&b.stop));
            let t = std::thread::Builder::new()
                .name("bench-web-drain".into())
                .spawn(move || {
                    let mut buf = vec![0u8; 1 << 16];
                    while !stop.load(Ordering::Relaxed) {
                        match out.read(&mut buf) {
                            Ok(0) | Err(_) => break,
                            Ok(n) => {
                                bytes.fetch_add(n as u64, Ordering::Relaxed);
                            }
                        }
                    }
                })
                .map_err(|e| BenchError::io("spawn bench-web-drain", e))?;
            b.drains.push(t);
        }
        Ok(b)
    }

    /// Archive bytes so far, and the seconds since the start.
    pub(crate) fn progress(&self) -> (u64, f64) {
        (
            self.bytes.load(Ordering::Relaxed),
            self.started.elapsed().as_secs_f64(),
        )
    }

    /// Fails if a stream ended (tar failed: the mount is broken or a file is missing).
    pub(crate) fn check(&mut self) -> Result<(), BenchError> {
        for c in &mut self.children {
            if let Ok(Some(st)) = c.try_wait() {
                return Err(BenchError::scenario(format!(
                    "a backup stream (tar) ended: {st}"
                )));
            }
        }
        Ok(())
    }
}

impl Drop for Backups {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for c in &mut self.children {
            stop_group(c);
        }
        for t in self.drains.drain(..) {
            let _ = t.join();
        }
    }
}

/// What one `wrk` run measured.
#[derive(Debug, Clone, Copy)]
pub(crate) struct WrkRun {
    pub(crate) rps: f64,
    pub(crate) avg_ms: f64,
    pub(crate) p99_ms: f64,
    pub(crate) requests: u64,
}

/// The Lua script: a random page per request, and a summary line `wrk` prints at the end.
fn wrk_script(pages: usize) -> String {
    format!(
        "request = function()\n  return wrk.format(nil, string.format(\"/p%02d.html\", \
         math.random(0, {last})))\nend\n\
         done = function(summary, latency, requests)\n  local e = summary.errors\n  \
         io.write(string.format(\"BENCH-WEB %d %d %.1f %.1f %d\\n\", summary.requests, \
         summary.duration, latency.mean, latency:percentile(99), e.connect + e.read + e.write \
         + e.status + e.timeout))\nend\n",
        last = pages - 1
    )
}

/// Runs `wrk` (1 thread, `connections` connections) for `seconds` against `addr`.
pub(crate) fn wrk(
    work: &Path,
    addr: SocketAddr,
    pages: usize,
    connections: usize,
    seconds: u64,
) -> Result<WrkRun, BenchError> {
    let script = work.join("pages.lua");
    std::fs::write(&script, wrk_script(pages))
        .map_err(|e| BenchError::io(script.display().to_string(), e))?;
    let out = Command::new("wrk")
        .args(["-t1", &format!("-c{connections}"), &format!("-d{seconds}s")])
        .args(["--timeout", "30s", "-s"])
        .arg(&script)
        .arg(format!("http://{addr}/"))
        .stdin(Stdio::null())
        .output()
        .map_err(|e| BenchError::io("wrk", e))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("BENCH-WEB "))
        .ok_or_else(|| {
            BenchError::tool(format!(
                "wrk printed no summary ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        })?;
    let f: Vec<f64> = line
        .split_whitespace()
        .map(|x| {
            x.parse::<f64>()
                .map_err(|e| BenchError::tool(format!("wrk summary `{line}`: {e}")))
        })
        .collect::<Result<_, _>>()?;
    let [requests, duration_us, mean_us, p99_us, errors] = f[..] else {
        return Err(BenchError::scenario(format!(
            "wrk summary `{line}`: five numbers expected"
        )));
    };
    if errors > 0.0 {
        return Err(BenchError::scenario(format!(
            "wrk: {errors} of {requests} requests failed (see nginx-error.log)"
        )));
    }
    if requests < 1.0 || duration_us <= 0.0 {
        return Err(BenchError::scenario("wrk completed no request"));
    }
    Ok(WrkRun {
        rps: requests / (duration_us / 1e6),
        avg_ms: mean_us / 1e3,
        p99_ms: p99_us / 1e3,
        requests: requests as u64,
    })
}

/// The 1-, 5- and 15-minute load averages.
pub(crate) fn loadavg() -> [f64; 3] {
    let s = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let mut it = s.split_whitespace().map(|x| x.parse().unwrap_or(0.0));
    [
        it.next().unwrap_or(0.0),
        it.next().unwrap_or(0.0),
        it.next().unwrap_or(0.0),
    ]
}

/// Writes the work tree under `backing`: `www/pNN.html` (`pages` of `page_bytes`) and
/// `bulk/dJ/fK` (eight parts of files from 4 KiB to 1 MiB, spread evenly on a log scale, a
/// source tree's mix, until `bulk_bytes`). Returns the part names.
pub(crate) fn write_tree(
    backing: &Path,
    pages: usize,
    page_bytes: u64,
    bulk_bytes: u64,
) -> Result<Vec<String>, BenchError> {
    let www = backing.join("www");
    std::fs::create_dir_all(&www).map_err(|e| BenchError::io(format!("{}", www.display()), e))?;
    for i in 0..pages {
        super::fuse::write_random_file(&www.join(format!("p{i:02}.html")), page_bytes)?;
    }
    let parts: Vec<String> = (0..8).map(|j| format!("d{j}")).collect();
    for p in &parts {
        let d = backing.join("bulk").join(p);
        std::fs::create_dir_all(&d).map_err(|e| BenchError::io(format!("{}", d.display()), e))?;
    }
    let (mut total, mut k) = (0u64, 0usize);
    while total < bulk_bytes {
        // 4 KiB × 256^(x), x walking [0, 1) in 97 steps: sizes spread evenly on a log scale.
        let x = (k * 37 % 97) as f64 / 97.0;
        let size = ((4096.0 * 256f64.powf(x)) as u64)
            .min(bulk_bytes - total)
            .max(1);
        let path = backing
            .join("bulk")
            .join(&parts[k % parts.len()])
            .join(format!("f{k:05}"));
        super::fuse::write_random_file(&path, size)?;
        total += size;
        k += 1;
    }
    Ok(parts)
}
