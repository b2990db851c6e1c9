//! The project's own `spin.toml` under a real `spin up`, for the Spin test suite
//! (`host/tests/spin.rs`) and the benchmark's `spin` section: the same `.wasm` the rest of the
//! host embeds ([`crate::COMPONENT_WASM`]), written to a temporary directory beside a copy of
//! `spin.toml` whose `source` points at it. Everything else of the manifest is the project's,
//! except outbound hosts a caller adds for a receiver on loopback.
//!
//! The Spin CLI is found at `$SPIN_BIN`, else at `<repo>/../shared/tools/spin` (the copy of
//! Spin 4.0.2 kept beside the repository for tests and CI; see [`find_binary`]).

use anyhow::{Context as _, Result, bail};
use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// The project's Spin manifest, as committed.
pub const MANIFEST: &str = include_str!("../../spin.toml");
/// The project's example runtime config for Redis, as committed.
pub const REDIS_RUNTIME_CONFIG: &str = include_str!("../../deploy/runtime-config.redis.toml");
/// The component id in `spin.toml` that runs the service.
pub const COMPONENT_ID: &str = "edgehook";

/// The Spin CLI to run: `$SPIN_BIN` if set (whether or not it exists: a wrong path is then
/// an error where it is used, not a silent skip), else `<repo>/../shared/tools/spin` if that
/// exists, else `None`.
pub fn find_binary() -> Option<PathBuf> {
    if let Some(bin) = std::env::var_os("SPIN_BIN").filter(|b| !b.is_empty()) {
        return Some(PathBuf::from(bin));
    }
    let beside = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/tools/spin");
    beside.exists().then_some(beside)
}

/// A TOML basic string holding `s`.
fn toml_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// [`MANIFEST`] with the component's `source` set to `wasm` and `extra_outbound_hosts`
/// appended to its `allowed_outbound_hosts`; every other line as committed. Fails if either
/// line is not where this expects it (then the manifest changed shape: update this too).
pub fn manifest(wasm: &Path, extra_outbound_hosts: &[&str]) -> Result<String> {
    let table = format!("[component.{COMPONENT_ID}]");
    let mut out = String::with_capacity(MANIFEST.len() + 256);
    let (mut in_component, mut source, mut hosts) = (false, false, false);
    for line in MANIFEST.lines() {
        let trimmed = line.trim_start();
        if trimmed.starts_with('[') {
            in_component = trimmed == table;
        }
        if in_component && trimmed.starts_with("source") && trimmed.contains('=') {
            out.push_str(&format!(
                "source = {}\n",
                toml_str(&wasm.display().to_string())
            ));
            source = true;
            continue;
        }
        if in_component && trimmed.starts_with("allowed_outbound_hosts") {
            let Some(open) = line.find('[') else {
                bail!("spin.toml: allowed_outbound_hosts is not a one-line array: {line}");
            };
            let (head, rest) = line.split_at(open + 1);
            out.push_str(head);
            for host in extra_outbound_hosts {
                out.push_str(&toml_str(host));
                out.push_str(", ");
            }
            out.push_str(rest);
            out.push('\n');
            hosts = true;
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    if !source || !hosts {
        bail!("spin.toml: no `source` or no `allowed_outbound_hosts` line in {table}");
    }
    Ok(out)
}

/// [`REDIS_RUNTIME_CONFIG`] with the store's `url` replaced by `url` and without the
/// `[outbound_networking]` table (its `block_networks = ["private"]` would refuse a receiver
/// on loopback); every other line as committed.
pub fn redis_runtime_config(url: &str) -> Result<String> {
    let mut out = String::with_capacity(REDIS_RUNTIME_CONFIG.len());
    let (mut table, mut replaced) = (String::new(), false);
    for line in REDIS_RUNTIME_CONFIG.lines() {
        let trimmed = line.trim_start();
        if trimmed.starts_with('[') {
            table = trimmed.to_owned();
        }
        if table == "[outbound_networking]" {
            continue;
        }
        if table == "[key_value_store.default]" && trimmed.starts_with("url") {
            out.push_str(&format!("url = {}\n", toml_str(url)));
            replaced = true;
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    if !replaced {
        bail!("deploy/runtime-config.redis.toml: no `url` line in [key_value_store.default]");
    }
    Ok(out)
}

/// How to run the application.
#[derive(Debug, Clone, Default)]
pub struct SpinOptions {
    /// The Spin CLI.
    pub binary: PathBuf,
    /// Added to the component's `allowed_outbound_hosts` (e.g. `http://127.0.0.1:*`).
    pub extra_outbound_hosts: Vec<String>,
    /// The runtime config file's text, if any (none: Spin's default SQLite store).
    pub runtime_config: Option<String>,
    /// Files written beside the runtime config (e.g. a CA certificate it names), by name.
    pub files: Vec<(String, Vec<u8>)>,
    /// Spin variables, set as `SPIN_VARIABLE_<NAME>` (e.g. `("admin_token", "...")`).
    pub variables: Vec<(String, String)>,
    /// How long start-up may take (Spin compiles the component first).
    pub start_timeout: Duration,
}

/// A running `spin up`; stopped (SIGKILL) and its directory removed on drop.
pub struct SpinApp {
    child: Child,
    dir: PathBuf,
    /// Its loopback address, `127.0.0.1:<port>`.
    pub addr: String,
    /// The process id of `spin up`, which leads a process group of its own (its trigger
    /// process is in it).
    pub pid: u32,
}

impl SpinApp {
    /// Writes the component, the manifest and the runtime config into a fresh temporary
    /// directory named after `name`, starts `spin up` on a free loopback port with its state
    /// (the default SQLite store) in that directory, and waits until `/healthz` answers.
    pub fn start(name: &str, options: &SpinOptions) -> Result<SpinApp> {
        static N: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "edgehook-spin-{name}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("state"))
            .with_context(|| format!("creating {}", dir.display()))?;
        let wasm = dir.join("edgehook_component.wasm");
        std::fs::write(&wasm, crate::COMPONENT_WASM)?;
        let hosts: Vec<&str> = options
            .extra_outbound_hosts
            .iter()
            .map(String::as_str)
            .collect();
        std::fs::write(dir.join("spin.toml"), manifest(&wasm, &hosts)?)?;
        for (file, bytes) in &options.files {
            std::fs::write(dir.join(file), bytes)?;
        }
        if let Some(config) = &options.runtime_config {
            std::fs::write(dir.join("runtime-config.toml"), config)?;
        }
        // The free port may be taken between the probe and Spin's bind: then it exits; try
        // again on another.
        let mut last = String::new();
        for _ in 0..5 {
            let port = {
                let probe = std::net::TcpListener::bind("127.0.0.1:0")?;
                probe.local_addr()?.port()
            };
            let addr = format!("127.0.0.1:{port}");
            let log = std::fs::File::create(dir.join("spin.log"))?;
            let mut command = Command::new(&options.binary);
            command
                .arg("up")
                .arg("--from")
                .arg(dir.join("spin.toml"))
                .args(["--listen", &addr])
                .arg("--state-dir")
                .arg(dir.join("state"))
                .current_dir(&dir)
                .stdin(Stdio::null())
                .stdout(log.try_clone()?)
                .stderr(log);
            // A group of its own: `spin up` runs the trigger as a child process, which outlives
            // `spin up` when only that is killed.
            #[cfg(unix)]
            std::os::unix::process::CommandExt::process_group(&mut command, 0);
            if options.runtime_config.is_some() {
                command
                    .arg("--runtime-config-file")
                    .arg(dir.join("runtime-config.toml"));
            }
            for (name, value) in &options.variables {
                command.env(format!("SPIN_VARIABLE_{}", name.to_uppercase()), value);
            }
            let child = match command.spawn() {
                Ok(child) => child,
                Err(e) => {
                    let _ = std::fs::remove_dir_all(&dir);
                    let binary = options.binary.display();
                    return Err(e).with_context(|| format!("starting {binary}"));
                }
            };
            let mut app = SpinApp {
                pid: child.id(),
                child,
                dir: dir.clone(),
                addr,
            };
            match app.wait_ready(options.start_timeout)? {
                true => return Ok(app),
                false => {
                    last = app.log();
                    // Keep the directory for the next try.
                    app.dir = PathBuf::new();
                }
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
        bail!("spin up exited at start five times; its last output:\n{last}")
    }

    /// Polls `/healthz` until it answers (any HTTP status: whether it is 200 is the caller's
    /// check). `Ok(false)`: Spin exited (e.g. the port was taken).
    fn wait_ready(&mut self, timeout: Duration) -> Result<bool> {
        let end = Instant::now() + timeout;
        loop {
            if http_answers(&self.addr, "/healthz") {
                return Ok(true);
            }
            if self.child.try_wait()?.is_some() {
                return Ok(false);
            }
            if Instant::now() > end {
                bail!(
                    "spin up did not answer /healthz on {} within {timeout:?}; its output:\n{}",
                    self.addr,
                    self.log()
                );
            }
            std::thread::park_timeout(Duration::from_millis(20));
        }
    }

    /// `http://127.0.0.1:<port>`.
    pub fn base(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Spin's output so far (its own lines and the component's stderr).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("spin.log")).unwrap_or_default()
    }

    /// The last `lines` lines of [`Self::log`].
    pub fn log_tail(&self, lines: usize) -> String {
        let log = self.log();
        let all: Vec<&str> = log.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// The temporary directory (manifest, component, state, log).
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for SpinApp {
    fn drop(&mut self) {
        // `spin up` and its trigger process: the group `start` made.
        #[cfg(unix)]
        if let Some(group) = rustix::process::Pid::from_raw(self.pid as i32) {
            let _ = rustix::process::kill_process_group(group, rustix::process::Signal::KILL);
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        if !self.dir.as_os_str().is_empty() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// Whether an HTTP server on `addr` answers `GET path` with a status line.
fn http_answers(addr: &str, path: &str) -> bool {
    let Ok(mut s) = TcpStream::connect(addr) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    let mut head = [0u8; 9];
    s.write_all(req.as_bytes()).is_ok() && s.read_exact(&mut head).is_ok() && &head == b"HTTP/1.1 "
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_manifest_copy_changes_only_the_source_and_the_outbound_hosts() {
        let m = manifest(Path::new("/tmp/x \"y\"/c.wasm"), &["http://127.0.0.1:*"]).expect("ok");
        let changed: Vec<(&str, &str)> = MANIFEST
            .lines()
            .zip(m.lines())
            .filter(|(a, b)| a != b)
            .collect();
        assert_eq!(MANIFEST.lines().count(), m.lines().count());
        assert_eq!(changed.len(), 2, "{changed:?}");
        assert_eq!(changed[0].1, r#"source = "/tmp/x \"y\"/c.wasm""#);
        assert!(
            changed[1]
                .1
                .starts_with(r#"allowed_outbound_hosts = ["http://127.0.0.1:*", "https://"#),
            "{changed:?}"
        );
    }

    #[test]
    fn the_redis_runtime_config_copy_has_the_url_and_no_network_block() {
        let c = redis_runtime_config("redis://127.0.0.1:1234").expect("ok");
        assert!(c.contains("\nurl = \"redis://127.0.0.1:1234\"\n"), "{c}");
        assert!(c.contains("type = \"redis\""), "{c}");
        let settings: Vec<&str> = c
            .lines()
            .map(str::trim_start)
            .filter(|l| !l.starts_with('#') && !l.is_empty())
            .collect();
        assert!(
            !settings
                .iter()
                .any(|l| l.starts_with("[outbound_networking]") || l.starts_with("block_networks")),
            "{c}"
        );
        assert_eq!(
            settings.iter().filter(|l| l.starts_with("url")).count(),
            1,
            "{c}"
        );
    }
}
