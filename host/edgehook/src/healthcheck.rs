//! `edgehook healthcheck`: one `GET` of a health URL, exit 0 on a 200 and 1 otherwise: the
//! container image's `HEALTHCHECK`, where there is no shell and no curl. Plain HTTP/1.1 over
//! a std socket, with no runtime to start: it runs every few seconds beside `serve`.

use anyhow::{Context as _, Result, anyhow, bail};
use std::io::{BufRead as _, BufReader, Write as _};
use std::net::{TcpStream, ToSocketAddrs as _};
use std::time::Duration;

/// The URL asked when none is given: the image's `serve` on its default port.
pub const DEFAULT_URL: &str = "http://127.0.0.1:8080/healthz";

/// `edgehook healthcheck`'s flags.
#[derive(clap::Args)]
pub struct HealthcheckArgs {
    /// The URL to ask (http:// only): its answer must be 200.
    #[arg(long, default_value = DEFAULT_URL, env = "EDGEHOOK_HEALTHCHECK_URL")]
    pub url: String,
    /// How long the connection and the answer may take, in milliseconds.
    #[arg(long, default_value_t = 3000)]
    pub timeout_ms: u64,
}

/// Asks `args.url`; `Ok` on a 200, an error (exit 1) saying what came instead.
pub fn run(args: &HealthcheckArgs) -> Result<()> {
    let status = status_of(&args.url, Duration::from_millis(args.timeout_ms.max(1)))?;
    if status != 200 {
        bail!("{} answered {status}", args.url);
    }
    Ok(())
}

/// The status code `url` answers a `GET` with, within `timeout` per step.
pub fn status_of(url: &str, timeout: Duration) -> Result<u16> {
    let uri: http::Uri = url
        .parse()
        .with_context(|| format!("invalid --url {url:?}"))?;
    if uri.scheme_str() != Some("http") {
        bail!("--url must be an http:// URL, got {url:?}");
    }
    let authority = uri
        .authority()
        .ok_or_else(|| anyhow!("--url {url:?} has no host"))?;
    let host = authority
        .host()
        .trim_start_matches('[')
        .trim_end_matches(']');
    let port = authority.port_u16().unwrap_or(80);
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    let mut stream = connect(host, port, timeout).with_context(|| format!("cannot reach {url}"))?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {authority}\r\nUser-Agent: edgehook-healthcheck\r\nConnection: close\r\n\r\n"
    )
    .with_context(|| format!("cannot ask {url}"))?;
    let mut line = String::new();
    BufReader::new(stream)
        .read_line(&mut line)
        .with_context(|| format!("no answer from {url}"))?;
    parse_status_line(&line).ok_or_else(|| anyhow!("{url} answered {:?}", line.trim_end()))
}

/// The first address of `host:port` that accepts a connection within `timeout`.
fn connect(host: &str, port: u16, timeout: Duration) -> Result<TcpStream> {
    let mut last = None;
    for addr in (host, port).to_socket_addrs()? {
        match TcpStream::connect_timeout(&addr, timeout) {
            Ok(stream) => return Ok(stream),
            Err(e) => last = Some(e),
        }
    }
    Err(last.map_or_else(|| anyhow!("{host} has no address"), anyhow::Error::from))
}

/// The code of an HTTP/1.x status line (`HTTP/1.1 200 OK`).
fn parse_status_line(line: &str) -> Option<u16> {
    let mut parts = line.split_ascii_whitespace();
    if !parts.next()?.starts_with("HTTP/1.") {
        return None;
    }
    let code = parts.next()?;
    if code.len() != 3 {
        return None;
    }
    code.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read as _;
    use std::net::TcpListener;

    /// A listener that answers one connection with `answer` and hands back the request.
    fn answer_once(answer: &'static str) -> (String, std::thread::JoinHandle<String>) {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let url = format!("http://{}/healthz", listener.local_addr().expect("addr"));
        let handle = std::thread::spawn(move || {
            let (mut conn, _) = listener.accept().expect("accept");
            let mut request = Vec::new();
            let mut buf = [0u8; 512];
            while !request.ends_with(b"\r\n\r\n") {
                let n = conn.read(&mut buf).expect("read");
                if n == 0 {
                    break;
                }
                request.extend_from_slice(&buf[..n]);
            }
            conn.write_all(answer.as_bytes()).expect("write");
            String::from_utf8(request).expect("utf-8")
        });
        (url, handle)
    }

    fn args(url: &str) -> HealthcheckArgs {
        HealthcheckArgs {
            url: url.to_owned(),
            timeout_ms: 5000,
        }
    }

    #[test]
    fn a_200_is_healthy_and_the_request_is_a_get_of_the_path() {
        let (url, handle) = answer_once("HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok");
        run(&args(&url)).expect("healthy");
        let request = handle.join().expect("listener");
        assert!(
            request.starts_with("GET /healthz HTTP/1.1\r\n"),
            "{request}"
        );
        assert!(request.contains("\r\nHost: 127.0.0.1:"), "{request}");
    }

    #[test]
    fn any_other_answer_is_unhealthy() {
        for answer in [
            "HTTP/1.1 503 Service Unavailable\r\n\r\n",
            "HTTP/1.1 204 No Content\r\n\r\n",
            "garbage\r\n\r\n",
            "",
        ] {
            let (url, handle) = answer_once(answer);
            let err = run(&args(&url)).expect_err(answer);
            handle.join().expect("listener");
            assert!(err.to_string().contains(&url), "{err:#}");
        }
    }

    #[test]
    fn nothing_listening_and_bad_urls_are_errors() {
        let port = TcpListener::bind("127.0.0.1:0")
            .expect("bind")
            .local_addr()
            .expect("addr")
            .port();
        // The listener is closed: the port refuses.
        assert!(run(&args(&format!("http://127.0.0.1:{port}/healthz"))).is_err());
        for url in ["https://127.0.0.1/healthz", "not a url", "/healthz"] {
            assert!(run(&args(url)).is_err(), "{url}");
        }
    }

    #[test]
    fn status_lines() {
        assert_eq!(parse_status_line("HTTP/1.1 200 OK\r\n"), Some(200));
        assert_eq!(parse_status_line("HTTP/1.0 404\r\n"), Some(404));
        assert_eq!(parse_status_line("HTTP/2 200\r\n"), None);
        assert_eq!(parse_status_line("HTTP/1.1 2000 OK"), None);
        assert_eq!(parse_status_line(""), None);
    }
}
