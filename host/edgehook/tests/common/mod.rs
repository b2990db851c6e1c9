//! The harness shared by the process-level tests: the real `edgehook` binary as a child
//! process with its output lines (the receiver, temporary directories, a runtime and the
//! deadline are [`edgehook_testkit`]'s).

use serde_json::Value;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, channel};
use std::time::Instant;

pub use edgehook_testkit::receiver::{Answer, Receiver};
pub use edgehook_testkit::{DEADLINE, rt, temp_dir, wait_for};

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_edgehook");

/// A running `edgehook` process with its output lines.
pub struct Proc {
    pub child: Child,
    lines: mpsc::Receiver<String>,
    /// Every line read so far.
    pub seen: Vec<String>,
}

impl Proc {
    pub fn start(args: &[&str], dir: &Path) -> Proc {
        Self::start_with_env(args, dir, &[])
    }

    /// Starts `edgehook` with extra environment variables.
    pub fn start_with_env(args: &[&str], dir: &Path, env: &[(&str, &str)]) -> Proc {
        let mut command = Command::new(BIN);
        command
            .args(args)
            .envs(env.iter().copied())
            .current_dir(dir);
        Self::spawn(command)
    }

    /// Starts `command` (which runs `edgehook` in the end, e.g. through `sh -c`), reading
    /// its output lines.
    pub fn spawn(mut command: Command) -> Proc {
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start edgehook");
        let (tx, lines) = channel();
        for out in [
            Box::new(child.stdout.take().expect("stdout")) as Box<dyn std::io::Read + Send>,
            Box::new(child.stderr.take().expect("stderr")),
        ] {
            let tx = tx.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(out).lines().map_while(Result::ok) {
                    if tx.send(line).is_err() {
                        return;
                    }
                }
            });
        }
        Proc {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// Waits (up to the deadline) for a line matching `pred`; returns it.
    pub fn wait_for(&mut self, what: &str, pred: impl Fn(&str) -> bool) -> String {
        if let Some(l) = self.seen.iter().find(|l| pred(l)) {
            return l.clone();
        }
        let end = Instant::now() + DEADLINE;
        while let Some(left) = end.checked_duration_since(Instant::now()) {
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if pred(&line) {
                        return line;
                    }
                }
                Err(_) => break,
            }
        }
        panic!(
            "timed out waiting for {what}; output so far:\n{}",
            self.seen.join("\n")
        );
    }

    /// Waits (up to the deadline) for a line matching `pred` among the lines after the first
    /// `from` of `seen`; returns its index in `seen` and the line.
    pub fn wait_for_after(
        &mut self,
        from: usize,
        what: &str,
        pred: impl Fn(&str) -> bool,
    ) -> (usize, String) {
        let end = Instant::now() + DEADLINE;
        let mut next = from;
        loop {
            while next < self.seen.len() {
                if pred(&self.seen[next]) {
                    return (next, self.seen[next].clone());
                }
                next += 1;
            }
            let Some(left) = end.checked_duration_since(Instant::now()) else {
                break;
            };
            match self.lines.recv_timeout(left) {
                Ok(line) => self.seen.push(line),
                Err(_) => break,
            }
        }
        panic!(
            "timed out waiting for {what}; output so far:\n{}",
            self.seen.join("\n")
        );
    }

    /// Takes every line printed so far into `seen`.
    pub fn drain(&mut self) -> &[String] {
        while let Ok(line) = self.lines.try_recv() {
            self.seen.push(line);
        }
        &self.seen
    }

    /// The address from the `listening` log line.
    pub fn address(&mut self) -> String {
        let line = self.wait_for("the listening line", |l| l.contains("\"msg\":\"listening"));
        let v: Value = serde_json::from_str(&line).expect("json log line");
        v["addr"].as_str().expect("addr").to_owned()
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The test kit's receiver (200 `ok`, every request kept), started on `rt`.
pub fn receiver(rt: &tokio::runtime::Runtime) -> Receiver {
    rt.block_on(Receiver::start())
}

/// How many requests `receiver` got per delivery id (`X-Service-Delivery-Id`; none: "").
pub fn per_delivery(receiver: &Receiver) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for r in receiver.received() {
        let id = r.header("x-service-delivery-id").unwrap_or("").to_owned();
        *counts.entry(id).or_default() += 1;
    }
    counts
}

/// `POST /v1/webhooks` for `url` and `event` with API key `key` on the server at `base`: the
/// status and the body.
pub fn post_subscription(
    rt: &tokio::runtime::Runtime,
    base: &str,
    key: &str,
    url: &str,
    event: &str,
) -> (u16, String) {
    let partner = edgehook::cli::Remote::new(base, key).expect("client");
    let body = format!(r#"{{"url":"{url}","eventTypes":["{event}"]}}"#);
    rt.block_on(partner.call(
        "POST",
        "/v1/webhooks",
        Some(body.into_bytes()),
        &[("content-type".into(), "application/json".into())],
    ))
    .expect("create")
}

/// `serve` on a free port, delivering to loopback receivers, with one `--set`.
pub fn serve_to_loopback(setting: &'static str) -> [&'static str; 7] {
    [
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--allow-http",
        "--allow-private-targets",
        "--set",
        setting,
    ]
}

/// The address of `server` (a `serve` started in `dir`), an operator client with its admin
/// token, and an API key of client `acme` that operator issued.
pub fn operator_and_key(
    rt: &tokio::runtime::Runtime,
    dir: &Path,
    server: &mut Proc,
) -> (String, edgehook::cli::Remote, String) {
    let base = format!("http://{}", server.address());
    let token = std::fs::read_to_string(dir.join("edgehook-data/admin-token")).expect("token");
    let operator = edgehook::cli::Remote::new(&base, token.trim()).expect("operator");
    let (status, issued) = rt
        .block_on(operator.call("POST", "/internal/v1/clients/acme/keys", None, &[]))
        .expect("issue a key");
    assert_eq!(status, 201, "{issued}");
    let key = serde_json::from_str::<Value>(&issued).expect("json")["data"]["apiKey"]
        .as_str()
        .expect("apiKey")
        .to_owned();
    (base, operator, key)
}

/// `POST /v1/webhooks` with `body` and API key `key` on the server at `base`; expects 201
/// and returns the `data`.
pub fn create_subscription(
    rt: &tokio::runtime::Runtime,
    base: &str,
    key: &str,
    body: &Value,
) -> Value {
    let partner = edgehook::cli::Remote::new(base, key).expect("client");
    let json_type = [("content-type".to_owned(), "application/json".to_owned())];
    let (status, text) = rt
        .block_on(partner.call(
            "POST",
            "/v1/webhooks",
            Some(body.to_string().into_bytes()),
            &json_type,
        ))
        .expect("create");
    assert_eq!(status, 201, "{text}");
    serde_json::from_str::<Value>(&text).expect("json")["data"].clone()
}

/// Publishes `load` as an event of `event` through the operator API; expects 202.
pub fn publish_event(
    rt: &tokio::runtime::Runtime,
    operator: &edgehook::cli::Remote,
    event: &str,
    load: &[u8],
) {
    let headers = [
        ("content-type".to_owned(), "application/json".to_owned()),
        ("x-service-event".to_owned(), event.to_owned()),
    ];
    let (status, text) = rt
        .block_on(operator.call("POST", "/internal/v1/events", Some(load.to_vec()), &headers))
        .expect("publish");
    assert_eq!(status, 202, "{text}");
}

/// `edgehook <args> --server base` in `dir`: whether it succeeded, and its output (standard
/// output, then standard error).
pub fn run_cli(dir: &std::path::Path, base: &str, args: &[&str]) -> (bool, String) {
    let out = std::process::Command::new(BIN)
        .args(args)
        .args(["--server", base])
        .current_dir(dir)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run edgehook");
    (out.status.success(), edgehook_testkit::command::text(&out))
}
