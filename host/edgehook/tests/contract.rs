//! The API contract under Schemathesis, a property-based tester no one here wrote: it reads
//! `docs/openapi.json`, generates requests for every route (valid ones, and ones the
//! document forbids), sends them to a real `serve` and checks every answer against the
//! document: statuses, headers, bodies, that schema-valid requests are accepted and
//! schema-violating ones refused. Once with a partner key over the partner API, once with
//! the admin token over the operator API; any mismatch fails the test. Its settings (checks,
//! the rules JSON Schema cannot say) are `tests/schemathesis/schemathesis.toml` and
//! `hooks.py`; a fixed seed and a bounded number of examples keep it reproducible and about
//! two minutes long.
//!
//! It needs the pinned Schemathesis in `tests/schemathesis/.venv` (`.ci/run` installs it;
//! `$EDGEHOOK_SCHEMATHESIS` names another executable). Without it the test prints
//! `SKIPPED` and passes, unless `CI` is set: then it fails.
//!
//! Deliveries the generated subscriptions make go through an egress proxy on a closed
//! loopback port, so none leaves the machine (and each fails at once).

use crate::common::*;
use edgehook_testkit::skipped;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The repository's root.
fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Examples per operation and phase: enough to find every mismatch the document has had,
/// few enough for CI.
const MAX_EXAMPLES: &str = "50";
/// The seed: the same requests on every run.
const SEED: &str = "1";

/// The Schemathesis executable, or `None` (after a `SKIPPED` line, or a failure under CI)
/// when there is none.
fn schemathesis() -> Option<String> {
    let venv = repo().join("tests/schemathesis/.venv/bin/schemathesis");
    let exe = std::env::var("EDGEHOOK_SCHEMATHESIS")
        .ok()
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| venv.display().to_string());
    let runs = Command::new(&exe)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !runs {
        skipped(&format!(
            "no Schemathesis at {exe} (python3 -m venv tests/schemathesis/.venv && \
             tests/schemathesis/.venv/bin/pip install -r tests/schemathesis/requirements.txt)"
        ));
        return None;
    }
    Some(exe)
}

/// A loopback port nothing listens on (bound, then let go).
fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("address").port()
}

/// Runs Schemathesis over the routes `paths` matches with `token`; its output, and whether
/// it found nothing.
fn run(exe: &str, base: &str, token: &str, paths: &str) -> (bool, String) {
    let dir = repo().join("tests/schemathesis");
    let out = Command::new(exe)
        .current_dir(&dir)
        .args(["--config-file", "schemathesis.toml", "--no-color", "run"])
        .arg(repo().join("docs/openapi.json"))
        .args(["--url", base, "--include-path-regex", paths])
        .args(["--header", &format!("Authorization: Bearer {token}")])
        .args([
            "--max-examples",
            MAX_EXAMPLES,
            "--seed",
            SEED,
            "--workers",
            "1",
        ])
        .args(["--generation-database", "none", "--request-timeout", "60"])
        .args(["--output-truncate", "false"])
        .output()
        .expect("run schemathesis");
    (out.status.success(), edgehook_testkit::command::text(&out))
}

#[test]
fn every_route_answers_as_the_openapi_document_says_under_schemathesis() {
    let Some(exe) = schemathesis() else {
        return;
    };
    let rt = rt();
    let dir = temp_dir("contract");
    let proxy = format!("http://127.0.0.1:{}", closed_port());
    let mut server = Proc::start(
        &[
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--allow-private-targets",
            "--allow-http",
            "--metrics-listen",
            "off",
            "--egress-proxy",
            &proxy,
            // Thousands of requests from one client, hundreds of creates, and deliveries
            // that fail at once.
            "--set",
            "rate_limit_per_minute=0",
            "--set",
            "subscription_limit=100000",
            "--set",
            "attempt_timeout_ms=500",
        ],
        &dir,
    );
    let (base, _operator, key) = operator_and_key(&rt, &dir, &mut server);
    let token = std::fs::read_to_string(dir.join("edgehook-data/admin-token")).expect("token");
    let mut failed = Vec::new();
    for (who, token, paths) in [
        ("partner key", key.as_str(), "^/v1/"),
        ("admin token", token.trim(), "^/(internal/|healthz$)"),
    ] {
        let (passed, text) = run(&exe, &base, token, paths);
        println!("== Schemathesis with the {who} ==\n{text}");
        if !passed {
            failed.push(format!("with the {who}:\n{text}"));
        }
    }
    let lines = server.drain();
    assert!(
        failed.is_empty(),
        "the API and docs/openapi.json disagree:\n{}\nthe server's last lines:\n{}",
        failed.join("\n"),
        lines[lines.len().saturating_sub(40)..].join("\n")
    );
    server.kill();
}
