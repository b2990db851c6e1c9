//! Command-line conventions of `edgehook-bench`: `--help` and `-h`, doing nothing else (no
//! section runs); an unknown flag or section is a usage error (exit 2); progress as plain
//! lines when stderr is not a terminal, then the table.

use edgehook_testkit::command::{check_help_and_usage, run, text};
use edgehook_testkit::temp_dir;

/// The binary under test.
const BENCH: &str = env!("CARGO_BIN_EXE_edgehook-bench");

#[test]
fn help_and_usage_errors_follow_the_conventions() {
    let dir = temp_dir("conventions-bench-help");
    check_help_and_usage(BENCH, "edgehook-bench", &dir);
    for flag in ["--help", "-h"] {
        let (out, _) = run(BENCH, &[flag], &dir);
        assert!(
            !text(&out).contains("[1/"),
            "no section ran: {}",
            text(&out)
        );
    }
    // A value that is not one of the choices: exit 2 too, naming the choices.
    let (out, _) = run(BENCH, &["no-such-section"], &dir);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("possible values: size, api"), "{err}");
}

#[test]
fn progress_is_plain_lines_off_a_terminal_and_the_table_comes_last() {
    let dir = temp_dir("conventions-bench-progress");
    // Output to pipes, as in CI or `> log`: no carriage return anywhere.
    let (out, _) = run(BENCH, &["size"], &dir);
    let shown = text(&out);
    assert_eq!(out.status.code(), Some(0), "{shown}");
    assert!(!shown.contains('\r'), "{shown:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("[1/1] sizes ..."),
        "progress as plain lines: {shown}"
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("component"),
        "the table: {shown}"
    );
}
