//! `edgehook`: run the webhook service, and talk to a running one.

use anyhow::{Context as _, Result, bail};
use clap::{Parser, Subcommand};
use edgehook::cli::{self, Remote, keys_path, runtime};
use edgehook::listen;
use std::net::SocketAddr;
use std::path::PathBuf;

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
    Serve(edgehook::start::ServeArgs),
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
    /// Seal every stored signing secret under the server's current seal_key, in batches,
    /// with progress (after a key rotation, before dropping seal_previous_key; talks to a
    /// running server).
    Reseal(ResealArgs),
    /// Show a delivery with every attempt, or replay it (talks to a running server).
    #[command(subcommand)]
    Delivery(DeliveryCommand),
    /// Where did a load go: an event, or the events of a load id, with every delivery each
    /// made (talks to a running server).
    #[command(subcommand)]
    Event(edgehook::event::EventCommand<RemoteArgs>),
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
    /// Exit 0 when a health URL answers 200, else 1 (the container image's health check).
    Healthcheck(edgehook::healthcheck::HealthcheckArgs),
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
    /// Change a subscription's URL or event types in place, as its partner (API key).
    Update(edgehook::update::UpdateArgs),
    /// Give a subscription a new signing secret (a leak response); printed once.
    RotateSecret {
        #[command(flatten)]
        args: edgehook::rotate::RotateArgs,
        #[command(flatten)]
        remote: RemoteArgs,
    },
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

#[derive(clap::Args)]
struct ResealArgs {
    /// Subscriptions looked at per call (1 to 1000).
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u32).range(1..=1000))]
    batch: u32,
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
        Command::Serve(args) => edgehook::start::serve(args),
        Command::Listen(args) => listen(args),
        Command::Healthcheck(args) => edgehook::healthcheck::run(&args),
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
        Command::Reseal(args) => {
            let remote = operator_remote(&args.remote)?;
            runtime()?.block_on(edgehook::reseal::run(&remote, args.batch))
        }
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
            action: Some(SubscriptionCommand::RotateSecret { args, remote }),
            ..
        }) => runtime()?.block_on(edgehook::rotate::run(&operator_remote(&remote)?, &args)),
        Command::Subscription(SubscriptionArgs {
            action: Some(SubscriptionCommand::Update(args)),
            ..
        }) => runtime()?.block_on(edgehook::update::run(&args)),
        Command::Event(command) => {
            let (remote, path) = command.request();
            remote_call(remote, "GET", &path, None, &[])
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
