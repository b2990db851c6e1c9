//! The shared store of `edgehook serve --kv redis://...`: the keyspace in a Redis server, so
//! several instances of the service share subscriptions, deliveries and the due queue.
//!
//! Every key is stored under a prefix (`edgehook:` by default) so one Redis can hold other
//! data too. Values are raw bytes; counters are decimal strings (`INCRBY`), the same format
//! [`parse_counter`](crate::store::parse_counter) reads. Compare-and-swap is one Lua script
//! (`EVALSHA`, loaded on first use), so the comparison and the write are atomic on the
//! server, and byte-for-byte: Lua strings are binary safe.
//!
//! Calls are synchronous (the [`KvBackend`] trait is). Connections are kept in a small pool
//! so concurrent calls do not queue behind one socket; a connection that failed is dropped
//! and a fresh one opened. A connection that sat idle for a while is checked with `PING`
//! before use, so a restarted Redis costs no failed operation. After a connection breaks,
//! only operations that can safely run twice (reads, `SET`, `DEL`) are retried once on a
//! fresh connection; `INCRBY` and compare-and-swap are not (the first try may have been
//! applied), their error goes to the caller.
//!
//! Error messages name the server as `redis://host:port/db`, never with the password.

use crate::store::{KvBackend, StoreError, StoreResult};
use redis::{Client, Connection, ConnectionLike as _, ErrorKind, RedisError, RedisResult, Script};
use std::collections::BTreeSet;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Compares the current value with `ARGV[2]` (or, when `ARGV[1]` is `"0"`, requires the key
/// to be absent) and writes `ARGV[3]` if it matches. Returns 1 when written, 0 otherwise.
const CAS_SCRIPT: &str = r"
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
    /// Time allowed to one read or write on a connection (default 5 s).
    pub io_timeout: Duration,
    /// Idle connections kept for reuse (default 32).
    pub max_idle: usize,
    /// A connection idle for longer than this is checked with `PING` before use (default 5 s).
    pub check_after_idle: Duration,
}

impl Default for RedisOptions {
    fn default() -> Self {
        Self {
            prefix: "edgehook:".into(),
            connect_timeout: Duration::from_secs(2),
            io_timeout: Duration::from_secs(5),
            max_idle: 32,
            check_after_idle: Duration::from_secs(5),
        }
    }
}

struct Idle {
    con: Connection,
    since: Instant,
}

/// The Redis backend (see the module docs).
pub struct RedisStore {
    client: Client,
    options: RedisOptions,
    idle: Mutex<Vec<Idle>>,
    cas: Script,
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

impl RedisStore {
    /// Connects to `url` (`redis://[:password@]host:port[/db]`, or
    /// `redis+unix:///path?db=N&pass=...`) with the default options, and checks the server
    /// answers.
    pub fn open(url: &str) -> StoreResult<Self> {
        Self::open_with(url, RedisOptions::default())
    }

    /// Connects to `url` with `options`, and checks the server answers (`PING`).
    pub fn open_with(url: &str, options: RedisOptions) -> StoreResult<Self> {
        let raw_secrets = url_secrets(url);
        let client = Client::open(url).map_err(|e| {
            StoreError(scrub(
                &format!("invalid Redis URL {}: {e}", redact_url(url)),
                &raw_secrets,
            ))
        })?;
        let info = client.get_connection_info();
        let name = match info.addr() {
            redis::ConnectionAddr::Unix(path) => format!("redis+unix://{}", path.display()),
            addr => format!("redis://{addr}/{}", info.redis_settings().db()),
        };
        let mut secrets = raw_secrets;
        if let Some(pw) = info.redis_settings().password() {
            secrets.push(pw.to_owned());
        }
        secrets.retain(|s| !s.is_empty());
        let store = Self {
            client,
            options,
            idle: Mutex::new(Vec::new()),
            cas: Script::new(CAS_SCRIPT),
            name,
            secrets,
        };
        store.run("PING", Retry::Safe, |con| {
            redis::cmd("PING").query::<String>(con)
        })?;
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
        StoreError(scrub(
            &format!("redis {what} on {}: {e}", self.name),
            &self.secrets,
        ))
    }

    fn lock_idle(&self) -> std::sync::MutexGuard<'_, Vec<Idle>> {
        // The pool is a plain list; a panic elsewhere cannot leave it inconsistent.
        self.idle.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn connect(&self) -> StoreResult<Connection> {
        let con = self
            .client
            .get_connection_with_timeout(self.options.connect_timeout)
            .map_err(|e| self.error("connect", &e))?;
        let timeout = Some(self.options.io_timeout);
        con.set_read_timeout(timeout)
            .and_then(|()| con.set_write_timeout(timeout))
            .map_err(|e| self.error("connect", &e))?;
        Ok(con)
    }

    /// A connection: a pooled one (checked with `PING` if it idled long), else a new one.
    /// The flag says whether it came from the pool.
    fn checkout(&self) -> StoreResult<(Connection, bool)> {
        loop {
            let Some(idle) = self.lock_idle().pop() else {
                return Ok((self.connect()?, false));
            };
            let mut con = idle.con;
            if idle.since.elapsed() < self.options.check_after_idle {
                return Ok((con, true));
            }
            if redis::cmd("PING").query::<String>(&mut con).is_ok() {
                return Ok((con, true));
            }
            // Stale (the server restarted or closed it): so are its older siblings.
            self.lock_idle().clear();
        }
    }

    fn checkin(&self, con: Connection) {
        if !con.is_open() {
            return;
        }
        let mut idle = self.lock_idle();
        if idle.len() < self.options.max_idle {
            idle.push(Idle {
                con,
                since: Instant::now(),
            });
        }
    }

    /// Runs `f` on a connection. A server error (e.g. a wrong type) leaves the connection
    /// usable; any other error drops it, and a `Retry::Safe` operation that failed on a
    /// pooled connection runs once more on a fresh one.
    fn run<T>(
        &self,
        what: &str,
        retry: Retry,
        f: impl Fn(&mut Connection) -> RedisResult<T>,
    ) -> StoreResult<T> {
        let (mut con, pooled) = self.checkout()?;
        match f(&mut con) {
            Ok(v) => {
                self.checkin(con);
                Ok(v)
            }
            Err(e) if matches!(e.kind(), ErrorKind::Server(_)) => {
                self.checkin(con);
                Err(self.error(what, &e))
            }
            Err(e) => {
                drop(con);
                if !pooled {
                    return Err(self.error(what, &e));
                }
                self.lock_idle().clear();
                if retry == Retry::Never {
                    return Err(self.error(what, &e));
                }
                let mut con = self.connect()?;
                let result = f(&mut con);
                match &result {
                    Err(e) if !matches!(e.kind(), ErrorKind::Server(_)) => drop(con),
                    _ => self.checkin(con),
                }
                result.map_err(|e| self.error(what, &e))
            }
        }
    }
}

impl KvBackend for RedisStore {
    fn get(&self, key: &str) -> StoreResult<Option<Vec<u8>>> {
        let k = self.key(key);
        self.run("GET", Retry::Safe, |con| {
            redis::cmd("GET").arg(&k).query(con)
        })
    }

    fn set(&self, key: &str, value: &[u8]) -> StoreResult<()> {
        let k = self.key(key);
        self.run("SET", Retry::Safe, |con| {
            redis::cmd("SET").arg(&k).arg(value).query(con)
        })
    }

    fn delete(&self, key: &str) -> StoreResult<()> {
        let k = self.key(key);
        self.run("DEL", Retry::Safe, |con| {
            redis::cmd("DEL").arg(&k).query::<i64>(con).map(drop)
        })
    }

    /// Scans every key under the prefix (`SCAN`), so a page costs a pass over the keyspace:
    /// fine for the rare listings the component makes, not for hot paths.
    fn list_keys(&self, cursor: Option<&str>, limit: usize) -> StoreResult<Vec<String>> {
        let pattern = format!("{}*", glob_escape(&self.options.prefix));
        let prefix = self.options.prefix.as_str();
        self.run("SCAN", Retry::Safe, |con| {
            // Only the `limit` smallest keys after the cursor are kept.
            let mut page = BTreeSet::new();
            let mut scan: u64 = 0;
            loop {
                let (next, batch): (u64, Vec<Vec<u8>>) = redis::cmd("SCAN")
                    .arg(scan)
                    .arg("MATCH")
                    .arg(&pattern)
                    .arg("COUNT")
                    .arg(1000)
                    .query(con)?;
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
    }

    fn increment(&self, key: &str, delta: i64) -> StoreResult<i64> {
        let k = self.key(key);
        self.run("INCRBY", Retry::Never, |con| {
            redis::cmd("INCRBY").arg(&k).arg(delta).query(con)
        })
    }

    fn compare_and_swap(
        &self,
        key: &str,
        expected: Option<&[u8]>,
        new: &[u8],
    ) -> StoreResult<bool> {
        let k = self.key(key);
        let (present, expected): (&str, &[u8]) = match expected {
            Some(v) => ("1", v),
            None => ("0", b""),
        };
        self.run("compare-and-swap", Retry::Never, |con| {
            let mut call = self.cas.key(&k);
            call.arg(present).arg(expected).arg(new);
            call.invoke::<i64>(con).map(|n| n == 1)
        })
    }

    fn get_many(&self, keys: &[String]) -> StoreResult<Vec<Option<Vec<u8>>>> {
        let mut values = Vec::with_capacity(keys.len());
        for chunk in keys.chunks(512) {
            let full: Vec<String> = chunk.iter().map(|k| self.key(k)).collect();
            let got: Vec<Option<Vec<u8>>> = self.run("MGET", Retry::Safe, |con| {
                redis::cmd("MGET").arg(&full).query(con)
            })?;
            values.extend(got);
        }
        Ok(values)
    }
}

/// The userinfo of a URL (`user:password` as written, and the password alone) and a
/// `pass=` query value: what must never be shown.
fn url_secrets(url: &str) -> Vec<String> {
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
fn redact_url(url: &str) -> String {
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

fn scrub(message: &str, secrets: &[String]) -> String {
    // Longest first, so a secret containing another is removed whole.
    let mut secrets: Vec<&String> = secrets.iter().collect();
    secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
    secrets
        .into_iter()
        .fold(message.to_owned(), |m, s| m.replace(s.as_str(), "***"))
}

/// Escapes the glob characters of `SCAN MATCH`.
fn glob_escape(s: &str) -> String {
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
        let err = RedisStore::open_with(
            url,
            RedisOptions {
                connect_timeout: Duration::from_millis(500),
                ..RedisOptions::default()
            },
        )
        .expect_err("nothing listens on port 1");
        assert!(err.0.contains("redis://127.0.0.1:1/2"), "{err}");
        for secret in ["s3cr", "s3cr%40t", "s3cr@t"] {
            assert!(!err.0.contains(secret), "{err}");
        }
        let bad = RedisStore::open("redis://:hunter2@[bad/0").expect_err("not a URL");
        assert!(!bad.0.contains("hunter2"), "{bad}");
        let unix = url_secrets("redis+unix:///run/redis.sock?db=1&pass=pw1");
        assert_eq!(unix, vec!["pw1".to_owned()]);
        assert_eq!(
            redact_url("redis+unix:///run/redis.sock?pass=pw1"),
            "redis+unix:///run/redis.sock"
        );
    }

    #[test]
    fn prefixes_are_matched_literally() {
        assert_eq!(glob_escape("a*b?[c]\\:"), "a\\*b\\?\\[c\\]\\\\:");
    }
}
