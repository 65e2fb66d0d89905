//! memcached processes on loopback for tests, benchmarks and demos (`tiercache bench remote`):
//! a real server, started on a free port and killed on drop. Not used by a mount.

use std::io;
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Why a local memcached could not be started.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LocalError {
    #[error("no free loopback port: {0}")]
    NoPort(#[source] io::Error),
    #[error("cannot run {bin:?}: {source} — install memcached (>= 1.6, e.g. `apt-get install memcached`)")]
    Spawn {
        bin: String,
        #[source]
        source: io::Error,
    },
    /// The port was taken, again and again (`port` the last one tried).
    #[error("memcached could not listen on port {port}")]
    PortTaken { port: u16 },
    #[error("memcached on port {port} did not start in 5 s")]
    Timeout { port: u16 },
}

/// The memcached binary: `$MEMCACHED` or `memcached` on the PATH.
fn memcached_bin() -> String {
    std::env::var("MEMCACHED").unwrap_or_else(|_| "memcached".to_string())
}

/// A free loopback port (bound and released; the caller binds it right after).
pub fn free_port() -> Result<u16, LocalError> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(LocalError::NoPort)
}

/// A memcached process on a loopback port (UDP off, 64 MiB unless said otherwise), killed on
/// drop.
#[derive(Debug)]
pub struct LocalMemcached {
    child: Option<Child>,
    pub port: u16,
    memory_mb: u32,
    /// Extra command-line arguments (e.g. `-I 2m`).
    args: Vec<String>,
}

impl LocalMemcached {
    /// Starts memcached with 64 MiB on a free loopback port (retrying when another process
    /// took the port first).
    pub fn start() -> Result<Self, LocalError> {
        Self::start_with(64)
    }

    /// Like [`LocalMemcached::start`] with `memory_mb` MiB (`-m`).
    pub fn start_with(memory_mb: u32) -> Result<Self, LocalError> {
        Self::start_with_args(memory_mb, &[])
    }

    /// Like [`LocalMemcached::start_with`], passing `args` to memcached too (e.g.
    /// `["-I", "2m"]` for larger items).
    pub fn start_with_args(memory_mb: u32, args: &[&str]) -> Result<Self, LocalError> {
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        let mut port = 0;
        for _ in 0..20 {
            port = free_port()?;
            if let Some(m) = Self::try_start_on(port, memory_mb, &args)? {
                return Ok(m);
            }
        }
        Err(LocalError::PortTaken { port })
    }

    /// Starts memcached on `port` and waits until it serves.
    pub fn start_on(port: u16) -> Result<Self, LocalError> {
        Self::try_start_on(port, 64, &[])?.ok_or(LocalError::PortTaken { port })
    }

    /// `Ok(None)` when the process exits at once (the port is taken).
    fn try_start_on(
        port: u16,
        memory_mb: u32,
        args: &[String],
    ) -> Result<Option<Self>, LocalError> {
        // Serialises start-ups within this process so two never race for one port.
        static START: Mutex<()> = Mutex::new(());
        let _g = START.lock().unwrap_or_else(|e| e.into_inner());
        let child = Command::new(memcached_bin())
            .args(["-U", "0", "-l", "127.0.0.1", "-u", "root", "-m"])
            .arg(memory_mb.to_string())
            .arg("-p")
            .arg(port.to_string())
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|source| LocalError::Spawn {
                bin: memcached_bin(),
                source,
            })?;
        let mut m = LocalMemcached {
            child: Some(child),
            port,
            memory_mb,
            args: args.to_vec(),
        };
        let until = Instant::now() + Duration::from_secs(5);
        loop {
            if m.exited() {
                return Ok(None);
            }
            if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                // Another process may own the port: ours exits at once when its bind fails.
                std::thread::sleep(Duration::from_millis(30));
                return Ok(if m.exited() { None } else { Some(m) });
            }
            if Instant::now() >= until {
                return Err(LocalError::Timeout { port });
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn exited(&mut self) -> bool {
        match self.child.as_mut().map(|c| c.try_wait()) {
            Some(Ok(Some(_))) => {
                self.child = None;
                true
            }
            _ => false,
        }
    }

    /// `127.0.0.1:PORT`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Kills the process (SIGKILL) and reaps it.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts a fresh (empty) server on the same port after [`LocalMemcached::kill`].
    pub fn restart(&mut self) -> Result<(), LocalError> {
        let args = self.args.clone();
        self.restart_with_args(&args)
    }

    /// Like [`LocalMemcached::restart`] with other extra arguments (e.g. a smaller `-I`).
    pub fn restart_with_args<S: AsRef<str>>(&mut self, args: &[S]) -> Result<(), LocalError> {
        self.kill();
        let args: Vec<String> = args.iter().map(|a| a.as_ref().to_string()).collect();
        let m = Self::try_start_on(self.port, self.memory_mb, &args)?
            .ok_or(LocalError::PortTaken { port: self.port })?;
        *self = m;
        Ok(())
    }
}

impl Drop for LocalMemcached {
    fn drop(&mut self) {
        self.kill();
    }
}
