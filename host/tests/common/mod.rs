//! The harness shared by the process-level tests: the real `edgehook` binary as a child
//! process with its output lines, temporary directories, a runtime, and a loopback receiver.

use bytes::Bytes;
use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::Value;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read as _, Write as _};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_edgehook");
/// How long any wait may take before the test fails.
pub const DEADLINE: Duration = Duration::from_secs(60);

/// A running `edgehook` process with its output lines.
pub struct Proc {
    pub child: Child,
    lines: Receiver<String>,
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

/// A fresh temporary directory for this test process.
pub fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("edgehook-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// A two-thread runtime.
pub fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

/// A loopback receiver that counts requests per delivery id and answers 200, except that
/// while `hold` is set it keeps requests waiting (in flight) until released.
pub struct TestReceiver {
    /// Its port on 127.0.0.1.
    pub port: u16,
    /// Requests received per delivery id.
    pub counts: Arc<Mutex<BTreeMap<String, usize>>>,
    /// While set, requests are held (in flight) until `release` is notified.
    pub hold: Arc<std::sync::atomic::AtomicBool>,
    /// Releases held requests.
    pub release: Arc<tokio::sync::Notify>,
    /// How many requests were held.
    pub held: Arc<std::sync::atomic::AtomicUsize>,
}

/// Starts a receiver on `rt`.
pub fn receiver(rt: &tokio::runtime::Runtime) -> TestReceiver {
    use std::sync::atomic::Ordering;
    let r = TestReceiver {
        port: 0,
        counts: Arc::default(),
        hold: Arc::default(),
        release: Arc::default(),
        held: Arc::default(),
    };
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let (c, hold, release, held) = (
        r.counts.clone(),
        r.hold.clone(),
        r.release.clone(),
        r.held.clone(),
    );
    rt.spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let (c, hold, release, held) = (c.clone(), hold.clone(), release.clone(), held.clone());
            tokio::spawn(async move {
                let svc = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                    let (c, hold, release, held) =
                        (c.clone(), hold.clone(), release.clone(), held.clone());
                    async move {
                        let id = req
                            .headers()
                            .get("x-service-delivery-id")
                            .and_then(|v| v.to_str().ok())
                            .unwrap_or("")
                            .to_owned();
                        *c.lock().expect("lock").entry(id).or_default() += 1;
                        if hold.load(Ordering::SeqCst) {
                            held.fetch_add(1, Ordering::SeqCst);
                            let released = release.notified();
                            if hold.load(Ordering::SeqCst) {
                                released.await;
                            }
                        }
                        Ok::<_, std::convert::Infallible>(hyper::Response::new(Full::new(
                            Bytes::from_static(b"ok"),
                        )))
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    TestReceiver { port, ..r }
}

// ---------------------------------------------------------------------------------------
// redis-server

/// A `redis-server` child on a loopback port; killed on drop.
pub struct RedisServer {
    child: Child,
    /// Its port on 127.0.0.1.
    pub port: u16,
    dir: PathBuf,
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl RedisServer {
    /// `redis://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
}

/// A port of 127.0.0.1 that was free a moment ago.
pub fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("free port");
    l.local_addr().expect("addr").port()
}

/// Whether a Redis answers `PING` on the port.
pub fn pong(port: u16) -> bool {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(1)));
    let mut buf = [0u8; 7];
    s.write_all(b"PING\r\n").is_ok() && s.read_exact(&mut buf).is_ok() && &buf == b"+PONG\r\n"
}

/// Starts `redis-server` on a free loopback port, without persistence, in a temporary working
/// directory of its own; waits until it answers `PING`. Panics if it is not installed (see
/// [`redis_installed`]) or does not start.
pub fn start_redis() -> RedisServer {
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = temp_dir(&format!("redis-server-{n}"));
    // The free port may be taken between our probe and redis' bind: then it exits, try again.
    for _ in 0..5 {
        let port = free_port();
        let log = std::fs::File::create(dir.join("redis.log")).expect("redis log file");
        let spawned = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .current_dir(&dir)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log file"))
            .stderr(log)
            .spawn();
        let child = match spawned {
            Ok(c) => c,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => panic!(
                "redis-server is not installed (not on PATH): these tests need it. On Debian: \
                 apt-get install redis-server (.ci/run installs it)"
            ),
            Err(e) => panic!("cannot start redis-server: {e}"),
        };
        let mut server = RedisServer {
            child,
            port,
            dir: dir.clone(),
        };
        let end = Instant::now() + DEADLINE;
        loop {
            if pong(port) {
                return server;
            }
            if server
                .child
                .try_wait()
                .expect("redis-server status")
                .is_some()
            {
                break; // exited: most likely the port was taken
            }
            assert!(
                Instant::now() < end,
                "redis-server did not answer on port {port}; its log:\n{}",
                std::fs::read_to_string(dir.join("redis.log")).unwrap_or_default()
            );
            std::thread::park_timeout(Duration::from_millis(10));
        }
        // Keep the directory for the next try.
        server.dir = PathBuf::new();
    }
    panic!(
        "redis-server exited at start five times; its last log:\n{}",
        std::fs::read_to_string(dir.join("redis.log")).unwrap_or_default()
    );
}

/// Whether `redis-server` can be run (is on `PATH`).
pub fn redis_installed() -> bool {
    Command::new("redis-server")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Whether the Redis tests can run: `redis-server` is on `PATH`. When it is not, prints a
/// loud SKIPPED line and the test passes, so that README's test command works on a machine
/// without Redis; under CI (`CI` set) it fails instead: `.ci/run` installs Redis.
pub fn redis_or_skip() -> bool {
    if redis_installed() {
        return true;
    }
    let ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "0" && v != "false");
    assert!(
        !ci,
        "redis-server is not on PATH, and CI is set: .ci/run installs it (apt-get install \
         redis-server)"
    );
    // Straight to stderr: the test harness captures `eprintln!` of a passing test.
    let _ = writeln!(
        std::io::stderr(),
        "\n==================== SKIPPED: no redis-server on PATH ====================\n"
    );
    false
}
