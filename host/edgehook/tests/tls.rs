//! `serve --tls-cert --tls-key` answers HTTPS, HTTP/2 or HTTP/1.1 as the client's
//! ALPN asks, and reads its certificate again on SIGHUP without dropping the connections
//! already open. The certificates are made by the test (its own CA).

use crate::common::*;
use bytes::Bytes;
use edgehook_testkit::tls::{cert_files, connector};
use http_body_util::{BodyExt as _, Empty};
use rustls_pki_types::ServerName;
use std::net::{IpAddr, Ipv4Addr};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio_rustls::client::TlsStream;

const LOOPBACK: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

async fn connect(
    addr: &str,
    ca: &str,
    alpn: &[&[u8]],
) -> std::io::Result<TlsStream<tokio::net::TcpStream>> {
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    connector(ca, alpn)
        .connect(ServerName::IpAddress(LOOPBACK.into()), tcp)
        .await
}

/// One HTTP/1.1 `GET` on an open connection, kept alive: the status line and the body.
async fn get_http1(stream: &mut TlsStream<tokio::net::TcpStream>, path: &str) -> (String, String) {
    let request = format!("GET {path} HTTP/1.1\r\nHost: edgehook\r\n\r\n");
    stream.write_all(request.as_bytes()).await.expect("write");
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = stream.read(&mut buf).await.expect("read");
        assert!(
            n > 0,
            "the connection closed: {}",
            String::from_utf8_lossy(&got)
        );
        got.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&got).into_owned();
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let length: usize = head
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().parse().unwrap_or(0))
                })
                .unwrap_or(0);
            if body.len() >= length {
                let status = head.lines().next().unwrap_or("").to_owned();
                return (status, body[..length].to_owned());
            }
        }
    }
}

#[test]
fn serve_answers_https_with_http2_and_reloads_its_certificate_on_sighup() {
    let dir = temp_dir("tls");
    let first_ca = cert_files(&dir, &["127.0.0.1"]);
    let cert = dir.join("cert.pem");
    let key = dir.join("key.pem");
    let args = [
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--tls-cert",
        cert.to_str().expect("path"),
        "--tls-key",
        key.to_str().expect("path"),
    ];
    let mut server = Proc::start(&args, &dir);
    let addr = server.address();
    let listening = server
        .seen
        .iter()
        .find(|l| l.contains("listening"))
        .cloned()
        .unwrap_or_default();
    assert!(listening.contains("https://"), "{listening}");
    let rt = rt();

    // HTTP/1.1 over TLS, on a connection kept open across the reload below.
    let mut kept = rt
        .block_on(connect(&addr, &first_ca, &[b"http/1.1"]))
        .expect("a TLS connection");
    let (status, body) = rt.block_on(get_http1(&mut kept, "/healthz"));
    assert!(status.contains("200"), "{status} {body}");

    // HTTP/2 when the client offers h2.
    let (alpn, status) = rt.block_on(async {
        let stream = connect(&addr, &first_ca, &[b"h2", b"http/1.1"])
            .await
            .expect("tls");
        let alpn = stream.get_ref().1.alpn_protocol().map(<[u8]>::to_vec);
        let io = hyper_util::rt::TokioIo::new(stream);
        let (mut send, conn) =
            hyper::client::conn::http2::handshake(hyper_util::rt::TokioExecutor::new(), io)
                .await
                .expect("h2 handshake");
        tokio::spawn(conn);
        let req = http::Request::get(format!("https://{addr}/healthz"))
            .body(Empty::<Bytes>::new())
            .expect("request");
        let resp = send.send_request(req).await.expect("h2 request");
        let status = resp.status().as_u16();
        let _ = resp.into_body().collect().await;
        (alpn, status)
    });
    assert_eq!((alpn.as_deref(), status), (Some(&b"h2"[..]), 200));

    // A client that does not trust the CA is refused at the handshake.
    let other_ca_dir = temp_dir("tls-other");
    let other_ca = cert_files(&other_ca_dir, &["127.0.0.1"]);
    assert!(
        rt.block_on(connect(&addr, &other_ca, &[b"http/1.1"]))
            .is_err()
    );

    // A new certificate from another CA, and SIGHUP: new connections get it, the kept one
    // goes on answering.
    let second_ca = cert_files(&dir, &["127.0.0.1"]);
    let pid = server.child.id().to_string();
    let hup = std::process::Command::new("kill")
        .args(["-HUP", &pid])
        .status()
        .expect("kill");
    assert!(hup.success());
    server.wait_for("the reload", |l| l.contains("tls certificate reloaded"));
    let mut fresh = rt
        .block_on(connect(&addr, &second_ca, &[b"http/1.1"]))
        .expect("the new certificate");
    let (status, _) = rt.block_on(get_http1(&mut fresh, "/healthz"));
    assert!(status.contains("200"), "{status}");
    assert!(
        rt.block_on(connect(&addr, &first_ca, &[b"http/1.1"]))
            .is_err(),
        "the old one is gone"
    );
    let (status, _) = rt.block_on(get_http1(&mut kept, "/healthz"));
    assert!(
        status.contains("200"),
        "the connection open before the reload: {status}"
    );

    // A reload that cannot read its files keeps the certificate in use.
    std::fs::write(&key, b"not a key").expect("break the key");
    let hup = std::process::Command::new("kill")
        .args(["-HUP", &pid])
        .status()
        .expect("kill");
    assert!(hup.success());
    server.wait_for("the failed reload", |l| l.contains("reload failed"));
    let mut after = rt
        .block_on(connect(&addr, &second_ca, &[b"http/1.1"]))
        .expect("still the second certificate");
    let (status, _) = rt.block_on(get_http1(&mut after, "/healthz"));
    assert!(status.contains("200"), "{status}");
    drop(server);
}
