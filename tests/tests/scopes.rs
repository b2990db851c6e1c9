//! Scoped credentials: every credential (a `partner`, `partner_read` and
//! `ingest` key, the admin token, none, a revoked key) on every route the router serves
//! (every `Route` variant, from the OpenAPI check's list, which fails on a variant it lacks)
//! with every method it answers: allowed (whatever the route then decides, never 401, 403 or
//! a 5xx), 403 `forbidden`, or 401; and another client's partner key on a client's
//! subscription ids is a 404 on every partner route. Keys are listed with their scope and
//! last use, to the hour.

use crate::common::*;
use crate::openapi::routes::{VARIANTS, served_paths, variant};
use crate::openapi::{SAMPLE_DLV, SAMPLE_KEY, SAMPLE_SUB};
use edgehook_component::api::router::Route;
use edgehook_component::model::ids::ClientId;
use edgehook_runtime::store::KvBackend;
use edgehook_sim::sim::Simulation;
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::time::Duration;

/// The credentials of the matrix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cred {
    Partner,
    PartnerRead,
    Ingest,
    Admin,
    NoToken,
    Revoked,
}

/// What a credential must get on a route.
#[derive(Debug, PartialEq, Eq)]
enum Expect {
    /// Past authentication: whatever the route decides, but never 401, 403 or a 5xx.
    Allowed,
    Forbidden,
    Unauthorized,
}

/// The rule, written from the design rather than from the router: partner keys on partner
/// routes (a read-only one only `GET`s), an ingest key on event ingest only, the admin token
/// on operator routes only (the partner API answers it 401, as before scopes).
fn expected(cred: Cred, path: &str, method: &str) -> Expect {
    let partner_route = path.starts_with("/v1/");
    // A portal link's exchange takes no credential (its token is in the body).
    if path == "/healthz" || path == "/v1/portal/sessions" {
        return Expect::Allowed;
    }
    match cred {
        // Only a portal session (a cookie, not among these) reads or ends itself.
        Cred::Partner | Cred::PartnerRead | Cred::Ingest
            if path == "/v1/portal/sessions/current" =>
        {
            Expect::Forbidden
        }
        Cred::NoToken | Cred::Revoked => Expect::Unauthorized,
        Cred::Admin if partner_route => Expect::Unauthorized,
        Cred::Admin => Expect::Allowed,
        Cred::Partner if partner_route => Expect::Allowed,
        Cred::PartnerRead if partner_route && method == "GET" => Expect::Allowed,
        Cred::Ingest if path == "/internal/v1/events" && method == "POST" => Expect::Allowed,
        Cred::Partner | Cred::PartnerRead | Cred::Ingest => Expect::Forbidden,
    }
}

/// Issues a key through the operator API: `POST` to `path` with `body` (none: no body).
fn issue(sim: &mut Simulation, path: &str, body: Option<Value>) -> (String, String) {
    let resp = match body {
        Some(b) => operator_post_json(sim, path, &b),
        None => call(sim, "POST", path, ADMIN),
    };
    assert_eq!(resp.status, 201, "{}", resp.json());
    let data = &resp.json()["data"];
    (
        data["apiKey"].as_str().expect("key").to_owned(),
        data["id"].as_str().expect("id").to_owned(),
    )
}

/// A client's key of `scope`.
fn client_key(sim: &mut Simulation, client: &str, scope: &str) -> (String, String) {
    let path = format!("/internal/v1/clients/{client}/keys");
    issue(sim, &path, Some(json!({ "scope": scope })))
}

#[test]
fn every_credential_on_every_route_is_allowed_or_403_or_401_never_a_5xx() {
    let mut sim = sim(700);
    sim.net().endpoint(
        "https://hooks.example.com/x",
        [edgehook_sim::simnet::Reply::Status(204)],
    );
    let (partner, _) = client_key(&mut sim, "acme", "partner");
    let (read, _) = client_key(&mut sim, "acme", "partner_read");
    let (ingest, _) = issue(&mut sim, "/internal/v1/ingest-keys", None);
    let (revoked, revoked_id) = client_key(&mut sim, "acme", "partner");
    let path = format!("/internal/v1/clients/acme/keys/{revoked_id}");
    assert_eq!(call(&mut sim, "DELETE", &path, ADMIN).status, 200);
    // Real ids, so that allowed requests reach the route's own work.
    let sub = create_id(
        &mut sim,
        &partner,
        "https://hooks.example.com/x",
        &["load.created"],
    );
    assert_eq!(ingest_as(&mut sim, &ingest).status, 202);
    let deliveries = call(
        &mut sim,
        "GET",
        &format!("/internal/v1/subscriptions/{sub}/deliveries"),
        ADMIN,
    );
    let dlv = deliveries.json()["data"][0]["id"]
        .as_str()
        .expect("a delivery")
        .to_owned();
    let (_, spare_key) = client_key(&mut sim, "acme", "partner_read");

    let mut variants = BTreeSet::new();
    let mut cells = 0;
    let mut failures = Vec::new();
    for sample in served_paths() {
        let path = sample
            .replace(SAMPLE_SUB, &sub)
            .replace(SAMPLE_DLV, &dlv)
            .replace(SAMPLE_KEY, &spare_key);
        let route = Route::parse(&path).expect("a served path");
        variants.insert(variant(&route));
        for &method in route.methods() {
            for cred in [
                Cred::Partner,
                Cred::PartnerRead,
                Cred::Ingest,
                Cred::NoToken,
                Cred::Revoked,
                // Last: its allowed requests change things (a revoke, a disable).
                Cred::Admin,
            ] {
                let token = match cred {
                    Cred::Partner => Some(partner.as_str()),
                    Cred::PartnerRead => Some(read.as_str()),
                    Cred::Ingest => Some(ingest.as_str()),
                    Cred::Admin => Some(ADMIN),
                    Cred::Revoked => Some(revoked.as_str()),
                    Cred::NoToken => None,
                };
                let auth = token.map(bearer);
                let headers: Vec<(&str, &str)> =
                    auth.iter().map(|a| ("authorization", a.as_str())).collect();
                let resp = sim.request(method, &path, &headers, b"").expect("runs");
                cells += 1;
                let body = resp.json();
                let code = body["error"]["code"].as_str().unwrap_or("");
                let ok = match expected(cred, &path, method) {
                    Expect::Allowed => !matches!(resp.status, 401 | 403) && resp.status < 500,
                    Expect::Forbidden => resp.status == 403 && code == "forbidden",
                    Expect::Unauthorized => resp.status == 401 && code == "unauthorized",
                };
                let envelope = body["requestId"].as_str() == resp.header("x-request-id");
                if !ok || !envelope {
                    failures.push(format!(
                        "{cred:?} {method} {path}: expected {:?}, got {} {body}",
                        expected(cred, &path, method),
                        resp.status
                    ));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert_eq!(variants.len(), VARIANTS, "every Route variant walked");
    assert!(
        cells >= 6 * 24,
        "{cells} cells: six credentials on every route method"
    );
}

/// `POST /internal/v1/events` with `token` (an ingest key), one `load.created`.
fn ingest_as(sim: &mut Simulation, token: &str) -> edgehook_runtime::HttpResponse {
    let auth = bearer(token);
    sim.request(
        "POST",
        "/internal/v1/events",
        &[
            ("authorization", auth.as_str()),
            ("content-type", "application/json"),
            ("x-service-event", "load.created"),
        ],
        br#"{"id":"L-1"}"#,
    )
    .expect("runs")
}

#[test]
fn another_clients_key_on_a_clients_subscription_is_always_404() {
    let mut sim = sim(701);
    let (acme, _) = client_key(&mut sim, "acme", "partner");
    let sub = create_id(
        &mut sim,
        &acme,
        "https://hooks.example.com/x",
        &["load.created"],
    );
    let (globex, _) = client_key(&mut sim, "globex", "partner");
    let (globex_read, _) = client_key(&mut sim, "globex", "partner_read");
    let mut checked = 0;
    for sample in served_paths() {
        if !sample.starts_with("/v1/") || !sample.contains(SAMPLE_SUB) {
            continue;
        }
        let path = sample.replace(SAMPLE_SUB, &sub);
        let unknown = sample.clone();
        let route = Route::parse(&path).expect("served");
        for &method in route.methods() {
            call_fails(&mut sim, method, &path, &globex, 404, "not_found");
            // A read-only key gets on another client's id what it gets on an unknown one:
            // 404 for a read, 403 for a write (the scope is checked before any id).
            let on_unknown = call(&mut sim, method, &unknown, &globex_read);
            let on_other = call(&mut sim, method, &path, &globex_read);
            assert_eq!(on_other.status, on_unknown.status, "{method} {path}");
            assert_eq!(
                on_other.json()["error"],
                on_unknown.json()["error"],
                "{method} {path}"
            );
            assert_eq!(
                on_other.status,
                if method == "GET" { 404 } else { 403 },
                "{method} {path}"
            );
            checked += 1;
        }
    }
    assert!(checked >= 4, "{checked} partner routes with an id");
    // Nothing happened to it.
    let own = call(&mut sim, "GET", &format!("/v1/webhooks/{sub}"), &acme);
    assert_eq!(own.status, 200);
    assert_eq!(own.json()["data"]["status"], "active");
    assert_eq!(list_ids(&mut sim, &globex), Vec::<String>::new());
}

#[test]
fn a_read_only_key_reads_and_an_ingest_key_publishes() {
    let mut sim = sim(702);
    sim.net().endpoint(
        "https://hooks.example.com/x",
        [edgehook_sim::simnet::Reply::Status(204)],
    );
    let (partner, _) = client_key(&mut sim, "acme", "partner");
    let (read, _) = client_key(&mut sim, "acme", "partner_read");
    let sub = create_id(
        &mut sim,
        &partner,
        "https://hooks.example.com/x",
        &["load.created"],
    );
    assert_eq!(list_ids(&mut sim, &read), vec![sub.clone()]);
    let resp = create_with(
        &mut sim,
        &read,
        &json!({"url": "https://hooks.example.com/y", "eventTypes": ["load.created"]}),
        &[],
    );
    assert_error(&resp, 403, "forbidden");
    call_fails(
        &mut sim,
        "DELETE",
        &format!("/v1/webhooks/{sub}"),
        &read,
        403,
        "forbidden",
    );
    assert_eq!(
        list_ids(&mut sim, &read),
        vec![sub],
        "nothing created or deleted"
    );
    let (ingest, _) = issue(&mut sim, "/internal/v1/ingest-keys", None);
    let published = ingest_as(&mut sim, &ingest);
    assert_eq!(published.status, 202, "{}", published.json());
    assert_eq!(published.json()["data"]["deliveries"], 1);
    assert_eq!(sim.net().received().len(), 1, "delivered");
    call_fails(
        &mut sim,
        "POST",
        "/internal/v1/tick",
        &ingest,
        403,
        "forbidden",
    );
}

#[test]
fn a_bad_scope_is_refused_and_writes_nothing() {
    let mut sim = sim(703);
    let before = sim.store().snapshot();
    for (path, body, code) in [
        (
            "/internal/v1/clients/acme/keys",
            json!({"scope": "ingest"}),
            "invalid_scope",
        ),
        (
            "/internal/v1/clients/acme/keys",
            json!({"scope": "admin"}),
            "invalid_scope",
        ),
        (
            "/internal/v1/clients/acme/keys",
            json!({"scope": 1}),
            "invalid_scope",
        ),
        (
            "/internal/v1/clients/acme/keys",
            json!({"role": "x"}),
            "unknown_field",
        ),
        (
            "/internal/v1/ingest-keys",
            json!({"scope": "partner"}),
            "invalid_scope",
        ),
    ] {
        let resp = operator_post_json(&mut sim, path, &body);
        assert_error(&resp, 422, "validation_failed");
        assert_eq!(resp.json()["error"]["details"][0]["code"], code, "{body}");
    }
    let auth = bearer(ADMIN);
    let resp = sim
        .request(
            "POST",
            "/internal/v1/clients/acme/keys",
            &[
                ("authorization", &auth),
                ("content-type", "application/json"),
            ],
            b"{",
        )
        .expect("runs");
    assert_error(&resp, 400, "invalid_json");
    assert_eq!(sim.store().snapshot(), before, "nothing written");
}

#[test]
fn keys_are_listed_with_scope_and_last_use_to_the_hour_and_revoked_by_any_scope() {
    let mut sim = sim(704);
    let (partner, partner_id) = client_key(&mut sim, "acme", "partner");
    let (_, read_id) = client_key(&mut sim, "acme", "partner_read");
    client_key(&mut sim, "globex", "partner");
    let (ingest, ingest_id) = issue(&mut sim, "/internal/v1/ingest-keys", None);
    let issued_at = sim.now_ms();
    let list = |sim: &mut Simulation, path: &str| {
        let resp = call(sim, "GET", path, ADMIN);
        assert_eq!(resp.status, 200, "{}", resp.json());
        resp.json()["data"].as_array().expect("data").clone()
    };
    let acme = list(&mut sim, "/internal/v1/clients/acme/keys");
    assert_eq!(acme.len(), 2, "only acme's: {acme:?}");
    assert_eq!(acme[0]["id"], partner_id.as_str());
    assert_eq!(acme[0]["scope"], "partner");
    assert_eq!(acme[1]["scope"], "partner_read");
    assert_eq!(acme[0]["createdAt"], issued_at);
    assert_eq!(acme[0]["lastUsedAt"], Value::Null);
    let text = serde_json::to_string(&acme).expect("json");
    assert!(!text.contains(&partner) && !text.contains("hash"), "{text}");

    // Used: the time of the first use; uses within the hour leave it.
    assert_eq!(call(&mut sim, "GET", "/v1/webhooks", &partner).status, 200);
    let first_use = sim.now_ms();
    sim.advance_without_ticking(Duration::from_secs(1800));
    assert_eq!(call(&mut sim, "GET", "/v1/webhooks", &partner).status, 200);
    let acme = list(&mut sim, "/internal/v1/clients/acme/keys");
    assert_eq!(acme[0]["lastUsedAt"], first_use);
    sim.advance_without_ticking(Duration::from_secs(1800));
    assert_eq!(call(&mut sim, "GET", "/v1/webhooks", &partner).status, 200);
    let acme = list(&mut sim, "/internal/v1/clients/acme/keys");
    assert_eq!(
        acme[0]["lastUsedAt"],
        sim.now_ms(),
        "an hour later: written again"
    );
    assert_eq!(acme[1]["lastUsedAt"], Value::Null);

    // Paged like every list.
    let page = call(
        &mut sim,
        "GET",
        "/internal/v1/clients/acme/keys?limit=1",
        ADMIN,
    )
    .json();
    assert_eq!(page["hasMore"], true);
    let next = page["nextCursor"].as_str().expect("cursor");
    let rest = list(
        &mut sim,
        &format!("/internal/v1/clients/acme/keys?limit=1&cursor={next}"),
    );
    assert_eq!(rest[0]["id"], read_id.as_str());

    // Ingest keys: their own list, used by a publish; revoked under their own route only.
    assert_eq!(ingest_as(&mut sim, &ingest).status, 202);
    let ingest_keys = list(&mut sim, "/internal/v1/ingest-keys");
    assert_eq!(ingest_keys.len(), 1);
    assert_eq!(ingest_keys[0]["scope"], "ingest");
    assert_eq!(ingest_keys[0]["lastUsedAt"], sim.now_ms());
    assert!(ingest_keys[0].get("clientId").is_none());
    let wrong = format!("/internal/v1/clients/acme/keys/{ingest_id}");
    call_fails(&mut sim, "DELETE", &wrong, ADMIN, 404, "not_found");
    let empty_client = format!("/internal/v1/clients//keys/{ingest_id}");
    call_fails(&mut sim, "DELETE", &empty_client, ADMIN, 404, "not_found");
    let revoke = format!("/internal/v1/ingest-keys/{ingest_id}");
    assert_eq!(call(&mut sim, "DELETE", &revoke, ADMIN).status, 200);
    assert_error(&ingest_as(&mut sim, &ingest), 401, "unauthorized");
    let revoke = format!("/internal/v1/clients/acme/keys/{read_id}");
    assert_eq!(call(&mut sim, "DELETE", &revoke, ADMIN).status, 200);
    let acme = list(&mut sim, "/internal/v1/clients/acme/keys");
    assert_eq!(acme[1]["status"], "revoked");
    assert_eq!(acme[1]["revokedAt"], sim.now_ms());
    assert_eq!(
        list(&mut sim, "/internal/v1/ingest-keys")[0]["status"],
        "revoked"
    );
}

#[test]
fn a_key_issued_before_scopes_keeps_working_and_is_listed_from_its_first_use() {
    use edgehook_component::records::api_key::ApiKeyRecord;
    use edgehook_component::storage::codec::Writer;
    let mut sim = sim(705);
    let (key, id) = client_key(&mut sim, "acme", "partner");
    // Rewrite its record in format 0xA1 (what the release before scopes wrote) and drop
    // the index (which it did not have).
    let snapshot = sim.store().snapshot();
    let (name, bytes) = snapshot
        .iter()
        .find(|(k, _)| k.starts_with(keys::API_KEY_PREFIX))
        .expect("a key record");
    let record = ApiKeyRecord::decode(bytes).expect("decodes");
    let mut w = Writer::new(0xA1, 128);
    w.str(&record.id)
        .str(&record.client_id)
        .str(&record.hash)
        .u64(record.created_at)
        .opt(None::<u64>, Writer::u64);
    sim.store().set(name, &w.finish()).expect("set");
    for k in snapshot
        .keys()
        .filter(|k| k.starts_with(keys::client_keys(&ClientId::trusted("acme")).as_str()))
    {
        sim.store().delete(k).expect("delete");
    }
    let listed = call(&mut sim, "GET", "/internal/v1/clients/acme/keys", ADMIN).json();
    assert_eq!(listed["data"], json!([]), "not in any index yet");
    let sub = create_id(
        &mut sim,
        &key,
        "https://hooks.example.com/x",
        &["load.created"],
    );
    assert_eq!(
        list_ids(&mut sim, &key),
        vec![sub],
        "a partner key, as before"
    );
    let listed = call(&mut sim, "GET", "/internal/v1/clients/acme/keys", ADMIN).json();
    assert_eq!(listed["data"][0]["id"], id.as_str());
    assert_eq!(listed["data"][0]["scope"], "partner");
    assert_eq!(listed["data"].as_array().map(Vec::len), Some(1));
    let revoke = format!("/internal/v1/clients/acme/keys/{id}");
    assert_eq!(call(&mut sim, "DELETE", &revoke, ADMIN).status, 200);
    call_fails(&mut sim, "GET", "/v1/webhooks", &key, 401, "unauthorized");
}
