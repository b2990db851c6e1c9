//! The `counters` bucket: the embedded store keeps the rate limits' counts in memory, off
//! its journal, and the limit still holds (a durable write per partner request cost the
//! list a tenth of its time).

use bytes::Bytes;
use edgehook_component::storage::keys::RATE_PREFIX;
use edgehook_runtime::embedded::{self, Durability, FjallStore};
use edgehook_runtime::store::{KvBackend, KvStore};
use edgehook_runtime::{HostEnv, Runtime};
use http_body_util::Full;
use std::collections::BTreeMap;
use std::sync::Arc;

fn request(method: &str, path: &str, token: &str) -> http::Request<Full<Bytes>> {
    edgehook_testkit::http::request(method, &format!("http://test{path}"), token, "")
}

/// `serve`'s environment over the embedded store: admin token `t`, 2 partner requests
/// a minute.
fn served(store: &Arc<FjallStore>) -> HostEnv {
    let config: BTreeMap<String, String> = [("admin_token", "t"), ("rate_limit_per_minute", "2")]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    HostEnv {
        kv: KvStore::Local(store.clone()),
        config: Arc::new(config),
        ..HostEnv::in_memory()
    }
}

/// The keys of `store` that start with `prefix`.
fn keys(store: &dyn KvBackend, prefix: &str) -> Vec<String> {
    let all = store.list_keys(None, usize::MAX).expect("keys");
    all.into_iter().filter(|k| k.starts_with(prefix)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rate_limits_counts_live_in_memory_beside_the_embedded_store_and_still_limit() {
    let dir = edgehook_testkit::temp_dir("counters");
    let store = Arc::new(embedded::open(&dir, Durability::Always).expect("store"));
    let rt = Runtime::embedded().expect("runtime");
    let env = served(&store);
    let issued = rt.handle(&env, request("POST", "/internal/v1/clients/acme/keys", "t"));
    let key = issued
        .await
        .expect("issue")
        .data_text("apiKey")
        .expect("apiKey");
    let mut statuses = Vec::new();
    for _ in 0..3 {
        let listed = rt.handle(&env, request("GET", "/v1/webhooks", &key)).await;
        statuses.push(listed.expect("list").status);
    }
    assert_eq!(statuses, [200, 200, 429], "the limit holds");
    let counters = store.counters().expect("the embedded store's counters");
    assert_eq!(
        keys(counters.as_ref(), RATE_PREFIX).len(),
        1,
        "acme's one minute"
    );
    assert_eq!(keys(store.as_ref(), RATE_PREFIX), Vec::<String>::new());
    // Not in the journal either: the reopened store has the API key, and no count.
    drop((env, store, counters));
    let store = Arc::new(embedded::open(&dir, Durability::Always).expect("reopened"));
    assert_eq!(keys(store.as_ref(), RATE_PREFIX), Vec::<String>::new());
    let listed = rt
        .handle(&served(&store), request("GET", "/v1/webhooks", &key))
        .await;
    assert_eq!(listed.expect("list").status, 200, "the minute restarts");
}
