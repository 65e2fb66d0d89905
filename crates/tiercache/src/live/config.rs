//! Mount settings: `tiercache mount` flags over an optional TOML file (`--config`); flags win.
//!
//! TOML keys (all optional) mirror the flags: `memory`, `block_size`, `priority` (list),
//! `priority_recursive` (list), `partition`, `omega`, `t_protected`, `t_normal`, `b_pmin`,
//! `b_nmin`, `policy`, `emulate`, `kernel_cache`, `allow_other`, `trace_out`, `metrics`,
//! `readahead`, `flush_interval_ms`, `dirty_expire_ms`, `threads`, `entry_timeout`,
//! `attr_timeout`. An unknown key or a bad value
//! is an error naming the file and line.

use super::size::parse_size;
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// Everything the TOML file may say.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    pub memory: Option<SizeValue>,
    pub block_size: Option<SizeValue>,
    #[serde(default)]
    pub priority: Vec<PathBuf>,
    #[serde(default)]
    pub priority_recursive: Vec<PathBuf>,
    pub partition: Option<String>,
    pub omega: Option<u64>,
    pub t_protected: Option<f64>,
    pub t_normal: Option<f64>,
    pub b_pmin: Option<SizeOrPercent>,
    pub b_nmin: Option<u64>,
    pub policy: Option<String>,
    pub emulate: Option<String>,
    pub kernel_cache: Option<bool>,
    pub allow_other: Option<bool>,
    pub trace_out: Option<PathBuf>,
    pub metrics: Option<String>,
    pub readahead: Option<u32>,
    pub flush_interval_ms: Option<u64>,
    pub dirty_expire_ms: Option<u64>,
    pub threads: Option<usize>,
    pub entry_timeout: Option<f64>,
    pub attr_timeout: Option<f64>,
}

/// A size written as a number of bytes (`memory = 268435456`: a bare number counts bytes) or a
/// string with a unit (`memory = "256M"`).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum SizeValue {
    Bytes(u64),
    Text(String),
}

impl SizeValue {
    /// Written without a unit (a TOML integer, or a string of digits): a number of bytes.
    pub fn is_bare(&self) -> bool {
        match self {
            SizeValue::Bytes(_) => true,
            SizeValue::Text(t) => t.trim().bytes().all(|b| b.is_ascii_digit()),
        }
    }
    pub fn bytes(&self) -> Result<u64, String> {
        match self {
            SizeValue::Bytes(b) => Ok(*b),
            SizeValue::Text(t) => parse_size(t),
        }
    }
}

/// `b_pmin = 300` or `b_pmin = "30%"`.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum SizeOrPercent {
    Blocks(u64),
    Text(String),
}

impl SizeOrPercent {
    pub fn as_text(&self) -> String {
        match self {
            SizeOrPercent::Blocks(b) => b.to_string(),
            SizeOrPercent::Text(t) => t.clone(),
        }
    }
}

/// Reads and parses `path`; errors are one line: `FILE:LINE: message`.
pub fn load(path: &Path) -> Result<FileConfig, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    parse(&text).map_err(|(line, msg)| format!("{}:{line}: {msg}", path.display()))
}

/// Parses TOML text; the error carries the 1-based line.
pub fn parse(text: &str) -> Result<FileConfig, (usize, String)> {
    toml::from_str::<FileConfig>(text).map_err(|e| {
        let line = e.span().map_or(1, |s| {
            text[..s.start.min(text.len())].matches('\n').count() + 1
        });
        (line, e.message().trim().replace('\n', " "))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_known_keys() {
        let c =
            parse("memory = \"64M\"\npriority = [\"www/top\"]\nb_pmin = \"30%\"\nomega = 100\n")
                .unwrap();
        assert_eq!(c.memory.unwrap().bytes().unwrap(), 64 << 20);
        assert_eq!(c.priority, vec![PathBuf::from("www/top")]);
        assert_eq!(c.b_pmin.unwrap().as_text(), "30%");
    }

    #[test]
    fn unknown_key_names_its_line() {
        let (line, msg) = parse("memory = \"64M\"\n\ncolour = \"red\"\n").unwrap_err();
        assert_eq!(line, 3);
        assert!(msg.contains("colour"), "{msg}");
        let (line, _) = parse("memory = \"64M\"\nomega = \"many\"\n").unwrap_err();
        assert_eq!(line, 2);
    }
}
