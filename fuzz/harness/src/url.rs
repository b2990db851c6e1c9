//! Target `url`: subscription URL validation (`validate::target_url`), the SSRF gate.
//!
//! Input: the URL, as bytes (lossily decoded: a URL reaches validation as a JSON string).
//! It is validated under each policy a deployment can have: strictly, with `allow_http`,
//! with `allow_private_targets`, and with both.
//!
//! Checked for every accepted URL:
//! - the raw text has no whitespace, control characters, fragment, backslash or userinfo,
//!   and is at most 2048 bytes; the scheme is `https` (or `http` when `allow_http` is on);
//!   acceptance under a policy implies acceptance with the same parts under every policy
//!   that allows more;
//! - the parts are canonical (lower-case host, no trailing dot, path starting with `/`) and
//!   re-validating the canonical form gives the same parts;
//! - **the `url` crate (a WHATWG parser, as browsers and most HTTP stacks read URLs) parses
//!   it too and reads the same scheme, the same port, no userinfo, and the same host**: the
//!   same DNS name, or the same IPv4/IPv6 address, whatever notation hides it;
//! - when private targets are not allowed (whether or not `http` is), the host as WHATWG reads it is not loopback,
//!   private, link-local, unspecified, broadcast, multicast, documentation, shared or
//!   reserved (judged by `std`'s own address classifiers, IPv4 embedded in IPv6 included),
//!   and is not `localhost`, `*.localhost` or a single label.
//!
//! The one tolerated disagreement: a DNS name that WHATWG refuses for IDNA reasons (an
//! `xn--` label that is not valid punycode) may pass validation; such a name cannot resolve,
//! and it is still subject to the name rules above.

use edgehook_component::model::validate::{self, HostKind, MAX_URL_LEN, TargetPolicy, TargetUrl};
use std::net::{Ipv4Addr, Ipv6Addr};

/// The four policies: strict, `allow_http`, `allow_private_targets`, both.
const POLICIES: [TargetPolicy; 4] = [
    TargetPolicy::STRICT,
    TargetPolicy {
        allow_http: true,
        allow_private: false,
    },
    TargetPolicy {
        allow_http: false,
        allow_private: true,
    },
    TargetPolicy::OPEN,
];

/// Runs one input.
pub fn run(data: &[u8]) {
    let raw = String::from_utf8_lossy(data);
    let results = POLICIES.map(|policy| validate::target_url(&raw, policy));
    for (policy, result) in POLICIES.iter().zip(&results) {
        let Ok(u) = result else { continue };
        check_parsed(&raw, u, *policy);
        for (wider, other) in POLICIES.iter().zip(&results) {
            if (wider.allow_http || !policy.allow_http)
                && (wider.allow_private || !policy.allow_private)
            {
                assert_eq!(
                    other.as_ref().ok(),
                    Some(u),
                    "{raw:?}: accepted under {policy:?}, but not the same under {wider:?}"
                );
            }
        }
    }
}

/// Checks a URL that must be acceptable (the model calls this for every created
/// subscription): it validates, and the result passes every check of this target.
pub fn check_accepted(raw: &str, policy: TargetPolicy) {
    match validate::target_url(raw, policy) {
        Ok(u) => check_parsed(raw, &u, policy),
        Err(p) => panic!(
            "{raw:?} was accepted by create but fails validation: {}",
            p.message
        ),
    }
}

fn check_parsed(raw: &str, u: &TargetUrl, policy: TargetPolicy) {
    let ctx = format!("{raw:?} ({policy:?}) -> {u:?}");
    assert!(raw.len() <= MAX_URL_LEN, "too long: {ctx}");
    assert!(
        !raw.bytes().any(|b| b <= b' ' || b == 0x7f),
        "whitespace or control characters: {ctx}"
    );
    assert!(
        !raw.contains('#') && !raw.contains('\\'),
        "fragment or backslash: {ctx}"
    );
    let Some((scheme, rest)) = raw.split_once("://") else {
        panic!("not absolute: {ctx}");
    };
    assert_eq!(scheme.to_ascii_lowercase(), u.scheme, "{ctx}");
    assert!(
        u.scheme == "https" || (policy.allow_http && u.scheme == "http"),
        "scheme: {ctx}"
    );
    let authority = &rest[..rest.find(['/', '?']).unwrap_or(rest.len())];
    assert!(!authority.contains('@'), "userinfo: {ctx}");
    assert!(u.path_and_query.starts_with('/'), "path: {ctx}");
    assert!(
        !u.host.is_empty() && u.host == u.host.to_ascii_lowercase() && !u.host.ends_with('.'),
        "host not canonical: {ctx}"
    );
    assert_ne!(u.port, Some(0), "port 0: {ctx}");
    let canonical = format!(
        "{}://{}{}{}",
        u.scheme,
        u.host,
        u.port.map(|p| format!(":{p}")).unwrap_or_default(),
        u.path_and_query
    );
    assert_eq!(
        validate::target_url(&canonical, policy).as_ref(),
        Ok(u),
        "the canonical form {canonical:?} reads differently: {ctx}"
    );
    let kind = match validate::host_kind(&u.host) {
        Ok(k) => k,
        Err(p) => panic!("accepted host does not classify ({}): {ctx}", p.message),
    };
    if !policy.allow_private {
        assert!(
            public_host(&u.host, kind),
            "a non-public host passed: {ctx}"
        );
    }
    let parsed = match url::Url::parse(raw) {
        Ok(p) => p,
        Err(url::ParseError::IdnaError) if kind == HostKind::Name => return,
        Err(e) => panic!("WHATWG refuses an accepted URL ({e}): {ctx}"),
    };
    assert_eq!(parsed.scheme(), u.scheme, "WHATWG scheme: {ctx}");
    assert!(
        parsed.username().is_empty() && parsed.password().is_none() && parsed.fragment().is_none(),
        "WHATWG sees userinfo or a fragment: {ctx}"
    );
    let default_port = if u.scheme == "https" { 443 } else { 80 };
    assert_eq!(
        parsed.port_or_known_default(),
        Some(u.port.unwrap_or(default_port)),
        "WHATWG port: {ctx}"
    );
    match (parsed.host(), kind) {
        (Some(url::Host::Domain(d)), HostKind::Name) => {
            assert_eq!(
                d.strip_suffix('.').unwrap_or(d),
                u.host,
                "WHATWG host name: {ctx}"
            );
        }
        (Some(url::Host::Ipv4(a)), HostKind::V4(b)) => assert_eq!(a, b, "WHATWG IPv4: {ctx}"),
        (Some(url::Host::Ipv6(a)), HostKind::V6(b)) => assert_eq!(a, b, "WHATWG IPv6: {ctx}"),
        (h, k) => panic!("WHATWG reads the host as {h:?}, validation as {k:?}: {ctx}"),
    }
}

/// Whether a host may be a delivery target, judged independently of `validate` (with
/// `std`'s classifiers; the core keeps its own lists).
fn public_host(host: &str, kind: HostKind) -> bool {
    match kind {
        HostKind::V4(a) => public_v4(a),
        HostKind::V6(a) => public_v6(a),
        HostKind::Name => {
            host != "localhost" && !host.ends_with(".localhost") && host.contains('.')
        }
    }
}

fn public_v4(a: Ipv4Addr) -> bool {
    let [o0, o1, o2, _] = a.octets();
    !(a.is_private()
        || a.is_loopback()
        || a.is_link_local()
        || a.is_unspecified()
        || a.is_broadcast()
        || a.is_documentation()
        || a.is_multicast()
        || o0 == 0 // "this network"
        || (o0 == 100 && (o1 & 0xc0) == 64) // shared address space 100.64/10
        || (o0 == 198 && (o1 & 0xfe) == 18) // benchmarking 198.18/15
        || (o0 == 192 && o1 == 0 && o2 == 0) // IETF protocol assignments
        || o0 >= 240) // reserved
}

fn public_v6(a: Ipv6Addr) -> bool {
    let s = a.segments();
    let v4 = |hi: u16, lo: u16| Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo));
    if let Some(mapped) = a.to_ipv4_mapped() {
        return public_v4(mapped);
    }
    if s[..6].iter().all(|x| *x == 0) {
        return public_v4(v4(s[6], s[7])); // IPv4-compatible, ::, ::1
    }
    if s[0] == 0x64 && s[1] == 0xff9b {
        return s[2] == 0 && public_v4(v4(s[6], s[7])); // NAT64; 64:ff9b:1::/48 is local
    }
    if s[0] == 0x2002 {
        return public_v4(v4(s[1], s[2])); // 6to4
    }
    !(a.is_loopback()
        || a.is_unspecified()
        || a.is_multicast()
        || a.is_unique_local()
        || a.is_unicast_link_local()
        || (s[0] == 0x2001 && s[1] == 0x0db8)) // documentation
}
