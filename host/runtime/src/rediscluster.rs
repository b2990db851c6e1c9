//! The shared store on a Redis Cluster: `edgehook serve --kv redis+cluster://host:port,...`
//! (`rediss+cluster://` over TLS). The keyspace is spread over the cluster's primaries by hash
//! slot; each primary has replicas, and a replica takes over when its primary dies.
//!
//! - **One key, one primary.** Every operation on one key (`GET`, `SET`, `DEL`, `INCRBY`, and
//!   compare-and-swap, one Lua script on one key) runs on that key's primary, so increment
//!   and compare-and-swap stay atomic as on one Redis.
//! - **Batches split by slot.** `MGET` and `MSET` of keys in several slots are split by the
//!   client into one command per slot, sent to each slot's primary at once, and their answers
//!   put back in request order. Keys are not hash-tagged: the keys the component reads
//!   together (a page of delivery records, the subscriptions of a fan-out) belong to
//!   different subscriptions and events, and one tag for them would put them all, and all the
//!   load, on one primary. A batch write is not atomic on one Redis either.
//! - **Redirections and failover, retried within [`RedisOptions::retry_for`].** What may run
//!   twice (reads, `SET`, `DEL`, `MSET`) goes through a connection whose client retries
//!   `MOVED`, `ASK`, `TRYAGAIN`, `CLUSTERDOWN`, a refused or dropped connection, with a
//!   growing pause. `INCRBY` and compare-and-swap go through a second connection that retries
//!   nothing by itself; [`RedisClusterStore`] sends them again only when the cluster's answer
//!   says they did not run (a redirection, a failover in progress, a connection refused),
//!   never after a connection broke with the command sent (it may have run: the error goes to
//!   the caller, as on one Redis).
//! - **Acknowledged means replicated, when asked** ([`RedisOptions::wait_replicas`]): each
//!   write is followed by `WAIT` in the same pipeline, on the key's primary; a batch write is
//!   one such pipeline per slot.
//! - Listing keys (`SCAN`) walks every primary.

use crate::redisstore::{
    CAS_SCRIPT, RedisOptions, Wait, cas_command, cas_on, failure, glob_escape, not_replicated,
    redact_url, scrub, tls_certificates, url_secrets, write,
};
use crate::store::{KvFuture, RemoteKv, StoreError, StoreResult};
use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo, Slot};
use redis::{Cmd, ErrorKind, FromRedisValue, RedisError, Script, ServerErrorKind, Value};
use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

/// The Redis Cluster backend (see the module docs).
pub struct RedisClusterStore {
    /// For operations that may run twice: the client retries them.
    retrying: ClusterConnection,
    /// For `INCRBY` and compare-and-swap: the client retries nothing; [`Self::once`] does,
    /// when the cluster says the command did not run.
    once: ClusterConnection,
    options: RedisOptions,
    wait: Option<Wait>,
    cas: Script,
    /// `redis+cluster://host:port,...`: how messages name the cluster.
    name: String,
    secrets: Vec<String>,
}

impl std::fmt::Debug for RedisClusterStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisClusterStore")
            .field("cluster", &self.name)
            .field("prefix", &self.options.prefix)
            .finish_non_exhaustive()
    }
}

/// The seed nodes of a `redis+cluster://[user:password@]host:port,host:port` (or
/// `rediss+cluster://`) URL, each as a URL of one node, and how messages name the cluster.
pub fn seeds(url: &str) -> Option<(Vec<String>, String)> {
    let (scheme, rest) = url.split_once("://")?;
    let node_scheme = match scheme {
        "redis+cluster" => "redis",
        "rediss+cluster" => "rediss",
        _ => return None,
    };
    let rest = rest.trim_end_matches('/');
    let (userinfo, hosts) = match rest.rsplit_once('@') {
        Some((u, h)) => (format!("{u}@"), h),
        None => (String::new(), rest),
    };
    let hosts: Vec<&str> = hosts.split(',').map(str::trim).collect();
    if hosts
        .iter()
        .any(|h| h.is_empty() || h.contains(['/', '?', '#']))
    {
        return None;
    }
    let nodes = hosts
        .iter()
        .map(|h| format!("{node_scheme}://{userinfo}{h}"))
        .collect();
    Some((nodes, format!("{scheme}://{}", hosts.join(","))))
}

/// What the cluster's answer says of a command that failed.
#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    /// It did not run (a redirection, a failover in progress, no connection made): send it
    /// again after a pause.
    NotRun,
    /// The slot is being migrated and this node does not have the key: ask that node.
    Ask(String, u16),
    /// It may have run, or failed for good: the error goes to the caller.
    Fail,
}

fn verdict(e: &RedisError) -> Verdict {
    if e.is_connection_refusal() {
        return Verdict::NotRun;
    }
    match e.kind() {
        ErrorKind::ClusterConnectionNotFound => Verdict::NotRun,
        ErrorKind::Server(
            ServerErrorKind::Moved
            | ServerErrorKind::TryAgain
            | ServerErrorKind::ClusterDown
            | ServerErrorKind::MasterDown
            | ServerErrorKind::BusyLoading
            | ServerErrorKind::ReadOnly,
        ) => Verdict::NotRun,
        ErrorKind::Server(ServerErrorKind::Ask) => match e.redirect_node() {
            Some((host_port, _)) => match host_port.rsplit_once(':') {
                Some((host, port)) => port
                    .parse()
                    .map_or(Verdict::NotRun, |p| Verdict::Ask(host.to_owned(), p)),
                None => Verdict::NotRun,
            },
            None => Verdict::NotRun,
        },
        _ => Verdict::Fail,
    }
}

impl RedisClusterStore {
    /// Connects to the cluster named by `url` (see [`seeds`]) with `options`: learns its
    /// slots from the first seed that answers, and checks a primary answers (`PING`).
    pub async fn open_with(url: &str, options: RedisOptions) -> StoreResult<Self> {
        let mut secrets = url_secrets(url);
        let invalid = |what: String| failure(scrub(&what, &secrets));
        let Some((nodes, name)) = seeds(url) else {
            return Err(invalid(format!(
                "invalid Redis Cluster URL {}: want redis+cluster://host:port,host:port",
                redact_url(url)
            )));
        };
        let certs =
            tls_certificates(&nodes[0], &options).map_err(|e| invalid(format!("{name}: {e}")))?;
        let client = |retries: u32| -> Result<ClusterClient, RedisError> {
            let mut builder = ClusterClientBuilder::new(nodes.clone())
                .connection_timeout(options.connect_timeout)
                .response_timeout(options.io_timeout)
                .overall_response_timeout(Some(options.retry_for))
                .retries(retries)
                .min_retry_wait(20)
                .max_retry_wait(500)
                .retry_wait_formula(20, 2);
            if let Some(certs) = &certs {
                builder = builder.certs(certs.clone());
            }
            builder.build()
        };
        let connect = |retries: u32| {
            let client = client(retries);
            async move {
                let client = client.map_err(|e| format!("invalid Redis Cluster URL: {e}"))?;
                client
                    .get_async_connection()
                    .await
                    .map_err(|e| format!("redis connect: {e}"))
            }
        };
        let open = async {
            // Enough retries for the bound: every pause is at most 500 ms.
            let retries = (options.retry_for.as_millis() / 20).clamp(1, 10_000) as u32;
            let retrying = connect(retries).await?;
            let once = connect(0).await?;
            Ok::<_, String>((retrying, once))
        };
        let (retrying, once) = open
            .await
            .map_err(|e| invalid(format!("{e} (cluster {name})")))?;
        secrets.retain(|s| !s.is_empty());
        let store = Self {
            retrying,
            once,
            wait: Wait::of(&options),
            options,
            cas: Script::new(CAS_SCRIPT),
            name,
            secrets,
        };
        let mut con = store.retrying.clone();
        redis::cmd("PING")
            .query_async::<String>(&mut con)
            .await
            .map_err(|e| store.error("PING", &e))?;
        Ok(store)
    }

    /// The cluster as `redis+cluster://host:port,...` (its seeds; no password): for logs.
    pub fn cluster(&self) -> &str {
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

    /// Runs a command that must not run twice (`INCRBY`, compare-and-swap: `run` sends it on
    /// the given connection and says how it ended). Sends it again, after a growing pause,
    /// only while the cluster says it did not run, for at most
    /// [`RedisOptions::retry_for`]; an `ASK` is followed to the node it names.
    async fn once<T, F, Fut>(&self, what: &str, run: F) -> StoreResult<T>
    where
        F: Fn(ClusterConnection, Option<(String, u16)>) -> Fut,
        Fut: std::future::Future<Output = redis::RedisResult<T>>,
    {
        let deadline = Instant::now() + self.options.retry_for;
        let mut pause = Duration::from_millis(10);
        let mut ask = None;
        loop {
            let e = match run(self.once.clone(), ask.take()).await {
                Ok(v) => return Ok(v),
                Err(e) => e,
            };
            match verdict(&e) {
                Verdict::Fail => return Err(self.error(what, &e)),
                Verdict::Ask(host, port) => ask = Some((host, port)),
                Verdict::NotRun => {
                    if Instant::now() + pause > deadline {
                        return Err(self.error(what, &e));
                    }
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_millis(500));
                }
            }
        }
    }

    /// Runs `cmd` (with the store's wait) on the `once` connection, or, after an `ASK`, on
    /// the node it named, behind `ASKING`.
    async fn write_once<T: FromRedisValue>(
        &self,
        mut con: ClusterConnection,
        cmd: &Cmd,
        ask: Option<(String, u16)>,
    ) -> redis::RedisResult<T> {
        let Some((host, port)) = ask else {
            return write(&mut con, cmd, self.wait).await;
        };
        let mut pipe = redis::pipe();
        pipe.cmd("ASKING").add_command(cmd.clone());
        if let Some(wait) = self.wait {
            pipe.cmd("WAIT").arg(wait.replicas()).arg(wait.timeout_ms());
        }
        let count = if self.wait.is_some() { 2 } else { 1 };
        let values = con
            .route_pipeline(
                pipe,
                1,
                count,
                SingleNodeRoutingInfo::ByAddress { host, port },
            )
            .await?;
        let mut values = values.into_iter();
        let value = T::from_redis_value(values.next().unwrap_or(Value::Nil))?;
        if let Some(wait) = self.wait {
            let acked = u32::from_redis_value(values.next().unwrap_or(Value::Nil))?;
            if acked < wait.replicas() {
                return Err(not_replicated(acked, wait));
            }
        }
        Ok(value)
    }

    /// The primaries' addresses, from `CLUSTER SLOTS`.
    async fn primaries(&self) -> StoreResult<BTreeSet<(String, u16)>> {
        let mut con = self.retrying.clone();
        let slots: Vec<Value> = redis::cmd("CLUSTER")
            .arg("SLOTS")
            .query_async(&mut con)
            .await
            .map_err(|e| self.error("CLUSTER SLOTS", &e))?;
        let mut out = BTreeSet::new();
        for range in slots {
            let Value::Array(parts) = range else { continue };
            let Some(Value::Array(primary)) = parts.get(2) else {
                continue;
            };
            let host = primary
                .first()
                .and_then(|h| String::from_redis_value(h.clone()).ok());
            let port = primary
                .get(1)
                .and_then(|p| u16::from_redis_value(p.clone()).ok());
            if let (Some(host), Some(port)) = (host, port) {
                out.insert((host, port));
            }
        }
        Ok(out)
    }

    /// Every key under the prefix after `cursor`, the `limit` smallest, from every primary
    /// (`SCAN` on each: for the rare listings, not for hot paths).
    async fn scan(&self, cursor: Option<&str>, limit: usize) -> StoreResult<Vec<String>> {
        let pattern = glob_escape(&self.options.prefix) + "*";
        let prefix = self.options.prefix.as_str();
        let mut page = BTreeSet::new();
        for (host, port) in self.primaries().await? {
            let mut scan: u64 = 0;
            loop {
                let mut cmd = redis::cmd("SCAN");
                cmd.arg(scan)
                    .arg("MATCH")
                    .arg(&pattern)
                    .arg("COUNT")
                    .arg(1000);
                let route = RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress {
                    host: host.clone(),
                    port,
                });
                let mut con = self.retrying.clone();
                let reply = con
                    .route_command(cmd, route)
                    .await
                    .map_err(|e| self.error("SCAN", &e))?;
                let (next, batch) = <(u64, Vec<Vec<u8>>)>::from_redis_value(reply)
                    .map_err(|e| self.error("SCAN", &e.into()))?;
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
                    break;
                }
                scan = next;
            }
        }
        Ok(page.into_iter().collect())
    }

    async fn mget(&self, keys: &[String]) -> StoreResult<Vec<Option<Vec<u8>>>> {
        let mut values = Vec::with_capacity(keys.len());
        for chunk in keys.chunks(512) {
            let mut mget = redis::cmd("MGET");
            for k in chunk {
                mget.arg(self.key(k));
            }
            let mut con = self.retrying.clone();
            let got: Vec<Option<Vec<u8>>> = mget
                .query_async(&mut con)
                .await
                .map_err(|e| self.error("MGET", &e))?;
            values.extend(got);
        }
        Ok(values)
    }

    /// `MSET`: split by slot by the client; with a wait, one `MSET` + `WAIT` pipeline per
    /// slot, all at once.
    async fn mset(&self, entries: &[(String, Vec<u8>)]) -> StoreResult<()> {
        if entries.is_empty() {
            return Ok(());
        }
        let Some(wait) = self.wait else {
            for chunk in entries.chunks(512) {
                let mut mset = redis::cmd("MSET");
                for (k, v) in chunk {
                    mset.arg(self.key(k)).arg(v.as_slice());
                }
                let mut con = self.retrying.clone();
                mset.query_async::<()>(&mut con)
                    .await
                    .map_err(|e| self.error("MSET", &e))?;
            }
            return Ok(());
        };
        let mut by_slot: HashMap<Slot, Cmd> = HashMap::new();
        for (k, v) in entries {
            let full = self.key(k);
            let slot = Slot::for_key(&full);
            by_slot
                .entry(slot)
                .or_insert_with(|| redis::cmd("MSET"))
                .arg(full)
                .arg(v.as_slice());
        }
        let writes = by_slot.values().map(|mset| {
            let mut con = self.retrying.clone();
            async move { write::<(), _>(&mut con, mset, Some(wait)).await }
        });
        for done in futures_util::future::join_all(writes).await {
            done.map_err(|e| self.error("MSET", &e))?;
        }
        Ok(())
    }
}

impl RemoteKv for RedisClusterStore {
    fn get<'a>(&'a self, key: &'a str) -> KvFuture<'a, Option<Vec<u8>>> {
        Box::pin(async move {
            let mut con = self.retrying.clone();
            redis::cmd("GET")
                .arg(self.key(key))
                .query_async(&mut con)
                .await
                .map_err(|e| self.error("GET", &e))
        })
    }

    fn set<'a>(&'a self, key: &'a str, value: &'a [u8]) -> KvFuture<'a, ()> {
        Box::pin(async move {
            let mut set = redis::cmd("SET");
            set.arg(self.key(key)).arg(value);
            let mut con = self.retrying.clone();
            write::<(), _>(&mut con, &set, self.wait)
                .await
                .map_err(|e| self.error("SET", &e))
        })
    }

    fn delete<'a>(&'a self, key: &'a str) -> KvFuture<'a, ()> {
        Box::pin(async move {
            let mut del = redis::cmd("DEL");
            del.arg(self.key(key));
            let mut con = self.retrying.clone();
            write::<i64, _>(&mut con, &del, self.wait)
                .await
                .map(drop)
                .map_err(|e| self.error("DEL", &e))
        })
    }

    fn list_keys<'a>(&'a self, cursor: Option<&'a str>, limit: usize) -> KvFuture<'a, Vec<String>> {
        Box::pin(self.scan(cursor, limit))
    }

    fn increment<'a>(&'a self, key: &'a str, delta: i64) -> KvFuture<'a, i64> {
        Box::pin(async move {
            let mut incr = redis::cmd("INCRBY");
            incr.arg(self.key(key)).arg(delta);
            let incr = &incr;
            self.once("INCRBY", |con, ask| self.write_once(con, incr, ask))
                .await
        })
    }

    fn compare_and_swap<'a>(
        &'a self,
        key: &'a str,
        expected: Option<&'a [u8]>,
        new: &'a [u8],
    ) -> KvFuture<'a, bool> {
        Box::pin(async move {
            let (present, expected): (&str, &[u8]) = match expected {
                Some(v) => ("1", v),
                None => ("0", b""),
            };
            let call = cas_command(&self.cas, &self.key(key), present, expected, new);
            let call = &call;
            self.once("compare-and-swap", |mut con, ask| async move {
                match ask {
                    None => cas_on(&mut con, &self.cas, call, self.wait).await,
                    // A migrating slot: the script is loaded on the node asked, then run there.
                    Some((host, port)) => {
                        let mut load = redis::cmd("SCRIPT");
                        load.arg("LOAD").arg(CAS_SCRIPT);
                        let route = RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress {
                            host: host.clone(),
                            port,
                        });
                        con.route_command(load, route).await?;
                        self.write_once::<i64>(con, call, Some((host, port)))
                            .await
                            .map(|n| n == 1)
                    }
                }
            })
            .await
        })
    }

    fn get_many<'a>(&'a self, keys: &'a [String]) -> KvFuture<'a, Vec<Option<Vec<u8>>>> {
        Box::pin(self.mget(keys))
    }

    fn set_many<'a>(&'a self, entries: &'a [(String, Vec<u8>)]) -> KvFuture<'a, ()> {
        Box::pin(self.mset(entries))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_urls_name_their_seeds() {
        let (nodes, name) =
            seeds("redis+cluster://app:pw@10.0.0.1:7000,10.0.0.2:7001").expect("a cluster URL");
        assert_eq!(
            nodes,
            vec![
                "redis://app:pw@10.0.0.1:7000".to_owned(),
                "redis://app:pw@10.0.0.2:7001".to_owned()
            ]
        );
        assert_eq!(name, "redis+cluster://10.0.0.1:7000,10.0.0.2:7001");
        let (nodes, _) = seeds("rediss+cluster://h:6380/").expect("TLS");
        assert_eq!(nodes, vec!["rediss://h:6380".to_owned()]);
        assert_eq!(seeds("redis://h:1"), None);
        assert_eq!(seeds("redis+cluster://h:1,,h:2"), None);
        assert_eq!(seeds("redis+cluster://h:1/2"), None);
    }

    #[test]
    fn slots_are_numbered_as_redis_numbers_them() {
        // `CLUSTER KEYSLOT foo` is 12182; a hash tag hashes only what is inside the braces.
        assert_eq!(Some(Slot::for_key("foo")), Slot::new(12182));
        assert_eq!(
            Slot::for_key("{user1000}.following"),
            Slot::for_key("{user1000}.followers")
        );
        assert_ne!(
            Slot::for_key("edgehook:dlv:a"),
            Slot::for_key("edgehook:dlv:b")
        );
    }

    #[test]
    fn only_answers_that_say_nothing_ran_are_sent_again() {
        let moved = RedisError::from((
            ErrorKind::Server(ServerErrorKind::Moved),
            "moved",
            "3999 127.0.0.1:6381".to_owned(),
        ));
        assert_eq!(verdict(&moved), Verdict::NotRun);
        let dropped = RedisError::from(std::io::Error::from(std::io::ErrorKind::BrokenPipe));
        assert_eq!(verdict(&dropped), Verdict::Fail);
        let refused = RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        assert_eq!(verdict(&refused), Verdict::NotRun);
        let wrong = RedisError::from((ErrorKind::Server(ServerErrorKind::ResponseError), "x"));
        assert_eq!(verdict(&wrong), Verdict::Fail);
    }
}
