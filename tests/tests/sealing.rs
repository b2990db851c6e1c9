//! Signing secrets sealed at rest (`seal_key`): with a key set, no stored value holds a
//! secret in any form, deliveries still verify with the partner's secret (checked with an
//! implementation other than the component's: `edgehook_testkit::signature`, the `hmac`
//! crate), a sealed secret copied into another subscription's record does not open, a key
//! rotation (`seal_previous_key`) keeps every delivery verifying while records are sealed
//! again, and a wrong key fails loudly: nothing sent, the attempt's class
//! `secret_unreadable`, a log line naming the subscription.

use crate::common::*;
use edgehook_component::model::ids::SubscriptionId;
use edgehook_component::subscriptions::Subscription;
use edgehook_runtime::store::KvBackend;
use edgehook_sim::sim::Simulation;
use edgehook_sim::simnet::Received;
use serde_json::{Value, json};
use std::time::Duration;

const K1: &str = "1111111111111111111111111111111111111111111111111111111111111111";
const K2: &str = "2222222222222222222222222222222222222222222222222222222222222222";

/// A simulation whose settings are `settings`, sharing `other`'s store if given.
fn sealed_sim(seed: u64, settings: &[(&str, &str)], other: Option<&Simulation>) -> Simulation {
    let builder = settings
        .iter()
        .fold(builder(seed), |b, (k, v)| b.config(k, v));
    match other {
        Some(o) => builder.sharing(o),
        None => builder,
    }
    .build()
    .expect("simulation")
}

fn header(r: &Received, name: &str) -> Option<String> {
    r.header(name).map(str::to_owned)
}

/// Whether `r` verifies with `secret`: SPEC's `X-Service-Signature`, or Standard Webhooks'
/// `webhook-signature` (any of its `v1,` entries).
fn verifies(secret: &str, r: &Received) -> bool {
    if let Some(sig) = header(r, "x-service-signature") {
        let ts = header(r, "x-service-timestamp");
        let all = header(r, "x-service-signatures").unwrap_or_default();
        return edgehook_testkit::signature::verifies(secret, ts.as_deref(), Some(&sig), &r.body)
            || all.split(',').any(|s| {
                edgehook_testkit::signature::verifies(secret, ts.as_deref(), Some(s), &r.body)
            });
    }
    edgehook_testkit::signature::verifies_standard(
        secret,
        r.header("webhook-id"),
        r.header("webhook-timestamp"),
        r.header("webhook-signature"),
        &r.body,
    )
}

/// The store keys whose key or value holds any form of any of `secrets`.
fn holding(sim: &Simulation, secrets: &[String]) -> Vec<String> {
    let needles = edgehook_testkit::secrets::needles(secrets);
    sim.store()
        .snapshot()
        .into_iter()
        .filter(|(k, v)| {
            needles.iter().any(|n| {
                v.windows(n.len()).any(|w| w == n.as_slice())
                    || k.as_bytes().windows(n.len()).any(|w| w == n.as_slice())
            })
        })
        .map(|(k, _)| k)
        .collect()
}

/// Creates a subscription to `url` with `extra` fields; its id and secret.
fn subscribe(sim: &mut Simulation, key: &str, url: &str, extra: Value) -> (String, String) {
    sim.net().endpoint(url, []);
    let mut body = json!({"url": url, "eventTypes": ["load.created"]});
    if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
        b.extend(e.clone());
    }
    let created = create_with(sim, key, &body, &[("idempotency-key", url)]);
    assert_eq!(created.status, 201, "{}", created.json());
    let data = &created.json()["data"];
    (
        data["id"].as_str().expect("id").to_owned(),
        data["signingSecret"].as_str().expect("secret").to_owned(),
    )
}

/// Publishes one `load.created`; what each of `urls` received for it (`None`: nothing).
fn deliver(sim: &mut Simulation, urls: &[&str]) -> Vec<Option<Received>> {
    let before: Vec<usize> = urls
        .iter()
        .map(|u| sim.net().received_by(u).len())
        .collect();
    let load = format!(r#"{{"id":"L{}"}}"#, sim.now_ms());
    assert_eq!(
        ingest(sim, "load.created", load.as_bytes(), &[]).status,
        202
    );
    sim.advance(Duration::from_secs(1)).expect("advance");
    urls.iter()
        .zip(before)
        .map(|(u, n)| sim.net().received_by(u).get(n).cloned())
        .collect()
}

/// The `errorClass` of every attempt of every delivery of subscription `id`.
fn error_classes(sim: &mut Simulation, id: &str) -> Vec<Value> {
    let r = call(
        sim,
        "GET",
        &format!("/internal/v1/subscriptions/{id}/deliveries"),
        ADMIN,
    );
    assert_eq!(r.status, 200, "{}", r.json());
    let ids: Vec<String> = r.json()["data"]
        .as_array()
        .expect("deliveries")
        .iter()
        .map(|d| d["id"].as_str().expect("id").to_owned())
        .collect();
    assert!(!ids.is_empty(), "a delivery");
    let mut classes = Vec::new();
    for dlv in ids {
        let r = call(sim, "GET", &format!("/internal/v1/deliveries/{dlv}"), ADMIN);
        for a in r.json()["data"]["attempts"]
            .as_array()
            .into_iter()
            .flatten()
        {
            classes.push(a["errorClass"].clone());
        }
    }
    classes
}

/// Whether an attempt of subscription `id` failed as `secret_unreadable`.
fn failed_unreadable(sim: &mut Simulation, id: &str) -> bool {
    error_classes(sim, id).contains(&json!("secret_unreadable"))
}

fn record(sim: &Simulation, id: &str) -> Subscription {
    let bytes = sim.store().snapshot()
        [keys::subscription(&SubscriptionId::trusted(id.to_string())).as_str()]
    .clone();
    Subscription::decode(&bytes).expect("a record")
}

const A: &str = "https://a.example.com/hook";
const B: &str = "https://b.example.com/hook";
const C: &str = "https://c.example.com/hook";

#[test]
fn with_the_key_set_no_stored_value_holds_a_secret_and_deliveries_verify() {
    let mut sim = sealed_sim(901, &[("seal_key", K1)], None);
    let key = issue_key(&mut sim, "acme");
    let (a, a_secret) = subscribe(&mut sim, &key, A, json!({}));
    let (_, b_secret) = subscribe(&mut sim, &key, B, json!({"signatureScheme": "standard"}));
    let (c, c_old) = subscribe(&mut sim, &key, C, json!({}));
    // A rotation with an overlap: the previous secret is stored (sealed) too.
    let rotated = call(
        &mut sim,
        "POST",
        &format!("/v1/webhooks/{c}/rotate-secret"),
        &key,
    );
    assert_eq!(rotated.status, 200, "{}", rotated.json());
    let c_new = rotated.json()["data"]["signingSecret"]
        .as_str()
        .expect("secret")
        .to_owned();
    // An idempotent create's replay answers the secret, opened from the sealed record.
    let again = create_with(
        &mut sim,
        &key,
        &json!({"url": A, "eventTypes": ["load.created"]}),
        &[("idempotency-key", A)],
    );
    assert_eq!(again.json()["data"]["signingSecret"], a_secret.as_str());

    let got = deliver(&mut sim, &[A, B, C]);
    let [Some(ra), Some(rb), Some(rc)] = &got[..] else {
        panic!("each endpoint got one: {got:?}")
    };
    assert!(verifies(&a_secret, ra), "{:?}", ra.headers);
    assert!(verifies(&b_secret, rb), "{:?}", rb.headers);
    assert!(
        verifies(&c_new, rc) && verifies(&c_old, rc),
        "{:?}",
        rc.headers
    );
    assert!(!verifies(&b_secret, ra), "the check can fail");

    let secrets = [a_secret, b_secret, c_old, c_new];
    assert_eq!(holding(&sim, &secrets), Vec::<String>::new());
    assert!(!sim.store().snapshot().is_empty());
    let log = sim.guest_log();
    for s in &secrets {
        assert!(!log.contains(s.as_str()), "the log holds a secret");
    }
    // The search finds a secret where one is stored: the same session without a key.
    let mut plain = sim_with(901, &[]);
    let key = issue_key(&mut plain, "acme");
    let (p, p_secret) = subscribe(&mut plain, &key, A, json!({}));
    assert_eq!(
        holding(&plain, &[p_secret]),
        [keys::subscription(&SubscriptionId::trusted(p.to_string())).to_string()]
    );
    assert!(record(&sim, &a).signing_secret.plain().is_none(), "sealed");
}

#[test]
fn a_sealed_secret_copied_into_another_record_does_not_open() {
    let mut sim = sealed_sim(902, &[("seal_key", K1)], None);
    let key = issue_key(&mut sim, "acme");
    let (a, a_secret) = subscribe(&mut sim, &key, A, json!({}));
    let (b, _) = subscribe(&mut sim, &key, B, json!({}));
    // B's record with A's sealed secret, as someone with write access to the store would
    // copy it.
    let mut forged = record(&sim, &b);
    forged.signing_secret = record(&sim, &a).signing_secret;
    sim.store()
        .set(
            keys::subscription(&SubscriptionId::trusted(b.to_string())).as_str(),
            &forged.encode(),
        )
        .expect("set");
    let got = deliver(&mut sim, &[A, B]);
    assert!(got[0].as_ref().is_some_and(|r| verifies(&a_secret, r)));
    assert!(got[1].is_none(), "nothing sent to B: {:?}", got[1]);
    assert!(failed_unreadable(&mut sim, &b));
    let log = sim.guest_log();
    assert!(
        log.lines()
            .any(|l| l.contains("\"secret.unreadable\"") && l.contains(&b)),
        "{log}"
    );
    // A test delivery says so too, and sends nothing.
    let ping = call(&mut sim, "POST", &format!("/v1/webhooks/{b}/test"), &key);
    assert_eq!(ping.json()["data"]["errorClass"], "secret_unreadable");
    assert_eq!(sim.net().received_by(B).len(), 0);
}

#[test]
fn a_wrong_key_or_none_fails_loudly_and_sends_nothing() {
    let mut sim = sealed_sim(903, &[("seal_key", K1)], None);
    let key = issue_key(&mut sim, "acme");
    let (a, _) = subscribe(&mut sim, &key, A, json!({}));
    for settings in [&[("seal_key", K2)][..], &[]] {
        let mut other = sealed_sim(904, settings, Some(&sim));
        let got = deliver(&mut other, &[A]);
        assert!(got[0].is_none(), "{settings:?}: nothing sent");
        assert!(failed_unreadable(&mut other, &a), "{settings:?}");
        assert!(
            other.guest_log().contains("secret.unreadable"),
            "{settings:?}"
        );
        // The create's replay cannot show the secret either: an error, not a guess.
        let again = create_with(
            &mut other,
            &key,
            &json!({"url": A, "eventTypes": ["load.created"]}),
            &[("idempotency-key", A)],
        );
        assert_eq!(again.status, 500, "{settings:?}");
    }
    // A key that does not parse stops every request, naming the key, never the value.
    let mut bad = sealed_sim(905, &[("seal_key", &K1[1..])], Some(&sim));
    let r = call(&mut bad, "GET", "/v1/webhooks", &key);
    assert_eq!(r.status, 500);
    assert!(!bad.guest_log().contains(&K1[1..20]));
}

#[test]
fn a_key_rotation_keeps_deliveries_verifying_and_writes_seal_again() {
    let mut sim = sealed_sim(906, &[("seal_key", K1)], None);
    let key = issue_key(&mut sim, "acme");
    let (a, a_secret) = subscribe(&mut sim, &key, A, json!({}));
    let (b, b_secret) = subscribe(&mut sim, &key, B, json!({"signatureScheme": "standard"}));
    let (c, c_secret) = subscribe(&mut sim, &key, C, json!({}));
    let k2 = edgehook_component::model::seal::SealKey::parse(K2).expect("key");
    // The new key, the old one as the previous: every delivery verifies.
    let pair = [("seal_key", K2), ("seal_previous_key", K1)];
    let mut rotated = sealed_sim(907, &pair, Some(&sim));
    let got = deliver(&mut rotated, &[A, B, C]);
    assert!(got[0].as_ref().is_some_and(|r| verifies(&a_secret, r)));
    assert!(got[1].as_ref().is_some_and(|r| verifies(&b_secret, r)));
    assert!(got[2].as_ref().is_some_and(|r| verifies(&c_secret, r)));
    // A write of a record seals it under the new key (its secret and, during a rotation's
    // overlap, the previous one); a new secret is sealed under it as it is made.
    let headers = json!({"headers": {"X-Team": "ops"}});
    let patched = send_json(
        &mut rotated,
        "PATCH",
        &format!("/v1/webhooks/{a}"),
        &key,
        &headers,
    );
    assert_eq!(patched.status, 200, "{}", patched.json());
    let r = call(
        &mut rotated,
        "POST",
        &format!("/v1/webhooks/{b}/rotate-secret"),
        &key,
    );
    let b_new = r.json()["data"]["signingSecret"]
        .as_str()
        .expect("secret")
        .to_owned();
    for id in [&a, &b] {
        let sub = record(&rotated, id);
        let secrets = [
            Some(&sub.signing_secret),
            sub.options.previous_secret.as_ref().map(|p| &p.0),
        ];
        for secret in secrets.into_iter().flatten() {
            let edgehook_component::subscriptions::Secret::Sealed { key: under, .. } = secret
            else {
                panic!("sealed")
            };
            assert_eq!(*under, k2.id(), "{id} sealed under the new key");
        }
    }
    // With the new key alone, the records written since verify; C, not yet written,
    // fails loudly.
    let mut dropped = sealed_sim(908, &[("seal_key", K2)], Some(&sim));
    let got = deliver(&mut dropped, &[A, B, C]);
    assert!(got[0].as_ref().is_some_and(|r| verifies(&a_secret, r)));
    let rb = got[1].as_ref().expect("B");
    assert!(
        verifies(&b_new, rb) && verifies(&b_secret, rb),
        "both during the overlap"
    );
    assert!(got[2].is_none());
    assert!(failed_unreadable(&mut dropped, &c));
    assert_eq!(
        holding(&dropped, &[a_secret, b_secret, b_new, c_secret]),
        Vec::<String>::new()
    );
}

fn send_json(
    sim: &mut Simulation,
    method: &str,
    path: &str,
    key: &str,
    body: &Value,
) -> edgehook_runtime::HttpResponse {
    let auth = bearer(key);
    sim.request(
        method,
        path,
        &[
            ("authorization", auth.as_str()),
            ("content-type", "application/json"),
        ],
        body.to_string().as_bytes(),
    )
    .expect("request runs")
}

/// A whole pass of `POST /internal/v1/secrets/reseal`, `limit` records a call, following
/// each answer's `nextCursor`: the records re-sealed and the subscriptions unreadable.
fn reseal_pass(sim: &mut Simulation, limit: u64) -> (u64, Vec<String>) {
    let (mut resealed, mut unreadable, mut calls) = (0, Vec::new(), 0);
    let mut body = json!({"limit": limit});
    loop {
        let r = operator_post_json(sim, "/internal/v1/secrets/reseal", &body);
        assert_eq!(r.status, 200, "{}", r.json());
        let data = &r.json()["data"];
        assert!(
            data["scanned"].as_u64().expect("scanned") <= limit,
            "bounded"
        );
        resealed += data["resealed"].as_u64().expect("resealed");
        for field in ["unreadable", "unreadableNotificationEndpoints"] {
            for id in data[field].as_array().expect("unreadable") {
                unreadable.push(id.as_str().expect("id").to_owned());
            }
        }
        calls += 1;
        assert!(calls < 100, "a pass ends");
        match &data["nextCursor"] {
            Value::Null => {
                assert_eq!(data["done"], true);
                break;
            }
            cursor => body = json!({"limit": limit, "cursor": cursor}),
        }
    }
    unreadable.sort();
    unreadable.dedup();
    (resealed, unreadable)
}

#[test]
fn the_operators_reseal_pass_seals_every_secret_then_the_previous_key_can_go() {
    // Secrets stored plain (no key yet), one of them in a rotation's overlap.
    let mut plain = sealed_sim(910, &[], None);
    let key = issue_key(&mut plain, "acme");
    let (a, a_secret) = subscribe(&mut plain, &key, A, json!({}));
    let (b, b_secret) = subscribe(&mut plain, &key, B, json!({"signatureScheme": "standard"}));
    let (c, c_old) = subscribe(&mut plain, &key, C, json!({}));
    let r = call(
        &mut plain,
        "POST",
        &format!("/v1/webhooks/{c}/rotate-secret"),
        &key,
    );
    let c_new = r.json()["data"]["signingSecret"]
        .as_str()
        .expect("secret")
        .to_owned();
    // And the client's notification endpoint, with a secret of its own.
    plain.net().endpoint("https://n.example.com/notices", []);
    let put = send_json(
        &mut plain,
        "PUT",
        "/v1/notification-endpoint",
        &key,
        &json!({"url": "https://n.example.com/notices"}),
    );
    assert_eq!(put.status, 201, "{}", put.json());
    let n_secret = put.json()["data"]["signingSecret"]
        .as_str()
        .expect("secret")
        .to_owned();
    let secrets = [
        a_secret.clone(),
        b_secret.clone(),
        c_old.clone(),
        c_new.clone(),
        n_secret,
    ];
    assert_eq!(holding(&plain, &secrets).len(), 4, "stored plain");
    // Without a key there is nothing to seal under: a clear 409.
    let r = operator_post_json(&mut plain, "/internal/v1/secrets/reseal", &json!({}));
    assert_eq!(r.status, 409);
    assert_eq!(r.json()["error"]["code"], "seal_key_missing");
    // A key set: one pass, a record a call, seals them all; a second finds nothing to do.
    let mut first = sealed_sim(911, &[("seal_key", K1)], Some(&plain));
    assert_eq!(reseal_pass(&mut first, 1), (4, Vec::new()));
    assert_eq!(holding(&first, &secrets), Vec::<String>::new());
    assert_eq!(reseal_pass(&mut first, 1000), (0, Vec::new()));
    // A key rotation: the pass seals everything under the new key ...
    let pair = [("seal_key", K2), ("seal_previous_key", K1)];
    let mut rotating = sealed_sim(912, &pair, Some(&plain));
    assert_eq!(reseal_pass(&mut rotating, 2), (4, Vec::new()));
    // ... so the old key can go: every delivery verifies under the new key alone.
    let mut second = sealed_sim(913, &[("seal_key", K2)], Some(&plain));
    let got = deliver(&mut second, &[A, B, C]);
    assert!(got[0].as_ref().is_some_and(|r| verifies(&a_secret, r)));
    assert!(got[1].as_ref().is_some_and(|r| verifies(&b_secret, r)));
    assert!(
        got[2]
            .as_ref()
            .is_some_and(|r| verifies(&c_new, r) && verifies(&c_old, r))
    );
    assert_eq!(holding(&second, &secrets), Vec::<String>::new());
    // Under a key that opens nothing, each is named, in the answer and in the log, and
    // left as it is.
    let mut wrong = sealed_sim(914, &[("seal_key", K1)], Some(&plain));
    let mut all = vec![a.clone(), b, c, "acme".to_owned()];
    all.sort();
    assert_eq!(reseal_pass(&mut wrong, 10), (0, all));
    assert!(
        wrong
            .guest_log()
            .lines()
            .any(|l| l.contains("\"secret.unreadable\"") && l.contains("\"acme\"")),
        "the notification endpoint's"
    );
    assert!(
        wrong
            .guest_log()
            .lines()
            .any(|l| l.contains("\"secret.unreadable\"") && l.contains(&a))
    );
    let mut again = sealed_sim(915, &[("seal_key", K2)], Some(&plain));
    assert_eq!(reseal_pass(&mut again, 10), (0, Vec::new()), "untouched");
}
