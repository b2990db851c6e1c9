//! The project's command-line conventions, for its binaries and their tests: how a tool
//! ends on an error ([`exit_on_error`]), and running a binary the way the conventions are
//! checked (in a directory of the test's, with nothing on stdin and no `EDGEHOOK_*` variable
//! of the caller's environment).

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Ends the process on an error the way every binary of the project does: `error: ` and the
/// error with its causes on stderr, exit status 1. Does nothing on `Ok`.
pub fn exit_on_error(outcome: anyhow::Result<()>) {
    if let Err(e) = outcome {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}

/// How long a `--help` (or a usage error) may take: it parses arguments and prints, nothing
/// more.
pub const QUICK: Duration = Duration::from_secs(10);

/// Runs `bin args` in `dir` with no `EDGEHOOK_*` variables and nothing on stdin; returns its
/// output and how long it took.
pub fn run(bin: &str, args: &[&str], dir: &Path) -> (Output, Duration) {
    let mut command = Command::new(bin);
    command.args(args).current_dir(dir).stdin(Stdio::null());
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("EDGEHOOK_") {
            command.env_remove(name);
        }
    }
    let started = Instant::now();
    let out = command.output().expect("run");
    (out, started.elapsed())
}

/// Standard output then standard error, as text.
pub fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Checks the conventions every binary keeps for `--help`, `-h` and an unknown flag: help
/// on stdout (`Usage: <name>`), exit 0, quickly; a usage error on stderr, exit 2, nothing on
/// stdout; and nothing left behind in `dir`.
pub fn check_help_and_usage(bin: &str, name: &str, dir: &Path) {
    for flag in ["--help", "-h"] {
        let (out, took) = run(bin, &[flag], dir);
        let shown = text(&out);
        assert_eq!(out.status.code(), Some(0), "{name} {flag}: {shown}");
        assert!(
            String::from_utf8_lossy(&out.stdout).contains(&format!("Usage: {name}")),
            "{name} {flag}: {shown}"
        );
        assert!(took < QUICK, "{name} {flag} took {took:?}");
    }
    let (out, _) = run(bin, &["--no-such-flag"], dir);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{name} --no-such-flag: {err}");
    assert!(err.contains("Usage: "), "{name} --no-such-flag: {err}");
    assert!(out.stdout.is_empty(), "{name} --no-such-flag");
    let left: Vec<_> = std::fs::read_dir(dir).expect("dir").collect();
    assert!(left.is_empty(), "{name}: help made nothing: {left:?}");
}

/// The exit codes a command's `--help` lists under "Exit status:", in order.
pub fn exit_codes(help: &str) -> Vec<&str> {
    let listed = help
        .split("Exit status:")
        .nth(1)
        .expect("exit codes listed");
    listed
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|w| w.bytes().all(|b| b.is_ascii_digit()))
        .collect()
}
