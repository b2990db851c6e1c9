//! Spin (`spin up`) as a child process, for tests and the benchmark: the CLI found at
//! `$SPIN_BIN`, else at `<repo>/../shared/tools/spin` (the copy of Spin 4.0.2 kept beside the
//! repository for tests and CI); an application's files written to a temporary directory of
//! its own; started on a free loopback port; stopped with its whole process group on drop.
//! What the application is (the project's `spin.toml` and component, or the key-value probe)
//! is the caller's: see `edgehook_sim::spin`.

use anyhow::{Context as _, Result, bail};
use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// The Spin CLI to run: `$SPIN_BIN` if set (whether or not it exists: a wrong path is then
/// an error where it is used, not a silent skip), else `<repo>/../shared/tools/spin` if that
/// exists, else `None`.
pub fn find_binary() -> Option<PathBuf> {
    if let Some(bin) = std::env::var_os("SPIN_BIN").filter(|b| !b.is_empty()) {
        return Some(PathBuf::from(bin));
    }
    let beside = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/tools/spin");
    beside.exists().then_some(beside)
}

/// [`find_binary`] for a test: `None` after a loud [`crate::skipped`] line (a failure under
/// CI) when there is no Spin.
pub fn binary_or_skip() -> Option<PathBuf> {
    let found = find_binary();
    if found.is_none() {
        crate::skipped("no Spin binary ($SPIN_BIN unset, no <repo>/../shared/tools/spin)");
    }
    found
}

/// The manifest's file name in the application's directory.
pub const MANIFEST_FILE: &str = "spin.toml";

/// How to run an application.
#[derive(Debug, Clone, Default)]
pub struct SpinOptions {
    /// The Spin CLI.
    pub binary: PathBuf,
    /// The runtime config file's text, if any (none: Spin's default SQLite store).
    pub runtime_config: Option<String>,
    /// The application's files, by name, written into its directory before it starts: the
    /// manifest [`MANIFEST_FILE`], the components it names (by paths relative to it), and
    /// whatever the runtime config names (e.g. a CA certificate).
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
    /// Writes the application's files and the runtime config into a fresh temporary
    /// directory named after `name`, starts `spin up` there on a free loopback port with its
    /// state (the default SQLite store) in that directory, and waits until `/healthz` answers
    /// (with any status).
    pub fn start(name: &str, options: &SpinOptions) -> Result<SpinApp> {
        static N: AtomicUsize = AtomicUsize::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let dir = crate::try_temp_dir(&format!("spin-{name}-{n}"))
            .and_then(|dir| std::fs::create_dir(dir.join("state")).map(|()| dir))
            .with_context(|| format!("creating the directory of Spin application {name}"))?;
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
            let addr = format!("127.0.0.1:{}", crate::free_port());
            let log = std::fs::File::create(dir.join("spin.log"))?;
            let mut command = Command::new(&options.binary);
            command
                .arg("up")
                .arg("--from")
                .arg(dir.join(MANIFEST_FILE))
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
        let mut status_error = None;
        let answered = crate::poll(timeout, crate::POLL, || {
            if http_answers(&self.addr, "/healthz") {
                return Some(true);
            }
            match self.child.try_wait() {
                Ok(None) => None,
                Ok(Some(_)) => Some(false),
                Err(e) => {
                    status_error = Some(e);
                    Some(false)
                }
            }
        });
        if let Some(e) = status_error {
            return Err(e.into());
        }
        match answered {
            Ok(answered) => Ok(answered),
            Err(_) => bail!(
                "spin up did not answer /healthz on {} within {timeout:?}; its output:\n{}",
                self.addr,
                self.log()
            ),
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
