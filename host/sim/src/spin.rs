//! The project's own `spin.toml` under a real `spin up`, for the Spin test suite
//! (`host/sim/tests/spin.rs`) and the benchmark's `spin` section: the same `.wasm` the rest of
//! the host embeds ([`edgehook_runtime::COMPONENT_WASM`], and the portal's,
//! [`edgehook_runtime::PORTAL_WASM`]), written to a temporary directory beside a copy of
//! `spin.toml` whose `source` lines point at them. Everything else of the manifest
//! is the project's, except outbound hosts a caller adds for a receiver on loopback.
//!
//! Running Spin itself (finding the CLI, the process group, the wait until it answers) is
//! [`edgehook_testkit::spin`]'s.

use anyhow::{Result, bail};
use edgehook_testkit::spin::MANIFEST_FILE;
pub use edgehook_testkit::spin::{SpinApp, SpinOptions, find_binary};
use std::path::Path;

/// The project's Spin manifest, as committed.
pub const MANIFEST: &str = include_str!("../../../spin.toml");
/// The project's example runtime config for Redis, as committed.
pub const REDIS_RUNTIME_CONFIG: &str = include_str!("../../../deploy/runtime-config.redis.toml");
/// The component id in `spin.toml` that runs the service.
pub const COMPONENT_ID: &str = "edgehook";
/// The component's file name beside the manifest copy.
const COMPONENT_FILE: &str = "edgehook_component.wasm";
/// The component id in `spin.toml` that serves the web portal (`/portal/...`).
pub const PORTAL_ID: &str = "portal";
/// The portal's file name beside the manifest copy.
const PORTAL_FILE: &str = "edgehook_portal.wasm";

/// Starts the project's application under `spin up` (see [`SpinApp::start`]): the embedded
/// component and [`manifest`] with `extra_outbound_hosts` (e.g. `http://127.0.0.1:*`), besides
/// `options`' own files.
pub fn start(name: &str, extra_outbound_hosts: &[&str], options: &SpinOptions) -> Result<SpinApp> {
    start_edited(name, extra_outbound_hosts, options, |manifest| manifest)
}

/// [`start`] with the manifest copy passed through `edit` first (a test's operator change,
/// e.g. another key-value label).
pub fn start_edited(
    name: &str,
    extra_outbound_hosts: &[&str],
    options: &SpinOptions,
    edit: impl FnOnce(String) -> String,
) -> Result<SpinApp> {
    let mut options = options.clone();
    options.files.extend([
        (
            COMPONENT_FILE.to_owned(),
            edgehook_runtime::COMPONENT_WASM.to_vec(),
        ),
        (
            PORTAL_FILE.to_owned(),
            edgehook_runtime::PORTAL_WASM.to_vec(),
        ),
        (
            MANIFEST_FILE.to_owned(),
            edit(manifest(Path::new(COMPONENT_FILE), extra_outbound_hosts)?).into_bytes(),
        ),
    ]);
    SpinApp::start(name, &options)
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
/// appended to its `allowed_outbound_hosts`, and the portal's `source` set to the portal's
/// file beside `wasm`; every other line as committed. Fails if a line is not where this
/// expects it (then the manifest changed shape: update this too).
pub fn manifest(wasm: &Path, extra_outbound_hosts: &[&str]) -> Result<String> {
    let table = format!("[component.{COMPONENT_ID}]");
    let portal_table = format!("[component.{PORTAL_ID}]");
    let portal = wasm.with_file_name(PORTAL_FILE);
    let mut out = String::with_capacity(MANIFEST.len() + 256);
    let (mut in_component, mut source, mut hosts) = (false, false, false);
    let (mut in_portal, mut portal_source) = (false, false);
    for line in MANIFEST.lines() {
        let trimmed = line.trim_start();
        if trimmed.starts_with('[') {
            in_component = trimmed == table;
            in_portal = trimmed == portal_table;
        }
        if in_portal && trimmed.starts_with("source") && trimmed.contains('=') {
            out.push_str(&format!(
                "source = {}\n",
                toml_str(&portal.display().to_string())
            ));
            portal_source = true;
            continue;
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
    if !portal_source {
        bail!("spin.toml: no `source` line in {portal_table}");
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
        assert_eq!(changed.len(), 3, "{changed:?}");
        assert_eq!(changed[0].1, r#"source = "/tmp/x \"y\"/c.wasm""#);
        assert_eq!(
            changed[2].1,
            r#"source = "/tmp/x \"y\"/edgehook_portal.wasm""#
        );
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
