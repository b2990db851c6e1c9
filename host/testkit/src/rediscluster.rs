//! A Redis Cluster for tests, on loopback: primaries and replicas as `redis-server` children
//! (`--cluster-enabled yes`, each in a temporary directory of its own for its `nodes.conf`,
//! no data persistence), joined by `redis-cli --cluster create`; and a `redis-server` with a
//! TLS port. Nodes can be killed (`SIGKILL`) and started again on the same port, where they
//! rejoin the cluster (a killed primary comes back as a replica of the one that replaced it).
//! Every child is killed and every directory removed on drop, a failed test's included.

use crate::{DEADLINE, POLL, free_port, temp_dir};
use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// One node of a [`RedisCluster`].
struct Node {
    port: u16,
    bus: u16,
    dir: PathBuf,
    child: Option<Child>,
}

impl Node {
    fn spawn(&mut self, node_timeout_ms: u64) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("redis.log"))
            .expect("redis log file");
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--cluster-port", &self.bus.to_string()])
            .args([
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
            ])
            .args(["--cluster-node-timeout", &node_timeout_ms.to_string()])
            .args(["--save", "", "--appendonly", "no"])
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log file"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start redis-server (cluster node): {e}"));
        self.child = Some(child);
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A Redis Cluster of `redis-server` children on loopback; killed and removed on drop.
pub struct RedisCluster {
    nodes: Vec<Node>,
    node_timeout_ms: u64,
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            node.kill();
            let _ = std::fs::remove_dir_all(&node.dir);
        }
    }
}

/// Sends one command on a new connection to `port` and returns the reply as text: a simple
/// string, an integer or a bulk string as is; an error as `Err`.
pub fn command(port: u16, args: &[&str]) -> Result<String, String> {
    let s = TcpStream::connect(("127.0.0.1", port)).map_err(|e| format!("connect: {e}"))?;
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    let mut req = format!("*{}\r\n", args.len());
    for a in args {
        req.push_str(&format!("${}\r\n{a}\r\n", a.len()));
    }
    (&s).write_all(req.as_bytes())
        .map_err(|e| format!("send: {e}"))?;
    let mut reader = BufReader::new(s);
    let mut line = String::new();
    reader
        .read_line(&mut line)
        .map_err(|e| format!("reply: {e}"))?;
    let line = line.trim_end();
    match line.split_at_checked(1) {
        Some(("+" | ":", rest)) => Ok(rest.to_owned()),
        Some(("-", rest)) => Err(rest.to_owned()),
        Some(("$", len)) => {
            let len: i64 = len.parse().map_err(|_| format!("bad reply {line}"))?;
            if len < 0 {
                return Ok(String::new());
            }
            let mut body = vec![0; len as usize + 2];
            reader
                .read_exact(&mut body)
                .map_err(|e| format!("reply: {e}"))?;
            body.truncate(len as usize);
            String::from_utf8(body).map_err(|e| format!("reply: {e}"))
        }
        _ => Err(format!("unexpected reply {line:?}")),
    }
}

/// Checks `ready` every [`POLL`] until it holds, for at most `within`; otherwise the last
/// thing it saw instead ([`crate::poll`]).
fn until(within: Duration, ready: impl FnMut() -> Result<(), String>) -> Result<(), String> {
    crate::poll(within, POLL, ready).map_err(Option::unwrap_or_default)
}

/// Waits until the node on `port` answers `PING`; panics after [`DEADLINE`].
fn answers(port: u16, what: &str) {
    let pong = until(DEADLINE, || {
        command(port, &["PING"]).and_then(|r| if r == "PONG" { Ok(()) } else { Err(r) })
    });
    if let Err(seen) = pong {
        panic!("{what} on port {port} did not answer PING: {seen}");
    }
}

/// A `field:value` line of an `INFO` or `CLUSTER INFO` reply.
pub fn info_field(info: &str, field: &str) -> Option<String> {
    info.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .map(|v| v.trim().to_owned())
}

impl RedisCluster {
    /// Starts `primaries` primaries with `replicas` replicas each, with
    /// `cluster-node-timeout` `node_timeout_ms` (how long a node may be silent before it is
    /// failed over), joins them and waits until the cluster is [`Self::whole`]. Panics if
    /// `redis-server` or `redis-cli` is missing (see `redis::redis_or_skip`).
    pub fn start(primaries: usize, replicas: usize, node_timeout_ms: u64) -> RedisCluster {
        static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let run = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let count = primaries * (1 + replicas);
        let mut cluster = RedisCluster {
            nodes: Vec::new(),
            node_timeout_ms,
        };
        for i in 0..count {
            let mut node = Node {
                port: free_port(),
                bus: free_port(),
                dir: temp_dir(&format!("redis-cluster-{run}-{i}")),
                child: None,
            };
            node.spawn(node_timeout_ms);
            cluster.nodes.push(node);
        }
        for node in &cluster.nodes {
            answers(node.port, "a cluster node");
        }
        let addresses: Vec<String> = cluster
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let out = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(&addresses)
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .expect("run redis-cli --cluster create");
        assert!(
            out.status.success(),
            "redis-cli --cluster create failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        cluster.wait_whole(DEADLINE);
        cluster
    }

    /// The nodes' ports, in the order they were started.
    pub fn ports(&self) -> Vec<u16> {
        self.nodes.iter().map(|n| n.port).collect()
    }

    /// `redis+cluster://127.0.0.1:p,...` (every node a seed).
    pub fn url(&self) -> String {
        let seeds: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        format!("redis+cluster://{}", seeds.join(","))
    }

    /// The ports of the running nodes that are primaries now.
    pub fn primaries(&self) -> Vec<u16> {
        self.nodes
            .iter()
            .filter(|n| n.child.is_some())
            .filter(|n| {
                command(n.port, &["INFO", "replication"])
                    .is_ok_and(|i| info_field(&i, "role").as_deref() == Some("master"))
            })
            .map(|n| n.port)
            .collect()
    }

    /// Kills the node on `port` with `SIGKILL` (it keeps its port and directory).
    pub fn kill(&mut self, port: u16) {
        let node = self.node(port);
        node.kill();
    }

    /// Stops (`SIGSTOP`, `stop` true) or resumes (`SIGCONT`) the node on `port`: a node that
    /// falls behind without failing, as a replica on a slow link does.
    pub fn pause(&mut self, port: u16, stop: bool) {
        let node = self.node(port);
        let Some(child) = &node.child else { return };
        let signal = if stop { "-STOP" } else { "-CONT" };
        let _ = Command::new("kill")
            .args([signal, &child.id().to_string()])
            .status();
    }

    /// The ports of the replicas of the primary on `port` (from its `INFO replication`).
    pub fn replicas_of(&self, port: u16) -> Vec<u16> {
        let info = command(port, &["INFO", "replication"]).unwrap_or_default();
        info.lines()
            .filter(|l| l.starts_with("slave"))
            .filter_map(|l| l.split(',').find_map(|f| f.strip_prefix("port=")))
            .filter_map(|p| p.parse().ok())
            .collect()
    }

    /// Starts the node on `port` again (empty: no data persistence; its `nodes.conf` tells it
    /// which cluster it belongs to) and waits until it answers `PING`.
    pub fn restart(&mut self, port: u16) {
        let timeout = self.node_timeout_ms;
        let node = self.node(port);
        node.kill();
        node.spawn(timeout);
        answers(port, "the restarted node");
    }

    fn node(&mut self, port: u16) -> &mut Node {
        self.nodes
            .iter_mut()
            .find(|n| n.port == port)
            .unwrap_or_else(|| panic!("no cluster node on port {port}"))
    }

    /// Whether the cluster is whole: every node runs and says `cluster_state:ok` and knows
    /// every node, and every primary that serves slots has a replica linked to it. `Err`
    /// says what is not.
    pub fn whole(&self) -> Result<(), String> {
        let count = self.nodes.len().to_string();
        for node in &self.nodes {
            if node.child.is_none() {
                return Err(format!("node {} is down", node.port));
            }
            let info = command(node.port, &["CLUSTER", "INFO"])?;
            if info_field(&info, "cluster_state").as_deref() != Some("ok") {
                return Err(format!("node {}: cluster_state is not ok", node.port));
            }
            if info_field(&info, "cluster_known_nodes").as_deref() != Some(count.as_str()) {
                return Err(format!("node {} does not know every node yet", node.port));
            }
            let replication = command(node.port, &["INFO", "replication"])?;
            match info_field(&replication, "role").as_deref() {
                Some("master") => {
                    let myself = command(node.port, &["CLUSTER", "MYID"])?;
                    let nodes = command(node.port, &["CLUSTER", "NODES"])?;
                    let serves = nodes
                        .lines()
                        .any(|l| l.starts_with(&myself) && l.split(' ').nth(8).is_some());
                    let linked = info_field(&replication, "connected_slaves")
                        .and_then(|n| n.parse::<u32>().ok())
                        .unwrap_or(0);
                    if serves && linked == 0 {
                        return Err(format!("primary {} has no replica linked", node.port));
                    }
                }
                Some("slave") => {
                    if info_field(&replication, "master_link_status").as_deref() != Some("up") {
                        return Err(format!("replica {} is not linked yet", node.port));
                    }
                }
                other => return Err(format!("node {}: role {other:?}", node.port)),
            }
        }
        Ok(())
    }

    /// Waits (polling) at most `within` until the cluster is [`Self::whole`]; panics with
    /// what is still missing otherwise.
    pub fn wait_whole(&self, within: Duration) {
        if let Err(seen) = until(within, || self.whole()) {
            panic!("the Redis Cluster was not whole within {within:?}: {seen}");
        }
    }
}

/// A `redis-server` answering TLS only, on a loopback port, with a certificate for
/// `127.0.0.1` issued by a CA made for it; killed and removed on drop.
pub struct TlsRedis {
    child: Child,
    /// Its TLS port on 127.0.0.1.
    pub port: u16,
    /// The CA that issued its certificate, as PEM (what a client must trust).
    pub ca_pem: String,
    /// The directory holding the certificates (`ca.pem` among them).
    pub dir: PathBuf,
}

impl Drop for TlsRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl TlsRedis {
    /// Starts it and waits until its port accepts connections.
    pub fn start() -> TlsRedis {
        let dir = temp_dir("redis-tls");
        let ca_pem = crate::tls::cert_files(&dir, &["127.0.0.1"]);
        std::fs::write(dir.join("ca.pem"), &ca_pem).expect("write ca.pem");
        let port = free_port();
        let log = std::fs::File::create(dir.join("redis.log")).expect("redis log file");
        let child = Command::new("redis-server")
            .args(["--port", "0", "--bind", "127.0.0.1"])
            .args(["--tls-port", &port.to_string()])
            .args(["--tls-cert-file", "cert.pem", "--tls-key-file", "key.pem"])
            .args(["--tls-ca-cert-file", "ca.pem", "--tls-auth-clients", "no"])
            .args(["--save", "", "--appendonly", "no"])
            .current_dir(&dir)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log file"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start redis-server with TLS: {e}"));
        let mut server = TlsRedis {
            child,
            port,
            ca_pem,
            dir,
        };
        let up = until(DEADLINE, || {
            if let Ok(Some(status)) = server.child.try_wait() {
                return Err(format!("redis-server exited: {status}"));
            }
            TcpStream::connect(("127.0.0.1", port))
                .map(drop)
                .map_err(|e| e.to_string())
        });
        if let Err(seen) = up {
            panic!(
                "redis-server with TLS did not listen on {port}: {seen}; its log:\n{}",
                std::fs::read_to_string(server.dir.join("redis.log")).unwrap_or_default()
            );
        }
        server
    }

    /// `rediss://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("rediss://127.0.0.1:{}", self.port)
    }
}

/// One Redis Cluster (3 primaries, 1 replica each) for the tests of this process that run
/// at the same time and kill no node; it stops when the last of them drops its handle.
pub fn shared_cluster() -> std::sync::Arc<RedisCluster> {
    use std::sync::{Arc, Mutex, Weak};
    static SHARED: Mutex<Weak<RedisCluster>> = Mutex::new(Weak::new());
    let mut slot = SHARED.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(cluster) = slot.upgrade() {
        return cluster;
    }
    let cluster = Arc::new(RedisCluster::start(3, 1, 2000));
    *slot = Arc::downgrade(&cluster);
    cluster
}
