//! `spin.toml` and the deployment examples in `deploy/` agree with the component: Spin runs
//! the artifact the build command produces, every `wasi:config` key the component reads is a
//! variable with the component's own default (and nothing else is), the admin token is a
//! required secret, the component gets the `default` key-value store, every API route reaches
//! it, and it may call HTTPS endpoints on any host but never plain HTTP.
//!
//! The checks live in [`problems`]; the `a_manifest_that_*` tests feed it broken copies of the
//! real manifest to show that each check can fail, and says what is wrong.

use edgehook_component::model::config::KEYS;
use std::path::{Path, PathBuf};
use toml::{Table, Value};

/// The component id in `spin.toml` that runs the service.
const COMPONENT: &str = "edgehook";

/// Paths the component must receive (partner API, operator API, tick, health).
const MUST_ROUTE: &[&str] = &[
    "/v1/webhooks",
    "/v1/webhooks/sub_0123456789",
    "/internal/v1/tick",
    "/internal/v1/events",
    "/internal/v1/clients/acme/keys",
    "/healthz",
];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ lives in the repository")
        .to_path_buf()
}

fn read_toml(relative: &str) -> Table {
    let text = std::fs::read_to_string(repo().join(relative))
        .unwrap_or_else(|e| panic!("read {relative}: {e}"));
    text.parse::<Table>()
        .unwrap_or_else(|e| panic!("{relative} is not valid TOML: {e}"))
}

fn spin_manifest() -> Table {
    read_toml("spin.toml")
}

/// `table.a.b.c` as a value, if every step exists.
fn get<'t>(table: &'t Table, path: &[&str]) -> Option<&'t Value> {
    let (last, steps) = path.split_last()?;
    let mut at = table;
    for step in steps {
        at = at.get(*step)?.as_table()?;
    }
    at.get(*last)
}

/// `table.a.b.c` as a string, if it is one.
fn get_str<'t>(table: &'t Table, path: &[&str]) -> Option<&'t str> {
    get(table, path).and_then(Value::as_str)
}

/// What `cargo build ...` in the build command builds, and where the artifact lands.
#[derive(Debug, PartialEq, Eq)]
struct CargoBuild {
    package: Option<String>,
    target: Option<String>,
    /// The profile name (`dev` when none is given).
    profile: String,
    target_dir: String,
}

impl CargoBuild {
    /// Parses `cargo build` flags: `--package`/`-p`, `--target`, `--profile`, `--release`,
    /// `--target-dir`, each as `--flag value` or `--flag=value`.
    fn parse(command: &str) -> Result<Self, String> {
        let words: Vec<&str> = command.split_whitespace().collect();
        if words.get(..2) != Some(&["cargo", "build"][..]) {
            return Err(format!(
                "the build command must be `cargo build ...`, not {command:?}"
            ));
        }
        let mut build = CargoBuild {
            package: None,
            target: None,
            profile: "dev".into(),
            target_dir: "target".into(),
        };
        let mut rest = words[2..].iter();
        while let Some(word) = rest.next() {
            let (flag, inline) = match word.split_once('=') {
                Some((flag, value)) => (flag, Some(value.to_string())),
                None => (*word, None),
            };
            let mut value = || {
                inline
                    .clone()
                    .or_else(|| rest.next().map(|v| v.to_string()))
                    .ok_or(format!("{flag} needs a value in {command:?}"))
            };
            match flag {
                "--package" | "-p" => build.package = Some(value()?),
                "--target" => build.target = Some(value()?),
                "--profile" => build.profile = value()?,
                "--release" | "-r" => build.profile = "release".into(),
                "--target-dir" => build.target_dir = value()?,
                _ => {}
            }
        }
        Ok(build)
    }

    /// The directory cargo names after the profile.
    fn profile_dir(&self) -> &str {
        match self.profile.as_str() {
            "dev" | "test" => "debug",
            "bench" => "release",
            other => other,
        }
    }
}

/// Whether a Spin HTTP route (`/exact`, `/prefix/...`, `:param` segments) matches `path`.
fn route_matches(route: &str, path: &str) -> bool {
    let (pattern, wildcard) = match route.strip_suffix("/...") {
        Some(prefix) => (prefix, true),
        None => (route, false),
    };
    let pattern: Vec<&str> = pattern.split('/').filter(|s| !s.is_empty()).collect();
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let length_ok = if wildcard {
        segments.len() >= pattern.len()
    } else {
        segments.len() == pattern.len()
    };
    length_ok
        && pattern
            .iter()
            .zip(&segments)
            .all(|(p, s)| p.starts_with(':') || p == s)
}

/// Everything wrong with `spin` as the manifest of this component (empty when all is well).
/// `component_crate` is `component/Cargo.toml` and `workspace` the root `Cargo.toml`.
fn problems(spin: &Table, component_crate: &Table, workspace: &Table) -> Vec<String> {
    let mut out = Vec::new();
    let component = |path: &[&str]| {
        let mut full = vec!["component", COMPONENT];
        full.extend_from_slice(path);
        get(spin, &full).cloned()
    };

    if get(spin, &["spin_manifest_version"]).and_then(Value::as_integer) != Some(2) {
        out.push("spin_manifest_version must be 2 (the format Spin 4 reads)".to_string());
    }
    if component(&[]).and_then(|c| c.as_table().cloned()).is_none() {
        out.push(format!("no [component.{COMPONENT}] table"));
        return out;
    }

    // The artifact: what `spin build` produces is what `spin up` loads.
    let crate_name = get_str(component_crate, &["package", "name"]).unwrap_or_default();
    let lib_name = get_str(component_crate, &["lib", "name"])
        .map(str::to_owned)
        .unwrap_or_else(|| crate_name.replace('-', "_"));
    let cdylib = get(component_crate, &["lib", "crate-type"])
        .and_then(Value::as_array)
        .is_some_and(|types| types.iter().any(|t| t.as_str() == Some("cdylib")));
    if !cdylib {
        out.push("component/Cargo.toml must build a cdylib for Spin to load".to_string());
    }
    let command = component(&["build", "command"]);
    match command
        .as_ref()
        .and_then(Value::as_str)
        .map(CargoBuild::parse)
    {
        None => out.push(format!("[component.{COMPONENT}.build] command is missing")),
        Some(Err(e)) => out.push(e),
        Some(Ok(build)) => {
            if build.package.as_deref() != Some(crate_name) {
                out.push(format!(
                    "the build command builds package {:?}, the component crate is {crate_name:?}",
                    build.package
                ));
            }
            match build.target.as_deref() {
                Some(target) if target.starts_with("wasm32-wasip2") => {}
                other => out.push(format!(
                    "the build command must target wasm32-wasip2 (a component), not {other:?}"
                )),
            }
            let builtin = ["dev", "release", "test", "bench"].contains(&build.profile.as_str());
            if !builtin && get(workspace, &["profile", &build.profile]).is_none() {
                out.push(format!(
                    "the build command uses profile {:?}, which Cargo.toml does not define",
                    build.profile
                ));
            }
            let workdir = component(&["build", "workdir"])
                .and_then(|w| w.as_str().map(|w| format!("{}/", w.trim_end_matches('/'))))
                .unwrap_or_default();
            let expected = format!(
                "{workdir}{}/{}/{}/{lib_name}.wasm",
                build.target_dir,
                build.target.as_deref().unwrap_or_default(),
                build.profile_dir()
            );
            let source = component(&["source"]);
            let source = source.as_ref().and_then(Value::as_str);
            if source != Some(expected.as_str()) {
                out.push(format!(
                    "source is {source:?} but the build command produces {expected:?}"
                ));
            }
        }
    }

    // Configuration: KEYS, one for one, with the component's defaults.
    let declared = get(spin, &["variables"])
        .and_then(Value::as_table)
        .cloned()
        .unwrap_or_default();
    let mapped = component(&["variables"])
        .and_then(|v| v.as_table().cloned())
        .unwrap_or_default();
    for (key, default) in KEYS {
        if !key
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        {
            out.push(format!(
                "config key {key:?} is not a valid Spin variable name (a-z, 0-9, _)"
            ));
        }
        match declared.get(*key).and_then(Value::as_table) {
            None => out.push(format!("variable {key} is not declared in [variables]")),
            Some(variable) => {
                let given = variable.get("default").and_then(Value::as_str);
                let required = variable.get("required").and_then(Value::as_bool) == Some(true);
                match default {
                    Some(default) if given != Some(*default) => out.push(format!(
                        "variable {key} has default {given:?}, the component's default is {default:?}"
                    )),
                    Some(_) if required => out.push(format!(
                        "variable {key} has a default in the component and must not be required"
                    )),
                    None if given.is_some() || !required => out.push(format!(
                        "variable {key} has no default in the component: it must be required, \
                         without a default"
                    )),
                    _ => {}
                }
            }
        }
        let template = mapped
            .get(*key)
            .and_then(Value::as_str)
            .map(|t| t.chars().filter(|c| !c.is_whitespace()).collect::<String>());
        if template != Some(format!("{{{{{key}}}}}")) {
            out.push(format!(
                "[component.{COMPONENT}.variables] must map {key} = \"{{{{ {key} }}}}\", found {:?}",
                mapped.get(*key)
            ));
        }
    }
    for key in declared.keys().chain(mapped.keys()) {
        if !KEYS.iter().any(|(k, _)| k == key) {
            out.push(format!(
                "variable {key} is not a config key the component reads (config::KEYS)"
            ));
        }
    }
    let secret = get(&declared, &["admin_token", "secret"]).and_then(Value::as_bool);
    if secret != Some(true) {
        out.push("variable admin_token must be secret = true".to_string());
    }

    // State.
    let stores = component(&["key_value_stores"]).and_then(|v| v.as_array().cloned());
    if !stores.is_some_and(|s| s.iter().any(|s| s.as_str() == Some("default"))) {
        out.push("key_value_stores must contain \"default\" (the component opens it)".into());
    }

    // Routes.
    let routes: Vec<String> = get(spin, &["trigger", "http"])
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|t| t.get("component").and_then(Value::as_str) == Some(COMPONENT))
        .filter_map(|t| t.get("route").and_then(Value::as_str).map(str::to_owned))
        .collect();
    for path in MUST_ROUTE {
        if !routes.iter().any(|r| route_matches(r, path)) {
            out.push(format!(
                "no [[trigger.http]] route sends {path} to {COMPONENT} (routes: {routes:?})"
            ));
        }
    }

    // Outbound: HTTPS to any partner host and port; nothing else.
    let hosts: Vec<String> = component(&["allowed_outbound_hosts"])
        .and_then(|v| v.as_array().cloned())
        .unwrap_or_default()
        .iter()
        .map(|h| h.as_str().unwrap_or("?").to_owned())
        .collect();
    for host in &hosts {
        if !host.starts_with("https://") {
            out.push(format!(
                "allowed_outbound_hosts entry {host:?} permits more than https (http is never allowed)"
            ));
        }
    }
    if !hosts.iter().any(|h| h == "https://*:*") {
        out.push(format!(
            "allowed_outbound_hosts must permit https to any host on any port (\"https://*:*\"): \
             partners choose their URLs; found {hosts:?}"
        ));
    }
    out
}

/// The problems of the real manifest after `mutate`.
fn problems_after(mutate: impl FnOnce(&mut Table)) -> Vec<String> {
    let mut spin = spin_manifest();
    mutate(&mut spin);
    problems(
        &spin,
        &read_toml("component/Cargo.toml"),
        &read_toml("Cargo.toml"),
    )
}

/// `table.a.b.c`, mutably; panics when a step is missing (the real manifest has it).
fn at<'t>(table: &'t mut Table, path: &[&str]) -> &'t mut Value {
    let (last, steps) = path.split_last().expect("a path");
    let mut here = table;
    for step in steps {
        here = here
            .get_mut(*step)
            .and_then(Value::as_table_mut)
            .unwrap_or_else(|| panic!("spin.toml has no {step}"));
    }
    here.get_mut(*last)
        .unwrap_or_else(|| panic!("spin.toml has no {last}"))
}

#[test]
fn spin_toml_matches_the_component() {
    let found = problems_after(|_| {});
    assert!(found.is_empty(), "spin.toml:\n- {}", found.join("\n- "));
}

#[test]
fn the_build_command_is_parsed_as_cargo_reads_it() {
    let build =
        CargoBuild::parse("cargo build -p x --target=wasm32-wasip2 --release").expect("parses");
    assert_eq!(build.package.as_deref(), Some("x"));
    assert_eq!(build.target.as_deref(), Some("wasm32-wasip2"));
    assert_eq!(build.profile_dir(), "release");
    let build = CargoBuild::parse("cargo build --target-dir out --package y").expect("parses");
    assert_eq!(
        (build.profile_dir(), build.target_dir.as_str()),
        ("debug", "out")
    );
    assert!(CargoBuild::parse("npm run build").is_err());
    assert!(route_matches("/...", "/internal/v1/tick"));
    assert!(route_matches("/v1/...", "/v1"));
    assert!(!route_matches("/v1/...", "/internal/v1/tick"));
    assert!(route_matches("/v1/webhooks/:id", "/v1/webhooks/sub_1"));
    assert!(!route_matches("/v1/webhooks", "/v1/webhooks/sub_1"));
}

/// Asserts that the mutation is caught with a message containing `expect`.
fn assert_caught(what: &str, expect: &str, mutate: impl FnOnce(&mut Table)) {
    let found = problems_after(mutate);
    assert!(
        found.iter().any(|p| p.contains(expect)),
        "{what}: expected a problem mentioning {expect:?}, got {found:?}"
    );
}

#[test]
fn a_manifest_that_loads_another_artifact_is_caught() {
    assert_caught("source moved", "source is", |spin| {
        *at(spin, &["component", COMPONENT, "source"]) =
            "target/wasm32-wasip2/release/edgehook_component.wasm".into();
    });
    assert_caught("build profile changed", "source is", |spin| {
        *at(spin, &["component", COMPONENT, "build", "command"]) =
            "cargo build --package edgehook-component --target wasm32-wasip2 --release".into();
    });
    assert_caught("another package built", "package", |spin| {
        *at(spin, &["component", COMPONENT, "build", "command"]) =
            "cargo build --package edgehook-runtime --target wasm32-wasip2 --profile guest".into();
    });
    assert_caught("a core module target", "wasm32-wasip2", |spin| {
        *at(spin, &["component", COMPONENT, "build", "command"]) =
            "cargo build --package edgehook-component --target wasm32-wasip1 --profile guest"
                .into();
    });
    assert_caught("an undefined profile", "does not define", |spin| {
        *at(spin, &["component", COMPONENT, "build", "command"]) =
            "cargo build --package edgehook-component --target wasm32-wasip2 --profile tiny".into();
    });
}

#[test]
fn a_manifest_whose_variables_drift_from_the_component_is_caught() {
    assert_caught(
        "variable not declared",
        "retention_days is not declared",
        |spin| {
            at(spin, &["variables"])
                .as_table_mut()
                .expect("table")
                .remove("retention_days");
        },
    );
    assert_caught("variable not mapped", "must map retention_days", |spin| {
        at(spin, &["component", COMPONENT, "variables"])
            .as_table_mut()
            .expect("table")
            .remove("retention_days");
    });
    assert_caught(
        "default differs",
        "the component's default is \"30\"",
        |spin| {
            *at(spin, &["variables", "retention_days", "default"]) = "31".into();
        },
    );
    assert_caught(
        "mapped to another variable",
        "must map attempt_timeout_ms",
        |spin| {
            *at(
                spin,
                &["component", COMPONENT, "variables", "attempt_timeout_ms"],
            ) = "{{ max_concurrency }}".into();
        },
    );
    assert_caught(
        "a variable the component never reads",
        "log_level",
        |spin| {
            at(spin, &["variables"])
                .as_table_mut()
                .expect("table")
                .insert("log_level".into(), {
                    let mut variable = Table::new();
                    variable.insert("default".into(), "info".into());
                    Value::Table(variable)
                });
        },
    );
    assert_caught("admin token not secret", "secret = true", |spin| {
        at(spin, &["variables", "admin_token"])
            .as_table_mut()
            .expect("table")
            .remove("secret");
    });
    assert_caught(
        "admin token with a default",
        "admin_token has no default",
        |spin| {
            let token = at(spin, &["variables", "admin_token"])
                .as_table_mut()
                .expect("table");
            token.remove("required");
            token.insert("default".into(), "changeme".into());
        },
    );
}

#[test]
fn a_manifest_without_the_store_routes_or_https_is_caught() {
    assert_caught("no key-value store", "key_value_stores", |spin| {
        *at(spin, &["component", COMPONENT, "key_value_stores"]) = Value::Array(Vec::new());
    });
    assert_caught("partner API only", "/internal/v1/tick", |spin| {
        let trigger = at(spin, &["trigger", "http"])
            .as_array_mut()
            .expect("array")
            .first_mut()
            .and_then(Value::as_table_mut)
            .expect("a trigger");
        trigger.insert("route".into(), "/v1/...".into());
    });
    assert_caught(
        "plain http allowed",
        "\"http://*:*\" permits more",
        |spin| {
            at(spin, &["component", COMPONENT, "allowed_outbound_hosts"])
                .as_array_mut()
                .expect("array")
                .push("http://*:*".into());
        },
    );
    assert_caught("any scheme allowed", "\"*://*:*\" permits more", |spin| {
        *at(spin, &["component", COMPONENT, "allowed_outbound_hosts"]) =
            Value::Array(vec!["*://*:*".into()]);
    });
    assert_caught("one host only", "any host on any port", |spin| {
        *at(spin, &["component", COMPONENT, "allowed_outbound_hosts"]) =
            Value::Array(vec!["https://hooks.example.com".into()]);
    });
}

#[test]
fn the_redis_runtime_config_shares_state_and_blocks_private_networks() {
    let config = read_toml("deploy/runtime-config.redis.toml");
    assert_eq!(
        get_str(&config, &["key_value_store", "default", "type"]),
        Some("redis"),
        "the store the component opens (default) is Redis"
    );
    let url = get_str(&config, &["key_value_store", "default", "url"]).unwrap_or_default();
    assert!(
        url.starts_with("redis://") || url.starts_with("rediss://"),
        "{url}"
    );
    let blocked = get(&config, &["outbound_networking", "block_networks"])
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    assert!(
        blocked.iter().any(|n| n.as_str() == Some("private")),
        "block_networks must contain \"private\": {blocked:?}"
    );
}

#[test]
fn the_kubernetes_examples_use_the_component_s_variables_and_the_tick_route() {
    let spinapp = std::fs::read_to_string(repo().join("deploy/kubernetes/spinapp.yaml"))
        .expect("deploy/kubernetes/spinapp.yaml");
    let names: Vec<&str> = spinapp
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- name: "))
        .map(|n| n.trim_matches('"'))
        .collect();
    assert!(
        names.contains(&"admin_token"),
        "the SpinApp sets admin_token"
    );
    for name in &names {
        assert!(
            KEYS.iter().any(|(k, _)| k == name),
            "SpinApp variable {name} is not a config key the component reads"
        );
    }
    assert!(
        spinapp.contains("secretKeyRef"),
        "the admin token comes from a Secret"
    );
    assert!(
        spinapp.contains("loadFromSecret"),
        "the runtime config comes from a Secret"
    );

    let cron = std::fs::read_to_string(repo().join("deploy/kubernetes/tick-cronjob.yaml"))
        .expect("deploy/kubernetes/tick-cronjob.yaml");
    assert!(cron.contains("kind: CronJob"));
    assert!(
        cron.contains("schedule: \"* * * * *\""),
        "tick every minute"
    );
    assert!(cron.contains("/internal/v1/tick"));
    assert!(cron.contains("-X POST"));
    assert!(cron.contains("Authorization: Bearer"));
    assert!(cron.contains("concurrencyPolicy: Forbid"));
}

#[test]
fn spin_toml_routes_the_portal_to_the_portal_component_it_builds() {
    let spin = spin_manifest();
    let routes: Vec<(String, String)> = get(&spin, &["trigger", "http"])
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|t| {
            let route = t.get("route")?.as_str()?.to_owned();
            Some((route, t.get("component")?.as_str()?.to_owned()))
        })
        .collect();
    // Spin sends a request to the most specific route that matches: the longest pattern.
    let owner = |path: &str| {
        routes
            .iter()
            .filter(|(route, _)| route_matches(route, path))
            .max_by_key(|(route, _)| route.len())
            .map(|(_, component)| component.as_str())
    };
    for path in ["/portal", "/portal/", "/portal/app.js"] {
        assert_eq!(owner(path), Some("portal"), "{path}: {routes:?}");
    }
    for path in MUST_ROUTE
        .iter()
        .chain(&["/v1/portal/sessions", "/portals"])
    {
        assert_eq!(owner(path), Some(COMPONENT), "{path}: {routes:?}");
    }
    let command = get_str(&spin, &["component", "portal", "build", "command"]).expect("command");
    let build = CargoBuild::parse(command).expect("a cargo build");
    let portal_crate = read_toml("portal/Cargo.toml");
    assert_eq!(
        build.package.as_deref(),
        get_str(&portal_crate, &["package", "name"])
    );
    let expected = format!(
        "{}/{}/{}/edgehook_portal.wasm",
        build.target_dir,
        build.target.as_deref().unwrap_or_default(),
        build.profile_dir()
    );
    assert_eq!(
        get_str(&spin, &["component", "portal", "source"]),
        Some(expected.as_str())
    );
    // Static files only: no store, no variables, no outbound network.
    let portal = get(&spin, &["component", "portal"])
        .and_then(Value::as_table)
        .expect("[component.portal]");
    for key in ["key_value_stores", "variables", "allowed_outbound_hosts"] {
        assert!(!portal.contains_key(key), "[component.portal] has {key}");
    }
}
