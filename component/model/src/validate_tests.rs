//! More tests of the URL and SSRF rules in [`crate::validate`] (DESIGN §3, "Create"), one
//! per rule, written to kill what `cargo mutants` found surviving there (docs/testing.md).
//! They live beside `validate.rs` rather than in it so that work on that file and on these
//! tests do not collide.

use crate::validate::*;
use std::net::{Ipv4Addr, Ipv6Addr};

const STRICT: TargetPolicy = TargetPolicy::STRICT;
const OPEN: TargetPolicy = TargetPolicy::OPEN;

fn problem(url: &str, policy: TargetPolicy) -> UrlProblem {
    target_url(url, policy).expect_err(url)
}

/// Spaces and control characters anywhere, the scheme included, are refused as such (not
/// as a wrong scheme or a bad host).
#[test]
fn spaces_and_control_characters_are_refused_wherever_they_are() {
    for url in [
        " https://example.com/",
        "\thttps://example.com/",
        "\u{7f}https://example.com/",
        "https://example.com/a b",
        "https://exa\u{7f}mple.com/",
    ] {
        let p = problem(url, OPEN);
        assert_eq!(p.code, "invalid_url", "{url:?}");
        assert!(p.message.contains("control characters"), "{url:?}: {p:?}");
    }
}

/// A backslash (which browsers read as `/`) is refused in the host and in the path.
#[test]
fn backslashes_are_refused_in_the_host_and_in_the_path() {
    for url in ["https://example.com\\evil.com/", "https://example.com/a\\b"] {
        let p = problem(url, OPEN);
        assert_eq!(p.code, "invalid_url", "{url}");
        assert!(p.message.contains("backslashes"), "{url}: {p:?}");
    }
}

/// DNS names: labels of letters, digits, `-` and `_`, neither starting nor ending with `-`,
/// at most 63 characters; the whole name at most 253.
#[test]
fn host_names_follow_the_dns_label_rules() {
    for ok in [
        "https://my_host.example.com/",
        "https://a-b.example.com/",
        "https://xn--bcher-kva.example/",
    ] {
        assert!(target_url(ok, STRICT).is_ok(), "{ok}");
    }
    for bad in [
        "https://-bad.example.com/",
        "https://bad-.example.com/",
        "https://a!b.example.com/",
        "https://a*b.example.com/",
        "https://a..example.com/",
    ] {
        let p = problem(bad, OPEN);
        assert_eq!(p.code, "invalid_url", "{bad}");
    }
    let label63 = "a".repeat(63);
    assert!(target_url(&format!("https://{label63}.example.com/"), STRICT).is_ok());
    let label64 = "a".repeat(64);
    assert!(target_url(&format!("https://{label64}.example.com/"), STRICT).is_err());
    // 253 characters: 3 labels of 63, one of 61, and the dots.
    let name = |last: usize| format!("{label63}.{label63}.{label63}.{}", "b".repeat(last));
    assert_eq!(name(61).len(), 253);
    assert_eq!(host_kind(&name(61)), Ok(HostKind::Name), "253 characters");
    assert!(host_kind(&name(62)).is_err(), "254 characters");
    assert!(target_url(&format!("https://{}/", name(61)), STRICT).is_ok());
    assert!(target_url(&format!("https://{}/", name(62)), STRICT).is_err());
}

/// WHATWG IPv4: at most four parts; every part but the last fits a byte; the last fills
/// the remaining bytes.
#[test]
fn ipv4_literals_have_at_most_four_parts_each_but_the_last_a_byte() {
    assert_eq!(parse_ipv4("1.2.3.4.0"), None, "five parts, the last 0");
    assert_eq!(parse_ipv4("1.256.0.1"), None, "a middle part over 255");
    assert_eq!(parse_ipv4("1.2.256.1"), None);
    assert_eq!(
        parse_ipv4("1.255.0.1"),
        Some(Ipv4Addr::new(1, 255, 0, 1)),
        "255 fits"
    );
    assert_eq!(parse_ipv4("255.255.255.255"), Some(Ipv4Addr::BROADCAST));
    assert_eq!(parse_ipv4("1.2.3."), None, "an empty part");
    assert_eq!(parse_ipv4("1..3"), None);
    assert!(target_url("https://8.256.0.1/", OPEN).is_err());
}

/// Every non-global IPv4 range is refused at both ends, and the addresses just outside each
/// range (and addresses that share only some octets with one) are public.
#[test]
fn each_non_global_ipv4_range_is_refused_and_its_neighbours_are_public() {
    let private = [
        "0.0.0.0",
        "0.255.255.255",
        "10.0.0.0",
        "10.255.255.255",
        "127.0.0.1",
        "127.255.255.255",
        "100.64.0.0",
        "100.127.255.255",
        "169.254.0.0",
        "169.254.255.255",
        "172.16.0.0",
        "172.31.255.255",
        "192.0.0.0",
        "192.0.0.255",
        "192.0.2.0",
        "192.0.2.255",
        "192.88.99.0",
        "192.88.99.255",
        "192.168.0.0",
        "192.168.255.255",
        "198.18.0.0",
        "198.19.255.255",
        "198.51.100.0",
        "198.51.100.255",
        "203.0.113.0",
        "203.0.113.255",
        "224.0.0.0",
        "239.255.255.255",
        "240.0.0.1",
        "255.255.255.255",
    ];
    let public = [
        "1.0.0.0",
        "9.255.255.255",
        "11.0.0.0",
        "126.255.255.255",
        "128.0.0.0",
        "100.63.255.255",
        "100.128.0.0",
        "169.253.255.255",
        "169.255.0.0",
        "168.254.0.1",
        "172.15.255.255",
        "172.32.0.0",
        "171.16.0.1",
        "192.0.1.0",
        "192.0.3.0",
        "192.1.0.1",
        "192.88.98.255",
        "192.88.100.0",
        "192.89.99.1",
        "192.167.255.255",
        "192.169.0.0",
        "193.168.0.1",
        "198.17.255.255",
        "198.20.0.0",
        "197.18.0.1",
        "198.51.99.255",
        "198.51.101.0",
        "198.50.100.1",
        "203.0.112.255",
        "203.0.114.0",
        "203.1.113.1",
        "202.0.113.1",
        "223.255.255.255",
        // Octets that match only part of some range's pattern.
        "8.254.8.8",
        "8.0.0.8",
        "8.0.2.8",
        "8.88.99.8",
        "8.168.8.8",
        "8.51.100.8",
        "8.0.113.8",
        "8.18.8.8",
        "8.16.8.8",
        "8.64.8.8",
        "100.8.8.8",
        "169.8.8.8",
        "172.8.8.8",
        "192.8.8.8",
        "198.8.8.8",
        "203.8.8.8",
    ];
    for ip in private {
        let addr: Ipv4Addr = ip.parse().expect(ip);
        assert!(!is_global_v4(addr), "{ip} is not global");
        assert_eq!(
            problem(&format!("https://{ip}/"), STRICT).code,
            "private_target",
            "{ip}"
        );
    }
    for ip in public {
        let addr: Ipv4Addr = ip.parse().expect(ip);
        assert!(is_global_v4(addr), "{ip} is global");
        assert!(
            target_url(&format!("https://{ip}/"), STRICT).is_ok(),
            "{ip}"
        );
    }
}

/// IPv6: unspecified, loopback, unique local, link-local, site-local, multicast,
/// documentation, Teredo, discard-only and the reserved `::/16` are refused; addresses that
/// embed an IPv4 address (mapped, compatible, NAT64, 6to4) are judged by that address;
/// ordinary global unicast is public.
#[test]
fn each_non_global_ipv6_range_is_refused_and_embedded_ipv4_decides_for_its_forms() {
    let private = [
        "::",
        "::1",
        "fc00::1",
        "fdff:ffff::1",
        "fe80::1",
        "febf::1",
        "fec0::1",
        "feff::1",
        "ff00::1",
        "ff02::1",
        "2001:db8::1",
        "2001:0:4136:e378::1",
        "100::",
        "100::ffff",
        "0:0:0:0:1::1",
        // Embedded non-global IPv4 addresses.
        "::ffff:10.0.0.1",
        "::ffff:192.168.1.1",
        "::ffff:169.254.169.254",
        "::ffff:203.0.113.5",
        "::ffff:192.0.2.1",
        "::127.0.0.1",
        "::10.0.0.1",
        "64:ff9b::10.0.0.1",
        "64:ff9b::203.0.113.5",
        "64:ff9b::c000:201",
        "64:ff9b:1::8.8.8.8",
        "64:ff9b:0:1::8.8.8.8",
        "64:ff9b:0:0:1::808:808",
        "64:ff9b:0:0:0:1:808:808",
        "2002:a00:1::",
        "2002:cb00:7105::",
        "2002:c000:201::",
    ];
    let public = [
        "2606:4700::1111",
        "2a00:1450:4001::1",
        "2a00::1",
        "2a00:db8::1",
        "2001:4860:4860::8888",
        "2001:db9::1",
        "2400::ffff:a00:1",
        "2400:0:0:0:0:ffff:c0a8:101",
        "2400::a00:1",
        "::ffff:8.8.8.8",
        "::ffff:8.8.4.4",
        "::8.8.8.8",
        "64:ff9b::8.8.8.8",
        "64:ff9b::808:404",
        "2002:808:808::",
        "2002:808:404::1",
        "2003:a00:1::",
        "2a00:ff9b::a00:1",
    ];
    for ip in private {
        let addr: Ipv6Addr = ip.parse().expect(ip);
        assert!(!is_global_v6(addr), "{ip} is not global");
        assert_eq!(
            problem(&format!("https://[{ip}]/"), STRICT).code,
            "private_target",
            "{ip}"
        );
    }
    for ip in public {
        let addr: Ipv6Addr = ip.parse().expect(ip);
        assert!(is_global_v6(addr), "{ip} is global");
        assert!(
            target_url(&format!("https://[{ip}]/"), STRICT).is_ok(),
            "{ip}"
        );
    }
}

/// Names spelling an address: the numbers are 1 to 3 decimal digits, no sign (`u8`'s parser
/// alone would take `+10`).
#[test]
fn a_spelled_address_is_made_of_one_to_three_digit_numbers_only() {
    assert_eq!(
        spelled_private_ipv4("10.0.0.1.example.com"),
        Some(Ipv4Addr::new(10, 0, 0, 1))
    );
    assert_eq!(
        spelled_private_ipv4("app-010-0-0-1.example.com"),
        Some(Ipv4Addr::new(10, 0, 0, 1))
    );
    assert_eq!(spelled_private_ipv4("+10.0.0.1.example.com"), None);
    assert_eq!(spelled_private_ipv4("x.+10-0-0-1.example.com"), None);
    assert_eq!(
        spelled_private_ipv4("10.0.0.example.com"),
        None,
        "three numbers"
    );
}
