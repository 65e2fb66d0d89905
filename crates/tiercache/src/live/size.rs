//! Human sizes: `4096`, `4K`, `256M`, `1.5G`, `2GiB` (binary multiples; a bare number is bytes).

use super::error::ConfigError;

/// Parses a size in bytes; the error names the text.
pub fn parse_size(s: &str) -> Result<u64, ConfigError> {
    let not_a_size =
        || ConfigError::invalid(format!("`{s}` is not a size (use e.g. 4096, 4K, 256M, 1G)"));
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        "t" | "tb" | "tib" => 1 << 40,
        _ => return Err(not_a_size()),
    };
    let v: f64 = num.parse().map_err(|_| not_a_size())?;
    let bytes = v * mult as f64;
    if !bytes.is_finite() || bytes < 0.0 || bytes > u64::MAX as f64 / 2.0 {
        return Err(ConfigError::invalid(format!("`{s}` is out of range")));
    }
    Ok(bytes as u64)
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn parses_units_and_rejects_garbage() {
        assert_eq!(parse_size("4096").ok(), Some(4096));
        assert_eq!(parse_size("4K").ok(), Some(4096));
        assert_eq!(parse_size("256MiB").ok(), Some(256 << 20));
        assert_eq!(parse_size("1.5G").ok(), Some(3 << 29));
        for bad in ["", "12Q", "abc", "-1M", "1..2K"] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
    }
}
