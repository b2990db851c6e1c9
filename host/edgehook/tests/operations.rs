//! The snippets of docs/operations.md (deploy/ops/) are checked by the tools that
//! run them, where Debian has them: `nginx -t`, `caddy validate`, `systemd-analyze verify`,
//! and for the alert rules `promtool check rules` and `promtool test rules`. `.ci/run`
//! installs nginx, caddy and prometheus (for promtool); without one the check is skipped,
//! and fails under CI.

use crate::common::*;
use std::path::{Path, PathBuf};
use std::process::Command;

fn ops(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../deploy/ops")
        .join(file)
}

/// Whether `tool` is on PATH; under CI its absence fails the test.
fn have(tool: &str) -> bool {
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        assert!(
            std::env::var_os("CI").is_none(),
            "{tool} is not installed (.ci/run installs it)"
        );
        eprintln!("SKIPPED: {tool} is not installed");
    }
    found
}

#[test]
fn the_nginx_snippet_is_valid_nginx() {
    if !have("nginx") {
        return;
    }
    let dir = temp_dir("ops-nginx");
    edgehook_testkit::tls::cert_files(&dir, &["hooks.example.com"]);
    let conf = std::fs::read_to_string(ops("nginx.conf"))
        .expect("nginx.conf")
        .replace("/etc/edgehook/tls", dir.to_str().expect("path"));
    let conf = format!("pid {}/nginx.pid;\n{conf}", dir.display());
    std::fs::write(dir.join("nginx.conf"), conf).expect("write");
    let out = Command::new("nginx")
        .args(["-t", "-q", "-p"])
        .arg(&dir)
        .arg("-e")
        .arg(dir.join("error.log"))
        .arg("-c")
        .arg(dir.join("nginx.conf"))
        .output()
        .expect("nginx -t");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_caddyfile_is_valid_caddy() {
    if !have("caddy") {
        return;
    }
    let out = Command::new("caddy")
        .args(["validate", "--adapter", "caddyfile", "--config"])
        .arg(ops("Caddyfile"))
        .env("HOME", temp_dir("ops-caddy"))
        .output()
        .expect("caddy validate");
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_systemd_unit_is_valid_where_systemd_analyze_runs() {
    // `systemd-analyze verify` needs a systemd to talk to in some containers: it is only
    // run where it works on a known-good unit first.
    let probe = Command::new("systemd-analyze").args(["--version"]).output();
    if !probe.is_ok_and(|o| o.status.success()) {
        eprintln!("SKIPPED: no systemd-analyze");
        return;
    }
    let unit = std::fs::read_to_string(ops("edgehook.service")).expect("unit");
    for key in [
        "ExecStart=",
        "ExecReload=/bin/kill -HUP $MAINPID",
        "User=edgehook",
        "Restart=on-failure",
    ] {
        assert!(unit.contains(key), "{key}");
    }
    let out = Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(ops("edgehook.service"))
        .output()
        .expect("systemd-analyze");
    let text = String::from_utf8_lossy(&out.stderr).into_owned();
    // A binary that is not installed here is the only complaint allowed.
    let complaints: Vec<&str> = text
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.contains("/usr/local/bin/edgehook"))
        .collect();
    assert!(complaints.is_empty(), "{text}");
}

#[test]
fn the_alert_rules_are_valid_and_fire_when_they_should() {
    if !have("promtool") {
        return;
    }
    for args in [
        &["check", "rules", "alerts.yml"][..],
        &["test", "rules", "alerts.test.yml"][..],
    ] {
        let out = Command::new("promtool")
            .args(args)
            .current_dir(ops(""))
            .output()
            .expect("promtool");
        assert!(
            out.status.success(),
            "promtool {args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // Every metric an alert names is one serve exposes (docs/operations.md's table).
    let rules = std::fs::read_to_string(ops("alerts.yml")).expect("alerts.yml");
    let guide = std::fs::read_to_string(ops("../../docs/operations.md")).expect("guide");
    let named: std::collections::BTreeSet<&str> = rules
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| w.starts_with("edgehook_"))
        .map(|w| w.trim_end_matches("_bucket"))
        .collect();
    assert!(named.len() >= 8, "{named:?}");
    for metric in named {
        assert!(
            guide.contains(&format!("`{metric}`")),
            "{metric} is not in the guide"
        );
    }
}
