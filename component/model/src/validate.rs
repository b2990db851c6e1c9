//! Validation of subscription fields: the target URL (with SSRF checks on IP literals and
//! local names) and the event types.
//!
//! The URL parser is deliberately strict and small: only absolute `https` URLs with a host,
//! no userinfo, no fragment. Hosts are read the way browsers (WHATWG URL) read them, so that
//! `https://0x7f.1/` or `https://2130706433/` are recognised as the IPv4 address they are.

use crate::error::FieldError;
use crate::events::EVENT_TYPES;
use std::net::{Ipv4Addr, Ipv6Addr};

/// Longest URL accepted.
pub const MAX_URL_LEN: usize = 2048;

/// A URL that passed validation, split into its parts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetUrl {
    /// `https` (or `http` when the policy allows it).
    pub scheme: String,
    /// The host as written, lower-cased, trailing dot removed (brackets kept for IPv6).
    pub host: String,
    /// The explicit port, if any.
    pub port: Option<u16>,
    /// Path and query, starting with `/`.
    pub path_and_query: String,
}

/// What kind of host a URL names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostKind {
    /// A DNS name.
    Name,
    /// An IPv4 literal (in any notation).
    V4(Ipv4Addr),
    /// An IPv6 literal.
    V6(Ipv6Addr),
}

/// Why a URL was refused: a stable code and a sentence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UrlProblem {
    /// Machine-readable code.
    pub code: &'static str,
    /// Human-readable message.
    pub message: String,
}

fn problem(code: &'static str, message: impl Into<String>) -> UrlProblem {
    UrlProblem {
        code,
        message: message.into(),
    }
}

/// Which delivery targets a deployment allows besides `https` URLs of public hosts. Each
/// switch allows one thing and nothing else: a receiver on the developer's own machine
/// (`http://127.0.0.1:9000/...`) needs both.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TargetPolicy {
    /// Plain `http://` URLs, to hosts the policy allows otherwise (setting `allow_http`).
    pub allow_http: bool,
    /// Hosts that are non-global IP addresses, local names (`localhost`, `*.local`, single
    /// labels, ...) or names spelling a non-global address (setting
    /// `allow_private_targets`).
    pub allow_private: bool,
}

impl TargetPolicy {
    /// `https` to public hosts only: the default, and what production runs with.
    pub const STRICT: TargetPolicy = TargetPolicy {
        allow_http: false,
        allow_private: false,
    };
    /// Both switches on (local development with `edgehook listen`, tests).
    pub const OPEN: TargetPolicy = TargetPolicy {
        allow_http: true,
        allow_private: true,
    };

    /// Whether the policy allows everything a URL can be (so a URL that passed validation
    /// once needs no second look).
    pub fn allows_all(self) -> bool {
        self.allow_http && self.allow_private
    }
}

/// A URL's scheme and what follows its `://`, split at the first `:` (a scheme holds none).
/// Written with a character search: a `&str` pattern (`split_once("://")`) brings the
/// two-way substring searcher, about 3 KiB of the size-budgeted component.
pub fn split_scheme(url: &str) -> Option<(&str, &str)> {
    let colon = url.find(':')?;
    Some((&url[..colon], url[colon + 1..].strip_prefix("//")?))
}

/// Validates a subscription URL under `policy`: `https` to a public host, plus plain `http`
/// with [`TargetPolicy::allow_http`] and non-global addresses and local names with
/// [`TargetPolicy::allow_private`] (development only).
pub fn target_url(raw: &str, policy: TargetPolicy) -> Result<TargetUrl, UrlProblem> {
    check_characters(raw)?;
    let (scheme, rest) = split_scheme(raw)
        .ok_or_else(|| problem("invalid_url", "url must be an absolute https:// URL"))?;
    let scheme = scheme.to_ascii_lowercase();
    match scheme.as_str() {
        "https" => {}
        "http" if policy.allow_http => {}
        _ => {
            return Err(problem(
                "https_required",
                "url must use https (deliveries are only sent over TLS)",
            ));
        }
    }
    let (authority, tail) = split_rest(rest)?;
    let (host, port) = split_host_port(authority)?;
    let host = host.to_ascii_lowercase();
    let host = host.strip_suffix('.').unwrap_or(&host).to_owned();
    if host.is_empty() {
        return Err(problem("invalid_url", "url must have a host"));
    }
    let kind = host_kind(&host)?;
    if !policy.allow_private {
        check_public(&host, kind)?;
    }
    let path_and_query = if tail.starts_with('/') {
        tail.to_owned()
    } else {
        format!("/{tail}")
    };
    Ok(TargetUrl {
        scheme,
        host,
        port,
        path_and_query,
    })
}

/// The rules on a whole target URL's characters: its length, no spaces or controls, ASCII.
fn check_characters(raw: &str) -> Result<(), UrlProblem> {
    if raw.len() > MAX_URL_LEN {
        return Err(problem(
            "url_too_long",
            format!("url must be at most {MAX_URL_LEN} characters"),
        ));
    }
    if raw.bytes().any(|b| b <= b' ' || b == 0x7f) {
        return Err(problem(
            "invalid_url",
            "url must not contain spaces or control characters",
        ));
    }
    if !raw.is_ascii() {
        // Browsers map full-width digits, ideographic dots and letters such as U+24DB
        // (circled l) onto ASCII before they resolve a host; the sender would have to do the
        // same, and any difference between the two mappings is an SSRF hole. So only ASCII.
        return Err(problem(
            "invalid_url",
            "url must be ASCII: give an internationalized host name in its xn-- (punycode) \
             form and percent-encode other characters",
        ));
    }
    Ok(())
}

/// What follows a target URL's `scheme://`, split into its authority and its path and
/// query, checked: no fragment, no credentials, no backslashes, path and query characters
/// percent-encoded where they must be.
fn split_rest(rest: &str) -> Result<(&str, &str), UrlProblem> {
    if rest.as_bytes().contains(&b'#') {
        return Err(problem(
            "invalid_url",
            "url must not have a fragment (#...)",
        ));
    }
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    if authority.as_bytes().contains(&b'@') {
        return Err(problem(
            "invalid_url",
            "url must not contain credentials (user:password@)",
        ));
    }
    if authority.as_bytes().contains(&b'\\') || tail.as_bytes().contains(&b'\\') {
        return Err(problem("invalid_url", "url must not contain backslashes"));
    }
    if let Some(c) = tail.chars().find(|c| !is_target_char(*c)) {
        return Err(problem(
            "invalid_url",
            format!("url must percent-encode '{c}' in its path and query"),
        ));
    }
    Ok((authority, tail))
}

/// Whether `c` may appear as is in the path or query of a target URL: RFC 3986 unreserved
/// characters, sub-delimiters, `: @ / ? %` and `[ ]` (all of which the HTTP client accepts,
/// so a URL accepted here is a request the sender can make).
fn is_target_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || (c.is_ascii() && b"-._~!$&'()*+,;=:@/?%[]".contains(&(c as u8)))
}

fn split_host_port(authority: &str) -> Result<(&str, Option<u16>), UrlProblem> {
    let (host, port) = if let Some(rest) = authority.strip_prefix('[') {
        let close = rest
            .find(']')
            .ok_or_else(|| problem("invalid_url", "unclosed [ in the host"))?;
        let after = &rest[close + 1..];
        let port = match after {
            "" => None,
            p => Some(
                p.strip_prefix(':')
                    .ok_or_else(|| problem("invalid_url", "unexpected text after ]"))?,
            ),
        };
        (&authority[..close + 2], port)
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        }
    };
    // Digits only: `u16::from_str` would also take a leading `+`, which WHATWG parsers (and
    // so browsers and HTTP clients) refuse; leading zeros are fine for both.
    let port = match port {
        None | Some("") => None,
        Some(p) => Some(
            Some(p)
                .filter(|p| p.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|p| p.parse::<u16>().ok())
                .filter(|p| *p != 0)
                .ok_or_else(|| {
                    problem("invalid_url", "the port must be a number from 1 to 65535")
                })?,
        ),
    };
    Ok((host, port))
}

/// Classifies a host (lower case, no trailing dot): an IPv6 literal in brackets, an IPv4
/// literal in any WHATWG notation, or a DNS name.
pub fn host_kind(host: &str) -> Result<HostKind, UrlProblem> {
    if let Some(inner) = host.strip_prefix('[') {
        let inner = inner
            .strip_suffix(']')
            .ok_or_else(|| problem("invalid_url", "malformed IPv6 host"))?;
        if inner.as_bytes().contains(&b'%') {
            return Err(problem(
                "invalid_url",
                "IPv6 zone identifiers are not allowed",
            ));
        }
        return inner
            .parse::<Ipv6Addr>()
            .map(HostKind::V6)
            .map_err(|_| problem("invalid_url", "malformed IPv6 host"));
    }
    if !host.is_ascii() {
        return Err(problem(
            "invalid_url",
            "the host must be ASCII: give internationalized host names in their xn-- (punycode) form",
        ));
    }
    // WHATWG: a host whose last label is numeric is an IPv4 address (or invalid).
    let last = host.rsplit('.').next().unwrap_or(host);
    if !last.is_empty() && is_numeric_part(last) {
        return parse_ipv4(host)
            .map(HostKind::V4)
            .ok_or_else(|| problem("invalid_url", "malformed IPv4 host"));
    }
    let labels_ok = host.split('.').all(|label| {
        !label.is_empty()
            && label.len() <= 63
            && !label.starts_with('-')
            && !label.ends_with('-')
            && label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    });
    if !labels_ok || host.len() > 253 {
        return Err(problem("invalid_url", "the host is not a valid DNS name"));
    }
    Ok(HostKind::Name)
}

fn is_numeric_part(part: &str) -> bool {
    if let Some(hex) = part.strip_prefix("0x") {
        return hex.bytes().all(|b| b.is_ascii_hexdigit());
    }
    part.bytes().all(|b| b.is_ascii_digit())
}

/// One part of a WHATWG IPv4 address: `0x` + hex digits, `0` + octal digits, or decimal
/// digits. Digits only: `from_str_radix` alone would also take a sign (`+26.0.0.1`).
fn parse_part(part: &str) -> Option<u64> {
    let (digits, radix) = if let Some(hex) = part.strip_prefix("0x") {
        (hex, 16)
    } else if part.len() > 1 && part.starts_with('0') {
        (&part[1..], 8)
    } else {
        (part, 10)
    };
    if digits.is_empty() {
        return (radix == 16).then_some(0);
    }
    if !digits.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    u64::from_str_radix(digits, radix).ok()
}

/// Parses IPv4 the WHATWG way: 1 to 4 parts, each decimal, octal (leading 0) or hex (0x);
/// the last part fills the remaining bytes (`127.1` is 127.0.0.1, `2130706433` too).
pub fn parse_ipv4(host: &str) -> Option<Ipv4Addr> {
    let parts: Vec<&str> = host.split('.').collect();
    if parts.is_empty() || parts.len() > 4 || parts.iter().any(|p| p.is_empty()) {
        return None;
    }
    let nums: Vec<u64> = parts.iter().map(|p| parse_part(p)).collect::<Option<_>>()?;
    let (last, init) = nums.split_last()?;
    if init.iter().any(|n| *n > 255) {
        return None;
    }
    let remaining_bytes = 4 - init.len() as u32;
    if *last >= 1u64 << (8 * remaining_bytes) {
        return None;
    }
    let mut value: u64 = 0;
    for (i, n) in init.iter().enumerate() {
        value |= n << (8 * (3 - i));
    }
    value |= last;
    u32::try_from(value).ok().map(Ipv4Addr::from)
}

/// Whether an IPv4 address is globally routable (not private, loopback, link-local,
/// shared, reserved, documentation, benchmarking, broadcast or multicast).
pub fn is_global_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    !(a == 0
        || a == 10
        || a == 127
        || (a == 100 && (64..128).contains(&b))
        || (a == 169 && b == 254)
        || (a == 172 && (16..32).contains(&b))
        || (a == 192 && b == 0 && c == 0)
        || (a == 192 && b == 0 && c == 2)
        || (a == 192 && b == 88 && c == 99)
        || (a == 192 && b == 168)
        || (a == 198 && (18..20).contains(&b))
        || (a == 198 && b == 51 && c == 100)
        || (a == 203 && b == 0 && c == 113)
        || a >= 224)
}

/// Whether an IPv6 address is globally routable. Addresses that embed an IPv4 address
/// (mapped, compatible, NAT64, 6to4) are judged by that address.
pub fn is_global_v6(ip: Ipv6Addr) -> bool {
    let s = ip.segments();
    let embedded = |hi: usize| {
        Ipv4Addr::new(
            (s[hi] >> 8) as u8,
            s[hi] as u8,
            (s[hi + 1] >> 8) as u8,
            s[hi + 1] as u8,
        )
    };
    if ip.is_unspecified() || ip.is_loopback() {
        return false;
    }
    // ::ffff:a.b.c.d (mapped) and ::a.b.c.d (compatible, deprecated).
    if s[..5].iter().all(|x| *x == 0) && (s[5] == 0xffff || s[5] == 0) {
        return is_global_v4(embedded(6));
    }
    // 64:ff9b::/96 NAT64 and 64:ff9b:1::/48 local-use NAT64.
    if s[0] == 0x64 && s[1] == 0xff9b {
        return s[2..6].iter().all(|x| *x == 0) && is_global_v4(embedded(6));
    }
    // 2002::/16 6to4 embeds the IPv4 address in the next 32 bits.
    if s[0] == 0x2002 {
        return is_global_v4(embedded(1));
    }
    let first = s[0];
    !((first & 0xfe00) == 0xfc00          // fc00::/7 unique local
        || (first & 0xffc0) == 0xfe80     // fe80::/10 link-local
        || (first & 0xffc0) == 0xfec0     // fec0::/10 site-local (deprecated)
        || (first & 0xff00) == 0xff00     // ff00::/8 multicast
        || (first == 0x2001 && s[1] == 0x0db8) // documentation
        || (first == 0x2001 && s[1] == 0)      // Teredo
        || (first == 0x0100 && s[1..4].iter().all(|x| *x == 0)) // discard-only
        || first == 0)
}

/// Names that resolve to the local machine or a private network by convention.
fn is_local_name(host: &str) -> bool {
    const LOCAL_SUFFIXES: [&str; 5] = [
        ".localhost",
        ".local",
        ".internal",
        ".localdomain",
        ".home.arpa",
    ];
    host == "localhost"
        || !host.as_bytes().contains(&b'.')
        || LOCAL_SUFFIXES.iter().any(|s| host.ends_with(s))
}

/// The non-global IPv4 address a DNS name spells in its labels, if any: four decimal numbers
/// in a row, separated by dots or dashes (`10.0.0.1.nip.io`, `app-192-168-0-1.sslip.io`).
/// Wildcard DNS services answer such names with the address they spell.
pub fn spelled_private_ipv4(host: &str) -> Option<Ipv4Addr> {
    let mut window = [0u8; 4];
    let mut run = 0;
    for token in host.split(['.', '-']) {
        let number = if (1..=3).contains(&token.len()) && token.bytes().all(|b| b.is_ascii_digit())
        {
            token.parse::<u8>().ok()
        } else {
            None
        };
        let Some(n) = number else {
            run = 0;
            continue;
        };
        window.rotate_left(1);
        window[3] = n;
        run += 1;
        if run >= 4 && !is_global_v4(Ipv4Addr::from(window)) {
            return Some(Ipv4Addr::from(window));
        }
    }
    None
}

fn check_public(host: &str, kind: HostKind) -> Result<(), UrlProblem> {
    let refused = |what: &str| {
        problem(
            "private_target",
            format!("url must point at a public host; {what} is not allowed"),
        )
    };
    match kind {
        HostKind::V4(ip) if !is_global_v4(ip) => Err(refused(&format!("the address {host}"))),
        HostKind::V6(ip) if !is_global_v6(ip) => Err(refused(&format!("the address {host}"))),
        HostKind::Name if is_local_name(host) => Err(refused(&format!("the local name {host}"))),
        HostKind::Name => match spelled_private_ipv4(host) {
            Some(ip) => Err(refused(&format!(
                "the name {host}, which spells the non-public address {ip},"
            ))),
            None => Ok(()),
        },
        _ => Ok(()),
    }
}

/// Validates the `eventTypes` field: a non-empty array of known event types. Duplicates are
/// collapsed, first occurrence first. Returns one [`FieldError`] per bad entry.
pub fn event_types(value: Option<&serde_json::Value>) -> Result<Vec<String>, Vec<FieldError>> {
    let valid = crate::error::comma_list(EVENT_TYPES.iter().copied());
    let Some(value) = value else {
        return Err(vec![FieldError::new(
            "eventTypes",
            "required",
            format!("eventTypes is required: a non-empty array of event types ({valid})"),
        )]);
    };
    let Some(items) = value.as_array() else {
        return Err(vec![FieldError::new(
            "eventTypes",
            "invalid_type",
            format!("eventTypes must be an array of event types ({valid})"),
        )]);
    };
    if items.is_empty() {
        return Err(vec![FieldError::new(
            "eventTypes",
            "empty",
            format!("eventTypes must list at least one event type ({valid})"),
        )]);
    }
    let mut out: Vec<String> = Vec::new();
    let mut errors = Vec::new();
    for (i, item) in items.iter().enumerate() {
        match item.as_str() {
            Some(t) if EVENT_TYPES.contains(&t) => {
                if !out.iter().any(|o| o == t) {
                    out.push(t.to_owned());
                }
            }
            Some(t) => errors.push(FieldError::new(
                format!("eventTypes[{i}]"),
                "unknown_event_type",
                format!(
                    "unknown event type {}; valid event types are {valid}",
                    crate::error::quoted(t)
                ),
            )),
            None => errors.push(FieldError::new(
                format!("eventTypes[{i}]"),
                "invalid_type",
                format!("event types are strings; valid event types are {valid}"),
            )),
        }
    }
    if errors.is_empty() {
        Ok(out)
    } else {
        Err(errors)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const STRICT: TargetPolicy = TargetPolicy::STRICT;
    const OPEN: TargetPolicy = TargetPolicy::OPEN;

    fn refused(url: &str) -> bool {
        target_url(url, STRICT).is_err()
    }

    #[test]
    fn accepts_ordinary_https_urls() {
        let u = target_url("https://Hooks.Example.com:8443/in/loads?x=1", STRICT).expect("valid");
        assert_eq!(u.host, "hooks.example.com");
        assert_eq!(u.port, Some(8443));
        assert_eq!(u.path_and_query, "/in/loads?x=1");
        assert!(target_url("https://example.com", STRICT).is_ok());
        assert!(target_url("https://93.184.216.34/hook", STRICT).is_ok());
        assert!(target_url("https://[2606:4700::1111]/hook", STRICT).is_ok());
    }

    #[test]
    fn refuses_non_https_credentials_fragments_and_junk() {
        for url in [
            "http://example.com/",
            "ftp://example.com/",
            "example.com/hook",
            "https://user:pw@example.com/",
            "https://example.com@evil.com/",
            "https://example.com/#frag",
            "https:///nohost",
            "https://exa mple.com/",
            "https://example.com:0/",
            "https://example.com:99999/",
            "https://bücher.example/",
            "https://-bad-.example.com/",
            "https://example.com\\@evil.com/",
        ] {
            assert!(refused(url), "{url} should be refused");
        }
        // DESIGN: at most 2048 characters, that one included.
        let base = "https://example.com/";
        let longest = format!("{base}{}", "a".repeat(2048 - base.len()));
        assert!(
            target_url(&longest, STRICT).is_ok(),
            "2048 characters are fine"
        );
        let long = format!("{longest}a");
        assert_eq!(
            target_url(&long, STRICT).map_err(|p| p.code),
            Err("url_too_long")
        );
    }

    /// Found by the `url` fuzz target: `u16::from_str` accepts `+443`, WHATWG does not.
    #[test]
    fn port_is_digits_only() {
        for url in [
            "https://example.com:+443/",
            "https://example.com:-1/",
            "https://example.com: 443/",
            "https://example.com:0x1bb/",
            "https://example.com:65536/",
        ] {
            assert!(refused(url), "{url} should be refused");
        }
        let u = target_url("https://example.com:00443/", STRICT).expect("leading zeros");
        assert_eq!(u.port, Some(443));
    }

    #[test]
    fn refuses_private_addresses_in_every_notation() {
        for url in [
            "https://127.0.0.1/",
            "https://127.1/",
            "https://2130706433/",
            "https://0x7f000001/",
            "https://0x7f.0.0.1/",
            "https://0177.0.0.1/",
            "https://017700000001/",
            "https://0.0.0.0/",
            "https://0/",
            "https://10.1.2.3/",
            "https://172.16.0.1/",
            "https://192.168.1.1/",
            "https://169.254.169.254/latest/meta-data",
            "https://100.64.0.1/",
            "https://[::1]/",
            "https://[::]/",
            "https://[::ffff:127.0.0.1]/",
            "https://[::ffff:7f00:1]/",
            "https://[::127.0.0.1]/",
            "https://[64:ff9b::10.0.0.1]/",
            "https://[2002:7f00:1::]/",
            "https://[fe80::1]/",
            "https://[fd00::1]/",
            "https://[ff02::1]/",
            "https://localhost/",
            "https://LOCALHOST/",
            "https://localhost./",
            "https://api.localhost/",
            "https://printer.local/",
            "https://intranet/",
            "https://metadata.google.internal/",
            "https://127.0.0.1.:443/",
            "https://224.0.0.1/",
            "https://255.255.255.255/",
        ] {
            assert!(refused(url), "{url} should be refused");
        }
    }

    #[test]
    fn names_that_spell_a_private_address_are_refused() {
        for url in [
            "https://127.0.0.1.nip.io/",
            "https://10.0.0.1.nip.io/",
            "https://app-192-168-0-1.sslip.io/",
            "https://169-254-169-254.sslip.io/",
            "https://x.1.10.0.0.1.example.com/",
        ] {
            assert_eq!(
                target_url(url, STRICT).map_err(|p| p.code),
                Err("private_target"),
                "{url}"
            );
        }
        // Public addresses spelled out, and numbers that are not an address, are fine.
        for url in [
            "https://93.184.216.34.nip.io/",
            "https://1-1-1-1.example.com/",
            "https://v1-10-0-0.example.com/",
            "https://api-2024-01-01.example.com/",
            "https://10.0.0.example.com/",
        ] {
            assert!(target_url(url, STRICT).is_ok(), "{url}");
        }
        assert!(target_url("https://10.0.0.1.nip.io/", OPEN).is_ok());
    }

    #[test]
    fn hosts_must_be_ascii_and_punycode_is_accepted() {
        for url in [
            "https://\u{ff11}\u{ff12}\u{ff17}.\u{ff10}.\u{ff10}.\u{ff11}/",
            "https://127\u{3002}0\u{3002}0\u{3002}1/",
            "https://127\u{ff0e}0\u{ff0e}0\u{ff0e}1/",
            "https://\u{24db}ocalhost/",
            "https://b\u{fc}cher.example/",
        ] {
            let p = target_url(url, OPEN).expect_err(url);
            assert_eq!(p.code, "invalid_url", "{url}");
            assert!(p.message.contains("xn--"), "{url}: {}", p.message);
        }
        let u = target_url("https://xn--bcher-kva.example/hook", STRICT).expect("A-label");
        assert_eq!(u.host, "xn--bcher-kva.example");
    }

    #[test]
    fn paths_must_be_what_an_http_request_can_carry() {
        for url in [
            "https://hooks.example.com/a<b",
            "https://hooks.example.com/a>b",
            "https://hooks.example.com/a\"b",
            "https://hooks.example.com/a`b",
            "https://hooks.example.com/a{b}",
            "https://hooks.example.com/?q=a^b",
            "https://hooks.example.com/caf\u{e9}",
        ] {
            assert_eq!(
                target_url(url, OPEN).map_err(|p| p.code),
                Err("invalid_url"),
                "{url}"
            );
        }
        let ok = "https://hooks.example.com/a-b._~!$&'()*+,;=:@/%20?x=[1]&y=%2F";
        assert_eq!(
            target_url(ok, STRICT).expect("valid").path_and_query,
            "/a-b._~!$&'()*+,;=:@/%20?x=[1]&y=%2F"
        );
    }

    #[test]
    fn malformed_ip_literals_are_invalid_not_names() {
        assert!(refused("https://256.0.0.1/"));
        assert!(refused("https://1.2.3.4.5/"));
        assert!(refused("https://0x1g.1/"));
        assert!(refused("https://[::1/"));
        assert!(refused("https://[fe80::1%25eth0]/"));
    }

    #[test]
    fn private_targets_can_be_allowed_for_development() {
        let u = target_url("http://127.0.0.1:9000/hook", OPEN).expect("allowed");
        assert_eq!(u.scheme, "http");
        assert!(target_url("https://localhost/", OPEN).is_ok());
    }

    /// Each switch allows what it says and refuses the rest as before; a local `http`
    /// receiver needs both.
    #[test]
    fn each_switch_allows_one_thing_and_a_local_http_receiver_needs_both() {
        let http = TargetPolicy {
            allow_http: true,
            allow_private: false,
        };
        let private = TargetPolicy {
            allow_http: false,
            allow_private: true,
        };
        // The code each policy answers (strict, allow_http, allow_private, both); "" = ok.
        let (ok, https, local) = ("", "https_required", "private_target");
        for (url, codes) in [
            ("https://example.com/", [ok, ok, ok, ok]),
            ("http://hooks.example.com:8080/in", [https, ok, https, ok]),
            ("http://93.184.216.34/", [https, ok, https, ok]),
            ("https://127.0.0.1:9000/hook", [local, local, ok, ok]),
            ("https://localhost/", [local, local, ok, ok]),
            ("https://[::1]/", [local, local, ok, ok]),
            ("https://10.0.0.1.nip.io/", [local, local, ok, ok]),
            ("http://127.0.0.1:9000/hook", [https, local, https, ok]),
            ("http://localhost/", [https, local, https, ok]),
            ("http://2130706433/", [https, local, https, ok]),
            ("ftp://example.com/", [https, https, https, https]),
        ] {
            for (policy, code) in [STRICT, http, private, OPEN].into_iter().zip(codes) {
                let got = target_url(url, policy).map_or_else(|p| p.code, |_| "");
                assert_eq!(got, code, "{url} under {policy:?}");
            }
        }
        assert!(OPEN.allows_all() && !http.allows_all() && !private.allows_all());
        assert_eq!(TargetPolicy::default(), STRICT);
    }

    /// Found by the `url` fuzz target: `https://+26.0.0.1/` was read as 26.0.0.1 (a sign
    /// went through `from_str_radix`); WHATWG refuses it.
    #[test]
    fn ipv4_parts_are_digits_only() {
        for host in ["+26.0.0.1", "1.+2.3.4", "0x+7f.1", "0+1.2.3.4", "1.-2.3.4"] {
            assert_eq!(parse_ipv4(host), None, "{host}");
            assert!(refused(&format!("https://{host}/")), "{host}");
        }
        assert_eq!(parse_ipv4("0x.0x1.00.1"), Some(Ipv4Addr::new(0, 1, 0, 1)));
    }

    #[test]
    fn ipv4_parsing_matches_whatwg() {
        assert_eq!(parse_ipv4("127.1"), Some(Ipv4Addr::new(127, 0, 0, 1)));
        assert_eq!(parse_ipv4("0x7f.1"), Some(Ipv4Addr::new(127, 0, 0, 1)));
        assert_eq!(parse_ipv4("1.2.65535"), Some(Ipv4Addr::new(1, 2, 255, 255)));
        assert_eq!(parse_ipv4("1.2.65536"), None);
        assert_eq!(parse_ipv4("4294967296"), None);
    }

    #[test]
    fn event_types_rules() {
        assert_eq!(
            event_types(Some(&json!([
                "load.updated",
                "load.created",
                "load.updated"
            ]))),
            Ok(vec!["load.updated".to_owned(), "load.created".to_owned()])
        );
        let codes = |v: serde_json::Value| -> Vec<&'static str> {
            event_types(Some(&v))
                .err()
                .unwrap_or_default()
                .iter()
                .map(|e| e.code)
                .collect()
        };
        assert_eq!(codes(json!([])), ["empty"]);
        assert_eq!(codes(json!("load.created")), ["invalid_type"]);
        assert_eq!(
            codes(json!(["load.created", "load.deleted", 3])),
            ["unknown_event_type", "invalid_type"]
        );
        let err = event_types(Some(&json!(["nope"])))
            .err()
            .unwrap_or_default();
        assert_eq!(err[0].field, "eventTypes[0]");
        assert!(err[0].message.contains("nope") && err[0].message.contains("load.status_changed"));
        assert_eq!(event_types(None).err().map(|e| e[0].code), Some("required"));
    }
}
