//! The Redis store (`--kv redis://...`) on its own, against a real `redis-server` (started by
//! [`edgehook_testkit::redis`] on a free loopback port): compare-and-swap is atomic and
//! binary safe, counters are decimal text, keys stay under the prefix, broken connections
//! are replaced, and a wrong password is reported without the password. `redis-server` must be installed (`.ci/run` installs
//! Debian's); without it the test is skipped, except under CI.

use edgehook_runtime::redisstore::{RedisOptions, RedisStore};
use edgehook_runtime::store::{RemoteKv, parse_counter};
use edgehook_testkit::redis::{RedisServer, redis_or_skip, shared_redis};
use edgehook_testkit::rt;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;

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
    let text = wrong.to_string();
    assert!(
        !text.contains(password) && text.contains("127.0.0.1"),
        "{wrong}"
    );
    println!("a wrong password reads: {wrong}");
}
