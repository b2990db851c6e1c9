//! Command-line conventions of `edgehook-soak`: `--help` and `-h`, doing nothing else (no
//! server is built or started) and listing the exit codes; an unknown flag or a bad duration
//! is a usage error (exit 2).

use edgehook_testkit::command::{check_help_and_usage, exit_codes, run};
use edgehook_testkit::temp_dir;

/// The binary under test.
const SOAK: &str = env!("CARGO_BIN_EXE_edgehook-soak");

#[test]
fn help_and_usage_errors_follow_the_conventions() {
    let dir = temp_dir("conventions-soak-help");
    check_help_and_usage(SOAK, "edgehook-soak", &dir);
    let (out, _) = run(SOAK, &["--help"], &dir);
    let help = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(exit_codes(&help), ["0", "1", "2", "101"], "{help}");
    let (out, _) = run(SOAK, &["--duration", "0s"], &dir);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("at least 1 s"), "{err}");
}
