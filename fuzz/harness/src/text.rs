//! The text format of requests in fuzz inputs (the `route` target), close to HTTP/1.1 so
//! seeds are easy to write and read:
//!
//! ```text
//! POST /v1/webhooks?x=1
//! Authorization: Bearer $KEY
//! Content-Type: application/json
//! Idempotency-Key: k1
//! @advance: 61000
//!
//! {"url":"https://example.com/hook","eventTypes":["load.created"]}
//! ===
//! GET /v1/webhooks?limit=1
//! Authorization: Bearer $KEY
//! ```
//!
//! - Requests are separated by a line `===`; at most [`MAX_REQUESTS`] are used.
//! - The first line is the method and the target (path and query); then header lines
//!   `Name: value` (names are lower-cased, values kept as bytes, not necessarily UTF-8);
//!   an empty line; the body, byte for byte, up to the separator.
//! - `$NAME` placeholders in the target and in header values are replaced with the world's
//!   keys and ids ([`crate::world::World::vars`]: `$KEY`, `$KEY2`, `$ADMIN`, `$SUB`,
//!   `$OTHER`, `$LASTSUB`, `$DLV`, `$CUR`, ...), so inputs reach authenticated paths.
//!   Bodies are not touched.
//! - Header lines starting with `@` are directives to the harness, not headers:
//!   `@advance: <ms>` moves the clock before the request (negative: backwards);
//!   `@send: 200 503 410 timeout` scripts the network's answers (cycled) for a tick;
//!   `@fault: <n>` makes the store's n-th operation during this request fail;
//!   `@truncated` marks the body as cut off by the shell's read limit.

use crate::world::Outcome;
use edgehook_component::model::http::Request;

/// Most requests one input may hold.
pub const MAX_REQUESTS: usize = 8;

/// One request and its directives.
#[derive(Debug, Clone)]
pub struct Step {
    /// The request.
    pub request: Request,
    /// Clock movement before the request, in ms.
    pub advance_ms: i64,
    /// The network's answers for this request, if scripted.
    pub send: Vec<Outcome>,
    /// The store operation (1-based, counted from the request's start) that fails.
    pub fault_at: Option<u64>,
}

/// Splits an input into request blocks (at most [`MAX_REQUESTS`]).
pub fn blocks(data: &[u8]) -> Vec<&[u8]> {
    const SEP: &[u8] = b"\n===\n";
    let mut out = Vec::new();
    let mut rest = data;
    while out.len() < MAX_REQUESTS {
        match find(rest, SEP) {
            Some(i) => {
                out.push(&rest[..i]);
                rest = &rest[i + SEP.len()..];
            }
            None => {
                out.push(rest);
                break;
            }
        }
    }
    out
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Replaces `$NAME` placeholders (`vars` longest first, as [`crate::world::World::vars`]
/// gives them).
pub fn substitute(raw: &[u8], vars: &[(&str, String)]) -> Vec<u8> {
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        if raw[i] == b'$'
            && let Some((name, value)) = vars
                .iter()
                .find(|(name, _)| raw[i..].starts_with(name.as_bytes()))
        {
            out.extend_from_slice(value.as_bytes());
            i += name.len();
            continue;
        }
        out.push(raw[i]);
        i += 1;
    }
    out
}

fn trim_cr(line: &[u8]) -> &[u8] {
    line.strip_suffix(b"\r").unwrap_or(line)
}

fn trim_start(mut s: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = s {
        s = rest;
    }
    s
}

/// Parses one block into a request, with placeholders replaced from `vars`.
pub fn parse_block(block: &[u8], vars: &[(&str, String)]) -> Step {
    let (head, body) = match find(block, b"\n\n") {
        Some(i) => (&block[..i], &block[i + 2..]),
        None => (block, &b""[..]),
    };
    let mut lines = head.split(|b| *b == b'\n').map(trim_cr);
    let request_line = lines.next().unwrap_or(b"");
    let (method, target) = match request_line.iter().position(|b| *b == b' ') {
        Some(i) => (&request_line[..i], &request_line[i + 1..]),
        None => (request_line, &b"/"[..]),
    };
    let method = String::from_utf8_lossy(method);
    let target = substitute(target, vars);
    let mut request = Request::new(&method, &String::from_utf8_lossy(&target));
    let mut step = Step {
        request: Request::default(),
        advance_ms: 0,
        send: Vec::new(),
        fault_at: None,
    };
    for line in lines {
        let (name, value) = match line.iter().position(|b| *b == b':') {
            Some(i) => (&line[..i], trim_start(&line[i + 1..])),
            None => (line, &b""[..]),
        };
        let name = String::from_utf8_lossy(name).trim().to_ascii_lowercase();
        let text = String::from_utf8_lossy(value);
        match name.as_str() {
            "" => {}
            "@advance" => step.advance_ms = text.trim().parse().unwrap_or(0),
            "@send" => {
                step.send = text
                    .split_whitespace()
                    .take(8)
                    .map(|w| w.parse::<u16>().map_err(|_| w.to_owned()))
                    .collect();
            }
            "@fault" => step.fault_at = text.trim().parse().ok().filter(|n| *n > 0),
            "@truncated" => request.body_truncated = true,
            _ if name.starts_with('@') => {}
            _ => request.headers.push((name, substitute(value, vars))),
        }
    }
    request.body = body.to_vec();
    step.request = request;
    step
}
