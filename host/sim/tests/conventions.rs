//! Command-line conventions of `edgehook-sim`: `--help` and `-h`, doing nothing else; an
//! unknown flag is a usage error (exit 2); the exit codes its help lists are the ones it
//! uses; no progress line when its output is not a terminal, and a summary at the end.

use edgehook_testkit::command::{check_help_and_usage, exit_codes, run, text};
use edgehook_testkit::temp_dir;

/// The binary under test.
const SIM: &str = env!("CARGO_BIN_EXE_edgehook-sim");

#[test]
fn help_and_usage_errors_follow_the_conventions() {
    check_help_and_usage(SIM, "edgehook-sim", &temp_dir("conventions-sim-help"));
}

#[test]
fn the_exit_codes_in_the_help_are_the_ones_used() {
    let dir = temp_dir("conventions-sim-exit");
    let (out, _) = run(SIM, &["--help"], &dir);
    let help = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(exit_codes(&help), ["0", "1", "2", "101"], "{help}");
    // 1: a check that fails (too few events to disable the failing endpoints).
    let (out, _) = run(SIM, &["--subscriptions", "3", "--events", "2"], &dir);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("the ledger does not balance"));
    // 2: an invalid value.
    let (out, _) = run(SIM, &["--events", "many"], &dir);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
}

#[test]
fn no_progress_line_off_a_terminal_and_a_summary_at_the_end() {
    let dir = temp_dir("conventions-sim-progress");
    // Output to pipes, as in CI or `> log`: no carriage return anywhere; and 0, a run that
    // succeeds (enough events for 5 failures in a row to disable an endpoint).
    let (out, _) = run(SIM, &["--subscriptions", "3", "--events", "8"], &dir);
    let shown = text(&out);
    assert_eq!(out.status.code(), Some(0), "{shown}");
    assert!(!shown.contains('\r'), "{shown:?}");
    assert!(shown.contains("ledger balances"), "the summary: {shown}");
}
