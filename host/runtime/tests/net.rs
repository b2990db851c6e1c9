//! The real outbound sender of `edgehook serve`, against the test kit's loopback receiver: the SSRF guard at
//! send time, no redirects, the per-attempt timeout.

use bytes::Bytes;
use edgehook_runtime::net::{NetOptions, NetOutbound, Resolve, ResolveFuture, StaticResolver};
use edgehook_runtime::outbound::Outbound;
use edgehook_testkit::receiver::{Answer, Receiver};
use edgehook_testkit::ssrf::{corpus, expected_lookups, host_of};
use http_body_util::{BodyExt, Full};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use wasmtime_wasi_http::{Error as HttpError, RequestOptions};

pub(crate) fn request(url: &str) -> http::Request<wasmtime_wasi_http::WasiBody> {
    let body = Full::new(Bytes::from_static(b"{}"))
        .map_err(|never| match never {})
        .boxed_unsync();
    http::Request::post(url).body(body).expect("request")
}

/// The test kit's receiver answering every request with `status` (and a Location header),
/// or never answering when `status` is 0.
pub(crate) async fn server(status: u16) -> Receiver {
    let answer = match status {
        0 => Answer::never(),
        _ => Answer::status(status).header("location", "http://127.0.0.1:1/elsewhere"),
    };
    Receiver::builder().answer(answer).start().await
}

#[tokio::test]
async fn private_addresses_are_refused_at_send_time_unless_allowed() {
    let receiver = server(200).await;
    let port = receiver.port();
    let strict = NetOutbound::new(&NetOptions::default()).expect("client");
    for url in [
        format!("https://127.0.0.1:{port}/"),
        format!("https://localhost:{port}/"),
        format!("https://[::ffff:127.0.0.1]:{port}/"),
    ] {
        let err = strict.send(request(&url), None).await.err();
        assert!(
            matches!(err, Some(HttpError::DestinationIpProhibited)),
            "{url}: {err:?}"
        );
    }
    // Plain http is refused like the component refuses it: only allowed with `allow_http`.
    let err = strict
        .send(request(&format!("http://127.0.0.1:{port}/")), None)
        .await
        .err();
    assert!(matches!(err, Some(HttpError::HttpRequestDenied)), "{err:?}");
    assert_eq!(receiver.hits(), 0, "nothing reached the private address");
    let open = NetOutbound::new(&NetOptions::open()).expect("client");
    let resp = open
        .send(request(&format!("http://127.0.0.1:{port}/")), None)
        .await
        .expect("allowed");
    assert_eq!(resp.status(), 200);
    assert_eq!(receiver.hits(), 1);
}

/// Each switch alone allows what it says and nothing else: `allow_http` lets plain `http` to
/// a name through the scheme check, but its private answer is still refused; with
/// `allow_private` alone, `http` to loopback is still denied (https to loopback goes through:
/// `https_is_verified_against_the_webpki_roots_plus_an_extra_ca`).
#[tokio::test]
async fn each_outbound_switch_alone_still_refuses_the_other() {
    use edgehook_runtime::net::{Refusal, check_target};
    let receiver = server(200).await;
    let port = receiver.port();
    let dns = StaticResolver::new([(
        "hooks.example.test".to_owned(),
        vec![IpAddr::from([127, 0, 0, 1])],
    )]);
    let only_http = NetOptions {
        allow_http: true,
        ..NetOptions::default()
    };
    let only_private = NetOptions {
        allow_private: true,
        ..NetOptions::default()
    };
    let uri = |s: &str| s.parse::<http::Uri>().expect("uri");
    let check = |url: &str, o: &NetOptions| check_target(&uri(url), o.policy()).map(|_| ());
    assert_eq!(check("http://example.com/", &only_http), Ok(()));
    assert_eq!(
        check("http://127.0.0.1/", &only_http),
        Err(Refusal::NotPublic)
    );
    assert_eq!(check("https://localhost/", &only_private), Ok(()));
    assert_eq!(
        check("http://127.0.0.1/", &only_private),
        Err(Refusal::NotHttps)
    );
    let sender = NetOutbound::with_resolver(&only_http, Arc::new(dns.clone())).expect("client");
    for url in [
        format!("http://hooks.example.test:{port}/"),
        format!("http://127.0.0.1:{port}/"),
    ] {
        let err = sender.send(request(&url), None).await.err();
        assert!(
            matches!(err, Some(HttpError::DestinationIpProhibited)),
            "{url}: {err:?}"
        );
    }
    assert_eq!(
        dns.asked(),
        ["hooks.example.test"],
        "http passed the scheme check"
    );
    let sender = NetOutbound::with_resolver(&only_private, Arc::new(dns)).expect("client");
    let url = format!("http://127.0.0.1:{port}/");
    let err = sender.send(request(&url), None).await.err();
    assert!(matches!(err, Some(HttpError::HttpRequestDenied)), "{err:?}");
    assert_eq!(receiver.hits(), 0, "nothing was sent");
}

#[tokio::test]
async fn redirects_are_not_followed() {
    let receiver = server(302).await;
    let port = receiver.port();
    let open = NetOutbound::new(&NetOptions::open()).expect("client");
    let resp = open
        .send(request(&format!("http://127.0.0.1:{port}/")), None)
        .await
        .expect("answered");
    assert_eq!(resp.status(), 302, "the 3xx is handed back as is");
    assert_eq!(receiver.hits(), 1);
}

#[tokio::test]
async fn the_attempt_timeout_is_honoured() {
    let port = server(0).await.port();
    let open = NetOutbound::new(&NetOptions::open()).expect("client");
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
async fn refused_connections_are_reported() {
    let open = NetOutbound::new(&NetOptions::open()).expect("client");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    drop(listener);
    let err = open
        .send(request(&format!("http://127.0.0.1:{port}/")), None)
        .await
        .err();
    assert!(matches!(err, Some(HttpError::ConnectionRefused)), "{err:?}");
    // Unknown names are not tried here: resolving one would query the network's DNS server.
}

/// The name (besides 127.0.0.1) in the test TLS server's certificate.
pub(crate) const TLS_NAME: &str = "hooks.example.test";

/// The test kit's receiver over HTTPS, its certificate for 127.0.0.1 and [`TLS_NAME`]
/// issued by a fresh CA.
pub(crate) async fn tls_server() -> Receiver {
    Receiver::builder()
        .tls(&["127.0.0.1", TLS_NAME])
        .start()
        .await
}

#[tokio::test]
async fn https_is_verified_against_the_webpki_roots_plus_an_extra_ca() {
    let server = tls_server().await;
    let (port, ca_pem) = (server.port(), server.ca_pem());
    let url = format!("https://127.0.0.1:{port}/hook");
    // The webpki roots alone do not trust a private CA.
    let roots_only = NetOutbound::new(&NetOptions::open()).expect("client");
    let err = roots_only.send(request(&url), None).await.err();
    assert!(matches!(err, Some(HttpError::TlsProtocolError)), "{err:?}");
    // With the CA given as --extra-ca, the same server is trusted.
    let dir = edgehook_testkit::temp_dir("ca");
    let ca_file = dir.join("ca.pem");
    std::fs::write(&ca_file, ca_pem).expect("write ca");
    let trusting = NetOutbound::new(&NetOptions {
        allow_http: false,
        allow_private: true,
        extra_ca: Some(ca_file),
        ..NetOptions::default()
    })
    .expect("client");
    let resp = trusting
        .send(request(&url), None)
        .await
        .expect("TLS handshake verified");
    assert_eq!(resp.status(), 200);
    let _ = std::fs::remove_dir_all(&dir);
    // A bad CA file is a clear error at start-up.
    let bad = NetOutbound::new(&NetOptions {
        allow_http: false,
        allow_private: true,
        extra_ca: Some("/nonexistent/ca.pem".into()),
        ..NetOptions::default()
    });
    assert!(
        bad.err()
            .is_some_and(|e| e.to_string().contains("/nonexistent/ca.pem"))
    );
}

/// The corpus URL with its port replaced by `port` (so anything that did connect would reach
/// this test's loopback listeners), or as it is when it has no recognisable authority.
fn with_port(url: &str, port: u16) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let (userinfo, hostport) = match authority.rsplit_once('@') {
        Some((u, h)) => (format!("{u}@"), h),
        None => (String::new(), authority),
    };
    let host = match hostport.find(']') {
        Some(close) if hostport.starts_with('[') => &hostport[..=close],
        _ => hostport.split(':').next().unwrap_or(hostport),
    };
    format!("{scheme}://{userinfo}{host}:{port}{tail}")
}

#[tokio::test]
async fn every_corpus_url_is_refused_by_the_sender_without_resolving_or_connecting() {
    let entries = corpus();
    assert!(
        entries.len() >= 40,
        "the corpus has {} entries",
        entries.len()
    );
    // Listening on one port of 127.0.0.1 and ::1, counting every connection.
    let listening = Receiver::builder().both_loopbacks().start().await;
    let port = listening.port();
    let dns = StaticResolver::new(
        entries
            .iter()
            .filter(|e| !e.resolves_to.is_empty())
            .map(|e| (host_of(&e.url), e.resolves_to.clone())),
    );
    let strict =
        NetOutbound::with_resolver(&NetOptions::default(), Arc::new(dns.clone())).expect("client");
    let mut unexpressible = 0;
    for e in &entries {
        let url = with_port(&e.url, port);
        let Ok(req) = http::Request::post(url.as_str()).body(
            Full::new(Bytes::from_static(b"{}"))
                .map_err(|never| match never {})
                .boxed_unsync(),
        ) else {
            // Not even an HTTP request can carry it (non-ASCII, a tab, a backslash); the
            // component refuses it at create too.
            assert_eq!(e.create, "invalid_url", "{} ({})", e.url, e.trick);
            unexpressible += 1;
            continue;
        };
        let err = tokio::time::timeout(Duration::from_secs(5), strict.send(req, None))
            .await
            .unwrap_or_else(|_| panic!("{url} ({}): no answer in time", e.trick))
            .err();
        match e.create.as_str() {
            "private_target" | "accepted" => assert!(
                matches!(err, Some(HttpError::DestinationIpProhibited)),
                "{url} ({}): {err:?}",
                e.trick
            ),
            _ => assert!(
                matches!(
                    err,
                    Some(HttpError::HttpRequestUriInvalid | HttpError::DestinationIpProhibited)
                ),
                "{url} ({}): {err:?}",
                e.trick
            ),
        }
    }
    assert!(
        unexpressible < entries.len() / 4,
        "most entries reach the sender"
    );
    assert_eq!(listening.connections(), 0, "no connection was made");
    // Only names nothing in the URL gives away were resolved; local names, names that
    // spell an address, and IP literals in every notation were refused without a lookup.
    let mut asked = dns.asked();
    asked.sort();
    asked.dedup();
    assert_eq!(asked, expected_lookups(&entries));
}

#[tokio::test]
async fn the_sender_connects_to_the_address_its_resolver_answered() {
    let receiver = server(200).await;
    let port = receiver.port();
    let dns = StaticResolver::new([(
        "hooks.example.test".to_owned(),
        vec![IpAddr::from([127, 0, 0, 1])],
    )]);
    let open =
        NetOutbound::with_resolver(&NetOptions::open(), Arc::new(dns.clone())).expect("client");
    let resp = open
        .send(request(&format!("http://hooks.example.test:{port}/")), None)
        .await
        .expect("delivered to the pinned address");
    assert_eq!(resp.status(), 200);
    assert_eq!(receiver.hits(), 1);
    assert_eq!(dns.asked(), ["hooks.example.test"]);
    // A name the resolver does not know is "not found", not a lookup elsewhere.
    let err = open
        .send(
            request(&format!("http://unknown.example.test:{port}/")),
            None,
        )
        .await
        .err();
    assert!(
        matches!(err, Some(HttpError::DestinationNotFound)),
        "{err:?}"
    );
}

/// Answers the first lookup with 127.0.0.1 and never answers another: once it has been
/// asked, a request can only go over a connection the pool already holds.
///
/// Why not an ordinary resolver: when a request finds no idle connection, hyper-util's pool
/// starts a connect and takes whichever comes first, that or a connection coming back. The
/// sender hands the response to the component before its body is read (in the background),
/// so a request sent the instant the previous one returns may open a second connection
/// (ten back-to-back requests to this test's server used two). With lookups after the first
/// never ending, the count is exact.
pub(crate) struct FirstLookupOnly(pub(crate) Arc<AtomicUsize>);

impl Resolve for FirstLookupOnly {
    fn resolve(&self, _host: &str, port: u16) -> ResolveFuture {
        if self.0.fetch_add(1, Ordering::SeqCst) == 0 {
            let addr = SocketAddr::new(IpAddr::from([127, 0, 0, 1]), port);
            Box::pin(async move { Ok(vec![addr]) })
        } else {
            Box::pin(std::future::pending())
        }
    }
}

#[tokio::test]
async fn sequential_deliveries_to_one_host_reuse_one_connection() {
    let server = tls_server().await;
    let (port, ca_pem) = (server.port(), server.ca_pem());
    let dir = edgehook_testkit::temp_dir("pool");
    let ca_file = dir.join("ca.pem");
    std::fs::write(&ca_file, ca_pem).expect("write ca");
    let lookups = Arc::new(AtomicUsize::new(0));
    let sender = NetOutbound::with_resolver(
        &NetOptions {
            allow_http: false,
            allow_private: true,
            extra_ca: Some(ca_file),
            ..NetOptions::default()
        },
        Arc::new(FirstLookupOnly(lookups.clone())),
    )
    .expect("client");
    let _ = std::fs::remove_dir_all(&dir);
    let deliveries = 10;
    for n in 0..deliveries {
        // A fresh connection would need a lookup that never ends (the sender's own response
        // timeout would fail the delivery): each delivery after the first is carried by the
        // connection the first one opened, back in the pool.
        let url = format!("https://{TLS_NAME}:{port}/hooks/{n}");
        let resp = sender
            .send(request(&url), None)
            .await
            .unwrap_or_else(|e| panic!("delivery {n} found no pooled connection: {e:?}"));
        assert_eq!(resp.status(), 200);
    }
    assert_eq!(
        server.connections(),
        1,
        "{deliveries} deliveries, one after another, over one TLS connection"
    );
}

/// A burst of attempts to one receiver, more than `--max-connections-per-target`: the
/// receiver never sees more requests in flight, nor more connections, than the limit, and a
/// second burst is carried by the same connections (none opened and closed per burst).
#[tokio::test]
async fn a_burst_to_one_receiver_stays_within_its_connection_limit() {
    // Each answer waits a little, so that every other attempt of the burst runs meanwhile.
    let receiver = Receiver::builder()
        .answer(Answer::ok().after(Duration::from_millis(20)))
        .keep_nothing()
        .start()
        .await;
    let port = receiver.port();
    let limit = 4;
    let sender = Arc::new(
        NetOutbound::new(&NetOptions {
            connections_per_target: limit,
            ..NetOptions::open()
        })
        .expect("client"),
    );
    for burst in 0..2 {
        let mut attempts = tokio::task::JoinSet::new();
        for n in 0..40 {
            let (sender, url) = (sender.clone(), format!("http://127.0.0.1:{port}/s{n}"));
            attempts.spawn(async move { sender.send(request(&url), None).await });
        }
        while let Some(sent) = attempts.join_next().await {
            let status = sent.expect("task").expect("delivered").status();
            assert_eq!(status, 200, "burst {burst}");
        }
        let most = receiver.most_in_flight();
        assert!(
            most <= limit,
            "burst {burst}: {most} requests in flight at once"
        );
        let opened = receiver.connections();
        assert!(
            opened <= limit,
            "burst {burst}: {opened} connections opened"
        );
    }
}
