//! In process, no sockets: API latency and instantiation against the empty component, and
//! the guest's exact work per request, in fuel.

use crate::measure::{percentile_us, timed};
use crate::setup::{
    create, create_many, env, event_request, issue_key, large_load, req, timed_request,
};
use crate::table::Row;
use anyhow::{Context as _, Result, ensure};
use bytes::Bytes;
use edgehook_component::{storage::directory, storage::keys::DUE_DIRECTORY};
use edgehook_runtime::store::{KvStore, MemoryStore};
use edgehook_runtime::{Baseline, Runtime};
use http_body_util::Full;
use std::sync::Arc;
use std::time::Duration;

/// In-process API latency (p50, p99) of create, list (50 subscriptions) and delete, beside
/// the empty component; and instantiate time of both.
pub async fn api_latency(n: usize) -> Result<Vec<Row>> {
    let rt = Runtime::embedded()?;
    let baseline = Baseline::new()?;
    let env = env(KvStore::Local(Arc::new(MemoryStore::new())));
    let key = issue_key(rt, &env, "bench").await?;
    let lister = issue_key(rt, &env, "lister").await?;
    create_many(rt, &env, &lister, "l", 50, "load.created").await?;
    // Warm up both (first calls fault in pages).
    for _ in 0..50 {
        baseline.handle(&env, req("GET", "/", "", "")).await?;
        rt.handle(&env, req("GET", "/healthz", "", "")).await?;
    }
    let empty = timed(n, |_| async {
        baseline
            .handle(&env, req("GET", "/", "", ""))
            .await
            .map(|_| ())
    })
    .await?;
    // The floor of this component: its smallest request (settings, the bucket, one store
    // read, a JSON answer) through the same path. What a create or list costs above it is
    // the work of the operation itself.
    let health = timed_request(rt, &env, n, 200, || req("GET", "/healthz", "", "")).await?;
    let created: std::cell::RefCell<Vec<String>> = std::cell::RefCell::default();
    let create_t = timed(n, |i| {
        let (env, key, created) = (&env, &key, &created);
        async move {
            let id = create(
                rt,
                env,
                key,
                &format!("https://c{i}.example.com/x"),
                "load.updated",
            )
            .await?;
            created.borrow_mut().push(id);
            Ok(())
        }
    })
    .await?;
    let list_t = timed_request(rt, &env, n, 200, || {
        req("GET", "/v1/webhooks?limit=50", &lister, "")
    })
    .await?;
    let ids = created.into_inner();
    let delete_t = timed(n, |i| {
        let (env, key, id) = (&env, &key, ids[i].clone());
        async move {
            let resp = rt
                .handle(env, req("DELETE", &format!("/v1/webhooks/{id}"), key, ""))
                .await?;
            ensure!(resp.status == 200, "delete: {}", resp.status);
            Ok(())
        }
    })
    .await?;
    let (e50, e99) = (percentile_us(&empty, 0.5), percentile_us(&empty, 0.99));
    let mut rows = Vec::new();
    rows.push(Row {
        name: "in-process GET /healthz p50 (vs empty handler)".into(),
        value: percentile_us(&health, 0.5),
        unit: "us",
        baseline: Some(e50),
        target: "- (this component's floor)".into(),
        met: None,
    });
    for (name, t) in [
        ("create", &create_t),
        ("list (50 subscriptions)", &list_t),
        ("delete", &delete_t),
    ] {
        for (p, label, base) in [(0.5, "p50", e50), (0.99, "p99", e99)] {
            // Reported, not judged: the API is judged against `serve`'s own `/healthz` (the
            // serve section), which reads the store and the settings as every request does.
            rows.push(Row::reported(
                format!("in-process {name} {label} (vs empty handler)"),
                percentile_us(t, p),
                "us",
                Some(base),
            ));
        }
    }
    let inst = timed(n * 2, |_| rt.instantiate_only(&env)).await?;
    let inst_empty = timed(n * 2, |_| baseline.instantiate_only(&env)).await?;
    let mean = |t: &[Duration]| {
        t.iter().map(Duration::as_secs_f64).sum::<f64>() / t.len().max(1) as f64 * 1e6
    };
    rows.push(Row {
        name: "instantiate with pooling, mean (vs empty component)".into(),
        value: mean(&inst),
        unit: "us",
        baseline: Some(mean(&inst_empty)),
        target: "<= 50 us".into(),
        met: Some(mean(&inst) <= 50.0),
    });
    Ok(rows)
}

/// The guest's own work per request, in fuel (wasmtime's count of the WebAssembly
/// operators executed), beside the empty component's: healthz, create, list (50), delete,
/// and one event published to one subscription (the ingest and its attempt 1, sent to a
/// simulated endpoint answering 200). Fuel does not move with the machine's speed or load,
/// so two builds compare exactly; it leaves out what the host does (hyper, instantiation,
/// the host's side of each call), which the latency and CPU rows measure. Beside it, the
/// guest's calls into the host (each pays the component model's lifting and lowering) and
/// the store operations among them, exact too. Last, the store operations of one event at
/// fan-out 16 with its 16 attempts (the per-delivery path; its fuel and calls are not exact).
pub async fn guest_fuel() -> Result<Vec<Row>> {
    /// The fan-out of the widest event measured: one batch of the default delivery settings.
    const FAN_OUT: usize = 16;
    let rt = Runtime::metered(edgehook_runtime::COMPONENT_WASM)?;
    let baseline = Baseline::metered()?;
    let clock = edgehook_sim::VirtualClock::new(1_767_225_600_000);
    let net = edgehook_sim::SimNet::new(clock.clone());
    let store = Arc::new(MemoryStore::new());
    let mut env = env(KvStore::Local(store.clone()));
    env.outbound = Arc::new(net.clone());
    // Virtual time: every event falls in the same second, so the rows are exact.
    env.clock = Some(clock.clocks());
    let key = issue_key(&rt, &env, "bench").await?;
    let lister = issue_key(&rt, &env, "lister").await?;
    create_many(&rt, &env, &lister, "l", 50, "load.created").await?;
    let hook = "https://hook.example.com/in";
    net.endpoint(hook, []);
    create(&rt, &env, &key, hook, "load.status_changed").await?;
    let (_, empty) = baseline
        .handle_metered(&env, req("GET", "/", "", ""))
        .await?;
    // Each request's fuel, and its store operations (each a host call; with `--kv redis` a
    // round trip).
    let fuel = |r: http::Request<Full<Bytes>>, want: u16| {
        let (rt, env, store) = (&rt, &env, &store);
        async move {
            let ops = store.ops();
            let (resp, work) = rt.handle_metered(env, r).await?;
            ensure!(resp.status == want, "wanted {want}, got {}", resp.status);
            Ok::<_, anyhow::Error>((resp, (work, store.ops() - ops)))
        }
    };
    let (_, health) = fuel(req("GET", "/healthz", "", ""), 200).await?;
    let body = r#"{"url":"https://f.example.com/x","eventTypes":["load.updated"]}"#;
    let (created, create) = fuel(req("POST", "/v1/webhooks", &key, body), 201).await?;
    let id = created.json()["data"]["id"]
        .as_str()
        .context("id")?
        .to_owned();
    let (_, list) = fuel(req("GET", "/v1/webhooks?limit=50", &lister, ""), 200).await?;
    let delete_path = format!("/v1/webhooks/{id}");
    let (_, delete) = fuel(req("DELETE", &delete_path, &key, ""), 200).await?;
    let sent = net.received().len();
    let (_, publish) = fuel(event_request(), 202).await?;
    ensure!(
        net.received().len() == sent + 1,
        "the event's attempt 1 was not sent in its invocation"
    );
    // The next event of the same second (its second already listed, as for most events
    // under load), then one more with 360 other seconds listed in the due directory, as under
    // steady load (a second stays for its minute of grace; retries add seconds ahead): the
    // two must cost the same, the directory searched rather than parsed.
    let (_, publish_again) = fuel(event_request(), 202).await?;
    let listed = env
        .kv
        .get(&DUE_DIRECTORY)
        .await?
        .context("the due directory")?;
    let mut dir = directory::decode(&listed)?;
    let second = clock.now_ms() / 1000;
    dir.extend((1..=360).map(|s| (second - 400 + s, 0)));
    env.kv.set(&DUE_DIRECTORY, &directory::encode(&dir)).await?;
    let (_, publish_queued) = fuel(event_request(), 202).await?;
    // A load the size of a real one (forty stops), for a type nobody listens to now (the one
    // subscription to it was deleted above): validating, hashing and storing it.
    let load = large_load();
    let mut big = req("POST", "/internal/v1/events", "bench", &load);
    big.headers_mut().insert(
        "x-service-event",
        http::HeaderValue::from_static("load.updated"),
    );
    let (_, ingest_large) = fuel(big, 202).await?;
    let large_name = format!(
        "ingest, {:.1} KiB load, no listener",
        load.len() as f64 / 1024.0
    );
    // One event to 16 subscriptions, one batch (`max_concurrency`), every attempt sent in
    // its invocation: the per-delivery path the delivery and latency targets scale with.
    let fan = issue_key(&rt, &env, "fan").await?;
    for i in 0..FAN_OUT {
        let url = format!("https://hook.example.com/fan{i}");
        net.endpoint(&url, []);
        crate::setup::create(&rt, &env, &fan, &url, "load.updated").await?;
    }
    let sent = net.received().len();
    let mut wide = event_request();
    wide.headers_mut().insert(
        "x-service-event",
        http::HeaderValue::from_static("load.updated"),
    );
    let (_, publish_wide) = fuel(wide, 202).await?;
    ensure!(
        net.received().len() == sent + FAN_OUT,
        "the fan-out {FAN_OUT} event's attempts were not all sent in its invocation"
    );
    let wide_name = format!("event, fan-out {FAN_OUT} (ingest + {FAN_OUT} attempts)");
    let requests = [
        ("GET /healthz", health),
        ("create", create),
        ("list (50 subscriptions)", list),
        ("delete", delete),
        ("event, fan-out 1 (ingest + attempt 1)", publish),
        ("next event of its second, fan-out 1", publish_again),
        ("next event, 360 more seconds queued", publish_queued),
        (&large_name, ingest_large),
    ];
    let fuel_rows = requests.iter().map(|(name, (work, _))| Row {
        name: format!("guest fuel per {name} (vs empty handler)"),
        value: work.fuel as f64,
        unit: "fuel",
        baseline: Some(empty.fuel as f64),
        target: "- (exact; compares builds)".into(),
        met: None,
    });
    let call_rows = requests.iter().map(|(name, (work, _))| Row {
        name: format!("host calls per {name} (vs empty handler)"),
        value: work.host_calls as f64,
        unit: "calls",
        baseline: Some(empty.host_calls as f64),
        target: "- (exact; compares builds)".into(),
        met: None,
    });
    let ops_rows = requests.iter().map(|(name, (_, ops))| Row {
        name: format!("store operations per {name}"),
        value: *ops as f64,
        unit: "ops",
        baseline: None,
        target: "- (exact; compares builds)".into(),
        met: None,
    });
    // The wide event's store operations only: its fuel and host calls depend on how many
    // responses each `poll` finds ready (a round is a poll and a clock read more), which
    // the scheduling of the simulated endpoints decides, so they are not exact.
    let wide_row = Row {
        name: format!("store operations per {wide_name}"),
        value: publish_wide.1 as f64,
        unit: "ops",
        baseline: None,
        target: "- (exact; compares builds)".into(),
        met: None,
    };
    Ok(fuel_rows
        .chain(call_rows)
        .chain(ops_rows)
        .chain(std::iter::once(wide_row))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Fuel counts the guest's work exactly: the same request uses the same fuel every time,
    /// a request doing more work uses more, the empty component almost none, and a runtime
    /// that does not meter says so rather than reporting a number.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn fuel_counts_the_guests_work_exactly() {
        let rt = Runtime::metered(edgehook_runtime::COMPONENT_WASM).expect("metered runtime");
        let env = env(KvStore::Local(Arc::new(MemoryStore::new())));
        let health = || req("GET", "/healthz", "", "");
        let (resp, first) = rt.handle_metered(&env, health()).await.expect("healthz");
        assert_eq!(resp.status, 200);
        let (_, again) = rt.handle_metered(&env, health()).await.expect("healthz");
        assert_eq!(
            first, again,
            "the same request, the same fuel and host calls"
        );
        let key = issue_key(&rt, &env, "fuel").await.expect("key");
        let body = r#"{"url":"https://f.example.com/x","eventTypes":["load.updated"]}"#;
        let (resp, create) = rt
            .handle_metered(&env, req("POST", "/v1/webhooks", &key, body))
            .await
            .expect("create");
        assert_eq!(resp.status, 201);
        assert!(
            create.fuel > first.fuel && create.host_calls > first.host_calls,
            "a create ({create:?}) does more than healthz ({first:?})"
        );
        let (_, empty) = Baseline::metered()
            .expect("metered baseline")
            .handle_metered(&env, health())
            .await
            .expect("empty");
        assert!(
            0 < empty.fuel && empty.fuel * 10 < first.fuel,
            "empty {empty:?}, healthz {first:?}"
        );
        // The empty component reads its request and writes its answer; healthz also reads
        // the settings and the store.
        assert!(
            0 < empty.host_calls && empty.host_calls < first.host_calls,
            "empty {empty:?}, healthz {first:?}"
        );
        let unmetered = Runtime::new(edgehook_runtime::COMPONENT_WASM).expect("runtime");
        assert!(unmetered.handle_metered(&env, health()).await.is_err());
    }

    /// Under steady load the due directory lists every second of the last minute and more
    /// (retries add seconds ahead). A publish into a second it already lists must cost the
    /// same however many it lists: the component searches the record, it does not parse it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_publish_costs_the_same_whatever_the_due_directory_lists() {
        let rt = Runtime::metered(edgehook_runtime::COMPONENT_WASM).expect("metered runtime");
        let clock = edgehook_sim::VirtualClock::new(1_767_225_600_000);
        let net = edgehook_sim::SimNet::new(clock.clone());
        let mut env = env(KvStore::Local(Arc::new(MemoryStore::new())));
        env.clock = Some(clock.clocks());
        env.outbound = Arc::new(net.clone());
        let key = issue_key(&rt, &env, "dir").await.expect("key");
        let hook = "https://hook.example.com/in";
        net.endpoint(hook, []);
        create(&rt, &env, &key, hook, "load.updated")
            .await
            .expect("subscription");
        let publish = || {
            let mut r = req(
                "POST",
                "/internal/v1/events",
                "bench",
                r#"{"id":"L-1","status":"ASSIGNED"}"#,
            );
            r.headers_mut().insert(
                "x-service-event",
                http::HeaderValue::from_static("load.updated"),
            );
            rt.handle_metered(&env, r)
        };
        let (resp, _) = publish().await.expect("first event lists its second");
        assert_eq!(resp.status, 202);
        let (_, one_listed) = publish().await.expect("second event");
        let mut dir = directory::decode(
            &env.kv
                .get(&DUE_DIRECTORY)
                .await
                .expect("store")
                .expect("the directory"),
        )
        .expect("readable");
        assert_eq!(dir.len(), 1, "{dir:?}");
        dir.extend((0..2000).map(|s| (1_767_000_000 + 3 * s, 5)));
        env.kv
            .set(&DUE_DIRECTORY, &directory::encode(&dir))
            .await
            .expect("store");
        let (resp, many_listed) = publish().await.expect("third event");
        assert_eq!(resp.status, 202);
        // Within 2 %: parsing the directory would cost tens of fuel a listed second (over
        // 40,000 for these 2,000, more than 20 %); what is measured (about 1 fuel a listed
        // second, 2,128 in all, with the secrets key's settings) is not a per-entry parse.
        let (one_listed, many_listed) = (one_listed.fuel, many_listed.fuel);
        assert!(
            many_listed.abs_diff(one_listed) * 50 < one_listed,
            "1 second listed: {one_listed} fuel; 2,001: {many_listed}"
        );
        assert_eq!(net.received().len(), 3, "each event's attempt 1 was sent");
    }
}
