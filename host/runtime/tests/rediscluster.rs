//! The Redis Cluster store (`--kv redis+cluster://...`), TLS to Redis (`rediss://`) and
//! writes that wait for a replica, against real `redis-server`s on loopback started by the
//! test ([`edgehook_testkit::rediscluster`]): a cluster of 3 primaries and 3 replicas, a
//! server with a TLS port only and a CA made for it. Without `redis-server` the tests are
//! skipped, except under CI.

use edgehook_runtime::rediscluster::RedisClusterStore;
use edgehook_runtime::redisstore::{RedisOptions, RedisStore};
use edgehook_runtime::store::{RemoteKv, parse_counter};
use edgehook_testkit::redis::{redis_or_skip, shared_redis};
use edgehook_testkit::rediscluster::{TlsRedis, shared_cluster};
use edgehook_testkit::rt;
use std::sync::Arc;
use std::time::Duration;

fn options(prefix: &str) -> RedisOptions {
    RedisOptions {
        prefix: format!("{prefix}:{}:", std::process::id()),
        ..RedisOptions::default()
    }
}

#[test]
fn the_cluster_store_keeps_one_redis_rules_across_slots() {
    if !redis_or_skip() {
        return;
    }
    let cluster = shared_cluster();
    rt().block_on(async {
        let store = RedisClusterStore::open_with(&cluster.url(), options("clustertest"))
            .await
            .expect("open the cluster store");
        // Keys spread over every primary (many slots).
        let keys: Vec<String> = (0..60).map(|i| format!("k{i:02}")).collect();
        let entries: Vec<(String, Vec<u8>)> = keys
            .iter()
            .map(|k| (k.clone(), format!("v-{k}").into_bytes()))
            .collect();
        store
            .set_many(&entries)
            .await
            .expect("set_many across slots");
        let mut asked = keys.clone();
        asked.insert(3, "missing".into());
        asked.push("k00".into());
        let got = store.get_many(&asked).await.expect("get_many across slots");
        let want: Vec<Option<Vec<u8>>> = asked
            .iter()
            .map(|k| (k != "missing").then(|| format!("v-{k}").into_bytes()))
            .collect();
        assert_eq!(
            got, want,
            "in request order, missing as None, duplicates answered"
        );
        // Listing walks every primary.
        let listed = store.list_keys(None, 1000).await.expect("list");
        assert_eq!(listed, keys, "every key, in order, from every primary");
        assert_eq!(
            store.list_keys(Some("k57"), 10).await,
            Ok(vec!["k58".into(), "k59".into()])
        );
        // Compare-and-swap and counters, each on its key's primary.
        assert_eq!(store.compare_and_swap("c", None, b"1").await, Ok(true));
        assert_eq!(store.compare_and_swap("c", None, b"2").await, Ok(false));
        assert_eq!(
            store.compare_and_swap("c", Some(b"1"), b"a\0\xff").await,
            Ok(true)
        );
        assert_eq!(store.get("c").await, Ok(Some(b"a\0\xff".to_vec())));
        assert_eq!(store.increment("n", 5).await, Ok(5));
        assert_eq!(store.increment("n", -2).await, Ok(3));
        assert!(store.increment("c", 1).await.is_err(), "not a counter");
        store.delete("c").await.expect("delete");
        assert_eq!(store.get("c").await, Ok(None));

        // Concurrent compare-and-swap loops and increments lose no update.
        let store = Arc::new(store);
        let tasks: Vec<_> = (0..8)
            .map(|_| {
                let store = store.clone();
                tokio::spawn(async move {
                    for _ in 0..25 {
                        store.increment("sum", 1).await.expect("increment");
                        loop {
                            let seen = store.get("casn").await.expect("get");
                            let n = parse_counter("casn", seen.as_ref()).expect("counter");
                            let next = (n + 1).to_string();
                            if store
                                .compare_and_swap("casn", seen.as_deref(), next.as_bytes())
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
        for t in tasks {
            t.await.expect("task");
        }
        assert_eq!(store.increment("sum", 0).await, Ok(200));
        let casn = store.get("casn").await.expect("get");
        assert_eq!(parse_counter("casn", casn.as_ref()), Ok(200));

        // With a wait for one replica: every write is acknowledged (each primary has one).
        let waiting = RedisClusterStore::open_with(
            &cluster.url(),
            RedisOptions {
                wait_replicas: 1,
                ..options("clusterwait")
            },
        )
        .await
        .expect("open with a wait");
        waiting.set("w", b"1").await.expect("set, replicated");
        waiting
            .set_many(&entries)
            .await
            .expect("set_many, replicated");
        assert_eq!(
            waiting.compare_and_swap("w", Some(b"1"), b"2").await,
            Ok(true)
        );
        assert_eq!(waiting.increment("wn", 2).await, Ok(2));
        waiting.delete("w").await.expect("delete, replicated");
        // The replicas have them: read straight from each replica.
        let primaries = cluster.primaries();
        let replicas: Vec<u16> = cluster
            .ports()
            .into_iter()
            .filter(|p| !primaries.contains(p))
            .collect();
        let key = format!("clusterwait:{}:wn", std::process::id());
        // READONLY then GET on one connection: a replica answers reads of its own slots.
        let on_replicas = replicas
            .iter()
            .filter_map(|p| {
                let mut s = std::net::TcpStream::connect(("127.0.0.1", *p)).ok()?;
                use std::io::{Read as _, Write as _};
                let req = format!(
                    "*1\r\n$8\r\nREADONLY\r\n*2\r\n$3\r\nGET\r\n${}\r\n{key}\r\n",
                    key.len()
                );
                s.write_all(req.as_bytes()).ok()?;
                s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
                let mut buf = [0u8; 64];
                let n = s.read(&mut buf).ok()?;
                let text = String::from_utf8_lossy(&buf[..n]).into_owned();
                text.contains("\r\n2\r\n").then_some(*p)
            })
            .count();
        assert_eq!(
            on_replicas, 1,
            "the counter is on its primary's one replica"
        );
    });
}

#[test]
fn a_write_no_replica_acknowledges_fails() {
    if !redis_or_skip() {
        return;
    }
    let redis = shared_redis();
    rt().block_on(async {
        let store = RedisStore::open_with(
            &redis.url(),
            RedisOptions {
                wait_replicas: 1,
                wait_timeout: Duration::from_millis(50),
                ..options("waitalone")
            },
        )
        .await
        .expect("open");
        let err = store
            .set("k", b"v")
            .await
            .expect_err("no replica: not acknowledged");
        assert!(err.to_string().contains("replicas"), "{err}");
        let err = store
            .increment("n", 1)
            .await
            .expect_err("the same for a counter");
        assert!(err.to_string().contains("replicas"), "{err}");
        let err = store
            .compare_and_swap("c", None, b"1")
            .await
            .expect_err("and for a compare-and-swap");
        assert!(err.to_string().contains("replicas"), "{err}");
        // Reads do not wait.
        assert_eq!(store.get("k").await, Ok(Some(b"v".to_vec())));
    });
}

#[test]
fn rediss_trusts_the_extra_ca_and_refuses_an_unknown_one() {
    if !redis_or_skip() {
        return;
    }
    let redis = TlsRedis::start();
    rt().block_on(async {
        let trusted = RedisStore::open_with(
            &redis.url(),
            RedisOptions {
                extra_ca: Some(redis.ca_pem.clone().into_bytes()),
                ..options("tls")
            },
        )
        .await
        .expect("open over TLS with the test CA");
        assert!(
            trusted.server().starts_with("rediss://"),
            "{}",
            trusted.server()
        );
        trusted.set("k", b"over tls").await.expect("set");
        assert_eq!(trusted.get("k").await, Ok(Some(b"over tls".to_vec())));
        assert_eq!(trusted.compare_and_swap("k", None, b"x").await, Ok(false));
        let untrusted = RedisStore::open_with(
            &redis.url(),
            RedisOptions {
                connect_timeout: Duration::from_secs(2),
                ..options("tls")
            },
        )
        .await
        .expect_err("a CA the client was not given is not trusted");
        println!("without the CA: {untrusted}");
    });
}
