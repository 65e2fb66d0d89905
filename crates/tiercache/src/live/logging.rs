//! A minimal `log` backend: `2026-11-21T08:00:00Z LEVEL message` lines on stderr (the daemon's
//! stderr is its log file).

use log::{LevelFilter, Log, Metadata, Record};
use std::io::Write;
use std::time::{SystemTime, UNIX_EPOCH};

/// The level in force is `log::max_level()` (a reload changes it).
struct StderrLog;

impl Log for StderrLog {
    fn enabled(&self, m: &Metadata<'_>) -> bool {
        m.level() <= log::max_level()
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

/// `TIERCACHE_LOG`'s level, if set: it overrides the config file's `log_level`, as a flag
/// would.
pub fn env_level() -> Option<LevelFilter> {
    match std::env::var("TIERCACHE_LOG").as_deref() {
        Ok("debug") => Some(LevelFilter::Debug),
        Ok("trace") => Some(LevelFilter::Trace),
        Ok("warn") => Some(LevelFilter::Warn),
        Ok("info") => Some(LevelFilter::Info),
        Ok("error") => Some(LevelFilter::Error),
        _ => None,
    }
}

/// `error`, `warn`, `info`, `debug` or `trace`.
pub fn parse_level(s: &str) -> Result<LevelFilter, super::error::ConfigError> {
    match s {
        "error" => Ok(LevelFilter::Error),
        "warn" => Ok(LevelFilter::Warn),
        "info" => Ok(LevelFilter::Info),
        "debug" => Ok(LevelFilter::Debug),
        "trace" => Ok(LevelFilter::Trace),
        other => Err(super::error::ConfigError::invalid(format!(
            "unknown level `{other}` (expected error|warn|info|debug|trace)"
        ))),
    }
}

/// The level in force for a configured one: `TIERCACHE_LOG`, else `configured`, else info.
pub fn effective(configured: Option<LevelFilter>) -> LevelFilter {
    env_level().or(configured).unwrap_or(LevelFilter::Info)
}

/// Installs the logger once at `level` (see [`effective`]).
pub fn init(level: LevelFilter) {
    if log::set_boxed_logger(Box::new(StderrLog)).is_ok() {
        log::set_max_level(level);
    }
}

/// Changes the level in force (a reload).
pub fn set_level(level: LevelFilter) {
    log::set_max_level(level);
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
