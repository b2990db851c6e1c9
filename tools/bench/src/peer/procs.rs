//! The peer section's processes and what they cost: a throwaway PostgreSQL cluster, a Redis
//! with persistence, Svix's server and `edgehook serve`, each a child process on loopback,
//! killed on drop; the CPU time and the memory of a process and its descendants, from `/proc`.

use anyhow::{Context as _, Result, bail, ensure};
use std::collections::HashMap;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// Child processes and the directories they keep, stopped and removed on drop (the last
/// started first).
#[derive(Default)]
pub struct Procs {
    children: Vec<(&'static str, Child, PathBuf)>,
    dirs: Vec<PathBuf>,
}

impl Drop for Procs {
    fn drop(&mut self) {
        for (_, child, _) in self.children.iter_mut().rev() {
            let _ = child.kill();
            let _ = child.wait();
        }
        for dir in &self.dirs {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

impl Procs {
    /// A fresh directory for `name`, removed with the processes.
    pub fn dir(&mut self, name: &str) -> Result<PathBuf> {
        let dir = edgehook_testkit::try_temp_dir(&format!("bench-peer-{name}"))?;
        self.dirs.push(dir.clone());
        Ok(dir)
    }

    /// Starts `cmd` as the part `name`, its output to `<dir>/<name>.log`; its pid.
    pub fn spawn(&mut self, name: &'static str, mut cmd: Command, dir: &Path) -> Result<u32> {
        let log = dir.join(format!("{name}.log"));
        let out = std::fs::File::create(&log)?;
        let child = cmd
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()
            .with_context(|| format!("starting {name}"))?;
        let pid = child.id();
        self.children.push((name, child, log));
        Ok(pid)
    }

    /// Fails, with the last lines of its log, if the part `name` has exited.
    pub fn check(&mut self, name: &str) -> Result<()> {
        for (n, child, log) in &mut self.children {
            if *n == name
                && let Some(status) = child.try_wait()?
            {
                bail!("{name} exited ({status}); its log:\n{}", tail(log, 30));
            }
        }
        Ok(())
    }
}

/// The last `n` lines of the file at `path`.
pub fn tail(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Where PostgreSQL's programs are: `$EDGEHOOK_BENCH_PG_BIN`, else the newest
/// `/usr/lib/postgresql/<version>/bin` (Debian's `postgresql` package).
fn pg_bin() -> Result<PathBuf> {
    if let Some(dir) = std::env::var_os("EDGEHOOK_BENCH_PG_BIN") {
        return Ok(PathBuf::from(dir));
    }
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let version = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").exists().then_some((version, bin))
        })
        .collect();
    found.sort();
    found.pop().map(|(_, bin)| bin).context(
        "no PostgreSQL: install Debian's postgresql package (apt-get install postgresql), \
         or set EDGEHOOK_BENCH_PG_BIN to the directory of initdb and postgres",
    )
}

/// The uid and gid of the `postgres` account when this process runs as root (PostgreSQL
/// refuses to run as root), else `None`.
fn postgres_account() -> Result<Option<(u32, u32)>> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    let uid = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse::<u32>().ok());
    if uid != Some(0) {
        return Ok(None);
    }
    let passwd = std::fs::read_to_string("/etc/passwd")?;
    let line = passwd
        .lines()
        .find(|l| l.starts_with("postgres:"))
        .context("running as root and no postgres account to run PostgreSQL as")?;
    let fields: Vec<&str> = line.split(':').collect();
    Ok(Some((fields[2].parse()?, fields[3].parse()?)))
}

/// A throwaway PostgreSQL cluster in a fresh directory (`initdb`, trust authentication on
/// loopback, user `postgres`), its server on a free port; the port and the server's pid.
/// Durable as PostgreSQL ships (fsync, synchronous commit); `max_connections` 150 so that
/// Svix's default pool of 100 fits.
pub fn start_postgres(procs: &mut Procs) -> Result<(u16, u32)> {
    let bin = pg_bin()?;
    let dir = procs.dir("postgres")?;
    let data = dir.join("data");
    let account = postgres_account()?;
    let as_account = |cmd: &mut Command| {
        if let Some((uid, gid)) = account {
            cmd.uid(uid).gid(gid);
        }
    };
    if let Some((uid, gid)) = account {
        std::os::unix::fs::chown(&dir, Some(uid), Some(gid))?;
    }
    let mut initdb = Command::new(bin.join("initdb"));
    initdb
        .current_dir(&dir)
        .args([
            "-U",
            "postgres",
            "-A",
            "trust",
            "-E",
            "UTF8",
            "--no-sync",
            "-D",
        ])
        .arg(&data)
        .stdout(Stdio::null());
    as_account(&mut initdb);
    let out = initdb.output().context("running initdb")?;
    ensure!(
        out.status.success(),
        "initdb failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let port = edgehook_testkit::free_port();
    let mut server = Command::new(bin.join("postgres"));
    server
        .current_dir(&dir)
        .arg("-D")
        .arg(&data)
        .args(["-p", &port.to_string(), "-k"])
        .arg(&dir)
        .args([
            "-c",
            "listen_addresses=127.0.0.1",
            "-c",
            "max_connections=150",
        ]);
    as_account(&mut server);
    let pid = procs.spawn("postgres", server, &dir)?;
    Ok((port, pid))
}

/// `redis-server` on a free loopback port with the persistence Svix's docs ask for (an
/// append-only file, synced every second) and no eviction; its port and pid.
pub fn start_redis(procs: &mut Procs) -> Result<(u16, u32)> {
    let dir = procs.dir("redis")?;
    let port = edgehook_testkit::free_port();
    let mut cmd = Command::new("redis-server");
    cmd.args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--dir"])
        .arg(&dir)
        .args([
            "--appendonly",
            "yes",
            "--appendfsync",
            "everysec",
            "--save",
            "",
        ])
        .args(["--maxmemory-policy", "noeviction"]);
    let pid = procs.spawn("redis", cmd, &dir)?;
    Ok((port, pid))
}

/// Waits up to `within` for a TCP listener on the loopback `port`, failing early if the part
/// `name` has exited.
pub async fn listening(procs: &mut Procs, name: &str, port: u16, within: Duration) -> Result<()> {
    let deadline = std::time::Instant::now() + within;
    loop {
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            return Ok(());
        }
        procs.check(name)?;
        ensure!(
            std::time::Instant::now() < deadline,
            "{name} did not listen on {port} within {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// One process's line of `/proc/<pid>/stat`: its parent, and its CPU ticks (its own, and its
/// ended children's it has waited for).
fn stat(pid: u32) -> Option<(u32, u64, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let fields: Vec<&str> = stat
        .get(stat.rfind(')')? + 1..)?
        .split_whitespace()
        .collect();
    let num = |i: usize| fields.get(i)?.parse::<u64>().ok();
    let ppid = num(1)? as u32;
    Some((ppid, num(11)? + num(12)?, num(13)? + num(14)?))
}

/// `roots` and every live descendant of theirs.
fn tree(roots: &[u32]) -> Vec<u32> {
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse().ok()) else {
            continue;
        };
        if let Some((ppid, _, _)) = stat(pid) {
            children.entry(ppid).or_default().push(pid);
        }
    }
    let mut all = roots.to_vec();
    let mut i = 0;
    while i < all.len() {
        all.extend(children.get(&all[i]).into_iter().flatten());
        i += 1;
    }
    all
}

/// CPU time (user and system) of `roots` and their descendants so far: the live ones', and
/// the ended ones' their parents waited for (PostgreSQL's backends, say). Taken before and
/// after a run, the difference is what the run cost the system.
pub fn tree_cpu(roots: &[u32]) -> Duration {
    let ticks: u64 = tree(roots)
        .into_iter()
        .filter_map(stat)
        .map(|(_, own, children)| own + children)
        .sum();
    // USER_HZ is 100 on Linux.
    Duration::from_millis(ticks * 10)
}

/// The memory of `roots` and their descendants, in bytes: the sum of their proportional set
/// sizes (`Pss` in `smaps_rollup`: a page shared by k processes counts 1/k in each, so
/// PostgreSQL's shared buffers count once), or their `VmRSS` where `Pss` cannot be read.
pub fn tree_memory(roots: &[u32]) -> u64 {
    let field = |text: &str, name: &str| -> Option<u64> {
        let line = text.lines().find(|l| l.starts_with(name))?;
        Some(line.split_whitespace().nth(1)?.parse::<u64>().ok()? * 1024)
    };
    tree(roots)
        .into_iter()
        .filter_map(|pid| {
            let pss = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup"))
                .ok()
                .and_then(|t| field(&t, "Pss:"));
            pss.or_else(|| {
                let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
                field(&status, "VmRSS:")
            })
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tree_counts_this_process_and_its_children() {
        if stat(std::process::id()).is_none() {
            return; // no /proc
        }
        // `cat` waits on its stdin until it is killed.
        let mut child = Command::new("cat")
            .stdin(Stdio::piped())
            .spawn()
            .expect("a child");
        let me = std::process::id();
        let all = tree(&[me]);
        assert!(all.contains(&me) && all.contains(&child.id()), "{all:?}");
        assert!(tree_memory(&[me]) > 0);
        let _ = child.kill();
        let _ = child.wait();
    }
}
