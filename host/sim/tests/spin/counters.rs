//! The `counters` bucket on Spin (`docs/deploy.md`): an operator who adds the label to the
//! component's `key_value_stores` and gives it a store in the runtime config (Redis here) has
//! the rate limits' counts kept there, and the limit still holds. The walks run the shipped
//! manifest, which declares only `default`: there Spin refuses the label and the counts share
//! the store.

use super::harness::{ADMIN, spin_and_redis};
use edgehook_component::model::ids::ClientId;
use edgehook_component::storage::keys;
use edgehook_runtime::redisstore::{RedisOptions, RedisStore};
use edgehook_runtime::store::RemoteKv;
use edgehook_sim::spin::{self, SpinOptions};
use edgehook_testkit::http::{HttpClient, request};
use edgehook_testkit::rt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

#[test]
fn spin_keeps_the_rate_limits_counts_in_a_counters_store_when_the_operator_gives_one() {
    let Some((binary, redis)) = spin_and_redis() else {
        return;
    };
    let options = SpinOptions {
        binary,
        runtime_config: Some(format!(
            "[key_value_store.counters]\ntype = \"redis\"\nurl = \"{}\"\n",
            redis.url()
        )),
        files: Vec::new(),
        variables: vec![
            ("admin_token".into(), ADMIN.into()),
            ("seal_key".into(), super::harness::SEAL_KEY.into()),
            ("rate_limit_per_minute".into(), "2".into()),
        ],
        start_timeout: Duration::from_secs(120),
    };
    let declared = r#"key_value_stores = ["default"]"#;
    let app = spin::start_edited("counters", &[], &options, |manifest| {
        assert_eq!(
            manifest.matches(declared).count(),
            1,
            "spin.toml declares default only"
        );
        manifest.replace(declared, r#"key_value_stores = ["default", "counters"]"#)
    })
    .expect("spin up");
    let rt = rt();
    let client = HttpClient::new();
    let call = |method: &str, path: &str, token: &str| {
        let url = format!("{}{path}", app.base());
        let (head, body) = rt
            .block_on(client.send(request(method, &url, token, "")))
            .expect("an answer");
        let json: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
        (head.status.as_u16(), json)
    };
    let (status, issued) = call("POST", "/internal/v1/clients/acme/keys", ADMIN);
    assert_eq!(status, 201, "{issued}");
    let key = issued["data"]["apiKey"]
        .as_str()
        .expect("apiKey")
        .to_owned();
    let minute = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("time")
        .as_secs()
        / 60;
    let statuses: Vec<u16> = (0..3)
        .map(|_| call("GET", "/v1/webhooks", &key).0)
        .collect();
    assert_eq!(statuses, [200, 200, 429], "{}", app.log_tail(20));
    // The count is in Redis, the counters store, under the component's own key.
    let raw = RedisOptions {
        prefix: String::new(),
        ..RedisOptions::default()
    };
    let store = rt
        .block_on(RedisStore::open_with(&redis.url(), raw))
        .expect("redis");
    let counted: Vec<Vec<u8>> = [minute, minute + 1]
        .iter()
        .filter_map(|m| {
            let acme = ClientId::trusted("acme");
            rt.block_on(store.get(&keys::rate(&acme, *m))).expect("get")
        })
        .collect();
    assert_eq!(counted, [b"3".to_vec()], "{}", app.log_tail(20));
}
