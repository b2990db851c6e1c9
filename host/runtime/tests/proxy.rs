//! The real sender through an egress proxy (`NetOptions::egress_proxy`), against the test
//! `CONNECT` proxy of `edgehook-testkit` and loopback servers: the tunnel goes to the
//! address the host resolved and checked, TLS is verified end to end for the URL's name,
//! connections are pooled per target through it, a target the SSRF rules refuse never
//! reaches the proxy, and a proxy that refuses the tunnel fails the attempt without the
//! delivery going around it.

use crate::net::{FirstLookupOnly, TLS_NAME, request, server, tls_server};
use edgehook_runtime::net::{NetOptions, NetOutbound, StaticResolver};
use edgehook_runtime::outbound::Outbound;
use edgehook_runtime::proxy::EgressProxy;
use edgehook_testkit::proxy::{Connect, ConnectProxy};
use edgehook_testkit::ssrf::{corpus, host_of};
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::time::Duration;
use wasmtime_wasi_http::Error as HttpError;

/// `base` with every delivery sent through the proxy at `url`.
fn through(url: &str, base: NetOptions) -> NetOptions {
    NetOptions {
        egress_proxy: Some(EgressProxy::parse(url).expect("proxy url")),
        ..base
    }
}

/// A resolver answering `name` with 127.0.0.1, and nothing else.
fn loopback_dns(name: &str) -> StaticResolver {
    StaticResolver::new([(name.to_owned(), vec![IpAddr::from([127, 0, 0, 1])])])
}

#[tokio::test]
async fn deliveries_tunnel_through_the_proxy_to_the_address_the_host_resolved() {
    let receiver = server(200).await;
    let port = receiver.port();
    let proxy = ConnectProxy::start().await;
    let dns = loopback_dns("hooks.example.test");
    let url = format!("http://user:pa%3Ass@127.0.0.1:{}", proxy.port);
    let sender =
        NetOutbound::with_resolver(&through(&url, NetOptions::open()), Arc::new(dns.clone()))
            .expect("client");
    let resp = sender
        .send(
            request(&format!("http://hooks.example.test:{port}/hook")),
            None,
        )
        .await
        .expect("delivered through the proxy");
    assert_eq!(resp.status(), 200);
    assert_eq!(receiver.hits(), 1);
    assert_eq!(
        dns.asked(),
        ["hooks.example.test"],
        "the host resolved the name"
    );
    assert_eq!(
        proxy.connects(),
        [Connect {
            // The checked address, never the name: the proxy's DNS cannot pick another.
            authority: format!("127.0.0.1:{port}"),
            authorization: Some("Basic dXNlcjpwYTpzcw==".to_owned()),
        }]
    );
}

#[tokio::test]
async fn https_through_the_tunnel_is_verified_for_the_name_and_pooled_per_target() {
    let server = tls_server().await;
    let (port, ca_pem) = (server.port(), server.ca_pem());
    let proxy = ConnectProxy::start().await;
    let dir = edgehook_testkit::temp_dir("proxy-tls");
    let ca_file = dir.join("ca.pem");
    std::fs::write(&ca_file, ca_pem).expect("write ca");
    let trusting = NetOptions {
        allow_private: true,
        extra_ca: Some(ca_file),
        ..NetOptions::default()
    };
    let options = through(&proxy.url(), trusting);
    // One lookup answers, later ones never do: every delivery after the first must ride the
    // pooled tunnel (see `FirstLookupOnly`).
    let lookups = Arc::new(AtomicUsize::new(0));
    let sender = NetOutbound::with_resolver(&options, Arc::new(FirstLookupOnly(lookups.clone())))
        .expect("client");
    let deliveries = 10;
    for n in 0..deliveries {
        let url = format!("https://{TLS_NAME}:{port}/hooks/{n}");
        let resp = sender
            .send(request(&url), None)
            .await
            .unwrap_or_else(|e| panic!("delivery {n}: {e:?}"));
        assert_eq!(resp.status(), 200);
    }
    assert_eq!(server.connections(), 1, "one TLS connection");
    assert_eq!(proxy.accepted(), 1, "one connection to the proxy");
    let asked: Vec<String> = proxy.connects().into_iter().map(|c| c.authority).collect();
    assert_eq!(asked, [format!("127.0.0.1:{port}")], "one CONNECT");

    // The certificate is checked for the URL's name, not the tunnel's address: a name the
    // certificate does not carry fails, though it resolves to the same server.
    let other = NetOutbound::with_resolver(&options, Arc::new(loopback_dns("other.example.test")))
        .expect("client");
    let err = other
        .send(
            request(&format!("https://other.example.test:{port}/")),
            None,
        )
        .await
        .err();
    assert!(matches!(err, Some(HttpError::TlsProtocolError)), "{err:?}");
    // And the webpki roots alone do not trust the test CA through the tunnel either.
    let roots_only = through(
        &proxy.url(),
        NetOptions {
            allow_private: true,
            ..NetOptions::default()
        },
    );
    let sender =
        NetOutbound::with_resolver(&roots_only, Arc::new(loopback_dns(TLS_NAME))).expect("client");
    let err = sender
        .send(request(&format!("https://{TLS_NAME}:{port}/")), None)
        .await
        .err();
    assert!(matches!(err, Some(HttpError::TlsProtocolError)), "{err:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn targets_the_ssrf_rules_refuse_never_reach_the_proxy() {
    let proxy = ConnectProxy::start().await;
    let entries = corpus();
    let mut table: Vec<(String, Vec<IpAddr>)> = entries
        .iter()
        .filter(|e| !e.resolves_to.is_empty())
        .map(|e| (host_of(&e.url), e.resolves_to.clone()))
        .collect();
    table.push((
        "internal.example.test".to_owned(),
        vec![IpAddr::from([10, 0, 0, 5])],
    ));
    table.push((
        "mixed.example.test".to_owned(),
        vec![
            IpAddr::from([93, 184, 216, 34]),
            IpAddr::from([127, 0, 0, 1]),
        ],
    ));
    let dns = StaticResolver::new(table);
    // The proxy itself is on loopback: that is the operator's choice, and allowed.
    let strict =
        NetOutbound::with_resolver(&through(&proxy.url(), NetOptions::default()), Arc::new(dns))
            .expect("client");
    for (url, expected) in [
        (
            "https://internal.example.test/",
            HttpError::DestinationIpProhibited,
        ),
        (
            "https://mixed.example.test/",
            HttpError::DestinationIpProhibited,
        ),
        (
            "https://127.0.0.1:8443/",
            HttpError::DestinationIpProhibited,
        ),
        (
            "https://169.254.169.254/latest/meta-data",
            HttpError::DestinationIpProhibited,
        ),
        ("https://localhost/", HttpError::DestinationIpProhibited),
        ("http://example.com/", HttpError::HttpRequestDenied),
    ] {
        let err = strict.send(request(url), None).await.err();
        assert_eq!(
            err.as_ref().map(|e| format!("{e:?}")),
            Some(format!("{expected:?}")),
            "{url}"
        );
    }
    // Every URL of the SSRF corpus too (each is refused one way or another).
    let mut sent = 0;
    for e in &entries {
        let Ok(req) = http::Request::post(e.url.as_str()).body(request("https://x/").into_body())
        else {
            continue; // not even an HTTP request can carry it
        };
        let err = tokio::time::timeout(Duration::from_secs(5), strict.send(req, None))
            .await
            .unwrap_or_else(|_| panic!("{}: no answer in time", e.url))
            .err();
        assert!(err.is_some(), "{} ({}) was sent", e.url, e.trick);
        sent += 1;
    }
    assert!(
        sent > entries.len() / 2,
        "most corpus entries reached the sender"
    );
    assert_eq!(proxy.accepted(), 0, "no connection reached the proxy");
}

#[tokio::test]
async fn a_proxy_refusing_the_tunnel_fails_the_attempt_and_nothing_goes_around_it() {
    let receiver = server(200).await;
    let port = receiver.port();
    let target = format!("http://127.0.0.1:{port}/hook");
    let proxy = ConnectProxy::start().await;
    proxy.answer_with(403);
    let sender = NetOutbound::new(&through(&proxy.url(), NetOptions::open())).expect("client");
    let err = sender.send(request(&target), None).await.err();
    assert!(matches!(err, Some(HttpError::ConnectionRefused)), "{err:?}");
    let asked: Vec<String> = proxy.connects().into_iter().map(|c| c.authority).collect();
    assert_eq!(asked, [format!("127.0.0.1:{port}")]);
    // A proxy that is not there at all: refused too.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let dead = format!(
        "http://127.0.0.1:{}",
        closed.local_addr().expect("addr").port()
    );
    drop(closed);
    let sender = NetOutbound::new(&through(&dead, NetOptions::open())).expect("client");
    let err = sender.send(request(&target), None).await.err();
    assert!(matches!(err, Some(HttpError::ConnectionRefused)), "{err:?}");
    // The target was reachable directly all along, and never reached.
    assert_eq!(receiver.hits(), 0, "no delivery went around the proxy");
}
