//! `redis-server` as a child process for tests: on a free loopback port, without
//! persistence, in a temporary working directory of its own, killed on drop.

use crate::{DEADLINE, free_port, skipped, temp_dir};
use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

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

    /// What a Redis dump file of its data holds: the server writes one now (`SAVE`, with
    /// `rdbcompression` off so that every value is in it as its bytes) and it is read back.
    pub fn dump_file(&self) -> Vec<u8> {
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).expect("connect to redis");
        s.set_read_timeout(Some(DEADLINE)).expect("timeout");
        for command in ["CONFIG SET rdbcompression no", "SAVE"] {
            s.write_all(format!("{command}\r\n").as_bytes())
                .expect("send");
            let mut answer = [0u8; 5];
            s.read_exact(&mut answer).expect("answer");
            assert_eq!(&answer, b"+OK\r\n", "{command}");
        }
        std::fs::read(self.dir.join("dump.rdb")).expect("dump.rdb")
    }

    /// Stops the server (a store outage), keeping its port and directory for [`Self::restart`].
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Starts the server again on the same port (empty: no persistence) and waits until it
    /// answers `PING`.
    pub fn restart(&mut self) {
        self.stop();
        self.child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("restart redis-server");
        crate::wait_for("redis-server to come back", || pong(self.port));
    }
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
        let answered = crate::poll(DEADLINE, Duration::from_millis(10), || {
            if pong(port) {
                return Some(true);
            }
            let status = server.child.try_wait().expect("redis-server status");
            status.map(|_| false) // exited: most likely the port was taken
        });
        match answered {
            Ok(true) => return server,
            Ok(false) => {}
            Err(_) => panic!(
                "redis-server did not answer on port {port}; its log:\n{}",
                std::fs::read_to_string(dir.join("redis.log")).unwrap_or_default()
            ),
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

/// Whether the Redis tests can run: `redis-server` is on `PATH`. When it is not, the test is
/// [`skipped`] (it passes with a loud line, except under CI).
pub fn redis_or_skip() -> bool {
    if redis_installed() {
        return true;
    }
    skipped("no redis-server on PATH");
    false
}

/// One redis-server for the tests of this process that run at the same time; it stops when
/// the last of them drops its handle.
pub fn shared_redis() -> Arc<RedisServer> {
    static SHARED: Mutex<Weak<RedisServer>> = Mutex::new(Weak::new());
    let mut slot = SHARED.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(server) = slot.upgrade() {
        return server;
    }
    let server = Arc::new(start_redis());
    *slot = Arc::downgrade(&server);
    server
}
