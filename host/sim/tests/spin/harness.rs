//! The Spin suite's harness: the test kit's receiver over HTTPS, and [`Walk`], which sends the steps to one
//! Spin application and collects failures by step name. (Whether it can run, and what
//! happens without Spin or Redis: [`edgehook_testkit::spin`], [`edgehook_testkit::skipped`].)

use bytes::Bytes;
use edgehook_sim::spin::{self, SpinApp, SpinOptions};
use edgehook_testkit::http::HttpClient;
use edgehook_testkit::receiver::Answer;
pub use edgehook_testkit::receiver::Received;
use edgehook_testkit::redis::{RedisServer, redis_installed, start_redis};
use edgehook_testkit::spin::binary_or_skip;
use edgehook_testkit::{POLL, skipped};
use http_body_util::Full;
use serde_json::Value;
use std::path::PathBuf;
use std::time::Duration;

/// The admin token the walks give Spin.
pub const ADMIN: &str = "spin-suite-admin-token";
/// The suite's sealing key (`seal_key`, required by the manifest).
pub const SEAL_KEY: &str = "5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed";
/// How long a delivery may take to arrive, or an operator view to show a change (well under
/// a second when all is well).
pub const WAIT: Duration = Duration::from_secs(20);

// ---------------------------------------------------------------------------------------
// The receiver: the test kit's, over HTTPS on 127.0.0.1, answering by path

/// The test kit's receiver over HTTPS on a free port of 127.0.0.1 (certificate for
/// `127.0.0.1` issued by a fresh CA), every request kept. Paths `/ok/...` answer 200,
/// `/fail/...` 500, `/gone/...` 410, `/flaky/...` 500 to its first request and 200 after,
/// `/back/...` 500 to its first three (one delivery's attempts) and 200 after, others 404.
pub struct Receiver(edgehook_testkit::receiver::Receiver);

/// The answer to `request` by its path, `earlier` the requests before it.
fn by_path(request: &Received, earlier: &[Received]) -> Answer {
    let seen = earlier.iter().filter(|r| r.path == request.path).count();
    let status = match request.path.split('/').nth(1) {
        Some("ok") => 200,
        Some("fail") => 500,
        Some("gone") => 410,
        Some("flaky") if seen == 0 => 500,
        Some("flaky") => 200,
        Some("back") if seen < 3 => 500,
        Some("back") => 200,
        _ => 404,
    };
    Answer::status(status).body("receiver says hi")
}

impl Receiver {
    pub fn start(rt: &tokio::runtime::Runtime) -> Receiver {
        let receiver = edgehook_testkit::receiver::Receiver::builder()
            .tls(&["127.0.0.1"])
            .answer_by(by_path);
        Receiver(rt.block_on(receiver.start()))
    }

    pub fn url(&self, path: &str) -> String {
        self.0.url(path)
    }

    /// The requests received on `path` so far.
    pub fn on(&self, path: &str) -> Vec<Received> {
        self.0.received_on(path)
    }

    /// Waits (up to [`WAIT`]) until `path` has received `n` requests; returns them all (fewer
    /// if the wait ran out).
    pub fn wait_for(&self, path: &str, n: usize) -> Vec<Received> {
        let _ = edgehook_testkit::poll(WAIT, POLL, || self.on(path).len() >= n);
        self.on(path)
    }

    /// The runtime-config table that makes Spin trust this receiver's CA for 127.0.0.1, and
    /// the CA file (name, bytes) it names, to be written beside it.
    fn client_tls(&self) -> (String, (String, Vec<u8>)) {
        let table = format!(
            "\n# The test receiver's CA, for HTTPS deliveries to 127.0.0.1.\n[[client_tls]]\n\
             component_ids = [\"{}\"]\nhosts = [\"127.0.0.1\"]\nca_roots_file = \"receiver-ca.pem\"\n",
            spin::COMPONENT_ID
        );
        let file = (
            "receiver-ca.pem".to_owned(),
            self.0.ca_pem().as_bytes().to_vec(),
        );
        (table, file)
    }
}

/// Whether `r` carries a valid signature for `secret` (checked by the testkit, not the
/// component).
pub fn signed_by(secret: &str, r: &Received) -> bool {
    edgehook_testkit::signature::verifies(
        secret,
        r.header("x-service-timestamp"),
        r.header("x-service-signature"),
        &r.body,
    )
}

/// Starts the application with `runtime_config` (plus the receiver's `[[client_tls]]`) and
/// `variables` besides the admin token.
/// The Spin CLI and a `redis-server` of the test's own, or `None` (the test skipped: see the
/// suite's doc) without either.
pub fn spin_and_redis() -> Option<(PathBuf, RedisServer)> {
    let binary = binary_or_skip()?;
    if !redis_installed() {
        skipped("no redis-server on PATH");
        return None;
    }
    Some((binary, start_redis()))
}

pub fn start_spin(
    name: &str,
    binary: PathBuf,
    receiver: &Receiver,
    runtime_config: &str,
    variables: &[(&str, &str)],
) -> SpinApp {
    let (tls, ca_file) = receiver.client_tls();
    let mut vars = vec![
        ("admin_token".to_owned(), ADMIN.to_owned()),
        ("seal_key".to_owned(), SEAL_KEY.to_owned()),
    ];
    vars.extend(
        variables
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string())),
    );
    let options = SpinOptions {
        binary,
        runtime_config: Some(format!("{runtime_config}{tls}")),
        files: vec![ca_file],
        variables: vars,
        start_timeout: Duration::from_secs(120),
    };
    spin::start(name, &[], &options).unwrap_or_else(|e| panic!("{name}: {e:#}"))
}

// ---------------------------------------------------------------------------------------
// Requests and a walk

/// Who a request is from.
#[derive(Clone, Copy)]
pub enum Who<'a> {
    Nobody,
    Operator,
    Bearer(&'a str),
}

/// A request to send.
pub struct Req<'a> {
    method: &'static str,
    path: String,
    who: Who<'a>,
    headers: Vec<(&'a str, &'a str)>,
    body: Vec<u8>,
}

fn req<'a>(method: &'static str, path: impl Into<String>, who: Who<'a>) -> Req<'a> {
    Req {
        method,
        path: path.into(),
        who,
        headers: Vec::new(),
        body: Vec::new(),
    }
}

pub fn get<'a>(path: impl Into<String>, who: Who<'a>) -> Req<'a> {
    req("GET", path, who)
}

pub fn post<'a>(path: impl Into<String>, who: Who<'a>) -> Req<'a> {
    req("POST", path, who)
}

pub fn delete<'a>(path: impl Into<String>, who: Who<'a>) -> Req<'a> {
    req("DELETE", path, who)
}

pub fn patch<'a>(path: impl Into<String>, who: Who<'a>) -> Req<'a> {
    req("PATCH", path, who)
}

pub fn put<'a>(path: impl Into<String>, who: Who<'a>) -> Req<'a> {
    req("PUT", path, who)
}

impl<'a> Req<'a> {
    /// `body` as `application/json`.
    pub fn json(self, body: &Value) -> Self {
        self.raw_json(body.to_string().as_bytes())
    }

    /// Raw bytes as `application/json`.
    pub fn raw_json(mut self, body: &[u8]) -> Self {
        self.body = body.to_vec();
        self.header("content-type", "application/json")
    }

    pub fn header(mut self, name: &'a str, value: &'a str) -> Self {
        self.headers.push((name, value));
        self
    }
}

/// One response from Spin.
pub struct Resp {
    pub status: u16,
    headers: http::HeaderMap,
    pub text: String,
    pub json: Value,
}

impl Resp {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    pub fn data(&self) -> &Value {
        &self.json["data"]
    }
}

/// Steps against one running Spin application. A failed step is recorded (named with the
/// store) and the walk goes on; [`Walk::report`] fails with all of them.
pub struct Walk {
    /// `spin-sqlite`, `spin-redis`, ...: named in every failure.
    store: &'static str,
    app: SpinApp,
    rt: tokio::runtime::Runtime,
    client: HttpClient,
    failures: Vec<String>,
    /// Steps not run because an earlier one failed.
    skipped: Vec<String>,
}

impl Walk {
    pub fn new(store: &'static str, app: SpinApp, rt: tokio::runtime::Runtime) -> Walk {
        Walk {
            store,
            app,
            rt,
            client: HttpClient::new(),
            failures: Vec::new(),
            skipped: Vec::new(),
        }
    }

    /// Goes on with `app` (a restart of the application, e.g. with other variables): the
    /// previous one is stopped.
    pub fn restart(&mut self, app: SpinApp) {
        self.app = app;
    }

    /// The application's temporary directory (its state directory is `state/`).
    pub fn app_dir(&self) -> &std::path::Path {
        self.app.dir()
    }

    /// Records a failed step.
    pub fn fail(&mut self, step: &str, what: impl std::fmt::Display) {
        let line = format!("{step} on {}: {what}", self.store);
        eprintln!("FAILED {line}");
        self.failures.push(line);
    }

    /// Checks a field of a step's result; `ok` back.
    pub fn check(&mut self, step: &str, ok: bool, what: impl std::fmt::Display) -> bool {
        if !ok {
            self.fail(step, what);
        }
        ok
    }

    /// Notes a step not run because `needs` failed.
    pub fn skip(&mut self, step: &str, needs: &str) {
        eprintln!("skip   {step} on {} (needs {needs})", self.store);
        self.skipped.push(format!("{step} (needs {needs})"));
    }

    /// Sends one request; a transport error comes back as status 0.
    pub fn send(&self, r: &Req<'_>) -> Resp {
        let mut builder =
            http::Request::builder()
                .method(r.method)
                .uri(format!("{}{}", self.app.base(), r.path));
        match r.who {
            Who::Nobody => {}
            Who::Operator => builder = builder.header("authorization", format!("Bearer {ADMIN}")),
            Who::Bearer(t) => builder = builder.header("authorization", format!("Bearer {t}")),
        }
        for (n, v) in &r.headers {
            builder = builder.header(*n, *v);
        }
        let request = builder
            .body(Full::new(Bytes::from(r.body.clone())))
            .expect("request");
        let sent = self.rt.block_on(self.client.send(request));
        match sent {
            Ok((head, body)) => {
                let text = String::from_utf8_lossy(&body).into_owned();
                Resp {
                    status: head.status.as_u16(),
                    headers: head.headers,
                    json: serde_json::from_str(&text).unwrap_or(Value::Null),
                    text,
                }
            }
            Err(e) => Resp {
                status: 0,
                headers: http::HeaderMap::new(),
                text: format!("no response: {e:#}"),
                json: Value::Null,
            },
        }
    }

    /// A request that must answer `want`; `None` (and a recorded failure) otherwise. Every
    /// answer must carry its request id in the JSON body and in `X-Request-Id`.
    pub fn call(&mut self, step: &str, want: u16, r: Req<'_>) -> Option<Resp> {
        let resp = self.send(&r);
        if resp.status != want {
            let got = format!("expected {want}, got {} {}", resp.status, resp.text);
            self.fail(step, got);
            return None;
        }
        let rid = resp.json["requestId"].as_str();
        let header = resp.header("x-request-id");
        self.check(
            step,
            rid.is_some_and(|r| r.starts_with("req_")) && rid == header,
            format!("requestId {rid:?} in the body, X-Request-Id {header:?}"),
        );
        eprintln!("ok     {step} on {} ({want})", self.store);
        Some(resp)
    }

    /// A request answered with the error envelope: its status and `error.code`.
    pub fn refused(&mut self, step: &str, (status, code): (u16, &str), r: Req<'_>) -> Option<Resp> {
        let resp = self.call(step, status, r)?;
        let got = resp.json["error"]["code"].as_str().unwrap_or_default();
        let what = format!("expected error code {code}, got {}", resp.text);
        self.check(step, got == code, what).then_some(resp)
    }

    /// `GET path` as the operator until `done` holds of its `data` (up to [`WAIT`]).
    pub fn poll(&mut self, step: &str, path: &str, done: impl Fn(&Value) -> bool) -> Option<Resp> {
        let polled = edgehook_testkit::poll(WAIT, Duration::from_millis(25), || {
            let resp = self.send(&get(path, Who::Operator));
            if resp.status == 200 && done(resp.data()) {
                Ok(resp)
            } else {
                Err(format!("{} {}", resp.status, resp.text))
            }
        });
        match polled {
            Ok(resp) => {
                eprintln!("ok     {step} on {}", self.store);
                Some(resp)
            }
            Err(last) => {
                let last = last.unwrap_or_default();
                self.fail(step, format!("not within {WAIT:?}; last: {last}"));
                None
            }
        }
    }

    /// Ends the walk now (a later step needs what this one did not give): fails with every
    /// failure so far.
    pub fn stop(&self, needed: &str) -> ! {
        self.fail_with(Some(needed));
        unreachable!("fail_with panics when stopped");
    }

    /// Fails with every failure so far, if any.
    pub fn report(&self) {
        self.fail_with(None);
    }

    fn fail_with(&self, stopped: Option<&str>) {
        if self.failures.is_empty() && stopped.is_none() {
            return;
        }
        let stopped = stopped.map_or(String::new(), |what| {
            format!(" (walk stopped: {what} is needed further on)")
        });
        let skipped = match self.skipped.len() {
            0 => String::new(),
            n => format!("\n{n} step(s) not run:\n  {}", self.skipped.join("\n  ")),
        };
        panic!(
            "{} step(s) failed on {}{stopped}:\n  {}{skipped}\n\
             --- the last lines of Spin's output ---\n{}",
            self.failures.len(),
            self.store,
            self.failures.join("\n  "),
            self.app.log_tail(30)
        );
    }
}
