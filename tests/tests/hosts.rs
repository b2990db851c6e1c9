//! The embedding kit's other-language hosts (docs/embedding.md), run on the very component
//! and probe this build embeds (written to a temporary directory): the Node.js host walks the
//! whole story and its receiver verifies the delivery with docs/verify/verify.mjs, with
//! secrets sealed under a `seal_key` (no value of its store holds the secret); its store
//! keeps the key-value contract (the kvprobe); the Python host links every import and calls
//! publish and tick. They need `node` with `npm ci` done in examples/node, and a Python with
//! examples/python/requirements.txt installed (`.ci/run` does both): without them they print
//! `SKIPPED` and pass, except under CI, where they fail.

use edgehook_runtime::{COMPONENT_WASM, KVPROBE_WASM};
use edgehook_testkit::command::{run, text};
use edgehook_testkit::{skipped, temp_dir};
use std::path::{Path, PathBuf};
use std::time::Duration;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ lives in the repository")
        .to_path_buf()
}

/// `file` with `bytes` in a fresh temporary directory of the test's own.
fn written(test: &str, file: &str, bytes: &[u8]) -> PathBuf {
    let path = temp_dir(test).join(file);
    std::fs::write(&path, bytes).expect("write the component");
    path
}

/// examples/node, if `node` runs and its packages are installed.
fn node_example() -> Option<PathBuf> {
    let dir = repo().join("examples/node");
    let has_node = std::process::Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_node || !dir.join("node_modules/@bytecodealliance/jco").is_dir() {
        skipped("no `node`, or no examples/node/node_modules (run `npm ci` in examples/node)");
        return None;
    }
    Some(dir)
}

/// The Python that has the pinned `wasmtime`: `$EDGEHOOK_PYTHON`, else the virtual
/// environment `.ci/run` makes (examples/python/.venv), else `python3`.
fn python() -> Option<String> {
    let venv = repo().join("examples/python/.venv/bin/python");
    let python = std::env::var("EDGEHOOK_PYTHON")
        .ok()
        .filter(|p| !p.is_empty())
        .or_else(|| venv.exists().then(|| venv.display().to_string()))
        .unwrap_or_else(|| "python3".to_owned());
    let has_wasmtime = std::process::Command::new(&python)
        .args(["-c", "import wasmtime"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_wasmtime {
        skipped(&format!(
            "{python} cannot import wasmtime (pip install -r examples/python/requirements.txt)"
        ));
        return None;
    }
    Some(python)
}

/// A host script's run: exit 0 within `limit`, its output shown either way.
fn run_host(program: &str, script: &Path, arg: &Path, limit: Duration) -> String {
    let (out, took) = run(
        program,
        &[&script.display().to_string(), &arg.display().to_string()],
        script.parent().expect("a script in a directory"),
    );
    let shown = text(&out);
    println!("{program} {} ({took:.1?}):\n{shown}", script.display());
    assert_eq!(out.status.code(), Some(0), "{}:\n{shown}", script.display());
    assert!(took < limit, "{} took {took:?}", script.display());
    shown
}

#[test]
fn node_host_delivers_and_its_receiver_verifies_the_signature() {
    let Some(dir) = node_example() else { return };
    let wasm = written("hosts-node", "edgehook_component.wasm", COMPONENT_WASM);
    let shown = run_host(
        "node",
        &dir.join("host.mjs"),
        &wasm,
        Duration::from_secs(60),
    );
    for step in [
        "operator issued a key for client acme",
        "partner subscribed sub_",
        "published evt_",
        "tick: 1 attempted, 1 succeeded, 0 failed",
        "receiver got POST /hook: load.created dlv_",
        "the store holds no signing secret (sealed under seal_key)",
    ] {
        assert!(shown.contains(step), "no `{step}` in:\n{shown}");
    }
    let verified = shown
        .lines()
        .find(|l| l.starts_with("verified: dlv_"))
        .unwrap_or_else(|| panic!("no verified delivery:\n{shown}"));
    assert!(
        verified.contains("body byte for byte as published"),
        "{verified}"
    );
}

#[test]
fn node_hosts_store_keeps_the_key_value_contract() {
    let Some(dir) = node_example() else { return };
    let probe = written("hosts-node-kv", "edgehook_kvprobe.wasm", KVPROBE_WASM);
    let shown = run_host(
        "node",
        &dir.join("check-store.mjs"),
        &probe,
        Duration::from_secs(60),
    );
    let summary = shown
        .lines()
        .find(|l| l.ends_with(" broken"))
        .unwrap_or_else(|| panic!("no summary:\n{shown}"));
    assert!(summary.ends_with(" rules, 0 broken"), "{summary}");
    assert!(!shown.contains("FAIL"), "{shown}");
}

#[test]
fn python_host_links_every_import_and_publishes_and_ticks() {
    let Some(python) = python() else { return };
    let wasm = written("hosts-python", "edgehook_component.wasm", COMPONENT_WASM);
    let script = repo().join("examples/python/host.py");
    let shown = run_host(&python, &script, &wasm, Duration::from_secs(60));
    for step in [
        "linked every import and instantiated the component",
        "published evt_",
        "load.deleted refused: unknown-event-type",
        "tick: 0 attempted",
        "ok: ",
    ] {
        assert!(shown.contains(step), "no `{step}` in:\n{shown}");
    }
}
