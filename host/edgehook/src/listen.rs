//! `edgehook listen`: a local receiver for development. It verifies every delivery the way
//! SPEC §5.2 tells receivers to (raw body, timestamp, HMAC-SHA256, constant-time compare),
//! rejects stale timestamps, dedupes by delivery id and prints what it got.

use anyhow::{Context as _, Result};
use bytes::Bytes;
use edgehook_runtime::log::now_ms;
use hmac::{Hmac, Mac};
use http_body_util::Full;
use sha2::Sha256;
use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

/// Why a delivery was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// A required header is missing or malformed.
    MissingHeader(&'static str),
    /// The timestamp is older (or further in the future) than the tolerance.
    Stale,
    /// The signature does not match.
    BadSignature,
}

/// Verifies one delivery: `X-Service-Signature` must be the lowercase hex HMAC-SHA256 of
/// `<X-Service-Timestamp>.<raw body>` under `secret`, and the timestamp within `tolerance_s`
/// of `now_s`.
pub fn verify(
    secret: &str,
    timestamp: Option<&str>,
    signature: Option<&str>,
    body: &[u8],
    now_s: u64,
    tolerance_s: u64,
) -> Result<(), Refusal> {
    let ts_text = timestamp.ok_or(Refusal::MissingHeader("X-Service-Timestamp"))?;
    let ts: u64 = ts_text
        .parse()
        .map_err(|_| Refusal::MissingHeader("X-Service-Timestamp"))?;
    let sig = signature
        .and_then(|s| hex::decode(s).ok())
        .ok_or(Refusal::MissingHeader("X-Service-Signature"))?;
    if now_s.abs_diff(ts) > tolerance_s {
        return Err(Refusal::Stale);
    }
    let mut mac =
        Hmac::<Sha256>::new_from_slice(secret.as_bytes()).map_err(|_| Refusal::BadSignature)?;
    mac.update(ts_text.as_bytes());
    mac.update(b".");
    mac.update(body);
    mac.verify_slice(&sig).map_err(|_| Refusal::BadSignature)
}

/// Delivery ids remembered for the duplicate check.
const SEEN_LIMIT: usize = 100_000;

/// Runs the receiver on `addr` until the process is stopped.
pub async fn run(addr: SocketAddr, secret: String, tolerance_s: u64) -> Result<()> {
    init_log()?;
    run_on(crate::serve::bind(addr).await?, secret, tolerance_s).await
}

/// Runs the receiver on the listening socket that is this process's standard input (as
/// [`detach`] starts it; the inetd convention) until the process is stopped.
#[cfg(unix)]
pub async fn run_on_stdin(secret: String, tolerance_s: u64) -> Result<()> {
    init_log()?;
    use std::os::fd::AsFd as _;
    let fd = std::io::stdin()
        .as_fd()
        .try_clone_to_owned()
        .context("standard input")?;
    let listener = std::net::TcpListener::from(fd);
    listener
        .set_nonblocking(true)
        .context("standard input is not a listening socket")?;
    let listener = tokio::net::TcpListener::from_std(listener)
        .context("standard input is not a listening socket")?;
    run_on(listener, secret, tolerance_s).await
}

/// Not available off Unix.
#[cfg(not(unix))]
pub async fn run_on_stdin(_secret: String, _tolerance_s: u64) -> Result<()> {
    anyhow::bail!("--socket-on-stdin needs Unix")
}

/// `edgehook listen --detach`: binds `addr` here, so the port is taken (or the error is
/// this command's) before it returns, then runs this executable's `listen` in the background
/// on that socket, with the secret in its environment (not in the process list) and this
/// process's stdout and stderr. Connections made once this returns wait in the socket's
/// backlog until the receiver accepts them: a delivery sent right after never meets a
/// closed port. Returns the address and the receiver's process id.
#[cfg(unix)]
pub fn detach(addr: SocketAddr, secret: &str, tolerance_s: u64) -> Result<(SocketAddr, u32)> {
    use std::process::{Command, Stdio};
    let listener = std::net::TcpListener::bind(addr)
        .with_context(|| format!("cannot listen on {addr} (is another receiver running there?)"))?;
    let bound = listener.local_addr()?;
    let exe = std::env::current_exe().context("locating this executable")?;
    let child = Command::new(exe)
        .args(["listen", "--socket-on-stdin", "--tolerance"])
        .arg(tolerance_s.to_string())
        .env("EDGEHOOK_SIGNING_SECRET", secret)
        .stdin(Stdio::from(std::os::fd::OwnedFd::from(listener)))
        .spawn()
        .context("starting the receiver")?;
    Ok((bound, child.id()))
}

/// Not available off Unix.
#[cfg(not(unix))]
pub fn detach(_addr: SocketAddr, _secret: &str, _tolerance_s: u64) -> Result<(SocketAddr, u32)> {
    anyhow::bail!("--detach needs Unix; start `edgehook listen` in a terminal of its own")
}

/// The receiver's log, as `serve`'s: `EDGEHOOK_LOG_FORMAT` (text on a terminal, json
/// otherwise) and `EDGEHOOK_LOG` (info).
fn init_log() -> Result<()> {
    use edgehook_runtime::log::{self, Format};
    let format = match std::env::var(log::FORMAT_ENV) {
        Ok(name) => Format::parse(&name).map_err(anyhow::Error::msg)?,
        Err(_) => Format::for_stdout(),
    };
    let filter = std::env::var(log::FILTER_ENV).unwrap_or_else(|_| log::DEFAULT_FILTER.into());
    log::init(format, &filter).map_err(anyhow::Error::msg)
}

/// Runs the receiver on `listener` until the process is stopped.
pub async fn run_on(
    listener: tokio::net::TcpListener,
    secret: String,
    tolerance_s: u64,
) -> Result<()> {
    tracing::info!(addr = %listener.local_addr()?, "listening for deliveries");
    let seen: Arc<Mutex<HashSet<String>>> = Arc::default();
    let secret = Arc::new(secret);
    crate::receiver::serve_on(listener, move |parts: http::request::Parts, body: Bytes| {
        let (seen, secret) = (seen.clone(), secret.clone());
        async move {
            let header = |n: &str| parts.headers.get(n).and_then(|v| v.to_str().ok());
            let id = header("x-service-delivery-id").unwrap_or("?").to_owned();
            let event = header("x-service-event").unwrap_or("?").to_owned();
            let verdict = verify(
                &secret,
                header("x-service-timestamp"),
                header("x-service-signature"),
                &body,
                now_ms() / 1000,
                tolerance_s,
            );
            let (status, msg) = match verdict {
                Err(r) => (400, format!("refused: {r:?}")),
                Ok(()) => {
                    let first = seen
                        .lock()
                        .map(|mut s| {
                            // A development tool, but it may run for days: forget the ids
                            // seen once there are many (a late duplicate then shows as new).
                            if s.len() >= SEEN_LIMIT {
                                s.clear();
                            }
                            s.insert(id.clone())
                        })
                        .unwrap_or(true);
                    if first {
                        (200, "verified".to_owned())
                    } else {
                        (200, "duplicate (already processed)".to_owned())
                    }
                }
            };
            println!("--> {event} {id} {msg}\n{}", String::from_utf8_lossy(&body));
            hyper::Response::builder()
                .status(status)
                .body(Full::new(Bytes::from(msg)))
                .unwrap_or_else(|_| hyper::Response::new(Full::new(Bytes::new())))
        }
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verifies_and_refuses() {
        // Vector from docs/signature-vectors.json (computed with openssl).
        let body = br#"{"id":"L1"}"#;
        let sig = "89311bdce12d22ddc13d71dc2e0b6aa5219053b2d0e3e89f8cbdced63baac483";
        let ok = verify(
            "whsec_test",
            Some("1700000000"),
            Some(sig),
            body,
            1_700_000_100,
            300,
        );
        assert_eq!(ok, Ok(()));
        assert_eq!(
            verify(
                "whsec_test",
                Some("1700000000"),
                Some(sig),
                b"{}",
                1_700_000_100,
                300
            ),
            Err(Refusal::BadSignature)
        );
        assert_eq!(
            verify(
                "whsec_other",
                Some("1700000000"),
                Some(sig),
                body,
                1_700_000_100,
                300
            ),
            Err(Refusal::BadSignature)
        );
        assert_eq!(
            verify(
                "whsec_test",
                Some("1700000000"),
                Some(sig),
                body,
                1_700_000_301,
                300
            ),
            Err(Refusal::Stale)
        );
        assert_eq!(
            verify("whsec_test", None, Some(sig), body, 0, 300),
            Err(Refusal::MissingHeader("X-Service-Timestamp"))
        );
        assert_eq!(
            verify("whsec_test", Some("1700000000"), Some("zz"), body, 0, 300),
            Err(Refusal::MissingHeader("X-Service-Signature"))
        );
    }
}
