//! `edgehook serve`: its flags, the settings it gives the component (flags, `EDGEHOOK_<KEY>`
//! variables, `--set`, the admin token and the secrets key), the store it opens, and the
//! server's life from its first log line to a clean stop.

use crate::cli::{self, absolute, runtime};
use crate::serve::{Server, bind};
use anyhow::{Context as _, Result, bail};
use edgehook_runtime::Runtime;
use edgehook_runtime::embedded::{self, Durability};
use edgehook_runtime::log::{self, Format};
use edgehook_runtime::net::{self, NetOptions};
use edgehook_runtime::proxy::EgressProxy;
use edgehook_runtime::store::KvStore;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

/// `edgehook serve`'s flags.
#[derive(clap::Args)]
pub struct ServeArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:8080", env = "EDGEHOOK_LISTEN")]
    pub listen: SocketAddr,
    /// Directory of the embedded store (created if missing).
    #[arg(long, default_value = "edgehook-data", env = "EDGEHOOK_DATA_DIR")]
    pub data_dir: PathBuf,
    /// Bearer token for the operator API. Default: the one in <data-dir>/admin-token,
    /// generated on first start.
    #[arg(long, env = "EDGEHOOK_ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: Option<String>,
    /// Allow subscription URLs and deliveries to loopback, private and other non-public
    /// addresses and local names such as localhost; still https only, unless --allow-http
    /// too (local development and tests only; as --set allow_private_targets=true).
    #[arg(long)]
    pub allow_private_targets: bool,
    /// Allow plain http:// subscription URLs and deliveries; still to public hosts only,
    /// unless --allow-private-targets too (local development and tests only; as --set
    /// allow_http=true).
    #[arg(long)]
    pub allow_http: bool,
    /// A PEM file of extra CA certificates to trust for deliveries, and for rediss://.
    #[arg(long)]
    pub extra_ca: Option<PathBuf>,
    /// Send every delivery through this HTTP CONNECT proxy (for a static egress address):
    /// http://HOST:PORT or http://USER:PASSWORD@HOST:PORT. Targets are checked as without it,
    /// and the proxy is asked for the checked address, never a name.
    #[arg(
        long,
        value_name = "URL",
        env = "EDGEHOOK_EGRESS_PROXY",
        hide_env_values = true
    )]
    pub egress_proxy: Option<String>,
    /// Requests in flight to one receiver (scheme, host and port) at most; more wait for one
    /// of its connections. Also the idle connections kept for it.
    #[arg(long, value_name = "N", env = "EDGEHOOK_MAX_CONNECTIONS_PER_TARGET",
          default_value_t = edgehook_runtime::gate::DEFAULT_PER_TARGET as u32,
          value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub max_connections_per_target: u32,
    /// Answer and send nothing before it is on disk: the embedded store syncs before every
    /// answer and attempt (one sync shared by those in flight) instead of every 100 ms.
    #[arg(long)]
    pub fsync_always: bool,
    /// The store: the embedded one, or Redis (`--kv`).
    #[command(flatten)]
    pub kv: crate::kv::KvArgs,
    /// A component setting, as key=value (repeatable), e.g. --set attempt_timeout_ms=5000.
    /// Each can also come from the environment as EDGEHOOK_<KEY>, e.g.
    /// EDGEHOOK_ATTEMPT_TIMEOUT_MS=5000; --set wins.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub settings: Vec<String>,
    /// Answer HTTPS with this certificate chain (PEM, the leaf first); HTTP/2 and HTTP/1.1
    /// by ALPN. Read again, with --tls-key, on SIGHUP.
    #[arg(
        long,
        value_name = "FILE",
        requires = "tls_key",
        env = "EDGEHOOK_TLS_CERT"
    )]
    pub tls_cert: Option<PathBuf>,
    /// The certificate's private key (PEM).
    #[arg(
        long,
        value_name = "FILE",
        requires = "tls_cert",
        env = "EDGEHOOK_TLS_KEY"
    )]
    pub tls_key: Option<PathBuf>,
    /// Address of the Prometheus endpoint (`GET /metrics`), apart from the API's; `off`: none.
    #[arg(long, default_value = crate::metrics::DEFAULT_LISTEN, env = "EDGEHOOK_METRICS_LISTEN")]
    pub metrics_listen: String,
    /// The log (its format and level filter) and the traces.
    #[command(flatten)]
    pub log: LogArgs,
}

/// Runs the service until SIGINT or SIGTERM.
pub fn serve(args: ServeArgs) -> Result<()> {
    args.log.init()?;
    // A usage error (exit 2) naming the flag, without the value: it may hold a password.
    let egress_proxy = match args.egress_proxy.as_deref().map(EgressProxy::parse) {
        None => None,
        Some(Ok(proxy)) => Some(proxy),
        Some(Err(why)) => clap::Error::raw(
            clap::error::ErrorKind::ValueValidation,
            format!("invalid value for --egress-proxy (or EDGEHOOK_EGRESS_PROXY): {why}\n"),
        )
        .exit(),
    };
    let mut config = BTreeMap::new();
    // Every component setting can come from the environment as EDGEHOOK_<KEY> (e.g.
    // EDGEHOOK_ATTEMPT_TIMEOUT_MS); --set overrides it.
    for (key, _) in edgehook_component::model::config::KEYS {
        if let Ok(value) = std::env::var(format!("EDGEHOOK_{}", key.to_ascii_uppercase())) {
            config.insert((*key).to_owned(), value);
        }
    }
    for pair in &args.settings {
        let Some((k, v)) = pair.split_once('=') else {
            bail!("--set takes KEY=VALUE, got {pair:?}");
        };
        let key = k.trim();
        if !edgehook_component::model::config::KEYS
            .iter()
            .any(|(known, _)| *known == key)
        {
            let known: Vec<&str> = edgehook_component::model::config::KEYS
                .iter()
                .map(|(k, _)| *k)
                .collect();
            bail!(
                "--set {key}: no such setting (the settings: {})",
                known.join(", ")
            );
        }
        config.insert(key.to_owned(), v.to_owned());
    }
    // --admin-token (or EDGEHOOK_ADMIN_TOKEN), then --set admin_token=..., then the file.
    let given = |t: &String| !t.trim().is_empty();
    let (token, token_from) = match args.admin_token.clone().filter(given) {
        Some(t) => (t, "from --admin-token / EDGEHOOK_ADMIN_TOKEN".to_owned()),
        None => match config.get("admin_token").filter(|t| given(t)) {
            Some(t) => (t.clone(), "from --set admin_token".to_owned()),
            None => (
                cli::admin_token_or_create(&args.data_dir)?,
                format!(
                    "file {}",
                    absolute(&args.data_dir.join(cli::ADMIN_TOKEN_FILE)).display()
                ),
            ),
        },
    };
    config.insert("admin_token".into(), token);
    // The key signing secrets are sealed under: given, or made (cli::seal_key_for_serve).
    if !config.get("seal_key").is_some_and(given)
        && let Some(key) = cli::seal_key_for_serve(&args.data_dir, args.kv.kv.is_some())?
    {
        config.insert("seal_key".into(), key);
    }
    // Checked now, as the component will read them: a bad value stops the start (naming the
    // key, never the value) instead of failing every request.
    let check = |config: &BTreeMap<String, String>| {
        edgehook_component::model::config::Settings::from_pairs(config.iter())
            .map_err(|e| anyhow::anyhow!("invalid setting: {e}"))
    };
    check(&config)?;
    // The switches, as flags or as settings (--set, EDGEHOOK_ALLOW_HTTP, ...).
    if args.allow_http {
        config.insert("allow_http".into(), "true".into());
    }
    if args.allow_private_targets {
        config.insert("allow_private_targets".into(), "true".into());
    }
    // Traces: each attempt names its trace context and ids to the host (`trace_context`),
    // which takes them off before sending and makes the attempt's span.
    if let Some(endpoint) = args.log.otlp_endpoint.as_deref().filter(|e| !e.is_empty()) {
        let service = std::env::var("OTEL_SERVICE_NAME").unwrap_or_else(|_| "edgehook".into());
        edgehook_runtime::otlp::install(endpoint, &service).map_err(anyhow::Error::msg)?;
        config.insert("trace_context".into(), "true".into());
    }
    let settings = check(&config)?;
    let net = NetOptions {
        allow_http: settings.allow_http,
        allow_private: settings.allow_private_targets,
        extra_ca: args.extra_ca.clone(),
        egress_proxy,
        connections_per_target: args.max_connections_per_target as usize,
    };
    let rt = runtime()?;
    rt.block_on(async move {
        let (kv, file_store, store_name): (KvStore, _, _) = match &args.kv.kv {
            Some(url) => {
                let options = args.kv.options(args.extra_ca.as_deref())?;
                let (store, name) = crate::kv::open(url, options).await?;
                (KvStore::Remote(store), None, name)
            }
            None => {
                let durability = if args.fsync_always {
                    Durability::Answer
                } else {
                    Durability::DEFAULT
                };
                let dir = args.data_dir.join("store");
                let store = embedded::open(&dir, durability)
                    .with_context(|| format!("opening the store in {}", args.data_dir.display()))?;
                let name = absolute(&dir).display().to_string();
                let kv: Arc<dyn edgehook_runtime::store::KvBackend> = Arc::new(store.clone());
                (KvStore::Local(kv), Some(store), name)
            }
        };
        let mut env = crate::metrics::served_env(kv, config, &net)?;
        if args.fsync_always {
            env.outbound = edgehook_runtime::outbound::settle_first(env.kv.clone(), env.outbound);
        }
        let metrics_listener = crate::metrics::bind(&args.metrics_listen).await?;
        let endpoint = crate::metrics::Endpoint::new(Runtime::serving()?, env.clone());
        let mut server = Server::new(env)?;
        let scheme = match (&args.tls_cert, &args.tls_key) {
            (Some(cert), Some(key)) => {
                let tls = Arc::new(crate::tls::Tls::load(cert, key)?);
                crate::signals::reload_on_sighup(tls.clone());
                server = server.with_tls(tls);
                "https"
            }
            _ => "http",
        };
        let listener = bind(args.listen).await?;
        let addr = listener.local_addr()?;
        // Where things are: the first lines a newcomer reads.
        tracing::info!(
            url = %format!("{scheme}://{addr}"),
            addr = %addr,
            dataDir = %absolute(&args.data_dir).display(),
            store = %store_name,
            adminToken = %token_from,
            outbound = %net::describe(net.policy()),
            egressProxy = %net
                .egress_proxy
                .as_ref()
                .map_or("none".into(), |p| p.to_string()),
            metrics = %crate::metrics::url(metrics_listener.as_ref()),
            "listening"
        );
        if net.allow_http || net.allow_private {
            tracing::warn!(
                allowHttp = net.allow_http,
                allowPrivateTargets = net.allow_private,
                "{}",
                net::RELAXED
            );
        }
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        endpoint.spawn(metrics_listener, stop_rx.clone());
        tokio::spawn(async move {
            crate::signals::shutdown().await;
            tracing::info!("shutting down");
            let _ = stop_tx.send(true);
        });
        // `edgehook backup` asks this process for a copy of the store it has open.
        let control = file_store
            .as_ref()
            .and_then(|store| crate::control::Control::start(&args.data_dir, store.clone()));
        server.run(listener, stop_rx).await?;
        if let Some(control) = control {
            control.stop();
        }
        if let Some(store) = file_store {
            store.flush().map_err(anyhow::Error::new)?;
        }
        tracing::info!("stopped");
        edgehook_runtime::otlp::flush();
        Ok(())
    })
}

/// `serve`'s log flags (`edgehook_runtime::log`) and where its traces go
/// (`edgehook_runtime::otlp`).
#[derive(clap::Args, Clone, Debug)]
pub struct LogArgs {
    /// How log lines are written: text (short human lines) or json (a JSON object a line).
    /// Default: text on a terminal, json otherwise.
    #[arg(long, value_name = "FORMAT", env = log::FORMAT_ENV, value_parser = Format::parse)]
    pub log_format: Option<Format>,
    /// Which events are logged, RUST_LOG style: a level (error, warn, info, debug, trace)
    /// and per-target levels, e.g. info,edgehook::request=warn,wasmtime=warn. Targets of
    /// note: edgehook::request (a line per request), edgehook::delivery (a line per
    /// attempt), edgehook::component (the component's own lines, on stderr).
    #[arg(long, value_name = "FILTER", env = log::FILTER_ENV, default_value = log::DEFAULT_FILTER)]
    pub log_level: String,
    /// Export traces, a span per API request and per delivery attempt, to this OpenTelemetry
    /// collector over OTLP/HTTP (protobuf): http://HOST:PORT, spans POSTed to /v1/traces.
    /// The service's name is OTEL_SERVICE_NAME (default edgehook). Default: no traces.
    #[arg(long, value_name = "URL", env = "OTEL_EXPORTER_OTLP_ENDPOINT")]
    pub otlp_endpoint: Option<String>,
}

impl LogArgs {
    /// Sets the process's log as these flags say.
    pub fn init(&self) -> Result<()> {
        let format = self.log_format.unwrap_or_else(Format::for_stdout);
        log::init(format, &self.log_level).map_err(|e| anyhow::anyhow!("--log-level: {e}"))
    }
}
