//! `edgehook`: run the webhook service, and talk to a running one.

use anyhow::{Context as _, Result, bail};
use clap::{Parser, Subcommand};
use edgehook::cli::{self, Remote, absolute, keys_path, runtime};
use edgehook::listen;
use edgehook::serve::{Server, bind};
use edgehook_runtime::Runtime;
use edgehook_runtime::embedded::{self, Durability};
use edgehook_runtime::log::log_line;
use edgehook_runtime::net::{self, NetOptions};
use edgehook_runtime::proxy::EgressProxy;
use edgehook_runtime::store::KvStore;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

/// mimalloc rather than the system allocator: the host allocates for every request,
/// store operation and delivery, and glibc's malloc was an eighth of `serve`'s time under
/// delivery load (BENCHMARKS.md). Built without transparent huge pages (`no_thp`): with
/// them, an idle server held 113 MiB (every touched 2 MiB region resident whole); without,
/// 51 MiB (glibc: 40 MiB), at the same speed.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// edgehook: outbound webhooks as one WebAssembly component.
#[derive(Parser)]
#[command(version, after_help = EXIT_STATUS)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// What `edgehook --help` says of exit codes; `main` makes it true.
const EXIT_STATUS: &str = "Exit status:
  0    success (serve: stopped by SIGINT or SIGTERM, after a clean shutdown)
  1    failure: an error (printed on stderr), or a server answer of 400 or more
  2    usage error: an unknown command or flag, a missing or invalid value
  101  a bug (a panic); please report it";

#[derive(Subcommand)]
enum Command {
    /// Run the service: the partner API, the operator API and deliveries.
    Serve(ServeArgs),
    /// Receive deliveries locally: verify each signature and timestamp, print it, answer 200.
    Listen(ListenArgs),
    /// Issue or revoke partner API keys (talks to a running server).
    #[command(subcommand)]
    Keys(KeysCommand),
    /// Create a subscription as a partner would (`POST /v1/webhooks` with an API key); prints
    /// it with its signing secret, shown only this once.
    Subscribe(SubscribeArgs),
    /// Publish a load event (talks to a running server).
    Publish(PublishArgs),
    /// Show a subscription with its state and recent deliveries, or enable or disable it
    /// (talks to a running server).
    Subscription(SubscriptionArgs),
    /// Show a delivery with every attempt, or replay it (talks to a running server).
    #[command(subcommand)]
    Delivery(DeliveryCommand),
    /// Copy the embedded store (and the admin token) to a new data directory, consistently,
    /// while `serve` may be running on it.
    Backup {
        /// The new data directory (must not exist, or be empty).
        #[arg(long)]
        to: PathBuf,
        /// The server's data directory.
        #[arg(long, default_value = "edgehook-data", env = "EDGEHOOK_DATA_DIR")]
        data_dir: PathBuf,
    },
    /// Read a copy of the embedded store (one `edgehook backup` made, or a stopped server's)
    /// for inspection: stats, keys, values.
    #[command(subcommand)]
    Store(edgehook::inspect::StoreCommand),
    /// Replay deliveries by range (what failed or was skipped since a time, by default) and
    /// follow the job with a progress bar (talks to a running server).
    Replay(ReplayArgs),
    /// Print a one-time link to a client's portal: usable for 15 minutes, once, for a session
    /// of 12 hours (talks to a running server).
    PortalLink(PortalLinkArgs),
}

#[derive(clap::Args)]
struct PortalLinkArgs {
    /// The API client (partner) id.
    client: String,
    /// The origin partners reach the portal at, e.g. https://hooks.example.com (default:
    /// --server).
    #[arg(long, env = "EDGEHOOK_PUBLIC_URL")]
    public_url: Option<String>,
    #[command(flatten)]
    remote: RemoteArgs,
}

#[derive(clap::Args)]
struct ServeArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:8080", env = "EDGEHOOK_LISTEN")]
    listen: SocketAddr,
    /// Directory of the embedded store (created if missing).
    #[arg(long, default_value = "edgehook-data", env = "EDGEHOOK_DATA_DIR")]
    data_dir: PathBuf,
    /// Bearer token for the operator API. Default: the one in <data-dir>/admin-token,
    /// generated on first start.
    #[arg(long, env = "EDGEHOOK_ADMIN_TOKEN", hide_env_values = true)]
    admin_token: Option<String>,
    /// Allow subscription URLs and deliveries to loopback, private and other non-public
    /// addresses and local names such as localhost; still https only, unless --allow-http
    /// too (local development and tests only; as --set allow_private_targets=true).
    #[arg(long)]
    allow_private_targets: bool,
    /// Allow plain http:// subscription URLs and deliveries; still to public hosts only,
    /// unless --allow-private-targets too (local development and tests only; as --set
    /// allow_http=true).
    #[arg(long)]
    allow_http: bool,
    /// A PEM file of extra CA certificates to trust for deliveries, and for rediss://.
    #[arg(long)]
    extra_ca: Option<PathBuf>,
    /// Send every delivery through this HTTP CONNECT proxy (for a static egress address):
    /// http://HOST:PORT or http://USER:PASSWORD@HOST:PORT. Targets are checked as without it,
    /// and the proxy is asked for the checked address, never a name.
    #[arg(
        long,
        value_name = "URL",
        env = "EDGEHOOK_EGRESS_PROXY",
        hide_env_values = true
    )]
    egress_proxy: Option<String>,
    /// Requests in flight to one receiver (scheme, host and port) at most; more wait for one
    /// of its connections. Also the idle connections kept for it.
    #[arg(long, value_name = "N", env = "EDGEHOOK_MAX_CONNECTIONS_PER_TARGET",
          default_value_t = edgehook_runtime::gate::DEFAULT_PER_TARGET as u32,
          value_parser = clap::value_parser!(u32).range(1..=10_000))]
    max_connections_per_target: u32,
    /// Flush the store to disk after every write instead of every 100 ms.
    #[arg(long)]
    fsync_always: bool,
    #[command(flatten)]
    kv: edgehook::kv::KvArgs,
    /// A component setting, as key=value (repeatable), e.g. --set attempt_timeout_ms=5000.
    /// Each can also come from the environment as EDGEHOOK_<KEY>, e.g.
    /// EDGEHOOK_ATTEMPT_TIMEOUT_MS=5000; --set wins.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    settings: Vec<String>,
    /// Answer HTTPS with this certificate chain (PEM, the leaf first); HTTP/2 and HTTP/1.1
    /// by ALPN. Read again, with --tls-key, on SIGHUP.
    #[arg(
        long,
        value_name = "FILE",
        requires = "tls_key",
        env = "EDGEHOOK_TLS_CERT"
    )]
    tls_cert: Option<PathBuf>,
    /// The certificate's private key (PEM).
    #[arg(
        long,
        value_name = "FILE",
        requires = "tls_cert",
        env = "EDGEHOOK_TLS_KEY"
    )]
    tls_key: Option<PathBuf>,
    /// Address of the Prometheus endpoint (`GET /metrics`), apart from the API's; `off`: none.
    #[arg(long, default_value = edgehook::metrics::DEFAULT_LISTEN, env = "EDGEHOOK_METRICS_LISTEN")]
    metrics_listen: String,
}

#[derive(clap::Args)]
struct ListenArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:9000")]
    listen: SocketAddr,
    /// The subscription's signing secret (whsec_...).
    #[arg(long, env = "EDGEHOOK_SIGNING_SECRET", hide_env_values = true)]
    secret: String,
    /// Oldest timestamp accepted, in seconds.
    #[arg(long, default_value_t = 300)]
    tolerance: u64,
    /// Run in the background: return once the receiver accepts connections (it keeps
    /// printing deliveries here); stop it with `kill <pid>` (the pid is printed).
    #[arg(long)]
    detach: bool,
    /// The listening socket is standard input (how --detach starts the receiver).
    #[arg(long, hide = true, conflicts_with = "detach")]
    socket_on_stdin: bool,
}

#[derive(clap::Args)]
struct SubscribeArgs {
    /// The delivery URL: https:// (http:// and local addresses only where the server allows
    /// them).
    #[arg(long)]
    url: String,
    /// An event type to deliver, repeatable: load.created, load.updated,
    /// load.status_changed.
    #[arg(long = "event", value_name = "TYPE", required = true)]
    events: Vec<String>,
    /// The partner's API key (ehk_...).
    #[arg(long, env = "EDGEHOOK_API_KEY", hide_env_values = true)]
    key: String,
    /// Print only the signing secret (e.g. SECRET=$(edgehook subscribe ... --quiet)).
    #[arg(long, short)]
    quiet: bool,
    /// The server's base URL.
    #[arg(long, default_value = "http://127.0.0.1:8080", env = "EDGEHOOK_SERVER")]
    server: String,
}

#[derive(clap::Args)]
struct RemoteArgs {
    /// The server's base URL.
    #[arg(long, default_value = "http://127.0.0.1:8080", env = "EDGEHOOK_SERVER")]
    server: String,
    /// The operator token. Default: <data-dir>/admin-token.
    #[arg(long, env = "EDGEHOOK_ADMIN_TOKEN", hide_env_values = true)]
    admin_token: Option<String>,
    /// The server's data directory (to read the admin token from).
    #[arg(long, default_value = "edgehook-data", env = "EDGEHOOK_DATA_DIR")]
    data_dir: PathBuf,
}

#[derive(Subcommand)]
enum KeysCommand {
    /// Issue an API key for a client id (or, with --ingest, an ingest key); the key is
    /// printed once.
    Issue {
        /// The API client (partner) id.
        #[arg(required_unless_present = "ingest")]
        client: Option<String>,
        /// What the key may do: partner (every partner route) or partner_read (only reads).
        #[arg(long, value_parser = ["partner", "partner_read"], conflicts_with = "ingest")]
        scope: Option<String>,
        /// An ingest key: it may only publish events (POST /internal/v1/events), for no client.
        #[arg(long, conflicts_with = "client")]
        ingest: bool,
        /// Print only the API key (e.g. KEY=$(edgehook keys issue acme --quiet)).
        #[arg(long, short)]
        quiet: bool,
        #[command(flatten)]
        remote: RemoteArgs,
    },
    /// List a client's API keys (or, with --ingest, the ingest keys): id, scope, created,
    /// last used (to the hour), revoked. Never the keys themselves.
    List {
        /// The API client id.
        #[arg(required_unless_present = "ingest")]
        client: Option<String>,
        /// List the ingest keys.
        #[arg(long, conflicts_with = "client")]
        ingest: bool,
        #[command(flatten)]
        remote: RemoteArgs,
    },
    /// Revoke an API key at once (an ingest key: `keys revoke --ingest KEY_ID`).
    Revoke {
        /// The API client id, then the key id (key_...); with --ingest, the key id only.
        #[arg(required = true, num_args = 1..=2, value_names = ["CLIENT", "KEY_ID"])]
        ids: Vec<String>,
        /// Revoke an ingest key.
        #[arg(long)]
        ingest: bool,
        #[command(flatten)]
        remote: RemoteArgs,
    },
}

#[derive(clap::Args)]
struct PublishArgs {
    /// Event type: load.created, load.updated or load.status_changed.
    #[arg(long = "type")]
    event_type: String,
    /// File with the load JSON; '-' or nothing reads standard input.
    file: Option<PathBuf>,
    /// Idempotency key: publishing again with it does not deliver twice.
    #[arg(long)]
    idempotency_key: Option<String>,
    #[command(flatten)]
    remote: RemoteArgs,
}

#[derive(clap::Args)]
struct IdArgs {
    /// The id.
    id: String,
    #[command(flatten)]
    remote: RemoteArgs,
}

#[derive(clap::Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
struct SubscriptionArgs {
    #[command(subcommand)]
    action: Option<SubscriptionCommand>,
    /// The subscription id (sub_...) to show.
    #[arg(required = true)]
    id: Option<String>,
    #[command(flatten)]
    remote: RemoteArgs,
}

#[derive(Subcommand)]
enum SubscriptionCommand {
    /// Enable a disabled subscription again (its failure count starts from 0; a deleted
    /// one cannot be).
    Enable(IdArgs),
    /// Disable a subscription and cancel its pending deliveries.
    Disable(DisableArgs),
}

#[derive(clap::Args)]
struct DisableArgs {
    /// The subscription id (sub_...).
    id: String,
    /// The reason its owner will see: 1 to 64 characters of a-z, 0-9 and '_' (default
    /// operator).
    #[arg(long)]
    reason: Option<String>,
    #[command(flatten)]
    remote: RemoteArgs,
}

#[derive(clap::Args)]
struct ReplayArgs {
    /// A subscription (sub_...) whose deliveries to replay; repeat for several (up to 100,
    /// any clients'). Without one: every subscription's (see --client).
    #[arg(long = "subscription")]
    subscriptions: Vec<String>,
    /// Without --subscription: only this client's subscriptions.
    #[arg(long, conflicts_with = "subscriptions")]
    client: Option<String>,
    /// Deliveries created since: a duration back from now (90s, 30m, 2h, 7d) or
    /// milliseconds since the Unix epoch.
    #[arg(long)]
    since: String,
    /// ... and before (same forms; default: now).
    #[arg(long)]
    until: Option<String>,
    /// A status to replay; repeat for several (default: failed and skipped).
    #[arg(long = "status", value_parser = ["failed", "skipped", "delivered", "cancelled"])]
    statuses: Vec<String>,
    /// Only this event type; repeat for several (default: all).
    #[arg(long = "event-type")]
    event_types: Vec<String>,
    /// Print the new job and return; the server runs it either way.
    #[arg(long)]
    no_wait: bool,
    #[command(flatten)]
    remote: RemoteArgs,
}

#[derive(Subcommand)]
enum DeliveryCommand {
    /// Show a delivery with every attempt.
    Show(IdArgs),
    /// Replay a finished delivery (same id and body, fresh signature).
    Replay(IdArgs),
}

fn main() {
    let outcome = run(Cli::parse());
    // Log lines are written by a thread of their own: let it finish before the process ends.
    edgehook_runtime::log::flush();
    if let Err(e) = outcome {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Serve(args) => serve(args),
        Command::Listen(args) => listen(args),
        Command::Keys(KeysCommand::Issue {
            client,
            scope,
            ingest,
            quiet,
            remote,
        }) => {
            let client = if ingest { None } else { client.as_deref() };
            let (body, headers) = match scope {
                None => (None, Vec::new()),
                Some(scope) => (
                    Some(serde_json::to_vec(&serde_json::json!({ "scope": scope }))?),
                    vec![("content-type".to_owned(), "application/json".to_owned())],
                ),
            };
            let (status, text) =
                remote_answer(&remote, "POST", &keys_path(client), body, &headers)?;
            cli::print_answer(status, &text, quiet.then_some("apiKey"))
        }
        Command::Keys(KeysCommand::List {
            client,
            ingest,
            remote,
        }) => {
            let client = if ingest { None } else { client.as_deref() };
            let path = format!("{}?limit=100", keys_path(client));
            remote_call(&remote, "GET", &path, None, &[])
        }
        Command::Subscribe(args) => subscribe(args),
        Command::Replay(args) => replay(args),
        Command::Store(command) => edgehook::inspect::run(command),
        Command::Backup { to, data_dir } => {
            println!("{}", cli::backup(&data_dir, &to)?);
            Ok(())
        }
        Command::Keys(KeysCommand::Revoke {
            ids,
            ingest,
            remote,
        }) => {
            let (client, key_id) = match (ingest, ids.as_slice()) {
                (false, [client, key_id]) => (Some(client.as_str()), key_id),
                (true, [key_id]) => (None, key_id),
                (false, _) => bail!("keys revoke takes CLIENT KEY_ID"),
                (true, _) => bail!("keys revoke --ingest takes KEY_ID only"),
            };
            let path = format!("{}/{}", keys_path(client), cli::segment(key_id));
            remote_call(&remote, "DELETE", &path, None, &[])
        }
        Command::Publish(args) => {
            let body = cli::read_input(args.file.as_deref())?;
            let mut headers = vec![
                ("content-type".to_owned(), "application/json".to_owned()),
                ("x-service-event".to_owned(), args.event_type.clone()),
            ];
            if let Some(k) = args.idempotency_key {
                headers.push(("idempotency-key".to_owned(), k));
            }
            remote_call(
                &args.remote,
                "POST",
                "/internal/v1/events",
                Some(body),
                &headers,
            )
        }
        Command::Subscription(SubscriptionArgs {
            action: Some(SubscriptionCommand::Enable(args)),
            ..
        }) => remote_call(
            &args.remote,
            "POST",
            &format!(
                "/internal/v1/subscriptions/{}/enable",
                cli::segment(&args.id)
            ),
            None,
            &[],
        ),
        Command::Subscription(SubscriptionArgs {
            action: Some(SubscriptionCommand::Disable(args)),
            ..
        }) => {
            let (body, headers) = match &args.reason {
                None => (None, Vec::new()),
                Some(reason) => (
                    Some(serde_json::to_vec(
                        &serde_json::json!({ "reason": reason }),
                    )?),
                    vec![("content-type".to_owned(), "application/json".to_owned())],
                ),
            };
            remote_call(
                &args.remote,
                "POST",
                &format!(
                    "/internal/v1/subscriptions/{}/disable",
                    cli::segment(&args.id)
                ),
                body,
                &headers,
            )
        }
        Command::Subscription(SubscriptionArgs {
            action: None,
            id,
            remote,
        }) => {
            let id = id.context("a subscription id")?;
            remote_call(
                &remote,
                "GET",
                &format!("/internal/v1/subscriptions/{}", cli::segment(&id)),
                None,
                &[],
            )?;
            remote_call(
                &remote,
                "GET",
                &format!(
                    "/internal/v1/subscriptions/{}/deliveries?limit=20",
                    cli::segment(&id)
                ),
                None,
                &[],
            )
        }
        Command::Delivery(DeliveryCommand::Show(args)) => remote_call(
            &args.remote,
            "GET",
            &format!("/internal/v1/deliveries/{}", cli::segment(&args.id)),
            None,
            &[],
        ),
        Command::PortalLink(args) => {
            let path = format!(
                "/internal/v1/clients/{}/portal-links",
                cli::segment(&args.client)
            );
            let (status, text) = remote_answer(&args.remote, "POST", &path, None, &[])?;
            let origin = args.public_url.as_deref().unwrap_or(&args.remote.server);
            cli::print_portal_link(status, &text, origin)
        }
        Command::Delivery(DeliveryCommand::Replay(args)) => remote_call(
            &args.remote,
            "POST",
            &format!("/internal/v1/deliveries/{}/replay", cli::segment(&args.id)),
            None,
            &[],
        ),
    }
}

fn remote_call(
    remote: &RemoteArgs,
    method: &str,
    path: &str,
    body: Option<Vec<u8>>,
    headers: &[(String, String)],
) -> Result<()> {
    let (status, text) = remote_answer(remote, method, path, body, headers)?;
    cli::print_answer(status, &text, None)
}

/// One operator call: the answer's status and its (pretty-printed) body.
fn remote_answer(
    remote: &RemoteArgs,
    method: &str,
    path: &str,
    body: Option<Vec<u8>>,
    headers: &[(String, String)],
) -> Result<(u16, String)> {
    let remote = operator_remote(remote)?;
    runtime()?.block_on(remote.call(method, path, body, headers))
}

/// The server of an operator command, with the operator token.
fn operator_remote(remote: &RemoteArgs) -> Result<Remote> {
    let token = match &remote.admin_token {
        Some(t) => t.clone(),
        None => cli::read_admin_token(&remote.data_dir).with_context(|| {
            format!(
                "no admin token: pass --admin-token, set EDGEHOOK_ADMIN_TOKEN, or run this where \
                 {}/admin-token exists (edgehook serve writes it on first start)",
                remote.data_dir.display()
            )
        })?,
    };
    Remote::new(&remote.server, &token)
}

fn replay(args: ReplayArgs) -> Result<()> {
    let now = u64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_millis(),
    )?;
    let request = edgehook::replay::Request {
        subscriptions: args.subscriptions,
        client: args.client,
        since: edgehook::replay::parse_time(&args.since, now)?,
        until: args
            .until
            .as_deref()
            .map(|u| edgehook::replay::parse_time(u, now))
            .transpose()?,
        statuses: args.statuses,
        event_types: args.event_types,
    };
    let remote = operator_remote(&args.remote)?;
    runtime()?.block_on(edgehook::replay::run(&remote, request, args.no_wait))
}

fn subscribe(args: SubscribeArgs) -> Result<()> {
    let partner = Remote::new(&args.server, &args.key)?;
    let body = serde_json::json!({"url": args.url, "eventTypes": args.events}).to_string();
    let headers = [("content-type".to_owned(), "application/json".to_owned())];
    let (status, text) = runtime()?.block_on(partner.call(
        "POST",
        "/v1/webhooks",
        Some(body.into_bytes()),
        &headers,
    ))?;
    cli::print_answer(status, &text, args.quiet.then_some("signingSecret"))
}

fn listen(args: ListenArgs) -> Result<()> {
    if args.detach {
        let (addr, pid) = listen::detach(args.listen, &args.secret, args.tolerance)?;
        eprintln!(
            "edgehook listen: receiving on {addr} in the background, pid {pid} (stop it with: \
             kill {pid})"
        );
        return Ok(());
    }
    let rt = runtime()?;
    if args.socket_on_stdin {
        return rt.block_on(listen::run_on_stdin(args.secret, args.tolerance));
    }
    rt.block_on(listen::run(args.listen, args.secret, args.tolerance))
}

fn serve(args: ServeArgs) -> Result<()> {
    // A usage error (exit 2) naming the flag, without the value: it may hold a password.
    let egress_proxy = match args.egress_proxy.as_deref().map(EgressProxy::parse) {
        None => None,
        Some(Ok(proxy)) => Some(proxy),
        Some(Err(why)) => <Cli as clap::CommandFactory>::command()
            .error(
                clap::error::ErrorKind::ValueValidation,
                format!("invalid value for --egress-proxy (or EDGEHOOK_EGRESS_PROXY): {why}"),
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
                let (store, name) = edgehook::kv::open(url, options).await?;
                (KvStore::Remote(store), None, name)
            }
            None => {
                let durability = if args.fsync_always {
                    Durability::Always
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
        let env = edgehook::metrics::served_env(kv, config, &net)?;
        let metrics_listener = edgehook::metrics::bind(&args.metrics_listen).await?;
        let endpoint = edgehook::metrics::Endpoint::new(Runtime::serving()?, env.clone());
        let mut server = Server::new(env)?;
        let scheme = match (&args.tls_cert, &args.tls_key) {
            (Some(cert), Some(key)) => {
                let tls = Arc::new(edgehook::tls::Tls::load(cert, key)?);
                edgehook::signals::reload_on_sighup(tls.clone());
                server = server.with_tls(tls);
                "https"
            }
            _ => "http",
        };
        let listener = bind(args.listen).await?;
        let addr = listener.local_addr()?;
        // Where things are: the first lines a newcomer reads.
        log_line(
            "info",
            "listening",
            &[
                ("url", format!("{scheme}://{addr}")),
                ("addr", addr.to_string()),
                ("dataDir", absolute(&args.data_dir).display().to_string()),
                ("store", store_name),
                ("adminToken", token_from),
                ("outbound", net::describe(net.policy()).to_owned()),
                (
                    "egressProxy",
                    net.egress_proxy
                        .as_ref()
                        .map_or("none".into(), |p| p.to_string()),
                ),
                ("metrics", edgehook::metrics::url(metrics_listener.as_ref())),
            ],
        );
        if net.allow_http || net.allow_private {
            log_line(
                "warn",
                net::RELAXED,
                &[
                    ("allowHttp", net.allow_http.to_string()),
                    ("allowPrivateTargets", net.allow_private.to_string()),
                ],
            );
        }
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        endpoint.spawn(metrics_listener, stop_rx.clone());
        tokio::spawn(async move {
            edgehook::signals::shutdown().await;
            log_line("info", "shutting down", &[]);
            let _ = stop_tx.send(true);
        });
        // `edgehook backup` asks this process for a copy of the store it has open.
        let control = file_store
            .as_ref()
            .and_then(|store| edgehook::control::Control::start(&args.data_dir, store.clone()));
        server.run(listener, stop_rx).await?;
        if let Some(control) = control {
            control.stop();
        }
        if let Some(store) = file_store {
            store.flush().map_err(anyhow::Error::new)?;
        }
        log_line("info", "stopped", &[]);
        Ok(())
    })
}
