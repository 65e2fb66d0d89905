//! `--metrics ADDR`: Prometheus text exposition (format 0.0.4) over plain HTTP, any path.
//! A tiny blocking server on its own thread: scrapes are rare and small.

use std::io::{self, BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::time::Duration;

/// Renders the current metrics text.
pub type Render = Arc<dyn Fn() -> String + Send + Sync>;

/// Serves an already bound listener (bound before mounting, so a bad address mounts nothing)
/// on a background thread.
pub fn serve_listener(listener: TcpListener, render: Render) -> io::Result<std::net::SocketAddr> {
    let local = listener.local_addr()?;
    std::thread::Builder::new()
        .name("tc-metrics".into())
        .spawn(move || {
            for conn in listener.incoming().flatten() {
                // One thread per scrape, so a slow or idle client delays nobody else.
                let render = Arc::clone(&render);
                let _ = std::thread::Builder::new()
                    .name("tc-metrics-conn".into())
                    .spawn(move || answer(conn, &render));
            }
        })?;
    Ok(local)
}

/// Longest request head read; the rest is ignored.
const MAX_HEAD: u64 = 8 << 10;

fn answer(stream: TcpStream, render: &Render) -> io::Result<()> {
    use std::io::Read as _;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    stream.set_write_timeout(Some(Duration::from_secs(5)))?;
    // At most MAX_HEAD bytes, so a client sending an endless line costs no memory.
    let mut reader = BufReader::new(stream.try_clone()?.take(MAX_HEAD));
    let mut line = String::new();
    // Read the request head up to the blank line; the path does not matter.
    loop {
        line.clear();
        if reader.read_line(&mut line)? == 0 || line == "\r\n" || line == "\n" {
            break;
        }
    }
    let body = render();
    let mut w = stream;
    write!(
        w,
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

/// Appends one metric with HELP and TYPE lines.
pub fn metric(out: &mut String, name: &str, kind: &str, help: &str, samples: &[(&str, f64)]) {
    use std::fmt::Write as _;
    let _ = writeln!(out, "# HELP tiercache_{name} {help}");
    let _ = writeln!(out, "# TYPE tiercache_{name} {kind}");
    for (labels, v) in samples {
        if labels.is_empty() {
            let _ = writeln!(out, "tiercache_{name} {v}");
        } else {
            let _ = writeln!(out, "tiercache_{name}{{{labels}}} {v}");
        }
    }
}
