//! Several `edgehook serve` processes on one Redis (`--kv redis://...`), and the Redis backend's
//! compare-and-swap on its own. Each test process starts its own `redis-server` on a free
//! loopback port (no persistence, a temporary working directory) and stops it when the last
//! test using it is done. `redis-server` must be installed (`.ci/run` installs Debian's).
//! Everything talks over loopback only, and every wait is a condition with a deadline.

use edgehook_component::delivery::delivery_id;
use edgehook_host::cli::Remote;
use edgehook_host::redisstore::{RedisOptions, RedisStore};
use edgehook_host::store::{RemoteKv, parse_counter};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use crate::common;

use common::*;

// ---------------------------------------------------------------------------------------
// redis-server (started by `common::start_redis`)

/// Sends one command on a new connection; returns the first line of the reply.
fn redis_command(port: u16, args: &[&str]) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect to redis");
    let mut req = format!("*{}\r\n", args.len());
    for a in args {
        req.push_str(&format!("${}\r\n{a}\r\n", a.len()));
    }
    s.write_all(req.as_bytes()).expect("send");
    let mut line = String::new();
    BufReader::new(s).read_line(&mut line).expect("reply");
    line.trim_end().to_owned()
}

/// One redis-server for the tests of this process that run at the same time; it stops when
/// the last of them drops its handle.
pub(crate) fn shared_redis() -> Arc<RedisServer> {
    static SHARED: Mutex<Weak<RedisServer>> = Mutex::new(Weak::new());
    let mut slot = SHARED.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(server) = slot.upgrade() {
        return server;
    }
    let server = Arc::new(start_redis());
    *slot = Arc::downgrade(&server);
    server
}

// ---------------------------------------------------------------------------------------
// edgehook processes (as in process.rs)

fn call(
    rt: &tokio::runtime::Runtime,
    remote: &Remote,
    method: &str,
    path: &str,
    body: Option<Vec<u8>>,
    headers: &[(String, String)],
) -> (u16, Value) {
    let (status, text) = rt
        .block_on(remote.call(method, path, body, headers))
        .unwrap_or_else(|e| panic!("{method} {path}: {e:#}"));
    let json = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}: {text}"));
    (status, json)
}

// ---------------------------------------------------------------------------------------
// tests

#[test]
fn redis_store_compare_and_swap_is_atomic_and_binary_safe() {
    if !redis_or_skip() {
        return;
    }
    let redis = shared_redis();
    rt().block_on(compare_and_swap_on(&redis));
}

async fn compare_and_swap_on(redis: &RedisServer) {
    // A user of its own, so its connections can be killed without touching the other test's.
    let (user, password) = ("castest", "s3cret-pw");
    let reply = redis_command(
        redis.port,
        &[
            "ACL",
            "SETUSER",
            user,
            "on",
            &format!(">{password}"),
            "allkeys",
            "+@all",
        ],
    );
    assert_eq!(reply, "+OK");
    let url = format!("redis://{user}:{password}@127.0.0.1:{}", redis.port);
    let prefix = format!("castest:{}:", std::process::id());
    let store = RedisStore::open_with(
        &url,
        RedisOptions {
            prefix: prefix.clone(),
            ..RedisOptions::default()
        },
    )
    .await
    .expect("open");

    // Expected absent: only written when the key does not exist.
    assert_eq!(store.compare_and_swap("k", None, b"1").await, Ok(true));
    assert_eq!(store.compare_and_swap("k", None, b"2").await, Ok(false));
    assert_eq!(store.get("k").await, Ok(Some(b"1".to_vec())));
    // Present: mismatch leaves it, match swaps.
    assert_eq!(
        store.compare_and_swap("k", Some(b"0"), b"2").await,
        Ok(false)
    );
    assert_eq!(
        store.compare_and_swap("k", Some(b"1"), b"2").await,
        Ok(true)
    );
    assert_eq!(store.get("k").await, Ok(Some(b"2".to_vec())));
    // An empty value is not an absent one, either way round.
    assert_eq!(
        store.compare_and_swap("e", Some(b""), b"x").await,
        Ok(false)
    );
    assert_eq!(store.get("e").await, Ok(None));
    store.set("e", b"").await.expect("set empty");
    assert_eq!(store.compare_and_swap("e", None, b"x").await, Ok(false));
    assert_eq!(store.compare_and_swap("e", Some(b""), b"x").await, Ok(true));
    // Binary values: compared byte for byte, NUL and non-UTF-8 bytes included.
    let v1: &[u8] = b"a\0b\xff\x00";
    let v2: &[u8] = b"a\0c\xff\x00";
    assert_eq!(store.compare_and_swap("bin", None, v1).await, Ok(true));
    assert_eq!(store.get("bin").await, Ok(Some(v1.to_vec())));
    assert_eq!(
        store.compare_and_swap("bin", Some(b"a"), v2).await,
        Ok(false)
    );
    assert_eq!(
        store.compare_and_swap("bin", Some(b"a\0b\xff"), v2).await,
        Ok(false)
    );
    assert_eq!(store.compare_and_swap("bin", Some(v2), v1).await, Ok(false));
    assert_eq!(store.compare_and_swap("bin", Some(v1), v2).await, Ok(true));
    assert_eq!(store.get("bin").await, Ok(Some(v2.to_vec())));

    // Counters are decimal, as the other backends keep them.
    assert_eq!(store.increment("n", 5).await, Ok(5));
    assert_eq!(store.increment("n", -2).await, Ok(3));
    let raw = store.get("n").await.expect("get").expect("present");
    assert_eq!(parse_counter("n", Some(&raw)), Ok(3));
    assert!(store.increment("bin", 1).await.is_err(), "not a counter");

    // get_many, delete, list_keys in order after a cursor, only under the prefix.
    assert_eq!(
        store
            .get_many(&["k".into(), "missing".into(), "n".into()])
            .await,
        Ok(vec![Some(b"2".to_vec()), None, Some(b"3".to_vec())])
    );
    assert_eq!(store.get_many(&[]).await, Ok(vec![]));
    store.delete("e").await.expect("delete");
    store.delete("e").await.expect("delete of a missing key");
    let other = RedisStore::open_with(
        &redis.url(),
        RedisOptions {
            prefix: format!("{prefix}x"),
            ..RedisOptions::default()
        },
    )
    .await
    .expect("open");
    other.set("zzz", b"").await.expect("set");
    assert_eq!(
        store.list_keys(None, 2).await,
        Ok(vec!["bin".into(), "k".into()])
    );
    assert_eq!(
        store.list_keys(Some("k"), 10).await,
        Ok(vec!["n".into(), "xzzz".into()]),
        "a longer prefix is a key of ours, as it would be in a shared keyspace"
    );
    assert_eq!(other.list_keys(None, 10).await, Ok(vec!["zzz".into()]));

    // Concurrent compare-and-swap loops from several tasks lose no update.
    let threads = 8;
    let rounds = 50;
    let store = std::sync::Arc::new(store);
    let loops: Vec<_> = (0..threads)
        .map(|_| {
            let store = store.clone();
            tokio::spawn(async move {
                for _ in 0..rounds {
                    loop {
                        let seen = store.get("c").await.expect("get");
                        let n = parse_counter("c", seen.as_ref()).expect("counter");
                        let next = (n + 1).to_string();
                        if store
                            .compare_and_swap("c", seen.as_deref(), next.as_bytes())
                            .await
                            .expect("cas")
                        {
                            break;
                        }
                    }
                }
            })
        })
        .collect();
    for l in loops {
        l.await.expect("task");
    }
    let total = parse_counter("c", store.get("c").await.expect("get").as_ref()).expect("counter");
    assert_eq!(total, threads * rounds);

    // Broken connections are replaced: kill the store's connections, reads still work and
    // so does the compare-and-swap after them.
    let killed = redis_command(redis.port, &["CLIENT", "KILL", "USER", user]);
    assert!(killed.starts_with(':') && killed != ":0", "{killed}");
    assert_eq!(store.get("k").await, Ok(Some(b"2".to_vec())));
    assert_eq!(
        store.compare_and_swap("k", Some(b"2"), b"3").await,
        Ok(true)
    );

    // A wrong password: the message names the server, never the password.
    let wrong = RedisStore::open(&format!(
        "redis://{user}:wrong-{password}@127.0.0.1:{}",
        redis.port
    ))
    .await
    .expect_err("wrong password");
    assert!(
        !wrong.0.contains(password) && wrong.0.contains("127.0.0.1"),
        "{wrong}"
    );
    println!("a wrong password reads: {wrong}");
}

#[test]
fn two_instances_on_one_redis_share_subscriptions_and_deliveries() {
    if !redis_or_skip() {
        return;
    }
    let started = Instant::now();
    let redis = shared_redis();
    let rt = rt();
    let recv = receiver(&rt);
    let token = format!("admin-token-{}", std::process::id());
    let url = redis.url();
    let start = |name: &str| {
        let dir = temp_dir(name);
        let args = [
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--allow-http",
            "--allow-private-targets",
            "--kv",
            &url,
            "--admin-token",
            &token,
            "--set",
            "attempt_timeout_ms=5000",
        ];
        let mut proc = Proc::start(&args, &dir);
        let base = format!("http://{}", proc.address());
        (proc, base, dir)
    };
    let (mut a, base_a, _dir_a) = start("redis-a");
    let (mut b, base_b, _dir_b) = start("redis-b");
    let op_a = Remote::new(&base_a, &token).expect("client");
    let op_b = Remote::new(&base_b, &token).expect("client");

    // A key issued through A, subscriptions created through A, listed through B.
    let (status, issued) = call(
        &rt,
        &op_a,
        "POST",
        "/internal/v1/clients/acme/keys",
        None,
        &[],
    );
    assert_eq!(status, 201, "{issued}");
    let key = issued["data"]["apiKey"]
        .as_str()
        .expect("apiKey")
        .to_owned();
    let partner_a = Remote::new(&base_a, &key).expect("client");
    let partner_b = Remote::new(&base_b, &key).expect("client");
    let json = [("content-type".to_owned(), "application/json".to_owned())];
    let port = recv.port;
    let mut subs = Vec::new();
    for i in 0..4 {
        let body =
            format!(r#"{{"url":"http://127.0.0.1:{port}/s{i}","eventTypes":["load.updated"]}}"#);
        let (status, out) = call(
            &rt,
            &partner_a,
            "POST",
            "/v1/webhooks",
            Some(body.into_bytes()),
            &json,
        );
        assert_eq!(status, 201, "{out}");
        subs.push(out["data"]["id"].as_str().expect("id").to_owned());
    }
    let (status, listed) = call(&rt, &partner_b, "GET", "/v1/webhooks", None, &[]);
    assert_eq!(status, 200, "{listed}");
    let seen_by_b: BTreeSet<String> = listed["data"]
        .as_array()
        .expect("data")
        .iter()
        .filter_map(|s| s["id"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(
        seen_by_b,
        subs.iter().cloned().collect::<BTreeSet<_>>(),
        "B lists what A created"
    );

    // Events published alternately through A and B.
    let ingest = [
        json[0].clone(),
        ("x-service-event".to_owned(), "load.updated".to_owned()),
    ];
    let events = 50;
    let mut expected = BTreeSet::new();
    for n in 0..events {
        let via = if n % 2 == 0 { &op_a } else { &op_b };
        let body = format!(r#"{{"id":"L{n}","status":"IN_TRANSIT"}}"#).into_bytes();
        let (status, out) = call(&rt, via, "POST", "/internal/v1/events", Some(body), &ingest);
        assert_eq!(status, 202, "{out}");
        assert_eq!(out["data"]["deliveries"], subs.len(), "{out}");
        let event = out["data"]["eventId"].as_str().expect("eventId");
        for sub in &subs {
            expected.insert(delivery_id(event, sub));
        }
    }
    assert_eq!(expected.len(), events * subs.len());

    // Every delivery succeeded, as both A and B see it.
    let end = Instant::now() + DEADLINE;
    let mut records = BTreeMap::new();
    loop {
        let mut done = true;
        for op in [&op_a, &op_b] {
            records.clear();
            for sub in &subs {
                let path = format!("/internal/v1/subscriptions/{sub}/deliveries?limit=100");
                let (status, page) = call(&rt, op, "GET", &path, None, &[]);
                assert_eq!(status, 200, "{page}");
                for d in page["data"].as_array().expect("array") {
                    let attempts = d["attempts"].as_array().expect("attempts").len();
                    assert!(attempts <= 3, "never more than 3 attempts: {d}");
                    records.insert(d["id"].as_str().expect("id").to_owned(), d.clone());
                }
            }
            let succeeded = records
                .values()
                .filter(|d| d["status"] == "succeeded")
                .count();
            done &= succeeded == expected.len();
        }
        if done {
            break;
        }
        assert!(
            Instant::now() < end,
            "not every delivery succeeded in time; records: {records:#?}"
        );
        std::thread::park_timeout(Duration::from_millis(100));
    }
    assert_eq!(
        records.keys().cloned().collect::<BTreeSet<_>>(),
        expected,
        "the deliveries are exactly one per (event, subscription)"
    );

    // Nothing lost; duplicates counted, each with the log lines that explain it.
    let counts = recv.counts.lock().expect("lock").clone();
    let missing: Vec<&String> = expected
        .iter()
        .filter(|id| !counts.contains_key(*id))
        .collect();
    assert!(missing.is_empty(), "never received: {missing:?}");
    let attempt_lines = |p: &mut Proc| -> Vec<String> {
        p.drain()
            .iter()
            .filter(|l| l.contains("\"msg\":\"delivery attempt\""))
            .cloned()
            .collect()
    };
    let sent_a = attempt_lines(&mut a);
    let sent_b = attempt_lines(&mut b);
    let mut duplicates = 0;
    for (id, n) in counts.iter().filter(|(_, n)| **n > 1) {
        duplicates += n - 1;
        let attempts = records[id]["attempts"].as_array().map_or(0, Vec::len);
        println!("duplicate: {id} received {n} times, {attempts} attempt(s) recorded; sent:");
        for line in sent_a.iter().filter(|l| l.contains(id.as_str())) {
            println!("  A {line}");
        }
        for line in sent_b.iter().filter(|l| l.contains(id.as_str())) {
            println!("  B {line}");
        }
        // A retry after a failed (e.g. timed out) attempt is a legitimate second send; the
        // same attempt sent twice is not.
        assert!(
            attempts >= *n,
            "{id} was received {n} times but only {attempts} attempt(s) are recorded: two \
             instances sent the same attempt"
        );
    }
    println!(
        "{} deliveries ({events} events x {} subscriptions) through 2 instances on one Redis: \
         all succeeded, attempts sent by A {} / by B {}, {duplicates} duplicate send(s), {:.1} s",
        expected.len(),
        subs.len(),
        sent_a.len(),
        sent_b.len(),
        started.elapsed().as_secs_f64()
    );
    assert!(duplicates <= 2, "{duplicates} duplicate sends");
}
