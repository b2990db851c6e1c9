//! The world a fuzz input runs in: an in-memory store pre-seeded through the real API (two
//! API clients with keys, four subscriptions, one of them deleted, one event delivered), a
//! clock the input moves, fixed-seed randomness and a scripted network.
//!
//! The seeded store is built once per process and copied into a fresh [`MemoryKv`] for
//! every input, so inputs never see each other's state.

use crate::check;
use crate::model::Model;
use edgehook_component::api::router;
use edgehook_component::delivery::{Outgoing, SendError, SendResult, Sender, run_now};
use edgehook_component::model::config::Settings;
use edgehook_component::model::env::{Env, SeededEntropy};
use edgehook_component::model::http::Request;
use edgehook_component::storage::keys::Key;
use edgehook_component::storage::kv::{Kv, MemoryKv};
use serde_json::Value;
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::sync::OnceLock;

/// The clock at the start of every input (2023-11-14, ms since the epoch).
pub const T0_MS: u64 = 1_700_000_000_000;
/// The earliest the clock may be moved to (2020-01-01): inputs may move it backwards (clock
/// skew between instances), but not to before the service existed.
pub const MIN_MS: u64 = 1_577_836_800_000;
/// The latest the clock may be moved to (2100-01-01).
pub const MAX_MS: u64 = 4_102_444_800_000;
/// The operator API's admin token.
pub const ADMIN_TOKEN: &str = "eha_fuzz0admin0token0f00d";
/// The first API client (has subscriptions `$SUB`, `$SUB2` and the deleted `$SUB3`).
pub const CLIENT_A: &str = "acme";
/// The second API client (has `$OTHER`).
pub const CLIENT_B: &str = "globex";
/// The load published while seeding.
pub const SEED_LOAD: &[u8] = br#"{"id":"L-1","status":"ASSIGNED","eligibleForTracking":true}"#;

/// Ids and keys created while seeding, for placeholders and expectations.
#[derive(Debug, Clone)]
pub struct Seed {
    /// API key of [`CLIENT_A`].
    pub key_a: String,
    /// Its key id (`key_...`).
    pub key_a_id: String,
    /// API key of [`CLIENT_B`].
    pub key_b: String,
    /// `load.created` subscription of A.
    pub sub: String,
    /// A's subscription to all three event types.
    pub sub2: String,
    /// A's deleted subscription (was `load.updated`).
    pub sub3: String,
    /// B's subscription (`load.created`, `load.status_changed`); its seed delivery failed
    /// once and has a retry due 60-66 s after [`T0_MS`].
    pub other: String,
    /// The seeded event (`load.created`, [`SEED_LOAD`]).
    pub event: String,
}

/// What one call through the router answered, checked by [`check::envelope`].
#[derive(Debug, Clone)]
pub struct Reply {
    /// Status code.
    pub status: u16,
    /// Response headers (lower-case names).
    pub headers: Vec<(String, String)>,
    /// The body as JSON (always an object; the envelope check guarantees it).
    pub body: Value,
    /// The body as text.
    pub text: String,
}

impl Reply {
    /// The first value of header `name` (lower case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// `error.code`, for error responses.
    pub fn code(&self) -> Option<&str> {
        self.body["error"]["code"].as_str()
    }

    /// The fields named in `error.details`.
    pub fn detail_fields(&self) -> Vec<&str> {
        self.body["error"]["details"]
            .as_array()
            .map(|d| d.iter().filter_map(|d| d["field"].as_str()).collect())
            .unwrap_or_default()
    }

    /// Whether the status is 2xx.
    pub fn ok(&self) -> bool {
        (200..300).contains(&self.status)
    }
}

/// The delivery id of `event` to `sub`, as the service derives it, from their texts.
pub fn delivery_id_of(event: &str, sub: &str) -> String {
    use edgehook_component::model::ids::{EventId, SubscriptionId};
    let (event, sub) = (EventId::trusted(event), SubscriptionId::trusted(sub));
    edgehook_component::delivery::delivery_id(&event, &sub).into_string()
}

/// One scripted answer of the network: a status code or a transport error, named by its
/// text (`timeout`, `connection refused`, ...; any other text is an error of class `other`).
pub type Outcome = Result<u16, String>;

/// A network that answers from a script (cycled; `200` when the script is empty) and keeps
/// every request it was given, for the model to check.
#[derive(Default)]
pub struct ScriptedSender {
    script: RefCell<Vec<Outcome>>,
    by_host: RefCell<Vec<(String, Outcome)>>,
    next: RefCell<usize>,
    sent: RefCell<Vec<(Outgoing, SendResult)>>,
}

impl ScriptedSender {
    /// Replaces the script (and restarts it).
    pub fn set_script(&self, script: Vec<Outcome>) {
        *self.script.borrow_mut() = script;
        *self.next.borrow_mut() = 0;
    }

    /// Answers for particular hosts, taking precedence over the script.
    pub fn set_by_host(&self, answers: Vec<(String, Outcome)>) {
        *self.by_host.borrow_mut() = answers;
    }

    /// Takes the requests sent since the last call.
    pub fn take(&self) -> Vec<(Outgoing, SendResult)> {
        std::mem::take(&mut *self.sent.borrow_mut())
    }
}

impl Sender for ScriptedSender {
    fn send_all(&self, requests: &[Outgoing], _timeout_ms: u64) -> Vec<SendResult> {
        let script = self.script.borrow();
        let mut next = self.next.borrow_mut();
        let mut results = Vec::with_capacity(requests.len());
        for req in requests {
            let fixed = self
                .by_host
                .borrow()
                .iter()
                .find(|(host, _)| *host == req.authority)
                .map(|(_, o)| o.clone());
            let outcome = if let Some(fixed) = fixed {
                fixed
            } else if script.is_empty() {
                Ok(200)
            } else {
                script[*next % script.len()].clone()
            };
            *next += 1;
            let result = SendResult {
                outcome: outcome.map_err(|text| SendError::from_stored(&text)),
                latency_ms: 3,
                retry_after: None,
            };
            self.sent.borrow_mut().push((req.clone(), result.clone()));
            results.push(result);
        }
        results
    }
}

/// A store, a clock, randomness, a network and the model of what must hold.
pub struct World {
    /// The store (fault injection through [`MemoryKv::fail_at`]).
    pub kv: MemoryKv,
    /// Settings of this world.
    pub settings: Settings,
    /// The clock, ms since the epoch.
    pub now_ms: u64,
    /// The network.
    pub sender: ScriptedSender,
    /// What must hold across requests.
    pub model: Model,
    /// Ids and keys from seeding.
    pub seed: Seed,
    /// What the network was sent during the latest request.
    pub last_sent: Vec<(Outgoing, SendResult)>,
    entropy: SeededEntropy,
}

struct Template {
    store: BTreeMap<String, Vec<u8>>,
    model: Model,
    seed: Seed,
}

static TEMPLATE: OnceLock<Template> = OnceLock::new();

/// The settings of a world: the admin token plus `extra` (`wasi:config` key/value pairs).
pub fn settings(extra: &[(&str, &str)]) -> Settings {
    let mut pairs = vec![("admin_token", ADMIN_TOKEN)];
    pairs.extend_from_slice(extra);
    match Settings::from_pairs(pairs) {
        Ok(s) => s,
        Err(e) => panic!("harness settings do not parse: {e}"),
    }
}

/// `Authorization` header value for a bearer token.
pub fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

impl World {
    /// A fresh copy of the seeded world, with `extra` settings.
    pub fn new(extra: &[(&str, &str)]) -> World {
        let template = TEMPLATE.get_or_init(build_template);
        let kv = MemoryKv::new();
        for (k, v) in &template.store {
            if kv.set(&Key::from_stored(k.as_str()), v).is_err() {
                panic!("MemoryKv refused a write without faults");
            }
        }
        World {
            kv,
            settings: settings(extra),
            now_ms: T0_MS,
            sender: ScriptedSender::default(),
            model: template.model.clone(),
            seed: template.seed.clone(),
            last_sent: Vec::new(),
            entropy: SeededEntropy::new(0x5eed_f022),
        }
    }

    /// Moves the clock by `delta_ms` (either way), staying within [`MIN_MS`]..=[`MAX_MS`].
    pub fn advance(&mut self, delta_ms: i64) {
        let now = i128::from(self.now_ms) + i128::from(delta_ms);
        let clamped = now.clamp(i128::from(MIN_MS), i128::from(MAX_MS));
        self.now_ms = u64::try_from(clamped).unwrap_or(T0_MS);
    }

    /// Sends one request through `router::handle`, checks the envelope, runs the attempts
    /// it made due at once (`run_after`, as the component does once its response is out),
    /// checks the model, and returns the reply. `faulted`: a store fault was armed for this
    /// request (503 allowed).
    pub fn request(&mut self, req: &Request, faulted: bool) -> Reply {
        let env = Env::new(self.now_ms, &self.kv, &self.settings, &self.entropy);
        let handled = router::handle(&env, req, &self.sender);
        let reply = check::envelope(req, &handled, faulted);
        if let Some(work) = &handled.run_after {
            run_now(&env, &self.sender, work);
        }
        let sent = self.sender.take();
        self.model.observe(req, &reply, self.now_ms, faulted, &sent);
        self.last_sent = sent;
        reply
    }

    /// A request as the operator (admin token).
    pub fn operator(&mut self, method: &str, target: &str, body: &[u8]) -> Reply {
        let req = Request::new(method, target)
            .header("authorization", &bearer(ADMIN_TOKEN))
            .header("content-type", "application/json")
            .body(body.to_vec());
        self.request(&req, false)
    }

    /// A request as API client with key `key`.
    pub fn partner(&mut self, key: &str, method: &str, target: &str, body: &[u8]) -> Reply {
        let req = Request::new(method, target)
            .header("authorization", &bearer(key))
            .header("content-type", "application/json")
            .body(body.to_vec());
        self.request(&req, false)
    }

    /// Publishes a load as the operator; returns the event id, or `None` if it was refused.
    pub fn publish(&mut self, event_type: &str, load: &[u8]) -> Option<String> {
        let req = Request::new("POST", "/internal/v1/events")
            .header("authorization", &bearer(ADMIN_TOKEN))
            .header("content-type", "application/json")
            .header("x-service-event", event_type)
            .body(load.to_vec());
        let reply = self.request(&req, false);
        reply.body["data"]["eventId"].as_str().map(str::to_owned)
    }

    /// Sets the network's script for the next requests.
    pub fn set_script(&mut self, script: Vec<Outcome>) {
        for outcome in &script {
            if let Err(text) = outcome {
                self.model
                    .supplied_by_network(SendError::from_stored(text).as_str());
            }
        }
        self.sender.set_script(script);
    }

    /// Runs a tick with the network answering from `script`.
    pub fn tick(&mut self, script: Vec<Outcome>) -> Reply {
        self.set_script(script);
        let reply = self.operator("POST", "/internal/v1/tick", b"");
        self.sender.set_script(Vec::new());
        reply
    }

    /// The values of the `$NAME` placeholders of the text request format ([`crate::text`]),
    /// longest names first.
    pub fn vars(&self) -> Vec<(&'static str, String)> {
        let m = &self.model;
        let s = &self.seed;
        let last_event = m.last_event.clone().unwrap_or_else(|| s.event.clone());
        vec![
            (
                "$LASTSUB",
                m.last_sub.clone().unwrap_or_else(|| s.sub.clone()),
            ),
            (
                "$NEWKEY",
                m.last_key.clone().unwrap_or_else(|| s.key_a.clone()),
            ),
            (
                "$KEYID",
                m.last_key_id.clone().unwrap_or_else(|| s.key_a_id.clone()),
            ),
            ("$ADMIN", ADMIN_TOKEN.to_owned()),
            ("$OTHER", s.other.clone()),
            ("$DLVO", delivery_id_of(&s.event, &s.other)),
            ("$KEY2", s.key_b.clone()),
            ("$SUB2", s.sub2.clone()),
            ("$SUB3", s.sub3.clone()),
            ("$EVT", last_event.clone()),
            ("$DLV", delivery_id_of(&last_event, &s.sub)),
            (
                "$CUR",
                m.last_cursor.clone().unwrap_or_else(|| "cur_1".to_owned()),
            ),
            ("$KEY", s.key_a.clone()),
            ("$SUB", s.sub.clone()),
        ]
    }
}

fn expect_str(reply: &Reply, pointer: &str, what: &str) -> String {
    match reply.body.pointer(pointer).and_then(Value::as_str) {
        Some(s) => s.to_owned(),
        None => panic!("seeding: {what} failed: {} {}", reply.status, reply.text),
    }
}

/// Seeds the template through the real API, with every check on.
fn build_template() -> Template {
    let placeholder = Seed {
        key_a: String::new(),
        key_a_id: String::new(),
        key_b: String::new(),
        sub: String::new(),
        sub2: String::new(),
        sub3: String::new(),
        other: String::new(),
        event: String::new(),
    };
    let mut w = World {
        kv: MemoryKv::new(),
        settings: settings(&[]),
        now_ms: T0_MS,
        sender: ScriptedSender::default(),
        model: Model::default(),
        seed: placeholder,
        last_sent: Vec::new(),
        entropy: SeededEntropy::new(1),
    };
    let issued = w.operator(
        "POST",
        &format!("/internal/v1/clients/{CLIENT_A}/keys"),
        b"",
    );
    let key_a = expect_str(&issued, "/data/apiKey", "issuing A's key");
    let key_a_id = expect_str(&issued, "/data/id", "issuing A's key");
    let issued = w.operator(
        "POST",
        &format!("/internal/v1/clients/{CLIENT_B}/keys"),
        b"",
    );
    let key_b = expect_str(&issued, "/data/apiKey", "issuing B's key");
    let create = |w: &mut World, key: &str, url: &str, types: &str| {
        let body = format!(r#"{{"url":"{url}","eventTypes":{types}}}"#);
        let reply = w.partner(key, "POST", "/v1/webhooks", body.as_bytes());
        expect_str(&reply, "/data/id", "creating a subscription")
    };
    let sub = create(
        &mut w,
        &key_a,
        "https://hooks.acme.example/loads",
        r#"["load.created"]"#,
    );
    let sub2 = create(
        &mut w,
        &key_a,
        "https://hooks.acme.example/all",
        r#"["load.created","load.updated","load.status_changed"]"#,
    );
    let sub3 = create(
        &mut w,
        &key_a,
        "https://acme.example/old",
        r#"["load.updated"]"#,
    );
    let other = create(
        &mut w,
        &key_b,
        "https://hooks.globex.example/in",
        r#"["load.created","load.status_changed"]"#,
    );
    let deleted = w.partner(&key_a, "DELETE", &format!("/v1/webhooks/{sub3}"), b"");
    assert_eq!(deleted.status, 200, "seeding: delete: {}", deleted.text);
    // Acme's endpoints answer 200, globex's 503: its delivery waits for a retry. Attempt 1
    // of each runs as the publish is answered.
    w.sender
        .set_by_host(vec![("hooks.globex.example".to_owned(), Ok(503))]);
    let event = match w.publish("load.created", SEED_LOAD) {
        Some(e) => e,
        None => panic!("seeding: the seed load was refused"),
    };
    w.sender.set_by_host(Vec::new());
    assert_eq!(w.last_sent.len(), 3, "seeding: attempt 1 of each delivery");
    let seed = Seed {
        key_a,
        key_a_id,
        key_b,
        sub,
        sub2,
        sub3,
        other,
        event,
    };
    let mut model = w.model;
    model.forget_recent();
    Template {
        store: w.kv.dump(),
        model,
        seed,
    }
}
