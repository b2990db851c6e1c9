//! Secrets stay where they belong: a signing secret appears in its create response only, an
//! API key in its issue response only, the admin token nowhere. Every response of a busy
//! session (every partner and operator route, successes and errors) and every line the
//! component logs are scanned. Also here: every comparison of a secret is constant-time, and
//! every route that takes a body has a limit.

use crate::common;

use common::*;
use edgehook_runtime::HttpResponse;
use edgehook_runtime::store::Faults;
use edgehook_sim::simnet::Reply;
use serde_json::json;
use std::time::Duration;

/// What a session produced: every response (with the one secret it may carry, the one it
/// issued), then the component's log.
struct Transcript {
    responses: Vec<(String, Option<String>)>,
}

impl Transcript {
    fn keep(&mut self, label: &str, r: &HttpResponse, issued: Option<&str>) {
        let headers: Vec<String> = r.headers.iter().map(|(n, v)| format!("{n}: {v}")).collect();
        self.responses.push((
            format!(
                "{label} -> {}\n{}\n{}",
                r.status,
                headers.join("\n"),
                String::from_utf8_lossy(&r.body)
            ),
            issued.map(str::to_owned),
        ));
    }
}

fn secret_of(resp: &HttpResponse) -> String {
    resp.json()["data"]["signingSecret"]
        .as_str()
        .expect("signingSecret")
        .to_owned()
}

#[test]
fn no_response_or_log_line_carries_a_secret_a_key_or_the_admin_token_but_its_own() {
    let mut sim = sim(21);
    let mut t = Transcript {
        responses: Vec::new(),
    };
    let auth = bearer(ADMIN);
    let issue = |sim: &mut edgehook_sim::sim::Simulation, t: &mut Transcript, client| {
        let r = sim
            .request(
                "POST",
                &format!("/internal/v1/clients/{client}/keys"),
                &[("authorization", &auth)],
                b"",
            )
            .expect("runs");
        assert_eq!(r.status, 201);
        let key = r.json()["data"]["apiKey"].as_str().expect("key").to_owned();
        let id = r.json()["data"]["id"].as_str().expect("id").to_owned();
        t.keep("issue key", &r, Some(&key));
        (key, id)
    };
    let (key, _) = issue(&mut sim, &mut t, "acme");
    let (other_key, _) = issue(&mut sim, &mut t, "globex");
    let (revoked_key, revoked_id) = issue(&mut sim, &mut t, "acme");
    let url = "https://hooks.example.com/x";
    let gone = "https://gone.example.com/x";
    sim.net()
        .endpoint(url, [Reply::Status(500), Reply::Status(200)]);
    sim.net().endpoint(gone, [Reply::Status(410)]);

    let body = json!({"url": url, "eventTypes": ["load.created", "load.updated"]});
    let idem = [("idempotency-key", "create-1")];
    let r = create_with(&mut sim, &key, &body, &idem);
    assert_eq!(r.status, 201);
    let secret = secret_of(&r);
    let sub = r.json()["data"]["id"].as_str().expect("id").to_owned();
    t.keep("create", &r, Some(&secret));
    let r = create_with(&mut sim, &key, &body, &idem);
    assert_eq!(r.header("idempotent-replayed"), Some("true"));
    t.keep("create replayed", &r, Some(&secret));
    let r = create_with(
        &mut sim,
        &key,
        &json!({"url": url, "eventTypes": ["load.updated"]}),
        &idem,
    );
    t.keep("create conflict", &r, None);
    let r = create_url(&mut sim, &other_key, gone);
    let other_secret = secret_of(&r);
    let other_sub = r.json()["data"]["id"].as_str().expect("id").to_owned();
    t.keep("create (other client)", &r, Some(&other_secret));
    // Validation errors echo fields, never a secret or a key, even one sent back in.
    let r = create_with(
        &mut sim,
        &key,
        &json!({"url": "http://x", "eventTypes": [], "signingSecret": secret, "apiKey": key}),
        &[],
    );
    t.keep("create invalid", &r, None);

    let r = ingest(&mut sim, "load.created", br#"{"id":"L-1"}"#, &[]);
    t.keep("ingest", &r, None);
    let r = ingest(
        &mut sim,
        "load.created",
        br#"{"id":"L-2"}"#,
        &[("idempotency-key", "e")],
    );
    t.keep("ingest idempotent", &r, None);
    let r = ingest(
        &mut sim,
        "load.created",
        br#"{"id":"L-2"}"#,
        &[("idempotency-key", "e")],
    );
    t.keep("ingest replayed", &r, None);
    let r = ingest(&mut sim, "load.nope", br#"{"id":"L-3"}"#, &[]);
    t.keep("ingest unknown type", &r, None);
    sim.advance(Duration::from_secs(120)).expect("advance");
    let dlv = sim.net().received_by(url)[0]
        .header("x-service-delivery-id")
        .expect("id")
        .to_owned();

    let big = vec![b'x'; 300 * 1024];
    for (method, path, who, body) in [
        ("GET", "/healthz".to_owned(), "", &b""[..]),
        ("GET", "/v1/webhooks".to_owned(), key.as_str(), b""),
        ("GET", "/v1/webhooks?limit=1".to_owned(), &key, b""),
        ("GET", "/v1/webhooks?cursor=bad".to_owned(), &key, b""),
        ("GET", format!("/v1/webhooks/{sub}"), &key, b""),
        ("GET", format!("/v1/webhooks/{sub}"), &other_key, b""),
        ("GET", "/nope".to_owned(), &key, b""),
        ("PUT", "/v1/webhooks".to_owned(), &key, b""),
        ("POST", "/v1/webhooks".to_owned(), &key, &big),
        ("POST", "/v1/webhooks".to_owned(), &key, b"{not json"),
        ("GET", "/v1/webhooks".to_owned(), "ehk_wrong", b""),
        ("GET", "/v1/webhooks".to_owned(), ADMIN, b""),
        ("GET", "/internal/v1/settings".to_owned(), &key, b""),
        ("GET", "/internal/v1/settings".to_owned(), "wrong", b""),
        ("GET", "/internal/v1/settings".to_owned(), ADMIN, b""),
        (
            "GET",
            format!("/internal/v1/subscriptions/{sub}"),
            ADMIN,
            b"",
        ),
        (
            "GET",
            format!("/internal/v1/subscriptions/{other_sub}"),
            ADMIN,
            b"",
        ),
        (
            "GET",
            format!("/internal/v1/subscriptions/{sub}/deliveries"),
            ADMIN,
            b"",
        ),
        (
            "GET",
            format!("/internal/v1/subscriptions/{other_sub}/deliveries"),
            ADMIN,
            b"",
        ),
        ("GET", format!("/internal/v1/deliveries/{dlv}"), ADMIN, b""),
        (
            "POST",
            format!("/internal/v1/deliveries/{dlv}/replay"),
            ADMIN,
            b"",
        ),
        ("POST", "/internal/v1/tick".to_owned(), ADMIN, b""),
        ("POST", "/internal/v1/events".to_owned(), ADMIN, &big),
        (
            "DELETE",
            format!("/internal/v1/clients/acme/keys/{revoked_id}"),
            ADMIN,
            b"",
        ),
        ("GET", "/v1/webhooks".to_owned(), &revoked_key, b""),
        (
            "POST",
            "/internal/v1/clients/bad%20id/keys".to_owned(),
            ADMIN,
            b"",
        ),
        (
            "POST",
            format!("/internal/v1/subscriptions/{other_sub}/disable"),
            ADMIN,
            b"",
        ),
        ("DELETE", format!("/v1/webhooks/{sub}"), &key, b""),
        ("DELETE", format!("/v1/webhooks/{sub}"), &key, b""),
        (
            "POST",
            format!("/internal/v1/deliveries/{dlv}/replay"),
            ADMIN,
            b"",
        ),
        (
            "GET",
            format!("/internal/v1/subscriptions/{sub}"),
            ADMIN,
            b"",
        ),
    ] {
        let auth = bearer(who);
        let mut headers = vec![("content-type", "application/json")];
        if !who.is_empty() {
            headers.push(("authorization", &auth));
        }
        let r = sim
            .request(method, &path, &headers, body)
            .expect("request runs");
        t.keep(&format!("{method} {path}"), &r, None);
    }

    // Store failures are logged by the component: the log must not carry secrets either.
    sim.store().set_faults(Faults {
        fail_prefixes: vec![
            keys::SUBSCRIPTION_PREFIX.into(),
            keys::DELIVERY_PREFIX.into(),
        ],
        ..Faults::default()
    });
    let r = create_with(&mut sim, &key, &body, &[]);
    assert_eq!(r.status, 503);
    t.keep("create (store down)", &r, None);
    let r = call(
        &mut sim,
        "GET",
        &format!("/internal/v1/deliveries/{dlv}"),
        ADMIN,
    );
    t.keep("delivery (store down)", &r, None);
    sim.store().set_faults(Faults::default());

    let secrets = [
        ("signing secret", secret.as_str()),
        ("signing secret", other_secret.as_str()),
        ("API key", key.as_str()),
        ("API key", other_key.as_str()),
        ("API key", revoked_key.as_str()),
        ("admin token", ADMIN),
    ];
    assert!(t.responses.len() >= 45, "{} responses", t.responses.len());
    for (text, issued) in &t.responses {
        for (what, s) in secrets {
            if issued.as_deref() != Some(s) {
                assert!(!text.contains(s), "a {what} leaked into:\n{text}");
            }
        }
    }
    let log = sim.guest_log();
    assert!(
        log.contains("store_unavailable") || log.contains("injected fault"),
        "the component logged the store failures:\n{log}"
    );
    for (what, s) in secrets {
        assert!(!log.contains(s), "a {what} leaked into the log:\n{log}");
    }
    // The deliveries carry a signature, never the secret.
    for r in sim.net().received() {
        let all: Vec<u8> = r
            .headers
            .iter()
            .flat_map(|(n, v)| [n.as_bytes(), v.as_slice()].concat())
            .chain(r.body.clone())
            .collect();
        for (what, s) in secrets {
            assert!(
                !String::from_utf8_lossy(&all).contains(s),
                "a {what} was sent"
            );
        }
    }
}

#[test]
fn every_secret_comparison_is_constant_time() {
    // The code-level guarantee: one function compares secrets (SHA-256 both sides, then
    // `subtle`), the two places that check a credential call it, and nothing else in the
    // component or the host compares a token, key, hash or signature with `==` / `!=`.
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let read = |path: &str| {
        std::fs::read_to_string(format!("{root}/{path}")).unwrap_or_else(|e| panic!("{path}: {e}"))
    };
    let auth = read("component/api/src/auth.rs");
    let secret_eq = auth
        .split("pub fn secret_eq")
        .nth(1)
        .and_then(|rest| rest.split("\n}\n").next())
        .expect("auth::secret_eq exists");
    assert!(secret_eq.contains("Sha256::digest") && secret_eq.contains("ct_eq"));
    let operator = read("component/api/src/operator.rs");
    let authorize = operator
        .split("pub fn authorize")
        .nth(1)
        .and_then(|rest| rest.split("\n}\n").next())
        .expect("operator::authorize");
    assert!(authorize.contains("auth::secret_eq(given, expected)"));
    let authenticate = auth
        .split("pub fn authenticate")
        .nth(1)
        .and_then(|rest| rest.split("\n}\n").next())
        .expect("auth::authenticate");
    assert!(authenticate.contains("find(env, token)"));
    let find = auth
        .split("pub fn find")
        .nth(1)
        .and_then(|rest| rest.split("\n}\n").next())
        .expect("auth::find");
    assert!(find.contains("secret_eq(&hash, &record.hash)"));
    let csrf = auth
        .split("fn check_csrf")
        .nth(1)
        .and_then(|rest| rest.split("\n}\n").next())
        .expect("auth::check_csrf");
    assert!(csrf.contains("secret_eq(given, &csrf_token(token))"));
    let listen = read("host/edgehook/src/listen.rs");
    assert!(
        listen.contains("verify_slice"),
        "the receiver verifies with verify_slice"
    );
    assert!(read("docs/verify/verify.rs").contains("verify_slice"));
    assert!(read("docs/verify/verify.py").contains("hmac.compare_digest"));
    assert!(read("docs/verify/verify.mjs").contains("timingSafeEqual"));
    let words = ["token", "secret", "hash", "signature", "api_key", "apikey"];
    let dirs = [
        "component",
        "host/runtime/src",
        "host/sim/src",
        "host/edgehook/src",
        "host/testkit/src",
        "tools/bench/src",
        "tools/soak/src",
    ];
    for dir in dirs {
        // Every file, in every subdirectory; unit tests compare known values on purpose, and
        // so does the soak's load generator, which checks the answers it got and
        // authenticates no one.
        for (name, lines) in sources(dir) {
            if name.starts_with("tools/soak/src/") {
                continue;
            }
            for (n, line) in lines.iter().enumerate() {
                let line = line.to_ascii_lowercase();
                let compares = line.contains("==") || line.contains("!=") || line.contains(".eq(");
                if compares && words.iter().any(|w| line.contains(w)) {
                    panic!(
                        "{name}:{}: a secret compared outside auth::secret_eq: {line}",
                        n + 1
                    );
                }
            }
        }
    }
}

#[test]
fn every_route_that_takes_a_body_answers_413_past_its_limit() {
    const API: usize = 64 * 1024;
    const INGEST: usize = 256 * 1024;
    let (mut sim, key, sub) = acme_subscribed(22);
    let routes: Vec<(&str, String, &str, usize)> = vec![
        ("POST", "/v1/webhooks".into(), key.as_str(), API),
        ("GET", "/v1/webhooks".into(), &key, API),
        ("GET", format!("/v1/webhooks/{sub}"), &key, API),
        ("DELETE", format!("/v1/webhooks/{sub}"), &key, API),
        ("GET", "/healthz".into(), "", API),
        ("GET", "/internal/v1/settings".into(), ADMIN, API),
        ("POST", "/internal/v1/clients/acme/keys".into(), ADMIN, API),
        (
            "DELETE",
            "/internal/v1/clients/acme/keys/key_x".into(),
            ADMIN,
            API,
        ),
        ("POST", "/internal/v1/events".into(), ADMIN, INGEST),
        ("POST", "/internal/v1/tick".into(), ADMIN, API),
        (
            "GET",
            format!("/internal/v1/subscriptions/{sub}"),
            ADMIN,
            API,
        ),
        (
            "POST",
            format!("/internal/v1/subscriptions/{sub}/disable"),
            ADMIN,
            API,
        ),
        (
            "GET",
            format!("/internal/v1/subscriptions/{sub}/deliveries"),
            ADMIN,
            API,
        ),
        ("GET", "/internal/v1/deliveries/dlv_x".into(), ADMIN, API),
        (
            "POST",
            "/internal/v1/deliveries/dlv_x/replay".into(),
            ADMIN,
            API,
        ),
    ];
    for (method, path, who, limit) in &routes {
        let auth = bearer(who);
        let headers = [
            ("authorization", auth.as_str()),
            ("content-type", "application/json"),
            ("x-service-event", "load.created"),
        ];
        // Over the limit: 413 whatever the route, before any other check.
        let over = vec![b' '; limit + 1];
        let r = sim
            .request(method, path, &headers, &over)
            .expect("request runs");
        assert_error(&r, 413, "payload_too_large");
        // At the limit: not a 413 (whatever else the route thinks of the body).
        let at = vec![b' '; *limit];
        let r = sim
            .request(method, path, &headers, &at)
            .expect("request runs");
        assert_ne!(r.status, 413, "{method} {path} at its limit: {}", r.json());
    }
    // Far past the limit, the component reads no further than the ingest limit + 1.
    let huge = vec![b' '; 4 * 1024 * 1024];
    let r = ingest(&mut sim, "load.created", &huge, &[]);
    assert_error(&r, 413, "payload_too_large");
    // Ingest takes more than the API: a 100 KiB load is accepted.
    let load = format!(r#"{{"id":"L-1","pad":"{}"}}"#, "a".repeat(100 * 1024));
    assert_eq!(
        ingest(&mut sim, "load.created", load.as_bytes(), &[]).status,
        202
    );
}
