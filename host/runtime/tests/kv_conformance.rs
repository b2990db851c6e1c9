//! The key-value conformance suite: the probe component (`tests/kvprobe`, [`KVPROBE_WASM`])
//! checks every store the project runs on against the rules the component relies on
//! (docs/embedding.md, "Key-value contract"), and a store that breaks a rule fails by name.
//!
//! - Our stores (memory, the embedded store, Redis and a Redis Cluster through our host) run
//!   the probe in process, the
//!   way the runtime runs the component, and must keep every rule.
//! - Spin 4.0.2 (`spin up`, with its default SQLite store and with Redis) runs the probe over
//!   HTTP; the rules it breaks must be exactly the known ones listed below, so the test fails
//!   when Spin changes either way. The Spin binary is `$SPIN_BIN`, else
//!   `../shared/tools/spin` beside the repository; without one these tests pass with a loud
//!   `SKIPPED`, unless `CI` is set.
//!
//! Each rule runs in a request of its own (a host that fails the whole call on one rule still
//! answers for the others), then two contention rules run many requests at once. Loopback
//! only; every wait is a condition with a deadline; Spin and Redis are killed on drop.

use edgehook_runtime::embedded::{self, Durability};
use edgehook_runtime::rediscluster::RedisClusterStore;
use edgehook_runtime::redisstore::{RedisOptions, RedisStore};
use edgehook_runtime::store::{KvStore, MemoryStore};
use edgehook_runtime::{Baseline, HostEnv, KVPROBE_WASM};
use edgehook_testkit::http::HttpClient;
use edgehook_testkit::redis::{redis_or_skip, shared_redis};
use edgehook_testkit::rediscluster::shared_cluster;
use edgehook_testkit::spin::{MANIFEST_FILE, SpinApp, SpinOptions, binary_or_skip};
use edgehook_testkit::{rt, temp_dir};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// Rules Spin 4.0.2's default (SQLite) key-value store breaks, and why.
const SPIN_SQLITE_BREAKS: &[(&str, &str)] = &[
    (
        "cas.swap_after_key_created_fails",
        "a swap begun on a missing key is an INSERT .. ON CONFLICT DO UPDATE: it overwrites a \
         key created meanwhile and reports success",
    ),
    (
        "cas.two_handles_on_missing_key_first_swap_wins",
        "the same upsert: both swaps begun on a missing key succeed, the second overwrites",
    ),
    (
        "batch.get_many_in_request_order",
        "SELECT .. WHERE key IN rarray(..): rows come in the table's order",
    ),
    (
        "batch.get_many_missing_as_none",
        "the same SELECT: missing keys are left out of the answer",
    ),
    (
        "batch.get_many_duplicates",
        "the same SELECT: a key asked for twice is answered once",
    ),
];

/// Rules Spin 4.0.2's Redis key-value store breaks, and why.
const SPIN_REDIS_BREAKS: &[(&str, &str)] = &[
    (
        "cas.swap_on_missing_key_reports_success",
        "every swap ends with `UNWATCH <key>`, which Redis refuses: cas-failed, applied or not",
    ),
    (
        "cas.swap_on_unchanged_key_reports_success",
        "the same `UNWATCH <key>`",
    ),
    (
        "batch.get_many_single_key",
        "get-many sends `KEYS <key>` and parses the key names as key-value pairs: the host \
         panics (redis-rs `unreachable`) and the whole call fails",
    ),
    (
        "batch.get_many_values_by_key",
        "get-many sends `KEYS k1 k2 ..`: wrong number of arguments",
    ),
    (
        "batch.get_many_in_request_order",
        "the same `KEYS k1 k2 ..`",
    ),
    ("batch.get_many_missing_as_none", "the same `KEYS k1 k2 ..`"),
    ("batch.get_many_duplicates", "the same `KEYS k1 k2 ..`"),
];

/// Requests at once in the contention rules, and increments per request.
const CONCURRENT: usize = 16;
const INCREMENTS_EACH: usize = 25;

// ---------------------------------------------------------------------------------------
// the suite

/// One rule's result.
#[derive(Debug, Clone)]
struct RuleResult {
    name: String,
    ok: bool,
    detail: String,
}

/// Where the probe runs.
enum Target {
    /// In this process, on one of our stores, run as the runtime runs the component.
    Local {
        probe: &'static Baseline,
        env: HostEnv,
    },
    /// Behind an HTTP server (Spin) at this base URL.
    Http(HttpClient, String),
}

impl Target {
    fn local(kv: KvStore) -> Target {
        static PROBE: OnceLock<Baseline> = OnceLock::new();
        let probe = PROBE.get_or_init(|| Baseline::with(KVPROBE_WASM).expect("the probe links"));
        let env = HostEnv {
            kv,
            ..HostEnv::in_memory()
        };
        Target::Local { probe, env }
    }

    /// One request: the status and the body as JSON (`Null` when it is not JSON).
    async fn call(&self, method: &str, path: &str) -> (u16, Value) {
        let (status, body) = match self {
            Target::Local { probe, env } => {
                let req = http::Request::builder()
                    .method(method)
                    .uri(format!("http://probe{path}"))
                    .body(http_body_util::Full::new(bytes::Bytes::new()))
                    .expect("request");
                match probe.handle(env, req).await {
                    Ok(r) => (r.status, String::from_utf8_lossy(&r.body).into_owned()),
                    Err(e) => (0, format!("the call failed: {e:#}")),
                }
            }
            Target::Http(client, base) => match client.call(method, &format!("{base}{path}")).await
            {
                Ok(answer) => answer,
                Err(e) => (0, format!("the call failed: {e:#}")),
            },
        };
        let json = serde_json::from_str(&body).unwrap_or(Value::String(body));
        (status, json)
    }
}

/// Runs every rule of the probe, then the contention rules, on `target`.
async fn run_suite(target: Arc<Target>) -> Vec<RuleResult> {
    let nonce = format!(
        "{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .as_nanos()
    );
    let (status, names) = target.call("GET", "/rules").await;
    assert_eq!(status, 200, "GET /rules: {names}");
    let names: Vec<String> = serde_json::from_value(names["rules"].clone()).expect("rule names");
    let mut results = Vec::new();
    for name in names {
        let path = format!("/conformance?run={nonce}&rule={name}");
        let (status, body) = target.call("GET", &path).await;
        let answered = (status == 200)
            .then(|| body["rules"].get(0))
            .flatten()
            .filter(|r| r["name"] == name.as_str());
        results.push(match answered {
            Some(r) => RuleResult {
                name,
                ok: r["ok"] == true,
                detail: r["detail"].as_str().unwrap_or_default().to_owned(),
            },
            None => RuleResult {
                name,
                ok: false,
                detail: format!("the host failed the call: status {status}, body {body}"),
            },
        });
    }
    results.push(concurrent_increments(&target, &nonce).await);
    results.push(concurrent_cas_appends(&target, &nonce).await);
    results
}

/// Runs `CONCURRENT` requests at once; answers each one's status and body, in order.
async fn at_once(target: &Arc<Target>, paths: Vec<String>) -> Vec<(u16, Value)> {
    let tasks: Vec<_> = paths
        .into_iter()
        .map(|path| {
            let target = target.clone();
            tokio::spawn(async move { target.call("POST", &path).await })
        })
        .collect();
    let mut answers = Vec::new();
    for task in tasks {
        answers.push(task.await.expect("request task"));
    }
    answers
}

/// `contention.concurrent_increments_sum_exactly`: concurrent requests each incrementing one
/// counter many times end at exactly the sum.
async fn concurrent_increments(target: &Arc<Target>, nonce: &str) -> RuleResult {
    let name = "contention.concurrent_increments_sum_exactly".to_owned();
    let key = format!("kvprobe:{nonce}:{name}:n");
    let paths = (0..CONCURRENT)
        .map(|_| format!("/increment?key={key}&times={INCREMENTS_EACH}"))
        .collect();
    let failed: Vec<_> = at_once(target, paths)
        .await
        .into_iter()
        .filter(|(status, _)| *status != 200)
        .collect();
    let want = (CONCURRENT * INCREMENTS_EACH) as i64;
    let (status, body) = target.call("GET", &format!("/counter?key={key}")).await;
    let got = body["value"].as_i64();
    let ok = failed.is_empty() && status == 200 && got == Some(want);
    let detail = if ok {
        format!("{CONCURRENT} requests x {INCREMENTS_EACH} increments: {want}")
    } else {
        format!(
            "{CONCURRENT} requests x {INCREMENTS_EACH} increments: read {body} (status \
             {status}), want {want}; failed requests: {failed:?}"
        )
    };
    RuleResult { name, ok, detail }
}

/// `contention.concurrent_cas_appends_land_once`: concurrent requests each adding a unique
/// item to one key by a compare-and-swap loop leave every item there exactly once. The key
/// exists before they start (creating a key races differently:
/// `cas.two_handles_on_missing_key_first_swap_wins`).
async fn concurrent_cas_appends(target: &Arc<Target>, nonce: &str) -> RuleResult {
    let name = "contention.concurrent_cas_appends_land_once".to_owned();
    let key = format!("kvprobe:{nonce}:{name}:items");
    let (status, body) = target
        .call("POST", &format!("/cas-add?key={key}&item=seed"))
        .await;
    if status != 200 {
        let detail = format!("the first item, alone: status {status}, {body}");
        return RuleResult {
            name,
            ok: false,
            detail,
        };
    }
    let paths = (0..CONCURRENT)
        .map(|i| format!("/cas-add?key={key}&item=item{i}"))
        .collect();
    let answers = at_once(target, paths).await;
    let (status, body) = target.call("GET", &format!("/items?key={key}")).await;
    let mut got: Vec<String> = serde_json::from_value(body["items"].clone()).unwrap_or_default();
    got.sort();
    let mut want: Vec<String> = (0..CONCURRENT).map(|i| format!("item{i}")).collect();
    want.push("seed".into());
    want.sort();
    let failed: Vec<_> = answers.iter().filter(|(s, _)| *s != 200).collect();
    let attempts: i64 = answers
        .iter()
        .filter_map(|(_, b)| b["attempts"].as_i64())
        .sum();
    let read_back = answers.iter().filter(|(_, b)| b["applied"] != "ok").count();
    let ok = failed.is_empty() && status == 200 && got == want;
    let detail = if ok {
        format!(
            "{CONCURRENT} items, each once, in {attempts} compare-and-swaps ({read_back} \
             known applied only by reading back)"
        )
    } else {
        format!("items {got:?} (status {status}), want {want:?}; failed requests: {failed:?}")
    };
    RuleResult { name, ok, detail }
}

/// Prints the results as a table, marking the rules `known` to break.
fn print_table(store: &str, results: &[RuleResult], known: &[(&str, &str)]) {
    let mut table = format!("\nkey-value conformance: {store}\n");
    for r in results {
        let verdict = if r.ok { "pass" } else { "FAIL" };
        let note = match known.iter().find(|(n, _)| *n == r.name) {
            Some((_, why)) => format!("  [known: {why}]"),
            None => String::new(),
        };
        table.push_str(&format!("  {verdict} {:<52} {}{note}\n", r.name, r.detail));
    }
    println!("{table}");
}

/// Runs the suite on `rt` and checks that exactly the rules in `known` fail.
fn check(rt: &tokio::runtime::Runtime, store: &str, target: Target, known: &[(&str, &str)]) {
    let results = rt.block_on(run_suite(Arc::new(target)));
    print_table(store, &results, known);
    let failing: BTreeSet<&str> = results
        .iter()
        .filter(|r| !r.ok)
        .map(|r| r.name.as_str())
        .collect();
    let expected: BTreeSet<&str> = known.iter().map(|(n, _)| *n).collect();
    let names: BTreeSet<&str> = results.iter().map(|r| r.name.as_str()).collect();
    let unknown: Vec<_> = expected.difference(&names).collect();
    assert!(
        unknown.is_empty(),
        "known breaks of rules the probe lacks: {unknown:?}"
    );
    let newly: BTreeMap<&str, &str> = results
        .iter()
        .filter(|r| !r.ok && !expected.contains(r.name.as_str()))
        .map(|r| (r.name.as_str(), r.detail.as_str()))
        .collect();
    let fixed: Vec<_> = expected.difference(&failing).collect();
    assert!(
        newly.is_empty() && fixed.is_empty(),
        "{store}: rules broken that are not known to break: {newly:#?}\nrules known to \
         break that now hold (take them off the list): {fixed:?}"
    );
}

// ---------------------------------------------------------------------------------------
// our stores

#[test]
fn the_memory_store_keeps_every_rule() {
    let kv = KvStore::Local(Arc::new(MemoryStore::new()));
    check(&rt(), "memory (our host)", Target::local(kv), &[]);
}

#[test]
fn the_embedded_store_keeps_every_rule() {
    let dir = temp_dir("kv-conformance-embedded");
    let store = embedded::open(&dir, Durability::DEFAULT).expect("open the store");
    check(
        &rt(),
        "embedded (our host)",
        Target::local(KvStore::Local(Arc::new(store))),
        &[],
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_redis_store_through_our_host_keeps_every_rule() {
    if !redis_or_skip() {
        return;
    }
    let redis = shared_redis();
    let rt = rt();
    let store = rt
        .block_on(RedisStore::open_with(
            &redis.url(),
            RedisOptions {
                prefix: format!("kvconformance:{}:", std::process::id()),
                ..RedisOptions::default()
            },
        ))
        .expect("open the Redis store");
    check(
        &rt,
        "Redis (our host)",
        Target::local(KvStore::Remote(Arc::new(store))),
        &[],
    );
}

#[test]
fn the_redis_cluster_through_our_host_keeps_every_rule() {
    if !redis_or_skip() {
        return;
    }
    let cluster = shared_cluster();
    let rt = rt();
    let store = rt
        .block_on(RedisClusterStore::open_with(
            &cluster.url(),
            RedisOptions {
                prefix: format!("kvconformance:{}:", std::process::id()),
                ..RedisOptions::default()
            },
        ))
        .expect("open the Redis Cluster store");
    check(
        &rt,
        "Redis Cluster, 3 primaries + 3 replicas (our host)",
        Target::local(KvStore::Remote(Arc::new(store))),
        &[],
    );
}

// ---------------------------------------------------------------------------------------
// Spin

#[test]
fn spin_with_its_sqlite_store_breaks_only_the_known_rules() {
    let Some(spin) = binary_or_skip() else { return };
    let app = start_probe(spin, "sqlite", None);
    check(
        &rt(),
        "Spin 4.0.2, default store (SQLite)",
        Target::Http(HttpClient::new(), app.base()),
        SPIN_SQLITE_BREAKS,
    );
}

#[test]
fn spin_with_redis_breaks_only_the_known_rules() {
    let Some(spin) = binary_or_skip() else { return };
    if !redis_or_skip() {
        return;
    }
    let redis = shared_redis();
    let config = format!(
        "[key_value_store.default]\ntype = \"redis\"\nurl = \"{}\"\n",
        redis.url()
    );
    let app = start_probe(spin, "redis", Some(config));
    check(
        &rt(),
        "Spin 4.0.2, Redis store",
        Target::Http(HttpClient::new(), app.base()),
        SPIN_REDIS_BREAKS,
    );
}

/// `spin up` running the probe (with `runtime_config`, if any) on a loopback port.
fn start_probe(spin: std::path::PathBuf, name: &str, runtime_config: Option<String>) -> SpinApp {
    let options = SpinOptions {
        binary: spin,
        runtime_config,
        files: vec![
            ("kvprobe.wasm".to_owned(), KVPROBE_WASM.to_vec()),
            (MANIFEST_FILE.to_owned(), SPIN_MANIFEST.as_bytes().to_vec()),
        ],
        variables: Vec::new(),
        start_timeout: Duration::from_secs(60),
    };
    SpinApp::start(&format!("kv-conformance-{name}"), &options)
        .unwrap_or_else(|e| panic!("spin up with the probe ({name}): {e:#}"))
}

/// The probe as a Spin application: every route, store `default`.
const SPIN_MANIFEST: &str = r#"spin_manifest_version = 2

[application]
name = "edgehook-kvprobe"
version = "0.1.0"

[[trigger.http]]
route = "/..."
component = "kvprobe"

[component.kvprobe]
source = "kvprobe.wasm"
key_value_stores = ["default"]
"#;
