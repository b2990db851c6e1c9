//! Command-line conventions of `edgehook`: `--help` and `-h` everywhere, doing nothing
//! else; an unknown flag is a usage error (exit 2); the exit codes `edgehook --help` lists
//! are the ones it uses. (The tools' own: `edgehook-sim`, `edgehook-bench` and
//! `edgehook-soak`, each in its crate's tests.)

use edgehook_testkit::command::{QUICK, exit_codes, run, text};
use std::path::Path;

use crate::common::*;

/// Every command of `edgehook` (`[]` is the binary itself), read from the "Commands:" lists
/// of its own help, recursively: a command added later is covered without editing this.
fn commands(dir: &Path) -> Vec<Vec<String>> {
    let mut found = vec![Vec::new()];
    let mut i = 0;
    while i < found.len() {
        let path = found[i].clone();
        let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
        args.push("--help");
        let (out, _) = run(BIN, &args, dir);
        let help = String::from_utf8_lossy(&out.stdout).into_owned();
        let listed = help
            .split("\nCommands:\n")
            .nth(1)
            .map(|rest| rest.split("\n\n").next().unwrap_or(""))
            .unwrap_or("");
        for line in listed.lines() {
            let Some(name) = line.split_whitespace().next() else {
                continue;
            };
            if name != "help" {
                let mut sub = path.clone();
                sub.push(name.to_owned());
                found.push(sub);
            }
        }
        i += 1;
    }
    found
}

#[test]
fn every_command_prints_help_for_help_and_h_and_does_nothing_else() {
    let dir = temp_dir("conventions-help");
    let all = commands(&dir);
    for expected in [
        "serve",
        "listen",
        "keys issue",
        "keys list",
        "keys revoke",
        "subscribe",
        "publish",
        "subscription",
        "subscription enable",
        "subscription disable",
        "delivery show",
        "delivery replay",
    ] {
        assert!(
            all.iter().any(|c| c.join(" ") == expected),
            "{expected} found in the help: {all:?}"
        );
    }
    for command in &all {
        for flag in ["--help", "-h"] {
            let mut args: Vec<&str> = command.iter().map(String::as_str).collect();
            args.push(flag);
            let (out, took) = run(BIN, &args, &dir);
            let shown = text(&out);
            assert_eq!(out.status.code(), Some(0), "edgehook {args:?}: {shown}");
            assert!(
                String::from_utf8_lossy(&out.stdout).contains("Usage: edgehook"),
                "edgehook {args:?}: {shown}"
            );
            assert!(took < QUICK, "edgehook {args:?} took {took:?}");
        }
    }
    let left: Vec<_> = std::fs::read_dir(&dir).expect("dir").collect();
    assert!(left.is_empty(), "help made no data directory: {left:?}");
}

#[test]
fn an_unknown_flag_is_a_usage_error_with_exit_code_2() {
    let dir = temp_dir("conventions-usage");
    let mut runs: Vec<(&str, Vec<String>)> = commands(&dir)
        .into_iter()
        .map(|mut c| {
            c.push("--no-such-flag".to_owned());
            (BIN, c)
        })
        .collect();
    runs.push((BIN, vec!["no-such-command".to_owned()]));
    for (bin, args) in &runs {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (out, _) = run(bin, &args, &dir);
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(2), "{bin} {args:?}: {err}");
        assert!(err.contains("Usage: "), "{bin} {args:?}: {err}");
        assert!(out.stdout.is_empty(), "{bin} {args:?}");
    }
}

#[test]
fn the_exit_codes_in_the_help_are_the_ones_used() {
    let dir = temp_dir("conventions-exit");
    let (out, _) = run(BIN, &["--help"], &dir);
    let help = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(exit_codes(&help), ["0", "1", "2", "101"], "{help}");
    // 1: an error (here: no server to talk to), said on stderr.
    let (out, _) = run(
        BIN,
        &["keys", "issue", "acme", "--server", "http://127.0.0.1:1"],
        &dir,
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stderr).starts_with("error: "));
    // 2: a missing value.
    let (out, _) = run(BIN, &["publish"], &dir);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
}
