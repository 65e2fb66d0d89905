//! A minimal `log` backend: `2026-11-21T08:00:00Z LEVEL message` lines on stderr (the daemon's
//! stderr is its log file).

use log::{Level, Log, Metadata, Record};
use std::io::Write;
use std::time::{SystemTime, UNIX_EPOCH};

struct StderrLog {
    level: Level,
}

impl Log for StderrLog {
    fn enabled(&self, m: &Metadata<'_>) -> bool {
        m.level() <= self.level
    }
    fn log(&self, r: &Record<'_>) {
        if self.enabled(r.metadata()) {
            let _ = writeln!(
                std::io::stderr().lock(),
                "{} {:<5} {}",
                utc_now(),
                r.level(),
                r.args()
            );
        }
    }
    fn flush(&self) {}
}

/// Installs the logger once; `TIERCACHE_LOG=debug` raises the level.
pub fn init() {
    let level = match std::env::var("TIERCACHE_LOG").as_deref() {
        Ok("debug") => Level::Debug,
        Ok("trace") => Level::Trace,
        Ok("warn") => Level::Warn,
        _ => Level::Info,
    };
    if log::set_boxed_logger(Box::new(StderrLog { level })).is_ok() {
        log::set_max_level(level.to_level_filter());
    }
}

/// `YYYY-MM-DDTHH:MM:SSZ` without a date library (civil-from-days, H. Hinnant).
pub fn utc_now() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs()) as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}
