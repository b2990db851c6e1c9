//! The SSRF corpus (`tests/ssrf-corpus.json`) through the real component: every URL form is
//! refused at create, except the ordinary names whose DNS answer is private (nothing in the
//! URL tells); and every one is refused at send by the production sender (`NetOutbound`),
//! even when the component is configured to let it through. Names resolve through a static
//! table (the sender's resolver seam): no test queries DNS.

use crate::common;

use common::*;
use edgehook_runtime::net::{NetOptions, NetOutbound, StaticResolver};
use edgehook_sim::simnet::Reply;
use edgehook_testkit::ssrf::{corpus, expected_lookups, host_of};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

fn url_detail(resp: &edgehook_runtime::HttpResponse) -> (String, String) {
    let details = resp.json()["error"]["details"].clone();
    (
        details[0]["field"].as_str().unwrap_or("").to_owned(),
        details[0]["code"].as_str().unwrap_or("").to_owned(),
    )
}

#[test]
fn the_corpus_covers_every_trick_the_issue_names() {
    let entries = corpus();
    assert!(entries.len() >= 40, "{} entries", entries.len());
    let tricks: Vec<String> = entries.iter().map(|e| e.trick.to_lowercase()).collect();
    for needle in [
        "decimal",
        "octal",
        "hex",
        "ipv4-mapped",
        "ipv4-compatible",
        "unspecified",
        "metadata",
        "ipv6 loopback",
        "localhost",
        "trailing dot",
        "userinfo",
        "full-width",
        "ideographic",
        "dns answer",
        "rebinding",
    ] {
        assert!(
            tricks.iter().any(|t| t.contains(needle)),
            "no entry for {needle}"
        );
    }
    for e in &entries {
        assert!(
            ["private_target", "invalid_url", "accepted"].contains(&e.create.as_str()),
            "{}: create = {}",
            e.url,
            e.create
        );
        // A name only the sender can refuse must come with the private answer it gets.
        if e.create == "accepted" {
            assert!(
                e.resolves_to
                    .iter()
                    .any(|ip| !edgehook_runtime::net::is_global(*ip)),
                "{} needs a non-public resolvesTo",
                e.url
            );
        }
    }
}

#[test]
fn every_corpus_url_is_refused_at_create_unless_only_its_dns_answer_is_private() {
    let mut sim = sim(31);
    let key = issue_key(&mut sim, "acme");
    for e in corpus() {
        let resp = create_with(
            &mut sim,
            &key,
            &json!({"url": e.url, "eventTypes": ["load.created"]}),
            &[],
        );
        if e.create == "accepted" {
            assert_eq!(resp.status, 201, "{} ({}): {}", e.url, e.trick, resp.json());
            continue;
        }
        assert_error(&resp, 422, "validation_failed");
        assert_eq!(
            url_detail(&resp),
            ("url".to_owned(), e.create.clone()),
            "{} ({}): {}",
            e.url,
            e.trick,
            resp.json()
        );
    }
    // The spot check: ordinary public URLs, IP literals and A-label IDNs pass.
    for url in [
        "https://hooks.example.com/in/loads?x=1",
        "https://Hooks.Example.com.:8443/x",
        "https://93.184.216.34/x",
        "https://[2606:4700::1111]/x",
        "https://xn--bcher-kva.example/x",
        "https://hooks.example.com/proxy/10.0.0.1/x",
    ] {
        let resp = create_url(&mut sim, &key, url);
        assert_eq!(resp.status, 201, "{url}: {}", resp.json());
    }
}

#[test]
fn non_ascii_hosts_get_a_422_that_says_to_use_punycode() {
    let mut sim = sim(32);
    let key = issue_key(&mut sim, "acme");
    for url in [
        "https://b\u{fc}cher.example/",
        "https://\u{ff11}\u{ff12}\u{ff17}.\u{ff10}.\u{ff10}.\u{ff11}/",
        "https://hooks.example.com/caf\u{e9}",
    ] {
        let resp = create_url(&mut sim, &key, url);
        assert_error(&resp, 422, "validation_failed");
        let message = resp.json()["error"]["details"][0]["message"]
            .as_str()
            .unwrap_or("")
            .to_owned();
        assert!(message.contains("xn--"), "{url}: {message}");
    }
}

#[test]
fn the_production_sender_refuses_every_corpus_url_the_component_lets_through() {
    let entries = corpus();
    let dns = StaticResolver::new(
        entries
            .iter()
            .filter(|e| !e.resolves_to.is_empty())
            .map(|e| (host_of(&e.url), e.resolves_to.clone())),
    );
    let sender =
        NetOutbound::with_resolver(&NetOptions::default(), Arc::new(dns.clone())).expect("sender");
    // The component allows private targets (a misconfiguration, or a subscription made
    // while it was allowed); the sender does not.
    let mut sim = builder(33)
        .config("allow_private_targets", "true")
        .outbound(Arc::new(sender))
        .build()
        .expect("simulation");
    let key = issue_key(&mut sim, "acme");
    let mut created = Vec::new();
    for e in &entries {
        let resp = create_with(
            &mut sim,
            &key,
            &json!({"url": e.url, "eventTypes": ["load.created"]}),
            &[],
        );
        if resp.status == 201 {
            created.push((
                e,
                resp.json()["data"]["id"].as_str().expect("id").to_owned(),
            ));
        } else {
            // Malformed URLs stay refused whatever the setting.
            assert_eq!(e.create, "invalid_url", "{}: {}", e.url, resp.json());
        }
    }
    assert!(
        created.len() >= 60,
        "{} corpus URLs got through the component",
        created.len()
    );
    let resp = ingest(&mut sim, "load.created", br#"{"id":"L-1"}"#, &[]);
    assert_eq!(resp.status, 202, "{}", resp.json());
    assert_eq!(resp.json()["data"]["deliveries"], created.len());
    sim.advance(Duration::ZERO).expect("due attempts run");
    for (e, sub) in &created {
        let resp = call(
            &mut sim,
            "GET",
            &format!("/internal/v1/subscriptions/{sub}/deliveries"),
            ADMIN,
        );
        let attempts = resp.json()["data"][0]["attempts"].clone();
        assert_eq!(
            attempts.as_array().map(Vec::len),
            Some(1),
            "{}: {}",
            e.url,
            resp.json()
        );
        assert_eq!(
            attempts[0]["error"], "destination not allowed",
            "{} ({}): {attempts}",
            e.url, e.trick
        );
        assert!(attempts[0]["statusCode"].is_null());
    }
    // Only names with nothing to give them away were looked up (in the test's table).
    let mut asked = dns.asked();
    asked.sort();
    asked.dedup();
    assert_eq!(asked, expected_lookups(&entries));
}

#[test]
fn a_private_target_allowed_at_create_is_refused_at_send_once_the_setting_is_off() {
    let mut dev = sim_with(34, &[("allow_private_targets", "true")]);
    let key = issue_key(&mut dev, "acme");
    let url = "https://10.0.0.1/hook";
    dev.net().endpoint(url, [Reply::Status(200)]);
    let sub = create_id(&mut dev, &key, url, &["load.created"]);
    // The same store, now run with the default (private targets refused).
    let mut prod = builder(35).sharing(&dev).build().expect("simulation");
    let resp = ingest(&mut prod, "load.created", br#"{"id":"L-1"}"#, &[]);
    assert_eq!(resp.status, 202);
    prod.advance(Duration::ZERO).expect("due attempts run");
    assert!(
        prod.net().received().is_empty(),
        "nothing was sent to the private address"
    );
    let history = call(
        &mut prod,
        "GET",
        &format!("/internal/v1/subscriptions/{sub}/deliveries"),
        ADMIN,
    )
    .json();
    assert_eq!(
        history["data"][0]["attempts"][0]["error"], "destination not allowed",
        "{history}"
    );
}

/// `allow_http` and `allow_private_targets` are two switches: at create each allows what it
/// says and refuses the rest as before; a target made under a switch is refused at send
/// (nothing sent) once that switch is off, even with the other on.
#[test]
fn each_switch_allows_its_own_targets_only_at_create_and_at_send() {
    let url_code = |sim: &mut edgehook_sim::sim::Simulation, key: &str, url: &str| {
        let resp = create_url(sim, key, url);
        match resp.status {
            201 => "ok".to_owned(),
            _ => resp.json()["error"]["details"][0]["code"]
                .as_str()
                .unwrap_or("?")
                .to_owned(),
        }
    };
    let mut http_only = sim_with(36, &[("allow_http", "true")]);
    let key = issue_key(&mut http_only, "acme");
    assert_eq!(
        url_code(&mut http_only, &key, "http://hooks.example.com/in"),
        "ok"
    );
    assert_eq!(
        url_code(&mut http_only, &key, "http://127.0.0.1/in"),
        "private_target"
    );
    assert_eq!(
        url_code(&mut http_only, &key, "https://localhost/in"),
        "private_target"
    );
    let mut private_only = sim_with(37, &[("allow_private_targets", "true")]);
    let key = issue_key(&mut private_only, "acme");
    assert_eq!(
        url_code(&mut private_only, &key, "https://127.0.0.1/in"),
        "ok"
    );
    assert_eq!(
        url_code(&mut private_only, &key, "http://127.0.0.1/in"),
        "https_required"
    );
    assert_eq!(
        url_code(&mut private_only, &key, "http://hooks.example.com/in"),
        "https_required"
    );

    // Made with both on; then run with private targets still allowed, but not http.
    let mut dev = sim_with(
        38,
        &[("allow_http", "true"), ("allow_private_targets", "true")],
    );
    let key = issue_key(&mut dev, "acme");
    for url in ["http://hooks.example.com/in", "https://10.0.0.1/in"] {
        dev.net().endpoint(url, [Reply::Status(200)]);
        create(&mut dev, &key, url, &["load.created"]);
    }
    let mut later = builder(39)
        .config("allow_private_targets", "true")
        .sharing(&dev)
        .build()
        .expect("sim");
    let resp = ingest(&mut later, "load.created", br#"{"id":"L-1"}"#, &[]);
    assert_eq!(resp.status, 202);
    later.advance(Duration::ZERO).expect("due attempts run");
    let received: Vec<String> = later
        .net()
        .received()
        .iter()
        .map(|r| r.url.clone())
        .collect();
    assert_eq!(
        received,
        ["https://10.0.0.1/in"],
        "only the https target was sent to"
    );
}
