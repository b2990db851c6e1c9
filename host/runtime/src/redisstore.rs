//! The shared store of `edgehook serve --kv redis://...`: the keyspace in a Redis server, so
//! several instances of the service share subscriptions, deliveries and the due queue.
//!
//! Every key is stored under a prefix (`edgehook:` by default) so one Redis can hold other
//! data too. Values are raw bytes; counters are decimal strings (`INCRBY`), the same format
//! [`parse_counter`](crate::store::parse_counter) reads. Compare-and-swap is one Lua script
//! (`EVALSHA`, loaded on first use), so the comparison and the write are atomic on the
//! server, and byte-for-byte: Lua strings are binary safe.
//!
//! Calls are asynchronous ([`RemoteKv`]): an instance waiting on Redis yields its thread to
//! the executor, so a slow Redis never blocks other requests, the timer or `/healthz`. All
//! calls share one multiplexed connection: requests issued together by concurrent
//! instances go out in one write and their replies come back in one read (pipelining). A
//! connection that failed is dropped and a fresh one opened. A connection left unused for a
//! while is checked with `PING` before use, so a restarted Redis costs no failed operation.
//! After a connection breaks, only operations that can safely run twice (reads, `SET`,
//! `DEL`) are retried once on a fresh connection; `INCRBY` and compare-and-swap are not (the
//! first try may have been applied), their error goes to the caller.
//!
//! `rediss://` is Redis over TLS (rustls), trusting the webpki roots (as the deliveries'
//! client does) plus [`RedisOptions::extra_ca`]. With [`RedisOptions::wait_replicas`], every
//! write is followed by `WAIT n timeout` on the same connection, and is acknowledged only once
//! that many replicas have it (see [`Wait`]). A Redis Cluster is
//! [`rediscluster`](crate::rediscluster).
//!
//! Error messages name the server as `redis://host:port/db`, never with the password.

use crate::store::{KvFuture, RemoteKv, StoreError, StoreResult};
use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::{
    AsyncConnectionConfig, Client, Cmd, ErrorKind, FromRedisValue, RedisError, RedisResult, Script,
    ServerErrorKind, TlsCertificates,
};
use std::collections::BTreeSet;
use std::future::Future;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Compares the current value with `ARGV[2]` (or, when `ARGV[1]` is `"0"`, requires the key
/// to be absent) and writes `ARGV[3]` if it matches. Returns 1 when written, 0 otherwise.
pub(crate) const CAS_SCRIPT: &str = r"
local current = redis.call('GET', KEYS[1])
if ARGV[1] == '0' then
  if current then return 0 end
elseif current ~= ARGV[2] then
  return 0
end
redis.call('SET', KEYS[1], ARGV[3])
return 1
";

/// How a [`RedisStore`] connects and names its keys.
#[derive(Debug, Clone)]
pub struct RedisOptions {
    /// Prepended to every key (default `edgehook:`).
    pub prefix: String,
    /// Time allowed to open a connection (default 2 s).
    pub connect_timeout: Duration,
    /// Time allowed to one request's reply (default 5 s).
    pub io_timeout: Duration,
    /// A connection unused for longer than this is checked with `PING` before use (default
    /// 5 s).
    pub check_after_idle: Duration,
    /// Replicas every write must reach before it is acknowledged to the component (`WAIT`
    /// after it; `serve --kv-wait-replicas`). 0 (the default): none, Redis's own asynchronous
    /// replication, so a primary that dies may take its last writes with it.
    pub wait_replicas: u32,
    /// How long a write waits for those replicas (default 1 s); if fewer have it by then the
    /// write fails (it may still be applied: a failure means "not known to be replicated").
    pub wait_timeout: Duration,
    /// A Redis Cluster: how long an operation is retried through redirections (`MOVED`,
    /// `ASK`), a failover in progress (`CLUSTERDOWN`, `TRYAGAIN`, a node that refuses
    /// connections) before its error goes to the caller (default 20 s: a failover takes
    /// `cluster-node-timeout`, 15 s by default, and an election).
    pub retry_for: Duration,
    /// CA certificates (PEM) trusted for `rediss://` besides the webpki roots (`serve
    /// --extra-ca`, the same file as for deliveries).
    pub extra_ca: Option<Vec<u8>>,
}

impl Default for RedisOptions {
    fn default() -> Self {
        Self {
            prefix: "edgehook:".into(),
            connect_timeout: Duration::from_secs(2),
            io_timeout: Duration::from_secs(5),
            check_after_idle: Duration::from_secs(5),
            wait_replicas: 0,
            wait_timeout: Duration::from_secs(1),
            retry_for: Duration::from_secs(20),
            extra_ca: None,
        }
    }
}

/// The shared connection, numbered so that a task that saw it fail drops that one and not
/// a fresh one another task opened since.
struct Shared {
    con: MultiplexedConnection,
    number: u64,
    last_used: Instant,
}

#[derive(Default)]
struct Slot {
    shared: Option<Shared>,
    opened: u64,
}

/// The Redis backend (see the module docs).
pub struct RedisStore {
    client: Client,
    options: RedisOptions,
    slot: Mutex<Slot>,
    cas: Script,
    wait: Option<Wait>,
    /// `redis://host:port/db`: how messages name the server.
    name: String,
    /// Strings that must never appear in a message (the password, raw and decoded).
    secrets: Vec<String>,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("server", &self.name)
            .field("prefix", &self.options.prefix)
            .finish_non_exhaustive()
    }
}

/// Whether the operation may be sent again after its connection broke.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Retry {
    Safe,
    Never,
}

/// Whether an error means the connection can no longer be trusted (as opposed to an answer
/// the server gave on it, e.g. a wrong type).
pub(crate) fn breaks_connection(e: &RedisError) -> bool {
    e.is_io_error() || e.is_timeout() || e.is_connection_dropped() || e.is_unrecoverable_error()
}

impl RedisStore {
    /// Connects to `url` (`redis://[:password@]host:port[/db]`, `rediss://...` for TLS, or
    /// `redis+unix:///path?db=N&pass=...`) with the default options, and checks the server
    /// answers.
    pub async fn open(url: &str) -> StoreResult<Self> {
        Self::open_with(url, RedisOptions::default()).await
    }

    /// Connects to `url` with `options`, and checks the server answers (`PING`).
    pub async fn open_with(url: &str, options: RedisOptions) -> StoreResult<Self> {
        let raw_secrets = url_secrets(url);
        let invalid = |e: RedisError| {
            failure(scrub(
                &format!("invalid Redis URL {}: {e}", redact_url(url)),
                &raw_secrets,
            ))
        };
        let client = match tls_certificates(url, &options).map_err(invalid)? {
            Some(certs) => Client::build_with_tls(url, certs),
            None => Client::open(url),
        }
        .map_err(invalid)?;
        let info = client.get_connection_info();
        let name = match info.addr() {
            redis::ConnectionAddr::Unix(path) => format!("redis+unix://{}", path.display()),
            addr @ redis::ConnectionAddr::TcpTls { .. } => {
                format!("rediss://{addr}/{}", info.redis_settings().db())
            }
            addr => format!("redis://{addr}/{}", info.redis_settings().db()),
        };
        let mut secrets = raw_secrets;
        if let Some(pw) = info.redis_settings().password() {
            secrets.push(pw.to_owned());
        }
        secrets.retain(|s| !s.is_empty());
        let store = Self {
            client,
            wait: Wait::of(&options),
            options,
            slot: Mutex::default(),
            cas: Script::new(CAS_SCRIPT),
            name,
            secrets,
        };
        store
            .run("PING", Retry::Safe, |mut con| async move {
                redis::cmd("PING").query_async::<String>(&mut con).await
            })
            .await?;
        Ok(store)
    }

    /// The server as `redis://host:port/db` (no password): for logs.
    pub fn server(&self) -> &str {
        &self.name
    }

    /// The key prefix.
    pub fn prefix(&self) -> &str {
        &self.options.prefix
    }

    fn key(&self, key: &str) -> String {
        format!("{}{key}", self.options.prefix)
    }

    fn error(&self, what: &str, e: &RedisError) -> StoreError {
        failure(scrub(
            &format!("redis {what} on {}: {e}", self.name),
            &self.secrets,
        ))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Slot> {
        // The slot is replaced whole; a panic elsewhere cannot leave it half-written.
        self.slot.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The shared connection (checked with `PING` first if it was unused for a while), or a
    /// new one. Returns it with its number.
    async fn connection(&self) -> StoreResult<(MultiplexedConnection, u64)> {
        let current = self.lock().shared.as_mut().map(|s| {
            let idle = s.last_used.elapsed() >= self.options.check_after_idle;
            s.last_used = Instant::now();
            (s.con.clone(), s.number, idle)
        });
        if let Some((mut con, number, idle)) = current {
            if !idle
                || redis::cmd("PING")
                    .query_async::<String>(&mut con)
                    .await
                    .is_ok()
            {
                return Ok((con, number));
            }
            self.forget(number);
        }
        self.reconnect().await
    }

    /// Opens a new connection and shares it.
    async fn reconnect(&self) -> StoreResult<(MultiplexedConnection, u64)> {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.options.connect_timeout))
            .set_response_timeout(Some(self.options.io_timeout));
        let con = self
            .client
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .map_err(|e| self.error("connect", &e))?;
        let mut slot = self.lock();
        slot.opened += 1;
        let number = slot.opened;
        slot.shared = Some(Shared {
            con: con.clone(),
            number,
            last_used: Instant::now(),
        });
        Ok((con, number))
    }

    /// Stops sharing connection `number` (if it is still the shared one).
    fn forget(&self, number: u64) {
        let mut slot = self.lock();
        if slot.shared.as_ref().is_some_and(|s| s.number == number) {
            slot.shared = None;
        }
    }

    /// Runs `f` on the shared connection. An answer of the server (e.g. a wrong type) leaves
    /// the connection shared; a broken connection is dropped, and a `Retry::Safe` operation
    /// runs once more on a fresh one.
    async fn run<T, F, Fut>(&self, what: &str, retry: Retry, f: F) -> StoreResult<T>
    where
        F: Fn(MultiplexedConnection) -> Fut,
        Fut: Future<Output = RedisResult<T>>,
    {
        let (con, number) = self.connection().await?;
        let e = match f(con).await {
            Ok(v) => return Ok(v),
            Err(e) if !breaks_connection(&e) => return Err(self.error(what, &e)),
            Err(e) => e,
        };
        self.forget(number);
        if retry == Retry::Never {
            return Err(self.error(what, &e));
        }
        let (con, number) = self.connection().await?;
        f(con).await.map_err(|e| {
            if breaks_connection(&e) {
                self.forget(number);
            }
            self.error(what, &e)
        })
    }

    /// Every key under the prefix after `cursor`, the `limit` smallest (`SCAN`: a pass over
    /// the keyspace, fine for the rare listings the component makes, not for hot paths).
    async fn scan(&self, cursor: Option<&str>, limit: usize) -> StoreResult<Vec<String>> {
        let pattern = glob_escape(&self.options.prefix) + "*";
        let (pattern, prefix) = (&pattern, self.options.prefix.as_str());
        self.run("SCAN", Retry::Safe, |mut con| async move {
            let mut page = BTreeSet::new();
            let mut scan: u64 = 0;
            loop {
                let (next, batch): (u64, Vec<Vec<u8>>) = redis::cmd("SCAN")
                    .arg(scan)
                    .arg("MATCH")
                    .arg(pattern)
                    .arg("COUNT")
                    .arg(1000)
                    .query_async(&mut con)
                    .await?;
                for raw in batch {
                    let Ok(full) = String::from_utf8(raw) else {
                        continue; // not one of ours: our keys are strings
                    };
                    let Some(key) = full.strip_prefix(prefix) else {
                        continue;
                    };
                    if cursor.is_some_and(|c| key <= c) {
                        continue;
                    }
                    page.insert(key.to_owned());
                    if page.len() > limit {
                        page.pop_last();
                    }
                }
                if next == 0 {
                    return Ok(page.into_iter().collect());
                }
                scan = next;
            }
        })
        .await
    }

    async fn mget(&self, keys: &[String]) -> StoreResult<Vec<Option<Vec<u8>>>> {
        let mut values = Vec::with_capacity(keys.len());
        for chunk in keys.chunks(512) {
            let full: Vec<String> = chunk.iter().map(|k| self.key(k)).collect();
            let full = &full;
            let got: Vec<Option<Vec<u8>>> = self
                .run("MGET", Retry::Safe, |mut con| async move {
                    redis::cmd("MGET").arg(full).query_async(&mut con).await
                })
                .await?;
            values.extend(got);
        }
        Ok(values)
    }

    async fn swap(&self, key: &str, expected: Option<&[u8]>, new: &[u8]) -> StoreResult<bool> {
        let k = self.key(key);
        let (present, expected): (&str, &[u8]) = match expected {
            Some(v) => ("1", v),
            None => ("0", b""),
        };
        let call = cas_command(&self.cas, &k, present, expected, new);
        let (call, wait) = (&call, self.wait);
        let cas = &self.cas;
        self.run("compare-and-swap", Retry::Never, |mut con| async move {
            cas_on(&mut con, cas, call, wait).await
        })
        .await
    }
}

impl RemoteKv for RedisStore {
    fn get<'a>(&'a self, key: &'a str) -> KvFuture<'a, Option<Vec<u8>>> {
        Box::pin(async move {
            let k = &self.key(key);
            self.run("GET", Retry::Safe, |mut con| async move {
                redis::cmd("GET").arg(k).query_async(&mut con).await
            })
            .await
        })
    }

    fn set<'a>(&'a self, key: &'a str, value: &'a [u8]) -> KvFuture<'a, ()> {
        Box::pin(async move {
            let mut set = redis::cmd("SET");
            set.arg(self.key(key)).arg(value);
            let (set, wait) = (&set, self.wait);
            self.run("SET", Retry::Safe, |mut con| async move {
                write::<(), _>(&mut con, set, wait).await
            })
            .await
        })
    }

    fn delete<'a>(&'a self, key: &'a str) -> KvFuture<'a, ()> {
        Box::pin(async move {
            let mut del = redis::cmd("DEL");
            del.arg(self.key(key));
            let (del, wait) = (&del, self.wait);
            self.run("DEL", Retry::Safe, |mut con| async move {
                write::<i64, _>(&mut con, del, wait).await.map(drop)
            })
            .await
        })
    }

    fn list_keys<'a>(&'a self, cursor: Option<&'a str>, limit: usize) -> KvFuture<'a, Vec<String>> {
        Box::pin(self.scan(cursor, limit))
    }

    fn increment<'a>(&'a self, key: &'a str, delta: i64) -> KvFuture<'a, i64> {
        Box::pin(async move {
            let mut incr = redis::cmd("INCRBY");
            incr.arg(self.key(key)).arg(delta);
            let (incr, wait) = (&incr, self.wait);
            self.run("INCRBY", Retry::Never, |mut con| async move {
                write(&mut con, incr, wait).await
            })
            .await
        })
    }

    fn compare_and_swap<'a>(
        &'a self,
        key: &'a str,
        expected: Option<&'a [u8]>,
        new: &'a [u8],
    ) -> KvFuture<'a, bool> {
        Box::pin(self.swap(key, expected, new))
    }

    fn get_many<'a>(&'a self, keys: &'a [String]) -> KvFuture<'a, Vec<Option<Vec<u8>>>> {
        Box::pin(self.mget(keys))
    }

    fn set_many<'a>(&'a self, entries: &'a [(String, Vec<u8>)]) -> KvFuture<'a, ()> {
        Box::pin(async move {
            // `MSET`, 512 keys a command (as `MGET`): one round trip where there were as many
            // as keys. Writing again what a failed try wrote is harmless.
            for chunk in entries.chunks(512) {
                let pairs: Vec<(String, &[u8])> = chunk
                    .iter()
                    .map(|(k, v)| (self.key(k), v.as_slice()))
                    .collect();
                let mut mset = redis::cmd("MSET");
                mset.arg(&pairs);
                let (mset, wait) = (&mset, self.wait);
                self.run("MSET", Retry::Safe, |mut con| async move {
                    write::<(), _>(&mut con, mset, wait).await
                })
                .await?;
            }
            Ok(())
        })
    }
}

/// How a write waits for replicas: `WAIT replicas timeout` sent right behind it in one
/// pipeline, so on the same connection to the same server, where `WAIT` covers every write
/// sent before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Wait {
    replicas: u32,
    timeout_ms: u64,
}

impl Wait {
    /// The replicas a write must reach.
    pub(crate) fn replicas(self) -> u32 {
        self.replicas
    }

    /// How long it may wait for them, in milliseconds.
    pub(crate) fn timeout_ms(self) -> u64 {
        self.timeout_ms
    }

    /// The wait `options` ask for, if any.
    pub(crate) fn of(options: &RedisOptions) -> Option<Wait> {
        (options.wait_replicas > 0).then(|| Wait {
            replicas: options.wait_replicas,
            timeout_ms: options.wait_timeout.as_millis().clamp(1, u64::MAX as u128) as u64,
        })
    }
}

/// Runs the write `cmd`; with `wait`, followed by `WAIT` in the same pipeline: its answer,
/// or an error when fewer replicas than asked have it in time (the write may be applied:
/// the error means "not known to be replicated", and the component treats it as a failed
/// write).
pub(crate) async fn write<T: FromRedisValue, C: ConnectionLike>(
    con: &mut C,
    cmd: &Cmd,
    wait: Option<Wait>,
) -> RedisResult<T> {
    let Some(wait) = wait else {
        return cmd.query_async(con).await;
    };
    let mut pipe = redis::pipe();
    pipe.add_command(cmd.clone())
        .cmd("WAIT")
        .arg(wait.replicas)
        .arg(wait.timeout_ms);
    let (value, acked): (T, u32) = pipe.query_async(con).await?;
    if acked < wait.replicas {
        return Err(not_replicated(acked, wait));
    }
    Ok(value)
}

/// The error of a write that fewer replicas than asked acknowledged in time.
pub(crate) fn not_replicated(acked: u32, wait: Wait) -> RedisError {
    RedisError::from((
        ErrorKind::Client,
        "write not acknowledged by enough replicas",
        format!(
            "WAIT {} {}: {acked} acknowledged",
            wait.replicas, wait.timeout_ms
        ),
    ))
}

/// The compare-and-swap of `key` as one `EVALSHA` of [`CAS_SCRIPT`] (see [`cas_on`]).
pub(crate) fn cas_command(
    script: &Script,
    key: &str,
    present: &str,
    expected: &[u8],
    new: &[u8],
) -> Cmd {
    let mut call = redis::cmd("EVALSHA");
    call.arg(script.get_hash())
        .arg(1)
        .arg(key)
        .arg(present)
        .arg(expected)
        .arg(new);
    call
}

/// Runs a [`cas_command`] (with `wait`): whether it swapped. A server that does not have the
/// script yet (`NOSCRIPT`: nothing ran) is given it (`SCRIPT LOAD`) and asked again.
pub(crate) async fn cas_on<C: ConnectionLike>(
    con: &mut C,
    script: &Script,
    call: &Cmd,
    wait: Option<Wait>,
) -> RedisResult<bool> {
    match write::<i64, _>(con, call, wait).await {
        Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
            script.prepare_invoke().load_async(con).await?;
            write::<i64, _>(con, call, wait).await.map(|n| n == 1)
        }
        done => done.map(|n| n == 1),
    }
}

/// The certificates of a `rediss://` connection when [`RedisOptions::extra_ca`] is set: the
/// webpki roots and the extra CA, as one PEM bundle (the Redis client takes a bundle in
/// place of its roots, not beside them). `None` for other URLs, or without an extra CA (the
/// client's own webpki roots then).
pub(crate) fn tls_certificates(
    url: &str,
    options: &RedisOptions,
) -> RedisResult<Option<TlsCertificates>> {
    let Some(extra) = &options.extra_ca else {
        return Ok(None);
    };
    if !url.starts_with("rediss") {
        return Ok(None);
    }
    let mut bundle = extra.clone();
    bundle.push(b'\n');
    for cert in webpki_root_certs::TLS_SERVER_ROOT_CERTS {
        bundle.extend_from_slice(b"-----BEGIN CERTIFICATE-----\n");
        for line in base64(cert.as_ref()).as_bytes().chunks(64) {
            bundle.extend_from_slice(line);
            bundle.push(b'\n');
        }
        bundle.extend_from_slice(b"-----END CERTIFICATE-----\n");
    }
    Ok(Some(TlsCertificates {
        client_tls: None,
        root_cert: Some(bundle),
    }))
}

/// Standard base64 with padding (PEM's body).
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// The userinfo of a URL (`user:password` as written, and the password alone) and a
/// `pass=` query value: what must never be shown.
pub(crate) fn url_secrets(url: &str) -> Vec<String> {
    let mut out = Vec::new();
    if let Some((_, rest)) = url.split_once("://") {
        let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
        if let Some((userinfo, _)) = authority.rsplit_once('@') {
            out.push(userinfo.to_owned());
            if let Some((_, pw)) = userinfo.split_once(':') {
                out.push(pw.to_owned());
            }
        }
    }
    if let Some((_, query)) = url.split_once('?') {
        for pair in query.split('&') {
            if let Some(pw) = pair.strip_prefix("pass=") {
                out.push(pw.to_owned());
            }
        }
    }
    out.retain(|s| !s.is_empty());
    out
}

/// The URL with its userinfo and query removed.
pub(crate) fn redact_url(url: &str) -> String {
    let no_query = url.split(['?', '#']).next().unwrap_or("");
    match no_query.split_once("://") {
        Some((scheme, rest)) => {
            let (authority, path) = match rest.find('/') {
                Some(i) => rest.split_at(i),
                None => (rest, ""),
            };
            let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
            format!("{scheme}://{host}{path}")
        }
        None => "(not a URL)".into(),
    }
}

/// The store error of a Redis failure (`message`, secrets already scrubbed).
pub(crate) fn failure(message: String) -> StoreError {
    StoreError::Backend(message)
}

pub(crate) fn scrub(message: &str, secrets: &[String]) -> String {
    // Longest first, so a secret containing another is removed whole.
    let mut secrets: Vec<&String> = secrets.iter().collect();
    secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
    secrets
        .into_iter()
        .fold(message.to_owned(), |m, s| m.replace(s.as_str(), "***"))
}

/// Escapes the glob characters of `SCAN MATCH`.
pub(crate) fn glob_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_never_show_the_password() {
        let url = "redis://app:s3cr%40t@127.0.0.1:1/2";
        assert_eq!(redact_url(url), "redis://127.0.0.1:1/2");
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let err = rt
            .block_on(RedisStore::open_with(
                url,
                RedisOptions {
                    connect_timeout: Duration::from_millis(500),
                    ..RedisOptions::default()
                },
            ))
            .expect_err("nothing listens on port 1");
        let text = err.to_string();
        assert!(text.contains("redis://127.0.0.1:1/2"), "{err}");
        for secret in ["s3cr", "s3cr%40t", "s3cr@t"] {
            assert!(!text.contains(secret), "{err}");
        }
        let bad = rt
            .block_on(RedisStore::open("redis://:hunter2@[bad/0"))
            .expect_err("not a URL");
        assert!(!bad.to_string().contains("hunter2"), "{bad}");
        let unix = url_secrets("redis+unix:///run/redis.sock?db=1&pass=pw1");
        assert_eq!(unix, vec!["pw1".to_owned()]);
        assert_eq!(
            redact_url("redis+unix:///run/redis.sock?pass=pw1"),
            "redis+unix:///run/redis.sock"
        );
    }

    #[test]
    fn base64_pads_as_pem_wants() {
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(b"foobar"), "Zm9vYmFy");
        assert_eq!(base64(&[0xff, 0xfe, 0x00, 0x01]), "//4AAQ==");
    }

    #[test]
    fn prefixes_are_matched_literally() {
        assert_eq!(glob_escape("a*b?[c]\\:"), "a\\*b\\?\\[c\\]\\\\:");
    }
}
