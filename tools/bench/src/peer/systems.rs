//! The two systems of the peer section, each started as its docs say for one node and driven
//! through its own API: `edgehook serve` on its default (embedded) store, and Svix's server
//! on PostgreSQL with its Redis queue, the one its docs recommend for production.
//!
//! A [`Group`] is what owns endpoints on each: an edgehook client (an API key) whose
//! subscriptions take one event type, or a Svix application (endpoints without filters
//! take every message of their application).

use super::procs::{Procs, listening, start_postgres, start_redis};
use super::traffic::{Scheme, connect};
use anyhow::{Context as _, Result, bail, ensure};
use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// The environment variable that makes the bench run `edgehook serve` instead (the section
/// starts itself with it, so `serve` is a process of its own whose CPU can be counted).
pub const AS_SERVE: &str = "EDGEHOOK_BENCH_AS_SERVE";

/// Svix's pinned commit (BENCHMARKS.md, "Side by side with Svix").
pub const SVIX_COMMIT: &str = "4fc0cfb8b426c87ef7e2b937e7d896a71d456a47";

/// Which system.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `edgehook serve`.
    Edgehook,
    /// Svix's server.
    Svix,
}

impl Kind {
    /// Its name in the table.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Edgehook => "edgehook",
            Kind::Svix => "svix",
        }
    }
}

/// A system's API: where it is and the token its operator calls with; makes its requests.
#[derive(Clone)]
pub struct Api {
    /// Which system.
    pub kind: Kind,
    /// The API's port on 127.0.0.1.
    pub port: u16,
    /// edgehook's admin token, or a Svix organization's JWT.
    token: String,
}

/// A running system: its API and its processes.
pub struct System {
    /// Its API.
    pub api: Api,
    /// Its parts by name (`serve`; Svix's `server`, `postgres`, `redis`) and their pids.
    pub parts: Vec<(&'static str, u32)>,
    /// Stopped on drop.
    _procs: Procs,
}

impl System {
    /// Every pid of the system (roots of its process trees).
    pub fn pids(&self) -> Vec<u32> {
        self.parts.iter().map(|(_, pid)| *pid).collect()
    }
}

/// What owns endpoints: an edgehook client or a Svix application.
#[derive(Clone)]
pub struct Group {
    /// The client's name, or the application's id.
    id: String,
    /// The client's API key (edgehook).
    key: String,
    /// The event type its subscriptions take and its events have.
    event: &'static str,
}

/// Where Svix's server binary is: `$EDGEHOOK_BENCH_SVIX`, else `<repo>/../svix-target/release/svix-server`.
pub fn svix_binary() -> Result<PathBuf> {
    let path = match std::env::var_os("EDGEHOOK_BENCH_SVIX") {
        Some(p) => PathBuf::from(p),
        None => {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../svix-target/release/svix-server")
        }
    };
    ensure!(
        path.exists(),
        "no Svix server at {}: the peer section needs the server of svix/svix-webhooks at \
         commit {SVIX_COMMIT}, built outside this tree; set EDGEHOOK_BENCH_SVIX to its binary \
         (BENCHMARKS.md, \"Side by side with Svix\")",
        path.display()
    );
    Ok(path)
}

/// `edgehook serve` as a process of its own (this binary with [`AS_SERVE`]), on its
/// default store in a fresh directory, with the flags a loopback receiver needs and the
/// limits out of the way, its log at its default level. With
/// `EDGEHOOK_BENCH_PEER_FSYNC_ALWAYS=1`, `--fsync-always` (each write on disk before its
/// answer, as PostgreSQL commits Svix's).
pub async fn start_edgehook() -> Result<System> {
    let mut procs = Procs::default();
    let dir = procs.dir("edgehook")?;
    let port = edgehook_testkit::free_port();
    let mut cmd = Command::new(std::env::current_exe()?);
    cmd.env(AS_SERVE, "1")
        .env_remove("EDGEHOOK_LOG")
        .current_dir(&dir)
        .args(["--listen", &format!("127.0.0.1:{port}"), "--data-dir"])
        .arg(dir.join("data"))
        .args(["--admin-token", "bench", "--metrics-listen", "off"])
        .args(["--allow-private-targets", "--allow-http"])
        .args(["--set", "subscription_limit=100000"])
        .args(["--set", "rate_limit_per_minute=1000000"]);
    if std::env::var("EDGEHOOK_BENCH_PEER_FSYNC_ALWAYS").as_deref() == Ok("1") {
        cmd.arg("--fsync-always");
    }
    let pid = procs.spawn("serve", cmd, &dir)?;
    listening(&mut procs, "serve", port, Duration::from_secs(60)).await?;
    Ok(System {
        api: Api {
            kind: Kind::Edgehook,
            port,
            token: "bench".into(),
        },
        parts: vec![("serve", pid)],
        _procs: procs,
    })
}

/// PostgreSQL, Redis and Svix's server at `binary`, configured as Svix's README and
/// `config.default.toml` say for one node: Redis queue (persistence on), memory cache, the
/// default pools and worker, loopback receivers allowed (`whitelist_subnets`), migrations
/// run at start; and an organization's JWT made by `svix-server jwt generate`.
pub async fn start_svix(binary: &Path) -> Result<System> {
    let mut procs = Procs::default();
    let (pg_port, pg_pid) = start_postgres(&mut procs)?;
    let (redis_port, redis_pid) = start_redis(&mut procs)?;
    listening(&mut procs, "postgres", pg_port, Duration::from_secs(60)).await?;
    listening(&mut procs, "redis", redis_port, Duration::from_secs(30)).await?;
    let dir = procs.dir("svix")?;
    let port = edgehook_testkit::free_port();
    let env = [
        ("SVIX_JWT_SECRET", "bench-peer-jwt-secret-0123456789abcdef"),
        (
            "SVIX_DB_DSN",
            &format!("postgresql://postgres@127.0.0.1:{pg_port}/postgres"),
        ),
        ("SVIX_REDIS_DSN", &format!("redis://127.0.0.1:{redis_port}")),
        ("SVIX_QUEUE_TYPE", "redis"),
        ("SVIX_CACHE_TYPE", "memory"),
        ("SVIX_LISTEN_ADDRESS", &format!("127.0.0.1:{port}")),
        ("SVIX_WHITELIST_SUBNETS", "[127.0.0.1/32]"),
    ];
    let command = |args: &[&str]| {
        let mut cmd = Command::new(binary);
        cmd.current_dir(&dir).args(args);
        for (k, v) in &env {
            cmd.env(k, v);
        }
        cmd
    };
    let pid = procs.spawn(
        "server",
        command(&["--run-migrations", "--wait-for", "60"]),
        &dir,
    )?;
    listening(&mut procs, "server", port, Duration::from_secs(180)).await?;
    let out = command(&["jwt", "generate"]).output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let Some(token) = text
        .lines()
        .find_map(|l| l.strip_prefix("Token (Bearer): "))
    else {
        bail!(
            "svix-server jwt generate gave no token: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let system = System {
        api: Api {
            kind: Kind::Svix,
            port,
            token: token.trim().to_owned(),
        },
        parts: vec![("server", pid), ("postgres", pg_pid), ("redis", redis_pid)],
        _procs: procs,
    };
    // Its database, queue and cache answering.
    let health = system.api.request("GET", "/api/v1/health", "", "");
    system.api.call(health, 200).await?;
    Ok(system)
}

impl Api {
    /// A request to this system with a bearer token (none if `bearer` is empty).
    pub fn request(
        &self,
        method: &str,
        path: &str,
        bearer: &str,
        body: &str,
    ) -> http::Request<Full<Bytes>> {
        let mut r = http::Request::builder()
            .method(method)
            .uri(path)
            .header("host", "127.0.0.1")
            .header("content-type", "application/json");
        if !bearer.is_empty() {
            r = r.header("authorization", format!("Bearer {bearer}"));
        }
        r.body(Full::new(Bytes::from(body.to_owned())))
            .expect("a valid request")
    }

    /// Sends `req` on a new connection; fails unless it answers `want`. The JSON body
    /// (`null` when empty).
    async fn call(&self, req: http::Request<Full<Bytes>>, want: u16) -> Result<serde_json::Value> {
        let what = format!("{} {} {}", self.kind.name(), req.method(), req.uri());
        let mut conn = connect(self.port).await?;
        let resp = conn.send_request(req).await?;
        let status = resp.status().as_u16();
        let body = resp.into_body().collect().await?.to_bytes();
        ensure!(
            status == want,
            "{what}: wanted {want}, got {status} {}",
            String::from_utf8_lossy(&body)
        );
        if body.is_empty() {
            return Ok(serde_json::Value::Null);
        }
        serde_json::from_slice(&body).with_context(|| what.clone())
    }

    /// A new group named `name` whose endpoints take `event`.
    pub async fn group(&self, name: &str, event: &'static str) -> Result<Group> {
        match self.kind {
            Kind::Edgehook => {
                let path = format!("/internal/v1/clients/{name}/keys");
                let v = self.call(self.request("POST", &path, &self.token, ""), 201);
                let key = v.await?["data"]["apiKey"]
                    .as_str()
                    .context("apiKey")?
                    .to_owned();
                Ok(Group {
                    id: name.to_owned(),
                    key,
                    event,
                })
            }
            Kind::Svix => {
                let body = format!(r#"{{"name":"{name}"}}"#);
                let req = self.request("POST", "/api/v1/app", &self.token, &body);
                let v = self.call(req, 201).await?;
                Ok(Group {
                    id: v["id"].as_str().context("app id")?.to_owned(),
                    key: String::new(),
                    event,
                })
            }
        }
    }

    /// Adds an endpoint at `url` to `group`; how its deliveries are signed.
    pub async fn endpoint(&self, group: &Group, url: &str) -> Result<Scheme> {
        let v = self.call(self.create(group, url), 201).await?;
        match self.kind {
            Kind::Edgehook => {
                let secret = v["data"]["signingSecret"].as_str().context("secret")?;
                Ok(Scheme::Edgehook(secret.to_owned()))
            }
            Kind::Svix => {
                let id = v["id"].as_str().context("endpoint id")?;
                let path = format!("/api/v1/app/{}/endpoint/{id}/secret", group.id);
                let secret = self
                    .call(self.request("GET", &path, &self.token, ""), 200)
                    .await?;
                let key = secret["key"].as_str().context("endpoint secret")?;
                Ok(Scheme::Standard(key.to_owned()))
            }
        }
    }

    /// The request that creates an endpoint at `url` in `group`.
    pub fn create(&self, group: &Group, url: &str) -> http::Request<Full<Bytes>> {
        match self.kind {
            Kind::Edgehook => {
                let body = format!(r#"{{"url":"{url}","eventTypes":["{}"]}}"#, group.event);
                self.request("POST", "/v1/webhooks", &group.key, &body)
            }
            Kind::Svix => {
                let path = format!("/api/v1/app/{}/endpoint", group.id);
                let body = format!(r#"{{"url":"{url}"}}"#);
                self.request("POST", &path, &self.token, &body)
            }
        }
    }

    /// The request that lists `group`'s endpoints, up to 50.
    pub fn list(&self, group: &Group) -> http::Request<Full<Bytes>> {
        match self.kind {
            Kind::Edgehook => self.request("GET", "/v1/webhooks?limit=50", &group.key, ""),
            Kind::Svix => {
                let path = format!("/api/v1/app/{}/endpoint?limit=50", group.id);
                self.request("GET", &path, &self.token, "")
            }
        }
    }

    /// The request that publishes `load` (a JSON object) to `group`'s endpoints.
    pub fn publish(&self, group: &Group, load: &str) -> http::Request<Full<Bytes>> {
        match self.kind {
            Kind::Edgehook => {
                let mut r = self.request("POST", "/internal/v1/events", &self.token, load);
                let event = http::HeaderValue::from_static(group.event);
                r.headers_mut().insert("x-service-event", event);
                r
            }
            Kind::Svix => {
                let path = format!("/api/v1/app/{}/msg", group.id);
                let body = format!(r#"{{"eventType":"{}","payload":{load}}}"#, group.event);
                self.request("POST", &path, &self.token, &body)
            }
        }
    }
}

/// `edgehook serve` with the flags after the program's name: what this binary does when
/// [`AS_SERVE`] is set.
pub fn run_as_serve() -> Result<()> {
    use clap::Parser as _;
    /// `edgehook serve`'s flags.
    #[derive(clap::Parser)]
    struct AsServe {
        #[command(flatten)]
        serve: edgehook::start::ServeArgs,
    }
    let outcome = edgehook::start::serve(AsServe::parse().serve);
    edgehook_runtime::log::flush();
    outcome
}
