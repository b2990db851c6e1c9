//! The `redis` section: the API and `serve` over a Redis store, where every store
//! operation is a network round trip, against one round trip measured in the same run.

use crate::load::load;
use crate::measure::{percentile_us, timed};
use crate::setup::{
    create, create_many, durable_store, env, event_request, issue_key, req, timed_request,
};
use crate::table::Row;
use anyhow::{Context as _, Result, ensure};
use edgehook_runtime::Runtime;
use edgehook_runtime::store::{KvStore, RemoteKv};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A [`RedisStore`](edgehook_runtime::redisstore::RedisStore) at `url` whose keys go under `prefix`.
async fn redis_store(
    url: &str,
    prefix: &str,
) -> Result<Arc<edgehook_runtime::redisstore::RedisStore>> {
    let store = edgehook_runtime::redisstore::RedisStore::open_with(
        url,
        edgehook_runtime::redisstore::RedisOptions {
            prefix: prefix.to_owned(),
            ..Default::default()
        },
    )
    .await
    .map_err(|e| anyhow::anyhow!(e))?;
    Ok(Arc::new(store))
}

/// p50 of `n` reads of one key through `store`: one round trip.
async fn round_trip(store: &dyn RemoteKv, n: usize) -> Result<f64> {
    let times = timed(n, |_| async {
        store
            .get("rtt")
            .await
            .map(|_| ())
            .map_err(|e| anyhow::anyhow!(e))
    })
    .await?;
    Ok(percentile_us(&times, 0.5))
}

/// Requests/s of `GET /v1/webhooks` (a client of 10 subscriptions) at `edgehook serve`'s
/// server on `store`.
async fn serve_rps(store: KvStore, connections: usize, duration: Duration) -> Result<f64> {
    let (port, list) = crate::load::serve_webhooks(&env(store)).await?;
    Ok(load(port, connections, duration, usize::MAX, list)
        .await?
        .rps)
}

/// A TCP relay on a free loopback port to `target`, holding everything it relays for `delay`
/// in each direction, in order: a store in another zone, on loopback.
async fn delay_line(target: std::net::SocketAddr, delay: Duration) -> Result<u16> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            tokio::spawn(async move {
                let Ok(server) = tokio::net::TcpStream::connect(target).await else {
                    return;
                };
                let (_, _) = (client.set_nodelay(true), server.set_nodelay(true));
                let (client_read, client_write) = client.into_split();
                let (server_read, server_write) = server.into_split();
                tokio::join!(
                    delayed(client_read, server_write, delay),
                    delayed(server_read, client_write, delay)
                );
            });
        }
    });
    Ok(port)
}

/// Copies `from` to `to`, each chunk written `delay` after it was read.
async fn delayed(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    delay: Duration,
) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let (chunks, mut queued) = tokio::sync::mpsc::unbounded_channel();
    let reader = async move {
        let mut buf = vec![0; 64 * 1024];
        while let Ok(n @ 1..) = from.read(&mut buf).await {
            if chunks
                .send((tokio::time::Instant::now() + delay, buf[..n].to_vec()))
                .is_err()
            {
                break;
            }
        }
    };
    let writer = async move {
        while let Some((due, chunk)) = queued.recv().await {
            tokio::time::sleep_until(due).await;
            if to.write_all(&chunk).await.is_err() {
                break;
            }
        }
    };
    tokio::join!(reader, writer);
}

/// `url` with its host and port replaced by `127.0.0.1:{port}` (password and db kept).
fn redis_url_at(url: &str, port: u16) -> Option<String> {
    let (scheme, rest) = url.split_once("://")?;
    let (authority, path) = rest.find('/').map_or((rest, ""), |i| rest.split_at(i));
    let userinfo = authority.rsplit_once('@').map(|(u, _)| format!("{u}@"));
    Some(format!(
        "{scheme}://{}127.0.0.1:{port}{path}",
        userinfo.unwrap_or_default()
    ))
}

/// The API and publish over Redis (`--kv redis://...`, as a deployment sharing one store
/// runs), where every store operation is a network round trip: create, list (50) and a
/// fan-out-1 publish (to its 202; its attempt 1, to a simulated endpoint, finishes before
/// the next publish, untimed), p50, each against one round trip (a `GET` of one key through
/// the same store) measured in the same run. Then `edgehook serve`'s throughput for
/// `GET /v1/webhooks` over this Redis against the same over the embedded store, and over the
/// same Redis behind a delay line (each way 0.5 ms, rounded up to tokio's millisecond timer:
/// a store a few milliseconds away, its round trip measured) against the direct one. Needs a
/// Redis on TCP: `EDGEHOOK_BENCH_REDIS=redis://127.0.0.1:6379`; the keys go under a prefix
/// of their own, removed afterwards.
pub async fn redis_latency(
    url: &str,
    n: usize,
    duration: Duration,
    connections: usize,
) -> Result<Vec<Row>> {
    let prefix = format!("edgehook-bench-{}:", std::process::id());
    let store = redis_store(url, &prefix).await?;
    let rt = Runtime::embedded()?;
    let net = edgehook_sim::SimNet::new(edgehook_sim::VirtualClock::new(0));
    let hook = "https://hook.example.com/in";
    net.endpoint(hook, []);
    let mut env = env(KvStore::Remote(store.clone()));
    env.outbound = Arc::new(net);
    let key = issue_key(rt, &env, "bench").await?;
    let lister = issue_key(rt, &env, "lister").await?;
    create_many(rt, &env, &lister, "l", 50, "load.created").await?;
    create(rt, &env, &key, hook, "load.status_changed").await?;
    let rtt = round_trip(store.as_ref(), n).await?;
    let body = r#"{"url":"https://f.example.com/x","eventTypes":["load.updated"]}"#;
    let create =
        timed_request(rt, &env, n, 201, || req("POST", "/v1/webhooks", &key, body)).await?;
    let list = timed_request(rt, &env, n, 200, || {
        req("GET", "/v1/webhooks?limit=50", &lister, "")
    })
    .await?;
    // To the 202; attempt 1 then finishes before the next publish, outside the timing.
    let mut publish = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let (resp, rest) = rt.handle_detached(&env, event_request()).await?;
        publish.push(t.elapsed());
        ensure!(resp.status == 202, "publish: {}", resp.status);
        rest.finish().await?;
    }
    publish.sort_unstable();
    // Throughput, each server with a keyspace of its own.
    let embedded = serve_rps(durable_store("redis-embedded")?, connections, duration).await?;
    let direct = redis_store(url, &format!("{prefix}direct:")).await?;
    let on_redis = serve_rps(KvStore::Remote(direct), connections, duration).await?;
    let target = match redis::Client::open(url)?.get_connection_info().addr() {
        redis::ConnectionAddr::Tcp(host, port) => tokio::net::lookup_host((host.as_str(), *port))
            .await?
            .next()
            .context("the Redis host resolves to no address")?,
        _ => anyhow::bail!("the redis section needs a Redis on TCP"),
    };
    let far_port = delay_line(target, Duration::from_micros(500)).await?;
    let far_url = redis_url_at(url, far_port).context("a redis:// URL")?;
    let far = redis_store(&far_url, &format!("{prefix}far:")).await?;
    let far_rtt = round_trip(far.as_ref(), n.min(200)).await?;
    let on_far = serve_rps(KvStore::Remote(far), connections, duration).await?;
    // Leave the server as it was found.
    loop {
        let keys = store
            .list_keys(None, 1000)
            .await
            .map_err(|e| anyhow::anyhow!(e))?;
        if keys.is_empty() {
            break;
        }
        for k in keys {
            store.delete(&k).await.map_err(|e| anyhow::anyhow!(e))?;
        }
    }
    let mut rows = vec![Row {
        name: "redis: one store round trip (GET), p50".into(),
        value: rtt,
        unit: "us",
        baseline: None,
        target: "-".into(),
        met: None,
    }];
    for (name, times) in [
        ("create", create),
        ("list (50 subscriptions)", list),
        ("publish, fan-out 1 (to the 202)", publish),
    ] {
        rows.push(Row {
            name: format!("redis: {name}, p50 (vs one round trip)"),
            value: percentile_us(&times, 0.5),
            unit: "us",
            baseline: Some(rtt),
            target: "- (round trips per call)".into(),
            met: None,
        });
    }
    rows.extend([
        Row {
            name: format!("redis: serve GET /v1/webhooks, {connections} conns (vs embedded store)"),
            value: on_redis,
            unit: "r/s",
            baseline: Some(embedded),
            target: "-".into(),
            met: None,
        },
        Row {
            name: "redis via delay line: one round trip (GET), p50 (vs direct)".into(),
            value: far_rtt,
            unit: "us",
            baseline: Some(rtt),
            target: "-".into(),
            met: None,
        },
        Row {
            name: format!(
                "redis via delay line: serve GET /v1/webhooks, {connections} conns (vs direct)"
            ),
            value: on_far,
            unit: "r/s",
            baseline: Some(on_redis),
            target: "-".into(),
            met: None,
        },
    ]);
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_delay_lines_url_keeps_all_but_the_address() {
        assert_eq!(
            redis_url_at("redis://:pw@cache.internal:6379/2", 9).as_deref(),
            Some("redis://:pw@127.0.0.1:9/2")
        );
        assert_eq!(
            redis_url_at("redis://h:1", 9).as_deref(),
            Some("redis://127.0.0.1:9")
        );
        assert_eq!(redis_url_at("not a url", 9), None);
    }
}
