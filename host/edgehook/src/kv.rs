//! `serve`'s Redis flags (`--kv` and the `--kv-*` that tune it) and the store they open: one
//! Redis ([`RedisStore`]) or a Redis Cluster ([`RedisClusterStore`]).

use anyhow::{Context as _, Result, bail};
use edgehook_runtime::rediscluster::RedisClusterStore;
use edgehook_runtime::redisstore::{RedisOptions, RedisStore};
use edgehook_runtime::store::RemoteKv;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// What `--kv` says of the store's address.
pub const KV_FORMS: &str = "redis://[:password@]host:port[/db], rediss://... (TLS), \
     redis+unix:///path, or a Redis Cluster's seeds: redis+cluster://[:password@]host:port,host:port \
     (rediss+cluster:// for TLS)";

/// `serve`'s Redis flags.
#[derive(clap::Args, Debug, Clone)]
pub struct KvArgs {
    /// Keep the state in Redis instead of the embedded store, so several instances share it
    /// (the admin token file stays in --data-dir): redis://[:password@]host:port[/db],
    /// rediss://... (TLS: the webpki roots and --extra-ca are trusted), redis+unix:///path, or
    /// a Redis Cluster: redis+cluster://[:password@]host:port,host:port,... (any of its nodes;
    /// rediss+cluster:// for TLS).
    #[arg(long, value_name = "URL", env = "EDGEHOOK_KV", hide_env_values = true)]
    pub kv: Option<String>,
    /// Prefix of every key in Redis (with --kv), so one Redis can hold several things.
    #[arg(long, default_value = "edgehook:", env = "EDGEHOOK_KV_PREFIX")]
    pub kv_prefix: String,
    /// Acknowledge a write to the component only once this many replicas have it (Redis
    /// `WAIT` after every write, on the key's primary): a primary that dies then takes no
    /// acknowledged write with it. 0 (default): Redis's asynchronous replication. A write
    /// not replicated in time fails (and a publish answers 503, to be retried).
    #[arg(
        long,
        value_name = "N",
        default_value_t = 0,
        env = "EDGEHOOK_KV_WAIT_REPLICAS"
    )]
    pub kv_wait_replicas: u32,
    /// How long a write waits for --kv-wait-replicas, in milliseconds.
    #[arg(
        long,
        value_name = "MS",
        default_value_t = 1000,
        env = "EDGEHOOK_KV_WAIT_TIMEOUT_MS",
        value_parser = clap::value_parser!(u64).range(1..)
    )]
    pub kv_wait_timeout_ms: u64,
    /// A Redis Cluster: how long a store operation is retried through redirections and a
    /// failover before it fails, in milliseconds (more than the cluster's
    /// cluster-node-timeout, 15 s by default, plus an election).
    #[arg(
        long,
        value_name = "MS",
        default_value_t = 20_000,
        env = "EDGEHOOK_KV_RETRY_FOR_MS"
    )]
    pub kv_retry_for_ms: u64,
}

impl KvArgs {
    /// The options the flags say, with `extra_ca` (the PEM file of `--extra-ca`) trusted for
    /// `rediss://`.
    pub fn options(&self, extra_ca: Option<&Path>) -> Result<RedisOptions> {
        let extra_ca = match extra_ca {
            Some(path) => {
                Some(std::fs::read(path).with_context(|| format!("reading {}", path.display()))?)
            }
            None => None,
        };
        Ok(RedisOptions {
            prefix: self.kv_prefix.clone(),
            wait_replicas: self.kv_wait_replicas,
            wait_timeout: Duration::from_millis(self.kv_wait_timeout_ms),
            retry_for: Duration::from_millis(self.kv_retry_for_ms),
            extra_ca,
            ..RedisOptions::default()
        })
    }
}

/// Opens the Redis store at `url` (one of [`KV_FORMS`]) with `options`: the store, and how
/// the start line names it.
pub async fn open(url: &str, options: RedisOptions) -> Result<(Arc<dyn RemoteKv>, String)> {
    let wait = match options.wait_replicas {
        0 => String::new(),
        n => format!(", writes wait for {n} replica(s)"),
    };
    if url.starts_with("redis+cluster://") || url.starts_with("rediss+cluster://") {
        let store = RedisClusterStore::open_with(url, options).await?;
        let name = format!(
            "{} (Redis Cluster, prefix {}{wait})",
            store.cluster(),
            store.prefix()
        );
        return Ok((Arc::new(store), name));
    }
    if !["redis://", "rediss://", "redis+unix://"]
        .iter()
        .any(|scheme| url.starts_with(scheme))
    {
        bail!("--kv takes {KV_FORMS}");
    }
    let store = RedisStore::open_with(url, options).await?;
    let name = format!("{} (prefix {}{wait})", store.server(), store.prefix());
    Ok((Arc::new(store), name))
}
