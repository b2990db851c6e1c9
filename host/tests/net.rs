//! The real outbound sender of `edgehook serve`, against loopback servers: the SSRF guard at
//! send time, no redirects, the per-attempt timeout.

use bytes::Bytes;
use edgehook_host::net::{NetOptions, NetOutbound};
use edgehook_host::outbound::Outbound;
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use wasmtime_wasi_http::{Error as HttpError, RequestOptions};

fn request(url: &str) -> http::Request<wasmtime_wasi_http::WasiBody> {
    let body = Full::new(Bytes::from_static(b"{}"))
        .map_err(|never| match never {})
        .boxed_unsync();
    http::Request::post(url).body(body).expect("request")
}

/// A loopback server answering every request with `status` (and a Location header), or never
/// answering when `status` is 0. Returns its port and a request counter.
async fn server(status: u16) -> (u16, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let hits = Arc::new(AtomicUsize::new(0));
    let h = hits.clone();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let h = h.clone();
            tokio::spawn(async move {
                let svc = service_fn(move |_req| {
                    let h = h.clone();
                    async move {
                        h.fetch_add(1, Ordering::SeqCst);
                        if status == 0 {
                            std::future::pending::<()>().await;
                        }
                        let resp = hyper::Response::builder()
                            .status(status)
                            .header("location", "http://127.0.0.1:1/elsewhere")
                            .body(Full::new(Bytes::new()))
                            .expect("response");
                        Ok::<_, std::convert::Infallible>(resp)
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    (port, hits)
}

#[tokio::test]
async fn private_addresses_are_refused_at_send_time_unless_allowed() {
    let (port, hits) = server(200).await;
    let strict = NetOutbound::new(&NetOptions::default()).expect("client");
    for url in [
        format!("http://127.0.0.1:{port}/"),
        format!("http://localhost:{port}/"),
        format!("http://[::ffff:127.0.0.1]:{port}/"),
        format!("https://127.0.0.1:{port}/"),
    ] {
        let err = strict.send(request(&url), None).await.err();
        assert!(
            matches!(err, Some(HttpError::DestinationIpProhibited)),
            "{url}: {err:?}"
        );
    }
    assert_eq!(
        hits.load(Ordering::SeqCst),
        0,
        "nothing reached the private address"
    );
    let open = NetOutbound::new(&NetOptions {
        allow_private: true,
        extra_ca: None,
    })
    .expect("client");
    let resp = open
        .send(request(&format!("http://127.0.0.1:{port}/")), None)
        .await
        .expect("allowed");
    assert_eq!(resp.status(), 200);
    assert_eq!(hits.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn redirects_are_not_followed() {
    let (port, hits) = server(302).await;
    let open = NetOutbound::new(&NetOptions {
        allow_private: true,
        extra_ca: None,
    })
    .expect("client");
    let resp = open
        .send(request(&format!("http://127.0.0.1:{port}/")), None)
        .await
        .expect("answered");
    assert_eq!(resp.status(), 302, "the 3xx is handed back as is");
    assert_eq!(hits.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn the_attempt_timeout_is_honoured() {
    let (port, _) = server(0).await;
    let open = NetOutbound::new(&NetOptions {
        allow_private: true,
        extra_ca: None,
    })
    .expect("client");
    let options = RequestOptions {
        first_byte_timeout: Some(Duration::from_millis(200)),
        ..Default::default()
    };
    let started = std::time::Instant::now();
    let err = open
        .send(request(&format!("http://127.0.0.1:{port}/")), Some(options))
        .await
        .err();
    assert!(
        matches!(err, Some(HttpError::ConnectionReadTimeout)),
        "{err:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn refused_connections_and_unknown_names_are_reported() {
    let open = NetOutbound::new(&NetOptions {
        allow_private: true,
        extra_ca: None,
    })
    .expect("client");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    drop(listener);
    let err = open
        .send(request(&format!("http://127.0.0.1:{port}/")), None)
        .await
        .err();
    assert!(matches!(err, Some(HttpError::ConnectionRefused)), "{err:?}");
    let err = open
        .send(request("http://no-such-host.invalid/"), None)
        .await
        .err();
    assert!(
        matches!(err, Some(HttpError::DestinationNotFound)),
        "{err:?}"
    );
}
