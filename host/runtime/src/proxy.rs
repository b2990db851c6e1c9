//! Egress through an HTTP `CONNECT` proxy (`edgehook serve --egress-proxy http://HOST:PORT`),
//! for partners whose firewalls admit one static address: [`EgressProxy`] (the parsed
//! setting; its credentials never shown) and [`tunnel`], which opens a tunnel through it.
//!
//! The tunnel goes to an address, never a name: [`crate::net`] checks the target URL,
//! resolves the name itself and refuses non-public answers exactly as without a proxy, then
//! asks the proxy for `CONNECT <checked address>:<port>`, so the proxy's own DNS never picks
//! where a delivery goes. TLS (SNI and certificate checked for the URL's host) then runs
//! end to end over the tunnel; the proxy sees only the address and the encrypted bytes.
//! This module knows nothing of targets or policy: it only speaks to the proxy.
//!
//! Why not hyper-util's `Tunnel` (`client::legacy::connect::proxy`, feature `client-proxy`):
//! it would keep the guarantee (it asks for `CONNECT` to the host and port of the `Uri` it is
//! called with, so the checked address goes in as an IP literal) and it sends
//! `Proxy-Authorization`, but it loses what an operator is told when the proxy refuses: every
//! answer but 200 becomes one `TunnelUnsuccessful` (only 407 is told apart), with neither
//! the status nor the reason phrase, and the `delivery attempt` log line names both
//! (`refused CONNECT 93.184.216.34:443: 403 Forbidden`, docs/operations.md; checked by
//! `host/edgehook/tests/egress.rs`). It also refuses the other 2xx answers, which RFC 9110
//! counts as an open tunnel, and drops any bytes a proxy sends after its answer where this
//! client refuses the tunnel. Reading the proxy URL and its credentials would stay ours
//! either way; the exchange itself is [`tunnel`], some 80 lines.

use std::fmt;
use std::io;
use std::net::SocketAddr;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

/// The most bytes of a proxy's answer head read before it is a protocol error.
const MAX_ANSWER_HEAD: usize = 8 * 1024;

/// An HTTP proxy that deliveries are tunnelled through: `http://host:port`, or
/// `http://user:password@host:port` (sent as `Proxy-Authorization: Basic`). The proxy's own
/// address is the operator's: it may be loopback or private (only targets are checked).
/// `Display` and `Debug` show `http://host:port` and never the credentials.
#[derive(Clone, PartialEq, Eq)]
pub struct EgressProxy {
    /// The host as written: a name, an IPv4 address, or an IPv6 address without brackets.
    host: String,
    port: u16,
    /// The `Proxy-Authorization` header's value, when the URL has credentials.
    authorization: Option<String>,
}

impl EgressProxy {
    /// Reads a proxy URL: `http://host:port` with an explicit port, optionally a trailing
    /// `/`, optionally `user:password@` (percent-encoded as in any URL). Anything else is
    /// refused with the reason, never echoing the URL (it may hold a password): another
    /// scheme (`https://`, `socks5://`), no port, a path, a query or a fragment.
    pub fn parse(url: &str) -> Result<EgressProxy, String> {
        const FORM: &str = "expected http://HOST:PORT or http://USER:PASSWORD@HOST:PORT";
        let url = url.trim();
        let Some((scheme, rest)) = url.split_once("://") else {
            return Err(format!("not a URL; {FORM}"));
        };
        if !scheme.eq_ignore_ascii_case("http") {
            return Err(format!(
                "the scheme must be http (the proxy is asked for CONNECT tunnels; TLS to the \
                 target runs inside them), not {:?}; {FORM}",
                scheme.to_ascii_lowercase()
            ));
        }
        let authority = rest.strip_suffix('/').unwrap_or(rest);
        if authority.contains(['/', '?', '#']) {
            return Err(format!(
                "a proxy URL has no path, query or fragment; {FORM}"
            ));
        }
        let (userinfo, hostport) = match authority.rsplit_once('@') {
            Some((u, h)) => (Some(u), h),
            None => (None, authority),
        };
        let (host, port) = if let Some(v6) = hostport.strip_prefix('[') {
            let Some((ip, port)) = v6.split_once("]:") else {
                return Err(format!("no port; {FORM}"));
            };
            if ip.parse::<std::net::Ipv6Addr>().is_err() {
                return Err(format!("the host is not an IPv6 address; {FORM}"));
            }
            (ip, port)
        } else {
            let Some((host, port)) = hostport.rsplit_once(':') else {
                return Err(format!("no port; {FORM}"));
            };
            let name_char = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '.';
            if host.is_empty() || !host.chars().all(name_char) {
                return Err(format!("the host is not a name or an address; {FORM}"));
            }
            (host, port)
        };
        let port = match port.parse::<u16>() {
            Ok(p) if p > 0 && port.bytes().all(|b| b.is_ascii_digit()) => p,
            _ => return Err(format!("the port must be a number from 1 to 65535; {FORM}")),
        };
        let authorization = match userinfo {
            None => None,
            Some(userinfo) => {
                let (user, password) = userinfo.split_once(':').unwrap_or((userinfo, ""));
                let (Some(user), Some(password)) = (percent_decode(user), percent_decode(password))
                else {
                    return Err(format!("the credentials are not percent-encoded; {FORM}"));
                };
                let mut pair = user;
                pair.push(b':');
                pair.extend_from_slice(&password);
                Some(format!("Basic {}", base64(&pair)))
            }
        };
        Ok(EgressProxy {
            host: host.to_ascii_lowercase(),
            port,
            authorization,
        })
    }

    /// Whether the URL had credentials (sent as `Proxy-Authorization: Basic`).
    pub fn has_credentials(&self) -> bool {
        self.authorization.is_some()
    }
}

impl fmt::Display for EgressProxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "http://[{}]:{}", self.host, self.port)
        } else {
            write!(f, "http://{}:{}", self.host, self.port)
        }
    }
}

impl fmt::Debug for EgressProxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EgressProxy")
            .field("url", &self.to_string())
            .field("credentials", &self.has_credentials())
            .finish()
    }
}

impl std::str::FromStr for EgressProxy {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        EgressProxy::parse(s)
    }
}

/// Why [`tunnel`] did not open a tunnel.
#[derive(Debug)]
pub enum TunnelError {
    /// The proxy did not accept the TCP connection (or its name did not resolve).
    Unreachable(String, io::Error),
    /// The proxy answered `CONNECT` with a status other than 2xx (403: its policy refuses the
    /// address or port; 407: credentials missing or wrong; 502: it could not connect).
    Refused {
        /// The proxy, as `http://host:port`.
        proxy: String,
        /// The address asked for.
        target: SocketAddr,
        /// The proxy's status code.
        status: u16,
        /// Its reason phrase (at most 64 characters of it).
        reason: String,
    },
    /// The proxy's answer was not an HTTP answer head, or it broke off.
    Protocol(String, String),
}

impl fmt::Display for TunnelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TunnelError::Unreachable(proxy, e) => write!(f, "egress proxy {proxy}: {e}"),
            TunnelError::Refused {
                proxy,
                target,
                status,
                reason,
            } => write!(
                f,
                "egress proxy {proxy} refused CONNECT {target}: {status} {reason}"
            ),
            TunnelError::Protocol(proxy, what) => write!(f, "egress proxy {proxy}: {what}"),
        }
    }
}

impl std::error::Error for TunnelError {}

/// Connects to `proxy` and asks it for a tunnel to `target` (`CONNECT <ip>:<port>`, with
/// `Proxy-Authorization` when the proxy URL had credentials). On a 2xx answer the TCP
/// stream is the tunnel: what is written to it reaches `target`. The caller bounds the time.
pub async fn tunnel(proxy: &EgressProxy, target: SocketAddr) -> Result<TcpStream, TunnelError> {
    let name = proxy.to_string();
    let mut tcp = TcpStream::connect((proxy.host.as_str(), proxy.port))
        .await
        .map_err(|e| TunnelError::Unreachable(name.clone(), e))?;
    let _ = tcp.set_nodelay(true);
    // `SocketAddr`'s display brackets IPv6 addresses, as an authority needs.
    let mut head = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n");
    if let Some(auth) = &proxy.authorization {
        head.push_str("Proxy-Authorization: ");
        head.push_str(auth);
        head.push_str("\r\n");
    }
    head.push_str("\r\n");
    let broke = |e: io::Error| TunnelError::Protocol(name.clone(), format!("CONNECT: {e}"));
    tcp.write_all(head.as_bytes()).await.map_err(broke)?;
    // Read the answer head. Nothing may follow it before we speak (neither TLS nor HTTP/1
    // servers speak first), so reading in chunks loses nothing of the tunnel's bytes.
    let mut answer = Vec::with_capacity(256);
    let end = loop {
        let mut chunk = [0u8; 1024];
        let n = tcp.read(&mut chunk).await.map_err(broke)?;
        if n == 0 {
            return Err(TunnelError::Protocol(
                name,
                "closed the connection without answering CONNECT".to_owned(),
            ));
        }
        answer.extend_from_slice(&chunk[..n]);
        if let Some(at) = answer.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        if answer.len() > MAX_ANSWER_HEAD {
            return Err(TunnelError::Protocol(
                name,
                "answer head too long".to_owned(),
            ));
        }
    };
    let status_line = answer
        .split(|&b| b == b'\r')
        .next()
        .map(String::from_utf8_lossy)
        .unwrap_or_default()
        .into_owned();
    let mut parts = status_line.splitn(3, ' ');
    let (version, code, reason) = (parts.next(), parts.next(), parts.next().unwrap_or(""));
    let status = match (version, code.and_then(|c| c.parse::<u16>().ok())) {
        (Some(v), Some(s)) if v.starts_with("HTTP/1.") && (100..1000).contains(&s) => s,
        _ => {
            return Err(TunnelError::Protocol(
                name,
                "the answer to CONNECT is not HTTP/1".to_owned(),
            ));
        }
    };
    if !(200..300).contains(&status) {
        let reason: String = reason
            .chars()
            .filter(|c| !c.is_control())
            .take(64)
            .collect();
        return Err(TunnelError::Refused {
            proxy: name,
            target,
            status,
            reason,
        });
    }
    if end != answer.len() {
        return Err(TunnelError::Protocol(
            name,
            "sent bytes after its answer to CONNECT".to_owned(),
        ));
    }
    Ok(tcp)
}

/// `%XX` sequences decoded; `None` when one is malformed.
fn percent_decode(s: &str) -> Option<Vec<u8>> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    Some(out)
}

/// Standard base64 with padding (RFC 4648 §4), as `Basic` credentials are written.
fn base64(input: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(input.len().div_ceil(3) * 4);
    for chunk in input.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for (i, shift) in [18u32, 12, 6, 0].into_iter().enumerate() {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[((n >> shift) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_rfc_4648() {
        for (plain, coded) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
            ("user:pass", "dXNlcjpwYXNz"),
        ] {
            assert_eq!(base64(plain.as_bytes()), coded, "{plain}");
        }
    }

    #[test]
    fn proxy_urls_are_read_and_their_credentials_never_shown() {
        let p = EgressProxy::parse("http://127.0.0.1:3128").expect("plain");
        assert_eq!(p.to_string(), "http://127.0.0.1:3128");
        assert!(!p.has_credentials());
        let p = EgressProxy::parse("HTTP://Proxy.Internal:8080/").expect("a name");
        assert_eq!(p.to_string(), "http://proxy.internal:8080");
        let p = EgressProxy::parse("http://[::1]:3128").expect("v6");
        assert_eq!(p.to_string(), "http://[::1]:3128");
        let p = EgressProxy::parse("http://us%40er:s3cr%3At@10.0.0.1:3128").expect("creds");
        assert_eq!(p.authorization.as_deref(), Some("Basic dXNAZXI6czNjcjp0"));
        for shown in [p.to_string(), format!("{p:?}")] {
            assert!(
                !shown.contains("s3cr") && !shown.contains("us%40er"),
                "{shown}"
            );
        }
        for (bad, why) in [
            ("127.0.0.1:3128", "not a URL"),
            ("https://proxy:3128", "scheme must be http"),
            ("socks5://proxy:1080", "scheme must be http"),
            ("http://proxy", "no port"),
            ("http://[::1]", "no port"),
            ("http://proxy:0", "port must be"),
            ("http://proxy:65536", "port must be"),
            ("http://proxy:+80", "port must be"),
            ("http://proxy:3128/path", "no path"),
            ("http://proxy:3128?q", "no path"),
            ("http://:3128", "the host"),
            ("http://pro xy:3128", "the host"),
            ("http://[zz]:3128", "IPv6"),
            ("http://u:p%zz@proxy:3128", "percent-encoded"),
        ] {
            let err = EgressProxy::parse(bad).expect_err(bad);
            assert!(err.contains(why), "{bad}: {err}");
            assert!(err.contains("expected http://HOST:PORT"), "{bad}: {err}");
        }
        let err = EgressProxy::parse("https://user:hunter2@proxy:3128").expect_err("https");
        assert!(!err.contains("hunter2"), "{err}");
    }
}
