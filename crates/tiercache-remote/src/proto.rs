//! The memcached meta protocol (memcached ≥ 1.6): encoding the few commands the tier sends and
//! parsing replies incrementally from a byte buffer.
//!
//! Commands: `mg <key> v` (get with value), `ms <key> <len> [q] [O<n>]` (set), `md <key> [q]
//! [O<n>]` (delete), `mn` (no-op; ends a quiet pipeline), plus `version` and `stats` of the
//! text protocol. Replies: `VA <len> <flags>` + data, `HD`, `EN`, `NF`, `NS`, `EX`, `MN`,
//! `VERSION …`, `SERVER_ERROR …`, `CLIENT_ERROR …`, `ERROR`. Anything else, a line longer than
//! [`MAX_LINE`], a value longer than the caller allows or a data block not ended by `\r\n` is
//! malformed: the caller must drop the connection (the stream is out of sync).

use std::fmt::Write as _;

/// Longest reply line accepted (memcached's own lines are far shorter).
pub const MAX_LINE: usize = 2048;

/// Longest key memcached accepts.
pub const MAX_KEY: usize = 250;

/// One parsed reply. `opaque` is the `O` flag's token when the command carried one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// `VA`: the value follows.
    Value { data: Vec<u8>, opaque: Option<u32> },
    /// `HD`: success, no value.
    Done { opaque: Option<u32> },
    /// `EN`: miss (`mg`).
    Miss { opaque: Option<u32> },
    /// `NF`: not found (`md`).
    NotFound { opaque: Option<u32> },
    /// `NS`: not stored (`ms`).
    NotStored { opaque: Option<u32> },
    /// `EX`: CAS mismatch.
    Exists { opaque: Option<u32> },
    /// `MN`: end of a pipeline.
    NoOp,
    /// `VERSION x`.
    Version(String),
    /// `SERVER_ERROR msg`.
    ServerError(String),
    /// `CLIENT_ERROR msg` (the server may have skipped or misread our bytes).
    ClientError(String),
    /// `ERROR` (unknown command).
    Error,
}

impl Reply {
    /// Whether the reply is one of the three error kinds.
    pub fn is_error(&self) -> bool {
        matches!(
            self,
            Reply::ServerError(_) | Reply::ClientError(_) | Reply::Error
        )
    }
}

/// Whether `key` is a valid memcached key: 1..=250 bytes, printable ASCII, no spaces.
pub fn valid_key(key: &str) -> bool {
    !key.is_empty() && key.len() <= MAX_KEY && key.bytes().all(|b| b.is_ascii_graphic())
}

/// Appends `mg <key> v\r\n`.
pub fn encode_get(out: &mut Vec<u8>, key: &str) {
    out.extend_from_slice(b"mg ");
    out.extend_from_slice(key.as_bytes());
    out.extend_from_slice(b" v\r\n");
}

/// Appends `ms <key> <len>[ q][ O<n>]\r\n<data>\r\n`.
pub fn encode_set(out: &mut Vec<u8>, key: &str, data: &[u8], quiet: bool, opaque: Option<u32>) {
    let mut line = format!("ms {key} {}", data.len());
    push_flags(&mut line, quiet, opaque);
    out.extend_from_slice(line.as_bytes());
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
}

/// Appends `md <key>[ q][ O<n>]\r\n`.
pub fn encode_delete(out: &mut Vec<u8>, key: &str, quiet: bool, opaque: Option<u32>) {
    let mut line = format!("md {key}");
    push_flags(&mut line, quiet, opaque);
    out.extend_from_slice(line.as_bytes());
}

/// Appends `mn\r\n`.
pub fn encode_noop(out: &mut Vec<u8>) {
    out.extend_from_slice(b"mn\r\n");
}

fn push_flags(line: &mut String, quiet: bool, opaque: Option<u32>) {
    if quiet {
        line.push_str(" q");
    }
    if let Some(o) = opaque {
        // Writing to a String cannot fail.
        let _ = write!(line, " O{o}");
    }
    line.push_str("\r\n");
}

/// A reply the meta protocol does not allow (the connection that sent it is dropped).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProtoError {
    #[error("reply line longer than {MAX_LINE} bytes")]
    LineTooLong,
    /// The line's first bytes, lossily decoded.
    #[error("reply line with non-printable bytes: {0:?}")]
    NonPrintable(String),
    #[error("VA without a length")]
    NoLength,
    #[error("VA with a bad length {0:?}")]
    BadLength(String),
    #[error("VA of {len} bytes, at most {max} expected")]
    ValueTooLong { len: usize, max: usize },
    #[error("VA of {0} bytes: longer than any buffer")]
    ValueUnbounded(usize),
    #[error("value not followed by \\r\\n")]
    ValueUnterminated,
    #[error("bad meta flag {0:?}")]
    BadFlag(String),
    #[error("bad opaque token {0:?}")]
    BadOpaque(String),
    /// A key the protocol cannot carry (too long, spaces or control bytes); never sent.
    #[error("invalid key {0:?}")]
    InvalidKey(String),
    /// A well-formed reply or line that does not answer what was asked; says what it was.
    #[error("unexpected {0}")]
    Unexpected(String),
}

/// Position of the first `\r\n` in `buf`, if any.
fn find_crlf(buf: &[u8]) -> Option<usize> {
    buf.windows(2).position(|w| w == b"\r\n")
}

/// Reads one line (without `\r\n`) from the front of `buf`: `Ok(None)` when more bytes are
/// needed; an error for an over-long line or one with bytes that are not printable ASCII.
pub fn parse_line(buf: &[u8]) -> Result<Option<(&str, usize)>, ProtoError> {
    let window = &buf[..buf.len().min(MAX_LINE + 2)];
    let Some(pos) = find_crlf(window) else {
        if buf.len() >= MAX_LINE + 2 {
            return Err(ProtoError::LineTooLong);
        }
        return Ok(None);
    };
    let line = &buf[..pos];
    if !line.iter().all(|&b| b == b' ' || b.is_ascii_graphic()) {
        return Err(ProtoError::NonPrintable(
            String::from_utf8_lossy(&line[..line.len().min(64)]).into_owned(),
        ));
    }
    // Printable ASCII is UTF-8.
    let text = std::str::from_utf8(line)
        .map_err(|_| ProtoError::NonPrintable(String::from_utf8_lossy(line).into_owned()))?;
    Ok(Some((text, pos + 2)))
}

/// Parses one reply from the front of `buf`. `Ok(None)`: incomplete, read more. On success
/// returns the reply and how many bytes it took. `max_value` bounds a `VA` length.
pub fn parse_reply(buf: &[u8], max_value: usize) -> Result<Option<(Reply, usize)>, ProtoError> {
    let Some((line, used)) = parse_line(buf)? else {
        return Ok(None);
    };
    let mut tokens = line.split(' ').filter(|t| !t.is_empty());
    let code = tokens.next().unwrap_or("");
    let rest_after = |prefix: &str| line.get(prefix.len()..).unwrap_or("").trim().to_string();
    let reply = match code {
        "VA" => {
            let len_tok = tokens.next().ok_or(ProtoError::NoLength)?;
            let bad_length = || ProtoError::BadLength(len_tok.to_string());
            if !len_tok.bytes().all(|b| b.is_ascii_digit()) {
                return Err(bad_length());
            }
            let len: usize = len_tok.parse().map_err(|_| bad_length())?;
            if len > max_value {
                return Err(ProtoError::ValueTooLong {
                    len,
                    max: max_value,
                });
            }
            let opaque = parse_flags(tokens)?;
            // Checked: under a bound near `usize::MAX` the sum would wrap (and slicing panic).
            let Some(need) = used.checked_add(len).and_then(|n| n.checked_add(2)) else {
                return Err(ProtoError::ValueUnbounded(len));
            };
            if buf.len() < need {
                return Ok(None);
            }
            if &buf[used + len..need] != b"\r\n" {
                return Err(ProtoError::ValueUnterminated);
            }
            let data = buf[used..used + len].to_vec();
            return Ok(Some((Reply::Value { data, opaque }, need)));
        }
        "HD" => Reply::Done {
            opaque: parse_flags(tokens)?,
        },
        "EN" => Reply::Miss {
            opaque: parse_flags(tokens)?,
        },
        "NF" => Reply::NotFound {
            opaque: parse_flags(tokens)?,
        },
        "NS" => Reply::NotStored {
            opaque: parse_flags(tokens)?,
        },
        "EX" => Reply::Exists {
            opaque: parse_flags(tokens)?,
        },
        "MN" if tokens.next().is_none() => Reply::NoOp,
        "VERSION" => Reply::Version(rest_after("VERSION")),
        "SERVER_ERROR" => Reply::ServerError(rest_after("SERVER_ERROR")),
        "CLIENT_ERROR" => Reply::ClientError(rest_after("CLIENT_ERROR")),
        "ERROR" => Reply::Error,
        _ => {
            return Err(ProtoError::Unexpected(format!(
                "reply {:?}",
                &line[..line.len().min(64)]
            )))
        }
    };
    Ok(Some((reply, used)))
}

/// Meta flags after the code: each a letter and an optional token; returns the `O` token.
fn parse_flags<'a>(tokens: impl Iterator<Item = &'a str>) -> Result<Option<u32>, ProtoError> {
    let mut opaque = None;
    for t in tokens {
        let mut chars = t.chars();
        let flag = chars.next().unwrap_or(' ');
        if !flag.is_ascii_alphabetic() {
            return Err(ProtoError::BadFlag(t.to_string()));
        }
        if flag == 'O' {
            let v: u32 = chars
                .as_str()
                .parse()
                .map_err(|_| ProtoError::BadOpaque(t.to_string()))?;
            opaque = Some(v);
        }
    }
    Ok(opaque)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Captured from memcached 1.6.18 for: `ms k1 5 T0`/`hello`, `mg k1 v`, `mg k2 v`,
    /// `mg k1 v q`, `mg k2 v q`, `ms k3 2 q`, `md k9 q`, `md k3 q`, `md k3`, `mn`,
    /// `mg k1 v O12`, `version`, `bogus`, `ms k4 2` with 3 data bytes, `mn`.
    const CAPTURED: &[u8] = b"HD\r\nVA 5\r\nhello\r\nEN\r\nVA 5\r\nhello\r\nNF\r\nNF\r\nMN\r\nVA 5 O12\r\nhello\r\nVERSION 1.6.18\r\nERROR\r\nCLIENT_ERROR bad data chunk\r\nERROR\r\nMN\r\n";

    fn all(mut buf: &[u8]) -> Vec<Reply> {
        let mut out = Vec::new();
        while !buf.is_empty() {
            let (r, n) = parse_reply(buf, 1 << 20).unwrap().unwrap();
            out.push(r);
            buf = &buf[n..];
        }
        out
    }

    #[test]
    fn parses_captured_replies() {
        let hello = || b"hello".to_vec();
        assert_eq!(
            all(CAPTURED),
            vec![
                Reply::Done { opaque: None },
                Reply::Value {
                    data: hello(),
                    opaque: None
                },
                Reply::Miss { opaque: None },
                Reply::Value {
                    data: hello(),
                    opaque: None
                },
                Reply::NotFound { opaque: None },
                Reply::NotFound { opaque: None },
                Reply::NoOp,
                Reply::Value {
                    data: hello(),
                    opaque: Some(12)
                },
                Reply::Version("1.6.18".into()),
                Reply::Error,
                Reply::ClientError("bad data chunk".into()),
                Reply::Error,
                Reply::NoOp,
            ]
        );
    }

    #[test]
    fn incomplete_input_asks_for_more_at_every_cut() {
        // Every proper prefix that ends inside a reply is "need more", never an error.
        let first = b"VA 5 O7\r\nhello\r\n";
        for cut in 0..first.len() {
            assert_eq!(parse_reply(&first[..cut], 100).unwrap(), None, "cut {cut}");
        }
        let (r, n) = parse_reply(first, 100).unwrap().unwrap();
        assert_eq!(n, first.len());
        assert_eq!(
            r,
            Reply::Value {
                data: b"hello".to_vec(),
                opaque: Some(7)
            }
        );
    }

    #[test]
    fn binary_values_are_kept_exactly() {
        let data: Vec<u8> = (0..=255u8).chain([b'\r', b'\n', 0]).collect();
        let mut buf = format!("VA {}\r\n", data.len()).into_bytes();
        buf.extend_from_slice(&data);
        buf.extend_from_slice(b"\r\n");
        let (r, _) = parse_reply(&buf, 1000).unwrap().unwrap();
        assert_eq!(r, Reply::Value { data, opaque: None });
    }

    #[test]
    fn malformed_replies_are_errors() {
        for bad in [
            &b"XX\r\n"[..],
            b"VA\r\n",
            b"VA -1\r\n",
            b"VA 1x\r\n",
            b"VA 3\r\nabcXY",
            b"HD 7\r\n",
            b"HD Ofoo\r\n",
            b"MN extra\r\n",
            b"\x00\x01\r\n",
            b"hello world\r\n",
        ] {
            assert!(parse_reply(bad, 100).is_err(), "{bad:?}");
        }
        assert!(parse_reply(b"VA 101\r\n", 100).is_err(), "over max_value");
        let long = vec![b'A'; MAX_LINE + 10];
        assert!(parse_reply(&long, 100).is_err(), "over-long line");
    }

    #[test]
    fn encodes_commands() {
        let mut out = Vec::new();
        encode_get(&mut out, "k");
        encode_set(&mut out, "k", b"ab", true, Some(3));
        encode_delete(&mut out, "k", true, None);
        encode_noop(&mut out);
        assert_eq!(out, b"mg k v\r\nms k 2 q O3\r\nab\r\nmd k q\r\nmn\r\n");
    }

    #[test]
    fn key_validity() {
        assert!(valid_key("tc0123abcdef"));
        assert!(!valid_key(""));
        assert!(!valid_key("a b"));
        assert!(!valid_key("a\nb"));
        assert!(!valid_key(&"k".repeat(251)));
    }
}
