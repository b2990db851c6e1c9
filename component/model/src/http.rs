//! Plain HTTP request and response values, free of any binding types. The shell converts
//! `wasi:http` resources to and from these.

use serde::Serialize;

/// An incoming HTTP request, fully read.
#[derive(Debug, Clone, Default)]
pub struct Request {
    /// Upper-case method name (`GET`, `POST`, ...).
    pub method: String,
    /// The path, without the query string.
    pub path: String,
    /// The raw query string, without the `?`.
    pub query: Option<String>,
    /// Header names in lower case, values as received.
    pub headers: Vec<(String, Vec<u8>)>,
    /// The body, up to the read limit.
    pub body: Vec<u8>,
    /// True when the body was longer than the shell was willing to read: the request is
    /// answered 413 whatever the route.
    pub body_truncated: bool,
    /// Whether it came over HTTPS (the host's scheme for it): cookies set in the answer are
    /// `Secure`, and URLs built from its `Host` are `https://`.
    pub tls: bool,
}

impl Request {
    /// A request with the given method and path and nothing else.
    pub fn new(method: &str, path_and_query: &str) -> Self {
        let (path, query) = match path_and_query.split_once('?') {
            Some((p, q)) => (p.to_owned(), Some(q.to_owned())),
            None => (path_and_query.to_owned(), None),
        };
        Request {
            method: method.to_ascii_uppercase(),
            path,
            query,
            ..Default::default()
        }
    }

    /// Adds a header (builder style).
    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers
            .push((name.to_ascii_lowercase(), value.as_bytes().to_vec()));
        self
    }

    /// Sets the body (builder style).
    pub fn body(mut self, body: impl Into<Vec<u8>>) -> Self {
        self.body = body.into();
        self
    }

    /// The first value of header `name` (lower case), if present and valid UTF-8.
    pub fn header_str(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .and_then(|(_, v)| std::str::from_utf8(v).ok())
    }

    /// The value of query parameter `name`, percent-decoded. `Err` when it is present but
    /// not valid percent-encoded UTF-8.
    pub fn query_param(&self, name: &str) -> Result<Option<String>, BadQuery> {
        let Some(query) = &self.query else {
            return Ok(None);
        };
        for pair in query.split('&') {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            if percent_decode(k)? == name {
                return percent_decode(v).map(Some);
            }
        }
        Ok(None)
    }
}

/// A query string that is not valid percent-encoded UTF-8.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BadQuery;

/// Decodes `%XX` escapes and `+` (as a space) in a query component.
fn percent_decode(s: &str) -> Result<String, BadQuery> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                // Exactly two hex digits (`from_str_radix` alone would also take `%+6`).
                let hex = bytes.get(i + 1..i + 3).ok_or(BadQuery)?;
                let digit = |b: u8| char::from(b).to_digit(16).ok_or(BadQuery);
                out.push(u8::try_from(digit(hex[0])? * 16 + digit(hex[1])?).map_err(|_| BadQuery)?);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).map_err(|_| BadQuery)
}

/// An HTTP response produced by the core.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// Status code.
    pub status: u16,
    /// Headers, names in lower case.
    pub headers: Vec<(String, String)>,
    /// Body bytes.
    pub body: Vec<u8>,
}

/// The body of every successful API response: `{"data": ..., "requestId": ...}`. Keys are
/// in the order `serde_json::json!` writes them (sorted), so bodies built either way are the
/// same bytes.
#[derive(Serialize)]
struct Envelope<'a, T: Serialize> {
    data: T,
    #[serde(rename = "requestId")]
    request_id: &'a str,
}

impl Response {
    /// A JSON response with the given status and body. A `#[derive(Serialize)]` body is
    /// written straight out; a `serde_json::Value` is built first (maps, strings) and then
    /// written, which costs the guest several times more on every request.
    pub fn json<T: Serialize + ?Sized>(status: u16, body: &T) -> Self {
        Self::json_bytes(status, serde_json::to_vec(body).unwrap_or_default())
    }

    /// The envelope of a successful response, `{"data": data, "requestId": request_id}`.
    pub fn data<T: Serialize>(status: u16, data: T, request_id: &str) -> Self {
        Self::json(status, &Envelope { data, request_id })
    }

    /// The envelope of a successful response around `data`, already written as JSON.
    pub fn data_json(status: u16, data: &[u8], request_id: &str) -> Self {
        let mut body = Vec::with_capacity(data.len() + request_id.len() + 24);
        body.extend_from_slice(b"{\"data\":");
        body.extend_from_slice(data);
        body.extend_from_slice(b",\"requestId\":");
        // Writing a string into a Vec cannot fail.
        let _ = serde_json::to_writer(&mut body, request_id);
        body.push(b'}');
        Self::json_bytes(status, body)
    }

    /// A JSON response whose body is already serialized.
    pub fn json_bytes(status: u16, body: Vec<u8>) -> Self {
        Response {
            status,
            headers: vec![("content-type".into(), "application/json".into())],
            body,
        }
    }

    /// Adds a header (builder style).
    pub fn with_header(mut self, name: &str, value: impl Into<String>) -> Self {
        self.headers.push((name.to_ascii_lowercase(), value.into()));
        self
    }

    /// The first value of header `name` (lower case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The body parsed as JSON (`Null` when it is not JSON); for tests and tools.
    pub fn json_body(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or(serde_json::Value::Null)
    }
}

/// How long a `Retry-After` value asks to wait, in ms from `now_ms` (RFC 9110 §10.2.3):
/// delay-seconds, or an HTTP-date (IMF-fixdate, `Sun, 06 Nov 1994 08:49:37 GMT`; a date in
/// the past is 0). `None` for anything else (the obsolete date forms too): a malformed value
/// is ignored.
pub fn retry_after_ms(value: &str, now_ms: u64) -> Option<u64> {
    let v = value.trim().as_bytes();
    if !v.is_empty() && v.len() <= 10 && v.iter().all(u8::is_ascii_digit) {
        return Some(std::str::from_utf8(v).ok()?.parse::<u64>().ok()? * 1000);
    }
    // "Sun, 06 Nov 1994 08:49:37 GMT": fixed positions.
    if v.len() != 29 || &v[3..5] != b", " || &v[25..] != b" GMT" {
        return None;
    }
    let num = |at: usize, len: usize| -> Option<u64> {
        let digits = v.get(at..at + len)?;
        digits.iter().try_fold(0u64, |n, d| {
            d.is_ascii_digit().then(|| n * 10 + u64::from(d - b'0'))
        })
    };
    const MONTHS: &[u8; 36] = b"JanFebMarAprMayJunJulAugSepOctNovDec";
    let month = (0..12).find(|m| MONTHS[m * 3..m * 3 + 3] == v[8..11])? as u64 + 1;
    let (day, year) = (num(5, 2)?, num(12, 4)?);
    let (h, m, s) = (num(17, 2)?, num(20, 2)?, num(23, 2)?);
    if !(1..=31).contains(&day) || h > 23 || m > 59 || s > 60 || v[16] != b' ' || v[19] != b':' {
        return None;
    }
    if year < 1970 {
        return Some(0); // long past
    }
    // Days since 1970-01-01 of a proleptic Gregorian date (March-based years).
    let (y, mo) = if month <= 2 {
        (year - 1, month + 9)
    } else {
        (year, month - 3)
    };
    let days = 365 * y + y / 4 - y / 100 + y / 400 + (153 * mo + 2) / 5 + day - 1 - 719_468;
    let at_ms = ((days * 24 + h) * 60 + m) * 60_000 + s * 1000;
    Some(at_ms.saturating_sub(now_ms))
}

#[cfg(test)]
mod tests {

    #[test]
    fn retry_after_takes_seconds_or_an_http_date_and_ignores_anything_else() {
        let now = 1_767_225_600_000; // 2026-01-01T00:00:00Z
        assert_eq!(retry_after_ms("120", now), Some(120_000));
        assert_eq!(retry_after_ms(" 0 ", now), Some(0));
        assert_eq!(
            retry_after_ms("Thu, 01 Jan 2026 00:02:30 GMT", now),
            Some(150_000)
        );
        assert_eq!(
            retry_after_ms("Wed, 31 Dec 2025 23:59:00 GMT", now),
            Some(0),
            "past"
        );
        assert_eq!(retry_after_ms("Thu, 01 Jan 1970 00:00:00 GMT", 0), Some(0));
        assert_eq!(
            retry_after_ms("Tue, 29 Feb 2028 12:00:00 GMT", now),
            Some(68_212_800_000)
        );
        assert_eq!(
            retry_after_ms("Sun, 06 Nov 0000 08:49:37 GMT", now),
            Some(0)
        );
        for bad in [
            "",
            "-5",
            "1.5",
            "soon",
            "12345678901",
            "Thu, 01 Jan 2026 00:02:30 UTC",
            "Thursday, 01-Jan-26 00:02:30 GMT",
            "Thu Jan  1 00:02:30 2026",
            "Thu, 01 Foo 2026 00:02:30 GMT",
            "Thu, 32 Jan 2026 00:02:30 GMT",
            "Thu, 01 Jan 2026 24:00:00 GMT",
            "Thu, 01 Jan 2026 00:0x:30 GMT",
            "é",
        ] {
            assert_eq!(retry_after_ms(bad, now), None, "{bad:?}");
        }
    }

    use super::*;

    #[test]
    fn the_data_envelope_is_what_json_would_write() {
        let data = serde_json::json!({"id": "sub_1", "n": 2});
        let resp = Response::data(201, &data, "req_9");
        let want = serde_json::json!({"data": data, "requestId": "req_9"});
        assert_eq!(resp.body, serde_json::to_vec(&want).expect("json"));
        let written = serde_json::to_vec(&data).expect("json");
        let raw = Response::data_json(201, &written, "req_9");
        assert_eq!(raw, resp, "the same response from data already written");
        assert_eq!(
            (resp.status, resp.header("content-type")),
            (201, Some("application/json"))
        );
    }

    #[test]
    fn query_params_are_percent_decoded() {
        let r = Request::new("get", "/v1/webhooks?limit=5&cursor=a%2Bb+c");
        assert_eq!(r.method, "GET");
        assert_eq!(r.path, "/v1/webhooks");
        assert_eq!(r.query_param("limit"), Ok(Some("5".into())));
        assert_eq!(r.query_param("cursor"), Ok(Some("a+b c".into())));
        assert_eq!(r.query_param("missing"), Ok(None));
        assert!(
            Request::new("GET", "/?cursor=%zz")
                .query_param("cursor")
                .is_err()
        );
        assert!(
            Request::new("GET", "/?cursor=%ff")
                .query_param("cursor")
                .is_err()
        );
    }

    /// Found by the `cursor` fuzz target: `%+6` decoded as byte 6.
    #[test]
    fn percent_escapes_are_exactly_two_hex_digits() {
        for bad in ["%+6", "%-1", "% 1", "%6", "%"] {
            let r = Request::new("GET", &format!("/?limit={bad}"));
            assert!(r.query_param("limit").is_err(), "{bad}");
        }
        let r = Request::new("GET", "/?limit=%4A%4b");
        assert_eq!(r.query_param("limit"), Ok(Some("JK".into())));
    }
}
