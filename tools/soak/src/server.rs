//! The server under soak: the real `edgehook serve` binary as a child process, its log lines
//! counted as they come, and its memory read from `/proc/<pid>`.

use crate::memory::Sample;
use crate::shared::lock;
use anyhow::{Context as _, Result, bail};
use serde_json::Value;
use std::collections::BTreeMap;
use std::io::{BufRead as _, BufReader, Write as _};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How many unexpected lines are kept to show.
const KEEP_LINES: usize = 20;

/// What the server printed, counted.
#[derive(Debug, Clone, Default)]
pub struct Logs {
    /// Lines read (stdout and stderr).
    pub lines: u64,
    /// JSON lines per (level, msg).
    pub by_level_msg: BTreeMap<(String, String), u64>,
    /// Lines that are not expected: `error` level, `warn` other than a failed delivery
    /// attempt, anything on stderr (the component reports internal failures there), anything
    /// that is not a JSON log line.
    pub unexpected: u64,
    /// The first few of them.
    pub unexpected_lines: Vec<String>,
    /// Requests the server answered with a 5xx (from its request log lines).
    pub server_5xx: u64,
    /// The address from the `listening` line.
    pub listening: Option<String>,
    /// Whether the `stopped` line (clean shutdown) was printed.
    pub stopped: bool,
}

impl Logs {
    fn unexpected(&mut self, line: &str) {
        self.unexpected += 1;
        if self.unexpected_lines.len() < KEEP_LINES {
            self.unexpected_lines.push(line.chars().take(400).collect());
        }
    }

    fn stdout_line(&mut self, line: &str) {
        self.lines += 1;
        let Ok(v) = serde_json::from_str::<Value>(line) else {
            self.unexpected(line);
            return;
        };
        let level = v["level"].as_str().unwrap_or("?").to_owned();
        let msg = v["msg"].as_str().unwrap_or("?").to_owned();
        match (level.as_str(), msg.as_str()) {
            ("info", "listening") => self.listening = v["addr"].as_str().map(str::to_owned),
            ("info", "stopped") => self.stopped = true,
            ("info", "request") => {
                if v["status"].as_str().is_some_and(|s| s.starts_with('5')) {
                    self.server_5xx += 1;
                }
            }
            ("info", _) | ("warn", "delivery attempt") => {}
            // Its loopback receivers are plain http: the start's warning is expected.
            ("warn", m) if m == edgehook_runtime::net::RELAXED => {}
            _ => self.unexpected(line),
        }
        *self.by_level_msg.entry((level, msg)).or_default() += 1;
    }
}

/// A running `edgehook serve`.
pub struct ServerProc {
    child: Child,
    /// Its log, counted.
    pub logs: Arc<Mutex<Logs>>,
    /// `127.0.0.1:port`.
    pub addr: String,
}

/// Reads `/proc/<pid>/status` and `/proc/<pid>/fd`.
pub fn sample(pid: u32) -> Option<Sample> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| -> Option<u64> {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    };
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count() as u64;
    Some(Sample {
        rss_kib: field("VmRSS:")?,
        hwm_kib: field("VmHWM:")?,
        threads: field("Threads:")?,
        fds,
        ..Sample::default()
    })
}

impl ServerProc {
    /// Starts `exe serve` on a loopback port with its store in `data_dir`, the admin token
    /// `token`, http and private targets allowed and `settings` (`--set key=value`). Waits (up to a
    /// minute) for it to listen.
    /// Every line it prints is also appended to `log_file`.
    pub fn start(
        exe: &Path,
        data_dir: &Path,
        token: &str,
        settings: &[(String, String)],
        log_file: &Path,
    ) -> Result<ServerProc> {
        let mut cmd = Command::new(exe);
        cmd.arg("serve")
            .arg("--listen")
            .arg("127.0.0.1:0")
            .arg("--data-dir")
            .arg(data_dir)
            .arg("--allow-http")
            .arg("--allow-private-targets");
        for (k, v) in settings {
            cmd.arg("--set").arg(format!("{k}={v}"));
        }
        // Nothing from the caller's environment may change the server (e.g. EDGEHOOK_KV).
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("EDGEHOOK_") {
                cmd.env_remove(&name);
            }
        }
        // The token through the environment keeps it out of the process list.
        cmd.env("EDGEHOOK_ADMIN_TOKEN", token)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd
            .spawn()
            .with_context(|| format!("starting {}", exe.display()))?;
        let logs: Arc<Mutex<Logs>> = Arc::default();
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log_file)
            .with_context(|| format!("opening {}", log_file.display()))?;
        let file = Arc::new(Mutex::new(std::io::BufWriter::new(file)));
        if let Some(out) = child.stdout.take() {
            let (logs, file) = (logs.clone(), file.clone());
            std::thread::spawn(move || {
                for line in BufReader::new(out).lines().map_while(Result::ok) {
                    let _ = writeln!(lock(&file), "{line}");
                    lock(&logs).stdout_line(&line);
                }
                let _ = lock(&file).flush();
            });
        }
        if let Some(err) = child.stderr.take() {
            let logs = logs.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(err).lines().map_while(Result::ok) {
                    let _ = writeln!(lock(&file), "stderr: {line}");
                    let mut logs = lock(&logs);
                    logs.lines += 1;
                    logs.unexpected(&format!("stderr: {line}"));
                }
                let _ = lock(&file).flush();
            });
        }
        let mut proc = ServerProc {
            child,
            logs,
            addr: String::new(),
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let listening = lock(&proc.logs).listening.clone();
            if let Some(addr) = listening {
                proc.addr = addr;
                return Ok(proc);
            }
            if let Some(status) = proc.child.try_wait()? {
                bail!(
                    "the server exited ({status}) before listening: {:?}",
                    lock(&proc.logs).unexpected_lines
                );
            }
            if Instant::now() > deadline {
                bail!("the server did not listen within a minute");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Its memory, threads and descriptors now.
    pub fn sample(&self) -> Option<Sample> {
        sample(self.pid())
    }

    /// A copy of its log counts.
    pub fn logs(&self) -> Logs {
        lock(&self.logs).clone()
    }

    /// Sends SIGTERM (graceful shutdown) and waits up to `within` for the process to exit;
    /// kills it if it does not.
    pub fn terminate(&mut self, within: Duration) -> Result<ExitStatus> {
        let sent = Command::new("kill")
            .arg("-TERM")
            .arg(self.pid().to_string())
            .status()
            .context("running kill -TERM")?;
        if !sent.success() {
            bail!("kill -TERM {} failed", self.pid());
        }
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait()? {
                return Ok(status);
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let status = self.child.wait()?;
                bail!("the server did not stop within {within:?} of SIGTERM (killed: {status})");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for ServerProc {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_lines_are_sorted_into_expected_and_not() {
        let mut logs = Logs::default();
        let relaxed = format!(
            r#"{{"level":"warn","msg":"{}"}}"#,
            edgehook_runtime::net::RELAXED
        );
        for line in [
            r#"{"level":"info","msg":"listening","addr":"127.0.0.1:5"}"#,
            r#"{"level":"info","msg":"request","status":"201"}"#,
            r#"{"level":"info","msg":"request","status":"503"}"#,
            r#"{"level":"warn","msg":"delivery attempt","error":"ConnectionRefused"}"#,
            r#"{"level":"warn","msg":"accept failed"}"#,
            relaxed.as_str(),
            r#"{"level":"error","msg":"tick failed"}"#,
            "not json",
            r#"{"level":"info","msg":"stopped"}"#,
        ] {
            logs.stdout_line(line);
        }
        assert_eq!(logs.listening.as_deref(), Some("127.0.0.1:5"));
        assert_eq!(logs.server_5xx, 1);
        assert_eq!(logs.unexpected, 3);
        assert!(logs.stopped);
        assert_eq!(logs.lines, 9);
    }

    #[test]
    fn this_process_can_be_sampled() {
        let s = sample(std::process::id()).expect("/proc of this process");
        assert!(s.rss_kib > 0 && s.threads > 0 && s.fds > 0, "{s:?}");
    }
}
